/*
 * interaction_v4_tf32.cu -- the v4 generation of the dot interaction for an
 * fp32 model with TF32 math (not strict fp32): the same two products as
 * interaction_v4.cu's, on TF32 tensor cores (mma.sync m16n8k8, fp32 in
 * rounded to TF32, fp32 sums). interaction.cu picks the generation;
 * ia4_call (interaction_v4.cu) sends an fp32 model here.
 *
 * Why: in fp32 the step at batch 65536 spent about 1.2 ms in v3's two
 * interaction kernels (forward 500 µs, backward 680 µs against memory
 * floors of about 270 and 500 µs; bench/RESULTS.md, 2026-12-02): bound by
 * instructions, as v3 was in bf16 before v4. A TF32 model already rounds
 * every GEMM's operands to TF32; the interaction's two small products a
 * row are GEMMs of the same kind and get the same rounding.
 *
 *   forward   S = Z Z^T  (F x F, F padded to 32; K = D): the pairs are S's
 *             lower triangle; 6 tiles of 16 x 8 cover it, D / 8 steps of K.
 *   backward  dZ = G Z  (G: F x F symmetric, G_ij = the gradient of pair
 *             (i, j), zero diagonal; K = F padded to 32; N = D).
 *
 * Both read Z straight from global memory with 16-byte loads, which the
 * order of the sums allows: a product sums over K in any order, so the
 * forward's lane (g = lane / 4, q = lane % 4) takes columns 16m + 4q ..
 * 4q + 3 of its four rows (g, g + 8, g + 16, g + 24) as the K slots q and
 * q + 4 of two steps; and the backward's output columns are permuted
 * within a block of 32: n-tile s of block nb holds column nb*32 + 4n + s,
 * so a lane's one 16-byte load of row j gives its B values for all four
 * tiles, and its accumulators of the four tiles are 8 consecutive columns
 * of a dZ row (two 16-byte stores). No Z copy in shared memory: the
 * forward keeps only its output row there (written out with 16-byte
 * stores), the backward the row's pair gradients and the block's table of
 * which pair each lane's G fragment holds.
 *
 * Where it applies: an fp32 model with TF32 math, D % 32 == 0, D <= 128,
 * 2 <= F <= 32. The sums differ from v3's by the TF32 rounding of the
 * operands (about 2^-11 of each product): the test compares against a
 * double reference within that.
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/interaction_internal.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define IA4T_WARPS 4 /* warps per block */
#define IA4T_FP 32   /* vectors a row is padded to */

/* x rounded to TF32 (nearest, ties away), as the tensor cores read it. */
static __device__ __forceinline__ uint32_t tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

