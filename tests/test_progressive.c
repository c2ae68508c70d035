/* test_progressive.c -- progressive validation and the guards: the window's
 * reference against exact metrics, the trainer's progressive metrics
 * against an offline evaluation of the same rows with the weights before
 * each step (CPU; GPU variant), the GPU kernel against the reference, and
 * each guard on data made to trip it and on normal data. GPU tests skip
 * here. */
#include "test.h"

#include "core/core.h"
#include "model/model.h"
#include "run/checkpoint.h"
#include "run/guards.h"
#include "run/input.h"
#include "run/progressive.h"
#include "run/train.h"
#include "run/train_series.h"

#include <stdlib.h>
#include <unistd.h>

/* The small plan of test_train.c (small tables, fast steps). */
static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_2\"] = (df[\"int_2\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = (df[\"int_4\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_8\"] = functional.sigrid_hash(df[\"cat_8\"].fill_null(0), 0, 3)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

static rap_status load_plan(rap_plan **out)
{
    return rap_test_plan_text(k_plan, "pv.plan", out);
}

static rap_status gen(const char *name, int64_t rows, uint64_t seed, char *path, size_t n)
{
    rap_test_path(path, n, name);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = seed;
    g.out = path;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    return rap_gen_write(&g, &r);
}

/* src with its labels replaced: 'r' random (1/2), 'l' rare (the original
 * positives with probability 1/10): a copy at dst. */
static bool relabel(const char *src, const char *dst, char how, uint64_t seed)
{
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (!in || !out) {
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return false;
    }
    static char line[1 << 16];
    uint64_t s = seed;
    while (fgets(line, sizeof line, in)) {
        double u = rap_test_rnd01(&s);
        char y = how == 'r' ? (u < 0.5 ? '1' : '0') : (line[0] == '1' && u < 0.1 ? '1' : '0');
        line[0] = y;
        fputs(line, out);
    }
    fclose(in);
    return fclose(out) == 0;
}

static void config(rap_train_config *c, const rap_plan *plan, const char *data)
{
    rap_train_defaults(c);
    c->plan = plan;
    c->plan_name = "pv";
    c->data = data;
    c->model.emb_dim = 4;
    c->model.n_bot = 2;
    c->model.bot[0] = 8;
    c->model.bot[1] = 4;
    c->model.n_top = 2;
    c->model.top[0] = 8;
    c->model.top[1] = 1;
    c->model.batch = 128;
    c->model.optimizer = RAP_ADAGRAD;
    c->model.lr = 0.05f;
    c->model.threads = 2;
    c->reader.threads = 2;
    c->eval_fraction = 0;
    c->progressive = true;
}

/* The number after "key": in line, or NaN (null, absent). */
static double num_of(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p || !strncmp(p + strlen(k), "null", 4))
        return NAN;
    return strtod(p + strlen(k), NULL);
}

