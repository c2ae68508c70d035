/*
 * checked.h -- arithmetic that says when it overflows, for every size,
 * count, offset or index computed from a file rap reads (every file is
 * hostile: a header's numbers are the attacker's).
 *
 * Each helper stores the result in *out and returns true when it is exact,
 * or returns false and leaves *out unchanged when it is not (an overflow,
 * a value out of range, a float that is NaN or infinite). They never trap
 * and never invoke undefined behaviour, so they are the way to compute
 * with untrusted numbers:
 *
 *     uint64_t bytes;
 *     if (!rap_mul_u64_ok(rows, width, &bytes) || !rap_mul_u64_ok(bytes, 4, &bytes) ||
 *         bytes > left)
 *         return rap_fail(RAP_ERR_DATA, "%s: batch %lld: %llu rows of width %u do not fit "
 *                         "in the %llu bytes left", ...);
 *
 * Header only (static inline): the readers of every layer use them.
 */
#ifndef RAP_CORE_CHECKED_H
#define RAP_CORE_CHECKED_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a + b and a * b of unsigned 64-bit values. */
static inline bool rap_add_u64_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

static inline bool rap_mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

/* The same for size_t (what allocations take). */
static inline bool rap_add_size_ok(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return false;
    *out = a + b;
    return true;
}

static inline bool rap_mul_size_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *out = a * b;
    return true;
}

/* a + b, a - b and a * b of signed 64-bit values. */
static inline bool rap_add_i64_ok(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return false;
    *out = a + b;
    return true;
}

static inline bool rap_sub_i64_ok(int64_t a, int64_t b, int64_t *out)
{
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b))
        return false;
    *out = a - b;
    return true;
}

static inline bool rap_mul_i64_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a == 0 || b == 0) {
        *out = 0;
        return true;
    }
    if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
              : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b))
        return false;
    *out = a * b;
    return true;
}

/* A non-negative int64 as a size_t (false for a negative value, or one
 * that does not fit on this machine). */
static inline bool rap_i64_to_size_ok(int64_t v, size_t *out)
{
    if (v < 0 || (uint64_t)v > (uint64_t)SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

/* x as an int64 when it is finite, has no fraction and lies in [lo, hi];
 * else false (the conversion of a float outside int64's range is
 * undefined in C: this is the check to make before it). */
static inline bool rap_float_to_int64_ok(double x, int64_t lo, int64_t hi, int64_t *out)
{
    /* 2^63 is exact as a double; every double below it converts */
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0) || x != floor(x))
        return false;
    int64_t v = (int64_t)x;
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* x as an int in [lo, hi] (as rap_float_to_int64_ok). */
static inline bool rap_float_to_int_ok(double x, int lo, int hi, int *out)
{
    int64_t v;
    if (!rap_float_to_int64_ok(x, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* A decimal integer at s (an optional '-' or '+', then digits; no leading
 * space) in [lo, hi]. With end NULL the whole string must be the number;
 * else *end is set to the first byte after it. False (nothing stored) for
 * no digits, trailing bytes, or a value out of range (overflow included). */
static inline bool rap_parse_i64_ok(const char *s, int64_t lo, int64_t hi, int64_t *out,
                                    const char **end)
{
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (*p < '0' || *p > '9')
        return false;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (lim - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (!end && *p)
        return false;
    int64_t x = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (x < lo || x > hi)
        return false;
    if (end)
        *end = p;
    *out = x;
    return true;
}

/* The same for an int. */
static inline bool rap_parse_int_ok(const char *s, int lo, int hi, int *out, const char **end)
{
    int64_t v;
    if (!rap_parse_i64_ok(s, lo, hi, &v, end))
        return false;
    *out = (int)v;
    return true;
}

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_CHECKED_H */
