/*
 * mathf.h -- portable float math and small helpers shared by the op files
 * (src/prep/ops/<op>.cu).
 *
 * Why: docs/OPS.md asks the CPU and GPU backends for the same results, bit
 * for bit, on float outputs too. libm's logf/powf and CUDA's differ by an
 * ulp here and there, so every transcendental function an op needs is
 * written here once, as RAP_HD code that uses only IEEE basic operations
 * (+ - * /, comparisons, conversions, bit moves): no libm, no FMA
 * (op files are compiled with gcc -ffp-contract=off and nvcc --fmad=false).
 * The same sequence of double operations then gives the same bits on both
 * sides. Work is done in double and rounded once to float, so the error is
 * at most 1 ulp of float (tests/test_ops.c checks this against libm).
 *
 * NaN: CUDA arithmetic returns the canonical NaN 0x7fffffff for any NaN
 * operand while x86 keeps the operand's payload, so float results of
 * arithmetic go through rap_canon_nanf() before they are stored: every NaN
 * an op writes is 0x7fc00000 on both sides.
 *
 * Also here (under __CUDACC__): launch geometry of the fused kernels and the
 * C-linkage export macro, shared by all op files.
 */
#ifndef RAP_OPS_MATHF_H
#define RAP_OPS_MATHF_H

#include "core/bits.h"
#include "prep/ops/op.h"

#include <stdint.h>

#ifdef __cplusplus
#define RAP_OP_EXPORT extern "C"
#else
#define RAP_OP_EXPORT
#endif

/* ------------------------------------------------------------ bit moves */

/* rap_f32_bits, rap_bits_f32, rap_f64_bits, rap_bits_f64: core/bits.h. */

/* The one NaN ops write (quiet, positive). */
RAP_HD static inline float rap_nanf(void) { return rap_bits_f32(0x7fc00000u); }
RAP_HD static inline float rap_inff(void) { return rap_bits_f32(0x7f800000u); }

/* v, or the canonical NaN when v is a NaN (see the NaN note above). */
RAP_HD static inline float rap_canon_nanf(float v) { return v != v ? rap_nanf() : v; }

/* ------------------------------------------------------------ rows */

/* True when row r of the desc's input is null (valid == NULL: no nulls). */
RAP_HD static inline int rap_row_null(const rap_desc *d, int64_t r)
{
    return d->xvalid != NULL && d->xvalid[r] == 0;
}

/* ------------------------------------------------------------ double core */

#define RAP_LN2_HI 6.93147180369123816490e-01 /* 0x3fe62e42fee00000: k*HI exact for |k| < 2^11 */
#define RAP_LN2_LO 1.90821492927058770002e-10 /* ln 2 - HI */
#define RAP_INV_LN2 1.4426950408889634
#define RAP_SQRT2 1.4142135623730951

/* Natural log of a positive, finite, normal double (every float > 0 is one).
 * x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s),
 * s = (m-1)/(m+1), |s| <= 0.1716, series to s^21 (truncation < 1e-17
 * relative). */
