/*
 * bench/parse_gpu.c -- how fast the GPU parser (src/data/parse_gpu.cu)
 * turns Criteo text in device memory into a columnar batch.
 *
 * Generates Criteo-shaped rows in memory (bench/common/criteo_text.h, the
 * rows bench/parse.c times: 25 % positive, 13 small counts with nulls, 26
 * categories of 8 hex digits with nulls; --bad per mille of them malformed
 * in one of five ways), cuts them into lines, copies text and offsets to
 * the GPU once, and times with device events, after --warmup runs, the
 * median of --reps runs of:
 *   - one batch of all rows (one launch);
 *   - batches of --batch lines, one after the other on the stream (one
 *     launch and one 504-byte result copy each: what the runtime would do);
 *   - the one batch in 8 pieces (rap_parse_gpu_piece);
 * the one batch again with only the kernel's first one and two phases
 * (rap_parse_gpu_stages), so the differences give each phase's time; and,
 * for the ceiling, a device-to-device copy of the text (bytes read +
 * written). Rows/s, GB/s of text, and GB/s of all bytes the parse must move
 * (text and offsets read, the batch and rejects written) against 4.3 TB/s.
 * The GPU's counts are checked against the CPU parser's on the same text.
 * Then, for information, the CPU reference (parse_ref.c) and the CPU parser
 * (rap_parse_chunk) on one core (thread CPU time). --json FILE writes the
 * same as JSON. Without a GPU only the CPU part runs.
 *
 *   build/bench_parse_gpu [--rows N] [--batch N] [--bad N] [--reps N]
 *                         [--warmup N] [--cpu-rows N] [--json FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/criteo_text.h"
#include "core/core.h"
#include "core/options.h"
#include "core/out.h"
#include "data/parse.h"
#include "data/parse_gpu.h"
#include "data/parse_ref.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define CEILING_TBS 4.3 /* the H200's device copy, bytes read + written (measured) */

typedef struct {
    int64_t rows, batch, bad, reps, warmup, cpu_rows;
    char json[RAP_OPT_STR];
} settings;

#define CMD 1u
static const rap_opt OPTS[] = {
    {"rows", RAP_OPT_INT, CMD, offsetof(settings, rows), "4000000", 1, 2e7, NULL, "N",
     "rows generated (about 250 bytes each)"},
    {"batch", RAP_OPT_INT, CMD, offsetof(settings, batch), "65536", 1, 1e8, NULL, "N",
     "lines per batch for the batched run"},
    {"bad", RAP_OPT_INT, CMD, offsetof(settings, bad), "10", 0, 1000, NULL, "N",
     "malformed rows per mille"},
    {"reps", RAP_OPT_INT, CMD, offsetof(settings, reps), "30", 1, 10000, NULL, "N",
     "timed runs of each case (the median is reported)"},
    {"warmup", RAP_OPT_INT, CMD, offsetof(settings, warmup), "3", 0, 1000, NULL, "N",
     "untimed runs first"},
    {"cpu-rows", RAP_OPT_INT, CMD, offsetof(settings, cpu_rows), "200000", 0, 2e7, NULL, "N",
     "rows for the CPU timings (0: none)"},
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

/* What the CPU parser makes of the text: rows used, rejected, ids. */
typedef struct {
    int64_t used, rejected, ids;
} counts;

static int cpu_counts(const char *text, const int32_t *start, int64_t n, counts *c)
{
    rap_parsed o;
    memset(&o, 0, sizeof o);
    memset(c, 0, sizeof *c);
    for (int64_t l0 = 0; l0 < n; l0 += 65536) {
        int64_t l1 = l0 + 65536 < n ? l0 + 65536 : n;
        if (rap_parse_chunk(text + start[l0], (size_t)(start[l1] - start[l0]), 65536, &o) !=
            RAP_OK)
            return 1;
        c->used += o.n_used;
        c->rejected += o.n_rej;
        for (int j = 0; j < RAP_CRITEO_SPARSE; j++)
            for (int64_t i = 0; i < o.n_used; i++)
                c->ids += o.sparse_valid[j * o.cap + i];
    }
    rap_parsed_free(&o);
    return 0;
}

typedef struct {
    const char *name;
    double ms, rows_s, text_gbs, moved_gbs;
} gpu_case;

#ifdef RAP_HAVE_CUDA
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    rap_parse_gpu *p;
    rap_batch dev;
    int64_t n, bytes, batch;
    int kind; /* 0 one batch, 1 batches, 2 pieces */
} gpu_ctx;

