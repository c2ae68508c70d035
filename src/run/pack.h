/*
 * pack.h -- dense packing: the dense and vector columns after the plan, one
 * (B) or (B, W) array each, become the model's row-major dense input
 * (rows, ND), ND = the sum of the columns' widths, columns in frame order.
 * A null row of a nullable column packs as 0 (plans normally fill nulls).
 *
 * A CPU reference (rap_pack_dense_cpu) and a CUDA kernel
 * (rap_pack_dense_gpu) that produce the same bytes: packing only moves
 * floats. Letters: B rows, W column width, ND packed width.
 */
#ifndef RAP_RUN_PACK_H
#define RAP_RUN_PACK_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One source column: val (rows, width) row-major, valid (rows) or NULL when
 * no row can be null. Pointers on the device of the call. */
typedef struct {
    const float *val;
    const uint8_t *valid;
    int width;
} rap_pack_col;

/* Columns per kernel launch: the descriptor table is a kernel argument. */
#define RAP_PACK_MAX_COLS 128

/* out (rows, nd) = columns side by side. nd must equal the sum of widths
 * (checked). Host pointers. Fails only on bad arguments. */
rap_status rap_pack_dense_cpu(const rap_pack_col *cols, int n_cols, int64_t rows, int nd,
                              float *out);
/* The same on the GPU: device pointers, asynchronous on stream (a
 * cudaStream_t; NULL = the default stream). Any number of columns (one
 * launch per RAP_PACK_MAX_COLS). Without CUDA: RAP_ERR_NO_GPU. */
rap_status rap_pack_dense_gpu(const rap_pack_col *cols, int n_cols, int64_t rows, int nd,
                              float *out, void *stream);

/* Device helpers for the trainer (RAP_ERR_NO_GPU without CUDA). */
rap_status rap_run_stream_create(void **stream);
void rap_run_stream_free(void *stream);
rap_status rap_run_stream_sync(void *stream);
/* Device -> host copy of n bytes after the stream's queued work. */
rap_status rap_run_download(void *host, const void *dev, size_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_PACK_H */
