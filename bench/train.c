/*
 * bench/train.c -- the DLRM training step alone, timed (docs/BENCH_TRAIN.md).
 *
 *   bench_train [options]
 *     --batches N,N,..    batch sizes (default 4096,8192,65536; CPU: 256)
 *     --precision P,P     fp32 (TF32 GEMMs), bf16 (default fp32,bf16; CPU: fp32)
 *     --steps N           timed steps per measurement (default 100; CPU: 5)
 *     --warmup N          untimed steps first (default 10; CPU: 1)
 *     --k K               distinct batches per batch size, cycled (default 8; CPU: 2)
 *     --optimizer O       sgd (default, lr 0.1), adagrad or rowwise-adagrad
 *     --emb-dtype T       storage of the tables: fp32 (default), bf16 or fp16
 *     --max-rows N        cap every table at N rows (default: none; CPU: 10000)
 *     --seed S            data seed (default 1); the model's seed is fixed (1)
 *     --data-dir DIR      write the batches to DIR/train_b<B>.bin (layout below)
 *     --gen-only          only generate (and write) the data, create no model
 *     --no-graph          skip the CUDA-graph measurement
 *     --shared-model      one model per precision, created for the largest
 *                         batch and reused for every batch size (before
 *                         2026-12-03 the only way; default: a model per batch)
 *     --cpu               run on the CPU even when a GPU is usable
 *     --json FILE         also write the results as JSON (rewritten after each result)
 *
 * Model: the paper's DLRM (docs/DATA.md): 13 dense inputs, plan 0's 27 tables
 * (the 26 Criteo Kaggle cardinalities and bucketize(int_0, [0.5,1,1.5]): 4
 * rows), embedding dim 128, bottom MLP 512-256-128, top MLP
 * 1024-1024-512-256-1, dot interaction, BCE-with-logits, SGD lr 0.1. One
 * model per precision and batch size, created for that batch as rap train
 * makes it (its GEMMs tuned for those rows; a model tuned for 65536 rows
 * ran the tf32 step at 4096 at 4.7 instead of 6.0 M samples/s on the
 * H200); --shared-model: one per precision for the largest batch.
 *
 * Data: K preprocessed batches per batch size, generated on the host from
 * the seed (dense log(1+count) values with heavy-tailed counts, one id per
 * row per table drawn Zipf(1)-like over the table's rows and scattered by a
 * hash, labels positive with probability 0.25), uploaded to the GPU once.
 *
 * Measurement: after the warm-up, steps cycle through the K batches; CUDA
 * events on the model's stream around rap_model_emb_forward,
 * rap_model_mlp_forward, rap_model_mlp_backward and rap_model_emb_backward
 * give per-phase times; the step time is first event to last; medians over
 * the timed steps; samples/s = B / median step time. Then the K steps are
 * captured once as a CUDA graph (cudaStreamBeginCapture on the model's
 * stream) and its replays are timed the same way (step = replay / K).
 * Without a GPU the same runs on the CPU backend with a tiny configuration
 * and wall-clock timing, so the program can be tested anywhere.
 *
 * Data file layout (little-endian; read by bench/peers/dlrm_torch.py):
 *   header: 8 bytes magic "RAPTRN1\0", then int64 words
 *     [1] version (1)  [2] header_bytes  [3] K  [4] B  [5] ND  [6] T
 *     [7] D (embedding dim, informational)  [8] seed  [9..15] 0
 *     [16 .. 16+T) rows of each table
 *   header_bytes = 8 * (16 + T) rounded up to a multiple of 64.
 *   then K records of B*4*(1+ND) + T*B*8 bytes each, record k at
 *   header_bytes + k * record_bytes:
 *     label float32[B]; dense float32[B][ND] (row-major); ids int64[T][B]
 *   Bag offsets are implicit: one id per row, off[t] = 0, 1, .., B.
 */
#include "rap.h"
#include "core/core.h"
#include "core/json.h"
#include "core/out.h"
#include "model/model.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 8
#define MAX_RESULTS 32
#define N_TABLES 27
#define N_DENSE 13
#define EMB_DIM 128
#define N_PHASES 4

static const int64_t g_kaggle_card[26] = {
    1460, 583,  10131227, 2202608, 305, 24,      12517, 633, 3,      93145,  5683, 8351593, 3194,
    27,   14992, 5461306, 10,      5652, 2173,   4,     7046547, 18, 15,     286181, 105,  142572};
static const char *g_phase_name[N_PHASES] = {"emb_forward", "mlp_forward", "mlp_backward",
                                             "emb_backward"};

/* ------------------------------------------------------------ options */

typedef struct {
    int64_t batches[MAX_LIST];
    int n_batches;
    rap_precision prec[2];
    int n_prec;
    int steps, warmup, k;
    rap_optimizer opt;
    rap_emb_dtype emb_dtype;
    int64_t max_rows;
    uint64_t seed;
    const char *data_dir;
    const char *json;
    bool gen_only, no_graph, force_cpu;
    bool shared_model; /* one model per precision for every batch (the old way) */
    bool set_batches, set_prec, set_steps, set_warmup, set_k, set_max_rows;
} options;

/* Parses "a,b,c" of positive integers into v (at most MAX_LIST). */
static int parse_list(const char *s, int64_t *v)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (end == s || errno || x <= 0)
            return -1;
        v[n++] = x;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return *s ? -1 : n;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_train [--batches N,..] [--precision fp32,bf16] [--steps N] "
                    "[--warmup N] [--k K] [--optimizer sgd|adagrad|rowwise-adagrad] "
                    "[--emb-dtype fp32|bf16|fp16] [--max-rows N] [--seed S] "
                    "[--data-dir DIR] [--gen-only] [--no-graph] [--shared-model] [--cpu] "
                    "[--json FILE]\n");
}

