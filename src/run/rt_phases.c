/*
 * rt_phases.c -- a step's training phases and their events
 * (rt_internal.h): the four phases queued on the training stream (or run
 * on the host for the CPU model), the events that time them and end the
 * wait for a batch, a hooked hybrid step's phases, each phase's CUDA graph
 * (--cuda-graph), and in rap mode the release of the next batch's slices
 * beside the phase of their window (and the windows that decide where its
 * copy and packing go).
 */
#include "run/rt_internal.h"

#include "run/graph.h"
#include "run/input.h"
#include "run/progressive.h"

#include <string.h>

static const char *const g_phase_names[4] = {"emb_forward", "mlp_forward", "mlp_backward",
                                             "emb_backward"};

static const rap_run_phase_fn g_phases[4] = {rap_model_emb_forward, rap_model_mlp_forward,
                                     rap_model_mlp_backward, rap_model_emb_backward};

/* Progressive validation: the training forward's logits of batch mb and
 * its labels into the window (after mlp_forward, before the update). */
static rap_status pv_after_forward(rap_runtime *rt, const rap_model_batch *mb)
{
    if (!rt->cfg.progressive)
        return RAP_OK;
    const float *logits;
    RAP_TRY(rap_model_last_logits(rt->model, &logits));
    return rap_progressive_add(rt->cfg.progressive, logits, mb->label, mb->rows);
}

/* ---- windows (rap mode) */

bool rt_window_used(const rap_runtime *rt, rap_window w)
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
 * mlp_forward's (bench/RESULTS.md, 2026-11-29, commit 3a6e1c0). So: the start of
 * mlp_backward when the first window with slices comes after it, else of
 * mlp_forward (slices beside mlp_backward would otherwise wait for the
 * whole copy). */
rap_window rt_copy_window(const rap_runtime *rt)
{
    bool early = rt->sched && (rt_window_used(rt, RAP_WIN_MLP_FORWARD) ||
                               rt_window_used(rt, RAP_WIN_MLP_BACKWARD));
    return early ? RAP_WIN_MLP_FORWARD : RAP_WIN_MLP_BACKWARD;
}

