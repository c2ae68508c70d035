/*
 * rowfeed.c -- the row feed (rowfeed.h): a reader thread, a pool of P
 * batches and two queues.
 *
 *   free queue  (P) batches nobody uses; the thread pops, the consumer
 *               pushes back (rap_rowfeed_release)
 *   full queue  (P) filled batches in input order; the thread pushes, the
 *               consumer pops (rap_rowfeed_next)
 *
 * The thread ends after the last pass, on a stop or on a reader error by
 * closing the full queue: the consumer drains it, then sees the end or the
 * error (kept in err/err_msg, written before the close, so the queue's lock
 * orders them). rap_rowfeed_free stops both queues and the reader, which
 * wakes the thread wherever it waits.
 */
#include "run/rowfeed.h"

#include "core/core.h"
#include "data/parse_backend.h"
#include "data/reader_internal.h"
#include "run/queue.h"
#include "run/train.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Seconds a consumer may wait while it (or its threads) hold every batch of
 * the pool before rap_rowfeed_next calls it a deadlock (a release by another
 * thread takes microseconds). */
#define RAP_FEED_ALL_HELD_S 2.0
#define FEED_READ_ROWS 32768 /* rows of the batch the reader reads into */

struct rap_rowfeed {
    rap_rowfeed_config cfg;    /* reader.parse resolved */
    bool dev;                  /* the GPU parses: batches in device memory */
    int device;                /* ... of this CUDA device (the feed thread sets it) */
    rap_parse_res *res;        /* the GPU parser's device memory, lent to each pass's reader */
    rap_parse_gate *gate;      /* parse_gate: where every pass's reader posts its parses */
    /* device rows with a hold-out: the kept rows of the reader batch are
     * gathered by index, once before the reader batch is read again and
     * once when the pool batch is full (an append per run would be a
     * launch per few rows) */
    bool gather;
    int32_t *h_idx, *d_idx;    /* (32768) rows of rb: pinned, device */
    int64_t n_idx;             /* indices waiting */
    rap_row_batch *pool;       /* (P) */
    atomic_int *held;          /* (P) 1 while the consumer holds the batch */
    int n_pool;
    rap_queue *free_q, *full_q;
    pthread_t tid;
    bool started;
    atomic_int stop;
    /* The current pass's reader, set and cleared by the thread (with
     * open_at_create the first one by create). rd_lock orders its close
     * against rap_rowfeed_get_stats; stoppers counts the rap_rowfeed_stop
     * calls between loading it and stopping it, which its close waits out:
     * stop takes no lock, so a signal handler may call it. */
    _Atomic(rap_reader *) reader;
    atomic_int stoppers;
    pthread_mutex_t rd_lock;
    rap_batch rb;              /* reader batch (thread); unused with reader_batches */
    /* written by the thread; read after join or under st_lock */
    pthread_mutex_t st_lock;
    rap_reader_stats sum;      /* closed passes */
    atomic_llong held_out, skipped, filled;
    int64_t passes_done;
    rap_status err;
    char err_msg[2048];
    /* consumer */
    int64_t batches_out, rows_out;
    int64_t ids_out[RAP_FEED_ID_COLS]; /* ids of raw sparse column j in the rows handed out */
    bool ended;
    rap_status end_status;
};

/* The ids of each raw sparse column (the first RAP_FEED_ID_COLS) in fb's
 * rows into fb->ids, by the feed thread: from the offsets of a host batch,
 * copied back on the reader's stream for a device batch (the host never
 * reads a device batch's arrays). */
static rap_status batch_ids(rap_row_batch *fb, rap_reader *r)
{
    const rap_batch *b = &fb->batch;
    int ns = b->schema.n_sparse < RAP_FEED_ID_COLS ? b->schema.n_sparse : RAP_FEED_ID_COLS;
    memset(fb->ids, 0, sizeof fb->ids);
    if (b->device)
        return rap_batch_ids_device(b, ns, fb->ids, rap_reader_rows_stream(r));
    for (int j = 0; j < ns && b->rows > 0; j++) {
        const int64_t *off = b->sparse_off + (size_t)j * (size_t)(b->cap + 1);
        fb->ids[j] = off[b->rows] - off[0];
    }
    return RAP_OK;
}

