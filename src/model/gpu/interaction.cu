/*
 * interaction.cu -- the dot interaction on the GPU, forward and backward.
 * Four generations of kernels: v4 (tensor cores: a bf16 model with a bf16
 * z, interaction_v4.cu; an fp32 model with TF32 math,
 * interaction_v4_tf32.cu) where it applies, else v3 (v2 with the next
 * rows' Z prefetched into shared memory) wherever v2 applies (D % 4 == 0,
 * D <= 128, F <= 32), else v1; RAP_GPU_INTERACT=v3, =v2 or =v1 runs that
 * generation instead (an A/B in one build). This file holds v1, the choice
 * of generation and the test hook; the v2 and v3 kernels and launchers are
 * in interaction_v2.cu (shared helpers in interaction_internal.h).
 *
 * Why v2: each of the B rows must read its F*D floats of z once and
 * write its D + F(F-1)/2 outputs once (the backward: read z and the
 * output gradient once, write dx and de once); at the paper's shapes that
 * is 1.0 GB forward and 1.9 GB backward in bf16 at B 65536, about 0.23 and
 * 0.45 ms at the H200's 4.3 TB/s. v1 stages each row in shared memory one
 * warp at a time (7 to 16 rows in flight an SM) and reads it back 28x
 * through 4x4 register tiles: it ran at about 3x (forward) and 2.2x
 * (backward) that floor. v2 keeps a row in registers (no shared-memory
 * copy of Z, F 16-byte loads in flight per lane, 12 rows an SM), and its
 * arithmetic (FMAs and, forward, one shuffle per pair) stays under the
 * memory time.
 *
 * v1: one warp per batch row with the row's vectors staged in shared
 * memory. Z (F, D) of a row is z + row*F*D (slot 0 = x, slots 1..T = pooled
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
 *
 * Pipelined kernels (D % 4 == 0; the forward unless RAP_GPU_IA_PIPE=0, the
 * backward only with RAP_GPU_IA_PIPE_BWD=1): the same row
 * math, a persistent grid (as many warps as fit on the SMs), each warp
 * copying its next row (Z; in the backward also the gradient row) into a
 * second shared buffer with cp.async while it computes the current one,
 * so the loads of z stay in flight all the time.
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/interaction_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define IA_MAX_WARPS 4

static __host__ __device__ __forceinline__ int round4(int x) { return (x + 3) / 4 * 4; }

/* Stages Z of one row into s (FP x SD floats), zero padding. Warp-wide. */
static __device__ __forceinline__ void stage_z(float *s, const float *__restrict__ zr, int F,
                                               int D, int FP, int SD, int lane)
{
    const int total = FP * SD;
    if ((D & 3) == 0) {
        /* 8 loads in flight per lane before their stores */
        const int q = SD / 4, dq = D / 4, n = FP * q;
        for (int e0 = lane; e0 < n; e0 += 32 * 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int e = e0 + 32 * u;
                const int i = e / q, k = e - i * q;
                v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (e < n && i < F && k < dq)
                    v[u] = __ldg((const float4 *)(zr + (int64_t)i * D) + k);
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (e0 + 32 * u < n)
                    ((float4 *)s)[e0 + 32 * u] = v[u];
        }
    } else {
        for (int e = lane; e < total; e += 32) {
            const int i = e / SD, k = e - i * SD;
            s[e] = (i < F && k < D) ? __ldg(zr + (int64_t)i * D + k) : 0.0f;
        }
    }
}

/* The forward of one row from its staged Z (s, FP x SD, zero padding):
 * x and the pairs into o. Warp-wide. */
template <typename TO>
static __device__ __forceinline__ void fwd_row(const float *s, TO *__restrict__ o, int F,
                                               int D, int FP, int SD, int lane)
{
    const int nb = FP / 4, ntile = nb * (nb + 1) / 2, DQ = round4(D) / 4, SQ = SD / 4;
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
    for (int64_t row = (int64_t)blockIdx.x * wpb + warp; row < rows;
         row += (int64_t)gridDim.x * wpb) {
        stage_z(s, z + row * F * D, F, D, FP, SD, lane);
        __syncwarp();
        fwd_row<TO>(s, out + row * ldo, F, D, FP, SD, lane);
        __syncwarp();
    }
}

