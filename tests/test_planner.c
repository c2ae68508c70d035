/*
 * test_planner.c -- the planner (src/plan/, docs/PLANNER.md): fusion
 * validity and ILP optimality (brute force on small plans), capacity and
 * predictor files, the XGBoost predictor on synthetic measurements, the
 * split (split kernels on the CPU executor == unsplit, byte for byte), the
 * schedule search, and plan 3 in under 10 s. CPU only.
 */
#include "test.h"

#include "model/model.h"
#include "plan/search.h"
#include "prep/exec_internal.h"
#include "sched/fusion_file.h"

#include <stdlib.h>

static uint64_t rnd(uint64_t *s) { return rap_test_rnd(s); }
static double rnd01(uint64_t *s) { return rap_test_rnd01(s); }

static bool is_op(const rap_plan *p, int i)
{
    return i >= 0 && p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT;
}

/* ------------------------------------------------------------- fusion */

RAP_TEST(planner_fusion_valid_on_shipped_plans)
{
    static const char *const names[] = {"plan0.plan", "plan1.plan", "plan2.plan"};
    for (int q = 0; q < 3; q++) {
        rap_plan *p;
        REQUIRE_SHIPPED_PLAN(names[q], &p);
        rap_ilp_config cfg = rap_ilp_defaults();
        rap_fusion f, g;
        rap_ilp_result r;
        REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
        REQUIRE_OK(rap_fuse_levels(p, &g));
        CHECK_OK(rap_fusion_check(p, &f)); /* every op once, after its inputs */
        CHECK(f.n <= g.n);
        CHECK(r.gap >= 0 && r.gap <= 1);
        rap_ilp_costs c;
        REQUIRE_OK(rap_ilp_costs_of(p, &cfg, &c));
        CHECK(rap_ilp_objective(&c, &f) <= rap_ilp_objective(&c, &g) + 1e-12);
        /* an independent check of "every op in exactly one kernel" */
        int count = 0;
        for (int k = 0; k < f.n; k++)
            count += f.kernels[k].n;
        CHECK(count == rap_plan_n_ops(p));
        if (q == 2)
            CHECK_MSG(f.n < g.n, "plan2: ILP %d kernels, levels %d", f.n, g.n);
        rap_fusion_free(&f);
        rap_fusion_free(&g);
        rap_plan_free(p);
    }
}

/* fusion_check itself must catch bad fusions */
RAP_TEST(planner_fusion_check_rejects)
{
    rap_plan *p;
    REQUIRE_OK(rap_plan_parse("df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 10)\n"
                              "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 1, 10)\n",
                              "t", rap_schema_criteo(), &p));
    rap_plan_finish(p);
    rap_fusion f;
    REQUIRE_OK(rap_fuse_none(p, &f));
    REQUIRE(f.n == 2);
    CHECK_OK(rap_fusion_check(p, &f));
    rap_kernel tmp = f.kernels[0];
    f.kernels[0] = f.kernels[1];
    f.kernels[1] = tmp;
    CHECK(rap_fusion_check(p, &f) == RAP_ERR_PLAN); /* consumer before producer */
    f.kernels[1].nodes[0] = f.kernels[0].nodes[0];
    CHECK(rap_fusion_check(p, &f) == RAP_ERR_PLAN); /* one op twice, one missing */
    rap_fusion_free(&f);
    rap_plan_free(p);
}

static int add(rap_plan *p, rap_op_type op, int input, double f0, double f1, int64_t i0, int64_t i1)
{
    rap_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.input = input;
    n.f[0] = f0;
    n.f[1] = f1;
    n.i[0] = i0;
    n.i[1] = i1;
    n.line = 1;
    n.col = 1;
    int idx = -1;
    if (rap_plan_add_op(p, &n, &idx) != RAP_OK)
        return -1;
    char name[32];
    snprintf(name, sizeof name, "o%d", idx);
    if (rap_plan_assign(p, name, idx) != RAP_OK)
        return -1;
    return idx;
}

/* A random plan of n ops of 2 dense and 2 sparse kernel types in chains and
 * branches over 3 + 3 raw columns. */
static rap_plan *small_plan(int n, uint64_t seed)
{
    rap_plan *p;
    rap_schema sc = {3, 3, 1};
    if (rap_plan_create(sc, "small", &p) != RAP_OK)
        return NULL;
    uint64_t s = seed;
    for (int a = 0; a < n; a++) {
        int in;
        do
            in = (int)(rnd(&s) % (uint64_t)p->n_nodes);
        while (p->nodes[in].kind == RAP_VECTOR);
        bool dense = p->nodes[in].kind == RAP_DENSE;
        bool b = rnd(&s) & 1;
        int r = dense ? (b ? add(p, RAP_OP_LOGIT, in, 1e-5, 0, 0, 0) : add(p, RAP_OP_CLAMP, in, 0, 9, 0, 0))
                      : (b ? add(p, RAP_OP_SIGRID_HASH, in, 0, 0, 1, 100)
                           : add(p, RAP_OP_CLAMP, in, 0, 50, 0, 0));
        if (r < 0) {
            rap_plan_free(p);
            return NULL;
        }
    }
    rap_plan_finish(p);
    return p;
}

/* Brute force: every partition of the ops into same-type groups whose
 * quotient graph is acyclic; the least sum of fixed costs. */
typedef struct {
    const rap_plan *p;
    const rap_ilp_costs *c;
    int ops[16], type[16], in_op[16], n;
    int group[16], gtype[16], ng;
    double best;
} brute;

static bool acyclic(const brute *b)
{
    int indeg[16] = {0}, adj[16][16] = {{0}}, order = 0, queue[16], qh = 0, qt = 0;
    for (int a = 0; a < b->n; a++) {
        if (b->in_op[a] < 0)
            continue;
        int u = b->group[b->in_op[a]], v = b->group[a];
        if (u == v)
            return false;
        if (!adj[u][v]) {
            adj[u][v] = 1;
            indeg[v]++;
        }
    }
    for (int g = 0; g < b->ng; g++)
        if (!indeg[g])
            queue[qt++] = g;
    while (qh < qt) {
        int u = queue[qh++];
        order++;
        for (int v = 0; v < b->ng; v++)
            if (adj[u][v] && --indeg[v] == 0)
                queue[qt++] = v;
    }
    return order == b->ng;
}

static void enumerate(brute *b, int a)
{
    if (a == b->n) {
        if (!acyclic(b))
            return;
        double cost = b->c->const_ms;
        for (int g = 0; g < b->ng; g++)
            cost += b->c->fixed_ms[b->gtype[g]];
        if (cost < b->best)
            b->best = cost;
        return;
    }
    for (int g = 0; g < b->ng; g++) {
        if (b->gtype[g] != b->type[a])
            continue;
        b->group[a] = g;
        enumerate(b, a + 1);
    }
    b->group[a] = b->ng;
    b->gtype[b->ng++] = b->type[a];
    enumerate(b, a + 1);
    b->ng--;
}

