/* test_parse_gate.c -- the parse gate (data/parse_gate.h) with a fake
 * launcher: jobs launched oldest first, in pieces of whole tiles in line
 * order within a release's budget (at least a tile, a short last piece a
 * tile), the event handed to every piece, the end after a job's last
 * piece; bypass (drain on a wait) and close launch everything at once and
 * count it outside; a launch error ends its job only; a parser thread
 * waiting in rap_parse_gate_run returns once released, bypassed or
 * closed. */
#include "test.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "data/parse_gate.h"

#define T RAP_PARSE_GATE_TILE

/* What the fake launcher saw: one entry per call. */
typedef struct {
    int job;         /* the job's id */
    int64_t l0, l1;  /* a piece; -1, -1: an end */
    void *event;
} call_t;

typedef struct {
    call_t calls[256];
    int n;
    int fail_job;    /* the job whose second piece fails (-1: none) */
} log_t;

typedef struct {
    log_t *log;
    int id;
    int pieces;
    rap_parse_job job;
} fake_t;

static rap_status fake_piece(void *ctx, int64_t l0, int64_t l1, void *event)
{
    fake_t *f = ctx;
    if (f->log->fail_job == f->id && f->pieces == 1)
        return rap_fail(RAP_ERR_CUDA, "fake launch of job %d failed", f->id);
    f->pieces++;
    f->log->calls[f->log->n++] = (call_t){f->id, l0, l1, event};
    return RAP_OK;
}

static rap_status fake_end(void *ctx)
{
    fake_t *f = ctx;
    f->log->calls[f->log->n++] = (call_t){f->id, -1, -1, NULL};
    return RAP_OK;
}

static const rap_parse_launch_ops g_fake = {fake_piece, fake_end};

static void fake_init(fake_t *f, log_t *log, int id, int64_t lines)
{
    memset(f, 0, sizeof *f);
    f->log = log;
    f->id = id;
    f->job.ops = &g_fake;
    f->job.ctx = f;
    f->job.n_lines = lines;
}

/* Entry k of the log is (job, l0, l1, event). */
static bool is_call(const log_t *g, int k, int job, int64_t l0, int64_t l1, void *event)
{
    return k < g->n && g->calls[k].job == job && g->calls[k].l0 == l0 && g->calls[k].l1 == l1 &&
           g->calls[k].event == event;
}

RAP_TEST(parse_gate_fifo_order)
{
    rap_parse_gate *g;
    REQUIRE_OK(rap_parse_gate_create(&g));
    log_t log = {.fail_job = -1};
    fake_t f[3];
    int64_t sizes[3] = {100, 64, 200};
    for (int j = 0; j < 3; j++) {
        fake_init(&f[j], &log, j, sizes[j]);
        rap_parse_gate_post(g, &f[j].job);
    }
    rap_parse_gate_stats st;
    rap_parse_gate_get_stats(g, &st);
    CHECK(log.n == 0 && st.jobs == 3 && st.pending == 364); /* nothing launched at a post */
    int ev;
    int64_t n = 0;
    rap_parse_gate_release(g, -1, &ev, &n);
    CHECK(n == 364);
    CHECK(log.n == 6);
    CHECK(is_call(&log, 0, 0, 0, 100, &ev) && is_call(&log, 1, 0, -1, -1, NULL));
    CHECK(is_call(&log, 2, 1, 0, 64, &ev) && is_call(&log, 3, 1, -1, -1, NULL));
    CHECK(is_call(&log, 4, 2, 0, 200, &ev) && is_call(&log, 5, 2, -1, -1, NULL));
    for (int j = 0; j < 3; j++)
        CHECK(f[j].job.done && rap_parse_gate_wait(g, &f[j].job) == RAP_OK);
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.lines_in == 364 && st.lines_out == 0 && st.pending == 0 && st.pieces == 3);
    /* a job posted again after it was done */
    rap_parse_gate_post(g, &f[1].job);
    rap_parse_gate_release(g, -1, NULL, &n);
    CHECK(n == 64 && is_call(&log, 6, 1, 0, 64, NULL) && is_call(&log, 7, 1, -1, -1, NULL));
    rap_parse_gate_free(g);
}

