/*
 * cast.cu -- cast(t) (docs/OPS.md), t = i0 = the target kind: RAP_DENSE
 * (float32) or RAP_SPARSE (int64).
 *
 * Variants (by the desc's in_kind, out_kind and off_mode, see plan.c):
 *   dense -> dense     copy (null rows written as 0)
 *   sparse -> sparse   SAME offsets: ids copied
 *   sparse -> dense    the row's first id as float (round to nearest); an
 *                      empty non-null list gives 0 (an empty list pools to
 *                      zero); null rows 0
 *   dense -> sparse    one id per non-null row: truncation toward zero to
 *                      int64; NaN or outside [-2^63, 2^63) gives 0.
 *                      ARANGE (input has no nulls): yids[r]; a null row there
 *                      would be written 0. COMPUTED (nullable input):
 *                      len[r] = null ? 0 : 1, then the id at yids[yoff[r]].
 *
 * Grids: write kernel (bx, nd), branching per desc (uniform per block):
 * rows one per thread, or ids one per thread over [xoff[r0], xoff[r1]) for
 * sparse -> sparse; bx from the rows, capped at ~4 blocks per SM overall
 * (grid-stride loops). Len kernel: one row per thread.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus cast_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

/* float -> int64 toward zero; NaN and out of range -> 0 (no UB). */
RAP_HD static inline int64_t cast_f2i(float v)
{
    return (v >= -9223372036854775808.0f && v < 9223372036854775808.0f) ? (int64_t)v : 0;
}

/* Dense output row r (input dense or sparse). */
RAP_HD static inline void cast_dense_row(const rap_desc *d, int64_t r)
{
    float v = 0.0f;
    if (!rap_row_null(d, r)) {
        if (d->in_kind == RAP_DENSE) {
            v = d->x[r];
        } else {
            int64_t a = d->xoff[r];
            v = d->xoff[r + 1] > a ? (float)d->xids[a] : 0.0f;
        }
    }
    d->y[r] = v;
}

RAP_HD static inline void cast_arange_row(const rap_desc *d, int64_t r)
{
    d->yids[r] = rap_row_null(d, r) ? 0 : cast_f2i(d->x[r]);
}

RAP_HD static inline void cast_computed_row(const rap_desc *d, int64_t r)
{
    if (!rap_row_null(d, r))
        d->yids[d->yoff[r]] = cast_f2i(d->x[r]);
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r of any non-COMPUTED variant, as the CPU reference computes it (row
 * kernels, rows.cu); dense -> sparse COMPUTED: nothing. */
RAP_HD static inline void cast_row_any(const rap_desc *d, int64_t r)
{
    if (d->out_kind == RAP_DENSE) {
        cast_dense_row(d, r);
    } else if (d->in_kind == RAP_SPARSE) {
        for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
            d->yids[j] = d->xids[j];
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        cast_arange_row(d, r);
    }
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_cast_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    if (d->out_kind == RAP_DENSE) {
        for (int64_t r = r0; r < r1; r++)
            cast_dense_row(d, r);
    } else if (d->in_kind == RAP_SPARSE) {
        for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
            d->yids[j] = d->xids[j];
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0; r < r1; r++)
            cast_arange_row(d, r);
    } else {
        for (int64_t r = r0; r < r1; r++)
            cast_computed_row(d, r);
    }
}

/* Len phase (dense -> sparse COMPUTED descs only; others left alone). */
RAP_OP_EXPORT void rap_op_cast_len_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (d->off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0; r < r1; r++)
        d->len[r] = rap_row_null(d, r) ? 0 : 1;
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void cast_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    if (d.out_kind == RAP_DENSE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            cast_dense_row(&d, r);
    } else if (d.in_kind == RAP_SPARSE) {
        int64_t b = d.xoff[r1];
        for (int64_t j = d.xoff[r0] + tid; j < b; j += st)
            d.yids[j] = d.xids[j];
    } else if (d.off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            cast_arange_row(&d, r);
    } else {
        for (int64_t r = r0 + tid; r < r1; r += st)
            cast_computed_row(&d, r);
    }
}

static __global__ void cast_len_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    if (d.off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        d.len[r] = rap_row_null(&d, r) ? 0 : 1;
}

/* ------------------------------------------------------------ launchers */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_cast_gpu(const rap_desc *descs, int nd, int64_t r0, int64_t r1,
                                         cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(cast_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}

/* Len phase of nd COMPUTED descs over rows [r0, r1). */
RAP_OP_EXPORT rap_status rap_op_cast_len_gpu(const rap_desc *descs, int nd, int64_t r0,
                                             int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(cast_len_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
