/*
 * gpu_model.h -- the GPU backend of the DLRM model (model_internal.h's
 * rap_model_backend_gpu) and what its .cu files share.
 *
 * Files, one concern each:
 *   gpu_model.cu    create/free, memory plan, the four phases, get/set
 *   embedding.cu    embedding-bag forward (all tables, one launch) and the
 *                   sort-based backward with the optimizer fused in
 *   mlp.cu          cuBLASLt MLP layers (fused bias/ReLU epilogues, or
 *                   plain GEMMs + own kernels, whichever the create-time
 *                   tuning measured faster)
 *   mlp_tune.cu     the GEMMs' algorithms: cuBLASLt heuristics and listed
 *                   configurations, timing, the process's tune cache
 *   mlp_kernels.cu  the own kernels: bias/ReLU, ReLU backward with the bias
 *                   gradient, column sums, the logit layer
 *   interaction.cu  dot interaction forward and backward: v1, the choice
 *                   of kernel generation
 *   interaction_v2.cu  the v2 and v3 interaction kernels and launchers
 *   interaction_v4.cu  the v4 interaction: tensor cores (a bf16 model with a bf16 z)
 *   loss.cu         BCE loss, dense optimizer, init/fill/convert kernels
 * and, shared with the CPU reference: half.h (16-bit table types,
 * stochastic rounding) and emb_math.h (the row update's arithmetic).
 *
 * Letters: B batch rows (cfg.batch), T tables, D embedding dim, F = T + 1
 * interaction vectors, ND dense width, TE tables held and EB rows of the
 * embedding phases (T and B; a sharded model: its TL local tables and the
 * global batch Bg), P pair capacity of the embedding backward (EB * TE *
 * bag, bag = cfg.max_bag or RAP_GPU_IDS_PER_BAG), C = ceil(P / 32) sorted
 * chunks.
 *
 * Buffers (all allocated at create, for B rows):
 *   z     (B, F, D) ztype: slot 0 = x (bottom MLP output, written by the last
 *         bottom GEMM with ld F*D), slots 1..T = pooled embeddings
 *   de    (B, T, D) detype: gradient of the pooled embeddings
 *   tin   (B, ld_in) act: interaction output = top MLP input
 *   dtin  (B, ld_in) act: its gradient
 *   pp[2] (B, maxw) act: ping-pong gradients of layer pre-activations
 *   emb_out, demb_out (EB, TE, D) fp32, sharded models only: the pooled
 *         sums of the local tables and their gradient (model.h); emb is
 *         z + D (ld F*D) and demb is de (ld T*D)
 *   grads, wc: MLP gradients (fp32) and the act-type compute copy of the
 *         MLP weights that the GEMMs read, in the padded layout of segs
 *         (rows 16-byte aligned); the dense optimizer updates the fp32
 *         master weights in params and rewrites wc in the same pass
 * act = float (RAP_FP32) or bf16 (RAP_BF16). ztype = bf16 when zbf (bf16
 * and unsharded, an interaction that reads bf16 z: docs/PERF.md "The bf16
 * model's interaction input"), else fp32: the lookups sum in fp32 and
 * round once. detype = bf16 when debf (zbf and RAP_GPU_ZBF=de: the
 * interaction's backward rounds de once, the update widens it), else fp32. *
 * CUDA graphs: the phases capture the batch's device pointers (dense,
 * label, off, ids) by value: replay with the same batch buffers, refilled.
 * A batch with a different row count must be run once outside the capture
 * first (the GEMM layouts are resized on the host).
 *
 * Test hooks below: rap_gpu_model_get_grad, rap_gpu_model_pooled,
 * rap_gpu_model_emb_backward_from.
 */
#ifndef RAP_GPU_MODEL_H
#define RAP_GPU_MODEL_H

