/* test_pipeline.c -- the pipeline builder (src/run/pipeline.h): the
 * model's shape from a plan, what --schedule names, the plan's sizes, one
 * pipeline run over a file with its accounting, the preprocessing side
 * alone; and the exact-count id exchange of placement batch on CPU ranks
 * (src/dist/ids_exact.h) against the concatenated shares. */
#include "test.h"

#include "core/core.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/ids_exact.h"
#include "run/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Four dense and three sparse columns (small tables). */
static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_2\"] = (df[\"int_2\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = (df[\"int_4\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

static rap_status parse_plan(rap_plan **out)
{
    RAP_TRY(rap_plan_parse(k_plan, "pipeline test", rap_schema_criteo(), out));
    rap_plan *p = *out;
    for (int c = p->n_cols - 1; c >= 0; c--)
        if (p->nodes[p->cols[c].node].op == RAP_OP_INPUT) {
            char n[64];
            snprintf(n, sizeof n, "%s", p->cols[c].name);
            RAP_TRY(rap_plan_drop(p, n));
        }
    rap_plan_finish(p);
    return RAP_OK;
}

static rap_status gen_rows(const char *name, int64_t rows, char *path, size_t n)
{
    rap_test_path(path, n, name);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = 5;
    g.out = path;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    return rap_gen_write(&g, &r);
}

/* A small CPU pipeline config over plan and data. */
static void small_config(rap_pipeline_config *c, const rap_plan *plan, const char *data)
{
    rap_pipeline_config_defaults(c);
    c->cmd = "test";
    c->plan = plan;
    c->data = data;
    c->model.emb_dim = 8;
    c->model.n_bot = 2;
    c->model.bot[0] = 16;
    c->model.bot[1] = 8;
    c->model.n_top = 2;
    c->model.top[0] = 16;
    c->model.top[1] = 1;
    c->model.batch = 128;
    c->model.threads = 1;
    c->prep_threads = 1;
    c->reader.threads = 1;
    c->rank.mode = RAP_MODE_SEQUENTIAL;
}

RAP_TEST(pipeline_model_shape)
{
    rap_plan *p;
    REQUIRE_OK(parse_plan(&p));
    rap_model_config mc;
    rap_model_config_defaults(&mc);
    REQUIRE_OK(rap_pipeline_model_shape(p, &mc));
    int nd, nt;
    int64_t rows[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(p, &nd, &nt, rows));
    CHECK(mc.n_dense == nd && mc.n_tables == nt && nt == 3);
    for (int k = 0; k < nt; k++)
        CHECK(mc.table_rows[k] == rows[k]);
    /* max_bag: no sparse column has more ids a row, one has as many */
    bool reached = false;
    for (int c = 0; c < p->n_cols; c++) {
        const rap_node *n = &p->nodes[p->cols[c].node];
        if (n->kind != RAP_SPARSE)
            continue;
        CHECK(n->ids_per_row <= mc.max_bag);
        reached |= n->ids_per_row == mc.max_bag;
    }
    CHECK(reached && mc.max_bag >= 1);
    rap_plan_free(p);
}

RAP_TEST(pipeline_schedule_find)
{
    char file[512], prefix[512], rank0[600], none[512];
    rap_test_path(file, sizeof file, "pipe_one.schedule");
    rap_test_path(prefix, sizeof prefix, "pipe_ranks");
    rap_test_path(none, sizeof none, "pipe_nothing");
    snprintf(rank0, sizeof rank0, "%s.rank0", prefix);
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fputs("not read here\n", f);
    fclose(f);
    f = fopen(rank0, "w");
    REQUIRE(f != NULL);
    fclose(f);
    rap_pipeline_sched k = RAP_PIPE_SCHED_FILE;
    CHECK(rap_pipeline_schedule_find("", 0, RAP_PLACE_OWNER, "train", &k) == RAP_OK &&
          k == RAP_PIPE_SCHED_BUILTIN);
    CHECK(rap_pipeline_schedule_find(file, 0, RAP_PLACE_OWNER, "train", &k) == RAP_OK &&
          k == RAP_PIPE_SCHED_FILE);
    CHECK(rap_pipeline_schedule_find(prefix, 2, RAP_PLACE_OWNER, "train", &k) == RAP_OK &&
          k == RAP_PIPE_SCHED_RANKS);
    CHECK(rap_pipeline_schedule_find(prefix, 1, RAP_PLACE_BATCH, "train", &k) == RAP_OK &&
          k == RAP_PIPE_SCHED_RANKS);
    /* the manifests need ranks, and placement owner or search with several */
    CHECK(rap_pipeline_schedule_find(prefix, 0, RAP_PLACE_OWNER, "bench", &k) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "bench with --gpus R"));
    CHECK(rap_pipeline_schedule_find(prefix, 2, RAP_PLACE_BATCH, "train", &k) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "--placement batch has no per-rank plan"));
    /* neither */
    CHECK(rap_pipeline_schedule_find(none, 2, RAP_PLACE_OWNER, "train", &k) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "neither a schedule file") &&
          strstr(rap_last_error(), "pipe_nothing.rank0"));
    remove(file);
    remove(rank0);
}

