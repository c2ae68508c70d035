/*
 * loss.cu -- BCE-with-logits loss (mean on the device), the dense
 * optimizer over the flat MLP parameters, and the small init / fill /
 * convert kernels of the GPU model.
 */
#include "model/gpu/gpu_model.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define LOSS_THREADS 1024
#define ELT_THREADS 256

template <typename T> static __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* Block k of S: part[k] = sum over its rows (r = k*LOSS_THREADS + i, step
 * S*LOSS_THREADS) of max(s,0) - s*y + log1p(exp(-|s|)); dlogit[r] =
 * (sigmoid(s) - y) / div (act type; div = rows for the mean). Double
 * accumulation in a fixed order (with loss_final_kernel): deterministic. */
template <typename T>
static __global__ void __launch_bounds__(LOSS_THREADS)
    loss_kernel(const float *__restrict__ logit, const float *__restrict__ label, int64_t rows,
                int64_t div, T *__restrict__ dlogit, double *part)
{
    __shared__ double sm[LOSS_THREADS / 32];
    double sum = 0.0;
    const float inv = (float)(1.0 / (double)div);
    for (int64_t r = (int64_t)blockIdx.x * LOSS_THREADS + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * LOSS_THREADS) {
        const float s = logit[r], y = label[r];
        sum += (double)((s > 0.0f ? s : 0.0f) - s * y + log1pf(expf(-fabsf(s))));
        const float sig = s >= 0.0f ? 1.0f / (1.0f + expf(-s)) : expf(s) / (1.0f + expf(s));
        dlogit[r] = from_float<T>((sig - y) * inv);
    }
    for (int o = 16; o > 0; o /= 2)
        sum += __shfl_down_sync(0xffffffffu, sum, o);
    if ((threadIdx.x & 31) == 0)
        sm[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < LOSS_THREADS / 32; i++)
            t += sm[i];
        part[blockIdx.x] = t;
    }
}

/* loss[0] = sum of part[0..S) / div, in order. One thread. */
static __global__ void loss_final_kernel(const double *part, int S, int64_t div, float *loss)
{
    double t = 0.0;
    for (int i = 0; i < S; i++)
        t += part[i];
    loss[0] = (float)(t / (double)div);
}

rap_status rap_gpu_loss(rap_gpu *g, const float *label, int64_t rows, int64_t div)
{
    rap_gpu_layer *last = &g->top[g->n_top - 1];
    /* partials in the column-sum scratch (>= 256 floats = 128 doubles; not
     * in use during the forward) */
    int S = (int)((rows + 4 * LOSS_THREADS - 1) / (4 * LOSS_THREADS));
    if (S > 64)
        S = 64;
    if (S < 1)
        S = 1;
    double *part = (double *)g->colsum;
    if (g->bf16)
        loss_kernel<__nv_bfloat16><<<S, LOSS_THREADS, 0, g->stream>>>(
            g->logits, label, rows, div, (__nv_bfloat16 *)last->da, part);
    else
        loss_kernel<float><<<S, LOSS_THREADS, 0, g->stream>>>(g->logits, label, rows, div,
                                                            (float *)last->da, part);
    RAP_CUDA_LAUNCHED();
    loss_final_kernel<<<1, 1, 0, g->stream>>>(part, S, div, g->loss);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* dst[r*ldd + j] (act) = src[r*cols + j] (fp32), r < rows, j < cols. */
template <typename T>
static __global__ void convert_kernel(T *__restrict__ dst, int64_t ldd,
                                      const float *__restrict__ src, int64_t rows, int cols)
{
    const int64_t n = rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols;
        dst[r * ldd + (i - r * cols)] = from_float<T>(src[i]);
    }
}