#include "model/model_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capacity of the embedding backward: on average at most this many ids per
 * bag over a batch of EB rows (total ids of a batch <= EB * TE * this). A batch
 * with more ids is reported by rap_model_sync / rap_model_last_loss
 * (RAP_ERR_ARG) and only the first P ids update the tables. */
#define RAP_GPU_IDS_PER_BAG 1

/* Test hook: copies the gradient of MLP tensor i (kind 1..4) from the last
 * mlp_backward to host (rows*cols floats). Synchronises. RAP_ERR_ARG for a
 * table, RAP_ERR_NO_GPU when built without CUDA. */
rap_status rap_gpu_model_get_grad(const rap_model *m, int i, float *host);

/* Test hook: the pooled embeddings (rows, T, D) of the last emb_forward of
 * an unsharded model (z slots 1..T) to host, as floats (bf16 ones widened
 * exactly). *is_bf16 (may be NULL): whether the model keeps them in bf16
 * (zbf). Synchronises. */
rap_status rap_gpu_model_pooled(const rap_model *m, int64_t rows, float *host, bool *is_bf16);
/* Test hook: the embedding backward of batch b (device pointers) with the
 * gradient of the pooled embeddings demb (rows, T, D) on the device (fp32,
 * or bf16 when demb_bf16), instead of the one from mlp_backward (unsharded
 * models). Asynchronous. */
rap_status rap_gpu_model_emb_backward_from(rap_model *m, const rap_model_batch *b,
                                           const void *demb, bool demb_bf16);

/* Test hook: how many tuning decisions models took from the process's
 * tune cache (mlp_tune.cu) so far; 0 without CUDA. */
long long rap_gpu_tune_cache_hits(void);

/* Test hook (interaction.cu): the interaction kernels of version ver (1:
 * staged in shared memory, 2: Z in registers, 3: v2 with the next rows'
 * Z prefetched, 4: tensor cores; RAP_ERR_ARG where 2 to 4 do not apply)
 * on host data, in bf16 (act values rounded to nearest) or fp32 (a TF32
 * model's: version 4 is the TF32 tensor cores, D % 32 == 0); zmode (bf16,
 * versions 2 to 4 only; 4 in bf16 needs 1 or 2): 1 z in bf16 too (rounded
 * to nearest on the way in), 2 z and de in bf16.
 * z (rows, F, D); dy (rows, ld) with ld = D + F(F-1)/2 rounded up to 8
 * (the x part, then the pairs); out (rows, ld) the forward (the padding
 * columns as the kernel leaves them: 0 in v2 and v3, NaN in v1), dx (rows, D)
 * the gradient of the bottom MLP's pre-activation ((dZ_0 + dy's x part)
 * times (x > 0)), de (rows, F-1, D). Outputs start as NaN on the device.
 * Synchronises; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_gpu_interact_test(int F, int D, int64_t rows, bool bf16, int zmode, int ver,
                                 const float *z, const float *dy, float *out, float *dx,
                                 float *de);

/* Test hook (mlp_kernels.cu): one of the MLP's own kernels on host data
 * (values rounded to bf16 first when bf16), the v1 (ver 1) or v2 (ver 2)
 * generation (or v3, ver 3), a layer of cols columns with a ReLU:
 *   op 0  y (rows, ld) = relu(y + b), and when cols % 32 == 0 the own
 *         bitmask into mask (rows, mask_ld words, mask_ld = cols rounded up
 *         to 128, over 32)
 *   op 1  da (rows, cols) zeroed where y (rows, ld) <= 0; db = its column sums
 *   op 2  the same from the own bitmask in mask (cols % 32 == 0)
 *   op 3  db = the column sums of da
 * Synchronises; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_gpu_mlp_kernel_test(int op, bool bf16, int ver, int64_t rows, int cols,
                                   int64_t ld, float *y, const float *b, uint32_t *mask,
                                   float *da, float *db);

#ifdef __cplusplus
}
#endif

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda_util.h"

#define RAP_GPU_CHUNK 32           /* sorted pairs per warp in the emb update */
#define RAP_GPU_WS_BYTES (32u << 20) /* cuBLASLt workspace */
/* device error flags (g->err), reported and cleared by sync / last_loss */
#define RAP_GPU_ERR_ID 1u        /* an id outside [0, R_t): ignored */
#define RAP_GPU_ERR_OVERFLOW 2u  /* more ids than the pair capacity P */

