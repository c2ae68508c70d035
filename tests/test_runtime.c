/* test_runtime.c -- the co-running runtime (src/run/runtime.h): the row
 * feed's batches and accounting, every mode available on the CPU (cpu mode
 * with the CPU model, the CPU path) with malformed rows and with a stop in
 * the middle, thread-count invariance, follow mode starvation, shutdown;
 * on a GPU the weights after N steps of every GPU mode, bit for bit.
 * (Queue, the row feed in reader batches, schedule and trace units:
 * test_runtime_infra.c.) */
#include "test.h"

#include "core/core.h"
#include "model/model.h"
#include "run/checkpoint.h"
#include "run/input.h"
#include "run/runtime.h"
#include "sched/schedule.h"
#include "run/train.h"

#include <pthread.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = df[\"int_4\"].fill_null(0).clamp(0, 50)\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_3\"] = functional.firstx(df[\"cat_3\"].fill_null(0), 1)\n"
    "df[\"cat_3\"] = functional.sigrid_hash(df[\"cat_3\"], 7, 500)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

static rap_status parse_plan(rap_plan **out)
{
    return rap_test_plan_text(k_plan, "rt.plan", out);
}

/* Generated rows with a malformed line after every `every` good ones
 * (every 0: none). *bad gets the number of malformed lines. */
static rap_status make_data(const char *name, int64_t rows, int every, char *path, size_t n,
                            int64_t *bad)
{
    char clean[600];
    snprintf(clean, sizeof clean, "%s/clean_%s", rap_test_tmpdir(), name);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = 11;
    g.out = clean;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    RAP_TRY(rap_gen_write(&g, &r));
    rap_test_path(path, n, name);
    FILE *in = fopen(clean, "r"), *out = fopen(path, "w");
    if (!in || !out) {
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return rap_fail(RAP_ERR_IO, "make_data: cannot open files");
    }
    static const char *bad_lines[] = {"garbage line\n", "7\t1\t2\n", "\n"};
    char line[8192];
    int64_t i = 0, nb = 0;
    while (fgets(line, sizeof line, in)) {
        fputs(line, out);
        if (every > 0 && ++i % every == 0)
            fputs(bad_lines[nb++ % 2], out);
    }
    fclose(in);
    fclose(out);
    remove(clean);
    *bad = nb;
    return RAP_OK;
}

static void small_config(rap_train_config *c, const rap_plan *plan, const char *data)
{
    rap_train_defaults(c);
    c->plan = plan;
    c->plan_name = "rt";
    c->data = data;
    c->model.emb_dim = 4;
    c->model.n_bot = 2;
    c->model.bot[0] = 8;
    c->model.bot[1] = 4;
    c->model.n_top = 2;
    c->model.top[0] = 8;
    c->model.top[1] = 1;
    c->model.batch = 64;
    c->model.optimizer = RAP_ADAGRAD;
    c->model.lr = 0.05f;
    c->model.threads = 2;
    c->model.strict_fp32 = true;
    c->reader.threads = 2;
    c->eval_fraction = 0.1;
    c->cpu_workers = 3;
}

RAP_TEST(rt_mode_names)
{
    for (int m = 0; m < RAP_MODE_COUNT; m++)
        CHECK(rap_mode_parse(rap_mode_name((rap_mode)m)) == m);
    CHECK(rap_mode_parse("fast") == -1);
    rap_mode ms[8];
    int n;
    REQUIRE_OK(rap_mode_list_parse("ideal,cpu,rap", ms, 8, &n));
    CHECK(n == 3 && ms[0] == RAP_MODE_IDEAL && ms[1] == RAP_MODE_CPU && ms[2] == RAP_MODE_RAP);
    CHECK(rap_mode_list_parse("ideal,turbo", ms, 8, &n) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "turbo"));
    CHECK(rap_mode_list_parse("cpu,cpu", ms, 8, &n) == RAP_ERR_ARG);
    char why[256];
    CHECK(rap_mode_available(RAP_MODE_CPU, RAP_CPU, why, sizeof why));
    CHECK(rap_mode_available(RAP_MODE_SEQUENTIAL, RAP_CPU, why, sizeof why));
    CHECK(!rap_mode_available(RAP_MODE_RAP, RAP_CPU, why, sizeof why) && strstr(why, "GPU"));
}

/* The feed's batches are exactly the non-held-out rows, in order, B at a
 * time, whatever the reader's threads; markers end each pass. */
