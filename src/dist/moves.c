/*
 * moves.c -- the placement planner's moves (moves.h): the lists' checks and
 * canonical order, block offsets from n, the CPU path (pack, all-to-alls,
 * scatter, assemble on the host) and the GPU path's host side (launchers
 * in moves_gpu.cu).
 */
#include "dist/moves.h"

#include "dist/hybrid.h"
#include "dist/ids.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sorted unit list: host arrays, and on GPU their device copies. */
typedef struct {
    int n;                 /* units */
    rap_move *m;           /* (n) sorted by (peer, kind, col, share) */
    int *u;                /* (n, 4) col, w, share, slot (rap_moves_units) */
    int64_t *cw;           /* (n+1) */
    int64_t *pe;           /* (n+1, K) */
    int *peer0;            /* (R+1) units of peer p: [peer0[p], peer0[p+1]) */
    int *du;               /* GPU: device copies */
    int64_t *dcw, *dpe;
    rap_moves_units h, d;  /* views: host, device */
} ulist;

struct rap_moves {
    rap_comm *c;
    rap_device dev;
    bool staged;            /* GPU over a host comm: host all-to-alls through pinned buffers */
    void *stream;           /* GPU: rap_comm_stream(c) (NULL, the legacy stream, for a host comm) */
    int R, rank, K, T, ND, L;
    int64_t Bg, sm, W;      /* largest batch, largest share ceil(Bg / K), 1 + L words a row */
    ulist sd, ss, rd, rs;   /* send dense, send sparse, recv dense, recv sparse */
    int U;                  /* tables of the sparse send units ("slots") */
    int *utab;              /* (U) ascending */
    int na;                 /* held tables not all local (assembled) */
    int *atab;              /* (na) ascending */
    int *src;               /* (na, K) -1: share local, else its unit in rs */
    int *d_src;             /* GPU copy */
    bool *holds;            /* (T) */
    bool *need;             /* (T) tables whose mb off/ids a run reads: sent or local shares */
    int64_t *cnt;           /* (8R) F32 then I64: send counts, displs, recv counts, displs */
    float *sendf, *recvf;   /* (sm * cw_total) on the device of the moves */
    int64_t *sendi, *recvi;
    float *h_sendf, *h_recvf;   /* staged: pinned host copies */
    int64_t *h_sendi, *h_recvi;
    bool pin[4];
    int64_t *aoff;          /* (na, Bg+1) assembled offsets */
    int64_t *aids;          /* (na, Bg*L) assembled ids */
    int64_t *cum;           /* GPU: (na*Bg) lengths and their scan */
    void *scratch;          /* GPU: CUB scratch */
    size_t scratch_bytes;
    int *flag;              /* GPU: (3) overflow flag */
    int64_t bytes_me;
    rap_ids_overflow over;  /* rows with more than L ids (CPU, or read from the flag) */
};

/* ------------------------------------------------------------ buffers */


static void ulist_free(const rap_moves *x, ulist *l)
{
    rap_free(l->m);
    rap_free(l->u);
    rap_free(l->cw);
    rap_free(l->pe);
    rap_free(l->peer0);
    if (x->dev == RAP_GPU) {
        rap_cuda_free(l->du);
        rap_cuda_free(l->dcw);
        rap_cuda_free(l->dpe);
    }
}

void rap_moves_free(rap_moves *x)
{
    if (!x)
        return;
    ulist_free(x, &x->sd);
    ulist_free(x, &x->ss);
    ulist_free(x, &x->rd);
    ulist_free(x, &x->rs);
    rap_free(x->utab);
    rap_free(x->atab);
    rap_free(x->src);
    rap_free(x->holds);
    rap_free(x->need);
    rap_free(x->cnt);
    rap_dev_free(x->dev, x->sendf);
    rap_dev_free(x->dev, x->recvf);
    rap_dev_free(x->dev, x->sendi);
    rap_dev_free(x->dev, x->recvi);
    rap_dev_free(x->dev, x->aoff);
    rap_dev_free(x->dev, x->aids);
    if (x->dev == RAP_GPU) {
        rap_cuda_free(x->d_src);
        rap_cuda_free(x->cum);
        rap_cuda_free(x->scratch);
        rap_cuda_free(x->flag);
    }
    rap_host_free(x->h_sendf, x->pin[0]);
    rap_host_free(x->h_recvf, x->pin[1]);
    rap_host_free(x->h_sendi, x->pin[2]);
    rap_host_free(x->h_recvi, x->pin[3]);
    rap_free(x);
}

/* ------------------------------------------------------------ checks, order */

