/*
 * embedding.cu -- embedding bags on the GPU.
 *
 * Forward: one launch for all tables (up to 256 per launch): a warp per 32
 * bags (row, t), whose lanes fetch the bags' offsets and first ids at once;
 * then a group of tpb lanes (D/4 rounded up to a power of two, at most 32)
 * per bag sums the rows, float4 loads when D % 4 == 0; the per-table (off, ids) pointers
 * travel in the kernel parameters (by value: a CUDA graph captures the
 * batch's pointers at capture time), the static per-table data (first
 * global row, R_t) in device arrays made at create.
 *
 * Backward (no dense gradient table, no host synchronisation):
 *   1. count_kernel: start[t] = slot of table t's first pair (prefix of the
 *      tables' id counts; only the device knows them);
 *   2. pairs_kernel: for every id of every bag, key = global row of (t, id),
 *      value = row*T + t (the bag's pooled-gradient row); slots past the
 *      batch's ids (or of a bad id) get the sentinel key, which sorts last;
 *   3. cub::DeviceRadixSort::SortPairs over the P slots, key_bits bits;
 *   4. update_a: a warp per chunk of 32 sorted pairs sums the gradient rows
 *      of each run of equal keys inside the chunk; a run wholly inside the
 *      chunk updates its table row (SGD / Adagrad) at once; the piece of a
 *      run that started in an earlier chunk is stored in head[c], the piece
 *      of one that goes on into the next chunk in tail[c]; the table rows
 *      of a group of pairs' whole runs are loaded with the group's
 *      gradient rows, before any of the group's updates (only this warp
 *      writes them), and for 16-bit tables their rounding draws, so the
 *      warp's updates wait for no load and no 64-bit mix each
 *      (emb_upd_group; groups of 4 pairs, 16-bit rows kept packed);
 *   5. update_b: a warp tests 4 chunks at once (a lane each); for each
 *      chunk where a split run starts it adds the tail and the heads of
 *      the following chunks (found by a warp-wide search) and updates the
 *      row: long runs (small, hot tables) cost ~len/32 loads, not len.
 * Deterministic: no atomics on floats.
 *
 * Table types (rap_emb_dtype, a template parameter): fp32, or bf16 / fp16
 * widened to fp32 on load (8-byte loads of 4 elements when D % 4 == 0).
 * The row update is emb_math.h's arithmetic, the same as the CPU
 * reference's; a 16-bit row is rounded back stochastically with the bits
 * of (seed, step, global table, global row, element) (half.h); the step is
 * a device counter that emb_count_kernel advances, so a CUDA graph replay
 * draws new bits each step. Row-wise Adagrad needs the sum of squares of
 * the whole row before its first element moves: a row of one block of
 * 32 * VEC columns reduces it across the warp in place; wider rows take a
 * first pass over the gradients for the sums (two passes, the gradient
 * read twice).
 *
 * Tables are the TE the model holds (all T, or a shard's local tables:
 * row_base / nrows / the pairs' values count them, not the interaction's
 * T). The forward takes a table subset [first, first+n) and an output
 * (pointer, type, row stride, slot): a shard pools its tables into emb_out
 * (fp32); an unsharded bf16 model into z in bf16 (zbf: the sums in fp32,
 * each rounded to nearest once). The backward takes the gradient's
 * (pointer, type, stride, slot); a bf16 gradient is widened exactly.
 */
#include "model/gpu/gpu_model.h"
#include "model/emb_math.h"

#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#include <cub/device/device_radix_sort.cuh>

#define EMB_THREADS 256
#define EMB_CAP_SMALL 32
#define EMB_CAP_LARGE 256

/* Per-launch table pointers, passed by value (<= 4 KB of parameters). */
template <int CAP> struct emb_chunk {
    const int64_t *off[CAP]; /* (rows+1) */
    const int64_t *ids[CAP];
    int first, n;            /* tables [first, first+n) */
};

/* ---------------------------------------------------------------- vectors */

template <int VEC> struct vecf {
    float v[VEC]; /* VEC 1, 4 or 8 (8: 16-bit tables' lookups only) */
};

template <int VEC> static __device__ __forceinline__ vecf<VEC> vload(const float *p)
{
    vecf<VEC> r;
    if (VEC == 4) {
        float4 q = *(const float4 *)p;
        r.v[0] = q.x;
        r.v[VEC > 1 ? 1 : 0] = q.y;
        r.v[VEC > 2 ? 2 : 0] = q.z;
        r.v[VEC > 3 ? 3 : 0] = q.w;
    } else {
        r.v[0] = *p;
    }
    return r;
}

template <int VEC> static __device__ __forceinline__ vecf<VEC> vldg(const float *p)
{
    vecf<VEC> r;
    if (VEC == 4) {
        float4 q = __ldg((const float4 *)p);
        r.v[0] = q.x;
        r.v[VEC > 1 ? 1 : 0] = q.y;
        r.v[VEC > 2 ? 2 : 0] = q.z;
        r.v[VEC > 3 ? 3 : 0] = q.w;
    } else {
        r.v[0] = __ldg(p);
    }
    return r;
}

template <int VEC> static __device__ __forceinline__ void vstore(float *p, const vecf<VEC> &a)
{
    if (VEC == 8) {
        *(float4 *)p = make_float4(a.v[0], a.v[VEC > 1 ? 1 : 0], a.v[VEC > 2 ? 2 : 0],
                                   a.v[VEC > 3 ? 3 : 0]);
        *(float4 *)(p + 4) = make_float4(a.v[VEC > 4 ? 4 : 0], a.v[VEC > 5 ? 5 : 0],
                                         a.v[VEC > 6 ? 6 : 0], a.v[VEC > 7 ? 7 : 0]);
    } else if (VEC == 4) {
        *(float4 *)p = make_float4(a.v[0], a.v[VEC > 1 ? 1 : 0], a.v[VEC > 2 ? 2 : 0],
                                   a.v[VEC > 3 ? 3 : 0]);
    } else {
        *p = a.v[0];
    }
}

/* A 16-bit table element widened (exactly) to fp32. */
template <int DT> static __device__ __forceinline__ float widen(uint16_t h)
{
    return DT == RAP_EMB_FP16 ? rap_fp16_to_f32(h) : rap_bf16_to_f32(h);
}

