/* gen.c -- synthetic Criteo-shaped click logs with a hidden teacher.
 *
 * The model (docs/GENERATOR.md): a fixed "world" (per-column null rates,
 * count distributions, Zipf exponents, id keys and the teacher's weights) is
 * made from a constant seed and the cardinalities, so files of different
 * seeds are rows of one distribution (train on seed 1, test on seed 2). The
 * seed only picks the rows. Rows are made in blocks of RAP_GEN_BLOCK_ROWS;
 * block b uses an RNG seeded by (seed, b) alone, and blocks are formatted
 * (and, for .gz, compressed as one gzip member each) in parallel and written
 * in order, so the bytes do not depend on the number of threads.
 *
 * Teacher: logit = bias + scale * z, with
 *   z = sum_j dense_w[j] * log1p(max(int_j, 0))   (or dense_null[j] if empty)
 *     + sum_c eff[c][rank_c]                       (or cat_null_eff[c])
 *       (eff[c][r] = amp_c exp(-r/64) N(0,1) for r < 256, else 0)
 *     + pair[rank_0][rank_1]     when cat_0, cat_1 have ranks < 16
 *     + log1p(max(int_2, 0)) * dxc[min(rank_8, 7)] when int_2, cat_8 present,
 * label ~ Bernoulli(sigmoid(logit)). scale and bias are set once per world
 * on a calibration sample so the expected positive rate is 25% and the
 * expected teacher AUC is TARGET_AUC. */
#include "data/gen.h"

#include "core/core.h"
#include "core/out.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE
#define EFF_RANKS 256      /* ranks with a learnable per-id effect */
#define PAIR_RANKS 16      /* ranks of cat_0 x cat_1 with a pair effect */
#define DXC_RANKS 8        /* ranks of cat_8 that modulate int_2 */
#define MAX_ROW_BYTES 384  /* 2 + 13*10 + 26*9 = 366 at most */
#define CAL_ROWS 8192      /* calibration sample for scale and bias */
#define TARGET_POS 0.25
#define TARGET_AUC 0.785
#define WORLD_SEED 0x7261705f67656e31ULL /* "rap_gen1" */
#define INT_CAP 100000000.0
#define LOG_TAB 1024       /* counts with a tabled log1p */

/* Criteo Kaggle-like missing rates. */
const float rap_gen_int_null[ND] = {0.45f, 0.0f,  0.21f, 0.22f, 0.03f, 0.22f, 0.04f,
                                    0.0005f, 0.04f, 0.45f, 0.04f, 0.77f, 0.22f};
const float rap_gen_cat_null[NS] = {0.0f, 0.0f, 0.034f, 0.034f, 0.0f,   0.12f,  0.0f,
                                    0.0f, 0.0f, 0.0f,   0.0f,   0.034f, 0.0f,   0.0f,
                                    0.0f, 0.034f, 0.0f, 0.0f,   0.44f,  0.44f,  0.034f,
                                    0.77f, 0.0f, 0.034f, 0.44f, 0.44f};
/* Counts: x = floor(scale * (U^(-1/alpha) - 1)), a discrete Lomax (Pareto
 * II): median scale * (2^(1/alpha) - 1), tail index alpha (small = heavy).
 * neg: probability of a small negative value (-1..-3), as Criteo's I2. */
static const float int_scale[ND] = {1.5f, 4.0f, 10.0f, 6.0f, 3000.0f, 30.0f, 3.0f,
                                    10.0f, 40.0f, 0.8f, 1.5f, 0.5f, 5.0f};
static const float int_alpha[ND] = {1.5f, 1.1f, 1.4f, 2.5f, 1.1f, 1.2f, 1.2f,
                                    2.5f, 1.5f, 2.0f, 1.6f, 1.5f, 2.0f};
static const float int_neg[ND] = {0.0f, 0.05f, 0.0f, 0.001f, 0.0f, 0.0f, 0.0f,
                                  0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};

static const int64_t card_kaggle[NS] = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};
static const int64_t card_1tb[NS] = {
    45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10,
    2209, 11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35};

/* ---------------------------------------------------------------- Zipf */

