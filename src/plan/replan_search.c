/* replan_search.c -- the search on measured capacities (replan_search.h). */
#include "plan/replan_search.h"

#include "core/core.h"
#include "run/replan.h"

#include <string.h>

/* The least mean ids a row a measured column is given: a column measured
 * empty still costs its offsets, and 0 means "not measured" (rap.h). */
#define MIN_MEAN_IDS 1e-3

rap_status rap_replan_search(void *ctx, const rap_plan *p, const rap_fusion *f, int64_t batch,
                             const double *capacity_ms, const double *lists, int n_lists,
                             rap_schedule **out)
{
    const rap_replan_search_ctx *x = ctx;
    rap_capacity cap = x->base;
    for (int w = 0; w < RAP_CAP_WINDOWS && w < RAP_REPLAN_WINDOWS; w++)
        cap.capacity_ms[w] = capacity_ms[w] >= 0 ? capacity_ms[w] : 0;
    snprintf(cap.source, sizeof cap.source, "measured while training (from %s)", x->base.source);
    rap_search_config sc = {x->pred, &cap, batch, 1, false, x->choice};
    rap_search_result sr;
    if (!lists || n_lists <= 0)
        return rap_schedule_search(p, f, &sc, "<replan>", out, &sr);
    /* the measured list lengths: a view of the plan whose raw sparse nodes
     * carry them (mean_ids is not part of the plan's hash: the schedule is
     * still the plan's), the rest shared and read only */
    rap_plan view = *p;
    view.nodes = rap_malloc(sizeof(rap_node) * (size_t)p->n_nodes, "re-planning's plan view");
    if (!view.nodes)
        return RAP_ERR_NOMEM;
    memcpy(view.nodes, p->nodes, sizeof(rap_node) * (size_t)p->n_nodes);
    view.cap_nodes = p->n_nodes;
    for (int i = 0; i < p->n_nodes; i++) {
        rap_node *n = &view.nodes[i];
        if (n->op == RAP_OP_INPUT && n->kind == RAP_SPARSE && n->raw >= 0 && n->raw < n_lists)
            n->mean_ids = lists[n->raw] > MIN_MEAN_IDS ? lists[n->raw] : MIN_MEAN_IDS;
    }
    rap_status st = rap_schedule_search(&view, f, &sc, "<replan>", out, &sr);
    rap_free(view.nodes);
    return st;
}
