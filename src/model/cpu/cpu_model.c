/*
 * cpu_model.c -- the CPU backend of the DLRM model: the readable
 * reference the GPU backend is tested against. Chains the layers of
 * cpu_layers.c over buffers allocated once in create (cpu_model.h).
 *
 * Step, for a batch of n rows:
 *   emb_forward:  emb[:, t] = bag sums of table t (ids checked)
 *   mlp_forward:  bottom MLP (ReLU everywhere) -> bot_act[last] = x;
 *                 inter = [x, dots]; top MLP (ReLU but the last) -> logits;
 *                 loss = mean BCE
 *   mlp_backward: dlogit -> top MLP backward (grads) -> dinter ->
 *                 interaction backward -> dx, demb -> bottom MLP backward
 *                 (grads, ddense); then the optimizer on every MLP tensor
 *   emb_backward: duplicate ids summed, one optimizer step per touched row
 * Sharded (cpu_model.h): the emb phases use emb_out / demb_out over b_glob,
 * mlp_backward stops before the optimizer (cpu_dense_apply).
 * The functions are the CPU backend table (rap_model_backend_cpu, at the
 * end); model.c has checked their arguments.
 */
#include "model/cpu/cpu_model.h"

#include <cblas.h>
#include <string.h>

static rap_cpu_state *st_of(const rap_model *m) { return (rap_cpu_state *)m->cpu; }

static int64_t top_in_of(const rap_model_config *c)
{
    int64_t f = (int64_t)c->n_tables + 1;
    return (int64_t)c->emb_dim + f * (f - 1) / 2;
}

/* Activation block layout for c; pointers into base set in st when both
 * are given. Returns its bytes. Counted in double-checked size_t: the
 * config check bounds every factor. */
static size_t act_layout(const rap_model_config *c, char *base, rap_cpu_state *st)
{
    size_t at = 0;
    size_t B = (size_t)c->batch, T = (size_t)c->n_tables, D = (size_t)c->emb_dim;
    size_t ti = (size_t)top_in_of(c);
    size_t maxw = ti > (size_t)c->n_dense ? ti : (size_t)c->n_dense;
    for (int l = 0; l < c->n_bot; l++)
        maxw = (size_t)c->bot[l] > maxw ? (size_t)c->bot[l] : maxw;
    for (int l = 0; l < c->n_top; l++)
        maxw = (size_t)c->top[l] > maxw ? (size_t)c->top[l] : maxw;
#define PLACE(fieldp, nfloats)                                          \
    do {                                                                \
        if (base)                                                       \
            *(fieldp) = (float *)(base + at);                           \
        at += ((sizeof(float) * (size_t)(nfloats)) + 63) & ~(size_t)63; \
    } while (0)
    float *dummy;
    for (int l = 0; l < c->n_bot; l++)
        PLACE(st ? &st->bot_act[l] : &dummy, B * (size_t)c->bot[l]);
    for (int l = 0; l < c->n_top; l++)
        PLACE(st ? &st->top_act[l] : &dummy, B * (size_t)c->top[l]);
    PLACE(st ? &st->emb : &dummy, B * T * D);
    PLACE(st ? &st->inter : &dummy, B * ti);
    PLACE(st ? &st->dinter : &dummy, B * ti);
    PLACE(st ? &st->dx : &dummy, B * D);
    PLACE(st ? &st->demb : &dummy, B * T * D);
    PLACE(st ? &st->ddense : &dummy, B * (size_t)c->n_dense);
    PLACE(st ? &st->buf[0] : &dummy, B * maxw);
    PLACE(st ? &st->buf[1] : &dummy, B * maxw);
    if (c->shard && c->shard->n_local > 0) {
        size_t ex = (size_t)c->shard->emb_batch * (size_t)c->shard->n_local * D;
        PLACE(st ? &st->emb_out : &dummy, ex);
        PLACE(st ? &st->demb_out : &dummy, ex);
    }
#undef PLACE
    (void)dummy;
    return at;
}

