/* cmd_train.c -- rap train: raw rows -> plan -> DLRM, with evaluation,
 * progress, metrics, checkpoints (docs/TRAINING.md). With no --data it
 * generates training and evaluation rows (same generator world, seeds S and
 * S+1) into temporary files, removed at the end. */
#include "cli/cli.h"
#include "data/parse_backend.h"
#include "dist/comm.h"
#include "plan/replan_search.h"
#include "run/mps.h"
#include "run/pipeline.h"
#include "run/rowfeed.h"
#include "run/runtime.h"
#include "run/train.h"
#include "run/train_series.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1; /* the trainer finishes the step, saves, and returns */
}

/* Generates rows (seed) into a temporary file named after tag. */
static rap_status gen_temp(const cli_settings *s, const char *tag, int64_t rows, uint64_t seed,
                           char *path, size_t n, double *teacher)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, n, "%s/rap_train_%s_%d.tsv", dir && dir[0] ? dir : "/tmp", tag, (int)getpid());
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = seed;
    g.out = path;
    g.threads = (int)s->threads;
    g.schema = s->in_schema; /* rows of --schema when given */
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    rap_status st = rap_gen_write(&g, &r);
    if (st != RAP_OK) {
        path[0] = 0;
        return st;
    }
    *teacher = r.teacher_auc;
    rap_info("generated %lld %s rows (seed %llu, %.1f%% positive, teacher AUC %.4f)",
             (long long)r.rows, tag, (unsigned long long)seed,
             100.0 * (double)r.positives / (double)(r.rows ? r.rows : 1), r.teacher_auc);
    return RAP_OK;
}

typedef struct {
    char tmp_train[512], tmp_eval[512];
    char data_id[600];
    rap_plan *plan;
    rap_trace *trace;
    rap_predictor *pred;         /* --replan --predictor */
    rap_replan_search_ctx rs;    /* --replan: the planner's inputs */
    rap_replan_config replan;
} train_job;

/* Test hooks (RAP_TEST_RANK_EXIT / RAP_TEST_RANK_HANG = "rank:step"): the
 * rank dies, or stops answering, after that step (tests/test_dist_train.c),
 * installed as the trainer's after_step. A rank that is a thread (--gpus)
 * leaves its loop with an error instead: the process must go on for the
 * others to report. */
typedef struct {
    int rank;
    bool thread;               /* the rank is a thread of this process */
    int64_t exit_step, hang_step; /* 0: none */
} test_hooks;

static rap_status test_hook_step(void *ctx, int64_t step)
{
    const test_hooks *h = ctx;
    bool hit = (h->exit_step > 0 && step == h->exit_step) ||
               (h->hang_step > 0 && step == h->hang_step);
    if (hit && h->thread)
        return rap_fail(RAP_ERR_INTERNAL, "rank %d: test hook: this rank stops after step %lld",
                        h->rank, (long long)step);
    if (h->exit_step > 0 && step == h->exit_step) {
        fprintf(stderr, "rank %d: RAP_TEST_RANK_EXIT: exiting after step %lld\n", h->rank,
                (long long)step);
        _exit(1);
    }
    if (h->hang_step > 0 && step == h->hang_step) {
        fprintf(stderr, "rank %d: RAP_TEST_RANK_HANG: hanging after step %lld\n", h->rank,
                (long long)step);
        for (;;)
            sleep(1000);
    }
    return RAP_OK;
}

/* Reads the hooks of rank `rank` from the environment and installs them in
 * c when one is set for it. */
static void test_hooks_install(test_hooks *h, int rank, bool thread, rap_train_config *c)
{
    memset(h, 0, sizeof *h);
    h->rank = rank;
    h->thread = thread;
    const char *e = getenv("RAP_TEST_RANK_EXIT"), *g = getenv("RAP_TEST_RANK_HANG");
    int r;
    long long k;
    if (e && sscanf(e, "%d:%lld", &r, &k) == 2 && r == rank)
        h->exit_step = k;
    if (g && sscanf(g, "%d:%lld", &r, &k) == 2 && r == rank)
        h->hang_step = k;
    if (h->exit_step > 0 || h->hang_step > 0) {
        c->after_step = test_hook_step;
        c->after_step_ctx = h;
    }
}

