/* test_rank_schedule.c -- the placement planner's per-rank manifests run by
 * one rank (src/sched/rank_schedule.c):
 *   - `rap plan --gpus R --placement owner` of plan 0 (R = 2, 3), merged per
 *     rank: valid for the rank plan; dense kernels on the rank's own share,
 *     sparse ones on the whole batch; an op two parts share computed once;
 *   - running the merged slices on the CPU executor (share rows offset as
 *     the runtime does, rap_slice_rows) gives, against the whole plan run
 *     whole: every row of the sparse columns and the rank's own rows of the
 *     dense ones, for a full and for a short batch;
 *   - refused with the file and line: a move (send/recv), another plan,
 *     another rank count, a missing file; and without ranks in rap train;
 *   - schedule files: share=K/N round trip, the rows a share slice runs,
 *     a kernel reading another share's rows refused.
 *   - rap train --device cpu --gpus 2 --schedule S trains (the merged
 *     fusion runs in sequential mode). */
#include "test.h"

#include "core/core.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "run/input.h"
#include "prep/subplan.h"
#include "run/train.h"
#include "sched/rank_schedule.h"

#include <stdlib.h>
#include <string.h>

#define PLAN "plans/plan0.plan"

/* Rows [r0, r0 + n) of two host columns are equal. */
static bool same_rows(const rap_host_column *a, const rap_host_column *b, int64_t r0, int64_t n)
{
    if (a->kind != b->kind || a->width != b->width)
        return false;
    if (memcmp(a->valid + r0, b->valid + r0, (size_t)n))
        return false;
    if (a->kind != RAP_SPARSE)
        return !memcmp(a->val + r0 * a->width, b->val + r0 * a->width,
                       sizeof(float) * (size_t)(n * a->width));
    for (int64_t r = r0; r < r0 + n; r++) {
        int64_t la = a->off[r + 1] - a->off[r], lb = b->off[r + 1] - b->off[r];
        if (la != lb || memcmp(a->ids + a->off[r], b->ids + b->off[r], sizeof(int64_t) * (size_t)la))
            return false;
    }
    return true;
}

/* rap plan --gpus R --placement owner --batch B/R --out <tmp>/owner_R */
static bool plan_ranks(rap_test_ctx *t, int R, int64_t Bg, const char *extra, char *prefix,
                       size_t n)
{
    snprintf(prefix, n, "%s/rs_owner_%d%s", rap_test_tmpdir(), R, extra[0] ? "_x" : "");
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s plan --plan " PLAN " --gpus %d --batch %lld --placement owner "
             "--out %s --quiet %s", rap_test_bin(), R, (long long)(Bg / R), prefix, extra);
    int rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "rap plan: %s", out);
    return rc == 0;
}

typedef struct {
    rap_plan *p;
    rap_shard_map map;
    int64_t table_rows[RAP_MAX_TABLES];
    int n_dense, n_tables;
} setup_t;

static bool setup(rap_test_ctx *t, int R, setup_t *s)
{
    memset(s, 0, sizeof *s);
    if (rap_plan_load(PLAN, rap_schema_criteo(), &s->p) != RAP_OK) {
        CHECK_MSG(false, "%s", rap_last_error());
        return false;
    }
    bool ok = rap_input_shape(s->p, &s->n_dense, &s->n_tables, s->table_rows) == RAP_OK &&
              rap_shard_plan(s->table_rows, s->n_tables, 16, R, 0, NULL, &s->map) == RAP_OK;
    CHECK_MSG(ok, "%s", rap_last_error());
    return ok;
}

static void teardown(setup_t *s)
{
    rap_shard_map_free(&s->map);
    rap_plan_free(s->p);
}