/* Floats of all tensors (the tables held), and of the MLP part alone. */
static void param_counts(const rap_model_config *c, size_t *all, size_t *mlp)
{
    size_t n = 0, tab = 0;
    for (int t = 0; t < rap_model_emb_tables(c); t++)
        tab += (size_t)rap_model_emb_rows(c, t) * (size_t)c->emb_dim;
    size_t in = (size_t)c->n_dense;
    for (int l = 0; l < c->n_bot; l++) {
        n += (size_t)c->bot[l] * (in + 1);
        in = (size_t)c->bot[l];
    }
    in = (size_t)top_in_of(c);
    for (int l = 0; l < c->n_top; l++) {
        n += (size_t)c->top[l] * (in + 1);
        in = (size_t)c->top[l];
    }
    *all = tab + n;
    *mlp = n;
}

/* The bytes cpu_create allocates for c, by part (model.h): each size is
 * the one its allocation below asks for, so the plan and the allocator
 * cannot drift (the tests compare both with what create reports). */
static void cpu_parts(const rap_model_config *c, rap_model_mem *mm)
{
    memset(mm, 0, sizeof *mm);
    size_t all, mlp;
    param_counts(c, &all, &mlp);
    const size_t tab = all - mlp, te = (size_t)rap_model_emb_tables(c);
    const size_t nts = (size_t)rap_model_table_state_floats(c);
    const int64_t keys = rap_model_emb_batch(c) * (int64_t)te * (c->max_bag > 0 ? c->max_bag : 1);
    mm->part[RAP_MM_TABLES] = rap_emb_dtype_size(c->emb_dtype) * tab;
    mm->part[RAP_MM_TABLE_STATE] = sizeof(float) * nts;
    mm->part[RAP_MM_MLP] = sizeof(float) * mlp;
    mm->part[RAP_MM_MLP_STATE] = rap_model_mlp_adagrad(c) ? sizeof(float) * mlp : 0;
    mm->part[RAP_MM_GRADS] = sizeof(float) * mlp;
    mm->part[RAP_MM_ACT] = act_layout(c, NULL, NULL);
    mm->part[RAP_MM_SORT] = 2 * sizeof(rap_cpu_key) * (size_t)keys;
    mm->part[RAP_MM_OTHER] = sizeof(int64_t) * (te + 1) + sizeof(rap_cpu_state) +
                             sizeof(rap_tensor) * (te + (size_t)(2 * c->n_bot + 2 * c->n_top));
    for (int k = 0; k < RAP_MM_N; k++)
        mm->total += mm->part[k];
}

static size_t cpu_bytes(const rap_model_config *c, rap_model_mem *parts)
{
    rap_model_mem mm;
    cpu_parts(c, &mm);
    if (parts)
        *parts = mm;
    return mm.total;
}

/* rap_aligned_alloc of n bytes, counted in part k of what create
 * allocated (st->alloc, rap_cpu_model_allocated). */
static void *cpu_alloc(rap_cpu_state *st, int k, size_t n, const char *what)
{
    void *p = rap_aligned_alloc(n, what);
    if (p) {
        st->alloc.part[k] += n;
        st->alloc.total += n;
    }
    return p;
}

/* ------------------------------------------------------------ create/free */

/* Fills of 1 Mi elements per pool item. */
#define FILL_ITEM ((size_t)1 << 20)

typedef struct {
    float *p;       /* (n) */
    uint16_t *h;    /* (n) instead of p: a 16-bit table of type dt */
    rap_emb_dtype dt;
    size_t n;
    uint64_t seed;
    int t;          /* global table */
    int64_t rows;   /* R_t: the bound of rap_init_table_value */
    uint64_t j0;    /* element of table t at p[0]: row0 * D (0 unless sharded) */
    float v;
} fill_ctx;

static void fill_table(void *c, int64_t i)
{
    const fill_ctx *k = c;
    size_t lo = (size_t)i * FILL_ITEM, hi = lo + FILL_ITEM < k->n ? lo + FILL_ITEM : k->n;
    if (k->h)
        for (size_t j = lo; j < hi; j++)
            k->h[j] = rap_init_table_value16(k->dt, k->seed, k->t, k->j0 + j, k->rows);
    else
        for (size_t j = lo; j < hi; j++)
            k->p[j] = rap_init_table_value(k->seed, k->t, k->j0 + j, k->rows);
}

static void fill_const(void *c, int64_t i)
{
    const fill_ctx *k = c;
    size_t lo = (size_t)i * FILL_ITEM, hi = lo + FILL_ITEM < k->n ? lo + FILL_ITEM : k->n;
    for (size_t j = lo; j < hi; j++)
        k->p[j] = k->v;
}

