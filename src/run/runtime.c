/*
 * runtime.c -- the co-running runtime's API (runtime.h, docs/RUNTIME.md):
 * the mode names, and create, step, sync, stats and free, each mode behind
 * its table of functions (rt_mode_ops, rt_internal.h) chosen at create.
 * What every mode shares is set up here: the batch shape, the streams, the
 * ring of step results, the schedule check. GPU calls go through
 * runtime_gpu.cu.
 */
#include "run/runtime.h"

#include "core/core.h"
#include "run/input.h"
#include "run/pack.h"
#include "run/rt_internal.h"

#include <stdio.h>
#include <string.h>

/* ================================================================ modes */

#define MODE_NAME_ENTRY(e, name) [e] = name,
static const char *const g_mode_names[RAP_MODE_COUNT] = {RAP_MODES(MODE_NAME_ENTRY, )};
#undef MODE_NAME_ENTRY

/* Each mode's functions; ideal from a shard has its own (rt_mode_shard_ops). */
static const rt_mode_ops *const g_mode_ops[RAP_MODE_COUNT] = {
    [RAP_MODE_IDEAL] = &rt_mode_ideal_ops,   [RAP_MODE_CPU] = &rt_mode_cpu_ops,
    [RAP_MODE_SEQUENTIAL] = &rt_mode_sequential_ops, [RAP_MODE_STREAM] = &rt_mode_stream_ops,
    [RAP_MODE_MPS] = &rt_mode_mps_ops,       [RAP_MODE_RAP] = &rt_mode_rap_ops,
};

const char *rap_mode_name(rap_mode m)
{
    return (int)m >= 0 && m < RAP_MODE_COUNT ? g_mode_names[m] : "?";
}

int rap_mode_parse(const char *s)
{
    for (int m = 0; m < RAP_MODE_COUNT; m++)
        if (s && !strcmp(s, g_mode_names[m]))
            return m;
    return -1;
}

/* "ideal, cpu, ... or rap" into buf. */
static const char *mode_choices(char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int m = 0; m < RAP_MODE_COUNT && at < n; m++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s",
                               m == 0 ? "" : m == RAP_MODE_COUNT - 1 ? " or " : ", ",
                               g_mode_names[m]);
    return buf;
}

rap_status rap_mode_list_parse(const char *spec, rap_mode *modes, int max, int *n)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int m = rap_mode_parse(tok);
        if (m < 0) {
            char names[128];
            return rap_fail(RAP_ERR_ARG, "--modes \"%s\": unknown mode \"%s\" (expected %s)", spec,
                            tok, mode_choices(names, sizeof names));
        }
        for (int i = 0; i < *n; i++)
            if ((int)modes[i] == m)
                return rap_fail(RAP_ERR_ARG, "--modes \"%s\": %s given twice", spec, tok);
        if (*n >= max)
            return rap_fail(RAP_ERR_ARG, "--modes \"%s\": at most %d modes", spec, max);
        modes[(*n)++] = (rap_mode)m;
    }
    if (*n == 0)
        return rap_fail(RAP_ERR_ARG, "--modes: empty");
    return RAP_OK;
}

bool rap_mode_available(rap_mode m, rap_device dev, char *why, size_t why_len)
{
    const char *w = NULL;
    if (dev == RAP_CPU && m != RAP_MODE_CPU && m != RAP_MODE_SEQUENTIAL)
        w = "needs the GPU (--device gpu): on the CPU only the cpu and sequential modes run";
    if (w && why && why_len)
        snprintf(why, why_len, "%s", w);
    return w == NULL;
}

/* ================================================================ steps */

rap_status rap_runtime_step(rap_runtime *rt, rap_step_info *info)
{
    memset(info, 0, sizeof *info);
    if (!rt)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_step: runtime is NULL");
    double t0 = rap_now(), pre0 = rt->st.preload_s;
    rap_status st = rt->ops->step(rt, info);
    if (st == RAP_OK && on_gpu(rt))
        st = rt_ring_poll(rt, -1);
    rt->st.wall_s += rap_now() - t0 - (rt->st.preload_s - pre0);
    if (st == RAP_OK && info->rows > 0) {
        rt->st.steps++;
        rt->st.samples += info->rows;
    }
    return st;
}

