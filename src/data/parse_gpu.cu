/* parse_gpu.cu -- the GPU parser (parse_gpu.h): the kernel, then its
 * launcher. The CPU reference of the same algorithm is parse_ref.c; the
 * per-line steps both run are parse_algo.h's. Without nvcc this file is
 * compiled as C: the kernel and CUDA calls sit behind __CUDACC__ and every
 * entry point says RAP_ERR_NO_GPU. */
#include "data/parse_gpu.h"

#include "core/core.h"
#include "data/parse_algo.h"

#include <stdlib.h>
#include <string.h>

/* The parser's device arrays for cfg (lay its layout): what create
 * allocates and rap_parse_gpu_bytes counts. */
typedef struct {
    size_t text, start, flags, agg, incl, rej, res; /* bytes of each */
    int64_t max_tiles;
    int nc; /* counters a tile: used rows, each sparse column's ids, each reason */
} pg_sizes;

static pg_sizes pg_sizes_of(const rap_parse_gpu_config *cfg, const rap_parse_layout *lay)
{
    pg_sizes z;
    z.nc = 1 + lay->n_sparse + RAP_REJ_COUNT;
    const size_t nc = (size_t)z.nc;
    z.max_tiles = (cfg->max_lines + RAP_PARSE_TILE - 1) / RAP_PARSE_TILE;
    z.text = (((size_t)cfg->max_bytes + 15) & ~(size_t)15) + 16;
    z.start = ((size_t)cfg->max_lines + 1) * 4;
    z.flags = (size_t)z.max_tiles * 4;
    z.agg = z.incl = (size_t)z.max_tiles * nc * 4;
    z.rej = (size_t)cfg->max_lines * sizeof(rap_parse_rej);
    z.res = RAP_PARSE_GPU_SLOTS * sizeof(rap_parse_result);
    return z;
}

#ifdef __CUDACC__
#include "core/cuda_util.h"
#include <cuda_runtime.h>

#define T RAP_PARSE_TILE
/* A block of nw warps (blockDim.x / 32: 8 by default, 16 or 32 with
 * RAP_PARSE_GPU_WARPS) takes a tile, each warp T / nw of its lines. Blocks
 * of up to 16 warps run parse_kernel<512, 2>, of 32 parse_kernel<1024, 1>:
 * both at 64 registers a thread. */
#define PG_WARPS_DEFAULT 8
#define PG_FULL 0xffffffffu
#define PG_AGG 1u    /* tile status: its own counters are published */
#define PG_PREFIX 2u /* tile status: its inclusive prefix is published */

/* The layout as the kernel reads it (device memory, copied to shared
 * memory by each block). 448 bytes. */
typedef struct {
    uint32_t desc[RAP_PARSE_MAX_FIELDS];  /* pg_desc of field f (0 past NF: skip) */
    uint8_t dfield[RAP_PARSE_MAX_FIELDS]; /* field of dense column j */
    uint8_t sfield[RAP_PARSE_MAX_FIELDS]; /* field of sparse column j */
    int8_t slist[RAP_PARSE_MAX_FIELDS];   /* sparse column j: its list index, -1 not a list */
} pg_tables;

/* Byte offsets of a block's shared arrays (T lines of the tile). */
typedef struct {
    uint32_t sparse;  /* int64 (NS, T) */
    uint32_t vmask;   /* uint64 (T) */
    uint32_t dense;   /* float (ND, T) */
    uint32_t label;   /* float (T) */
    uint32_t key;     /* uint32 (T) */
    uint32_t tabs;    /* int32 (T, NF) a line's tab positions */
    uint32_t lpos;    /* int32 (T) a line's first byte in the text */
    uint32_t llen;    /* int32 (T) its length without '\r' */
    uint32_t agg;     /* int32 (64) the tile's counters, then their inclusive prefix */
    uint32_t excl;    /* int32 (64) the counters of the tiles before */
    uint32_t tables;  /* pg_tables */
    uint32_t rank;    /* uint8 (NC, T) */
    uint32_t lcnt;    /* int32 (NL, T) list q: the line's ids */
    uint32_t lbeg;    /* int32 (NL, T) list q: its field's first byte in the text */
    uint32_t lend;    /* int32 (NL, T) ... and its end */
    uint32_t lrank;   /* int32 (NL, T) list q's ids of the tile's lines before */
    uint32_t bytes;
} pg_smem;

typedef struct {
    const uint8_t *text;  /* (n_bytes), 16-byte aligned, padded to 16 */
    const int32_t *start; /* (n_lines + 1) */
    int64_t n_bytes, n_lines, max_line;
    const pg_tables *tab;
    int nf, nd, ns, nc, nl;
    rap_parse_format fmt;  /* the text format (delimiter, quoting, null token) */
    /* the destination batch (device) */
    float *label;          /* (B) */
    float *dense;          /* (ND, B) */
    uint8_t *dense_valid;  /* (ND, B) */
    int64_t *sparse_off;   /* (NS, B + 1) */
    int64_t *sparse_ids;   /* (NS, ids_stride) */
    uint8_t *sparse_valid; /* (NS, B) */
    int64_t B, ids_stride;
    rap_parse_rej *rej;    /* (L) */
    rap_parse_result *res;
    /* the look-back's tile status */
    uint32_t *flags;       /* (NT) (epoch << 2) | PG_AGG or PG_PREFIX */
    int32_t *agg, *incl;   /* (NT, NC) */
    uint32_t epoch_tag;    /* epoch << 2 */
    int64_t n_tiles, tile0;
    int stages;            /* phases run: 1, 2 (through the prefix) or 3 (all) */
    int loops;             /* 1: every field by pg_field_loops (RAP_PARSE_GPU_LOOPS, A/B) */
    int pairs;             /* 1: boundaries of two lines a warp (0: RAP_PARSE_GPU_PAIRS=0, A/B) */
    int lb_window;         /* predecessors a look-back round reads: 32 (1: RAP_PARSE_GPU_LOOKBACK=1) */
    pg_smem sm;
} pg_args;

/* A block's shared arrays. */
typedef struct {
    int64_t *sparse;
    uint64_t *vmask;
    float *dense, *label;
    uint32_t *key;
    int32_t *tabs, *agg, *excl;
    int32_t *lpos, *llen;
    pg_tables *tab;
    uint8_t *rank;
    int32_t *lcnt, *lbeg, *lend, *lrank; /* (NL, T) each */
} pg_shared;

