/*
 * rowfeed.h -- the row feed: the input side of the runtime's pipeline
 * (docs/RUNTIME.md "The pipeline").
 *
 * A producer thread reads the input (rap_reader, with its own parser
 * threads) and fills batches of exactly B training rows (held-out rows
 * skipped, rows before a resume position skipped), pass after pass, into
 * a pool of P (pinned) host batches, queued "full" in input order. The
 * consumer takes them in order (rap_rowfeed_next), uses them (rap_prep_load,
 * an asynchronous copy to the GPU) and gives each back (rap_rowfeed_release,
 * any thread, any order) once nothing reads it any more. The batches handed
 * out are exactly the trainer's batches of train.h: the rows of step s
 * depend only on the input, B and the hold-out, never on threads. An
 * end-of-pass marker (end_of_pass set; 0 rows when the pass ended on a full
 * batch) ends each pass.
 *
 *   rap_rowfeed *f;
 *   rap_rowfeed_create(&cfg, &f);
 *   rap_row_batch *rb;
 *   while ((st = rap_rowfeed_next(f, &rb, NULL)) == RAP_OK && rb) {
 *       ... use rb->batch (rows may be 0 on a marker), rb->seq == 0, 1, 2, ...
 *       rap_rowfeed_release(f, rb);
 *   }
 *   // st != RAP_OK: the reader's error, after every good batch before it
 *   rap_rowfeed_free(f, &stats);
 *
 * Who parses (reader.parse, resolved by create: rap_rowfeed_parse): auto
 * is the GPU when the consumer takes device batches (device_batches) and a
 * GPU is in use (pinned), else the host's parser; gpu is the GPU there,
 * the kernels' CPU reference without a GPU (the CPU backend, CI: the same
 * feed, host memory), and the host's parser for a consumer of host batches
 * on a GPU machine (the cpu mode). With the GPU the batches handed out are
 * device memory (batch.device), every byte written before next returns
 * them; the rows, the hold-out and the accounting are the same as the
 * host parser's, bit for bit (docs/INPUT.md).
 *
 * With reader_batches (the mps server's feed) each batch is one read of
 * the reader as it comes instead: B rows, fewer when a followed input is
 * quiet, before a reject with bad_rows = fail, or at the end; the pass's
 * end is then always a marker of 0 rows.
 *
 * End of data, stop and errors:
 *  - the end (passes done): next returns RAP_OK with *out NULL, and keeps
 *    doing so.
 *  - rap_rowfeed_stop (async-signal-safe: a SIGINT handler may call it):
 *    the reader stops; rows already read are still handed out, then the end.
 *  - a reader error (bad_rows = fail, I/O, corrupt gzip): the good batches
 *    before it first, then next returns the error with the reader's message
 *    (and keeps returning it).
 *  - rap_rowfeed_free at any time: stops and joins the thread and frees
 *    everything, batches still held included.
 *
 * Nothing is allocated after create. Shapes: B batch rows, P pool batches.
 */
#ifndef RAP_RUN_ROWFEED_H
#define RAP_RUN_ROWFEED_H

#include "data/position.h"
#include "rap.h"
#include "run/trace.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rap_reader_config reader;   /* input, parser threads, bad_rows, follow... */
    size_t chunk_bytes;         /* reader chunk (tests); 0 = default */
    int64_t batch_rows;         /* B */
    int n_batches;              /* P >= 1 */
    bool pinned;                /* page-locked batches when a GPU is usable */
    double holdout;             /* F: rows with rap_train_held_out(i, F) skipped */
    int64_t start_pos;          /* first pass: rows of the input before this are skipped */
    int64_t passes;             /* passes over the input; 0 = until freed */
    rap_trace *trace;           /* span per filled batch on RAP_TRACK_FEEDER */
    volatile sig_atomic_t *stop; /* set: a consumer waiting on a followed input (or
                                  * stdin) stops the reader */
    bool per_row;               /* reference path (tests, bench): copy row by row
                                 * instead of reading straight into the batch (no
                                 * hold-out) or copying runs of rows; same batches */
    bool reader_batches;        /* each batch one read of the reader, as it comes (see
                                 * above), batch.first_row the reader's (index among the
                                 * pass's used rows); needs holdout 0, start_pos 0 and
                                 * !per_row (the mps server) */
    bool track_positions;       /* each batch carries the data position after it
                                 * (data/position.h); one reading thread */
    rap_data_position start;    /* start.valid: the first pass starts there (its rows
                                 * = start_pos: the rows before it are not read) */
    void (*batch_hook)(void *ctx, int64_t seq, const rap_batch *b); /* test hook: called
                                 * by rap_rowfeed_next with each batch of rows it hands
                                 * out; NULL: none */
    void *batch_hook_ctx;
    bool device_batches;        /* the consumer takes batches whose arrays are device
                                 * memory (the runtime's GPU modes): with reader.parse
                                 * auto or gpu and pinned (a GPU in use) the GPU parses
                                 * and the rows stay there (rap_rowfeed_parse) */
    bool open_at_create;        /* the first pass's input is opened by create, so that an
                                 * input that cannot be opened fails there (the mps server
                                 * reports it at set-up); else the thread opens it and
                                 * next returns the error */
    bool parse_gate;            /* with the GPU parser (or its CPU reference): its parser
                                 * threads post their chunks' parses to a gate the feed
                                 * makes (data/parse_gate.h, rap_rowfeed_gate) instead of
                                 * launching them; the consumer releases it (the runtime,
                                 * in its windows). Ignored for the host's parser */
} rap_rowfeed_config;

