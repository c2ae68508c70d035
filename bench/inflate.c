/*
 * bench/inflate.c -- the host side of reading raw logs: how fast gzip is
 * inflated, and how many rows a second one core turns from a file into
 * batches of whole lines (read, inflate, find the newlines: all the host
 * does when the GPU parses the fields).
 *
 * Writes --rows rows with rap's own generator (rap_gen_write, Kaggle
 * cardinalities, --seed) as plain text and a gzip copy (one member, zlib
 * level 6, as `gzip` writes by default), then measures every case once a
 * round, one warm-up round and --repeat measured ones (so that load coming
 * and going on a shared machine falls on every case alike), and prints the
 * medians:
 *
 *   inflate zlib / isa-l   the .gz inflated in memory into a 1 MiB buffer:
 *                          MB/s of output per second of this thread's CPU
 *   lines plain / zlib /   the line cutter (src/data/lines.h, 65536 lines a
 *     isa-l                batch) over a byte source (src/data/source.h) of
 *                          the plain file, or of the .gz with each inflater:
 *                          rows/s per core (thread CPU time) and wall rows/s
 *   gzip -dc | lines       the gzip command inflating the same .gz into a
 *                          pipe, its newlines found by this thread: rows/s
 *                          per core counts gzip's CPU time and this thread's
 *
 * Ends with the ratio of isa-l's to zlib's rows/s per core on .gz (the
 * goal: at least 3). --json FILE writes the same as JSON.
 *
 *   build/bench_inflate [--rows N] [--repeat R] [--out PATH] [--json FILE] [--keep]
 *                       [--reuse]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "core/options.h"
#include "core/out.h"
#include "data/inflate.h"
#include "data/lines.h"
#include "data/source.h"

typedef struct {
    int64_t rows;
    int64_t repeat;
    int64_t seed;
    bool keep, reuse;
    char out[RAP_OPT_STR];
    char json[RAP_OPT_STR];
} settings;

#define CMD 1u
static const rap_opt OPTS[] = {
    {"rows", RAP_OPT_INT, CMD, offsetof(settings, rows), "2000000", 1000, 1e10, NULL, "N",
     "rows generated (rap_gen_write, about 230 bytes each)"},
    {"repeat", RAP_OPT_INT, CMD, offsetof(settings, repeat), "5", 1, 100, NULL, "R",
     "measured runs of each case (after one warm-up); the medians are reported"},
    {"seed", RAP_OPT_INT, CMD, offsetof(settings, seed), "1", 0, 1e18, NULL, "S",
     "generator seed"},
    {"keep", RAP_OPT_BOOL, CMD, offsetof(settings, keep), "false", 0, 0, NULL, NULL,
     "keep the files written"},
    {"reuse", RAP_OPT_BOOL, CMD, offsetof(settings, reuse), "false", 0, 0, NULL, NULL,
     "use the files a --keep run left at --out (same --rows) instead of writing them"},
    {"out", RAP_OPT_STRING, CMD, offsetof(settings, out), "/tmp/rap_bench_inflate.tsv", 0, 0,
     NULL, "PATH", "the plain file to write (the gzip copy gets .gz appended)"},
    {"json", RAP_OPT_STRING, CMD, offsetof(settings, json), "", 0, 0, NULL, "FILE",
     "also write the results as JSON to FILE"},
};
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double children_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* One run of a case: seconds of wall and CPU time, bytes out, rows. */
typedef struct {
    double wall, cpu;
    int64_t bytes, rows;
} run_t;

/* ------------------------------------------------------------ the cases */

/* The .gz in memory (gz, n) inflated with kind into a 1 MiB buffer. */
static int case_inflate(const unsigned char *gz, size_t n, rap_inflate_kind kind, run_t *r)
{
    static unsigned char out[1 << 20];
    rap_inflater z;
    if (rap_inflater_init(&z, kind, "bench") != RAP_OK)
        return 1;
    double t0 = rap_now(), c0 = thread_cpu();
    z.next_in = gz;
    z.avail_in = n;
    int64_t bytes = 0;
    for (;;) {
        z.next_out = out;
        z.avail_out = sizeof out;
        rap_infl_result res = z.ops->inflate(&z);
        bytes += (int64_t)(sizeof out - z.avail_out);
        if (res == RAP_INFL_BAD) {
            fprintf(stderr, "inflate: %s\n", z.detail);
            rap_inflater_end(&z);
            return 1;
        }
        if (res == RAP_INFL_END)
            break;
    }
    r->cpu = thread_cpu() - c0;
    r->wall = rap_now() - t0;
    r->bytes = bytes;
    r->rows = 0;
    rap_inflater_end(&z);
    return 0;
}

