/* test_emb16.c -- 16-bit embedding tables and row-wise Adagrad on the CPU
 * (src/model/half.h, emb_math.h, the CPU backend).
 *
 * Bit patterns of the bf16 / fp16 conversions worked out by hand (round to
 * nearest even, stochastic rounding at chosen random bits, subnormals,
 * overflow, NaN); stochastic rounding unbiased (alone and through the
 * model's update); the random stream's keys; row-wise Adagrad against the
 * formula written here; a 16-bit model's init, accessors, step counter,
 * byte counts and determinism; plan 1's model in bf16 with row-wise
 * Adagrad fits in about 43 GiB; and a bf16 row-wise model learns as well
 * as the fp32 Adagrad one. The GPU's bits against these: test_model_gpu.c
 * (model_gpu_emb16_*). */
#include "test.h"

#include "core/core.h"
#include "model/cpu/cpu_model.h"
#include "model/half.h"
#include "run/checkpoint.h"
#include "run/input.h"
#include "run/train.h"

#include <stdlib.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static float f32(uint32_t u) { return rap_bits_f32(u); }

/* One case: input bits, random bits, expected 16-bit result. */
typedef struct {
    uint32_t x, r;
    uint16_t want;
    const char *why;
} half_case;

static void check_cases(rap_test_ctx *t, const char *what, const half_case *c, int n,
                        uint16_t (*fn)(float, uint32_t))
{
    for (int i = 0; i < n; i++) {
        uint16_t got = fn(f32(c[i].x), c[i].r);
        CHECK_MSG(got == c[i].want, "%s(0x%08x, r 0x%08x) = 0x%04x, want 0x%04x (%s)", what,
                  c[i].x, c[i].r, got, c[i].want, c[i].why);
    }
}

static uint16_t bf16_rn(float x, uint32_t r)
{
    (void)r;
    return rap_f32_to_bf16_rn(x);
}
static uint16_t fp16_rn(float x, uint32_t r)
{
    (void)r;
    return rap_f32_to_fp16_rn(x);
}

/* ------------------------------------------------------------ conversions */

RAP_TEST(emb16_bf16_round_nearest)
{
    /* bf16 keeps the top 16 bits; the low 16 are the part rounded away
     * (0x8000 = exactly half a bf16 step). */
    static const half_case c[] = {
        {0x3f800000, 0, 0x3f80, "1.0 exact"},
        {0x3f808000, 0, 0x3f80, "1 + half a step: tie, 0x3f80 is even"},
        {0x3f818000, 0, 0x3f82, "tie between 0x3f81 and 0x3f82: to the even 0x3f82"},
        {0x3f808001, 0, 0x3f81, "just above half: up"},
        {0x3f807fff, 0, 0x3f80, "just below half: down"},
        {0xbf808001, 0, 0xbf81, "negative: the magnitude rounds the same way"},
        {0x7f7fffff, 0, 0x7f80, "FLT_MAX: 0x7f7f + more than half rounds up to inf"},
        {0x7f7f7fff, 0, 0x7f7f, "below half above bf16's largest finite: stays finite"},
        {0x7f800000, 0, 0x7f80, "inf"},
        {0xff800000, 0, 0xff80, "-inf"},
        {0x7f800001, 0, 0x7fc0, "signalling NaN with a low payload: quiet NaN, not inf"},
        {0xffc00001, 0, 0xffc0, "negative NaN keeps its sign"},
        {0x80000000, 0, 0x8000, "-0"},
        {0x00018000, 0, 0x0002, "subnormal tie between 0x0001 and 0x0002: to even"},
        {0x00007fff, 0, 0x0000, "tiny subnormal below half: to 0"},
    };
    check_cases(t, "bf16_rn", c, (int)(sizeof c / sizeof c[0]), bf16_rn);
}

RAP_TEST(emb16_bf16_stochastic)
{
    /* The top 16 random bits are added to the low 16 bits of x; a carry
     * rounds up. x = 0x3f80c000 has low part 0xc000 (0.75 of a step): up
     * iff r >> 16 >= 0x10000 - 0xc000 = 0x4000, probability 0.75. */
    static const half_case c[] = {
        {0x3f80c000, 0x3fffffff, 0x3f80, "0xc000 + 0x3fff = 0xffff: no carry"},
        {0x3f80c000, 0x40000000, 0x3f81, "0xc000 + 0x4000 = 0x10000: carry"},
        {0x3f80c000, 0x0000ffff, 0x3f80, "only the top 16 bits of r count"},
        {0xbf80c000, 0x40000000, 0xbf81, "negative: the magnitude goes up (away from 0)"},
        {0xbf80c000, 0x3fffffff, 0xbf80, "negative: toward 0"},
        {0x3f810000, 0xffffffff, 0x3f81, "exact values never move"},
        {0x7f7f8000, 0x80000000, 0x7f80, "half a step above the largest finite, carry: inf"},
        {0x7f7f8000, 0x7fffffff, 0x7f7f, "... no carry: the largest finite"},
        {0x7f800000, 0xffffffff, 0x7f80, "inf + 0xffff stays inf (0x7f80ffff)"},
        {0x7f800001, 0x00000000, 0x7fc0, "NaN stays NaN, quiet"},
        {0x00000001, 0xffffffff, 0x0001, "fp32 subnormal 1 + 0xffff: carry to bf16 0x0001"},
        {0x00000001, 0xfffe0000, 0x0000, "... 1 + 0xfffe: no carry"},
    };
    check_cases(t, "bf16_sr", c, (int)(sizeof c / sizeof c[0]), rap_f32_to_bf16_sr);
}

