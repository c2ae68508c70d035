/*
 * test_model_shard.c -- the hybrid-parallel model contract (model.h,
 * rap_model_shard): R sharded models, with the exchange between ranks done
 * here in memory, train the same model as one unsharded model with the
 * global batch.
 *
 * Simulation of one step over R ranks (what src/dist does with a comm
 * layer): every rank's emb_forward on the global batch (ids of its local
 * tables, filtered to its row range and made local); all-to-all of the
 * pooled rows (rank r gets its rows of every local table of every rank,
 * row-range partials summed); mlp_forward / mlp_backward on the rank's
 * rows; grads summed over ranks and written back into every rank; dense
 * apply; demb back to every local table (a row-range partial gets the
 * whole table's gradient); emb_backward on the global batch.
 *
 * Checked: initial weights bit for bit (local tables = their rows of the
 * unsharded tables), then after SGD and Adagrad steps (duplicate ids,
 * multi-id bags, short global batches with rap_model_set_loss_rows, one
 * leaving a rank without rows) the sum of the ranks' losses and every weight and Adagrad accumulator
 * against the unsharded model; placements: table-wise, a table split by
 * rows over two ranks, a rank with no table. Negative controls: a missed
 * partial, a per-rank loss mean, a missing all-reduce must each be caught.
 * Plus config checks, tensor names and origins, bytes, misuse refusals.
 * GPU (skips without one): GPU shards against the GPU unsharded model and
 * against the CPU shards.
 */
#include "core/core.h"
#include "model/model.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_R 4
#define NT 4
#define ND 4

/* ------------------------------------------------------------ memory */

/* Device buffers of one simulation, freed together. */
typedef struct {
    rap_device dev;
    void *p[512];
    int n;
} allocs;

/* A copy of host on dev (the host pointer itself for the CPU). */
static const void *put(allocs *a, const void *host, size_t bytes)
{
    if (a->dev == RAP_CPU)
        return host;
#ifdef RAP_HAVE_CUDA
    void *d = NULL;
    if (a->n >= 512 || cudaMalloc(&d, bytes ? bytes : 8) != cudaSuccess)
        return NULL;
    a->p[a->n++] = d;
    if (bytes && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        return NULL;
    return d;
#else
    return NULL;
#endif
}

static void allocs_free(allocs *a)
{
#ifdef RAP_HAVE_CUDA
    for (int i = 0; i < a->n; i++)
        cudaFree(a->p[i]);
#endif
    a->n = 0;
}

/* rows rows of cols floats, dst rows dld apart, src rows sld apart; either
 * side on the device of dev. Synchronous. */
static bool copy_rows(rap_device dev, float *dst, int64_t dld, const float *src, int64_t sld,
                      int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return true;
    if (dev == RAP_CPU) {
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + r * dld, src + r * sld, sizeof(float) * (size_t)cols);
        return true;
    }
#ifdef RAP_HAVE_CUDA
    return cudaMemcpy2D(dst, sizeof(float) * (size_t)dld, src, sizeof(float) * (size_t)sld,
                        sizeof(float) * (size_t)cols, (size_t)rows, cudaMemcpyDefault) ==
               cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess;
#else
    return false;
#endif
}

/* ------------------------------------------------------------ model shapes */

static const int64_t TROWS[NT] = {5, 11, 40, 7};

static void base_config(rap_model_config *c, rap_optimizer opt, int64_t batch)
{
    rap_model_config_defaults(c);
    c->n_dense = ND;
    c->n_tables = NT;
    for (int t = 0; t < NT; t++)
        c->table_rows[t] = TROWS[t];
    c->emb_dim = 4;
    c->n_bot = 2;
    c->bot[0] = 8;
    c->bot[1] = 4;
    c->n_top = 2;
    c->top[0] = 8;
    c->top[1] = 1;
    c->batch = batch;
    c->max_bag = 3;
    c->optimizer = opt;
    c->lr = opt == RAP_SGD ? 0.1f : 0.05f;
    c->adagrad_init = 0.01f;
    c->seed = 5;
    c->threads = 1;
    c->strict_fp32 = true;
}

/* A placement: R ranks, each a list of (table, row0, rows). */
typedef struct {
    int R;
    int n[MAX_R];
    int table[MAX_R][NT + 1];
    int64_t row0[MAX_R][NT + 1], rows[MAX_R][NT + 1];
} placement;

static void place(placement *p, int r, int t, int64_t row0, int64_t rows)
{
    int k = p->n[r]++;
    p->table[r][k] = t;
    p->row0[r][k] = row0;
    p->rows[r][k] = rows > 0 ? rows : TROWS[t] - row0;
}

/* 0: R 2, table-wise. 1: R 3, table 2 split 13 / 27 over ranks 0 and 1,
 * rank 2 holds nothing. 2: R 2, table 3 split 3 / 4 over both ranks. */
