/* pipeline.c -- the pipeline builder's second step (pipeline.h): one
 * rank's pipeline allocated from the plan, and freed; its parts for the
 * loops that drive them. The ranks' part is pipeline_dist.c, running it
 * pipeline_run.c. */
#include "run/pipeline_internal.h"

#include "core/core.h"

#include <string.h>

/* The model, its failure said with the plan's size. */
static rap_status create_model(rap_pipeline *p)
{
    const rap_pipeline_plan *pl = p->pl;
    const rap_pipeline_config *c = &pl->cfg;
    rap_model_config mc = pl->model;
    mc.stream = p->stream;
    const rap_model_config *mcfg = p->dist ? &p->d.mc : &mc;
    rap_status st = rap_model_create(mcfg, c->device, &p->model);
    if (st != RAP_OK) {
        int64_t tab = 0;
        for (int i = 0; i < pl->model.n_tables; i++)
            tab += pl->model.table_rows[i];
        rap_fail_context(st, "cannot create the model (plan %s: %d tables, %lld rows of dim %d)",
                         c->plan->source, pl->model.n_tables, (long long)tab, pl->model.emb_dim);
    }
    return st;
}

/* Everything of create after the struct; p is freed by the caller on
 * failure. */
static rap_status create_parts(rap_pipeline *p)
{
    const rap_pipeline_config *c = &p->pl->cfg;
    RAP_TRY(rap_pipeline_mode(p->pl, &p->r, &p->mode));
    if (p->dist) {
        if (!p->r.comm)
            return rap_fail(RAP_ERR_ARG, "pipeline: planned for %d ranks, given no comm",
                            c->ranks);
        if (c->device == RAP_GPU && p->r.gpu >= 0)
            RAP_TRY(rap_rt_set_device(p->r.gpu));
    }
    if (c->device == RAP_GPU)
        RAP_TRY(rap_runtime_train_stream_create(&p->stream));
    if (p->dist) /* this rank's tables and rows (docs/DIST.md) */
        RAP_TRY(pipe_dist_model_config(p));
    RAP_TRY(create_model(p));
    if (p->r.model_ready)
        RAP_TRY(p->r.model_ready(p->r.ctx, p->model));
    if (p->dist)
        RAP_TRY(pipe_dist_create(p));
    return RAP_OK;
}

rap_status rap_pipeline_create(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                               rap_pipeline **out)
{
    *out = NULL;
    rap_pipeline *p = rap_calloc(sizeof *p, "pipeline");
    if (!p)
        return RAP_ERR_NOMEM;
    p->pl = pl;
    p->r = *r;
    p->dist = pl->dist;
    rap_status st = create_parts(p);
    if (st != RAP_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_pipeline_free(p);
        return rap_fail(st, "%s", msg);
    }
    *out = p;
    return RAP_OK;
}

void rap_pipeline_free(rap_pipeline *p)
{
    if (!p)
        return;
    rap_pipeline_stop(p, NULL);
    if (p->dist)
        pipe_dist_free(p);
    rap_model_free(p->model);
    p->model = NULL;
    if (p->dist)
        pipe_dist_free_comm(p);
    rap_rt_stream_free(p->stream);
    rap_free(p);
}

rap_runtime *rap_pipeline_runtime(rap_pipeline *p) { return p->rt; }
rap_rowfeed *rap_pipeline_feed(rap_pipeline *p) { return p->feed; }
rap_model *rap_pipeline_model(rap_pipeline *p) { return p->model; }
rap_hybrid *rap_pipeline_hybrid(rap_pipeline *p) { return p->dist ? p->d.hyb : NULL; }
void *rap_pipeline_stream(rap_pipeline *p) { return p->stream; }
rap_mode rap_pipeline_mode_of(const rap_pipeline *p) { return p->mode; }
const rap_pipeline_plan *rap_pipeline_plan_of(const rap_pipeline *p) { return p->pl; }
const rap_model_shard *rap_pipeline_shard(const rap_pipeline *p)
{
    return p->dist ? &p->d.shard : NULL;
}