/* One rank's merged schedule against the whole plan, batch of `rows`. */
static void check_rank(rap_test_ctx *t, setup_t *su, const char *prefix, int R, int r, int64_t Bg,
                       int64_t rows)
{
    rap_plan *rp = NULL;
    rap_fusion rfus, mf;
    memset(&rfus, 0, sizeof rfus);
    int rtab[RAP_MAX_TABLES], nrt = 0;
    REQUIRE_OK(rap_subplan_rank(su->p, su->map.shard[r].table, su->map.shard[r].n_local, false,
                                &rp, &rfus, rtab, &nrt));
    const rap_plan *plan = rp ? rp : su->p;
    rap_schedule *s = NULL;
    rap_status st = rap_rank_schedule_load(prefix, su->p, r, R, Bg, plan, &mf, &s);
    CHECK_MSG(st == RAP_OK, "R = %d rank %d: %s", R, r, rap_last_error());
    if (st != RAP_OK) {
        rap_subplan_rank_free(rp, &rfus);
        return;
    }
    /* dense kernels on the rank's share, sparse ones on the whole batch */
    int share_slices = 0, whole_slices = 0;
    for (int i = 0; i < s->n_slices; i++) {
        const rap_slice *sl = &s->slices[i];
        rap_kind k = plan->nodes[mf.kernels[sl->kernel].nodes[0]].kind;
        if (sl->shares) {
            share_slices++;
            CHECK_MSG(sl->shares == R && sl->share == r && k != RAP_SPARSE,
                      "rank %d: share slice %d/%d of a %s kernel", r, sl->share, sl->shares,
                      k == RAP_SPARSE ? "sparse" : "dense");
        } else {
            whole_slices++;
        }
    }
    CHECK_MSG(share_slices > 0 && whole_slices > 0,
              "R = %d rank %d: %d share slices, %d whole", R, r, share_slices, whole_slices);
    /* run the slices as the runtime does; compare with the whole plan */
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, su->p->schema, Bg, false));
    rap_test_fill_batch(&b, rows, 11 + (uint64_t)r);
    rap_fusion wf;
    REQUIRE_OK(rap_fuse_levels(su->p, &wf));
    rap_prep_config pc = {RAP_CPU, Bg, 1, NULL};
    rap_prep *whole = NULL, *mine = NULL;
    REQUIRE_OK(rap_prep_create(su->p, &wf, &pc, &whole));
    REQUIRE_OK(rap_prep_create(plan, &mf, &pc, &mine));
    REQUIRE_OK(rap_prep_load(whole, &b));
    REQUIRE_OK(rap_prep_run(whole));
    REQUIRE_OK(rap_prep_load(mine, &b));
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        int n;
        const rap_slice *sl = rap_schedule_window(s, (rap_window)w, &n);
        for (int i = 0; i < n; i++) {
            int64_t r0, r1;
            rap_slice_rows(&sl[i], rows, &r0, &r1);
            if (r0 < r1)
                REQUIRE_OK(rap_prep_run_kernel(mine, sl[i].kernel, sl[i].d0, sl[i].d1, r0, r1,
                                               NULL));
        }
    }
    int64_t s0, sn;
    rap_hybrid_rows(rows, R, r, &s0, &sn);
    int bad = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        int wc = rap_plan_find(su->p, plan->cols[c].name);
        rap_host_column x, y;
        REQUIRE_OK(rap_prep_fetch(whole, wc, &x));
        REQUIRE_OK(rap_prep_fetch(mine, c, &y));
        bool sparse = x.kind == RAP_SPARSE;
        if (!(sparse ? same_rows(&x, &y, 0, rows) : same_rows(&x, &y, s0, sn))) {
            bad++;
            CHECK_MSG(false, "R = %d rank %d, %lld rows: column %s differs (%s)", R, r,
                      (long long)rows, plan->cols[c].name,
                      sparse ? "every row" : "the rank's rows");
        }
        rap_host_column_free(&x);
        rap_host_column_free(&y);
    }
    if (!bad)
        printf("    R = %d rank %d, %lld rows: %d columns (%d share slices), equal to the whole "
               "plan\n", R, r, (long long)rows, plan->n_cols, share_slices);
    rap_prep_free(whole);
    rap_prep_free(mine);
    rap_fusion_free(&wf);
    rap_batch_free(&b);
    rap_schedule_free(s);
    rap_fusion_free(&mf);
    rap_subplan_rank_free(rp, &rfus);
}

RAP_TEST(rank_schedule_owner_matches_whole_plan)
{
    const int64_t Bg = 600;
    /* (rap plan --gpus 1 is the one-GPU planner: one schedule file, no manifest) */
    for (int R = 2; R <= 3; R++) {
        setup_t su;
        if (!setup(t, R, &su))
            return;
        char prefix[512];
        if (plan_ranks(t, R, Bg, "", prefix, sizeof prefix))
            for (int r = 0; r < R; r++) {
                check_rank(t, &su, prefix, R, r, Bg, Bg);
                check_rank(t, &su, prefix, R, r, Bg, 301); /* a short batch */
            }
        teardown(&su);
    }
}

