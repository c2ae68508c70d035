/*
 * mlp.cu -- MLP layers on cuBLASLt.
 *
 * Row-major activations (n, ld) are column-major (ld, n) matrices, and a
 * row-major weight (out, in) is column-major (in, out), so for a layer
 *   forward   Y^T (out, n) = op_T(W) (out, in) * X^T (in, n)  [+ bias, ReLU]
 *   weights   dW  (in, out) = X^T (in, n) * op_T(dA^T) (n, out)  [BGRADB: db]
 *   inputs    dX^T (in, n) = W (in, out) * dA^T (out, n)  [DRELU: prev mask]
 * with dA the gradient of the layer's pre-activation (ReLU applied).
 *
 * At create every GEMM takes the most fused epilogue the heuristics accept:
 * forward RELU_AUX_BIAS (bitmask for the next layer's backward) > RELU_BIAS
 * / BIAS > plain + bias_act_kernel; dW with BGRADB > plain + a column-sum
 * kernel; dX with DRELU (the previous layer's bitmask) > plain +
 * drelu_kernel. In BF16 the bias is tried as fp32 (master) then as the bf16
 * copy. Algorithms are picked once for B rows; when a batch has fewer rows
 * the layouts are resized and the algorithm re-checked (host only).
 */
#include "model/gpu/gpu_model.h"

#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define MLP_THREADS 256

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

static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 1 && ((uintptr_t)p % al) != 0)
        al /= 2;
    return al;
}

static void gemm_destroy(rap_gpu_gemm *x)
{
    if (x->a)
        cublasLtMatrixLayoutDestroy(x->a);
    if (x->b)
        cublasLtMatrixLayoutDestroy(x->b);
    if (x->d)
        cublasLtMatrixLayoutDestroy(x->d);
    if (x->desc)
        cublasLtMatmulDescDestroy(x->desc);
    memset(x, 0, sizeof *x);
}

/* Best algorithm for the current layouts; *found false when none. */
static rap_status gemm_pick(rap_gpu *g, rap_gpu_gemm *x, bool *found)
{
    *found = false;
    cublasLtMatmulPreference_t pref = NULL;
    RAP_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = RAP_GPU_WS_BYTES;
    uint32_t aa = align_of(x->pa), ab = align_of(x->pb), ad = align_of(x->pd);
    cublasStatus_t s =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref);
        return rap_fail(RAP_ERR_CUDA, "%s:%d: cublasLtMatmulPreferenceSetAttribute: status %d",
                        __FILE__, __LINE__, (int)s);
    }
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    memset(&res, 0, sizeof res);
    s = cublasLtMatmulAlgoGetHeuristic(g->lt, x->desc, x->a, x->b, x->d, x->d, pref, 1, &res,
                                       &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_SUCCESS && n > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        x->algo = res.algo;
        *found = true;
    }
    return RAP_OK;
}

#define DESC_SET(attr, val)                                                              \
    do {                                                                                 \
        if (cublasLtMatmulDescSetAttribute(x->desc, attr, &(val), sizeof(val)) !=         \
            CUBLAS_STATUS_SUCCESS) {                                                     \
            gemm_destroy(x);                                                             \
            return RAP_OK; /* not supported here: *ok stays false */                     \
        }                                                                                \
    } while (0)

/* Builds x from s for B rows; *ok false (x destroyed) when the heuristics
 * offer no algorithm for it. */
