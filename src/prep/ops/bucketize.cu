/*
 * bucketize.cu -- bucketize(borders) (docs/OPS.md). aux = borders (naux >= 1,
 * non-decreasing, no value more than twice; plan.c checks). For a value v:
 *
 *   i = lower_bound(borders, v)   first i with borders[i] >= v, else naux
 *   result = i >= naux - 1 ? i : (v < borders[i + 1] ? i : i + 1)
 *
 * (borders [0, 2, 3, 5, 500, 1000], values 1, 2, 3, 4 -> 1, 1, 2, 3). The
 * search tests "borders[mid] >= v" literally, so a NaN value (never >=)
 * lands at naux, the last bucket.
 *
 * Variants (by the desc's in_kind and off_mode, see plan.c):
 *   dense input   float32 x against float borders (aux is float *); one id
 *                 per non-null row. ARANGE (input has no nulls): yids[r]
 *                 (a null row there would be written 0). COMPUTED (nullable
 *                 input): len[r] = null ? 0 : 1, then yids[yoff[r]].
 *   sparse input  (double)id against double borders (aux is double *);
 *                 SAME offsets: every id bucketized in place of the input's.
 *
 * Grids: write kernel (bx, nd), branching per desc (uniform per block): rows
 * one per thread (dense input) or ids one per thread over [xoff[r0],
 * xoff[r1]) (sparse input); bx from the rows, capped at ~4 blocks per SM
 * overall (grid-stride loops). Len kernel: one row per thread.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus bucketize_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline int64_t bucketize_f(const float *b, int64_t n, float v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (b[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo >= n - 1)
        return lo;
    return v < b[lo + 1] ? lo : lo + 1;
}

RAP_HD static inline int64_t bucketize_d(const double *b, int64_t n, double v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (b[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo >= n - 1)
        return lo;
    return v < b[lo + 1] ? lo : lo + 1;
}

RAP_HD static inline int64_t bucketize_row_id(const rap_desc *d, int64_t r)
{
    return bucketize_f((const float *)d->aux, d->naux, d->x[r]);
}

RAP_HD static inline void bucketize_arange_row(const rap_desc *d, int64_t r)
{
    d->yids[r] = rap_row_null(d, r) ? 0 : bucketize_row_id(d, r);
}

RAP_HD static inline void bucketize_computed_row(const rap_desc *d, int64_t r)
{
    if (!rap_row_null(d, r))
        d->yids[d->yoff[r]] = bucketize_row_id(d, r);
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r of any non-COMPUTED variant, as the CPU reference computes it (row
 * kernels, rows.cu); dense input COMPUTED: nothing. */
RAP_HD static inline void bucketize_row_any(const rap_desc *d, int64_t r)
{
    if (d->in_kind == RAP_SPARSE) {
        const double *b = (const double *)d->aux;
        for (int64_t j = d->xoff[r]; j < d->xoff[r + 1]; j++)
            d->yids[j] = bucketize_d(b, d->naux, (double)d->xids[j]);
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        bucketize_arange_row(d, r);
    }
}

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phase over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_bucketize_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (r0 >= r1)
        return;
    if (d->in_kind == RAP_SPARSE) {
        const double *b = (const double *)d->aux;
        for (int64_t j = d->xoff[r0]; j < d->xoff[r1]; j++)
            d->yids[j] = bucketize_d(b, d->naux, (double)d->xids[j]);
    } else if (d->off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0; r < r1; r++)
            bucketize_arange_row(d, r);
    } else {
        for (int64_t r = r0; r < r1; r++)
            bucketize_computed_row(d, r);
    }
}

/* Len phase (dense-input COMPUTED descs only; others left alone). */
RAP_OP_EXPORT void rap_op_bucketize_len_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    if (d->in_kind != RAP_DENSE || d->off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0; r < r1; r++)
        d->len[r] = rap_row_null(d, r) ? 0 : 1;
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void bucketize_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    if (d.in_kind == RAP_SPARSE) {
        const double *b = (const double *)d.aux;
        int64_t e = d.xoff[r1];
        for (int64_t j = d.xoff[r0] + tid; j < e; j += st)
            d.yids[j] = bucketize_d(b, d.naux, (double)d.xids[j]);
    } else if (d.off_mode == RAP_OFF_ARANGE) {
        for (int64_t r = r0 + tid; r < r1; r += st)
            bucketize_arange_row(&d, r);
    } else {
        for (int64_t r = r0 + tid; r < r1; r += st)
            bucketize_computed_row(&d, r);
    }
}

static __global__ void bucketize_len_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    if (d.in_kind != RAP_DENSE || d.off_mode != RAP_OFF_COMPUTED)
        return;
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        d.len[r] = rap_row_null(&d, r) ? 0 : 1;
}

/* ------------------------------------------------------------ launchers */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_bucketize_gpu(const rap_desc *descs, int nd, int64_t r0,
                                              int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = 1;
    RAP_TRY(rap_op_sparse_blocks(r1 - r0, nd, &bx));
    RAP_OP_LAUNCH(bucketize_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}

/* Len phase of nd COMPUTED descs over rows [r0, r1). */
RAP_OP_EXPORT rap_status rap_op_bucketize_len_gpu(const rap_desc *descs, int nd, int64_t r0,
                                                  int64_t r1, cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(bucketize_len_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
