/* cmd_bench.c -- rap bench: the preprocessing modes of the runtime
 * (docs/RUNTIME.md) run one after the other on the same data and the same
 * model, in one invocation, and compared in one table (or JSON).
 *
 * Per mode: a fresh model (same seed, same weights), a row feed cycling
 * over the data, --warmup steps, then --steps measured steps. Reported:
 * samples/s over the measured steps (wall clock, host; ideal's up-front
 * preprocessing excluded), its ratio to ideal, and the medians of the
 * per-step GPU timings: the step, the exposed preprocessing (the training
 * stream waiting for its batch; sequential: the preprocessing itself), each
 * training phase; the seconds the trainer waited for data, and the GPU
 * memory in use.
 *
 * --repeat R: the whole mode list runs R times, interleaved (every mode
 * once, then again), so that each run (repetition) has its own ideal and a
 * slow phase of the machine hits every mode alike. Every run's row is kept;
 * reported per mode: samples/s, the per-step medians (step, exposed, each
 * phase) and starved_s are each the median over the R runs of that run's
 * value; vs ideal is the median over the runs of (the mode's samples/s /
 * the same run's ideal samples/s), reported only when ideal ran in every
 * run (ideal's is then exactly 1); GPU_GB is the largest over the runs;
 * samples (the same every run: --steps batches) is the first run's. A mode
 * skipped or failed in any run (a failure after the measured steps too:
 * --trace not written) is reported skipped with the first such run's
 * reason. Every rank runs every mode of every run, whatever failed
 * before (a rank that left the loop early would leave the others waiting).
 * --trace is written by the last run only. R = 1 prints what it printed
 * before --repeat existed, plus the keys "repeat", "samples_per_s_runs" and
 * "vs_ideal_runs" in --json (and a mode whose --trace could not be written
 * is now reported failed, not with its numbers beside the warning). */
#include "cli/cli.h"
#include "core/json.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/ids.h"
#include "dist/shard.h"
#include "model/model.h"
#include "prep/subplan.h"
#include "run/input.h"
#include "run/mps.h"
#include "run/pack.h"
#include "run/runtime.h"
#include "run/train.h"
#include "sched/fusion_file.h"
#include "sched/rank_schedule.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --steps 0 (the default): measured steps per mode. On the H200 a step is
 * under a millisecond, and at 60 steps a single host hiccup moved a run's
 * ratio to ideal by 1-8 % (bench/RESULTS.md, ninth session). */
#define RAP_BENCH_GPU_STEPS 300
#define RAP_BENCH_CPU_STEPS 50

