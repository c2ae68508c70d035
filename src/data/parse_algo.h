/*
 * parse_algo.h -- the per-line steps of the GPU parser that the kernels
 * (parse_gpu.cu) and their CPU reference (parse_ref.c) share as code, not
 * as a copy: the byte masks of a 16-byte word, one field's conversion by its
 * descriptor, the fault keys and the line's bounds. Everything here is a
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

/* fault classes, in precedence order; 0 = no fault */
enum {
    PG_OK = 0,
    PG_BINARY,     /* a byte that is not printable text */
    PG_LONG,       /* longer than max_line */
    PG_FIELDS,     /* not NF fields */
    PG_LABEL,      /* label field */
    PG_DENSE,      /* dense field: syntax */
    PG_DENSE_RANGE,/* dense field: out of range */
    PG_SPARSE,     /* sparse field: syntax */
    PG_SPARSE_RANGE, /* sparse field: too long / out of range */
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
    case PG_FIELDS: return RAP_REJ_FIELDS;
    case PG_LABEL: return RAP_REJ_LABEL;
    case PG_DENSE: return RAP_REJ_INT;
    case PG_SPARSE: return RAP_REJ_CAT;
    default: return RAP_REJ_RANGE; /* PG_DENSE_RANGE, PG_SPARSE_RANGE */
    }
}

PG_HD static inline int pg_key_field(uint32_t key) { return (int)(key & 0xffffu) - 1; }

/* A field descriptor packed in one word for the kernels' registers. */
PG_HD static inline uint32_t pg_desc(rap_parse_field f)
{
    return (uint32_t)f.kind | ((uint32_t)f.enc << 8) | ((uint32_t)(uint16_t)f.col << 16);
}
#define PG_DESC_KIND(d) ((int)((d) & 0xffu))
#define PG_DESC_ENC(d) ((int)(((d) >> 8) & 0xffu))
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

/* The 16 bytes w[0..3] (little-endian words) at positions pos0..pos0+15:
 * bit k of *tab for a tab at byte k, bit k of *bin for a binary byte (below
 * 0x20 but tab, 0x7f, 0x80 and above: parse.h), only for bytes k in
 * [lo, hi). */
PG_HD static inline void pg_masks16(const uint32_t w[4], int lo, int hi, uint32_t *tab,
                                    uint32_t *bin)
{
    uint32_t t = 0, b = 0;
    for (int q = 0; q < 4; q++) {
        uint32_t x = w[q];
        uint32_t tb = pg_zero_bytes(x ^ 0x09090909u);
        uint32_t bb = (x & 0x80808080u) | pg_zero_bytes(x ^ 0x7f7f7f7fu) |
                      pg_zero_bytes(x & 0xe0e0e0e0u);
        t |= pg_pack4(tb) << (4 * q);
        b |= pg_pack4(bb & ~tb) << (4 * q);
    }
    uint32_t range = ((hi >= 16 ? 0x10000u : (1u << hi)) - 1u) & ~((1u << lo) - 1u);
    *tab = t & range;
    *bin = b & range;
}

/* Hex digit value (either case), 16 for any other byte: exactly parse.c's
 * HEXV less one. */
PG_HD static inline unsigned pg_hex(unsigned c)
{
    unsigned d = c - '0', l = (c | 0x20u) - 'a';
    return d < 10 ? d : l < 6 ? l + 10 : 16;
}

/* Converts one field p[0, n) by its descriptor d: returns its fault class
 * (PG_OK for none). On PG_OK: the value in *fv (label, dense) or *iv
 * (sparse) and *valid (0: a null). The encodings are parse.c's, rule for
 * rule:
 *   LABEL01  exactly "0" or "1";
 *   INT32    empty (null), or an optional '-' then one or more digits
 *            (else PG_DENSE); after the leading zeros at most 10 digits and
 *            the value in [-2^31, 2^31) (else PG_DENSE_RANGE); the float
 *            is the int64 value rounded to nearest (as C's cast);
 *   HEX32    empty (null), or hex digits only (else PG_SPARSE), at most 8
 *            of them (else PG_SPARSE_RANGE; checked after the digits, so a
 *            long field with a bad digit is PG_SPARSE).
 * p is read in [0, n) only. */
PG_HD static inline int pg_field(uint32_t d, const uint8_t *p, int32_t n, float *fv, int64_t *iv,
                                 int *valid)
{
    *valid = 0;
    switch (PG_DESC_ENC(d)) {
    case RAP_ENC_LABEL01:
        if (n != 1 || (p[0] != '0' && p[0] != '1'))
            return PG_LABEL;
        *fv = (float)(p[0] - '0');
        *valid = 1;
        return PG_OK;
    case RAP_ENC_INT32: {
        if (n == 0) {
            *fv = 0.0f;
            return PG_OK;
        }
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
        *valid = 1;
        return PG_OK;
    }
    case RAP_ENC_HEX32: {
        uint32_t v = 0;
        for (int32_t i = 0; i < n; i++) {
            unsigned h = pg_hex(p[i]);
            if (h > 15)
                return PG_SPARSE;
            v = (v << 4) | h;
        }
        if (n > 8)
            return PG_SPARSE_RANGE;
        *iv = (int64_t)v;
        *valid = n > 0;
        return PG_OK;
    }
    default: /* RAP_ENC_NONE: a skipped field */
        return PG_OK;
    }
}

/* The line-level fault key once the boundaries are known: bin_field >= 0
 * when a binary byte was found (in that field, counted as nf past the
 * last one, so that the key's 16 field bits always hold it), len the
 * length without '\r', ntab the tabs. PG_KEY_OK when the fields are to be
 * converted. */
PG_HD static inline uint32_t pg_line_key(int64_t bin_field, int64_t len, int64_t max_line,
                                         int64_t ntab, int nf)
{
    if (bin_field >= 0)
        return pg_key(PG_BINARY, bin_field < nf ? (int)bin_field : nf);
    if (len > max_line)
        return pg_key(PG_LONG, -1);
    if (ntab != nf - 1)
        return pg_key(PG_FIELDS, ntab + 1 < nf ? (int)(ntab + 1) : nf);
    return PG_KEY_OK;
}

#endif /* RAP_PARSE_ALGO_H */
