/* settings.c -- THE option table of the rap command, every subcommand's
 * options in it (train, bench, gen, prep, export; plan, predictor train,
 * profile kernels and capacity). Usage text, parsing, bounds and the
 * printout of resolved settings all come from it. An option several
 * commands take with other defaults, bounds or help has one row per such
 * variant, each with its commands' bits; a command's usage lists its rows
 * in table order. */
#include "cli/cli.h"
#include "data/reader_internal.h"
#include "dist/comm.h"
#include "model/model.h"
#include "plan/place.h"
#include "plan/profile.h"
#include "run/runtime.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OFF(f) offsetof(cli_settings, f)
#define BIG 9.2e18

/* Model presets (--model). The small one is the default: sized so that
 * `rap train` with no arguments learns in about a minute on 2 CPU cores.
 * paper: the model of the design (docs/DATA.md, the dlrm Criteo model). */
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

/* The bench's --modes default: every mode of runtime.h's one list, in its
 * order, mps last (bench_modes_fill). A buffer, so that the table's
 * default and its usage text come from that list, not from a copy. */
static char g_bench_modes[128];

#define TR CMD_TRAIN
#define BE CMD_BENCH
#define TB (CMD_TRAIN | CMD_BENCH)
#define PL CMD_PLAN
#define PT CMD_PREDICTOR
#define PK CMD_PROF_KERNELS
#define PC CMD_PROF_CAPACITY
/* the commands of the first block (they print their settings at start) */
#define CORE (CMD_GEN | CMD_PREP | CMD_TRAIN | CMD_EXPORT | CMD_BENCH)
const rap_opt cli_options[] = {
    /* name           type            commands         field           default    min  max  choices  metavar  help */
    {"rows", RAP_OPT_INT, CMD_GEN, OFF(rows), "1000000", 1, BIG, NULL, "N", "rows to generate"},
    {"seed", RAP_OPT_INT, CMD_GEN | CMD_PREP | TB, OFF(seed), "1", 0, BIG, NULL, "S", "random seed (same seed, same bytes; train: model init and generated rows)"},
    {"out", RAP_OPT_STRING, CMD_GEN, OFF(out), "-", 0, 0, NULL, "FILE", "output file (.gz: gzip; - : stdout)"},
    {"cardinalities", RAP_OPT_STRING, CMD_GEN, OFF(cardinalities), "kaggle", 0, 0, NULL, "kaggle|1tb|LIST", "ids per categorical column (26 comma-separated counts for LIST; with --schema one count a sparse column, or one for all: default 10000)"},
    {"list-mean", RAP_OPT_DOUBLE, CMD_GEN, OFF(list_mean), "3", 0, 4096, NULL, "M", "with --schema: mean length of a list field (geometric, at most --max-list)"},
    {"data", RAP_OPT_STRING, TB, OFF(data), "", 0, 0, NULL, "IN", "training rows: a TSV file (Criteo's, or --schema's; .gz ok), a Parquet file, a directory of them, or - (default: generated rows)"},
    {"eval-data", RAP_OPT_STRING, TR, OFF(eval_data), "", 0, 0, NULL, "IN", "evaluation rows (default: --eval-fraction of --data, or generated rows)"},
    {"eval-fraction", RAP_OPT_DOUBLE, TR, OFF(eval_fraction), "0.1", 0, 0.9, NULL, "F", "share of --data held out for evaluation, chosen by a hash of the row index (0: none)"},
    {"eval-rows", RAP_OPT_INT, TR, OFF(eval_rows), "0", 0, BIG, NULL, "N", "evaluate on at most N rows (0: all)"},
    {"eval-every", RAP_OPT_INT, TR, OFF(eval_every), "0", 0, BIG, NULL, "N", "also evaluate every N steps (0: at the end only)"},
    {"plan", RAP_OPT_STRING, CMD_PREP | TB, OFF(plan), "default", 0, 0, NULL, "FILE", "preprocessing plan (default: the built-in plans/default.plan)"},
    {"input", RAP_OPT_STRING, CMD_PREP, OFF(input), "", 0, 0, NULL, "IN", "a TSV file (Criteo's, or --schema's; .gz ok), a Parquet file, a directory of them, or - for stdin (default: generated rows)"},
    {"gen-rows", RAP_OPT_INT, CMD_PREP, OFF(gen_rows), "200000", 1, BIG, NULL, "N", "rows generated when no --input is given"},
    {"gen-rows", RAP_OPT_INT, TR, OFF(gen_rows), "1000000", 1, BIG, NULL, "N", "training rows generated when no --data is given"},
    {"gen-eval-rows", RAP_OPT_INT, TR, OFF(gen_eval_rows), "100000", 1, BIG, NULL, "N", "evaluation rows generated when no --data is given"},
    {"output", RAP_OPT_STRING, CMD_PREP, OFF(output), "", 0, 0, NULL, "OUT", "write preprocessed rows here (default: summary only)"},
    {"format", RAP_OPT_ENUM, CMD_PREP, OFF(format), "tsv", 0, 0, "tsv|bin", NULL, "output format: TSV with a header, or rap's binary shard"},
    {"device", RAP_OPT_ENUM, CMD_PREP | TB, OFF(device), "auto", 0, 0, "auto|cpu|gpu", NULL, "where to preprocess (and train) (auto: the GPU if there is one)"},
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
    {"dry-run", RAP_OPT_BOOL, TB, OFF(dry_run), "false", 0, 0, NULL, NULL, "print the memory plan (every buffer the run would allocate, by component, against the free memory) and exit"},
    {"cuda-graph", RAP_OPT_BOOL, TB, OFF(cuda_graph), "false", 0, 0, NULL, NULL, "GPU: capture each training phase once as a CUDA graph and replay it (every mode but mps)"},
    {"prep-lanes", RAP_OPT_INT, TB, OFF(prep_lanes), "1", 1, 8, NULL, "N", "rap mode on the GPU: streams a window's independent preprocessing kernels run on at once (1: one stream, in schedule order)"},
    {"metrics", RAP_OPT_STRING, TR, OFF(metrics), "", 0, 0, NULL, "FILE", "write JSON lines: one per logged step and evaluation, then a final line"},
    {"save", RAP_OPT_STRING, TR, OFF(save), "", 0, 0, NULL, "CKPT", "write a checkpoint (safetensors) at the end"},
    {"save-every", RAP_OPT_STRING, TR, OFF(save_every), "0", 0, 0, NULL, "N|DUR", "also write a checkpoint beside --save every N steps, or every duration (90s, 10m, 1h), with the step in its name (docs/TRAINING.md)"},
    {"keep", RAP_OPT_INT, TR, OFF(keep), "0", 0, BIG, NULL, "N", "keep the newest N periodic checkpoints, removing older ones once a new one is complete (0: all)"},
    {"resume", RAP_OPT_STRING, TR, OFF(resume), "", 0, 0, NULL, "CKPT", "continue training from a checkpoint; latest: the newest complete one of --save's (none yet: from the start)"},
    /* progressive validation and guards (docs/TRAINING.md) */
    {"progressive", RAP_OPT_BOOL, TB, OFF(progressive), "false", 0, 0, NULL, NULL, "evaluate every batch by its training forward before its update: running AUC, logloss and calibration over the last --progressive-window rows on the progress line and in --metrics"},
    {"progressive-window", RAP_OPT_INT, TB, OFF(progressive_window), "1048576", 1, 1 << 30, NULL, "ROWS", "rows progressive validation's metrics cover (at least --batch)"},
    {"guard", RAP_OPT_ENUM, TR, OFF(guard), "warn", 0, 0, "warn|fail", NULL, "when a guard trips: a warning in the log and the metrics, or also stop (keeping the last checkpoint written while the guards were quiet)"},
    {"guard-nan", RAP_OPT_BOOL, TR, OFF(guard_nan), "true", 0, 0, NULL, NULL, "stop at a NaN or infinite training loss (--no-guard-nan: train on)"},
    {"guard-auc-rows", RAP_OPT_INT, TR, OFF(guard_auc_rows), "1000000", 0, BIG, NULL, "N", "with --progressive: trip when the AUC stays within 0.01 of 0.5 over N rows while both labels are at least 1% of the window (0: off)"},
    {"guard-calibration", RAP_OPT_DOUBLE, TR, OFF(guard_calibration), "2", 0, 1e9, NULL, "F", "with --progressive: trip when the mean prediction is more than F times the mean label or less than 1/F of it (0: off)"},
    /* re-planning while training (docs/RUNTIME.md) */
    {"replan", RAP_OPT_BOOL, TR, OFF(replan), "false", 0, 0, NULL, NULL, "re-plan the schedule while training: every --replan-every steps the measured phase and exposed times are set against the schedule's prediction; past --replan-threshold the planner runs in the background on the measured capacities and its schedule is swapped in at a step boundary"},
    {"replan-every", RAP_OPT_INT, TR, OFF(replan_every), "200", 1, BIG, NULL, "N", "steps between --replan's checks"},
    {"replan-threshold", RAP_OPT_DOUBLE, TR, OFF(replan_threshold), "0.25", 1e-9, 1e9, NULL, "F", "relative drift of a phase's or the exposed time that re-plans"},
    {"replan-lists", RAP_OPT_DOUBLE, TR, OFF(replan_lists), "0.2", 0, 1e9, NULL, "F", "--replan: also re-plan when a raw sparse column's mean ids a row moves by more than F of what it was when the schedule in use was first measured (0: off)"},
    {"replan-out", RAP_OPT_STRING, TR, OFF(replan_out), "", 0, 0, NULL, "PREFIX", "write each schedule --replan swaps in to PREFIX.step<N> (and its .fusion)"},
    {"capacity", RAP_OPT_STRING, TR, OFF(capacity), "", 0, 0, NULL, "FILE", "--replan: the capacity file the schedule was planned with (default: the assumed capacities)"},
    {"predictor", RAP_OPT_STRING, TR, OFF(predictor), "", 0, 0, NULL, "DIR", "--replan: the latency predictor the planner uses (default: the analytic fallback)"},
    {"log-every", RAP_OPT_INT, TR, OFF(log_every), "0", 0, BIG, NULL, "N", "progress and metrics line every N steps (0: every 5 seconds)"},
    /* runtime (docs/RUNTIME.md) */
    {"mode", RAP_OPT_ENUM, TB, OFF(mode), "auto", 0, 0, "auto|" RAP_MODE_NAMES("|"), NULL, "how preprocessing runs beside training (auto: rap on the GPU, sequential on the CPU)"},
    {"modes", RAP_OPT_STRING, BE, OFF(modes), g_bench_modes, 0, 0, NULL, "M,M,..", "modes to compare, run one after the other on the same data and model (mps last: the mode after it measured faster than itself elsewhere)"},
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
    /* the input schema (docs/SCHEMA.md) */
    {"schema", RAP_OPT_STRING, CMD_GEN | CMD_PREP | TB, OFF(schema), "", 0, 0, NULL, "FILE", "the input's columns, one a line: name kind [encoding] [list SEP] (default: Criteo's 40 fields, plans/criteo.schema)"},
    {"delimiter", RAP_OPT_STRING, CMD_GEN | CMD_PREP | TB, OFF(delimiter), "tab", 0, 0, NULL, "tab|comma|C", "field delimiter; any but tab quotes fields as CSV does (RFC 4180)"},
    {"header", RAP_OPT_BOOL, CMD_GEN | CMD_PREP | TB, OFF(header), "false", 0, 0, NULL, NULL, "the first line of every input file names the columns (checked against the schema; gen: writes one)"},
    {"null-token", RAP_OPT_STRING, CMD_GEN | CMD_PREP | TB, OFF(null_token), "null", 0, 0, NULL, "TOKEN", "a list field holding exactly this is a null list (an empty field is an empty list)"},
    {"max-list", RAP_OPT_INT, CMD_GEN | CMD_PREP | TB, OFF(max_list), "32", 1, RAP_MAX_LIST_LIMIT, NULL, "K", "ids a list field may hold; a longer list rejects its row"},
    {"bad-rows", RAP_OPT_ENUM, CMD_PREP | TB, OFF(bad_rows), "skip", 0, 0, "skip|fail", NULL, "malformed rows: count and skip, or stop at the first"},
    {"max-rejected", RAP_OPT_DOUBLE, CMD_PREP | TR, OFF(max_rejected), "1", 0, 1, NULL, "F", "fail (exit 4) when more than this share of the rows read was rejected (1: never; no usable row at all is exit 3 whatever F)"},
    {"follow", RAP_OPT_BOOL, CMD_PREP | TR, OFF(follow), "false", 0, 0, NULL, NULL, "keep reading rows appended to the input as it grows"},
    {"idle-timeout", RAP_OPT_DOUBLE, CMD_PREP | TR, OFF(idle_timeout), "0", 0, 1e9, NULL, "SEC", "with --follow: stop after this long without new rows (0: never)"},
    {"max-line", RAP_OPT_INT, CMD_PREP | TB, OFF(max_line), "65536", 64, 1 << 30, NULL, "BYTES", "longer input lines are rejected"},
    {"max-rows", RAP_OPT_INT, CMD_PREP | TR, OFF(max_rows), "0", 0, BIG, NULL, "N", "stop after reading N rows (0: all; train: per pass over --data)"},
    {"inflate-threads", RAP_OPT_INT, CMD_PREP | TB, OFF(inflate_threads), "1", 1, 256, NULL, "N", "files of an input directory read and inflated at once, each by its own thread, within --threads (docs/INPUT.md); with --follow one at a time"},
    {"interleave", RAP_OPT_ENUM, CMD_PREP | TB, OFF(interleave), "file", 0, 0, "file|batch", NULL, "order of rows with --inflate-threads N: file after file as with one thread, or batch: batch i (--batch rows) from file i mod N while the files last (docs/INPUT.md)"},
    {"parse", RAP_OPT_ENUM, TB, OFF(parse), "auto", 0, 0, "auto|gpu|cpu", NULL, "who parses the text: gpu (kernels on the training GPU, in rap mode inside its windows where the schedule has parse lines or RAP_PARSE_WINDOW names one, docs/RUNTIME.md; rows stay on the device; the host reads, inflates and cuts lines: about a third of the host CPU a row), cpu (the host's parser threads); auto: gpu where the run trains on a GPU from whole batches (sequential, stream, rap, ideal) and the text is Criteo's, else cpu (docs/INPUT.md); gpu on the CPU backend runs the kernels' CPU reference"},
    /* rap plan and rap predictor train (docs/PLANNER.md) */
    {"plan", RAP_OPT_STRING, PL, OFF(plan), "default", 0, 0, NULL, "FILE", "preprocessing plan (default: the built-in plans/default.plan)"},
    {"capacity", RAP_OPT_STRING, PL, OFF(capacity), "", 0, 0, NULL, "FILE[,FILE..]", "capacity file of the training windows, or one per rank with --gpus (default: an assumed capacity, labelled so)"},
    {"predictor", RAP_OPT_STRING, PL, OFF(predictor), "", 0, 0, NULL, "DIR", "latency predictor bundle (rap predictor train; default: the analytic fallback)"},
    {"batch", RAP_OPT_INT, PL, OFF(batch), "4096", 1, 1 << 26, NULL, "B", "rows per batch (per GPU)"},
    {"out", RAP_OPT_STRING, PL, OFF(out), "", 0, 0, NULL, "SCHEDULE", "write the schedule here (docs/SCHEDULE.md)"},
    {"out", RAP_OPT_STRING, PT, OFF(out), "", 0, 0, NULL, "DIR", "write the predictor bundle here"},
    {"in", RAP_OPT_STRING, PT, OFF(in), "", 0, 0, NULL, "CSV", "measured kernels (docs/PLANNER.md, \"Measurements CSV\")"},
    {"report", RAP_OPT_STRING, PL, OFF(report), "", 0, 0, NULL, "FILE.json", "write the planning report (JSON)"},
    {"fusion-out", RAP_OPT_STRING, PL, OFF(fusion_out), "", 0, 0, NULL, "FILE", "write the fusion the schedule runs (default: SCHEDULE.fusion; the runtime must load it)"},
    {"fusion", RAP_OPT_ENUM, PL, OFF(plan_fusion), "ilp", 0, 0, "ilp|levels|ilp-capacity|none", NULL, "fusion: the integer program, greedy by levels, the better (less exposed) of the ILP and its capacity-aware variant, or none (one kernel per op: the ablation)"},
    {"split", RAP_OPT_BOOL, PL, OFF(split), "true", 0, 0, NULL, NULL, "split kernels that do not fit a window (--no-split: whole kernels only, the ablation)"},
    {"window-choice", RAP_OPT_ENUM, PL, OFF(window_choice), "slowdown", 0, 0, "slowdown|earliest|room", NULL, "a kernel that fits whole goes to the window it slows least (standalone / capacity of the capacity file), to the earliest it fits (the ablation), or to the one with the most capacity left (plans 0 and 1: docs/PLANNER.md)"},
    {"row-fusion", RAP_OPT_ENUM, PL, OFF(row_fusion), "auto", 0, 0, "auto|always|never", NULL, "row fusion after the fusion: auto = when the fusion has at most 8 kernels (small plans gain, larger ones lose: bench/RESULTS.md)"},
    {"row-descs", RAP_OPT_INT, PL, OFF(row_descs), "128", 1, 1000000, NULL, "N", "row fusion: at most N ops a row kernel (at least --rows); more groups make more row kernels"},
    {"rows", RAP_OPT_INT, PL, OFF(row_group), "8", 0, 64, NULL, "N", "row fusion after the fusion: chains of row-local ops of any types in one kernel, up to N ops a group (0: off, the ablation)"},
    {"time-limit", RAP_OPT_DOUBLE, PL, OFF(time_limit), "5", 0.1, 3600, NULL, "SEC", "fusion ILP time limit (the best solution so far is used after it)"},
    {"extra-stages", RAP_OPT_INT, PL, OFF(extra_stages), "2", -1, 1000, NULL, "N", "ILP stages beyond the longest op chain (-1: one per op, exact but slow)"},
    {"gpu", RAP_OPT_STRING, PL, OFF(gpu_name), "", 0, 0, NULL, "NAME", "GPU the plan is for (default: the capacity file's); files for another GPU are refused"},
    {"model", RAP_OPT_ENUM, PL, OFF(model), "paper", 0, 0, "small|paper", NULL, "model shape preset the capacity must match (tables: the plan's sparse columns)"},
    {"emb-dim", RAP_OPT_INT, PL, OFF(emb_dim), "128", 1, 4096, NULL, "D", "embedding dimension"},
    {"mlp-bot", RAP_OPT_STRING, PL, OFF(mlp_bot), "512-256-128", 0, 0, NULL, "W-W-..", "bottom MLP widths"},
    {"mlp-top", RAP_OPT_STRING, PL, OFF(mlp_top), "1024-1024-512-256-1", 0, 0, NULL, "W-..-1", "top MLP widths"},
    {"precision", RAP_OPT_ENUM, PL, OFF(precision), "fp32", 0, 0, "fp32|bf16", NULL, "training precision the capacity was measured with"},
    {"emb-dtype", RAP_OPT_ENUM, PL, OFF(emb_dtype), "fp32", 0, 0, "fp32|bf16|fp16", NULL, "storage of the embedding tables the capacity was measured with (a capacity file without it: fp32)"},
    {"optimizer", RAP_OPT_ENUM, PL, OFF(optimizer), "adagrad", 0, 0, "sgd|adagrad|rowwise-adagrad", NULL, "optimizer the capacity was measured with (a capacity file without it matches sgd and adagrad)"},
    {"gpus", RAP_OPT_INT, PL, OFF(gpus), "1", 1, RAP_PLACE_MAX_RANKS, NULL, "R", "ranks (one GPU each) to place preprocessing over; 1: the one-GPU planner"},
    {"placement", RAP_OPT_ENUM, PL, OFF(placement), "search", 0, 0, "owner|batch|search|all", NULL, "with --gpus > 1: sparse features on their table's owner, every feature on every rank's rows, the search from owner, or all three compared (files: search's)"},
    {"row-shares", RAP_OPT_INT, PL, OFF(row_shares), "1", 1, 64, NULL, "G", "row shares per rank's rows the search may move (granularity; ranks x G <= 64)"},
    {"link-gbps", RAP_OPT_DOUBLE, PL, OFF(link_gbps), "300", 0.001, 1e6, NULL, "GB/s", "interconnect bandwidth per direction per GPU, effective all-to-all (NVLink on H200)"},
    {"link-latency-us", RAP_OPT_DOUBLE, PL, OFF(link_latency_us), "10", 0, 1e6, NULL, "US", "latency of one all-to-all"},
    {"grad-comm-capacity", RAP_OPT_DOUBLE, PL, OFF(grad_comm_ms), "0.05", 0, 1e6, NULL, "MS", "with --gpus > 1 and no capacity file: the assumed grad_comm window capacity"},
    {"capacity-fraction", RAP_OPT_DOUBLE, PL, OFF(cap_fraction), "-1", -1, 1e6, NULL, "F", "no capacity file: every window hides F x the whole plan's one-GPU predicted ms (for comparisons; -1: off)"},
    {"owners", RAP_OPT_STRING, PL, OFF(owners), "", 0, 0, NULL, "R,R,..", "with --gpus: the rank owning each table (the plan's sparse columns in order; default: the trainer's sharding, src/dist/shard.c)"},
    {"max-moves", RAP_OPT_INT, PL, OFF(max_moves), "1000", 1, 1000000, NULL, "N", "placement search: moves at most"},
    {"parse", RAP_OPT_ENUM, PL, OFF(parse), "auto", 0, 0, "auto|gpu|cpu", NULL, "who parses the training's text: gpu adds the parse kernels of a batch's lines (+1% for rejects) to the windows with the most room left after the kernels (parse lines of the schedule, docs/PLANNER.md; needs --parse-model); auto and cpu: nothing"},
    {"parse-model", RAP_OPT_STRING, PL, OFF(parse_model), "", 0, 0, NULL, "FILE", "--parse gpu: the parse kernels' latency model (rap profile kernels writes it beside its CSV)"},
    /* rap profile kernels and rap profile capacity (docs/PROFILE.md) */
    {"plans", RAP_OPT_STRING, PK, OFF(plans), "plans/plan0.plan,plans/plan1.plan,plans/plan2.plan,plans/plan3.plan", 0, 0, NULL, "P,P,..", "plans whose kernels are measured (\"default\" = the built-in plan; the default list: rap's shipped plans, found from any directory)"},
    {"batches", RAP_OPT_STRING, PK, OFF(batches), "256,512,1024,2048,4096,8192,16384,32768,65536", 0, 0, NULL, "N,N,..", "batch rows to load"},
    {"reps", RAP_OPT_INT, PK, OFF(reps), "5", 1, 1000, NULL, "N", "timed repeats per slice (median)"},
    {"target", RAP_OPT_INT, PK, OFF(target), "0", 0, 1 << 30, NULL, "N", "stop after N measurements (0: the whole grid)"},
    {"ilp-time", RAP_OPT_DOUBLE, PK, OFF(ilp_time), "1", 0, 600, NULL, "SEC", "also measure the ILP fusion's kernels, solved this long (0: skip)"},
    {"flush", RAP_OPT_BOOL, PK, OFF(flush), "true", 0, 0, NULL, NULL, "overwrite the L2 cache before each timed slice (--no-flush: warm)"},
    {"parse-out", RAP_OPT_STRING, PK, OFF(parse_out), "", 0, 0, NULL, "FILE", "write the parse kernels' latency model here (default: --out with .parse in place of .csv; docs/PROFILE.md)"},
    {"plan", RAP_OPT_STRING, PC, OFF(plan), "default", 0, 0, NULL, "FILE", "plan the model trains (its sparse columns are the tables)"},
    {"batch", RAP_OPT_INT, PC, OFF(batch), "4096", 2, 1 << 24, NULL, "B", "rows per batch (per GPU)"},
    {"model", RAP_OPT_ENUM, PC, OFF(model), "paper", 0, 0, "small|paper", NULL, "model shape preset"},
    {"emb-dim", RAP_OPT_INT, PC, OFF(emb_dim), "128", 1, 4096, NULL, "D", "embedding dimension"},
    {"mlp-bot", RAP_OPT_STRING, PC, OFF(mlp_bot), "512-256-128", 0, 0, NULL, "W-W-..", "bottom MLP widths"},
    {"mlp-top", RAP_OPT_STRING, PC, OFF(mlp_top), "1024-1024-512-256-1", 0, 0, NULL, "W-..-1", "top MLP widths"},
    {"precision", RAP_OPT_ENUM, PC, OFF(precision), "fp32", 0, 0, "fp32|bf16", NULL, "training precision"},
    {"emb-dtype", RAP_OPT_ENUM, PC, OFF(emb_dtype), "fp32", 0, 0, "fp32|bf16|fp16", NULL, "storage of the embedding tables (docs/MODEL.md)"},
    {"optimizer", RAP_OPT_ENUM, PC, OFF(optimizer), "adagrad", 0, 0, "sgd|adagrad|rowwise-adagrad", NULL, "optimizer of the training steps (rap train's default: adagrad)"},
    {"tolerance", RAP_OPT_DOUBLE, PC, OFF(tolerance), "0.02", 0.001, 0.5, NULL, "F", "allowed slowdown of a phase by co-running work"},
    {"reps", RAP_OPT_INT, PC, OFF(reps), "15", 3, 1000, NULL, "N", "training steps per measured point (median)"},
    {"rounds", RAP_OPT_INT, PC, OFF(rounds), "5", 1, RAP_PROF_MAX_ROUNDS, NULL, "N", "searches per phase; the capacity is their median"},
    {"cuda-graph", RAP_OPT_BOOL, PC, OFF(cuda_graph), "false", 0, 0, NULL, NULL, "run each training phase as a CUDA graph, as rap train and rap bench --cuda-graph do (capacities for runs with graphs)"},
    {"currency", RAP_OPT_STRING, PC, OFF(currency), "", 0, 0, NULL, "FILE.csv", "also run the currency check: real kernels beside a phase, capacity consumed vs standalone latency vs thread blocks"},
    {"currency-phase", RAP_OPT_STRING, PC, OFF(currency_phase), "mlp_backward", 0, 0, NULL, "PHASE", "phase the currency check co-runs beside"},
    {"out", RAP_OPT_STRING, PK, OFF(out), "", 0, 0, NULL, "FILE.csv", "write the measurements here (default: stdout)"},
    {"out", RAP_OPT_STRING, PC, OFF(out), "", 0, 0, NULL, "FILE", "write the capacity file here (default: stdout)"},
    {"seed", RAP_OPT_INT, PK | PC, OFF(seed), "1", 0, INT64_MAX, NULL, "N", "seed of the generated rows"},
    /* every command */
    {"threads", RAP_OPT_INT, CORE & ~CMD_EXPORT, OFF(threads), "0", 0, 4096, NULL, "N", "CPU threads (0: all cores); the reader's lanes and parsers share them (docs/INPUT.md)"},
    {"quiet", RAP_OPT_BOOL, CMD_ALL, OFF(quiet), "false", 0, 0, NULL, NULL, "print errors only"},
    {"verbose", RAP_OPT_BOOL, CORE, OFF(verbose), "false", 0, 0, NULL, NULL, "print debugging detail"},
    {"verbose", RAP_OPT_BOOL, PL | PT, OFF(verbose), "false", 0, 0, NULL, NULL, "print solver messages"},
    {"verbose", RAP_OPT_BOOL, PK | PC, OFF(verbose), "false", 0, 0, NULL, NULL, "print every measured point"},
    {"help", RAP_OPT_BOOL, CMD_ALL, OFF(help), "false", 0, 0, NULL, NULL, "show this help"},
};
#undef TR
#undef BE
#undef TB
#undef PL
#undef PT
#undef PK
#undef PC
const int cli_n_options = (int)(sizeof cli_options / sizeof cli_options[0]);
_Static_assert(sizeof cli_options / sizeof cli_options[0] <= RAP_OPT_MAX_ROWS,
               "the option table outgrew the parser's rows (core/options.h)");

