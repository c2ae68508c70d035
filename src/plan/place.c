/*
 * place.c -- preprocessing placement over R ranks (place.h).
 */
#include "plan/place.h"

#include "core/json.h"
#include "core/out.h"
#include "prep/subplan.h"
#include "sched/fusion_file.h"

#include <errno.h>
#include <math.h>
#include <string.h>

rap_link rap_link_defaults(void)
{
    rap_link l = {300.0, 10.0};
    return l;
}

rap_status rap_place_capacity_fraction(const rap_plan *p, const rap_predictor *pred, int64_t batch,
                                       double fraction, const rap_model_shape *shape,
                                       const char *gpu, rap_capacity *cap)
{
    if (!(fraction >= 0) || !isfinite(fraction))
        return rap_fail(RAP_ERR_ARG, "placement: capacity fraction %g (expected >= 0)", fraction);
    rap_fusion f = {0};
    RAP_TRY(rap_fuse_levels(p, &f));
    double total = rap_fusion_predicted_ms(p, &f, pred, batch);
    rap_fusion_free(&f);
    rap_capacity_assumed(shape, gpu, cap);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        cap->capacity_ms[w] = fraction * total;
    return RAP_OK;
}

int64_t rap_place_row_bytes(const rap_plan *p, int col)
{
    const rap_node *n = &p->nodes[p->cols[col].node];
    if (n->kind == RAP_DENSE)
        return 4;
    if (n->kind == RAP_VECTOR)
        return 4 * (int64_t)n->width;
    int64_t w = n->ids_per_row > 0 ? n->ids_per_row : 1;
    return 8 * w + (n->len1 && !n->nullable ? 0 : 8);
}

rap_status rap_place_owners_tablewise(const rap_plan *p, int ranks, int *owner, int max_tables,
                                      int *n_tables)
{
    if (ranks < 1 || ranks > RAP_PLACE_MAX_RANKS)
        return rap_fail(RAP_ERR_ARG, "placement: %d ranks (expected 1..%d)", ranks,
                        RAP_PLACE_MAX_RANKS);
    enum { MAXT = 1024 };
    int64_t rows[RAP_PLACE_MAX_RANKS] = {0};
    double looks[RAP_PLACE_MAX_RANKS] = {0};
    int64_t trows[MAXT];
    double tlook[MAXT];
    bool done[MAXT] = {false};
    int T = 0;
    for (int c = 0; c < p->n_cols; c++) {
        const rap_node *n = &p->nodes[p->cols[c].node];
        if (n->kind != RAP_SPARSE)
            continue;
        if (T >= max_tables || T >= MAXT)
            return rap_fail(RAP_ERR_ARG, "placement: more than %d sparse columns",
                            max_tables < MAXT ? max_tables : MAXT);
        tlook[T] = n->ids_per_row > 0 ? (double)n->ids_per_row : 1;
        trows[T++] = n->bounded ? n->hi + 1 : 1;
    }
    for (int i = 0; i < T; i++) {
        /* largest table left (ties: more lookups, then lower index) */
        int best = -1;
        for (int t = 0; t < T; t++)
            if (!done[t] && (best < 0 || trows[t] > trows[best] ||
                             (trows[t] == trows[best] && tlook[t] > tlook[best])))
                best = t;
        /* onto the rank with the fewest rows (ties: fewest lookups, lowest rank) */
        int r = 0;
        for (int q = 1; q < ranks; q++)
            if (rows[q] < rows[r] || (rows[q] == rows[r] && looks[q] < looks[r]))
                r = q;
        owner[best] = r;
        rows[r] += trows[best];
        looks[r] += tlook[best];
        done[best] = true;
    }
    *n_tables = T;
    return RAP_OK;
}

/* ------------------------------------------------------------ shapes */

typedef struct {
    const rap_plan *p;
    const rap_place_config *c;
    int R, G, K, C;
    int64_t Bg;
    int *table;       /* (C) table index of a sparse column, -1 otherwise */
    bool *work;       /* (C) the column has ops (a raw column needs none) */
    int64_t *bpr;     /* (C) bytes per row */
    uint64_t *cons;   /* (C) consumers of any share of a sparse column (holders) */
} shape;

static int64_t share_r0(const shape *s, int k)
{
    return (int64_t)((__int128)s->Bg * k / s->K);
}

static int64_t share_rows(const shape *s, int k)
{
    return share_r0(s, k + 1) - share_r0(s, k);
}

static int home(const shape *s, int k)
{
    return k / s->G;
}

/* Consumers of unit (c, k) as a rank mask. */
static uint64_t consumers(const shape *s, int c, int k)
{
    return s->table[c] >= 0 ? s->cons[c] : (uint64_t)1 << home(s, k);
}

static size_t idx(const shape *s, int c, int k, int d)
{
    return ((size_t)c * (size_t)s->K + (size_t)k) * (size_t)s->R + (size_t)d;
}

static void shape_free(shape *s)
{
    rap_free(s->table);
    rap_free(s->work);
    rap_free(s->bpr);
    rap_free(s->cons);
    memset(s, 0, sizeof *s);
}

