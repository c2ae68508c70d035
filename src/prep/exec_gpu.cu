/*
 * exec_gpu.cu -- the GPU side of the preprocessing executor: the arena in
 * device memory, the stream, the batch upload, kernel launches and the
 * offsets prefix sum of COMPUTED kernels (docs/EXECUTOR.md).
 *
 * A COMPUTED kernel piece that makes the offsets (r0 == 0, or the first
 * piece of a batch: exec.c) runs, on one stream:
 *   1. the op's len phase over rows [0, rows) of descs [d0, d1): desc j
 *      (index inside its kernel) writes len[j*(B+1) + r];
 *   2. one cub::DeviceScan::ExclusiveSum from len to sums over the range
 *      of those descs (an init and a scan launch);
 *   3. offsets_kernel: yoff_j[i] = sums[j*(B+1) + i] - sums[j*(B+1)] for
 *      i in [0, rows], for all descs at once;
 * then every piece runs the write phase over [r0, r1). Stale lengths past
 * `rows` in a slot are bounded by the slot's capacity, so sums never
 * overflow and never reach a later desc (the subtraction cancels them).
 *
 * Built without CUDA (gcc -x c), every entry point below reports
 * RAP_ERR_NO_GPU with rap_gpu_available()'s reason. CUB is C++: only
 * inside __CUDACC__.
 */
#include "prep/exec_internal.h"
#include "core/cuda_util.h"

#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#include <cub/device/device_scan.cuh>

#define EXEC_THREADS 256
#define EXEC_MAX_BLOCKS_X 4096

static cudaStream_t stream_of(const rap_prep *p, void *s)
{
    return (cudaStream_t)(s ? s : p->stream);
}

/* a[i] = i for i in [0, n). */
static __global__ void arange_kernel(int64_t *a, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        a[i] = i;
}

/* For descs[j], j in [0, nd): yoff[i] = sums[j*stride + i] - sums[j*stride],
 * i in [0, rows]. blockIdx.y walks the descs, x the rows. */
static __global__ void offsets_kernel(const rap_desc *descs, int nd, const int64_t *sums,
                                      int64_t stride, int64_t rows)
{
    for (int j = blockIdx.y; j < nd; j += gridDim.y) {
        int64_t *yoff = descs[j].yoff;
        const int64_t *s = sums + (int64_t)j * stride;
        const int64_t s0 = s[0];
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= rows;
             i += (int64_t)gridDim.x * blockDim.x)
            yoff[i] = s[i] - s0;
    }
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + EXEC_THREADS - 1) / EXEC_THREADS;
    return (unsigned)(b < 1 ? 1 : b > EXEC_MAX_BLOCKS_X ? EXEC_MAX_BLOCKS_X : b);
}

