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
#include "run/mps.h"
#include "run/pipeline.h"
#include "run/progressive.h"
#include "run/runtime.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* --steps 0 (the default): measured steps per mode. On the H200 a step is
 * under a millisecond, and at 60 steps a single host hiccup moved a run's
 * ratio to ideal by 1-8 % (bench/RESULTS.md, 2026-11-29, commit ddad953). */
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
    double cpu_s_per_mrow;   /* host CPU seconds of the process (getrusage: user +
                              * system, every thread) over the measured steps, per
                              * million rows trained */
    double parse_in, parse_out; /* the GPU parse in the windows (rap mode): lines it
                              * launched at a window's start and outside the windows
                              * over the measured steps; NaN when not gated */
    double parse_here, lines_read; /* the feed's lines since the start: those this rank
                              * parsed itself and those read (the parser runs ahead of the
                              * reading; about 1/R of them when the ranks share the parse,
                              * docs/INPUT.md); NaN without a feed */
    int64_t steps, samples;
    double gpu_gb;
    /* the memory plan (run/memplan.h) beside the measured use: GiB of
     * the device's pool (the host's on the CPU) planned, its reserve, and
     * on the GPU the drop of free memory after set-up and after the steps */
    double plan_gib, reserve_gib, used_setup_gib, used_steps_gib;
} bench_row;

/* User + system seconds of the whole process so far. */
static double process_cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0)
        return NAN;
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

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
        MED(cpu_s_per_mrow);
        MED(parse_in);
        MED(parse_out);
        MED(parse_here);
        MED(lines_read);
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
        for (int r = 1; r < R; r++) { /* the largest use of the runs (NaN: unmeasured) */
            const bench_row *x = &runs[r * n + i];
            if (x->used_setup_gib > o->used_setup_gib)
                o->used_setup_gib = x->used_setup_gib;
            if (x->used_steps_gib > o->used_steps_gib)
                o->used_steps_gib = x->used_steps_gib;
        }
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
    const rap_pipeline_plan *pl; /* the pipeline of every mode and rank (run/pipeline.h) */
    rap_model_config mc;     /* the whole model (the plan's shape) */
    rap_device dev;
    const char *data;
    bool shard;              /* data is a rap shard: ideal mode only */
    int ranks;               /* ranks of the job */
    bool hybrid;             /* ranks (mpirun or --gpus): the hybrid step */
    int repeat;              /* runs of the mode list (--repeat) */
    bool trace_run;          /* this run writes --trace (the last one) */
} bench_ctx;

/* What the measured steps start from: the sums taken after the warm-up. */
typedef struct {
    double t0, pre0, starved0, cpu0;
    int64_t parse_in0, parse_out0;
    int64_t measured0;
    int64_t sent_mine0, sent_all0; /* preprocessed bytes sent between ranks */
} bench_mark;

/* The lines the pipeline's feed parsed on this rank and read so far
 * (false without a feed). */
static bool feed_lines(rap_pipeline *p, int64_t *here, int64_t *read)
{
    *here = *read = 0;
    rap_rowfeed *f = rap_pipeline_feed(p);
    if (!f)
        return false;
    rap_rowfeed_stats fs;
    rap_rowfeed_get_stats(f, &fs);
    *here = fs.reader.lines_parsed_here;
    *read = fs.reader.rows_read;
    return true;
}

/* After the warm-up: the queued steps done, the counters noted, the
 * trace on, the clock started. */
static rap_status mark_start(rap_pipeline *p, rap_trace *tr, bench_mark *m)
{
    rap_runtime *rt = rap_pipeline_runtime(p);
    rap_hybrid *hyb = rap_pipeline_hybrid(p);
    if (hyb)
        RAP_TRY(rap_hybrid_wait(hyb));
    RAP_TRY(rap_runtime_sync(rt));
    if (hyb)
        rap_hybrid_comm_reset(hyb);
    rap_pipeline_bytes_sent(p, &m->sent_mine0, &m->sent_all0);
    rap_runtime_stats rs;
    rap_runtime_get_stats(rt, &rs);
    m->pre0 = rs.preload_s;
    m->starved0 = rs.starved_s;
    m->parse_in0 = rs.parse_lines_in;
    m->parse_out0 = rs.parse_lines_out;
    m->measured0 = rs.samples;
    rap_trace_set_enabled(tr, true);
    m->cpu0 = process_cpu_s();
    m->t0 = rap_now();
    return RAP_OK;
}