static rap_status shape_init(const rap_plan *p, const rap_place_config *c, shape *s)
{
    memset(s, 0, sizeof *s);
    if (c->ranks < 1 || c->ranks > RAP_PLACE_MAX_RANKS)
        return rap_fail(RAP_ERR_ARG, "placement: %d ranks (expected 1..%d)", c->ranks,
                        RAP_PLACE_MAX_RANKS);
    int G = c->shares < 1 ? 1 : c->shares;
    if (c->ranks * G > 64)
        return rap_fail(RAP_ERR_ARG, "placement: %d ranks x %d row shares > 64", c->ranks, G);
    if (c->batch < G)
        return rap_fail(RAP_ERR_ARG, "placement: batch %lld per rank < %d row shares",
                        (long long)c->batch, G);
    if (!c->cap || !c->owner)
        return rap_fail(RAP_ERR_ARG, "placement: expected capacities and table owners");
    s->p = p;
    s->c = c;
    s->R = c->ranks;
    s->G = G;
    s->K = c->ranks * G;
    s->C = p->n_cols;
    s->Bg = c->batch * c->ranks;
    size_t nc = (size_t)s->C + 1;
    s->table = rap_malloc(sizeof(int) * nc, "placement");
    s->work = rap_malloc(sizeof(bool) * nc, "placement");
    s->bpr = rap_malloc(sizeof(int64_t) * nc, "placement");
    s->cons = rap_malloc(sizeof(uint64_t) * nc, "placement");
    if (!s->table || !s->work || !s->bpr || !s->cons) {
        shape_free(s);
        return RAP_ERR_NOMEM;
    }
    int t = 0;
    for (int col = 0; col < s->C; col++) {
        const rap_node *n = &p->nodes[p->cols[col].node];
        s->work[col] = n->op != RAP_OP_INPUT;
        s->bpr[col] = rap_place_row_bytes(p, col);
        s->table[col] = -1;
        s->cons[col] = 0;
        if (n->kind != RAP_SPARSE)
            continue;
        int o = c->owner[t];
        uint64_t h = c->holders ? c->holders[t] : 0;
        if (o < 0 || o >= s->R) {
            shape_free(s);
            return rap_fail(RAP_ERR_ARG, "placement: table %d (column %s) owned by rank %d of %d",
                            t, p->cols[col].name, o, s->R);
        }
        if (s->R < 64 && (h >> s->R)) {
            shape_free(s);
            return rap_fail(RAP_ERR_ARG, "placement: table %d held by a rank >= %d", t, s->R);
        }
        s->table[col] = t++;
        s->cons[col] = h | (uint64_t)1 << o;
    }
    return RAP_OK;
}

/* ------------------------------------------------------ rank planning */

static void part_free(rap_place_part *pt)
{
    rap_free(pt->cols);
    rap_subplan_free(pt->sub);
    rap_fusion_free(&pt->fusion);
    rap_schedule_free(pt->sched);
    memset(pt, 0, sizeof *pt);
}

static void rank_free(rap_place_rank *rk)
{
    for (int i = 0; i < rk->n_parts; i++)
        part_free(&rk->parts[i]);
    rap_free(rk->parts);
    memset(rk, 0, sizeof *rk);
}

/* Share mask of column c computed on rank r, and whether some of it goes
 * to another rank. */
static uint64_t mask_on(const shape *s, const int *src, int c, int r, bool *sends)
{
    uint64_t m = 0;
    bool snd = false;
    for (int k = 0; k < s->K; k++) {
        uint64_t cs = consumers(s, c, k);
        for (int d = 0; d < s->R; d++)
            if ((cs >> d & 1) && src[idx(s, c, k, d)] == r) {
                m |= (uint64_t)1 << k;
                snd |= d != r;
            }
    }
    if (sends)
        *sends = snd;
    return m;
}

/* Bytes rank r sends and receives under src. */
static void rank_bytes(const shape *s, const int *src, int r, int64_t *sent, int64_t *recv)
{
    int64_t out = 0, in = 0;
    for (int c = 0; c < s->C; c++) {
        if (!s->work[c])
            continue;
        for (int k = 0; k < s->K; k++) {
            uint64_t cs = consumers(s, c, k);
            for (int d = 0; d < s->R; d++) {
                if (!(cs >> d & 1))
                    continue;
                int q = src[idx(s, c, k, d)];
                if (q == d || (q != r && d != r))
                    continue;
                int64_t b = share_rows(s, k) * s->bpr[c];
                if (q == r)
                    out += b;
                else
                    in += b;
            }
        }
    }
    *sent = out;
    *recv = in;
}

/* Rank r's part of the all-to-all: max(sent, received) / bandwidth +
 * latency (0 when it moves nothing). */
static double rank_comm_ms(const rap_link *l, int64_t sent, int64_t recv)
{
    if (sent == 0 && recv == 0)
        return 0;
    int64_t b = sent > recv ? sent : recv;
    return (double)b / (l->gbytes_per_s * 1e9) * 1e3 + l->latency_us * 1e-3;
}

/* Plans rank r for assignment src: its parts, each fused and searched on
 * what the windows have left; col_win (C) gets the window in which each
 * column computed here is complete (the latest over its parts; -1: not
 * here). */
