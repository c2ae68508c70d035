/*
 * ideal_shard.c -- ideal mode from a rap shard (`rap prep --format bin`,
 * data/shard.h; docs/RUNTIME.md "ideal from a shard"): the shard's
 * columns checked against the plan's output columns, every batch packed
 * into the model-batch layout and made resident (on the GPU, or in host
 * memory for the CPU model) by rap_runtime_create; the steps
 * (mode_ideal.c) then cycle over them.
 */
#include "run/rt_internal.h"

#include "core/checked.h"
#include "data/shard.h"
#include "prep/exec_internal.h"
#include "run/pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool rap_runtime_is_shard(const char *path)
{
    struct stat sb;
    if (!path || !path[0] || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char m[8];
    bool is = fread(m, 1, 8, f) == 8 && !memcmp(m, "RAPSHARD", 8);
    fclose(f);
    return is;
}

/* Layout of one resident model batch of `rows` rows whose table t holds
 * nids[t] ids, every piece 256-byte aligned: dense (rows, ND) f32, label
 * (rows) f32, then per table off (rows+1) i64 and ids (nids[t]) i64.
 * Returns its bytes; with base, points mb at the pieces. */
size_t rt_shard_layout(const rap_runtime *rt, int64_t rows, const int64_t *nids, char *base,
                       rap_model_batch *mb)
{
    size_t at = 0, dense = at;
    at += align256(sizeof(float) * (size_t)(rows * rt->n_dense));
    size_t label = at;
    at += align256(sizeof(float) * (size_t)rows);
    if (base) {
        memset(mb, 0, sizeof *mb);
        mb->rows = rows;
        mb->dense = (const float *)(base + dense);
        mb->label = (const float *)(base + label);
    }
    for (int t = 0; t < rt->n_tables; t++) {
        if (base)
            mb->off[t] = (const int64_t *)(base + at);
        at += align256(sizeof(int64_t) * (size_t)(rows + 1));
        if (base)
            mb->ids[t] = (const int64_t *)(base + at);
        at += align256(sizeof(int64_t) * (size_t)(nids[t] > 0 ? nids[t] : 1));
    }
    return at;
}

static void kind_desc(char *buf, size_t n, rap_kind kind, int width, bool bounded, int64_t lo,
                      int64_t hi)
{
    const char *k = kind == RAP_SPARSE ? "sparse" : kind == RAP_VECTOR ? "vector" : "dense";
    if (bounded)
        snprintf(buf, n, "%s, width %d, bound [%lld, %lld]", k, width, (long long)lo,
                 (long long)hi);
    else
        snprintf(buf, n, "%s, width %d, unbounded", k, width);
}

/* The shard's columns must be the plan's output columns, in order. */
static rap_status shard_check_cols(const rap_runtime *rt, rap_shard_reader *r)
{
    const char *path = rt->cfg.shard, *pl = rt->plan->source;
    const char *fix = "the shard needs the plan it was written with (write it again with "
                      "`rap prep --plan PLAN --format bin` for this plan)";
    int nc = rap_shard_n_cols(r);
    const rap_shard_col *sc = rap_shard_cols(r);
    for (int c = 0; c < nc || c < rt->plan->n_cols; c++) {
        if (c >= nc)
            return rap_fail(RAP_ERR_ARG, "%s: the shard has %d columns, plan %s has %d (column "
                            "%s is missing): %s", path, nc, pl, rt->plan->n_cols,
                            rt->plan->cols[c].name, fix);
        if (c >= rt->plan->n_cols)
            return rap_fail(RAP_ERR_ARG, "%s: the shard has %d columns, plan %s has %d (column "
                            "%s is not in the plan): %s", path, nc, pl, rt->plan->n_cols,
                            sc[c].name, fix);
        const rap_node *n = &rt->plan->nodes[rt->plan->cols[c].node];
        const char *name = rt->plan->cols[c].name;
        if (strcmp(sc[c].name, name))
            return rap_fail(RAP_ERR_ARG, "%s: column %d is %s in the shard, %s in plan %s: %s",
                            path, c, sc[c].name, name, pl, fix);
        bool nb = n->kind == RAP_SPARSE || n->bounded;
        if (sc[c].kind != n->kind || sc[c].width != n->width || sc[c].bounded != n->bounded ||
            (nb && (sc[c].lo != n->lo || sc[c].hi != n->hi))) {
            char a[128], b[128];
            kind_desc(a, sizeof a, sc[c].kind, sc[c].width, sc[c].bounded, sc[c].lo, sc[c].hi);
            kind_desc(b, sizeof b, n->kind, n->width, n->bounded, n->lo, n->hi);
            return rap_fail(RAP_ERR_ARG, "%s: column %s is %s in the shard, %s in plan %s: %s",
                            path, name, a, b, pl, fix);
        }
    }
    return RAP_OK;
}

/* Packs one shard batch (label, cols in plan order) into the model-batch
 * layout at dst (host memory of rt_shard_layout's size); checks ids against
 * the tables. */
static rap_status shard_pack(const rap_runtime *rt, int64_t b, const float *label, int64_t rows,
                             const rap_host_column *cols, rap_pack_col *pc, char *dst)
{
    rap_model_batch mb;
    rt_shard_layout(rt, rows, rt->sh_nids + b * rt->n_tables, dst, &mb);
    int nd = 0, t = 0;
    const rap_model_config *mc = rap_model_config_of(rt->model);
    for (int c = 0; c < rt->plan->n_cols; c++) {
        const rap_host_column *h = &cols[c];
        if (h->kind != RAP_SPARSE) {
            pc[nd].val = h->val;
            pc[nd].valid = h->valid;
            pc[nd].width = h->width;
            nd++;
            continue;
        }
        int64_t n = h->off[rows];
        for (int64_t i = 0; i < n; i++)
            if (h->ids[i] < 0 || h->ids[i] >= mc->table_rows[t])
                return rap_fail(RAP_ERR_DATA, "%s: batch %lld: column %s holds id %lld, outside "
                                "its table [0, %lld)", rt->cfg.shard, (long long)b,
                                rt->plan->cols[c].name, (long long)h->ids[i],
                                (long long)mc->table_rows[t]);
        memcpy((void *)mb.off[t], h->off, sizeof(int64_t) * (size_t)(rows + 1));
        memcpy((void *)mb.ids[t], h->ids, sizeof(int64_t) * (size_t)n);
        t++;
    }
    memcpy((void *)mb.label, label, sizeof(float) * (size_t)rows);
    return rap_pack_dense_cpu(pc, nd, rows, rt->n_dense, (float *)mb.dense);
}

/* Pass 1 over the shard (reader r, nb batches): each batch's rows and ids
 * checked and its place in the resident block laid out (sh_rows, sh_nids,
 * sh_pos, sh_at); *total gets the block's bytes, *max_batch the largest
 * batch's, *pos the rows of a pass. *label and cols hold a batch read
 * (left for the caller to free on failure). */
static rap_status shard_size(rap_runtime *rt, rap_shard_reader *r, int64_t nb, float **label,
                             rap_host_column *cols, size_t *total, size_t *max_batch,
                             int64_t *pos)
{
    const char *path = rt->cfg.shard;
    int T = rt->n_tables, NC = rt->plan->n_cols;
    rap_status st = RAP_OK;
    for (int64_t b = 0; st == RAP_OK && b < nb; b++) {
        int64_t rows = 0;
        st = rap_shard_next(r, label, &rows, cols);
        if (st != RAP_OK)
            break;
        if (rows == 0) {
            st = rap_fail(RAP_ERR_DATA, "%s: ends after %lld batches, its footer says %lld", path,
                          (long long)b, (long long)nb);
            break;
        }
        if (rows > rt->B || (rows != rt->B && b < nb - 1)) {
            st = rap_fail(RAP_ERR_ARG, "%s: batch %lld holds %lld rows, the model's batch is "
                          "%lld: ideal mode trains a shard's batches as they are (no "
                          "re-batching), so --batch must equal the shard's batch size "
                          "(`rap prep --batch`; only its last batch may be shorter)", path,
                          (long long)b, (long long)rows, (long long)rt->B);
            break;
        }
        for (int c = 0, t = 0; c < NC; c++)
            if (cols[c].kind == RAP_SPARSE)
                rt->sh_nids[b * T + t++] = cols[c].off[rows];
        rt->sh_rows[b] = rows;
        *pos += rows;
        rt->sh_pos[b] = *pos;
        rt->sh_at[b] = *total;
        size_t bytes = rt_shard_layout(rt, rows, rt->sh_nids + b * T, NULL, NULL);
        *total += bytes;
        if (bytes > *max_batch)
            *max_batch = bytes;
        free(*label);
        *label = NULL;
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    }
    return st;
}

/* GPU: whether the resident block of `total` bytes fits in the free memory
 * (with a margin). */
static rap_status shard_fits(const rap_runtime *rt, int64_t nb, size_t total)
{
    size_t fr = 0, tot = 0;
    rap_status st = rap_prep_gpu_meminfo(&fr, &tot);
    size_t margin = (size_t)64 << 20;
    if (st == RAP_OK && total + margin > fr)
        st = rap_fail(RAP_ERR_NOMEM, "%s: its %lld preprocessed batches need %zu bytes "
                      "(%.2f GB) resident on the GPU (+ %zu bytes margin), %zu bytes "
                      "(%.2f GB) are free: write a smaller shard (`rap prep --max-rows`)",
                      rt->cfg.shard, (long long)nb, total, (double)total / 1e9, margin, fr,
                      (double)fr / 1e9);
    return st;
}

/* Pass 2 over the shard (reader r opened again): each batch read, checked
 * against pass 1, packed and placed at sh_at[b] of sh_block (through the
 * host staging block `stage` on the GPU). *label and cols as in pass 1. */
static rap_status shard_place(rap_runtime *rt, rap_shard_reader *r, int64_t nb, float **label,
                              rap_host_column *cols, rap_pack_col *pc, char *stage)
{
    const char *path = rt->cfg.shard;
    int T = rt->n_tables, NC = rt->plan->n_cols;
    rap_status st = RAP_OK;
    for (int64_t b = 0; st == RAP_OK && b < nb; b++) {
        int64_t rows = 0;
        st = rap_shard_next(r, label, &rows, cols);
        if (st != RAP_OK)
            break;
        if (rows != rt->sh_rows[b]) {
            st = rap_fail(RAP_ERR_DATA, "%s: batch %lld changed while being read", path,
                          (long long)b);
            break;
        }
        for (int c = 0, t = 0; c < NC; c++)
            if (cols[c].kind == RAP_SPARSE && cols[c].off[rows] != rt->sh_nids[b * T + t++])
                st = rap_fail(RAP_ERR_DATA, "%s: batch %lld changed while being read", path,
                              (long long)b);
        char *dst = on_gpu(rt) ? stage : rt->sh_block + rt->sh_at[b];
        if (st == RAP_OK)
            st = shard_pack(rt, b, *label, rows, cols, pc, dst);
        if (st == RAP_OK && on_gpu(rt))
            st = rap_cuda_upload(rt->sh_block + rt->sh_at[b], stage,
                                rt_shard_layout(rt, rows, rt->sh_nids + b * T, NULL, NULL));
        free(*label);
        *label = NULL;
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    }
    return st;
}

/* A resume position (shard_start_rows) must end a batch: the first step
 * is the batch after it. */
static rap_status shard_resume(rap_runtime *rt, int64_t nb, int64_t pass_rows)
{
    int64_t b = 0;
    while (b < nb && rt->sh_pos[b] < rt->cfg.shard_start_rows)
        b++;
    if (b >= nb || rt->sh_pos[b] != rt->cfg.shard_start_rows)
        return rap_fail(RAP_ERR_ARG, "%s: resume position %lld (rows into the pass) does not "
                        "end a batch of the shard (%lld rows in %lld batches)", rt->cfg.shard,
                        (long long)rt->cfg.shard_start_rows, (long long)pass_rows,
                        (long long)nb);
    rt->sh_seq = b + 1;
    return RAP_OK;
}

/* Reads the shard twice: once to check it and size its batches (nothing
 * allocated on the device yet; the GPU's free memory is checked), once to
 * pack every batch and place it (upload on the GPU). */
rap_status rt_shard_load(rap_runtime *rt)
{
    const char *path = rt->cfg.shard;
    int T = rt->n_tables, NC = rt->plan->n_cols;
    rap_shard_reader *r = NULL;
    rap_host_column *cols = rap_calloc(sizeof *cols * (size_t)(NC ? NC : 1), "shard columns");
    rap_pack_col *pc = rap_calloc(sizeof *pc * (size_t)(NC ? NC : 1), "shard columns");
    char *stage = NULL;
    float *label = NULL;
    rap_status st = cols && pc ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_shard_open(path, &r);
    if (st == RAP_OK)
        st = shard_check_cols(rt, r);
    /* nb is the footer's, bounded by the file's length (rap_shard_open) */
    int64_t nb = r ? rap_shard_batches(r) : 0;
    size_t nbs = 0, nbt = 0;
    if (st == RAP_OK && nb < 1)
        st = rap_fail(RAP_ERR_DATA, "%s: the shard holds no batch", path);
    if (st == RAP_OK && (!rap_i64_to_size_ok(nb, &nbs) ||
                         !rap_mul_size_ok(nbs, sizeof(int64_t) * (size_t)(T ? T : 1), &nbt) ||
                         !rap_mul_size_ok(nbs, sizeof(int64_t), &nbs)))
        st = rap_fail(RAP_ERR_DATA, "%s: %lld batches: too many", path, (long long)nb);
    if (st == RAP_OK) {
        rt->sh_n = nb;
        rt->sh_rows = rap_calloc(nbs, "shard batches");
        rt->sh_pos = rap_calloc(nbs, "shard batches");
        rt->sh_at = rap_calloc(nbs, "shard batches");
        rt->sh_nids = rap_calloc(nbt, "shard batches");
        if (!rt->sh_rows || !rt->sh_pos || !rt->sh_at || !rt->sh_nids)
            st = RAP_ERR_NOMEM;
    }
    /* pass 1: rows and ids per batch, the layout, the bytes */
    size_t total = 0, max_batch = 0;
    int64_t pos = 0;
    if (st == RAP_OK)
        st = shard_size(rt, r, nb, &label, cols, &total, &max_batch, &pos);
    rap_shard_close_reader(r);
    r = NULL;
    rt->st.shard_bytes = total;
    rt->st.shard_batches = nb;
    rt->st.shard_rows = pos;
    if (st == RAP_OK && on_gpu(rt))
        st = shard_fits(rt, nb, total);
    /* pass 2: pack each batch and place it */
    if (st == RAP_OK) {
        if (on_gpu(rt)) {
            st = rap_cuda_malloc((void **)&rt->sh_block, total, "shard batches (ideal mode)");
            if (st == RAP_OK && !(stage = rap_malloc(max_batch, "shard staging")))
                st = RAP_ERR_NOMEM;
        } else if (!(rt->sh_block = rap_aligned_alloc(total, "shard batches (ideal mode)"))) {
            st = RAP_ERR_NOMEM;
        }
    }
    if (st == RAP_OK)
        st = rap_shard_open(path, &r);
    if (st == RAP_OK)
        st = shard_place(rt, r, nb, &label, cols, pc, stage);
    if (r)
        rap_shard_close_reader(r);
    free(label);
    if (cols)
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    rap_free(stage);
    rap_free(cols);
    rap_free(pc);
    if (st == RAP_OK && rt->cfg.shard_start_rows > 0)
        RAP_TRY(shard_resume(rt, nb, pos));
    if (st == RAP_OK)
        rap_info("ideal mode: %s: %lld batches (%lld rows) resident on the %s, %.1f MB", path,
                 (long long)nb, (long long)pos, on_gpu(rt) ? "GPU" : "CPU", (double)total / 1e6);
    return st;
}

void rt_shard_free(rap_runtime *rt)
{
    if (rt->sh_block) {
        if (on_gpu(rt))
            rap_cuda_free(rt->sh_block);
        else
            rap_aligned_free(rt->sh_block);
    }
    rap_free(rt->sh_rows);
    rap_free(rt->sh_nids);
    rap_free(rt->sh_pos);
    rap_free(rt->sh_at);
}