/* The row of the measured steps (after they ran and were waited for). */
static rap_status measure(const bench_ctx *b, rap_pipeline *p, double wall, const bench_mark *m,
                          bench_row *row)
{
    int64_t warm = b->s->warmup, steps = b->s->steps;
    rap_runtime_stats rs;
    rap_runtime_get_stats(rap_pipeline_runtime(p), &rs);
    wall -= rs.preload_s - m->pre0;
    row->ran = true;
    row->steps = steps;
    row->samples = rs.samples - m->measured0;
    row->samples_per_s = wall > 0 ? (double)row->samples / wall : 0;
    row->starved_s = rs.starved_s - m->starved0;
    row->parse_in = rs.parse_gated ? (double)(rs.parse_lines_in - m->parse_in0) : NAN;
    row->parse_out = rs.parse_gated ? (double)(rs.parse_lines_out - m->parse_out0) : NAN;
    int64_t here, read;
    bool fed = feed_lines(p, &here, &read);
    row->parse_here = fed ? (double)here : NAN;
    row->lines_read = fed ? (double)read : NAN;
    double cpu_s = process_cpu_s() - m->cpu0;
    row->cpu_s_per_mrow = row->samples > 0 ? cpu_s / ((double)row->samples / 1e6) : NAN;
    row->gpu_gb = (double)rs.gpu_bytes_used / 1e9;
    if (b->dev == RAP_GPU) {
        size_t used = 0;
        if (rap_rt_mem_used(&used) == RAP_OK)
            row->gpu_gb = (double)used / 1e9;
    }
    int64_t n = rs.n_records - warm;
    const rap_step_record *recs = rs.records + (rs.n_records > warm ? warm : rs.n_records);
    float *tmp = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!tmp)
        return rap_fail(RAP_ERR_NOMEM, "bench: out of memory");
    row->step_ms = median(recs, n, offsetof(rap_step_record, step_ms), tmp);
    row->exposed_ms = median(recs, n, offsetof(rap_step_record, exposed_ms), tmp);
    for (int q = 0; q < 4; q++)
        row->phase_ms[q] = median(recs, n, offsetof(rap_step_record, phase_ms) + sizeof(float) * (size_t)q, tmp);
    row->grad_comm_ms = median(recs, n, offsetof(rap_step_record, grad_comm_ms), tmp);
    free(tmp);
    row->a2a_ms = row->grad_xchg_ms = row->model_bytes = row->prep_bytes = NAN;
    /* placement batch: the ids every rank sends (all ranks); the planner's
     * moves: this rank's sends (rank 0 reports) */
    int64_t mine = 0, all = 0;
    if (rap_pipeline_bytes_sent(p, &mine, &all)) {
        row->prep_bytes = all >= 0 ? (double)(all - m->sent_all0) / (double)steps
                                   : (double)(mine - m->sent_mine0) / (double)steps;
        RAP_TRY(rap_pipeline_check(p));
    }
    rap_hybrid *hyb = rap_pipeline_hybrid(p);
    if (hyb) {
        rap_hybrid_comm cm;
        rap_hybrid_comm_get(hyb, &cm);
        if (cm.steps > 0) {
            row->a2a_ms = cm.a2a_ms / (double)cm.steps;
            row->grad_xchg_ms = cm.grad_ms / (double)cm.steps;
            row->model_bytes = (double)cm.bytes_sent / (double)cm.steps;
        }
    }
    return RAP_OK;
}

