/*
 * parse_algo.h -- the per-line steps of the GPU parser that the kernels
 * (parse_gpu.cu) and their CPU reference (parse_ref.c) share as code, not
 * as a copy: the byte masks of a 16-byte word, the quote parity, one
 * field's conversion by its descriptor and the format (every encoding,
 * quoting, lists, the null token), the fault keys and the line's bounds.
 * The CPU parser of schemas (parse_schema.c) converts its fields with the
 * same pg_field, so an encoding is defined once. Everything here is a
 * pure function of its arguments, compiled for host and device alike, so
 * that both sides compute the same bits. Internal to src/data.
 *
 * Fault keys: a line's reject is the smallest key over its faults, key =
 * (class << 16) | (field + 1), a good line PG_KEY_OK. Classes are numbered
 * in the CPU parser's precedence, so the smallest key is its answer: a
 * class beats every later class whatever the fields, and within a class
 * the first field wins (parse.c checks all integers' syntax, then all
 * their ranges, then all categories' syntax, then their lengths).
 */
#ifndef RAP_PARSE_ALGO_H
#define RAP_PARSE_ALGO_H

#include "data/parse_ref.h"

#ifdef __CUDACC__
#define PG_HD __host__ __device__
#else
#define PG_HD
#endif

/* fault classes, in precedence order; 0 = no fault. The line-level ones
 * (binary .. fields) are decided before any field is converted; within a
 * field, quoting comes before its value. */
enum {
    PG_OK = 0,
    PG_BINARY,     /* a byte that is not printable text */
    PG_LONG,       /* longer than max_line */
    PG_QUOTE_OPEN, /* quoting: a quote not closed on its line */
    PG_FIELDS,     /* not NF fields */
    PG_QUOTE,      /* quoting: a field not wholly quoted holds a quote, or a quoted one
                    * does not end in one or holds a lone quote */
    PG_LABEL,      /* label field */
    PG_DENSE,      /* dense field: syntax */
    PG_DENSE_RANGE,/* dense field: out of range */
    PG_SPARSE,     /* sparse field (an id of a list): syntax */
    PG_SPARSE_RANGE, /* sparse field (an id of a list): too long / out of range */
    PG_LIST,       /* a list of more than max_list ids */
    PG_NCLASS
};
#define PG_KEY_OK 0xffffffffu

PG_HD static inline uint32_t pg_key(int cls, int field)
{
    return ((uint32_t)cls << 16) | (uint32_t)(field + 1);
}

PG_HD static inline int pg_key_reason(uint32_t key)
{
    switch (key >> 16) {
    case PG_BINARY: return RAP_REJ_BINARY;
    case PG_LONG: return RAP_REJ_LONG;
    case PG_QUOTE_OPEN: return RAP_REJ_QUOTE;
    case PG_FIELDS: return RAP_REJ_FIELDS;
    case PG_QUOTE: return RAP_REJ_QUOTE;
    case PG_LABEL: return RAP_REJ_LABEL;
    case PG_DENSE: return RAP_REJ_INT;
    case PG_SPARSE: return RAP_REJ_CAT;
    case PG_LIST: return RAP_REJ_LIST;
    default: return RAP_REJ_RANGE; /* PG_DENSE_RANGE, PG_SPARSE_RANGE */
    }
}

PG_HD static inline int pg_key_field(uint32_t key) { return (int)(key & 0xffffu) - 1; }

/* A field descriptor packed in one word for the kernels' registers: kind
 * (4 bits), encoding (4 bits), list separator (8 bits, 0: not a list),
 * column (16 bits). */
PG_HD static inline uint32_t pg_desc(rap_parse_field f)
{
    return ((uint32_t)f.kind & 0xfu) | (((uint32_t)f.enc & 0xfu) << 4) | ((uint32_t)f.sep << 8) |
           ((uint32_t)(uint16_t)f.col << 16);
}
#define PG_DESC_KIND(d) ((int)((d) & 0xfu))
#define PG_DESC_ENC(d) ((int)(((d) >> 4) & 0xfu))
#define PG_DESC_SEP(d) ((unsigned)(((d) >> 8) & 0xffu))
#define PG_DESC_COL(d) ((int)((d) >> 16))

