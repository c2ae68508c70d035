/*
 * gpu_model.cu -- the GPU backend of the DLRM model: memory plan, create
 * and free, the four training phases, predict, loss, get/set.
 *
 * Memory: three device blocks made at create and never again: params
 * (n_params floats: the flat layout of model_internal.h), the Adagrad state
 * (same layout, Adagrad only) and an arena holding everything else
 * (gradients, bf16 weight copies, activations for B rows, sort buffers,
 * cuBLASLt workspace). plan() lays the arena out; gpu_bytes and create
 * use the same plan, and create checks cudaMemGetInfo before
 * allocating anything.
 *
 * Phases (all on g->stream, asynchronous, no allocation, no host
 * synchronisation, no pageable copy; capturable into a CUDA graph):
 *   emb_forward   pooled embeddings into z slots 1..T
 *   mlp_forward   dense -> bottom MLP (x into z slot 0) -> interaction ->
 *                 top MLP -> logits -> loss (mean on the device), dlogit
 *   mlp_backward  top MLP backward, interaction backward (de, dx), bottom
 *                 MLP backward, dense optimizer (+ bf16 copy refresh)
 *   emb_backward  sort-based aggregation + sparse optimizer (embedding.cu)
 * A batch with fewer rows than B resizes the GEMM layouts on the host.
 * Sharded (model.h): the emb phases pool the TE local tables of the global
 * batch into emb_out and update them from demb_out; the caller moves rows
 * between those and z (slots 1..T) / de; mlp_backward stops before the
 * dense optimizer (gpu_dense_apply).
 * The entry points are the GPU backend table (rap_model_backend_gpu, after
 * them); model.c has checked their arguments.
 *
 * Built without CUDA (gcc -x c) there is no table (rap_model_backend_gpu
 * is NULL) and the test hook reports RAP_ERR_NO_GPU.
 */
#include "model/gpu/gpu_model.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define ARENA_ALIGN 256

static size_t al256(size_t x) { return (x + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Shapes derived from the config (no CUDA calls). */
static rap_status shape(rap_gpu *g, const rap_model_config *c)
{
    g->B = c->batch;
    g->T = c->n_tables;
    g->TE = rap_model_emb_tables(c);
    g->EB = rap_model_emb_batch(c);
    g->sharded = c->shard != NULL;
    /* one rank holding every table whole, in order, over its own batch:
     * the lookups write the interaction input in place as unsharded (no
     * scatter and gather between the phases, rap_model_shard_bufs.direct) */
    g->direct = g->sharded && g->TE == c->n_tables && g->EB == c->batch;
    for (int k = 0; g->direct && k < g->TE; k++)
        g->direct = c->shard->table[k] == k && c->shard->row0[k] == 0 &&
                    c->shard->rows[k] == c->table_rows[k];
    g->D = c->emb_dim;
    g->dt = c->emb_dtype;
    g->tes = rap_emb_dtype_size(c->emb_dtype);
    g->F = c->n_tables + 1;
    g->ND = c->n_dense;
    g->top_in = (int)(g->D + (int64_t)g->F * (g->F - 1) / 2);
    g->ld_in = round_up(g->top_in, 8);
    g->bf16 = c->precision == RAP_BF16;
    g->act = g->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    g->es = g->bf16 ? 2 : 4;
    /* z in bf16: bf16, unsharded (a sharded model's exchange moves fp32
     * rows), an interaction that reads bf16 z, unless RAP_GPU_ZBF=0; de
     * too with RAP_GPU_ZBF=de (docs/PERF.md) */
    const char *ze = getenv("RAP_GPU_ZBF");
    g->zbf = g->bf16 && !g->sharded && !(ze && *ze == '0') && rap_gpu_interact_takes_bf16_z(g);
    g->debf = g->zbf && ze && strcmp(ze, "de") == 0;
    g->zes = g->zbf ? 2 : 4;
    g->des = g->debf ? 2 : 4;
    g->tf32 = !g->bf16 && !c->strict_fp32;
    g->compute = g->bf16 ? CUBLAS_COMPUTE_32F
                         : (c->strict_fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32);
    g->n_bot = c->n_bot;
    g->n_top = c->n_top;
    if (g->B < 1 || g->T < 1 || g->D < 1 || g->ND < 1 || g->n_bot < 1 || g->n_top < 1 ||
        g->n_bot > RAP_MAX_LAYERS || g->n_top > RAP_MAX_LAYERS)
        return rap_fail(RAP_ERR_ARG, "GPU model: bad shape (B %lld, T %d, D %d, ND %d, %d/%d "
                                     "layers)",
                        (long long)g->B, g->T, g->D, g->ND, g->n_bot, g->n_top);
    uint64_t rows = 0;
    size_t np = 0;
    for (int t = 0; t < g->TE; t++) {
        rows += (uint64_t)rap_model_emb_rows(c, t);
        np += (size_t)rap_model_emb_rows(c, t) * (size_t)g->D;
    }
    g->total_rows = rows;
    int bits = 1;
    while (bits < 64 && (1ull << bits) - 1 < rows)
        bits++;
    g->key_bits = bits;
    g->sentinel = (uint32_t)((1ull << (bits < 32 ? bits : 32)) - 1);
    g->bag = c->max_bag > 0 ? c->max_bag : RAP_GPU_IDS_PER_BAG;
    g->P = g->EB * g->TE * g->bag;
    g->nchunks = (g->P + RAP_GPU_CHUNK - 1) / RAP_GPU_CHUNK;
    /* layers */
    size_t nm = 0;
    int64_t maxw = 1;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        const int n = k ? g->n_top : g->n_bot;
        const int *w = k ? c->top : c->bot;
        int in = k ? g->top_in : g->ND;
        for (int i = 0; i < n; i++) {
            rap_gpu_layer *l = &L[i];
            l->in = in;
            l->out = w[i];
            if (l->out < 1)
                return rap_fail(RAP_ERR_ARG, "GPU model: layer of width %d", l->out);
            l->ldw = round_up(in, 8);
            l->relu = k == 0 || i < n - 1;
            l->want_aux = l->relu && i < n - 1;
            l->aux_ld = l->want_aux ? round_up(l->out, 128) : 0;
            l->need_dx = i > 0 || k == 1;
            /* the last bottom layer writes x into z (ztype), the logit layer fp32 */
            l->ytype = i < n - 1 ? g->act : (k == 0 && g->zbf) ? CUDA_R_16BF : CUDA_R_32F;
            l->ldy = (i == n - 1) ? (k ? 1 : (int64_t)g->F * g->D) : l->out;
            l->ldx = i > 0 ? L[i - 1].ldy : (k ? g->ld_in : round_up(g->ND, 8));
            l->lddx = i > 0 ? L[i - 1].out : g->ld_in;
            l->kg = (l->ldx >= l->ldw && (!l->need_dx || l->lddx >= l->ldw)) ? l->ldw : in;
            l->gemv = k == 1 && i == n - 1 && l->out == 1;
            nm += (size_t)l->out * (size_t)l->in + (size_t)l->out;
            if (l->out > maxw)
                maxw = l->out;
            in = l->out;
        }
    }
    if (c->bot[g->n_bot - 1] != g->D || c->top[g->n_top - 1] != 1)
        return rap_fail(RAP_ERR_ARG, "GPU model: bottom MLP must end in D=%d, top MLP in 1",
                        g->D);
    g->maxw = maxw;
    g->n_mlp = nm;
    g->n_params = np + nm;
    /* padded segments, in params order (bottom then top, weight then bias) */
    g->segs.n = 0;
    int64_t src = 0, dst = 0;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        const int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++)
            for (int wb = 0; wb < 2; wb++) {
                rap_gpu_segs *s = &g->segs;
                const int64_t rows = wb ? 1 : L[i].out;
                const int cols = wb ? L[i].out : L[i].in;
                const int ld = wb ? L[i].out : (int)L[i].ldw;
                s->src[s->n] = src;
                s->dst[s->n] = dst;
                s->cols[s->n] = cols;
                s->ld[s->n] = ld;
                s->n++;
                src += rows * cols;
                dst += round_up(rows * ld, 128);
            }
    }
    g->segs.src[g->segs.n] = src;
    g->segs.n_pad = dst;
    return RAP_OK;
}