static rap_status plan_rank(const shape *s, const int *src, int r, rap_place_rank *rk, int *col_win)
{
    memset(rk, 0, sizeof *rk);
    const rap_plan *p = s->p;
    const rap_place_config *c = s->c;
    uint64_t *mask = rap_malloc(sizeof(uint64_t) * (size_t)(s->C + 1), "placement");
    bool *snd = rap_malloc(sizeof(bool) * (size_t)(s->C + 1), "placement");
    int *win = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "placement");
    rk->parts = rap_calloc(sizeof *rk->parts * (size_t)(s->C + 1), "placement");
    rap_status st = mask && snd && win && rk->parts ? RAP_OK : RAP_ERR_NOMEM;
    for (int col = 0; col < s->C && st == RAP_OK; col++) {
        col_win[col] = -1;
        mask[col] = s->work[col] ? mask_on(s, src, col, r, &snd[col]) : 0;
    }
    /* parts: equal masks; the part of the first column of a mask first */
    for (int col = 0; col < s->C && st == RAP_OK; col++) {
        if (!mask[col])
            continue;
        int q = 0;
        while (q < rk->n_parts && rk->parts[q].shares != mask[col])
            q++;
        rap_place_part *pt = &rk->parts[q];
        if (q == rk->n_parts) {
            rk->n_parts++;
            pt->shares = mask[col];
            pt->cols = rap_malloc(sizeof(int) * (size_t)(s->C + 1), "placement");
            if (!pt->cols) {
                st = RAP_ERR_NOMEM;
                break;
            }
            for (int k = 0; k < s->K; k++)
                if (mask[col] >> k & 1)
                    pt->rows += share_rows(s, k);
        }
        pt->cols[pt->n_cols++] = col;
        pt->sends |= snd[col];
    }
    /* planning order: parts that send first (their units must be ready for
     * the all-to-all), then more rows first, then by first column */
    for (int a = 1; a < rk->n_parts; a++) {
        rap_place_part x = rk->parts[a];
        int b = a;
        while (b > 0) {
            const rap_place_part *y = &rk->parts[b - 1];
            bool before = x.sends != y->sends ? x.sends
                        : x.rows != y->rows  ? x.rows > y->rows
                                             : x.cols[0] < y->cols[0];
            if (!before)
                break;
            rk->parts[b] = *y;
            b--;
        }
        rk->parts[b] = x;
    }
    rap_capacity left = c->cap[r];
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        rk->capacity_ms[w] = w < RAP_CAP_WINDOWS ? c->cap[r].capacity_ms[w] : 0;
    /* the all-to-all runs on the training stream before the step that
     * consumes its units (src/run/pipeline_dist.c, dist/moves.h): exposed, nothing
     * of grad_comm reserved for it */
    rank_bytes(s, src, r, &rk->bytes_sent, &rk->bytes_recv);
    rk->comm_ms = rank_comm_ms(&c->link, rk->bytes_sent, rk->bytes_recv);
    rk->comm_reserved_ms = 0;
    for (int q = 0; q < rk->n_parts && st == RAP_OK; q++) {
        rap_place_part *pt = &rk->parts[q];
        st = rap_subplan_make(p, pt->cols, pt->n_cols, &pt->sub);
        if (st == RAP_OK)
            st = c->fuse ? c->fuse(pt->sub, &pt->fusion, c->fuse_ctx)
                         : rap_fuse_levels(pt->sub, &pt->fusion);
        char source[64];
        snprintf(source, sizeof source, "<placement rank %d part %d>", r, q);
        rap_search_config sc = {c->pred, &left, pt->rows, 1, false, RAP_CHOICE_EARLIEST}; /* first fit: parts share the windows */
        if (st == RAP_OK)
            st = rap_schedule_search(pt->sub, &pt->fusion, &sc, source, &pt->sched, &pt->sr);
        if (st != RAP_OK)
            break;
        for (int w = 0; w < RAP_CAP_WINDOWS; w++) {
            left.capacity_ms[w] -= pt->sr.load_ms[w];
            if (left.capacity_ms[w] < 0)
                left.capacity_ms[w] = 0;
        }
        for (int w = 0; w < RAP_WIN_COUNT; w++)
            rk->load_ms[w] += pt->sr.load_ms[w];
        rk->prep_exposed_ms += pt->sr.total_exposed_ms;
        /* where each node of this part is complete */
        for (int i = 0; i < p->n_nodes; i++)
            win[i] = -1;
        const rap_schedule *sc2 = pt->sched;
        for (int w = 0; w < RAP_WIN_COUNT; w++)
            for (int x = sc2->win_first[w]; x < sc2->win_first[w + 1]; x++) {
                const rap_slice *sl = &sc2->slices[x];
                for (int j = sl->d0; j < sl->d1; j++) {
                    int nd = pt->fusion.kernels[sl->kernel].nodes[j];
                    if (w > win[nd])
                        win[nd] = w;
                }
            }
        for (int i = 0; i < pt->n_cols; i++) {
            int col = pt->cols[i];
            int w = win[p->cols[col].node];
            if (w > col_win[col])
                col_win[col] = w;
        }
    }
    rap_free(mask);
    rap_free(snd);
    rap_free(win);
    if (st != RAP_OK)
        rank_free(rk);
    return st;
}