/* The list lengths handed out: fb's ids added to the feed's (its offsets'
 * span, counted by batch_ids: O(columns) a batch). */
static void count_ids(rap_rowfeed *f, const rap_row_batch *fb)
{
    for (int j = 0; j < RAP_FEED_ID_COLS; j++)
        f->ids_out[j] += fb->ids[j];
}

static void add_stats(rap_reader_stats *sum, const rap_reader_stats *s)
{
    sum->rows_read += s->rows_read;
    sum->rows_used += s->rows_used;
    sum->rows_rejected += s->rows_rejected;
    sum->bytes_read += s->bytes_read;
    sum->files += s->files;
    sum->lines_parsed_here += s->lines_parsed_here;
    if (s->parse_share_ranks > sum->parse_share_ranks)
        sum->parse_share_ranks = s->parse_share_ranks;
    for (int r = 0; r < RAP_REJ_COUNT; r++) {
        sum->rejected[r] += s->rejected[r];
        for (int e = 0; e < RAP_REJ_EXAMPLES; e++)
            if (!sum->example[r][e][0]) {
                memcpy(sum->example[r][e], s->example[r][e], sizeof sum->example[r][e]);
                memcpy(sum->detail[r][e], s->detail[r][e], sizeof sum->detail[r][e]);
            }
    }
}

/* Appends row r of src to dst (same schema); dst->rows < dst->cap. The
 * per-row reference of rap_batch_append, kept for
 * the feed's per_row path, which tests compare the bulk paths against. */
static void copy_row(rap_batch *dst, const rap_batch *src, int64_t r)
{
    int64_t d = dst->rows, bd = dst->cap, bs = src->cap;
    int nd = src->schema.n_dense, ns = src->schema.n_sparse;
    int64_t k = src->schema.ids_per_row;
    dst->label[d] = src->label[r];
    for (int j = 0; j < nd; j++) {
        dst->dense[j * bd + d] = src->dense[j * bs + r];
        dst->dense_valid[j * bd + d] = src->dense_valid[j * bs + r];
    }
    for (int j = 0; j < ns; j++) {
        const int64_t *so = src->sparse_off + j * (bs + 1);
        int64_t *dof = dst->sparse_off + j * (bd + 1);
        if (d == 0)
            dof[0] = 0;
        int64_t n = so[r + 1] - so[r];
        memcpy(dst->sparse_ids + j * bd * k + dof[d], src->sparse_ids + j * bs * k + so[r],
               sizeof(int64_t) * (size_t)n);
        dof[d + 1] = dof[d] + n;
        dst->sparse_valid[j * bd + d] = src->sparse_valid[j * bs + r];
    }
    dst->rows = d + 1;
}

/* Closes the current reader (if any), its accounting added to the sum. */
static void feed_close_reader(rap_rowfeed *f)
{
    pthread_mutex_lock(&f->rd_lock);
    rap_reader *r = atomic_exchange(&f->reader, NULL);
    pthread_mutex_unlock(&f->rd_lock);
    if (!r)
        return;
    while (atomic_load(&f->stoppers) > 0) /* a stop that loaded r before the exchange */
        sched_yield();
    rap_reader_stats st;
    rap_reader_get_stats(r, &st);
    pthread_mutex_lock(&f->st_lock);
    add_stats(&f->sum, &st);
    pthread_mutex_unlock(&f->st_lock);
    rap_reader_close(r);
}

static void feed_error(rap_rowfeed *f, rap_status st)
{
    f->err = st;
    snprintf(f->err_msg, sizeof f->err_msg, "%s", rap_last_error());
}

