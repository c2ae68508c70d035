/* pipeline_plan.c -- the pipeline builder's first step (pipeline.h): what
 * a job's config names, read, checked and decided once -- the model's
 * shape, the fusion, what --schedule is, the table sharding -- each
 * rank's mode, and the sizes of the parts before anything is allocated. */
#include "run/pipeline_internal.h"

#include "core/core.h"
#include "run/input.h"
#include "sched/fusion_file.h"
#include "sched/rank_schedule.h"

#include <string.h>
#include <unistd.h>

rap_status rap_pipeline_model_shape(const rap_plan *p, rap_model_config *mc)
{
    RAP_TRY(rap_input_shape(p, &mc->n_dense, &mc->n_tables, mc->table_rows));
    mc->max_bag = 1;
    for (int i = 0; i < p->n_cols; i++) {
        const rap_node *n = &p->nodes[p->cols[i].node];
        if (n->kind == RAP_SPARSE && n->ids_per_row > mc->max_bag)
            mc->max_bag = n->ids_per_row;
    }
    return RAP_OK;
}

void rap_pipeline_config_defaults(rap_pipeline_config *c)
{
    memset(c, 0, sizeof *c);
    rap_model_config_defaults(&c->model);
    c->device = RAP_CPU;
    c->reader = rap_reader_defaults();
    c->rank.mode = -1;
    c->rank.gpu = -1;
}

/* The command the messages name ("train", "bench"). */
static const char *cmd_of(const rap_pipeline_config *c) { return c->cmd ? c->cmd : "run"; }

rap_status rap_pipeline_schedule_find(const char *s, int ranks, rap_placement placement,
                                      const char *cmd, rap_pipeline_sched *kind)
{
    *kind = RAP_PIPE_SCHED_BUILTIN;
    if (!s || !s[0])
        return RAP_OK;
    if (access(s, F_OK) == 0) { /* its errors are the loader's */
        *kind = RAP_PIPE_SCHED_FILE;
        return RAP_OK;
    }
    if (!rap_rank_schedule_exists(s))
        return rap_fail(RAP_ERR_ARG, "--schedule %s: neither a schedule file (rap plan --out %s) "
                        "nor the prefix of the placement planner's per-rank manifests (no "
                        "%s.rank0: rap plan --gpus R --out %s)", s, s, s, s);
    *kind = RAP_PIPE_SCHED_RANKS; /* rap plan --gpus R's per-rank manifests */
    if (ranks <= 0)
        return rap_fail(RAP_ERR_ARG, "--schedule %s: %s.rank<r> are the placement planner's "
                        "per-rank manifests (rap plan --gpus R): %s with --gpus R or under "
                        "mpirun -np R, or give one schedule file", s, s, cmd ? cmd : "run");
    if (placement == RAP_PLACE_BATCH && ranks > 1)
        return rap_fail(RAP_ERR_ARG, "--schedule %s (per-rank manifests) runs placement "
                        "owner or search; --placement batch has no per-rank plan", s);
    return RAP_OK;
}

/* What --schedule names, and with a schedule file the fusion rap plan
 * wrote beside it (SCHEDULE.fusion) when it is there. */
static rap_status find_schedule(rap_pipeline_plan *pl)
{
    const rap_pipeline_config *c = &pl->cfg;
    if (c->schedule_made) {
        pl->sched = RAP_PIPE_SCHED_FILE;
        return RAP_OK;
    }
    RAP_TRY(rap_pipeline_schedule_find(c->schedule, c->ranks, c->placement, cmd_of(c),
                                       &pl->sched));
    if (pl->sched == RAP_PIPE_SCHED_FILE) {
        snprintf(pl->fusion_file, sizeof pl->fusion_file, "%s.fusion", c->schedule);
        if (access(pl->fusion_file, R_OK) != 0)
            pl->fusion_file[0] = 0;
    }
    return RAP_OK;
}

rap_status rap_pipeline_mode(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                             rap_mode *mode)
{
    const rap_pipeline_config *c = &pl->cfg;
    rap_mode m = r->mode >= 0 ? (rap_mode)r->mode
                              : (c->device == RAP_GPU && !c->cuda_graph ? RAP_MODE_RAP
                                                                        : RAP_MODE_SEQUENTIAL);
    if (pl->shard) { /* preprocessed batches: ideal mode only (auto picks it) */
        if (r->mode < 0)
            m = RAP_MODE_IDEAL;
        if (m != RAP_MODE_IDEAL)
            return rap_fail(RAP_ERR_ARG, "--data %s: " RAP_SHARD_NEEDS_IDEAL " (not --mode %s)",
                            c->data, rap_mode_name(m));
    }
    if (pl->dist && m == RAP_MODE_MPS)
        return rap_fail(RAP_ERR_ARG, "--mode mps: not with ranks (--gpus, mpirun): its "
                        "preprocessing server serves one trainer");
    char why[256];
    if (!pl->shard && !rap_mode_available(m, c->device, why, sizeof why))
        return rap_fail(RAP_ERR_ARG, "--mode %s: %s", rap_mode_name(m), why);
    *mode = m;
    return RAP_OK;
}