RAP_TEST(pipeline_plan_sizes)
{
    rap_plan *p;
    REQUIRE_OK(parse_plan(&p));
    char data[512];
    REQUIRE_OK(gen_rows("pipe_sizes.tsv", 300, data, sizeof data));
    rap_pipeline_config c;
    small_config(&c, p, data);
    rap_pipeline_plan *pl;
    REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
    CHECK(!pl->shard && !pl->dist && pl->sched == RAP_PIPE_SCHED_BUILTIN && !pl->schedule);
    CHECK(pl->model.n_tables == 3 && pl->model.batch == 128);
    rap_pipeline_bytes b[RAP_PIPE_PARTS];
    REQUIRE_OK(rap_pipeline_size(pl, NULL, b));
    CHECK(b[RAP_PIPE_PART_MODEL].counted &&
          b[RAP_PIPE_PART_MODEL].host == rap_model_bytes(&pl->model, RAP_CPU) &&
          b[RAP_PIPE_PART_MODEL].device == 0);
    size_t batch = rap_batch_bytes(p->schema, 128);
    CHECK(b[RAP_PIPE_PART_FEED].counted && b[RAP_PIPE_PART_FEED].host == 8 * batch);
    CHECK(!b[RAP_PIPE_PART_RUNTIME].counted && !b[RAP_PIPE_PART_RANKS].counted);
    /* cpu mode: its workers' batches beside the feed's */
    rap_pipeline_rank r = c.rank;
    r.mode = RAP_MODE_CPU;
    rap_pipeline_plan_free(pl);
    c.cpu_workers = 3;
    REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
    REQUIRE_OK(rap_pipeline_size(pl, &r, b));
    CHECK(b[RAP_PIPE_PART_FEED].host == 5 * batch);
    rap_pipeline_plan_free(pl);
    /* two ranks: the tables shared, each rank's model smaller than the whole */
    c.ranks = 2;
    REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
    CHECK(pl->dist && pl->map.n_parts >= 3);
    REQUIRE_OK(rap_pipeline_size(pl, NULL, b));
    CHECK(b[RAP_PIPE_PART_MODEL].host < rap_model_bytes(&pl->model, RAP_CPU));
    /* mps serves one trainer */
    r.mode = RAP_MODE_MPS;
    rap_mode m;
    CHECK(rap_pipeline_mode(pl, &r, &m) == RAP_ERR_ARG &&
          strstr(rap_last_error(), "serves one trainer"));
    rap_pipeline_plan_free(pl);
    rap_plan_free(p);
}

/* One pass over 300 rows in batches of 128: 3 steps, every row trained,
 * the feed's accounting in the stats; then a second start from row 128. */