/* The first VEC (4 or 1) 16-bit elements packed in q, in order, widened. */
template <int VEC, int DT> static __device__ __forceinline__ vecf<VEC> widen_packed(uint2 q)
{
    vecf<VEC> x;
    const uint16_t b[4] = {(uint16_t)(q.x & 0xffffu), (uint16_t)(q.x >> 16),
                           (uint16_t)(q.y & 0xffffu), (uint16_t)(q.y >> 16)};
#pragma unroll
    for (int i = 0; i < VEC; i++)
        x.v[i] = widen<DT>(b[i]);
    return x;
}

/* VEC elements of a table of type DT from element e (read-only path for
 * the lookups when LDG, plain loads for the update). VEC 4: e % 4 == 0, so
 * 16-byte (fp32) or 8-byte (16-bit) aligned. */
template <int VEC, int DT, bool LDG>
static __device__ __forceinline__ vecf<VEC> wload(const void *W, int64_t e)
{
    if (DT == RAP_EMB_FP32)
        return LDG ? vldg<VEC>((const float *)W + e) : vload<VEC>((const float *)W + e);
    vecf<VEC> r;
    const uint16_t *h = (const uint16_t *)W + e;
    if (VEC == 8) { /* 16 bytes: e % 8 == 0 */
        const uint4 q = LDG ? __ldg((const uint4 *)h) : *(const uint4 *)h;
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            r.v[(2 * i) % VEC] = widen<DT>((uint16_t)(w[i] & 0xffffu));
            r.v[(2 * i + 1) % VEC] = widen<DT>((uint16_t)(w[i] >> 16));
        }
    } else if (VEC == 4) {
        r = widen_packed<VEC, DT>(LDG ? __ldg((const uint2 *)h) : *(const uint2 *)h);
    } else {
        r.v[0] = widen<DT>(LDG ? __ldg((const unsigned short *)h) : *h);
    }
    return r;
}

/* VEC elements of a table row as loaded, before widening: fp32 as
 * floats, 16-bit tables packed (VEC 4: one uint2, VEC 1: one uint32 of
 * which the low half), so that a group of rows loaded ahead holds half
 * the registers. wrow_widen gives wload's values, bit for bit. */
template <int VEC, int DT> struct wrow {
    vecf<VEC> f; /* fp32 */
    uint2 h;     /* 16-bit */
};

template <int VEC, int DT>
static __device__ __forceinline__ wrow<VEC, DT> wrow_load(const void *W, int64_t e)
{
    wrow<VEC, DT> r;
    if (DT == RAP_EMB_FP32) {
        r.f = vload<VEC>((const float *)W + e);
        r.h = make_uint2(0, 0);
    } else {
        const uint16_t *h = (const uint16_t *)W + e;
        r.h = VEC == 4 ? *(const uint2 *)h : make_uint2((uint32_t)*h, 0);
    }
    return r;
}

template <int VEC, int DT>
static __device__ __forceinline__ vecf<VEC> wrow_widen(const wrow<VEC, DT> &r)
{
    return DT == RAP_EMB_FP32 ? r.f : widen_packed<VEC, DT>(r.h);
}

template <int VEC, int DT> static __device__ __forceinline__ wrow<VEC, DT> wrow_zero(void)
{
    wrow<VEC, DT> r;
#pragma unroll
    for (int i = 0; i < VEC; i++)
        r.f.v[i] = 0.0f;
    r.h = make_uint2(0, 0);
    return r;
}

/* The draw of the rounding stream that a 16-bit lane of VEC 4 elements
 * at column col uses (col % 4 == 0: its 4 elements share one draw); 0
 * where none is used. */
template <int VEC, int DT>
static __device__ __forceinline__ uint64_t wdraw(uint64_t key, int col)
{
    return DT != RAP_EMB_FP32 && VEC == 4 ? rap_sr_draw(key, (uint32_t)col / 4u) : 0;
}

/* Stores VEC updated elements from element e (column col of its row) in
 * type DT: 16-bit stochastically rounded with bits (key, col + i); h4 is
 * wdraw(key, col). */
template <int VEC, int DT>
static __device__ __forceinline__ void wstore(void *W, int64_t e, const vecf<VEC> &x,
                                              uint64_t key, int col, uint64_t h4)
{
    if (DT == RAP_EMB_FP32) {
        vstore<VEC>((float *)W + e, x);
        return;
    }
    uint16_t b[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < VEC; i++) {
        const uint32_t r = VEC == 4 ? rap_sr_piece(h4, i) : rap_sr_bits(key, (uint32_t)(col + i));
        b[i] = DT == RAP_EMB_FP16 ? rap_f32_to_fp16_sr(x.v[i], r) : rap_f32_to_bf16_sr(x.v[i], r);
    }
    uint16_t *h = (uint16_t *)W + e;
    if (VEC == 4)
        *(uint2 *)h = make_uint2((uint32_t)b[0] | ((uint32_t)b[1] << 16),
                                 (uint32_t)b[2] | ((uint32_t)b[3] << 16));
    else
        *h = b[0];
}

template <int VEC> static __device__ __forceinline__ void vzero(vecf<VEC> &a)
{
#pragma unroll
    for (int i = 0; i < VEC; i++)
        a.v[i] = 0.0f;
}

template <int VEC>
static __device__ __forceinline__ void vadd(vecf<VEC> &a, const vecf<VEC> &b)
{
#pragma unroll
    for (int i = 0; i < VEC; i++)
        a.v[i] += b.v[i];
}

/* VEC pooled values stored from element e of out: fp32, or (OBF) bf16
 * rounded to nearest even (the conversion instruction: half.h's
 * rap_f32_to_bf16_rn for every finite value; 16-, 8- or 2-byte stores). */
template <int VEC, bool OBF>
static __device__ __forceinline__ void ostore(void *out, int64_t e, const vecf<VEC> &a)
{
    if (!OBF) {
        vstore<VEC>((float *)out + e, a);
        return;
    }
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < VEC; i++)
        w[i / 2] |= (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a.v[i])) << (16 * (i % 2));
    uint16_t *h = (uint16_t *)out + e;
    if (VEC == 8)
        *(uint4 *)h = make_uint4(w[0], w[1], w[2], w[3]);
    else if (VEC == 4)
        *(uint2 *)h = make_uint2(w[0], w[1]);
    else
        *h = (uint16_t)w[0];
}

/* VEC gradient values from element e of grad: fp32, or (GBF) bf16 widened
 * exactly (read-only path). */