RAP_TEST(parse_gate_budget_whole_tiles)
{
    rap_parse_gate *g;
    REQUIRE_OK(rap_parse_gate_create(&g));
    log_t log = {.fail_job = -1};
    fake_t a, b, z;
    fake_init(&a, &log, 0, 300); /* 5 tiles: 4 of 64, one of 44 */
    fake_init(&b, &log, 1, 70);  /* 2 tiles: 64 and 6 */
    fake_init(&z, &log, 2, 0);   /* no line: one piece (0, 0), a tile */
    int64_t n = -7;
    rap_parse_gate_release(g, 1000, NULL, &n); /* nothing pending: nothing */
    CHECK(n == 0 && log.n == 0);
    rap_parse_gate_post(g, &a.job);
    rap_parse_gate_post(g, &b.job);
    rap_parse_gate_post(g, &z.job);
    int e1, e2, e3, e4;
    rap_parse_gate_release(g, 100, &e1, &n); /* 100 lines: one whole tile */
    CHECK(n == 64 && log.n == 1 && is_call(&log, 0, 0, 0, 64, &e1) && !a.job.done);
    rap_parse_gate_release(g, 10, &e2, &n); /* under a tile: still one */
    CHECK(n == 64 && log.n == 2 && is_call(&log, 1, 0, 64, 128, &e2));
    rap_parse_gate_release(g, 3 * T, &e3, &n); /* 3 tiles: the rest of a, 44 lines last */
    CHECK(n == 172 && log.n == 4 && is_call(&log, 2, 0, 128, 300, &e3) &&
          is_call(&log, 3, 0, -1, -1, NULL) && a.job.done && !b.job.done);
    rap_parse_gate_release(g, 2 * T + 63, &e4, &n); /* 2 tiles: all of b */
    CHECK(n == 70 && is_call(&log, 4, 1, 0, 70, &e4) && is_call(&log, 5, 1, -1, -1, NULL));
    CHECK(b.job.done && !z.job.done);
    rap_parse_gate_release(g, T, NULL, &n); /* the empty job's piece and end */
    CHECK(n == 0 && is_call(&log, 6, 2, 0, 0, NULL) && is_call(&log, 7, 2, -1, -1, NULL));
    CHECK(z.job.done && log.n == 8);
    /* pieces of one release across jobs: a budget larger than the first */
    fake_init(&a, &log, 3, 65);
    fake_init(&b, &log, 4, 200);
    rap_parse_gate_post(g, &a.job);
    rap_parse_gate_post(g, &b.job);
    rap_parse_gate_release(g, 4 * T, NULL, &n); /* a's 2 tiles, then 2 of b's 4 */
    CHECK(n == 65 + 128 && is_call(&log, 8, 3, 0, 65, NULL) && is_call(&log, 9, 3, -1, -1, NULL) &&
          is_call(&log, 10, 4, 0, 128, NULL) && log.n == 11);
    rap_parse_gate_stats st;
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.pending == 72 && st.lines_in == 300 + 70 + 65 + 128 && st.lines_out == 0);
    rap_parse_gate_close(g); /* the rest, outside */
    rap_parse_gate_get_stats(g, &st);
    CHECK(b.job.done && st.pending == 0 && st.lines_out == 72 && is_call(&log, 11, 4, 128, 200, NULL));
    rap_parse_gate_free(g);
}