/* Everything of plan_create after the copy; *pl is freed by the caller on
 * failure. */
static rap_status plan_fill(rap_pipeline_plan *pl)
{
    const rap_pipeline_config *c = &pl->cfg;
    if (!c->plan)
        return rap_fail(RAP_ERR_ARG, "%s: no plan", cmd_of(c));
    pl->dist = c->ranks > 0;
    pl->model = c->model;
    pl->model.stream = NULL;
    RAP_TRY(rap_pipeline_model_shape(c->plan, &pl->model));
    RAP_TRY(rap_model_config_check(&pl->model));
    pl->shard = c->data && c->data[0] && rap_runtime_is_shard(c->data);
    RAP_TRY(find_schedule(pl));
    RAP_TRY(rap_pipeline_fuse(c->plan, c->fusion, pl->fusion_file[0] ? pl->fusion_file : NULL,
                              &pl->fusion));
    if (c->schedule_made)
        pl->schedule = c->schedule_made;
    else if (pl->sched == RAP_PIPE_SCHED_FILE)
        RAP_TRY(rap_schedule_load(c->schedule, &pl->loaded));
    if (pl->loaded)
        pl->schedule = pl->loaded;
    if (pl->dist) /* the tables over the ranks (docs/DIST.md) */
        RAP_TRY(rap_shard_plan(pl->model.table_rows, pl->model.n_tables, pl->model.emb_dim,
                               c->ranks, 0, NULL, &pl->map));
    rap_mode m;
    return rap_pipeline_mode(pl, &c->rank, &m);
}

rap_status rap_pipeline_plan_create(const rap_pipeline_config *c, rap_pipeline_plan **out)
{
    *out = NULL;
    rap_pipeline_plan *pl = rap_calloc(sizeof *pl, "pipeline plan");
    if (!pl)
        return RAP_ERR_NOMEM;
    pl->cfg = *c;
    rap_status st = plan_fill(pl);
    if (st != RAP_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_pipeline_plan_free(pl);
        return rap_fail(st, "%s", msg);
    }
    *out = pl;
    return RAP_OK;
}

void rap_pipeline_plan_free(rap_pipeline_plan *pl)
{
    if (!pl)
        return;
    rap_shard_map_free(&pl->map);
    rap_schedule_free(pl->loaded);
    rap_fusion_free(&pl->fusion);
    rap_free(pl);
}

int pipe_feed_batches(const rap_pipeline_config *c, rap_mode m)
{
    if (c->feed_batches > 0)
        return c->feed_batches;
    int workers = c->cpu_workers > 0 ? c->cpu_workers : rap_ncores();
    return m == RAP_MODE_CPU ? workers + 2 : 8; /* reading overlaps training */
}

rap_status rap_pipeline_size(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                             rap_pipeline_bytes bytes[RAP_PIPE_PARTS])
{
    const rap_pipeline_config *c = &pl->cfg;
    if (!r)
        r = &c->rank;
    memset(bytes, 0, sizeof(rap_pipeline_bytes) * RAP_PIPE_PARTS);
    rap_mode m;
    RAP_TRY(rap_pipeline_mode(pl, r, &m));
    rap_model_config mc = pl->model;
    rap_model_shard sh; /* mc.shard points here: alive until mc's last use */
    if (pl->dist) { /* this rank's share */
        int rank = r->comm ? rap_comm_rank(r->comm) : 0;
        RAP_TRY(rap_hybrid_model_config(&pl->model, &pl->map, rank, pl->model.batch, &sh, &mc));
    }
    size_t mb = rap_model_bytes(&mc, c->device);
    rap_pipeline_bytes *b = &bytes[RAP_PIPE_PART_MODEL];
    *(c->device == RAP_GPU ? &b->device : &b->host) = mb;
    b->counted = true;
    b = &bytes[RAP_PIPE_PART_FEED];
    if (!pl->shard && m != RAP_MODE_MPS) { /* mps: the server reads; a shard: no feed */
        rap_rowfeed_config fc;
        pipe_feed_config(pl, m, &fc); /* the GPU's parser: the batches on the device */
        *(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_GPU ? &b->device : &b->host) =
            (size_t)fc.n_batches * rap_batch_bytes(c->plan->schema, pl->model.batch);
    }
    b->counted = true;
    return RAP_OK;
}

