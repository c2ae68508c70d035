/*
 * cpu_layers.c -- the layers of the CPU reference model (cpu_layers.h):
 * linear (OpenBLAS), dot interaction, sum-pooled embedding bags, BCE with
 * logits, the embedding backward with duplicate-id aggregation and the
 * optimizer, and the dense optimizer step.
 *
 * Every loop is cut into fixed chunks of rows (or columns, or keys) that
 * do not depend on the thread count, and each output element is written by
 * one chunk in a fixed order: the results are bit-identical for any number
 * of threads and from run to run.
 */
#include "model/cpu/cpu_layers.h"
#include "model/emb_math.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* ------------------------------------------------------------ parallel for */

typedef void (*range_fn)(void *ctx, int64_t lo, int64_t hi);

typedef struct {
    range_fn fn;
    void *ctx;
    int64_t n, chunk;
} par_ctx;

static void par_item(void *c, int64_t i)
{
    const par_ctx *p = c;
    int64_t lo = i * p->chunk;
    int64_t hi = lo + p->chunk < p->n ? lo + p->chunk : p->n;
    p->fn(p->ctx, lo, hi);
}

/* Runs fn over [0, n) in chunks of `chunk` on the pool (NULL: caller). */
static void par_for(rap_pool *pool, int64_t n, int64_t chunk, range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (!pool || n <= chunk || rap_pool_threads(pool) == 1) {
        fn(ctx, 0, n);
        return;
    }
    par_ctx p = {fn, ctx, n, chunk};
    rap_pool_for(pool, (n + chunk - 1) / chunk, par_item, &p);
}

#define ROW_CHUNK 32

/* ------------------------------------------------------------ GEMM */

/* C (M, N) = op(A) (M, K) . op(B) (K, N), row-major, cut into fixed blocks
 * of GEMM_ROWS rows of C, each one single-threaded cblas_sgemm run on the
 * pool. Why not OpenBLAS's own threads: OpenBLAS 0.3.21 gives different
 * bits for different thread counts (thousands of elements of a 512x128x64
 * product differ between 1 and 2 threads), and the model's results must
 * not depend on the thread count. Fixed blocks make them independent by
 * construction; OpenBLAS is set to 1 thread by the model (cpu_model.c). */
#define GEMM_ROWS 64

typedef struct {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc;
    const float *A, *B;
    float *C;
} gemm_ctx;

static void gemm_block(void *c, int64_t i)
{
    const gemm_ctx *g = c;
    int lo = (int)i * GEMM_ROWS;
    int m = g->M - lo < GEMM_ROWS ? g->M - lo : GEMM_ROWS;
    /* Rows lo.. of op(A): rows of A, or columns of A when transposed. */
    const float *a = g->ta ? g->A + lo : g->A + (size_t)lo * (size_t)g->lda;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                m, g->N, g->K, 1.0f, a, g->lda, g->B, g->ldb, 0.0f,
                g->C + (size_t)lo * (size_t)g->ldc, g->ldc);
}

static void gemm(rap_pool *pool, bool ta, bool tb, int M, int N, int K, const float *A, int lda,
                 const float *B, int ldb, float *C, int ldc)
{
    gemm_ctx g = {ta, tb, M, N, K, lda, ldb, ldc, A, B, C};
    int64_t blocks = (M + GEMM_ROWS - 1) / GEMM_ROWS;
    if (!pool || blocks == 1) {
        for (int64_t i = 0; i < blocks; i++)
            gemm_block(&g, i);
        return;
    }
    rap_pool_for(pool, blocks, gemm_block, &g);
}

/* ------------------------------------------------------------ linear */

typedef struct {
    float *y;
    const float *b;
    const float *dy_src;
    int out;
    bool relu;
    int64_t n;
    float *dy, *db;
} lin_ctx;

static void bias_relu_rows(void *c, int64_t lo, int64_t hi)
{
    const lin_ctx *k = c;
    for (int64_t r = lo; r < hi; r++) {
        float *y = k->y + r * k->out;
        for (int j = 0; j < k->out; j++) {
            float v = y[j] + k->b[j];
            y[j] = k->relu && !(v > 0.0f) ? 0.0f : v;
        }
    }
}

