/*
 * hash.h -- the hashes that bind files to a plan and a fusion: schedule
 * and fusion files (rap_plan_hash, rap_fusion_hash: docs/SCHEDULE.md,
 * docs/PLANNER.md "Fusion file") and checkpoints (rap_plan_columns_hash:
 * docs/TRAINING.md).
 *
 * One set of mixers serves all three (hash.c). Their values are part of
 * the files already written (the shipped schedules of plans/h200 carry
 * rap_plan_hash and rap_fusion_hash, checkpoints rap_plan_columns_hash):
 * they must stay what they are on every machine and in every build.
 */
#ifndef RAP_SCHED_HASH_H
#define RAP_SCHED_HASH_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A stable 64-bit hash of the plan's live nodes: op type, input (as index
 * among live nodes), raw column, kinds, width and the op's parameters
 * (bit patterns of floats, borders, maps). Independent of dead nodes,
 * column names, comments and the plan's file name; the same on every
 * machine. 0 when out of memory. */
uint64_t rap_plan_hash(const rap_plan *p);

/* A stable hash of a fusion of p: each kernel's op, variant, level and its
 * nodes (as indices among live nodes), in order; a row kernel's groups
 * too. 0 when out of memory. */
uint64_t rap_fusion_hash(const rap_plan *p, const rap_fusion *f);

/* The plan as the model sees it, for checkpoints: every column's name,
 * kind and op chain (ops and parameters), in frame order. Equal hashes,
 * same preprocessing. Unlike rap_plan_hash it depends on column names and
 * order (a checkpoint's tables and dense inputs are the plan's columns).
 * cols (may be NULL) gets "name:hash,..." (the top 32 bits of each
 * column's hash; caller frees; NULL when out of memory) so that a
 * mismatch can name the columns that differ. */
uint64_t rap_plan_columns_hash(const rap_plan *plan, char **cols);

#ifdef __cplusplus
}
#endif
#endif /* RAP_SCHED_HASH_H */