/* The line cutter over path read with kind. */
static int case_lines(const char *path, rap_inflate_kind kind, rap_lines *c, run_t *r)
{
    double t0 = rap_now(), c0 = thread_cpu();
    rap_source *src;
    if (rap_source_open_ex(path, kind, &src) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return 1;
    }
    rap_lines_start(c, src);
    rap_line_batch b;
    int64_t rows = 0, bytes = 0;
    rap_status st;
    while ((st = rap_lines_next(c, &b)) == RAP_OK && b.n > 0) {
        rows += b.n;
        bytes += b.bytes;
    }
    rap_source_close(src);
    if (st != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return 1;
    }
    r->cpu = thread_cpu() - c0;
    r->wall = rap_now() - t0;
    r->rows = rows;
    r->bytes = bytes;
    return 0;
}

/* `gzip -dc path` into a pipe; its newlines counted here. */
static int case_gzip_cli(const char *path, run_t *r)
{
    static char buf[1 << 20];
    char cmd[RAP_OPT_STR + 32];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
    double t0 = rap_now(), c0 = thread_cpu(), k0 = children_cpu();
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror("popen gzip");
        return 1;
    }
    int fd = fileno(p);
    int64_t bytes = 0, rows = 0;
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got <= 0)
            break;
        bytes += got;
        for (const char *q = buf, *e = buf + got; (q = memchr(q, '\n', (size_t)(e - q))); q++)
            rows++;
    }
    if (pclose(p) != 0) {
        fprintf(stderr, "gzip -dc %s failed\n", path);
        return 1;
    }
    r->wall = rap_now() - t0;
    r->cpu = (thread_cpu() - c0) + (children_cpu() - k0);
    r->bytes = bytes;
    r->rows = rows;
    return 0;
}

/* --------------------------------------------------------------- driver */

typedef struct {
    const char *name, *what;
    double mb_s, mb_s_core, rows_s, rows_s_core, cores;
} result;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    int kind; /* 0 inflate, 1 lines, 2 gzip command */
    rap_inflate_kind ik;
    const char *path;
} case_t;

/* One run of case k, checked against the rows and bytes expected; its
 * five numbers into v[0..4][at]. */
static int run_once(const case_t *k, const char *name, const unsigned char *gz, size_t gz_n,
                    rap_lines *c, int64_t want_rows, int64_t want_bytes, double v[5][100],
                    int at)
{
    run_t r;
    int bad = k->kind == 0   ? case_inflate(gz, gz_n, k->ik, &r)
              : k->kind == 1 ? case_lines(k->path, k->ik, c, &r)
                             : case_gzip_cli(k->path, &r);
    if (bad)
        return 1;
    if (r.bytes != want_bytes || (k->kind != 0 && r.rows != want_rows)) {
        fprintf(stderr, "%s: %lld bytes, %lld rows; expected %lld, %lld\n", name,
                (long long)r.bytes, (long long)r.rows, (long long)want_bytes,
                (long long)want_rows);
        return 1;
    }
    if (at < 0)
        return 0; /* the warm-up */
    v[0][at] = (double)r.bytes / 1e6 / r.wall;
    v[1][at] = (double)r.bytes / 1e6 / r.cpu;
    v[2][at] = (double)want_rows / r.wall;
    v[3][at] = (double)want_rows / r.cpu;
    v[4][at] = r.cpu / r.wall;
    return 0;
}

static void summarize(const case_t *k, double v[5][100], int repeat, result *res)
{
    res->mb_s = median(v[0], repeat);
    res->mb_s_core = median(v[1], repeat);
    res->rows_s = median(v[2], repeat);
    res->rows_s_core = median(v[3], repeat);
    res->cores = median(v[4], repeat);
    printf("%-22s %10.1f %12.1f %12.0f %14.0f %7.2f\n", res->name, res->mb_s, res->mb_s_core,
           k->kind == 0 ? 0.0 : res->rows_s, k->kind == 0 ? 0.0 : res->rows_s_core, res->cores);
}