/* Costs of the whole assignment from the planned ranks: readiness,
 * exposure per rank, max and sum, bytes. col_win: (R, C). A rank's
 * all-to-all is exposed (it runs on the training stream before the step):
 * its own T_r when every unit it sends or receives is complete before
 * `exposed` on its source; otherwise it starts after the latest of those
 * sources' exposed work. */
static void finish_cost(const shape *s, const int *src, rap_place_rank *rk, const int *col_win,
                        rap_place_result *out)
{
    /* late[r]: the most exposed prep among late sources of r's units (< 0: none) */
    double late[RAP_PLACE_MAX_RANKS];
    for (int r = 0; r < s->R; r++)
        late[r] = -1;
    int64_t moved = 0;
    for (int c = 0; c < s->C; c++) {
        if (!s->work[c])
            continue;
        for (int k = 0; k < s->K; k++) {
            uint64_t cs = consumers(s, c, k);
            for (int d = 0; d < s->R; d++) {
                if (!(cs >> d & 1))
                    continue;
                int q = src[idx(s, c, k, d)];
                if (q == d)
                    continue;
                moved += share_rows(s, k) * s->bpr[c];
                if (col_win[(size_t)q * (size_t)s->C + (size_t)c] >= RAP_WIN_EXPOSED) {
                    double e = rk[q].prep_exposed_ms;
                    if (e > late[q])
                        late[q] = e;
                    if (e > late[d])
                        late[d] = e;
                }
            }
        }
    }
    out->exposed_max_ms = out->exposed_sum_ms = out->comm_ms = 0;
    for (int r = 0; r < s->R; r++) {
        rap_place_rank *x = &rk[r];
        x->ready = late[r] < 0;
        if (x->ready) {
            x->comm_hidden_ms = x->comm_reserved_ms;
            x->comm_exposed_ms = x->comm_ms - x->comm_reserved_ms;
        } else {
            double start = late[r] > x->prep_exposed_ms ? late[r] : x->prep_exposed_ms;
            x->comm_hidden_ms = 0;
            x->comm_exposed_ms = start - x->prep_exposed_ms + x->comm_ms;
        }
        if (x->comm_exposed_ms < 1e-15)
            x->comm_exposed_ms = 0;
        x->exposed_total_ms = x->prep_exposed_ms + x->comm_exposed_ms;
        for (int w = 0; w < RAP_WIN_COUNT; w++) {
            double ex = x->load_ms[w] - x->capacity_ms[w];
            x->exposed_ms[w] = w == RAP_WIN_EXPOSED ? x->load_ms[w] : ex > 1e-12 ? ex : 0;
        }
        x->exposed_ms[RAP_WIN_EXPOSED] += x->comm_exposed_ms;
        if (x->exposed_total_ms > out->exposed_max_ms)
            out->exposed_max_ms = x->exposed_total_ms;
        out->exposed_sum_ms += x->exposed_total_ms;
        if (x->comm_ms > out->comm_ms)
            out->comm_ms = x->comm_ms;
    }
    out->bytes_moved = moved;
}

/* The load each rank's windows report includes the hidden all-to-all. */
static void add_comm_load(rap_place_result *out)
{
    for (int r = 0; r < out->ranks; r++)
        out->rank[r].load_ms[RAP_WIN_GRAD_COMM] += out->rank[r].comm_hidden_ms;
}

void rap_place_result_free(rap_place_result *r)
{
    if (!r)
        return;
    if (r->rank)
        for (int q = 0; q < r->ranks; q++)
            rank_free(&r->rank[q]);
    rap_free(r->rank);
    rap_free(r->src);
    memset(r, 0, sizeof *r);
}

static rap_status evaluate(const shape *s, const int *src, rap_place_result *out)
{
    memset(out, 0, sizeof *out);
    out->ranks = s->R;
    out->shares = s->G;
    out->n_cols = s->C;
    out->batch = s->c->batch;
    size_t nsrc = (size_t)s->C * (size_t)s->K * (size_t)s->R + 1;
    out->src = rap_malloc(sizeof(int) * nsrc, "placement");
    out->rank = rap_calloc(sizeof *out->rank * (size_t)s->R, "placement");
    int *col_win = rap_malloc(sizeof(int) * ((size_t)s->R * (size_t)s->C + 1), "placement");
    rap_status st = out->src && out->rank && col_win ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        memcpy(out->src, src, sizeof(int) * (nsrc - 1));
    for (int r = 0; r < s->R && st == RAP_OK; r++)
        st = plan_rank(s, src, r, &out->rank[r], col_win + (size_t)r * (size_t)s->C);
    if (st == RAP_OK) {
        finish_cost(s, src, out->rank, col_win, out);
        out->evaluations = s->R;
    }
    rap_free(col_win);
    if (st != RAP_OK)
        rap_place_result_free(out);
    return st;
}

/* ------------------------------------------------------- assignments */

static void assign_extreme(const shape *s, rap_placement kind, int *src)
{
    for (int c = 0; c < s->C; c++)
        for (int k = 0; k < s->K; k++) {
            uint64_t cs = consumers(s, c, k);
            for (int d = 0; d < s->R; d++) {
                int v = -1;
                if (cs >> d & 1)
                    v = kind == RAP_PLACE_BATCH && s->work[c] && s->table[c] >= 0 ? home(s, k) : d;
                src[idx(s, c, k, d)] = v;
            }
        }
}

