/*
 * test_parse_gpu.c -- the GPU parser's algorithm (src/data/parse_ref.c)
 * against the CPU parser (rap_parse_chunk, rap_parse_line), bit for bit and
 * reject for reject (line, rows before, reason, and the field against the
 * one the CPU parser's message names), on random Criteo text with every
 * kind of malformed line: wrong field counts, bad labels, non-digits,
 * overflow at every boundary, 9-digit and non-hex categories, binary bytes,
 * long lines, CRLF, empty lines, and (through the line cutter) a last line
 * without '\n'. Then the kernels (src/data/parse_gpu.cu) against the
 * reference: the whole destination block, poisoned before, the reject list
 * and the result, at odd batch sizes, in pieces, with lines longer than a
 * warp's stride and batches of one line. GPU tests skip without a GPU.
 */
#include "test.h"

#include "core/core.h"
#include "data/lines.h"
#include "data/parse.h"
#include "data/parse_algo.h"
#include "data/parse_gpu.h"
#include "data/parse_ref.h"
#include "data/source.h"

#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define NF 40
#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

/* ------------------------------------------------------------ text */

/* A batch of lines: text (each line ends in '\n') and offsets (n + 1). */
typedef struct {
    char *text;
    size_t n, cap;
    int32_t *start;
    int64_t lines, lcap;
} text_t;

static void put(text_t *x, const char *s, size_t k)
{
    if (x->n + k + 1 > x->cap) {
        x->cap = (x->n + k + 1) * 2;
        x->text = realloc(x->text, x->cap);
    }
    memcpy(x->text + x->n, s, k);
    x->n += k;
}

/* Ends the line begun at the last offset. */
static void end_line(text_t *x)
{
    put(x, "\n", 1);
    if (x->lines + 2 > x->lcap) {
        x->lcap = (x->lines + 2) * 2;
        x->start = realloc(x->start, (size_t)x->lcap * sizeof *x->start);
    }
    if (x->lines == 0)
        x->start[0] = 0;
    x->start[++x->lines] = (int32_t)x->n;
}

static void text_free(text_t *x)
{
    free(x->text);
    free(x->start);
    memset(x, 0, sizeof *x);
}

static uint64_t rnd(uint64_t *s) { return rap_splitmix64(s); }

/* One line under construction: its fields (arena offsets). */
typedef struct {
    char a[1 << 18]; /* room for a field of max_line (<= 65536) zeros */
    size_t used;
    int off[128], len[128];
    int nf;
} line_t;

static void fld_begin(line_t *l) { l->off[l->nf] = (int)l->used, l->len[l->nf] = 0; }
static void fld_str(line_t *l, const char *s)
{
    size_t k = strlen(s);
    memcpy(l->a + l->used, s, k);
    l->used += k;
    l->len[l->nf] += (int)k;
}
static void fld_end(line_t *l) { l->nf++; }
static void fld_set(line_t *l, int f, const char *s)
{
    l->off[f] = (int)l->used;
    l->len[f] = 0;
    int keep = l->nf;
    l->nf = f;
    fld_str(l, s);
    l->nf = keep;
}

static const char *INT_OK[] = {"2147483647", "-2147483648", "0", "-0", "00", "000000",
                               "0000000000002147483647", "-0000000000002147483648", "1234567890",
                               "-1234567890", "16777217", "16777216", "2147483520", "2147483583",
                               "2147483584", "-2147483583", "-1", "-2", "-3", "999999999"};
static const char *INT_SYNTAX[] = {"-", "--1", "+1", "1-", " 1", "1 ", "1.5", "0x10", "1e5",
                                   "a", "-a", "0-", "12a4567890123", "-+0"};
static const char *INT_RANGE[] = {"2147483648", "-2147483649", "9999999999", "10000000000",
                                  "99999999999", "4294967296", "18446744073709551616",
                                  "00000000002147483648", "-00000000002147483649",
                                  "100000000000000000000000000"};
static const char *HEX_OK[] = {"0", "00000000", "ffffffff", "FFFFFFFF", "DeadBeef", "a", "F",
                               "7fffffff", "80000000", "0000000a"};
static const char *HEX_SYNTAX[] = {"g", "0x1", "-1", " a", "ab.c", "12345678g", "G", "zzzzzzzzzz",
                                   "0123456789abcdefg", "+1"};
static const char *HEX_RANGE[] = {"123456789", "0ffffffff", "000000000", "ffffffffffffffffffff",
                                  "ABCDEF0123"};
static const char *LABEL_BAD[] = {"", "2", "00", "01", "-1", "a", "1 ", " 1", "10", "0.0"};
static const unsigned char BIN[] = {0x00, 0x01, 0x07, 0x0b, 0x1f, 0x7f, 0x80, 0xc3, 0xff, '\r'};
#define PICK(arr, z) (arr[(z) % (sizeof(arr) / sizeof(arr[0]))])

/* A valid value of field f. */
static void field_good(line_t *l, int f, uint64_t *s)
{
    static const char HEX[] = "0123456789abcdef0123456789ABCDEF";
    char tmp[32];
    uint64_t z = rnd(s);
    fld_begin(l);
    if (f == 0) {
        fld_str(l, (z & 1) ? "1" : "0");
    } else if (f <= ND) {
        switch (z % 10) {
        case 0: break; /* null */
        case 1: fld_str(l, PICK(INT_OK, z >> 8)); break;
        case 2: snprintf(tmp, sizeof tmp, "-%d", (int)((z >> 8) % 4)); fld_str(l, tmp); break;
        default: {
            int bits = (int)((z >> 8) % 31);
            snprintf(tmp, sizeof tmp, "%lld", (long long)((z >> 16) & ((1ULL << bits) - 1)));
            fld_str(l, tmp);
        }
        }
    } else {
        switch (z % 10) {
        case 0: break;
        case 1: fld_str(l, PICK(HEX_OK, z >> 8)); break;
        default: {
            int nd = (z % 10 < 8) ? 8 : 1 + (int)((z >> 8) % 8);
            int upper = (z >> 12) % 8 == 0 ? 16 : 0;
            for (int k = 0; k < nd; k++)
                tmp[k] = HEX[((z >> (16 + 4 * k)) & 15) + (unsigned)upper];
            tmp[nd] = 0;
            fld_str(l, tmp);
        }
        }
    }
    fld_end(l);
}

