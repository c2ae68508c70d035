/* pipeline_describe.c -- the lines that describe a pipeline (pipeline.h):
 * how the ranks share the tables, and who preprocesses what. rap train
 * prints them at start; a memory plan's table would be printed from
 * here. */
#include "run/pipeline_internal.h"

#include <stdio.h>

void rap_pipeline_describe_ranks(const rap_pipeline_plan *pl, const rap_comm *comm, char *buf,
                                 size_t n)
{
    int R = pl->cfg.ranks;
    char desc[4096];
    rap_shard_map_describe(&pl->map, desc, sizeof desc);
    snprintf(buf, n, "hybrid parallel: %d rank%s over %s, global batch %lld, placement %s; "
             "tables:\n%s", R, R == 1 ? "" : "s", rap_comm_kind_name(rap_comm_kind_of(comm)),
             (long long)pl->model.batch, rap_placement_name(pl->cfg.placement), desc);
}

void rap_pipeline_describe_placement(const rap_pipeline *p, char *buf, size_t n)
{
    const pipe_dist *d = &p->d;
    snprintf(buf, n, "placement %s: each rank preprocesses %s",
             rap_placement_name(p->pl->cfg.placement),
             d->rplan ? (d->rsched && p->mode == RAP_MODE_RAP
                             ? "the sparse columns of its own tables over the whole "
                               "global batch and every dense column over its own rows "
                               "(the planner's per-rank schedule)"
                             : "every dense column and the sparse columns of its own "
                               "tables, over the whole global batch")
             : d->xb || d->xg ? "every column over its own rows of the global batch, then "
                                "sends each table's ids to the table's holders"
                              : "every column of the whole global batch");
}
