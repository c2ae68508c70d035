/*
 * test_model_gpu.c -- the GPU model against the CPU reference: both
 * backends start from the same weights (same config and seed), so
 * forward logits and loss, MLP gradients, and all weights (tables too)
 * after SGD and Adagrad steps must agree: tightly with strict_fp32, looser
 * with TF32 and bf16. Plus: a CUDA graph of the step replays to the same
 * weights as direct calls, batches smaller than B, small and odd D, an
 * impossible config fails with a memory message, and a batch with more
 * ids than the backward holds is reported. 16-bit tables and row-wise
 * Adagrad (model_gpu_emb16_*): the pooled forward, the stochastically
 * rounded update and the row-wise state give the CPU's bits exactly, over
 * several steps, odd sizes, every table type and optimizer; a graph
 * replay draws fresh rounding bits each step. The interaction and MLP
 * kernels alone: test_model_gpu_kernels.c. Every test skips without a
 * GPU.
 */
#include "model/cpu/cpu_model.h"
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
            int64_t sr = x->rows, sc = x->cols; /* row-wise: a table's state is (rows, 1) */
            if (s1 == RAP_OK && s2 == RAP_OK && st)
                s1 = rap_model_state_shape(c, i, &sr, &sc);
            if (s1 != RAP_OK || s2 != RAP_OK) {
                rap_test_fail(t, __FILE__, __LINE__, "get %s: %s", x->name, rap_last_error());
                bad++;
                continue;
            }
            char what[96];
            snprintf(what, sizeof what, "%s%s", x->name, st ? " (state)" : "");
            bad += compare(t, what, a, b, st ? (size_t)(sr * sc) : n, atol, rtol);
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
    CHECK(compare_all(t, gm, cm, 0.0f, 0.0f, c->optimizer != RAP_SGD) == 0);
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
        CHECK(compare_all(t, gm, cm, atol, rtol, c->optimizer != RAP_SGD) == 0);
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

/* Environment settings of the GPU model's alternative paths: up to three
 * NAME=VALUE pairs each, set for one create, then put back. */
typedef struct {
    const char *name[3], *value[3];
} env_set;

#ifdef RAP_HAVE_CUDA
static void env_apply(const env_set *e, char keep[3][64], bool had[3])
{
    for (int k = 0; k < 3 && e->name[k]; k++) {
        const char *old = getenv(e->name[k]);
        had[k] = old != NULL;
        snprintf(keep[k], 64, "%s", old ? old : "");
        setenv(e->name[k], e->value[k], 1);
    }
}

static void env_restore(const env_set *e, char keep[3][64], const bool had[3])
{
    for (int k = 0; k < 3 && e->name[k]; k++) {
        if (had[k])
            setenv(e->name[k], keep[k], 1);
        else
            unsetenv(e->name[k]);
    }
}
#endif

/* The other paths match the CPU too: no tuning (the heuristics' first
 * algorithm, fused epilogues), all GEMMs plain with the fallback kernels,
 * the first interaction kernels (v1: its unpipelined forward, its
 * pipelined backward), the second (v2: no prefetch), the first MLP epilogue choices and kernels (v1,
 * fused and plain), the second (v2), v3 without the DRELU_BGRAD epilogue, plain forwards
 * (the own bitmask, which cuBLASLt's DRELU epilogues then read where the
 * create-time probe saw them read it right; with tuning off they take it). */
#ifdef RAP_HAVE_CUDA
static const env_set g_variants[] = {
    {{"RAP_GPU_TUNE"}, {"0"}},
    {{"RAP_GPU_UNFUSED"}, {"1"}},
    {{"RAP_GPU_INTERACT", "RAP_GPU_IA_PIPE"}, {"v1", "0"}},
    {{"RAP_GPU_INTERACT", "RAP_GPU_IA_PIPE_BWD"}, {"v1", "1"}},
    {{"RAP_GPU_INTERACT"}, {"v1"}},
    {{"RAP_GPU_INTERACT"}, {"v2"}},
    {{"RAP_GPU_MLP"}, {"v1"}},
    {{"RAP_GPU_MLP"}, {"v2"}},
    {{"RAP_GPU_MLP", "RAP_GPU_UNFUSED"}, {"v1", "1"}},
    {{"RAP_GPU_MLP", "RAP_GPU_TUNE"}, {"v1", "0"}},
    {{"RAP_GPU_DRELU_BGRAD"}, {"0"}},
    {{"RAP_GPU_DRELU_BGRAD", "RAP_GPU_TUNE"}, {"0", "0"}},
    {{"RAP_GPU_UNFUSED"}, {"fwd"}},
    {{"RAP_GPU_UNFUSED", "RAP_GPU_TUNE"}, {"fwd", "0"}},
};
#define N_VARIANTS (int)(sizeof g_variants / sizeof g_variants[0])
#endif