static rap_status gemm_make(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s, bool *ok)
{
    *ok = false;
    memset(x, 0, sizeof *x);
    RAP_CUBLAS_TRY(cublasLtMatmulDescCreate(&x->desc, g->compute, CUDA_R_32F));
    int32_t ta = s->ta, tb = s->tb;
    uint32_t epi = s->epi;
    DESC_SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    DESC_SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (s->bias) {
        const void *bp = s->bias;
        DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
        if (s->bias_type >= 0) {
            int32_t bt = s->bias_type;
            DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt);
        }
    }
    if (s->aux) {
        void *ap = s->aux;
        int64_t ld = s->aux_ld;
        DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ap);
        DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    }
    cublasStatus_t st = cublasLtMatrixLayoutCreate(&x->a, s->at, s->ar, s->ac, s->lda);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&x->b, s->bt, s->br, s->bc, s->ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&x->d, s->dt, s->dr, s->dc, s->ldd);
    if (st != CUBLAS_STATUS_SUCCESS) {
        gemm_destroy(x);
        return rap_fail(RAP_ERR_CUDA, "%s:%d: cublasLtMatrixLayoutCreate: status %d", __FILE__,
                        __LINE__, (int)st);
    }
    x->pa = s->pa;
    x->pb = s->pb;
    x->pd = s->pd;
    x->n_in_a = s->n_in_a;
    x->n_in_d = s->n_in_d;
    x->rows = g->B;
    bool found = false;
    rap_status rs = gemm_pick(g, x, &found);
    if (rs != RAP_OK || !found) {
        gemm_destroy(x);
        return rs;
    }
    x->ready = true;
    *ok = true;
    return RAP_OK;
}

static rap_status gemm_run(rap_gpu *g, rap_gpu_gemm *x)
{
    const float one = 1.0f, zero = 0.0f;
    RAP_CUBLAS_TRY(cublasLtMatmul(g->lt, x->desc, &one, x->pa, x->a, x->pb, x->b, &zero, x->pd,
                                  x->d, x->pd, x->d, &x->algo, g->ws, RAP_GPU_WS_BYTES,
                                  g->stream));
    return RAP_OK;
}

static rap_status gemm_rows(rap_gpu *g, rap_gpu_gemm *x, int64_t rows)
{
    if (!x->ready || x->rows == rows)
        return RAP_OK;
    uint64_t n = (uint64_t)rows;
    RAP_CUBLAS_TRY(
        cublasLtMatrixLayoutSetAttribute(x->b, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    if (x->n_in_a)
        RAP_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(x->a, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    if (x->n_in_d)
        RAP_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(x->d, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    x->rows = rows;
    cublasLtMatmulHeuristicResult_t chk;
    memset(&chk, 0, sizeof chk);
    if (cublasLtMatmulAlgoCheck(g->lt, x->desc, x->a, x->b, x->d, x->d, &x->algo, &chk) ==
            CUBLAS_STATUS_SUCCESS &&
        chk.workspaceSize <= RAP_GPU_WS_BYTES)
        return RAP_OK;
    bool found = false;
    RAP_TRY(gemm_pick(g, x, &found));
    if (!found)
        return rap_fail(RAP_ERR_CUDA, "GPU model: cuBLASLt has no algorithm for a layer GEMM "
                                      "at %lld rows",
                        (long long)rows);
    return RAP_OK;
}

/* ------------------------------------------------------ fallback kernels */

template <typename T> static __device__ __forceinline__ float ld_f(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld_f<float>(const float *p, int64_t i)
{
    return p[i];
}
template <>
__device__ __forceinline__ float ld_f<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
static __device__ __forceinline__ void st_f(float *p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void st_f(__nv_bfloat16 *p, int64_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

/* y[r*ld + o] = [relu](y + b[o]) for r < rows, o < out. */
template <typename T>
static __global__ void bias_act_kernel(T *y, int64_t ld, int64_t rows, int out,
                                       const float *__restrict__ b, int relu)
{
    const int64_t n = rows * out;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / out;
        const int o = (int)(i - r * out);
        float v = ld_f(y, r * ld + o) + b[o];
        if (relu && !(v > 0.0f))
            v = 0.0f;
        st_f(y, r * ld + o, v);
    }
}

/* da[r*out + o] = y[r*ldy + o] > 0 ? da : 0. */
template <typename T, typename TY>
static __global__ void drelu_kernel(T *da, int64_t rows, int out, const TY *__restrict__ y,
                                    int64_t ldy)
{
    const int64_t n = rows * out;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / out;
        const int o = (int)(i - r * out);
        if (!(ld_f(y, r * ldy + o) > 0.0f))
            st_f(da, i, 0.0f);
    }
}

/* part[s*cols + c] = sum of da[r*cols + c] over the rows of split s.
 * Block (32, 8); grid (ceil(cols/32), S). */
template <typename T>
static __global__ void colsum_kernel(const T *__restrict__ da, int64_t rows, int cols,
                                     float *part)
{
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows;
             r += (int64_t)gridDim.y * 8)
            s += ld_f(da, r * cols + c);
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++)
            t += sm[k][threadIdx.x];
        part[(int64_t)blockIdx.y * cols + c] = t;
    }
}

static __global__ void colsum_final_kernel(const float *__restrict__ part, int S, int cols,
                                           float *db)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float t = 0.0f;
    for (int s = 0; s < S; s++)
        t += part[(int64_t)s * cols + c];
    db[c] = t;
}

static rap_status colsum(rap_gpu *g, const void *da, int64_t rows, int cols, float *db)
{
    int S = (int)((rows + 63) / 64);
    if (S > 256)
        S = 256;
    if (S < 1)
        S = 1;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)S), block(32, 8);
    if (g->bf16)
        colsum_kernel<__nv_bfloat16>
            <<<grid, block, 0, g->stream>>>((const __nv_bfloat16 *)da, rows, cols, g->colsum);
    else
        colsum_kernel<float><<<grid, block, 0, g->stream>>>((const float *)da, rows, cols,
                                                            g->colsum);
    RAP_CUDA_LAUNCHED();
    colsum_final_kernel<<<(cols + 255) / 256, 256, 0, g->stream>>>(g->colsum, S, cols, db);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* -------------------------------------------------------------- set up */

