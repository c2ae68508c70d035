/*
 * metrics.h -- evaluation metrics and the --metrics JSON-lines file.
 *
 * Evaluation keeps one logit and one label per evaluated row (8 bytes) and
 * computes, over all of them: exact ROC AUC (rap_auc, ties count 1/2),
 * logloss (mean binary cross-entropy of sigmoid(logit), computed from the
 * logit so that it never takes log(0)), and accuracy (a row is predicted
 * positive when sigmoid(logit) >= 0.5, i.e. logit >= 0).
 */
#ifndef RAP_RUN_METRICS_H
#define RAP_RUN_METRICS_H

#include "core/out.h"
#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float *score;  /* (n) logits */
    float *label;  /* (n) 0 or 1 */
    int64_t n, cap;
} rap_eval_acc;

typedef struct {
    int64_t rows;
    double auc;       /* NaN when one class is absent */
    double logloss;
    double accuracy;
} rap_eval_result;

/* Appends n (logit, label) pairs, growing the arrays. */
rap_status rap_eval_add(rap_eval_acc *a, const float *logit, const float *label, int64_t n);
void rap_eval_reset(rap_eval_acc *a);
/* Metrics over everything added. Can't fail; with no rows every value is NaN. */
rap_eval_result rap_eval_compute(const rap_eval_acc *a);
void rap_eval_free(rap_eval_acc *a);

/* Mean BCE-with-logits of one row (the model's loss, in double). */
double rap_bce_logit(double logit, double label);

/* The metrics file: one JSON object per line, each line one write(2) to
 * the file (core/out.h's stream: locked for as long as it is open, no
 * temporary), so a reader sees it grow and a crash leaves whole lines. */
typedef struct {
    rap_out *o;
    char path[512];
} rap_metrics_file;

/* path "" : no file (every write is a no-op). Takes the file's lock (a
 * second writer fails at once), then truncates an existing file. */
rap_status rap_metrics_open(rap_metrics_file *m, const char *path);
/* Writes one line: a JSON object whose members are given as a
 * printf-format of members with no braces, e.g. "\"event\":\"step\",\"step\":%lld". */
rap_status rap_metrics_line(rap_metrics_file *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
rap_status rap_metrics_close(rap_metrics_file *m);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_METRICS_H */