/* The warm-up and measured steps of pipeline p (started), then row. */
static rap_status run_steps(const bench_ctx *b, rap_pipeline *p, rap_mode mode, rap_trace *tr,
                            bench_row *row)
{
    const cli_settings *s = b->s;
    int64_t warm = s->warmup, steps = s->steps;
    rap_runtime *rt = rap_pipeline_runtime(p);
    rap_hybrid *hyb = rap_pipeline_hybrid(p);
    bench_mark m;
    memset(&m, 0, sizeof m);
    int64_t trained = 0;
    while (trained < warm + steps) {
        if (trained == warm)
            RAP_TRY(mark_start(p, tr, &m));
        if (tr && trained == warm + s->trace_steps)
            rap_trace_set_enabled(tr, false);
        rap_step_info in;
        RAP_TRY(rap_runtime_step(rt, &in));
        if (in.end)
            return rap_fail(RAP_ERR_DATA, "%s: the data ended after %lld steps (mode %s)", b->data,
                            (long long)trained, rap_mode_name(mode));
        trained += in.rows > 0;
    }
    if (hyb)
        RAP_TRY(rap_hybrid_wait(hyb));
    RAP_TRY(rap_runtime_sync(rt));
    double wall = rap_now() - m.t0;
    rap_trace_set_enabled(tr, false);
    return measure(b, p, wall, &m, row);
}

/* The plan and the measured use into the row (after the steps), and the
 * line that shows them. */
static void plan_row(rap_memplan *p, rap_mode mode, bench_row *row)
{
    rap_memplan_measure_used(p, 1);
    const int k = p->device == RAP_GPU ? RAP_MEM_DEVICE : RAP_MEM_HOST;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    row->plan_gib = p->total[k] / gib;
    row->reserve_gib = p->reserve[k] / gib;
    row->used_setup_gib = p->used[0] >= 0 ? p->used[0] / gib : NAN;
    row->used_steps_gib = p->used[1] >= 0 ? p->used[1] / gib : NAN;
    char line[512];
    rap_memplan_summary(p, line, sizeof line);
    rap_info("bench: mode %s: %s", rap_mode_name(mode), line);
}

/* The memory plan of each mode (with ranks: rank 0's) before anything is
 * allocated or generated: printed with --dry-run, else checked, the first
 * that does not fit refusing the run. */
static rap_status preflight(const bench_ctx *b, const rap_mode *modes, int n_modes, bool ranks)
{
    rap_memplan *p = rap_malloc(sizeof *p, "memory plan");
    rap_status st = p ? RAP_OK : RAP_ERR_NOMEM;
    for (int i = 0; st == RAP_OK && i < n_modes; i++) {
        char why[256];
        if (!b->shard && !rap_mode_available(modes[i], b->dev, why, sizeof why))
            continue;
        if (ranks && modes[i] == RAP_MODE_MPS)
            continue;
        rap_pipeline_rank r = {(int)modes[i], NULL, -1, NULL, NULL, NULL};
        st = rap_pipeline_memplan(b->pl, &r, 0, p);
        if (st == RAP_OK && b->s->dry_run) {
            printf("mode %s%s: ", rap_mode_name(modes[i]), ranks ? " (rank 0)" : "");
            rap_memplan_print(p, stdout);
        } else if (st == RAP_OK) {
            st = rap_pipeline_memplan_check(p, "bench", b->mc.batch);
        }
    }
    rap_free(p);
    return st;
}

/* One mode; with comm (a rank of several) the model is this rank's share
 * (docs/DIST.md) and each step the hybrid one; gpu: the rank's device. The
 * pipeline is the builder's (run/pipeline.h), as rap train's. */
/* --progressive: the window of pipeline p's model (on its stream), handed
 * to the runtimes p starts. Refused with ranks (as rap train). */
static rap_status progressive_create(const bench_ctx *b, rap_comm *comm, rap_pipeline *p,
                                     rap_progressive **pv)
{
    const cli_settings *s = b->s;
    if (comm)
        return rap_fail(RAP_ERR_ARG, "--progressive: not with ranks yet (as rap train)");
    if (s->progressive_window < b->mc.batch)
        return rap_fail(RAP_ERR_ARG, "--progressive-window %lld: the window must hold at least "
                        "one batch (--batch %lld)", (long long)s->progressive_window,
                        (long long)b->mc.batch);
    RAP_TRY(rap_progressive_create(s->progressive_window, b->dev, rap_pipeline_stream(p), pv));
    rap_pipeline_set_progressive(p, *pv);
    return RAP_OK;
}

