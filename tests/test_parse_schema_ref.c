/*
 * test_parse_schema_ref.c -- the GPU parser's algorithm over an input
 * schema (src/data/parse_ref.c with rap_parse_layout_schema) against the
 * CPU schema parser (rap_parse_chunk_schema, rap_parse_line_schema): the
 * same rows bit for bit (labels, dense values and valid bytes, sparse
 * offsets, ids and valid bytes, lists included), the same rejects (line,
 * rows before, reason, field) and counts, on random text of every
 * encoding with broken values, lists (empty, null, long, bad items),
 * CSV quoting (quoted delimiters and separators, doubled quotes, broken
 * quotes), binary bytes, long lines and CRLF. The string hash of the
 * device (pg_item, compiled by nvcc) against rap_hash_str, and the kernels
 * against the reference on a schema without lists, when a GPU is there.
 */
#include "test.h"

#include "core/core.h"
#include "data/parse_algo.h"
#include "data/parse_gpu.h"
#include "data/parse_ref.h"
#include "data/parse_schema.h"

#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct {
    char *text;
    size_t n, cap;
    int32_t *start;
    int64_t lines, lcap;
} stext;

static void sput(stext *x, const char *s, size_t k)
{
    if (x->n + k + 1 > x->cap) {
        x->cap = (x->n + k + 1) * 2 + 4096;
        x->text = realloc(x->text, x->cap);
    }
    memcpy(x->text + x->n, s, k);
    x->n += k;
}

static void send_line(stext *x)
{
    sput(x, "\n", 1);
    if (x->lines + 2 > x->lcap) {
        x->lcap = (x->lines + 2) * 2;
        x->start = realloc(x->start, (size_t)x->lcap * sizeof *x->start);
    }
    if (x->lines == 0)
        x->start[0] = 0;
    x->start[++x->lines] = (int32_t)x->n;
}

static void stext_free(stext *x)
{
    free(x->text);
    free(x->start);
    memset(x, 0, sizeof *x);
}

static uint64_t rnd(uint64_t *s) { return rap_splitmix64(s); }
static const char *pick(uint64_t *s, const char *const *a, size_t n) { return a[rnd(s) % n]; }
#define PICK(s, a) pick(s, a, sizeof a / sizeof a[0])

static const char *const FLOAT_OK[] = {"0", "-0", "1.5", "-2.25e-3", ".5", "5.", "+7", "1e38",
                                       "3.4028234e38", "1e-45", "1e-80", "123456789012345678901234",
                                       "0.1", "2.5E+2", "0000.000100", "-9.99999e37"};
static const char *const FLOAT_BAD[] = {"e5", "1e", "1e+", ".", "-", "1.2.3", "1,5", "0x1p3",
                                        "nan", "inf", "1 ", "--1", "1e40", "-3.5e38", "1e99999"};
static const char *const INT_OK[] = {"0", "-0", "2147483647", "-2147483648", "00012", "-7"};
static const char *const INT_BAD[] = {"2147483648", "-2147483649", "1.0", "a", "-", "+1"};
static const char *const HEX_OK[] = {"0", "ffffffffffffffff", "DEADbeef", "7fffffffffffffff",
                                     "0000000000000000000a", "1"};
static const char *const HEX_BAD[] = {"g", "-1", "0x1", "10000000000000000", "fffffffffffffffff",
                                      "12 3"};
static const char *const H32_OK[] = {"0", "ffffffff", "00000000", "AbC"};
static const char *const H32_BAD[] = {"123456789", "z", "-a"};
static const char *const DEC_OK[] = {"0", "-0", "9223372036854775807", "-9223372036854775808",
                                     "0009223372036854775807", "42", "-1"};
static const char *const DEC_BAD[] = {"9223372036854775808", "-9223372036854775809", "1.5", "a",
                                      "-", "99999999999999999999", "+5"};
static const char *const STR_ANY[] = {"alice", "a b", "x|y", "semi;colon", "\xc3\xa9t\xc3\xa9",
                                      "null", "NA", "#", "42", "\"quoted\"", "a\tb"};

typedef struct {
    int kind, enc;
    char sep;
} col_t;

/* The test schema: every kind and encoding, two lists. */
static const char *k_schema = "y label\n"
                              "f dense float\n"
                              "i dense int32\n"
                              "u sparse str\n"
                              "h sparse hex\n"
                              "l sparse dec list |\n"
                              "s skip\n"
                              "t sparse str list ;\n"
                              "c sparse hex32\n";