/* Every input opens and every output's directory takes a file, before any
 * row is generated, read or trained (a probe file, removed); the
 * environment's knobs are values. */
static rap_status check_paths(const cli_settings *s)
{
    RAP_TRY(cli_check_input("data", s->data));
    RAP_TRY(cli_check_input("eval-data", s->eval_data));
    if (strcmp(s->resume, "latest")) /* latest: chosen among --save's files in setup */
        RAP_TRY(cli_check_input("resume", s->resume));
    if (strcmp(s->plan, "default"))
        RAP_TRY(cli_check_input("plan", s->plan));
    RAP_TRY(cli_check_output("save", s->save));
    RAP_TRY(cli_check_output("metrics", s->metrics));
    RAP_TRY(cli_check_output("trace", s->trace));
    RAP_TRY(rap_prep_knobs_check());
    return rap_parse_knobs_check();
}

/* What the memory plan's run before generating rows reads (the reader's
 * buffers are sized as for one file). */
#define GEN_PLACEHOLDER "(generated rows)"

/* --replan: the planner (the search on measured capacities) and the
 * capacities the schedule in use was planned with. */
static rap_status configure_replan(const cli_settings *s, train_job *j, rap_train_config *c)
{
    rap_model_shape sh;
    memset(&sh, 0, sizeof sh);
    for (int k = 0; k < j->plan->n_cols; k++)
        sh.tables += j->plan->nodes[j->plan->cols[k].node].kind == RAP_SPARSE;
    sh.emb_dim = c->model.emb_dim;
    sh.n_bot = c->model.n_bot;
    sh.n_top = c->model.n_top;
    memcpy(sh.bot, c->model.bot, sizeof(int) * (size_t)sh.n_bot);
    memcpy(sh.top, c->model.top, sizeof(int) * (size_t)sh.n_top);
    sh.batch = c->model.batch;
    sh.precision = c->model.precision;
    sh.emb_dtype = c->model.emb_dtype;
    sh.optimizer = c->model.optimizer;
    rap_capacity *cap = &j->rs.base;
    if (s->capacity[0]) {
        RAP_TRY(rap_capacity_load(s->capacity, cap));
        RAP_TRY(rap_capacity_check(cap, "", &sh));
    } else {
        rap_capacity_assumed(&sh, "", cap);
    }
    if (s->predictor[0]) {
        RAP_TRY(rap_predictor_load(s->predictor, &j->pred));
        if (!cap->assumed)
            RAP_TRY(rap_predictor_check(j->pred, cap->gpu));
    }
    j->rs.pred = j->pred;
    j->rs.choice = RAP_CHOICE_SLOWDOWN;
    rap_replan_config *r = &j->replan;
    memset(r, 0, sizeof *r);
    r->every = s->replan_every;
    r->threshold = s->replan_threshold;
    r->list_threshold = s->replan_lists;
    r->tolerance = cap->tolerance;
    for (int w = 0; w < RAP_REPLAN_WINDOWS && w < RAP_CAP_WINDOWS; w++) {
        r->standalone_ms[w] = cap->standalone_ms[w];
        r->capacity_ms[w] = cap->capacity_ms[w];
    }
    r->plan_fn = rap_replan_search;
    r->plan_ctx = &j->rs;
    r->out = s->replan_out[0] ? s->replan_out : NULL;
    c->replan = r;
    rap_info("replan: every %lld steps against %s (tolerance %g), drift threshold %g",
             (long long)r->every, cap->source, cap->tolerance, r->threshold);
    return RAP_OK;
}

/* Test hook: with RAP_TEST_STEP_LOG=FILE the run appends to FILE a line
 * "R step pos" at its start, "S step seq pos_after rows" after each step
 * and "B seq id id ..." with each feed batch (the ids: the rows' first
 * integer field, int_0), each written at once so that a run killed with
 * SIGKILL leaves every line of what it did (tests/test_series.c counts
 * the rows trained per input line with them). */
