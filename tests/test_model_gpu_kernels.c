/*
 * test_model_gpu_kernels.c -- the GPU model's interaction and MLP kernels
 * alone, on host data through their test hooks (gpu_model.h), against
 * references computed here: every interaction generation (v1 to v4) and
 * type (fp32, bf16, bf16 with a bf16 z and de) against a double
 * reference, every MLP elementwise kernel against its formula. Every test
 * skips without a GPU.
 */
#include "model/gpu/gpu_model.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ kernel-level checks */

#ifdef RAP_HAVE_CUDA
/* |got - ref| <= rel*|ref| + mrel*mag + 1e-6 (mag: the sum of the terms'
 * magnitudes; mrel: 1e-5, or 2^-9 where the operands were rounded to
 * TF32: 2^-11 each, twice the bound); NaN fails. Reports the first few. */
static int near(rap_test_ctx *t, const char *what, int64_t i, float got, double ref, double mag,
                double rel, double mrel, int *shown)
{
    const double tol = rel * fabs(ref) + mrel * mag + 1e-6;
    if (fabs((double)got - ref) <= tol)
        return 0;
    if ((*shown)++ < 4)
        rap_test_fail(t, __FILE__, __LINE__, "%s[%lld]: gpu %.8g ref %.8g (tol %.3g)", what,
                      (long long)i, (double)got, ref, tol);
    return 1;
}

