/* parse.c -- Criteo TSV lines to columns: a fast path for good rows and a
 * careful slow path that classifies everything else (see parse.h). */
#include "data/parse.h"

#include <stdio.h>
#include <string.h>

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

/* Value + 1 of a hex digit (either case), 0 for any other byte. */
static const uint8_t HEXV[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
    ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
    ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16, ['A'] = 11, ['B'] = 12,
    ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* ------------------------------------------------------------ slow path */

/* Writes field f[0..n) quoted into out, shortened to 40 bytes plus "...". */
static const char *show(const char *f, size_t n, char *out, size_t cap)
{
    size_t k = n > 40 ? 40 : n;
    snprintf(out, cap, "\"%.*s%s\"", (int)k, f, n > 40 ? "..." : "");
    return out;
}

int rap_parse_line(const char *s, size_t len, int64_t max_line, float *label,
                   float dense[ND], uint8_t dense_valid[ND], int64_t sparse[NS],
                   uint8_t sparse_valid[NS], char *msg, size_t msg_len)
{
    char q[64];
    if (len > 0 && s[len - 1] == '\r')
        len--;
    for (size_t i = 0; i < len; i++) {
        unsigned c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c >= 0x7f) {
            snprintf(msg, msg_len, "expected printable text, got byte 0x%02x at byte %zu", c,
                     i + 1);
            return RAP_REJ_BINARY;
        }
    }
    if ((int64_t)len > max_line) {
        snprintf(msg, msg_len, "expected a line of at most %lld bytes, got a longer one",
                 (long long)max_line);
        return RAP_REJ_LONG;
    }
    const char *fs[RAP_CRITEO_FIELDS];
    size_t fl[RAP_CRITEO_FIELDS];
    int nf = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '\t') {
            if (nf < RAP_CRITEO_FIELDS) {
                fs[nf] = s + start;
                fl[nf] = i - start;
            }
            nf++;
            start = i + 1;
        }
    }
    if (nf != RAP_CRITEO_FIELDS) {
        snprintf(msg, msg_len, "expected %d tab-separated fields, got %d", RAP_CRITEO_FIELDS, nf);
        return RAP_REJ_FIELDS;
    }
    if (fl[0] != 1 || (fs[0][0] != '0' && fs[0][0] != '1')) {
        snprintf(msg, msg_len, "expected label 0 or 1, got %s", show(fs[0], fl[0], q, sizeof q));
        return RAP_REJ_LABEL;
    }
    /* integers: syntax of all, then range of all */
    for (int j = 0; j < ND; j++) {
        const char *f = fs[1 + j];
        size_t n = fl[1 + j], i = (n > 0 && f[0] == '-');
        bool ok = n == 0 || i < n;
        for (; ok && i < n; i++)
            ok = f[i] >= '0' && f[i] <= '9';
        if (!ok) {
            snprintf(msg, msg_len, "expected an integer in int_%d, got %s", j, show(f, n, q, sizeof q));
            return RAP_REJ_INT;
        }
    }
    int64_t iv[ND];
    for (int j = 0; j < ND; j++) {
        const char *f = fs[1 + j];
        size_t n = fl[1 + j], i = (n > 0 && f[0] == '-');
        bool neg = i == 1;
        while (i < n && f[i] == '0')
            i++;
        uint64_t v = 0;
        bool big = n - i > 10;
        for (; !big && i < n; i++)
            v = v * 10 + (uint64_t)(f[i] - '0');
        if (big || v > 2147483647ULL + (neg ? 1 : 0)) {
            snprintf(msg, msg_len, "expected int_%d in [-2147483648, 2147483647], got %s", j,
                     show(f, n, q, sizeof q));
            return RAP_REJ_RANGE;
        }
        iv[j] = neg ? -(int64_t)v : (int64_t)v;
    }
    for (int j = 0; j < NS; j++) {
        const char *f = fs[1 + ND + j];
        size_t n = fl[1 + ND + j];
        for (size_t i = 0; i < n; i++) {
            if (!HEXV[(unsigned char)f[i]]) {
                snprintf(msg, msg_len, "expected 1 to 8 hex digits in cat_%d, got %s", j,
                         show(f, n, q, sizeof q));
                return RAP_REJ_CAT;
            }
        }
    }
    for (int j = 0; j < NS; j++) {
        const char *f = fs[1 + ND + j];
        size_t n = fl[1 + ND + j];
        if (n > 8) {
            snprintf(msg, msg_len, "expected at most 8 hex digits in cat_%d, got %s", j,
                     show(f, n, q, sizeof q));
            return RAP_REJ_RANGE;
        }
    }
    /* a good row: the values */
    if (label)
        *label = (float)(fs[0][0] - '0');
    for (int j = 0; j < ND && dense; j++) {
        dense[j] = fl[1 + j] ? (float)iv[j] : 0.0f;
        dense_valid[j] = fl[1 + j] ? 1 : 0;
    }
    for (int j = 0; j < NS && sparse; j++) {
        const char *f = fs[1 + ND + j];
        uint32_t v = 0;
        for (size_t i = 0; i < fl[1 + ND + j]; i++)
            v = (v << 4) | (uint32_t)(HEXV[(unsigned char)f[i]] - 1);
        sparse[j] = (int64_t)v;
        sparse_valid[j] = fl[1 + ND + j] ? 1 : 0;
    }
    return -1;
}

