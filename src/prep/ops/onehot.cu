/*
 * onehot.cu -- onehot(low, high, C) (docs/OPS.md), dense -> vector of width
 * W = C: f0 = low, f1 = high, i0 = C, width = W (the row stride of y).
 *
 *   step = (high - low) / C            float32
 *   q = (x - low) / step               float32
 *   i = (q > -1 && q < C) ? (int)q : 0
 *
 * This is docs/OPS.md's rule (truncate toward zero, then 0 if i < 0 or
 * i >= C) without the undefined float -> int conversion of huge values: q in
 * (-1, 0) truncates to 0 either way, and NaN fails both tests -> 0.
 * Output row: W floats, 1.0 at i, 0.0 elsewhere; a null row is all 0.
 *
 * Grid: (bx, nd), threads cover the (rows x W) output elements in a
 * grid-stride loop (consecutive threads write consecutive floats, so wide
 * rows are coalesced; each thread recomputes its row's index); W lives on
 * the device, so bx = max(rows / 256, ~4 blocks per SM overall), <= 65535.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus onehot_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

/* Hot index of row r, or -1 for a null row. */
RAP_HD static inline int64_t onehot_index(const rap_desc *d, int64_t r)
{
    if (rap_row_null(d, r))
        return -1;
    float c = (float)d->i0; /* exact: C <= 65536 */
    float step = (d->f1 - d->f0) / c;
    float q = (d->x[r] - d->f0) / step;
    return (q > -1.0f && q < c) ? (int64_t)(int)q : 0;
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): W floats, 1.0 at the hot index, as the CPU
 * reference writes them. */
RAP_HD static inline void onehot_row_any(const rap_desc *d, int64_t r)
{
    int64_t w = d->width, i = onehot_index(d, r);
    float *y = d->y + r * w;
    for (int64_t j = 0; j < w; j++)
        y[j] = j == i ? 1.0f : 0.0f;
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_onehot_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    int64_t w = d->width;
    for (int64_t r = r0; r < r1; r++) {
        int64_t i = onehot_index(d, r);
        float *y = d->y + r * w;
        for (int64_t j = 0; j < w; j++)
            y[j] = j == i ? 1.0f : 0.0f;
    }
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void onehot_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t w = d.width;
    int64_t n = (r1 - r0) * w;
    for (int64_t e = RAP_OP_TID(); e < n; e += RAP_OP_STRIDE()) {
        int64_t r = r0 + e / w, j = e % w;
        d.y[r * w + j] = j == onehot_index(&d, r) ? 1.0f : 0.0f;
    }
}

/* ------------------------------------------------------------ launcher */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_onehot_gpu(const rap_desc *descs, int nd, int64_t r0,
                                           int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_wide_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(onehot_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
