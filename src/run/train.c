/* train.c -- the training run (train.h): set up through the pipeline
 * builder (run/pipeline.h), the loop over the runtime's steps, the losses,
 * the progress and metrics lines, the final accounting. Evaluation is
 * train_eval.c, checkpoints train_ckpt.c, what the ranks agree on
 * train_dist.c (train_internal.h). */
#include "run/train_internal.h"

#include "core/core.h"
#include "core/json.h"
#include "core/out.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "run/checkpoint_meta.h"
#include "sched/hash.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

bool rap_train_held_out(int64_t i, double f)
{
    if (f <= 0)
        return false;
    uint64_t h = rap_mix64((uint64_t)i ^ RAP_HOLDOUT_KEY);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < f;
}

void rap_train_defaults(rap_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->eval_fraction = 0.1;
    c->teacher_auc = NAN;
    c->reader = rap_reader_defaults();
    c->plan_name = "";
    rap_model_config_defaults(&c->model);
    c->device = RAP_CPU;
    c->mode = -1;
    c->log_interval = 5;
    c->progressive_window = RAP_PV_DEFAULT_WINDOW;
    rap_guard_defaults(&c->guards);
}

/* ------------------------------------------------------------ set-up */

/* What the trainer asks of its config beyond the pipeline's. */
static rap_status check_config(const trainer *t)
{
    const rap_train_config *c = t->c;
    if (!c->plan)
        return rap_fail(RAP_ERR_ARG, "train: no plan");
    if (!c->data || !c->data[0])
        return rap_fail(RAP_ERR_ARG, "train: no training input (--data)");
    if (c->device != RAP_GPU && c->model.precision == RAP_BF16)
        return rap_fail(RAP_ERR_ARG, "--precision bf16 needs --device gpu (the CPU model "
                        "computes in float32)");
    if (c->device != RAP_GPU && c->cuda_graph)
        return rap_fail(RAP_ERR_ARG, "--cuda-graph needs --device gpu");
    if (t->rk.dist && t->rk.R > 1 && !strcmp(c->data, "-"))
        return rap_fail(RAP_ERR_ARG, "--data -: with %d ranks every rank reads the input itself, "
                        "and stdin reaches one of them: give a file", t->rk.R);
    if (t->rk.dist && t->rk.R > 1 && c->reader.follow)
        return rap_fail(RAP_ERR_ARG, "--follow: with %d ranks every rank reads the input itself "
                        "and they could see a growing file end at different rows: not supported",
                        t->rk.R);
    if (t->rk.dist && c->cuda_graph)
        return rap_fail(RAP_ERR_ARG, "--cuda-graph: the hybrid-parallel step (ranks, --gpus) "
                        "exchanges data between ranks in every step and is not captured");
    return RAP_OK;
}

/* The pipeline's config: the run's plan, model, ranks, runtime and feed. */
static void pipeline_config(trainer *t, rap_pipeline_config *p)
{
    const rap_train_config *c = t->c;
    rap_pipeline_config_defaults(p);
    p->cmd = "train";
    p->plan = c->plan;
    p->plan_spec = c->plan_name;
    p->fusion = c->fusion;
    p->schedule = c->schedule_path;
    p->schedule_made = c->schedule;
    p->model = c->model;
    p->device = c->device;
    p->ranks = t->rk.dist ? t->rk.R : 0;
    p->placement = c->placement;
    p->cpu_workers = c->cpu_workers;
    p->prep_threads = c->reader.threads;
    p->cuda_graph = c->cuda_graph;
    p->prep_lanes = c->prep_lanes;
    p->data = c->data;
    p->reader = c->reader;
    p->chunk_bytes = c->chunk_bytes;
    p->holdout = t->ev.holdout;
    p->stop = c->stop;
    p->rank.mode = c->mode;
    p->rank.comm = c->comm;
    p->rank.gpu = c->gpu;
    p->rank.trace = c->trace;
    p->rank.model_ready = t->sr.resume ? train_load_weights : NULL;
    /* the data position of each batch for the checkpoints (one reading
     * thread); a resumed --follow reads on from the checkpoint's */
    p->track_positions = c->save && c->save[0] && strcmp(c->data, "-") != 0 &&
                         (c->reader.follow || c->reader.inflate_threads <= 1);
    p->start = &t->sr.start;
    if (t->rk.rank == 0) {
        p->batch_hook = c->batch_hook;
        p->batch_hook_ctx = c->hook_ctx;
    }
    p->rank.ctx = t;
}

