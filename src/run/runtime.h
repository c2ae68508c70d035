/*
 * runtime.h -- the co-running runtime: raw rows -> preprocessing -> DLRM
 * training steps, pipelined, in one of six modes (docs/RUNTIME.md).
 *
 * It trains on the batches of a row feed (run/rowfeed.h) with a model,
 * preparing batch i+1 while batch i trains (S slots, each with its own
 * executor, packing buffer, model batch and events). Modes:
 *   ideal       batches preprocessed beforehand (groups of up to
 *               ideal_batches, resident on the GPU; the preload time is
 *               counted apart), or every batch of a rap shard made resident
 *               at create (rap_runtime_config.shard; GPU or CPU model)
 *   cpu         CPU worker threads preprocess and pack; the GPU (or the CPU
 *               model) only trains
 *   sequential  preprocess, then train, in order on one stream (on the CPU:
 *               the plain CPU path)
 *   stream      preprocessing on a lowest-priority stream, launched as soon
 *               as its batch is copied
 *   mps         a second process under MPS (run/mps.h)
 *   rap         a schedule's slices launched beside the phases
 * The host never waits for the GPU within a step except for a copy
 * enqueued one step earlier (back pressure): losses and timings are read
 * back when their events have completed.
 *
 *   rap_runtime *rt;
 *   rap_runtime_create(&cfg, model, feed, &rt);
 *   rap_step_info info;
 *   while ((st = rap_runtime_step(rt, &info)) == RAP_OK && !info.end)
 *       while (rap_runtime_next_loss(rt, false, &step, &loss, &st)) ... ;
 *   rap_runtime_sync(rt);
 *   rap_runtime_get_stats(rt, &stats);
 *   rap_runtime_free(rt);
 *
 * The files, one job each (src/run/):
 *   runtime.h/.c   this API: the mode names, create/step/sync/stats/free,
 *                  each mode behind one table of functions (rt_mode_ops:
 *                  create, step, stats, free) chosen at create
 *   rt_internal.h  the private struct and what the files share
 *   rt_ring.c      the ring of step results: losses and timings read back
 *                  once their events completed, in step order
 *   rt_slots.c     the slots (executor, packing buffer, events), the feed's
 *                  batches copied into them, their preprocessing launched
 *                  (whole, or a schedule window's slices, on lanes)
 *   rt_phases.c    a step's training phases and their events: recording,
 *                  timing, CUDA graphs, hybrid hooks, rap mode's release of
 *                  the next batch's slices beside their phases
 *   mode_ideal.c   ideal mode: groups of preprocessed batches; from a shard
 *   ideal_shard.c  a rap shard checked, packed and made resident
 *   mode_cpu.c     cpu mode: worker threads, jobs, staging
 *   mode_gpu.c     sequential, stream and rap, and the pipelined step they
 *                  share with the cpu mode on the GPU
 *   mode_mps.c     mps mode: the steps on the prep server's slots
 *   runtime_gpu.cu the CUDA calls (streams, events, copies) behind rap_rt_*
 *
 * Shapes: B batch rows, S slots, K cpu workers.
 */
#ifndef RAP_RUN_RUNTIME_H
#define RAP_RUN_RUNTIME_H

#include "dist/hybrid.h"
#include "model/model.h"
#include "rap.h"
#include "run/rowfeed.h"
#include "run/trace.h"
#include "sched/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ modes */

/* The modes, once: each one's enum constant and name, in enum order.
 * Everything that names the modes comes from this list: the enum,
 * rap_mode_name/rap_mode_parse and, through RAP_MODE_NAMES, the --mode
 * choices of the command line and its help. */
#define RAP_MODES(X, SEP)                                                      \
    X(RAP_MODE_IDEAL, "ideal") SEP X(RAP_MODE_CPU, "cpu") SEP                  \
    X(RAP_MODE_SEQUENTIAL, "sequential") SEP X(RAP_MODE_STREAM, "stream") SEP  \
    X(RAP_MODE_MPS, "mps") SEP X(RAP_MODE_RAP, "rap")