/* One pass's reading state (the feed thread's). */
typedef struct {
    rap_reader *r;
    int64_t pos;        /* rows of the input consumed (the resume position) */
    int64_t next_idx;   /* index (among used rows) of the next row the reader hands out */
    int64_t rb_at;      /* next row of the reader batch f->rb */
    bool direct;        /* nothing held out: read straight into the pool batch (its
                         * capacity is B) once the resume position is reached and
                         * the reader batch is drained */
    bool eod;           /* the reader reached the end of the data */
    rap_status st;      /* the reader's error */
} feed_pass;

/* Gathers the waiting kept rows of f->rb into tb (device rows with a
 * hold-out); the index list is free again after. False on an error (p->st). */
static bool feed_flush(rap_rowfeed *f, feed_pass *p, rap_batch *tb)
{
    if (f->n_idx == 0)
        return true;
    void *st = rap_reader_rows_stream(p->r);
    if ((p->st = rap_parse_idx_upload(f->d_idx, f->h_idx, f->n_idx, st)) != RAP_OK ||
        (p->st = rap_batch_gather_device(tb, &f->rb, f->d_idx, f->n_idx, st)) != RAP_OK ||
        (p->st = rap_reader_sync(p->r)) != RAP_OK)
        return false;
    f->n_idx = 0;
    return true;
}

/* Fills pool batch tb (emptied) with the pass's next training rows; the
 * rows held out and skipped before the resume position are counted into
 * *n_held and *n_skip. Returns false on a reader error (p->st); p->eod
 * set at the end of the data. */
static bool feed_fill(rap_rowfeed *f, feed_pass *p, rap_batch *tb, int64_t *n_held,
                      int64_t *n_skip)
{
    const rap_rowfeed_config *c = &f->cfg;
    while (tb->rows + f->n_idx < tb->cap) {
        if (p->rb_at >= f->rb.rows) {
            if (p->direct && tb->rows == 0 && p->pos <= p->next_idx) {
                p->st = rap_reader_next(p->r, tb);
                if (!c->reader_batches)
                    tb->first_row = 0;
                if (p->st != RAP_OK)
                    return false;
                if (tb->rows == 0) {
                    p->eod = true;
                    return true;
                }
                p->next_idx += tb->rows;
                p->pos = p->next_idx;
                if (c->reader_batches)
                    return true; /* the read as it came */
                continue; /* a short batch (a followed input, a reject
                           * in fail mode) is filled up below */
            }
            if (!feed_flush(f, p, tb)) /* its rows refer to the reader batch */
                return false;
            p->st = rap_reader_next(p->r, &f->rb);
            p->rb_at = 0;
            if (p->st != RAP_OK)
                return false;
            if (f->rb.rows == 0) {
                p->eod = true;
                return true;
            }
            p->next_idx = f->rb.first_row + f->rb.rows;
        }
        int64_t idx = f->rb.first_row + p->rb_at;
        if (c->per_row) {
            if (idx >= p->pos) {
                p->pos = idx + 1;
                if (rap_train_held_out(idx, c->holdout))
                    (*n_held)++;
                else
                    copy_row(tb, &f->rb, p->rb_at);
            } else {
                (*n_skip)++;
            }
            p->rb_at++;
            continue;
        }
        int64_t left = f->rb.rows - p->rb_at, n = 0;
        if (idx < p->pos) { /* before the resume position */
            n = p->pos - idx < left ? p->pos - idx : left;
            *n_skip += n;
            p->rb_at += n;
            continue;
        }
        if (rap_train_held_out(idx, c->holdout)) { /* a run of held-out rows */
            while (n < left && rap_train_held_out(idx + n, c->holdout))
                n++;
            *n_held += n;
        } else { /* a run of kept rows, as much as fits */
            int64_t room = tb->cap - tb->rows - f->n_idx;
            if (left > room)
                left = room;
            while (n < left && !rap_train_held_out(idx + n, c->holdout))
                n++;
            if (f->gather) {
                for (int64_t k = 0; k < n; k++)
                    f->h_idx[f->n_idx++] = (int32_t)(p->rb_at + k);
            } else if ((p->st = rap_reader_append(p->r, tb, &f->rb, p->rb_at, n)) != RAP_OK) {
                return false;
            }
        }
        p->rb_at += n;
        p->pos = idx + n;
    }
    return feed_flush(f, p, tb);
}

