/* mem.c -- checked host allocation, pinned memory, time, core count. */
#include "core/core.h"
#include "core/cuda_util.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void *rap_malloc(size_t n, const char *what)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        rap_fail(RAP_ERR_NOMEM, "out of memory: %zu bytes for %s", n, what);
    return p;
}

void *rap_calloc(size_t n, const char *what)
{
    void *p = calloc(1, n ? n : 1);
    if (!p)
        rap_fail(RAP_ERR_NOMEM, "out of memory: %zu bytes for %s", n, what);
    return p;
}

void *rap_realloc(void *p, size_t n, const char *what)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        rap_fail(RAP_ERR_NOMEM, "out of memory: %zu bytes for %s", n, what);
    return q;
}

void rap_free(void *p) { free(p); }

static _Atomic uint64_t g_counted_bytes, g_counted_calls;

void rap_mem_count(size_t n)
{
    atomic_fetch_add(&g_counted_bytes, (uint64_t)n);
    atomic_fetch_add(&g_counted_calls, 1);
}

void rap_mem_counted(uint64_t *bytes, uint64_t *calls)
{
    if (bytes)
        *bytes = atomic_load(&g_counted_bytes);
    if (calls)
        *calls = atomic_load(&g_counted_calls);
}

void *rap_aligned_alloc(size_t n, const char *what)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        rap_fail(RAP_ERR_NOMEM, "out of memory: %zu bytes for %s", n, what);
        return NULL;
    }
    rap_mem_count(n);
    return p;
}

void rap_aligned_free(void *p) { free(p); }

void *rap_host_alloc(size_t n, bool want_pinned, bool *pinned, const char *what)
{
    *pinned = false;
#ifdef RAP_HAVE_CUDA
    if (want_pinned && rap_gpu_available(NULL, 0)) {
        void *p = NULL;
        if (cudaHostAlloc(&p, n ? n : 64, cudaHostAllocDefault) == cudaSuccess) {
            *pinned = true;
            rap_mem_count(n);
            return p;
        }
        cudaGetLastError(); /* clear; fall back to pageable memory */
    }
#else
    (void)want_pinned;
#endif
    return rap_aligned_alloc(n, what);
}

void rap_host_free(void *p, bool pinned)
{
    if (!p)
        return;
#ifdef RAP_HAVE_CUDA
    if (pinned) {
        cudaFreeHost(p);
        return;
    }
#else
    (void)pinned;
#endif
    rap_aligned_free(p);
}

double rap_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int rap_ncores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