template <int VEC, bool GBF>
static __device__ __forceinline__ vecf<VEC> gload(const void *grad, int64_t e)
{
    if (!GBF)
        return vldg<VEC>((const float *)grad + e);
    vecf<VEC> r;
    const uint16_t *h = (const uint16_t *)grad + e;
    if (VEC == 4) {
        const uint2 q = __ldg((const uint2 *)h);
        r.v[0] = __uint_as_float(q.x << 16);
        r.v[VEC > 1 ? 1 : 0] = __uint_as_float(q.x & 0xffff0000u);
        r.v[VEC > 2 ? 2 : 0] = __uint_as_float(q.y << 16);
        r.v[VEC > 3 ? 3 : 0] = __uint_as_float(q.y & 0xffff0000u);
    } else {
        r.v[0] = __uint_as_float((uint32_t)__ldg((const unsigned short *)h) << 16);
    }
    return r;
}

/* ---------------------------------------------------------------- forward */

/* out[row*out_ld + (slot0+t)*D + d] = sum over the bag's ids of
 * W[(row_base[t] + id)*D + d] (fp32 sums; stored bf16 when OBF). Bad ids
 * are skipped and flagged.
 * A warp takes 32 consecutive bags (row-major: row, then table): lane i
 * loads bag i's offsets and first id (one dependent chain per 32 bags,
 * coalesced), then groups of tpb lanes sum the bags (offsets and first row
 * through shuffles); ids past the first are read in the loop. */
template <int CAP, int VEC, int DT, bool OBF>
static __global__ void __launch_bounds__(EMB_THREADS)
    emb_fwd_kernel(emb_chunk<CAP> c, const int64_t *__restrict__ row_base,
                   const int64_t *__restrict__ nrows, const void *__restrict__ W, int D,
                   int64_t rows, void *__restrict__ out, int64_t out_ld, int slot0, int tpb,
                   unsigned *err)
{
    const int lane = threadIdx.x & 31;
    const int gpw = 32 / tpb, grp = lane / tpb, sub = lane % tpb;
    const int64_t nbags = rows * c.n;
    const int ncol = D / VEC;
    const int64_t wid = ((int64_t)blockIdx.x * EMB_THREADS + threadIdx.x) / 32;
    const int64_t nw = (int64_t)gridDim.x * (EMB_THREADS / 32);
    for (int64_t wb = wid * 32; wb < nbags; wb += nw * 32) {
        const int64_t bag = wb + lane;
        int64_t p0 = 0, p1 = 0, r0 = -1; /* r0: global row of the first id, -1 none/bad */
        if (bag < nbags) {
            const int64_t row = bag / c.n;
            const int tl = (int)(bag - row * c.n);
            const int64_t *off = c.off[tl];
            p0 = off[row];
            p1 = off[row + 1];
            if (p1 > p0) {
                const int t = c.first + tl;
                const int64_t id = c.ids[tl][p0];
                if (id >= 0 && id < nrows[t])
                    r0 = row_base[t] + id;
                else
                    atomicOr(err, RAP_GPU_ERR_ID);
            }
        }
        const int64_t left = nbags - wb;
        const int nb = left < 32 ? (int)left : 32;
        /* two bags per group per step: two independent row loads in flight */
        for (int j = 0; j < nb; j += 2 * gpw) { /* warp-uniform */
            int64_t q0[2], q1[2], qr[2];
            int src[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                src[u] = j + u * gpw + grp; /* >= 32 only past nb */
                q0[u] = __shfl_sync(0xffffffffu, p0, src[u] & 31);
                q1[u] = __shfl_sync(0xffffffffu, p1, src[u] & 31);
                qr[u] = __shfl_sync(0xffffffffu, r0, src[u] & 31);
            }
            int64_t o[2]; /* the bags' first output elements */
            int tq[2];
            bool live[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                live[u] = src[u] < nb;
                const int64_t bq = wb + (live[u] ? src[u] : 0);
                const int64_t row = bq / c.n;
                const int tl = (int)(bq - row * c.n);
                tq[u] = tl;
                o[u] = row * out_ld + (int64_t)(slot0 + c.first + tl) * D;
            }
            if (!live[0])
                continue;
            for (int cc = sub; cc < ncol; cc += tpb) {
                vecf<VEC> acc[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    if (live[u] && qr[u] >= 0)
                        acc[u] = wload<VEC, DT, true>(W, qr[u] * D + (int64_t)cc * VEC);
                    else
                        vzero(acc[u]);
                }
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    if (!live[u] || q1[u] - q0[u] <= 1)
                        continue;
                    const int t = c.first + tq[u];
                    const int64_t *ids = c.ids[tq[u]];
                    const int64_t base = row_base[t], R = nrows[t];
                    for (int64_t p = q0[u] + 1; p < q1[u]; p++) {
                        const int64_t id = ids[p];
                        if (id < 0 || id >= R) {
                            if (cc == sub)
                                atomicOr(err, RAP_GPU_ERR_ID);
                            continue;
                        }
                        vadd(acc[u],
                             wload<VEC, DT, true>(W, (base + id) * D + (int64_t)cc * VEC));
                    }
                }
#pragma unroll
                for (int u = 0; u < 2; u++)
                    if (live[u])
                        ostore<VEC, OBF>(out, o[u] + (int64_t)cc * VEC, acc[u]);
            }
        }
    }
}

template <int CAP>
static void fill_chunk(emb_chunk<CAP> *c, const rap_model_batch *b, int first, int n)
{
    memset(c, 0, sizeof *c);
    c->first = first;
    c->n = n;
    for (int i = 0; i < n; i++) {
        c->off[i] = b->off[first + i];
        c->ids[i] = b->ids[first + i];
    }
}

static int threads_per_bag(int ncol)
{
    int t = 1;
    while (t < ncol && t < 32)
        t *= 2;
    return t;
}

/* Where the pooled sums go: out (elements, row stride ld, first slot),
 * bf16 when obf. */
typedef struct {
    void *out;
    bool obf;
    int64_t ld;
    int slot0;
} emb_dst;

template <int CAP, int VEC, int DT>
static void emb_forward_launch(rap_gpu *g, const emb_chunk<CAP> &c, int64_t rows,
                               const emb_dst &o, int tpb, unsigned blocks)
{
    if (o.obf)
        emb_fwd_kernel<CAP, VEC, DT, true><<<blocks, EMB_THREADS, 0, g->stream>>>(
            c, g->row_base, g->nrows, g->tab, g->D, rows, o.out, o.ld, o.slot0, tpb, g->err);
    else
        emb_fwd_kernel<CAP, VEC, DT, false><<<blocks, EMB_THREADS, 0, g->stream>>>(
            c, g->row_base, g->nrows, g->tab, g->D, rows, o.out, o.ld, o.slot0, tpb, g->err);
}

