/*
 * fill_null.cu -- fill_null(v) (docs/OPS.md): null rows get v, other rows are
 * unchanged. The output has no valid array (the executor gives it none).
 *
 * Variants (by the desc's in_kind and off_mode, see plan.c):
 *   dense             y[r] = null ? f0 : x[r]
 *   sparse, SAME      input has no null rows: ids copied
 *   sparse, ARANGE    len1 input: yids[r] = the row's id if it has one, else
 *                     i0 (a null row is empty, so it gets [i0])
 *   sparse, COMPUTED  len[r] = null ? 1 : input length; write: null rows
 *                     get [i0], others their list
 *
 * Grids: one kernel for the write phase, branching per desc (uniform per
 * block): dense/ARANGE/COMPUTED one row per thread, SAME one id per thread
 * over [xoff[r0], xoff[r1]); x size from the rows, capped for sparse input
 * (mathf.h). Len kernel: one row per thread.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus fill_null_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline void fill_null_dense_row(const rap_desc *d, int64_t r)
{
    d->y[r] = rap_row_null(d, r) ? d->f0 : d->x[r];
}

RAP_HD static inline void fill_null_arange_row(const rap_desc *d, int64_t r)
{
    int64_t a = d->xoff[r];
    d->yids[r] = (!rap_row_null(d, r) && d->xoff[r + 1] > a) ? d->xids[a] : d->i0;
}

RAP_HD static inline int64_t fill_null_len(const rap_desc *d, int64_t r)
{
    return rap_row_null(d, r) ? 1 : d->xoff[r + 1] - d->xoff[r];
}

RAP_HD static inline void fill_null_computed_row(const rap_desc *d, int64_t r)
{
    int64_t o = d->yoff[r];
    if (rap_row_null(d, r)) {
        d->yids[o] = d->i0;
        return;
    }
    int64_t a = d->xoff[r], b = d->xoff[r + 1];
    for (int64_t j = a; j < b; j++)
        d->yids[o + (j - a)] = d->xids[j];
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r of any non-COMPUTED variant, as the CPU reference computes it (row
 * kernels, rows.cu); COMPUTED: nothing. */
RAP_HD static inline void fill_null_row_any(const rap_desc *d, int64_t r)
{
    if (d->in_kind == RAP_DENSE) {
        fill_null_dense_row(d, r);
    } else if (d->off_mode == RAP_OFF_SAME) {
        for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
            d->yids[j] = d->xids[j];
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        fill_null_arange_row(d, r);
    }
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_fill_null_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    if (d->in_kind == RAP_DENSE) {
        for (int64_t r = r0; r < r1; r++)
            fill_null_dense_row(d, r);
    } else if (d->off_mode == RAP_OFF_SAME) {
        for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
            d->yids[j] = d->xids[j];
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0; r < r1; r++)
            fill_null_arange_row(d, r);
    } else {
        for (int64_t r = r0; r < r1; r++)
            fill_null_computed_row(d, r);
    }
}

/* Len phase (sparse COMPUTED descs only; others are left alone). */
RAP_OP_EXPORT void rap_op_fill_null_len_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (d->in_kind != RAP_SPARSE || d->off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0; r < r1; r++)
        d->len[r] = fill_null_len(d, r);
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void fill_null_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    if (d.in_kind == RAP_DENSE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            fill_null_dense_row(&d, r);
    } else if (d.off_mode == RAP_OFF_SAME) {
        int64_t b = d.xoff[r1];
        for (int64_t j = d.xoff[r0] + tid; j < b; j += st)
            d.yids[j] = d.xids[j];
    } else if (d.off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            fill_null_arange_row(&d, r);
    } else {
        for (int64_t r = r0 + tid; r < r1; r += st)
            fill_null_computed_row(&d, r);
    }
}

static __global__ void fill_null_len_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    if (d.in_kind != RAP_SPARSE || d.off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        d.len[r] = fill_null_len(&d, r);
}

/* ------------------------------------------------------------ launchers */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_fill_null_gpu(const rap_desc *descs, int nd, int64_t r0,
                                              int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    /* the descs' kinds live on the device, so one geometry for all: rows
     * guide x, capped at ~4 blocks per SM (grid-stride loops cover the rest) */
    RAP_OP_LAUNCH(fill_null_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}

/* Len phase of nd COMPUTED descs over rows [r0, r1). */
RAP_OP_EXPORT rap_status rap_op_fill_null_len_gpu(const rap_desc *descs, int nd, int64_t r0,
                                                  int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(fill_null_len_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