/* ------------------------------------------------------------ one line */

/* Steps 1-2 for one line a segment of W lanes (W = 16: two lines a warp,
 * half h = lane / 16 takes its own line [ls, end); W = 32 with
 * RAP_PARSE_GPU_PAIRS=0: one line a warp): W aligned 16-byte words a step
 * (256 bytes, about a Criteo line, at W = 16), delimiter, quote and binary
 * masks per word, the quote parity carried into each lane by a segment
 * xor-scan (delimiters inside quotes do not count), the delimiter ranks by
 * a segment scan, the first nf - 1 delimiter positions into the line's
 * tabs; the first binary byte ends the segment's scan. v0: the first
 * step's word of this lane (loaded by the caller). Every shuffle runs on
 * all 32 lanes, each segment reading its own lanes. Returns the key of the
 * segment's line (parse_algo.h). */
template <int W>
static __device__ uint32_t seg_boundaries(const rap_parse_format *fm,
                                          const uint8_t *__restrict__ text, int64_t ls,
                                          int64_t end, int64_t max_line, int nf, int lane,
                                          uint4 v0, int32_t *tabs)
{
    const int hl = lane & (W - 1), top = (lane & ~(W - 1)) | (W - 1);
    const unsigned smask = W == 32 ? PG_FULL : 0xffffu << (lane & ~(W - 1));
    int64_t ntab = 0, bin_field = -1;
    uint32_t qpar = 0; /* quotes of the steps before, mod 2 */
    const int64_t base0 = ls & ~(int64_t)15;
    bool live = base0 < end;
    for (int64_t base = base0; __any_sync(PG_FULL, live); base += 16 * W) {
        const int64_t w = base + 16 * hl;
        uint32_t tabm = 0, binm = 0, quo = 0;
        if (live && w < end) {
            uint4 v = base == base0 ? v0 : __ldg((const uint4 *)(const void *)(text + w));
            uint32_t words[4] = {v.x, v.y, v.z, v.w};
            int lo = ls > w ? (int)(ls - w) : 0, hi = end - w < 16 ? (int)(end - w) : 16;
            pg_masks16_fmt(words, lo, hi, fm->delim, fm->text8, fm->quote, &tabm, &binm, &quo);
        }
        uint32_t qincl = 0;
        if (fm->quote) { /* warp-uniform: Criteo's tab format skips the scan */
            uint32_t qp = (uint32_t)__popc(quo) & 1u;
            qincl = qp;
#pragma unroll
            for (int o = 1; o < W; o <<= 1) {
                uint32_t y = __shfl_up_sync(PG_FULL, qincl, o, W);
                if (hl >= o)
                    qincl ^= y;
            }
            tabm = pg_outside(tabm, quo, qpar ^ qincl ^ qp);
        }
        int c = __popc(tabm), incl = c;
#pragma unroll
        for (int o = 1; o < W; o <<= 1) {
            int y = __shfl_up_sync(PG_FULL, incl, o, W);
            if (hl >= o)
                incl += y;
        }
        const int excl = incl - c;
        const unsigned bb = __ballot_sync(PG_FULL, binm != 0) & smask;
        const int L = bb ? __ffs(bb) - 1 : top;
        const uint32_t bl = __shfl_sync(PG_FULL, binm, L), tl = __shfl_sync(PG_FULL, tabm, L);
        const int el = __shfl_sync(PG_FULL, excl, L), tot = __shfl_sync(PG_FULL, incl, top);
        const uint32_t qtot = __shfl_sync(PG_FULL, qincl, top);
        if (!live)
            continue;
        if (bb) {
            int b = __ffs(bl) - 1;
            bin_field = ntab + el + __popc(tl & ((1u << b) - 1u));
            live = false;
            continue;
        }
        int64_t t = ntab + excl;
        for (uint32_t m = tabm; m && t < nf - 1; m &= m - 1, t++)
            tabs[t] = (int32_t)(w + __ffs(m) - 1 - ls);
        ntab += tot;
        if (fm->quote)
            qpar ^= qtot;
        live = base + 16 * W < end;
    }
    return pg_line_key_q(bin_field, end - ls, max_line, ntab, (int)qpar, nf);
}

/* Step 3 for the whole tile at once (after phase 1's boundaries): item x
 * = f * T + s is field f of line slot s, so a warp's 32 items are one
 * field of 32 lines (one descriptor: no divergence between encodings, every
 * lane busy). Only lines whose boundaries were good convert (a key of a
 * line-level class, PG_FIELDS or below, skips them: the field faults
 * lowering the key meanwhile are all of later classes); each fault lowers
 * the line's key by a shared atomic minimum, so the key is the smallest of
 * the fields' (the CPU reference's minimum), and a valid field sets its
 * bit of the line's mask. */
static __device__ void convert_tile(const pg_args *a, const pg_shared *sh, int tid, int nl)
{
    const int nf = a->nf;
    for (int x = tid; x < nf * T; x += (int)blockDim.x) {
        const int f = x / T, s = x % T;
        if (s >= nl || (sh->key[s] >> 16) <= PG_FIELDS)
            continue;
        const uint32_t d = sh->tab->desc[f];
        const int32_t *tb = sh->tabs + s * nf;
        const int32_t ls = sh->lpos[s];
        const int32_t fs = f ? tb[f - 1] + 1 : 0, fe = f < nf - 1 ? tb[f] : sh->llen[s];
        float fv = 0.0f;
        int64_t iv = 0;
        int32_t cnt;
        int valid = 0;
        const uint8_t *p = a->text + ls + fs;
        int cls = a->loops ? pg_field_loops(d, &a->fmt, p, fe - fs, &fv, &iv, NULL, &cnt, &valid)
                           : pg_field(d, &a->fmt, p, fe - fs, &fv, &iv, NULL, &cnt, &valid);
        if (cls != PG_OK) {
            atomicMin(&sh->key[s], pg_key(cls, f));
            continue;
        }
        const int col = PG_DESC_COL(d);
        switch (PG_DESC_KIND(d)) {
        case RAP_COL_LABEL: sh->label[s] = fv; break;
        case RAP_COL_DENSE: sh->dense[col * T + s] = fv; break;
        case RAP_COL_SPARSE:
            if (PG_DESC_SEP(d)) { /* a list: its ids come at the scatter */
                const int q = sh->tab->slist[col];
                sh->lcnt[q * T + s] = cnt;
                sh->lbeg[q * T + s] = ls + fs;
                sh->lend[q * T + s] = ls + fe;
            } else {
                sh->sparse[col * T + s] = iv;
            }
            break;
        default: break;
        }
        if (valid)
            atomicOr((unsigned long long *)&sh->vmask[s], 1ull << f);
    }
}

