/* test_ops.c -- the preprocessing ops (src/prep/ops/): the portable math of
 * mathf.h against libm, every op's CPU reference on hand-checked vectors
 * (through rap_op_impls, so the registry is tested too; COMPUTED variants
 * through len + prefix sum + write), sigrid_hash's exact reciprocal. Hand-checked numbers come from docs/OPS.md's rules worked by hand
 * or, for sigrid_hash, from an independent Python transcription of
 * docs/OPS.md's pseudo-code (values quoted below). The GPU launches
 * against the CPU reference: test_ops_gpu.c. */
#include "test.h"

#include "core/core.h"
#include "prep/ops/divu64.h"
#include "prep/ops/mathf.h"
#include "prep/ops/op.h"
#include "test_ops_util.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

/* splitmix64: deterministic test data. */
static uint64_t rnd(void) { return rap_test_rnd(&g_rng); }

/* uniform in [0, 1) */
static double rnd01(void) { return rap_test_rnd01(&g_rng); }

/* Distance in ulps between two floats (0 for equal, huge across NaN/sign
 * mismatches; two NaNs count as equal). */
static int64_t ulp_dist(float a, float b)
{
    if (isnan(a) || isnan(b))
        return (isnan(a) && isnan(b)) ? 0 : INT64_MAX;
    if (a == b)
        return 0;
    int64_t ia = fbits(a), ib = fbits(b);
    if (ia & 0x80000000)
        ia = 0x80000000LL - ia;
    if (ib & 0x80000000)
        ib = 0x80000000LL - ib;
    return ia > ib ? ia - ib : ib - ia;
}

static bool same_bits(float a, float b) { return fbits(a) == fbits(b); }

/* Runs one desc over rows [0, n) the way the executor does: for a COMPUTED
 * output, the len phase, the exclusive prefix sum into yoff, then the write
 * phase; otherwise the write phase alone. Returns the output id count of a
 * COMPUTED desc (else 0). */
static int64_t run_cpu(rap_op_type op, const rap_desc *d, int64_t n)
{
    const rap_op_impl *im = &rap_op_impls[op];
    int64_t total = 0;
    if (d->off_mode == RAP_OFF_COMPUTED) {
        im->len_cpu(d, 0, n);
        d->yoff[0] = 0;
        for (int64_t r = 0; r < n; r++)
            d->yoff[r + 1] = d->yoff[r] + d->len[r];
        total = d->yoff[n];
    }
    im->cpu(d, 0, n);
    return total;
}

/* A sparse input column made from row lengths and ids (null rows have
 * length 0 and valid 0 when nulls is given). */
typedef struct {
    int64_t off[64];
    int64_t ids[256];
    uint8_t valid[64];
} scol;

static void make_scol(scol *c, int n, const int *lens, const int64_t *ids, const int *nulls)
{
    memset(c, 0, sizeof *c);
    int64_t k = 0;
    for (int r = 0; r < n; r++) {
        c->off[r] = k;
        c->valid[r] = nulls ? (uint8_t)!nulls[r] : 1;
        for (int j = 0; j < lens[r]; j++, k++)
            c->ids[k] = ids[k];
    }
    c->off[n] = k;
}

/* ------------------------------------------------------------ mathf.h */

RAP_TEST(ops_mathf_log_special)
{
    CHECK(rap_logf(0.0f) == -INFINITY);
    CHECK(rap_logf(-0.0f) == -INFINITY);
    CHECK(isnan(rap_logf(-1.0f)) && fbits(rap_logf(-1.0f)) == 0x7fc00000u);
    CHECK(isnan(rap_logf(-INFINITY)));
    CHECK(isnan(rap_logf(-FLT_MIN)));
    CHECK(rap_logf(INFINITY) == INFINITY);
    CHECK(fbits(rap_logf(NAN)) == 0x7fc00000u);
    CHECK(fbits(rap_logf(bitsf(0xffc12345u))) == 0x7fc00000u);
    CHECK(same_bits(rap_logf(1.0f), 0.0f));
    CHECK(rap_logf(2.0f) == 0.69314718f);
    CHECK(rap_logf(0.5f) == -0.69314718f);
    /* extremes: smallest subnormal, smallest normal, largest float */
    CHECK(ulp_dist(rap_logf(bitsf(1)), logf(bitsf(1))) <= 1);  /* -103.27893 */
    CHECK(ulp_dist(rap_logf(FLT_MIN), logf(FLT_MIN)) <= 1);    /* -87.33655 */
    CHECK(ulp_dist(rap_logf(FLT_MAX), logf(FLT_MAX)) <= 1);    /* 88.72284 */
    CHECK(fabsf(rap_logf(bitsf(1)) - (-103.27893f)) < 1e-4f);
    CHECK(fabsf(rap_logf(FLT_MAX) - 88.72284f) < 1e-4f);
    /* near 1, where the result is tiny and relative accuracy is hardest */
    CHECK(ulp_dist(rap_logf(1.0f + FLT_EPSILON), logf(1.0f + FLT_EPSILON)) <= 1);
    CHECK(ulp_dist(rap_logf(1.0f - FLT_EPSILON / 2), logf(1.0f - FLT_EPSILON / 2)) <= 1);
}

