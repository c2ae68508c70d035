/*
 * fusion_ilp.h -- horizontal fusion as an integer program (GLPK).
 *
 * Every live op is given a stage 1..S; ops of one kernel type (op +
 * variant) at one stage form one kernel; an op's stage is later than its
 * input's. Minimised: the predicted total latency, linearised per kernel
 * type as fixed_ms (what a kernel costs whatever it holds: launches) per
 * kernel plus a per-op part that fusion does not change (docs/PLANNER.md,
 * "Fusion ILP"). With S = the longest chain + extra_stages; exact (every
 * fusion representable) when S = the number of ops.
 */
#ifndef RAP_PLAN_FUSION_ILP_H
#define RAP_PLAN_FUSION_ILP_H

#include "plan/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const rap_predictor *pred; /* NULL: analytic fallback */
    int64_t batch;             /* rows the kernels will run over */
    double time_limit_s;       /* GLPK tm_lim; the best incumbent is used after it */
    int extra_stages;          /* stages beyond the longest chain; < 0: one per op (exact) */
    bool verbose;              /* GLPK messages */
    /* Capacity-aware variant (NULL: off): capacities of windows
     * 0..n_windows-2 in ms; window n_windows-1 is `exposed`. Stages are
     * then (window, sub-stage) pairs, kernels are placed whole, and the
     * objective is the predicted exposed ms (+ 1 % of the total). Copies
     * of isomorphic subtrees are placed together (a restriction here). */
    const double *window_cap_ms;
    int n_windows;
} rap_ilp_config;

rap_ilp_config rap_ilp_defaults(void);

#define RAP_ILP_MAX_TYPES 64

/* The linearised cost: kernel type t costs fixed_ms[t] a kernel; per-op
 * parts add up to const_ms whatever the fusion. */
typedef struct {
    int n;
    rap_op_type op[RAP_ILP_MAX_TYPES];
    int variant[RAP_ILP_MAX_TYPES];
    int n_ops[RAP_ILP_MAX_TYPES];
    double fixed_ms[RAP_ILP_MAX_TYPES];
    double margin_ms[RAP_ILP_MAX_TYPES]; /* per op of the type */
    double const_ms;
} rap_ilp_costs;

rap_status rap_ilp_costs_of(const rap_plan *p, const rap_ilp_config *cfg, rap_ilp_costs *c);
/* Index of (op, variant) in c, or -1. */
int rap_ilp_type(const rap_ilp_costs *c, rap_op_type op, int variant);
/* The ILP's objective for any fusion f of p: sum of fixed_ms + const_ms. */
double rap_ilp_objective(const rap_ilp_costs *c, const rap_fusion *f);

typedef struct {
    int n_ops, n_types, n_stages, n_cols, n_rows;
    int n_reps;          /* ops with variables: one per class of isomorphic subtrees */
    int n_kernels;
    double objective;    /* ms, of the fusion returned */
    double bound;        /* ms, best lower bound known when the solver stopped */
    double gap;          /* (objective - bound) / objective */
    double solve_s;      /* wall time of the whole call */
    bool optimal;        /* proven optimal (for this S) */
    bool time_limit;     /* stopped by tm_lim: incumbent returned */
    bool capacity_aware; /* the variant ran (false: off, or too large) */
    double exposed_ms;   /* capacity-aware: predicted exposed ms of whole kernels */
    char status[64];
} rap_ilp_result;

/* Solves and writes the fusion to f (kernels by stage, then by the first
 * node of the type; nodes in plan order; level = stage). */
rap_status rap_fuse_ilp(const rap_plan *p, const rap_ilp_config *cfg, rap_fusion *f,
                        rap_ilp_result *res);

/* Sum over kernels of the predicted standalone ms of the whole kernel. */
double rap_fusion_predicted_ms(const rap_plan *p, const rap_fusion *f, const rap_predictor *pred,
                               int64_t batch);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_FUSION_ILP_H */