/* One run of case c->kind; RAP_OK or the failure. */
static rap_status gpu_once(gpu_ctx *c)
{
    const char *text = rap_parse_gpu_text(c->p);
    const int32_t *st = rap_parse_gpu_starts(c->p);
    uint64_t tk;
    if (c->kind == 0)
        return rap_parse_gpu_run(c->p, text, c->bytes, st, c->n, &c->dev, NULL, &tk);
    if (c->kind == 1) {
        /* each batch: offsets into the one text, so every batch's text is aligned */
        for (int64_t l0 = 0; l0 < c->n; l0 += c->batch) {
            int64_t k = c->n - l0 < c->batch ? c->n - l0 : c->batch;
            RAP_TRY(rap_parse_gpu_run(c->p, text, c->bytes, st + l0, k, &c->dev, NULL, &tk));
        }
        return RAP_OK;
    }
    RAP_TRY(rap_parse_gpu_begin(c->p, text, c->bytes, st, c->n, &c->dev));
    int64_t step = ((c->n / 8) / RAP_PARSE_TILE + 1) * RAP_PARSE_TILE;
    for (int64_t l0 = 0; l0 < c->n; l0 += step)
        RAP_TRY(rap_parse_gpu_piece(c->p, l0, l0 + step < c->n ? l0 + step : c->n));
    return rap_parse_gpu_end(c->p, NULL, &tk);
}

/* Median ms of reps runs after warmup, timed by events on stream. */
static rap_status gpu_time(gpu_ctx *c, cudaStream_t stream, int warmup, int reps, double *ms)
{
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "bench: cudaEventCreate failed");
    double *v = malloc((size_t)reps * sizeof *v);
    rap_status s = RAP_OK;
    for (int i = 0; s == RAP_OK && i < warmup + reps; i++) {
        float f = 0;
        if (cudaEventRecord(e0, stream) != cudaSuccess)
            s = rap_fail(RAP_ERR_CUDA, "bench: cudaEventRecord failed");
        if (s == RAP_OK)
            s = gpu_once(c);
        if (s == RAP_OK && (cudaEventRecord(e1, stream) != cudaSuccess ||
                            cudaEventSynchronize(e1) != cudaSuccess ||
                            cudaEventElapsedTime(&f, e0, e1) != cudaSuccess))
            s = rap_fail(RAP_ERR_CUDA, "bench: event timing failed: %s",
                         cudaGetErrorString(cudaGetLastError()));
        if (i >= warmup)
            v[i - warmup] = f;
    }
    if (s == RAP_OK)
        *ms = median(v, reps);
    free(v);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return s;
}

/* The device-to-device copy of n bytes: GB/s read + written (median). */
static double copy_gbs(void *a, void *b, size_t n, cudaStream_t stream, int reps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double *v = malloc((size_t)(reps + 2) * sizeof *v);
    for (int i = 0; i < reps + 2; i++) {
        float f = 0;
        cudaEventRecord(e0, stream);
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, stream);
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&f, e0, e1);
        v[i] = f;
    }
    double ms = median(v + 2, reps);
    free(v);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms > 0 ? 2.0 * (double)n / (ms * 1e-3) / 1e9 : 0;
}

/* Checks the GPU's counts against the CPU parser's, batch by batch. */
static int gpu_check(gpu_ctx *c, const counts *want)
{
    counts got = {0, 0, 0};
    const int32_t *st = rap_parse_gpu_starts(c->p);
    for (int64_t l0 = 0; l0 < c->n; l0 += c->batch) {
        int64_t k = c->n - l0 < c->batch ? c->n - l0 : c->batch;
        uint64_t tk;
        rap_parse_result r;
        bool ready;
        if (rap_parse_gpu_run(c->p, rap_parse_gpu_text(c->p), c->bytes, st + l0, k, &c->dev,
                              NULL, &tk) != RAP_OK ||
            rap_parse_gpu_result(c->p, tk, true, &r, &ready) != RAP_OK || !ready)
            return 1;
        int64_t ids = 0, off;
        for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
            if (cudaMemcpy(&off, c->dev.sparse_off + j * (c->dev.cap + 1) + r.rows_used, 8,
                           cudaMemcpyDeviceToHost) != cudaSuccess)
                return 1;
            ids += off;
        }
        got.used += r.rows_used;
        got.rejected += r.rows_rejected;
        got.ids += ids;
    }
    if (got.used != want->used || got.rejected != want->rejected || got.ids != want->ids) {
        fprintf(stderr, "bench_parse_gpu: the GPU parsed %lld rows (%lld rejected, %lld ids), "
                        "the CPU parser %lld (%lld, %lld)\n", (long long)got.used,
                (long long)got.rejected, (long long)got.ids, (long long)want->used,
                (long long)want->rejected, (long long)want->ids);
        return 1;
    }
    printf("check: GPU counts == CPU parser's (%lld used, %lld rejected, %lld ids)\n",
           (long long)got.used, (long long)got.rejected, (long long)got.ids);
    return 0;
}

/* The GPU cases into res (*nres of them); stage_ms the one batch through
 * phase 1, 2, 3; *copy the ceiling measured. */