void rap_cpu_linear_forward(const float *x, const float *w, const float *b, int64_t n, int in,
                            int out, bool relu, float *y, rap_pool *pool)
{
    gemm(pool, false, true, (int)n, out, in, x, in, w, in, y, out);
    lin_ctx k = {.y = y, .b = b, .out = out, .relu = relu};
    par_for(pool, n, ROW_CHUNK, bias_relu_rows, &k);
}

/* dy = 0 where y <= 0 (PyTorch's threshold_backward: pass where y > 0). */
static void relu_mask_rows(void *c, int64_t lo, int64_t hi)
{
    const lin_ctx *k = c;
    for (int64_t r = lo; r < hi; r++) {
        const float *y = k->y + r * k->out;
        float *dy = k->dy + r * k->out;
        for (int j = 0; j < k->out; j++)
            if (!(y[j] > 0.0f))
                dy[j] = 0.0f;
    }
}

/* db[j] for j in [lo, hi): sum of dy[r, j] over r = 0, 1, ... in order. */
static void colsum_cols(void *c, int64_t lo, int64_t hi)
{
    const lin_ctx *k = c;
    for (int64_t j = lo; j < hi; j++)
        k->db[j] = 0.0f;
    for (int64_t r = 0; r < k->n; r++) {
        const float *dy = k->dy_src + r * k->out;
        for (int64_t j = lo; j < hi; j++)
            k->db[j] += dy[j];
    }
}

void rap_cpu_linear_backward(const float *x, const float *w, const float *y, float *dy,
                             int64_t n, int in, int out, bool relu, float *dw, float *db,
                             float *dx, rap_pool *pool)
{
    lin_ctx k = {.y = (float *)y, .dy = dy, .dy_src = dy, .out = out, .n = n, .db = db};
    if (relu)
        par_for(pool, n, ROW_CHUNK, relu_mask_rows, &k);
    gemm(pool, true, false, out, in, (int)n, dy, out, x, in, dw, in);
    par_for(pool, out, 16, colsum_cols, &k);
    if (dx)
        gemm(pool, false, false, (int)n, in, out, dy, out, w, in, dx, in);
}

/* ------------------------------------------------------------ interaction */

typedef struct {
    const float *x, *emb, *dout;
    float *out, *dx, *demb;
    int T, D;
} inter_ctx;

static inline const float *zvec(const inter_ctx *k, int64_t r, int f)
{
    return f == 0 ? k->x + r * k->D : k->emb + (r * k->T + (f - 1)) * k->D;
}

static void inter_fwd_rows(void *c, int64_t lo, int64_t hi)
{
    const inter_ctx *k = c;
    int F = k->T + 1, D = k->D;
    int64_t w = (int64_t)D + (int64_t)F * (F - 1) / 2;
    for (int64_t r = lo; r < hi; r++) {
        float *o = k->out + r * w;
        memcpy(o, k->x + r * D, sizeof(float) * (size_t)D);
        int64_t p = D;
        for (int i = 1; i < F; i++) {
            const float *zi = zvec(k, r, i);
            for (int j = 0; j < i; j++) {
                const float *zj = zvec(k, r, j);
                float s = 0.0f;
                for (int d = 0; d < D; d++)
                    s += zi[d] * zj[d];
                o[p++] = s;
            }
        }
    }
}

void rap_cpu_interaction_forward(const float *x, const float *emb, int64_t n, int T, int D,
                                 float *out, rap_pool *pool)
{
    inter_ctx k = {.x = x, .emb = emb, .out = out, .T = T, .D = D};
    par_for(pool, n, ROW_CHUNK, inter_fwd_rows, &k);
}