RAP_TEST(model_gpu_fallback_paths_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    for (int v = 0; v < N_VARIANTS && !t->failures; v++) {
        char keep[3][64];
        bool had[3] = {false, false, false};
        env_apply(&g_variants[v], keep, had);
        rap_model_config c;
        paper_shape(&c, RAP_ADAGRAD);
        c.batch = 1500;
        check_steps(t, &c, c.batch, 2, 2e-6f, 2e-4f);
        check_steps(t, &c, 1499, 1, 2e-6f, 2e-4f);
        small_config(&c, 8, RAP_SGD, RAP_FP32, true);
        check_steps(t, &c, 37, 2, 2e-6f, 1e-4f);
        env_restore(&g_variants[v], keep, had);
        if (t->failures)
            rap_test_fail(t, __FILE__, __LINE__, "(variant %s=%s%s%s)", g_variants[v].name[0],
                          g_variants[v].value[0], g_variants[v].name[1] ? " + " : "",
                          g_variants[v].name[1] ? g_variants[v].name[1] : "");
    }
#endif
}

#ifdef RAP_HAVE_CUDA
/* After one step of rows rows: every MLP gradient of gm (precision prec)
 * within frac of the tensor's largest CPU gradient, the loss within
 * loss_rel; the logits of predict within atol + rtol. */
static void check_grads_close(rap_test_ctx *t, const rap_model_config *cg,
                              const rap_model_config *cc, int64_t rows, float frac,
                              double loss_rel, float atol, float rtol, const char *what)
{
    rap_model *gm = NULL, *cm = NULL;
    REQUIRE_OK(rap_model_create(cg, RAP_GPU, &gm));
    rap_status s = rap_model_create(cc, RAP_CPU, &cm);
    if (s != RAP_OK) {
        rap_model_free(gm);
        REQUIRE_OK(s);
    }
    tbatch b;
    if (!tbatch_make(&b, cc, rows, 77 + (uint64_t)rows, 2, cc->batch * cc->n_tables)) {
        rap_test_fail(t, __FILE__, __LINE__, "%s: batch", what);
        goto out;
    }
    float *lg = malloc(sizeof(float) * (size_t)rows), *lc = malloc(sizeof(float) * (size_t)rows);
    if (lg && lc) {
        CHECK_OK(rap_model_predict(gm, &b.dev, lg));
        CHECK_OK(rap_model_predict(cm, &b.host, lc));
        char w2[96];
        snprintf(w2, sizeof w2, "%s logits", what);
        CHECK(compare(t, w2, lg, lc, (size_t)rows, atol, rtol) == 0);
    }
    free(lg);
    free(lc);
    CHECK_OK(step(gm, &b));
    CHECK_OK(step(cm, &b));
    double l1 = 0, l2 = 0;
    CHECK_OK(rap_model_last_loss(gm, &l1));
    CHECK_OK(rap_model_last_loss(cm, &l2));
    CHECK_MSG(fabs(l1 - l2) <= loss_rel * fabs(l2) + 1e-4, "%s: loss gpu %.7g cpu %.7g", what, l1,
              l2);
    for (int i = 0; i < rap_model_n_tensors(cm) && !t->failures; i++) {
        const rap_tensor_info *x = rap_model_tensor(cm, i);
        if (strncmp(x->name, "emb_l", 5) == 0)
            continue;
        const size_t n = (size_t)(x->rows * x->cols);
        float *a = malloc(sizeof(float) * n), *e = malloc(sizeof(float) * n);
        if (a && e && rap_gpu_model_get_grad(gm, i, a) == RAP_OK &&
            rap_model_get_grad(cm, i, e) == RAP_OK) {
            float mx = 0;
            for (size_t k = 0; k < n; k++)
                mx = fmaxf(mx, fabsf(e[k]));
            char w2[128];
            snprintf(w2, sizeof w2, "%s grad %s", what, x->name);
            CHECK_MSG(mx > 0.0f, "%s: zero on the CPU", w2);
            /* a tensor of a few elements (the logit bias: one sum over the
             * rows, much of it cancelling) gets the rounding of the terms'
             * magnitudes too, about 0.5 in all */
            const float tiny = n < 8 ? 4.0f * frac * 0.02f : 0.0f;
            CHECK(compare(t, w2, a, e, n, frac * mx + tiny, 0.0f) == 0);
        } else {
            rap_test_fail(t, __FILE__, __LINE__, "%s: gradients of %s: %s", what, x->name,
                          rap_last_error());
        }
        free(a);
        free(e);
    }
out:
    tbatch_free(&b);
    rap_model_free(gm);
    rap_model_free(cm);
}
#endif