/* "dense unit (columns 2..4, share 1) to rank 2" */
static const char *unit_name(char *b, size_t nb, const rap_move *m, bool send)
{
    if (m->kind == RAP_MOVE_DENSE)
        snprintf(b, nb, "dense unit (columns %d..%d, share %d) %s rank %d", m->col,
                 m->col + m->width - 1, m->share, send ? "to" : "from", m->peer);
    else
        snprintf(b, nb, "sparse unit (table %d, share %d) %s rank %d", m->col, m->share,
                 send ? "to" : "from", m->peer);
    return b;
}

/* One unit alone: kind, peer, share, columns or table. */
static rap_status check_unit(const rap_moves *x, const rap_move *m, int i, bool send)
{
    const char *list = send ? "send" : "recv";
    char nm[128];
    if (m->kind != RAP_MOVE_DENSE && m->kind != RAP_MOVE_SPARSE)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d: kind %d (dense 0 or sparse 1)",
                        x->rank, list, i, (int)m->kind);
    unit_name(nm, sizeof nm, m, send);
    if (m->peer < 0 || m->peer >= x->R)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d, %s: peer %d is not a rank "
                        "(0..%d)", x->rank, list, i, nm, m->peer, x->R - 1);
    if (m->peer == x->rank)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d, %s: peer is this rank (a "
                        "unit moves between two ranks)", x->rank, list, i, nm);
    if (m->share < 0 || m->share >= x->K)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d, %s: share %d outside 0..%d",
                        x->rank, list, i, nm, m->share, x->K - 1);
    if (m->kind == RAP_MOVE_DENSE &&
        (m->width < 1 || m->col < 0 || m->col > x->ND - m->width))
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d, %s: columns [%d, %d + %d) "
                        "not inside the %d dense columns (width >= 1)", x->rank, list, i, nm,
                        m->col, m->col, m->width, x->ND);
    if (m->kind == RAP_MOVE_SPARSE && (m->col < 0 || m->col >= x->T || m->width != 0))
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: %s unit %d, %s: table %d outside 0..%d "
                        "or width %d (sparse: 0)", x->rank, list, i, nm, m->col, x->T - 1,
                        m->width);
    return RAP_OK;
}

/* The canonical order: peer, then dense before sparse, then col, share. */
static int move_cmp(const void *a, const void *b)
{
    const rap_move *p = a, *q = b;
    if (p->peer != q->peer)
        return p->peer < q->peer ? -1 : 1;
    if (p->kind != q->kind)
        return p->kind < q->kind ? -1 : 1;
    if (p->col != q->col)
        return p->col < q->col ? -1 : 1;
    if (p->share != q->share)
        return p->share < q->share ? -1 : 1;
    return (p->width > q->width) - (p->width < q->width);
}

/* The units of `kind` of list (n), sorted, with their offset tables. */
static rap_status ulist_make(rap_moves *x, ulist *l, const rap_move *list, int n,
                             rap_move_kind kind)
{
    int K = x->K;
    l->n = 0;
    for (int i = 0; i < n; i++)
        l->n += list[i].kind == kind;
    l->m = rap_malloc(sizeof(rap_move) * (size_t)(l->n + 1), "moves (units)");
    l->u = rap_malloc(sizeof(int) * 4 * (size_t)(l->n + 1), "moves (units)");
    l->cw = rap_malloc(sizeof(int64_t) * (size_t)(l->n + 1), "moves (offsets)");
    l->pe = rap_malloc(sizeof(int64_t) * (size_t)(l->n + 1) * (size_t)K, "moves (offsets)");
    l->peer0 = rap_malloc(sizeof(int) * (size_t)(x->R + 1), "moves (peers)");
    if (!l->m || !l->u || !l->cw || !l->pe || !l->peer0)
        return RAP_ERR_NOMEM;
    int j = 0;
    for (int i = 0; i < n; i++)
        if (list[i].kind == kind)
            l->m[j++] = list[i];
    qsort(l->m, (size_t)l->n, sizeof(rap_move), move_cmp);
    l->cw[0] = 0;
    for (int e = 0; e < K; e++)
        l->pe[e] = 0;
    int p = 0;
    for (j = 0; j < l->n; j++) {
        const rap_move *m = &l->m[j];
        int w = kind == RAP_MOVE_DENSE ? m->width : (int)x->W;
        while (p <= m->peer)
            l->peer0[p++] = j;
        l->u[4 * j] = m->col;
        l->u[4 * j + 1] = w;
        l->u[4 * j + 2] = m->share;
        l->u[4 * j + 3] = 0;
        l->cw[j + 1] = l->cw[j] + w;
        for (int e = 0; e < K; e++)
            l->pe[(int64_t)(j + 1) * K + e] = l->pe[(int64_t)j * K + e] + (m->share < e ? w : 0);
    }
    while (p <= x->R)
        l->peer0[p++] = l->n;
    l->h = (rap_moves_units){.n = l->n, .K = K, .u = l->u, .cw = l->cw, .pe = l->pe};
    return RAP_OK;
}