/* What the embedding backward's 32-bit keys and values can hold. */
static rap_status limits(const rap_gpu *g)
{
    if (g->key_bits > 32)
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: %llu table rows in all; the embedding backward's 32-bit "
                        "keys hold at most %llu",
                        (unsigned long long)g->total_rows, 0xffffffffull - 1);
    if ((uint64_t)g->EB * (uint64_t)g->TE > 0xffffffffull || g->P > INT32_MAX)
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: batch %lld x %d tables is too large for the embedding "
                        "backward (at most 2^31 ids)",
                        (long long)g->EB, g->TE);
    return RAP_OK;
}

/* Lays out the arena from base (NULL: sizes only); returns its size,
 * and its bytes by part (model.h) in g->arena_part (they add up to it:
 * each buffer starts at a multiple of 256). */
static size_t plan(rap_gpu *g, char *base)
{
    size_t off = 0;
    memset(g->arena_part, 0, sizeof g->arena_part);
#define TAKE(ptr, type, bytes, part)                                                     \
    do {                                                                                 \
        off = al256(off);                                                                \
        if (base)                                                                        \
            (ptr) = (type)(base + off);                                                  \
        off += (size_t)(bytes);                                                          \
        g->arena_part[part] += al256((size_t)(bytes));                                   \
    } while (0)
    const size_t B = (size_t)g->B;
    TAKE(g->grads, float *, sizeof(float) * (size_t)g->segs.n_pad, RAP_MM_GRADS);
    TAKE(g->wc, void *, g->es * (size_t)g->segs.n_pad, RAP_MM_GRADS);
    TAKE(g->row_base, int64_t *, sizeof(int64_t) * (size_t)g->TE, RAP_MM_OTHER);
    TAKE(g->nrows, int64_t *, sizeof(int64_t) * (size_t)g->TE, RAP_MM_OTHER);
    TAKE(g->gtable, int32_t *, sizeof(int32_t) * (size_t)g->TE, RAP_MM_OTHER);
    TAKE(g->grow_off, int64_t *, sizeof(int64_t) * (size_t)g->TE, RAP_MM_OTHER);
    TAKE(g->emb_step, uint64_t *, sizeof(uint64_t), RAP_MM_OTHER);
    TAKE(g->z, void *, g->zes * B * (size_t)g->F * (size_t)g->D, RAP_MM_ACT);
    TAKE(g->de, void *, g->des * B * (size_t)g->T * (size_t)g->D, RAP_MM_ACT);
    TAKE(g->xin, void *, g->es * B * (size_t)round_up(g->ND, 8), RAP_MM_ACT);
    TAKE(g->tin, void *, g->es * B * (size_t)g->ld_in, RAP_MM_ACT);
    TAKE(g->dtin, void *, g->es * B * (size_t)g->ld_in, RAP_MM_ACT);
    TAKE(g->pp[0], void *, g->es * B * (size_t)g->maxw, RAP_MM_ACT);
    TAKE(g->pp[1], void *, g->es * B * (size_t)g->maxw, RAP_MM_ACT);
    TAKE(g->logits, float *, sizeof(float) * B, RAP_MM_ACT);
    TAKE(g->loss, float *, sizeof(float), RAP_MM_OTHER);
    TAKE(g->err, unsigned *, sizeof(unsigned), RAP_MM_OTHER);
    TAKE(g->colsum, float *,
         sizeof(float) * 256 *
             (size_t)((g->maxw > g->ld_in ? g->maxw : g->ld_in) + g->maxw), RAP_MM_ACT);
    TAKE(g->ws, void *, RAP_GPU_WS_BYTES, RAP_MM_BLAS_WS);
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        const int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            rap_gpu_layer *l = &L[i];
            if (i < n - 1)
                TAKE(l->y, void *, g->es * B * (size_t)l->out, RAP_MM_ACT);
            if (l->want_aux)
                TAKE(l->aux, void *, (size_t)l->aux_ld / 8 * B, RAP_MM_ACT);
        }
    }
    for (int j = 0; j < 2; j++) {
        TAKE(g->keys[j], uint32_t *, sizeof(uint32_t) * (size_t)g->P, RAP_MM_SORT);
        TAKE(g->vals[j], uint32_t *, sizeof(uint32_t) * (size_t)g->P, RAP_MM_SORT);
    }
    TAKE(g->start, int64_t *, sizeof(int64_t) * (size_t)(g->TE + 1), RAP_MM_SORT);
    TAKE(g->head, float *, sizeof(float) * (size_t)g->nchunks * (size_t)g->D, RAP_MM_SORT);
    TAKE(g->tail, float *, sizeof(float) * (size_t)g->nchunks * (size_t)g->D, RAP_MM_SORT);
    TAKE(g->sort_tmp, void *, g->sort_bytes, RAP_MM_SORT);
    if (g->sharded && !g->direct && g->TE > 0) {
        const size_t ex = sizeof(float) * (size_t)g->EB * (size_t)g->TE * (size_t)g->D;
        TAKE(g->emb_out, float *, ex, RAP_MM_ACT);
        TAKE(g->demb_out, float *, ex, RAP_MM_ACT);
    }