/* One field-level fault in a random field of its kind. */
static void field_fault(line_t *l, uint64_t *s)
{
    uint64_t z = rnd(s);
    int d = 1 + (int)((z >> 8) % ND), c = 1 + ND + (int)((z >> 16) % NS);
    switch (z % 6) {
    case 0: fld_set(l, 0, PICK(LABEL_BAD, z >> 24)); break;
    case 1: fld_set(l, d, PICK(INT_SYNTAX, z >> 24)); break;
    case 2: fld_set(l, d, PICK(INT_RANGE, z >> 24)); break;
    case 3: fld_set(l, c, PICK(HEX_SYNTAX, z >> 24)); break;
    default: fld_set(l, c, PICK(HEX_RANGE, z >> 24)); break;
    }
}

/* A field of k leading zeros and a digit: valid, as long as one wants. */
static void field_zeros(line_t *l, int f, int64_t k)
{
    l->off[f] = (int)l->used;
    memset(l->a + l->used, '0', (size_t)k);
    l->a[l->used + (size_t)k] = '7';
    l->used += (size_t)k + 1;
    l->len[f] = (int)k + 1;
}

static int line_length(const line_t *l)
{
    int n = l->nf > 0 ? l->nf - 1 : 0;
    for (int f = 0; f < l->nf; f++)
        n += l->len[f];
    return n;
}

/* Appends one random line of every kind (see the header) to x. */
static void gen_line(text_t *x, uint64_t *s, int64_t max_line)
{
    static line_t l;
    l.used = 0;
    l.nf = 0;
    for (int f = 0; f < NF; f++)
        field_good(&l, f, s);
    uint64_t z = rnd(s);
    int kind = (int)(z % 100);
    if (kind < 50) {
        /* good */
    } else if (kind < 53) { /* field count */
        int want = (z & 256) ? (int)((z >> 16) % 80) : (z & 512) ? NF - 1 : NF + 1;
        for (; l.nf < want; l.nf++)
            fld_set(&l, l.nf, "1");
        l.nf = want;
    } else if (kind < 70) {
        field_fault(&l, s);
    } else if (kind < 74) { /* two faults: the precedence */
        field_fault(&l, s);
        field_fault(&l, s);
    } else if (kind < 76) { /* longer than max_line: leading zeros */
        field_zeros(&l, 1 + (int)((z >> 8) % ND), max_line + (int64_t)((z >> 20) % 40));
    } else if (kind < 80) { /* long but within max_line (beyond a warp's 512 bytes if it can) */
        int64_t room = max_line - line_length(&l) - 2;
        if (room > 0)
            field_zeros(&l, 1 + (int)((z >> 8) % ND), (int64_t)((z >> 20) % (uint64_t)room));
    } else if (kind < 82) { /* exactly max_line or one more */
        int f = 1 + (int)((z >> 8) % ND);
        l.len[f] = 0;
        int64_t k = max_line - line_length(&l) - 1 + (int64_t)((z >> 16) & 1);
        if (k >= 0)
            field_zeros(&l, f, k);
    }
    size_t at = x->n;
    for (int f = 0; f < l.nf; f++) {
        if (f)
            put(x, "\t", 1);
        put(x, l.a + l.off[f], (size_t)l.len[f]);
    }
    size_t len = x->n - at;
    if (kind >= 82 && kind < 87 && len > 0) { /* a binary byte or '\r' anywhere */
        x->text[at + (rnd(s) % len)] = (char)PICK(BIN, z >> 24);
    } else if (kind >= 87 && kind < 89) {
        x->n = at; /* empty */
    } else if (kind >= 89 && kind < 91) {
        x->n = at;
        for (int f = 0; f < NF - 1; f++)
            put(x, "\t", 1);
    } else if (kind >= 91 && kind < 94) { /* printable garbage with tabs */
        x->n = at;
        int k = (int)((z >> 8) % 300);
        for (int j = 0; j < k; j++) {
            char ch = (char)(0x20 + rnd(s) % 0x5f);
            if (ch == '~')
                ch = '\t';
            put(x, &ch, 1);
        }
    } else if (kind >= 94 && kind < 96) { /* any bytes but '\n' */
        x->n = at;
        int k = (int)((z >> 8) % 300);
        for (int j = 0; j < k; j++) {
            char ch = (char)(rnd(s) & 0xff);
            if (ch == '\n')
                ch = '\t';
            put(x, &ch, 1);
        }
    } else if (kind >= 96 && len > 40) { /* a binary byte near the end (a later stride) */
        x->text[at + len - 1 - (rnd(s) % 40)] = (char)PICK(BIN, z >> 24);
    }
    if ((z >> 40) % 10 == 0)
        put(x, "\r", 1); /* CRLF */
    end_line(x);
}

static void gen_text(text_t *x, uint64_t seed, int64_t lines, int64_t max_line)
{
    memset(x, 0, sizeof *x);
    uint64_t s = seed;
    x->start = calloc(2, sizeof *x->start);
    x->lcap = 2;
    for (int64_t i = 0; i < lines; i++)
        gen_line(x, &s, max_line);
    if (x->text == NULL) /* no lines: still a valid buffer */
        put(x, "", 0);
}

/* ------------------------------------------------------------ expectations */

/* The CPU parser's rows as a rap_batch (the reader's copy_rows). */
static void expect_batch(const rap_parsed *o, rap_batch *b)
{
    const int64_t B = b->cap, R = o->cap, n = o->n_used;
    memcpy(b->label, o->label, (size_t)n * sizeof(float));
    for (int j = 0; j < ND; j++) {
        memcpy(b->dense + j * B, o->dense + j * R, (size_t)n * sizeof(float));
        memcpy(b->dense_valid + j * B, o->dense_valid + j * R, (size_t)n);
    }
    for (int j = 0; j < NS; j++) {
        int64_t *off = b->sparse_off + j * (B + 1), c = 0;
        off[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            if (o->sparse_valid[j * R + i])
                b->sparse_ids[j * B + c++] = o->sparse[j * R + i];
            off[i + 1] = c;
        }
        memcpy(b->sparse_valid + j * B, o->sparse_valid + j * R, (size_t)n);
    }
    b->rows = n;
}