static int64_t fill_items(size_t n) { return (int64_t)((n + FILL_ITEM - 1) / FILL_ITEM); }

/* On failure the caller (model.c) calls cpu_free, which frees
 * whatever was allocated. */
static rap_status cpu_create(rap_model *m, const float *mlp_init)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = rap_calloc(sizeof *st, "CPU model state");
    if (!st)
        return RAP_ERR_NOMEM;
    m->cpu = st;
    st->threads = c->threads > 0 ? c->threads : rap_ncores();
    st->te = rap_model_emb_tables(c);
    st->sharded = c->shard != NULL;
    openblas_set_num_threads(1); /* GEMMs run in blocks on the pool */
    RAP_TRY(rap_pool_create(st->threads, &st->pool));
    const size_t es = rap_emb_dtype_size(c->emb_dtype);
    const size_t n_tab = m->mlp_offset, n_tstate = (size_t)rap_model_table_state_floats(c);
    const size_t nm = m->n_mlp_params;
    /* exact sizes (a shard holding no table: 0, which rap_aligned_alloc
     * gives a block of its own) */
    st->tab = cpu_alloc(st, RAP_MM_TABLES, es * n_tab, "CPU model tables");
    st->mlp = cpu_alloc(st, RAP_MM_MLP, sizeof(float) * nm, "CPU model MLP weights");
    if (!st->tab || !st->mlp)
        return RAP_ERR_NOMEM;
    if (n_tstate) {
        st->tab_state =
            cpu_alloc(st, RAP_MM_TABLE_STATE, sizeof(float) * n_tstate, "CPU model table state");
        if (!st->tab_state)
            return RAP_ERR_NOMEM;
    }
    if (rap_model_mlp_adagrad(c)) {
        st->mlp_state =
            cpu_alloc(st, RAP_MM_MLP_STATE, sizeof(float) * nm, "CPU model Adagrad state");
        if (!st->mlp_state)
            return RAP_ERR_NOMEM;
    }
    st->grads = cpu_alloc(st, RAP_MM_GRADS, sizeof(float) * nm, "CPU model gradients");
    if (!st->grads)
        return RAP_ERR_NOMEM;
    memset(st->grads, 0, sizeof(float) * nm);
    size_t ab = act_layout(c, NULL, NULL);
    st->block = cpu_alloc(st, RAP_MM_ACT, ab, "CPU model activations");
    if (!st->block)
        return RAP_ERR_NOMEM;
    memset(st->block, 0, ab);
    act_layout(c, st->block, st);
    st->key_cap = rap_model_emb_batch(c) * st->te * (c->max_bag > 0 ? c->max_bag : 1);
    const size_t kb = sizeof(rap_cpu_key) * (size_t)st->key_cap;
    st->keys = cpu_alloc(st, RAP_MM_SORT, kb, "CPU model sort keys");
    st->tmp = cpu_alloc(st, RAP_MM_SORT, kb, "CPU model sort keys");
    const size_t sb = sizeof(int64_t) * ((size_t)st->te + 1);
    st->seg = rap_calloc(sb, "CPU model key segments");
    if (!st->keys || !st->tmp || !st->seg)
        return RAP_ERR_NOMEM;
    /* the bookkeeping (rap_calloc, not counted by rap_mem_counted) */
    st->alloc.part[RAP_MM_OTHER] = sb + sizeof *st + sizeof(rap_tensor) * (size_t)m->n_tensors;
    st->alloc.total += st->alloc.part[RAP_MM_OTHER];

    for (int i = 0; i < m->n_tensors; i++) {
        const rap_tensor *x = &m->tensors[i];
        const size_t rel = x->offset - m->mlp_offset; /* MLP tensors */
        switch (x->kind) {
        case 0:
            st->tables[x->layer] = (char *)st->tab + es * x->offset;
            st->tstate[x->layer] = !st->tab_state ? NULL
                                   : c->optimizer == RAP_ROWWISE_ADAGRAD
                                       ? st->tab_state + x->offset / (size_t)c->emb_dim
                                       : st->tab_state + x->offset;
            rap_model_tensor_origin(m, i, &st->tglobal[x->layer], &st->trow0[x->layer]);
            break;
        case 1: st->bw[x->layer] = rel; break;
        case 2: st->bb[x->layer] = rel; break;
        case 3: st->tw[x->layer] = rel; break;
        case 4: st->tb[x->layer] = rel; break;
        }
    }
    /* Tables in place, in parallel: element j of table t from its own hash
     * (the same values the GPU backend computes on the device); a local
     * table of a shard gets the values of its rows of the global table. */
    for (int i = 0; i < st->te; i++) {
        int t;
        int64_t row0;
        rap_model_tensor_origin(m, i, &t, &row0);
        const bool h = c->emb_dtype != RAP_EMB_FP32;
        fill_ctx k = {.p = h ? NULL : (float *)st->tables[i],
                      .h = h ? (uint16_t *)st->tables[i] : NULL,
                      .dt = c->emb_dtype,
                      .n = (size_t)rap_model_emb_rows(c, i) * (size_t)c->emb_dim,
                      .seed = c->seed,
                      .t = t,
                      .rows = c->table_rows[t],
                      .j0 = (uint64_t)row0 * (uint64_t)c->emb_dim};
        rap_pool_for(st->pool, fill_items(k.n), fill_table, &k);
    }
    memcpy(st->mlp, mlp_init, sizeof(float) * m->n_mlp_params);
    if (st->tab_state) {
        fill_ctx k = {.p = st->tab_state, .n = n_tstate, .v = c->adagrad_init};
        rap_pool_for(st->pool, fill_items(k.n), fill_const, &k);
    }
    if (st->mlp_state) {
        fill_ctx k = {.p = st->mlp_state, .n = m->n_mlp_params, .v = c->adagrad_init};
        rap_pool_for(st->pool, fill_items(k.n), fill_const, &k);
    }
    return RAP_OK;
}

