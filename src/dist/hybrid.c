/*
 * hybrid.c -- the hybrid-parallel training step (hybrid.h), and the CPU
 * references of its exchange kernels (hybrid_internal.h).
 *
 * Both all-to-alls need no packing on the side of emb_out / demb_out: rank
 * p's rows [p0, p0 + np) of emb_out (n, TL, D) are one contiguous block,
 * sent as is; the reverse exchange receives straight into demb_out. Only
 * this rank's side is repacked: the forward receive buffer is scattered
 * into emb (summing the parts of a row-split table in the map's order,
 * so every rank and every run adds in the same order), and demb is
 * gathered into the reverse send buffer.
 */
#include "dist/hybrid_internal.h"

#include <string.h>

struct rap_hybrid {
    rap_model *m;
    const rap_shard_map *map;
    rap_comm *c;
    rap_device dev;
    int R, r, T, D, TL, P;
    int64_t Bg, nr_max, ids_cap;
    int64_t loss_rows;                /* the model's divisor now */
    rap_model_shard_bufs bufs;
    /* Filter of row-range local tables (NULL for a whole table). */
    int64_t **f_off;                  /* (TL) (Bg+1) each, model's device */
    int64_t **f_ids;                  /* (TL) ids_cap each */
    void *scratch;                    /* GPU scan scratch */
    size_t scratch_bytes;
    /* Exchange buffers (model's device): (nr_max, TLs, D). */
    float *recv, *send;
    int64_t tls;                      /* TLs: local tables of all ranks */
    int64_t *cum;                     /* (R+1) TL of ranks before rank s */
    /* Parts: host arrays, and device copies for the GPU. */
    rap_hybrid_parts pa_host, pa_dev;
    int *h_part0, *h_table;
    int64_t *h_cum, *h_tl, *h_local;
    void *d_block;                    /* device copy of the five arrays */
    /* Counts (R each), in floats. */
    int64_t *fs_count, *fs_displ, *fr_count, *fr_displ;
    rap_model_batch bg;               /* b_glob of the local tables */
    bool had_rows;                    /* last step had local rows (loss valid) */
    /* GPU: at most two steps in flight (ev[step % 3] after each). */
    void *ev[3];
    int64_t steps;
    /* GPU, R > 1: the dense all-reduce on its own stream and NCCL comm,
     * overlapped with emb_backward: it waits for e_grads (the gradients
     * written, model stream); dense_apply waits for e_ar (it is done). */
    void *side;                       /* cudaStream_t */
    rap_comm *c2;                     /* nccl comm on side */
    void *e_grads, *e_ar;
    /* Phase hooks (rap_hybrid_set_hooks), and the communication timing:
     * GPU: tm[step % 3][6] = all-to-all begin, end, reverse all-to-all
     * begin, end (model stream), all-reduce begin, end (side stream);
     * steps before `timed` are summed in comm. */
    rap_hybrid_hooks hooks;
    bool has_hooks;
    void *tm[3][6];
    int64_t timed;
    rap_hybrid_comm comm;
};

void rap_hybrid_rows(int64_t n, int R, int r, int64_t *row0, int64_t *rows)
{
    int64_t base = n / R, extra = n % R;
    *rows = base + (r < extra);
    *row0 = (int64_t)r * base + (r < extra ? r : extra);
}

rap_status rap_hybrid_model_config(const rap_model_config *global, const rap_shard_map *map,
                                   int r, int64_t Bg, rap_model_shard *shard,
                                   rap_model_config *out)
{
    if (r < 0 || r >= map->n_ranks || Bg < 1)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_model_config: rank %d of %d, global batch %lld",
                        r, map->n_ranks, (long long)Bg);
    if (global->n_tables != map->n_tables || global->emb_dim != map->emb_dim)
        return rap_fail(RAP_ERR_ARG,
                        "rap_hybrid_model_config: model has %d tables of dim %d, shard map %d "
                        "of dim %d",
                        global->n_tables, global->emb_dim, map->n_tables, map->emb_dim);
    *shard = map->shard[r];
    shard->emb_batch = Bg;
    shard->loss_rows = Bg;
    *out = *global;
    int64_t row0, rows;
    rap_hybrid_rows(Bg, map->n_ranks, r, &row0, &rows);
    out->batch = rows > 0 ? rows : 1;
    out->shard = shard;
    return RAP_OK;
}

