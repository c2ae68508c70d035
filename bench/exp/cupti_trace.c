/* cupti_trace.c: experiment tool (not product code). A CUDA injection
 * library that records, with the CUPTI Activity API, the GPU start/end
 * timestamps of every kernel (CONCURRENT_KERNEL, so timings stay real
 * under concurrency; kernels inside CUDA graphs included), memcpy and
 * memset of an unmodified process, into a CSV file.
 *
 * Build:  bench/exp/build_cupti_trace.sh [OUTDIR]     (default .carry/build)
 * Use:    LD_LIBRARY_PATH=OUTDIR/lib \
 *         CUDA_INJECTION64_PATH=$PWD/OUTDIR/libraptrace.so \
 *         RAP_CUPTI_OUT=ideal.csv  OUTDIR/rap bench --modes ideal ...
 * libcuda (loaded by rap's static cudart) dlopens this library in cuInit
 * and calls InitializeInjection(); records are written as CUPTI hands
 * over full 8 MB buffers, the rest at exit (atexit: forced flush).
 *
 * RAP_CUPTI_OUT: output path (default cupti_trace.csv); a "%p" in it is
 * replaced by the process id. CSV columns (times in ns, CUPTI clock):
 *   kind,name,stream,correlation,graph,start_ns,end_ns,grid,block,bytes
 * kind: kernel | memcpy | memset; name: the mangled kernel name, or
 * memcpy_HtoD/_DtoH/_DtoD/..., or memset; graph: graphId (0 = not in a
 * graph); grid/block: x*y*z products (0 for copies); bytes: 0 for kernels.
 * Record layouts: CUpti_ActivityKernel10, CUpti_ActivityMemcpy6,
 * CUpti_ActivityMemset4 (CUPTI 13.0); the library refuses to trace when
 * the loaded libcupti is another major.minor version. Any CUPTI failure
 * prints its error string on stderr and turns tracing off; the traced
 * process always continues. */
#define _POSIX_C_SOURCE 200809L
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "[raptrace] "
#define BUF_BYTES (8u << 20) /* one CUPTI activity buffer */
#define BUF_ALIGN 8u

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards g_out, counters */
static FILE *g_out;           /* NULL: tracing off */
static char g_path[4096];
static uint64_t g_n[3];       /* records written: kernel, memcpy, memset */
static size_t g_dropped;
static int g_started;

/* True when r is CUPTI_SUCCESS; otherwise prints what failed with CUPTI's string. */
static int ok(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS)
        return 1;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "(no error string)";
    fprintf(stderr, TAG "%s failed: %s (%d)\n", what, s, (int)r);
    return 0;
}

/* CUPTI asks for an empty buffer: 8 MB, 8-byte aligned; NULL drops records. */
static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(BUF_ALIGN, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0; /* as many as fit */
    if (!*buf)
        fprintf(stderr, TAG "out of memory for an activity buffer; records will be dropped\n");
}

static const char *copy_name(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy_HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy_DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy_DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy_HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy_PtoP";
    default: return "memcpy_other";
    }
}

/* Writes s as one CSV field, quoted only when it holds a comma, quote or newline. */
static void put_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* One CSV row; start/end in ns; grid/block x*y*z products. */
static void row(FILE *f, const char *kind, const char *name, uint32_t stream, uint32_t corr,
                uint32_t graph, uint64_t start, uint64_t end, int64_t grid, int64_t block,
                uint64_t bytes)
{
    fprintf(f, "%s,", kind);
    put_field(f, name);
    fprintf(f, ",%u,%u,%u,%llu,%llu,%lld,%lld,%llu\n", stream, corr, graph,
            (unsigned long long)start, (unsigned long long)end, (long long)grid, (long long)block,
            (unsigned long long)bytes);
}

