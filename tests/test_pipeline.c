/* test_pipeline.c -- the pipeline builder (src/run/pipeline.h): the
 * model's shape from a plan, what --schedule names, the plan's sizes, one
 * pipeline run over a file with its accounting, the preprocessing side
 * alone; and the exact-count id exchange of placement batch on CPU ranks
 * (src/dist/ids_exact.h) against the concatenated shares; every mode and
 * placement the CLI builds, built, run a pass and freed (no ranks, CPU
 * thread ranks, a rap shard); what --schedule names decided from the files
 * rap plan writes, refusals with their reasons; a pipeline built twice
 * freed cleanly (run it in the ASan build). */
#include "test.h"

#include "core/core.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/ids_exact.h"
#include "run/pipeline.h"
#include "sched/fusion_file.h"
#include "sched/rank_schedule.h"

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
    return rap_test_plan_text(k_plan, "pipeline test", out);
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

/* ------------------------------------------------------------ every mode and placement */

/* The distributed tests' small plan (3 dense, 5 sparse columns) as a file
 * and its 3,000 generated rows, once. */
static char g_plan_file[512], g_rows[512];

static bool small_inputs(rap_test_ctx *t)
{
    if (g_rows[0])
        return true;
    if (rap_test_dist_inputs(t, 9, "pipe_all", g_plan_file, g_rows, sizeof g_rows))
        return true;
    g_rows[0] = 0;
    return false;
}

#define ALL_ROWS 3000
#define ALL_B 512

/* A CPU pipeline config of the small plan p over data, batch ALL_B. */
static void all_config(rap_pipeline_config *c, const rap_plan *p, const char *data)
{
    small_config(c, p, data);
    c->cmd = "train";
    c->model.batch = ALL_B;
    c->cpu_workers = 2;
    c->model.optimizer = RAP_ADAGRAD;
}

typedef struct {
    const rap_pipeline_plan *pl;
    int mode;                  /* asked: rap_mode, or -1 auto */
    rap_mode want;             /* what the pipeline must run */
    int sends;                 /* 1: bytes go to other ranks, 0: none, -1: either */
} run_case;

/* Builds rank x's pipeline (x->c NULL: no ranks) of k->pl in k->mode,
 * runs one pass and checks it: its mode, its parts, every row trained
 * once in whole batches, the feed's accounting, what it sent; frees it.
 * x->bad counts what was wrong, x->steps the steps. */
static rap_status run_one(rap_test_rank *x)
{
    const run_case *k = x->arg;
    const rap_pipeline_plan *pl = k->pl;
    rap_pipeline_rank r = pl->cfg.rank;
    r.comm = x->c;
    r.mode = k->mode;
    rap_pipeline *p;
    RAP_TRY(rap_pipeline_create(pl, &r, &p));
    x->bad += rap_pipeline_mode_of(p) != k->want;
    x->bad += !rap_pipeline_model(p) || rap_pipeline_runtime(p) || rap_pipeline_feed(p);
    x->bad += pl->dist != (rap_pipeline_hybrid(p) != NULL);
    x->bad += pl->dist != (rap_pipeline_shard(p) != NULL);
    rap_status st = rap_pipeline_start(p, 1, 0);
    x->bad += st == RAP_OK && !rap_pipeline_runtime(p);
    x->bad += st == RAP_OK && pl->shard == (rap_pipeline_feed(p) != NULL);
    int64_t rows = 0, steps = 0;
    rap_step_info in;
    while (st == RAP_OK && (st = rap_runtime_step(rap_pipeline_runtime(p), &in)) == RAP_OK &&
           !in.end) {
        rows += in.rows;
        steps += in.rows > 0;
        /* whole batches but the last */
        x->bad += in.rows > 0 && in.rows != ALL_B && rows != ALL_ROWS;
    }
    if (st == RAP_OK)
        st = rap_pipeline_check(p);
    rap_pipeline_stats ps;
    rap_pipeline_stop(p, &ps);
    x->bad += rap_pipeline_runtime(p) != NULL || rap_pipeline_feed(p) != NULL;
    if (st == RAP_OK) {
        x->bad += rows != ALL_ROWS || steps != (ALL_ROWS + ALL_B - 1) / ALL_B;
        x->bad += ps.runtime.samples != rows || ps.have_feed == pl->shard;
        x->bad += ps.have_feed && (ps.feed.rows_out != rows || ps.feed.rows_skipped != 0 ||
                                   ps.feed.reader.rows_rejected != 0);
        int64_t mine = -1, all = -1;
        bool sent = rap_pipeline_bytes_sent(p, &mine, &all);
        x->bad += k->sends >= 0 && sent != (k->sends == 1);
        /* every rank's total, or (the planner's moves) each its own */
        x->bad += sent && k->sends == 1 && (all == -1 ? mine < 0 : mine <= 0 || all < mine);
    }
    x->steps = steps;
    rap_pipeline_free(p);
    return st;
}