typedef struct {
    rap_mode mode;
    bool ran;
    char skipped[256];
    double samples_per_s;
    double vs_ideal;         /* samples_per_s / ideal's (a run's, or the median ratio) */
    double step_ms, exposed_ms, phase_ms[4];
    double grad_comm_ms;     /* ranks, GPU: the phase between mlp_backward and emb_backward */
    double a2a_ms, grad_xchg_ms; /* ranks: per step, rank 0's forward all-to-all and its
                              * gradient exchange (reverse all-to-all + all-reduce, each
                              * timed on its stream); NaN without ranks */
    double model_bytes;      /* ranks: bytes rank 0 sends per step in those */
    double prep_bytes;       /* placement batch, GPU ranks: the ids every rank sends
                              * to the tables' holders per step, all ranks; per-rank
                              * manifests with moves: what this rank's moves send per
                              * step (NaN: none) */
    double starved_s;
    int64_t steps, samples;
    double gpu_gb;
} bench_row;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median of field `off` (a float in rap_step_record) over recs[0..n). */
static double median(const rap_step_record *recs, int64_t n, size_t off, float *tmp)
{
    if (n <= 0)
        return NAN;
    for (int64_t i = 0; i < n; i++)
        memcpy(&tmp[i], (const char *)&recs[i] + off, sizeof(float));
    qsort(tmp, (size_t)n, sizeof(float), cmp_float);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the finite values among v[0..n) (tmp: n doubles); NaN if none.
 * An even count gives the mean of the two middle values. */
static double median_runs(const double *v, int n, double *tmp)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            tmp[k++] = v[i];
    if (k == 0)
        return NAN;
    qsort(tmp, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
}

/* One run's ratios: vs_ideal of each row of run[0..n) = its samples/s over
 * the same run's ideal (the last ideal row that ran), NaN without one. */
static void run_ratios(bench_row *run, int n)
{
    double ideal = 0;
    for (int i = 0; i < n; i++)
        if (run[i].mode == RAP_MODE_IDEAL && run[i].ran)
            ideal = run[i].samples_per_s;
    for (int i = 0; i < n; i++)
        run[i].vs_ideal = run[i].ran && ideal > 0 ? run[i].samples_per_s / ideal : NAN;
}

/* The reported rows: out[i] from runs[r * n + i], r in [0, R) (see the
 * header: medians over the runs, vs ideal only when ideal ran in every
 * run). tmp: 2 * R doubles. */
static void summarize(const bench_row *runs, int R, int n, bench_row *out, double *tmp)
{
    double *v = tmp, *t = tmp + R;
    bool ideal_all = false;
    for (int i = 0; i < n; i++) {
        const bench_row *r0 = &runs[i];
        bench_row *o = &out[i];
        *o = *r0;
        for (int r = 0; r < R && o->ran; r++)
            if (!runs[r * n + i].ran) {
                o->ran = false;
                snprintf(o->skipped, sizeof o->skipped, "%s", runs[r * n + i].skipped);
            }
        if (!o->ran)
            continue;
#define MED(field)                                                                                 \
    do {                                                                                           \
        for (int r = 0; r < R; r++)                                                                \
            v[r] = runs[r * n + i].field;                                                          \
        o->field = median_runs(v, R, t);                                                           \
    } while (0)
        MED(samples_per_s);
        MED(vs_ideal);
        MED(step_ms);
        MED(exposed_ms);
        MED(starved_s);
        for (int p = 0; p < 4; p++)
            MED(phase_ms[p]);
        MED(grad_comm_ms);
        MED(a2a_ms);
        MED(grad_xchg_ms);
        MED(model_bytes);
        MED(prep_bytes);
#undef MED
        for (int r = 1; r < R; r++)
            if (runs[r * n + i].gpu_gb > o->gpu_gb)
                o->gpu_gb = runs[r * n + i].gpu_gb;
        if (o->mode == RAP_MODE_IDEAL)
            ideal_all = true;
    }
    for (int i = 0; i < n && !ideal_all; i++) /* ideal not in every run: no ratios */
        out[i].vs_ideal = NAN;
}

/* "out.json" + "rap" -> "out.rap.json" */
static void trace_name(const char *base, const char *mode, char *out, size_t n)
{
    const char *dot = strrchr(base, '.');
    if (dot && !strchr(dot, '/'))
        snprintf(out, n, "%.*s.%s%s", (int)(dot - base), base, mode, dot);
    else
        snprintf(out, n, "%s.%s", base, mode);
}

typedef struct {
    const cli_settings *s;
    const rap_plan *plan;
    const rap_fusion *fus;
    const rap_schedule *sched;
    rap_model_config mc;
    rap_device dev;
    const char *data;
    bool shard;              /* data is a rap shard: ideal mode only */
    int ranks;               /* ranks of the job */
    bool hybrid;             /* ranks (mpirun or --gpus): the hybrid step */
    const char *rank_prefix; /* --schedule S with ranks: the planner's S.rank<r> */
    int repeat;              /* runs of the mode list (--repeat) */
    bool trace_run;          /* this run writes --trace (the last one) */
} bench_ctx;

/* With ranks: what one rank's hybrid step owns (the step itself is
 * rap_train_dist_step over `step`, as in rap train). */
typedef struct {
    rap_train_dist step;
    rap_hybrid *h;
    int R, rank;
    float *loss_dev;           /* GPU, R > 1: the global loss, summed by NCCL (as train.c) */
    rap_plan *part;            /* placement owner/search: the rank's columns (or NULL) */
    rap_fusion part_fus;
    rap_ids_xchg *xg;          /* placement batch, GPU ranks: the id exchange */
    rap_schedule *rsched;      /* rank_prefix: this rank's merged schedule and fusion */
    rap_fusion rsfus;
    rap_moves *moves;          /* rank_prefix: the units exchanged with other ranks, or NULL */
    int rtab[RAP_MAX_TABLES];  /* global table of the part's sparse columns */
    int n_rtab;
} bench_dist;

/* One mode; with comm (a rank of several) the model is this rank's share
 * (docs/DIST.md) and each step the hybrid one; gpu: the rank's device. */
static rap_status run_mode(const bench_ctx *b, rap_mode mode, bench_row *row, rap_comm *comm,
                           int gpu)
{
    const cli_settings *s = b->s;
    rap_status st = RAP_OK;
    rap_model *m = NULL;
    rap_rowfeed *f = NULL;
    rap_runtime *rt = NULL;
    rap_trace *tr = NULL;
    void *stream = NULL;
    float *tmp = NULL;
    int64_t warm = s->warmup, steps = s->steps;
    rap_model_config mc = b->mc;
    rap_shard_map map;
    memset(&map, 0, sizeof map);
    rap_model_shard shard;
    rap_comm *ncomm = NULL;
    bench_dist dist;
    memset(&dist, 0, sizeof dist);
    if (comm && b->dev == RAP_GPU && gpu >= 0)
        RAP_TRY(rap_rt_set_device(gpu));
    if (b->dev == RAP_GPU) {
        RAP_TRY(rap_runtime_train_stream_create(&stream));
        mc.stream = stream;
    }
    if (comm) {
        dist.R = rap_comm_size(comm);
        dist.rank = rap_comm_rank(comm);
        if ((st = rap_shard_plan(mc.table_rows, mc.n_tables, mc.emb_dim, dist.R, 0, NULL,
                                 &map)) != RAP_OK ||
            (st = rap_hybrid_model_config(&b->mc, &map, dist.rank, b->mc.batch, &shard, &mc)) !=
                RAP_OK)
            goto out;
        mc.stream = stream;
    }
    if (s->trace[0] && b->trace_run && (!comm || dist.rank == 0)) {
        rap_trace_config tc = {0};
        tc.max_gpu_spans = b->dev == RAP_GPU ? 16384 : 0;
        if ((st = rap_trace_create(&tc, &tr)) != RAP_OK)
            goto out;
        rap_trace_set_enabled(tr, false);
    }
    if ((st = rap_model_create(&mc, b->dev, &m)) != RAP_OK)
        goto out;
    if (comm) {
        rap_comm *hc = comm;
        if (b->dev == RAP_GPU) {
            if ((st = rap_comm_nccl_create(comm, gpu >= 0 ? gpu : 0, stream, &ncomm)) != RAP_OK)
                goto out;
            hc = ncomm;
        }
        if ((st = rap_hybrid_create(m, &map, hc, &dist.h)) != RAP_OK)
            goto out;
        /* as rap train: owner and search run the rank's columns only, with
         * the planner's manifest also those computed for others */
        rap_rank_manifest *man = NULL;
        if (b->rank_prefix &&
            (st = rap_rank_manifest_load(b->rank_prefix, b->plan, dist.rank, dist.R, b->mc.batch,
                                         &man)) != RAP_OK)
            goto out;
        if (dist.R > 1 && s->placement != RAP_PLACE_BATCH && !b->shard && !b->sched)
            st = rap_subplan_rank_with(b->plan, shard.table, shard.n_local,
                                       man ? man->col_shares : NULL, s->fusion == FUSE_NONE,
                                       &dist.part, &dist.part_fus, dist.rtab, &dist.n_rtab);
        if (st == RAP_OK && man)
            st = rap_train_prep_from_manifest(man, b->plan, dist.part, &map, dist.rank,
                                              b->mc.max_bag, ncomm ? ncomm : comm, b->dev,
                                              &dist.rsfus, &dist.rsched, &dist.moves);
        rap_rank_manifest_free(man);
        if (st != RAP_OK)
            goto out;
        /* as rap train: placement batch on GPU ranks exchanges the ids */
        if (dist.R > 1 && s->placement == RAP_PLACE_BATCH && !b->shard && b->dev == RAP_GPU &&
            mode != RAP_MODE_MPS) {
            int T = mc.n_tables;
            bool *holds = rap_calloc(sizeof(bool) * (size_t)(dist.R * T), "id exchange");
            if (!holds) {
                st = RAP_ERR_NOMEM;
                goto out;
            }
            rap_shard_holds(&map, holds);
            st = rap_ids_xchg_create(ncomm, RAP_GPU, T, holds, b->mc.batch,
                                     b->mc.max_bag > 0 ? b->mc.max_bag : 1, &dist.xg);
            rap_free(holds);
            if (st != RAP_OK)
                goto out;
        }
    } else if (b->rank_prefix) {
        st = rap_fail(RAP_ERR_ARG, "--schedule %s: %s.rank<r> are per-rank manifests (rap plan "
                      "--gpus R): bench with --gpus R or under mpirun", b->rank_prefix,
                      b->rank_prefix);
        goto out;
    }
    rap_runtime_config rc;
    memset(&rc, 0, sizeof rc);
    rc.mode = mode;
    rc.plan = dist.part ? dist.part : b->plan;
    rc.fusion = dist.rsched ? &dist.rsfus : dist.part ? &dist.part_fus : b->fus;
    rc.schedule = dist.rsched ? dist.rsched : b->sched;
    rc.cpu_workers = (int)s->cpu_workers;
    rc.prep_threads = (int)s->threads;
    rc.ideal_batches = (int)(warm + steps < 32 ? warm + steps : 32);
    rc.cuda_graph = s->cuda_graph;
    rc.prep_lanes = (int)s->prep_lanes;
    rc.trace = tr;
    rc.max_records = warm + steps;
    rc.plan_spec = s->plan;
    rc.reader = rap_reader_defaults();
    rc.reader.input = b->data;
    cli_reader_options(s, &rc.reader);
    rc.reader.bad_rows = (rap_bad_rows)s->bad_rows;
    rc.reader.max_line = s->max_line;
    if (comm) {
        rc.train_fn = rap_train_dist_step;
        rc.train_ctx = &dist.step;
        rc.hybrid = dist.h; /* its phases timed, the windows beside them */
        if (dist.xg) { /* each rank preprocesses its own rows */
            rc.row_share_ranks = dist.R;
            rc.row_share_rank = dist.rank;
        }
        rc.batch_rows = b->mc.batch;
        bool model_loss = b->dev == RAP_GPU; /* as train.c */
        rc.train_fn_model_loss = model_loss;
        if (model_loss && dist.R > 1) {
            if ((st = rap_cuda_malloc((void **)&dist.loss_dev, 256, "the global loss")) !=
                RAP_OK)
                goto out;
            rc.train_loss_dev = dist.loss_dev;
        }
        dist.step = (rap_train_dist){dist.h, dist.xg, dist.part ? dist.rtab : NULL,
                                     dist.n_rtab, dist.R, dist.rank, mc.n_dense, m, stream,
                                     ncomm, dist.loss_dev, model_loss, dist.moves};
    }
    if (b->shard) { /* ideal from a shard (checked in main): no feed, cycle */
        rc.shard = b->data;
        rc.shard_passes = 0;
    } else if (mode != RAP_MODE_MPS) {
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = rc.reader;
        fc.batch_rows = b->mc.batch; /* the global batch with ranks */
        int workers = s->cpu_workers > 0 ? (int)s->cpu_workers : rap_ncores();
        fc.n_batches = mode == RAP_MODE_CPU ? workers + 2 : 8; /* reading overlaps training */
        fc.pinned = b->dev == RAP_GPU;
        fc.passes = 0; /* cycle over the data */
        fc.trace = tr;
        if ((st = rap_rowfeed_create(&fc, &f)) != RAP_OK)
            goto out;
    }
    if ((st = rap_runtime_create(&rc, m, f, &rt)) != RAP_OK)
        goto out;
    /* ranks: every rank set up (pinned and device allocations may
     * synchronise every GPU of the process) before any queues a collective
     * (as rap train; a mode hung without it, bench/RESULTS.md) */
    if (comm && (st = rap_comm_barrier(comm, "set-up done")) != RAP_OK)
        goto out;
    double t0 = 0, pre0 = 0, starved0 = 0;
    int64_t xg_mine = 0, xg_all0 = 0, xg_all = 0, mv0 = 0, mv1 = 0;
    int64_t trained = 0, measured0 = 0;
    rap_runtime_stats rs;
    while (trained < warm + steps) {
        if (trained == warm) {
            if ((dist.h && (st = rap_hybrid_wait(dist.h)) != RAP_OK) ||
                (st = rap_runtime_sync(rt)) != RAP_OK)
                goto out;
            if (dist.h)
                rap_hybrid_comm_reset(dist.h);
            if (dist.xg)
                rap_ids_xchg_bytes(dist.xg, &xg_mine, &xg_all0);
            if (dist.moves)
                rap_moves_bytes(dist.moves, &mv0);
            rap_runtime_get_stats(rt, &rs);
            pre0 = rs.preload_s;
            starved0 = rs.starved_s;
            measured0 = rs.samples;
            rap_trace_set_enabled(tr, true);
            t0 = rap_now();
        }
        if (tr && trained == warm + s->trace_steps)
            rap_trace_set_enabled(tr, false);
        rap_step_info in;
        if ((st = rap_runtime_step(rt, &in)) != RAP_OK)
            goto out;
        if (in.end) {
            st = rap_fail(RAP_ERR_DATA, "%s: the data ended after %lld steps (mode %s)", b->data,
                          (long long)trained, rap_mode_name(mode));
            goto out;
        }
        trained += in.rows > 0;
    }
    if ((dist.h && (st = rap_hybrid_wait(dist.h)) != RAP_OK) ||
        (st = rap_runtime_sync(rt)) != RAP_OK)
        goto out;
    double wall = rap_now() - t0;
    rap_trace_set_enabled(tr, false);
    rap_runtime_get_stats(rt, &rs);
    wall -= rs.preload_s - pre0;
    row->ran = true;
    row->steps = steps;
    row->samples = rs.samples - measured0;
    row->samples_per_s = wall > 0 ? (double)row->samples / wall : 0;
    row->starved_s = rs.starved_s - starved0;
    row->gpu_gb = (double)rs.gpu_bytes_used / 1e9;
    if (b->dev == RAP_GPU) {
        size_t used = 0;
        if (rap_rt_mem_used(&used) == RAP_OK)
            row->gpu_gb = (double)used / 1e9;
    }
    int64_t n = rs.n_records - warm;
    const rap_step_record *recs = rs.records + (rs.n_records > warm ? warm : rs.n_records);
    tmp = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!tmp) {
        st = rap_fail(RAP_ERR_NOMEM, "bench: out of memory");
        goto out;
    }
    row->step_ms = median(recs, n, offsetof(rap_step_record, step_ms), tmp);
    row->exposed_ms = median(recs, n, offsetof(rap_step_record, exposed_ms), tmp);
    for (int p = 0; p < 4; p++)
        row->phase_ms[p] = median(recs, n, offsetof(rap_step_record, phase_ms) + sizeof(float) * (size_t)p, tmp);
    row->grad_comm_ms = median(recs, n, offsetof(rap_step_record, grad_comm_ms), tmp);
    row->a2a_ms = row->grad_xchg_ms = row->model_bytes = row->prep_bytes = NAN;
    if (dist.xg) {
        rap_ids_xchg_bytes(dist.xg, &xg_mine, &xg_all);
        row->prep_bytes = (double)(xg_all - xg_all0) / (double)steps;
        if ((st = rap_ids_xchg_check(dist.xg)) != RAP_OK)
            goto out;
    }
    if (dist.moves) { /* this rank's sends (rank 0 reports) */
        rap_moves_bytes(dist.moves, &mv1);
        row->prep_bytes = (double)(mv1 - mv0) / (double)steps;
        if ((st = rap_moves_check(dist.moves)) != RAP_OK)
            goto out;
    }
    if (dist.h) {
        rap_hybrid_comm cm;
        rap_hybrid_comm_get(dist.h, &cm);
        if (cm.steps > 0) {
            row->a2a_ms = cm.a2a_ms / (double)cm.steps;
            row->grad_xchg_ms = cm.grad_ms / (double)cm.steps;
            row->model_bytes = (double)cm.bytes_sent / (double)cm.steps;
        }
    }
    if (tr) {
        char path[RAP_OPT_STR + 32];
        trace_name(s->trace, rap_mode_name(mode), path, sizeof path);
        if ((st = rap_trace_write(tr, path)) != RAP_OK)
            goto out;
        rap_info("bench: %s timeline written to %s", rap_mode_name(mode), path);
    }
out:
    free(tmp);
    {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_runtime_free(rt);
        rap_rowfeed_free(f, NULL);
        if (dist.xg || dist.moves) { /* their buffers may still be read on the stream */
            if (dist.h)
                rap_hybrid_wait(dist.h);
            rap_ids_xchg_free(dist.xg);
            rap_moves_free(dist.moves);
        }
        rap_hybrid_free(dist.h);
        rap_schedule_free(dist.rsched);
        rap_fusion_free(&dist.rsfus);
        rap_subplan_rank_free(dist.part, &dist.part_fus);
        rap_cuda_free(dist.loss_dev);
        rap_model_free(m);
        rap_comm_free(ncomm);
        rap_shard_map_free(&map);
        rap_trace_free(tr);
        rap_rt_stream_free(stream);
        if (st != RAP_OK)
            rap_fail(st, "%s", msg);
    }
    return st;
}