static FILE *g_step_log;

static void step_log(void *ctx, int64_t step, int64_t seq, int64_t pos_after, int64_t rows)
{
    (void)ctx;
    if (rows < 0)
        fprintf(g_step_log, "R %lld %lld\n", (long long)step, (long long)pos_after);
    else
        fprintf(g_step_log, "S %lld %lld %lld %lld\n", (long long)step, (long long)seq,
                (long long)pos_after, (long long)rows);
    fflush(g_step_log);
}

static void batch_log(void *ctx, int64_t seq, const rap_batch *b)
{
    (void)ctx;
    const float *val = b->dense;
    const uint8_t *ok = b->dense_valid;
    float *hv = NULL;
    uint8_t *hk = NULL;
    if (b->device && b->rows > 0) { /* the GPU parser's rows: int_0 copied back */
        hv = malloc(sizeof(float) * (size_t)b->rows);
        hk = malloc((size_t)b->rows);
        if (!hv || !hk || rap_batch_dense_to_host(b, 0, hv, hk) != RAP_OK) {
            rap_warn("RAP_TEST_STEP_LOG: batch %lld not logged (%s)", (long long)seq,
                     hv && hk ? rap_last_error() : "out of memory");
            free(hv);
            free(hk);
            return;
        }
        val = hv;
        ok = hk;
    }
    flockfile(g_step_log);
    fprintf(g_step_log, "B %lld", (long long)seq);
    for (int64_t i = 0; i < b->rows; i++) /* int_0: dense column 0 */
        fprintf(g_step_log, " %.0f", ok[i] ? (double)val[i] : -1.0);
    fprintf(g_step_log, "\n");
    fflush(g_step_log);
    funlockfile(g_step_log);
}

static void install_step_log(rap_train_config *c)
{
    const char *p = getenv("RAP_TEST_STEP_LOG");
    if (!p || !p[0])
        return;
    if (!g_step_log && !(g_step_log = fopen(p, "a"))) {
        rap_warn("RAP_TEST_STEP_LOG: cannot open %s", p);
        return;
    }
    c->step_hook = step_log;
    c->batch_hook = batch_log;
}

/* Builds the trainer's config from the settings (with gen, generating
 * data when there is no --data; without, naming GEN_PLACEHOLDER instead,
 * for the memory plan). */
