/*
 * interaction_v4.cu -- the v4 generation of the dot interaction: tensor
 * cores. interaction.cu picks the generation and calls these launchers
 * through ia4_call (interaction_internal.h).
 *
 * Why v4: v3 keeps a row's Z in registers and forms each of the 378 pairs
 * (F = 28) with 4 FMAs a lane and a butterfly over the lanes: about 3000
 * instructions a row, and at batch 65536 its forward ran at 435 µs against
 * a memory floor of 125 µs once Z is bf16 (bench/RESULTS.md, 2026-12-02):
 * bound by instructions, not bytes. With Z in bf16 (g->zbf) both products
 * are small matrix products a row, which the tensor cores do in a few
 * dozen instructions:
 *
 *   forward   S = Z Z^T  (F x F, F padded to 32; K = D): the pairs are S's
 *             lower triangle. mma.sync m16n8k16 (bf16 in, fp32 sums): 6
 *             tiles of 16 x 8 cover the lower triangle of 32 x 32, D / 16
 *             steps of K each; the B operand (Z^T) has the same register
 *             layout as A's rows, so each step loads 8 words a lane and no
 *             more.
 *   backward  dZ = G Z  (G: F x F symmetric, G_ij = the gradient of pair
 *             (i, j), zero diagonal; K = F padded to 32): G in shared memory
 *             in bf16 (the pair gradients are bf16 act values: exact), its A
 *             fragments loaded once a row; Z's B fragments by ldmatrix.trans
 *             from the row-major copy; D / 16 column blocks of 8 mma each.
 *             dZ_0 plus the gradient of the x part, times (x > 0), goes to
 *             dx (bf16), dZ_1..T to de (fp32, or bf16 when g->debf), from the
 *             accumulators (8-byte stores of two fp32: whole 32-byte
 *             sectors).
 *
 * Each warp takes one row at a time (grid-stride) and copies its next row's
 * Z into the second of two shared-memory buffers with cp.async while it
 * computes the current one (F rows of D + 8 bf16: the 8 of padding put the
 * rows' 32-bit loads and ldmatrix rows on distinct banks). The operands'
 * rows F..31 (the padding to 32) are one zero row of the warp's that every
 * lane past F points at: no shared memory for them, so the backward fits 3
 * blocks an SM at F = 28, D = 128. The forward writes its output row
 * through a shared-memory copy (the x part, the pairs, the zero padding),
 * 16-byte stores.
 *
 * Where it applies: a bf16 model with a bf16 z, D % 16 == 0, D <= 128,
 * F <= 32 (an fp32 model with TF32 math: interaction_v4_tf32.cu). The
 * products sum in fp32 in the tensor cores' order: the same values as
 * v3's to within fp32 rounding of each sum (the test compares both
 * against a double reference).
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/interaction_internal.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define IA4_WARPS 4 /* warps per block */
#define IA4_FP 32   /* vectors a row is padded to */
#define IA4_GS 40   /* bf16 between G's rows (20 words: distinct banks) */

typedef __nv_bfloat16 bf16;

/* Shared-memory row stride of a Z copy: D + 8 bf16 (a multiple of 16
 * bytes, rows 4 banks apart). */
static __host__ __device__ __forceinline__ int ia4_zs(int D) { return D + 8; }

static __device__ __forceinline__ uint32_t lds32(const bf16 *p) { return *(const uint32_t *)p; }

/* c += A (16 x 16, row) B (16 x 8, col), bf16 in, fp32 sums. */
static __device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 x 8 bf16 matrices, transposed, from the rows this lane points at
 * (lanes 8m..8m+7: the rows of matrix m). */
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16 *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Starts copying row r's Z (F x D bf16, contiguous) into zb (rows ZS
 * apart); warp-wide, 16 bytes a copy. */
static __device__ __forceinline__ void ia4_issue(bf16 *zb, const bf16 *__restrict__ z, int64_t r,
                                                 int F, int D, int lane)
{
    const int per = D / 8, n = F * per, ZS = ia4_zs(D);
    const bf16 *src = z + r * F * D;
#pragma unroll 4
    for (int e = lane; e < n; e += 32)
        cp_async16(zb + (e / per) * ZS + (e % per) * 8, src + (size_t)e * 8);
}

/* A fragment (16 x 16) of the row-major bf16 matrix m (ld elements a row)
 * at rows r0.., columns c0..; g = lane / 4, q = lane % 4. */
static __device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16 *m, int ld, int r0,
                                              int c0, int g, int q)
{
    const bf16 *p = m + (r0 + g) * ld + c0 + 2 * q;
    a[0] = lds32(p);
    a[1] = lds32(p + 8 * ld);
    a[2] = lds32(p + 8);
    a[3] = lds32(p + 8 * ld + 8);
}

