/*
 * mlp_kernels.cu -- the MLP's own kernels: what a plain GEMM leaves to do
 * when cuBLASLt's epilogue is not taken (bias + ReLU + bitmask, ReLU
 * backward, bias gradients), and the logit layer (out == 1).
 *
 * Three generations, chosen by g->mlp_ver (RAP_GPU_MLP=v1 or =v2 keeps
 * an earlier one):
 *   v1  one thread a column, scalar loads: bias_act_kernel, drelu_kernel
 *       (mask from y), drelu_mask_kernel (own bitmask), colsum_kernel;
 *       the ReLU backward and the bias gradient as separate passes.
 *   v2  16 bytes a thread (8 bf16 or 4 floats, consecutive columns):
 *       bias_act_vec_kernel; drelu_colsum_kernel masks the previous
 *       layer's gradient (from y > 0 or the own bitmask) AND sums its
 *       columns (that layer's bias gradient) in one pass over it; with no
 *       mask it is the column sum alone. Rows in fixed splits, partial
 *       sums reduced in a fixed order: deterministic. A width or pointer
 *       the 16-byte kernels cannot take runs the v1 kernels.
 *   v3  v2's work with more loads in flight and full waves (the v3
 *       section below says why): bias_act3_kernel, drelu_colsum3_kernel,
 *       colsum_final3_kernel.
 * The logit layer's backward also sums the gradient it hands down when
 * asked (the bias gradient of the layer below it).
 *
 * Own bitmask: bit o % 32 of word mask[r * mask_ld + o / 32] is (y > 0) of
 * row r, column o (out % 32 == 0).
 */
#include "model/gpu/gpu_model.h"

#include <stdint.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define MLP_THREADS 256

/* ---------------------------------------------------------- v1 kernels */

template <typename T> static __device__ __forceinline__ float ld_f(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld_f<float>(const float *p, int64_t i)
{
    return p[i];
}
template <>
__device__ __forceinline__ float ld_f<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}
static __device__ __forceinline__ void st_f(float *p, int64_t i, float v) { p[i] = v; }
static __device__ __forceinline__ void st_f(__nv_bfloat16 *p, int64_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

/* Grid of the row-loop kernels below: x over columns (256 per block), y
 * over rows (grid-stride). */
static dim3 row_grid(const rap_gpu *g, int64_t rows, int cols)
{
    const unsigned gx = (unsigned)((cols + MLP_THREADS - 1) / MLP_THREADS);
    int64_t gy = (int64_t)g->sms * 16 / gx;
    if (gy < 1)
        gy = 1;
    if (gy > rows)
        gy = rows;
    if (gy > 65535)
        gy = 65535;
    return dim3(gx, (unsigned)gy);
}

/* y[r*ld + o] = [relu](y + b[o]) for r < rows, o < out; with mask (out a
 * multiple of 32: whole warps in or out) also bit o%32 of word
 * mask[r*mask_ld + o/32] = (y > 0), the ReLU mask for drelu_mask_kernel. */
template <typename T>
static __global__ void bias_act_kernel(T *y, int64_t ld, int64_t rows, int out,
                                       const float *__restrict__ b, int relu,
                                       uint32_t *__restrict__ mask, int64_t mask_ld)
{
    const int o = blockIdx.x * MLP_THREADS + threadIdx.x;
    if (o >= out)
        return;
    const float bo = b[o];
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float v = ld_f(y, r * ld + o) + bo;
        if (relu && !(v > 0.0f))
            v = 0.0f;
        st_f(y, r * ld + o, v);
        if (mask) {
            const unsigned bits = __ballot_sync(0xffffffffu, v > 0.0f);
            if ((threadIdx.x & 31) == 0)
                mask[r * mask_ld + o / 32] = bits;
        }
    }
}

/* da[r*out + o] = 0 where bit o of row r's ReLU mask (bias_act_kernel) is
 * clear. */
template <typename T>
static __global__ void drelu_mask_kernel(T *da, int64_t rows, int out,
                                         const uint32_t *__restrict__ mask, int64_t mask_ld)
{
    const int o = blockIdx.x * MLP_THREADS + threadIdx.x;
    if (o >= out)
        return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        if (!((mask[r * mask_ld + o / 32] >> (o & 31)) & 1u))
            st_f(da, r * out + o, 0.0f);
}

/* da[r*out + o] = y[r*ldy + o] > 0 ? da : 0. */
template <typename T, typename TY>
static __global__ void drelu_kernel(T *da, int64_t rows, int out, const TY *__restrict__ y,
                                    int64_t ldy)
{
    const int o = blockIdx.x * MLP_THREADS + threadIdx.x;
    if (o >= out)
        return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        if (!(ld_f(y, r * ldy + o) > 0.0f))
            st_f(da, r * out + o, 0.0f);
}

/* part[s*cols + c] = sum of da[r*cols + c] over the rows of split s.
 * Block (32, 8); grid (ceil(cols/32), S). */
template <typename T>
static __global__ void colsum_kernel(const T *__restrict__ da, int64_t rows, int cols,
                                     float *part)
{
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < cols)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows;
             r += (int64_t)gridDim.y * 8)
            s += ld_f(da, r * cols + c);
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++)
            t += sm[k][threadIdx.x];
        part[(int64_t)blockIdx.y * cols + c] = t;
    }
}

static __global__ void colsum_final_kernel(const float *__restrict__ part, int S, int cols,
                                           float *db)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float t = 0.0f;
    for (int s = 0; s < S; s++)
        t += part[(int64_t)s * cols + c];
    db[c] = t;
}

/* ------------------------------------------------- the logit layer (out 1) */

/* y[r] = b[0] + sum_k x[r*ldx + k] w[k]; a warp per row. */
template <typename T>
static __global__ void gemv_fwd_kernel(const T *__restrict__ x, int64_t ldx, int64_t rows,
                                       int in, const float *__restrict__ w,
                                       const float *__restrict__ b, float *__restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows;
         r += nw) {
        const T *xr = x + r * ldx;
        float s = 0.0f;
        for (int k = lane; k < in; k += 32)
            s += ld_f(xr, k) * w[k];
        for (int o = 16; o > 0; o /= 2)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            y[r] = s + b[0];
    }
}

