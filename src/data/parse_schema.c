/* parse_schema.c -- lines of any input schema to columns (parse_schema.h):
 * the field boundaries by one scan, each field by pg_field (parse_algo.h),
 * the message of a reject by looking at its field again. */
#include "data/parse_schema.h"

#include "data/parse_algo.h"

#include <stdio.h>
#include <string.h>

struct rap_schema_parser {
    rap_input_schema s;
    rap_parse_format fm;
    uint32_t desc[RAP_SCHEMA_MAX_COLS]; /* (NF) pg_desc of each field */
    int nf, nd, ns;
};

void rap_parse_format_of(const rap_input_schema *s, rap_parse_format *fm)
{
    memset(fm, 0, sizeof *fm);
    fm->max_list = s->max_list;
    fm->delim = (uint8_t)s->delimiter;
    fm->quote = s->delimiter != '\t';
    for (int f = 0; f < s->n_cols; f++)
        fm->text8 |= s->cols[f].enc == RAP_ENC_STR;
    size_t n = strlen(s->null_token);
    n = n > RAP_NULL_TOKEN_MAX ? RAP_NULL_TOKEN_MAX : n;
    fm->null_len = (uint8_t)n;
    memcpy(fm->null_tok, s->null_token, n);
}

rap_status rap_schema_parser_create(const rap_input_schema *s, rap_schema_parser **out)
{
    *out = NULL;
    RAP_TRY(rap_input_schema_check(s));
    rap_schema_parser *p = rap_calloc(sizeof *p, "schema parser");
    if (!p)
        return RAP_ERR_NOMEM;
    p->s = *s;
    rap_parse_format_of(s, &p->fm);
    p->nf = s->n_cols;
    p->nd = s->n_dense;
    p->ns = s->n_sparse;
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        rap_parse_field d = {(uint8_t)c->kind, (uint8_t)c->enc,
                             (int16_t)(c->col < 0 ? 0 : c->col), (uint8_t)c->list_sep, 0, -1};
        p->desc[f] = pg_desc(d);
    }
    *out = p;
    return RAP_OK;
}

void rap_schema_parser_free(rap_schema_parser *p) { rap_free(p); }

const rap_input_schema *rap_schema_parser_schema(const rap_schema_parser *p) { return &p->s; }

/* ------------------------------------------------------------ one line */

/* The boundaries of line s[0, len) (no '\r'): the end of field f in
 * fe[f] for f < NF - 1 (the last ends at len), and the line-level key. */
static uint32_t line_key(const rap_schema_parser *p, const uint8_t *s, size_t len,
                         int64_t max_line, int32_t *fe)
{
    const int nf = p->nf, text8 = p->fm.text8, quote = p->fm.quote;
    const uint8_t delim = p->fm.delim;
    int64_t nd = 0, bin = -1;
    int inq = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned c = s[i];
        if (c == delim && !inq) {
            if (nd < nf - 1)
                fe[nd] = (int32_t)i;
            nd++;
        } else if (c == '"' && quote) {
            inq ^= 1;
        } else if (pg_binary(c, text8)) {
            bin = nd;
            break;
        }
    }
    return pg_line_key_q(bin, (int64_t)len, max_line, nd, inq, nf);
}

/* Field f's bytes of a line whose boundaries are good. */
static void field_at(const int32_t *fe, int nf, size_t len, int f, int32_t *a, int32_t *b)
{
    *a = f ? fe[f - 1] + 1 : 0;
    *b = f < nf - 1 ? fe[f] : (int32_t)len;
}

/* Writes field f[0..n) quoted into out, shortened to 40 bytes plus "...". */
static const char *show(const uint8_t *f, size_t n, char *out, size_t cap)
{
    size_t k = n > 40 ? 40 : n;
    snprintf(out, cap, "\"%.*s%s\"", (int)k, (const char *)f, n > 40 ? "..." : "");
    return out;
}

static const char *delim_words(uint8_t d, char *out, size_t n)
{
    if (d == '\t')
        snprintf(out, n, "tab-separated");
    else if (d == ',')
        snprintf(out, n, "comma-separated");
    else
        snprintf(out, n, "'%c'-separated", d);
    return out;
}

/* What a value of encoding enc must be, for class cls, as parse.c says it
 * for Criteo's encodings. */
