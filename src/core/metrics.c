/* metrics.c -- exact ROC AUC.
 *
 * rap_auc splits the scores by class, sorts each class's scores with an LSD
 * radix sort on their float bits (3 passes of 11 bits), then merges the two
 * sorted lists: each positive scores 1 for every negative below it and 1/2
 * for every negative with an equal score (the average-rank method). Memory:
 * 4 bytes per row for the keys plus 4 bytes per row of the larger class as
 * scratch, so millions of rows are cheap; time is linear in n. */
#include "core/bits.h"
#include "core/core.h"

#include <math.h>
#include <string.h>

/* Maps a float's bits to an unsigned key whose order is the float order:
 * negatives are flipped, positives get the sign bit set. -0 and +0 map to
 * the same key (they are equal scores). NaNs sort above +inf (positive NaN)
 * or below -inf (negative NaN), by their bits. */
static inline uint32_t float_key(float x)
{
    if (x == 0.0f)
        x = 0.0f;
    const uint32_t u = rap_f32_bits(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Sorts a[0..n) ascending; tmp holds n scratch keys. */
static void radix_sort_u32(uint32_t *a, uint32_t *tmp, int64_t n)
{
    static const int shift[3] = {0, 11, 22};
    uint32_t *src = a, *dst = tmp;
    for (int pass = 0; pass < 3; pass++) {
        int64_t count[2048];
        memset(count, 0, sizeof count);
        int sh = shift[pass];
        for (int64_t i = 0; i < n; i++)
            count[(src[i] >> sh) & 2047]++;
        int64_t sum = 0;
        for (int d = 0; d < 2048; d++) {
            int64_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i] >> sh) & 2047]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    /* 3 passes: the result is in tmp; copy back. */
    memcpy(a, src, sizeof *a * (size_t)n);
}

/* Exact ROC AUC of score against label (label > 0.5 is positive). Ties
 * count 1/2. Returns NaN when a class is absent, n <= 0, or memory for the
 * keys cannot be had (the message is then the last error). */
double rap_auc(const float *score, const float *label, int64_t n)
{
    if (n <= 0 || !score || !label)
        return NAN;
    int64_t npos = 0;
    for (int64_t i = 0; i < n; i++)
        npos += label[i] > 0.5f;
    int64_t nneg = n - npos;
    if (npos == 0 || nneg == 0)
        return NAN;
    int64_t big = npos > nneg ? npos : nneg;
    uint32_t *keys = rap_malloc(sizeof(uint32_t) * (size_t)(n + big), "auc sort keys");
    if (!keys)
        return NAN;
    uint32_t *pos = keys, *neg = keys + npos, *tmp = keys + n;
    int64_t ip = 0, in = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t k = float_key(score[i]);
        if (label[i] > 0.5f)
            pos[ip++] = k;
        else
            neg[in++] = k;
    }
    radix_sort_u32(pos, tmp, npos);
    radix_sort_u32(neg, tmp, nneg);
    /* Twice the count of (positive, negative) pairs ordered right, with a
     * tie counting 1: at most 2 * npos * nneg, within uint64 for any n that
     * fits in memory. */
    uint64_t twice = 0;
    int64_t below = 0, j = 0;
    for (int64_t i = 0; i < npos;) {
        uint32_t k = pos[i];
        int64_t cp = 0;
        while (i < npos && pos[i] == k) {
            cp++;
            i++;
        }
        while (below < nneg && neg[below] < k)
            below++;
        j = below;
        while (j < nneg && neg[j] == k)
            j++;
        twice += (uint64_t)cp * (uint64_t)(2 * below + (j - below));
    }
    rap_free(keys);
    return (double)twice / (2.0 * (double)npos * (double)nneg);
}
