/* settings.c -- THE option table of the rap command. Usage text, parsing,
 * bounds and the printout of resolved settings all come from it. */
#include "cli/cli.h"
#include "dist/comm.h"
#include "model/model.h"
#include "run/runtime.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OFF(f) offsetof(cli_settings, f)
#define BIG 9.2e18

/* Model presets (--model). The small one is the default: sized so that
 * `rap train` with no arguments learns in about a minute on 2 CPU cores.
 * paper: the model of the design (spec/design.md, the dlrm Criteo model). */
#define SMALL_EMB "16"
#define SMALL_BOT "64-16"
#define SMALL_TOP "64-32-1"
#define SMALL_BATCH "1024"
#define SMALL_LR "0.02"
#define SMALL_OPT "adagrad"

static const struct {
    int64_t emb_dim;
    const char *bot, *top;
    int64_t batch;
    double lr;
    int optimizer;
} g_presets[] = {
    [MODEL_SMALL] = {16, SMALL_BOT, SMALL_TOP, 1024, 0.02, RAP_ADAGRAD},
    [MODEL_PAPER] = {128, "512-256-128", "1024-1024-512-256-1", 4096, 0.02, RAP_ADAGRAD},
};

#define TR CMD_TRAIN
#define BE CMD_BENCH
#define TB (CMD_TRAIN | CMD_BENCH)
const rap_opt cli_options[] = {
    /* name           type            commands         field           default    min  max  choices  metavar  help */
    {"rows", RAP_OPT_INT, CMD_GEN, OFF(rows), "1000000", 1, BIG, NULL, "N", "rows to generate"},
    {"seed", RAP_OPT_INT, CMD_GEN | CMD_PREP | TB, OFF(seed), "1", 0, BIG, NULL, "S", "random seed (same seed, same bytes; train: model init and generated rows)"},
    {"out", RAP_OPT_STRING, CMD_GEN, OFF(out), "-", 0, 0, NULL, "FILE", "output file (.gz: gzip; - : stdout)"},
    {"cardinalities", RAP_OPT_STRING, CMD_GEN, OFF(cardinalities), "kaggle", 0, 0, NULL, "kaggle|1tb|LIST", "ids per categorical column (26 comma-separated counts for LIST)"},
    {"data", RAP_OPT_STRING, TB, OFF(data), "", 0, 0, NULL, "IN", "training rows: Criteo TSV file (.gz ok), directory, or - (default: generated rows)"},
    {"eval-data", RAP_OPT_STRING, TR, OFF(eval_data), "", 0, 0, NULL, "IN", "evaluation rows (default: --eval-fraction of --data, or generated rows)"},
    {"eval-fraction", RAP_OPT_DOUBLE, TR, OFF(eval_fraction), "0.1", 0, 0.9, NULL, "F", "share of --data held out for evaluation, chosen by a hash of the row index (0: none)"},
    {"eval-rows", RAP_OPT_INT, TR, OFF(eval_rows), "0", 0, BIG, NULL, "N", "evaluate on at most N rows (0: all)"},
    {"eval-every", RAP_OPT_INT, TR, OFF(eval_every), "0", 0, BIG, NULL, "N", "also evaluate every N steps (0: at the end only)"},
    {"plan", RAP_OPT_STRING, CMD_PREP | TB, OFF(plan), "default", 0, 0, NULL, "FILE", "preprocessing plan (default: the built-in plans/default.plan)"},
    {"input", RAP_OPT_STRING, CMD_PREP, OFF(input), "", 0, 0, NULL, "IN", "Criteo TSV file (.gz ok), directory, or - for stdin (default: generated rows)"},
    {"gen-rows", RAP_OPT_INT, CMD_PREP, OFF(gen_rows), "200000", 1, BIG, NULL, "N", "rows generated when no --input is given"},
    {"gen-rows", RAP_OPT_INT, TR, OFF(gen_rows), "1000000", 1, BIG, NULL, "N", "training rows generated when no --data is given"},
    {"gen-eval-rows", RAP_OPT_INT, TR, OFF(gen_eval_rows), "100000", 1, BIG, NULL, "N", "evaluation rows generated when no --data is given"},
    {"output", RAP_OPT_STRING, CMD_PREP, OFF(output), "", 0, 0, NULL, "OUT", "write preprocessed rows here (default: summary only)"},
    {"format", RAP_OPT_ENUM, CMD_PREP, OFF(format), "tsv", 0, 0, "tsv|bin", NULL, "output format: TSV with a header, or rap's binary shard"},
    {"device", RAP_OPT_ENUM, CMD_PREP | TB, OFF(device), "auto", 0, 0, "auto|cpu|gpu", NULL, "where to preprocess (and train) (auto: the GPU if there is one)"},
    /* the train entry first: rap_opts_given finds the first of a name */
    {"batch", RAP_OPT_INT, TB, OFF(batch), SMALL_BATCH, 1, 1 << 24, NULL, "B", "rows per training step (with ranks: the global batch, split over the ranks)"},
    {"batch", RAP_OPT_INT, CMD_PREP, OFF(batch), "65536", 1, 1 << 26, NULL, "B", "rows per batch"},
    {"fusion", RAP_OPT_ENUM, CMD_PREP | TB, OFF(fusion), "auto", 0, 0, "levels|none|rows|auto", NULL, "fusion without a schedule: same-type ops of a level in one kernel, one kernel per op, levels then rows (chains of row-local ops of any types in one kernel, docs/EXECUTOR.md), or auto: rows for plans of at most 8 level kernels, else levels"},
    {"steps", RAP_OPT_INT, TR, OFF(steps), "0", 0, BIG, NULL, "N", "stop at step N, counted from the start of training (resumed steps included)"},
    {"epochs", RAP_OPT_INT, TR, OFF(epochs), "0", 0, 1000000, NULL, "E", "stop after E passes over --data (default: 1 unless --steps is given)"},
    {"model", RAP_OPT_ENUM, TB, OFF(model), "small", 0, 0, "small|paper", NULL, "model preset; the options below override it (paper: emb-dim 128, 512-256-128, 1024-1024-512-256-1, batch 4096)"},
    {"emb-dim", RAP_OPT_INT, TB, OFF(emb_dim), SMALL_EMB, 1, 4096, NULL, "D", "embedding dimension (the bottom MLP's last width follows it unless --mlp-bot is given)"},
    {"mlp-bot", RAP_OPT_STRING, TB, OFF(mlp_bot), SMALL_BOT, 0, 0, NULL, "W-W-..", "bottom MLP output widths; the last must equal --emb-dim"},
    {"mlp-top", RAP_OPT_STRING, TB, OFF(mlp_top), SMALL_TOP, 0, 0, NULL, "W-W-..-1", "top MLP output widths; the last must be 1"},
    {"lr", RAP_OPT_DOUBLE, TB, OFF(lr), SMALL_LR, 0, 1e6, NULL, "LR", "learning rate"},
    {"adagrad-init", RAP_OPT_DOUBLE, TB, OFF(adagrad_init), "0", 0, 1e6, NULL, "A", "Adagrad's initial accumulator (larger: smaller first steps of rarely seen ids)"},
    {"optimizer", RAP_OPT_ENUM, TB, OFF(optimizer), SMALL_OPT, 0, 0, "sgd|adagrad|rowwise-adagrad", NULL, "optimizer (embedding rows and MLPs; rowwise-adagrad: one state value per table row, the MLPs Adagrad, docs/MODEL.md)"},
    {"emb-dtype", RAP_OPT_ENUM, TB, OFF(emb_dtype), "fp32", 0, 0, "fp32|bf16|fp16", NULL, "storage of the embedding tables (bf16, fp16: half the memory; lookups in fp32, updates computed in fp32 and stochastically rounded, docs/MODEL.md)"},
    {"precision", RAP_OPT_ENUM, TB, OFF(precision), "fp32", 0, 0, "fp32|bf16|fp32-strict", NULL, "GEMM precision on the GPU (fp32: fp32 storage, TF32 tensor-core GEMMs; bf16: bf16 inputs, fp32 accumulation and master weights; fp32-strict: plain fp32 GEMMs, slower, for comparing runs to float tolerance)"},
    {"cuda-graph", RAP_OPT_BOOL, TB, OFF(cuda_graph), "false", 0, 0, NULL, NULL, "GPU: capture each training phase once as a CUDA graph and replay it (every mode but mps)"},
    {"prep-lanes", RAP_OPT_INT, TB, OFF(prep_lanes), "1", 1, 8, NULL, "N", "rap mode on the GPU: streams a window's independent preprocessing kernels run on at once (1: one stream, in schedule order)"},
    {"metrics", RAP_OPT_STRING, TR, OFF(metrics), "", 0, 0, NULL, "FILE", "write JSON lines: one per logged step and evaluation, then a final line"},
    {"save", RAP_OPT_STRING, TR, OFF(save), "", 0, 0, NULL, "CKPT", "write a checkpoint (safetensors) at the end"},
    {"save-every", RAP_OPT_INT, TR, OFF(save_every), "0", 0, BIG, NULL, "N", "also write --save every N steps"},
    {"resume", RAP_OPT_STRING, TR, OFF(resume), "", 0, 0, NULL, "CKPT", "continue training from a checkpoint"},
    {"log-every", RAP_OPT_INT, TR, OFF(log_every), "0", 0, BIG, NULL, "N", "progress and metrics line every N steps (0: every 5 seconds)"},
    /* runtime (docs/RUNTIME.md) */
    {"mode", RAP_OPT_ENUM, TB, OFF(mode), "auto", 0, 0, "auto|" RAP_MODE_NAMES("|"), NULL, "how preprocessing runs beside training (auto: rap on the GPU, sequential on the CPU)"},
    {"modes", RAP_OPT_STRING, BE, OFF(modes), "ideal,cpu,sequential,stream,rap,mps", 0, 0, NULL, "M,M,..", "modes to compare, run one after the other on the same data and model (mps last: the mode after it measured faster than itself elsewhere)"},
    {"steps", RAP_OPT_INT, BE, OFF(steps), "0", 0, BIG, NULL, "N", "measured steps per mode (after --warmup); 0: 300 on the GPU (fewer let one host hiccup move a ratio by percents), 50 on the CPU"},
    {"warmup", RAP_OPT_INT, BE, OFF(warmup), "5", 0, BIG, NULL, "N", "steps run before measuring, per mode"},
    {"repeat", RAP_OPT_INT, BE, OFF(repeat), "1", 1, 100, NULL, "R", "run the mode list R times (interleaved: every mode once, then again); each reported number is the median over the R runs, vs ideal the median of the per-run ratios"},
    {"cpu-workers", RAP_OPT_INT, TB, OFF(cpu_workers), "0", 0, 4096, NULL, "N", "cpu mode: preprocessing worker threads (0: all cores)"},
    {"schedule", RAP_OPT_STRING, TB, OFF(schedule), "", 0, 0, NULL, "FILE", "rap mode: schedule file (docs/SCHEDULE.md; default: the built-in one); with ranks also the prefix S of rap plan --gpus R's per-rank manifests S.rank<r>"},
    {"trace", RAP_OPT_STRING, TB, OFF(trace), "", 0, 0, NULL, "FILE", "write a Chrome/Perfetto timeline of a few steps (bench: FILE gets the mode's name before .json)"},
    {"trace-steps", RAP_OPT_INT, TB, OFF(trace_steps), "4", 1, 1000, NULL, "N", "steps in the --trace timeline"},
    /* ranks (docs/DIST.md, docs/TRAINING.md "Several ranks") */
    {"gpus", RAP_OPT_INT, TB, OFF(gpus), "1", 1, 1024, NULL, "N", "ranks in this process, one GPU each (threads, NCCL; with --device cpu CPU ranks over shared memory); given, even as 1, it runs the hybrid-parallel path. Under mpirun leave it out: one rank per process"},
    {"placement", RAP_OPT_ENUM, TB, OFF(placement), "owner", 0, 0, "owner|batch|search", NULL, "with ranks: which rank preprocesses which feature. owner and search: each rank its dense columns and its tables' sparse columns (over the global batch; with a per-rank --schedule in rap mode the dense ones over its own rows), nothing exchanged; batch: each rank every column over its own rows, then the ids go to the tables' holders (docs/TRAINING.md)"},
    {"comm-timeout", RAP_OPT_DOUBLE, TB, OFF(comm_timeout), "0", 0, 1e6, NULL, "S", "with ranks: seconds a collective may wait for the other ranks before the run stops naming it (0: RAP_COMM_TIMEOUT_S, else 60)"},
    {"json", RAP_OPT_BOOL, BE, OFF(json), "false", 0, 0, NULL, NULL, "print the results as JSON on stdout instead of a table"},
    {"mps-start", RAP_OPT_BOOL, TB, OFF(mps_start), "false", 0, 0, NULL, NULL, "mps mode: start an MPS daemon for this run (else the GPU is time-shared unless one runs)"},
    {"checkpoint", RAP_OPT_STRING, CMD_EXPORT, OFF(checkpoint), "", 0, 0, NULL, "CKPT", "checkpoint to export (written by rap train --save)"},
    {"resume", RAP_OPT_STRING, CMD_EXPORT, OFF(checkpoint), "", 0, 0, NULL, "CKPT", "the same as --checkpoint"},
    {"out", RAP_OPT_STRING, CMD_EXPORT, OFF(out), "", 0, 0, NULL, "FILE", "write the model weights here (safetensors)"},
    {"bad-rows", RAP_OPT_ENUM, CMD_PREP | TB, OFF(bad_rows), "skip", 0, 0, "skip|fail", NULL, "malformed rows: count and skip, or stop at the first"},
    {"follow", RAP_OPT_BOOL, CMD_PREP | TR, OFF(follow), "false", 0, 0, NULL, NULL, "keep reading rows appended to the input as it grows"},
    {"idle-timeout", RAP_OPT_DOUBLE, CMD_PREP | TR, OFF(idle_timeout), "0", 0, 1e9, NULL, "SEC", "with --follow: stop after this long without new rows (0: never)"},
    {"max-line", RAP_OPT_INT, CMD_PREP | TB, OFF(max_line), "65536", 64, 1 << 30, NULL, "BYTES", "longer input lines are rejected"},
    {"max-rows", RAP_OPT_INT, CMD_PREP | TR, OFF(max_rows), "0", 0, BIG, NULL, "N", "stop after reading N rows (0: all; train: per pass over --data)"},
    {"inflate-threads", RAP_OPT_INT, CMD_PREP | TB, OFF(inflate_threads), "1", 1, 256, NULL, "N", "files of an input directory read and inflated at once, each by its own thread, within --threads (docs/INPUT.md); with --follow one at a time"},
    {"interleave", RAP_OPT_ENUM, CMD_PREP | TB, OFF(interleave), "file", 0, 0, "file|batch", NULL, "order of rows with --inflate-threads N: file after file as with one thread, or batch: batch i (--batch rows) from file i mod N while the files last (docs/INPUT.md)"},
    {"threads", RAP_OPT_INT, CMD_ALL, OFF(threads), "0", 0, 4096, NULL, "N", "CPU threads (0: all cores); the reader's lanes and parsers share them (docs/INPUT.md)"},
    {"quiet", RAP_OPT_BOOL, CMD_ALL, OFF(quiet), "false", 0, 0, NULL, NULL, "print errors only"},
    {"verbose", RAP_OPT_BOOL, CMD_ALL, OFF(verbose), "false", 0, 0, NULL, NULL, "print debugging detail"},
    {"help", RAP_OPT_BOOL, CMD_ALL, OFF(help), "false", 0, 0, NULL, NULL, "show this help"},
};
#undef TR
#undef BE
#undef TB
const int cli_n_options = (int)(sizeof cli_options / sizeof cli_options[0]);

