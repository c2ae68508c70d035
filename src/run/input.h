/*
 * input.h -- from the executor's output columns to a rap_model_batch.
 *
 * The plan's columns, in frame order, feed the model thus: dense and vector
 * columns are packed side by side into the dense input (rows, ND), ND = sum
 * of their widths (pack.h); sparse column number t (counting sparse columns
 * only, in frame order) is embedding table t, whose R_t = hi + 1 rows come
 * from the plan's bound on the column's ids. A sparse column without a bound
 * or with lo < 0 cannot index a table: rap_input_shape refuses it, naming it.
 *
 * On the GPU the executor's columns are device pointers; the packed dense
 * matrix lives in a device buffer owned here, so the model batch points at
 * device memory throughout.
 */
#ifndef RAP_RUN_INPUT_H
#define RAP_RUN_INPUT_H

#include "model/model.h"
#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model's input shape implied by the plan: *n_dense = ND, *n_tables =
 * T, table_rows (RAP_MAX_TABLES) = R_t. Fails (RAP_ERR_PLAN, naming the
 * column) on an unbounded sparse column, a negative lower bound, no column
 * at all, or more than RAP_MAX_TABLES tables. */
rap_status rap_input_shape(const rap_plan *plan, int *n_dense, int *n_tables,
                           int64_t *table_rows);

typedef struct rap_input rap_input;

/* Bytes of the packing buffer rap_input_create allocates: max_rows rows
 * of ND floats. Can't fail. */
size_t rap_input_bytes(int64_t max_rows, int n_dense);
/* Allocates the packing buffer for max_rows rows on dev (stream: the GPU
 * stream packing runs on). plan must outlive the object. */
rap_status rap_input_create(const rap_plan *plan, rap_device dev, int64_t max_rows, void *stream,
                            rap_input **out);
void rap_input_free(rap_input *in);

/* Points mb at the columns of the batch last run by prep (which must be on
 * in's device), packing the dense columns first (asynchronously on the
 * GPU, on in's stream). mb stays valid until the next rap_prep_load.
 * Fails if a column's kind or bound disagrees with the plan. */
rap_status rap_input_make(rap_input *in, const rap_prep *prep, rap_model_batch *mb);
/* Packing in place (rap_prep_pack_dense): when prep's row kernels compute
 * every dense column, they write in's packed matrix as they run, and
 * rap_input_make with this prep launches no packing. *in_place (may be
 * NULL) says whether it applies; otherwise in packs as before. in and
 * prep must be on one device; prep serves this input alone. */
rap_status rap_input_bind(rap_input *in, rap_prep *prep, bool *in_place);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_INPUT_H */