static void cpu_free(rap_model *m)
{
    rap_cpu_state *st = st_of(m);
    if (!st)
        return;
    rap_pool_free(st->pool);
    rap_aligned_free(st->tab);
    rap_aligned_free(st->tab_state);
    rap_aligned_free(st->mlp);
    rap_aligned_free(st->mlp_state);
    rap_aligned_free(st->grads);
    rap_aligned_free(st->block);
    rap_aligned_free(st->keys);
    rap_aligned_free(st->tmp);
    rap_free(st->seg);
    rap_free(st);
    m->cpu = NULL;
}

/* ------------------------------------------------------------ phases */

/* The bags of every table held: checks the offsets, counts the ids. */
static rap_status check_bags(rap_model *m, const rap_model_batch *b, int64_t *nnz)
{
    *nnz = 0;
    for (int t = 0; t < st_of(m)->te; t++) {
        if (!b->off[t] || (!b->ids[t] && b->off[t][b->rows] > b->off[t][0]))
            return rap_fail(RAP_ERR_ARG, "CPU model: batch has no offsets or ids for table %d", t);
        if (b->off[t][0] < 0 || b->off[t][b->rows] < b->off[t][0])
            return rap_fail(RAP_ERR_DATA,
                            "CPU model: table %d offsets run from %lld to %lld, expected "
                            "0 <= first <= last",
                            t, (long long)b->off[t][0], (long long)b->off[t][b->rows]);
        *nnz += b->off[t][b->rows] - b->off[t][0];
    }
    return RAP_OK;
}

/* Finds the first bad bag or id for the error message (slow path). t is
 * the local table of a sharded model (its ids are local rows). */
static rap_status report_bad_bag(rap_model *m, const rap_model_batch *b)
{
    const rap_model_config *c = &m->cfg;
    for (int t = 0; t < st_of(m)->te; t++)
        for (int64_t r = 0; r < b->rows; r++) {
            if (b->off[t][r + 1] < b->off[t][r])
                return rap_fail(RAP_ERR_DATA, "CPU model: table %d row %lld: offsets %lld > %lld",
                                t, (long long)r, (long long)b->off[t][r],
                                (long long)b->off[t][r + 1]);
            for (int64_t p = b->off[t][r]; p < b->off[t][r + 1]; p++)
                if (b->ids[t][p] < 0 || b->ids[t][p] >= rap_model_emb_rows(c, t))
                    return rap_fail(RAP_ERR_DATA,
                                    "CPU model: %stable %d row %lld: id %lld outside [0, %lld)",
                                    st_of(m)->sharded ? "local " : "", t, (long long)r,
                                    (long long)b->ids[t][p], (long long)rap_model_emb_rows(c, t));
        }
    return rap_fail(RAP_ERR_INTERNAL, "CPU model: bad bag reported but not found");
}

