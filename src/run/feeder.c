/*
 * feeder.c -- reader thread + pool of batches + two queues (feeder.h).
 *
 *   free queue  (P) batches nobody uses; the thread pops, the consumer
 *               pushes back (rap_feeder_release)
 *   full queue  (P) filled batches in input order; the thread pushes, the
 *               consumer pops (rap_feeder_next)
 *
 * The thread ends on end of data or a reader error by closing the full
 * queue: the consumer drains it, then sees the end or the error (kept in
 * err/err_msg, written before the close, so the queue's lock orders them).
 * rap_feeder_free stops both queues and the reader, which wakes the thread
 * wherever it waits.
 */
#include "run/feeder.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "data/reader_internal.h"
#include "run/queue.h"

struct rap_feeder {
    rap_feeder_config cfg;
    rap_reader *reader;
    rap_feed_batch *pool;    /* (P) */
    atomic_int *held;        /* (P) 1 while the consumer holds the batch */
    int n_pool;              /* batches created (for free) */
    rap_queue *free_q;
    rap_queue *full_q;
    pthread_t tid;
    bool started;
    atomic_int stop;         /* rap_feeder_stop was called */
    /* written by the thread before it closes full_q */
    rap_status err;
    char err_msg[2048];
    atomic_llong rows_filled;
    /* consumer side */
    int64_t seq_next;        /* thread side: next sequence number */
    int64_t batches_out;
    int64_t rows_out;
    bool ended;
    rap_status end_status;
};

static void *feeder_main(void *arg)
{
    rap_feeder *f = arg;
    for (;;) {
        void *it;
        if (rap_queue_pop(f->free_q, &it) != RAP_Q_OK)
            break; /* stopped */
        rap_feed_batch *fb = it;
        double t0 = rap_trace_host_begin(f->cfg.trace, "read batch");
        rap_status st = rap_reader_next(f->reader, &fb->batch);
        rap_trace_host_end(f->cfg.trace, RAP_TRACK_FEEDER, "read batch", "read",
                           st == RAP_OK && fb->batch.rows > 0 ? f->seq_next : RAP_TRACE_NO_ARG, t0);
        if (st != RAP_OK || fb->batch.rows == 0) {
            if (st != RAP_OK) {
                f->err = st;
                snprintf(f->err_msg, sizeof f->err_msg, "%s", rap_last_error());
            }
            rap_queue_try_push(f->free_q, fb); /* room: it came from there */
            rap_queue_close(f->full_q);
            break;
        }
        fb->seq = f->seq_next++;
        atomic_fetch_add(&f->rows_filled, fb->batch.rows);
        if (rap_queue_push(f->full_q, fb) != RAP_Q_OK)
            break; /* stopped */
    }
    return NULL;
}

rap_status rap_feeder_create(const rap_feeder_config *c, rap_feeder **out)
{
    *out = NULL;
    if (!c || c->batch_rows < 1 || c->n_batches < 1)
        return rap_fail(RAP_ERR_ARG, "feeder: expected batch_rows >= 1 and n_batches >= 1");
    rap_feeder *f = rap_calloc(sizeof *f, "feeder");
    if (!f)
        return RAP_ERR_NOMEM;
    f->cfg = *c;
    atomic_init(&f->stop, 0);
    atomic_init(&f->rows_filled, 0);
    int P = c->n_batches;
    rap_status st = RAP_OK;
    f->pool = rap_calloc(sizeof *f->pool * (size_t)P, "feeder batches");
    f->held = rap_calloc(sizeof *f->held * (size_t)P, "feeder batches");
    if (!f->pool || !f->held) {
        st = RAP_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < P; i++) {
        st = rap_batch_create(&f->pool[i].batch, rap_schema_criteo(), c->batch_rows, c->pinned);
        if (st != RAP_OK)
            goto fail;
        f->pool[i].slot = i;
        f->pool[i].seq = -1;
        atomic_init(&f->held[i], 0);
        f->n_pool = i + 1;
    }
    if ((st = rap_queue_create(P, &f->free_q)) != RAP_OK ||
        (st = rap_queue_create(P, &f->full_q)) != RAP_OK)
        goto fail;
    for (int i = 0; i < P; i++)
        rap_queue_push(f->free_q, &f->pool[i]);
    if ((st = rap_reader_open_ex(&c->reader, c->chunk_bytes, &f->reader)) != RAP_OK)
        goto fail;
    if (pthread_create(&f->tid, NULL, feeder_main, f) != 0) {
        st = rap_fail(RAP_ERR_INTERNAL, "feeder: cannot start its thread");
        goto fail;
    }
    f->started = true;
    *out = f;
    return RAP_OK;
fail:
    rap_feeder_free(f);
    return st;
}