/* A rap shard holds preprocessed batches: evaluation must read raw rows. */
static rap_status check_shard(const trainer *t)
{
    const rap_train_config *c = t->c;
    if (!t->shard)
        return RAP_OK;
    if (c->eval_data && c->eval_data[0] && rap_runtime_is_shard(c->eval_data))
        return rap_fail(RAP_ERR_ARG, "--eval-data %s is a rap shard: evaluation reads raw "
                        "rows (give the TSV, or --eval-fraction 0)", c->eval_data);
    if (t->ev.holdout > 0)
        return rap_fail(RAP_ERR_ARG, "--data %s is a rap shard: no rows can be held out of "
                        "its preprocessed batches for evaluation: give --eval-data (a raw "
                        "TSV) or --eval-fraction 0", c->data);
    return RAP_OK;
}

/* The run's keys: its data's name, hold-out, plan hash and input size. */
static rap_status run_keys(trainer *t)
{
    const rap_train_config *c = t->c;
    t->data_id = c->data_id && c->data_id[0] ? c->data_id : c->data;
    t->plan_hash = rap_plan_columns_hash(c->plan, &t->plan_cols);
    if (!t->plan_cols)
        return RAP_ERR_NOMEM;
    size_t dl = strlen(c->data);
    struct stat sb;
    if (strcmp(c->data, "-") && (dl < 3 || strcmp(c->data + dl - 3, ".gz")) &&
        stat(c->data, &sb) == 0 && S_ISREG(sb.st_mode))
        t->log.data_size = (int64_t)sb.st_size;
    return RAP_OK;
}

/* "model: ..." at start. */
static void say_model(const trainer *t)
{
    int64_t tab = 0;
    for (int i = 0; i < t->mc.n_tables; i++)
        tab += t->mc.table_rows[i];
    char bot[128], top[128];
    rap_ckpt_meta_widths(t->mc.bot, t->mc.n_bot, bot, sizeof bot);
    rap_ckpt_meta_widths(t->mc.top, t->mc.n_top, top, sizeof top);
    T_INFO(t, "model: %d dense inputs, %d %s tables (%lld rows) of dim %d, bottom MLP %s, top MLP "
             "%s, %s lr %g, batch %lld, on the %s (%.2f GB), mode %s",
             t->mc.n_dense, t->mc.n_tables, rap_emb_dtype_name(t->mc.emb_dtype), (long long)tab,
             t->mc.emb_dim, bot, top, rap_optimizer_name(t->mc.optimizer), (double)t->mc.lr,
             (long long)t->mc.batch,
             t->c->device == RAP_GPU ? "GPU" : "CPU",
             (double)rap_model_bytes(&t->mc, t->c->device) / 1e9, rap_mode_name(t->mode));
}

/* The memory plan of this rank's run (docs/MEMORY.md) into the result,
 * before anything is allocated: the free memory measured (or c->mem_avail
 * taken), and a run that does not fit refused, its table logged. */
static rap_status plan_memory(trainer *t)
{
    const rap_train_config *c = t->c;
    rap_memplan *p = &t->res->memplan;
    RAP_TRY(rap_pipeline_memplan(t->pl, &t->pcfg.rank, READ_ROWS, p));
    t->res->planned = true;
    if (c->mem_avail > 0)
        p->avail[c->device == RAP_GPU ? RAP_MEM_DEVICE : RAP_MEM_HOST] = c->mem_avail;
    if (c->dry_run)
        return RAP_OK;
    RAP_TRY(rap_pipeline_memplan_check(p, "train", t->mc.batch));
    char line[512];
    rap_memplan_summary(p, line, sizeof line);
    T_INFO(t, "%s", line);
    return RAP_OK;
}

/* The measured use beside the plan after the first MEM_STEPS steps (GPU:
 * the drop of free memory since the plan; --verbose). */
#define MEM_STEPS 3
static void log_memory(trainer *t)
{
    rap_memplan *p = &t->res->memplan;
    rap_runtime *rt = t->pipe ? rap_pipeline_runtime(t->pipe) : NULL;
    if (t->c->device == RAP_GPU && rt && rap_runtime_sync(rt) != RAP_OK)
        rap_clear_error(); /* the steps' own checks report it */
    rap_memplan_measure_used(p, 1);
    char line[512];
    rap_memplan_summary(p, line, sizeof line);
    if (t->rk.rank == 0)
        rap_debug("%s", line);
}

/* Progressive validation and the guards (train_watch.h): the window on
 * the model's stream, handed to the pipeline's runtime. */
