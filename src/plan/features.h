/*
 * features.h -- what the latency predictor knows about a kernel slice, and
 * the analytic fallback model. Every feature is computed from the plan,
 * the fusion and the batch size alone (static facts of rap_node: kinds,
 * widths, bounds on ids per row; while training, the raw columns' measured
 * mean ids a row in place of the bound), so nothing has to run to predict.
 * docs/PLANNER.md ("Cost model") defines each one.
 */
#ifndef RAP_PLAN_FEATURES_H
#define RAP_PLAN_FEATURES_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of features handed to a predictor model (columns 3.. of the CSV
 * after gpu, op, variant): descs, rows, avg_width, total_ids, bytes,
 * batch_rows. */
#define RAP_KFEAT_N 6

/* One kernel slice: descriptors [d0, d1) of a fused kernel over `rows`
 * rows of a batch of `batch_rows` rows. */
typedef struct {
    rap_op_type op;
    int variant;          /* rap_node_variant */
    bool computed;        /* output offsets computed (3 phases, 3 launches) */
    double descs;         /* fused ops in the slice (fusion degree) */
    double rows;          /* rows the slice runs over */
    double avg_width;     /* mean over descs of the input's ids per row (1 for dense) */
    double total_ids;     /* rows * sum over descs of the input's ids per row */
    double bytes;         /* estimated bytes read + written (rap_prep_kernel_bytes' rules) */
    double batch_rows;    /* rows of the whole batch; 0 for a computed kernel's
                           * piece with r0 > 0 (it scans nothing) */
} rap_kfeat;

/* The analytic fallback: ms = launches * launch_ms + bytes / bandwidth. */
typedef struct {
    double launch_ms;     /* per kernel launch (computed kernels launch 3 times) */
    double gbytes_per_s;  /* effective memory bandwidth, GB/s */
} rap_analytic;

/* Defaults (an H100/H200-class GPU, labelled as assumed in reports):
 * 6 us a launch, 2000 GB/s. */
rap_analytic rap_analytic_defaults(void);
double rap_analytic_ms(const rap_analytic *a, const rap_kfeat *f);

/* Estimated bytes one row of node `node` reads and writes (per desc). */
double rap_node_row_bytes(const rap_plan *p, int node);
/* Ids (or values) per row of node's input (1 for dense inputs): the
 * measured mean of its raw column where re-planning set one (rap_node.
 * mean_ids, through ops that keep lengths), else the bound ids_per_row. */
double rap_node_in_width(const rap_plan *p, int node);

/* Features of descs [d0, d1) of the kernel made of nodes[0..n) (all of
 * one op and variant) over `rows` rows of a batch of batch_rows rows. */
void rap_kfeat_of(const rap_plan *p, const int *nodes, int d0, int d1, double rows,
                  double batch_rows, rap_kfeat *f);
/* Features of a row kernel's descs [d0, d1) (whole groups, ops of any
 * types): op RAP_OP_INPUT (type name "rows"), variant 0, not computed;
 * descs counts its ops, widths and bytes summed over them as above. */
void rap_kfeat_of_rows(const rap_plan *p, const int *nodes, int d0, int d1, double rows,
                       rap_kfeat *f);
/* The feature vector for a model, in CSV column order (RAP_KFEAT_N). */
void rap_kfeat_vector(const rap_kfeat *f, float out[RAP_KFEAT_N]);

/* "sigrid_hash.10": the kernel type's key (op name, variant); row kernels
 * (RAP_OP_INPUT): "rows.0". */
void rap_ktype_name(rap_op_type op, int variant, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_FEATURES_H */