RAP_TEST(planner_ilp_optimal_vs_brute_force)
{
    int better_than_levels = 0;
    for (int trial = 0; trial < 24; trial++) {
        int n = 6 + trial % 5;
        rap_plan *p = small_plan(n, 1000 + (uint64_t)trial);
        REQUIRE(p);
        rap_ilp_config cfg = rap_ilp_defaults();
        cfg.extra_stages = -1; /* exact: one stage per op */
        cfg.time_limit_s = 30;
        rap_ilp_costs c;
        REQUIRE_OK(rap_ilp_costs_of(p, &cfg, &c));
        brute b;
        memset(&b, 0, sizeof b);
        b.p = p;
        b.c = &c;
        b.best = 1e300;
        int id[64];
        for (int i = 0; i < p->n_nodes; i++) {
            id[i] = -1;
            if (!is_op(p, i))
                continue;
            id[i] = b.n;
            b.ops[b.n] = i;
            b.type[b.n] = rap_ilp_type(&c, p->nodes[i].op, rap_node_variant(p, i));
            b.in_op[b.n] = is_op(p, p->nodes[i].input) ? id[p->nodes[i].input] : -1;
            b.n++;
        }
        REQUIRE(b.n == n);
        enumerate(&b, 0);
        rap_fusion f, g;
        rap_ilp_result r;
        REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
        REQUIRE_OK(rap_fuse_levels(p, &g));
        CHECK_OK(rap_fusion_check(p, &f));
        CHECK(r.optimal);
        CHECK_MSG(fabs(r.objective - b.best) <= 1e-9 * b.best,
                  "trial %d (%d ops): ILP %.9g, brute force %.9g", trial, n, r.objective, b.best);
        CHECK(fabs(rap_ilp_objective(&c, &f) - r.objective) <= 1e-12 * r.objective);
        CHECK(r.objective <= rap_ilp_objective(&c, &g) + 1e-12);
        better_than_levels += r.objective < rap_ilp_objective(&c, &g) - 1e-12;
        /* the compact horizon (2 extra stages) is never below the optimum */
        rap_fusion h;
        rap_ilp_result rh;
        cfg.extra_stages = 2;
        REQUIRE_OK(rap_fuse_ilp(p, &cfg, &h, &rh));
        CHECK(rh.objective >= b.best - 1e-12);
        rap_fusion_free(&h);
        rap_fusion_free(&f);
        rap_fusion_free(&g);
        rap_plan_free(p);
    }
    CHECK_MSG(better_than_levels > 0, "no trial where the ILP beats level fusion");
}

RAP_TEST(planner_plan3_under_10s)
{
    char buf[256];
    const char *path = rap_test_plan_path("plan3.plan", buf, sizeof buf);
    if (!path)
        SKIP("plans/ not found from the working directory");
    double t0 = rap_now();
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &p));
    REQUIRE(rap_plan_n_ops(p) == 1819);
    rap_ilp_config cfg = rap_ilp_defaults();
    rap_fusion f, g;
    rap_ilp_result r;
    REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
    rap_model_shape sh = {26, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0, 0, 0};
    rap_capacity cap;
    rap_capacity_assumed(&sh, "test", &cap);
    rap_search_config sc = {NULL, &cap, 4096, 1, false, RAP_CHOICE_SLOWDOWN};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &sc, "plan3", &s, &sr));
    double dt = rap_now() - t0;
    CHECK_MSG(dt < 10.0, "plan 3 planned in %.2f s", dt);
    REQUIRE_OK(rap_fuse_levels(p, &g));
    CHECK(f.n <= g.n);
    CHECK_OK(rap_fusion_check(p, &f));
    CHECK_OK(rap_schedule_validate(s, p, &f, 4096));
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_fusion_free(&g);
    rap_plan_free(p);
}

/* ------------------------------------------------------------- split */

static const char *g_split_plan =
    "df[\"int_0\"] = df[\"int_0\"].fill_null(0)\n"
    "df[\"int_0\"] = functional.logit(df[\"int_0\"], 1e-5)\n"
    "df[\"int_1\"] = df[\"int_1\"].clamp(0, 100)\n"
    "df[\"cat_0\"] = functional.firstx(df[\"cat_0\"], 2)\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 1000)\n"
    "df[\"cat_1\"] = functional.ngram(df[\"cat_1\"], 2)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"], 1, 500)\n"
    "df[\"cat_2\"] = functional.firstx(df[\"cat_2\"], 3)\n"
    "df[\"cat_1\"] = df[\"cat_1\"].fill_null(0)\n"
    "df[\"cat_3\"] = functional.firstx(df[\"cat_0\"], 1)\n";

static bool same_column(const rap_host_column *a, const rap_host_column *b)
{
    if (a->kind != b->kind || a->width != b->width || a->rows != b->rows)
        return false;
    if (memcmp(a->valid, b->valid, (size_t)a->rows))
        return false;
    if (a->kind != RAP_SPARSE)
        return !memcmp(a->val, b->val, sizeof(float) * (size_t)(a->rows * a->width));
    return !memcmp(a->off, b->off, sizeof(int64_t) * (size_t)(a->rows + 1)) &&
           !memcmp(a->ids, b->ids, sizeof(int64_t) * (size_t)a->off[a->rows]);
}

/* Runs one batch of B rows (schema sc, fill seed) whole with fusion fw and
 * in schedule s's slices with fusion fs, on the CPU: every column must be
 * the same bytes. *split (may be NULL) keeps the sliced executor. */
static void slices_match_whole(rap_test_ctx *t, const rap_plan *p, rap_schema sc,
                               const rap_fusion *fw, const rap_fusion *fs, const rap_schedule *s,
                               int64_t B, uint64_t seed, const char *what, rap_prep **split)
{
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, sc, B, false));
    rap_test_fill_batch(&b, B, seed);
    rap_prep_config pc = {RAP_CPU, B, 2, NULL};
    rap_prep *whole = NULL, *sp = NULL;
    REQUIRE_OK(rap_prep_create(p, fw, &pc, &whole));
    REQUIRE_OK(rap_prep_create(p, fs, &pc, &sp));
    REQUIRE_OK(rap_prep_load(whole, &b));
    REQUIRE_OK(rap_prep_run(whole));
    REQUIRE_OK(rap_prep_load(sp, &b));
    for (int q = 0; q < s->n_slices; q++) {
        const rap_slice *sl = &s->slices[q];
        REQUIRE_OK(rap_prep_run_kernel(sp, sl->kernel, sl->d0, sl->d1, sl->r0, sl->r1, NULL));
    }
    for (int col = 0; col < p->n_cols; col++) {
        rap_host_column x, y;
        REQUIRE_OK(rap_prep_fetch(whole, col, &x));
        REQUIRE_OK(rap_prep_fetch(sp, col, &y));
        CHECK_MSG(same_column(&x, &y), "column %s differs (%s)", p->cols[col].name, what);
        rap_host_column_free(&x);
        rap_host_column_free(&y);
    }
    rap_prep_free(whole);
    rap_batch_free(&b);
    if (split)
        *split = sp;
    else
        rap_prep_free(sp);
}