rap_status rap_gpu_dense_in(rap_gpu *g, const float *dense, int64_t rows)
{
    const int64_t n = rows * g->ND;
    const int64_t ld = g->bot[0].ldx; /* ND rounded up to 8; the padding stays zero */
    const unsigned blocks = rap_gpu_blocks(n, ELT_THREADS, g->sms * 8);
    if (g->bf16)
        convert_kernel<__nv_bfloat16><<<blocks, ELT_THREADS, 0, g->stream>>>(
            (__nv_bfloat16 *)g->xin, ld, dense, rows, g->ND);
    else
        convert_kernel<float>
            <<<blocks, ELT_THREADS, 0, g->stream>>>((float *)g->xin, ld, dense, rows, g->ND);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* Index in the padded arrays (grads, wc) of flat MLP element i. */
static __device__ __forceinline__ int64_t seg_index(const rap_gpu_segs &sg, int64_t i)
{
    int lo = 0, hi = sg.n - 1; /* last k with src[k] <= i */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (sg.src[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int64_t e = i - sg.src[lo];
    const int64_t r = e / sg.cols[lo];
    return sg.dst[lo] + r * sg.ld[lo] + (e - r * sg.cols[lo]);
}

/* For flat MLP element i: w -= lr*g (SGD) or PyTorch Adagrad, g read from
 * the padded gradients (gr NULL: no update); wc = act(w) at its padded
 * place. */
template <typename T>
static __global__ void dense_update_kernel(float *__restrict__ w, float *__restrict__ s,
                                           const float *__restrict__ gr, T *__restrict__ wc,
                                           rap_gpu_segs sg, int64_t n, int adagrad, float lr,
                                           float eps)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pi = seg_index(sg, i);
        float x = w[i];
        if (gr) {
            const float g = gr[pi];
            if (!adagrad) {
                x -= lr * g;
            } else {
                const float st = s[i] + g * g;
                s[i] = st;
                x -= lr * (g / (sqrtf(st) + eps));
            }
            w[i] = x;
        }
        wc[pi] = from_float<T>(x);
    }
}

static rap_status dense_launch(rap_gpu *g, const rap_model *m, bool update)
{
    const rap_model_config *c = &m->cfg;
    const int64_t n = (int64_t)m->n_mlp_params;
    if (n == 0)
        return RAP_OK;
    const bool ada = rap_model_mlp_adagrad(c); /* row-wise Adagrad: Adagrad for the MLPs */
    float *w = g->mlp;
    float *st = ada ? g->mlp_state : NULL;
    const float *gr = update ? g->grads : NULL;
    const unsigned blocks = rap_gpu_blocks(n, ELT_THREADS, g->sms * 8);
    if (g->bf16)
        dense_update_kernel<__nv_bfloat16><<<blocks, ELT_THREADS, 0, g->stream>>>(
            w, st, gr, (__nv_bfloat16 *)g->wc, g->segs, n, ada ? 1 : 0, c->lr, c->adagrad_eps);
    else
        dense_update_kernel<float><<<blocks, ELT_THREADS, 0, g->stream>>>(
            w, st, gr, (float *)g->wc, g->segs, n, ada ? 1 : 0, c->lr, c->adagrad_eps);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status rap_gpu_refresh_copy(rap_gpu *g, const rap_model *m)
{
    return dense_launch(g, m, false);
}

rap_status rap_gpu_dense_update(rap_gpu *g, const rap_model *m)
{
    return dense_launch(g, m, true);
}

static __global__ void fill_kernel(float *p, int64_t n, float v)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = v;
}

rap_status rap_gpu_fill(rap_gpu *g, float *p, size_t n, float v)
{
    if (n == 0)
        return RAP_OK;
    fill_kernel<<<rap_gpu_blocks((int64_t)n, ELT_THREADS, g->sms * 16), ELT_THREADS, 0,
                  g->stream>>>(p, (int64_t)n, v);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* p[j] = rap_init_table_value(seed, t, j0 + j, rows), j < n (h instead of
 * p: rounded to nearest into the 16-bit type dt). */
static __global__ void init_table_kernel(float *p, uint16_t *h, rap_emb_dtype dt, uint64_t n,
                                         uint64_t seed, int t, int64_t rows, uint64_t j0)
{
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x) {
        if (h)
            h[j] = rap_init_table_value16(dt, seed, t, j0 + j, rows);
        else
            p[j] = rap_init_table_value(seed, t, j0 + j, rows);
    }
}

rap_status rap_gpu_init_table(rap_gpu *g, void *p, uint64_t seed, int t, int64_t rows, int D,
                              int64_t row0, int64_t held)
{
    const uint64_t n = (uint64_t)held * (uint64_t)D;
    if (n == 0)
        return RAP_OK;
    const bool half = g->dt != RAP_EMB_FP32;
    init_table_kernel<<<rap_gpu_blocks((int64_t)n, ELT_THREADS, g->sms * 16), ELT_THREADS, 0,
                        g->stream>>>(half ? NULL : (float *)p, half ? (uint16_t *)p : NULL, g->dt,
                                     n, seed, t, rows, (uint64_t)row0 * (uint64_t)D);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

#else
typedef int rap_loss_cu_empty;
#endif
