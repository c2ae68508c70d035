/* ids_exact.c -- the id exchange of --placement batch on CPU ranks, with
 * exact counts (ids_exact.h). */
#include "dist/ids_exact.h"

#include "core/core.h"
#include "dist/hybrid.h"

#include <string.h>

struct rap_ids_exact {
    rap_comm *c;               /* host comm, not owned */
    int R, rank, T;
    int64_t Bg;
    int64_t K;                 /* ids per row at most (the model's max_bag) */
    bool *holds;               /* (R, T) rank p holds (a part of) table t */
    int tab[RAP_MAX_TABLES];   /* tables this rank holds, ascending */
    int ntab;
    int64_t *hdr;              /* (R+1, 1+T) each rank's share rows, then its ids per table;
                                * row R: this rank's before the allgather */
    int64_t *send, *recv;      /* the all-to-all's buffers */
    int64_t *cnt;              /* (4, R) send counts, displacements, receive counts, displs */
    int64_t *off, *ids;        /* (ntab, Bg+1) and (ntab, Bg*K): the global batch's ids of
                                * this rank's tables */
    int64_t bytes_all;         /* offsets and ids sent between ranks so far, all ranks */
    int64_t bytes_mine;        /* ... sent by this rank */
};

rap_status rap_ids_exact_create(rap_comm *c, int T, const bool *holds, int64_t Bg, int64_t K,
                                rap_ids_exact **out)
{
    *out = NULL;
    if (!c || T < 1 || T > RAP_MAX_TABLES || Bg < 1 || K < 1)
        return rap_fail(RAP_ERR_ARG, "id exchange: %d tables, global batch %lld, %lld ids a row",
                        T, (long long)Bg, (long long)K);
    rap_ids_exact *x = rap_calloc(sizeof *x, "id exchange");
    if (!x)
        return RAP_ERR_NOMEM;
    int R = rap_comm_size(c);
    x->c = c;
    x->R = R;
    x->rank = rap_comm_rank(c);
    x->T = T;
    x->Bg = Bg;
    x->K = K;
    int64_t sm = (Bg + R - 1) / R; /* the largest share */
    x->holds = rap_calloc(sizeof(bool) * (size_t)(R * T), "id exchange");
    if (!x->holds) {
        rap_ids_exact_free(x);
        return RAP_ERR_NOMEM;
    }
    memcpy(x->holds, holds, sizeof(bool) * (size_t)(R * T));
    int64_t pairs = 0; /* (rank, table held) */
    for (int tb = 0; tb < T; tb++) {
        for (int r = 0; r < R; r++)
            pairs += x->holds[r * T + tb];
        if (x->holds[x->rank * T + tb])
            x->tab[x->ntab++] = tb;
    }
    int64_t per = sm * (1 + K); /* a share's offsets and ids of one table */
    int nt = x->ntab > 0 ? x->ntab : 1;
    x->hdr = rap_malloc(sizeof(int64_t) * (size_t)((R + 1) * (1 + T)), "id exchange");
    x->cnt = rap_malloc(sizeof(int64_t) * (size_t)(4 * R), "id exchange");
    x->send = rap_malloc(sizeof(int64_t) * (size_t)(pairs * per + 1), "id exchange (send)");
    x->recv = rap_malloc(sizeof(int64_t) * (size_t)(R * nt * per), "id exchange (receive)");
    x->off = rap_malloc(sizeof(int64_t) * (size_t)(nt * (Bg + 1)), "global offsets");
    x->ids = rap_malloc(sizeof(int64_t) * (size_t)(nt * Bg * K), "global ids");
    if (!x->hdr || !x->cnt || !x->send || !x->recv || !x->off || !x->ids) {
        rap_ids_exact_free(x);
        return RAP_ERR_NOMEM;
    }
    *out = x;
    return RAP_OK;
}

void rap_ids_exact_free(rap_ids_exact *x)
{
    if (!x)
        return;
    rap_free(x->holds);
    rap_free(x->hdr);
    rap_free(x->cnt);
    rap_free(x->send);
    rap_free(x->recv);
    rap_free(x->off);
    rap_free(x->ids);
    rap_free(x);
}

/* Bytes a run moves between ranks (every rank computes the same from the
 * header): source s sends each other holder p of table t its share's
 * offsets and ids, 8 bytes each. */
static int64_t step_bytes(const rap_ids_exact *x, int64_t *sent_by_me)
{
    int R = x->R, T = x->T;
    int64_t all = 0;
    *sent_by_me = 0;
    for (int src = 0; src < R; src++) {
        const int64_t *h = x->hdr + src * (1 + T);
        for (int p = 0; p < R; p++)
            for (int tb = 0; p != src && tb < T; tb++)
                if (x->holds[p * T + tb]) {
                    all += 8 * (h[0] + h[1 + tb]);
                    if (src == x->rank)
                        *sent_by_me += 8 * (h[0] + h[1 + tb]);
                }
    }
    return all;
}