static int parse_int(const char *s, long long lo, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo)
        return -1;
    *out = x;
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->opt = RAP_SGD;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
#define NEED_VALUE()                                                 \
    do {                                                             \
        if (!v) {                                                    \
            fprintf(stderr, "bench_train: %s needs a value\n", a);   \
            return -1;                                               \
        }                                                            \
        i++;                                                         \
    } while (0)
        if (!strcmp(a, "--batches")) {
            NEED_VALUE();
            o->n_batches = parse_list(v, o->batches);
            if (o->n_batches <= 0) {
                fprintf(stderr, "bench_train: --batches %s: expected positive integers, "
                                "comma-separated, at most %d\n", v, MAX_LIST);
                return -1;
            }
            o->set_batches = true;
        } else if (!strcmp(a, "--precision")) {
            NEED_VALUE();
            o->n_prec = 0;
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (o->n_prec == 2) {
                    fprintf(stderr, "bench_train: --precision: at most two\n");
                    return -1;
                }
                if (!strcmp(tok, "fp32") || !strcmp(tok, "tf32"))
                    o->prec[o->n_prec++] = RAP_FP32;
                else if (!strcmp(tok, "bf16"))
                    o->prec[o->n_prec++] = RAP_BF16;
                else {
                    fprintf(stderr, "bench_train: --precision %s: expected fp32 or bf16\n", tok);
                    return -1;
                }
            }
            if (!o->n_prec) {
                fprintf(stderr, "bench_train: --precision: empty\n");
                return -1;
            }
            o->set_prec = true;
        } else if (!strcmp(a, "--steps") || !strcmp(a, "--warmup") || !strcmp(a, "--k") ||
                   !strcmp(a, "--max-rows") || !strcmp(a, "--seed")) {
            NEED_VALUE();
            long long lo = !strcmp(a, "--warmup") || !strcmp(a, "--seed") || !strcmp(a, "--max-rows") ? 0 : 1;
            if (parse_int(v, lo, &x)) {
                fprintf(stderr, "bench_train: %s %s: expected an integer >= %lld\n", a, v, lo);
                return -1;
            }
            if (!strcmp(a, "--steps")) {
                o->steps = (int)x;
                o->set_steps = true;
            } else if (!strcmp(a, "--warmup")) {
                o->warmup = (int)x;
                o->set_warmup = true;
            } else if (!strcmp(a, "--k")) {
                o->k = (int)x;
                o->set_k = true;
            } else if (!strcmp(a, "--max-rows")) {
                o->max_rows = x;
                o->set_max_rows = true;
            } else {
                o->seed = (uint64_t)x;
            }
        } else if (!strcmp(a, "--optimizer")) {
            NEED_VALUE();
            if (!strcmp(v, "sgd"))
                o->opt = RAP_SGD;
            else if (!strcmp(v, "adagrad"))
                o->opt = RAP_ADAGRAD;
            else if (!strcmp(v, "rowwise-adagrad"))
                o->opt = RAP_ROWWISE_ADAGRAD;
            else {
                fprintf(stderr, "bench_train: --optimizer %s: expected sgd, adagrad or "
                                "rowwise-adagrad\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--emb-dtype")) {
            NEED_VALUE();
            if (!strcmp(v, "fp32"))
                o->emb_dtype = RAP_EMB_FP32;
            else if (!strcmp(v, "bf16"))
                o->emb_dtype = RAP_EMB_BF16;
            else if (!strcmp(v, "fp16"))
                o->emb_dtype = RAP_EMB_FP16;
            else {
                fprintf(stderr, "bench_train: --emb-dtype %s: expected fp32, bf16 or fp16\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--data-dir")) {
            NEED_VALUE();
            o->data_dir = v;
        } else if (!strcmp(a, "--json")) {
            NEED_VALUE();
            o->json = v;
        } else if (!strcmp(a, "--gen-only")) {
            o->gen_only = true;
        } else if (!strcmp(a, "--no-graph")) {
            o->no_graph = true;
        } else if (!strcmp(a, "--cpu")) {
            o->force_cpu = true;
        } else if (!strcmp(a, "--shared-model")) {
            o->shared_model = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        } else {
            fprintf(stderr, "bench_train: unknown option %s\n", a);
            return -1;
        }
#undef NEED_VALUE
    }
    return 0;
}

/* Defaults that depend on the device: the paper's sizes on the GPU, a tiny
 * configuration on the CPU. Explicit options win. */
static void device_defaults(options *o, rap_device dev)
{
    bool gpu = dev == RAP_GPU;
    if (!o->set_batches) {
        if (gpu) {
            o->batches[0] = 4096;
            o->batches[1] = 8192;
            o->batches[2] = 65536;
            o->n_batches = 3;
        } else {
            o->batches[0] = 256;
            o->n_batches = 1;
        }
    }
    if (!o->set_prec) {
        o->prec[0] = RAP_FP32;
        o->prec[1] = RAP_BF16;
        o->n_prec = gpu ? 2 : 1;
    }
    if (!o->set_steps)
        o->steps = gpu ? 100 : 5;
    if (!o->set_warmup)
        o->warmup = gpu ? 10 : 1;
    if (!o->set_k)
        o->k = gpu ? 8 : 2;
    if (!o->set_max_rows)
        o->max_rows = gpu ? 0 : 10000;
}

/* ------------------------------------------------------------ data */