#define RAP_CUBLAS_TRY(call)                                                           \
    do {                                                                               \
        cublasStatus_t rap_cb_s_ = (call);                                             \
        if (rap_cb_s_ != CUBLAS_STATUS_SUCCESS)                                        \
            return rap_fail(RAP_ERR_CUDA, "%s:%d: %s: cuBLAS status %d", __FILE__,     \
                            __LINE__, #call, (int)rap_cb_s_);                          \
    } while (0)

/* The padded layout of the MLP gradients and of the compute copy of the
 * MLP weights: tensor k (in params order) is elements [src[k], src[k+1])
 * of the flat MLP array, (rows, cols) row-major; in the padded arrays it
 * starts at dst[k] (256-byte aligned) with rows ld[k] elements apart
 * (cols rounded up to 8: 16-byte aligned GEMM columns even for widths
 * like 13 or 506). A bias is one row. */
#define RAP_GPU_MAX_SEG (4 * RAP_MAX_LAYERS)
typedef struct {
    int n;
    int64_t src[RAP_GPU_MAX_SEG + 1];
    int64_t dst[RAP_GPU_MAX_SEG];
    int32_t cols[RAP_GPU_MAX_SEG], ld[RAP_GPU_MAX_SEG];
    int64_t n_pad; /* elements of a padded array */
} rap_gpu_segs;

/* One cuBLASLt matmul D = op(A) op(B) (+ epilogue), column-major, with the
 * batch rows n as the column count of B and of A (n_in_a) or D (n_in_d). */
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d; /* d is also C (beta = 0) */
    cublasLtMatmulAlgo_t algo;
    bool n_in_a, n_in_d;
    int64_t rows;        /* n the layouts and algo are set for */
    const void *pa, *pb; /* operands */
    void *pd;
    bool ready;
} rap_gpu_gemm;

/* One Linear layer y = [relu](x w^T + b); row-major (n, ld) activations. */
typedef struct {
    int in, out;
    int64_t ldw;        /* padded row length of the weight copies, >= in */
    int64_t kg;         /* the GEMMs' inner width: ldw when x, dx and the
                         * weights all have that padded room (zero there),
                         * else in: 16-byte aligned K for widths like 13, 506 */
    bool gemv;          /* out == 1 (the logit layer): own kernels, no GEMMs */
    bool relu;          /* ReLU after the layer */
    bool want_aux;      /* keep a ReLU bitmask for the next layer's backward */
    int64_t ldx, ldy;   /* leading dims (elements) of x and y */
    const void *x;      /* (B, ldx) act */
    void *y;            /* (B, ldy) act, or fp32 (ytype) */
    cudaDataType ytype;
    float *w, *b;       /* (out, in), (out): in params */
    float *dw, *db;     /* same shapes (dw rows ldw apart), in grads */
    void *wc, *bc;      /* act-type compute copies (wc rows ldw apart) */
    void *aux;          /* relu bitmask, aux_ld bits per row, or NULL */
    int64_t aux_ld;
    /* what the GEMMs fuse (decided at create by the heuristics) */
    bool fwd_bias;      /* bias (+relu) in the forward epilogue */
    bool fwd_aux;       /* ... and the bitmask in aux */
    bool bw_bgrad;      /* db from the dW GEMM's BGRADB epilogue */
    bool bx_drelu;      /* dX GEMM applies the previous layer's dReLU */
    bool bx_bgrad;      /* ... and writes its bias gradient (DRELU_BGRAD) */
    bool db_by_next;    /* db written by the layer above's dX step (v2), not
                         * by this layer's dW step */
    bool need_dx;
    void *dx;           /* (B, lddx) act: dX (or dA of the previous layer) */
    int64_t lddx;
    void *da;           /* (B, out) act: gradient of this layer's pre-activation */
    rap_gpu_gemm fwd, bw, bx;
} rap_gpu_layer;