static bool better(double max_a, double sum_a, double max_b, double sum_b)
{
    const double eps = 1e-9;
    return max_a < max_b - eps || (max_a <= max_b + eps && sum_a < sum_b - eps);
}

/* The search's state: the assignment, each rank planned, col_win per rank. */
typedef struct {
    const shape *s;
    int *src;
    rap_place_rank *rk;   /* (R) */
    int *col_win;         /* (R, C) */
    rap_place_result cost;
    int evaluations;
} walk;

static void walk_free(walk *w)
{
    if (w->rk)
        for (int r = 0; r < w->s->R; r++)
            rank_free(&w->rk[r]);
    rap_free(w->rk);
    rap_free(w->col_win);
    rap_free(w->src);
    memset(w, 0, sizeof *w);
}

/* A move: the units of columns cols[0..n) in shares sh computed on rank x
 * go to rank y. */
typedef struct {
    const int *cols;
    int n;
    uint64_t sh;
    int y;
} move;

static void apply_move(const shape *s, int *src, const move *m, int x)
{
    for (int i = 0; i < m->n; i++) {
        int c = m->cols[i];
        for (int k = 0; k < s->K; k++) {
            if (!(m->sh >> k & 1))
                continue;
            uint64_t cs = consumers(s, c, k);
            for (int d = 0; d < s->R; d++)
                if ((cs >> d & 1) && src[idx(s, c, k, d)] == x)
                    src[idx(s, c, k, d)] = m->y;
        }
    }
}

/* Cost (max, sum) of walk w after move m off rank x, re-planning ranks x
 * and y only (a move changes no other rank's units or bytes). */
static rap_status try_move(walk *w, int *scratch, const move *m, int x, int *wx, int *wy,
                           double *max_out, double *sum_out)
{
    const shape *s = w->s;
    size_t nsrc = (size_t)s->C * (size_t)s->K * (size_t)s->R;
    memcpy(scratch, w->src, sizeof(int) * nsrc);
    apply_move(s, scratch, m, x);
    rap_place_rank tx, ty;
    RAP_TRY(plan_rank(s, scratch, x, &tx, wx));
    rap_status st = plan_rank(s, scratch, m->y, &ty, wy);
    if (st != RAP_OK) {
        rank_free(&tx);
        return st;
    }
    w->evaluations += 2;
    /* the other ranks as they are, x and y as planned */
    rap_place_rank *rk = rap_malloc(sizeof *rk * (size_t)s->R, "placement");
    int *cw = rap_malloc(sizeof(int) * ((size_t)s->R * (size_t)s->C + 1), "placement");
    if (rk && cw) {
        memcpy(rk, w->rk, sizeof *rk * (size_t)s->R);
        memcpy(cw, w->col_win, sizeof(int) * (size_t)s->R * (size_t)s->C);
        rk[x] = tx;
        rk[m->y] = ty;
        memcpy(cw + (size_t)x * (size_t)s->C, wx, sizeof(int) * (size_t)s->C);
        memcpy(cw + (size_t)m->y * (size_t)s->C, wy, sizeof(int) * (size_t)s->C);
        rap_place_result r;
        memset(&r, 0, sizeof r);
        finish_cost(s, scratch, rk, cw, &r);
        *max_out = r.exposed_max_ms;
        *sum_out = r.exposed_sum_ms;
    } else {
        st = RAP_ERR_NOMEM;
    }
    rap_free(rk);
    rap_free(cw);
    rank_free(&tx);
    rank_free(&ty);
    return st;
}

/* Candidate moves off rank x under w: per column x computes, to each
 * other rank y: one row share (homed on y if any), the shares homed on y,
 * all of it; and per part of x (columns of equal shares), to each y, the
 * first 1/8, 1/4, 1/2 and all of its columns, with all the part's shares
 * or the ones homed on y (bulk moves pay the all-to-all latency once).
 * cols_buf: (C) room for the parts' column lists. Returns the count. */
static int candidates(const shape *s, const walk *w, int x, move *mv, int max_mv, int *cols_buf)
{
    int n = 0;
    uint64_t homed[RAP_PLACE_MAX_RANKS];
    for (int y = 0; y < s->R; y++) {
        homed[y] = 0;
        for (int k = 0; k < s->K; k++)
            if (home(s, k) == y)
                homed[y] |= (uint64_t)1 << k;
    }
    const rap_place_rank *rk = &w->rk[x];
    int used = 0;
    for (int q = 0; q < rk->n_parts; q++) {
        const rap_place_part *pt = &rk->parts[q];
        int *pc = cols_buf + used;
        memcpy(pc, pt->cols, sizeof(int) * (size_t)pt->n_cols);
        used += pt->n_cols;
        for (int y = 0; y < s->R; y++) {
            if (y == x)
                continue;
            uint64_t shs[2] = {pt->shares, pt->shares & homed[y]};
            for (int v = 0; v < 2; v++) {
                if (!shs[v] || (v == 1 && shs[1] == shs[0]))
                    continue;
                int last = 0;
                for (int f = 8; f >= 1; f /= 2) {
                    int m = (pt->n_cols + f - 1) / f;
                    if (m == last || n >= max_mv)
                        continue;
                    last = m;
                    mv[n++] = (move){pc, m, shs[v], y};
                }
                /* single columns */
                for (int i = 0; i < pt->n_cols && pt->n_cols > 1; i++) {
                    uint64_t one = shs[v] & homed[y] ? shs[v] & homed[y] : shs[v];
                    one &= ~one + 1;
                    uint64_t opts[2] = {one, shs[v]};
                    for (int o = 0; o < 2 && n < max_mv; o++)
                        if (o == 0 || opts[1] != opts[0])
                            mv[n++] = (move){pc + i, 1, opts[o], y};
                }
            }
        }
    }
    return n;
}

