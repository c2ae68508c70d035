/*
 * model.c -- the common part of the DLRM model (model.h): config defaults
 * and checks, the tensor table (dlrm reference names, shapes, offsets in
 * the flat parameter array), MLP initialisation on the host, the memory
 * check before allocating, and the argument checks of every rap_model_*
 * call before it calls the model's backend table (m->be: cpu/cpu_model.c,
 * gpu/gpu_model.cu; model_internal.h rap_model_backend). A sharded model (model.h,
 * hybrid parallel): the shard's checks, its copy, a tensor table of the
 * local tables, the row-count bounds of the emb phases (Bg) and the
 * order of mlp_backward and dense_apply.
 */
#include "model/model_internal.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <stdio.h>
#include <string.h>

/* Largest batch and layer widths: GEMM dimensions are int, rows of a batch
 * are int32 in the CPU backend's sort keys. */
#define MAX_BATCH ((int64_t)1 << 30)
#define MAX_WIDTH (1 << 24)
#define MAX_TABLE_ROWS ((int64_t)1 << 40)

static const int DEFAULT_BOT[] = {512, 256, 64, 16};
static const int DEFAULT_TOP[] = {512, 256, 1};

void rap_model_config_defaults(rap_model_config *c)
{
    memset(c, 0, sizeof *c);
    /* The dlrm reference's Criteo Kaggle model (docs/DATA.md), with 26
     * small tables: the trainer sets the real cardinalities. */
    c->n_dense = RAP_CRITEO_DENSE;
    c->n_tables = RAP_CRITEO_SPARSE;
    for (int t = 0; t < c->n_tables; t++)
        c->table_rows[t] = 100000;
    c->emb_dim = 16;
    c->n_bot = (int)(sizeof DEFAULT_BOT / sizeof DEFAULT_BOT[0]);
    memcpy(c->bot, DEFAULT_BOT, sizeof DEFAULT_BOT);
    c->n_top = (int)(sizeof DEFAULT_TOP / sizeof DEFAULT_TOP[0]);
    memcpy(c->top, DEFAULT_TOP, sizeof DEFAULT_TOP);
    c->batch = 4096;
    c->optimizer = RAP_SGD;
    c->emb_dtype = RAP_EMB_FP32;
    c->lr = 0.1f;
    c->adagrad_eps = 1e-8f;
    c->adagrad_init = 0.0f;
    c->precision = RAP_FP32;
    c->strict_fp32 = false;
    c->seed = 1;
    c->threads = 0;
    c->stream = NULL;
}

/* The shard of a config whose other fields are checked (model.h). */
static rap_status check_shard(const rap_model_config *c, const rap_model_shard *sh)
{
    if (sh->n_local < 0 || sh->n_local > c->n_tables)
        return rap_fail(RAP_ERR_ARG, "model config: shard of %d local tables, expected 0..%d "
                                     "(the model's tables)",
                        sh->n_local, c->n_tables);
    for (int k = 0; k < sh->n_local; k++) {
        int t = sh->table[k];
        if (t < 0 || t >= c->n_tables)
            return rap_fail(RAP_ERR_ARG,
                            "model config: shard's local table %d is table %d, expected 0..%d",
                            k, t, c->n_tables - 1);
        if (sh->rows[k] < 1 || sh->row0[k] < 0 || sh->row0[k] > c->table_rows[t] - sh->rows[k])
            return rap_fail(RAP_ERR_ARG,
                            "model config: shard's local table %d holds rows [%lld, %lld + %lld) "
                            "of table %d, expected at least 1 row inside [0, %lld)",
                            k, (long long)sh->row0[k], (long long)sh->row0[k],
                            (long long)sh->rows[k], t, (long long)c->table_rows[t]);
    }
    if (sh->emb_batch < 1 || sh->emb_batch > MAX_BATCH)
        return rap_fail(RAP_ERR_ARG, "model config: shard's global batch %lld, expected 1..%lld",
                        (long long)sh->emb_batch, (long long)MAX_BATCH);
    if (sh->loss_rows < 1 || sh->loss_rows > MAX_BATCH)
        return rap_fail(RAP_ERR_ARG,
                        "model config: shard's loss divisor %lld rows, expected 1..%lld",
                        (long long)sh->loss_rows, (long long)MAX_BATCH);
    return RAP_OK;
}

