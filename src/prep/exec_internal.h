/*
 * exec_internal.h -- the preprocessing executor's state, shared by its CPU
 * side and compile step (exec.c) and its GPU side (exec_gpu.cu).
 * docs/EXECUTOR.md describes the buffers, descriptor tables and offset
 * modes; rap.h ("executor") is the public API.
 *
 * Shape letters as in rap.h, plus: ND descriptors of one kernel, NDC the
 * largest ND among the kernels whose offsets are computed, NDESC the
 * descriptors of all kernels.
 *
 * Everything a run touches lives in one allocation, the arena (host memory
 * on the CPU, device memory on the GPU), laid out by (plan, fusion, B) at
 * create time; the pointers below point into it. Nothing is allocated by
 * load, run, column or label.
 */
#ifndef RAP_EXEC_INTERNAL_H
#define RAP_EXEC_INTERNAL_H

#include "core/core.h"
#include "prep/ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The data view of one plan node: where its output column lives. Raw input
 * nodes point into the input block; live op nodes at their own buffers
 * (offsets and valid arrays may be shared, see EXECUTOR.md). Nodes that are
 * not live have no view (all NULL). */
typedef struct {
    bool has_view;
    int input;            /* plan node it reads; -1 for raw inputs */
    rap_kind kind;
    int width;            /* W for vectors, else 1 */
    float *val;           /* dense (B) | vector (B, W) */
    int64_t *off;         /* sparse (B+1): own (COMPUTED), the input's (SAME) or the arange */
    int64_t *ids;         /* sparse (B * ids_cap) */
    uint8_t *valid;       /* (B), or NULL when no row can be null */
    int64_t ids_cap;      /* sparse: ids per row that ids holds */
    bool bounded;         /* sparse: ids in [lo, hi] (rap_node's facts) */
    int64_t lo, hi;
} rap_prep_node;

/* One kernel of the fusion: its descriptors are descs[first .. first+n). */
typedef struct {
    rap_op_type op;
    int variant;
    int level;
    bool computed;        /* offsets computed: len phase, prefix sum, write phase */
    bool identity;        /* every desc an identity (rap_node_is_identity): its output
                           * is its input's buffers, nothing is launched */
    int n;                /* ND */
    int first;            /* index of its first descriptor in the tables */
    int n_groups;         /* row kernel (ops/op.h "Row kernels"): its groups; else 0 */
    int head0;            /* row kernel: index of its first group's entry in heads */
} rap_prep_kernel;

struct rap_prep {
    rap_device device;
    rap_schema schema;
    int64_t B;               /* max_rows */
    int64_t rows;            /* rows of the loaded batch (0 before the first load) */
    int64_t first_row;       /* the loaded batch's first_row */
    int64_t launches;        /* kernel launches (GPU) / kernel calls (CPU) */
    uint32_t generation;     /* bumped by every load */
    bool rows_each;          /* RAP_PREP_ROWS=each: the executor before 2026-12-04 (A/B) */

    /* the plan, compiled */
    int n_nodes;
    rap_prep_node *nodes;    /* (n_nodes) host array of views */
    int n_cols;
    int *col_node;           /* (n_cols) node of each output column */
    int n_kernels;
    rap_prep_kernel *kernels; /* (n_kernels) */
    int n_descs;             /* NDESC */
    rap_desc *descs;         /* (NDESC) host table; on the GPU it holds device pointers */
    rap_desc *descs_dev;     /* GPU: (NDESC) the same table in the arena; CPU: == descs */
    int *desc_node;          /* (NDESC) plan node of each descriptor */
    uint32_t *ready;         /* (NDESC) generation whose offsets a COMPUTED desc holds */
    int n_heads;             /* NH: sum over row kernels of n_groups + 1 */
    int32_t *heads;          /* (NH) host: each row kernel's group starts, relative to its
                              * first desc, then its n */
    int32_t *heads_dev;      /* GPU: (NH) the same in the arena; CPU: == heads */
    int ndc;                 /* NDC */

