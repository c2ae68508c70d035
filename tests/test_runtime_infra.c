/* test_runtime_infra.c -- the runtime's building blocks: the bounded queue
 * (threads, close and stop while blocked), the row feed handing out the
 * reader's batches as they come, as the mps server reads (order,
 * accounting, stop, errors, thread-count invariance), schedules (round trip, every
 * parse error, validation, built-ins on plans 0..3, slices reproduce a
 * whole run) and the trace writer (valid JSON, sorted, named tracks,
 * overflow), and the rewrite of CUDA graphs' memset nodes into kernels. */
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/core.h"
#include "run/graph.h"
#include "run/queue.h"
#include "run/rowfeed.h"
#include "run/trace.h"
#include "sched/schedule.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

static void ms_sleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/rt_%s", rap_test_tmpdir(), name);
    return p;
}

/* ================================================================ queue */

RAP_TEST(rt_queue_basic)
{
    rap_queue *q;
    CHECK(rap_queue_create(0, &q) == RAP_ERR_ARG && q == NULL);
    CHECK(strstr(rap_last_error(), "capacity") != NULL);
    REQUIRE_OK(rap_queue_create(3, &q));
    CHECK(rap_queue_capacity(q) == 3);
    int v[5];
    void *it;
    CHECK(rap_queue_try_pop(q, &it) == RAP_Q_EMPTY && it == NULL);
    CHECK(rap_queue_try_push(q, NULL) == RAP_Q_STOPPED); /* NULL refused */
    for (int i = 0; i < 3; i++)
        CHECK(rap_queue_try_push(q, &v[i]) == RAP_Q_OK);
    CHECK(rap_queue_try_push(q, &v[3]) == RAP_Q_FULL);
    CHECK(rap_queue_size(q) == 3);
    CHECK(rap_queue_pop(q, &it) == RAP_Q_OK && it == &v[0]);
    CHECK(rap_queue_push(q, &v[3]) == RAP_Q_OK); /* wraps around the ring */
    CHECK(rap_queue_pop(q, &it) == RAP_Q_OK && it == &v[1]);
    CHECK(rap_queue_pop(q, &it) == RAP_Q_OK && it == &v[2]);
    CHECK(rap_queue_pop(q, &it) == RAP_Q_OK && it == &v[3]);
    double t0 = rap_now();
    CHECK(rap_queue_pop_timed(q, &it, 0.05) == RAP_Q_TIMEOUT && it == NULL);
    double dt = rap_now() - t0;
    CHECK_MSG(dt >= 0.045 && dt < 2.0, "timed pop waited %.3f s for 0.05", dt);
    CHECK(rap_queue_pop_timed(q, &it, 0) == RAP_Q_TIMEOUT);
    /* close: queued items drain, then closed; pushes refused */
    CHECK(rap_queue_push(q, &v[4]) == RAP_Q_OK);
    CHECK(rap_queue_push(q, &v[0]) == RAP_Q_OK);
    rap_queue_close(q);
    rap_queue_close(q);
    CHECK(rap_queue_closed(q));
    CHECK(rap_queue_push(q, &v[1]) == RAP_Q_CLOSED);
    CHECK(rap_queue_try_push(q, &v[1]) == RAP_Q_CLOSED);
    CHECK(rap_queue_pop(q, &it) == RAP_Q_OK && it == &v[4]);
    CHECK(rap_queue_pop_timed(q, &it, 1) == RAP_Q_OK && it == &v[0]);
    CHECK(rap_queue_pop(q, &it) == RAP_Q_CLOSED && it == NULL);
    CHECK(rap_queue_try_pop(q, &it) == RAP_Q_CLOSED);
    CHECK(rap_queue_pop_timed(q, &it, 1) == RAP_Q_CLOSED);
    rap_queue_free(q);

    /* stop: everything returns stopped at once, items stay */
    REQUIRE_OK(rap_queue_create(2, &q));
    CHECK(rap_queue_push(q, &v[0]) == RAP_Q_OK);
    rap_queue_stop(q);
    CHECK(rap_queue_stopped(q));
    CHECK(rap_queue_pop(q, &it) == RAP_Q_STOPPED && it == NULL);
    CHECK(rap_queue_push(q, &v[1]) == RAP_Q_STOPPED);
    CHECK(rap_queue_size(q) == 1);
    rap_queue_free(q);
    rap_queue_free(NULL);
    CHECK(strcmp(rap_queue_result_name(RAP_Q_CLOSED), "closed") == 0);
}

#define QP 4          /* producers */
#define QC 3          /* consumers */
#define QN 20000      /* items per producer */

typedef struct {
    rap_queue *q;
    int id;
    atomic_int *seen;  /* (QP * QN) times each item was popped */
    int64_t got;
    int bad_order;
} qworker;

static void *q_producer(void *arg)
{
    qworker *w = arg;
    for (int i = 0; i < QN; i++) {
        uintptr_t x = ((uintptr_t)w->id << 32 | (uintptr_t)i) + 1;
        if (rap_queue_push(w->q, (void *)x) != RAP_Q_OK)
            break;
    }
    return NULL;
}

static void *q_consumer(void *arg)
{
    qworker *w = arg;
    int64_t last[QP];
    for (int p = 0; p < QP; p++)
        last[p] = -1;
    void *it;
    while (rap_queue_pop(w->q, &it) == RAP_Q_OK) {
        uintptr_t x = (uintptr_t)it - 1;
        int p = (int)(x >> 32), i = (int)(x & 0xffffffffu);
        if (p < 0 || p >= QP || i < 0 || i >= QN) {
            w->bad_order++;
            continue;
        }
        if (i <= last[p])
            w->bad_order++; /* FIFO: one producer's items come in its order */
        last[p] = i;
        atomic_fetch_add(&w->seen[p * QN + i], 1);
        w->got++;
    }
    return NULL;
}

RAP_TEST(rt_queue_mpmc)
{
    rap_queue *q;
    REQUIRE_OK(rap_queue_create(5, &q));
    atomic_int *seen = calloc(QP * QN, sizeof *seen);
    REQUIRE(seen);
    qworker pw[QP], cw[QC];
    pthread_t pt[QP], ct[QC];
    for (int i = 0; i < QC; i++) {
        cw[i] = (qworker){q, i, seen, 0, 0};
        REQUIRE(pthread_create(&ct[i], NULL, q_consumer, &cw[i]) == 0);
    }
    for (int i = 0; i < QP; i++) {
        pw[i] = (qworker){q, i, seen, 0, 0};
        REQUIRE(pthread_create(&pt[i], NULL, q_producer, &pw[i]) == 0);
    }
    for (int i = 0; i < QP; i++)
        pthread_join(pt[i], NULL);
    rap_queue_close(q); /* consumers drain what is left, then see closed */
    int64_t total = 0;
    int bad = 0;
    for (int i = 0; i < QC; i++) {
        pthread_join(ct[i], NULL);
        total += cw[i].got;
        bad += cw[i].bad_order;
    }
    CHECK_MSG(total == (int64_t)QP * QN, "popped %lld of %d", (long long)total, QP * QN);
    CHECK_MSG(bad == 0, "%d items out of order or corrupt", bad);
    int wrong = 0;
    for (int i = 0; i < QP * QN; i++)
        wrong += atomic_load(&seen[i]) != 1;
    CHECK_MSG(wrong == 0, "%d items not popped exactly once", wrong);
    CHECK(rap_queue_size(q) == 0);
    free(seen);
    rap_queue_free(q);
}

typedef struct {
    rap_queue *q;
    bool push;
    rap_queue_result r;
    atomic_int *started;
} blocker;

static void *q_block(void *arg)
{
    blocker *b = arg;
    atomic_fetch_add(b->started, 1);
    static int dummy;
    void *it;
    b->r = b->push ? rap_queue_push(b->q, &dummy) : rap_queue_pop(b->q, &it);
    return NULL;
}

/* Threads blocked in pop (empty) or push (full) wake on close and stop. */
static void blocked_wake(rap_test_ctx *t, bool push, bool stop)
{
    rap_queue *q;
    REQUIRE_OK(rap_queue_create(1, &q));
    static int one;
    if (push)
        REQUIRE(rap_queue_push(q, &one) == RAP_Q_OK); /* full */
    atomic_int started;
    atomic_init(&started, 0);
    blocker b[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (blocker){q, push, RAP_Q_OK, &started};
        REQUIRE(pthread_create(&th[i], NULL, q_block, &b[i]) == 0);
    }
    while (atomic_load(&started) < 4)
        ms_sleep(1);
    ms_sleep(30); /* let them reach the wait */
    CHECK(rap_queue_size(q) == (push ? 1 : 0));
    if (stop)
        rap_queue_stop(q);
    else
        rap_queue_close(q);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        rap_queue_result want = stop ? RAP_Q_STOPPED : RAP_Q_CLOSED;
        CHECK_MSG(b[i].r == want, "%s blocked in %s woke with %s, expected %s", "thread",
                  push ? "push" : "pop", rap_queue_result_name(b[i].r), rap_queue_result_name(want));
    }
    rap_queue_free(q);
}

RAP_TEST(rt_queue_close_while_blocked)
{
    blocked_wake(t, false, false);
    blocked_wake(t, true, false);
    blocked_wake(t, false, true);
    blocked_wake(t, true, true);
}

/* ================================================================ data */