/* --gpus N: one thread per rank, each running the mode on its comm. */
typedef struct {
    const bench_ctx *b;
    rap_mode mode;
    bench_row row;
    rap_comm *comm;
    int gpu;
    rap_status st;
    char msg[1024];
} rank_arg;

static void *rank_main(void *p)
{
    rank_arg *a = p;
    a->st = run_mode(a->b, a->mode, &a->row, a->comm, a->gpu);
    snprintf(a->msg, sizeof a->msg, "%s", a->st == RAP_OK ? "" : rap_last_error());
    if (a->st != RAP_OK) /* the others stop at their next collective */
        rap_comm_abort(a->comm, 1);
    return NULL;
}

/* The mode on every rank of comms (n threads); row gets rank 0's. */
static rap_status run_mode_threads(const bench_ctx *b, rap_mode mode, bench_row *row,
                                   rap_comm **comms, int n)
{
    rank_arg *a = rap_calloc(sizeof(rank_arg) * (size_t)n, "bench ranks");
    pthread_t *tid = rap_calloc(sizeof(pthread_t) * (size_t)n, "bench ranks");
    rap_status st = a && tid ? RAP_OK : RAP_ERR_NOMEM;
    int started = 0;
    for (int r = 0; st == RAP_OK && r < n; r++) {
        a[r].b = b;
        a[r].mode = mode;
        a[r].row = *row;
        a[r].comm = comms[r];
        a[r].gpu = r;
        if (pthread_create(&tid[r], NULL, rank_main, &a[r]) != 0)
            st = rap_fail(RAP_ERR_INTERNAL, "bench: cannot start the thread of rank %d", r);
        else
            started++;
    }
    if (st != RAP_OK && started > 0) /* the started ranks would wait for it: stop them */
        rap_comm_abort(comms[0], 1);
    for (int r = 0; r < started; r++)
        pthread_join(tid[r], NULL);
    if (st == RAP_OK) {
        *row = a[0].row;
        int bad = -1; /* the cause, not a rank it stopped (cli_comm_broken_only) */
        for (int pass = 0; pass < 2 && bad < 0; pass++)
            for (int r = 0; bad < 0 && r < n; r++)
                if (a[r].st != RAP_OK && (pass || !cli_comm_broken_only(a[r].msg)))
                    bad = r;
        if (bad >= 0 && strncmp(a[bad].msg, "rank ", 5))
            st = rap_fail(a[bad].st, "rank %d: %s", bad, a[bad].msg);
        else if (bad >= 0)
            st = rap_fail(a[bad].st, "%s", a[bad].msg);
    }
    rap_free(a);
    rap_free(tid);
    return st;
}