rap_status rap_model_config_check(const rap_model_config *c)
{
    if (!c)
        return rap_fail(RAP_ERR_ARG, "model config: NULL");
    if (c->n_dense < 1 || c->n_dense > MAX_WIDTH)
        return rap_fail(RAP_ERR_ARG, "model config: n_dense %d, expected 1..%d", c->n_dense,
                        MAX_WIDTH);
    if (c->n_tables < 1 || c->n_tables > RAP_MAX_TABLES)
        return rap_fail(RAP_ERR_ARG, "model config: n_tables %d, expected 1..%d", c->n_tables,
                        RAP_MAX_TABLES);
    for (int t = 0; t < c->n_tables; t++)
        if (c->table_rows[t] < 1 || c->table_rows[t] > MAX_TABLE_ROWS)
            return rap_fail(RAP_ERR_ARG,
                            "model config: table %d has %lld rows, expected 1..%lld", t,
                            (long long)c->table_rows[t], (long long)MAX_TABLE_ROWS);
    if (c->emb_dim < 1 || c->emb_dim > MAX_WIDTH)
        return rap_fail(RAP_ERR_ARG, "model config: emb_dim %d, expected 1..%d", c->emb_dim,
                        MAX_WIDTH);
    if (c->n_bot < 1 || c->n_bot > RAP_MAX_LAYERS)
        return rap_fail(RAP_ERR_ARG, "model config: %d bottom layers, expected 1..%d", c->n_bot,
                        RAP_MAX_LAYERS);
    if (c->n_top < 1 || c->n_top > RAP_MAX_LAYERS)
        return rap_fail(RAP_ERR_ARG, "model config: %d top layers, expected 1..%d", c->n_top,
                        RAP_MAX_LAYERS);
    for (int l = 0; l < c->n_bot; l++)
        if (c->bot[l] < 1 || c->bot[l] > MAX_WIDTH)
            return rap_fail(RAP_ERR_ARG, "model config: bottom layer %d width %d, expected 1..%d",
                            l, c->bot[l], MAX_WIDTH);
    for (int l = 0; l < c->n_top; l++)
        if (c->top[l] < 1 || c->top[l] > MAX_WIDTH)
            return rap_fail(RAP_ERR_ARG, "model config: top layer %d width %d, expected 1..%d", l,
                            c->top[l], MAX_WIDTH);
    if (c->bot[c->n_bot - 1] != c->emb_dim)
        return rap_fail(RAP_ERR_ARG,
                        "model config: bottom MLP ends in %d, expected the embedding dim %d "
                        "(the dot interaction pairs its output with the embeddings)",
                        c->bot[c->n_bot - 1], c->emb_dim);
    if (c->top[c->n_top - 1] != 1)
        return rap_fail(RAP_ERR_ARG, "model config: top MLP ends in %d, expected 1 (one logit)",
                        c->top[c->n_top - 1]);
    int64_t f = (int64_t)c->n_tables + 1;
    if ((int64_t)c->emb_dim + f * (f - 1) / 2 > MAX_WIDTH)
        return rap_fail(RAP_ERR_ARG, "model config: interaction width %lld above %d",
                        (long long)((int64_t)c->emb_dim + f * (f - 1) / 2), MAX_WIDTH);
    if (c->batch < 1 || c->batch > MAX_BATCH)
        return rap_fail(RAP_ERR_ARG, "model config: batch %lld, expected 1..%lld",
                        (long long)c->batch, (long long)MAX_BATCH);
    /* Sizes far beyond any machine would overflow size_t in the byte
     * counts: refuse them here, in double. */
    double floats = 0, ti = (double)c->emb_dim + (double)(f * (f - 1) / 2);
    double row = (double)c->n_dense + 4.0 * (double)f * c->emb_dim + 4.0 * ti, in = c->n_dense;
    for (int t = 0; t < c->n_tables; t++)
        floats += (double)c->table_rows[t] * (double)c->emb_dim;
    for (int l = 0; l < c->n_bot; l++) {
        floats += (double)c->bot[l] * (in + 1);
        row += 3.0 * c->bot[l];
        in = c->bot[l];
    }
    in = ti;
    for (int l = 0; l < c->n_top; l++) {
        floats += (double)c->top[l] * (in + 1);
        row += 3.0 * c->top[l];
        in = c->top[l];
    }
    floats += (double)c->batch * row;
    if (floats > 0x1p56)
        return rap_fail(RAP_ERR_ARG, "model config: about %.3g floats of weights and activations, "
                                     "beyond any machine", floats);
    if (c->optimizer != RAP_SGD && c->optimizer != RAP_ADAGRAD &&
        c->optimizer != RAP_ROWWISE_ADAGRAD)
        return rap_fail(RAP_ERR_ARG, "model config: optimizer %d, expected SGD (0), Adagrad (1) "
                                     "or row-wise Adagrad (2)",
                        (int)c->optimizer);
    if (c->emb_dtype != RAP_EMB_FP32 && c->emb_dtype != RAP_EMB_BF16 &&
        c->emb_dtype != RAP_EMB_FP16)
        return rap_fail(RAP_ERR_ARG, "model config: emb_dtype %d, expected fp32 (0), bf16 (1) or "
                                     "fp16 (2)",
                        (int)c->emb_dtype);
    if (!(c->lr > 0.0f) || !isfinite(c->lr))
        return rap_fail(RAP_ERR_ARG, "model config: lr %g, expected a finite value > 0",
                        (double)c->lr);
    if (!(c->adagrad_eps >= 0.0f) || !isfinite(c->adagrad_eps))
        return rap_fail(RAP_ERR_ARG, "model config: adagrad_eps %g, expected >= 0",
                        (double)c->adagrad_eps);
    if (!(c->adagrad_init >= 0.0f) || !isfinite(c->adagrad_init))
        return rap_fail(RAP_ERR_ARG, "model config: adagrad_init %g, expected >= 0",
                        (double)c->adagrad_init);
    if (c->optimizer != RAP_SGD && c->adagrad_eps == 0.0f && c->adagrad_init == 0.0f)
        return rap_fail(RAP_ERR_ARG, "model config: %s with adagrad_eps 0 and "
                                     "adagrad_init 0 divides by zero on a zero gradient",
                        c->optimizer == RAP_ADAGRAD ? "Adagrad" : "row-wise Adagrad");
    if (c->precision != RAP_FP32 && c->precision != RAP_BF16)
        return rap_fail(RAP_ERR_ARG, "model config: precision %d, expected FP32 (0) or BF16 (1)",
                        (int)c->precision);
    if (c->threads < 0)
        return rap_fail(RAP_ERR_ARG, "model config: threads %d, expected >= 0 (0 = all cores)",
                        c->threads);
    return c->shard ? check_shard(c, c->shard) : RAP_OK;
}