/* ------------------------------------------------------------ references */

int64_t rap_hybrid_filter_cpu(const int64_t *off, const int64_t *ids, int64_t n, int64_t row0,
                              int64_t rows, int64_t *out_off, int64_t *out_ids)
{
    int64_t k = 0;
    out_off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = off[i]; j < off[i + 1]; j++) {
            int64_t id = ids[j] - row0;
            if (id >= 0 && id < rows)
                out_ids[k++] = id;
        }
        out_off[i + 1] = k;
    }
    return k;
}

void rap_hybrid_scatter_cpu(const float *recv, int64_t nr, int T, int D,
                            const rap_hybrid_parts *pa, float *emb, int64_t ld)
{
    for (int64_t i = 0; i < nr; i++)
        for (int t = 0; t < T; t++) {
            float *dst = emb + i * ld + (int64_t)t * D;
            for (int p = pa->part0[t]; p < pa->part0[t + 1]; p++) {
                const float *src = recv + nr * D * pa->cum[p] + (i * pa->tl[p] + pa->local[p]) * D;
                if (p == pa->part0[t])
                    memcpy(dst, src, sizeof(float) * (size_t)D);
                else
                    for (int d = 0; d < D; d++)
                        dst[d] += src[d];
            }
        }
}

void rap_hybrid_gather_cpu(const float *demb, int64_t ld, int64_t nr, int P, int D,
                           const rap_hybrid_parts *pa, float *send)
{
    for (int64_t i = 0; i < nr; i++)
        for (int p = 0; p < P; p++)
            memcpy(send + nr * D * pa->cum[p] + (i * pa->tl[p] + pa->local[p]) * D,
                   demb + i * ld + (int64_t)pa->table[p] * D, sizeof(float) * (size_t)D);
}

/* ------------------------------------------------------------ create */

/* Bytes of the device part arrays (GPU) of a map of P parts and T tables. */
static size_t parts_bytes(int P, int T)
{
    size_t n64 = (size_t)P + 1, n32 = (size_t)T + 1 + (size_t)P + 1;
    return 3 * n64 * sizeof(int64_t) + n32 * sizeof(int);
}

/* Bytes of one exchange buffer (forward or reverse) of rank r: its most
 * rows of the global batch Bg times every rank's local tables. */
static size_t exchange_bytes(const rap_shard_map *map, int r, int64_t Bg, int D)
{
    int64_t row0, nr, tls = 0;
    rap_hybrid_rows(Bg, map->n_ranks, r, &row0, &nr);
    for (int s = 0; s < map->n_ranks; s++)
        tls += map->shard[s].n_local;
    return sizeof(float) * (size_t)nr * (size_t)tls * (size_t)D;
}

/* Whether local table k of shard sh is a row range (filtered), not whole. */
static bool filtered(const rap_model_shard *sh, const rap_model_config *mc, int k)
{
    return !(sh->row0[k] == 0 && sh->rows[k] == mc->table_rows[sh->table[k]]);
}

/* Bytes of a filtered table's offsets and ids over Bg rows. */
static void filter_bytes(int64_t Bg, int64_t ids_cap, size_t *off, size_t *ids)
{
    *off = sizeof(int64_t) * (size_t)(Bg + 1);
    *ids = sizeof(int64_t) * (size_t)ids_cap;
}

rap_status rap_hybrid_bytes(const rap_shard_map *map, int r, const rap_model_config *mc,
                            rap_device dev, size_t *bytes)
{
    *bytes = 0;
    const rap_model_shard *sh = mc ? mc->shard : NULL;
    if (!map || !sh || r < 0 || r >= map->n_ranks)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_bytes: a map, a rank of it and a sharded "
                        "model config are required");
    const int64_t Bg = sh->emb_batch, cap = Bg * (mc->max_bag > 0 ? mc->max_bag : 1);
    size_t b = 2 * exchange_bytes(map, r, Bg, mc->emb_dim);
    for (int k = 0; k < sh->n_local; k++)
        if (filtered(sh, mc, k)) {
            size_t o, i;
            filter_bytes(Bg, cap, &o, &i);
            b += o + i;
        }
    if (dev == RAP_GPU)
        b += parts_bytes(map->n_parts, mc->n_tables) + rap_hybrid_filter_gpu_scratch(Bg);
    *bytes = b;
    return RAP_OK;
}