extern "C" rap_status rap_prep_gpu_meminfo(size_t *free_b, size_t *total_b)
{
    RAP_CUDA_TRY(cudaMemGetInfo(free_b, total_b));
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_scan_bytes(int64_t n, size_t *bytes)
{
    *bytes = 0;
    RAP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(NULL, *bytes, (const int64_t *)NULL,
                                               (int64_t *)NULL, n));
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_alloc(rap_prep *p, void *cfg_stream)
{
    if (cfg_stream) {
        p->stream = cfg_stream;
        p->own_stream = false;
    } else {
        cudaStream_t s = NULL;
        RAP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        p->stream = s;
        p->own_stream = true;
    }
    void *a = NULL;
    RAP_TRY(rap_cuda_malloc(&a, p->arena_bytes, "preprocessing executor buffers"));
    p->arena = (char *)a;
    RAP_CUDA_TRY(cudaMemsetAsync(p->arena, 0, p->arena_bytes, (cudaStream_t)p->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)p->stream));
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_upload(rap_prep *p, void *dst_dev, const void *src, size_t n)
{
    if (n == 0)
        return RAP_OK;
    cudaStream_t st = (cudaStream_t)p->stream;
    RAP_CUDA_TRY(cudaMemcpyAsync(dst_dev, src, n, cudaMemcpyHostToDevice, st));
    RAP_CUDA_TRY(cudaStreamSynchronize(st));
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_fill_arange(rap_prep *p, int64_t *a, int64_t n)
{
    cudaStream_t st = (cudaStream_t)p->stream;
    arange_kernel<<<blocks_for(n), EXEC_THREADS, 0, st>>>(a, n);
    RAP_CUDA_LAUNCHED();
    RAP_CUDA_TRY(cudaStreamSynchronize(st));
    return RAP_OK;
}

extern "C" void rap_prep_gpu_free(rap_prep *p)
{
    if (p->stream && p->arena)
        cudaStreamSynchronize((cudaStream_t)p->stream);
    if (p->arena)
        rap_cuda_free(p->arena);
    p->arena = NULL;
    if (p->own_stream && p->stream)
        cudaStreamDestroy((cudaStream_t)p->stream);
    p->stream = NULL;
    p->own_stream = false;
    cudaGetLastError(); /* a failed free must not poison the next call */
}

extern "C" rap_status rap_prep_gpu_load(rap_prep *p, const rap_batch *b)
{
    cudaStream_t st = (cudaStream_t)p->stream;
    const rap_batch *d = &p->in;
    /* the usual case: a batch made for B rows mirrors the block: one copy */
    if (b->cap == p->B && b->block && b->block_bytes == d->block_bytes) {
        RAP_CUDA_TRY(cudaMemcpyAsync(d->block, b->block, b->block_bytes,
                                     b->device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                     st));
        return RAP_OK;
    }
    /* another capacity: one strided copy per array, used rows only */
    const size_t r = (size_t)b->rows, B = (size_t)p->B, cap = (size_t)b->cap;
    const size_t nd = (size_t)p->schema.n_dense, ns = (size_t)p->schema.n_sparse;
    const size_t K = (size_t)p->schema.ids_per_row;
    const cudaMemcpyKind h2d = b->device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    if (r == 0)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpyAsync(d->label, b->label, sizeof(float) * r, h2d, st));
    if (nd) {
        RAP_CUDA_TRY(cudaMemcpy2DAsync(d->dense, B * sizeof(float), b->dense, cap * sizeof(float),
                                       r * sizeof(float), nd, h2d, st));
        RAP_CUDA_TRY(cudaMemcpy2DAsync(d->dense_valid, B, b->dense_valid, cap, r, nd, h2d, st));
    }
    if (ns) {
        RAP_CUDA_TRY(cudaMemcpy2DAsync(d->sparse_off, (B + 1) * sizeof(int64_t), b->sparse_off,
                                       (cap + 1) * sizeof(int64_t), (r + 1) * sizeof(int64_t), ns,
                                       h2d, st));
        RAP_CUDA_TRY(cudaMemcpy2DAsync(d->sparse_ids, B * K * sizeof(int64_t), b->sparse_ids,
                                       cap * K * sizeof(int64_t), r * K * sizeof(int64_t), ns, h2d,
                                       st));
        RAP_CUDA_TRY(cudaMemcpy2DAsync(d->sparse_valid, B, b->sparse_valid, cap, r, ns, h2d, st));
    }
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_run_kernel(rap_prep *p, int k, int d0, int d1, int64_t r0,
                                              int64_t r1, bool len, void *stream)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    const rap_op_impl *im = &rap_op_impls[kn->op];
    cudaStream_t st = stream_of(p, stream);
    const rap_desc *dd = p->descs_dev + kn->first + d0;
    const int nd = d1 - d0;
    const int64_t stride = p->B + 1, rows = p->rows;
    if (len && rows > 0) {
        RAP_TRY(im->len_gpu(dd, nd, 0, rows, st));
        p->launches++;
        /* only up to the last desc's row `rows` matters */
        int64_t n_items = (int64_t)(nd - 1) * stride + rows + 1;
        size_t tmp = p->scan_tmp_bytes;
        RAP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(p->scan_tmp, tmp,
                                                   (const int64_t *)(p->len + d0 * stride),
                                                   p->sums + d0 * stride, n_items, st));
        p->launches += 2; /* CUB: init kernel + scan kernel */
        dim3 grid(blocks_for(rows + 1), (unsigned)(nd < 65535 ? nd : 65535));
        offsets_kernel<<<grid, EXEC_THREADS, 0, st>>>(dd, nd, p->sums + d0 * stride, stride, rows);
        RAP_CUDA_LAUNCHED();
        p->launches++;
    }
    if (r1 > r0) {
        RAP_TRY(im->gpu(dd, nd, r0, r1, st));
        p->launches++;
    }
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_run_rows(rap_prep *p, int k, int g0, int g1, int64_t r0,
                                            int64_t r1, void *stream)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    const rap_desc *dd = p->descs_dev + kn->first;
    const int32_t *dh = p->heads_dev + kn->head0 + g0;
    if (p->rows_each) /* RAP_PREP_ROWS=each: the kernel before 2026-12-04 */
        RAP_TRY(rap_op_rows_gpu_each(dd, dh, g1 - g0, r0, r1, stream_of(p, stream)));
    else
        RAP_TRY(rap_op_rows_gpu(dd, dh, g1 - g0, r0, r1, stream_of(p, stream)));
    p->launches++;
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_sync(const rap_prep *p)
{
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)p->stream));
    return RAP_OK;
}

