/*
 * clamp.cu -- clamp(lo, hi) (docs/OPS.md), elementwise min(max(v, lo), hi):
 *   dense   f0 = lo, f1 = hi: y = v < lo ? lo : (v > hi ? hi : v) in float
 *           (NaN fails both tests and passes through unchanged); null rows
 *           written as 0.0f
 *   sparse  i0 = lo, i1 = hi (integers): the same on every id; SAME
 *           offsets, null rows empty
 *
 * Grid: (bx, nd), branching per desc (uniform per block): dense one row per
 * thread, sparse one id per thread over [xoff[r0], xoff[r1]); bx from the
 * rows, capped at ~4 blocks per SM overall (grid-stride loops).
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus clamp_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline float clamp_f(float v, float lo, float hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

RAP_HD static inline int64_t clamp_i(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

RAP_HD static inline void clamp_dense_row(const rap_desc *d, int64_t r)
{
    d->y[r] = rap_row_null(d, r) ? 0.0f : clamp_f(d->x[r], d->f0, d->f1);
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): dense, or sparse SAME. */
RAP_HD static inline void clamp_row_any(const rap_desc *d, int64_t r)
{
    if (d->in_kind == RAP_DENSE) {
        clamp_dense_row(d, r);
    } else {
        for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
            d->yids[j] = clamp_i(d->xids[j], d->i0, d->i1);
    }
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_clamp_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    if (d->in_kind == RAP_DENSE) {
        for (int64_t r = r0; r < r1; r++)
            clamp_dense_row(d, r);
    } else {
        for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
            d->yids[j] = clamp_i(d->xids[j], d->i0, d->i1);
    }
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void clamp_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    if (d.in_kind == RAP_DENSE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            clamp_dense_row(&d, r);
    } else {
        int64_t b = d.xoff[r1];
        for (int64_t j = d.xoff[r0] + tid; j < b; j += st)
            d.yids[j] = clamp_i(d.xids[j], d.i0, d.i1);
    }
}

/* ------------------------------------------------------------ launcher */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_clamp_gpu(const rap_desc *descs, int nd, int64_t r0,
                                          int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(clamp_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