/* Bounds of line i, [*ls, *end), without its '\n' (the caller strips a
 * '\r' before it). p0 = start[i], p1 = start[i + 1]. Offsets out of order
 * or past the text are clamped, so nothing outside [0, n_bytes) is named. */
PG_HD static inline void pg_line_bounds(int64_t p0, int64_t p1, int64_t n_bytes, int64_t *ls,
                                        int64_t *end)
{
    int64_t a = p0 < 0 ? 0 : p0 > n_bytes ? n_bytes : p0;
    int64_t b = p1 < 0 ? 0 : p1 > n_bytes ? n_bytes : p1;
    b -= 1; /* the '\n' */
    if (b < a)
        b = a;
    *ls = a;
    *end = b;
}

/* 0x80 in each byte of x that is zero, 0 in the others (exact: no carry
 * crosses a byte). */
PG_HD static inline uint32_t pg_zero_bytes(uint32_t x)
{
    return ~(((x & 0x7f7f7f7fu) + 0x7f7f7f7fu) | x) & 0x80808080u;
}

/* Bits 7, 15, 23, 31 of m to bits 0..3 (one multiply: the four partial
 * products land on distinct bits, so nothing carries). */
PG_HD static inline uint32_t pg_pack4(uint32_t m)
{
    return (((m >> 7) * 0x00204081u) >> 21) & 0xfu;
}

/* Whether byte c is binary: below 0x20 but tab, 0x7f, and 0x80 and above
 * unless text8 (parse.h; docs/SCHEMA.md "Bytes"). */
PG_HD static inline int pg_binary(unsigned c, int text8)
{
    return (c < 0x20 && c != '\t') || c == 0x7f || (c >= 0x80 && !text8);
}

/* The 16 bytes w[0..3] (little-endian words) at positions pos0..pos0+15,
 * only bytes k in [lo, hi): bit k of *del for the delimiter at byte k, of
 * *bin for a binary byte (pg_binary), of *quo for a '"' when quote. */
PG_HD static inline void pg_masks16_fmt(const uint32_t w[4], int lo, int hi, unsigned delim,
                                        int text8, int quote, uint32_t *del, uint32_t *bin,
                                        uint32_t *quo)
{
    uint32_t t = 0, b = 0, qm = 0;
    const uint32_t dd = (uint32_t)(delim & 0xffu) * 0x01010101u;
    for (int q = 0; q < 4; q++) {
        uint32_t x = w[q];
        uint32_t db = pg_zero_bytes(x ^ dd);
        uint32_t hb = pg_zero_bytes(x ^ 0x09090909u); /* a tab is never binary */
        uint32_t bb = (text8 ? 0u : (x & 0x80808080u)) | pg_zero_bytes(x ^ 0x7f7f7f7fu) |
                      pg_zero_bytes(x & 0xe0e0e0e0u);
        t |= pg_pack4(db) << (4 * q);
        b |= pg_pack4(bb & ~hb) << (4 * q);
        if (quote)
            qm |= pg_pack4(pg_zero_bytes(x ^ 0x22222222u)) << (4 * q);
    }
    uint32_t range = ((hi >= 16 ? 0x10000u : (1u << hi)) - 1u) & ~((1u << lo) - 1u);
    *del = t & range;
    *bin = b & range;
    *quo = qm & range;
}

/* Criteo's masks: tabs, bytes 0x80 and above binary, no quoting. */
PG_HD static inline void pg_masks16(const uint32_t w[4], int lo, int hi, uint32_t *tab,
                                    uint32_t *bin)
{
    uint32_t q;
    pg_masks16_fmt(w, lo, hi, '\t', 0, 0, tab, bin, &q);
}

/* Bit k: the parity of the set bits <= k of the 16-bit mask q. */
PG_HD static inline uint32_t pg_prefix_xor16(uint32_t q)
{
    q ^= q << 1;
    q ^= q << 2;
    q ^= q << 4;
    q ^= q << 8;
    return q & 0xffffu;
}

/* The delimiters of del that lie outside quotes: an even number of quotes
 * (quo, and cin: the parity of the quotes before the word) before them. A
 * delimiter is not a quote, so "before" and "up to" agree. */
