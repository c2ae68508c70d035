/*
 * bench/parse.c -- how fast the Criteo TSV reader turns text into batches.
 *
 * Writes a synthetic Criteo-shaped file (bench/common/criteo_text.h: label
 * 25 % positive; 13 integer counts, mostly small, some negative; 26
 * categoricals as 8 lowercase hex digits drawn from the Kaggle
 * cardinalities with a skew; about 10 % nulls) to /tmp, and a gzip copy,
 * then reads each with 1, 2, 4 ... N parser threads and prints: threads,
 * rows/s, MB/s (uncompressed text, 1 MB = 1e6 bytes), cores busy (process
 * CPU time / wall time) and MB/s per busy core. First it times the line
 * parser alone on one core (thread CPU time, so other load on the machine
 * does not count). Ends with the peak RSS, to show that memory does not
 * follow the input size. --json FILE writes the same as JSON.
 *
 *   build/bench_parse [--rows N] [--threads N] [--gzip|--no-gzip]
 *                     [--out PATH] [--json FILE] [--keep]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <time.h>

#include "common/criteo_text.h"
#include "core/core.h"
#include "core/options.h"
#include "core/out.h"
#include "data/parse.h"

typedef struct {
    int64_t rows;
    int64_t threads;
    int64_t batch;
    bool gzip;
    bool keep;
    char out[RAP_OPT_STR];
    char json[RAP_OPT_STR];
} settings;

#define CMD 1u
static const rap_opt OPTS[] = {
    {"rows", RAP_OPT_INT, CMD, offsetof(settings, rows), "1000000", 1, 1e10, NULL, "N",
     "rows of the synthetic file (about 250 bytes each)"},
    {"threads", RAP_OPT_INT, CMD, offsetof(settings, threads), "0", 0, 256, NULL, "N",
     "most parser threads to try (0 = all cores); runs 1, 2, 4 ... N"},
    {"batch", RAP_OPT_INT, CMD, offsetof(settings, batch), "8192", 1, 1e7, NULL, "N",
     "rows per batch handed out"},
    {"gzip", RAP_OPT_BOOL, CMD, offsetof(settings, gzip), "true", 0, 0, NULL, NULL,
     "also write and read a gzip copy"},
    {"keep", RAP_OPT_BOOL, CMD, offsetof(settings, keep), "false", 0, 0, NULL, NULL,
     "keep the files written"},
    {"out", RAP_OPT_STRING, CMD, offsetof(settings, out), "/tmp/rap_bench_parse.tsv", 0, 0,
     NULL, "PATH", "synthetic file to write (the gzip copy gets .gz appended)"},
    {"json", RAP_OPT_STRING, CMD, offsetof(settings, json), "", 0, 0, NULL, "FILE",
     "also write the results as JSON to FILE"},
};
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

/* Opens a gzip stream (level 1) on o's file: a dup, closed by gzclose
 * before o's commit or abort. NULL on failure (the message is printed). */
static gzFile gz_on(rap_out *o, const char *path)
{
    int fd = dup(rap_out_fd(o));
    gzFile g = fd >= 0 ? gzdopen(fd, "wb1") : NULL;
    if (!g) {
        if (fd >= 0)
            close(fd);
        fprintf(stderr, "%s: cannot start gzip\n", path);
    }
    return g;
}

/* Writes rows to path (and a gzip copy when gz_path), both through
 * core/out (a temporary renamed at the end). *bytes: text bytes. */