RAP_TEST(planner_split_exact_and_windows_within_capacity)
{
    const int64_t B = 200000;
    rap_schema sc = {2, 4, 4};
    rap_plan *p;
    REQUIRE_OK(rap_plan_parse(g_split_plan, "split", sc, &p));
    rap_ilp_config cfg = rap_ilp_defaults();
    cfg.batch = B;
    rap_fusion f;
    rap_ilp_result r;
    REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
    bool computed = false;
    for (int k = 0; k < f.n; k++)
        computed |= p->nodes[f.kernels[k].nodes[0]].off == RAP_OFF_COMPUTED;
    CHECK(computed);
    /* windows smaller than most whole kernels: splits by descs and rows */
    rap_model_shape sh = {4, 16, {16}, 1, {1}, 1, B, 0, 0, 0};
    rap_capacity cap;
    rap_capacity_assumed(&sh, "test", &cap);
    /* each window holds 3/4 of the largest kernel (a computed one: 3
     * launches), so that kernel is cut by rows, others by descs */
    double largest = 0;
    bool largest_computed = false;
    for (int k = 0; k < f.n; k++) {
        double ms = rap_slice_ms(p, &f, NULL, k, 0, f.kernels[k].n, 0, B, B);
        if (ms > largest) {
            largest = ms;
            largest_computed = p->nodes[f.kernels[k].nodes[0]].off == RAP_OFF_COMPUTED;
        }
    }
    CHECK(largest_computed);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        cap.capacity_ms[w] = 0.75 * largest;
    rap_search_config c = {NULL, &cap, B, 1, false, RAP_CHOICE_SLOWDOWN};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &c, "split", &s, &sr));
    CHECK_OK(rap_schedule_validate(s, p, &f, B));
    CHECK(sr.n_split > 0);
    int row_pieces = 0, computed_row_pieces = 0;
    double load[RAP_WIN_COUNT] = {0};
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        int n;
        const rap_slice *sl = rap_schedule_window(s, (rap_window)w, &n);
        for (int q = 0; q < n; q++) {
            load[w] += rap_slice_ms(p, &f, NULL, sl[q].kernel, sl[q].d0, sl[q].d1, sl[q].r0,
                                    sl[q].r1, B);
            row_pieces += sl[q].r0 > 0;
            computed_row_pieces +=
                sl[q].r0 > 0 && p->nodes[f.kernels[sl[q].kernel].nodes[0]].off == RAP_OFF_COMPUTED;
        }
        if (w < RAP_WIN_EXPOSED)
            CHECK_MSG(load[w] <= cap.capacity_ms[w] + 1e-12, "window %s: load %.6f > capacity %.6f",
                      rap_window_name((rap_window)w), load[w], cap.capacity_ms[w]);
        CHECK(fabs(load[w] - sr.load_ms[w]) <= 1e-9);
    }
    CHECK(row_pieces > 0);
    CHECK(computed_row_pieces > 0);
    CHECK(sr.load_ms[RAP_WIN_EXPOSED] > 0); /* the windows cannot hold it all */

    /* the ablation (--no-split): whole kernels only, none over capacity, and
     * the largest kernel (bigger than any window) exposed whole */
    rap_search_config cw = c;
    cw.no_split = true;
    rap_schedule *sw;
    rap_search_result srw;
    REQUIRE_OK(rap_schedule_search(p, &f, &cw, "whole", &sw, &srw));
    CHECK_OK(rap_schedule_validate(sw, p, &f, B));
    CHECK(srw.n_split == 0 && srw.n_slices == f.n);
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        int n;
        const rap_slice *sl = rap_schedule_window(sw, (rap_window)w, &n);
        for (int q = 0; q < n; q++)
            CHECK(sl[q].d0 == 0 && sl[q].d1 == f.kernels[sl[q].kernel].n && sl[q].r0 == 0 &&
                  (sl[q].r1 == RAP_ROWS_END || sl[q].r1 >= B));
        if (w < RAP_WIN_EXPOSED)
            CHECK(srw.load_ms[w] <= cap.capacity_ms[w] + 1e-12);
    }
    CHECK(srw.load_ms[RAP_WIN_EXPOSED] >= largest - 1e-12);
    CHECK(srw.total_exposed_ms >= sr.total_exposed_ms - 1e-12); /* splitting helps here */
    rap_schedule_free(sw);

    /* run: whole vs the schedule's slices, on the CPU */
    slices_match_whole(t, p, sc, &f, &f, s, B, 7, "after the split", NULL);
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

/* ------------------------------------------------------------- files */

RAP_TEST(planner_capacity_roundtrip_and_mismatch)
{
    rap_model_shape sh = {26, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0, 0, 0};
    rap_capacity c, d;
    rap_capacity_assumed(&sh, "NVIDIA H200", &c);
    c.assumed = false;
    c.tolerance = 0.03;
    for (int w = 0; w < RAP_CAP_WINDOWS; w++) {
        c.standalone_ms[w] = 1.0 / 3 + w;
        c.capacity_ms[w] = 0.1 * w + 1e-7;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/cap.txt", rap_test_tmpdir());
    REQUIRE_OK(rap_capacity_save(&c, path));
    REQUIRE_OK(rap_capacity_load(path, &d));
    CHECK(!strcmp(d.gpu, "NVIDIA H200"));
    CHECK(!memcmp(&d.shape, &c.shape, sizeof d.shape));
    CHECK(d.tolerance == c.tolerance);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        CHECK(d.standalone_ms[w] == c.standalone_ms[w] && d.capacity_ms[w] == c.capacity_ms[w]);
    CHECK_OK(rap_capacity_check(&d, "NVIDIA H200", &sh));
    CHECK(rap_capacity_check(&d, "NVIDIA A100", &sh) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "made for GPU"));
    rap_model_shape o = sh;
    o.tables = 27;
    CHECK(rap_capacity_check(&d, "NVIDIA H200", &o) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "27"));
    o = sh;
    o.top[1] = 512;
    CHECK(rap_capacity_check(&d, "", &o) == RAP_ERR_ARG);
    o = sh;
    o.batch = 8192;
    CHECK(rap_capacity_check(&d, "", &o) == RAP_ERR_ARG);
    o = sh;
    o.precision = 1;
    CHECK(rap_capacity_check(&d, "", &o) == RAP_ERR_ARG);
    /* corrupt files are refused */
    FILE *fp = fopen(path, "w");
    REQUIRE(fp);
    fprintf(fp, "rap-capacity 2\n");
    fclose(fp);
    CHECK(rap_capacity_load(path, &d) == RAP_ERR_DATA);
    fp = fopen(path, "w");
    REQUIRE(fp);
    c.capacity_ms[0] = -1;
    REQUIRE_OK(rap_capacity_write(&c, fp));
    fclose(fp);
    CHECK(rap_capacity_load(path, &d) == RAP_ERR_DATA);
}

/* emb_dtype and optimizer on the model line: written, read back, checked
 * against the run; a file without them (every shipped one) holds fp32
 * tables and matches sgd and adagrad, not rowwise-adagrad, naming both. */
