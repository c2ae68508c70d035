/*
 * test_model_gpu.c -- the GPU model against the CPU reference: both
 * backends start from the same weights (same config and seed), so
 * forward logits and loss, MLP gradients, and all weights (tables too)
 * after SGD and Adagrad steps must agree: tightly with strict_fp32, looser
 * with TF32 and bf16. Plus: a CUDA graph of the step replays to the same
 * weights as direct calls, batches smaller than B, small and odd D, an
 * impossible config fails with a memory message, and a batch with more
 * ids than the backward holds is reported. Every test skips without a GPU.
 */
#include "model/gpu/gpu_model.h"
#include "model/model.h"
#include "run/graph.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>

/* ------------------------------------------------------------ helpers */

/* A small model: ND 5, T tables (first ones tiny: many duplicate ids). */
static void small_config(rap_model_config *c, int D, rap_optimizer opt, rap_precision prec,
                         bool strict)
{
    rap_model_config_defaults(c);
    c->n_dense = 5;
    c->n_tables = 4;
    const int64_t rows[4] = {3, 17, 200, 1000};
    for (int t = 0; t < 4; t++)
        c->table_rows[t] = rows[t];
    c->emb_dim = D;
    c->n_bot = 2;
    c->bot[0] = 16;
    c->bot[1] = D;
    c->n_top = 3;
    c->top[0] = 32;
    c->top[1] = 16;
    c->top[2] = 1;
    c->batch = 64;
    c->optimizer = opt;
    c->lr = opt == RAP_SGD ? 0.05f : 0.02f;
    c->adagrad_init = 0.01f;
    c->precision = prec;
    c->strict_fp32 = strict;
    c->seed = 11;
    c->threads = 2;
}

/* A batch on the host and its copy on the device. */
typedef struct {
    int64_t rows;
    int T;
    float *dense, *label;       /* host */
    int64_t *off[32], *ids[32]; /* host */
    float *d_dense, *d_label;   /* device */
    int64_t *d_off[32], *d_ids[32];
    rap_model_batch host, dev;
} tbatch;

static void tbatch_free(tbatch *b)
{
    free(b->dense);
    free(b->label);
    cudaFree(b->d_dense);
    cudaFree(b->d_label);
    for (int t = 0; t < b->T; t++) {
        free(b->off[t]);
        free(b->ids[t]);
        cudaFree(b->d_off[t]);
        cudaFree(b->d_ids[t]);
    }
    memset(b, 0, sizeof *b);
}

/* rows rows; bag sizes 0..max_bag (duplicate ids inside bags too), at most
 * cap ids in all (the GPU's capacity B*T when cap > 0). */