/* K batches of B rows on the host, in the file's record layout. */
typedef struct {
    int64_t B;
    int k;
    float *label;    /* (K, B) */
    float *dense;    /* (K, B, ND) */
    int64_t *ids;    /* (K, T, B) */
    int64_t ids_sum; /* over all K batches and tables (checks that the peer reads the same) */
    double label_sum, dense_sum;
} host_data;

static uint64_t rnd(uint64_t *s) { return rap_splitmix64(s); }
static double rnd01(uint64_t *s) { return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0); }

static void host_data_free(host_data *h)
{
    rap_free(h->label);
    rap_free(h->dense);
    rap_free(h->ids);
    memset(h, 0, sizeof *h);
}

/* Generates K batches of B rows for tables of rows[T], deterministically
 * from seed and B. */
static rap_status host_data_make(host_data *h, int64_t B, int K, const int64_t *rows,
                                 uint64_t seed)
{
    memset(h, 0, sizeof *h);
    h->B = B;
    h->k = K;
    h->label = rap_malloc(sizeof(float) * (size_t)(K * B), "bench_train labels");
    h->dense = rap_malloc(sizeof(float) * (size_t)(K * B * N_DENSE), "bench_train dense");
    h->ids = rap_malloc(sizeof(int64_t) * (size_t)(K * B * N_TABLES), "bench_train ids");
    if (!h->label || !h->dense || !h->ids) {
        host_data_free(h);
        return rap_fail(RAP_ERR_NOMEM, "bench_train: host data for batch %lld x %d",
                        (long long)B, K);
    }
    for (int k = 0; k < K; k++) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)B * 1000003ULL + (uint64_t)k;
        rnd(&s);
        float *lab = h->label + (int64_t)k * B;
        float *den = h->dense + (int64_t)k * B * N_DENSE;
        int64_t *ids = h->ids + (int64_t)k * B * N_TABLES;
        for (int64_t r = 0; r < B; r++) {
            lab[r] = rnd01(&s) < 0.25 ? 1.0f : 0.0f;
            h->label_sum += lab[r];
            for (int j = 0; j < N_DENSE; j++) {
                double null_rate = (double)((j * 7) % 11) * 0.04; /* 0 .. 40 % */
                double scale = 2.0 + (double)(j % 5) * 1.5;      /* log-range of the counts */
                double c = 0;
                if (rnd01(&s) >= null_rate) {
                    double w = rnd01(&s);
                    c = floor(exp(w * w * scale * 2.3) - 1.0);
                }
                den[r * N_DENSE + j] = (float)log1p(c);
                h->dense_sum += den[r * N_DENSE + j];
            }
        }
        for (int t = 0; t < N_TABLES; t++) {
            double lr = log((double)rows[t] + 1.0);
            for (int64_t r = 0; r < B; r++) {
                /* Zipf(1)-like rank in [1, R]: P(rank <= x) ~ log(x) / log(R) */
                uint64_t rank = (uint64_t)exp(rnd01(&s) * lr);
                if (rank < 1)
                    rank = 1;
                uint64_t id = rap_mix64(rank * 0x9e3779b97f4a7c15ULL + (uint64_t)t) % (uint64_t)rows[t];
                ids[t * B + r] = (int64_t)id;
                h->ids_sum += (int64_t)id;
            }
        }
    }
    return RAP_OK;
}

static size_t record_bytes(int64_t B)
{
    return (size_t)B * 4 * (1 + N_DENSE) + (size_t)N_TABLES * (size_t)B * 8;
}

/* Writes h to path in the layout of the header comment. */
static rap_status host_data_write(const host_data *h, const int64_t *rows, uint64_t seed,
                                  const char *path)
{
    int64_t words[16 + N_TABLES];
    memset(words, 0, sizeof words);
    size_t header_bytes = (sizeof words + 63) / 64 * 64;
    memcpy(&words[0], "RAPTRN1\0", 8);
    words[1] = 1;
    words[2] = (int64_t)header_bytes;
    words[3] = h->k;
    words[4] = h->B;
    words[5] = N_DENSE;
    words[6] = N_TABLES;
    words[7] = EMB_DIM;
    words[8] = (int64_t)seed;
    for (int t = 0; t < N_TABLES; t++)
        words[16 + t] = rows[t];
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    FILE *f = rap_out_file(o);
    char pad[64] = {0};
    bool ok = fwrite(words, sizeof words, 1, f) == 1 &&
              (header_bytes == sizeof words ||
               fwrite(pad, header_bytes - sizeof words, 1, f) == 1);
    int64_t B = h->B;
    for (int k = 0; k < h->k && ok; k++) {
        ok = fwrite(h->label + k * B, sizeof(float) * (size_t)B, 1, f) == 1 &&
             fwrite(h->dense + k * B * N_DENSE, sizeof(float) * (size_t)(B * N_DENSE), 1, f) == 1 &&
             fwrite(h->ids + k * B * N_TABLES, sizeof(int64_t) * (size_t)(B * N_TABLES), 1, f) == 1;
    }
    if (!ok) {
        rap_status st = rap_fail(RAP_ERR_IO, "bench_train: writing %s failed: %s", path,
                                 strerror(errno));
        rap_out_abort(o);
        return st;
    }
    RAP_TRY(rap_out_commit(o));
    printf("wrote %s (%d batches of %lld rows, %.1f MB)\n", path, h->k, (long long)B,
           (double)(header_bytes + record_bytes(B) * (size_t)h->k) / 1e6);
    return RAP_OK;
}

/* K batches as the model reads them: device pointers on the GPU, host
 * pointers on the CPU. */
typedef struct {
    rap_device dev;
    void *block;      /* one allocation for everything */
    rap_model_batch b[64];
    int k;
} model_data;