/* run_one without ranks, its failure and wrong counts recorded. */
static void run_plain(rap_test_ctx *t, const run_case *k, const char *what)
{
    rap_test_rank x;
    memset(&x, 0, sizeof x);
    x.arg = (void *)k;
    rap_status st = run_one(&x);
    CHECK_MSG(st == RAP_OK && x.bad == 0, "%s, mode %s: %s; %d wrong", what,
              rap_mode_name(k->want), st == RAP_OK ? "ran" : rap_last_error(), x.bad);
}

/* run_one on R thread ranks. */
static void run_ranks(rap_test_ctx *t, int R, const run_case *k, const char *what)
{
    rap_test_rank x[8];
    if (!rap_test_run_ranks(t, R, 60, run_one, (void *)k, x)) {
        CHECK_MSG(false, "%s, mode %s on %d ranks failed", what, rap_mode_name(k->want), R);
        return;
    }
    for (int r = 0; r < R; r++)
        CHECK_MSG(x[r].bad == 0, "%s, mode %s, rank %d of %d: %d wrong", what,
                  rap_mode_name(k->want), r, R, x[r].bad);
}

/* Without ranks: every mode of the one list that runs on the CPU builds,
 * runs a pass and frees, auto is sequential; every other is refused by
 * the builder naming the mode and why; ideal runs from a rap shard (what
 * auto picks for one) and no other mode does. */
RAP_TEST(pipeline_every_mode_cpu)
{
    if (!small_inputs(t))
        return;
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(g_plan_file, rap_schema_criteo(), &p));
    rap_pipeline_config c;
    all_config(&c, p, g_rows);
    int ran = 0;
    for (int m = -1; m < RAP_MODE_COUNT; m++) {
        c.rank.mode = m;
        rap_mode want = m < 0 ? RAP_MODE_SEQUENTIAL : (rap_mode)m;
        rap_pipeline_plan *pl = NULL;
        rap_status st = rap_pipeline_plan_create(&c, &pl);
        if (!rap_mode_available(want, RAP_CPU, NULL, 0)) {
            char want_msg[64];
            snprintf(want_msg, sizeof want_msg, "--mode %s: needs the GPU", rap_mode_name(want));
            CHECK_MSG(st == RAP_ERR_ARG && !pl && strstr(rap_last_error(), want_msg),
                      "mode %s: %s", rap_mode_name(want), rap_last_error());
            continue;
        }
        REQUIRE_OK(st);
        run_case k = {pl, m, want, 0};
        run_plain(t, &k, "no ranks");
        rap_pipeline_plan_free(pl);
        ran++;
    }
    CHECK(ran == 3); /* auto, cpu, sequential */
    /* a rap shard: ideal, auto or named; another mode refused */
    char shard[512], cmd[2048], out[4096];
    rap_test_path(shard, sizeof shard, "pipe_all.shard");
    snprintf(cmd, sizeof cmd, "%s prep --device cpu --plan %s --input %s --format bin --batch %d "
             "--output %s --quiet", rap_test_bin(), g_plan_file, g_rows, ALL_B, shard);
    int rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "rap prep: %s", out);
    if (rc != 0) {
        rap_plan_free(p);
        return;
    }
    all_config(&c, p, shard);
    for (int m = -1; m <= (int)RAP_MODE_IDEAL; m++) {
        c.rank.mode = m;
        rap_pipeline_plan *pl;
        REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
        CHECK(pl->shard);
        run_case k = {pl, m, RAP_MODE_IDEAL, 0};
        run_plain(t, &k, "a shard");
        rap_pipeline_plan_free(pl);
    }
    c.rank.mode = RAP_MODE_SEQUENTIAL;
    rap_pipeline_plan *pl = NULL;
    CHECK(rap_pipeline_plan_create(&c, &pl) == RAP_ERR_ARG && !pl);
    CHECK_MSG(strstr(rap_last_error(), "(not --mode sequential)"), "%s", rap_last_error());
    rap_plan_free(p);
}