static void placement_make(placement *p, int which)
{
    memset(p, 0, sizeof *p);
    if (which == 0) {
        p->R = 2;
        place(p, 0, 0, 0, 0);
        place(p, 0, 2, 0, 0);
        place(p, 1, 3, 0, 0);
        place(p, 1, 1, 0, 0);
    } else if (which == 1) {
        p->R = 3;
        place(p, 0, 2, 0, 13);
        place(p, 0, 0, 0, 0);
        place(p, 1, 1, 0, 0);
        place(p, 1, 2, 13, 0);
        place(p, 1, 3, 0, 0);
    } else {
        p->R = 2;
        place(p, 0, 0, 0, 0);
        place(p, 0, 3, 0, 3);
        place(p, 0, 1, 0, 0);
        place(p, 1, 3, 3, 0);
        place(p, 1, 2, 0, 0);
    }
}

/* Rows [lo, lo + n) of a global batch of bg rows for rank r of R (the
 * first bg % R ranks take one more). */
static void row_share(int64_t bg, int R, int r, int64_t *lo, int64_t *n)
{
    int64_t q = bg / R, e = bg % R;
    *lo = r * q + (r < e ? r : e);
    *n = q + (r < e ? 1 : 0);
}

/* ------------------------------------------------------------ batches */

#define BG 13 /* global batch */

typedef struct {
    int64_t rows;
    float dense[BG * ND], label[BG];
    int64_t off[NT][BG + 1], ids[NT][BG * 3 + 1];
    /* rank r's view: local table k's bags over all rows, local ids */
    int64_t loff[MAX_R][NT + 1][BG + 1], lids[MAX_R][NT + 1][BG * 3 + 1];
} gbatch;

/* Random global batch of rows rows: bags of 0..3 ids, duplicates inside
 * bags and (small tables) across rows; then every rank's local view. */
static void gbatch_make(gbatch *b, const placement *p, int64_t rows, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->rows = rows;
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 7;
    for (int64_t i = 0; i < rows * ND; i++)
        b->dense[i] = (float)((rap_splitmix64(&s) >> 40) % 2000) / 1000.0f - 1.0f;
    for (int64_t r = 0; r < rows; r++)
        b->label[r] = (float)(rap_splitmix64(&s) & 1);
    for (int t = 0; t < NT; t++) {
        int64_t n = 0;
        for (int64_t r = 0; r < rows; r++) {
            int k = (int)(rap_splitmix64(&s) % 4);
            for (int j = 0; j < k; j++) {
                int64_t id = (int64_t)(rap_splitmix64(&s) % (uint64_t)TROWS[t]);
                if (j > 0 && (rap_splitmix64(&s) & 3) == 0)
                    id = b->ids[t][n - 1];
                b->ids[t][n++] = id;
            }
            b->off[t][r + 1] = n;
        }
    }
    for (int q = 0; q < p->R; q++)
        for (int k = 0; k < p->n[q]; k++) {
            int t = p->table[q][k];
            int64_t lo = p->row0[q][k], hi = lo + p->rows[q][k], n = 0;
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t i = b->off[t][r]; i < b->off[t][r + 1]; i++)
                    if (b->ids[t][i] >= lo && b->ids[t][i] < hi)
                        b->lids[q][k][n++] = b->ids[t][i] - lo;
                b->loff[q][k][r + 1] = n;
            }
        }
}

/* The model batches of b on a's device: the global one (unsharded), every
 * rank's b_glob and b_loc. */
typedef struct {
    rap_model_batch whole;
    rap_model_batch glob[MAX_R], loc[MAX_R];
} mbatches;

static bool mbatches_make(mbatches *mb, allocs *a, const gbatch *b, const placement *p)
{
    memset(mb, 0, sizeof *mb);
    const float *dense = put(a, b->dense, sizeof(float) * (size_t)(b->rows * ND));
    const float *label = put(a, b->label, sizeof(float) * (size_t)b->rows);
    if (!dense || !label)
        return false;
    mb->whole.rows = b->rows;
    mb->whole.dense = dense;
    mb->whole.label = label;
    for (int t = 0; t < NT; t++) {
        mb->whole.off[t] = put(a, b->off[t], sizeof(int64_t) * (size_t)(b->rows + 1));
        mb->whole.ids[t] = put(a, b->ids[t], sizeof(int64_t) * (size_t)b->off[t][b->rows]);
        if (!mb->whole.off[t] || !mb->whole.ids[t])
            return false;
    }
    for (int q = 0; q < p->R; q++) {
        int64_t lo, n;
        row_share(b->rows, p->R, q, &lo, &n);
        mb->loc[q].rows = n;
        mb->loc[q].dense = dense + lo * ND;
        mb->loc[q].label = label + lo;
        mb->glob[q].rows = b->rows;
        for (int k = 0; k < p->n[q]; k++) {
            mb->glob[q].off[k] = put(a, b->loff[q][k], sizeof(int64_t) * (size_t)(b->rows + 1));
            mb->glob[q].ids[k] =
                put(a, b->lids[q][k], sizeof(int64_t) * (size_t)b->loff[q][k][b->rows]);
            if (!mb->glob[q].off[k] || !mb->glob[q].ids[k])
                return false;
        }
    }
#ifdef RAP_HAVE_CUDA
    /* the models run on non-blocking streams: wait for the copies */
    if (a->dev == RAP_GPU)
        return cudaDeviceSynchronize() == cudaSuccess;
#endif
    return true;
}