#define RAP_MODE_ENUM_(e, name) e,
typedef enum { RAP_MODES(RAP_MODE_ENUM_, ) RAP_MODE_COUNT } rap_mode;
#undef RAP_MODE_ENUM_

/* The names as one string literal, joined by the literal sep:
 * RAP_MODE_NAMES("|") is "ideal|cpu|sequential|stream|mps|rap". */
#define RAP_MODE_NAME_(e, name) name
#define RAP_MODE_NAMES(sep) RAP_MODES(RAP_MODE_NAME_, sep)

/* "ideal", "cpu", ... ; "?" out of range. */
const char *rap_mode_name(rap_mode m);
/* The mode named s, or -1. */
int rap_mode_parse(const char *s);
/* "ideal,cpu,rap" -> modes (at most max, each once). RAP_ERR_ARG naming the
 * bad name. */
rap_status rap_mode_list_parse(const char *spec, rap_mode *modes, int max, int *n);
/* Whether mode m can run with the model on dev (and this build). The reason
 * when not goes to why. */
bool rap_mode_available(rap_mode m, rap_device dev, char *why, size_t why_len);

/* ------------------------------------------------------------ runtime */

#define RAP_RT_MAX_LANES 8     /* prep_lanes at most */
#define RAP_RT_DEFAULT_LANES 1 /* prep_lanes 0 */

typedef struct {
    rap_mode mode;
    const rap_plan *plan;
    const rap_fusion *fusion;     /* kernels the executors and schedule use */
    const rap_schedule *schedule; /* rap mode; NULL = rap_schedule_builtin_embedding */
    int slots;                    /* S >= 2 (0: 2) */
    int cpu_workers;              /* K, cpu mode; 0 = all cores */
    int prep_threads;             /* CPU executor threads (sequential on the CPU); 0 = all */
    int ideal_batches;            /* ideal: batches resident at once (0: 8) */
    bool cuda_graph;              /* GPU: each phase captured once per slot as a CUDA graph, replayed */
    int prep_lanes;               /* rap mode on the GPU: streams a window's independent slices
                                   * run on at once (1..RAP_RT_MAX_LANES; 0: RAP_RT_DEFAULT_LANES):
                                   * each dependency level of a window together, so they share
                                   * the gaps between training kernels (docs/RUNTIME.md) */
    rap_trace *trace;             /* optional */
    int64_t max_records;          /* per-step timing records kept (medians); 0 = sums only */
    /* mps mode: the server reads and preprocesses the input itself (every
     * row in order, reader batches of B rows: no hold-out, no resume
     * position); the feed may then be NULL */
    const char *plan_spec;        /* plan file or "default", as the server loads it */
    rap_reader_config reader;     /* the server's reader (input, threads, ...) */
    const char *mps_exe;          /* the rap binary run as the server; NULL = this one */
    /* ideal mode from a rap shard (`rap prep --format bin`, data/shard.h):
     * its batches, already preprocessed, are checked against the plan's
     * output columns, packed into model batches and all made resident (on
     * the GPU, or in host memory for the CPU model) by rap_runtime_create;
     * steps cycle over them with no reading or preprocessing. Every batch
     * but the last must hold the model's B rows (no re-batching). The feed
     * is then NULL. Any other mode refuses a shard. */
    const char *shard;
    int64_t shard_passes;         /* passes over the shard; 0 = until stopped */
    int64_t shard_start_rows;     /* first pass: rows skipped (a resume position; must
                                   * end a batch of the shard) */
    /* hybrid parallel (docs/DIST.md, pipeline_dist.c): every step hands the whole
     * preprocessed global batch mb to train_fn instead of running the
     * model's four phases; train_fn trains this rank's share (rap_hybrid_step)
     * and returns the global mean loss (on the GPU it may wait for the step).
     * With `hybrid` (the rap_hybrid train_fn steps), the runtime hooks its
     * phase boundaries (rap_hybrid_set_hooks): each phase is timed, and in
     * rap mode each window's slices are released beside its phase, the
     * grad_comm window beside the gradients' exchange. Without it the step
     * is timed as one span (phase_ms[0]) and every slice is launched before
     * it. No CUDA graph. The plan may then be a part of the model's (a rank's columns:
     * mb holds its sparse columns only, in its frame order). NULL: the plain
     * step, unchanged. */
    rap_status (*train_fn)(void *ctx, const rap_model_batch *mb, int64_t rows, double *loss);
                                  /* rows: the global batch's (mb->rows, or with a row
                                   * share the whole feed batch's) */
    void *train_ctx;
    rap_hybrid *hybrid;           /* the step train_fn runs (hooked), or NULL */
    bool train_fn_model_loss;     /* GPU: train_fn's loss is not used; the model's own
                                   * loss (or train_loss_dev) is read back
                                   * asynchronously as without train_fn */
    const float *train_loss_dev;  /* with train_fn_model_loss: the device scalar holding
                                   * the step's global loss once the step's work on
                                   * the training stream is done; NULL = the model's */
    int64_t batch_rows;           /* B of slots, executors and batches; 0 = the model's
                                   * batch (with train_fn: the global batch Bg) */
    /* hybrid parallel, placement batch (pipeline_dist.c): with row_share_ranks R > 1
     * the executor preprocesses only rows rap_hybrid_rows(n, R,
     * row_share_rank) of each feed batch of n rows (copied into a raw batch
     * of the slot's, or of the cpu job's); the mb given to train_fn holds
     * those rows only (info.rows and train_fn's rows stay n). Every mode
     * but mps. 0 or 1: every row, as before. */
    int row_share_ranks, row_share_rank;
    /* progressive validation (run/progressive.h; not owned), or NULL: after
     * each step's mlp_forward the model's own logits and the batch's labels
     * are added to it (on the GPU by one kernel on the training stream,
     * inside the mlp_forward phase's time). Not with train_fn. */
    struct rap_progressive *progressive;
} rap_runtime_config;