RAP_TEST(emb16_fp16_round_nearest)
{
    /* fp16: exponent bias 15 (fp32's 127 - 112), 10 mantissa bits (fp32's
     * 13 low bits rounded away: 0x1000 is half a step), largest 65504 =
     * 0x477fe000, smallest normal 2^-14 = 0x38800000, subnormal steps
     * 2^-24 = 0x33800000. */
    static const half_case c[] = {
        {0x3f800000, 0, 0x3c00, "1.0"},
        {0xc0000000, 0, 0xc000, "-2.0"},
        {0x3f801000, 0, 0x3c00, "1 + 2^-11: tie, 0x3c00 even"},
        {0x3f803000, 0, 0x3c02, "1 + 3*2^-11: tie between 0x3c01 and 0x3c02: even"},
        {0x3f801001, 0, 0x3c01, "just above half"},
        {0x477fe000, 0, 0x7bff, "65504, the largest finite"},
        {0x477fefff, 0, 0x7bff, "just below 65520: 65504"},
        {0x477ff000, 0, 0x7c00, "65520 = halfway to 65536: ties to the even inf"},
        {0x7f800000, 0, 0x7c00, "inf"},
        {0x7f800001, 0, 0x7e00, "signalling NaN: quiet NaN"},
        {0xffc00000, 0, 0xfe00, "-NaN: 0x8000 | 0x7e00 | payload 0x200"},
        {0x38800000, 0, 0x0400, "2^-14: smallest normal"},
        {0x33800000, 0, 0x0001, "2^-24: smallest subnormal"},
        {0x33000000, 0, 0x0000, "2^-25: half the smallest step, tie to even 0"},
        {0x33400000, 0, 0x0001, "1.5*2^-25: above half: 1"},
        {0x33c00000, 0, 0x0002, "1.5*2^-24: tie between 1 and 2: even"},
        {0x38002000, 0, 0x0200, "2^-15 + 2^-25: tie between 0x200 and 0x201: even"},
        {0x38006000, 0, 0x0202, "2^-15 + 3*2^-25: tie between 0x201 and 0x202: even"},
        {0x387ff000, 0, 0x0400, "2^-14 - 2^-25: tie between 0x3ff and 0x400: even 0x400"},
        {0x80000000, 0, 0x8000, "-0"},
        {0x322bcc77, 0, 0x0000, "1e-8: below 2^-25"},
    };
    check_cases(t, "fp16_rn", c, (int)(sizeof c / sizeof c[0]), fp16_rn);
}

RAP_TEST(emb16_fp16_stochastic)
{
    static const half_case c[] = {
        /* normal range: the top 13 bits of r added to the 13 dropped bits.
         * 1 + 2^-12 = 0x3f800800: dropped 0x800 (a quarter step): up iff
         * r >> 19 >= 0x2000 - 0x800 = 0x1800, i.e. r >= 0xc0000000. */
        {0x3f800800, 0xbfffffff, 0x3c00, "r >> 19 = 0x17ff: no carry"},
        {0x3f800800, 0xc0000000, 0x3c01, "r >> 19 = 0x1800: carry"},
        {0xbf800800, 0xc0000000, 0xbc01, "negative: magnitude up"},
        {0x3f802000, 0xffffffff, 0x3c01, "exact (1 + 2^-10) never moves"},
        /* 65520 = 65504 + half a step: up (to inf) iff r >> 19 >= 0x1000 */
        {0x477ff000, 0x7fffffff, 0x7bff, "no carry: 65504"},
        {0x477ff000, 0x80000000, 0x7c00, "carry past 65504: inf"},
        {0x47800000, 0x00000000, 0x7c00, "65536: no finite step above, inf"},
        {0x49742400, 0x00000000, 0x7c00, "1e6: inf"},
        {0x7f800000, 0x00000000, 0x7c00, "inf"},
        {0x7fc00000, 0x00000000, 0x7e00, "NaN"},
        /* subnormal range: x = (q + f) 2^-24, up iff r < floor(f 2^32).
         * 2.25*2^-24 = 0x34100000: q 2, f 0.25 -> up iff r < 0x40000000. */
        {0x34100000, 0x3fffffff, 0x0003, "r < 0x40000000: up to 3"},
        {0x34100000, 0x40000000, 0x0002, "r = 0x40000000: down to 2"},
        {0xb4100000, 0x00000000, 0x8003, "negative: magnitude up"},
        /* 2^-40 = 2^-16 of a step: f 2^32 = 0x10000, exact */
        {0x2b800000, 0x0000ffff, 0x0001, "2^-40, r < 0x10000: up to 2^-24"},
        {0x2b800000, 0x00010000, 0x0000, "2^-40, r = 0x10000: down to 0"},
        /* just below 2^-14: q 0x3ff, f = 0x3fff / 2^14 -> up iff r <
         * 0x3fff << 18 = 0xfffc0000; up gives 0x400 = 2^-14, normal */
        {0x387fffff, 0x00000000, 0x0400, "up into the normal range"},
        {0x387fffff, 0xfffc0000, 0x03ff, "down: largest subnormal"},
        {0x00000001, 0x00000000, 0x0000, "fp32 subnormal: probability < 2^-102, floored to 0"},
        {0x80000001, 0x00000000, 0x8000, "... negative: -0"},
    };
    check_cases(t, "fp16_sr", c, (int)(sizeof c / sizeof c[0]), rap_f32_to_fp16_sr);
}

/* Every 16-bit pattern widens exactly: rounding it back, to nearest or
 * stochastically with any bits, gives the same pattern (NaNs: a NaN). */
RAP_TEST(emb16_widen_round_trip)
{
    int bad = 0;
    uint64_t s = 5;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t r = (uint32_t)rap_splitmix64(&s);
        const float b = rap_bf16_to_f32((uint16_t)h), f = rap_fp16_to_f32((uint16_t)h);
        const bool bnan = (h & 0x7fff) > 0x7f80, fnan = (h & 0x7fff) > 0x7c00;
        if (bnan) {
            bad += !isnan(b) || (rap_f32_to_bf16_rn(b) & 0x7fff) <= 0x7f80;
        } else {
            bad += rap_f32_to_bf16_rn(b) != h || rap_f32_to_bf16_sr(b, r) != h;
            bad += rap_f32_bits(b) != h << 16; /* the definition of bf16 */
        }
        if (fnan)
            bad += !isnan(f) || (rap_f32_to_fp16_rn(f) & 0x7fff) <= 0x7c00;
        else
            bad += rap_f32_to_fp16_rn(f) != h || rap_f32_to_fp16_sr(f, r) != h;
        if (bad && bad < 3)
            CHECK_MSG(0, "pattern 0x%04x: bf16 %g fp16 %g", h, (double)b, (double)f);
    }
    CHECK(bad == 0);
    /* fp16 values by hand */
    CHECK(rap_fp16_to_f32(0x3c00) == 1.0f);
    CHECK(rap_fp16_to_f32(0x7bff) == 65504.0f);
    CHECK(rap_fp16_to_f32(0x0001) == 0x1p-24f);
    CHECK(rap_fp16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    CHECK(rap_fp16_to_f32(0x0400) == 0x1p-14f);
    CHECK(rap_fp16_to_f32(0xc000) == -2.0f);
    CHECK(isinf(rap_fp16_to_f32(0x7c00)));
    CHECK(rap_f32_bits(rap_fp16_to_f32(0x8000)) == 0x80000000u);
}