static void *h_alloc(rap_hybrid *h, size_t bytes, const char *what, rap_status *st)
{
    if (*st != RAP_OK)
        return NULL;
    void *p = NULL;
    *st = rap_dev_alloc(h->dev, &p, bytes, what);
    return p;
}

static void h_free(rap_hybrid *h, void *p)
{
    rap_dev_free(h->dev, p);
}

void rap_hybrid_free(rap_hybrid *h)
{
    if (!h)
        return;
    for (int k = 0; k < h->TL; k++) { /* either array may be missing (out of memory) */
        if (h->f_off)
            h_free(h, h->f_off[k]);
        if (h->f_ids)
            h_free(h, h->f_ids[k]);
    }
    rap_free(h->f_off);
    rap_free(h->f_ids);
    h_free(h, h->scratch);
    h_free(h, h->recv);
    h_free(h, h->send);
    h_free(h, h->d_block);
    for (int i = 0; i < 3; i++) {
        if (h->ev[i])
            rap_hybrid_event_free(h->ev[i]);
        for (int k = 0; k < 6; k++)
            if (h->tm[i][k])
                rap_hybrid_event_free(h->tm[i][k]);
    }
    if (h->c2 && rap_comm_broken(h->c)) /* its peers may be gone: abort, do not finalize */
        rap_comm_set_broken(h->c2);
    rap_comm_free(h->c2);
    if (h->e_grads)
        rap_hybrid_event_free(h->e_grads);
    if (h->e_ar)
        rap_hybrid_event_free(h->e_ar);
    rap_hybrid_stream_free(h->side);
    rap_free(h->cum);
    rap_free(h->h_part0);
    rap_free(h->h_table);
    rap_free(h->h_cum);
    rap_free(h->h_tl);
    rap_free(h->h_local);
    rap_free(h->fs_count);
    rap_free(h);
}

