/*
 * mlp_internal.h -- what mlp.cu (the layers) and mlp_tune.cu (algorithm
 * choice, timing, the tune cache) share. CUDA only: included by those two
 * .cu files, compiled by nvcc; each function's contract is at its
 * definition.
 */
#ifndef RAP_MODEL_GPU_MLP_INTERNAL_H
#define RAP_MODEL_GPU_MLP_INTERNAL_H

#include "model/gpu/gpu_model.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

/* One GEMM of a layer op as cuBLASLt is to run it (mlp.cu fills it). */
typedef struct {
    cublasOperation_t ta, tb;
    cudaDataType at, bt, dt;
    uint64_t ar, ac, br, bc, dr, dc;
    int64_t lda, ldb, ldd;
    bool n_in_a, n_in_d;
    const void *pa, *pb;
    void *pd;
    cublasLtEpilogue_t epi;
    const void *bias;
    int bias_type; /* cudaDataType, or -1: the default (D's type) */
    void *aux;
    int64_t aux_ld;
} gemm_spec;

/* What a tuning decision depends on (no pointers, only their alignments). */
typedef struct {
    int dev, compute, kind; /* kind 0: an algorithm; 1: fused or plain */
    uint64_t role;          /* kind 1: hash of the layer op's name */
    int ta, tb, at, bt, dt, epi, bias_type;
    uint64_t ar, ac, br, bc, dr, dc;
    int64_t lda, ldb, ldd, aux_ld, rows;
    uint32_t aa, ab, ad;
    bool bias, aux;
} tune_key;

typedef struct {
    tune_key key;
    bool found;                    /* kind 0: an algorithm exists; kind 1: plain won */
    cublasLtMatmulAlgo_t algo;     /* kind 0 */
} tune_entry;

typedef rap_status (*timed_fn)(rap_gpu *g, void *arg);

/* mlp_tune.cu */
void gemm_destroy(rap_gpu_gemm *x);
rap_status gemm_pick(rap_gpu *g, rap_gpu_gemm *x, bool *found);
bool tuning(void);
bool verbose(void);
rap_status gemm_run(rap_gpu *g, rap_gpu_gemm *x);
rap_status time_op(rap_gpu *g, timed_fn op, void *arg, float *ms);
tune_key key_of(const rap_gpu *g, const gemm_spec *s, int kind);
bool tune_find(const tune_key *k, tune_entry *e);
void tune_keep(const tune_key *k, bool found, const cublasLtMatmulAlgo_t *algo);
rap_status gemm_build(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s, bool *ok);
rap_status gemm_make(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s, bool *ok);
rap_status gemm_rows(rap_gpu *g, rap_gpu_gemm *x, int64_t rows);

/* mlp.cu */
const char *epi_name(uint32_t e);

#endif
#endif