/* Stochastic rounding is unbiased: for x between neighbours lo < hi
 * (step u = hi - lo), the result is hi with probability p = (x - lo) / u,
 * so one result has mean x and standard deviation u sqrt(p (1 - p)) <=
 * u / 2; the mean of N independent ones has standard deviation <= u /
 * (2 sqrt N). N = 65536: u / 512. We accept |mean - x| <= 6 u / 512
 * (six standard deviations: a false failure about once in 5e8 values).
 * Round to nearest has a bias up to u / 2 and fails this for x away from
 * the midpoint: the test sees it for the x chosen at 0.3 of a step. */
static double mean_rounded(float x, bool fp16, bool sr, uint64_t seed)
{
    double sum = 0;
    uint64_t s = seed;
    for (int i = 0; i < 65536; i++) {
        const uint32_t r = (uint32_t)(rap_splitmix64(&s) >> 32);
        uint16_t h = fp16 ? (sr ? rap_f32_to_fp16_sr(x, r) : rap_f32_to_fp16_rn(x))
                          : (sr ? rap_f32_to_bf16_sr(x, r) : rap_f32_to_bf16_rn(x));
        sum += fp16 ? (double)rap_fp16_to_f32(h) : (double)rap_bf16_to_f32(h);
    }
    return sum / 65536.0;
}

/* The step of the 16-bit type at x: bf16 2^(e-7); fp16 2^(e-10), at least
 * 2^-24 (subnormals). */
static double step_at(float x, bool fp16)
{
    int e;
    frexp(fabs((double)x), &e); /* |x| in [2^(e-1), 2^e) */
    double u = ldexp(1.0, e - 1 - (fp16 ? 10 : 7));
    return fp16 && u < 0x1p-24 ? 0x1p-24 : u;
}

RAP_TEST(emb16_stochastic_unbiased)
{
    uint64_t s = 77;
    int tested = 0;
    for (int fp = 0; fp < 2; fp++) {
        for (int k = 0; k < 40; k++) {
            /* magnitudes from 2^-30 to 2^12 (fp16: deep into the
             * subnormals), both signs, random fractions */
            double mag = ldexp(1.0 + (double)(rap_splitmix64(&s) >> 11) * 0x1p-53,
                               -30 + (int)(rap_splitmix64(&s) % 43));
            float x = (float)((rap_splitmix64(&s) & 1) ? -mag : mag);
            double u = step_at(x, fp);
            double m = mean_rounded(x, fp, true, (uint64_t)k + 1);
            CHECK_MSG(fabs(m - (double)x) <= 6.0 * u / 512.0,
                      "%s: x %.9g: mean of 65536 roundings %.9g, off by %.4f steps",
                      fp ? "fp16" : "bf16", (double)x, m, fabs(m - (double)x) / u);
            tested++;
        }
        /* 0.3 of a step above a 16-bit value: stochastic within the bound,
         * to nearest 0.3 steps off (the test can tell them apart) */
        float lo = 1.5f, u = (float)step_at(lo, fp), x = lo + 0.3f * u;
        CHECK(fabs(mean_rounded(x, fp, true, 9) - (double)x) <= 6.0 * u / 512.0);
        CHECK(fabs(mean_rounded(x, fp, false, 9) - (double)x) > 0.29 * u);
    }
    CHECK(tested == 80);
}

RAP_TEST(emb16_random_stream)
{
    /* the key's parts all matter, and the same key gives the same bits */
    uint64_t k0 = rap_sr_row_key(rap_sr_step_key(1, 1), 0, 0);
    CHECK(rap_sr_bits(k0, 0) == rap_sr_bits(rap_sr_row_key(rap_sr_step_key(1, 1), 0, 0), 0));
    CHECK(rap_sr_bits(k0, 0) != rap_sr_bits(k0, 1));
    CHECK(rap_sr_bits(k0, 0) != rap_sr_bits(rap_sr_row_key(rap_sr_step_key(2, 1), 0, 0), 0));
    CHECK(rap_sr_bits(k0, 0) != rap_sr_bits(rap_sr_row_key(rap_sr_step_key(1, 2), 0, 0), 0));
    CHECK(rap_sr_bits(k0, 0) != rap_sr_bits(rap_sr_row_key(rap_sr_step_key(1, 1), 1, 0), 0));
    CHECK(rap_sr_bits(k0, 0) != rap_sr_bits(rap_sr_row_key(rap_sr_step_key(1, 1), 0, 1), 0));
    /* the definition (half.h) written out */
    uint64_t z = 7 ^ 0x5352726f756e6421ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    z += 3 * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31; /* step key of seed 7, step 3 */
    z ^= ((uint64_t)5 << 40) | 1234;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31; /* row key of table 5, row 1234 */
    uint64_t e = z + 3 * 0x9e3779b97f4a7c15ULL; /* element 9: draw 2, piece 1 */
    e = (e ^ (e >> 30)) * 0xbf58476d1ce4e5b9ULL;
    e = (e ^ (e >> 27)) * 0x94d049bb133111ebULL;
    e ^= e >> 31;
    CHECK(rap_sr_bits(rap_sr_row_key(rap_sr_step_key(7, 3), 5, 1234), 9) ==
          (uint32_t)((e >> 16) & 0xffffu) << 16);
    CHECK(rap_sr_draw(rap_sr_row_key(rap_sr_step_key(7, 3), 5, 1234), 2) == e);
    for (int i = 0; i < 4; i++)
        CHECK(rap_sr_bits(z, 8 + (uint32_t)i) == rap_sr_piece(e, i));
    /* over many rows and elements: each of the upper 16 bits about half
     * the time (sigma of a bit's count over 2^16 draws: 128), the lower 16
     * never (the stream fills the upper half of r) */
    int ones[32] = {0};
    for (uint32_t row = 0; row < 4096; row++)
        for (uint32_t el = 0; el < 16; el++) {
            uint32_t b = rap_sr_bits(rap_sr_row_key(rap_sr_step_key(1, 1), 3, row), el);
            for (int i = 0; i < 32; i++)
                ones[i] += (b >> i) & 1;
        }
    for (int i = 0; i < 32; i++)
        CHECK_MSG(i < 16 ? ones[i] == 0 : abs(ones[i] - 32768) < 6 * 128,
                  "bit %d set %d times of 65536", i, ones[i]);
}