/* A good Criteo line for (seed, i): int_0 = i, about 10 % nulls. */
static int good_line(char *out, uint64_t seed, int64_t i)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)i;
    int n = sprintf(out, "%d\t%lld", (int)(rap_splitmix64(&s) & 1), (long long)i);
    for (int j = 1; j < ND; j++) {
        uint64_t z = rap_splitmix64(&s);
        if (z % 10 == 0)
            n += sprintf(out + n, "\t");
        else
            n += sprintf(out + n, "\t%d", (int)(z % 1000) - 10);
    }
    for (int j = 0; j < NS; j++) {
        uint64_t z = rap_splitmix64(&s);
        if (z % 10 == 0)
            n += sprintf(out + n, "\t");
        else
            n += sprintf(out + n, "\t%08x", (unsigned)(z >> 20));
    }
    out[n++] = '\n';
    out[n] = 0;
    return n;
}

/* Writes `lines` lines; line i is malformed (label "x") when bad_every > 0
 * and i % bad_every == bad_every - 1. Returns the number of good lines. */
static int64_t write_data(const char *path, int64_t lines, int bad_every, uint64_t seed)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    char buf[1024];
    int64_t good = 0;
    for (int64_t i = 0; i < lines; i++) {
        int n = good_line(buf, seed, i);
        if (bad_every > 0 && i % bad_every == bad_every - 1)
            buf[0] = 'x';
        else
            good++;
        fwrite(buf, 1, (size_t)n, f);
    }
    fclose(f);
    return good;
}

/* The mps server's feed (mps_server.c): one pass, the reader's batches as
 * they come, the input opened by create. */
static rap_rowfeed_config reader_feed_cfg(const char *input, int threads, int64_t B, int P)
{
    rap_rowfeed_config c = {0};
    c.reader = rap_reader_defaults();
    c.reader.input = input;
    c.reader.threads = threads;
    c.chunk_bytes = 4096; /* many chunks in a small input */
    c.batch_rows = B;
    c.n_batches = P;
    c.pinned = true;
    c.passes = 1;
    c.reader_batches = true;
    c.open_at_create = true;
    return c;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

/* Hash of the rows a batch holds (not of unused capacity). */
static uint64_t batch_hash(const rap_batch *b)
{
    int64_t B = b->cap, n = b->rows;
    uint64_t h = fnv(0xcbf29ce484222325ULL, &n, sizeof n);
    h = fnv(h, b->label, sizeof(float) * (size_t)n);
    for (int j = 0; j < ND; j++) {
        h = fnv(h, b->dense + j * B, sizeof(float) * (size_t)n);
        h = fnv(h, b->dense_valid + j * B, (size_t)n);
    }
    for (int j = 0; j < NS; j++) {
        const int64_t *off = b->sparse_off + j * (B + 1);
        h = fnv(h, off, sizeof(int64_t) * (size_t)(n + 1));
        h = fnv(h, b->sparse_ids + j * B, sizeof(int64_t) * (size_t)(off[n] - off[0]));
        h = fnv(h, b->sparse_valid + j * B, (size_t)n);
    }
    return h;
}

typedef struct {
    int64_t rows, batches, bad_first_row, bad_seq, bad_value;
    int64_t markers;       /* end-of-pass markers (0 rows), not counted in batches */
    int64_t next_good;     /* int_0 expected next, -1: not checked */
    int bad_every;
    uint64_t hashes[1024]; /* per batch */
} drain_t;

/* Expected int_0 of the good line after line v (skipping malformed ones). */
static int64_t next_good_after(int64_t v, int bad_every)
{
    v++;
    if (bad_every > 0 && v % bad_every == bad_every - 1)
        v++;
    return v;
}

/* Checks one batch of a drain: seq, first_row and int_0 values in order. */
static void check_batch(drain_t *d, const rap_row_batch *fb)
{
    const rap_batch *b = &fb->batch;
    if (fb->seq != d->batches)
        d->bad_seq++;
    if (b->first_row != d->rows)
        d->bad_first_row++;
    for (int64_t r = 0; r < b->rows; r++) {
        if (!b->dense_valid[r] || (int64_t)b->dense[r] != d->next_good)
            d->bad_value++;
        d->next_good = next_good_after(d->next_good, d->bad_every);
    }
    if (d->batches < 1024)
        d->hashes[d->batches] = batch_hash(b);
    d->rows += b->rows;
    d->batches++;
}

static void drain_init(drain_t *d, int bad_every)
{
    memset(d, 0, sizeof *d);
    d->bad_every = bad_every;
    d->next_good = bad_every == 1 ? -1 : (bad_every > 0 && 0 == bad_every - 1 ? 1 : 0);
}

/* Takes every batch, holding up to `hold` before giving the oldest back
 * (as the runtime holds a batch until its copy is done). */
static rap_status drain(rap_test_ctx *t, rap_rowfeed *f, drain_t *d, int hold)
{
    rap_row_batch *held[8];
    int nh = 0;
    rap_status st;
    for (;;) {
        rap_row_batch *fb;
        st = rap_rowfeed_next(f, &fb, NULL);
        if (st != RAP_OK || !fb)
            break;
        if (fb->batch.rows == 0) { /* the end of the pass: no rows, nothing to check */
            CHECK(fb->end_of_pass);
            d->markers++;
        } else {
            check_batch(d, fb);
        }
        held[nh++] = fb;
        if (nh > hold) {
            CHECK_OK(rap_rowfeed_release(f, held[0]));
            memmove(held, held + 1, sizeof held[0] * (size_t)--nh);
        }
    }
    for (int i = 0; i < nh; i++)
        CHECK_OK(rap_rowfeed_release(f, held[i]));
    return st;
}

/* ================================================================ row feed, reader batches */

RAP_TEST(rt_rowfeed_reader_order)
{
    const char *path = tmp_path("order.tsv");
    int64_t n = write_data(path, 10000, 0, 1);
    rap_rowfeed_config c = reader_feed_cfg(path, 2, 128, 3);
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    drain_t *d = malloc(sizeof *d);
    drain_init(d, 0);
    CHECK_OK(drain(t, f, d, 2));
    CHECK(d->rows == n);
    CHECK(d->batches == (n + 127) / 128);
    CHECK_MSG(d->bad_seq == 0 && d->bad_first_row == 0 && d->bad_value == 0,
              "seq %lld, first_row %lld, values %lld wrong", (long long)d->bad_seq,
              (long long)d->bad_first_row, (long long)d->bad_value);
    /* the end stays the end */
    rap_row_batch *fb = (rap_row_batch *)1;
    CHECK_OK(rap_rowfeed_next(f, &fb, NULL));
    CHECK(fb == NULL);
    rap_rowfeed_stats st;
    rap_rowfeed_get_stats(f, &st);
    CHECK(st.ended && !st.stopped && st.error == RAP_OK);
    CHECK(st.rows_out == n && st.rows_filled == n && st.reader.rows_used == n);
    CHECK(st.batches_out == d->batches + d->markers && d->markers == 1); /* the end of the pass */
    CHECK(st.reader.rows_rejected == 0);
    rap_rowfeed_free(f, NULL);
    /* without a usable GPU, pinned batches fall back to plain memory */
    if (!rap_gpu_available(NULL, 0)) {
        c.n_batches = 1;
        REQUIRE_OK(rap_rowfeed_create(&c, &f));
        REQUIRE_OK(rap_rowfeed_next(f, &fb, NULL));
        CHECK(fb && !fb->batch.pinned);
        rap_rowfeed_free(f, NULL);
    }
    free(d);
}

RAP_TEST(rt_rowfeed_reader_release_checks)
{
    const char *path = tmp_path("rel.tsv");
    write_data(path, 1000, 0, 2);
    rap_rowfeed_config c = reader_feed_cfg(path, 1, 100, 2);
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    rap_row_batch *a, *b;
    REQUIRE_OK(rap_rowfeed_next(f, &a, NULL));
    REQUIRE(a);
    REQUIRE_OK(rap_rowfeed_next(f, &b, NULL));
    REQUIRE(b && b != a && b->seq == 1 && b->batch.first_row == 100);
    CHECK_OK(rap_rowfeed_release(f, b)); /* any order */
    CHECK(rap_rowfeed_release(f, b) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "not handed out") != NULL);
    rap_row_batch other = *a;
    CHECK(rap_rowfeed_release(f, &other) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "not a batch of this feed") != NULL);
    CHECK(rap_rowfeed_release(f, NULL) == RAP_ERR_ARG);
    CHECK_OK(rap_rowfeed_release(f, a));
    rap_rowfeed_free(f, NULL);

    /* bad config, missing input: nothing left open */
    c.batch_rows = 0;
    CHECK(rap_rowfeed_create(&c, &f) == RAP_ERR_ARG && f == NULL);
    c = reader_feed_cfg(tmp_path("missing.tsv"), 1, 100, 2);
    rap_status s = rap_rowfeed_create(&c, &f);
    CHECK(s == RAP_ERR_IO && f == NULL);
    CHECK_MSG(strstr(rap_last_error(), "missing.tsv") != NULL, "message: %s", rap_last_error());
    rap_rowfeed_free(NULL, NULL);
}

RAP_TEST(rt_rowfeed_reader_accounting_malformed)
{
    const char *path = tmp_path("bad.tsv");
    int64_t lines = 5000;
    int64_t good = write_data(path, lines, 7, 3);
    rap_rowfeed_config c = reader_feed_cfg(path, 3, 100, 3);
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    drain_t *d = malloc(sizeof *d);
    drain_init(d, 7);
    CHECK_OK(drain(t, f, d, 1));
    CHECK(d->rows == good);
    CHECK_MSG(d->bad_seq == 0 && d->bad_first_row == 0 && d->bad_value == 0,
              "seq %lld, first_row %lld, values %lld wrong", (long long)d->bad_seq,
              (long long)d->bad_first_row, (long long)d->bad_value);
    rap_rowfeed_stats st;
    rap_rowfeed_get_stats(f, &st);
    CHECK(st.rows_out == good && st.reader.rows_used == good);
    CHECK(st.reader.rows_rejected == lines - good);
    CHECK(st.reader.rejected[RAP_REJ_LABEL] == lines - good);
    CHECK(st.reader.rows_read == lines);
    rap_rowfeed_free(f, NULL);
    free(d);
}