/* One interaction case against a double reference on the same inputs. */
static void check_interact(rap_test_ctx *t, int F, int D, int64_t rows, bool bf16, int zmode,
                           int ver, uint64_t seed)
{
    const int T = F - 1, np = F * (F - 1) / 2, top_in = D + np, ld = (top_in + 7) / 8 * 8;
    const size_t nz = (size_t)rows * F * D, nt = (size_t)rows * ld;
    float *z = malloc(sizeof(float) * nz), *dy = malloc(sizeof(float) * nt);
    float *out = malloc(sizeof(float) * nt), *dx = malloc(sizeof(float) * (size_t)rows * D);
    float *de = malloc(sizeof(float) * (size_t)rows * T * D);
    double *dz = malloc(sizeof(double) * (size_t)F * D), *mg = malloc(sizeof(double) * (size_t)F * D);
    if (!z || !dy || !out || !dx || !de || !dz || !mg) {
        rap_test_fail(t, __FILE__, __LINE__, "out of memory");
        goto done;
    }
    uint64_t s = seed * 2654435761u + 17;
    for (size_t i = 0; i < nz; i++) {
        z[i] = (float)(rap_test_rnd01(&s) * 2.0 - 1.0);
        if (rap_test_rnd(&s) % 16 == 0)
            z[i] = 0.0f; /* x == 0: the ReLU mask is off */
        if (zmode)
            z[i] = rap_test_round_bf16(z[i]); /* what a bf16 z holds */
    }
    for (size_t i = 0; i < nt; i++) {
        const float v = (float)(rap_test_rnd01(&s) * 2.0 - 1.0);
        dy[i] = bf16 ? rap_test_round_bf16(v) : v;
    }
    const bool v2ok = D % 4 == 0 && D <= 128 && F <= 32;
    const bool tf32 = ver == 4 && !bf16; /* v4 in fp32: TF32 tensor cores */
    const double mrel = tf32 ? 1.0 / 512 : 1e-5;
    rap_status st = rap_gpu_interact_test(F, D, rows, bf16, zmode, ver, z, dy, out, dx, de);
    if (ver == 4 && (tf32 ? D % 32 != 0 || !v2ok : !zmode || D % 16 != 0 || !v2ok)) {
        CHECK_MSG(st == RAP_ERR_ARG, "F %d D %d %s z mode %d: v4 should refuse, got %s", F, D,
                  bf16 ? "bf16" : "fp32", zmode, rap_status_name(st));
        goto done;
    }
    if (zmode && ver == 1) {
        CHECK_MSG(st == RAP_ERR_ARG, "F %d D %d: v1 with bf16 z should refuse, got %s", F, D,
                  rap_status_name(st));
        goto done;
    }
    if (ver >= 2 && !v2ok) {
        CHECK_MSG(st == RAP_ERR_ARG, "F %d D %d: v%d should refuse, got %s", F, D, ver,
                  rap_status_name(st));
        goto done;
    }
    if (st != RAP_OK) {
        rap_test_fail(t, __FILE__, __LINE__, "F %d D %d rows %lld bf16 %d v%d: %s", F, D,
                      (long long)rows, bf16, ver, rap_last_error());
        goto done;
    }
    char what[96];
    snprintf(what, sizeof what, "F%d D%d n%lld %s v%d", F, D, (long long)rows,
             zmode == 2 ? "bf16 z, de" : zmode ? "bf16 z" : bf16 ? "bf16" : tf32 ? "tf32" : "fp32",
             ver);
    const double rel = bf16 ? 1.0 / 256 : 0.0; /* act outputs rounded to bf16 */
    int bad = 0, shown = 0;
    for (int64_t r = 0; r < rows && bad < 50; r++) {
        const float *zr = z + (size_t)r * F * D, *gr = dy + (size_t)r * ld;
        const float *o = out + (size_t)r * ld;
        for (int d = 0; d < D; d++)
            bad += near(t, what, r * ld + d, o[d], zr[d], 0.0, rel, mrel, &shown);
        int p = 0;
        for (int i = 1; i < F; i++)
            for (int j = 0; j < i; j++, p++) {
                double acc = 0.0, m = 0.0;
                for (int d = 0; d < D; d++) {
                    acc += (double)zr[i * D + d] * zr[j * D + d];
                    m += fabs((double)zr[i * D + d] * zr[j * D + d]);
                }
                bad += near(t, what, r * ld + D + p, o[D + p], acc, m, rel, mrel, &shown);
            }
        if (ver >= 2)
            for (int c = top_in; c < ld; c++)
                bad += near(t, "padding", r * ld + c, o[c], 0.0, 0.0, 0.0, 0.0, &shown);
        /* dZ_i = sum_j G_ij Z_j */
        for (int i = 0; i < F; i++)
            for (int d = 0; d < D; d++) {
                double acc = 0.0, m = 0.0;
                for (int j = 0; j < F; j++) {
                    if (j == i)
                        continue;
                    const int hi = i > j ? i : j, lo = i > j ? j : i;
                    const double gv = gr[D + hi * (hi - 1) / 2 + lo];
                    acc += gv * zr[j * D + d];
                    m += fabs(gv * zr[j * D + d]);
                }
                dz[i * D + d] = acc;
                mg[i * D + d] = m;
            }
        for (int d = 0; d < D; d++) {
            const double ref = zr[d] > 0.0f ? dz[d] + gr[d] : 0.0;
            bad += near(t, "dx", r * D + d, dx[(size_t)r * D + d], ref,
                        zr[d] > 0.0f ? mg[d] + fabs(gr[d]) : 0.0, rel, mrel, &shown);
        }
        for (int i = 1; i < F; i++)
            for (int d = 0; d < D; d++)
                bad += near(t, "de", (r * T + i - 1) * D + d,
                            de[((size_t)r * T + i - 1) * D + d], dz[i * D + d], mg[i * D + d],
                            zmode == 2 ? rel : 0.0, mrel, &shown);
    }
    CHECK_MSG(bad == 0, "%s: %d mismatches", what, bad);
done:
    free(z), free(dy), free(out), free(dx), free(de), free(dz), free(mg);
}
#endif

/* Every interaction kernel (v1 shared-memory, v2 registers, v3 registers
 * with the next rows prefetched: each FMAX x lanes instance of v2 and v3;
 * v4 tensor cores: bf16 with a bf16 z and D % 16 == 0, or fp32 on TF32
 * with D % 32 == 0, within TF32's rounding of the operands)
 * in fp32, bf16, and bf16 with a bf16 z, and with a bf16 z and de (v2 and
 * v3; z rounded, de within a bf16 step) against a double reference on the
 * same inputs, at odd
 * row counts (two rows a warp with one left over, a persistent grid with
 * several rows a warp and its last rows past the end); every output
 * element written (outputs start as NaN), the padding columns zero in v2
 * and v3; v2 and v3 refuse the shapes they do not take. */