/* ---------------------------------------- pipelined kernels (D % 8 == 0) */

/* Starts copying Z of one row (F x D, D % 4 == 0) into s, rows SD apart. */
static __device__ __forceinline__ void issue_z(float *s, const float *zr, int F, int D, int SD,
                                               int lane)
{
    const int dq = D / 4, n = F * dq;
    for (int e = lane; e < n; e += 32) {
        const int i = e / dq, k = e - i * dq;
        cp_async16(s + i * SD + 4 * k, zr + (int64_t)i * D + 4 * k);
    }
}

/* Forward, a warp per row (grid-stride), the next row's Z copied into the
 * warp's second buffer while this one is computed. */
template <typename TO>
static __global__ void interact_fwd_pipe_kernel(const float *__restrict__ z, int64_t rows,
                                                int F, int D, TO *__restrict__ out,
                                                int64_t ldo)
{
    extern __shared__ float4 ia_smem4[];
    const int FP = round4(F), SD = round4(D) + 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int wpb = blockDim.x / 32;
    /* cur: this row's buffer, nxt: the next row's (swapped, not indexed:
     * a run-time index would put the pointers in local memory) */
    float *cur = (float *)ia_smem4 + (size_t)warp * 2 * FP * SD;
    float *nxt = cur + FP * SD;
    for (int e = lane; e < 2 * FP * SD; e += 32) /* padding stays zero */
        cur[e] = 0.0f;
    __syncwarp();
    const int64_t stride = (int64_t)gridDim.x * wpb;
    int64_t row = (int64_t)blockIdx.x * wpb + warp;
    if (row < rows)
        issue_z(cur, z + row * F * D, F, D, SD, lane);
    cp_commit();
    for (; row < rows; row += stride) {
        const int64_t next = row + stride;
        if (next < rows)
            issue_z(nxt, z + next * F * D, F, D, SD, lane);
        cp_commit();
        cp_wait1();
        __syncwarp();
        fwd_row<TO>(cur, out + row * ldo, F, D, FP, SD, lane);
        __syncwarp();
        float *t = cur;
        cur = nxt;
        nxt = t;
    }
    cp_wait0();
}

/* The backward of one row: s its Z (FP x SD), G (FP x FP) filled from g
 * (the row's gradient, act type: x part then pairs). Warp-wide. */
template <typename TI>
static __device__ __forceinline__ void bwd_row(const float *s, float *G, const TI *g, int F,
                                               int D, int FP, int SD, int lane,
                                               TI *__restrict__ dxr, float *__restrict__ der)
{
    const int DQ = round4(D) / 4, SQ = SD / 4;
    /* G: 8 loads in flight per lane before their stores */
    for (int e0 = lane; e0 < FP * FP; e0 += 32 * 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int e = e0 + 32 * u;
            const int i = e / FP, j = e - i * FP;
            v[u] = 0.0f;
            if (i < F && j < F && i != j) { /* i < F: also e < FP*FP */
                const int hi = i > j ? i : j, lo = i > j ? j : i;
                v[u] = act_f(g[D + hi * (hi - 1) / 2 + lo]);
            }
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (e0 + 32 * u < FP * FP)
                G[e0 + 32 * u] = v[u];
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
                const float4 g1 = two ? ((const float4 *)G)[(j * FP + i0 + 4) / 4]
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
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
                    *(float4 *)(der + (int64_t)(i - 1) * D + 4 * k) = acc[r];
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
                        dxr[d] = to_act<TI>(xv > 0.0f ? v : 0.0f);
                    } else {
                        der[(int64_t)(i - 1) * D + d] = a[q];
                    }
                }
            }
        }
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
    const int T = F - 1;
    for (int64_t row = (int64_t)blockIdx.x * wpb + warp; row < rows;
         row += (int64_t)gridDim.x * wpb) {
        stage_z(s, z + row * F * D, F, D, FP, SD, lane);
        bwd_row<TI>(s, G, dy + row * ldi, F, D, FP, SD, lane, dx + row * D,
                    de + row * T * D);
        __syncwarp();
    }
}

