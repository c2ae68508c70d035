/* pipeline_prep.c -- the preprocessing side alone (pipeline.h): the
 * fusion a run uses, an executor over it, its packer and a row feed, for
 * the mps server, the trainer's evaluation and the bench programs. */
#include "run/pipeline.h"

#include "core/core.h"
#include "sched/fusion_file.h"

#include <string.h>

rap_status rap_pipeline_fuse(const rap_plan *p, int kind, const char *fusion_file,
                             rap_fusion *out)
{
    if (fusion_file && fusion_file[0])
        return rap_fusion_load(p, fusion_file, out);
    return rap_fuse(p, (rap_fuse_kind)kind, out);
}

/* The parts in order; on failure the caller frees what was made. */
static rap_status prep_parts(const rap_pipeline_prep_config *c, rap_pipeline_prep *out)
{
    if (c->fusion) {
        out->fusion = c->fusion;
    } else {
        RAP_TRY(rap_pipeline_fuse(c->plan, c->fusion_kind, c->fusion_file, &out->own));
        out->fusion = &out->own;
    }
    if (c->batch_rows > 0) {
        rap_prep_config pc;
        memset(&pc, 0, sizeof pc);
        pc.device = c->device;
        pc.max_rows = c->batch_rows;
        pc.threads = c->threads;
        pc.stream = c->stream;
        RAP_TRY(rap_prep_create(c->plan, out->fusion, &pc, &out->prep));
        if (c->pack) {
            RAP_TRY(rap_input_create(c->plan, c->device, c->batch_rows, c->stream, &out->input));
            RAP_TRY(rap_input_bind(out->input, out->prep, NULL));
        }
    }
    if (c->feed)
        RAP_TRY(rap_rowfeed_create(c->feed, &out->feed));
    return RAP_OK;
}

rap_status rap_pipeline_prep_create(const rap_pipeline_prep_config *c, rap_pipeline_prep *out)
{
    memset(out, 0, sizeof *out);
    rap_status st = prep_parts(c, out);
    if (st != RAP_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_pipeline_prep_free(out);
        return rap_fail(st, "%s", msg);
    }
    return RAP_OK;
}

void rap_pipeline_prep_free(rap_pipeline_prep *p)
{
    rap_rowfeed_free(p->feed, NULL);
    rap_input_free(p->input);
    rap_prep_free(p->prep);
    if (p->fusion == &p->own)
        rap_fusion_free(&p->own);
    memset(p, 0, sizeof *p);
}
