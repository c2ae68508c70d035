/*
 * model.h -- the DLRM model: one API, two backends.
 *
 *   dense (B, ND) -> bottom MLP -> x (B, D)
 *   sparse table t: bag of ids per row -> sum of rows of table t -> e (B, T, D)
 *   z = [x, e_0 .. e_{T-1}]  (F = T + 1 vectors of D per row)
 *   interaction: [x, z_i . z_j for i > j]  (D + F(F-1)/2 per row; pairs in
 *       row-major lower-triangle order: (1,0), (2,0), (2,1), (3,0), ...)
 *   -> top MLP (ReLU after every layer but the last) -> one logit per row
 *   loss: mean BCE-with-logits over the batch
 *
 * Backends: RAP_CPU (src/model/cpu/: plain C + OpenBLAS, the readable
 * reference, used by the tests) and RAP_GPU (src/model/gpu/: fused
 * embedding-bag kernels, cuBLASLt MLPs). Both start from the same weights
 * (initialised on the host from the seed, then copied) so tests can compare
 * them step by step.
 *
 * Training phases (the co-running runtime launches preprocessing beside
 * each): rap_model_emb_forward, rap_model_mlp_forward (bottom MLP,
 * interaction, top MLP, loss), rap_model_mlp_backward (and the dense
 * optimizer update; a sharded model leaves it to rap_model_dense_apply),
 * rap_model_emb_backward (aggregates duplicate ids and
 * applies the optimizer to the touched rows: no dense gradient table).
 * On the GPU the phases are asynchronous on the model's stream, allocate
 * nothing and never synchronise with the host.
 *
 * Letters: B batch rows, ND dense input width, T tables, D embedding dim,
 * R_t rows of table t.
 */
#ifndef RAP_MODEL_H
#define RAP_MODEL_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_MAX_LAYERS 16
#define RAP_MAX_TABLES 4096

/* SGD and ADAGRAD apply to every parameter, element by element. ROWWISE_ADAGRAD
 * (FBGEMM's exact row-wise Adagrad): one fp32 state per table row, which adds
 * the mean over the row of the squared summed gradient; every element of the
 * row then moves by lr * g / (sqrt(state) + eps). The MLP tensors of a
 * ROWWISE_ADAGRAD model use ADAGRAD (per element), as PyTorch's Adagrad. */
typedef enum { RAP_SGD = 0, RAP_ADAGRAD = 1, RAP_ROWWISE_ADAGRAD = 2 } rap_optimizer;
/* Storage type of the embedding tables (the MLPs are always fp32): fp32, or
 * 16 bits (bf16, IEEE fp16) with lookups and pooling in fp32 and each update
 * computed in fp32 and stochastically rounded into the table (half.h,
 * docs/MODEL.md "16-bit tables"). */
typedef enum { RAP_EMB_FP32 = 0, RAP_EMB_BF16 = 1, RAP_EMB_FP16 = 2 } rap_emb_dtype;
/* FP32: float32 weights, TF32 tensor-core math on the GPU (float32 on the
 * CPU). BF16: float32 master weights, bf16 GEMM inputs, float32
 * accumulation (GPU only; the CPU computes in float32). */
typedef enum { RAP_FP32 = 0, RAP_BF16 = 1 } rap_precision;

typedef struct {
    int n_dense;                 /* ND: width of the dense input */
    int n_tables;                /* T */
    int64_t table_rows[RAP_MAX_TABLES]; /* R_t */
    int emb_dim;                 /* D */
    int bot[RAP_MAX_LAYERS];     /* bottom MLP output widths; bot[n_bot-1] == D */
    int n_bot;
    int top[RAP_MAX_LAYERS];     /* top MLP output widths; top[n_top-1] == 1 */
    int n_top;
    int64_t batch;               /* B: largest batch */
    int64_t max_bag;             /* most ids in one bag (row, table); 0 means 1 */
    rap_optimizer optimizer;
    rap_emb_dtype emb_dtype;     /* storage of the tables, default RAP_EMB_FP32 */
    float lr;
    float adagrad_eps;           /* default 1e-8 (PyTorch's Adagrad) */
    float adagrad_init;          /* initial accumulator, default 0 */
    rap_precision precision;
    bool strict_fp32;            /* GPU, FP32: plain float32 GEMMs, no TF32 (tests) */
    uint64_t seed;
    int threads;                 /* CPU backend threads, 0 = all cores */
    void *stream;                /* GPU: cudaStream_t to run on, NULL = own */
    const struct rap_model_shard *shard; /* hybrid parallel (src/dist): this rank's
                                  * share of the tables and batch; NULL = the
                                  * whole model (copied by rap_model_create) */
} rap_model_config;