/* Bytes of a row's gradient copy in the pipelined backward: (D + pairs)
 * act elements rounded up to 16 bytes. */
static __host__ __device__ __forceinline__ int dy_bytes(int F, int D, int es)
{
    return ((D + F * (F - 1) / 2) * es + 15) / 16 * 16;
}

/* Backward, pipelined: per warp two Z buffers and two gradient-row
 * buffers (copied ahead, like the forward), then G. */
template <typename TI>
static __global__ void interact_bwd_pipe_kernel(const float *__restrict__ z,
                                                const TI *__restrict__ dy, int64_t ldi,
                                                int64_t rows, int F, int D,
                                                TI *__restrict__ dx, float *__restrict__ de)
{
    extern __shared__ float4 ia_smem4[];
    const int FP = round4(F), SD = round4(D) + 4;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int wpb = blockDim.x / 32;
    const int gq = dy_bytes(F, D, (int)sizeof(TI)) / 16; /* 16-byte pieces of a dy row */
    const size_t per = (size_t)2 * FP * SD + (size_t)FP * FP + (size_t)2 * gq * 4;
    /* this row's buffers (zc, gc) and the next row's (zn, gn), swapped */
    float *zc = (float *)ia_smem4 + (size_t)warp * per;
    float *zn = zc + FP * SD;
    float *G = zn + FP * SD;
    TI *gc = (TI *)(G + FP * FP);
    TI *gn = (TI *)(G + FP * FP + gq * 4);
    for (int e = lane; e < 2 * FP * SD; e += 32)
        zc[e] = 0.0f;
    __syncwarp();
    const int T = F - 1;
    const int64_t stride = (int64_t)gridDim.x * wpb;
    int64_t row = (int64_t)blockIdx.x * wpb + warp;
    if (row < rows) {
        issue_z(zc, z + row * F * D, F, D, SD, lane);
        for (int e = lane; e < gq; e += 32)
            cp_async16((float4 *)gc + e, (const float4 *)(dy + row * ldi) + e);
    }
    cp_commit();
    for (; row < rows; row += stride) {
        const int64_t next = row + stride;
        if (next < rows) {
            issue_z(zn, z + next * F * D, F, D, SD, lane);
            for (int e = lane; e < gq; e += 32)
                cp_async16((float4 *)gn + e, (const float4 *)(dy + next * ldi) + e);
        }
        cp_commit();
        cp_wait1();
        __syncwarp();
        bwd_row<TI>(zc, G, gc, F, D, FP, SD, lane, dx + row * D, de + row * T * D);
        __syncwarp();
        float *tz = zc;
        zc = zn;
        zn = tz;
        TI *tg = gc;
        gc = gn;
        gn = tg;
    }
    cp_wait0();
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

static size_t fwd_pipe_bytes_per_warp(int F, int D)
{
    return 2 * fwd_bytes_per_warp(F, D);
}
static size_t bwd_pipe_bytes_per_warp(int F, int D, int es)
{
    return 2 * fwd_bytes_per_warp(F, D) + sizeof(float) * (size_t)round4(F) * round4(F) +
           2 * (size_t)dy_bytes(F, D, es);
}

/* Warps per block (1..IA_MAX_WARPS) that put the most warps on an SM with
 * per bytes of shared memory each; *bps the blocks per SM. */
static int pipe_warps(const rap_gpu *g, size_t per, size_t sm_bytes, size_t reserved, int *bps)
{
    int best = 0, bw = 1;
    *bps = 1;
    for (int w = 1; w <= IA_MAX_WARPS; w++) {
        if (per * (size_t)w > g->smem_optin)
            break;
        int nb = (int)(sm_bytes / (per * (size_t)w + reserved));
        if (nb > 32 / w)
            nb = 32 / w;
        if (nb * w >= best && nb > 0) {
            best = nb * w;
            bw = w;
            *bps = nb;
        }
    }
    return bw;
}

/* RAP_GPU_IA_PIPE=0 in the environment: the plain (unpipelined) forward;
 * RAP_GPU_IA_PIPE_BWD=1: the pipelined backward (off by default: on the
 * H200 it ran slower than the plain one, 1.18 vs 0.98 ms at B 65536, D 128,
 * F 28: the backward is bound by its FMAs and shared-memory reads, and the
 * second buffer halves the warps per SM). */
static bool env_flag(const char *name, bool dflt)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    return *e != '0';
}