/* RAP_GPU_UNFUSED=1 in the environment: plain GEMMs and the fallback
 * kernels only (to tell an epilogue problem from anything else). */
static bool unfused(void)
{
    const char *e = getenv("RAP_GPU_UNFUSED");
    return e && *e && *e != '0';
}

static rap_status setup_fwd(rap_gpu *g, rap_gpu_layer *l)
{
    gemm_spec s;
    memset(&s, 0, sizeof s);
    s.ta = CUBLAS_OP_T;
    s.tb = CUBLAS_OP_N;
    s.at = g->act;
    s.ar = (uint64_t)l->in;
    s.ac = (uint64_t)l->out;
    s.lda = l->ldw;
    s.pa = l->wc;
    s.bt = g->act;
    s.br = (uint64_t)l->in;
    s.bc = (uint64_t)g->B;
    s.ldb = l->ldx;
    s.pb = l->x;
    s.dt = l->ytype;
    s.dr = (uint64_t)l->out;
    s.dc = (uint64_t)g->B;
    s.ldd = l->ldy;
    s.pd = l->y;
    s.n_in_d = true;
    bool ok = false;
    /* (epilogue, aux, bias pointer, bias type) candidates, most fused first */
    const bool d32 = l->ytype == CUDA_R_32F;
    for (int aux = (l->relu && l->want_aux) ? 1 : 0; aux >= 0 && !ok && !unfused(); aux--) {
        for (int bv = 0; bv < (g->bf16 && !d32 ? 2 : 1) && !ok; bv++) {
            s.epi = l->relu ? (aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS)
                            : CUBLASLT_EPILOGUE_BIAS;
            s.bias = (g->bf16 && !d32 && bv == 1) ? l->bc : l->b;
            s.bias_type = (g->bf16 && !d32 && bv == 0) ? (int)CUDA_R_32F : -1;
            s.aux = aux ? l->aux : NULL;
            s.aux_ld = aux ? l->aux_ld : 0;
            RAP_TRY(gemm_make(g, &l->fwd, &s, &ok));
            if (ok) {
                l->fwd_bias = true;
                l->fwd_aux = aux == 1;
            }
        }
    }
    if (!ok) {
        s.epi = CUBLASLT_EPILOGUE_DEFAULT;
        s.bias = NULL;
        s.bias_type = -1;
        s.aux = NULL;
        RAP_TRY(gemm_make(g, &l->fwd, &s, &ok));
        l->fwd_bias = l->fwd_aux = false;
    }
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the forward GEMM of a "
                        "(%d -> %d) layer at %lld rows",
                        l->in, l->out, (long long)g->B);
    return RAP_OK;
}

