/*
 * moves_gpu.cu -- GPU kernels of the planner's moves (moves.h): the pack
 * of the dense and sparse send units into their blocks, the scatter of the
 * received dense units into the packed dense, and the assembly of the held
 * tables (lengths, CUB scan, compaction). Block offsets follow from n and
 * the unit tables uploaded at create (rap_moves_units); a thread finds its
 * unit by a binary search over them. The CPU references are in moves.c
 * and give the same words. Without CUDA the launchers fail with
 * RAP_ERR_NO_GPU.
 */
#include "dist/moves.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#include "core/cuda_util.h"

#include <climits>
#include <cub/device/device_scan.cuh>

/* ------------------------------------------------------------ kernels */

/* First element of unit j's block for q = n / K, e = n % K (j == u.n:
 * the total). */
static __device__ int64_t unit_off(const rap_moves_units &u, int j, int64_t q, int e)
{
    return q * u.cw[j] + u.pe[(int64_t)j * u.K + e];
}

/* The unit holding element idx (< the total): the j with off(j) <= idx <
 * off(j+1) (a non-empty block). */
static __device__ int unit_of(const rap_moves_units &u, int64_t idx, int64_t q, int e)
{
    int lo = 0, hi = u.n; /* off(lo) <= idx < off(hi) */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (unit_off(u, mid, q, e) <= idx)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Share k of n rows over K (rap_hybrid_rows): first row and rows. */
static __device__ void share_rows(int k, int64_t q, int e, int64_t *r0, int64_t *nr)
{
    *nr = q + (k < e);
    *r0 = k * q + (k < e ? k : e);
}

/* The share of global row g: its index k, first row *r0 and rows *nr. */
static __device__ int share_of(int64_t g, int64_t q, int e, int64_t *r0, int64_t *nr)
{
    int64_t big = (int64_t)e * (q + 1); /* rows of the first e shares (one more each) */
    int k = (int)(g < big ? g / (q + 1) : e + (g - big) / q);
    share_rows(k, q, e, r0, nr);
    return k;
}

static __device__ void flag_row(int *flag, int t, int64_t len)
{
    flag[0] = 1;
    atomicMin(&flag[1], t);
    atomicMax(&flag[2], (int)(len < INT_MAX ? len : INT_MAX));
}

/* One thread per float of the dense send (or receive) buffer buf: pack
 * copies dense into it, else (scatter) it into dense. */
static __global__ void dense_kernel(rap_moves_units u, int64_t q, int e, int64_t total,
                                    float *dense, int ND, float *buf, bool pack)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total)
        return;
    int j = unit_of(u, idx, q, e);
    int col = u.u[4 * j], w = u.u[4 * j + 1], k = u.u[4 * j + 2];
    int64_t r0, nr, loc = idx - unit_off(u, j, q, e);
    share_rows(k, q, e, &r0, &nr);
    float *cell = dense + (r0 + loc / w) * ND + col + loc % w;
    if (pack)
        buf[idx] = *cell;
    else
        *cell = buf[idx];
}

/* One thread per word of the sparse send buffer; units whose table's slot
 * is outside the chunk are left to another launch. */
static __global__ void pack_sparse_kernel(rap_moves_units u, rap_moves_chunk ch, int64_t q, int e,
                                          int64_t total, int L, int64_t *send, int *flag)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total)
        return;
    int j = unit_of(u, idx, q, e);
    int v = u.u[4 * j + 3] - ch.s0;
    if (v < 0 || v >= ch.n)
        return;
    int k = u.u[4 * j + 2];
    int64_t r0, nr, loc = idx - unit_off(u, j, q, e), val;
    share_rows(k, q, e, &r0, &nr);
    const int64_t *off = ch.off[v]; /* over the global batch */
    if (loc < nr) { /* the length of row r0 + loc */
        int64_t len = off[r0 + loc + 1] - off[r0 + loc];
        if (len > L)
            flag_row(flag, ch.t[v], len);
        val = len < L ? len : L;
    } else { /* id s of row r0 + r, 0 past its length */
        int64_t r = (loc - nr) / L, s = (loc - nr) % L, o = off[r0 + r];
        val = s < off[r0 + r + 1] - o ? ch.ids[v][o + s] : 0;
    }
    send[idx] = val;
}