int cli_fail(const char *cmd_name, rap_status st)
{
    const char *msg = rap_last_error();
    fprintf(stderr, "rap %s: %s\n", cmd_name, msg[0] ? msg : rap_status_name(st));
    return st == RAP_ERR_INTERRUPTED ? 130 : 1;
}

char **cli_mpi_args(int *argc, char **argv)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r)
        r = getenv("PMI_RANK");
    if (!rap_dist_detect(NULL) || !r || atoi(r) == 0)
        return argv;
    static char quiet[] = "--quiet";
    char **a = calloc((size_t)*argc + 2, sizeof(char *));
    if (!a)
        return NULL;
    for (int i = 0; i < *argc; i++)
        a[i] = argv[i];
    a[(*argc)++] = quiet;
    return a;
}

static bool given(const char *name) { return rap_opts_given(cli_options, cli_n_options, name); }

/* --model: options not given take the preset's values; the bottom MLP's
 * last width follows --emb-dim unless --mlp-bot is given. */
static void apply_preset(cli_settings *s)
{
    int p = s->model == MODEL_PAPER ? MODEL_PAPER : MODEL_SMALL;
    if (!given("emb-dim"))
        s->emb_dim = g_presets[p].emb_dim;
    if (!given("mlp-bot")) {
        snprintf(s->mlp_bot, sizeof s->mlp_bot, "%s", g_presets[p].bot);
        if (given("emb-dim")) {
            char *dash = strrchr(s->mlp_bot, '-');
            size_t at = dash ? (size_t)(dash + 1 - s->mlp_bot) : 0;
            snprintf(s->mlp_bot + at, sizeof s->mlp_bot - at, "%lld", (long long)s->emb_dim);
        }
    }
    if (!given("mlp-top"))
        snprintf(s->mlp_top, sizeof s->mlp_top, "%s", g_presets[p].top);
    if (!given("batch"))
        s->batch = g_presets[p].batch;
    if (!given("lr"))
        s->lr = g_presets[p].lr;
    if (!given("optimizer"))
        s->optimizer = g_presets[p].optimizer;
}