static double helper1(double x) /* log1p(x) / x */
{
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
static double helper2(double x) /* expm1(x) / x */
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}
/* H(x) = integral of h(t) = t^-s, shifted so it is smooth at s = 1. */
static double zipf_H(double s, double x)
{
    double lx = log(x);
    return helper2((1.0 - s) * lx) * lx;
}
static double zipf_h(double s, double x) { return exp(-s * log(x)); }
static double zipf_Hinv(double s, double x)
{
    double t = x * (1.0 - s);
    if (t < -1.0)
        t = -1.0;
    return exp(helper1(t) * x);
}

void rap_zipf_ri_init(rap_zipf_ri *z, int64_t first, int64_t n, double s)
{
    z->s = s;
    z->n = (double)n;
    z->m = (double)first + 1.0;
    z->h_lo = zipf_H(s, z->m + 0.5) - zipf_h(s, z->m);
    z->h_n = zipf_H(s, z->n + 0.5);
    z->sv = 2.0 - zipf_Hinv(s, zipf_H(s, 2.5) - zipf_h(s, 2.0));
}

int64_t rap_zipf_ri_draw(const rap_zipf_ri *z, uint64_t *rng)
{
    /* u uniform over the hat's range; each rank k owns a piece of length
     * h(k) ending at H(k + 0.5); u outside the pieces is rejected. */
    for (;;) {
        double u = z->h_n + rap_gen_uniform(rng) * (z->h_lo - z->h_n);
        double x = zipf_Hinv(z->s, u);
        double k = floor(x + 0.5);
        if (k < z->m)
            k = z->m;
        else if (k > z->n)
            k = z->n;
        if (k - x <= z->sv || u >= zipf_H(z->s, k + 0.5) - zipf_h(z->s, k))
            return (int64_t)k - 1;
    }
}

/* Walker/Vose alias table: slots 0..head-1 are ranks with weight (k+1)^-s,
 * slot head (if n > head) is the tail with its total weight. */
rap_status rap_zipf_init(rap_zipf *z, int64_t n, double s)
{
    memset(z, 0, sizeof *z);
    int64_t head = n < RAP_GEN_ZIPF_HEAD ? n : RAP_GEN_ZIPF_HEAD;
    int64_t slots = head + (n > head);
    z->head = (uint32_t)head;
    z->slots = (uint32_t)slots;
    if (n > head)
        rap_zipf_ri_init(&z->tail, head, n, s);
    z->table = rap_malloc(sizeof(uint32_t) * 2 * (size_t)slots, "zipf alias table");
    double *p = rap_malloc(sizeof(double) * (size_t)slots, "zipf alias table");
    uint32_t *small = rap_malloc(sizeof(uint32_t) * (size_t)slots * 2, "zipf alias table");
    if (!z->table || !p || !small) {
        rap_free(p);
        rap_free(small);
        rap_zipf_free(z);
        return RAP_ERR_NOMEM;
    }
    uint32_t *large = small + slots;
    double sum = 0;
    for (int64_t k = 0; k < head; k++)
        sum += p[k] = pow((double)(k + 1), -s);
    if (n > head)
        sum += p[head] = zipf_H(s, (double)n + 0.5) - zipf_H(s, (double)head + 0.5);
    int64_t ns = 0, nl = 0;
    for (int64_t k = 0; k < slots; k++) {
        p[k] *= (double)slots / sum;
        if (p[k] < 1.0)
            small[ns++] = (uint32_t)k;
        else
            large[nl++] = (uint32_t)k;
    }
    while (ns > 0 && nl > 0) {
        uint32_t l = small[--ns], g = large[nl - 1];
        z->table[2 * l] = (uint32_t)fmin(p[l] * 4294967296.0, 4294967295.0);
        z->table[2 * l + 1] = g;
        p[g] -= 1.0 - p[l];
        if (p[g] < 1.0) {
            nl--;
            small[ns++] = g;
        }
    }
    while (nl > 0) {
        uint32_t g = large[--nl];
        z->table[2 * g] = 0xffffffffu;
        z->table[2 * g + 1] = g;
    }
    while (ns > 0) { /* rounding leftovers: probability 1 up to rounding */
        uint32_t l = small[--ns];
        z->table[2 * l] = 0xffffffffu;
        z->table[2 * l + 1] = l;
    }
    rap_free(p);
    rap_free(small);
    return RAP_OK;
}

int64_t rap_zipf_draw(const rap_zipf *z, uint64_t *rng)
{
    uint64_t r = rap_splitmix64(rng);
    uint32_t i = (uint32_t)(((r >> 32) * (uint64_t)z->slots) >> 32);
    uint32_t k = (uint32_t)r < z->table[2 * i] ? i : z->table[2 * i + 1];
    return k < z->head ? (int64_t)k : rap_zipf_ri_draw(&z->tail, rng);
}