/* Greedy walk from assignment src0: repeatedly takes, among the candidate
 * moves off the most exposed rank, the one that lowers (max exposed, then
 * sum exposed) most; stops when none does. *moves gets the moves
 * accepted. */
static rap_status greedy(const shape *s, const int *src0, int max_moves, int **src_out, int *moves,
                         int *evaluations)
{
    size_t nsrc = (size_t)s->C * (size_t)s->K * (size_t)s->R;
    walk w = {s, NULL, NULL, NULL, {0}, 0};
    int max_mv = 8 * s->C * s->R + 64 * s->R + 64;
    w.src = rap_malloc(sizeof(int) * (nsrc + 1), "placement");
    w.rk = rap_calloc(sizeof *w.rk * (size_t)s->R, "placement");
    w.col_win = rap_malloc(sizeof(int) * ((size_t)s->R * (size_t)s->C + 1), "placement");
    int *scratch = rap_malloc(sizeof(int) * (nsrc + 1), "placement");
    int *wx = rap_malloc(sizeof(int) * ((size_t)s->C + 1), "placement");
    int *wy = rap_malloc(sizeof(int) * ((size_t)s->C + 1), "placement");
    int *cols_buf = rap_malloc(sizeof(int) * ((size_t)s->C + 1), "placement");
    move *mv = rap_malloc(sizeof *mv * (size_t)max_mv, "placement");
    rap_status st = w.src && w.rk && w.col_win && scratch && wx && wy && cols_buf && mv
                        ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        memcpy(w.src, src0, sizeof(int) * nsrc);
    for (int r = 0; r < s->R && st == RAP_OK; r++)
        st = plan_rank(s, w.src, r, &w.rk[r], w.col_win + (size_t)r * (size_t)s->C);
    if (st == RAP_OK)
        finish_cost(s, w.src, w.rk, w.col_win, &w.cost);
    *moves = 0;
    while (st == RAP_OK && *moves < max_moves && w.cost.exposed_max_ms > 1e-12) {
        int x = 0;
        for (int r = 1; r < s->R; r++)
            if (w.rk[r].exposed_total_ms > w.rk[x].exposed_total_ms)
                x = r;
        double bmax = w.cost.exposed_max_ms, bsum = w.cost.exposed_sum_ms;
        int n = candidates(s, &w, x, mv, max_mv, cols_buf), best = -1;
        for (int i = 0; i < n && st == RAP_OK; i++) {
            double m, sm;
            st = try_move(&w, scratch, &mv[i], x, wx, wy, &m, &sm);
            if (st == RAP_OK && better(m, sm, bmax, bsum)) {
                bmax = m;
                bsum = sm;
                best = i;
            }
        }
        if (st != RAP_OK || best < 0)
            break;
        apply_move(s, w.src, &mv[best], x);
        (*moves)++;
        rap_debug("placement: move %d: %d columns from %s, shares %#llx, rank %d -> %d: exposed "
                  "max %.6f ms", *moves, mv[best].n, s->p->cols[mv[best].cols[0]].name,
                  (unsigned long long)mv[best].sh, x, mv[best].y, bmax);
        for (int r = 0; r < s->R; r++)
            rank_free(&w.rk[r]);
        for (int r = 0; r < s->R && st == RAP_OK; r++)
            st = plan_rank(s, w.src, r, &w.rk[r], w.col_win + (size_t)r * (size_t)s->C);
        if (st == RAP_OK)
            finish_cost(s, w.src, w.rk, w.col_win, &w.cost);
    }
    *evaluations += w.evaluations;
    rap_free(scratch);
    rap_free(wx);
    rap_free(wy);
    rap_free(cols_buf);
    rap_free(mv);
    if (st == RAP_OK) {
        *src_out = w.src;
        w.src = NULL;
    }
    walk_free(&w);
    return st;
}