rap_status cli_parse_widths(const char *opt, const char *spec, int *w, int max, int *n)
{
    *n = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20 || (*end && *end != '-') || *n >= max)
            return rap_fail(RAP_ERR_ARG, "--%s \"%s\": expected widths like 512-256-128 (at most "
                            "%d, each in [1, 1048576])", opt, spec, max);
        w[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return rap_fail(RAP_ERR_ARG, "--%s \"%s\": ends with '-'", opt, spec);
    }
    if (*n == 0)
        return rap_fail(RAP_ERR_ARG, "--%s: empty", opt);
    return RAP_OK;
}

void cli_parse_own(const char *name, const rap_opt *opts, int n, unsigned cmd, int argc,
                   char **argv, void *s, size_t help_off)
{
    rap_status st = rap_opts_defaults(opts, n, cmd, s);
    if (st == RAP_OK)
        st = rap_opts_parse(opts, n, cmd, argc, argv, s);
    if (st != RAP_OK) {
        fprintf(stderr, "rap %s: %s\nusage: rap %s [options]   (rap %s --help lists them)\n", name,
                rap_last_error(), name, name);
        exit(2);
    }
    if (*((const bool *)((const char *)s + help_off))) {
        printf("usage: rap %s [options]\n", name);
        rap_opts_usage(opts, n, cmd, stdout);
        exit(0);
    }
}