RAP_TEST(ops_mathf_log_accuracy)
{
    /* every positive float is equally likely by bit pattern (all exponents,
     * subnormals included), plus a dense sample around 1 */
    int64_t worst = 0, worst_d = 0, n = 0;
    float worst_x = 0;
    for (int i = 0; i < 3000000; i++) {
        float x;
        if (i % 3 == 0)
            x = (float)(0.5 + 1.5 * rnd01());
        else
            x = bitsf((uint32_t)(rnd() % 0x7f800000u) + 1u); /* (0, FLT_MAX] */
        float got = rap_logf(x);
        int64_t e = ulp_dist(got, logf(x));
        int64_t ed = ulp_dist(got, (float)log((double)x));
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
        if (ed > worst_d)
            worst_d = ed;
        n++;
    }
    CHECK_MSG(worst <= 1, "rap_logf vs logf: %lld ulps at x = %.9g", (long long)worst,
              (double)worst_x);
    CHECK_MSG(worst_d <= 1, "rap_logf vs log (double): %lld ulps", (long long)worst_d);
    CHECK(n == 3000000);
}

RAP_TEST(ops_mathf_pow_special)
{
    CHECK(rap_powf(2.0f, 0.0f) == 1.0f && rap_powf(NAN, 0.0f) == 1.0f);
    CHECK(rap_powf(NAN, -0.0f) == 1.0f && rap_powf(1.0f, NAN) == 1.0f);
    CHECK(fbits(rap_powf(NAN, 1.0f)) == 0x7fc00000u);
    CHECK(fbits(rap_powf(2.0f, NAN)) == 0x7fc00000u);
    CHECK(rap_powf(4.0f, 0.5f) == 2.0f);
    CHECK(rap_powf(2.0f, 10.0f) == 1024.0f);
    CHECK(rap_powf(2.0f, -1.0f) == 0.5f);
    CHECK(rap_powf(3.0f, 2.0f) == 9.0f);
    CHECK(rap_powf(10.0f, 38.0f) == powf(10.0f, 38.0f) ||
          ulp_dist(rap_powf(10.0f, 38.0f), powf(10.0f, 38.0f)) <= 1);
    CHECK(rap_powf(10.0f, 39.0f) == INFINITY);          /* overflow */
    CHECK(same_bits(rap_powf(10.0f, -50.0f), 0.0f));    /* underflow */
    CHECK(rap_powf(2.0f, -149.0f) == bitsf(1));         /* smallest subnormal */
    CHECK(rap_powf(2.0f, -140.0f) == bitsf(1u << 9));
    /* negative bases */
    CHECK(rap_powf(-2.0f, 3.0f) == -8.0f);
    CHECK(rap_powf(-2.0f, 2.0f) == 4.0f);
    CHECK(rap_powf(-2.0f, -1.0f) == -0.5f);
    CHECK(isnan(rap_powf(-2.0f, 0.5f)));
    CHECK(rap_powf(-1.0f, INFINITY) == 1.0f && rap_powf(-1.0f, -INFINITY) == 1.0f);
    CHECK(rap_powf(-2.0f, 3e10f) == powf(-2.0f, 3e10f)); /* huge even integer: inf */
    /* zeros */
    CHECK(same_bits(rap_powf(0.0f, 3.0f), 0.0f));
    CHECK(same_bits(rap_powf(-0.0f, 3.0f), -0.0f));
    CHECK(same_bits(rap_powf(-0.0f, 2.0f), 0.0f));
    CHECK(same_bits(rap_powf(-0.0f, 0.5f), 0.0f));
    CHECK(rap_powf(0.0f, -1.0f) == INFINITY);
    CHECK(rap_powf(-0.0f, -1.0f) == -INFINITY);
    CHECK(rap_powf(-0.0f, -2.0f) == INFINITY);
    /* infinities */
    CHECK(rap_powf(INFINITY, 0.5f) == INFINITY && same_bits(rap_powf(INFINITY, -0.5f), 0.0f));
    CHECK(rap_powf(-INFINITY, 3.0f) == -INFINITY && rap_powf(-INFINITY, 2.0f) == INFINITY);
    CHECK(same_bits(rap_powf(-INFINITY, -3.0f), -0.0f));
    CHECK(rap_powf(0.5f, INFINITY) == 0.0f && rap_powf(0.5f, -INFINITY) == INFINITY);
    CHECK(rap_powf(2.0f, INFINITY) == INFINITY && rap_powf(2.0f, -INFINITY) == 0.0f);
    /* subnormal base */
    CHECK(ulp_dist(rap_powf(bitsf(1), 0.5f), powf(bitsf(1), 0.5f)) <= 1);
    CHECK(ulp_dist(rap_powf(bitsf(12345), -0.25f), powf(bitsf(12345), -0.25f)) <= 1);
}