/* A value of encoding enc: good mostly, sometimes bad (*bad set). */
static const char *value(uint64_t *s, int enc, bool allow_bad)
{
    bool b = allow_bad && rnd(s) % 40 == 0;
    switch (enc) {
    case RAP_ENC_FLOAT: return b ? PICK(s, FLOAT_BAD) : PICK(s, FLOAT_OK);
    case RAP_ENC_INT32: return b ? PICK(s, INT_BAD) : PICK(s, INT_OK);
    case RAP_ENC_HEX64: return b ? PICK(s, HEX_BAD) : PICK(s, HEX_OK);
    case RAP_ENC_HEX32: return b ? PICK(s, H32_BAD) : PICK(s, H32_OK);
    case RAP_ENC_DEC64: return b ? PICK(s, DEC_BAD) : PICK(s, DEC_OK);
    case RAP_ENC_STR: return PICK(s, STR_ANY);
    default: return rnd(s) % 2 ? "0" : "1";
    }
}

/* Writes field content c quoted for CSV (quotes doubled). */
static void put_quoted(stext *x, const char *c, size_t n)
{
    sput(x, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if (c[i] == '"')
            sput(x, "\"", 1);
        sput(x, c + i, 1);
    }
    sput(x, "\"", 1);
}

/* One field's content for column c into buf. */
static size_t content(uint64_t *s, const rap_input_schema *sc, const rap_schema_col *c, char *buf,
                      size_t cap)
{
    size_t n = 0;
    uint64_t r = rnd(s) % 100;
    static const char *const LABEL_BAD[] = {"", "2", "01", "a"};
    if (c->kind == RAP_COL_LABEL)
        return (size_t)snprintf(buf, cap, "%s", r < 3 ? PICK(s, LABEL_BAD) : value(s, 0, 0));
    if (c->kind == RAP_COL_SKIP)
        return (size_t)snprintf(buf, cap, "%s", r < 50 ? "" : "skip me \"x\"");
    if (r < 8)
        return 0; /* empty: a null, or an empty list */
    if (!c->list_sep)
        return (size_t)snprintf(buf, cap, "%s", value(s, c->enc, true));
    if (r < 14)
        return (size_t)snprintf(buf, cap, "%s", sc->null_token);
    int L = (int)(rnd(s) % (uint64_t)(sc->max_list + 1)) + (r < 16 ? sc->max_list : 0);
    for (int k = 0; k < L && n + 64 < cap; k++) {
        if (k)
            buf[n++] = c->list_sep;
        if (rnd(s) % 200 == 0)
            continue; /* an empty item */
        const char *v = value(s, c->enc, true);
        if (c->enc == RAP_ENC_STR && strchr(v, c->list_sep))
            v = "plain";
        n += (size_t)snprintf(buf + n, cap - n, "%s", v);
    }
    return n;
}

/* Random lines of schema sc (its delimiter and quoting): good ones mostly,
 * with every kind of fault. */
static void gen_schema_text(stext *x, const rap_input_schema *sc, uint64_t seed, int64_t lines,
                            int64_t max_line)
{
    memset(x, 0, sizeof *x);
    uint64_t s = seed;
    const bool csv = sc->delimiter != '\t';
    char *buf = malloc(1 << 16);
    for (int64_t li = 0; li < lines; li++) {
        uint64_t r = rnd(&s) % 200;
        if (r == 0) { /* an empty line */
            send_line(x);
            continue;
        }
        if (r == 1) { /* a long line */
            for (int64_t k = 0; k <= max_line; k++)
                sput(x, "7", 1);
            send_line(x);
            continue;
        }
        int nf = sc->n_cols + (r == 2 ? 1 : r == 3 ? -1 : 0);
        for (int f = 0; f < nf; f++) {
            if (f)
                sput(x, &sc->delimiter, 1);
            const rap_schema_col *c = &sc->cols[f < sc->n_cols ? f : sc->n_cols - 1];
            size_t n = content(&s, sc, c, buf, 1 << 16);
            bool tab_in = memchr(buf, '\t', n) != NULL;
            bool q = csv && (memchr(buf, sc->delimiter, n) || memchr(buf, '"', n) ||
                             rnd(&s) % 8 == 0);
            if (!csv && tab_in)
                n = (size_t)snprintf(buf, 1 << 16, "tabless");
            if (q)
                put_quoted(x, buf, n);
            else
                sput(x, buf, n);
        }
        uint64_t e = rnd(&s) % 100;
        if (e == 0)
            sput(x, "\x01", 1); /* binary */
        else if (e == 1 && csv)
            sput(x, "\"", 1); /* an unclosed quote */
        else if (e == 2 && csv)
            sput(x, ",a\"b", 4); /* a quote inside a field (also a field too many) */
        else if (e == 3)
            sput(x, "\r", 1); /* CRLF */
        send_line(x);
    }
    free(buf);
}