/* Row r of a Z copy (F rows ZS apart): the zero row past F. */
static __device__ __forceinline__ const bf16 *zrow(const bf16 *zb, const bf16 *zero, int ZS, int F,
                                                   int r)
{
    return r < F ? zb + r * ZS : zero;
}

/* frag_a of a Z copy, its rows past F read as zero. */
static __device__ __forceinline__ void frag_z(uint32_t (&a)[4], const bf16 *zb, const bf16 *zero,
                                              int ZS, int F, int r0, int c0, int g, int q)
{
    const bf16 *p0 = zrow(zb, zero, ZS, F, r0 + g) + c0 + 2 * q;
    const bf16 *p1 = zrow(zb, zero, ZS, F, r0 + g + 8) + c0 + 2 * q;
    a[0] = lds32(p0);
    a[1] = lds32(p1);
    a[2] = lds32(p0 + 8);
    a[3] = lds32(p1 + 8);
}

/* Two adjacent de elements (8 bytes fp32, 4 bytes bf16). */
static __device__ __forceinline__ void st2(float *p, float a, float b)
{
    *(float2 *)p = make_float2(a, b);
}
static __device__ __forceinline__ void st2(bf16 *p, float a, float b)
{
    *(uint32_t *)p = pack_bf16x2(a, b);
}

/* Forward: out (rows, ldo) bf16 = [x, pairs, 0 padding to ldo]. Dynamic
 * shared memory a warp: two Z copies (F x ZS), the zero row (ZS) and the
 * output row (ldo). */