RAP_TEST(model_gpu_interact_kernels_match_reference)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    static const struct {
        int F, D;
        int64_t rows;
    } sh[] = {
        {28, 128, 1000}, /* the paper: FMAX 32 (v3: 28), 32 lanes */
        {28, 128, 1},    {28, 128, 5003}, /* several rows a warp */
        {28, 64, 333},   /* 16 lanes: two rows a warp, the last alone */
        {32, 128, 67},   /* F = FMAX */
        {29, 124, 9},    /* v3 FMAX 32 with F < FMAX; a lane idle */
        {30, 60, 41},    /* v3 FMAX 32, 16 lanes, a lane of each row idle */
        {20, 128, 2651}, /* v3 FMAX 28 with F < FMAX: zero G columns */
        {17, 32, 45},    {5, 8, 37}, {9, 16, 101}, {16, 96, 130}, {3, 4, 7},
        {2, 128, 5},     /* one pair */
        {28, 136, 50},   /* v1 only: D > 128 */
        {5, 6, 9},       /* v1 only: D % 4 */
        {33, 32, 20},    /* v1 only: F > 32 */
    };
    /* b: fp32; bf16 with fp32 z; bf16 with bf16 z; bf16 with bf16 z and
     * de (v1 refuses the last two) */
    for (size_t k = 0; k < sizeof sh / sizeof sh[0] && t->failures < 4; k++)
        for (int b = 0; b < 4; b++)
            for (int ver = 1; ver <= 4; ver++)
                check_interact(t, sh[k].F, sh[k].D, sh[k].rows, b >= 1, b >= 2 ? b - 1 : 0, ver,
                               b >= 2 ? 1000 * (uint64_t)b + k * 4 + (uint64_t)ver
                                      : k * 8 + (uint64_t)b * 4 + (uint64_t)ver);
#endif
}

#ifdef RAP_HAVE_CUDA
/* One MLP kernel case (rap_gpu_mlp_kernel_test) against the formulas:
 * elementwise results bit for bit, column sums within float tolerance. */
