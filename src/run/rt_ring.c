/*
 * rt_ring.c -- the runtime's ring of step results (rt_internal.h): per
 * trained step its loss and timings, read back once the step's events have
 * completed (the host never waits for a step it has just queued), and
 * handed out in step order by rap_runtime_next_loss.
 */
#include "run/rt_internal.h"

#include <string.h>

rap_status rt_ring_create(rap_runtime *rt)
{
    for (int i = 0; i < RT_RING; i++)
        rt->ring[i].index = -1;
    if (!on_gpu(rt))
        return RAP_OK;
    RAP_TRY(rap_rt_host_alloc((void **)&rt->h_losses, sizeof(float) * RT_RING));
    float *h_losses_dev; /* the same, by the device's address (rap_rt_store_f32) */
    RAP_TRY(rap_rt_host_dev_ptr(rt->h_losses, (void **)&h_losses_dev));
    for (int i = 0; i < RT_RING; i++) {
        rt->ring[i].h_loss = rt->h_losses + i;
        rt->ring[i].h_loss_dev = h_losses_dev + i;
        for (int k = 0; k < EV_N; k++) {
            RAP_TRY(rap_rt_event_create(&rt->ring[i].ev[k]));
        }
    }
    return RAP_OK;
}

void rt_ring_free(rap_runtime *rt)
{
    for (int i = 0; i < RT_RING; i++)
        for (int k = 0; k < EV_N; k++) {
            rap_rt_event_free(rt->ring[i].ev[k]);
        }
    rap_rt_host_free(rt->h_losses);
}

void rt_record_step(rap_runtime *rt, const rap_step_record *r)
{
    rap_runtime_stats *s = &rt->st;
    for (int p = 0; p < 4; p++)
        s->phase_ms[p] += r->phase_ms[p];
    s->grad_comm_ms += r->grad_comm_ms;
    s->exposed_ms += r->exposed_ms;
    s->step_ms += r->step_ms;
    if (s->records && s->n_records < rt->cfg.max_records)
        s->records[s->n_records++] = *r;
    s->timed_steps++;
}

/* GPU: reads back entry e (its events have completed). */
static rap_status ring_finish(rap_runtime *rt, ring_entry *e)
{
    rap_step_record r;
    memset(&r, 0, sizeof r);
    RAP_TRY(rap_rt_elapsed(e->ev[EV_W0], e->ev[w1_ev(rt)], &r.exposed_ms));
    for (int p = 0; p < 4; p++)
        RAP_TRY(rap_rt_elapsed(e->ev[EV_P0 + p],
                               e->ev[p == 2 && hooked(rt) ? EV_GC : EV_P0 + p + 1],
                               &r.phase_ms[p]));
    if (hooked(rt))
        RAP_TRY(rap_rt_elapsed(e->ev[EV_GC], e->ev[EV_P3], &r.grad_comm_ms));
    RAP_TRY(rap_rt_elapsed(e->ev[EV_W0], e->ev[EV_END], &r.step_ms));
    e->rec = r;
    e->loss = (double)*e->h_loss;
    e->inflight = false;
    e->done = true;
    rt_record_step(rt, &r);
    return RAP_OK;
}

rap_status rt_ring_poll(rap_runtime *rt, int64_t wait_upto)
{
    while (rt->ring_head < rt->trained) {
        ring_entry *e = &rt->ring[rt->ring_head % RT_RING];
        if (e->inflight) {
            bool done;
            if (rt->ring_head <= wait_upto) {
                RAP_TRY(rap_rt_event_wait(e->ev[EV_END], RT_GPU_WAIT_S, "a training step"));
                done = true;
            } else {
                RAP_TRY(rap_rt_event_done(e->ev[EV_END], &done));
            }
            if (!done)
                break;
            RAP_TRY(ring_finish(rt, e));
        }
        rt->ring_head++;
    }
    return RAP_OK;
}

rap_status rt_ring_acquire(rap_runtime *rt, int64_t seq, ring_entry **out)
{
    ring_entry *e = &rt->ring[rt->trained % RT_RING];
    if (e->inflight)
        RAP_TRY(rt_ring_poll(rt, rt->trained - RT_RING));
    e->index = rt->trained;
    e->seq = seq;
    e->done = false;
    e->inflight = on_gpu(rt);
    memset(&e->rec, 0, sizeof e->rec);
    *out = e;
    return RAP_OK;
}

bool rap_runtime_next_loss(rap_runtime *rt, bool wait, int64_t *step_index, double *loss,
                           rap_status *st)
{
    *st = RAP_OK;
    while (rt->loss_head < rt->trained) {
        ring_entry *e = &rt->ring[rt->loss_head % RT_RING];
        if (e->index != rt->loss_head) { /* overwritten: never asked for in time */
            rt->loss_head++;
            continue;
        }
        if (e->inflight) {
            *st = rt_ring_poll(rt, wait ? rt->loss_head : -1);
            if (*st != RAP_OK)
                return false;
            if (e->inflight)
                return false;
        }
        if (!e->done) {
            rt->loss_head++;
            continue;
        }
        e->done = false;
        *step_index = e->index;
        *loss = e->loss;
        rt->loss_head++;
        return true;
    }
    return false;
}