/* The rows [0, n) of a and b agree, bit for bit (ids up to the last offset). */
static bool same_rows(rap_test_ctx *t, const rap_batch *a, const rap_batch *b, int64_t n,
                      const char *what)
{
    const int64_t A = a->cap, B = b->cap;
    bool ok = memcmp(a->label, b->label, (size_t)n * 4) == 0;
    for (int j = 0; ok && j < ND; j++)
        ok = memcmp(a->dense + j * A, b->dense + j * B, (size_t)n * 4) == 0 &&
             memcmp(a->dense_valid + j * A, b->dense_valid + j * B, (size_t)n) == 0;
    for (int j = 0; ok && j < NS; j++) {
        const int64_t *oa = a->sparse_off + j * (A + 1), *ob = b->sparse_off + j * (B + 1);
        ok = memcmp(oa, ob, (size_t)(n + 1) * 8) == 0 &&
             memcmp(a->sparse_ids + j * A, b->sparse_ids + j * B, (size_t)oa[n] * 8) == 0 &&
             memcmp(a->sparse_valid + j * A, b->sparse_valid + j * B, (size_t)n) == 0;
    }
    CHECK_MSG(ok, "%s: the rows differ", what);
    return ok;
}

/* The field the CPU parser's message names (parse_ref.h's rap_parse_rej). */
static int msg_field(int reason, const char *msg, const char *line, size_t len)
{
    const char *p;
    int v;
    size_t at;
    switch (reason) {
    case RAP_REJ_LABEL: return 0;
    case RAP_REJ_LONG: return -1;
    case RAP_REJ_FIELDS:
        p = strstr(msg, "got ");
        return p && sscanf(p + 4, "%d", &v) == 1 ? (v < NF ? v : NF) : -99;
    case RAP_REJ_BINARY: {
        p = strstr(msg, "at byte ");
        if (!p || sscanf(p + 8, "%zu", &at) != 1 || at < 1 || at > len)
            return -99;
        int tabs = 0;
        for (size_t i = 0; i + 1 < at; i++)
            tabs += line[i] == '\t';
        return tabs < NF ? tabs : NF;
    }
    default:
        if ((p = strstr(msg, "int_")) && sscanf(p + 4, "%d", &v) == 1)
            return 1 + v;
        if ((p = strstr(msg, "cat_")) && sscanf(p + 4, "%d", &v) == 1)
            return 1 + ND + v;
        return -99;
    }
}

/* The reference on x (lines [0, n)) into a fresh batch poisoned with 0xab.
 * rej gets room for n. */
static rap_status run_ref(const text_t *x, int64_t max_line, rap_batch *b, rap_parse_rej **rej,
                          rap_parse_result *res)
{
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    RAP_TRY(rap_batch_create(b, rap_schema_criteo(), x->lines > 0 ? x->lines : 1, false));
    memset(b->block, 0xab, b->block_bytes);
    *rej = malloc(((size_t)x->lines + 1) * sizeof **rej);
    return rap_parse_ref(&lay, x->text, (int64_t)x->n, x->start, x->lines, max_line, b, *rej, res);
}

/* The reference against the CPU parser on x: rows, rejects (line, pos,
 * reason, the field of the message), counts and the firsts of each reason. */
static void check_against_cpu(rap_test_ctx *t, const text_t *x, int64_t max_line,
                              const char *what)
{
    rap_parsed o;
    memset(&o, 0, sizeof o);
    REQUIRE_OK(rap_parse_chunk(x->text, x->n, max_line, &o));
    rap_batch want, got;
    REQUIRE_OK(rap_batch_create(&want, rap_schema_criteo(), o.n_used > 0 ? o.n_used : 1, false));
    expect_batch(&o, &want);
    rap_parse_rej *rej;
    rap_parse_result res;
    REQUIRE_OK(run_ref(x, max_line, &got, &rej, &res));
    CHECK_MSG(res.n_lines == x->lines && res.rows_used == o.n_used &&
                  res.rows_rejected == o.n_rej && res.rows_used + res.rows_rejected == x->lines,
              "%s: %lld lines, used %lld + rejected %lld; the CPU parser %lld + %lld", what,
              (long long)res.n_lines, (long long)res.rows_used, (long long)res.rows_rejected,
              (long long)o.n_used, (long long)o.n_rej);
    same_rows(t, &want, &got, o.n_used, what);
    int64_t per[RAP_REJ_COUNT] = {0}, bad = 0;
    for (int64_t k = 0; k < o.n_rej && k < res.rows_rejected; k++) {
        const rap_parse_reject *e = &o.rej[k];
        const rap_parse_rej *g = &rej[k];
        char msg[512];
        const char *ln = x->text + x->start[e->line];
        size_t len = (size_t)(x->start[e->line + 1] - x->start[e->line] - 1);
        int why = rap_parse_ref_message(x->text, x->start, e->line, max_line, msg, sizeof msg);
        int want_field = msg_field(why, msg, ln, len);
        if (g->line != e->line || g->pos != e->pos || g->reason != e->reason ||
            why != e->reason || g->field != want_field) {
            if (bad++ < 5)
                rap_test_fail(t, __FILE__, __LINE__,
                              "%s: reject %lld: line %d pos %d reason %d field %d; the CPU "
                              "parser line %lld pos %lld reason %d field %d (%s)", what,
                              (long long)k, g->line, g->pos, g->reason, g->field,
                              (long long)e->line, (long long)e->pos, e->reason, want_field, msg);
        }
        if (per[e->reason] < RAP_PARSE_FIRST) {
            const rap_parse_rej *f = &res.first[e->reason][per[e->reason]];
            CHECK(f->line == e->line && f->pos == e->pos && f->reason == e->reason);
        }
        per[e->reason]++;
        if (k == 0)
            CHECK(res.first_line == e->line);
    }
    if (o.n_rej == 0)
        CHECK(res.first_line == -1);
    CHECK(memcmp(per, res.rejected, sizeof per) == 0);
    for (int r = 0; r < RAP_REJ_COUNT; r++)
        for (int64_t k = per[r]; k < RAP_PARSE_FIRST; k++)
            CHECK(res.first[r][k].line == -1 && res.first[r][k].reason == -1);
    free(rej);
    rap_batch_free(&want);
    rap_batch_free(&got);
    rap_parsed_free(&o);
}

/* ------------------------------------------------------------ CPU tests */

RAP_TEST(parse_ref_layout)
{
    rap_parse_layout l;
    rap_parse_layout_criteo(&l);
    CHECK_OK(rap_parse_layout_check(&l));
    CHECK(l.n_fields == NF && l.n_dense == ND && l.n_sparse == NS);
    rap_parse_layout b = l;
    b.f[5].kind = RAP_COL_LABEL;
    b.f[5].enc = RAP_ENC_LABEL01;
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG); /* two labels, dense 4 missing */
    b = l;
    b.f[20].col = 3; /* sparse 3 twice, 6 missing */
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    b = l;
    b.f[2].enc = RAP_ENC_HEX32;
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    b = l;
    b.n_fields = RAP_PARSE_MAX_FIELDS + 1;
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    /* a skipped field is allowed: 41 fields, the last skipped */
    b = l;
    b.f[40] = (rap_parse_field){RAP_COL_SKIP, RAP_ENC_NONE, 0, 0, 0, -1};
    b.n_fields = 41;
    CHECK_OK(rap_parse_layout_check(&b));
}