RAP_TEST(ops_mathf_pow_accuracy)
{
    int64_t worst = 0, worst_d = 0;
    float wx = 0, wy = 0;
    for (int i = 0; i < 2000000; i++) {
        float x, y;
        switch (i % 4) {
        case 0: /* boxcox-like: moderate x, small lambda */
            x = (float)(1e-3 + 1000.0 * rnd01());
            y = (float)(-3.0 + 6.0 * rnd01());
            break;
        case 1: /* any positive float, exponent keeps results mostly finite */
            x = bitsf((uint32_t)(rnd() % 0x7f800000u) + 1u);
            y = (float)(-2.0 + 4.0 * rnd01());
            break;
        case 2: /* wide exponents: overflow, underflow, subnormal results */
            x = (float)(0.5 + 2.0 * rnd01());
            y = (float)(-400.0 + 800.0 * rnd01());
            break;
        default: /* negative base, integer exponent */
            x = -(float)(0.1 + 10.0 * rnd01());
            y = (float)(int)(-30 + (int)(rnd() % 61));
            break;
        }
        float got = rap_powf(x, y);
        int64_t e = ulp_dist(got, powf(x, y));
        int64_t ed = ulp_dist(got, (float)pow((double)x, (double)y));
        if (e > worst) {
            worst = e;
            wx = x;
            wy = y;
        }
        if (ed > worst_d)
            worst_d = ed;
    }
    CHECK_MSG(worst <= 1, "rap_powf vs powf: %lld ulps at x = %.9g, y = %.9g", (long long)worst,
              (double)wx, (double)wy);
    CHECK_MSG(worst_d <= 1, "rap_powf vs pow (double): %lld ulps", (long long)worst_d);
}

/* ------------------------------------------------------------ registry */

RAP_TEST(ops_registry)
{
    CHECK(rap_op_impls[RAP_OP_INPUT].cpu == NULL);
    for (int op = RAP_OP_FILL_NULL; op < RAP_OP_COUNT; op++) {
        const rap_op_impl *im = &rap_op_impls[op];
        bool computed = op == RAP_OP_FILL_NULL || op == RAP_OP_CAST || op == RAP_OP_BUCKETIZE ||
                        op == RAP_OP_FIRSTX || op == RAP_OP_NGRAM;
        CHECK_MSG(im->cpu != NULL, "%s: no CPU reference", rap_op_name((rap_op_type)op));
        CHECK_MSG((im->len_cpu != NULL) == computed, "%s: len_cpu", rap_op_name((rap_op_type)op));
#ifdef RAP_HAVE_CUDA
        CHECK_MSG(im->gpu != NULL, "%s: no GPU launcher", rap_op_name((rap_op_type)op));
        CHECK_MSG((im->len_gpu != NULL) == computed, "%s: len_gpu", rap_op_name((rap_op_type)op));
#else
        CHECK(im->gpu == NULL && im->len_gpu == NULL);
#endif
    }
}

/* ------------------------------------------------------------ CPU reference */

/* A sparse -> sparse desc over column c. SAME: yoff is c's offsets. */
static rap_desc sparse_desc(const scol *c, bool nulls, int off_mode, int64_t *yids,
                            int64_t *yoff, int64_t *len)
{
    rap_desc d;
    memset(&d, 0, sizeof d);
    d.xoff = c->off;
    d.xids = c->ids;
    d.xvalid = nulls ? c->valid : NULL;
    d.yids = yids;
    d.yoff = off_mode == RAP_OFF_SAME ? (int64_t *)c->off : yoff;
    d.len = len;
    d.width = 1;
    d.in_kind = RAP_SPARSE;
    d.out_kind = RAP_SPARSE;
    d.off_mode = off_mode;
    return d;
}

