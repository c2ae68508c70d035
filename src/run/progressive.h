/*
 * progressive.h -- progressive validation: every training batch evaluated
 * before it is trained on, from the training forward pass itself
 * (docs/TRAINING.md "Progressive validation").
 *
 * The runtime hands the (logit, label) pairs of each step's mlp_forward --
 * computed with the weights before the step's update -- to
 * rap_progressive_add, on the model's device: nothing is predicted twice
 * and, on the GPU, nothing comes back to the host per step. The statistics
 * cover the last W rows added (the window):
 *
 *   ring     (W) the last W pairs (logit, label), to take each row out of
 *            the statistics again when it leaves the window
 *   hist     (2, H) rows per logit bin, negatives then positives: bin b
 *            holds logits in [-L + b*w, -L + (b+1)*w), w = 2L/H, clamped
 *            at both ends (H = RAP_PV_BINS, L = RAP_PV_LOGIT_RANGE)
 *   sums     integers, so that adding and removing rows is exact and the
 *            order of the additions (GPU atomics) does not matter: the
 *            logloss terms and sigmoid(logit) in fixed point (2^-24 and
 *            2^-32), the positives, the non-finite logits
 *
 * AUC from the histogram: pairs in different bins are ordered by their
 * bins; pairs in one bin count 1/2 (as ties do in rap_auc). The exact AUC
 * of the window's logits therefore lies within auc_err = (sum_b pos_b *
 * neg_b) / (2 P N) of the reported one: auc_err is computed from the same
 * histogram and reported beside it. With 65536 bins of 1/2048 logit it is
 * about 1e-4 or less on spread predictions. Logloss: within 2^-25 of the
 * mean of the per-row terms in double (each rounded to 2^-24); calibration
 * = mean sigmoid / mean label (each sigmoid rounded to 2^-32).
 *
 * The CPU model's rows go through rap_pv_add_ref (the reference, row by row
 * in order); the GPU's through one kernel per step (progressive_gpu.cu)
 * whose integers equal the reference's, bin for bin (tests/test_progressive.c).
 *
 *   rap_progressive *pv;
 *   rap_progressive_create(W, RAP_GPU, stream, &pv);   // before the loop
 *   ... rap_progressive_add(pv, logits_dev, labels_dev, rows) each step ...
 *   rap_progressive_read(pv, &ps);                     // at a log line
 *   rap_progressive_free(pv);
 */
#ifndef RAP_RUN_PROGRESSIVE_H
#define RAP_RUN_PROGRESSIVE_H

#include "rap.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PV_BINS 65536          /* H */
#define RAP_PV_LOGIT_RANGE 16.0f   /* L: bins cover [-L, L) */
#define RAP_PV_LOSS_SCALE 16777216.0   /* 2^24: fixed point of a logloss term */
#define RAP_PV_PRED_SCALE 4294967296.0 /* 2^32: fixed point of sigmoid(logit) */
#define RAP_PV_LOSS_CAP 256.0      /* a term above this (|logit| > 256: diverged) is
                                    * summed as this: W * cap * 2^24 < 2^63 */
#define RAP_PV_DEFAULT_WINDOW 1048576 /* --progressive-window default (rows) */
#define RAP_PV_MAX_WINDOW (1 << 30)

/* The integer state both backends keep (host copy of the device's). */
typedef struct {
    int64_t rows;        /* rows in the window (<= W) */
    int64_t pos;         /* positives in the window */
    int64_t nonfinite;   /* rows whose logit is NaN or infinite (in no bin or sum) */
    int64_t loss_fx;     /* sum of logloss terms, fixed point RAP_PV_LOSS_SCALE */
    int64_t pred_fx;     /* sum of sigmoid(logit), fixed point RAP_PV_PRED_SCALE */
} rap_pv_sums;

/* What a read gives. */
typedef struct {
    int64_t rows;        /* rows in the window */
    int64_t seen;        /* rows added since create */
    int64_t positives;
    int64_t nonfinite;
    double auc;          /* NaN when the window holds one class only */
    double auc_err;      /* bound on |auc - exact AUC| (see above) */
    double logloss;      /* mean over the finite rows */
    double pred_mean;    /* mean sigmoid(logit) over the finite rows */
    double label_mean;   /* positives / rows */
    double calibration;  /* pred_mean / label_mean; NaN without positives */
} rap_progressive_stats;

typedef struct rap_progressive rap_progressive;

/* A window of W rows (1..RAP_PV_MAX_WINDOW; it must hold at least one
 * batch: the caller checks W >= B) on dev; GPU: the work is queued on
 * stream (the model's). Allocates everything here: add allocates nothing.
 * RAP_ERR_ARG for a bad W, RAP_ERR_NOMEM, RAP_ERR_NO_GPU. */
rap_status rap_progressive_create(int64_t window, rap_device dev, void *stream,
                                  rap_progressive **out);
void rap_progressive_free(rap_progressive *pv);

/* Adds rows pairs (logit, label), on the progressive's device (label 0 or
 * 1; anything else counts as 1), oldest rows leaving the window first.
 * rows <= W. GPU: queued on the stream (the pointers must stay valid until
 * it runs). */
rap_status rap_progressive_add(rap_progressive *pv, const float *logit, const float *label,
                               int64_t rows);

/* The window's statistics now (GPU: waits for the queued additions). */
rap_status rap_progressive_read(rap_progressive *pv, rap_progressive_stats *out);

/* The window's integers now (hist (2, H) and sums: the same on both
 * backends for the same rows; tests). GPU: waits for the queued work. */
rap_status rap_progressive_read_raw(rap_progressive *pv, uint32_t *hist, rap_pv_sums *sums);

/* ---- the parts both backends share (progressive.c) */

/* Bin of a finite logit: floor((s + L) * (H / 2L)) clamped to [0, H): the
 * two float operations, each rounded, are the same on host and device. */
int rap_pv_bin(float s);
/* The fixed-point terms of one finite logit s with label y. */
int64_t rap_pv_loss_fx(float s, float y);
int64_t rap_pv_pred_fx(float s);
/* CPU reference of one addition: state (ring (W) logits and labels, hist
 * (2, H), sums), `seen` rows added before. */
void rap_pv_add_ref(float *ring_s, float *ring_y, uint32_t *hist, rap_pv_sums *sums,
                    int64_t window, int64_t seen, const float *logit, const float *label,
                    int64_t rows);
/* Statistics of a state (hist (2, H), sums), seen rows added. Can't fail. */
void rap_pv_stats(const uint32_t *hist, const rap_pv_sums *sums, int64_t seen,
                  rap_progressive_stats *out);

/* ---- GPU part (progressive_gpu.cu; RAP_ERR_NO_GPU without CUDA) */

/* The device state: ring_s, ring_y (W), hist (2, H), sums (one
 * rap_pv_sums), zeroed. */
rap_status rap_pv_gpu_alloc(int64_t window, void **ring_s, void **ring_y, void **hist,
                            void **sums, void *stream);
void rap_pv_gpu_free(void *p);
/* One addition on stream: the kernel of rap_pv_add_ref. */
rap_status rap_pv_gpu_add(float *ring_s, float *ring_y, uint32_t *hist, rap_pv_sums *sums,
                          int64_t window, int64_t seen, const float *logit, const float *label,
                          int64_t rows, void *stream);
/* The device state into host hist (2, H) and sums, after the queued work. */
rap_status rap_pv_gpu_read(const uint32_t *hist_dev, const rap_pv_sums *sums_dev,
                           uint32_t *hist, rap_pv_sums *sums, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_PROGRESSIVE_H */