/* Reads pass `pass` (its reader r) into pool batches and queues them, the
 * last one (or a marker of 0 rows) with end_of_pass. *seq numbers the
 * batches over all passes. Returns false when the thread must end: a
 * reader error (recorded), a stop, the feed shut down. */
static bool feed_pass_run(rap_rowfeed *f, rap_reader *r, int64_t pass, int64_t *seq)
{
    const rap_rowfeed_config *c = &f->cfg;
    feed_pass p = {r, pass == 0 ? c->start_pos : 0, 0, 0, !c->per_row && c->holdout <= 0, false,
                   RAP_OK};
    int64_t pass_rows = 0;
    f->rb.rows = 0;
    f->n_idx = 0;
    while (!p.eod) {
        void *it;
        if (rap_queue_pop(f->free_q, &it) != RAP_Q_OK)
            return false;
        rap_row_batch *fb = it;
        rap_batch *tb = &fb->batch;
        tb->rows = 0;
        tb->first_row = 0;
        int64_t n_held = 0, n_skip = 0;
        double t0 = rap_trace_host_begin(c->trace, "read batch");
        bool ok = feed_fill(f, &p, tb, &n_held, &n_skip);
        if (ok && f->dev && (p.st = rap_reader_sync(r)) != RAP_OK) /* its bytes all there */
            ok = false;
        if (ok && (p.st = batch_ids(fb, r)) != RAP_OK)
            ok = false;
        atomic_fetch_add(&f->held_out, n_held);
        atomic_fetch_add(&f->skipped, n_skip);
        rap_trace_host_end(c->trace, RAP_TRACK_FEEDER, "read batch", "read", *seq, t0);
        if (!ok) {
            feed_error(f, p.st);
            rap_queue_try_push(f->free_q, fb);
            return false;
        }
        /* an end caused by a stop is not the end of the pass */
        bool eop = p.eod && !atomic_load(&f->stop);
        if (tb->rows == 0 && !eop) {
            rap_queue_try_push(f->free_q, fb);
            return false;
        }
        pass_rows += tb->rows;
        fb->seq = (*seq)++;
        fb->pass = pass;
        fb->pos_after = p.pos;
        fb->pass_rows = pass_rows;
        fb->end_of_pass = eop;
        fb->has_data_pos = c->track_positions &&
                           rap_reader_position_at(r, p.pos, &fb->data_pos) == RAP_OK;
        atomic_fetch_add(&f->filled, tb->rows);
        if (rap_queue_push(f->full_q, fb) != RAP_Q_OK)
            return false;
        if (p.eod && !eop)
            return false;
    }
    return true;
}

static void *feed_main(void *arg)
{
    rap_rowfeed *f = arg;
    const rap_rowfeed_config *c = &f->cfg;
    int64_t seq = 0;
    rap_status dst = f->dev ? rap_parse_set_device(f->device) : RAP_OK;
    if (dst != RAP_OK) {
        feed_error(f, dst);
        rap_queue_close(f->full_q);
        return NULL;
    }
    for (int64_t pass = 0; c->passes == 0 || pass < c->passes; pass++) {
        if (atomic_load(&f->stop))
            break;
        rap_reader *r = pass == 0 ? atomic_load(&f->reader) : NULL; /* open_at_create */
        if (!r) {
            rap_reader_config rc = c->reader;
            rc.track_positions = c->track_positions;
            rc.start = pass == 0 && c->start.valid ? &c->start : NULL;
            rap_status st = rap_reader_open_gate(&rc, c->chunk_bytes, f->res, f->gate,
                                                 &r); /* resolved */
            if (st != RAP_OK) {
                feed_error(f, st);
                break;
            }
            atomic_store(&f->reader, r);
            if (atomic_load(&f->stop)) /* a stop that came before the store */
                rap_reader_stop(r);
        }
        bool go_on = feed_pass_run(f, r, pass, &seq);
        feed_close_reader(f);
        if (!go_on)
            break;
        pthread_mutex_lock(&f->st_lock);
        f->passes_done = pass + 1;
        pthread_mutex_unlock(&f->st_lock);
    }
    rap_queue_close(f->full_q);
    return NULL;
}