static bool edit(const char *src, const char *dst, const char *from, const char *to);

/* The search placement's manifests with moves (rap plan --placement search
 * with small assumed capacities moves work between ranks): per rank, the
 * merged schedule of its plan (what it consumes and what it computes for
 * others) run on the CPU executor equals the whole plan in every share of
 * every column the rank computes, full and short batch; the columns it only
 * receives run nowhere (n_received kernels). */
RAP_TEST(rank_schedule_search_moves_merged)
{
    static const struct { int R; const char *frac; } cases[] = {{2, "0.2"}, {3, "0.2"}};
    for (int ci = 0; ci < 2; ci++) {
        int R = cases[ci].R;
        const int64_t Bg = 300 * R;
        setup_t su;
        if (!setup(t, R, &su))
            return;
        char prefix[512], cmd[2048], out[8192];
        snprintf(prefix, sizeof prefix, "%s/rs_search_%d", rap_test_tmpdir(), R);
        snprintf(cmd, sizeof cmd, "%s plan --plan " PLAN " --gpus %d --batch 300 --placement "
                 "search --capacity-fraction %s --out %s --quiet", rap_test_bin(), R,
                 cases[ci].frac, prefix);
        int rc = rap_test_sh(cmd, out, sizeof out);
        CHECK_MSG(rc == 0, "rap plan: %s", out);
        int moves = 0, received = 0;
        for (int r = 0; rc == 0 && r < R; r++) {
            rap_rank_manifest *m = NULL;
            REQUIRE_OK(rap_rank_manifest_load(prefix, su.p, r, R, Bg, &m));
            moves += m->n_send;
            uint64_t *extra = m->col_shares;
            rap_plan *rp = NULL;
            rap_fusion rfus, mf;
            memset(&rfus, 0, sizeof rfus);
            int rtab[RAP_MAX_TABLES], nrt = 0;
            REQUIRE_OK(rap_subplan_rank_with(su.p, su.map.shard[r].table, su.map.shard[r].n_local,
                                             extra, false, &rp, &rfus, rtab, &nrt));
            const rap_plan *plan = rp ? rp : su.p;
            rap_schedule *s = NULL;
            rap_status st = rap_rank_schedule_make(m, su.p, plan, &mf, &s);
            CHECK_MSG(st == RAP_OK, "R = %d rank %d: %s", R, r, rap_last_error());
            if (st != RAP_OK) {
                rap_rank_manifest_free(m);
                rap_subplan_rank_free(rp, &rfus);
                continue;
            }
            received += s->n_received;
            for (int i = 0; i < s->n_slices; i++)
                CHECK(s->slices[i].kernel < mf.n - s->n_received);
            for (int rows = (int)Bg; rows >= (int)Bg - 299; rows -= 299) {
                rap_batch b;
                REQUIRE_OK(rap_batch_create(&b, su.p->schema, Bg, false));
                rap_test_fill_batch(&b, rows, 5 + (uint64_t)r);
                rap_fusion wf;
                REQUIRE_OK(rap_fuse_levels(su.p, &wf));
                rap_prep_config pc = {RAP_CPU, Bg, 1, NULL};
                rap_prep *whole = NULL, *mine = NULL;
                REQUIRE_OK(rap_prep_create(su.p, &wf, &pc, &whole));
                REQUIRE_OK(rap_prep_create(plan, &mf, &pc, &mine));
                REQUIRE_OK(rap_prep_load(whole, &b));
                REQUIRE_OK(rap_prep_run(whole));
                REQUIRE_OK(rap_prep_load(mine, &b));
                for (int i = 0; i < s->n_slices; i++) {
                    int64_t r0, r1;
                    rap_slice_rows(&s->slices[i], rows, &r0, &r1);
                    if (r0 < r1)
                        REQUIRE_OK(rap_prep_run_kernel(mine, s->slices[i].kernel, s->slices[i].d0,
                                                       s->slices[i].d1, r0, r1, NULL));
                }
                int checked = 0;
                for (int c = 0; c < plan->n_cols; c++) {
                    int wc = rap_plan_find(su.p, plan->cols[c].name);
                    rap_host_column x, y;
                    REQUIRE_OK(rap_prep_fetch(whole, wc, &x));
                    REQUIRE_OK(rap_prep_fetch(mine, c, &y));
                    for (int k = 0; k < R; k++) {
                        if (!(m->col_shares[wc] >> k & 1))
                            continue;
                        int64_t s0, sn;
                        rap_hybrid_rows(rows, R, k, &s0, &sn);
                        checked++;
                        CHECK_MSG(same_rows(&x, &y, s0, sn), "R = %d rank %d, %d rows: column "
                                  "%s share %d differs", R, r, rows, plan->cols[c].name, k);
                    }
                    rap_host_column_free(&x);
                    rap_host_column_free(&y);
                }
                CHECK(checked > 0);
                printf("    R = %d rank %d, %d rows: %d (column, share) units equal to the whole "
                       "plan; sends %d, receives %d, %d kernels never run\n", R, r, rows,
                       checked, m->n_send, m->n_recv, s->n_received);
                rap_prep_free(whole);
                rap_prep_free(mine);
                rap_fusion_free(&wf);
                rap_batch_free(&b);
            }
            rap_schedule_free(s);
            rap_fusion_free(&mf);
            rap_subplan_rank_free(rp, &rfus);
            rap_rank_manifest_free(m);
        }
        CHECK_MSG(moves > 0, "R = %d: the search made no move (the test needs some)", R);
        CHECK_MSG(received > 0, "R = %d: no rank only receives a column", R);
        if (R == 2 && rc == 0) {
            /* rap train runs them (CPU ranks); a rank 1 that sends one unit
             * less than rank 0 expects is refused at set-up, naming it */
            snprintf(cmd, sizeof cmd, "%s gen --rows 1500 --out %s/rs_m.tsv --seed 4 --quiet && "
                     "%s train --device cpu --gpus 2 --plan " PLAN " --data %s/rs_m.tsv --batch "
                     "%lld --emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 --eval-fraction 0 --quiet "
                     "--steps 2 --schedule %s", rap_test_bin(), rap_test_tmpdir(), rap_test_bin(),
                     rap_test_tmpdir(), (long long)Bg, prefix);
            rc = rap_test_sh(cmd, out, sizeof out);
            CHECK_MSG(rc == 0, "rap train with the moves: exit %d: %s", rc, out);
            char src[600], dst[600], bad[600];
            snprintf(bad, sizeof bad, "%s/rs_bad", rap_test_tmpdir());
            snprintf(src, sizeof src, "%s.rank0", prefix);
            snprintf(dst, sizeof dst, "%s.rank0", bad);
            REQUIRE(edit(src, dst, "#", "#\n"));
            snprintf(src, sizeof src, "%s.rank1", prefix);
            snprintf(dst, sizeof dst, "%s.rank1", bad);
            REQUIRE(edit(src, dst, "send int_0 share 0 to 0", "\n"));
            snprintf(cmd, sizeof cmd, "%s train --device cpu --gpus 2 --plan " PLAN " --data "
                     "%s/rs_m.tsv --batch %lld --emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 "
                     "--eval-fraction 0 --quiet --steps 2 --schedule %s", rap_test_bin(),
                     rap_test_tmpdir(), (long long)Bg, bad);
            rc = rap_test_sh(cmd, out, sizeof out);
            CHECK_MSG(rc != 0 && strstr(out, "rs_bad.rank0: the units this rank receives from "
                                             "rank 1 are not the ones"), "exit %d: %s", rc, out);
        }
        teardown(&su);
    }
}

