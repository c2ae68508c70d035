/*
 * pipeline.h -- the one builder of a run's pipeline: what `rap train` and
 * `rap bench` run, made from one config in one place (docs/RUNTIME.md "The
 * pipeline"), and the preprocessing side alone (fusion, executor, feed)
 * for the mps server, the trainer's evaluation and the bench programs.
 *
 * A pipeline is: the model's shape from the plan; the fusion (a kind, or
 * the one rap plan wrote beside the schedule); the schedule (the built-in
 * one, a schedule file, or with ranks this rank's part of the placement
 * planner's per-rank manifests); the model (with ranks this rank's share)
 * on its own stream on the GPU; with ranks the table sharding, the hybrid
 * step and its NCCL comm (GPU), the rank's columns (placement owner and
 * search), the manifests' moves and the id exchange (placement batch); the
 * row feed (or a rap shard) and the runtime that pipelines the steps.
 *
 * Three steps, in files of their own (HugeCTR's split: building, running
 * and describing a pipeline are different files):
 *   plan      pipeline_plan.c      what the config names, read, checked and
 *                                  decided once per job; sizes
 *   create    pipeline.c           one rank's pipeline allocated (the ranks'
 *             pipeline_dist.c      part: sharding, hybrid step, exchanges)
 *   run       pipeline_run.c       the feed and the runtime over some passes
 *   describe  pipeline_describe.c  the lines rap train prints about it
 * pipeline_prep.c: the preprocessing side alone.
 *
 *   rap_pipeline_plan *pl;
 *   RAP_TRY(rap_pipeline_plan_create(&cfg, &pl));    // once per job
 *   rap_pipeline *p;
 *   RAP_TRY(rap_pipeline_create(pl, &cfg.rank, &p)); // per rank (bench: per mode)
 *   RAP_TRY(rap_pipeline_start(p, passes, start_pos));
 *   rap_step_info in;
 *   while ((st = rap_runtime_step(rap_pipeline_runtime(p), &in)) == RAP_OK && !in.end) ...
 *   rap_pipeline_stop(p, &stats);                    // start again for more passes
 *   rap_pipeline_free(p);
 *   rap_pipeline_plan_free(pl);
 *
 * Memory plan (the seam for a dry run): nothing of a run is allocated
 * before rap_pipeline_create; rap_pipeline_memplan makes one rank's
 * memory plan (run/memplan.h: every buffer by component, from the sizes
 * its allocator uses, docs/MEMORY.md) from the plan alone, and
 * rap_pipeline_memplan_check refuses a run that does not fit. rap train
 * and rap bench call them before rap_pipeline_create, and --dry-run
 * instead of it. rap_pipeline_size is the coarser count by part (a part
 * it does not count says so: counted false).
 *
 * Shapes: B batch rows (the global batch with ranks), R ranks, T tables,
 * P feed batches.
 */
#ifndef RAP_RUN_PIPELINE_H
#define RAP_RUN_PIPELINE_H

#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "model/model.h"
#include "run/input.h"
#include "run/memplan.h"
#include "run/rowfeed.h"
#include "run/runtime.h"
#include "run/trace.h"
#include "sched/placement.h"
#include "sched/schedule.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ the model's shape */

/* Fills mc's n_dense, n_tables and table_rows (rap_input_shape) and
 * max_bag (the most ids a row has in one sparse column, at least 1) from
 * plan p. The one place that derives the model's shape from a plan. Errors:
 * rap_input_shape's (RAP_ERR_PLAN naming the column). */
rap_status rap_pipeline_model_shape(const rap_plan *p, rap_model_config *mc);

/* ------------------------------------------------------------ the preprocessing side */

/* The fusion a run uses, decided once: the file when one is named (rap
 * plan's SCHEDULE.fusion, checked against p), else fusion by kind. */
rap_status rap_pipeline_fuse(const rap_plan *p, int kind, const char *fusion_file,
                             rap_fusion *out);

