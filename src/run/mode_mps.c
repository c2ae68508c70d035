/*
 * mode_mps.c -- the runtime's mps mode (runtime.h, docs/MPS.md): a second
 * process (`rap prep-server`, mps_server.c) reads and preprocesses the
 * input into slots of the trainer's memory, shared through CUDA IPC (and
 * MPS when a daemon runs); each step trains the next ready slot and gives
 * it back (mps_client.c). No row feed: the server reads every row in
 * order.
 */
#include "run/rt_internal.h"

#include "run/mps.h"

#include <string.h>

/* The next ready slot of the server (its ready event waited for on the
 * training stream), trained, then given back after its step. */
static rap_status mps_step(rap_runtime *rt, rap_step_info *info)
{
    if (rt->mps_end) {
        info->end = true;
        return RAP_OK;
    }
    ring_entry *e;
    RAP_TRY(rt_ring_acquire(rt, rt->mps_seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    rt_slot s;
    memset(&s, 0, sizeof s);
    int slot = -1;
    int64_t rows = 0;
    double h0 = rap_now();
    double t0 = rap_trace_host_begin(rt->cfg.trace, "wait for mps server");
    rap_status st = rap_mps_client_next(rt->mps, rt->train_s, &slot, &s.mb, &rows);
    rap_trace_host_end(rt->cfg.trace, RAP_TRACK_MAIN, "wait for mps server", "wait",
                       rt->mps_seq, t0);
    double w = rap_now() - h0;
    rt->st.starved_s += w;
    if (w > 1e-3)
        rt->st.starved_steps++;
    RAP_TRY(st);
    if (slot < 0) {
        rt->mps_end = true;
        e->inflight = false;
        e->index = -1;
        info->end = true;
        return RAP_OK;
    }
    s.mb.rows = rows;
    s.info.rows = rows;
    s.info.seq = rt->mps_seq++;
    RAP_TRY(rt_record_w1(rt, e));
    /* rt_phases_gpu records the slot's done event: a scratch one */
    s.ev_done = rt->slots[0].ev_done;
    RAP_TRY(rt_phases_gpu(rt, &s, e, NULL));
    rt->trained++;
    RAP_TRY(rap_mps_client_release(rt->mps, slot, rt->train_s));
    *info = s.info;
    return RAP_OK;
}

/* One slot of events (its done event is the steps' scratch one), then the
 * server started and set up. */
static rap_status mps_create(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    rt->S = 1;
    RAP_TRY(rt_slots_create(rt, false, NULL));
    rap_mps_config mc;
    memset(&mc, 0, sizeof mc);
    mc.plan = c->plan_spec ? c->plan_spec : "default";
    mc.reader = c->reader;
    mc.batch_rows = rt->B;
    mc.n_slots = c->slots >= 2 ? c->slots : 3;
    mc.schema = rt->plan->schema;
    mc.n_dense = rt->n_dense;
    mc.n_tables = rt->n_tables;
    mc.table_rows = rap_model_config_of(rt->model)->table_rows;
    mc.exe = c->mps_exe;
    return rap_mps_client_create(&mc, &rt->mps);
}

/* The server's reader accounting. */
static void mps_stats(rap_runtime *rt, rap_runtime_stats *st)
{
    if (!rt->mps)
        return;
    rap_mps_stats ms;
    rap_mps_client_get_stats(rt->mps, &ms);
    st->reader = ms.reader;
    st->have_reader = true;
}

/* Stops and reaps the server. */
static void mps_free(rap_runtime *rt)
{
    rap_mps_client_free(rt->mps);
    rt->mps = NULL;
}

const rt_mode_ops rt_mode_mps_ops = {mps_create, mps_step, mps_stats, mps_free};
