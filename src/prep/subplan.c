/*
 * subplan.c -- sub-plans (subplan.h).
 */
#include "prep/subplan.h"

#include <string.h>

void rap_subplan_free(rap_plan *s)
{
    if (!s)
        return;
    rap_free(s->nodes);
    rap_free(s->cols);
    rap_free(s);
}

rap_status rap_subplan_make(const rap_plan *p, const int *cols, int n, rap_plan **out)
{
    *out = NULL;
    rap_plan *s = rap_malloc(sizeof *s, "placement sub-plan");
    if (!s)
        return RAP_ERR_NOMEM;
    *s = *p;
    s->nodes = rap_malloc(sizeof *s->nodes * (size_t)p->n_nodes, "placement sub-plan");
    s->cols = rap_malloc(sizeof *s->cols * (size_t)(n + 1), "placement sub-plan");
    if (!s->nodes || !s->cols) {
        rap_subplan_free(s);
        return RAP_ERR_NOMEM;
    }
    memcpy(s->nodes, p->nodes, sizeof *s->nodes * (size_t)p->n_nodes);
    s->cap_nodes = p->n_nodes;
    for (int i = 0; i < n; i++)
        s->cols[i] = p->cols[cols[i]];
    s->n_cols = n;
    s->cap_cols = n + 1;
    rap_plan_finish(s);
    *out = s;
    return RAP_OK;
}

rap_status rap_subplan_rank(const rap_plan *p, const int *tables, int n_tables, bool fuse_none,
                            rap_plan **out, rap_fusion *fus, int *rtab, int *n_rtab)
{
    return rap_subplan_rank_with(p, tables, n_tables, NULL, fuse_none, out, fus, rtab, n_rtab);
}

rap_status rap_subplan_rank_with(const rap_plan *p, const int *tables, int n_tables,
                                 const uint64_t *extra, bool fuse_none, rap_plan **out,
                                 rap_fusion *fus, int *rtab, int *n_rtab)
{
    *out = NULL;
    *n_rtab = 0;
    int *keep = rap_malloc(sizeof(int) * (size_t)(p->n_cols + 1), "rank plan");
    if (!keep)
        return RAP_ERR_NOMEM;
    int n = 0, sparse = 0;
    for (int i = 0; i < p->n_cols; i++) {
        bool is_sparse = p->nodes[p->cols[i].node].kind == RAP_SPARSE, mine = !is_sparse;
        for (int k = 0; is_sparse && k < n_tables; k++)
            mine |= tables[k] == sparse;
        mine |= extra && extra[i];
        if (mine) {
            keep[n++] = i;
            if (is_sparse)
                rtab[(*n_rtab)++] = sparse;
        }
        sparse += is_sparse;
    }
    if ((*n_rtab == 0 && !extra) || n == p->n_cols) { /* nothing to leave out */
        rap_free(keep);
        *n_rtab = 0;
        return RAP_OK;
    }
    rap_plan *s = NULL;
    rap_status ps = rap_subplan_make(p, keep, n, &s);
    rap_free(keep);
    if (ps != RAP_OK)
        return ps;
    *out = s;
    rap_status st = fuse_none ? rap_fuse_none(s, fus) : rap_fuse_levels(s, fus);
    if (st != RAP_OK) {
        rap_subplan_rank_free(s, fus);
        *out = NULL;
    }
    return st;
}

void rap_subplan_rank_free(rap_plan *s, rap_fusion *fus)
{
    if (!s)
        return;
    rap_fusion_free(fus);
    rap_subplan_free(s);
}