static rap_status watch_setup(trainer *t)
{
    const rap_train_config *c = t->c;
    t->saved_step = -1;
    if (c->replan && t->rk.dist)
        return rap_fail(RAP_ERR_ARG, "--replan: with ranks (--gpus, mpirun) not yet: each rank "
                        "would re-plan alone");
    if (c->progressive && t->rk.dist)
        return rap_fail(RAP_ERR_ARG, "--progressive: progressive validation reads one model's "
                        "logits of the whole batch; with ranks (--gpus, mpirun) not yet");
    RAP_TRY(rap_train_watch_create(&t->watch, c->progressive, c->progressive_window, &c->guards,
                                   c->device, t->mc.stream, t->mc.batch));
    rap_pipeline_set_progressive(t->pipe, t->watch.pv);
    if (c->progressive)
        T_INFO(t, "progressive validation: every batch evaluated by its training forward "
               "before its update, window %lld rows; guards: nan %s, auc %s, calibration %s, "
               "on a trip: %s", (long long)c->progressive_window, c->guards.nan ? "on" : "off",
               c->guards.auc_rows ? "on" : "off", c->guards.calib_factor > 0 ? "on" : "off",
               c->guards.action == RAP_GUARD_FAIL ? "stop (--guard fail)" : "warn");
    return RAP_OK;
}

static rap_status setup(trainer *t)
{
    const rap_train_config *c = t->c;
    t->rk.R = 1;
    t->res->ranks = 1;
    if (c->comm) {
        t->rk.dist = true;
        t->rk.rank = rap_comm_rank(c->comm);
        t->rk.R = rap_comm_size(c->comm);
        t->res->rank = t->rk.rank;
        t->res->ranks = t->rk.R;
    }
    RAP_TRY(check_config(t));
    RAP_TRY(train_claim_outputs(t));
    RAP_TRY(rap_series_resume_path(c->resume, c->save, t->rk.rank != 0, t->sr.latest,
                                   sizeof t->sr.latest, &t->sr.resume));
    rap_series_init(&t->sr.series, c->save, c->save_every, c->save_every_s, c->keep, rap_now());
    if (t->rk.dist && t->rk.R > 1 && c->save_every_s > 0)
        return rap_fail(RAP_ERR_ARG, "--save-every with a duration: not with several ranks (each "
                        "rank's clock would decide on its own); give it in steps");
    t->ev.holdout = c->eval_data && c->eval_data[0] ? 0 : c->eval_fraction;
    pipeline_config(t, &t->pcfg);
    RAP_TRY(rap_pipeline_plan_create(&t->pcfg, &t->pl));
    t->mc = t->pl->model;
    t->shard = t->pl->shard;
    RAP_TRY(rap_pipeline_mode(t->pl, &t->pcfg.rank, &t->mode));
    t->res->mode = t->mode;
    RAP_TRY(check_shard(t));
    RAP_TRY(run_keys(t));
    RAP_TRY(plan_memory(t));
    if (c->dry_run) /* the plan made: nothing allocated, nothing more */
        return RAP_OK;
    if (t->sr.resume) {
        RAP_TRY(rap_ckpt_open(t->sr.resume, &t->ck));
        RAP_TRY(train_check_resume(t));
    }
    if (t->rk.dist && t->rk.rank == 0) {
        char desc[8192];
        rap_pipeline_describe_ranks(t->pl, c->comm, desc, sizeof desc);
        rap_info("%s", desc);
    }
    /* the model (its weights from --resume: train_load_weights), and with
     * ranks this rank's part of everything */
    RAP_TRY(rap_pipeline_create(t->pl, &t->pcfg.rank, &t->pipe));
    t->mc.stream = rap_pipeline_stream(t->pipe);
    RAP_TRY(watch_setup(t));
    if (t->rk.rank == 0 && t->rk.R > 1) {
        char desc[1024];
        rap_pipeline_describe_placement(t->pipe, desc, sizeof desc);
        rap_info("%s", desc);
    }
    RAP_TRY(train_eval_create(t));
    RAP_TRY(rap_metrics_open(&t->log.mf, t->rk.rank == 0 ? c->metrics : NULL));
    say_model(t);
    return RAP_OK;
}

/* ------------------------------------------------------------ losses and lines */

