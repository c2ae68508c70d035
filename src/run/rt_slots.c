/*
 * rt_slots.c -- the runtime's slots (rt_internal.h): each with its
 * executor, packing buffer and events; the feed's batches taken in order
 * (end-of-pass markers queued for the steps to report) and copied into a
 * slot; a slot's preprocessing launched, whole or a schedule window's
 * slices at a time (rap mode, on lanes with prep_lanes > 1).
 */
#include "run/rt_internal.h"

#include "data/parse_backend.h"
#include "dist/hybrid.h"
#include "prep/exec_internal.h"
#include "run/input.h"

#include <stdio.h>
#include <string.h>

/* ---- markers and the feed's batches */

rap_status rt_push_marker(rap_runtime *rt, const rap_row_batch *b)
{
    if (rt->n_markers >= RT_MARKERS)
        return rap_fail(RAP_ERR_DATA, "runtime: %d passes in a row gave no training rows",
                        RT_MARKERS);
    rap_step_info *m = &rt->markers[(rt->marker_head + rt->n_markers++) % RT_MARKERS];
    memset(m, 0, sizeof *m);
    m->seq = b->seq;
    m->pass = b->pass;
    m->pos_after = b->pos_after;
    m->pass_rows = b->pass_rows;
    m->end_of_pass = true;
    m->has_data_pos = b->has_data_pos;
    if (b->has_data_pos)
        m->data_pos = b->data_pos;
    return RAP_OK;
}

bool rt_pop_marker(rap_runtime *rt, rap_step_info *info)
{
    if (rt->n_markers == 0)
        return false;
    *info = rt->markers[rt->marker_head];
    rt->marker_head = (rt->marker_head + 1) % RT_MARKERS;
    rt->n_markers--;
    return true;
}

void rt_info_of(rap_step_info *i, const rap_row_batch *b)
{
    memset(i, 0, sizeof *i);
    i->rows = b->batch.rows;
    i->seq = b->seq;
    i->pass = b->pass;
    i->pos_after = b->pos_after;
    i->pass_rows = b->pass_rows;
    i->end_of_pass = b->end_of_pass;
    i->has_data_pos = b->has_data_pos;
    if (b->has_data_pos)
        i->data_pos = b->data_pos;
}

rap_status rt_fetch_ex(rap_runtime *rt, rap_row_batch **out, bool upto_marker)
{
    *out = NULL;
    while (!rt->feed_end && !(upto_marker && rt->n_markers > 0)) {
        rap_row_batch *b;
        double w, t0 = rap_trace_host_begin(rt->cfg.trace, "wait for data");
        RAP_TRY(rap_rowfeed_next(rt->feed, &b, &w));
        rap_trace_host_end(rt->cfg.trace, RAP_TRACK_MAIN, "wait for data", "wait",
                           b ? b->seq : RAP_TRACE_NO_ARG, t0);
        rt->st.starved_s += w;
        if (w > 1e-3)
            rt->st.starved_steps++;
        if (!b) {
            rt->feed_end = true;
            break;
        }
        if (b->batch.rows == 0) {
            rap_status st = rt_push_marker(rt, b);
            rap_rowfeed_release(rt->feed, b);
            RAP_TRY(st);
            continue;
        }
        *out = b;
        return RAP_OK;
    }
    return RAP_OK;
}

rap_status rt_fetch(rap_runtime *rt, rap_row_batch **out) { return rt_fetch_ex(rt, out, false); }

/* ---- loading a slot */

const rap_batch *rt_share_rows(const rap_runtime *rt, const rap_batch *b, rap_batch *share)
{
    if (rt->cfg.row_share_ranks <= 1)
        return b;
    int64_t r0, n;
    rap_hybrid_rows(b->rows, rt->cfg.row_share_ranks, rt->cfg.row_share_rank, &r0, &n);
    share->rows = 0;
    rap_batch_append(share, b, r0, n);
    share->first_row = b->first_row + r0;
    return share;
}