void rap_rowfeed_free(rap_rowfeed *f, rap_rowfeed_stats *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!f)
        return;
    bool stopped = atomic_load(&f->stop) != 0; /* by the caller, not by this free */
    rap_parse_gate_close(f->gate); /* no parser thread waits for a release any more */
    if (f->started) {
        rap_rowfeed_stop(f);
        rap_queue_stop(f->free_q);
        rap_queue_stop(f->full_q);
        pthread_join(f->tid, NULL);
        f->started = false;
    }
    feed_close_reader(f);
    if (out) {
        rap_rowfeed_get_stats(f, out);
        out->stopped = stopped;
        out->rows_pending = out->reader.rows_used - out->rows_out - out->rows_held_out -
                            out->rows_skipped;
    }
    rap_queue_free(f->free_q);
    rap_queue_free(f->full_q);
    for (int i = 0; i < f->n_pool; i++)
        rap_batch_free_any(&f->pool[i].batch);
    rap_batch_free_any(&f->rb);
    rap_parse_res_free(f->res);
    rap_parse_gate_free(f->gate);
    rap_parse_idx_free(f->h_idx, f->d_idx);
    rap_free(f->pool);
    rap_free((void *)f->held);
    pthread_mutex_destroy(&f->rd_lock);
    pthread_mutex_destroy(&f->st_lock);
    rap_free(f);
}

rap_status rap_rowfeed_bytes(const rap_rowfeed_config *c, rap_rowfeed_mem *out)
{
    memset(out, 0, sizeof *out);
    if (!c || c->n_batches < 1 || c->batch_rows < 1)
        return rap_fail(RAP_ERR_ARG, "rowfeed: n_batches and batch_rows must be >= 1");
    const rap_schema shape = rap_reader_shape(&c->reader);
    out->pool = (size_t)c->n_batches * rap_batch_bytes(shape, c->batch_rows);
    out->read_batch = c->reader_batches ? 0 : rap_batch_bytes(shape, FEED_READ_ROWS);
    rap_reader_config rc = c->reader;
    rc.parse = rap_rowfeed_resolve_parse(c); /* as create */
    out->device = rc.parse == RAP_PARSE_GPU;
    RAP_TRY(rap_reader_bytes(&rc, &out->chunks, &out->parsed));
    return rap_reader_parse_bytes(&rc, &out->parse_device, &out->parse_pinned, &out->parse_host);
}