/* ------------------------------------------------------------ hybrid parallel
 *
 * With rap_model_config.shard set, the model holds only the embedding
 * tables (or row ranges of tables) of one rank and trains the rank's local
 * share of the batch, and src/dist moves data between ranks:
 *
 *   emb_forward(b_glob)   pooled sums of the LOCAL tables over the global
 *                         batch -> emb_out (Bg, TL, D)
 *   [dist: all-to-all emb_out -> emb (B, T, D) of every rank's local rows;
 *          a row-wise-sharded table's partial sums are added]
 *   mlp_forward(b_loc)    reads emb; loss = sum over local rows / loss_rows
 *   mlp_backward(b_loc)   -> demb (B, T, D) and the dense gradients `grads`;
 *                         the dense optimizer is NOT applied
 *   [dist: all-reduce (sum) grads; all-to-all demb -> demb_out (Bg, TL, D)]
 *   rap_model_dense_apply the dense optimizer step with `grads`
 *   emb_backward(b_glob)  reads demb_out, updates the local tables
 *
 * b_glob carries the ids of the local tables in slots 0..TL-1 (off[k],
 * ids[k]), already local: in [0, rows[k]). b_loc carries dense and label.
 * Local table k is rows [row0[k], row0[k] + rows[k]) of global table
 * table[k] (a whole table: row0 0, rows R_t) and is initialised to exactly
 * those rows of the unsharded model (element j of local table k =
 * rap_init_table_value(seed, table[k], row0[k]*D + j, R_table[k])), so R
 * ranks with global batch Bg train the same model as one rank with batch
 * Bg, to float rounding (SGD, Adagrad). The MLP init does not depend on
 * the shard (the same on every rank).
 * c->batch is B (local rows), c->n_tables T and table_rows[] the GLOBAL
 * tables. Without a shard nothing changes (emb_out == emb etc.).
 *
 * Details of a sharded model:
 * - rap_model_create copies the shard; rap_model_config_of(m)->shard then
 *   points at the model's copy (valid until rap_model_free).
 * - Checked: 0 <= TL <= T, table[k] in [0, T), rows[k] >= 1, row0[k] >= 0,
 *   row0[k] + rows[k] <= R_table[k], emb_batch and loss_rows in
 *   1..2^30.
 * - emb_forward / emb_backward take b_glob: 1..Bg rows; they write / read
 *   rows [0, b_glob->rows) of emb_out / demb_out. mlp_forward,
 *   mlp_backward and predict take b_loc: 1..B rows.
 * - TL may be 0 (a rank holding no table): emb_out and demb_out are NULL
 *   and the two emb phases only check the batch's row count.
 * - Order: emb_forward, mlp_forward, mlp_backward, dense_apply and
 *   emb_backward (dense_apply and emb_backward in either order). The CPU
 *   checks: mlp_forward after emb_forward, mlp_backward after mlp_forward
 *   (same b_loc), emb_backward after emb_forward (same b_glob rows; the
 *   MLP phases may be skipped: see dense_apply). rap_model_train_step is
 *   refused (the step is src/dist's).
 * - mlp_forward: loss = sum over the b_loc rows / loss_rows, and
 *   d loss / d logit = (sigmoid - y) / loss_rows; rap_model_last_loss gives
 *   that partial, so the sum over ranks is the global mean.
 *   rap_model_set_loss_rows changes loss_rows (a short global batch).
 * - mlp_backward overwrites demb (rows [0, b_loc->rows)) and every element
 *   of grads that holds a gradient; dense_apply then applies exactly the
 *   optimizer arithmetic of the unsharded mlp_backward with grads.
 * - grads layout: CPU, the MLP tensors in tensor order (rows*cols floats
 *   each, n_grads = their total); GPU, the padded layout of gpu_model.h
 *   (padding elements hold zeros or garbage and are never read). Models of
 *   one config on one device kind have the same layout, so an element-wise
 *   sum over ranks is the gradient of the global batch.
 * - GPU: emb is z + D (slots 1..T of the interaction input (B, F, D),
 *   emb_ld = F*D) and demb is the interaction's gradient buffer (demb_ld =
 *   T*D): no copy between the exchange and the MLPs. The phases run on the
 *   model's stream (c->stream when given): the caller orders its reads of
 *   emb_out / demb / grads after the phase that wrote them, and its writes
 *   of emb / grads / demb_out before the phase that reads them (same
 *   stream, events, or rap_model_sync).
 * - predict(b_loc) of a sharded model runs only the MLPs: it reads emb as
 *   the caller filled it (emb_forward(b_glob) and the exchange first) and
 *   leaves any step in flight broken (the CPU refuses its remaining
 *   phases). */
