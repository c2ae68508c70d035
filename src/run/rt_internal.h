/*
 * rt_internal.h -- what the runtime's files share (runtime.h's layout):
 * the runtime's private struct, its slots and ring of step results, the
 * table of functions each mode fills, and the functions the files call
 * across. Nothing outside src/run/runtime.c, rt_*.c, mode_*.c and
 * ideal_shard.c includes it.
 *
 * Shapes: B batch rows, S slots, T tables, ND dense inputs, K cpu workers,
 * J cpu jobs.
 */
#ifndef RAP_RUN_RT_INTERNAL_H
#define RAP_RUN_RT_INTERNAL_H

#include "run/input.h"
#include "run/mps.h"
#include "run/runtime.h"

#include <pthread.h>

#define RT_RING 32     /* steps whose loss and timings may be in flight */
#define RT_MARKERS 16  /* end-of-pass markers waiting to be reported */
/* Seconds the host waits for a batch's copy or a step on the GPU before
 * calling it a hang (a step takes milliseconds; a copy waits at most for
 * the step before it). */
#define RT_GPU_WAIT_S 120.0

/* Event boundaries of a step: the wait for its batch (W0, W1), the four
 * phases (P0..P3, END) and, in the hooked hybrid step, the gradients'
 * exchange (GC: from mlp_backward's end to emb_backward's start = P3). */
enum { EV_W0 = 0, EV_W1, EV_P0, EV_P1, EV_P2, EV_P3, EV_END, EV_GC, EV_N };

typedef struct {
    int64_t index;        /* trained-step index it holds, -1 none */
    int64_t seq;
    bool inflight;        /* GPU: events not read yet */
    bool done;            /* loss and record valid, not consumed */
    float *h_loss;        /* GPU: pinned (1) */
    float *h_loss_dev;    /* h_loss by the device's address */
    double loss;
    void *ev[EV_N];      /* timing events; in rap mode also what the preprocessing and
                          * copy streams wait on (one record per boundary: a second,
                          * untimed record beside each cost the training stream about
                          * 2 µs a boundary, bench/RESULTS.md) */
    rap_step_record rec;
} ring_entry;

/* A cpu-mode job (mode_cpu.c): a CPU executor, packing buffer and staging
 * block. */
typedef struct cpu_job cpu_job;

typedef struct {
    rap_prep *prep;
    rap_input *input;
    void *dev_block;      /* cpu mode on the GPU: model batch (blk_* layout) */
    rap_batch share;      /* row share (placement batch): this rank's rows of the batch */
    rap_model_batch mb;
    rap_row_batch *rb;    /* feed batch whose copy may be in flight */
    cpu_job *job;         /* cpu mode: job whose copy may be in flight */
    void *ev_copied, *ev_ready, *ev_done;
    bool full;
    rap_step_info info;
} rt_slot;

/* What a mode does, filled once per mode (mode_*.c) and chosen by
 * rap_runtime_create (runtime.c). The common part around them: the
 * streams, the ring, the schedule check, the slots' and graphs' release,
 * and rap_runtime_sync (the same for every mode). */
typedef struct {
    /* Set-up after the common part: the mode's slots and what else it
     * runs (threads, a process). On failure rap_runtime_free follows. */
    rap_status (*create)(rap_runtime *rt);
    /* One call of rap_runtime_step (the ring is polled after it). */
    rap_status (*step)(rap_runtime *rt, rap_step_info *info);
    /* Adds the mode's own accounting to st; NULL: none. */
    void (*stats)(rap_runtime *rt, rap_runtime_stats *st);
    /* Stops what the mode runs and frees what its create made beyond the
     * slots (also after a failed create; the GPU is idle); NULL: nothing. */
    void (*free)(rap_runtime *rt);
} rt_mode_ops;