rap_status rap_rowfeed_create(const rap_rowfeed_config *c, rap_rowfeed **out)
{
    *out = NULL;
    if (!c || c->batch_rows < 1 || c->n_batches < 1 || c->start_pos < 0 || c->passes < 0)
        return rap_fail(RAP_ERR_ARG, "rowfeed: expected batch_rows >= 1, n_batches >= 1, "
                        "start_pos >= 0, passes >= 0");
    if (c->reader_batches && (c->holdout > 0 || c->start_pos > 0 || c->per_row))
        return rap_fail(RAP_ERR_ARG, "rowfeed: reader_batches hands out the reader's batches "
                        "as they come: no hold-out, resume position or per_row");
    rap_parse_kind pk = rap_rowfeed_resolve_parse(c);
    if (pk == RAP_PARSE_GPU && c->per_row)
        return rap_fail(RAP_ERR_ARG, "rowfeed: per_row copies rows on the host: not with the "
                        "GPU parser's device rows");
    RAP_TRY(rap_reader_check_parse(&c->reader)); /* gpu asked for a schema, Parquet */
    if (c->reader.parse == RAP_PARSE_GPU && pk == RAP_PARSE_CPU)
        rap_warn("--parse gpu: this run takes rows in host memory (the cpu mode or the mps "
                 "server): the host parses them");
    else
        rap_debug("row feed: parse %s (asked: %s)", rap_parse_kind_name(pk),
                  rap_parse_kind_name(c->reader.parse));
    rap_rowfeed *f = rap_calloc(sizeof *f, "row feed");
    if (!f)
        return RAP_ERR_NOMEM;
    f->cfg = *c;
    f->cfg.reader.parse = pk;
    f->dev = pk == RAP_PARSE_GPU;
    f->device = f->dev ? rap_parse_device() : 0;
    pthread_mutex_init(&f->rd_lock, NULL);
    pthread_mutex_init(&f->st_lock, NULL);
    atomic_init(&f->stop, 0);
    atomic_init(&f->reader, NULL);
    atomic_init(&f->stoppers, 0);
    atomic_init(&f->held_out, 0);
    atomic_init(&f->skipped, 0);
    atomic_init(&f->filled, 0);
    int P = c->n_batches;
    rap_status st = RAP_OK;
    f->pool = rap_calloc(sizeof *f->pool * (size_t)P, "row feed batches");
    f->held = rap_calloc(sizeof *f->held * (size_t)P, "row feed batches");
    if (!f->pool || !f->held) {
        st = RAP_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < P; i++) { /* sizes as rap_rowfeed_bytes */
        const rap_schema sh = rap_reader_shape(&c->reader);
        st = f->dev ? rap_batch_create_device(&f->pool[i].batch, sh, c->batch_rows)
                    : rap_batch_create(&f->pool[i].batch, sh, c->batch_rows, c->pinned);
        if (st != RAP_OK)
            goto fail;
        f->pool[i].slot = i;
        f->pool[i].seq = -1;
        atomic_init(&f->held[i], 0);
        f->n_pool = i + 1;
    }
    if (!c->reader_batches &&
        (st = f->dev ? rap_batch_create_device(&f->rb, rap_reader_shape(&c->reader),
                                               FEED_READ_ROWS)
                     : rap_batch_create(&f->rb, rap_reader_shape(&c->reader), FEED_READ_ROWS,
                                        false)) != RAP_OK)
        goto fail;
    f->gather = f->dev && c->holdout > 0;
    if (f->gather && (st = rap_parse_idx_create(32768, &f->h_idx, &f->d_idx)) != RAP_OK)
        goto fail;
    if (c->parse_gate && (pk == RAP_PARSE_GPU || pk == RAP_PARSE_REF) &&
        (st = rap_parse_gate_create(&f->gate)) != RAP_OK)
        goto fail;
    /* the GPU parser's buffers once, not each pass (a reader a pass) */
    if (f->dev && rap_parse_res_create_gate(&f->cfg.reader, c->chunk_bytes, f->gate,
                                            &f->res) != RAP_OK) {
        f->res = NULL; /* each reader makes its own, and says what is wrong */
        rap_clear_error();
    }
    if ((st = rap_queue_create(P, &f->free_q)) != RAP_OK ||
        (st = rap_queue_create(P, &f->full_q)) != RAP_OK)
        goto fail;
    for (int i = 0; i < P; i++)
        rap_queue_push(f->free_q, &f->pool[i]);
    if (c->start.valid && c->start.rows != c->start_pos) {
        st = rap_fail(RAP_ERR_ARG, "rowfeed: a start position at row %lld with start_pos %lld",
                      (long long)c->start.rows, (long long)c->start_pos);
        goto fail;
    }
    if (c->open_at_create) {
        rap_reader *r = NULL;
        rap_reader_config rc = f->cfg.reader; /* parse resolved */
        rc.track_positions = c->track_positions;
        rc.start = c->start.valid ? &c->start : NULL;
        if ((st = rap_reader_open_gate(&rc, c->chunk_bytes, f->res, f->gate, &r)) != RAP_OK)
            goto fail;
        atomic_store(&f->reader, r);
    }
    if (pthread_create(&f->tid, NULL, feed_main, f) != 0) {
        st = rap_fail(RAP_ERR_INTERNAL, "rowfeed: cannot start its thread");
        goto fail;
    }
    f->started = true;
    *out = f;
    return RAP_OK;
fail:
    rap_rowfeed_free(f, NULL);
    return st;
}