RAP_TEST(rt_rowfeed_batches_and_accounting)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("feed.tsv", 2000, 97, data, sizeof data, &bad));
    const double F = 0.2;
    /* expected: labels and int_0 of the used rows that are not held out */
    rap_reader_config rc = rap_reader_defaults();
    rc.input = data;
    rc.threads = 1;
    rap_reader *rd;
    REQUIRE_OK(rap_reader_open(&rc, &rd));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 333, false));
    float *exp = malloc(sizeof(float) * 2 * 2000);
    int64_t ne = 0;
    while (rap_reader_next(rd, &b) == RAP_OK && b.rows > 0)
        for (int64_t r = 0; r < b.rows; r++)
            if (!rap_train_held_out(b.first_row + r, F)) {
                exp[2 * ne] = b.label[r];
                exp[2 * ne + 1] = b.dense_valid[r] ? b.dense[r] : -12345;
                ne++;
            }
    rap_reader_stats rs;
    rap_reader_get_stats(rd, &rs);
    rap_reader_close(rd);
    rap_batch_free(&b);
    CHECK(rs.rows_rejected == bad && bad > 0);
    for (int threads = 1; threads <= 3; threads += 2) {
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = rap_reader_defaults();
        fc.reader.input = data;
        fc.reader.threads = threads;
        fc.chunk_bytes = 4096;
        fc.batch_rows = 50;
        fc.n_batches = 3;
        fc.holdout = F;
        fc.passes = 2;
        rap_rowfeed *f;
        REQUIRE_OK(rap_rowfeed_create(&fc, &f));
        int64_t at = 0, markers = 0, pass_rows = 0, seq = 0;
        bool order_ok = true, sizes_ok = true;
        rap_row_batch *rb;
        rap_status st;
        while ((st = rap_rowfeed_next(f, &rb, NULL)) == RAP_OK && rb) {
            order_ok &= rb->seq == seq++;
            if (rb->pass == 0)
                for (int64_t r = 0; r < rb->batch.rows && at < ne; r++, at++) {
                    const rap_batch *x = &rb->batch;
                    float d = x->dense_valid[r] ? x->dense[r] : -12345;
                    order_ok &= x->label[r] == exp[2 * at] && d == exp[2 * at + 1];
                }
            pass_rows += rb->batch.rows;
            if (rb->end_of_pass) {
                markers++;
                CHECK(rb->pass_rows == pass_rows);
                pass_rows = 0;
            } else {
                sizes_ok &= rb->batch.rows == 50;
            }
            REQUIRE_OK(rap_rowfeed_release(f, rb));
        }
        REQUIRE_OK(st);
        rap_rowfeed_stats fs;
        rap_rowfeed_free(f, &fs);
        CHECK_MSG(order_ok, "threads %d: rows out of order or different", threads);
        CHECK(sizes_ok);
        CHECK(at == ne);
        CHECK(markers == 2 && fs.passes_done == 2);
        CHECK(fs.rows_out == 2 * ne);
        CHECK(fs.reader.rows_read == 2 * rs.rows_read);
        CHECK(fs.reader.rows_rejected == 2 * bad);
        CHECK(fs.reader.rows_used == fs.rows_out + fs.rows_held_out);
        CHECK(fs.rows_pending == 0);
    }
    free(exp);
}

/* Freeing a feed whose thread waits for a batch the consumer holds: no
 * hang, no leak (ASan build). */
RAP_TEST(rt_rowfeed_free_midway)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("feed_free.tsv", 3000, 0, data, sizeof data, &bad));
    for (int keep = 0; keep < 2; keep++) {
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = rap_reader_defaults();
        fc.reader.input = data;
        fc.batch_rows = 64;
        fc.n_batches = 2;
        rap_rowfeed *f;
        REQUIRE_OK(rap_rowfeed_create(&fc, &f));
        rap_row_batch *rb;
        REQUIRE_OK(rap_rowfeed_next(f, &rb, NULL));
        REQUIRE(rb);
        if (!keep)
            REQUIRE_OK(rap_rowfeed_release(f, rb));
        usleep(20000);
        rap_rowfeed_stats fs;
        rap_rowfeed_free(f, &fs);
        CHECK(fs.rows_out == 64);
        CHECK(fs.reader.rows_used == fs.rows_out + fs.rows_pending + fs.rows_held_out);
    }
}

/* Whether the handed-out contents of two feed batches are the same: the
 * header, and for the rows held, labels, dense values and flags, sparse
 * flags, offsets and the ids they cover (bytes past them are not part of
 * the batch). */
static bool same_feed_batch(const rap_row_batch *x, const rap_row_batch *y)
{
    const rap_batch *a = &x->batch, *b = &y->batch;
    if (x->seq != y->seq || x->pass != y->pass || x->pos_after != y->pos_after ||
        x->pass_rows != y->pass_rows || x->end_of_pass != y->end_of_pass || a->rows != b->rows ||
        a->first_row != b->first_row || a->cap != b->cap)
        return false;
    int64_t n = a->rows, B = a->cap;
    if (n == 0)
        return true;
    bool ok = !memcmp(a->label, b->label, sizeof(float) * (size_t)n);
    for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
        ok &= !memcmp(a->dense + j * B, b->dense + j * B, sizeof(float) * (size_t)n);
        ok &= !memcmp(a->dense_valid + j * B, b->dense_valid + j * B, (size_t)n);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        const int64_t *oa = a->sparse_off + j * (B + 1), *ob = b->sparse_off + j * (B + 1);
        ok &= !memcmp(oa, ob, sizeof(int64_t) * (size_t)(n + 1));
        if (ok)
            ok &= !memcmp(a->sparse_ids + j * B, b->sparse_ids + j * B,
                          sizeof(int64_t) * (size_t)oa[n]);
        ok &= !memcmp(a->sparse_valid + j * B, b->sparse_valid + j * B, (size_t)n);
    }
    return ok;
}

/* The fast paths of the feed (reading straight into the pool batch when
 * nothing is held out, copying runs of rows column by column otherwise)
 * hand out the same batches, positions and accounting as the per-row
 * reference, on data with malformed rows, with and without a hold-out and
 * a resume position, skipping bad rows or failing on the first. */