/* The table of the reported rows (summarize's). */
static void print_table(const bench_row *rows, int n, const bench_ctx *b, FILE *f)
{
    char reps[96] = "";
    if (b->repeat > 1)
        snprintf(reps, sizeof reps, "; median of %d runs (vs ideal: of the per-run ratios)",
                 b->repeat);
    fprintf(f, "rap bench: plan %s, batch %lld%s, %s, %s tables, %s, %lld steps per mode "
            "(medians per step, ms)%s%s\n",
            b->plan->source, (long long)b->mc.batch, b->ranks > 1 ? " (global)" : "",
            b->dev == RAP_GPU ? "GPU" : "CPU", rap_emb_dtype_name(b->mc.emb_dtype),
            rap_optimizer_name(b->mc.optimizer), (long long)b->s->steps,
            b->hybrid ? "; samples/s of the whole job" : "", reps);
    if (b->hybrid && b->dev == RAP_GPU)
        fprintf(f, "ranks: %d, hybrid step timed by phase: emb_fwd includes the forward "
                "all-to-all, grad_comm the reverse all-to-all (the dense all-reduce runs on its "
                "own stream beside it and emb_backward); a2a and grad_x: rank 0's collectives "
                "alone (grad_x: reverse all-to-all + all-reduce), MB/step: what rank 0 sends in "
                "them; prep_MB: placement batch's ids (all ranks) or rank 0's moves, per step\n",
                b->ranks);
    else if (b->hybrid)
        fprintf(f, "ranks: %d, hybrid step: its time is in the emb_fwd column (the phases are "
                "not timed apart on the CPU); a2a and grad_x: rank 0's collectives\n", b->ranks);
    fprintf(f, "%-11s %12s %8s %9s %9s %9s %9s %9s %9s %9s %7s", "mode", "samples/s",
            "vs ideal", "step", "exposed", "emb_fwd", "mlp_fwd", "mlp_bwd", "emb_bwd",
            "starved_s", "GPU_GB");
    if (b->hybrid)
        fprintf(f, " %9s %9s %9s %10s %10s", "grad_comm", "a2a", "grad_x", "MB/step", "prep_MB");
    fputc('\n', f);
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        if (!r->ran) {
            fprintf(f, "%-11s skipped: %s\n", rap_mode_name(r->mode), r->skipped);
            continue;
        }
        char ratio[32];
        if (isfinite(r->vs_ideal))
            snprintf(ratio, sizeof ratio, "%.3f", r->vs_ideal);
        else
            snprintf(ratio, sizeof ratio, "-");
        fprintf(f, "%-11s %12.0f %8s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %7.2f",
                rap_mode_name(r->mode), r->samples_per_s, ratio, r->step_ms, r->exposed_ms,
                r->phase_ms[0], r->phase_ms[1], r->phase_ms[2], r->phase_ms[3], r->starved_s,
                r->gpu_gb);
        if (b->hybrid)
            fprintf(f, " %9.3f %9.3f %9.3f %10.2f %10.3f", r->grad_comm_ms, r->a2a_ms,
                    r->grad_xchg_ms, r->model_bytes / 1e6, r->prep_bytes / 1e6);
        fputc('\n', f);
    }
}