#undef TAKE
    return al256(off);
}

/* The two weight blocks: blk_params holds the tables (g->dt) then the MLP
 * (fp32); blk_state the tables' state (Adagrad: per element, row-wise: per
 * row) then the MLP's (Adagrad and row-wise). Byte offsets of the MLP
 * parts in *mlp_at, *mstate_at; returns the two sizes. */
static void weight_blocks(const rap_gpu *g, const rap_model_config *c, size_t *pbytes,
                          size_t *sbytes, size_t *mlp_at, size_t *mstate_at)
{
    const size_t n_tab = g->n_params - g->n_mlp;
    *mlp_at = al256(g->tes * n_tab);
    *pbytes = *mlp_at + al256(sizeof(float) * g->n_mlp);
    *mstate_at = al256(sizeof(float) * (size_t)rap_model_table_state_floats(c));
    *sbytes = *mstate_at + (rap_model_mlp_adagrad(c) ? al256(sizeof(float) * g->n_mlp) : 0);
    if (c->optimizer == RAP_SGD)
        *sbytes = 0;
}

/* Points the layers at their buffers and tensors (after plan(base)). */
static rap_status wire(rap_gpu *g, const rap_model *m)
{
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        const int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            rap_gpu_layer *l = &L[i];
            l->da = g->pp[i % 2];
            l->x = i > 0 ? L[i - 1].y : (k ? g->tin : g->xin);
            if (i == n - 1)
                l->y = k ? (void *)g->logits : (void *)g->z;
            l->dx = i > 0 ? L[i - 1].da : (k ? g->dtin : NULL);
            l->w = l->b = l->dw = l->db = NULL;
        }
    }
    int seg = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const rap_tensor *x = &m->tensors[i];
        if (x->kind == 0) {
            if (x->layer < 0 || x->layer >= g->TE || x->offset % (size_t)g->D != 0)
                return rap_fail(RAP_ERR_INTERNAL, "GPU model: table tensor %d at offset %zu",
                                i, x->offset);
            continue;
        }
        rap_gpu_layer *L = (x->kind <= 2) ? g->bot : g->top;
        const int n = (x->kind <= 2) ? g->n_bot : g->n_top;
        if (x->layer < 0 || x->layer >= n || x->offset < m->mlp_offset)
            return rap_fail(RAP_ERR_INTERNAL, "GPU model: MLP tensor %d (%s) out of place", i,
                            x->info.name);
        rap_gpu_layer *l = &L[x->layer];
        const size_t rel = x->offset - m->mlp_offset;
        const bool bias = x->kind == 2 || x->kind == 4;
        /* the padded segment of this tensor: segs are in params order */
        if (seg >= g->segs.n || g->segs.src[seg] != (int64_t)rel)
            return rap_fail(RAP_ERR_INTERNAL, "GPU model: padded segment of %s", x->info.name);
        const int64_t dst = g->segs.dst[seg];
        void *cc = (char *)g->wc + g->es * (size_t)dst;
        seg++;
        if (bias) {
            l->b = g->mlp + rel;
            l->db = g->grads + dst;
            l->bc = cc;
        } else {
            if (x->info.rows != l->out || x->info.cols != l->in)
                return rap_fail(RAP_ERR_INTERNAL, "GPU model: %s is %lldx%lld, expected %dx%d",
                                x->info.name, (long long)x->info.rows,
                                (long long)x->info.cols, l->out, l->in);
            l->w = g->mlp + rel;
            l->dw = g->grads + dst;
            l->wc = cc;
        }
    }
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        const int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++)
            if (!L[i].w || !L[i].b)
                return rap_fail(RAP_ERR_INTERNAL, "GPU model: layer %d of the %s MLP has no "
                                                  "tensors",
                                i, k ? "top" : "bottom");
    }
    return RAP_OK;
}

