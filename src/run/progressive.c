/* progressive.c -- progressive validation's window: the CPU reference, the
 * statistics of a window and the object both backends fill
 * (progressive.h). */
#include "run/progressive.h"

#include "core/core.h"
#include "run/metrics.h"

#include <math.h>
#include <string.h>

/* The window (progressive.h): on the host for the CPU model, on the device
 * for the GPU model (then h_hist and h_sums hold what a read copied). */
struct rap_progressive {
    rap_device dev;
    void *stream;          /* GPU: the model's */
    int64_t window;        /* W */
    int64_t seen;          /* rows added since create */
    float *ring_s;         /* (W) logits: host (CPU) or device */
    float *ring_y;         /* (W) labels */
    uint32_t *hist;        /* (2, H) negatives, positives per bin: host or device */
    rap_pv_sums *sums;     /* host or device */
    uint32_t *h_hist;      /* GPU: (2, H) host copy read back */
    rap_pv_sums h_sums;
};

int rap_pv_bin(float s)
{
    float v = (s + RAP_PV_LOGIT_RANGE) * (float)(RAP_PV_BINS / (2.0 * RAP_PV_LOGIT_RANGE));
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)RAP_PV_BINS)
        return RAP_PV_BINS - 1;
    return (int)v; /* v >= 0: truncation is floor */
}

int64_t rap_pv_loss_fx(float s, float y)
{
    double t = rap_bce_logit((double)s, y != 0.0f ? 1.0 : 0.0);
    if (t > RAP_PV_LOSS_CAP)
        t = RAP_PV_LOSS_CAP;
    return (int64_t)llrint(t * RAP_PV_LOSS_SCALE);
}

int64_t rap_pv_pred_fx(float s)
{
    double p = 1.0 / (1.0 + exp(-(double)s));
    return (int64_t)llrint(p * RAP_PV_PRED_SCALE);
}

/* Adds (sign +1) or removes (-1) one row from the histogram and sums. */
static void pv_count(uint32_t *hist, rap_pv_sums *sums, float s, float y, int sign)
{
    bool pos = y != 0.0f;
    sums->rows += sign;
    sums->pos += pos ? sign : 0;
    if (!isfinite(s)) {
        sums->nonfinite += sign;
        return;
    }
    hist[(pos ? RAP_PV_BINS : 0) + rap_pv_bin(s)] += (uint32_t)sign;
    sums->loss_fx += sign * rap_pv_loss_fx(s, y);
    sums->pred_fx += sign * rap_pv_pred_fx(s);
}

void rap_pv_add_ref(float *ring_s, float *ring_y, uint32_t *hist, rap_pv_sums *sums,
                    int64_t window, int64_t seen, const float *logit, const float *label,
                    int64_t rows)
{
    for (int64_t k = 0; k < rows; k++) {
        int64_t g = seen + k, at = g % window;
        if (g >= window)
            pv_count(hist, sums, ring_s[at], ring_y[at], -1);
        float y = label[k] != 0.0f ? 1.0f : 0.0f;
        ring_s[at] = logit[k];
        ring_y[at] = y;
        pv_count(hist, sums, logit[k], y, +1);
    }
}

void rap_pv_stats(const uint32_t *hist, const rap_pv_sums *sums, int64_t seen,
                  rap_progressive_stats *out)
{
    memset(out, 0, sizeof *out);
    out->rows = sums->rows;
    out->seen = seen;
    out->positives = sums->pos;
    out->nonfinite = sums->nonfinite;
    int64_t finite = sums->rows - sums->nonfinite;
    out->logloss = finite > 0 ? (double)sums->loss_fx / RAP_PV_LOSS_SCALE / (double)finite : NAN;
    out->pred_mean = finite > 0 ? (double)sums->pred_fx / RAP_PV_PRED_SCALE / (double)finite
                                : NAN;
    out->label_mean = sums->rows > 0 ? (double)sums->pos / (double)sums->rows : NAN;
    out->calibration = sums->pos > 0 ? out->pred_mean / out->label_mean : NAN;
    /* AUC: bins in ascending logit order; a positive beats every negative
     * of a lower bin and ties (1/2) those of its own */
    const uint32_t *neg = hist, *pos = hist + RAP_PV_BINS;
    double below = 0, win = 0, tie = 0, P = 0, N = 0;
    for (int b = 0; b < RAP_PV_BINS; b++) {
        double p = pos[b], n = neg[b];
        win += p * below + 0.5 * p * n;
        tie += p * n;
        below += n;
        P += p;
        N += n;
    }
    out->auc = P > 0 && N > 0 ? win / (P * N) : NAN;
    out->auc_err = P > 0 && N > 0 ? 0.5 * tie / (P * N) : NAN;
}