RAP_TEST(planner_capacity_dtype_and_optimizer)
{
    rap_model_shape sh = {27, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0,
                          RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD};
    rap_capacity c, d;
    rap_capacity_assumed(&sh, "NVIDIA H200", &c);
    c.assumed = false;
    char path[512];
    snprintf(path, sizeof path, "%s/cap16.txt", rap_test_tmpdir());
    REQUIRE_OK(rap_capacity_save(&c, path));
    FILE *fp = fopen(path, "r");
    REQUIRE(fp);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = 0;
    fclose(fp);
    CHECK_MSG(strstr(text, "precision=fp32 emb_dtype=bf16 optimizer=rowwise-adagrad\n"), "%s", text);
    REQUIRE_OK(rap_capacity_load(path, &d));
    CHECK(!memcmp(&d.shape, &c.shape, sizeof d.shape));
    CHECK_OK(rap_capacity_check(&d, "", &sh));
    rap_model_shape o = sh;
    o.emb_dtype = RAP_EMB_FP32;
    CHECK(rap_capacity_check(&d, "", &o) == RAP_ERR_ARG);
    CHECK_MSG(strstr(rap_last_error(), "made for bf16 embedding tables, not fp32"), "%s",
              rap_last_error());
    o = sh;
    o.optimizer = RAP_ADAGRAD;
    CHECK(rap_capacity_check(&d, "", &o) == RAP_ERR_ARG);
    CHECK_MSG(strstr(rap_last_error(), "optimizer rowwise-adagrad, not adagrad"), "%s",
              rap_last_error());
    /* a bad value or an unknown key on the model line is refused */
    const char *bad[] = {"emb_dtype=int8", "optimizer=adam", "colour=blue",
                         "emb_dtype=bf16 emb_dtype=fp16"};
    for (int k = 0; k < 4; k++) {
        fp = fopen(path, "w");
        REQUIRE(fp);
        fprintf(fp, "rap-capacity 1\ngpu NVIDIA H200\nmodel tables=27 emb_dim=128 bot=512-256-128 "
                "top=1024-1024-512-256-1 batch=4096 precision=fp32 %s\n", bad[k]);
        for (int w = 0; w < RAP_CAP_WINDOWS; w++)
            fprintf(fp, "window %s standalone_ms=1 capacity_ms=0.1\n",
                    rap_window_name((rap_window)w));
        fclose(fp);
        CHECK_MSG(rap_capacity_load(path, &d) == RAP_ERR_DATA, "%s", bad[k]);
    }
    /* the shipped files: fp32, the optimizer unrecorded */
    char buf[256];
    const char *shipped = rap_test_plan_path("h200/capacity/plan1_4096.capacity", buf, sizeof buf);
    if (!shipped)
        SKIP("plans/h200/capacity/plan1_4096.capacity not found from here");
    REQUIRE_OK(rap_capacity_load(shipped, &d));
    CHECK(d.shape.emb_dtype == RAP_EMB_FP32 && d.shape.optimizer == RAP_CAP_OPT_UNRECORDED);
    o = d.shape;
    o.optimizer = RAP_SGD;
    CHECK_OK(rap_capacity_check(&d, "NVIDIA H200", &o));
    o.optimizer = RAP_ADAGRAD;
    CHECK_OK(rap_capacity_check(&d, "NVIDIA H200", &o));
    o.optimizer = RAP_ROWWISE_ADAGRAD;
    CHECK(rap_capacity_check(&d, "NVIDIA H200", &o) == RAP_ERR_ARG);
    CHECK_MSG(strstr(rap_last_error(), "records no optimizer") &&
                  strstr(rap_last_error(), "rowwise-adagrad"),
              "%s", rap_last_error());
    o.optimizer = RAP_ADAGRAD;
    o.emb_dtype = RAP_EMB_BF16;
    CHECK(rap_capacity_check(&d, "NVIDIA H200", &o) == RAP_ERR_ARG);
    CHECK_MSG(strstr(rap_last_error(), "made for fp32 embedding tables, not bf16"), "%s",
              rap_last_error());
}

/* Synthetic measurements from a known formula with 2 % noise. */
static double true_ms(double descs, double rows, double width, bool computed)
{
    double bytes = rows * descs * (8 * width + 13);
    return (computed ? 0.012 : 0.004) + 0.00015 * descs + bytes / 1.4e12 * 1e3 * (width > 1 ? 1.3 : 1.0);
}

static void write_synthetic(const char *path, const char *gpu, int n, uint64_t seed)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms\n");
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        bool computed = i & 1;
        double descs = 1 + (double)(rnd(&s) % 128);
        double rows = floor(exp(log(256) + rnd01(&s) * (log(65536) - log(256))));
        double width = computed ? (double)(1 + rnd(&s) % 4) : 1;
        double ms = true_ms(descs, rows, width, computed) * (1 + 0.02 * (2 * rnd01(&s) - 1));
        fprintf(f, "%s,%s,%d,%g,%g,%g,%g,%g,%g,%.9g\n", gpu, computed ? "firstx" : "logit",
                computed ? 13 : 0, descs, rows, width, rows * descs * width,
                rows * descs * (8 * width + 13), rows, ms);
    }
    fclose(f);
}

RAP_TEST(planner_predictor_xgboost_synthetic)
{
    char csv[512], dir[512];
    snprintf(csv, sizeof csv, "%s/kernels.csv", rap_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/pred", rap_test_tmpdir());
    write_synthetic(csv, "NVIDIA H200", 3000, 5);
    rap_pred_quality q[8];
    int nq = 0;
    REQUIRE_OK(rap_predictor_train(csv, dir, q, 8, &nq));
    REQUIRE(nq == 2);
    for (int i = 0; i < nq; i++) {
        CHECK(q[i].n_test > 200 && q[i].n_test < 400); /* a fifth of 1500 */
        CHECK_MSG(q[i].within10 >= 0.95, "%s: %.3f within 10 %%", q[i].type, q[i].within10);
        CHECK_MSG(q[i].median < 0.05, "%s: median error %.3f", q[i].type, q[i].median);
    }
    rap_predictor *p;
    REQUIRE_OK(rap_predictor_load(dir, &p));
    CHECK(!strcmp(rap_predictor_gpu(p), "NVIDIA H200"));
    CHECK(rap_predictor_n_types(p) == 2);
    CHECK_OK(rap_predictor_check(p, "NVIDIA H200"));
    CHECK(rap_predictor_check(p, "NVIDIA A100") == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "made for GPU"));
    /* fresh points (another seed): predictions within 10 % of the formula */
    uint64_t s = 99;
    int within = 0, total = 200;
    for (int i = 0; i < total; i++) {
        rap_kfeat f;
        memset(&f, 0, sizeof f);
        bool computed = i & 1;
        f.op = computed ? RAP_OP_FIRSTX : RAP_OP_LOGIT;
        f.variant = computed ? 13 : 0;
        f.computed = computed;
        f.descs = 1 + (double)(rnd(&s) % 128);
        f.rows = floor(exp(log(256) + rnd01(&s) * (log(65536) - log(256))));
        f.avg_width = computed ? (double)(1 + rnd(&s) % 4) : 1;
        f.total_ids = f.rows * f.descs * f.avg_width;
        f.bytes = f.rows * f.descs * (8 * f.avg_width + 13);
        f.batch_rows = f.rows;
        bool model = false;
        double pr = rap_predict_ms(p, &f, &model);
        CHECK(model);
        double t_ms = true_ms(f.descs, f.rows, f.avg_width, computed);
        within += fabs(pr - t_ms) <= 0.1 * t_ms;
    }
    CHECK_MSG(within >= total * 95 / 100, "%d of %d fresh points within 10 %%", within, total);
    /* a type without a model falls back to the analytic estimate */
    rap_kfeat g = {RAP_OP_NGRAM, 14, true, 4, 1000, 2, 8000, 100000, 1000};
    bool model = true;
    rap_analytic an = rap_analytic_defaults();
    CHECK(rap_predict_ms(p, &g, &model) == rap_analytic_ms(&an, &g));
    CHECK(!model);
    rap_predictor_free(p);
    /* a CSV mixing GPUs is refused */
    FILE *fp = fopen(csv, "a");
    REQUIRE(fp);
    fprintf(fp, "NVIDIA A100,logit,0,1,1000,1,1000,17000,1000,0.01\n");
    fclose(fp);
    CHECK(rap_predictor_train(csv, dir, NULL, 0, NULL) == RAP_ERR_DATA);
}

