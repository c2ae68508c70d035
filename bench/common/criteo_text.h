/*
 * bench/common/criteo_text.h -- synthetic Criteo TSV rows for the parse
 * benchmarks (bench/parse.c, bench/parse_gpu.c), made in one place so that
 * both time the same text.
 *
 * The shape: label 25 % positive; 13 integer counts, mostly small
 * (log-uniform magnitudes), int_1 with some small negatives, 4 .. 12 %
 * nulls a column; 26 categoricals as 8 lowercase hex digits, ids drawn
 * from the Kaggle cardinalities with a skew towards small ids, 3 .. 22 %
 * nulls a column. Row i depends on i alone, so any range of rows can be
 * made in any order.
 *
 *   char buf[BENCH_CRITEO_ROW_MAX * 2], *p = buf;
 *   p = bench_criteo_row(p, 0, 0);
 *   p = bench_criteo_row(p, 1, 0);      // buf .. p: two lines
 */
#ifndef RAP_BENCH_CRITEO_TEXT_H
#define RAP_BENCH_CRITEO_TEXT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most bytes bench_criteo_row writes for one row, '\n' included. */
#define BENCH_CRITEO_ROW_MAX 400

/* Writes row i (one line ending in '\n', no NUL) at p and returns its end.
 * bad: malformed rows per mille (0 .. 1000): row i is malformed when its
 * hash says so, in one of five ways (an integer with a letter, a category
 * of 9 hex digits, 41 fields, a binary byte, label 2). With bad = 0 every
 * row is well formed. p must have BENCH_CRITEO_ROW_MAX bytes. Cannot fail. */
char *bench_criteo_row(char *p, int64_t i, int64_t bad);

#ifdef __cplusplus
}
#endif

#endif /* RAP_BENCH_CRITEO_TEXT_H */
