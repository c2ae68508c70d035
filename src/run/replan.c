/* replan.c -- re-planning while training: the drift check, the
 * capacities re-estimated from a measurement, the planner's thread and the
 * swap at a step boundary (replan.h). */
#include "run/replan.h"

#include "core/core.h"
#include "sched/fusion_file.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static const char *const g_phase_names[4] = {"emb_forward", "mlp_forward", "mlp_backward",
                                             "emb_backward"};

void rap_replan_predict(const rap_replan_config *c, const double *cap, const rap_schedule *s,
                        rap_replan_measure *m)
{
    memset(m->load_ms, 0, sizeof m->load_ms);
    for (int w = 0; s && w < RAP_WIN_COUNT; w++) {
        int n = 0;
        const rap_slice *sl = rap_schedule_window(s, (rap_window)w, &n);
        for (int i = 0; i < n; i++)
            m->load_ms[w] += sl[i].predicted_ms > 0 ? sl[i].predicted_ms : 0;
    }
    for (int w = 0; w < 4; w++) {
        double t = c->standalone_ms[w], l = m->load_ms[w];
        m->pred_phase_ms[w] = t * (1 + (l > 0 && cap[w] > 0 ? c->tolerance * l / cap[w] : 0));
    }
    m->pred_exposed_ms = m->load_ms[RAP_WIN_EXPOSED];
}

bool rap_replan_drift(const rap_replan_config *c, const rap_replan_measure *m, char *why,
                      size_t why_len)
{
    why[0] = 0;
    if (m->steps <= 0)
        return false;
    for (int w = 0; w < 4; w++) {
        double p = m->pred_phase_ms[w], x = m->phase_ms[w];
        if (c->standalone_ms[w] > 0 && fabs(x - p) > c->threshold * p) {
            snprintf(why, why_len, "%s took %.4g ms a step over the last %lld steps, the "
                     "schedule predicts %.4g ms (load %.4g ms of work; off by more than %g)",
                     g_phase_names[w], x, (long long)m->steps, p, m->load_ms[w], c->threshold);
            return true;
        }
    }
    /* the exposed time's floor: 2 % of the measured step (a few us of an
     * empty exposed window's timing are not a drift), at least 0.01 ms */
    double step = m->phase_ms[0] + m->phase_ms[1] + m->phase_ms[2] + m->phase_ms[3];
    double p = m->pred_exposed_ms, x = m->exposed_ms, lo = fmax(0.01, 0.02 * step);
    if (fabs(x - p) > c->threshold * (p > lo ? p : lo)) {
        snprintf(why, why_len, "exposed preprocessing took %.4g ms a step over the last %lld "
                 "steps, the schedule predicts %.4g ms (off by more than %g)", x,
                 (long long)m->steps, p, c->threshold);
        return true;
    }
    return false;
}

bool rap_replan_lists_drift(const rap_replan_config *c, const double *base, const double *now,
                            int ns, int64_t steps, char *why, size_t why_len)
{
    why[0] = 0;
    if (!(c->list_threshold > 0))
        return false;
    for (int j = 0; j < ns; j++) {
        double b = base[j], x = now[j];
        if (fabs(x - b) > c->list_threshold * (b > 0.05 ? b : 0.05)) {
            snprintf(why, why_len, "the input's list lengths changed: raw column cat_%d holds "
                     "%.4g ids a row over the last %lld steps, %.4g when the schedule in use was "
                     "measured first (off by more than %g)", j, x, (long long)steps, b,
                     c->list_threshold);
            return true;
        }
    }
    return false;
}

int rap_replan_reference(rap_replan_config *c, const double *cap, const rap_schedule *s,
                         rap_replan_measure *m)
{
    int changed = 0;
    for (int w = 0; m->steps > 0 && w < 4; w++) {
        double x = m->phase_ms[w], t = c->standalone_ms[w];
        if (m->load_ms[w] > 0 || !(x > 0) || !(t > 0))
            continue;
        changed += fabs(x - t) > c->threshold * t;
        c->standalone_ms[w] = x;
    }
    rap_replan_predict(c, cap, s, m);
    return changed;
}