static const char *want_of(int enc, int cls)
{
    bool range = cls == PG_DENSE_RANGE || cls == PG_SPARSE_RANGE;
    switch (enc) {
    case RAP_ENC_INT32: return range ? "in [-2147483648, 2147483647]" : "an integer";
    case RAP_ENC_FLOAT: return range ? "within float32's range" : "a number";
    case RAP_ENC_HEX32: return range ? "at most 8 hex digits" : "1 to 8 hex digits";
    case RAP_ENC_HEX64: return range ? "at most 16 hex digits" : "1 to 16 hex digits";
    case RAP_ENC_DEC64:
        return range ? "in [-9223372036854775808, 9223372036854775807]" : "a decimal integer";
    default: return "a value";
    }
}

/* The message of a list field's fault class cls: the first item of that
 * class. c[0, n) is its content. */
static void list_message(const rap_schema_parser *p, const rap_schema_col *col, int cls,
                         const uint8_t *c, int32_t n, int esc, char *msg, size_t msg_len)
{
    char q[64];
    const unsigned sep = (unsigned char)col->list_sep;
    int32_t k = 0, a = 0;
    for (int32_t i = 0; i <= n; i++) {
        if (i < n && c[i] != sep)
            continue;
        float fv;
        int64_t iv;
        int ci = i == a ? PG_SPARSE : pg_item(col->enc, c + a, i - a, esc, &fv, &iv);
        if (ci == cls) {
            if (i == a)
                snprintf(msg, msg_len, "expected %s in each id of list %s, got an empty item %d",
                         want_of(col->enc, PG_SPARSE), col->name, (int)k + 1);
            else if (cls == PG_SPARSE_RANGE)
                snprintf(msg, msg_len, "expected each id of list %s %s, got item %d %s",
                         col->name, want_of(col->enc, cls), (int)k + 1,
                         show(c + a, (size_t)(i - a), q, sizeof q));
            else
                snprintf(msg, msg_len, "expected %s in each id of list %s, got item %d %s",
                         want_of(col->enc, cls), col->name, (int)k + 1,
                         show(c + a, (size_t)(i - a), q, sizeof q));
            return;
        }
        k++;
        a = i + 1;
    }
    snprintf(msg, msg_len, "expected at most %d ids in list %s (--max-list), got %d",
             p->fm.max_list, col->name, (int)k);
}

/* The message of a field fault (class cls) of field f: s[a, b). */
static void field_message(const rap_schema_parser *p, int f, int cls, const uint8_t *s, int32_t a,
                          int32_t b, char *msg, size_t msg_len)
{
    const rap_schema_col *col = &p->s.cols[f];
    char q[64];
    const uint8_t *c = s + a;
    int32_t cn = b - a;
    int esc = 0;
    if (cls == PG_QUOTE) {
        snprintf(msg, msg_len, "expected a field in quotes with its inner quotes doubled, or "
                 "no quote, in %s, got %s", col->name, show(s + a, (size_t)(b - a), q, sizeof q));
        return;
    }
    if (p->fm.quote)
        pg_content(s + a, b - a, &c, &cn, &esc);
    if (col->list_sep) {
        list_message(p, col, cls, c, cn, esc, msg, msg_len);
        return;
    }
    const bool hex = col->enc == RAP_ENC_HEX32 || col->enc == RAP_ENC_HEX64;
    if (cls == PG_LABEL)
        snprintf(msg, msg_len, "expected label 0 or 1, got %s", show(c, (size_t)cn, q, sizeof q));
    else if ((cls == PG_DENSE_RANGE || cls == PG_SPARSE_RANGE) && !hex)
        snprintf(msg, msg_len, "expected %s %s, got %s", col->name, want_of(col->enc, cls),
                 show(c, (size_t)cn, q, sizeof q));
    else
        snprintf(msg, msg_len, "expected %s in %s, got %s", want_of(col->enc, cls), col->name,
                 show(c, (size_t)cn, q, sizeof q));
}

/* The message of a rejected line's key (s[0, len) without '\r'). */
static void message(const rap_schema_parser *p, const uint8_t *s, size_t len, int64_t max_line,
                    uint32_t key, const int32_t *fe, char *msg, size_t msg_len)
{
    const int cls = (int)(key >> 16), f = pg_key_field(key), nf = p->nf;
    char w[32];
    switch (cls) {
    case PG_BINARY:
        for (size_t i = 0; i < len; i++) {
            if (pg_binary(s[i], p->fm.text8)) {
                snprintf(msg, msg_len, "expected printable text, got byte 0x%02x at byte %zu",
                         s[i], i + 1);
                break;
            }
        }
        break;
    case PG_LONG:
        snprintf(msg, msg_len, "expected a line of at most %lld bytes, got a longer one",
                 (long long)max_line);
        break;
    case PG_QUOTE_OPEN:
        snprintf(msg, msg_len, "expected a closing quote in field %d (%s) on its line (a quoted "
                 "field cannot hold a newline)", f + 1, f < nf ? p->s.cols[f].name : "past the "
                 "last column");
        break;
    case PG_FIELDS: {
        int k = 1, inq = 0;
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '"' && p->fm.quote)
                inq ^= 1;
            else if (s[i] == p->fm.delim && !inq)
                k++;
        }
        snprintf(msg, msg_len, "expected %d %s fields, got %d", nf,
                 delim_words(p->fm.delim, w, sizeof w), k);
        break;
    }
    default: {
        int32_t a, b;
        field_at(fe, nf, len, f, &a, &b);
        field_message(p, f, cls, s, a, b, msg, msg_len);
        break;
    }
    }
}