static int write_data(const char *path, const char *gz_path, int64_t rows, int64_t *bytes)
{
    rap_out *o = NULL, *og = NULL;
    gzFile g = NULL;
    size_t cap = 4 << 20;
    char *buf = malloc(cap + 4096);
    rap_status st = buf ? rap_out_open(path, NULL, &o) : RAP_ERR_NOMEM;
    if (st == RAP_OK && gz_path && (st = rap_out_open(gz_path, NULL, &og)) == RAP_OK &&
        !(g = gz_on(og, gz_path)))
        st = RAP_ERR_IO;
    *bytes = 0;
    int64_t i = 0;
    while (st == RAP_OK && i < rows) {
        char *p = buf;
        while (i < rows && (size_t)(p - buf) < cap)
            p = bench_criteo_row(p, i++, 0);
        size_t n = (size_t)(p - buf);
        if (fwrite(buf, 1, n, rap_out_file(o)) != n ||
            (g && gzwrite(g, buf, (unsigned)n) != (int)n))
            st = rap_fail(RAP_ERR_IO, "%s: write failed", path);
        *bytes += (int64_t)n;
    }
    free(buf);
    if (g && gzclose(g) != Z_OK && st == RAP_OK)
        st = rap_fail(RAP_ERR_IO, "%s: gzip write failed", gz_path);
    st = rap_out_close(o, st);
    if (og)
        st = rap_out_close(og, st);
    if (st != RAP_OK)
        fprintf(stderr, "%s\n", rap_last_error());
    return st != RAP_OK;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The parser alone: the file in 1 MiB chunks of whole lines, parsed on this
 * thread. Returns MB/s of thread CPU time (0 on failure); *rows_s too. */
static double parse_only(const char *path, int64_t rows, double *rows_s)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 20;
    char *buf = malloc(cap + 1);
    rap_parsed o;
    memset(&o, 0, sizeof o);
    size_t have = 0, total = 0;
    int64_t used = 0;
    double cpu = 0;
    for (;;) {
        size_t got = f ? fread(buf + have, 1, cap - have, f) : 0;
        have += got;
        if (have == 0)
            break;
        size_t cut = have;
        while (cut > 0 && buf[cut - 1] != '\n')
            cut--;
        if (cut == 0)
            break; /* no whole line: not our file */
        double t0 = thread_cpu();
        if (rap_parse_chunk(buf, cut, 65536, &o) != RAP_OK)
            break;
        cpu += thread_cpu() - t0;
        used += o.n_used;
        total += cut;
        memmove(buf, buf + cut, have - cut);
        have -= cut;
    }
    if (f)
        fclose(f);
    free(buf);
    rap_parsed_free(&o);
    if (used != rows || cpu <= 0) {
        fprintf(stderr, "parse only: %lld rows, expected %lld\n", (long long)used, (long long)rows);
        return 0;
    }
    *rows_s = (double)used / cpu;
    return (double)total / 1e6 / cpu;
}

typedef struct {
    const char *input;
    int threads;
    double seconds, rows_per_s, mb_per_s, cores_busy, mb_per_s_core;
} result;