/* ------------------------------------------------------------ fast path */

/* Where the fast path writes one row: pointers to row r of each array
 * (restrict: the compiler need not reload them after each store). */
typedef struct {
    float *restrict label;
    float *restrict dense;
    uint8_t *restrict dense_valid;
    int64_t *restrict sparse;
    uint8_t *restrict sparse_valid;
    int64_t R;
} row_out;

/* Parses the line at p into the row w points at when it is a plain good
 * row: label, integers of at most 10 digits, categoricals of at most 8 hex
 * digits, '\n' or "\r\n" at the end. Returns the start of the next line, or
 * NULL (nothing decided: the slow path looks at the line). Never reads past
 * end (the chunk's end); the line's '\n' stops every loop. */
static inline const char *fast_row(const char *p, const char *end, const row_out *w)
{
    const unsigned char *s = (const unsigned char *)p;
    const unsigned char *e = (const unsigned char *)end;
    const int64_t R = w->R;
    unsigned c0 = s[0];
    if ((c0 != '0' && c0 != '1') || s[1] != '\t')
        return NULL;
    *w->label = (float)(c0 - '0');
    s += 2;
    for (int j = 0; j < ND; j++) {
        float v = 0.0f;
        uint8_t valid = 0;
        if (*s != '\t') {
            unsigned neg = (*s == '-');
            s += neg;
            uint64_t x = 0;
            size_t nd = 0;
            uint64_t w8 = 0, nondig = 0;
            if (e - s >= 8) {
                /* SWAR: the digits among the next 8 bytes, no loop, no branch per digit */
                memcpy(&w8, s, 8);
                w8 ^= 0x3030303030303030ULL; /* digits become 0..9 */
                nondig = ((w8 + 0x7676767676767676ULL) | w8) & 0x8080808080808080ULL;
            }
            if (nondig) {
                nd = (size_t)__builtin_ctzll(nondig) >> 3;
                if (nd == 0)
                    return NULL;
                w8 <<= 8 * (8 - nd); /* right-align: leading zero digits */
                w8 = (w8 * 10) + (w8 >> 8);
                x = (((w8 & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
                     (((w8 >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
                s += nd;
            } else {
                const unsigned char *d0 = s;
                unsigned d;
                while ((d = (unsigned)*s - '0') < 10) {
                    x = x * 10 + d;
                    s++;
                }
                nd = (size_t)(s - d0);
            }
            if (nd == 0 || nd > 10 || *s != '\t' || x > 2147483647ULL + neg)
                return NULL;
            v = (float)(neg ? -(int64_t)x : (int64_t)x);
            valid = 1;
        }
        w->dense[j * R] = v;
        w->dense_valid[j * R] = valid;
        s++;
    }
    for (int j = 0; j < NS; j++) {
        uint32_t x = 0;
        size_t nd;
        /* the common case, 8 digits: independent lookups, no dependency chain */
        unsigned h0, h1, h2, h3, h4, h5, h6, h7;
        if (e - s > 8 && (h0 = HEXV[s[0]]) && (h1 = HEXV[s[1]]) && (h2 = HEXV[s[2]]) &&
            (h3 = HEXV[s[3]]) && (h4 = HEXV[s[4]]) && (h5 = HEXV[s[5]]) && (h6 = HEXV[s[6]]) &&
            (h7 = HEXV[s[7]]) && !HEXV[s[8]]) {
            x = ((h0 - 1) << 28) | ((h1 - 1) << 24) | ((h2 - 1) << 20) | ((h3 - 1) << 16) |
                ((h4 - 1) << 12) | ((h5 - 1) << 8) | ((h6 - 1) << 4) | (h7 - 1);
            s += 8;
            nd = 8;
        } else {
            const unsigned char *d0 = s;
            unsigned h;
            while ((h = HEXV[*s]) != 0) {
                x = (x << 4) | (h - 1);
                s++;
            }
            nd = (size_t)(s - d0);
            if (nd > 8)
                return NULL;
        }
        if (j < NS - 1) {
            if (*s != '\t')
                return NULL;
        } else if (*s != '\n') {
            if (*s != '\r' || s[1] != '\n')
                return NULL;
            s++;
        }
        w->sparse[j * R] = (int64_t)x;
        w->sparse_valid[j * R] = nd != 0;
        s++;
    }
    return (const char *)s;
}

/* ------------------------------------------------------------- chunks */

size_t rap_parsed_row_bytes(void) { return NS * 8 + 4 + ND * 4 + ND + NS; }

/* Grows the row arrays of o to hold at least rows, keeping n_used rows. */
static rap_status reserve(rap_parsed *o, int64_t rows)
{
    if (rows <= o->cap)
        return RAP_OK;
    int64_t R = o->cap * 2 > rows ? o->cap * 2 : rows;
    if (R < 1024)
        R = 1024;
    size_t bytes = (size_t)R * rap_parsed_row_bytes();
    char *blk = rap_aligned_alloc(bytes, "parsed chunk rows");
    if (!blk)
        return RAP_ERR_NOMEM;
    rap_parsed n = *o;
    n.sparse = (int64_t *)(void *)blk;
    n.label = (float *)(void *)(blk + (size_t)R * NS * 8);
    n.dense = n.label + R;
    n.dense_valid = (uint8_t *)(n.dense + (size_t)R * ND);
    n.sparse_valid = n.dense_valid + (size_t)R * ND;
    int64_t u = o->n_used, oR = o->cap;
    if (u > 0) {
        memcpy(n.label, o->label, (size_t)u * sizeof(float));
        for (int j = 0; j < ND; j++) {
            memcpy(n.dense + j * R, o->dense + j * oR, (size_t)u * sizeof(float));
            memcpy(n.dense_valid + j * R, o->dense_valid + j * oR, (size_t)u);
        }
        for (int j = 0; j < NS; j++) {
            memcpy(n.sparse + j * R, o->sparse + j * oR, (size_t)u * sizeof(int64_t));
            memcpy(n.sparse_valid + j * R, o->sparse_valid + j * oR, (size_t)u);
        }
    }
    rap_aligned_free(o->block);
    n.block = blk;
    n.cap = R;
    *o = n;
    return RAP_OK;
}

rap_status rap_parsed_reject(rap_parsed *o, int64_t line, int reason)
{
    if (o->n_rej == o->cap_rej) {
        int64_t c = o->cap_rej ? o->cap_rej * 2 : 64;
        rap_parse_reject *n = rap_realloc(o->rej, (size_t)c * sizeof *n, "reject list");
        if (!n)
            return RAP_ERR_NOMEM;
        o->rej = n;
        o->cap_rej = c;
    }
    rap_parse_reject *e = &o->rej[o->n_rej++];
    e->line = line;
    e->pos = o->n_used;
    e->reason = reason;
    e->msg = -1;
    return RAP_OK;
}

/* rap_parsed_reject with msg: the chunk's first message when it is the
 * first reject, and kept in o->msg while the reason has fewer than
 * RAP_REJ_EXAMPLES there (and o->msg has room). RAP_ERR_NOMEM. */
static rap_status add_reject(rap_parsed *o, int64_t line, int reason, const char *msg)
{
    RAP_TRY(rap_parsed_reject(o, line, reason));
    if (o->n_rej == 1)
        snprintf(o->first_msg, sizeof o->first_msg, "%s", msg);
    rap_parse_reject *e = &o->rej[o->n_rej - 1];
    if (o->n_msg < RAP_PARSE_MSGS && reason >= 0 && reason < RAP_REJ_COUNT &&
        o->reason_msgs[reason] < RAP_REJ_EXAMPLES) {
        o->reason_msgs[reason]++;
        e->msg = o->n_msg;
        snprintf(o->msg[o->n_msg++], sizeof o->msg[0], "%s", msg);
    }
    return RAP_OK;
}

rap_status rap_parse_chunk(const char *text, size_t n, int64_t max_line, rap_parsed *o)
{
    o->n_lines = 0;
    o->n_used = 0;
    o->n_rej = 0;
    o->first_msg[0] = 0;
    o->n_msg = 0;
    memset(o->reason_msgs, 0, sizeof o->reason_msgs);
    /* a good row has at least 40 bytes and its '\n' */
    RAP_TRY(reserve(o, (int64_t)(n / 256) + 16));
    const char *p = text, *end = text + n;
    while (p < end) {
        if (o->n_used == o->cap)
            RAP_TRY(reserve(o, o->cap + 1));
        int64_t line = o->n_lines++;
        int64_t u = o->n_used;
        row_out w = {o->label + u, o->dense + u, o->dense_valid + u, o->sparse + u,
                     o->sparse_valid + u, o->cap};
        const char *q = fast_row(p, end, &w);
        if (q && q - p - 1 <= max_line) {
            o->n_used++;
            p = q;
            continue;
        }
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            nl = end; /* not expected: every line ends in '\n' */
        int64_t r = o->n_used, R = o->cap;
        float dense[ND], label;
        uint8_t dv[ND], sv[NS];
        int64_t sp[NS];
        char msg[512];
        int why = rap_parse_line(p, (size_t)(nl - p), max_line, &label, dense, dv, sp, sv, msg,
                                 sizeof msg);
        if (why < 0) {
            o->label[r] = label;
            for (int j = 0; j < ND; j++) {
                o->dense[j * R + r] = dense[j];
                o->dense_valid[j * R + r] = dv[j];
            }
            for (int j = 0; j < NS; j++) {
                o->sparse[j * R + r] = sp[j];
                o->sparse_valid[j * R + r] = sv[j];
            }
            o->n_used++;
        } else {
            RAP_TRY(add_reject(o, line, why, msg));
        }
        p = nl + 1;
    }
    return RAP_OK;
}

void rap_parsed_free(rap_parsed *p)
{
    if (!p)
        return;
    rap_aligned_free(p->block);
    rap_free(p->rej);
    for (int j = 0; p->sids && j < p->ns; j++)
        rap_free(p->sids[j]);
    rap_free(p->sids);
    rap_free(p->sids_cap);
    memset(p, 0, sizeof *p);
}
