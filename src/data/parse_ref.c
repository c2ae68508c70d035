/* parse_ref.c -- the GPU parser's algorithm on the host (parse_ref.h): the
 * kernels' steps in the kernels' order, with a warp's 32 lanes as a loop
 * and a thread block's tile as a struct. The per-line steps are
 * parse_algo.h's, the same code the kernels run. */
#include "data/parse_ref.h"

#include "core/core.h"
#include "data/parse.h"
#include "data/parse_algo.h"
#include "data/parse_schema.h"

#include <string.h>

_Static_assert(sizeof(rap_parse_rej) == 12, "rap_parse_rej: 12 bytes on host and device");
_Static_assert(sizeof(rap_parse_result) == 640, "rap_parse_result: no padding");
_Static_assert(RAP_PARSE_TILE % 32 == 0 && RAP_PARSE_TILE <= 255, "tile: warps, u8 ranks");

#define T RAP_PARSE_TILE
#define LANES 32
#define STRIDE (16 * LANES) /* bytes a warp looks at per step */

/* ------------------------------------------------------------ layout */

/* Criteo's format: tab separated, no quoting, bytes 0x80 and above binary. */
static void format_criteo(rap_parse_format *fm)
{
    memset(fm, 0, sizeof *fm);
    fm->max_list = 1;
    fm->delim = '\t';
    fm->null_len = 4;
    memcpy(fm->null_tok, "null", 4);
}

void rap_parse_layout_criteo(rap_parse_layout *out)
{
    memset(out, 0, sizeof *out);
    out->n_fields = 1 + RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE;
    out->n_dense = RAP_CRITEO_DENSE;
    out->n_sparse = RAP_CRITEO_SPARSE;
    format_criteo(&out->fmt);
    out->f[0] = (rap_parse_field){RAP_COL_LABEL, RAP_ENC_LABEL01, 0, 0, 0, -1};
    for (int j = 0; j < RAP_CRITEO_DENSE; j++)
        out->f[1 + j] = (rap_parse_field){RAP_COL_DENSE, RAP_ENC_INT32, (int16_t)j, 0, 0, -1};
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++)
        out->f[1 + RAP_CRITEO_DENSE + j] =
            (rap_parse_field){RAP_COL_SPARSE, RAP_ENC_HEX32, (int16_t)j, 0, 0, -1};
}

rap_status rap_parse_layout_schema(const rap_input_schema *s, rap_parse_layout *out)
{
    memset(out, 0, sizeof *out);
    if (s->n_cols > RAP_PARSE_MAX_FIELDS || s->n_sparse > RAP_PARSE_MAX_SPARSE)
        return rap_fail(RAP_ERR_ARG, "schema %s: %d fields, %d sparse: the GPU parser takes at "
                        "most %d fields and %d sparse columns", s->source, s->n_cols,
                        s->n_sparse, RAP_PARSE_MAX_FIELDS, RAP_PARSE_MAX_SPARSE);
    out->n_fields = s->n_cols;
    out->n_dense = s->n_dense;
    out->n_sparse = s->n_sparse;
    rap_parse_format_of(s, &out->fmt);
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        rap_parse_field d = {(uint8_t)c->kind, (uint8_t)c->enc,
                             (int16_t)(c->col < 0 ? 0 : c->col), (uint8_t)c->list_sep, 0, -1};
        if (c->list_sep)
            d.list = (int16_t)out->n_lists++;
        out->f[f] = d;
    }
    return RAP_OK;
}

/* Whether encoding e fits kind k. */
static bool enc_fits(int k, int e)
{
    switch (k) {
    case RAP_COL_SKIP: return e == RAP_ENC_NONE;
    case RAP_COL_LABEL: return e == RAP_ENC_LABEL01;
    case RAP_COL_DENSE: return e == RAP_ENC_INT32 || e == RAP_ENC_FLOAT;
    case RAP_COL_SPARSE:
        return e == RAP_ENC_HEX32 || e == RAP_ENC_HEX64 || e == RAP_ENC_DEC64 ||
               e == RAP_ENC_STR;
    default: return false;
    }
}

