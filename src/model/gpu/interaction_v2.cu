/*
 * interaction_v2.cu -- the v2 and v3 generations of the dot interaction
 * (interaction.cu says why v2 and picks the generation): v2 holds a row's
 * Z in registers; v3 is v2 with the next rows' Z prefetched into shared
 * memory. Their kernels, then their launchers; interaction.cu calls the
 * launchers through ia2_call and ia3_call (interaction_internal.h).
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/interaction_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

/* ------------------------------------------- v2: a row's Z in registers */

/*
 * One row per LANES lanes (32; 16 when D <= 64: two rows a warp). Lane q
 * of a row holds float4 q of each of its F vectors in registers (FMAX >=
 * F of them, a compile-time bound; D % 4 == 0 and D <= 4 * LANES), read
 * once from device memory with 16-byte loads, F in flight per lane; no
 * shared-memory copy of Z.
 *
 * Forward: the pairs in groups of LANES (pair p in group p / LANES). Each
 * lane forms its 4-element part of every pair's dot of the group, then a
 * transposing butterfly (LANES - 1 shuffles, LANES - 1 adds) leaves the
 * whole dot of pair LANES*g + q on lane q, which stores it: one coalesced
 * store a group. The row's padding columns [top_in, ldo) are written 0.
 *
 * Backward: G (F x F, symmetric, zero diagonal) of the row in shared
 * memory, each pair gradient read once and written at (i, j) and (j, i)
 * (a per-block table of the two offsets of pair p); dZ_i = sum_j G_ij Z_j
 * with G's row i read as float4 broadcasts; dZ_0 plus the gradient of the
 * x part, times (x > 0), goes to dx (act type), dZ_1..T to de, 16-byte
 * stores. Sums run over j in order, one FMA each.
 *
 * Z is of type TZ: fp32, or bf16 (g->zbf: a bf16 model's interaction
 * input, gpu_model.h), read with 8-byte loads of 4 elements and widened
 * exactly; de of type TE: fp32, or bf16 (g->debf) rounded to nearest once.
 */

#define IA2_WARPS 4 /* warps per block of the v2 kernels */

