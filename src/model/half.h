/*
 * half.h -- 16-bit storage types of the embedding tables (bf16, fp16):
 * conversions to and from fp32, round to nearest even, stochastic
 * rounding, and the counter-based random stream that drives it.
 *
 * One header for C (the CPU backend, the tests) and CUDA (the GPU
 * kernels): every function is static inline, __host__ __device__ under
 * nvcc, and integer-only apart from the fp32 <-> bits casts (core/bits.h),
 * so the CPU reference and the GPU kernel produce the same bits from the
 * same input.
 *
 * Rules (docs/MODEL.md, "16-bit tables"):
 *
 *   bf16 = the upper 16 bits of an fp32 (8-bit exponent, 7-bit mantissa).
 *   fp16 = IEEE binary16 (5-bit exponent, bias 15, 10-bit mantissa,
 *          largest finite 65504, smallest normal 2^-14, subnormals in
 *          steps of 2^-24).
 *   to fp32: exact (every bf16 and fp16 value is an fp32 value).
 *   *_rn:  round to nearest, ties to even; overflow to inf; NaN stays NaN
 *          (quiet, sign and top payload bits kept).
 *   *_sr:  stochastic rounding with random bits r (32 bits wide; the
 *          stream below fills the upper 16, which is all bf16 and fp16's
 *          normal range use): a finite x between
 *          the neighbours lo < x < hi of the 16-bit type (lo = x truncated
 *          toward zero) becomes hi with probability (x - lo) / (hi - lo)
 *          and lo otherwise, so E[result] = x (unbiased):
 *          bf16: the top 16 bits of r are added to the 16 bits of x below
 *                the bf16 boundary and the sum truncated (the carry is the
 *                round-up; exact: the dropped fraction has 16 bits);
 *          fp16, |x| in [2^-14, 65536): the same with the top 13 bits of r
 *                and the 13 dropped mantissa bits, then the exponent
 *                re-biased (exact);
 *          fp16, |x| < 2^-14 (subnormal steps of 2^-24): x = (q + f) 2^-24
 *                with integer q and fraction f; rounds up iff r < floor(f
 *                2^32): with the stream's r (a multiple of 2^16) exact for
 *                |x| >= 2^-17, below that the probability is rounded up
 *                to a multiple of 2^-16 (bias under 2^-16 of a step,
 *                2^-40 absolute);
 *          overflow: magnitudes at or above 65536 (fp16) are inf; a value
 *                between the largest finite and the next step up rounds to
 *                inf with the probability of that step; inf stays inf; NaN
 *                as for _rn.
 *
 * Random stream: 16 bits an element, four elements a draw:
 *   draw(g) = fmix64(row_key + (g + 1) * 0x9e3779b97f4a7c15) -- the g-th
 *           output of a splitmix64 generator started at the row's key --
 *   rap_sr_bits(row_key, e) = bits 16(e%4) .. 16(e%4)+15 of draw(e/4),
 *           as the upper 16 bits of r,
 * (one 64-bit mix for four elements: the GPU's update draws once for the
 * four elements a lane writes), where
 *   row_key = rap_sr_row_key(step_key, table, row)
 *           = fmix64(step_key ^ (table << 40 | row)),
 *   step_key = rap_sr_step_key(seed, step)
 *           = fmix64(fmix64(seed ^ 0x5352726f756e6421) + step * 0x9e3779b97f4a7c15),
 * fmix64 being splitmix64's output function (Stafford's mix 13). table is
 * the GLOBAL table, row the GLOBAL row (a shard's local row + its first
 * row), e the element of the row (0 .. D-1), step the model's count of
 * embedding updates (model.h, rap_model_get_emb_step).
 */
#ifndef RAP_MODEL_HALF_H
#define RAP_MODEL_HALF_H

#include "core/bits.h"

#include <stdint.h>

#ifdef __CUDACC__
#define RAP_HALF_HD __host__ __device__
#else
#define RAP_HALF_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ bf16 */

static inline RAP_HALF_HD float rap_bf16_to_f32(uint16_t h)
{
    return rap_bits_f32((uint32_t)h << 16);
}