void cli_small_model(const rap_opt *opts, int n, int64_t *emb_dim, char *mlp_bot, char *mlp_top)
{
    if (!rap_opts_given(opts, n, "emb-dim"))
        *emb_dim = 16;
    if (!rap_opts_given(opts, n, "mlp-bot"))
        snprintf(mlp_bot, RAP_OPT_STR, "64-16");
    if (!rap_opts_given(opts, n, "mlp-top"))
        snprintf(mlp_top, RAP_OPT_STR, "64-32-1");
}

void cli_parse(const char *cmd_name, unsigned cmd, int argc, char **argv, cli_settings *s)
{
    memset(s, 0, sizeof *s);
    rap_status st = rap_opts_defaults(cli_options, cli_n_options, cmd, s);
    if (st == RAP_OK)
        st = rap_opts_parse(cli_options, cli_n_options, cmd, argc, argv, s);
    if (st != RAP_OK) {
        fprintf(stderr, "rap %s: %s\n", cmd_name, rap_last_error());
        fprintf(stderr, "usage: rap %s [options]   (rap %s --help lists them)\n", cmd_name, cmd_name);
        exit(2);
    }
    if (s->help) {
        printf("usage: rap %s [options]\n", cmd_name);
        rap_opts_usage(cli_options, cli_n_options, cmd, stdout);
        exit(0);
    }
    if (cmd & (CMD_TRAIN | CMD_BENCH))
        apply_preset(s);
    rap_log_set_level(s->quiet ? 1 : s->verbose ? 3 : 2);
    if (!s->quiet) {
        fprintf(stderr, "rap %s settings:\n", cmd_name);
        rap_opts_print(cli_options, cli_n_options, cmd, s, "  ", stderr);
    }
}