PG_HD static inline uint32_t pg_outside(uint32_t del, uint32_t quo, uint32_t cin)
{
    return del & ~(pg_prefix_xor16(quo) ^ (cin ? 0xffffu : 0u));
}

/* Hex digit value (either case), 16 for any other byte: exactly parse.c's
 * HEXV less one. */
PG_HD static inline unsigned pg_hex(unsigned c)
{
    unsigned d = c - '0', l = (c | 0x20u) - 'a';
    return d < 10 ? d : l < 6 ? l + 10 : 16;
}

/* 10^k for k in [0, 65], each the double nearest to it (a decimal literal),
 * the same table on host and device. */
#define PG_P10_INIT {PG_P10_LIST}
#define PG_P10_LIST \
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, \
    1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, \
    1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, \
    1e33, 1e34, 1e35, 1e36, 1e37, 1e38, 1e39, 1e40, 1e41, 1e42, 1e43, \
    1e44, 1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, \
    1e55, 1e56, 1e57, 1e58, 1e59, 1e60, 1e61, 1e62, 1e63, 1e64, 1e65
#ifdef __CUDACC__
static __device__ const double pg_p10_dev[66] = PG_P10_INIT;
#endif
static const double pg_p10_host[66] = PG_P10_INIT;

PG_HD static inline double pg_p10(int k)
{
#ifdef __CUDA_ARCH__
    return pg_p10_dev[k];
#else
    return pg_p10_host[k];
#endif
}

/* float: [+-] digits [. digits] or [+-] . digits, then [eE [+-] digits]
 * (else PG_DENSE). The value: the first 19 significant digits as an
 * integer m (later ones dropped), the exponent e they leave, v = m * 10^e
 * in double (one multiply or divide by the table's power; e > 39: out of
 * range, e < -65: 0), rounded to float32; infinite: PG_DENSE_RANGE. Exact
 * for the decimals people write (m < 2^53, |e| <= 22: one rounding). */
PG_HD static inline int pg_float(const uint8_t *p, int32_t n, float *fv)
{
    int32_t i = 0, nd = 0, digits = 0, e10 = 0;
    int neg = 0;
    uint64_t m = 0;
    if (i < n && (p[i] == '-' || p[i] == '+'))
        neg = p[i++] == '-';
    for (; i < n; i++) {
        unsigned c = (unsigned)p[i] - '0';
        if (c > 9)
            break;
        digits++;
        if (nd == 0 && c == 0)
            continue;
        if (nd < 19) {
            m = m * 10 + c;
            nd++;
        } else {
            e10++;
        }
    }
    if (i < n && p[i] == '.') {
        for (i++; i < n; i++) {
            unsigned c = (unsigned)p[i] - '0';
            if (c > 9)
                break;
            digits++;
            if (nd == 0 && c == 0) {
                e10--;
            } else if (nd < 19) {
                m = m * 10 + c;
                nd++;
                e10--;
            }
        }
    }
    if (digits == 0)
        return PG_DENSE;
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        int eneg = 0;
        int32_t ed = 0, ev = 0;
        i++;
        if (i < n && (p[i] == '-' || p[i] == '+'))
            eneg = p[i++] == '-';
        for (; i < n; i++) {
            unsigned c = (unsigned)p[i] - '0';
            if (c > 9)
                break;
            ed++;
            if (ev < 100000)
                ev = ev * 10 + (int32_t)c;
        }
        if (ed == 0)
            return PG_DENSE;
        e10 += eneg ? -ev : ev;
    }
    if (i != n)
        return PG_DENSE;
    double v = 0.0;
    if (m != 0) {
        if (e10 > 39)
            return PG_DENSE_RANGE;
        if (e10 >= 0)
            v = (double)m * pg_p10(e10);
        else if (e10 >= -65)
            v = (double)m / pg_p10(-e10);
    }
    float f = (float)v;
    if (f > 3.40282347e38f)
        return PG_DENSE_RANGE;
    *fv = neg ? -f : f;
    return PG_OK;
}