static void model_data_free(model_data *md)
{
#ifdef RAP_HAVE_CUDA
    if (md->dev == RAP_GPU && md->block)
        cudaFree(md->block);
#endif
    if (md->dev == RAP_CPU)
        rap_free(md->block);
    memset(md, 0, sizeof *md);
}

/* Copies h to the device dev, laid out as one block: offsets (B+1), then
 * per batch label, dense, ids. */
static rap_status model_data_make(model_data *md, const host_data *h, rap_device dev)
{
    memset(md, 0, sizeof *md);
    md->dev = dev;
    md->k = h->k;
    int64_t B = h->B;
    if (h->k > 64)
        return rap_fail(RAP_ERR_ARG, "bench_train: --k %d: at most 64", h->k);
    size_t off_bytes = ((size_t)(B + 1) * 8 + 255) / 256 * 256;
    size_t rec = (record_bytes(B) + 255) / 256 * 256;
    size_t total = off_bytes + rec * (size_t)h->k;
    int64_t *off = rap_malloc((size_t)(B + 1) * 8, "bench_train offsets");
    if (!off)
        return rap_fail(RAP_ERR_NOMEM, "bench_train: offsets");
    for (int64_t i = 0; i <= B; i++)
        off[i] = i;
    rap_status s = RAP_OK;
    if (dev == RAP_CPU) {
        md->block = rap_malloc(total, "bench_train batch block");
        if (!md->block)
            s = rap_fail(RAP_ERR_NOMEM, "bench_train: %zu bytes for the batches", total);
    } else {
#ifdef RAP_HAVE_CUDA
        cudaError_t e = cudaMalloc(&md->block, total);
        if (e != cudaSuccess) {
            md->block = NULL;
            s = rap_fail(RAP_ERR_NOMEM, "bench_train: cudaMalloc of %zu bytes for the batches: %s",
                         total, cudaGetErrorString(e));
        }
#else
        s = rap_fail(RAP_ERR_NO_GPU, "bench_train: built without CUDA");
#endif
    }
    char *base = md->block;
    for (int k = 0; k < h->k && s == RAP_OK; k++) {
        char *r = base + off_bytes + rec * (size_t)k;
        const void *src[3] = {h->label + k * B, h->dense + k * B * N_DENSE, h->ids + k * B * N_TABLES};
        size_t len[3] = {(size_t)B * 4, (size_t)B * N_DENSE * 4, (size_t)B * N_TABLES * 8};
        char *dst[3] = {r, r + len[0], r + len[0] + len[1]};
        for (int q = 0; q < 3 && s == RAP_OK; q++) {
            if (dev == RAP_CPU) {
                memcpy(dst[q], src[q], len[q]);
            } else {
#ifdef RAP_HAVE_CUDA
                cudaError_t e = cudaMemcpy(dst[q], src[q], len[q], cudaMemcpyHostToDevice);
                if (e != cudaSuccess)
                    s = rap_fail(RAP_ERR_CUDA, "bench_train: upload of batch %d: %s", k,
                                 cudaGetErrorString(e));
#endif
            }
        }
        rap_model_batch *mb = &md->b[k];
        memset(mb, 0, sizeof *mb);
        mb->rows = B;
        mb->label = (const float *)dst[0];
        mb->dense = (const float *)dst[1];
        for (int t = 0; t < N_TABLES; t++) {
            mb->off[t] = (const int64_t *)base;
            mb->ids[t] = (const int64_t *)dst[2] + (size_t)t * (size_t)B;
        }
    }
    if (s == RAP_OK) {
        if (dev == RAP_CPU) {
            memcpy(base, off, (size_t)(B + 1) * 8);
        } else {
#ifdef RAP_HAVE_CUDA
            cudaError_t e = cudaMemcpy(base, off, (size_t)(B + 1) * 8, cudaMemcpyHostToDevice);
            if (e != cudaSuccess)
                s = rap_fail(RAP_ERR_CUDA, "bench_train: upload of offsets: %s", cudaGetErrorString(e));
#endif
        }
    }
    rap_free(off);
    if (s != RAP_OK)
        model_data_free(md);
    return s;
}

/* ------------------------------------------------------------ results */

typedef struct {
    int64_t batch;
    rap_precision prec;
    char device[4];
    int steps, k;
    double step_ms;          /* median of per-step time (eager) */
    double phase_ms[N_PHASES];
    double loop_ms;          /* mean step over the whole timed loop, gaps included */
    double graph_step_ms;    /* median replay / K; 0 when not measured */
    char graph_note[160];
    double loss_first, loss_last;
    double mem_used_gb;      /* device memory in use after the steps (whole GPU) */
    double model_gb;         /* rap_model_bytes */
    double model_alloc_gb;   /* device memory taken by rap_model_create */
    double create_s;
    int64_t ids_sum;
    double label_sum, dense_sum;
    char error[300];
} result;

static result g_res[MAX_RESULTS];
static int g_nres;
static char g_gpu_name[128] = "";
static char g_device[4] = "cpu";

static double best_ms(const result *r)
{
    if (r->graph_step_ms > 0 && (r->step_ms <= 0 || r->graph_step_ms < r->step_ms))
        return r->graph_step_ms;
    return r->step_ms;
}

