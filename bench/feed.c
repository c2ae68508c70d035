/*
 * bench/feed.c -- how fast the row feed (src/run/rowfeed.c) hands out
 * training batches on the CPU alone: rows/s through rap_rowfeed_next.
 *
 * Writes a synthetic Criteo file (rap_gen_write, Kaggle cardinalities) to
 * /tmp once, then for each hold-out fraction given runs a feed with the
 * given parser threads, batch B and pool P over the file (passes passes),
 * releasing each batch at once, and prints rows/s. The first pass also
 * warms the page cache.
 *
 *   build/bench_feed [--rows N] [--threads N] [--batch B] [--pool P]
 *                    [--passes N] [--holdout F] [--per-row]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "run/rowfeed.h"
#include "rap.h"

/* Runs one feed over path; prints and returns rows/s (< 0 on failure). */
static double run_feed(const char *path, int threads, int64_t batch, int pool, int64_t passes,
                       double holdout, bool per_row)
{
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = path;
    fc.reader.threads = threads;
    fc.batch_rows = batch;
    fc.n_batches = pool;
    fc.holdout = holdout;
    fc.passes = passes;
    fc.per_row = per_row;
    rap_rowfeed *f;
    if (rap_rowfeed_create(&fc, &f) != RAP_OK) {
        fprintf(stderr, "bench_feed: %s\n", rap_last_error());
        return -1;
    }
    double t0 = rap_now();
    int64_t rows = 0;
    rap_row_batch *rb;
    rap_status st;
    while ((st = rap_rowfeed_next(f, &rb, NULL)) == RAP_OK && rb) {
        rows += rb->batch.rows;
        rap_rowfeed_release(f, rb);
    }
    double dt = rap_now() - t0;
    rap_rowfeed_free(f, NULL);
    if (st != RAP_OK) {
        fprintf(stderr, "bench_feed: %s\n", rap_last_error());
        return -1;
    }
    double rps = (double)rows / dt;
    printf("threads %d  B %lld  P %d  holdout %.2f  %s: %lld rows in %.3f s = %.0f rows/s\n",
           threads, (long long)batch, pool, holdout, per_row ? "per-row" : "bulk",
           (long long)rows, dt, rps);
    return rps;
}

int main(int argc, char **argv)
{
    int64_t rows = 1000000, batch = 4096, passes = 3;
    int threads = 2, pool = 8;
    double holdout = -1;
    bool per_row = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--pool") && i + 1 < argc)
            pool = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--holdout") && i + 1 < argc)
            holdout = atof(argv[++i]);
        else if (!strcmp(argv[i], "--per-row"))
            per_row = true;
        else {
            fprintf(stderr, "usage: bench_feed [--rows N] [--threads N] [--batch B] [--pool P] "
                            "[--passes N] [--holdout F] [--per-row]\n");
            return 2;
        }
    }
    char path[256];
    snprintf(path, sizeof path, "/tmp/rap_bench_feed_%lld.tsv", (long long)rows);
    if (access(path, R_OK) != 0) {
        rap_gen_config g;
        memset(&g, 0, sizeof g);
        g.rows = rows;
        g.seed = 7;
        g.out = path;
        rap_gen_result r;
        if (rap_gen_cardinalities("kaggle", g.card) != RAP_OK || rap_gen_write(&g, &r) != RAP_OK) {
            fprintf(stderr, "bench_feed: %s\n", rap_last_error());
            return 1;
        }
    }
    double fs[2] = {0.0, 0.1};
    int nf = 2;
    if (holdout >= 0) {
        fs[0] = holdout;
        nf = 1;
    }
    for (int i = 0; i < nf; i++)
        if (run_feed(path, threads, batch, pool, passes, fs[i], per_row) < 0)
            return 1;
    return 0;
}