/* One value p[0, n) (n >= 1) of encoding enc, its bytes as written (esc:
 * quoted content, where "" stands for one quote): the fault class, or
 * PG_OK and the value in *fv (label, dense) or *iv (sparse). The
 * encodings, rule for rule (docs/SCHEMA.md "Encodings"):
 *   LABEL01  exactly "0" or "1";
 *   INT32    an optional '-' then one or more digits (else PG_DENSE);
 *            after the leading zeros at most 10 digits and the value in
 *            [-2^31, 2^31) (else PG_DENSE_RANGE); the float is the int64
 *            value rounded to nearest (as C's cast);
 *   FLOAT    pg_float;
 *   HEX32    hex digits only (else PG_SPARSE), at most 8 of them (else
 *            PG_SPARSE_RANGE; checked after the digits, so a long field
 *            with a bad digit is PG_SPARSE), unsigned;
 *   HEX64    the same with at most 16, the int64 of the 64 bits;
 *   DEC64    an optional '-' then digits (else PG_SPARSE), after the
 *            leading zeros at most 19 and the value in [-2^63, 2^63) (else
 *            PG_SPARSE_RANGE);
 *   STR      any bytes: rap_hash_str of them (a "" pair hashed as one '"').
 * p is read in [0, n) only. */
PG_HD static inline int pg_item(int enc, const uint8_t *p, int32_t n, int esc, float *fv,
                                int64_t *iv)
{
    switch (enc) {
    case RAP_ENC_LABEL01:
        if (n != 1 || (p[0] != '0' && p[0] != '1'))
            return PG_LABEL;
        *fv = (float)(p[0] - '0');
        return PG_OK;
    case RAP_ENC_INT32: {
        int32_t i = p[0] == '-';
        uint64_t neg = (uint64_t)i;
        if (i == n)
            return PG_DENSE;
        uint64_t v = 0;
        int32_t nd = 0; /* digits after the leading zeros */
        for (; i < n; i++) {
            unsigned c = (unsigned)p[i] - '0';
            if (c > 9)
                return PG_DENSE;
            if (nd > 0 || c > 0) {
                nd++;
                if (nd <= 10)
                    v = v * 10 + c;
            }
        }
        if (nd > 10 || v > 2147483647ULL + neg)
            return PG_DENSE_RANGE;
        int64_t x = neg ? -(int64_t)v : (int64_t)v;
        *fv = (float)x;
        return PG_OK;
    }
    case RAP_ENC_FLOAT:
        return pg_float(p, n, fv);
    case RAP_ENC_HEX32:
    case RAP_ENC_HEX64: {
        uint64_t v = 0;
        for (int32_t i = 0; i < n; i++) {
            unsigned h = pg_hex(p[i]);
            if (h > 15)
                return PG_SPARSE;
            v = (v << 4) | h;
        }
        if (n > (enc == RAP_ENC_HEX32 ? 8 : 16))
            return PG_SPARSE_RANGE;
        *iv = (int64_t)v; /* the 64 bits as int64 (two's complement) */
        return PG_OK;
    }
    case RAP_ENC_DEC64: {
        int32_t i = p[0] == '-';
        const int neg = i;
        if (i == n)
            return PG_SPARSE;
        uint64_t v = 0;
        int32_t nd = 0;
        for (; i < n; i++) {
            unsigned c = (unsigned)p[i] - '0';
            if (c > 9)
                return PG_SPARSE;
            if (nd > 0 || c > 0) {
                nd++;
                if (nd <= 19)
                    v = v * 10 + c;
            }
        }
        if (nd > 19 || v > 9223372036854775807ULL + (uint64_t)neg)
            return PG_SPARSE_RANGE;
        *iv = neg ? (v == 0 ? 0 : -(int64_t)(v - 1) - 1) : (int64_t)v;
        return PG_OK;
    }
    case RAP_ENC_STR: {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (int32_t i = 0; i < n; i++) {
            h ^= p[i];
            h *= 0x100000001b3ULL;
            if (esc && p[i] == '"')
                i++; /* the pair's second quote */
        }
        *iv = (int64_t)h;
        return PG_OK;
    }
    default:
        return PG_OK;
    }
}

/* The content of field p[0, n) under quoting: a field starting with '"'
 * must end with another (n >= 2) and hold its other quotes in pairs
 * (""); its content lies between the two, *esc = 1. A field not starting
 * with '"' must hold none: it is its content. PG_QUOTE else. */
