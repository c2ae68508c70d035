/*
 * cpu_layers.h -- the layers of the CPU reference model, each a plain
 * function on caller-owned arrays, so the tests can check every one alone
 * (finite differences) and cpu_model.c can chain them.
 *
 * Letters: n rows (<= B), in/out layer widths, T tables, D embedding dim,
 * F = T + 1 interaction vectors, P = F(F-1)/2 pairs, K keys (ids of a batch).
 *
 * Threads: loops run on the given pool (NULL = on the caller) partitioned
 * by rows or columns in fixed chunks; every output element is computed by
 * one thread in a fixed order, so results do not depend on the number of
 * threads. GEMMs are single-threaded OpenBLAS cblas_sgemm calls on fixed
 * blocks of 64 output rows, run on the pool (cpu_layers.c says why).
 * Nothing here allocates.
 */
#ifndef RAP_CPU_LAYERS_H
#define RAP_CPU_LAYERS_H

#include "core/core.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = x w^T + b, then ReLU when relu. x (n, in), w (out, in), b (out),
 * y (n, out). */
void rap_cpu_linear_forward(const float *x, const float *w, const float *b, int64_t n, int in,
                            int out, bool relu, float *y, rap_pool *pool);

/* Backward of rap_cpu_linear_forward given y (its output) and dy (n, out),
 * the gradient of the loss with respect to y. dy is overwritten with the
 * gradient before the ReLU (masked where y <= 0) when relu. Writes
 * dw (out, in) = dy^T x, db (out) = column sums of dy (summed over rows in
 * order), and dx (n, in) = dy w when dx is not NULL. */
void rap_cpu_linear_backward(const float *x, const float *w, const float *y, float *dy,
                             int64_t n, int in, int out, bool relu, float *dw, float *db,
                             float *dx, rap_pool *pool);

/* Dot interaction. x (n, D) bottom output, emb (n, T, D) pooled
 * embeddings, out (n, D + P): [x, z_i . z_j for i > j] with z_0 = x,
 * z_{1+t} = emb[:, t], pairs in order (1,0), (2,0), (2,1), (3,0), ...
 * Dot products summed in float over d in order. */
void rap_cpu_interaction_forward(const float *x, const float *emb, int64_t n, int T, int D,
                                 float *out, rap_pool *pool);

/* Backward: dout (n, D + P) -> dx (n, D), demb (n, T, D). */
void rap_cpu_interaction_backward(const float *x, const float *emb, const float *dout, int64_t n,
                                  int T, int D, float *dx, float *demb, rap_pool *pool);

/* Sum-pooled bag of table t (R rows of D, elements of type dt):
 * emb[r, t, :] = sum in fp32 of table[id] (widened exactly) over
 * ids[off[r] .. off[r+1]) in order: the first valid id's row, then each
 * next one added (the GPU's order: a bag of one id copies its row, -0
 * included); 0 for an empty bag. emb (n, T, D). Returns the number of ids
 * outside [0, R) or bags with off[r+1] < off[r] (skipped; 0 when the
 * batch is well formed). */
int64_t rap_cpu_bag_forward(const void *table, rap_emb_dtype dt, int64_t R, int D,
                            const int64_t *off, const int64_t *ids, int64_t n, int T, int t,
                            float *emb, rap_pool *pool);

/* Mean BCE-with-logits over n rows: returns the loss (per-row terms in
 * double, summed in row order) and, when dlogit is not NULL, writes
 * dlogit (n) = (sigmoid(logit) - label) / n. */
double rap_cpu_bce(const float *logit, const float *label, int64_t n, float *dlogit);
/* The same with another divisor than n: returns (sum of the per-row terms)
 * / div and writes dlogit = (sigmoid(logit) - label) / div (a sharded
 * model's part of a global mean: div = the global batch rows).
 * rap_cpu_bce is this with div = n. */
double rap_cpu_bce_div(const float *logit, const float *label, int64_t n, double div,
                       float *dlogit);

/* One sort key of the embedding backward: id `id` of table t seen in row
 * `row` of the batch. */
typedef struct {
    int64_t id;
    int32_t t;
    int32_t row;
} rap_cpu_key;

/* Embedding backward with the optimizer. For every table t: gathers the
 * (id, row) keys of the batch into keys (K), sorts them by id (stable: a
 * merge sort with tmp (K) as scratch), then for every distinct (t, id)
 * sums demb[row, t, :] over its keys in (row, position) order and applies
 * one optimizer step to that row with the arithmetic of emb_math.h: SGD
 * w -= lr g; Adagrad s += g*g, w -= lr (g / (sqrt(s) + eps)); row-wise
 * Adagrad s += (sum of g*g in emb_math.h's order) / D, w -= (lr /
 * (sqrt(s) + eps)) g. A 16-bit table's w is widened, updated in fp32 and
 * stochastically rounded back (half.h) with the bits of element d of the
 * stream of (seed, step, gtable[t], grow0[t] + id). tables[t] (R_t, D) of
 * dtype, state[t] (R_t, D) Adagrad / (R_t) row-wise (NULL for SGD).
 * K >= the ids of the batch (caller checked). No dense gradient of a
 * table is ever formed. */
typedef struct {
    int T, D;
    int64_t n;                      /* rows of the batch */
    void *const *tables;            /* (T) each (R_t, D) of dtype */
    float *const *state;            /* (T) each (R_t, D) or (R_t); NULL for SGD */
    const int64_t *const *off;      /* (T) each (n + 1) */
    const int64_t *const *ids;      /* (T) */
    const float *demb;              /* (n, T, D) */
    rap_optimizer opt;
    rap_emb_dtype dtype;            /* of the tables (0: fp32) */
    float lr, eps;
    const int *gtable;              /* (T) global table of table t; NULL: t */
    const int64_t *grow0;           /* (T) its first global row; NULL: 0 */
    uint64_t seed, step;            /* the rounding stream's key (half.h) */
    rap_cpu_key *keys, *tmp;        /* (K) each */
    int64_t *seg;                   /* (T + 1) scratch: first key of each table */
} rap_cpu_emb_update;
void rap_cpu_emb_backward(const rap_cpu_emb_update *u, rap_pool *pool);

/* Dense optimizer step over n parameters: w (n), g (n), s (n, Adagrad
 * accumulator, NULL for SGD). Same formulas as the embedding rows. */
void rap_cpu_optimizer_step(float *w, const float *g, float *s, size_t n, rap_optimizer opt,
                            float lr, float eps, rap_pool *pool);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CPU_LAYERS_H */
