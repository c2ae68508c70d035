/*
 * moves.h -- the placement planner's *moves* (src/plan/place.h): rank s
 * preprocesses a unit = (output column, row share k) that rank d consumes,
 * so every step the preprocessed values of the unit go from s to d.
 *
 * A global batch of n <= Bg rows is cut into K row shares: share k is rows
 * rap_hybrid_rows(n, K, k) (the first n % K shares one row more). Every
 * rank has a packed model batch over all n rows (rap_model_batch): dense
 * (n, ND) row-major and, per GLOBAL table t, off[t] (n+1) / ids[t]; only
 * the rows of shares this rank computed hold valid values (the others'
 * offsets are non-decreasing, their lengths and ids are not read).
 *
 * Units: dense (columns [col, col+width) of share k: rows(k) * width
 * floats) or sparse (table t over share k). The send and receive lists are
 * copied and sorted canonically per peer (dense before sparse, then col,
 * then share), so the sender's blocks to d and d's blocks from s come in
 * the same order without talking. One run, on every rank at once:
 *
 *   pack: the send units, peer by peer (ascending), in that order:
 *         dense: rows(k) x width floats, row i's at i*width (F32 buffer);
 *         sparse: rows(k) lengths, then rows(k)*L ids, row i's at i*L, the
 *         rest 0 (I64 buffer: ids.h's block layout, L as its K)
 *   one comm group: all-to-all-v of F32 and all-to-all-v of I64 (counts
 *         and displacements from n on the host; both always run, zero
 *         counts allowed)
 *   scatter: received dense units into the caller's dense, in place (rows
 *         of share k, columns [col, col+width))
 *   assemble: for each held table that is not all local, the lengths of
 *         the n rows (local shares from mb's offsets, received shares from
 *         their blocks) scanned into offsets (from 0), the ids compacted
 *         in row order; all-local held tables pass mb's arrays through
 *
 * Fixed-size blocks: every count follows from n and the lists, so the GPU
 * path needs no host synchronisation per run. A row with more than L ids
 * (in a sent unit, or in a local share of an assembled table) is cut to
 * its first L and flagged (rap_moves_check reads the flag; all-local
 * tables pass through uncut and unchecked). The CPU path (host comm, host
 * memory) is the same algorithm on the host: the GPU's results equal it
 * element for element. Every buffer is allocated by rap_moves_create; a run
 * allocates nothing.
 *
 * GPU (dev RAP_GPU):
 *   - over a nccl comm (training): everything asynchronous on
 *     rap_comm_stream(c), one NCCL group of the two all-to-alls.
 *   - over a host comm (self, threads, mpi): for tests that run the GPU
 *     kernels with 2-4 thread ranks on ONE GPU (NCCL refuses two ranks on
 *     one device). The kernels run on the legacy default stream (NULL, the
 *     stream rap_comm_stream gives for a host comm); the run copies the
 *     packed blocks into pinned host buffers allocated at create,
 *     synchronises that stream, does the host all-to-alls, and copies the
 *     received blocks back asynchronously. Not meant for training.
 *
 * Bytes: 4 * rows(k) * width per dense unit sent, 8 * rows(k) * (1 + L)
 * per sparse unit sent (the padded words are what moves).
 *
 * Usage (rank r, comm c; nccl comm on GPU ranks):
 *     RAP_TRY(rap_moves_create(c, dev, &cfg, &x));
 *     for each global batch of n rows: mb = this rank's packed batch;
 *         RAP_TRY(rap_moves_run(x, &mb, dense, n, &g));
 *         ... the hybrid step on g (rap_comm_stream(c) on GPU) ...
 *     RAP_TRY(rap_moves_check(x));                     // GPU: syncs
 *     rap_moves_free(x);
 */
#ifndef RAP_DIST_MOVES_H
#define RAP_DIST_MOVES_H

#include "dist/comm.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most row shares of a global batch (a bit each in a uint64_t). */
#define RAP_MOVES_MAX_K 64

typedef enum { RAP_MOVE_DENSE = 0, RAP_MOVE_SPARSE = 1 } rap_move_kind;

/* One unit moved from one rank to another. */
typedef struct {
    rap_move_kind kind;
    int col;   /* dense: first column of the unit in the packed dense (0..ND-1); sparse: global table t */
    int width; /* dense: columns of the unit (>= 1); sparse: 0 */
    int share; /* k in [0, K) */
    int peer;  /* in a send list: the destination rank; in a recv list: the source rank */
} rap_move;