/* ------------------------------------------------------------ models */

/* One table of R rows, D columns, B = R rows per batch, each row's bag
 * the id of its row: every row gets one update with its row's gradient. */
static rap_model_config one_table(int64_t R, int D, rap_optimizer opt, rap_emb_dtype dt)
{
    rap_model_config c;
    rap_model_config_defaults(&c);
    c.n_dense = 2;
    c.n_tables = 1;
    c.table_rows[0] = R;
    c.emb_dim = D;
    c.n_bot = 1;
    c.bot[0] = D;
    c.n_top = 1;
    c.top[0] = 1;
    c.batch = R;
    c.optimizer = opt;
    c.emb_dtype = dt;
    c.lr = 0.1f;
    c.adagrad_init = 0.0f;
    c.threads = 2;
    c.seed = 3;
    return c;
}

typedef struct {
    rap_model_batch b;
    float *dense, *label;
    int64_t *off[4], *ids[4];
    int T;
} ebatch;

static void eb_free(ebatch *e)
{
    free(e->dense);
    free(e->label);
    for (int t = 0; t < e->T; t++) {
        free(e->off[t]);
        free(e->ids[t]);
    }
    memset(e, 0, sizeof *e);
}

/* n rows; table t: bags of 0..max_bag ids drawn from [0, R_t) (small
 * tables: many duplicates), or with max_bag 0 one id per row, id = row. */
