/*
 * memplan.h -- the memory plan of a run, made before anything is
 * allocated: the bytes of every component (the model's tables, optimizer
 * state, MLP weights, gradients, activations and workspaces; the
 * preprocessing executors and the slots; the row feed's batches; the
 * runtime's pinned pools; the exchange buffers of ranks), each sized by
 * the size function its allocator uses, and a reserve for what CUDA and
 * the libraries allocate themselves. docs/MEMORY.md says what is counted
 * and why.
 *
 *   rap_memplan p;
 *   rap_memplan_make(&cfg, &p);           // sizes only: nothing allocated
 *   rap_memplan_measure_avail(&p);        // cudaMemGetInfo / MemAvailable
 *   if (rap_memplan_check(&p) != RAP_OK)  // refuses, naming the totals
 *       ... print the table (rap_memplan_format), stop
 *   ... create the model, the feed, the runtime
 *   rap_memplan_measure_used(&p, 0);      // GPU: the free memory's drop
 *
 * Two pools: the device (the GPU's memory; with the CPU backend there is
 * none) and the host (every host buffer, page-locked or not). Each is
 * checked against what is free with its reserve on top.
 */
#ifndef RAP_RUN_MEMPLAN_H
#define RAP_RUN_MEMPLAN_H

#include "model/model.h"
#include "rap.h"
#include "run/rowfeed.h"
#include "run/runtime.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_MEMPLAN_MAX 48
/* What CUDA and its libraries allocate on the device beyond rap's own
 * buffers after the check (cuBLASLt's handle and heuristics, kernel
 * modules loaded on first launch, CUDA graphs, NCCL's communicators):
 * the GPU's reserve. The host's: thread stacks, the libraries, small
 * tables and the reader's line buffers. */
#define RAP_MEMPLAN_GPU_RESERVE ((double)(1u << 30))
#define RAP_MEMPLAN_HOST_RESERVE ((double)(512u << 20))

enum { RAP_MEM_DEVICE = 0, RAP_MEM_HOST = 1 };

typedef struct {
    char what[40];      /* the component: "tables", "executor (slot)" */
    char detail[80];    /* how it is sized ("26 x bf16", "8 x 4096 rows") */
    int pool;           /* RAP_MEM_DEVICE or RAP_MEM_HOST */
    bool pinned;        /* host: page-locked */
    int count;          /* how many of them (1 for one) */
    double bytes;       /* all of them */
} rap_mem_item;

typedef struct {
    rap_device device;
    rap_mem_item item[RAP_MEMPLAN_MAX];
    int n;
    double total[2];    /* the items' bytes per pool */
    double reserve[2];  /* the reserve per pool (device: 0 on the CPU) */
    double avail[2];    /* free memory per pool when measured (-1: not) */
    double used[2];     /* device: the free memory's drop after set-up and
                         * after the first steps (-1: not measured) */
    const char *skipped; /* a component not sized here, and why (or NULL) */
} rap_memplan;

typedef struct {
    const rap_model_config *model;   /* as rap_model_create will get it (a rank's share) */
    rap_device device;
    /* the run's own executor and packing buffer (rap train's evaluation):
     * exec_plan NULL for none */
    const rap_plan *exec_plan;
    const rap_fusion *exec_fusion;
    int exec_threads;
    /* rap train's batches: the evaluation's reader batch of eval_rows rows
     * (0: none) and the step batch of B rows (page-locked on the GPU) with
     * its logits */
    int64_t eval_rows;
    bool step_batch;
    const rap_runtime_config *runtime; /* mode, slots, plan and fusion; NULL: none */
    const rap_rowfeed_config *feed;    /* NULL: no feed (mps, a shard) */
    int ranks;                         /* R: 0 or 1 without ranks */
    const rap_shard_map *map;          /* ranks: the sharding, for the hybrid step's
                                        * exchange buffers (rap_hybrid_bytes) of ... */
    int rank;                          /* ... this rank */
} rap_memplan_config;

/* Sizes every component of c into *out (avail and used -1). Nothing is
 * allocated but small host tables. Errors: a component's own (a model
 * config that fails its check, a plan the executor refuses, a missing
 * input file for the feed's reader). */
rap_status rap_memplan_make(const rap_memplan_config *c, rap_memplan *out);
/* Reads the free memory of p's pools: the GPU's (cudaMemGetInfo, the
 * current device) and the host's (/proc/meminfo MemAvailable). A pool
 * that cannot be read stays -1 (not checked). Can't fail. */
void rap_memplan_measure_avail(rap_memplan *p);
/* Checks each measured pool: total + reserve <= avail. RAP_ERR_NOMEM
 * naming the pool, its need (buffers and reserve), what is free and the
 * largest component; nothing else changes. */
rap_status rap_memplan_check(const rap_memplan *p);
/* GPU: the drop of free device memory since rap_memplan_measure_avail,
 * into used[k] (k 0: after set-up, 1: after the first steps). No-op on
 * the CPU or when avail was not measured. */
void rap_memplan_measure_used(rap_memplan *p, int k);
/* The table (one line per component, then each pool's total, reserve,
 * free memory and, when measured, the use) into buf (n bytes, always
 * terminated). */
void rap_memplan_format(const rap_memplan *p, char *buf, size_t n);
/* The same to f. */
void rap_memplan_print(const rap_memplan *p, FILE *f);
/* One line: "memory: GPU 12.3 GiB planned (+1.0 reserve), 11.9 used after
 * set-up, 12.1 after steps (plan/use 1.02); host ..." into buf. */
void rap_memplan_summary(const rap_memplan *p, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_MEMPLAN_H */
