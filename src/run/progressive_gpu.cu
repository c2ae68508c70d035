/* progressive_gpu.cu -- progressive validation's window on the GPU
 * (progressive.h): one kernel per step adds the step's (logit, label)
 * pairs, straight from the training forward's logits, to the window's
 * ring, histogram and sums; the reference is rap_pv_add_ref
 * (progressive.c). Without nvcc this file is compiled as C: every entry
 * returns RAP_ERR_NO_GPU. */
#include "run/progressive.h"

#include "core/core.h"

#ifdef __CUDACC__
#include "core/cuda_util.h"
#include <cuda_runtime.h>

#define PV_THREADS 256

/* rap_pv_bin with the two float operations rounded as on the host (no
 * contraction). */
static __device__ int pv_bin_dev(float s)
{
    float v = __fmul_rn(__fadd_rn(s, RAP_PV_LOGIT_RANGE),
                        (float)(RAP_PV_BINS / (2.0 * RAP_PV_LOGIT_RANGE)));
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)RAP_PV_BINS)
        return RAP_PV_BINS - 1;
    return (int)v;
}

/* rap_pv_loss_fx and rap_pv_pred_fx (double math of the device: equal to
 * the host's but for a last-bit difference of exp/log1p, which moves a
 * term by at most one unit of 2^-24). */
static __device__ long long pv_loss_fx_dev(float s, float y)
{
    double z = s, t = (z > 0 ? z : 0) - z * (double)y + log1p(exp(-fabs(z)));
    if (t > RAP_PV_LOSS_CAP)
        t = RAP_PV_LOSS_CAP;
    return __double2ll_rn(t * RAP_PV_LOSS_SCALE);
}

static __device__ long long pv_pred_fx_dev(float s)
{
    return __double2ll_rn(1.0 / (1.0 + exp(-(double)s)) * RAP_PV_PRED_SCALE);
}

/* Row r's contribution (sign +1 added, -1 removed): its histogram bin
 * directly (atomics), its sums into the thread's partials. */
static __device__ void pv_count_dev(uint32_t *hist, float s, float y, int sign, long long *part)
{
    bool pos = y != 0.0f;
    part[0] += sign;
    part[1] += pos ? sign : 0;
    if (!isfinite(s)) {
        part[2] += sign;
        return;
    }
    atomicAdd(&hist[(pos ? RAP_PV_BINS : 0) + pv_bin_dev(s)], (unsigned)sign);
    part[3] += sign * pv_loss_fx_dev(s, y);
    part[4] += sign * pv_pred_fx_dev(s);
}

/* One thread per new row k: the row it evicts (ring slot (seen + k) % W,
 * distinct for the rows of one launch since rows <= W) leaves, the new row
 * enters; the block's sums are reduced in shared memory and added once. */