int cli_exit_code(rap_status st)
{
    switch (st) {
    case RAP_OK: return CLI_EXIT_OK;
    case RAP_ERR_NO_ROWS: return CLI_EXIT_NO_ROWS;
    case RAP_ERR_INTERRUPTED: return CLI_EXIT_INTERRUPTED;
    default: return CLI_EXIT_ERROR;
    }
}

int cli_fail(const char *cmd_name, rap_status st)
{
    const char *msg = rap_last_error();
    fprintf(stderr, "rap %s: %s\n", cmd_name, msg[0] ? msg : rap_status_name(st));
    return cli_exit_code(st);
}

int cli_check_rejected(const char *cmd_name, const cli_settings *s, const rap_reader_stats *st)
{
    if (st->rows_used == 0) {
        if (st->rows_read > 0)
            fprintf(stderr, "rap %s: no usable row: all %lld rows read were rejected (accounting "
                    "above)\n", cmd_name, (long long)st->rows_read);
        else
            fprintf(stderr, "rap %s: no usable row: the input holds no rows\n", cmd_name);
        return CLI_EXIT_NO_ROWS;
    }
    double share = st->rows_read > 0 ? (double)st->rows_rejected / (double)st->rows_read : 0;
    if (s->max_rejected < 1 && share > s->max_rejected) {
        fprintf(stderr, "rap %s: %lld of %lld rows rejected (%.2f%%), more than --max-rejected %g "
                "(accounting above)\n", cmd_name, (long long)st->rows_rejected,
                (long long)st->rows_read, 100 * share, s->max_rejected);
        return CLI_EXIT_REJECTED;
    }
    return CLI_EXIT_OK;
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

bool cli_given(const char *name) { return rap_opts_given(cli_options, cli_n_options, name); }

static bool given(const char *name) { return cli_given(name); }

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

rap_status cli_model_config(const cli_settings *s, rap_model_config *m)
{
    rap_model_config_defaults(m);
    RAP_TRY(cli_parse_widths("mlp-bot", s->mlp_bot, m->bot, RAP_MAX_LAYERS, &m->n_bot));
    RAP_TRY(cli_parse_widths("mlp-top", s->mlp_top, m->top, RAP_MAX_LAYERS, &m->n_top));
    m->emb_dim = (int)s->emb_dim;
    m->batch = s->batch;
    m->lr = (float)s->lr;
    m->optimizer = (rap_optimizer)s->optimizer;
    m->emb_dtype = (rap_emb_dtype)s->emb_dtype;
    m->adagrad_init = (float)s->adagrad_init;
    m->precision = s->precision == 1 ? RAP_BF16 : RAP_FP32;
    m->strict_fp32 = s->precision == 2; /* fp32-strict */
    m->seed = (uint64_t)s->seed;
    m->threads = (int)s->threads;
    return RAP_OK;
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

/* The `small` model shape of rap plan and rap profile capacity (whose
 * preset is paper): the options not given get 16, 64-16, 64-32-1. */
static void small_shape(cli_settings *s)
{
    if (!given("emb-dim"))
        s->emb_dim = 16;
    if (!given("mlp-bot"))
        snprintf(s->mlp_bot, sizeof s->mlp_bot, "64-16");
    if (!given("mlp-top"))
        snprintf(s->mlp_top, sizeof s->mlp_top, "64-32-1");
}

/* Fills the --modes default (g_bench_modes) from runtime.h's list. */
static void bench_modes_fill(void)
{
    size_t at = 0;
    g_bench_modes[0] = 0;
    for (int pass = 0; pass < 2; pass++) /* every mode but mps, then mps */
        for (int m = 0; m < RAP_MODE_COUNT; m++)
            if ((m == RAP_MODE_MPS) == (pass == 1))
                at += (size_t)snprintf(g_bench_modes + at, sizeof g_bench_modes - at, "%s%s",
                                       at ? "," : "", rap_mode_name((rap_mode)m));
}

/* --delimiter's word or byte. */
static rap_status parse_delimiter(const char *spec, char *out)
{
    if (!strcmp(spec, "tab") || !strcmp(spec, "\t"))
        *out = '\t';
    else if (!strcmp(spec, "comma"))
        *out = ',';
    else if (!strcmp(spec, "semicolon"))
        *out = ';';
    else if (!strcmp(spec, "pipe"))
        *out = '|';
    else if (strlen(spec) == 1)
        *out = spec[0];
    else
        return rap_fail(RAP_ERR_ARG, "--delimiter \"%s\": expected tab, comma, semicolon, "
                                     "pipe or one byte", spec);
    return RAP_OK;
}

/* s->in_schema from --schema and the format options; none of them given:
 * NULL (the reader's built-in Criteo path, byte for byte as before). */
static rap_status load_input_schema(cli_settings *s)
{
    s->in_schema = NULL;
    bool any = s->schema[0] || given("delimiter") || given("header") || given("null-token") ||
               given("max-list");
    if (!any)
        return RAP_OK;
    char d = '\t';
    RAP_TRY(parse_delimiter(s->delimiter, &d));
    if (strlen(s->null_token) > RAP_NULL_TOKEN_MAX)
        return rap_fail(RAP_ERR_ARG, "--null-token: at most %d bytes", RAP_NULL_TOKEN_MAX);
    rap_input_schema *x;
    if (s->schema[0])
        RAP_TRY(rap_input_schema_load(s->schema, &x));
    else
        RAP_TRY(rap_input_schema_criteo(&x));
    x->delimiter = d;
    x->header = s->header;
    snprintf(x->null_token, sizeof x->null_token, "%s", s->null_token);
    x->max_list = (int)s->max_list;
    rap_status st = rap_input_schema_check(x);
    if (st != RAP_OK) {
        rap_input_schema_free(x);
        return st;
    }
    s->in_schema = x; /* lives as long as the process: the settings are the program's */
    return RAP_OK;
}

/* The start-up settings in a few lines: the options given, the model the
 * preset and options make (train, bench), and how to see them all. */
static void print_compact(const char *cmd_name, unsigned cmd, const cli_settings *s)
{
    fprintf(stderr, "rap %s settings (given; the rest at their defaults, --verbose lists every "
            "one):\n", cmd_name);
    if (rap_opts_print_given(cli_options, cli_n_options, cmd, s, "  ", 96, stderr) == 0)
        fprintf(stderr, "  none: every setting at its default\n");
    if (cmd & (CMD_TRAIN | CMD_BENCH)) {
        static const char *opt_names[] = {"sgd", "adagrad", "rowwise-adagrad"};
        int o = s->optimizer >= 0 && s->optimizer < 3 ? s->optimizer : 1;
        fprintf(stderr, "  model %s: emb-dim %lld, mlp-bot %s, mlp-top %s, batch %lld, lr %g, %s\n",
                s->model == MODEL_PAPER ? "paper" : "small", (long long)s->emb_dim, s->mlp_bot,
                s->mlp_top, (long long)s->batch, s->lr, opt_names[o]);
    }
}

void cli_parse(const char *cmd_name, unsigned cmd, int argc, char **argv, cli_settings *s)
{
    memset(s, 0, sizeof *s);
    bench_modes_fill();
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
    if ((cmd & (CMD_PLAN | CMD_PROF_CAPACITY)) && s->model == MODEL_SMALL)
        small_shape(s);
    if ((cmd & (CMD_GEN | CMD_PREP | CMD_TRAIN | CMD_BENCH)) &&
        (st = load_input_schema(s)) != RAP_OK) {
        fprintf(stderr, "rap %s: %s\n", cmd_name, rap_last_error());
        exit(2);
    }
    rap_log_set_level(s->quiet ? 1 : s->verbose ? 3 : 2);
    if (s->verbose && (cmd & CORE)) {
        fprintf(stderr, "rap %s settings:\n", cmd_name);
        rap_opts_print(cli_options, cli_n_options, cmd, s, "  ", stderr);
    } else if (!s->quiet && (cmd & CORE)) {
        print_compact(cmd_name, cmd, s);
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

rap_status cli_load_plan_for(const cli_settings *s, rap_plan **out)
{
    const rap_input_schema *x = s->in_schema;
    if (!x)
        return cli_load_plan(s->plan, out);
    if (!strcmp(s->plan, "default")) {
        rap_input_schema layout = *x; /* Criteo's columns in any format */
        layout.delimiter = '\t';
        layout.header = false;
        if (!rap_input_schema_is_criteo(&layout))
            return rap_fail(RAP_ERR_ARG, "--schema %s: the built-in default plan reads "
                                         "Criteo's columns (int_0.., cat_0..); give --plan FILE "
                                         "naming the schema's columns", x->source);
        return rap_plan_parse_schema(rap_default_plan_text, "<built-in default.plan>", x, out);
    }
    return rap_plan_load_schema(s->plan, x, out);
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
    g.schema = s->in_schema; /* rows of --schema when given */
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    rap_info("no --input: generating %lld %s rows (seed %lld) into %s",
             (long long)g.rows, g.schema ? "schema" : "Criteo-shaped", (long long)s->seed,
             tmp_out);
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
    rc->schema = s->in_schema;
    static const rap_parse_kind kinds[] = {RAP_PARSE_AUTO, RAP_PARSE_GPU, RAP_PARSE_CPU};
    rc->parse = s->parse >= 0 && s->parse < 3 ? kinds[s->parse] : RAP_PARSE_AUTO;
}

void cli_print_reader_threads(const cli_settings *s, const rap_reader_config *rc)
{
    if (s->quiet)
        return;
    rap_reader_threads t;
    char line[384];
    if (rap_reader_plan_threads(rc, &t) != RAP_OK)
        return; /* the reader's open says what is wrong */
    rap_reader_threads_line(&t, line, sizeof line);
    /* with ranks, whether they share the parse (docs/INPUT.md): each rank's
     * feed reads every line, its parser threads parse 1/R of each chunk
     * (not the reference over mpi: pipeline_dist.c) */
    int world = 1;
    const bool mpi = rap_dist_detect(&world);
    rap_reader_config sc = *rc;
    sc.parse_share_ranks = s->gpus > 1 ? (int)s->gpus : mpi ? world : 0;
    if (sc.parse_share_ranks > 1 && !(mpi && sc.parse == RAP_PARSE_REF) &&
        rap_reader_share_parsers(&sc) > 0) {
        size_t at = strlen(line);
        snprintf(line + at, sizeof line - at, "; the %d ranks share the parse (each parses its "
                 "piece of every chunk)", sc.parse_share_ranks);
    }
    fprintf(stderr, "  reader threads: %s\n", line);
}
