/* runtime.c -- the co-running runtime (runtime.h, docs/RUNTIME.md). GPU
 * calls go through runtime_gpu.cu. */
#include "run/runtime.h"

#include "core/core.h"
#include "data/shard.h"
#include "dist/hybrid.h"
#include "prep/exec_internal.h"
#include "run/graph.h"
#include "run/input.h"
#include "run/mps.h"
#include "run/pack.h"
#include "run/queue.h"
#include "run/train.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ================================================================ modes */

static const char *const g_mode_names[RAP_MODE_COUNT] = {"ideal", "cpu", "sequential",
                                                         "stream", "mps", "rap"};

const char *rap_mode_name(rap_mode m)
{
    return (int)m >= 0 && m < RAP_MODE_COUNT ? g_mode_names[m] : "?";
}

int rap_mode_parse(const char *s)
{
    for (int m = 0; m < RAP_MODE_COUNT; m++)
        if (s && !strcmp(s, g_mode_names[m]))
            return m;
    return -1;
}

rap_status rap_mode_list_parse(const char *spec, rap_mode *modes, int max, int *n)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int m = rap_mode_parse(tok);
        if (m < 0)
            return rap_fail(RAP_ERR_ARG, "--modes \"%s\": unknown mode \"%s\" (expected ideal, cpu, "
                            "sequential, stream, mps or rap)", spec, tok);
        for (int i = 0; i < *n; i++)
            if ((int)modes[i] == m)
                return rap_fail(RAP_ERR_ARG, "--modes \"%s\": %s given twice", spec, tok);
        if (*n >= max)
            return rap_fail(RAP_ERR_ARG, "--modes \"%s\": at most %d modes", spec, max);
        modes[(*n)++] = (rap_mode)m;
    }
    if (*n == 0)
        return rap_fail(RAP_ERR_ARG, "--modes: empty");
    return RAP_OK;
}

bool rap_mode_available(rap_mode m, rap_device dev, char *why, size_t why_len)
{
    const char *w = NULL;
    if (dev == RAP_CPU && m != RAP_MODE_CPU && m != RAP_MODE_SEQUENTIAL)
        w = "needs the GPU (--device gpu): on the CPU only the cpu and sequential modes run";
    if (w && why && why_len)
        snprintf(why, why_len, "%s", w);
    return w == NULL;
}

/* ================================================================ runtime */

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

static const char *const g_phase_names[4] = {"emb_forward", "mlp_forward", "mlp_backward",
                                             "emb_backward"};

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

/* A cpu-mode job: one CPU executor and packing buffer, and (GPU model) a
 * pinned staging block with the model batch's layout. */
typedef struct cpu_job {
    rap_prep *prep;
    rap_input *input;
    void *stage;          /* pinned, layout of struct rap_runtime's blk_* (GPU model) */
    rap_batch share;      /* row share (placement batch): this rank's rows of the batch */
    rap_model_batch mb;   /* host pointers */
    rap_step_info info;
    int64_t seq;
    bool marker, end;
    rap_status st;
    char msg[1024];
    int state;            /* 0 free, 1 working, 2 done */
} cpu_job;

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

struct rap_runtime {
    rap_runtime_config cfg;
    rap_mode mode;
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
     * from and joined back into prep_s with events (launch_window) */
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
                              * (check_hooked_order) */
    int pack_after;          /* rap mode: pack_window(), set at create */
    rap_row_batch *deferred; /* rap mode: the next batch, copied at copy_at's start
                              * (copy_window) when no emb_forward slice needs it */
    rap_window copy_at;
    /* ideal */
    int ideal_count, ideal_at;
    /* mps */
    rap_mps_client *mps;
    int mps_slot;         /* slot trained last, released after its step; -1 none */
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
     * host for the CPU model), batch b at byte sh_at[b] (layout: shard_layout) */
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

static bool on_gpu(const rap_runtime *rt) { return rt->dev == RAP_GPU; }

/* ---- markers */

static rap_status push_marker(rap_runtime *rt, const rap_row_batch *b)
{
    if (rt->n_markers >= RT_MARKERS)
        return rap_fail(RAP_ERR_DATA, "runtime: %d passes in a row gave no training rows",
                        RT_MARKERS);
    rap_step_info *m = &rt->markers[(rt->marker_head + rt->n_markers++) % RT_MARKERS];
    memset(m, 0, sizeof *m);
    m->seq = b->seq;
    m->pass = b->pass;
    m->pos_after = b->pos_after;
    m->pass_rows = b->pass_rows;
    m->end_of_pass = true;
    return RAP_OK;
}

static bool pop_marker(rap_runtime *rt, rap_step_info *info)
{
    if (rt->n_markers == 0)
        return false;
    *info = rt->markers[rt->marker_head];
    rt->marker_head = (rt->marker_head + 1) % RT_MARKERS;
    rt->n_markers--;
    return true;
}

static void info_of(rap_step_info *i, const rap_row_batch *b)
{
    memset(i, 0, sizeof *i);
    i->rows = b->batch.rows;
    i->seq = b->seq;
    i->pass = b->pass;
    i->pos_after = b->pos_after;
    i->pass_rows = b->pass_rows;
    i->end_of_pass = b->end_of_pass;
}

/* Next training batch of the feed; markers before it are queued. NULL at
 * the end, or (upto_marker) once a marker has been queued. */
static rap_status fetch_ex(rap_runtime *rt, rap_row_batch **out, bool upto_marker)
{
    *out = NULL;
    while (!rt->feed_end && !(upto_marker && rt->n_markers > 0)) {
        rap_row_batch *b;
        double w, t0 = rap_trace_host_begin(rt->cfg.trace, "wait for data");
        RAP_TRY(rap_rowfeed_next(rt->feed, &b, &w));
        rap_trace_host_end(rt->cfg.trace, RAP_TRACK_MAIN, "wait for data", "wait",
                           b ? b->seq : RAP_TRACE_NO_ARG, t0);
        rt->st.starved_s += w;
        if (w > 1e-3)
            rt->st.starved_steps++;
        if (!b) {
            rt->feed_end = true;
            break;
        }
        if (b->batch.rows == 0) {
            rap_status st = push_marker(rt, b);
            rap_rowfeed_release(rt->feed, b);
            RAP_TRY(st);
            continue;
        }
        *out = b;
        return RAP_OK;
    }
    return RAP_OK;
}

static rap_status fetch(rap_runtime *rt, rap_row_batch **out) { return fetch_ex(rt, out, false); }

/* ---- ring of per-step losses and timings */

static void record_step(rap_runtime *rt, const rap_step_record *r)
{
    rap_runtime_stats *s = &rt->st;
    for (int p = 0; p < 4; p++)
        s->phase_ms[p] += r->phase_ms[p];
    s->grad_comm_ms += r->grad_comm_ms;
    s->exposed_ms += r->exposed_ms;
    s->step_ms += r->step_ms;
    if (s->records && s->n_records < rt->cfg.max_records)
        s->records[s->n_records++] = *r;
    s->timed_steps++;
}

/* GPU: reads back entry e (its events have completed). */
/* The GPU step is the hybrid step with phase hooks (EV_GC recorded). */
static bool hooked(const rap_runtime *rt) { return rt->cfg.train_fn && rt->cfg.hybrid; }

/* The event where the wait for a batch ends. On one GPU the training
 * stream records the first phase's event right after the wait, so that
 * event ends the wait too and EV_W1 is not recorded: the extra record,
 * queued behind the wait for a batch the preprocessing stream made in the
 * step before, cost rap 1-2 µs a step more than ideal (bench/RESULTS.md,
 * ninth session). A hybrid step (train_fn) may queue work before its first
 * phase: it records EV_W1. */
static int w1_ev(const rap_runtime *rt) { return rt->cfg.train_fn ? EV_W1 : EV_P0; }

static rap_status record_w1(rap_runtime *rt, ring_entry *e)
{
    return w1_ev(rt) == EV_W1 ? rap_rt_record(e->ev[EV_W1], rt->train_s) : RAP_OK;
}

static rap_status ring_finish(rap_runtime *rt, ring_entry *e)
{
    rap_step_record r;
    memset(&r, 0, sizeof r);
    RAP_TRY(rap_rt_elapsed(e->ev[EV_W0], e->ev[w1_ev(rt)], &r.exposed_ms));
    for (int p = 0; p < 4; p++)
        RAP_TRY(rap_rt_elapsed(e->ev[EV_P0 + p],
                               e->ev[p == 2 && hooked(rt) ? EV_GC : EV_P0 + p + 1],
                               &r.phase_ms[p]));
    if (hooked(rt))
        RAP_TRY(rap_rt_elapsed(e->ev[EV_GC], e->ev[EV_P3], &r.grad_comm_ms));
    RAP_TRY(rap_rt_elapsed(e->ev[EV_W0], e->ev[EV_END], &r.step_ms));
    e->rec = r;
    e->loss = (double)*e->h_loss;
    e->inflight = false;
    e->done = true;
    record_step(rt, &r);
    return RAP_OK;
}

/* Reads back every in-flight entry whose step has completed, in order;
 * wait: also the ones not completed yet up to step index upto. */
static rap_status ring_poll(rap_runtime *rt, int64_t wait_upto)
{
    while (rt->ring_head < rt->trained) {
        ring_entry *e = &rt->ring[rt->ring_head % RT_RING];
        if (e->inflight) {
            bool done;
            if (rt->ring_head <= wait_upto) {
                RAP_TRY(rap_rt_event_wait(e->ev[EV_END], RT_GPU_WAIT_S, "a training step"));
                done = true;
            } else {
                RAP_TRY(rap_rt_event_done(e->ev[EV_END], &done));
            }
            if (!done)
                break;
            RAP_TRY(ring_finish(rt, e));
        }
        rt->ring_head++;
    }
    return RAP_OK;
}

/* The entry for the next trained step (its previous content read back). */
static rap_status ring_acquire(rap_runtime *rt, int64_t seq, ring_entry **out)
{
    ring_entry *e = &rt->ring[rt->trained % RT_RING];
    if (e->inflight)
        RAP_TRY(ring_poll(rt, rt->trained - RT_RING));
    e->index = rt->trained;
    e->seq = seq;
    e->done = false;
    e->inflight = on_gpu(rt);
    memset(&e->rec, 0, sizeof e->rec);
    *out = e;
    return RAP_OK;
}