/* Rows [0, n) of b and c equal; the first differences reported. */
static void same_batches(rap_test_ctx *t, const rap_batch *a, const rap_batch *b, int64_t n,
                         const char *what)
{
    int bad = 0;
    const int64_t A = a->cap, B = b->cap, KA = a->schema.ids_per_row, KB = b->schema.ids_per_row;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        if (memcmp(&a->label[i], &b->label[i], 4))
            CHECK_MSG(bad++ < 0, "%s: row %lld label", what, (long long)i);
        for (int j = 0; j < a->schema.n_dense; j++)
            if (memcmp(&a->dense[j * A + i], &b->dense[j * B + i], 4) ||
                a->dense_valid[j * A + i] != b->dense_valid[j * B + i])
                CHECK_MSG(bad++ < 0, "%s: row %lld dense %d: %g/%d vs %g/%d", what, (long long)i,
                          j, (double)a->dense[j * A + i], a->dense_valid[j * A + i],
                          (double)b->dense[j * B + i], b->dense_valid[j * B + i]);
        for (int j = 0; j < a->schema.n_sparse; j++) {
            const int64_t *oa = a->sparse_off + j * (A + 1), *ob = b->sparse_off + j * (B + 1);
            if (oa[i] != ob[i] || oa[i + 1] != ob[i + 1] ||
                a->sparse_valid[j * A + i] != b->sparse_valid[j * B + i]) {
                CHECK_MSG(bad++ < 0, "%s: row %lld sparse %d: [%lld, %lld) valid %d vs [%lld, "
                          "%lld) valid %d", what, (long long)i, j, (long long)oa[i],
                          (long long)oa[i + 1], a->sparse_valid[j * A + i], (long long)ob[i],
                          (long long)ob[i + 1], b->sparse_valid[j * B + i]);
                continue;
            }
            for (int64_t k = oa[i]; k < oa[i + 1]; k++)
                if (a->sparse_ids[j * A * KA + k] != b->sparse_ids[j * B * KB + k])
                    CHECK_MSG(bad++ < 0, "%s: row %lld sparse %d id %lld: %llx vs %llx", what,
                              (long long)i, j, (long long)k,
                              (unsigned long long)a->sparse_ids[j * A * KA + k],
                              (unsigned long long)b->sparse_ids[j * B * KB + k]);
        }
    }
}

/* The schema parser's rows as a batch (shape sh, cap >= rows). */
static void parsed_to_batch(const rap_parsed *o, rap_batch *b)
{
    const int64_t B = b->cap, R = o->cap, K = b->schema.ids_per_row;
    for (int64_t i = 0; i < o->n_used; i++)
        b->label[i] = o->label[i];
    for (int j = 0; j < o->nd; j++)
        for (int64_t i = 0; i < o->n_used; i++) {
            b->dense[j * B + i] = o->dense[j * R + i];
            b->dense_valid[j * B + i] = o->dense_valid[j * R + i];
        }
    for (int j = 0; j < o->ns; j++) {
        const int64_t *so = o->soff + j * (R + 1);
        for (int64_t i = 0; i <= o->n_used; i++)
            b->sparse_off[j * (B + 1) + i] = so[i];
        for (int64_t k = 0; k < so[o->n_used]; k++)
            b->sparse_ids[j * B * K + k] = o->sids[j][k];
        for (int64_t i = 0; i < o->n_used; i++)
            b->sparse_valid[j * B + i] = o->sparse_valid[j * R + i];
    }
}

/* The reference on x over schema sc into a fresh batch poisoned with 0xab. */
static rap_status run_ref_schema(const rap_input_schema *sc, const stext *x, int64_t max_line,
                                 rap_batch *b, rap_parse_rej **rej, rap_parse_result *res)
{
    rap_parse_layout lay;
    RAP_TRY(rap_parse_layout_schema(sc, &lay));
    RAP_TRY(rap_parse_layout_check(&lay));
    RAP_TRY(rap_batch_create(b, rap_input_schema_shape(sc), x->lines > 0 ? x->lines : 1, false));
    memset(b->block, 0xab, b->block_bytes);
    *rej = malloc(((size_t)x->lines + 1) * sizeof **rej);
    return rap_parse_ref(&lay, x->text, (int64_t)x->n, x->start, x->lines, max_line, b, *rej,
                         res);
}