template <int CAP, int VEC>
static void emb_forward_dt(rap_gpu *g, const emb_chunk<CAP> &c, int64_t rows, const emb_dst &o,
                           int tpb, unsigned blocks)
{
    if (g->dt == RAP_EMB_BF16)
        emb_forward_launch<CAP, VEC, RAP_EMB_BF16>(g, c, rows, o, tpb, blocks);
    else if (g->dt == RAP_EMB_FP16)
        emb_forward_launch<CAP, VEC, RAP_EMB_FP16>(g, c, rows, o, tpb, blocks);
    else
        emb_forward_launch<CAP, VEC, RAP_EMB_FP32>(g, c, rows, o, tpb, blocks);
}

/* RAP_GPU_EMB_FWD=v4: 16-bit tables' lookups with 8-byte loads of 4
 * elements, as fp32's (the A/B of the 16-byte loads). */
static bool emb_fwd_v4(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("RAP_GPU_EMB_FWD");
        v = e && strcmp(e, "v4") == 0;
    }
    return v == 1;
}

/* How update_a loads ahead, for every table type: the pairs of a group
 * whose whole rows (16-bit tables their rounding draws too, the rows kept
 * packed) it loads before their updates. By default groups of 4 with
 * registers for three blocks a multiprocessor (g4b3: 80 registers, 24
 * warps): on the H200 update_a at 65536 rows took 340 against 398 us (fp32
 * tables, groups of 8 at 128 registers) and 359 against 439 us (bf16,
 * groups of 4 at 90) (bench/RESULTS.md, 2026-12-03, 8c00886): the update
 * waits on its loads, and more warps keep more of them in flight than
 * longer groups. RAP_GPU_EMB_UPD for the A/B, every table type: chain
 * (each row loaded when its update comes), g4 (as ptxas chooses), g8,
 * g4b3. */
enum { EMB_UPD_CHAIN = 0, EMB_UPD_G4 = 1, EMB_UPD_G8 = 2, EMB_UPD_G4B3 = 3 };
static int emb_upd_group(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("RAP_GPU_EMB_UPD");
        v = EMB_UPD_G4B3;
        if (e && strcmp(e, "chain") == 0)
            v = EMB_UPD_CHAIN;
        else if (e && strcmp(e, "g4") == 0)
            v = EMB_UPD_G4;
        else if (e && strcmp(e, "g8") == 0)
            v = EMB_UPD_G8;
    }
    return v;
}

template <int CAP>
static rap_status emb_forward_chunk(rap_gpu *g, const rap_model_batch *b, int first, int n,
                                    const emb_dst &o)
{
    emb_chunk<CAP> c;
    fill_chunk(&c, b, first, n);
    /* 16-byte loads: 4 fp32 or 8 16-bit elements a lane (fewer lanes a bag,
     * more bags in flight) */
    const bool v8 = g->dt != RAP_EMB_FP32 && g->D % 8 == 0 && !emb_fwd_v4();
    const bool v4 = rap_emb_vec(g->D) == 4;
    const int tpb = threads_per_bag(v8 ? g->D / 8 : v4 ? g->D / 4 : g->D);
    const int64_t bags = b->rows * n; /* a warp per 32 bags */
    const unsigned blocks = rap_gpu_blocks((bags + 31) / 32, EMB_THREADS / 32, g->sms * 16);
    if (v8 && g->dt == RAP_EMB_BF16)
        emb_forward_launch<CAP, 8, RAP_EMB_BF16>(g, c, b->rows, o, tpb, blocks);
    else if (v8)
        emb_forward_launch<CAP, 8, RAP_EMB_FP16>(g, c, b->rows, o, tpb, blocks);
    else if (v4)
        emb_forward_dt<CAP, 4>(g, c, b->rows, o, tpb, blocks);
    else
        emb_forward_dt<CAP, 1>(g, c, b->rows, o, tpb, blocks);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

static rap_status check_tables(const rap_model_batch *b, int first, int n, const char *what)
{
    for (int t = first; t < first + n; t++)
        if (!b->off[t] || !b->ids[t])
            return rap_fail(RAP_ERR_ARG, "%s: table %d has no offsets or ids", what, t);
    return RAP_OK;
}

rap_status rap_gpu_emb_forward(rap_gpu *g, const rap_model_batch *b, int first, int n,
                               void *out, bool out_bf16, int64_t out_ld, int slot0)
{
    const emb_dst o = {out, out_bf16, out_ld, slot0};
    if (first < 0 || n < 0 || first + n > g->TE)
        return rap_fail(RAP_ERR_ARG, "emb forward: tables [%d, %d) outside [0, %d)", first,
                        first + n, g->TE);
    RAP_TRY(check_tables(b, first, n, "emb forward"));
    for (int f = first; f < first + n; f += EMB_CAP_LARGE) {
        int k = first + n - f < EMB_CAP_LARGE ? first + n - f : EMB_CAP_LARGE;
        if (k <= EMB_CAP_SMALL)
            RAP_TRY(emb_forward_chunk<EMB_CAP_SMALL>(g, b, f, k, o));
        else
            RAP_TRY(emb_forward_chunk<EMB_CAP_LARGE>(g, b, f, k, o));
    }
    return RAP_OK;
}

/* --------------------------------------------------------------- backward */

/* start[first + i + 1] = start[first] + ids of tables first..first+i;
 * start[0] = 0; the first chunk's launch also counts the update in *step
 * (the rounding key of this backward). One block of CAP threads. */
template <int CAP>
static __global__ void emb_count_kernel(emb_chunk<CAP> c, int64_t rows, int64_t *start,
                                        uint64_t *step)
{
    __shared__ int64_t cnt[CAP];
    const int i = threadIdx.x;
    if (i == 0 && c.first == 0)
        *step += 1;
    if (i < c.n)
        cnt[i] = c.off[i][rows] - c.off[i][0];
    __syncthreads();
    if (i == 0) {
        int64_t s = c.first == 0 ? 0 : start[c.first];
        if (c.first == 0)
            start[0] = 0;
        for (int k = 0; k < c.n; k++) {
            s += cnt[k] > 0 ? cnt[k] : 0;
            start[c.first + k + 1] = s;
        }
    }
}

/* Pairs of tables [first, first+n): bag (tc, row) in table-major order so
 * that a warp writes consecutive slots. fill_tail: also writes the
 * sentinel into slots [start[T], P). */
template <int CAP>
static __global__ void __launch_bounds__(EMB_THREADS)
    emb_pairs_kernel(emb_chunk<CAP> c, const int64_t *__restrict__ row_base,
                     const int64_t *__restrict__ nrows, const int64_t *__restrict__ start,
                     int64_t rows, int T, uint32_t *__restrict__ keys,
                     uint32_t *__restrict__ vals, int64_t P, uint32_t sentinel, int fill_tail,
                     unsigned *err)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nbags = rows * c.n;
    for (int64_t bag = i0; bag < nbags; bag += stride) {
        const int tc = (int)(bag / rows);
        const int64_t row = bag - (int64_t)tc * rows;
        const int t = c.first + tc;
        const int64_t *off = c.off[tc];
        const int64_t *ids = c.ids[tc];
        const int64_t o0 = off[0], p0 = off[row], p1 = off[row + 1];
        const int64_t s0 = start[t], base = row_base[t], R = nrows[t];
        const uint32_t v = (uint32_t)(row * T + t);
        for (int64_t p = p0; p < p1; p++) {
            const int64_t slot = s0 + (p - o0);
            if (slot >= P) {
                atomicOr(err, RAP_GPU_ERR_OVERFLOW);
                break;
            }
            const int64_t id = ids[p];
            const bool ok = id >= 0 && id < R;
            if (!ok)
                atomicOr(err, RAP_GPU_ERR_ID);
            keys[slot] = ok ? (uint32_t)(base + id) : sentinel;
            vals[slot] = v;
        }
    }
    if (fill_tail) {
        const int64_t total = start[T];
        for (int64_t s = (total > 0 ? total : 0) + i0; s < P; s += stride) {
            keys[s] = sentinel;
            vals[s] = 0;
        }
    }
}