RAP_TEST(rt_rowfeed_bulk_matches_per_row)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("feed_bulk.tsv", 3000, 89, data, sizeof data, &bad));
    REQUIRE(bad > 0);
    static const double Fs[] = {0, 0.2};
    static const int64_t starts[] = {0, 137, 1000};
    static const int64_t Bs[] = {50, 64, 4096};
    int cases = 0;
    for (int fi = 0; fi < 2; fi++)
        for (int si = 0; si < 3; si++)
            for (int bi = 0; bi < 3; bi++)
                for (int fail = 0; fail <= 1; fail++) {
                    rap_rowfeed_config fc;
                    memset(&fc, 0, sizeof fc);
                    fc.reader = rap_reader_defaults();
                    fc.reader.input = data;
                    fc.reader.threads = 1 + (bi & 1) * 2;
                    fc.reader.bad_rows = fail ? RAP_BAD_FAIL : RAP_BAD_SKIP;
                    fc.chunk_bytes = 4096;
                    fc.batch_rows = Bs[bi];
                    fc.n_batches = 3;
                    fc.holdout = Fs[fi];
                    fc.start_pos = starts[si];
                    fc.passes = 2;
                    rap_rowfeed *ref, *fast;
                    fc.per_row = true;
                    REQUIRE_OK(rap_rowfeed_create(&fc, &ref));
                    fc.per_row = false;
                    REQUIRE_OK(rap_rowfeed_create(&fc, &fast));
                    int64_t nb = 0, rows = 0, markers = 0;
                    bool same = true;
                    rap_status sr, sf;
                    for (;;) {
                        rap_row_batch *a = NULL, *b = NULL;
                        sr = rap_rowfeed_next(ref, &a, NULL);
                        sf = rap_rowfeed_next(fast, &b, NULL);
                        if (sr != RAP_OK || sf != RAP_OK || !a || !b) {
                            same &= !a && !b;
                            if (a)
                                rap_rowfeed_release(ref, a);
                            if (b)
                                rap_rowfeed_release(fast, b);
                            break;
                        }
                        same &= same_feed_batch(a, b);
                        nb++;
                        rows += a->batch.rows;
                        markers += a->end_of_pass;
                        REQUIRE_OK(rap_rowfeed_release(ref, a));
                        REQUIRE_OK(rap_rowfeed_release(fast, b));
                    }
                    rap_rowfeed_stats rs, fs;
                    rap_rowfeed_free(ref, &rs);
                    rap_rowfeed_free(fast, &fs);
                    CHECK_MSG(same && sr == sf, "F %.1f start %lld B %lld fail %d: batch %lld "
                              "differs (status %d vs %d)", Fs[fi], (long long)starts[si],
                              (long long)Bs[bi], fail, (long long)nb, (int)sr, (int)sf);
                    CHECK(rs.rows_out == fs.rows_out && rs.rows_out == rows);
                    CHECK(rs.rows_held_out == fs.rows_held_out);
                    CHECK(rs.rows_skipped == fs.rows_skipped);
                    if (fail) {
                        CHECK_MSG(sr == RAP_ERR_DATA && markers == 0, "status %d", (int)sr);
                    } else {
                        CHECK(sr == RAP_OK && markers == 2);
                        CHECK(rs.reader.rows_used == fs.reader.rows_used);
                        CHECK(rs.rows_pending == 0 && fs.rows_pending == 0);
                        CHECK(rs.rows_skipped == starts[si]);
                        CHECK((Fs[fi] > 0) == (rs.rows_held_out > 0));
                    }
                    cases++;
                }
    CHECK(cases == 36);
}

/* A consumer that asks for another batch while it holds every batch of
 * the pool (what ideal mode did with a group of 8 and a pool of 4) gets an
 * error naming the deadlock within seconds instead of waiting forever; the
 * feed goes on once batches are given back. */
RAP_TEST(rt_rowfeed_all_held_fails)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("feed_held.tsv", 2000, 0, data, sizeof data, &bad));
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = data;
    fc.batch_rows = 64;
    fc.n_batches = 2;
    fc.passes = 1;
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&fc, &f));
    rap_row_batch *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_OK(rap_rowfeed_next(f, &a, NULL));
    REQUIRE_OK(rap_rowfeed_next(f, &b, NULL));
    REQUIRE(a && b);
    double t0 = rap_now();
    rap_status st = rap_rowfeed_next(f, &c, NULL);
    double waited = rap_now() - t0;
    CHECK_MSG(st == RAP_ERR_INTERNAL && !c, "status %d", (int)st);
    CHECK_MSG(strstr(rap_last_error(), "deadlock") && strstr(rap_last_error(), "all 2 batches"),
              "%s", rap_last_error());
    CHECK_MSG(waited >= 1.5 && waited < 30, "failed after %.2f s", waited);
    REQUIRE_OK(rap_rowfeed_release(f, a));
    REQUIRE_OK(rap_rowfeed_release(f, b));
    REQUIRE_OK(rap_rowfeed_next(f, &c, NULL));
    REQUIRE(c);
    CHECK(c->seq == 2 && c->batch.rows == 64);
    REQUIRE_OK(rap_rowfeed_release(f, c));
    rap_rowfeed_stats fs;
    rap_rowfeed_free(f, &fs);
    CHECK(fs.rows_out == 3 * 64);
}