/* With ranks (CPU thread ranks, as rap train and rap bench --device cpu
 * --gpus R): one plan per (R, placement) shared by the ranks, every CPU
 * mode on R = 1, 2, 3 ranks with placement owner, batch and search:
 * built, a pass run (the hybrid step every batch), freed. Placement batch
 * with R > 1 exchanges ids (bytes sent); owner and search send nothing. */
RAP_TEST(pipeline_every_placement_ranks)
{
    if (!small_inputs(t))
        return;
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(g_plan_file, rap_schema_criteo(), &p));
    static const rap_placement places[] = {RAP_PLACE_OWNER, RAP_PLACE_BATCH, RAP_PLACE_SEARCH};
    static const rap_mode modes[] = {RAP_MODE_SEQUENTIAL, RAP_MODE_CPU};
    for (int R = 1; R <= 3; R++)
        for (int i = 0; i < 3; i++) {
            rap_pipeline_config c;
            all_config(&c, p, g_rows);
            c.ranks = R;
            c.placement = places[i];
            c.cpu_workers = 1;
            rap_pipeline_plan *pl;
            REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
            CHECK(pl->dist && pl->map.n_parts >= 5 && pl->sched == RAP_PIPE_SCHED_BUILTIN);
            char what[96];
            snprintf(what, sizeof what, "placement %s", rap_placement_name(places[i]));
            for (int j = 0; j < 2; j++) {
                run_case k = {pl, modes[j], modes[j], R > 1 && places[i] == RAP_PLACE_BATCH};
                run_ranks(t, R, &k, what);
            }
            /* mps serves one trainer: refused with ranks */
            rap_pipeline_rank r = c.rank;
            r.mode = RAP_MODE_MPS;
            rap_mode m;
            CHECK(rap_pipeline_mode(pl, &r, &m) == RAP_ERR_ARG &&
                  strstr(rap_last_error(), "serves one trainer"));
            rap_pipeline_plan_free(pl);
        }
    rap_plan_free(p);
}

/* Plan 0's ops (plans/plan0.plan: fill_null on every column, a bucketized
 * int_0, sigrid_hash, firstx, logit) with small tables: enough work beside
 * 27 tables for the placement search to move dense shares between two
 * ranks. Written to path. */
static bool write_wide_plan(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    for (int i = 0; i < 13; i++)
        fprintf(f, "df[\"int_%d\"] = df[\"int_%d\"].fill_null(0)\n", i, i);
    for (int i = 0; i < 26; i++)
        fprintf(f, "df[\"cat_%d\"] = df[\"cat_%d\"].fill_null(0)\n", i, i);
    fputs("df[\"bucketize_int_0\"] = functional.bucketize(df[\"int_0\"], [0.5, 1.0, 1.5])\n", f);
    for (int i = 0; i < 26; i++)
        fprintf(f, "df[\"cat_%d\"] = functional.sigrid_hash(df[\"cat_%d\"], 0, %d)\n", i, i,
                137 + 37 * i);
    for (int i = 0; i < 26; i++)
        fprintf(f, "df[\"cat_%d\"] = functional.firstx(df[\"cat_%d\"], 1)\n", i, i);
    for (int i = 0; i < 13; i++)
        fprintf(f, "df[\"int_%d\"] = functional.logit(df[\"int_%d\"], 1e-5)\n", i, i);
    return fclose(f) == 0;
}