/* The byte masks against their definition, every byte value at every
 * position among random neighbours, and every [lo, hi). */
RAP_TEST(parse_ref_masks)
{
    uint64_t s = 9;
    for (int c = 0; c < 256; c++) {
        for (int k = 0; k < 16; k++) {
            uint8_t b[16];
            for (int i = 0; i < 16; i++)
                b[i] = (uint8_t)rnd(&s);
            b[k] = (uint8_t)c;
            uint32_t w[4], tab, bin;
            memcpy(w, b, 16);
            int lo = (int)(rnd(&s) % 16), hi = lo + 1 + (int)(rnd(&s) % (uint64_t)(16 - lo));
            pg_masks16(w, lo, hi, &tab, &bin);
            for (int i = 0; i < 16; i++) {
                bool in = i >= lo && i < hi;
                bool want_tab = in && b[i] == '\t';
                bool want_bin = in && ((b[i] < 0x20 && b[i] != '\t') || b[i] >= 0x7f);
                if (((tab >> i) & 1) != want_tab || ((bin >> i) & 1) != want_bin) {
                    CHECK_MSG(false, "byte 0x%02x at %d (range %d..%d): tab %u bin %u", b[i], i,
                              lo, hi, (tab >> i) & 1, (bin >> i) & 1);
                    return;
                }
            }
        }
    }
    for (int c = 0; c < 256; c++) { /* pg_hex is parse.c's HEXV */
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        CHECK((pg_hex((unsigned)c) < 16) == hex);
    }
}

/* One field by pg_field (the one-word conversion, then the loops) and by
 * the loops alone: the same class, flags and value bits. Returns whether
 * the one-word path decided it; *bad counts disagreements. */
static bool field_words_vs_loops(rap_test_ctx *t, uint32_t d, const rap_parse_format *fm,
                                 const uint8_t *b, int32_t n, int *bad)
{
    float f1 = -7.0f, f2 = -7.0f, f3 = -7.0f;
    int64_t i1 = -7, i2 = -7, i3 = -7;
    int32_t c1 = -7, c2 = -7, c3 = -7;
    int v1 = -7, v2 = -7, v3 = -7;
    int k1 = pg_field(d, fm, b, n, &f1, &i1, NULL, &c1, &v1);
    int k2 = pg_field_loops(d, fm, b, n, &f2, &i2, NULL, &c2, &v2);
    int k3 = pg_field_fast(d, fm, b, n, &f3, &i3, &c3, &v3);
    uint32_t u1, u2;
    memcpy(&u1, &f1, 4);
    memcpy(&u2, &f2, 4);
    bool same = k1 == k2 && c1 == c2 && v1 == v2 && u1 == u2 && i1 == i2;
    if (!same && (*bad)++ < 5)
        CHECK_MSG(false, "enc %d kind %d field \"%.*s\" (%d bytes): class %d/%d cnt %d/%d "
                  "valid %d/%d value %g/%g id %lld/%lld", PG_DESC_ENC(d), PG_DESC_KIND(d), (int)n,
                  (const char *)b, (int)n, k1, k2, (int)c1, (int)c2, v1, v2, (double)f1,
                  (double)f2, (long long)i1, (long long)i2);
    return k3 >= 0;
}

/* pg_field_fast against pg_field_loops: every encoding and kind, fields
 * of 0 to 10 bytes from an alphabet of digits, both cases of hex, signs
 * and the bytes just outside each range ('/', ':', '@', 'G', '`', 'g',
 * 0x80, 0xff, tab, NUL), plus every byte at every position of a valid
 * field; with and without quoting. The one-word path must decide most
 * Criteo fields (so this cannot pass by always deferring to the loops). */
RAP_TEST(parse_field_words_equal_loops)
{
    static const char alpha[] = "0123456789abcdefABCDEF-+/:@G`g \t\x80\xff";
    const int na = (int)sizeof alpha - 1 + 1; /* and NUL */
    static const struct { int kind, enc; } kinds[] = {
        {RAP_COL_LABEL, RAP_ENC_LABEL01}, {RAP_COL_DENSE, RAP_ENC_INT32},
        {RAP_COL_SPARSE, RAP_ENC_HEX32},  {RAP_COL_SPARSE, RAP_ENC_HEX64},
        {RAP_COL_DENSE, RAP_ENC_FLOAT},   {RAP_COL_SPARSE, RAP_ENC_DEC64},
        {RAP_COL_SPARSE, RAP_ENC_INT32},  {RAP_COL_SKIP, RAP_ENC_NONE}};
    uint64_t s = 21;
    int bad = 0;
    int64_t decided = 0, total = 0;
    for (int q = 0; q < 2; q++) {
        rap_parse_format fm;
        memset(&fm, 0, sizeof fm);
        fm.delim = q ? ',' : '\t';
        fm.quote = (uint8_t)q;
        fm.max_list = 32;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            rap_parse_field f = {(uint8_t)kinds[k].kind, (uint8_t)kinds[k].enc, 0, 0, 0, -1};
            const uint32_t d = pg_desc(f);
            for (int it = 0; it < 40000; it++) {
                uint8_t b[16] = {0};
                int32_t n = (int32_t)(rnd(&s) % 11);
                int mode = (int)(rnd(&s) % 4);
                for (int32_t i = 0; i < n; i++) {
                    int c = (int)(rnd(&s) % (uint64_t)(mode == 0 ? na : mode == 1 ? 10 : 22));
                    b[i] = (uint8_t)(c < na - 1 ? alpha[c] : 0);
                }
                if (mode == 3 && n > 0 && rnd(&s) % 2)
                    b[0] = '-';
                decided += field_words_vs_loops(t, d, &fm, b, n, &bad);
                total++;
            }
            for (int32_t n = 1; n <= 9; n++) /* every byte at every position */
                for (int32_t at = 0; at < n; at++)
                    for (int c = 0; c < 256; c++) {
                        uint8_t b[16];
                        memset(b, kinds[k].enc == RAP_ENC_LABEL01 ? '1' : '7', sizeof b);
                        b[at] = (uint8_t)c;
                        decided += field_words_vs_loops(t, d, &fm, b, n, &bad);
                        total++;
                    }
        }
    }
    CHECK_MSG(bad == 0, "%d of %lld fields differ", bad, (long long)total);
    /* Criteo's common fields are decided in one word, and answer by hand */
    rap_parse_format fm;
    memset(&fm, 0, sizeof fm);
    fm.delim = '\t';
    rap_parse_field fh = {RAP_COL_SPARSE, RAP_ENC_HEX32, 0, 0, 0, -1};
    rap_parse_field fd = {RAP_COL_DENSE, RAP_ENC_INT32, 0, 0, 0, -1};
    float fv = 0;
    int64_t iv = 0;
    int32_t cnt = 0;
    int valid = 0;
    CHECK(pg_field_fast(pg_desc(fh), &fm, (const uint8_t *)"fFfF0a19", 8, &fv, &iv, &cnt,
                        &valid) == PG_OK && iv == 0xfFfF0a19 && cnt == 1 && valid == 1);
    CHECK(pg_field_fast(pg_desc(fh), &fm, (const uint8_t *)"7", 1, &fv, &iv, &cnt, &valid) ==
              PG_OK && iv == 7);
    CHECK(pg_field_fast(pg_desc(fd), &fm, (const uint8_t *)"-0012345", 8, &fv, &iv, &cnt,
                        &valid) == PG_OK && fv == -12345.0f && cnt == 0 && valid == 1);
    CHECK(pg_field_fast(pg_desc(fd), &fm, (const uint8_t *)"99999999", 8, &fv, &iv, &cnt,
                        &valid) == PG_OK && fv == 99999999.0f);
    CHECK(pg_field_fast(pg_desc(fd), &fm, (const uint8_t *)"123456789", 9, &fv, &iv, &cnt,
                        &valid) == -1);
    CHECK(pg_field_fast(pg_desc(fd), &fm, (const uint8_t *)"12a", 3, &fv, &iv, &cnt, &valid) ==
          -1);
    CHECK_MSG(decided > total / 8, "the one-word path decided %lld of %lld fields",
              (long long)decided, (long long)total);
}