static bool tbatch_make(tbatch *b, const rap_model_config *c, int64_t rows, uint64_t seed,
                        int max_bag, int64_t cap)
{
    memset(b, 0, sizeof *b);
    b->rows = rows;
    b->T = c->n_tables;
    uint64_t s = seed * 7919 + 1;
    b->dense = malloc(sizeof(float) * (size_t)(rows * c->n_dense));
    b->label = malloc(sizeof(float) * (size_t)rows);
    if (!b->dense || !b->label)
        return false;
    for (int64_t i = 0; i < rows * c->n_dense; i++)
        b->dense[i] = (float)((rap_splitmix64(&s) >> 40) % 2000) / 500.0f - 1.0f;
    for (int64_t r = 0; r < rows; r++)
        b->label[r] = (float)(rap_splitmix64(&s) & 1);
    int64_t used = 0;
    for (int t = 0; t < b->T; t++) {
        b->off[t] = malloc(sizeof(int64_t) * (size_t)(rows + 1));
        b->ids[t] = malloc(sizeof(int64_t) * (size_t)(rows * max_bag + 1));
        if (!b->off[t] || !b->ids[t])
            return false;
        int64_t n = 0;
        b->off[t][0] = 0;
        for (int64_t r = 0; r < rows; r++) {
            int k = (int)(rap_splitmix64(&s) % (uint64_t)(max_bag + 1));
            if (cap > 0 && used + k > cap)
                k = 0;
            for (int j = 0; j < k; j++) {
                int64_t id = (int64_t)(rap_splitmix64(&s) % (uint64_t)c->table_rows[t]);
                if (j > 0 && (rap_splitmix64(&s) & 3) == 0)
                    id = b->ids[t][n - 1]; /* a duplicate inside the bag */
                b->ids[t][n++] = id;
            }
            used += k;
            b->off[t][r + 1] = n;
        }
    }
    /* device copies */
    if (cudaMalloc((void **)&b->d_dense, sizeof(float) * (size_t)(rows * c->n_dense)) ||
        cudaMalloc((void **)&b->d_label, sizeof(float) * (size_t)rows))
        return false;
    cudaMemcpy(b->d_dense, b->dense, sizeof(float) * (size_t)(rows * c->n_dense),
               cudaMemcpyHostToDevice);
    cudaMemcpy(b->d_label, b->label, sizeof(float) * (size_t)rows, cudaMemcpyHostToDevice);
    memset(&b->host, 0, sizeof b->host);
    memset(&b->dev, 0, sizeof b->dev);
    b->host.rows = b->dev.rows = rows;
    b->host.dense = b->dense;
    b->host.label = b->label;
    b->dev.dense = b->d_dense;
    b->dev.label = b->d_label;
    for (int t = 0; t < b->T; t++) {
        int64_t n = b->off[t][rows];
        if (cudaMalloc((void **)&b->d_off[t], sizeof(int64_t) * (size_t)(rows + 1)) ||
            cudaMalloc((void **)&b->d_ids[t], sizeof(int64_t) * (size_t)(n + 1)))
            return false;
        cudaMemcpy(b->d_off[t], b->off[t], sizeof(int64_t) * (size_t)(rows + 1),
                   cudaMemcpyHostToDevice);
        if (n)
            cudaMemcpy(b->d_ids[t], b->ids[t], sizeof(int64_t) * (size_t)n,
                       cudaMemcpyHostToDevice);
        b->host.off[t] = b->off[t];
        b->host.ids[t] = b->ids[t];
        b->dev.off[t] = b->d_off[t];
        b->dev.ids[t] = b->d_ids[t];
    }
    /* the models run on non-blocking streams: wait for the copies */
    return cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess;
}

static const rap_model_batch *bat(const rap_model *m, const tbatch *b)
{
    return rap_model_device(m) == RAP_GPU ? &b->dev : &b->host;
}

/* Counts elements with |a - b| > atol + rtol*|b|; reports the first few. */
static int compare(rap_test_ctx *t, const char *what, const float *a, const float *b,
                   size_t n, float atol, float rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= atol + rtol * fabsf(b[i]))) {
            if (bad < 4)
                rap_test_fail(t, __FILE__, __LINE__, "%s[%zu]: gpu %.8g cpu %.8g (diff %.3g)",
                              what, i, (double)a[i], (double)b[i], (double)d);
            bad++;
        }
    }
    return bad;
}

/* Compares every tensor (and the Adagrad state) of two models. */
static int compare_all(rap_test_ctx *t, const rap_model *g, const rap_model *c, float atol,
                       float rtol, bool state)
{
    int bad = 0;
    for (int i = 0; i < rap_model_n_tensors(c); i++) {
        const rap_tensor_info *x = rap_model_tensor(c, i);
        size_t n = (size_t)(x->rows * x->cols);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        if (!a || !b) {
            free(a);
            free(b);
            return bad + 1;
        }
        for (int st = 0; st < (state ? 2 : 1); st++) {
            rap_status s1 = st ? rap_model_get_state(g, i, a) : rap_model_get(g, i, a);
            rap_status s2 = st ? rap_model_get_state(c, i, b) : rap_model_get(c, i, b);
            if (s1 != RAP_OK || s2 != RAP_OK) {
                rap_test_fail(t, __FILE__, __LINE__, "get %s: %s", x->name, rap_last_error());
                bad++;
                continue;
            }
            char what[96];
            snprintf(what, sizeof what, "%s%s", x->name, st ? " (state)" : "");
            bad += compare(t, what, a, b, n, atol, rtol);
        }
        free(a);
        free(b);
    }
    return bad;
}