/* What --schedule names, decided by the builder (rap_pipeline_plan_create)
 * from files rap plan wrote: a schedule file with its .fusion beside it
 * (the fusion is the file's); the prefix of rap plan --gpus 2's per-rank
 * manifests (owner: nothing moved; search: dense shares moved), run on two
 * CPU ranks in every CPU mode; refused with the reason: manifests without
 * ranks or with placement batch, a name that is neither. */
RAP_TEST(pipeline_schedule_kinds)
{
    if (!small_inputs(t))
        return;
    char wide[512], one[512], owner[512], search[512], cmd[4096], out[8192];
    rap_test_path(wide, sizeof wide, "pipe_wide.plan");
    REQUIRE(write_wide_plan(wide));
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(wide, rap_schema_criteo(), &p));
    rap_test_path(one, sizeof one, "pipe_one_gpu.schedule");
    rap_test_path(owner, sizeof owner, "pipe_owner");
    rap_test_path(search, sizeof search, "pipe_search");
    snprintf(cmd, sizeof cmd, "%s plan --plan %s --batch %d --out %s --time-limit 1 --quiet && "
             "%s plan --plan %s --gpus 2 --batch %d --placement owner --out %s --time-limit 1 "
             "--quiet && %s plan --plan %s --gpus 2 --batch %d --placement search "
             "--capacity-fraction 0.1 --out %s --time-limit 1 --quiet",
             rap_test_bin(), wide, ALL_B, one, rap_test_bin(), wide, ALL_B / 2, owner,
             rap_test_bin(), wide, ALL_B / 2, search);
    int rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "rap plan: %s", out);
    if (rc != 0) {
        rap_plan_free(p);
        return;
    }
    /* one schedule file: loaded, with the fusion beside it */
    rap_pipeline_config c;
    all_config(&c, p, g_rows);
    c.schedule = one;
    rap_pipeline_plan *pl;
    REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
    char fus_path[600];
    snprintf(fus_path, sizeof fus_path, "%s.fusion", one);
    rap_fusion want;
    REQUIRE_OK(rap_fusion_load(p, fus_path, &want));
    CHECK(pl->sched == RAP_PIPE_SCHED_FILE && pl->schedule && pl->loaded &&
          !strcmp(pl->fusion_file, fus_path) && pl->fusion.n == want.n);
    rap_fusion_free(&want);
    run_case k1 = {pl, RAP_MODE_SEQUENTIAL, RAP_MODE_SEQUENTIAL, 0};
    run_plain(t, &k1, "a schedule file");
    rap_pipeline_plan_free(pl);
    /* the per-rank manifests on two ranks: search's move units, owner's none */
    const char *prefixes[] = {owner, search};
    const rap_placement places[] = {RAP_PLACE_OWNER, RAP_PLACE_SEARCH};
    for (int i = 0; i < 2; i++) {
        int n_send = 0;
        for (int r = 0; r < 2; r++) {
            rap_rank_manifest *m;
            REQUIRE_OK(rap_rank_manifest_load(prefixes[i], p, r, 2, ALL_B, &m));
            n_send += m->n_send;
            rap_rank_manifest_free(m);
        }
        CHECK_MSG(i == 0 ? n_send == 0 : n_send > 0, "%s: %d units sent", prefixes[i], n_send);
        all_config(&c, p, g_rows);
        c.schedule = prefixes[i];
        c.ranks = 2;
        c.placement = places[i];
        c.cpu_workers = 1;
        REQUIRE_OK(rap_pipeline_plan_create(&c, &pl));
        CHECK(pl->sched == RAP_PIPE_SCHED_RANKS && !pl->schedule && !pl->fusion_file[0]);
        char what[96];
        snprintf(what, sizeof what, "manifests of placement %s", rap_placement_name(places[i]));
        for (int m = 0; m < 2; m++) {
            rap_mode mode = m ? RAP_MODE_CPU : RAP_MODE_SEQUENTIAL;
            run_case k = {pl, mode, mode, n_send > 0};
            run_ranks(t, 2, &k, what);
        }
        rap_pipeline_plan_free(pl);
    }
    /* refused, saying why */
    all_config(&c, p, g_rows);
    c.schedule = owner;
    pl = NULL;
    CHECK(rap_pipeline_plan_create(&c, &pl) == RAP_ERR_ARG && !pl);
    CHECK_MSG(strstr(rap_last_error(), "per-rank manifests") &&
              strstr(rap_last_error(), "train with --gpus R"), "%s", rap_last_error());
    c.ranks = 2;
    c.placement = RAP_PLACE_BATCH;
    CHECK(rap_pipeline_plan_create(&c, &pl) == RAP_ERR_ARG && !pl);
    CHECK_MSG(strstr(rap_last_error(), "--placement batch has no per-rank plan"), "%s",
              rap_last_error());
    char none[512];
    rap_test_path(none, sizeof none, "pipe_no_such_schedule");
    c.schedule = none;
    c.placement = RAP_PLACE_OWNER;
    CHECK(rap_pipeline_plan_create(&c, &pl) == RAP_ERR_ARG && !pl);
    CHECK_MSG(strstr(rap_last_error(), "neither a schedule file") &&
              strstr(rap_last_error(), "pipe_no_such_schedule.rank0"), "%s", rap_last_error());
    rap_plan_free(p);
}