/* Lines of the metrics file at path whose text contains what, counted. */
static int count_lines(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* ------------------------------------------------------------ the window */

/* Exact metrics of pairs [0, n). */
static void exact(const float *s, const float *y, int64_t n, double *auc, double *ll, double *pm)
{
    double l = 0, p = 0;
    for (int64_t i = 0; i < n; i++) {
        l += rap_bce_logit(s[i], y[i]);
        p += 1 / (1 + exp(-(double)s[i]));
    }
    *auc = rap_auc(s, y, n);
    *ll = l / (double)n;
    *pm = p / (double)n;
}

RAP_TEST(progressive_window_matches_exact)
{
    enum { W = 1000, STEP = 300, N = 4000 };
    float *s = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    REQUIRE(s && y);
    uint64_t r = 5;
    for (int i = 0; i < N; i++) { /* labels correlated with the logits, spread logits */
        y[i] = rap_test_rnd01(&r) < 0.3 ? 1.0f : 0.0f;
        s[i] = (float)(4 * (rap_test_rnd01(&r) - 0.5) + (y[i] ? 0.8 : 0) - 1);
    }
    rap_progressive *pv = NULL;
    REQUIRE_OK(rap_progressive_create(W, RAP_CPU, NULL, &pv));
    int checked = 0;
    for (int at = 0; at < N; at += STEP) {
        int rows = at + STEP <= N ? STEP : N - at;
        REQUIRE_OK(rap_progressive_add(pv, s + at, y + at, rows));
        rap_progressive_stats ps;
        REQUIRE_OK(rap_progressive_read(pv, &ps));
        int64_t end = at + rows, n = end < W ? end : W;
        double auc, ll, pm;
        exact(s + end - n, y + end - n, n, &auc, &ll, &pm);
        CHECK(ps.rows == n && ps.seen == end);
        CHECK_MSG(fabs(ps.auc - auc) <= ps.auc_err + 1e-12, "rows %d: AUC %.9f, exact %.9f, "
                  "bound %.3g", (int)end, ps.auc, auc, ps.auc_err);
        CHECK_MSG(ps.auc_err < 1e-3, "bound %g", ps.auc_err);
        CHECK_MSG(fabs(ps.logloss - ll) < 1e-7, "logloss %.9f, exact %.9f", ps.logloss, ll);
        CHECK_MSG(fabs(ps.pred_mean - pm) < 1e-8, "mean %.9f, exact %.9f", ps.pred_mean, pm);
        int64_t pos = 0;
        for (int64_t i = end - n; i < end; i++)
            pos += y[i] != 0;
        CHECK(ps.positives == pos);
        CHECK(fabs(ps.calibration - pm / ((double)pos / (double)n)) < 1e-6);
        checked++;
    }
    CHECK(checked == 14);
    /* a row too many for the window; non-finite logits leave no trace in
     * the bins and sums once they have left the window */
    CHECK(rap_progressive_add(pv, s, y, W + 1) == RAP_ERR_ARG);
    float bad[3] = {NAN, INFINITY, -INFINITY}, yb[3] = {1, 0, 1};
    REQUIRE_OK(rap_progressive_add(pv, bad, yb, 3));
    rap_progressive_stats ps;
    REQUIRE_OK(rap_progressive_read(pv, &ps));
    CHECK(ps.nonfinite == 3 && ps.rows == W);
    REQUIRE_OK(rap_progressive_add(pv, s, y, W)); /* pushes them out */
    REQUIRE_OK(rap_progressive_read(pv, &ps));
    double auc, ll, pm;
    exact(s, y, W, &auc, &ll, &pm);
    CHECK(ps.nonfinite == 0 && fabs(ps.logloss - ll) < 1e-7 && fabs(ps.auc - auc) <= ps.auc_err);
    rap_progressive_free(pv);
    CHECK(rap_progressive_create(0, RAP_CPU, NULL, &pv) == RAP_ERR_ARG);
    free(s);
    free(y);
}

RAP_TEST(progressive_gpu_kernel_matches_ref)
{
    REQUIRE_GPU();
    enum { W = 5000, STEP = 1777, N = 20000 };
    float *s = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    REQUIRE(s && y);
    uint64_t r = 9;
    for (int i = 0; i < N; i++) {
        y[i] = rap_test_rnd01(&r) < 0.4 ? 1.0f : 0.0f;
        double u = rap_test_rnd01(&r);
        s[i] = i % 997 == 0 ? NAN : i % 1009 == 0 ? 1e30f : (float)(40 * (u - 0.5));
    }
    void *stream = NULL;
    REQUIRE_OK(rap_runtime_train_stream_create(&stream));
    rap_progressive *pg = NULL, *pc = NULL;
    REQUIRE_OK(rap_progressive_create(W, RAP_GPU, stream, &pg));
    REQUIRE_OK(rap_progressive_create(W, RAP_CPU, NULL, &pc));
    float *ds = NULL, *dy = NULL;
    REQUIRE_OK(rap_cuda_malloc((void **)&ds, sizeof(float) * N, "test"));
    REQUIRE_OK(rap_cuda_malloc((void **)&dy, sizeof(float) * N, "test"));
    REQUIRE_OK(rap_rt_h2d(ds, s, sizeof(float) * N, stream));
    REQUIRE_OK(rap_rt_h2d(dy, y, sizeof(float) * N, stream));
    uint32_t *hg = malloc(sizeof(uint32_t) * 2 * RAP_PV_BINS);
    uint32_t *hc = malloc(sizeof(uint32_t) * 2 * RAP_PV_BINS);
    REQUIRE(hg && hc);
    for (int at = 0; at < N; at += STEP) {
        int rows = at + STEP <= N ? STEP : N - at;
        REQUIRE_OK(rap_progressive_add(pg, ds + at, dy + at, rows));
        REQUIRE_OK(rap_progressive_add(pc, s + at, y + at, rows));
        rap_pv_sums sg, sc;
        REQUIRE_OK(rap_progressive_read_raw(pg, hg, &sg));
        REQUIRE_OK(rap_progressive_read_raw(pc, hc, &sc));
        int diff = 0;
        for (int b = 0; b < 2 * RAP_PV_BINS; b++)
            diff += hg[b] != hc[b];
        CHECK_MSG(diff == 0, "after %d rows: %d bins differ", at + rows, diff);
        CHECK(sg.rows == sc.rows && sg.pos == sc.pos && sg.nonfinite == sc.nonfinite);
        /* the device's exp/log1p may differ in the last bit: a unit a row */
        CHECK_MSG(llabs(sg.loss_fx - sc.loss_fx) <= sg.rows &&
                      llabs(sg.pred_fx - sc.pred_fx) <= sg.rows,
                  "sums: loss %lld / %lld, pred %lld / %lld", (long long)sg.loss_fx,
                  (long long)sc.loss_fx, (long long)sg.pred_fx, (long long)sc.pred_fx);
    }
    free(hg);
    free(hc);
    rap_cuda_free(ds);
    rap_cuda_free(dy);
    rap_progressive_free(pg);
    rap_progressive_free(pc);
    rap_rt_stream_free(stream);
    free(s);
    free(y);
}

/* ------------------------------------------------------------ the trainer */

/* The offline evaluation: the same rows in the same batches, each predicted
 * by a model with the weights before its step (rap_model_predict), then
 * trained on; the pairs of every step into s, y (steps * B). */
static void offline_pairs(rap_test_ctx *t, const rap_train_config *c, int64_t steps, float *s,
                          float *y)
{
    rap_model_config mc = c->model;
    REQUIRE_OK(rap_input_shape(c->plan, &mc.n_dense, &mc.n_tables, mc.table_rows));
    mc.max_bag = 1;
    mc.stream = NULL;
    void *stream = NULL;
    if (c->device == RAP_GPU) {
        REQUIRE_OK(rap_runtime_train_stream_create(&stream));
        mc.stream = stream;
    }
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&mc, c->device, &m));
    rap_fusion fus;
    REQUIRE_OK(rap_fuse(c->plan, (rap_fuse_kind)c->fusion, &fus));
    rap_prep_config pc = {c->device, mc.batch, 2, stream};
    rap_prep *prep = NULL;
    REQUIRE_OK(rap_prep_create(c->plan, &fus, &pc, &prep));
    rap_input *in = NULL;
    REQUIRE_OK(rap_input_create(c->plan, c->device, mc.batch, stream, &in));
    REQUIRE_OK(rap_input_bind(in, prep, NULL));
    rap_reader_config rc = c->reader;
    rc.input = c->data;
    rap_reader *rd = NULL;
    REQUIRE_OK(rap_reader_open(&rc, &rd));
    rap_batch eb, tb;
    REQUIRE_OK(rap_batch_create(&eb, c->plan->schema, 32768, false));
    REQUIRE_OK(rap_batch_create(&tb, c->plan->schema, mc.batch, c->device == RAP_GPU));
    int64_t step = 0;
    while (step < steps) {
        REQUIRE_OK(rap_reader_next(rd, &eb));
        REQUIRE(eb.rows > 0);
        for (int64_t r = 0; r < eb.rows && step < steps; r++) {
            rap_batch_append(&tb, &eb, r, 1);
            if (tb.rows < tb.cap)
                continue;
            rap_model_batch mb;
            REQUIRE_OK(rap_prep_load(prep, &tb));
            REQUIRE_OK(rap_prep_run(prep));
            REQUIRE_OK(rap_input_make(in, prep, &mb));
            REQUIRE_OK(rap_model_predict(m, &mb, s + step * mc.batch));
            memcpy(y + step * mc.batch, tb.label, sizeof(float) * (size_t)mc.batch);
            REQUIRE_OK(rap_model_train_step(m, &mb));
            tb.rows = 0;
            step++;
        }
    }
    rap_batch_free(&eb);
    rap_batch_free(&tb);
    rap_reader_close(rd);
    rap_input_free(in);
    rap_prep_free(prep);
    rap_fusion_free(&fus);
    rap_model_free(m);
    rap_rt_stream_free(stream);
}

