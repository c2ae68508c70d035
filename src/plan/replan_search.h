/*
 * replan_search.h -- the planner that re-planning while training runs
 * (run/replan.h's rap_replan_fn): the split and schedule search
 * (plan/search.h) of the run's plan and fusion on capacities measured
 * while training, with the run's predictor. The fusion stays (the
 * runtime's executors were built for it); what changes is which window
 * each slice runs in and how kernels are cut.
 */
#ifndef RAP_PLAN_REPLAN_SEARCH_H
#define RAP_PLAN_REPLAN_SEARCH_H

#include "plan/capacity.h"
#include "plan/predictor.h"
#include "plan/search.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const rap_predictor *pred;  /* NULL: the analytic fallback */
    rap_capacity base;          /* gpu, shape, tolerance, standalone times: kept;
                                 * capacity_ms replaced by each call's */
    rap_window_choice choice;
} rap_replan_search_ctx;

/* A rap_replan_fn over ctx = a rap_replan_search_ctx (read only: safe on
 * the replan thread while nothing else writes it). With lists (the raw
 * sparse columns' measured mean ids a row) the latency models see those
 * lengths instead of the plan's bounds (rap_node.mean_ids on a copy of the
 * plan's nodes; p itself is not written). */
rap_status rap_replan_search(void *ctx, const rap_plan *p, const rap_fusion *f, int64_t batch,
                             const double *capacity_ms, const double *lists, int n_lists,
                             rap_schedule **out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_REPLAN_SEARCH_H */
