/*
 * bench/prep.c -- the preprocessing executor, timed.
 *
 *   bench_prep [options] [plan files...]     (default plans/plan0.plan plans/plan3.plan)
 *     --rows N,N,..   batch sizes (default 4096,65536,1048576)
 *     --runs N        timed runs per measurement (default 20 on the GPU, 5 on the CPU)
 *     --cpu           run on the CPU even when a GPU is usable
 *     --no-ops        skip the per-op-type plans
 *     --cpu-rows N    rows for the CPU plan 0 rows/s line (default 1048576; 0 skips)
 *     --json FILE     also write the results as JSON
 *
 * For every plan and batch size: median time of a whole-plan run (CUDA
 * events on the GPU after a warm-up; wall clock on the CPU), kernel
 * launches per run, bytes moved (sum over kernels of their input and output
 * column bytes for this batch, rap_prep_kernel_bytes) and the achieved GB/s
 * against the 4.3 TB/s copy ceiling of the H200 (docs/BENCH_TRAIN.md
 * "Floors"), fused (rap_fuse_levels) against unfused (rap_fuse_none) and
 * their ratio. Then the same for one plan per op type (that op over every column it accepts)
 * and the CPU's rows/s on plan 0 with all cores. Input data is random and
 * Criteo-like (null rates per column, heavy-tailed counts, skewed ids drawn
 * from the Kaggle cardinalities), never all zeros.
 *
 * Until a plan file can be parsed, plan 0 is built by hand here (39
 * fill_null, bucketize, 26 sigrid_hash, 26 firstx(1), 13 logit).
 */
#include "rap.h"
#include "core/core.h"
#include "core/json.h"
#include "core/out.h"
#include "prep/exec_internal.h"
#include "run/pipeline.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEAK_GBPS 4300.0
#define MAX_ROWS_LIST 8
#define MAX_RESULTS 256

static const int64_t g_kaggle_card[RAP_CRITEO_SPARSE] = {
    1460, 583,  10131227, 2202608, 305, 24,      12517, 633, 3,      93145,  5683, 8351593, 3194,
    27,   14992, 5461306, 10,      5652, 2173,   4,     7046547, 18, 15,     286181, 105,  142572};

typedef struct {
    char plan[96];
    char device[4];
    int64_t rows;
    int n_ops;
    int kernels[2];       /* [0] fused, [1] unfused */
    double ms[2];         /* median per whole-plan run */
    double launches[2];   /* per run */
    int64_t bytes;        /* moved per run */
    double load_ms;       /* host -> executor copy of the batch (fused executor) */
    char error[200];
} result;

static result g_res[MAX_RESULTS];
static int g_nres;

/* ------------------------------------------------------------ data */