typedef struct {
    const rap_plan *plan;
    const rap_fusion *fusion;   /* a fusion of plan to use (not owned), or NULL: one is made
                                 * (rap_pipeline_fuse of fusion_kind and fusion_file) */
    int fusion_kind;            /* rap_fuse_kind */
    const char *fusion_file;    /* or NULL */
    rap_device device;
    void *stream;               /* GPU: the executor's (and packer's) stream */
    int64_t batch_rows;         /* B of the executor; 0: no executor */
    int threads;                /* CPU executor threads; 0 = all cores */
    bool pack;                  /* also the packer into model batches (rap_input, bound to the
                                 * executor) */
    const rap_rowfeed_config *feed; /* a row feed to start too, or NULL */
} rap_pipeline_prep_config;

/* Not to be copied (fusion may point into it). */
typedef struct {
    rap_fusion own;             /* the fusion made here (when config.fusion was NULL) */
    const rap_fusion *fusion;   /* the one used */
    rap_prep *prep;             /* or NULL */
    rap_input *input;           /* or NULL */
    rap_rowfeed *feed;          /* or NULL */
} rap_pipeline_prep;

/* Makes the fusion (unless given), the executor, the packer and the feed
 * asked for, in that order. On failure nothing is left (*out zeroed) and
 * the message is the failing part's. */
rap_status rap_pipeline_prep_create(const rap_pipeline_prep_config *c, rap_pipeline_prep *out);
/* Frees in reverse order (the feed stopped and joined first); a zeroed
 * struct is accepted. Leaves *p zeroed. */
void rap_pipeline_prep_free(rap_pipeline_prep *p);

/* ------------------------------------------------------------ config */

/* What differs between the pipelines of one plan: the rank and the mode
 * (rap bench: every mode on every rank from one plan). */
typedef struct {
    int mode;                  /* rap_mode, or -1: auto (rap on the GPU without cuda_graph,
                                * else sequential; ideal from a rap shard) */
    rap_comm *comm;            /* this rank's host comm (mpi, threads, self; not owned), with
                                * the plan's ranks > 0: of that size; NULL without ranks */
    int gpu;                   /* GPU ranks: this rank's device; -1 = the current one */
    rap_trace *trace;          /* optional timeline of the feed and the steps (not owned) */
    /* called once the model exists, before the ranks are connected (rap
     * train: the checkpoint's weights); its error ends create. NULL: none */
    rap_status (*model_ready)(void *ctx, rap_model *m);
    void *ctx;
} rap_pipeline_rank;

