/*
 * rank_schedule.h -- one rank's preprocessing as the placement planner
 * planned it (docs/PLANNER.md "Placement", docs/TRAINING.md "Several
 * ranks"): `rap plan --gpus R --out S` writes per rank a manifest S.rank<r>
 * listing its parts (columns, rows: the whole global batch or one share of
 * it, a schedule and a fusion file each). The runtime runs one executor per
 * rank over the rank's plan (every dense column and the sparse columns of
 * its tables, rap_train_rank_plan), so the parts are merged into one fusion
 * (the parts' kernels, in part order) and one schedule (per window the
 * parts' slices in part order; a part over the rank's own share of the
 * rows keeps its rows relative to that share: slices with share=rank/R,
 * offset at launch for every batch, short ones included).
 *
 * Runs what `owner` plans (and `search` when it made no move); a manifest
 * that sends or receives preprocessed columns (moves between ranks) is
 * refused, naming the line: the runtime does not exchange preprocessed
 * columns yet.
 */
#ifndef RAP_RUN_RANK_SCHEDULE_H
#define RAP_RUN_RANK_SCHEDULE_H

#include "rap.h"
#include "run/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether prefix.rank0 exists (a --schedule given as the prefix of the
 * planner's per-rank manifests rather than one schedule file). */
bool rap_rank_schedule_exists(const char *prefix);

/* Loads prefix.rank<rank> for plan p trained on R ranks with global batch
 * Bg, checks it (plan hash, ranks, rank, global batch, the parts' columns
 * == the rank plan rp's, one kernel per op) and makes *fus (a fusion of rp)
 * and *out (a schedule of (rp, *fus) validated for batches of Bg rows).
 * The part files are looked for as named and, failing that, beside the
 * manifest. RAP_ERR_PLAN / RAP_ERR_IO naming the file and what was
 * expected. */
rap_status rap_rank_schedule_load(const char *prefix, const rap_plan *p, int rank, int R,
                                  int64_t Bg, const rap_plan *rp, rap_fusion *fus,
                                  rap_schedule **out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_RANK_SCHEDULE_H */
