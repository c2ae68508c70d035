/*
 * hybrid_gpu.cu -- GPU kernels of the hybrid step: the id filter of
 * row-range tables, the scatter of the forward exchange into emb and the
 * gather of demb into the reverse exchange; their CPU references are in
 * hybrid.c (rap_hybrid_filter_cpu, rap_hybrid_scatter_cpu,
 * rap_hybrid_gather_cpu) and give the same bits. Without CUDA the
 * launchers fail with RAP_ERR_NO_GPU.
 */
#include "dist/hybrid_internal.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#include "core/cuda_util.h"

#include <cub/device/device_scan.cuh>

/* ------------------------------------------------------------ kernels */

/* Kept ids per row into out_off[i + 1]; out_off[0] = 0. */
static __global__ void filter_count_kernel(const int64_t *off, const int64_t *ids, int64_t n,
                                           int64_t row0, int64_t rows, int64_t *out_off)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0)
        out_off[0] = 0;
    if (i >= n)
        return;
    int64_t k = 0;
    for (int64_t j = off[i]; j < off[i + 1]; j++) {
        int64_t id = ids[j] - row0;
        k += id >= 0 && id < rows;
    }
    out_off[i + 1] = k;
}

/* Writes the kept ids of row i from out_off[i] (after the scan), none
 * past cap. */
static __global__ void filter_write_kernel(const int64_t *off, const int64_t *ids, int64_t n,
                                           int64_t row0, int64_t rows, const int64_t *out_off,
                                           int64_t *out_ids, int64_t cap)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int64_t k = out_off[i];
    for (int64_t j = off[i]; j < off[i + 1]; j++) {
        int64_t id = ids[j] - row0;
        if (id >= 0 && id < rows) {
            if (k < cap)
                out_ids[k] = id;
            k++;
        }
    }
}

static __global__ void clamp_kernel(int64_t *out_off, int64_t n1, int64_t cap)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n1 && out_off[i] > cap)
        out_off[i] = cap;
}

/* One thread per (row i, table t, d): parts of t summed in map order. */
static __global__ void scatter_kernel(const float *recv, int64_t nr, int T, int D,
                                      const int *part0, const int64_t *cum, const int64_t *tl,
                                      const int64_t *local, float *emb, int64_t ld)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t total = nr * T * D;
    if (e >= total)
        return;
    int d = (int)(e % D);
    int t = (int)((e / D) % T);
    int64_t i = e / ((int64_t)D * T);
    float v = 0.0f;
    for (int p = part0[t]; p < part0[t + 1]; p++) {
        float x = recv[nr * D * cum[p] + (i * tl[p] + local[p]) * D + d];
        v = p == part0[t] ? x : v + x;
    }
    emb[i * ld + (int64_t)t * D + d] = v;
}

/* One thread per (row i, part p, d). */
static __global__ void gather_kernel(const float *demb, int64_t ld, int64_t nr, int P, int D,
                                     const int *table, const int64_t *cum, const int64_t *tl,
                                     const int64_t *local, float *send)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t total = nr * P * D;
    if (e >= total)
        return;
    int d = (int)(e % D);
    int p = (int)((e / D) % P);
    int64_t i = e / ((int64_t)D * P);
    send[nr * D * cum[p] + (i * tl[p] + local[p]) * D + d] = demb[i * ld + (int64_t)table[p] * D + d];
}

/* ------------------------------------------------------------ launchers */

static unsigned grid_of(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g > 0 ? g : 1);
}

extern "C" size_t rap_hybrid_filter_gpu_scratch(int64_t n_max)
{
    size_t bytes = 0;
    cub::DeviceScan::InclusiveSum(NULL, bytes, (int64_t *)NULL, (int64_t *)NULL,
                                  (int)(n_max > 0 ? n_max : 1));
    return bytes;
}