static void check_schema_ref(rap_test_ctx *t, const rap_input_schema *sc, const stext *x,
                             int64_t max_line, const char *what)
{
    rap_schema_parser *p = NULL;
    REQUIRE_OK(rap_schema_parser_create(sc, &p));
    rap_parsed o;
    memset(&o, 0, sizeof o);
    REQUIRE_OK(rap_parse_chunk_schema(p, x->text, x->n, max_line, &o));
    rap_batch want, got;
    REQUIRE_OK(rap_batch_create(&want, rap_input_schema_shape(sc), o.n_used > 0 ? o.n_used : 1,
                                false));
    parsed_to_batch(&o, &want);
    rap_parse_rej *rej = NULL;
    rap_parse_result res;
    REQUIRE_OK(run_ref_schema(sc, x, max_line, &got, &rej, &res));
    CHECK_MSG(res.n_lines == x->lines && res.rows_used == o.n_used &&
                  res.rows_rejected == o.n_rej,
              "%s: %lld lines, used %lld + rejected %lld; the schema parser %lld + %lld", what,
              (long long)res.n_lines, (long long)res.rows_used, (long long)res.rows_rejected,
              (long long)o.n_used, (long long)o.n_rej);
    CHECK_MSG(o.n_used > x->lines / 3 && o.n_rej > 20, "%s: %lld good, %lld rejected: the text "
              "must have both", what, (long long)o.n_used, (long long)o.n_rej);
    same_batches(t, &want, &got, o.n_used, what);
    int64_t per[RAP_REJ_COUNT] = {0};
    int bad = 0;
    for (int64_t k = 0; k < o.n_rej && k < res.rows_rejected; k++) {
        const rap_parse_reject *e = &o.rej[k];
        const rap_parse_rej *g = &rej[k];
        const char *ln = x->text + x->start[e->line];
        size_t len = (size_t)(x->start[e->line + 1] - x->start[e->line] - 1);
        int field = -2;
        char msg[512];
        int why = rap_parse_line_schema(p, ln, len, max_line, &field, msg, sizeof msg);
        if ((g->line != e->line || g->pos != e->pos || g->reason != e->reason ||
             why != e->reason || g->field != field) && bad++ < 5)
            rap_test_fail(t, __FILE__, __LINE__, "%s: reject %lld: line %d pos %d reason %d "
                          "field %d; the schema parser line %lld pos %lld reason %d/%d field %d "
                          "(%s)", what, (long long)k, g->line, g->pos, g->reason, g->field,
                          (long long)e->line, (long long)e->pos, e->reason, why, field, msg);
        per[e->reason]++;
    }
    CHECK(memcmp(per, res.rejected, sizeof per) == 0);
    /* every reason the schema adds occurs */
    CHECK_MSG(per[RAP_REJ_LIST] > 0 && per[RAP_REJ_CAT] > 0 && per[RAP_REJ_INT] > 0 &&
              per[RAP_REJ_RANGE] > 0 && per[RAP_REJ_FIELDS] > 0 && per[RAP_REJ_BINARY] > 0,
              "%s: list %lld cat %lld int %lld range %lld fields %lld binary %lld", what,
              (long long)per[RAP_REJ_LIST], (long long)per[RAP_REJ_CAT],
              (long long)per[RAP_REJ_INT], (long long)per[RAP_REJ_RANGE],
              (long long)per[RAP_REJ_FIELDS], (long long)per[RAP_REJ_BINARY]);
    if (sc->delimiter != '\t')
        CHECK_MSG(per[RAP_REJ_QUOTE] > 0, "%s: no quote rejects", what);
    free(rej);
    rap_batch_free(&want);
    rap_batch_free(&got);
    rap_parsed_free(&o);
    rap_schema_parser_free(p);
}

static rap_input_schema *test_schema(char delim, const char *null_tok, int max_list)
{
    rap_input_schema *s = NULL;
    if (rap_input_schema_parse(k_schema, "ref.schema", &s) != RAP_OK)
        return NULL;
    s->delimiter = delim;
    snprintf(s->null_token, sizeof s->null_token, "%s", null_tok);
    s->max_list = max_list;
    return s;
}