static rap_status configure(cli_settings *s, train_job *j, int ranks, rap_train_config *cfg,
                            bool gen)
{
    rap_train_config c;
    rap_train_defaults(&c);
    if (s->eval_data[0] && cli_given("eval-fraction"))
        return rap_fail(RAP_ERR_ARG, "give --eval-data or --eval-fraction, not both (the "
                        "fraction holds rows of --data out for evaluation)");
    RAP_TRY(check_paths(s));
    RAP_TRY(cli_resolve_device(s->device, &c.device));
    RAP_TRY(cli_load_plan_for(s, &j->plan));
    c.plan = j->plan;
    c.plan_name = s->plan;
    c.fusion = (rap_fuse_kind)s->fusion;

    rap_model_config *m = &c.model;
    RAP_TRY(cli_model_config(s, m));
    if (m->bot[m->n_bot - 1] != m->emb_dim)
        return rap_fail(RAP_ERR_ARG, "--mlp-bot %s ends in %d, but --emb-dim is %d: the bottom "
                        "MLP's output is concatenated with the embeddings, so they must agree",
                        s->mlp_bot, m->bot[m->n_bot - 1], m->emb_dim);
    if (m->top[m->n_top - 1] != 1)
        return rap_fail(RAP_ERR_ARG, "--mlp-top %s must end in 1 (one logit per row)", s->mlp_top);
    c.cuda_graph = s->cuda_graph;
    c.prep_lanes = (int)s->prep_lanes;
    c.mode = s->mode - 1;
    c.cpu_workers = (int)s->cpu_workers;
    /* what --schedule names is the pipeline builder's to decide; asked now,
     * before any data is generated */
    rap_pipeline_sched kind;
    RAP_TRY(rap_pipeline_schedule_find(s->schedule, ranks, (rap_placement)s->placement, "train",
                                       &kind));
    c.schedule_path = s->schedule;
    if (s->trace[0]) {
        rap_trace_config tc = {0};
        tc.max_gpu_spans = c.device == RAP_GPU ? 8192 : 0;
        RAP_TRY(rap_trace_create(&tc, &j->trace));
        c.trace = j->trace;
        c.trace_steps = s->trace_steps;
    }
    c.reader.follow = s->follow;
    c.reader.idle_timeout_s = s->idle_timeout;

    double teacher = NAN;
    if (!s->data[0] && gen) {
        RAP_TRY(gen_temp(s, "training", s->gen_rows, (uint64_t)s->seed, j->tmp_train,
                         sizeof j->tmp_train, &teacher));
        snprintf(s->data, sizeof s->data, "%s", j->tmp_train);
        if (s->in_schema) /* rows of the schema (docs/GENERATOR.md "Any schema") */
            snprintf(j->data_id, sizeof j->data_id, "generated:schema=%.200s:seed=%lld:rows=%lld",
                     s->in_schema->source, (long long)s->seed, (long long)s->gen_rows);
        else
            snprintf(j->data_id, sizeof j->data_id, "generated:kaggle:seed=%lld:rows=%lld",
                     (long long)s->seed, (long long)s->gen_rows);
        c.data_id = j->data_id;
        c.data_rows = s->gen_rows;
        if (!s->eval_data[0]) {
            RAP_TRY(gen_temp(s, "evaluation", s->gen_eval_rows, (uint64_t)s->seed + 1,
                             j->tmp_eval, sizeof j->tmp_eval, &teacher));
            snprintf(s->eval_data, sizeof s->eval_data, "%s", j->tmp_eval);
        } else {
            teacher = NAN;
        }
    }
    c.data = s->data[0] ? s->data : GEN_PLACEHOLDER;
    c.eval_data = s->eval_data;
    c.eval_fraction = s->eval_fraction;
    c.eval_rows = s->eval_rows;
    c.eval_every = s->eval_every;
    c.teacher_auc = s->eval_rows ? NAN : teacher;
    cli_reader_options(s, &c.reader);
    c.reader.bad_rows = (rap_bad_rows)s->bad_rows;
    c.reader.max_line = s->max_line;
    c.reader.max_rows = s->max_rows;
    if (gen && !rap_runtime_is_shard(c.data)) {
        rap_reader_config prc = c.reader;
        prc.input = c.data;
        /* who parses, as the row feed will resolve it (the trainer's mode
         * rule: auto is rap on a GPU without --cuda-graph, else sequential) */
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = prc;
        fc.pinned = c.device == RAP_GPU;
        fc.device_batches = c.mode != RAP_MODE_CPU && c.mode != RAP_MODE_MPS;
        prc.parse = rap_rowfeed_resolve_parse(&fc);
        cli_print_reader_threads(s, &prc);
    }
    c.steps = s->steps;
    c.epochs = s->epochs;
    c.metrics = s->metrics;
    c.save = s->save;
    c.progressive = s->progressive;
    c.progressive_window = s->progressive_window;
    c.guards.action = s->guard ? RAP_GUARD_FAIL : RAP_GUARD_WARN;
    c.guards.nan = s->guard_nan;
    c.guards.auc_rows = s->guard_auc_rows;
    c.guards.calib_factor = s->guard_calibration;
    RAP_TRY(rap_series_parse_every(s->save_every, &c.save_every, &c.save_every_s));
    c.keep = s->keep;
    c.resume = s->resume;
    install_step_log(&c);
    c.log_every = s->log_every;
    c.log_interval = 5;
    c.progress = !s->quiet;
    c.tty = isatty(STDERR_FILENO);
    c.stop = &g_stop;
    if (!strcmp(c.data, "-") && !c.eval_data[0] && c.eval_fraction > 0)
        return rap_fail(RAP_ERR_ARG, "--data -: evaluation re-reads the input, which stdin "
                        "cannot do; give --eval-data or --eval-fraction 0");
    if (!strcmp(c.data, "-") && (c.epochs > 1 || c.steps > 0))
        rap_warn("--data -: stdin is read once; training ends with its last row");
    c.placement = (rap_placement)s->placement;
    c.gpu = -1;
    c.dry_run = s->dry_run;
    if (s->replan)
        RAP_TRY(configure_replan(s, j, &c));
    *cfg = c;
    return RAP_OK;
}