rap_status rap_feeder_next(rap_feeder *f, rap_feed_batch **out)
{
    *out = NULL;
    if (!f)
        return rap_fail(RAP_ERR_ARG, "rap_feeder_next: feeder is NULL");
    if (f->ended) {
        if (f->end_status != RAP_OK)
            return rap_fail(f->end_status, "%s", f->err_msg);
        return RAP_OK;
    }
    void *it;
    rap_queue_result r = rap_queue_pop(f->full_q, &it);
    if (r == RAP_Q_OK) {
        rap_feed_batch *fb = it;
        atomic_store(&f->held[fb->slot], 1);
        f->batches_out++;
        f->rows_out += fb->batch.rows;
        *out = fb;
        return RAP_OK;
    }
    if (r == RAP_Q_CLOSED) {
        f->ended = true;
        f->end_status = f->err;
        if (f->err != RAP_OK)
            return rap_fail(f->err, "%s", f->err_msg);
        return RAP_OK;
    }
    return rap_fail(RAP_ERR_INTERRUPTED, "feeder: shut down while waiting for a batch");
}

rap_status rap_feeder_release(rap_feeder *f, rap_feed_batch *fb)
{
    if (!f || !fb || fb->slot < 0 || fb->slot >= f->n_pool || &f->pool[fb->slot] != fb)
        return rap_fail(RAP_ERR_ARG, "rap_feeder_release: not a batch of this feeder");
    if (atomic_exchange(&f->held[fb->slot], 0) != 1)
        return rap_fail(RAP_ERR_ARG, "rap_feeder_release: batch %d of the pool is not handed out "
                                     "(released twice?)",
                        fb->slot); /* not fb->seq: the thread may be refilling it */
    /* the free queue has room for every batch: this never waits */
    rap_queue_push(f->free_q, fb);
    return RAP_OK;
}

void rap_feeder_stop(rap_feeder *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, 1);
    rap_reader_stop(f->reader);
}

void rap_feeder_get_stats(rap_feeder *f, rap_feeder_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!f)
        return;
    st->batches_out = f->batches_out;
    st->rows_out = f->rows_out;
    st->rows_filled = atomic_load(&f->rows_filled);
    st->ended = f->ended;
    st->stopped = atomic_load(&f->stop) != 0;
    st->error = f->ended ? f->end_status : RAP_OK;
    if (f->reader)
        rap_reader_get_stats(f->reader, &st->reader);
}

void rap_feeder_free(rap_feeder *f)
{
    if (!f)
        return;
    if (f->started) {
        atomic_store(&f->stop, 1);
        rap_reader_stop(f->reader);
        rap_queue_stop(f->free_q);
        rap_queue_stop(f->full_q);
        pthread_join(f->tid, NULL);
    }
    rap_reader_close(f->reader);
    rap_queue_free(f->free_q);
    rap_queue_free(f->full_q);
    for (int i = 0; i < f->n_pool; i++)
        rap_batch_free(&f->pool[i].batch);
    rap_free(f->pool);
    rap_free((void *)f->held);
    rap_free(f);
}