const char *rap_optimizer_name(rap_optimizer o)
{
    switch (o) {
    case RAP_SGD: return "sgd";
    case RAP_ADAGRAD: return "adagrad";
    case RAP_ROWWISE_ADAGRAD: return "rowwise-adagrad";
    }
    return "?";
}

const char *rap_emb_dtype_name(rap_emb_dtype t)
{
    switch (t) {
    case RAP_EMB_FP32: return "fp32";
    case RAP_EMB_BF16: return "bf16";
    case RAP_EMB_FP16: return "fp16";
    }
    return "?";
}

size_t rap_emb_dtype_size(rap_emb_dtype t)
{
    switch (t) {
    case RAP_EMB_FP32: return 4;
    case RAP_EMB_BF16:
    case RAP_EMB_FP16: return 2;
    }
    return 0;
}

/* The backend table of dev; NULL for the GPU in a build without CUDA. */
static const rap_model_backend *backend_of(rap_device dev)
{
    return dev == RAP_GPU ? rap_model_backend_gpu() : rap_model_backend_cpu();
}

size_t rap_model_bytes(const rap_model_config *c, rap_device dev)
{
    if (rap_model_config_check(c) != RAP_OK)
        return 0;
    const rap_model_backend *be = backend_of(dev);
    return be ? be->bytes(c, NULL) : 0;
}

const char *rap_model_mem_part_name(int k)
{
    static const char *const names[RAP_MM_N] = {
        "tables", "table state", "MLP weights", "MLP state", "MLP gradients",
        "activations", "sort buffers", "cuBLASLt workspace", "model bookkeeping"};
    return k >= 0 && k < RAP_MM_N ? names[k] : "?";
}

rap_status rap_model_mem_of(const rap_model_config *c, rap_device dev, rap_model_mem *out)
{
    memset(out, 0, sizeof *out);
    RAP_TRY(rap_model_config_check(c));
    const rap_model_backend *be = backend_of(dev);
    if (!be)
        return rap_fail(RAP_ERR_NO_GPU, "the GPU model's memory: rap was built without CUDA");
    if (be->bytes(c, out) == 0)
        return rap_fail(RAP_ERR_ARG, "the model's memory: the %s backend cannot size this model",
                        dev == RAP_GPU ? "GPU" : "CPU");
    return RAP_OK;
}

/* ------------------------------------------------------------ tensor table */

/* Fills m->tensors, n_tensors, n_params, mlp_offset, n_mlp_params, top_in
 * from m->cfg (already checked). The tables are the TE of
 * rap_model_emb_tables: all T, or the shard's local ones (tensor k = local
 * table k, named after its global table). */