/* One rank of --gpus N: a thread. */
typedef struct {
    rap_train_config c;
    rap_train_result res;
    test_hooks hooks;
    rap_status st;
    char msg[2048];
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *r = arg;
    r->st = rap_train_run(&r->c, &r->res);
    snprintf(r->msg, sizeof r->msg, "%s", r->st == RAP_OK ? "" : rap_last_error());
    /* a failed rank breaks the comm: the others stop at their next
     * collective instead of waiting out its timeout (the test hook that
     * plays a hung rank leaves it, so that the others time out) */
    if (r->st != RAP_OK && r->st != RAP_ERR_INTERRUPTED && !getenv("RAP_TEST_RANK_HANG"))
        rap_comm_abort(r->c.comm, 1);
    return NULL;
}

/* The failure of rank r of n, its message prefixed with the rank (unless
 * it names one already, as the comm's timeouts do). */
static rap_status rank_fail(rap_status st, int r, int n, const char *msg)
{
    if (n > 1 && strncmp(msg, "rank ", 5))
        return rap_fail(st, "rank %d: %s", r, msg);
    return rap_fail(st, "%s", msg);
}

/* --gpus N: N ranks as threads of this process over the threads comm (GPU
 * r for rank r, NCCL between them). res gets rank 0's result; the status
 * is rank 0's failure, else the first other rank's. */
static rap_status run_threads(const cli_settings *s, const rap_train_config *c, int n,
                              rap_train_result *res)
{
    if (c->device == RAP_GPU) {
        int have = 0;
        RAP_TRY(rap_rt_device_count(&have));
        if (have < n)
            return rap_fail(RAP_ERR_ARG, "--gpus %d: this machine has %d GPU%s", n, have,
                            have == 1 ? "" : "s");
        if (!rap_comm_have_nccl())
            return rap_fail(RAP_ERR_ARG, "--gpus %d --device gpu: rap was built without NCCL", n);
    }
    rap_comm **comms = rap_calloc(sizeof(rap_comm *) * (size_t)n, "ranks");
    rank_job *jobs = rap_calloc(sizeof(rank_job) * (size_t)n, "ranks");
    pthread_t *tid = rap_calloc(sizeof(pthread_t) * (size_t)n, "ranks");
    rap_status st = comms && jobs && tid ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_comm_threads_create(n, comms);
    int started = 0;
    for (int r = 0; st == RAP_OK && r < n; r++) {
        if (s->comm_timeout > 0)
            rap_comm_set_timeout(comms[r], s->comm_timeout);
        jobs[r].c = *c;
        jobs[r].c.comm = comms[r];
        jobs[r].c.gpu = r;
        test_hooks_install(&jobs[r].hooks, r, true, &jobs[r].c);
        if (r > 0) { /* rank 0 alone writes metrics, progress and the trace */
            jobs[r].c.metrics = NULL;
            jobs[r].c.trace = NULL;
            jobs[r].c.progress = false;
        }
        if (pthread_create(&tid[r], NULL, rank_main, &jobs[r]) != 0)
            st = rap_fail(RAP_ERR_INTERNAL, "--gpus %d: cannot start the thread of rank %d", n, r);
        else
            started++;
    }
    if (st != RAP_OK && started > 0) /* the started ranks would wait for it: stop them */
        rap_comm_abort(comms[0], 1);
    for (int r = 0; r < started; r++)
        pthread_join(tid[r], NULL);
    if (st == RAP_OK && started == n) {
        *res = jobs[0].res;
        int bad = -1; /* the cause, not a rank it stopped (cli_comm_broken_only) */
        for (int pass = 0; pass < 2 && bad < 0; pass++)
            for (int r = 0; bad < 0 && r < n; r++)
                if (jobs[r].st != RAP_OK && (pass || !cli_comm_broken_only(jobs[r].msg)))
                    bad = r;
        if (bad >= 0)
            st = rank_fail(jobs[bad].st, bad, n, jobs[bad].msg);
    }
    for (int r = 0; comms && r < n; r++)
        rap_comm_free(comms[r]);
    rap_free(comms);
    rap_free(jobs);
    rap_free(tid);
    return st;
}