/* Every edge value in every dense and sparse column, one line each: the
 * reference and the CPU parser agree, and a few answers pinned by hand. */
RAP_TEST(parse_ref_edge_values)
{
    text_t x;
    memset(&x, 0, sizeof x);
    x.start = calloc(2, sizeof *x.start);
    x.lcap = 2;
    const char **lists[] = {INT_OK, INT_SYNTAX, INT_RANGE, HEX_OK, HEX_SYNTAX, HEX_RANGE};
    const size_t counts[] = {sizeof INT_OK / sizeof *INT_OK, sizeof INT_SYNTAX / sizeof *INT_SYNTAX,
                             sizeof INT_RANGE / sizeof *INT_RANGE, sizeof HEX_OK / sizeof *HEX_OK,
                             sizeof HEX_SYNTAX / sizeof *HEX_SYNTAX,
                             sizeof HEX_RANGE / sizeof *HEX_RANGE};
    for (int li = 0; li < 6; li++) {
        for (size_t v = 0; v < counts[li]; v++) {
            for (int f = 1; f < NF; f++) {
                put(&x, "1", 1);
                for (int g = 1; g < NF; g++) {
                    put(&x, "\t", 1);
                    const char *val = g == f ? lists[li][v] : (g <= ND ? "5" : "0a");
                    put(&x, val, strlen(val));
                }
                end_line(&x);
            }
        }
    }
    /* a binary byte after 100 and after 70000 tabs (the field past the last) */
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < (k ? 70000 : 100); i++)
            put(&x, "\t", 1);
        put(&x, "\x01", 1);
        end_line(&x);
    }
    check_against_cpu(t, &x, 65536, "edge values");
    /* pinned: int_0 = 2147483648 is range, int_0 = -2147483648 is good, a
     * 9-digit category is range, a bad digit after it beats it, a bad
     * integer beats both */
    static const struct {
        int f[3];
        const char *v[3];
    } hand[] = {
        {{1, 0, 0}, {"2147483648", NULL, NULL}},
        {{1, 0, 0}, {"-2147483648", NULL, NULL}},
        {{14, 0, 0}, {"123456789", NULL, NULL}},
        {{14, 15, 0}, {"123456789", "g", NULL}},
        {{13, 14, 15}, {"1x", "123456789", "g"}},
    };
    const int want[] = {RAP_REJ_RANGE, -1, RAP_REJ_RANGE, RAP_REJ_CAT, RAP_REJ_INT};
    const int want_field[] = {1, 0, 14, 15, 13};
    text_free(&x);
    memset(&x, 0, sizeof x);
    x.start = calloc(2, sizeof *x.start);
    x.lcap = 2;
    for (int i = 0; i < 5; i++) {
        put(&x, "0", 1);
        for (int g = 1; g < NF; g++) {
            put(&x, "\t", 1);
            for (int k = 0; k < 3; k++)
                if (hand[i].v[k] && hand[i].f[k] == g)
                    put(&x, hand[i].v[k], strlen(hand[i].v[k]));
        }
        end_line(&x);
    }
    rap_batch b;
    rap_parse_rej *rej;
    rap_parse_result res;
    REQUIRE_OK(run_ref(&x, 65536, &b, &rej, &res));
    CHECK(res.rows_used == 1 && res.rows_rejected == 4 && b.dense[0] == -2147483648.0f);
    for (int i = 0, k = 0; i < 5; i++) {
        if (want[i] < 0)
            continue;
        CHECK(rej[k].line == i && rej[k].reason == want[i] && rej[k].field == want_field[i]);
        k++;
    }
    free(rej);
    rap_batch_free(&b);
    text_free(&x);
    gen_text(&x, 1, 0, 65536);
    check_against_cpu(t, &x, 65536, "no lines");
    text_free(&x);
}

/* Random text with every kind of line, at several max_line (a small one
 * makes many ordinary lines long; a large one lets good lines pass 512
 * bytes, a warp's stride). */
RAP_TEST(parse_ref_matches_cpu_parser)
{
    const int64_t max_lines[] = {300, 2000, 65536};
    for (int m = 0; m < 3; m++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            text_t x;
            gen_text(&x, seed * 7919 + (uint64_t)m, 6000, max_lines[m]);
            char what[64];
            snprintf(what, sizeof what, "seed %llu, max_line %lld", (unsigned long long)seed,
                     (long long)max_lines[m]);
            check_against_cpu(t, &x, max_lines[m], what);
            text_free(&x);
        }
    }
}

/* Line batches from the cutter (long lines cut to max_line + 1 bytes, a
 * last line without '\n', odd batch sizes): the reference on each batch
 * against the CPU parser on the same batch. */