/* Phase 1: warp w finds the boundaries of lines [w * lpw, (w + 1) * lpw)
 * of the tile (l0 its first line, nl its lines), two at a time (a half-warp
 * each, seg_boundaries<16>) or with RAP_PARSE_GPU_PAIRS=0 one at a time
 * (seg_boundaries<32>); a line's tabs go to its row of the tile's tabs, its
 * key, start and length to the tile's arrays (convert_tile goes on). */
static __device__ void parse_lines(const pg_args *a, const pg_shared *sh, int warp, int lane,
                                   int64_t l0, int nl)
{
    const int lpw = T / (int)(blockDim.x >> 5);
    const int first = warp * lpw;
    if (first >= nl)
        return;
    const int nlw = nl - first < lpw ? nl - first : lpw;
    /* lane k: line k of the warp, its bounds and '\r' found at once */
    int64_t my = 0, mls = 0, mend = 0;
    if (lane <= nlw)
        my = a->start[l0 + first + lane];
    const int64_t next = __shfl_down_sync(PG_FULL, my, 1);
    if (lane < nlw) {
        pg_line_bounds(my, next, a->n_bytes, &mls, &mend);
        if (mend > mls && a->text[mend - 1] == '\r')
            mend--;
    }
    /* lines taken an iteration (2 with pairs: half h takes line k + h; a
     * half past the warp's lines scans an empty line, its key dropped) and
     * each lane's word of the next iteration's first step loaded ahead */
    const int per = a->pairs ? 2 : 1, h = a->pairs ? lane >> 4 : 0;
    const int wl = a->pairs ? (lane & 15) : lane;
    int64_t ls = 0, end = 0;
    {
        const int src = h < nlw ? h : 0;
        ls = __shfl_sync(PG_FULL, mls, src);
        end = __shfl_sync(PG_FULL, mend, src);
        if (h >= nlw)
            end = ls;
    }
    uint4 v0 = make_uint4(0, 0, 0, 0);
    if ((ls & ~(int64_t)15) + 16 * wl < end)
        v0 = __ldg((const uint4 *)(const void *)(a->text + (ls & ~(int64_t)15) + 16 * wl));
    for (int k = 0; k < nlw; k += per) {
        const int k1 = k + per + h, src = k1 < nlw ? k1 : 0;
        int64_t ls1 = __shfl_sync(PG_FULL, mls, src), end1 = __shfl_sync(PG_FULL, mend, src);
        if (k1 >= nlw)
            end1 = ls1;
        uint4 v1 = make_uint4(0, 0, 0, 0);
        if ((ls1 & ~(int64_t)15) + 16 * wl < end1)
            v1 = __ldg((const uint4 *)(const void *)(a->text + (ls1 & ~(int64_t)15) + 16 * wl));
        const int slot = first + k + h;
        int32_t *lt = sh->tabs + (slot < T ? slot : 0) * a->nf;
        const uint32_t key =
            a->pairs
                ? seg_boundaries<16>(&a->fmt, a->text, ls, end, a->max_line, a->nf, lane, v0, lt)
                : seg_boundaries<32>(&a->fmt, a->text, ls, end, a->max_line, a->nf, lane, v0, lt);
        if ((lane & (32 / per - 1)) == 0 && k + h < nlw) {
            sh->key[slot] = key;
            sh->vmask[slot] = 0;
            sh->lpos[slot] = (int32_t)ls;
            sh->llen[slot] = (int32_t)(end - ls);
        }
        ls = ls1;
        end = end1;
        v0 = v1;
    }
}

/* ------------------------------------------------------------ the tile */

/* Phase 2 for list column q (sparse counter c): the ids of line i (its
 * list's length when accepted, else 0) summed over the lines before by a
 * warp scan: lrank[q][i], agg[c] = all of the tile's. */
static __device__ void count_list(const pg_shared *sh, int c, int q, int lane, int nl)
{
    int32_t base = 0;
    for (int h = 0; h < T / 32; h++) {
        int i = h * 32 + lane;
        int32_t v = i < nl && sh->key[i] == PG_KEY_OK ? sh->lcnt[q * T + i] : 0, incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int32_t y = __shfl_up_sync(PG_FULL, incl, o);
            if (lane >= o)
                incl += y;
        }
        sh->lrank[q * T + i] = base + incl - v;
        base += __shfl_sync(PG_FULL, incl, 31);
    }
    if (lane == 0)
        sh->agg[c] = base;
}

/* Phase 2: counter c of line i (accepted; accepted with an id in sparse
 * column c - 1; rejected for reason c - 1 - NS), ranked in the tile by
 * ballots: rank[c][i] = lines before i counted, agg[c] = all counted; a
 * list column counts its ids (count_list). */
static __device__ void count_tile(const pg_args *a, const pg_shared *sh, int warp, int lane,
                                  int nl)
{
    const int ns = a->ns;
    for (int c = warp; c < a->nc; c += (int)(blockDim.x >> 5)) {
        if (c >= 1 && c <= ns && sh->tab->slist[c - 1] >= 0) {
            count_list(sh, c, sh->tab->slist[c - 1], lane, nl);
            continue;
        }
        int32_t base = 0;
        for (int h = 0; h < T / 32; h++) {
            int i = h * 32 + lane;
            bool pr = false;
            if (i < nl) {
                uint32_t key = sh->key[i];
                bool acc = key == PG_KEY_OK;
                if (c == 0)
                    pr = acc;
                else if (c <= ns)
                    pr = acc && ((sh->vmask[i] >> sh->tab->sfield[c - 1]) & 1);
                else
                    pr = !acc && pg_key_reason(key) == c - 1 - ns;
            }
            unsigned b = __ballot_sync(PG_FULL, pr);
            sh->rank[c * T + i] = (uint8_t)(base + __popc(b & ((1u << lane) - 1u)));
            base += __popc(b);
        }
        if (lane == 0)
            sh->agg[c] = base;
    }
}

