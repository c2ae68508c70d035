/* json.c -- the JSON reader and writer (json.h). */
#include "core/json.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ reader */

rap_status rap_json_reader_init(rap_json_reader *r, const char *text, size_t n, size_t max_bytes,
                                const char *file, const char *what)
{
    memset(r, 0, sizeof *r);
    r->start = r->p = text;
    r->end = text + n;
    r->file = file ? file : "(JSON)";
    r->what = what ? what : "JSON text";
    if (n > max_bytes)
        return rap_fail(RAP_ERR_DATA, "%s: %s of %zu bytes, more than the %zu rap reads", r->file,
                        r->what, n, max_bytes);
    return RAP_OK;
}

rap_status rap_json_error(const rap_json_reader *r, const char *why)
{
    return rap_fail(RAP_ERR_DATA, "%s: corrupt %s at byte %zu of the JSON: %s", r->file, r->what,
                    rap_json_offset(r), why);
}

size_t rap_json_offset(const rap_json_reader *r) { return (size_t)(r->p - r->start); }

static void skip_ws(rap_json_reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

bool rap_json_peek(rap_json_reader *r, char c)
{
    skip_ws(r);
    return r->p < r->end && *r->p == c;
}

/* Consumes c after whitespace when it is next. */
static bool accept(rap_json_reader *r, char c)
{
    if (!rap_json_peek(r, c))
        return false;
    r->p++;
    return true;
}

static rap_status open_container(rap_json_reader *r, char c, const char *expected)
{
    if (!rap_json_peek(r, c))
        return rap_json_error(r, expected);
    if (r->depth >= RAP_JSON_MAX_DEPTH)
        return rap_json_error(r, "nesting too deep (more than 64 objects and arrays)");
    r->p++;
    uint64_t bit = (uint64_t)1 << r->depth;
    if (c == '{')
        r->is_obj |= bit;
    else
        r->is_obj &= ~bit;
    r->fresh |= bit;
    r->depth++;
    return RAP_OK;
}

rap_status rap_json_object_begin(rap_json_reader *r)
{
    return open_container(r, '{', "expected an object");
}

rap_status rap_json_array_begin(rap_json_reader *r)
{
    return open_container(r, '[', "expected an array");
}

/* The innermost container (of the kind obj) ends here (*more false) or has
 * one more member after its ',' (*more true). */
static rap_status next_member(rap_json_reader *r, bool obj, bool *more)
{
    *more = false;
    if (r->depth == 0 || (((r->is_obj >> (r->depth - 1)) & 1) != 0) != obj)
        return rap_fail(RAP_ERR_INTERNAL, "JSON reader: no %s open", obj ? "object" : "array");
    uint64_t bit = (uint64_t)1 << (r->depth - 1);
    if (accept(r, obj ? '}' : ']')) {
        r->depth--;
        return RAP_OK;
    }
    if (!(r->fresh & bit) && !accept(r, ','))
        return rap_json_error(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    r->fresh &= ~bit;
    *more = true;
    return RAP_OK;
}

rap_status rap_json_next_key(rap_json_reader *r, bool *more, char *key, size_t cap, size_t *len)
{
    RAP_TRY(next_member(r, true, more));
    if (!*more)
        return RAP_OK;
    if (!rap_json_peek(r, '"'))
        return rap_json_error(r, "expected a string (an object's key)");
    RAP_TRY(rap_json_string(r, key, cap, len));
    if (!accept(r, ':'))
        return rap_json_error(r, "expected ':'");
    return RAP_OK;
}

rap_status rap_json_next_item(rap_json_reader *r, bool *more)
{
    return next_member(r, false, more);
}

/* Four hex digits at p (before end) into *u. */
static bool hex4(const char *p, const char *end, unsigned *u)
{
    if (end - p < 4)
        return false;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return false;
        v = v * 16 + d;
    }
    *u = v;
    return true;
}

/* The \u escape at r->p (after the "\u"): its code point as UTF-8 in u8
 * (*m bytes). */
static rap_status unicode_escape(rap_json_reader *r, char u8[4], int *m)
{
    unsigned u, lo;
    if (!hex4(r->p, r->end, &u))
        return rap_json_error(r, "bad \\u escape (four hex digits expected)");
    r->p += 4;
    if (u >= 0xd800 && u <= 0xdbff) { /* a high surrogate: its low half must follow */
        if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' ||
            !hex4(r->p + 2, r->end, &lo) || lo < 0xdc00 || lo > 0xdfff)
            return rap_json_error(r, "unpaired surrogate in a \\u escape");
        r->p += 6;
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
    } else if (u >= 0xdc00 && u <= 0xdfff) {
        return rap_json_error(r, "unpaired surrogate in a \\u escape");
    }
    if (u == 0)
        return rap_json_error(r, "\\u0000 in a string (rap's strings end at a NUL)");
    if (u < 0x80) {
        u8[0] = (char)u;
        *m = 1;
    } else if (u < 0x800) {
        u8[0] = (char)(0xc0 | (u >> 6));
        u8[1] = (char)(0x80 | (u & 0x3f));
        *m = 2;
    } else if (u < 0x10000) {
        u8[0] = (char)(0xe0 | (u >> 12));
        u8[1] = (char)(0x80 | ((u >> 6) & 0x3f));
        u8[2] = (char)(0x80 | (u & 0x3f));
        *m = 3;
    } else {
        u8[0] = (char)(0xf0 | (u >> 18));
        u8[1] = (char)(0x80 | ((u >> 12) & 0x3f));
        u8[2] = (char)(0x80 | ((u >> 6) & 0x3f));
        u8[3] = (char)(0x80 | (u & 0x3f));
        *m = 4;
    }
    return RAP_OK;
}

