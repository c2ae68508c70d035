/*
 * model_internal.h -- what model.c (common part) shares with the backends
 * src/model/cpu/ and src/model/gpu/.
 *
 * model.c owns: config defaults and checks, the tensor table (names,
 * shapes, offsets in one flat parameter array), weight initialisation, and
 * the argument checks of every rap_model_* call before it calls the
 * model's backend table (rap_model_backend below).
 *
 * Parameter layout: one flat index space holding every tensor of the
 * table in order: emb_l.0 .. emb_l.{T-1}, bot_l.*, top_l.*; tensor i at
 * element tensors[i].offset. The tables, elements [0, mlp_offset), are
 * stored in one block of the config's emb_dtype (table k at element
 * offset_k of it, rows D apart); the MLP tensors in one float array `mlp`
 * (tensor i at mlp + offset_i - mlp_offset). A sharded model (model.h,
 * hybrid parallel) holds its TL local tables instead of the T tables:
 * tensor k < TL is local table k (tensors[k].layer == k), named after its
 * global table. The backends size and run their embedding part with
 * rap_model_emb_* below (TE embedding tables over EB rows), the MLPs and
 * the interaction with the global T and the local batch B. Optimizer
 * state (fp32): Adagrad, the same layout as the weights (tables, then
 * mlp); row-wise Adagrad, one float per table row (table k at its first
 * row, offset_k / D) and the MLP layout. Tables can be huge (tens of GB),
 * so the backends initialise them in place with rap_init_table_value
 * (identical on host and device; rounded to nearest into a 16-bit type);
 * MLP tensors are initialised on the host by model.c (init_mlp) and copied.
 */
#ifndef RAP_MODEL_INTERNAL_H
#define RAP_MODEL_INTERNAL_H

#include "core/core.h"
#include "model/half.h"
#include "model/model.h"

#include <math.h>

#ifdef __CUDACC__
#define RAP_MODEL_HD __host__ __device__
#else
#define RAP_MODEL_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rap_tensor_info info;
    size_t offset;     /* in floats, within params */
    int layer;         /* MLP: layer index within its MLP; tables: t */
    int kind;          /* 0 table, 1 bottom weight, 2 bottom bias, 3 top weight, 4 top bias */
} rap_tensor;

struct rap_model {
    rap_model_config cfg;
    rap_device device;
    rap_tensor *tensors;       /* (n_tensors) */
    int n_tensors;
    size_t n_params;           /* floats in params */
    size_t n_mlp_params;       /* floats after the tables (MLP tensors) */
    size_t mlp_offset;         /* first MLP float in params */
    int top_in;                /* D + F(F-1)/2 */
    const struct rap_model_backend *be; /* the backend of device (below) */
    void *cpu;                 /* backend state (cpu/cpu_model.h) */
    void *gpu;                 /* backend state (gpu/gpu_model.h) */
    rap_model_shard shard;     /* the copy cfg.shard points at (sharded only) */
};

/* The embedding part of config c (c->shard may be NULL): TE tables ... */
static inline int rap_model_emb_tables(const rap_model_config *c)
{
    return c->shard ? c->shard->n_local : c->n_tables;
}
/* ... of these rows each (k < TE) ... */
static inline int64_t rap_model_emb_rows(const rap_model_config *c, int k)
{
    return c->shard ? c->shard->rows[k] : c->table_rows[k];
}
/* ... looked up over batches of at most EB rows. */
static inline int64_t rap_model_emb_batch(const rap_model_config *c)
{
    return c->shard ? c->shard->emb_batch : c->batch;
}

/* Value of element j of table t (R_t rows): uniform in +-sqrt(1/R_t) from a
 * counter-based hash of (seed, t, j), computed exactly the same on host and
 * device (integer hash, one int->float conversion, one multiply). */
static inline RAP_MODEL_HD float rap_init_table_value(uint64_t seed, int t, uint64_t j,
                                                       int64_t rows)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)t * 0xd1b54a32d192ed03ULL + j;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);    /* [0, 1), exact */
    float bound = (float)(1.0 / sqrt((double)rows)); /* correctly rounded on both */
    return (2.0f * u - 1.0f) * bound;
}

/* Element j of table t as stored in type dt (round to nearest even of
 * rap_init_table_value), as 16 bits; for RAP_EMB_FP32 use the float. */
static inline RAP_MODEL_HD uint16_t rap_init_table_value16(rap_emb_dtype dt, uint64_t seed, int t,
                                                           uint64_t j, int64_t rows)
{
    const float v = rap_init_table_value(seed, t, j, rows);
    return dt == RAP_EMB_FP16 ? rap_f32_to_fp16_rn(v) : rap_f32_to_bf16_rn(v);
}