typedef struct rap_model_shard {
    int n_local;                       /* TL >= 0 */
    int table[RAP_MAX_TABLES];         /* (TL) global table of local table k */
    int64_t row0[RAP_MAX_TABLES];      /* (TL) first global row held */
    int64_t rows[RAP_MAX_TABLES];      /* (TL) rows held (>= 1) */
    int64_t emb_batch;                 /* Bg: most rows of b_glob */
    int64_t loss_rows;                 /* divisor of the summed loss (Bg) */
} rap_model_shard;

/* The exchange buffers of a sharded model (device pointers on the GPU,
 * valid until rap_model_free). Row r of emb is emb + r * emb_ld, holding
 * T vectors of D floats (table t at t * D); likewise demb. */
typedef struct {
    float *emb_out;    /* (Bg, TL, D) dense rows, written by emb_forward */
    float *demb_out;   /* (Bg, TL, D) dense rows, read by emb_backward */
    float *emb;        /* (B, T, D) rows emb_ld floats apart, read by mlp_forward */
    float *demb;       /* (B, T, D) rows demb_ld floats apart, by mlp_backward */
    int64_t emb_ld, demb_ld;
    float *grads;      /* (n_grads) dense gradients, one layout on every rank */
    size_t n_grads;
    bool direct;       /* GPU, one rank holding every table whole: emb_forward
                        * writes emb and emb_backward reads demb in place
                        * (emb_out, demb_out NULL): nothing to exchange,
                        * scatter or gather */
} rap_model_shard_bufs;



/* A batch as the model reads it: pointers on the model's device. */
typedef struct {
    int64_t rows;                      /* <= B */
    const float *dense;                /* (rows, ND) row-major */
    const float *label;                /* (rows) 0 or 1 */
    const int64_t *off[RAP_MAX_TABLES]; /* (rows+1) each: bag offsets of table t */
    const int64_t *ids[RAP_MAX_TABLES]; /* ids of table t, each in [0, R_t) */
} rap_model_batch;

/* A parameter tensor, named as the dlrm reference's modules name it:
 * "emb_l.T.weight" (R_t, D), "bot_l.2i.weight" (out, in), "bot_l.2i.bias"
 * (out), "top_l.2i.weight", "top_l.2i.bias" (Linear layers at even indices
 * of nn.Sequential, ReLU between). */
typedef struct {
    char name[64];
    int64_t rows, cols;     /* cols == 1 for biases */
} rap_tensor_info;

typedef struct rap_model rap_model;

/* "sgd", "adagrad", "rowwise-adagrad" (the --optimizer names); "?" for
 * another value. */
const char *rap_optimizer_name(rap_optimizer o);
/* "fp32", "bf16", "fp16" (the --emb-dtype names); "?" for another value. */
const char *rap_emb_dtype_name(rap_emb_dtype t);
/* Bytes of one element: 4, 2, 2; 0 for another value. */
size_t rap_emb_dtype_size(rap_emb_dtype t);

/* Fills defaults: dlrm-style small model, SGD lr 0.1, adagrad eps 1e-8,
 * fp32 tables. */
void rap_model_config_defaults(rap_model_config *c);
/* Checks shapes (bot ends in D, top ends in 1, tables >= 1 row...). */
rap_status rap_model_config_check(const rap_model_config *c);
/* Bytes the model needs on its device: weights (tables in their storage
 * type), optimizer state (Adagrad: one float per parameter; row-wise
 * Adagrad: one per table row plus one per MLP parameter), activations and
 * workspaces for B rows. Used to refuse before allocating. 0 for a config
 * that fails rap_model_config_check (and for RAP_GPU in a build without
 * CUDA). */