static size_t sort_bytes_or_estimate(const rap_gpu *g)
{
    size_t b = 0;
    if (rap_gpu_emb_sort_bytes(g->P, g->key_bits < 32 ? g->key_bits : 32, &b) != RAP_OK) {
        rap_clear_error();
        b = (size_t)g->P * 16 + (64u << 20); /* generous: only used when no GPU answers */
    }
    return b;
}

/* The blocks by part: the two weight blocks split at their MLP offsets,
 * the arena by plan()'s parts (g shaped and planned). */
static void gpu_parts(const rap_gpu *g, const rap_model_config *c, rap_model_mem *mm)
{
    size_t pb, sb, ma, sa;
    weight_blocks(g, c, &pb, &sb, &ma, &sa);
    memset(mm, 0, sizeof *mm);
    for (int k = 0; k < RAP_MM_N; k++)
        mm->part[k] = g->arena_part[k];
    mm->part[RAP_MM_TABLES] += ma;
    mm->part[RAP_MM_MLP] += pb - ma;
    if (sb) {
        mm->part[RAP_MM_TABLE_STATE] += sa;
        mm->part[RAP_MM_MLP_STATE] += sb - sa;
    }
    for (int k = 0; k < RAP_MM_N; k++)
        mm->total += mm->part[k];
}

static size_t gpu_bytes(const rap_model_config *c, rap_model_mem *parts)
{
    rap_gpu *g = (rap_gpu *)rap_calloc(sizeof *g, "GPU model plan");
    if (!g)
        return 0;
    rap_model_mem mm;
    memset(&mm, 0, sizeof mm);
    if (shape(g, c) == RAP_OK) {
        g->sort_bytes = sort_bytes_or_estimate(g);
        plan(g, NULL);
        gpu_parts(g, c, &mm);
    } else {
        rap_clear_error();
    }
    rap_free(g);
    if (parts)
        *parts = mm;
    return mm.total;
}

static rap_status check_flags(rap_gpu *g)
{
    const unsigned e = *g->h_err;
    if (!e)
        return RAP_OK;
    *g->h_err = 0;
    RAP_CUDA_TRY(cudaMemsetAsync(g->err, 0, sizeof(unsigned), g->stream));
    if (e & RAP_GPU_ERR_OVERFLOW)
        return rap_fail(RAP_ERR_ARG,
                        "GPU model: a batch had more ids than the embedding backward holds "
                        "(%lld = batch %lld x %d tables x %lld per bag); the ids past that "
                        "did not update their tables",
                        (long long)g->P, (long long)g->EB, g->TE, (long long)g->bag);
    return rap_fail(RAP_ERR_ARG, "GPU model: a batch had an id outside its table's rows "
                                 "(ignored)");
}