rap_status rap_parse_layout_check(const rap_parse_layout *l)
{
    if (!l || l->n_fields < 1 || l->n_fields > RAP_PARSE_MAX_FIELDS || l->n_dense < 0 ||
        l->n_dense > RAP_PARSE_MAX_FIELDS || l->n_sparse < 0 ||
        l->n_sparse > RAP_PARSE_MAX_SPARSE)
        return rap_fail(RAP_ERR_ARG, "parse layout: expected 1 to %d fields, at most %d sparse "
                                     "columns", RAP_PARSE_MAX_FIELDS, RAP_PARSE_MAX_SPARSE);
    const rap_parse_format *fm = &l->fmt;
    if (fm->max_list < 1 || fm->max_list > RAP_MAX_LIST_LIMIT || fm->delim == '"' ||
        fm->delim == '\n' || fm->delim == '\r' || fm->delim == 0 ||
        fm->quote != (fm->delim != '\t') || fm->null_len > RAP_NULL_TOKEN_MAX)
        return rap_fail(RAP_ERR_ARG, "parse layout: expected max_list in [1, %d], a delimiter "
                                     "other than '\"', CR, LF, NUL, quoting for any but tab, a "
                                     "null token of at most %d bytes", RAP_MAX_LIST_LIMIT,
                        RAP_NULL_TOKEN_MAX);
    int labels = 0, lists = 0, seen_d[RAP_PARSE_MAX_FIELDS] = {0};
    int seen_s[RAP_PARSE_MAX_FIELDS] = {0};
    for (int f = 0; f < l->n_fields; f++) {
        rap_parse_field d = l->f[f];
        bool ok = enc_fits(d.kind, d.enc);
        if (d.kind == RAP_COL_LABEL)
            labels++;
        if (ok && d.kind == RAP_COL_DENSE)
            ok = d.col >= 0 && d.col < l->n_dense && !seen_d[d.col]++;
        if (ok && d.kind == RAP_COL_SPARSE)
            ok = d.col >= 0 && d.col < l->n_sparse && !seen_s[d.col]++;
        if (ok && d.sep) /* a field that is not a list: its list index is not looked at */
            ok = d.kind == RAP_COL_SPARSE && d.sep != '"' && d.list == lists++ &&
                 (d.sep != fm->delim || fm->quote);
        if (!ok)
            return rap_fail(RAP_ERR_ARG, "parse layout: field %d (kind %d, encoding %d, column "
                                         "%d, list %d) does not fit", f, d.kind, d.enc, d.col,
                            d.list);
    }
    if (lists != l->n_lists)
        return rap_fail(RAP_ERR_ARG, "parse layout: %d list fields, the layout says %d", lists,
                        l->n_lists);
    for (int j = 0; j < l->n_dense; j++)
        if (!seen_d[j])
            return rap_fail(RAP_ERR_ARG, "parse layout: no field for dense column %d", j);
    for (int j = 0; j < l->n_sparse; j++)
        if (!seen_s[j])
            return rap_fail(RAP_ERR_ARG, "parse layout: no field for sparse column %d", j);
    if (labels != 1)
        return rap_fail(RAP_ERR_ARG, "parse layout: expected one label field, got %d", labels);
    return RAP_OK;
}

/* ------------------------------------------------------------ one line */

/* What a thread block holds for its tile in shared memory. */
typedef struct {
    uint32_t key[T];    /* fault key per line, PG_KEY_OK for a good one */
    uint64_t vmask[T];  /* bit f: field f is valid (not null) */
    float label[T];
    float dense[RAP_PARSE_MAX_FIELDS][T];
    int64_t sparse[RAP_PARSE_MAX_SPARSE][T];  /* a plain sparse column's id */
    int32_t lcnt[RAP_PARSE_MAX_SPARSE][T];    /* list q: the line's ids */
    int32_t lbeg[RAP_PARSE_MAX_SPARSE][T];    /* list q: its field's bytes in the text */
    int32_t lend[RAP_PARSE_MAX_SPARSE][T];
    uint8_t rank[RAP_PARSE_MAX_COUNTERS][T];  /* counter c's lines before, in the tile */
    int32_t srank[RAP_PARSE_MAX_SPARSE][T];   /* sparse column j: ids of the lines before */
    int32_t agg[RAP_PARSE_MAX_COUNTERS];      /* counter c in the tile */
    int32_t tabs[RAP_PARSE_MAX_FIELDS];       /* a warp's delimiters (from the line start) */
} tile_t;

/* A lane's 16-byte load at w (16-aligned): bytes outside the text are 0
 * here, where the kernel reads padding (both are masked off). */