typedef struct {
    const uint32_t *keys, *vals; /* (P) sorted */
    int64_t P;
    uint32_t sentinel;
    const void *grad;  /* pooled gradient (fp32, or bf16: the kernel's GBF): bag v at
                        * element (v/T)*ld + (slot0 + v%T)*D */
    int64_t grad_ld;
    int slot0, T, D;
    void *W;           /* table rows of the model's type: global row r at element r*D */
    float *S;          /* state: Adagrad (rows, D), row-wise (rows), SGD NULL */
    int opt;           /* rap_optimizer */
    float lr, eps;
    uint64_t seed;     /* stochastic rounding (16-bit tables): model seed, */
    const uint64_t *step;     /* (1) this update's step (emb_count_kernel's count), */
    const int32_t *gtable;    /* (T) global table of table t, */
    const int64_t *grow_off;  /* (T) global row = key + grow_off[t] */
    float *head, *tail; /* (C, D) */
    int64_t nchunks;
} upd_args;

/* The first element of bag v's gradient row in a.grad. */
static __device__ __forceinline__ int64_t grad_row(const upd_args &a, uint32_t v)
{
    const int64_t row = v / (uint32_t)a.T;
    const int t = (int)(v - (uint32_t)(row * a.T));
    return row * a.grad_ld + (int64_t)(a.slot0 + t) * a.D;
}

/* The stream key of the row with sorted key kj, one of whose pairs has
 * value v (v % T is its table). */
static __device__ __forceinline__ uint64_t row_key(const upd_args &a, uint64_t step_key,
                                                   uint32_t kj, uint32_t v)
{
    const int t = (int)(v % (uint32_t)a.T);
    return rap_sr_row_key(step_key, (uint32_t)a.gtable[t], (uint64_t)((int64_t)kj + a.grow_off[t]));
}

/* One block of a row's summed gradient (this lane's VEC columns; active:
 * inside the row): the sum of the squares over the block, every lane the
 * same bits (emb_math.h's order). All 32 lanes call it. */
template <int VEC>
static __device__ __forceinline__ float block_sumsq(const vecf<VEC> &g, bool active)
{
    float p = 0.0f;
    if (active) {
#pragma unroll
        for (int i = 0; i < VEC; i++)
            p = RAP_FADD(p, RAP_FMUL(g.v[i], g.v[i]));
    }
#pragma unroll
    for (int o = 16; o >= 1; o /= 2)
        p = RAP_FADD(p, __shfl_xor_sync(0xffffffffu, p, o));
    return p;
}

/* Row-wise Adagrad: the row's new state from its sum of squares ss (lane 0
 * reads and writes it; every lane computes the same) and the multiplier of
 * its elements. All 32 lanes call it. */
static __device__ __forceinline__ float row_mult(const upd_args &a, uint32_t kj, float ss,
                                                 int lane)
{
    float s = lane == 0 ? a.S[kj] : 0.0f;
    s = __shfl_sync(0xffffffffu, s, 0);
    const float m = rap_emb_rowwise_mult(&s, ss, a.D, a.lr, a.eps);
    if (lane == 0)
        a.S[kj] = s;
    return m;
}

/* row_mult with the state already loaded: lane j holds s_pre = S[kj]
 * (loaded at the chunk's start, no load in the chain of the update). */
static __device__ __forceinline__ float row_mult_pre(const upd_args &a, uint32_t kj, float ss,
                                                     float s_pre, int j, int lane)
{
    float s = __shfl_sync(0xffffffffu, s_pre, j);
    const float m = rap_emb_rowwise_mult(&s, ss, a.D, a.lr, a.eps);
    if (lane == 0)
        a.S[kj] = s;
    return m;
}

/* The optimizer on one piece of the row with key kj whose values x were
 * loaded already: columns col .. col + VEC - 1 get gradient g (mult: the
 * row-wise multiplier; key: the row's rounding stream, h4 its draw for
 * these columns, wdraw). */
template <int VEC, int DT>
static __device__ __forceinline__ void apply_loaded(const upd_args &a, uint32_t kj, int col,
                                                    const vecf<VEC> &g, float mult, uint64_t key,
                                                    vecf<VEC> x, uint64_t h4)
{
    const int64_t e = (int64_t)kj * a.D + col;
    if (a.opt == RAP_SGD) {
#pragma unroll
        for (int i = 0; i < VEC; i++)
            x.v[i] = rap_emb_sgd(x.v[i], g.v[i], a.lr);
    } else if (a.opt == RAP_ADAGRAD) {
        vecf<VEC> st = vload<VEC>(a.S + e);
#pragma unroll
        for (int i = 0; i < VEC; i++)
            x.v[i] = rap_emb_adagrad(x.v[i], g.v[i], &st.v[i], a.lr, a.eps);
        vstore(a.S + e, st);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++)
            x.v[i] = rap_emb_rowwise(x.v[i], g.v[i], mult);
    }
    wstore<VEC, DT>(a.W, e, x, key, col, h4);
}