/* Round 1: every rank's header; checks every share against the global
 * batch. *n gets the global batch's rows. */
static rap_status exchange_headers(rap_ids_exact *x, const rap_model_batch *mb, int64_t *n)
{
    int R = x->R, T = x->T;
    int64_t nr = mb->rows, *mine = x->hdr + R * (1 + T);
    mine[0] = nr;
    for (int tb = 0; tb < T; tb++)
        mine[1 + tb] = mb->off[tb][nr] - mb->off[tb][0];
    RAP_TRY(rap_comm_allgather(x->c, mine, sizeof(int64_t) * (size_t)(1 + T), x->hdr,
                               "id exchange counts"));
    *n = 0;
    for (int s = 0; s < R; s++)
        *n += x->hdr[s * (1 + T)];
    for (int s = 0; s < R; s++) {
        int64_t r0, cnt;
        rap_hybrid_rows(*n, R, s, &r0, &cnt);
        if (*n > x->Bg || x->hdr[s * (1 + T)] != cnt)
            return rap_fail(RAP_ERR_INTERNAL, "id exchange: rank %d preprocessed %lld rows of a "
                            "global batch of %lld, its share is %lld", s,
                            (long long)x->hdr[s * (1 + T)], (long long)*n, (long long)cnt);
        for (int tb = 0; tb < T; tb++)
            if (x->hdr[s * (1 + T) + 1 + tb] > cnt * x->K)
                return rap_fail(RAP_ERR_DATA, "id exchange: rank %d has %lld ids of table %d "
                                "in %lld rows (at most %lld a row)", s,
                                (long long)x->hdr[s * (1 + T) + 1 + tb], tb, (long long)cnt,
                                (long long)x->K);
    }
    return RAP_OK;
}

/* Assembles g from the received blocks: shares in rank order are the
 * global rows in order. */
static void assemble(rap_ids_exact *x, int64_t n, const int64_t *rd, rap_model_batch *g)
{
    int R = x->R, T = x->T;
    memset(g, 0, sizeof *g);
    g->rows = n;
    int64_t Bg = x->Bg;
    for (int k = 0; k < x->ntab; k++) {
        int64_t *goff = x->off + k * (Bg + 1), *gids = x->ids + k * Bg * x->K;
        int64_t row = 0, base = 0;
        goff[0] = 0;
        for (int s = 0; s < R; s++) {
            const int64_t *h = x->hdr + s * (1 + T), *blk = x->recv + rd[s];
            for (int q = 0; q < k; q++) /* the earlier tables of the block */
                blk += h[0] + h[1 + x->tab[q]];
            int64_t ns = h[1 + x->tab[k]];
            for (int64_t i = 0; i < h[0]; i++)
                goff[row + i + 1] = base + blk[i];
            memcpy(gids + base, blk + h[0], sizeof(int64_t) * (size_t)ns);
            row += h[0];
            base += ns;
        }
        g->off[x->tab[k]] = goff;
        g->ids[x->tab[k]] = gids;
    }
}

rap_status rap_ids_exact_run(rap_ids_exact *x, const rap_model_batch *mb, rap_model_batch *g)
{
    int R = x->R, T = x->T;
    int64_t n = 0, nr = mb->rows, *mine = x->hdr + R * (1 + T);
    RAP_TRY(exchange_headers(x, mb, &n));
    int64_t *sc = x->cnt, *sd = sc + R, *rc = sd + R, *rd = rc + R, at = 0;
    for (int p = 0; p < R; p++) { /* to p: its tables' offsets (rebased) and ids */
        sd[p] = at;
        for (int tb = 0; tb < T; tb++) {
            if (!x->holds[p * T + tb])
                continue;
            const int64_t *off = mb->off[tb];
            for (int64_t i = 0; i < nr; i++)
                x->send[at++] = off[i + 1] - off[0];
            memcpy(x->send + at, mb->ids[tb] + off[0], sizeof(int64_t) * (size_t)mine[1 + tb]);
            at += mine[1 + tb];
        }
        sc[p] = at - sd[p];
    }
    at = 0;
    for (int s = 0; s < R; s++) {
        const int64_t *h = x->hdr + s * (1 + T);
        rd[s] = at;
        for (int k = 0; k < x->ntab; k++)
            at += h[0] + h[1 + x->tab[k]];
        rc[s] = at - rd[s];
    }
    RAP_TRY(rap_comm_alltoallv_type(x->c, x->send, sc, sd, x->recv, rc, rd, RAP_COMM_I64,
                                    "id exchange"));
    assemble(x, n, rd, g);
    int64_t sent = 0;
    x->bytes_all += step_bytes(x, &sent);
    x->bytes_mine += sent;
    return RAP_OK;
}

void rap_ids_exact_bytes(const rap_ids_exact *x, int64_t *sent_by_me, int64_t *all_ranks)
{
    *sent_by_me = x ? x->bytes_mine : 0;
    *all_ranks = x ? x->bytes_all : 0;
}