static void matches_offline(rap_test_ctx *t, rap_device dev)
{
    enum { STEPS = 40, W = 1536 };
    char data[512], mf[512];
    REQUIRE_OK(gen("pv_offline.tsv", 6000, 21, data, sizeof data));
    rap_test_path(mf, sizeof mf, dev == RAP_GPU ? "pv_offline_gpu.jsonl" : "pv_offline.jsonl");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_test_env env; /* the same GEMM algorithms in both models (GPU) */
    rap_test_tune_off(&env);
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.device = dev;
    c.model.strict_fp32 = true;
    c.steps = STEPS;
    c.log_every = 1;
    c.metrics = mf;
    c.progressive_window = W;
    REQUIRE_OK(rap_train_run(&c, &r));
    REQUIRE(r.steps_run == STEPS);
    const int64_t B = c.model.batch;
    float *s = malloc(sizeof(float) * STEPS * (size_t)B), *y = malloc(sizeof(float) * STEPS * (size_t)B);
    REQUIRE(s && y);
    offline_pairs(t, &c, STEPS, s, y);
    FILE *f = fopen(mf, "r");
    REQUIRE(f);
    char line[4096];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "{\"event\":\"step\""))
            continue;
        int64_t step = (int64_t)num_of(line, "step"), end = step * B, n = end < W ? end : W;
        double auc, ll, pm, pauc = num_of(line, "pv_auc"), err = num_of(line, "pv_auc_err");
        exact(s + end - n, y + end - n, n, &auc, &ll, &pm);
        int64_t pos = 0;
        for (int64_t i = end - n; i < end; i++)
            pos += y[i] != 0;
        CHECK_MSG((int64_t)num_of(line, "pv_rows") == n, "step %lld: rows %s", (long long)step,
                  line);
        CHECK_MSG(fabs(pauc - auc) <= err + 1e-9 && err < 2e-3,
                  "step %lld: progressive AUC %.9f (bound %.3g), offline %.9f", (long long)step,
                  pauc, err, auc);
        CHECK_MSG(fabs(num_of(line, "pv_logloss") - ll) < 1e-6,
                  "step %lld: progressive logloss %.9f, offline %.9f", (long long)step,
                  num_of(line, "pv_logloss"), ll);
        CHECK_MSG(fabs(num_of(line, "pv_pred_mean") - pm) < 1e-6,
                  "step %lld: mean prediction %.9f, offline %.9f", (long long)step,
                  num_of(line, "pv_pred_mean"), pm);
        CHECK(fabs(num_of(line, "pv_label_mean") - (double)pos / (double)n) < 1e-8);
        lines++;
    }
    fclose(f);
    CHECK_MSG(lines == STEPS, "%d step lines", lines);
    free(s);
    free(y);
    rap_test_tune_restore(&env);
    rap_plan_free(plan);
}

RAP_TEST(progressive_matches_offline_cpu) { matches_offline(t, RAP_CPU); }

RAP_TEST(progressive_matches_offline_gpu)
{
    REQUIRE_GPU();
    matches_offline(t, RAP_GPU);
}

/* ------------------------------------------------------------ guards */