rap_status rap_runtime_set_schedule(rap_runtime *rt, const rap_schedule *s)
{
    if (!rt || !s)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_set_schedule: runtime or schedule is NULL");
    RAP_TRY(rap_schedule_validate(s, rt->plan, rt->fus, rt->B));
    if (rt->mode == RAP_MODE_RAP) {
        rt->sched = s;
        rt->gc_late = false;
        if (rt->cfg.train_fn && rt->cfg.hybrid && on_gpu(rt))
            RAP_TRY(rt_check_hooked_order(rt));
        rt->pack_after = rt_pack_window(rt);
        rt->copy_at = rt_copy_window(rt);
        RAP_TRY(rt_lanes_replan(rt));
    }
    rt_parse_swap(rt, s);
    rt->st.schedule_swaps++;
    return RAP_OK;
}

const rap_schedule *rap_runtime_schedule(const rap_runtime *rt)
{
    return rt && rt->mode == RAP_MODE_RAP ? rt->sched : NULL;
}

rap_status rap_runtime_sync(rap_runtime *rt)
{
    if (!rt || !on_gpu(rt))
        return RAP_OK;
    RAP_TRY(rap_run_stream_sync(rt->train_s));
    RAP_TRY(rap_run_stream_sync(rt->prep_s));
    RAP_TRY(rap_run_stream_sync(rt->copy_s));
    RAP_TRY(rap_model_sync(rt->model)); /* reports the model's device error flags */
    return rt_ring_poll(rt, rt->trained);
}

void rap_runtime_get_stats(rap_runtime *rt, rap_runtime_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!rt)
        return;
    *st = rt->st;
    rt_parse_stats(rt, st);
    if (rt->ops->stats)
        rt->ops->stats(rt, st);
}

/* ================================================================ create and free */

rap_status rap_runtime_train_stream_create(void **stream) { return rap_rt_stream_create(stream, true); }

void rap_runtime_free(rap_runtime *rt)
{
    if (!rt)
        return;
    if (on_gpu(rt)) {
        if (rt->train_s)
            rap_run_stream_sync(rt->train_s);
        if (rt->prep_s)
            rap_run_stream_sync(rt->prep_s);
        if (rt->copy_s)
            rap_run_stream_sync(rt->copy_s);
    }
    if (rt->ops->free)
        rt->ops->free(rt);
    rt_slots_free(rt);
    rt_ring_free(rt);
    rt_graphs_free(rt);
    if (rt->own_streams) {
        rap_rt_stream_free(rt->prep_s);
        rap_rt_stream_free(rt->copy_s);
    }
    rap_free(rt->st.records);
    rap_free(rt);
}

/* What every mode shares: the batch shape, the row share checked, the
 * records, the ring, and on the GPU the preprocessing and copy streams and
 * the loss read back. */
static rap_status create_common(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    const rap_model_config *mc = rap_model_config_of(rt->model);
    rt->B = c->batch_rows > 0 ? c->batch_rows : mc->batch;
    rt->n_tables = mc->n_tables;
    rt->n_dense = mc->n_dense;
    if (c->train_fn) { /* hybrid: the plan may be this rank's part (placement owner) */
        int64_t *rows = rap_malloc(sizeof(int64_t) * RAP_MAX_TABLES, "runtime");
        if (!rows)
            return RAP_ERR_NOMEM;
        rap_status st = rap_input_shape(rt->plan, &rt->n_dense, &rt->n_tables, rows);
        rap_free(rows);
        RAP_TRY(st);
    }
    rt->max_bag = mc->max_bag > 0 ? mc->max_bag : 1;
    if (c->row_share_ranks > 1 &&
        (!c->train_fn || c->row_share_rank < 0 || c->row_share_rank >= c->row_share_ranks ||
         rt->mode == RAP_MODE_MPS || c->shard))
        return rap_fail(RAP_ERR_ARG, "runtime: a row share (rank %d of %d) needs train_fn, a "
                        "row feed and a mode other than mps (not %s)",
                        c->row_share_rank, c->row_share_ranks, rap_mode_name(rt->mode));
    /* the GPU parser's rows are device memory: only the modes that copy a
     * feed batch whole into a GPU executor take them */
    if (rt->feed && rap_rowfeed_parse(rt->feed) == RAP_PARSE_GPU &&
        (!on_gpu(rt) || rt->mode == RAP_MODE_CPU || rt->mode == RAP_MODE_MPS))
        return rap_fail(RAP_ERR_ARG, "runtime: the row feed's rows were parsed on the GPU "
                        "(device memory): mode %s takes host rows (--parse cpu)",
                        rap_mode_name(rt->mode));
    if (c->max_records > 0) {
        rt->st.records = rap_calloc(sizeof(rap_step_record) * (size_t)c->max_records, "step records");
        if (!rt->st.records)
            return RAP_ERR_NOMEM;
    }
    if (on_gpu(rt)) {
        rt->train_s = mc->stream;
        if (!rt->train_s)
            return rap_fail(RAP_ERR_ARG, "runtime: the GPU model must run on a stream of its own "
                            "(rap_runtime_train_stream_create)");
        rt->own_streams = true;
        RAP_TRY(rap_rt_stream_create(&rt->prep_s, false));
        RAP_TRY(rap_rt_stream_create(&rt->copy_s, false));
    }
    RAP_TRY(rt_ring_create(rt));
    if (on_gpu(rt)) {
        RAP_TRY(rap_rt_model_loss_ptr(rt->model, &rt->loss_dev));
        if (c->train_fn && c->train_fn_model_loss && c->train_loss_dev)
            rt->loss_dev = c->train_loss_dev;
        if (c->trace)
            RAP_TRY(rap_trace_gpu_origin(c->trace, rt->train_s));
    }
    return RAP_OK;
}