rap_status rt_load_slot(rap_runtime *rt, rt_slot *s, rap_row_batch *b)
{
    rt_info_of(&s->info, b);
    if (!on_gpu(rt)) {
        rap_status st = rap_prep_load(s->prep, rt_share_rows(rt, &b->batch, &s->share));
        rap_rowfeed_release(rt->feed, b);
        RAP_TRY(st);
        s->full = true;
        return RAP_OK;
    }
    s->rb = b; /* released by rt_release_copied, also on failure below */
    RAP_TRY(rap_rt_wait(rt->copy_s, s->ev_done));
    int sp = rap_trace_gpu_begin(rt->cfg.trace, RAP_TRACK_COPY, "copy batch", "copy", b->seq,
                                 rt->copy_s);
    /* a row share is the slot's own pinned raw batch: its previous copy
     * must be done before it is overwritten (a pageable one made every
     * copy synchronous: half the throughput on two GPUs, bench/RESULTS.md) */
    if (rt->cfg.row_share_ranks > 1)
        RAP_TRY(rap_rt_event_wait(s->ev_copied, RT_GPU_WAIT_S, "a batch's copy"));
    const rap_batch *src;
    if (rt->cfg.row_share_ranks > 1 && b->batch.device) { /* this rank's rows, on the GPU */
        int64_t r0, n;
        rap_hybrid_rows(b->batch.rows, rt->cfg.row_share_ranks, rt->cfg.row_share_rank, &r0, &n);
        s->share.rows = 0;
        RAP_TRY(rap_batch_append_device(&s->share, &b->batch, r0, n, rt->copy_s));
        s->share.first_row = b->batch.first_row + r0;
        src = &s->share;
    } else {
        src = rt_share_rows(rt, &b->batch, &s->share);
    }
    RAP_TRY(rap_prep_load(s->prep, src));
    if (sp >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, sp, rt->copy_s));
    RAP_TRY(rap_rt_record(s->ev_copied, rt->copy_s));
    s->full = true;
    return RAP_OK;
}

rap_status rt_release_copied(rap_runtime *rt, int except)
{
    for (int i = 0; i < rt->S; i++) {
        rt_slot *s = &rt->slots[i];
        if (i == except || (!s->rb && !s->job))
            continue;
        if (on_gpu(rt))
            RAP_TRY(rap_rt_event_wait(s->ev_copied, RT_GPU_WAIT_S, "the copy of a batch"));
        if (s->rb)
            rap_rowfeed_release(rt->feed, s->rb);
        if (s->job)
            rt_cpu_job_release(rt, s->job);
        s->rb = NULL;
        s->job = NULL;
    }
    return RAP_OK;
}

/* ---- preprocessing launches */

static rap_status launch_slice(rap_runtime *rt, rt_slot *s, int k, int d0, int d1, int64_t r0,
                               int64_t r1, void *stream, int track)
{
    if (r0 >= s->prep->rows) /* a piece past the end of a short (last) batch */
        return RAP_OK;
    int sp = -1;
    if (rt->cfg.trace && on_gpu(rt)) {
        char name[RAP_TRACE_NAME];
        snprintf(name, sizeof name, "k%d %s", k, rap_kernel_op_name(&rt->fus->kernels[k]));
        sp = rap_trace_gpu_begin(rt->cfg.trace, track, name, "prep", s->info.seq, stream);
    }
    RAP_TRY(rap_prep_run_kernel(s->prep, k, d0, d1, r0, r1, stream));
    if (sp >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, sp, stream));
    return RAP_OK;
}

rap_status rt_prep_whole(rap_runtime *rt, rt_slot *s, void *stream, int track)
{
    if (on_gpu(rt))
        RAP_TRY(rap_rt_wait(stream, s->ev_copied));
    int nk = rap_prep_n_kernels(s->prep);
    for (int k = 0; k < nk; k++)
        RAP_TRY(launch_slice(rt, s, k, 0, rap_prep_n_descs(s->prep, k), 0, RAP_ROWS_END, stream,
                             track));
    RAP_TRY(rap_input_make(s->input, s->prep, &s->mb));
    if (on_gpu(rt))
        RAP_TRY(rap_rt_record(s->ev_ready, stream));
    return RAP_OK;
}