/* Where v2 and v3 apply (D % 4 == 0, D <= 128, F <= 32). */
static bool v2_applies(const rap_gpu *g)
{
    return g->D % 4 == 0 && g->D <= 128 && g->F <= 32;
}

/* The version RAP_GPU_INTERACT asks for (v1, v2, v3 or v4; anything
 * else, or unset: 3 here, raised to 4 at setup where it applies), lowered
 * to 2 or 1 where the shapes need it. */
static int wanted_ver(const rap_gpu *g)
{
    const char *e = getenv("RAP_GPU_INTERACT");
    int ver = 3;
    if (e && strcmp(e, "v1") == 0)
        ver = 1;
    else if (e && strcmp(e, "v2") == 0)
        ver = 2;
    else if (e && strcmp(e, "v4") == 0)
        ver = 4;
    return v2_applies(g) ? ver : 1;
}

/* Whether RAP_GPU_INTERACT names a version (the default picks v4 where it
 * applies, v3 elsewhere). */
static bool ver_named(void)
{
    const char *e = getenv("RAP_GPU_INTERACT");
    return e && (strcmp(e, "v1") == 0 || strcmp(e, "v2") == 0 || strcmp(e, "v3") == 0 ||
                 strcmp(e, "v4") == 0);
}

/* The v1 launch shapes (shared-memory staging; pipelined forward). */
static rap_status v1_setup(rap_gpu *g)
{
    const size_t fw = fwd_bytes_per_warp(g->F, g->D), bw = bwd_bytes_per_warp(g->F, g->D);
    if (bw > g->smem_optin)
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: the interaction of F=%d vectors of D=%d needs %zu bytes of "
                        "shared memory per row, the GPU allows %zu per block",
                        g->F, g->D, bw, g->smem_optin);
    const int es = (int)g->es;
    const size_t pf = fwd_pipe_bytes_per_warp(g->F, g->D),
                 pb = bwd_pipe_bytes_per_warp(g->F, g->D, es);
    g->ia_pipe = env_flag("RAP_GPU_IA_PIPE", true) && g->D % 4 == 0 && pf <= g->smem_optin;
    g->ia_pipe_bwd =
        env_flag("RAP_GPU_IA_PIPE_BWD", false) && g->D % 4 == 0 && pb <= g->smem_optin;
    int sm_bytes = 0, reserved = 0;
    RAP_CUDA_TRY(
        cudaDeviceGetAttribute(&sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, g->dev));
    RAP_CUDA_TRY(
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, g->dev));
    int nb = 1;
    if (g->ia_pipe) {
        g->ifwd_warps = pipe_warps(g, pf, (size_t)sm_bytes, (size_t)reserved, &nb);
        g->ifwd_smem = pf;
        g->ifwd_grid = (unsigned)(g->sms * nb);
    } else {
        g->ifwd_warps = warps_for(fw, g->smem_optin);
        g->ifwd_smem = fw;
        g->ifwd_grid = (unsigned)(g->sms * 64);
    }
    if (g->ia_pipe_bwd) {
        g->ibwd_warps = pipe_warps(g, pb, (size_t)sm_bytes, (size_t)reserved, &nb);
        g->ibwd_smem = pb;
        g->ibwd_grid = (unsigned)(g->sms * nb);
    } else {
        g->ibwd_warps = warps_for(bw, g->smem_optin);
        g->ibwd_smem = bw;
        g->ibwd_grid = (unsigned)(g->sms * 64);
    }
    const int fs = (int)(g->ifwd_smem * g->ifwd_warps), bs = (int)(g->ibwd_smem * g->ibwd_warps);