void rap_zipf_free(rap_zipf *z)
{
    rap_free(z->table);
    z->table = NULL;
}

/* ---------------------------------------------------------------- ids */

static uint32_t fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static uint32_t id_key(int col)
{
    return (uint32_t)rap_mix64(WORLD_SEED ^ (0x1d0000ULL + (uint64_t)col));
}

uint32_t rap_gen_id(int col, uint32_t rank)
{
    /* xor with a key and fmix32 are both bijections of 32-bit words; the
     * second round spreads the low ranks' bits over the whole id. */
    return fmix32(fmix32(rank ^ id_key(col)) + id_key(col));
}

/* ---------------------------------------------------------------- world */

typedef struct {
    int64_t card[NS];
    uint32_t key[NS];
    rap_zipf zipf[NS];
    float inv_alpha[ND];
    uint32_t null_t[ND];          /* null when a 32-bit draw < null_t */
    uint32_t neg_t[ND];           /* then negative when < null_t + neg_t */
    /* teacher, unscaled (z) */
    float dense_w[ND];
    float dense_null[ND];
    float cat_null_eff[NS];
    float eff[NS][EFF_RANKS + 1]; /* eff[c][EFF_RANKS] = 0: rare ranks */
    float pair[PAIR_RANKS][PAIR_RANKS];
    float dxc[DXC_RANKS];
    double scale, bias;           /* logit = bias + scale * z */
    float log1p_tab[LOG_TAB];     /* log1pf(v) for small counts */
} world;

static void world_free(world *w)
{
    for (int c = 0; c < NS; c++)
        rap_zipf_free(&w->zipf[c]);
}

