/*
 * ids.c -- the id exchange of --placement batch (ids.h): counts and
 * displacements from n, the CPU path (pack, all-to-all, assemble on the
 * host) and the GPU path's host side (launchers in ids_gpu.cu).
 */
#include "dist/ids.h"

#include "dist/hybrid.h"

#include <limits.h>
#include <string.h>

struct rap_ids_xchg {
    rap_comm *c;
    rap_device dev;
    int R, rank, T, K;
    int64_t Bg, sm;         /* largest global batch, largest share ceil(Bg / R) */
    int64_t W;              /* 1 + K words a row in a block */
    bool *holds;            /* (R*T) rank p holds table t */
    int *ntab_of;           /* (R) tables rank p holds */
    int ntab;               /* tables this rank holds */
    int *tab;               /* (ntab) this rank's tables, ascending */
    int U;                  /* tables some rank holds ("sent") */
    int *utab;              /* (U) sent tables, ascending */
    int *ub0;               /* (U+1) blocks of sent table u: ublk[ub0[u] .. ub0[u+1]) */
    int *ublk;              /* (NB) block index in the send buffer */
    int NB;                 /* blocks this rank sends: pairs (p, t held by p) */
    int *d_ub0, *d_ublk;    /* GPU: device copies of ub0, ublk */
    int64_t *cnt;           /* (4R) host: send counts, displs, receive counts, displs */
    int64_t *send;          /* (NB * sm * W) packed blocks, destination-major */
    int64_t *recv;          /* (ntab * Bg * W) every source's blocks, rank order */
    int64_t *off;           /* (ntab, Bg+1) the held tables' offsets over n rows */
    int64_t *ids;           /* (ntab, Bg*K) their ids */
    int64_t *cum;           /* GPU: (ntab*Bg) the lengths' scan */
    void *scratch;          /* GPU: CUB scan scratch */
    size_t scratch_bytes;
    int *flag;              /* GPU: (3) overflow flag (ids.h) */
    int64_t bytes_me, bytes_all;
    rap_ids_overflow over;  /* rows with more than K ids seen so far */
};


void rap_ids_xchg_free(rap_ids_xchg *x)
{
    if (!x)
        return;
    rap_free(x->holds);
    rap_free(x->ntab_of);
    rap_free(x->tab);
    rap_free(x->utab);
    rap_free(x->ub0);
    rap_free(x->ublk);
    rap_free(x->cnt);
    if (x->dev == RAP_GPU) {
        rap_cuda_free(x->d_ub0);
        rap_cuda_free(x->d_ublk);
        rap_cuda_free(x->cum);
        rap_cuda_free(x->scratch);
        rap_cuda_free(x->flag);
    }
    rap_dev_free(x->dev, x->send);
    rap_dev_free(x->dev, x->recv);
    rap_dev_free(x->dev, x->off);
    rap_dev_free(x->dev, x->ids);
    rap_free(x);
}

/* The block lists (ub0, ublk) and the held-table lists, on the host. */
static rap_status layout(rap_ids_xchg *x, const bool *holds)
{
    int R = x->R, T = x->T;
    x->holds = rap_malloc(sizeof(bool) * (size_t)R * (size_t)T, "id exchange (holds)");
    x->ntab_of = rap_calloc(sizeof(int) * (size_t)R, "id exchange");
    x->tab = rap_malloc(sizeof(int) * (size_t)T, "id exchange");
    x->utab = rap_malloc(sizeof(int) * (size_t)T, "id exchange");
    x->ub0 = rap_malloc(sizeof(int) * (size_t)(T + 1), "id exchange");
    x->ublk = rap_malloc(sizeof(int) * (size_t)R * (size_t)T + sizeof(int), "id exchange");
    x->cnt = rap_malloc(sizeof(int64_t) * 4 * (size_t)R, "id exchange (counts)");
    if (!x->holds || !x->ntab_of || !x->tab || !x->utab || !x->ub0 || !x->ublk || !x->cnt)
        return RAP_ERR_NOMEM;
    memcpy(x->holds, holds, sizeof(bool) * (size_t)R * (size_t)T);
    x->NB = 0;
    for (int p = 0; p < R; p++)
        for (int t = 0; t < T; t++)
            if (holds[p * T + t]) {
                x->ntab_of[p]++;
                x->NB++;
            }
    x->ntab = 0;
    x->U = 0;
    int k = 0;
    for (int t = 0; t < T; t++) {
        if (holds[x->rank * T + t])
            x->tab[x->ntab++] = t;
        bool sent = false;
        int b = 0; /* block index: destination-major, tables ascending */
        x->ub0[x->U] = k;
        for (int p = 0; p < R; p++)
            for (int q = 0; q < T; q++) {
                if (!holds[p * T + q])
                    continue;
                if (q == t) {
                    x->ublk[k++] = b;
                    sent = true;
                }
                b++;
            }
        if (sent)
            x->utab[x->U++] = t;
    }
    x->ub0[x->U] = k;
    return RAP_OK;
}