/* ------------------------------------------------------------ simulation */

enum { FLAW_NONE = 0, FLAW_PARTIAL, FLAW_LOSS_MEAN, FLAW_NO_ALLREDUCE };

typedef struct {
    placement p;
    rap_device dev;
    rap_model *m[MAX_R];
    rap_model_shard_bufs buf[MAX_R];
    int flaw;
} sim;

static void sim_free(sim *s)
{
    for (int r = 0; r < MAX_R; r++)
        rap_model_free(s->m[r]);
    memset(s->m, 0, sizeof s->m);
}

/* R sharded models of base config c (batch set per rank). */
static rap_status sim_create(sim *s, const placement *p, const rap_model_config *c,
                             rap_device dev, int flaw)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->dev = dev;
    s->flaw = flaw;
    for (int r = 0; r < p->R; r++) {
        /* the shard is on the stack and scribbled over after create: the
         * model must keep its own copy */
        rap_model_shard sh;
        memset(&sh, 0, sizeof sh);
        sh.n_local = p->n[r];
        for (int k = 0; k < p->n[r]; k++) {
            sh.table[k] = p->table[r][k];
            sh.row0[k] = p->row0[r][k];
            sh.rows[k] = p->rows[r][k];
        }
        sh.emb_batch = BG;
        sh.loss_rows = BG;
        rap_model_config rc = *c;
        rc.batch = (BG + p->R - 1) / p->R;
        rc.shard = &sh;
        rap_status st = rap_model_create(&rc, dev, &s->m[r]);
        memset(&sh, 0xff, sizeof sh);
        if (st != RAP_OK)
            return st;
        RAP_TRY(rap_model_shard_buffers(s->m[r], &s->buf[r]));
    }
    return RAP_OK;
}

/* emb_forward of every rank on b, then the all-to-all: e (bg, T, D) =
 * sum of the partials, every rank's rows of it into its emb. e and eo
 * (scratch) hold BG x T x D floats. */
static rap_status sim_forward(sim *s, const gbatch *b, const mbatches *mb, float *e, float *eo)
{
    const placement *p = &s->p;
    const int R = p->R, D = 4, TD = NT * D;
    const int64_t bg = b->rows;
    memset(e, 0, sizeof(float) * (size_t)(BG * TD));
    for (int q = 0; q < R; q++) {
        RAP_TRY(rap_model_emb_forward(s->m[q], &mb->glob[q]));
        RAP_TRY(rap_model_sync(s->m[q]));
        const int tl = p->n[q];
        if (!tl)
            continue;
        if (!copy_rows(s->dev, eo, tl * D, s->buf[q].emb_out, tl * D, bg, tl * D))
            return rap_fail(RAP_ERR_INTERNAL, "test exchange: reading emb_out of rank %d", q);
        for (int k = 0; k < tl; k++) {
            if (s->flaw == FLAW_PARTIAL && p->row0[q][k] > 0)
                continue;
            int t = p->table[q][k];
            for (int64_t g = 0; g < bg; g++)
                for (int d = 0; d < D; d++)
                    e[g * TD + t * D + d] += eo[(g * tl + k) * D + d];
        }
    }
    for (int r = 0; r < R; r++) {
        int64_t lo, n;
        row_share(bg, R, r, &lo, &n);
        if (!copy_rows(s->dev, s->buf[r].emb, s->buf[r].emb_ld, e + lo * TD, TD, n, TD))
            return rap_fail(RAP_ERR_INTERNAL, "test exchange: writing emb of rank %d", r);
    }
    return RAP_OK;
}

/* Logits (b->rows) of the ranks' predict on their rows after sim_forward. */
static rap_status sim_predict(sim *s, const gbatch *b, const mbatches *mb, float *logits)
{
    const int TD = NT * 4;
    float *eo = malloc(sizeof(float) * (size_t)(BG * TD));
    float *e = malloc(sizeof(float) * (size_t)(BG * TD));
    rap_status st = eo && e ? sim_forward(s, b, mb, e, eo) : RAP_ERR_NOMEM;
    for (int r = 0; r < s->p.R && st == RAP_OK; r++) {
        int64_t lo, n;
        row_share(b->rows, s->p.R, r, &lo, &n);
        if (n > 0)
            st = rap_model_predict(s->m[r], &mb->loc[r], logits + lo);
    }
    free(eo);
    free(e);
    return st;
}

/* One training step of all ranks on global batch b; *loss = sum of the
 * ranks' losses. The exchange in host memory, as src/dist would do it. */