void rap_rowfeed_stop(rap_rowfeed *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, 1);
    atomic_fetch_add(&f->stoppers, 1);
    rap_reader *r = atomic_load(&f->reader);
    if (r)
        rap_reader_stop(r);
    atomic_fetch_sub(&f->stoppers, 1);
}

int rap_rowfeed_n_batches(const rap_rowfeed *f) { return f ? f->n_pool : 0; }

rap_parse_kind rap_rowfeed_resolve_parse(const rap_rowfeed_config *c)
{
    rap_parse_kind k = c->reader.parse;
    if (k == RAP_PARSE_CPU || k == RAP_PARSE_REF)
        return k;
    if (k == RAP_PARSE_AUTO && !rap_reader_criteo_text(&c->reader))
        return RAP_PARSE_CPU; /* a schema's text or Parquet: the host's parsers */
    bool gpu = c->pinned && c->device_batches && !c->reader_batches && !c->per_row;
    /* auto: the GPU's parser where the run trains on a GPU from device
     * batches. On one H200 (2026-12-02, 0fab12b, bench/RESULTS.md) it kept
     * rap / ideal at 0.985-0.990 on plain text with one host thread against
     * 0.992-0.993 for the host's parser with sixteen, 0.98-0.99 on .gz, for
     * a third of the host CPU a row: the host's cores stay the inflation's
     * (docs/INPUT.md "Who parses by default") */
    if (k == RAP_PARSE_AUTO)
        return gpu ? RAP_PARSE_GPU : RAP_PARSE_CPU;
    if (gpu)
        return RAP_PARSE_GPU;
    /* gpu asked: without a GPU the kernels' CPU reference in their place;
     * a consumer of host batches on a GPU machine keeps the host parser */
    return c->pinned ? RAP_PARSE_CPU : RAP_PARSE_REF;
}

rap_parse_gate *rap_rowfeed_gate(const rap_rowfeed *f) { return f ? f->gate : NULL; }

rap_parse_kind rap_rowfeed_parse(const rap_rowfeed *f)
{
    return f ? f->cfg.reader.parse : RAP_PARSE_CPU;
}

/* Batches of the pool handed out and not given back. */
static int feed_held(rap_rowfeed *f)
{
    int n = 0;
    for (int i = 0; i < f->n_pool; i++)
        n += atomic_load(&f->held[i]) != 0;
    return n;
}

/* Waits for the next full batch: r of the queue (never EMPTY nor
 * TIMEOUT). *deadlock: the wait was ended because every batch of the pool
 * stayed handed out (the message recorded). */
static rap_queue_result feed_wait(rap_rowfeed *f, void **it, bool *deadlock)
{
    double all_held_since = -1;
    *deadlock = false;
    for (;;) {
        rap_queue_result r = rap_queue_pop_timed(f->full_q, it, 0.05);
        if (r != RAP_Q_TIMEOUT)
            return r;
        /* every batch of the pool handed out and none given back: the feed
         * thread has nothing to fill, so this wait can only end if another
         * thread releases one; a consumer that waits holding them all is a
         * bug (a deadlock): fail, naming it, instead of hanging */
        if (feed_held(f) == f->n_pool) {
            double now = rap_now();
            if (all_held_since < 0) {
                all_held_since = now;
            } else if (now - all_held_since > RAP_FEED_ALL_HELD_S) {
                rap_fail(RAP_ERR_INTERNAL,
                         "rowfeed: deadlock: all %d batches of the pool are handed out and "
                         "none was given back for %.0f s while the consumer waits for "
                         "another (batch %lld); expected the consumer to release a batch "
                         "(rap_rowfeed_release) before asking for more than %d",
                         f->n_pool, (double)RAP_FEED_ALL_HELD_S, (long long)f->batches_out,
                         f->n_pool);
                *deadlock = true;
                return RAP_Q_STOPPED;
            }
        } else {
            all_held_since = -1;
        }
        /* a stop request ends a wait that may never end (a followed input,
         * stdin); otherwise the step in progress gets its batch first */
        if (f->cfg.stop && *f->cfg.stop && !atomic_load(&f->stop) &&
            (f->cfg.reader.follow || (f->cfg.reader.input && !strcmp(f->cfg.reader.input, "-"))))
            rap_rowfeed_stop(f);
    }
}