static double fraction_done(trainer *t)
{
    const rap_train_config *c = t->c;
    double f = -1;
    if (c->steps > 0 && c->steps > t->at.step0)
        f = (double)(t->at.step - t->at.step0) / (double)(c->steps - t->at.step0);
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    double in_epoch = -1;
    rap_rowfeed *feed = t->pipe ? rap_pipeline_feed(t->pipe) : NULL;
    if (c->data_rows > 0)
        in_epoch = (double)t->at.pos / (double)c->data_rows;
    else if (t->log.data_size > 0 && feed) {
        rap_rowfeed_stats st;
        rap_rowfeed_get_stats(feed, &st);
        in_epoch = (double)(st.reader.bytes_read - st.passes_done * t->log.data_size) /
                   (double)t->log.data_size;
    }
    if (epochs > 0 && in_epoch >= 0 && epochs > t->at.frac0) {
        double g = ((double)t->at.epoch + (in_epoch < 1 ? in_epoch : 1) - t->at.frac0) /
                   ((double)epochs - t->at.frac0);
        f = g > f ? g : f;
    }
    return f > 1 ? 1 : f;
}

/* The runtime while it runs, else NULL. */
static rap_runtime *runtime_of(trainer *t)
{
    return t->pipe ? rap_pipeline_runtime(t->pipe) : NULL;
}

/* --guard fail: what the stop leaves ("" with --guard warn): the newest
 * checkpoint this run wrote (each written only after the guards were
 * checked quiet), else none. */
static void last_good(const trainer *t, char *buf, size_t n)
{
    buf[0] = 0;
    if (t->c->guards.action != RAP_GUARD_FAIL)
        return;
    if (t->saved_step >= 0) { /* the newest of the --save-every series */
        char path[4096];
        rap_series_name(t->c->save, t->saved_step, path, sizeof path);
        snprintf(buf, n, "; --guard fail: the last good checkpoint is %s (step %lld)", path,
                 (long long)t->saved_step);
    }
    else
        snprintf(buf, n, "; --guard fail: %s", t->c->save && t->c->save[0]
                 ? "no checkpoint was written before it in this run (--save-every writes them)"
                 : "no --save: nothing saved");
}

/* A window guard stopped the run (--guard fail). */
static rap_status guard_stopped(trainer *t)
{
    const rap_guard_event *e = &t->watch.stop_ev;
    char kept[600];
    last_good(t, kept, sizeof kept);
    rap_progress_clear(&t->log.pg);
    return rap_fail(RAP_ERR_DATA, "guard %s: %s: stopped at step %lld%s",
                    rap_guard_name(e->kind), e->why, (long long)t->at.step, kept);
}

/* Takes the losses of completed steps (all of them when wait), in order:
 * sums them for the log and stops at a non-finite one, naming its step. */
static rap_status take_losses(trainer *t, bool wait)
{
    int64_t idx;
    double loss;
    rap_status st;
    while (rap_runtime_next_loss(runtime_of(t), wait, &idx, &loss, &st)) {
        if (!isfinite(loss) && t->c->guards.nan) { /* the nan guard (guards.h) */
            int64_t step = t->at.step0 + idx + 1;
            t->res->nan_step = step;
            rap_progress_clear(&t->log.pg);
            bool stop = true;
            if (t->rk.rank == 0) /* the warning and the metrics line */
                RAP_TRY(rap_train_watch_loss(&t->watch, step, loss, &t->log.mf, &stop));
            (void)stop; /* a non-finite loss stops every rank: the weights are lost */
            char kept[600];
            last_good(t, kept, sizeof kept);
            return rap_fail(RAP_ERR_DATA,
                            "the training loss is %s at step %lld (lr %g too high?): stopped; "
                            "no checkpoint written at this step%s",
                            isnan(loss) ? "NaN" : "infinite", (long long)step, (double)t->mc.lr,
                            kept);
        }
        t->log.loss_sum += loss;
        t->log.loss_n++;
    }
    return st;
}

/* Waits for the queued steps and checks their losses (before a save or an
 * evaluation). */
static rap_status settle(trainer *t)
{
    rap_hybrid *hyb = rap_pipeline_hybrid(t->pipe);
    if (hyb) /* bounded by the comm's timeout: a rank may have died */
        RAP_TRY(rap_hybrid_wait(hyb));
    RAP_TRY(rap_runtime_sync(runtime_of(t)));
    return take_losses(t, true);
}

/* A step line: the mean loss of exactly the steps since the last line. On
 * the GPU the losses come back asynchronously, so the line waits for the
 * queued steps' losses first (one drain per line: with --log-every 1 every
 * step is synchronous, the default time-based lines cost one drain a
 * --log-interval). */