typedef struct {
    int K;                 /* row shares of a global batch, 1..RAP_MOVES_MAX_K */
    int T;                 /* tables, 1..RAP_MAX_TABLES */
    int ND;                /* dense columns of the packed batch (>= 0) */
    int64_t Bg;            /* the largest global batch (>= 1) */
    int L;                 /* most ids one row has in one table (>= 1), as rap_ids_xchg's K */
    const rap_move *send;  /* (n_send) units this rank computes for other ranks */
    int n_send;
    const rap_move *recv;  /* (n_recv) units other ranks compute for this one */
    int n_recv;
    const uint64_t *local; /* (T) per table this rank holds: bit k = share k computed here; 0 for
                            * tables it does not hold */
    const bool *holds;     /* (T) tables this rank holds (their ids are assembled over all n rows) */
} rap_moves_config;

typedef struct rap_moves rap_moves;

/* The moves of rank rap_comm_rank(c) of R = rap_comm_size(c). dev
 * RAP_CPU: c a host comm (self, threads, mpi); RAP_GPU: a nccl comm (call
 * from the thread whose current device is the comm's), or a host comm for
 * tests on one GPU (moves.h top). Not a collective. Checks, RAP_ERR_ARG
 * with a message naming the unit: sizes (K 1..64, T 1..RAP_MAX_TABLES, ND
 * >= 0, Bg >= 1, L >= 1); each unit's peer in range and not this rank, its
 * share in [0, K), a dense unit's columns inside ND (width >= 1), a sparse
 * unit's table in [0, T) (width 0); no duplicate send unit (kind, col,
 * share, peer); no dense columns of a share received twice (overlapping
 * units); no recv sparse unit of a table not held; local bits only for held
 * tables and shares < K; for every held table, every share either local or
 * received exactly once. The lists are copied and sorted; c must outlive
 * the moves. Allocates every buffer (sized for ceil(Bg / K) rows a share)
 * and, on GPU, uploads the descriptor tables. RAP_ERR_NO_GPU for RAP_GPU
 * without CUDA. */
rap_status rap_moves_create(rap_comm *c, rap_device dev, const rap_moves_config *cfg,
                            rap_moves **out);
/* Accepts NULL. GPU: the caller makes sure no run is in flight (nccl:
 * rap_comm_wait) before freeing. */
void rap_moves_free(rap_moves *x);

/* One run, a collective (every rank, the same n, 1..Bg). mb: this rank's
 * packed batch over n rows (mb->rows == n; device pointers on GPU):
 * dense (n, ND) read for the dense units sent; off[t] (n+1, off[t][0] may
 * be non-zero) / ids[t] read for the rows of the sparse units sent and of
 * the local shares of assembled tables (may be NULL for a table of
 * neither). dense (n, ND): mb's dense, writable: the received dense units
 * are written into it in place; nothing else of it is written. g (out):
 * rows n, dense = dense, label = mb->label; for every held table: if all K
 * shares are local, mb's off/ids as they are; else off (n+1, from 0) /
 * ids (off[n]) in row order from the local shares (mb's) and the received
 * ones: pointers into the moves' buffers, valid until the next run; NULL
 * for tables not held.
 * GPU: asynchronous on rap_comm_stream(c) (a host comm: the legacy default
 * stream, see the top); mb's data must be ready in stream order; g's
 * buffers are rewritten by the next run's kernels. A row with more than L
 * ids is cut and flagged (rap_moves_check).
 * CPU: such a row is cut the same way; the run still completes the
 * collective and the assembly, then returns RAP_ERR_DATA naming the table
 * and the row.
 * RAP_ERR_ARG for n outside 1..Bg, mb->rows != n, or missing pointers
 * (checked on the host before any collective). */
rap_status rap_moves_run(rap_moves *x, const rap_model_batch *mb, float *dense, int64_t n,
                         rap_model_batch *g);

/* Bytes this rank sent to other ranks in the runs so far (host arithmetic:
 * 4 * rows * width per dense unit, 8 * rows * (1 + L) per sparse unit). */
void rap_moves_bytes(const rap_moves *x, int64_t *sent_by_me);

/* Whether a row this rank packed or assembled had more than L ids in the
 * runs so far: RAP_ERR_DATA naming the (lowest such) table, the most ids
 * seen and L; RAP_OK otherwise. Not a collective. GPU: reads a device flag
 * back (waits for the stream: call it at the end, or at a checkpoint). */