RAP_TEST(rt_rowfeed_reader_error_propagation)
{
    /* line 1001 (1-based) is malformed: 1000 good rows, then the error */
    const char *path = tmp_path("fail.tsv");
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp);
    char buf[1024];
    for (int64_t i = 0; i < 3000; i++) {
        int n = good_line(buf, 4, i);
        if (i == 1000)
            buf[0] = '7';
        fwrite(buf, 1, (size_t)n, fp);
    }
    fclose(fp);
    rap_rowfeed_config c = reader_feed_cfg(path, 3, 128, 3);
    c.reader.bad_rows = RAP_BAD_FAIL;
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    drain_t *d = malloc(sizeof *d);
    drain_init(d, 0);
    rap_status s = drain(t, f, d, 2);
    CHECK_MSG(s == RAP_ERR_DATA, "got %s", rap_status_name(s));
    CHECK_MSG(strstr(rap_last_error(), "fail.tsv:1001:") != NULL, "message: %s", rap_last_error());
    CHECK(d->rows == 1000);
    CHECK(d->bad_seq == 0 && d->bad_first_row == 0 && d->bad_value == 0);
    /* the error stays */
    rap_row_batch *fb;
    CHECK(rap_rowfeed_next(f, &fb, NULL) == RAP_ERR_DATA && fb == NULL);
    CHECK(strstr(rap_last_error(), "fail.tsv:1001:") != NULL);
    rap_rowfeed_stats st;
    rap_rowfeed_get_stats(f, &st);
    CHECK(st.ended && st.error == RAP_ERR_DATA);
    CHECK(st.rows_out == 1000 && st.reader.rows_used == 1000);
    rap_rowfeed_free(f, NULL);
    free(d);
}

RAP_TEST(rt_rowfeed_reader_stop_midway)
{
    const char *path = tmp_path("stop.tsv");
    int64_t n = write_data(path, 60000, 0, 5);
    rap_rowfeed_config c = reader_feed_cfg(path, 2, 128, 3);
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    drain_t *d = malloc(sizeof *d);
    drain_init(d, 0);
    for (int i = 0; i < 3; i++) {
        rap_row_batch *fb;
        REQUIRE_OK(rap_rowfeed_next(f, &fb, NULL));
        REQUIRE(fb);
        check_batch(d, fb);
        CHECK_OK(rap_rowfeed_release(f, fb));
    }
    rap_rowfeed_stop(f); /* what a SIGINT handler does */
    CHECK_OK(drain(t, f, d, 1));
    CHECK(d->bad_seq == 0 && d->bad_first_row == 0 && d->bad_value == 0);
    CHECK_MSG(d->rows < n, "stop had no effect: %lld of %lld rows", (long long)d->rows, (long long)n);
    rap_rowfeed_stats st;
    rap_rowfeed_get_stats(f, &st);
    CHECK(st.ended && st.stopped && st.error == RAP_OK);
    CHECK_MSG(st.rows_out == d->rows && st.reader.rows_used == d->rows,
              "rows out %lld, drained %lld, reader used %lld", (long long)st.rows_out,
              (long long)d->rows, (long long)st.reader.rows_used);
    rap_rowfeed_free(f, NULL);
    free(d);
}

static rap_rowfeed *volatile g_sig_feed;
static atomic_int g_watchdog_fired;

static void on_alarm(int sig)
{
    (void)sig;
    rap_rowfeed_stop(g_sig_feed); /* async-signal-safe */
}

static void *watchdog(void *arg)
{
    atomic_int *done = arg;
    for (int i = 0; i < 1000 && !atomic_load(done); i++)
        ms_sleep(10);
    if (!atomic_load(done)) {
        atomic_store(&g_watchdog_fired, 1);
        rap_rowfeed_stop(g_sig_feed);
    }
    return NULL;
}

/* Ctrl-C while following a quiet input: without the stop the feed would
 * wait for more rows forever; the handler's stop ends it cleanly. */
RAP_TEST(rt_rowfeed_reader_stop_from_signal)
{
    const char *path = tmp_path("follow.tsv");
    int64_t n = write_data(path, 1000, 0, 8);
    rap_rowfeed_config c = reader_feed_cfg(path, 2, 256, 3);
    c.reader.follow = true;
    c.reader.idle_timeout_s = 0; /* never ends by itself */
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&c, &f));
    g_sig_feed = f;
    atomic_store(&g_watchdog_fired, 0);
    atomic_int done;
    atomic_init(&done, 0);
    pthread_t wd;
    REQUIRE(pthread_create(&wd, NULL, watchdog, &done) == 0);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    struct itimerval it = {{0, 0}, {0, 300000}};
    setitimer(ITIMER_REAL, &it, NULL);
    drain_t *d = malloc(sizeof *d);
    drain_init(d, 0);
    CHECK_OK(drain(t, f, d, 1));
    atomic_store(&done, 1);
    pthread_join(wd, NULL);
    sigaction(SIGALRM, &old, NULL);
    CHECK(!atomic_load(&g_watchdog_fired));
    CHECK(d->rows == n && d->bad_value == 0 && d->bad_first_row == 0 && d->bad_seq == 0);
    rap_rowfeed_stats st;
    rap_rowfeed_get_stats(f, &st);
    CHECK(st.ended && st.stopped && st.rows_out == n && st.reader.rows_used == n);
    rap_rowfeed_free(f, NULL);
    g_sig_feed = NULL;
    free(d);
}

RAP_TEST(rt_rowfeed_reader_free_midway)
{
    /* freed while the thread waits for a free batch and the consumer holds
     * some: no hang, no leak (SAN build) */
    const char *path = tmp_path("abort.tsv");
    write_data(path, 20000, 0, 6);
    for (int hold = 0; hold <= 3; hold++) {
        rap_rowfeed_config c = reader_feed_cfg(path, 2, 64, 3);
        rap_rowfeed *f;
        REQUIRE_OK(rap_rowfeed_create(&c, &f));
        for (int i = 0; i < hold; i++) {
            rap_row_batch *fb;
            REQUIRE_OK(rap_rowfeed_next(f, &fb, NULL));
            REQUIRE(fb && fb->seq == i);
        }
        if (hold == 3)
            ms_sleep(20);
        double t0 = rap_now();
        rap_rowfeed_free(f, NULL);
        CHECK_MSG(rap_now() - t0 < 5, "free took %.2f s", rap_now() - t0);
    }
}

RAP_TEST(rt_rowfeed_reader_threads_invariance)
{
    const char *path = tmp_path("inv.tsv");
    int64_t good = write_data(path, 8000, 13, 7);
    drain_t *d[2];
    int threads[2] = {1, 3};
    for (int k = 0; k < 2; k++) {
        rap_rowfeed_config c = reader_feed_cfg(path, threads[k], 100, 3);
        c.chunk_bytes = k == 0 ? 4096 : 10000; /* different cuts too */
        rap_rowfeed *f;
        REQUIRE_OK(rap_rowfeed_create(&c, &f));
        d[k] = malloc(sizeof *d[k]);
        drain_init(d[k], 13);
        CHECK_OK(drain(t, f, d[k], 2));
        rap_rowfeed_free(f, NULL);
        CHECK(d[k]->rows == good);
        CHECK(d[k]->bad_value == 0);
    }
    CHECK(d[0]->batches == d[1]->batches);
    int diff = 0;
    for (int64_t i = 0; i < d[0]->batches && i < 1024; i++)
        diff += d[0]->hashes[i] != d[1]->hashes[i];
    CHECK_MSG(diff == 0, "%d batches differ between 1 and 3 reader threads", diff);
    free(d[0]);
    free(d[1]);
}

/* ================================================================ schedule */


/* A small plan whose bucketize kernel computes its offsets (the input can
 * be null), with a consumer after it. */
static const char *const COMPUTED_PLAN =
    "df[\"b0\"] = functional.bucketize(df[\"int_0\"], [0.5, 1.0, 100.0])\n"
    "df[\"b1\"] = functional.bucketize(df[\"int_1\"], [2.0])\n"
    "df[\"h0\"] = functional.sigrid_hash(df[\"b0\"], 0, 100)\n"
    "df[\"int_2\"] = df[\"int_2\"].fill_null(0)\n";

static rap_status load_plan(int i, rap_plan **p, rap_fusion *f)
{
    char name[32], path[256];
    if (i < 0) {
        RAP_TRY(rap_plan_parse(COMPUTED_PLAN, "computed.plan", rap_schema_criteo(), p));
    } else {
        snprintf(name, sizeof name, "plan%d.plan", i);
        if (!rap_test_plan_path(name, path, sizeof path))
            return rap_fail(RAP_ERR_IO, "plans/%s not found (run from the repository root)", name);
        RAP_TRY(rap_plan_load(path, rap_schema_criteo(), p));
    }
    rap_status s = rap_fuse_levels(*p, f);
    if (s != RAP_OK)
        rap_plan_free(*p);
    return s;
}