static rap_status sim_step(sim *s, const gbatch *b, const mbatches *mb, double *loss)
{
    const placement *p = &s->p;
    const int R = p->R, D = 4, TD = NT * D;
    const int64_t bg = b->rows;
    float *eo = malloc(sizeof(float) * (size_t)(BG * TD)); /* one rank's emb_out / demb_out */
    float *e = malloc(sizeof(float) * (size_t)(BG * TD));  /* (bg, T, D) global emb / demb */
    float *gsum = NULL, *gone = NULL;
    rap_status st = RAP_ERR_NOMEM;
    if (!eo || !e)
        goto done;
    if ((st = sim_forward(s, b, mb, e, eo)) != RAP_OK)
        goto done;
    st = RAP_ERR_NOMEM;
    const size_t ng = s->buf[0].n_grads;
    gsum = calloc(ng, sizeof(float));
    gone = malloc(sizeof(float) * ng);
    if (!gsum || !gone)
        goto done;
    *loss = 0;
    for (int r = 0; r < R; r++) {
        int64_t lo, n;
        row_share(bg, R, r, &lo, &n);
        if (n == 0) {
            /* no rows of this (short) global batch: no MLP phases, zero
             * gradients into the all-reduce (model.h, dense_apply) */
            st = RAP_ERR_INTERNAL;
            if (!copy_rows(s->dev, s->buf[r].grads, (int64_t)ng, gsum, (int64_t)ng, 1,
                           (int64_t)ng))
                goto done;
            continue;
        }
        if ((st = rap_model_set_loss_rows(s->m[r], s->flaw == FLAW_LOSS_MEAN ? n : bg)) !=
            RAP_OK)
            goto done;
        if ((st = rap_model_mlp_forward(s->m[r], &mb->loc[r])) != RAP_OK)
            goto done;
        double l = 0;
        if ((st = rap_model_last_loss(s->m[r], &l)) != RAP_OK)
            goto done;
        *loss += l;
        if ((st = rap_model_mlp_backward(s->m[r], &mb->loc[r])) != RAP_OK)
            goto done;
        if ((st = rap_model_sync(s->m[r])) != RAP_OK)
            goto done;
    }
    /* all-reduce (sum) of the dense gradients, in rank order */
    st = RAP_ERR_INTERNAL;
    for (int r = 0; r < R; r++) {
        if (s->buf[r].n_grads != ng)
            goto done;
        if (!copy_rows(s->dev, gone, (int64_t)ng, s->buf[r].grads, (int64_t)ng, 1, (int64_t)ng))
            goto done;
        for (size_t i = 0; i < ng; i++)
            gsum[i] += gone[i];
    }
    if (s->flaw != FLAW_NO_ALLREDUCE)
        for (int r = 0; r < R; r++)
            if (!copy_rows(s->dev, s->buf[r].grads, (int64_t)ng, gsum, (int64_t)ng, 1,
                           (int64_t)ng))
                goto done;
    for (int r = 0; r < R; r++)
        if ((st = rap_model_dense_apply(s->m[r])) != RAP_OK)
            goto done;
    st = RAP_ERR_INTERNAL;
    /* reverse exchange: every rank's demb rows into e, then to the tables */
    for (int r = 0; r < R; r++) {
        int64_t lo, n;
        row_share(bg, R, r, &lo, &n);
        if (!copy_rows(s->dev, e + lo * TD, TD, s->buf[r].demb, s->buf[r].demb_ld, n, TD))
            goto done;
    }
    for (int q = 0; q < R; q++) {
        const int tl = p->n[q];
        if (tl) {
            for (int64_t g = 0; g < bg; g++)
                for (int k = 0; k < tl; k++)
                    memcpy(eo + (g * tl + k) * D, e + g * TD + p->table[q][k] * D,
                           sizeof(float) * (size_t)D);
            if (!copy_rows(s->dev, s->buf[q].demb_out, tl * D, eo, tl * D, bg, tl * D))
                goto done;
        }
        if ((st = rap_model_emb_backward(s->m[q], &mb->glob[q])) != RAP_OK)
            goto done;
    }
    for (int q = 0; q < R; q++)
        if ((st = rap_model_sync(s->m[q])) != RAP_OK)
            goto done;
    st = RAP_OK;
done:
    free(eo);
    free(e);
    free(gsum);
    free(gone);
    if (st == RAP_ERR_INTERNAL && !rap_last_error()[0])
        rap_fail(RAP_ERR_INTERNAL, "test exchange: a device copy failed");
    return st;
}

/* ------------------------------------------------------------ comparisons */

/* |a - b| > atol + rtol |b| elements of n; the first few reported when
 * report. */
static int count_diff(rap_test_ctx *t, bool report, const char *what, const float *a,
                      const float *b, size_t n, float atol, float rtol)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= atol + rtol * fabsf(b[i]))) {
            if (report && bad < 3)
                rap_test_fail(t, __FILE__, __LINE__, "%s[%zu]: %.9g vs %.9g (diff %.3g)", what,
                              i, (double)a[i], (double)b[i], (double)d);
            bad++;
        }
    }
    return bad;
}

/* Every local table (and Adagrad state) of every rank against its rows of
 * the reference tensor, every MLP tensor against the reference's. ref is
 * an unsharded model, or (ref_sim) the same rank of another simulation. */