rap_status rap_hybrid_create(rap_model *m, const rap_shard_map *map, rap_comm *c,
                             rap_hybrid **out)
{
    *out = NULL;
    const rap_model_config *mc = rap_model_config_of(m);
    const rap_model_shard *sh = mc->shard;
    if (!sh)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: the model has no shard "
                                     "(rap_hybrid_model_config makes its config)");
    int R = rap_comm_size(c), r = rap_comm_rank(c);
    if (R != map->n_ranks)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: comm of %d ranks, shard map of %d", R,
                        map->n_ranks);
    if (mc->n_tables != map->n_tables || mc->emb_dim != map->emb_dim)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: model of %d tables (dim %d), map of %d "
                                     "(dim %d)",
                        mc->n_tables, mc->emb_dim, map->n_tables, map->emb_dim);
    const rap_model_shard *ms = &map->shard[r];
    bool same = sh->n_local == ms->n_local;
    for (int k = 0; same && k < sh->n_local; k++)
        same = sh->table[k] == ms->table[k] && sh->row0[k] == ms->row0[k] &&
               sh->rows[k] == ms->rows[k];
    if (!same)
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: rank %d's model holds other tables than "
                                     "the shard map gives rank %d",
                        r, r);
    rap_device dev = rap_model_device(m);
    if (dev == RAP_GPU && !rap_comm_on_device(c))
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: a GPU model needs a nccl comm, got %s",
                        rap_comm_kind_name(rap_comm_kind_of(c)));
    if (dev == RAP_CPU && rap_comm_on_device(c))
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: a CPU model needs a host comm, got nccl");
    if (dev == RAP_GPU && (!mc->stream || mc->stream != rap_comm_stream(c)))
        return rap_fail(RAP_ERR_ARG, "rap_hybrid_create: the GPU model's stream (config.stream, "
                                     "%p) must be the nccl comm's stream (%p)",
                        mc->stream, rap_comm_stream(c));

    rap_hybrid *h = rap_calloc(sizeof *h, "rap_hybrid");
    if (!h)
        return RAP_ERR_NOMEM;
    h->m = m;
    h->map = map;
    h->c = c;
    h->dev = dev;
    h->R = R;
    h->r = r;
    h->T = mc->n_tables;
    h->D = mc->emb_dim;
    h->TL = sh->n_local;
    h->P = map->n_parts;
    h->Bg = sh->emb_batch;
    h->loss_rows = sh->loss_rows;
    int64_t row0;
    rap_hybrid_rows(h->Bg, R, r, &row0, &h->nr_max);
    h->ids_cap = h->Bg * (mc->max_bag > 0 ? mc->max_bag : 1);
    rap_status st = rap_model_shard_buffers(m, &h->bufs);
    if (st != RAP_OK)
        goto fail;
    st = RAP_ERR_NOMEM;
    h->cum = rap_calloc(sizeof(int64_t) * (size_t)(R + 1), "hybrid cum");
    h->h_part0 = rap_malloc(sizeof(int) * (size_t)(h->T + 1), "hybrid parts");
    h->h_table = rap_malloc(sizeof(int) * (size_t)(h->P + 1), "hybrid parts");
    h->h_cum = rap_malloc(sizeof(int64_t) * (size_t)(h->P + 1), "hybrid parts");
    h->h_tl = rap_malloc(sizeof(int64_t) * (size_t)(h->P + 1), "hybrid parts");
    h->h_local = rap_malloc(sizeof(int64_t) * (size_t)(h->P + 1), "hybrid parts");
    h->fs_count = rap_calloc(sizeof(int64_t) * 4 * (size_t)R, "hybrid counts");
    h->f_off = rap_calloc(sizeof(int64_t *) * (size_t)(h->TL + 1), "hybrid filter");
    h->f_ids = rap_calloc(sizeof(int64_t *) * (size_t)(h->TL + 1), "hybrid filter");
    if (!h->cum || !h->h_part0 || !h->h_table || !h->h_cum || !h->h_tl || !h->h_local ||
        !h->fs_count || !h->f_off || !h->f_ids)
        goto fail;
    st = RAP_OK;
    h->fs_displ = h->fs_count + R;
    h->fr_count = h->fs_displ + R;
    h->fr_displ = h->fr_count + R;
    for (int s = 0; s < R; s++)
        h->cum[s + 1] = h->cum[s] + map->shard[s].n_local;
    h->tls = h->cum[R];
    memcpy(h->h_part0, map->part0, sizeof(int) * (size_t)(h->T + 1));
    for (int p = 0; p < h->P; p++) {
        const rap_shard_part *q = &map->part[p];
        h->h_table[p] = map->shard[q->rank].table[q->local];
        h->h_cum[p] = h->cum[q->rank];
        h->h_tl[p] = map->shard[q->rank].n_local;
        h->h_local[p] = q->local;
    }
    h->pa_host = (rap_hybrid_parts){h->h_part0, h->h_table, h->h_cum, h->h_tl, h->h_local};
    h->pa_dev = h->pa_host;
    if (dev == RAP_GPU) {
        /* One device block: the three int64 arrays, then the two int arrays. */
        size_t n64 = (size_t)h->P + 1;
        h->d_block = h_alloc(h, parts_bytes(h->P, h->T), "hybrid part arrays", &st);
        if (st != RAP_OK)
            goto fail;
        char *b = h->d_block;
        int64_t *dcum = (int64_t *)b, *dtl = dcum + n64, *dloc = dtl + n64;
        int *dpart0 = (int *)(dloc + n64), *dtab = dpart0 + h->T + 1;
        st = rap_cuda_upload(dcum, h->h_cum, n64 * sizeof(int64_t));
        if (st == RAP_OK)
            st = rap_cuda_upload(dtl, h->h_tl, n64 * sizeof(int64_t));
        if (st == RAP_OK)
            st = rap_cuda_upload(dloc, h->h_local, n64 * sizeof(int64_t));
        if (st == RAP_OK)
            st = rap_cuda_upload(dpart0, h->h_part0, (size_t)(h->T + 1) * sizeof(int));
        if (st == RAP_OK)
            st = rap_cuda_upload(dtab, h->h_table, (size_t)(h->P + 1) * sizeof(int));
        if (st != RAP_OK)
            goto fail;
        h->pa_dev = (rap_hybrid_parts){dpart0, dtab, dcum, dtl, dloc};
        h->scratch_bytes = rap_hybrid_filter_gpu_scratch(h->Bg);
        h->scratch = h_alloc(h, h->scratch_bytes, "hybrid filter scratch", &st);
        for (int i = 0; i < 3 && st == RAP_OK; i++) {
            st = rap_hybrid_event_create(&h->ev[i]);
            for (int k = 0; k < 6 && st == RAP_OK && R > 1; k++)
                st = rap_hybrid_timer_create(&h->tm[i][k]);
        }
        /* the dense all-reduce's stream and comm (a collective: every rank
         * creates its hybrid step at the same point) */
        int gpu_id = -1;
        if (st == RAP_OK && R > 1)
            st = rap_hybrid_stream_create(&h->side, &gpu_id);
        if (st == RAP_OK && R > 1)
            st = rap_comm_nccl_create(rap_comm_host(c), gpu_id, h->side, &h->c2);
        if (st == RAP_OK && R > 1)
            st = rap_hybrid_event_create(&h->e_grads);
        if (st == RAP_OK && R > 1)
            st = rap_hybrid_event_create(&h->e_ar);
        if (st != RAP_OK)
            goto fail;
    }
    for (int k = 0; k < h->TL; k++) { /* sizes as rap_hybrid_bytes */
        if (!filtered(sh, mc, k))
            continue;
        size_t ob, ib;
        filter_bytes(h->Bg, h->ids_cap, &ob, &ib);
        h->f_off[k] = h_alloc(h, ob, "hybrid filter offsets", &st);
        h->f_ids[k] = h_alloc(h, ib, "hybrid filter ids", &st);
    }
    size_t xbytes = exchange_bytes(map, r, h->Bg, h->D);
    h->recv = h_alloc(h, xbytes, "hybrid exchange (forward)", &st);
    h->send = h_alloc(h, xbytes, "hybrid exchange (reverse)", &st);
    if (st != RAP_OK)
        goto fail;
    *out = h;
    return RAP_OK;