static void load16(const uint8_t *text, int64_t n_bytes, int64_t w, uint32_t out[4])
{
    uint8_t b[16] = {0};
    int64_t k = n_bytes - w < 16 ? n_bytes - w : 16;
    if (k > 0)
        memcpy(b, text + w, (size_t)k);
    memcpy(out, b, 16);
}

/* Steps 1-2 of one line [ls, end) (the kernel's stride loop): the
 * positions of the delimiters outside quotes into tabs (the first nf -
 * 1), and the line-level fault key. The quote parity carried into each
 * lane is the warp's exclusive xor-scan of the lanes' quote counts, after
 * the strides before. */
static uint32_t line_boundaries(const rap_parse_format *fm, const uint8_t *text, int64_t n_bytes,
                                int64_t ls, int64_t end, int64_t max_line, int nf, int32_t *tabs)
{
    int64_t ntab = 0, bin_field = -1;
    uint32_t qpar = 0; /* quotes of the strides before, mod 2 */
    for (int64_t base = ls & ~(int64_t)15; base < end; base += STRIDE) {
        uint32_t tabm[LANES], binm[LANES];
        int64_t excl[LANES], tot = 0;
        uint32_t qx = 0; /* the xor-scan */
        for (int lane = 0; lane < LANES; lane++) {
            int64_t w = base + 16 * lane;
            uint32_t quo = 0;
            tabm[lane] = binm[lane] = 0;
            if (w < end) {
                uint32_t words[4];
                load16(text, n_bytes, w, words);
                int lo = ls > w ? (int)(ls - w) : 0, hi = end - w < 16 ? (int)(end - w) : 16;
                pg_masks16_fmt(words, lo, hi, fm->delim, fm->text8, fm->quote, &tabm[lane],
                               &binm[lane], &quo);
            }
            tabm[lane] = pg_outside(tabm[lane], quo, qpar ^ qx);
            qx ^= (uint32_t)__builtin_popcount(quo) & 1u;
            excl[lane] = tot; /* the warp's exclusive scan */
            tot += __builtin_popcount(tabm[lane]);
        }
        int first = -1; /* the ballot's lowest lane */
        for (int lane = 0; lane < LANES && first < 0; lane++)
            if (binm[lane])
                first = lane;
        if (first >= 0) {
            int b = __builtin_ctz(binm[first]);
            bin_field = ntab + excl[first] +
                        __builtin_popcount(tabm[first] & ((1u << b) - 1u));
            break;
        }
        for (int lane = 0; lane < LANES; lane++) {
            int64_t t = ntab + excl[lane];
            for (uint32_t m = tabm[lane]; m && t < nf - 1; m &= m - 1, t++)
                tabs[t] = (int32_t)(base + 16 * lane + __builtin_ctz(m) - ls);
        }
        ntab += tot;
        qpar ^= qx;
    }
    return pg_line_key_q(bin_field, end - ls, max_line, ntab, (int)qpar, nf);
}

/* Steps 1-3 of line p0..p1 into slot s of the tile (on the GPU a
 * half-warp's boundaries, then the tile-wide conversion: the same per-line
 * results in any order, the key the minimum over the fields). */
static void ref_line(const rap_parse_layout *l, const uint32_t *desc, const uint8_t *text,
                     int64_t n_bytes, int64_t p0, int64_t p1, int64_t max_line, tile_t *tl, int s)
{
    int64_t ls, end;
    pg_line_bounds(p0, p1, n_bytes, &ls, &end);
    if (end > ls && text[end - 1] == '\r')
        end--;
    const int nf = l->n_fields;
    uint32_t key = line_boundaries(&l->fmt, text, n_bytes, ls, end, max_line, nf, tl->tabs);
    uint64_t vm = 0;
    if (key == PG_KEY_OK) {
        for (int f = 0; f < nf; f++) {
            int32_t fs = f ? tl->tabs[f - 1] + 1 : 0;
            int32_t fe = f < nf - 1 ? tl->tabs[f] : (int32_t)(end - ls);
            float fv = 0.0f;
            int64_t iv = 0;
            int32_t cnt;
            int valid;
            int cls = pg_field(desc[f], &l->fmt, text + ls + fs, fe - fs, &fv, &iv, NULL, &cnt,
                               &valid);
            if (cls != PG_OK) {
                uint32_t k = pg_key(cls, f);
                key = k < key ? k : key; /* the kernel's atomic minimum */
                continue;
            }
            int col = PG_DESC_COL(desc[f]);
            switch (PG_DESC_KIND(desc[f])) {
            case RAP_COL_LABEL: tl->label[s] = fv; break;
            case RAP_COL_DENSE: tl->dense[col][s] = fv; break;
            case RAP_COL_SPARSE:
                if (PG_DESC_SEP(desc[f])) {
                    int q = l->f[f].list;
                    tl->lcnt[q][s] = cnt;
                    tl->lbeg[q][s] = (int32_t)(ls + fs);
                    tl->lend[q][s] = (int32_t)(ls + fe);
                } else {
                    tl->sparse[col][s] = iv;
                }
                break;
            default: break;
            }
            vm |= (uint64_t)(valid != 0) << f;
        }
    }
    tl->key[s] = key;
    tl->vmask[s] = vm;
}