/* Copies src to dst with `line` appended, or with line `from` replaced. */
static bool edit(const char *src, const char *dst, const char *from, const char *to)
{
    FILE *f = fopen(src, "r"), *g = fopen(dst, "w");
    if (!f || !g) {
        if (f)
            fclose(f);
        if (g)
            fclose(g);
        return false;
    }
    char line[65536];
    while (fgets(line, sizeof line, f)) {
        if (from && !strncmp(line, from, strlen(from)))
            fputs(to, g);
        else
            fputs(line, g);
    }
    if (!from)
        fputs(to, g);
    fclose(f);
    fclose(g);
    return true;
}

RAP_TEST(rank_schedule_refusals)
{
    const int64_t Bg = 600;
    setup_t su;
    if (!setup(t, 2, &su))
        return;
    char prefix[512];
    if (!plan_ranks(t, 2, Bg, "", prefix, sizeof prefix)) {
        teardown(&su);
        return;
    }
    rap_plan *rp = NULL;
    rap_fusion rfus, mf;
    int rtab[RAP_MAX_TABLES], nrt;
    REQUIRE_OK(rap_subplan_rank(su.p, su.map.shard[0].table, su.map.shard[0].n_local, false, &rp,
                                &rfus, rtab, &nrt));
    rap_schedule *s = NULL;
    /* another rank count, another global batch, a missing file */
    CHECK(rap_rank_schedule_load(prefix, su.p, 0, 3, Bg, rp, &mf, &s) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "rank0:3: planned for rank 0 of 2 ranks"));
    CHECK(rap_rank_schedule_load(prefix, su.p, 0, 2, 2 * Bg, rp, &mf, &s) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "global batch 1200"));
    char other[600], src[600];
    snprintf(other, sizeof other, "%s/rs_none", rap_test_tmpdir());
    CHECK(rap_rank_schedule_load(other, su.p, 0, 2, Bg, rp, &mf, &s) == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "rs_none.rank0: cannot open"));
    /* a move, another plan */
    snprintf(src, sizeof src, "%s.rank0", prefix);
    snprintf(other, sizeof other, "%s/rs_move.rank0", rap_test_tmpdir());
    REQUIRE(edit(src, other, NULL, "send cat_0 share 1 to 1\n"));
    snprintf(other, sizeof other, "%s/rs_move", rap_test_tmpdir());
    CHECK(rap_rank_schedule_load(other, su.p, 0, 2, Bg, rp, &mf, &s) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "moves preprocessed columns between ranks"), "%s",
              rap_last_error());
    snprintf(other, sizeof other, "%s/rs_plan.rank0", rap_test_tmpdir());
    REQUIRE(edit(src, other, "plan ", "plan plans/plan1.plan 0123456789abcdef\n"));
    snprintf(other, sizeof other, "%s/rs_plan", rap_test_tmpdir());
    CHECK(rap_rank_schedule_load(other, su.p, 0, 2, Bg, rp, &mf, &s) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "rs_plan.rank0:2: made for plan plans/plan1.plan"));
    CHECK(s == NULL);
    /* rap train: per-rank manifests without ranks */
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s gen --rows 700 --out %s/rs.tsv --seed 3 --quiet && %s train "
             "--device cpu --plan " PLAN " --data %s/rs.tsv --batch %lld --schedule %s --quiet",
             rap_test_bin(), rap_test_tmpdir(), rap_test_bin(), rap_test_tmpdir(), (long long)Bg,
             prefix);
    int rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "train with --gpus R"), "exit %d: %s", rc, out);
    /* ... and with two CPU ranks: trains (the merged fusion, sequential) */
    snprintf(cmd, sizeof cmd, "%s train --device cpu --gpus 2 --plan " PLAN " --data %s/rs.tsv "
             "--batch %lld --schedule %s --emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 "
             "--eval-fraction 0 --quiet", rap_test_bin(), rap_test_tmpdir(), (long long)Bg,
             prefix);
    rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    rap_subplan_rank_free(rp, &rfus);
    teardown(&su);
}