/* bf16 and TF32 (where cuBLASLt's fused epilogues, DRELU_BGRAD among
 * them, are offered) in every variant: the paper's shapes at an odd row
 * count against the strict fp32 CPU model; the MLP gradients (bias
 * gradients made by the layer above included) within a few percent of
 * each tensor's largest (8 % bf16, 3 % TF32). */
RAP_TEST(model_gpu_variants_close_to_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    for (int v = -1; v < N_VARIANTS && !t->failures; v++) {
        env_set none = {{NULL}, {NULL}};
        const env_set *e = v < 0 ? &none : &g_variants[v];
        char keep[3][64];
        bool had[3] = {false, false, false};
        env_apply(e, keep, had);
        for (int p = 0; p < 2 && !t->failures; p++) {
            rap_model_config cg, cc;
            paper_shape(&cc, RAP_SGD);
            cc.batch = 1500;
            cg = cc;
            cg.precision = p ? RAP_BF16 : RAP_FP32;
            cg.strict_fp32 = false;
            char what[96];
            snprintf(what, sizeof what, "%s %s%s%s", p ? "bf16" : "tf32",
                     e->name[0] ? e->name[0] : "default", e->name[0] ? "=" : "",
                     e->value[0] ? e->value[0] : "");
            /* a wrong mask or bias gradient is off by about the tensor's
             * largest gradient; bf16 and TF32 rounding by a few percent */
            if (p)
                check_grads_close(t, &cg, &cc, 1499, 8e-2f, 2e-2, 3e-2f, 5e-2f, what);
            else
                check_grads_close(t, &cg, &cc, 1499, 3e-2f, 1e-2, 5e-3f, 2e-2f, what);
        }
        env_restore(e, keep, had);
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
static void check_graph(rap_test_ctx *t, rap_optimizer opt, rap_precision prec, int batch,
                        rap_emb_dtype dt)
{
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 8, opt, prec, prec == RAP_FP32);
    c.batch = batch;
    c.emb_dtype = dt;
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
        CHECK(compare_all(t, graphed, direct, 1e-7f, 1e-5f, opt != RAP_SGD) == 0);
        /* 16 bits: the replays drew the bits of steps 2, 3, 4 (the device
         * counter), as the direct calls did: the same bits */
        uint64_t k1 = 0, k2 = 0;
        CHECK_OK(rap_model_get_emb_step(direct, &k1));
        CHECK_OK(rap_model_get_emb_step(graphed, &k2));
        CHECK_MSG(k1 == 4 && k2 == 4, "update counters: direct %llu, graph %llu",
                  (unsigned long long)k1, (unsigned long long)k2);
        for (int i = 0; dt != RAP_EMB_FP32 && i < c.n_tables; i++) {
            const size_t n = (size_t)c.table_rows[i] * (size_t)c.emb_dim;
            uint16_t *x = (uint16_t *)malloc(2 * n), *y = (uint16_t *)malloc(2 * n);
            REQUIRE(x && y);
            CHECK_OK(rap_model_get_rows(direct, i, 0, c.table_rows[i], dt, x));
            CHECK_OK(rap_model_get_rows(graphed, i, 0, c.table_rows[i], dt, y));
            CHECK_MSG(!memcmp(x, y, 2 * n), "table %d: graph replay bits differ", i);
            free(x);
            free(y);
        }
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
    (void)dt;
#endif
}

RAP_TEST(model_gpu_graph_replay_matches_direct)
{
    REQUIRE_GPU();
    check_graph(t, RAP_SGD, RAP_FP32, 64, RAP_EMB_FP32);
    check_graph(t, RAP_ADAGRAD, RAP_FP32, 64, RAP_EMB_FP32);
    check_graph(t, RAP_ADAGRAD, RAP_BF16, 64, RAP_EMB_FP32);
    check_graph(t, RAP_ADAGRAD, RAP_FP32, 4096, RAP_EMB_FP32); /* memset nodes in the capture */
}

RAP_TEST(model_gpu_emb16_graph_replay_matches_direct)
{
    REQUIRE_GPU();
    /* bit for bit: GEMM tuning off (both models pick the same algorithms) */
    rap_test_env env;
    rap_test_tune_off(&env);
    check_graph(t, RAP_ROWWISE_ADAGRAD, RAP_FP32, 64, RAP_EMB_BF16);
    check_graph(t, RAP_SGD, RAP_FP32, 64, RAP_EMB_FP16);
    rap_test_tune_restore(&env);
}

/* ------------------------------------------------ 16-bit tables, row-wise */

#ifdef RAP_HAVE_CUDA
/* The gradient of the pooled embeddings for batch b, (rows, T, D): a bag
 * whose ids each occur once in its table's batch gets random floats (its
 * rows' summed gradient is that float, exactly, on both backends); any
 * other bag multiples of 2^-8 in [-1/4, 1/4], whose sums are exact in any
 * order. So the GPU's aggregation (sorted chunks, heads and tails) and the
 * CPU's (row order) give the same gradient bits, and from there the update
 * (emb_math.h, half.h) must give the same bits. */
static bool exact_demb(const tbatch *b, const rap_model_config *c, uint64_t seed, float *demb)
{
    uint64_t s = seed;
    const int T = c->n_tables, D = c->emb_dim;
    for (int t = 0; t < T; t++) {
        int *cnt = (int *)calloc((size_t)c->table_rows[t], sizeof(int));
        if (!cnt)
            return false;
        for (int64_t p = 0; p < b->off[t][b->rows]; p++)
            cnt[b->ids[t][p]]++;
        for (int64_t r = 0; r < b->rows; r++) {
            bool once = true;
            for (int64_t p = b->off[t][r]; p < b->off[t][r + 1]; p++)
                once = once && cnt[b->ids[t][p]] == 1;
            float *g = demb + (r * T + t) * D;
            for (int d = 0; d < D; d++)
                g[d] = once ? (float)(((double)(rap_splitmix64(&s) >> 11) * 0x1p-53 - 0.5) * 0.5)
                            : (float)((int)(rap_splitmix64(&s) % 129) - 64) * 0x1p-8f;
        }
        free(cnt);
    }
    return true;
}

/* Tables (raw, in their type) and optimizer state of g and c bit for bit;
 * returns the number of tensors that differ. */
static int same_tables(rap_test_ctx *t, const rap_model *g, const rap_model *c,
                       const rap_model_config *cfg, const char *when)
{
    int bad = 0;
    const size_t es = rap_emb_dtype_size(cfg->emb_dtype);
    for (int i = 0; i < cfg->n_tables; i++) {
        const int64_t R = cfg->table_rows[i];
        const size_t n = (size_t)R * (size_t)cfg->emb_dim;
        char *a = (char *)malloc(es * n), *b = (char *)malloc(es * n);
        float *sa = (float *)malloc(sizeof(float) * n), *sb = (float *)malloc(sizeof(float) * n);
        if (!a || !b || !sa || !sb) {
            free(a);
            free(b);
            free(sa);
            free(sb);
            return bad + 1;
        }
        CHECK_OK(rap_model_get_rows(g, i, 0, R, cfg->emb_dtype, a));
        CHECK_OK(rap_model_get_rows(c, i, 0, R, cfg->emb_dtype, b));
        for (size_t e = 0; e < n; e++)
            if (memcmp(a + es * e, b + es * e, es)) {
                rap_test_fail(t, __FILE__, __LINE__,
                              "%s: table %d element %zu (row %zu col %zu): gpu 0x%0*x cpu 0x%0*x",
                              when, i, e, e / (size_t)cfg->emb_dim, e % (size_t)cfg->emb_dim,
                              (int)(2 * es), es == 2 ? ((uint16_t *)a)[e] : ((uint32_t *)a)[e],
                              (int)(2 * es), es == 2 ? ((uint16_t *)b)[e] : ((uint32_t *)b)[e]);
                bad++;
                break;
            }
        if (cfg->optimizer != RAP_SGD) {
            int64_t sr = 0, sc = 0;
            CHECK_OK(rap_model_state_shape(c, i, &sr, &sc));
            CHECK_OK(rap_model_get_state(g, i, sa));
            CHECK_OK(rap_model_get_state(c, i, sb));
            if (memcmp(sa, sb, sizeof(float) * (size_t)(sr * sc))) {
                rap_test_fail(t, __FILE__, __LINE__, "%s: table %d state differs", when, i);
                bad++;
            }
        }
        free(a);
        free(b);
        free(sa);
        free(sb);
    }
    return bad;
}

/* GPU against CPU for one table type, optimizer, D and precision: init,
 * then 4 steps of emb_forward (pooled sums compared bit for bit) and the
 * embedding backward from exact_demb (tables and state compared bit for
 * bit), on batches of 64, 57, 50 and 43 rows of bags of 0..3 ids (tables
 * of 3 and 17 rows: runs of equal ids longer than a chunk of 32 pairs). A
 * bf16 model that keeps its pooled sums in bf16 (gpu_model.h, zbf): the
 * GPU's pooled values are the CPU's fp32 sums rounded to nearest even, and
 * its backward reads the gradient as bf16 (the CPU's from the same values
 * widened). */
static void emb16_case(rap_test_ctx *t, int D, rap_optimizer opt, rap_emb_dtype dt,
                       rap_precision prec)
{
    rap_model_config c;
    small_config(&c, D, opt, prec, true);
    c.emb_dtype = dt;
    c.lr = 0.05f;
    rap_model *gm = NULL, *cm = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_GPU, &gm));
    rap_status s = rap_model_create(&c, RAP_CPU, &cm);
    if (s != RAP_OK) {
        rap_model_free(gm);
        REQUIRE_OK(s);
    }
    char when[96];
    const char *pn = prec == RAP_BF16 ? "bf16" : "fp32";
    snprintf(when, sizeof when, "%s %s D %d %s init", rap_emb_dtype_name(dt),
             rap_optimizer_name(opt), D, pn);
    CHECK(same_tables(t, gm, cm, &c, when) == 0);
    const size_t cap = (size_t)c.batch * (size_t)c.n_tables * (size_t)D;
    float *demb = (float *)malloc(sizeof(float) * cap), *pg = (float *)malloc(sizeof(float) * cap);
    uint16_t *h16 = (uint16_t *)malloc(sizeof(uint16_t) * cap);
    float *d_demb = NULL;
    bool ok = demb && pg && h16 && cudaMalloc((void **)&d_demb, sizeof(float) * cap) == cudaSuccess;
    for (int k = 0; ok && k < 4 && !t->failures; k++) {
        const int64_t rows = c.batch - 7 * k;
        tbatch b;
        if (!tbatch_make(&b, &c, rows, 300 + (uint64_t)k, 3, c.batch * c.n_tables) ||
            !exact_demb(&b, &c, 900 + (uint64_t)k, demb)) {
            rap_test_fail(t, __FILE__, __LINE__, "batch: %s",
                          cudaGetErrorString(cudaGetLastError()));
            tbatch_free(&b);
            break;
        }
        snprintf(when, sizeof when, "%s %s D %d %s step %d", rap_emb_dtype_name(dt),
                 rap_optimizer_name(opt), D, pn, k + 1);
        CHECK_OK(rap_model_emb_forward(gm, &b.dev));
        CHECK_OK(rap_model_emb_forward(cm, &b.host));
        bool zbf = false;
        CHECK_OK(rap_gpu_model_pooled(gm, rows, pg, &zbf));
        /* the pooled sums stay fp32 unless a bf16 model's interaction reads
         * bf16 (D % 4 == 0, D <= 128) */
        const char *ze = getenv("RAP_GPU_ZBF"), *ie = getenv("RAP_GPU_INTERACT");
        const bool asked = !(ze && *ze == '0') && !(ie && strcmp(ie, "v1") == 0);
        CHECK_MSG(zbf == (asked && prec == RAP_BF16 && D % 4 == 0 && D <= 128),
                  "%s: bf16 pooled %d", when, zbf);
        const size_t np = (size_t)rows * (size_t)c.n_tables * (size_t)D;
        const float *pc = rap_cpu_model_pooled(cm);
        for (size_t e = 0; e < np; e++) {
            const float want = zbf ? rap_test_round_bf16(pc[e]) : pc[e];
            if (memcmp(&pg[e], &want, sizeof(float))) {
                rap_test_fail(t, __FILE__, __LINE__, "%s: pooled[%zu] gpu %.9g cpu %.9g", when,
                              e, (double)pg[e], (double)want);
                break;
            }
        }
        if (zbf) { /* the gradient as the interaction writes it: bf16 */
            for (size_t e = 0; e < np; e++) {
                demb[e] = rap_test_round_bf16(demb[e]);
                uint32_t u;
                memcpy(&u, &demb[e], 4);
                h16[e] = (uint16_t)(u >> 16);
            }
            CHECK(cudaMemcpy(d_demb, h16, sizeof(uint16_t) * np, cudaMemcpyHostToDevice) ==
                  cudaSuccess);
        } else {
            CHECK(cudaMemcpy(d_demb, demb, sizeof(float) * np, cudaMemcpyHostToDevice) ==
                  cudaSuccess);
        }
        CHECK_OK(rap_gpu_model_emb_backward_from(gm, &b.dev, d_demb, zbf));
        CHECK_OK(rap_cpu_model_emb_backward_from(cm, &b.host, demb));
        CHECK_OK(rap_model_sync(gm));
        CHECK(same_tables(t, gm, cm, &c, when) == 0);
        uint64_t sg = 0, sc = 0;
        CHECK_OK(rap_model_get_emb_step(gm, &sg));
        CHECK_OK(rap_model_get_emb_step(cm, &sc));
        CHECK_MSG(sg == (uint64_t)k + 1 && sc == sg, "%s: update counters gpu %llu cpu %llu",
                  when, (unsigned long long)sg, (unsigned long long)sc);
        tbatch_free(&b);
    }
    CHECK(ok);
    free(demb);
    free(pg);
    free(h16);
    cudaFree(d_demb);
    rap_model_free(gm);
    rap_model_free(cm);
}
#endif /* RAP_HAVE_CUDA */