RAP_TEST(guards_rules)
{
    rap_guard_config gc;
    rap_guard_defaults(&gc);
    gc.auc_rows = 1000;
    rap_guards g;
    rap_guards_init(&g, &gc);
    rap_guard_event ev[6];
    int n = 0;
    rap_progressive_stats ps = {.rows = 500, .seen = 500, .positives = 250, .auc = 0.5,
                                .pred_mean = 0.5, .label_mean = 0.5, .calibration = 1};
    rap_guards_window(&g, 1, 1000, &ps, ev, &n); /* window not full: no check */
    CHECK(n == 0);
    ps.rows = 1000, ps.seen = 1000;
    rap_guards_window(&g, 2, 1000, &ps, ev, &n); /* in band over 1000 rows (its window) */
    CHECK(n == 1 && ev[0].kind == RAP_GUARD_AUC && ev[0].tripped);
    rap_guards_window(&g, 3, 1000, &ps, ev, &n); /* stays tripped: no second event */
    CHECK(n == 0 && !rap_guards_stop(&g));
    ps.auc = 0.6;
    rap_guards_window(&g, 4, 1000, &ps, ev, &n);
    CHECK(n == 1 && !ev[0].tripped);
    ps.auc = 0.505, ps.positives = 5; /* labels not mixed (0.5%): quiet */
    ps.label_mean = 0.005, ps.pred_mean = 0.005, ps.calibration = 1;
    rap_guards_window(&g, 5, 1000, &ps, ev, &n);
    CHECK(n == 0);
    ps.positives = 250, ps.label_mean = 0.25, ps.pred_mean = 0.6, ps.calibration = 2.4;
    ps.auc = 0.7;
    rap_guards_window(&g, 6, 1000, &ps, ev, &n);
    CHECK(n == 1 && ev[0].kind == RAP_GUARD_CALIBRATION && ev[0].tripped);
    CHECK(strstr(ev[0].why, "ratio 2.4"));
    gc.action = RAP_GUARD_FAIL;
    gc.calib_factor = 0.5;
    CHECK(rap_guard_config_check(&gc) == RAP_ERR_ARG);
    gc.calib_factor = 3;
    rap_guards_init(&g, &gc);
    rap_guards_window(&g, 6, 1000, &ps, ev, &n);
    CHECK(n == 0 && !rap_guards_stop(&g));
    CHECK(rap_guards_loss(&g, 7, NAN, &ev[0]) && rap_guards_stop(&g));
    CHECK(!rap_guards_loss(&g, 8, 0.5, &ev[0]));
}

/* A run on normal generated data: no guard line. */
RAP_TEST(guards_quiet_on_normal_data)
{
    char data[512], mf[512];
    REQUIRE_OK(gen("pv_normal.tsv", 30000, 31, data, sizeof data));
    rap_test_path(mf, sizeof mf, "pv_normal.jsonl");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.model.batch = 256;
    c.progressive_window = 4096;
    c.guards.auc_rows = 4096;
    c.guards.action = RAP_GUARD_FAIL;
    c.log_every = 8;
    c.metrics = mf;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(count_lines(mf, "\"event\":\"guard\"") == 0);
    CHECK(count_lines(mf, "\"pv_auc\":0.") >= 10);
    rap_plan_free(plan);
}

/* Random labels: the model cannot learn, the progressive AUC stays near
 * 0.5; warn goes on, fail stops and keeps the last checkpoint written. */
RAP_TEST(guard_auc_trips_on_random_labels)
{
    char src[512], data[512], mf[512], ck[512];
    REQUIRE_OK(gen("pv_rl_src.tsv", 70000, 41, src, sizeof src));
    rap_test_path(data, sizeof data, "pv_random_labels.tsv");
    REQUIRE(relabel(src, data, 'r', 3));
    rap_test_path(mf, sizeof mf, "pv_rl.jsonl");
    rap_test_path(ck, sizeof ck, "pv_rl.safetensors");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.model.batch = 512;
    c.progressive_window = 32768;
    c.guards.auc_rows = 16384;
    c.log_every = 16;
    c.metrics = mf;
    REQUIRE_OK(rap_train_run(&c, &r)); /* warn: training goes on */
    CHECK(r.samples == 70000);
    CHECK_MSG(count_lines(mf, "\"guard\":\"auc\",\"state\":\"tripped\"") == 1, "%d",
              count_lines(mf, "\"guard\":\"auc\",\"state\":\"tripped\""));
    remove(ck);
    c.guards.action = RAP_GUARD_FAIL;
    c.save = ck;
    c.save_every = 16;
    rap_status st = rap_train_run(&c, &r);
    CHECK(st == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "guard auc") &&
                  strstr(rap_last_error(), "the last good checkpoint is"),
              "%s", rap_last_error());
    CHECK(r.step < 70000 / 512);
    char err[2048];
    snprintf(err, sizeof err, "%s", rap_last_error());
    rap_ckpt *k = NULL;
    char last[4096]; /* the newest of the --save-every series, named by the error */
    bool found = false;
    REQUIRE_OK(rap_series_latest(ck, last, sizeof last, &found));
    REQUIRE(found);
    CHECK_MSG(strstr(err, last), "%s does not name %s", err, last);
    REQUIRE_OK(rap_ckpt_open(last, &k)); /* the one before the trip, not the state at the stop */
    const char *s = rap_meta_get(&k->meta, "step");
    CHECK_MSG(s && atoll(s) > 0 && atoll(s) < r.step, "checkpoint step %s, stopped at %lld", s,
              (long long)r.step);
    rap_ckpt_close(k);
    rap_plan_free(plan);
}

/* Rare positives and a model that barely moves: predictions near the
 * initial ~0.5 against a base rate near 0.026. */
RAP_TEST(guard_calibration_trips)
{
    char src[512], data[512], mf[512];
    REQUIRE_OK(gen("pv_cal_src.tsv", 12000, 51, src, sizeof src));
    rap_test_path(data, sizeof data, "pv_rare.tsv");
    REQUIRE(relabel(src, data, 'l', 4));
    rap_test_path(mf, sizeof mf, "pv_cal.jsonl");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.model.optimizer = RAP_SGD;
    c.model.lr = 1e-6f;
    c.progressive_window = 2048;
    c.log_every = 8;
    c.metrics = mf;
    c.guards.auc_rows = 0; /* only the calibration guard */
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(count_lines(mf, "\"guard\":\"calibration\",\"state\":\"tripped\"") == 1);
    /* off: quiet */
    c.guards.calib_factor = 0;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(count_lines(mf, "\"event\":\"guard\"") == 0);
    rap_plan_free(plan);
}

/* A learning rate that blows up: the nan guard's line; with --guard fail
 * the checkpoint written before it is named and left as it was. */
