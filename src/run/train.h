/*
 * train.h -- the training loop: raw rows -> executor -> model, with
 * evaluation, progress, metrics, checkpoints and resume (docs/TRAINING.md).
 *
 * One step: the next B training rows (held-out rows skipped) are copied
 * into one raw batch (the runtime's row feed, runtime.h), the executor runs
 * the plan on it (in the mode's way: runtime.h), input.c packs the columns
 * into a rap_model_batch, the model trains on it, and the loss is checked
 * when the step has completed (a NaN or inf loss stops the run naming its
 * step). Batches are made of rows, not of reader batches, so the rows of
 * step s depend only on the input, B and the hold-out: that is what lets a
 * resumed run continue bit for bit.
 *
 * Held-out rows (eval_fraction F, no eval_data): row i of the input (0-based,
 * counting the rows the reader accepts, in input order) is held out when
 * splitmix64(i ^ RAP_HOLDOUT_KEY) / 2^64 < F: independent of the seed, the
 * batch size, the threads and the device; the same rows in every epoch and
 * every run. Evaluation re-reads the input and keeps only those rows.
 *
 * The steps run through the pipeline of run/pipeline.h (the one builder,
 * rap bench's too). The trainer's files (train_internal.h): train.c the
 * run, train_eval.c evaluation, train_ckpt.c checkpoints, train_dist.c
 * what its ranks agree on.
 */
#ifndef RAP_RUN_TRAIN_H
#define RAP_RUN_TRAIN_H

#include "dist/comm.h"
#include "model/model.h"
#include "run/guards.h"
#include "run/memplan.h"
#include "run/metrics.h"
#include "run/replan.h"
#include "run/runtime.h"
#include "rap.h"
#include "sched/placement.h"
#include "sched/schedule.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_HOLDOUT_KEY 0x686f6c646f7574ull /* "holdout" */

/* True when row i (see above) is held out at fraction f. */
bool rap_train_held_out(int64_t i, double f);

typedef struct {
    /* data */
    const char *data;          /* training input (file, directory, "-") */
    const char *data_id;       /* its name in checkpoints; NULL = data */
    int64_t data_rows;         /* rows in one pass when known (progress), else 0 */
    const char *eval_data;     /* evaluation input; NULL or "" = hold out of data */
    double eval_fraction;      /* F, used when there is no eval_data; 0 = no evaluation */
    int64_t eval_rows;         /* evaluate at most this many rows; 0 = all */
    int64_t eval_every;        /* also evaluate every N steps; 0 = at the end only */
    double teacher_auc;        /* the generator's AUC on the evaluation rows, or NaN */
    rap_reader_config reader;  /* bad rows, threads...; input is set per pass */
    size_t chunk_bytes;        /* the training feed's reader chunk (tests); 0: the default */
    /* preprocessing */
    const rap_plan *plan;
    const char *plan_name;     /* as given (--plan), recorded in checkpoints */
    int fusion;                /* rap_fuse_kind without a fusion file; ranks: levels or none */
    /* model: n_dense, n_tables and table_rows are filled from the plan */
    rap_model_config model;
    rap_device device;
    bool cuda_graph;           /* GPU: each phase captured once per slot as a CUDA graph,
                                * replayed (runtime.h; every mode but mps) */
    int prep_lanes;            /* rap mode on the GPU: runtime.h's prep_lanes (0: default) */
    /* runtime (runtime.h): mode -1 = auto: sequential on the CPU (and with
     * cuda_graph), rap on the GPU */
    int mode;                  /* rap_mode or -1 */
    int cpu_workers;           /* cpu mode: worker threads; 0 = all cores */
    const char *schedule_path; /* --schedule as given; NULL or "": the built-in one. A
                                * schedule file (rap mode; with rap plan's SCHEDULE.fusion
                                * beside it, the fusion it was made for), or with ranks the
                                * prefix S of the placement planner's per-rank manifests
                                * S.rank<r> (each rank runs its own): the pipeline builder
                                * decides which (run/pipeline.h) */
    const rap_schedule *schedule; /* or a schedule made in memory (not owned), run as a
                                * schedule file's (tests); NULL: schedule_path */
    rap_trace *trace;          /* optional timeline of the steps */
    int64_t trace_steps;       /* record the first N steps only; 0 = all */
    /* how long: stop at global step `steps` or after `epochs` passes over the
     * data (both counted from the start of training, checkpoints included);
     * 0 = no limit of that kind; both 0 = one epoch */
    int64_t steps, epochs;
    /* outputs */
    const char *metrics;       /* JSON-lines file or NULL */
    const char *save;          /* checkpoint written at the end (the periodic ones beside
                                * it, train_series.h) */
    int64_t save_every;        /* a periodic checkpoint every N steps; 0: not by steps */
    double save_every_s;       /* ... or every this many seconds; 0: not by time */
    int64_t keep;              /* periodic checkpoints kept (the oldest removed); 0: all */
    /* test hooks (rank 0; NULL: none): step_hook after each step (seq: its
     * feed batch, rows: its rows, pos_after: rows of the input consumed in
     * the epoch after it) and once at the start of the run (seq and rows
     * -1, pos_after: where it starts); batch_hook (the feed's, rowfeed.h)
     * with each batch handed to the runtime. Tests count the rows trained
     * per input line with them. */
    void (*step_hook)(void *ctx, int64_t step, int64_t seq, int64_t pos_after, int64_t rows);
    void (*batch_hook)(void *ctx, int64_t seq, const rap_batch *b);
    void *hook_ctx;
    const char *resume;        /* checkpoint to continue from */
    int64_t log_every;         /* steps between progress/metrics lines; 0 = by time */
    double log_interval;       /* seconds between lines when log_every is 0 */
    bool progress;             /* show progress on stderr */
    bool tty;                  /* stderr is a terminal: a bar instead of lines */
    volatile sig_atomic_t *stop; /* set (by a signal handler) to stop after the step */
    /* called after every trained step with the global step reached; an
     * error stops the run with it (rap train's test hooks,
     * tests/test_dist_train.c). NULL: none */
    rap_status (*after_step)(void *ctx, int64_t step);
    void *after_step_ctx;
    /* hybrid parallel (docs/DIST.md): this rank's host comm (mpi, threads or
     * self; not owned). NULL: one rank, the plain path. With a comm every
     * rank calls rap_train_run with the same config (but comm and gpu):
     * the tables are sharded over the ranks (rap_shard_plan), every rank
     * reads and preprocesses the same global batches of model.batch rows
     * and trains its share through rap_hybrid_step (over NCCL on the GPU);
     * rank 0 alone writes metrics and progress; checkpoints are sharded
     * when there is more than one rank. */
    struct rap_comm *comm;
    int gpu;                   /* with a comm on the GPU: this rank's device; -1 = current */
    /* progressive validation and guards (run/train_watch.h, docs/TRAINING.md):
     * every batch evaluated by its training forward before its update, over
     * a window of the last progressive_window rows (metrics lines, progress
     * line); the guards (the window ones only with progressive) */
    bool progressive;
    int64_t progressive_window; /* rows; RAP_PV_DEFAULT_WINDOW by default */
    rap_guard_config guards;
    /* re-planning while training (run/replan.h): NULL off; one rank only */
    const rap_replan_config *replan;
    rap_placement placement;   /* --placement (sched/placement.h):
                                * owner (the default, 0) and search: each rank its part
                                * (rap_subplan_rank); batch: each rank every column
                                * over its row share, then each table's ids sent to its
                                * holders; docs/TRAINING.md "Several ranks" */
    /* the memory plan (run/memplan.h, docs/MEMORY.md), made before anything
     * is allocated: dry_run stops after it (result memplan, RAP_OK); a run
     * that does not fit refuses with RAP_ERR_NOMEM and logs the table */
    bool dry_run;
    double mem_avail;          /* > 0: the bytes taken as free in the device's pool
                                * instead of measuring them (tests) */
} rap_train_config;