rap_status rap_rowfeed_next(rap_rowfeed *f, rap_row_batch **out, double *waited_s)
{
    *out = NULL;
    if (waited_s)
        *waited_s = 0;
    if (!f)
        return rap_fail(RAP_ERR_ARG, "rap_rowfeed_next: feed is NULL");
    if (f->ended) {
        if (f->end_status != RAP_OK)
            return rap_fail(f->end_status, "%s", f->err_msg);
        return RAP_OK;
    }
    double t0 = rap_now();
    void *it = NULL;
    rap_queue_result r = rap_queue_try_pop(f->full_q, &it);
    if (r == RAP_Q_EMPTY) {
        /* a wait for rows that may be posted to the gate: they are launched
         * at once meanwhile (counted outside the windows), never a deadlock */
        bool deadlock;
        if (f->gate)
            rap_parse_gate_bypass(f->gate, true);
        r = feed_wait(f, &it, &deadlock);
        if (f->gate)
            rap_parse_gate_bypass(f->gate, false);
        if (deadlock)
            return RAP_ERR_INTERNAL;
    }
    if (waited_s)
        *waited_s = rap_now() - t0;
    if (r == RAP_Q_OK) {
        rap_row_batch *fb = it;
        atomic_store(&f->held[fb->slot], 1);
        f->batches_out++;
        f->rows_out += fb->batch.rows;
        count_ids(f, fb);
        if (f->cfg.batch_hook && fb->batch.rows > 0)
            f->cfg.batch_hook(f->cfg.batch_hook_ctx, fb->seq, &fb->batch);
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
    return rap_fail(RAP_ERR_INTERRUPTED, "rowfeed: shut down while waiting for a batch");
}

rap_status rap_rowfeed_release(rap_rowfeed *f, rap_row_batch *b)
{
    if (!f || !b || b->slot < 0 || b->slot >= f->n_pool || &f->pool[b->slot] != b)
        return rap_fail(RAP_ERR_ARG, "rap_rowfeed_release: not a batch of this feed");
    if (atomic_exchange(&f->held[b->slot], 0) != 1)
        return rap_fail(RAP_ERR_ARG, "rap_rowfeed_release: batch %d of the pool is not handed "
                        "out (released twice?)", b->slot);
    rap_queue_push(f->free_q, b);
    return RAP_OK;
}

void rap_rowfeed_get_stats(rap_rowfeed *f, rap_rowfeed_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!f)
        return;
    st->batches_out = f->batches_out;
    st->rows_out = f->rows_out;
    memcpy(st->ids_out, f->ids_out, sizeof st->ids_out);
    st->rows_filled = atomic_load(&f->filled);
    st->rows_held_out = atomic_load(&f->held_out);
    st->rows_skipped = atomic_load(&f->skipped);
    st->ended = f->ended;
    st->stopped = atomic_load(&f->stop) != 0;
    st->error = f->ended ? f->end_status : RAP_OK;
    pthread_mutex_lock(&f->st_lock);
    st->reader = f->sum;
    st->passes_done = f->passes_done;
    pthread_mutex_unlock(&f->st_lock);
    pthread_mutex_lock(&f->rd_lock);
    rap_reader *r = atomic_load(&f->reader);
    if (r) {
        rap_reader_stats cur;
        rap_reader_get_stats(r, &cur);
        add_stats(&st->reader, &cur);
    }
    pthread_mutex_unlock(&f->rd_lock);
}