static rap_status setup_bw(rap_gpu *g, rap_gpu_layer *l)
{
    gemm_spec s;
    memset(&s, 0, sizeof s);
    s.ta = CUBLAS_OP_N;
    s.tb = CUBLAS_OP_T;
    s.at = g->act;
    s.ar = (uint64_t)l->in;
    s.ac = (uint64_t)g->B;
    s.lda = l->ldx;
    s.pa = l->x;
    s.n_in_a = true;
    s.bt = g->act;
    s.br = (uint64_t)l->out;
    s.bc = (uint64_t)g->B;
    s.ldb = l->out;
    s.pb = l->da;
    s.dt = CUDA_R_32F;
    s.dr = (uint64_t)l->in;
    s.dc = (uint64_t)l->out;
    s.ldd = l->ldw;
    s.pd = l->dw;
    s.epi = CUBLASLT_EPILOGUE_BGRADB;
    s.bias = l->db;
    s.bias_type = -1;
    bool ok = false;
    if (!unfused())
        RAP_TRY(gemm_make(g, &l->bw, &s, &ok));
    l->bw_bgrad = ok;
    if (!ok) {
        s.epi = CUBLASLT_EPILOGUE_DEFAULT;
        s.bias = NULL;
        RAP_TRY(gemm_make(g, &l->bw, &s, &ok));
    }
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the weight-gradient GEMM "
                        "of a (%d -> %d) layer",
                        l->in, l->out);
    return RAP_OK;
}

static rap_status setup_bx(rap_gpu *g, rap_gpu_layer *l, const rap_gpu_layer *prev)
{
    gemm_spec s;
    memset(&s, 0, sizeof s);
    s.ta = CUBLAS_OP_N;
    s.tb = CUBLAS_OP_N;
    s.at = g->act;
    s.ar = (uint64_t)l->in;
    s.ac = (uint64_t)l->out;
    s.lda = l->ldw;
    s.pa = l->wc;
    s.bt = g->act;
    s.br = (uint64_t)l->out;
    s.bc = (uint64_t)g->B;
    s.ldb = l->out;
    s.pb = l->da;
    s.dt = g->act;
    s.dr = (uint64_t)l->in;
    s.dc = (uint64_t)g->B;
    s.ldd = l->lddx;
    s.pd = l->dx;
    s.n_in_d = true;
    bool ok = false;
    l->bx_drelu = false;
    if (prev && prev->relu && prev->fwd_aux && !unfused()) {
        s.epi = CUBLASLT_EPILOGUE_DRELU;
        s.aux = prev->aux;
        s.aux_ld = prev->aux_ld;
        RAP_TRY(gemm_make(g, &l->bx, &s, &ok));
        l->bx_drelu = ok;
    }
    if (!ok) {
        s.epi = CUBLASLT_EPILOGUE_DEFAULT;
        s.aux = NULL;
        s.aux_ld = 0;
        RAP_TRY(gemm_make(g, &l->bx, &s, &ok));
    }
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the input-gradient GEMM "
                        "of a (%d -> %d) layer",
                        l->in, l->out);
    return RAP_OK;
}

static rap_status setup_mlp(rap_gpu *g, rap_gpu_layer *L, int n)
{
    for (int i = 0; i < n; i++)
        RAP_TRY(setup_fwd(g, &L[i]));
    for (int i = 0; i < n; i++) {
        RAP_TRY(setup_bw(g, &L[i]));
        if (L[i].need_dx)
            RAP_TRY(setup_bx(g, &L[i], i > 0 ? &L[i - 1] : NULL));
    }
    return RAP_OK;
}