RAP_TEST(parse_gate_release_whole_jobs)
{
    /* a release that finishes every job it begins: budgets rounded up to
     * job ends, the rest of a job begun by a tile release first */
    rap_parse_gate *g;
    REQUIRE_OK(rap_parse_gate_create(&g));
    log_t log = {.fail_job = -1};
    fake_t a, b, z, c;
    fake_init(&a, &log, 0, 300);
    fake_init(&b, &log, 1, 70);
    fake_init(&z, &log, 2, 0);
    int64_t n = -7;
    rap_parse_gate_release_jobs(g, 1000, NULL, &n); /* nothing pending: nothing */
    CHECK(n == 0 && log.n == 0);
    rap_parse_gate_post(g, &a.job);
    rap_parse_gate_post(g, &b.job);
    rap_parse_gate_post(g, &z.job);
    int e1, e2, e3;
    rap_parse_gate_release_jobs(g, 10, &e1, &n); /* under a job: all of a, one piece */
    CHECK(n == 300 && log.n == 2 && is_call(&log, 0, 0, 0, 300, &e1) &&
          is_call(&log, 1, 0, -1, -1, NULL) && a.job.done && !b.job.done);
    rap_parse_gate_release_jobs(g, 71, &e2, &n); /* b (70) is under 71: z too */
    CHECK(n == 70 && log.n == 6 && is_call(&log, 2, 1, 0, 70, &e2) &&
          is_call(&log, 4, 2, 0, 0, &e2) && b.job.done && z.job.done);
    fake_init(&a, &log, 3, 200);
    fake_init(&c, &log, 4, 64);
    rap_parse_gate_post(g, &a.job);
    rap_parse_gate_post(g, &c.job);
    rap_parse_gate_release(g, T, NULL, &n); /* a tile release begins a */
    CHECK(n == 64 && !a.job.done);
    rap_parse_gate_release_jobs(g, 1, &e3, &n); /* a's rest, not c */
    CHECK(n == 136 && a.job.done && !c.job.done && is_call(&log, 7, 3, 64, 200, &e3));
    rap_parse_gate_release_jobs(g, -1, NULL, &n); /* all: c */
    CHECK(n == 64 && c.job.done);
    rap_parse_gate_stats st;
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.pending == 0 && st.lines_in == 300 + 70 + 200 + 64 && st.lines_out == 0);
    rap_parse_gate_free(g);
}

RAP_TEST(parse_gate_bypass_and_close)
{
    rap_parse_gate *g;
    REQUIRE_OK(rap_parse_gate_create(&g));
    log_t log = {.fail_job = -1};
    fake_t a, b, c, d;
    fake_init(&a, &log, 0, 130);
    fake_init(&b, &log, 1, 10);
    fake_init(&c, &log, 2, 20);
    fake_init(&d, &log, 3, 30);
    rap_parse_gate_post(g, &a.job);
    int ev;
    int64_t n;
    rap_parse_gate_release(g, T, &ev, &n); /* one tile in */
    rap_parse_gate_bypass(g, true);        /* a consumer waits: the rest at once */
    CHECK(a.job.done && is_call(&log, 1, 0, 64, 130, NULL) && log.n == 3);
    rap_parse_gate_bypass(g, true);        /* nested (a reader closing meanwhile) */
    rap_parse_gate_post(g, &b.job);        /* launched at its post */
    CHECK(b.job.done && is_call(&log, 3, 1, 0, 10, NULL));
    rap_parse_gate_bypass(g, false);
    rap_parse_gate_post(g, &c.job);        /* still bypassed: one call left */
    CHECK(c.job.done);
    rap_parse_gate_bypass(g, false);
    rap_parse_gate_bypass(g, false);       /* one too many: ignored */
    rap_parse_gate_post(g, &d.job);        /* gated again */
    CHECK(!d.job.done);
    rap_parse_gate_stats st;
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.lines_in == 64 && st.lines_out == 66 + 10 + 20 && st.pending == 30);
    rap_parse_gate_close(g);               /* drained ... */
    CHECK(d.job.done);
    fake_init(&a, &log, 4, 5);
    rap_parse_gate_post(g, &a.job);        /* ... and closed: at once */
    CHECK(a.job.done);
    rap_parse_gate_close(g);               /* idempotent */
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.lines_out == 96 + 30 + 5 && st.pending == 0 && st.jobs == 5);
    rap_parse_gate_free(g);
}