static __device__ __forceinline__ float dot4(const float4 a, const float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

static __device__ __forceinline__ void fma4(float4 &a, const float s, const float4 b)
{
    a.x += s * b.x;
    a.y += s * b.y;
    a.z += s * b.z;
    a.w += s * b.w;
}

/* 4 consecutive act elements at p (16-byte aligned for float, 8 for bf16). */
static __device__ __forceinline__ void st4(float *p, const float4 v) { *(float4 *)p = v; }
static __device__ __forceinline__ void st4(__nv_bfloat16 *p, const float4 v)
{
    uint2 u;
    u.x = pack_bf16x2(v.x, v.y);
    u.y = pack_bf16x2(v.z, v.w);
    *(uint2 *)p = u;
}
static __device__ __forceinline__ float4 ld4(const float *p) { return __ldg((const float4 *)p); }
static __device__ __forceinline__ float4 ld4(const __nv_bfloat16 *p)
{
    const uint2 u = __ldg((const uint2 *)p);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

/* One step of the transposing butterfly: values [0, 2*O) of s become
 * [0, O), each the sum of this lane's and lane (lane ^ O)'s part of the
 * half this lane keeps (the upper half when bit O of lane is set). */
template <int N, int O>
static __device__ __forceinline__ void ia_reduce_step(float (&s)[N], int lane)
{
    if constexpr (O >= 1) {
        const bool up = (lane & O) != 0;
#pragma unroll
        for (int m = 0; m < O; m++) {
            const float send = up ? s[m] : s[m + O];
            const float keep = up ? s[m + O] : s[m];
            s[m] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        ia_reduce_step<N, O / 2>(s, lane);
    }
}

/* This lane's part of the dot of pair P (0 past the FMAX-vector
 * triangle); compile-time indices. */
template <int FMAX, int P>
static __device__ __forceinline__ float ia_pair_part(const float4 (&v)[FMAX])
{
    if constexpr (P < FMAX * (FMAX - 1) / 2) {
        constexpr int I = ia_pair_row(P);
        constexpr int J = P - I * (I - 1) / 2;
        return dot4(v[I], v[J]);
    } else {
        return 0.0f;
    }
}

/* The group of pairs [P0, P0 + LANES) through the butterfly's first step
 * as they are formed (so only LANES / 2 values are live): s[m], m in
 * [M, LANES / 2), as ia_reduce_step<LANES, LANES / 2> would leave it. */
template <int FMAX, int LANES, int P0, int M>
static __device__ __forceinline__ void ia_group_first(const float4 (&v)[FMAX],
                                                      float (&s)[LANES], int lane)
{
    constexpr int O = LANES / 2;
    if constexpr (M < O) {
        const float a = ia_pair_part<FMAX, P0 + M>(v), b = ia_pair_part<FMAX, P0 + M + O>(v);
        const bool up = (lane & O) != 0;
        s[M] = (up ? b : a) + __shfl_xor_sync(0xffffffffu, up ? a : b, O);
        ia_group_first<FMAX, LANES, P0, M + 1>(v, s, lane);
    }
}

/* Groups GR.. of the row's np pairs into o[p] (o = the row's output past
 * its x part; ok: this lane's row exists). Warp-wide. */
template <int FMAX, int LANES, int GR, typename TO>
static __device__ __forceinline__ void ia_groups(const float4 (&v)[FMAX], TO *o, int np, int lane,
                                                 bool ok)
{
    constexpr int GMAX = (FMAX * (FMAX - 1) / 2 + LANES - 1) / LANES;
    if constexpr (GR < GMAX) {
        if (GR * LANES < np) { /* the same on every lane */
            float s[LANES];
            ia_group_first<FMAX, LANES, GR * LANES, 0>(v, s, lane);
            ia_reduce_step<LANES, LANES / 4>(s, lane);
            const float r = s[0];
            const int p = GR * LANES + lane % LANES;
            if (ok && p < np)
                o[p] = to_act<TO>(r);
            ia_groups<FMAX, LANES, GR + 1, TO>(v, o, np, lane, ok);
        }
    }
}

/* Loads this lane's float4 q of the row's F vectors (zero past F, or
 * when !has). */
template <int FMAX, typename TZ>
static __device__ __forceinline__ void ia_load_z(float4 (&v)[FMAX], const TZ *zr, int F, int D,
                                                 bool has)
{
#pragma unroll
    for (int i = 0; i < FMAX; i++)
        v[i] = (has && i < F) ? ld4(zr + (int64_t)i * D) : make_float4(0.f, 0.f, 0.f, 0.f);
}

/* Forward v2: out (rows, ldo) act = [x, pairs, 0 padding to ldo]. */
template <int FMAX, int LANES, typename TO, typename TZ>
static __global__ void __launch_bounds__(32 * IA2_WARPS)
    interact_fwd2_kernel(const TZ *__restrict__ z, int64_t rows, int F, int D,
                         TO *__restrict__ out, int64_t ldo, int top_in)
{
    constexpr int RPW = 32 / LANES; /* rows a warp */
    const int lane = threadIdx.x & 31, q = lane % LANES;
    const int DQ = D / 4, np = F * (F - 1) / 2;
    const int64_t stride = (int64_t)gridDim.x * IA2_WARPS * RPW;
    /* every lane of a warp runs the same iterations (the shuffles) */
    for (int64_t r0 = ((int64_t)blockIdx.x * IA2_WARPS + threadIdx.x / 32) * RPW; r0 < rows;
         r0 += stride) {
        const int64_t row = r0 + lane / LANES;
        const bool ok = row < rows, has = ok && q < DQ;
        const int64_t rr = ok ? row : 0;
        float4 v[FMAX];
        ia_load_z<FMAX, TZ>(v, z + rr * F * D + 4 * q, F, D, has);
        TO *o = out + rr * ldo;
        if (has)
            st4(o + 4 * q, v[0]);
        ia_groups<FMAX, LANES, 0, TO>(v, o + D, np, lane, ok);
        if (ok)
            for (int c = top_in + q; c < ldo; c += LANES)
                o[c] = to_act<TO>(0.0f);
    }
}

/* Backward v2. dy (rows, ldi) act; dx (rows, D) act; de (rows, T, D) TE. */
template <int FMAX, int LANES, typename TI, typename TZ, typename TE>
static __global__ void __launch_bounds__(32 * IA2_WARPS)
    interact_bwd2_kernel(const TZ *__restrict__ z, const TI *__restrict__ dy, int64_t ldi,
                         int64_t rows, int F, int D, TI *__restrict__ dx,
                         TE *__restrict__ de)
{
    constexpr int RPW = 32 / LANES;
    constexpr int PMAX = FMAX * (FMAX - 1) / 2;
    /* G's rows GS floats apart: float4 rows, and its transposed writes (j*GS
     * + i over j) spread over 8 banks instead of one */
    constexpr int GS = FMAX + 4;
    __shared__ float4 gsm[IA2_WARPS * RPW][FMAX * GS / 4]; /* G of each row in flight */
    __shared__ uint32_t tab[PMAX]; /* pair p: (i*GS + j) | (j*GS + i) << 16 */
    const int lane = threadIdx.x & 31, q = lane % LANES;
    const int DQ = D / 4, np = F * (F - 1) / 2, T = F - 1;
    for (int e = threadIdx.x; e < IA2_WARPS * RPW * FMAX * GS / 4; e += blockDim.x)
        (&gsm[0][0])[e] = make_float4(0.f, 0.f, 0.f, 0.f); /* diagonal, padding stay 0 */
    for (int p = threadIdx.x; p < np; p += blockDim.x) {
        const int i = ia_pair_row(p), j = p - i * (i - 1) / 2;
        tab[p] = (uint32_t)(i * GS + j) | ((uint32_t)(j * GS + i) << 16);
    }
    __syncthreads();
    float *G = (float *)gsm[threadIdx.x / LANES];
    const int64_t stride = (int64_t)gridDim.x * IA2_WARPS * RPW;
    for (int64_t r0 = ((int64_t)blockIdx.x * IA2_WARPS + threadIdx.x / 32) * RPW; r0 < rows;
         r0 += stride) {
        const int64_t row = r0 + lane / LANES;
        const bool ok = row < rows, has = ok && q < DQ;
        const int64_t rr = ok ? row : 0;
        const TI *g = dy + rr * ldi;
        float4 v[FMAX];
        ia_load_z<FMAX, TZ>(v, z + rr * F * D + 4 * q, F, D, has);
        const float4 gx = has ? ld4(g + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
        __syncwarp(); /* the previous row's reads of G are done */
        if (ok)
            for (int p = q; p < np; p += LANES) {
                const float gv = act_f(g[D + p]);
                const uint32_t t = tab[p];
                G[t & 0xffffu] = gv;
                G[t >> 16] = gv;
            }
        __syncwarp();
        for (int i = 0; i < F; i++) {
            const float4 *Gi = (const float4 *)(G + i * GS);
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int jb = 0; jb < FMAX / 4; jb++) {
                if (4 * jb < F) {
                    const float4 c = Gi[jb];
                    fma4(a, c.x, v[4 * jb]);
                    fma4(a, c.y, v[4 * jb + 1]);
                    fma4(a, c.z, v[4 * jb + 2]);
                    fma4(a, c.w, v[4 * jb + 3]);
                }
            }
            if (!has)
                continue;
            if (i == 0) {
                const float4 x = v[0];
                const float4 d = make_float4(x.x > 0.0f ? a.x + gx.x : 0.0f,
                                             x.y > 0.0f ? a.y + gx.y : 0.0f,
                                             x.z > 0.0f ? a.z + gx.z : 0.0f,
                                             x.w > 0.0f ? a.w + gx.w : 0.0f);
                st4(dx + rr * D + 4 * q, d);
            } else {
                st4(de + (rr * T + (i - 1)) * D + 4 * q, a);
            }
        }
    }
}

/* ------------------------------- v3: v2 with the next rows' Z prefetched */

/*
 * Why v3: v2 reads a row's Z into registers and then computes; a warp has
 * loads in flight only between those phases, and its backward fetched the
 * row's pair gradients in three dependent rounds after Z arrived. At 12
 * rows an SM the phases did not overlap: the forward ran at 1.86x its
 * memory floor and the backward at 1.84x, about the memory time plus the
 * arithmetic time (bench/RESULTS.md, 2026-12-01). v3 keeps v2's math and
 * register layout, but each warp copies its NEXT rows' Z into shared
 * memory with cp.async (16 bytes a lane, no registers) while it computes
 * the current ones, so every warp has its next 14 KB in flight all the
 * time; at the start of a row the lanes read their float4s from shared
 * memory (conflict-free, 28 loads a lane). The backward also issues all of
 * the row's pair-gradient loads at once (NPL a lane, compile-time) before
 * it waits for Z, and its G has exactly FMAX columns (28 for F = 28: no
 * guarded column block, the shared loads of a G row hoisted). Shared
 * memory a block (4 warps): the Z copies (4 x RPW x F x D floats), and in
 * the backward G (RPW x F x GS floats a warp) and the pair-offset table;
 * F = 28, D = 128: 57 KB forward, 70 KB backward, 3 blocks an SM.
 * Registers are capped at 168 (3 blocks of 128 threads) for FMAX >= 28.
 */

/* Floats between G's rows in v3: FMAX rounded to an odd number of float4s
 * (the transposed writes j * GS + i spread over 8 banks). */
static __host__ __device__ constexpr int ia3_gs(int fmax) { return 4 * ((fmax / 4) | 1); }

/* Starts copying the Z of rows [r, min(r + rpw, rows)) (rz elements each,
 * contiguous in z) into zb; warp-wide, 4 elements a copy (16 bytes fp32,
 * 8 bytes bf16: D % 4 == 0 keeps both aligned). */
static __device__ __forceinline__ void ia3_copy4(float *d, const float *s) { cp_async16(d, s); }
static __device__ __forceinline__ void ia3_copy4(__nv_bfloat16 *d, const __nv_bfloat16 *s)
{
    cp_async8(d, s);
}
template <typename TZ>
static __device__ __forceinline__ void ia3_issue(TZ *zb, const TZ *__restrict__ z, int64_t r,
                                                 int64_t rows, int rz, int rpw, int lane)
{
    const int nr = (int)(rows - r < rpw ? rows - r : rpw);
    const int n = nr * rz / 4;
    const TZ *src = z + r * rz;
#pragma unroll 4
    for (int e = lane; e < n; e += 32)
        ia3_copy4(zb + 4 * e, src + 4 * e);
}

/* 4 elements of a shared-memory copy as floats. */
static __device__ __forceinline__ float4 sm4(const float *p) { return *(const float4 *)p; }
static __device__ __forceinline__ float4 sm4(const __nv_bfloat16 *p)
{
    const uint2 u = *(const uint2 *)p;
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

/* This lane's float4 of each of the row's vectors from its copy zr (zero
 * past F, or when !has). */
template <int FMAX, typename TZ>
static __device__ __forceinline__ void ia3_read_z(float4 (&v)[FMAX], const TZ *zr, int F, int D,
                                                  bool has)
{
#pragma unroll
    for (int i = 0; i < FMAX; i++)
        v[i] = (has && i < F) ? sm4(zr + i * D) : make_float4(0.f, 0.f, 0.f, 0.f);
}

/* Bytes of a warp's Z copies in v3's shared memory: rpw rows of rz
 * elements of zes bytes, rounded up to 16 (G after them is read as
 * float4s). */
static __host__ __device__ constexpr size_t ia3_zbytes(size_t rpw, size_t rz, size_t zes)
{
    return (rpw * rz * zes + 15) / 16 * 16;
}

/* Forward v3: out (rows, ldo) act = [x, pairs, 0 padding to ldo]. Dynamic
 * shared memory: IA2_WARPS warps' Z copies (ia3_zbytes each). */
template <int FMAX, int LANES, int MINB, typename TO, typename TZ>
static __global__ void __launch_bounds__(32 * IA2_WARPS, MINB)
    interact_fwd3_kernel(const TZ *__restrict__ z, int64_t rows, int F, int D,
                         TO *__restrict__ out, int64_t ldo, int top_in)
{
    extern __shared__ float4 ia_smem4[];
    constexpr int RPW = 32 / LANES;
    const int lane = threadIdx.x & 31, q = lane % LANES, warp = threadIdx.x / 32;
    const int DQ = D / 4, np = F * (F - 1) / 2, rz = F * D;
    TZ *zb = (TZ *)((char *)ia_smem4 + (size_t)warp * ia3_zbytes(RPW, rz, sizeof(TZ)));
    const TZ *zr = zb + (lane / LANES) * rz + 4 * q;
    const int64_t stride = (int64_t)gridDim.x * IA2_WARPS * RPW;
    int64_t r0 = ((int64_t)blockIdx.x * IA2_WARPS + warp) * RPW;
    if (r0 < rows)
        ia3_issue(zb, z, r0, rows, rz, RPW, lane);
    cp_commit();
    /* every lane of a warp runs the same iterations (the shuffles) */
    for (; r0 < rows; r0 += stride) {
        const int64_t row = r0 + lane / LANES;
        const bool ok = row < rows, has = ok && q < DQ;
        const int64_t rr = ok ? row : 0;
        cp_wait0();
        __syncwarp(); /* the copy of every lane is there */
        float4 v[FMAX];
        ia3_read_z<FMAX, TZ>(v, zr, F, D, has);
        __syncwarp(); /* every lane holds its Z: the buffer takes the next rows */
        if (r0 + stride < rows)
            ia3_issue(zb, z, r0 + stride, rows, rz, RPW, lane);
        cp_commit();
        TO *o = out + rr * ldo;
        if (has)
            st4(o + 4 * q, v[0]);
        ia_groups<FMAX, LANES, 0, TO>(v, o + D, np, lane, ok);
        if (ok)
            for (int c = top_in + q; c < ldo; c += LANES)
                o[c] = to_act<TO>(0.0f);
    }
    cp_wait0();
}

/* Backward v3. dy (rows, ldi) act; dx (rows, D) act; de (rows, T, D) TE.
 * Dynamic shared memory: the pair table (np words rounded up to 4), then
 * a warp's Z copies (ia3_zbytes) and its G (RPW * F * GS floats), for each
 * warp. */
template <int FMAX, int LANES, int MINB, typename TI, typename TZ, typename TE>
static __global__ void __launch_bounds__(32 * IA2_WARPS, MINB)
    interact_bwd3_kernel(const TZ *__restrict__ z, const TI *__restrict__ dy, int64_t ldi,
                         int64_t rows, int F, int D, TI *__restrict__ dx,
                         TE *__restrict__ de)
{
    extern __shared__ float4 ia_smem4[];
    constexpr int RPW = 32 / LANES, GS = ia3_gs(FMAX);
    constexpr int NPL = (FMAX * (FMAX - 1) / 2 + LANES - 1) / LANES; /* pairs a lane */
    const int lane = threadIdx.x & 31, q = lane % LANES, warp = threadIdx.x / 32;
    const int DQ = D / 4, np = F * (F - 1) / 2, T = F - 1, rz = F * D, gsz = F * GS;
    uint32_t *tab = (uint32_t *)ia_smem4; /* pair p: (i*GS + j) | (j*GS + i) << 16 */
    const size_t zbytes = ia3_zbytes(RPW, rz, sizeof(TZ));
    char *wbase = (char *)ia_smem4 + 4 * (size_t)((np + 3) & ~3) +
                  (size_t)warp * (zbytes + sizeof(float) * RPW * gsz);
    TZ *zb = (TZ *)wbase;
    float *Gw = (float *)(wbase + zbytes);
    for (int e = lane; e < RPW * gsz; e += 32)
        Gw[e] = 0.0f; /* diagonal and the columns past F stay 0 */
    for (int p = threadIdx.x; p < np; p += blockDim.x) {
        const int i = ia_pair_row(p), j = p - i * (i - 1) / 2;
        tab[p] = (uint32_t)(i * GS + j) | ((uint32_t)(j * GS + i) << 16);
    }
    __syncthreads();
    float *G = Gw + (lane / LANES) * gsz;
    const TZ *zr = zb + (lane / LANES) * rz + 4 * q;
    const int64_t stride = (int64_t)gridDim.x * IA2_WARPS * RPW;
    int64_t r0 = ((int64_t)blockIdx.x * IA2_WARPS + warp) * RPW;
    if (r0 < rows)
        ia3_issue(zb, z, r0, rows, rz, RPW, lane);
    cp_commit();
    for (; r0 < rows; r0 += stride) {
        const int64_t row = r0 + lane / LANES;
        const bool ok = row < rows, has = ok && q < DQ;
        const int64_t rr = ok ? row : 0;
        const TI *g = dy + rr * ldi;
        cp_wait0();
        __syncwarp(); /* the Z copies are there; the previous row's reads of G are done */
        float4 v[FMAX];
        ia3_read_z<FMAX, TZ>(v, zr, F, D, has);
        __syncwarp(); /* every lane holds its Z: the buffer takes the next rows */
        if (r0 + stride < rows)
            ia3_issue(zb, z, r0 + stride, rows, rz, RPW, lane);
        cp_commit();
        /* the row's gradient: every load issued before the first use */
        float pv[NPL];
#pragma unroll
        for (int k = 0; k < NPL; k++) {
            const int p = q + k * LANES;
            pv[k] = (ok && p < np) ? act_f(g[D + p]) : 0.0f;
        }
        const float4 gx = has ? ld4(g + 4 * q) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok)
#pragma unroll
            for (int k = 0; k < NPL; k++) {
                const int p = q + k * LANES;
                if (p < np) {
                    const uint32_t t = tab[p];
                    G[t & 0xffffu] = pv[k];
                    G[t >> 16] = pv[k];
                }
            }
        __syncwarp(); /* G written */
        for (int i = 0; i < F; i++) {
            const float4 *Gi = (const float4 *)(G + i * GS);
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int jb = 0; jb < FMAX / 4; jb++) {
                const float4 c = Gi[jb]; /* columns past F: 0 (and v[j] 0 there) */
                fma4(a, c.x, v[4 * jb]);
                fma4(a, c.y, v[4 * jb + 1]);
                fma4(a, c.z, v[4 * jb + 2]);
                fma4(a, c.w, v[4 * jb + 3]);
            }
            if (!has)
                continue;
            if (i == 0) {
                const float4 x = v[0];
                const float4 d = make_float4(x.x > 0.0f ? a.x + gx.x : 0.0f,
                                             x.y > 0.0f ? a.y + gx.y : 0.0f,
                                             x.z > 0.0f ? a.z + gx.z : 0.0f,
                                             x.w > 0.0f ? a.w + gx.w : 0.0f);
                st4(dx + rr * D + 4 * q, d);
            } else {
                st4(de + (rr * T + (i - 1)) * D + 4 * q, a);
            }
        }
    }
    cp_wait0();
}

/* Dynamic shared bytes a block of the v3 kernels (op 1 forward, 2
 * backward) for F vectors of D (zes bytes an element), FMAX held, LANES
 * lanes a row. */
static size_t ia3_smem(int op, int F, int D, int fmax, int lanes, size_t zes)
{
    const size_t rpw = (size_t)(32 / lanes), rz = (size_t)F * (size_t)D;
    const size_t zb = ia3_zbytes(rpw, rz, zes);
    if (op == 1)
        return IA2_WARPS * zb;
    const size_t np = (size_t)F * (size_t)(F - 1) / 2;
    const size_t gsz = (size_t)F * (size_t)ia3_gs(fmax);
    return sizeof(float) * ((np + 3) & ~(size_t)3) + IA2_WARPS * (zb + sizeof(float) * rpw * gsz);
}

/* ---------------------------------------------------- v2 launchers */

/* The kernels' types (act, z, de): bf16 with bf16 z and de (debf), bf16
 * with bf16 z (zbf), bf16 with fp32 z, fp32 throughout. IA_TYPES(g, F)
 * calls F(TA, TZ, TE) for g's types. */
#define IA_TYPES(g, F)                                                                   \
    do {                                                                                 \
        if ((g)->bf16 && (g)->debf) {                                                    \
            F(__nv_bfloat16, __nv_bfloat16, __nv_bfloat16);                              \
        } else if ((g)->bf16 && (g)->zbf) {                                              \
            F(__nv_bfloat16, __nv_bfloat16, float);                                      \
        } else if ((g)->bf16) {                                                          \
            F(__nv_bfloat16, float, float);                                              \
        } else {                                                                         \
            F(float, float, float);                                                      \
        }                                                                                \
    } while (0)

/* Blocks per SM of the v2 kernels (FMAX, LANES) into g. */
template <int FMAX, int LANES> static rap_status ia2_occupancy(rap_gpu *g)
{
    int nf = 0, nb = 0;
#define IA2_OCC(TA, TZ, TE)                                                              \
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                          \
        &nf, interact_fwd2_kernel<FMAX, LANES, TA, TZ>, 32 * IA2_WARPS, 0));             \
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                          \
        &nb, interact_bwd2_kernel<FMAX, LANES, TA, TZ, TE>, 32 * IA2_WARPS, 0))
    IA_TYPES(g, IA2_OCC);