int rt_pack_window(const rap_runtime *rt)
{
    bool hook = hooked(rt);
    if (!rt->sched || rt_window_used(rt, RAP_WIN_EXPOSED) ||
        (!hook && rt_window_used(rt, RAP_WIN_GRAD_COMM)))
        return -1;
    int last = -1;
    for (int k = 0; k < (hook ? RAP_HYB_PHASES : 4); k++) {
        rap_window w = hook ? g_hyb_win[k] : (rap_window)k;
        if (rt_window_used(rt, w))
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
rap_status rt_check_hooked_order(rap_runtime *rt)
{
    if (rap_schedule_validate_hybrid(rt->sched, rt->plan, rt->fus, rt->B) != RAP_OK) {
        rt->gc_late = true;
        rap_warn("%s; grad_comm's slices run after emb_backward's instead", rap_last_error());
    }
    return RAP_OK;
}

/* ---- a step's phases on the GPU */

rap_status rt_record_w1(rap_runtime *rt, ring_entry *e)
{
    return w1_ev(rt) == EV_W1 ? rap_rt_record(e->ev[EV_W1], rt->train_s) : RAP_OK;
}

/* One step's phases as they are queued: timing and sync events, trace
 * spans and, in rap mode, the next batch's slices beside each phase. */
typedef struct {
    rap_runtime *rt;
    rt_slot *s;          /* the batch trained */
    ring_entry *e;
    rt_slot *nx;         /* the next batch (its slices run beside), or NULL */
    int pack_after;      /* rt_pack_window(), for nx */
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
    if (w == rt->copy_at && rt->deferred) { /* the next batch's copy (rt_copy_window) */
        rap_row_batch *b = rt->deferred;
        rt->deferred = NULL;
        RAP_TRY(rap_rt_wait(rt->copy_s, q->e->ev[ev])); /* phase copy_at's start */
        RAP_TRY(rt_load_slot(rt, q->nx, b));
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
    if (q->nx && rt_window_used(rt, w) && !(rt->gc_late && w == RAP_WIN_GRAD_COMM)) {
        RAP_TRY(rap_rt_wait(rt->prep_s, q->e->ev[ev]));
        RAP_TRY(rt_launch_window(rt, q->nx, w));
        if (rt->gc_late && w == RAP_WIN_EMB_BACKWARD) /* rt_check_hooked_order */
            RAP_TRY(rt_launch_window(rt, q->nx, RAP_WIN_GRAD_COMM));
        if ((int)w == q->pack_after) {
            RAP_TRY(rap_input_make(q->nx->input, q->nx->prep, &q->nx->mb));
            RAP_TRY(rap_rt_record(q->nx->ev_ready, rt->prep_s));
        }
    }
    /* the window's parse budget, beside the phase as its slices */
    rt_parse_release(rt, w, q->e->ev[ev]);
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

rap_status rt_graphs_create(rap_runtime *rt)
{
    if (rt->cfg.cuda_graph && on_gpu(rt) && rt->S <= 64) {
        rt->graphs = rap_calloc(sizeof(void *) * 4 * (size_t)rt->S, "graphs");
        if (!rt->graphs)
            return RAP_ERR_NOMEM;
    }
    return RAP_OK;
}

void rt_graphs_free(rap_runtime *rt)
{
    for (int i = 0; rt->graphs && i < 4 * rt->S; i++)
        rap_run_graph_free(rt->graphs[i]);
    rap_free(rt->graphs);
    rt->graphs = NULL;
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

rap_status rt_phases_gpu(rap_runtime *rt, rt_slot *s, ring_entry *e, rt_slot *nx)
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
                RAP_TRY(rt_launch_window(rt, nx, (rap_window)p));
        }
        RAP_TRY(rap_rt_record(e->ev[EV_P0], rt->train_s));
        for (int p = 0; p < 4; p++) /* the phases' parse budgets beside the one span */
            rt_parse_release(rt, (rap_window)p, e->ev[EV_P0]);
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
            if (p == 1)
                RAP_TRY(pv_after_forward(rt, &s->mb));
            RAP_TRY(q_end(&q, (rap_window)p, EV_P0 + p));
        }
        if (q.pack_after >= 0)
            nx = NULL; /* packed already: nothing left for the end of the step */
    }
    /* the loss to the host by a kernel, not a copy (rap_rt_store_f32) */
    if (!rt->cfg.train_fn || rt->cfg.train_fn_model_loss)
        RAP_TRY(rap_rt_store_f32(e->h_loss_dev, rt->loss_dev, rt->train_s));
    RAP_TRY(rap_rt_record(e->ev[EV_END], rt->train_s));
    if (!hook) /* one GPU: grad_comm's budget runs after the step, with exposed's */
        rt_parse_release(rt, RAP_WIN_GRAD_COMM, e->ev[EV_END]);
    rt_parse_release(rt, RAP_WIN_EXPOSED, e->ev[EV_END]);
    if (nx) {
        RAP_TRY(rap_rt_wait(rt->prep_s, e->ev[EV_END]));
        if (!hook)
            RAP_TRY(rt_launch_window(rt, nx, RAP_WIN_GRAD_COMM));
        RAP_TRY(rt_launch_window(rt, nx, RAP_WIN_EXPOSED));
        RAP_TRY(rap_input_make(nx->input, nx->prep, &nx->mb));
        RAP_TRY(rap_rt_record(nx->ev_ready, rt->prep_s));
    }
    RAP_TRY(rap_rt_record(s->ev_done, rt->train_s));
    return RAP_OK;
}

/* ---- a step's phases on the host (CPU model) */

rap_status rt_phases_cpu(rap_runtime *rt, const rap_model_batch *mb, int64_t rows,
                         int64_t seq, double exposed_s)
{
    ring_entry *e;
    RAP_TRY(rt_ring_acquire(rt, seq, &e));
    double t[5];
    if (rt->cfg.train_fn) { /* hybrid parallel: one call, timed as one span */
        for (int p = 0; p < 4; p++)
            rt_parse_release(rt, (rap_window)p, NULL);
        t[0] = rap_now();
        RAP_TRY(rt->cfg.train_fn(rt->cfg.train_ctx, mb, rows, &e->loss));
        t[1] = t[2] = t[3] = t[4] = rap_now();
        rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, "hybrid step", "phase", seq, t[0],
                            t[4]);
    } else {
        for (int p = 0; p < 4; p++) {
            /* the window's parse budget, parsed (by the CPU reference) where
             * the phase starts, in its time: the GPU's order on the host */
            t[p] = rap_now();
            rt_parse_release(rt, (rap_window)p, NULL);
            RAP_TRY(g_phases[p](rt->model, mb));
            if (p == 1)
                RAP_TRY(pv_after_forward(rt, mb));
        }
        t[4] = rap_now();
        for (int p = 0; p < 4; p++)
            rap_trace_host_span(rt->cfg.trace, RAP_TRACK_MAIN, g_phase_names[p], "phase", seq,
                                t[p], t[p + 1]);
        RAP_TRY(rap_model_last_loss(rt->model, &e->loss));
    }
    rt_parse_release(rt, RAP_WIN_GRAD_COMM, NULL);
    rt_parse_release(rt, RAP_WIN_EXPOSED, NULL);
    for (int p = 0; p < 4; p++)
        e->rec.phase_ms[p] = (float)((t[p + 1] - t[p]) * 1e3);
    e->rec.exposed_ms = (float)(exposed_s * 1e3);
    e->rec.step_ms = (float)((t[4] - t[0] + exposed_s) * 1e3);
    e->done = true;
    rt_record_step(rt, &e->rec);
    rt->trained++;
    rt->ring_head = rt->trained;
    return RAP_OK;
}