/* Sets tile's flag after the warp's stores of its counters (a release:
 * every lane fences its own stores, the warp meets, lane 0 fences again
 * and stores the flag). */
static __device__ void publish(volatile uint32_t *fl, int64_t tile, uint32_t flag, int lane)
{
    __threadfence();
    __syncwarp();
    if (lane == 0) {
        __threadfence();
        fl[tile] = flag;
    }
}

/* Phase 3, warp 0: the single-pass prefix over tiles (decoupled look-back,
 * as in CUB's scan). The tile publishes its counters (AGG), adds up its
 * predecessors' backwards until one has its inclusive prefix (PREFIX),
 * publishes its own, and keeps the exclusive prefix in excl. Tiles of
 * earlier blocks and earlier launches on the stream are the only ones
 * waited for. The batch's last tile writes the result's totals. */
static __device__ void look_back(const pg_args *a, const pg_shared *sh, int lane, int64_t tile)
{
    const int nc = a->nc, c0 = lane, c1 = lane + 32;
    volatile uint32_t *fl = a->flags;
    volatile int32_t *va = a->agg, *vi = a->incl;
    const int32_t g0 = c0 < nc ? sh->agg[c0] : 0, g1 = c1 < nc ? sh->agg[c1] : 0;
    int32_t e0 = 0, e1 = 0;
    if (tile > 0) {
        if (c0 < nc)
            va[tile * nc + c0] = g0;
        if (c1 < nc)
            va[tile * nc + c1] = g1;
        publish(fl, tile, a->epoch_tag | PG_AGG, lane);
        /* 32 predecessors at a time: lane j reads the flag of tile q - j;
         * the nearest one with its prefix (jp) ends the walk, every tile
         * from q down to it must have published. Then every lane fences
         * and the warp meets (its lanes' acquires order every lane's reads
         * of those tiles' counters), and lane c adds up counter c. */
        const int W = a->lb_window; /* 32, or 1 (RAP_PARSE_GPU_LOOKBACK=1, A/B) */
        for (int64_t q = tile - 1;; q -= W) {
            const int64_t qj = q - lane;
            int jp;
            for (;;) {
                const uint32_t f = qj >= 0 && lane < W ? fl[qj] : 0u;
                const bool ok = (f & ~3u) == a->epoch_tag && (f & 3u) != 0;
                const unsigned vb = __ballot_sync(PG_FULL, ok);
                const unsigned pb = __ballot_sync(PG_FULL, ok && (f & 3u) == PG_PREFIX);
                jp = pb ? __ffs(pb) - 1 : W;
                const unsigned need = jp >= 31 ? PG_FULL : (2u << (jp < W ? jp : W - 1)) - 1u;
                if ((vb & need) == need)
                    break;
                __nanosleep(32);
            }
            __threadfence();
            __syncwarp();
            const int na = jp < W ? jp : W; /* tiles whose own counters count */
            for (int j = 0; j < na; j++) {
                if (c0 < nc)
                    e0 += va[(q - j) * nc + c0];
                if (c1 < nc)
                    e1 += va[(q - j) * nc + c1];
            }
            if (jp < W) {
                if (c0 < nc)
                    e0 += vi[(q - jp) * nc + c0];
                if (c1 < nc)
                    e1 += vi[(q - jp) * nc + c1];
                break;
            }
        }
    }
    if (c0 < nc)
        vi[tile * nc + c0] = e0 + g0;
    if (c1 < nc)
        vi[tile * nc + c1] = e1 + g1;
    publish(fl, tile, a->epoch_tag | PG_PREFIX, lane);
    sh->excl[c0] = e0;
    sh->excl[c1] = e1;
    sh->agg[c0] = e0 + g0; /* inclusive, for the totals */
    sh->agg[c1] = e1 + g1;
    __syncwarp();
    if (tile != a->n_tiles - 1)
        return;
    rap_parse_result *res = a->res;
    const int32_t used = sh->agg[0];
    if (lane == 0) {
        res->n_lines = a->n_lines;
        res->rows_used = used;
        res->rows_rejected = a->n_lines - used;
        if (a->n_lines == used)
            res->first_line = -1;
    }
    if (lane < RAP_REJ_COUNT) {
        int32_t n = sh->agg[1 + a->ns + lane];
        res->rejected[lane] = n;
        const rap_parse_rej none = {-1, -1, -1, -1};
        for (int k = n; k < RAP_PARSE_FIRST; k++)
            res->first[lane][k] = none;
    }
}

/* Phase 4: the tile's good rows to rows excl[0] + rank, their ids after
 * the ids before, its rejects to the reject list and the result's firsts. */
static __device__ void scatter(const pg_args *a, const pg_shared *sh, int tid, int64_t tile,
                               int64_t l0, int nl)
{
    const int64_t B = a->B;
    const int32_t E0 = sh->excl[0];
    const int ns = a->ns;
    for (int i = tid; i < nl; i += (int)blockDim.x) {
        int32_t row = E0 + sh->rank[i];
        uint32_t key = sh->key[i];
        if (key == PG_KEY_OK) {
            if (row < B) /* always, for offsets in order (rap_parse_rows_bound) */
                a->label[row] = sh->label[i];
            continue;
        }
        int r = pg_key_reason(key);
        rap_parse_rej e = {(int32_t)(l0 + i), row, (int16_t)r, (int16_t)pg_key_field(key)};
        int64_t k = l0 + i - row;
        a->rej[k] = e;
        int32_t rr = sh->excl[1 + ns + r] + sh->rank[(1 + ns + r) * T + i];
        if (rr < RAP_PARSE_FIRST)
            a->res->first[r][rr] = e;
        if (k == 0)
            a->res->first_line = e.line;
    }
    for (int x = tid; x < a->nd * T; x += (int)blockDim.x) {
        int j = x / T, i = x % T;
        if (i >= nl || sh->key[i] != PG_KEY_OK || E0 + sh->rank[i] >= B)
            continue;
        int64_t row = E0 + sh->rank[i];
        a->dense[j * B + row] = sh->dense[j * T + i];
        a->dense_valid[j * B + row] = (uint8_t)((sh->vmask[i] >> sh->tab->dfield[j]) & 1);
    }
    for (int x = tid; x < ns * T; x += (int)blockDim.x) {
        int j = x / T, i = x % T;
        if (i >= nl || sh->key[i] != PG_KEY_OK || E0 + sh->rank[i] >= B)
            continue;
        int64_t row = E0 + sh->rank[i];
        const int f = sh->tab->sfield[j], q = sh->tab->slist[j];
        int64_t v = (int64_t)((sh->vmask[i] >> f) & 1), cnt = v;
        int64_t off = sh->excl[1 + j] +
                      (q >= 0 ? sh->lrank[q * T + i] : (int32_t)sh->rank[(1 + j) * T + i]);
        int64_t *ids = a->sparse_ids + j * a->ids_stride + off;
        if (q >= 0) {
            cnt = sh->lcnt[q * T + i];
            if (cnt > 0)
                pg_list_ids(sh->tab->desc[f], &a->fmt, a->text + sh->lbeg[q * T + i],
                            sh->lend[q * T + i] - sh->lbeg[q * T + i], ids);
        } else if (v) {
            ids[0] = sh->sparse[j * T + i];
        }
        a->sparse_off[j * (B + 1) + row + 1] = off + cnt;
        a->sparse_valid[j * B + row] = (uint8_t)v;
    }
    if (tile == 0)
        for (int j = tid; j < ns; j += (int)blockDim.x)
            a->sparse_off[j * (B + 1)] = 0;
}