typedef struct rap_gpu {
    int dev, sms;
    size_t smem_optin;
    cudaStream_t stream;
    bool own_stream;
    cublasLtHandle_t lt;
    cublasComputeType_t compute;
    bool bf16;
    bool tf32;        /* fp32 with TF32 math (not strict fp32): the interaction may
                       * use TF32 tensor cores (interaction_v4_tf32.cu) */
    cudaDataType act; /* CUDA_R_32F or CUDA_R_16BF */
    bool zbf;         /* z in bf16 (see Buffers above), else fp32 */
    bool debf;        /* de in bf16 (only with zbf), else fp32 */
    size_t zes, des;  /* bytes per z element, per de element: 2 or 4 */
    int mlp_ver;      /* 1: the first epilogue choices and kernels (RAP_GPU_MLP=v1);
                       * 2: ReLU backward and bias gradient in one step (mlp.cu)
                       * (RAP_GPU_MLP=v2); 3: v2 with the passes of
                       * mlp_kernels.cu's v3 and the choices of mlp.cu's v3 */
    bool lt_mask_ok;  /* cuBLASLt's DRELU reads the own bitmask (create-time probe) */
    bool lt_bgrad_ok; /* its DRELU_BGRAD sums the masked output (same probe) */
    bool lt_fwdmask_ok; /* its RELU_AUX_BIAS writes the own bitmask's layout (v3 probe) */
    int lt_probe;     /* the probe ran: 1 DRELU_BGRAD, 2 DRELU, 4 RELU_AUX_BIAS (bits) */
    size_t es;        /* bytes per act element */

    int64_t B, P, nchunks, ld_in, maxw;
    int64_t bag;        /* ids per bag the backward holds (cfg.max_bag, at least 1) */
    int T, D, F, ND, top_in;
    int TE;             /* tables held: T, or a shard's TL (may be 0) */
    int64_t EB;         /* rows of the embedding phases: B, or a shard's Bg */
    bool direct;        /* sharded, but every table whole over its own batch (one
                         * rank): the embedding phases work in place as unsharded */
    bool sharded;
    uint64_t total_rows;
    int key_bits;
    uint32_t sentinel;
    size_t n_params, n_mlp;

    /* weights and optimizer (blk_params: tables then mlp; blk_state: tab_state
     * then mlp_state) */
    rap_emb_dtype dt; /* storage of the tables */
    size_t tes;       /* bytes per table element */
    void *tab;        /* (total_rows, D) of dt: table k's row r is row row_base[k] + r */
    float *tab_state; /* Adagrad (total_rows, D); row-wise (total_rows); SGD NULL */
    float *mlp;       /* (n_mlp) MLP weights, flat MLP layout */
    float *mlp_state; /* (n_mlp) their Adagrad accumulators (Adagrad, row-wise), else NULL */
    float *grads;   /* (segs.n_pad) MLP gradients, padded layout segs */
    void *wc;       /* (segs.n_pad) act copy of the MLP weights, layout segs */
    rap_gpu_segs segs;
    int64_t *row_base; /* (TE) first row of table k in the tables' row space */
    int64_t *nrows;    /* (TE) rows of table k */
    int32_t *gtable;   /* (TE) global table of table k (stochastic rounding keys) */
    int64_t *grow_off; /* (TE) global row of table k's row r is row_base[k] + r + grow_off[k] */
    uint64_t *emb_step; /* (1) emb_backward calls so far; the count kernel adds one */

    /* activations */
    void *z, *de;   /* ztype, detype (Buffers above) */
    float *emb_out, *demb_out; /* sharded, TE > 0: (EB, TE, D) each; else NULL */
    void *xin, *tin, *dtin, *pp[2];
    float *logits;  /* (B) */
    float *loss;    /* (1) mean loss of the last forward */
    unsigned *err;  /* (1) RAP_GPU_ERR_* */
    float *colsum;  /* (256, max(maxw, ld_in) + maxw) column-sum partials (the
                     * logit layer: dw's, then the bias gradient's below) */
    void *ws;       /* cuBLASLt workspace */

    int n_bot, n_top;
    rap_gpu_layer bot[RAP_MAX_LAYERS], top[RAP_MAX_LAYERS];

    /* embedding backward */
    uint32_t *keys[2], *vals[2]; /* (P) pairs: in and sorted */
    int64_t *start;              /* (TE+1) first pair slot of table k */
    float *head, *tail;          /* (C, D) partial row sums */
    void *sort_tmp;
    size_t sort_bytes;

    /* interaction launch shape */
    int ifwd_warps, ibwd_warps;
    size_t ifwd_smem, ibwd_smem; /* bytes per warp */
    unsigned ifwd_grid, ibwd_grid; /* most blocks per launch */
    bool ia_pipe, ia_pipe_bwd;     /* v1: the pipelined kernels */
    int ia_ver;                    /* 1: rows staged in shared memory; 2: Z in registers;
                                    * 3: v2 with the next rows' Z prefetched; 4: tensor
                                    * cores (bf16 z) */
    int ia_fmax, ia_lanes;         /* v2/v3 instance: vectors held (>= F), lanes a row */
    unsigned ia2_fgrid, ia2_bgrid; /* v2 to v4: most blocks per launch (a full wave) */
    size_t ia3_fsmem, ia3_bsmem;   /* v3, v4: dynamic shared bytes a block */

    int64_t cur_rows; /* rows the GEMMs are set for */
    float *h_loss;    /* pinned (1) */
    unsigned *h_err;  /* pinned (1) */
    void *blk_params, *blk_state, *blk_arena;
    size_t arena_bytes;
    size_t arena_part[RAP_MM_N]; /* the arena's bytes by part (model.h), from plan() */
} rap_gpu;