RAP_TEST(parse_gate_launch_error)
{
    rap_parse_gate *g;
    REQUIRE_OK(rap_parse_gate_create(&g));
    log_t log = {.fail_job = 0};
    fake_t a, b;
    fake_init(&a, &log, 0, 200);
    fake_init(&b, &log, 1, 64);
    rap_parse_gate_post(g, &a.job);
    rap_parse_gate_post(g, &b.job);
    int64_t n;
    rap_parse_gate_release(g, T, NULL, &n);  /* a's first piece */
    rap_parse_gate_release(g, -1, NULL, &n); /* a's second fails: a ends, b goes on */
    CHECK(a.job.done && b.job.done && n == 64);
    CHECK(log.n == 3 && is_call(&log, 0, 0, 0, 64, NULL) && is_call(&log, 1, 1, 0, 64, NULL) &&
          is_call(&log, 2, 1, -1, -1, NULL)); /* no end for the failed job */
    rap_clear_error();
    CHECK(rap_parse_gate_wait(g, &a.job) == RAP_ERR_CUDA &&
          strstr(rap_last_error(), "fake launch of job 0 failed"));
    CHECK(rap_parse_gate_wait(g, &b.job) == RAP_OK);
    rap_parse_gate_stats st;
    rap_parse_gate_get_stats(g, &st);
    CHECK(st.pending == 0 && st.lines_in == 128);
    rap_parse_gate_free(g);
}

/* A parser thread: posts its job and waits (rap_parse_gate_run). */
typedef struct {
    rap_parse_gate *g;
    fake_t *f;
    rap_status st;
    volatile int returned;
} poster_t;

static void *poster_main(void *arg)
{
    poster_t *p = arg;
    p->st = rap_parse_gate_run(p->g, &p->f->job);
    __atomic_store_n(&p->returned, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Waits up to 5 s for the job to be posted (pending lines seen). */
static bool wait_pending(rap_parse_gate *g, int64_t lines)
{
    for (int i = 0; i < 5000; i++) {
        rap_parse_gate_stats st;
        rap_parse_gate_get_stats(g, &st);
        if (st.pending == lines)
            return true;
        usleep(1000);
    }
    return false;
}

RAP_TEST(parse_gate_threads_wait)
{
    /* the poster waits while the gate holds its job, returns once the
     * runtime released it; then once a wait bypassed it; then once closed */
    for (int how = 0; how < 3; how++) {
        rap_parse_gate *g;
        REQUIRE_OK(rap_parse_gate_create(&g));
        log_t log = {.fail_job = -1};
        fake_t f;
        fake_init(&f, &log, 0, 150);
        poster_t p = {g, &f, RAP_ERR_INTERNAL, 0};
        pthread_t tid;
        REQUIRE(pthread_create(&tid, NULL, poster_main, &p) == 0);
        CHECK(wait_pending(g, 150));
        usleep(20000);
        CHECK(!__atomic_load_n(&p.returned, __ATOMIC_SEQ_CST)); /* held by the gate */
        if (how == 0) {
            rap_parse_gate_release(g, 2 * T, NULL, NULL);
            usleep(20000);
            CHECK(!__atomic_load_n(&p.returned, __ATOMIC_SEQ_CST)); /* a tile still held */
            rap_parse_gate_release(g, 2 * T, NULL, NULL);
        } else if (how == 1) {
            rap_parse_gate_bypass(g, true);
        } else {
            rap_parse_gate_close(g);
        }
        pthread_join(tid, NULL);
        CHECK(p.returned && p.st == RAP_OK && log.n == (how == 0 ? 3 : 2));
        rap_parse_gate_stats st;
        rap_parse_gate_get_stats(g, &st);
        CHECK(st.lines_in + st.lines_out == 150 && (how == 0) == (st.lines_out == 0));
        rap_parse_gate_free(g);
    }
}