/* The key of line s[0, len) (no '\r') after its fields: the line-level
 * key, else the smallest field fault key, else PG_KEY_OK. fe: (NF). */
static uint32_t full_key(const rap_schema_parser *p, const uint8_t *s, size_t len,
                         int64_t max_line, int32_t *fe)
{
    uint32_t key = line_key(p, s, len, max_line, fe);
    if (key != PG_KEY_OK)
        return key;
    for (int f = 0; f < p->nf; f++) {
        int32_t a, b, cnt;
        field_at(fe, p->nf, len, f, &a, &b);
        float fv;
        int64_t iv;
        int valid;
        int cls = pg_field(p->desc[f], &p->fm, s + a, b - a, &fv, &iv, NULL, &cnt, &valid);
        if (cls != PG_OK) {
            uint32_t k = pg_key(cls, f);
            key = k < key ? k : key;
        }
    }
    return key;
}

int rap_parse_line_schema(const rap_schema_parser *p, const char *s, size_t len,
                          int64_t max_line, int *field, char *msg, size_t msg_len)
{
    int32_t fe[RAP_SCHEMA_MAX_COLS];
    if (len > 0 && s[len - 1] == '\r')
        len--;
    const uint8_t *u = (const uint8_t *)s;
    uint32_t key = full_key(p, u, len, max_line, fe);
    if (field)
        *field = key == PG_KEY_OK ? -1 : pg_key_field(key);
    if (key == PG_KEY_OK) {
        if (msg_len)
            msg[0] = 0;
        return -1;
    }
    message(p, u, len, max_line, key, fe, msg, msg_len);
    return pg_key_reason(key);
}

/* ------------------------------------------------------------ chunks */

rap_status rap_parsed_reserve(rap_parsed *o, int nd, int ns, int64_t rows)
{
    if (rows <= o->cap && o->soff)
        return RAP_OK;
    if (!o->sids && ns > 0) {
        o->sids = rap_calloc(sizeof *o->sids * (size_t)ns, "parsed chunk ids");
        o->sids_cap = rap_calloc(sizeof *o->sids_cap * (size_t)ns, "parsed chunk ids");
        if (!o->sids || !o->sids_cap)
            return RAP_ERR_NOMEM;
    }
    o->nd = nd;
    o->ns = ns;
    int64_t R = o->cap * 2 > rows ? o->cap * 2 : rows;
    if (R < 1024)
        R = 1024;
    size_t bytes = (size_t)ns * (size_t)(R + 1) * 8 + (size_t)R * (4 + (size_t)nd * 5 + ns) + 64;
    char *blk = rap_aligned_alloc(bytes, "parsed chunk rows");
    if (!blk)
        return RAP_ERR_NOMEM;
    rap_parsed n = *o;
    n.soff = (int64_t *)(void *)blk;
    n.label = (float *)(void *)(blk + (size_t)ns * (size_t)(R + 1) * 8);
    n.dense = n.label + R;
    n.dense_valid = (uint8_t *)(n.dense + (size_t)R * nd);
    n.sparse_valid = n.dense_valid + (size_t)R * nd;
    n.sparse = NULL;
    int64_t u = o->n_used, oR = o->cap;
    if (o->soff && u > 0) {
        memcpy(n.label, o->label, (size_t)u * sizeof(float));
        for (int j = 0; j < nd; j++) {
            memcpy(n.dense + j * R, o->dense + j * oR, (size_t)u * sizeof(float));
            memcpy(n.dense_valid + j * R, o->dense_valid + j * oR, (size_t)u);
        }
    }
    for (int j = 0; j < ns; j++) {
        if (o->soff)
            memcpy(n.soff + j * (R + 1), o->soff + j * (oR + 1), (size_t)(u + 1) * 8);
        else
            n.soff[j * (R + 1)] = 0;
        if (o->soff && u > 0)
            memcpy(n.sparse_valid + j * R, o->sparse_valid + j * oR, (size_t)u);
    }
    rap_aligned_free(o->block);
    n.block = blk;
    n.cap = R;
    *o = n;
    return RAP_OK;
}

