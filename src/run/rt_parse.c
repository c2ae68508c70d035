/*
 * rt_parse.c -- the GPU parse in the training's windows (rt_internal.h,
 * docs/RUNTIME.md "The parse in the windows"): which runs gate the feed's
 * parse (rap_runtime_parse_gated), the budgets each window releases (the
 * schedule's parse lines, or all pending work at one window), their
 * release at a window's start and the counts the run reports.
 */
#include "run/rt_internal.h"

#include "data/parse_backend.h"
#include "data/parse_gate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

rap_status rap_parse_window_env(int *w)
{
    *w = RAP_PARSE_WINDOW_UNSET;
    const char *e = getenv("RAP_PARSE_WINDOW");
    if (!e || !e[0])
        return RAP_OK;
    if (!strcmp(e, "now")) {
        *w = RAP_PARSE_WINDOW_NOW;
        return RAP_OK;
    }
    int v = rap_window_parse(e);
    if (v < 0 || v > RAP_WIN_EMB_BACKWARD)
        return rap_fail(RAP_ERR_ARG, "RAP_PARSE_WINDOW=%s: expected emb_forward, mlp_forward, "
                        "mlp_backward, emb_backward (all pending parse work at that phase's "
                        "start) or now (launched as the parser posts)", e);
    *w = v;
    return RAP_OK;
}

rap_status rap_parse_window_lines_env(int64_t *lines)
{
    *lines = 0;
    const char *e = getenv("RAP_PARSE_WINDOW_LINES");
    if (!e || !e[0])
        return RAP_OK;
    char *end;
    errno = 0;
    long long v = strtoll(e, &end, 10);
    if (errno || *end || v < 1 || v > ((long long)1 << 40))
        return rap_fail(RAP_ERR_ARG, "RAP_PARSE_WINDOW_LINES=%s: expected a count of lines "
                        "(1 to 2^40), the budget of RAP_PARSE_WINDOW's window a release", e);
    *lines = v;
    return RAP_OK;
}

rap_status rap_parse_release_env(bool *tiles)
{
    *tiles = false;
    const char *e = getenv("RAP_PARSE_RELEASE");
    if (!e || !e[0] || !strcmp(e, "jobs"))
        return RAP_OK;
    if (!strcmp(e, "tiles")) {
        *tiles = true;
        return RAP_OK;
    }
    return rap_fail(RAP_ERR_ARG, "RAP_PARSE_RELEASE=%s: expected jobs (a release finishes "
                    "every chunk it begins, the default) or tiles (it stops at its budget)", e);
}

rap_status rap_ideal_parse_env(bool *beside)
{
    *beside = false;
    const char *e = getenv("RAP_IDEAL_PARSE");
    if (!e || !e[0] || !strcmp(e, "apart"))
        return RAP_OK;
    if (!strcmp(e, "beside")) {
        *beside = true;
        return RAP_OK;
    }
    return rap_fail(RAP_ERR_ARG, "RAP_IDEAL_PARSE=%s: expected apart (ideal mode parses only "
                    "while it preloads, the default) or beside (the parse of the next group "
                    "beside its steps)", e);
}

rap_status rap_parse_knobs_check(void)
{
    int w;
    int64_t lines;
    bool tiles, beside;
    size_t chunk;
    RAP_TRY(rap_parse_window_env(&w));
    RAP_TRY(rap_parse_window_lines_env(&lines));
    RAP_TRY(rap_parse_release_env(&tiles));
    RAP_TRY(rap_ideal_parse_env(&beside));
    const char *e = getenv("RAP_PARSE_SHARE");
    if (e && e[0] && strcmp(e, "0") && strcmp(e, "1"))
        return rap_fail(RAP_ERR_ARG, "RAP_PARSE_SHARE=%s: expected 1 (the ranks share the parse "
                        "of each chunk, the default) or 0 (every rank parses every line)", e);
    return rap_parse_gpu_chunk_bytes(1, &chunk);
}

