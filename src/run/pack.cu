/* pack.cu -- dense packing (pack.h): CPU reference, CUDA kernel, launcher,
 * and the few device helpers the trainer needs. Without nvcc this file is
 * compiled as C: the kernel and CUDA calls sit behind __CUDACC__. */
#include "run/pack.h"

#include "core/core.h"
#ifdef __CUDACC__
#include "core/cuda_util.h"
#include <cuda_runtime.h>
#endif

#include <string.h>

static rap_status check_args(const rap_pack_col *cols, int n_cols, int64_t rows, int nd,
                             const float *out)
{
    if (n_cols < 0 || rows < 0 || nd < 0 || (n_cols > 0 && !cols) || (rows > 0 && nd > 0 && !out))
        return rap_fail(RAP_ERR_ARG, "pack: bad arguments (%d columns, %lld rows, width %d)",
                        n_cols, (long long)rows, nd);
    int64_t w = 0;
    for (int c = 0; c < n_cols; c++) {
        if (cols[c].width < 1 || (rows > 0 && !cols[c].val))
            return rap_fail(RAP_ERR_ARG, "pack: column %d has width %d or no values", c,
                            cols[c].width);
        w += cols[c].width;
    }
    if (w != nd)
        return rap_fail(RAP_ERR_ARG, "pack: columns are %lld floats wide, output %d",
                        (long long)w, nd);
    return RAP_OK;
}

/* ------------------------------------------------------------ reference */

rap_status rap_pack_dense_cpu(const rap_pack_col *cols, int n_cols, int64_t rows, int nd,
                              float *out)
{
    RAP_TRY(check_args(cols, n_cols, rows, nd, out));
    int at = 0;
    for (int c = 0; c < n_cols; c++) {
        const rap_pack_col *k = &cols[c];
        int w = k->width;
        for (int64_t r = 0; r < rows; r++) {
            float *o = out + r * nd + at;
            const float *v = k->val + r * w;
            bool null = k->valid && !k->valid[r];
            for (int j = 0; j < w; j++)
                o[j] = null ? 0.0f : v[j];
        }
        at += w;
    }
    return RAP_OK;
}

/* ------------------------------------------------------------ kernel */

#ifdef __CUDACC__

typedef struct {
    rap_pack_col col[RAP_PACK_MAX_COLS];
    int at[RAP_PACK_MAX_COLS]; /* first output float of each column */
    int n;
} pack_args;

/* blockIdx.y: column; threads: rows x width elements of that column. */
static __global__ void pack_kernel(pack_args a, int64_t rows, int nd, float *out)
{
    int c = (int)blockIdx.y;
    if (c >= a.n)
        return;
    const rap_pack_col k = a.col[c];
    int64_t n = rows * k.width;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / k.width;
        int j = (int)(e - r * k.width);
        bool null = k.valid && !k.valid[r];
        out[r * nd + a.at[c] + j] = null ? 0.0f : k.val[e];
    }
}

extern "C" rap_status rap_pack_dense_gpu(const rap_pack_col *cols, int n_cols, int64_t rows,
                                         int nd, float *out, void *stream)
{
    RAP_TRY(check_args(cols, n_cols, rows, nd, out));
    if (rows == 0 || n_cols == 0)
        return RAP_OK;
    int at = 0;
    for (int c0 = 0; c0 < n_cols; c0 += RAP_PACK_MAX_COLS) {
        pack_args a;
        memset(&a, 0, sizeof a);
        a.n = n_cols - c0 < RAP_PACK_MAX_COLS ? n_cols - c0 : RAP_PACK_MAX_COLS;
        int maxw = 1;
        for (int i = 0; i < a.n; i++) {
            a.col[i] = cols[c0 + i];
            a.at[i] = at;
            at += cols[c0 + i].width;
            maxw = cols[c0 + i].width > maxw ? cols[c0 + i].width : maxw;
        }
        int64_t work = rows * maxw;
        int64_t blocks = (work + 255) / 256;
        dim3 grid((unsigned)(blocks < 4096 ? blocks : 4096), (unsigned)a.n);
        pack_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(a, rows, nd, out);
        RAP_CUDA_LAUNCHED();
    }
    return RAP_OK;
}

extern "C" rap_status rap_run_stream_create(void **stream)
{
    cudaStream_t s;
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = (void *)s;
    return RAP_OK;
}

extern "C" void rap_run_stream_free(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" rap_status rap_run_stream_sync(void *stream)
{
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_run_download(void *host, const void *dev, size_t n, void *stream)
{
    if (n == 0)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

#else /* no CUDA: every GPU entry point says so */

#define NO_GPU rap_fail(RAP_ERR_NO_GPU, "rap was built without CUDA (make CUDA=0)")

rap_status rap_pack_dense_gpu(const rap_pack_col *cols, int n_cols, int64_t rows, int nd,
                              float *out, void *stream)
{
    (void)cols, (void)n_cols, (void)rows, (void)nd, (void)out, (void)stream;
    return NO_GPU;
}
rap_status rap_run_stream_create(void **stream)
{
    *stream = NULL;
    return NO_GPU;
}
void rap_run_stream_free(void *stream) { (void)stream; }
rap_status rap_run_stream_sync(void *stream)
{
    (void)stream;
    return NO_GPU;
}
rap_status rap_run_download(void *host, const void *dev, size_t n, void *stream)
{
    (void)host, (void)dev, (void)n, (void)stream;
    return NO_GPU;
}

#endif