/* Reads path with threads parser threads into batches of b->cap rows. */
static int run(const char *path, const char *kind, int threads, rap_batch *b, int64_t rows,
               int64_t bytes, result *res)
{
    rap_reader_config c = rap_reader_defaults();
    c.input = path;
    c.threads = threads;
    rap_reader *rd;
    double c0 = cpu_seconds(), t0 = rap_now();
    if (rap_reader_open(&c, &rd) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return 1;
    }
    int64_t got = 0;
    rap_status s;
    while ((s = rap_reader_next(rd, b)) == RAP_OK && b->rows > 0)
        got += b->rows;
    rap_reader_stats st;
    rap_reader_get_stats(rd, &st);
    rap_reader_close(rd);
    double dt = rap_now() - t0, cpu = cpu_seconds() - c0;
    if (s != RAP_OK || got != rows || st.rows_rejected != 0 || st.bytes_read != bytes) {
        fprintf(stderr, "%s: read %lld rows (%lld rejected), expected %lld: %s\n", path,
                (long long)got, (long long)st.rows_rejected, (long long)rows, rap_last_error());
        return 1;
    }
    res->input = kind;
    res->threads = threads;
    res->seconds = dt;
    res->rows_per_s = (double)rows / dt;
    res->mb_per_s = (double)bytes / 1e6 / dt;
    res->cores_busy = cpu / dt;
    res->mb_per_s_core = res->mb_per_s / (res->cores_busy > 0 ? res->cores_busy : 1);
    printf("%-6s %7d %12.0f %9.1f %10.2f %12.1f\n", kind, threads, res->rows_per_s,
           res->mb_per_s, res->cores_busy, res->mb_per_s_core);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    settings set;
    rap_opts_defaults(OPTS, NOPTS, CMD, &set);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_parse [options]\n");
            rap_opts_usage(OPTS, NOPTS, CMD, stdout);
            return 0;
        }
    if (rap_opts_parse(OPTS, NOPTS, CMD, argc - 1, argv + 1, &set) != RAP_OK) {
        fprintf(stderr, "bench_parse: %s\n", rap_last_error());
        return 2;
    }
    int cores = rap_ncores();
    int maxt = set.threads ? (int)set.threads : cores;
    rap_opts_print(OPTS, NOPTS, CMD, &set, "  ", stdout);
    char gz[RAP_OPT_STR + 8];
    snprintf(gz, sizeof gz, "%s.gz", set.out);
    int64_t bytes;
    double t0 = rap_now();
    if (write_data(set.out, set.gzip ? gz : NULL, set.rows, &bytes))
        return 1;
    printf("wrote %lld rows, %.1f MB (%.1f bytes/row) to %s%s%s in %.1f s; %d cores\n",
           (long long)set.rows, (double)bytes / 1e6, (double)bytes / (double)set.rows, set.out,
           set.gzip ? " and " : "", set.gzip ? gz : "", rap_now() - t0, cores);
    double po_rows = 0, po_mb = parse_only(set.out, set.rows, &po_rows);
    if (po_mb <= 0)
        return 1;
    printf("parser alone, one core: %.0f rows/s, %.1f MB/s (per second of CPU time)\n",
           po_rows, po_mb);
    rap_batch b;
    if (rap_batch_create(&b, rap_schema_criteo(), set.batch, false) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return 1;
    }
    result res[64];
    int nres = 0;
    printf("%-6s %7s %12s %9s %10s %12s\n", "input", "threads", "rows/s", "MB/s", "cores busy",
           "MB/s/core");
    for (int pass = 0; pass < (set.gzip ? 2 : 1); pass++) {
        for (int th = 1;; th *= 2) {
            if (th > maxt)
                th = maxt;
            if (nres < 64 && run(pass ? gz : set.out, pass ? "gzip" : "plain", th, &b, set.rows,
                                 bytes, &res[nres]))
                return 1;
            nres++;
            if (th == maxt)
                break;
        }
    }
    rap_batch_free(&b);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = (double)ru.ru_maxrss / 1024.0;
    printf("peak RSS %.1f MB (input %.1f MB)\n", rss_mb, (double)bytes / 1e6);
    if (set.json[0]) {
        rap_out *o;
        if (rap_out_open(set.json, NULL, &o) != RAP_OK) {
            fprintf(stderr, "%s\n", rap_last_error());
            return 1;
        }
        FILE *f = rap_out_file(o);
        fprintf(f, "{\n  \"bench\": \"parse\",\n  \"rows\": %lld,\n  \"bytes\": %lld,\n"
                   "  \"cores\": %d,\n  \"batch\": %lld,\n  \"peak_rss_mb\": %.1f,\n"
                   "  \"parser_alone\": {\"rows_per_cpu_s\": %.0f, \"mb_per_cpu_s\": %.2f},\n"
                   "  \"results\": [\n",
                (long long)set.rows, (long long)bytes, cores, (long long)set.batch, rss_mb,
                po_rows, po_mb);
        for (int i = 0; i < nres; i++)
            fprintf(f,
                    "    {\"input\": \"%s\", \"threads\": %d, \"seconds\": %.4f, "
                    "\"rows_per_s\": %.0f, \"mb_per_s\": %.2f, \"cores_busy\": %.3f, "
                    "\"mb_per_s_per_core\": %.2f}%s\n",
                    res[i].input, res[i].threads, res[i].seconds, res[i].rows_per_s,
                    res[i].mb_per_s, res[i].cores_busy, res[i].mb_per_s_core,
                    i + 1 < nres ? "," : "");
        fprintf(f, "  ]\n}\n");
        if (rap_out_commit(o) != RAP_OK) {
            fprintf(stderr, "%s\n", rap_last_error());
            return 1;
        }
        printf("results written to %s\n", set.json);
    }
    if (!set.keep) {
        remove(set.out);
        if (set.gzip)
            remove(gz);
    }
    return 0;
}