#define IA_SMEM(kernel, bytes)                                                           \
    RAP_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))
    if (g->ia_pipe && g->bf16)
        IA_SMEM(interact_fwd_pipe_kernel<__nv_bfloat16>, fs);
    else if (g->ia_pipe)
        IA_SMEM(interact_fwd_pipe_kernel<float>, fs);
    else if (g->bf16)
        IA_SMEM(interact_fwd_kernel<__nv_bfloat16>, fs);
    else
        IA_SMEM(interact_fwd_kernel<float>, fs);
    if (g->ia_pipe_bwd && g->bf16)
        IA_SMEM(interact_bwd_pipe_kernel<__nv_bfloat16>, bs);
    else if (g->ia_pipe_bwd)
        IA_SMEM(interact_bwd_pipe_kernel<float>, bs);
    else if (g->bf16)
        IA_SMEM(interact_bwd_kernel<__nv_bfloat16>, bs);
    else
        IA_SMEM(interact_bwd_kernel<float>, bs);
#undef IA_SMEM
    return RAP_OK;
}

static rap_status v1_forward(rap_gpu *g, int64_t rows)
{
    const int w = g->ifwd_warps;
    const unsigned blocks = rap_gpu_blocks(rows, w, (int)g->ifwd_grid);
    const size_t smem = g->ifwd_smem * (size_t)w;
    if (g->ia_pipe && g->bf16)
        interact_fwd_pipe_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, rows, g->F, g->D, (__nv_bfloat16 *)g->tin, g->ld_in);
    else if (g->ia_pipe)
        interact_fwd_pipe_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, rows, g->F, g->D, (float *)g->tin, g->ld_in);
    else if (g->bf16)
        interact_fwd_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, rows, g->F, g->D, (__nv_bfloat16 *)g->tin, g->ld_in);
    else
        interact_fwd_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, rows, g->F, g->D, (float *)g->tin, g->ld_in);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

static rap_status v1_backward(rap_gpu *g, int64_t rows)
{
    const int w = g->ibwd_warps;
    const unsigned blocks = rap_gpu_blocks(rows, w, (int)g->ibwd_grid);
    const size_t smem = g->ibwd_smem * (size_t)w;
    void *dxb = g->bot[g->n_bot - 1].da; /* (B, D): gradient of the last bottom pre-activation */
    if (g->ia_pipe_bwd && g->bf16)
        interact_bwd_pipe_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, (const __nv_bfloat16 *)g->dtin, g->ld_in, rows, g->F, g->D,
            (__nv_bfloat16 *)dxb, (float *)g->de);
    else if (g->ia_pipe_bwd)
        interact_bwd_pipe_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, (const float *)g->dtin, g->ld_in, rows, g->F, g->D,
            (float *)dxb, (float *)g->de);
    else if (g->bf16)
        interact_bwd_kernel<__nv_bfloat16><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, (const __nv_bfloat16 *)g->dtin, g->ld_in, rows, g->F, g->D,
            (__nv_bfloat16 *)dxb, (float *)g->de);
    else
        interact_bwd_kernel<float><<<blocks, 32 * w, smem, g->stream>>>(
            (const float *)g->z, (const float *)g->dtin, g->ld_in, rows, g->F, g->D,
            (float *)dxb, (float *)g->de);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}