static rap_status log_step(trainer *t)
{
    rap_runtime *rt = runtime_of(t);
    train_log *lg = &t->log;
    if (rt)
        RAP_TRY(take_losses(t, true));
    char pv[512];
    bool stop;
    RAP_TRY(rap_train_watch_check(&t->watch, t->at.step, &lg->mf, &lg->pg, pv, sizeof pv, &stop));
    if (stop)
        return guard_stopped(t);
    double loss = lg->loss_n ? lg->loss_sum / (double)lg->loss_n : NAN;
    if (lg->loss_n)
        t->res->loss = loss;
    double f = fraction_done(t);
    rap_progress_update(&lg->pg, t->res->samples, t->at.step, loss, f, true);
    char a[32], b[32];
    double rate = lg->t_train > 0 ? (double)t->res->samples / lg->t_train : 0;
    lg->loss_sum = 0;
    lg->loss_n = 0;
    /* starvation since the last line: the trainer waited for rows */
    double starved = 0;
    if (rt) {
        rap_runtime_stats rs;
        rap_runtime_get_stats(rt, &rs);
        starved = rs.starved_s - lg->starved_log;
        double period = lg->t_train - lg->t_log;
        if (period > 0 && starved > 0.5 * period) {
            rap_progress_clear(&lg->pg);
            T_INFO(t, "data-bound: waited %.1f s of the last %.1f s for training rows (step %lld)",
                     starved, period, (long long)t->at.step);
        }
        lg->starved_log = rs.starved_s;
        lg->t_log = lg->t_train;
    }
    return rap_metrics_line(&lg->mf,
                            "\"event\":\"step\",\"step\":%lld,\"epoch\":%lld,\"samples\":%lld,"
                            "\"loss\":%s,\"samples_per_s\":%s,\"elapsed_s\":%.3f,\"starved_s\":%.3f%s",
                            (long long)t->at.step, (long long)t->at.epoch,
                            (long long)(t->at.samples_before + t->res->samples),
                            rap_json_num(loss, a), rap_json_num(rate, b), lg->t_train, starved, pv);
}

/* A checkpoint (periodic: the next of the --save-every series; else
 * --save), written only when the guards are quiet under --guard fail (so
 * that the newest one is the last good one). */
static rap_status checkpoint_guarded(trainer *t, bool periodic)
{
    char pv[512];
    bool stop;
    RAP_TRY(rap_train_watch_check(&t->watch, t->at.step, &t->log.mf, &t->log.pg, pv, sizeof pv,
                                  &stop));
    if (stop)
        return guard_stopped(t);
    return periodic ? train_save_periodic(t) : train_save(t, t->c->save);
}

/* ------------------------------------------------------------ the loop */

/* --replan: its counts into the result, then freed (after the runtime,
 * which may use its schedule). */
static void replan_close(trainer *t)
{
    if (!t->replan)
        return;
    rap_replan_counts(t->replan, &t->res->replan_checks, &t->res->replan_plans,
                      &t->res->replan_swaps);
    rap_replan_free(t->replan);
    t->replan = NULL;
}

/* Ends the pipeline's feed and runtime (waiting for the GPU) and adds
 * their accounting. */
static void close_pipeline(trainer *t)
{
    if (!t->pipe || !rap_pipeline_runtime(t->pipe)) {
        replan_close(t);
        return;
    }
    rap_pipeline_stats ps;
    rap_pipeline_stop(t->pipe, &ps);
    const rap_runtime_stats *rs = &ps.runtime;
    t->res->starved_s += rs->starved_s;
    t->res->parse_gated |= rs->parse_gated;
    t->res->parse_lines_in += rs->parse_lines_in;
    t->res->parse_lines_out += rs->parse_lines_out;
    if (rs->timed_steps > 0)
        t->res->exposed_ms = rs->exposed_ms / (double)rs->timed_steps;
    if (rs->have_reader)
        t->res->data = rs->reader;
    if (ps.have_feed) {
        const rap_rowfeed_stats *fs = &ps.feed;
        t->res->data = fs->reader;
        t->res->rows_held_out += fs->rows_held_out;
        /* read, but never trained: read ahead by the feed, or handed to the
         * runtime (prepared for the next step) when the run stopped */
        t->res->rows_pending = fs->reader.rows_used - fs->rows_held_out - fs->rows_skipped -
                               t->res->samples;
        t->res->rows_skipped += fs->rows_skipped;
    }
    replan_close(t);
}

static bool finished(const trainer *t)
{
    const rap_train_config *c = t->c;
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    if (c->steps > 0 && t->at.step >= c->steps)
        return true;
    return epochs > 0 && t->at.epoch >= epochs;
}