static void inter_bwd_rows(void *c, int64_t lo, int64_t hi)
{
    const inter_ctx *k = c;
    int F = k->T + 1, D = k->D;
    int64_t w = (int64_t)D + (int64_t)F * (F - 1) / 2;
    for (int64_t r = lo; r < hi; r++) {
        const float *g = k->dout + r * w;
        float *dx = k->dx + r * D;
        float *de = k->demb + r * k->T * D;
        memcpy(dx, g, sizeof(float) * (size_t)D);
        memset(de, 0, sizeof(float) * (size_t)k->T * (size_t)D);
        int64_t p = D;
        for (int i = 1; i < F; i++) {
            const float *zi = zvec(k, r, i);
            float *dzi = de + (int64_t)(i - 1) * D;
            for (int j = 0; j < i; j++) {
                const float *zj = zvec(k, r, j);
                float *dzj = j == 0 ? dx : de + (int64_t)(j - 1) * D;
                float gp = g[p++];
                for (int d = 0; d < D; d++) {
                    dzi[d] += gp * zj[d];
                    dzj[d] += gp * zi[d];
                }
            }
        }
    }
}

void rap_cpu_interaction_backward(const float *x, const float *emb, const float *dout, int64_t n,
                                  int T, int D, float *dx, float *demb, rap_pool *pool)
{
    inter_ctx k = {.x = x, .emb = emb, .dout = dout, .dx = dx, .demb = demb, .T = T, .D = D};
    par_for(pool, n, ROW_CHUNK, inter_bwd_rows, &k);
}

/* ------------------------------------------------------------ embedding bag */

typedef struct {
    const void *table;
    rap_emb_dtype dt;
    int64_t R;
    int D, T, t;
    const int64_t *off, *ids;
    float *emb;
    atomic_llong bad;
} bag_ctx;

/* Element e of a table of type dt, widened exactly. */
static inline float table_at(const void *tab, rap_emb_dtype dt, int64_t e)
{
    switch (dt) {
    case RAP_EMB_BF16: return rap_bf16_to_f32(((const uint16_t *)tab)[e]);
    case RAP_EMB_FP16: return rap_fp16_to_f32(((const uint16_t *)tab)[e]);
    default: return ((const float *)tab)[e];
    }
}

static void bag_fwd_rows(void *c, int64_t lo, int64_t hi)
{
    bag_ctx *k = c;
    int D = k->D;
    int64_t bad = 0;
    for (int64_t r = lo; r < hi; r++) {
        float *o = k->emb + (r * k->T + k->t) * D;
        for (int d = 0; d < D; d++)
            o[d] = 0.0f;
        int64_t a = k->off[r], e = k->off[r + 1];
        if (e < a)
            bad++;
        for (int64_t p = a; p < e; p++) {
            int64_t id = k->ids[p];
            if (id < 0 || id >= k->R) {
                bad++;
                continue;
            }
            /* the first id's row is copied (as the GPU loads it), the others added */
            const int64_t row = id * D;
            if (p == a)
                for (int d = 0; d < D; d++)
                    o[d] = table_at(k->table, k->dt, row + d);
            else
                for (int d = 0; d < D; d++)
                    o[d] += table_at(k->table, k->dt, row + d);
        }
    }
    if (bad)
        atomic_fetch_add(&k->bad, bad);
}

int64_t rap_cpu_bag_forward(const void *table, rap_emb_dtype dt, int64_t R, int D,
                            const int64_t *off, const int64_t *ids, int64_t n, int T, int t,
                            float *emb, rap_pool *pool)
{
    bag_ctx k = {.table = table, .dt = dt, .R = R, .D = D, .T = T, .t = t, .off = off,
                 .ids = ids, .emb = emb};
    atomic_init(&k.bad, 0);
    par_for(pool, n, ROW_CHUNK, bag_fwd_rows, &k);
    return (int64_t)atomic_load(&k.bad);
}

/* ------------------------------------------------------------ loss */

double rap_cpu_bce(const float *logit, const float *label, int64_t n, float *dlogit)
{
    return rap_cpu_bce_div(logit, label, n, (double)n, dlogit);
}