/* Row g of assembled table a: its length (local: clipped to L and flagged;
 * received: as sent) and where its ids are (*from). */
static __device__ int64_t row_of(const rap_moves_chunk &ch, int v, const int *src,
                                 const rap_moves_units &rs, const int64_t *recv, int a, int64_t g,
                                 int64_t q, int e, int L, bool flag_it, int *flag,
                                 const int64_t **from)
{
    int64_t r0, nr;
    int k = share_of(g, q, e, &r0, &nr);
    int j = src[a * rs.K + k];
    if (j < 0) {
        const int64_t *off = ch.off[v];
        int64_t o = off[g], len = off[g + 1] - o;
        if (len > L) {
            if (flag_it)
                flag_row(flag, ch.t[v], len);
            len = L;
        }
        *from = ch.ids[v] + o;
        return len;
    }
    const int64_t *blk = recv + unit_off(rs, j, q, e); /* (nr) lengths, (nr, L) ids */
    *from = blk + nr + (g - r0) * L;
    return blk[g - r0];
}

/* cum[a*n + g] = the length of row g of assembled table a (chunk's). */
static __global__ void lens_kernel(rap_moves_chunk ch, const int *src, rap_moves_units rs,
                                   const int64_t *recv, int64_t n, int L, int64_t *cum, int *flag)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)ch.n * n)
        return;
    int v = (int)(idx / n), a = ch.s0 + v;
    int64_t g = idx % n;
    const int64_t *from;
    cum[(int64_t)a * n + g] =
        row_of(ch, v, src, rs, recv, a, g, n / rs.K, (int)(n % rs.K), L, true, flag, &from);
}

/* One thread per (assembled table a of the chunk, row g, slot s < L),
 * after the scan of cum: slot s to ids_a[off_a[g] + s] when s < its
 * length; slot 0 writes off_a[g + 1] (and row 0 off_a[0] = 0). */
static __global__ void compact_kernel(rap_moves_chunk ch, const int *src, rap_moves_units rs,
                                      const int64_t *recv, int64_t n, int L, int64_t Bg,
                                      const int64_t *cum, int64_t *off, int64_t *ids)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)ch.n * n * L)
        return;
    int v = (int)(idx / (n * L)), a = ch.s0 + v;
    int64_t rem = idx % (n * L), g = rem / L, s = rem % L;
    int64_t c = (int64_t)a * n + g, base = a > 0 ? cum[(int64_t)a * n - 1] : 0;
    int64_t start = (g > 0 ? cum[c - 1] : base) - base, end = cum[c] - base;
    int64_t *aoff = off + (int64_t)a * (Bg + 1), *aids = ids + (int64_t)a * Bg * L;
    if (s == 0) {
        aoff[g + 1] = end;
        if (g == 0)
            aoff[0] = 0;
    }
    if (s < end - start) {
        const int64_t *from;
        row_of(ch, v, src, rs, recv, a, g, n / rs.K, (int)(n % rs.K), L, false, NULL, &from);
        aids[start + s] = from[s];
    }
}

/* ------------------------------------------------------------ launchers */

static unsigned grid_of(int64_t n, int block)
{
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g > 0 ? g : 1);
}

