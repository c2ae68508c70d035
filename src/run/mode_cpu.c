/*
 * mode_cpu.c -- the runtime's cpu mode (runtime.h, docs/RUNTIME.md): K
 * worker threads each take the next feed batch, preprocess and pack it
 * with a CPU executor of their own (a job), and the trainer takes the jobs
 * in feed order. With the GPU model a job is staged in pinned memory
 * (the model batch's layout, blk_*) and copied into a slot's device block
 * on the copy stream, the step after it pipelined (rt_step_pipelined);
 * with the CPU model the job's batch trains directly.
 */
#include "run/rt_internal.h"

#include "core/core.h"
#include "prep/exec_internal.h"
#include "run/input.h"

#include <stdio.h>
#include <string.h>

/* A cpu-mode job: one CPU executor and packing buffer, and (GPU model) a
 * pinned staging block with the model batch's layout. */
struct cpu_job {
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
};

void rt_cpu_job_release(rap_runtime *rt, cpu_job *j)
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
            rt_cpu_job_release(rt, j);
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
            rt_info_of(&j->info, b);
            if (b->batch.rows == 0) {
                j->marker = true;
                rap_rowfeed_release(rt->feed, b);
            } else {
                double t0 = rap_trace_host_begin(rt->cfg.trace, "prep batch");
                st = rap_prep_load(j->prep, rt_share_rows(rt, &b->batch, &j->share));
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
            rt_cpu_job_release(rt, j);
            return st;
        }
        if (j->end) {
            rt->feed_end = true;
            rt_cpu_job_release(rt, j);
            break;
        }
        if (j->marker) {
            rap_row_batch fake;
            memset(&fake, 0, sizeof fake);
            fake.seq = j->info.seq;
            fake.pass = j->info.pass;
            fake.pos_after = j->info.pos_after;
            fake.pass_rows = j->info.pass_rows;
            fake.has_data_pos = j->info.has_data_pos;
            if (fake.has_data_pos)
                fake.data_pos = j->info.data_pos;
            rt_cpu_job_release(rt, j);
            RAP_TRY(rt_push_marker(rt, &fake));
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

/* ---- steps */

/* GPU model: the next job into slot s (waiting for the workers is waiting
 * for data: *waited_s). */
static rap_status cpu_fill(rap_runtime *rt, rt_slot *s, bool prime, double *waited_s)
{
    (void)prime;
    cpu_job *j;
    RAP_TRY(fetch_job(rt, &j, waited_s));
    if (j)
        RAP_TRY(load_job(rt, s, j));
    return RAP_OK;
}

static const rt_pipeline g_cpu_pipe = {cpu_fill, false, false};

static rap_status cpu_step(rap_runtime *rt, rap_step_info *info)
{
    if (on_gpu(rt))
        return rt_step_pipelined(rt, info, &g_cpu_pipe);
    /* CPU model: the job of the next batch trains as it is */
    double w = 0;
    if (!rt->job_cur && !rt->feed_end)
        RAP_TRY(fetch_job(rt, &rt->job_cur, &w));
    if (rt_pop_marker(rt, info))
        return RAP_OK;
    if (!rt->job_cur) {
        info->end = true;
        return RAP_OK;
    }
    cpu_job *j = rt->job_cur;
    rap_status st = rt_phases_cpu(rt, &j->mb, j->info.rows, j->info.seq, w);
    *info = j->info;
    rt->job_cur = NULL;
    rt_cpu_job_release(rt, j);
    return st;
}

/* ---- create and free */

/* The layout of a model batch in a staging and a device block (blk_*). */
static rap_status cpu_layout(rap_runtime *rt)
{
    rt->blk_off = rap_calloc(sizeof(size_t) * (size_t)rt->n_tables, "runtime");
    rt->blk_ids = rap_calloc(sizeof(size_t) * (size_t)rt->n_tables, "runtime");
    if (!rt->blk_off || !rt->blk_ids)
        return RAP_ERR_NOMEM;
    rt->blk_bytes = rt_blk_layout(rt->B, rt->n_dense, rt->n_tables, rt->max_bag, &rt->blk_dense,
                                  &rt->blk_label, rt->blk_off, rt->blk_ids);
    return RAP_OK;
}

/* The J jobs, their trace tracks, and the K workers started. */
static rap_status start_workers(rap_runtime *rt)
{
    const rap_runtime_config *c = &rt->cfg;
    rt->J = rt_cpu_jobs(c, rt->S, &rt->K);
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
    return RAP_OK;
}

/* Slots on the GPU only (S >= 2), each with a device block of the model
 * batch's layout; the jobs and workers. */
static rap_status cpu_create(rap_runtime *rt)
{
    RAP_TRY(cpu_layout(rt));
    rt->S = rt_mode_slots(&rt->cfg, RAP_MODE_CPU, on_gpu(rt));
    RAP_TRY(rt_graphs_create(rt));
    RAP_TRY(rt_slots_create(rt, false, NULL));
    for (int i = 0; on_gpu(rt) && i < rt->S; i++) {
        rt_slot *s = &rt->slots[i];
        RAP_TRY(rap_cuda_malloc(&s->dev_block, rt->blk_bytes, "cpu mode model batch"));
        char *b = s->dev_block;
        s->mb.dense = (const float *)(b + rt->blk_dense);
        s->mb.label = (const float *)(b + rt->blk_label);
        for (int t = 0; t < rt->n_tables; t++) {
            s->mb.off[t] = (const int64_t *)(b + rt->blk_off[t]);
            s->mb.ids[t] = (const int64_t *)(b + rt->blk_ids[t]);
        }
    }
    return start_workers(rt);
}

/* The workers' waits for the feed are starved time too. */
static void cpu_stats(rap_runtime *rt, rap_runtime_stats *st)
{
    if (!rt->locks)
        return;
    pthread_mutex_lock(&rt->fm);
    st->starved_s += rt->worker_starved_s;
    pthread_mutex_unlock(&rt->fm);
}

/* Stops and joins the workers (the feed stopped: a worker may wait for a
 * following reader), then frees the jobs. */
static void cpu_free(rap_runtime *rt)
{
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
    for (int i = 0; rt->jobs && i < rt->J; i++) {
        rap_input_free(rt->jobs[i].input);
        rap_prep_free(rt->jobs[i].prep);
        rap_rt_host_free(rt->jobs[i].stage);
        rap_batch_free(&rt->jobs[i].share);
    }
    if (rt->locks) {
        pthread_mutex_destroy(&rt->jm);
        pthread_mutex_destroy(&rt->fm);
        pthread_cond_destroy(&rt->jcv);
    }
    rap_free(rt->jobs);
    rap_free(rt->tids);
    rap_free(rt->blk_off);
    rap_free(rt->blk_ids);
    rap_free(rt->trace_tracks);
}

const rt_mode_ops rt_mode_cpu_ops = {cpu_create, cpu_step, cpu_stats, cpu_free};