static rap_status create_inner(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    RAP_TRY(create_common(rt));
    /* a schedule given is checked in every mode, also where only rap mode
     * runs it: it names the fusion the run builds, and a cut or foreign
     * one is refused instead of ignored (not with a shard: no preprocessing) */
    if (c->schedule && !(c->shard && c->shard[0]))
        RAP_TRY(rap_schedule_validate(c->schedule, rt->plan, rt->fus, rt->B));
    RAP_TRY(rt->ops->create(rt));
    RAP_TRY(rt_parse_create(rt));
    if (on_gpu(rt))
        rap_rt_mem_used(&rt->st.gpu_bytes_used);
    return RAP_OK;
}

rap_status rap_runtime_create(const rap_runtime_config *c, rap_model *m, rap_rowfeed *f,
                              rap_runtime **out)
{
    *out = NULL;
    bool shard = c && c->shard && c->shard[0];
    if (shard && c->mode != RAP_MODE_IDEAL)
        return rap_fail(RAP_ERR_ARG, "%s: " RAP_SHARD_NEEDS_IDEAL " (not --mode %s)", c->shard,
                        rap_mode_name(c->mode));
    if (!c || !m || (!f && c->mode != RAP_MODE_MPS && !shard) || !c->plan || !c->fusion)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_create: config, model, feed, plan and fusion "
                        "are required");
    if (c->progressive && c->train_fn)
        return rap_fail(RAP_ERR_ARG, "progressive validation runs on one rank's whole model "
                        "(not with ranks yet)");
    if ((int)c->mode < 0 || c->mode >= RAP_MODE_COUNT)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_create: mode %d is not a mode", (int)c->mode);
    if (c->mode == RAP_MODE_MPS && c->reader.schema &&
        !rap_input_schema_is_criteo(c->reader.schema))
        return rap_fail(RAP_ERR_ARG, "--mode mps: its preprocessing server reads Criteo's "
                                     "layout only, not the schema %s (use another mode)",
                        c->reader.schema->source);
    char why[256];
    rap_device dev = rap_model_device(m);
    if (!shard && !rap_mode_available(c->mode, dev, why, sizeof why))
        return rap_fail(RAP_ERR_ARG, "--mode %s: %s", rap_mode_name(c->mode), why);
    rap_runtime *rt = rap_calloc(sizeof *rt, "runtime");
    if (!rt)
        return RAP_ERR_NOMEM;
    rt->cfg = *c;
    rt->mode = c->mode;
    rt->ops = shard ? &rt_mode_shard_ops : g_mode_ops[c->mode];
    rt->dev = dev;
    rt->model = m;
    rt->feed = f;
    rt->plan = c->plan;
    rt->fus = c->fusion;
    rap_status st = create_inner(rt);
    if (st != RAP_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_runtime_free(rt);
        return rap_fail(st, "%s", msg);
    }
    *out = rt;
    return RAP_OK;
}