/* The runtime's config of rank r's pipeline in mode m as rap_pipeline_start
 * makes it, from the plan alone: the whole plan's columns and fusion (a
 * rank's part of them comes at create: an upper bound). */
static void memplan_runtime(const rap_pipeline_plan *pl, rap_mode m, rap_runtime_config *rc)
{
    const rap_pipeline_config *c = &pl->cfg;
    memset(rc, 0, sizeof *rc);
    rc->plan_spec = c->plan_spec && c->plan_spec[0] ? c->plan_spec : "default";
    rc->reader = c->reader;
    rc->reader.input = c->data;
    if (pl->shard)
        rc->shard = c->data;
    rc->mode = m;
    rc->plan = c->plan;
    rc->fusion = &pl->fusion;
    rc->schedule = pl->schedule;
    rc->cpu_workers = c->cpu_workers;
    rc->prep_threads = c->prep_threads;
    rc->ideal_batches = c->ideal_batches;
    rc->max_records = c->max_records;
    rc->cuda_graph = c->cuda_graph;
    rc->prep_lanes = c->prep_lanes;
    if (pl->dist) {
        rc->batch_rows = pl->model.batch; /* the global batch */
        if (c->placement == RAP_PLACE_BATCH && c->ranks > 1)
            rc->row_share_ranks = c->ranks; /* each rank its row share */
    }
}

void pipe_feed_config(const rap_pipeline_plan *pl, rap_mode m, rap_rowfeed_config *fc)
{
    const rap_pipeline_config *c = &pl->cfg;
    memset(fc, 0, sizeof *fc);
    fc->reader = c->reader;
    fc->reader.input = c->data;
    fc->batch_rows = pl->model.batch; /* the global batch with ranks */
    fc->n_batches = pipe_feed_batches(c, m);
    fc->chunk_bytes = c->chunk_bytes;
    fc->pinned = c->device == RAP_GPU;
    /* the GPU modes copy whole batches to the GPU: the GPU may parse them */
    fc->device_batches = m != RAP_MODE_CPU;
    fc->holdout = c->holdout;
    /* every rank reads the same global batches: the ranks share the
     * parse of each chunk where the reader can (docs/INPUT.md) */
    fc->reader.parse_share_ranks = pl->dist && c->ranks > 1 ? c->ranks : 0;
}

rap_status rap_pipeline_memplan(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                                int64_t eval_rows, rap_memplan *out)
{
    const rap_pipeline_config *c = &pl->cfg;
    if (!r)
        r = &c->rank;
    rap_mode m;
    RAP_TRY(rap_pipeline_mode(pl, r, &m));
    const int rank = pl->dist && r->comm ? rap_comm_rank(r->comm) : 0;
    rap_model_config mc = pl->model;
    rap_model_shard sh; /* mc.shard points here: alive until the plan is made */
    if (pl->dist)
        RAP_TRY(rap_hybrid_model_config(&pl->model, &pl->map, rank, pl->model.batch, &sh, &mc));
    rap_runtime_config rc;
    memplan_runtime(pl, m, &rc);
    rap_rowfeed_config fc;
    pipe_feed_config(pl, m, &fc);
    rap_memplan_config mp;
    memset(&mp, 0, sizeof mp);
    mp.model = &mc;
    mp.device = c->device;
    if (eval_rows > 0) { /* rap train's evaluation side (train_eval.c) */
        mp.exec_plan = c->plan;
        mp.exec_fusion = &pl->fusion;
        mp.exec_threads = c->reader.threads;
        mp.eval_rows = eval_rows;
        mp.step_batch = true;
    }
    mp.runtime = &rc;
    mp.feed = pl->shard || m == RAP_MODE_MPS ? NULL : &fc;
    mp.ranks = pl->dist ? c->ranks : 0;
    mp.map = pl->dist ? &pl->map : NULL;
    mp.rank = rank;
    RAP_TRY(rap_memplan_make(&mp, out));
    rap_memplan_measure_avail(out);
    return RAP_OK;
}

rap_status rap_pipeline_memplan_check(const rap_memplan *p, const char *cmd, int64_t batch)
{
    rap_status st = rap_memplan_check(p);
    if (st == RAP_OK)
        return RAP_OK;
    char msg[2048], tab[8192];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    rap_memplan_format(p, tab, sizeof tab);
    rap_warn("%s %s", cmd ? cmd : "run", tab);
    return rap_fail(st, "%s: refused before allocating (batch %lld; --dry-run prints the plan)",
                    msg, (long long)batch);
}