static char *write_to_string(const rap_schedule *s)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return NULL;
    rap_status st = rap_schedule_write(s, f);
    fclose(f);
    if (st != RAP_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static bool same_schedule(const rap_schedule *a, const rap_schedule *b)
{
    if (strcmp(a->plan_name, b->plan_name) || a->plan_hash != b->plan_hash ||
        a->n_kernels != b->n_kernels || a->fusion_hash != b->fusion_hash || a->n_slices != b->n_slices)
        return false;
    for (int w = 0; w <= RAP_WIN_COUNT; w++)
        if (a->win_first[w] != b->win_first[w])
            return false;
    for (int i = 0; i < a->n_slices; i++) {
        const rap_slice *x = &a->slices[i], *y = &b->slices[i];
        if (x->kernel != y->kernel || x->d0 != y->d0 || x->d1 != y->d1 || x->r0 != y->r0 ||
            x->r1 != y->r1 || x->predicted_ms != y->predicted_ms)
            return false;
    }
    return true;
}

/* A valid schedule with splits: every kernel split in two by descriptors
 * (when it has 2+) and its first desc half split by rows at 1000, spread
 * over the windows by level. */
static rap_status split_schedule(const rap_plan *p, const rap_fusion *f, rap_schedule **out)
{
    RAP_TRY(rap_schedule_create(p, f, "<split>", out));
    rap_schedule *s = *out;
    int maxlv = 1;
    for (int k = 0; k < f->n; k++)
        if (f->kernels[k].level > maxlv)
            maxlv = f->kernels[k].level;
    for (int k = 0; k < f->n; k++) {
        int n = f->kernels[k].n, h = n > 1 ? n / 2 : n;
        rap_window w = (rap_window)((f->kernels[k].level - 1) * (RAP_WIN_COUNT - 1) / maxlv);
        RAP_TRY(rap_schedule_add(s, w, k, 0, h, 0, 1000, 0.25 * k));
        RAP_TRY(rap_schedule_add(s, w, k, 0, h, 1000, RAP_ROWS_END, -1));
        if (h < n)
            RAP_TRY(rap_schedule_add(s, w, k, h, n, 0, RAP_ROWS_END, 1.0 / 3));
    }
    return RAP_OK;
}

RAP_TEST(rt_schedule_roundtrip)
{
    rap_plan *p;
    rap_fusion f;
    REQUIRE_OK(load_plan(2, &p, &f));
    for (int which = 0; which < 2; which++) {
        rap_schedule *s;
        if (which == 0)
            REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
        else
            REQUIRE_OK(split_schedule(p, &f, &s));
        CHECK_OK(rap_schedule_validate(s, p, &f, 4096));
        CHECK(strcmp(s->plan_name, "plan2.plan") == 0);
        const char *path = tmp_path("sched.txt");
        REQUIRE_OK(rap_schedule_save(s, path));
        rap_schedule *r;
        REQUIRE_OK(rap_schedule_load(path, &r));
        CHECK(same_schedule(s, r));
        CHECK(strcmp(r->source, path) == 0);
        CHECK(r->n_slices == 0 || r->slices[0].line == 6);
        CHECK_OK(rap_schedule_validate(r, p, &f, 4096));
        char *a = write_to_string(s), *b = write_to_string(r);
        REQUIRE(a && b);
        CHECK(strcmp(a, b) == 0);
        CHECK(strncmp(a, "rap-schedule 1\n", 15) == 0);
        free(a);
        free(b);
        rap_schedule_free(s);
        rap_schedule_free(r);
    }
    CHECK(rap_schedule_load(tmp_path("nope.txt"), &(rap_schedule *){NULL}) == RAP_ERR_IO);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(rt_schedule_parse_errors)
{
    static const char *const H = "rap-schedule 1\nplan p.plan 00000000000000ab\nfusion 3 0x12\n";
    static const struct {
        const char *body; /* after H, unless it starts with '!' (whole text) */
        const char *want;
    } cases[] = {
        {"!", ":1: unexpected end of file: expected 'rap-schedule 1'"},
        {"!# only a comment\n", ":2: unexpected end of file: expected 'rap-schedule 1'"},
        {"!rap-schedule\n", ":1: expected 'rap-schedule 1' as the first line"},
        {"!plan x 1\n", ":1: expected 'rap-schedule 1' as the first line"},
        {"!rap-schedule 2\n", ":1: schedule version '2' is not supported (this rap reads version 1)"},
        {"!rap-schedule 1\n", ":2: unexpected end of file: expected a 'plan NAME HASH' line"},
        {"!rap-schedule 1\nplan p 1\n", ":3: unexpected end of file: expected a 'fusion N_KERNELS HASH'"},
        {"!rap-schedule 1\nplan p\n", ":2: expected 'plan NAME HASH'"},
        {"!rap-schedule 1\nplan p 12345678901234567\n", ":2: expected 'plan NAME HASH'"},
        {"!rap-schedule 1\nplan p zz\n", ":2: expected 'plan NAME HASH'"},
        {"!rap-schedule 1\nplan p 1\nplan q 2\n", ":3: a second 'plan' line"},
        {"!rap-schedule 1\nplan p 1\nfusion x 1\n", ":3: expected 'fusion N_KERNELS HASH'"},
        {"!rap-schedule 1\nplan p 1\nfusion 1 1\nfusion 1 1\n", ":4: a second 'fusion' line"},
        {"!rap-schedule 1\nwindow emb_forward\n", ":2: expected the 'plan' and 'fusion' lines before"},
        {"slice kernel=0 descs=0:1 rows=0:end\n", ":4: expected a 'window NAME' line before the first slice"},
        {"window emb\n", ":4: expected 'window NAME' with NAME one of emb_forward"},
        {"window\n", ":4: expected 'window NAME'"},
        {"window mlp_forward\nwindow emb_forward\n", ":5: window emb_forward after mlp_forward: windows must"},
        {"window exposed\nwindow exposed\n", ":5: window exposed after exposed"},
        {"bogus 1\n", ":4: unknown line 'bogus'"},
        {"window exposed\nslice kernel 0\n", ":5: expected key=value in a slice, got 'kernel'"},
        {"window exposed\nslice kernel=a descs=0:1 rows=0:end\n", ":5: expected kernel=K"},
        {"window exposed\nslice kernel=-1 descs=0:1 rows=0:end\n", ":5: expected kernel=K"},
        {"window exposed\nslice kernel=0 kernel=1\n", ":5: kernel= given twice"},
        {"window exposed\nslice kernel=0 descs=1:1 rows=0:end\n", ":5: expected descs=D0:D1 with 0 <= D0 < D1"},
        {"window exposed\nslice kernel=0 descs=0:end rows=0:end\n", ":5: expected descs=D0:D1"},
        {"window exposed\nslice kernel=0 descs=3 rows=0:end\n", ":5: expected descs=D0:D1"},
        {"window exposed\nslice kernel=0 descs=0:1 descs=0:1\n", ":5: descs= given twice"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=5:5\n", ":5: expected rows=R0:R1 with 0 <= R0 < R1"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=-1:end\n", ":5: expected rows=R0:R1"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:1x\n", ":5: expected rows=R0:R1"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:1 rows=0:1\n", ":5: rows= given twice"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:end predicted_ms=-1\n", ":5: expected predicted_ms=MS"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:end predicted_ms=nan\n", ":5: expected predicted_ms=MS"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:end predicted_ms=1 predicted_ms=2\n", ":5: predicted_ms= given twice"},
        {"window exposed\nslice kernel=0 descs=0:1 rows=0:end speed=3\n", ":5: unknown slice key 'speed'"},
        {"window exposed\nslice descs=0:1 rows=0:end\n", ":5: expected a slice with kernel=, descs= and rows= (missing kernel=)"},
        {"window exposed\nslice kernel=0 rows=0:end\n", "rows= (missing descs=)"},
        {"window exposed\nslice kernel=0 descs=0:1\n", "rows= (missing rows=)"},
        {"window exposed\nslice a b c d e f g h i j k l m n o p q\n", ":5: more than 16 words on a line"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    char text[2048];
    for (int i = 0; i < n; i++) {
        if (cases[i].body[0] == '!')
            snprintf(text, sizeof text, "%s", cases[i].body + 1);
        else
            snprintf(text, sizeof text, "%s%s", H, cases[i].body);
        rap_schedule *s = (rap_schedule *)1;
        rap_status st = rap_schedule_parse(text, "t.sched", &s);
        CHECK_MSG(st == RAP_ERR_PLAN && s == NULL, "case %d: status %s", i, rap_status_name(st));
        CHECK_MSG(strncmp(rap_last_error(), "t.sched:", 8) == 0 &&
                      strstr(rap_last_error(), cases[i].want) != NULL,
                  "case %d: message '%s', expected '%s'", i, rap_last_error(), cases[i].want);
    }
    /* a long line */
    char *big = malloc(10000);
    REQUIRE(big);
    snprintf(big, 10000, "%s# ", H);
    memset(big + strlen(big), 'a', 6000);
    big[strlen(H) + 6002] = 0;
    rap_schedule *s;
    CHECK(rap_schedule_parse(big, "t.sched", &s) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "t.sched:4: line longer than") != NULL);
    free(big);
    /* what is accepted: comments, blank lines, tabs, CRLF, windows skipped */
    const char *ok = "# a schedule\r\nrap-schedule 1 # v1\r\n\r\nplan my.plan 0xABCDEF\n"
                     "fusion 2 ff\nwindow mlp_forward\n\tslice  rows=10:end descs=0:2 kernel=1\n"
                     "window exposed\nslice kernel=0 descs=0:1 rows=0:10 predicted_ms=0.5\n";
    REQUIRE_OK(rap_schedule_parse(ok, "ok.sched", &s));
    CHECK(s->plan_hash == 0xabcdef && s->fusion_hash == 0xff && s->n_kernels == 2);
    CHECK(strcmp(s->plan_name, "my.plan") == 0);
    int nw;
    const rap_slice *sl = rap_schedule_window(s, RAP_WIN_MLP_FORWARD, &nw);
    CHECK(nw == 1 && sl[0].kernel == 1 && sl[0].d0 == 0 && sl[0].d1 == 2 && sl[0].r0 == 10 &&
          sl[0].r1 == RAP_ROWS_END && sl[0].predicted_ms < 0 && sl[0].line == 7);
    sl = rap_schedule_window(s, RAP_WIN_EXPOSED, &nw);
    CHECK(nw == 1 && sl[0].r1 == 10 && sl[0].predicted_ms == 0.5 && sl[0].line == 9);
    rap_schedule_window(s, RAP_WIN_EMB_FORWARD, &nw);
    CHECK(nw == 0);
    rap_schedule_free(s);
    CHECK(rap_window_parse("grad_comm") == RAP_WIN_GRAD_COMM && rap_window_parse("x") == -1);
    CHECK(strcmp(rap_window_name(RAP_WIN_EMB_BACKWARD), "emb_backward") == 0);
}

/* Validation of a schedule built from text against plan 0. */
static rap_status validate_text(const rap_plan *p, const rap_fusion *f, const char *slices,
                                int64_t max_rows)
{
    char *text = malloc(1 << 16);
    if (!text)
        return RAP_ERR_NOMEM;
    snprintf(text, 1 << 16, "rap-schedule 1\nplan x %016llx\nfusion %d %016llx\n%s",
             (unsigned long long)rap_plan_hash(p), f->n, (unsigned long long)rap_fusion_hash(p, f),
             slices);
    rap_schedule *s;
    rap_status st = rap_schedule_parse(text, "v.sched", &s);
    free(text);
    if (st != RAP_OK)
        return st;
    st = rap_schedule_validate(s, p, f, max_rows);
    rap_schedule_free(s);
    return st;
}

/* Appends "slice" lines running every kernel whole except kernel skip
 * (-1: none), in order, to buf. */
static void all_but(char *buf, size_t n, const rap_fusion *f, int skip)
{
    size_t at = strlen(buf);
    for (int k = 0; k < f->n; k++)
        if (k != skip)
            at += (size_t)snprintf(buf + at, n - at, "slice kernel=%d descs=0:%d rows=0:end\n", k,
                                   f->kernels[k].n);
}

RAP_TEST(rt_schedule_validate_errors)
{
    rap_plan *p;
    rap_fusion f;
    REQUIRE_OK(load_plan(0, &p, &f));
    REQUIRE(f.n >= 3);
    /* find a kernel at level >= 2 (it has producers) and a computed one */
    int dep = -1;
    for (int k = 0; k < f.n; k++)
        if (dep < 0 && f.kernels[k].level >= 2)
            dep = k;
    REQUIRE(dep >= 0);
    char *buf = malloc(1 << 15);
    REQUIRE(buf);
    size_t N = 1 << 15;

    snprintf(buf, N, "window exposed\n");
    all_but(buf, N, &f, -1);
    CHECK_OK(validate_text(p, &f, buf, 4096));

    /* a kernel missing */
    snprintf(buf, N, "window exposed\n");
    all_but(buf, N, &f, f.n - 1);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "is never run: every descriptor must be covered once"),
              "%s", rap_last_error());

    /* one desc missing (kernel 0 runs descs 1..n only) */
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=1:%d rows=0:end\n", f.kernels[0].n);
    all_but(buf, N, &f, 0);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched: kernel 0 (") &&
                  strstr(rap_last_error(), "desc 0 (plan "),
              "%s", rap_last_error());

    /* duplicated: kernel 0 desc 0 twice */
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=0:1 rows=0:end\n");
    all_but(buf, N, &f, -1);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched:6: kernel 0") &&
                  strstr(rap_last_error(), "rows covered twice"),
              "%s", rap_last_error());

    /* overlapping row pieces */
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=0:%d rows=0:100\n"
                     "slice kernel=0 descs=0:%d rows=50:end\n",
             f.kernels[0].n, f.kernels[0].n);
    all_but(buf, N, &f, 0);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched:6: kernel 0") &&
                  strstr(rap_last_error(), "rows [50, end) are already run by v.sched:5"),
              "%s", rap_last_error());

    /* a gap in the rows */
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=0:%d rows=0:100\n"
                     "slice kernel=0 descs=0:%d rows=200:end\n",
             f.kernels[0].n, f.kernels[0].n);
    all_but(buf, N, &f, 0);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "rows [100, 200) are never run (a gap before v.sched:6)"),
              "%s", rap_last_error());

    /* rows not reaching max_rows; fine for smaller batches */
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=0:%d rows=0:4096\n", f.kernels[0].n);
    all_but(buf, N, &f, 0);
    CHECK_OK(validate_text(p, &f, buf, 4096));
    CHECK(validate_text(p, &f, buf, 8192) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "rows [4096, 8192) are never run (batches hold up to 8192"),
              "%s", rap_last_error());

    /* out of range */
    snprintf(buf, N, "window exposed\nslice kernel=%d descs=0:1 rows=0:end\n", f.n);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched:5: kernel") &&
                  strstr(rap_last_error(), "does not exist"),
              "%s", rap_last_error());
    snprintf(buf, N, "window exposed\nslice kernel=0 descs=0:%d rows=0:end\n", f.kernels[0].n + 1);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched:5: kernel 0: descriptors [0,"), "%s", rap_last_error());

    /* order: the dependent kernel in an earlier window than the rest */
    snprintf(buf, N, "window emb_forward\nslice kernel=%d descs=0:%d rows=0:end\nwindow exposed\n",
             dep, f.kernels[dep].n);
    all_but(buf, N, &f, dep);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "v.sched:5: kernel") &&
                  strstr(rap_last_error(), "runs before its input"),
              "%s", rap_last_error());
    /* order inside one window: the dependent kernel listed first */
    snprintf(buf, N, "window mlp_backward\nslice kernel=%d descs=0:%d rows=0:end\n", dep,
             f.kernels[dep].n);
    all_but(buf, N, &f, dep);
    CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "runs before its input") != NULL);
    /* a producer split by rows: the consumer must follow both pieces */
    {
        int in = p->nodes[f.kernels[dep].nodes[0]].input;
        int pk = -1;
        for (int k = 0; k < f.n && pk < 0; k++)
            for (int j = 0; j < f.kernels[k].n; j++)
                if (f.kernels[k].nodes[j] == in)
                    pk = k;
        REQUIRE(pk >= 0 && pk < dep);
        snprintf(buf, N, "window emb_forward\n");
        size_t at = strlen(buf);
        for (int k = 0; k < f.n; k++) {
            if (k == pk)
                at += (size_t)snprintf(buf + at, N - at, "slice kernel=%d descs=0:%d rows=0:10\n", k,
                                       f.kernels[k].n);
            else
                at += (size_t)snprintf(buf + at, N - at, "slice kernel=%d descs=0:%d rows=0:end\n", k,
                                       f.kernels[k].n);
        }
        snprintf(buf + at, N - at, "window exposed\nslice kernel=%d descs=0:%d rows=10:end\n", pk,
                 f.kernels[pk].n);
        CHECK(validate_text(p, &f, buf, 4096) == RAP_ERR_PLAN);
        CHECK_MSG(strstr(rap_last_error(), "runs before its input") &&
                      strstr(rap_last_error(), "is complete (v.sched:"),
                  "%s", rap_last_error());
    }

    /* wrong plan: plan 1 has other cardinalities */
    rap_plan *p1;
    rap_fusion f1;
    REQUIRE_OK(load_plan(1, &p1, &f1));
    CHECK(rap_plan_hash(p1) != rap_plan_hash(p));
    rap_schedule *s;
    REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
    CHECK_OK(rap_schedule_validate(s, p, &f, 4096));
    CHECK(rap_schedule_validate(s, p1, &f1, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "made for plan plan0.plan (hash") &&
                  strstr(rap_last_error(), "not for ") && strstr(rap_last_error(), "plan1.plan"),
              "%s", rap_last_error());
    /* wrong fusion: one kernel per op */
    rap_fusion fn;
    REQUIRE_OK(rap_fuse_none(p, &fn));
    CHECK(rap_schedule_validate(s, p, &fn, 4096) == RAP_ERR_PLAN);
    CHECK_MSG(strstr(rap_last_error(), "made for a fusion of"), "%s", rap_last_error());
    rap_schedule_free(s);
    rap_fusion_free(&fn);
    rap_fusion_free(&f1);
    rap_plan_free(p1);
    free(buf);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