static rap_status cpu_emb_forward(rap_model *m, const rap_model_batch *b)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    st->phase = 0;
    int64_t nnz;
    RAP_TRY(check_bags(m, b, &nnz));
    if (nnz > st->key_cap) {
        /* More ids than one per bag on average: grow once (documented). */
        rap_debug("CPU model: sort keys grow from %lld to %lld", (long long)st->key_cap,
                  (long long)nnz);
        rap_cpu_key *k = rap_aligned_alloc(sizeof *k * (size_t)nnz, "CPU model sort keys");
        rap_cpu_key *x = rap_aligned_alloc(sizeof *x * (size_t)nnz, "CPU model sort keys");
        if (!k || !x) {
            rap_aligned_free(k);
            rap_aligned_free(x);
            return RAP_ERR_NOMEM;
        }
        rap_aligned_free(st->keys);
        rap_aligned_free(st->tmp);
        st->keys = k;
        st->tmp = x;
        st->key_cap = nnz;
    }
    int64_t bad = 0;
    float *out = st->sharded ? st->emb_out : st->emb; /* (rows, TE, D) */
    for (int t = 0; t < st->te; t++)
        bad += rap_cpu_bag_forward(st->tables[t], c->emb_dtype, rap_model_emb_rows(c, t),
                                   c->emb_dim, b->off[t], b->ids[t], b->rows, st->te, t, out,
                                   st->pool);
    if (bad)
        return report_bad_bag(m, b);
    if (st->sharded)
        st->emb_rows = b->rows;
    else
        st->rows = b->rows;
    st->phase = 1;
    return RAP_OK;
}

/* Phase `want` done on this batch. Sharded: mlp_forward (want 1, the
 * first call on b_loc) needs emb_forward done; mlp_backward (2) needs
 * mlp_forward on b_loc; emb_backward (3) needs emb_forward on b_glob only
 * (a rank with no rows of a short global batch skips the MLP phases). */
static rap_status phase_check(rap_cpu_state *st, const rap_model_batch *b, int want,
                              const char *what, const char *before)
{
    bool ok;
    if (!st->sharded)
        ok = st->phase == want && st->rows == b->rows;
    else if (want == 1)
        ok = st->phase == 1;
    else if (want == 2)
        ok = st->phase == 2 && st->rows == b->rows;
    else
        ok = st->phase >= 1 && st->emb_rows == b->rows;
    if (!ok)
        return rap_fail(RAP_ERR_ARG, "CPU model: %s called without %s on this batch first", what,
                        st->sharded && want == 3 ? "emb_forward" : before);
    return RAP_OK;
}

/* Bottom MLP, interaction, top MLP: logits in top_act[n_top-1]. */
static void forward_mlps(rap_model *m, const rap_model_batch *b)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    openblas_set_num_threads(1); /* blocks on the pool instead */
    int64_t n = b->rows;
    const float *x = b->dense;
    int in = c->n_dense;
    for (int l = 0; l < c->n_bot; l++) {
        rap_cpu_linear_forward(x, st->mlp + st->bw[l], st->mlp + st->bb[l], n, in, c->bot[l],
                               true, st->bot_act[l], st->pool);
        x = st->bot_act[l];
        in = c->bot[l];
    }
    rap_cpu_interaction_forward(x, st->emb, n, c->n_tables, c->emb_dim, st->inter, st->pool);
    x = st->inter;
    in = m->top_in;
    for (int l = 0; l < c->n_top; l++) {
        rap_cpu_linear_forward(x, st->mlp + st->tw[l], st->mlp + st->tb[l], n, in, c->top[l],
                               l < c->n_top - 1, st->top_act[l], st->pool);
        x = st->top_act[l];
        in = c->top[l];
    }
}

/* Divisor of the summed loss: the shard's loss_rows, else the batch rows
 * (the mean). */