/* Re-planning after a step: a check every N steps, a swap when a plan is
 * ready (logged, in the metrics and the trace). */
static rap_status replan_step(trainer *t)
{
    rap_replan_event ev;
    bool swapped;
    RAP_TRY(rap_replan_step(t->replan, runtime_of(t), t->at.step, t->c->trace, &ev, &swapped));
    if (!swapped)
        return RAP_OK;
    rap_progress_clear(&t->log.pg);
    T_INFO(t, "replan: new schedule swapped in after step %lld (planned in %.2f s from the "
           "check at step %lld: %s)%s%s", (long long)ev.step, ev.plan_s,
           (long long)ev.checked_step, ev.why, ev.path[0] ? "; written to " : "", ev.path);
    return rap_train_watch_replan_line(&t->log.mf, &ev);
}

/* --replan: the re-planner of the started pipeline's runtime (one rank:
 * the whole plan and the pipeline's fusion). */
static rap_status replan_open(trainer *t)
{
    const rap_train_config *c = t->c;
    if (!c->replan)
        return RAP_OK;
    const rap_schedule *in_use = rap_runtime_schedule(runtime_of(t));
    return rap_replan_create(c->replan, c->plan, &t->pl->fusion, t->mc.batch,
                             in_use ? in_use : t->pl->schedule, rap_pipeline_feed(t->pipe),
                             &t->replan);
}

/* A trained step counted: position, samples, this rank's share, the
 * config's per-step callback, the trace's window, the losses so far. */
static rap_status count_step(trainer *t, const rap_step_info *in)
{
    const rap_train_config *c = t->c;
    rap_train_result *res = t->res;
    t->at.step++;
    t->at.pos = in->pos_after;
    t->sr.has_dpos = in->has_data_pos && in->data_pos.valid;
    if (t->sr.has_dpos)
        t->sr.dpos = in->data_pos;
    if (c->step_hook && t->rk.rank == 0)
        c->step_hook(c->hook_ctx, t->at.step, in->seq, in->pos_after, in->rows);
    res->samples += in->rows;
    res->steps_run++;
    if (t->rk.dist) { /* rows counted once: this rank's share */
        int64_t r0, nr;
        rap_hybrid_rows(in->rows, t->rk.R, t->rk.rank, &r0, &nr);
        t->rk.rank_samples += nr;
        res->rank_samples = t->rk.rank_samples;
    }
    if (c->after_step)
        RAP_TRY(c->after_step(c->after_step_ctx, t->at.step));
    if (c->trace && c->trace_steps > 0 && res->steps_run >= c->trace_steps)
        rap_trace_set_enabled(c->trace, false);
    if (res->steps_run == MEM_STEPS)
        log_memory(t);
    RAP_TRY(take_losses(t, false));
    return t->replan ? replan_step(t) : RAP_OK;
}

/* After a trained step: its line or the bar, the evaluation and the save
 * every N steps. *last_log: when the last line was written. */
static rap_status after_step(trainer *t, double *last_log)
{
    const rap_train_config *c = t->c;
    double now = rap_now();
    if (c->log_every > 0 ? t->at.step % c->log_every == 0 : now - *last_log >= c->log_interval) {
        RAP_TRY(log_step(t));
        *last_log = now;
    } else if (c->tty) {
        double loss = t->log.loss_n ? t->log.loss_sum / (double)t->log.loss_n : NAN;
        rap_progress_update(&t->log.pg, t->res->samples, t->at.step, loss, fraction_done(t),
                            false);
    }
    if (c->eval_every > 0 && t->at.step % c->eval_every == 0 && !finished(t)) {
        RAP_TRY(settle(t));
        rap_eval_result e;
        RAP_TRY(train_evaluate(t, &e));
        RAP_TRY(train_log_eval(t, &e, "eval"));
    }
    if (rap_series_due(&t->sr.series, t->at.step, rap_now()) && !finished(t)) {
        RAP_TRY(settle(t));
        RAP_TRY(checkpoint_guarded(t, true));
    }
    return RAP_OK;
}