/* First element of unit j's block (j == n: the total) for n rows. */
static int64_t uoff(const ulist *l, int K, int j, int64_t n)
{
    return (n / K) * l->cw[j] + l->pe[(int64_t)j * K + (int)(n % K)];
}

/* The lists against each other and against local/holds. */
static rap_status check_lists(rap_moves *x, const rap_moves_config *cfg)
{
    int K = x->K, T = x->T, ND = x->ND;
    char nm[128];
    uint64_t all = K == 64 ? ~0ULL : (1ULL << K) - 1;
    /* duplicates: adjacent after the sort (same peer, kind, col, share) */
    const ulist *sl[2] = {&x->sd, &x->ss};
    for (int q = 0; q < 2; q++)
        for (int j = 1; j < sl[q]->n; j++) {
            const rap_move *a = &sl[q]->m[j - 1], *b = &sl[q]->m[j];
            if (a->peer == b->peer && a->col == b->col && a->share == b->share)
                return rap_fail(RAP_ERR_ARG, "moves: rank %d: send list has the %s twice",
                                x->rank, unit_name(nm, sizeof nm, b, true));
        }
    /* dense columns of a share received at most once */
    unsigned char *got = rap_calloc((size_t)K * (size_t)(ND > 0 ? ND : 1), "moves (check)");
    if (!got)
        return RAP_ERR_NOMEM;
    for (int j = 0; j < x->rd.n; j++) {
        const rap_move *m = &x->rd.m[j];
        for (int c = m->col; c < m->col + m->width; c++) {
            if (got[(size_t)m->share * (size_t)ND + (size_t)c]) {
                rap_free(got);
                return rap_fail(RAP_ERR_ARG, "moves: rank %d: recv list: %s: column %d of share "
                                "%d is received twice (duplicate or overlapping units)", x->rank,
                                unit_name(nm, sizeof nm, m, false), c, m->share);
            }
            got[(size_t)m->share * (size_t)ND + (size_t)c] = 1;
        }
    }
    rap_free(got);
    /* sparse: local bits, each held share local or received exactly once */
    for (int t = 0; t < T; t++) {
        uint64_t loc = cfg->local[t];
        if (loc & ~all)
            return rap_fail(RAP_ERR_ARG, "moves: rank %d: table %d: local bits 0x%llx name a "
                            "share >= K = %d", x->rank, t, (unsigned long long)loc, K);
        if (loc && !cfg->holds[t])
            return rap_fail(RAP_ERR_ARG, "moves: rank %d: table %d: local shares 0x%llx of a "
                            "table this rank does not hold (local is for held tables)", x->rank,
                            t, (unsigned long long)loc);
    }
    uint64_t *rcv = rap_calloc(sizeof(uint64_t) * (size_t)T, "moves (check)");
    if (!rcv)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    for (int j = 0; st == RAP_OK && j < x->rs.n; j++) {
        const rap_move *m = &x->rs.m[j];
        int t = m->col;
        uint64_t bit = 1ULL << m->share;
        if (!cfg->holds[t])
            st = rap_fail(RAP_ERR_ARG, "moves: rank %d: recv list: %s: table %d is not held "
                          "here", x->rank, unit_name(nm, sizeof nm, m, false), t);
        else if (cfg->local[t] & bit)
            st = rap_fail(RAP_ERR_ARG, "moves: rank %d: recv list: %s: share %d of table %d is "
                          "also local", x->rank, unit_name(nm, sizeof nm, m, false), m->share, t);
        else if (rcv[t] & bit)
            st = rap_fail(RAP_ERR_ARG, "moves: rank %d: recv list: %s: share %d of table %d is "
                          "received twice", x->rank, unit_name(nm, sizeof nm, m, false),
                          m->share, t);
        rcv[t] |= bit;
    }
    for (int t = 0; st == RAP_OK && t < T; t++) {
        if (!cfg->holds[t] || (cfg->local[t] | rcv[t]) == all)
            continue;
        uint64_t miss = all & ~(cfg->local[t] | rcv[t]);
        int k = 0;
        while (!(miss & (1ULL << k)))
            k++;
        st = rap_fail(RAP_ERR_ARG, "moves: rank %d: held table %d: share %d is neither local "
                      "nor received", x->rank, t, k);
    }
    rap_free(rcv);
    return st;
}