RAP_HD static inline double rap_log_pos_d(double x)
{
    uint64_t u = rap_f64_bits(x);
    int e = (int)((u >> 52) & 0x7ff) - 1023;
    double m = rap_bits_f64((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
    if (m > RAP_SQRT2) {
        m = m * 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0); /* m - 1 is exact (Sterbenz) */
    double s2 = s * s;
    double p = 0.047619047619047616;    /* 1/21 */
    p = p * s2 + 0.05263157894736842;   /* 1/19 */
    p = p * s2 + 0.058823529411764705;  /* 1/17 */
    p = p * s2 + 0.06666666666666667;   /* 1/15 */
    p = p * s2 + 0.07692307692307693;   /* 1/13 */
    p = p * s2 + 0.09090909090909091;   /* 1/11 */
    p = p * s2 + 0.1111111111111111;    /* 1/9 */
    p = p * s2 + 0.14285714285714285;   /* 1/7 */
    p = p * s2 + 0.2;                   /* 1/5 */
    p = p * s2 + 0.3333333333333333;    /* 1/3 */
    double lm = 2.0 * s + 2.0 * s * (s2 * p);
    double de = (double)e;
    return de * RAP_LN2_HI + (de * RAP_LN2_LO + lm);
}

/* e^z for z in [-110, 90] (wider than float's range, so the float rounding
 * of the result decides overflow to inf and underflow to subnormals / 0).
 * z = k ln2 + r, |r| <= ln2/2 (+ tiny), Taylor to r^14 (< 1e-17), times 2^k
 * built from bits (k in [-159, 130]: a normal double). */
RAP_HD static inline double rap_exp_d(double z)
{
    double kd = z * RAP_INV_LN2;
    int k = (int)(kd >= 0 ? kd + 0.5 : kd - 0.5); /* round half away from 0 */
    double r = (z - (double)k * RAP_LN2_HI) - (double)k * RAP_LN2_LO;
    double p = 1.1470745597729725e-11;    /* 1/14! */
    p = p * r + 1.6059043836821613e-10;   /* 1/13! */
    p = p * r + 2.08767569878681e-09;     /* 1/12! */
    p = p * r + 2.505210838544172e-08;    /* 1/11! */
    p = p * r + 2.755731922398589e-07;    /* 1/10! */
    p = p * r + 2.7557319223985893e-06;   /* 1/9! */
    p = p * r + 2.48015873015873e-05;     /* 1/8! */
    p = p * r + 0.0001984126984126984;    /* 1/7! */
    p = p * r + 0.001388888888888889;     /* 1/6! */
    p = p * r + 0.008333333333333333;     /* 1/5! */
    p = p * r + 0.041666666666666664;     /* 1/4! */
    p = p * r + 0.16666666666666666;      /* 1/3! */
    p = p * r + 0.5;                      /* 1/2! */
    p = p * r + 1.0;
    p = p * r + 1.0;
    return p * rap_bits_f64((uint64_t)(k + 1023) << 52);
}

/* ------------------------------------------------------------ float API */

/* Natural log, within 1 ulp. log(+-0) = -inf, log(x < 0) = NaN,
 * log(+inf) = +inf, log(NaN) = NaN (canonical), log(1) = +0. Subnormal
 * inputs are exact doubles, so they need no special path. */
RAP_HD static inline float rap_logf(float x)
{
    if (x != x)
        return rap_nanf();
    if (x == 0.0f)
        return -rap_inff();
    if (x < 0.0f)
        return rap_nanf();
    if (x == rap_inff())
        return x;
    return (float)rap_log_pos_d((double)x);
}

/* x^y, within 1 ulp, with C99's special cases: pow(x, +-0) = 1 and
 * pow(1, y) = 1 even for NaN; other NaN -> NaN; a negative x needs an
 * integer y (else NaN) and gives the sign of x^y by y's parity; zeros and
 * infinities as C99 Annex F. */
RAP_HD static inline float rap_powf(float x, float y)
{
    if (y == 0.0f || x == 1.0f)
        return 1.0f;
    if (x != x || y != y)
        return rap_nanf();
    uint32_t ux = rap_f32_bits(x);
    int neg = (int)(ux >> 31);
    float ax = rap_bits_f32(ux & 0x7fffffffu);
    float ay = rap_bits_f32(rap_f32_bits(y) & 0x7fffffffu);
    float inf = rap_inff();
    /* y's kind: 0 not an integer, 1 even integer, 2 odd integer */
    int yint = 0;
    if (ay >= 16777216.0f) {
        yint = 1; /* every float >= 2^24 is an even integer (inf handled below) */
    } else {
        int32_t t = (int32_t)y;
        if ((float)t == y)
            yint = (t & 1) ? 2 : 1;
    }
    if (ay == inf) {
        if (ax == 1.0f)
            return 1.0f;
        return ((ax < 1.0f) == (y > 0.0f)) ? 0.0f : inf;
    }
    float sign = (neg && yint == 2) ? -1.0f : 1.0f;
    if (ax == 0.0f)
        return y > 0.0f ? sign * 0.0f : sign * inf;
    if (neg && yint == 0)
        return rap_nanf();
    if (ax == inf)
        return y > 0.0f ? sign * inf : sign * 0.0f;
    double z = (double)y * rap_log_pos_d((double)ax);
    float r;
    if (z > 90.0)
        r = inf;
    else if (z < -110.0)
        r = 0.0f;
    else
        r = (float)rap_exp_d(z);
    return sign * r;
}

/* ------------------------------------------------------------ launches */

#ifdef __CUDACC__
#include "core/cuda_util.h"

/* Fused kernels: grid (bx, min(nd, 65535)) of RAP_OP_THREADS threads;
 * blockIdx.y picks the desc (one desc per block row, so no divergence
 * between descs), x covers rows or ids with a grid-stride loop. */
#define RAP_OP_THREADS 256
#define RAP_OP_GRID_Y 65535
#define RAP_OP_MAX_BX 65535

#define RAP_OP_TID() ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define RAP_OP_STRIDE() ((int64_t)gridDim.x * blockDim.x)

/* Blocks along x to cover n items with one per thread, in [1, cap]. */
static inline unsigned rap_op_blocks(int64_t n, int64_t cap)
{
    int64_t b = (n + RAP_OP_THREADS - 1) / RAP_OP_THREADS;
    if (b > cap)
        b = cap;
    if (b < 1)
        b = 1;
    return (unsigned)b;
}

/* Blocks along x for a sparse (ids) kernel over nd descs: the row count
 * guides it, capped so the whole grid is about 4 blocks per SM (a grid-
 * stride loop inside covers any number of ids). */
static inline rap_status rap_op_sparse_blocks(int64_t rows, int nd, unsigned *bx)
{
    int dev = 0, sms = 0;
    RAP_CUDA_TRY(cudaGetDevice(&dev));
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int ny = nd < RAP_OP_GRID_Y ? nd : RAP_OP_GRID_Y;
    int64_t cap = (4 * (int64_t)(sms > 0 ? sms : 1)) / (ny > 0 ? ny : 1);
    *bx = rap_op_blocks(rows, cap < 1 ? 1 : cap);
    return RAP_OK;
}

/* Blocks along x for a kernel whose per-desc work is rows x (a width known
 * only on the device): at least the rows' blocks, at least ~4 blocks per SM
 * overall, at most RAP_OP_MAX_BX. */
static inline rap_status rap_op_wide_blocks(int64_t rows, int nd, unsigned *bx)
{
    int dev = 0, sms = 0;
    RAP_CUDA_TRY(cudaGetDevice(&dev));
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int ny = nd < RAP_OP_GRID_Y ? nd : RAP_OP_GRID_Y;
    int64_t fill = (4 * (int64_t)(sms > 0 ? sms : 1)) / (ny > 0 ? ny : 1);
    int64_t need = (rows + RAP_OP_THREADS - 1) / RAP_OP_THREADS;
    *bx = rap_op_blocks((need > fill ? need : fill) * RAP_OP_THREADS, RAP_OP_MAX_BX);
    return RAP_OK;
}

/* Thread blocks launched by every fused op kernel so far (all executors of
 * the process; relaxed atomic adds). Read by `rap profile capacity` for its
 * thread-block comparison (docs/PROFILE.md); nothing else depends on it. */
extern "C" long long rap_op_blocks_launched;

/* Launches kernel(descs + base, r0, r1) on grids (bx, <= 65535) until all nd
 * descs are covered; returns from the caller on a launch error. */
#define RAP_OP_LAUNCH(kernel, bx, descs, nd, r0, r1, stream)                         \
    do {                                                                           \
        for (int b_ = 0; b_ < (nd); b_ += RAP_OP_GRID_Y) {                         \
            int ny_ = (nd) - b_ < RAP_OP_GRID_Y ? (nd) - b_ : RAP_OP_GRID_Y;       \
            kernel<<<dim3((bx), (unsigned)ny_), RAP_OP_THREADS, 0, (stream)>>>(    \
                (descs) + b_, (r0), (r1));                                         \
            RAP_CUDA_LAUNCHED();                                                   \
            __atomic_fetch_add(&rap_op_blocks_launched, (long long)(bx) * ny_,      \
                               __ATOMIC_RELAXED);                                  \
        }                                                                          \
    } while (0)
#endif /* __CUDACC__ */

#endif /* RAP_OPS_MATHF_H */
