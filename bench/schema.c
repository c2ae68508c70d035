/*
 * bench/schema.c -- how fast rows of a multi-hot input schema are read:
 * the CPU schema parser alone on one core, the reader with 1, 2, 4 ... N
 * threads (rows/s, cores busy, rows/s per busy core), the GPU parser's
 * kernels on one batch when a GPU is there, and the same rows as Parquet:
 * rap's reader (Arrow's decoder, then rap's rows) beside pyarrow's own
 * read_table of the same file in the same run (one thread and all).
 *
 * The schema (docs/SCHEMA.md): a label, 2 dense (float, int32), a str id,
 * a hex id, a list of dec ids ('|', mean length --list-mean), a list of
 * str ids (';'), a hex32 id and a skipped field; rows from rap gen
 * --schema (tab separated). Parquet: scripts/tsv_to_parquet.py, row groups
 * of --group rows (needs python3 with pyarrow and a build with Arrow; else
 * that part says why it is skipped).
 *
 *   build/bench_schema [--rows N] [--threads N] [--list-mean M] [--group R]
 *                      [--out PATH] [--keep]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/options.h"
#include "core/out.h"
#include "data/parquet.h"
#include "data/parse_gpu.h"
#include "data/parse_ref.h"
#include "data/parse_schema.h"

typedef struct {
    int64_t rows, threads, group;
    double list_mean;
    bool keep;
    char out[RAP_OPT_STR];
} settings;

#define CMD 1u
static const rap_opt OPTS[] = {
    {"rows", RAP_OPT_INT, CMD, offsetof(settings, rows), "1000000", 1, 1e10, NULL, "N",
     "rows of the synthetic file"},
    {"threads", RAP_OPT_INT, CMD, offsetof(settings, threads), "0", 0, 256, NULL, "N",
     "most reader threads to try (0 = all cores); runs 1, 2, 4 ... N"},
    {"list-mean", RAP_OPT_DOUBLE, CMD, offsetof(settings, list_mean), "4", 0, 4096, NULL, "M",
     "mean length of the two list fields"},
    {"group", RAP_OPT_INT, CMD, offsetof(settings, group), "65536", 1, 1e9, NULL, "R",
     "rows per Parquet row group"},
    {"keep", RAP_OPT_BOOL, CMD, offsetof(settings, keep), "false", 0, 0, NULL, NULL,
     "keep the files written"},
    {"out", RAP_OPT_STRING, CMD, offsetof(settings, out), "/tmp/rap_bench_schema.tsv", 0, 0,
     NULL, "PATH", "the TSV to write (the Parquet copy gets .parquet appended, the schema "
     ".schema)"},
    {"help", RAP_OPT_BOOL, CMD, 0, "false", 0, 0, NULL, NULL, "show this help"},
};
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static const char *k_schema = "y     label\n"
                              "price dense float\n"
                              "age   dense int32\n"
                              "user  sparse str\n"
                              "item  sparse hex\n"
                              "hist  sparse dec list |\n"
                              "tags  sparse str list ;\n"
                              "cat   sparse hex32\n"
                              "note  skip\n";

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The whole file into memory. */
static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

/* The schema parser alone on one core: chunks of about 1 MB of whole lines. */
static void parse_alone(const rap_input_schema *s, const char *text, size_t n)
{
    rap_schema_parser *p;
    if (rap_schema_parser_create(s, &p) != RAP_OK)
        return;
    rap_parsed o;
    memset(&o, 0, sizeof o);
    int64_t rows = 0, ids = 0;
    double cpu = 0;
    for (size_t at = 0; at < n;) {
        size_t end = at + (1 << 20) < n ? at + (1 << 20) : n;
        while (end < n && text[end - 1] != '\n')
            end++;
        double t0 = thread_cpu();
        rap_parse_chunk_schema(p, text + at, end - at, 65536, &o);
        cpu += thread_cpu() - t0;
        rows += o.n_used;
        for (int j = 0; j < o.ns; j++)
            ids += o.soff[j * (o.cap + 1) + o.n_used];
        at = end;
    }
    printf("| schema parser alone, 1 core | 1 | %.0f | %.0f | 1.0 | %.0f | (%.2f ids a row) |\n",
           (double)rows / cpu, (double)n / 1e6 / cpu, (double)rows / cpu,
           (double)ids / (double)(rows ? rows : 1));
    rap_parsed_free(&o);
    rap_schema_parser_free(p);
}