extern const char rap_default_plan_text[];

rap_status cli_load_plan(const char *spec, rap_plan **out)
{
    if (!strcmp(spec, "default"))
        return rap_plan_parse(rap_default_plan_text, "<built-in default.plan>",
                              rap_schema_criteo(), out);
    return rap_plan_load(spec, rap_schema_criteo(), out);
}

rap_status cli_resolve_device(int dev, rap_device *out)
{
    char why[256];
    bool gpu = rap_gpu_available(why, sizeof why);
    if (dev == DEV_GPU && !gpu)
        return rap_fail(RAP_ERR_NO_GPU, "--device gpu: %s", why);
    *out = (dev == DEV_CPU || !gpu) ? RAP_CPU : RAP_GPU;
    if (dev == DEV_AUTO && !gpu)
        rap_info("device: cpu (%s)", why);
    return RAP_OK;
}

rap_status cli_default_input(cli_settings *s, char *tmp_out, size_t n)
{
    tmp_out[0] = 0;
    if (s->input[0])
        return RAP_OK;
    const char *dir = getenv("TMPDIR");
    snprintf(tmp_out, n, "%s/rap_default_%d.tsv", dir && dir[0] ? dir : "/tmp", (int)getpid());
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = s->gen_rows;
    g.seed = (uint64_t)s->seed;
    g.out = tmp_out;
    g.threads = (int)s->threads;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    rap_info("no --input: generating %lld Criteo-shaped rows (seed %lld) into %s",
             (long long)g.rows, (long long)s->seed, tmp_out);
    rap_status st = rap_gen_write(&g, &r);
    if (st != RAP_OK) {
        remove(tmp_out);
        tmp_out[0] = 0;
        return st;
    }
    rap_info("generated %lld rows, %.1f%% positive, teacher AUC %.4f", (long long)r.rows,
             100.0 * (double)r.positives / (double)(r.rows ? r.rows : 1), r.teacher_auc);
    snprintf(s->input, sizeof s->input, "%s", tmp_out);
    return RAP_OK;
}

bool cli_comm_broken_only(const char *msg)
{
    return strstr(msg, "the communicator is broken") != NULL;
}

void cli_reader_options(const cli_settings *s, rap_reader_config *rc)
{
    rc->threads = (int)s->threads;
    rc->inflate_threads = (int)s->inflate_threads;
    rc->interleave = (rap_interleave)s->interleave;
    rc->interleave_rows = s->batch;
}

void cli_print_reader_threads(const cli_settings *s, const rap_reader_config *rc)
{
    if (s->quiet)
        return;
    rap_reader_threads t;
    char line[256];
    if (rap_reader_plan_threads(rc, &t) != RAP_OK)
        return; /* the reader's open says what is wrong */
    rap_reader_threads_line(&t, line, sizeof line);
    fprintf(stderr, "  reader threads: %s\n", line);
}