static double normal(uint64_t *rng)
{
    double u1 = 1.0 - rap_gen_uniform(rng), u2 = rap_gen_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* One row of a block: the fields and the teacher's logit. */
typedef struct {
    int64_t ival[ND];
    bool inull[ND];
    uint32_t id[NS];
    bool cnull[NS];
} row;

/* Draws a row's features and returns the teacher's unscaled score z. */
static inline float draw_row(const world *w, uint64_t *rng, row *r)
{
    float z = 0.0f;
    float g[ND];
    for (int j = 0; j < ND; j++) {
        /* one 64-bit draw: high 32 bits pick null / negative / count, the
         * low 24 bits are the count's uniform */
        uint64_t bits = rap_splitmix64(rng);
        uint32_t hi = (uint32_t)(bits >> 32);
        if (hi < w->null_t[j]) {
            r->inull[j] = true;
            r->ival[j] = 0;
            g[j] = 0.0f;
            z += w->dense_null[j];
            continue;
        }
        r->inull[j] = false;
        int64_t v;
        if (hi - w->null_t[j] < w->neg_t[j]) {
            /* position within the band: -1 (80%), -2 (15%), -3 (5%) */
            double f = (double)(hi - w->null_t[j]) / w->neg_t[j];
            v = f < 0.8 ? -1 : f < 0.95 ? -2 : -3;
        } else {
            /* float math: 24-bit uniforms in (0, 1] reach x ~ 1e10 at
             * alpha 1.1, beyond the cap */
            float u2 = (float)((bits & 0xffffff) + 1) * 0x1.0p-24f;
            float x = int_scale[j] * (expf(-logf(u2) * w->inv_alpha[j]) - 1.0f);
            v = (int64_t)(x < (float)INT_CAP ? x : (float)INT_CAP);
        }
        r->ival[j] = v;
        g[j] = v <= 0 ? 0.0f : v < LOG_TAB ? w->log1p_tab[v] : log1pf((float)v);
        z += w->dense_w[j] * g[j];
    }
    uint32_t rank[NS];
    for (int c = 0; c < NS; c++) {
        if (rap_gen_cat_null[c] > 0.0f && rap_gen_uniform(rng) < rap_gen_cat_null[c]) {
            r->cnull[c] = true;
            rank[c] = 0xffffffffu;
            z += w->cat_null_eff[c];
            continue;
        }
        uint32_t k = (uint32_t)rap_zipf_draw(&w->zipf[c], rng);
        r->cnull[c] = false;
        rank[c] = k;
        r->id[c] = fmix32(fmix32(k ^ w->key[c]) + w->key[c]);
        z += w->eff[c][k < EFF_RANKS ? k : EFF_RANKS];
    }
    if (rank[0] < PAIR_RANKS && rank[1] < PAIR_RANKS)
        z += w->pair[rank[0]][rank[1]];
    if (!r->inull[2] && rank[8] != 0xffffffffu)
        z += g[2] * w->dxc[rank[8] < DXC_RANKS ? rank[8] : DXC_RANKS - 1];
    return z;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Expected positive rate of the teacher on the sample z, and its
 * derivative in b (into *d). */
static double cal_rate(const double *z, int n, double s, double b, double *d)
{
    double sum = 0, dsum = 0;
    for (int i = 0; i < n; i++) {
        double p = sigmoid(b + s * z[i]);
        sum += p;
        dsum += p * (1.0 - p);
    }
    *d = dsum / n;
    return sum / n;
}

/* Expected AUC of the teacher against its own labels on sorted z: pairs
 * (i, j) with i positive and j negative, weighted p_i (1 - p_j). */
static double cal_auc(const double *z, int n, double s, double b)
{
    double num = 0, negbelow = 0, P = 0, N = 0, self = 0;
    for (int i = 0; i < n;) {
        int e = i;
        double gp = 0, gn = 0;
        while (e < n && z[e] == z[i]) {
            double p = sigmoid(b + s * z[e]);
            gp += p;
            gn += 1.0 - p;
            self += p * (1.0 - p);
            e++;
        }
        num += gp * negbelow + 0.5 * gp * gn; /* includes self pairs: removed below */
        negbelow += gn;
        P += gp;
        N += gn;
        i = e;
    }
    double den = P * N - self;
    return den > 0 ? (num - 0.5 * self) / den : 0.5;
}

/* Bias giving the expected positive rate TARGET_POS: Newton's method
 * kept inside a bisection bracket (the rate is increasing in b). */
static double cal_bias(const double *z, int n, double s)
{
    double lo = -60, hi = 60, b = log(TARGET_POS / (1.0 - TARGET_POS));
    for (int it = 0; it < 100; it++) {
        double d, f = cal_rate(z, n, s, b, &d) - TARGET_POS;
        if (fabs(f) < 1e-9)
            break;
        if (f < 0)
            lo = b;
        else
            hi = b;
        double nb = d > 1e-12 ? b - f / d : 0.5 * (lo + hi);
        if (!(nb > lo && nb < hi))
            nb = 0.5 * (lo + hi);
        b = nb;
        if (hi - lo < 1e-9)
            break;
    }
    return b;
}

static rap_status world_init(world *w, const int64_t card[NS])
{
    memset(w, 0, sizeof *w);
    uint64_t rng = WORLD_SEED;
    for (int v = 0; v < LOG_TAB; v++)
        w->log1p_tab[v] = log1pf((float)v);
    for (int j = 0; j < ND; j++) {
        w->inv_alpha[j] = 1.0f / int_alpha[j];
        w->null_t[j] = (uint32_t)(rap_gen_int_null[j] * 4294967296.0);
        w->neg_t[j] = (uint32_t)(int_neg[j] * 4294967296.0);
        double mag = 0.1 + 0.4 * rap_gen_uniform(&rng);
        w->dense_w[j] = (float)(rap_gen_uniform(&rng) < 0.5 ? -mag : mag);
        w->dense_null[j] = (float)(0.3 * normal(&rng));
    }
    for (int c = 0; c < NS; c++) {
        w->card[c] = card[c];
        w->key[c] = id_key(c);
        double s = 1.05 + 0.15 * rap_gen_uniform(&rng);
        rap_status st = rap_zipf_init(&w->zipf[c], card[c], s);
        if (st != RAP_OK) {
            world_free(w);
            return st;
        }
        double amp = 0.1 + 0.9 * rap_gen_uniform(&rng);
        w->cat_null_eff[c] = (float)(0.3 * normal(&rng));
        for (int r = 0; r < EFF_RANKS; r++)
            w->eff[c][r] = (float)(amp * exp(-r / 64.0) * normal(&rng));
        w->eff[c][EFF_RANKS] = 0.0f;
    }
    for (int a = 0; a < PAIR_RANKS; a++)
        for (int b = 0; b < PAIR_RANKS; b++)
            w->pair[a][b] = (float)(2.0 * normal(&rng));
    for (int k = 0; k < DXC_RANKS; k++)
        w->dxc[k] = (float)(0.6 * normal(&rng));

    /* Calibration: scale so the expected teacher AUC is TARGET_AUC, bias so
     * the expected positive rate is TARGET_POS. Expected AUC grows with the
     * scale, so bisect on log(scale). */
    double *z = rap_malloc(sizeof(double) * CAL_ROWS, "generator calibration");
    if (!z) {
        world_free(w);
        return RAP_ERR_NOMEM;
    }
    uint64_t crng = rap_mix64(WORLD_SEED + 1);
    row r;
    for (int i = 0; i < CAL_ROWS; i++)
        z[i] = draw_row(w, &crng, &r);
    qsort(z, CAL_ROWS, sizeof *z, cmp_double);
    double lo = log(0.01), hi = log(20.0);
    for (int it = 0; it < 24; it++) {
        double mid = 0.5 * (lo + hi), s = exp(mid);
        if (cal_auc(z, CAL_ROWS, s, cal_bias(z, CAL_ROWS, s)) < TARGET_AUC)
            lo = mid;
        else
            hi = mid;
    }
    w->scale = exp(0.5 * (lo + hi));
    w->bias = cal_bias(z, CAL_ROWS, w->scale);
    rap_free(z);
    return RAP_OK;
}

/* ------------------------------------------------------ cardinalities */

rap_status rap_gen_cardinalities(const char *spec, int64_t card[NS])
{
    if (!spec || !*spec)
        return rap_fail(RAP_ERR_ARG, "cardinalities: empty spec; expected \"kaggle\", \"1tb\" "
                                     "or %d comma-separated positive integers",
                        NS);
    if (strcasecmp(spec, "kaggle") == 0) {
        memcpy(card, card_kaggle, sizeof card_kaggle);
        return RAP_OK;
    }
    if (strcasecmp(spec, "1tb") == 0) {
        memcpy(card, card_1tb, sizeof card_1tb);
        return RAP_OK;
    }
    int64_t tmp[NS];
    int n = 0;
    const char *p = spec;
    for (;;) {
        const char *start = p;
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9') {
            if (*p == '-')
                return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": value %d is negative; "
                                             "expected a positive integer",
                                spec, n + 1);
            if (n == 0 && *p != ',' && *p != 0)
                return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": expected \"kaggle\", \"1tb\" "
                                             "or %d comma-separated positive integers",
                                spec, NS);
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": value %d at column %d is not "
                                         "a positive integer",
                            spec, n + 1, (int)(start - spec) + 1);
        }
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno == ERANGE || v > RAP_GEN_MAX_CARD)
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": value %d is larger than %lld "
                                         "(ids are 32-bit)",
                            spec, n + 1, RAP_GEN_MAX_CARD);
        if (v < 1)
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": value %d is 0; expected a "
                                         "positive integer",
                            spec, n + 1);
        p = end;
        while (*p == ' ')
            p++;
        if (*p != ',' && *p != 0)
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": value %d at column %d is not "
                                         "a positive integer",
                            spec, n + 1, (int)(start - spec) + 1);
        if (n == NS)
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": more than %d values; expected "
                                         "one per categorical column",
                            spec, NS);
        tmp[n++] = v;
        if (*p == 0)
            break;
        p++; /* ',' */
    }
    if (n != NS)
        return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": %d value%s, expected %d (one per "
                                     "categorical column)",
                        spec, n, n == 1 ? "" : "s", NS);
    memcpy(card, tmp, sizeof tmp);
    return RAP_OK;
}