/* Split s of S (blocks) over rows: part[s*in + k] = sum over its rows of
 * da[r] x[r, k]; dx[r*lddx + k] = da[r] w[k] (times x > 0 when mask);
 * with dpart also dpart[s*in + k] = the sum of those dx over its rows (the
 * previous layer's bias gradient, from the unrounded values). */
template <typename T>
static __global__ void gemv_bwd_kernel(const T *__restrict__ x, int64_t ldx,
                                       const T *__restrict__ da, int64_t rows, int in,
                                       const float *__restrict__ w, T *__restrict__ dx,
                                       int64_t lddx, int mask, float *__restrict__ part,
                                       float *__restrict__ dpart)
{
    const int64_t per = (rows + gridDim.x - 1) / gridDim.x;
    const int64_t r0 = (int64_t)blockIdx.x * per;
    const int64_t r1 = r0 + per < rows ? r0 + per : rows;
    for (int k = threadIdx.x; k < in; k += blockDim.x) {
        const float wk = w[k];
        float acc = 0.0f, dsum = 0.0f;
#pragma unroll 4
        for (int64_t r = r0; r < r1; r++) {
            const float d = ld_f(da, r);
            const float xv = ld_f(x, r * ldx + k);
            acc += d * xv;
            if (dx) {
                const float v = (mask && !(xv > 0.0f)) ? 0.0f : d * wk;
                st_f(dx, r * lddx + k, v);
                dsum += v;
            }
        }
        part[(int64_t)blockIdx.x * in + k] = acc;
        if (dpart)
            dpart[(int64_t)blockIdx.x * in + k] = dsum;
    }
}

/* 8 consecutive act values from p (16-byte aligned) as floats, and back. */
static __device__ __forceinline__ void ld8(const __nv_bfloat16 *p, float (&v)[8])
{
    const uint4 u = *(const uint4 *)p;
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
static __device__ __forceinline__ void ld8(const float *p, float (&v)[8])
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
static __device__ __forceinline__ void st8(__nv_bfloat16 *p, const float (&v)[8])
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i])) |
               ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * i + 1])) << 16);
    *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
}
static __device__ __forceinline__ void st8(float *p, const float (&v)[8])
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* gemv_bwd_kernel's results with 8 columns a lane (in <= 256, in % 8 ==
 * 0, ldx and lddx multiples of 8): a warp takes every 8th row of the
 * block's split, 16-byte loads and stores, four rows in flight; the warps'
 * sums are added in warp order through shared memory (fixed order). Why:
 * a thread a column moved 2 bytes a load and kept about 4 KB in flight an
 * SM; the logit layer's backward at batch 65536 (67 MB) took 58 µs,
 * about 4 times its floor (bench/RESULTS.md, 2026-12-02). */
template <typename T>
static __global__ void __launch_bounds__(MLP_THREADS)
    gemv_bwd8_kernel(const T *__restrict__ x, int64_t ldx, const T *__restrict__ da, int64_t rows,
                     int in, const float *__restrict__ w, T *__restrict__ dx, int64_t lddx,
                     int mask, float *__restrict__ part, float *__restrict__ dpart)
{
    constexpr int NW = MLP_THREADS / 32;
    __shared__ float red[2][NW][256];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = 8 * lane;
    const bool on = c < in;
    const int64_t per = (rows + gridDim.x - 1) / gridDim.x;
    const int64_t r0 = (int64_t)blockIdx.x * per;
    const int64_t r1 = r0 + per < rows ? r0 + per : rows;
    float wk[8], acc[8], ds[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        wk[i] = on ? w[c + i] : 0.0f;
        acc[i] = ds[i] = 0.0f;
    }
    if (on) {
#pragma unroll 4
        for (int64_t r = r0 + warp; r < r1; r += NW) {
            const float d = ld_f(da, r);
            float xv[8];
            ld8(x + r * ldx + c, xv);
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[i] += d * xv[i];
            if (dx) {
                float v[8];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    v[i] = (mask && !(xv[i] > 0.0f)) ? 0.0f : d * wk[i];
                    ds[i] += v[i];
                }
                st8(dx + r * lddx + c, v);
            }
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            red[0][warp][c + i] = acc[i];
            red[1][warp][c + i] = ds[i];
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < in; k += blockDim.x) {
        float t = 0.0f, u = 0.0f;
        for (int v = 0; v < NW; v++) {
            t += red[0][v][k];
            u += red[1][v][k];
        }
        part[(int64_t)blockIdx.x * in + k] = t;
        if (dpart)
            dpart[(int64_t)blockIdx.x * in + k] = u;
    }
}

/* dw[k] = sum_s part[s*in + k] (and pdb[k] = sum_s dpart[s*in + k] when
 * pdb) in blocks 0..; the last block: db[0] = sum of da over the rows.
 * Fixed order: deterministic. */
template <typename T>
static __global__ void gemv_final_kernel(const float *__restrict__ part, int S, int in,
                                         const T *__restrict__ da, int64_t rows,
                                         float *__restrict__ dw, float *__restrict__ db,
                                         const float *__restrict__ dpart,
                                         float *__restrict__ pdb)
{
    __shared__ float sm[MLP_THREADS / 32];
    if (blockIdx.x + 1 < gridDim.x) {
        const int k = blockIdx.x * MLP_THREADS + threadIdx.x;
        if (k >= in)
            return;
        float t = 0.0f;
        for (int s = 0; s < S; s++)
            t += part[(int64_t)s * in + k];
        dw[k] = t;
        if (pdb) {
            float u = 0.0f;
            for (int s = 0; s < S; s++)
                u += dpart[(int64_t)s * in + k];
            pdb[k] = u;
        }
        return;
    }
    float t = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += MLP_THREADS)
        t += ld_f(da, r);
    for (int o = 16; o > 0; o /= 2)
        t += __shfl_xor_sync(0xffffffffu, t, o);
    if ((threadIdx.x & 31) == 0)
        sm[threadIdx.x / 32] = t;
    __syncthreads();
    if (threadIdx.x == 0) {
        float u = 0.0f;
        for (int i = 0; i < MLP_THREADS / 32; i++)
            u += sm[i];
        db[0] = u;
    }
}