bool rap_runtime_next_loss(rap_runtime *rt, bool wait, int64_t *step_index, double *loss,
                           rap_status *st)
{
    *st = RAP_OK;
    while (rt->loss_head < rt->trained) {
        ring_entry *e = &rt->ring[rt->loss_head % RT_RING];
        if (e->index != rt->loss_head) { /* overwritten: never asked for in time */
            rt->loss_head++;
            continue;
        }
        if (e->inflight) {
            *st = ring_poll(rt, wait ? rt->loss_head : -1);
            if (*st != RAP_OK)
                return false;
            if (e->inflight)
                return false;
        }
        if (!e->done) {
            rt->loss_head++;
            continue;
        }
        e->done = false;
        *step_index = e->index;
        *loss = e->loss;
        rt->loss_head++;
        return true;
    }
    return false;
}

/* ---- preprocessing launches */

static rap_status launch_slice(rap_runtime *rt, rt_slot *s, int k, int d0, int d1, int64_t r0,
                               int64_t r1, void *stream, int track)
{
    if (r0 >= s->prep->rows) /* a piece past the end of a short (last) batch */
        return RAP_OK;
    int sp = -1;
    if (rt->cfg.trace && on_gpu(rt)) {
        char name[RAP_TRACE_NAME];
        snprintf(name, sizeof name, "k%d %s", k, rap_kernel_op_name(&rt->fus->kernels[k]));
        sp = rap_trace_gpu_begin(rt->cfg.trace, track, name, "prep", s->info.seq, stream);
    }
    RAP_TRY(rap_prep_run_kernel(s->prep, k, d0, d1, r0, r1, stream));
    if (sp >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, sp, stream));
    return RAP_OK;
}

/* All kernels of slot s's batch on stream (after its copy), packing, ready. */
static rap_status prep_whole(rap_runtime *rt, rt_slot *s, void *stream, int track)
{
    if (on_gpu(rt))
        RAP_TRY(rap_rt_wait(stream, s->ev_copied));
    int nk = rap_prep_n_kernels(s->prep);
    for (int k = 0; k < nk; k++)
        RAP_TRY(launch_slice(rt, s, k, 0, rap_prep_n_descs(s->prep, k), 0, RAP_ROWS_END, stream,
                             track));
    RAP_TRY(rap_input_make(s->input, s->prep, &s->mb));
    if (on_gpu(rt))
        RAP_TRY(rap_rt_record(s->ev_ready, stream));
    return RAP_OK;
}

/* Lanes used in the level just launched back into prep_s. */
static rap_status join_lanes(rap_runtime *rt, unsigned used)
{
    for (int j = 1; j < rt->n_lanes; j++)
        if (used >> j & 1) {
            RAP_TRY(rap_rt_record(rt->lane_ev[j], rt->lane_s[j - 1]));
            RAP_TRY(rap_rt_wait(rt->prep_s, rt->lane_ev[j]));
        }
    return RAP_OK;
}

/* Window w's slices of slot s's batch on the preprocessing stream, or with
 * lanes level by level: a level's slices on their lanes at once (forked
 * from prep_s, joined back before the next level and at the end). */
static rap_status launch_window(rap_runtime *rt, rt_slot *s, rap_window w)
{
    int n;
    const rap_slice *sl = rap_schedule_window(rt->sched, w, &n);
    int first = rt->sched->win_first[w], level = -1;
    unsigned used = 0;
    for (int i = 0; i < n; i++) {
        int64_t r0 = sl[i].r0, r1 = sl[i].r1;
        if (sl[i].shares > 0) { /* rows of a share of this batch (a rank's own rows) */
            rap_slice_rows(&sl[i], s->prep->rows, &r0, &r1);
            if (r0 >= r1)
                continue;
        }
        void *stream = rt->prep_s;
        if (rt->n_lanes > 1) {
            int lv = rt->sl_level[first + i], lane = rt->sl_lane[first + i];
            if (lv != level) { /* the next level: after every slice of the one before */
                RAP_TRY(join_lanes(rt, used));
                RAP_TRY(rap_rt_record(rt->fork_ev, rt->prep_s));
                level = lv;
                used = 0;
            }
            if (lane > 0) {
                stream = rt->lane_s[lane - 1];
                if (!(used >> lane & 1))
                    RAP_TRY(rap_rt_wait(stream, rt->fork_ev));
            }
            used |= 1u << lane;
        }
        RAP_TRY(launch_slice(rt, s, sl[i].kernel, sl[i].d0, sl[i].d1, r0, r1, stream,
                             RAP_TRACK_PREP));
    }
    return join_lanes(rt, used);
}

/* Levels and lanes of the schedule's slices (prep_lanes > 1): inside a
 * window, a slice's level is one more than that of every earlier slice of
 * the window computing one of its inputs or running one of its
 * descriptors (row pieces stay in order); a level's slices take the lanes
 * in turn, except that kernels with computed offsets all take lane 0 (their
 * length scans share the executor's scratch). */
static rap_status plan_lanes(rap_runtime *rt)
{
    const rap_schedule *sc = rt->sched;
    const rap_plan *p = rt->plan;
    const rap_fusion *f = rt->fus;
    rt->sl_level = rap_malloc(sizeof(int) * (size_t)(2 * sc->n_slices + 1), "prep lanes");
    int *plev = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "prep lanes");
    if (!rt->sl_level || !plev) {
        rap_free(plev);
        return RAP_ERR_NOMEM;
    }
    rt->sl_lane = rt->sl_level + sc->n_slices;
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        for (int i = 0; i < p->n_nodes; i++)
            plev[i] = -1; /* level of the window's latest slice computing node i */
        int next[64] = {0}; /* per level: the next lane */
        for (int i = sc->win_first[w]; i < sc->win_first[w + 1]; i++) {
            const rap_slice *sl = &sc->slices[i];
            const rap_kernel *kn = &f->kernels[sl->kernel];
            int lv = 0;
            for (int j = sl->d0; j < sl->d1; j++) {
                int node = kn->nodes[j], in = p->nodes[node].input;
                if (in >= 0 && plev[in] + 1 > lv)
                    lv = plev[in] + 1;
                if (plev[node] + 1 > lv)
                    lv = plev[node] + 1;
            }
            if (lv > 63)
                lv = 63;
            for (int j = sl->d0; j < sl->d1; j++)
                if (plev[kn->nodes[j]] < lv)
                    plev[kn->nodes[j]] = lv;
            bool computed = kn->n > 0 && p->nodes[kn->nodes[0]].off == RAP_OFF_COMPUTED;
            rt->sl_level[i] = lv;
            rt->sl_lane[i] = computed ? 0 : next[lv]++ % rt->n_lanes;
        }
    }
    rap_free(plev);
    return RAP_OK;
}

/* The raw rows the executor loads of feed batch b: b itself, or with a
 * row share (placement batch) this rank's rows of it, copied into share. */
static const rap_batch *share_rows(const rap_runtime *rt, const rap_batch *b, rap_batch *share)
{
    if (rt->cfg.row_share_ranks <= 1)
        return b;
    int64_t r0, n;
    rap_hybrid_rows(b->rows, rt->cfg.row_share_ranks, rt->cfg.row_share_rank, &r0, &n);
    share->rows = 0;
    rap_batch_append(share, b, r0, n);
    share->first_row = b->first_row + r0;
    return share;
}

/* Copies feed batch b into slot s's executor (GPU: on the copy stream after
 * the slot's last training step; b is released once the copy is done). */
static rap_status load_slot(rap_runtime *rt, rt_slot *s, rap_row_batch *b)
{
    info_of(&s->info, b);
    if (!on_gpu(rt)) {
        rap_status st = rap_prep_load(s->prep, share_rows(rt, &b->batch, &s->share));
        rap_rowfeed_release(rt->feed, b);
        RAP_TRY(st);
        s->full = true;
        return RAP_OK;
    }
    s->rb = b; /* released by release_copied, also on failure below */
    RAP_TRY(rap_rt_wait(rt->copy_s, s->ev_done));
    int sp = rap_trace_gpu_begin(rt->cfg.trace, RAP_TRACK_COPY, "copy batch", "copy", b->seq,
                                 rt->copy_s);
    /* a row share is the slot's own pinned raw batch: its previous copy
     * must be done before it is overwritten (a pageable one made every
     * copy synchronous: half the throughput on two GPUs, bench/RESULTS.md) */
    if (rt->cfg.row_share_ranks > 1)
        RAP_TRY(rap_rt_event_wait(s->ev_copied, RT_GPU_WAIT_S, "a batch's copy"));
    RAP_TRY(rap_prep_load(s->prep, share_rows(rt, &b->batch, &s->share)));
    if (sp >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, sp, rt->copy_s));
    RAP_TRY(rap_rt_record(s->ev_copied, rt->copy_s));
    s->full = true;
    return RAP_OK;
}

static void job_release(rap_runtime *rt, cpu_job *j);

/* Gives back feed batches and jobs whose copies are done (waits for copies
 * enqueued a step ago; all of them when all). */
static rap_status release_copied(rap_runtime *rt, int except)
{
    for (int i = 0; i < rt->S; i++) {
        rt_slot *s = &rt->slots[i];
        if (i == except || (!s->rb && !s->job))
            continue;
        if (on_gpu(rt))
            RAP_TRY(rap_rt_event_wait(s->ev_copied, RT_GPU_WAIT_S, "the copy of a batch"));
        if (s->rb)
            rap_rowfeed_release(rt->feed, s->rb);
        if (s->job)
            job_release(rt, s->job);
        s->rb = NULL;
        s->job = NULL;
    }
    return RAP_OK;
}

/* ---- training phases */

static const rap_run_phase_fn g_phases[4] = {rap_model_emb_forward, rap_model_mlp_forward,
                                     rap_model_mlp_backward, rap_model_emb_backward};

/* GPU: the four phases of slot s's batch on the training stream, timing
 * events in e; rap mode: nx's window slices released by the phase events. */
/* Whether window w of the schedule has slices. */
static bool window_used(const rap_runtime *rt, rap_window w)
{
    int n = 0;
    if (rt->sched)
        rap_schedule_window(rt->sched, w, &n);
    return n > 0;
}

/* The window after whose slices the next batch is packed: the last window
 * with slices in the order the step runs them (the four phases; with the
 * hooked hybrid step grad_comm between mlp_backward and emb_backward), or
 * -1 when a window after the step has slices (exposed; grad_comm without
 * the hooked step: the packing waits for the step's end) or none has. */
static const rap_window g_hyb_win[RAP_HYB_PHASES] = {
    RAP_WIN_EMB_FORWARD, RAP_WIN_MLP_FORWARD, RAP_WIN_MLP_BACKWARD, RAP_WIN_GRAD_COMM,
    RAP_WIN_EMB_BACKWARD};