static bool eb_make(ebatch *e, const rap_model_config *c, int64_t n, int max_bag, uint64_t seed)
{
    memset(e, 0, sizeof *e);
    e->T = c->n_tables;
    uint64_t s = seed;
    e->dense = calloc((size_t)(n * c->n_dense), sizeof(float));
    e->label = calloc((size_t)n, sizeof(float));
    if (!e->dense || !e->label)
        return false;
    for (int64_t r = 0; r < n; r++)
        e->label[r] = (float)(r & 1);
    for (int t = 0; t < e->T; t++) {
        e->off[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        e->ids[t] = malloc(sizeof(int64_t) * (size_t)(n * (max_bag > 0 ? max_bag : 1) + 1));
        if (!e->off[t] || !e->ids[t])
            return false;
        int64_t k = 0;
        e->off[t][0] = 0;
        for (int64_t r = 0; r < n; r++) {
            if (max_bag == 0)
                e->ids[t][k++] = r;
            else
                for (int q = (int)(rap_splitmix64(&s) % (uint64_t)(max_bag + 1)); q > 0; q--)
                    e->ids[t][k++] = (int64_t)(rap_splitmix64(&s) % (uint64_t)c->table_rows[t]);
            e->off[t][r + 1] = k;
        }
        e->b.off[t] = e->off[t];
        e->b.ids[t] = e->ids[t];
    }
    e->b.rows = n;
    e->b.dense = e->dense;
    e->b.label = e->label;
    return true;
}

/* The model's stochastic update is unbiased too: 4096 rows x 16 of one
 * table all hold 0.5 and all get gradient 0.001 with SGD lr 0.1, so each
 * element's fp32 result is w = 0.5f - 0.1f * 0.001f = 0.4999 (not a bf16
 * or fp16 value), rounded with its own bits (row, element). The mean of
 * the 65536 stored values is within 6 u / 512 of w, u the step of the
 * type below 0.5 (bf16 2^-9, fp16 2^-12), as in emb16_stochastic_unbiased
 * (the elements' bits are independent draws). Round to nearest would give
 * 0.5 everywhere, 1e-4 off: more than 40 times the bound. */
RAP_TEST(emb16_update_unbiased)
{
    for (int dt = RAP_EMB_BF16; dt <= RAP_EMB_FP16; dt++) {
        rap_model_config c = one_table(4096, 16, RAP_SGD, (rap_emb_dtype)dt);
        rap_model *m = NULL;
        REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
        const size_t n = 4096 * 16;
        float *w = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
        ebatch e;
        bool ok = w && g && eb_make(&e, &c, 4096, 0, 1);
        if (!ok) {
            free(w);
            free(g);
            rap_model_free(m);
            REQUIRE(ok);
        }
        for (size_t i = 0; i < n; i++) {
            w[i] = 0.5f;
            g[i] = 0.001f;
        }
        CHECK_OK(rap_model_set(m, 0, w));
        CHECK_OK(rap_model_emb_forward(m, &e.b));
        CHECK_OK(rap_cpu_model_emb_backward_from(m, &e.b, g));
        CHECK_OK(rap_model_get(m, 0, w));
        const float want = 0.5f - 0.1f * 0.001f;
        const double u = dt == RAP_EMB_BF16 ? 0x1p-9 : 0x1p-12;
        double sum = 0;
        int lo = 0, hi = 0;
        for (size_t i = 0; i < n; i++) {
            sum += w[i];
            lo += w[i] == (float)(0.5 - u);
            hi += w[i] == 0.5f;
        }
        CHECK_MSG(lo + hi == (int)n, "%s: values other than the two neighbours",
                  rap_emb_dtype_name((rap_emb_dtype)dt));
        CHECK_MSG(fabs(sum / (double)n - (double)want) <= 6.0 * u / 512.0,
                  "%s: mean %.9g, fp32 update %.9g, bound %.3g",
                  rap_emb_dtype_name((rap_emb_dtype)dt), sum / (double)n, (double)want,
                  6.0 * u / 512.0);
        free(w);
        free(g);
        eb_free(&e);
        rap_model_free(m);
    }
}

/* Row-wise Adagrad (FBGEMM's exact row-wise), the formula written here:
 * per touched row, g = the summed gradient of its ids in the batch,
 * s += (sum_d g_d^2) / D, w_d -= lr * g_d / (sqrt(s) + eps); untouched
 * rows and their state unchanged. The reference runs in double. The model
 * rounds in float (relative error 2^-24 per operation): the D-term sum of
 * squares is off by at most D 2^-24 relative, the mean and the new state
 * by two more roundings, so the state is within (D + 2) 2^-24 relative;
 * the square root halves that, and the multiplier and step add three
 * roundings: the step is within (D/2 + 5) 2^-24 relative, and the stored
 * weight within that plus 2^-23 of itself (its own rounding, at most half
 * a float step). Dyadic gradients (multiples of 2^-8) make the sums exact
 * and test the same bound. */
static void rowwise_case(rap_test_ctx *t, int D, bool dyadic, rap_emb_dtype dt)
{
    rap_model_config c = one_table(7, D, RAP_ROWWISE_ADAGRAD, dt);
    c.n_tables = 2;
    c.table_rows[0] = 7;
    c.table_rows[1] = 3;
    c.batch = 40;
    c.adagrad_init = 0.01f;
    c.lr = 0.05f;
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    int64_t sr = 0, sc = 0;
    CHECK_OK(rap_model_state_shape(m, 0, &sr, &sc));
    CHECK(sr == 7 && sc == 1);
    CHECK_OK(rap_model_state_shape(m, 2, &sr, &sc)); /* bot_l.0.weight */
    CHECK(sr == D && sc == 2);
    uint64_t s = 100 + (uint64_t)D;
    float w0[2][7 * 200], s0[2][7], w1[2][7 * 200], s1[2][7];
    for (int step = 0; step < 3; step++) {
        ebatch e;
        float *demb = malloc(sizeof(float) * 40 * 2 * (size_t)D);
        bool ok = demb && eb_make(&e, &c, 40, 2, 7 + (uint64_t)step);
        if (!ok) {
            free(demb);
            rap_model_free(m);
            REQUIRE(ok);
        }
        for (int i = 0; i < 40 * 2 * D; i++)
            demb[i] = dyadic ? (float)((int)(rap_splitmix64(&s) % 129) - 64) * 0x1p-8f
                             : (float)(((double)(rap_splitmix64(&s) >> 11) * 0x1p-53 - 0.5) * 0.3);
        for (int tt = 0; tt < 2; tt++) {
            CHECK_OK(rap_model_get(m, tt, w0[tt]));
            CHECK_OK(rap_model_get_state(m, tt, s0[tt]));
        }
        CHECK_OK(rap_model_emb_forward(m, &e.b));
        CHECK_OK(rap_cpu_model_emb_backward_from(m, &e.b, demb));
        int bad = 0, touched = 0;
        for (int tt = 0; tt < 2; tt++) {
            CHECK_OK(rap_model_get(m, tt, w1[tt]));
            CHECK_OK(rap_model_get_state(m, tt, s1[tt]));
            for (int64_t id = 0; id < c.table_rows[tt]; id++) {
                double g[200] = {0}, ss = 0;
                int hits = 0;
                for (int64_t r = 0; r < 40; r++)
                    for (int64_t p = e.off[tt][r]; p < e.off[tt][r + 1]; p++)
                        if (e.ids[tt][p] == id) {
                            hits++;
                            for (int d = 0; d < D; d++)
                                g[d] += demb[(r * 2 + tt) * D + d];
                        }
                touched += hits > 0;
                for (int d = 0; d < D; d++)
                    ss += g[d] * g[d];
                double sn = hits ? (double)s0[tt][id] + ss / D : (double)s0[tt][id];
                const double rel = (D + 2) * 0x1p-24, srel = (D / 2.0 + 5) * 0x1p-24;
                if (fabs(s1[tt][id] - sn) > rel * sn && bad++ < 4)
                    CHECK_MSG(0, "D %d table %d row %lld: state %.9g, want %.9g", D, tt,
                              (long long)id, (double)s1[tt][id], sn);
                for (int d = 0; d < D && dt == RAP_EMB_FP32; d++) {
                    double stepv = hits ? 0.05 * g[d] / (sqrt(sn) + 1e-8) : 0;
                    double want = (double)w0[tt][id * D + d] - stepv;
                    double got = w1[tt][id * D + d];
                    if (fabs(got - want) > srel * fabs(stepv) + 0x1p-23 * fabs(want) &&
                        bad++ < 4)
                        CHECK_MSG(0, "D %d table %d row %lld col %d: %.9g, want %.9g", D, tt,
                                  (long long)id, d, got, want);
                }
                /* 16 bits: the new value is one of the two neighbours of
                 * the fp32 result (stochastic rounding), untouched rows
                 * keep their bits */
                for (int d = 0; d < D && dt != RAP_EMB_FP32; d++) {
                    double stepv = hits ? 0.05 * g[d] / (sqrt(sn) + 1e-8) : 0;
                    double want = (double)w0[tt][id * D + d] - stepv;
                    double got = w1[tt][id * D + d];
                    double u = 2 * step_at((float)want, dt == RAP_EMB_FP16);
                    if (!hits ? got != w0[tt][id * D + d]
                              : fabs(got - want) > u + srel * fabs(stepv)) {
                        if (bad++ < 4)
                            CHECK_MSG(0, "%s D %d table %d row %lld col %d: %.9g, want %.9g",
                                      rap_emb_dtype_name(dt), D, tt, (long long)id, d, got, want);
                    }
                }
            }
        }
        CHECK(bad == 0);
        CHECK(touched >= 6);
        free(demb);
        eb_free(&e);
    }
    rap_model_free(m);
}

RAP_TEST(emb16_rowwise_adagrad_formula)
{
    /* D 5 (one lane per column), 8 (4 per lane), 37 and 136: rows of two
     * blocks of the sum-of-squares order (32 and 128 columns) */
    static const int dims[] = {5, 8, 37, 136};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0] && !t->failures; k++) {
        rowwise_case(t, dims[k], true, RAP_EMB_FP32);
        rowwise_case(t, dims[k], false, RAP_EMB_FP32);
        rowwise_case(t, dims[k], false, RAP_EMB_BF16);
        rowwise_case(t, dims[k], true, RAP_EMB_FP16);
    }
}

/* The MLPs of a row-wise model take per-element Adagrad: after one step
 * from state a, each MLP state element is a + g*g exactly (g its
 * gradient, the same float operations). */