/* One epoch over rows with malformed lines in cpu mode and on the CPU
 * path: every row trained, held out or rejected, none twice; both modes
 * train the same weights. */
RAP_TEST(rt_train_accounting_cpu_modes)
{
    char data[512], ck[2][512];
    int64_t bad;
    REQUIRE_OK(make_data("acct.tsv", 3000, 50, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    const rap_mode modes[2] = {RAP_MODE_SEQUENTIAL, RAP_MODE_CPU};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "acct_%s.safetensors", rap_mode_name(modes[i]));
        rap_test_path(ck[i], sizeof ck[i], name);
        rap_train_config c;
        rap_train_result r;
        small_config(&c, plan, data);
        c.mode = modes[i];
        c.save = ck[i];
        REQUIRE_OK(rap_train_run(&c, &r));
        CHECK(r.mode == modes[i]);
        CHECK(r.data.rows_read == 3000 + bad);
        CHECK(r.data.rows_rejected == bad);
        CHECK(r.data.rows_used == 3000);
        CHECK_MSG(r.samples + r.rows_held_out == r.data.rows_used,
                  "%s: %lld trained + %lld held out != %lld used", rap_mode_name(modes[i]),
                  (long long)r.samples, (long long)r.rows_held_out, (long long)r.data.rows_used);
        CHECK(r.rows_pending == 0);
        CHECK(r.rows_held_out > 200 && r.rows_held_out < 400);
        CHECK(r.steps_run == (r.samples + 63) / 64);
        CHECK(r.eval.rows == r.rows_held_out);
    }
    CHECK_MSG(rap_test_same_checkpoints(ck[0], ck[1], NULL), "cpu mode and the CPU path trained different weights");
    rap_plan_free(plan);
}

/* The pipeline stopped in the middle (as by Ctrl-C): the step trained is
 * finished, the rows read ahead are counted as pending, none is lost or
 * trained twice, and resuming from the checkpoint completes the epoch with
 * the weights of an uninterrupted run. */
static void stop_midway(rap_test_ctx *t, rap_mode mode)
{
    char data[512], full[512], part[512], resumed[512];
    int64_t bad;
    REQUIRE_OK(make_data("stop.tsv", 4000, 40, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    char n1[64], n2[64], n3[64];
    snprintf(n1, sizeof n1, "stop_full_%s.st", rap_mode_name(mode));
    snprintf(n2, sizeof n2, "stop_part_%s.st", rap_mode_name(mode));
    snprintf(n3, sizeof n3, "stop_res_%s.st", rap_mode_name(mode));
    rap_test_path(full, sizeof full, n1);
    rap_test_path(part, sizeof part, n2);
    rap_test_path(resumed, sizeof resumed, n3);
    rap_train_config c;
    rap_train_result r;
    small_config(&c, plan, data);
    c.mode = mode;
    c.save = full;
    REQUIRE_OK(rap_train_run(&c, &r));
    int64_t full_samples = r.samples;

    /* the runtime directly: K steps, then a stop request */
    rap_fusion fus;
    REQUIRE_OK(rap_fuse_levels(plan, &fus));
    rap_model_config mc = c.model;
    int64_t rows[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(plan, &mc.n_dense, &mc.n_tables, rows));
    memcpy(mc.table_rows, rows, sizeof(int64_t) * (size_t)mc.n_tables);
    mc.max_bag = 1;
    rap_model *m;
    REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &m));
    volatile sig_atomic_t stop = 0;
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = data;
    fc.reader.threads = 2;
    fc.batch_rows = 64;
    fc.n_batches = 6;
    fc.holdout = 0.1;
    fc.passes = 1;
    fc.stop = &stop;
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&fc, &f));
    rap_runtime_config rc;
    memset(&rc, 0, sizeof rc);
    rc.mode = mode;
    rc.plan = plan;
    rc.fusion = &fus;
    rc.cpu_workers = 3;
    rap_runtime *rt;
    REQUIRE_OK(rap_runtime_create(&rc, m, f, &rt));
    int64_t trained = 0;
    for (int k = 0; k < 10; k++) {
        rap_step_info in;
        REQUIRE_OK(rap_runtime_step(rt, &in));
        CHECK(in.rows == 64 && !in.end);
        trained += in.rows;
    }
    int64_t idx;
    double loss;
    rap_status st;
    int n_loss = 0;
    while (rap_runtime_next_loss(rt, true, &idx, &loss, &st))
        CHECK(idx == n_loss++ && isfinite(loss));
    CHECK(n_loss == 10);
    stop = 1; /* as the SIGINT handler does; the trainer stops after its step */
    rap_rowfeed_stop(f);
    rap_runtime_free(rt);
    rap_rowfeed_stats fs;
    rap_rowfeed_free(f, &fs);
    CHECK(fs.reader.rows_read == fs.reader.rows_used + fs.reader.rows_rejected);
    CHECK_MSG(fs.reader.rows_used == trained + fs.rows_held_out + fs.rows_pending +
                                         (fs.rows_out - trained),
              "%lld used != %lld trained + %lld held + %lld pending + %lld prepared, untrained",
              (long long)fs.reader.rows_used, (long long)trained, (long long)fs.rows_held_out,
              (long long)fs.rows_pending, (long long)(fs.rows_out - trained));
    CHECK(fs.rows_out >= trained);
    rap_model_free(m);
    rap_fusion_free(&fus);

    /* through the trainer: stop after 13 steps (as --steps would, then as a
     * stop request would), save, resume: same weights as the full run */
    small_config(&c, plan, data);
    c.mode = mode;
    c.steps = 13;
    c.save = part;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.samples == 13 * 64);
    CHECK(r.data.rows_used == r.samples + r.rows_held_out + r.rows_pending);
    small_config(&c, plan, data);
    c.mode = mode;
    c.resume = part;
    c.save = resumed;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.samples_total == full_samples);
    CHECK_MSG(rap_test_same_checkpoints(full, resumed, NULL), "%s: stopped + resumed != uninterrupted",
              rap_mode_name(mode));
    rap_plan_free(plan);
}