static const int g_hyb_ev[RAP_HYB_PHASES] = {EV_P0, EV_P1, EV_P2, EV_GC, EV_P3};
static const char *const g_hyb_names[RAP_HYB_PHASES] = {"emb_forward", "mlp_forward",
                                                        "mlp_backward", "grad_comm",
                                                        "emb_backward"};

/* rap mode: the phase at whose start the next batch's copy is queued when
 * no emb_forward slice needs the batch. Beside emb_forward the copy (2 MB
 * at batch 4096) slowed the memory-bound lookups by 10-13 µs a step;
 * beside mlp_backward's GEMMs it cost 1-3 µs a step less than beside
 * mlp_forward's (bench/RESULTS.md, sixth session). So: the start of
 * mlp_backward when the first window with slices comes after it, else of
 * mlp_forward (slices beside mlp_backward would otherwise wait for the
 * whole copy). */
static rap_window copy_window(const rap_runtime *rt)
{
    bool early = rt->sched && (window_used(rt, RAP_WIN_MLP_FORWARD) ||
                               window_used(rt, RAP_WIN_MLP_BACKWARD));
    return early ? RAP_WIN_MLP_FORWARD : RAP_WIN_MLP_BACKWARD;
}

static int pack_window(const rap_runtime *rt)
{
    bool hook = hooked(rt);
    if (!rt->sched || window_used(rt, RAP_WIN_EXPOSED) ||
        (!hook && window_used(rt, RAP_WIN_GRAD_COMM)))
        return -1;
    int last = -1;
    for (int k = 0; k < (hook ? RAP_HYB_PHASES : 4); k++) {
        rap_window w = hook ? g_hyb_win[k] : (rap_window)k;
        if (window_used(rt, w))
            last = (int)w;
    }
    if (hook && rt->gc_late && last == RAP_WIN_GRAD_COMM)
        last = RAP_WIN_EMB_BACKWARD; /* grad_comm's slices follow emb_backward's */
    return last;
}

/* The hooked hybrid step runs grad_comm before emb_backward; schedules
 * list (and validate) emb_backward first. The schedule is checked once in
 * the hooked order; where that breaks a dependency (a grad_comm slice
 * reading what an emb_backward slice makes), grad_comm's slices run right
 * after emb_backward's instead (rt->gc_late), with a warning. */
static rap_status check_hooked_order(rap_runtime *rt)
{
    if (rap_schedule_validate_hybrid(rt->sched, rt->plan, rt->fus, rt->B) != RAP_OK) {
        rt->gc_late = true;
        rap_warn("%s; grad_comm's slices run after emb_backward's instead", rap_last_error());
    }
    return RAP_OK;
}

/* One step's phases as they are queued: timing and sync events, trace
 * spans and, in rap mode, the next batch's slices beside each phase. */
typedef struct {
    rap_runtime *rt;
    rt_slot *s;          /* the batch trained */
    ring_entry *e;
    rt_slot *nx;         /* the next batch (its slices run beside), or NULL */
    int pack_after;      /* pack_window(), for nx */
    int span;            /* trace span of the phase queued, -1 none */
} step_q;

static rap_status q_begin(step_q *q, rap_window w, int ev, const char *name)
{
    rap_runtime *rt = q->rt;
    /* where the phase starts: its timing, and for the preprocessing stream
     * the release of the window's slices (recorded before the phase's
     * kernels: recording it after them released the slices only when the
     * phase had ended, one window late, bench/RESULTS.md) */
    RAP_TRY(rap_rt_record(q->e->ev[ev], rt->train_s));
    if (w == rt->copy_at && rt->deferred) { /* the next batch's copy (copy_window) */
        rap_row_batch *b = rt->deferred;
        rt->deferred = NULL;
        RAP_TRY(rap_rt_wait(rt->copy_s, q->e->ev[ev])); /* phase copy_at's start */
        RAP_TRY(load_slot(rt, q->nx, b));
        RAP_TRY(rap_rt_wait(rt->prep_s, q->nx->ev_copied));
    }
    q->span = rap_trace_gpu_begin(rt->cfg.trace, RAP_TRACK_TRAIN, name, "phase", q->s->info.seq,
                                  rt->train_s);
    return RAP_OK;
}

static rap_status q_end(step_q *q, rap_window w, int ev)
{
    rap_runtime *rt = q->rt;
    if (q->span >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, q->span, rt->train_s));
    q->span = -1;
    /* the phase's kernels are queued before the window's slices: the slices
     * wait for the phase's start on the GPU either way, but when the host
     * is just in time, training kernels must reach the GPU first (blocks
     * are not pre-empted; bench/RESULTS.md) */
    if (q->nx && window_used(rt, w) && !(rt->gc_late && w == RAP_WIN_GRAD_COMM)) {
        RAP_TRY(rap_rt_wait(rt->prep_s, q->e->ev[ev]));
        RAP_TRY(launch_window(rt, q->nx, w));
        if (rt->gc_late && w == RAP_WIN_EMB_BACKWARD) /* check_hooked_order */
            RAP_TRY(launch_window(rt, q->nx, RAP_WIN_GRAD_COMM));
        if ((int)w == q->pack_after) {
            RAP_TRY(rap_input_make(q->nx->input, q->nx->prep, &q->nx->mb));
            RAP_TRY(rap_rt_record(q->nx->ev_ready, rt->prep_s));
        }
    }
    return RAP_OK;
}

static rap_status hyb_begin(void *ctx, rap_hybrid_phase p)
{
    return q_begin(ctx, g_hyb_win[p], g_hyb_ev[p], g_hyb_names[p]);
}

static rap_status hyb_end(void *ctx, rap_hybrid_phase p)
{
    return q_end(ctx, g_hyb_win[p], g_hyb_ev[p]);
}

/* Phase p of a slot's step from its CUDA graph (--cuda-graph): captured at
 * the slot's first full batch, then replayed (one launch instead of the
 * phase's dozens: the host stays ahead of the GPU). A phase that cannot be
 * captured runs directly, and graphs are off from then on (*use). */
static rap_status phase_graph(rap_runtime *rt, int gi, int p, const rap_model_batch *mb, bool *use)
{
    if (!rt->graphs[gi]) {
        int memsets = 0;
        rap_status st = rap_run_graph_capture(rt->train_s, g_phases[p], rt->model, mb,
                                              &rt->graphs[gi], &memsets);
        if (st == RAP_OK && memsets > 0)
            rap_debug("--cuda-graph: %s phase: %d memset nodes made kernel nodes",
                      g_phase_names[p], memsets);
        if (st != RAP_OK) {
            rap_warn("--cuda-graph: cannot capture the %s phase (%s); running without graphs",
                     g_phase_names[p], rap_last_error());
            rt->graphs[gi] = NULL;
            rt->graph_failed = true;
            *use = false;
            return g_phases[p](rt->model, mb);
        }
    }
    return rap_run_graph_launch(rt->graphs[gi], rt->train_s);
}

static rap_status phases_gpu(rap_runtime *rt, rt_slot *s, ring_entry *e, rt_slot *nx)
{
    rap_trace *tr = rt->cfg.trace;
    int gi = -1; /* the slot's index: its graph */
    for (int i = 0; rt->graphs && i < rt->S; i++)
        if (s == &rt->slots[i])
            gi = i;
    bool use_graph = rt->graphs && !rt->graph_failed && s->mb.rows == rt->B && gi >= 0 &&
                     !rt->cfg.train_fn;
    bool hook = hooked(rt);
    step_q q = {rt, s, e, nx, nx ? rt->pack_after : -1, -1};
    if (rt->cfg.train_fn && !hook) { /* one span: the next batch's slices first, then the step */
        if (nx) {
            RAP_TRY(rap_rt_wait(rt->prep_s, nx->ev_copied));
            for (int p = 0; p < 4; p++)
                RAP_TRY(launch_window(rt, nx, (rap_window)p));
        }
        RAP_TRY(rap_rt_record(e->ev[EV_P0], rt->train_s));
        int sp = rap_trace_gpu_begin(tr, RAP_TRACK_TRAIN, "hybrid step", "phase", s->info.seq,
                                     rt->train_s);
        double loss = 0;
        RAP_TRY(rt->cfg.train_fn(rt->cfg.train_ctx, &s->mb, s->info.rows, &loss));
        if (sp >= 0)
            RAP_TRY(rap_trace_gpu_end(tr, sp, rt->train_s));
        for (int p = 1; p < 4; p++)
            RAP_TRY(rap_rt_record(e->ev[EV_P0 + p], rt->train_s));
        if (!rt->cfg.train_fn_model_loss)
            *e->h_loss = (float)loss; /* read back by ring_finish once EV_END has completed */
    } else if (hook) { /* the hybrid step calls q_begin/q_end at its phases */
        if (nx && !rt->deferred)
            RAP_TRY(rap_rt_wait(rt->prep_s, nx->ev_copied));
        rap_hybrid_hooks hk = {hyb_begin, hyb_end, &q};
        rap_hybrid_set_hooks(rt->cfg.hybrid, &hk);
        double loss = 0;
        rap_status st = rt->cfg.train_fn(rt->cfg.train_ctx, &s->mb, s->info.rows, &loss);
        rap_hybrid_set_hooks(rt->cfg.hybrid, NULL);
        RAP_TRY(st);
        if (!rt->cfg.train_fn_model_loss)
            *e->h_loss = (float)loss;
        if (q.pack_after >= 0)
            nx = NULL; /* packed already: nothing left for the end of the step */
    } else {
        if (nx && !rt->deferred)
            RAP_TRY(rap_rt_wait(rt->prep_s, nx->ev_copied));
        for (int p = 0; p < 4; p++) {
            RAP_TRY(q_begin(&q, (rap_window)p, EV_P0 + p, g_phase_names[p]));
            if (use_graph)
                RAP_TRY(phase_graph(rt, gi * 4 + p, p, &s->mb, &use_graph));
            else
                RAP_TRY(g_phases[p](rt->model, &s->mb));
            RAP_TRY(q_end(&q, (rap_window)p, EV_P0 + p));
        }
        if (q.pack_after >= 0)
            nx = NULL; /* packed already: nothing left for the end of the step */
    }
    /* the loss to the host by a kernel, not a copy (rap_rt_store_f32) */
    if (!rt->cfg.train_fn || rt->cfg.train_fn_model_loss)
        RAP_TRY(rap_rt_store_f32(e->h_loss_dev, rt->loss_dev, rt->train_s));
    RAP_TRY(rap_rt_record(e->ev[EV_END], rt->train_s));
    if (nx) {
        RAP_TRY(rap_rt_wait(rt->prep_s, e->ev[EV_END]));
        if (!hook)
            RAP_TRY(launch_window(rt, nx, RAP_WIN_GRAD_COMM));
        RAP_TRY(launch_window(rt, nx, RAP_WIN_EXPOSED));
        RAP_TRY(rap_input_make(nx->input, nx->prep, &nx->mb));
        RAP_TRY(rap_rt_record(nx->ev_ready, rt->prep_s));
    }
    RAP_TRY(rap_rt_record(s->ev_done, rt->train_s));
    return RAP_OK;
}