/* c += A (16 x 8, row) B (8 x 8, col), TF32 in, fp32 sums. */
static __device__ __forceinline__ void mma1688(float (&c)[4], uint32_t a0, uint32_t a1,
                                               uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Columns c.. c+3 of vector v of row zr (F x D fp32): zero past F. */
static __device__ __forceinline__ float4 zload(const float *__restrict__ zr, int v, int F, int D,
                                               int c)
{
    return v < F ? __ldg((const float4 *)(zr + (size_t)v * D + c)) : make_float4(0, 0, 0, 0);
}

/* Forward: out (rows, ldo) fp32 = [x, pairs, 0 padding to ldo]. Dynamic
 * shared memory: a warp's output row (ldo floats). */
static __global__ void __launch_bounds__(32 * IA4T_WARPS)
    interact_fwd4t_kernel(const float *__restrict__ z, int64_t rows, int F, int D,
                          float *__restrict__ out, int64_t ldo, int top_in)
{
    extern __shared__ float4 ia_smem4t[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, q = lane & 3;
    float *stage = (float *)ia_smem4t + (size_t)warp * ldo;
    const int64_t stride = (int64_t)gridDim.x * IA4T_WARPS;
    for (int64_t r = (int64_t)blockIdx.x * IA4T_WARPS + warp; r < rows; r += stride) {
        const float *zr = z + r * F * D;
        float acc[6][4];
#pragma unroll
        for (int t = 0; t < 6; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
#pragma unroll 2
        for (int c0 = 0; c0 < D; c0 += 16) {
            const int c = c0 + 4 * q;
            const float4 r0 = zload(zr, g, F, D, c), r1 = zload(zr, g + 8, F, D, c),
                         r2 = zload(zr, g + 16, F, D, c), r3 = zload(zr, g + 24, F, D, c);
            if (g == 0) /* the x part: Z's row 0, as it is */
                *(float4 *)(stage + c) = r0;
            /* two K steps: slots (q, q + 4) are columns (c, c + 1), then (c + 2, c + 3) */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t v0a = tf32(h ? r0.z : r0.x), v0b = tf32(h ? r0.w : r0.y);
                const uint32_t v1a = tf32(h ? r1.z : r1.x), v1b = tf32(h ? r1.w : r1.y);
                const uint32_t v2a = tf32(h ? r2.z : r2.x), v2b = tf32(h ? r2.w : r2.y);
                const uint32_t v3a = tf32(h ? r3.z : r3.x), v3b = tf32(h ? r3.w : r3.y);
                /* A rows 0-15: (v0, v1); rows 16-31: (v2, v3). B = Z^T: n-tile j
                 * (vectors 8j..8j+7) is vector 8j + g: (vja, vjb) */
                mma1688(acc[0], v0a, v1a, v0b, v1b, v0a, v0b); /* rows 0-15, vectors 0-7 */
                mma1688(acc[1], v0a, v1a, v0b, v1b, v1a, v1b); /* rows 0-15, vectors 8-15 */
                mma1688(acc[2], v2a, v3a, v2b, v3b, v0a, v0b); /* rows 16-31, vectors 0-7 */
                mma1688(acc[3], v2a, v3a, v2b, v3b, v1a, v1b);
                mma1688(acc[4], v2a, v3a, v2b, v3b, v2a, v2b);
                mma1688(acc[5], v2a, v3a, v2b, v3b, v3a, v3b);
            }
        }
        ia4_stage_pairs(stage, acc, F, D, g, q); /* the pairs into the output row */
        for (int c = top_in + lane; c < ldo; c += 32)
            stage[c] = 0.0f;
        __syncwarp();
        float4 *o = (float4 *)(out + r * ldo);
        for (int e = lane; e < (int)(ldo / 4); e += 32)
            o[e] = ((const float4 *)stage)[e];
        __syncwarp(); /* stage read: the next row may overwrite it */
    }
}

/* Backward: dy (rows, ldi) fp32, dx (rows, D) fp32, de (rows, T, D) fp32.
 * Dynamic shared memory: the block's fragment table (32 entries x 32
 * lanes: which pair each of a lane's G values is, np for a zero), then a
 * warp's pair gradients (np + 1 floats, the last zero; rounded up to 4)
 * for each warp. */
static __global__ void __launch_bounds__(32 * IA4T_WARPS, 4) /* 128 registers: no spill */
    interact_bwd4t_kernel(const float *__restrict__ z, const float *__restrict__ dy, int64_t ldi,
                          int64_t rows, int F, int D, float *__restrict__ dx,
                          float *__restrict__ de)
{
    extern __shared__ float4 ia_smem4t[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, q = lane & 3;
    const int np = F * (F - 1) / 2, T = F - 1, gs = (np + 1 + 3) & ~3;
    unsigned short *tab = (unsigned short *)ia_smem4t; /* (32 entries, 32 lanes) */
    float *sg = (float *)(tab + 32 * 32) + (size_t)warp * gs;
    /* lane l's entry e = (mi * 4 + ks) * 4 + k, at tab[e * 32 + l] (a
     * lane's reads of one entry hit distinct banks): G's A fragment
     * register k of m-tile mi, K step ks: row 16mi + (l/4) + 8 (k & 1),
     * column 8ks + (l%4) + 4 (k >> 1) */
    for (int x = threadIdx.x; x < 32 * 32; x += blockDim.x) {
        const int e = x / 32, l = x % 32, mi = e / 16, ks = (e / 4) % 4, k = e % 4;
        const int i = 16 * mi + l / 4 + 8 * (k & 1), j = 8 * ks + l % 4 + 4 * (k >> 1);
        const int hi = i > j ? i : j, lo = i > j ? j : i;
        tab[x] = (unsigned short)(i == j || hi >= F ? np : hi * (hi - 1) / 2 + lo);
    }
    if (lane == 0)
        sg[np] = 0.0f;
    __syncthreads();
    const int64_t stride = (int64_t)gridDim.x * IA4T_WARPS;
    for (int64_t r = (int64_t)blockIdx.x * IA4T_WARPS + warp; r < rows; r += stride) {
        const float *zr = z + r * F * D, *gr = dy + r * ldi;
        /* the row's pair gradients: every load issued before the first use */
        float pv[16]; /* np <= 496 = 16 x 31 */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int p = lane + 32 * k;
            pv[k] = p < np ? __ldg(gr + D + p) : 0.0f;
        }
        __syncwarp(); /* the previous row's sg is read */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int p = lane + 32 * k;
            if (p < np)
                sg[p] = pv[k];
        }
        __syncwarp();
        uint32_t ga[2][4][4]; /* G's A fragments: m-tile, K step, register */
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ks = 0; ks < 4; ks++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    ga[mi][ks][k] = tf32(sg[tab[((mi * 4 + ks) * 4 + k) * 32 + lane]]);
                }
        for (int nb = 0; nb < D; nb += 32) {
            float acc[2][4][4]; /* m-tile, n-tile s (columns nb + 4n + s) */
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int s = 0; s < 4; s++)
                    acc[mi][s][0] = acc[mi][s][1] = acc[mi][s][2] = acc[mi][s][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                /* B (K = vectors, N = columns): b0 vector 8ks + q, b1 vector 8ks + q + 4;
                 * column nb + 4g + s for n-tile s */
                const float4 z0 = zload(zr, 8 * ks + q, F, D, nb + 4 * g),
                             z1 = zload(zr, 8 * ks + q + 4, F, D, nb + 4 * g);
                const uint32_t b0[4] = {tf32(z0.x), tf32(z0.y), tf32(z0.z), tf32(z0.w)};
                const uint32_t b1[4] = {tf32(z1.x), tf32(z1.y), tf32(z1.z), tf32(z1.w)};
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int s = 0; s < 4; s++)
                        mma1688(acc[mi][s], ga[mi][ks][0], ga[mi][ks][1], ga[mi][ks][2],
                                ga[mi][ks][3], b0[s], b1[s]);
            }
            /* lane's values of row i: n = 2q (register 2h) and 2q + 1 (2h + 1) of
             * tile s are columns nb + 8q + s and nb + 8q + 4 + s */
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int i = 16 * mi + g + 8 * h, d = nb + 8 * q;
                    float4 lo = make_float4(acc[mi][0][2 * h], acc[mi][1][2 * h],
                                            acc[mi][2][2 * h], acc[mi][3][2 * h]);
                    float4 hi = make_float4(acc[mi][0][2 * h + 1], acc[mi][1][2 * h + 1],
                                            acc[mi][2][2 * h + 1], acc[mi][3][2 * h + 1]);
                    if (i == 0) {
                        const float4 x0 = __ldg((const float4 *)(zr + d)),
                                     x1 = __ldg((const float4 *)(zr + d + 4));
                        const float4 g0 = __ldg((const float4 *)(gr + d)),
                                     g1 = __ldg((const float4 *)(gr + d + 4));
                        lo.x = x0.x > 0.0f ? lo.x + g0.x : 0.0f;
                        lo.y = x0.y > 0.0f ? lo.y + g0.y : 0.0f;
                        lo.z = x0.z > 0.0f ? lo.z + g0.z : 0.0f;
                        lo.w = x0.w > 0.0f ? lo.w + g0.w : 0.0f;
                        hi.x = x1.x > 0.0f ? hi.x + g1.x : 0.0f;
                        hi.y = x1.y > 0.0f ? hi.y + g1.y : 0.0f;
                        hi.z = x1.z > 0.0f ? hi.z + g1.z : 0.0f;
                        hi.w = x1.w > 0.0f ? hi.w + g1.w : 0.0f;
                        *(float4 *)(dx + r * D + d) = lo;
                        *(float4 *)(dx + r * D + d + 4) = hi;
                    } else if (i < F) {
                        float *o = de + (r * T + (i - 1)) * D + d;
                        *(float4 *)o = lo;
                        *(float4 *)(o + 4) = hi;
                    }
                }
        }
    }
}

