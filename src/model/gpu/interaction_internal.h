/*
 * interaction_internal.h -- what interaction.cu (v1, the dispatch, the test
 * hook), interaction_v2.cu (the v2 and v3 kernels and their launchers),
 * interaction_v4.cu and interaction_v4_tf32.cu (v4, tensor cores) share:
 * the act-type conversions, the cp.async helpers, the v2, v3 and v4
 * launchers. CUDA only: included by those four .cu files, compiled by
 * nvcc.
 */
#ifndef RAP_MODEL_GPU_INTERACTION_INTERNAL_H
#define RAP_MODEL_GPU_INTERACTION_INTERNAL_H

#include "model/gpu/gpu_model.h"

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

template <typename T> static __device__ __forceinline__ T to_act(float x);
template <> __device__ __forceinline__ float to_act<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 to_act<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
/* Row i of pair p in the lower-triangle order (p = i(i-1)/2 + j, j < i). */
static __host__ __device__ constexpr int ia_pair_row(int p)
{
    int i = 1;
    while (i * (i + 1) / 2 <= p)
        i++;
    return i;
}

/* Two floats as two bf16 (nearest even) in one word, a in the low half. */
static __device__ __forceinline__ uint32_t pack_bf16x2(float a, float b)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16);
}
static __device__ __forceinline__ float act_f(float x) { return x; }
static __device__ __forceinline__ float act_f(__nv_bfloat16 x) { return __bfloat162float(x); }

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}
/* 8 bytes (cp.async.ca: .cg takes 16 only), 8-byte aligned both sides. */
static __device__ __forceinline__ void cp_async8(void *smem, const void *gmem)
{
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gmem) : "memory");
}
static __device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void cp_wait1()
{
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}
static __device__ __forceinline__ void cp_wait0()
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* v4's forward (either type): the pairs i > j < F of the lower triangle
 * of S = Z Z^T from the 6 tiles' accumulators (tiles 0-1: rows 0-15 x
 * vectors 0-7, 8-15; tiles 2-5: rows 16-31 x vectors 0-7 .. 24-31; the
 * mma's C layout, g = lane / 4, q = lane % 4) into the output row staged
 * at stage (the pairs from element D on), in the act type T. */
template <typename T>
static __device__ __forceinline__ void ia4_stage_pairs(T *stage, const float (&acc)[6][4], int F,
                                                       int D, int g, int q)
{
#pragma unroll
    for (int t = 0; t < 6; t++) {
        const int mi = t < 2 ? 0 : 1, ni = t < 2 ? t : t - 2;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int i = mi * 16 + g + (c >= 2 ? 8 : 0), j = ni * 8 + 2 * q + (c & 1);
            if (j < i && i < F)
                stage[D + i * (i - 1) / 2 + j] = to_act<T>(acc[t][c]);
        }
    }
}

/* interaction_v2.cu: the v2 instance for (ia_fmax, ia_lanes): op 0
 * occupancy, 1 forward, 2 backward. */
rap_status ia2_call(rap_gpu *g, int op, int64_t rows);
/* interaction_v2.cu: the v3 instance for (ia_fmax, ia_lanes): op 0
 * prepare (*fits), 1 forward, 2 backward. */
rap_status ia3_call(rap_gpu *g, int op, int64_t rows, bool *fits);
/* interaction_v4.cu: whether v4 (tensor cores) applies to g's shape and
 * types; op 0 prepare (*fits), 1 forward, 2 backward (RAP_ERR_ARG where it
 * does not apply). */
bool ia4_applies(const rap_gpu *g);
rap_status ia4_call(rap_gpu *g, int op, int64_t rows, bool *fits);
/* interaction_v4_tf32.cu: v4 for an fp32 model with TF32 math (ia4_call
 * sends an fp32 model there): where it applies; the same ops. */
bool ia4t_applies(const rap_gpu *g);
rap_status ia4t_call(rap_gpu *g, int op, int64_t rows, bool *fits);

#endif
#endif