bool rap_gpu_interact_takes_bf16_z(const rap_gpu *g) { return wanted_ver(g) >= 2; }

/* Kernels of version ver (1 to 4; 2 to 4 only where they apply; 4 falls
 * back to 3 and 3 to 2 where their shared memory would not fit a block).
 * v1 reads fp32 z only. */
static rap_status setup_ver(rap_gpu *g, int ver)
{
    g->ia_ver = ver;
    if (ver == 4) {
        bool fits = false;
        RAP_TRY(ia4_call(g, 0, 0, &fits));
        if (fits)
            return RAP_OK;
        g->ia_ver = ver = 3;
    }
    if (ver == 1 && g->zbf)
        return rap_fail(RAP_ERR_INTERNAL, "GPU model: the v1 interaction reads fp32 z only");
    if (ver == 1)
        return v1_setup(g);
    if (!v2_applies(g))
        return rap_fail(RAP_ERR_ARG, "GPU model: the v%d interaction needs D %% 4 == 0, D <= 128 "
                                     "and F <= 32 (F=%d, D=%d)",
                        ver, g->F, g->D);
    g->ia_lanes = g->D <= 64 ? 16 : 32;
    if (ver == 3) {
        g->ia_fmax = g->F <= 8 ? 8 : g->F <= 16 ? 16 : g->F <= 28 ? 28 : 32;
        bool fits = false;
        RAP_TRY(ia3_call(g, 0, 0, &fits));
        if (fits)
            return RAP_OK;
        g->ia_ver = 2;
    }
    g->ia_fmax = g->F <= 8 ? 8 : g->F <= 16 ? 16 : 32;
    return ia2_call(g, 0, 0);
}

rap_status rap_gpu_interact_setup(rap_gpu *g)
{
    int ver = wanted_ver(g);
    if (ver == 3 && !ver_named() && ia4_applies(g))
        ver = 4;
    if (ver == 4 && !ia4_applies(g))
        ver = 3;
    return setup_ver(g, ver);
}

rap_status rap_gpu_interact_forward(rap_gpu *g, int64_t rows)
{
    if (g->ia_ver == 4)
        return ia4_call(g, 1, rows, NULL);
    if (g->ia_ver == 3)
        return ia3_call(g, 1, rows, NULL);
    return g->ia_ver == 2 ? ia2_call(g, 1, rows) : v1_forward(g, rows);
}

rap_status rap_gpu_interact_backward(rap_gpu *g, int64_t rows)
{
    if (g->ia_ver == 4)
        return ia4_call(g, 2, rows, NULL);
    if (g->ia_ver == 3)
        return ia3_call(g, 2, rows, NULL);
    return g->ia_ver == 2 ? ia2_call(g, 2, rows) : v1_backward(g, rows);
}

/* ------------------------------------------------------------ test hook */