/* Dynamic shared bytes a block (op 1 forward, 2 backward). */
static size_t ia4t_smem(int op, int F, int64_t ldo)
{
    if (op == 1)
        return sizeof(float) * IA4T_WARPS * (size_t)ldo;
    const size_t np = (size_t)F * (size_t)(F - 1) / 2, gs = (np + 1 + 3) & ~(size_t)3;
    return sizeof(unsigned short) * 32 * 32 + sizeof(float) * IA4T_WARPS * gs;
}

bool ia4t_applies(const rap_gpu *g)
{
    return !g->bf16 && g->tf32 && g->D % 32 == 0 && g->D <= 128 && g->F <= IA4T_FP &&
           g->F >= 2;
}

static rap_status ia4t_prepare(rap_gpu *g, bool *fits)
{
    const size_t fs = ia4t_smem(1, g->F, g->ld_in), bs = ia4t_smem(2, g->F, g->ld_in);
    *fits = fs <= g->smem_optin && bs <= g->smem_optin;
    if (!*fits)
        return RAP_OK;
    const int most = (int)g->smem_optin;
    RAP_CUDA_TRY(cudaFuncSetAttribute(interact_fwd4t_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd4t_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    int nf = 0, nb = 0;
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nf, interact_fwd4t_kernel,
                                                               32 * IA4T_WARPS, fs));
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, interact_bwd4t_kernel,
                                                               32 * IA4T_WARPS, bs));
    g->ia3_fsmem = fs;
    g->ia3_bsmem = bs;
    g->ia2_fgrid = (unsigned)(g->sms * (nf > 0 ? nf : 1));
    g->ia2_bgrid = (unsigned)(g->sms * (nb > 0 ? nb : 1));
    return RAP_OK;
}