RAP_TEST(planner_report_json)
{
    rap_plan *p;
    REQUIRE_OK(rap_plan_parse(g_split_plan, "split", (rap_schema){2, 4, 4}, &p));
    rap_fusion f;
    REQUIRE_OK(rap_fuse_levels(p, &f));
    rap_model_shape sh = {4, 16, {16}, 1, {1}, 1, 1000, 0, 0, 0};
    rap_capacity cap;
    rap_capacity_assumed(&sh, "test", &cap);
    rap_search_config c = {NULL, &cap, 1000, 1, false, RAP_CHOICE_SLOWDOWN};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &c, "r", &s, &sr));
    char path[512];
    snprintf(path, sizeof path, "%s/report.json", rap_test_tmpdir());
    FILE *fp = fopen(path, "w+");
    REQUIRE(fp);
    rap_report_info info = {"split", "test", "analytic fallback (no predictor)", "assumed", "levels",
                            NULL, 0, f.n, 0, 1000, NULL};
    CHECK_OK(rap_plan_report_json(fp, p, &f, s, &sr, &info));
    rewind(fp);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = 0;
    fclose(fp);
    CHECK(strstr(text, "\"ops\": ["));
    CHECK(strstr(text, "\"kernels\": ["));
    CHECK(strstr(text, "\"windows\": ["));
    const char *ex = strstr(text, "{\"name\": \"exposed\"");
    const char *gc = strstr(text, "{\"name\": \"grad_comm\"");
    CHECK(ex && gc && gc < ex);
    CHECK(strstr(text, "\"raw_input\": \"cat_0\""));
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

/* ------------------------------------------------------------- rap plan */

#include <sys/wait.h>
#include <unistd.h>

RAP_TEST(planner_cli_plan_and_refusals)
{
    char exe[1024];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        strcpy(slash, "/rap");
    if (access(exe, X_OK) != 0)
        SKIP("%s not built", exe);
    char pbuf[256];
    const char *path = rap_test_plan_path("plan0.plan", pbuf, sizeof pbuf);
    if (!path)
        SKIP("plans/ not found from the working directory");
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &p));
    int tables = 0;
    for (int c = 0; c < p->n_cols; c++)
        tables += p->nodes[p->cols[c].node].kind == RAP_SPARSE;
    const char *dir = rap_test_tmpdir();
    char cap_ok[512], cap_gpu[512], cap_shape[512], sched[512], report[512], args[4096], out[1 << 14];
    snprintf(cap_ok, sizeof cap_ok, "%s/cap_ok.txt", dir);
    snprintf(cap_gpu, sizeof cap_gpu, "%s/cap_a100.txt", dir);
    snprintf(cap_shape, sizeof cap_shape, "%s/cap_shape.txt", dir);
    snprintf(sched, sizeof sched, "%s/plan0.sched", dir);
    snprintf(report, sizeof report, "%s/plan0.json", dir);
    /* fp32 tables, Adagrad: rap plan's defaults */
    rap_model_shape sh = {tables, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0, 0,
                          RAP_ADAGRAD};
    rap_capacity c;
    rap_capacity_assumed(&sh, "NVIDIA H200", &c);
    c.capacity_ms[0] = 0.02; /* small: some kernels move on or split */
    c.capacity_ms[1] = 0.01;
    REQUIRE_OK(rap_capacity_save(&c, cap_ok));
    snprintf(c.gpu, sizeof c.gpu, "NVIDIA A100");
    REQUIRE_OK(rap_capacity_save(&c, cap_gpu));
    snprintf(c.gpu, sizeof c.gpu, "NVIDIA H200");
    c.shape.tables = tables - 1;
    REQUIRE_OK(rap_capacity_save(&c, cap_shape));

    snprintf(args, sizeof args, "plan --plan %s --capacity %s --out %s --report %s", path, cap_ok,
             sched, report);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "rap plan failed:\n%s", out);
    rap_schedule *s = NULL;
    CHECK_OK(rap_schedule_load(sched, &s));
    if (s) {
        /* the runtime's view: the fusion file written beside the schedule */
        char fpath[600];
        snprintf(fpath, sizeof fpath, "%s.fusion", sched);
        rap_fusion f;
        CHECK_OK(rap_fusion_load(p, fpath, &f));
        CHECK_OK(rap_schedule_validate(s, p, &f, 4096));
        rap_fusion_free(&f);
        rap_schedule_free(s);
    }
    FILE *fp = fopen(report, "r");
    CHECK(fp);
    if (fp) {
        static char text[1 << 20];
        size_t n = fread(text, 1, sizeof text - 1, fp);
        text[n] = 0;
        fclose(fp);
        CHECK(strstr(text, "\"latency_model\": \"analytic fallback (no predictor)\""));
        CHECK(strstr(text, "\"name\": \"exposed\""));
    }
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --gpu 'NVIDIA H200' --out %s", path,
             cap_gpu, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "made for GPU \"NVIDIA A100\", not \"NVIDIA H200\""), "%s", out);
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --out %s", path, cap_shape, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "embedding tables"), "%s", out);
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --batch 8192 --out %s", path, cap_ok, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "batch 4096, not 8192"), "%s", out);
    /* the tables' type and the optimizer are model keys too */
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --emb-dtype bf16 --out %s", path,
             cap_ok, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "made for fp32 embedding tables, not bf16"), "%s", out);
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --optimizer rowwise-adagrad --out %s",
             path, cap_ok, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "made for optimizer adagrad, not rowwise-adagrad"), "%s", out);
    /* a predictor for another GPU than the capacity's */
    char csv[512], pred[512];
    snprintf(csv, sizeof csv, "%s/a100.csv", dir);
    snprintf(pred, sizeof pred, "%s/pred_a100", dir);
    write_synthetic(csv, "NVIDIA A100", 200, 3);
    snprintf(args, sizeof args, "predictor train --in %s --out %s", csv, pred);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK(strstr(out, "| logit.0 |"));
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --predictor %s --out %s", path, cap_ok,
             pred, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "was made for GPU \"NVIDIA A100\", not \"NVIDIA H200\""), "%s", out);
    rap_plan_free(p);
}