static int64_t loss_rows(const rap_model *m, const rap_model_batch *b)
{
    return m->cfg.shard ? m->cfg.shard->loss_rows : b->rows;
}

static rap_status cpu_mlp_forward(rap_model *m, const rap_model_batch *b)
{
    rap_cpu_state *st = st_of(m);
    RAP_TRY(phase_check(st, b, 1, "mlp_forward", "emb_forward"));
    if (!b->dense || !b->label)
        return rap_fail(RAP_ERR_ARG, "CPU model: mlp_forward: batch has no dense or label array");
    forward_mlps(m, b);
    st->loss_div = (double)loss_rows(m, b);
    st->loss = rap_cpu_bce_div(st->top_act[m->cfg.n_top - 1], b->label, b->rows, st->loss_div,
                               NULL);
    st->have_loss = true;
    st->rows = b->rows;
    st->phase = 2;
    return RAP_OK;
}

static rap_status cpu_dense_apply(rap_model *m);

static rap_status cpu_mlp_backward(rap_model *m, const rap_model_batch *b)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    RAP_TRY(phase_check(st, b, 2, "mlp_backward", "mlp_forward"));
    openblas_set_num_threads(1); /* blocks on the pool instead */
    int64_t n = b->rows;
    float *g = st->grads; /* g + offset: gradient of that tensor */
    int nt = c->n_top;
    /* dy of the last top layer: d(mean loss)/d(logit). */
    float *dy = st->buf[0];
    rap_cpu_bce_div(st->top_act[nt - 1], b->label, n, st->loss_div, dy);
    int cur = 0;
    for (int l = nt - 1; l >= 0; l--) {
        const float *x = l == 0 ? st->inter : st->top_act[l - 1];
        int in = l == 0 ? m->top_in : c->top[l - 1];
        float *dx = l == 0 ? st->dinter : st->buf[1 - cur];
        rap_cpu_linear_backward(x, st->mlp + st->tw[l], st->top_act[l], st->buf[cur], n, in,
                                c->top[l], l < nt - 1, g + st->tw[l], g + st->tb[l], dx, st->pool);
        cur = 1 - cur;
    }
    rap_cpu_interaction_backward(st->bot_act[c->n_bot - 1], st->emb, st->dinter, n, c->n_tables,
                                 c->emb_dim, st->dx, st->demb, st->pool);
    /* The bottom MLP's dy starts as a copy of dx, so dx stays readable. */
    memcpy(st->buf[0], st->dx, sizeof(float) * (size_t)n * (size_t)c->emb_dim);
    cur = 0;
    for (int l = c->n_bot - 1; l >= 0; l--) {
        const float *x = l == 0 ? b->dense : st->bot_act[l - 1];
        int in = l == 0 ? c->n_dense : c->bot[l - 1];
        float *dx = l == 0 ? st->ddense : st->buf[1 - cur];
        rap_cpu_linear_backward(x, st->mlp + st->bw[l], st->bot_act[l], st->buf[cur], n, in,
                                c->bot[l], true, g + st->bw[l], g + st->bb[l], dx, st->pool);
        cur = 1 - cur;
    }
    if (!st->sharded)
        RAP_TRY(cpu_dense_apply(m));
    st->phase = 3;
    return RAP_OK;
}

static rap_status cpu_dense_apply(rap_model *m)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    /* row-wise Adagrad: the MLPs take Adagrad (model.h) */
    rap_cpu_optimizer_step(st->mlp, st->grads, st->mlp_state, m->n_mlp_params,
                           c->optimizer == RAP_SGD ? RAP_SGD : RAP_ADAGRAD, c->lr,
                           c->adagrad_eps, st->pool);
    return RAP_OK;
}

static void cpu_shard_buffers(rap_model *m, rap_model_shard_bufs *out)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    const int64_t td = (int64_t)c->n_tables * c->emb_dim;
    out->emb_out = st->emb_out;
    out->demb_out = st->demb_out;
    out->emb = st->emb;
    out->demb = st->demb;
    out->emb_ld = td;
    out->demb_ld = td;
    out->grads = st->grads;
    out->n_grads = m->n_mlp_params;
    out->direct = false;
}