/* Waits for the stream and reports the device's error flags. */
static rap_status sync_check(rap_gpu *g)
{
    RAP_CUDA_TRY(cudaMemcpyAsync(g->h_err, g->err, sizeof(unsigned), cudaMemcpyDeviceToHost,
                                 g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return check_flags(g);
}

static void gpu_free(rap_model *m)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    rap_gpu_mlp_destroy(g);
    if (g->lt)
        cublasLtDestroy(g->lt);
    rap_cuda_free(g->blk_params);
    rap_cuda_free(g->blk_state);
    rap_cuda_free(g->blk_arena);
    if (g->h_loss)
        cudaFreeHost(g->h_loss);
    if (g->h_err)
        cudaFreeHost(g->h_err);
    if (g->own_stream && g->stream)
        cudaStreamDestroy(g->stream);
    cudaGetLastError();
    rap_free(g);
    m->gpu = NULL;
}

static rap_status create(rap_model *m, const float *mlp_init)
{
    const rap_model_config *c = &m->cfg;
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(shape(g, c));
    RAP_TRY(limits(g));
    if (g->n_params != m->n_params || g->n_mlp != m->n_mlp_params ||
        g->n_params - g->n_mlp != m->mlp_offset || g->top_in != m->top_in)
        return rap_fail(RAP_ERR_INTERNAL,
                        "GPU model: parameter count %zu (MLP %zu) differs from the model's %zu "
                        "(%zu)",
                        g->n_params, g->n_mlp, m->n_params, m->n_mlp_params);
    RAP_CUDA_TRY(cudaGetDevice(&g->dev));
    RAP_CUDA_TRY(cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, g->dev));
    int optin = 0;
    RAP_CUDA_TRY(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g->dev));
    g->smem_optin = (size_t)optin;
    RAP_TRY(rap_gpu_emb_sort_bytes(g->P, g->key_bits, &g->sort_bytes));
    g->arena_bytes = plan(g, NULL);
    size_t pbytes, sbytes, mlp_at, mstate_at;
    weight_blocks(g, c, &pbytes, &sbytes, &mlp_at, &mstate_at);
    const size_t need = pbytes + sbytes + g->arena_bytes;
    size_t free_b = 0, total_b = 0;
    RAP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (need > free_b)
        return rap_fail(RAP_ERR_NOMEM,
                        "GPU model needs %zu bytes (%.2f GiB: weights %.2f, optimizer state "
                        "%.2f, activations and workspaces %.2f for batch %lld) but the GPU has "
                        "%zu bytes (%.2f GiB) free of %zu",
                        need, need / 1073741824.0, pbytes / 1073741824.0,
                        sbytes / 1073741824.0, g->arena_bytes / 1073741824.0,
                        (long long)g->B, free_b, free_b / 1073741824.0, total_b);
    RAP_TRY(rap_cuda_malloc(&g->blk_params, pbytes, "GPU model weights"));
    if (sbytes)
        RAP_TRY(rap_cuda_malloc(&g->blk_state, sbytes, "GPU model optimizer state"));
    RAP_TRY(rap_cuda_malloc(&g->blk_arena, g->arena_bytes, "GPU model activations"));
    g->tab = g->blk_params;
    g->mlp = (float *)((char *)g->blk_params + mlp_at);
    if (sbytes) {
        g->tab_state = rap_model_table_state_floats(c) ? (float *)g->blk_state : NULL;
        g->mlp_state = rap_model_mlp_adagrad(c) ? (float *)((char *)g->blk_state + mstate_at)
                                                : NULL;
    }
    plan(g, (char *)g->blk_arena);
    RAP_TRY(wire(g, m));

    if (c->stream) {
        g->stream = (cudaStream_t)c->stream;
    } else {
        int lo = 0, hi = 0;
        RAP_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        RAP_CUDA_TRY(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, hi));
        g->own_stream = true;
    }
    RAP_CUBLAS_TRY(cublasLtCreate(&g->lt));
    RAP_CUDA_TRY(cudaHostAlloc((void **)&g->h_loss, sizeof(float), cudaHostAllocDefault));
    RAP_CUDA_TRY(cudaHostAlloc((void **)&g->h_err, sizeof(unsigned), cudaHostAllocDefault));
    *g->h_loss = 0.0f;
    *g->h_err = 0;

    /* contents: zero arena, tables from the seed, MLP from mlp_init */
    RAP_CUDA_TRY(cudaMemsetAsync(g->blk_arena, 0, g->arena_bytes, g->stream));
    rap_status s = RAP_OK;
    if (g->TE > 0) {
        /* rb: row_base, nrows, grow_off (TE each), then gtable (TE int32) */
        int64_t *rb =
            (int64_t *)rap_malloc(sizeof(int64_t) * 4 * (size_t)g->TE, "GPU model rows");
        if (!rb)
            return RAP_ERR_NOMEM;
        int32_t *gt = (int32_t *)(rb + 3 * g->TE);
        for (int i = 0; i < m->n_tensors; i++) {
            const rap_tensor *x = &m->tensors[i];
            if (x->kind != 0)
                continue;
            int t;
            int64_t row0;
            rap_model_tensor_origin(m, i, &t, &row0);
            rb[x->layer] = (int64_t)(x->offset / (size_t)g->D);
            rb[g->TE + x->layer] = x->info.rows;
            rb[2 * g->TE + x->layer] = row0 - rb[x->layer];
            gt[x->layer] = t;
        }
        /* all on g->stream (ordered after the memset; a pageable async copy
         * returns once rb is staged, so rb can be freed) */
        const size_t tb = sizeof(int64_t) * (size_t)g->TE;
        cudaError_t e =
            cudaMemcpyAsync(g->row_base, rb, tb, cudaMemcpyHostToDevice, g->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(g->nrows, rb + g->TE, tb, cudaMemcpyHostToDevice, g->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(g->grow_off, rb + 2 * g->TE, tb, cudaMemcpyHostToDevice,
                                g->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(g->gtable, gt, sizeof(int32_t) * (size_t)g->TE,
                                cudaMemcpyHostToDevice, g->stream);
        rap_free(rb);
        if (e != cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "GPU model: uploading table rows: %s",
                            cudaGetErrorString(e));
    }
    /* table k: rows [row0, row0 + rows) of global table t (all of it
     * unless sharded) */
    for (int i = 0; i < m->n_tensors && s == RAP_OK; i++) {
        const rap_tensor *x = &m->tensors[i];
        if (x->kind != 0 || x->info.rows <= 0)
            continue;
        int t;
        int64_t row0;
        rap_model_tensor_origin(m, i, &t, &row0);
        s = rap_gpu_init_table(g, (char *)g->tab + g->tes * x->offset, c->seed, t,
                               c->table_rows[t], g->D, row0, x->info.rows);
    }
    RAP_TRY(s);
    if (m->n_mlp_params)
        RAP_CUDA_TRY(cudaMemcpyAsync(g->mlp, mlp_init, sizeof(float) * m->n_mlp_params,
                                     cudaMemcpyHostToDevice, g->stream));
    if (g->tab_state)
        RAP_TRY(rap_gpu_fill(g, g->tab_state, (size_t)rap_model_table_state_floats(c),
                             c->adagrad_init));
    if (g->mlp_state)
        RAP_TRY(rap_gpu_fill(g, g->mlp_state, g->n_mlp, c->adagrad_init));
    RAP_TRY(rap_gpu_refresh_copy(g, m));
    RAP_TRY(rap_gpu_interact_setup(g));
    RAP_TRY(rap_gpu_mlp_setup(g));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    RAP_CUDA_TRY(cudaGetLastError());
    return RAP_OK;
}

static rap_status gpu_create(rap_model *m, const float *mlp_init)
{
    rap_gpu *g = (rap_gpu *)rap_calloc(sizeof *g, "GPU model");
    if (!g)
        return RAP_ERR_NOMEM;
    m->gpu = g;
    rap_status s = create(m, mlp_init);
    if (s != RAP_OK) {
        /* keep the message of the failure, not of the clean-up */
        gpu_free(m);
    }
    return s;
}

/* A batch of 1..cap rows (B for the MLP phases, EB for the emb phases),
 * with a dense input when mlp. */
static rap_status check_batch(const rap_gpu *g, const rap_model_batch *b, int64_t cap,
                              bool mlp, const char *what)
{
    if (!b || b->rows < 1 || b->rows > cap)
        return rap_fail(RAP_ERR_ARG, "%s: batch of %lld rows, expected 1..%lld", what,
                        b ? (long long)b->rows : 0LL, (long long)cap);
    if (mlp && !b->dense)
        return rap_fail(RAP_ERR_ARG, "%s: batch has no dense input", what);
    return RAP_OK;
}

static rap_status gpu_emb_forward(rap_model *m, const rap_model_batch *b)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(check_batch(g, b, g->EB, false, "GPU emb_forward"));
    if (g->sharded && !g->direct)
        return g->TE ? rap_gpu_emb_forward(g, b, 0, g->TE, g->emb_out, false,
                                           (int64_t)g->TE * g->D, 0)
                     : RAP_OK;
    return rap_gpu_emb_forward(g, b, 0, g->T, g->z, g->zbf, (int64_t)g->F * g->D, 1);
}

/* bottom MLP, interaction, top MLP (logits) */
static rap_status forward_to_logits(rap_gpu *g, const rap_model_batch *b)
{
    RAP_TRY(rap_gpu_mlp_set_rows(g, b->rows));
    RAP_TRY(rap_gpu_dense_in(g, b->dense, b->rows));
    RAP_TRY(rap_gpu_mlp_forward(g, g->bot, g->n_bot, b->rows));
    RAP_TRY(rap_gpu_interact_forward(g, b->rows));
    RAP_TRY(rap_gpu_mlp_forward(g, g->top, g->n_top, b->rows));
    return RAP_OK;
}

static rap_status gpu_mlp_forward(rap_model *m, const rap_model_batch *b)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(check_batch(g, b, g->B, true, "GPU mlp_forward"));
    if (!b->label)
        return rap_fail(RAP_ERR_ARG, "GPU mlp_forward: batch has no labels");
    RAP_TRY(forward_to_logits(g, b));
    return rap_gpu_loss(g, b->label, b->rows, g->sharded ? m->cfg.shard->loss_rows : b->rows);
}