PG_HD static inline int pg_content(const uint8_t *p, int32_t n, const uint8_t **c, int32_t *cn,
                                   int *esc)
{
    *c = p;
    *cn = n;
    *esc = 0;
    if (n > 0 && p[0] == '"') {
        if (n < 2 || p[n - 1] != '"')
            return PG_QUOTE;
        for (int32_t i = 1; i < n - 1; i++) {
            if (p[i] == '"') {
                if (i + 1 >= n - 1 || p[i + 1] != '"')
                    return PG_QUOTE;
                i++;
            }
        }
        *c = p + 1;
        *cn = n - 2;
        *esc = 1;
        return PG_OK;
    }
    for (int32_t i = 0; i < n; i++)
        if (p[i] == '"')
            return PG_QUOTE;
    return PG_OK;
}

/* Whether content c[0, n) is the null token. */
PG_HD static inline int pg_is_null(const rap_parse_format *fm, const uint8_t *c, int32_t n)
{
    if (n != fm->null_len)
        return 0;
    for (int32_t i = 0; i < n; i++)
        if (c[i] != fm->null_tok[i])
            return 0;
    return 1;
}

/* The list c[0, n) (not empty): its items between separators sep, each
 * converted by enc (an empty item is PG_SPARSE). The class is the
 * smallest of the items', else PG_LIST for more than max_list items, else
 * PG_OK; *cnt the items. ids (may be NULL; room for max_list) gets the
 * ids of the first max_list items, meaningful when the class is PG_OK. */
PG_HD static inline int pg_list(int enc, const uint8_t *c, int32_t n, unsigned sep, int esc,
                                int32_t max_list, int64_t *ids, int32_t *cnt)
{
    int cls = PG_OK;
    int32_t k = 0, a = 0;
    for (int32_t i = 0; i <= n; i++) {
        if (i < n && c[i] != sep)
            continue;
        int64_t id = 0;
        float fv;
        int ci = i == a ? PG_SPARSE : pg_item(enc, c + a, i - a, esc, &fv, &id);
        if (ci != PG_OK)
            cls = cls == PG_OK || ci < cls ? ci : cls;
        else if (ids && k < max_list)
            ids[k] = id;
        k++;
        a = i + 1;
    }
    *cnt = k;
    if (cls == PG_OK && k > max_list)
        cls = PG_LIST;
    return cls;
}

/* Converts one field p[0, n) by its descriptor d and the format: returns
 * its fault class (PG_OK for none). On PG_OK: the value in *fv (label,
 * dense) or *iv (a plain sparse field), *cnt its ids (a plain sparse
 * field 0 or 1, a list its length), a list's ids in ids (may be NULL:
 * pg_list_ids gets them later; else room for max_list) and *valid (0: a
 * null). Quoting first
 * (pg_content); then a list: the null token is a null, an empty content
 * an empty list (valid), else pg_list; any other field: an empty content
 * is a null (the label's a PG_LABEL fault), else pg_item. A skipped field
 * is never a fault. p is read in [0, n) only. */
PG_HD static inline int pg_field_loops(uint32_t d, const rap_parse_format *fm, const uint8_t *p,
                                       int32_t n, float *fv, int64_t *iv, int64_t *ids,
                                       int32_t *cnt, int *valid)
{
    *valid = 0;
    *cnt = 0;
    const int kind = PG_DESC_KIND(d), enc = PG_DESC_ENC(d);
    if (kind == RAP_COL_SKIP)
        return PG_OK;
    const uint8_t *c = p;
    int32_t cn = n;
    int esc = 0;
    if (fm->quote) {
        int q = pg_content(p, n, &c, &cn, &esc);
        if (q != PG_OK)
            return q;
    }
    const unsigned sep = PG_DESC_SEP(d);
    if (sep) {
        if (pg_is_null(fm, c, cn))
            return PG_OK;
        *valid = 1;
        return cn == 0 ? PG_OK : pg_list(enc, c, cn, sep, esc, fm->max_list, ids, cnt);
    }
    if (cn == 0) {
        if (kind == RAP_COL_LABEL)
            return PG_LABEL;
        *fv = 0.0f;
        return PG_OK;
    }
    int cls = pg_item(enc, c, cn, esc, fv, iv);
    if (cls == PG_OK) {
        *valid = 1;
        *cnt = kind == RAP_COL_SPARSE;
    }
    return cls;
}