static uint64_t rnd(uint64_t *s) { return rap_splitmix64(s); }
static double rnd01(uint64_t *s) { return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Criteo-like rows [0, rows) of b (schema Criteo, one id per row). */
static void fill_criteo(rap_batch *b, int64_t rows, uint64_t seed)
{
    uint64_t s = seed;
    const int64_t cap = b->cap;
    b->rows = rows;
    for (int64_t r = 0; r < rows; r++)
        b->label[r] = rnd01(&s) < 0.25 ? 1.0f : 0.0f;
    for (int j = 0; j < b->schema.n_dense; j++) {
        double null_rate = (double)((j * 7) % 11) * 0.04; /* 0 .. 40 % */
        double scale = 2.0 + (double)(j % 5) * 1.5;      /* log-range of the counts */
        float *x = b->dense + j * cap;
        uint8_t *v = b->dense_valid + j * cap;
        for (int64_t r = 0; r < rows; r++) {
            double u = rnd01(&s);
            if (u < null_rate) {
                x[r] = 0;
                v[r] = 0;
            } else {
                v[r] = 1;
                double w = rnd01(&s);
                x[r] = w < 0.03 ? -(float)(1 + (rnd(&s) % 3)) : floorf((float)exp(w * w * scale * 2.3) - 1.0f);
            }
        }
    }
    for (int j = 0; j < b->schema.n_sparse; j++) {
        double null_rate = (double)((j * 5) % 9) * 0.05; /* 0 .. 40 % */
        int64_t *off = b->sparse_off + j * (cap + 1);
        int64_t *ids = b->sparse_ids + j * cap * b->schema.ids_per_row;
        uint8_t *v = b->sparse_valid + j * cap;
        double lc = log((double)g_kaggle_card[j % RAP_CRITEO_SPARSE]);
        off[0] = 0;
        for (int64_t r = 0; r < rows; r++) {
            if (rnd01(&s) < null_rate) {
                v[r] = 0;
                off[r + 1] = off[r];
                continue;
            }
            v[r] = 1;
            double u = rnd01(&s);
            uint64_t rank = (uint64_t)exp(u * u * lc); /* skewed towards frequent values */
            ids[off[r]] = (int64_t)(rap_mix64(rank * 131 + (uint64_t)j) & 0xffffffffu);
            off[r + 1] = off[r] + 1;
        }
    }
}

/* ------------------------------------------------------------ plans */

static rap_status add(rap_plan *p, rap_op_type op, int input, double f0, double f1, int64_t i0,
                      int64_t i1, int *idx)
{
    rap_node n = {0};
    n.op = op;
    n.input = input;
    n.f[0] = f0;
    n.f[1] = f1;
    n.i[0] = i0;
    n.i[1] = i1;
    n.line = 1;
    n.col = 1;
    if (op == RAP_OP_BUCKETIZE) {
        static double borders[] = {0.5, 1.0, 1.5};
        n.borders = borders;
        n.n_aux = 3;
    }
    static int64_t map[1000];
    if (op == RAP_OP_MAPID) {
        for (int q = 0; q < 1000; q++)
            map[q] = (q * 7919) % 1000;
        n.map = map;
        n.n_aux = 1000;
    }
    return rap_plan_add_op(p, &n, idx);
}

static int col_node(const rap_plan *p, const char *name) { return p->cols[rap_plan_find(p, name)].node; }

/* Plan 0 by hand (docs/DATA.md "The workloads rap is measured on"). */
static rap_status plan0_by_hand(rap_plan **out)
{
    rap_plan *p;
    RAP_TRY(rap_plan_create(rap_schema_criteo(), "plan0 (built in)", &p));
    char name[32];
    int idx = 0;
    rap_status s = RAP_OK;
    for (int j = 0; j < RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE && s == RAP_OK; j++) {
        if (j < RAP_CRITEO_DENSE)
            snprintf(name, sizeof name, "int_%d", j);
        else
            snprintf(name, sizeof name, "cat_%d", j - RAP_CRITEO_DENSE);
        s = add(p, RAP_OP_FILL_NULL, col_node(p, name), 0, 0, 0, 0, &idx);
        if (s == RAP_OK)
            s = rap_plan_assign(p, name, idx);
    }
    if (s == RAP_OK)
        s = add(p, RAP_OP_BUCKETIZE, col_node(p, "int_0"), 0, 0, 0, 0, &idx);
    if (s == RAP_OK)
        s = rap_plan_assign(p, "bucketize_int_0", idx);
    for (int j = 0; j < RAP_CRITEO_SPARSE && s == RAP_OK; j++) {
        snprintf(name, sizeof name, "cat_%d", j);
        s = add(p, RAP_OP_SIGRID_HASH, col_node(p, name), 0, 0, 0, g_kaggle_card[j], &idx);
        if (s == RAP_OK)
            s = rap_plan_assign(p, name, idx);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE && s == RAP_OK; j++) {
        snprintf(name, sizeof name, "cat_%d", j);
        s = add(p, RAP_OP_FIRSTX, col_node(p, name), 0, 0, 1, 0, &idx);
        if (s == RAP_OK)
            s = rap_plan_assign(p, name, idx);
    }
    for (int j = 0; j < RAP_CRITEO_DENSE && s == RAP_OK; j++) {
        snprintf(name, sizeof name, "int_%d", j);
        s = add(p, RAP_OP_LOGIT, col_node(p, name), 1e-5, 0, 0, 0, &idx);
        if (s == RAP_OK)
            s = rap_plan_assign(p, name, idx);
    }
    if (s != RAP_OK) {
        rap_plan_free(p);
        return s;
    }
    rap_plan_finish(p);
    *out = p;
    return RAP_OK;
}

/* One op type over every Criteo column it accepts. */
static rap_status op_plan(rap_op_type op, rap_plan **out)
{
    rap_plan *p;
    RAP_TRY(rap_plan_create(rap_schema_criteo(), rap_op_name(op), &p));
    bool dense_ok = op == RAP_OP_FILL_NULL || op == RAP_OP_CAST || op == RAP_OP_LOGIT ||
                    op == RAP_OP_BOXCOX || op == RAP_OP_LOG || op == RAP_OP_ADD ||
                    op == RAP_OP_MUL || op == RAP_OP_ONEHOT || op == RAP_OP_BUCKETIZE;
    bool sparse_ok = op == RAP_OP_FILL_NULL || op == RAP_OP_SIGRID_HASH || op == RAP_OP_FIRSTX ||
                     op == RAP_OP_CLAMP || op == RAP_OP_NGRAM || op == RAP_OP_MAPID;
    rap_status s = RAP_OK;
    for (int j = 0; j < RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE && s == RAP_OK; j++) {
        bool dense = j < RAP_CRITEO_DENSE;
        if ((dense && !dense_ok) || (!dense && !sparse_ok))
            continue;
        char name[32];
        snprintf(name, sizeof name, dense ? "int_%d" : "cat_%d", dense ? j : j - RAP_CRITEO_DENSE);
        int in = col_node(p, name), idx = 0, cj = dense ? 0 : j - RAP_CRITEO_DENSE;
        switch (op) {
        case RAP_OP_CAST: s = add(p, op, in, 0, 0, RAP_SPARSE, 0, &idx); break;
        case RAP_OP_LOGIT: s = add(p, op, in, 1e-5, 0, 0, 0, &idx); break;
        case RAP_OP_BOXCOX: s = add(p, op, in, 0.5, 0, 0, 0, &idx); break;
        case RAP_OP_ADD: s = add(p, op, in, 3, 0, 0, 0, &idx); break;
        case RAP_OP_MUL: s = add(p, op, in, 0.5, 0, 0, 0, &idx); break;
        case RAP_OP_ONEHOT: s = add(p, op, in, 0, 100, 16, 0, &idx); break;
        case RAP_OP_SIGRID_HASH: s = add(p, op, in, 0, 0, cj, g_kaggle_card[cj], &idx); break;
        case RAP_OP_FIRSTX: s = add(p, op, in, 0, 0, 1, 0, &idx); break;
        case RAP_OP_CLAMP: s = add(p, op, in, 0, 1e6, 0, 0, &idx); break;
        case RAP_OP_NGRAM: s = add(p, op, in, 0, 0, 2, 0, &idx); break;
        default: s = add(p, op, in, 0, 0, 0, 0, &idx); break;
        }
        if (s == RAP_OK)
            s = rap_plan_assign(p, name, idx);
    }
    if (s != RAP_OK) {
        rap_plan_free(p);
        return s;
    }
    rap_plan_finish(p);
    *out = p;
    return RAP_OK;
}

/* ------------------------------------------------------------ timing */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    rap_device dev;
    void *stream;  /* GPU: the stream every executor runs on */
    int runs, warm, threads;
} bench_cfg;