/* What one call of rap_runtime_step did. */
typedef struct {
    int64_t rows;                 /* rows trained; 0: a marker or the end */
    int64_t seq;                  /* the batch's feed sequence number */
    int64_t pass, pos_after, pass_rows;
    bool end_of_pass;             /* the batch (or marker) ended its pass */
    bool has_data_pos;            /* the feed tracks positions: data_pos is the batch's */
    rap_data_position data_pos;   /* the input just past the batch (rowfeed.h) */
    bool end;                     /* no more data: nothing was trained */
} rap_step_info;

/* Per-step timing (milliseconds, GPU events or host clock on the CPU). */
typedef struct {
    float phase_ms[4];            /* emb_forward, mlp_forward, mlp_backward, emb_backward */
    float grad_comm_ms;           /* hooked hybrid step: the gradients' exchange (between
                                   * mlp_backward and emb_backward); else 0 */
    float exposed_ms;             /* training waited for its batch (sequential: its prep) */
    float step_ms;                /* wait + phases */
} rap_step_record;

typedef struct {
    int64_t steps;
    int64_t samples;
    double wall_s;                /* host seconds in rap_runtime_step (preload excluded) */
    double preload_s;             /* ideal: preprocessing before training */
    double starved_s;             /* host seconds waiting for the feed (data-bound time) */
    int64_t starved_steps;        /* steps that waited more than 1 ms for data */
    double phase_ms[4];           /* sums over timed steps */
    double grad_comm_ms;
    double exposed_ms, step_ms;
    int64_t timed_steps;
    rap_step_record *records;     /* (n_records) the first max_records steps */
    int64_t n_records;
    size_t gpu_bytes_used;        /* device memory in use after setup (0 on the CPU) */
    size_t shard_bytes;           /* ideal from a shard: bytes of resident model batches */
    int64_t shard_batches, shard_rows; /* ... and the batches and rows of one pass */
    int64_t schedule_swaps;       /* rap_runtime_set_schedule calls that swapped */
    bool parse_gated;             /* the feed's GPU parse goes through its gate, released
                                   * in the windows (rap_runtime_parse_gated) */
    int64_t parse_lines_in;       /* ... lines launched at a window's start (its budget) */
    int64_t parse_lines_out;      /* ... lines launched outside the windows: while the
                                   * runtime waited for a batch (start-up, a pass's end, a
                                   * budget too small for the rows consumed), a reader
                                   * closing, shutdown */
    bool have_reader;             /* mps mode: the server's reader accounting */
    rap_reader_stats reader;
} rap_runtime_stats;