#undef IA2_OCC
    g->ia2_fgrid = (unsigned)(g->sms * (nf > 0 ? nf : 1));
    g->ia2_bgrid = (unsigned)(g->sms * (nb > 0 ? nb : 1));
    return RAP_OK;
}

template <int FMAX, int LANES> static rap_status ia2_forward(rap_gpu *g, int64_t rows)
{
    const unsigned blocks = rap_gpu_blocks(rows, IA2_WARPS * (32 / LANES), (int)g->ia2_fgrid);
#define IA2_FWD(TA, TZ, TE)                                                              \
    interact_fwd2_kernel<FMAX, LANES, TA, TZ><<<blocks, 32 * IA2_WARPS, 0, g->stream>>>(  \
        (const TZ *)g->z, rows, g->F, g->D, (TA *)g->tin, g->ld_in, g->top_in)
    IA_TYPES(g, IA2_FWD);
#undef IA2_FWD
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

template <int FMAX, int LANES> static rap_status ia2_backward(rap_gpu *g, int64_t rows)
{
    const unsigned blocks = rap_gpu_blocks(rows, IA2_WARPS * (32 / LANES), (int)g->ia2_bgrid);
    void *dxb = g->bot[g->n_bot - 1].da;
#define IA2_BWD(TA, TZ, TE)                                                              \
    interact_bwd2_kernel<FMAX, LANES, TA, TZ, TE><<<blocks, 32 * IA2_WARPS, 0, g->stream>>>( \
        (const TZ *)g->z, (const TA *)g->dtin, g->ld_in, rows, g->F, g->D, (TA *)dxb,     \
        (TE *)g->de)
    IA_TYPES(g, IA2_BWD);
#undef IA2_BWD
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* The v2 instance for (ia_fmax, ia_lanes): op 0 occupancy, 1 forward,
 * 2 backward. */
rap_status ia2_call(rap_gpu *g, int op, int64_t rows)
{
#define IA2_CASE(FM, LN)                                                                 \
    case FM * 100 + LN:                                                                  \
        return op == 0 ? ia2_occupancy<FM, LN>(g)                                        \
                       : op == 1 ? ia2_forward<FM, LN>(g, rows) : ia2_backward<FM, LN>(g, rows);
    switch (g->ia_fmax * 100 + g->ia_lanes) {
        IA2_CASE(8, 32)
        IA2_CASE(16, 32)
        IA2_CASE(32, 32)
        IA2_CASE(8, 16)
        IA2_CASE(16, 16)
        IA2_CASE(32, 16)
    default:
        return rap_fail(RAP_ERR_INTERNAL, "GPU model: no v2 interaction for F=%d, D=%d", g->F,
                        g->D);
    }
#undef IA2_CASE
}

/* ---------------------------------------------------- v3 launchers */

/* Blocks of 128 threads an SM that v3's register cap (__launch_bounds__)
 * is set for where the row's vectors fill most registers: 3 (168 each) at
 * 32 lanes a row; 2 at 16 (twice the pair gradients a lane; two rows'
 * copies a warp bound it to 2 blocks anyway). */
static __host__ __device__ constexpr int ia3_minb(int fmax, int lanes)
{
    return fmax < 28 ? 1 : lanes == 32 ? 3 : 2;
}

/* v3 instance (FMAX, LANES): the dynamic shared memory limits and blocks
 * per SM into g (ia3_fsmem, ia3_bsmem, ia2_fgrid, ia2_bgrid); *fits false
 * when a block would need more shared memory than the GPU gives one. */
template <int FMAX, int LANES, typename TA, typename TZ, typename TE>
static rap_status ia3_prepare_t(rap_gpu *g, bool *fits)
{
    constexpr int MB = ia3_minb(FMAX, LANES);
    const size_t fs = ia3_smem(1, g->F, g->D, FMAX, LANES, sizeof(TZ)),
                 bs = ia3_smem(2, g->F, g->D, FMAX, LANES, sizeof(TZ));
    *fits = fs <= g->smem_optin && bs <= g->smem_optin;
    if (!*fits)
        return RAP_OK;
    /* the device's limit, not this model's need: another model with a
     * smaller F may share the instance and set it after this one */
    const int most = (int)g->smem_optin;
    RAP_CUDA_TRY(cudaFuncSetAttribute(interact_fwd3_kernel<FMAX, LANES, MB, TA, TZ>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    RAP_CUDA_TRY(cudaFuncSetAttribute(interact_bwd3_kernel<FMAX, LANES, MB, TA, TZ, TE>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    int nf = 0, nb = 0;
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &nf, interact_fwd3_kernel<FMAX, LANES, MB, TA, TZ>, 32 * IA2_WARPS, fs));
    RAP_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &nb, interact_bwd3_kernel<FMAX, LANES, MB, TA, TZ, TE>, 32 * IA2_WARPS, bs));
    g->ia3_fsmem = fs;
    g->ia3_bsmem = bs;
    g->ia2_fgrid = (unsigned)(g->sms * (nf > 0 ? nf : 1));
    g->ia2_bgrid = (unsigned)(g->sms * (nb > 0 ? nb : 1));
    return RAP_OK;
}

template <int FMAX, int LANES> static rap_status ia3_prepare(rap_gpu *g, bool *fits)
{
#define IA3_PREP(TA, TZ, TE) return ia3_prepare_t<FMAX, LANES, TA, TZ, TE>(g, fits)
    IA_TYPES(g, IA3_PREP);
#undef IA3_PREP
}

template <int FMAX, int LANES> static rap_status ia3_forward(rap_gpu *g, int64_t rows)
{
    constexpr int MB = ia3_minb(FMAX, LANES);
    const unsigned blocks = rap_gpu_blocks(rows, IA2_WARPS * (32 / LANES), (int)g->ia2_fgrid);
#define IA3_FWD(TA, TZ, TE)                                                              \
    interact_fwd3_kernel<FMAX, LANES, MB, TA, TZ>                                        \
        <<<blocks, 32 * IA2_WARPS, g->ia3_fsmem, g->stream>>>(                           \
            (const TZ *)g->z, rows, g->F, g->D, (TA *)g->tin, g->ld_in, g->top_in)
    IA_TYPES(g, IA3_FWD);
#undef IA3_FWD
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

template <int FMAX, int LANES> static rap_status ia3_backward(rap_gpu *g, int64_t rows)
{
    constexpr int MB = ia3_minb(FMAX, LANES);
    const unsigned blocks = rap_gpu_blocks(rows, IA2_WARPS * (32 / LANES), (int)g->ia2_bgrid);
    void *dxb = g->bot[g->n_bot - 1].da;
#define IA3_BWD(TA, TZ, TE)                                                              \
    interact_bwd3_kernel<FMAX, LANES, MB, TA, TZ, TE>                                    \
        <<<blocks, 32 * IA2_WARPS, g->ia3_bsmem, g->stream>>>(                           \
            (const TZ *)g->z, (const TA *)g->dtin, g->ld_in, rows, g->F, g->D, (TA *)dxb, \
            (TE *)g->de)
    IA_TYPES(g, IA3_BWD);
#undef IA3_BWD
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* The v3 instance for (ia_fmax, ia_lanes): op 0 prepare (*fits), 1
 * forward, 2 backward. */
rap_status ia3_call(rap_gpu *g, int op, int64_t rows, bool *fits)
{
#define IA3_CASE(FM, LN)                                                                 \
    case FM * 100 + LN:                                                                  \
        return op == 0 ? ia3_prepare<FM, LN>(g, fits)                                    \
                       : op == 1 ? ia3_forward<FM, LN>(g, rows) : ia3_backward<FM, LN>(g, rows);
    switch (g->ia_fmax * 100 + g->ia_lanes) {
        IA3_CASE(8, 32)
        IA3_CASE(16, 32)
        IA3_CASE(28, 32)
        IA3_CASE(32, 32)
        IA3_CASE(8, 16)
        IA3_CASE(16, 16)
        IA3_CASE(28, 16)
        IA3_CASE(32, 16)
    default:
        return rap_fail(RAP_ERR_INTERNAL, "GPU model: no v3 interaction for F=%d, D=%d", g->F,
                        g->D);
    }
#undef IA3_CASE
}

#else
typedef int rap_interaction_v2_cu_empty;
#endif
