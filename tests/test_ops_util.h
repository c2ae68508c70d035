/* test_ops_util.h -- small helpers of the op tests (test_ops.c: the CPU
 * reference; test_ops_gpu.c: the GPU launches against it). */
#ifndef RAP_TEST_OPS_UTIL_H
#define RAP_TEST_OPS_UTIL_H

#include "prep/ops/op.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline bool ids_eq(const int64_t *a, const int64_t *b, int64_t n)
{
    return memcmp(a, b, sizeof *a * (size_t)n) == 0;
}

/* A dense -> dense desc over x (valid: its null mask or NULL) into y. */
static inline rap_desc dense_desc(const float *x, const uint8_t *valid, float *y)
{
    rap_desc d;
    memset(&d, 0, sizeof d);
    d.x = x;
    d.xvalid = valid;
    d.y = y;
    d.width = 1;
    d.in_kind = RAP_DENSE;
    d.out_kind = RAP_DENSE;
    d.off_mode = RAP_OFF_NONE;
    return d;
}

#endif /* RAP_TEST_OPS_UTIL_H */