typedef struct rap_runtime rap_runtime;

/* ---- the GPU parse in the windows (docs/RUNTIME.md "The parse in the
 * windows") */

#define RAP_PARSE_WINDOW_UNSET (-1) /* RAP_PARSE_WINDOW not set */
#define RAP_PARSE_WINDOW_NOW (-2)   /* "now": launched as the parser posts, no gate */
/* The window whose start releases all pending parse work when the schedule
 * has no parse budgets (RAP_PARSE_WINDOW unset). */
#define RAP_PARSE_WINDOW_DEFAULT RAP_WIN_MLP_BACKWARD
/* The A/B knob RAP_PARSE_WINDOW (environment): emb_forward, mlp_forward,
 * mlp_backward, emb_backward (all pending parse work at that window's start,
 * in place of the schedule's budgets) or now; *w the window, or
 * RAP_PARSE_WINDOW_NOW, or RAP_PARSE_WINDOW_UNSET. RAP_ERR_ARG naming the
 * values for any other. */
rap_status rap_parse_window_env(int *w);
/* The A/B knob RAP_PARSE_WINDOW_LINES (environment): with RAP_PARSE_WINDOW
 * naming a window, that window's budget is *lines lines a release (rounded
 * as RAP_PARSE_RELEASE says) instead of all pending work; 0 when unset.
 * RAP_ERR_ARG for anything but a count from 1 to 2^40. */
rap_status rap_parse_window_lines_env(int64_t *lines);
/* The A/B knob RAP_PARSE_RELEASE (environment): "jobs" (unset: the
 * default) or "tiles". A window's release launches its budget's lines
 * rounded up to the end of every chunk it begins (jobs), or stops mid-chunk
 * at the budget (tiles: the chunk's rows wait for the next windows' releases;
 * bench/RESULTS.md, 2026-12-02). *tiles true for tiles. RAP_ERR_ARG naming
 * the values for anything else. */
rap_status rap_parse_release_env(bool *tiles);
/* The A/B knob RAP_IDEAL_PARSE (environment): "apart" (unset: the default)
 * or "beside". Ideal mode, the upper bound, parses with the GPU parser only
 * while it preloads a group of batches, never beside its timed steps
 * (apart: the gate held shut between its waits for rows); beside lets the
 * parser threads launch as they post, the parse of the next group then
 * running beside the steps (ideal's behaviour before 2026-12-04, 0788d15).
 * *beside true for beside. RAP_ERR_ARG naming the values for anything else. */
rap_status rap_ideal_parse_env(bool *beside);
/* Every environment knob of the GPU parse checked at once: the four above
 * and the reader's RAP_PARSE_GPU_CHUNK_MB (rap_parse_gpu_chunk_bytes), so
 * that a bad value is refused before any work. The first one's error. */
rap_status rap_parse_knobs_check(void);
/* Whether a run of mode on dev whose feed parses with `parse` (resolved,
 * rap_rowfeed_resolve_parse) and whose schedule is s (may be NULL) posts the
 * parse to a gate the runtime releases in the windows: rap mode on the GPU
 * with the GPU parser unless RAP_PARSE_WINDOW is now; ideal mode on the GPU
 * with the GPU parser unless RAP_IDEAL_PARSE is beside (a gate never
 * released: only its waits for rows launch the parse); on the CPU backend
 * (where rap mode does not run) the sequential mode with the kernels' CPU
 * reference when s has parse budgets or RAP_PARSE_WINDOW names a window
 * (what CI runs of the gated path). Every other run: no gate. Errors as
 * rap_parse_window_env's. */
