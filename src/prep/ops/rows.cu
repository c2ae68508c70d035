/*
 * rows.cu -- row kernels (op.h "Row kernels", docs/EXECUTOR.md): groups of
 * descs of any op types in one launch. Group g is descs[heads[g] ..
 * heads[g+1]) in dependency order; one thread owns a row and runs every
 * desc of its group on it, one after the other, so a desc reads what an
 * earlier desc of the group wrote to that row with no barrier. Every desc
 * is row-local (dense, vector, or sparse SAME / ARANGE; never COMPUTED).
 *
 * A deliberate unity include: this file #includes every op's .cu file with
 * RAP_OP_ROWS_ONLY defined, which keeps their static element functions,
 * adds their <op>_row_any (compiled only here) and drops their exports and
 * kernels (compiled once, in their own files), so that one dispatch here
 * inlines every op's row code into the CPU loop and into the one kernel.
 *
 * Grid: (bx, min(ng, 65535)) of 256 threads, blockIdx.y = the group;
 * threads cover rows [r0, r1) in a grid-stride loop whose sequence is the
 * same for every desc of the group (a thread meets the same rows each
 * time); bx = ceil(rows / 256) up to 65535.
 */
#define RAP_OP_ROWS_ONLY
#include "prep/ops/arith.cu"
#include "prep/ops/boxcox.cu"
#include "prep/ops/bucketize.cu"
#include "prep/ops/cast.cu"
#include "prep/ops/clamp.cu"
#include "prep/ops/fill_null.cu"
#include "prep/ops/firstx.cu"
#include "prep/ops/log.cu"
#include "prep/ops/logit.cu"
#include "prep/ops/mapid.cu"
#include "prep/ops/ngram.cu"
#include "prep/ops/onehot.cu"
#include "prep/ops/sigrid_hash.cu"

/* ------------------------------------------------------------ dispatch */

/* Row r of desc d, by its op type (RAP_OP_INPUT or an unknown op: nothing). */
RAP_HD static inline void rap_row_dispatch(const rap_desc *d, int64_t r)
{
    switch ((rap_op_type)d->op) {
    case RAP_OP_FILL_NULL: fill_null_row_any(d, r); break;
    case RAP_OP_CAST: cast_row_any(d, r); break;
    case RAP_OP_LOGIT: logit_row_any(d, r); break;
    case RAP_OP_BOXCOX: boxcox_row_any(d, r); break;
    case RAP_OP_LOG: log_row_any(d, r); break;
    case RAP_OP_ADD: add_row_any(d, r); break;
    case RAP_OP_MUL: mul_row_any(d, r); break;
    case RAP_OP_ONEHOT: onehot_row_any(d, r); break;
    case RAP_OP_BUCKETIZE: bucketize_row_any(d, r); break;
    case RAP_OP_SIGRID_HASH: sigrid_hash_row_any(d, r); break;
    case RAP_OP_FIRSTX: firstx_row_any(d, r); break;
    case RAP_OP_CLAMP: clamp_row_any(d, r); break;
    case RAP_OP_NGRAM: ngram_row_any(d, r); break;
    case RAP_OP_MAPID: mapid_row_any(d, r); break;
    default: break;
    }
}

/* Row r's copy of desc d's output into the packed dense input, when d has
 * one (null rows hold 0 in y: op.h, as pack.h packs them). */
RAP_HD static inline void rap_row_pack(const rap_desc *d, int64_t r)
{
    if (d->pack) {
        const int W = d->out_kind == RAP_VECTOR ? d->width : 1;
        for (int w = 0; w < W; w++)
            d->pack[r * d->pack_stride + w] = d->y[r * W + w];
    }
}

/* Row r of desc d, then its packed copy. */
RAP_HD static inline void rap_row_run(const rap_desc *d, int64_t r)
{
    rap_row_dispatch(d, r);
    rap_row_pack(d, r);
}

/* ------------------------------------------------------------ CPU reference */

/* Group g of heads over rows [r0, r1): desc after desc, each over all the
 * rows (the same results as row after row, since every desc is row-local).
 * Cannot fail. */
RAP_OP_EXPORT void rap_op_rows_cpu(const rap_desc *descs, const int32_t *heads, int g,
                                   int64_t r0, int64_t r1)
{
    for (int32_t s = heads[g]; s < heads[g + 1]; s++)
        for (int64_t r = r0; r < r1; r++)
            rap_row_run(&descs[s], r);
}

/* ------------------------------------------------------------ kernel */

#ifdef __CUDACC__
/* Rows r, r + st, ... below r1 of desc d: the op chosen once, then its row
 * function and the packed copy for each row (what rap_row_run does a row:
 * the same code, so the same bits as the CPU reference). Choosing once
 * keeps each op's loads of d's fields and its row-invariant arithmetic
 * out of the other ops' way: with the choice inside the row loop every
 * desc loaded all of rap_desc and ran onehot's division before its rows. */
#define RAP_ROWS_CASE(OP, FN)                  \
    case OP:                                   \
        for (int64_t q = r; q < r1; q += st) { \
            FN(d, q);                          \
            rap_row_pack(d, q);                \
        }                                      \
        break