fail:
    rap_hybrid_free(h);
    return st;
}

/* ------------------------------------------------------------ step */

/* b_glob of the local tables over n rows: whole tables point at the
 * global batch's arrays; row ranges are filtered. */
static rap_status build_glob(rap_hybrid *h, const rap_model_batch *glob)
{
    const rap_model_config *mc = rap_model_config_of(h->m);
    const rap_model_shard *sh = mc->shard;
    int64_t n = glob->rows;
    memset(&h->bg, 0, sizeof h->bg);
    h->bg.rows = n;
    for (int k = 0; k < h->TL; k++) {
        int t = sh->table[k];
        if (!glob->off[t] || !glob->ids[t])
            return rap_fail(RAP_ERR_ARG, "hybrid step: the global batch has no ids of table %d", t);
        if (!h->f_off[k]) {
            h->bg.off[k] = glob->off[t];
            h->bg.ids[k] = glob->ids[t];
            continue;
        }
        if (h->dev == RAP_GPU) {
            RAP_TRY(rap_hybrid_filter_gpu(glob->off[t], glob->ids[t], n, sh->row0[k], sh->rows[k],
                                          h->f_off[k], h->f_ids[k], h->ids_cap, h->scratch,
                                          h->scratch_bytes, mc->stream));
        } else {
            int64_t have = glob->off[t][n] - glob->off[t][0];
            if (have > h->ids_cap) {
                /* Count first: only the kept ids must fit. */
                int64_t kept = 0;
                for (int64_t j = glob->off[t][0]; j < glob->off[t][n]; j++)
                    kept += glob->ids[t][j] >= sh->row0[k] &&
                            glob->ids[t][j] < sh->row0[k] + sh->rows[k];
                if (kept > h->ids_cap)
                    return rap_fail(RAP_ERR_ARG,
                                    "hybrid step: table %d: %lld ids of rows [%lld, +%lld) in a "
                                    "batch of %lld rows, room for %lld (max_bag %lld)",
                                    t, (long long)kept, (long long)sh->row0[k],
                                    (long long)sh->rows[k], (long long)n, (long long)h->ids_cap,
                                    (long long)mc->max_bag);
            }
            rap_hybrid_filter_cpu(glob->off[t], glob->ids[t], n, sh->row0[k], sh->rows[k],
                                  h->f_off[k], h->f_ids[k]);
        }
        h->bg.off[k] = h->f_off[k];
        h->bg.ids[k] = h->f_ids[k];
    }
    return RAP_OK;
}

