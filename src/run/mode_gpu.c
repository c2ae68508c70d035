/*
 * mode_gpu.c -- the runtime's sequential, stream and rap modes
 * (runtime.h, docs/RUNTIME.md), and the pipelined step they share with
 * the cpu mode on the GPU: batch i trains from its slot while batch i+1 is
 * copied into the next slot and preprocessed there --
 *   sequential  on the training stream, by the step that trains it (on
 *               the CPU: the plain CPU path, one slot);
 *   stream      on the preprocessing stream as soon as it is copied;
 *   rap         a schedule's slices on the preprocessing stream, each
 *               window's released beside its phase of step i.
 */
#include "run/rt_internal.h"

#include "prep/exec_internal.h"
#include "run/input.h"

#include <string.h>

/* ---- the pipelined step */

/* GPU: wait for slot s's batch (timed), then its phases. */
static rap_status train_slot_gpu(rap_runtime *rt, rt_slot *s, rt_slot *nx, const rt_pipeline *p)
{
    ring_entry *e;
    RAP_TRY(rt_ring_acquire(rt, s->info.seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    if (p->prep_in_step)
        RAP_TRY(rt_prep_whole(rt, s, rt->train_s, RAP_TRACK_TRAIN));
    else
        RAP_TRY(rap_rt_wait(rt->train_s, s->ev_ready));
    RAP_TRY(rt_record_w1(rt, e));
    RAP_TRY(rt_phases_gpu(rt, s, e, p->beside ? nx : NULL));
    rt->trained++;
    return RAP_OK;
}

rap_status rt_step_pipelined(rap_runtime *rt, rap_step_info *info, const rt_pipeline *p)
{
    rt_slot *cur = &rt->slots[rt->cur];
    RAP_TRY(rt_release_copied(rt, -1));
    if (!cur->full && !rt->feed_end) { /* prime: the first batch, fully exposed */
        double w = 0; /* the cpu workers' wait for the first batch: not counted */
        RAP_TRY(p->fill(rt, cur, true, &w));
    }
    if (rt_pop_marker(rt, info))
        return RAP_OK;
    if (!cur->full) {
        info->end = true;
        return RAP_OK;
    }
    int ni = (rt->cur + 1) % rt->S;
    rt_slot *nx = &rt->slots[ni];
    double exposed_host = 0;
    RAP_TRY(p->fill(rt, nx, false, &exposed_host));
    rap_status tst = train_slot_gpu(rt, cur, nx->full || rt->deferred ? nx : NULL, p);
    if (rt->deferred) { /* not reached: hand it back */
        rap_rowfeed_release(rt->feed, rt->deferred);
        rt->deferred = NULL;
    }
    RAP_TRY(tst);
    /* cpu mode: waiting for the workers is waiting for data */
    rt->st.starved_s += exposed_host;
    if (exposed_host > 1e-3)
        rt->st.starved_steps++;
    *info = cur->info;
    cur->full = false;
    rt->cur = ni;
    return RAP_OK;
}

/* ---- sequential */

/* The next feed batch copied into s; its step preprocesses it. */
static rap_status seq_fill(rap_runtime *rt, rt_slot *s, bool prime, double *waited_s)
{
    (void)prime;
    (void)waited_s;
    rap_row_batch *b;
    RAP_TRY(rt_fetch(rt, &b));
    if (b)
        RAP_TRY(rt_load_slot(rt, s, b));
    return RAP_OK;
}

static const rt_pipeline g_seq_pipe = {seq_fill, true, false};

/* The CPU model: load, preprocess (exposed), train, one slot. */
static rap_status seq_step_cpu(rap_runtime *rt, rap_step_info *info)
{
    rt_slot *s = &rt->slots[0];
    if (!s->full && !rt->feed_end) {
        rap_row_batch *b;
        RAP_TRY(rt_fetch(rt, &b));
        if (b)
            RAP_TRY(rt_load_slot(rt, s, b));
    }
    if (rt_pop_marker(rt, info))
        return RAP_OK;
    if (!s->full) {
        info->end = true;
        return RAP_OK;
    }
    s->full = false;
    double t0 = rap_now();
    RAP_TRY(rap_prep_run(s->prep));
    RAP_TRY(rap_input_make(s->input, s->prep, &s->mb));
    double t1 = rap_now();
    rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, "prep batch", "prep", s->info.seq, t0, t1);
    RAP_TRY(rt_phases_cpu(rt, &s->mb, s->info.rows, s->info.seq, t1 - t0));
    *info = s->info;
    return RAP_OK;
}

static rap_status seq_step(rap_runtime *rt, rap_step_info *info)
{
    return on_gpu(rt) ? rt_step_pipelined(rt, info, &g_seq_pipe) : seq_step_cpu(rt, info);
}

/* S slots on the GPU (packing on the training stream), one on the CPU. */
static rap_status seq_create(rap_runtime *rt)
{
    rt->S = rt_mode_slots(&rt->cfg, RAP_MODE_SEQUENTIAL, on_gpu(rt));
    RAP_TRY(rt_graphs_create(rt));
    return rt_slots_create(rt, true, rt->train_s);
}

const rt_mode_ops rt_mode_sequential_ops = {seq_create, seq_step, NULL, NULL};

/* ---- stream */

/* The next feed batch copied into s and preprocessed on the preprocessing
 * stream after its copy. */
static rap_status stream_fill(rap_runtime *rt, rt_slot *s, bool prime, double *waited_s)
{
    (void)prime;
    (void)waited_s;
    rap_row_batch *b;
    RAP_TRY(rt_fetch(rt, &b));
    if (b) {
        RAP_TRY(rt_load_slot(rt, s, b));
        RAP_TRY(rt_prep_whole(rt, s, rt->prep_s, RAP_TRACK_PREP));
    }
    return RAP_OK;
}

static const rt_pipeline g_stream_pipe = {stream_fill, false, false};

static rap_status stream_step(rap_runtime *rt, rap_step_info *info)
{
    return rt_step_pipelined(rt, info, &g_stream_pipe);
}

/* S slots, packing on the preprocessing stream (also ideal's and rap's). */
static rap_status stream_create(rap_runtime *rt)
{
    rt->S = rt_mode_slots(&rt->cfg, rt->mode, on_gpu(rt));
    RAP_TRY(rt_graphs_create(rt));
    return rt_slots_create(rt, true, rt->prep_s);
}

const rt_mode_ops rt_mode_stream_ops = {stream_create, stream_step, NULL, NULL};

/* ---- rap */

/* The first batch: copied and preprocessed whole (exposed). The next:
 * copied now, or, without emb_forward slices, left for the copy at
 * copy_at's start (rt->deferred; the lookups' memory traffic goes first);
 * its slices run beside the phases of the step before it. */
static rap_status rapmode_fill(rap_runtime *rt, rt_slot *s, bool prime, double *waited_s)
{
    (void)waited_s;
    rap_row_batch *b;
    RAP_TRY(rt_fetch(rt, &b));
    /* rap mode without emb_forward slices: the copy waits for the lookups
     * (rt_phases_gpu); cur's step then takes nx as the batch to come */
    bool defer = b && !prime && (!rt->cfg.train_fn || rt->cfg.hybrid) &&
                 !rt_window_used(rt, RAP_WIN_EMB_FORWARD);
    if (defer) {
        rt->deferred = b;
    } else if (b) {
        RAP_TRY(rt_load_slot(rt, s, b));
        if (prime)
            RAP_TRY(rt_prep_whole(rt, s, rt->prep_s, RAP_TRACK_PREP));
    }
    return RAP_OK;
}

static const rt_pipeline g_rap_pipe = {rapmode_fill, false, true};

static rap_status rapmode_step(rap_runtime *rt, rap_step_info *info)
{
    return rt_step_pipelined(rt, info, &g_rap_pipe);
}

/* The schedule (given, or the built-in one), where the next batch's copy
 * and packing go, the lanes, then stream mode's slots. */
static rap_status rapmode_create(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    if (c->schedule) {
        rt->sched = c->schedule;
    } else {
        RAP_TRY(rap_schedule_builtin_embedding(rt->plan, rt->fus, &rt->own_sched));
        RAP_TRY(rap_schedule_validate(rt->own_sched, rt->plan, rt->fus, rt->B));
        rt->sched = rt->own_sched;
    }
    if (c->train_fn && c->hybrid && on_gpu(rt))
        RAP_TRY(rt_check_hooked_order(rt));
    rt->pack_after = rt_pack_window(rt);
    rt->copy_at = rt_copy_window(rt);
    RAP_TRY(rt_lanes_create(rt));
    return stream_create(rt);
}

static void rapmode_free(rap_runtime *rt)
{
    rt_lanes_free(rt);
    rap_schedule_free(rt->own_sched);
    rt->own_sched = NULL;
}

const rt_mode_ops rt_mode_rap_ops = {rapmode_create, rapmode_step, NULL, rapmode_free};