extern "C" rap_status rap_moves_pack_dense_gpu(const rap_moves_units *u, int64_t n,
                                               int64_t total, const float *dense, int ND,
                                               float *send, void *stream)
{
    if (total == 0)
        return RAP_OK;
    dense_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(
        *u, n / u->K, (int)(n % u->K), total, (float *)dense, ND, send, true);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_moves_scatter_dense_gpu(const rap_moves_units *u, int64_t n,
                                                  int64_t total, const float *recv, float *dense,
                                                  int ND, void *stream)
{
    if (total == 0)
        return RAP_OK;
    dense_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(
        *u, n / u->K, (int)(n % u->K), total, dense, ND, (float *)recv, false);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_moves_pack_sparse_gpu(const rap_moves_units *u,
                                                const rap_moves_chunk *ch, int64_t n,
                                                int64_t total, int L, int64_t *send, int *flag,
                                                void *stream)
{
    if (total == 0)
        return RAP_OK;
    pack_sparse_kernel<<<grid_of(total, 256), 256, 0, (cudaStream_t)stream>>>(
        *u, *ch, n / u->K, (int)(n % u->K), total, L, send, flag);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_moves_lens_gpu(const rap_moves_chunk *ch, const int *src,
                                         const rap_moves_units *rs, const int64_t *recv,
                                         int64_t n, int L, int64_t *cum, int *flag, void *stream)
{
    int64_t items = (int64_t)ch->n * n;
    if (items == 0)
        return RAP_OK;
    lens_kernel<<<grid_of(items, 256), 256, 0, (cudaStream_t)stream>>>(*ch, src, *rs, recv, n,
                                                                         L, cum, flag);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_moves_scan_gpu(int64_t *cum, int64_t items, void *scratch,
                                         size_t scratch_bytes, void *stream)
{
    if (items == 0)
        return RAP_OK;
    size_t bytes = scratch_bytes;
    RAP_CUDA_TRY(cub::DeviceScan::InclusiveSum(scratch, bytes, cum, cum, (int)items,
                                               (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_moves_compact_gpu(const rap_moves_chunk *ch, const int *src,
                                            const rap_moves_units *rs, const int64_t *recv,
                                            int64_t n, int L, int64_t Bg, const int64_t *cum,
                                            int64_t *off, int64_t *ids, void *stream)
{
    int64_t items = (int64_t)ch->n * n * L;
    if (items == 0)
        return RAP_OK;
    compact_kernel<<<grid_of(items, 256), 256, 0, (cudaStream_t)stream>>>(*ch, src, *rs, recv, n,
                                                                            L, Bg, cum, off, ids);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

extern "C" rap_status rap_moves_copy(void *dst, const void *src, size_t bytes, bool to_host,
                                     void *stream)
{
    RAP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes,
                                 to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                 (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_moves_sync(void *stream)
{
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

#else /* no CUDA: the launchers refuse */

#define NO_GPU return rap_fail(RAP_ERR_NO_GPU, "moves on the GPU: built without CUDA")

rap_status rap_moves_pack_dense_gpu(const rap_moves_units *u, int64_t n, int64_t total,
                                    const float *dense, int ND, float *send, void *stream)
{
    NO_GPU;
}
rap_status rap_moves_pack_sparse_gpu(const rap_moves_units *u, const rap_moves_chunk *ch,
                                     int64_t n, int64_t total, int L, int64_t *send, int *flag,
                                     void *stream)
{
    NO_GPU;
}
rap_status rap_moves_scatter_dense_gpu(const rap_moves_units *u, int64_t n, int64_t total,
                                       const float *recv, float *dense, int ND, void *stream)
{
    NO_GPU;
}
rap_status rap_moves_lens_gpu(const rap_moves_chunk *ch, const int *src, const rap_moves_units *rs,
                              const int64_t *recv, int64_t n, int L, int64_t *cum, int *flag,
                              void *stream) { NO_GPU; }
rap_status rap_moves_scan_gpu(int64_t *cum, int64_t items, void *scratch, size_t scratch_bytes,
                              void *stream) { NO_GPU; }
rap_status rap_moves_compact_gpu(const rap_moves_chunk *ch, const int *src,
                                 const rap_moves_units *rs, const int64_t *recv, int64_t n,
                                 int L, int64_t Bg, const int64_t *cum, int64_t *off,
                                 int64_t *ids, void *stream) { NO_GPU; }
rap_status rap_moves_copy(void *dst, const void *src, size_t bytes, bool to_host, void *stream)
{
    NO_GPU;
}
rap_status rap_moves_sync(void *stream) { NO_GPU; }

#endif
