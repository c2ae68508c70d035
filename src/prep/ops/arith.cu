/*
 * arith.cu -- `+ c` (add) and `* c` (mul) with a constant c = f0
 * (docs/OPS.md), dense -> dense, float32: y = x + c, y = x * c (one IEEE
 * operation each, so CPU and GPU agree). Null rows are written as 0.0f; a
 * NaN result is stored as the canonical NaN (mathf.h).
 *
 * Grid (both ops): (bx, nd), one row per thread (grid-stride),
 * bx = ceil(rows / 256) up to 65535.
 *
 * Row kernels: rows.cu includes this file with RAP_OP_ROWS_ONLY defined,
 * which compiles the elements plus add_row_any, mul_row_any (one row of any
 * non-COMPUTED variant) and leaves out the rest of the file.
 */
#include "prep/ops/mathf.h"

/* ------------------------------------------------------------ elements */

RAP_HD static inline void add_row(const rap_desc *d, int64_t r)
{
    d->y[r] = rap_row_null(d, r) ? 0.0f : rap_canon_nanf(d->x[r] + d->f0);
}

RAP_HD static inline void mul_row(const rap_desc *d, int64_t r)
{
    d->y[r] = rap_row_null(d, r) ? 0.0f : rap_canon_nanf(d->x[r] * d->f0);
}

#ifdef RAP_OP_ROWS_ONLY /* row kernels (rows.cu): compiled there only */

/* Row r (row kernels, rows.cu): the one variant. */
RAP_HD static inline void add_row_any(const rap_desc *d, int64_t r) { add_row(d, r); }

RAP_HD static inline void mul_row_any(const rap_desc *d, int64_t r) { mul_row(d, r); }

#else /* the op's own CPU reference, kernels, launchers */

/* ------------------------------------------------------------ CPU reference */

/* Write phases over rows [r0, r1) of one desc. Cannot fail. */
RAP_OP_EXPORT void rap_op_add_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++)
        add_row(d, r);
}

RAP_OP_EXPORT void rap_op_mul_cpu(const rap_desc *d, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++)
        mul_row(d, r);
}

/* ------------------------------------------------------------ kernels */

#ifdef __CUDACC__
static __global__ void add_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        add_row(&d, r);
}

static __global__ void mul_kernel(const rap_desc *descs, int64_t r0, int64_t r1)
{
    const rap_desc d = descs[blockIdx.y];
    for (int64_t r = r0 + RAP_OP_TID(); r < r1; r += RAP_OP_STRIDE())
        mul_row(&d, r);
}

/* ------------------------------------------------------------ launchers */

/* Write phase of nd descs (device array) over rows [r0, r1) on stream.
 * Returns RAP_ERR_CUDA on a launch failure. nd == 0 or r0 >= r1: nothing. */
RAP_OP_EXPORT rap_status rap_op_add_gpu(const rap_desc *descs, int nd, int64_t r0, int64_t r1,
                                        cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(add_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}

RAP_OP_EXPORT rap_status rap_op_mul_gpu(const rap_desc *descs, int nd, int64_t r0, int64_t r1,
                                        cudaStream_t stream)
{
    if (nd <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    RAP_OP_LAUNCH(mul_kernel, bx, descs, nd, r0, r1, stream);
    return RAP_OK;
}
#endif /* __CUDACC__ */
#endif /* RAP_OP_ROWS_ONLY */
