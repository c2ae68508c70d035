/*
 * divu64.h -- exact unsigned 64-bit division by an invariant divisor, by a
 * multiply (Granlund and Montgomery, "Division by invariant integers using
 * multiplication", PLDI 1994; the round-up variant with an add step, as the
 * libdivide library's u64 division does it).
 *
 * Why: sigrid_hash reduces every id modulo its table's size. A 64-bit `%`
 * is a called routine of several dozen instructions on the GPU (the row
 * kernel's sigrid_hash called it for every id); the divisor is the same for a whole
 * column, so the executor makes its reciprocal once (rap_divu64_make, on
 * the host) and every id costs a high multiply, a shift or two and a low
 * multiply. The quotient is exact for every n and d, so the results are
 * the integers `%` gives, on the CPU and the GPU alike
 * (tests/test_ops.c, ops_divu64_exact, checks it against `/`).
 *
 * The reciprocal of d >= 1: a multiplier and an info word, bit 31 set
 * (RAP_DIVU64_SET; 0 means none: callers use `%`), bit 30 for a power of
 * two (a shift), bit 29 for the add step, bits 0-5 the shift.
 */
#ifndef RAP_OPS_DIVU64_H
#define RAP_OPS_DIVU64_H

#include <stdint.h>

#ifdef __CUDACC__
#define RAP_DIVU64_HD __host__ __device__
#else
#define RAP_DIVU64_HD
#endif

#define RAP_DIVU64_SET 0x80000000u
#define RAP_DIVU64_POW2 0x40000000u
#define RAP_DIVU64_ADD 0x20000000u
#define RAP_DIVU64_SHIFT 0x3fu

/* The high 64 bits of a * b. */
RAP_DIVU64_HD static inline uint64_t rap_mulhi64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#elif defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* floor(2^(64 + k) / d) and its remainder, for d > 2^k (the quotient fits
 * 64 bits): long division of the 128-bit 2^(64 + k) a bit at a time. */
static inline uint64_t rap_divu64_pow_div(int k, uint64_t d, uint64_t *rem)
{
    uint64_t q = 0, r = 0;
    for (int i = 127; i >= 0; i--) { /* bit i of 2^(64 + k) */
        const int bit = i == 64 + k;
        const int carry = (int)(r >> 63); /* r << 1 would lose this bit */
        r = (r << 1) | (uint64_t)bit;
        q <<= 1;
        if (carry || r >= d) {
            r -= d;
            q |= 1;
        }
    }
    *rem = r;
    return q;
}

/* The reciprocal of d (d >= 1). Host code (the executor), once a column. */
static inline void rap_divu64_make(uint64_t d, uint64_t *mul, uint32_t *info)
{
    int k = 63;
    while (!((d >> k) & 1))
        k--; /* k = floor(log2 d) */
    if ((d & (d - 1)) == 0) {
        *mul = 0;
        *info = RAP_DIVU64_SET | RAP_DIVU64_POW2 | (uint32_t)k;
        return;
    }
    uint64_t rem;
    uint64_t m = rap_divu64_pow_div(k, d, &rem);
    uint32_t more = (uint32_t)k;
    const uint64_t e = d - rem;
    if (e >= ((uint64_t)1 << k)) { /* the next power up, with the add step */
        m += m;
        const uint64_t twice = rem + rem;
        if (twice >= d || twice < rem)
            m += 1;
        more |= RAP_DIVU64_ADD;
    }
    *mul = m + 1;
    *info = RAP_DIVU64_SET | more;
}

/* floor(n / d) from d's reciprocal (info has RAP_DIVU64_SET). */
RAP_DIVU64_HD static inline uint64_t rap_divu64(uint64_t n, uint64_t mul, uint32_t info)
{
    const unsigned s = info & RAP_DIVU64_SHIFT;
    if (info & RAP_DIVU64_POW2)
        return n >> s;
    const uint64_t q = rap_mulhi64(mul, n);
    if (info & RAP_DIVU64_ADD)
        return (((n - q) >> 1) + q) >> s;
    return q >> s;
}

/* n mod d from d's reciprocal (info has RAP_DIVU64_SET). */
RAP_DIVU64_HD static inline uint64_t rap_modu64(uint64_t n, uint64_t d, uint64_t mul,
                                                uint32_t info)
{
    return n - rap_divu64(n, mul, info) * d;
}

#endif /* RAP_OPS_DIVU64_H */
