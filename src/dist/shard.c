/*
 * shard.c -- the table shard planner (contract in shard.h).
 *
 * Pieces are planned first as (table, rank, row0, rows) in placement
 * order, then sorted into the map's order (table, row0) and each rank's
 * local tables numbered by (table, row0).
 */
#include "dist/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int table, rank;
    int64_t row0, rows;
} piece;

typedef struct {
    const int64_t *rows;
    const double *look;
} sort_ctx;

static _Thread_local sort_ctx g_sort; /* qsort has no context argument */

static int by_size(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort.rows[x] != g_sort.rows[y])
        return g_sort.rows[x] > g_sort.rows[y] ? -1 : 1;
    double lx = g_sort.look ? g_sort.look[x] : 1, ly = g_sort.look ? g_sort.look[y] : 1;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x - y;
}

static int by_table_row(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->table != y->table)
        return x->table - y->table;
    return x->row0 < y->row0 ? -1 : x->row0 > y->row0;
}

/* Order of ranks by free room, most first (ties: lowest rank). */
static _Thread_local const int64_t *g_free;
static int by_room(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (g_free[x] != g_free[y])
        return g_free[x] > g_free[y] ? -1 : 1;
    return x - y;
}

void rap_shard_map_free(rap_shard_map *m)
{
    if (!m)
        return;
    rap_free(m->shard);
    rap_free(m->part0);
    rap_free(m->part);
    rap_free(m->bytes);
    rap_free(m->lookups);
    memset(m, 0, sizeof *m);
}

