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
RAP_OP_DECL(sigrid_hash)

#ifdef __cplusplus
static_assert(RAP_OP_COUNT == 15, "rap_op_impls lists 15 entries in rap_op_type order");
#else
_Static_assert(RAP_OP_COUNT == 15, "rap_op_impls lists 15 entries in rap_op_type order");
#endif

const rap_op_impl rap_op_impls[RAP_OP_COUNT] = {
    /* RAP_OP_INPUT       */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_FILL_NULL   */ RAP_OP_ENTRY2(fill_null),
    /* RAP_OP_CAST        */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_LOGIT       */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_BOXCOX      */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_LOG         */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_ADD         */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_MUL         */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_ONEHOT      */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_BUCKETIZE   */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_SIGRID_HASH */ RAP_OP_ENTRY(sigrid_hash),
    /* RAP_OP_FIRSTX      */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_CLAMP       */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_NGRAM       */ {NULL, NULL, NULL, NULL},
    /* RAP_OP_MAPID       */ {NULL, NULL, NULL, NULL},
};