size_t rap_model_bytes(const rap_model_config *c, rap_device dev);

/* The parts of a model's memory (rap_model_mem_of), in the order the
 * memory plan prints them. */
typedef enum {
    RAP_MM_TABLES = 0,   /* the tables in their storage type */
    RAP_MM_TABLE_STATE,  /* their optimizer state: per element, per row, none */
    RAP_MM_MLP,          /* the MLP weights (fp32) */
    RAP_MM_MLP_STATE,    /* their Adagrad state (Adagrad, row-wise Adagrad) */
    RAP_MM_GRADS,        /* MLP gradients (GPU: and the GEMM copies of the weights) */
    RAP_MM_ACT,          /* activations and their gradients for B rows; a
                          * shard's exchange buffers */
    RAP_MM_SORT,         /* the embedding backward's sort keys and scratch */
    RAP_MM_BLAS_WS,      /* the cuBLASLt workspace (GPU) */
    RAP_MM_OTHER,        /* small tables: offsets, flags, the backend's state */
    RAP_MM_N
} rap_model_mem_part;

typedef struct {
    size_t part[RAP_MM_N]; /* bytes of each part, as the backend allocates them */
    size_t total;          /* their sum (rap_model_bytes) */
} rap_model_mem;

/* Short name of part k ("tables", "table state", ...); "?" out of range. */
const char *rap_model_mem_part_name(int k);
/* The bytes rap_model_create would allocate for c on dev, by part, from
 * the same layout functions the backend allocates with (nothing is
 * allocated on the device). RAP_ERR_ARG for a config that fails
 * rap_model_config_check, RAP_ERR_NO_GPU for RAP_GPU in a build without
 * CUDA; *out is zeroed then. */
rap_status rap_model_mem_of(const rap_model_config *c, rap_device dev, rap_model_mem *out);

/* Allocates everything and initialises the weights as the dlrm reference
 * does, deterministically from c->seed: table t uniform in
 * +-sqrt(1/R_t); Linear (out, in) weights normal(0, sqrt(2/(in+out))),
 * bias normal(0, sqrt(1/out)). Fails with RAP_ERR_NOMEM saying how much is
 * needed and how much is free, before allocating, when it cannot fit. */
rap_status rap_model_create(const rap_model_config *c, rap_device dev, rap_model **out);
void rap_model_free(rap_model *m);
const rap_model_config *rap_model_config_of(const rap_model *m);
rap_device rap_model_device(const rap_model *m);

/* The four phases of a training step, in this order. */
rap_status rap_model_emb_forward(rap_model *m, const rap_model_batch *b);
rap_status rap_model_mlp_forward(rap_model *m, const rap_model_batch *b);
rap_status rap_model_mlp_backward(rap_model *m, const rap_model_batch *b);
rap_status rap_model_emb_backward(rap_model *m, const rap_model_batch *b);
/* All four. */
rap_status rap_model_train_step(rap_model *m, const rap_model_batch *b);
/* Forward only (no loss needed): logits of the batch into logits_host. */
rap_status rap_model_predict(rap_model *m, const rap_model_batch *b, float *logits_host);
/* *logits: the model's own (B) logits of the last mlp_forward (or
 * predict) of an unsharded model, on its device (host memory on the CPU,
 * device memory on the GPU, written on the model's stream): rows
 * [0, batch rows) valid until the next forward. The training forward's
 * predictions, made with the weights before the step's update (progressive
 * validation, run/progressive.h). RAP_ERR_ARG for a sharded model. */
rap_status rap_model_last_logits(const rap_model *m, const float **logits);
/* Mean loss of the last mlp_forward (synchronises on the GPU). */
rap_status rap_model_last_loss(rap_model *m, double *loss);
/* Waits for queued work (GPU); no-op on the CPU. */
rap_status rap_model_sync(rap_model *m);

/* The buffers above; RAP_ERR_ARG when the model has no shard. Never
 * fails otherwise; the pointers do not change for the model's life. */