/* Generates the plain file and a one-member gzip copy (zlib level 6). */
static int make_files(const settings *s, const char *gzp, int64_t *bytes)
{
    if (s->reuse) { /* the rows are checked by every case */
        FILE *f = fopen(s->out, "rb");
        if (!f || access(gzp, R_OK) != 0) {
            fprintf(stderr, "--reuse: %s or %s missing\n", s->out, gzp);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        *bytes = (int64_t)ftell(f);
        fclose(f);
        return 0;
    }
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = s->rows;
    g.seed = (uint64_t)s->seed;
    g.out = s->out;
    rap_gen_result gr;
    if (rap_gen_cardinalities("kaggle", g.card) != RAP_OK || rap_gen_write(&g, &gr) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return 1;
    }
    *bytes = gr.bytes;
    FILE *f = fopen(s->out, "rb");
    rap_out *o = NULL;
    rap_status st = f ? rap_out_open(gzp, NULL, &o)
                      : rap_fail(RAP_ERR_IO, "%s: cannot read it back", s->out);
    int fd = st == RAP_OK ? dup(rap_out_fd(o)) : -1;
    gzFile z = fd >= 0 ? gzdopen(fd, "wb6") : NULL;
    if (st == RAP_OK && !z) {
        if (fd >= 0)
            close(fd);
        st = rap_fail(RAP_ERR_IO, "%s: cannot start gzip", gzp);
    }
    static char buf[1 << 20];
    size_t n;
    while (st == RAP_OK && (n = fread(buf, 1, sizeof buf, f)) > 0)
        if (gzwrite(z, buf, (unsigned)n) != (int)n)
            st = rap_fail(RAP_ERR_IO, "%s: write failed", gzp);
    if (f)
        fclose(f);
    if (z && gzclose(z) != Z_OK && st == RAP_OK)
        st = rap_fail(RAP_ERR_IO, "%s: gzip write failed", gzp);
    if ((st = rap_out_close(o, st)) != RAP_OK)
        fprintf(stderr, "%s\n", rap_last_error());
    return st != RAP_OK;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n ? *n : 1);
    if (p && fread(p, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static void write_json(const settings *s, int64_t bytes, size_t gz_n, const result *res, int n,
                       double ratio)
{
    rap_out *o;
    if (rap_out_open(s->json, NULL, &o) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return;
    }
    FILE *f = rap_out_file(o);
    fprintf(f, "{\n  \"bench\": \"inflate\",\n  \"rows\": %lld,\n  \"bytes\": %lld,\n"
               "  \"gz_bytes\": %zu,\n  \"cores\": %d,\n  \"repeat\": %lld,\n"
               "  \"isal_built_in\": %s,\n  \"results\": [\n",
            (long long)s->rows, (long long)bytes, gz_n, rap_ncores(), (long long)s->repeat,
            rap_inflate_have_isal() ? "true" : "false");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "    {\"case\": \"%s\", \"what\": \"%s\", \"mb_per_s\": %.1f, "
                "\"mb_per_core_s\": %.1f, \"rows_per_s\": %.0f, \"rows_per_core_s\": %.0f, "
                "\"cores_busy\": %.2f}%s\n",
                res[i].name, res[i].what, res[i].mb_s, res[i].mb_s_core, res[i].rows_s,
                res[i].rows_s_core, res[i].cores, i + 1 < n ? "," : "");
    fprintf(f, "  ],\n  \"isal_over_zlib_rows_per_core\": %.2f\n}\n", ratio);
    if (rap_out_commit(o) != RAP_OK) {
        fprintf(stderr, "%s\n", rap_last_error());
        return;
    }
    printf("results written to %s\n", s->json);
}

int main(int argc, char **argv)
{
    settings s;
    rap_opts_defaults(OPTS, NOPTS, CMD, &s);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_inflate [options]\n");
            rap_opts_usage(OPTS, NOPTS, CMD, stdout);
            return 0;
        }
    if (rap_opts_parse(OPTS, NOPTS, CMD, argc - 1, argv + 1, &s) != RAP_OK) {
        fprintf(stderr, "bench_inflate: %s\n", rap_last_error());
        return 2;
    }
    rap_log_set_level(1);
    rap_opts_print(OPTS, NOPTS, CMD, &s, "  ", stdout);
    char gzp[RAP_OPT_STR + 8];
    snprintf(gzp, sizeof gzp, "%s.gz", s.out);
    int64_t bytes;
    double t0 = rap_now();
    if (make_files(&s, gzp, &bytes))
        return 1;
    size_t gz_n;
    unsigned char *gz = slurp(gzp, &gz_n);
    if (!gz)
        return 1;
    printf("wrote %lld rows, %.1f MB (%.1f bytes/row) to %s and %.1f MB of gzip to %s in "
           "%.1f s; %d cores; ISA-L %s\n",
           (long long)s.rows, (double)bytes / 1e6, (double)bytes / (double)s.rows, s.out,
           (double)gz_n / 1e6, gzp, rap_now() - t0, rap_ncores(),
           rap_inflate_have_isal() ? "built in" : "not built in (ISAL=0 or no libisal-dev)");
    rap_lines_config lc = {65536, 65536, 0, 0};
    rap_lines *c;
    if (rap_lines_create(&lc, &c) != RAP_OK)
        return 1;
    bool isal = rap_inflate_have_isal();
    bool gzip_cli = system("command -v gzip >/dev/null 2>&1") == 0;
    const struct {
        case_t k;
        const char *name, *what;
        bool on;
    } cases[] = {
        {{0, RAP_INFLATE_ZLIB, NULL}, "inflate zlib", "the .gz in memory, zlib", true},
        {{0, RAP_INFLATE_ISAL, NULL}, "inflate isa-l", "the .gz in memory, ISA-L", isal},
        {{1, RAP_INFLATE_AUTO, s.out}, "lines plain", "read + find lines, plain file", true},
        {{1, RAP_INFLATE_ZLIB, gzp}, "lines .gz zlib", "read + inflate (zlib) + find lines",
         true},
        {{1, RAP_INFLATE_ISAL, gzp}, "lines .gz isa-l", "read + inflate (ISA-L) + find lines",
         isal},
        {{2, RAP_INFLATE_AUTO, gzp}, "gzip -dc | lines", "gzip command into a pipe + find "
                                                         "lines (gzip's CPU counted)", gzip_cli},
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    result res[8];
    const case_t *on[8];
    int nres = 0;
    for (int i = 0; i < nc; i++) {
        if (!cases[i].on) {
            printf("%-22s skipped: %s\n", cases[i].name,
                   cases[i].k.kind == 2 ? "no gzip command" : "ISA-L not built in");
            continue;
        }
        res[nres].name = cases[i].name;
        res[nres].what = cases[i].what;
        on[nres++] = &cases[i].k;
    }
    /* round by round, every case once a round: load that comes and goes on
     * a shared machine falls on every case alike */
    static double v[8][5][100];
    for (int at = -1; at < (int)s.repeat; at++)
        for (int i = 0; i < nres; i++)
            if (run_once(on[i], res[i].name, gz, gz_n, c, s.rows, bytes, v[i], at))
                return 1;
    printf("%-22s %10s %12s %12s %14s %7s\n", "case", "MB/s", "MB/s/core", "rows/s",
           "rows/s/core", "cores");
    for (int i = 0; i < nres; i++)
        summarize(on[i], v[i], (int)s.repeat, &res[i]);
    int zi = -1, ii = -1;
    for (int i = 0; i < nres; i++) {
        if (!strcmp(res[i].name, "lines .gz zlib"))
            zi = i;
        if (!strcmp(res[i].name, "lines .gz isa-l"))
            ii = i;
    }
    double ratio = 0, pr[100];
    if (zi >= 0 && ii >= 0) { /* the median of each round's ratio: the two ran side by side */
        for (int r = 0; r < (int)s.repeat; r++)
            pr[r] = v[ii][3][r] / v[zi][3][r];
        ratio = median(pr, (int)s.repeat);
        printf("isa-l / zlib, rows/s per core on .gz: %.2fx (median of the rounds' ratios; "
               "goal: at least 3x), ratio of the medians %.2fx\n",
               ratio, res[ii].rows_s_core / res[zi].rows_s_core);
    }
    if (s.json[0])
        write_json(&s, bytes, gz_n, res, nres, ratio);
    rap_lines_free(c);
    free(gz);
    if (!s.keep && !s.reuse) {
        remove(s.out);
        remove(gzp);
    }
    return 0;
}