struct rap_runtime {
    rap_runtime_config cfg;
    rap_mode mode;
    const rt_mode_ops *ops;
    rap_device dev;
    rap_model *model;
    rap_rowfeed *feed;
    const rap_plan *plan;
    const rap_fusion *fus;
    rap_schedule *own_sched;
    const rap_schedule *sched;
    int64_t B;
    int n_tables, n_dense;
    int64_t max_bag;
    void *train_s, *prep_s, *copy_s;
    bool own_streams;
    /* rap mode, prep_lanes > 1: a window's slices by dependency level, each
     * level's on lanes (lane 0 = prep_s, lane j > 0 = lane_s[j-1]), forked
     * from and joined back into prep_s with events (rt_launch_window) */
    int n_lanes;
    void *lane_s[RAP_RT_MAX_LANES];
    void *lane_ev[RAP_RT_MAX_LANES], *fork_ev;
    int *sl_level, *sl_lane; /* (n_slices of sched) */
    int S;
    rt_slot *slots;
    int cur;              /* slot of the batch to train next */
    bool feed_end;
    rap_step_info markers[RT_MARKERS];
    int n_markers, marker_head;
    ring_entry ring[RT_RING];
    float *h_losses;      /* pinned (RT_RING) */
    const float *loss_dev;
    int64_t trained;      /* steps trained (ring index) */
    int64_t loss_head;    /* next step whose loss next_loss returns */
    int64_t ring_head;    /* oldest step whose entry may still be in flight */
    void **graphs;        /* (S, 4) --cuda-graph: each phase captured per slot
                           * (a graph holds the slot's buffer addresses) */
    bool graph_failed;
    bool gc_late;            /* hooked hybrid step: grad_comm's slices after emb_backward's
                              * (rt_check_hooked_order) */
    int pack_after;          /* rap mode: rt_pack_window(), set at create */
    rap_row_batch *deferred; /* rap mode: the next batch, copied at copy_at's start
                              * (rt_copy_window) when no emb_forward slice needs it */
    rap_window copy_at;
    /* the GPU parse in the windows (rt_parse.c): the feed's gate, released
     * at the start of window w by up to parse_budget[w] lines (-1: all
     * pending, 0: nothing) */
    struct rap_parse_gate *gate;
    int64_t parse_budget[RAP_WIN_COUNT];
    bool parse_tiles; /* RAP_PARSE_RELEASE=tiles: a budget ends mid-job (A/B) */
    /* ideal */
    int ideal_count, ideal_at;
    /* mps */
    rap_mps_client *mps;
    int64_t mps_seq;
    bool mps_end;
    /* cpu mode */
    int K, J;
    cpu_job *jobs;
    pthread_t *tids;
    int n_started;
    pthread_mutex_t jm, fm;
    pthread_cond_t jcv;
    bool locks;
    bool quit, feed_done;
    int64_t next_seq;     /* workers: next feed sequence (under fm) */
    int64_t want_seq;     /* consumer: next job to take */
    double worker_starved_s;
    cpu_job *job_cur;     /* CPU model: the job of the batch to train */
    size_t blk_bytes, blk_dense, blk_label, *blk_off, *blk_ids;
    int *trace_tracks;
    /* ideal from a shard: sh_n resident model batches in sh_block (device, or
     * host for the CPU model), batch b at byte sh_at[b] (layout: rt_shard_layout) */
    int64_t sh_n;
    int64_t *sh_rows;     /* (sh_n) */
    int64_t *sh_nids;     /* (sh_n, T) ids of table t in batch b */
    int64_t *sh_pos;      /* (sh_n) rows of the pass up to and including batch b */
    size_t *sh_at;        /* (sh_n) */
    char *sh_block;
    int64_t sh_seq;       /* sequence number of the next step */
    /* stats */
    rap_runtime_stats st;
};

static inline bool on_gpu(const rap_runtime *rt) { return rt->dev == RAP_GPU; }

/* The GPU step is the hybrid step with phase hooks (EV_GC recorded). */
static inline bool hooked(const rap_runtime *rt) { return rt->cfg.train_fn && rt->cfg.hybrid; }

/* The event where the wait for a batch ends. On one GPU the training
 * stream records the first phase's event right after the wait, so that
 * event ends the wait too and EV_W1 is not recorded: the extra record,
 * queued behind the wait for a batch the preprocessing stream made in the
 * step before, cost rap 1-2 µs a step more than ideal (bench/RESULTS.md,
 * 2026-11-29, commit b82a903). A hybrid step (train_fn) may queue work before its first
 * phase: it records EV_W1. */
static inline int w1_ev(const rap_runtime *rt) { return rt->cfg.train_fn ? EV_W1 : EV_P0; }

static inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* S, the slots mode `mode` makes with config c (gpu: on the GPU); the
 * modes' create functions and rap_runtime_mem_of both use it. */