/* One block per tile: tile0 + blockIdx.x (the kernel's body; smem the
 * block's shared arrays at a.sm). */
static __device__ __forceinline__ void parse_block(const pg_args &a, unsigned char *smem)
{
    pg_shared sh;
    sh.sparse = (int64_t *)(void *)(smem + a.sm.sparse);
    sh.vmask = (uint64_t *)(void *)(smem + a.sm.vmask);
    sh.dense = (float *)(void *)(smem + a.sm.dense);
    sh.label = (float *)(void *)(smem + a.sm.label);
    sh.key = (uint32_t *)(void *)(smem + a.sm.key);
    sh.tabs = (int32_t *)(void *)(smem + a.sm.tabs);
    sh.lpos = (int32_t *)(void *)(smem + a.sm.lpos);
    sh.llen = (int32_t *)(void *)(smem + a.sm.llen);
    sh.agg = (int32_t *)(void *)(smem + a.sm.agg);
    sh.excl = (int32_t *)(void *)(smem + a.sm.excl);
    sh.tab = (pg_tables *)(void *)(smem + a.sm.tables);
    sh.rank = smem + a.sm.rank;
    sh.lcnt = (int32_t *)(void *)(smem + a.sm.lcnt);
    sh.lbeg = (int32_t *)(void *)(smem + a.sm.lbeg);
    sh.lend = (int32_t *)(void *)(smem + a.sm.lend);
    sh.lrank = (int32_t *)(void *)(smem + a.sm.lrank);
    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t tile = a.tile0 + blockIdx.x, l0 = tile * T;
    const int64_t left = a.n_lines - l0;
    const int nl = left <= 0 ? 0 : left < T ? (int)left : T;
    for (int k = tid; k < (int)(sizeof(pg_tables) / 4); k += (int)blockDim.x)
        ((uint32_t *)(void *)sh.tab)[k] = ((const uint32_t *)(const void *)a.tab)[k];
    __syncthreads();
    parse_lines(&a, &sh, warp, lane, l0, nl);
    __syncthreads();
    convert_tile(&a, &sh, tid, nl);
    if (a.stages < 2) /* the benchmark's variants (rap_parse_gpu_stages) */
        return;
    __syncthreads();
    count_tile(&a, &sh, warp, lane, nl);
    __syncthreads();
    if (warp == 0)
        look_back(&a, &sh, lane, tile);
    if (a.stages < 3)
        return;
    __syncthreads();
    scatter(&a, &sh, tid, tile, l0, nl);
}

template <int MAXT, int MINB>
static __global__ void __launch_bounds__(MAXT, MINB)
    parse_kernel(const __grid_constant__ pg_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    parse_block(a, smem);
}

/* ------------------------------------------------------------ launcher */

struct rap_parse_gpu {
    rap_parse_gpu_config cfg;
    rap_parse_layout lay;
    cudaStream_t stream;
    char *d_text;             /* (max_bytes rounded up + 16) */
    int32_t *d_start;         /* (L + 1) */
    pg_tables *d_tab;
    uint32_t *d_flags;        /* (NT) */
    int32_t *d_agg, *d_incl;  /* (NT, NC) */
    rap_parse_rej *d_rej;     /* (L) */
    rap_parse_result *d_res;  /* (RAP_PARSE_GPU_SLOTS) */
    rap_parse_result *h_res;  /* (RAP_PARSE_GPU_SLOTS) pinned */
    cudaEvent_t ev[RAP_PARSE_GPU_SLOTS];
    int64_t max_tiles;
    size_t text_cap;
    uint64_t seq;             /* tickets issued */
    uint32_t epoch;           /* of the open batch, 1 .. 2^30 - 1 */
    int stages;               /* rap_parse_gpu_stages: 3 */
    int loops;                /* RAP_PARSE_GPU_LOOPS=1: the fields' byte loops only */
    int warps;                /* a block's warps: RAP_PARSE_GPU_WARPS (8, 16 or 32), 8 */
    int pairs;                /* 0 with RAP_PARSE_GPU_PAIRS=0: one line a warp at a time */
    int lb_window;            /* 1 with RAP_PARSE_GPU_LOOKBACK=1: one predecessor a round */
    void (*kernel)(const pg_args); /* parse_kernel's instance for the warps */
    /* the open batch (begin .. end) */
    bool open;
    pg_args args;
    int64_t next_line, next_tile, n_tiles;
};