typedef struct {
    const char *cmd;           /* the command its messages name ("train", "bench"); NULL:
                                * "run" */
    /* preprocessing */
    const rap_plan *plan;
    const char *plan_spec;     /* the plan as named (a file or "default"): the mps server
                                * loads it itself; NULL = "default" */
    int fusion;                /* rap_fuse_kind, without a schedule's fusion file */
    const char *schedule;      /* NULL or "": the built-in schedule. Else either a schedule
                                * file (docs/SCHEDULE.md; the fusion rap plan wrote beside it,
                                * SCHEDULE.fusion, is used when there), or with ranks the
                                * prefix S of the placement planner's per-rank manifests
                                * S.rank<r> (rap plan --gpus R --out S): which one is
                                * rap_pipeline_plan_create's decision */
    const rap_schedule *schedule_made; /* or a schedule made in memory (not owned: it must
                                * outlive the plan), run as a schedule file's without a
                                * fusion file (tests); NULL: schedule names it */
    /* model: n_dense, n_tables, table_rows and max_bag are the plan's
     * (rap_pipeline_model_shape); stream is the pipeline's */
    rap_model_config model;
    rap_device device;
    /* ranks (docs/DIST.md): 0, no comm, the plain path; R >= 1 the
     * hybrid-parallel path over R ranks (tables sharded, every rank reading
     * and preprocessing the same global batches of model.batch rows) */
    int ranks;
    rap_placement placement;   /* owner (0), batch, search (sched/placement.h) */
    /* runtime (runtime.h) */
    int cpu_workers;           /* cpu mode: worker threads; 0 = all cores */
    int prep_threads;          /* CPU executor threads; 0 = all cores */
    bool cuda_graph;
    int prep_lanes;            /* rap mode on the GPU (0: the default) */
    int ideal_batches;         /* ideal: batches resident at once (0: the runtime's default) */
    int64_t max_records;       /* per-step timing records kept (medians); 0 = sums only */
    /* the feed (rowfeed.h), or a rap shard (ideal mode, no feed) */
    const char *data;          /* training input: file, directory, "-", or a rap shard */
    rap_reader_config reader;  /* bad rows, threads, ...; input is data */
    double holdout;            /* F: held-out rows skipped (rap_train_held_out) */
    int feed_batches;          /* P; 0: cpu_workers (all cores when 0) + 2 in cpu mode, else 8
                                * (reading overlaps training) */
    size_t chunk_bytes;        /* the reader's chunk (tests: many chunks in a small input);
                                * 0: the reader's default */
    volatile sig_atomic_t *stop; /* set (a signal handler): a feed waiting on a followed
                                  * input stops */
    bool track_positions;      /* each feed batch carries its data position (rowfeed.h) */
    const rap_data_position *start; /* when valid and its rows are start_pos: the first
                                 * pass reads from there (NULL: none) */
    void (*batch_hook)(void *ctx, int64_t seq, const rap_batch *b); /* the feed's test
                                 * hook (rowfeed.h); NULL: none */
    void *batch_hook_ctx;
    /* the rank and mode rap_pipeline_plan_create checks first and
     * rap_pipeline_size sizes by default (rap train creates it) */
    rap_pipeline_rank rank;
} rap_pipeline_config;

/* Fills the defaults: no ranks, one rank of mode auto on the current GPU,
 * the model defaults, CPU, the reader's defaults. */
void rap_pipeline_config_defaults(rap_pipeline_config *c);

/* ------------------------------------------------------------ plan */

typedef enum {
    RAP_PIPE_SCHED_BUILTIN = 0, /* no --schedule: rap mode's built-in one */
    RAP_PIPE_SCHED_FILE,        /* one schedule file */
    RAP_PIPE_SCHED_RANKS        /* the prefix of per-rank manifests */
} rap_pipeline_sched;

/* What a job's config names, read, checked and decided once: read-only
 * afterwards and shared by every pipeline made from it (which must not
 * outlive it). */
typedef struct {
    rap_pipeline_config cfg;   /* a copy; its pointers are the caller's and must outlive it */
    rap_model_config model;    /* the whole model: cfg.model with the plan's shape, checked */
    bool shard;                /* cfg.data is a rap shard (ideal mode, no feed) */
    rap_pipeline_sched sched;
    char fusion_file[1100];    /* SCHEDULE.fusion when it is there, else "" */
    rap_fusion fusion;         /* the whole plan's (fusion_file's, or cfg.fusion's kind) */
    rap_schedule *loaded;      /* RAP_PIPE_SCHED_FILE from a file: loaded (owned) */
    const rap_schedule *schedule; /* RAP_PIPE_SCHED_FILE: loaded, or cfg.schedule_made;
                                * else NULL */
    bool dist;                 /* cfg.ranks > 0: the hybrid-parallel path */
    rap_shard_map map;         /* dist: tables -> ranks (every rank's share) */
} rap_pipeline_plan;

/* What --schedule names (rap_pipeline_config.schedule), decided as
 * rap_pipeline_plan_create decides it, alone: a readable file is a
 * schedule file, else with S.rank0 there the per-rank manifests (which
 * need ranks > 0 and, with ranks > 1, placement owner or search), else
 * RAP_ERR_ARG saying it is neither. A command may ask before it spends
 * time (generating data). cmd as the config's. */