static void write_json(const options *o, const char *path)
{
    rap_out *out;
    if (rap_out_open(path, NULL, &out) != RAP_OK) {
        fprintf(stderr, "bench_train: %s\n", rap_last_error());
        return;
    }
    FILE *f = rap_out_file(out);
    fprintf(f, "{\n  \"bench\": \"rap\",\n  \"device\": \"%s\",\n  \"gpu\": ", g_device);
    rap_json_put_str(f, g_gpu_name);
    fprintf(f, ",\n  \"model\": {\"n_dense\": %d, \"n_tables\": %d, \"emb_dim\": %d, "
               "\"bot\": [512, 256, 128], \"top\": [1024, 1024, 512, 256, 1], "
               "\"optimizer\": \"%s\", \"emb_dtype\": \"%s\", \"lr\": 0.1, \"max_rows\": %lld},\n",
            N_DENSE, N_TABLES, EMB_DIM, rap_optimizer_name(o->opt),
            rap_emb_dtype_name(o->emb_dtype), (long long)o->max_rows);
    fprintf(f, "  \"steps\": %d, \"warmup\": %d, \"k\": %d, \"seed\": %llu,\n  \"results\": [\n",
            o->steps, o->warmup, o->k, (unsigned long long)o->seed);
    for (int i = 0; i < g_nres; i++) {
        const result *r = &g_res[i];
        double bm = best_ms(r);
        fprintf(f,
                "    {\"batch\": %lld, \"precision\": \"%s\", \"device\": \"%s\", \"steps\": %d, "
                "\"k\": %d, \"step_ms\": %.6f, \"samples_per_s\": %.1f, \"loop_ms\": %.6f, "
                "\"graph_step_ms\": %.6f, \"graph_samples_per_s\": %.1f, \"graph_note\": ",
                (long long)r->batch, r->prec == RAP_BF16 ? "bf16" : "fp32", r->device, r->steps,
                r->k, r->step_ms, r->step_ms > 0 ? (double)r->batch / (r->step_ms * 1e-3) : 0,
                r->loop_ms, r->graph_step_ms,
                r->graph_step_ms > 0 ? (double)r->batch / (r->graph_step_ms * 1e-3) : 0);
        rap_json_put_str(f, r->graph_note);
        fprintf(f, ", \"best_samples_per_s\": %.1f, \"best_mode\": \"%s\", \"phase_ms\": {",
                bm > 0 ? (double)r->batch / (bm * 1e-3) : 0,
                bm > 0 && bm == r->graph_step_ms ? "graph" : "eager");
        for (int p = 0; p < N_PHASES; p++)
            fprintf(f, "\"%s\": %.6f%s", g_phase_name[p], r->phase_ms[p], p + 1 < N_PHASES ? ", " : "");
        fprintf(f, "}, \"loss_first\": %.6f, \"loss_last\": %.6f, \"gpu_mem_used_gb\": %.3f, "
                   "\"model_bytes_gb\": %.3f, \"model_alloc_gb\": %.3f, \"create_s\": %.2f, "
                   "\"ids_sum\": %lld, \"label_sum\": %.1f, \"dense_sum\": %.3f, \"error\": ",
                isfinite(r->loss_first) ? r->loss_first : -1.0,
                isfinite(r->loss_last) ? r->loss_last : -1.0, r->mem_used_gb, r->model_gb,
                r->model_alloc_gb, r->create_s, (long long)r->ids_sum, r->label_sum, r->dense_sum);
        rap_json_put_str(f, r->error);
        fprintf(f, "}%s\n", i + 1 < g_nres ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (rap_out_commit(out) != RAP_OK)
        fprintf(stderr, "bench_train: %s\n", rap_last_error());
}

static void print_header(void)
{
    printf("%-4s %7s %-5s %10s %12s %10s %12s %9s %9s %9s %9s %8s %8s\n", "dev", "batch", "prec",
           "step ms", "samples/s", "graph ms", "graph smp/s", "emb_fwd", "mlp_fwd", "mlp_bwd",
           "emb_bwd", "loss", "mem GB");
}

static void print_result(const result *r)
{
    if (r->error[0]) {
        printf("%-4s %7lld %-5s FAILED: %s\n", r->device, (long long)r->batch,
               r->prec == RAP_BF16 ? "bf16" : "fp32", r->error);
        fflush(stdout);
        return;
    }
    printf("%-4s %7lld %-5s %10.4f %12.0f %10.4f %12.0f %9.4f %9.4f %9.4f %9.4f %8.4f %8.2f\n",
           r->device, (long long)r->batch, r->prec == RAP_BF16 ? "bf16" : "fp32", r->step_ms,
           r->step_ms > 0 ? (double)r->batch / (r->step_ms * 1e-3) : 0, r->graph_step_ms,
           r->graph_step_ms > 0 ? (double)r->batch / (r->graph_step_ms * 1e-3) : 0,
           r->phase_ms[0], r->phase_ms[1], r->phase_ms[2], r->phase_ms[3], r->loss_last,
           r->mem_used_gb);
    if (r->graph_note[0])
        printf("     graph: %s\n", r->graph_note);
    fflush(stdout);
}

/* ------------------------------------------------------------ timing */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef rap_status (*phase_fn)(rap_model *, const rap_model_batch *);
static const phase_fn g_phase[N_PHASES] = {rap_model_emb_forward, rap_model_mlp_forward,
                                           rap_model_mlp_backward, rap_model_emb_backward};

static rap_status step(rap_model *m, const rap_model_batch *b)
{
    for (int p = 0; p < N_PHASES; p++)
        RAP_TRY(g_phase[p](m, b));
    return RAP_OK;
}

static rap_status get_loss(rap_model *m, double *loss)
{
    RAP_TRY(rap_model_last_loss(m, loss));
    if (!isfinite(*loss))
        return rap_fail(RAP_ERR_INTERNAL, "bench_train: the loss is %f (not finite)", *loss);
    return RAP_OK;
}

/* CPU: wall clock around each phase. */
static rap_status time_cpu(rap_model *m, const model_data *md, int steps, result *r)
{
    double *t = rap_malloc(sizeof(double) * (size_t)steps * (N_PHASES + 1), "bench_train times");
    if (!t)
        return rap_fail(RAP_ERR_NOMEM, "bench_train: timing array");
    rap_status s = RAP_OK;
    double t_start = rap_now();
    for (int i = 0; i < steps && s == RAP_OK; i++) {
        const rap_model_batch *b = &md->b[i % md->k];
        double t0 = rap_now(), tp = t0;
        for (int p = 0; p < N_PHASES && s == RAP_OK; p++) {
            s = g_phase[p](m, b);
            double tn = rap_now();
            t[(size_t)(p + 1) * steps + i] = (tn - tp) * 1e3;
            tp = tn;
        }
        t[i] = (tp - t0) * 1e3;
    }
    if (s == RAP_OK) {
        r->loop_ms = (rap_now() - t_start) * 1e3 / steps;
        r->step_ms = median(t, steps);
        for (int p = 0; p < N_PHASES; p++)
            r->phase_ms[p] = median(t + (size_t)(p + 1) * steps, steps);
    }
    rap_free(t);
    return s;
}

#ifdef RAP_HAVE_CUDA
#define CU(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            s = rap_fail(RAP_ERR_CUDA, "bench_train: %s:%d: %s: %s", __FILE__, __LINE__, #call, \
                         cudaGetErrorString(e_));                                            \
            goto done;                                                                       \
        }                                                                                    \
    } while (0)