rap_status ia4t_call(rap_gpu *g, int op, int64_t rows, bool *fits)
{
    if (!ia4t_applies(g))
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: the TF32 v4 interaction needs an fp32 model with TF32 math, "
                        "D %% 32 == 0, D <= 128 and 2 <= F <= 32 (F=%d, D=%d)",
                        g->F, g->D);
    if (op == 0)
        return ia4t_prepare(g, fits);
    if (op == 1) {
        const unsigned blocks = rap_gpu_blocks(rows, IA4T_WARPS, (int)g->ia2_fgrid);
        interact_fwd4t_kernel<<<blocks, 32 * IA4T_WARPS, g->ia3_fsmem, g->stream>>>(
            (const float *)g->z, rows, g->F, g->D, (float *)g->tin, g->ld_in, g->top_in);
    } else {
        const unsigned blocks = rap_gpu_blocks(rows, IA4T_WARPS, (int)g->ia2_bgrid);
        interact_bwd4t_kernel<<<blocks, 32 * IA4T_WARPS, g->ia3_bsmem, g->stream>>>(
            (const float *)g->z, (const float *)g->dtin, g->ld_in, rows, g->F, g->D,
            (float *)g->bot[g->n_bot - 1].da, (float *)g->de);
    }
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

#else
typedef int rap_interaction_v4_tf32_cu_empty;
#endif
