/*
 * mode_ideal.c -- the runtime's ideal mode (runtime.h, docs/RUNTIME.md),
 * the upper bound the other modes are measured against: training with
 * nothing to wait for.
 *   groups      batches preprocessed beforehand, a group of up to S
 *               (ideal_batches) resident on the GPU at once; the preload
 *               is counted apart (preload_s), not as training time;
 *   from a shard  every batch of a rap shard made resident at create
 *               (ideal_shard.c); steps cycle over them, nothing read or
 *               preprocessed (GPU or CPU model).
 */
#include "run/rt_internal.h"

#include "run/pack.h"

#include <string.h>

/* ---- groups of preprocessed batches */

static rap_status ideal_step(rap_runtime *rt, rap_step_info *info)
{
    if (rt->ideal_at >= rt->ideal_count) {
        if (rt_pop_marker(rt, info))
            return RAP_OK;
        if (rt->ideal_count > 0)
            RAP_TRY(rap_run_stream_sync(rt->train_s));
        double t0 = rap_now();
        rt->ideal_count = rt->ideal_at = 0;
        while (rt->ideal_count < rt->S && !rt->feed_end && rt->n_markers == 0) {
            /* The group (S = 8 or 32 slots) is larger than the feed's pool
             * (4 batches): holding every loaded batch until the group is
             * full would leave the feed thread no batch to fill while we
             * wait for the next one (the deadlock of ideal mode). Before
             * each fetch, the batches whose copies are done go back, all but
             * the one loaded last (its copy may still run; none with a pool
             * of 1): at most one is held while the feed fills the next. */
            RAP_TRY(rt_release_copied(rt, rap_rowfeed_n_batches(rt->feed) > 1
                                              ? rt->ideal_count - 1 : -1));
            rap_row_batch *b;
            RAP_TRY(rt_fetch_ex(rt, &b, true)); /* a group ends at the end of a pass */
            if (!b)
                break;
            rt_slot *s = &rt->slots[rt->ideal_count++];
            RAP_TRY(rt_load_slot(rt, s, b));
            RAP_TRY(rt_prep_whole(rt, s, rt->prep_s, RAP_TRACK_PREP));
        }
        RAP_TRY(rap_run_stream_sync(rt->prep_s));
        RAP_TRY(rt_release_copied(rt, -1));
        rt->st.preload_s += rap_now() - t0;
        if (rt->ideal_count == 0) {
            if (rt_pop_marker(rt, info))
                return RAP_OK;
            info->end = true;
            return RAP_OK;
        }
    }
    rt_slot *s = &rt->slots[rt->ideal_at++];
    ring_entry *e;
    RAP_TRY(rt_ring_acquire(rt, s->info.seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    RAP_TRY(rap_rt_wait(rt->train_s, s->ev_ready));
    RAP_TRY(rt_record_w1(rt, e));
    RAP_TRY(rt_phases_gpu(rt, s, e, NULL));
    rt->trained++;
    *info = s->info; /* a marker queued while filling the group follows its batches */
    return RAP_OK;
}

/* S = ideal_batches slots (0: 8), packing on the preprocessing stream. */
static rap_status ideal_create(rap_runtime *rt)
{
    rt->S = rt_mode_slots(&rt->cfg, RAP_MODE_IDEAL, on_gpu(rt));
    RAP_TRY(rt_graphs_create(rt));
    return rt_slots_create(rt, true, rt->prep_s);
}

const rt_mode_ops rt_mode_ideal_ops = {ideal_create, ideal_step, NULL, NULL};

/* ---- from a rap shard */

/* The next resident batch, cycling; nothing read or preprocessed.
 * Sequence numbers count batches over all passes. */
static rap_status shard_step(rap_runtime *rt, rap_step_info *info)
{
    int64_t seq = rt->sh_seq, n = rt->sh_n;
    if (rt->cfg.shard_passes > 0 && seq >= rt->cfg.shard_passes * n) {
        info->end = true;
        return RAP_OK;
    }
    int64_t b = seq % n;
    info->rows = rt->sh_rows[b];
    info->seq = seq;
    info->pass = seq / n;
    info->pos_after = rt->sh_pos[b];
    info->pass_rows = rt->sh_pos[b];
    info->end_of_pass = b == n - 1;
    rt->sh_seq++;
    if (!on_gpu(rt)) {
        rap_model_batch mb;
        rt_shard_layout(rt, info->rows, rt->sh_nids + b * rt->n_tables,
                        rt->sh_block + rt->sh_at[b], &mb);
        return rt_phases_cpu(rt, &mb, mb.rows, seq, 0);
    }
    rt_slot *s = &rt->slots[0];
    rt_shard_layout(rt, info->rows, rt->sh_nids + b * rt->n_tables, rt->sh_block + rt->sh_at[b],
                    &s->mb);
    s->info = *info;
    ring_entry *e;
    RAP_TRY(rt_ring_acquire(rt, seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    RAP_TRY(rt_record_w1(rt, e));
    RAP_TRY(rt_phases_gpu(rt, s, e, NULL));
    rt->trained++;
    return RAP_OK;
}

/* One slot of events (GPU), then the shard's batches made resident. */
static rap_status shard_create(rap_runtime *rt)
{
    if (on_gpu(rt)) {
        rt->S = 1;
        rt->slots = rap_calloc(sizeof(rt_slot), "runtime slots");
        if (!rt->slots)
            return RAP_ERR_NOMEM;
        RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_copied));
        RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_ready));
        RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_done));
    }
    return rt_shard_load(rt);
}

const rt_mode_ops rt_mode_shard_ops = {shard_create, shard_step, NULL, rt_shard_free};