static void check_mlp_kernel(rap_test_ctx *t, int op, bool bf16, int ver, int64_t rows, int cols,
                             int64_t ld, uint64_t seed)
{
    const int mld = (cols + 127) / 128 * 4;
    const size_t ny = (size_t)rows * ld, nd = (size_t)rows * cols, nm = (size_t)rows * mld;
    float *y = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny);
    float *da = malloc(sizeof(float) * nd), *da0 = malloc(sizeof(float) * nd);
    float *b = malloc(sizeof(float) * cols), *db = malloc(sizeof(float) * cols);
    uint32_t *mask = malloc(sizeof(uint32_t) * nm), *mask0 = malloc(sizeof(uint32_t) * nm);
    if (!y || !y0 || !da || !da0 || !b || !db || !mask || !mask0) {
        rap_test_fail(t, __FILE__, __LINE__, "out of memory");
        goto done;
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 5;
    for (int c = 0; c < cols; c++)
        b[c] = (float)(rap_test_rnd01(&s) - 0.5);
    for (size_t i = 0; i < ny; i++) {
        float v = (float)(rap_test_rnd01(&s) * 2.0 - 1.0);
        if (op == 1)
            v = v > 0.0f ? v : 0.0f; /* a ReLU output: zeros in half the places */
        y[i] = bf16 ? rap_test_round_bf16(v) : v;
        /* y + b == 0 exactly in some places (the mask's boundary) */
        if (op == 0 && rap_test_rnd(&s) % 16 == 0 && (int64_t)(i % (size_t)ld) < cols)
            y[i] = -b[i % (size_t)ld];
        if (bf16)
            y[i] = rap_test_round_bf16(y[i]);
    }
    for (size_t i = 0; i < nd; i++) {
        const float v = (float)(rap_test_rnd01(&s) * 2.0 - 1.0);
        da[i] = bf16 ? rap_test_round_bf16(v) : v;
    }
    for (size_t i = 0; i < nm; i++)
        mask[i] = (uint32_t)rap_test_rnd(&s);
    memcpy(y0, y, sizeof(float) * ny);
    memcpy(da0, da, sizeof(float) * nd);
    memcpy(mask0, mask, sizeof(uint32_t) * nm);
    char what[96];
    snprintf(what, sizeof what, "op %d %s v%d %lld x %d ld %lld", op, bf16 ? "bf16" : "fp32",
             ver, (long long)rows, cols, (long long)ld);
    rap_status st = rap_gpu_mlp_kernel_test(op, bf16, ver, rows, cols, ld, y, b, mask, da, db);
    if (st != RAP_OK) {
        rap_test_fail(t, __FILE__, __LINE__, "%s: %s", what, rap_last_error());
        goto done;
    }
    int bad = 0;
    const bool own = cols % 32 == 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) {
            const size_t i = (size_t)(r * ld + c);
            float want = y0[i];
            if (op == 0 && c < cols) {
                want = y0[i] + b[c];
                if (!(want > 0.0f))
                    want = 0.0f;
                if (bf16)
                    want = rap_test_round_bf16(want);
            }
            if (memcmp(&want, &y[i], 4) != 0 && bad++ < 4)
                rap_test_fail(t, __FILE__, __LINE__, "%s: y[%lld][%lld] %.8g want %.8g", what,
                              (long long)r, (long long)c, (double)y[i], (double)want);
            if (op == 0 && c < cols && own) {
                const uint32_t bit = (mask[r * mld + c / 32] >> (c % 32)) & 1u;
                if (bit != (uint32_t)(want > 0.0f) && bad++ < 4)
                    rap_test_fail(t, __FILE__, __LINE__, "%s: mask bit [%lld][%lld] %u", what,
                                  (long long)r, (long long)c, bit);
            }
        }
    if (op == 0)
        for (int64_t r = 0; r < rows; r++)
            for (int w = (own ? cols / 32 : 0); w < mld; w++)
                if (mask[r * mld + w] != mask0[r * mld + w] && bad++ < 4)
                    rap_test_fail(t, __FILE__, __LINE__, "%s: mask word %d of row %lld written",
                                  what, w, (long long)r);
    if (op != 0) {
        int shown = 0;
        for (int c = 0; c < cols; c++) {
            double sum = 0.0, mag = 0.0;
            for (int64_t r = 0; r < rows; r++) {
                const size_t i = (size_t)(r * cols + c);
                float want = da0[i];
                if (op == 1 && !(y0[r * ld + c] > 0.0f))
                    want = 0.0f;
                if (op == 2 && !((mask0[r * mld + c / 32] >> (c % 32)) & 1u))
                    want = 0.0f;
                if (memcmp(&want, &da[i], 4) != 0 && bad++ < 4)
                    rap_test_fail(t, __FILE__, __LINE__, "%s: da[%lld][%d] %.8g want %.8g", what,
                                  (long long)r, c, (double)da[i], (double)want);
                sum += want;
                mag += fabs(want);
            }
            bad += near(t, what, c, db[c], sum, mag, 0.0, 1e-5, &shown);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d mismatches", what, bad);
done:
    free(y), free(y0), free(da), free(da0), free(b), free(db), free(mask), free(mask0);
}
#endif

/* The MLP's own kernels, all three generations, fp32 and bf16: bias + ReLU
 * (+ the own bitmask), the ReLU backward from y and from the bitmask with
 * the bias gradient, the column sums; widths that take the 16-byte
 * kernels (v3: narrow ones with many rows a block, and wider than one
 * block), widths without a bitmask (not a multiple of 32) and widths or
 * leading dimensions that fall back to the scalar ones; odd row counts. */
RAP_TEST(model_gpu_mlp_kernels_match_reference)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    static const struct {
        int64_t rows;
        int cols;
        int64_t ld;
    } sh[] = {
        {700, 1024, 1024}, {4099, 256, 256}, {37, 96, 104}, {65, 40, 40},
        {19, 13, 13},      {23, 64, 67},     {1, 128, 128}, {3000, 32, 32},
        {33, 4352, 4352},  {9001, 128, 136},
    };
    for (size_t k = 0; k < sizeof sh / sizeof sh[0] && t->failures < 4; k++)
        for (int op = 0; op < 4; op++) {
            if (op == 2 && sh[k].cols % 32 != 0)
                continue;
            for (int bf = 0; bf < 2; bf++)
                for (int ver = 1; ver <= 3; ver++)
                    check_mlp_kernel(t, op, bf == 1, ver, sh[k].rows, sh[k].cols, sh[k].ld,
                                     k * 32 + (uint64_t)op * 8 + (uint64_t)bf * 4 + (uint64_t)ver);
        }
#endif
}