rap_status rap_place_evaluate(const rap_plan *p, const rap_place_config *c, const int *src,
                              rap_place_result *out)
{
    memset(out, 0, sizeof *out);
    shape s;
    RAP_TRY(shape_init(p, c, &s));
    /* every consumer of every unit has a source rank */
    rap_status st = RAP_OK;
    for (int col = 0; col < s.C && st == RAP_OK; col++)
        for (int k = 0; k < s.K && st == RAP_OK; k++) {
            uint64_t cs = consumers(&s, col, k);
            for (int d = 0; d < s.R; d++) {
                int v = src[idx(&s, col, k, d)];
                if ((cs >> d & 1) ? v < 0 || v >= s.R : v != -1) {
                    st = rap_fail(RAP_ERR_ARG, "placement: column %s share %d: source %d for "
                                  "rank %d (%s)", p->cols[col].name, k, v, d,
                                  (cs >> d & 1) ? "a consumer" : "not a consumer, expected -1");
                    break;
                }
            }
        }
    if (st == RAP_OK)
        st = evaluate(&s, src, out);
    if (st == RAP_OK)
        add_comm_load(out);
    shape_free(&s);
    return st;
}

rap_status rap_place_run(const rap_plan *p, const rap_place_config *c, rap_placement kind,
                         rap_place_result *out)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)kind > RAP_PLACE_SEARCH)
        return rap_fail(RAP_ERR_ARG, "placement: unknown kind %d", (int)kind);
    shape s;
    RAP_TRY(shape_init(p, c, &s));
    size_t nsrc = (size_t)s.C * (size_t)s.K * (size_t)s.R;
    int *src = rap_malloc(sizeof(int) * (nsrc + 1), "placement");
    if (!src) {
        shape_free(&s);
        return RAP_ERR_NOMEM;
    }
    rap_status st = RAP_OK;
    int moves = 0, evals = 0;
    const char *start = "";
    if (kind != RAP_PLACE_SEARCH) {
        assign_extreme(&s, kind, src);
        st = evaluate(&s, src, out);
    } else {
        int max_moves = c->max_moves > 0 ? c->max_moves : 1000;
        int *a = NULL, *b = NULL;
        assign_extreme(&s, RAP_PLACE_OWNER, src);
        st = greedy(&s, src, max_moves, &a, &moves, &evals);
        rap_place_result ra, rb;
        memset(&ra, 0, sizeof ra);
        memset(&rb, 0, sizeof rb);
        if (st == RAP_OK)
            st = evaluate(&s, a, &ra);
        start = "owner";
        /* the walk from owner can stall where batch is better: then walk
         * from batch too and keep the better end */
        assign_extreme(&s, RAP_PLACE_BATCH, src);
        if (st == RAP_OK)
            st = evaluate(&s, src, &rb);
        if (st == RAP_OK && better(rb.exposed_max_ms, rb.exposed_sum_ms, ra.exposed_max_ms,
                                   ra.exposed_sum_ms)) {
            int m2 = 0;
            rap_place_result_free(&rb);
            st = greedy(&s, src, max_moves, &b, &m2, &evals);
            if (st == RAP_OK)
                st = evaluate(&s, b, &rb);
            if (st == RAP_OK && better(rb.exposed_max_ms, rb.exposed_sum_ms, ra.exposed_max_ms,
                                       ra.exposed_sum_ms)) {
                rap_place_result_free(&ra);
                ra = rb;
                memset(&rb, 0, sizeof rb);
                moves = m2;
                start = "batch";
            }
        }
        rap_place_result_free(&rb);
        rap_free(a);
        rap_free(b);
        if (st == RAP_OK)
            *out = ra;
        else
            rap_place_result_free(&ra);
    }
    rap_free(src);
    shape_free(&s);
    if (st != RAP_OK) {
        rap_place_result_free(out);
        return st;
    }
    add_comm_load(out);
    out->kind = kind;
    out->moves = moves;
    out->evaluations += evals;
    snprintf(out->start, sizeof out->start, "%s", start);
    return RAP_OK;
}

/* ------------------------------------------------------------ output */

static void shares_list(FILE *fp, uint64_t m, int K)
{
    bool first = true;
    for (int k = 0; k < K; k++)
        if (m >> k & 1) {
            fprintf(fp, "%s%d", first ? "" : ",", k);
            first = false;
        }
}