static rap_status emb_backward_core(rap_model *m, const rap_model_batch *b, const float *demb)
{
    const rap_model_config *c = &m->cfg;
    rap_cpu_state *st = st_of(m);
    int64_t nnz;
    RAP_TRY(check_bags(m, b, &nnz));
    if (nnz > st->key_cap) /* not the batch of emb_forward */
        return rap_fail(RAP_ERR_ARG, "CPU model: emb_backward: batch has %lld ids, its "
                                     "emb_forward saw at most %lld",
                        (long long)nnz, (long long)st->key_cap);
    st->emb_step++; /* this update's rounding key (model.h) */
    rap_cpu_emb_update u = {
        .T = st->te,
        .D = c->emb_dim,
        .n = b->rows,
        .tables = st->tables,
        .state = st->tab_state ? st->tstate : NULL,
        .off = b->off,
        .ids = b->ids,
        .demb = demb,
        .opt = c->optimizer,
        .dtype = c->emb_dtype,
        .lr = c->lr,
        .eps = c->adagrad_eps,
        .gtable = st->tglobal,
        .grow0 = st->trow0,
        .seed = c->seed,
        .step = st->emb_step,
        .keys = st->keys,
        .tmp = st->tmp,
        .seg = st->seg,
    };
    rap_cpu_emb_backward(&u, st->pool);
    return RAP_OK;
}

static rap_status cpu_emb_backward(rap_model *m, const rap_model_batch *b)
{
    rap_cpu_state *st = st_of(m);
    RAP_TRY(phase_check(st, b, 3, "emb_backward", "mlp_backward"));
    st->phase = 0;
    return emb_backward_core(m, b, st->sharded ? st->demb_out : st->demb);
}

static rap_status cpu_predict(rap_model *m, const rap_model_batch *b, float *logits)
{
    rap_cpu_state *st = st_of(m);
    if (!b->dense)
        return rap_fail(RAP_ERR_ARG, "CPU model: predict: batch has no dense array");
    if (st->sharded)
        st->phase = 0; /* the MLPs only, from emb as the caller filled it */
    else
        RAP_TRY(cpu_emb_forward(m, b));
    forward_mlps(m, b);
    memcpy(logits, st->top_act[m->cfg.n_top - 1], sizeof(float) * (size_t)b->rows);
    return RAP_OK;
}

static rap_status cpu_last_loss(rap_model *m, double *loss)
{
    rap_cpu_state *st = st_of(m);
    if (!st->have_loss)
        return rap_fail(RAP_ERR_ARG, "CPU model: last_loss before any mlp_forward");
    *loss = st->loss;
    return RAP_OK;
}

static rap_status cpu_sync(rap_model *m)
{
    (void)m;
    return RAP_OK;
}

/* Tensor i's storage (or its state), the element size and the elements
 * per row: a table of emb_dtype, its row-wise state one float per row. */
static char *tensor_base(const rap_model *m, int i, bool state, size_t *es, int64_t *cols)
{
    rap_cpu_state *st = st_of(m);
    const rap_tensor *x = &m->tensors[i];
    *cols = x->info.cols;
    *es = sizeof(float);
    if (x->kind != 0)
        return (char *)((state ? st->mlp_state : st->mlp) + (x->offset - m->mlp_offset));
    if (!state) {
        *es = rap_emb_dtype_size(m->cfg.emb_dtype);
        return (char *)st->tables[x->layer];
    }
    if (m->cfg.optimizer == RAP_ROWWISE_ADAGRAD)
        *cols = 1;
    return (char *)st->tstate[x->layer];
}

/* Raw rows in the storage type (model_internal.h read_rows / write_rows);
 * model.c has checked the range. */
static rap_status cpu_read_rows(const rap_model *m, int i, int64_t row0, int64_t n, void *host,
                                bool state)
{
    size_t es;
    int64_t cols;
    const char *p = tensor_base(m, i, state, &es, &cols);
    if (!p)
        return rap_fail(RAP_ERR_INTERNAL, "CPU model: no storage for tensor %d", i);
    if (n > 0)
        memcpy(host, p + es * (size_t)(row0 * cols), es * (size_t)(n * cols));
    return RAP_OK;
}

