/*
 * op.h -- the contract between the executor (src/prep/exec*.c|cu) and the
 * op files (src/prep/ops/<op>.cu, one per op: CPU reference, kernels,
 * launcher).
 *
 * The executor turns every live plan node into one rap_desc (its input
 * column, its output buffers, its parameters converted once). A fused kernel
 * is a table of descs of one (op, variant); it runs over a row range
 * [r0, r1) that is the same for every desc of the table (all columns of a
 * batch have the same rows).
 *
 * Row conventions (rap.h): a null dense row holds 0 and valid 0; a null
 * sparse row is an empty list with valid 0; valid == NULL means no row is
 * null. Ops never write valid: an output shares its input's valid array,
 * except fill_null whose output has none. Outputs of null rows: dense and
 * vector rows are written as 0; sparse rows stay empty.
 *
 * Sparse outputs by offset mode (rap_off_mode of the node):
 *   SAME      yoff == xoff (shared); ids written at the input's positions.
 *   ARANGE    yoff == 0,1,2,..; row r's one id written at yids[r].
 *   COMPUTED  two phases. len phase: len[r] = output length of row r for
 *             r in [r0, r1). Then the executor turns lengths into yoff
 *             (yoff[0] = 0, exclusive prefix sum), and the write phase
 *             writes row r's ids at yids[yoff[r]..].
 *
 * Bit identity: integer outputs are identical on CPU and GPU; float outputs
 * are too, because all float math goes through mathf.h's portable functions
 * and these files are compiled without FMA contraction.
 */
#ifndef RAP_OP_H
#define RAP_OP_H

#include "core/core.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef __CUDACC__
#define RAP_HD __host__ __device__
#else
#define RAP_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* input column */
    const float *x;         /* dense (B) */
    const int64_t *xoff;    /* sparse (B+1) */
    const int64_t *xids;    /* sparse (xoff[rows]) */
    const uint8_t *xvalid;  /* (B) or NULL */
    /* output column */
    float *y;               /* dense (B) or vector (B, W) */
    int64_t *yoff;          /* sparse (B+1): see offset modes above */
    int64_t *yids;          /* sparse (B * ids_per_row) */
    int64_t *len;           /* COMPUTED: (B+1) scratch for the len phase */
    /* parameters (rap_node's, converted once):
     *   FILL_NULL f0 (dense) | i0 (sparse)     CAST i0 = target kind
     *   LOGIT f0 = eps   BOXCOX f0 = lambda    ADD/MUL f0 = c
     *   ONEHOT f0 = low, f1 = high, i0 = C     CLAMP f0,f1 (dense) | i0,i1 (sparse)
     *   SIGRID_HASH i0 = salt, i1 = max        FIRSTX i0 = k   NGRAM i0 = n
     *   BUCKETIZE aux = borders: float (dense input) | double (sparse input)
     *   MAPID aux = map (int64) */
    float f0, f1;
    int64_t i0, i1;
    const void *aux;        /* (naux) */
    int64_t naux;
    int32_t width;          /* W of a vector output */
    int32_t off_mode;       /* rap_off_mode of the output */
    int32_t in_kind;        /* rap_kind of the input */
    int32_t out_kind;       /* rap_kind of the output */
    int32_t op;             /* rap_op_type (row kernels dispatch on it) */
    int32_t pack_stride;    /* row kernels, pack != NULL: floats between packed rows */
    uint32_t dinfo;         /* SIGRID_HASH: i1's reciprocal (divu64.h), with dmul; 0: none
                             * (the op then reduces by `%`: the same ids) */
    uint64_t dmul;
    float *pack;            /* row kernels: NULL, or where row r's W output floats are
                             * also written: pack[r * pack_stride + w] (the model's
                             * packed dense input, rap_prep_pack_dense) */
} rap_desc;

/* CPU reference over rows [r0, r1) of one desc (write phase). */
typedef void (*rap_op_cpu_fn)(const rap_desc *d, int64_t r0, int64_t r1);
#ifdef RAP_HAVE_CUDA
/* One fused launch over descs[0..nd) (a device array), rows [r0, r1). */
typedef rap_status (*rap_op_gpu_fn)(const rap_desc *descs_dev, int nd, int64_t r0, int64_t r1,
                                    cudaStream_t stream);
#else
typedef void *rap_op_gpu_fn;
#endif

typedef struct {
    rap_op_cpu_fn cpu;      /* write phase (every op) */
    rap_op_cpu_fn len_cpu;  /* len phase; NULL for ops that never compute offsets */
    rap_op_gpu_fn gpu;
    rap_op_gpu_fn len_gpu;
} rap_op_impl;

/* Row kernels (ops/rows.cu; docs/EXECUTOR.md "Row kernels"): several
 * groups of descs of any op types, one launch. Group g is
 * descs[heads[g] .. heads[g+1]) (heads: (ng+1) indices relative to
 * descs), in dependency order: a desc may read the output of an earlier
 * desc of its group. One thread owns a row for every desc of its group, so
 * the group's descs run one after the other on that row with no barrier.
 * Every desc's output is row-local: dense or vector, or sparse with SAME
 * or ARANGE offsets (never COMPUTED). Identities (firstx SAME) may appear
 * and are copies. A desc with pack != NULL also copies its row into the
 * packed dense input (packing in place: no packing launch). */
/* CPU reference: group g over rows [r0, r1), desc after desc. */
void rap_op_rows_cpu(const rap_desc *descs, const int32_t *heads, int g, int64_t r0,
                                   int64_t r1);
#ifdef RAP_HAVE_CUDA
/* One launch over groups [0, ng) of heads (a device array; descs too),
 * rows [r0, r1). ng == 0 or r0 >= r1: nothing. */
rap_status rap_op_rows_gpu(const rap_desc *descs_dev, const int32_t *heads_dev,
                                         int ng, int64_t r0, int64_t r1, cudaStream_t stream);
/* The same with the kernel before 2026-12-04 (the op chosen again for
 * every row): the executor's A/B variant, RAP_PREP_ROWS=each. */
rap_status rap_op_rows_gpu_each(const rap_desc *descs_dev, const int32_t *heads_dev, int ng,
                                int64_t r0, int64_t r1, cudaStream_t stream);
#endif

/* Indexed by rap_op_type (ops/registry.c). Entry RAP_OP_INPUT is empty. */
extern const rap_op_impl rap_op_impls[RAP_OP_COUNT];

#ifdef __cplusplus
}
#endif
#endif /* RAP_OP_H */
