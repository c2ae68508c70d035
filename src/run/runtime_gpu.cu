/* runtime_gpu.cu -- the CUDA calls of the runtime (runtime.h, "GPU
 * helpers"): prioritised streams, timing events, async copies, pinned host
 * memory, the model's device loss. Without CUDA: RAP_ERR_NO_GPU. */
#include "run/runtime.h"

#include "core/core.h"

#ifdef RAP_HAVE_CUDA
#include "core/cuda_util.h"
#include "model/gpu/gpu_model.h"

#include <cuda_runtime.h>
#include <unistd.h>

extern "C" rap_status rap_rt_stream_create(void **stream, bool highest)
{
    int lo = 0, hi = 0; /* numerically: greatest = lowest priority */
    RAP_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s;
    RAP_CUDA_TRY(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, highest ? hi : lo));
    *stream = (void *)s;
    return RAP_OK;
}

extern "C" void rap_rt_stream_free(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" rap_status rap_rt_event_create(void **ev)
{
    cudaEvent_t e;
    RAP_CUDA_TRY(cudaEventCreate(&e));
    *ev = (void *)e;
    return RAP_OK;
}

extern "C" rap_status rap_rt_sync_event_create(void **ev)
{
    cudaEvent_t e;
    RAP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *ev = (void *)e;
    return RAP_OK;
}

extern "C" void rap_rt_event_free(void *ev)
{
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" rap_status rap_rt_record(void *ev, void *stream)
{
    RAP_CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_rt_wait(void *stream, void *ev)
{
    RAP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
    return RAP_OK;
}

extern "C" rap_status rap_rt_event_sync(void *ev)
{
    RAP_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)ev));
    return RAP_OK;
}

extern "C" rap_status rap_rt_event_wait(void *ev, double limit_s, const char *what)
{
    double t0 = rap_now();
    for (;;) {
        cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
        if (e == cudaSuccess)
            return RAP_OK;
        if (e != cudaErrorNotReady)
            RAP_CUDA_TRY(e);
        double w = rap_now() - t0;
        if (w > limit_s)
            return rap_fail(RAP_ERR_INTERNAL, "runtime: %s has not completed on the GPU after "
                            "%.0f s (expected well within %.0f s): a hang", what, w, limit_s);
        if (w > 1e-3) /* spin the first millisecond, then poll */
            usleep(w > 0.1 ? 1000 : 50);
    }
}

extern "C" rap_status rap_rt_event_done(void *ev, bool *done)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) {
        *done = false;
        return RAP_OK;
    }
    RAP_CUDA_TRY(e);
    *done = true;
    return RAP_OK;
}

extern "C" rap_status rap_rt_elapsed(void *e0, void *e1, float *ms)
{
    RAP_CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)e0, (cudaEvent_t)e1));
    return RAP_OK;
}