/* A kernel whose offsets are computed (ngram in plan 2) split by rows:
 * its pieces may run in either order (the first of a batch makes the
 * offsets, docs/EXECUTOR.md); a gap between them is refused. */
RAP_TEST(rt_schedule_validate_computed)
{
    bool found = false;
    for (int pi = -1; pi < 4 && !found; pi++) {
        rap_plan *p;
        rap_fusion f;
        REQUIRE_OK(load_plan(pi, &p, &f));
        int comp = -1;
        for (int k = 0; k < f.n; k++)
            if (comp < 0 && p->nodes[f.kernels[k].nodes[0]].off == RAP_OFF_COMPUTED)
                comp = k;
        char *buf = malloc(1 << 16);
        size_t N = 1 << 16;
        static const char *const pieces[3] = {"rows=0:100", "rows=100:end", "rows=200:end"};
        static const int order[3][2] = {{0, 1}, {1, 0}, {0, 2}}; /* in order, reversed, a gap */
        for (int v = 0; v < 3 && comp >= 0 && buf; v++) {
            /* every kernel whole in order, comp in two row pieces in its place */
            snprintf(buf, N, "window emb_forward\n");
            size_t at = strlen(buf);
            for (int k = 0; k < f.n; k++) {
                int n = f.kernels[k].n;
                if (k != comp)
                    at += (size_t)snprintf(buf + at, N - at,
                                           "slice kernel=%d descs=0:%d rows=0:end\n", k, n);
                else
                    at += (size_t)snprintf(buf + at, N - at,
                                           "slice kernel=%d descs=0:%d %s\n"
                                           "slice kernel=%d descs=0:%d %s\n",
                                           k, n, pieces[order[v][0]], k, n, pieces[order[v][1]]);
            }
            rap_status st = validate_text(p, &f, buf, 4096);
            if (v < 2) {
                CHECK_MSG(st == RAP_OK, "plan %d, order %d: %s", pi, v, rap_last_error());
                found = true;
            } else {
                CHECK(st == RAP_ERR_PLAN);
                CHECK_MSG(strstr(rap_last_error(), "rows [100, 200) are never run"), "%s",
                          rap_last_error());
            }
        }
        free(buf);
        rap_fusion_free(&f);
        rap_plan_free(p);
    }
    CHECK_MSG(found, "no plan has a kernel with computed offsets (expected bucketize in computed.plan)");
}

