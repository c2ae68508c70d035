/*
 * predictor.h -- standalone latency of a kernel slice, in ms.
 *
 * A predictor is a bundle (a directory): predictor.txt (version, the GPU it
 * was measured on, one line per kernel type), one XGBoost model file per
 * kernel type (op + variant, as rap_node_variant) and MANIFEST (each
 * file's size and 64-bit checksum, checked before anything is read). Kernel types without a
 * model, and every type when no bundle is given (NULL predictor), use the
 * analytic fallback (features.h) and are reported as such. Formats and
 * the training CSV: docs/PLANNER.md.
 */
#ifndef RAP_PLAN_PREDICTOR_H
#define RAP_PLAN_PREDICTOR_H

#include "plan/features.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PREDICTOR_VERSION 1
#define RAP_GPU_NAME 128

typedef struct rap_predictor rap_predictor;

/* Held-out quality of one kernel type's model. */
typedef struct {
    char type[64];        /* "sigrid_hash.10" */
    int n_train, n_test;
    double within10;      /* share of held-out kernels within 10 % */
    double median, p95, p99; /* relative error |pred - ms| / ms */
} rap_pred_quality;

/* Trains one model per kernel type found in csv_path (all rows of one GPU)
 * holding out a deterministic fifth (rows whose line hash is 0 mod 5), and
 * writes the bundle to dir (created when missing). q (may be NULL) gets
 * one entry per type, at most max_q; *n_q their number. */
rap_status rap_predictor_train(const char *csv_path, const char *dir, rap_pred_quality *q,
                               int max_q, int *n_q);
/* Loads a bundle: its MANIFEST first (every file's size and checksum),
 * then each file read once and checked against it, each model checked by
 * rap's own reader (xgb_check.h) before XGBoost loads it from memory.
 * RAP_ERR_IO (no MANIFEST, a file missing), RAP_ERR_DATA naming the file
 * and what was wrong. */
rap_status rap_predictor_load(const char *dir, rap_predictor **out);
/* Writes dir/MANIFEST for the bundle in dir as it is (predictor.txt and
 * its models), after loading it with that manifest: for a bundle written
 * before manifests, or by hand, that the user trusts (`rap predictor
 * manifest`). rap_predictor_train writes it itself. */
rap_status rap_predictor_write_manifest(const char *dir);
void rap_predictor_free(rap_predictor *p);
/* The GPU the bundle was measured on ("" for NULL). */
const char *rap_predictor_gpu(const rap_predictor *p);
/* RAP_ERR_ARG "predictor DIR was made for GPU X, not Y" when gpu differs. */
rap_status rap_predictor_check(const rap_predictor *p, const char *gpu);
/* Predicted standalone ms of a slice (p NULL: analytic defaults). *model
 * (may be NULL) is set to whether a trained model answered. */
double rap_predict_ms(const rap_predictor *p, const rap_kfeat *f, bool *model);
/* Number of kernel types with a model, and quality of type i. */
int rap_predictor_n_types(const rap_predictor *p);
const rap_pred_quality *rap_predictor_quality(const rap_predictor *p, int i);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_PREDICTOR_H */