RAP_TEST(model_gpu_emb16_bits_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_test_env env;
    rap_test_tune_off(&env); /* only the emb phases run: no GEMM to tune */
    /* D 5, 37: one column per lane (37: two 32-column blocks of the
     * row-wise sums); 8, 136: four per lane (136: two 128-column blocks) */
    static const int dims[] = {5, 8, 37, 136};
    static const rap_optimizer opts[] = {RAP_SGD, RAP_ADAGRAD, RAP_ROWWISE_ADAGRAD};
    for (int dt = RAP_EMB_FP32; dt <= RAP_EMB_FP16; dt++)
        for (size_t o = 0; o < 3; o++)
            for (size_t k = 0; k < sizeof dims / sizeof dims[0] && !t->failures; k++)
                emb16_case(t, dims[k], opts[o], (rap_emb_dtype)dt, RAP_FP32);
    rap_test_tune_restore(&env);
#endif
}

/* A bf16 model keeps its pooled sums and their gradient in bf16 (zbf,
 * gpu_model.h): the lookups' sums are the CPU's fp32 sums rounded to
 * nearest even, bit for bit, and the backward from a bf16 gradient
 * updates the tables and state exactly as the CPU's from the same values
 * (every table type and optimizer; D 8 and 128 take the 16-bit path, 37
 * keeps fp32: the v1 interaction). */