/* Lanes used in the level just launched back into prep_s. */
static rap_status join_lanes(rap_runtime *rt, unsigned used)
{
    for (int j = 1; j < rt->n_lanes; j++)
        if (used >> j & 1) {
            RAP_TRY(rap_rt_record(rt->lane_ev[j], rt->lane_s[j - 1]));
            RAP_TRY(rap_rt_wait(rt->prep_s, rt->lane_ev[j]));
        }
    return RAP_OK;
}

/* Window w's slices of slot s's batch on the preprocessing stream, or with
 * lanes level by level: a level's slices on their lanes at once (forked
 * from prep_s, joined back before the next level and at the end). */
rap_status rt_launch_window(rap_runtime *rt, rt_slot *s, rap_window w)
{
    int n;
    const rap_slice *sl = rap_schedule_window(rt->sched, w, &n);
    int first = rt->sched->win_first[w], level = -1;
    unsigned used = 0;
    for (int i = 0; i < n; i++) {
        int64_t r0 = sl[i].r0, r1 = sl[i].r1;
        if (sl[i].shares > 0) { /* rows of a share of this batch (a rank's own rows) */
            rap_slice_rows(&sl[i], s->prep->rows, &r0, &r1);
            if (r0 >= r1)
                continue;
        }
        void *stream = rt->prep_s;
        if (rt->n_lanes > 1) {
            int lv = rt->sl_level[first + i], lane = rt->sl_lane[first + i];
            if (lv != level) { /* the next level: after every slice of the one before */
                RAP_TRY(join_lanes(rt, used));
                RAP_TRY(rap_rt_record(rt->fork_ev, rt->prep_s));
                level = lv;
                used = 0;
            }
            if (lane > 0) {
                stream = rt->lane_s[lane - 1];
                if (!(used >> lane & 1))
                    RAP_TRY(rap_rt_wait(stream, rt->fork_ev));
            }
            used |= 1u << lane;
        }
        RAP_TRY(launch_slice(rt, s, sl[i].kernel, sl[i].d0, sl[i].d1, r0, r1, stream,
                             RAP_TRACK_PREP));
    }
    return join_lanes(rt, used);
}

/* Levels and lanes of the schedule's slices (prep_lanes > 1): inside a
 * window, a slice's level is one more than that of every earlier slice of
 * the window computing one of its inputs or running one of its
 * descriptors (row pieces stay in order); a level's slices take the lanes
 * in turn, except that kernels with computed offsets all take lane 0 (their
 * length scans share the executor's scratch). */
static rap_status plan_lanes(rap_runtime *rt)
{
    const rap_schedule *sc = rt->sched;
    const rap_plan *p = rt->plan;
    const rap_fusion *f = rt->fus;
    rt->sl_level = rap_malloc(sizeof(int) * (size_t)(2 * sc->n_slices + 1), "prep lanes");
    int *plev = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "prep lanes");
    if (!rt->sl_level || !plev) {
        rap_free(plev);
        return RAP_ERR_NOMEM;
    }
    rt->sl_lane = rt->sl_level + sc->n_slices;
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        for (int i = 0; i < p->n_nodes; i++)
            plev[i] = -1; /* level of the window's latest slice computing node i */
        int next[64] = {0}; /* per level: the next lane */
        for (int i = sc->win_first[w]; i < sc->win_first[w + 1]; i++) {
            const rap_slice *sl = &sc->slices[i];
            const rap_kernel *kn = &f->kernels[sl->kernel];
            int lv = 0;
            for (int j = sl->d0; j < sl->d1; j++) {
                int node = kn->nodes[j], in = p->nodes[node].input;
                if (in >= 0 && plev[in] + 1 > lv)
                    lv = plev[in] + 1;
                if (plev[node] + 1 > lv)
                    lv = plev[node] + 1;
            }
            if (lv > 63)
                lv = 63;
            for (int j = sl->d0; j < sl->d1; j++)
                if (plev[kn->nodes[j]] < lv)
                    plev[kn->nodes[j]] = lv;
            bool computed = kn->n > 0 && p->nodes[kn->nodes[0]].off == RAP_OFF_COMPUTED;
            rt->sl_level[i] = lv;
            rt->sl_lane[i] = computed ? 0 : next[lv]++ % rt->n_lanes;
        }
    }
    rap_free(plev);
    return RAP_OK;
}

