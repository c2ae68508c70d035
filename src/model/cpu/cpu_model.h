/*
 * cpu_model.h -- the CPU backend of the DLRM model (rap_model_backend_cpu
 * of model_internal.h): its state, and the hooks the tests use to look
 * inside.
 *
 * Letters as in model.h: B batch rows (capacity), n rows of the current
 * batch, ND dense width, T tables, D embedding dim, F = T + 1,
 * TI = D + F(F-1)/2 top MLP input width.
 *
 * Contract: create allocates everything for B rows (weights, optimizer
 * state, MLP gradients, every activation and the sort keys of the
 * embedding backward for B*T ids, one per bag); the phases allocate
 * nothing, except that a batch holding more ids than any before (multi-hot
 * bags beyond one id per bag on average) grows the sort keys once, in
 * emb_forward. Phases must come in order: emb_forward, mlp_forward,
 * mlp_backward, emb_backward, on the same batch. Results are bit-identical
 * from run to run and for any thread count (cpu_layers.h).
 *
 * Sharded (model.h, hybrid parallel): the embedding part holds TE = TL
 * local tables and works on b_glob (up to EB = emb_batch rows) in emb_out
 * / demb_out (EB, TE, D); the MLPs read emb and write demb (B, T, D), the
 * caller fills emb; mlp_backward leaves the optimizer to dense_apply.
 * Unsharded: TE = T, EB = B, the emb phases use emb / demb directly.
 */
#ifndef RAP_CPU_MODEL_H
#define RAP_CPU_MODEL_H

#include "model/cpu/cpu_layers.h"
#include "model/model_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rap_pool *pool;
    int threads;                       /* pool and OpenBLAS threads */
    void *tab;                         /* the tables, elements of emb_dtype (model_internal.h) */
    float *tab_state;                  /* their state: Adagrad per element, row-wise per row;
                                        * NULL for SGD */
    float *mlp;                        /* (n_mlp_params) the MLP tensors */
    float *mlp_state;                  /* (n_mlp_params) their Adagrad accumulators; NULL for SGD */
    float *grads;                      /* (n_mlp_params) MLP gradients of the last backward */
    void *tables[RAP_MAX_TABLES];      /* (TE) table k in tab, (rows, D) of emb_dtype */
    float *tstate[RAP_MAX_TABLES];     /* (TE) its state: (rows, D) Adagrad, (rows) row-wise;
                                        * NULL for SGD */
    int tglobal[RAP_MAX_TABLES];       /* (TE) global table of table k (rounding keys) */
    int64_t trow0[RAP_MAX_TABLES];     /* (TE) its first global row */
    int te;                            /* TE: tables held (T, or the shard's TL) */
    bool sharded;
    uint64_t emb_step;                 /* emb_backward calls so far (rounding key) */
    size_t bw[RAP_MAX_LAYERS], bb[RAP_MAX_LAYERS]; /* bottom weight/bias offsets in mlp */
    size_t tw[RAP_MAX_LAYERS], tb[RAP_MAX_LAYERS]; /* top weight/bias offsets in mlp */
    void *block;                       /* the one block behind the activations below */
    float *bot_act[RAP_MAX_LAYERS];    /* (B, bot[l]) after ReLU */
    float *top_act[RAP_MAX_LAYERS];    /* (B, top[l]); the last is the logits (B, 1) */
    float *emb;                        /* (B, T, D) pooled embeddings */
    float *inter;                      /* (B, TI) interaction output */
    float *dinter;                     /* (B, TI) its gradient */
    float *dx;                         /* (B, D) gradient of the bottom output */
    float *demb;                       /* (B, T, D) gradient of the pooled embeddings */
    float *ddense;                     /* (B, ND) gradient of the dense input */
    float *emb_out;                    /* sharded: (EB, TE, D) pooled sums of b_glob; else NULL */
    float *demb_out;                   /* sharded: (EB, TE, D) their gradient; else NULL */
    float *buf[2];                     /* (B, maxw) each: ping-pong layer gradients */
    int64_t *seg;                      /* (TE + 1) key segments of the tables */
    rap_cpu_key *keys, *tmp;           /* (key_cap) each */
    int64_t key_cap;
    int phase;                         /* 0 idle, 1 emb fwd, 2 mlp fwd, 3 mlp bwd done */
    int64_t rows;                      /* rows of the batch in flight (sharded: b_loc) */
    int64_t emb_rows;                  /* sharded: rows of b_glob in flight */
    double loss;
    double loss_div;                   /* divisor of the last mlp_forward's loss */
    bool have_loss;
    rap_model_mem alloc;               /* what create allocated, by part (its sizes) */
} rap_cpu_state;

/* ---- test hooks (tests only) ---- */

/* Pooled embeddings (B, T, D) of the last emb_forward (sharded: the
 * emb buffer the caller fills). */
const float *rap_cpu_model_pooled(const rap_model *m);
/* Gradients of the last mlp_backward: pooled embeddings (B, T, D) and the
 * dense input (B, ND). */
const float *rap_cpu_model_demb(const rap_model *m);
const float *rap_cpu_model_ddense(const rap_model *m);
/* The bytes create allocated, by part, as it passed them to the
 * allocator (the sort keys as first allocated; a batch of more ids grows
 * them later). The memory plan's sizes (rap_model_mem_of) must equal
 * these. */
void rap_cpu_model_allocated(const rap_model *m, rap_model_mem *out);
/* Runs the embedding backward of batch b (after its emb_forward) with the
 * given gradient of the pooled embeddings demb (rows, T, D) instead of the
 * one from mlp_backward. */
rap_status rap_cpu_model_emb_backward_from(rap_model *m, const rap_model_batch *b,
                                           const float *demb);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CPU_MODEL_H */