rap_status rap_ids_xchg_create(rap_comm *c, rap_device dev, int T, const bool *holds,
                               int64_t Bg, int K, rap_ids_xchg **out)
{
    *out = NULL;
    if (!c || !holds || T < 1 || T > RAP_MAX_TABLES || Bg < 1 || K < 1)
        return rap_fail(RAP_ERR_ARG, "rap_ids_xchg_create: T = %d (1..%d), Bg = %lld, K = %d "
                        "(>= 1 each), comm and holds given", T, RAP_MAX_TABLES, (long long)Bg, K);
    if (rap_comm_on_device(c) != (dev == RAP_GPU))
        return rap_fail(RAP_ERR_ARG, "rap_ids_xchg_create: a %s exchange needs a %s comm, got %s",
                        dev == RAP_GPU ? "GPU" : "CPU", dev == RAP_GPU ? "nccl" : "host",
                        rap_comm_kind_name(rap_comm_kind_of(c)));
    rap_ids_xchg *x = rap_calloc(sizeof *x, "id exchange");
    if (!x)
        return RAP_ERR_NOMEM;
    x->c = c;
    x->dev = dev;
    x->R = rap_comm_size(c);
    x->rank = rap_comm_rank(c);
    x->T = T;
    x->K = K;
    x->Bg = Bg;
    x->sm = (Bg + x->R - 1) / x->R;
    x->W = 1 + (int64_t)K;
    rap_status st = layout(x, holds);
    if (st == RAP_OK && (int64_t)x->ntab * Bg > INT_MAX)
        st = rap_fail(RAP_ERR_ARG, "id exchange: %d tables of %lld rows: more than %d lengths to "
                      "scan", x->ntab, (long long)Bg, INT_MAX);
    int64_t nt = x->ntab, w8 = sizeof(int64_t);
    if (st == RAP_OK)
        st = rap_dev_alloc(x->dev, (void **)&x->send, (size_t)(w8 * x->NB * x->sm * x->W),
                           "id exchange (send)");
    if (st == RAP_OK)
        st = rap_dev_alloc(x->dev, (void **)&x->recv, sizeof(int64_t) * (size_t)(nt * Bg * x->W),
                           "id exchange (receive)");
    if (st == RAP_OK)
        st = rap_dev_alloc(x->dev, (void **)&x->off, sizeof(int64_t) * (size_t)(nt * (Bg + 1)),
                           "id exchange (global offsets)");
    if (st == RAP_OK)
        st = rap_dev_alloc(x->dev, (void **)&x->ids, sizeof(int64_t) * (size_t)(nt * Bg * K),
                           "id exchange (global ids)");
    if (st == RAP_OK && dev == RAP_GPU) {
        size_t ib = sizeof(int);
        st = rap_cuda_malloc((void **)&x->d_ub0, ib * (size_t)(x->U + 1), "id exchange");
        if (st == RAP_OK)
            st = rap_cuda_malloc((void **)&x->d_ublk, ib * (size_t)(x->NB + 1), "id exchange");
        if (st == RAP_OK)
            st = rap_cuda_upload(x->d_ub0, x->ub0, ib * (size_t)(x->U + 1));
        if (st == RAP_OK && x->NB > 0)
            st = rap_cuda_upload(x->d_ublk, x->ublk, ib * (size_t)x->NB);
        if (st == RAP_OK)
            st = rap_cuda_malloc((void **)&x->cum, (size_t)(w8 * (nt * Bg > 0 ? nt * Bg : 1)),
                                 "id exchange (lengths)");
        x->scratch_bytes = rap_ids_scan_scratch(nt * Bg);
        if (st == RAP_OK)
            st = rap_cuda_malloc(&x->scratch, x->scratch_bytes, "id exchange (scan scratch)");
        if (st == RAP_OK)
            st = rap_cuda_malloc((void **)&x->flag, 3 * ib, "id exchange (flag)");
        if (st == RAP_OK)
            st = rap_ids_flag_reset(x->flag);
    }
    if (st != RAP_OK) {
        rap_ids_xchg_free(x);
        return st;
    }
    *out = x;
    return RAP_OK;
}