rap_status rap_pipeline_schedule_find(const char *schedule, int ranks, rap_placement placement,
                                      const char *cmd, rap_pipeline_sched *kind);

/* Reads and checks what c names: the model's shape from the plan (and
 * the config checked, rap_model_config_check), whether data is a rap
 * shard, the fusion, what --schedule is -- a readable file is a schedule
 * file (loaded and its SCHEDULE.fusion with it), else with S.rank0 there
 * the per-rank manifests (which need ranks and placement owner or
 * search), else RAP_ERR_ARG saying it is neither -- the table sharding
 * over the ranks, and c->rank's mode (rap_pipeline_mode). Allocates host
 * metadata only (the fusion, the schedule, the sharding), no buffer.
 * Errors name the option or the file. */
rap_status rap_pipeline_plan_create(const rap_pipeline_config *c, rap_pipeline_plan **out);
/* Accepts NULL. After every pipeline made from it is freed. */
void rap_pipeline_plan_free(rap_pipeline_plan *pl);

/* r's mode resolved (auto: ideal from a shard, rap on the GPU without
 * cuda_graph, else sequential) and checked against the plan: a shard
 * needs ideal, mps serves one trainer (no ranks), and the mode must be
 * available on the device (rap_mode_available). RAP_ERR_ARG naming the
 * --mode. */
rap_status rap_pipeline_mode(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                             rap_mode *mode);

/* The parts of a pipeline, for the memory plan. */
typedef enum {
    RAP_PIPE_PART_MODEL = 0,   /* the model (this rank's share) and its optimizer state */
    RAP_PIPE_PART_FEED,        /* the feed's P batches of B raw rows (pinned on the GPU;
                                * device memory where the GPU parses) */
    RAP_PIPE_PART_RUNTIME,     /* the runtime's slots: executors, packing, events */
    RAP_PIPE_PART_RANKS,       /* the hybrid step's exchange buffers, the id exchange, moves */
    RAP_PIPE_PARTS
} rap_pipeline_part;

typedef struct {
    size_t host, device;       /* bytes */
    bool counted;              /* false: not computed yet (see the header) */
} rap_pipeline_bytes;

/* Each part's bytes for rank r's pipeline (r NULL: the config's rank) in
 * its mode, from the plan alone, before anything is allocated. The model's
 * (rap_model_bytes of the rank's share) and the feed's are counted; the
 * runtime's and the ranks' are not yet (counted false). */
rap_status rap_pipeline_size(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                             rap_pipeline_bytes bytes[RAP_PIPE_PARTS]);

/* The memory plan of rank r's pipeline (r NULL: the config's rank) in its
 * mode, from the plan alone, before anything is allocated (run/memplan.h,
 * docs/MEMORY.md): the rank's model, the runtime's slots (with the whole
 * plan's columns: an upper bound where a rank runs its part), the feed,
 * the hybrid step's buffers; with eval_rows > 0 also rap train's
 * evaluation side (an executor and packer of B rows, a reader batch of
 * eval_rows and the step batch). The free memory is measured into it.
 * Errors: rap_pipeline_mode's and the sizes' (memplan.h). */
rap_status rap_pipeline_memplan(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                                int64_t eval_rows, rap_memplan *out);
/* Refuses a plan that does not fit (rap_memplan_check): logs its table
 * (a warning) and fails with RAP_ERR_NOMEM naming the pool, the need, the
 * batch and "refused before allocating". cmd names the command. */
rap_status rap_pipeline_memplan_check(const rap_memplan *p, const char *cmd, int64_t batch);

/* ------------------------------------------------------------ the pipeline */

typedef struct rap_pipeline rap_pipeline;