static rap_status cpu_write_rows(rap_model *m, int i, int64_t row0, int64_t n,
                                 const void *host, bool state)
{
    size_t es;
    int64_t cols;
    char *p = tensor_base(m, i, state, &es, &cols);
    if (!p)
        return rap_fail(RAP_ERR_INTERNAL, "CPU model: no storage for tensor %d", i);
    if (n > 0)
        memcpy(p + es * (size_t)(row0 * cols), host, es * (size_t)(n * cols));
    return RAP_OK;
}

/* Whole tensors as floats: fp32 storage only (model.c converts a 16-bit
 * table through the rows). */
static rap_status cpu_get(const rap_model *m, int i, float *host, bool state)
{
    if (!state && rap_model_tensor_dtype(m, i) != RAP_EMB_FP32) /* model.c converts */
        return rap_fail(RAP_ERR_INTERNAL, "CPU model: float get of a 16-bit table");
    return cpu_read_rows(m, i, 0, m->tensors[i].info.rows, host, state);
}

static rap_status cpu_set(rap_model *m, int i, const float *host, bool state)
{
    if (!state && rap_model_tensor_dtype(m, i) != RAP_EMB_FP32)
        return rap_fail(RAP_ERR_INTERNAL, "CPU model: float set of a 16-bit table");
    return cpu_write_rows(m, i, 0, m->tensors[i].info.rows, host, state);
}

/* The embedding update counter. Can't fail. */
static rap_status cpu_get_emb_step(const rap_model *m, uint64_t *step)
{
    *step = st_of(m)->emb_step;
    return RAP_OK;
}

static rap_status cpu_set_emb_step(rap_model *m, uint64_t step)
{
    st_of(m)->emb_step = step;
    return RAP_OK;
}

static rap_status cpu_get_grad(const rap_model *m, int i, float *host)
{
    rap_cpu_state *st = st_of(m);
    const rap_tensor *x = &m->tensors[i];
    if (x->kind == 0)
        return rap_fail(RAP_ERR_ARG, "CPU model: no gradient kept for table %s", x->info.name);
    memcpy(host, st->grads + (x->offset - m->mlp_offset),
           sizeof(float) * (size_t)x->info.rows * (size_t)x->info.cols);
    return RAP_OK;
}

/* ------------------------------------------------------------ test hooks */

const float *rap_cpu_model_pooled(const rap_model *m) { return st_of(m)->emb; }
const float *rap_cpu_model_demb(const rap_model *m) { return st_of(m)->demb; }
const float *rap_cpu_model_ddense(const rap_model *m) { return st_of(m)->ddense; }

void rap_cpu_model_allocated(const rap_model *m, rap_model_mem *out)
{
    const rap_cpu_state *st = st_of(m);
    if (st)
        *out = st->alloc;
    else
        memset(out, 0, sizeof *out);
}

rap_status rap_cpu_model_emb_backward_from(rap_model *m, const rap_model_batch *b,
                                           const float *demb)
{
    rap_cpu_state *st = st_of(m);
    if (st->phase < 1 || (st->sharded ? st->emb_rows : st->rows) != b->rows)
        return rap_fail(RAP_ERR_ARG, "CPU model: emb_backward_from without emb_forward");
    st->phase = 0;
    return emb_backward_core(m, b, demb);
}

static const float *cpu_last_logits(const rap_model *m)
{
    return ((const rap_cpu_state *)m->cpu)->top_act[m->cfg.n_top - 1];
}

/* ------------------------------------------------------------ the table */

static const rap_model_backend cpu_backend = {
    .bytes = cpu_bytes,
    .create = cpu_create,
    .free = cpu_free,
    .emb_forward = cpu_emb_forward,
    .mlp_forward = cpu_mlp_forward,
    .mlp_backward = cpu_mlp_backward,
    .emb_backward = cpu_emb_backward,
    .predict = cpu_predict,
    .last_loss = cpu_last_loss,
    .sync = cpu_sync,
    .get = cpu_get,
    .set = cpu_set,
    .read_rows = cpu_read_rows,
    .write_rows = cpu_write_rows,
    .get_emb_step = cpu_get_emb_step,
    .set_emb_step = cpu_set_emb_step,
    .get_grad = cpu_get_grad,
    .dense_apply = cpu_dense_apply,
    .shard_buffers = cpu_shard_buffers,
    .last_logits = cpu_last_logits,
};

const rap_model_backend *rap_model_backend_cpu(void) { return &cpu_backend; }