/* embedding.cu */
rap_status rap_gpu_emb_sort_bytes(int64_t P, int bits, size_t *bytes);
/* Pooled sums of tables [first, first+n) (of the TE held) into out +
 * row*out_ld + (slot0 + t)*D (elements), rows of the batch: fp32, or bf16
 * when out_bf16 (summed in fp32, rounded to nearest even once). One launch
 * per 256 tables. */
rap_status rap_gpu_emb_forward(rap_gpu *g, const rap_model_batch *b, int first, int n,
                               void *out, bool out_bf16, int64_t out_ld, int slot0);
/* Sorts (row, id) pairs of all TE tables and applies the optimizer to
 * each touched row with the summed gradient rows grad + row*grad_ld +
 * (slot0 + t)*D (elements: fp32, or bf16 when grad_bf16, widened
 * exactly). */
rap_status rap_gpu_emb_backward(rap_gpu *g, const rap_model_batch *b, const void *grad,
                                bool grad_bf16, int64_t grad_ld, int slot0,
                                const rap_model_config *c);

/* mlp.cu */
rap_status rap_gpu_mlp_setup(rap_gpu *g);
rap_status rap_gpu_mlp_set_rows(rap_gpu *g, int64_t rows);
rap_status rap_gpu_mlp_forward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows);
/* Backward from L[n-1].da (filled by the caller); db, dw for every layer,
 * dX of layer 0 only when L[0].need_dx. */
rap_status rap_gpu_mlp_backward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows);
void rap_gpu_mlp_destroy(rap_gpu *g);

/* mlp_kernels.cu: what a plain GEMM leaves to do, and the logit layer.
 * All on g->stream; the 16-byte kernels when g->mlp_ver >= 2 and the
 * widths and pointers allow (v3's when g->mlp_ver >= 3), else the scalar
 * ones. */