/* Tables of the sparse send units (slots), the assembled tables and src. */
static rap_status tables(rap_moves *x, const rap_moves_config *cfg)
{
    int T = x->T, K = x->K;
    uint64_t all = K == 64 ? ~0ULL : (1ULL << K) - 1;
    x->utab = rap_malloc(sizeof(int) * (size_t)T, "moves (tables)");
    x->atab = rap_malloc(sizeof(int) * (size_t)T, "moves (tables)");
    int *slot = rap_malloc(sizeof(int) * (size_t)T, "moves (tables)");
    x->holds = rap_malloc(sizeof(bool) * (size_t)T, "moves (tables)");
    x->need = rap_malloc(sizeof(bool) * (size_t)T, "moves (tables)");
    if (!x->utab || !x->atab || !slot || !x->holds || !x->need) {
        rap_free(slot);
        return RAP_ERR_NOMEM;
    }
    memcpy(x->holds, cfg->holds, sizeof(bool) * (size_t)T);
    for (int t = 0; t < T; t++)
        slot[t] = -1;
    for (int j = 0; j < x->ss.n; j++)
        slot[x->ss.m[j].col] = 0;
    x->U = 0;
    x->na = 0;
    for (int t = 0; t < T; t++) {
        if (slot[t] == 0) {
            slot[t] = x->U;
            x->utab[x->U++] = t;
        }
        if (cfg->holds[t] && cfg->local[t] != all)
            x->atab[x->na++] = t;
        x->need[t] = slot[t] >= 0 || (cfg->holds[t] && cfg->local[t] != 0);
    }
    for (int j = 0; j < x->ss.n; j++)
        x->ss.u[4 * j + 3] = slot[x->ss.m[j].col];
    rap_free(slot);
    x->src = rap_malloc(sizeof(int) * (size_t)(x->na > 0 ? x->na : 1) * (size_t)K, "moves (src)");
    if (!x->src)
        return RAP_ERR_NOMEM;
    for (int a = 0; a < x->na; a++)
        for (int k = 0; k < K; k++)
            x->src[a * K + k] = -1;
    for (int j = 0; j < x->rs.n; j++) {
        const rap_move *m = &x->rs.m[j];
        int a = 0;
        while (x->atab[a] != m->col)
            a++; /* found: a received share makes its (held) table assembled */
        x->src[a * K + m->share] = j;
    }
    return RAP_OK;
}

/* Device copies of a list's tables. */
static rap_status ulist_upload(ulist *l)
{
    int K = l->h.K;
    size_t nu = sizeof(int) * 4 * (size_t)(l->n + 1), nc = sizeof(int64_t) * (size_t)(l->n + 1);
    size_t np = nc * (size_t)K;
    RAP_TRY(rap_cuda_malloc((void **)&l->du, nu, "moves (unit table)"));
    RAP_TRY(rap_cuda_malloc((void **)&l->dcw, nc, "moves (unit table)"));
    RAP_TRY(rap_cuda_malloc((void **)&l->dpe, np, "moves (unit table)"));
    if (l->n > 0)
        RAP_TRY(rap_cuda_upload(l->du, l->u, sizeof(int) * 4 * (size_t)l->n));
    RAP_TRY(rap_cuda_upload(l->dcw, l->cw, nc));
    RAP_TRY(rap_cuda_upload(l->dpe, l->pe, np));
    l->d = (rap_moves_units){.n = l->n, .K = K, .u = l->du, .cw = l->dcw, .pe = l->dpe};
    return RAP_OK;
}

static rap_status alloc_all(rap_moves *x)
{
    int64_t sm = x->sm, na = x->na, Bg = x->Bg;
    int64_t nsf = sm * x->sd.cw[x->sd.n], nrf = sm * x->rd.cw[x->rd.n];
    int64_t nsi = sm * x->ss.cw[x->ss.n], nri = sm * x->rs.cw[x->rs.n];
    x->cnt = rap_malloc(sizeof(int64_t) * 8 * (size_t)x->R, "moves (counts)");
    if (!x->cnt)
        return RAP_ERR_NOMEM;
    rap_device d = x->dev;
    RAP_TRY(rap_dev_alloc(d, (void **)&x->sendf, (size_t)(4 * nsf), "moves (dense send)"));
    RAP_TRY(rap_dev_alloc(d, (void **)&x->recvf, (size_t)(4 * nrf), "moves (dense receive)"));
    RAP_TRY(rap_dev_alloc(d, (void **)&x->sendi, (size_t)(8 * nsi), "moves (sparse send)"));
    RAP_TRY(rap_dev_alloc(d, (void **)&x->recvi, (size_t)(8 * nri), "moves (sparse receive)"));
    RAP_TRY(rap_dev_alloc(d, (void **)&x->aoff, (size_t)(8 * na * (Bg + 1)),
                          "moves (assembled offsets)"));
    RAP_TRY(rap_dev_alloc(d, (void **)&x->aids, (size_t)(8 * na * Bg * x->L),
                          "moves (assembled ids)"));
    if (x->dev != RAP_GPU)
        return RAP_OK;
    for (int i = 0; i < 4; i++) {
        ulist *l = i == 0 ? &x->sd : i == 1 ? &x->ss : i == 2 ? &x->rd : &x->rs;
        RAP_TRY(ulist_upload(l));
    }
    size_t nsrc = sizeof(int) * (size_t)(na > 0 ? na : 1) * (size_t)x->K;
    RAP_TRY(rap_cuda_malloc((void **)&x->d_src, nsrc, "moves (src)"));
    RAP_TRY(rap_cuda_upload(x->d_src, x->src, nsrc));
    RAP_TRY(rap_cuda_malloc((void **)&x->cum, (size_t)(8 * na * Bg > 8 ? 8 * na * Bg : 8),
                            "moves (lengths)"));
    x->scratch_bytes = rap_ids_scan_scratch(na * Bg);
    RAP_TRY(rap_cuda_malloc(&x->scratch, x->scratch_bytes, "moves (scan scratch)"));
    RAP_TRY(rap_cuda_malloc((void **)&x->flag, 3 * sizeof(int), "moves (flag)"));
    RAP_TRY(rap_ids_flag_reset(x->flag));
    if (x->staged) {
        size_t b[4] = {(size_t)(4 * nsf + 8), (size_t)(4 * nrf + 8), (size_t)(8 * nsi + 8),
                       (size_t)(8 * nri + 8)};
        void **p[4] = {(void **)&x->h_sendf, (void **)&x->h_recvf, (void **)&x->h_sendi,
                       (void **)&x->h_recvi};
        for (int i = 0; i < 4; i++) {
            *p[i] = rap_host_alloc(b[i], true, &x->pin[i], "moves (staging)");
            if (!*p[i])
                return RAP_ERR_NOMEM;
        }
    }
    return RAP_OK;
}

