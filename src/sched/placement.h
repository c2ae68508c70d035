/*
 * placement.h -- which placement of preprocessing over several ranks a
 * run uses (`--placement`, docs/PLANNER.md "Placement over several GPUs",
 * docs/TRAINING.md "Several ranks"): the planner (src/plan/place.h)
 * plans them, the trainer (src/run/train.h) runs them; the numbering is
 * the options' order (cli.h).
 *
 *   owner   each sparse column on the ranks holding its table, over the
 *           whole global batch; dense columns data parallel
 *   batch   every rank every column over its own rows; ids exchanged
 *   search  the planner's moves from owner (per-rank manifests,
 *           sched/rank_schedule.h)
 */
#ifndef RAP_SCHED_PLACEMENT_H
#define RAP_SCHED_PLACEMENT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RAP_PLACE_OWNER = 0, RAP_PLACE_BATCH, RAP_PLACE_SEARCH } rap_placement;

/* "owner", "batch", "search"; "?" for another value. This function can't
 * fail. */
const char *rap_placement_name(rap_placement p);
/* The placement named name, or -1 (also for NULL). */
int rap_placement_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* RAP_SCHED_PLACEMENT_H */