static int compare_sim(rap_test_ctx *t, bool report, const sim *s, const rap_model *ref,
                       const sim *ref_sim, float atol, float rtol)
{
    int bad = 0;
    bool ada = rap_model_config_of(s->m[0])->optimizer != RAP_SGD;
    float *a = malloc(sizeof(float) * 4096), *b = malloc(sizeof(float) * 4096);
    if (!a || !b) {
        free(a);
        free(b);
        return 1;
    }
    for (int r = 0; r < s->p.R; r++) {
        const rap_model *m = s->m[r];
        const rap_model *o = ref_sim ? ref_sim->m[r] : ref;
        int tl = s->p.n[r];
        for (int i = 0; i < rap_model_n_tensors(m); i++) {
            const rap_tensor_info *x = rap_model_tensor(m, i);
            int tab;
            int64_t row0;
            rap_model_tensor_origin(m, i, &tab, &row0);
            int j = ref_sim ? i : (i < tl ? tab : NT + (i - tl)); /* tensor of o */
            const rap_tensor_info *y = rap_model_tensor(o, j);
            if (!y || strcmp(x->name, y->name) != 0 || x->cols != y->cols ||
                y->rows * y->cols > 4096) {
                rap_test_fail(t, __FILE__, __LINE__, "rank %d tensor %d (%s) vs %s", r, i,
                              x->name, y ? y->name : "none");
                bad++;
                continue;
            }
            for (int stt = 0; stt < (ada ? 2 : 1); stt++) {
                /* row-wise Adagrad: a table's state is one float a row */
                int64_t sr = x->rows, sc = x->cols;
                if (stt)
                    rap_model_state_shape(m, i, &sr, &sc);
                int64_t skip = ref_sim ? 0 : row0 * sc;
                rap_status s1 = stt ? rap_model_get_state(m, i, a) : rap_model_get(m, i, a);
                rap_status s2 = stt ? rap_model_get_state(o, j, b) : rap_model_get(o, j, b);
                if (s1 != RAP_OK || s2 != RAP_OK) {
                    rap_test_fail(t, __FILE__, __LINE__, "get: %s", rap_last_error());
                    bad++;
                    continue;
                }
                char what[128];
                snprintf(what, sizeof what, "rank %d %s%s", r, x->name, stt ? " (state)" : "");
                bad += count_diff(t, report, what, a, b + skip, (size_t)(sr * sc), atol, rtol);
                if (!stt && i < tl && rap_model_tensor_dtype(m, i) != RAP_EMB_FP32) {
                    /* 16-bit tables: nearly every element the same bits */
                    int flips = count_diff(t, false, what, a, b + skip, (size_t)(sr * sc), 0, 0);
                    if (flips > (int)(sr * sc) / 100) {
                        if (report)
                            rap_test_fail(t, __FILE__, __LINE__, "%s: %d of %lld elements not "
                                                                 "bit for bit",
                                          what, flips, (long long)(sr * sc));
                        bad++;
                    }
                }
            }
        }
    }
    free(a);
    free(b);
    return bad;
}

/* ------------------------------------------------------------ the runs */

#define STEPS 5

/* Simulation of placement `which` (on dev, against an unsharded model on
 * dev; and, with cmp_cpu, against a CPU simulation too) for STEPS steps,
 * the last on a short global batch of 9 rows. Returns the number of
 * mismatches (weights after the last step, losses of every step); reports
 * them when report. */