void rap_replan_capacities(const rap_replan_config *c, const rap_replan_measure *m,
                           const double *cap_now, double *cap_new)
{
    for (int w = 0; w < RAP_REPLAN_WINDOWS; w++) {
        double C = cap_now[w], L = m->load_ms[w];
        cap_new[w] = C;
        if (w >= 4 || L <= 0 || c->standalone_ms[w] <= 0)
            continue; /* grad_comm is not timed apart here; no load: nothing measured */
        double s = m->phase_ms[w] / c->standalone_ms[w] - 1;
        if (s > 0) {
            double e = c->tolerance * L / s;
            cap_new[w] = e < 2 * C ? e : 2 * C;
        } else {
            double up = 2 * L < 2 * C ? 2 * L : 2 * C;
            cap_new[w] = up > C ? up : C;
        }
    }
}

/* ------------------------------------------------------------ the thread */

enum { PL_IDLE = 0, PL_RUNNING, PL_DONE };

struct rap_replan {
    rap_replan_config c;
    const rap_plan *plan;
    const rap_fusion *fus;
    int64_t batch;
    const rap_schedule *cur;       /* in use (owned when == own) */
    rap_schedule *own;             /* the last one made here and swapped in */
    double cap[RAP_REPLAN_WINDOWS]; /* the capacities cur was planned for */
    rap_runtime_stats last;        /* at the last check */
    rap_rowfeed *feed;             /* or NULL */
    int64_t last_rows, last_ids[RAP_FEED_ID_COLS]; /* the feed's at the last check */
    double base_lists[RAP_FEED_ID_COLS]; /* mean ids a row, first period of cur */
    bool have_base;
    int ns;                        /* raw sparse columns counted */
    int64_t checks, plans, swaps;
    /* the plan in flight */
    pthread_t tid;
    atomic_int state;
    double want[RAP_REPLAN_WINDOWS];
    double want_lists[RAP_FEED_ID_COLS]; /* the period's mean ids a row, or n 0 */
    int n_want_lists;
    rap_schedule *made;
    rap_status made_st;
    char made_err[1024];
    double t0, t1;
    int64_t checked_step;
    char why[512];
};

/* The planner's thread: one plan of r->want, its result and timing in r,
 * then PL_DONE (the training loop joins it). */
static void *plan_main(void *arg)
{
    rap_replan *r = arg;
    r->t0 = rap_now();
    r->made = NULL;
    r->made_st = r->c.plan_fn(r->c.plan_ctx, r->plan, r->fus, r->batch, r->want,
                              r->n_want_lists > 0 ? r->want_lists : NULL, r->n_want_lists,
                              &r->made);
    snprintf(r->made_err, sizeof r->made_err, "%s", r->made_st == RAP_OK ? "" : rap_last_error());
    r->t1 = rap_now();
    atomic_store(&r->state, PL_DONE);
    return NULL;
}

rap_status rap_replan_create(const rap_replan_config *c, const rap_plan *p, const rap_fusion *f,
                             int64_t batch, const rap_schedule *initial, rap_rowfeed *feed,
                             rap_replan **out)
{
    *out = NULL;
    if (!c->plan_fn || c->every < 1 || !(c->threshold > 0) || !(c->tolerance > 0))
        return rap_fail(RAP_ERR_ARG, "--replan: needs a planner, --replan-every >= 1, "
                        "--replan-threshold > 0 and a capacity with a tolerance > 0");
    rap_replan *r = rap_calloc(sizeof *r, "re-planning");
    if (!r)
        return RAP_ERR_NOMEM;
    r->c = *c;
    r->plan = p;
    r->fus = f;
    r->batch = batch;
    r->cur = initial;
    r->feed = feed;
    r->ns = p->schema.n_sparse < RAP_FEED_ID_COLS ? p->schema.n_sparse : RAP_FEED_ID_COLS;
    memcpy(r->cap, c->capacity_ms, sizeof r->cap);
    atomic_init(&r->state, PL_IDLE);
    *out = r;
    return RAP_OK;
}