static int gpu_bench(const settings *set, const char *text, int64_t bytes, const int32_t *start,
                     int64_t n, const counts *want, gpu_case *res, int *nres, double *copy,
                     double stage_ms[3], char *dev_name, size_t dn)
{
    cudaStream_t stream;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(dev_name, dn, "%s (%d SMs)", prop.name, prop.multiProcessorCount);
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "bench_parse_gpu: cudaStreamCreate failed\n");
        return 1;
    }
    gpu_ctx c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.bytes = bytes;
    c.batch = set->batch;
    rap_parse_gpu_config pc = {n, bytes, 65536, NULL, 0};
    void *block = NULL;
    rap_schema sch = rap_schema_criteo();
    if (rap_parse_gpu_create(&pc, stream, &c.p) != RAP_OK ||
        rap_cuda_malloc(&block, rap_batch_bytes(sch, n), "bench batch") != RAP_OK ||
        rap_parse_gpu_upload(c.p, text, bytes, start, n) != RAP_OK) {
        fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
        return 1;
    }
    rap_batch_view(&c.dev, sch, n, block);
    if (gpu_check(&c, want))
        return 1;
    /* bytes the parse must move: text and offsets in, the batch and rejects out */
    double moved = (double)bytes + 4.0 * (double)(n + 1) +
                   (double)want->used * (4 + 13 * 5 + 26 * 9) + 8.0 * (double)want->ids +
                   12.0 * (double)want->rejected;
    static const char *names[] = {"one batch", "batches of B", "one batch, 8 pieces"};
    for (int k = 0; k < 3; k++) {
        c.kind = k;
        double ms = 0;
        if (gpu_time(&c, stream, (int)set->warmup, (int)set->reps, &ms) != RAP_OK) {
            fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
            return 1;
        }
        gpu_case *g = &res[(*nres)++];
        g->name = names[k];
        g->ms = ms;
        g->rows_s = (double)n / (ms * 1e-3);
        g->text_gbs = (double)bytes / (ms * 1e-3) / 1e9;
        g->moved_gbs = moved / (ms * 1e-3) / 1e9;
    }
    /* the phases: the one batch with only the first 1, 2 of the 3 */
    c.kind = 0;
    for (int k = 1; k <= 2; k++) {
        rap_parse_gpu_stages(c.p, k);
        if (gpu_time(&c, stream, (int)set->warmup, (int)set->reps, &stage_ms[k - 1]) != RAP_OK) {
            fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
            return 1;
        }
    }
    rap_parse_gpu_stages(c.p, 3);
    stage_ms[2] = res[0].ms;
    *copy = copy_gbs(rap_parse_gpu_text(c.p), block, (size_t)bytes, stream, (int)set->reps);
    rap_cuda_free(block);
    rap_parse_gpu_free(c.p);
    cudaStreamDestroy(stream);
    return 0;
}
#endif

/* rows/s of one core: the CPU reference and the CPU parser on rows [0, m). */
static int cpu_bench(const char *text, const int32_t *start, int64_t m, double *ref_rows_s,
                     double *cpu_rows_s)
{
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    rap_batch b;
    rap_parse_rej *rej = malloc((size_t)m * sizeof *rej);
    rap_parse_result r;
    if (rap_batch_create(&b, rap_schema_criteo(), m, false) != RAP_OK || !rej)
        return 1;
    double t0 = thread_cpu();
    if (rap_parse_ref(&lay, text, start[m], start, m, 65536, &b, rej, &r) != RAP_OK)
        return 1;
    *ref_rows_s = (double)m / (thread_cpu() - t0);
    rap_parsed o;
    memset(&o, 0, sizeof o);
    t0 = thread_cpu();
    if (rap_parse_chunk(text, (size_t)start[m], 65536, &o) != RAP_OK)
        return 1;
    *cpu_rows_s = (double)m / (thread_cpu() - t0);
    if (o.n_used != r.rows_used) {
        fprintf(stderr, "bench_parse_gpu: reference %lld rows, CPU parser %lld\n",
                (long long)r.rows_used, (long long)o.n_used);
        return 1;
    }
    rap_parsed_free(&o);
    rap_batch_free(&b);
    free(rej);
    return 0;
}