rap_status rap_parsed_reserve_ids(rap_parsed *o, int j, int64_t used, int64_t k)
{
    if (used + k <= o->sids_cap[j])
        return RAP_OK;
    int64_t c = o->sids_cap[j] * 2 > used + k ? o->sids_cap[j] * 2 : used + k;
    if (c < 4096)
        c = 4096;
    int64_t *g = rap_realloc(o->sids[j], (size_t)c * sizeof *g, "parsed chunk ids");
    if (!g)
        return RAP_ERR_NOMEM;
    o->sids[j] = g;
    o->sids_cap[j] = c;
    return RAP_OK;
}

/* Converts the fields of a line with good boundaries into row r of o;
 * returns the smallest field key (PG_KEY_OK: the row is good). A
 * rejected row leaves its ids behind the columns' ends, where the next
 * row overwrites them. */
static rap_status convert_row(const rap_schema_parser *p, const uint8_t *s, size_t len,
                              const int32_t *fe, rap_parsed *o, int64_t r, uint32_t *key)
{
    const int64_t R = o->cap;
    const int32_t K = p->fm.max_list;
    *key = PG_KEY_OK;
    for (int f = 0; f < p->nf; f++) {
        const uint32_t d = p->desc[f];
        const int kind = PG_DESC_KIND(d), col = PG_DESC_COL(d);
        int32_t a, b, cnt;
        field_at(fe, p->nf, len, f, &a, &b);
        float fv = 0.0f;
        int64_t iv = 0, *ids = NULL, at = 0;
        if (kind == RAP_COL_SPARSE) {
            at = o->soff[col * (R + 1) + r];
            RAP_TRY(rap_parsed_reserve_ids(o, col, at, K > 1 ? K : 1));
            ids = o->sids[col] + at;
        }
        int valid;
        int cls = pg_field(d, &p->fm, s + a, b - a, &fv, &iv, ids, &cnt, &valid);
        if (cls != PG_OK) {
            uint32_t k = pg_key(cls, f);
            *key = k < *key ? k : *key;
            continue;
        }
        switch (kind) {
        case RAP_COL_LABEL: o->label[r] = fv; break;
        case RAP_COL_DENSE:
            o->dense[col * R + r] = fv;
            o->dense_valid[col * R + r] = (uint8_t)valid;
            break;
        case RAP_COL_SPARSE:
            if (!PG_DESC_SEP(d) && cnt)
                ids[0] = iv;
            o->soff[col * (R + 1) + r + 1] = at + cnt;
            o->sparse_valid[col * R + r] = (uint8_t)valid;
            break;
        default: break;
        }
    }
    return RAP_OK;
}

rap_status rap_parse_chunk_schema(const rap_schema_parser *p, const char *text, size_t n,
                                  int64_t max_line, rap_parsed *o)
{
    o->n_lines = 0;
    o->n_used = 0;
    o->n_rej = 0;
    o->first_msg[0] = 0;
    RAP_TRY(rap_parsed_reserve(o, p->nd, p->ns, (int64_t)(n / 64) + 16));
    for (int j = 0; j < p->ns; j++)
        o->soff[j * (o->cap + 1)] = 0;
    int32_t fe[RAP_SCHEMA_MAX_COLS];
    const char *q = text, *end = text + n;
    while (q < end) {
        if (o->n_used == o->cap)
            RAP_TRY(rap_parsed_reserve(o, p->nd, p->ns, o->cap + 1));
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        if (!nl)
            nl = end; /* not expected: every line ends in '\n' */
        size_t len = (size_t)(nl - q);
        if (len > 0 && q[len - 1] == '\r')
            len--;
        const uint8_t *s = (const uint8_t *)q;
        int64_t line = o->n_lines++;
        uint32_t key = line_key(p, s, len, max_line, fe);
        if (key == PG_KEY_OK)
            RAP_TRY(convert_row(p, s, len, fe, o, o->n_used, &key));
        if (key == PG_KEY_OK) {
            o->n_used++;
        } else {
            if (o->n_rej == 0)
                message(p, s, len, max_line, key, fe, o->first_msg, sizeof o->first_msg);
            RAP_TRY(rap_parsed_reject(o, line, pg_key_reason(key)));
        }
        q = nl + 1;
    }
    return RAP_OK;
}