/* One process, no --data: the memory plan (its refusal, or --dry-run's
 * table) before rows are generated. *done: nothing more to do. */
static rap_status plan_first(cli_settings *s, train_job *j, rap_train_result *res, bool *done)
{
    rap_train_config c;
    *done = false;
    RAP_TRY(configure(s, j, 0, &c, false));
    c.dry_run = true;
    c.progress = false;
    rap_status st = rap_train_run(&c, res);
    if (st == RAP_OK && !s->dry_run) {
        st = rap_memplan_check(&res->memplan);
        if (st != RAP_OK) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", rap_last_error());
            rap_memplan_print(&res->memplan, stderr);
            st = rap_fail(st, "%s: refused before allocating (batch %lld; --dry-run prints "
                          "the plan)", msg, (long long)c.model.batch);
        }
    }
    *done = st != RAP_OK || s->dry_run;
    rap_trace_free(j->trace);
    j->trace = NULL;
    rap_plan_free(j->plan);
    j->plan = NULL;
    if (!*done)
        memset(res, 0, sizeof *res);
    return st;
}

static rap_status run(cli_settings *s, train_job *j, rap_comm *world, rap_train_result *res)
{
    rap_train_config c;
    int ranks = world ? rap_comm_size(world) : cli_given("gpus") ? (int)s->gpus : 0;
    if (!world && !cli_given("gpus") && !s->data[0]) {
        bool done;
        RAP_TRY(plan_first(s, j, res, &done));
        if (done)
            return RAP_OK;
    }
    RAP_TRY(configure(s, j, ranks, &c, true));
    if (world) { /* under mpirun: this process is one rank */
        c.comm = world;
        if (c.device == RAP_GPU) { /* one GPU per rank: the node-local rank's */
            const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
            int have = 0;
            RAP_TRY(rap_rt_device_count(&have));
            c.gpu = (lr ? atoi(lr) : rap_comm_rank(world)) % (have > 0 ? have : 1);
        }
        if (rap_comm_rank(world) > 0)
            c.trace = NULL;
        test_hooks hooks;
        test_hooks_install(&hooks, rap_comm_rank(world),
                           rap_comm_kind_of(world) == RAP_COMM_THREADS, &c);
        rap_status st = rap_train_run(&c, res);
        if (st != RAP_OK && st != RAP_ERR_INTERRUPTED) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", rap_last_error());
            return rank_fail(st, rap_comm_rank(world), rap_comm_size(world), msg);
        }
        return st;
    }
    if (cli_given("gpus"))
        return run_threads(s, &c, (int)s->gpus, res);
    return rap_train_run(&c, res);
}