RAP_TEST(rank_schedule_share_slices_in_files)
{
    setup_t su;
    if (!setup(t, 2, &su))
        return;
    rap_fusion f;
    REQUIRE_OK(rap_fuse_levels(su.p, &f));
    rap_schedule *s;
    REQUIRE_OK(rap_schedule_create(su.p, &f, "<test>", &s));
    for (int k = 0; k < f.n; k++) {
        rap_slice sl = {k, 0, f.kernels[k].n, 0, RAP_ROWS_END, 0.5, 0, 0, 0};
        if (su.p->nodes[f.kernels[k].nodes[0]].kind != RAP_SPARSE)
            sl.share = 1, sl.shares = 2; /* dense: rank 1's share only */
        REQUIRE_OK(rap_schedule_add_slice(s, RAP_WIN_MLP_FORWARD, &sl));
    }
    char path[512];
    rap_test_path(path, sizeof path, "rs_share.schedule");
    REQUIRE_OK(rap_schedule_save(s, path));
    rap_schedule *l;
    REQUIRE_OK(rap_schedule_load(path, &l));
    CHECK(l->n_slices == s->n_slices);
    for (int i = 0; i < s->n_slices && i < l->n_slices; i++)
        CHECK(l->slices[i].share == s->slices[i].share &&
              l->slices[i].shares == s->slices[i].shares);
    /* the rows a share slice runs: rank 1's of 301 rows = [151, 301), and past it none */
    rap_slice x = {0, 0, 1, 0, RAP_ROWS_END, -1, 0, 1, 2};
    int64_t r0, r1;
    rap_slice_rows(&x, 301, &r0, &r1);
    CHECK(r0 == 151 && r1 == 301);
    x.r0 = 100, x.r1 = 200;
    rap_slice_rows(&x, 301, &r0, &r1);
    CHECK(r0 == 251 && r1 == 301);
    x.r0 = 160, x.r1 = RAP_ROWS_END;
    rap_slice_rows(&x, 301, &r0, &r1);
    CHECK(r0 == r1);
    /* a share slice over a kernel whose input is another share's: refused */
    rap_schedule *bad;
    REQUIRE_OK(rap_schedule_create(su.p, &f, "<bad>", &bad));
    for (int k = 0; k < f.n; k++) {
        rap_slice sl = {k, 0, f.kernels[k].n, 0, RAP_ROWS_END, -1, 0, k == 0 ? 0 : 1, 2};
        REQUIRE_OK(rap_schedule_add_slice(bad, RAP_WIN_EXPOSED, &sl));
    }
    CHECK(rap_schedule_validate(bad, su.p, &f, 600) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "share") != NULL, "%s", rap_last_error());
    /* an unknown share syntax */
    rap_schedule *q;
    CHECK(rap_schedule_parse("rap-schedule 1\nplan p 0\nfusion 1 0\nwindow exposed\n"
                             "slice kernel=0 descs=0:1 rows=0:end share=2/2\n",
                             "<text>", &q) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "<text>:5: expected share=K/N"));
    rap_schedule_free(bad);
    rap_schedule_free(l);
    rap_schedule_free(s);
    rap_fusion_free(&f);
    teardown(&su);
}