static int run_case(rap_test_ctx *t, int which, rap_optimizer opt, rap_device dev, int flaw,
                    bool report, bool cmp_cpu, float atol, float rtol, rap_emb_dtype dt)
{
    placement p;
    placement_make(&p, which);
    rap_model_config c;
    base_config(&c, opt, BG);
    c.emb_dtype = dt;
    rap_model *u = NULL;
    sim s, sc;
    memset(&s, 0, sizeof s);
    memset(&sc, 0, sizeof sc);
    allocs a = {.dev = dev}, ac = {.dev = RAP_CPU};
    int bad = 0;
    rap_status st = rap_model_create(&c, dev, &u);
    if (st == RAP_OK)
        st = sim_create(&s, &p, &c, dev, flaw);
    if (st == RAP_OK && cmp_cpu)
        st = sim_create(&sc, &p, &c, RAP_CPU, flaw);
    if (st != RAP_OK) {
        rap_test_fail(t, __FILE__, __LINE__, "create: %s", rap_last_error());
        bad++;
        goto out;
    }
    /* initial weights: bit for bit */
    bad += compare_sim(t, true, &s, u, NULL, 0.0f, 0.0f);
    for (int k = 0; k < STEPS && !bad; k++) {
        gbatch *gb = malloc(sizeof *gb);
        mbatches mb, mbc;
        if (!gb) {
            bad++;
            break;
        }
        /* the last two global batches are short: 9 rows, then 2 (rank 2 of
         * 3 gets none) */
        gbatch_make(gb, &p, k == STEPS - 1 ? 2 : k == STEPS - 2 ? 9 : BG, 40 + (uint64_t)k);
        if (!mbatches_make(&mb, &a, gb, &p) || (cmp_cpu && !mbatches_make(&mbc, &ac, gb, &p))) {
            rap_test_fail(t, __FILE__, __LINE__, "batch copies");
            free(gb);
            bad++;
            break;
        }
        double ls = 0, lc = 0, lu = 0;
        st = sim_step(&s, gb, &mb, &ls);
        if (st == RAP_OK && cmp_cpu)
            st = sim_step(&sc, gb, &mbc, &lc);
        if (st == RAP_OK)
            st = rap_model_train_step(u, &mb.whole);
        if (st == RAP_OK)
            st = rap_model_last_loss(u, &lu);
        free(gb);
        if (st != RAP_OK) {
            rap_test_fail(t, __FILE__, __LINE__, "step %d: %s", k, rap_last_error());
            bad++;
            break;
        }
        if (!(fabs(ls - lu) <= 1e-6 + 1e-5 * fabs(lu))) {
            if (report)
                rap_test_fail(t, __FILE__, __LINE__, "step %d: loss of the ranks %.9g, "
                                                     "unsharded %.9g",
                              k, ls, lu);
            bad++;
        }
        if (cmp_cpu && !(fabs(ls - lc) <= 1e-6 + 1e-5 * fabs(lc))) {
            if (report)
                rap_test_fail(t, __FILE__, __LINE__, "step %d: loss GPU shards %.9g, CPU %.9g",
                              k, ls, lc);
            bad++;
        }
    }
    bad += compare_sim(t, report, &s, u, NULL, atol, rtol);
    if (cmp_cpu)
        bad += compare_sim(t, report, &s, NULL, &sc, atol, rtol);
    /* predict: emb_forward, exchange, then the MLPs of every rank */
    gbatch *gb = malloc(sizeof *gb);
    mbatches mb;
    if (gb) {
        float lg[BG], lu[BG];
        gbatch_make(gb, &p, BG, 99);
        st = mbatches_make(&mb, &a, gb, &p) ? sim_predict(&s, gb, &mb, lg) : RAP_ERR_INTERNAL;
        if (st == RAP_OK)
            st = rap_model_predict(u, &mb.whole, lu);
        if (st != RAP_OK) {
            rap_test_fail(t, __FILE__, __LINE__, "predict: %s", rap_last_error());
            bad++;
        } else {
            bad += count_diff(t, report, "logits", lg, lu, BG, atol, rtol);
        }
        free(gb);
    }
out:
    sim_free(&s);
    sim_free(&sc);
    rap_model_free(u);
    allocs_free(&a);
    allocs_free(&ac);
    return bad;
}

/* The weights moved well beyond the tolerance: a run that did nothing
 * would pass the comparisons. */
static void check_moves(rap_test_ctx *t, rap_device dev)
{
    placement p;
    placement_make(&p, 1);
    rap_model_config c;
    base_config(&c, RAP_SGD, BG);
    sim s;
    allocs a = {.dev = dev};
    REQUIRE_OK(sim_create(&s, &p, &c, dev, FLAW_NONE));
    float before[40 * 4], after[40 * 4];
    CHECK_OK(rap_model_get(s.m[1], 1, before)); /* rank 1's rows 13.. of table 2 */
    gbatch *gb = malloc(sizeof *gb);
    mbatches mb;
    REQUIRE(gb);
    gbatch_make(gb, &p, BG, 3);
    double l = 0;
    if (mbatches_make(&mb, &a, gb, &p)) {
        CHECK_OK(sim_step(&s, gb, &mb, &l));
    } else {
        CHECK(!"batch copies");
    }
    CHECK_OK(rap_model_get(s.m[1], 1, after));
    float moved = 0;
    for (int i = 0; i < 27 * 4; i++)
        moved = fmaxf(moved, fabsf(after[i] - before[i]));
    CHECK_MSG(moved > 1e-3f, "rank 1's part of table 2 moved only %g", (double)moved);
    CHECK(l > 0.1 && l < 10);
    free(gb);
    sim_free(&s);
    allocs_free(&a);
}

/* ------------------------------------------------------------ CPU tests */

RAP_TEST(model_shard_cpu_matches_unsharded)
{
    for (int which = 0; which < 3; which++)
        for (int o = 0; o < 2; o++) {
            rap_optimizer opt = o ? RAP_ADAGRAD : RAP_SGD;
            int bad = run_case(t, which, opt, RAP_CPU, FLAW_NONE, true, false, 1e-6f, 1e-5f,
                               RAP_EMB_FP32);
            CHECK_MSG(bad == 0, "placement %d, %s: %d mismatches", which,
                      o ? "Adagrad" : "SGD", bad);
        }
    check_moves(t, RAP_CPU);
}

/* The comparison catches a broken exchange or loss scale. */
/* Row-wise Adagrad keeps one state per local row: sharded as unsharded
 * (fp32 tables to float rounding). 16-bit tables: the rounding is keyed by
 * the global table and row, so the ranks round as the unsharded model
 * does; where the float sums of the two differ in their last bits a
 * rounding may go the other way: one step of the type (within 2^-7 of the
 * value), and rarely (compare_sim: at most 1 element in 100 not bit for
 * bit; a rank keying its local rows would differ in about half). */