/* The reported rows (summarize's) as one JSON object; runs: every run's
 * rows (runs[r * n + i]) for the per-run arrays. */
static void print_json(const bench_row *rows, const bench_row *runs, int n, const bench_ctx *b,
                       FILE *f)
{
    char x[RAP_JSON_NUM_LEN];
    fputs("{\"plan\":", f);
    rap_json_put_str(f, b->s->plan);
    fprintf(f, ",\"batch\":%lld,\"device\":\"%s\",\"steps\":%lld,\"warmup\":%lld,"
            "\"repeat\":%d,\"ranks\":%d,\"placement\":\"%s\",\"emb_dtype\":\"%s\","
            "\"optimizer\":\"%s\",\"modes\":[",
            (long long)b->mc.batch, b->dev == RAP_GPU ? "gpu" : "cpu", (long long)b->s->steps,
            (long long)b->s->warmup, b->repeat, b->ranks, rap_placement_name((rap_placement)b->s->placement),
            rap_emb_dtype_name(b->mc.emb_dtype), rap_optimizer_name(b->mc.optimizer));
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        fprintf(f, "%s\n{\"mode\":\"%s\"", i ? "," : "", rap_mode_name(r->mode));
        if (!r->ran) {
            fputs(",\"skipped\":", f);
            rap_json_put_str(f, r->skipped);
            fputc('}', f);
            continue;
        }
        fprintf(f, ",\"samples_per_s\":%s", rap_json_num(r->samples_per_s, x));
        fprintf(f, ",\"vs_ideal\":%s", rap_json_num(r->vs_ideal, x));
        fprintf(f, ",\"step_ms\":%s", rap_json_num(r->step_ms, x));
        fprintf(f, ",\"exposed_ms\":%s", rap_json_num(r->exposed_ms, x));
        static const char *const ph[4] = {"emb_forward_ms", "mlp_forward_ms", "mlp_backward_ms",
                                          "emb_backward_ms"};
        bool one_span = b->hybrid && b->dev != RAP_GPU; /* CPU ranks: phases not apart */
        if (one_span)
            fprintf(f, ",\"hybrid_step_ms\":%s", rap_json_num(r->phase_ms[0], x));
        for (int p = 0; p < 4; p++)
            fprintf(f, ",\"%s\":%s", ph[p], rap_json_num(one_span ? NAN : r->phase_ms[p], x));
        if (b->hybrid) {
            fprintf(f, ",\"grad_comm_ms\":%s", rap_json_num(one_span ? NAN : r->grad_comm_ms, x));
            fprintf(f, ",\"all_to_all_ms\":%s", rap_json_num(r->a2a_ms, x));
            fprintf(f, ",\"grad_exchange_ms\":%s", rap_json_num(r->grad_xchg_ms, x));
            fprintf(f, ",\"model_bytes_per_step\":%s", rap_json_num(r->model_bytes, x));
            fprintf(f, ",\"prep_bytes_per_step\":%s", rap_json_num(r->prep_bytes, x));
        }
        fprintf(f, ",\"starved_s\":%s", rap_json_num(r->starved_s, x));
        fprintf(f, ",\"samples\":%lld,\"gpu_gb\":%s", (long long)r->samples,
                rap_json_num(r->gpu_gb, x));
        fprintf(f, ",\"samples_per_s_runs\":[");
        for (int k = 0; k < b->repeat; k++)
            fprintf(f, "%s%s", k ? "," : "", rap_json_num(runs[k * n + i].samples_per_s, x));
        fprintf(f, "],\"vs_ideal_runs\":[");
        for (int k = 0; k < b->repeat; k++) /* null where the run had no ideal */
            fprintf(f, "%s%s", k ? "," : "", rap_json_num(isfinite(r->vs_ideal) ?
                                                          runs[k * n + i].vs_ideal : NAN, x));
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
}