RAP_TEST(parse_ref_cutter_batches)
{
    const int64_t max_line = 300;
    text_t x;
    gen_text(&x, 4242, 5000, max_line);
    x.n--; /* the last line without '\n' */
    char path[512];
    rap_test_path(path, sizeof path, "parse_gpu_cutter.tsv");
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(x.text, 1, x.n, f) == x.n);
    fclose(f);
    const int64_t Bs[] = {1, 7, 63, 64, 65, 1000};
    for (int k = 0; k < 6; k++) {
        rap_lines_config lc = {Bs[k], max_line, 0, 4096};
        rap_lines *c;
        REQUIRE_OK(rap_lines_create(&lc, &c));
        rap_source *src;
        REQUIRE_OK(rap_source_open(path, &src));
        rap_lines_start(c, src);
        rap_line_batch b;
        int64_t lines = 0;
        rap_status st;
        while ((st = rap_lines_next(c, &b)) == RAP_OK && b.n > 0) {
            text_t y = {(char *)b.text, (size_t)b.bytes, 0, (int32_t *)b.start, b.n, 0};
            char what[64];
            snprintf(what, sizeof what, "B %lld, batch at line %lld", (long long)Bs[k],
                     (long long)b.first_line);
            check_against_cpu(t, &y, max_line, what);
            lines += b.n;
            if (t->failures)
                break;
        }
        CHECK_OK(st);
        CHECK(lines == x.lines);
        rap_source_close(src);
        rap_lines_free(c);
    }
    text_free(&x);
}

RAP_TEST(parse_ref_args)
{
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    text_t x;
    gen_text(&x, 5, 100, 65536);
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 99, false));
    rap_parse_rej rej[100];
    rap_parse_result res;
    /* cap 99 < 100 lines */
    CHECK(rap_parse_ref(&lay, x.text, (int64_t)x.n, x.start, x.lines, 65536, &b, rej, &res) ==
          RAP_ERR_ARG);
    /* offsets past the text are clamped: nothing read outside it */
    CHECK_OK(rap_parse_ref(&lay, x.text, 10, x.start, 99, 65536, &b, rej, &res));
    CHECK(res.rows_used == 0 && res.rows_rejected == 99);
    rap_batch_free(&b);
    rap_schema wrong = {12, 26, 1};
    REQUIRE_OK(rap_batch_create(&b, wrong, 100, false));
    CHECK(rap_parse_ref(&lay, x.text, (int64_t)x.n, x.start, x.lines, 65536, &b, rej, &res) ==
          RAP_ERR_ARG);
    rap_batch_free(&b);
    text_free(&x);
}

/* ------------------------------------------------------------ GPU tests */

#ifdef RAP_HAVE_CUDA
/* The kernels on x (uploaded to the parser's own buffers) in pieces cut
 * at the tile multiples in cuts (ascending, ending with x->lines), into a
 * device batch of capacity cap poisoned with 0xab: the block, the rejects
 * and the result come back to the host. */
