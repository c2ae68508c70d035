/*
 * profile_gpu.cu -- the CUDA side of the profilers (profile.h, "GPU
 * helpers"): streams, events, the spin kernel, the L2 flush and the probe
 * kernel. Without CUDA every call fails with RAP_ERR_NO_GPU.
 */
#include "plan/profile.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

double rap_prof_median(double *v, int n)
{
    if (n <= 0)
        return 0;
    for (int i = 1; i < n; i++) { /* insertion sort: n is small */
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#ifdef RAP_HAVE_CUDA
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#define PROBE_FLOATS ((size_t)512 << 10) /* one probe: 2 MiB read + 2 MiB written */
#define PROBE_CHUNKS 128                  /* probes rotate over 128 chunks (256 MiB each
                                           * way), so they stream from memory, not L2 */
#define FLUSH_BYTES ((size_t)256 << 20) /* > the L2 of any current GPU */
#define PROBE_THREADS 256

static rap_status ck(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return RAP_OK;
    return rap_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_CUDA,
                    "profiler: %s: %s", what, cudaGetErrorString(e));
}

struct rap_prof_gpu {
    cudaStream_t train, prep;
    cudaEvent_t *ev;   /* (n_ev) */
    int n_ev;
    float *a, *b;      /* (PROBE_CHUNKS, PROBE_FLOATS) probe input and output */
    unsigned next;     /* chunk of the next probe */
    void *flush;       /* (FLUSH_BYTES) */
    unsigned probe_blocks;
};

/* Spins one thread until `ns` nanoseconds of the global timer have passed. */
static __global__ void spin_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* b[i] = hash-like transform of a[i]: a memory-bound streaming pass with a
 * little integer work per element, like a preprocessing op. */
static __global__ void probe_kernel(const float *a, float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = __float_as_uint(a[i]) * 0x9e3779b1u;
        x ^= x >> 15;
        b[i] = (float)(x & 0xffffu);
    }
}

static __global__ void init_kernel(float *a, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        a[i] = (float)(i % 1021u) + 0.5f;
}

extern "C" rap_status rap_prof_gpu_create(int n_events, rap_prof_gpu **out)
{
    *out = NULL;
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        return rap_fail(RAP_ERR_NO_GPU, "the profilers need a GPU, but %s", why);
    rap_prof_gpu *g = (rap_prof_gpu *)calloc(1, sizeof *g);
    if (!g)
        return rap_fail(RAP_ERR_NOMEM, "profiler: out of host memory");
    rap_status st = RAP_OK;
    int lo = 0, hi = 0, dev = 0, sms = 0;
    g->ev = (cudaEvent_t *)calloc((size_t)n_events, sizeof *g->ev);
    if (!g->ev) {
        free(g);
        return rap_fail(RAP_ERR_NOMEM, "profiler: out of host memory");
    }
#define TRY(call)                     \
    do {                              \
        if ((st = (call)) != RAP_OK)  \
            goto fail;                \
    } while (0)
    TRY(ck(cudaDeviceGetStreamPriorityRange(&lo, &hi), "stream priorities"));
    TRY(ck(cudaStreamCreateWithPriority(&g->train, cudaStreamNonBlocking, hi),
                       "training stream"));
    TRY(ck(cudaStreamCreateWithPriority(&g->prep, cudaStreamNonBlocking, lo),
                       "preprocessing stream"));
    for (int i = 0; i < n_events; i++) {
        TRY(ck(cudaEventCreate(&g->ev[i]), "event"));
        g->n_ev = i + 1;
    }
    TRY(rap_cuda_malloc((void **)&g->a, PROBE_CHUNKS * PROBE_FLOATS * sizeof(float), "probe input"));
    TRY(rap_cuda_malloc((void **)&g->b, PROBE_CHUNKS * PROBE_FLOATS * sizeof(float), "probe output"));
    TRY(rap_cuda_malloc(&g->flush, FLUSH_BYTES, "L2 flush buffer"));
    TRY(ck(cudaGetDevice(&dev), "cudaGetDevice"));
    TRY(ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                       "SM count"));
    g->probe_blocks = (unsigned)(4 * (sms > 0 ? sms : 1));
    init_kernel<<<g->probe_blocks, PROBE_THREADS, 0, g->train>>>(g->a, PROBE_CHUNKS * PROBE_FLOATS);
    TRY(ck(cudaGetLastError(), "probe init launch"));
    TRY(ck(cudaStreamSynchronize(g->train), "probe init"));
#undef TRY
    *out = g;
    return RAP_OK;
fail:
    rap_prof_gpu_free(g);
    return st;
}

extern "C" void rap_prof_gpu_free(rap_prof_gpu *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_ev; i++)
        cudaEventDestroy(g->ev[i]);
    free(g->ev);
    cudaFree(g->a);
    cudaFree(g->b);
    cudaFree(g->flush);
    if (g->train)
        cudaStreamDestroy(g->train);
    if (g->prep)
        cudaStreamDestroy(g->prep);
    free(g);
}