static rap_status build_tensors(rap_model *m)
{
    const rap_model_config *c = &m->cfg;
    const int te = rap_model_emb_tables(c);
    int n = te + 2 * c->n_bot + 2 * c->n_top;
    m->tensors = rap_calloc(sizeof(rap_tensor) * (size_t)n, "model tensor table");
    if (!m->tensors)
        return RAP_ERR_NOMEM;
    m->n_tensors = n;
    int64_t f = (int64_t)c->n_tables + 1;
    m->top_in = (int)(c->emb_dim + f * (f - 1) / 2);
    size_t off = 0;
    int i = 0;
    for (int t = 0; t < te; t++, i++) {
        rap_tensor *x = &m->tensors[i];
        snprintf(x->info.name, sizeof x->info.name, "emb_l.%d.weight",
                 c->shard ? c->shard->table[t] : t);
        x->info.rows = rap_model_emb_rows(c, t);
        x->info.cols = c->emb_dim;
        x->offset = off;
        x->layer = t;
        x->kind = 0;
        off += (size_t)x->info.rows * (size_t)c->emb_dim;
    }
    m->mlp_offset = off;
    for (int pass = 0; pass < 2; pass++) {
        const int *w = pass == 0 ? c->bot : c->top;
        int nl = pass == 0 ? c->n_bot : c->n_top;
        int in = pass == 0 ? c->n_dense : m->top_in;
        const char *pfx = pass == 0 ? "bot_l" : "top_l";
        for (int l = 0; l < nl; l++) {
            rap_tensor *x = &m->tensors[i++];
            snprintf(x->info.name, sizeof x->info.name, "%s.%d.weight", pfx, 2 * l);
            x->info.rows = w[l];
            x->info.cols = in;
            x->offset = off;
            x->layer = l;
            x->kind = pass == 0 ? 1 : 3;
            off += (size_t)w[l] * (size_t)in;
            x = &m->tensors[i++];
            snprintf(x->info.name, sizeof x->info.name, "%s.%d.bias", pfx, 2 * l);
            x->info.rows = w[l];
            x->info.cols = 1;
            x->offset = off;
            x->layer = l;
            x->kind = pass == 0 ? 2 : 4;
            off += (size_t)w[l];
            in = w[l];
        }
    }
    m->n_params = off;
    m->n_mlp_params = off - m->mlp_offset;
    return RAP_OK;
}

/* A normal(0, 1) sample by Box-Muller from two splitmix64 draws: u1 in
 * (0, 1], u2 in [0, 1), 53 bits each. */