static __global__ void pv_add_kernel(float *ring_s, float *ring_y, uint32_t *hist,
                                     long long *sums, long long window, long long seen,
                                     const float *logit, const float *label, long long rows)
{
    __shared__ long long red[5][PV_THREADS];
    long long part[5] = {0, 0, 0, 0, 0};
    long long k = (long long)blockIdx.x * PV_THREADS + threadIdx.x;
    if (k < rows) {
        long long g = seen + k, at = g % window;
        if (g >= window)
            pv_count_dev(hist, ring_s[at], ring_y[at], -1, part);
        float s = logit[k], y = label[k] != 0.0f ? 1.0f : 0.0f;
        ring_s[at] = s;
        ring_y[at] = y;
        pv_count_dev(hist, s, y, +1, part);
    }
    for (int i = 0; i < 5; i++)
        red[i][threadIdx.x] = part[i];
    __syncthreads();
    for (int w = PV_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            for (int i = 0; i < 5; i++)
                red[i][threadIdx.x] += red[i][threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x < 5 && red[threadIdx.x][0] != 0)
        atomicAdd((unsigned long long *)&sums[threadIdx.x],
                  (unsigned long long)red[threadIdx.x][0]);
}

extern "C" rap_status rap_pv_gpu_alloc(int64_t window, void **ring_s, void **ring_y,
                                       void **hist, void **sums, void *stream)
{
    *ring_s = *ring_y = *hist = *sums = NULL;
    size_t hb = sizeof(uint32_t) * 2 * RAP_PV_BINS;
    RAP_TRY(rap_cuda_malloc(ring_s, sizeof(float) * (size_t)window, "progressive window"));
    RAP_TRY(rap_cuda_malloc(ring_y, sizeof(float) * (size_t)window, "progressive window"));
    RAP_TRY(rap_cuda_malloc(hist, hb, "progressive histogram"));
    RAP_TRY(rap_cuda_malloc(sums, sizeof(rap_pv_sums), "progressive sums"));
    cudaStream_t s = (cudaStream_t)stream;
    RAP_CUDA_TRY(cudaMemsetAsync(*hist, 0, hb, s));
    RAP_CUDA_TRY(cudaMemsetAsync(*sums, 0, sizeof(rap_pv_sums), s));
    RAP_CUDA_TRY(cudaStreamSynchronize(s));
    return RAP_OK;
}

extern "C" void rap_pv_gpu_free(void *p) { rap_cuda_free(p); }

extern "C" rap_status rap_pv_gpu_add(float *ring_s, float *ring_y, uint32_t *hist,
                                     rap_pv_sums *sums, int64_t window, int64_t seen,
                                     const float *logit, const float *label, int64_t rows,
                                     void *stream)
{
    /* the five int64 of rap_pv_sums in their order, as the kernel's sums */
    static_assert(sizeof(rap_pv_sums) == 5 * sizeof(long long), "rap_pv_sums layout");
    unsigned blocks = (unsigned)((rows + PV_THREADS - 1) / PV_THREADS);
    pv_add_kernel<<<blocks, PV_THREADS, 0, (cudaStream_t)stream>>>(
        ring_s, ring_y, hist, (long long *)sums, window, seen, logit, label, rows);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_pv_gpu_read(const uint32_t *hist_dev, const rap_pv_sums *sums_dev,
                                      uint32_t *hist, rap_pv_sums *sums, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    RAP_CUDA_TRY(cudaMemcpyAsync(hist, hist_dev, sizeof(uint32_t) * 2 * RAP_PV_BINS,
                                 cudaMemcpyDeviceToHost, s));
    RAP_CUDA_TRY(cudaMemcpyAsync(sums, sums_dev, sizeof *sums, cudaMemcpyDeviceToHost, s));
    RAP_CUDA_TRY(cudaStreamSynchronize(s));
    return RAP_OK;
}

#else /* no CUDA */

#define NO_GPU rap_fail(RAP_ERR_NO_GPU, "rap was built without CUDA (make CUDA=0)")

rap_status rap_pv_gpu_alloc(int64_t window, void **ring_s, void **ring_y, void **hist,
                            void **sums, void *stream)
{
    (void)window;
    (void)stream;
    *ring_s = *ring_y = *hist = *sums = NULL;
    return NO_GPU;
}

void rap_pv_gpu_free(void *p) { (void)p; }

rap_status rap_pv_gpu_add(float *ring_s, float *ring_y, uint32_t *hist, rap_pv_sums *sums,
                          int64_t window, int64_t seen, const float *logit, const float *label,
                          int64_t rows, void *stream)
{
    (void)ring_s, (void)ring_y, (void)hist, (void)sums, (void)window, (void)seen;
    (void)logit, (void)label, (void)rows, (void)stream;
    return NO_GPU;
}

rap_status rap_pv_gpu_read(const uint32_t *hist_dev, const rap_pv_sums *sums_dev,
                           uint32_t *hist, rap_pv_sums *sums, void *stream)
{
    (void)hist_dev, (void)sums_dev, (void)hist, (void)sums, (void)stream;
    return NO_GPU;
}
#endif