/* CPU model: the four phases with host timing; exposed_ms given. */
static rap_status phases_cpu(rap_runtime *rt, const rap_model_batch *mb, int64_t rows,
                             int64_t seq, double exposed_s)
{
    ring_entry *e;
    RAP_TRY(ring_acquire(rt, seq, &e));
    double t[5];
    if (rt->cfg.train_fn) { /* hybrid parallel: one call, timed as one span */
        t[0] = rap_now();
        RAP_TRY(rt->cfg.train_fn(rt->cfg.train_ctx, mb, rows, &e->loss));
        t[1] = t[2] = t[3] = t[4] = rap_now();
        rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, "hybrid step", "phase", seq, t[0],
                            t[4]);
    } else {
        for (int p = 0; p < 4; p++) {
            t[p] = rap_now();
            RAP_TRY(g_phases[p](rt->model, mb));
        }
        t[4] = rap_now();
        for (int p = 0; p < 4; p++)
            rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, g_phase_names[p], "phase", seq,
                                t[p], t[p + 1]);
        RAP_TRY(rap_model_last_loss(rt->model, &e->loss));
    }
    for (int p = 0; p < 4; p++)
        e->rec.phase_ms[p] = (float)((t[p + 1] - t[p]) * 1e3);
    e->rec.exposed_ms = (float)(exposed_s * 1e3);
    e->rec.step_ms = (float)((t[4] - t[0] + exposed_s) * 1e3);
    e->done = true;
    record_step(rt, &e->rec);
    rt->trained++;
    rt->ring_head = rt->trained;
    return RAP_OK;
}

/* ---- cpu mode workers */

static void job_release(rap_runtime *rt, cpu_job *j)
{
    pthread_mutex_lock(&rt->jm);
    j->state = 0;
    pthread_cond_broadcast(&rt->jcv);
    pthread_mutex_unlock(&rt->jm);
}

/* Copies the packed batch of job j into its staging block (blk_* layout). */
static void stage_job(rap_runtime *rt, cpu_job *j)
{
    char *b = j->stage;
    const rap_model_batch *mb = &j->mb;
    int64_t r = mb->rows;
    memcpy(b + rt->blk_dense, mb->dense, sizeof(float) * (size_t)(r * rt->n_dense));
    memcpy(b + rt->blk_label, mb->label, sizeof(float) * (size_t)r);
    for (int t = 0; t < rt->n_tables; t++) {
        memcpy(b + rt->blk_off[t], mb->off[t], sizeof(int64_t) * (size_t)(r + 1));
        memcpy(b + rt->blk_ids[t], mb->ids[t], sizeof(int64_t) * (size_t)mb->off[t][r]);
    }
}

typedef struct {
    rap_runtime *rt;
    int w;
} worker_arg;

static worker_arg g_dummy_arg; /* silences unused warnings in some builds */

static void *worker_main(void *arg)
{
    rap_runtime *rt = ((worker_arg *)arg)->rt;
    int w = ((worker_arg *)arg)->w;
    rap_free(arg);
    int track = rt->trace_tracks ? rt->trace_tracks[w] : -1;
    for (;;) {
        pthread_mutex_lock(&rt->jm);
        cpu_job *j = NULL;
        while (!rt->quit) {
            for (int i = 0; i < rt->J && !j; i++)
                if (rt->jobs[i].state == 0)
                    j = &rt->jobs[i];
            if (j)
                break;
            pthread_cond_wait(&rt->jcv, &rt->jm);
        }
        if (rt->quit || !j) {
            pthread_mutex_unlock(&rt->jm);
            break;
        }
        j->state = 1;
        pthread_mutex_unlock(&rt->jm);

        pthread_mutex_lock(&rt->fm);
        if (rt->feed_done) {
            pthread_mutex_unlock(&rt->fm);
            job_release(rt, j);
            break;
        }
        rap_row_batch *b = NULL;
        double waited = 0;
        rap_status st = rap_rowfeed_next(rt->feed, &b, &waited);
        j->seq = rt->next_seq++;
        rt->worker_starved_s += waited;
        if (st != RAP_OK || !b)
            rt->feed_done = true;
        pthread_mutex_unlock(&rt->fm);

        j->st = st;
        j->marker = j->end = false;
        j->msg[0] = 0;
        if (st != RAP_OK) {
            snprintf(j->msg, sizeof j->msg, "%s", rap_last_error());
        } else if (!b) {
            j->end = true;
        } else {
            info_of(&j->info, b);
            if (b->batch.rows == 0) {
                j->marker = true;
                rap_rowfeed_release(rt->feed, b);
            } else {
                double t0 = rap_trace_host_begin(rt->cfg.trace, "prep batch");
                st = rap_prep_load(j->prep, share_rows(rt, &b->batch, &j->share));
                rap_rowfeed_release(rt->feed, b);
                if (st == RAP_OK)
                    st = rap_prep_run(j->prep);
                if (st == RAP_OK)
                    st = rap_input_make(j->input, j->prep, &j->mb);
                if (st == RAP_OK && j->stage)
                    stage_job(rt, j);
                if (st != RAP_OK) {
                    j->st = st;
                    snprintf(j->msg, sizeof j->msg, "%s", rap_last_error());
                }
                if (track >= 0)
                    rap_trace_host_end(rt->cfg.trace, track, "prep batch", "prep", j->seq, t0);
            }
        }
        bool last = j->end || j->st != RAP_OK;
        pthread_mutex_lock(&rt->jm);
        j->state = 2;
        pthread_cond_broadcast(&rt->jcv);
        pthread_mutex_unlock(&rt->jm);
        if (last)
            break;
    }
    return NULL;
}

/* The next job in feed order (blocks: the wait is preprocessing exposed to
 * the trainer). NULL at the end; markers queued. */
static rap_status fetch_job(rap_runtime *rt, cpu_job **out, double *waited)
{
    *out = NULL;
    *waited = 0;
    while (!rt->feed_end) {
        double t0 = rap_now();
        double h0 = rap_trace_host_begin(rt->cfg.trace, "wait for cpu workers");
        pthread_mutex_lock(&rt->jm);
        cpu_job *j = NULL;
        for (;;) {
            for (int i = 0; i < rt->J && !j; i++)
                if (rt->jobs[i].state == 2 && rt->jobs[i].seq == rt->want_seq)
                    j = &rt->jobs[i];
            if (j)
                break;
            pthread_cond_wait(&rt->jcv, &rt->jm);
        }
        pthread_mutex_unlock(&rt->jm);
        rap_trace_host_end(rt->cfg.trace, RAP_TRACK_MAIN, "wait for cpu workers", "wait",
                           rt->want_seq, h0);
        *waited += rap_now() - t0;
        rt->want_seq++;
        if (j->st != RAP_OK) {
            rt->feed_end = true;
            rap_status st = rap_fail(j->st, "%s", j->msg);
            job_release(rt, j);
            return st;
        }
        if (j->end) {
            rt->feed_end = true;
            job_release(rt, j);
            break;
        }
        if (j->marker) {
            rap_row_batch fake;
            memset(&fake, 0, sizeof fake);
            fake.seq = j->info.seq;
            fake.pass = j->info.pass;
            fake.pos_after = j->info.pos_after;
            fake.pass_rows = j->info.pass_rows;
            job_release(rt, j);
            RAP_TRY(push_marker(rt, &fake));
            continue;
        }
        *out = j;
        return RAP_OK;
    }
    return RAP_OK;
}

/* cpu mode, GPU model: job j's staging block -> slot s (copy stream, after
 * the slot's last step); ready = copied. */
static rap_status load_job(rap_runtime *rt, rt_slot *s, cpu_job *j)
{
    s->info = j->info;
    s->job = j;
    RAP_TRY(rap_rt_wait(rt->copy_s, s->ev_done));
    int sp = rap_trace_gpu_begin(rt->cfg.trace, RAP_TRACK_COPY, "copy batch", "copy", j->info.seq,
                                 rt->copy_s);
    RAP_TRY(rap_rt_h2d(s->dev_block, j->stage, rt->blk_bytes, rt->copy_s));
    if (sp >= 0)
        RAP_TRY(rap_trace_gpu_end(rt->cfg.trace, sp, rt->copy_s));
    RAP_TRY(rap_rt_record(s->ev_copied, rt->copy_s));
    RAP_TRY(rap_rt_record(s->ev_ready, rt->copy_s));
    s->mb.rows = j->mb.rows;
    s->full = true;
    return RAP_OK;
}

/* ---- steps per mode */