/* Forward counts for a global batch of n rows (the reverse swaps them). */
static void set_counts(rap_hybrid *h, int64_t n, int64_t nr)
{
    int64_t D = h->D, TL = h->TL;
    for (int p = 0; p < h->R; p++) {
        int64_t p0, np;
        rap_hybrid_rows(n, h->R, p, &p0, &np);
        h->fs_count[p] = np * TL * D;
        h->fs_displ[p] = p0 * TL * D;
        h->fr_count[p] = nr * (h->cum[p + 1] - h->cum[p]) * D;
        h->fr_displ[p] = nr * D * h->cum[p];
    }
}

void rap_hybrid_set_hooks(rap_hybrid *h, const rap_hybrid_hooks *hooks)
{
    h->has_hooks = hooks != NULL;
    if (hooks)
        h->hooks = *hooks;
}

static rap_status hook_begin(rap_hybrid *h, rap_hybrid_phase p)
{
    return h->has_hooks && h->hooks.begin ? h->hooks.begin(h->hooks.ctx, p) : RAP_OK;
}

static rap_status hook_end(rap_hybrid *h, rap_hybrid_phase p)
{
    return h->has_hooks && h->hooks.end ? h->hooks.end(h->hooks.ctx, p) : RAP_OK;
}

/* A communication mark k (0/1 all-to-all begin/end, 2/3 reverse
 * all-to-all, 4/5 dense all-reduce) of this step: a timing event on the
 * GPU (4/5 on the all-reduce's stream), the host clock on the CPU (summed
 * at once: the CPU collectives are synchronous). */
static rap_status comm_mark(rap_hybrid *h, int k, double *host)
{
    if (h->R == 1)
        return RAP_OK;
    if (h->dev == RAP_GPU)
        return rap_hybrid_event_record(h->tm[h->steps % 3][k],
                                       k >= 4 ? h->side : rap_model_config_of(h->m)->stream);
    if (k % 2 == 0) {
        *host = rap_now();
    } else {
        double ms = (rap_now() - *host) * 1e3;
        if (k == 1)
            h->comm.a2a_ms += ms;
        else
            h->comm.grad_ms += ms;
    }
    return RAP_OK;
}

/* GPU: sums the timing events of steps [timed, upto) (all done). */
static rap_status comm_collect(rap_hybrid *h, int64_t upto)
{
    for (; h->timed < upto; h->timed++) {
        if (h->dev != RAP_GPU || h->R == 1)
            continue;
        void **t = h->tm[h->timed % 3];
        double a = 0, g = 0, ar = 0;
        RAP_TRY(rap_hybrid_elapsed(t[0], t[1], &a));
        RAP_TRY(rap_hybrid_elapsed(t[2], t[3], &g));
        RAP_TRY(rap_hybrid_elapsed(t[4], t[5], &ar));
        h->comm.a2a_ms += a;
        h->comm.grad_ms += g + ar;
    }
    return RAP_OK;
}

void rap_hybrid_comm_get(const rap_hybrid *h, rap_hybrid_comm *out)
{
    *out = h->comm;
}

void rap_hybrid_comm_reset(rap_hybrid *h)
{
    memset(&h->comm, 0, sizeof h->comm);
}