RAP_TEST(parse_schema_ref_matches_schema_parser)
{
    const struct {
        char delim;
        const char *null_tok;
        int max_list;
        int64_t max_line;
    } cfg[] = {{'\t', "null", 4, 65536}, {',', "null", 6, 65536}, {',', "NA", 3, 400},
               {';', "null", 8, 2000}};
    for (int c = 0; c < 4; c++) {
        rap_input_schema *s = test_schema(cfg[c].delim, cfg[c].null_tok, cfg[c].max_list);
        REQUIRE(s);
        /* with ';' t's separator is the delimiter: quoting keeps it apart */
        for (uint64_t seed = 1; seed <= 2; seed++) {
            stext x;
            gen_schema_text(&x, s, seed * 104729 + (uint64_t)c, 4000, cfg[c].max_line);
            char what[96];
            snprintf(what, sizeof what, "delimiter '%c' null %s max_list %d seed %llu",
                     cfg[c].delim == '\t' ? 'T' : cfg[c].delim, cfg[c].null_tok,
                     cfg[c].max_list, (unsigned long long)seed);
            check_schema_ref(t, s, &x, cfg[c].max_line, what);
            stext_free(&x);
        }
        rap_input_schema_free(s);
    }
}

/* The layout of a schema: fields, lists numbered, the format; too many
 * fields or sparse columns for the GPU parser refused naming the schema. */
RAP_TEST(parse_schema_ref_layout)
{
    rap_input_schema *s = test_schema(',', "null", 5);
    REQUIRE(s);
    rap_parse_layout l;
    REQUIRE_OK(rap_parse_layout_schema(s, &l));
    CHECK_OK(rap_parse_layout_check(&l));
    CHECK(l.n_fields == 9 && l.n_dense == 2 && l.n_sparse == 5 && l.n_lists == 2);
    CHECK(l.f[5].sep == '|' && l.f[5].list == 0 && l.f[7].sep == ';' && l.f[7].list == 1);
    CHECK(l.f[3].sep == 0 && l.f[3].list == -1);
    CHECK(l.fmt.delim == ',' && l.fmt.quote == 1 && l.fmt.text8 == 1 && l.fmt.max_list == 5 &&
          l.fmt.null_len == 4);
    rap_parse_layout b = l;
    b.f[7].list = 0; /* lists numbered in field order */
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    b = l;
    b.f[1].sep = '|'; /* a list on a dense column */
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    b = l;
    b.fmt.quote = 0; /* quoting goes with any delimiter but tab */
    CHECK(rap_parse_layout_check(&b) == RAP_ERR_ARG);
    /* 100 sparse columns: more than the GPU parser takes */
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "y label\n");
    for (int j = 0; j < 100; j++)
        n += (size_t)snprintf(text + n, sizeof text - n, "c%d sparse dec\n", j);
    rap_input_schema *big = NULL;
    REQUIRE_OK(rap_input_schema_parse(text, "big.schema", &big));
    CHECK(rap_parse_layout_schema(big, &l) == RAP_ERR_ARG &&
          strstr(rap_last_error(), "big.schema"));
    rap_input_schema_free(big);
    rap_input_schema_free(s);
}

/* ------------------------------------------------------------ GPU */

/* The string hash on the device equals rap_hash_str: the kernels on lines
 * whose only sparse field is a str id (no lists), against the host hash. */
