/*
 * capacity.h -- leftover capacity of each training window, in ms of
 * standalone work (docs/PLANNER.md, "Capacity file"). A capacity file is
 * made for one GPU, one model shape (tables, embedding dim, MLP widths),
 * one batch size, one precision, one storage type of the tables and one
 * optimizer; the planner refuses another.
 */
#ifndef RAP_PLAN_CAPACITY_H
#define RAP_PLAN_CAPACITY_H

#include "core/core.h"
#include "plan/predictor.h"
#include "sched/schedule.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_CAPACITY_VERSION 1
#define RAP_SHAPE_MAX_LAYERS 16
#define RAP_SHAPE_MAX_WIDTH (1 << 20) /* an MLP width or the embedding dim, at most */

typedef struct {
    int tables;                      /* T */
    int emb_dim;                     /* D */
    int bot[RAP_SHAPE_MAX_LAYERS];   /* bottom MLP widths */
    int n_bot;
    int top[RAP_SHAPE_MAX_LAYERS];   /* top MLP widths */
    int n_top;
    int64_t batch;                   /* rows per GPU */
    int precision;                   /* rap_precision: 0 fp32, 1 bf16 */
    int emb_dtype;                   /* rap_emb_dtype: 0 fp32, 1 bf16, 2 fp16 (a file
                                      * without the key: fp32) */
    int optimizer;                   /* rap_optimizer: 0 sgd, 1 adagrad, 2 rowwise-adagrad;
                                      * RAP_CAP_OPT_UNRECORDED from a file without the key */
} rap_model_shape;

/* The optimizer of a capacity file made before files recorded it: it was
 * measured with SGD (and used for Adagrad runs too), so it matches sgd and
 * adagrad, as every file did then, but not rowwise-adagrad. */
#define RAP_CAP_OPT_UNRECORDED (-1)

/* Windows emb_forward .. grad_comm (RAP_WIN_EXPOSED has no capacity). */
#define RAP_CAP_WINDOWS RAP_WIN_EXPOSED

typedef struct {
    char gpu[RAP_GPU_NAME];
    rap_model_shape shape;
    double tolerance;                      /* allowed slowdown of a phase (0.05 = 5 %) */
    double standalone_ms[RAP_CAP_WINDOWS]; /* the phase alone */
    double capacity_ms[RAP_CAP_WINDOWS];   /* standalone work it hides */
    bool assumed;                          /* built in, not measured */
    char source[512];                      /* file name or "<assumed>" */
} rap_capacity;

/* An assumed capacity for when no file is given (reports say so):
 * emb_forward 1.0, mlp_forward 0.5, mlp_backward 0.5, emb_backward 1.0,
 * grad_comm 0 ms (one GPU). */
void rap_capacity_assumed(const rap_model_shape *shape, const char *gpu, rap_capacity *c);
/* Checks values: non-negative, finite, at least one layer, ... */
rap_status rap_capacity_validate(const rap_capacity *c);
rap_status rap_capacity_load(const char *path, rap_capacity *c);
rap_status rap_capacity_save(const rap_capacity *c, const char *path);
rap_status rap_capacity_write(const rap_capacity *c, FILE *f);
/* RAP_ERR_ARG naming the first difference ("made for GPU X, not Y",
 * "made for 26 tables, not 27", "made for fp32 embedding tables, not
 * bf16", ...). gpu "" matches any. want's optimizer is the run's; c's may
 * be RAP_CAP_OPT_UNRECORDED (matches sgd and adagrad). */
rap_status rap_capacity_check(const rap_capacity *c, const char *gpu, const rap_model_shape *want);
/* "512-256-128" */
void rap_shape_widths(const int *w, int n, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_CAPACITY_H */
