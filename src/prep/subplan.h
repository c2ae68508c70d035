/*
 * subplan.h -- a plan with some of its columns only: a part of the
 * placement planner (src/plan/place.h: each part's fusion and schedule
 * files are made for such a sub-plan) and a rank's part of a plan (the
 * columns a rank preprocesses when it holds some of the tables, run by
 * the pipeline builder, src/run/pipeline_dist.c, for rap train and rap
 * bench).
 *
 * A sub-plan shares its parent's parameters (borders, maps, the source
 * name) and keeps a copy of every parent node, so node indices are the
 * parent's: fusions of a sub-plan name the parent's nodes. It is freed by
 * its own free function, never rap_plan_free, and before its parent.
 */
#ifndef RAP_PREP_SUBPLAN_H
#define RAP_PREP_SUBPLAN_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plan with columns cols[0..n) of p only, in that order (a part's
 * sub-plan, what its fusion and schedule files are made for): its own node
 * (a copy of all of p's: node indices are p's) and column arrays, the
 * parameters (borders, maps) shared with p: free it with
 * rap_subplan_free, never rap_plan_free, and before p. RAP_ERR_NOMEM and
 * *out NULL when memory runs out. */
rap_status rap_subplan_make(const rap_plan *p, const int *cols, int n, rap_plan **out);
/* Frees a sub-plan of rap_subplan_make; NULL is accepted. */
void rap_subplan_free(rap_plan *s);

/* Placement owner (docs/TRAINING.md "Several ranks"): the part of plan p a
 * rank holding local tables tables[0..n_tables) (global table indices,
 * rap_model_shard's table) runs: every dense and vector column, and the
 * sparse columns of its tables (frame order kept), fused into *fus (by
 * levels, or one kernel per op with fuse_none). rtab (RAP_MAX_TABLES) gets
 * the global table of each of its sparse columns, *n_rtab their number.
 * *out NULL (nothing to leave out, or no local table): run p, *fus
 * untouched. Free with rap_subplan_rank_free only, before p. */
rap_status rap_subplan_rank(const rap_plan *p, const int *tables, int n_tables, bool fuse_none,
                            rap_plan **out, rap_fusion *fus, int *rtab, int *n_rtab);
/* The same with the columns c where extra[c] != 0 (p->n_cols; NULL: none)
 * kept as well: those the rank computes for other ranks (the placement
 * planner's moves); with extra, a rank holding no table still runs only
 * its part. */
rap_status rap_subplan_rank_with(const rap_plan *p, const int *tables, int n_tables,
                                 const uint64_t *extra, bool fuse_none, rap_plan **out,
                                 rap_fusion *fus, int *rtab, int *n_rtab);
/* Frees a rank part and its fusion; part NULL: nothing (fus untouched). */
void rap_subplan_rank_free(rap_plan *part, rap_fusion *fus);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PREP_SUBPLAN_H */