static pg_smem smem_layout(int nf, int nd, int ns, int nc, int nl)
{
    pg_smem s;
    uint32_t at = 0;
#define PG_PLACE(field, bytes)                  \
    do {                                        \
        s.field = at;                           \
        at += ((uint32_t)(bytes) + 15u) & ~15u; \
    } while (0)
    PG_PLACE(sparse, (size_t)ns * T * 8);
    PG_PLACE(vmask, T * 8);
    PG_PLACE(dense, (size_t)nd * T * 4);
    PG_PLACE(label, T * 4);
    PG_PLACE(key, T * 4);
    PG_PLACE(tabs, (size_t)T * nf * 4);
    PG_PLACE(lpos, T * 4);
    PG_PLACE(llen, T * 4);
    PG_PLACE(agg, RAP_PARSE_MAX_COUNTERS * 4);
    PG_PLACE(excl, RAP_PARSE_MAX_COUNTERS * 4);
    PG_PLACE(tables, sizeof(pg_tables));
    PG_PLACE(rank, (size_t)nc * T);
    PG_PLACE(lcnt, (size_t)nl * T * 4);
    PG_PLACE(lbeg, (size_t)nl * T * 4);
    PG_PLACE(lend, (size_t)nl * T * 4);
    PG_PLACE(lrank, (size_t)nl * T * 4);
#undef PG_PLACE
    s.bytes = at;
    return s;
}

extern "C" rap_status rap_parse_gpu_create(const rap_parse_gpu_config *cfg, void *stream,
                                           rap_parse_gpu **out)
{
    *out = NULL;
    if (!cfg || cfg->max_lines < 1 || cfg->max_lines > INT32_MAX - 1 || cfg->max_bytes < 0 ||
        cfg->max_bytes > INT32_MAX - 32 || cfg->max_line < 1)
        return rap_fail(RAP_ERR_ARG, "GPU parser: expected max_lines in [1, 2^31 - 2], "
                                     "max_bytes in [0, 2^31 - 32] and max_line >= 1");
    rap_parse_layout lay;
    if (cfg->layout)
        lay = *cfg->layout;
    else
        rap_parse_layout_criteo(&lay);
    RAP_TRY(rap_parse_layout_check(&lay));
    rap_parse_gpu *p = (rap_parse_gpu *)rap_calloc(sizeof *p, "GPU parser");
    if (!p)
        return RAP_ERR_NOMEM;
    p->cfg = *cfg;
    p->cfg.layout = NULL;
    p->lay = lay;
    p->stages = 3;
    {
        const char *e = getenv("RAP_PARSE_GPU_LOOPS");
        p->loops = e && e[0] == '1' && !e[1];
        e = getenv("RAP_PARSE_GPU_WARPS");
        p->warps = e && !strcmp(e, "16") ? 16 : e && !strcmp(e, "32") ? 32 : PG_WARPS_DEFAULT;
        p->kernel = p->warps > 16 ? parse_kernel<1024, 1> : parse_kernel<512, 2>;
        e = getenv("RAP_PARSE_GPU_PAIRS");
        p->pairs = !(e && !strcmp(e, "0"));
        e = getenv("RAP_PARSE_GPU_LOOKBACK");
        p->lb_window = e && !strcmp(e, "1") ? 1 : 32;
    }
    p->stream = (cudaStream_t)stream;
    const pg_sizes z = pg_sizes_of(cfg, &lay);
    p->max_tiles = z.max_tiles;
    p->text_cap = z.text;
    const int nc = z.nc;
    pg_tables tab;
    memset(&tab, 0, sizeof tab);
    memset(tab.slist, 0xff, sizeof tab.slist);
    for (int f = 0; f < lay.n_fields; f++) {
        tab.desc[f] = pg_desc(lay.f[f]);
        if (lay.f[f].kind == RAP_COL_DENSE)
            tab.dfield[lay.f[f].col] = (uint8_t)f;
        if (lay.f[f].kind == RAP_COL_SPARSE) {
            tab.sfield[lay.f[f].col] = (uint8_t)f;
            tab.slist[lay.f[f].col] = (int8_t)(lay.f[f].sep ? lay.f[f].list : -1);
        }
    }
    rap_status st;
#define PG_TRY(x)                 \
    do {                          \
        if ((st = (x)) != RAP_OK) \
            goto fail;            \
    } while (0)
    PG_TRY(rap_cuda_malloc((void **)&p->d_text, p->text_cap, "GPU parser text"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_start, z.start, "GPU parser line offsets"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_tab, sizeof tab, "GPU parser layout"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_flags, z.flags, "GPU parser tiles"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_agg, z.agg, "GPU parser tiles"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_incl, z.incl, "GPU parser tiles"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_rej, z.rej, "GPU parser rejects"));
    PG_TRY(rap_cuda_malloc((void **)&p->d_res, z.res, "GPU parser results"));
    if (cudaHostAlloc((void **)&p->h_res, RAP_PARSE_GPU_SLOTS * sizeof(rap_parse_result),
                      cudaHostAllocDefault) != cudaSuccess) {
        p->h_res = NULL;
        st = rap_fail(RAP_ERR_NOMEM, "GPU parser: no pinned memory for %zu bytes of results",
                      RAP_PARSE_GPU_SLOTS * sizeof(rap_parse_result));
        goto fail;
    }
    memset(p->h_res, 0, RAP_PARSE_GPU_SLOTS * sizeof(rap_parse_result));
    for (int i = 0; i < RAP_PARSE_GPU_SLOTS; i++) {
        if (cudaEventCreateWithFlags(&p->ev[i], cudaEventDisableTiming) != cudaSuccess) {
            p->ev[i] = NULL;
            st = rap_fail(RAP_ERR_CUDA, "GPU parser: cudaEventCreate: %s",
                          cudaGetErrorString(cudaGetLastError()));
            goto fail;
        }
    }
    {
        /* on the parser's stream, which the caller's stream may not wait for */
        pg_smem sm = smem_layout(lay.n_fields, lay.n_dense, lay.n_sparse, nc, lay.n_lists);
        cudaError_t e = cudaSuccess;
        if (sm.bytes > 48 * 1024)
            e = cudaFuncSetAttribute(p->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)sm.bytes);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(p->d_tab, &tab, sizeof tab, cudaMemcpyHostToDevice, p->stream);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(p->d_flags, 0, (size_t)p->max_tiles * 4, p->stream);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(p->d_text, 0, p->text_cap, p->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(p->stream);
        if (e != cudaSuccess) {
            st = rap_fail(RAP_ERR_CUDA, "GPU parser: setup: %s", cudaGetErrorString(e));
            goto fail;
        }
    }
#undef PG_TRY
    *out = p;
    return RAP_OK;
fail:
    rap_parse_gpu_free(p);
    return st;
}