static rap_status run_mode(const bench_ctx *b, rap_mode mode, bench_row *row, rap_comm *comm,
                           int gpu)
{
    const cli_settings *s = b->s;
    rap_status st = RAP_OK;
    rap_pipeline *p = NULL;
    rap_trace *tr = NULL;
    if (comm && b->dev == RAP_GPU && gpu >= 0) /* the trace's events on the rank's GPU */
        RAP_TRY(rap_rt_set_device(gpu));
    if (s->trace[0] && b->trace_run && (!comm || rap_comm_rank(comm) == 0)) {
        rap_trace_config tc = {0};
        tc.max_gpu_spans = b->dev == RAP_GPU ? 16384 : 0;
        RAP_TRY(rap_trace_create(&tc, &tr));
        rap_trace_set_enabled(tr, false);
    }
    rap_pipeline_rank r = {(int)mode, comm, gpu, tr, NULL, NULL};
    /* the memory plan before anything is allocated (docs/MEMORY.md) */
    rap_memplan *plan = rap_malloc(sizeof *plan, "memory plan");
    rap_progressive *pv = NULL; /* --progressive: its cost is what is measured */
    st = plan ? rap_pipeline_memplan(b->pl, &r, 0, plan) : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_pipeline_memplan_check(plan, "bench", b->mc.batch);
    if (st == RAP_OK)
        st = rap_pipeline_create(b->pl, &r, &p);
    if (st == RAP_OK && s->progressive)
        st = progressive_create(b, comm, p, &pv);
    if (st == RAP_OK) /* cycle over the data (or the shard) */
        st = rap_pipeline_start(p, 0, 0);
    if (st == RAP_OK) {
        rap_memplan_measure_used(plan, 0);
        st = run_steps(b, p, mode, tr, row);
    }
    if (st == RAP_OK)
        plan_row(plan, mode, row);
    rap_free(plan);
    if (st == RAP_OK && pv) { /* read once at the end: the window is real */
        rap_progressive_stats ps;
        if ((st = rap_progressive_read(pv, &ps)) == RAP_OK)
            rap_info("%s: progressive validation over the last %lld rows: AUC %.4f, logloss "
                     "%.4f, calibration %.3f", rap_mode_name(mode), (long long)ps.rows, ps.auc,
                     ps.logloss, ps.calibration);
    }
    if (st == RAP_OK && tr) {
        char path[RAP_OPT_STR + 32];
        trace_name(s->trace, rap_mode_name(mode), path, sizeof path);
        st = rap_trace_write(tr, path);
        if (st == RAP_OK)
            rap_info("bench: %s timeline written to %s", rap_mode_name(mode), path);
    }
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    rap_pipeline_stop(p, NULL);  /* the runtime first: it adds to the window */
    rap_progressive_free(pv);    /* then the window, while the stream lives */
    rap_pipeline_free(p);
    rap_trace_free(tr);
    if (st != RAP_OK)
        rap_fail(st, "%s", msg);
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
    fprintf(f, "%-11s %12s %8s %9s %9s %9s %9s %9s %9s %9s %7s %8s %8s", "mode", "samples/s",
            "vs ideal", "step", "exposed", "emb_fwd", "mlp_fwd", "mlp_bwd", "emb_bwd",
            "starved_s", "GPU_GB", "plan_GiB", "used_GiB");
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
        fprintf(f, "%-11s %12.0f %8s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %7.2f %8.3f %8.3f",
                rap_mode_name(r->mode), r->samples_per_s, ratio, r->step_ms, r->exposed_ms,
                r->phase_ms[0], r->phase_ms[1], r->phase_ms[2], r->phase_ms[3], r->starved_s,
                r->gpu_gb, r->plan_gib, r->used_steps_gib);
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
        fprintf(f, ",\"host_cpu_s_per_mrow\":%s", rap_json_num(r->cpu_s_per_mrow, x));
        fprintf(f, ",\"parse_lines_in\":%s", rap_json_num(r->parse_in, x));
        fprintf(f, ",\"parse_lines_out\":%s", rap_json_num(r->parse_out, x));
        fprintf(f, ",\"parse_lines_here\":%s", rap_json_num(r->parse_here, x));
        fprintf(f, ",\"lines_read\":%s", rap_json_num(r->lines_read, x));
        fprintf(f, ",\"samples\":%lld,\"gpu_gb\":%s", (long long)r->samples,
                rap_json_num(r->gpu_gb, x));
        fprintf(f, ",\"mem_plan_gib\":%s", rap_json_num(r->plan_gib, x));
        fprintf(f, ",\"mem_reserve_gib\":%s", rap_json_num(r->reserve_gib, x));
        fprintf(f, ",\"mem_used_setup_gib\":%s", rap_json_num(r->used_setup_gib, x));
        fprintf(f, ",\"mem_used_steps_gib\":%s", rap_json_num(r->used_steps_gib, x));
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

/* The pipeline's config of every mode and rank (its mode and rank are
 * each run's: run_mode). */
static void bench_pipeline_config(const cli_settings *s, const bench_ctx *b, int n_ranks,
                                  bool ranks, rap_pipeline_config *c)
{
    rap_pipeline_config_defaults(c);
    c->cmd = "bench";
    c->plan = b->plan;
    c->plan_spec = s->plan;
    c->fusion = s->fusion;
    c->schedule = s->schedule;
    c->model = b->mc;
    c->device = b->dev;
    c->ranks = ranks ? n_ranks : 0;
    c->placement = (rap_placement)s->placement;
    c->cpu_workers = (int)s->cpu_workers;
    c->prep_threads = (int)s->threads;
    c->cuda_graph = s->cuda_graph;
    c->prep_lanes = (int)s->prep_lanes;
    int64_t warm = s->warmup, steps = s->steps;
    c->ideal_batches = (int)(warm + steps < 32 ? warm + steps : 32);
    c->max_records = warm + steps;
    c->data = b->data;
    cli_reader_options(s, &c->reader);
    c->reader.bad_rows = (rap_bad_rows)s->bad_rows;
    c->reader.max_line = s->max_line;
}

/* The job's ranks: under mpirun one per process (world); --gpus N: N
 * threads over comms; else one rank. */
typedef struct {
    rap_comm *world, **comms;
    int n, rank;
} bench_ranks;

/* Opens the ranks; 0, or the exit code after saying why not. */
static int open_ranks(const cli_settings *s, bool mpi, bench_ranks *rk)
{
    memset(rk, 0, sizeof *rk);
    rk->n = 1;
    bool gpus = cli_given("gpus");
    if (mpi && gpus) {
        fprintf(stderr, "rap bench: --gpus under mpirun: each process is one rank; leave --gpus "
                "out\n");
        return 2;
    }
    if (mpi) {
        rap_status ms = rap_comm_mpi_init(&rk->world);
        if (ms != RAP_OK)
            return cli_fail("bench", ms);
        if (s->comm_timeout > 0)
            rap_comm_set_timeout(rk->world, s->comm_timeout);
        rk->n = rap_comm_size(rk->world);
        rk->rank = rap_comm_rank(rk->world);
    } else if (gpus) {
        rk->n = (int)s->gpus;
        rk->comms = rap_calloc(sizeof(rap_comm *) * (size_t)rk->n, "bench ranks");
        rap_status cs = rk->comms ? rap_comm_threads_create(rk->n, rk->comms) : RAP_ERR_NOMEM;
        if (cs != RAP_OK)
            return cli_fail("bench", cs);
        for (int r = 0; r < rk->n && s->comm_timeout > 0; r++)
            rap_comm_set_timeout(rk->comms[r], s->comm_timeout);
    }
    return 0;
}

/* --gpus: new comms for the ranks' threads (all returned): one a failure
 * broke (aborted, timed out) would fail every later mode. */
static rap_status renew_comms(const cli_settings *s, bench_ranks *rk)
{
    for (int q = 0; q < rk->n; q++)
        rap_comm_free(rk->comms[q]);
    memset(rk->comms, 0, sizeof(rap_comm *) * (size_t)rk->n);
    RAP_TRY(rap_comm_threads_create(rk->n, rk->comms));
    for (int q = 0; q < rk->n && s->comm_timeout > 0; q++)
        rap_comm_set_timeout(rk->comms[q], s->comm_timeout);
    return RAP_OK;
}

/* Mode `mode` once on the job's ranks into r (run_of: " (run k/R)" or "");
 * a failure is r's, not the job's; only a comm that cannot be renewed
 * fails the job. */
static rap_status bench_one(const bench_ctx *b, bench_ranks *rk, rap_mode mode,
                            const char *run_of, bench_row *r)
{
    memset(r, 0, sizeof *r);
    r->mode = mode;
    if (!b->shard && !rap_mode_available(mode, b->dev, r->skipped, sizeof r->skipped))
        return RAP_OK;
    bool ranks = rk->world || rk->comms;
    if (ranks && mode == RAP_MODE_MPS) {
        snprintf(r->skipped, sizeof r->skipped, "not with ranks (its server serves one "
                 "trainer)");
        return RAP_OK;
    }
    rap_info("bench: mode %s%s%s", rap_mode_name(mode), run_of, ranks ? " (ranks)" : "");
    rap_status ms;
    if (rk->comms)
        ms = run_mode_threads(b, mode, r, rk->comms, rk->n);
    else if (rk->world) {
        int gpu = -1;
        if (b->dev == RAP_GPU) {
            const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
            int have = 0;
            rap_rt_device_count(&have);
            gpu = (lr ? atoi(lr) : rk->rank) % (have > 0 ? have : 1);
        }
        ms = run_mode(b, mode, r, rk->world, gpu);
    } else
        ms = run_mode(b, mode, r, NULL, -1);
    if (ms == RAP_OK)
        return RAP_OK;
    /* even after its steps ran (--trace not written) */
    r->ran = false;
    snprintf(r->skipped, sizeof r->skipped, "failed%s: %s", run_of, rap_last_error());
    rap_warn("bench: mode %s failed%s: %s", rap_mode_name(mode), run_of, rap_last_error());
    return rk->comms ? renew_comms(b->s, rk) : RAP_OK;
}

/* No --data: rows for every step of a mode (and two batches more),
 * generated into tmp. */
static rap_status gen_data(const cli_settings *s, char *tmp)
{
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = (s->warmup + s->steps + 2) * s->batch;
    g.seed = (uint64_t)s->seed;
    g.out = tmp;
    g.threads = (int)s->threads;
    g.schema = s->in_schema; /* rows of --schema when given */
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result gr;
    rap_info("bench: generating %lld rows into %s", (long long)g.rows, tmp);
    rap_status st = rap_gen_write(&g, &gr);
    if (st != RAP_OK) {
        remove(tmp);
        tmp[0] = 0;
    }
    return st;
}

/* The mode list: --modes, or --mode alone when given without it. */
static rap_status mode_list(const cli_settings *s, rap_mode *modes, int *n)
{
    const char *spec = s->modes;
    char one[32];
    if (s->mode > 0 && !cli_given("modes")) {
        snprintf(one, sizeof one, "%s", rap_mode_name((rap_mode)(s->mode - 1)));
        spec = one;
    }
    return rap_mode_list_parse(spec, modes, RAP_MODE_COUNT, n);
}

/* Everything after the ranks are open: plan, data, every run of every
 * mode, the report. */
static rap_status bench_job(cli_settings *s, bench_ranks *rk, char *tmp)
{
    rap_plan *plan = NULL;
    rap_pipeline_plan *pl = NULL;
    bench_row rows[RAP_MODE_COUNT]; /* reported: the medians over the runs */
    bench_row *runs = NULL;          /* run r's rows: runs[r * n_modes + i] */
    double *med_tmp = NULL;
    const int R = (int)s->repeat;
    int n_modes = 0;
    bench_ctx b;
    memset(&b, 0, sizeof b);
    b.s = s;
    b.repeat = R;
    rap_mode modes[RAP_MODE_COUNT];
    rap_status st = mode_list(s, modes, &n_modes);
    if (st == RAP_OK)
        st = rap_parse_knobs_check(); /* before any work */
    if (st == RAP_OK)
        st = rap_prep_knobs_check();
    if (st == RAP_OK)
        st = cli_resolve_device(s->device, &b.dev);
    if (st == RAP_OK && s->steps == 0) /* the default: a GPU step is under a millisecond */
        s->steps = b.dev == RAP_GPU ? RAP_BENCH_GPU_STEPS : RAP_BENCH_CPU_STEPS;
    if (st == RAP_OK)
        st = cli_load_plan_for(s, &plan);
    b.plan = plan;
    if (st == RAP_OK)
        st = cli_model_config(s, &b.mc);
    b.data = s->data;
    if (!s->data[0]) { /* generated below, once the pipeline is planned */
        const char *dir = getenv("TMPDIR");
        snprintf(tmp, 600, "%s/rap_bench_%d.tsv", dir && dir[0] ? dir : "/tmp", (int)getpid());
        b.data = tmp;
    }
    /* the pipeline of every mode and rank: the plan's shape, the fusion,
     * what --schedule is (run/pipeline.h) */
    rap_pipeline_config pc;
    bench_pipeline_config(s, &b, rk->n, rk->world || rk->comms, &pc);
    if (st == RAP_OK)
        st = rap_pipeline_plan_create(&pc, &pl);
    if (st == RAP_OK) {
        b.pl = pl;
        b.mc = pl->model;
        b.shard = pl->shard;
    }
    if (st == RAP_OK)
        st = preflight(&b, modes, n_modes, rk->world || rk->comms);
    if (st == RAP_OK && s->dry_run) { /* the plans printed: nothing more */
        rap_pipeline_plan_free(pl);
        rap_plan_free(plan);
        return RAP_OK;
    }
    if (st == RAP_OK && !s->data[0])
        st = gen_data(s, tmp);
    if (st == RAP_OK && !b.shard) {
        rap_reader_config prc = rap_reader_defaults();
        cli_reader_options(s, &prc);
        prc.input = b.data;
        cli_print_reader_threads(s, &prc);
    }
    for (int i = 0; st == RAP_OK && b.shard && i < n_modes; i++)
        if (modes[i] != RAP_MODE_IDEAL)
            st = rap_fail(RAP_ERR_ARG, "--data %s: " RAP_SHARD_NEEDS_IDEAL " (--modes ideal; "
                          "not %s)", b.data, rap_mode_name(modes[i]));
    if (st == RAP_OK) {
        runs = rap_calloc(sizeof(bench_row) * (size_t)R * (size_t)(n_modes > 0 ? n_modes : 1),
                          "bench runs");
        med_tmp = rap_calloc(sizeof(double) * 2 * (size_t)R, "bench medians");
        if (!runs || !med_tmp)
            st = RAP_ERR_NOMEM;
    }
    /* the same loop on every rank: every run, every mode, whatever failed */
    for (int k = 0; st == RAP_OK && k < R; k++) {
        char run_of[48] = "";
        if (R > 1)
            snprintf(run_of, sizeof run_of, " (run %d/%d)", k + 1, R);
        b.trace_run = k == R - 1;
        for (int i = 0; st == RAP_OK && i < n_modes; i++)
            st = bench_one(&b, rk, modes[i], run_of, &runs[k * n_modes + i]);
        run_ratios(&runs[k * n_modes], n_modes);
    }
    if (st == RAP_OK) {
        summarize(runs, R, n_modes, rows, med_tmp);
        b.ranks = rk->n;
        b.hybrid = rk->world || rk->comms;
        if (rk->rank != 0)
            ; /* rank 0 reports for the job */
        else if (s->json)
            print_json(rows, runs, n_modes, &b, stdout);
        else
            print_table(rows, n_modes, &b, stdout);
    }
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    rap_free(runs);
    rap_free(med_tmp);
    rap_pipeline_plan_free(pl);
    rap_plan_free(plan);
    if (st != RAP_OK)
        rap_fail(st, "%s", msg);
    return st;
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
    bench_ranks rk;
    int code = open_ranks(&s, mpi, &rk);
    if (code)
        return code;
    if (s.mps_start) { /* before any CUDA call */
        rap_status ms = rap_mps_daemon_start();
        if (ms != RAP_OK)
            return cli_fail("bench", ms);
    }
    char tmp[600] = "";
    rap_status st = bench_job(&s, &rk, tmp);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    if (tmp[0])
        remove(tmp);
    for (int r = 0; rk.comms && r < rk.n; r++)
        rap_comm_free(rk.comms[r]);
    rap_free(rk.comms);
    if (st != RAP_OK) {
        rap_fail(st, "%s", msg);
        code = cli_fail("bench", st);
        if (rk.world)
            rap_comm_abort(rk.world, code);
        rap_comm_free(rk.world);
        return code;
    }
    rap_comm_free(rk.world);
    return 0;
}