extern "C" void *rap_prof_train_stream(rap_prof_gpu *g) { return (void *)g->train; }
extern "C" void *rap_prof_prep_stream(rap_prof_gpu *g) { return (void *)g->prep; }

extern "C" rap_status rap_prof_spin(rap_prof_gpu *g, void *stream, double us)
{
    (void)g;
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)(us * 1000.0));
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_prof_flush(rap_prof_gpu *g, void *stream)
{
    RAP_CUDA_TRY(cudaMemsetAsync(g->flush, 0x5a, FLUSH_BYTES, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_prof_probe(rap_prof_gpu *g, void *stream, int n)
{
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)(g->next++ % PROBE_CHUNKS) * PROBE_FLOATS;
        probe_kernel<<<g->probe_blocks, PROBE_THREADS, 0, (cudaStream_t)stream>>>(
            g->a + at, g->b + at, PROBE_FLOATS);
        RAP_CUDA_LAUNCHED();
    }
    return RAP_OK;
}

static rap_status ev_check(const rap_prof_gpu *g, int ev)
{
    if (ev < 0 || ev >= g->n_ev)
        return rap_fail(RAP_ERR_INTERNAL, "profiler: event %d of %d", ev, g->n_ev);
    return RAP_OK;
}

extern "C" rap_status rap_prof_record(rap_prof_gpu *g, int ev, void *stream)
{
    RAP_TRY(ev_check(g, ev));
    RAP_CUDA_TRY(cudaEventRecord(g->ev[ev], (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_prof_wait(rap_prof_gpu *g, void *stream, int ev)
{
    RAP_TRY(ev_check(g, ev));
    RAP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, g->ev[ev], 0));
    return RAP_OK;
}

extern "C" rap_status rap_prof_elapsed(rap_prof_gpu *g, int e0, int e1, double *ms)
{
    RAP_TRY(ev_check(g, e0));
    RAP_TRY(ev_check(g, e1));
    float f = 0;
    RAP_CUDA_TRY(cudaEventSynchronize(g->ev[e1]));
    RAP_CUDA_TRY(cudaEventElapsedTime(&f, g->ev[e0], g->ev[e1]));
    *ms = f;
    return RAP_OK;
}

extern "C" rap_status rap_prof_sync(void)
{
    RAP_CUDA_TRY(cudaDeviceSynchronize());
    return RAP_OK;
}

extern "C" rap_status rap_prof_gpu_name(char *buf, size_t n)
{
    int dev = 0;
    cudaDeviceProp p;
    RAP_CUDA_TRY(cudaGetDevice(&dev));
    RAP_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, n, "%s", p.name);
    return RAP_OK;
}

extern "C" long long rap_op_blocks_launched; /* src/prep/ops/registry.cu */

extern "C" long long rap_prof_blocks_launched(void)
{
    return __atomic_load_n(&rap_op_blocks_launched, __ATOMIC_RELAXED);
}

#else /* no CUDA */

long long rap_prof_blocks_launched(void) { return 0; }

static rap_status no_gpu(void)
{
    char why[256];
    rap_gpu_available(why, sizeof why);
    return rap_fail(RAP_ERR_NO_GPU, "the profilers need a GPU, but %s", why);
}

rap_status rap_prof_gpu_create(int n_events, rap_prof_gpu **out)
{
    (void)n_events;
    *out = NULL;
    return no_gpu();
}
void rap_prof_gpu_free(rap_prof_gpu *g) { (void)g; }
void *rap_prof_train_stream(rap_prof_gpu *g) { (void)g; return NULL; }
void *rap_prof_prep_stream(rap_prof_gpu *g) { (void)g; return NULL; }
rap_status rap_prof_spin(rap_prof_gpu *g, void *stream, double us)
{
    (void)g, (void)stream, (void)us;
    return no_gpu();
}
rap_status rap_prof_flush(rap_prof_gpu *g, void *stream)
{
    (void)g, (void)stream;
    return no_gpu();
}
rap_status rap_prof_probe(rap_prof_gpu *g, void *stream, int n)
{
    (void)g, (void)stream, (void)n;
    return no_gpu();
}
rap_status rap_prof_record(rap_prof_gpu *g, int ev, void *stream)
{
    (void)g, (void)ev, (void)stream;
    return no_gpu();
}
rap_status rap_prof_wait(rap_prof_gpu *g, void *stream, int ev)
{
    (void)g, (void)ev, (void)stream;
    return no_gpu();
}
rap_status rap_prof_elapsed(rap_prof_gpu *g, int e0, int e1, double *ms)
{
    (void)g, (void)e0, (void)e1;
    *ms = 0;
    return no_gpu();
}
rap_status rap_prof_sync(void) { return no_gpu(); }
rap_status rap_prof_gpu_name(char *buf, size_t n)
{
    if (n)
        buf[0] = 0;
    return no_gpu();
}
#endif