/* Adds one run's bytes (ids.h) to the counters. */
static void count_bytes(rap_ids_xchg *x, int64_t n)
{
    for (int s = 0; s < x->R; s++) {
        int64_t r0, ns;
        rap_hybrid_rows(n, x->R, s, &r0, &ns);
        for (int p = 0; p < x->R; p++) {
            if (p == s)
                continue;
            int64_t b = 8 * ns * x->W * x->ntab_of[p];
            x->bytes_all += b;
            if (s == x->rank)
                x->bytes_me += b;
        }
    }
}

rap_status rap_ids_xchg_run(rap_ids_xchg *x, const rap_model_batch *mine, int64_t n,
                            rap_model_batch *g)
{
    int R = x->R;
    int64_t W = x->W, r0, nr;
    if (n < 1 || n > x->Bg)
        return rap_fail(RAP_ERR_ARG, "id exchange: global batch of %lld rows, expected 1..%lld",
                        (long long)n, (long long)x->Bg);
    rap_hybrid_rows(n, R, x->rank, &r0, &nr);
    if (mine->rows != nr)
        return rap_fail(RAP_ERR_ARG, "id exchange: rank %d has %lld rows of a global batch of "
                        "%lld, its share is %lld", x->rank, (long long)mine->rows,
                        (long long)n, (long long)nr);
    for (int u = 0; nr > 0 && u < x->U; u++)
        if (!mine->off[x->utab[u]] || !mine->ids[x->utab[u]])
            return rap_fail(RAP_ERR_ARG, "id exchange: rank %d: no offsets or ids of table %d",
                            x->rank, x->utab[u]);
    /* pack */
    bool bad = false;
    int bad_t = 0;
    int64_t bad_len = 0, bad_row = -1;
    if (nr > 0 && x->dev == RAP_GPU) {
        rap_ids_chunk ch;
        for (int u0 = 0; u0 < x->U; u0 += RAP_IDS_CHUNK) {
            ch.u0 = u0;
            ch.n = x->U - u0 < RAP_IDS_CHUNK ? x->U - u0 : RAP_IDS_CHUNK;
            for (int j = 0; j < ch.n; j++) {
                int t = x->utab[u0 + j];
                ch.t[j] = t;
                ch.off[j] = mine->off[t];
                ch.ids[j] = mine->ids[t];
            }
            RAP_TRY(rap_ids_pack_gpu(&ch, x->d_ub0, x->d_ublk, nr, x->K, x->send, x->flag,
                                     rap_comm_stream(x->c)));
        }
    } else if (nr > 0) {
        for (int u = 0; u < x->U; u++) {
            int t = x->utab[u];
            int64_t row = -1;
            int64_t most = rap_ids_pack_cpu(mine->off[t], mine->ids[t], x->ublk + x->ub0[u],
                                            x->ub0[u + 1] - x->ub0[u], nr, x->K, x->send, &row);
            if (most > x->K && !bad) {
                bad = true;
                bad_t = t;
                bad_len = most;
                bad_row = r0 + row;
            }
        }
    }
    /* counts: to p its tables' blocks of nr rows; from s its blocks of ns rows */
    int64_t *sc = x->cnt, *sd = sc + R, *rc = sd + R, *rd = rc + R, at = 0;
    for (int p = 0; p < R; p++) {
        sd[p] = at;
        sc[p] = (int64_t)x->ntab_of[p] * nr * W;
        at += sc[p];
    }
    for (int s = 0; s < R; s++) {
        int64_t s0, ns;
        rap_hybrid_rows(n, R, s, &s0, &ns);
        rd[s] = s0 * W * x->ntab;
        rc[s] = ns * W * x->ntab;
    }
    RAP_TRY(rap_comm_alltoallv_type(x->c, x->send, sc, sd, x->recv, rc, rd, RAP_COMM_I64,
                                    "id exchange"));
    /* assemble */
    if (x->ntab > 0) {
        if (x->dev == RAP_GPU)
            RAP_TRY(rap_ids_assemble_gpu(x->recv, n, R, x->ntab, x->K, x->Bg, x->cum, x->scratch,
                                         x->scratch_bytes, x->off, x->ids,
                                         rap_comm_stream(x->c)));
        else
            rap_ids_assemble_cpu(x->recv, n, R, x->ntab, x->K, x->Bg, x->off, x->ids);
    }
    memset(g, 0, sizeof *g);
    g->rows = n;
    for (int k = 0; k < x->ntab; k++) {
        g->off[x->tab[k]] = x->off + (int64_t)k * (x->Bg + 1);
        g->ids[x->tab[k]] = x->ids + (int64_t)k * x->Bg * x->K;
    }
    count_bytes(x, n);
    if (bad) {
        rap_ids_overflow_note(&x->over, bad_t, bad_len);
        return rap_fail(RAP_ERR_DATA, "id exchange: rank %d, table %d: row %lld of the global "
                        "batch has %lld ids, more than K = %d (max_bag)", x->rank, bad_t,
                        (long long)bad_row, (long long)bad_len, x->K);
    }
    return RAP_OK;
}