static rap_status loop(trainer *t)
{
    const rap_train_config *c = t->c;
    t->at.step0 = t->at.step;
    if (c->step_hook && t->rk.rank == 0) /* rows -1: where this run starts */
        c->step_hook(c->hook_ctx, t->at.step, -1, t->at.pos, -1);
    t->at.frac0 = (double)t->at.epoch +
                  (c->data_rows > 0 ? (double)t->at.pos / (double)c->data_rows : 0);
    rap_progress_init(&t->log.pg, c->progress && t->rk.rank == 0, c->tty, c->log_interval);
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    if (finished(t)) { /* a resume whose checkpoint is at the end already */
        if (c->steps > 0 && t->at.step >= c->steps)
            T_WARN(t, "nothing to train: the checkpoint is at step %lld and --steps is %lld "
                   "(steps count from the start of training: give --steps above %lld)",
                   (long long)t->at.step, (long long)c->steps, (long long)t->at.step);
        else
            T_WARN(t, "nothing to train: the checkpoint finished pass %lld over %s and this run "
                   "asks for %lld pass%s%s: give --epochs %lld or more, or --steps, to go on "
                   "(other --data starts from its first row)", (long long)t->at.epoch,
                   t->data_id, (long long)epochs, epochs == 1 ? "" : "es",
                   c->epochs > 0 ? "" : " (the default)", (long long)t->at.epoch + 1);
        return RAP_OK;
    }
    RAP_TRY(rap_pipeline_start(t->pipe, epochs > 0 ? epochs - t->at.epoch : 0, t->at.pos));
    rap_memplan_measure_used(&t->res->memplan, 0); /* GPU: the use after set-up */
    RAP_TRY(replan_open(t));
    double last_log = rap_now();
    int64_t pass_start = t->at.pos;
    bool told_passes = false;
    while (!finished(t) && !train_stopping(t)) {
        double t0 = rap_now();
        rap_step_info in;
        RAP_TRY(rap_runtime_step(runtime_of(t), &in));
        t->log.t_train += rap_now() - t0;
        if (in.end)
            break; /* stopped, or a followed input went idle */
        if (in.rows > 0)
            RAP_TRY(count_step(t, &in));
        if (in.end_of_pass) {
            if (pass_start == 0 && in.pass_rows == 0)
                return rap_fail(RAP_ERR_NO_ROWS, "%s: no training rows (%s)", c->data,
                                in.pos_after == 0 ? "the input holds no usable row"
                                                  : "every row is held out for evaluation");
            t->at.epoch++;
            t->at.pos = 0;
            t->sr.has_dpos = false;
            pass_start = 0;
            if (epochs == 0 && !told_passes && !finished(t)) { /* --steps past the data */
                int64_t per = t->at.step - t->at.step0, left = c->steps - t->at.step;
                told_passes = true;
                T_INFO(t, "--steps %lld: the data ended at step %lld (%lld steps this pass): "
                       "reading %s again from its first row, about %lld more pass%s to reach "
                       "step %lld (--epochs E stops after E passes)", (long long)c->steps,
                       (long long)t->at.step, (long long)per, c->data,
                       (long long)(per > 0 ? (left + per - 1) / per : 0),
                       per > 0 && (left + per - 1) / per == 1 ? "" : "es", (long long)c->steps);
            }
        }
        if (in.rows > 0)
            RAP_TRY(after_step(t, &last_log));
    }
    if (t->rk.comm_failed)
        return RAP_ERR_IO; /* the collective's message is set */
    double t0 = rap_now();
    RAP_TRY(settle(t));
    t->log.t_train += rap_now() - t0;
    if (t->log.loss_n)
        RAP_TRY(log_step(t));
    rap_progress_clear(&t->log.pg);
    return RAP_OK;
}

/* ------------------------------------------------------------ the run */

static void teardown(trainer *t)
{
    close_pipeline(t);
    rap_metrics_close(&t->log.mf);
    rap_out_lock_release(t->save_lock);
    t->save_lock = NULL;
    train_eval_free(t);
    rap_ckpt_close(t->ck);
    t->ck = NULL;
    rap_train_watch_free(&t->watch); /* its device memory before the stream goes */
    rap_pipeline_free(t->pipe);
    t->pipe = NULL;
    rap_pipeline_plan_free(t->pl);
    t->pl = NULL;
    rap_free(t->plan_cols);
}

/* The final evaluation, save and lines once the loop ended (st: its
 * status); returns the run's status. */