rap_status rap_shard_plan(const int64_t *table_rows, int T, int emb_dim, int R,
                          int64_t budget_bytes, const double *lookups, rap_shard_map *out)
{
    memset(out, 0, sizeof *out);
    if (T < 1 || T > RAP_MAX_TABLES || emb_dim < 1 || R < 1 || R > 1024 || budget_bytes < 0 ||
        !table_rows)
        return rap_fail(RAP_ERR_ARG,
                        "rap_shard_plan: T = %d (1..%d), D = %d, R = %d (1..1024), budget %lld",
                        T, RAP_MAX_TABLES, emb_dim, R, (long long)budget_bytes);
    const int64_t row_bytes = (int64_t)emb_dim * (int64_t)sizeof(float);
    int64_t need = 0;
    for (int t = 0; t < T; t++) {
        if (table_rows[t] < 1)
            return rap_fail(RAP_ERR_ARG, "rap_shard_plan: table %d has %lld rows", t,
                            (long long)table_rows[t]);
        if (lookups && !(lookups[t] >= 0))
            return rap_fail(RAP_ERR_ARG, "rap_shard_plan: table %d: lookups %g", t, lookups[t]);
        need += table_rows[t] * row_bytes;
    }
    /* budget 0: no limit (room of every rank = everything). */
    const int64_t budget = budget_bytes > 0 ? budget_bytes : need;
    if (budget_bytes > 0 && need > (int64_t)R * budget)
        return rap_fail(RAP_ERR_NOMEM,
                        "tables need %lld bytes (%.3g GB), %d ranks x %lld bytes = %lld (%.3g GB) "
                        "available",
                        (long long)need, need / 1e9, R, (long long)budget,
                        (long long)R * budget, (double)R * budget / 1e9);
    rap_status st = RAP_ERR_NOMEM;
    int *order = rap_malloc(sizeof(int) * (size_t)(T > R ? T : R), "shard order");
    int *rk = rap_malloc(sizeof(int) * (size_t)R, "shard ranks");
    int64_t *freeb = rap_malloc(sizeof(int64_t) * (size_t)R, "shard room");
    piece *pc = rap_malloc(sizeof(piece) * (size_t)T * (size_t)R, "shard pieces");
    out->shard = rap_calloc(sizeof(rap_model_shard) * (size_t)R, "shards");
    out->part0 = rap_calloc(sizeof(int) * (size_t)(T + 1), "shard part0");
    out->bytes = rap_calloc(sizeof(int64_t) * (size_t)R, "shard bytes");
    out->lookups = rap_calloc(sizeof(double) * (size_t)R, "shard lookups");
    int np = 0;
    if (!order || !rk || !freeb || !pc || !out->shard || !out->part0 || !out->bytes ||
        !out->lookups)
        goto done;
    for (int t = 0; t < T; t++)
        order[t] = t;
    g_sort.rows = table_rows;
    g_sort.look = lookups;
    qsort(order, (size_t)T, sizeof(int), by_size);
    for (int r = 0; r < R; r++)
        freeb[r] = budget;
    for (int i = 0; i < T; i++) {
        int t = order[i];
        int64_t tb = table_rows[t] * row_bytes;
        double look = lookups ? lookups[t] : 1.0;
        /* Whole table: least bytes, then fewest lookups, then lowest rank. */
        int best = -1;
        for (int r = 0; r < R; r++) {
            if (freeb[r] < tb)
                continue;
            if (best < 0 || out->bytes[r] < out->bytes[best] ||
                (out->bytes[r] == out->bytes[best] && out->lookups[r] < out->lookups[best]))
                best = r;
        }
        if (best >= 0) {
            pc[np++] = (piece){t, best, 0, table_rows[t]};
            freeb[best] -= tb;
            out->bytes[best] += tb;
            out->lookups[best] += look;
            continue;
        }
        /* Row-wise: the fewest ranks (most room first) holding equal ranges. */
        for (int r = 0; r < R; r++)
            rk[r] = r;
        g_free = freeb;
        qsort(rk, (size_t)R, sizeof(int), by_room);
        int k = 0;
        for (int kk = 2; kk <= R && table_rows[t] >= kk; kk++) {
            int64_t biggest = (table_rows[t] + kk - 1) / kk;
            if (freeb[rk[kk - 1]] >= biggest * row_bytes) {
                k = kk;
                break;
            }
        }
        int64_t row0 = 0;
        if (k > 0) {
            for (int j = 0; j < k; j++) {
                int64_t rows = table_rows[t] / k + (j < table_rows[t] % k);
                int r = rk[j];
                pc[np++] = (piece){t, r, row0, rows};
                row0 += rows;
                freeb[r] -= rows * row_bytes;
                out->bytes[r] += rows * row_bytes;
                out->lookups[r] += look;
            }
        } else {
            /* No equal split fits: fill the roomiest ranks in turn. */
            for (int j = 0; j < R && row0 < table_rows[t]; j++) {
                int r = rk[j];
                int64_t rows = freeb[r] / row_bytes;
                if (rows > table_rows[t] - row0)
                    rows = table_rows[t] - row0;
                if (rows < 1)
                    continue;
                pc[np++] = (piece){t, r, row0, rows};
                row0 += rows;
                freeb[r] -= rows * row_bytes;
                out->bytes[r] += rows * row_bytes;
                out->lookups[r] += look;
            }
            if (row0 < table_rows[t]) {
                st = rap_fail(RAP_ERR_NOMEM,
                              "tables need %lld bytes, %d ranks x %lld bytes = %lld available, "
                              "but table %d (%lld rows of %lld bytes) does not fit in what is "
                              "left (whole rows)",
                              (long long)need, R, (long long)budget, (long long)R * budget, t,
                              (long long)table_rows[t], (long long)row_bytes);
                goto done;
            }
        }
    }
    qsort(pc, (size_t)np, sizeof(piece), by_table_row);
    out->part = rap_malloc(sizeof(rap_shard_part) * (size_t)np, "shard parts");
    if (!out->part)
        goto done;
    /* Number each rank's local tables in (table, row0) order: the pieces
     * are sorted so, so a running count per rank does it. */
    for (int p = 0; p < np; p++) {
        rap_model_shard *sh = &out->shard[pc[p].rank];
        int k = sh->n_local++;
        sh->table[k] = pc[p].table;
        sh->row0[k] = pc[p].row0;
        sh->rows[k] = pc[p].rows;
        out->part[p] = (rap_shard_part){pc[p].rank, k, pc[p].row0, pc[p].rows};
        out->part0[pc[p].table + 1] = p + 1;
    }
    for (int t = 0; t < T; t++)
        if (out->part0[t + 1] < out->part0[t])
            out->part0[t + 1] = out->part0[t];
    out->n_ranks = R;
    out->n_tables = T;
    out->emb_dim = emb_dim;
    out->n_parts = np;
    st = RAP_OK;
done:
    rap_free(order);
    rap_free(rk);
    rap_free(freeb);
    rap_free(pc);
    if (st != RAP_OK)
        rap_shard_map_free(out);
    return st;
}