RAP_TEST(rt_stop_midway_cpu_path) { stop_midway(t, RAP_MODE_SEQUENTIAL); }
RAP_TEST(rt_stop_midway_cpu_mode) { stop_midway(t, RAP_MODE_CPU); }

typedef struct {
    volatile sig_atomic_t *flag;
    int ms;
} stopper;

static void *stopper_main(void *arg)
{
    stopper *s = arg;
    usleep((useconds_t)s->ms * 1000);
    *s->flag = 1;
    return NULL;
}

/* A stop request from another thread at any moment (Ctrl-C): the run ends
 * cleanly, interrupted, with exact accounting. */
RAP_TEST(rt_interrupt_accounting)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("intr.tsv", 20000, 70, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    for (int i = 0; i < 2; i++) {
        volatile sig_atomic_t flag = 0;
        rap_train_config c;
        rap_train_result r;
        small_config(&c, plan, data);
        c.mode = i ? RAP_MODE_CPU : RAP_MODE_SEQUENTIAL;
        c.epochs = 3;
        c.stop = &flag;
        stopper s = {&flag, 40};
        pthread_t tid;
        REQUIRE(pthread_create(&tid, NULL, stopper_main, &s) == 0);
        rap_status st = rap_train_run(&c, &r);
        pthread_join(tid, NULL);
        CHECK(st == RAP_ERR_INTERRUPTED || st == RAP_OK);
        CHECK(r.data.rows_read == r.data.rows_used + r.data.rows_rejected);
        CHECK_MSG(r.data.rows_used == r.samples + r.rows_held_out + r.rows_pending,
                  "%s: %lld used != %lld trained + %lld held + %lld pending",
                  rap_mode_name((rap_mode)c.mode), (long long)r.data.rows_used,
                  (long long)r.samples, (long long)r.rows_held_out, (long long)r.rows_pending);
        CHECK(r.rows_pending >= 0);
    }
    rap_plan_free(plan);
}

/* Same weights after N steps whatever the number of reader threads (and
 * of cpu workers). */
RAP_TEST(rt_threads_invariance)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("threads.tsv", 3000, 80, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    char ck[4][512];
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "threads_%d.st", i);
        rap_test_path(ck[i], sizeof ck[i], name);
        rap_train_config c;
        rap_train_result r;
        small_config(&c, plan, data);
        c.mode = i < 2 ? RAP_MODE_SEQUENTIAL : RAP_MODE_CPU;
        c.reader.threads = i % 2 ? 3 : 1;
        c.cpu_workers = i % 2 ? 3 : 1;
        c.steps = 30;
        c.eval_fraction = 0;
        c.save = ck[i];
        REQUIRE_OK(rap_train_run(&c, &r));
        CHECK(r.step == 30);
    }
    for (int i = 1; i < 4; i++)
        CHECK_MSG(rap_test_same_checkpoints(ck[0], ck[i], NULL), "run %d differs from run 0", i);
    rap_plan_free(plan);
}

/* --follow: the trainer waits for data instead of ending, and says it
 * was starved. */
RAP_TEST(rt_follow_starved)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("follow.tsv", 500, 0, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    rap_train_config c;
    rap_train_result r;
    small_config(&c, plan, data);
    c.eval_fraction = 0;
    c.reader.follow = true;
    c.reader.idle_timeout_s = 0.3;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.samples == 500);
    CHECK_MSG(r.starved_s > 0.2, "starved %.3f s", r.starved_s);
    rap_plan_free(plan);
}

/* ---- GPU: every mode trains the same weights */

/* A schedule that splits every kernel by rows into two pieces, kernels
 * spread over the four phases in order (valid by construction). */
static rap_status split_schedule(const rap_plan *p, const rap_fusion *f, rap_schedule **out)
{
    RAP_TRY(rap_schedule_create(p, f, "<test split>", out));
    for (int k = 0; k < f->n; k++) {
        rap_window w = (rap_window)(4 * k / f->n);
        RAP_TRY(rap_schedule_add(*out, w, k, 0, f->kernels[k].n, 0, 24, -1));
        RAP_TRY(rap_schedule_add(*out, w, k, 0, f->kernels[k].n, 24, RAP_ROWS_END, -1));
    }
    return RAP_OK;
}

/* A schedule with every kernel whole in window w (in order). */
static rap_status window_schedule(const rap_plan *p, const rap_fusion *f, rap_window w,
                                  rap_schedule **out)
{
    RAP_TRY(rap_schedule_create(p, f, "<test one window>", out));
    for (int k = 0; k < f->n; k++)
        RAP_TRY(rap_schedule_add(*out, w, k, 0, f->kernels[k].n, 0, RAP_ROWS_END, -1));
    return RAP_OK;
}