/* apply_loaded with the row's values loaded here. */
template <int VEC, int DT>
static __device__ __forceinline__ void apply_row(const upd_args &a, uint32_t kj, int col,
                                                 const vecf<VEC> &g, float mult, uint64_t key)
{
    apply_loaded<VEC, DT>(a, kj, col, g, mult, key,
                          wload<VEC, DT, false>(a.W, (int64_t)kj * a.D + col),
                          wdraw<VEC, DT>(key, col));
}

/* Step 4: a warp per chunk of 32 sorted pairs (grid-stride over chunks).
 * Row-wise Adagrad with rows of several blocks: pass 0 only sums the
 * squares of every whole run (lane j keeps the run ending at pair j), pass
 * 1 updates (lane j keeps the run's multiplier after its first block). */
/* PG: the group loaded ahead (0: none, the chain); MINB: the blocks a
 * multiprocessor the registers must allow (0: as ptxas chooses). */
template <int VEC, int DT, bool GBF, int PG, int MINB>
static __global__ void __launch_bounds__(EMB_THREADS, MINB) emb_update_a_kernel(upd_args a)
{
    constexpr bool PRE = PG > 0;
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (EMB_THREADS / 32);
    const int CB = 32 * VEC; /* columns per pass */
    /* pairs a group: PG where the group's rows (16-bit tables packed,
     * wrow, and their draws) are loaded ahead (emb_upd_group) */
    constexpr int G = PRE ? PG : 8;
    const bool rw = a.opt == RAP_ROWWISE_ADAGRAD;
    const int passes = rw && a.D > CB ? 2 : 1;
    const uint64_t skey = DT != RAP_EMB_FP32 ? rap_sr_step_key(a.seed, *a.step) : 0;
    for (int64_t c = (int64_t)blockIdx.x * (EMB_THREADS / 32) + threadIdx.x / 32;
         c < a.nchunks; c += warps) {
        const int64_t base = c * RAP_GPU_CHUNK;
        const int64_t pos = base + lane;
        const uint32_t k = pos < a.P ? a.keys[pos] : a.sentinel;
        const uint32_t v = pos < a.P ? a.vals[pos] : 0u;
        const uint32_t kp = base > 0 ? a.keys[base - 1] : a.sentinel;
        const uint32_t kn = base + 32 < a.P ? a.keys[base + 32] : a.sentinel;
        uint32_t kprev = __shfl_up_sync(0xffffffffu, k, 1);
        uint32_t knext = __shfl_down_sync(0xffffffffu, k, 1);
        if (lane == 0)
            kprev = kp;
        if (lane == 31)
            knext = kn;
        const bool valid = k != a.sentinel;
        const unsigned start_mask = __ballot_sync(0xffffffffu, valid && k != kprev);
        const unsigned end_mask = __ballot_sync(0xffffffffu, valid && k != knext);
        const int n = __popc(__ballot_sync(0xffffffffu, valid)); /* valid keys are a prefix */
        if (n == 0)
            continue;
        /* Row-wise Adagrad: lane j loads the state of the run that ends at
         * pair j when the run also starts in this chunk (only this warp
         * updates that row), so the update's chain has no load of it. */
        int rs = lane; /* the first pair of lane's run within the chunk */
        {
            const unsigned below = start_mask & (lane == 31 ? 0xffffffffu : ((2u << lane) - 1u));
            rs = below ? 31 - __clz(below) : -1;
        }
        const bool whole = valid && ((end_mask >> lane) & 1u) && rs >= 0 &&
                           ((start_mask >> rs) & 1u);
        const unsigned whole_mask = __ballot_sync(0xffffffffu, whole);
        const float s_pre = rw && whole ? a.S[k] : 0.0f;
        /* 16-bit tables: lane j makes the rounding stream's key of the run
         * ending at pair j here, all 32 at once, instead of the warp making
         * each in the chain of its row updates (a modulo, two loads and a
         * 64-bit mix a row: the 16-bit update ran 1.3x as long as fp32's) */
        const uint64_t key_pre = DT != RAP_EMB_FP32 && valid ? row_key(a, skey, k, v) : 0;
        float ss_run = 0.0f, mult_run = 0.0f; /* two passes: lane j's run */
        for (int pass = 0; pass < passes; pass++) {
            const bool squares = pass + 1 < passes;
            for (int cb = 0; cb < a.D; cb += CB) {
                const int col = cb + lane * VEC;
                const bool active = col < a.D;
                vecf<VEC> acc;
                vzero(acc);
                int pf = 0; /* first j of the current piece */
                for (int j0 = 0; j0 < n; j0 += G) {
                    /* the group's gradient rows, and the table rows of the
                     * runs that end in it wholly inside the chunk (this warp
                     * alone writes those rows), loaded together: the updates
                     * below then wait for no load (loaded one by one, each
                     * row's load would wait for the row before's store) */
                    vecf<VEC> gr[G];
                    wrow<VEC, DT> xw[G];
                    uint64_t hw[G]; /* 16-bit: the rounding draws of those rows */
#pragma unroll
                    for (int u = 0; u < G; u++) {
                        const int j = j0 + u;
                        const uint32_t vj = __shfl_sync(0xffffffffu, v, j & 31);
                        const uint32_t kw = __shfl_sync(0xffffffffu, k, j & 31);
                        const uint64_t keyw = PRE && DT != RAP_EMB_FP32
                                                  ? __shfl_sync(0xffffffffu, key_pre, j & 31)
                                                  : 0;
                        if (active && j < n)
                            gr[u] = gload<VEC, GBF>(a.grad, grad_row(a, vj) + col);
                        else
                            vzero(gr[u]);
                        hw[u] = 0;
                        if (PRE && !squares && active && j < n &&
                            ((whole_mask >> (j & 31)) & 1u)) {
                            xw[u] = wrow_load<VEC, DT>(a.W, (int64_t)kw * a.D + col);
                            hw[u] = wdraw<VEC, DT>(keyw, col);
                        } else {
                            xw[u] = wrow_zero<VEC, DT>();
                        }
                    }
#pragma unroll
                    for (int u = 0; u < G; u++) {
                        const int j = j0 + u;
                        if (j >= n)
                            break;
                        vadd(acc, gr[u]);
                        const bool ended = (end_mask >> j) & 1u;
                        if (!ended && j != n - 1)
                            continue;
                        /* the piece [pf, j] ends here (warp-uniform) */
                        const bool started = (start_mask >> pf) & 1u;
                        const uint32_t kj = __shfl_sync(0xffffffffu, k, j);
                        if (started && ended && squares) {
                            const float sq = block_sumsq<VEC>(acc, active);
                            if (lane == j)
                                ss_run = RAP_FADD(ss_run, sq);
                        } else if (started && ended) {
                            float mult = 0.0f;
                            if (rw && passes == 1) {
                                mult = row_mult_pre(a, kj, block_sumsq<VEC>(acc, active), s_pre,
                                                    j, lane);
                            } else if (rw && cb == 0) {
                                mult = row_mult_pre(a, kj, __shfl_sync(0xffffffffu, ss_run, j),
                                                    s_pre, j, lane);
                                if (lane == j)
                                    mult_run = mult;
                            } else if (rw) {
                                mult = __shfl_sync(0xffffffffu, mult_run, j);
                            }
                            const uint64_t key =
                                DT != RAP_EMB_FP32 ? __shfl_sync(0xffffffffu, key_pre, j) : 0;
                            if (active && PRE)
                                apply_loaded<VEC, DT>(a, kj, col, acc, mult, key,
                                                      wrow_widen<VEC, DT>(xw[u]), hw[u]);
                            else if (active)
                                apply_row<VEC, DT>(a, kj, col, acc, mult, key);
                        } else if (!squares && active) {
                            if (!started)
                                vstore(a.head + c * a.D + col, acc);
                            else
                                vstore(a.tail + c * a.D + col, acc);
                        }
                        vzero(acc);
                        pf = j + 1;
                    }
                }
            }
        }
    }
}

