/* train_watch.c -- progressive validation and the guards as the training
 * loop uses them (train_watch.h). */
#include "run/train_watch.h"

#include "core/core.h"
#include "core/json.h"

#include <math.h>
#include <string.h>

rap_status rap_train_watch_create(rap_train_watch *w, bool progressive, int64_t window,
                                  const rap_guard_config *gc, rap_device dev, void *stream,
                                  int64_t batch)
{
    memset(w, 0, sizeof *w);
    RAP_TRY(rap_guard_config_check(gc));
    rap_guards_init(&w->g, gc);
    w->window = window;
    if (!progressive)
        return RAP_OK;
    if (window < batch)
        return rap_fail(RAP_ERR_ARG, "--progressive-window %lld: the window must hold at least "
                        "one batch (--batch %lld)", (long long)window, (long long)batch);
    return rap_progressive_create(window, dev, stream, &w->pv);
}

void rap_train_watch_free(rap_train_watch *w)
{
    rap_progressive_free(w->pv);
    w->pv = NULL;
}

/* A rap_json_sink into a fixed buffer (cut at cap - 1 bytes, always
 * terminated). */
typedef struct {
    char *buf;
    size_t at, cap;
} str_sink;

static void sink_put(void *ctx, const char *s, size_t n)
{
    str_sink *k = ctx;
    for (size_t i = 0; i < n && k->at + 1 < k->cap; i++)
        k->buf[k->at++] = s[i];
    k->buf[k->at] = 0;
}

/* One guard event: a warning (a trip) or a notice (cleared), and a line. */
static rap_status report(rap_train_watch *w, const rap_guard_event *e, rap_metrics_file *mf,
                         rap_progress *pg)
{
    const char *act = w->g.c.action == RAP_GUARD_FAIL ? "fail" : "warn";
    if (pg)
        rap_progress_clear(pg);
    if (e->tripped)
        rap_warn("guard %s: %s%s", rap_guard_name(e->kind), e->why,
                 e->kind == RAP_GUARD_NAN || w->g.c.action == RAP_GUARD_FAIL
                     ? ""
                     : " (--guard warn: training goes on)");
    else
        rap_info("guard %s cleared: %s", rap_guard_name(e->kind), e->why);
    char v[32], why[600];
    str_sink k = {why, 0, sizeof why};
    rap_json_escape(e->why, sink_put, &k);
    return rap_metrics_line(mf, "\"event\":\"guard\",\"guard\":\"%s\",\"state\":\"%s\","
                            "\"step\":%lld,\"value\":%s,\"action\":\"%s\",\"why\":%s",
                            rap_guard_name(e->kind), e->tripped ? "tripped" : "cleared",
                            (long long)e->step, rap_json_num(e->value, v), act, why);
}

rap_status rap_train_watch_loss(rap_train_watch *w, int64_t step, double loss,
                                rap_metrics_file *mf, bool *stop)
{
    *stop = false;
    rap_guard_event e;
    if (!rap_guards_loss(&w->g, step, loss, &e))
        return RAP_OK;
    w->stop_ev = e;
    *stop = true; /* the weights it leaves are not finite: going on cannot recover */
    return report(w, &e, mf, NULL);
}

rap_status rap_train_watch_check(rap_train_watch *w, int64_t step, rap_metrics_file *mf,
                                 rap_progress *pg, char *keys, size_t keys_len, bool *stop)
{
    *stop = false;
    if (keys_len)
        keys[0] = 0;
    if (!w->pv)
        return RAP_OK;
    rap_progressive_stats *ps = &w->last;
    RAP_TRY(rap_progressive_read(w->pv, ps));
    rap_guard_event ev[2 * RAP_GUARD_COUNT];
    int n = 0;
    rap_guards_window(&w->g, step, w->window, ps, ev, &n);
    for (int i = 0; i < n; i++) {
        RAP_TRY(report(w, &ev[i], mf, pg));
        if (ev[i].tripped)
            w->stop_ev = ev[i];
    }
    *stop = rap_guards_stop(&w->g);
    char a[32], e[32], l[32], p[32], y[32], c[32], text[96];
    snprintf(keys, keys_len,
             ",\"pv_rows\":%lld,\"pv_auc\":%s,\"pv_auc_err\":%s,\"pv_logloss\":%s,"
             "\"pv_pred_mean\":%s,\"pv_label_mean\":%s,\"pv_calibration\":%s,"
             "\"pv_nonfinite\":%lld",
             (long long)ps->rows, rap_json_num(ps->auc, a), rap_json_num(ps->auc_err, e),
             rap_json_num(ps->logloss, l), rap_json_num(ps->pred_mean, p),
             rap_json_num(ps->label_mean, y), rap_json_num(ps->calibration, c),
             (long long)ps->nonfinite);
    snprintf(text, sizeof text, "pv AUC %.4f logloss %.4f cal %.3f", ps->auc, ps->logloss,
             ps->calibration);
    rap_progress_set_extra(pg, text);
    return RAP_OK;
}

rap_status rap_train_watch_replan_line(rap_metrics_file *mf, const rap_replan_event *ev)
{
    char why[1100], path[1300];
    str_sink a = {why, 0, sizeof why}, b = {path, 0, sizeof path};
    rap_json_escape(ev->why, sink_put, &a);
    rap_json_escape(ev->path, sink_put, &b);
    return rap_metrics_line(mf, "\"event\":\"replan\",\"step\":%lld,\"checked_step\":%lld,"
                            "\"plan_s\":%.3f,\"why\":%s,\"schedule\":%s", (long long)ev->step,
                            (long long)ev->checked_step, ev->plan_s, why, path);
}
