/*
 * parse_model.h -- the GPU parse's latency model and its place in a
 * schedule (docs/PLANNER.md "The parse in the windows").
 *
 * `rap profile kernels` times the parse kernels (parse_gpu.h) on generated
 * Criteo text at several line counts and two line lengths (the generated
 * rows, and the same rows with their categorical fields empty), and fits,
 * by least squares, the standalone milliseconds of a launch of n lines of
 * b bytes:
 *
 *     ms(n, b) = ms0 + ms_per_line * n + ms_per_byte * b
 *
 * (a coefficient the fit makes negative is dropped and the rest refitted:
 * a line or a byte never costs less than nothing). The model is a small
 * text file, versioned:
 *
 *     rap-parse-model 1
 *     gpu NVIDIA H200
 *     fit ms0=0.0042 ms_per_line=1.9e-06 ms_per_byte=0 bytes_per_line=252.1 rel_rms=0.031
 *     point lines=1024 bytes=258113 ms=0.0061
 *     ...                                     (the measurements, for the record)
 *
 * bytes_per_line is the generated rows' mean line (with its '\n'): what
 * the planner takes a training line to hold. `rap plan --parse gpu` adds
 * the parse of B (1 + RAP_PARSE_REJECT_SHARE) lines, rounded up to whole
 * tiles, to the windows after the kernels are placed (rap_parse_place).
 */
#ifndef RAP_PLAN_PARSE_MODEL_H
#define RAP_PLAN_PARSE_MODEL_H

#include "plan/predictor.h"
#include "plan/search.h"
#include "sched/schedule.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PARSE_MODEL_VERSION 1
#define RAP_PARSE_MODEL_POINTS 256  /* measurements a file holds at most */
#define RAP_PARSE_REJECT_SHARE 0.01 /* lines parsed a training row: 1 + this */
#define RAP_PARSE_PLAN_TILE 64      /* budgets in whole tiles (RAP_PARSE_TILE) */

typedef struct {
    int64_t lines, bytes;
    double ms;                   /* median standalone ms of one launch */
} rap_parse_point;

typedef struct {
    char gpu[RAP_GPU_NAME];
    double ms0, ms_per_line, ms_per_byte;
    double bytes_per_line;       /* > 0 */
    double rel_rms;              /* the fit's relative RMS error over the points */
    rap_parse_point pt[RAP_PARSE_MODEL_POINTS];
    int n_points;
    char source[512];            /* file name, for messages */
} rap_parse_model;

/* Fits m's coefficients to pts[0..n) (n >= 2, lines and ms > 0): least
 * squares of ms on (1, lines, bytes), a negative slope dropped and the
 * rest refitted (with the lines and bytes of every point proportional the
 * bytes' slope is dropped); copies up to RAP_PARSE_MODEL_POINTS points and
 * sets gpu and bytes_per_line. RAP_ERR_ARG for fewer than 2 usable points
 * or a singular fit. */
rap_status rap_parse_model_fit(const rap_parse_point *pts, int n, const char *gpu,
                               double bytes_per_line, rap_parse_model *m);
/* Predicted standalone ms of one launch of n lines of b bytes (>= 0). */
double rap_parse_model_ms(const rap_parse_model *m, int64_t lines, int64_t bytes);
/* ... of n lines of the model's mean length. */
double rap_parse_model_lines_ms(const rap_parse_model *m, int64_t lines);

rap_status rap_parse_model_write(const rap_parse_model *m, FILE *f);
rap_status rap_parse_model_save(const rap_parse_model *m, const char *path);
/* Reads a model file (hostile: bounded, every value checked; RAP_ERR_DATA
 * naming the file and line, RAP_ERR_IO when it cannot be read). */
rap_status rap_parse_model_load(const char *path, rap_parse_model *m);

/* Adds the parse of a batch of `batch` rows to s (its parse lines) after
 * the kernels were placed (sr: the search's capacities and loads): the
 * lines go greedily to the training window with the most room left (its
 * capacity minus its slices' load, ties the earliest), as many whole
 * tiles as fit there, then on to the next; what fits nowhere goes to the
 * window that had the most room. Never to exposed. RAP_ERR_ARG for a
 * batch < 1; the schedule's errors. */
rap_status rap_parse_place(const rap_parse_model *m, const rap_search_result *sr, int64_t batch,
                           double reject_share, rap_schedule *s, rap_parse_placement *out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_PARSE_MODEL_H */
