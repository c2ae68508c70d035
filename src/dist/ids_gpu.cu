/*
 * ids_gpu.cu -- GPU kernels of the id exchange (ids.h): the pack of this
 * rank's share into fixed-size blocks, and the assembly of the received
 * blocks into each held table's offsets and ids (CUB scan of the
 * lengths). Their CPU references are in ids.c (rap_ids_pack_cpu,
 * rap_ids_assemble_cpu) and give the same words. Without CUDA the
 * launchers fail with RAP_ERR_NO_GPU.
 */
#include "dist/ids.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#include "core/cuda_util.h"

#include <climits>
#include <cub/device/device_scan.cuh>

/* ------------------------------------------------------------ kernels */

/* The share of global row g of n over R ranks (rap_hybrid_rows): its
 * rank's first row *row0 and row count *ns; returns g's row in it. */
static __device__ int64_t share_of(int64_t g, int64_t n, int R, int64_t *row0, int64_t *ns)
{
    int64_t base = n / R, extra = n % R, big = extra * (base + 1);
    /* g >= big means base > 0: the first `extra` ranks hold every row otherwise */
    int64_t s = g < big ? g / (base + 1) : extra + (g - big) / base;
    *ns = base + (s < extra);
    *row0 = s * base + (s < extra ? s : extra);
    return g - *row0;
}

/* One thread per word q of the block of chunk table ul: the word written
 * into each of the table's blocks (ids.h, rap_ids_pack_gpu). */
static __global__ void pack_kernel(rap_ids_chunk ch, const int *ub0, const int *ublk, int64_t nr,
                                   int K, int64_t *send, int *flag)
{
    int64_t per = nr * (1 + (int64_t)K); /* words of one block */
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= ch.n * per)
        return;
    int ul = (int)(e / per);
    int64_t q = e % per, v;
    const int64_t *off = ch.off[ul]; /* (nr+1) */
    if (q < nr) { /* the length of row q */
        int64_t len = off[q + 1] - off[q];
        if (len > K) {
            flag[0] = 1;
            atomicMin(&flag[1], ch.t[ul]);
            atomicMax(&flag[2], (int)(len < INT_MAX ? len : INT_MAX));
        }
        v = len < K ? len : K;
    } else { /* id j of row r, 0 past its length */
        int64_t r = (q - nr) / K, j = (q - nr) % K, o = off[r];
        v = j < off[r + 1] - o ? ch.ids[ul][o + j] : 0;
    }
    int u = ch.u0 + ul;
    for (int k = ub0[u]; k < ub0[u + 1]; k++)
        send[(int64_t)ublk[k] * per + q] = v;
}

/* cum[k*n + g] = the length of global row g in held table k. */
static __global__ void lens_kernel(const int64_t *recv, int64_t n, int R, int ntab, int K,
                                   int64_t *cum)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)ntab * n)
        return;
    int64_t W = 1 + (int64_t)K, k = e / n, g = e % n, row0, ns;
    int64_t i = share_of(g, n, R, &row0, &ns);
    cum[e] = recv[row0 * W * ntab + k * ns * W + i];
}

/* One thread per (held table k, row g, slot j < K), after the scan of
 * cum: slot j of g's ids to ids_k[off_k[g] + j] when j < its length; slot
 * 0 writes off_k[g + 1] (and row 0 off_k[0] = 0). */
static __global__ void compact_kernel(const int64_t *recv, int64_t n, int R, int ntab, int K,
                                      int64_t Bg, const int64_t *cum, int64_t *off, int64_t *ids)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)ntab * n * K)
        return;
    int64_t k = e / (n * K), rem = e % (n * K), g = rem / K, j = rem % K;
    int64_t idx = k * n + g, base = k > 0 ? cum[k * n - 1] : 0;
    int64_t start = (g > 0 ? cum[idx - 1] : base) - base, end = cum[idx] - base;
    int64_t *koff = off + k * (Bg + 1), *kids = ids + k * Bg * K; /* (n+1), (n*K) */
    if (j == 0) {
        koff[g + 1] = end;
        if (g == 0)
            koff[0] = 0;
    }
    if (j < end - start) {
        int64_t W = 1 + (int64_t)K, row0, ns;
        int64_t i = share_of(g, n, R, &row0, &ns);
        kids[start + j] = recv[row0 * W * ntab + k * ns * W + ns + i * K + j];
    }
}

/* ------------------------------------------------------------ launchers */

static unsigned grid_of(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g > 0 ? g : 1);
}

extern "C" rap_status rap_ids_pack_gpu(const rap_ids_chunk *ch, const int *ub0, const int *ublk,
                                       int64_t nr, int K, int64_t *send, int *flag, void *stream)
{
    int64_t total = (int64_t)ch->n * nr * (1 + (int64_t)K);
    if (total == 0)
        return RAP_OK;
    pack_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(*ch, ub0, ublk, nr, K,
                                                                        send, flag);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" size_t rap_ids_scan_scratch(int64_t items)
{
    size_t bytes = 0;
    cub::DeviceScan::InclusiveSum(NULL, bytes, (int64_t *)NULL, (int64_t *)NULL,
                                  (int)(items > 0 ? items : 1));
    return bytes;
}

extern "C" rap_status rap_ids_assemble_gpu(const int64_t *recv, int64_t n, int R, int ntab, int K,
                                           int64_t Bg, int64_t *cum, void *scratch,
                                           size_t scratch_bytes, int64_t *off, int64_t *ids,
                                           void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    int64_t items = (int64_t)ntab * n;
    if (items == 0)
        return RAP_OK;
    lens_kernel<<<grid_of(items, 256), 256, 0, s>>>(recv, n, R, ntab, K, cum);
    RAP_CUDA_LAUNCHED();
    size_t bytes = scratch_bytes;
    RAP_CUDA_TRY(cub::DeviceScan::InclusiveSum(scratch, bytes, cum, cum, (int)items, s));
    compact_kernel<<<grid_of(items * K, 256), 256, 0, s>>>(recv, n, R, ntab, K, Bg, cum, off,
                                                           ids);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_ids_flag_reset(int *flag)
{
    const int h[3] = {0, INT_MAX, 0};
    RAP_CUDA_TRY(cudaMemcpy(flag, h, sizeof h, cudaMemcpyHostToDevice));
    return RAP_OK;
}

extern "C" rap_status rap_ids_flag_read(const int *flag, int *host, void *stream)
{
    RAP_CUDA_TRY(cudaMemcpyAsync(host, flag, 3 * sizeof(int), cudaMemcpyDeviceToHost,
                                 (cudaStream_t)stream));
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

#else /* no CUDA: the launchers refuse */

#define NO_GPU return rap_fail(RAP_ERR_NO_GPU, "id exchange on the GPU: built without CUDA")

rap_status rap_ids_pack_gpu(const rap_ids_chunk *ch, const int *ub0, const int *ublk, int64_t nr,
                            int K, int64_t *send, int *flag, void *stream) { NO_GPU; }
size_t rap_ids_scan_scratch(int64_t items) { return 0; }
rap_status rap_ids_assemble_gpu(const int64_t *recv, int64_t n, int R, int ntab, int K,
                                int64_t Bg, int64_t *cum, void *scratch, size_t scratch_bytes,
                                int64_t *off, int64_t *ids, void *stream) { NO_GPU; }
rap_status rap_ids_flag_reset(int *flag) { NO_GPU; }
rap_status rap_ids_flag_read(const int *flag, int *host, void *stream)
{
    host[0] = 0;
    NO_GPU;
}

#endif