int cmd_train(int argc, char **argv)
{
    cli_settings s;
    bool mpi = rap_dist_detect(NULL);
    char **args = cli_mpi_args(&argc, argv); /* ranks > 0: errors only */
    if (!args)
        return 1;
    cli_parse("train", CMD_TRAIN, argc, args, &s);
    if (args != argv)
        free(args);
    rap_comm *world = NULL;
    if (mpi) {
        if (cli_given("gpus")) {
            fprintf(stderr, "rap train: --gpus under mpirun: each process is one rank (one GPU); "
                    "leave --gpus out\n");
            return 2;
        }
        rap_status ms = rap_comm_mpi_init(&world);
        if (ms != RAP_OK)
            return cli_fail("train", ms);
        if (s.comm_timeout > 0)
            rap_comm_set_timeout(world, s.comm_timeout);
    }
    if (s.mps_start) { /* before any CUDA call */
        rap_status ms = rap_mps_daemon_start();
        if (ms != RAP_OK)
            return cli_fail("train", ms);
    }
    train_job j;
    memset(&j, 0, sizeof j);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the process at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rap_train_result res;
    memset(&res, 0, sizeof res);
    double t0 = rap_now();
    rap_status st = run(&s, &j, world, &res);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    if (st == RAP_OK && s.dry_run) { /* the memory plan, and nothing else */
        if (res.planned && (!world || rap_comm_rank(world) == 0))
            rap_memplan_print(&res.memplan, stdout);
        rap_plan_free(j.plan);
        rap_trace_free(j.trace);
        rap_comm_free(world);
        return 0;
    }
    if (!s.quiet && (res.data.rows_read > 0 || st == RAP_OK || st == RAP_ERR_INTERRUPTED)) {
        fprintf(stderr, "rap train: training input accounting (all passes):\n");
        rap_reader_print_stats(&res.data, stderr);
    }
    if (!s.quiet && res.ranks > 1 && res.ranks_samples > 0)
        fprintf(stderr, "rap train: %d ranks: each trained its share of every global batch: "
                "%lld rows in all, each once\n", res.ranks, (long long)res.ranks_samples);
    if (!s.quiet && res.steps_run > 0) {
        fprintf(stderr, "rap train: mode %s: %lld rows trained, %lld held out, %lld read but not "
                "trained; exposed preprocessing %.3f ms/step; waited %.1f s for data (%s)\n",
                rap_mode_name(res.mode), (long long)res.samples, (long long)res.rows_held_out,
                (long long)res.rows_pending, res.exposed_ms, res.starved_s,
                res.starved_s > 0.1 * res.train_seconds ? "data-bound" : "compute-bound");
    }
    if (!s.quiet && res.parse_gated && res.mode == RAP_MODE_IDEAL)
        fprintf(stderr, "rap train: ideal mode parsed its %lld lines only while it preloaded "
                "its groups, none beside its steps\n", (long long)res.parse_lines_out);
    else if (!s.quiet && res.parse_gated)
        fprintf(stderr, "rap train: the GPU parse in the windows: %lld lines parsed inside them, "
                "%lld outside (while waiting for rows, at a pass's end, at shutdown)\n",
                (long long)res.parse_lines_in, (long long)res.parse_lines_out);
    if (j.trace) {
        rap_status ts = rap_trace_write(j.trace, s.trace);
        if (ts != RAP_OK && st == RAP_OK) {
            st = ts;
            snprintf(msg, sizeof msg, "%s", rap_last_error());
        } else if (ts == RAP_OK && !s.quiet) {
            fprintf(stderr, "rap train: timeline of the first steps written to %s\n", s.trace);
        }
    }
    rap_trace_free(j.trace);
    rap_predictor_free(j.pred);
    if (!s.quiet && st == RAP_OK && res.eval.rows > 0)
        fprintf(stderr, "rap train: AUC %.4f  logloss %.4f  accuracy %.4f on %lld evaluation rows "
                "after %lld steps (%.1f s in all)\n",
                res.eval.auc, res.eval.logloss, res.eval.accuracy, (long long)res.eval.rows,
                (long long)res.step, rap_now() - t0);
    if (j.tmp_train[0])
        remove(j.tmp_train);
    if (j.tmp_eval[0])
        remove(j.tmp_eval);
    rap_plan_free(j.plan);
    /* all rows rejected is RAP_ERR_NO_ROWS from the trainer; the share
     * against --max-rejected is judged on the whole input */
    int rej = st == RAP_OK && !res.interrupted && res.data.rows_read > 0
                  ? cli_check_rejected("train", &s, &res.data) : CLI_EXIT_OK;
    if (rej != CLI_EXIT_OK) {
        rap_comm_free(world);
        return rej;
    }
    if (st != RAP_OK) {
        rap_fail(st, "%s", msg);
        int code = cli_fail("train", st);
        if (world && st != RAP_ERR_INTERRUPTED) { /* others may wait in a collective: end them */
            fflush(stderr);
            rap_comm_abort(world, code);
        }
        rap_comm_free(world);
        return code;
    }
    rap_comm_free(world);
    return 0;
}