RAP_TEST(guard_nan_trips)
{
    char data[512], mf[512], ck[512];
    REQUIRE_OK(gen("pv_nan.tsv", 6000, 7, data, sizeof data));
    rap_test_path(mf, sizeof mf, "pv_nan.jsonl");
    rap_test_path(ck, sizeof ck, "pv_nan.safetensors");
    remove(ck);
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.model.batch = 64;
    c.model.optimizer = RAP_SGD;
    c.model.lr = 30.0f; /* finite for a few steps, then NaN */
    c.metrics = mf;
    c.log_every = 1;
    c.save = ck;
    c.save_every = 1;
    c.guards.action = RAP_GUARD_FAIL;
    rap_status st = rap_train_run(&c, &r);
    REQUIRE(st == RAP_ERR_DATA && r.nan_step > 0);
    CHECK(count_lines(mf, "\"guard\":\"nan\",\"state\":\"tripped\"") == 1);
    if (r.nan_step > 1) {
        CHECK_MSG(strstr(rap_last_error(), "the last good checkpoint is"), "%s",
                  rap_last_error());
        char err[2048];
        snprintf(err, sizeof err, "%s", rap_last_error());
        rap_ckpt *k = NULL;
        char last[4096]; /* the newest of the --save-every series, named by the error */
        bool found = false;
        REQUIRE_OK(rap_series_latest(ck, last, sizeof last, &found));
        REQUIRE(found);
        CHECK_MSG(strstr(err, last), "%s does not name %s", err, last);
        REQUIRE_OK(rap_ckpt_open(last, &k));
        const char *s = rap_meta_get(&k->meta, "step");
        CHECK_MSG(s && atoll(s) < r.nan_step, "checkpoint step %s, NaN at %lld", s,
                  (long long)r.nan_step);
        rap_ckpt_close(k);
    }
    /* the guard off: the run trains on through the NaN losses */
    c.guards.nan = false;
    c.save = NULL;
    c.save_every = 0;
    c.steps = 60;
    st = rap_train_run(&c, &r);
    CHECK_MSG(st == RAP_OK && r.steps_run == 60, "%s", rap_last_error());
    CHECK(count_lines(mf, "\"event\":\"guard\"") == 0);
    rap_plan_free(plan);
}

/* The binary: the option table's flags and the progress line. */
RAP_TEST(progressive_cli)
{
    char out[16384];
    int rc = rap_test_run_rap("train --gen-rows 6000 --gen-eval-rows 500 --batch 256 "
                              "--progressive --progressive-window 1024 --log-every 5 "
                              "--threads 2",
                              out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "pv AUC ") && strstr(out, "progressive validation:"),
              "rc %d: %s", rc, out);
    rc = rap_test_run_rap("train --gen-rows 2000 --batch 256 --progressive "
                          "--progressive-window 100 --threads 2", out, sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "--progressive-window 100"), "rc %d: %s", rc, out);
    rc = rap_test_run_rap("train --gen-rows 2000 --guard-calibration 0.5 --threads 2", out,
                          sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "--guard-calibration"), "rc %d: %s", rc, out);
}

/* ------------------------------------------------------------ re-planning */

#include "plan/replan_search.h"
#include "sched/fusion_file.h"

/* The rules' fixture: a config (every 10 steps, threshold 0.25, tolerance
 * 0.05, standalone phases 2, 1, 2, 3 ms, capacities C = 1, 0.5, 0.5, 1 ms)
 * and a schedule of the small plan with kernel 0 (0.5 ms) in emb_forward
 * and every other kernel (0.1 ms each) exposed. */
typedef struct {
    rap_replan_config c;
    double C[RAP_REPLAN_WINDOWS];
    rap_plan *plan;
    rap_fusion f;
    rap_schedule *s;
} rules_fixture;

static rap_status rules_make(rules_fixture *x)
{
    memset(x, 0, sizeof *x);
    x->c.every = 10;
    x->c.threshold = 0.25;
    x->c.tolerance = 0.05;
    const double T[RAP_REPLAN_WINDOWS] = {2, 1, 2, 3, 0};
    const double C[RAP_REPLAN_WINDOWS] = {1, 0.5, 0.5, 1, 0};
    memcpy(x->c.standalone_ms, T, sizeof T);
    memcpy(x->c.capacity_ms, C, sizeof C);
    memcpy(x->C, C, sizeof C);
    RAP_TRY(load_plan(&x->plan));
    RAP_TRY(rap_fuse(x->plan, RAP_FUSE_LEVELS, &x->f));
    if (x->f.n < 2)
        return rap_fail(RAP_ERR_INTERNAL, "test plan fused into %d kernels, expected >= 2", x->f.n);
    RAP_TRY(rap_schedule_create(x->plan, &x->f, "test", &x->s));
    RAP_TRY(rap_schedule_add(x->s, RAP_WIN_EMB_FORWARD, 0, 0, x->f.kernels[0].n, 0, RAP_ROWS_END,
                             0.5));
    for (int k = 1; k < x->f.n; k++)
        RAP_TRY(rap_schedule_add(x->s, RAP_WIN_EXPOSED, k, 0, x->f.kernels[k].n, 0,
                                 RAP_ROWS_END, 0.1));
    return RAP_OK;
}

static void rules_free(rules_fixture *x)
{
    rap_schedule_free(x->s);
    rap_fusion_free(&x->f);
    rap_plan_free(x->plan);
}