static void gpu_modes_same_weights(rap_test_ctx *t)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("gpu_modes.tsv", 3000, 60, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    rap_fusion fus;
    REQUIRE_OK(rap_fuse_levels(plan, &fus));
    rap_schedule *split;
    REQUIRE_OK(split_schedule(plan, &fus, &split));
    REQUIRE_OK(rap_schedule_validate(split, plan, &fus, 64));
    /* the next batch's copy is deferred (no emb_forward slices): to
     * mlp_backward's start when only emb_backward has slices, to
     * mlp_forward's when mlp_backward has (rt_phases.c, rt_copy_window) */
    rap_schedule *embb, *mlpb;
    REQUIRE_OK(window_schedule(plan, &fus, RAP_WIN_EMB_BACKWARD, &embb));
    REQUIRE_OK(window_schedule(plan, &fus, RAP_WIN_MLP_BACKWARD, &mlpb));
    const struct {
        rap_mode mode;
        const rap_schedule *sched;
        const char *name;
        int lanes;
    } runs[] = {
        {RAP_MODE_SEQUENTIAL, NULL, "sequential", 0}, {RAP_MODE_STREAM, NULL, "stream", 0},
        {RAP_MODE_RAP, NULL, "rap", 0},               {RAP_MODE_RAP, split, "rap_split", 0},
        {RAP_MODE_IDEAL, NULL, "ideal", 0},           {RAP_MODE_CPU, NULL, "cpu", 0},
        {RAP_MODE_RAP, NULL, "rap_4_lanes", 4},       {RAP_MODE_RAP, split, "rap_split_3_lanes", 3},
        {RAP_MODE_RAP, embb, "rap_emb_backward", 0},  {RAP_MODE_RAP, mlpb, "rap_mlp_backward", 0},
    };
    const int n = (int)(sizeof runs / sizeof runs[0]);
    char ck[16][512];
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "gpu_%s.st", runs[i].name);
        rap_test_path(ck[i], sizeof ck[i], name);
        rap_train_config c;
        rap_train_result r;
        small_config(&c, plan, data);
        c.device = RAP_GPU;
        c.mode = runs[i].mode;
        c.schedule = runs[i].sched;
        c.prep_lanes = runs[i].lanes; /* levels of a window on several streams at once */
        c.steps = 57; /* past the end of the first pass (about 42 steps) */
        c.save = ck[i];
        rap_status st = rap_train_run(&c, &r);
        CHECK_MSG(st == RAP_OK, "%s: %s", runs[i].name, rap_last_error());
        if (st != RAP_OK)
            continue;
        CHECK(r.step == 57);
        /* the loss read back from the GPU (rap_rt_store_f32): a real
         * cross-entropy, not the pinned buffer's initial zeros */
        CHECK_MSG(isfinite(r.loss) && r.loss > 0.05 && r.loss < 5, "%s: loss %g", runs[i].name,
                  r.loss);
        /* cpu mode preprocesses on the CPU: float ops may differ by an ulp
         * from the GPU's (docs/OPS.md), so only the GPU-preprocessing modes
         * are compared bit for bit */
        if (i > 0 && runs[i].mode != RAP_MODE_CPU)
            CHECK_MSG(rap_test_same_checkpoints(ck[0], ck[i], NULL), "%s trained other weights than sequential",
                      runs[i].name);
    }
    rap_schedule_free(split);
    rap_schedule_free(embb);
    rap_schedule_free(mlpb);
    rap_fusion_free(&fus);
    rap_plan_free(plan);
}

/* Each step's loss reaches the host by a one-thread kernel storing into
 * pinned memory by its device address (rap_rt_store_f32, instead of a
 * copy): every value lands in its own slot, readable once an event
 * recorded after the kernel has completed. */
RAP_TEST(rt_gpu_store_f32)
{
    REQUIRE_GPU();
    enum { N = 8 };
    float *h = NULL, *hd = NULL;
    void *stream = NULL, *ev = NULL;
    REQUIRE_OK(rap_rt_stream_create(&stream, true));
    REQUIRE_OK(rap_rt_event_create(&ev));
    REQUIRE_OK(rap_rt_host_alloc((void **)&h, sizeof(float) * 2 * N));
    REQUIRE_OK(rap_rt_host_dev_ptr(h, (void **)&hd));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            h[i] = 0.25f * (float)(i + 1) + (float)round; /* the sources */
            h[N + i] = -1.0f;                               /* their slots */
        }
        for (int i = 0; i < N; i++)
            REQUIRE_OK(rap_rt_store_f32(hd + N + i, hd + i, stream));
        REQUIRE_OK(rap_rt_record(ev, stream));
        REQUIRE_OK(rap_rt_event_wait(ev, 60.0, "the stores"));
        for (int i = 0; i < N; i++)
            CHECK_MSG(h[N + i] == h[i], "round %d slot %d: %g, expected %g", round, i,
                      (double)h[N + i], (double)h[i]);
    }
    rap_rt_host_free(h);
    rap_rt_event_free(ev);
    rap_rt_stream_free(stream);
}