RAP_TEST(emb16_rowwise_mlp_adagrad)
{
    rap_model_config c = one_table(50, 8, RAP_ROWWISE_ADAGRAD, RAP_EMB_BF16);
    c.n_bot = 2;
    c.bot[0] = 6;
    c.bot[1] = 8;
    c.n_top = 2;
    c.top[0] = 5;
    c.top[1] = 1;
    c.batch = 50;
    c.adagrad_init = 0.125f;
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    ebatch e;
    REQUIRE(eb_make(&e, &c, 50, 2, 3));
    for (int i = 0; i < 50 * 2; i++)
        e.dense[i] = (float)(i % 7) * 0.25f - 0.5f;
    CHECK_OK(rap_model_train_step(m, &e.b));
    int bad = 0, nonzero = 0;
    for (int i = 1; i < rap_model_n_tensors(m); i++) {
        const rap_tensor_info *x = rap_model_tensor(m, i);
        size_t n = (size_t)(x->rows * x->cols);
        float *g = malloc(sizeof(float) * n), *st = malloc(sizeof(float) * n);
        REQUIRE(g && st);
        CHECK_OK(rap_model_get_grad(m, i, g));
        CHECK_OK(rap_model_get_state(m, i, st));
        int64_t sr, sc;
        CHECK_OK(rap_model_state_shape(m, i, &sr, &sc));
        CHECK(sr == x->rows && sc == x->cols);
        for (size_t j = 0; j < n; j++) {
            bad += st[j] != 0.125f + g[j] * g[j];
            nonzero += g[j] != 0.0f;
        }
        free(g);
        free(st);
    }
    CHECK(bad == 0);
    CHECK(nonzero > 20);
    eb_free(&e);
    rap_model_free(m);
}

/* A 16-bit model: init is rap_init_table_value rounded to nearest; the
 * float accessors widen and round; the raw accessors give the bits; row
 * ranges; the update counter; the byte counts. */
RAP_TEST(emb16_model_storage)
{
    for (int dt = RAP_EMB_BF16; dt <= RAP_EMB_FP16; dt++) {
        rap_model_config c = one_table(300, 6, RAP_ROWWISE_ADAGRAD, (rap_emb_dtype)dt);
        c.adagrad_init = 0.5f;
        rap_model *m = NULL;
        REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
        CHECK((int)rap_model_tensor_dtype(m, 0) == dt);
        CHECK(rap_model_tensor_dtype(m, 1) == RAP_EMB_FP32);
        uint16_t raw[300 * 6], raw2[300 * 6];
        float f[300 * 6];
        CHECK_OK(rap_model_get_rows(m, 0, 0, 300, (rap_emb_dtype)dt, raw));
        CHECK_OK(rap_model_get(m, 0, f));
        int bad = 0;
        for (int j = 0; j < 300 * 6; j++) {
            float v = rap_init_table_value(c.seed, 0, (uint64_t)j, 300);
            uint16_t want = dt == RAP_EMB_FP16 ? rap_f32_to_fp16_rn(v) : rap_f32_to_bf16_rn(v);
            bad += raw[j] != want;
            bad += f[j] != (dt == RAP_EMB_FP16 ? rap_fp16_to_f32(want) : rap_bf16_to_f32(want));
        }
        CHECK(bad == 0);
        /* set(get) gives the same bits; set rounds a float to nearest */
        CHECK_OK(rap_model_set(m, 0, f));
        CHECK_OK(rap_model_get_rows(m, 0, 0, 300, (rap_emb_dtype)dt, raw2));
        CHECK(!memcmp(raw, raw2, sizeof raw));
        float third[6] = {1.0f / 3, -1.0f / 3, 1e-6f, 70000.0f, 0.0f, -2.5f};
        CHECK_OK(rap_model_set_rows(m, 0, 299, 1, RAP_EMB_FP32, third));
        CHECK_OK(rap_model_get_rows(m, 0, 299, 1, (rap_emb_dtype)dt, raw2));
        for (int d = 0; d < 6; d++)
            CHECK(raw2[d] == (dt == RAP_EMB_FP16 ? rap_f32_to_fp16_rn(third[d])
                                                  : rap_f32_to_bf16_rn(third[d])));
        /* raw rows in, raw rows out */
        uint16_t mine[2 * 6] = {0x3f80, 0x4000, 0xbf80, 0x0001, 0x8000, 0x3c00,
                                0x1234, 0x4321, 0x0400, 0x7bff, 0xc000, 0x0000};
        CHECK_OK(rap_model_set_rows(m, 0, 10, 2, (rap_emb_dtype)dt, mine));
        CHECK_OK(rap_model_get_rows(m, 0, 10, 2, (rap_emb_dtype)dt, raw2));
        CHECK(!memcmp(mine, raw2, sizeof mine));
        /* misuse */
        CHECK(rap_model_get_rows(m, 0, 299, 2, (rap_emb_dtype)dt, raw2) == RAP_ERR_ARG);
        CHECK(rap_model_get_rows(m, 0, -1, 1, (rap_emb_dtype)dt, raw2) == RAP_ERR_ARG);
        CHECK(rap_model_get_rows(m, 0, 0, 1, dt == RAP_EMB_BF16 ? RAP_EMB_FP16 : RAP_EMB_BF16,
                                 raw2) == RAP_ERR_ARG);
        CHECK(rap_model_get_rows(m, 1, 0, 1, (rap_emb_dtype)dt, raw2) == RAP_ERR_ARG);
        /* the row-wise state: one float per row, adagrad_init at first */
        float st[300], st2[3] = {1, 2, 3};
        CHECK_OK(rap_model_get_state(m, 0, st));
        for (int r = 0; r < 300; r++)
            CHECK(st[r] == 0.5f);
        CHECK_OK(rap_model_set_state_rows(m, 0, 5, 3, st2));
        CHECK_OK(rap_model_get_state_rows(m, 0, 4, 5, st));
        CHECK(st[0] == 0.5f && st[1] == 1 && st[2] == 2 && st[3] == 3 && st[4] == 0.5f);
        /* the update counter */
        uint64_t k = 99;
        CHECK_OK(rap_model_get_emb_step(m, &k));
        CHECK(k == 0);
        ebatch e;
        REQUIRE(eb_make(&e, &c, 300, 1, 4));
        CHECK_OK(rap_model_train_step(m, &e.b));
        CHECK_OK(rap_model_train_step(m, &e.b));
        CHECK_OK(rap_model_get_emb_step(m, &k));
        CHECK(k == 2);
        CHECK_OK(rap_model_set_emb_step(m, 41));
        CHECK_OK(rap_model_train_step(m, &e.b));
        CHECK_OK(rap_model_get_emb_step(m, &k));
        CHECK(k == 42);
        eb_free(&e);
        rap_model_free(m);
    }
    /* bytes: the tables at 2 bytes an element, row-wise state one float a
     * row, the MLP's state per element as Adagrad's */
    rap_model_config c = one_table(1000, 16, RAP_ADAGRAD, RAP_EMB_FP32);
    size_t a32 = rap_model_bytes(&c, RAP_CPU);
    c.emb_dtype = RAP_EMB_BF16;
    size_t a16 = rap_model_bytes(&c, RAP_CPU);
    CHECK(a32 - a16 == 1000 * 16 * 2);
    c.optimizer = RAP_ROWWISE_ADAGRAD;
    size_t r16 = rap_model_bytes(&c, RAP_CPU);
    CHECK(a16 - r16 == 1000 * 16 * 4 - 1000 * 4);
    c.optimizer = RAP_SGD;
    /* SGD keeps no state: the row-wise model had 1000 row floats and one
     * per MLP parameter: bottom 16 x (2 + 1), top 1 x (16 + 1 + 1) */
    CHECK(r16 - rap_model_bytes(&c, RAP_CPU) == 1000 * 4 + 4 * (16 * 3 + 18));
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    float dummy[16];
    CHECK(rap_model_get_state(m, 0, dummy) == RAP_ERR_ARG);
    CHECK(rap_model_state_shape(m, 0, NULL, NULL) == RAP_ERR_ARG);
    rap_model_free(m);
    /* config checks */
    c.emb_dtype = (rap_emb_dtype)3;
    CHECK(rap_model_config_check(&c) == RAP_ERR_ARG && strstr(rap_last_error(), "emb_dtype"));
    c.emb_dtype = RAP_EMB_FP16;
    c.optimizer = RAP_ROWWISE_ADAGRAD;
    c.adagrad_eps = 0;
    c.adagrad_init = 0;
    CHECK(rap_model_config_check(&c) == RAP_ERR_ARG && strstr(rap_last_error(), "row-wise"));
    CHECK(!strcmp(rap_optimizer_name(RAP_ROWWISE_ADAGRAD), "rowwise-adagrad"));
    CHECK(!strcmp(rap_emb_dtype_name(RAP_EMB_FP16), "fp16"));
}