/* GPU: wait for slot s's batch (timed), then its phases. */
static rap_status train_slot_gpu(rap_runtime *rt, rt_slot *s, rt_slot *nx)
{
    ring_entry *e;
    RAP_TRY(ring_acquire(rt, s->info.seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    if (rt->mode == RAP_MODE_SEQUENTIAL)
        RAP_TRY(prep_whole(rt, s, rt->train_s, RAP_TRACK_TRAIN));
    else
        RAP_TRY(rap_rt_wait(rt->train_s, s->ev_ready));
    RAP_TRY(record_w1(rt, e));
    RAP_TRY(phases_gpu(rt, s, e, rt->mode == RAP_MODE_RAP ? nx : NULL));
    rt->trained++;
    return RAP_OK;
}

static rap_status step_pipelined(rap_runtime *rt, rap_step_info *info)
{
    rt_slot *cur = &rt->slots[rt->cur];
    RAP_TRY(release_copied(rt, -1));
    if (!cur->full && !rt->feed_end) { /* prime: the first batch, fully exposed */
        if (rt->mode == RAP_MODE_CPU) {
            cpu_job *j;
            double w;
            RAP_TRY(fetch_job(rt, &j, &w));
            if (j)
                RAP_TRY(load_job(rt, cur, j));
        } else {
            rap_row_batch *b;
            RAP_TRY(fetch(rt, &b));
            if (b) {
                RAP_TRY(load_slot(rt, cur, b));
                if (rt->mode != RAP_MODE_SEQUENTIAL)
                    RAP_TRY(prep_whole(rt, cur, rt->prep_s, RAP_TRACK_PREP));
            }
        }
    }
    if (pop_marker(rt, info))
        return RAP_OK;
    if (!cur->full) {
        info->end = true;
        return RAP_OK;
    }
    int ni = (rt->cur + 1) % rt->S;
    rt_slot *nx = &rt->slots[ni];
    double exposed_host = 0;
    if (rt->mode == RAP_MODE_CPU) {
        cpu_job *j;
        RAP_TRY(fetch_job(rt, &j, &exposed_host));
        if (j)
            RAP_TRY(load_job(rt, nx, j));
    } else {
        rap_row_batch *b;
        RAP_TRY(fetch(rt, &b));
        /* rap mode without emb_forward slices: the copy waits for the lookups
         * (phases_gpu); cur's step then takes nx as the batch to come */
        bool defer = b && rt->mode == RAP_MODE_RAP && (!rt->cfg.train_fn || rt->cfg.hybrid) &&
                     !window_used(rt, RAP_WIN_EMB_FORWARD);
        if (defer) {
            rt->deferred = b;
        } else if (b) {
            RAP_TRY(load_slot(rt, nx, b));
            if (rt->mode == RAP_MODE_STREAM)
                RAP_TRY(prep_whole(rt, nx, rt->prep_s, RAP_TRACK_PREP));
        }
    }
    rap_status tst = train_slot_gpu(rt, cur, nx->full || rt->deferred ? nx : NULL);
    if (rt->deferred) { /* not reached: hand it back */
        rap_rowfeed_release(rt->feed, rt->deferred);
        rt->deferred = NULL;
    }
    RAP_TRY(tst);
    /* cpu mode: waiting for the workers is waiting for data */
    rt->st.starved_s += exposed_host;
    if (exposed_host > 1e-3)
        rt->st.starved_steps++;
    *info = cur->info;
    cur->full = false;
    rt->cur = ni;
    return RAP_OK;
}

static rap_status step_ideal(rap_runtime *rt, rap_step_info *info)
{
    if (rt->ideal_at >= rt->ideal_count) {
        if (pop_marker(rt, info))
            return RAP_OK;
        if (rt->ideal_count > 0)
            RAP_TRY(rap_run_stream_sync(rt->train_s));
        double t0 = rap_now();
        rt->ideal_count = rt->ideal_at = 0;
        while (rt->ideal_count < rt->S && !rt->feed_end && rt->n_markers == 0) {
            /* The group (S = 8 or 32 slots) is larger than the feed's pool
             * (4 batches): holding every loaded batch until the group is
             * full would leave the feed thread no batch to fill while we
             * wait for the next one (the deadlock of ideal mode). Before
             * each fetch, the batches whose copies are done go back, all but
             * the one loaded last (its copy may still run; none with a pool
             * of 1): at most one is held while the feed fills the next. */
            RAP_TRY(release_copied(rt, rap_rowfeed_n_batches(rt->feed) > 1 ? rt->ideal_count - 1 : -1));
            rap_row_batch *b;
            RAP_TRY(fetch_ex(rt, &b, true)); /* a group ends at the end of a pass */
            if (!b)
                break;
            rt_slot *s = &rt->slots[rt->ideal_count++];
            RAP_TRY(load_slot(rt, s, b));
            RAP_TRY(prep_whole(rt, s, rt->prep_s, RAP_TRACK_PREP));
        }
        RAP_TRY(rap_run_stream_sync(rt->prep_s));
        RAP_TRY(release_copied(rt, -1));
        rt->st.preload_s += rap_now() - t0;
        if (rt->ideal_count == 0) {
            if (pop_marker(rt, info))
                return RAP_OK;
            info->end = true;
            return RAP_OK;
        }
    }
    rt_slot *s = &rt->slots[rt->ideal_at++];
    ring_entry *e;
    RAP_TRY(ring_acquire(rt, s->info.seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    RAP_TRY(rap_rt_wait(rt->train_s, s->ev_ready));
    RAP_TRY(record_w1(rt, e));
    RAP_TRY(phases_gpu(rt, s, e, NULL));
    rt->trained++;
    *info = s->info; /* a marker queued while filling the group follows its batches */
    return RAP_OK;
}

/* ---- ideal mode from a rap shard */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

bool rap_runtime_is_shard(const char *path)
{
    struct stat sb;
    if (!path || !path[0] || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char m[8];
    bool is = fread(m, 1, 8, f) == 8 && !memcmp(m, "RAPSHARD", 8);
    fclose(f);
    return is;
}

/* Layout of one resident model batch of `rows` rows whose table t holds
 * nids[t] ids, every piece 256-byte aligned: dense (rows, ND) f32, label
 * (rows) f32, then per table off (rows+1) i64 and ids (nids[t]) i64.
 * Returns its bytes; with base, points mb at the pieces. */
static size_t shard_layout(const rap_runtime *rt, int64_t rows, const int64_t *nids, char *base,
                           rap_model_batch *mb)
{
    size_t at = 0, dense = at;
    at += align256(sizeof(float) * (size_t)(rows * rt->n_dense));
    size_t label = at;
    at += align256(sizeof(float) * (size_t)rows);
    if (base) {
        memset(mb, 0, sizeof *mb);
        mb->rows = rows;
        mb->dense = (const float *)(base + dense);
        mb->label = (const float *)(base + label);
    }
    for (int t = 0; t < rt->n_tables; t++) {
        if (base)
            mb->off[t] = (const int64_t *)(base + at);
        at += align256(sizeof(int64_t) * (size_t)(rows + 1));
        if (base)
            mb->ids[t] = (const int64_t *)(base + at);
        at += align256(sizeof(int64_t) * (size_t)(nids[t] > 0 ? nids[t] : 1));
    }
    return at;
}

static void kind_desc(char *buf, size_t n, rap_kind kind, int width, bool bounded, int64_t lo,
                      int64_t hi)
{
    const char *k = kind == RAP_SPARSE ? "sparse" : kind == RAP_VECTOR ? "vector" : "dense";
    if (bounded)
        snprintf(buf, n, "%s, width %d, bound [%lld, %lld]", k, width, (long long)lo,
                 (long long)hi);
    else
        snprintf(buf, n, "%s, width %d, unbounded", k, width);
}

/* The shard's columns must be the plan's output columns, in order. */
static rap_status shard_check_cols(const rap_runtime *rt, rap_shard_reader *r)
{
    const char *path = rt->cfg.shard, *pl = rt->plan->source;
    const char *fix = "the shard needs the plan it was written with (write it again with "
                      "`rap prep --plan PLAN --format bin` for this plan)";
    int nc = rap_shard_n_cols(r);
    const rap_shard_col *sc = rap_shard_cols(r);
    for (int c = 0; c < nc || c < rt->plan->n_cols; c++) {
        if (c >= nc)
            return rap_fail(RAP_ERR_ARG, "%s: the shard has %d columns, plan %s has %d (column "
                            "%s is missing): %s", path, nc, pl, rt->plan->n_cols,
                            rt->plan->cols[c].name, fix);
        if (c >= rt->plan->n_cols)
            return rap_fail(RAP_ERR_ARG, "%s: the shard has %d columns, plan %s has %d (column "
                            "%s is not in the plan): %s", path, nc, pl, rt->plan->n_cols,
                            sc[c].name, fix);
        const rap_node *n = &rt->plan->nodes[rt->plan->cols[c].node];
        const char *name = rt->plan->cols[c].name;
        if (strcmp(sc[c].name, name))
            return rap_fail(RAP_ERR_ARG, "%s: column %d is %s in the shard, %s in plan %s: %s",
                            path, c, sc[c].name, name, pl, fix);
        bool nb = n->kind == RAP_SPARSE || n->bounded;
        if (sc[c].kind != n->kind || sc[c].width != n->width || sc[c].bounded != n->bounded ||
            (nb && (sc[c].lo != n->lo || sc[c].hi != n->hi))) {
            char a[128], b[128];
            kind_desc(a, sizeof a, sc[c].kind, sc[c].width, sc[c].bounded, sc[c].lo, sc[c].hi);
            kind_desc(b, sizeof b, n->kind, n->width, n->bounded, n->lo, n->hi);
            return rap_fail(RAP_ERR_ARG, "%s: column %s is %s in the shard, %s in plan %s: %s",
                            path, name, a, b, pl, fix);
        }
    }
    return RAP_OK;
}

/* Packs one shard batch (label, cols in plan order) into the model-batch
 * layout at dst (host memory of shard_layout's size); checks ids against
 * the tables. */
static rap_status shard_pack(const rap_runtime *rt, int64_t b, const float *label, int64_t rows,
                             const rap_host_column *cols, rap_pack_col *pc, char *dst)
{
    rap_model_batch mb;
    shard_layout(rt, rows, rt->sh_nids + b * rt->n_tables, dst, &mb);
    int nd = 0, t = 0;
    const rap_model_config *mc = rap_model_config_of(rt->model);
    for (int c = 0; c < rt->plan->n_cols; c++) {
        const rap_host_column *h = &cols[c];
        if (h->kind != RAP_SPARSE) {
            pc[nd].val = h->val;
            pc[nd].valid = h->valid;
            pc[nd].width = h->width;
            nd++;
            continue;
        }
        int64_t n = h->off[rows];
        for (int64_t i = 0; i < n; i++)
            if (h->ids[i] < 0 || h->ids[i] >= mc->table_rows[t])
                return rap_fail(RAP_ERR_DATA, "%s: batch %lld: column %s holds id %lld, outside "
                                "its table [0, %lld)", rt->cfg.shard, (long long)b,
                                rt->plan->cols[c].name, (long long)h->ids[i],
                                (long long)mc->table_rows[t]);
        memcpy((void *)mb.off[t], h->off, sizeof(int64_t) * (size_t)(rows + 1));
        memcpy((void *)mb.ids[t], h->ids, sizeof(int64_t) * (size_t)n);
        t++;
    }
    memcpy((void *)mb.label, label, sizeof(float) * (size_t)rows);
    return rap_pack_dense_cpu(pc, nd, rows, rt->n_dense, (float *)mb.dense);
}

/* Reads the shard twice: once to check it and size its batches (nothing
 * allocated on the device yet; the GPU's free memory is checked), once to
 * pack every batch and place it (upload on the GPU). */
static rap_status shard_load(rap_runtime *rt)
{
    const char *path = rt->cfg.shard;
    int T = rt->n_tables, NC = rt->plan->n_cols;
    rap_shard_reader *r = NULL;
    rap_host_column *cols = rap_calloc(sizeof *cols * (size_t)(NC ? NC : 1), "shard columns");
    rap_pack_col *pc = rap_calloc(sizeof *pc * (size_t)(NC ? NC : 1), "shard columns");
    char *stage = NULL;
    float *label = NULL;
    rap_status st = cols && pc ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_shard_open(path, &r);
    if (st == RAP_OK)
        st = shard_check_cols(rt, r);
    int64_t nb = r ? rap_shard_batches(r) : 0;
    if (st == RAP_OK && nb < 1)
        st = rap_fail(RAP_ERR_DATA, "%s: the shard holds no batch", path);
    if (st == RAP_OK) {
        rt->sh_n = nb;
        rt->sh_rows = rap_calloc(sizeof(int64_t) * (size_t)nb, "shard batches");
        rt->sh_pos = rap_calloc(sizeof(int64_t) * (size_t)nb, "shard batches");
        rt->sh_at = rap_calloc(sizeof(size_t) * (size_t)nb, "shard batches");
        rt->sh_nids = rap_calloc(sizeof(int64_t) * (size_t)(nb * T), "shard batches");
        if (!rt->sh_rows || !rt->sh_pos || !rt->sh_at || !rt->sh_nids)
            st = RAP_ERR_NOMEM;
    }
    /* pass 1: rows and ids per batch, the layout, the bytes */
    size_t total = 0, max_batch = 0;
    int64_t pos = 0;
    for (int64_t b = 0; st == RAP_OK && b < nb; b++) {
        int64_t rows = 0;
        st = rap_shard_next(r, &label, &rows, cols);
        if (st != RAP_OK)
            break;
        if (rows == 0) {
            st = rap_fail(RAP_ERR_DATA, "%s: ends after %lld batches, its footer says %lld", path,
                          (long long)b, (long long)nb);
            break;
        }
        if (rows > rt->B || (rows != rt->B && b < nb - 1)) {
            st = rap_fail(RAP_ERR_ARG, "%s: batch %lld holds %lld rows, the model's batch is "
                          "%lld: ideal mode trains a shard's batches as they are (no "
                          "re-batching), so --batch must equal the shard's batch size "
                          "(`rap prep --batch`; only its last batch may be shorter)", path,
                          (long long)b, (long long)rows, (long long)rt->B);
            break;
        }
        for (int c = 0, t = 0; c < NC; c++)
            if (cols[c].kind == RAP_SPARSE)
                rt->sh_nids[b * T + t++] = cols[c].off[rows];
        rt->sh_rows[b] = rows;
        pos += rows;
        rt->sh_pos[b] = pos;
        rt->sh_at[b] = total;
        size_t bytes = shard_layout(rt, rows, rt->sh_nids + b * T, NULL, NULL);
        total += bytes;
        if (bytes > max_batch)
            max_batch = bytes;
        free(label);
        label = NULL;
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    }
    rap_shard_close_reader(r);
    r = NULL;
    rt->st.shard_bytes = total;
    rt->st.shard_batches = nb;
    rt->st.shard_rows = pos;
    if (st == RAP_OK && on_gpu(rt)) {
        size_t fr = 0, tot = 0;
        st = rap_prep_gpu_meminfo(&fr, &tot);
        size_t margin = (size_t)64 << 20;
        if (st == RAP_OK && total + margin > fr)
            st = rap_fail(RAP_ERR_NOMEM, "%s: its %lld preprocessed batches need %zu bytes "
                          "(%.2f GB) resident on the GPU (+ %zu bytes margin), %zu bytes "
                          "(%.2f GB) are free: write a smaller shard (`rap prep --max-rows`)",
                          path, (long long)nb, total, (double)total / 1e9, margin, fr,
                          (double)fr / 1e9);
    }
    /* pass 2: pack each batch and place it */
    if (st == RAP_OK) {
        if (on_gpu(rt)) {
            st = rap_cuda_malloc((void **)&rt->sh_block, total, "shard batches (ideal mode)");
            if (st == RAP_OK && !(stage = rap_malloc(max_batch, "shard staging")))
                st = RAP_ERR_NOMEM;
        } else if (!(rt->sh_block = rap_aligned_alloc(total, "shard batches (ideal mode)"))) {
            st = RAP_ERR_NOMEM;
        }
    }
    if (st == RAP_OK)
        st = rap_shard_open(path, &r);
    for (int64_t b = 0; st == RAP_OK && b < nb; b++) {
        int64_t rows = 0;
        st = rap_shard_next(r, &label, &rows, cols);
        if (st != RAP_OK)
            break;
        if (rows != rt->sh_rows[b]) {
            st = rap_fail(RAP_ERR_DATA, "%s: batch %lld changed while being read", path,
                          (long long)b);
            break;
        }
        for (int c = 0, t = 0; c < NC; c++)
            if (cols[c].kind == RAP_SPARSE && cols[c].off[rows] != rt->sh_nids[b * T + t++])
                st = rap_fail(RAP_ERR_DATA, "%s: batch %lld changed while being read", path,
                              (long long)b);
        char *dst = on_gpu(rt) ? stage : rt->sh_block + rt->sh_at[b];
        if (st == RAP_OK)
            st = shard_pack(rt, b, label, rows, cols, pc, dst);
        if (st == RAP_OK && on_gpu(rt))
            st = rap_cuda_upload(rt->sh_block + rt->sh_at[b], stage,
                                shard_layout(rt, rows, rt->sh_nids + b * T, NULL, NULL));
        free(label);
        label = NULL;
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    }
    if (r)
        rap_shard_close_reader(r);
    free(label);
    if (cols)
        for (int c = 0; c < NC; c++)
            rap_host_column_free(&cols[c]);
    rap_free(stage);
    rap_free(cols);
    rap_free(pc);
    if (st == RAP_OK && rt->cfg.shard_start_rows > 0) {
        int64_t b = 0;
        while (b < nb && rt->sh_pos[b] < rt->cfg.shard_start_rows)
            b++;
        if (b >= nb || rt->sh_pos[b] != rt->cfg.shard_start_rows)
            return rap_fail(RAP_ERR_ARG, "%s: resume position %lld (rows into the pass) does not "
                            "end a batch of the shard (%lld rows in %lld batches)", path,
                            (long long)rt->cfg.shard_start_rows, (long long)pos, (long long)nb);
        rt->sh_seq = b + 1;
    }
    if (st == RAP_OK)
        rap_info("ideal mode: %s: %lld batches (%lld rows) resident on the %s, %.1f MB", path,
                 (long long)nb, (long long)pos, on_gpu(rt) ? "GPU" : "CPU", (double)total / 1e6);
    return st;
}

/* ideal from a shard: the next resident batch, cycling; nothing read or
 * preprocessed. Sequence numbers count batches over all passes. */
static rap_status step_shard(rap_runtime *rt, rap_step_info *info)
{
    int64_t seq = rt->sh_seq, n = rt->sh_n;
    if (rt->cfg.shard_passes > 0 && seq >= rt->cfg.shard_passes * n) {
        info->end = true;
        return RAP_OK;
    }
    int64_t b = seq % n;
    info->rows = rt->sh_rows[b];
    info->seq = seq;
    info->pass = seq / n;
    info->pos_after = rt->sh_pos[b];
    info->pass_rows = rt->sh_pos[b];
    info->end_of_pass = b == n - 1;
    rt->sh_seq++;
    if (!on_gpu(rt)) {
        rap_model_batch mb;
        shard_layout(rt, info->rows, rt->sh_nids + b * rt->n_tables, rt->sh_block + rt->sh_at[b],
                     &mb);
        return phases_cpu(rt, &mb, mb.rows, seq, 0);
    }
    rt_slot *s = &rt->slots[0];
    shard_layout(rt, info->rows, rt->sh_nids + b * rt->n_tables, rt->sh_block + rt->sh_at[b],
                 &s->mb);
    s->info = *info;
    ring_entry *e;
    RAP_TRY(ring_acquire(rt, seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    RAP_TRY(record_w1(rt, e));
    RAP_TRY(phases_gpu(rt, s, e, NULL));
    rt->trained++;
    return RAP_OK;
}

static rap_status step_cpu_model(rap_runtime *rt, rap_step_info *info)
{
    if (rt->mode == RAP_MODE_CPU) {
        double w = 0;
        if (!rt->job_cur && !rt->feed_end)
            RAP_TRY(fetch_job(rt, &rt->job_cur, &w));
        if (pop_marker(rt, info))
            return RAP_OK;
        if (!rt->job_cur) {
            info->end = true;
            return RAP_OK;
        }
        cpu_job *j = rt->job_cur;
        rap_status st = phases_cpu(rt, &j->mb, j->info.rows, j->info.seq, w);
        *info = j->info;
        rt->job_cur = NULL;
        job_release(rt, j);
        return st;
    }
    rt_slot *s = &rt->slots[0];
    if (!s->full && !rt->feed_end) {
        rap_row_batch *b;
        RAP_TRY(fetch(rt, &b));
        if (b)
            RAP_TRY(load_slot(rt, s, b));
    }
    if (pop_marker(rt, info))
        return RAP_OK;
    if (!s->full) {
        info->end = true;
        return RAP_OK;
    }
    s->full = false;
    double t0 = rap_now();
    RAP_TRY(rap_prep_run(s->prep));
    RAP_TRY(rap_input_make(s->input, s->prep, &s->mb));
    double t1 = rap_now();
    rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, "prep batch", "prep", s->info.seq, t0, t1);
    RAP_TRY(phases_cpu(rt, &s->mb, s->info.rows, s->info.seq, t1 - t0));
    *info = s->info;
    return RAP_OK;
}

/* mps mode: the next ready slot of the server (its ready event waited for
 * on the training stream), trained, then given back after its step. */
static rap_status step_mps(rap_runtime *rt, rap_step_info *info)
{
    if (rt->mps_end) {
        info->end = true;
        return RAP_OK;
    }
    ring_entry *e;
    RAP_TRY(ring_acquire(rt, rt->mps_seq, &e));
    RAP_TRY(rap_rt_record(e->ev[EV_W0], rt->train_s));
    rt_slot s;
    memset(&s, 0, sizeof s);
    int slot = -1;
    int64_t rows = 0;
    double h0 = rap_now();
    double t0 = rap_trace_host_begin(rt->cfg.trace, "wait for mps server");
    rap_status st = rap_mps_client_next(rt->mps, rt->train_s, &slot, &s.mb, &rows);
    rap_trace_host_end(rt->cfg.trace, RAP_TRACK_MAIN, "wait for mps server", "wait",
                       rt->mps_seq, t0);
    double w = rap_now() - h0;
    rt->st.starved_s += w;
    if (w > 1e-3)
        rt->st.starved_steps++;
    RAP_TRY(st);
    if (slot < 0) {
        rt->mps_end = true;
        e->inflight = false;
        e->index = -1;
        info->end = true;
        return RAP_OK;
    }
    s.mb.rows = rows;
    s.info.rows = rows;
    s.info.seq = rt->mps_seq++;
    RAP_TRY(record_w1(rt, e));
    /* phases_gpu records the slot's done event: a scratch one */
    s.ev_done = rt->slots[0].ev_done;
    RAP_TRY(phases_gpu(rt, &s, e, NULL));
    rt->trained++;
    RAP_TRY(rap_mps_client_release(rt->mps, slot, rt->train_s));
    *info = s.info;
    return RAP_OK;
}

rap_status rap_runtime_step(rap_runtime *rt, rap_step_info *info)
{
    memset(info, 0, sizeof *info);
    if (!rt)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_step: runtime is NULL");
    double t0 = rap_now(), pre0 = rt->st.preload_s;
    rap_status st;
    if (rt->sh_n > 0)
        st = step_shard(rt, info);
    else if (!on_gpu(rt))
        st = step_cpu_model(rt, info);
    else if (rt->mode == RAP_MODE_IDEAL)
        st = step_ideal(rt, info);
    else if (rt->mode == RAP_MODE_MPS)
        st = step_mps(rt, info);
    else
        st = step_pipelined(rt, info);
    if (st == RAP_OK && on_gpu(rt))
        st = ring_poll(rt, -1);
    rt->st.wall_s += rap_now() - t0 - (rt->st.preload_s - pre0);
    if (st == RAP_OK && info->rows > 0) {
        rt->st.steps++;
        rt->st.samples += info->rows;
    }
    return st;
}

rap_status rap_runtime_sync(rap_runtime *rt)
{
    if (!rt || !on_gpu(rt))
        return RAP_OK;
    RAP_TRY(rap_run_stream_sync(rt->train_s));
    RAP_TRY(rap_run_stream_sync(rt->prep_s));
    RAP_TRY(rap_run_stream_sync(rt->copy_s));
    RAP_TRY(rap_model_sync(rt->model)); /* reports the model's device error flags */
    return ring_poll(rt, rt->trained);
}

void rap_runtime_get_stats(rap_runtime *rt, rap_runtime_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!rt)
        return;
    *st = rt->st;
    if (rt->mps) {
        rap_mps_stats ms;
        rap_mps_client_get_stats(rt->mps, &ms);
        st->reader = ms.reader;
        st->have_reader = true;
    }
    if (rt->mode == RAP_MODE_CPU && rt->locks) {
        pthread_mutex_lock(&rt->fm);
        st->starved_s += rt->worker_starved_s;
        pthread_mutex_unlock(&rt->fm);
    }
}

/* ---- create and free */

static rap_status make_slot(rap_runtime *rt, rt_slot *s, void *exec_stream, void *pack_stream)
{
    if (on_gpu(rt)) {
        RAP_TRY(rap_rt_sync_event_create(&s->ev_copied));
        RAP_TRY(rap_rt_sync_event_create(&s->ev_ready));
        RAP_TRY(rap_rt_sync_event_create(&s->ev_done));
    }
    if (rt->mode == RAP_MODE_MPS)
        return RAP_OK;
    if (rt->mode == RAP_MODE_CPU) {
        if (!on_gpu(rt))
            return RAP_OK;
        RAP_TRY(rap_cuda_malloc(&s->dev_block, rt->blk_bytes, "cpu mode model batch"));
        char *b = s->dev_block;
        s->mb.dense = (const float *)(b + rt->blk_dense);
        s->mb.label = (const float *)(b + rt->blk_label);
        for (int t = 0; t < rt->n_tables; t++) {
            s->mb.off[t] = (const int64_t *)(b + rt->blk_off[t]);
            s->mb.ids[t] = (const int64_t *)(b + rt->blk_ids[t]);
        }
        return RAP_OK;
    }
    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = rt->dev;
    pc.max_rows = rt->B;
    pc.threads = rt->cfg.prep_threads;
    pc.stream = exec_stream;
    RAP_TRY(rap_prep_create(rt->plan, rt->fus, &pc, &s->prep));
    if (rt->cfg.row_share_ranks > 1)
        RAP_TRY(rap_batch_create(&s->share, rt->plan->schema, rt->B, on_gpu(rt)));
    RAP_TRY(rap_input_create(rt->plan, rt->dev, rt->B, pack_stream, &s->input));
    /* row kernels that compute every dense column pack them in place */
    return rap_input_bind(s->input, s->prep, NULL);
}


rap_status rap_runtime_train_stream_create(void **stream) { return rap_rt_stream_create(stream, true); }

void rap_runtime_free(rap_runtime *rt)
{
    if (!rt)
        return;
    if (on_gpu(rt)) {
        if (rt->train_s)
            rap_run_stream_sync(rt->train_s);
        if (rt->prep_s)
            rap_run_stream_sync(rt->prep_s);
        if (rt->copy_s)
            rap_run_stream_sync(rt->copy_s);
    }
    rap_mps_client_free(rt->mps);
    if (rt->locks) {
        pthread_mutex_lock(&rt->jm);
        rt->quit = true;
        pthread_cond_broadcast(&rt->jcv);
        pthread_mutex_unlock(&rt->jm);
        if (rt->n_started)
            rap_rowfeed_stop(rt->feed); /* a worker may wait for a following reader */
        for (int i = 0; i < rt->n_started; i++)
            pthread_join(rt->tids[i], NULL);
    }
    for (int i = 0; rt->slots && i < rt->S; i++) {
        rt_slot *s = &rt->slots[i];
        if (s->rb)
            rap_rowfeed_release(rt->feed, s->rb);
        rap_input_free(s->input);
        rap_prep_free(s->prep);
        rap_batch_free(&s->share);
        if (s->dev_block)
            rap_cuda_free(s->dev_block);
        rap_rt_event_free(s->ev_copied);
        rap_rt_event_free(s->ev_ready);
        rap_rt_event_free(s->ev_done);
    }
    for (int i = 0; rt->jobs && i < rt->J; i++) {
        rap_input_free(rt->jobs[i].input);
        rap_prep_free(rt->jobs[i].prep);
        rap_rt_host_free(rt->jobs[i].stage);
        rap_batch_free(&rt->jobs[i].share);
    }
    for (int i = 0; i < RT_RING; i++)
        for (int k = 0; k < EV_N; k++) {
            rap_rt_event_free(rt->ring[i].ev[k]);
        }
    rap_rt_host_free(rt->h_losses);
    for (int i = 0; rt->graphs && i < 4 * rt->S; i++)
        rap_run_graph_free(rt->graphs[i]);
    rap_free(rt->graphs);
    if (rt->own_streams) {
        rap_rt_stream_free(rt->prep_s);
        rap_rt_stream_free(rt->copy_s);
    }
    for (int j = 0; j < RAP_RT_MAX_LANES; j++) {
        if (rt->lane_s[j])
            rap_rt_stream_free(rt->lane_s[j]);
        if (rt->lane_ev[j])
            rap_rt_event_free(rt->lane_ev[j]);
    }
    if (rt->fork_ev)
        rap_rt_event_free(rt->fork_ev);
    rap_free(rt->sl_level);
    if (rt->locks) {
        pthread_mutex_destroy(&rt->jm);
        pthread_mutex_destroy(&rt->fm);
        pthread_cond_destroy(&rt->jcv);
    }
    if (rt->sh_block) {
        if (on_gpu(rt))
            rap_cuda_free(rt->sh_block);
        else
            rap_aligned_free(rt->sh_block);
    }
    rap_free(rt->sh_rows);
    rap_free(rt->sh_nids);
    rap_free(rt->sh_pos);
    rap_free(rt->sh_at);
    rap_schedule_free(rt->own_sched);
    rap_free(rt->slots);
    rap_free(rt->jobs);
    rap_free(rt->tids);
    rap_free(rt->blk_off);
    rap_free(rt->blk_ids);
    rap_free(rt->trace_tracks);
    rap_free(rt->st.records);
    rap_free(rt);
}

static rap_status create_inner(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    const rap_model_config *mc = rap_model_config_of(rt->model);
    rt->B = c->batch_rows > 0 ? c->batch_rows : mc->batch;
    rt->n_tables = mc->n_tables;
    rt->n_dense = mc->n_dense;
    if (c->train_fn) { /* hybrid: the plan may be this rank's part (placement owner) */
        int64_t *rows = rap_malloc(sizeof(int64_t) * RAP_MAX_TABLES, "runtime");
        if (!rows)
            return RAP_ERR_NOMEM;
        rap_status st = rap_input_shape(rt->plan, &rt->n_dense, &rt->n_tables, rows);
        rap_free(rows);
        RAP_TRY(st);
    }
    rt->max_bag = mc->max_bag > 0 ? mc->max_bag : 1;
    if (c->row_share_ranks > 1 &&
        (!c->train_fn || c->row_share_rank < 0 || c->row_share_rank >= c->row_share_ranks ||
         rt->mode == RAP_MODE_MPS || c->shard))
        return rap_fail(RAP_ERR_ARG, "runtime: a row share (rank %d of %d) needs train_fn, a "
                        "row feed and a mode other than mps (not %s)",
                        c->row_share_rank, c->row_share_ranks, rap_mode_name(rt->mode));
    if (c->max_records > 0) {
        rt->st.records = rap_calloc(sizeof(rap_step_record) * (size_t)c->max_records, "step records");
        if (!rt->st.records)
            return RAP_ERR_NOMEM;
    }
    for (int i = 0; i < RT_RING; i++)
        rt->ring[i].index = -1;
    if (on_gpu(rt)) {
        rt->train_s = mc->stream;
        if (!rt->train_s)
            return rap_fail(RAP_ERR_ARG, "runtime: the GPU model must run on a stream of its own "
                            "(rap_runtime_train_stream_create)");
        rt->own_streams = true;
        RAP_TRY(rap_rt_stream_create(&rt->prep_s, false));
        RAP_TRY(rap_rt_stream_create(&rt->copy_s, false));
        RAP_TRY(rap_rt_host_alloc((void **)&rt->h_losses, sizeof(float) * RT_RING));
        float *h_losses_dev; /* the same, by the device's address (rap_rt_store_f32) */
        RAP_TRY(rap_rt_host_dev_ptr(rt->h_losses, (void **)&h_losses_dev));
        for (int i = 0; i < RT_RING; i++) {
            rt->ring[i].h_loss = rt->h_losses + i;
            rt->ring[i].h_loss_dev = h_losses_dev + i;
            for (int k = 0; k < EV_N; k++) {
                RAP_TRY(rap_rt_event_create(&rt->ring[i].ev[k]));
            }
        }
        RAP_TRY(rap_rt_model_loss_ptr(rt->model, &rt->loss_dev));
        if (c->train_fn && c->train_fn_model_loss && c->train_loss_dev)
            rt->loss_dev = c->train_loss_dev;
        if (c->trace)
            RAP_TRY(rap_trace_gpu_origin(c->trace, rt->train_s));
    }
    if (c->shard && c->shard[0]) { /* ideal from a shard: one slot of events (GPU), the batches */
        if (on_gpu(rt)) {
            rt->S = 1;
            rt->slots = rap_calloc(sizeof(rt_slot), "runtime slots");
            if (!rt->slots)
                return RAP_ERR_NOMEM;
            RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_copied));
            RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_ready));
            RAP_TRY(rap_rt_event_create(&rt->slots[0].ev_done));
        }
        RAP_TRY(shard_load(rt));
        if (on_gpu(rt))
            rap_rt_mem_used(&rt->st.gpu_bytes_used);
        return RAP_OK;
    }
    /* a schedule given is checked in every mode, also where only rap mode
     * runs it: it names the fusion the run builds, and a cut or foreign
     * one is refused instead of ignored */
    if (c->schedule)
        RAP_TRY(rap_schedule_validate(c->schedule, rt->plan, rt->fus, rt->B));
    if (rt->mode == RAP_MODE_RAP) {
        if (c->schedule) {
            rt->sched = c->schedule;
        } else {
            RAP_TRY(rap_schedule_builtin_embedding(rt->plan, rt->fus, &rt->own_sched));
            RAP_TRY(rap_schedule_validate(rt->own_sched, rt->plan, rt->fus, rt->B));
            rt->sched = rt->own_sched;
        }
        if (c->train_fn && c->hybrid && on_gpu(rt))
            RAP_TRY(check_hooked_order(rt));
        rt->pack_after = pack_window(rt);
        rt->copy_at = copy_window(rt);
        rt->n_lanes = c->prep_lanes > 0 ? c->prep_lanes : RAP_RT_DEFAULT_LANES;
        if (rt->n_lanes > RAP_RT_MAX_LANES)
            return rap_fail(RAP_ERR_ARG, "runtime: %d preprocessing lanes, at most %d",
                            rt->n_lanes, RAP_RT_MAX_LANES);
        if (!on_gpu(rt))
            rt->n_lanes = 1;
        if (rt->n_lanes > 1) {
            RAP_TRY(plan_lanes(rt));
            RAP_TRY(rap_rt_sync_event_create(&rt->fork_ev));
            for (int j = 1; j < rt->n_lanes; j++) {
                RAP_TRY(rap_rt_stream_create(&rt->lane_s[j - 1], false));
                RAP_TRY(rap_rt_sync_event_create(&rt->lane_ev[j]));
            }
        }
    }
    /* cpu mode layout of a model batch (staging and device blocks) */
    if (rt->mode == RAP_MODE_CPU) {
        rt->blk_off = rap_calloc(sizeof(size_t) * (size_t)rt->n_tables, "runtime");
        rt->blk_ids = rap_calloc(sizeof(size_t) * (size_t)rt->n_tables, "runtime");
        if (!rt->blk_off || !rt->blk_ids)
            return RAP_ERR_NOMEM;
        size_t at = 0;
        rt->blk_dense = at;
        at += align256(sizeof(float) * (size_t)(rt->B * rt->n_dense));
        rt->blk_label = at;
        at += align256(sizeof(float) * (size_t)rt->B);
        for (int t = 0; t < rt->n_tables; t++) {
            rt->blk_off[t] = at;
            at += align256(sizeof(int64_t) * (size_t)(rt->B + 1));
            rt->blk_ids[t] = at;
            at += align256(sizeof(int64_t) * (size_t)(rt->B * rt->max_bag));
        }
        rt->blk_bytes = at;
    }
    /* slots */
    switch (rt->mode) {
    case RAP_MODE_IDEAL: rt->S = c->ideal_batches > 0 ? c->ideal_batches : 8; break;
    case RAP_MODE_SEQUENTIAL:
        if (!on_gpu(rt)) {
            rt->S = 1;
            break;
        }
        /* fall through */
    default: rt->S = c->slots >= 2 ? c->slots : 2; break;
    }
    if (rt->mode == RAP_MODE_CPU && !on_gpu(rt))
        rt->S = 0;
    if (rt->mode == RAP_MODE_MPS)
        rt->S = 1;
    if (rt->S > 0) {
        rt->slots = rap_calloc(sizeof(rt_slot) * (size_t)rt->S, "runtime slots");
        if (!rt->slots)
            return RAP_ERR_NOMEM;
    }
    if (c->cuda_graph && on_gpu(rt) && rt->mode != RAP_MODE_MPS && rt->S <= 64) {
        rt->graphs = rap_calloc(sizeof(void *) * 4 * (size_t)rt->S, "graphs");
        if (!rt->graphs)
            return RAP_ERR_NOMEM;
    }
    void *pack_s = rt->mode == RAP_MODE_SEQUENTIAL ? rt->train_s : rt->prep_s;
    for (int i = 0; i < rt->S; i++)
        RAP_TRY(make_slot(rt, &rt->slots[i], rt->copy_s, pack_s));
    /* cpu workers */
    if (rt->mode == RAP_MODE_CPU) {
        rt->K = c->cpu_workers > 0 ? c->cpu_workers : rap_ncores();
        rt->J = rt->K + rt->S + 2;
        rt->jobs = rap_calloc(sizeof(cpu_job) * (size_t)rt->J, "cpu jobs");
        rt->tids = rap_calloc(sizeof(pthread_t) * (size_t)rt->K, "cpu workers");
        if (!rt->jobs || !rt->tids)
            return RAP_ERR_NOMEM;
        for (int i = 0; i < rt->J; i++) {
            cpu_job *j = &rt->jobs[i];
            rap_prep_config pc;
            memset(&pc, 0, sizeof pc);
            pc.device = RAP_CPU;
            pc.max_rows = rt->B;
            pc.threads = 1;
            RAP_TRY(rap_prep_create(rt->plan, rt->fus, &pc, &j->prep));
            RAP_TRY(rap_input_create(rt->plan, RAP_CPU, rt->B, NULL, &j->input));
            if (c->row_share_ranks > 1)
                RAP_TRY(rap_batch_create(&j->share, rt->plan->schema, rt->B, false));
            if (on_gpu(rt))
                RAP_TRY(rap_rt_host_alloc(&j->stage, rt->blk_bytes));
        }
        if (c->trace) {
            rt->trace_tracks = rap_calloc(sizeof(int) * (size_t)rt->K, "trace tracks");
            if (!rt->trace_tracks)
                return RAP_ERR_NOMEM;
            for (int w = 0; w < rt->K; w++) {
                char name[64];
                snprintf(name, sizeof name, "cpu worker %d", w);
                rt->trace_tracks[w] = rap_trace_add_track(c->trace, name, -1);
            }
        }
        pthread_mutex_init(&rt->jm, NULL);
        pthread_mutex_init(&rt->fm, NULL);
        pthread_cond_init(&rt->jcv, NULL);
        rt->locks = true;
        (void)g_dummy_arg;
        for (int w = 0; w < rt->K; w++) {
            worker_arg *a = rap_malloc(sizeof *a, "worker");
            if (!a)
                return RAP_ERR_NOMEM;
            a->rt = rt;
            a->w = w;
            if (pthread_create(&rt->tids[w], NULL, worker_main, a) != 0) {
                rap_free(a);
                return rap_fail(RAP_ERR_INTERNAL, "runtime: cannot start cpu worker %d", w);
            }
            rt->n_started = w + 1;
        }
    }
    if (rt->mode == RAP_MODE_MPS) {
        rap_mps_config mc;
        memset(&mc, 0, sizeof mc);
        mc.plan = c->plan_spec ? c->plan_spec : "default";
        mc.reader = c->reader;
        mc.batch_rows = rt->B;
        mc.n_slots = c->slots >= 2 ? c->slots : 3;
        mc.schema = rt->plan->schema;
        mc.n_dense = rt->n_dense;
        mc.n_tables = rt->n_tables;
        mc.table_rows = rap_model_config_of(rt->model)->table_rows;
        mc.exe = c->mps_exe;
        RAP_TRY(rap_mps_client_create(&mc, &rt->mps));
    }
    if (on_gpu(rt))
        rap_rt_mem_used(&rt->st.gpu_bytes_used);
    return RAP_OK;
}

rap_status rap_runtime_create(const rap_runtime_config *c, rap_model *m, rap_rowfeed *f,
                              rap_runtime **out)
{
    *out = NULL;
    bool shard = c && c->shard && c->shard[0];
    if (shard && c->mode != RAP_MODE_IDEAL)
        return rap_fail(RAP_ERR_ARG, "%s: " RAP_SHARD_NEEDS_IDEAL " (not --mode %s)", c->shard,
                        rap_mode_name(c->mode));
    if (!c || !m || (!f && c->mode != RAP_MODE_MPS && !shard) || !c->plan || !c->fusion)
        return rap_fail(RAP_ERR_ARG, "rap_runtime_create: config, model, feed, plan and fusion "
                        "are required");
    char why[256];
    rap_device dev = rap_model_device(m);
    if (!shard && !rap_mode_available(c->mode, dev, why, sizeof why))
        return rap_fail(RAP_ERR_ARG, "--mode %s: %s", rap_mode_name(c->mode), why);
    rap_runtime *rt = rap_calloc(sizeof *rt, "runtime");
    if (!rt)
        return RAP_ERR_NOMEM;
    rt->cfg = *c;
    rt->mode = c->mode;
    rt->dev = dev;
    rt->model = m;
    rt->feed = f;
    rt->plan = c->plan;
    rt->fus = c->fusion;
    rap_status st = create_inner(rt);
    if (st != RAP_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_runtime_free(rt);
        return rap_fail(st, "%s", msg);
    }
    *out = rt;
    return RAP_OK;
}