RAP_TEST(planner_fusion_file_roundtrip)
{
    char buf[256];
    const char *path = rap_test_plan_path("plan2.plan", buf, sizeof buf);
    if (!path)
        SKIP("plans/ not found from the working directory");
    rap_plan *p, *q;
    REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &p));
    rap_ilp_config cfg = rap_ilp_defaults();
    rap_fusion f, g;
    rap_ilp_result r;
    REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
    char fpath[512];
    snprintf(fpath, sizeof fpath, "%s/plan2.fusion", rap_test_tmpdir());
    REQUIRE_OK(rap_fusion_save(p, &f, fpath));
    REQUIRE_OK(rap_fusion_load(p, fpath, &g));
    CHECK(g.n == f.n);
    CHECK(rap_fusion_hash(p, &g) == rap_fusion_hash(p, &f));
    rap_fusion_free(&g);
    /* another plan is refused */
    const char *path0 = rap_test_plan_path("plan0.plan", buf, sizeof buf);
    REQUIRE(path0);
    REQUIRE_OK(rap_plan_load(path0, rap_schema_criteo(), &q));
    CHECK(rap_fusion_load(q, fpath, &g) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "not this plan"));
    rap_plan_free(q);
    /* a kernel order against the dependencies is refused */
    rap_kernel tmp = f.kernels[0];
    f.kernels[0] = f.kernels[f.n - 1];
    f.kernels[f.n - 1] = tmp;
    REQUIRE_OK(rap_fusion_save(p, &f, fpath));
    CHECK(rap_fusion_load(p, fpath, &g) == RAP_ERR_PLAN);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(planner_capacity_aware_variant)
{
    /* windows that hold about one kernel each: the variant runs, its
     * fusion is valid and its own whole-kernel exposed estimate is no
     * worse than the plain ILP fusion placed the same way (its start) */
    rap_plan *p;
    REQUIRE_SHIPPED_PLAN("plan0.plan", &p);
    rap_ilp_config cfg = rap_ilp_defaults();
    cfg.time_limit_s = 2;
    double caps[RAP_WIN_COUNT] = {0.008, 0.008, 0.008, 0.008, 0, 0};
    cfg.window_cap_ms = caps;
    cfg.n_windows = RAP_WIN_COUNT;
    rap_fusion f;
    rap_ilp_result r;
    REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
    CHECK(r.capacity_aware);
    CHECK_OK(rap_fusion_check(p, &f));
    CHECK(r.exposed_ms >= 0 && r.objective >= r.exposed_ms);
    CHECK(r.bound <= r.objective + 1e-12);
    rap_model_shape sh = {27, 128, {128}, 1, {1}, 1, 4096, 0, 0, 0};
    rap_capacity cap;
    rap_capacity_assumed(&sh, "t", &cap);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        cap.capacity_ms[w] = caps[w];
    rap_search_config sc = {NULL, &cap, 4096, 1, false, RAP_CHOICE_SLOWDOWN};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &sc, "c", &s, &sr));
    /* observed on this plan: the search (which may split) exposes no more
     * than the ILP's own whole-kernel placement */
    CHECK(sr.total_exposed_ms <= r.exposed_ms + 1e-9);
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(planner_capacity_aware_flat_plan)
{
    /* ops on raw columns only (no chain): every stage variable of an op is
     * in a capacity row, more matrix entries than the chains' rows leave
     * room for; the variant runs and its fusion is valid (with ASan: no
     * write past the matrix, which the estimate once missed) */
    rap_plan *p;
    REQUIRE_OK(rap_plan_parse("df[\"b\"] = df[\"int_0\"].bucketize([0.5, 1.0])\n"
                              "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n"
                              "df[\"int_2\"] = df[\"int_2\"].logit(0.00001)\n"
                              "df[\"cat_0\"] = df[\"cat_0\"].fill_null(0)\n",
                              "flat", (rap_schema){3, 1, 1}, &p));
    rap_ilp_config cfg = rap_ilp_defaults();
    cfg.time_limit_s = 2;
    double caps[RAP_WIN_COUNT] = {0.004, 0.004, 0.004, 0.004, 0, 0};
    cfg.window_cap_ms = caps;
    cfg.n_windows = RAP_WIN_COUNT;
    rap_fusion f;
    rap_ilp_result r;
    REQUIRE_OK(rap_fuse_ilp(p, &cfg, &f, &r));
    CHECK(r.capacity_aware);
    CHECK(r.n_ops == 4);
    CHECK_OK(rap_fusion_check(p, &f));
    rap_fusion_free(&f);
    rap_plan_free(p);
}

/* ------------------------------------------------------------- row fusion */

/* The shape of a row fusion: every op once, row kernels hold row-local
 * ops only in groups of at most S, each member after its input in its
 * group (only a group's first node reads outside it), one-type kernels
 * hold no row-local op. Returns the number of row kernels. */
static int check_rows_shape(rap_test_ctx *t, const rap_plan *p, const rap_fusion *f, int S)
{
    int rows = 0, count = 0;
    CHECK_OK(rap_fusion_check(p, f));
    for (int k = 0; k < f->n; k++) {
        const rap_kernel *kn = &f->kernels[k];
        count += kn->n;
        if (!kn->group) {
            for (int j = 0; j < kn->n; j++)
                CHECK_MSG(!rap_node_row_local(p, kn->nodes[j]), "kernel %d holds row-local node %d",
                          k, kn->nodes[j]);
            continue;
        }
        rows++;
        CHECK(kn->op == RAP_OP_INPUT && kn->group[0] == 0 && kn->group[kn->n_groups] == kn->n);
        for (int g = 0; g < kn->n_groups; g++) {
            int a = kn->group[g], b = kn->group[g + 1];
            CHECK_MSG(b > a && b - a <= S, "kernel %d group %d: %d nodes (at most %d)", k, g, b - a, S);
            for (int j = a; j < b; j++) {
                int i = kn->nodes[j], in = p->nodes[i].input;
                CHECK(rap_node_row_local(p, i));
                bool inside = false;
                for (int q = a; q < j; q++)
                    inside |= kn->nodes[q] == in;
                CHECK_MSG(inside == (j > a), "kernel %d group %d node %d: input %s the group", k, g,
                          i, inside ? "inside" : "outside");
            }
        }
    }
    CHECK(count == rap_plan_n_ops(p));
    return rows;
}