extern "C" rap_status rap_hybrid_filter_gpu(const int64_t *off, const int64_t *ids, int64_t n,
                                            int64_t row0, int64_t rows, int64_t *out_off,
                                            int64_t *out_ids, int64_t cap, void *scratch,
                                            size_t scratch_bytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int B = 256;
    filter_count_kernel<<<grid_of(n, B), B, 0, s>>>(off, ids, n, row0, rows, out_off);
    RAP_CUDA_LAUNCHED();
    size_t bytes = scratch_bytes;
    RAP_CUDA_TRY(cub::DeviceScan::InclusiveSum(scratch, bytes, out_off + 1, out_off + 1, (int)n, s));
    filter_write_kernel<<<grid_of(n, B), B, 0, s>>>(off, ids, n, row0, rows, out_off, out_ids, cap);
    RAP_CUDA_LAUNCHED();
    clamp_kernel<<<grid_of(n + 1, B), B, 0, s>>>(out_off, n + 1, cap);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_scatter_gpu(const float *recv, int64_t nr, int T, int D,
                                             const rap_hybrid_parts *pa, float *emb, int64_t ld,
                                             void *stream)
{
    int64_t total = nr * T * D;
    if (total == 0)
        return RAP_OK;
    scatter_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(
        recv, nr, T, D, pa->part0, pa->cum, pa->tl, pa->local, emb, ld);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_gather_gpu(const float *demb, int64_t ld, int64_t nr, int P, int D,
                                            const rap_hybrid_parts *pa, float *send, void *stream)
{
    int64_t total = nr * P * D;
    if (total == 0)
        return RAP_OK;
    gather_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(
        demb, ld, nr, P, D, pa->table, pa->cum, pa->tl, pa->local, send);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_dev_zero(void *p, size_t bytes, void *stream)
{
    RAP_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_event_create(void **ev)
{
    cudaEvent_t e;
    RAP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *ev = (void *)e;
    return RAP_OK;
}

extern "C" void rap_hybrid_event_free(void *ev)
{
    cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" rap_status rap_hybrid_event_record(void *ev, void *stream)
{
    RAP_CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_stream_create(void **stream, int *device)
{
    cudaStream_t st;
    RAP_CUDA_TRY(cudaGetDevice(device));
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *stream = (void *)st;
    return RAP_OK;
}

extern "C" void rap_hybrid_stream_free(void *stream)
{
    if (stream) {
        cudaStreamSynchronize((cudaStream_t)stream);
        cudaStreamDestroy((cudaStream_t)stream);
    }
}

extern "C" rap_status rap_hybrid_stream_wait(void *stream, void *ev)
{
    RAP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_timer_create(void **ev)
{
    cudaEvent_t e;
    RAP_CUDA_TRY(cudaEventCreate(&e));
    *ev = (void *)e;
    return RAP_OK;
}

extern "C" rap_status rap_hybrid_elapsed(void *a, void *b, double *ms)
{
    float f = 0;
    RAP_CUDA_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b));
    *ms = f;
    return RAP_OK;
}

#else /* no CUDA: the launchers refuse */

#define NO_GPU return rap_fail(RAP_ERR_NO_GPU, "hybrid step on the GPU: built without CUDA")

size_t rap_hybrid_filter_gpu_scratch(int64_t n_max) { return 0; }
rap_status rap_hybrid_filter_gpu(const int64_t *off, const int64_t *ids, int64_t n, int64_t row0,
                                 int64_t rows, int64_t *out_off, int64_t *out_ids, int64_t cap,
                                 void *scratch, size_t scratch_bytes, void *stream) { NO_GPU; }
rap_status rap_hybrid_scatter_gpu(const float *recv, int64_t nr, int T, int D,
                                  const rap_hybrid_parts *pa, float *emb, int64_t ld,
                                  void *stream) { NO_GPU; }
rap_status rap_hybrid_gather_gpu(const float *demb, int64_t ld, int64_t nr, int P, int D,
                                 const rap_hybrid_parts *pa, float *send, void *stream) { NO_GPU; }
rap_status rap_hybrid_dev_zero(void *p, size_t bytes, void *stream) { NO_GPU; }
rap_status rap_hybrid_event_create(void **ev)
{
    *ev = NULL;
    NO_GPU;
}
void rap_hybrid_event_free(void *ev) {}
rap_status rap_hybrid_event_record(void *ev, void *stream) { NO_GPU; }
rap_status rap_hybrid_stream_create(void **stream, int *device)
{
    *stream = NULL;
    *device = -1;
    NO_GPU;
}
void rap_hybrid_stream_free(void *stream) {}
rap_status rap_hybrid_stream_wait(void *stream, void *ev) { NO_GPU; }
rap_status rap_hybrid_timer_create(void **ev)
{
    *ev = NULL;
    NO_GPU;
}
rap_status rap_hybrid_elapsed(void *a, void *b, double *ms)
{
    *ms = 0;
    NO_GPU;
}

#endif