static rap_status gpu_mlp_backward(rap_model *m, const rap_model_batch *b)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(check_batch(g, b, g->B, false, "GPU mlp_backward"));
    RAP_TRY(rap_gpu_mlp_set_rows(g, b->rows));
    RAP_TRY(rap_gpu_mlp_backward(g, g->top, g->n_top, b->rows));
    RAP_TRY(rap_gpu_interact_backward(g, b->rows));
    RAP_TRY(rap_gpu_mlp_backward(g, g->bot, g->n_bot, b->rows));
    return g->sharded ? RAP_OK : rap_gpu_dense_update(g, m);
}

static rap_status gpu_emb_backward(rap_model *m, const rap_model_batch *b)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(check_batch(g, b, g->EB, false, "GPU emb_backward"));
    if (g->sharded && !g->direct)
        return g->TE ? rap_gpu_emb_backward(g, b, g->demb_out, false, (int64_t)g->TE * g->D, 0,
                                            &m->cfg)
                     : RAP_OK;
    return rap_gpu_emb_backward(g, b, g->de, g->debf, (int64_t)g->T * g->D, 0, &m->cfg);
}

static rap_status gpu_predict(rap_model *m, const rap_model_batch *b, float *logits)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_TRY(check_batch(g, b, g->B, true, "GPU predict"));
    if (!logits)
        return rap_fail(RAP_ERR_ARG, "GPU predict: logits is NULL");
    if (!g->sharded) /* sharded: the MLPs only, from z as the caller filled it */
        RAP_TRY(rap_gpu_emb_forward(g, b, 0, g->T, g->z, g->zbf, (int64_t)g->F * g->D, 1));
    RAP_TRY(forward_to_logits(g, b));
    RAP_TRY(sync_check(g));
    RAP_CUDA_TRY(cudaMemcpyAsync(logits, g->logits, sizeof(float) * (size_t)b->rows,
                                 cudaMemcpyDeviceToHost, g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

static rap_status gpu_last_loss(rap_model *m, double *loss)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_CUDA_TRY(cudaMemcpyAsync(g->h_loss, g->loss, sizeof(float), cudaMemcpyDeviceToHost,
                                 g->stream));
    RAP_TRY(sync_check(g));
    *loss = (double)*g->h_loss;
    return RAP_OK;
}

static rap_status gpu_sync(rap_model *m)
{
    return sync_check((rap_gpu *)m->gpu);
}

/* Tensor i's device storage (or its state), the bytes per element and
 * the elements per row (a table's row-wise state: 1). */
static rap_status tensor_span(const rap_model *m, int i, bool state, char **p, size_t *es,
                              int64_t *cols)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    if (i < 0 || i >= m->n_tensors)
        return rap_fail(RAP_ERR_ARG, "GPU model: tensor %d of %d", i, m->n_tensors);
    const rap_tensor *x = &m->tensors[i];
    *cols = x->info.cols;
    *es = sizeof(float);
    if (x->kind != 0) {
        float *b = state ? g->mlp_state : g->mlp;
        if (!b)
            return rap_fail(RAP_ERR_ARG, "GPU model: no optimizer state (SGD)");
        *p = (char *)(b + (x->offset - m->mlp_offset));
        return RAP_OK;
    }
    if (!state) {
        *es = g->tes;
        *p = (char *)g->tab + g->tes * x->offset;
        return RAP_OK;
    }
    if (!g->tab_state)
        return rap_fail(RAP_ERR_ARG, "GPU model: no optimizer state (SGD)");
    const bool rw = m->cfg.optimizer == RAP_ROWWISE_ADAGRAD;
    *cols = rw ? 1 : x->info.cols;
    *p = (char *)(g->tab_state + (rw ? x->offset / (size_t)g->D : x->offset));
    return RAP_OK;
}

