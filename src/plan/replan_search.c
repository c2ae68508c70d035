/* replan_search.c -- the search on measured capacities (replan_search.h). */
#include "plan/replan_search.h"

#include "core/core.h"
#include "run/replan.h"

#include <string.h>

rap_status rap_replan_search(void *ctx, const rap_plan *p, const rap_fusion *f, int64_t batch,
                             const double *capacity_ms, rap_schedule **out)
{
    const rap_replan_search_ctx *x = ctx;
    rap_capacity cap = x->base;
    for (int w = 0; w < RAP_CAP_WINDOWS && w < RAP_REPLAN_WINDOWS; w++)
        cap.capacity_ms[w] = capacity_ms[w] >= 0 ? capacity_ms[w] : 0;
    snprintf(cap.source, sizeof cap.source, "measured while training (from %s)", x->base.source);
    rap_search_config sc = {x->pred, &cap, batch, 1, false, x->choice};
    rap_search_result sr;
    return rap_schedule_search(p, f, &sc, "<replan>", out, &sr);
}