double rap_cpu_bce_div(const float *logit, const float *label, int64_t n, double div,
                       float *dlogit)
{
    double sum = 0.0;
    for (int64_t r = 0; r < n; r++) {
        double s = logit[r], y = label[r];
        /* log(1 + exp(-|s|)) + max(s, 0) - s y: stable for any s. */
        sum += (s > 0.0 ? s : 0.0) - s * y + log1p(exp(-fabs(s)));
        if (dlogit) {
            double sig = s >= 0.0 ? 1.0 / (1.0 + exp(-s)) : exp(s) / (1.0 + exp(s));
            dlogit[r] = (float)((sig - y) / div);
        }
    }
    return sum / div;
}

/* ------------------------------------------------------------ optimizer */

/* SGD or PyTorch's Adagrad (state += g*g; w += -lr * (g / (sqrt(state) +
 * eps))) on one element (emb_math.h). */
static inline void opt_update(float *w, float *s, float g, rap_optimizer opt, float lr, float eps)
{
    if (opt == RAP_SGD)
        *w = rap_emb_sgd(*w, g, lr);
    else
        *w = rap_emb_adagrad(*w, g, s, lr, eps);
}

typedef struct {
    float *w, *s;
    const float *g;
    rap_optimizer opt;
    float lr, eps;
} opt_ctx;

static void opt_range(void *c, int64_t lo, int64_t hi)
{
    const opt_ctx *k = c;
    for (int64_t i = lo; i < hi; i++)
        opt_update(&k->w[i], k->s ? &k->s[i] : NULL, k->g[i], k->opt, k->lr, k->eps);
}

void rap_cpu_optimizer_step(float *w, const float *g, float *s, size_t n, rap_optimizer opt,
                            float lr, float eps, rap_pool *pool)
{
    opt_ctx k = {.w = w, .s = s, .g = g, .opt = opt, .lr = lr, .eps = eps};
    par_for(pool, (int64_t)n, 4096, opt_range, &k);
}

/* ------------------------------------------------------------ embedding backward */

/* Stable bottom-up merge sort of a (n) by id, tmp (n) scratch. */
static void sort_keys(rap_cpu_key *a, rap_cpu_key *tmp, int64_t n)
{
    rap_cpu_key *src = a, *dst = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n;
            int64_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = src[j].id < src[i].id ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
        }
        rap_cpu_key *x = src;
        src = dst;
        dst = x;
    }
    if (src != a)
        memcpy(a, src, sizeof *a * (size_t)n);
}

/* Tables [lo, hi): gather the keys of table t in (row, position) order,
 * then sort them by id, keeping that order among equal ids. */
static void gather_sort_tables(void *c, int64_t lo, int64_t hi)
{
    const rap_cpu_emb_update *u = c;
    for (int64_t t = lo; t < hi; t++) {
        rap_cpu_key *k = u->keys + u->seg[t];
        const int64_t *off = u->off[t], *ids = u->ids[t];
        int64_t o = 0;
        for (int64_t r = 0; r < u->n; r++)
            for (int64_t p = off[r]; p < off[r + 1]; p++)
                k[o++] = (rap_cpu_key){ids[p], (int32_t)t, (int32_t)r};
        sort_keys(k, u->tmp + u->seg[t], o);
    }
}

/* Column d of the summed gradient of the group of keys [i, j) (table t):
 * the rows' gradients added in key order, from 0. */
static inline float group_grad(const rap_cpu_emb_update *u, const rap_cpu_key *k, int64_t i,
                               int64_t j, int t, int d)
{
    float g = 0.0f;
    for (int64_t q = i; q < j; q++)
        g += u->demb[((int64_t)k[q].row * u->T + t) * u->D + d];
    return g;
}

/* Sum of the squares of the group's summed gradient, in emb_math.h's
 * order (the GPU warp's): blocks of 32 V columns, lane sums, butterfly. */
