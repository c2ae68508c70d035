/*
 * interaction.cu -- the dot interaction on the GPU, forward and backward,
 * one warp per batch row with the row's vectors staged in shared memory.
 *
 * Z (F, D) of a row is z + row*F*D (slot 0 = x, slots 1..T = pooled
 * embeddings). In shared memory rows are padded to FP = F rounded up to 4
 * and SD = D rounded up to 4, plus 4 (16-byte skew: conflict-free float4
 * reads of 8 different rows); padding is zero.
 *
 * Forward: out[row] = [x, Z_i . Z_j for i > j] (row-major lower triangle:
 * pair (i, j) at D + i(i-1)/2 + j), written as act type with leading dim
 * ld_in. A lane computes a 4x4 tile (block pair bi >= bj) of Z Z^T with
 * float4 reads along D.
 * Backward: G (F, F) symmetric from the pair gradients (zero diagonal);
 * dZ = G Z; lane owns 4 columns, 8 rows of dZ at a time. dZ_0 plus the
 * gradient of the x part, times (x > 0) (the bottom MLP's last ReLU), goes
 * to the bottom MLP as act type; dZ_{1..T} to de (B, T, D) fp32.
 */
#include "model/gpu/gpu_model.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define IA_MAX_WARPS 4

template <typename T> static __device__ __forceinline__ T to_act(float x);
template <> __device__ __forceinline__ float to_act<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 to_act<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
static __device__ __forceinline__ float act_f(float x) { return x; }
static __device__ __forceinline__ float act_f(__nv_bfloat16 x) { return __bfloat162float(x); }

static __host__ __device__ __forceinline__ int round4(int x) { return (x + 3) / 4 * 4; }

/* Stages Z of one row into s (FP x SD floats), zero padding. Warp-wide. */
static __device__ __forceinline__ void stage_z(float *s, const float *__restrict__ zr, int F,
                                               int D, int FP, int SD, int lane)
{
    const int total = FP * SD;
    if ((D & 3) == 0) {
        const int q = SD / 4, dq = D / 4;
        for (int e = lane; e < FP * q; e += 32) {
            const int i = e / q, k = e - i * q;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i < F && k < dq)
                v = __ldg((const float4 *)(zr + (int64_t)i * D) + k);
            ((float4 *)s)[e] = v;
        }
    } else {
        for (int e = lane; e < total; e += 32) {
            const int i = e / SD, k = e - i * SD;
            s[e] = (i < F && k < D) ? __ldg(zr + (int64_t)i * D + k) : 0.0f;
        }
    }
}

template <typename TO>
static __global__ void interact_fwd_kernel(const float *__restrict__ z, int64_t rows, int F,
                                           int D, TO *__restrict__ out, int64_t ldo)
{
    extern __shared__ float4 ia_smem4[];
    const int FP = round4(F), SD = round4(D) + 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int wpb = blockDim.x / 32;
    float *s = (float *)ia_smem4 + (size_t)warp * FP * SD;
    const int nb = FP / 4, ntile = nb * (nb + 1) / 2, DQ = round4(D) / 4, SQ = SD / 4;
    for (int64_t row = (int64_t)blockIdx.x * wpb + warp; row < rows;
         row += (int64_t)gridDim.x * wpb) {
        const float *zr = z + row * F * D;
        stage_z(s, zr, F, D, FP, SD, lane);
        __syncwarp();
        TO *o = out + row * ldo;
        for (int d = lane; d < D; d += 32)
            o[d] = to_act<TO>(s[d]);
        for (int tile = lane; tile < ntile; tile += 32) {
            int bi = (int)((sqrtf(8.0f * tile + 1.0f) - 1.0f) * 0.5f);
            while (bi * (bi + 1) / 2 > tile)
                bi--;
            while ((bi + 1) * (bi + 2) / 2 <= tile)
                bi++;
            const int bj = tile - bi * (bi + 1) / 2;
            float acc[4][4];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    acc[r][c] = 0.0f;
            const float4 *A = (const float4 *)s + (size_t)(4 * bi) * SQ;
            const float4 *Bm = (const float4 *)s + (size_t)(4 * bj) * SQ;
            for (int k = 0; k < DQ; k++) {
                float4 a[4], b[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    a[r] = A[r * SQ + k];
                    b[r] = Bm[r * SQ + k];
                }
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        acc[r][c] += a[r].x * b[c].x + a[r].y * b[c].y + a[r].z * b[c].z +
                                     a[r].w * b[c].w;
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int i = 4 * bi + r, j = 4 * bj + c;
                    if (i < F && j < i)
                        o[D + i * (i - 1) / 2 + j] = to_act<TO>(acc[r][c]);
                }
        }
        __syncwarp();
    }
}