/* Raw rows in the storage type (model_internal.h read_rows / write_rows);
 * model.c has checked the range. Synchronise. */
static rap_status gpu_read_rows(const rap_model *m, int i, int64_t row0, int64_t n, void *host,
                                bool state)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    char *p = NULL;
    size_t es = 0;
    int64_t cols = 0;
    RAP_TRY(tensor_span(m, i, state, &p, &es, &cols));
    if (n <= 0)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpyAsync(host, p + es * (size_t)(row0 * cols), es * (size_t)(n * cols),
                                 cudaMemcpyDeviceToHost, g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

static rap_status gpu_write_rows(rap_model *m, int i, int64_t row0, int64_t n,
                                 const void *host, bool state)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    char *p = NULL;
    size_t es = 0;
    int64_t cols = 0;
    RAP_TRY(tensor_span(m, i, state, &p, &es, &cols));
    if (n <= 0)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpyAsync(p + es * (size_t)(row0 * cols), host, es * (size_t)(n * cols),
                                 cudaMemcpyHostToDevice, g->stream));
    if (!state && m->tensors[i].kind != 0)
        RAP_TRY(rap_gpu_refresh_copy(g, m));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

/* Whole tensors as floats: fp32 storage only (model.c converts a 16-bit
 * table through the rows). */
static rap_status gpu_get(const rap_model *m, int i, float *host, bool state)
{
    if (!state && rap_model_tensor_dtype(m, i) != RAP_EMB_FP32) /* model.c converts */
        return rap_fail(RAP_ERR_INTERNAL, "GPU model: float get of a 16-bit table");
    return gpu_read_rows(m, i, 0, m->tensors[i].info.rows, host, state);
}

static rap_status gpu_set(rap_model *m, int i, const float *host, bool state)
{
    if (!state && rap_model_tensor_dtype(m, i) != RAP_EMB_FP32)
        return rap_fail(RAP_ERR_INTERNAL, "GPU model: float set of a 16-bit table");
    return gpu_write_rows(m, i, 0, m->tensors[i].info.rows, host, state);
}

/* The embedding update counter (device memory, so that a graph replay
 * advances it). Synchronises. */