/* One character of a string at r->p (not its closing quote), decoded into
 * u8 (*m bytes). */
static rap_status string_char(rap_json_reader *r, char u8[4], int *m)
{
    unsigned char c = (unsigned char)*r->p;
    if (c < 0x20)
        return rap_json_error(r, "control character in a string");
    if (c != '\\') {
        r->p++;
        u8[0] = (char)c;
        *m = 1;
        return RAP_OK;
    }
    if (r->end - r->p < 2)
        return rap_json_error(r, "unterminated string");
    char e = r->p[1];
    r->p += 2;
    *m = 1;
    switch (e) {
    case 'n': u8[0] = '\n'; return RAP_OK;
    case 't': u8[0] = '\t'; return RAP_OK;
    case 'r': u8[0] = '\r'; return RAP_OK;
    case 'b': u8[0] = '\b'; return RAP_OK;
    case 'f': u8[0] = '\f'; return RAP_OK;
    case '/': case '\\': case '"': u8[0] = e; return RAP_OK;
    case 'u': return unicode_escape(r, u8, m);
    default: r->p -= 1; return rap_json_error(r, "bad escape in a string");
    }
}

rap_status rap_json_string(rap_json_reader *r, char *out, size_t cap, size_t *len)
{
    if (!accept(r, '"'))
        return rap_json_error(r, "expected a string");
    size_t k = 0;
    for (;;) {
        if (r->p >= r->end)
            return rap_json_error(r, "unterminated string");
        if (*r->p == '"') {
            r->p++;
            break;
        }
        char u8[4];
        int m = 0;
        RAP_TRY(string_char(r, u8, &m));
        for (int q = 0; q < m; q++, k++)
            if (k + 1 < cap)
                out[k] = u8[q];
    }
    if (cap)
        out[k < cap ? k : cap - 1] = 0;
    if (len)
        *len = k;
    return RAP_OK;
}

rap_status rap_json_string_dup(rap_json_reader *r, size_t max_len, char **out)
{
    *out = NULL;
    skip_ws(r);
    const char *at = r->p;
    size_t len = 0;
    RAP_TRY(rap_json_string(r, NULL, 0, &len));
    if (len > max_len) {
        r->p = at;
        char why[96];
        snprintf(why, sizeof why, "a string of %zu bytes, more than %zu", len, max_len);
        return rap_json_error(r, why);
    }
    char *s = rap_malloc(len + 1, "JSON string");
    if (!s)
        return RAP_ERR_NOMEM;
    r->p = at; /* the second pass cannot fail: the first one checked it */
    rap_status st = rap_json_string(r, s, len + 1, NULL);
    if (st != RAP_OK) {
        rap_free(s);
        return st;
    }
    *out = s;
    return RAP_OK;
}

static bool is_digit(const rap_json_reader *r)
{
    return r->p < r->end && *r->p >= '0' && *r->p <= '9';
}

rap_status rap_json_uint(rap_json_reader *r, uint64_t max, uint64_t *v)
{
    skip_ws(r);
    if (!is_digit(r))
        return rap_json_error(r, "expected a non-negative integer");
    if (*r->p == '0' && r->end - r->p > 1 && r->p[1] >= '0' && r->p[1] <= '9')
        return rap_json_error(r, "a number with a leading zero");
    uint64_t x = 0;
    while (is_digit(r)) {
        uint64_t d = (uint64_t)(*r->p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return rap_json_error(r, "integer too large");
        x = x * 10 + d;
        r->p++;
    }
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return rap_json_error(r, "expected an integer, not a fraction or an exponent");
    if (x > max) {
        char why[96];
        snprintf(why, sizeof why, "integer %llu above %llu", (unsigned long long)x,
                 (unsigned long long)max);
        return rap_json_error(r, why);
    }
    *v = x;
    return RAP_OK;
}

/* A number of RFC 8259's grammar, skipped. */
static rap_status skip_number(rap_json_reader *r)
{
    if (r->p < r->end && *r->p == '-')
        r->p++;
    if (!is_digit(r))
        return rap_json_error(r, "bad number");
    if (*r->p == '0' && r->end - r->p > 1 && r->p[1] >= '0' && r->p[1] <= '9')
        return rap_json_error(r, "a number with a leading zero");
    if (*r->p == '0')
        r->p++;
    else
        while (is_digit(r))
            r->p++;
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (!is_digit(r))
            return rap_json_error(r, "bad number (no digit after '.')");
        while (is_digit(r))
            r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        if (!is_digit(r))
            return rap_json_error(r, "bad number (no digit in the exponent)");
        while (is_digit(r))
            r->p++;
    }
    return RAP_OK;
}

