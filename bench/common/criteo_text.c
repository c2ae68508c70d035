/*
 * bench/common/criteo_text.c -- synthetic Criteo TSV rows for the parse
 * benchmarks (criteo_text.h).
 */
#include "criteo_text.h"

#include "core/core.h"

/* Criteo Kaggle cardinalities (docs/DATA.md). */
static const int64_t CARD[26] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3,
                                 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652,
                                 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

/* Writes v in decimal at p; returns the end. */
static char *put_int(char *p, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)(-v) : (uint64_t)v;
    if (v < 0)
        *p++ = '-';
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *p++ = tmp[--n];
    return p;
}

char *bench_criteo_row(char *p, int64_t i, int64_t bad)
{
    static const char HEX[] = "0123456789abcdef";
    char *p0 = p;
    uint64_t s = (uint64_t)i * 0x2545f4914f6cdd1dULL + 12345;
    uint64_t z = rap_splitmix64(&s);
    int fault = (int)(rap_mix64((uint64_t)i) % 1000) < bad ? (int)(z >> 40) % 5 + 1 : 0;
    *p++ = (z % 4 == 0) ? '1' : '0';
    for (int j = 0; j < 13; j++) {
        z = rap_splitmix64(&s);
        *p++ = '\t';
        if (z % 100 < (uint64_t)(4 + 2 * (j % 5)))
            continue; /* null: 4 .. 12 % per column */
        int bits = (int)((z >> 8) % 14); /* log-uniform magnitudes */
        int64_t v = (int64_t)((z >> 20) & ((1ULL << bits) - 1));
        if (j == 1 && (z & 0x80000) && v < 4)
            v = -v; /* int_1 holds small negatives */
        p = put_int(p, v);
        if (fault == 1 && j == 5)
            *p++ = 'x'; /* not an integer */
    }
    for (int j = 0; j < 26; j++) {
        z = rap_splitmix64(&s);
        *p++ = '\t';
        if (z % 100 < (uint64_t)(3 + (j * 7) % 20) && !(fault == 2 && j == 9))
            continue; /* null: 3 .. 22 % per column */
        /* skewed id: the square of a uniform number favours small ids */
        double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        uint64_t id = (uint64_t)(u * u * (double)CARD[j]);
        uint32_t h = (uint32_t)rap_mix64(id * 131 + (uint64_t)j);
        for (int k = 7; k >= 0; k--)
            *p++ = HEX[(h >> (4 * k)) & 15];
        if (fault == 2 && j == 9)
            *p++ = '0'; /* 9 hex digits */
    }
    if (fault == 3)
        *p++ = '\t'; /* 41 fields */
    if (fault == 4)
        p0[(p - p0) / 2] = 0x01; /* binary */
    if (fault == 5)
        p0[0] = '2'; /* label */
    *p++ = '\n';
    return p;
}
