/*
 * firstx.cu -- firstx(k) (docs/OPS.md), k = i0 >= 1, sparse -> sparse: keeps
 * the first min(k, len) ids of each list. Null rows are empty and stay
 * empty.
 *
 * Variants (by off_mode, see plan.c):
 *   SAME      no list can be longer than k (len1 input, or the input's
 *             ids_per_row <= k): ids copied
 *   COMPUTED  len[r] = min(k, input length); write copies that many ids
 *             to yids[yoff[r]..]
 *
 * Grids: write kernel (bx, nd), branching per desc (uniform per block):
 * SAME one id per thread over [xoff[r0], xoff[r1]), COMPUTED one row per
 * thread; bx from the rows, capped at ~4 blocks per SM overall (grid-stride
 * loops). Len kernel: one row per thread.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus firstx_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline int64_t firstx_len(const rap_desc *d, int64_t r)
{
    int64_t n = d->xoff[r + 1] - d->xoff[r];
    return n < d->i0 ? n : d->i0;
}

RAP_HD static inline void firstx_computed_row(const rap_desc *d, int64_t r)
{
    int64_t a = d->xoff[r], o = d->yoff[r], n = firstx_len(d, r);
    for (int64_t j = 0; j < n; j++)
        d->yids[o + j] = d->xids[a + j];
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): SAME copies the row's ids (an identity,
 * whose output is its input's buffers, is left alone); COMPUTED: nothing. */
RAP_HD static inline void firstx_row_any(const rap_desc *d, int64_t r)
{
    if (d->off_mode == RAP_OFF_COMPUTED || d->yids == d->xids)
        return;
    for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
        d->yids[j] = d->xids[j];
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_firstx_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    if (d->off_mode == RAP_OFF_COMPUTED) {
        for (int64_t r = r0; r < r1; r++)
            firstx_computed_row(d, r);
    } else {
        for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
            d->yids[j] = d->xids[j];
    }
}

/* Len phase (COMPUTED descs only; others left alone). */
RAP_OP_EXPORT void rap_op_firstx_len_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (d->off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0; r < r1; r++)
        d->len[r] = firstx_len(d, r);
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void firstx_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    if (d.off_mode == RAP_OFF_COMPUTED) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            firstx_computed_row(&d, r);
    } else {
        int64_t b = d.xoff[r1];
        for (int64_t j = d.xoff[r0] + tid; j < b; j += st)
            d.yids[j] = d.xids[j];
    }
}

static __global__ void firstx_len_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    if (d.off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        d.len[r] = firstx_len(&d, r);
}

/* ------------------------------------------------------------ launchers */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_firstx_gpu(const rap_desc *descs, int nd, int64_t r0,
                                           int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(firstx_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}

/* Len phase of nd COMPUTED descs over rows [r0, r1). */
RAP_OP_EXPORT rap_status rap_op_firstx_len_gpu(const rap_desc *descs, int nd, int64_t r0,
                                               int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(firstx_len_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