static __device__ __forceinline__ void rows_of_desc(const rap_desc *d, int64_t r, int64_t r1,
                                                    int64_t st)
{
    switch ((rap_op_type)d->op) {
        RAP_ROWS_CASE(RAP_OP_FILL_NULL, fill_null_row_any);
        RAP_ROWS_CASE(RAP_OP_CAST, cast_row_any);
        RAP_ROWS_CASE(RAP_OP_LOGIT, logit_row_any);
        RAP_ROWS_CASE(RAP_OP_BOXCOX, boxcox_row_any);
        RAP_ROWS_CASE(RAP_OP_LOG, log_row_any);
        RAP_ROWS_CASE(RAP_OP_ADD, add_row_any);
        RAP_ROWS_CASE(RAP_OP_MUL, mul_row_any);
        RAP_ROWS_CASE(RAP_OP_ONEHOT, onehot_row_any);
        RAP_ROWS_CASE(RAP_OP_BUCKETIZE, bucketize_row_any);
        RAP_ROWS_CASE(RAP_OP_SIGRID_HASH, sigrid_hash_row_any);
        RAP_ROWS_CASE(RAP_OP_FIRSTX, firstx_row_any);
        RAP_ROWS_CASE(RAP_OP_CLAMP, clamp_row_any);
        RAP_ROWS_CASE(RAP_OP_NGRAM, ngram_row_any);
        RAP_ROWS_CASE(RAP_OP_MAPID, mapid_row_any);
    default:
        for (int64_t q = r; q < r1; q += st)
            rap_row_pack(d, q);
        break;
    }
}
#undef RAP_ROWS_CASE

/* Group g0 + blockIdx.y. The row loop is the same for every desc, so the
 * rows a thread writes for one desc are the rows it reads for the next. */
static __global__ void rows_kernel(const rap_desc *descs, const int32_t *heads, int g0,
                                   int64_t r0, int64_t r1)
{
    int g = g0 + (int)blockIdx.y;
    int32_t s1 = heads[g + 1];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    for (int32_t s = heads[g]; s < s1; s++)
        rows_of_desc(&descs[s], r0 + tid, r1, st);
}

/* The kernel before 2026-12-04 (RAP_PREP_ROWS=each, for A/B runs): the op
 * chosen again for every row, from a copy of the whole desc. */
static __global__ void rows_kernel_each(const rap_desc *descs, const int32_t *heads, int g0,
                                        int64_t r0, int64_t r1)
{
    int g = g0 + (int)blockIdx.y;
    int32_t s1 = heads[g + 1];
    int64_t tid = RAP_OP_TID(), st = RAP_OP_STRIDE();
    for (int32_t s = heads[g]; s < s1; s++) {
        const rap_desc d = descs[s];
        for (int64_t r = r0 + tid; r < r1; r += st)
            rap_row_run(&d, r);
    }
}

/* ------------------------------------------------------------ launcher */

/* Groups [0, ng) over rows [r0, r1) on stream with the kernel each picks
 * (rows_kernel_each or rows_kernel), one launch per 65535 groups. */
static rap_status rows_launch(bool each, const rap_desc *descs_dev, const int32_t *heads_dev,
                              int ng, int64_t r0, int64_t r1, cudaStream_t stream)
{
    if (ng <= 0 || r0 >= r1)
        return RAP_OK;
    unsigned bx = rap_op_blocks(r1 - r0, RAP_OP_MAX_BX);
    for (int b = 0; b < ng; b += RAP_OP_GRID_Y) {
        int ny = ng - b < RAP_OP_GRID_Y ? ng - b : RAP_OP_GRID_Y;
        if (each)
            rows_kernel_each<<<dim3(bx, (unsigned)ny), RAP_OP_THREADS, 0, stream>>>(
                descs_dev, heads_dev, b, r0, r1);
        else
            rows_kernel<<<dim3(bx, (unsigned)ny), RAP_OP_THREADS, 0, stream>>>(
                descs_dev, heads_dev, b, r0, r1);
        RAP_CUDA_LAUNCHED();
        __atomic_fetch_add(&rap_op_blocks_launched, (long long)bx * ny, __ATOMIC_RELAXED);
    }
    return RAP_OK;
}

/* Groups [0, ng) of heads (device arrays, descs too) over rows [r0, r1) on
 * stream. Returns RAP_ERR_CUDA on a launch failure. ng <= 0 or r0 >= r1:
 * nothing. */
RAP_OP_EXPORT rap_status rap_op_rows_gpu(const rap_desc *descs_dev, const int32_t *heads_dev,
                                         int ng, int64_t r0, int64_t r1, cudaStream_t stream)
{
    return rows_launch(false, descs_dev, heads_dev, ng, r0, r1, stream);
}

RAP_OP_EXPORT rap_status rap_op_rows_gpu_each(const rap_desc *descs_dev, const int32_t *heads_dev,
                                              int ng, int64_t r0, int64_t r1, cudaStream_t stream)
{
    return rows_launch(true, descs_dev, heads_dev, ng, r0, r1, stream);
}
#endif /* __CUDACC__ */