/* GPU: CUDA events on the model's stream between the phases of every
 * step; all recorded first, read after one synchronisation. */
static rap_status time_gpu(rap_model *m, cudaStream_t st, const model_data *md, int steps,
                           result *r)
{
    rap_status s = RAP_OK;
    int ne = steps * (N_PHASES + 1);
    cudaEvent_t *ev = rap_calloc(sizeof(cudaEvent_t) * (size_t)ne, "bench_train events");
    double *t = rap_malloc(sizeof(double) * (size_t)steps * (N_PHASES + 1), "bench_train times");
    int created = 0;
    if (!ev || !t) {
        s = rap_fail(RAP_ERR_NOMEM, "bench_train: timing arrays");
        goto done;
    }
    for (; created < ne; created++)
        CU(cudaEventCreate(&ev[created]));
    for (int i = 0; i < steps && s == RAP_OK; i++) {
        const rap_model_batch *b = &md->b[i % md->k];
        cudaEvent_t *e = ev + (size_t)i * (N_PHASES + 1);
        CU(cudaEventRecord(e[0], st));
        for (int p = 0; p < N_PHASES && s == RAP_OK; p++) {
            s = g_phase[p](m, b);
            if (s == RAP_OK)
                CU(cudaEventRecord(e[p + 1], st));
        }
    }
    if (s != RAP_OK)
        goto done;
    CU(cudaStreamSynchronize(st));
    CU(cudaGetLastError());
    for (int i = 0; i < steps; i++) {
        cudaEvent_t *e = ev + (size_t)i * (N_PHASES + 1);
        float f;
        CU(cudaEventElapsedTime(&f, e[0], e[N_PHASES]));
        t[i] = f;
        for (int p = 0; p < N_PHASES; p++) {
            CU(cudaEventElapsedTime(&f, e[p], e[p + 1]));
            t[(size_t)(p + 1) * steps + i] = f;
        }
    }
    {
        float f;
        CU(cudaEventElapsedTime(&f, ev[0], ev[ne - 1]));
        r->loop_ms = f / steps;
    }
    r->step_ms = median(t, steps);
    for (int p = 0; p < N_PHASES; p++)
        r->phase_ms[p] = median(t + (size_t)(p + 1) * steps, steps);
done:
    for (int i = 0; i < created; i++)
        cudaEventDestroy(ev[i]);
    rap_free(ev);
    rap_free(t);
    return s;
}

/* Captures the K steps (one per batch) as one CUDA graph on the model's
 * stream and times its replays. A model that cannot be captured is
 * reported in r->graph_note, not as a failure of the whole measurement. */
static rap_status time_graph(rap_model *m, cudaStream_t st, const model_data *md, int steps,
                             result *r)
{
    rap_status s = RAP_OK;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int reps = (steps + md->k - 1) / md->k;
    if (reps < 7)
        reps = 7;
    double *t = rap_malloc(sizeof(double) * (size_t)reps, "bench_train graph times");
    if (!t)
        return rap_fail(RAP_ERR_NOMEM, "bench_train: graph timing array");
    CU(cudaStreamSynchronize(st));
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    rap_status cs = RAP_OK;
    for (int k = 0; k < md->k && cs == RAP_OK; k++)
        cs = step(m, &md->b[k]);
    char why[200] = "";
    if (cs != RAP_OK)
        snprintf(why, sizeof why, "%s", rap_last_error());
    cudaError_t ce = cudaStreamEndCapture(st, &g);
    if (cs != RAP_OK || ce != cudaSuccess || !g) {
        cudaGetLastError(); /* clear the capture's error */
        snprintf(r->graph_note, sizeof r->graph_note, "capture failed: %s%s%s",
                 cs != RAP_OK ? why : "", cs != RAP_OK && ce != cudaSuccess ? "; " : "",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "");
        rap_clear_error();
        goto done;
    }
    ce = cudaGraphInstantiate(&ge, g, 0);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        ge = NULL;
        snprintf(r->graph_note, sizeof r->graph_note, "instantiate failed: %s",
                 cudaGetErrorString(ce));
        goto done;
    }
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int i = 0; i < 2; i++)
        CU(cudaGraphLaunch(ge, st));
    CU(cudaStreamSynchronize(st));
    for (int i = 0; i < reps; i++) {
        float f;
        CU(cudaEventRecord(e0, st));
        CU(cudaGraphLaunch(ge, st));
        CU(cudaEventRecord(e1, st));
        CU(cudaEventSynchronize(e1));
        CU(cudaEventElapsedTime(&f, e0, e1));
        t[i] = f / md->k;
    }
    r->graph_step_ms = median(t, reps);
    snprintf(r->graph_note, sizeof r->graph_note, "%d steps per graph, %d replays", md->k, reps);
done:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    rap_free(t);
    return s;
}

static double gpu_used_gb(void)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return -1;
    return (double)(tot - fr) / 1e9;
}
#endif /* RAP_HAVE_CUDA */

/* ------------------------------------------------------------ main */

static rap_status run_batch(const options *o, rap_model *m, void *stream, const host_data *h,
                            result *r)
{
    rap_device dev = rap_model_device(m);
    model_data md;
    RAP_TRY(model_data_make(&md, h, dev));
    rap_status s = RAP_OK;
    /* warm-up: at least one step, so that the first loss exists */
    for (int i = 0; i < (o->warmup > 0 ? o->warmup : 1) && s == RAP_OK; i++)
        s = step(m, &md.b[i % md.k]);
    if (s == RAP_OK)
        s = rap_model_sync(m);
    if (s == RAP_OK)
        s = get_loss(m, &r->loss_first);
    if (s == RAP_OK) {
        if (dev == RAP_CPU) {
            s = time_cpu(m, &md, o->steps, r);
        } else {
#ifdef RAP_HAVE_CUDA
            s = time_gpu(m, (cudaStream_t)stream, &md, o->steps, r);
#endif
        }
    }
    if (s == RAP_OK)
        s = get_loss(m, &r->loss_last);
#ifdef RAP_HAVE_CUDA
    if (s == RAP_OK && dev == RAP_GPU && !o->no_graph) {
        /* a graph that fails leaves the eager numbers standing */
        rap_status gs = time_graph(m, (cudaStream_t)stream, &md, o->steps, r);
        double l = 0;
        if (gs == RAP_OK && r->graph_step_ms > 0)
            gs = get_loss(m, &l);
        if (gs != RAP_OK) {
            snprintf(r->graph_note, sizeof r->graph_note, "failed: %s", rap_last_error());
            r->graph_step_ms = 0;
        } else if (r->graph_step_ms > 0) {
            r->loss_last = l;
        }
        /* a sticky error (the context is gone) fails the measurement */
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess)
            s = rap_fail(RAP_ERR_CUDA, "bench_train: after the CUDA graph: %s",
                         cudaGetErrorString(e));
    }
    if (dev == RAP_GPU)
        r->mem_used_gb = gpu_used_gb();
#else
    (void)stream;
#endif
    model_data_free(&md);
    return s;
}

static void result_error(result *r, rap_status s)
{
    snprintf(r->error, sizeof r->error, "%s: %s", rap_status_name(s), rap_last_error());
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    options o;
    if (parse_options(argc, argv, &o)) {
        usage();
        return 2;
    }
    char why[256] = "";
    rap_device dev = !o.force_cpu && rap_gpu_available(why, sizeof why) ? RAP_GPU : RAP_CPU;
    device_defaults(&o, dev);
    snprintf(g_device, sizeof g_device, "%s", dev == RAP_GPU ? "gpu" : "cpu");
    if (dev == RAP_CPU)
        printf("bench_train: running on the CPU (%s): tiny configuration, numbers are not the "
               "benchmark\n", o.force_cpu ? "--cpu" : why[0] ? why : "no GPU");
#ifdef RAP_HAVE_CUDA
    if (dev == RAP_GPU) {
        struct cudaDeviceProp prop;
        int d = 0;
        if (cudaGetDevice(&d) == cudaSuccess && cudaGetDeviceProperties(&prop, d) == cudaSuccess)
            snprintf(g_gpu_name, sizeof g_gpu_name, "%s", prop.name);
        printf("bench_train: GPU %s\n", g_gpu_name);
    }
#endif

    int64_t rows[N_TABLES];
    double total_rows = 0;
    for (int t = 0; t < N_TABLES; t++) {
        rows[t] = t < 26 ? g_kaggle_card[t] : 4;
        if (o.max_rows > 0 && rows[t] > o.max_rows)
            rows[t] = o.max_rows;
        total_rows += (double)rows[t];
    }
    int64_t max_b = 0;
    for (int i = 0; i < o.n_batches; i++)
        max_b = o.batches[i] > max_b ? o.batches[i] : max_b;
    printf("bench_train: %d tables, %.0f rows in all (%.2f GB of %s weights), dim %d, "
           "bottom 512-256-128, top 1024-1024-512-256-1, %s lr 0.1; K=%d batches, %d warm-up "
           "+ %d timed steps\n", N_TABLES, total_rows,
           total_rows * EMB_DIM * (double)rap_emb_dtype_size(o.emb_dtype) / 1e9,
           rap_emb_dtype_name(o.emb_dtype), EMB_DIM, rap_optimizer_name(o.opt), o.k, o.warmup,
           o.steps);

    /* data for every batch size, written first so that the peer has it even
     * if the model fails */
    host_data hd[MAX_LIST];
    memset(hd, 0, sizeof hd);
    int failures = 0;
    for (int i = 0; i < o.n_batches; i++) {
        double t0 = rap_now();
        rap_status s = host_data_make(&hd[i], o.batches[i], o.k, rows, o.seed);
        if (s == RAP_OK && o.data_dir) {
            char path[1024];
            snprintf(path, sizeof path, "%s/train_b%lld.bin", o.data_dir, (long long)o.batches[i]);
            s = host_data_write(&hd[i], rows, o.seed, path);
        }
        if (s != RAP_OK) {
            fprintf(stderr, "bench_train: data for batch %lld: %s\n", (long long)o.batches[i],
                    rap_last_error());
            return 1;
        }
        printf("data: batch %lld x %d generated in %.2f s (ids sum %lld, labels %.0f positive "
               "of %lld)\n", (long long)o.batches[i], o.k, rap_now() - t0,
               (long long)hd[i].ids_sum, hd[i].label_sum, (long long)(o.batches[i] * o.k));
    }
    if (o.gen_only) {
        for (int i = 0; i < o.n_batches; i++)
            host_data_free(&hd[i]);
        return 0;
    }

    void *stream = NULL;
#ifdef RAP_HAVE_CUDA
    if (dev == RAP_GPU) {
        cudaStream_t st;
        cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            fprintf(stderr, "bench_train: cudaStreamCreate: %s\n", cudaGetErrorString(e));
            return 1;
        }
        stream = st;
    }