RAP_TEST(planner_row_fusion_shipped_plans)
{
    static const char *const names[] = {"plan0.plan", "plan1.plan", "plan2.plan", "plan3.plan"};
    for (int q = 0; q < 4; q++) {
        rap_plan *p;
        REQUIRE_SHIPPED_PLAN(names[q], &p);
        rap_fusion lv, r8, r1;
        REQUIRE_OK(rap_fuse_levels(p, &lv));
        REQUIRE_OK(rap_fuse_rows(p, &lv, 8, 1000000, &r8));
        REQUIRE_OK(rap_fuse_rows(p, &lv, 1, 64, &r1));
        CHECK(check_rows_shape(t, p, &r8, 8) >= 1);
        check_rows_shape(t, p, &r1, 1);
        rap_fusion fa; /* auto: rows for plans 0 and 1 (6 level kernels), not 2 and 3 */
        REQUIRE_OK(rap_fuse(p, RAP_FUSE_AUTO, &fa));
        int rk = 0;
        for (int k = 0; k < fa.n; k++)
            rk += fa.kernels[k].group != NULL;
        CHECK_MSG((rk > 0) == (q <= 1) && (rk > 0) == (lv.n <= RAP_ROW_AUTO_KERNELS),
                  "%s: auto made %d row kernels of %d (levels: %d kernels)", names[q], rk, fa.n,
                  lv.n);
        rap_fusion_free(&fa);
        rap_fusion rc; /* at most 16 ops a row kernel */
        REQUIRE_OK(rap_fuse_rows(p, &lv, 8, 16, &rc));
        check_rows_shape(t, p, &rc, 8);
        for (int k = 0; k < rc.n; k++)
            CHECK_MSG(!rc.kernels[k].group || rc.kernels[k].n <= 16, "row kernel %d: %d ops", k,
                      rc.kernels[k].n);
        CHECK(rc.n > r8.n);
        rap_fusion_free(&rc);
        CHECK_MSG(r8.n < lv.n, "%s: %d kernels with rows, %d without", names[q], r8.n, lv.n);
        if (q <= 1) { /* plans 0 and 1: every op is row-local: one kernel, a group a column */
            CHECK_MSG(r8.n == 1 && r8.kernels[0].n_groups == 39, "%s: %d kernels, %d groups",
                      names[q], r8.n, r8.n ? r8.kernels[0].n_groups : 0);
        }
        /* on top of the ILP's fusion too */
        rap_ilp_config cfg = rap_ilp_defaults();
        cfg.time_limit_s = 1;
        rap_fusion il, ir;
        rap_ilp_result res;
        REQUIRE_OK(rap_fuse_ilp(p, &cfg, &il, &res));
        REQUIRE_OK(rap_fuse_rows(p, &il, 8, 128, &ir));
        check_rows_shape(t, p, &ir, 8);
        CHECK(ir.n <= il.n);
        rap_fusion_free(&il);
        rap_fusion_free(&ir);
        rap_fusion_free(&lv);
        rap_fusion_free(&r8);
        rap_fusion_free(&r1);
        rap_plan_free(p);
        if (t->failures)
            return;
    }
}

/* Row kernels through the file, the schedule check, the search's split
 * (by whole groups and by rows) and the CPU executor: the slices of the
 * schedule give the unfused result, byte for byte. */
RAP_TEST(planner_row_fusion_file_schedule_split)
{
    const int64_t B = 50000;
    rap_schema sc = {2, 4, 4};
    rap_plan *p;
    REQUIRE_OK(rap_plan_parse(g_split_plan, "split", sc, &p));
    rap_fusion lv, f, g, none;
    REQUIRE_OK(rap_fuse_levels(p, &lv));
    REQUIRE_OK(rap_fuse_rows(p, &lv, 8, 128, &f));
    REQUIRE_OK(rap_fuse_none(p, &none));
    int rk = -1;
    for (int k = 0; k < f.n; k++)
        if (f.kernels[k].group && f.kernels[k].n_groups >= 2 &&
            (rk < 0 || f.kernels[k].n > f.kernels[rk].n))
            rk = k;
    REQUIRE(rk >= 0); /* a row kernel of 2 groups or more */
    /* the file */
    char fpath[512];
    snprintf(fpath, sizeof fpath, "%s/rows.fusion", rap_test_tmpdir());
    REQUIRE_OK(rap_fusion_save(p, &f, fpath));
    REQUIRE_OK(rap_fusion_load(p, fpath, &g));
    CHECK(g.n == f.n && rap_fusion_hash(p, &g) == rap_fusion_hash(p, &f));
    CHECK(g.kernels[rk].n_groups == f.kernels[rk].n_groups);
    rap_fusion_free(&g);
    { /* a truncated file (cut inside a row kernel's line) names the fault */
        FILE *in = fopen(fpath, "r");
        REQUIRE(in);
        char text[8192];
        size_t n = fread(text, 1, sizeof text - 1, in);
        fclose(in);
        char tpath[600];
        snprintf(tpath, sizeof tpath, "%s.cut", fpath);
        FILE *out = fopen(tpath, "w");
        REQUIRE(out && n > 10);
        fwrite(text, 1, n - 3, out);
        fclose(out);
        CHECK(rap_fusion_load(p, tpath, &g) == RAP_ERR_DATA);
        CHECK(strstr(rap_last_error(), "truncated"));
    }
    CHECK(rap_fusion_hash(p, &lv) != rap_fusion_hash(p, &f));
    /* a schedule cutting a group is refused */
    {
        const rap_kernel *kn = &f.kernels[rk];
        int cut = -1; /* a desc inside a group of 2 nodes or more */
        for (int gi = 0; gi < kn->n_groups && cut < 0; gi++)
            if (kn->group[gi + 1] - kn->group[gi] >= 2)
                cut = kn->group[gi] + 1;
        REQUIRE(cut > 0);
        rap_schedule *bad;
        REQUIRE_OK(rap_schedule_create(p, &f, "bad", &bad));
        for (int k = 0; k < f.n; k++) {
            if (k == rk) {
                REQUIRE_OK(rap_schedule_add(bad, RAP_WIN_MLP_BACKWARD, k, 0, cut, 0, RAP_ROWS_END, 0));
                REQUIRE_OK(rap_schedule_add(bad, RAP_WIN_MLP_BACKWARD, k, cut, kn->n, 0, RAP_ROWS_END, 0));
            } else {
                REQUIRE_OK(rap_schedule_add(bad, RAP_WIN_MLP_BACKWARD, k, 0, f.kernels[k].n, 0,
                                            RAP_ROWS_END, 0));
            }
        }
        CHECK(rap_schedule_validate(bad, p, &f, B) == RAP_ERR_PLAN);
        CHECK(strstr(rap_last_error(), "cut one of its groups"));
        rap_schedule_free(bad);
    }
    /* windows of 0.3 x the largest kernel: row kernels split by groups and rows */
    double largest = 0;
    for (int k = 0; k < f.n; k++) {
        double ms = rap_slice_ms(p, &f, NULL, k, 0, f.kernels[k].n, 0, B, B);
        largest = ms > largest ? ms : largest;
    }
    rap_model_shape sh = {4, 16, {16}, 1, {1}, 1, B, 0, 0, 0};
    rap_capacity cap;
    rap_capacity_assumed(&sh, "test", &cap);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        cap.capacity_ms[w] = 0.3 * largest;
    rap_search_config c = {NULL, &cap, B, 1, false, RAP_CHOICE_SLOWDOWN};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &c, "rows", &s, &sr));
    CHECK_OK(rap_schedule_validate(s, p, &f, B));
    int rk_slices = 0, rk_rowcut = 0;
    for (int q = 0; q < s->n_slices; q++) {
        const rap_slice *sl = &s->slices[q];
        if (!f.kernels[sl->kernel].group)
            continue;
        rk_slices++;
        rk_rowcut += sl->r0 > 0;
    }
    CHECK_MSG(rk_slices >= 3 && rk_rowcut >= 1, "row kernel slices %d, cut by rows %d", rk_slices,
              rk_rowcut);
    /* run: the schedule's slices on row kernels == unfused, whole */
    rap_prep *split = NULL;
    slices_match_whole(t, p, sc, &none, &f, s, B, 11, "row kernels in slices", &split);
    REQUIRE(split);
    /* the executor refuses a piece cutting a group */
    {
        const rap_kernel *kn = &f.kernels[rk];
        int cut = -1;
        for (int gi = 0; gi < kn->n_groups && cut < 0; gi++)
            if (kn->group[gi + 1] - kn->group[gi] >= 2)
                cut = kn->group[gi] + 1;
        CHECK(rap_prep_run_kernel(split, rk, 0, cut, 0, B, NULL) == RAP_ERR_ARG);
        CHECK(strstr(rap_last_error(), "cut a group"));
    }
    rap_prep_free(split);
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_fusion_free(&lv);
    rap_fusion_free(&none);
    rap_plan_free(p);
}