/* Allocates rank r's pipeline of plan pl (r's comm and gpu, r's mode): its
 * device current (ranks on the GPU), the model's stream, this rank's
 * model (r->model_ready then), and with ranks the NCCL comm (GPU), the
 * hybrid step, the rank's columns or its manifest's schedule and moves,
 * and the id exchange of placement batch. Nothing runs until start.
 * Errors: rap_pipeline_mode's, the model's (RAP_ERR_NOMEM naming what is
 * needed), a manifest that does not fit (RAP_ERR_PLAN naming it), a comm
 * that is not of the plan's ranks (RAP_ERR_ARG). */
rap_status rap_pipeline_create(const rap_pipeline_plan *pl, const rap_pipeline_rank *r,
                               rap_pipeline **out);
/* Starts the feed (passes over the input from row start_pos of the
 * first; 0 passes: until stopped) -- or the shard's passes, or in mps mode
 * the server -- and the runtime. With ranks every rank's set-up is done
 * before it returns (a barrier). RAP_ERR_ARG: mps mode with held-out rows
 * or a start position. */
rap_status rap_pipeline_start(rap_pipeline *p, int64_t passes, int64_t start_pos);

typedef struct {
    rap_runtime_stats runtime; /* as rap_runtime_get_stats (records NULL: freed) */
    bool have_feed;            /* a row feed ran (not mps, not a shard) */
    rap_rowfeed_stats feed;    /* its accounting */
} rap_pipeline_stats;

/* Waits for the runtime's work, fills st (may be NULL) and frees the
 * runtime and the feed; nothing when not started. */
void rap_pipeline_stop(rap_pipeline *p, rap_pipeline_stats *st);
/* Stops (when started) and frees everything; NULL accepted. */
void rap_pipeline_free(rap_pipeline *p);
/* Progressive validation (run/progressive.h; not owned, NULL: none) for the
 * runtimes the next starts make: set between create and start. */
void rap_pipeline_set_progressive(rap_pipeline *p, struct rap_progressive *pv);

/* The parts, for the loops that drive them (NULL where there is none). */
rap_runtime *rap_pipeline_runtime(rap_pipeline *p);   /* between start and stop */
rap_rowfeed *rap_pipeline_feed(rap_pipeline *p);      /* between start and stop */
rap_model *rap_pipeline_model(rap_pipeline *p);
rap_hybrid *rap_pipeline_hybrid(rap_pipeline *p);     /* with ranks */
void *rap_pipeline_stream(rap_pipeline *p);           /* GPU: the model's stream */
rap_mode rap_pipeline_mode_of(const rap_pipeline *p);
const rap_pipeline_plan *rap_pipeline_plan_of(const rap_pipeline *p);
/* With ranks: this rank's share of the tables (rap_hybrid_model_config). */
const rap_model_shard *rap_pipeline_shard(const rap_pipeline *p);

/* Bytes of preprocessed data this rank sent to other ranks in the steps
 * so far (*mine) and those of every rank (*all; -1 when each rank knows
 * only its own: the planner's moves). False (both 0) when the pipeline
 * sends none (no ranks, or each rank preprocesses what it trains on). */
bool rap_pipeline_bytes_sent(const rap_pipeline *p, int64_t *mine, int64_t *all);
/* The exchanges' end-of-run checks: a row with more ids than max_bag cut
 * by the id exchange or the moves (RAP_ERR_DATA naming the table). GPU:
 * waits for the stream. */
rap_status rap_pipeline_check(rap_pipeline *p);

/* ------------------------------------------------------------ describe */

/* "hybrid parallel: R ranks over KIND, global batch B, placement P;
 * tables:\n..." (the sharding) into buf; comm: a rank's comm, for its
 * kind. */
void rap_pipeline_describe_ranks(const rap_pipeline_plan *pl, const rap_comm *comm, char *buf,
                                 size_t n);
/* "placement P: each rank preprocesses ..." (which columns over which
 * rows, and what it sends) into buf. */
void rap_pipeline_describe_placement(const rap_pipeline *p, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_PIPELINE_H */