/* A byte c in every byte of a word. */
#define PG_B8(c) (0x0101010101010101ull * (uint64_t)(c))

/* The first min(n, 8) bytes of p (n >= 1) as a little-endian word, zeros
 * above. On the device two aligned 8-byte loads, shifted: the reads stay
 * in the aligned words that hold p[0, min(n, 8)), so inside any buffer
 * whose size is a multiple of 8 (the kernels' text is padded to 16). On
 * the host p is read in [0, min(n, 8)) only. */
PG_HD static inline uint64_t pg_load8(const uint8_t *p, int32_t n)
{
    const int32_t k = n < 8 ? n : 8;
#ifdef __CUDA_ARCH__
    const uintptr_t a = (uintptr_t)p;
    const unsigned long long *w = (const unsigned long long *)(a & ~(uintptr_t)7);
    const unsigned off = (unsigned)(a & 7);
    uint64_t x = (uint64_t)__ldg(w) >> (8 * off);
    if (off && (int32_t)(8 - off) < k)
        x |= (uint64_t)__ldg(w + 1) << (64 - 8 * off);
#else
    uint64_t x = 0;
    for (int32_t i = 0; i < k; i++)
        x |= (uint64_t)p[i] << (8 * i);
#endif
    return k == 8 ? x : x & ((1ull << (8 * k)) - 1);
}

/* pg_field's answer for the common fields in one word, without a loop
 * over the bytes: a skipped field, an empty one, and 1 to 8 bytes of
 * LABEL01, INT32, HEX32 or HEX64 outside quoting and lists. The bytes are
 * right-aligned in the word with '0's before them (byte 0 the most
 * significant digit), checked as digits 8 at a time (SWAR) and combined
 * pairwise: 3 multiply-adds for decimal, 3 shift-ors for hex. Returns -1
 * where it does not decide (a byte that is not a digit, a lone '-',
 * longer fields, other encodings, quoting, lists): pg_field_loops then
 * does, so every fault class still comes from the loops. Where it
 * decides, the class, value and flags are the loops', bit for bit: at
 * most 8 digits are at most 99,999,999, inside INT32's and HEX32's
 * ranges. */
PG_HD static inline int pg_field_fast(uint32_t d, const rap_parse_format *fm, const uint8_t *p,
                                      int32_t n, float *fv, int64_t *iv, int32_t *cnt,
                                      int *valid)
{
    const int kind = PG_DESC_KIND(d), enc = PG_DESC_ENC(d);
    *valid = 0;
    *cnt = 0;
    if (kind == RAP_COL_SKIP)
        return PG_OK;
    if (fm->quote || PG_DESC_SEP(d) || n > 8)
        return -1;
    if (n == 0) {
        if (kind == RAP_COL_LABEL)
            return PG_LABEL;
        *fv = 0.0f;
        return PG_OK;
    }
    const uint64_t x = pg_load8(p, n);
    const unsigned up = 8u * (unsigned)(8 - n); /* 0 .. 56 */
    uint64_t y = (x << up) | (n == 8 ? 0 : PG_B8(0x30) >> (8 * n));
    switch (enc) {
    case RAP_ENC_LABEL01:
        if (n != 1 || (x != '0' && x != '1'))
            return -1;
        *fv = (float)(x - '0');
        break;
    case RAP_ENC_INT32: {
        const int neg = (x & 0xffu) == '-';
        if (neg) {
            if (n == 1)
                return -1;
            y = (y & ~(0xffull << up)) | (0x30ull << up); /* the '-' as a leading '0' */
        }
        /* every byte in [0x30, 0x3f], then <= 0x39 (no carry crosses a byte) */
        if ((y & PG_B8(0xf0)) != PG_B8(0x30) || ((y + PG_B8(0x06)) & PG_B8(0xf0)) != PG_B8(0x30))
            return -1;
        uint64_t v = y & PG_B8(0x0f);
        v = (v * 10 + (v >> 8)) & 0x00ff00ff00ff00ffull;
        v = (v * 100 + (v >> 16)) & 0x0000ffff0000ffffull;
        v = (v * 10000 + (v >> 32)) & 0xffffffffull;
        *fv = (float)(neg ? -(int64_t)v : (int64_t)v);
        break;
    }
    case RAP_ENC_HEX32:
    case RAP_ENC_HEX64: {
        if (y & PG_B8(0x80))
            return -1;
        /* bytes below 0x80: b + (0x80 - lo) has bit 7 iff b >= lo, no carry */
        const uint64_t dig = (y + PG_B8(0x50)) & ~(y + PG_B8(0x46)) & PG_B8(0x80);
        const uint64_t l = y | PG_B8(0x20);
        const uint64_t let = (l + PG_B8(0x1f)) & ~(l + PG_B8(0x19)) & PG_B8(0x80);
        if ((dig | let) != PG_B8(0x80))
            return -1;
        uint64_t v = (y & PG_B8(0x0f)) + (let >> 7) * 9;
        v = ((v << 4) | (v >> 8)) & 0x00ff00ff00ff00ffull;
        v = ((v << 8) | (v >> 16)) & 0x0000ffff0000ffffull;
        v = ((v << 16) | (v >> 32)) & 0xffffffffull;
        *iv = (int64_t)v;
        break;
    }
    default:
        return -1;
    }
    *valid = 1;
    *cnt = kind == RAP_COL_SPARSE;
    return PG_OK;
}