rap_status rap_hybrid_step(rap_hybrid *h, const rap_model_batch *glob,
                           const rap_model_batch *loc)
{
    int64_t n = glob->rows, row0, nr;
    if (n < 1 || n > h->Bg)
        return rap_fail(RAP_ERR_ARG, "hybrid step: global batch of %lld rows, expected 1..%lld",
                        (long long)n, (long long)h->Bg);
    rap_hybrid_rows(n, h->R, h->r, &row0, &nr);
    if (loc->rows != nr)
        return rap_fail(RAP_ERR_ARG,
                        "hybrid step: rank %d trains rows [%lld, %lld) of %lld: %lld local rows, "
                        "got %lld",
                        h->r, (long long)row0, (long long)(row0 + nr), (long long)n, (long long)nr,
                        (long long)loc->rows);
    const rap_model_config *mc = rap_model_config_of(h->m);
    bool gpu = h->dev == RAP_GPU;
    double host = 0;
    /* A short global batch divides the loss by its own rows. */
    if (n != h->loss_rows) {
        RAP_TRY(rap_model_set_loss_rows(h->m, n));
        h->loss_rows = n;
    }
    RAP_TRY(hook_begin(h, RAP_HYB_EMB_FORWARD));
    RAP_TRY(build_glob(h, glob));
    RAP_TRY(rap_model_emb_forward(h->m, &h->bg));
    set_counts(h, n, nr);
    /* One rank: the exchanges are the identity (emb_out already has the
     * layout the scatter reads, demb_out the one the gather writes), the
     * all-reduce too: skip them rather than copy 2 x (B, T, D) floats. */
    const bool one = h->R == 1;
    const float *src = h->bufs.emb_out;
    if (!one) {
        RAP_TRY(comm_mark(h, 0, &host));
        RAP_TRY(rap_comm_alltoallv(h->c, h->bufs.emb_out, h->fs_count, h->fs_displ, h->recv,
                                   h->fr_count, h->fr_displ, "emb alltoall"));
        RAP_TRY(comm_mark(h, 1, &host));
        src = h->recv;
        for (int p = 0; p < h->R; p++) /* forward and reverse, floats */
            if (p != h->r)
                h->comm.bytes_sent += (int64_t)sizeof(float) * (h->fs_count[p] + h->fr_count[p]);
        h->comm.bytes_sent +=
            (int64_t)(2.0 * (h->R - 1) / h->R * sizeof(float) * (double)h->bufs.n_grads);
    }
    if (h->bufs.direct)
        ; /* one rank, every table whole: the lookups wrote emb in place */
    else if (nr > 0 && gpu)
        RAP_TRY(rap_hybrid_scatter_gpu(src, nr, h->T, h->D, &h->pa_dev, h->bufs.emb,
                                       h->bufs.emb_ld, mc->stream));
    else if (nr > 0)
        rap_hybrid_scatter_cpu(src, nr, h->T, h->D, &h->pa_host, h->bufs.emb, h->bufs.emb_ld);
    RAP_TRY(hook_end(h, RAP_HYB_EMB_FORWARD));
    RAP_TRY(hook_begin(h, RAP_HYB_MLP_FORWARD));
    if (nr > 0)
        RAP_TRY(rap_model_mlp_forward(h->m, loc));
    RAP_TRY(hook_end(h, RAP_HYB_MLP_FORWARD));
    RAP_TRY(hook_begin(h, RAP_HYB_MLP_BACKWARD));
    if (nr > 0) {
        RAP_TRY(rap_model_mlp_backward(h->m, loc));
        float *dst = one ? h->bufs.demb_out : h->send;
        if (h->bufs.direct)
            ; /* emb_backward reads demb in place */
        else if (gpu)
            RAP_TRY(rap_hybrid_gather_gpu(h->bufs.demb, h->bufs.demb_ld, nr, h->P, h->D,
                                          &h->pa_dev, dst, mc->stream));
        else
            rap_hybrid_gather_cpu(h->bufs.demb, h->bufs.demb_ld, nr, h->P, h->D, &h->pa_host,
                                  dst);
    } else if (gpu) {
        RAP_TRY(rap_hybrid_dev_zero(h->bufs.grads, sizeof(float) * h->bufs.n_grads, mc->stream));
    } else {
        memset(h->bufs.grads, 0, sizeof(float) * h->bufs.n_grads);
    }
    if (!one && gpu) /* the dense gradients are written: the all-reduce may start */
        RAP_TRY(rap_hybrid_event_record(h->e_grads, mc->stream));
    RAP_TRY(hook_end(h, RAP_HYB_MLP_BACKWARD));
    h->had_rows = nr > 0;
    /* The embedding gradients go back to their tables' ranks (model stream);
     * on the GPU the dense all-reduce starts beside it on its own stream and
     * comm and runs beside emb_backward, which does not need it; only
     * dense_apply waits for it. On host comms (synchronous) it runs after
     * emb_backward: the same sums. */
    RAP_TRY(hook_begin(h, RAP_HYB_GRAD_COMM));
    if (!one) {
        if (gpu) {
            RAP_TRY(rap_hybrid_stream_wait(h->side, h->e_grads));
            RAP_TRY(comm_mark(h, 4, &host));
            RAP_TRY(rap_comm_allreduce(h->c2, h->bufs.grads, (int64_t)h->bufs.n_grads,
                                       RAP_COMM_F32, "dense grads allreduce"));
            RAP_TRY(comm_mark(h, 5, &host));
            RAP_TRY(rap_hybrid_event_record(h->e_ar, h->side));
        }
        RAP_TRY(comm_mark(h, 2, &host));
        RAP_TRY(rap_comm_alltoallv(h->c, h->send, h->fr_count, h->fr_displ, h->bufs.demb_out,
                                   h->fs_count, h->fs_displ, "emb grad alltoall"));
        RAP_TRY(comm_mark(h, 3, &host));
    }
    RAP_TRY(hook_end(h, RAP_HYB_GRAD_COMM));
    RAP_TRY(hook_begin(h, RAP_HYB_EMB_BACKWARD));
    RAP_TRY(rap_model_emb_backward(h->m, &h->bg));
    if (!one && gpu) {
        RAP_TRY(rap_hybrid_stream_wait(mc->stream, h->e_ar));
    } else if (!one) {
        RAP_TRY(comm_mark(h, 4, &host));
        RAP_TRY(rap_comm_allreduce(h->c, h->bufs.grads, (int64_t)h->bufs.n_grads, RAP_COMM_F32,
                                   "dense grads allreduce"));
        RAP_TRY(comm_mark(h, 5, &host));
    }
    RAP_TRY(rap_model_dense_apply(h->m));
    RAP_TRY(hook_end(h, RAP_HYB_EMB_BACKWARD));
    h->comm.steps++;
    if (gpu) {
        /* At most two steps in flight: wait for the one before the previous
         * (waiting for the previous one left the GPU idle while the host
         * queued the next step). */
        RAP_TRY(rap_hybrid_event_record(h->ev[h->steps % 3], mc->stream));
        if (h->steps > 1) {
            RAP_TRY(rap_comm_wait(h->c, h->ev[(h->steps - 2) % 3], "step before the previous"));
            RAP_TRY(comm_collect(h, h->steps - 1));
        }
    }
    h->steps++;
    if (!gpu)
        h->timed = h->steps;
    return RAP_OK;
}

rap_status rap_hybrid_wait(rap_hybrid *h)
{
    if (h->dev != RAP_GPU)
        return RAP_OK;
    RAP_TRY(rap_comm_wait(h->c, NULL, "step"));
    return comm_collect(h, h->steps);
}

rap_status rap_hybrid_loss(rap_hybrid *h, double *loss)
{
    RAP_TRY(rap_hybrid_wait(h));
    double part = 0;
    if (h->had_rows)
        RAP_TRY(rap_model_last_loss(h->m, &part));
    RAP_TRY(rap_comm_allreduce_host(h->c, &part, 1, RAP_COMM_F64, "loss allreduce"));
    *loss = part;
    return RAP_OK;
}