rap_status rap_model_shard_buffers(rap_model *m, rap_model_shard_bufs *out);
/* Sharded models: applies the dense optimizer to every MLP tensor with
 * `grads` (after the all-reduce), whatever grads holds: a rank with no
 * rows of a short global batch skips the MLP phases, zeroes grads, joins
 * the all-reduce and calls this too, so every rank's MLP stays the same.
 * Asynchronous on the GPU. RAP_ERR_ARG without a shard. */
rap_status rap_model_dense_apply(rap_model *m);
/* Sharded models: the loss divisor of the following mlp_forward (and its
 * mlp_backward): a short global batch of Bg' rows sets Bg' (and back).
 * Host-side (a CUDA graph keeps the divisor it captured). RAP_ERR_ARG
 * without a shard or for loss_rows outside 1..2^30. */
rap_status rap_model_set_loss_rows(rap_model *m, int64_t loss_rows);

/* Parameters and optimizer state, for checkpoints and tests. A sharded
 * model lists its local tables only (local table k is tensor k, named
 * after its global table, rows = the rows held), then the MLP tensors. */
int rap_model_n_tensors(const rap_model *m);
const rap_tensor_info *rap_model_tensor(const rap_model *m, int i);
/* Global table and first global row of tensor i (-1, 0 for MLP tensors
 * and for i out of range; t, 0 for table t of an unsharded model). Either
 * pointer may be NULL. */
void rap_model_tensor_origin(const rap_model *m, int i, int *table, int64_t *row0);
/* Copies tensor i (or its optimizer state, rap_model_state_shape floats)
 * to / from host memory as floats (rows*cols). A 16-bit table is widened
 * exactly by get and rounded to nearest even by set (exact for values of
 * the storage type, so get then set gives back the same bits). state_*
 * fail for SGD. */
rap_status rap_model_get(const rap_model *m, int i, float *host);
rap_status rap_model_set(rap_model *m, int i, const float *host);
rap_status rap_model_get_state(const rap_model *m, int i, float *host);
rap_status rap_model_set_state(rap_model *m, int i, const float *host);

/* Storage type of tensor i: c->emb_dtype for a table, RAP_EMB_FP32 for an
 * MLP tensor (and for i out of range). */
rap_emb_dtype rap_model_tensor_dtype(const rap_model *m, int i);
/* Shape of tensor i's optimizer state: (rows, cols) under Adagrad and for
 * the MLP tensors under row-wise Adagrad; (rows, 1) for a table under
 * row-wise Adagrad. RAP_ERR_ARG for SGD or a bad i. Either pointer may be
 * NULL. */
rap_status rap_model_state_shape(const rap_model *m, int i, int64_t *rows, int64_t *cols);
/* Rows [row0, row0 + n) of tensor i to / from host, n * cols elements of
 * type `as`: the tensor's storage type (its bits, copied as they are) or
 * RAP_EMB_FP32 (a 16-bit table widened exactly / rounded to nearest even).
 * For checkpoints of large tables: a part at a time, in the table's own
 * type. RAP_ERR_ARG for rows outside the tensor or another `as`. */
rap_status rap_model_get_rows(const rap_model *m, int i, int64_t row0, int64_t n,
                              rap_emb_dtype as, void *host);
rap_status rap_model_set_rows(rap_model *m, int i, int64_t row0, int64_t n, rap_emb_dtype as,
                              const void *host);
/* The same for the optimizer state: n * (state cols) floats. */
rap_status rap_model_get_state_rows(const rap_model *m, int i, int64_t row0, int64_t n,
                                    float *host);
rap_status rap_model_set_state_rows(rap_model *m, int i, int64_t row0, int64_t n,
                                    const float *host);
/* The embedding updates the model has applied (emb_backward calls, counted
 * from 0 at create): update k (1, 2, ...) keys its stochastic rounding
 * with step k (half.h). A checkpoint keeps it, so that a resumed run
 * rounds as the uninterrupted one (set it after loading the tables).
 * Synchronises on the GPU. */
rap_status rap_model_get_emb_step(const rap_model *m, uint64_t *step);
rap_status rap_model_set_emb_step(rap_model *m, uint64_t step);

/* Gradients of the last backward for tests (dense tensors only; for tables
 * the aggregated gradient of the touched rows is not kept). CPU only. */
rap_status rap_model_get_grad(const rap_model *m, int i, float *host);

#ifdef __cplusplus
}
#endif
#endif /* RAP_MODEL_H */