rap_status rt_lanes_create(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    rt->n_lanes = c->prep_lanes > 0 ? c->prep_lanes : RAP_RT_DEFAULT_LANES;
    if (rt->n_lanes > RAP_RT_MAX_LANES)
        return rap_fail(RAP_ERR_ARG, "runtime: %d preprocessing lanes, at most %d",
                        rt->n_lanes, RAP_RT_MAX_LANES);
    if (!on_gpu(rt))
        rt->n_lanes = 1;
    if (rt->n_lanes > 1) {
        RAP_TRY(plan_lanes(rt));
        RAP_TRY(rap_rt_sync_event_create(&rt->fork_ev));
        for (int j = 1; j < rt->n_lanes; j++) {
            RAP_TRY(rap_rt_stream_create(&rt->lane_s[j - 1], false));
            RAP_TRY(rap_rt_sync_event_create(&rt->lane_ev[j]));
        }
    }
    return RAP_OK;
}

rap_status rt_lanes_replan(rap_runtime *rt)
{
    if (rt->n_lanes <= 1)
        return RAP_OK;
    rap_free(rt->sl_level);
    rt->sl_level = rt->sl_lane = NULL;
    return plan_lanes(rt);
}

void rt_lanes_free(rap_runtime *rt)
{
    for (int j = 0; j < RAP_RT_MAX_LANES; j++) {
        if (rt->lane_s[j])
            rap_rt_stream_free(rt->lane_s[j]);
        if (rt->lane_ev[j])
            rap_rt_event_free(rt->lane_ev[j]);
    }
    if (rt->fork_ev)
        rap_rt_event_free(rt->fork_ev);
    rap_free(rt->sl_level);
}

/* ---- making and freeing slots */

static rap_status make_slot(rap_runtime *rt, rt_slot *s, bool prep, void *exec_stream,
                            void *pack_stream)
{
    if (on_gpu(rt)) {
        RAP_TRY(rap_rt_sync_event_create(&s->ev_copied));
        RAP_TRY(rap_rt_sync_event_create(&s->ev_ready));
        RAP_TRY(rap_rt_sync_event_create(&s->ev_done));
    }
    if (!prep)
        return RAP_OK;
    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = rt->dev;
    pc.max_rows = rt->B;
    pc.threads = rt->cfg.prep_threads;
    pc.stream = exec_stream;
    RAP_TRY(rap_prep_create(rt->plan, rt->fus, &pc, &s->prep));
    if (rt->cfg.row_share_ranks > 1 && rt->feed && rap_rowfeed_parse(rt->feed) == RAP_PARSE_GPU)
        RAP_TRY(rap_batch_create_device(&s->share, rt->plan->schema, rt->B)); /* rows on the GPU */
    else if (rt->cfg.row_share_ranks > 1)
        RAP_TRY(rap_batch_create(&s->share, rt->plan->schema, rt->B, on_gpu(rt)));
    RAP_TRY(rap_input_create(rt->plan, rt->dev, rt->B, pack_stream, &s->input));
    /* row kernels that compute every dense column pack them in place */
    return rap_input_bind(s->input, s->prep, NULL);
}

rap_status rt_slots_create(rap_runtime *rt, bool prep, void *pack_stream)
{
    if (rt->S > 0) {
        rt->slots = rap_calloc(sizeof(rt_slot) * (size_t)rt->S, "runtime slots");
        if (!rt->slots)
            return RAP_ERR_NOMEM;
    }
    for (int i = 0; i < rt->S; i++)
        RAP_TRY(make_slot(rt, &rt->slots[i], prep, rt->copy_s, pack_stream));
    return RAP_OK;
}

void rt_slots_free(rap_runtime *rt)
{
    for (int i = 0; rt->slots && i < rt->S; i++) {
        rt_slot *s = &rt->slots[i];
        if (s->rb)
            rap_rowfeed_release(rt->feed, s->rb);
        rap_input_free(s->input);
        rap_prep_free(s->prep);
        rap_batch_free_any(&s->share);
        if (s->dev_block)
            rap_cuda_free(s->dev_block);
        rap_rt_event_free(s->ev_copied);
        rap_rt_event_free(s->ev_ready);
        rap_rt_event_free(s->ev_done);
    }
    rap_free(rt->slots);
    rt->slots = NULL;
}