RAP_TEST(replan_rules)
{
    rules_fixture x;
    REQUIRE_OK(rules_make(&x));
    rap_replan_config c = x.c;
    const double *C = x.C;
    const rap_schedule *s = x.s;
    rap_replan_measure m;
    memset(&m, 0, sizeof m);
    rap_replan_predict(&c, C, s, &m);
    CHECK(fabs(m.load_ms[RAP_WIN_EMB_FORWARD] - 0.5) < 1e-12);
    CHECK(fabs(m.pred_phase_ms[0] - 2 * (1 + 0.05 * 0.5 / 1)) < 1e-12); /* 2.05 */
    CHECK(fabs(m.pred_phase_ms[1] - 1) < 1e-12);
    CHECK(fabs(m.pred_exposed_ms - 0.1 * (x.f.n - 1)) < 1e-9);
    char why[512];
    m.steps = 10;
    for (int w = 0; w < 4; w++)
        m.phase_ms[w] = m.pred_phase_ms[w] * 1.1; /* within 25 % */
    m.exposed_ms = m.pred_exposed_ms;
    CHECK(!rap_replan_drift(&c, &m, why, sizeof why));
    m.phase_ms[0] = 2.6; /* slowed by 30 % where 2.5 % was predicted */
    CHECK(rap_replan_drift(&c, &m, why, sizeof why) && strstr(why, "emb_forward"));
    double C2[RAP_REPLAN_WINDOWS];
    rap_replan_capacities(&c, &m, C, C2);
    /* slowdown 0.3 for 0.5 ms of work: 0.05 * 0.5 / 0.3 ms hides at the tolerance */
    CHECK(fabs(C2[0] - 0.05 * 0.5 / 0.3) < 1e-9);
    CHECK(C2[1] == C[1] && C2[2] == C[2] && C2[3] == C[3]); /* no load: kept */
    m.phase_ms[0] = 2.0;       /* no slowdown at all */
    m.exposed_ms = 5;          /* but the exposed time is far off */
    CHECK(rap_replan_drift(&c, &m, why, sizeof why) && strstr(why, "exposed"));
    rap_replan_capacities(&c, &m, C, C2);
    CHECK(C2[0] == 1); /* max(C, min(2C, 2L)) = max(1, 1) */
    m.steps = 0;
    CHECK(!rap_replan_drift(&c, &m, why, sizeof why));
    rules_free(&x);
}

/* A planner that always hands back a schedule of another fusion: refused
 * by the runtime, training goes on. */
static rap_status foreign_plan(void *ctx, const rap_plan *p, const rap_fusion *f, int64_t batch,
                               const double *cap, const double *lists, int n_lists,
                               rap_schedule **out)
{
    (void)f, (void)batch, (void)cap, (void)lists, (void)n_lists;
    rap_fusion *other = ctx;
    return rap_schedule_all_in(p, other, RAP_WIN_EXPOSED, out);
}

/* A run whose schedule is re-planned and swapped at a step boundary ends
 * with the weights of a run that used the new schedule from the start
 * (and of one with the old one: preprocessing results do not depend on the
 * schedule), and no step is lost or repeated. The capacity claims phases of
 * a microsecond and the schedule's slices a predicted latency (a phase
 * whose window has no load takes its measured time as its reference), so
 * that the first check drifts. */
static void replan_same_weights(rap_test_ctx *t, rap_device dev)
{
    char data[512], cka[512], ckb[512], prefix[512], first[700], fus[760];
    REQUIRE_OK(gen("rp_data.tsv", 9000, 61, data, sizeof data));
    rap_test_path(cka, sizeof cka, dev == RAP_GPU ? "rp_a_gpu.safetensors" : "rp_a.safetensors");
    rap_test_path(ckb, sizeof ckb, dev == RAP_GPU ? "rp_b_gpu.safetensors" : "rp_b.safetensors");
    rap_test_path(prefix, sizeof prefix, dev == RAP_GPU ? "rp_gpu_sched" : "rp_sched");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_test_env env;
    rap_test_tune_off(&env);
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.progressive = false;
    c.device = dev;
    c.model.strict_fp32 = true;
    c.mode = dev == RAP_GPU ? RAP_MODE_RAP : -1;
    c.fusion = RAP_FUSE_LEVELS;
    c.steps = 40;
    c.save = cka;
    rap_fusion lf;
    rap_schedule *ls = NULL;
    REQUIRE_OK(rap_fuse(plan, RAP_FUSE_LEVELS, &lf));
    REQUIRE_OK(rap_schedule_builtin_embedding(plan, &lf, &ls));
    for (int i = 0; i < ls->n_slices; i++)
        ls->slices[i].predicted_ms = 1e-4;
    c.schedule = ls;
    rap_replan_search_ctx rs;
    memset(&rs, 0, sizeof rs);
    rap_model_shape sh = {0};
    rap_capacity_assumed(&sh, "", &rs.base);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        rs.base.standalone_ms[w] = 1e-3;
    rap_replan_config rc;
    memset(&rc, 0, sizeof rc);
    rc.every = 10;
    rc.threshold = 0.25;
    rc.tolerance = rs.base.tolerance;
    for (int w = 0; w < RAP_REPLAN_WINDOWS; w++) {
        rc.standalone_ms[w] = rs.base.standalone_ms[w];
        rc.capacity_ms[w] = rs.base.capacity_ms[w];
    }
    rc.plan_fn = rap_replan_search;
    rc.plan_ctx = &rs;
    rc.out = prefix;
    c.replan = &rc;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK_MSG(r.replan_swaps >= 1 && r.replan_checks >= 3, "checks %lld, plans %lld, swaps %lld",
              (long long)r.replan_checks, (long long)r.replan_plans, (long long)r.replan_swaps);
    CHECK(r.steps_run == 40 && r.samples == 40 * c.model.batch);
    /* the first swap: after step 11 or later (the check at 10, the plan
     * picked up after the first step that finds it done) */
    int at = 11;
    for (; at <= 40; at++) {
        snprintf(first, sizeof first, "%s.step%d", prefix, at);
        if (access(first, R_OK) == 0)
            break;
    }
    REQUIRE(at <= 40);
    snprintf(fus, sizeof fus, "%s.fusion", first);
    REQUIRE(access(fus, R_OK) == 0);
    rap_train_config b = c; /* the schedule file and its .fusion beside it */
    b.replan = NULL;
    b.schedule = NULL;
    b.schedule_path = first;
    b.save = ckb;
    REQUIRE_OK(rap_train_run(&b, &r));
    CHECK(r.steps_run == 40);
    int n = 0;
    CHECK_MSG(rap_test_same_checkpoints(cka, ckb, &n), "weights differ from a run with %s from "
              "the start (%d tensors)", first, n);
    /* a schedule the runtime refuses: a warning, training goes on unswapped */
    rap_fusion other;
    REQUIRE_OK(rap_fuse(plan, RAP_FUSE_NONE, &other));
    rc.plan_fn = foreign_plan;
    rc.plan_ctx = &other;
    rc.out = NULL;
    c.save = NULL;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.replan_plans >= 1 && r.replan_swaps == 0 && r.steps_run == 40);
    rap_fusion_free(&other);
    rap_schedule_free(ls);
    rap_fusion_free(&lf);
    rap_test_tune_restore(&env);
    rap_plan_free(plan);
}