/* ---------------------------------------------------------- v2 kernels */

/* 16 bytes of act values at p (16-byte aligned) to or from floats. */
static __device__ __forceinline__ void ld16(const float *p, float (&v)[4])
{
    const float4 f = *(const float4 *)p;
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}
static __device__ __forceinline__ void ld16(const __nv_bfloat16 *p, float (&v)[8])
{
    const uint4 u = *(const uint4 *)p;
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
static __device__ __forceinline__ void st16(float *p, const float (&v)[4])
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ uint32_t bf16x2(float a, float b)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16);
}
static __device__ __forceinline__ void st16(__nv_bfloat16 *p, const float (&v)[8])
{
    *(uint4 *)p = make_uint4(bf16x2(v[0], v[1]), bf16x2(v[2], v[3]), bf16x2(v[4], v[5]),
                             bf16x2(v[6], v[7]));
}

/* 16 bytes of act values already loaded (4 floats or 8 bf16) as floats. */
static __device__ __forceinline__ void unpack16(const uint4 u, float (&v)[4])
{
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
}
static __device__ __forceinline__ void unpack16(const uint4 u, float (&v)[8])
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}

/* y[r*ld + o] = [relu](y + b[o]), V = 16 / sizeof(T) columns a thread
 * (out % V == 0, ld % V == 0, y 16-byte aligned); with mask (out % 32 ==
 * 0) also the own bitmask of the result. Block (bx, by): x over column
 * chunks (bx a multiple of 32: a warp in one row), y over rows
 * (grid-stride). */
template <typename T>
static __global__ void bias_act_vec_kernel(T *__restrict__ y, int64_t ld, int64_t rows, int out,
                                           const float *__restrict__ b, int relu,
                                           uint32_t *__restrict__ mask, int64_t mask_ld)
{
    constexpr int V = 16 / (int)sizeof(T), LPW = 32 / V; /* lanes a mask word */
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x) * V;
    const bool on = c < out;
    float bv[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        bv[k] = on ? b[c + k] : 0.0f;
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
         r += (int64_t)gridDim.y * blockDim.y) {
        uint32_t bits = 0;
        if (on) {
            float v[V];
            ld16(y + r * ld + c, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float t = v[k] + bv[k];
                if (relu && !(t > 0.0f))
                    t = 0.0f;
                v[k] = t;
                bits |= (uint32_t)(t > 0.0f) << k;
            }
            st16(y + r * ld + c, v);
        }
        if (mask) { /* every lane of the warp: the same r */
            bits <<= (c % 32);
#pragma unroll
            for (int o = 1; o < LPW; o *= 2)
                bits |= __shfl_xor_sync(0xffffffffu, bits, o);
            if (on && c % 32 == 0)
                mask[r * mask_ld + c / 32] = bits;
        }
    }
}

#define DC_ROWS 4 /* rows a thread loads before it uses them */

/* da (rows, cols) act: MODE 1 zeroes da where y[r*ldy + c] <= 0, MODE 2
 * where the own bitmask's bit is clear (cols % 32 == 0), MODE 0 leaves it;
 * then part[s*cols + c] = the sum of da's column c over the rows of split
 * s = blockIdx.y (rows s*by + ty + k*S*by), each thread's rows in order,
 * the block's threads in y order. V = 16 / sizeof(T) columns a thread
 * (cols % V == 0, da and y 16-byte aligned, ldy % V == 0). 256 threads. */
template <typename T, int MODE>
static __global__ void __launch_bounds__(256)
    drelu_colsum_kernel(T *__restrict__ da, int64_t rows, int cols, const T *__restrict__ y,
                        int64_t ldy, const uint32_t *__restrict__ mask, int64_t mask_ld,
                        float *__restrict__ part)
{
    constexpr int V = 16 / (int)sizeof(T);
    __shared__ float sm[256 * V];
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x) * V;
    const bool on = c < cols;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        acc[k] = 0.0f;
    const int64_t step = (int64_t)gridDim.y * blockDim.y;
    for (int64_t r0 = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; on && r0 < rows;
         r0 += DC_ROWS * step) {
        float v[DC_ROWS][V];
        float m[DC_ROWS][MODE == 1 ? V : 1];
        uint32_t w[DC_ROWS];
#pragma unroll
        for (int u = 0; u < DC_ROWS; u++) {
            const int64_t r = r0 + u * step;
            w[u] = 0;
            if (r < rows) {
                ld16(da + r * cols + c, v[u]);
                if constexpr (MODE == 1)
                    ld16(y + r * ldy + c, m[u]);
                if constexpr (MODE == 2)
                    w[u] = __ldg(mask + r * mask_ld + c / 32) >> (c % 32);
            }
        }
#pragma unroll
        for (int u = 0; u < DC_ROWS; u++) {
            const int64_t r = r0 + u * step;
            if (r >= rows)
                break;
            if constexpr (MODE != 0) {
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const bool keep = MODE == 1 ? m[u][MODE == 1 ? k : 0] > 0.0f
                                                : ((w[u] >> k) & 1u) != 0;
                    if (!keep)
                        v[u][k] = 0.0f;
                }
                st16(da + r * cols + c, v[u]);
            }
#pragma unroll
            for (int k = 0; k < V; k++)
                acc[k] += v[u][k];
        }
    }
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < V; k++)
        sm[t * V + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && on)