rap_status rap_moves_create(rap_comm *c, rap_device dev, const rap_moves_config *cfg,
                            rap_moves **out)
{
    *out = NULL;
    if (!c || !cfg)
        return rap_fail(RAP_ERR_ARG, "rap_moves_create: no comm or config");
    if (cfg->K < 1 || cfg->K > RAP_MOVES_MAX_K || cfg->T < 1 || cfg->T > RAP_MAX_TABLES ||
        cfg->ND < 0 || cfg->Bg < 1 || cfg->L < 1 || cfg->n_send < 0 || cfg->n_recv < 0 ||
        (cfg->n_send > 0 && !cfg->send) || (cfg->n_recv > 0 && !cfg->recv) || !cfg->local ||
        !cfg->holds)
        return rap_fail(RAP_ERR_ARG, "rap_moves_create: K = %d (1..%d), T = %d (1..%d), ND = "
                        "%d (>= 0), Bg = %lld (>= 1), L = %d (>= 1), %d send and %d recv units "
                        "(lists given), local and holds given", cfg->K, RAP_MOVES_MAX_K, cfg->T,
                        RAP_MAX_TABLES, cfg->ND, (long long)cfg->Bg, cfg->L, cfg->n_send,
                        cfg->n_recv);
    if (dev == RAP_CPU && rap_comm_on_device(c))
        return rap_fail(RAP_ERR_ARG, "rap_moves_create: CPU moves need a host comm, got %s",
                        rap_comm_kind_name(rap_comm_kind_of(c)));
    rap_moves *x = rap_calloc(sizeof *x, "moves");
    if (!x)
        return RAP_ERR_NOMEM;
    x->c = c;
    x->dev = dev;
    x->staged = dev == RAP_GPU && !rap_comm_on_device(c);
    x->stream = dev == RAP_GPU ? rap_comm_stream(c) : NULL;
    x->R = rap_comm_size(c);
    x->rank = rap_comm_rank(c);
    x->K = cfg->K;
    x->T = cfg->T;
    x->ND = cfg->ND;
    x->L = cfg->L;
    x->Bg = cfg->Bg;
    x->sm = (cfg->Bg + cfg->K - 1) / cfg->K;
    x->W = 1 + (int64_t)cfg->L;
    rap_status st = RAP_OK;
    for (int i = 0; st == RAP_OK && i < cfg->n_send; i++)
        st = check_unit(x, &cfg->send[i], i, true);
    for (int i = 0; st == RAP_OK && i < cfg->n_recv; i++)
        st = check_unit(x, &cfg->recv[i], i, false);
    if (st == RAP_OK)
        st = ulist_make(x, &x->sd, cfg->send, cfg->n_send, RAP_MOVE_DENSE);
    if (st == RAP_OK)
        st = ulist_make(x, &x->ss, cfg->send, cfg->n_send, RAP_MOVE_SPARSE);
    if (st == RAP_OK)
        st = ulist_make(x, &x->rd, cfg->recv, cfg->n_recv, RAP_MOVE_DENSE);
    if (st == RAP_OK)
        st = ulist_make(x, &x->rs, cfg->recv, cfg->n_recv, RAP_MOVE_SPARSE);
    if (st == RAP_OK)
        st = check_lists(x, cfg);
    if (st == RAP_OK)
        st = tables(x, cfg);
    if (st == RAP_OK && (int64_t)x->na * x->Bg > INT_MAX)
        st = rap_fail(RAP_ERR_ARG, "moves: %d assembled tables of %lld rows: more than %d "
                      "lengths to scan", x->na, (long long)x->Bg, INT_MAX);
    if (st == RAP_OK)
        st = alloc_all(x);
    if (st != RAP_OK) {
        rap_moves_free(x);
        return st;
    }
    *out = x;
    return RAP_OK;
}