int main(int argc, char **argv)
{
    settings set;
    rap_opts_defaults(OPTS, NOPTS, CMD, &set);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_parse_gpu [options]\n");
            rap_opts_usage(OPTS, NOPTS, CMD, stdout);
            return 0;
        }
    if (rap_opts_parse(OPTS, NOPTS, CMD, argc - 1, argv + 1, &set) != RAP_OK) {
        fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
        return 2;
    }
    rap_opts_print(OPTS, NOPTS, CMD, &set, "  ", stdout);
    const int64_t n = set.rows;
    char *text = malloc((size_t)n * BENCH_CRITEO_ROW_MAX + 16);
    int32_t *start = malloc(((size_t)n + 1) * sizeof *start);
    if (!text || !start) {
        fprintf(stderr, "bench_parse_gpu: out of memory\n");
        return 1;
    }
    char *p = text;
    start[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        p = bench_criteo_row(p, i, set.bad);
        start[i + 1] = (int32_t)(p - text);
    }
    const int64_t bytes = p - text;
    counts want;
    if (cpu_counts(text, start, n, &want)) {
        fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
        return 1;
    }
    printf("%lld rows, %.3f GB of text (%.1f bytes/row), %lld rejected by the CPU parser\n",
           (long long)n, (double)bytes / 1e9, (double)bytes / (double)n,
           (long long)want.rejected);
    gpu_case res[4];
    int nres = 0;
    double copy = 0, stage_ms[3] = {0, 0, 0};
    char dev[256] = "none", why[256] = "";
    bool gpu = rap_gpu_available(why, sizeof why);
#ifdef RAP_HAVE_CUDA
    if (gpu && gpu_bench(&set, text, bytes, start, n, &want, res, &nres, &copy, stage_ms, dev,
                         sizeof dev))
        return 1;
#endif
    double ref_rs = 0, cpu_rs = 0;
    int64_t m = set.cpu_rows < n ? set.cpu_rows : n;
    if (m > 0 && cpu_bench(text, start, m, &ref_rs, &cpu_rs)) {
        fprintf(stderr, "bench_parse_gpu: %s\n", rap_last_error());
        return 1;
    }
    printf("\nGPU: %s%s%s\n", gpu ? dev : "not used (", gpu ? "" : why, gpu ? "" : ")");
    if (nres) {
        printf("%-22s %10s %11s %10s %11s %8s\n", "case", "median ms", "M rows/s", "GB/s text",
               "GB/s moved", "% 4.3TB/s");
        for (int i = 0; i < nres; i++)
            printf("%-22s %10.3f %11.1f %10.1f %11.1f %8.1f\n", res[i].name, res[i].ms,
                   res[i].rows_s / 1e6, res[i].text_gbs, res[i].moved_gbs,
                   100.0 * res[i].moved_gbs / (CEILING_TBS * 1000.0));
        printf("phases of the one batch: boundaries + conversion %.3f ms, counters + prefix "
               "%.3f ms, scatter %.3f ms\n", stage_ms[0], stage_ms[1] - stage_ms[0],
               stage_ms[2] - stage_ms[1]);
        printf("device copy of the text: %.0f GB/s (read + written)\n", copy);
        printf("(B = %lld lines; moved = text + offsets read, batch + rejects written)\n",
               (long long)set.batch);
    }
    if (m > 0)
        printf("CPU, one core, %lld rows: reference %.2f M rows/s, CPU parser %.2f M rows/s\n",
               (long long)m, ref_rs / 1e6, cpu_rs / 1e6);
    if (set.json[0]) {
        rap_out *o;
        if (rap_out_open(set.json, NULL, &o) != RAP_OK) {
            fprintf(stderr, "%s\n", rap_last_error());
            return 1;
        }
        FILE *f = rap_out_file(o);
        fprintf(f, "{\n  \"bench\": \"parse_gpu\",\n  \"rows\": %lld,\n  \"bytes\": %lld,\n"
                   "  \"rejected\": %lld,\n  \"batch\": %lld,\n  \"reps\": %lld,\n"
                   "  \"gpu\": \"%s\",\n  \"copy_gbs\": %.1f,\n"
                   "  \"phase_ms\": [%.4f, %.4f, %.4f],\n  \"cases\": [\n",
                (long long)n, (long long)bytes, (long long)want.rejected, (long long)set.batch,
                (long long)set.reps, gpu ? dev : "none", copy, stage_ms[0], stage_ms[1],
                stage_ms[2]);
        for (int i = 0; i < nres; i++)
            fprintf(f, "    {\"case\": \"%s\", \"median_ms\": %.4f, \"rows_per_s\": %.0f, "
                       "\"text_gbs\": %.2f, \"moved_gbs\": %.2f}%s\n",
                    res[i].name, res[i].ms, res[i].rows_s, res[i].text_gbs, res[i].moved_gbs,
                    i + 1 < nres ? "," : "");
        fprintf(f, "  ],\n  \"cpu_rows\": %lld,\n  \"cpu_ref_rows_per_s\": %.0f,\n"
                   "  \"cpu_parser_rows_per_s\": %.0f\n}\n",
                (long long)m, ref_rs, cpu_rs);
        if (rap_out_commit(o) != RAP_OK) {
            fprintf(stderr, "%s\n", rap_last_error());
            return 1;
        }
        printf("results written to %s\n", set.json);
    }
    free(text);
    free(start);
    return 0;
}