#pragma unroll
        for (int k = 0; k < V; k++) {
            float s = 0.0f;
            for (int yy = 0; yy < (int)blockDim.y; yy++)
                s += sm[(yy * blockDim.x + threadIdx.x) * V + k];
            part[(int64_t)blockIdx.y * cols + c + k] = s;
        }
}

/* ---------------------------------------------------------- v3 kernels */

/*
 * Why v3: v2's passes ran at 72-77 % of the copy bandwidth on the H200
 * (bench/RESULTS.md, 2026-12-01): one 16-byte load in flight per thread
 * and row in bias_act_vec_kernel (32 KB an SM), and drelu_colsum_kernel's
 * 256-thread blocks in at most 256 row splits (16 warps an SM, 2 blocks
 * on most SMs and 1 on the rest). Its final sums (colsum_final_kernel) ran
 * one thread a column over all the splits, about 6 us each. v3:
 *   bias_act3_kernel     4 rows a thread loaded before any is used;
 *   drelu_colsum3_kernel 512-thread blocks, the columns of a row over
 *                        consecutive threads and several rows a block
 *                        (no idle lanes for narrow layers), 2 blocks an
 *                        SM in one wave (the splits a multiple of the SMs
 *                        where the partials' room allows);
 *   colsum_final3_kernel 8 threads a column, each over every 8th split,
 *                        then their 8 sums in order: deterministic.
 * With mlp.cu's v3 choices (the forward epilogue's cuBLASLt bitmask read
 * where a create-time probe saw its layout be the own one) the ReLU
 * backward reads 1 bit an element instead of y.
 */

#define BA3_ROWS 4     /* bias_act3_kernel: rows a thread loads at once */
#define BA3_BLOCKS 4   /* ... and its blocks of 256 an SM (the register cap: 64) */
#define DC3_THREADS 512 /* drelu_colsum3_kernel's block */

/* y[r*ld + o] = [relu](y + b[o]) as bias_act_vec_kernel (same arguments,
 * same block shapes), the rows of a thread BA3_ROWS at a time: their loads
 * in flight together. */
template <typename T>
static __global__ void __launch_bounds__(256, BA3_BLOCKS)
    bias_act3_kernel(T *__restrict__ y, int64_t ld, int64_t rows, int out,
                     const float *__restrict__ b, int relu, uint32_t *__restrict__ mask,
                     int64_t mask_ld)
{
    constexpr int V = 16 / (int)sizeof(T), LPW = 32 / V;
    const int c = (int)(blockIdx.x * blockDim.x + threadIdx.x) * V;
    const bool on = c < out;
    float bv[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        bv[k] = on ? b[c + k] : 0.0f;
    const int64_t step = (int64_t)gridDim.y * blockDim.y;
    for (int64_t r0 = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r0 < rows;
         r0 += BA3_ROWS * step) {
        uint4 raw[BA3_ROWS];
#pragma unroll
        for (int u = 0; u < BA3_ROWS; u++) {
            const int64_t r = r0 + u * step;
            raw[u] = make_uint4(0, 0, 0, 0);
            if (on && r < rows)
                raw[u] = *(const uint4 *)(y + r * ld + c);
        }
#pragma unroll
        for (int u = 0; u < BA3_ROWS; u++) {
            const int64_t r = r0 + u * step;
            if (r >= rows) /* the same on every lane of the warp: one row */
                break;
            uint32_t bits = 0;
            if (on) {
                float v[V];
                unpack16(raw[u], v);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float t = v[k] + bv[k];
                    if (relu && !(t > 0.0f))
                        t = 0.0f;
                    v[k] = t;
                    bits |= (uint32_t)(t > 0.0f) << k;
                }
                st16(y + r * ld + c, v);
            }
            if (mask) {
                bits <<= (c % 32);
#pragma unroll
                for (int o = 1; o < LPW; o *= 2)
                    bits |= __shfl_xor_sync(0xffffffffu, bits, o);
                if (on && c % 32 == 0)
                    mask[r * mask_ld + c / 32] = bits;
            }
        }
    }
}

/* da (rows, cols) act, MODE as drelu_colsum_kernel (1: y > 0, 2: the own
 * bitmask's bit, 0: no mask), then part[s*cols + c] = the sum of column c
 * over the rows of split s = blockIdx.y. A block of DC3_THREADS: thread t
 * takes 16-byte chunk t % cpb (of the cpb chunks of block column
 * blockIdx.x) and row t / cpb of the block's rpb rows (threads past rpb *
 * cpb idle); split s's rows are s*rpb + ty + k*S*rpb, each thread's in
 * order, DC_ROWS loaded at once; the block's threads are summed in row
 * order. cols % V == 0, da and y 16-byte aligned, ldy % V == 0. */