RAP_TEST(model_shard_cpu_rowwise_and_bf16)
{
    for (int which = 0; which < 3; which++) {
        int bad = run_case(t, which, RAP_ROWWISE_ADAGRAD, RAP_CPU, FLAW_NONE, true, false,
                           1e-6f, 1e-5f, RAP_EMB_FP32);
        CHECK_MSG(bad == 0, "placement %d, row-wise fp32: %d mismatches", which, bad);
        bad = run_case(t, which, RAP_ROWWISE_ADAGRAD, RAP_CPU, FLAW_NONE, true, false, 1e-6f,
                       0x1p-7f, RAP_EMB_BF16);
        CHECK_MSG(bad == 0, "placement %d, row-wise bf16: %d mismatches", which, bad);
        bad = run_case(t, which, RAP_SGD, RAP_CPU, FLAW_NONE, true, false, 1e-6f, 0x1p-7f,
                       RAP_EMB_FP16);
        CHECK_MSG(bad == 0, "placement %d, SGD fp16: %d mismatches", which, bad);
    }
}

RAP_TEST(model_shard_cpu_catches_flaws)
{
    static const char *names[] = {"", "a missed row-range partial", "a per-rank loss mean",
                                  "no all-reduce of the dense gradients"};
    for (int flaw = FLAW_PARTIAL; flaw <= FLAW_NO_ALLREDUCE; flaw++) {
        int bad = run_case(t, 1, RAP_SGD, RAP_CPU, flaw, false, false, 1e-6f, 1e-5f,
                           RAP_EMB_FP32);
        CHECK_MSG(bad > 0, "%s went unnoticed", names[flaw]);
    }
}

static void expect_bad(rap_test_ctx *t, const rap_model_config *c, const char *msg)
{
    rap_status s = rap_model_config_check(c);
    CHECK_MSG(s == RAP_ERR_ARG, "expected a refusal mentioning '%s'", msg);
    CHECK_MSG(strstr(rap_last_error(), msg) != NULL, "message '%s' lacks '%s'",
              rap_last_error(), msg);
    rap_model *m = NULL;
    CHECK(rap_model_create(c, RAP_CPU, &m) == RAP_ERR_ARG && m == NULL);
}

RAP_TEST(model_shard_config_check)
{
    rap_model_config c;
    base_config(&c, RAP_SGD, 7);
    rap_model_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.n_local = 1;
    sh.table[0] = 2;
    sh.row0[0] = 10;
    sh.rows[0] = 30;
    sh.emb_batch = 13;
    sh.loss_rows = 13;
    c.shard = &sh;
    CHECK_OK(rap_model_config_check(&c));
    sh.rows[0] = 31; /* past the table's 40 rows */
    expect_bad(t, &c, "holds rows [10, 10 + 31) of table 2");
    sh.rows[0] = 0;
    expect_bad(t, &c, "at least 1 row");
    sh.rows[0] = 5;
    sh.row0[0] = -1;
    expect_bad(t, &c, "inside [0, 40)");
    sh.row0[0] = 0;
    sh.table[0] = NT;
    expect_bad(t, &c, "is table 4, expected 0..3");
    sh.table[0] = 1;
    sh.n_local = NT + 1;
    expect_bad(t, &c, "5 local tables, expected 0..4");
    sh.n_local = -1;
    expect_bad(t, &c, "expected 0..4");
    sh.n_local = 0;
    CHECK_OK(rap_model_config_check(&c));
    sh.emb_batch = 0;
    expect_bad(t, &c, "global batch 0");
    sh.emb_batch = 13;
    sh.loss_rows = 0;
    expect_bad(t, &c, "loss divisor 0");
}