RAP_TEST(pipeline_run_one_pass)
{
    rap_plan *p;
    REQUIRE_OK(parse_plan(&p));
    char data[512];
    REQUIRE_OK(gen_rows("pipe_run.tsv", 300, data, sizeof data));
    rap_pipeline_config c;
    small_config(&c, p, data);
    rap_pipeline_plan *pl;
    REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
    rap_pipeline *pp;
    REQUIRE_OK(rap_pipeline_create(pl, &c.rank, &pp));
    CHECK(rap_pipeline_mode_of(pp) == RAP_MODE_SEQUENTIAL && rap_pipeline_model(pp) &&
          !rap_pipeline_hybrid(pp) && !rap_pipeline_runtime(pp));
    int64_t mine = -1, all = -1;
    CHECK(!rap_pipeline_bytes_sent(pp, &mine, &all) && mine == 0 && all == 0);
    for (int round = 0; round < 2; round++) {
        int64_t start = round ? 128 : 0;
        REQUIRE_OK(rap_pipeline_start(pp, 1, start));
        CHECK(rap_pipeline_start(pp, 1, 0) == RAP_ERR_INTERNAL); /* running */
        int64_t rows = 0, steps = 0;
        rap_step_info in;
        rap_status st;
        while ((st = rap_runtime_step(rap_pipeline_runtime(pp), &in)) == RAP_OK && !in.end) {
            rows += in.rows;
            steps += in.rows > 0;
        }
        CHECK_MSG(st == RAP_OK, "%s", rap_last_error());
        rap_pipeline_stats ps;
        rap_pipeline_stop(pp, &ps);
        CHECK(!rap_pipeline_runtime(pp) && !rap_pipeline_feed(pp));
        CHECK_MSG(rows == 300 - start && steps == (300 - start + 127) / 128,
                  "round %d: %lld rows in %lld steps", round, (long long)rows, (long long)steps);
        CHECK(ps.have_feed && ps.feed.rows_out == rows && ps.feed.rows_skipped == start &&
              ps.runtime.samples == rows && ps.runtime.records == NULL);
    }
    rap_pipeline_free(pp);
    rap_pipeline_plan_free(pl);
    rap_plan_free(p);
}

/* The preprocessing side alone: a fusion given is used, not freed; the
 * executor and packer run a batch; a feed reads the file. */
RAP_TEST(pipeline_prep_side)
{
    rap_plan *p;
    REQUIRE_OK(parse_plan(&p));
    char data[512];
    REQUIRE_OK(gen_rows("pipe_side.tsv", 200, data, sizeof data));
    rap_fusion fus;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_LEVELS, &fus));
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = data;
    fc.reader.threads = 1;
    fc.batch_rows = 64;
    fc.n_batches = 2;
    fc.passes = 1;
    rap_pipeline_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.plan = p;
    pc.fusion = &fus;
    pc.device = RAP_CPU;
    pc.batch_rows = 64;
    pc.threads = 1;
    pc.pack = true;
    pc.feed = &fc;
    rap_pipeline_prep side;
    REQUIRE_OK(rap_pipeline_prep_create(&pc, &side));
    CHECK(side.fusion == &fus && side.prep && side.input && side.feed);
    int64_t rows = 0;
    rap_row_batch *rb;
    rap_status st;
    while ((st = rap_rowfeed_next(side.feed, &rb, NULL)) == RAP_OK && rb) {
        if (rb->batch.rows > 0) {
            rap_model_batch mb;
            REQUIRE_OK(rap_prep_load(side.prep, &rb->batch));
            REQUIRE_OK(rap_prep_run(side.prep));
            REQUIRE_OK(rap_input_make(side.input, side.prep, &mb));
            CHECK(mb.rows == rb->batch.rows && mb.dense && mb.label && mb.off[2] && mb.ids[2]);
            rows += mb.rows;
        }
        rap_rowfeed_release(side.feed, rb);
    }
    CHECK(st == RAP_OK && rows == 200);
    rap_pipeline_prep_free(&side);
    CHECK(!side.prep && !side.feed && !side.fusion);
    /* the given fusion is the caller's still; one made by kind is the side's */
    CHECK(fus.n > 0);
    memset(&pc, 0, sizeof pc);
    pc.plan = p;
    pc.fusion_kind = RAP_FUSE_NONE;
    REQUIRE_OK(rap_pipeline_prep_create(&pc, &side));
    rap_fusion none;
    REQUIRE_OK(rap_fuse_none(p, &none));
    CHECK(side.fusion == &side.own && side.own.n == none.n && !side.prep && !side.feed);
    rap_fusion_free(&none);
    rap_pipeline_prep_free(&side);
    rap_fusion_free(&fus);
    rap_plan_free(p);
}

/* ------------------------------------------------------------ ids_exact */

typedef struct {
    int R, T, K;
    int64_t Bg;
} exact_case;

/* Table t is held by rank t % R, and table 0 by rank R-1 too. */
static bool holds_t(const exact_case *k, int p, int t)
{
    return p == t % k->R || (t == 0 && p == k->R - 1);
}

/* Ids of row g of table t: (g * 7 + t) % 4 of them (at most K = 3), each
 * a function of (t, g, j). */
