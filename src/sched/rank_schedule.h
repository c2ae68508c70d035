/*
 * rank_schedule.h -- one rank's preprocessing as the placement planner
 * planned it (docs/PLANNER.md "Placement", docs/TRAINING.md "Several
 * ranks"): `rap plan --gpus R --out S` writes per rank a manifest S.rank<r>
 * listing its parts (columns, rows: the whole global batch or one share of
 * it, a schedule and a fusion file each). The runtime runs one executor per
 * rank over the rank's plan (every dense column and the sparse columns of
 * its tables, rap_subplan_rank), so the parts are merged into one fusion
 * (the parts' kernels, in part order) and one schedule (per window the
 * parts' slices in part order; a part over the rank's own share of the
 * rows keeps its rows relative to that share: slices with share=rank/R,
 * offset at launch for every batch, short ones included).
 *
 * A part may also run over other ranks' rows (shares of a global batch,
 * K = R: share k = rank k's rows, rap_hybrid_rows): the search placement's
 * moves. The manifest then lists the units (column, share) this rank sends
 * to and receives from others (rap_rank_manifest); the rank's plan holds
 * the columns it consumes and those it computes for others, the columns it
 * only receives become kernels that never run (schedule n_received), and
 * the pipeline builder (src/run/pipeline_dist.c) exchanges the units every
 * step (dist/moves.h).
 */
#ifndef RAP_SCHED_RANK_SCHEDULE_H
#define RAP_SCHED_RANK_SCHEDULE_H

#include "rap.h"
#include "sched/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether prefix.rank0 exists (a --schedule given as the prefix of the
 * planner's per-rank manifests rather than one schedule file). */
bool rap_rank_schedule_exists(const char *prefix);

/* One move: share `share` of plan column `col` to or from rank `peer`. */
typedef struct {
    int col;      /* column of the plan (frame index) */
    int share;    /* k of K (= R): rank k's rows of the global batch */
    int peer;     /* send: the destination; recv: the source */
    int line;     /* in the manifest */
} rap_rank_move;

typedef struct rap_rank_part rap_rank_part;

/* A manifest as read (rap_rank_manifest_load). */
typedef struct {
    char path[1100];         /* prefix.rank<r>, for messages */
    int R, rank, K;          /* K: row shares of the global batch */
    int64_t Bg;              /* the global batch */
    int *cols;               /* (n_cols) columns the parts compute, frame order, once each */
    int n_cols;
    uint64_t *col_shares;    /* (p->n_cols) shares of each column computed here (0: none) */
    rap_rank_move *send, *recv;
    int n_send, n_recv;
    rap_rank_part *parts;    /* internal */
    int n_parts;
} rap_rank_manifest;

/* Reads and checks prefix.rank<rank> of plan p on R ranks, global batch
 * Bg: the header (plan hash, ranks, rank, batch), the parts (rows of
 * their shares; no share computed by two parts) and the moves (a unit
 * sent is computed here, one received is not; whole ranks' rows only).
 * RAP_ERR_PLAN / RAP_ERR_IO naming the file, line and what was expected. */
rap_status rap_rank_manifest_load(const char *prefix, const rap_plan *p, int rank, int R,
                                  int64_t Bg, rap_rank_manifest **out);
void rap_rank_manifest_free(rap_rank_manifest *m);

/* Merges m's parts into *fus (a fusion of the rank plan rp, which holds
 * every column the parts compute and any it receives) and *out (a
 * schedule validated for batches of Bg rows, n_received set for the
 * kernels of the columns no part computes). The part files are checked
 * against their sub-plans. */
rap_status rap_rank_schedule_make(const rap_rank_manifest *m, const rap_plan *p,
                                  const rap_plan *rp, rap_fusion *fus, rap_schedule **out);

/* Loads prefix.rank<rank> for plan p trained on R ranks with global batch
 * Bg, checks it (plan hash, ranks, rank, global batch, the parts' columns
 * == the rank plan rp's, no moves, one kernel per op) and makes *fus (a fusion of rp)
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
#endif /* RAP_SCHED_RANK_SCHEDULE_H */