RAP_TEST(model_shard_tensors_and_bytes)
{
    rap_model_config c;
    base_config(&c, RAP_ADAGRAD, 7);
    rap_model_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.n_local = 2;
    sh.table[0] = 3;
    sh.rows[0] = 7;
    sh.table[1] = 2;
    sh.row0[1] = 20;
    sh.rows[1] = 20;
    sh.emb_batch = 13;
    sh.loss_rows = 13;
    rap_model_config cs = c;
    cs.shard = &sh;
    rap_model *m = NULL, *u = NULL;
    REQUIRE_OK(rap_model_create(&cs, RAP_CPU, &m));
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &u));
    CHECK(rap_model_n_tensors(m) == 2 + 2 * 2 + 2 * 2);
    CHECK(rap_model_n_tensors(u) == NT + 8);
    const rap_tensor_info *x = rap_model_tensor(m, 0);
    CHECK(x && strcmp(x->name, "emb_l.3.weight") == 0 && x->rows == 7 && x->cols == 4);
    x = rap_model_tensor(m, 1);
    CHECK(x && strcmp(x->name, "emb_l.2.weight") == 0 && x->rows == 20);
    x = rap_model_tensor(m, 2);
    CHECK(x && strcmp(x->name, "bot_l.0.weight") == 0);
    int tab = 99;
    int64_t row0 = 99;
    rap_model_tensor_origin(m, 1, &tab, &row0);
    CHECK(tab == 2 && row0 == 20);
    rap_model_tensor_origin(m, 0, &tab, &row0);
    CHECK(tab == 3 && row0 == 0);
    rap_model_tensor_origin(m, 2, &tab, &row0);
    CHECK(tab == -1 && row0 == 0);
    rap_model_tensor_origin(m, 99, &tab, NULL);
    CHECK(tab == -1);
    rap_model_tensor_origin(u, 3, &tab, &row0);
    CHECK(tab == 3 && row0 == 0);
    /* the model's config points at its own copy of the shard */
    const rap_model_config *mc = rap_model_config_of(m);
    CHECK(mc->shard && mc->shard != &sh && mc->shard->rows[1] == 20);
    /* bytes: the tables held (47 rows, not 63) and the exchange buffers
     * (2 x 13 x 2 x 4 floats), activations for 7 rows either way */
    size_t bs = rap_model_bytes(&cs, RAP_CPU), bu = rap_model_bytes(&c, RAP_CPU);
    CHECK(bs > 0 && bu > 0);
    sh.n_local = 0;
    size_t b0 = rap_model_bytes(&cs, RAP_CPU);
    CHECK_MSG(b0 < bs && b0 < bu, "bytes: no tables %zu, 2 local %zu, unsharded %zu", b0, bs,
              bu);
    /* exchange buffers */
    rap_model_shard_bufs b;
    REQUIRE_OK(rap_model_shard_buffers(m, &b));
    CHECK(b.emb_out && b.demb_out && b.emb && b.demb && b.grads);
    CHECK(b.emb_ld == NT * 4 && b.demb_ld == NT * 4);
    size_t nm = 0;
    for (int i = 2; i < rap_model_n_tensors(m); i++)
        nm += (size_t)(rap_model_tensor(m, i)->rows * rap_model_tensor(m, i)->cols);
    CHECK(b.n_grads == nm);
    /* misuse */
    CHECK(rap_model_shard_buffers(u, &b) == RAP_ERR_ARG);
    CHECK(rap_model_dense_apply(u) == RAP_ERR_ARG);
    CHECK(rap_model_set_loss_rows(u, 5) == RAP_ERR_ARG);
    CHECK(rap_model_set_loss_rows(m, 0) == RAP_ERR_ARG);
    rap_model_batch mb;
    memset(&mb, 0, sizeof mb);
    mb.rows = 14; /* above emb_batch 13 */
    CHECK(rap_model_emb_forward(m, &mb) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "1..13") != NULL);
    mb.rows = 8; /* above batch 7 */
    CHECK(rap_model_mlp_forward(m, &mb) == RAP_ERR_ARG);
    CHECK(rap_model_train_step(m, &mb) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "sharded") != NULL);
    rap_model_free(m);
    rap_model_free(u);
    /* a rank without tables: no exchange buffers on its side */
    sh.n_local = 0;
    REQUIRE_OK(rap_model_create(&cs, RAP_CPU, &m));
    REQUIRE_OK(rap_model_shard_buffers(m, &b));
    CHECK(b.emb_out == NULL && b.demb_out == NULL && b.emb && b.grads);
    CHECK(rap_model_n_tensors(m) == 8);
    rap_model_free(m);
}

/* ------------------------------------------------------------ GPU tests */

RAP_TEST(model_shard_gpu_matches_unsharded_and_cpu)
{
    REQUIRE_GPU();
    rap_test_env env;
    rap_test_tune_off(&env);
    for (int which = 0; which < 3; which++)
        for (int o = 0; o < 2; o++) {
            rap_optimizer opt = o ? RAP_ADAGRAD : RAP_SGD;
            int bad = run_case(t, which, opt, RAP_GPU, FLAW_NONE, true, true, 2e-6f, 1e-4f,
                               RAP_EMB_FP32);
            CHECK_MSG(bad == 0, "placement %d, %s: %d mismatches", which,
                      o ? "Adagrad" : "SGD", bad);
        }
    check_moves(t, RAP_GPU);
    for (int which = 0; which < 3; which++) {
        int bad = run_case(t, which, RAP_ROWWISE_ADAGRAD, RAP_GPU, FLAW_NONE, true, true, 2e-6f,
                           1e-4f, RAP_EMB_FP32);
        CHECK_MSG(bad == 0, "placement %d, row-wise fp32: %d mismatches", which, bad);
        bad = run_case(t, which, RAP_ROWWISE_ADAGRAD, RAP_GPU, FLAW_NONE, true, true, 2e-6f,
                       0x1p-7f, RAP_EMB_BF16);
        CHECK_MSG(bad == 0, "placement %d, row-wise bf16: %d mismatches", which, bad);
    }
    rap_test_tune_restore(&env);
}

RAP_TEST(model_shard_gpu_catches_flaws)
{
    REQUIRE_GPU();
    rap_test_env env;
    rap_test_tune_off(&env);
    for (int flaw = FLAW_PARTIAL; flaw <= FLAW_NO_ALLREDUCE; flaw++) {
        int bad = run_case(t, 1, RAP_SGD, RAP_GPU, flaw, false, false, 2e-6f, 1e-4f,
                           RAP_EMB_FP32);
        CHECK_MSG(bad > 0, "flaw %d went unnoticed", flaw);
    }
    rap_test_tune_restore(&env);
}