RAP_TEST(replan_swap_same_weights_cpu) { replan_same_weights(t, RAP_CPU); }

RAP_TEST(replan_swap_same_weights_gpu)
{
    REQUIRE_GPU();
    replan_same_weights(t, RAP_GPU);
}

/* src's rows into dst, the categorical fields of rows from `from` on
 * emptied (empty lists). */
static bool blank_cats(const char *src, const char *dst, int64_t from)
{
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (!in || !out) {
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return false;
    }
    static char line[1 << 16];
    int64_t n = 0;
    while (fgets(line, sizeof line, in)) {
        if (n++ < from) {
            fputs(line, out);
            continue;
        }
        int field = 0;
        for (char *p = line; *p; p++) {
            if (*p == '\t')
                field++;
            if (field <= 13 || *p == '\t' || *p == '\n')
                fputc(*p, out);
        }
    }
    fclose(in);
    return fclose(out) == 0;
}

RAP_TEST(replan_rules_lists)
{
    rap_replan_config c;
    memset(&c, 0, sizeof c);
    c.list_threshold = 0.2;
    double base[3] = {1, 1, 0}, now[3] = {1, 0.85, 0.005};
    char why[512];
    CHECK(!rap_replan_lists_drift(&c, base, now, 3, 5, why, sizeof why)); /* within 20 % */
    now[1] = 0.7;
    CHECK(rap_replan_lists_drift(&c, base, now, 3, 5, why, sizeof why) && strstr(why, "cat_1"));
    now[1] = 1, now[2] = 0.02; /* a column near empty: the floor 0.05 */
    CHECK(rap_replan_lists_drift(&c, base, now, 3, 5, why, sizeof why) && strstr(why, "cat_2"));
    c.list_threshold = 0;
    CHECK(!rap_replan_lists_drift(&c, base, now, 3, 5, why, sizeof why));
}

/* A phase whose window holds no work measures the phase alone: it becomes
 * the reference (no re-plan at every check for a phase nothing can be
 * moved out of); a window with load keeps its reference and drifts. */
RAP_TEST(replan_reference_of_phases_without_load)
{
    rules_fixture x;
    REQUIRE_OK(rules_make(&x));
    rap_replan_config c = x.c;
    const double *C = x.C;
    const rap_schedule *s = x.s;
    rap_replan_measure m;
    memset(&m, 0, sizeof m);
    rap_replan_predict(&c, C, s, &m);
    m.steps = 10;
    for (int w = 0; w < 4; w++)
        m.phase_ms[w] = m.pred_phase_ms[w];
    m.exposed_ms = m.pred_exposed_ms;
    m.phase_ms[3] = 4.5; /* emb_backward 50 % slower, nothing in its window */
    char why[512];
    CHECK(rap_replan_drift(&c, &m, why, sizeof why) && strstr(why, "emb_backward"));
    CHECK(rap_replan_reference(&c, C, s, &m) == 1);
    CHECK(c.standalone_ms[3] == 4.5 && c.standalone_ms[0] == 2 && c.standalone_ms[1] == 1);
    CHECK(!rap_replan_drift(&c, &m, why, sizeof why));
    CHECK(rap_replan_reference(&c, C, s, &m) == 0); /* measured again: nothing changes */
    m.phase_ms[0] = 2.6; /* the window with load: its reference stays, it drifts */
    CHECK(rap_replan_reference(&c, C, s, &m) == 0 && c.standalone_ms[0] == 2);
    CHECK(rap_replan_drift(&c, &m, why, sizeof why) && strstr(why, "emb_forward"));
    rules_free(&x);
}

/* rap_schedule_same_slices: the same slices with other predictions are the
 * same; another row split, window or kernel is not. */
