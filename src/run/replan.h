/*
 * replan.h -- re-planning while training (docs/RUNTIME.md "Re-planning
 * while training"): every N steps the measured phase times and exposed
 * time are set against what the schedule in use predicts; when they drift
 * by more than a threshold, the planner runs in a background thread on
 * capacities re-estimated from the measurement, and its schedule is
 * swapped into the runtime at a step boundary (rap_runtime_set_schedule:
 * no step lost, the weights those of a run with the new schedule from that
 * step).
 *
 * The prediction of a schedule s with capacities C (ms of standalone
 * work), the capacity file's standalone phase times T and tolerance tol:
 * window w holds load L_w (the sum of its slices' predicted_ms; unknown
 * counts 0) and slows its phase linearly up to tol at capacity, so
 *   phase_w = T_w (1 + tol L_w / C_w)      (T_w when L_w = 0 or C_w = 0)
 *   exposed = L_exposed                    (the slices after the step)
 * Drift: some phase with T_w > 0 whose measured mean is off its prediction
 * by more than threshold x prediction, or a measured exposed time off by
 * more than threshold x max(predicted, 0.01 ms, 2 % of the measured
 * step). The re-estimate: a window with load whose phase slowed by
 * s_w = measured / T_w - 1 > 0 hides
 * C'_w = tol L_w / s_w (the load at which the measured rate reaches the
 * tolerance), at most 2 C_w; one that did not slow keeps
 * max(C_w, min(2 C_w, 2 L_w)); a window without load keeps C_w.
 *
 * A phase whose window holds no load measures the phase alone: its mean
 * becomes T_w (rap_replan_reference) instead of a drift, since nothing
 * could be moved out of it. A plan whose schedule places every slice as
 * the one in use is not swapped in (its capacities are kept).
 *
 * The input's list lengths: the row feed counts each raw sparse column's
 * ids (rap_rowfeed_stats.ids_out); the mean ids a row of a period is set
 * against that of the first period measured with the schedule in use, and
 * a change by more than list_threshold x max(that, 0.05) re-plans too,
 * checked before the times (the kernels' work changed: their latencies
 * with it). The planner gets the period's means: its latency models
 * predict each kernel on the measured lengths instead of the plan's
 * bounds.
 *
 * The planner itself is the caller's (a function, so that this layer does
 * not include the planner's: src/plan is above src/run); it runs on its own
 * thread with copies of what it reads, one plan at a time.
 */
#ifndef RAP_RUN_REPLAN_H
#define RAP_RUN_REPLAN_H

#include "run/rowfeed.h"
#include "run/runtime.h"
#include "run/trace.h"
#include "sched/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_REPLAN_WINDOWS RAP_WIN_EXPOSED /* windows with a capacity */

/* The planner: a schedule of plan p with fusion f over batch rows for the
 * capacities capacity_ms (RAP_REPLAN_WINDOWS), with lists[j] (n_lists
 * raw sparse columns; NULL, 0: not measured) the mean ids a row that
 * column held over the period checked, for the latency models in place of
 * the plan's bounds. Called on the replan thread; must not touch what the
 * training loop writes. */
typedef rap_status (*rap_replan_fn)(void *ctx, const rap_plan *p, const rap_fusion *f,
                                    int64_t batch, const double *capacity_ms,
                                    const double *lists, int n_lists, rap_schedule **out);

typedef struct {
    int64_t every;                              /* steps between checks (>= 1) */
    double threshold;                           /* relative drift that re-plans (> 0) */
    double tolerance;                           /* the capacity's allowed slowdown */
    double standalone_ms[RAP_REPLAN_WINDOWS];   /* T_w: each phase alone (0 unknown) */
    double capacity_ms[RAP_REPLAN_WINDOWS];     /* C_w the schedule was planned with */
    double list_threshold;                      /* relative change of a raw sparse column's
                                                 * mean ids a row that re-plans; 0 off */
    rap_replan_fn plan_fn;
    void *plan_ctx;
    const char *out;   /* each new schedule written to OUT.step<N> (N: the first step it
                        * preprocesses for, see rap_replan_step), or NULL */
} rap_replan_config;

/* One period's measurement and the schedule's prediction. */
typedef struct {
    int64_t steps;                       /* timed steps in the period */
    double phase_ms[4], exposed_ms;      /* measured means */
    double pred_phase_ms[4], pred_exposed_ms;
    double load_ms[RAP_WIN_COUNT];       /* the schedule's load per window */
} rap_replan_measure;

/* A swap, as reported. */
typedef struct {
    int64_t step;          /* swapped in after this step */
    int64_t checked_step;  /* the check that started the plan */
    double plan_s;         /* seconds the planner took (on its thread) */
    char why[512];         /* the drift that started it */
    char path[600];        /* where the schedule was written, or "" */
} rap_replan_event;

/* The prediction of s (NULL: no slices) with capacities cap into m's pred_*
 * and load_ms. Can't fail. */
void rap_replan_predict(const rap_replan_config *c, const double *cap, const rap_schedule *s,
                        rap_replan_measure *m);
/* Whether m drifts from its prediction (see above); why says how. */
bool rap_replan_drift(const rap_replan_config *c, const rap_replan_measure *m, char *why,
                      size_t why_len);
/* The phases whose windows hold no load in m: their measured mean is the
 * phase alone on this input (the capacity file's T_w was measured on other
 * rows or another GPU), so it becomes their T_w in standalone (m's
 * prediction redone). Without this a slower phase with nothing to move
 * out of it would re-plan at every check. Returns how many changed by more
 * than the threshold. */
int rap_replan_reference(rap_replan_config *c, const double *cap, const rap_schedule *s,
                         rap_replan_measure *m);
/* Capacities re-estimated from m (see above): cap_now -> cap_new. */
void rap_replan_capacities(const rap_replan_config *c, const rap_replan_measure *m,
                           const double *cap_now, double *cap_new);

typedef struct rap_replan rap_replan;

/* Whether the mean list lengths of a period (now, the columns' ids per
 * row) moved from those of the base period by more than the threshold;
 * why names the first column that did. ns columns. */
bool rap_replan_lists_drift(const rap_replan_config *c, const double *base, const double *now,
                            int ns, int64_t steps, char *why, size_t why_len);

/* For the runtime's plan p, fusion f and batch rows; `initial` the schedule
 * in use (NULL: none, as in the modes without slices; not owned); feed the
 * runtime's row feed (not owned; NULL: no list lengths, e.g. mps mode or a
 * shard). RAP_ERR_ARG for a bad config. */
rap_status rap_replan_create(const rap_replan_config *c, const rap_plan *p, const rap_fusion *f,
                             int64_t batch, const rap_schedule *initial, rap_rowfeed *feed,
                             rap_replan **out);
/* After step `step` of the training loop: every `every` steps a check of
 * rt's stats since the last (starting the planner's thread on a drift);
 * once a plan is ready, its schedule swapped into rt (*swapped true, ev
 * filled; the swap traced on tr when given). A failed plan is reported
 * with a warning and training goes on with the schedule in use. */
rap_status rap_replan_step(rap_replan *r, rap_runtime *rt, int64_t step, rap_trace *tr,
                           rap_replan_event *ev, bool *swapped);
/* Swaps and checks of this run. */
void rap_replan_counts(const rap_replan *r, int64_t *checks, int64_t *plans, int64_t *swaps);
/* Waits for a plan in flight (its result dropped), frees the schedules
 * made (the runtime must be freed first, or not use them again). NULL ok. */
void rap_replan_free(rap_replan *r);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_REPLAN_H */