rap_status rap_runtime_parse_gated(rap_mode mode, rap_device dev, rap_parse_kind parse,
                                   const rap_schedule *s, bool *gated);

/* Whether path is a regular file that starts with the shard magic
 * "RAPSHARD" (the name does not matter). */
bool rap_runtime_is_shard(const char *path);
#define RAP_SHARD_NEEDS_IDEAL "a rap shard holds preprocessed batches: use --mode ideal"

/* What rap_runtime_create allocates for c with a model of config mc on
 * dev, counted by kind (the memory plan, run/memplan.h, sizes each kind
 * with its own allocator's size function). The counts come from the
 * functions the modes' create calls (rt_mode_slots, rt_cpu_jobs,
 * rt_blk_layout), so they cannot drift apart. */
typedef struct {
    int64_t B;                   /* rows of slots, executors and batches */
    int n_dense, n_tables;
    int slots;                   /* S */
    int slot_execs;              /* executors on dev of B rows (slots that preprocess) */
    int host_execs;              /* cpu mode: the jobs' host executors of B rows */
    int inputs_dev, inputs_host; /* packing buffers of B rows on dev / the host */
    int share_batches;           /* row share: raw batches of B rows ... */
    bool share_pinned;           /* ... page-locked (GPU) */
    int stage_blocks;            /* cpu mode on the GPU: pinned model batches ... */
    int dev_blocks;              /* ... and device ones, blk_bytes each */
    size_t blk_bytes;
    size_t ring_pinned;          /* GPU: the ring's losses read back (pinned) */
    size_t records;              /* host: the step records (max_records) */
    bool shard;                  /* from a rap shard: its resident batches are sized
                                  * by reading it (rt_shard_load checks their fit) */
    bool mps;                    /* mps: preprocessing is the server's, in its process */
} rap_runtime_mem;
/* Fills *out for c (mode, slots, cpu_workers, ideal_batches, batch_rows,
 * row share, max_records, shard, plan when train_fn) on dev with a model
 * of config mc. RAP_ERR_ARG for a mode that is not one; the plan's shape
 * errors (train_fn) as create's. Allocates nothing but a small table. */
rap_status rap_runtime_mem_of(const rap_runtime_config *c, const rap_model_config *mc,
                              rap_device dev, rap_runtime_mem *out);

/* Makes the slots for mode c->mode with model m (its device decides where
 * preprocessing runs; on the GPU the model must have been created with a
 * stream from rap_runtime_train_stream_create) and feed f (not owned; NULL
 * in mps mode). In cpu mode rap_runtime_free stops the feed.
 * Refuses modes not available (rap_mode_available) with RAP_ERR_ARG. */
rap_status rap_runtime_create(const rap_runtime_config *c, rap_model *m, rap_rowfeed *f,
                              rap_runtime **out);
/* A stream at the highest priority for the model (GPU). */
rap_status rap_runtime_train_stream_create(void **stream);
/* Trains the next batch (enqueues it on the GPU), preparing the one after.
 * info says what was trained. */
rap_status rap_runtime_step(rap_runtime *rt, rap_step_info *info);
/* Losses of finished steps, in step order: returns true with (*step_index,
 * *loss) (step_index counts trained steps from 0) when one is available;
 * wait: block for the oldest outstanding one. Errors go to *st. */
bool rap_runtime_next_loss(rap_runtime *rt, bool wait, int64_t *step_index, double *loss,
                           rap_status *st);