/* The summed gradient of a split run at columns col.. (active lanes): the
 * tail of chunk c, then the heads of the m chunks after it, in order. */
template <int VEC>
static __device__ __forceinline__ vecf<VEC> run_sum(const upd_args &a, int64_t c, int64_t m,
                                                    int col)
{
    vecf<VEC> acc = vload<VEC>(a.tail + c * a.D + col);
    int64_t q = 1;
    for (; q + 8 <= m + 1; q += 8) {
        vecf<VEC> h[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            h[u] = vload<VEC>(a.head + (c + q + u) * a.D + col);
#pragma unroll
        for (int u = 0; u < 8; u++)
            vadd(acc, h[u]);
    }
    for (; q <= m; q++)
        vadd(acc, vload<VEC>(a.head + (c + q) * a.D + col));
    return acc;
}

/* Step 5: the warp of chunk c finishes the run that starts in c and goes
 * on past its end. A warp takes UB_CHUNKS chunks: lanes test one each
 * (independent loads), then the warp finishes the marked ones in turn
 * (a few per warp: the finishing is a chain of dependent loads, so many
 * warps keep more of them in flight). Row-wise Adagrad: a first pass over
 * the row's blocks sums the squares. */
#define UB_CHUNKS 4
template <int VEC, int DT>
static __global__ void __launch_bounds__(EMB_THREADS) emb_update_b_kernel(upd_args a)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (EMB_THREADS / 32);
    const int CB = 32 * VEC;
    const uint64_t skey = DT != RAP_EMB_FP32 ? rap_sr_step_key(a.seed, *a.step) : 0;
    for (int64_t c0 = ((int64_t)blockIdx.x * (EMB_THREADS / 32) + threadIdx.x / 32) * UB_CHUNKS;
         c0 < a.nchunks; c0 += warps * UB_CHUNKS) {
        const int64_t cl = c0 + lane;
        bool need = false;
        uint32_t kmine = 0, vmine = 0;
        if (lane < UB_CHUNKS && cl < a.nchunks) {
            const int64_t base = cl * RAP_GPU_CHUNK;
            if (base + 32 < a.P) {
                kmine = a.keys[base + 31];
                vmine = a.vals[base + 31];
                if (kmine != a.sentinel && a.keys[base + 32] == kmine)
                    /* the run started inside this chunk (not in an earlier one) */
                    need = !(a.keys[base] == kmine && base > 0 && a.keys[base - 1] == kmine);
            }
        }
        /* 16-bit tables: each split run's rounding key made by its lane,
         * all at once (as in update_a) */
        const uint64_t key_mine = DT != RAP_EMB_FP32 && need ? row_key(a, skey, kmine, vmine) : 0;
        unsigned todo = __ballot_sync(0xffffffffu, need);
        while (todo) {
            const int src = __ffs(todo) - 1;
            todo &= todo - 1;
            const int64_t c = c0 + src;
            const uint32_t kl = __shfl_sync(0xffffffffu, kmine, src);
            /* m = number of following chunks whose first key continues the run */
            int64_t m = 0;
            for (;;) {
                const int64_t q = c + 1 + m + lane;
                const bool cont = q < a.nchunks && a.keys[q * RAP_GPU_CHUNK] == kl;
                const unsigned mask = __ballot_sync(0xffffffffu, cont);
                const int cnt = __popc(mask); /* a prefix: keys are sorted */
                m += cnt;
                if (cnt < 32)
                    break;
            }
            float mult = 0.0f;
            if (a.opt == RAP_ROWWISE_ADAGRAD) {
                float ss = 0.0f;
                for (int cb = 0; cb < a.D; cb += CB) {
                    const int col = cb + lane * VEC;
                    const bool active = col < a.D;
                    vecf<VEC> acc;
                    if (active)
                        acc = run_sum<VEC>(a, c, m, col);
                    else
                        vzero(acc);
                    ss = RAP_FADD(ss, block_sumsq<VEC>(acc, active));
                }
                mult = row_mult(a, kl, ss, lane);
            }
            const uint64_t key = DT != RAP_EMB_FP32 ? __shfl_sync(0xffffffffu, key_mine, src) : 0;
            for (int cb = 0; cb < a.D; cb += CB) {
                const int col = cb + lane * VEC;
                if (col >= a.D)
                    continue;
                apply_row<VEC, DT>(a, kl, col, run_sum<VEC>(a, c, m, col), mult, key);
            }
        }
    }
}