/* Elements of the tables held, and their rows (all TE). */
static inline uint64_t rap_model_table_elems(const rap_model_config *c)
{
    uint64_t n = 0;
    for (int k = 0; k < rap_model_emb_tables(c); k++)
        n += (uint64_t)rap_model_emb_rows(c, k) * (uint64_t)c->emb_dim;
    return n;
}
static inline uint64_t rap_model_table_rows(const rap_model_config *c)
{
    uint64_t n = 0;
    for (int k = 0; k < rap_model_emb_tables(c); k++)
        n += (uint64_t)rap_model_emb_rows(c, k);
    return n;
}
/* Floats of optimizer state of the tables: per element (Adagrad), per row
 * (row-wise), none (SGD). */
static inline uint64_t rap_model_table_state_floats(const rap_model_config *c)
{
    return c->optimizer == RAP_ADAGRAD           ? rap_model_table_elems(c)
           : c->optimizer == RAP_ROWWISE_ADAGRAD ? rap_model_table_rows(c)
                                                 : 0;
}
/* Whether the MLPs keep Adagrad state (Adagrad and row-wise Adagrad). */
static inline bool rap_model_mlp_adagrad(const rap_model_config *c)
{
    return c->optimizer == RAP_ADAGRAD || c->optimizer == RAP_ROWWISE_ADAGRAD;
}

/* Initialises the MLP part (params[mlp_offset ..]) on the host: Linear
 * weights normal(0, sqrt(2/(in+out))), biases normal(0, sqrt(1/out)), from
 * the seed. mlp: (n_mlp_params) floats. */
void rap_model_init_mlp(const rap_model *m, float *mlp);

/* A backend: one const table of functions per device, filled once in its
 * own file (cpu/cpu_model.c, gpu/gpu_model.cu), chosen by
 * rap_model_create and kept in m->be. model.c checks every argument (the
 * model, the batch's rows, the tensor index and host pointer, that state
 * exists, that the model is sharded for the sharded-only entries) before
 * it calls an entry; an entry returns a status and records one message. */
typedef struct rap_model_backend {
    /* Bytes create would allocate for config c (checked), by part into
     * *parts when not NULL (parts->total their sum); 0 if unknown. */
    size_t (*bytes)(const rap_model_config *c, rap_model_mem *parts);
    /* Allocates the backend state (m->cpu or m->gpu) for m->cfg and
     * m->tensors, tables initialised in place, MLPs from mlp_init
     * (n_mlp_params floats). On failure the state is freed again. */
    rap_status (*create)(rap_model *m, const float *mlp_init);
    /* Frees the state create made (called only when there is one). */
    void (*free)(rap_model *m);
    /* The four phases of a step (model.h), in order, on one batch. */
    rap_status (*emb_forward)(rap_model *m, const rap_model_batch *b);
    rap_status (*mlp_forward)(rap_model *m, const rap_model_batch *b);
    rap_status (*mlp_backward)(rap_model *m, const rap_model_batch *b);
    rap_status (*emb_backward)(rap_model *m, const rap_model_batch *b);
    /* Logits of b's rows into logits (host, b->rows floats). */
    rap_status (*predict)(rap_model *m, const rap_model_batch *b, float *logits);
    rap_status (*last_loss)(rap_model *m, double *loss);
    rap_status (*sync)(rap_model *m);
    /* Tensor i's weights (state: its optimizer state) to / from host as
     * floats: model.c calls them for fp32 storage only (the state, the
     * MLP tensors, fp32 tables) and converts a 16-bit table through
     * read_rows / write_rows. */
    rap_status (*get)(const rap_model *m, int i, float *host, bool state);
    rap_status (*set)(rap_model *m, int i, const float *host, bool state);
    /* Rows [row0, row0 + n) of tensor i (or its state) to / from host,
     * raw: in the storage type (model.c checks the range). */
    rap_status (*read_rows)(const rap_model *m, int i, int64_t row0, int64_t n, void *host,
                            bool state);
    rap_status (*write_rows)(rap_model *m, int i, int64_t row0, int64_t n, const void *host,
                             bool state);
    /* The embedding update counter (rap_model_get_emb_step). */
    rap_status (*get_emb_step)(const rap_model *m, uint64_t *step);
    rap_status (*set_emb_step)(rap_model *m, uint64_t step);
    /* MLP tensor i's gradient of the last mlp_backward; NULL when the
     * backend keeps none that rap_model_get_grad may read. */
    rap_status (*get_grad)(const rap_model *m, int i, float *host);
    /* Sharded models only: */
    rap_status (*dense_apply)(rap_model *m);
    void (*shard_buffers)(rap_model *m, rap_model_shard_bufs *out);
    /* The (B) logits buffer the forward writes (rap_model_last_logits). */
    const float *(*last_logits)(const rap_model *m);
} rap_model_backend;

/* The CPU backend (cpu/cpu_model.c). Can't fail. */
const rap_model_backend *rap_model_backend_cpu(void);
/* The GPU backend (gpu/gpu_model.cu); NULL when rap was built without
 * CUDA. Its entries assume a usable GPU (rap_model_create checks). */
const rap_model_backend *rap_model_backend_gpu(void);

#ifdef __cplusplus
}
#endif
#endif /* RAP_MODEL_INTERNAL_H */
