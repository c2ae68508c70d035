/*
 * ids_exact.h -- the sparse ids of a global batch to the ranks that hold
 * their tables (--placement batch) on CPU ranks, with exact counts: the
 * host-comm exchange rap train (and rap bench) run in sequential and cpu
 * mode on the CPU (docs/TRAINING.md "Several ranks"). ids.h is the same
 * job in fixed-size blocks for GPU ranks (no host synchronisation); here
 * the counts are exchanged first, so only the ids themselves move and the
 * bytes counted are exactly the offsets and ids sent.
 *
 * Global batch of n <= Bg rows: rank s has rows rap_hybrid_rows(n, R, s),
 * preprocessed by itself (every column). One run, on every rank at once
 * (a collective), two rounds:
 *   1. allgather of every rank's header (1 + T int64): its share's rows,
 *      then its ids per table;
 *   2. all-to-all of int64: to each rank p, for each table t p holds
 *      (ascending), this share's offsets (rebased to 0, nr words after the
 *      first) and its ids.
 * Then each table this rank holds is assembled over the n global rows in
 * global row order (shares in rank order).
 *
 *     RAP_TRY(rap_ids_exact_create(c, T, holds, Bg, K, &x));
 *     for each global batch: mine = this rank's share;
 *         RAP_TRY(rap_ids_exact_run(x, &mine, &g));  // g: held tables
 *     rap_ids_exact_bytes(x, &me, &all);
 *     rap_ids_exact_free(x);
 *
 * Every buffer is allocated by create, sized for the largest share
 * (ceil(Bg / R) rows) and K ids a row; a run allocates nothing.
 */
#ifndef RAP_DIST_IDS_EXACT_H
#define RAP_DIST_IDS_EXACT_H

#include "dist/comm.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rap_ids_exact rap_ids_exact;

/* The exchange of rank rap_comm_rank(c) of R = rap_comm_size(c), a host
 * comm (self, threads, mpi; not owned: it must outlive the exchange), over
 * T tables (1..RAP_MAX_TABLES). holds (R*T, copied): holds[p*T + t] = rank
 * p holds (a part of) table t. Bg: the largest global batch (>= 1); K: the
 * most ids of a row in one table (>= 1; the model's max_bag). RAP_ERR_ARG
 * for bad sizes, RAP_ERR_NOMEM. */
rap_status rap_ids_exact_create(rap_comm *c, int T, const bool *holds, int64_t Bg, int64_t K,
                                rap_ids_exact **out);
/* Accepts NULL. */
void rap_ids_exact_free(rap_ids_exact *x);

/* One run, a collective (every rank, shares of the same global batch).
 * mine: this rank's share (rows may be 0), off[t] (rows+1, off[t][0] may
 * be non-zero) and ids[t] of every table. g (out): rows = n, the global
 * batch's rows; for each table this rank holds off[t] (n+1, from 0) and
 * ids[t] in global row order, pointers into the exchange's buffers valid
 * until the next run; NULL for the others; dense/label NULL.
 * RAP_ERR_INTERNAL when a rank's share is not its rap_hybrid_rows share of
 * n (or n > Bg), RAP_ERR_DATA when a rank has more than K ids a row in a
 * table (every rank sees the headers: every rank fails alike). */
rap_status rap_ids_exact_run(rap_ids_exact *x, const rap_model_batch *mine, rap_model_batch *g);

/* Bytes of offsets and ids (8 each) sent to other ranks in the runs so
 * far: by this rank, and by every rank of the job (the same on every rank:
 * each computes it from the exchanged headers). */
void rap_ids_exact_bytes(const rap_ids_exact *x, int64_t *sent_by_me, int64_t *all_ranks);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_IDS_EXACT_H */
