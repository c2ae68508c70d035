/* pipeline_run.c -- running a pipeline (pipeline.h): started over some
 * passes (the row feed, or a shard, or the mps server, and the runtime),
 * stopped with its accounting; what its exchanges sent. */
#include "run/pipeline_internal.h"

#include "core/core.h"

#include <string.h>

/* The row feed of the passes (every rank reads the same global batches);
 * its GPU parse gated when the runtime releases it in the windows of
 * schedule (rap_runtime_parse_gated). */
static rap_status open_feed(rap_pipeline *p, int64_t passes, int64_t start_pos,
                            const rap_schedule *schedule)
{
    const rap_pipeline_config *c = &p->pl->cfg;
    rap_rowfeed_config fc;
    pipe_feed_config(p->pl, p->mode, &fc);
    fc.start_pos = start_pos;
    fc.passes = passes;
    fc.trace = p->r.trace;
    fc.stop = c->stop;
    fc.track_positions = c->track_positions;
    if (c->start && c->start->valid && c->start->rows == start_pos) {
        fc.start = *c->start;
        fc.open_at_create = true; /* a position that does not fit fails here */
    }
    fc.reader.parse_xchg = p->d.px;
    fc.reader.n_parse_xchg = p->d.n_px;
    fc.batch_hook = c->batch_hook;
    fc.batch_hook_ctx = c->batch_hook_ctx;
    RAP_TRY(rap_runtime_parse_gated(p->mode, c->device, rap_rowfeed_resolve_parse(&fc), schedule,
                                    &fc.parse_gate));
    return rap_rowfeed_create(&fc, &p->feed);
}

rap_status rap_pipeline_start(rap_pipeline *p, int64_t passes, int64_t start_pos)
{
    const rap_pipeline_plan *pl = p->pl;
    const rap_pipeline_config *c = &pl->cfg;
    if (p->rt)
        return rap_fail(RAP_ERR_INTERNAL, "pipeline: started twice (stop first)");
    rap_runtime_config rc;
    memset(&rc, 0, sizeof rc);
    rc.plan_spec = c->plan_spec && c->plan_spec[0] ? c->plan_spec : "default";
    rc.reader = c->reader;
    rc.reader.input = c->data;
    if (p->mode == RAP_MODE_MPS) {
        if (c->holdout > 0 || start_pos > 0)
            return rap_fail(RAP_ERR_ARG, "--mode mps: the preprocessing server reads every row "
                            "of --data in order: give --eval-data (or --eval-fraction 0), and "
                            "resume only from a checkpoint at the end of a pass");
    } else if (pl->shard) { /* ideal from a shard: no feed */
        rc.shard = c->data;
        rc.shard_passes = passes;
        rc.shard_start_rows = start_pos;
    } else {
        RAP_TRY(open_feed(p, passes, start_pos, p->d.rsched ? p->d.rsched : pl->schedule));
    }
    const pipe_dist *d = &p->d;
    rc.mode = p->mode;
    rc.plan = d->rplan ? d->rplan : c->plan;
    rc.fusion = d->rsched ? &d->rsfus : d->rplan ? &d->rfus : &pl->fusion;
    rc.schedule = d->rsched ? d->rsched : pl->schedule;
    rc.cpu_workers = c->cpu_workers;
    rc.prep_threads = c->prep_threads;
    rc.ideal_batches = c->ideal_batches;
    rc.max_records = c->max_records;
    rc.cuda_graph = c->cuda_graph;
    rc.prep_lanes = c->prep_lanes;
    rc.trace = p->r.trace;
    rc.progressive = p->progressive;
    if (p->dist)
        RAP_TRY(pipe_dist_runtime(p, &rc));
    RAP_TRY(rap_runtime_create(&rc, p->model, p->feed, &p->rt));
    /* ranks: every rank's set-up (pinned and device allocations, which may
     * synchronise every GPU of the process) done before any rank queues a
     * collective: a rank still allocating while another's NCCL kernel waits
     * for it can hang both (seen with --gpus 2 in cpu mode, bench/RESULTS.md) */
    if (p->dist)
        RAP_TRY(rap_comm_barrier(p->d.comm, "set-up done"));
    return RAP_OK;
}

void rap_pipeline_set_progressive(rap_pipeline *p, struct rap_progressive *pv)
{
    p->progressive = pv;
}

void rap_pipeline_stop(rap_pipeline *p, rap_pipeline_stats *st)
{
    if (st)
        memset(st, 0, sizeof *st);
    if (!p)
        return;
    if (p->rt) {
        rap_runtime_sync(p->rt);
        if (st) {
            rap_runtime_get_stats(p->rt, &st->runtime);
            st->runtime.records = NULL; /* freed with the runtime */
            st->runtime.n_records = 0;
        }
        rap_runtime_free(p->rt);
        p->rt = NULL;
    }
    if (p->feed) {
        rap_rowfeed_stats fs;
        rap_rowfeed_free(p->feed, &fs);
        p->feed = NULL;
        if (st) {
            st->have_feed = true;
            st->feed = fs;
        }
    }
}

bool rap_pipeline_bytes_sent(const rap_pipeline *p, int64_t *mine, int64_t *all)
{
    const pipe_dist *d = &p->d;
    *mine = *all = 0;
    if (d->xb) { /* exact counts: every rank computes the job's total */
        rap_ids_exact_bytes(d->xb, mine, all);
        return true;
    }
    if (d->xg) { /* fixed-size blocks, padding included */
        rap_ids_xchg_bytes(d->xg, mine, all);
        return true;
    }
    if (d->moves) { /* each rank counts its own sends */
        rap_moves_bytes(d->moves, mine);
        *all = -1;
        return true;
    }
    return false;
}

rap_status rap_pipeline_check(rap_pipeline *p)
{
    if (p->d.xg)
        RAP_TRY(rap_ids_xchg_check(p->d.xg));
    if (p->d.moves)
        RAP_TRY(rap_moves_check(p->d.moves));
    return RAP_OK;
}