/* With ranks the hooked step releases grad_comm before emb_backward: a
 * schedule whose grad_comm slices read emb_backward's outputs is valid in
 * file order but not in that one (the runtime then runs grad_comm's
 * slices after emb_backward's), and the other way round. */
RAP_TEST(rank_schedule_hybrid_window_order)
{
    setup_t su;
    if (!setup(t, 2, &su))
        return;
    rap_fusion f;
    REQUIRE_OK(rap_fuse_levels(su.p, &f));
    rap_schedule *a, *b;
    REQUIRE_OK(rap_schedule_create(su.p, &f, "<eb first>", &a));
    REQUIRE_OK(rap_schedule_create(su.p, &f, "<gc first>", &b));
    int first_level = 0;
    for (int k = 0; k < f.n; k++) {
        bool l1 = f.kernels[k].level == f.kernels[0].level;
        first_level += l1;
        REQUIRE_OK(rap_schedule_add(a, l1 ? RAP_WIN_EMB_BACKWARD : RAP_WIN_GRAD_COMM, k, 0,
                                    f.kernels[k].n, 0, RAP_ROWS_END, -1));
        REQUIRE_OK(rap_schedule_add(b, l1 ? RAP_WIN_GRAD_COMM : RAP_WIN_EMB_BACKWARD, k, 0,
                                    f.kernels[k].n, 0, RAP_ROWS_END, -1));
    }
    REQUIRE(first_level > 0 && first_level < f.n);
    CHECK_OK(rap_schedule_validate(a, su.p, &f, 600));
    CHECK(rap_schedule_validate_hybrid(a, su.p, &f, 600) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "grad_comm's slices run before emb_backward's"), "%s",
              rap_last_error());
    CHECK(rap_schedule_validate(b, su.p, &f, 600) == RAP_ERR_PLAN);
    CHECK_OK(rap_schedule_validate_hybrid(b, su.p, &f, 600));
    rap_schedule_free(a);
    rap_schedule_free(b);
    rap_fusion_free(&f);
    teardown(&su);
}