/* The period since the last check, measured and predicted. */
static void measure(rap_replan *r, const rap_runtime_stats *now, rap_replan_measure *m)
{
    memset(m, 0, sizeof *m);
    m->steps = now->timed_steps - r->last.timed_steps;
    if (m->steps > 0) {
        for (int w = 0; w < 4; w++)
            m->phase_ms[w] = (now->phase_ms[w] - r->last.phase_ms[w]) / (double)m->steps;
        m->exposed_ms = (now->exposed_ms - r->last.exposed_ms) / (double)m->steps;
    }
    rap_replan_predict(&r->c, r->cap, r->cur, m);
}

/* The list lengths of the period since the last check: true with lists
 * (ns means) when rows were handed out. */
static bool period_lists(rap_replan *r, double *lists)
{
    if (!r->feed)
        return false;
    rap_rowfeed_stats fs;
    rap_rowfeed_get_stats(r->feed, &fs);
    int64_t rows = fs.rows_out - r->last_rows;
    for (int j = 0; j < r->ns && rows > 0; j++)
        lists[j] = (double)(fs.ids_out[j] - r->last_ids[j]) / (double)rows;
    r->last_rows = fs.rows_out;
    memcpy(r->last_ids, fs.ids_out, sizeof r->last_ids);
    return rows > 0;
}

/* A check: on a drift, the planner's thread started. */
static rap_status check(rap_replan *r, rap_runtime *rt, int64_t step)
{
    rap_runtime_stats now;
    rap_runtime_get_stats(rt, &now);
    rap_replan_measure m;
    measure(r, &now, &m);
    r->last = now;
    r->last.records = NULL;
    r->checks++;
    char why[512];
    double lists[RAP_FEED_ID_COLS];
    bool drift = false, have_lists = period_lists(r, lists);
    if (have_lists) {
        if (!r->have_base) {
            memcpy(r->base_lists, lists, sizeof lists);
            r->have_base = true;
        } else {
            drift = rap_replan_lists_drift(&r->c, r->base_lists, lists, r->ns, m.steps, why,
                                           sizeof why);
        }
    }
    if (!drift && rap_replan_reference(&r->c, r->cap, r->cur, &m) > 0)
        rap_info("replan at step %lld: the phases took %.4g/%.4g/%.4g/%.4g ms a step "
                 "(emb_forward/mlp_forward/mlp_backward/emb_backward); each one with no "
                 "preprocessing in its window takes that long alone on this input: its "
                 "reference from now on",
                 (long long)step, m.phase_ms[0], m.phase_ms[1], m.phase_ms[2], m.phase_ms[3]);
    if (!drift && !rap_replan_drift(&r->c, &m, why, sizeof why))
        return RAP_OK;
    rap_replan_capacities(&r->c, &m, r->cap, r->want);
    r->n_want_lists = have_lists ? r->ns : 0;
    if (have_lists)
        memcpy(r->want_lists, lists, sizeof(double) * (size_t)r->ns);
    snprintf(r->why, sizeof r->why, "%s", why);
    r->checked_step = step;
    atomic_store(&r->state, PL_RUNNING);
    int e = pthread_create(&r->tid, NULL, plan_main, r);
    if (e) {
        atomic_store(&r->state, PL_IDLE);
        return rap_fail(RAP_ERR_INTERNAL, "--replan: cannot start the planner's thread (%s)",
                        strerror(e));
    }
    r->plans++;
    rap_info("replan at step %lld: %s; planning on the measured capacities in the background",
             (long long)step, why);
    return RAP_OK;
}