/* Shares (per-rank schedules with moves, docs/SCHEDULE.md): a desc may
 * run in several shares of one split, each covered once; a reader needs
 * its input over its own share (or the whole batch), computed before it. */
RAP_TEST(rt_schedule_validate_shares)
{
    rap_plan *p;
    rap_fusion f;
    REQUIRE_OK(load_plan(0, &p, &f));
    int k0 = -1, k1 = -1; /* kernel k1 reads an output of kernel k0 (level fusion: k0 < k1) */
    for (int k = 0; k < f.n && k1 < 0; k++)
        for (int j = 0; j < f.kernels[k].n && k1 < 0; j++) {
            int in = p->nodes[f.kernels[k].nodes[j]].input;
            for (int q = 0; in >= 0 && q < k && k1 < 0; q++)
                for (int i = 0; i < f.kernels[q].n; i++)
                    if (f.kernels[q].nodes[i] == in)
                        k0 = q, k1 = k;
        }
    REQUIRE(k0 >= 0 && k1 > k0);
    char *buf = malloc(1 << 16);
    REQUIRE(buf);
    /* every kernel in share 0/2 in order, then in share 1/2, but: */
    const char *cases[4][2] = {
        {"as described", NULL},
        {"k1 over the whole batch at the end", "runs on shares of the batch only"},
        {"k1 1/2 before k0 1/2", "runs before its input"},
        {"k0 also over the whole batch", "shares and over the whole"},
    };
    for (int c = 0; c < 4; c++) {
        snprintf(buf, 1 << 16, "window emb_forward\n");
        size_t at = strlen(buf);
        for (int sh = 0; sh < 2; sh++) {
            if (sh == 1 && c == 2)
                at += (size_t)snprintf(buf + at, (1 << 16) - at,
                                       "slice kernel=%d descs=0:%d rows=0:end share=1/2\n", k1,
                                       f.kernels[k1].n);
            for (int k = 0; k < f.n; k++)
                if (!(k == k1 && (c == 1 || (c == 2 && sh == 1))))
                    at += (size_t)snprintf(buf + at, (1 << 16) - at,
                                           "slice kernel=%d descs=0:%d rows=0:end share=%d/2\n", k,
                                           f.kernels[k].n, sh);
        }
        if (c == 1 || c == 3)
            at += (size_t)snprintf(buf + at, (1 << 16) - at, "slice kernel=%d descs=0:%d rows=0:end\n",
                                   c == 1 ? k1 : k0, f.kernels[c == 1 ? k1 : k0].n);
        rap_status st = validate_text(p, &f, buf, 600);
        if (!cases[c][1])
            CHECK_MSG(st == RAP_OK, "%s: %s", cases[c][0], rap_last_error());
        else
            CHECK_MSG(st == RAP_ERR_PLAN && strstr(rap_last_error(), cases[c][1]), "%s: %s",
                      cases[c][0], rap_last_error());
    }
    free(buf);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(rt_schedule_plan_hash)
{
    const char *a = "df[\"int_0\"] = df[\"int_0\"].fill_null(0)\n"
                    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 100)\n"
                    "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n";
    const char *b = "# same plan, other text\n\ndf[\"int_0\"] = df[\"int_0\"].fill_null(0.0)\n"
                    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 100)  # hash\n"
                    "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n";
    const char *c = "df[\"int_0\"] = df[\"int_0\"].fill_null(0)\n"
                    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 101)\n"
                    "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n";
    const char *d = "df[\"int_0\"] = df[\"int_0\"].fill_null(1)\n"
                    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0, 100)\n"
                    "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n";
    rap_plan *pa, *pb, *pc, *pd, *pa2;
    REQUIRE_OK(rap_plan_parse(a, "a.plan", rap_schema_criteo(), &pa));
    REQUIRE_OK(rap_plan_parse(b, "b.plan", rap_schema_criteo(), &pb));
    REQUIRE_OK(rap_plan_parse(c, "c.plan", rap_schema_criteo(), &pc));
    REQUIRE_OK(rap_plan_parse(d, "d.plan", rap_schema_criteo(), &pd));
    REQUIRE_OK(rap_plan_parse(a, "a.plan", rap_schema_criteo(), &pa2));
    CHECK(rap_plan_hash(pa) == rap_plan_hash(pa2));
    CHECK(rap_plan_hash(pa) == rap_plan_hash(pb));
    CHECK(rap_plan_hash(pa) != rap_plan_hash(pc));
    CHECK(rap_plan_hash(pa) != rap_plan_hash(pd));
    rap_fusion fa, fb;
    REQUIRE_OK(rap_fuse_levels(pa, &fa));
    REQUIRE_OK(rap_fuse_none(pa, &fb));
    CHECK(rap_fusion_hash(pa, &fa) == rap_fusion_hash(pb, &fa));
    CHECK(fa.n == 2 && fb.n == 3);
    CHECK(rap_fusion_hash(pa, &fa) != rap_fusion_hash(pa, &fb));
    rap_fusion_free(&fa);
    rap_fusion_free(&fb);
    rap_plan_free(pa);
    rap_plan_free(pb);
    rap_plan_free(pc);
    rap_plan_free(pd);
    rap_plan_free(pa2);
}

RAP_TEST(rt_schedule_builtin_plans)
{
    for (int i = 0; i < 4; i++) {
        rap_plan *p;
        rap_fusion f;
        REQUIRE_OK(load_plan(i, &p, &f));
        rap_schedule *s;
        REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
        CHECK_MSG(rap_schedule_validate(s, p, &f, 8192) == RAP_OK, "plan %d: %s", i, rap_last_error());
        int n0, n3, nm;
        const rap_slice *a = rap_schedule_window(s, RAP_WIN_EMB_FORWARD, &n0);
        const rap_slice *b = rap_schedule_window(s, RAP_WIN_EMB_BACKWARD, &n3);
        rap_schedule_window(s, RAP_WIN_MLP_FORWARD, &nm);
        CHECK(n0 == f.n / 2 && n3 == f.n - n0 && nm == 0);
        CHECK(n0 == 0 || (a[0].kernel == 0 && a[0].d0 == 0 && a[0].d1 == f.kernels[0].n &&
                          a[0].r0 == 0 && a[0].r1 == RAP_ROWS_END));
        CHECK(n3 == 0 || b[n3 - 1].kernel == f.n - 1);
        rap_schedule_free(s);
        REQUIRE_OK(rap_schedule_all_in(p, &f, RAP_WIN_EXPOSED, &s));
        CHECK(s->n_slices == f.n && s->win_first[RAP_WIN_EXPOSED] == 0);
        CHECK_OK(rap_schedule_validate(s, p, &f, 8192));
        rap_schedule_free(s);
        REQUIRE_OK(split_schedule(p, &f, &s));
        CHECK_MSG(rap_schedule_validate(s, p, &f, 8192) == RAP_OK, "plan %d split: %s", i,
                  rap_last_error());
        rap_schedule_free(s);
        rap_fusion_free(&f);
        rap_plan_free(p);
    }
    CHECK(rap_schedule_all_in(NULL, NULL, RAP_WIN_COUNT, &(rap_schedule *){NULL}) == RAP_ERR_ARG);
}

/* Running a valid split schedule's slices in order gives the same columns
 * as running the whole plan (CPU executor): the validation rules suffice. */
RAP_TEST(rt_schedule_slices_reproduce_run)
{
    const char *path = tmp_path("exec.tsv");
    write_data(path, 3000, 0, 9);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = path;
    rc.threads = 1;
    rap_reader *rd;
    REQUIRE_OK(rap_reader_open(&rc, &rd));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 4096, false));
    REQUIRE_OK(rap_reader_next(rd, &b));
    REQUIRE(b.rows == 3000);
    for (int i = -1; i < 4; i += 1 + (i >= 0)) { /* the computed plan, plans 0 and 2 */
        rap_plan *p;
        rap_fusion f;
        REQUIRE_OK(load_plan(i, &p, &f));
        rap_schedule *s;
        REQUIRE_OK(split_schedule(p, &f, &s));
        REQUIRE_OK(rap_schedule_validate(s, p, &f, 4096));
        rap_prep_config pc = {.device = RAP_CPU, .max_rows = 4096, .threads = 2};
        rap_prep *whole, *sliced;
        REQUIRE_OK(rap_prep_create(p, &f, &pc, &whole));
        REQUIRE_OK(rap_prep_create(p, &f, &pc, &sliced));
        REQUIRE_OK(rap_prep_load(whole, &b));
        REQUIRE_OK(rap_prep_run(whole));
        REQUIRE_OK(rap_prep_load(sliced, &b));
        for (int w = 0; w < RAP_WIN_COUNT; w++) {
            int n;
            const rap_slice *sl = rap_schedule_window(s, (rap_window)w, &n);
            for (int q = 0; q < n; q++)
                REQUIRE_OK(rap_prep_run_kernel(sliced, sl[q].kernel, sl[q].d0, sl[q].d1, sl[q].r0,
                                               sl[q].r1, NULL));
        }
        int bad = 0;
        for (int c = 0; c < p->n_cols; c++) {
            rap_host_column x, y;
            REQUIRE_OK(rap_prep_fetch(whole, c, &x));
            REQUIRE_OK(rap_prep_fetch(sliced, c, &y));
            bool same = x.kind == y.kind && x.rows == y.rows && x.width == y.width &&
                        memcmp(x.valid, y.valid, (size_t)x.rows) == 0;
            if (same && x.kind != RAP_SPARSE)
                same = memcmp(x.val, y.val, sizeof(float) * (size_t)(x.rows * x.width)) == 0;
            if (same && x.kind == RAP_SPARSE)
                same = memcmp(x.off, y.off, sizeof(int64_t) * (size_t)(x.rows + 1)) == 0 &&
                       memcmp(x.ids, y.ids, sizeof(int64_t) * (size_t)x.off[x.rows]) == 0;
            if (!same && bad++ < 3)
                CHECK_MSG(false, "plan %d column %s differs when run by slices", i, p->cols[c].name);
            rap_host_column_free(&x);
            rap_host_column_free(&y);
        }
        rap_prep_free(whole);
        rap_prep_free(sliced);
        rap_schedule_free(s);
        rap_fusion_free(&f);
        rap_plan_free(p);
    }
    rap_batch_free(&b);
    rap_reader_close(rd);
}