RAP_TEST(rt_gpu_modes_same_weights)
{
    REQUIRE_GPU();
    rap_test_env te;
    rap_test_tune_off(&te); /* every model with the same GEMM algorithms */
    gpu_modes_same_weights(t);
    rap_test_tune_restore(&te);
}

/* A schedule given is checked in every mode, also on the CPU where only
 * rap mode would run it: one made for another fusion (a cut hash) is
 * refused, naming the file, instead of being ignored. */
RAP_TEST(rt_schedule_checked_in_every_mode)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("sched_check.tsv", 600, 61, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    rap_fusion fus;
    REQUIRE_OK(rap_fuse_levels(plan, &fus));
    rap_schedule *s;
    REQUIRE_OK(window_schedule(plan, &fus, RAP_WIN_EMB_BACKWARD, &s));
    rap_train_config c;
    rap_train_result r;
    small_config(&c, plan, data);
    c.mode = RAP_MODE_SEQUENTIAL;
    c.schedule = s;
    c.steps = 3;
    CHECK_MSG(rap_train_run(&c, &r) == RAP_OK, "%s", rap_last_error());
    s->fusion_hash >>= 20; /* the hash of a file cut mid-line */
    small_config(&c, plan, data);
    c.mode = RAP_MODE_SEQUENTIAL;
    c.schedule = s;
    c.steps = 3;
    CHECK(rap_train_run(&c, &r) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "<test one window>: made for a fusion") != NULL);
    rap_schedule_free(s);
    rap_fusion_free(&fus);
    rap_plan_free(plan);
}