rap_status rap_json_int(rap_json_reader *r, int64_t lo, int64_t hi, int64_t *v)
{
    skip_ws(r);
    bool neg = r->p < r->end && *r->p == '-';
    const char *at = r->p;
    if (neg) {
        r->p++;
        if (!is_digit(r))
            return rap_json_error(r, "expected digits after '-'");
    }
    uint64_t x;
    rap_status st = rap_json_uint(r, (uint64_t)INT64_MAX + neg, &x);
    if (st != RAP_OK)
        return st;
    int64_t y = neg ? (x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x) : (int64_t)x;
    if (y < lo || y > hi) {
        r->p = at;
        char why[128];
        snprintf(why, sizeof why, "integer %lld not in [%lld, %lld]", (long long)y,
                 (long long)lo, (long long)hi);
        return rap_json_error(r, why);
    }
    *v = y;
    return RAP_OK;
}

rap_status rap_json_number(rap_json_reader *r, double *v)
{
    skip_ws(r);
    const char *at = r->p;
    RAP_TRY(skip_number(r));
    size_t n = (size_t)(r->p - at);
    char buf[65];
    if (n >= sizeof buf) {
        r->p = at;
        return rap_json_error(r, "a number of more than 64 characters");
    }
    memcpy(buf, at, n);
    buf[n] = 0;
    double x = strtod(buf, NULL); /* the grammar was checked: all of buf is the number */
    if (!isfinite(x)) {
        r->p = at;
        return rap_json_error(r, "a number beyond the range of a double");
    }
    *v = x;
    return RAP_OK;
}

/* One scalar value, or the opening of a container. */
static rap_status skip_start(rap_json_reader *r)
{
    skip_ws(r);
    if (r->p >= r->end)
        return rap_json_error(r, "unexpected end");
    char c = *r->p;
    if (c == '{')
        return rap_json_object_begin(r);
    if (c == '[')
        return rap_json_array_begin(r);
    if (c == '"')
        return rap_json_string(r, NULL, 0, NULL);
    if (c == '-' || (c >= '0' && c <= '9'))
        return skip_number(r);
    static const char *const lit[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lit[i]);
        if ((size_t)(r->end - r->p) >= n && !memcmp(r->p, lit[i], n)) {
            r->p += n;
            return RAP_OK;
        }
    }
    return rap_json_error(r, "unexpected character");
}

rap_status rap_json_skip(rap_json_reader *r)
{
    const int base = r->depth;
    do {
        RAP_TRY(skip_start(r));
        /* step to the next member to read, closing the containers that end */
        while (r->depth > base) {
            bool more;
            if ((r->is_obj >> (r->depth - 1)) & 1)
                RAP_TRY(rap_json_next_key(r, &more, NULL, 0, NULL));
            else
                RAP_TRY(rap_json_next_item(r, &more));
            if (more)
                break;
        }
    } while (r->depth > base);
    return RAP_OK;
}

rap_status rap_json_end(rap_json_reader *r)
{
    if (r->depth != 0)
        return rap_json_error(r, "an object or array is not closed");
    skip_ws(r);
    if (r->p != r->end)
        return rap_json_error(r, "bytes after the JSON value (only whitespace may follow it)");
    return RAP_OK;
}

/* ------------------------------------------------------------ writer */

void rap_json_escape(const char *s, rap_json_sink put, void *ctx)
{
    put(ctx, "\"", 1);
    if (s) {
        const char *run = s; /* bytes that go out as they are */
        for (; *s; s++) {
            unsigned char c = (unsigned char)*s;
            if (c != '"' && c != '\\' && c >= 0x20)
                continue;
            if (s > run)
                put(ctx, run, (size_t)(s - run));
            char e[8];
            if (c == '"' || c == '\\') {
                e[0] = '\\';
                e[1] = (char)c;
                put(ctx, e, 2);
            } else {
                snprintf(e, sizeof e, "\\u%04x", c);
                put(ctx, e, 6);
            }
            run = s + 1;
        }
        if (s > run)
            put(ctx, run, (size_t)(s - run));
    }
    put(ctx, "\"", 1);
}

static void file_sink(void *ctx, const char *s, size_t n) { fwrite(s, 1, n, (FILE *)ctx); }

void rap_json_put_str(FILE *f, const char *s) { rap_json_escape(s, file_sink, f); }

const char *rap_json_num(double x, char *buf)
{
    if (!isfinite(x))
        return "null";
    snprintf(buf, RAP_JSON_NUM_LEN, "%.9g", x);
    return buf;
}

void rap_json_put_num(FILE *f, double x)
{
    char buf[RAP_JSON_NUM_LEN];
    fputs(rap_json_num(x, buf), f);
}