rap_status rap_progressive_create(int64_t window, rap_device dev, void *stream,
                                  rap_progressive **out)
{
    *out = NULL;
    if (window < 1 || window > RAP_PV_MAX_WINDOW)
        return rap_fail(RAP_ERR_ARG, "--progressive-window %lld: must be 1..%d rows",
                        (long long)window, RAP_PV_MAX_WINDOW);
    rap_progressive *pv = rap_calloc(sizeof *pv, "progressive validation");
    if (!pv)
        return RAP_ERR_NOMEM;
    pv->dev = dev;
    pv->stream = stream;
    pv->window = window;
    size_t hb = sizeof(uint32_t) * 2 * RAP_PV_BINS;
    rap_status st = RAP_OK;
    if (dev == RAP_GPU) {
        st = rap_pv_gpu_alloc(window, (void **)&pv->ring_s, (void **)&pv->ring_y,
                              (void **)&pv->hist, (void **)&pv->sums, stream);
        if (st == RAP_OK && !(pv->h_hist = rap_malloc(hb, "progressive histogram")))
            st = RAP_ERR_NOMEM;
    } else {
        pv->ring_s = rap_malloc(sizeof(float) * (size_t)window, "progressive window");
        pv->ring_y = rap_malloc(sizeof(float) * (size_t)window, "progressive window");
        pv->hist = rap_calloc(hb, "progressive histogram");
        pv->sums = rap_calloc(sizeof *pv->sums, "progressive sums");
        if (!pv->ring_s || !pv->ring_y || !pv->hist || !pv->sums)
            st = RAP_ERR_NOMEM;
    }
    if (st != RAP_OK) {
        rap_progressive_free(pv);
        return st;
    }
    *out = pv;
    return RAP_OK;
}

void rap_progressive_free(rap_progressive *pv)
{
    if (!pv)
        return;
    if (pv->dev == RAP_GPU) {
        rap_pv_gpu_free(pv->ring_s);
        rap_pv_gpu_free(pv->ring_y);
        rap_pv_gpu_free(pv->hist);
        rap_pv_gpu_free(pv->sums);
        rap_free(pv->h_hist);
    } else {
        rap_free(pv->ring_s);
        rap_free(pv->ring_y);
        rap_free(pv->hist);
        rap_free(pv->sums);
    }
    rap_free(pv);
}

rap_status rap_progressive_add(rap_progressive *pv, const float *logit, const float *label,
                               int64_t rows)
{
    if (rows < 0 || rows > pv->window)
        return rap_fail(RAP_ERR_ARG, "progressive validation: %lld rows in one step, the "
                        "window holds %lld (--progressive-window must be at least the batch)",
                        (long long)rows, (long long)pv->window);
    if (rows == 0)
        return RAP_OK;
    if (pv->dev == RAP_GPU)
        RAP_TRY(rap_pv_gpu_add(pv->ring_s, pv->ring_y, pv->hist, pv->sums, pv->window, pv->seen,
                               logit, label, rows, pv->stream));
    else
        rap_pv_add_ref(pv->ring_s, pv->ring_y, pv->hist, pv->sums, pv->window, pv->seen, logit,
                       label, rows);
    pv->seen += rows;
    return RAP_OK;
}

rap_status rap_progressive_read(rap_progressive *pv, rap_progressive_stats *out)
{
    if (pv->dev == RAP_GPU) {
        RAP_TRY(rap_pv_gpu_read(pv->hist, pv->sums, pv->h_hist, &pv->h_sums, pv->stream));
        rap_pv_stats(pv->h_hist, &pv->h_sums, pv->seen, out);
    } else {
        rap_pv_stats(pv->hist, pv->sums, pv->seen, out);
    }
    return RAP_OK;
}

rap_status rap_progressive_read_raw(rap_progressive *pv, uint32_t *hist, rap_pv_sums *sums)
{
    size_t hb = sizeof(uint32_t) * 2 * RAP_PV_BINS;
    if (pv->dev == RAP_GPU)
        return rap_pv_gpu_read(pv->hist, pv->sums, hist, sums, pv->stream);
    memcpy(hist, pv->hist, hb);
    *sums = *pv->sums;
    return RAP_OK;
}
