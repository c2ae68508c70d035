/*
 * ids.h -- the sparse ids of a global batch to the ranks that hold their
 * tables (--placement batch): each rank preprocessed its own share of the
 * rows (every column); each table's ids over the whole global batch must
 * reach every rank holding (a part of) that table.
 *
 * Global batch of n <= Bg rows: rank s has rows rap_hybrid_rows(n, R, s).
 * One run, on every rank at once (a collective):
 *
 *   pack: for each destination p (ascending) and each table t held by p
 *         (ascending), a block of this rank's share, nr = its rows:
 *         nr lengths (int64: ids of row i in t, at most K), then nr*K ids,
 *         row i's at [i*K, i*K + len) (the rest 0: padding)
 *   all-to-all of int64 (counts known on the host from n alone)
 *   assemble: for each table this rank holds, the lengths of the n global
 *         rows (shares in rank order) scanned into offsets (from 0), the
 *         ids moved from their padded slots to off[i]
 *
 * Fixed-size blocks: the counts follow from n, so the GPU path needs no
 * host synchronisation per run (a row with more than K ids is cut to K and
 * flagged on the device; rap_ids_xchg_check reads the flag). The CPU path
 * (host comm, host memory) is the same algorithm on the host: its results
 * equal the GPU's element for element. Every buffer is allocated by
 * rap_ids_xchg_create; a run allocates nothing.
 *
 * Bytes: a block moves nr * (1 + K) int64 words whatever the ids: padded
 * words are what moves, and what is counted.
 *
 * Usage (rank r of R, comm c; nccl comm on GPU ranks):
 *     RAP_TRY(rap_ids_xchg_create(c, dev, T, holds, Bg, K, &x));
 *     for each global batch of n rows: mine = this rank's share;
 *         RAP_TRY(rap_ids_xchg_run(x, &mine, n, &g));  // g: held tables
 *         ... lookups of g on rap_comm_stream(c) ...
 *     RAP_TRY(rap_ids_xchg_check(x));                  // GPU: syncs
 *     rap_ids_xchg_free(x);
 */
#ifndef RAP_DIST_IDS_H
#define RAP_DIST_IDS_H

#include "dist/comm.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rap_ids_xchg rap_ids_xchg;

/* The exchange of rank rap_comm_rank(c) of R = rap_comm_size(c) over T
 * tables (1..RAP_MAX_TABLES). holds (R*T): holds[p*T + t] = rank p holds
 * table t (a row-split table has several holders: each gets all ids of
 * the table; a rank may hold none). Bg: the largest global batch (>= 1);
 * K: the most ids one row has in one table (>= 1: the model's max_bag, 0
 * meaning 1, is the caller's to map). dev RAP_GPU: c must be a nccl comm
 * (its device and stream: call from the thread whose current device is
 * the comm's); RAP_CPU: a host comm (self, threads, mpi). holds is copied;
 * c must outlive the exchange. Allocates every buffer, sized for the
 * largest share (ceil(Bg / R) rows) and K ids a row. RAP_ERR_ARG for a
 * comm that does not match dev or bad sizes; RAP_ERR_NO_GPU for RAP_GPU
 * without CUDA. */
rap_status rap_ids_xchg_create(rap_comm *c, rap_device dev, int T, const bool *holds,
                               int64_t Bg, int K, rap_ids_xchg **out);
/* Accepts NULL. GPU: the caller makes sure no run is still in flight on
 * the stream (rap_comm_wait) before freeing. */
void rap_ids_xchg_free(rap_ids_xchg *x);

/* One run, a collective (every rank, the same n). n: rows of the global
 * batch, 1..Bg. mine: this rank's share, mine->rows == rows of
 * rap_hybrid_rows(n, R, rank) (may be 0: then mine is not read past
 * rows); for every table t held by some rank, off[t] (rows+1) and ids[t]
 * (ids of row i at ids[t][off[t][i] .. off[t][i+1])): off[t][0] may be
 * non-zero. dense/label are not read. Device pointers on GPU, host
 * pointers on CPU. g (out): rows = n; for each table t this rank holds,
 * off[t] (n+1, from 0) and ids[t] (off[t][n]) = the global batch's ids of
 * t in global row order (rank 0's share first): pointers into the
 * exchange's buffers, valid until the next run; NULL for tables it does
 * not hold; dense/label NULL.
 * GPU: asynchronous on rap_comm_stream(c); no host synchronisation. mine's
 * device data must be ready in stream order (written on that stream, or
 * an event waited on), and g's buffers are rewritten by the next run's
 * kernels on the same stream (a reader on another stream must be ordered
 * before that next run). A row with more than K ids is cut to its first K
 * and flagged (rap_ids_xchg_check).
 * CPU: a row with more than K ids is cut the same way; the run still
 * completes the collective (so the other ranks are not left waiting),
 * then returns RAP_ERR_DATA naming the table and the row.
 * RAP_ERR_ARG for n outside 1..Bg or a share of the wrong size (checked
 * on the host before any collective). */