/* l->y = [relu](l->y + l->b), rows rows; mask: the own bitmask (or NULL). */
rap_status rap_gpu_bias_act(rap_gpu *g, const rap_gpu_layer *l, int64_t rows, uint32_t *mask);
/* db = the column sums of da (rows, cols), fixed order. */
rap_status rap_gpu_colsum(rap_gpu *g, const void *da, int64_t rows, int cols, float *db);
/* v1: prev->da zeroed where prev's ReLU was off (own bitmask when own,
 * else prev->y <= 0). */
rap_status rap_gpu_drelu(rap_gpu *g, const rap_gpu_layer *prev, int64_t rows, bool own);
/* v2, one pass over prev->da: mode 1 masks it by prev->y > 0, mode 2 by
 * the own bitmask, mode 0 leaves it; prev->db = its column sums. */
rap_status rap_gpu_drelu_colsum(rap_gpu *g, const rap_gpu_layer *prev, int64_t rows, int mode);
/* The logit layer: y (rows) fp32 = x w + b; backward dw, db and, with
 * need_dx, dx masked by prev's ReLU (and prev_db = its column sums when
 * not NULL). */
rap_status rap_gpu_gemv_forward(rap_gpu *g, const rap_gpu_layer *l, int64_t rows);
rap_status rap_gpu_gemv_backward(rap_gpu *g, const rap_gpu_layer *l, const rap_gpu_layer *prev,
                                 int64_t rows, float *prev_db);

/* interaction.cu */
/* Whether the interaction chosen for g's shape (and RAP_GPU_INTERACT)
 * reads a bf16 z: v2 or v3 apply (no CUDA calls; g shaped). */
bool rap_gpu_interact_takes_bf16_z(const rap_gpu *g);
rap_status rap_gpu_interact_setup(rap_gpu *g);
rap_status rap_gpu_interact_forward(rap_gpu *g, int64_t rows);
rap_status rap_gpu_interact_backward(rap_gpu *g, int64_t rows);

/* loss.cu */
/* Loss of the rows (sum / div, on the device) and dlogit = (sigmoid - y)
 * / div: div = rows (the mean) unless sharded (loss_rows). */
rap_status rap_gpu_loss(rap_gpu *g, const float *label, int64_t rows, int64_t div);
rap_status rap_gpu_dense_in(rap_gpu *g, const float *dense, int64_t rows);
rap_status rap_gpu_dense_update(rap_gpu *g, const rap_model *m);
rap_status rap_gpu_fill(rap_gpu *g, float *p, size_t n, float v);
/* p (held, D) of type g->dt = rows [row0, row0 + held) of table t (rows
 * R_t) as rap_init_table_value makes them (rounded to nearest into 16
 * bits). */
rap_status rap_gpu_init_table(rap_gpu *g, void *p, uint64_t seed, int t, int64_t rows, int D,
                              int64_t row0, int64_t held);
/* wc = act(MLP params), all tensors (after create and set). */
rap_status rap_gpu_refresh_copy(rap_gpu *g, const rap_model *m);

/* gpu_model.cu: host data of the kernel test hooks (interaction.cu,
 * mlp_kernels.cu), synchronous. put: n host floats of src to device dst as
 * act values (bf16: rounded to nearest even, a NaN as 0x7fc0); get: n act
 * values of device src to host floats (bf16 exact). stage: host scratch of
 * n * 2 bytes, used with bf16 only. RAP_ERR_CUDA. */
rap_status rap_gpu_test_put(void *dst, const float *src, size_t n, bool bf16, void *stage);
rap_status rap_gpu_test_get(float *dst, const void *src, size_t n, bool bf16, void *stage);

static inline unsigned rap_gpu_blocks(int64_t n, int threads, int cap)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}
#endif /* RAP_HAVE_CUDA && __CUDACC__ */

#endif /* RAP_GPU_MODEL_H */