int rt_mode_slots(const rap_runtime_config *c, rap_mode mode, bool gpu);
/* cpu mode: K workers (*k) and the J = K + S + 2 jobs (returned). */
int rt_cpu_jobs(const rap_runtime_config *c, int S, int *k);
/* The layout of a model batch in one block (cpu mode's staging and device
 * blocks): offsets of the dense input, the labels and table t's offsets
 * and ids (off, ids: T each; any pointer may be NULL); returns its bytes. */
size_t rt_blk_layout(int64_t B, int n_dense, int n_tables, int64_t max_bag, size_t *dense,
                     size_t *label, size_t *off, size_t *ids);

/* ---- the modes (mode_*.c) */

extern const rt_mode_ops rt_mode_ideal_ops;      /* mode_ideal.c: groups of batches */
extern const rt_mode_ops rt_mode_shard_ops;      /* mode_ideal.c: from a rap shard */
extern const rt_mode_ops rt_mode_cpu_ops;        /* mode_cpu.c */
extern const rt_mode_ops rt_mode_sequential_ops; /* mode_gpu.c */
extern const rt_mode_ops rt_mode_stream_ops;     /* mode_gpu.c */
extern const rt_mode_ops rt_mode_rap_ops;        /* mode_gpu.c */
extern const rt_mode_ops rt_mode_mps_ops;        /* mode_mps.c */

/* How a pipelined mode on the GPU fills and trains its slots
 * (rt_step_pipelined, mode_gpu.c; the cpu mode's in mode_cpu.c). */
typedef struct {
    /* Puts the next batch into slot s: prime, the first one (trained
     * next); else the one after it. Nothing at the end of the data (s
     * stays empty). *waited_s: host seconds it waited for preprocessed
     * data (the cpu mode's workers), else left alone. */
    rap_status (*fill)(rap_runtime *rt, rt_slot *s, bool prime, double *waited_s);
    bool prep_in_step;  /* sequential: the batch is preprocessed on the training
                         * stream by the step that trains it */
    bool beside;        /* rap: the next batch's slices run beside the phases */
} rt_pipeline;

/* Trains the batch of the current slot while the next one is filled (the
 * step of the cpu mode on the GPU and of sequential, stream and rap). */
rap_status rt_step_pipelined(rap_runtime *rt, rap_step_info *info, const rt_pipeline *p);
/* cpu mode: gives job j back to the workers (any thread). */
void rt_cpu_job_release(rap_runtime *rt, cpu_job *j);

/* ---- ring of per-step losses and timings (rt_ring.c) */

/* GPU: the pinned losses and the timing events of every entry. */
rap_status rt_ring_create(rap_runtime *rt);
void rt_ring_free(rap_runtime *rt);
/* The entry for the next trained step (its previous content read back). */
rap_status rt_ring_acquire(rap_runtime *rt, int64_t seq, ring_entry **out);
/* Reads back every in-flight entry whose step has completed, in order;
 * also the ones not completed yet up to step index wait_upto (waiting). */
rap_status rt_ring_poll(rap_runtime *rt, int64_t wait_upto);
/* Adds a step's timings to the sums (and the records kept). */
void rt_record_step(rap_runtime *rt, const rap_step_record *r);

/* ---- slots and the batches that fill them (rt_slots.c) */

/* Queues an end-of-pass marker of b (reported by a later step). */
rap_status rt_push_marker(rap_runtime *rt, const rap_row_batch *b);
/* The oldest queued marker into info; false when none. */
bool rt_pop_marker(rap_runtime *rt, rap_step_info *info);
/* The step info of feed batch b. */
void rt_info_of(rap_step_info *i, const rap_row_batch *b);
/* Next training batch of the feed; markers before it are queued. NULL at
 * the end, or (upto_marker) once a marker has been queued. */
rap_status rt_fetch_ex(rap_runtime *rt, rap_row_batch **out, bool upto_marker);
rap_status rt_fetch(rap_runtime *rt, rap_row_batch **out);
/* The raw rows the executor loads of feed batch b: b itself, or with a
 * row share (placement batch) this rank's rows of it, copied into share. */
const rap_batch *rt_share_rows(const rap_runtime *rt, const rap_batch *b, rap_batch *share);
/* Copies feed batch b into slot s's executor (GPU: on the copy stream after
 * the slot's last training step; b is released once the copy is done). */