rap_status rap_shard_map_check(const rap_shard_map *m, const int64_t *table_rows,
                               int64_t budget_bytes)
{
    const int64_t row_bytes = (int64_t)m->emb_dim * (int64_t)sizeof(float);
    if (m->part0[0] != 0 || m->part0[m->n_tables] != m->n_parts)
        return rap_fail(RAP_ERR_INTERNAL, "shard map: part0 spans [%d, %d), %d parts",
                        m->part0[0], m->part0[m->n_tables], m->n_parts);
    for (int t = 0; t < m->n_tables; t++) {
        int64_t next = 0;
        if (m->part0[t + 1] <= m->part0[t])
            return rap_fail(RAP_ERR_INTERNAL, "shard map: table %d has no part", t);
        for (int p = m->part0[t]; p < m->part0[t + 1]; p++) {
            const rap_shard_part *q = &m->part[p];
            if (q->row0 != next || q->rows < 1)
                return rap_fail(RAP_ERR_INTERNAL,
                                "shard map: table %d part %d holds rows [%lld, +%lld), row %lld "
                                "expected first",
                                t, p, (long long)q->row0, (long long)q->rows, (long long)next);
            next += q->rows;
            if (q->rank < 0 || q->rank >= m->n_ranks)
                return rap_fail(RAP_ERR_INTERNAL, "shard map: part %d on rank %d", p, q->rank);
            const rap_model_shard *sh = &m->shard[q->rank];
            if (q->local < 0 || q->local >= sh->n_local || sh->table[q->local] != t ||
                sh->row0[q->local] != q->row0 || sh->rows[q->local] != q->rows)
                return rap_fail(RAP_ERR_INTERNAL,
                                "shard map: part %d (table %d) disagrees with rank %d's local "
                                "table %d",
                                p, t, q->rank, q->local);
        }
        if (next != table_rows[t])
            return rap_fail(RAP_ERR_INTERNAL, "shard map: table %d: %lld of %lld rows held", t,
                            (long long)next, (long long)table_rows[t]);
    }
    int total = 0;
    for (int r = 0; r < m->n_ranks; r++) {
        int64_t b = 0;
        for (int k = 0; k < m->shard[r].n_local; k++)
            b += m->shard[r].rows[k] * row_bytes;
        total += m->shard[r].n_local;
        if (b != m->bytes[r])
            return rap_fail(RAP_ERR_INTERNAL, "shard map: rank %d holds %lld bytes, says %lld", r,
                            (long long)b, (long long)m->bytes[r]);
        if (budget_bytes > 0 && b > budget_bytes)
            return rap_fail(RAP_ERR_INTERNAL, "shard map: rank %d holds %lld bytes > budget %lld",
                            r, (long long)b, (long long)budget_bytes);
    }
    if (total != m->n_parts)
        return rap_fail(RAP_ERR_INTERNAL, "shard map: %d local tables, %d parts", total,
                        m->n_parts);
    return RAP_OK;
}

void rap_shard_map_describe(const rap_shard_map *m, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = 0;
    for (int r = 0; r < m->n_ranks && at < n; r++) {
        const rap_model_shard *sh = &m->shard[r];
        at += (size_t)snprintf(buf + at, n - at, "rank %d: %d tables, %.3g GB:", r, sh->n_local,
                               m->bytes[r] / 1e9);
        for (int k = 0; k < sh->n_local && at < n; k++) {
            bool whole = m->part0[sh->table[k] + 1] - m->part0[sh->table[k]] == 1;
            if (whole)
                at += (size_t)snprintf(buf + at, n - at, " t%d", sh->table[k]);
            else
                at += (size_t)snprintf(buf + at, n - at, " t%d[%lld,%lld)", sh->table[k],
                                       (long long)sh->row0[k],
                                       (long long)(sh->row0[k] + sh->rows[k]));
        }
        if (at < n)
            at += (size_t)snprintf(buf + at, n - at, "\n");
    }
}

void rap_shard_holds(const rap_shard_map *m, bool *holds)
{
    memset(holds, 0, sizeof(bool) * (size_t)m->n_ranks * (size_t)m->n_tables);
    for (int t = 0; t < m->n_tables; t++)
        for (int p = m->part0[t]; p < m->part0[t + 1]; p++)
            holds[m->part[p].rank * m->n_tables + t] = true;
}