static rap_status step(rap_model *m, const tbatch *b)
{
    const rap_model_batch *x = bat(m, b);
    RAP_TRY(rap_model_emb_forward(m, x));
    RAP_TRY(rap_model_mlp_forward(m, x));
    RAP_TRY(rap_model_mlp_backward(m, x));
    return rap_model_emb_backward(m, x);
}

/* CPU and GPU models of config c, several steps on rows-row batches; all
 * weights compared after each step. */
static void check_steps(rap_test_ctx *t, const rap_model_config *c, int64_t rows, int steps,
                        float atol, float rtol)
{
    rap_model *gm = NULL, *cm = NULL;
    REQUIRE_OK(rap_model_create(c, RAP_GPU, &gm));
    rap_status s = rap_model_create(c, RAP_CPU, &cm);
    if (s != RAP_OK) {
        rap_model_free(gm);
        REQUIRE_OK(s);
    }
    CHECK(compare_all(t, gm, cm, 0.0f, 0.0f, c->optimizer == RAP_ADAGRAD) == 0);
    /* table 0 before, to see it move */
    float before[3 * 256], after[3 * 256]; /* table 0: 3 rows of D <= 256 */
    CHECK_OK(rap_model_get(gm, 0, before));
    for (int k = 0; k < steps && !t->failures; k++) {
        tbatch b;
        if (!tbatch_make(&b, c, rows, 100 + (uint64_t)k, 2, c->batch * c->n_tables)) {
            rap_test_fail(t, __FILE__, __LINE__, "batch: %s", cudaGetErrorString(cudaGetLastError()));
            tbatch_free(&b);
            break;
        }
        CHECK_OK(step(gm, &b));
        CHECK_OK(step(cm, &b));
        double lg = 0, lc = 0;
        CHECK_OK(rap_model_last_loss(gm, &lg));
        CHECK_OK(rap_model_last_loss(cm, &lc));
        CHECK_MSG(fabs(lg - lc) <= atol + rtol * fabs(lc), "step %d loss gpu %.8g cpu %.8g", k,
                  lg, lc);
        CHECK(compare_all(t, gm, cm, atol, rtol, c->optimizer == RAP_ADAGRAD) == 0);
        tbatch_free(&b);
    }
    CHECK_OK(rap_model_get(gm, 0, after));
    float moved = 0;
    for (int i = 0; i < 3 * c->emb_dim; i++)
        moved = fmaxf(moved, fabsf(after[i] - before[i]));
    CHECK_MSG(moved > 1e-5f, "table 0 did not change (%g)", (double)moved);
    rap_model_free(gm);
    rap_model_free(cm);
}
#endif /* RAP_HAVE_CUDA */

/* -------------------------------------------------------------- tests */

RAP_TEST(model_gpu_forward_matches_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const int dims[3] = {8, 6, 136}; /* float4 path, scalar path, > 128 columns */
    for (int di = 0; di < 3; di++) {
        rap_model_config c;
        small_config(&c, dims[di], RAP_SGD, RAP_FP32, true);
        rap_model *gm = NULL, *cm = NULL;
        REQUIRE_OK(rap_model_create(&c, RAP_GPU, &gm));
        REQUIRE_OK(rap_model_create(&c, RAP_CPU, &cm));
        tbatch b;
        REQUIRE(tbatch_make(&b, &c, c.batch, 1 + (uint64_t)di, 2, c.batch * c.n_tables));
        float lg[64], lc[64];
        CHECK_OK(rap_model_predict(gm, &b.dev, lg));
        CHECK_OK(rap_model_predict(cm, &b.host, lc));
        char what[32];
        snprintf(what, sizeof what, "logits D=%d", dims[di]);
        CHECK(compare(t, what, lg, lc, (size_t)c.batch, 1e-5f, 1e-4f) == 0);
        CHECK_OK(rap_model_emb_forward(gm, &b.dev));
        CHECK_OK(rap_model_mlp_forward(gm, &b.dev));
        CHECK_OK(rap_model_emb_forward(cm, &b.host));
        CHECK_OK(rap_model_mlp_forward(cm, &b.host));
        double a = 0, e = 0;
        CHECK_OK(rap_model_last_loss(gm, &a));
        CHECK_OK(rap_model_last_loss(cm, &e));
        CHECK_MSG(fabs(a - e) <= 1e-5 * fabs(e) + 1e-6, "D=%d loss gpu %.9g cpu %.9g", dims[di],
                  a, e);
        CHECK(a > 0.1 && a < 5.0);
        tbatch_free(&b);
        rap_model_free(gm);
        rap_model_free(cm);
    }
#endif
}