/* ------------------------------------------------------------ CPU path */

/* The first row with too many ids: lowest table, most ids. */
typedef struct {
    bool on;
    int t;
    int64_t row, len;
} overflow;

static void note_bad(overflow *b, int t, int64_t row, int64_t len)
{
    if (!b->on || t < b->t) {
        b->t = t;
        b->row = row;
    }
    if (!b->on || len > b->len)
        b->len = len;
    b->on = true;
}

static void pack_dense_cpu(const rap_moves *x, int64_t n, const float *dense)
{
    const ulist *l = &x->sd;
    for (int j = 0; j < l->n; j++) {
        int col = l->u[4 * j], w = l->u[4 * j + 1], k = l->u[4 * j + 2];
        int64_t r0, nr;
        rap_hybrid_rows(n, x->K, k, &r0, &nr);
        float *blk = x->sendf + uoff(l, x->K, j, n); /* (nr, w) */
        for (int64_t i = 0; i < nr; i++)
            memcpy(blk + i * w, dense + (r0 + i) * x->ND + col, sizeof(float) * (size_t)w);
    }
}

static void scatter_dense_cpu(const rap_moves *x, int64_t n, float *dense)
{
    const ulist *l = &x->rd;
    for (int j = 0; j < l->n; j++) {
        int col = l->u[4 * j], w = l->u[4 * j + 1], k = l->u[4 * j + 2];
        int64_t r0, nr;
        rap_hybrid_rows(n, x->K, k, &r0, &nr);
        const float *blk = x->recvf + uoff(l, x->K, j, n); /* (nr, w) */
        for (int64_t i = 0; i < nr; i++)
            memcpy(dense + (r0 + i) * x->ND + col, blk + i * w, sizeof(float) * (size_t)w);
    }
}

static void pack_sparse_cpu(const rap_moves *x, int64_t n, const rap_model_batch *mb,
                            overflow *bad)
{
    const ulist *l = &x->ss;
    int L = x->L;
    for (int j = 0; j < l->n; j++) {
        int t = l->u[4 * j], k = l->u[4 * j + 2];
        int64_t r0, nr;
        rap_hybrid_rows(n, x->K, k, &r0, &nr);
        const int64_t *off = mb->off[t], *ids = mb->ids[t];
        int64_t *blk = x->sendi + uoff(l, x->K, j, n); /* (nr) lengths, (nr, L) ids */
        for (int64_t i = 0; i < nr; i++) {
            int64_t o = off[r0 + i], len = off[r0 + i + 1] - o, m = len < L ? len : L;
            if (len > L)
                note_bad(bad, t, r0 + i, len);
            blk[i] = m;
            int64_t *row = blk + nr + i * L;
            for (int64_t s = 0; s < L; s++)
                row[s] = s < m ? ids[o + s] : 0;
        }
    }
}

static void assemble_cpu(const rap_moves *x, int64_t n, const rap_model_batch *mb, overflow *bad)
{
    int K = x->K, L = x->L;
    for (int a = 0; a < x->na; a++) {
        int t = x->atab[a];
        int64_t *goff = x->aoff + a * (x->Bg + 1), *gids = x->aids + a * x->Bg * L;
        goff[0] = 0;
        for (int k = 0; k < K; k++) {
            int64_t r0, nr;
            rap_hybrid_rows(n, K, k, &r0, &nr);
            int j = x->src[a * K + k];
            const int64_t *blk = j >= 0 ? x->recvi + uoff(&x->rs, K, j, n) : NULL;
            for (int64_t i = 0; i < nr; i++) {
                int64_t g = r0 + i, len;
                const int64_t *from;
                if (j < 0) {
                    int64_t o = mb->off[t][g];
                    len = mb->off[t][g + 1] - o;
                    if (len > L) {
                        note_bad(bad, t, g, len);
                        len = L;
                    }
                    from = mb->ids[t] + o;
                } else {
                    len = blk[i];
                    from = blk + nr + i * L;
                }
                memcpy(gids + goff[g], from, sizeof(int64_t) * (size_t)len);
                goff[g + 1] = goff[g] + len;
            }
        }
    }
}

/* ------------------------------------------------------------ GPU path */

