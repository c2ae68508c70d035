/*
 * search.h -- resource-aware split and schedule search: which training
 * window of iteration i runs each (piece of a) fused kernel of batch i+1
 * (docs/PLANNER.md, "Split" and "Search"); and the planner's JSON report.
 *
 * Costs and capacities are both ms of standalone work: a window of
 * capacity C hides slices whose predicted standalone latencies sum to at
 * most C. What fits nowhere goes to the `exposed` window.
 */
#ifndef RAP_PLAN_SEARCH_H
#define RAP_PLAN_SEARCH_H

#include "plan/capacity.h"
#include "plan/fusion_ilp.h"
#include "sched/schedule.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a kernel that fits whole in several windows goes (rap plan
 * --window-choice, in this order). */
typedef enum {
    RAP_CHOICE_SLOWDOWN = 0, /* the window it slows least (rap_window_rate) */
    RAP_CHOICE_EARLIEST,     /* first fit only: the earliest (the ablation of the rate) */
    RAP_CHOICE_ROOM          /* the most capacity left (ties: the earliest;
                              * docs/PLANNER.md: plans 0 and 1) */
} rap_window_choice;

typedef struct {
    const rap_predictor *pred;  /* NULL: analytic fallback */
    const rap_capacity *cap;    /* capacities of emb_forward .. grad_comm */
    int64_t batch;              /* B: rows of a batch; pieces tile [0, B) */
    int gpus;                   /* 1; see rap_place_zero_comm */
    bool no_split;              /* ablation: kernels only whole (the earliest window
                                 * where the whole kernel fits, else exposed) */
    rap_window_choice choice;   /* a kernel that fits whole: which window */
} rap_search_config;

typedef struct {
    double capacity_ms[RAP_WIN_COUNT]; /* exposed: 0 (hides nothing) */
    double load_ms[RAP_WIN_COUNT];     /* predicted standalone ms placed there */
    double exposed_ms[RAP_WIN_COUNT];  /* load beyond capacity; all of `exposed` */
    double hidden_ms, total_exposed_ms;
    int n_slices;
    int n_split;                       /* kernels cut into more than one slice */
} rap_search_result;

/* How much a ms of work slows window w (capacity file): the window may
 * slow by tolerance x standalone_ms for capacity_ms of work, so
 * standalone_ms / capacity_ms up to the common factor; HUGE_VAL for a
 * window without capacity, 0 when the standalone time is unknown. */
double rap_window_rate(const rap_capacity *cap, int w);

/* Predicted standalone ms of descs [d0, d1) of kernel k over rows [r0, r1)
 * (r1 RAP_ROWS_END or past B: to B). */
double rap_slice_ms(const rap_plan *p, const rap_fusion *f, const rap_predictor *pred, int k,
                    int d0, int d1, int64_t r0, int64_t r1, int64_t batch);

/* Places every kernel of f, in f's order (dependencies respected). A
 * kernel that fits whole in a window at or after its inputs' windows goes
 * to the one with the lowest rap_window_rate (ties: the earliest; with
 * RAP_CHOICE_EARLIEST: the earliest; with RAP_CHOICE_ROOM: the most
 * capacity left); the first-fit schedule (as with RAP_CHOICE_EARLIEST) is
 * kept instead when it exposes less, or (not with RAP_CHOICE_ROOM) as much
 * with less slowdown (sum of load
 * x rate). Otherwise each piece goes to the earliest
 * window at or after the windows of its
 * inputs' last pieces where it fits the capacity left; a kernel that does
 * not fit whole is split by descriptors, then (one descriptor) by rows,
 * the r0 == 0 piece first, so that the first piece fills what is left;
 * the rest moves on to the next windows, and to `exposed` when nothing
 * fits. The schedule is validated (rap_schedule_validate) before return. */
rap_status rap_schedule_search(const rap_plan *p, const rap_fusion *f, const rap_search_config *c,
                               const char *source, rap_schedule **out, rap_search_result *res);

/* Multi-GPU placement seam: the GPU of every plan node (gpu_of[N]).
 * One GPU: all 0. The zero-communication start (sparse features on the GPU
 * of their table, dense ones data parallel) and moves that lower the
 * predicted exposed latency including communication come later: gpus > 1
 * returns RAP_ERR_ARG "not implemented". */
rap_status rap_place_zero_comm(const rap_plan *p, int gpus, int *gpu_of);

/* Where rap plan --parse gpu put the GPU parse (parse_model.h,
 * rap_parse_place): lines and predicted ms per window (0: none). */
typedef struct {
    int64_t lines_total;                 /* B (1 + reject share), whole tiles */
    int64_t lines[RAP_WIN_COUNT];
    double ms[RAP_WIN_COUNT];
    double room_ms[RAP_WIN_COUNT];       /* capacity - the slices' load, before the parse */
    int64_t lines_over;                  /* lines put past every window's room */
    const char *model;                   /* the parse model's file */
} rap_parse_placement;
/* The report's JSON object of pp: {"model", "lines", "lines_over_room",
 * "windows": [{"name", "lines", "predicted_ms", "room_ms"}]}. */
void rap_parse_placement_json(FILE *fp, const rap_parse_placement *pp);

/* What the report says about where the numbers came from. */
typedef struct {
    const char *plan_name;
    const char *gpu;
    const char *latency_model;   /* "xgboost DIR" or "analytic fallback (no predictor)" */
    const char *capacity_source; /* file or "assumed (no capacity file)" */
    const char *fusion_method;   /* "ilp" or "levels" */
    const rap_ilp_result *ilp;   /* NULL when not the ILP */
    double fusion_predicted_ms; /* sum over whole kernels of the fusion used */
    int greedy_kernels;
    double greedy_predicted_ms;
    int64_t batch;
    const rap_parse_placement *parse; /* rap plan --parse gpu; NULL: none (nothing written) */
} rap_report_info;

/* Writes the JSON report: ops (id, node, line, type, variant, inputs as
 * op ids, raw input), kernels (one entry per slice: kernel, ops, descs,
 * rows, window, order, predicted_ms), windows in training order with
 * `exposed` last (name, capacity_ms, load_ms, exposed_ms), totals. */
rap_status rap_plan_report_json(FILE *fp, const rap_plan *p, const rap_fusion *f,
                                const rap_schedule *s, const rap_search_result *r,
                                const rap_report_info *info);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_SEARCH_H */
