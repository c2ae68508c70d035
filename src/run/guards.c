/* guards.c -- the checks of the training guards (guards.h). */
#include "run/guards.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

static const char *const g_names[RAP_GUARD_COUNT] = {"nan", "auc", "calibration"};

const char *rap_guard_name(rap_guard_kind k)
{
    return (unsigned)k < RAP_GUARD_COUNT ? g_names[k] : "?";
}

void rap_guard_defaults(rap_guard_config *c)
{
    memset(c, 0, sizeof *c);
    c->action = RAP_GUARD_WARN;
    c->nan = true;
    c->auc_rows = RAP_GUARD_DEFAULT_AUC_ROWS;
    c->calib_factor = RAP_GUARD_DEFAULT_CALIBRATION;
}

rap_status rap_guard_config_check(const rap_guard_config *c)
{
    if (c->calib_factor != 0 && !(c->calib_factor > 1))
        return rap_fail(RAP_ERR_ARG, "--guard-calibration %g: the factor must be above 1 "
                        "(0: the guard off)", c->calib_factor);
    if (c->auc_rows < 0)
        return rap_fail(RAP_ERR_ARG, "--guard-auc-rows %lld: must be 0 (off) or more",
                        (long long)c->auc_rows);
    return RAP_OK;
}

void rap_guards_init(rap_guards *g, const rap_guard_config *c)
{
    memset(g, 0, sizeof *g);
    g->c = *c;
    g->auc_since = -1;
}

bool rap_guards_loss(rap_guards *g, int64_t step, double loss, rap_guard_event *ev)
{
    if (!g->c.nan || isfinite(loss) || g->tripped[RAP_GUARD_NAN])
        return false;
    g->tripped[RAP_GUARD_NAN] = true;
    g->trips++;
    memset(ev, 0, sizeof *ev);
    ev->kind = RAP_GUARD_NAN;
    ev->tripped = true;
    ev->step = step;
    ev->value = loss;
    snprintf(ev->why, sizeof ev->why, "the training loss is %s at step %lld",
             isnan(loss) ? "NaN" : "infinite", (long long)step);
    return true;
}

/* Sets guard k's state to on; an event when it changed. */
static void change(rap_guards *g, rap_guard_kind k, bool on, int64_t step, double value,
                   const char *why, rap_guard_event *ev, int *n)
{
    if (g->tripped[k] == on)
        return;
    g->tripped[k] = on;
    g->trips += on;
    rap_guard_event *e = &ev[(*n)++];
    memset(e, 0, sizeof *e);
    e->kind = k;
    e->tripped = on;
    e->step = step;
    e->value = value;
    snprintf(e->why, sizeof e->why, "%s", why);
}

/* The auc guard (guards.h): in band at every check over auc_rows rows. */
static void check_auc(rap_guards *g, int64_t step, const rap_progressive_stats *ps,
                      rap_guard_event *ev, int *n)
{
    double share = ps->rows > 0 ? (double)ps->positives / (double)ps->rows : 0;
    bool mixed = share >= RAP_GUARD_MIXED && share <= 1 - RAP_GUARD_MIXED;
    bool band = mixed && isfinite(ps->auc) && fabs(ps->auc - 0.5) < RAP_GUARD_AUC_BAND;
    char why[256];
    if (!band) {
        g->auc_since = -1;
        snprintf(why, sizeof why, "progressive AUC %.4f at step %lld, out of 0.5 +- %g",
                 ps->auc, (long long)step, RAP_GUARD_AUC_BAND);
        change(g, RAP_GUARD_AUC, false, step, ps->auc, why, ev, n);
        return;
    }
    /* the window's rows at the first in-band check count as evidence */
    if (g->auc_since < 0)
        g->auc_since = ps->seen - ps->rows;
    int64_t over = ps->seen - g->auc_since;
    if (over < g->c.auc_rows)
        return;
    snprintf(why, sizeof why, "progressive AUC %.4f at step %lld: within %g of 0.5 over the "
             "last %lld rows trained (--guard-auc-rows %lld) while %.1f%% of the labels are "
             "positive: the model is not learning", ps->auc, (long long)step,
             RAP_GUARD_AUC_BAND, (long long)over, (long long)g->c.auc_rows, 100 * share);
    change(g, RAP_GUARD_AUC, true, step, ps->auc, why, ev, n);
}

/* The calibration guard: mean prediction / mean label within 1/F..F. */
static void check_calibration(rap_guards *g, int64_t step, const rap_progressive_stats *ps,
                              rap_guard_event *ev, int *n)
{
    double r = ps->calibration, f = g->c.calib_factor;
    if (ps->positives == 0 || !isfinite(ps->pred_mean))
        return; /* no positives: no ratio to judge */
    bool off = !(r <= f && r >= 1 / f);
    char why[256];
    snprintf(why, sizeof why, "progressive mean prediction %.4g against mean label %.4g at "
             "step %lld: ratio %.3g, %s 1/%g..%g (--guard-calibration %g)", ps->pred_mean,
             ps->label_mean, (long long)step, r, off ? "outside" : "back within", f, f, f);
    change(g, RAP_GUARD_CALIBRATION, off, step, r, why, ev, n);
}

void rap_guards_window(rap_guards *g, int64_t step, int64_t window,
                       const rap_progressive_stats *ps, rap_guard_event *ev, int *n)
{
    *n = 0;
    if (!ps || ps->rows < window)
        return; /* the window is not full yet */
    if (g->c.auc_rows > 0)
        check_auc(g, step, ps, ev, n);
    if (g->c.calib_factor > 0)
        check_calibration(g, step, ps, ev, n);
}

bool rap_guards_stop(const rap_guards *g)
{
    if (g->c.action != RAP_GUARD_FAIL)
        return false;
    for (int k = 0; k < RAP_GUARD_COUNT; k++)
        if (g->tripped[k])
            return true;
    return false;
}