/* CUPTI returns a filled buffer (from its worker thread, or from a flush): write its records, free it. */
static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    pthread_mutex_lock(&g_mu);
    CUpti_Activity *rec = NULL;
    while (g_out && valid > 0) {
        CUptiResult r = cuptiActivityGetNextRecord(buf, valid, &rec);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED)
            break;
        if (!ok(r, "cuptiActivityGetNextRecord"))
            break;
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            row(g_out, "kernel", k->name ? k->name : "?", k->streamId, k->correlationId, k->graphId,
                k->start, k->end, (int64_t)k->gridX * k->gridY * k->gridZ,
                (int64_t)k->blockX * k->blockY * k->blockZ, 0);
            g_n[0]++;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            row(g_out, "memcpy", copy_name(m->copyKind), m->streamId, m->correlationId, m->graphId,
                m->start, m->end, 0, 0, m->bytes);
            g_n[1]++;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            row(g_out, "memset", "memset", m->streamId, m->correlationId, m->graphId, m->start,
                m->end, 0, 0, m->bytes);
            g_n[2]++;
        }
    }
    size_t dropped = 0;
    if (ok(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped), "cuptiActivityGetNumDroppedRecords"))
        g_dropped += dropped;
    pthread_mutex_unlock(&g_mu);
    free(buf);
}

/* Tracing off: disables the kinds (errors ignored) and closes the file. */
static void trace_off(void)
{
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
    pthread_mutex_lock(&g_mu);
    if (g_out)
        fclose(g_out);
    g_out = NULL;
    pthread_mutex_unlock(&g_mu);
}

/* atexit: forced flush of every buffer (incomplete records too), report, close. */
static void at_exit(void)
{
    if (!g_out)
        return;
    ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    pthread_mutex_lock(&g_mu);
    size_t dropped = 0;
    if (ok(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped), "cuptiActivityGetNumDroppedRecords"))
        g_dropped += dropped;
    int bad = g_out && (fflush(g_out) != 0 || ferror(g_out));
    fprintf(stderr, TAG "wrote %llu kernel, %llu memcpy, %llu memset records to %s; dropped %zu%s\n",
            (unsigned long long)g_n[0], (unsigned long long)g_n[1], (unsigned long long)g_n[2],
            g_path, g_dropped, bad ? "; WRITE ERROR, file incomplete" : "");
    if (g_dropped)
        fprintf(stderr, TAG "WARNING: %zu records dropped, the trace is incomplete\n", g_dropped);
    pthread_mutex_unlock(&g_mu);
    trace_off();
}

/* Called by libcuda in cuInit. Returns 1 always: the process runs, traced or not. */
__attribute__((visibility("default"))) int InitializeInjection(void)
{
    pthread_mutex_lock(&g_mu);
    int again = g_started;
    g_started = 1;
    pthread_mutex_unlock(&g_mu);
    if (again)
        return 1;

    uint32_t ver = 0;
    if (!ok(cuptiGetVersion(&ver), "cuptiGetVersion"))
        return 1;
    if (ver / 100 != CUPTI_API_VERSION / 100) {
        fprintf(stderr, TAG "libcupti API version %u, built against %u: record layouts may differ, "
                "tracing OFF (carry OUTDIR/lib/libcupti.so.13 and set LD_LIBRARY_PATH)\n",
                ver, (unsigned)CUPTI_API_VERSION);
        return 1;
    }

    const char *p = getenv("RAP_CUPTI_OUT");
    if (!p || !*p)
        p = "cupti_trace.csv";
    const char *pc = strstr(p, "%p");
    if (pc)
        snprintf(g_path, sizeof g_path, "%.*s%ld%s", (int)(pc - p), p, (long)getpid(), pc + 2);
    else
        snprintf(g_path, sizeof g_path, "%s", p);
    FILE *f = fopen(g_path, "w");
    if (!f) {
        perror(TAG "fopen RAP_CUPTI_OUT");
        fprintf(stderr, TAG "cannot write %s, tracing OFF\n", g_path);
        return 1;
    }
    setvbuf(f, NULL, _IOFBF, 1u << 20);
    fputs("kind,name,stream,correlation,graph,start_ns,end_ns,grid,block,bytes\n", f);
    pthread_mutex_lock(&g_mu);
    g_out = f;
    pthread_mutex_unlock(&g_mu);

    if (!ok(cuptiActivityRegisterCallbacks(buf_requested, buf_completed), "cuptiActivityRegisterCallbacks") ||
        !ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)") ||
        !ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)") ||
        !ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)")) {
        fprintf(stderr, TAG "tracing OFF\n");
        trace_off();
        return 1;
    }
    if (atexit(at_exit) != 0) {
        fprintf(stderr, TAG "atexit failed, tracing OFF\n");
        trace_off();
        return 1;
    }
    fprintf(stderr, TAG "CUPTI %u tracing on (concurrent kernels, memcpy, memset; pid %ld) -> %s\n",
            ver, (long)getpid(), g_path);
    return 1;
}