int cmd_bench(int argc, char **argv)
{
    cli_settings s;
    bool mpi = rap_dist_detect(NULL);
    char **args = cli_mpi_args(&argc, argv);
    if (!args)
        return 1;
    cli_parse("bench", CMD_BENCH, argc, args, &s);
    if (args != argv)
        free(args);
    /* ranks: under mpirun one per process; --gpus N: N threads */
    rap_comm *world = NULL, **comms = NULL;
    int n_ranks = 1, rank = 0;
    bool gpus = rap_opts_given(cli_options, cli_n_options, "gpus");
    if (mpi && gpus) {
        fprintf(stderr, "rap bench: --gpus under mpirun: each process is one rank; leave --gpus "
                "out\n");
        return 2;
    }
    if (mpi) {
        rap_status ms = rap_comm_mpi_init(&world);
        if (ms != RAP_OK)
            return cli_fail("bench", ms);
        if (s.comm_timeout > 0)
            rap_comm_set_timeout(world, s.comm_timeout);
        n_ranks = rap_comm_size(world);
        rank = rap_comm_rank(world);
    } else if (gpus) {
        n_ranks = (int)s.gpus;
        comms = rap_calloc(sizeof(rap_comm *) * (size_t)n_ranks, "bench ranks");
        rap_status cs = comms ? rap_comm_threads_create(n_ranks, comms) : RAP_ERR_NOMEM;
        if (cs != RAP_OK)
            return cli_fail("bench", cs);
        for (int r = 0; r < n_ranks && s.comm_timeout > 0; r++)
            rap_comm_set_timeout(comms[r], s.comm_timeout);
    }
    if (s.mps_start) { /* before any CUDA call */
        rap_status ms = rap_mps_daemon_start();
        if (ms != RAP_OK)
            return cli_fail("bench", ms);
    }
    rap_status st = RAP_OK;
    rap_plan *plan = NULL;
    rap_fusion fus = {0};
    rap_schedule *sched = NULL;
    char tmp[600] = "";
    bench_row rows[RAP_MODE_COUNT]; /* reported: the medians over the runs */
    bench_row *runs = NULL;          /* run r's rows: runs[r * n_modes + i] */
    double *med_tmp = NULL;
    const int R = (int)s.repeat;
    int n_modes = 0;
    bench_ctx b;
    memset(&b, 0, sizeof b);
    b.s = &s;
    b.repeat = R;
    rap_mode modes[RAP_MODE_COUNT];
    const char *spec = s.modes;
    char one[32];
    if (s.mode > 0 && !rap_opts_given(cli_options, cli_n_options, "modes")) {
        snprintf(one, sizeof one, "%s", rap_mode_name((rap_mode)(s.mode - 1)));
        spec = one;
    }
    if ((st = rap_mode_list_parse(spec, modes, RAP_MODE_COUNT, &n_modes)) != RAP_OK)
        goto out;
    if ((st = cli_resolve_device(s.device, &b.dev)) != RAP_OK)
        goto out;
    if (s.steps == 0) /* the default: a GPU step is under a millisecond */
        s.steps = b.dev == RAP_GPU ? RAP_BENCH_GPU_STEPS : RAP_BENCH_CPU_STEPS;
    if ((st = cli_load_plan(s.plan, &plan)) != RAP_OK)
        goto out;
    b.plan = plan;
    char fusion_file[RAP_OPT_STR + 16];
    snprintf(fusion_file, sizeof fusion_file, "%s.fusion", s.schedule);
    if (s.schedule[0] && access(fusion_file, R_OK) == 0) /* rap plan's, beside the schedule */
        st = rap_fusion_load(plan, fusion_file, &fus);
    else
        st = rap_fuse(plan, (rap_fuse_kind)s.fusion, &fus);
    if (st != RAP_OK)
        goto out;
    b.fus = &fus;
    if (s.schedule[0] && access(s.schedule, R_OK) != 0 && rap_rank_schedule_exists(s.schedule)) {
        b.rank_prefix = s.schedule; /* rap plan --gpus R's per-rank manifests */
    } else if (s.schedule[0]) {
        if ((st = rap_schedule_load(s.schedule, &sched)) != RAP_OK)
            goto out;
        b.sched = sched;
    }
    rap_model_config *m = &b.mc;
    rap_model_config_defaults(m);
    if ((st = cli_parse_widths("mlp-bot", s.mlp_bot, m->bot, RAP_MAX_LAYERS, &m->n_bot)) != RAP_OK ||
        (st = cli_parse_widths("mlp-top", s.mlp_top, m->top, RAP_MAX_LAYERS, &m->n_top)) != RAP_OK)
        goto out;
    m->emb_dim = (int)s.emb_dim;
    m->batch = s.batch;
    m->lr = (float)s.lr;
    m->optimizer = (rap_optimizer)s.optimizer;
    m->emb_dtype = (rap_emb_dtype)s.emb_dtype;
    m->adagrad_init = (float)s.adagrad_init;
    m->precision = s.precision == 1 ? RAP_BF16 : RAP_FP32;
    m->strict_fp32 = s.precision == 2; /* fp32-strict */
    m->seed = (uint64_t)s.seed;
    m->threads = (int)s.threads;
    if ((st = rap_input_shape(plan, &m->n_dense, &m->n_tables, m->table_rows)) != RAP_OK)
        goto out;
    m->max_bag = 1;
    for (int i = 0; i < plan->n_cols; i++) {
        const rap_node *nd = &plan->nodes[plan->cols[i].node];
        if (nd->kind == RAP_SPARSE && nd->ids_per_row > m->max_bag)
            m->max_bag = nd->ids_per_row;
    }
    if ((st = rap_model_config_check(m)) != RAP_OK)
        goto out;
    b.data = s.data;
    if (!s.data[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/rap_bench_%d.tsv", dir && dir[0] ? dir : "/tmp",
                 (int)getpid());
        rap_gen_config g;
        memset(&g, 0, sizeof g);
        g.rows = (s.warmup + s.steps + 2) * s.batch;
        g.seed = (uint64_t)s.seed;
        g.out = tmp;
        g.threads = (int)s.threads;
        if ((st = rap_gen_cardinalities("kaggle", g.card)) != RAP_OK)
            goto out;
        rap_gen_result gr;
        rap_info("bench: generating %lld rows into %s", (long long)g.rows, tmp);
        if ((st = rap_gen_write(&g, &gr)) != RAP_OK) {
            remove(tmp);
            tmp[0] = 0;
            goto out;
        }
        b.data = tmp;
    }
    b.shard = rap_runtime_is_shard(b.data);
    if (!b.shard) {
        rap_reader_config prc = rap_reader_defaults();
        cli_reader_options(&s, &prc);
        prc.input = b.data;
        cli_print_reader_threads(&s, &prc);
    }
    for (int i = 0; b.shard && i < n_modes; i++)
        if (modes[i] != RAP_MODE_IDEAL) {
            st = rap_fail(RAP_ERR_ARG, "--data %s: " RAP_SHARD_NEEDS_IDEAL " (--modes ideal; "
                          "not %s)", b.data, rap_mode_name(modes[i]));
            goto out;
        }
    runs = rap_calloc(sizeof(bench_row) * (size_t)R * (size_t)(n_modes > 0 ? n_modes : 1),
                      "bench runs");
    med_tmp = rap_calloc(sizeof(double) * 2 * (size_t)R, "bench medians");
    if (!runs || !med_tmp) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    /* the same loop on every rank: every run, every mode, whatever failed */
    for (int k = 0; k < R; k++) {
        char run_of[48] = "";
        if (R > 1)
            snprintf(run_of, sizeof run_of, " (run %d/%d)", k + 1, R);
        b.trace_run = k == R - 1;
        for (int i = 0; i < n_modes; i++) {
            bench_row *r = &runs[k * n_modes + i];
            memset(r, 0, sizeof *r);
            r->mode = modes[i];
            if (!b.shard && !rap_mode_available(modes[i], b.dev, r->skipped, sizeof r->skipped))
                continue;
            if ((world || comms) && modes[i] == RAP_MODE_MPS) {
                snprintf(r->skipped, sizeof r->skipped, "not with ranks (its server serves one "
                         "trainer)");
                continue;
            }
            rap_info("bench: mode %s%s%s", rap_mode_name(modes[i]), run_of,
                     world || comms ? " (ranks)" : "");
            rap_status ms;
            if (comms)
                ms = run_mode_threads(&b, modes[i], r, comms, n_ranks);
            else if (world) {
                int gpu = -1;
                if (b.dev == RAP_GPU) {
                    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
                    int have = 0;
                    rap_rt_device_count(&have);
                    gpu = (lr ? atoi(lr) : rank) % (have > 0 ? have : 1);
                }
                ms = run_mode(&b, modes[i], r, world, gpu);
            } else
                ms = run_mode(&b, modes[i], r, NULL, -1);
            if (ms != RAP_OK) { /* even after its steps ran (--trace not written) */
                r->ran = false;
                snprintf(r->skipped, sizeof r->skipped, "failed%s: %s", run_of, rap_last_error());
                rap_warn("bench: mode %s failed%s: %s", rap_mode_name(modes[i]), run_of,
                         rap_last_error());
                /* --gpus: the ranks' threads have all returned; a comm a failure
                 * broke (aborted, timed out) would fail every later mode: new one */
                if (comms) {
                    for (int q = 0; q < n_ranks; q++)
                        rap_comm_free(comms[q]);
                    memset(comms, 0, sizeof(rap_comm *) * (size_t)n_ranks);
                    if ((st = rap_comm_threads_create(n_ranks, comms)) != RAP_OK)
                        goto out;
                    for (int q = 0; q < n_ranks && s.comm_timeout > 0; q++)
                        rap_comm_set_timeout(comms[q], s.comm_timeout);
                }
            }
        }
        run_ratios(&runs[k * n_modes], n_modes);
    }
    summarize(runs, R, n_modes, rows, med_tmp);
    b.ranks = n_ranks;
    b.hybrid = world || comms;
    if (rank != 0)
        ; /* rank 0 reports for the job */
    else if (s.json)
        print_json(rows, runs, n_modes, &b, stdout);
    else
        print_table(rows, n_modes, &b, stdout);
out:
    {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        if (tmp[0])
            remove(tmp);
        rap_free(runs);
        rap_free(med_tmp);
        rap_schedule_free(sched);
        rap_fusion_free(&fus);
        rap_plan_free(plan);
        for (int r = 0; comms && r < n_ranks; r++)
            rap_comm_free(comms[r]);
        rap_free(comms);
        if (st != RAP_OK) {
            rap_fail(st, "%s", msg);
            int code = cli_fail("bench", st);
            if (world)
                rap_comm_abort(world, code);
            rap_comm_free(world);
            return code;
        }
        rap_comm_free(world);
    }
    return 0;
}