/* Chunk of tables tab[s0 .. s0+RAP_MOVES_CHUNK) (of nt) with mb's pointers. */
static void fill_chunk(const int *tab, int nt, int s0, const rap_model_batch *mb,
                       rap_moves_chunk *ch)
{
    ch->s0 = s0;
    ch->n = nt - s0 < RAP_MOVES_CHUNK ? nt - s0 : RAP_MOVES_CHUNK;
    for (int i = 0; i < ch->n; i++) {
        int t = tab[s0 + i];
        ch->t[i] = t;
        ch->off[i] = mb->off[t];
        ch->ids[i] = mb->ids[t];
    }
}

static rap_status pack_gpu(rap_moves *x, int64_t n, const rap_model_batch *mb)
{
    if (x->sd.n > 0)
        RAP_TRY(rap_moves_pack_dense_gpu(&x->sd.d, n, uoff(&x->sd, x->K, x->sd.n, n), mb->dense,
                                         x->ND, x->sendf, x->stream));
    rap_moves_chunk ch;
    for (int s0 = 0; s0 < x->U; s0 += RAP_MOVES_CHUNK) {
        fill_chunk(x->utab, x->U, s0, mb, &ch);
        RAP_TRY(rap_moves_pack_sparse_gpu(&x->ss.d, &ch, n, uoff(&x->ss, x->K, x->ss.n, n), x->L,
                                          x->sendi, x->flag, x->stream));
    }
    return RAP_OK;
}

static rap_status assemble_gpu(rap_moves *x, int64_t n, const rap_model_batch *mb)
{
    rap_moves_chunk ch;
    for (int pass = 0; pass < 2; pass++) {
        for (int a0 = 0; a0 < x->na; a0 += RAP_MOVES_CHUNK) {
            fill_chunk(x->atab, x->na, a0, mb, &ch);
            if (pass == 0)
                RAP_TRY(rap_moves_lens_gpu(&ch, x->d_src, &x->rs.d, x->recvi, n, x->L, x->cum,
                                           x->flag, x->stream));
            else
                RAP_TRY(rap_moves_compact_gpu(&ch, x->d_src, &x->rs.d, x->recvi, n, x->L, x->Bg,
                                              x->cum, x->aoff, x->aids, x->stream));
        }
        if (pass == 0)
            RAP_TRY(rap_moves_scan_gpu(x->cum, (int64_t)x->na * n, x->scratch, x->scratch_bytes,
                                       x->stream));
    }
    return RAP_OK;
}

/* ------------------------------------------------------------ run */

/* Counts and displacements of a send list l and a recv list r for n rows:
 * c (4R): send counts, displs, recv counts, displs. */
static void counts(const rap_moves *x, const ulist *l, const ulist *r, int64_t n, int64_t *c)
{
    int R = x->R, K = x->K;
    for (int p = 0; p < R; p++) {
        c[R + p] = uoff(l, K, l->peer0[p], n);
        c[p] = uoff(l, K, l->peer0[p + 1], n) - c[R + p];
        c[3 * R + p] = uoff(r, K, r->peer0[p], n);
        c[2 * R + p] = uoff(r, K, r->peer0[p + 1], n) - c[3 * R + p];
    }
}

/* The two all-to-alls in one comm group (staged through host buffers for
 * GPU moves over a host comm). */
static rap_status transport(rap_moves *x, int64_t n)
{
    int R = x->R, K = x->K;
    int64_t *cf = x->cnt, *ci = x->cnt + 4 * R;
    counts(x, &x->sd, &x->rd, n, cf);
    counts(x, &x->ss, &x->rs, n, ci);
    const float *sf = x->sendf;
    float *rf = x->recvf;
    const int64_t *si = x->sendi;
    int64_t *ri = x->recvi;
    int64_t nsf = uoff(&x->sd, K, x->sd.n, n), nsi = uoff(&x->ss, K, x->ss.n, n);
    int64_t nrf = uoff(&x->rd, K, x->rd.n, n), nri = uoff(&x->rs, K, x->rs.n, n);
    if (x->staged) {
        if (nsf > 0)
            RAP_TRY(rap_moves_copy(x->h_sendf, x->sendf, 4 * (size_t)nsf, true, x->stream));
        if (nsi > 0)
            RAP_TRY(rap_moves_copy(x->h_sendi, x->sendi, 8 * (size_t)nsi, true, x->stream));
        RAP_TRY(rap_moves_sync(x->stream));
        sf = x->h_sendf;
        rf = x->h_recvf;
        si = x->h_sendi;
        ri = x->h_recvi;
    }
    RAP_TRY(rap_comm_group_begin(x->c));
    rap_status st = rap_comm_alltoallv(x->c, sf, cf, cf + R, rf, cf + 2 * R, cf + 3 * R,
                                       "moves dense");
    if (st == RAP_OK)
        st = rap_comm_alltoallv_type(x->c, si, ci, ci + R, ri, ci + 2 * R, ci + 3 * R,
                                     RAP_COMM_I64, "moves sparse");
    rap_status ge = rap_comm_group_end(x->c, "moves");
    if (st == RAP_OK)
        st = ge;
    if (st == RAP_OK && x->staged && nrf > 0)
        st = rap_moves_copy(x->recvf, x->h_recvf, 4 * (size_t)nrf, false, x->stream);
    if (st == RAP_OK && x->staged && nri > 0)
        st = rap_moves_copy(x->recvi, x->h_recvi, 8 * (size_t)nri, false, x->stream);
    return st;
}