/* Median ms of rap_prep_run on ex (batch loaded), launches per run. */
static rap_status time_runs(const bench_cfg *bc, rap_prep *ex, double *ms, double *launches)
{
    double *t = malloc(sizeof(double) * (size_t)bc->runs);
    if (!t)
        return rap_fail(RAP_ERR_NOMEM, "bench: timing array");
    rap_status s = RAP_OK;
    for (int i = 0; i < bc->warm && s == RAP_OK; i++)
        s = rap_prep_run(ex);
    if (s == RAP_OK)
        s = rap_prep_sync(ex);
    int64_t l0 = rap_prep_launches(ex);
#ifdef RAP_HAVE_CUDA
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (bc->dev == RAP_GPU && s == RAP_OK &&
        (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
        s = rap_fail(RAP_ERR_CUDA, "bench: cudaEventCreate failed");
#endif
    for (int i = 0; i < bc->runs && s == RAP_OK; i++) {
        if (bc->dev == RAP_CPU) {
            double t0 = rap_now();
            s = rap_prep_run(ex);
            t[i] = (rap_now() - t0) * 1e3;
            continue;
        }
#ifdef RAP_HAVE_CUDA
        cudaStream_t st = (cudaStream_t)bc->stream;
        float f = 0;
        if (cudaEventRecord(e0, st) != cudaSuccess)
            s = rap_fail(RAP_ERR_CUDA, "bench: cudaEventRecord failed");
        if (s == RAP_OK)
            s = rap_prep_run(ex);
        if (s == RAP_OK && (cudaEventRecord(e1, st) != cudaSuccess ||
                            cudaEventSynchronize(e1) != cudaSuccess ||
                            cudaEventElapsedTime(&f, e0, e1) != cudaSuccess))
            s = rap_fail(RAP_ERR_CUDA, "bench: CUDA event timing failed: %s",
                         cudaGetErrorString(cudaGetLastError()));
        t[i] = f;
#endif
    }
#ifdef RAP_HAVE_CUDA
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
#endif
    if (s == RAP_OK) {
        qsort(t, (size_t)bc->runs, sizeof(double), cmp_double);
        *ms = bc->runs % 2 ? t[bc->runs / 2] : 0.5 * (t[bc->runs / 2 - 1] + t[bc->runs / 2]);
        *launches = (double)(rap_prep_launches(ex) - l0) / bc->runs;
    }
    free(t);
    return s;
}

/* Load time of the batch into ex (median of a few). */
static rap_status time_load(const bench_cfg *bc, rap_prep *ex, const rap_batch *b, double *ms)
{
    double t[5];
    for (int i = 0; i < 5; i++) {
        double t0 = rap_now();
        RAP_TRY(rap_prep_load(ex, b));
        RAP_TRY(rap_prep_sync(ex));
        t[i] = (rap_now() - t0) * 1e3;
    }
    qsort(t, 5, sizeof(double), cmp_double);
    *ms = t[2];
    (void)bc;
    return RAP_OK;
}

/* Measures plan on batch b, fused and unfused; fills r. */
static void measure(const bench_cfg *bc, const rap_plan *plan, const rap_batch *b, result *r)
{
    r->rows = b->rows;
    r->n_ops = rap_plan_n_ops(plan);
    snprintf(r->device, sizeof r->device, "%s", bc->dev == RAP_GPU ? "gpu" : "cpu");
    for (int fused = 1; fused >= 0; fused--) {
        int w = fused ? 0 : 1;
        rap_pipeline_prep side; /* the plan fused (by levels, or one kernel per op), run */
        rap_pipeline_prep_config pc = {.plan = plan,
                                       .fusion_kind = fused ? RAP_FUSE_LEVELS : RAP_FUSE_NONE,
                                       .device = bc->dev,
                                       .stream = bc->stream,
                                       .batch_rows = b->cap,
                                       .threads = bc->threads};
        rap_status s = rap_pipeline_prep_create(&pc, &side);
        rap_prep *ex = side.prep;
        if (s == RAP_OK && fused)
            s = time_load(bc, ex, b, &r->load_ms);
        if (s == RAP_OK)
            s = rap_prep_load(ex, b);
        if (s == RAP_OK)
            s = time_runs(bc, ex, &r->ms[w], &r->launches[w]);
        if (s == RAP_OK)
            r->kernels[w] = rap_prep_n_kernels(ex);
        if (s == RAP_OK && fused) {
            r->bytes = 0;
            for (int k = 0; k < rap_prep_n_kernels(ex) && s == RAP_OK; k++) {
                int64_t kb = 0;
                s = rap_prep_kernel_bytes(ex, k, &kb);
                r->bytes += kb;
            }
        }
        if (s != RAP_OK && !r->error[0])
            snprintf(r->error, sizeof r->error, "%s %s: %s", fused ? "fused" : "unfused",
                     rap_status_name(s), rap_last_error());
        rap_pipeline_prep_free(&side);
    }
}

static void print_header(void)
{
    printf("%-22s %-3s %8s %5s %11s %13s %10s %10s %6s %9s %8s %6s %8s\n", "plan", "dev", "rows",
           "ops", "kernels f/u", "launches f/u", "fused ms", "unfused ms", "ratio", "MB moved",
           "GB/s", "%peak", "load ms");
}

static void print_result(const result *r)
{
    if (r->error[0]) {
        printf("%-22s %-3s %8lld  FAILED: %s\n", r->plan, r->device, (long long)r->rows, r->error);
        return;
    }
    double gbps = r->ms[0] > 0 ? (double)r->bytes / (r->ms[0] * 1e6) : 0;
    printf("%-22s %-3s %8lld %5d %5d/%-5d %6.0f/%-6.0f %10.4f %10.4f %6.2f %9.2f %8.1f %6.2f %8.3f\n",
           r->plan, r->device, (long long)r->rows, r->n_ops, r->kernels[0], r->kernels[1],
           r->launches[0], r->launches[1], r->ms[0], r->ms[1], r->ms[0] > 0 ? r->ms[1] / r->ms[0] : 0,
           (double)r->bytes / 1e6, gbps, 100.0 * gbps / PEAK_GBPS, r->load_ms);
    fflush(stdout);
}

static result *new_result(const char *plan)
{
    if (g_nres >= MAX_RESULTS)
        return NULL;
    result *r = &g_res[g_nres++];
    memset(r, 0, sizeof *r);
    snprintf(r->plan, sizeof r->plan, "%s", plan);
    return r;
}

static void write_json(const char *path, double cpu_rows_per_s, int64_t cpu_rows, int cpu_threads)
{
    rap_out *o;
    if (rap_out_open(path, NULL, &o) != RAP_OK) {
        fprintf(stderr, "bench_prep: %s\n", rap_last_error());
        return;
    }
    FILE *f = rap_out_file(o);
    fprintf(f, "{\n  \"peak_gbps\": %.1f,\n  \"results\": [\n", PEAK_GBPS);
    for (int i = 0; i < g_nres; i++) {
        const result *r = &g_res[i];
        double gbps = r->ms[0] > 0 ? (double)r->bytes / (r->ms[0] * 1e6) : 0;
        fputs("    {\"plan\": ", f);
        rap_json_put_str(f, r->plan);
        fprintf(f,
                ", \"device\": \"%s\", \"rows\": %lld, \"ops\": %d, "
                "\"kernels_fused\": %d, \"kernels_unfused\": %d, \"launches_fused\": %.1f, "
                "\"launches_unfused\": %.1f, \"fused_ms\": %.6f, \"unfused_ms\": %.6f, "
                "\"ratio\": %.4f, \"bytes\": %lld, \"gbps\": %.3f, \"pct_peak\": %.3f, "
                "\"load_ms\": %.4f, \"error\": ",
                r->device, (long long)r->rows, r->n_ops, r->kernels[0], r->kernels[1],
                r->launches[0], r->launches[1], r->ms[0], r->ms[1],
                r->ms[0] > 0 ? r->ms[1] / r->ms[0] : 0, (long long)r->bytes, gbps,
                100.0 * gbps / PEAK_GBPS, r->load_ms);
        rap_json_put_str(f, r->error);
        fprintf(f, "}%s\n", i + 1 < g_nres ? "," : "");
    }
    fprintf(f, "  ],\n  \"cpu_plan0\": {\"rows\": %lld, \"threads\": %d, \"rows_per_s\": %.1f}\n}\n",
            (long long)cpu_rows, cpu_threads, cpu_rows_per_s);
    if (rap_out_commit(o) != RAP_OK) {
        fprintf(stderr, "bench_prep: %s\n", rap_last_error());
        return;
    }
    printf("wrote %s\n", path);
}

/* ------------------------------------------------------------ main */

/* Loads a plan file; plan 0 falls back to the built-in copy. */
static rap_status get_plan(const char *path, rap_plan **p, char *label, size_t label_len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(label, label_len, "%s", base);
    rap_status s = rap_plan_load(path, rap_schema_criteo(), p);
    if (s == RAP_OK)
        return s;
    if (strstr(base, "plan0")) {
        fprintf(stderr, "bench_prep: %s: %s; using the built-in plan 0\n", path, rap_last_error());
        snprintf(label, label_len, "plan0 (built-in)");
        return plan0_by_hand(p);
    }
    return s;
}

/* Rows/s of plan `name` on the CPU executor with every core over cpu_rows
 * rows (printed; 0 when it failed). */
static double cpu_rows_per_s(const char *name, int64_t cpu_rows, int cpu_threads)
{
    double cpu_rps = 0;
    rap_plan *p0 = NULL;
    char label[96];
    if (get_plan(name, &p0, label, sizeof label) != RAP_OK)
        return 0;
    rap_batch b;
    if (rap_batch_create(&b, rap_schema_criteo(), cpu_rows, false) == RAP_OK) {
        fill_criteo(&b, cpu_rows, 0xc0ffee);
        bench_cfg cc = {RAP_CPU, NULL, 5, 1, 0};
        rap_pipeline_prep side;
        rap_pipeline_prep_config pc = {.plan = p0,
                                       .fusion_kind = RAP_FUSE_LEVELS,
                                       .device = RAP_CPU,
                                       .batch_rows = cpu_rows};
        double ms = 0, launches = 0;
        rap_status s = rap_pipeline_prep_create(&pc, &side);
        if (s == RAP_OK)
            s = rap_prep_load(side.prep, &b);
        if (s == RAP_OK)
            s = time_runs(&cc, side.prep, &ms, &launches);
        if (s == RAP_OK) {
            cpu_rps = (double)cpu_rows / (ms * 1e-3);
            printf("CPU %s, %lld rows, %d threads: %.3f ms per run, %.3g rows/s\n", label,
                   (long long)cpu_rows, cpu_threads, ms, cpu_rps);
        } else {
            printf("CPU %s: FAILED: %s\n", label, rap_last_error());
        }
        rap_pipeline_prep_free(&side);
        rap_batch_free(&b);
    }
    rap_plan_free(p0);
    return cpu_rps;
}

int main(int argc, char **argv)
{
    const char *plans[32];
    int n_plans = 0;
    int64_t rows_list[MAX_ROWS_LIST] = {4096, 65536, 1048576};
    int n_rows = 3, runs = 0;
    bool force_cpu = false, do_ops = true;
    int64_t cpu_rows = 1048576;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--rows") && i + 1 < argc) {
            n_rows = 0;
            for (char *tok = strtok(argv[++i], ","); tok && n_rows < MAX_ROWS_LIST; tok = strtok(NULL, ","))
                rows_list[n_rows++] = atoll(tok);
        } else if (!strcmp(a, "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(a, "--cpu")) {
            force_cpu = true;
        } else if (!strcmp(a, "--no-ops")) {
            do_ops = false;
        } else if (!strcmp(a, "--cpu-rows") && i + 1 < argc) {
            cpu_rows = atoll(argv[++i]);
        } else if (!strcmp(a, "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "usage: bench_prep [--rows N,N,..] [--runs N] [--cpu] [--no-ops] "
                            "[--cpu-rows N] [--json FILE] [plan files...]\n");
            return 2;
        } else if (n_plans < 32) {
            plans[n_plans++] = a;
        }
    }
    if (n_plans == 0) {
        plans[n_plans++] = "plans/plan0.plan";
        plans[n_plans++] = "plans/plan3.plan";
    }
    for (int i = 0; i < n_rows; i++)
        if (rows_list[i] < 1) {
            fprintf(stderr, "bench_prep: bad --rows value\n");
            return 2;
        }

    char why[256];
    bench_cfg bc = {RAP_CPU, NULL, 5, 2, 0};
    if (!force_cpu && rap_gpu_available(why, sizeof why)) {
        bc.dev = RAP_GPU;
        bc.runs = 20;
        bc.warm = 3;
    } else if (!force_cpu) {
        printf("no GPU (%s): timing the CPU executor\n", why);
    }
    if (runs > 0)
        bc.runs = runs;
#ifdef RAP_HAVE_CUDA
    cudaStream_t stream = NULL;
    if (bc.dev == RAP_GPU) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
            printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
            fprintf(stderr, "bench_prep: cudaStreamCreate failed\n");
            return 1;
        }
        bc.stream = stream;
    }
