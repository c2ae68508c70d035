/*
 * bits.h -- the bit patterns of floats and doubles, and back: the one set
 * of casts every layer uses (the 16-bit table types of model/half.h, the
 * portable math of prep/ops/mathf.h, hashes and sort keys).
 *
 * Header only, static inline, and __host__ __device__ under nvcc, so the
 * CPU reference and a GPU kernel move the same bits: memcpy on the host
 * (no aliasing rule broken, compiled to a register move), CUDA's
 * intrinsics on the device. None of them can fail; NaN payloads, signed
 * zeros and subnormals pass through unchanged.
 *
 *   uint32_t u = rap_f32_bits(-0.0f);       // 0x80000000
 *   float one = rap_bits_f32(0x3f800000u);  // 1.0f
 */
#ifndef RAP_CORE_BITS_H
#define RAP_CORE_BITS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RAP_BITS_HD __host__ __device__
#else
#define RAP_BITS_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The 32 bits of x. */
static inline RAP_BITS_HD uint32_t rap_f32_bits(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

/* The float whose bits are u. */
static inline RAP_BITS_HD float rap_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* The 64 bits of d. */
static inline RAP_BITS_HD uint64_t rap_f64_bits(double d)
{
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
#endif
}

/* The double whose bits are u. */
static inline RAP_BITS_HD double rap_bits_f64(uint64_t u)
{
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_BITS_H */