RAP_TEST(ops_fill_null_cpu)
{
    /* dense: null -> v, others unchanged (NaN included) */
    float x[5] = {1.5f, 0.0f, -2.0f, 0.0f, NAN};
    uint8_t v[5] = {1, 0, 1, 0, 1};
    float y[5];
    rap_desc d = dense_desc(x, v, y);
    d.f0 = 7.25f;
    run_cpu(RAP_OP_FILL_NULL, &d, 5);
    CHECK(y[0] == 1.5f && y[1] == 7.25f && y[2] == -2.0f && y[3] == 7.25f && isnan(y[4]));
    d = dense_desc(x, NULL, y); /* no valid: nothing is null */
    d.f0 = 7.25f;
    run_cpu(RAP_OP_FILL_NULL, &d, 5);
    CHECK(y[1] == 0.0f && y[3] == 0.0f);

    /* sparse, len1 input with nulls -> ARANGE: yids[r] */
    scol c;
    int lens1[5] = {1, 0, 1, 0, 1};
    int nul1[5] = {0, 1, 0, 1, 0};
    int64_t ids1[3] = {5, -7, 9};
    make_scol(&c, 5, lens1, ids1, nul1);
    int64_t yids[32], yoff[32], len[32];
    d = sparse_desc(&c, true, RAP_OFF_ARANGE, yids, NULL, NULL);
    d.i0 = -1;
    run_cpu(RAP_OP_FILL_NULL, &d, 5);
    int64_t e1[5] = {5, -1, -7, -1, 9};
    CHECK(ids_eq(yids, e1, 5));

    /* sparse, multi-id input with nulls -> COMPUTED: null -> [v], empty
     * non-null list stays empty */
    int lens2[5] = {2, 0, 0, 3, 1};
    int nul2[5] = {0, 1, 0, 0, 1 * 0};
    int64_t ids2[6] = {1, 2, 3, 4, 5, 6};
    make_scol(&c, 5, lens2, ids2, nul2);
    d = sparse_desc(&c, true, RAP_OFF_COMPUTED, yids, yoff, len);
    d.i0 = 42;
    int64_t total = run_cpu(RAP_OP_FILL_NULL, &d, 5);
    int64_t el[5] = {2, 1, 0, 3, 1}, eo[6] = {0, 2, 3, 3, 6, 7}, e2[7] = {1, 2, 42, 3, 4, 5, 6};
    CHECK(total == 7 && ids_eq(len, el, 5) && ids_eq(yoff, eo, 6) && ids_eq(yids, e2, 7));

    /* sparse with no nulls -> SAME: ids copied at the input's positions */
    memset(yids, 0, sizeof yids);
    d = sparse_desc(&c, false, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = 42;
    run_cpu(RAP_OP_FILL_NULL, &d, 5);
    CHECK(ids_eq(yids, ids2, 6));
    /* a row piece writes only its rows */
    memset(yids, 0, sizeof yids);
    rap_op_impls[RAP_OP_FILL_NULL].cpu(&d, 3, 4);
    int64_t e3[6] = {0, 0, 3, 4, 5, 0};
    CHECK(ids_eq(yids, e3, 6));
}

RAP_TEST(ops_cast_cpu)
{
    float x[10] = {1.9f, -1.9f, NAN, 1e30f, -9223372036854775808.0f, 9223371487098961920.0f,
                   9223372036854775808.0f, INFINITY, -0.5f, 0.0f};
    uint8_t v[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
    int64_t yids[32], yoff[32], len[32];
    float y[16];

    /* dense -> sparse, no nulls: ARANGE, truncation toward zero */
    rap_desc d = dense_desc(x, NULL, NULL);
    d.yids = yids;
    d.out_kind = RAP_SPARSE;
    d.off_mode = RAP_OFF_ARANGE;
    d.i0 = RAP_SPARSE;
    run_cpu(RAP_OP_CAST, &d, 9);
    int64_t e1[9] = {1, -1, 0, 0, INT64_MIN, 9223371487098961920LL, 0, 0, 0};
    CHECK(ids_eq(yids, e1, 9));

    /* dense -> sparse with nulls: COMPUTED, a null row is an empty list */
    d.xvalid = v;
    d.off_mode = RAP_OFF_COMPUTED;
    d.yoff = yoff;
    d.len = len;
    memset(yids, 0, sizeof yids);
    int64_t total = run_cpu(RAP_OP_CAST, &d, 10);
    CHECK(total == 9 && len[9] == 0 && len[0] == 1 && yoff[10] == 9 && ids_eq(yids, e1, 9));

    /* dense -> dense: copy, null rows 0 */
    float x2[3] = {2.5f, 8.0f, -1.0f};
    uint8_t v2[3] = {1, 0, 1};
    d = dense_desc(x2, v2, y);
    d.i0 = RAP_DENSE;
    run_cpu(RAP_OP_CAST, &d, 3);
    CHECK(y[0] == 2.5f && same_bits(y[1], 0.0f) && y[2] == -1.0f);

    /* sparse -> dense: first id as float; empty list 0; null 0 */
    scol c;
    int lens[5] = {2, 0, 0, 1, 1};
    int nul[5] = {0, 0, 1, 0, 0};
    int64_t ids[4] = {5, 6, -3, 9007199254740993LL};
    make_scol(&c, 5, lens, ids, nul);
    d = sparse_desc(&c, true, RAP_OFF_NONE, NULL, NULL, NULL);
    d.y = y;
    d.out_kind = RAP_DENSE;
    d.i0 = RAP_DENSE;
    run_cpu(RAP_OP_CAST, &d, 5);
    CHECK(y[0] == 5.0f && same_bits(y[1], 0.0f) && same_bits(y[2], 0.0f) && y[3] == -3.0f &&
          y[4] == 9007199254740992.0f);

    /* sparse -> sparse: ids copied (SAME) */
    d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = RAP_SPARSE;
    run_cpu(RAP_OP_CAST, &d, 5);
    CHECK(ids_eq(yids, ids, 4));
}

/* Float result within 1 ulp of the same steps done with libm in double. */
static bool near1(float got, double want) { return ulp_dist(got, (float)want) <= 1; }

RAP_TEST(ops_logit_cpu)
{
    float x[8] = {0.0f, 1.0f, 0.5f, 0.75f, 0.25f, NAN, -3.0f, 0.9f};
    uint8_t v[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    float y[8];
    rap_desc d = dense_desc(x, v, y);
    d.f0 = 0.0f; /* eps 0: 0 -> -inf, 1 -> +inf */
    run_cpu(RAP_OP_LOGIT, &d, 8);
    CHECK(y[0] == -INFINITY && y[1] == INFINITY);
    CHECK(same_bits(y[2], 0.0f));
    CHECK(near1(y[3], log(3.0)) && near1(y[4], -log(3.0)));
    CHECK(fbits(y[5]) == 0x7fc00000u);
    CHECK(y[6] == -INFINITY); /* clamped to eps = 0 */
    CHECK(same_bits(y[7], 0.0f)); /* null */

    d.f0 = 1e-5f; /* TorchRec's eps: 0 -> log(eps / (1 - eps)) */
    run_cpu(RAP_OP_LOGIT, &d, 8);
    float eps = 1e-5f, hi = 1.0f - eps;
    CHECK(near1(y[0], log((double)(eps / (1.0f - eps)))));
    CHECK(near1(y[1], log((double)(hi / (1.0f - hi)))));
    CHECK(fabsf(y[0] + 11.512915f) < 1e-4f && fabsf(y[1] - 11.512915f) < 2e-3f);
    CHECK(y[6] == y[0]);
}

RAP_TEST(ops_boxcox_cpu)
{
    float x[7] = {4.0f, 3.0f, 1.0f, 0.0f, -2.0f, NAN, 2.718281828f};
    uint8_t v[7] = {1, 1, 1, 1, 1, 1, 1};
    float y[7];
    rap_desc d = dense_desc(x, v, y);
    d.f0 = 0.5f; /* (sqrt(4) - 1) / 0.5 = 2 */
    run_cpu(RAP_OP_BOXCOX, &d, 7);
    CHECK(y[0] == 2.0f && same_bits(y[2], 0.0f));
    CHECK(near1(y[1], (sqrt(3.0) - 1.0) / 0.5));
    CHECK(same_bits(y[3], 0.0f) && y[4] == -2.0f && fbits(y[5]) == 0x7fc00000u); /* x <= 0: x */
    d.f0 = 2.0f; /* (9 - 1) / 2 = 4 */
    run_cpu(RAP_OP_BOXCOX, &d, 7);
    CHECK(y[1] == 4.0f && y[0] == 7.5f && y[4] == -2.0f);
    d.f0 = 0.0f; /* lambda 0: log x */
    run_cpu(RAP_OP_BOXCOX, &d, 7);
    CHECK(near1(y[0], log(4.0)) && same_bits(y[2], 0.0f) && near1(y[6], 1.0));
    CHECK(same_bits(y[3], 0.0f) && y[4] == -2.0f);
    d.f0 = -1.0f; /* (1/4 - 1) / -1 = 0.75 */
    v[1] = 0;
    run_cpu(RAP_OP_BOXCOX, &d, 7);
    CHECK(y[0] == 0.75f && same_bits(y[1], 0.0f));
}

RAP_TEST(ops_log_cpu)
{
    float x[7] = {1.0f, 0.0f, -1.0f, 7.389056f, INFINITY, 3.0f, 1e-40f};
    uint8_t v[7] = {1, 1, 1, 1, 1, 0, 1};
    float y[7];
    rap_desc d = dense_desc(x, v, y);
    run_cpu(RAP_OP_LOG, &d, 7);
    CHECK(same_bits(y[0], 0.0f) && y[1] == -INFINITY && fbits(y[2]) == 0x7fc00000u);
    CHECK(near1(y[3], log((double)7.389056f)) && fabsf(y[3] - 2.0f) < 1e-6f);
    CHECK(y[4] == INFINITY && same_bits(y[5], 0.0f));
    CHECK(near1(y[6], log((double)1e-40f))); /* subnormal input */
}

RAP_TEST(ops_add_mul_cpu)
{
    float x[5] = {1.5f, -3.0f, NAN, 1e38f, 2.0f};
    uint8_t v[5] = {1, 1, 1, 1, 0};
    float y[5];
    rap_desc d = dense_desc(x, v, y);
    d.f0 = 3.0f; /* TorchRec's (x + 3).log() */
    run_cpu(RAP_OP_ADD, &d, 5);
    CHECK(y[0] == 4.5f && same_bits(y[1], 0.0f) && fbits(y[2]) == 0x7fc00000u);
    CHECK(y[3] == 1e38f && same_bits(y[4], 0.0f));
    d.f0 = 0.1f;
    run_cpu(RAP_OP_ADD, &d, 2);
    CHECK(y[0] == 1.5f + 0.1f && y[0] == 1.6f);
    d.f0 = 4.0f;
    run_cpu(RAP_OP_MUL, &d, 5);
    CHECK(y[0] == 6.0f && y[1] == -12.0f && fbits(y[2]) == 0x7fc00000u);
    CHECK(y[3] == INFINITY && same_bits(y[4], 0.0f));
    d.f0 = -0.0f;
    run_cpu(RAP_OP_MUL, &d, 1);
    CHECK(same_bits(y[0], -0.0f));
}

RAP_TEST(ops_onehot_cpu)
{
    /* low 0, high 10, C 5: step 2 */
    float x[11] = {0.0f, 3.0f, 9.99f, 10.0f, -0.5f, -3.0f, NAN, INFINITY, 1e30f, 5.0f, 4.0f};
    uint8_t v[11] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    float y[11 * 5];
    memset(y, 0xff, sizeof y);
    rap_desc d = dense_desc(x, v, y);
    d.f0 = 0.0f;
    d.f1 = 10.0f;
    d.i0 = 5;
    d.width = 5;
    d.out_kind = RAP_VECTOR;
    run_cpu(RAP_OP_ONEHOT, &d, 11);
    int want[11] = {0, 1, 4, 0, 0, 0, 0, 0, 0, -1, 2}; /* -1: null row, all zero */
    for (int r = 0; r < 11; r++)
        for (int j = 0; j < 5; j++)
            CHECK_MSG(same_bits(y[r * 5 + j], j == want[r] ? 1.0f : 0.0f),
                      "onehot row %d col %d: %g", r, j, (double)y[r * 5 + j]);
    /* float32 steps: low -1, high 1, C 3: step 0.6666667f; x = 1/3 -> q ~ 2 */
    float x2[3] = {-1.0f, 0.3333f, 0.99f};
    float y2[9];
    d = dense_desc(x2, NULL, y2);
    d.f0 = -1.0f;
    d.f1 = 1.0f;
    d.i0 = 3;
    d.width = 3;
    d.out_kind = RAP_VECTOR;
    run_cpu(RAP_OP_ONEHOT, &d, 3);
    CHECK(y2[0] == 1.0f && y2[3 + 1] == 1.0f && y2[6 + 2] == 1.0f);
    CHECK(y2[1] + y2[2] + y2[3] + y2[5] + y2[6] + y2[7] == 0.0f);
}

RAP_TEST(ops_bucketize_cpu)
{
    /* docs/OPS.md's example, dense input (float borders), no nulls: ARANGE */
    float fb[6] = {0, 2, 3, 5, 500, 1000};
    float x[10] = {1, 2, 3, 4, -1, 0, 1000, 2000, NAN, 999.5f};
    int64_t yids[32], yoff[32], len[32];
    rap_desc d = dense_desc(x, NULL, NULL);
    d.yids = yids;
    d.out_kind = RAP_SPARSE;
    d.off_mode = RAP_OFF_ARANGE;
    d.aux = fb;
    d.naux = 6;
    run_cpu(RAP_OP_BUCKETIZE, &d, 10);
    int64_t e1[10] = {1, 1, 2, 3, 0, 0, 5, 6, 6, 5};
    CHECK(ids_eq(yids, e1, 10));

    /* borders with a repeat [1, 1, 2] */
    float fr[3] = {1, 1, 2};
    float xr[6] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, -INFINITY};
    d.x = xr;
    d.aux = fr;
    d.naux = 3;
    run_cpu(RAP_OP_BUCKETIZE, &d, 6);
    int64_t e2[6] = {0, 1, 2, 2, 3, 0};
    CHECK(ids_eq(yids, e2, 6));

    /* one border */
    float f1[1] = {5};
    float x1[3] = {4, 5, 6};
    d.x = x1;
    d.aux = f1;
    d.naux = 1;
    run_cpu(RAP_OP_BUCKETIZE, &d, 3);
    int64_t e3[3] = {0, 0, 1};
    CHECK(ids_eq(yids, e3, 3));

    /* nullable dense input: COMPUTED, null rows empty */
    uint8_t v[4] = {1, 0, 1, 0};
    d.x = x;
    d.xvalid = v;
    d.aux = fb;
    d.naux = 6;
    d.off_mode = RAP_OFF_COMPUTED;
    d.yoff = yoff;
    d.len = len;
    int64_t total = run_cpu(RAP_OP_BUCKETIZE, &d, 4);
    int64_t eo[5] = {0, 1, 1, 2, 2}, e4[2] = {1, 2};
    CHECK(total == 2 && ids_eq(yoff, eo, 5) && ids_eq(yids, e4, 2));

    /* sparse input: (double)id against double borders, SAME */
    double db[6] = {0, 2, 3, 5, 500, 1000};
    scol c;
    int lens[4] = {3, 0, 0, 4};
    int nul[4] = {0, 1, 0, 0};
    int64_t ids[7] = {1, 2, 3, 4, -5, 1000, INT64_MAX};
    make_scol(&c, 4, lens, ids, nul);
    d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.aux = db;
    d.naux = 6;
    run_cpu(RAP_OP_BUCKETIZE, &d, 4);
    int64_t e5[7] = {1, 1, 2, 3, 0, 5, 6};
    CHECK(ids_eq(yids, e5, 7));
}

RAP_TEST(ops_sigrid_hash_cpu)
{
    /* expected values: Python transcription of docs/OPS.md's pseudo-code
     * (uint64 masks, Python's % as floor_mod), run independently of this
     * code */
    scol c;
    int lens[4] = {3, 0, 2, 1};
    int nul[4] = {0, 1, 0, 0};
    int64_t ids[6] = {0, 1, 98275684, -1, 123456789012345LL, INT64_MAX};
    make_scol(&c, 4, lens, ids, nul);
    int64_t yids[8];
    memset(yids, 0, sizeof yids);
    rap_desc d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = 0;
    d.i1 = 1460;
    run_cpu(RAP_OP_SIGRID_HASH, &d, 4);
    CHECK(yids[0] == 346 && yids[1] == 160 && yids[2] == 19 && yids[3] == 915);
    d.i1 = 1;
    run_cpu(RAP_OP_SIGRID_HASH, &d, 4);
    for (int j = 0; j < 6; j++)
        CHECK(yids[j] == 0);
    /* (-5, salt 7, max 100) -> 19; (123456789012345, salt -3, max 1000003)
     * -> 564053; (INT64_MAX, 0, 10) -> 7; (INT64_MIN, 1, INT64_MAX) ->
     * 7228101359301006796 */
    int lens2[1] = {1};
    int64_t one[1];
    struct {
        int64_t x, salt, max, want;
    } cases[4] = {{-5, 7, 100, 19},
                  {123456789012345LL, -3, 1000003, 564053},
                  {INT64_MAX, 0, 10, 7},
                  {INT64_MIN, 1, INT64_MAX, 7228101359301006796LL}};
    /* each by `%` (a desc without the reciprocal) and by max's reciprocal
     * (divu64.h, as the executor makes its descs) */
    for (int i = 0; i < 8; i++) {
        one[0] = cases[i / 2].x;
        make_scol(&c, 1, lens2, one, NULL);
        d = sparse_desc(&c, false, RAP_OFF_SAME, yids, NULL, NULL);
        d.i0 = cases[i / 2].salt;
        d.i1 = cases[i / 2].max;
        if (i % 2)
            rap_divu64_make((uint64_t)d.i1, &d.dmul, &d.dinfo);
        run_cpu(RAP_OP_SIGRID_HASH, &d, 1);
        CHECK_MSG(yids[0] == cases[i / 2].want,
                  "sigrid_hash(%lld, %lld, %lld)%s = %lld, want %lld",
                  (long long)cases[i / 2].x, (long long)cases[i / 2].salt,
                  (long long)cases[i / 2].max, i % 2 ? " by the reciprocal" : "",
                  (long long)yids[0], (long long)cases[i / 2].want);
    }
}

/* splitmix64: the test's own random 64-bit numbers. */
static uint64_t sm64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

RAP_TEST(ops_divu64_exact)
{
    /* the reciprocal's quotient and remainder equal / and % for divisors
     * at the edges (1, powers of two and their neighbours, 2^32 +- 1,
     * 2^63 +- 1, UINT64_MAX, Criteo's table sizes) and random ones of
     * every width, each against numerators at the edges (0, 1, d - 1, d,
     * d + 1, 2d - 1, 2^63, UINT64_MAX and its neighbours) and random */
    uint64_t ds[600];
    int nd = 0;
    const uint64_t fixed[] = {1, 2, 3, 5, 7, 10, 1460, 1000003, 10131227, 39884406,
                              (1ULL << 32) - 1, 1ULL << 32, (1ULL << 32) + 1,
                              (1ULL << 63) - 1, 1ULL << 63, (1ULL << 63) + 1,
                              UINT64_MAX, UINT64_MAX - 1, 0x9ddfea08eb382d69ULL};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        ds[nd++] = fixed[i];
    for (int k = 1; k < 64; k++) {
        ds[nd++] = (1ULL << k) - 1;
        ds[nd++] = (1ULL << k) + 1;
        ds[nd++] = 1ULL << k;
    }
    uint64_t seed = 20261204;
    while (nd < 600) {
        uint64_t r = sm64(&seed);
        int w = 1 + (int)(sm64(&seed) % 64); /* a random width */
        r = w == 64 ? r : r & ((1ULL << w) - 1);
        ds[nd++] = r ? r : 1;
    }
    long long bad = 0, n_checked = 0;
    for (int i = 0; i < nd; i++) {
        const uint64_t d = ds[i];
        uint64_t mul;
        uint32_t info;
        rap_divu64_make(d, &mul, &info);
        CHECK(info & RAP_DIVU64_SET);
        uint64_t ns[40] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 1ULL << 63,
                           (1ULL << 63) - 1, UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - d,
                           UINT64_MAX / d * d, UINT64_MAX / d * d - 1};
        for (int j = 14; j < 40; j++) {
            uint64_t r = sm64(&seed);
            ns[j] = j % 3 == 0 ? r >> (r % 64) : r; /* every magnitude */
        }
        for (int j = 0; j < 40; j++, n_checked++) {
            const uint64_t n = ns[j];
            if (rap_divu64(n, mul, info) != n / d || rap_modu64(n, d, mul, info) != n % d) {
                if (bad++ < 5)
                    CHECK_MSG(0, "%llu / %llu: %llu (want %llu), remainder %llu (want %llu)",
                              (unsigned long long)n, (unsigned long long)d,
                              (unsigned long long)rap_divu64(n, mul, info),
                              (unsigned long long)(n / d),
                              (unsigned long long)rap_modu64(n, d, mul, info),
                              (unsigned long long)(n % d));
            }
        }
    }
    CHECK_MSG(bad == 0, "%lld of %lld divisions wrong", bad, n_checked);
    /* the high multiply's portable form against the compiler's */
    for (int i = 0; i < 10000; i++) {
        uint64_t a = sm64(&seed), b = sm64(&seed);
        const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
        const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
        const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
        const uint64_t hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
        if (hi != rap_mulhi64(a, b)) {
            CHECK_MSG(0, "mulhi(%llx, %llx)", (unsigned long long)a, (unsigned long long)b);
            break;
        }
    }
    /* sigrid_hash over random ids, salts and table sizes: the same ids by
     * the reciprocal as by `%` */
    int lens[48]; /* a scol holds 63 rows */
    int64_t ids[48], ya[48], yb[48];
    for (int i = 0; i < 48; i++)
        lens[i] = 1;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 48; i++)
            ids[i] = (int64_t)sm64(&seed);
        scol c;
        make_scol(&c, 48, lens, ids, NULL);
        rap_desc a = sparse_desc(&c, false, RAP_OFF_SAME, ya, NULL, NULL);
        a.i0 = (int64_t)sm64(&seed);
        a.i1 = (int64_t)(ds[rep % nd] >> (rep % 2)); /* a positive int64 */
        if (a.i1 < 1)
            a.i1 = 1;
        rap_desc b = a;
        b.yids = yb;
        rap_divu64_make((uint64_t)b.i1, &b.dmul, &b.dinfo);
        run_cpu(RAP_OP_SIGRID_HASH, &a, 48);
        run_cpu(RAP_OP_SIGRID_HASH, &b, 48);
        CHECK_MSG(!memcmp(ya, yb, sizeof ya), "sigrid_hash max %lld: the reciprocal differs",
                  (long long)a.i1);
        for (int i = 0; i < 48; i++)
            CHECK(ya[i] >= 0 && ya[i] < a.i1);
        if (t->failures)
            break;
    }
}