/* ------------------------------------------------------------ tiles */

/* Counter c's predicate for line i of the tile (the kernel's ballots):
 * accepted (c = 0), rejected for reason c - 1 - NS. */
static bool counted(const tile_t *tl, int c, int i, int ns)
{
    bool acc = tl->key[i] == PG_KEY_OK;
    if (c == 0)
        return acc;
    return !acc && pg_key_reason(tl->key[i]) == c - 1 - ns;
}

/* Sparse column j's ids of line i of the tile: 0 for a rejected line, a
 * list's length, a plain field's valid bit (the kernel's scan input). */
static int32_t id_count(const rap_parse_layout *l, const tile_t *tl, int j, int i,
                        const int *sfield)
{
    if (tl->key[i] != PG_KEY_OK)
        return 0;
    int f = sfield[j];
    if (l->f[f].sep)
        return tl->lcnt[l->f[f].list][i];
    return (int32_t)((tl->vmask[i] >> f) & 1);
}

/* The tile's good rows and rejects to their places, excl being the
 * counters of the tiles before (the kernel's scatter). */
static void scatter(const rap_parse_layout *l, const uint32_t *desc, const uint8_t *text,
                    const tile_t *tl, int64_t l0, int nl, const int32_t *excl, const int *dfield,
                    const int *sfield, rap_batch *dst, rap_parse_rej *rej, rap_parse_result *res)
{
    const int nd = l->n_dense, ns = l->n_sparse;
    const int64_t B = dst->cap, ids_stride = dst->cap * dst->schema.ids_per_row;
    for (int i = 0; i < nl; i++) {
        int32_t row = excl[0] + tl->rank[0][i];
        uint32_t key = tl->key[i];
        if (key != PG_KEY_OK) {
            int r = pg_key_reason(key);
            rap_parse_rej e = {(int32_t)(l0 + i), row, (int16_t)r, (int16_t)pg_key_field(key)};
            rej[l0 + i - row] = e;
            int32_t rr = excl[1 + ns + r] + tl->rank[1 + ns + r][i];
            if (rr < RAP_PARSE_FIRST)
                res->first[r][rr] = e;
            if (l0 + i - row == 0)
                res->first_line = e.line;
            continue;
        }
        if (row >= B) /* never for offsets in order (rap_parse_rows_bound) */
            continue;
        dst->label[row] = tl->label[i];
        for (int j = 0; j < nd; j++) {
            dst->dense[j * B + row] = tl->dense[j][i];
            dst->dense_valid[j * B + row] = (uint8_t)((tl->vmask[i] >> dfield[j]) & 1);
        }
        for (int j = 0; j < ns; j++) {
            const int f = sfield[j];
            int64_t v = (int64_t)((tl->vmask[i] >> f) & 1);
            int64_t off = excl[1 + j] + tl->srank[j][i];
            int64_t *ids = dst->sparse_ids + j * ids_stride + off;
            int64_t cnt = v;
            if (l->f[f].sep) {
                int q = l->f[f].list;
                cnt = tl->lcnt[q][i];
                if (cnt > 0)
                    pg_list_ids(desc[f], &l->fmt, text + tl->lbeg[q][i],
                                tl->lend[q][i] - tl->lbeg[q][i], ids);
            } else if (v) {
                ids[0] = tl->sparse[j][i];
            }
            dst->sparse_off[j * (B + 1) + row + 1] = off + cnt;
            dst->sparse_valid[j * B + row] = (uint8_t)v;
        }
    }
}

