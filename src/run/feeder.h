/*
 * feeder.h -- the input side of the runtime's pipeline.
 *
 * A feeder owns a rap_reader and a pool of P batches of B rows (pinned
 * host memory when a GPU is usable and asked for; plain memory otherwise).
 * Its thread takes free batches, fills them from the reader in input order
 * and queues them as "full". The consumer takes full batches in order
 * (rap_feeder_next), uses them (e.g. rap_prep_load, an asynchronous copy
 * to the GPU) and gives each back (rap_feeder_release) once nothing reads
 * it any more (the copy is done). With P = 3 the thread fills batch i+2
 * while batch i+1 is copied/preprocessed and batch i trains.
 *
 *   rap_feeder *f;
 *   rap_feeder_create(&cfg, &f);
 *   rap_feed_batch *fb;
 *   while ((st = rap_feeder_next(f, &fb)) == RAP_OK && fb) {
 *       ... use fb->batch (rows > 0), fb->seq == 0, 1, 2, ... ...
 *       rap_feeder_release(f, fb);
 *   }
 *   // st != RAP_OK: the reader's error, after every good batch before it
 *   rap_feeder_free(f);
 *
 * End of data, stop and errors:
 *  - end of data: next returns RAP_OK with *out NULL (and keeps doing so).
 *  - rap_feeder_stop (e.g. from a SIGINT handler): the reader stops
 *    reading; the rows it already read are still handed out, then the end
 *    as above (rap_feeder_stats.stopped says why it ended).
 *  - a reader error (bad_rows = fail, I/O, corrupt gzip): the good batches
 *    before it are handed out first, then next returns the error with the
 *    reader's message (and keeps returning it).
 *  - rap_feeder_free at any time (e.g. after --steps): aborts the thread
 *    and frees everything, batches still held by the consumer included.
 *
 * Nothing is allocated after create. Accounting: rows_out (rows handed to
 * the consumer) == the reader's rows_used once the end (or the error) has
 * been returned; every row is handed out once, in order, with
 * batch.first_row == rows_out before it.
 */
#ifndef RAP_RUN_FEEDER_H
#define RAP_RUN_FEEDER_H

#include "core/core.h"
#include "run/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rap_reader_config reader; /* input, threads, bad_rows, follow, ... */
    size_t chunk_bytes;       /* reader chunk size (tests); 0 = the reader's default */
    int64_t batch_rows;       /* B >= 1 */
    int n_batches;            /* P >= 1: batches in flight (3 for the full pipeline) */
    bool pinned;              /* page-locked batches when a GPU is usable */
    rap_trace *trace;         /* optional: a span per batch read on RAP_TRACK_FEEDER */
} rap_feeder_config;

/* A batch of the pool. seq numbers the batches handed out: 0, 1, 2, ... */
typedef struct {
    rap_batch batch;
    int64_t seq;
    int slot;                 /* index in the pool (internal) */
} rap_feed_batch;

typedef struct {
    int64_t batches_out;      /* batches handed to the consumer */
    int64_t rows_out;         /* rows in them */
    int64_t rows_filled;      /* rows the thread read into batches (>= rows_out) */
    bool ended;               /* end of data or the error was returned */
    bool stopped;             /* rap_feeder_stop was called */
    rap_status error;         /* the reader's error, RAP_OK if none (yet) */
    rap_reader_stats reader;  /* the reader's accounting */
} rap_feeder_stats;

typedef struct rap_feeder rap_feeder;

/* Opens the reader, allocates the P batches and queues, and starts the
 * thread. On failure nothing is left open and the message says why. */
rap_status rap_feeder_create(const rap_feeder_config *c, rap_feeder **out);
/* Waits for the next full batch. RAP_OK with *out set (rows > 0), RAP_OK
 * with *out NULL at the end, or the reader's error (message in
 * rap_last_error). One consumer thread at a time. */
rap_status rap_feeder_next(rap_feeder *f, rap_feed_batch **out);
/* Gives a batch back to the pool: any thread, any order. RAP_ERR_ARG when
 * fb is not a batch of f handed out and not yet released. */
rap_status rap_feeder_release(rap_feeder *f, rap_feed_batch *fb);
/* Asks the feeder to end: the reader stops, rows already read are still
 * handed out, then the end. Async-signal-safe (atomic stores only). */
void rap_feeder_stop(rap_feeder *f);
/* The accounting so far. Call from the consumer's thread (batches_out and
 * rows_out are the consumer's counters). */
void rap_feeder_get_stats(rap_feeder *f, rap_feeder_stats *st);
/* Stops the thread (waking it wherever it waits), joins it, closes the
 * reader and frees the batches. NULL accepted. */
void rap_feeder_free(rap_feeder *f);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_FEEDER_H */