static float group_sumsq(const rap_cpu_emb_update *u, const rap_cpu_key *k, int64_t i, int64_t j,
                         int t)
{
    const int D = u->D, V = rap_emb_vec(D);
    float total = 0.0f;
    for (int cb = 0; cb < D; cb += 32 * V) {
        float x[32] = {0};
        for (int d = cb; d < D && d < cb + 32 * V; d++) {
            const float g = group_grad(u, k, i, j, t, d);
            x[(d - cb) / V] = RAP_FADD(x[(d - cb) / V], RAP_FMUL(g, g));
        }
        total = RAP_FADD(total, rap_emb_butterfly(x));
    }
    return total;
}

/* One optimizer step on the row of the group of keys [i, j). */
static void update_row(const rap_cpu_emb_update *u, const rap_cpu_key *k, int64_t i, int64_t j)
{
    const int t = k[i].t, D = u->D;
    const int64_t e0 = k[i].id * D;
    float mult = 0.0f;
    if (u->opt == RAP_ROWWISE_ADAGRAD)
        mult = rap_emb_rowwise_mult(&u->state[t][k[i].id], group_sumsq(u, k, i, j, t), D, u->lr,
                                    u->eps);
    if (u->dtype == RAP_EMB_FP32) {
        float *w = (float *)u->tables[t] + e0;
        float *s = u->opt == RAP_ADAGRAD ? u->state[t] + e0 : NULL;
        for (int d = 0; d < D; d++) {
            const float g = group_grad(u, k, i, j, t, d);
            if (u->opt == RAP_ROWWISE_ADAGRAD)
                w[d] = rap_emb_rowwise(w[d], g, mult);
            else
                opt_update(&w[d], s ? &s[d] : NULL, g, u->opt, u->lr, u->eps);
        }
        return;
    }
    /* 16 bits: widen, update in fp32, round stochastically with the row's stream */
    const uint64_t key = rap_sr_row_key(rap_sr_step_key(u->seed, u->step),
                                        (uint32_t)(u->gtable ? u->gtable[t] : t),
                                        (uint64_t)((u->grow0 ? u->grow0[t] : 0) + k[i].id));
    uint16_t *w = (uint16_t *)u->tables[t] + e0;
    float *s = u->opt == RAP_ADAGRAD ? u->state[t] + e0 : NULL;
    const bool fp16 = u->dtype == RAP_EMB_FP16;
    for (int d = 0; d < D; d++) {
        const float g = group_grad(u, k, i, j, t, d);
        float x = fp16 ? rap_fp16_to_f32(w[d]) : rap_bf16_to_f32(w[d]);
        if (u->opt == RAP_ROWWISE_ADAGRAD)
            x = rap_emb_rowwise(x, g, mult);
        else
            opt_update(&x, s ? &s[d] : NULL, g, u->opt, u->lr, u->eps);
        const uint32_t r = rap_sr_bits(key, (uint32_t)d);
        w[d] = fp16 ? rap_f32_to_fp16_sr(x, r) : rap_f32_to_bf16_sr(x, r);
    }
}

/* Keys [lo, hi): every (t, id) group that starts here (it may run past
 * hi) gets its summed gradient and one optimizer step. */
static void update_groups(void *c, int64_t lo, int64_t hi)
{
    const rap_cpu_emb_update *u = c;
    const rap_cpu_key *k = u->keys;
    int64_t K = u->seg[u->T];
    for (int64_t i = lo; i < hi; i++) {
        if (i > 0 && k[i].t == k[i - 1].t && k[i].id == k[i - 1].id)
            continue;
        int64_t j = i + 1;
        while (j < K && k[j].t == k[i].t && k[j].id == k[i].id)
            j++;
        update_row(u, k, i, j);
    }
}

void rap_cpu_emb_backward(const rap_cpu_emb_update *u, rap_pool *pool)
{
    u->seg[0] = 0;
    for (int t = 0; t < u->T; t++)
        u->seg[t + 1] = u->seg[t] + (u->off[t][u->n] - u->off[t][0]);
    par_for(pool, u->T, 1, gather_sort_tables, (void *)u);
    par_for(pool, u->seg[u->T], 1024, update_groups, (void *)u);
}