static __global__ void __launch_bounds__(32 * IA4_WARPS)
    interact_fwd4_kernel(const bf16 *__restrict__ z, int64_t rows, int F, int D,
                         bf16 *__restrict__ out, int64_t ldo, int top_in)
{
    extern __shared__ float4 ia_smem4[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, q = lane & 3;
    const int ZS = ia4_zs(D), zsz = F * ZS;
    bf16 *wb = (bf16 *)ia_smem4 + (size_t)warp * (2 * zsz + ZS + ldo);
    bf16 *zero = wb + 2 * zsz, *stage = zero + ZS;
    for (int e = lane; e < ZS / 8; e += 32)
        ((uint4 *)zero)[e] = make_uint4(0, 0, 0, 0);
    __syncwarp();
    const int64_t stride = (int64_t)gridDim.x * IA4_WARPS;
    int64_t r = (int64_t)blockIdx.x * IA4_WARPS + warp;
    if (r < rows)
        ia4_issue(wb, z, r, F, D, lane);
    cp_commit();
    int cur = 0;
    for (; r < rows; r += stride) {
        const bf16 *zb = wb + cur * zsz;
        if (r + stride < rows)
            ia4_issue(wb + (cur ^ 1) * zsz, z, r + stride, F, D, lane);
        cp_commit();
        cp_wait1(); /* this row's copy is there (the next may still fly) */
        __syncwarp();
        float acc[6][4];
#pragma unroll
        for (int t = 0; t < 6; t++)
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
        for (int kk = 0; kk < D; kk += 16) {
            uint32_t a0[4], a1[4];
            frag_z(a0, zb, zero, ZS, F, 0, kk, g, q);  /* rows 0..15 */
            frag_z(a1, zb, zero, ZS, F, 16, kk, g, q); /* rows 16..31 */
            /* B = Z^T: n-tile j (vectors 8j..8j+7) is A's rows 8j + g */
            mma16816(acc[0], a0, a0[0], a0[2]); /* rows 0-15, vectors 0-7 */
            mma16816(acc[1], a0, a0[1], a0[3]); /* rows 0-15, vectors 8-15 */
            mma16816(acc[2], a1, a0[0], a0[2]); /* rows 16-31, vectors 0-7 */
            mma16816(acc[3], a1, a0[1], a0[3]);
            mma16816(acc[4], a1, a1[0], a1[2]);
            mma16816(acc[5], a1, a1[1], a1[3]);
        }
        ia4_stage_pairs(stage, acc, F, D, g, q); /* the pairs into the output row */
        for (int e = lane; e < D / 2; e += 32) /* the x part: Z's row 0, as it is */
            ((uint32_t *)stage)[e] = lds32(zb + 2 * e);
        for (int c = top_in + lane; c < ldo; c += 32)
            stage[c] = __float2bfloat16_rn(0.0f);
        __syncwarp();
        uint4 *o = (uint4 *)(out + r * ldo);
        for (int e = lane; e < (int)(ldo / 8); e += 32)
            o[e] = ((const uint4 *)stage)[e];
        __syncwarp(); /* stage and zb read: the next row may overwrite them */
        cur ^= 1;
    }
    cp_wait0();
}

/* Backward: dy (rows, ldi) bf16, dx (rows, D) bf16, de (rows, T, D) TE.
 * Dynamic shared memory: the pair table (np words, rounded up to 4), then
 * a warp's two Z copies (F x ZS), its zero row (ZS) and its G (32 x
 * IA4_GS), for each warp. */
template <typename TE>
static __global__ void __launch_bounds__(32 * IA4_WARPS)
    interact_bwd4_kernel(const bf16 *__restrict__ z, const bf16 *__restrict__ dy, int64_t ldi,
                         int64_t rows, int F, int D, bf16 *__restrict__ dx,
                         TE *__restrict__ de)
{
    extern __shared__ float4 ia_smem4[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, q = lane & 3;
    const int ZS = ia4_zs(D), zsz = F * ZS, np = F * (F - 1) / 2, T = F - 1;
    uint32_t *tab = (uint32_t *)ia_smem4; /* pair p: i << 8 | j */
    bf16 *wb = (bf16 *)(tab + ((np + 3) & ~3)) + (size_t)warp * (2 * zsz + ZS + IA4_FP * IA4_GS);
    bf16 *zero = wb + 2 * zsz, *G = zero + ZS;
    for (int e = lane; e < (ZS + IA4_FP * IA4_GS) / 8; e += 32)
        ((uint4 *)zero)[e] = make_uint4(0, 0, 0, 0); /* the zero row; G's diagonal and padding */
    for (int p = threadIdx.x; p < np; p += blockDim.x) {
        const int i = ia_pair_row(p);
        tab[p] = (uint32_t)(i << 8) | (uint32_t)(p - i * (i - 1) / 2);
    }
    __syncthreads();
    const int64_t stride = (int64_t)gridDim.x * IA4_WARPS;
    int64_t r = (int64_t)blockIdx.x * IA4_WARPS + warp;
    if (r < rows)
        ia4_issue(wb, z, r, F, D, lane);
    cp_commit();
    int cur = 0;
    const unsigned short *dyu = (const unsigned short *)dy;
    for (; r < rows; r += stride) {
        const bf16 *zb = wb + cur * zsz;
        const unsigned short *gr = dyu + r * ldi;
        /* the row's pair gradients: every load issued before the first use */
        unsigned short pv[16]; /* np <= 496 = 16 x 31 */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int p = lane + 32 * k;
            pv[k] = p < np ? __ldg(gr + D + p) : (unsigned short)0;
        }
        if (r + stride < rows)
            ia4_issue(wb + (cur ^ 1) * zsz, z, r + stride, F, D, lane);
        cp_commit();
        unsigned short *Gu = (unsigned short *)G;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int p = lane + 32 * k;
            if (p < np) {
                const uint32_t t = tab[p];
                const int i = (int)(t >> 8), j = (int)(t & 0xffu);
                Gu[i * IA4_GS + j] = pv[k];
                Gu[j * IA4_GS + i] = pv[k];
            }
        }
        cp_wait1(); /* this row's Z is there */
        __syncwarp(); /* and G is written */
        uint32_t ga[2][2][4]; /* G's A fragments: rows 16mi.., columns 16kk.. */
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int kk = 0; kk < 2; kk++)
                frag_a(ga[mi][kk], G, IA4_GS, 16 * mi, 16 * kk, g, q);
        /* lanes 8m..8m+7 point at rows of matrix m: (k 0-7 | 8-15) x (n 0-7 | 8-15) */
        const int lrow = ((lane >> 3) & 1) * 8 + (lane & 7), lcol = (lane >> 4) * 8;
        for (int nb = 0; nb < D; nb += 16) {
            float acc[2][2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ns = 0; ns < 2; ns++)
                    acc[mi][ns][0] = acc[mi][ns][1] = acc[mi][ns][2] = acc[mi][ns][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t b[4];
                ldsm_x4_t(b, zrow(zb, zero, ZS, F, 16 * kk + lrow) + nb + lcol);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    mma16816(acc[mi][0], ga[mi][kk], b[0], b[1]);
                    mma16816(acc[mi][1], ga[mi][kk], b[2], b[3]);
                }
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ns = 0; ns < 2; ns++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int i = 16 * mi + g + 8 * h, d = nb + 8 * ns + 2 * q;
                        const float v0 = acc[mi][ns][2 * h], v1 = acc[mi][ns][2 * h + 1];
                        if (i == 0) {
                            const uint32_t xw = lds32(zb + d);
                            const uint32_t gw = *(const uint32_t *)(gr + d);
                            const float x0 = __uint_as_float(xw << 16),
                                        x1 = __uint_as_float(xw & 0xffff0000u);
                            const float g0 = __uint_as_float(gw << 16),
                                        g1 = __uint_as_float(gw & 0xffff0000u);
                            *(uint32_t *)(dx + r * D + d) =
                                pack_bf16x2(x0 > 0.0f ? v0 + g0 : 0.0f,
                                            x1 > 0.0f ? v1 + g1 : 0.0f);
                        } else if (i < F) {
                            st2(de + (r * T + (i - 1)) * D + d, v0, v1);
                        }
                    }
        }
        __syncwarp(); /* zb and G read: the next rows may overwrite them */
        cur ^= 1;
    }
    cp_wait0();
}

