/* gpu.c -- is a GPU usable, and checked device allocation. */
#include "core/core.h"
#include "core/cuda_util.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;
static char g_why[256];

static void probe(void)
{
#ifdef RAP_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* the runtime says "CUDA driver version is insufficient" also when
         * there is no driver at all (a machine without a GPU): say so */
        int drv = 0, rt = 0;
        if (cudaDriverGetVersion(&drv) != cudaSuccess)
            drv = 0;
        if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
            rt = 0;
        char what[160];
        if (e == cudaSuccess || e == cudaErrorNoDevice)
            snprintf(what, sizeof what, "the driver lists no device");
        else if (e == cudaErrorInsufficientDriver && drv == 0)
            snprintf(what, sizeof what, "no NVIDIA driver is loaded");
        else if (e == cudaErrorInsufficientDriver)
            snprintf(what, sizeof what, "the NVIDIA driver supports CUDA %d.%d, this build needs "
                     "%d.%d", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
        else
            snprintf(what, sizeof what, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        snprintf(g_why, sizeof g_why, "no CUDA GPU found (%s)", what);
        cudaGetLastError();
        return;
    }
    g_ok = true;
    snprintf(g_why, sizeof g_why, "%d GPU(s)", n);
#else
    snprintf(g_why, sizeof g_why, "built without CUDA (nvcc was not found at build time)");
#endif
}

bool rap_gpu_available(char *why, size_t why_len)
{
    pthread_once(&g_once, probe);
    if (why && why_len) {
        strncpy(why, g_why, why_len - 1);
        why[why_len - 1] = 0;
    }
    return g_ok;
}

#ifdef RAP_HAVE_CUDA
rap_status rap_cuda_malloc(void **p, size_t n, const char *what)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, n ? n : 256);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        return rap_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_CUDA,
                        "GPU out of memory: %zu bytes for %s (%zu of %zu bytes free): %s", n,
                        what, free_b, total_b, cudaGetErrorString(e));
    }
    rap_mem_count(n);
    return RAP_OK;
}

void rap_cuda_free(void *p)
{
    if (p)
        cudaFree(p);
}

rap_status rap_cuda_upload(void *dev, const void *host, size_t n)
{
    if (n == 0)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
    return RAP_OK;
}
#else
rap_status rap_cuda_malloc(void **p, size_t n, const char *what)
{
    (void)n;
    *p = NULL;
    return rap_fail(RAP_ERR_NO_GPU, "%s on the GPU: rap was built without CUDA (make CUDA=0)",
                    what);
}

void rap_cuda_free(void *p) { (void)p; }

rap_status rap_cuda_upload(void *dev, const void *host, size_t n)
{
    (void)dev, (void)host;
    return n == 0 ? RAP_OK
                  : rap_fail(RAP_ERR_NO_GPU, "a copy to the GPU: rap was built without CUDA "
                                             "(make CUDA=0)");
}
#endif

rap_status rap_dev_alloc(rap_device dev, void **p, size_t n, const char *what)
{
    if (n < 8)
        n = 8;
    if (dev == RAP_GPU)
        return rap_cuda_malloc(p, n, what);
    *p = rap_aligned_alloc(n, what);
    return *p ? RAP_OK : RAP_ERR_NOMEM;
}

void rap_dev_free(rap_device dev, void *p)
{
    if (!p)
        return;
    if (dev == RAP_GPU)
        rap_cuda_free(p);
    else
        rap_aligned_free(p);
}