#define RAP_FEED_ID_COLS 64     /* raw sparse columns whose ids are counted */

typedef struct {
    rap_batch batch;            /* rows <= B; 0 only on an end-of-pass marker */
    int64_t seq;                /* 0, 1, 2, ... over all passes */
    int64_t pass;               /* 0-based pass of this run */
    int64_t pos_after;          /* rows of the input consumed in the pass after it */
    int64_t pass_rows;          /* end_of_pass: training rows handed out in the pass */
    bool end_of_pass;           /* the last batch of its pass (may hold 0 rows) */
    bool has_data_pos;          /* track_positions: data_pos is known */
    rap_data_position data_pos; /* just past the batch's last row: where the input's first
                                 * row not in this batch or before it is */
    int64_t ids[RAP_FEED_ID_COLS]; /* ids of raw sparse column j in its rows,
                                 * counted by the feed thread (internal) */
    int slot;                   /* pool index (internal) */
} rap_row_batch;


typedef struct {
    int64_t batches_out;        /* batches (markers included) handed out */
    int64_t rows_out;           /* training rows in them */
    int64_t ids_out[RAP_FEED_ID_COLS]; /* ids of raw sparse column j (< 64) in them: the
                                * input's list lengths (re-planning, run/replan.h) */
    int64_t rows_filled;        /* training rows the thread put into batches (>= rows_out) */
    int64_t rows_held_out;      /* rows skipped by the hold-out */
    int64_t rows_skipped;       /* rows before start_pos */
    int64_t rows_pending;       /* rows read into batches not handed out */
    int64_t passes_done;
    bool ended;                 /* the end (or the error) was returned */
    bool stopped;               /* rap_rowfeed_stop was called */
    rap_status error;           /* the error returned at the end; RAP_OK if none (yet) */
    rap_reader_stats reader;    /* summed over passes (rows_read == used + rejected) */
} rap_rowfeed_stats;

typedef struct rap_rowfeed rap_rowfeed;

/* What rap_rowfeed_create and its reader allocate for c. */
typedef struct {
    size_t pool;        /* the P batches of batch_rows rows (page-locked when
                         * c->pinned and a GPU is usable) */
    size_t read_batch;  /* the batch the reader's rows are copied into */
    size_t chunks;      /* the reader's chunk buffers (rap_reader_bytes) */
    size_t parsed;      /* its parsed rows (an estimate, rap_reader_bytes) */
    bool device;        /* pool and read_batch are device memory (the GPU parses) */
    size_t parse_device, parse_pinned, parse_host; /* the parser's (rap_reader_parse_bytes) */
} rap_rowfeed_mem;
/* Fills *out for c from the sizes the feed and the reader allocate with.
 * Allocates nothing; RAP_ERR_ARG for a config without batches. */
rap_status rap_rowfeed_bytes(const rap_rowfeed_config *c, rap_rowfeed_mem *out);
/* Allocates the P batches and queues and starts the thread (with
 * open_at_create, opens the input first). On failure nothing is left and
 * the message says why (RAP_ERR_ARG for a bad config). */
rap_status rap_rowfeed_create(const rap_rowfeed_config *c, rap_rowfeed **out);
/* Next batch in order (blocks; *waited_s gets the seconds spent waiting,
 * may be NULL). RAP_OK with *out NULL after the last pass or after a stop;
 * the reader's error (after every good batch before it). One consumer.
 * RAP_ERR_INTERNAL (a deadlock, named) when it would wait while every batch
 * of the pool has been handed out and none is given back within 2 s. */
rap_status rap_rowfeed_next(rap_rowfeed *f, rap_row_batch **out, double *waited_s);
/* Gives a batch back (any thread, any order). RAP_ERR_ARG when b is not a
 * batch of f handed out and not yet given back. */
rap_status rap_rowfeed_release(rap_rowfeed *f, rap_row_batch *b);
/* Ends reading: rows already read are still handed out, then the end.
 * Async-signal-safe (atomic loads and stores only). NULL accepted. */
void rap_rowfeed_stop(rap_rowfeed *f);
/* The feed's parse gate (parse_gate set and a parser that launches), or
 * NULL. The consumer releases it; next bypasses it while it waits for a
 * batch (the rows it waits for may be posted there), free closes it. */
struct rap_parse_gate *rap_rowfeed_gate(const rap_rowfeed *f);
/* Who parses this feed's rows (create's resolution of reader.parse). */
rap_parse_kind rap_rowfeed_parse(const rap_rowfeed *f);
/* Resolves reader.parse for a feed of config c (create's rule). */
rap_parse_kind rap_rowfeed_resolve_parse(const rap_rowfeed_config *c);
/* P, the batches of the pool. */
int rap_rowfeed_n_batches(const rap_rowfeed *f);
/* Accounting; exact once the end was returned or after free's join
 * (rap_rowfeed_free's stats). Consumer thread only. */
void rap_rowfeed_get_stats(rap_rowfeed *f, rap_rowfeed_stats *st);
/* Stops and joins the thread, then fills st (may be NULL) with the final
 * accounting (rows_pending counts what was read but never handed out) and
 * frees everything. NULL accepted. */
void rap_rowfeed_free(rap_rowfeed *f, rap_rowfeed_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_ROWFEED_H */