/* One field by its descriptor: pg_field_fast, else pg_field_loops. On the
 * host p is read in [0, n) only; on the device pg_load8 may read the rest
 * of the aligned 8-byte words that hold the field's first 8 bytes. */
PG_HD static inline int pg_field(uint32_t d, const rap_parse_format *fm, const uint8_t *p,
                                 int32_t n, float *fv, int64_t *iv, int64_t *ids, int32_t *cnt,
                                 int *valid)
{
    const int c = pg_field_fast(d, fm, p, n, fv, iv, cnt, valid);
    return c >= 0 ? c : pg_field_loops(d, fm, p, n, fv, iv, ids, cnt, valid);
}

/* The ids of a list field that pg_field accepted, into ids (room for
 * max_list): the same walk again. Returns their count. */
PG_HD static inline int32_t pg_list_ids(uint32_t d, const rap_parse_format *fm,
                                        const uint8_t *p, int32_t n, int64_t *ids)
{
    const uint8_t *c = p;
    int32_t cn = n, k = 0;
    int esc = 0;
    if (fm->quote)
        pg_content(p, n, &c, &cn, &esc);
    if (cn == 0 || pg_is_null(fm, c, cn))
        return 0;
    pg_list(PG_DESC_ENC(d), c, cn, PG_DESC_SEP(d), esc, fm->max_list, ids, &k);
    return k;
}

/* The line-level fault key once the boundaries are known: bin_field >= 0
 * when a binary byte was found (in that field, counted as nf past the
 * last one, so that the key's 16 field bits always hold it), len the
 * length without '\r', ntab the delimiters outside quotes, qodd the
 * parity of the line's quotes (1: one is not closed: in field ntab).
 * PG_KEY_OK when the fields are to be converted. */
PG_HD static inline uint32_t pg_line_key_q(int64_t bin_field, int64_t len, int64_t max_line,
                                           int64_t ntab, int qodd, int nf)
{
    if (bin_field >= 0)
        return pg_key(PG_BINARY, bin_field < nf ? (int)bin_field : nf);
    if (len > max_line)
        return pg_key(PG_LONG, -1);
    if (qodd)
        return pg_key(PG_QUOTE_OPEN, ntab < nf ? (int)ntab : nf);
    if (ntab != nf - 1)
        return pg_key(PG_FIELDS, ntab + 1 < nf ? (int)(ntab + 1) : nf);
    return PG_KEY_OK;
}

/* Without quoting. */
PG_HD static inline uint32_t pg_line_key(int64_t bin_field, int64_t len, int64_t max_line,
                                         int64_t ntab, int nf)
{
    return pg_line_key_q(bin_field, len, max_line, ntab, 0, nf);
}

#endif /* RAP_PARSE_ALGO_H */