static rap_status check_args(const rap_parse_layout *l, const char *text, int64_t n_bytes,
                             const int32_t *start, int64_t n, const rap_batch *dst)
{
    RAP_TRY(rap_parse_layout_check(l));
    if (n < 0 || n > INT32_MAX - 1 || n_bytes < 0 || (n_bytes > 0 && !text) || !start || !dst)
        return rap_fail(RAP_ERR_ARG, "parse: bad batch (%lld lines, %lld bytes)", (long long)n,
                        (long long)n_bytes);
    if (dst->schema.n_dense != l->n_dense || dst->schema.n_sparse != l->n_sparse ||
        dst->schema.ids_per_row < (l->n_lists ? l->fmt.max_list : 1) ||
        dst->cap < rap_parse_rows_bound(l, n, n_bytes))
        return rap_fail(RAP_ERR_ARG, "parse: the batch (%d dense, %d sparse, %lld rows) does not "
                                     "fit %lld lines of %d dense, %d sparse columns",
                        dst->schema.n_dense, dst->schema.n_sparse, (long long)dst->cap,
                        (long long)n, l->n_dense, l->n_sparse);
    return RAP_OK;
}

int64_t rap_parse_rows_bound(const rap_parse_layout *l, int64_t n, int64_t n_bytes)
{
    int64_t by_bytes = n_bytes / (l->n_fields > 0 ? l->n_fields : 1);
    return n < by_bytes ? n : by_bytes;
}

rap_status rap_parse_ref(const rap_parse_layout *l, const char *text, int64_t n_bytes,
                         const int32_t *start, int64_t n, int64_t max_line, rap_batch *dst,
                         rap_parse_rej *rej, rap_parse_result *res)
{
    RAP_TRY(check_args(l, text, n_bytes, start, n, dst));
    tile_t *tl = rap_malloc(sizeof *tl, "parse reference tile");
    if (!tl)
        return RAP_ERR_NOMEM;
    const int nf = l->n_fields, ns = l->n_sparse, nc = 1 + ns + RAP_REJ_COUNT;
    uint32_t desc[RAP_PARSE_MAX_FIELDS];
    int dfield[RAP_PARSE_MAX_FIELDS], sfield[RAP_PARSE_MAX_FIELDS];
    for (int f = 0; f < nf; f++) {
        desc[f] = pg_desc(l->f[f]);
        if (l->f[f].kind == RAP_COL_DENSE)
            dfield[l->f[f].col] = f;
        if (l->f[f].kind == RAP_COL_SPARSE)
            sfield[l->f[f].col] = f;
    }
    memset(res, 0, sizeof *res);
    memset(res->first, 0xff, sizeof res->first);
    res->first_line = -1;
    for (int j = 0; j < ns; j++)
        dst->sparse_off[j * (dst->cap + 1)] = 0;
    const uint8_t *tx = (const uint8_t *)text;
    int32_t excl[RAP_PARSE_MAX_COUNTERS] = {0}; /* the look-back's answer */
    for (int64_t l0 = 0; l0 < n; l0 += T) {
        int nl = n - l0 < T ? (int)(n - l0) : T;
        for (int s = 0; s < nl; s++)
            ref_line(l, desc, tx, n_bytes, start[l0 + s], start[l0 + s + 1], max_line, tl, s);
        for (int c = 0; c < nc; c++) {
            int32_t k = 0;
            for (int i = 0; i < nl; i++) {
                if (c >= 1 && c <= ns) { /* the kernel's scan of the id counts */
                    tl->srank[c - 1][i] = k;
                    k += id_count(l, tl, c - 1, i, sfield);
                } else {
                    tl->rank[c][i] = (uint8_t)k;
                    k += counted(tl, c, i, ns);
                }
            }
            tl->agg[c] = k;
        }
        scatter(l, desc, tx, tl, l0, nl, excl, dfield, sfield, dst, rej, res);
        for (int c = 0; c < nc; c++)
            excl[c] += tl->agg[c];
    }
    res->n_lines = n;
    res->rows_used = excl[0];
    res->rows_rejected = n - excl[0];
    for (int r = 0; r < RAP_REJ_COUNT; r++)
        res->rejected[r] = excl[1 + ns + r];
    rap_free(tl);
    return RAP_OK;
}

int rap_parse_ref_message(const char *text, const int32_t *start, int64_t line, int64_t max_line,
                          char *msg, size_t msg_len)
{
    int64_t a = start[line], b = start[line + 1];
    size_t len = b > a ? (size_t)(b - a - 1) : 0;
    return rap_parse_line(text + a, len, max_line, NULL, NULL, NULL, NULL, NULL, msg, msg_len);
}