/* The reader over input with t threads: wall, CPU, rows. */
static rap_status read_all(const char *input, const rap_input_schema *s, int t, int64_t *rows,
                           double *wall, double *cpu)
{
    rap_reader_config rc = rap_reader_defaults();
    rc.input = input;
    rc.threads = t;
    rc.schema = s;
    rap_reader *r;
    RAP_TRY(rap_reader_open(&rc, &r));
    rap_batch b;
    rap_status st = rap_batch_create(&b, rap_reader_shape(&rc), 8192, false);
    double c0 = cpu_seconds(), w0 = rap_now();
    *rows = 0;
    while (st == RAP_OK && (st = rap_reader_next(r, &b)) == RAP_OK && b.rows > 0)
        *rows += b.rows;
    *wall = rap_now() - w0;
    *cpu = cpu_seconds() - c0;
    rap_batch_free(&b);
    rap_reader_close(r);
    return st;
}

static void reader_rows(const char *what, const char *input, const rap_input_schema *s,
                        int max_t, double mb)
{
    for (int t = 1; t <= max_t; t = t < max_t && t * 2 > max_t ? max_t : t * 2) {
        int64_t rows;
        double wall, cpu;
        if (read_all(input, s, t, &rows, &wall, &cpu) != RAP_OK) {
            printf("| %s | %d | failed: %s |\n", what, t, rap_last_error());
            return;
        }
        char mbs[32] = "-";
        if (mb > 0)
            snprintf(mbs, sizeof mbs, "%.0f", mb / wall);
        printf("| %s | %d | %.0f | %s | %.2f | %.0f | |\n", what, t, (double)rows / wall, mbs,
               cpu / wall, (double)rows / cpu);
        fflush(stdout);
        if (t == max_t)
            break;
    }
}

/* The GPU parser's kernels on the first batch of up to 1M lines. */
static void gpu_rows(const rap_input_schema *s, const char *text, size_t n)
{
    char why[256];
    if (!rap_gpu_available(why, sizeof why)) {
        printf("| GPU parser | - | skipped: %s |\n", why);
        return;
    }
    rap_parse_layout lay;
    if (rap_parse_layout_schema(s, &lay) != RAP_OK) {
        printf("| GPU parser | - | failed: %s |\n", rap_last_error());
        return;
    }
    int64_t L = 0, cap = 1 << 20;
    int32_t *start = malloc(sizeof *start * (size_t)(cap + 1));
    size_t bytes = 0;
    start[0] = 0;
    for (size_t i = 0; i < n && L < cap && i < (size_t)INT32_MAX - 1; i++)
        if (text[i] == '\n') {
            start[++L] = (int32_t)(i + 1);
            bytes = i + 1;
        }
    rap_parse_gpu_config pc = {L, (int64_t)bytes, 65536, &lay, 0};
    rap_parse_gpu *p = NULL;
    rap_schema sh = rap_input_schema_shape(s);
    void *d = NULL;
    rap_batch dev;
    rap_status st = rap_parse_gpu_create(&pc, NULL, &p);
    if (st == RAP_OK)
        st = rap_cuda_malloc(&d, rap_batch_bytes(sh, L), "bench batch");
    if (st == RAP_OK) {
        rap_batch_view(&dev, sh, L, d);
        st = rap_parse_gpu_upload(p, text, (int64_t)bytes, start, L);
    }
    double best = 1e30;
    rap_parse_result res;
    for (int k = 0; st == RAP_OK && k < 6; k++) {
        double t0 = rap_now();
        uint64_t ticket;
        bool ready = false;
        st = rap_parse_gpu_run(p, rap_parse_gpu_text(p), (int64_t)bytes, rap_parse_gpu_starts(p),
                               L, &dev, NULL, &ticket);
        if (st == RAP_OK)
            st = rap_parse_gpu_result(p, ticket, true, &res, &ready);
        double dt = rap_now() - t0;
        if (k > 0 && dt < best)
            best = dt;
    }
    if (st == RAP_OK)
        printf("| GPU parser (one batch of %lld lines, text on the device) | GPU | %.0f | %.0f | "
               "- | - | %lld good |\n", (long long)L, (double)L / best, (double)bytes / 1e6 / best,
               (long long)res.rows_used);
    else
        printf("| GPU parser | - | failed: %s |\n", rap_last_error());
    rap_cuda_free(d);
    rap_parse_gpu_free(p);
    free(start);
}

/* pyarrow's read_table of the same file, one thread and all, CPU time
 * per row: printed as table rows. */