rap_status rap_gpu_mlp_setup(rap_gpu *g)
{
    RAP_TRY(setup_mlp(g, g->bot, g->n_bot));
    RAP_TRY(setup_mlp(g, g->top, g->n_top));
    g->cur_rows = g->B;
    int fused = 0, total = 0;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            fused += L[i].fwd_bias + L[i].bw_bgrad + (L[i].bx_drelu || i == 0);
            total += 3;
        }
    }
    rap_info("GPU model: %d of %d GEMM epilogues fused%s", fused, total,
             unfused() ? " (RAP_GPU_UNFUSED)" : "");
    return RAP_OK;
}

rap_status rap_gpu_mlp_set_rows(rap_gpu *g, int64_t rows)
{
    if (rows == g->cur_rows)
        return RAP_OK;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            RAP_TRY(gemm_rows(g, &L[i].fwd, rows));
            RAP_TRY(gemm_rows(g, &L[i].bw, rows));
            RAP_TRY(gemm_rows(g, &L[i].bx, rows));
        }
    }
    g->cur_rows = rows;
    return RAP_OK;
}

void rap_gpu_mlp_destroy(rap_gpu *g)
{
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        for (int i = 0; i < RAP_MAX_LAYERS; i++) {
            gemm_destroy(&L[i].fwd);
            gemm_destroy(&L[i].bw);
            gemm_destroy(&L[i].bx);
        }
    }
}

/* ------------------------------------------------------------- phases */

rap_status rap_gpu_mlp_forward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows)
{
    for (int i = 0; i < n; i++) {
        rap_gpu_layer *l = &L[i];
        RAP_TRY(gemm_run(g, &l->fwd));
        if (!l->fwd_bias) {
            const unsigned blocks = rap_gpu_blocks(rows * l->out, MLP_THREADS, g->sms * 8);
            if (l->ytype == CUDA_R_16BF)
                bias_act_kernel<__nv_bfloat16><<<blocks, MLP_THREADS, 0, g->stream>>>(
                    (__nv_bfloat16 *)l->y, l->ldy, rows, l->out, l->b, l->relu ? 1 : 0);
            else
                bias_act_kernel<float><<<blocks, MLP_THREADS, 0, g->stream>>>(
                    (float *)l->y, l->ldy, rows, l->out, l->b, l->relu ? 1 : 0);
            RAP_CUDA_LAUNCHED();
        }
    }
    return RAP_OK;
}

rap_status rap_gpu_mlp_backward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows)
{
    for (int i = n - 1; i >= 0; i--) {
        rap_gpu_layer *l = &L[i];
        RAP_TRY(gemm_run(g, &l->bw));
        if (!l->bw_bgrad)
            RAP_TRY(colsum(g, l->da, rows, l->out, l->db));
        if (!l->need_dx)
            continue;
        RAP_TRY(gemm_run(g, &l->bx));
        if (i > 0 && L[i - 1].relu && !l->bx_drelu) {
            const rap_gpu_layer *p = &L[i - 1];
            const unsigned blocks = rap_gpu_blocks(rows * p->out, MLP_THREADS, g->sms * 8);
            if (g->bf16)
                drelu_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, MLP_THREADS, 0,
                                                             g->stream>>>(
                    (__nv_bfloat16 *)p->da, rows, p->out, (const __nv_bfloat16 *)p->y, p->ldy);
            else
                drelu_kernel<float, float><<<blocks, MLP_THREADS, 0, g->stream>>>(
                    (float *)p->da, rows, p->out, (const float *)p->y, p->ldy);
            RAP_CUDA_LAUNCHED();
        }
    }
    return RAP_OK;
}

#else
typedef int rap_mlp_cu_empty;
#endif