static int64_t n_ids(int t, int64_t g) { return (g * 7 + t) % 4; }
static int64_t id_of(int t, int64_t g, int64_t j) { return t * 100000 + g * 10 + j; }

static rap_status exact_rank(rap_test_rank *x)
{
    const exact_case *k = x->arg;
    int R = k->R, T = k->T, me = x->rank;
    bool holds[4 * 8];
    for (int p = 0; p < R; p++)
        for (int t = 0; t < T; t++)
            holds[p * T + t] = holds_t(k, p, t);
    rap_ids_exact *ex;
    RAP_TRY(rap_ids_exact_create(x->c, T, holds, k->Bg, k->K, &ex));
    int64_t steps[] = {k->Bg, k->Bg - 3, 2, 1};
    int64_t want_me = 0, want_all = 0;
    static int64_t offs[8][4][64], idss[8][4][64 * 4];
    rap_status st = RAP_OK;
    for (int s = 0; st == RAP_OK && s < 4; s++) {
        int64_t n = steps[s], r0, nr;
        rap_hybrid_rows(n, R, me, &r0, &nr);
        rap_model_batch mine, g;
        memset(&mine, 0, sizeof mine);
        mine.rows = nr;
        for (int t = 0; t < T; t++) { /* this rank's rows, offsets from a base of 2 */
            int64_t *off = offs[me][t], *ids = idss[me][t], at = 2;
            for (int64_t i = 0; i < nr; i++) {
                off[i] = at;
                for (int64_t j = 0; j < n_ids(t, r0 + i); j++)
                    ids[at++] = id_of(t, r0 + i, j);
            }
            off[nr] = at;
            mine.off[t] = off;
            mine.ids[t] = ids;
        }
        st = rap_ids_exact_run(ex, &mine, &g);
        if (st != RAP_OK)
            break;
        x->bad += g.rows != n;
        for (int t = 0; t < T; t++) {
            if (!holds_t(k, me, t)) {
                x->bad += g.off[t] != NULL;
                continue;
            }
            int64_t at = 0;
            for (int64_t r = 0; r < n && g.off[t]; r++) {
                x->bad += g.off[t][r] != at;
                for (int64_t j = 0; j < n_ids(t, r); j++)
                    x->bad += g.ids[t][at++] != id_of(t, r, j);
            }
            x->bad += !g.off[t] || g.off[t][n] != at;
        }
        /* bytes: each other holder p of t gets s's share's offsets and ids */
        for (int src = 0; src < R; src++) {
            int64_t s0, sn, cnt[4] = {0};
            rap_hybrid_rows(n, R, src, &s0, &sn);
            for (int t = 0; t < T; t++)
                for (int64_t i = 0; i < sn; i++)
                    cnt[t] += n_ids(t, s0 + i);
            for (int p = 0; p < R; p++)
                for (int t = 0; t < T; t++)
                    if (p != src && holds_t(k, p, t)) {
                        want_all += 8 * (sn + cnt[t]);
                        if (src == me)
                            want_me += 8 * (sn + cnt[t]);
                    }
        }
        x->steps++;
    }
    int64_t got_me = -1, got_all = -1;
    rap_ids_exact_bytes(ex, &got_me, &got_all);
    x->bad += got_me != want_me || got_all != want_all || (R > 1 && want_all <= 0);
    rap_ids_exact_free(ex);
    return st;
}

RAP_TEST(pipeline_ids_exact_threads)
{
    for (int R = 1; R <= 3; R++) {
        exact_case k = {R, 4, 3, 10};
        rap_test_rank x[8];
        if (!rap_test_run_ranks(t, R, 20, exact_rank, &k, x))
            return;
        for (int r = 0; r < R; r++)
            CHECK_MSG(x[r].bad == 0 && x[r].steps == 4, "R = %d rank %d: %d wrong, %lld steps",
                      R, r, x[r].bad, (long long)x[r].steps);
    }
    /* bad sizes */
    rap_comm *c[1];
    REQUIRE_OK(rap_comm_threads_create(1, c));
    bool h[1] = {true};
    rap_ids_exact *ex = NULL;
    CHECK(rap_ids_exact_create(c[0], 0, h, 10, 1, &ex) == RAP_ERR_ARG && !ex);
    CHECK(rap_ids_exact_create(c[0], 1, h, 10, 0, &ex) == RAP_ERR_ARG && !ex);
    rap_comm_free(c[0]);
}