#endif
    if (o.json)
        write_json(&o, o.json);
    const int groups = o.shared_model ? 1 : o.n_batches; /* models a precision */
    for (int pg = 0; pg < o.n_prec * groups; pg++) {
        const int pi = pg / groups, gi = pg % groups;
        const int b0 = o.shared_model ? 0 : gi, b1 = o.shared_model ? o.n_batches : gi + 1;
        rap_model_config c;
        rap_model_config_defaults(&c);
        c.n_dense = N_DENSE;
        c.n_tables = N_TABLES;
        for (int t = 0; t < N_TABLES; t++)
            c.table_rows[t] = rows[t];
        c.emb_dim = EMB_DIM;
        c.n_bot = 3;
        c.bot[0] = 512;
        c.bot[1] = 256;
        c.bot[2] = 128;
        c.n_top = 5;
        c.top[0] = 1024;
        c.top[1] = 1024;
        c.top[2] = 512;
        c.top[3] = 256;
        c.top[4] = 1;
        c.batch = o.shared_model ? max_b : o.batches[gi];
        c.optimizer = o.opt;
        c.emb_dtype = o.emb_dtype;
        c.lr = 0.1f;
        c.precision = o.prec[pi];
        c.strict_fp32 = false;
        c.seed = 1;
        c.stream = stream;
        const char *pname = o.prec[pi] == RAP_BF16 ? "bf16" : "fp32";
        double model_gb = (double)rap_model_bytes(&c, dev) / 1e9;
        printf("model %s, batch %lld: creating (needs %.2f GB by rap_model_bytes)...\n", pname,
               (long long)c.batch, model_gb);
#ifdef RAP_HAVE_CUDA
        double used0 = dev == RAP_GPU ? gpu_used_gb() : 0;
#endif
        double t0 = rap_now();
        rap_model *m = NULL;
        rap_status s = rap_model_config_check(&c);
        if (s == RAP_OK)
            s = rap_model_create(&c, dev, &m);
        if (s == RAP_OK)
            s = rap_model_sync(m);
        double create_s = rap_now() - t0;
        double alloc_gb = 0;
#ifdef RAP_HAVE_CUDA
        if (dev == RAP_GPU)
            alloc_gb = gpu_used_gb() - used0;
#endif
        if (s == RAP_OK)
            printf("model %s: created in %.1f s (device memory taken: %.2f GB)\n", pname, create_s,
                   alloc_gb);
        print_header();
        for (int i = b0; i < b1; i++) {
            if (g_nres == MAX_RESULTS)
                break;
            result *r = &g_res[g_nres++];
            memset(r, 0, sizeof *r);
            r->batch = o.batches[i];
            r->prec = o.prec[pi];
            r->steps = o.steps;
            r->k = o.k;
            r->model_gb = model_gb;
            r->model_alloc_gb = alloc_gb;
            r->create_s = create_s;
            r->ids_sum = hd[i].ids_sum;
            r->label_sum = hd[i].label_sum;
            r->dense_sum = hd[i].dense_sum;
            snprintf(r->device, sizeof r->device, "%s", g_device);
            if (s != RAP_OK) {
                result_error(r, s);
            } else {
                rap_status bs = run_batch(&o, m, stream, &hd[i], r);
                if (bs != RAP_OK)
                    result_error(r, bs);
            }
            if (r->error[0])
                failures++;
            print_result(r);
            if (o.json)
                write_json(&o, o.json);
#ifdef RAP_HAVE_CUDA
            /* a sticky CUDA error poisons the context: stop clearly */
            if (dev == RAP_GPU && r->error[0]) {
                cudaError_t e = cudaDeviceSynchronize();
                if (e != cudaSuccess) {
                    fprintf(stderr, "bench_train: the CUDA context is broken (%s); stopping\n",
                            cudaGetErrorString(e));
                    rap_model_free(m);
                    return 1;
                }
            }
#endif
        }
        rap_model_free(m);
    }
#ifdef RAP_HAVE_CUDA
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
#endif
    for (int i = 0; i < o.n_batches; i++)
        host_data_free(&hd[i]);
    if (o.json)
        printf("wrote %s\n", o.json);
    if (failures)
        fprintf(stderr, "bench_train: %d measurement(s) failed\n", failures);
    return failures ? 1 : 0;
}