RAP_TEST(ops_firstx_cpu)
{
    scol c;
    int lens[6] = {3, 1, 0, 0, 2, 5};
    int nul[6] = {0, 0, 0, 1, 0, 0};
    int64_t ids[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    make_scol(&c, 6, lens, ids, nul);
    int64_t yids[32], yoff[32], len[32];
    rap_desc d = sparse_desc(&c, true, RAP_OFF_COMPUTED, yids, yoff, len);
    d.i0 = 2;
    int64_t total = run_cpu(RAP_OP_FIRSTX, &d, 6);
    int64_t el[6] = {2, 1, 0, 0, 2, 2}, e[7] = {1, 2, 4, 5, 6, 7, 8};
    CHECK(total == 7 && ids_eq(len, el, 6) && ids_eq(yids, e, 7));
    /* k > every length: lists unchanged */
    d.i0 = 100;
    total = run_cpu(RAP_OP_FIRSTX, &d, 6);
    CHECK(total == 11 && ids_eq(yids, ids, 11));
    /* SAME (no list longer than k): copy */
    memset(yids, 0, sizeof yids);
    d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = 5;
    run_cpu(RAP_OP_FIRSTX, &d, 6);
    CHECK(ids_eq(yids, ids, 11));
}

RAP_TEST(ops_clamp_cpu)
{
    float x[6] = {-5.0f, 0.5f, 3.0f, NAN, 7.0f, -INFINITY};
    uint8_t v[6] = {1, 1, 1, 1, 0, 1};
    float y[6];
    rap_desc d = dense_desc(x, v, y);
    d.f0 = -1.0f;
    d.f1 = 2.0f;
    run_cpu(RAP_OP_CLAMP, &d, 6);
    CHECK(y[0] == -1.0f && y[1] == 0.5f && y[2] == 2.0f && isnan(y[3]));
    CHECK(same_bits(y[4], 0.0f) && y[5] == -1.0f);
    scol c;
    int lens[3] = {2, 0, 3};
    int nul[3] = {0, 1, 0};
    int64_t ids[5] = {-10, 3, 100, 50, INT64_MIN};
    make_scol(&c, 3, lens, ids, nul);
    int64_t yids[8];
    d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = 0;
    d.i1 = 50;
    run_cpu(RAP_OP_CLAMP, &d, 3);
    int64_t e[5] = {0, 3, 50, 50, 0};
    CHECK(ids_eq(yids, e, 5));
}

RAP_TEST(ops_ngram_cpu)
{
    scol c;
    int lens[6] = {3, 1, 0, 0, 4, 2};
    int nul[6] = {0, 0, 0, 1, 0, 0};
    int64_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    make_scol(&c, 6, lens, ids, nul);
    int64_t yids[64], yoff[32], len[32];
    rap_desc d = sparse_desc(&c, true, RAP_OFF_COMPUTED, yids, yoff, len);
    d.i0 = 2; /* [1,2,3] -> [1,2, 2,3]; [4] -> [4]; [] -> []; [5..8] -> 3 pairs; [9,10] */
    int64_t total = run_cpu(RAP_OP_NGRAM, &d, 6);
    int64_t el[6] = {4, 1, 0, 0, 6, 2};
    int64_t e[13] = {1, 2, 2, 3, 4, 5, 6, 6, 7, 7, 8, 9, 10};
    CHECK(total == 13 && ids_eq(len, el, 6) && ids_eq(yids, e, 13));
    d.i0 = 3; /* [5,6,7,8] -> [5,6,7, 6,7,8]; n > len: m = len, one window */
    total = run_cpu(RAP_OP_NGRAM, &d, 6);
    int64_t e3[10] = {1, 2, 3, 4, 5, 6, 7, 6, 7, 8};
    CHECK(total == 12 && ids_eq(yids, e3, 10) && yids[10] == 9 && yids[11] == 10);
    d.i0 = 1; /* n == 1: identity */
    total = run_cpu(RAP_OP_NGRAM, &d, 6);
    CHECK(total == 10 && ids_eq(yids, ids, 10));
    d.i0 = 10; /* n > every length: every list once */
    total = run_cpu(RAP_OP_NGRAM, &d, 6);
    CHECK(total == 10 && ids_eq(yids, ids, 10));
    /* SAME (len1 input): copy */
    memset(yids, 0, sizeof yids);
    d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.i0 = 2;
    run_cpu(RAP_OP_NGRAM, &d, 2);
    CHECK(ids_eq(yids, ids, 4));
}

RAP_TEST(ops_mapid_cpu)
{
    int64_t map[3] = {10, 20, -30};
    scol c;
    int lens[3] = {3, 0, 3};
    int nul[3] = {0, 1, 0};
    int64_t ids[6] = {0, 2, 3, -1, 1, INT64_MIN};
    make_scol(&c, 3, lens, ids, nul);
    int64_t yids[8];
    rap_desc d = sparse_desc(&c, true, RAP_OFF_SAME, yids, NULL, NULL);
    d.aux = map;
    d.naux = 3;
    run_cpu(RAP_OP_MAPID, &d, 3);
    int64_t e[6] = {10, -30, 0, 0, 20, 0};
    CHECK(ids_eq(yids, e, 6));
}