extern "C" rap_status rap_prep_gpu_download(const rap_prep *p, void *dst, const void *src_dev,
                                            size_t n)
{
    cudaStream_t st = (cudaStream_t)p->stream;
    RAP_CUDA_TRY(cudaMemcpyAsync(dst, src_dev, n, cudaMemcpyDeviceToHost, st));
    RAP_CUDA_TRY(cudaStreamSynchronize(st));
    return RAP_OK;
}

#else /* no CUDA: the GPU executor is unavailable */

static rap_status no_gpu(void)
{
    char why[256];
    rap_gpu_available(why, sizeof why);
    return rap_fail(RAP_ERR_NO_GPU, "GPU executor asked for, but %s", why);
}

rap_status rap_prep_gpu_meminfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    return no_gpu();
}

rap_status rap_prep_gpu_scan_bytes(int64_t n, size_t *bytes)
{
    (void)n;
    *bytes = 0;
    return no_gpu();
}

rap_status rap_prep_gpu_alloc(rap_prep *p, void *cfg_stream)
{
    (void)p;
    (void)cfg_stream;
    return no_gpu();
}

rap_status rap_prep_gpu_upload(rap_prep *p, void *dst_dev, const void *src, size_t n)
{
    (void)p;
    (void)dst_dev;
    (void)src;
    (void)n;
    return no_gpu();
}

rap_status rap_prep_gpu_fill_arange(rap_prep *p, int64_t *a, int64_t n)
{
    (void)p;
    (void)a;
    (void)n;
    return no_gpu();
}

void rap_prep_gpu_free(rap_prep *p) { (void)p; }

rap_status rap_prep_gpu_load(rap_prep *p, const rap_batch *b)
{
    (void)p;
    (void)b;
    return no_gpu();
}

rap_status rap_prep_gpu_run_kernel(rap_prep *p, int k, int d0, int d1, int64_t r0, int64_t r1,
                                   bool len, void *stream)
{
    (void)len;
    (void)p;
    (void)k;
    (void)d0;
    (void)d1;
    (void)r0;
    (void)r1;
    (void)stream;
    return no_gpu();
}

rap_status rap_prep_gpu_run_rows(rap_prep *p, int k, int g0, int g1, int64_t r0, int64_t r1,
                                 void *stream)
{
    (void)p;
    (void)k;
    (void)g0;
    (void)g1;
    (void)r0;
    (void)r1;
    (void)stream;
    return no_gpu();
}

rap_status rap_prep_gpu_sync(const rap_prep *p)
{
    (void)p;
    return no_gpu();
}

rap_status rap_prep_gpu_download(const rap_prep *p, void *dst, const void *src_dev, size_t n)
{
    (void)p;
    (void)dst;
    (void)src_dev;
    (void)n;
    return no_gpu();
}

#endif