void rap_ids_xchg_bytes(const rap_ids_xchg *x, int64_t *sent_by_me, int64_t *all_ranks)
{
    if (sent_by_me)
        *sent_by_me = x->bytes_me;
    if (all_ranks)
        *all_ranks = x->bytes_all;
}

void rap_ids_overflow_note(rap_ids_overflow *o, int t, int64_t len)
{
    if (!o->bad || t < o->t)
        o->t = t;
    if (len > o->len)
        o->len = len;
    o->bad = true;
}

rap_status rap_ids_overflow_read(rap_ids_overflow *o, const int *flag, void *stream)
{
    int f[3];
    RAP_TRY(rap_ids_flag_read(flag, f, stream));
    if (f[0])
        rap_ids_overflow_note(o, f[1], f[2]);
    return RAP_OK;
}

rap_status rap_ids_xchg_check(rap_ids_xchg *x)
{
    if (x->dev == RAP_GPU) {
        RAP_TRY(rap_comm_wait(x->c, NULL, "id exchange check"));
        RAP_TRY(rap_ids_overflow_read(&x->over, x->flag, rap_comm_stream(x->c)));
    }
    if (x->over.bad)
        return rap_fail(RAP_ERR_DATA, "id exchange: rank %d, table %d: a row had more than K = "
                        "%d ids (max_bag; the lowest such table; most ids in a row: %lld)",
                        x->rank, x->over.t, x->K, (long long)x->over.len);
    return RAP_OK;
}

/* ------------------------------------------------------------ CPU references */

int64_t rap_ids_pack_cpu(const int64_t *off, const int64_t *ids, const int *ublk, int nb,
                         int64_t nr, int K, int64_t *send, int64_t *bad_row)
{
    int64_t W = 1 + (int64_t)K, most = 0;
    *bad_row = -1;
    for (int b = 0; b < nb; b++) {
        int64_t *blk = send + (int64_t)ublk[b] * nr * W; /* (nr) lengths, (nr, K) ids */
        for (int64_t i = 0; i < nr; i++) {
            int64_t o = off[i], len = off[i + 1] - o, m = len < K ? len : K;
            if (len > most)
                most = len;
            if (len > K && *bad_row < 0)
                *bad_row = i;
            blk[i] = m;
            int64_t *row = blk + nr + i * K;
            for (int64_t j = 0; j < K; j++)
                row[j] = j < m ? ids[o + j] : 0;
        }
    }
    return most;
}

void rap_ids_assemble_cpu(const int64_t *recv, int64_t n, int R, int ntab, int K, int64_t Bg,
                          int64_t *off, int64_t *ids)
{
    int64_t W = 1 + (int64_t)K;
    for (int k = 0; k < ntab; k++) {
        int64_t *goff = off + k * (Bg + 1), *gids = ids + k * Bg * K; /* (n+1), (n*K) */
        int64_t row = 0;
        goff[0] = 0;
        for (int s = 0; s < R; s++) {
            int64_t s0, ns;
            rap_hybrid_rows(n, R, s, &s0, &ns);
            const int64_t *blk = recv + s0 * W * ntab + k * ns * W; /* (ns) lengths, (ns, K) */
            for (int64_t i = 0; i < ns; i++, row++) {
                int64_t len = blk[i];
                memcpy(gids + goff[row], blk + ns + i * K, sizeof(int64_t) * (size_t)len);
                goff[row + 1] = goff[row] + len;
            }
        }
    }
}