RAP_TEST(model_gpu_grads_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_SGD, RAP_FP32, true);
    rap_model *gm = NULL, *cm = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_GPU, &gm));
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &cm));
    tbatch b;
    REQUIRE(tbatch_make(&b, &c, c.batch, 5, 2, c.batch * c.n_tables));
    CHECK_OK(step(gm, &b));
    CHECK_OK(step(cm, &b));
    int checked = 0;
    for (int i = 0; i < rap_model_n_tensors(cm); i++) {
        const rap_tensor_info *x = rap_model_tensor(cm, i);
        if (strncmp(x->name, "emb_l", 5) == 0)
            continue;
        size_t n = (size_t)(x->rows * x->cols);
        float *a = malloc(sizeof(float) * n), *e = malloc(sizeof(float) * n);
        REQUIRE(a && e);
        CHECK_OK(rap_gpu_model_get_grad(gm, i, a));
        CHECK_OK(rap_model_get_grad(cm, i, e));
        float mx = 0;
        for (size_t k = 0; k < n; k++)
            mx = fmaxf(mx, fabsf(e[k]));
        CHECK_MSG(mx > 0.0f, "%s: zero gradient on the CPU", x->name);
        CHECK(compare(t, x->name, a, e, n, 1e-6f + 1e-4f * mx, 1e-3f) == 0);
        free(a);
        free(e);
        checked++;
    }
    CHECK(checked == 2 * (c.n_bot + c.n_top));
    float g1[1];
    CHECK(rap_gpu_model_get_grad(gm, 0, g1) == RAP_ERR_ARG); /* a table */
    tbatch_free(&b);
    rap_model_free(gm);
    rap_model_free(cm);
#endif
}

RAP_TEST(model_gpu_sgd_steps_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_SGD, RAP_FP32, true);
    check_steps(t, &c, c.batch, 3, 2e-6f, 1e-4f);
#endif
}

RAP_TEST(model_gpu_adagrad_steps_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_ADAGRAD, RAP_FP32, true);
    check_steps(t, &c, c.batch, 3, 2e-6f, 1e-4f);
    /* odd D (scalar kernels) and D > 128 (column blocks) */
    small_config(&c, 6, RAP_ADAGRAD, RAP_FP32, true);
    check_steps(t, &c, c.batch, 2, 2e-6f, 1e-4f);
    small_config(&c, 136, RAP_SGD, RAP_FP32, true);
    check_steps(t, &c, c.batch, 2, 2e-6f, 1e-4f);
#endif
}

/* Long runs of one id (a 3-row table, B large) cross many 32-pair chunks:
 * the split-run path of the update. */
RAP_TEST(model_gpu_long_runs_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_ADAGRAD, RAP_FP32, true);
    c.batch = 3000;
    check_steps(t, &c, c.batch, 2, 5e-6f, 2e-4f);
#endif
}

/* The paper's shapes where they matter to the kernels: D 128 (float4, 32
 * lanes per bag), 27 tables (F 28: the interaction's 4x4 tiles, widths 13
 * and 506 padded), with narrower MLPs and small tables to keep the CPU
 * side quick. */