template <typename T, int MODE>
static __global__ void __launch_bounds__(DC3_THREADS, 2)
    drelu_colsum3_kernel(T *__restrict__ da, int64_t rows, int cols, int cpb, int rpb,
                         const T *__restrict__ y, int64_t ldy,
                         const uint32_t *__restrict__ mask, int64_t mask_ld,
                         float *__restrict__ part)
{
    constexpr int V = 16 / (int)sizeof(T);
    __shared__ float sm[DC3_THREADS * V];
    const int cc = (int)threadIdx.x % cpb, ty = (int)threadIdx.x / cpb;
    const int c = (blockIdx.x * cpb + cc) * V;
    const bool on = ty < rpb && c < cols;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        acc[k] = 0.0f;
    const int64_t step = (int64_t)gridDim.y * rpb;
    for (int64_t r0 = (int64_t)blockIdx.y * rpb + ty; on && r0 < rows; r0 += DC_ROWS * step) {
        uint4 a[DC_ROWS], m[DC_ROWS];
        uint32_t w[DC_ROWS];
#pragma unroll
        for (int u = 0; u < DC_ROWS; u++) {
            const int64_t r = r0 + u * step;
            a[u] = m[u] = make_uint4(0, 0, 0, 0);
            w[u] = 0;
            if (r < rows) {
                a[u] = *(const uint4 *)(da + r * cols + c);
                if constexpr (MODE == 1)
                    m[u] = __ldg((const uint4 *)(y + r * ldy + c));
                if constexpr (MODE == 2)
                    w[u] = __ldg(mask + r * mask_ld + c / 32) >> (c % 32);
            }
        }
#pragma unroll
        for (int u = 0; u < DC_ROWS; u++) {
            const int64_t r = r0 + u * step;
            if (r >= rows)
                break;
            float v[V];
            unpack16(a[u], v);
            if constexpr (MODE != 0) {
                float yv[MODE == 1 ? V : 1];
                if constexpr (MODE == 1)
                    unpack16(m[u], yv);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    bool keep;
                    if constexpr (MODE == 1)
                        keep = yv[k] > 0.0f;
                    else
                        keep = ((w[u] >> k) & 1u) != 0;
                    if (!keep)
                        v[k] = 0.0f;
                }
                st16(da + r * cols + c, v);
            }
#pragma unroll
            for (int k = 0; k < V; k++)
                acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++)
        sm[threadIdx.x * V + k] = acc[k];
    __syncthreads();
    if (ty == 0 && c < cols)
#pragma unroll
        for (int k = 0; k < V; k++) {
            float s = 0.0f;
            for (int yy = 0; yy < rpb; yy++)
                s += sm[(yy * cpb + cc) * V + k];
            part[(int64_t)blockIdx.y * cols + c + k] = s;
        }
}

/* db[c] = the sum over s < S of part[s*cols + c]: thread (x, y) of a
 * (32, 8) block sums splits y, y + 8, ... in order, then thread (x, 0)
 * their 8 sums in order. Deterministic. */
static __global__ void __launch_bounds__(256)
    colsum_final3_kernel(const float *__restrict__ part, int S, int cols, float *__restrict__ db)
{
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (c < cols)
#pragma unroll 8
        for (int s = threadIdx.y; s < S; s += 8)
            t += part[(int64_t)s * cols + c];
    sm[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float u = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++)
            u += sm[k][threadIdx.x];
        db[c] = u;
    }
}

/* ------------------------------------------------------------ launchers */

static bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* v at most most (first), then at least 1: a count of blocks or splits. */
static int64_t clamp_blocks(int64_t v, int64_t most)
{
    if (v > most)
        v = most;
    return v < 1 ? 1 : v;
}

/* Block and grid of the v2 kernels for chunks (V-column pieces) a row:
 * bx a multiple of 32 (at most 256), by = 256 / bx; gy row blocks (at most
 * cap_y). */
static void vec_shape(int chunks, int64_t rows, int64_t cap_y, dim3 *blk, dim3 *grd)
{
    int bx = (chunks + 31) / 32 * 32;
    if (bx > 256)
        bx = 256;
    const int by = 256 / bx;
    const unsigned gx = (unsigned)((chunks + bx - 1) / bx);
    int64_t gy = clamp_blocks((rows + by - 1) / by, cap_y);
    if (gy > 65535)
        gy = 65535;
    *blk = dim3((unsigned)bx, (unsigned)by);
    *grd = dim3(gx, (unsigned)gy);
}

/* The bias/ReLU kernel of generation ver (3, 2 or 1) for element type T
 * on grid grd (blocks blk; v1: MLP_THREADS) over l->y. */
template <typename T>
static void bias_act_launch(rap_gpu *g, int ver, dim3 grd, dim3 blk, const rap_gpu_layer *l,
                            int64_t rows, uint32_t *mask, int64_t mld)
{
    T *y = (T *)l->y;
    const int relu = l->relu ? 1 : 0;
    if (ver == 3)
        bias_act3_kernel<T><<<grd, blk, 0, g->stream>>>(y, l->ldy, rows, l->out, l->b, relu,
                                                         mask, mld);
    else if (ver == 2)
        bias_act_vec_kernel<T><<<grd, blk, 0, g->stream>>>(y, l->ldy, rows, l->out, l->b, relu,
                                                            mask, mld);
    else
        bias_act_kernel<T><<<grd, MLP_THREADS, 0, g->stream>>>(y, l->ldy, rows, l->out, l->b,
                                                              relu, mask, mld);
}

rap_status rap_gpu_bias_act(rap_gpu *g, const rap_gpu_layer *l, int64_t rows, uint32_t *mask)
{
    const int64_t mld = l->aux_ld / 32;
    const bool b16 = l->ytype == CUDA_R_16BF;
    const int V = b16 ? 8 : 4;
    const bool vec = l->out % V == 0 && l->ldy % V == 0 && al16(l->y);
    const int ver = vec && g->mlp_ver >= 3 ? 3 : vec && g->mlp_ver >= 2 ? 2 : 1;
    const int chunks = l->out / V;
    dim3 blk, grd;
    if (ver == 3) /* one wave of BA3_BLOCKS blocks an SM */
        vec_shape(chunks, rows, (int64_t)g->sms * BA3_BLOCKS / ((chunks + 255) / 256), &blk,
                  &grd);
    else if (ver == 2)
        vec_shape(chunks, rows, (int64_t)g->sms * 8 / ((chunks + 255) / 256) + 1, &blk, &grd);
    else
        grd = row_grid(g, rows, l->out);
    if (b16)
        bias_act_launch<__nv_bfloat16>(g, ver, grd, blk, l, rows, mask, mld);
    else
        bias_act_launch<float>(g, ver, grd, blk, l, rows, mask, mld);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* v1 column sums: colsum_kernel, then the fixed-order final sum. */
static rap_status colsum_v1(rap_gpu *g, const void *da, int64_t rows, int cols, float *db)
{
    const int S = (int)clamp_blocks((rows + 63) / 64, 256);
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)S), block(32, 8);
    if (g->bf16)
        colsum_kernel<__nv_bfloat16>
            <<<grid, block, 0, g->stream>>>((const __nv_bfloat16 *)da, rows, cols, g->colsum);
    else
        colsum_kernel<float><<<grid, block, 0, g->stream>>>((const float *)da, rows, cols,
                                                            g->colsum);
    RAP_CUDA_LAUNCHED();
    colsum_final_kernel<<<(cols + 255) / 256, 256, 0, g->stream>>>(g->colsum, S, cols, db);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* v1 ReLU backward of da (rows, out): from prev's own bitmask or its y. */