/* Dynamic shared bytes a block of the v4 kernels (op 1 forward, 2
 * backward). */
static size_t ia4_smem(int op, int F, int D, int64_t ldo)
{
    const size_t zs = (size_t)ia4_zs(D), zsz = (size_t)F * zs;
    if (op == 1)
        return 2 * IA4_WARPS * (2 * zsz + zs + (size_t)ldo);
    const size_t np = (size_t)F * (size_t)(F - 1) / 2;
    return 4 * ((np + 3) & ~(size_t)3) + 2 * IA4_WARPS * (2 * zsz + zs + IA4_FP * IA4_GS);
}

/* Where v4 applies (g shaped): bf16 with a bf16 z, D % 16 == 0, D <= 128,
 * F <= 32; or fp32 with TF32 math where interaction_v4_tf32.cu's apply. */
bool ia4_applies(const rap_gpu *g)
{
    if (!g->bf16)
        return ia4t_applies(g);
    return g->zbf && g->D % 16 == 0 && g->D <= 128 && g->F <= IA4_FP && g->F >= 2;
}

static rap_status ia4_prepare(rap_gpu *g, bool *fits)
{
    const size_t fs = ia4_smem(1, g->F, g->D, g->ld_in), bs = ia4_smem(2, g->F, g->D, g->ld_in);
    *fits = fs <= g->smem_optin && bs <= g->smem_optin;
    if (!*fits)
        return RAP_OK;
    const int most = (int)g->smem_optin;
    RAP_CUDA_TRY(cudaFuncSetAttribute(interact_fwd4_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    int nf = 0, nb = 0;
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nf, interact_fwd4_kernel,
                                                               32 * IA4_WARPS, fs));
    if (g->debf) {
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd4_kernel<bf16>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, most));
        RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &nb, interact_bwd4_kernel<bf16>, 32 * IA4_WARPS, bs));
    } else {
        RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd4_kernel<float>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, most));
        RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &nb, interact_bwd4_kernel<float>, 32 * IA4_WARPS, bs));
    }
    g->ia3_fsmem = fs;
    g->ia3_bsmem = bs;
    g->ia2_fgrid = (unsigned)(g->sms * (nf > 0 ? nf : 1));
    g->ia2_bgrid = (unsigned)(g->sms * (nb > 0 ? nb : 1));
    return RAP_OK;
}

static rap_status ia4_forward(rap_gpu *g, int64_t rows)
{
    const unsigned blocks = rap_gpu_blocks(rows, IA4_WARPS, (int)g->ia2_fgrid);
    interact_fwd4_kernel<<<blocks, 32 * IA4_WARPS, g->ia3_fsmem, g->stream>>>(
        (const bf16 *)g->z, rows, g->F, g->D, (bf16 *)g->tin, g->ld_in, g->top_in);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

static rap_status ia4_backward(rap_gpu *g, int64_t rows)
{
    const unsigned blocks = rap_gpu_blocks(rows, IA4_WARPS, (int)g->ia2_bgrid);
    bf16 *dxb = (bf16 *)g->bot[g->n_bot - 1].da;
    if (g->debf)
        interact_bwd4_kernel<bf16><<<blocks, 32 * IA4_WARPS, g->ia3_bsmem, g->stream>>>(
            (const bf16 *)g->z, (const bf16 *)g->dtin, g->ld_in, rows, g->F, g->D, dxb,
            (bf16 *)g->de);
    else
        interact_bwd4_kernel<float><<<blocks, 32 * IA4_WARPS, g->ia3_bsmem, g->stream>>>(
            (const bf16 *)g->z, (const bf16 *)g->dtin, g->ld_in, rows, g->F, g->D, dxb,
            (float *)g->de);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

rap_status ia4_call(rap_gpu *g, int op, int64_t rows, bool *fits)
{
    if (!g->bf16)
        return ia4t_call(g, op, rows, fits);
    if (!ia4_applies(g))
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: the v4 interaction needs a bf16 model with a bf16 z, "
                        "D %% 16 == 0, D <= 128 and F <= 32 (F=%d, D=%d)",
                        g->F, g->D);
    return op == 0 ? ia4_prepare(g, fits) : op == 1 ? ia4_forward(g, rows) : ia4_backward(g, rows);
}

#else
typedef int rap_interaction_v4_cu_empty;
#endif
