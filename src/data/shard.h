/*
 * shard.h -- rap's binary columnar shard: preprocessed batches on disk, for
 * training with no preprocessing (the `ideal` mode) and for fast re-reads.
 *
 * Layout (little-endian; docs/FORMATS.md):
 *   header   "RAPSHARD" u32 version u32 n_cols, then n_cols column records
 *            {char name[64]; u32 kind; u32 width; u8 bounded; u8 pad[7];
 *             i64 lo; i64 hi}
 *   batches  each: "RAPBATCH" i64 rows i64 payload_bytes, then the payload:
 *            label f32[rows], then per column valid u8[rows] and
 *              dense/vector: f32[rows*width]
 *              sparse: i64 off[rows+1] (from 0), i64 ids[off[rows]]
 *            payload_bytes is checked against what rows and offsets imply.
 *   footer   "RAPFOOT!" i64 batches i64 rows
 * A file with no footer (cut short) is rejected with the batch where it ends.
 * Every size is checked before it is trusted: the footer's counts against
 * the file's length (a batch takes 24 bytes at least, a row 4), a batch's
 * columns against its payload before anything is allocated, the batches'
 * rows against the footer's; a batch holds at least one row.
 * Written through core/out.h (a temporary, fsync'd and renamed), so a shard
 * is whole or absent.
 */
#ifndef RAP_SHARD_H
#define RAP_SHARD_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_SHARD_VERSION 1u

typedef struct {
    char name[64];
    rap_kind kind;
    int width;
    bool bounded;
    int64_t lo, hi;
} rap_shard_col;

typedef struct rap_shard_writer rap_shard_writer;
typedef struct rap_shard_reader rap_shard_reader;

/* Starts a shard at path through core/out.h (a temporary beside it,
 * locked: a second writer of path fails at once; a device is written
 * through). */
rap_status rap_shard_create(const char *path, const rap_shard_col *cols, int n_cols,
                            rap_shard_writer **out);
/* Appends one batch: label (rows) and n_cols host columns (rap_prep_fetch). */
rap_status rap_shard_write(rap_shard_writer *w, const float *label, int64_t rows,
                           const rap_host_column *cols);
/* Writes the footer, syncs and renames into place. Frees w in all cases. */
rap_status rap_shard_close(rap_shard_writer *w);
/* Drops the partial file (path stays as it was). Accepts NULL. */
void rap_shard_abort(rap_shard_writer *w);

/* Opens and checks header and footer. */
rap_status rap_shard_open(const char *path, rap_shard_reader **out);
int rap_shard_n_cols(const rap_shard_reader *r);
const rap_shard_col *rap_shard_cols(const rap_shard_reader *r);
int64_t rap_shard_rows(const rap_shard_reader *r);
int64_t rap_shard_batches(const rap_shard_reader *r);
/* Reads the next batch into freshly allocated host columns (caller frees
 * with rap_host_column_free) and label (caller frees with free()). At the
 * end, *rows = 0. */
rap_status rap_shard_next(rap_shard_reader *r, float **label, int64_t *rows,
                          rap_host_column *cols);
void rap_shard_close_reader(rap_shard_reader *r);

#ifdef __cplusplus
}
#endif
#endif /* RAP_SHARD_H */