/* A kernel that fits whole in several windows goes to the one where a ms
 * of work slows training least (standalone / capacity), not the earliest
 * or the one with the most room (unless asked): plan 1's row kernel with the H200's capacities at 4096
 * (mlp_backward 455 us for 29.5 us of work, emb_backward 108 for 10.5). */
RAP_TEST(planner_window_least_slowdown)
{
    char buf[256], cbuf[256], pbuf[256];
    const char *path = rap_test_plan_path("plan1.plan", buf, sizeof buf);
    const char *cpath = rap_test_plan_path("h200/capacity/plan1_4096.capacity", cbuf, sizeof cbuf);
    const char *ppath = rap_test_plan_path("h200/predictor", pbuf, sizeof pbuf);
    if (!path || !cpath || !ppath)
        SKIP("plans/ not found from the working directory");
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &p));
    rap_capacity cap;
    REQUIRE_OK(rap_capacity_load(cpath, &cap));
    rap_predictor *pred = NULL;
    REQUIRE_OK(rap_predictor_load(ppath, &pred));
    CHECK(rap_window_rate(&cap, RAP_WIN_EMB_BACKWARD) < rap_window_rate(&cap, RAP_WIN_MLP_BACKWARD));
    CHECK(rap_window_rate(&cap, RAP_WIN_EMB_FORWARD) == HUGE_VAL); /* no capacity */
    rap_fusion f;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_ROWS, &f));
    REQUIRE(f.n == 1);
    double ms = rap_slice_ms(p, &f, pred, 0, 0, f.kernels[0].n, 0, 4096, 4096);
    REQUIRE(ms <= cap.capacity_ms[RAP_WIN_EMB_BACKWARD]); /* fits both */
    /* 0: least slowdown, 1: earliest, 2: most room (mlp_backward has
     * 29.5 us left, emb_backward 10.5) */
    for (int choice = 0; choice < 3; choice++) {
        rap_search_config c = {pred, &cap, 4096, 1, false, (rap_window_choice)choice};
        rap_schedule *s;
        rap_search_result sr;
        REQUIRE_OK(rap_schedule_search(p, &f, &c, "w", &s, &sr));
        rap_window want = choice ? RAP_WIN_MLP_BACKWARD : RAP_WIN_EMB_BACKWARD;
        int n = 0;
        rap_schedule_window(s, want, &n);
        CHECK_MSG(n == 1 && s->n_slices == 1, "choice %d: %d slices, %d in %s", choice,
                  s->n_slices, n, rap_window_name(want));
        rap_schedule_free(s);
    }
    rap_fusion_free(&f);
    /* level fusion: least slowdown kernel by kernel would send fill_null to
     * emb_backward and its logit past every window; the first-fit schedule,
     * which exposes nothing, is kept */
    REQUIRE_OK(rap_fuse_levels(p, &f));
    for (int earliest = 0; earliest < 2; earliest++) {
        rap_search_config c = {pred, &cap, 4096, 1, false,
                               earliest ? RAP_CHOICE_EARLIEST : RAP_CHOICE_SLOWDOWN};
        rap_schedule *s;
        rap_search_result sr;
        REQUIRE_OK(rap_schedule_search(p, &f, &c, "l", &s, &sr));
        CHECK_MSG(sr.total_exposed_ms == 0 && sr.load_ms[RAP_WIN_EXPOSED] == 0,
                  "earliest %d: %.4f ms exposed", earliest, sr.total_exposed_ms);
        rap_schedule_free(s);
    }
    rap_fusion_free(&f);
    rap_predictor_free(pred);
    rap_plan_free(p);
}

/* Row kernels have a type of their own, "rows" (rap profile kernels
 * measures them): trained from a CSV, loaded back, and used for a row
 * kernel's slices instead of the estimate from the one-type models. */
RAP_TEST(planner_predictor_rows_type)
{
    char csv[512], dir[512], buf[256];
    const char *path = rap_test_plan_path("plan1.plan", buf, sizeof buf);
    if (!path)
        SKIP("plans/ not found from the working directory");
    snprintf(csv, sizeof csv, "%s/rows_kernels.csv", rap_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/rows_pred", rap_test_tmpdir());
    FILE *f = fopen(csv, "w");
    REQUIRE(f);
    fprintf(f, "gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms\n");
    uint64_t s = 17;
    for (int i = 0; i < 1500; i++) {
        double descs = 1 + (double)(rap_test_rnd(&s) % 128);
        double rows = floor(exp(log(256) + rap_test_rnd01(&s) * (log(65536) - log(256))));
        double ms = true_ms(descs, rows, 1, false) * 0.7 * (1 + 0.02 * (2 * rap_test_rnd01(&s) - 1));
        fprintf(f, "NVIDIA H200,rows,0,%g,%g,1,%g,%g,%g,%.9g\n", descs, rows, rows * descs,
                rows * descs * 21, rows, ms);
    }
    fclose(f);
    rap_pred_quality q[4];
    int nq = 0;
    REQUIRE_OK(rap_predictor_train(csv, dir, q, 4, &nq));
    REQUIRE(nq == 1);
    CHECK_MSG(!strcmp(q[0].type, "rows.0"), "type %s", q[0].type);
    rap_predictor *pred;
    REQUIRE_OK(rap_predictor_load(dir, &pred));
    rap_plan *p;
    REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &p));
    rap_fusion fr;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_ROWS, &fr));
    REQUIRE(fr.n == 1 && fr.kernels[0].group);
    rap_kfeat kf;
    rap_kfeat_of_rows(p, fr.kernels[0].nodes, 0, fr.kernels[0].n, 4096, &kf);
    CHECK(kf.op == RAP_OP_INPUT && kf.variant == 0 && !kf.computed && kf.descs == fr.kernels[0].n);
    bool model = false;
    double want = rap_predict_ms(pred, &kf, &model);
    CHECK(model);
    double got = rap_slice_ms(p, &fr, pred, 0, 0, fr.kernels[0].n, 0, 4096, 4096);
    CHECK_MSG(got == want, "row kernel slice %.6f ms, the rows model says %.6f", got, want);
    /* without the model: the estimate from one-type models (here the analytic ones) */
    double est = rap_slice_ms(p, &fr, NULL, 0, 0, fr.kernels[0].n, 0, 4096, 4096);
    CHECK(est > 0 && est != want);
    rap_fusion_free(&fr);
    rap_plan_free(p);
    rap_predictor_free(pred);
}