rap_status rap_runtime_parse_gated(rap_mode mode, rap_device dev, rap_parse_kind parse,
                                   const rap_schedule *s, bool *gated)
{
    *gated = false;
    RAP_TRY(rap_parse_knobs_check()); /* before the work */
    if (mode == RAP_MODE_IDEAL) {
        /* the upper bound trains with nothing beside its steps: the parse
         * of its next group waits at the gate until ideal waits for rows
         * (as it preloads, counted apart); beside, its kernels, appends and
         * copies took 0.5-1 % of ideal's steps on one H200 (bench/RESULTS.md,
         * 2026-12-04) */
        bool beside;
        RAP_TRY(rap_ideal_parse_env(&beside));
        *gated = !beside && dev == RAP_GPU && parse == RAP_PARSE_GPU;
        return RAP_OK;
    }
    int w;
    RAP_TRY(rap_parse_window_env(&w));
    if (w == RAP_PARSE_WINDOW_NOW)
        return RAP_OK;
    /* asked for by the plan (a schedule with parse lines: rap plan --parse
     * gpu) or by the knob; a schedule without them (the shipped ones)
     * leaves the parser threads launching as they post: on the H200 the
     * gate at one window was no better than that (docs/RUNTIME.md) */
    const bool asked = rap_schedule_has_parse(s) || w >= 0;
    if (dev == RAP_GPU)
        *gated = mode == RAP_MODE_RAP && parse == RAP_PARSE_GPU && asked;
    else /* rap mode's stand-in on the CPU */
        *gated = mode == RAP_MODE_SEQUENTIAL && parse == RAP_PARSE_REF && asked;
    return RAP_OK;
}

/* Budgets of s into rt (false: s has none, nothing changed). */
static bool take_budgets(rap_runtime *rt, const rap_schedule *s)
{
    if (!rap_schedule_has_parse(s))
        return false;
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        rt->parse_budget[w] = s->parse_lines[w];
    return true;
}

rap_status rt_parse_create(rap_runtime *rt)
{
    memset(rt->parse_budget, 0, sizeof rt->parse_budget);
    rt->gate = rt->feed ? rap_rowfeed_gate(rt->feed) : NULL;
    if (!rt->gate)
        return RAP_OK;
    if (rt->mode == RAP_MODE_IDEAL) { /* no window releases: only the waits for rows */
        rap_debug("runtime: ideal mode parses only while it waits for rows (its preloads)");
        return RAP_OK;
    }
    int w;
    RAP_TRY(rap_parse_window_env(&w));
    RAP_TRY(rap_parse_release_env(&rt->parse_tiles));
    if (w >= 0) { /* the A/B knob: in place of the schedule's budgets */
        int64_t n;
        RAP_TRY(rap_parse_window_lines_env(&n));
        rt->parse_budget[w] = n > 0 ? n : -1;
    } else if (!take_budgets(rt, rt->sched ? rt->sched : rt->cfg.schedule)) {
        rt->parse_budget[RAP_PARSE_WINDOW_DEFAULT] = -1;
    }
    char line[512];
    int at = 0;
    for (int v = 0; v < RAP_WIN_COUNT && at < (int)sizeof line; v++) {
        if (rt->parse_budget[v] < 0)
            at += snprintf(line + at, sizeof line - (size_t)at, " %s (all pending)",
                           rap_window_name((rap_window)v));
        else if (rt->parse_budget[v] > 0)
            at += snprintf(line + at, sizeof line - (size_t)at, " %s (%lld lines)",
                           rap_window_name((rap_window)v), (long long)rt->parse_budget[v]);
    }
    rap_debug("runtime: the GPU parse is released at the start of%s%s", line,
              rt->parse_tiles ? ", stopping mid-chunk at a budget" : ", whole chunks");
    return RAP_OK;
}

void rt_parse_swap(rap_runtime *rt, const rap_schedule *s)
{
    int w;
    if (!rt->gate || rt->mode == RAP_MODE_IDEAL || rap_parse_window_env(&w) != RAP_OK ||
        w >= 0) {
        rap_clear_error();
        return; /* the knob's window stays */
    }
    take_budgets(rt, s);
}

void rt_parse_release(rap_runtime *rt, rap_window w, void *event)
{
    if (!rt->gate || (int)w < 0 || w >= RAP_WIN_COUNT || rt->parse_budget[w] == 0)
        return;
    if (rt->parse_tiles)
        rap_parse_gate_release(rt->gate, rt->parse_budget[w], event, NULL);
    else
        rap_parse_gate_release_jobs(rt->gate, rt->parse_budget[w], event, NULL);
}

void rt_parse_stats(rap_runtime *rt, rap_runtime_stats *st)
{
    if (!rt->gate)
        return;
    rap_parse_gate_stats g;
    rap_parse_gate_get_stats(rt->gate, &g);
    st->parse_gated = true;
    st->parse_lines_in = g.lines_in;
    st->parse_lines_out = g.lines_out;
}