    /* the arena and what lies in it */
    char *arena;             /* one allocation: host (CPU) or device (GPU) */
    size_t arena_bytes;
    rap_batch in;            /* view of the input block (rap_batch_bytes(schema, B)) */
    int64_t *arange;         /* (B+1) 0,1,..,B; NULL when no node uses it */
    int64_t *len;            /* (NDC, B+1) len-phase scratch, desc j at j*(B+1) */
    int64_t *sums;           /* GPU: (NDC, B+1) prefix sums of len; CPU: NULL */
    void *scan_tmp;          /* GPU: CUB scan temporary storage */
    size_t scan_tmp_bytes;
    void *aux;               /* bucketize borders / mapid maps, as op.h wants them */

    /* CPU */
    rap_pool *pool;
    /* GPU */
    void *stream;            /* cudaStream_t the executor runs on */
    bool own_stream;         /* created by the executor (cfg->stream was NULL) */
};

/* ---- exec_gpu.cu: the GPU side. Without CUDA each returns RAP_ERR_NO_GPU
 * with rap_gpu_available()'s reason (free functions do nothing). */

/* Free and total bytes of the current GPU. */
rap_status rap_prep_gpu_meminfo(size_t *free_b, size_t *total_b);
/* Bytes of CUB temporary storage for an exclusive sum over n int64s. */
rap_status rap_prep_gpu_scan_bytes(int64_t n, size_t *bytes);
/* Creates the stream (when cfg_stream is NULL) and allocates the arena
 * (p->arena_bytes), zeroed. On failure p holds what was made, for free. */
rap_status rap_prep_gpu_alloc(rap_prep *p, void *cfg_stream);
/* Copies n host bytes to the device on the executor's stream and waits
 * (create time only). */
rap_status rap_prep_gpu_upload(rap_prep *p, void *dst_dev, const void *src, size_t n);
/* Fills a[0..n) with 0..n-1 on the executor's stream and waits (create
 * time; not counted as a launch). */
rap_status rap_prep_gpu_fill_arange(rap_prep *p, int64_t *a, int64_t n);
/* Releases the arena and an owned stream (after synchronising). */
void rap_prep_gpu_free(rap_prep *p);
/* Copies host batch b into the input block, asynchronously on the stream. */
rap_status rap_prep_gpu_load(rap_prep *p, const rap_batch *b);
/* Runs descs [d0, d1) of kernel k over rows [r0, r1) (r1 already clipped
 * to the loaded rows) on stream (NULL: the executor's); len: first the
 * COMPUTED kernel's len phase over all loaded rows and its offsets. */
rap_status rap_prep_gpu_run_kernel(rap_prep *p, int k, int d0, int d1, int64_t r0, int64_t r1,
                                   bool len, void *stream);
/* Runs groups [g0, g1) of row kernel k over rows [r0, r1) (one launch). */
rap_status rap_prep_gpu_run_rows(rap_prep *p, int k, int g0, int g1, int64_t r0, int64_t r1,
                                 void *stream);
rap_status rap_prep_gpu_sync(const rap_prep *p);
/* Copies n bytes from device to host after all work queued on the
 * executor's stream; returns when the copy is done. */
rap_status rap_prep_gpu_download(const rap_prep *p, void *dst, const void *src_dev, size_t n);

/* ---- exec.c: helpers for the benchmark and tests. */

/* Bytes kernel k must read and write for the loaded batch, summed over its
 * descs: input column (dense values and valid; sparse ids, plus per-row
 * offsets and valid unless the op keeps the lists, SAME) + output column
 * (values or ids, plus offsets when computed; valid is shared, never
 * written). Scratch traffic of the prefix sum is not counted. Reads the
 * list ends from the executor's buffers (small copies on the GPU). */
rap_status rap_prep_kernel_bytes(const rap_prep *p, int k, int64_t *bytes);
/* The first desc of the unit holding desc d of kernel k: d itself, or for
 * a row kernel its group's first desc (d == the kernel's ND: ND). Pieces
 * of a row kernel start and end at units. */
int rap_prep_unit_start(const rap_prep *p, int k, int d);
/* Number of descriptors (fused ops) of kernel k; 0 when k is out of range. */
int rap_prep_n_descs(const rap_prep *p, int k);

#ifdef __cplusplus
}
#endif
#endif /* RAP_EXEC_INTERNAL_H */