/* ------------------------------------------------------------- writing */

static const char hex2[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

static inline char *put_int(char *o, int64_t v)
{
    if (v < 0) {
        *o++ = '-';
        v = -v;
    }
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *o++ = tmp[--n];
    return o;
}

static inline char *put_hex(char *o, uint32_t id)
{
    memcpy(o, hex2 + 2 * (id >> 24), 2);
    memcpy(o + 2, hex2 + 2 * ((id >> 16) & 255), 2);
    memcpy(o + 4, hex2 + 2 * ((id >> 8) & 255), 2);
    memcpy(o + 6, hex2 + 2 * (id & 255), 2);
    return o + 8;
}

/* One slot of a round: a block's text and, for gzip, its member. */
typedef struct {
    char *text;       /* (BLOCK_ROWS * MAX_ROW_BYTES) */
    size_t text_len;
    unsigned char *z; /* (z_cap) gzip member, or NULL */
    size_t z_cap, z_len;
    z_stream zs;
    bool zs_ready;
    int64_t positives;
    int zerr;         /* zlib status when compression failed, else 0 */
} slot;

typedef struct {
    const world *w;
    uint64_t seed;
    int64_t rows;
    int64_t first_block;   /* block of slot 0 in this round */
    slot *slots;
    float *score;          /* (keep) teacher logit per row */
    float *label;          /* (keep) */
    int64_t keep;
    bool gz;
} job;

static void make_block(void *ctx, int64_t i)
{
    job *J = ctx;
    slot *sl = &J->slots[i];
    int64_t block = J->first_block + i;
    int64_t r0 = block * RAP_GEN_BLOCK_ROWS;
    int64_t nr = J->rows - r0 < RAP_GEN_BLOCK_ROWS ? J->rows - r0 : RAP_GEN_BLOCK_ROWS;
    uint64_t rng = rap_mix64(rap_mix64(J->seed) + (uint64_t)block * 0xd1b54a32d192ed03ULL);
    const world *w = J->w;
    char *o = sl->text;
    int64_t pos = 0;
    row r;
    for (int64_t k = 0; k < nr; k++) {
        float z = draw_row(w, &rng, &r);
        float logit = (float)(w->bias + w->scale * z);
        float p = 1.0f / (1.0f + expf(-logit));
        int y = (float)(rap_splitmix64(&rng) >> 40) * 0x1.0p-24f < p;
        pos += y;
        int64_t at = r0 + k;
        if (at < J->keep) {
            J->score[at] = logit;
            J->label[at] = (float)y;
        }
        *o++ = (char)('0' + y);
        for (int j = 0; j < ND; j++) {
            *o++ = '\t';
            if (!r.inull[j])
                o = put_int(o, r.ival[j]);
        }
        for (int c = 0; c < NS; c++) {
            *o++ = '\t';
            if (!r.cnull[c])
                o = put_hex(o, r.id[c]);
        }
        *o++ = '\n';
    }
    sl->text_len = (size_t)(o - sl->text);
    sl->positives = pos;
    sl->zerr = 0;
    if (J->gz) {
        z_stream *zs = &sl->zs;
        int e = deflateReset(zs);
        if (e == Z_OK) {
            zs->next_in = (unsigned char *)sl->text;
            zs->avail_in = (uInt)sl->text_len;
            zs->next_out = sl->z;
            zs->avail_out = (uInt)sl->z_cap;
            e = deflate(zs, Z_FINISH);
            e = e == Z_STREAM_END ? Z_OK : (e == Z_OK ? Z_BUF_ERROR : e);
        }
        sl->zerr = e;
        sl->z_len = sl->z_cap - zs->avail_out;
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static rap_status write_all(FILE *f, const void *buf, size_t n, const char *path)
{
    if (n && fwrite(buf, 1, n, f) != n)
        return rap_fail(RAP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return RAP_OK;
}

/* The writer thread: writes one finished group of slots while the pool
 * fills the other. The error message is made on the writer's thread, so it
 * is copied into msg for the caller. */
typedef struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    FILE *f;
    const char *path;
    bool gz;
    slot *group;       /* group to write, NULL when idle */
    int64_t n;         /* slots in it */
    bool quit;
    rap_status st;     /* first failure */
    char msg[512];
} writer;

static void *writer_main(void *arg)
{
    writer *wr = arg;
    pthread_mutex_lock(&wr->mu);
    for (;;) {
        while (!wr->group && !wr->quit)
            pthread_cond_wait(&wr->cv, &wr->mu);
        if (!wr->group)
            break;
        slot *g = wr->group;
        int64_t n = wr->n;
        bool failed = wr->st != RAP_OK;
        pthread_mutex_unlock(&wr->mu);
        rap_status st = RAP_OK;
        for (int64_t i = 0; i < n && !failed && st == RAP_OK; i++)
            st = wr->gz ? write_all(wr->f, g[i].z, g[i].z_len, wr->path)
                        : write_all(wr->f, g[i].text, g[i].text_len, wr->path);
        pthread_mutex_lock(&wr->mu);
        if (st != RAP_OK && wr->st == RAP_OK) {
            wr->st = st;
            snprintf(wr->msg, sizeof wr->msg, "%s", rap_last_error());
        }
        wr->group = NULL;
        pthread_cond_broadcast(&wr->cv);
    }
    pthread_mutex_unlock(&wr->mu);
    return NULL;
}

/* Waits until the writer is idle; returns its status (message restored on
 * this thread). */
static rap_status writer_wait(writer *wr)
{
    pthread_mutex_lock(&wr->mu);
    while (wr->group)
        pthread_cond_wait(&wr->cv, &wr->mu);
    rap_status st = wr->st;
    pthread_mutex_unlock(&wr->mu);
    if (st != RAP_OK)
        rap_fail(st, "%s", wr->msg);
    return st;
}

static void writer_submit(writer *wr, slot *group, int64_t n)
{
    pthread_mutex_lock(&wr->mu);
    wr->group = group;
    wr->n = n;
    pthread_cond_broadcast(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
}

static rap_status slots_init(slot *sl, int n, bool gz, const char *path)
{
    size_t text_cap = (size_t)RAP_GEN_BLOCK_ROWS * MAX_ROW_BYTES;
    for (int i = 0; i < n; i++) {
        if (!(sl[i].text = rap_malloc(text_cap, "generator block text")))
            return RAP_ERR_NOMEM;
        if (gz) {
            if (deflateInit2(&sl[i].zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
                return rap_fail(RAP_ERR_NOMEM, "%s: cannot start zlib compression", path);
            sl[i].zs_ready = true;
            sl[i].z_cap = deflateBound(&sl[i].zs, (uLong)text_cap) + 64;
            if (!(sl[i].z = rap_malloc(sl[i].z_cap, "generator block gzip")))
                return RAP_ERR_NOMEM;
        }
    }
    return RAP_OK;
}

static void slots_free(slot *sl, int n)
{
    for (int i = 0; sl && i < n; i++) {
        rap_free(sl[i].text);
        rap_free(sl[i].z);
        if (sl[i].zs_ready)
            deflateEnd(&sl[i].zs);
    }
    rap_free(sl);
}

/* Writes the rows in rounds of up to n_slots blocks: the pool fills one
 * group of slots while the writer thread writes the previous group, in
 * block order. */
static rap_status gen_run(const rap_gen_config *cfg, const world *w, FILE *f, const char *path,
                          bool gz, rap_gen_result *res)
{
    rap_status st = RAP_OK;
    rap_pool *pool = NULL;
    RAP_TRY(rap_pool_create(cfg->threads, &pool));
    int64_t nblocks = (cfg->rows + RAP_GEN_BLOCK_ROWS - 1) / RAP_GEN_BLOCK_ROWS;
    /* 4 blocks per thread per round keeps the threads busy past the
     * round's barrier; capped (at >= 1 per thread) to bound memory: each
     * slot holds 3 MB of text, and there are two groups. */
    int nt = rap_pool_threads(pool);
    int n_slots = 4 * nt < 32 ? 4 * nt : (nt > 32 ? nt : 32);
    if (n_slots > nblocks)
        n_slots = nblocks > 0 ? (int)nblocks : 1;
    job J = {.w = w, .seed = cfg->seed, .rows = cfg->rows, .gz = gz};
    J.keep = cfg->rows < RAP_GEN_AUC_MAX_ROWS ? cfg->rows : RAP_GEN_AUC_MAX_ROWS;
    J.score = rap_malloc(sizeof(float) * (size_t)J.keep, "teacher scores");
    J.label = rap_malloc(sizeof(float) * (size_t)J.keep, "teacher labels");
    slot *all = rap_calloc(sizeof(slot) * 2 * (size_t)n_slots, "generator slots");
    writer wr = {.f = f, .path = path, .gz = gz, .st = RAP_OK};
    bool started = false;
    if (!J.score || !J.label || !all) {
        st = RAP_ERR_NOMEM;
        goto done;
    }
    if ((st = slots_init(all, 2 * n_slots, gz, path)) != RAP_OK)
        goto done;
    if (nblocks == 0 && gz) {
        /* no rows: still an empty but valid gzip file */
        J.slots = all;
        J.rows = 0;
        make_block(&J, 0);
        if (all[0].zerr != Z_OK) {
            st = rap_fail(RAP_ERR_INTERNAL, "%s: zlib error %d", path, all[0].zerr);
            goto done;
        }
        if ((st = write_all(f, all[0].z, all[0].z_len, path)) != RAP_OK)
            goto done;
    }
    pthread_mutex_init(&wr.mu, NULL);
    pthread_cond_init(&wr.cv, NULL);
    if (pthread_create(&wr.th, NULL, writer_main, &wr) != 0) {
        pthread_mutex_destroy(&wr.mu);
        pthread_cond_destroy(&wr.cv);
        st = rap_fail(RAP_ERR_NOMEM, "%s: cannot start the writer thread", path);
        goto done;
    }
    started = true;
    for (int64_t b0 = 0, round = 0; b0 < nblocks; b0 += n_slots, round++) {
        int64_t nb = nblocks - b0 < n_slots ? nblocks - b0 : n_slots;
        J.first_block = b0;
        /* the writer holds at most the other group (waited for below) */
        J.slots = all + (round & 1) * n_slots;
        rap_pool_for(pool, nb, make_block, &J);
        for (int64_t i = 0; i < nb; i++) {
            if (J.slots[i].zerr != Z_OK) {
                st = rap_fail(RAP_ERR_INTERNAL, "%s: zlib error %d in block %lld", path,
                              J.slots[i].zerr, (long long)(b0 + i));
                goto done;
            }
            res->bytes += (int64_t)J.slots[i].text_len;
            res->positives += J.slots[i].positives;
        }
        if ((st = writer_wait(&wr)) != RAP_OK)
            goto done;
        writer_submit(&wr, J.slots, nb);
    }
    if ((st = writer_wait(&wr)) != RAP_OK)
        goto done;
    res->rows = cfg->rows;
    res->teacher_auc = rap_auc(J.score, J.label, J.keep);
done:
    if (started) {
        writer_wait(&wr);
        pthread_mutex_lock(&wr.mu);
        wr.quit = true;
        pthread_cond_broadcast(&wr.cv);
        pthread_mutex_unlock(&wr.mu);
        pthread_join(wr.th, NULL);
        pthread_mutex_destroy(&wr.mu);
        pthread_cond_destroy(&wr.cv);
    }
    slots_free(all, 2 * n_slots);
    rap_free(J.score);
    rap_free(J.label);
    rap_pool_free(pool);
    if (st != RAP_OK) {
        res->rows = res->positives = res->bytes = 0;
        res->teacher_auc = NAN;
    }
    return st;
}

rap_status rap_gen_write(const rap_gen_config *cfg, rap_gen_result *res)
{
    rap_gen_result r0 = {0};
    r0.teacher_auc = NAN;
    if (res)
        *res = r0;
    if (!cfg || !res)
        return rap_fail(RAP_ERR_ARG, "rap_gen_write: config and result must not be NULL");
    if (!cfg->out || !*cfg->out)
        return rap_fail(RAP_ERR_ARG, "gen: no output path (use \"-\" for stdout)");
    if (cfg->rows < 0)
        return rap_fail(RAP_ERR_ARG, "gen: rows must be >= 0, got %lld", (long long)cfg->rows);
    if (cfg->threads < 0)
        return rap_fail(RAP_ERR_ARG, "gen: threads must be >= 0 (0 = all cores), got %d",
                        cfg->threads);
    if (cfg->schema)
        return rap_gen_write_schema(cfg, res);
    for (int c = 0; c < NS; c++)
        if (cfg->card[c] < 1 || cfg->card[c] > RAP_GEN_MAX_CARD)
            return rap_fail(RAP_ERR_ARG, "gen: cardinality of cat_%d must be in [1, %lld], got %lld",
                            c, RAP_GEN_MAX_CARD, (long long)cfg->card[c]);

    world *w = rap_malloc(sizeof *w, "generator world");
    if (!w)
        return RAP_ERR_NOMEM;
    rap_status st = world_init(w, cfg->card);
    if (st != RAP_OK) {
        rap_free(w);
        return st;
    }
    const char *path = cfg->out;
    bool gz = strcmp(path, "-") != 0 && ends_with(path, ".gz");
    rap_out_opts oo = {.dash_is_stdout = true};
    rap_out *o = NULL;
    st = rap_out_open(path, &oo, &o);
    if (st == RAP_OK)
        st = gen_run(cfg, w, rap_out_file(o), path, gz, res);
    world_free(w);
    rap_free(w);
    return o ? rap_out_close(o, st) : st;
}