extern "C" rap_status rap_rt_h2d(void *dst, const void *src, size_t n, void *stream)
{
    if (n)
        RAP_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_rt_host_alloc(void **p, size_t n)
{
    *p = NULL;
    cudaError_t e = cudaHostAlloc(p, n ? n : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *p = NULL;
        return rap_fail(RAP_ERR_NOMEM, "runtime: cannot allocate %zu bytes of pinned host memory: %s",
                        n, cudaGetErrorString(e));
    }
    rap_mem_count(n);
    return RAP_OK;
}

extern "C" void rap_rt_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" rap_status rap_rt_host_dev_ptr(void *p, void **dev)
{
    *dev = NULL;
    RAP_CUDA_TRY(cudaHostGetDevicePointer(dev, p, 0));
    return RAP_OK;
}

static __global__ void store_f32_kernel(float *dst, const float *src) { *dst = *src; }

extern "C" rap_status rap_rt_store_f32(float *dst, const float *src, void *stream)
{
    store_f32_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(dst, src);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_rt_model_loss_ptr(const rap_model *m, const float **loss_dev)
{
    if (!m || m->device != RAP_GPU || !m->gpu)
        return rap_fail(RAP_ERR_ARG, "runtime: the model is not on the GPU");
    *loss_dev = ((const rap_gpu *)m->gpu)->loss;
    return RAP_OK;
}

extern "C" rap_status rap_rt_d2d(void *dst, const void *src, size_t n, void *stream)
{
    RAP_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_rt_zero(void *dst, size_t n, void *stream)
{
    RAP_CUDA_TRY(cudaMemsetAsync(dst, 0, n, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_rt_set_device(int device)
{
    RAP_CUDA_TRY(cudaSetDevice(device));
    return RAP_OK;
}

extern "C" rap_status rap_rt_device_count(int *n)
{
    *n = 0;
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        return RAP_OK; /* none: 0 (the probe says why, not "driver version is insufficient") */
    RAP_CUDA_TRY(cudaGetDeviceCount(n));
    return RAP_OK;
}

extern "C" rap_status rap_rt_mem_free(size_t *free_b)
{
    size_t tot = 0;
    *free_b = 0;
    RAP_CUDA_TRY(cudaMemGetInfo(free_b, &tot));
    return RAP_OK;
}

extern "C" rap_status rap_rt_mem_used(size_t *used)
{
    size_t fr = 0, tot = 0;
    RAP_CUDA_TRY(cudaMemGetInfo(&fr, &tot));
    *used = tot - fr;
    return RAP_OK;
}

#else /* no CUDA */

#define NO_GPU rap_fail(RAP_ERR_NO_GPU, "rap was built without CUDA (make CUDA=0)")

rap_status rap_rt_stream_create(void **stream, bool highest)
{
    (void)highest;
    *stream = NULL;
    return NO_GPU;
}
void rap_rt_stream_free(void *stream) { (void)stream; }
rap_status rap_rt_event_create(void **ev)
{
    *ev = NULL;
    return NO_GPU;
}
rap_status rap_rt_sync_event_create(void **ev)
{
    *ev = NULL;
    return NO_GPU;
}
void rap_rt_event_free(void *ev) { (void)ev; }
rap_status rap_rt_record(void *ev, void *stream)
{
    (void)ev;
    (void)stream;
    return NO_GPU;
}
rap_status rap_rt_wait(void *stream, void *ev)
{
    (void)ev;
    (void)stream;
    return NO_GPU;
}
rap_status rap_rt_event_sync(void *ev)
{
    (void)ev;
    return NO_GPU;
}
rap_status rap_rt_event_wait(void *ev, double limit_s, const char *what)
{
    (void)ev;
    (void)limit_s;
    (void)what;
    return NO_GPU;
}
rap_status rap_rt_event_done(void *ev, bool *done)
{
    (void)ev;
    *done = true;
    return NO_GPU;
}
rap_status rap_rt_elapsed(void *e0, void *e1, float *ms)
{
    (void)e0;
    (void)e1;
    *ms = 0;
    return NO_GPU;
}
rap_status rap_rt_h2d(void *dst, const void *src, size_t n, void *stream)
{
    (void)dst;
    (void)src;
    (void)n;
    (void)stream;
    return NO_GPU;
}
rap_status rap_rt_host_alloc(void **p, size_t n)
{
    (void)n;
    *p = NULL;
    return NO_GPU;
}
rap_status rap_rt_host_dev_ptr(void *p, void **dev)
{
    (void)p;
    *dev = NULL;
    return NO_GPU;
}
rap_status rap_rt_store_f32(float *dst, const float *src, void *stream)
{
    (void)dst;
    (void)src;
    (void)stream;
    return NO_GPU;
}
void rap_rt_host_free(void *p) { (void)p; }
rap_status rap_rt_model_loss_ptr(const rap_model *m, const float **loss_dev)
{
    (void)m;
    *loss_dev = NULL;
    return NO_GPU;
}
rap_status rap_rt_mem_used(size_t *used)
{
    *used = 0;
    return NO_GPU;
}
rap_status rap_rt_mem_free(size_t *free_b)
{
    *free_b = 0;
    return NO_GPU;
}
rap_status rap_rt_d2d(void *dst, const void *src, size_t n, void *stream)
{
    (void)dst;
    (void)src;
    (void)n;
    (void)stream;
    return NO_GPU;
}
rap_status rap_rt_zero(void *dst, size_t n, void *stream)
{
    (void)dst;
    (void)n;
    (void)stream;
    return NO_GPU;
}
rap_status rap_rt_set_device(int device)
{
    (void)device;
    return NO_GPU;
}
rap_status rap_rt_device_count(int *n)
{
    *n = 0;
    return NO_GPU;
}
#endif
