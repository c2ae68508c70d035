/*
 * sigrid_hash.cu -- sigrid_hash(salt, max) (docs/OPS.md): every id x of a
 * sparse column becomes floor_mod(hash_128_to_64(salt, twang_mix64(x)),
 * max), in [0, max); max == 1 gives 0. All arithmetic is uint64 and wraps.
 * The output shares the input's offsets (SAME): ids are written at the input's
 * positions; null rows are empty and stay empty.
 *
 * Grid: (bx, nd) with one id per thread over [xoff[r0], xoff[r1]) in a
 * grid-stride loop; bx from the rows, capped at ~4 blocks per SM overall.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus sigrid_hash_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/divu64.h"
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

/* Thomas Wang's 64-bit mix, as in folly / docs/OPS.md. */
RAP_HD static inline uint64_t sigrid_twang_mix64(uint64_t k)
{
    k = (~k) + (k << 21);
    k = k ^ (k >> 24);
    k = (k + (k << 3)) + (k << 8);
    k = k ^ (k >> 14);
    k = (k + (k << 2)) + (k << 4);
    k = k ^ (k >> 28);
    k = k + (k << 31);
    return k;
}

RAP_HD static inline uint64_t sigrid_hash_128_to_64(uint64_t upper, uint64_t lower)
{
    const uint64_t kmul = 0x9ddfea08eb382d69ULL;
    uint64_t a = (lower ^ upper) * kmul;
    a ^= (a >> 47);
    uint64_t b = (upper ^ a) * kmul;
    b ^= (b >> 47);
    b *= kmul;
    return b;
}

/* One id of desc d (salt i0, max i1 >= 1): in [0, max), the floor modulo
 * of the hash (never negative), by max's reciprocal when the desc has one
 * (divu64.h: the same integers as `%`). */
RAP_HD static inline int64_t sigrid_hash_id(const rap_desc *d, int64_t x)
{
    const int64_t max = d->i1;
    if (max == 1)
        return 0;
    int64_t h = (int64_t)sigrid_hash_128_to_64((uint64_t)d->i0, sigrid_twang_mix64((uint64_t)x));
    if (!(d->dinfo & RAP_DIVU64_SET)) {
        int64_t m = h % max;
        return m < 0 ? m + max : m;
    }
    /* C's h % max takes the sign of h: -(|h| mod max) for h < 0 */
    const uint64_t a = h < 0 ? 0 - (uint64_t)h : (uint64_t)h;
    const int64_t r = (int64_t)rap_modu64(a, (uint64_t)max, d->dmul, d->dinfo);
    return h < 0 && r ? max - r : r;
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): the one variant (SAME). */
RAP_HD static inline void sigrid_hash_row_any(const rap_desc *d, int64_t r)
{
    for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
        d->yids[j] = sigrid_hash_id(d, d->xids[j]);
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_sigrid_hash_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
        d->yids[j] = sigrid_hash_id(d, d->xids[j]);
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void sigrid_hash_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t b = d.xoff[r1];
    for (int64_t j = d.xoff[r0] + RAP_OP_TID(); j < b; j += RAP_OP_STRIDE())
        d.yids[j] = sigrid_hash_id(&d, d.xids[j]);
}

/* ------------------------------------------------------------ launcher */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_sigrid_hash_gpu(const rap_desc *descs, int nd, int64_t r0,
                                                int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(sigrid_hash_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