rap_status rap_ids_xchg_run(rap_ids_xchg *x, const rap_model_batch *mine, int64_t n,
                            rap_model_batch *g);

/* Bytes sent to other ranks (p != sender) in the runs so far: by this
 * rank, and by every rank of the job (the same on every rank). Host
 * arithmetic from n and holds: 8 * nr_s * (1 + K) for every (sender s,
 * destination p != s, table held by p). No synchronisation. */
void rap_ids_xchg_bytes(const rap_ids_xchg *x, int64_t *sent_by_me, int64_t *all_ranks);

/* Whether a row of this rank's shares had more than K ids in a table in
 * the runs so far: RAP_ERR_DATA naming the (lowest such) table, the most
 * ids seen and K; RAP_OK otherwise. Only the rank whose share had the row
 * reports it (not a collective). GPU: reads a device flag back (waits for
 * the stream's work: call it at the end, or at a checkpoint). */
rap_status rap_ids_xchg_check(rap_ids_xchg *x);

/* ------------------------------------------------------------ internals
 * The kernels' launchers (ids_gpu.cu) and their CPU references (ids.c),
 * for ids.c and the tests. Letters: W = 1 + K words a row in a block; U
 * tables held by some rank ("sent" tables); NB blocks this rank sends
 * (pairs (p, t) with p holding t); ntab tables this rank holds. */

/* Tables per pack launch: their pointers travel as kernel parameters. */
#define RAP_IDS_CHUNK 128

/* Pointers of the sent tables u0 .. u0+n-1 (of this run's share). */
typedef struct {
    const int64_t *off[RAP_IDS_CHUNK]; /* (nr+1) each */
    const int64_t *ids[RAP_IDS_CHUNK]; /* ids indexed by off */
    int t[RAP_IDS_CHUNK];              /* global table index */
    int n;                             /* tables in this chunk */
    int u0;                            /* first sent table of the chunk */
} rap_ids_chunk;

/* Pack (GPU): for each table u of the chunk and each of its blocks b
 * (ublk[ub0[u] .. ub0[u+1]), device arrays (U+1) and (NB)), writes the
 * block at send + b * nr * W: nr lengths min(len, K), then nr*K ids (row
 * i's first min(len, K) at [i*K ..), the rest 0). A row with len > K sets
 * flag (device, 3 ints: [0] = 1, [1] = min table, [2] = max len clipped
 * to INT_MAX). Asynchronous on stream. */
rap_status rap_ids_pack_gpu(const rap_ids_chunk *ch, const int *ub0, const int *ublk,
                            int64_t nr, int K, int64_t *send, int *flag, void *stream);
/* Assemble (GPU): recv holds, from each source s (rank order), ntab blocks
 * of its ns rows (at row0_s * W * ntab, block k at k * ns * W). For each
 * held table k: off + k*(Bg+1) (n+1) = scanned lengths from 0, ids + k*Bg*K
 * = the ids in row order. cum (ntab*Bg): scratch of the lengths; scratch:
 * rap_ids_scan_scratch(ntab * Bg) bytes. Asynchronous on stream. */
rap_status rap_ids_assemble_gpu(const int64_t *recv, int64_t n, int R, int ntab, int K,
                                int64_t Bg, int64_t *cum, void *scratch, size_t scratch_bytes,
                                int64_t *off, int64_t *ids, void *stream);
/* CUB scan scratch bytes for `items` lengths (0 without CUDA). */
size_t rap_ids_scan_scratch(int64_t items);

/* The CPU references: the same layouts on host memory. pack_cpu packs one
 * table's share (off (nr+1), ids indexed by off) into each of the blocks
 * ublk[0 .. nb) of send, as the GPU's; returns the largest len seen (> K:
 * cut to K) and puts the first row with len > K in *bad_row (-1: none).
 * assemble_cpu as the GPU's. */
int64_t rap_ids_pack_cpu(const int64_t *off, const int64_t *ids, const int *ublk, int nb,
                         int64_t nr, int K, int64_t *send, int64_t *bad_row);
void rap_ids_assemble_cpu(const int64_t *recv, int64_t n, int R, int ntab, int K, int64_t Bg,
                          int64_t *off, int64_t *ids);

/* Rows with more ids than a bag holds, as seen so far (the id exchange's
 * and the moves' check): the lowest such table and the most ids in a row. */
typedef struct {
    bool bad;
    int t;
    int64_t len;
} rap_ids_overflow;
/* Notes a row of table t with len ids over the bound. */
void rap_ids_overflow_note(rap_ids_overflow *o, int t, int64_t len);
/* GPU: reads the overflow flag (synchronising on stream) and notes what
 * it holds. */
rap_status rap_ids_overflow_read(rap_ids_overflow *o, const int *flag, void *stream);

/* Device helpers for ids.c (C): RAP_ERR_NO_GPU without CUDA. upload and
 * flag_read synchronise; flag_reset writes {0, INT_MAX, 0}. */
rap_status rap_ids_flag_reset(int *flag);
rap_status rap_ids_flag_read(const int *flag, int *host, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_IDS_H */