extern "C" void rap_parse_gpu_free(rap_parse_gpu *p)
{
    if (!p)
        return;
    cudaStreamSynchronize(p->stream);
    for (int i = 0; i < RAP_PARSE_GPU_SLOTS; i++)
        if (p->ev[i])
            cudaEventDestroy(p->ev[i]);
    if (p->h_res)
        cudaFreeHost(p->h_res);
    rap_cuda_free(p->d_text);
    rap_cuda_free(p->d_start);
    rap_cuda_free(p->d_tab);
    rap_cuda_free(p->d_flags);
    rap_cuda_free(p->d_agg);
    rap_cuda_free(p->d_incl);
    rap_cuda_free(p->d_rej);
    rap_cuda_free(p->d_res);
    rap_free(p);
}

extern "C" void rap_parse_gpu_stages(rap_parse_gpu *p, int stages)
{
    p->stages = stages < 1 ? 1 : stages > 3 ? 3 : stages;
}

extern "C" char *rap_parse_gpu_text(rap_parse_gpu *p) { return p->d_text; }

extern "C" int32_t *rap_parse_gpu_starts(rap_parse_gpu *p) { return p->d_start; }

extern "C" const rap_parse_rej *rap_parse_gpu_rejects(const rap_parse_gpu *p)
{
    return p->d_rej;
}

extern "C" rap_status rap_parse_gpu_upload(rap_parse_gpu *p, const char *text, int64_t n_bytes,
                                           const int32_t *start, int64_t n_lines)
{
    if (n_bytes < 0 || n_bytes > p->cfg.max_bytes || n_lines < 0 ||
        n_lines > p->cfg.max_lines || !start || (n_bytes > 0 && !text))
        return rap_fail(RAP_ERR_ARG, "GPU parser: a batch of %lld lines and %lld bytes does not "
                                     "fit (%lld lines, %lld bytes)", (long long)n_lines,
                        (long long)n_bytes, (long long)p->cfg.max_lines,
                        (long long)p->cfg.max_bytes);
    if (n_bytes > 0)
        RAP_CUDA_TRY(cudaMemcpyAsync(p->d_text, text, (size_t)n_bytes, cudaMemcpyHostToDevice,
                                     p->stream));
    RAP_CUDA_TRY(cudaMemcpyAsync(p->d_start, start, ((size_t)n_lines + 1) * 4,
                                 cudaMemcpyHostToDevice, p->stream));
    return RAP_OK;
}

extern "C" rap_status rap_parse_gpu_begin(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                                          const int32_t *d_start, int64_t n_lines,
                                          const rap_batch *dst)
{
    const rap_parse_layout *l = &p->lay;
    if (p->open)
        return rap_fail(RAP_ERR_ARG, "GPU parser: begin while a batch is open (end it first)");
    if (n_lines < 0 || n_lines > p->cfg.max_lines || n_bytes < 0 || n_bytes > INT32_MAX ||
        !d_start || (n_bytes > 0 && (!d_text || ((uintptr_t)d_text & 15))))
        return rap_fail(RAP_ERR_ARG, "GPU parser: bad batch (%lld lines of at most %lld, %lld "
                                     "bytes, text 16-byte aligned)", (long long)n_lines,
                        (long long)p->cfg.max_lines, (long long)n_bytes);
    const int K = l->n_lists ? l->fmt.max_list : 1;
    if (!dst || dst->schema.n_dense != l->n_dense || dst->schema.n_sparse != l->n_sparse ||
        dst->schema.ids_per_row < K || dst->cap < rap_parse_rows_bound(l, n_lines, n_bytes) ||
        (int64_t)n_lines * K > INT32_MAX) /* a column's ids: int32 counters */
        return rap_fail(RAP_ERR_ARG, "GPU parser: the batch does not fit %lld lines of %d "
                                     "dense, %d sparse columns of %d ids a row",
                        (long long)n_lines, l->n_dense, l->n_sparse, K);
    p->epoch = p->epoch % 0x3fffffffu + 1u;
    pg_args *a = &p->args;
    memset(a, 0, sizeof *a);
    a->text = (const uint8_t *)d_text;
    a->start = d_start;
    a->n_bytes = n_bytes;
    a->n_lines = n_lines;
    a->max_line = p->cfg.max_line;
    a->tab = p->d_tab;
    a->nf = l->n_fields;
    a->nd = l->n_dense;
    a->ns = l->n_sparse;
    a->nc = 1 + l->n_sparse + RAP_REJ_COUNT;
    a->nl = l->n_lists;
    a->fmt = l->fmt;
    a->label = dst->label;
    a->dense = dst->dense;
    a->dense_valid = dst->dense_valid;
    a->sparse_off = dst->sparse_off;
    a->sparse_ids = dst->sparse_ids;
    a->sparse_valid = dst->sparse_valid;
    a->B = dst->cap;
    a->ids_stride = dst->cap * dst->schema.ids_per_row;
    a->rej = p->d_rej;
    a->res = p->d_res + p->seq % RAP_PARSE_GPU_SLOTS;
    a->flags = p->d_flags;
    a->agg = p->d_agg;
    a->incl = p->d_incl;
    a->epoch_tag = p->epoch << 2;
    a->n_tiles = n_lines > 0 ? (n_lines + T - 1) / T : 1;
    a->stages = p->stages;
    a->loops = p->loops;
    a->pairs = p->pairs;
    a->lb_window = p->lb_window;
    a->sm = smem_layout(a->nf, a->nd, a->ns, a->nc, a->nl);
    p->n_tiles = a->n_tiles;
    p->next_line = 0;
    p->next_tile = 0;
    p->open = true;
    return RAP_OK;
}

extern "C" rap_status rap_parse_gpu_piece(rap_parse_gpu *p, int64_t line0, int64_t line1)
{
    const int64_t n = p->args.n_lines;
    if (!p->open || line0 != p->next_line || line1 < line0 || line1 > n ||
        (line1 != n && line1 % T != 0))
        return rap_fail(RAP_ERR_ARG, "GPU parser: piece [%lld, %lld) of %lld lines: expected "
                                     "it to start at %lld and end at a multiple of %d or at "
                                     "the end", (long long)line0, (long long)line1,
                        (long long)n, (long long)p->next_line, T);
    int64_t t0 = p->next_tile, t1 = line1 == n ? p->n_tiles : line1 / T;
    p->next_line = line1;
    if (t1 <= t0)
        return RAP_OK;
    pg_args *a = &p->args;
    a->tile0 = t0;
    p->kernel<<<(unsigned)(t1 - t0), 32 * p->warps, a->sm.bytes, p->stream>>>(*a);
    RAP_CUDA_LAUNCHED();
    p->next_tile = t1;
    return RAP_OK;
}