#ifdef RAP_HAVE_CUDA
static void paper_shape(rap_model_config *c, rap_optimizer opt)
{
    small_config(c, 128, opt, RAP_FP32, true);
    c->n_dense = 13;
    c->n_tables = 27;
    for (int t = 0; t < 27; t++)
        c->table_rows[t] = t == 0 ? 3 : 10 + 37 * t;
    c->n_bot = 2;
    c->bot[0] = 64;
    c->bot[1] = 128;
    c->n_top = 3;
    c->top[0] = 96;
    c->top[1] = 32;
    c->top[2] = 1;
    c->batch = 300;
}
#endif

RAP_TEST(model_gpu_paper_shape_matches_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    paper_shape(&c, RAP_SGD);
    check_steps(t, &c, c.batch, 2, 2e-6f, 2e-4f);
    paper_shape(&c, RAP_ADAGRAD);
    check_steps(t, &c, 123, 2, 2e-6f, 2e-4f);
#endif
}

/* Enough rows that every warp of the pipelined interaction kernels (a
 * persistent grid) takes several rows, and the GEMMs are tuned on real
 * sizes. */
RAP_TEST(model_gpu_paper_shape_many_rows_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    paper_shape(&c, RAP_SGD);
    c.batch = 4000;
    check_steps(t, &c, c.batch, 2, 2e-6f, 2e-4f);
    check_steps(t, &c, 2500, 1, 2e-6f, 2e-4f);
#endif
}

/* The other paths match the CPU too: no tuning (the heuristics' first
 * algorithm, fused epilogues), all GEMMs plain with the fallback kernels,
 * the unpipelined interaction forward, the pipelined backward. */
RAP_TEST(model_gpu_fallback_paths_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const char *vars[4] = {"RAP_GPU_TUNE", "RAP_GPU_UNFUSED", "RAP_GPU_IA_PIPE",
                           "RAP_GPU_IA_PIPE_BWD"};
    const char *vals[4] = {"0", "1", "0", "1"};
    for (int v = 0; v < 4 && !t->failures; v++) {
        const char *old = getenv(vars[v]);
        char keep[64] = "";
        if (old)
            snprintf(keep, sizeof keep, "%s", old);
        setenv(vars[v], vals[v], 1);
        rap_model_config c;
        paper_shape(&c, RAP_ADAGRAD);
        c.batch = 1500;
        check_steps(t, &c, c.batch, 2, 2e-6f, 2e-4f);
        small_config(&c, 8, RAP_SGD, RAP_FP32, true);
        check_steps(t, &c, 37, 2, 2e-6f, 1e-4f);
        if (old)
            setenv(vars[v], keep, 1);
        else
            unsetenv(vars[v]);
    }
#endif
}

RAP_TEST(model_gpu_small_batch_matches_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_SGD, RAP_FP32, true);
    check_steps(t, &c, 37, 2, 2e-6f, 1e-4f);
    check_steps(t, &c, 1, 1, 2e-6f, 1e-4f);
#endif
}

RAP_TEST(model_gpu_tf32_close_to_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_SGD, RAP_FP32, false);
    rap_model *gm = NULL, *cm = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_GPU, &gm));
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &cm));
    tbatch b;
    REQUIRE(tbatch_make(&b, &c, c.batch, 9, 2, c.batch * c.n_tables));
    float lg[64], lc[64];
    CHECK_OK(rap_model_predict(gm, &b.dev, lg));
    CHECK_OK(rap_model_predict(cm, &b.host, lc));
    CHECK(compare(t, "tf32 logits", lg, lc, (size_t)c.batch, 5e-3f, 2e-2f) == 0);
    CHECK_OK(step(gm, &b));
    CHECK_OK(step(cm, &b));
    CHECK(compare_all(t, gm, cm, 2e-4f, 2e-2f, false) == 0);
    tbatch_free(&b);
    rap_model_free(gm);
    rap_model_free(cm);
#endif
}