rap_status rap_place_save_rank(const rap_plan *p, const rap_place_result *r, int rank,
                               const char *prefix)
{
    if (rank < 0 || rank >= r->ranks)
        return rap_fail(RAP_ERR_ARG, "placement: no rank %d of %d", rank, r->ranks);
    const rap_place_rank *rk = &r->rank[rank];
    int K = r->ranks * r->shares;
    char path[1200];
    for (int q = 0; q < rk->n_parts; q++) {
        const rap_place_part *pt = &rk->parts[q];
        snprintf(path, sizeof path, "%s.rank%d.%d", prefix, rank, q);
        RAP_TRY(rap_schedule_save(pt->sched, path));
        snprintf(path, sizeof path, "%s.rank%d.%d.fusion", prefix, rank, q);
        RAP_TRY(rap_fusion_save(pt->sub, &pt->fusion, path));
    }
    snprintf(path, sizeof path, "%s.rank%d", prefix, rank);
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    FILE *fp = rap_out_file(o);
    const char *base = strrchr(prefix, '/');
    base = base ? base + 1 : prefix;
    fprintf(fp, "rap-placement 1\nplan %s %016llx\n", p->source,
            (unsigned long long)rap_plan_hash(p));
    fprintf(fp, "placement %s ranks %d rank %d batch %lld global_batch %lld shares %d\n",
            rap_placement_name(r->kind), r->ranks, rank, (long long)r->batch,
            (long long)r->batch * r->ranks, K);
    fprintf(fp, "# share k = rows [k*global_batch/shares, (k+1)*global_batch/shares) of the "
                "global batch\n");
    for (int q = 0; q < rk->n_parts; q++) {
        const rap_place_part *pt = &rk->parts[q];
        fprintf(fp, "part %d rows %lld shares ", q, (long long)pt->rows);
        shares_list(fp, pt->shares, K);
        fprintf(fp, " schedule %s.rank%d.%d fusion %s.rank%d.%d.fusion columns ", base, rank, q,
                base, rank, q);
        for (int i = 0; i < pt->n_cols; i++)
            fprintf(fp, "%s%s", i ? "," : "", p->cols[pt->cols[i]].name);
        fputc('\n', fp);
    }
    /* units that cross: what this rank sends and receives */
    size_t R = (size_t)r->ranks;
    for (int c = 0; c < r->n_cols; c++)
        for (int k = 0; k < K; k++)
            for (int d = 0; d < r->ranks; d++) {
                int s = r->src[((size_t)c * (size_t)K + (size_t)k) * R + (size_t)d];
                if (s < 0 || s == d)
                    continue;
                if (s == rank)
                    fprintf(fp, "send %s share %d to %d\n", p->cols[c].name, k, d);
                if (d == rank)
                    fprintf(fp, "recv %s share %d from %d\n", p->cols[c].name, k, s);
            }
    return rap_out_commit(o);
}

rap_status rap_place_report_json(FILE *fp, const rap_plan *p, const rap_place_result *r)
{
    int K = r->ranks * r->shares;
    fprintf(fp, "{\"placement\": \"%s\", \"ranks\": %d, \"batch_per_gpu\": %lld, "
                "\"global_batch\": %lld, \"row_shares\": %d",
            rap_placement_name(r->kind), r->ranks, (long long)r->batch,
            (long long)r->batch * r->ranks, K);
    if (r->kind == RAP_PLACE_SEARCH)
        fprintf(fp, ", \"search_start\": \"%s\", \"moves\": %d, \"rank_plans_evaluated\": %d",
                r->start, r->moves, r->evaluations);
    fprintf(fp, ",\n   \"exposed_max_ms\": ");
    rap_json_put_num(fp, r->exposed_max_ms);
    fprintf(fp, ", \"exposed_sum_ms\": ");
    rap_json_put_num(fp, r->exposed_sum_ms);
    fprintf(fp, ", \"comm_ms\": ");
    rap_json_put_num(fp, r->comm_ms);
    fprintf(fp, ", \"bytes_moved\": %lld,\n   \"rank\": [", (long long)r->bytes_moved);
    for (int q = 0; q < r->ranks; q++) {
        const rap_place_rank *rk = &r->rank[q];
        fprintf(fp, "%s\n    {\"rank\": %d, \"exposed_ms\": ", q ? "," : "", q);
        rap_json_put_num(fp, rk->exposed_total_ms);
        fprintf(fp, ", \"prep_exposed_ms\": ");
        rap_json_put_num(fp, rk->prep_exposed_ms);
        fprintf(fp, ", \"comm_hidden_ms\": ");
        rap_json_put_num(fp, rk->comm_hidden_ms);
        fprintf(fp, ", \"comm_exposed_ms\": ");
        rap_json_put_num(fp, rk->comm_exposed_ms);
        fprintf(fp, ", \"bytes_sent\": %lld, \"bytes_recv\": %lld,\n     \"windows\": [",
                (long long)rk->bytes_sent, (long long)rk->bytes_recv);
        for (int w = 0; w < RAP_WIN_COUNT; w++) {
            fprintf(fp, "%s{\"name\": \"%s\", \"capacity_ms\": ", w ? ", " : "",
                    rap_window_name((rap_window)w));
            rap_json_put_num(fp, rk->capacity_ms[w]);
            fprintf(fp, ", \"load_ms\": ");
            rap_json_put_num(fp, rk->load_ms[w]);
            fprintf(fp, ", \"exposed_ms\": ");
            rap_json_put_num(fp, rk->exposed_ms[w]);
            fputc('}', fp);
        }
        fprintf(fp, "],\n     \"parts\": [");
        for (int i = 0; i < rk->n_parts; i++) {
            const rap_place_part *pt = &rk->parts[i];
            fprintf(fp, "%s{\"rows\": %lld, \"shares\": [", i ? ", " : "", (long long)pt->rows);
            shares_list(fp, pt->shares, K);
            fprintf(fp, "], \"kernels\": %d, \"slices\": %d, \"exposed_ms\": ", pt->fusion.n,
                    pt->sr.n_slices);
            rap_json_put_num(fp, pt->sr.total_exposed_ms);
            fprintf(fp, ", \"columns\": [");
            for (int j = 0; j < pt->n_cols; j++) {
                fputs(j ? ", " : "", fp);
                rap_json_put_str(fp, p->cols[pt->cols[j]].name);
            }
            fprintf(fp, "]}");
        }
        fprintf(fp, "]}");
    }
    fprintf(fp, "\n   ]}");
    return ferror(fp) ? rap_fail(RAP_ERR_IO, "placement report: write failed") : RAP_OK;
}