/* Same seed, same bits (runs and thread counts); another seed, other
 * rounding: the stream is keyed and the update deterministic. */
static rap_status run_steps(const rap_model_config *c, int steps, uint16_t *out, float *state)
{
    rap_model *m = NULL;
    RAP_TRY(rap_model_create(c, RAP_CPU, &m));
    rap_status st = RAP_OK;
    for (int k = 0; k < steps && st == RAP_OK; k++) {
        ebatch e;
        if (!eb_make(&e, c, c->batch, 3, 50 + (uint64_t)k)) {
            eb_free(&e);
            st = RAP_ERR_NOMEM;
            break;
        }
        for (int i = 0; i < c->batch * c->n_dense; i++)
            e.dense[i] = (float)((i * 7) % 11) * 0.1f;
        st = rap_model_train_step(m, &e.b);
        eb_free(&e);
    }
    if (st == RAP_OK)
        st = rap_model_get_rows(m, 0, 0, c->table_rows[0], c->emb_dtype, out);
    if (st == RAP_OK)
        st = rap_model_get_state(m, 0, state);
    rap_model_free(m);
    return st;
}

RAP_TEST(emb16_deterministic)
{
    rap_model_config c = one_table(64, 12, RAP_ROWWISE_ADAGRAD, RAP_EMB_BF16);
    c.batch = 200;
    c.lr = 0.5f;
    static uint16_t a[64 * 12], b[64 * 12];
    static float sa[64], sb[64];
    c.threads = 1;
    REQUIRE_OK(run_steps(&c, 4, a, sa));
    c.threads = 2;
    REQUIRE_OK(run_steps(&c, 4, b, sb));
    CHECK(!memcmp(a, b, sizeof a) && !memcmp(sa, sb, sizeof sa));
    c.seed = 4; /* another init and other rounding: differs */
    REQUIRE_OK(run_steps(&c, 4, b, sb));
    CHECK(memcmp(a, b, sizeof a) != 0);
}

/* ------------------------------------------------------------ plan 1 */

/* The workload: plan 1's 27 tables (26 Criteo 1TB cardinalities
 * and the bucketize table) at dim 128, the paper's MLPs. fp32 tables with
 * Adagrad need about 170 GiB (more than an H200); bf16 tables with
 * row-wise Adagrad about 43 GiB: 178 M rows x 128 x 2 bytes = 42.4 GiB of
 * tables and 178 M x 4 bytes = 0.66 GiB of state. */
RAP_TEST(emb16_plan1_bytes)
{
    rap_plan *p = NULL;
    REQUIRE_SHIPPED_PLAN("plan1.plan", &p);
    rap_model_config c;
    rap_model_config_defaults(&c);
    rap_status st = rap_input_shape(p, &c.n_dense, &c.n_tables, c.table_rows);
    rap_plan_free(p);
    REQUIRE_OK(st);
    int64_t rows = 0;
    for (int i = 0; i < c.n_tables; i++)
        rows += c.table_rows[i];
    c.emb_dim = 128;
    c.n_bot = 3;
    c.bot[0] = 512;
    c.bot[1] = 256;
    c.bot[2] = 128;
    c.n_top = 5;
    c.top[0] = 1024;
    c.top[1] = 1024;
    c.top[2] = 512;
    c.top[3] = 256;
    c.top[4] = 1;
    c.batch = 4096;
    c.optimizer = RAP_ADAGRAD;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    double full = (double)rap_model_bytes(&c, RAP_CPU) / gib;
    c.optimizer = RAP_ROWWISE_ADAGRAD;
    c.emb_dtype = RAP_EMB_BF16;
    double small = (double)rap_model_bytes(&c, RAP_CPU) / gib;
    double gpu = (double)rap_model_bytes(&c, RAP_GPU) / gib; /* 0 without CUDA */
    fprintf(stderr, "  plan 1: %d tables, %lld rows; dim 128: fp32 + Adagrad %.2f GiB, bf16 + "
                    "row-wise Adagrad %.2f GiB (batch 4096, CPU estimate; GPU %.2f GiB)\n",
            c.n_tables, (long long)rows, full, small, gpu);
    CHECK(gpu == 0 || (gpu > 40 && gpu < 46));
    CHECK(c.n_tables == 27 && rows > 170000000 && rows < 190000000);
    CHECK(full > 160 && full < 180);
    CHECK(small > 40 && small < 46);
    double tables = (double)rows * 128 * 2 / gib, state = (double)rows * 4 / gib;
    CHECK(small - tables - state < 1.0); /* the rest: MLPs and batch-4096 buffers */
}

/* ------------------------------------------------------------ learning */