/* Backward. s: Z (FP x SD) then G (FP x FP). dy: (rows, ldi) act. */
template <typename TI>
static __global__ void interact_bwd_kernel(const float *__restrict__ z,
                                           const TI *__restrict__ dy, int64_t ldi,
                                           int64_t rows, int F, int D, TI *__restrict__ dx,
                                           float *__restrict__ de)
{
    extern __shared__ float4 ia_smem4[];
    const int FP = round4(F), SD = round4(D) + 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int wpb = blockDim.x / 32;
    float *s = (float *)ia_smem4 + (size_t)warp * (FP * SD + FP * FP);
    float *G = s + FP * SD;
    const int DQ = round4(D) / 4, SQ = SD / 4, T = F - 1;
    for (int64_t row = (int64_t)blockIdx.x * wpb + warp; row < rows;
         row += (int64_t)gridDim.x * wpb) {
        stage_z(s, z + row * F * D, F, D, FP, SD, lane);
        const TI *g = dy + row * ldi;
        for (int e = lane; e < FP * FP; e += 32) {
            const int i = e / FP, j = e - i * FP;
            float v = 0.0f;
            if (i < F && j < F && i != j) {
                const int hi = i > j ? i : j, lo = i > j ? j : i;
                v = act_f(g[D + hi * (hi - 1) / 2 + lo]);
            }
            G[e] = v;
        }
        __syncwarp();
        for (int k = lane; k < DQ; k += 32) {
            for (int i0 = 0; i0 < FP; i0 += 8) {
                float4 acc[8];
#pragma unroll
                for (int r = 0; r < 8; r++)
                    acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
                const bool two = i0 + 4 < FP;
                for (int j = 0; j < F; j++) {
                    const float4 zv = ((const float4 *)s)[(size_t)j * SQ + k];
                    /* G symmetric: G[j][i0..i0+7] = G[i0..i0+7][j] */
                    const float4 g0 = ((const float4 *)G)[(j * FP + i0) / 4];
                    const float4 g1 =
                        two ? ((const float4 *)G)[(j * FP + i0 + 4) / 4] : make_float4(0.f, 0.f, 0.f, 0.f);
                    const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                    for (int r = 0; r < 8; r++) {
                        acc[r].x += gv[r] * zv.x;
                        acc[r].y += gv[r] * zv.y;
                        acc[r].z += gv[r] * zv.z;
                        acc[r].w += gv[r] * zv.w;
                    }
                }
#pragma unroll
                for (int r = 0; r < 8; r++) {
                    const int i = i0 + r;
                    if (i >= F)
                        break;
                    if (i > 0 && (D & 3) == 0) { /* 4k < D: one 16-byte store */
                        *(float4 *)(de + (row * T + (i - 1)) * D + 4 * k) = acc[r];
                        continue;
                    }
                    const float a[4] = {acc[r].x, acc[r].y, acc[r].z, acc[r].w};
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const int d = 4 * k + q;
                        if (d >= D)
                            break;
                        if (i == 0) {
                            const float xv = s[d];
                            const float v = a[q] + act_f(g[d]);
                            dx[row * D + d] = to_act<TI>(xv > 0.0f ? v : 0.0f);
                        } else {
                            de[(row * T + (i - 1)) * D + d] = a[q];
                        }
                    }
                }
            }
        }
        __syncwarp();
    }
}

static size_t fwd_bytes_per_warp(int F, int D)
{
    return sizeof(float) * (size_t)round4(F) * (size_t)(round4(D) + 4);
}
static size_t bwd_bytes_per_warp(int F, int D)
{
    return fwd_bytes_per_warp(F, D) + sizeof(float) * (size_t)round4(F) * (size_t)round4(F);
}

static int warps_for(size_t per_warp, size_t limit)
{
    int w = IA_MAX_WARPS;
    while (w > 1 && per_warp * (size_t)w > limit)
        w--;
    return w;
}

rap_status rap_gpu_interact_setup(rap_gpu *g)
{
    const size_t fw = fwd_bytes_per_warp(g->F, g->D), bw = bwd_bytes_per_warp(g->F, g->D);
    if (bw > g->smem_optin)
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: the interaction of F=%d vectors of D=%d needs %zu bytes of "
                        "shared memory per row, the GPU allows %zu per block",
                        g->F, g->D, bw, g->smem_optin);
    g->ifwd_warps = warps_for(fw, g->smem_optin);
    g->ibwd_warps = warps_for(bw, g->smem_optin);
    g->ifwd_smem = fw;
    g->ibwd_smem = bw;
    const int fs = (int)(fw * g->ifwd_warps), bs = (int)(bw * g->ibwd_warps);
    if (g->bf16) {
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_fwd_kernel<__nv_bfloat16>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, fs));
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd_kernel<__nv_bfloat16>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, bs));
    } else {
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_fwd_kernel<float>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, fs));
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd_kernel<float>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, bs));
    }
    return RAP_OK;
}

rap_status rap_gpu_interact_forward(rap_gpu *g, int64_t rows)
{
    const int w = g->ifwd_warps;
    const unsigned blocks = rap_gpu_blocks(rows, w, g->sms * 64);
    const size_t smem = g->ifwd_smem * (size_t)w;
    if (g->bf16)
        interact_fwd_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            g->z, rows, g->F, g->D, (__nv_bfloat16 *)g->tin, g->ld_in);
    else
        interact_fwd_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            g->z, rows, g->F, g->D, (float *)g->tin, g->ld_in);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status rap_gpu_interact_backward(rap_gpu *g, int64_t rows)
{
    const int w = g->ibwd_warps;
    const unsigned blocks = rap_gpu_blocks(rows, w, g->sms * 64);
    const size_t smem = g->ibwd_smem * (size_t)w;
    void *dxb = g->bot[g->n_bot - 1].da; /* (B, D): gradient of the last bottom pre-activation */
    if (g->bf16)
        interact_bwd_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            g->z, (const __nv_bfloat16 *)g->dtin, g->ld_in, rows, g->F, g->D,
            (__nv_bfloat16 *)dxb, g->de);
    else
        interact_bwd_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            g->z, (const float *)g->dtin, g->ld_in, rows, g->F, g->D, (float *)dxb, g->de);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

#else
typedef int rap_interaction_cu_empty;
#endif