extern "C" rap_status rap_parse_gpu_end(rap_parse_gpu *p, const rap_parse_result **result_dev,
                                        uint64_t *ticket)
{
    if (!p->open || p->next_tile != p->n_tiles)
        return rap_fail(RAP_ERR_ARG, "GPU parser: end before the pieces covered the batch "
                                     "(%lld of %lld lines)", (long long)p->next_line,
                        (long long)p->args.n_lines);
    int slot = (int)(p->seq % RAP_PARSE_GPU_SLOTS);
    p->open = false;
    RAP_CUDA_TRY(cudaMemcpyAsync(p->h_res + slot, p->d_res + slot, sizeof(rap_parse_result),
                                 cudaMemcpyDeviceToHost, p->stream));
    RAP_CUDA_TRY(cudaEventRecord(p->ev[slot], p->stream));
    if (result_dev)
        *result_dev = p->d_res + slot;
    if (ticket)
        *ticket = p->seq;
    p->seq++;
    return RAP_OK;
}

extern "C" void rap_parse_gpu_abort(rap_parse_gpu *p) { p->open = false; }

extern "C" rap_status rap_parse_gpu_run(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                                        const int32_t *d_start, int64_t n_lines,
                                        const rap_batch *dst, const rap_parse_result **result_dev,
                                        uint64_t *ticket)
{
    RAP_TRY(rap_parse_gpu_begin(p, d_text, n_bytes, d_start, n_lines, dst));
    const int64_t step = p->cfg.tiles_per_launch > 0 ? p->cfg.tiles_per_launch * T : n_lines;
    rap_status st = RAP_OK;
    int64_t l0 = 0;
    do { /* pieces of whole tiles, the last to the end (one when n_lines is 0) */
        int64_t l1 = n_lines - l0 > step ? l0 + step : n_lines;
        st = rap_parse_gpu_piece(p, l0, l1);
        l0 = l1;
    } while (st == RAP_OK && l0 < n_lines);
    if (st != RAP_OK) {
        p->open = false;
        return st;
    }
    return rap_parse_gpu_end(p, result_dev, ticket);
}

extern "C" rap_status rap_parse_gpu_result(rap_parse_gpu *p, uint64_t ticket, bool wait,
                                           rap_parse_result *out, bool *ready)
{
    *ready = false;
    if (ticket >= p->seq || p->seq - ticket > RAP_PARSE_GPU_SLOTS)
        return rap_fail(RAP_ERR_ARG, "GPU parser: result %llu is not held (%llu issued, the "
                                     "last %d kept)", (unsigned long long)ticket,
                        (unsigned long long)p->seq, RAP_PARSE_GPU_SLOTS);
    int slot = (int)(ticket % RAP_PARSE_GPU_SLOTS);
    cudaError_t e = wait ? cudaEventSynchronize(p->ev[slot]) : cudaEventQuery(p->ev[slot]);
    if (e == cudaErrorNotReady)
        return RAP_OK;
    if (e != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "GPU parser: result %llu: %s", (unsigned long long)ticket,
                        cudaGetErrorString(e));
    *out = p->h_res[slot];
    *ready = true;
    return RAP_OK;
}

#else /* no CUDA: every GPU entry point says so */

#define NO_GPU rap_fail(RAP_ERR_NO_GPU, "GPU parser: rap was built without CUDA (make CUDA=0)")

rap_status rap_parse_gpu_create(const rap_parse_gpu_config *cfg, void *stream,
                                rap_parse_gpu **out)
{
    *out = NULL;
    return NO_GPU;
}

void rap_parse_gpu_free(rap_parse_gpu *p) { (void)p; }

void rap_parse_gpu_stages(rap_parse_gpu *p, int stages) { (void)p; }

char *rap_parse_gpu_text(rap_parse_gpu *p) { return NULL; }

int32_t *rap_parse_gpu_starts(rap_parse_gpu *p) { return NULL; }

const rap_parse_rej *rap_parse_gpu_rejects(const rap_parse_gpu *p) { return NULL; }

rap_status rap_parse_gpu_upload(rap_parse_gpu *p, const char *text, int64_t n_bytes,
                                const int32_t *start, int64_t n_lines)
{
    return NO_GPU;
}

rap_status rap_parse_gpu_begin(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                               const int32_t *d_start, int64_t n_lines, const rap_batch *dst)
{
    return NO_GPU;
}

rap_status rap_parse_gpu_piece(rap_parse_gpu *p, int64_t line0, int64_t line1) { return NO_GPU; }

rap_status rap_parse_gpu_end(rap_parse_gpu *p, const rap_parse_result **result_dev,
                             uint64_t *ticket)
{
    return NO_GPU;
}

void rap_parse_gpu_abort(rap_parse_gpu *p) {}

rap_status rap_parse_gpu_run(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                             const int32_t *d_start, int64_t n_lines, const rap_batch *dst,
                             const rap_parse_result **result_dev, uint64_t *ticket)
{
    return NO_GPU;
}

rap_status rap_parse_gpu_result(rap_parse_gpu *p, uint64_t ticket, bool wait,
                                rap_parse_result *out, bool *ready)
{
    *ready = false;
    return NO_GPU;
}

#endif /* __CUDACC__ */

void rap_parse_gpu_bytes(const rap_parse_gpu_config *cfg, size_t *device, size_t *pinned)
{
    *device = *pinned = 0;
    rap_parse_layout lay;
    if (cfg->layout)
        lay = *cfg->layout;
    else
        rap_parse_layout_criteo(&lay);
    if (cfg->max_lines < 1 || cfg->max_lines > INT32_MAX - 1 || cfg->max_bytes < 0 ||
        cfg->max_bytes > INT32_MAX - 32 || rap_parse_layout_check(&lay) != RAP_OK) {
        rap_clear_error();
        return;
    }
    const pg_sizes z = pg_sizes_of(cfg, &lay);
    *device = z.text + z.start + z.flags + z.agg + z.incl + z.rej + z.res;
    *pinned = z.res;
}
