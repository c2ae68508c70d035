/*
 * rt_mem.c -- what a runtime allocates, counted before it exists: the
 * slot and job counts and the model-batch layout the modes' create
 * functions use (rt_internal.h), and rap_runtime_mem_of (runtime.h), which
 * the memory plan (memplan.h) sizes.
 */
#include "run/input.h"
#include "run/rt_internal.h"

#include <string.h>

int rt_mode_slots(const rap_runtime_config *c, rap_mode mode, bool gpu)
{
    const int two = c->slots >= 2 ? c->slots : 2;
    switch (mode) {
    case RAP_MODE_SEQUENTIAL: return gpu ? two : 1;
    case RAP_MODE_IDEAL: return c->ideal_batches > 0 ? c->ideal_batches : 8;
    case RAP_MODE_CPU: return gpu ? two : 0;
    case RAP_MODE_MPS: return 1;
    default: return two; /* stream, rap */
    }
}

int rt_cpu_jobs(const rap_runtime_config *c, int S, int *k)
{
    *k = c->cpu_workers > 0 ? c->cpu_workers : rap_ncores();
    return *k + S + 2;
}

size_t rt_blk_layout(int64_t B, int n_dense, int n_tables, int64_t max_bag, size_t *dense,
                     size_t *label, size_t *off, size_t *ids)
{
    size_t at = 0;
    if (dense)
        *dense = at;
    at += align256(sizeof(float) * (size_t)(B * n_dense));
    if (label)
        *label = at;
    at += align256(sizeof(float) * (size_t)B);
    for (int t = 0; t < n_tables; t++) {
        if (off)
            off[t] = at;
        at += align256(sizeof(int64_t) * (size_t)(B + 1));
        if (ids)
            ids[t] = at;
        at += align256(sizeof(int64_t) * (size_t)(B * max_bag));
    }
    return at;
}

/* The input shape the runtime takes (create_common): the model's, or with
 * train_fn the plan's (a rank's part of the columns). */
static rap_status shape_of(const rap_runtime_config *c, const rap_model_config *mc, int *nd,
                           int *nt)
{
    *nd = mc->n_dense;
    *nt = mc->n_tables;
    if (!c->train_fn)
        return RAP_OK;
    int64_t *rows = rap_malloc(sizeof(int64_t) * RAP_MAX_TABLES, "runtime plan");
    if (!rows)
        return RAP_ERR_NOMEM;
    rap_status st = rap_input_shape(c->plan, nd, nt, rows);
    rap_free(rows);
    return st;
}

rap_status rap_runtime_mem_of(const rap_runtime_config *c, const rap_model_config *mc,
                              rap_device dev, rap_runtime_mem *out)
{
    memset(out, 0, sizeof *out);
    if (!c || !mc || (int)c->mode < 0 || c->mode >= RAP_MODE_COUNT)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_mem_of: a config with a mode is required");
    const bool gpu = dev == RAP_GPU;
    out->B = c->batch_rows > 0 ? c->batch_rows : mc->batch;
    RAP_TRY(shape_of(c, mc, &out->n_dense, &out->n_tables));
    const int64_t bag = mc->max_bag > 0 ? mc->max_bag : 1;
    out->records = c->max_records > 0 ? sizeof(rap_step_record) * (size_t)c->max_records : 0;
    out->ring_pinned = gpu ? sizeof(float) * RT_RING : 0;
    const bool share = c->row_share_ranks > 1;
    if (c->shard && c->shard[0]) { /* mode_ideal.c shard_create: one slot of events */
        out->shard = true;
        out->slots = gpu ? 1 : 0;
        return RAP_OK;
    }
    out->slots = rt_mode_slots(c, c->mode, gpu);
    if (c->mode == RAP_MODE_MPS) { /* mode_mps.c: one slot of events, the server */
        out->mps = true;
        return RAP_OK;
    }
    if (c->mode == RAP_MODE_CPU) { /* mode_cpu.c: jobs on the host, device blocks */
        int k;
        const int J = rt_cpu_jobs(c, out->slots, &k);
        out->host_execs = J;
        out->inputs_host = J;
        out->share_batches = share ? J : 0;
        out->blk_bytes =
            rt_blk_layout(out->B, out->n_dense, out->n_tables, bag, NULL, NULL, NULL, NULL);
        out->stage_blocks = gpu ? J : 0;
        out->dev_blocks = gpu ? out->slots : 0;
        return RAP_OK;
    }
    /* sequential, stream, rap, ideal: rt_slots.c make_slot with preprocessing */
    out->slot_execs = out->slots;
    if (gpu)
        out->inputs_dev = out->slots;
    else
        out->inputs_host = out->slots;
    out->share_batches = share ? out->slots : 0;
    out->share_pinned = share && gpu;
    return RAP_OK;
}