static rap_status run_gpu(rap_parse_gpu *p, const text_t *x, int64_t cap, const int64_t *cuts,
                          int ncuts, void **block, rap_parse_rej **rej, rap_parse_result *res)
{
    rap_schema sch = rap_schema_criteo();
    size_t bytes = rap_batch_bytes(sch, cap);
    void *d = NULL;
    RAP_TRY(rap_cuda_malloc(&d, bytes, "test batch"));
    rap_batch dev;
    rap_batch_view(&dev, sch, cap, d);
    rap_status st = RAP_OK;
    if (cudaMemset(d, 0xab, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        st = rap_fail(RAP_ERR_CUDA, "test: cudaMemset");
    if (st == RAP_OK)
        st = rap_parse_gpu_upload(p, x->text, (int64_t)x->n, x->start, x->lines);
    uint64_t ticket = 0;
    if (st == RAP_OK && ncuts == 0) /* rap_parse_gpu_run: its config's launches */
        st = rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)x->n, rap_parse_gpu_starts(p),
                               x->lines, &dev, NULL, &ticket);
    if (st == RAP_OK && ncuts > 0)
        st = rap_parse_gpu_begin(p, rap_parse_gpu_text(p), (int64_t)x->n,
                                 rap_parse_gpu_starts(p), x->lines, &dev);
    int64_t at = 0;
    for (int k = 0; st == RAP_OK && k < ncuts; k++) {
        st = rap_parse_gpu_piece(p, at, cuts[k]);
        at = cuts[k];
    }
    if (st == RAP_OK && ncuts > 0)
        st = rap_parse_gpu_end(p, NULL, &ticket);
    bool ready = false;
    if (st == RAP_OK)
        st = rap_parse_gpu_result(p, ticket, true, res, &ready);
    *block = malloc(bytes);
    *rej = malloc(((size_t)x->lines + 1) * sizeof **rej);
    if (st == RAP_OK && !ready)
        st = rap_fail(RAP_ERR_INTERNAL, "test: result not ready after a wait");
    if (st == RAP_OK && (cudaMemcpy(*block, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
                         cudaMemcpy(*rej, rap_parse_gpu_rejects(p),
                                    (size_t)res->rows_rejected * sizeof **rej,
                                    cudaMemcpyDeviceToHost) != cudaSuccess))
        st = rap_fail(RAP_ERR_CUDA, "test: copy back: %s", cudaGetErrorString(cudaGetLastError()));
    rap_cuda_free(d);
    return st;
}

/* Which array of b byte off of its block is in, and where: for messages. */
static void where(const rap_batch *b, size_t off, char *out, size_t n)
{
    const char *base = (const char *)b->block;
    const struct {
        const char *name;
        const void *p;
        size_t elem, col;
    } a[] = {
        {"label", b->label, 4, (size_t)b->cap},
        {"dense", b->dense, 4, (size_t)b->cap},
        {"dense_valid", b->dense_valid, 1, (size_t)b->cap},
        {"sparse_off", b->sparse_off, 8, (size_t)b->cap + 1},
        {"sparse_ids", b->sparse_ids, 8, (size_t)b->cap},
        {"sparse_valid", b->sparse_valid, 1, (size_t)b->cap},
    };
    int k = 0;
    while (k < 5 && off >= (size_t)((const char *)a[k + 1].p - base))
        k++;
    size_t e = (off - (size_t)((const char *)a[k].p - base)) / a[k].elem;
    snprintf(out, n, "%s column %zu row %zu", a[k].name, e / a[k].col, e % a[k].col);
}

/* GPU == reference: the whole block (poisoned alike), rejects, result. */
static void check_gpu(rap_test_ctx *t, rap_parse_gpu *p, const text_t *x, int64_t max_line,
                      const int64_t *cuts, int ncuts, const char *what)
{
    rap_batch want;
    rap_parse_rej *rej_w, *rej_g;
    rap_parse_result res_w, res_g;
    REQUIRE_OK(run_ref(x, max_line, &want, &rej_w, &res_w));
    void *block;
    REQUIRE_OK(run_gpu(p, x, want.cap, cuts, ncuts, &block, &rej_g, &res_g));
    CHECK_MSG(memcmp(&res_w, &res_g, sizeof res_w) == 0,
              "%s: results differ (used %lld / %lld, rejected %lld / %lld)", what,
              (long long)res_w.rows_used, (long long)res_g.rows_used,
              (long long)res_w.rows_rejected, (long long)res_g.rows_rejected);
    for (int64_t k = 0; k < res_w.rows_rejected && k < res_g.rows_rejected; k++) {
        const rap_parse_rej *a = &rej_w[k], *b = &rej_g[k];
        if (memcmp(a, b, sizeof *a) != 0) {
            CHECK_MSG(false, "%s: reject %lld: reference line %d pos %d reason %d field %d, "
                             "GPU line %d pos %d reason %d field %d", what, (long long)k,
                      a->line, a->pos, a->reason, a->field, b->line, b->pos, b->reason,
                      b->field);
            break;
        }
    }
    if (memcmp(want.block, block, want.block_bytes) != 0) {
        size_t i = 0, bad = 0;
        const unsigned char *w = want.block, *g = block;
        while (w[i] == g[i])
            i++;
        for (size_t j = i; j < want.block_bytes; j++)
            bad += w[j] != g[j];
        char at[128];
        where(&want, i, at, sizeof at);
        CHECK_MSG(false, "%s: batch blocks differ in %zu of %zu bytes, first at byte %zu (%s): "
                         "reference 0x%02x, GPU 0x%02x", what, bad, want.block_bytes, i, at,
                  w[i], g[i]);
    }
    free(block);
    free(rej_g);
    free(rej_w);
    rap_batch_free(&want);
}
#endif

/* Random text, batches of every odd size up to a few tiles and larger,
 * whole and in random tile-aligned pieces. */
RAP_TEST(parse_gpu_matches_ref)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const int64_t max_line = 2000;
    text_t all;
    gen_text(&all, 31337, 20000, max_line);
    rap_parse_gpu_config pc = {20000, (int64_t)all.n, max_line, NULL, 0};
    rap_parse_gpu *p, *p3;
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
    pc.tiles_per_launch = 3; /* rap_parse_gpu_run in launches of 3 tiles */
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p3));
    /* blocks of 16 and 32 warps (RAP_PARSE_GPU_WARPS, read at create) */
    const char *wv[2] = {"16", "32"};
    rap_parse_gpu *pw[2];
    pc.tiles_per_launch = 0;
    for (int w = 0; w < 2; w++) {
        setenv("RAP_PARSE_GPU_WARPS", wv[w], 1);
        rap_status ws = rap_parse_gpu_create(&pc, NULL, &pw[w]);
        unsetenv("RAP_PARSE_GPU_WARPS");
        REQUIRE_OK(ws);
    }
    const int64_t sizes[] = {1, 2, 7, 31, 63, 64, 65, 127, 129, 1000, 4099, 20000};
    uint64_t s = 77;
    for (int k = 0; k < 12 && !t->failures; k++) {
        int64_t n = sizes[k], first = (int64_t)(rnd(&s) % (uint64_t)(all.lines - n + 1));
        text_t x = {all.text + all.start[first], 0, 0, NULL, n, 0};
        x.n = (size_t)(all.start[first + n] - all.start[first]);
        x.start = malloc(((size_t)n + 1) * sizeof *x.start);
        for (int64_t i = 0; i <= n; i++)
            x.start[i] = all.start[first + i] - all.start[first];
        char what[64];
        snprintf(what, sizeof what, "%lld lines from %lld", (long long)n, (long long)first);
        int64_t whole[] = {n};
        check_gpu(t, p, &x, max_line, whole, 1, what);
        /* pieces: random tile multiples */
        int64_t cuts[64];
        int nc = 0;
        for (int64_t at = 0; at < n && nc < 63;) {
            at += RAP_PARSE_TILE * (int64_t)(1 + rnd(&s) % 20);
            cuts[nc++] = at < n ? at : n;
            if (at >= n)
                break;
        }
        cuts[nc - 1] = n;
        snprintf(what, sizeof what, "%lld lines from %lld, %d pieces", (long long)n,
                 (long long)first, nc);
        check_gpu(t, p, &x, max_line, cuts, nc, what);
        snprintf(what, sizeof what, "%lld lines from %lld, 3 tiles a launch", (long long)n,
                 (long long)first);
        check_gpu(t, p3, &x, max_line, NULL, 0, what);
        for (int w = 0; w < 2; w++) {
            snprintf(what, sizeof what, "%lld lines from %lld, %s warps a block", (long long)n,
                     (long long)first, wv[w]);
            check_gpu(t, pw[w], &x, max_line, whole, 1, what);
        }
        free(x.start);
    }
    for (int w = 0; w < 2; w++)
        rap_parse_gpu_free(pw[w]);
    rap_parse_gpu_free(p3);
    rap_parse_gpu_free(p);
    text_free(&all);
#endif
}

/* Lines past a warp's stride: good lines of 513 to 5000 bytes (leading
 * zeros), long ones with a binary byte near their end, one per batch and
 * all in one batch; and max_line 300 (most lines long). */