RAP_TEST(model_gpu_bf16_close_to_fp32)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c16, c32;
    small_config(&c16, 8, RAP_SGD, RAP_BF16, false);
    small_config(&c32, 8, RAP_SGD, RAP_FP32, true);
    rap_model *a = NULL, *e = NULL;
    REQUIRE_OK(rap_model_create(&c16, RAP_GPU, &a));
    REQUIRE_OK(rap_model_create(&c32, RAP_GPU, &e));
    tbatch b;
    REQUIRE(tbatch_make(&b, &c16, c16.batch, 21, 2, c16.batch * c16.n_tables));
    float la[64], le[64];
    CHECK_OK(rap_model_predict(a, &b.dev, la));
    CHECK_OK(rap_model_predict(e, &b.dev, le));
    CHECK(compare(t, "bf16 logits", la, le, (size_t)c16.batch, 3e-2f, 5e-2f) == 0);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(step(a, &b));
        CHECK_OK(step(e, &b));
    }
    double l16 = 0, l32 = 0;
    CHECK_OK(rap_model_last_loss(a, &l16));
    CHECK_OK(rap_model_last_loss(e, &l32));
    CHECK_MSG(fabs(l16 - l32) <= 2e-2 * fabs(l32) + 1e-3, "loss bf16 %.6g fp32 %.6g", l16, l32);
    CHECK(compare_all(t, a, e, 5e-3f, 5e-2f, false) == 0);
    tbatch_free(&b);
    rap_model_free(a);
    rap_model_free(e);
#endif
}

/* The four phases captured once into a CUDA graph and replayed give the
 * weights of direct calls. */
static void check_graph(rap_test_ctx *t, rap_optimizer opt, rap_precision prec, int batch)
{
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, opt, prec, prec == RAP_FP32);
    c.batch = batch;
    cudaStream_t st = NULL;
    REQUIRE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess);
    rap_model *direct = NULL, *graphed = NULL;
    rap_model_config cg = c;
    cg.stream = st;
    REQUIRE_OK(rap_model_create(&c, RAP_GPU, &direct));
    REQUIRE_OK(rap_model_create(&cg, RAP_GPU, &graphed));
    tbatch b;
    const int64_t rows = (int64_t)batch * 25 / 32; /* 64: 50 */
    REQUIRE(tbatch_make(&b, &c, rows, 33, 2, c.batch * c.n_tables));
    /* one direct step on both first: loads every kernel (lazy module
     * loading) and sets the GEMMs for these rows before the capture */
    CHECK_OK(step(direct, &b));
    CHECK_OK(step(graphed, &b));
    CHECK_OK(rap_model_sync(graphed));
    for (int k = 0; k < 3; k++)
        CHECK_OK(step(direct, &b));
    /* the runtime's capture (run/graph.h): memset nodes become kernels */
    void *exec = NULL;
    int memsets = 0;
    REQUIRE_OK(rap_run_graph_begin(st));
    rap_status s = step(graphed, &b);
    rap_status se = rap_run_graph_end(st, &exec, &memsets);
    REQUIRE_OK(s);
    CHECK_OK(se);
    if (se == RAP_OK) {
        /* CUB's radix sort of the backward clears its counters with
         * memsets once its keys exceed one tile */
        const char *keep = getenv("RAP_GRAPH_MEMSET");
        if (batch >= 2048 && !(keep && strcmp(keep, "node") == 0))
            CHECK_MSG(memsets > 0, "no memset node replaced at batch %d", batch);
        for (int k = 0; k < 3; k++)
            CHECK_OK(rap_run_graph_launch(exec, st));
        CHECK(cudaStreamSynchronize(st) == cudaSuccess);
        double l1 = 0, l2 = 0;
        CHECK_OK(rap_model_last_loss(direct, &l1));
        CHECK_OK(rap_model_last_loss(graphed, &l2));
        CHECK_MSG(fabs(l1 - l2) <= 1e-6 * fabs(l1), "loss direct %.9g graph %.9g", l1, l2);
        CHECK(compare_all(t, graphed, direct, 1e-7f, 1e-5f, opt == RAP_ADAGRAD) == 0);
    }
    rap_run_graph_free(exec);
    tbatch_free(&b);
    rap_model_free(direct);
    rap_model_free(graphed);
    cudaStreamDestroy(st);
#else
    (void)t;
    (void)opt;
    (void)prec;
    (void)batch;
#endif
}