static rap_status drelu_v1(rap_gpu *g, void *da, int64_t rows, int out, const void *y,
                           int64_t ldy, const uint32_t *mask, int64_t mask_ld)
{
    const dim3 grid = row_grid(g, rows, out);
    if (mask && g->bf16)
        drelu_mask_kernel<__nv_bfloat16><<<grid, MLP_THREADS, 0, g->stream>>>(
            (__nv_bfloat16 *)da, rows, out, mask, mask_ld);
    else if (mask)
        drelu_mask_kernel<float><<<grid, MLP_THREADS, 0, g->stream>>>((float *)da, rows, out,
                                                                     mask, mask_ld);
    else if (g->bf16)
        drelu_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, MLP_THREADS, 0, g->stream>>>(
            (__nv_bfloat16 *)da, rows, out, (const __nv_bfloat16 *)y, ldy);
    else
        drelu_kernel<float, float><<<grid, MLP_THREADS, 0, g->stream>>>(
            (float *)da, rows, out, (const float *)y, ldy);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status rap_gpu_drelu(rap_gpu *g, const rap_gpu_layer *prev, int64_t rows, bool own)
{
    return drelu_v1(g, prev->da, rows, prev->out, prev->y, prev->ldy,
                    own ? (const uint32_t *)prev->aux : NULL, prev->aux_ld / 32);
}

/* Floats of g->colsum (gpu_model.cu sizes it: 256 x (max(maxw, ld_in) +
 * maxw)). */
static int64_t colsum_room(const rap_gpu *g)
{
    return 256 * (int64_t)((g->maxw > g->ld_in ? g->maxw : g->ld_in) + g->maxw);
}

/* One launch of the one-pass ReLU backward and column partials (v2's
 * drelu_colsum_kernel or v3's drelu_colsum3_kernel): its grid and the
 * kernels' arguments. */
typedef struct {
    bool v3;
    dim3 grd, blk;           /* blk: v2 (v3: DC3_THREADS threads) */
    int cpb, rpb;            /* v3: chunks and rows a block */
    void *da;                /* (rows, cols) act */
    int64_t rows;
    int cols;
    const void *y;           /* (rows, ldy) act, mode 1 */
    int64_t ldy;
    const uint32_t *mask;    /* (rows, mask_ld) words, mode 2 */
    int64_t mask_ld;
    float *part;             /* (grd.y, cols) partial sums */
} dc_launch;

template <typename T, int M>
static void dc_kernel(rap_gpu *g, const dc_launch *a)
{
    if (a->v3)
        drelu_colsum3_kernel<T, M><<<a->grd, DC3_THREADS, 0, g->stream>>>(
            (T *)a->da, a->rows, a->cols, a->cpb, a->rpb, (const T *)a->y, a->ldy, a->mask,
            a->mask_ld, a->part);
    else
        drelu_colsum_kernel<T, M><<<a->grd, a->blk, 0, g->stream>>>(
            (T *)a->da, a->rows, a->cols, (const T *)a->y, a->ldy, a->mask, a->mask_ld,
            a->part);
}

template <typename T> static void dc_mode(rap_gpu *g, int mode, const dc_launch *a)
{
    if (mode == 0)
        dc_kernel<T, 0>(g, a);
    else if (mode == 1)
        dc_kernel<T, 1>(g, a);
    else
        dc_kernel<T, 2>(g, a);
}

/* Launches a for g's act type and mode (0, 1, else 2). */
static rap_status dc_run(rap_gpu *g, int mode, const dc_launch *a)
{
    if (g->bf16)
        dc_mode<__nv_bfloat16>(g, mode, a);
    else
        dc_mode<float>(g, mode, a);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* v3 launch of drelu_colsum3_kernel (mode as drelu_colsum_v2; da, y and
 * the widths already checked for 16-byte access) and the final sums. */
static rap_status drelu_colsum_v3(rap_gpu *g, void *da, int64_t rows, int cols, const void *y,
                                  int64_t ldy, const uint32_t *mask, int64_t mask_ld, int mode,
                                  float *db)
{
    const int V = g->bf16 ? 8 : 4, chunks = cols / V;
    int cpb = chunks, rpb = DC3_THREADS / chunks;
    unsigned gx = 1;
    if (chunks > DC3_THREADS) {
        cpb = DC3_THREADS;
        rpb = 1;
        gx = (unsigned)((chunks + DC3_THREADS - 1) / DC3_THREADS);
    }
    /* 2 blocks an SM in one wave, at least 8 rows a thread, within the
     * partials' room */
    int64_t S = (2 * (int64_t)g->sms + gx - 1) / gx;
    const int64_t most = (rows + (int64_t)rpb * 8 - 1) / ((int64_t)rpb * 8);
    const int64_t room = colsum_room(g) / cols;
    if (S > most)
        S = most;
    if (S > room)
        S = room;
    S = clamp_blocks(S, 65535);
    const dc_launch a = {true, dim3(gx, (unsigned)S), dim3(DC3_THREADS), cpb, rpb, da, rows,
                         cols, y, ldy, mask, mask_ld, g->colsum};
    RAP_TRY(dc_run(g, mode, &a));
    colsum_final3_kernel<<<(cols + 31) / 32, dim3(32, 8), 0, g->stream>>>(a.part, (int)S, cols,
                                                                          db);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* v2: mode 0 column sums of da; 1 and 2 also the ReLU backward (from y,
 * from the own bitmask) in the same pass. v3 (g->mlp_ver >= 3): the same
 * through drelu_colsum3_kernel. */
static rap_status drelu_colsum_v2(rap_gpu *g, void *da, int64_t rows, int cols, const void *y,
                                  int64_t ldy, const uint32_t *mask, int64_t mask_ld, int mode,
                                  float *db)
{
    const int V = g->bf16 ? 8 : 4;
    const bool vec = cols % V == 0 && al16(da) &&
                     (mode != 1 || (ldy % V == 0 && al16(y))) && (mode != 2 || cols % 32 == 0);
    if (!vec) {
        if (mode != 0)
            RAP_TRY(drelu_v1(g, da, rows, cols, y, ldy, mode == 2 ? mask : NULL, mask_ld));
        return colsum_v1(g, da, rows, cols, db);
    }
    if (g->mlp_ver >= 3)
        return drelu_colsum_v3(g, da, rows, cols, y, ldy, mask, mask_ld, mode, db);
    dim3 blk, grd;
    const int chunks = cols / V;
    vec_shape(chunks, rows, 1, &blk, &grd);
    /* at least 8 rows a thread, at most 256 splits (the partials' room) */
    const int64_t S = clamp_blocks((rows + (int64_t)blk.y * 8 - 1) / ((int64_t)blk.y * 8), 256);
    grd.y = (unsigned)S;
    const dc_launch a = {false, grd, blk, 0, 0, da, rows, cols, y, ldy, mask, mask_ld,
                         g->colsum};
    RAP_TRY(dc_run(g, mode, &a));
    colsum_final_kernel<<<(cols + 255) / 256, 256, 0, g->stream>>>(a.part, (int)S, cols, db);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status rap_gpu_colsum(rap_gpu *g, const void *da, int64_t rows, int cols, float *db)
{
    if (g->mlp_ver >= 2)
        return drelu_colsum_v2(g, (void *)da, rows, cols, NULL, 0, NULL, 0, 0, db);
    return colsum_v1(g, da, rows, cols, db);
}

rap_status rap_gpu_drelu_colsum(rap_gpu *g, const rap_gpu_layer *prev, int64_t rows, int mode)
{
    return drelu_colsum_v2(g, prev->da, rows, prev->out, prev->y, prev->ldy,
                           (const uint32_t *)prev->aux, prev->aux_ld / 32, mode, prev->db);
}

rap_status rap_gpu_gemv_forward(rap_gpu *g, const rap_gpu_layer *l, int64_t rows)
{
    const unsigned blocks = rap_gpu_blocks(rows, MLP_THREADS / 32, g->sms * 16);
    if (g->bf16)
        gemv_fwd_kernel<__nv_bfloat16><<<blocks, MLP_THREADS, 0, g->stream>>>(
            (const __nv_bfloat16 *)l->x, l->ldx, rows, l->in, l->w, l->b, (float *)l->y);
    else
        gemv_fwd_kernel<float><<<blocks, MLP_THREADS, 0, g->stream>>>(
            (const float *)l->x, l->ldx, rows, l->in, l->w, l->b, (float *)l->y);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status rap_gpu_gemv_backward(rap_gpu *g, const rap_gpu_layer *l, const rap_gpu_layer *prev,
                                 int64_t rows, float *prev_db)
{
    const int S = (int)clamp_blocks((rows + 127) / 128, 256);
    const int mask = prev && prev->relu ? 1 : 0;
    void *dx = l->need_dx ? l->dx : NULL;
    if (!dx)
        prev_db = NULL;
    /* the partials of dw, then (prev_db) those of the previous bias */
    float *dpart = prev_db ? g->colsum + (size_t)S * (size_t)l->in : NULL;
    const unsigned fin = (unsigned)((l->in + MLP_THREADS - 1) / MLP_THREADS) + 1;
    /* 8 columns a lane where the widths and pointers allow (v2 and up) */
    const bool v8 = g->mlp_ver >= 2 && l->in <= 256 && l->in % 8 == 0 && l->ldx % 8 == 0 &&
                    (!dx || l->lddx % 8 == 0) && (uintptr_t)l->x % 16 == 0 &&
                    (uintptr_t)dx % 16 == 0;
    if (g->bf16) {
        if (v8)
            gemv_bwd8_kernel<__nv_bfloat16><<<S, MLP_THREADS, 0, g->stream>>>(
                (const __nv_bfloat16 *)l->x, l->ldx, (const __nv_bfloat16 *)l->da, rows, l->in,
                l->w, (__nv_bfloat16 *)dx, l->lddx, mask, g->colsum, dpart);
        else
            gemv_bwd_kernel<__nv_bfloat16><<<S, MLP_THREADS, 0, g->stream>>>(
                (const __nv_bfloat16 *)l->x, l->ldx, (const __nv_bfloat16 *)l->da, rows, l->in,
                l->w, (__nv_bfloat16 *)dx, l->lddx, mask, g->colsum, dpart);
        RAP_CUDA_LAUNCHED();
        gemv_final_kernel<__nv_bfloat16><<<fin, MLP_THREADS, 0, g->stream>>>(
            g->colsum, S, l->in, (const __nv_bfloat16 *)l->da, rows, l->dw, l->db, dpart,
            prev_db);
    } else {
        if (v8)
            gemv_bwd8_kernel<float><<<S, MLP_THREADS, 0, g->stream>>>(
                (const float *)l->x, l->ldx, (const float *)l->da, rows, l->in, l->w,
                (float *)dx, l->lddx, mask, g->colsum, dpart);
        else
            gemv_bwd_kernel<float><<<S, MLP_THREADS, 0, g->stream>>>(
                (const float *)l->x, l->ldx, (const float *)l->da, rows, l->in, l->w,
                (float *)dx, l->lddx, mask, g->colsum, dpart);
        RAP_CUDA_LAUNCHED();
        gemv_final_kernel<float><<<fin, MLP_THREADS, 0, g->stream>>>(
            g->colsum, S, l->in, (const float *)l->da, rows, l->dw, l->db, dpart, prev_db);
    }
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* ------------------------------------------------------------ test hook */

typedef struct {
    void *y, *da, *stage;
    float *b, *db, *part;
    uint32_t *mask;
} mk_bufs;

static rap_status mk_run(rap_gpu *g, rap_gpu_layer *l, mk_bufs *d, int op, int64_t rows,
                         float *y, const float *b, uint32_t *mask, float *da, float *db)
{
    RAP_CUDA_TRY(cudaGetDevice(&g->dev));
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, g->dev));
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    const int cols = l->out;
    const size_t R = (size_t)rows, ny = R * (size_t)l->ldy, nd = R * (size_t)cols;
    const size_t nm = R * (size_t)(l->aux_ld / 32);
    RAP_TRY(rap_cuda_malloc(&d->y, g->es * ny, "kernel test y"));
    RAP_TRY(rap_cuda_malloc(&d->da, g->es * nd, "kernel test da"));
    RAP_TRY(rap_cuda_malloc((void **)&d->b, sizeof(float) * (size_t)cols, "kernel test b"));
    RAP_TRY(rap_cuda_malloc((void **)&d->db, sizeof(float) * (size_t)cols, "kernel test db"));
    RAP_TRY(rap_cuda_malloc((void **)&d->part, sizeof(float) * 512 * (size_t)cols,
                            "kernel test partials"));
    RAP_TRY(rap_cuda_malloc((void **)&d->mask, sizeof(uint32_t) * (nm ? nm : 1), "kernel test mask"));
    d->stage = rap_malloc(g->es * (ny > nd ? ny : nd), "kernel test staging");
    if (!d->stage)
        return RAP_ERR_NOMEM;
    RAP_TRY(rap_gpu_test_put(d->y, y, ny, g->bf16, d->stage));
    RAP_TRY(rap_gpu_test_put(d->da, da, nd, g->bf16, d->stage));
    RAP_CUDA_TRY(cudaMemcpy(d->b, b, sizeof(float) * (size_t)cols, cudaMemcpyHostToDevice));
    RAP_CUDA_TRY(cudaMemcpy(d->mask, mask, sizeof(uint32_t) * nm, cudaMemcpyHostToDevice));
    RAP_CUDA_TRY(cudaMemset(d->db, 0xff, sizeof(float) * (size_t)cols));
    g->colsum = d->part;
    l->y = d->y;
    l->da = d->da;
    l->b = d->b;
    l->db = d->db;
    l->aux = d->mask;
    const bool own = cols % 32 == 0;
    if (op == 0) {
        RAP_TRY(rap_gpu_bias_act(g, l, rows, own ? d->mask : NULL));
    } else if (op == 3) {
        RAP_TRY(rap_gpu_colsum(g, l->da, rows, cols, l->db));
    } else if (g->mlp_ver >= 2) {
        RAP_TRY(rap_gpu_drelu_colsum(g, l, rows, op));
    } else {
        RAP_TRY(rap_gpu_drelu(g, l, rows, op == 2));
        RAP_TRY(rap_gpu_colsum(g, l->da, rows, cols, l->db));
    }
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    RAP_CUDA_TRY(cudaGetLastError());
    RAP_TRY(rap_gpu_test_get(y, d->y, ny, g->bf16, d->stage));
    RAP_TRY(rap_gpu_test_get(da, d->da, nd, g->bf16, d->stage));
    RAP_CUDA_TRY(cudaMemcpy(mask, d->mask, sizeof(uint32_t) * nm, cudaMemcpyDeviceToHost));
    RAP_CUDA_TRY(cudaMemcpy(db, d->db, sizeof(float) * (size_t)cols, cudaMemcpyDeviceToHost));
    return RAP_OK;
}

extern "C" rap_status rap_gpu_mlp_kernel_test(int op, bool bf16, int ver, int64_t rows, int cols,
                                              int64_t ld, float *y, const float *b,
                                              uint32_t *mask, float *da, float *db)
{
    if (op < 0 || op > 3 || ver < 1 || ver > 3 || rows < 1 || cols < 1 || ld < cols ||
        (op == 2 && cols % 32 != 0))
        return rap_fail(RAP_ERR_ARG, "rap_gpu_mlp_kernel_test: op %d, version %d, %lld x %d, "
                                     "ld %lld",
                        op, ver, (long long)rows, cols, (long long)ld);
    rap_gpu *g = (rap_gpu *)rap_calloc(sizeof *g, "kernel test");
    rap_gpu_layer *l = (rap_gpu_layer *)rap_calloc(sizeof *l, "kernel test layer");
    if (!g || !l) {
        rap_free(g);
        rap_free(l);
        return RAP_ERR_NOMEM;
    }
    g->bf16 = bf16;
    g->es = bf16 ? 2 : 4;
    g->mlp_ver = ver;
    g->maxw = cols; /* the partials' room: 256 x 2 x cols, as allocated below */
    g->ld_in = cols;
    l->out = cols;
    l->ldy = ld;
    l->ytype = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    l->relu = true;
    l->aux_ld = (cols + 127) / 128 * 128;
    mk_bufs d;
    memset(&d, 0, sizeof d);
    rap_status s = mk_run(g, l, &d, op, rows, y, b, mask, da, db);
    cudaFree(d.y);
    cudaFree(d.da);
    cudaFree(d.b);
    cudaFree(d.db);
    cudaFree(d.part);
    cudaFree(d.mask);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    rap_free(d.stage);
    rap_free(l);
    rap_free(g);
    return s;
}

#else
typedef int rap_mlp_kernels_cu_empty;

rap_status rap_gpu_mlp_kernel_test(int op, bool bf16, int ver, int64_t rows, int cols, int64_t ld,
                                   float *y, const float *b, uint32_t *mask, float *da, float *db)
{
    (void)op, (void)bf16, (void)ver, (void)rows, (void)cols, (void)ld, (void)y, (void)b,
        (void)mask, (void)da, (void)db;
    return rap_fail(RAP_ERR_NO_GPU, "rap_gpu_mlp_kernel_test: built without CUDA");
}
#endif