RAP_TEST(parse_gpu_long_lines)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const int64_t max_line = 5000;
    text_t x;
    memset(&x, 0, sizeof x);
    x.start = calloc(2, sizeof *x.start);
    x.lcap = 2;
    uint64_t s = 3;
    for (int i = 0; i < 200; i++) {
        static line_t l;
        l.used = 0;
        l.nf = 0;
        for (int f = 0; f < NF; f++)
            field_good(&l, f, &s);
        int64_t k = 513 + (int64_t)(rnd(&s) % 4400);
        field_zeros(&l, 1 + (int)(rnd(&s) % ND), k);
        size_t at = x.n;
        for (int f = 0; f < l.nf; f++) {
            if (f)
                put(&x, "\t", 1);
            put(&x, l.a + l.off[f], (size_t)l.len[f]);
        }
        if (i % 5 == 1)
            x.text[x.n - 1 - rnd(&s) % 100] = 0x01;
        if (i % 5 == 2)
            x.text[at + rnd(&s) % (x.n - at)] = '\t';
        if (i % 7 == 3)
            put(&x, "\r", 1);
        end_line(&x);
    }
    rap_parse_gpu_config pc = {x.lines, (int64_t)x.n, max_line, NULL, 0};
    rap_parse_gpu *p;
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
    int64_t whole[] = {x.lines};
    check_gpu(t, p, &x, max_line, whole, 1, "long lines, one batch");
    for (int64_t i = 0; i < 20 && !t->failures; i++) {
        text_t one = {x.text + x.start[i], (size_t)(x.start[i + 1] - x.start[i]), 0, NULL, 1, 0};
        int32_t st[2] = {0, x.start[i + 1] - x.start[i]};
        one.start = st;
        int64_t c1[] = {1};
        check_gpu(t, p, &one, max_line, c1, 1, "a long line alone");
    }
    rap_parse_gpu_free(p);
    text_free(&x);
    gen_text(&x, 99, 3000, 300);
    pc = (rap_parse_gpu_config){x.lines, (int64_t)x.n, 300, NULL, 0};
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
    int64_t w2[] = {x.lines};
    check_gpu(t, p, &x, 300, w2, 1, "max_line 300");
    rap_parse_gpu_free(p);
    text_free(&x);
#endif
}

/* Several batches in flight (tickets read later, without a wait first),
 * an empty batch, and the arguments refused. */
RAP_TEST(parse_gpu_results_and_args)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    text_t x;
    gen_text(&x, 8, 4000, 65536);
    rap_parse_gpu_config pc = {4000, (int64_t)x.n, 65536, NULL, 0};
    rap_parse_gpu *p;
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
    rap_batch want;
    rap_parse_rej *rej;
    rap_parse_result res_w;
    REQUIRE_OK(run_ref(&x, 65536, &want, &rej, &res_w));
    rap_schema sch = rap_schema_criteo();
    void *d = NULL;
    REQUIRE_OK(rap_cuda_malloc(&d, rap_batch_bytes(sch, 4000), "test batch"));
    rap_batch dev;
    rap_batch_view(&dev, sch, 4000, d);
    REQUIRE_OK(rap_parse_gpu_upload(p, x.text, (int64_t)x.n, x.start, x.lines));
    uint64_t tk[RAP_PARSE_GPU_SLOTS];
    for (int i = 0; i < RAP_PARSE_GPU_SLOTS; i++)
        REQUIRE_OK(rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)x.n,
                                     rap_parse_gpu_starts(p), x.lines - i, &dev, NULL, &tk[i]));
    rap_parse_result r;
    bool ready;
    for (int i = RAP_PARSE_GPU_SLOTS - 1; i >= 0; i--) {
        REQUIRE_OK(rap_parse_gpu_result(p, tk[i], i != RAP_PARSE_GPU_SLOTS - 1, &r, &ready));
        if (!ready)
            REQUIRE_OK(rap_parse_gpu_result(p, tk[i], true, &r, &ready));
        CHECK(ready && r.n_lines == x.lines - i);
        if (i == 0)
            CHECK(memcmp(&r, &res_w, sizeof r) == 0);
    }
    /* an empty batch */
    uint64_t t0;
    REQUIRE_OK(rap_parse_gpu_run(p, rap_parse_gpu_text(p), 0, rap_parse_gpu_starts(p), 0, &dev,
                                 NULL, &t0));
    REQUIRE_OK(rap_parse_gpu_result(p, t0, true, &r, &ready));
    CHECK(ready && r.n_lines == 0 && r.rows_used == 0 && r.first_line == -1 &&
          r.first[0][0].line == -1);
    /* a ticket too old, one not issued */
    CHECK(rap_parse_gpu_result(p, tk[0], true, &r, &ready) == RAP_ERR_ARG);
    CHECK(rap_parse_gpu_result(p, t0 + 1, true, &r, &ready) == RAP_ERR_ARG);
    /* arguments */
    CHECK(rap_parse_gpu_run(p, rap_parse_gpu_text(p) + 1, 10, rap_parse_gpu_starts(p), 1, &dev,
                            NULL, &t0) == RAP_ERR_ARG); /* text not 16-byte aligned */
    CHECK(rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)x.n, rap_parse_gpu_starts(p),
                            4001, &dev, NULL, &t0) == RAP_ERR_ARG);
    CHECK(rap_parse_gpu_upload(p, x.text, (int64_t)x.n + 1, x.start, 10) == RAP_ERR_ARG);
    REQUIRE_OK(rap_parse_gpu_begin(p, rap_parse_gpu_text(p), (int64_t)x.n,
                                   rap_parse_gpu_starts(p), x.lines, &dev));
    CHECK(rap_parse_gpu_piece(p, 64, 128) == RAP_ERR_ARG);  /* not in order */
    CHECK(rap_parse_gpu_piece(p, 0, 100) == RAP_ERR_ARG);   /* not a tile multiple */
    CHECK(rap_parse_gpu_end(p, NULL, &t0) == RAP_ERR_ARG);  /* not covered */
    CHECK_OK(rap_parse_gpu_piece(p, 0, 128));
    CHECK_OK(rap_parse_gpu_piece(p, 128, x.lines));
    CHECK_OK(rap_parse_gpu_end(p, NULL, &t0));
    REQUIRE_OK(rap_parse_gpu_result(p, t0, true, &r, &ready));
    CHECK(ready && memcmp(&r, &res_w, sizeof r) == 0);
    rap_parse_gpu_config bad = {0, 10, 10, NULL, 0};
    rap_parse_gpu *q = NULL;
    CHECK(rap_parse_gpu_create(&bad, NULL, &q) == RAP_ERR_ARG && q == NULL);
    rap_cuda_free(d);
    free(rej);
    rap_batch_free(&want);
    rap_parse_gpu_free(p);
    text_free(&x);
#endif
}

/* Without a GPU the entry points say why (the CPU build's stubs). */
RAP_TEST(parse_gpu_without_gpu)
{
    if (rap_gpu_available(NULL, 0))
        SKIP("a GPU is present: the stubs are not built");
    rap_parse_gpu_config pc = {10, 10, 10, NULL, 0};
    rap_parse_gpu *p = (rap_parse_gpu *)1;
    rap_status st = rap_parse_gpu_create(&pc, NULL, &p);
    CHECK(st == RAP_ERR_NO_GPU || st == RAP_ERR_NOMEM || st == RAP_ERR_CUDA);
    CHECK(p == NULL);
}