/* Waits for all queued work (and reads back every loss and timing). */
rap_status rap_runtime_sync(rap_runtime *rt);
/* Swaps the schedule in at a step boundary (between two rap_runtime_step
 * calls; re-planning while training, run/replan.h). In rap mode the batch
 * the next step trains keeps the schedule that preprocessed it (its slices
 * were queued beside the step before), and from the next step on each
 * batch's slices follow s: every batch is preprocessed whole by exactly
 * one schedule, and its results do not depend on which, so no step is
 * lost and the weights are those of a run with s from that step. Other
 * modes launch no slices: s is checked and counted. s (not owned) must
 * stay valid until the next swap or rap_runtime_free. RAP_ERR_PLAN (as
 * rap_schedule_validate: another plan, fusion or batch) and nothing
 * changes. */
rap_status rap_runtime_set_schedule(rap_runtime *rt, const rap_schedule *s);
/* The schedule whose slices the runtime launches (rap mode: the given or
 * built-in one, or the last swapped in), else NULL. */
const rap_schedule *rap_runtime_schedule(const rap_runtime *rt);
void rap_runtime_get_stats(rap_runtime *rt, rap_runtime_stats *st);
/* Waits for the GPU, then frees everything (batches held go back to the
 * feed). NULL accepted. */
void rap_runtime_free(rap_runtime *rt);

/* ---- GPU helpers (runtime_gpu.cu; RAP_ERR_NO_GPU without CUDA) */
rap_status rap_rt_stream_create(void **stream, bool highest);
void rap_rt_stream_free(void *stream);
rap_status rap_rt_event_create(void **ev);
/* An event for ordering streams only (no timing: cheaper to record and to
 * wait on; bench/RESULTS.md, "timing events"). */
rap_status rap_rt_sync_event_create(void **ev);
void rap_rt_event_free(void *ev);
rap_status rap_rt_record(void *ev, void *stream);
rap_status rap_rt_wait(void *stream, void *ev);
rap_status rap_rt_event_sync(void *ev);
/* Waits for ev like rap_rt_event_sync, but at most limit_s seconds: past
 * that RAP_ERR_INTERNAL saying that `what` hangs (for waits that can only
 * outlast the limit through a bug). */
rap_status rap_rt_event_wait(void *ev, double limit_s, const char *what);
/* *done: the event has completed (cudaEventQuery). */
rap_status rap_rt_event_done(void *ev, bool *done);
rap_status rap_rt_elapsed(void *e0, void *e1, float *ms);
rap_status rap_rt_h2d(void *dst, const void *src, size_t n, void *stream);
rap_status rap_rt_host_alloc(void **p, size_t n);
void rap_rt_host_free(void *p);
/* *dev: the device's address of pinned host memory p (rap_rt_host_alloc). */
rap_status rap_rt_host_dev_ptr(void *p, void **dev);
/* Queues on stream a one-thread kernel that stores the float at src
 * (device) into dst, pinned host memory by its device address
 * (rap_rt_host_dev_ptr): readable on the host once an event recorded
 * after it has completed. A copy engine's 4-byte copy at the end of each
 * step cost about 10 µs (bench/RESULTS.md, 2026-11-29, commit d5c4077). */
rap_status rap_rt_store_f32(float *dst, const float *src, void *stream);
/* The model's device loss scalar (float, GPU model). */
rap_status rap_rt_model_loss_ptr(const rap_model *m, const float **loss_dev);
rap_status rap_rt_mem_used(size_t *used);
/* Free device memory of the current GPU (cudaMemGetInfo). */
rap_status rap_rt_mem_free(size_t *free_b);
/* Device -> device copy, and zeroing, of n bytes, asynchronous on stream. */
rap_status rap_rt_d2d(void *dst, const void *src, size_t n, void *stream);
rap_status rap_rt_zero(void *dst, size_t n, void *stream);
/* cudaSetDevice for the calling thread (--gpus: rank r's thread uses GPU r). */
rap_status rap_rt_set_device(int device);
/* GPUs visible (cudaGetDeviceCount). */
rap_status rap_rt_device_count(int *n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_RUNTIME_H */