rap_status rap_moves_check(rap_moves *x);

/* ------------------------------------------------------------ internals
 * The kernels' launchers (moves_gpu.cu), for moves.c. */

/* Tables per launch of the sparse kernels: their pointers travel as
 * kernel parameters. */
#define RAP_MOVES_CHUNK 128

/* A sorted unit list as the kernels read it (device pointers on GPU, host
 * pointers for the CPU path). Unit j's block starts at element
 *     (n / K) * cw[j] + pe[j * K + n % K]
 * of its buffer (cw[n_units] and pe[n_units * K ..] give the total), so
 * the offsets follow from n without a table per run. */
typedef struct {
    int n;             /* units */
    int K;             /* row shares */
    const int *u;      /* (n, 4): col (dense column or table), w (elements a row: dense width,
                        * sparse 1 + L), share, slot (sparse send: pointer slot of its table) */
    const int64_t *cw; /* (n+1): sum of w over the units before j */
    const int64_t *pe; /* (n+1, K): [j*K + e] = sum of w over the units i < j with share < e */
} rap_moves_units;

/* Pointers of tables s0 .. s0+n-1 of a table list (mb's, of this run). */
typedef struct {
    const int64_t *off[RAP_MOVES_CHUNK]; /* (n+1) each, over the global batch */
    const int64_t *ids[RAP_MOVES_CHUNK]; /* ids indexed by off */
    int t[RAP_MOVES_CHUNK];              /* global table index */
    int n;                               /* tables in this chunk */
    int s0;                              /* first table (slot) of the chunk */
} rap_moves_chunk;

/* total: the elements of u's blocks for n rows (the host's offsets). */

/* Pack dense: the dense send units' blocks (rows(k) x w floats) from
 * dense (n, ND) into send. Asynchronous on stream. */
rap_status rap_moves_pack_dense_gpu(const rap_moves_units *u, int64_t n, int64_t total,
                                    const float *dense, int ND, float *send, void *stream);
/* Pack sparse: the blocks of the sparse send units whose slot is in the
 * chunk: rows(k) lengths min(len, L), then rows(k) * L ids (padding 0). A
 * row with len > L sets flag (device, 3 ints: [0] = 1, [1] = min table,
 * [2] = max len clipped to INT_MAX). */
rap_status rap_moves_pack_sparse_gpu(const rap_moves_units *u, const rap_moves_chunk *ch,
                                     int64_t n, int64_t total, int L, int64_t *send, int *flag,
                                     void *stream);
/* Scatter dense: the received dense units' blocks of recv into dense (n,
 * ND) in place. */
rap_status rap_moves_scatter_dense_gpu(const rap_moves_units *u, int64_t n, int64_t total,
                                       const float *recv, float *dense, int ND, void *stream);
/* Lengths of the assembled tables a = ch->s0 .. + ch->n over n rows:
 * cum[a*n + g] = min(len, L) of row g from ch's offsets when src[a*K + k]
 * < 0 (share k local; len > L flagged), else the received length of unit
 * src[a*K + k] of rs in recv. */
rap_status rap_moves_lens_gpu(const rap_moves_chunk *ch, const int *src, const rap_moves_units *rs,
                              const int64_t *recv, int64_t n, int L, int64_t *cum, int *flag,
                              void *stream);
/* In-place inclusive sum of cum (items); scratch of rap_ids_scan_scratch
 * bytes (ids.h: the same scan). */
rap_status rap_moves_scan_gpu(int64_t *cum, int64_t items, void *scratch, size_t scratch_bytes,
                              void *stream);
/* After the scan: the assembled tables of the chunk, off + a*(Bg+1) (n+1,
 * from 0) and ids + a*Bg*L in row order (local ids from ch, received from
 * recv). */
rap_status rap_moves_compact_gpu(const rap_moves_chunk *ch, const int *src,
                                 const rap_moves_units *rs, const int64_t *recv, int64_t n,
                                 int L, int64_t Bg, const int64_t *cum, int64_t *off,
                                 int64_t *ids, void *stream);

/* Device helpers for moves.c (C): RAP_ERR_NO_GPU without CUDA. copy is
 * asynchronous on stream (to_host: device to host, else host to device).
 * The overflow flag is ids.h's (rap_ids_flag_reset / rap_ids_flag_read). */
rap_status rap_moves_copy(void *dst, const void *src, size_t bytes, bool to_host, void *stream);
rap_status rap_moves_sync(void *stream);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_MOVES_H */
