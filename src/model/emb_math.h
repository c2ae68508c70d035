/*
 * emb_math.h -- the arithmetic of one embedding-row update, shared by the
 * CPU reference (cpu/cpu_layers.c) and the GPU kernels (gpu/embedding.cu)
 * so that, given the same aggregated gradient, both write the same bits.
 *
 * Every product, sum, quotient and square root is rounded on its own (no
 * fused multiply-add): the C build has -ffp-contract=off, and device code
 * uses the _rn intrinsics, which nvcc never contracts.
 *
 * Per element of a touched row, w the stored value as fp32, g the summed
 * gradient of the row's ids in the batch (docs/MODEL.md):
 *   SGD              w - lr * g
 *   Adagrad          s = s + g * g;  w - lr * (g / (sqrt(s) + eps))
 *   row-wise Adagrad once per row: s = s + ss / D, with ss the sum of g*g
 *                    over the row in the order below; m = lr / (sqrt(s) +
 *                    eps); then per element w - m * g
 * and the result is stored in the table's type (fp32 as is; bf16 / fp16
 * stochastically rounded, half.h, with the element's bits of the row's
 * stream).
 *
 * Row-wise sum of squares, the order of the GPU's warp: V = rap_emb_vec(D)
 * (4 when D % 4 == 0, else 1) columns per lane, 32 lanes, so blocks of
 * 32 V columns. In block b, lane l sums (from 0, in column order) the
 * squares of its columns b 32V + l V + i, i < V (a lane past D has 0);
 * the 32 lane sums are combined by the butterfly x_l = x_l + x_{l xor o}
 * for o = 16, 8, 4, 2, 1 (every lane ends with the same bits: float
 * addition commutes); the block totals are added in block order from 0.
 */
#ifndef RAP_MODEL_EMB_MATH_H
#define RAP_MODEL_EMB_MATH_H

#include "model/half.h"

#include <math.h>

#ifdef __CUDACC__
#define RAP_EMB_HD __host__ __device__
#else
#define RAP_EMB_HD
#endif

#ifdef __CUDA_ARCH__
#define RAP_FMUL(a, b) __fmul_rn((a), (b))
#define RAP_FADD(a, b) __fadd_rn((a), (b))
#define RAP_FSUB(a, b) __fsub_rn((a), (b))
#define RAP_FDIV(a, b) __fdiv_rn((a), (b))
#define RAP_FSQRT(a) __fsqrt_rn(a)
#else
#define RAP_FMUL(a, b) ((a) * (b))
#define RAP_FADD(a, b) ((a) + (b))
#define RAP_FSUB(a, b) ((a) - (b))
#define RAP_FDIV(a, b) ((a) / (b))
#define RAP_FSQRT(a) sqrtf(a)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Columns per lane of the GPU's embedding kernels (and of the row-wise
 * sum-of-squares order above). */
static inline RAP_EMB_HD int rap_emb_vec(int D) { return D % 4 == 0 ? 4 : 1; }

static inline RAP_EMB_HD float rap_emb_sgd(float w, float g, float lr)
{
    return RAP_FSUB(w, RAP_FMUL(lr, g));
}

/* PyTorch's Adagrad on one element: *s updated. */
static inline RAP_EMB_HD float rap_emb_adagrad(float w, float g, float *s, float lr, float eps)
{
    const float sn = RAP_FADD(*s, RAP_FMUL(g, g));
    *s = sn;
    return RAP_FSUB(w, RAP_FMUL(lr, RAP_FDIV(g, RAP_FADD(RAP_FSQRT(sn), eps))));
}

/* Row-wise Adagrad: the row's state *s takes the mean square ss / D; the
 * multiplier of every element of the row is returned. */
static inline RAP_EMB_HD float rap_emb_rowwise_mult(float *s, float ss, int D, float lr, float eps)
{
    const float sn = RAP_FADD(*s, RAP_FDIV(ss, (float)D));
    *s = sn;
    return RAP_FDIV(lr, RAP_FADD(RAP_FSQRT(sn), eps));
}

static inline RAP_EMB_HD float rap_emb_rowwise(float w, float g, float mult)
{
    return RAP_FSUB(w, RAP_FMUL(mult, g));
}

/* The butterfly of one block: x (32) the lane sums; returns lane 0's
 * result (= every lane's). x is overwritten. */
static inline float rap_emb_butterfly(float *x)
{
    for (int o = 16; o >= 1; o /= 2)
        for (int l = 0; l < o; l++) /* lane l and lane l + o get the same sum */
            x[l] = RAP_FADD(x[l], x[l + o]);
    return x[0];
}

#ifdef __cplusplus
}
#endif
#endif /* RAP_MODEL_EMB_MATH_H */