/* The pointers a run reads, checked before any collective. */
static rap_status check_run(const rap_moves *x, const rap_model_batch *mb, const float *dense,
                            int64_t n)
{
    if (n < 1 || n > x->Bg)
        return rap_fail(RAP_ERR_ARG, "moves: global batch of %lld rows, expected 1..%lld",
                        (long long)n, (long long)x->Bg);
    if (!mb || mb->rows != n)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: the packed batch has %lld rows, the "
                        "global batch %lld", x->rank, mb ? (long long)mb->rows : -1LL,
                        (long long)n);
    if (x->sd.n > 0 && !mb->dense)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: dense units to send and no dense",
                        x->rank);
    if (x->rd.n > 0 && !dense)
        return rap_fail(RAP_ERR_ARG, "moves: rank %d: dense units to receive and no dense",
                        x->rank);
    for (int t = 0; t < x->T; t++)
        if (x->need[t] && (!mb->off[t] || !mb->ids[t]))
            return rap_fail(RAP_ERR_ARG, "moves: rank %d: no offsets or ids of table %d (rows of "
                            "it are sent from or local to this rank)", x->rank, t);
    return RAP_OK;
}

rap_status rap_moves_run(rap_moves *x, const rap_model_batch *mb, float *dense, int64_t n,
                         rap_model_batch *g)
{
    RAP_TRY(check_run(x, mb, dense, n));
    overflow bad = {0};
    if (x->dev == RAP_GPU) {
        RAP_TRY(pack_gpu(x, n, mb));
    } else {
        if (x->sd.n > 0)
            pack_dense_cpu(x, n, mb->dense);
        pack_sparse_cpu(x, n, mb, &bad);
    }
    RAP_TRY(transport(x, n));
    if (x->dev == RAP_GPU) {
        if (x->rd.n > 0)
            RAP_TRY(rap_moves_scatter_dense_gpu(&x->rd.d, n, uoff(&x->rd, x->K, x->rd.n, n),
                                                x->recvf, dense, x->ND, x->stream));
        if (x->na > 0)
            RAP_TRY(assemble_gpu(x, n, mb));
    } else {
        if (x->rd.n > 0)
            scatter_dense_cpu(x, n, dense);
        assemble_cpu(x, n, mb, &bad);
    }
    memset(g, 0, sizeof *g);
    g->rows = n;
    g->dense = dense;
    g->label = mb->label;
    for (int t = 0; t < x->T; t++)
        if (x->holds[t]) {
            g->off[t] = mb->off[t];
            g->ids[t] = mb->ids[t];
        }
    for (int a = 0; a < x->na; a++) {
        g->off[x->atab[a]] = x->aoff + (int64_t)a * (x->Bg + 1);
        g->ids[x->atab[a]] = x->aids + (int64_t)a * x->Bg * x->L;
    }
    x->bytes_me += 4 * uoff(&x->sd, x->K, x->sd.n, n) + 8 * uoff(&x->ss, x->K, x->ss.n, n);
    if (bad.on) {
        rap_ids_overflow_note(&x->over, bad.t, bad.len);
        return rap_fail(RAP_ERR_DATA, "moves: rank %d, table %d: row %lld of the global batch "
                        "has %lld ids, more than L = %d (max_bag)", x->rank, bad.t,
                        (long long)bad.row, (long long)bad.len, x->L);
    }
    return RAP_OK;
}

void rap_moves_bytes(const rap_moves *x, int64_t *sent_by_me)
{
    if (sent_by_me)
        *sent_by_me = x->bytes_me;
}

rap_status rap_moves_check(rap_moves *x)
{
    if (x->dev == RAP_GPU) {
        RAP_TRY(rap_comm_wait(x->c, NULL, "moves check"));
        RAP_TRY(rap_ids_overflow_read(&x->over, x->flag, x->stream));
    }
    if (x->over.bad)
        return rap_fail(RAP_ERR_DATA, "moves: rank %d, table %d: a row had more than L = %d ids "
                        "(max_bag; the lowest such table; most ids in a row: %lld)", x->rank,
                        x->over.t, x->L, (long long)x->over.len);
    return RAP_OK;
}