/* A rank's pipeline built twice over (rap train's pattern: each rank its
 * own plan; run twice, as train reopens the feed per pass), then built
 * again from the same plan, then the plan and everything freed and the
 * whole made again: nothing left behind (the ASan build's leak check,
 * make SAN=1) and the second build trains as the first. */
typedef struct {
    const char *data;
    const rap_plan *plan;
    int ranks;
    rap_placement placement;
} twice_case;

static rap_status twice_rank(rap_test_rank *x)
{
    const twice_case *k = x->arg;
    for (int round = 0; round < 2; round++) {
        rap_pipeline_config c;
        all_config(&c, k->plan, k->data);
        c.ranks = k->ranks;
        c.placement = k->placement;
        c.cpu_workers = 1;
        rap_pipeline_plan *pl;
        RAP_TRY(rap_pipeline_plan_create(&c, &pl));
        rap_status st = RAP_OK;
        for (int b = 0; st == RAP_OK && b < 2; b++) {
            rap_pipeline_rank r = c.rank;
            r.comm = x->c;
            r.mode = RAP_MODE_SEQUENTIAL;
            rap_pipeline *p;
            if ((st = rap_pipeline_create(pl, &r, &p)) != RAP_OK)
                break;
            for (int pass = 0; st == RAP_OK && pass < 2; pass++) {
                int64_t rows = 0;
                rap_step_info in;
                st = rap_pipeline_start(p, 1, 0);
                while (st == RAP_OK &&
                       (st = rap_runtime_step(rap_pipeline_runtime(p), &in)) == RAP_OK && !in.end)
                    rows += in.rows;
                rap_pipeline_stop(p, NULL);
                x->bad += st == RAP_OK && rows != ALL_ROWS;
                x->steps++;
            }
            rap_pipeline_free(p);
        }
        rap_pipeline_plan_free(pl);
        RAP_TRY(st);
    }
    return RAP_OK;
}

RAP_TEST(pipeline_built_twice_frees)
{
    if (!small_inputs(t))
        return;
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(g_plan_file, rap_schema_criteo(), &p));
    twice_case k = {g_rows, p, 0, RAP_PLACE_OWNER};
    rap_test_rank x;
    memset(&x, 0, sizeof x);
    x.arg = &k;
    rap_status st = twice_rank(&x);
    CHECK_MSG(st == RAP_OK && x.bad == 0 && x.steps == 8, "no ranks: %s; %d wrong",
              st == RAP_OK ? "ran" : rap_last_error(), x.bad);
    static const rap_placement places[] = {RAP_PLACE_OWNER, RAP_PLACE_BATCH};
    for (int i = 0; i < 2; i++) {
        twice_case kr = {g_rows, p, 2, places[i]};
        rap_test_rank xr[2];
        if (!rap_test_run_ranks(t, 2, 60, twice_rank, &kr, xr))
            continue;
        for (int r = 0; r < 2; r++)
            CHECK_MSG(xr[r].bad == 0 && xr[r].steps == 8, "placement %s, rank %d: %d wrong",
                      rap_placement_name(places[i]), r, xr[r].bad);
    }
    rap_plan_free(p);
}
