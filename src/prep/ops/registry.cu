/*
 * registry.cu -- rap_op_impls (op.h): the table of every op's CPU reference
 * and GPU launchers, indexed by rap_op_type.
 *
 * Each op file exports its functions with C linkage as rap_op_<name>_cpu,
 * _len_cpu, _gpu, _len_gpu (the len ones only where the op has COMPUTED
 * offsets). The table is built from function addresses rather than from
 * per-file rap_op_impl objects because C allows only constant expressions
 * in a static initializer. Positional (not designated) initializers, in
 * rap_op_type order, because this file is C++ under nvcc.
 */
#include "prep/ops/mathf.h"

#ifdef __CUDACC__
extern "C" {
long long rap_op_blocks_launched = 0; /* mathf.h */
}
#endif

#define RAP_OP_DECL_CPU(name)                                                    \
    RAP_OP_EXPORT void rap_op_##name##_cpu(const rap_desc *d, int64_t r0, int64_t r1);
#define RAP_OP_DECL_LEN_CPU(name)                                                \
    RAP_OP_EXPORT void rap_op_##name##_len_cpu(const rap_desc *d, int64_t r0, int64_t r1);

#ifdef RAP_HAVE_CUDA
#define RAP_OP_DECL_GPU(name)                                                    \
    RAP_OP_EXPORT rap_status rap_op_##name##_gpu(const rap_desc *descs, int nd,  \
                                                 int64_t r0, int64_t r1,        \
                                                 cudaStream_t stream);
#define RAP_OP_DECL_LEN_GPU(name)                                                \
    RAP_OP_EXPORT rap_status rap_op_##name##_len_gpu(const rap_desc *descs, int nd, \
                                                     int64_t r0, int64_t r1,     \
                                                     cudaStream_t stream);
#define RAP_OP_GPU(name) rap_op_##name##_gpu
#define RAP_OP_LEN_GPU(name) rap_op_##name##_len_gpu
#else
#define RAP_OP_DECL_GPU(name)
#define RAP_OP_DECL_LEN_GPU(name)
#define RAP_OP_GPU(name) NULL
#define RAP_OP_LEN_GPU(name) NULL
#endif

/* An op with a write phase only, and one with a len phase too. */
#define RAP_OP_DECL(name) RAP_OP_DECL_CPU(name) RAP_OP_DECL_GPU(name)
#define RAP_OP_DECL2(name) RAP_OP_DECL(name) RAP_OP_DECL_LEN_CPU(name) RAP_OP_DECL_LEN_GPU(name)
#define RAP_OP_ENTRY(name) {rap_op_##name##_cpu, NULL, RAP_OP_GPU(name), NULL}
#define RAP_OP_ENTRY2(name)                                                      \
    {rap_op_##name##_cpu, rap_op_##name##_len_cpu, RAP_OP_GPU(name), RAP_OP_LEN_GPU(name)}

RAP_OP_DECL2(fill_null)
RAP_OP_DECL2(cast)
RAP_OP_DECL(logit)
RAP_OP_DECL(boxcox)
RAP_OP_DECL(log)
RAP_OP_DECL(add)
RAP_OP_DECL(mul)
RAP_OP_DECL(onehot)
RAP_OP_DECL2(bucketize)
RAP_OP_DECL(sigrid_hash)
RAP_OP_DECL2(firstx)
RAP_OP_DECL(clamp)
RAP_OP_DECL2(ngram)
RAP_OP_DECL(mapid)

#ifdef __cplusplus
static_assert(RAP_OP_COUNT == 15, "rap_op_impls lists 15 entries in rap_op_type order");
#else
_Static_assert(RAP_OP_COUNT == 15, "rap_op_impls lists 15 entries in rap_op_type order");
#endif

const rap_op_impl rap_op_impls[RAP_OP_COUNT] = {
    /* RAP_OP_INPUT       */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_FILL_NULL   */ RAP_OP_ENTRY2(fill_null),
    /* RAP_OP_CAST        */ RAP_OP_ENTRY2(cast),
    /* RAP_OP_LOGIT       */ RAP_OP_ENTRY(logit),
    /* RAP_OP_BOXCOX      */ RAP_OP_ENTRY(boxcox),
    /* RAP_OP_LOG         */ RAP_OP_ENTRY(log),
    /* RAP_OP_ADD         */ RAP_OP_ENTRY(add),
    /* RAP_OP_MUL         */ RAP_OP_ENTRY(mul),
    /* RAP_OP_ONEHOT      */ RAP_OP_ENTRY(onehot),
    /* RAP_OP_BUCKETIZE   */ RAP_OP_ENTRY2(bucketize),
    /* RAP_OP_SIGRID_HASH */ RAP_OP_ENTRY(sigrid_hash),
    /* RAP_OP_FIRSTX      */ RAP_OP_ENTRY2(firstx),
    /* RAP_OP_CLAMP       */ RAP_OP_ENTRY(clamp),
    /* RAP_OP_NGRAM       */ RAP_OP_ENTRY2(ngram),
    /* RAP_OP_MAPID       */ RAP_OP_ENTRY(mapid),
};