RAP_TEST(parse_schema_gpu_str_hash)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_parse("y label\nu sparse str\n", "h.schema", &s));
    static const char *const strs[] = {"", "a", "foobar", "\xc3\xa9t\xc3\xa9", "x y z",
                                       "a much longer string of text that is hashed whole",
                                       "\"q\""};
    stext x;
    memset(&x, 0, sizeof x);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        sput(&x, "1\t", 2);
        sput(&x, strs[i], strlen(strs[i]));
        send_line(&x);
    }
    rap_parse_layout lay;
    REQUIRE_OK(rap_parse_layout_schema(s, &lay));
    rap_parse_gpu_config pc = {64, (int64_t)x.n + 16, 65536, &lay, 0};
    rap_parse_gpu *p = NULL;
    REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
    rap_schema sh = rap_input_schema_shape(s);
    size_t bytes = rap_batch_bytes(sh, 64);
    void *d = NULL;
    REQUIRE_OK(rap_cuda_malloc(&d, bytes, "test batch"));
    rap_batch dev;
    rap_batch_view(&dev, sh, 64, d);
    REQUIRE_OK(rap_parse_gpu_upload(p, x.text, (int64_t)x.n, x.start, x.lines));
    uint64_t ticket;
    REQUIRE_OK(rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)x.n, rap_parse_gpu_starts(p),
                                 x.lines, &dev, NULL, &ticket));
    rap_parse_result res;
    bool ready = false;
    REQUIRE_OK(rap_parse_gpu_result(p, ticket, true, &res, &ready));
    void *h = malloc(bytes);
    REQUIRE(h && cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    rap_batch hb;
    rap_batch_view(&hb, sh, 64, h);
    CHECK(res.rows_used == x.lines);
    for (int64_t i = 1; i < x.lines && i < res.rows_used; i++) { /* line 0: "" is a null */
        uint64_t want = rap_hash_str(strs[i], strlen(strs[i]));
        CHECK_MSG((uint64_t)hb.sparse_ids[hb.sparse_off[i]] == want, "\"%s\": device %llx, host "
                  "%llx", strs[i], (unsigned long long)hb.sparse_ids[hb.sparse_off[i]],
                  (unsigned long long)want);
    }
    free(h);
    rap_cuda_free(d);
    rap_parse_gpu_free(p);
    stext_free(&x);
    rap_input_schema_free(s);
#endif
}

/* The kernels against the reference over schemas: the whole batch block
 * (poisoned alike), the rejects and the result, tab and CSV, lists
 * included. */
RAP_TEST(parse_schema_gpu_matches_ref)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    for (int c = 0; c < 2; c++) {
        rap_input_schema *s = test_schema(c ? ',' : '\t', "null", 5);
        REQUIRE(s);
        stext x;
        gen_schema_text(&x, s, 977 + (uint64_t)c, 5000, 65536);
        rap_batch want;
        rap_parse_rej *rej_w = NULL;
        rap_parse_result res_w;
        REQUIRE_OK(run_ref_schema(s, &x, 65536, &want, &rej_w, &res_w));
        rap_parse_layout lay;
        REQUIRE_OK(rap_parse_layout_schema(s, &lay));
        rap_parse_gpu_config pc = {x.lines, (int64_t)x.n, 65536, &lay, 0};
        rap_parse_gpu *p = NULL;
        REQUIRE_OK(rap_parse_gpu_create(&pc, NULL, &p));
        size_t bytes = want.block_bytes;
        void *d = NULL;
        REQUIRE_OK(rap_cuda_malloc(&d, bytes, "test batch"));
        REQUIRE(cudaMemset(d, 0xab, bytes) == cudaSuccess);
        rap_batch dev;
        rap_batch_view(&dev, want.schema, want.cap, d);
        REQUIRE_OK(rap_parse_gpu_upload(p, x.text, (int64_t)x.n, x.start, x.lines));
        uint64_t ticket;
        REQUIRE_OK(rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)x.n,
                                     rap_parse_gpu_starts(p), x.lines, &dev, NULL, &ticket));
        rap_parse_result res_g;
        bool ready = false;
        REQUIRE_OK(rap_parse_gpu_result(p, ticket, true, &res_g, &ready));
        void *h = malloc(bytes);
        rap_parse_rej *rej_g = malloc(((size_t)x.lines + 1) * sizeof *rej_g);
        REQUIRE(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        REQUIRE(cudaMemcpy(rej_g, rap_parse_gpu_rejects(p),
                           (size_t)res_g.rows_rejected * sizeof *rej_g,
                           cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK_MSG(!memcmp(&res_w, &res_g, sizeof res_w), "delimiter %d: results differ (used "
                  "%lld / %lld)", c, (long long)res_w.rows_used, (long long)res_g.rows_used);
        CHECK(!memcmp(rej_w, rej_g, (size_t)res_w.rows_rejected * sizeof *rej_g));
        size_t diff = 0;
        for (size_t i = 0; i < bytes; i++)
            diff += ((unsigned char *)want.block)[i] != ((unsigned char *)h)[i];
        CHECK_MSG(diff == 0, "delimiter %d: %zu of %zu batch bytes differ", c, diff, bytes);
        free(h);
        free(rej_g);
        free(rej_w);
        rap_cuda_free(d);
        rap_parse_gpu_free(p);
        rap_batch_free(&want);
        stext_free(&x);
        rap_input_schema_free(s);
    }
#endif
}