rap_status rt_load_slot(rap_runtime *rt, rt_slot *s, rap_row_batch *b);
/* Gives back feed batches and jobs whose copies are done (waits for copies
 * enqueued a step ago), all but slot except's (-1: all). */
rap_status rt_release_copied(rap_runtime *rt, int except);
/* All kernels of slot s's batch on stream (after its copy), packing, ready. */
rap_status rt_prep_whole(rap_runtime *rt, rt_slot *s, void *stream, int track);
/* Window w's slices of slot s's batch on the preprocessing stream (with
 * lanes, level by level). */
rap_status rt_launch_window(rap_runtime *rt, rt_slot *s, rap_window w);
/* rap mode: the lanes (prep_lanes) and, with more than one, the levels and
 * lanes of the schedule's slices, their streams and events. */
rap_status rt_lanes_create(rap_runtime *rt);
void rt_lanes_free(rap_runtime *rt);
/* After a schedule swap: the levels and lanes of the new schedule's slices
 * (the lanes' streams and events stay). */
rap_status rt_lanes_replan(rap_runtime *rt);
/* Allocates rt->S slots (none when 0), each with its three events on the
 * GPU and, with prep, its executor (loading on the copy stream), row-share
 * batch and packing buffer (packing on pack_stream). */
rap_status rt_slots_create(rap_runtime *rt, bool prep, void *pack_stream);
/* Gives back the feed batches the slots hold and frees them. */
void rt_slots_free(rap_runtime *rt);

/* ---- training phases and their events (rt_phases.c) */

/* Whether window w of the schedule has slices. */
bool rt_window_used(const rap_runtime *rt, rap_window w);
/* rap mode: the phase at whose start the next batch's copy is queued when
 * no emb_forward slice needs it. */
rap_window rt_copy_window(const rap_runtime *rt);
/* rap mode: the window after whose slices the next batch is packed, -1
 * after the step. */
int rt_pack_window(const rap_runtime *rt);
/* Hooked hybrid step: checks the schedule in the hooked order (sets
 * gc_late where that breaks a dependency). */
rap_status rt_check_hooked_order(rap_runtime *rt);
/* --cuda-graph on the GPU: room for the graphs of each slot's phases. */
rap_status rt_graphs_create(rap_runtime *rt);
void rt_graphs_free(rap_runtime *rt);
/* EV_W1 where it ends the wait for a batch (w1_ev). */
rap_status rt_record_w1(rap_runtime *rt, ring_entry *e);
/* GPU: the four phases of slot s's batch on the training stream, timing
 * events in e; rap mode: nx's window slices released by the phase events. */
rap_status rt_phases_gpu(rap_runtime *rt, rt_slot *s, ring_entry *e, rt_slot *nx);
/* CPU model: the four phases with host timing; exposed_s given. */
rap_status rt_phases_cpu(rap_runtime *rt, const rap_model_batch *mb, int64_t rows,
                         int64_t seq, double exposed_s);

/* ---- the GPU parse in the windows (rt_parse.c) */

/* The feed's gate (none: nothing to do) and the budgets: the schedule's
 * parse lines, or all pending work at one window (RAP_PARSE_WINDOW, else
 * RAP_PARSE_WINDOW_DEFAULT). Errors as rap_parse_window_env's. */
rap_status rt_parse_create(rap_runtime *rt);
/* After a schedule swap: s's budgets when it has any, else the ones in
 * use are kept (a re-planned schedule carries no parse lines). */
void rt_parse_swap(rap_runtime *rt, const rap_schedule *s);
/* Window w starts (event: where the training stream recorded it; NULL
 * on the CPU): its budget of parse work launched beside it. Cannot fail. */
void rt_parse_release(rap_runtime *rt, rap_window w, void *event);
/* The gate's counts into st. */
void rt_parse_stats(rap_runtime *rt, rap_runtime_stats *st);

/* ---- ideal mode from a rap shard (ideal_shard.c) */

/* Layout of one resident model batch of `rows` rows whose table t holds
 * nids[t] ids; returns its bytes; with base, points mb at the pieces. */
size_t rt_shard_layout(const rap_runtime *rt, int64_t rows, const int64_t *nids, char *base,
                       rap_model_batch *mb);
/* Checks the shard against the plan and makes every batch resident. */
rap_status rt_shard_load(rap_runtime *rt);
void rt_shard_free(rap_runtime *rt);

#endif /* RAP_RUN_RT_INTERNAL_H */