static rap_status gpu_get_emb_step(const rap_model *m, uint64_t *step)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_CUDA_TRY(cudaMemcpyAsync(step, g->emb_step, sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                 g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

static rap_status gpu_set_emb_step(rap_model *m, uint64_t step)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    RAP_CUDA_TRY(cudaMemcpyAsync(g->emb_step, &step, sizeof(uint64_t), cudaMemcpyHostToDevice,
                                 g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

extern "C" rap_status rap_gpu_model_pooled(const rap_model *m, int64_t rows, float *host,
                                           bool *is_bf16)
{
    if (!m || m->device != RAP_GPU || !m->gpu)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_pooled: not a GPU model");
    rap_gpu *g = (rap_gpu *)m->gpu;
    if (rows < 1 || rows > g->B || g->sharded)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_pooled: %lld rows of a%s model, expected "
                                     "1..%lld of an unsharded one",
                        (long long)rows, g->sharded ? " sharded" : "n unsharded",
                        (long long)g->B);
    /* z row r: [x (D), e_0 .. e_{T-1}]: the T*D elements after x; bf16
     * ones copied into the upper half of host's floats, then widened */
    const size_t n = (size_t)g->T * (size_t)g->D, td = g->zes * n;
    if (is_bf16)
        *is_bf16 = g->zbf;
    RAP_CUDA_TRY(cudaMemcpy2DAsync(host, sizeof(float) * n, (char *)g->z + g->zes * g->D,
                                   g->zes * (size_t)g->F * g->D, td, (size_t)rows,
                                   cudaMemcpyDeviceToHost, g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    if (g->zbf)
        for (int64_t r = 0; r < rows; r++) {
            float *row = host + (size_t)r * n;
            const uint16_t *h = (const uint16_t *)row;
            for (size_t e = n; e-- > 0;) /* backwards: h[e] lies below row[e] */
                row[e] = rap_bf16_to_f32(h[e]);
        }
    return RAP_OK;
}

extern "C" rap_status rap_gpu_model_emb_backward_from(rap_model *m, const rap_model_batch *b,
                                                      const void *demb, bool demb_bf16)
{
    if (!m || m->device != RAP_GPU || !m->gpu)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_emb_backward_from: not a GPU model");
    rap_gpu *g = (rap_gpu *)m->gpu;
    if (g->sharded || !demb)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_emb_backward_from: unsharded models and a "
                                     "gradient only");
    RAP_TRY(check_batch(g, b, g->EB, false, "rap_gpu_model_emb_backward_from"));
    return rap_gpu_emb_backward(g, b, demb, demb_bf16, (int64_t)g->T * g->D, 0, &m->cfg);
}

extern "C" rap_status rap_gpu_model_get_grad(const rap_model *m, int i, float *host)
{
    if (!m || m->device != RAP_GPU || !m->gpu)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_get_grad: not a GPU model");
    rap_gpu *g = (rap_gpu *)m->gpu;
    if (i < 0 || i >= m->n_tensors || m->tensors[i].kind == 0)
        return rap_fail(RAP_ERR_ARG, "rap_gpu_model_get_grad: tensor %d is not an MLP tensor",
                        i);
    const rap_tensor *x = &m->tensors[i];
    /* the tensor's padded segment: rows ld apart */
    const int64_t rel = (int64_t)(x->offset - m->mlp_offset);
    int k = 0;
    while (k < g->segs.n && g->segs.src[k] != rel)
        k++;
    if (k == g->segs.n)
        return rap_fail(RAP_ERR_INTERNAL, "rap_gpu_model_get_grad: no segment for %s",
                        x->info.name);
    const size_t cols = (size_t)g->segs.cols[k];
    const size_t rows = (size_t)((g->segs.src[k + 1] - rel) / (int64_t)cols);
    RAP_CUDA_TRY(cudaMemcpy2DAsync(host, sizeof(float) * cols, g->grads + g->segs.dst[k],
                                   sizeof(float) * (size_t)g->segs.ld[k], sizeof(float) * cols,
                                   rows, cudaMemcpyDeviceToHost, g->stream));
    RAP_CUDA_TRY(cudaStreamSynchronize(g->stream));
    return RAP_OK;
}

static rap_status gpu_dense_apply(rap_model *m)
{
    return rap_gpu_dense_update((rap_gpu *)m->gpu, m);
}

static void gpu_shard_buffers(rap_model *m, rap_model_shard_bufs *out)
{
    rap_gpu *g = (rap_gpu *)m->gpu;
    out->emb_out = g->emb_out;
    out->demb_out = g->demb_out;
    /* slot 1 of z: the interaction reads it in place (fp32: zbf only unsharded) */
    out->emb = (float *)g->z + g->D;
    out->emb_ld = (int64_t)g->F * g->D;
    out->demb = (float *)g->de;
    out->demb_ld = (int64_t)g->T * g->D;
    out->grads = g->grads;
    out->n_grads = (size_t)g->segs.n_pad;
    out->direct = g->direct;
}

/* ------------------------------------------------------------ kernel test data */

/* Host float to bf16 as the kernel test hooks have always rounded their
 * inputs: to nearest even (half.h), every NaN as the quiet 0x7fc0. */
static uint16_t test_bf16(float f)
{
    return f != f ? (uint16_t)0x7fc0u : rap_f32_to_bf16_rn(f);
}

rap_status rap_gpu_test_put(void *dst, const float *src, size_t n, bool bf16, void *stage)
{
    if (bf16)
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)stage)[i] = test_bf16(src[i]);
    RAP_CUDA_TRY(cudaMemcpy(dst, bf16 ? stage : (const void *)src, n * (bf16 ? 2 : 4),
                            cudaMemcpyHostToDevice));
    return RAP_OK;
}

rap_status rap_gpu_test_get(float *dst, const void *src, size_t n, bool bf16, void *stage)
{
    RAP_CUDA_TRY(cudaMemcpy(bf16 ? stage : (void *)dst, src, n * (bf16 ? 2 : 4),
                            cudaMemcpyDeviceToHost));
    if (bf16)
        for (size_t i = 0; i < n; i++)
            dst[i] = rap_bf16_to_f32(((const uint16_t *)stage)[i]);
    return RAP_OK;
}

/* ------------------------------------------------------------ the table */

static const float *gpu_last_logits(const rap_model *m)
{
    return ((const rap_gpu *)m->gpu)->logits;
}

/* In rap_model_backend's member order. get_grad is NULL: rap_model_get_grad
 * reads CPU models only (the test hook above reads this backend's). */
static const rap_model_backend gpu_backend = {
    gpu_bytes,         /* bytes */
    gpu_create,        /* create */
    gpu_free,          /* free */
    gpu_emb_forward,   /* emb_forward */
    gpu_mlp_forward,   /* mlp_forward */
    gpu_mlp_backward,  /* mlp_backward */
    gpu_emb_backward,  /* emb_backward */
    gpu_predict,       /* predict */
    gpu_last_loss,     /* last_loss */
    gpu_sync,          /* sync */
    gpu_get,           /* get */
    gpu_set,           /* set */
    gpu_read_rows,     /* read_rows */
    gpu_write_rows,    /* write_rows */
    gpu_get_emb_step,  /* get_emb_step */
    gpu_set_emb_step,  /* set_emb_step */
    NULL,              /* get_grad */
    gpu_dense_apply,   /* dense_apply */
    gpu_shard_buffers, /* shard_buffers */
    gpu_last_logits,   /* last_logits */
};

extern "C" const rap_model_backend *rap_model_backend_gpu(void) { return &gpu_backend; }

#else /* no CUDA: the GPU model is unavailable */

static rap_status no_gpu(void)
{
    char why[256];
    rap_gpu_available(why, sizeof why);
    return rap_fail(RAP_ERR_NO_GPU, "GPU model asked for, but %s", why);
}

/* Without CUDA there is no GPU backend: rap_model_create refuses RAP_GPU
 * (rap_gpu_available says why) before it would look for one. */
const rap_model_backend *rap_model_backend_gpu(void) { return NULL; }

rap_status rap_gpu_model_get_grad(const rap_model *m, int i, float *host)
{
    (void)m;
    (void)i;
    (void)host;
    return no_gpu();
}

rap_status rap_gpu_model_pooled(const rap_model *m, int64_t rows, float *host, bool *is_bf16)
{
    (void)m;
    (void)rows;
    (void)host;
    (void)is_bf16;
    return no_gpu();
}

rap_status rap_gpu_model_emb_backward_from(rap_model *m, const rap_model_batch *b,
                                           const void *demb, bool demb_bf16)
{
    (void)m;
    (void)b;
    (void)demb;
    (void)demb_bf16;
    return no_gpu();
}

#endif