static rap_status ia_test_run(rap_gpu *g, int64_t rows, int ver, const float *z, const float *dy,
                              float *out, float *dx, float *de, void **stage)
{
    RAP_CUDA_TRY(cudaGetDevice(&g->dev));
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, g->dev));
    int optin = 0;
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g->dev));
    g->smem_optin = (size_t)optin;
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    g->own_stream = true;
    const size_t R = (size_t)rows, nz = R * (size_t)g->F * (size_t)g->D;
    const size_t nt = R * (size_t)g->ld_in, nx = R * (size_t)g->D;
    const size_t ne = R * (size_t)g->T * (size_t)g->D;
    RAP_TRY(rap_cuda_malloc(&g->z, g->zes * nz, "interaction test z"));
    RAP_TRY(rap_cuda_malloc(&g->tin, g->es * nt, "interaction test out"));
    RAP_TRY(rap_cuda_malloc(&g->dtin, g->es * nt, "interaction test dy"));
    RAP_TRY(rap_cuda_malloc(&g->bot[0].da, g->es * nx, "interaction test dx"));
    RAP_TRY(rap_cuda_malloc(&g->de, g->des * ne, "interaction test de"));
    size_t most = nt > nx ? nt : nx;
    most = nz > most ? nz : most;
    most = ne > most ? ne : most;
    *stage = rap_malloc(2 * most, "interaction test staging");
    if (!*stage)
        return RAP_ERR_NOMEM;
    RAP_TRY(rap_gpu_test_put(g->z, z, nz, g->zbf, *stage));
    RAP_TRY(rap_gpu_test_put(g->dtin, dy, nt, g->bf16, *stage));
    /* poison: every element the kernels must write reads back as NaN if not */
    RAP_CUDA_TRY(cudaMemset(g->tin, 0xff, g->es * nt));
    RAP_CUDA_TRY(cudaMemset(g->bot[0].da, 0xff, g->es * nx));
    RAP_CUDA_TRY(cudaMemset(g->de, 0xff, g->des * ne));
    RAP_TRY(setup_ver(g, ver));
    RAP_TRY(rap_gpu_interact_forward(g, rows));
    RAP_TRY(rap_gpu_interact_backward(g, rows));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    RAP_CUDA_TRY(cudaGetLastError());
    RAP_TRY(rap_gpu_test_get(out, g->tin, nt, g->bf16, *stage));
    RAP_TRY(rap_gpu_test_get(dx, g->bot[0].da, nx, g->bf16, *stage));
    RAP_TRY(rap_gpu_test_get(de, g->de, ne, g->debf, *stage));
    return RAP_OK;
}

extern "C" rap_status rap_gpu_interact_test(int F, int D, int64_t rows, bool bf16, int zmode,
                                            int ver, const float *z, const float *dy,
                                            float *out, float *dx, float *de)
{
    if (F < 2 || F > RAP_MAX_TABLES + 1 || D < 1 || rows < 1 || ver < 1 || ver > 4 ||
        zmode < 0 || zmode > 2 || (zmode && (!bf16 || ver < 2)) || (ver == 4 && bf16 && !zmode))
        return rap_fail(RAP_ERR_ARG,
                        "rap_gpu_interact_test: F %d, D %d, rows %lld, version %d, bf16 %d, "
                        "z mode %d",
                        F, D, (long long)rows, ver, bf16, zmode);
    rap_gpu *g = (rap_gpu *)rap_calloc(sizeof *g, "interaction test");
    if (!g)
        return RAP_ERR_NOMEM;
    g->F = F;
    g->T = F - 1;
    g->D = D;
    g->bf16 = bf16;
    g->tf32 = !bf16; /* an fp32 case is a TF32 model's (v4 applies; v1-v3 do not round) */
    g->es = bf16 ? 2 : 4;
    g->zbf = zmode >= 1;
    g->debf = zmode == 2;
    g->zes = g->zbf ? 2 : 4;
    g->des = g->debf ? 2 : 4;
    g->top_in = D + F * (F - 1) / 2;
    g->ld_in = (g->top_in + 7) / 8 * 8;
    g->n_bot = 1;
    void *stage = NULL;
    rap_status s = ia_test_run(g, rows, ver, z, dy, out, dx, de, &stage);
    /* clean-up keeps the first failure's message */
    cudaFree(g->z);
    cudaFree(g->tin);
    cudaFree(g->dtin);
    cudaFree(g->bot[0].da);
    cudaFree(g->de);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    rap_free(stage);
    rap_free(g);
    return s;
}

#else
typedef int rap_interaction_cu_empty;

rap_status rap_gpu_interact_test(int F, int D, int64_t rows, bool bf16, int zmode, int ver,
                                 const float *z, const float *dy, float *out, float *dx,
                                 float *de)
{
    (void)F, (void)D, (void)rows, (void)bf16, (void)zmode, (void)ver, (void)z, (void)dy,
        (void)out, (void)dx, (void)de;
    return rap_fail(RAP_ERR_NO_GPU, "rap_gpu_interact_test: built without CUDA");
}
#endif