#endif
    printf("device %s, %d timed runs after %d warm-up, median; bytes = inputs + outputs of every "
           "kernel; peak %.1f TB/s\n",
           bc.dev == RAP_GPU ? "GPU" : "CPU", bc.runs, bc.warm, PEAK_GBPS / 1000);

    /* the plans: files, then one per op type */
    rap_plan *plan_obj[32 + RAP_OP_COUNT];
    char plan_label[32 + RAP_OP_COUNT][96];
    int n_obj = 0;
    for (int i = 0; i < n_plans; i++) {
        rap_plan *p = NULL;
        char label[96];
        if (get_plan(plans[i], &p, label, sizeof label) != RAP_OK) {
            result *r = new_result(label);
            if (r)
                snprintf(r->error, sizeof r->error, "cannot load: %s", rap_last_error());
            fprintf(stderr, "bench_prep: %s: %s\n", plans[i], rap_last_error());
            continue;
        }
        plan_obj[n_obj] = p;
        snprintf(plan_label[n_obj++], sizeof plan_label[0], "%s", label);
    }
    if (do_ops)
        for (int op = 1; op < RAP_OP_COUNT; op++) {
            rap_plan *p = NULL;
            if (op_plan((rap_op_type)op, &p) != RAP_OK) {
                fprintf(stderr, "bench_prep: op plan %s: %s\n", rap_op_name((rap_op_type)op), rap_last_error());
                continue;
            }
            plan_obj[n_obj] = p;
            snprintf(plan_label[n_obj++], sizeof plan_label[0], "op:%s", rap_op_name((rap_op_type)op));
        }

    print_header();
    double t_start = rap_now();
    for (int ri = 0; ri < n_rows; ri++) {
        rap_batch b;
        if (rap_batch_create(&b, rap_schema_criteo(), rows_list[ri], true) != RAP_OK) {
            fprintf(stderr, "bench_prep: batch of %lld rows: %s\n", (long long)rows_list[ri], rap_last_error());
            continue;
        }
        fill_criteo(&b, rows_list[ri], 0x5eed + (uint64_t)ri);
        for (int i = 0; i < n_obj; i++) {
            result *r = new_result(plan_label[i]);
            if (!r)
                break;
            measure(&bc, plan_obj[i], &b, r);
            print_result(r);
        }
        rap_batch_free(&b);
    }
    printf("GPU/whole part: %.1f s\n", rap_now() - t_start);

    /* CPU rows/s on plan 0 with all cores */
    int cpu_threads = rap_ncores();
    double cpu_rps = cpu_rows > 0 ? cpu_rows_per_s(plans[0], cpu_rows, cpu_threads) : 0;
    if (json)
        write_json(json, cpu_rps, cpu_rows, cpu_threads);
    for (int i = 0; i < n_obj; i++)
        rap_plan_free(plan_obj[i]);
#ifdef RAP_HAVE_CUDA
    if (stream)
        cudaStreamDestroy(stream);
#endif
    return 0;
}