/* On the GPU the pipeline keeps the accounting and the resume exact too. */
static void gpu_stop_and_resume(rap_test_ctx *t)
{
    char data[512], full[512], part[512], res[512];
    int64_t bad;
    REQUIRE_OK(make_data("gpu_stop.tsv", 3000, 45, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    rap_test_path(full, sizeof full, "gpu_full.st");
    rap_test_path(part, sizeof part, "gpu_part.st");
    rap_test_path(res, sizeof res, "gpu_res.st");
    rap_train_config c;
    rap_train_result r;
    small_config(&c, plan, data);
    c.device = RAP_GPU;
    c.mode = RAP_MODE_RAP;
    c.save = full;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.samples + r.rows_held_out == r.data.rows_used && r.rows_pending == 0);
    small_config(&c, plan, data);
    c.device = RAP_GPU;
    c.mode = RAP_MODE_RAP;
    c.steps = 11;
    c.save = part;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(r.data.rows_used == r.samples + r.rows_held_out + r.rows_pending);
    small_config(&c, plan, data);
    c.device = RAP_GPU;
    c.mode = RAP_MODE_STREAM;
    c.resume = part;
    c.save = res;
    REQUIRE_OK(rap_train_run(&c, &r));
    CHECK(rap_test_same_checkpoints(full, res, NULL));
    rap_plan_free(plan);
}

RAP_TEST(rt_gpu_stop_and_resume)
{
    REQUIRE_GPU();
    rap_test_env te;
    rap_test_tune_off(&te); /* the full and the resumed run compared bit for bit */
    gpu_stop_and_resume(t);
    rap_test_tune_restore(&te);
}

/* --trace: the first N steps' phases and preprocessing are in the
 * timeline (CPU: host spans), nothing after them. */
RAP_TEST(rt_trace_steps)
{
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("trace.tsv", 1500, 0, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    for (int i = 0; i < 2; i++) {
        rap_trace_config tc = {0};
        rap_trace *tr;
        REQUIRE_OK(rap_trace_create(&tc, &tr));
        rap_train_config c;
        rap_train_result r;
        small_config(&c, plan, data);
        c.mode = i ? RAP_MODE_CPU : RAP_MODE_SEQUENTIAL;
        c.eval_fraction = 0;
        c.steps = 10;
        c.trace = tr;
        c.trace_steps = 3;
        REQUIRE_OK(rap_train_run(&c, &r));
        char path[512];
        rap_test_path(path, sizeof path, i ? "trace_cpu.json" : "trace_seq.json");
        REQUIRE_OK(rap_trace_write(tr, path));
        FILE *f = fopen(path, "r");
        REQUIRE(f);
        char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        int phases = 0;
        for (char *p = buf; (p = strstr(p, "\"cat\":\"phase\"")); p++)
            phases++;
        CHECK_MSG(phases == 4 * 3, "%s: %d phase spans", rap_mode_name((rap_mode)c.mode), phases);
        CHECK(strstr(buf, "\"emb_backward\"") && strstr(buf, "\"cat\":\"prep\""));
        CHECK(strstr(buf, "\"read batch\""));
        rap_trace_free(tr);
    }
    rap_plan_free(plan);
}

/* rap bench through the binary: one table with every mode (skipped ones
 * say why), and --json. */
RAP_TEST(rt_cli_bench)
{
    char exe[1024], bin[1100];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(bin, sizeof bin, "%s/rap", exe);
    if (access(bin, X_OK) != 0)
        SKIP("%s not built", bin);
    char out[600], cmd[4096];
    rap_test_path(out, sizeof out, "bench.out");
    static const char *const args[2] = {"", "--json"};
    for (int j = 0; j < 2; j++) {
        snprintf(cmd, sizeof cmd,
                 "%s bench --device cpu --quiet --steps 4 --warmup 1 --batch 128 --threads 2 "
                 "--cpu-workers 2 --modes ideal,cpu,sequential,rap %s >%s 2>&1 </dev/null",
                 bin, args[j], out);
        int st = system(cmd);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", WEXITSTATUS(st));
        FILE *f = fopen(out, "rb");
        REQUIRE(f);
        static char text[1 << 16];
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
        if (j == 0) {
            CHECK_MSG(strstr(text, "samples/s") && strstr(text, "\ncpu ") &&
                          strstr(text, "\nsequential ") && strstr(text, "ideal       skipped"),
                      "%s", text);
        } else {
            CHECK_MSG(strstr(text, "\"mode\":\"cpu\",\"samples_per_s\":") &&
                          strstr(text, "\"mode\":\"rap\",\"skipped\":"),
                      "%s", text);
        }
    }
}

/* ---- GPU: a window's slices run beside their phase */

/* Trace spans of one name prefix ("cat" and args.n), in file order. */
typedef struct {
    double ts, dur;
    long long n;
} span_t;

static int read_spans(const char *buf, const char *name_prefix, const char *cat, span_t *out,
                      int max)
{
    int k = 0;
    char key[128];
    snprintf(key, sizeof key, "{\"name\":\"%s", name_prefix);
    for (const char *p = buf; k < max && (p = strstr(p, key)); p++) {
        const char *end = strchr(p, '}');
        const char *c = strstr(p, "\"cat\":\"");
        const char *ts = strstr(p, "\"ts\":");
        const char *dur = strstr(p, "\"dur\":");
        const char *n = strstr(p, "\"n\":");
        if (!end || !c || !ts || !dur || !n || c > end || ts > end || dur > end)
            continue;
        if (strncmp(c + 7, cat, strlen(cat)) != 0)
            continue;
        out[k].ts = atof(ts + 5);
        out[k].dur = atof(dur + 6);
        out[k].n = atoll(n + 4);
        k++;
    }
    return k;
}

/* Every kernel in the mlp_forward window: in the trace, the first slice of
 * batch i+1 starts before step i's mlp_forward ends (a slice released by
 * the phase's end instead of its start -- the bug fixed after f69d18a --
 * starts only after it). A model with a wide top MLP keeps the phase long. */
RAP_TEST(rt_gpu_slices_beside_their_phase)
{
    REQUIRE_GPU();
    char data[512];
    int64_t bad;
    REQUIRE_OK(make_data("gpu_window.tsv", 20000, 0, data, sizeof data, &bad));
    rap_plan *plan;
    REQUIRE_OK(parse_plan(&plan));
    rap_fusion fus;
    REQUIRE_OK(rap_fuse_levels(plan, &fus));
    rap_schedule *s;
    REQUIRE_OK(rap_schedule_create(plan, &fus, "<test mlp_forward>", &s));
    for (int k = 0; k < fus.n; k++)
        REQUIRE_OK(rap_schedule_add(s, RAP_WIN_MLP_FORWARD, k, 0, fus.kernels[k].n, 0,
                                    RAP_ROWS_END, -1));
    rap_trace_config tc = {.max_gpu_spans = 4096};
    rap_trace *tr;
    REQUIRE_OK(rap_trace_create(&tc, &tr));
    rap_train_config c;
    rap_train_result r;
    small_config(&c, plan, data);
    c.device = RAP_GPU;
    c.mode = RAP_MODE_RAP;
    c.schedule = s;
    c.model.batch = 2048;
    c.model.emb_dim = 16;
    c.model.bot[1] = 16;
    c.model.n_top = 3;
    c.model.top[0] = 2048;
    c.model.top[1] = 2048;
    c.model.top[2] = 1;
    c.eval_fraction = 0;
    c.steps = 8;
    c.trace = tr;
    c.trace_steps = 6;
    REQUIRE_OK(rap_train_run(&c, &r));
    char path[512];
    rap_test_path(path, sizeof path, "trace_window.json");
    REQUIRE_OK(rap_trace_write(tr, path));
    static char buf[1 << 20];
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    span_t ph[64], sl[512];
    int nph = read_spans(buf, "mlp_forward", "phase", ph, 64);
    int nsl = read_spans(buf, "k", "prep", sl, 512);
    int steps = 0, beside = 0;
    for (int i = 0; i < nph; i++) {
        double first = -1;
        for (int j = 0; j < nsl; j++) /* batch ph[i].n + 1's first slice */
            if (sl[j].n == ph[i].n + 1 && (first < 0 || sl[j].ts < first))
                first = sl[j].ts;
        if (first < 0)
            continue;
        steps++;
        beside += first >= ph[i].ts && first < ph[i].ts + ph[i].dur;
        printf("    step %lld: mlp_forward [%.1f, %.1f] us, first slice of the next batch at %.1f\n",
               ph[i].n, ph[i].ts, ph[i].ts + ph[i].dur, first);
    }
    CHECK_MSG(steps >= 3, "%d traced steps with slices (%d phase spans, %d slices)", steps, nph, nsl);
    CHECK_MSG(beside >= steps - 1, "slices started beside mlp_forward in %d of %d steps", beside,
              steps);
    rap_trace_free(tr);
    rap_schedule_free(s);
    rap_fusion_free(&fus);
    rap_plan_free(plan);
}