RAP_TEST(model_gpu_graph_replay_matches_direct)
{
    REQUIRE_GPU();
    check_graph(t, RAP_SGD, RAP_FP32, 64);
    check_graph(t, RAP_ADAGRAD, RAP_FP32, 64);
    check_graph(t, RAP_ADAGRAD, RAP_BF16, 64);
    check_graph(t, RAP_ADAGRAD, RAP_FP32, 4096); /* memset nodes in the capture */
}

RAP_TEST(model_gpu_oom_message)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 64, RAP_ADAGRAD, RAP_FP32, false);
    c.bot[1] = 64;
    c.table_rows[2] = 2000000000; /* 2 x 2e9 rows x 64 x 4 bytes x 2: about 2 TB */
    c.table_rows[3] = 2000000000;
    rap_model *m = NULL;
    rap_status s = rap_model_create(&c, RAP_GPU, &m);
    CHECK_MSG(s == RAP_ERR_NOMEM, "status %s: %s", rap_status_name(s), rap_last_error());
    CHECK(m == NULL);
    CHECK_MSG(strstr(rap_last_error(), "GiB") != NULL, "message: %s", rap_last_error());
    rap_model_free(m);
#endif
}

RAP_TEST(model_gpu_ids_overflow_reported)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, RAP_SGD, RAP_FP32, true);
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_GPU, &m));
    tbatch b;
    /* bags of up to 4 ids, no cap: about 2x the capacity B*T */
    REQUIRE(tbatch_make(&b, &c, c.batch, 3, 4, 0));
    int64_t total = 0;
    for (int tt = 0; tt < c.n_tables; tt++)
        total += b.off[tt][b.rows];
    REQUIRE(total > c.batch * c.n_tables * RAP_GPU_IDS_PER_BAG);
    CHECK_OK(step(m, &b));
    rap_status s = rap_model_sync(m);
    CHECK_MSG(s == RAP_ERR_ARG, "status %s", rap_status_name(s));
    CHECK(strstr(rap_last_error(), "more ids") != NULL);
    CHECK_OK(rap_model_sync(m)); /* reported once */
    tbatch_free(&b);
    rap_model_free(m);
#endif
}

/* A second model with the same GEMMs takes the first one's tuning choices
 * from the process's cache (no timing), and trains as the first does. */
RAP_TEST(model_gpu_tune_cache_reused)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const char *old = getenv("RAP_GPU_TUNE");
    char keep[64] = "";
    if (old)
        snprintf(keep, sizeof keep, "%s", old);
    setenv("RAP_GPU_TUNE", "1", 1);
    rap_model_config c;
    small_config(&c, 16, RAP_ADAGRAD, RAP_FP32, false);
    c.batch = 2048;
    rap_model *a = NULL, *b = NULL;
    rap_status sa = rap_model_create(&c, RAP_GPU, &a);
    const long long h0 = rap_gpu_tune_cache_hits();
    rap_status sb = sa == RAP_OK ? rap_model_create(&c, RAP_GPU, &b) : sa;
    const long long h1 = rap_gpu_tune_cache_hits();
    if (old)
        setenv("RAP_GPU_TUNE", keep, 1);
    else
        unsetenv("RAP_GPU_TUNE");
    REQUIRE_OK(sa);
    REQUIRE_OK(sb);
    /* every GEMM of b (at least one per layer op) came from the cache */
    CHECK_MSG(h1 - h0 >= c.n_bot + c.n_top - 1, "%lld cache hits for the second model",
              h1 - h0);
    tbatch t2;
    REQUIRE(tbatch_make(&t2, &c, c.batch, 5, 2, c.batch * c.n_tables));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(step(a, &t2));
        CHECK_OK(step(b, &t2));
    }
    double la = 0, lb = 0;
    CHECK_OK(rap_model_last_loss(a, &la));
    CHECK_OK(rap_model_last_loss(b, &lb));
    CHECK_MSG(fabs(la - lb) <= 1e-5 * fabs(la), "loss %.9g and %.9g", la, lb);
    tbatch_free(&t2);
    rap_model_free(a);
    rap_model_free(b);
#endif
}