rap_status rap_gpu_emb_sort_bytes(int64_t P, int bits, size_t *bytes)
{
    *bytes = 0;
    if (P > INT32_MAX)
        return rap_fail(RAP_ERR_ARG, "emb backward: %lld pairs, at most %d", (long long)P,
                        INT32_MAX);
    RAP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, *bytes, (const uint32_t *)NULL,
                                                 (uint32_t *)NULL, (const uint32_t *)NULL,
                                                 (uint32_t *)NULL, (int)P, 0, bits));
    return RAP_OK;
}

template <int CAP>
static rap_status emb_pairs_chunk(rap_gpu *g, const rap_model_batch *b, int first, int n,
                                  bool last)
{
    emb_chunk<CAP> c;
    fill_chunk(&c, b, first, n);
    emb_count_kernel<CAP><<<1, CAP, 0, g->stream>>>(c, b->rows, g->start, g->emb_step);
    RAP_CUDA_LAUNCHED();
    const int64_t work = b->rows * n > g->P ? b->rows * n : g->P;
    emb_pairs_kernel<CAP><<<rap_gpu_blocks(work, EMB_THREADS, g->sms * 16), EMB_THREADS, 0,
                            g->stream>>>(c, g->row_base, g->nrows, g->start, b->rows, g->TE,
                                         g->keys[0], g->vals[0], g->P, g->sentinel,
                                         last ? 1 : 0, g->err);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

/* pre: emb_upd_group's variant. */
template <int VEC, int DT, bool GBF>
static void update_a_launch(rap_gpu *g, const upd_args &a, int pre, unsigned blocks)
{
    cudaStream_t st = g->stream;
    const unsigned nt = EMB_THREADS;
    if (pre == EMB_UPD_CHAIN)
        emb_update_a_kernel<VEC, DT, GBF, 0, 0><<<blocks, nt, 0, st>>>(a);
    else if (pre == EMB_UPD_G4)
        emb_update_a_kernel<VEC, DT, GBF, 4, 0><<<blocks, nt, 0, st>>>(a);
    else if (pre == EMB_UPD_G4B3)
        emb_update_a_kernel<VEC, DT, GBF, 4, 3><<<blocks, nt, 0, st>>>(a);
    else
        emb_update_a_kernel<VEC, DT, GBF, 8, 0><<<blocks, nt, 0, st>>>(a);
}

/* pre: how update_a loads ahead (emb_upd_group). */
template <int VEC, int DT>
static rap_status update_launch(rap_gpu *g, const upd_args &a, bool gbf, int pre,
                                unsigned blocks, unsigned blocks_b)
{
    if (gbf)
        update_a_launch<VEC, DT, true>(g, a, pre, blocks);
    else
        update_a_launch<VEC, DT, false>(g, a, pre, blocks);
    RAP_CUDA_LAUNCHED();
    emb_update_b_kernel<VEC, DT><<<blocks_b, EMB_THREADS, 0, g->stream>>>(a);
    RAP_CUDA_LAUNCHED();
    return RAP_OK;
}

template <int VEC>
static rap_status update_dt(rap_gpu *g, const upd_args &a, bool gbf, int pre, unsigned blocks,
                            unsigned blocks_b)
{
    if (g->dt == RAP_EMB_BF16)
        return update_launch<VEC, RAP_EMB_BF16>(g, a, gbf, pre, blocks, blocks_b);
    if (g->dt == RAP_EMB_FP16)
        return update_launch<VEC, RAP_EMB_FP16>(g, a, gbf, pre, blocks, blocks_b);
    return update_launch<VEC, RAP_EMB_FP32>(g, a, gbf, pre, blocks, blocks_b);
}

rap_status rap_gpu_emb_backward(rap_gpu *g, const rap_model_batch *b, const void *grad,
                                bool grad_bf16, int64_t grad_ld, int slot0,
                                const rap_model_config *cfg)
{
    RAP_TRY(check_tables(b, 0, g->TE, "emb backward"));
    for (int f = 0; f < g->TE; f += EMB_CAP_LARGE) {
        int k = g->TE - f < EMB_CAP_LARGE ? g->TE - f : EMB_CAP_LARGE;
        bool last = f + k == g->TE;
        if (k <= EMB_CAP_SMALL)
            RAP_TRY(emb_pairs_chunk<EMB_CAP_SMALL>(g, b, f, k, last));
        else
            RAP_TRY(emb_pairs_chunk<EMB_CAP_LARGE>(g, b, f, k, last));
    }
    size_t tb = g->sort_bytes;
    RAP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(g->sort_tmp, tb, g->keys[0], g->keys[1],
                                                 g->vals[0], g->vals[1], (int)g->P, 0,
                                                 g->key_bits, g->stream));
    upd_args a;
    memset(&a, 0, sizeof a);
    a.keys = g->keys[1];
    a.vals = g->vals[1];
    a.P = g->P;
    a.sentinel = g->sentinel;
    a.grad = grad;
    a.grad_ld = grad_ld;
    a.slot0 = slot0;
    a.T = g->TE;
    a.D = g->D;
    a.W = g->tab;
    a.S = cfg->optimizer == RAP_SGD ? NULL : g->tab_state;
    a.opt = (int)cfg->optimizer;
    a.lr = cfg->lr;
    a.eps = cfg->adagrad_eps;
    a.seed = cfg->seed;
    a.step = g->emb_step;
    a.gtable = g->gtable;
    a.grow_off = g->grow_off;
    a.head = g->head;
    a.tail = g->tail;
    a.nchunks = g->nchunks;
    const unsigned blocks = rap_gpu_blocks(g->nchunks, EMB_THREADS / 32, g->sms * 32);
    /* update_b: a warp per UB_CHUNKS chunks */
    const unsigned blocks_b = rap_gpu_blocks((g->nchunks + UB_CHUNKS - 1) / UB_CHUNKS,
                                             EMB_THREADS / 32, g->sms * 32);
    const int pre = emb_upd_group();
    if (rap_emb_vec(g->D) == 4)
        RAP_TRY(update_dt<4>(g, a, grad_bf16, pre, blocks, blocks_b));
    else
        RAP_TRY(update_dt<1>(g, a, grad_bf16, pre, blocks, blocks_b));
    return RAP_OK;
}

#else /* no CUDA: nothing here; gpu_model.cu provides the stubs */
typedef int rap_embedding_cu_empty;
#endif