static void pyarrow_rows(const char *pq)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sys,time,pyarrow.parquet as pq\n"
             "for th in (False, True):\n"
             "  best=None\n"
             "  for k in range(3):\n"
             "    w=time.perf_counter(); c=time.process_time()\n"
             "    t=pq.read_table(sys.argv[1], use_threads=th)\n"
             "    w=time.perf_counter()-w; c=time.process_time()-c\n"
             "    best=(w,c) if best is None or w<best[0] else best\n"
             "  w,c=best; n=t.num_rows\n"
             "  print('| pyarrow read_table (use_threads=%%s) | %%s | %%.0f | - | %%.2f | %%.0f | "
             "Arrow columns, no rows |' %% (th, 'all' if th else 1, n/w, c/w, n/c))\n"
             "\" '%s'", pq);
    fflush(stdout);
    if (system(cmd) != 0)
        printf("| pyarrow read_table | - | failed (python3 with pyarrow?) |\n");
}

int main(int argc, char **argv)
{
    settings s;
    memset(&s, 0, sizeof s);
    if (rap_opts_defaults(OPTS, NOPTS, CMD, &s) != RAP_OK ||
        rap_opts_parse(OPTS, NOPTS, CMD, argc - 1, argv + 1, &s) != RAP_OK) {
        fprintf(stderr, "bench_schema: %s\n", rap_last_error());
        return 2;
    }
    int max_t = s.threads ? (int)s.threads : rap_ncores();
    char sp[RAP_OPT_STR + 16], pqf[RAP_OPT_STR + 16];
    snprintf(sp, sizeof sp, "%s.schema", s.out);
    snprintf(pqf, sizeof pqf, "%s.parquet", s.out);
    rap_out *so = NULL;
    rap_status wst = rap_out_open(sp, NULL, &so);
    if (wst == RAP_OK && fputs(k_schema, rap_out_file(so)) < 0)
        wst = rap_fail(RAP_ERR_IO, "%s: write failed", sp);
    if (so)
        wst = rap_out_close(so, wst);
    if (wst != RAP_OK) {
        fprintf(stderr, "bench_schema: %s\n", rap_last_error());
        return 1;
    }
    rap_input_schema *sc;
    if (rap_input_schema_load(sp, &sc) != RAP_OK) {
        fprintf(stderr, "bench_schema: %s\n", rap_last_error());
        return 1;
    }
    sc->max_list = 64;
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = s.rows;
    g.seed = 1;
    g.out = s.out;
    g.schema = sc;
    g.list_mean = s.list_mean;
    rap_gen_result gr;
    if (rap_gen_write(&g, &gr) != RAP_OK) {
        fprintf(stderr, "bench_schema: %s\n", rap_last_error());
        return 1;
    }
    size_t n = 0;
    char *text = slurp(s.out, &n);
    if (!text) {
        fprintf(stderr, "bench_schema: cannot read %s\n", s.out);
        return 1;
    }
    printf("bench_schema: %lld rows, %.1f MB of text (%.0f bytes a row), lists of mean %.1f "
           "(at most %d), %d cores\n\n", (long long)gr.rows, (double)n / 1e6,
           (double)n / (double)(gr.rows ? gr.rows : 1), s.list_mean, sc->max_list, rap_ncores());
    printf("| what | threads | rows/s | MB/s | cores busy | rows/s per busy core | note |\n");
    printf("|---|---|---|---|---|---|---|\n");
    parse_alone(sc, text, n);
    reader_rows("reader, TSV", s.out, sc, max_t, (double)n / 1e6);
    gpu_rows(sc, text, n);
    free(text);
    char why[512];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 scripts/tsv_to_parquet.py '%s' '%s' '%s' %lld", sp, s.out,
             pqf, (long long)s.group);
    fflush(stdout);
    if (!rap_pq_built(why, sizeof why)) {
        printf("| Parquet | - | skipped: %s |\n", why);
    } else if (system(cmd) != 0) {
        printf("| Parquet | - | skipped: scripts/tsv_to_parquet.py failed (python3 with "
               "pyarrow?) |\n");
    } else {
        reader_rows("reader, Parquet (Arrow decode + rap rows)", pqf, sc, max_t, 0);
        pyarrow_rows(pqf);
    }
    if (!s.keep) {
        remove(s.out);
        remove(pqf);
        remove(sp);
    }
    rap_input_schema_free(sc);
    return 0;
}
