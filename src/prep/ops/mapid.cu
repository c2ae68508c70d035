/*
 * mapid.cu -- mapid(map) (docs/OPS.md), sparse -> sparse: aux = map (int64,
 * naux entries); every id v becomes 0 <= v < naux ? map[v] : 0. SAME
 * offsets; null rows are empty and stay empty.
 *
 * Grid: (bx, nd), one id per thread over [xoff[r0], xoff[r1]) in a
 * grid-stride loop; bx from the rows, capped at ~4 blocks per SM overall.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus mapid_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline int64_t mapid_id(const int64_t *map, int64_t n, int64_t v)
{
    return (v >= 0 && v < n) ? map[v] : 0;
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): the one variant (SAME). */
RAP_HD static inline void mapid_row_any(const rap_desc *d, int64_t r)
{
    const int64_t *map = (const int64_t *)d->aux;
    for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
        d->yids[j] = mapid_id(map, d->naux, d->xids[j]);
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_mapid_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    const int64_t *map = (const int64_t *)d->aux;
    for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
        d->yids[j] = mapid_id(map, d->naux, d->xids[j]);
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void mapid_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    const int64_t *map = (const int64_t *)d.aux;
    int64_t b = d.xoff[r1];
    for (int64_t j = d.xoff[r0] + RAP_OP_TID(); j < b; j += RAP_OP_STRIDE())
        d.yids[j] = mapid_id(map, d.naux, d.xids[j]);
}

/* ------------------------------------------------------------ launcher */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_mapid_gpu(const rap_desc *descs, int nd, int64_t r0,
                                          int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(mapid_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