RAP_TEST(replan_same_slices_kept)
{
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_fusion f;
    REQUIRE_OK(rap_fuse(plan, RAP_FUSE_LEVELS, &f));
    REQUIRE(f.n >= 2);
    rap_schedule *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    REQUIRE_OK(rap_schedule_create(plan, &f, "a", &a));
    REQUIRE_OK(rap_schedule_create(plan, &f, "b", &b));
    REQUIRE_OK(rap_schedule_create(plan, &f, "c", &c));
    REQUIRE_OK(rap_schedule_create(plan, &f, "d", &d));
    for (int k = 0; k < f.n; k++) {
        int n = f.kernels[k].n;
        REQUIRE_OK(rap_schedule_add(a, RAP_WIN_MLP_FORWARD, k, 0, n, 0, RAP_ROWS_END, 0.1));
        REQUIRE_OK(rap_schedule_add(b, RAP_WIN_MLP_FORWARD, k, 0, n, 0, RAP_ROWS_END, 0.3));
        REQUIRE_OK(rap_schedule_add(c, k == f.n - 1 ? RAP_WIN_EXPOSED : RAP_WIN_MLP_FORWARD, k,
                                    0, n, 0, RAP_ROWS_END, 0.1));
        REQUIRE_OK(rap_schedule_add(d, RAP_WIN_MLP_FORWARD, k, 0, n, 0, k == 0 ? 64 :
                                    RAP_ROWS_END, 0.1));
    }
    CHECK(rap_schedule_same_slices(a, b) && rap_schedule_same_slices(b, a));
    CHECK(!rap_schedule_same_slices(a, c) && !rap_schedule_same_slices(a, d));
    CHECK(!rap_schedule_same_slices(a, NULL) && rap_schedule_same_slices(NULL, NULL));
    rap_schedule_free(a);
    rap_schedule_free(b);
    rap_schedule_free(c);
    rap_schedule_free(d);
    rap_fusion_free(&f);
    rap_plan_free(plan);
}

/* The re-planner's search on measured list lengths: the kernels reading
 * near-empty lists are predicted cheaper than on the plan's bounds, and
 * the schedule is still the plan's (it validates against the plan as
 * loaded, whose nodes the search did not write). */
RAP_TEST(replan_search_on_measured_lists)
{
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_fusion f;
    REQUIRE_OK(rap_fuse(plan, RAP_FUSE_LEVELS, &f));
    rap_replan_search_ctx rs;
    memset(&rs, 0, sizeof rs);
    rap_model_shape sh = {0};
    rap_capacity_assumed(&sh, "", &rs.base);
    double cap[RAP_REPLAN_WINDOWS];
    for (int w = 0; w < RAP_REPLAN_WINDOWS; w++)
        cap[w] = rs.base.capacity_ms[w];
    const int64_t B = 65536;
    double lists[26];
    for (int j = 0; j < 26; j++)
        lists[j] = 0.05;
    rap_schedule *bound = NULL, *measured = NULL;
    REQUIRE_OK(rap_replan_search(&rs, plan, &f, B, cap, NULL, 0, &bound));
    REQUIRE_OK(rap_replan_search(&rs, plan, &f, B, cap, lists, 26, &measured));
    double pb = 0, pm = 0;
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        int nb = 0, nm = 0;
        const rap_slice *sb = rap_schedule_window(bound, (rap_window)w, &nb);
        const rap_slice *sm = rap_schedule_window(measured, (rap_window)w, &nm);
        for (int i = 0; i < nb; i++)
            pb += sb[i].predicted_ms;
        for (int i = 0; i < nm; i++)
            pm += sm[i].predicted_ms;
    }
    CHECK_MSG(pm < pb && pm > 0, "predicted %.6g ms on the measured lists, %.6g on the bounds",
              pm, pb);
    CHECK_OK(rap_schedule_validate(measured, plan, &f, B));
    for (int i = 0; i < plan->n_nodes; i++)
        CHECK(plan->nodes[i].mean_ids == 0);
    rap_schedule_free(bound);
    rap_schedule_free(measured);
    rap_fusion_free(&f);
    rap_plan_free(plan);
}

/* A growing input whose lists empty halfway re-plans on the list lengths
 * alone (the times' threshold out of reach); the same rows without the
 * change do not. */
RAP_TEST(replan_on_list_lengths_cpu)
{
    char src[512], data[512], mf[512];
    REQUIRE_OK(gen("rl_src.tsv", 12800, 71, src, sizeof src));
    rap_test_path(data, sizeof data, "rl_blank.tsv");
    REQUIRE(blank_cats(src, data, 3840)); /* from step 16: the check at 20 sees it */
    rap_test_path(mf, sizeof mf, "rl.jsonl");
    rap_plan *plan = NULL;
    REQUIRE_OK(load_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    config(&c, plan, data);
    c.progressive = false;
    c.fusion = RAP_FUSE_LEVELS;
    c.metrics = mf;
    c.model.batch = 256; /* periods of 2,560 rows: the lists' sampling noise well under 20 % */
    rap_replan_search_ctx rs;
    memset(&rs, 0, sizeof rs);
    rap_model_shape sh = {0};
    rap_capacity_assumed(&sh, "", &rs.base);
    rap_replan_config rc;
    memset(&rc, 0, sizeof rc);
    rc.every = 10;
    rc.threshold = 1e9;
    rc.list_threshold = 0.2;
    rc.tolerance = rs.base.tolerance;
    for (int w = 0; w < RAP_REPLAN_WINDOWS; w++) {
        rc.standalone_ms[w] = rs.base.standalone_ms[w];
        rc.capacity_ms[w] = rs.base.capacity_ms[w];
    }
    rc.plan_fn = rap_replan_search;
    rc.plan_ctx = &rs;
    c.replan = &rc;
    REQUIRE_OK(rap_train_run(&c, &r));
    /* the plan starts at the check; its swap needs the planner's thread to
     * finish before the last step (30 steps later: on a loaded machine it
     * may not, and the plan is dropped) */
    CHECK_MSG(r.replan_plans >= 1 && r.samples == 12800, "plans %lld, samples %lld",
              (long long)r.replan_plans, (long long)r.samples);
    CHECK(count_lines(mf, "the input's list lengths changed: raw column cat_") ==
          (int)r.replan_swaps);
    c.data = src; /* the same rows, lists as generated */
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK_MSG(r.replan_swaps == 0 && r.replan_checks >= 4, "swaps %lld, checks %lld",
              (long long)r.replan_swaps, (long long)r.replan_checks);
    CHECK(count_lines(mf, "\"event\":\"replan\"") == 0);
    rap_plan_free(plan);
}