static double normal01(uint64_t *s)
{
    double u1 = ((double)(rap_splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rap_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

void rap_model_init_mlp(const rap_model *m, float *mlp)
{
    /* a sharded model numbers its tensors after its TL tables: the streams
     * are those of the unsharded model's tensor numbers (T tables first) */
    const int shift = m->cfg.n_tables - rap_model_emb_tables(&m->cfg);
    for (int i = 0; i < m->n_tensors; i++) {
        const rap_tensor *x = &m->tensors[i];
        if (x->kind == 0)
            continue;
        /* One generator stream per tensor, so the init of one layer does
         * not depend on the shapes of the others. */
        uint64_t s = rap_mix64(m->cfg.seed ^ 0x6d6c705f696e6974ULL) ^
                     ((uint64_t)(i + shift + 1) * 0x9e3779b97f4a7c15ULL);
        bool bias = x->kind == 2 || x->kind == 4;
        double out = (double)x->info.rows, in = (double)x->info.cols;
        double sd = bias ? sqrt(1.0 / out) : sqrt(2.0 / (in + out));
        float *p = mlp + (x->offset - m->mlp_offset);
        size_t n = (size_t)x->info.rows * (size_t)x->info.cols;
        for (size_t j = 0; j < n; j++)
            p[j] = (float)(sd * normal01(&s));
    }
}

/* ------------------------------------------------------------ create/free */

/* Bytes the device dev can give now: MemAvailable for the host, free
 * device memory for the GPU. 0 when unknown (the check is skipped). */
static size_t available_bytes(rap_device dev)
{
    if (dev == RAP_GPU) {
#ifdef RAP_HAVE_CUDA
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        return free_b;
#else
        return 0;
#endif
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb * 1024;
}

rap_status rap_model_create(const rap_model_config *c, rap_device dev, rap_model **out)
{
    if (!out)
        return rap_fail(RAP_ERR_ARG, "rap_model_create: out is NULL");
    *out = NULL;
    RAP_TRY(rap_model_config_check(c));
    if (dev != RAP_CPU && dev != RAP_GPU)
        return rap_fail(RAP_ERR_ARG, "rap_model_create: device %d, expected CPU or GPU", (int)dev);
    const rap_model_backend *be = backend_of(dev);
    if (dev == RAP_GPU) {
        char why[256];
        if (!rap_gpu_available(why, sizeof why) || !be) /* no CUDA: no GPU is available */
            return rap_fail(RAP_ERR_NO_GPU, "rap_model_create: GPU model asked for: %s", why);
    }
    size_t need = rap_model_bytes(c, dev);
    size_t avail = available_bytes(dev);
    if (avail > 0 && need > avail)
        return rap_fail(RAP_ERR_NOMEM,
                        "model needs %.2f GiB for weights, optimizer state and activations; "
                        "%.2f GiB available on the %s",
                        (double)need / (1024.0 * 1024.0 * 1024.0),
                        (double)avail / (1024.0 * 1024.0 * 1024.0),
                        dev == RAP_GPU ? "GPU" : "host");
    rap_model *m = rap_calloc(sizeof *m, "model");
    if (!m)
        return RAP_ERR_NOMEM;
    m->cfg = *c;
    m->device = dev;
    m->be = be;
    if (c->shard) {
        /* the caller's shard may go away: the model keeps its own copy */
        m->shard = *c->shard;
        m->cfg.shard = &m->shard;
    }
    rap_status s = build_tensors(m);
    float *mlp = NULL;
    if (s == RAP_OK) {
        mlp = rap_malloc(sizeof(float) * (m->n_mlp_params ? m->n_mlp_params : 1),
                         "model MLP init");
        s = mlp ? RAP_OK : RAP_ERR_NOMEM;
    }
    if (s == RAP_OK) {
        rap_model_init_mlp(m, mlp);
        s = be->create(m, mlp);
    }
    rap_free(mlp);
    if (s != RAP_OK) {
        rap_model_free(m);
        return s;
    }
    *out = m;
    return RAP_OK;
}

void rap_model_free(rap_model *m)
{
    if (!m)
        return;
    if (m->cpu || m->gpu) /* only the backend's own is ever set */
        m->be->free(m);
    rap_free(m->tensors);
    m->tensors = NULL;
    rap_free(m);
}

const rap_model_config *rap_model_config_of(const rap_model *m) { return m ? &m->cfg : NULL; }
rap_device rap_model_device(const rap_model *m) { return m ? m->device : RAP_CPU; }

/* ------------------------------------------------------------ checks, then the backend */

#define CHECK_MODEL(m, what)                                                     \
    do {                                                                         \
        if (!(m))                                                                \
            return rap_fail(RAP_ERR_ARG, "%s: model is NULL", what);             \
    } while (0)

static rap_status check_batch(const rap_model *m, const rap_model_batch *b, const char *what)
{
    if (!b)
        return rap_fail(RAP_ERR_ARG, "%s: batch is NULL", what);
    if (b->rows < 1 || b->rows > m->cfg.batch)
        return rap_fail(RAP_ERR_ARG, "%s: batch of %lld rows, expected 1..%lld (config batch)",
                        what, (long long)b->rows, (long long)m->cfg.batch);
    return RAP_OK;
}

/* The batch of an emb phase: up to the shard's global batch when sharded. */
static rap_status check_emb_batch(const rap_model *m, const rap_model_batch *b, const char *what)
{
    if (!m->cfg.shard)
        return check_batch(m, b, what);
    if (!b)
        return rap_fail(RAP_ERR_ARG, "%s: batch is NULL", what);
    if (b->rows < 1 || b->rows > m->shard.emb_batch)
        return rap_fail(RAP_ERR_ARG,
                        "%s: global batch of %lld rows, expected 1..%lld (the shard's emb_batch)",
                        what, (long long)b->rows, (long long)m->shard.emb_batch);
    return RAP_OK;
}

rap_status rap_model_emb_forward(rap_model *m, const rap_model_batch *b)
{
    CHECK_MODEL(m, "rap_model_emb_forward");
    RAP_TRY(check_emb_batch(m, b, "rap_model_emb_forward"));
    return m->be->emb_forward(m, b);
}

rap_status rap_model_mlp_forward(rap_model *m, const rap_model_batch *b)
{
    CHECK_MODEL(m, "rap_model_mlp_forward");
    RAP_TRY(check_batch(m, b, "rap_model_mlp_forward"));
    return m->be->mlp_forward(m, b);
}

rap_status rap_model_mlp_backward(rap_model *m, const rap_model_batch *b)
{
    CHECK_MODEL(m, "rap_model_mlp_backward");
    RAP_TRY(check_batch(m, b, "rap_model_mlp_backward"));
    return m->be->mlp_backward(m, b);
}

rap_status rap_model_emb_backward(rap_model *m, const rap_model_batch *b)
{
    CHECK_MODEL(m, "rap_model_emb_backward");
    RAP_TRY(check_emb_batch(m, b, "rap_model_emb_backward"));
    return m->be->emb_backward(m, b);
}

rap_status rap_model_train_step(rap_model *m, const rap_model_batch *b)
{
    CHECK_MODEL(m, "rap_model_train_step");
    if (m->cfg.shard)
        return rap_fail(RAP_ERR_ARG, "rap_model_train_step: the model is sharded; its step "
                                     "exchanges data between ranks (src/dist)");
    RAP_TRY(rap_model_emb_forward(m, b));
    RAP_TRY(rap_model_mlp_forward(m, b));
    RAP_TRY(rap_model_mlp_backward(m, b));
    return rap_model_emb_backward(m, b);
}

rap_status rap_model_predict(rap_model *m, const rap_model_batch *b, float *logits_host)
{
    CHECK_MODEL(m, "rap_model_predict");
    RAP_TRY(check_batch(m, b, "rap_model_predict"));
    if (!logits_host)
        return rap_fail(RAP_ERR_ARG, "rap_model_predict: logits_host is NULL");
    return m->be->predict(m, b, logits_host);
}

rap_status rap_model_last_logits(const rap_model *m, const float **logits)
{
    CHECK_MODEL(m, "rap_model_last_logits");
    if (!logits)
        return rap_fail(RAP_ERR_ARG, "rap_model_last_logits: logits is NULL");
    if (m->cfg.shard)
        return rap_fail(RAP_ERR_ARG, "rap_model_last_logits: a sharded model's logits are "
                        "its rank's rows only");
    *logits = m->be->last_logits(m);
    return RAP_OK;
}

rap_status rap_model_last_loss(rap_model *m, double *loss)
{
    CHECK_MODEL(m, "rap_model_last_loss");
    if (!loss)
        return rap_fail(RAP_ERR_ARG, "rap_model_last_loss: loss is NULL");
    return m->be->last_loss(m, loss);
}

rap_status rap_model_sync(rap_model *m)
{
    CHECK_MODEL(m, "rap_model_sync");
    return m->be->sync(m);
}

rap_status rap_model_shard_buffers(rap_model *m, rap_model_shard_bufs *out)
{
    CHECK_MODEL(m, "rap_model_shard_buffers");
    if (!out)
        return rap_fail(RAP_ERR_ARG, "rap_model_shard_buffers: out is NULL");
    memset(out, 0, sizeof *out);
    if (!m->cfg.shard)
        return rap_fail(RAP_ERR_ARG, "rap_model_shard_buffers: the model has no shard");
    m->be->shard_buffers(m, out);
    return RAP_OK;
}

rap_status rap_model_dense_apply(rap_model *m)
{
    CHECK_MODEL(m, "rap_model_dense_apply");
    if (!m->cfg.shard)
        return rap_fail(RAP_ERR_ARG, "rap_model_dense_apply: the model has no shard (its "
                                     "mlp_backward applies the optimizer)");
    return m->be->dense_apply(m);
}

rap_status rap_model_set_loss_rows(rap_model *m, int64_t loss_rows)
{
    CHECK_MODEL(m, "rap_model_set_loss_rows");
    if (!m->cfg.shard)
        return rap_fail(RAP_ERR_ARG, "rap_model_set_loss_rows: the model has no shard");
    if (loss_rows < 1 || loss_rows > MAX_BATCH)
        return rap_fail(RAP_ERR_ARG, "rap_model_set_loss_rows: %lld rows, expected 1..%lld",
                        (long long)loss_rows, (long long)MAX_BATCH);
    m->shard.loss_rows = loss_rows;
    return RAP_OK;
}

int rap_model_n_tensors(const rap_model *m) { return m ? m->n_tensors : 0; }

void rap_model_tensor_origin(const rap_model *m, int i, int *table, int64_t *row0)
{
    int t = -1;
    int64_t r = 0;
    if (m && i >= 0 && i < m->n_tensors && m->tensors[i].kind == 0) {
        int k = m->tensors[i].layer;
        t = m->cfg.shard ? m->shard.table[k] : k;
        r = m->cfg.shard ? m->shard.row0[k] : 0;
    }
    if (table)
        *table = t;
    if (row0)
        *row0 = r;
}

const rap_tensor_info *rap_model_tensor(const rap_model *m, int i)
{
    if (!m || i < 0 || i >= m->n_tensors)
        return NULL;
    return &m->tensors[i].info;
}

static rap_status check_tensor(const rap_model *m, int i, const void *host, bool state,
                               const char *what)
{
    CHECK_MODEL(m, what);
    if (i < 0 || i >= m->n_tensors)
        return rap_fail(RAP_ERR_ARG, "%s: tensor %d, expected 0..%d", what, i, m->n_tensors - 1);
    if (!host)
        return rap_fail(RAP_ERR_ARG, "%s: host pointer is NULL", what);
    if (state && m->cfg.optimizer == RAP_SGD)
        return rap_fail(RAP_ERR_ARG, "%s: the model uses SGD, which keeps no optimizer state",
                        what);
    return RAP_OK;
}

rap_emb_dtype rap_model_tensor_dtype(const rap_model *m, int i)
{
    if (!m || i < 0 || i >= m->n_tensors || m->tensors[i].kind != 0)
        return RAP_EMB_FP32;
    return m->cfg.emb_dtype;
}

rap_status rap_model_state_shape(const rap_model *m, int i, int64_t *rows, int64_t *cols)
{
    CHECK_MODEL(m, "rap_model_state_shape");
    if (i < 0 || i >= m->n_tensors)
        return rap_fail(RAP_ERR_ARG, "rap_model_state_shape: tensor %d, expected 0..%d", i,
                        m->n_tensors - 1);
    if (m->cfg.optimizer == RAP_SGD)
        return rap_fail(RAP_ERR_ARG, "rap_model_state_shape: the model uses SGD, which keeps no "
                                     "optimizer state");
    const rap_tensor *x = &m->tensors[i];
    if (rows)
        *rows = x->info.rows;
    if (cols)
        *cols = x->kind == 0 && m->cfg.optimizer == RAP_ROWWISE_ADAGRAD ? 1 : x->info.cols;
    return RAP_OK;
}

/* Row ranges: checks, then the backend's raw copy, converting a 16-bit
 * table from / to floats a chunk at a time (never the whole table in
 * memory twice). */
#define CONVERT_CHUNK ((int64_t)1 << 20) /* elements per conversion chunk */

static rap_status check_rows(const rap_model *m, int i, int64_t row0, int64_t n,
                             const void *host, bool state, const char *what)
{
    RAP_TRY(check_tensor(m, i, host, state, what));
    const int64_t rows = m->tensors[i].info.rows;
    if (row0 < 0 || n < 0 || row0 > rows || n > rows - row0)
        return rap_fail(RAP_ERR_ARG, "%s: rows [%lld, %lld + %lld) of %s, which has %lld", what,
                        (long long)row0, (long long)row0, (long long)n, m->tensors[i].info.name,
                        (long long)rows);
    return RAP_OK;
}

static rap_status read_rows(const rap_model *m, int i, int64_t row0, int64_t n, void *host,
                            bool state)
{
    return m->be->read_rows(m, i, row0, n, host, state);
}

static rap_status write_rows(rap_model *m, int i, int64_t row0, int64_t n, const void *host,
                             bool state)
{
    return m->be->write_rows(m, i, row0, n, host, state);
}

/* Rows of a 16-bit table as floats (to_host) or from floats. */
static rap_status convert_rows(rap_model *m, int i, int64_t row0, int64_t n, float *host,
                               bool to_host)
{
    const int64_t D = m->tensors[i].info.cols;
    const rap_emb_dtype dt = m->cfg.emb_dtype;
    int64_t step = CONVERT_CHUNK / D > 0 ? CONVERT_CHUNK / D : 1;
    if (step > n)
        step = n;
    uint16_t *buf = rap_malloc(sizeof(uint16_t) * (size_t)(step > 0 ? step * D : 1),
                               "table conversion");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status s = RAP_OK;
    for (int64_t r = 0; s == RAP_OK && r < n; r += step) {
        const int64_t k = n - r < step ? n - r : step;
        float *h = host + r * D;
        if (to_host) {
            s = read_rows(m, i, row0 + r, k, buf, false);
            for (int64_t e = 0; s == RAP_OK && e < k * D; e++)
                h[e] = dt == RAP_EMB_FP16 ? rap_fp16_to_f32(buf[e]) : rap_bf16_to_f32(buf[e]);
        } else {
            for (int64_t e = 0; e < k * D; e++)
                buf[e] = dt == RAP_EMB_FP16 ? rap_f32_to_fp16_rn(h[e]) : rap_f32_to_bf16_rn(h[e]);
            s = write_rows(m, i, row0 + r, k, buf, false);
        }
    }
    rap_free(buf);
    return s;
}

rap_status rap_model_get_rows(const rap_model *m, int i, int64_t row0, int64_t n,
                              rap_emb_dtype as, void *host)
{
    RAP_TRY(check_rows(m, i, row0, n, host, false, "rap_model_get_rows"));
    const rap_emb_dtype own = rap_model_tensor_dtype(m, i);
    if (as != own && as != RAP_EMB_FP32)
        return rap_fail(RAP_ERR_ARG, "rap_model_get_rows: %s is stored as %s; asked as %s "
                                     "(expected %s or fp32)",
                        m->tensors[i].info.name, rap_emb_dtype_name(own), rap_emb_dtype_name(as),
                        rap_emb_dtype_name(own));
    if (as == own)
        return read_rows(m, i, row0, n, host, false);
    return convert_rows((rap_model *)m, i, row0, n, (float *)host, true);
}

rap_status rap_model_set_rows(rap_model *m, int i, int64_t row0, int64_t n, rap_emb_dtype as,
                              const void *host)
{
    RAP_TRY(check_rows(m, i, row0, n, host, false, "rap_model_set_rows"));
    const rap_emb_dtype own = rap_model_tensor_dtype(m, i);
    if (as != own && as != RAP_EMB_FP32)
        return rap_fail(RAP_ERR_ARG, "rap_model_set_rows: %s is stored as %s; given as %s "
                                     "(expected %s or fp32)",
                        m->tensors[i].info.name, rap_emb_dtype_name(own), rap_emb_dtype_name(as),
                        rap_emb_dtype_name(own));
    if (as == own)
        return write_rows(m, i, row0, n, host, false);
    return convert_rows(m, i, row0, n, (float *)host, false);
}

rap_status rap_model_get_state_rows(const rap_model *m, int i, int64_t row0, int64_t n,
                                    float *host)
{
    RAP_TRY(check_rows(m, i, row0, n, host, true, "rap_model_get_state_rows"));
    return read_rows(m, i, row0, n, host, true);
}

rap_status rap_model_set_state_rows(rap_model *m, int i, int64_t row0, int64_t n,
                                    const float *host)
{
    RAP_TRY(check_rows(m, i, row0, n, host, true, "rap_model_set_state_rows"));
    return write_rows(m, i, row0, n, host, true);
}

rap_status rap_model_get(const rap_model *m, int i, float *host)
{
    RAP_TRY(check_tensor(m, i, host, false, "rap_model_get"));
    if (rap_model_tensor_dtype(m, i) != RAP_EMB_FP32)
        return convert_rows((rap_model *)m, i, 0, m->tensors[i].info.rows, host, true);
    return m->be->get(m, i, host, false);
}

rap_status rap_model_set(rap_model *m, int i, const float *host)
{
    RAP_TRY(check_tensor(m, i, host, false, "rap_model_set"));
    if (rap_model_tensor_dtype(m, i) != RAP_EMB_FP32)
        return convert_rows(m, i, 0, m->tensors[i].info.rows, (float *)host, false);
    return m->be->set(m, i, host, false);
}

rap_status rap_model_get_state(const rap_model *m, int i, float *host)
{
    RAP_TRY(check_tensor(m, i, host, true, "rap_model_get_state"));
    return m->be->get(m, i, host, true);
}

rap_status rap_model_set_state(rap_model *m, int i, const float *host)
{
    RAP_TRY(check_tensor(m, i, host, true, "rap_model_set_state"));
    return m->be->set(m, i, host, true);
}

rap_status rap_model_get_emb_step(const rap_model *m, uint64_t *step)
{
    CHECK_MODEL(m, "rap_model_get_emb_step");
    if (!step)
        return rap_fail(RAP_ERR_ARG, "rap_model_get_emb_step: step is NULL");
    return m->be->get_emb_step(m, step);
}

rap_status rap_model_set_emb_step(rap_model *m, uint64_t step)
{
    CHECK_MODEL(m, "rap_model_set_emb_step");
    return m->be->set_emb_step(m, step);
}

rap_status rap_model_get_grad(const rap_model *m, int i, float *host)
{
    RAP_TRY(check_tensor(m, i, host, false, "rap_model_get_grad"));
    if (!m->be->get_grad)
        return rap_fail(RAP_ERR_ARG, "rap_model_get_grad: CPU models only");
    if (m->tensors[i].kind == 0)
        return rap_fail(RAP_ERR_ARG,
                        "rap_model_get_grad: %s is an embedding table; its aggregated gradient "
                        "of the touched rows is not kept",
                        m->tensors[i].info.name);
    return m->be->get_grad(m, i, host);
}