static inline RAP_HALF_HD uint16_t rap_f32_to_bf16_rn(float x)
{
    const uint32_t u = rap_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, keep sign and top payload */
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* r: 32 random bits; the top 16 are used. */
static inline RAP_HALF_HD uint16_t rap_f32_to_bf16_sr(float x, uint32_t r)
{
    const uint32_t u = rap_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    /* no wrap: the largest non-NaN pattern is 0xff800000 (-inf) */
    return (uint16_t)((u + (r >> 16)) >> 16);
}

/* ------------------------------------------------------------ fp16 */

static inline RAP_HALF_HD int rap_half_clz32(uint32_t x) /* x != 0 */
{
#ifdef __CUDA_ARCH__
    return __clz((int)x);
#else
    return __builtin_clz(x);
#endif
}

static inline RAP_HALF_HD float rap_fp16_to_f32(uint16_t h)
{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    if (e == 0x1fu) /* inf, NaN (payload kept) */
        return rap_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e != 0)
        return rap_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0)
        return rap_bits_f32(sign);
    /* subnormal m * 2^-24: shift the top bit of m to bit 10 */
    const int sh = rap_half_clz32(m) - 21; /* 1 .. 10 */
    return rap_bits_f32(sign | ((uint32_t)(113 - sh) << 23) | (((m << sh) & 0x3ffu) << 13));
}

static inline RAP_HALF_HD uint16_t rap_f32_to_fp16_rn(float x)
{
    const uint32_t u = rap_f32_bits(x);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (halfway above 65504, ties to the even inf) and inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* >= 2^-14: normal; exponent re-biased by 127 - 15 = 112 */
        const uint32_t m = a - 0x38000000u;
        return (uint16_t)(sign | ((m + 0x0fffu + ((m >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: half of the smallest step or less: to (signed) 0 */
        return (uint16_t)sign;
    /* (2^-25, 2^-14): |x| / 2^-24 = mant >> s with s = 126 - exponent in [14, 24] */
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t s = 126u - (a >> 23);
    uint32_t q = mant >> s;
    const uint32_t rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
    q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    return (uint16_t)(sign | q);
}

/* r: 32 random bits (all used below 2^-14, the top 13 above). */
static inline RAP_HALF_HD uint16_t rap_f32_to_fp16_sr(float x, uint32_t r)
{
    const uint32_t u = rap_f32_bits(x);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x47800000u) /* >= 65536 (no finite step above) and inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) /* [2^-14, 65536): a carry out of the top may reach 0x7c00 = inf */
        return (uint16_t)(sign | ((a - 0x38000000u + (r >> 19)) >> 13));
    if (a < 0x00800000u) /* below 2^-126: up with probability < 2^-102, floored to 0 */
        return (uint16_t)sign;
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t s = 126u - (a >> 23); /* 14 .. 125 */
    const uint32_t q = s < 24u ? mant >> s : 0u;
    const uint32_t rem = s < 24u ? mant & ((1u << s) - 1u) : mant; /* fraction rem / 2^s */
    uint32_t f;                                                   /* floor(fraction * 2^32) */
    if (s <= 32u)
        f = (uint32_t)((uint64_t)rem << (32u - s));
    else
        f = s - 32u < 24u ? rem >> (s - 32u) : 0u;
    return (uint16_t)(sign | (q + (r < f ? 1u : 0u)));
}

/* ------------------------------------------------------------ random stream */

static inline RAP_HALF_HD uint64_t rap_sr_fmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key of one update step of a model (seed, step). */
static inline RAP_HALF_HD uint64_t rap_sr_step_key(uint64_t seed, uint64_t step)
{
    return rap_sr_fmix64(rap_sr_fmix64(seed ^ 0x5352726f756e6421ULL) +
                         step * 0x9e3779b97f4a7c15ULL);
}

/* The key of global row `row` (< 2^40) of global table `table` (< 2^12,
 * RAP_MAX_TABLES) in that step. */
static inline RAP_HALF_HD uint64_t rap_sr_row_key(uint64_t step_key, uint32_t table, uint64_t row)
{
    return rap_sr_fmix64(step_key ^ (((uint64_t)table << 40) | row));
}

/* Draw g of the row's stream: the 64 random bits of elements 4g .. 4g+3. */
static inline RAP_HALF_HD uint64_t rap_sr_draw(uint64_t row_key, uint32_t g)
{
    return rap_sr_fmix64(row_key + ((uint64_t)g + 1u) * 0x9e3779b97f4a7c15ULL);
}

/* Element i (0..3) of a draw: its 16 bits as the upper half of r (the
 * rounding functions compare r's 32 bits; the lower 16 are 0). */
static inline RAP_HALF_HD uint32_t rap_sr_piece(uint64_t draw, int i)
{
    return (uint32_t)((draw >> (16 * i)) & 0xffffu) << 16;
}

/* The random bits of element e of the row (16 significant, the upper). */
static inline RAP_HALF_HD uint32_t rap_sr_bits(uint64_t row_key, uint32_t e)
{
    return rap_sr_piece(rap_sr_draw(row_key, e / 4u), (int)(e % 4u));
}

#ifdef __cplusplus
}
#endif
#endif /* RAP_MODEL_HALF_H */