/* bf16 tables with row-wise Adagrad learn as well as fp32 tables with
 * Adagrad: rows from the generator (its teacher model, docs/GENERATOR.md;
 * 200,000 training rows of seed 1, 50,000 held-out rows of seed 2, as
 * `rap train --gen-rows 200000 --gen-eval-rows 50000` makes them), the
 * default plan and the small preset (dim 16, 64-16, 64-32-1, batch 1024,
 * lr 0.02): held-out AUC within 0.003. Every run is deterministic (bit
 * for bit), so the check cannot flicker. (Measured with `rap train` on
 * these rows: fp32 Adagrad 0.7643, bf16 row-wise 0.7623, fp32 row-wise
 * 0.7623, bf16 Adagrad 0.7631: the storage type moves the AUC by 0.001 at
 * most, the optimizer by 0.002.) */
static rap_status learn(const rap_plan *plan, const char *data, const char *ev,
                        rap_optimizer opt, rap_emb_dtype dt, rap_train_result *r)
{
    rap_train_config c;
    rap_train_defaults(&c);
    c.plan = plan;
    c.plan_name = "default";
    c.data = data;
    c.eval_data = ev;
    c.model.emb_dim = 16;
    c.model.n_bot = 2;
    c.model.bot[0] = 64;
    c.model.bot[1] = 16;
    c.model.n_top = 3;
    c.model.top[0] = 64;
    c.model.top[1] = 32;
    c.model.top[2] = 1;
    c.model.batch = 1024;
    c.model.optimizer = opt;
    c.model.emb_dtype = dt;
    c.model.lr = 0.02f;
    c.model.threads = 2;
    c.reader.threads = 2;
    c.progress = false;
    return rap_train_run(&c, r);
}

RAP_TEST(emb16_learns_like_fp32)
{
    char data[512], ev[512];
    rap_test_path(data, sizeof data, "emb16_train.tsv");
    rap_test_path(ev, sizeof ev, "emb16_eval.tsv");
    rap_gen_config g;
    rap_gen_result gr;
    memset(&g, 0, sizeof g);
    g.rows = 200000;
    g.seed = 1;
    g.out = data;
    g.threads = 2;
    REQUIRE_OK(rap_gen_cardinalities("kaggle", g.card));
    REQUIRE_OK(rap_gen_write(&g, &gr));
    g.rows = 50000;
    g.seed = 2;
    g.out = ev;
    REQUIRE_OK(rap_gen_write(&g, &gr));
    rap_plan *plan = NULL;
    REQUIRE_SHIPPED_PLAN("default.plan", &plan);
    rap_train_result a, b;
    double t0 = rap_now();
    rap_status st = learn(plan, data, ev, RAP_ADAGRAD, RAP_EMB_FP32, &a);
    if (st == RAP_OK)
        st = learn(plan, data, ev, RAP_ROWWISE_ADAGRAD, RAP_EMB_BF16, &b);
    rap_plan_free(plan);
    REQUIRE_OK(st);
    fprintf(stderr, "  held-out AUC: fp32 Adagrad %.4f, bf16 row-wise Adagrad %.4f (teacher "
                    "%.4f; %.1f s)\n",
            a.eval.auc, b.eval.auc, gr.teacher_auc, rap_now() - t0);
    CHECK(a.eval.rows == 50000 && b.eval.rows == 50000);
    CHECK(a.eval.auc > 0.75); /* it learned */
    CHECK_MSG(fabs(a.eval.auc - b.eval.auc) <= 0.003, "AUC fp32 Adagrad %.4f, bf16 row-wise %.4f",
              a.eval.auc, b.eval.auc);
}

/* ------------------------------------------------------------ the binary */

/* `rap train --emb-dtype bf16 --optimizer rowwise-adagrad`: the settings
 * and the model line say so, it trains; an fp16 checkpoint resumed with
 * --emb-dtype bf16 says it converts, naming both types; rap export of the
 * result holds BF16 tables. */
RAP_TEST(emb16_cli_train)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char out[1 << 16];
    char args[2048], ck[512], ck2[512], ex[512];
    snprintf(ck, sizeof ck, "%s/emb16_cli.safetensors", rap_test_tmpdir());
    snprintf(ck2, sizeof ck2, "%s/emb16_cli2.safetensors", rap_test_tmpdir());
    snprintf(ex, sizeof ex, "%s/emb16_cli_export.safetensors", rap_test_tmpdir());
    snprintf(args, sizeof args,
             "train --device cpu --gen-rows 4000 --gen-eval-rows 1000 --steps 3 --batch 512 "
             "--emb-dtype bf16 --optimizer rowwise-adagrad --threads 2");
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(strstr(out, "emb-dtype") && strstr(out, "bf16 tables") &&
                  strstr(out, "rowwise-adagrad lr") && strstr(out, "AUC"),
              "%s", out);
    snprintf(args, sizeof args,
             "train --device cpu --gen-rows 4000 --gen-eval-rows 1000 --steps 3 --batch 512 "
             "--emb-dtype fp16 --optimizer rowwise-adagrad --save %s --threads 2", ck);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK(access(ck, F_OK) == 0);
    snprintf(args, sizeof args,
             "train --device cpu --gen-rows 4000 --gen-eval-rows 1000 --steps 5 --batch 512 "
             "--emb-dtype bf16 --optimizer rowwise-adagrad --resume %s --save %s --threads 2",
             ck, ck2);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(strstr(out, "tables are fp16, this run's --emb-dtype is bf16") &&
                  strstr(out, "converted"),
              "%s", out);
    snprintf(args, sizeof args, "export --checkpoint %s --out %s", ck2, ex);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    rap_ckpt *c = NULL;
    CHECK_OK(rap_ckpt_open(ex, &c));
    if (c) {
        int k = rap_ckpt_find(c, "emb_l.0.weight");
        CHECK(k >= 0 && c->t[k].dtype == RAP_ST_BF16);
        CHECK(rap_ckpt_find(c, "optimizer.emb_l.0.weight.sum") < 0);
    }
    rap_ckpt_close(c);
    CHECK(rap_test_run_rap("train --emb-dtype int8", out, sizeof out) == 2);
    CHECK_MSG(strstr(out, "fp32|bf16|fp16"), "%s", out);
    CHECK(rap_test_run_rap("train --help", out, sizeof out) == 0);
    CHECK(strstr(out, "--emb-dtype") && strstr(out, "rowwise-adagrad"));
}