/* After a plan taken (swapped in or kept): the capacities it was made for
 * are those of the schedule in use, and the next check measures from now. */
static void restart_period(rap_replan *r, rap_runtime *rt)
{
    memcpy(r->cap, r->want, sizeof r->cap);
    rap_runtime_get_stats(rt, &r->last);
    r->last.records = NULL;
}

/* The plan done: its schedule swapped in (or its failure reported). */
static rap_status take(rap_replan *r, rap_runtime *rt, int64_t step, rap_trace *tr,
                       rap_replan_event *ev, bool *swapped)
{
    pthread_join(r->tid, NULL);
    atomic_store(&r->state, PL_IDLE);
    rap_schedule *s = r->made;
    r->made = NULL;
    if (r->made_st != RAP_OK) {
        rap_warn("replan: the planner failed (%s); training goes on with the schedule in use",
                 r->made_err);
        return RAP_OK;
    }
    if (rap_schedule_same_slices(s, r->cur)) {
        rap_info("replan: the schedule planned from the check at step %lld places every slice "
                 "as the one in use: kept (%s)", (long long)r->checked_step, r->why);
        rap_schedule_free(s);
        restart_period(r, rt);
        return RAP_OK;
    }
    double t0 = rap_now();
    rap_status st = rap_runtime_set_schedule(rt, s);
    if (st != RAP_OK) {
        rap_warn("replan: the new schedule was refused (%s); training goes on with the one in "
                 "use", rap_last_error());
        rap_schedule_free(s);
        return RAP_OK;
    }
    rap_trace_host_span(tr, RAP_TRACK_MAIN, "replan: plan", "replan", r->checked_step, r->t0,
                        r->t1);
    rap_trace_host_span(tr, RAP_TRACK_MAIN, "replan: swap", "replan", step, t0, rap_now());
    memset(ev, 0, sizeof *ev);
    ev->step = step;
    ev->checked_step = r->checked_step;
    ev->plan_s = r->t1 - r->t0;
    snprintf(ev->why, sizeof ev->why, "%s", r->why);
    if (r->c.out && r->c.out[0]) {
        char fus[700];
        snprintf(ev->path, sizeof ev->path, "%s.step%lld", r->c.out, (long long)step);
        snprintf(fus, sizeof fus, "%s.fusion", ev->path);
        RAP_TRY(rap_schedule_save(s, ev->path));
        RAP_TRY(rap_fusion_save(r->plan, r->fus, fus));
    }
    rap_schedule_free(r->own); /* the runtime no longer reads it */
    r->own = s;
    r->cur = s;
    restart_period(r, rt); /* the next check measures the new schedule only */
    double lists[RAP_FEED_ID_COLS];
    period_lists(r, lists); /* and its first period is the lists' new base */
    r->have_base = false;
    r->swaps++;
    *swapped = true;
    return RAP_OK;
}

rap_status rap_replan_step(rap_replan *r, rap_runtime *rt, int64_t step, rap_trace *tr,
                           rap_replan_event *ev, bool *swapped)
{
    *swapped = false;
    int state = atomic_load(&r->state);
    if (state == PL_DONE)
        return take(r, rt, step, tr, ev, swapped);
    if (state == PL_IDLE && step % r->c.every == 0)
        return check(r, rt, step);
    return RAP_OK;
}

void rap_replan_counts(const rap_replan *r, int64_t *checks, int64_t *plans, int64_t *swaps)
{
    *checks = r->checks;
    *plans = r->plans;
    *swaps = r->swaps;
}

void rap_replan_free(rap_replan *r)
{
    if (!r)
        return;
    if (atomic_load(&r->state) != PL_IDLE)
        pthread_join(r->tid, NULL);
    rap_schedule_free(r->made);
    rap_schedule_free(r->own);
    rap_free(r);
}
