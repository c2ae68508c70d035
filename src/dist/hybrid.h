/*
 * hybrid.h -- the hybrid-parallel training step (docs/DIST.md "Model
 * parallelism"): embedding tables sharded over the ranks (model
 * parallel), MLPs replicated (data parallel).
 *
 * Global batch of n <= Bg rows: rank r trains rows rap_hybrid_rows(n, R, r)
 * (dense, label) and looks up the ids of its local tables over all n rows.
 * One step, on every rank at once:
 *
 *   filter ids of row-range local tables (keep [row0, row0+rows), - row0)
 *   emb_forward(all n rows, local tables)              -> emb_out (n, TL, D)
 *   all-to-all: rank r gets rows of its share of every rank's local tables
 *   scatter into emb (B, T, D), row-range partials summed (rank order)
 *   mlp_forward, mlp_backward (local rows)             -> demb, grads
 *   group { all-reduce(sum) grads ; all-to-all demb -> demb_out (n, TL, D) }
 *   emb_backward(all n rows), dense_apply
 *
 * The result equals one unsharded model trained on the whole global batch,
 * to float rounding. Every buffer is allocated by rap_hybrid_create; the
 * step allocates nothing. On the GPU (nccl comm) the step is asynchronous
 * on the model's stream with at most two steps in flight: each step waits
 * (with the comm's timeout) for the one before the previous one.
 *
 * Usage (rank r of R, comm c, global model config g, shard map from
 * rap_shard_plan):
 *     rap_model_shard sh; rap_model_config mc;
 *     RAP_TRY(rap_hybrid_model_config(&g, &map, r, Bg, &sh, &mc));
 *     RAP_TRY(rap_model_create(&mc, dev, &m));
 *     RAP_TRY(rap_hybrid_create(m, &map, c, &h));
 *     for each global batch: glob = off/ids of all T tables over n rows;
 *         loc = dense/label of rows rap_hybrid_rows(n, R, r);
 *         RAP_TRY(rap_hybrid_step(h, &glob, &loc));
 *         RAP_TRY(rap_hybrid_loss(h, &loss));   // collective, optional
 */
#ifndef RAP_DIST_HYBRID_H
#define RAP_DIST_HYBRID_H

#include "dist/comm.h"
#include "dist/shard.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rap_hybrid rap_hybrid;

/* Rows of a global batch of n rows that rank r of R trains:
 * [*row0, *row0 + *rows); the first n % R ranks take one more row. */
void rap_hybrid_rows(int64_t n, int R, int r, int64_t *row0, int64_t *rows);

/* Rank r's model config: a copy of the unsharded config `global` (T,
 * table_rows, batch = Bg ...) with batch = its row share of Bg and shard =
 * `shard`, filled from map->shard[r] with emb_batch = loss_rows = Bg.
 * `shard` must outlive rap_model_create (which copies it). */
rap_status rap_hybrid_model_config(const rap_model_config *global, const rap_shard_map *map,
                                   int r, int64_t Bg, rap_model_shard *shard,
                                   rap_model_config *out);

/* The bytes rap_hybrid_create allocates on dev for rank r of map with the
 * rank's model config mc (rap_hybrid_model_config's): the forward and
 * reverse exchange buffers, the filtered tables' offsets and ids, and on
 * the GPU the part arrays and the filter's scratch; from the sizes create
 * allocates with (the memory plan, run/memplan.h). RAP_ERR_ARG without a
 * map, a rank of it or a shard. */
rap_status rap_hybrid_bytes(const rap_shard_map *map, int r, const rap_model_config *mc,
                            rap_device dev, size_t *bytes);

/* The step's state for model m (made from rap_hybrid_model_config with
 * this map and rank) over comm c (rank and size as the map's; nccl for a
 * GPU model, host backends for a CPU model). m, map and c must outlive it.
 * Allocates every exchange and filter buffer. */
rap_status rap_hybrid_create(rap_model *m, const rap_shard_map *map, rap_comm *c,
                             rap_hybrid **out);
void rap_hybrid_free(rap_hybrid *h);

/* One training step. glob: rows = n (1..Bg, the same on every rank),
 * off[t]/ids[t] of every GLOBAL table t (global ids, in [0, R_t)); its
 * dense/label are not read. loc: rows = this rank's share of n
 * (rap_hybrid_rows), dense and label of those rows. Pointers on the
 * model's device. */
rap_status rap_hybrid_step(rap_hybrid *h, const rap_model_batch *glob,
                           const rap_model_batch *loc);

/* Mean loss of the last step over the global batch (every rank's partial
 * summed: a collective, call it on every rank). Waits for the step. */
rap_status rap_hybrid_loss(rap_hybrid *h, double *loss);

/* Waits (bounded by the comm's timeout) until the steps issued so far are
 * done. No-op for host comms. */
rap_status rap_hybrid_wait(rap_hybrid *h);

/* The phases of one step, in the order rap_hybrid_step queues them. */
typedef enum {
    RAP_HYB_EMB_FORWARD = 0, /* filter, lookups, all-to-all, scatter */
    RAP_HYB_MLP_FORWARD,
    RAP_HYB_MLP_BACKWARD,    /* with the gather of the embedding gradients */
    RAP_HYB_GRAD_COMM,       /* dense all-reduce + reverse all-to-all, one group */
    RAP_HYB_EMB_BACKWARD,    /* dense apply, the lookups' backward */
    RAP_HYB_PHASES
} rap_hybrid_phase;

/* Called by the steps at each phase's boundaries (on every rank, for every
 * phase, even one without work on this rank): begin right before the
 * phase's first kernel or collective is queued on the model's stream, end
 * right after its last. The runtime uses them to release its preprocessing
 * windows beside the phases (docs/RUNTIME.md). A hook's error stops the
 * step. */
typedef struct {
    rap_status (*begin)(void *ctx, rap_hybrid_phase p);
    rap_status (*end)(void *ctx, rap_hybrid_phase p);
    void *ctx;
} rap_hybrid_hooks;

/* Hooks for the following steps (copied; NULL: none). */
void rap_hybrid_set_hooks(rap_hybrid *h, const rap_hybrid_hooks *hooks);

/* Communication of the steps since the last reset, summed: the forward
 * all-to-all and the gradients' exchange (dense all-reduce + reverse
 * all-to-all, one NCCL group, timed together), ms; bytes this rank sent to
 * other ranks in those collectives (the all-reduce counted as its ring's
 * 2(R-1)/R of the gradients); steps timed. GPU: CUDA events read once a
 * step is known done (so up to two steps lag until rap_hybrid_wait); CPU:
 * the host clock. One rank: nothing to time (zeros, steps counted). */
typedef struct {
    double a2a_ms, grad_ms;
    int64_t bytes_sent;
    int64_t steps;
} rap_hybrid_comm;

void rap_hybrid_comm_get(const rap_hybrid *h, rap_hybrid_comm *out);
void rap_hybrid_comm_reset(rap_hybrid *h);

/* Kept ids of a row-range table and their new offsets (CPU reference of
 * the GPU filter): for rows i < n, ids of off[i]..off[i+1] in
 * [row0, row0 + rows), minus row0, into out_ids; out_off (n+1). Returns the
 * number kept; never more than off[n] - off[0]. */
int64_t rap_hybrid_filter_cpu(const int64_t *off, const int64_t *ids, int64_t n,
                              int64_t row0, int64_t rows, int64_t *out_off,
                              int64_t *out_ids);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_HYBRID_H */