RAP_TEST(model_gpu_bf16_pooled_match_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_test_env env;
    rap_test_tune_off(&env);
    static const int dims[] = {8, 37, 128};
    static const rap_optimizer opts[] = {RAP_SGD, RAP_ADAGRAD, RAP_ROWWISE_ADAGRAD};
    for (int dt = RAP_EMB_FP32; dt <= RAP_EMB_FP16; dt++)
        for (size_t o = 0; o < 3; o++)
            for (size_t k = 0; k < sizeof dims / sizeof dims[0] && !t->failures; k++)
                emb16_case(t, dims[k], opts[o], (rap_emb_dtype)dt, RAP_BF16);
    rap_test_tune_restore(&env);
#endif
}

/* The whole step of a bf16 row-wise model on the GPU stays close to the
 * CPU's (the MLP GEMMs differ in summation order, so the pooled gradients
 * differ in the last bits and a few stochastic roundings go the other way:
 * a table element may be one bf16 step apart, 2^-7 relative). */
RAP_TEST(model_gpu_emb16_steps_close_to_cpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    rap_model_config c;
    small_config(&c, 16, RAP_ROWWISE_ADAGRAD, RAP_FP32, true);
    c.emb_dtype = RAP_EMB_BF16;
    check_steps(t, &c, 64, 4, 1e-4f, 0x1p-7f);
#endif
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