static rap_status finish(trainer *t, rap_status st)
{
    const rap_train_config *c = t->c;
    rap_train_result *res = t->res;
    /* ranks: every rank's share summed (each row trained exactly once) */
    char *rank_list = NULL;
    if (st == RAP_OK && t->rk.dist)
        st = train_gather_samples(t, &rank_list);
    char a[32], b[32], d[32], e[32], te[32];
    bool evaluates = t->ev.holdout + (c->eval_data && c->eval_data[0]) > 0;
    /* the checkpoint is written even when the evaluation fails (its input
     * all rejected): the training is not lost with it */
    rap_status eval_st = RAP_OK;
    char eval_msg[2048] = "";
    if (st == RAP_OK && !res->interrupted && evaluates) {
        eval_st = train_evaluate(t, &res->eval);
        if (eval_st == RAP_OK)
            eval_st = train_log_eval(t, &res->eval, "eval");
        if (eval_st != RAP_OK)
            snprintf(eval_msg, sizeof eval_msg, "%s", rap_last_error());
    }
    if (st == RAP_OK && c->save && c->save[0] && eval_st != RAP_ERR_INTERRUPTED)
        st = checkpoint_guarded(t, false);
    if (st == RAP_OK && eval_st != RAP_OK)
        st = rap_fail(eval_st, "%s%s", eval_msg, res->saved ? " (the checkpoint was saved)" : "");
    if (st == RAP_OK && !res->interrupted) {
        T_INFO(t, "trained %lld steps (%lld samples) in %.1f s: %.0f samples/s", (long long)res->steps_run,
                 (long long)res->samples, res->train_seconds, res->samples_per_s);
        char parse[256] = ""; /* the GPU parse in the windows: where its lines ran */
        int pat = 0;
        if (res->parse_gated)
            pat = snprintf(parse, sizeof parse, ", \"parse_lines_in\":%lld, \"parse_lines_out\":%lld",
                           (long long)res->parse_lines_in, (long long)res->parse_lines_out);
        if (res->data.parse_share_ranks > 1) /* the lines this rank parsed of those it read */
            snprintf(parse + pat, sizeof parse - (size_t)pat,
                     ", \"parse_share_ranks\":%d, \"parse_lines_here\":%lld",
                     res->data.parse_share_ranks, (long long)res->data.lines_parsed_here);
        st = rap_metrics_line(
            &t->log.mf,
            "\"event\":\"final\", \"auc\":%s, \"logloss\":%s, \"accuracy\":%s, "
            "\"samples_trained\":%lld, \"rows_rejected\":%lld, \"samples_per_s\":%s, "
            "\"step\":%lld, \"eval_rows\":%lld, \"teacher_auc\":%s%s%s",
            rap_json_num(res->eval.auc, a), rap_json_num(res->eval.logloss, b),
            rap_json_num(res->eval.accuracy, d), (long long)res->samples_total,
            (long long)res->data.rows_rejected, rap_json_num(res->samples_per_s, e),
            (long long)res->step, (long long)res->eval.rows, rap_json_num(c->teacher_auc, te),
            parse, rank_list ? rank_list : "");
    } else if (st == RAP_OK) {
        rap_metrics_line(&t->log.mf,
                         "\"event\":\"interrupted\", \"step\":%lld, \"samples_trained\":%lld, "
                         "\"rows_rejected\":%lld, \"saved\":%s",
                         (long long)res->step, (long long)res->samples_total,
                         (long long)res->data.rows_rejected, res->saved ? "true" : "false");
        st = rap_fail(RAP_ERR_INTERRUPTED, "interrupted after step %lld%s%s", (long long)res->step,
                      res->saved ? ": checkpoint saved to " : " (no --save: nothing saved)",
                      res->saved ? c->save : "");
    }
    rap_free(rank_list);
    return st;
}

rap_status rap_train_run(const rap_train_config *c, rap_train_result *res)
{
    memset(res, 0, sizeof *res);
    res->eval.auc = res->eval.logloss = res->eval.accuracy = NAN;
    res->loss = NAN;
    trainer t;
    memset(&t, 0, sizeof t);
    t.c = c;
    t.res = res;
    rap_status st = setup(&t);
    if (st == RAP_OK && c->dry_run) { /* the memory plan (res->memplan) alone */
        teardown(&t);
        return RAP_OK;
    }
    if (st == RAP_OK)
        st = loop(&t);
    res->step = t.at.step;
    res->samples_total = t.at.samples_before + res->samples;
    res->train_seconds = t.log.t_train;
    res->samples_per_s = t.log.t_train > 0 ? (double)res->samples / t.log.t_train : 0;
    res->interrupted = st == RAP_OK && (t.rk.dist ? t.rk.stopped : train_stop_requested(&t));
    /* make sure the training reader's rows are counted (waits for the GPU) */
    close_pipeline(&t);
    st = finish(&t, st);
    /* teardown must not clobber the message of a failure */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    teardown(&t);
    if (st != RAP_OK)
        rap_fail(st, "%s", msg);
    return st;
}