/* ================================================================ trace */

/* A minimal JSON syntax checker (RFC 8259 grammar, no semantics). */
typedef struct {
    const char *p;
    int depth;
} jctx;

static void jws(jctx *j)
{
    while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')
        j->p++;
}

static bool jvalue(jctx *j);

static bool jstring(jctx *j)
{
    if (*j->p != '"')
        return false;
    j->p++;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20)
            return false;
        if (c == '\\') {
            j->p++;
            if (*j->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", j->p[i]) || !j->p[i])
                        return false;
                j->p += 4;
            } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p)) {
                return false;
            }
        }
        j->p++;
    }
    j->p++;
    return true;
}

static bool jnumber(jctx *j)
{
    const char *s = j->p;
    if (*j->p == '-')
        j->p++;
    if (*j->p == '0')
        j->p++;
    else if (*j->p >= '1' && *j->p <= '9')
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    else
        return false;
    if (*j->p == '.') {
        j->p++;
        if (!(*j->p >= '0' && *j->p <= '9'))
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        j->p++;
        if (*j->p == '+' || *j->p == '-')
            j->p++;
        if (!(*j->p >= '0' && *j->p <= '9'))
            return false;
        while (*j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    return j->p > s;
}

static bool jvalue(jctx *j)
{
    jws(j);
    if (++j->depth > 64)
        return false;
    bool ok = true;
    if (*j->p == '{' || *j->p == '[') {
        char close = *j->p == '{' ? '}' : ']';
        bool obj = close == '}';
        j->p++;
        jws(j);
        if (*j->p == close) {
            j->p++;
        } else {
            for (;;) {
                jws(j);
                if (obj) {
                    if (!jstring(j))
                        return false;
                    jws(j);
                    if (*j->p++ != ':')
                        return false;
                }
                if (!jvalue(j))
                    return false;
                jws(j);
                if (*j->p == ',') {
                    j->p++;
                    continue;
                }
                if (*j->p++ != close)
                    return false;
                break;
            }
        }
    } else if (*j->p == '"') {
        ok = jstring(j);
    } else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
        j->p += 4;
    } else if (!strncmp(j->p, "false", 5)) {
        j->p += 5;
    } else {
        ok = jnumber(j);
    }
    j->depth--;
    return ok;
}

static bool json_valid(const char *text)
{
    jctx j = {text, 0};
    if (!jvalue(&j))
        return false;
    jws(&j);
    return *j.p == 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = 0;
    fclose(f);
    return buf;
}

static int count_str(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* ts values of the complete events, in file order, are non-decreasing. */
static bool ts_sorted(const char *s)
{
    double last = -1e300;
    for (const char *p = strstr(s, "\"ph\":\"X\""); p; p = strstr(p + 1, "\"ph\":\"X\"")) {
        const char *q = strstr(p, "\"ts\":");
        if (!q)
            return false;
        double ts = strtod(q + 5, NULL);
        if (ts < last)
            return false;
        last = ts;
    }
    return true;
}

typedef struct {
    rap_trace *tr;
    int track;
    int id;
} tworker;

static void *trace_worker(void *arg)
{
    tworker *w = arg;
    for (int i = 0; i < 50; i++) {
        char name[32];
        snprintf(name, sizeof name, "work %d.%d", w->id, i);
        double t0 = rap_trace_host_begin(w->tr, name);
        rap_trace_host_end(w->tr, w->track, name, "test", i, t0);
    }
    return NULL;
}

RAP_TEST(rt_trace_json)
{
    rap_trace_config c = {.max_events = 1000};
    rap_trace *tr;
    REQUIRE_OK(rap_trace_create(&c, &tr));
    int extra = rap_trace_add_track(tr, "cpu \"worker\"", -1);
    CHECK(extra == RAP_TRACK_BUILTIN);
    /* spans recorded out of time order, from several threads */
    double now = rap_now();
    rap_trace_host_span(tr, RAP_TRACK_TRAIN, "emb_forward", "phase", 3, now + 0.002, now + 0.003);
    rap_trace_host_span(tr, RAP_TRACK_PREP, "fill_null k0", "prep", 0, now + 0.001, now + 0.0025);
    rap_trace_host_span(tr, RAP_TRACK_COPY, "copy batch", "copy", 4, now, now + 0.001);
    rap_trace_host_span(tr, RAP_TRACK_MAIN, "odd \"name\"\\\n\ttab", "host", RAP_TRACE_NO_ARG, now,
                        now + 0.004);
    rap_trace_host_span(tr, 99, "bad track", "host", 0, now, now); /* ignored */
    pthread_t th[4];
    tworker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (tworker){tr, i % 2 ? RAP_TRACK_FEEDER : extra, i};
        REQUIRE(pthread_create(&th[i], NULL, trace_worker, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    rap_trace_set_enabled(tr, false);
    CHECK(!rap_trace_enabled(tr));
    rap_trace_host_span(tr, RAP_TRACK_MAIN, "while off", "host", 0, now, now);
    CHECK(rap_trace_host_begin(tr, "off") == 0);
    rap_trace_set_enabled(tr, true);
    CHECK(rap_trace_recorded(tr) == 4 + 200);
    CHECK(rap_trace_dropped(tr) == 0);
    const char *path = tmp_path("trace.json");
    REQUIRE_OK(rap_trace_write(tr, path));
    char *text = slurp(path);
    REQUIRE(text);
    CHECK_MSG(json_valid(text), "not valid JSON: %.300s", text);
    CHECK(count_str(text, "\"ph\":\"X\"") == 204);
    CHECK(ts_sorted(text));
    CHECK(strstr(text, "\"traceEvents\":[") != NULL);
    CHECK(strstr(text, "\"name\":\"thread_name\"") != NULL);
    static const char *tracks[] = {"\"training stream\"", "\"preprocessing stream\"",
                                   "\"copy stream\"", "\"main thread\"", "\"feeder thread\"",
                                   "\"cpu \\\"worker\\\"\"", "\"GPU 0\"", "\"host\""};
    for (int i = 0; i < 8; i++)
        CHECK_MSG(strstr(text, tracks[i]) != NULL, "track %s not named", tracks[i]);
    CHECK(strstr(text, "odd \\\"name\\\"\\\\\\u000a\\u0009tab") != NULL);
    CHECK(strstr(text, "\"name\":\"emb_forward\",\"cat\":\"phase\",\"ph\":\"X\",\"pid\":2,\"tid\":1,") !=
          NULL);
    CHECK(strstr(text, "while off") == NULL && strstr(text, "bad track") == NULL);
    CHECK(strstr(text, "\"dur\":1000.000,\"args\":{\"n\":3}") != NULL);
    /* python's json module agrees, and checks the fields of every event */
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); e=d[\"traceEvents\"]; "
                 "x=[v for v in e if v[\"ph\"]==\"X\"]; "
                 "assert len(x)==204; assert all(set(v)>={\"name\",\"cat\",\"pid\",\"tid\",\"ts\",\"dur\"} for v in x); "
                 "assert [v[\"ts\"] for v in x]==sorted(v[\"ts\"] for v in x); "
                 "named={(v[\"pid\"],v[\"tid\"]) for v in e if v[\"name\"]==\"thread_name\"}; "
                 "assert all((v[\"pid\"],v[\"tid\"]) in named for v in x)' %s",
                 path);
        CHECK_MSG(system(cmd) == 0, "python3 rejected %s", path);
    }
    free(text);
    /* writing twice gives the same file */
    const char *path2 = tmp_path("trace2.json");
    REQUIRE_OK(rap_trace_write(tr, path2));
    char *a = slurp(path), *b = slurp(path2);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    CHECK(rap_trace_write(tr, "/nonexistent-dir/x.json") == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "/nonexistent-dir/x.json") != NULL);
    rap_trace_free(tr);
}

RAP_TEST(rt_trace_overflow)
{
    rap_trace_config c = {.max_events = 10};
    rap_trace *tr;
    REQUIRE_OK(rap_trace_create(&c, &tr));
    for (int i = 0; i < 25; i++)
        rap_trace_host_span(tr, RAP_TRACK_MAIN, "x", "host", i, rap_now(), rap_now());
    CHECK(rap_trace_recorded(tr) == 10);
    CHECK(rap_trace_dropped(tr) == 15);
    /* concurrent overflow */
    pthread_t th[4];
    tworker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (tworker){tr, RAP_TRACK_FEEDER, i};
        REQUIRE(pthread_create(&th[i], NULL, trace_worker, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(rap_trace_recorded(tr) == 10 && rap_trace_dropped(tr) == 15 + 200);
    const char *path = tmp_path("over.json");
    REQUIRE_OK(rap_trace_write(tr, path));
    char *text = slurp(path);
    REQUIRE(text);
    CHECK(json_valid(text));
    CHECK(count_str(text, "\"ph\":\"X\"") == 10);
    CHECK(strstr(text, "\"dropped\":215") != NULL);
    free(text);
    rap_trace_free(tr);
    /* tracks: a limit, not a crash */
    REQUIRE_OK(rap_trace_create(NULL, &tr));
    int last = 0;
    for (int i = 0; i < RAP_TRACE_MAX_TRACKS + 5; i++)
        last = rap_trace_add_track(tr, "t", i % 3 - 1);
    CHECK(last == -1);
    rap_trace_free(tr);
    /* a NULL trace does nothing */
    rap_trace_host_span(NULL, 0, "x", "y", 0, 0, 1);
    rap_trace_host_end(NULL, 0, "x", "y", 0, rap_trace_host_begin(NULL, "x"));
    CHECK(rap_trace_gpu_begin(NULL, 0, "x", "y", 0, NULL) == -1);
    CHECK_OK(rap_trace_gpu_end(NULL, 3, NULL));
    CHECK_OK(rap_trace_resolve(NULL));
    CHECK_OK(rap_trace_write(NULL, "/nonexistent-dir/x"));
    CHECK(rap_trace_recorded(NULL) == 0 && rap_trace_add_track(NULL, "x", 0) == -1);
    rap_trace_free(NULL);
    rap_trace_config bad = {.max_events = -1};
    CHECK(rap_trace_create(&bad, &tr) == RAP_ERR_ARG && tr == NULL);
}

RAP_TEST(rt_trace_gpu)
{
#ifndef RAP_HAVE_CUDA
    rap_trace_config c = {.max_gpu_spans = 4};
    rap_trace *tr;
    CHECK(rap_trace_create(&c, &tr) == RAP_ERR_NO_GPU && tr == NULL);
    SKIP("built without CUDA (GPU spans checked to be refused)");
#else
    REQUIRE_GPU();
    rap_trace_config c = {.max_events = 100, .max_gpu_spans = 4};
    rap_trace *tr;
    REQUIRE_OK(rap_trace_create(&c, &tr));
    cudaStream_t s;
    REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
    void *buf;
    REQUIRE(cudaMalloc(&buf, 64 << 20) == cudaSuccess);
    CHECK(rap_trace_gpu_begin(tr, RAP_TRACK_TRAIN, "early", "phase", 0, s) == -1); /* no origin yet */
    REQUIRE_OK(rap_trace_gpu_origin(tr, s));
    double h0 = rap_now();
    int sp[6];
    for (int i = 0; i < 6; i++) {
        sp[i] = rap_trace_gpu_begin(tr, i % 2 ? RAP_TRACK_PREP : RAP_TRACK_TRAIN, "memset", "gpu", i, s);
        CHECK(cudaMemsetAsync(buf, i, 64 << 20, s) == cudaSuccess);
        if (i != 2)
            CHECK_OK(rap_trace_gpu_end(tr, sp[i], s));
    }
    CHECK(sp[0] == 0 && sp[3] == 3 && sp[4] == -1 && sp[5] == -1); /* pool of 4 */
    rap_trace_host_span(tr, RAP_TRACK_MAIN, "host", "host", 0, h0, rap_now());
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE_OK(rap_trace_resolve(tr));
    CHECK(rap_trace_recorded(tr) == 4); /* 3 GPU spans ended + 1 host */
    CHECK(rap_trace_dropped(tr) == 3);  /* 2 over the pool + 1 never ended */
    const char *path = tmp_path("gpu.json");
    REQUIRE_OK(rap_trace_write(tr, path));
    char *text = slurp(path);
    REQUIRE(text);
    CHECK(json_valid(text) && ts_sorted(text));
    CHECK(count_str(text, "\"name\":\"memset\"") == 3);
    free(text);
    cudaFree(buf);
    cudaStreamDestroy(s);
    rap_trace_free(tr);
#endif
}

/* ------------------------------------------------------------ graphs */

/* The memset node's reference: elements little-endian, only width *
 * elem_size bytes of each pitched row written. */
RAP_TEST(graph_memset_ref_bytes)
{
    unsigned char b[24];
    memset(b, 0xee, sizeof b);
    rap_graph_memset_ref(b, 8, 0xa1b2c3d4u, 4, 1, 3);
    const unsigned char w4[4] = {0xd4, 0xc3, 0xb2, 0xa1};
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 8; i++)
            CHECK_MSG(b[8 * r + i] == (i < 4 ? w4[i] : 0xee), "row %d byte %d: %02x", r, i,
                      b[8 * r + i]);
    memset(b, 0xee, sizeof b);
    rap_graph_memset_ref(b + 2, 0, 0xff1234u, 2, 3, 1);
    const unsigned char w2[24] = {0xee, 0xee, 0x34, 0x12, 0x34, 0x12, 0x34, 0x12, 0xee};
    for (int i = 0; i < 9; i++)
        CHECK_MSG(b[i] == w2[i], "byte %d: %02x, expected %02x", i, b[i], w2[i]);
    memset(b, 0xee, sizeof b);
    rap_graph_memset_ref(b + 1, 0, 0x3c5au, 1, 5, 1);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(b[i] == (i >= 1 && i <= 5 ? 0x5a : 0xee), "byte %d: %02x", i, b[i]);
}

#ifdef RAP_HAVE_CUDA
static cudaGraphNode_t add_memset(cudaGraph_t g, cudaGraphNode_t after, void *dst, size_t pitch,
                                  unsigned value, unsigned es, size_t width, size_t height)
{
    struct cudaMemsetParams p = {dst, pitch, value, es, width, height};
    cudaGraphNode_t n = NULL;
    if (cudaGraphAddMemsetNode(&n, g, after ? &after : NULL, after ? 1 : 0, &p) != cudaSuccess)
        return NULL;
    return n;
}

static void ref_memset(unsigned char *h, unsigned char *base, void *dst, size_t pitch,
                       unsigned value, unsigned es, size_t width, size_t height)
{
    rap_graph_memset_ref(h + ((unsigned char *)dst - base), pitch, value, es, width, height);
}
#endif

/* Memset nodes (1, 2 and 4-byte elements, unaligned starts, odd widths,
 * pitched rows, a chain and a lone node) become kernel nodes that write
 * the same bytes as the CPU reference, and the chain's edges survive. */
RAP_TEST(graph_gpu_memset_nodes_become_kernels)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    enum { BYTES = 8192 };
    unsigned char *d = NULL;
    unsigned char *h = malloc(BYTES), *want = malloc(BYTES);
    REQUIRE(h && want);
    REQUIRE(cudaMalloc((void **)&d, BYTES) == cudaSuccess);
    REQUIRE(cudaMemset(d, 0xee, BYTES) == cudaSuccess);
    memset(want, 0xee, BYTES);
    cudaGraph_t g = NULL;
    REQUIRE(cudaGraphCreate(&g, 0) == cudaSuccess);
    /* the chain a -> b -> c: each overwrites part of the one before */
    cudaGraphNode_t a = add_memset(g, NULL, d, 0, 0xa1b2c3d4u, 4, 1024, 1);
    cudaGraphNode_t b = add_memset(g, a, d + 3, 0, 0x5eu, 1, 1001, 1);
    cudaGraphNode_t c = add_memset(g, b, d + 1200, 400, 0x1234u, 2, 77, 5);
    cudaGraphNode_t e = add_memset(g, NULL, d + 6144, 160, 7u, 4, 33, 3); /* alone */
    REQUIRE(a && b && c && e);
    ref_memset(want, d, d, 0, 0xa1b2c3d4u, 4, 1024, 1);
    ref_memset(want, d, d + 3, 0, 0x5eu, 1, 1001, 1);
    ref_memset(want, d, d + 1200, 400, 0x1234u, 2, 77, 5);
    ref_memset(want, d, d + 6144, 160, 7u, 4, 33, 3);
    int replaced = -1;
    CHECK_OK(rap_run_graph_rewrite_memsets(g, &replaced));
    CHECK_MSG(replaced == 4, "%d memset nodes replaced, expected 4", replaced);
    size_t n = 0, edges = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &n) == cudaSuccess && n == 4);
    cudaGraphNode_t nodes[8];
    n = 8;
    CHECK(cudaGraphGetNodes(g, nodes, &n) == cudaSuccess);
    for (size_t i = 0; i < n && i < 8; i++) {
        enum cudaGraphNodeType type;
        CHECK(cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess &&
              type == cudaGraphNodeTypeKernel);
    }
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &edges) == cudaSuccess);
    CHECK_MSG(edges == 2, "%zu edges, expected the chain's 2", edges);
    cudaGraphExec_t x = NULL;
    CHECK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess);
    if (x) {
        CHECK(cudaGraphLaunch(x, 0) == cudaSuccess);
        CHECK(cudaMemcpy(h, d, BYTES, cudaMemcpyDeviceToHost) == cudaSuccess);
        int bad = 0;
        for (int i = 0; i < BYTES; i++)
            if (h[i] != want[i] && bad++ < 5)
                CHECK_MSG(false, "byte %d: %02x, expected %02x", i, h[i], want[i]);
        CHECK(bad == 0);
        cudaGraphExecDestroy(x);
    }
    cudaGraphDestroy(g);
    cudaFree(d);
    free(h);
    free(want);
#endif
}