typedef struct {
    int64_t step;              /* global step reached */
    int64_t steps_run;         /* steps of this run */
    int64_t samples;           /* samples trained in this run */
    int64_t samples_total;     /* ... plus those of the checkpoint resumed from */
    double train_seconds;      /* time in training steps (reading and prep included) */
    double samples_per_s;      /* samples / train_seconds */
    double loss;               /* mean training loss of the last logged period */
    rap_eval_result eval;      /* final evaluation (rows 0 when none) */
    rap_reader_stats data;     /* training input accounting, summed over passes */
    int64_t rows_held_out;     /* rows of the input skipped for evaluation */
    int64_t rows_pending;      /* rows read but never trained (read ahead when stopped) */
    int64_t rows_skipped;      /* rows before the resume position */
    rap_mode mode;             /* the mode that ran */
    double starved_s;          /* seconds the trainer waited for data (data-bound) */
    double exposed_ms;         /* mean exposed preprocessing per step (ms) */
    int64_t nan_step;          /* the step whose loss was NaN or inf, else 0 */
    int64_t replan_checks, replan_plans, replan_swaps; /* --replan: this run's */
    bool parse_gated;          /* the GPU parse was released in the windows (runtime.h) */
    int64_t parse_lines_in;    /* ... lines launched at a window's start */
    int64_t parse_lines_out;   /* ... lines launched outside the windows (waits for rows) */
    bool interrupted;
    bool saved;
    /* hybrid parallel: samples above are the global batches' rows; each
     * rank trains only its share (rows counted once) */
    int rank, ranks;           /* 0, 1 without a comm */
    int64_t rank_samples;      /* rows of this run this rank trained (its shares) */
    int64_t ranks_samples;     /* sum of rank_samples over the ranks (== samples) */
    /* placement batch (CPU ranks): bytes of preprocessed ids (offsets and
     * ids, 8 bytes each) sent between ranks in this run: all ranks together
     * (every rank computes it), and by this rank; 0 with other placements */
    int64_t bytes_moved, rank_bytes_sent;
    rap_memplan memplan;       /* the memory plan (planned: it was made) */
    bool planned;
} rap_train_result;

/* Fills the defaults: one epoch, eval fraction 0.1, log every 5 s, the
 * model defaults (rap_model_config_defaults), CPU. */
void rap_train_defaults(rap_train_config *c);

/* Trains as configured. res is filled as far as the run got, also on
 * failure. Errors: the model's (RAP_ERR_NOMEM saying what is needed and
 * available), the reader's, a checkpoint that does not match (RAP_ERR_ARG
 * saying what differs) or is corrupt (RAP_ERR_DATA), a non-finite loss
 * (RAP_ERR_DATA naming the step; nothing saved), a stop request
 * (RAP_ERR_INTERRUPTED, after saving when save is set). */
rap_status rap_train_run(const rap_train_config *c, rap_train_result *res);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_TRAIN_H */
