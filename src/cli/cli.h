/*
 * cli.h -- the rap command: settings of every subcommand (one struct, filled
 * from one option table in settings.c: rap plan, predictor and profile
 * included) and the subcommand entry points. Only this folder calls
 * exit(); the library returns statuses.
 */
#ifndef RAP_CLI_H
#define RAP_CLI_H

#include "core/options.h"
#include "model/model.h"
#include "rap.h"

/* Subcommand bits of rap_opt.cmds: one bit per command line that parses
 * options (rap profile's two and rap predictor train each have theirs). */
enum {
    CMD_GEN = 1u << 0,
    CMD_PREP = 1u << 1,
    CMD_TRAIN = 1u << 2,
    CMD_EXPORT = 1u << 3,
    CMD_PLAN = 1u << 4,
    CMD_PREDICTOR = 1u << 5,     /* rap predictor train */
    CMD_PROF_KERNELS = 1u << 6,  /* rap profile kernels */
    CMD_PROF_CAPACITY = 1u << 7, /* rap profile capacity */
    CMD_BENCH = 1u << 8,
    CMD_ALL = 0xffffffffu
};

typedef enum { DEV_AUTO = 0, DEV_CPU = 1, DEV_GPU = 2 } cli_device;
typedef enum { FMT_TSV = 0, FMT_BIN = 1 } cli_format;
typedef enum {
    FUSE_LEVELS = RAP_FUSE_LEVELS,
    FUSE_NONE = RAP_FUSE_NONE,
    FUSE_ROWS = RAP_FUSE_ROWS,
    FUSE_AUTO = RAP_FUSE_AUTO
} cli_fusion;
typedef enum { MODEL_SMALL = 0, MODEL_PAPER = 1 } cli_model;

typedef struct {
    /* common */
    int64_t threads;
    bool quiet, verbose, help;
    /* gen */
    int64_t rows;
    int64_t seed;
    char out[RAP_OPT_STR];
    char cardinalities[RAP_OPT_STR];
    double list_mean;        /* gen --schema: mean list length */
    /* data in */
    char input[RAP_OPT_STR];
    int bad_rows;            /* rap_bad_rows */
    double max_rejected;     /* --max-rejected: share of rejected rows that fails (1: never) */
    bool follow;
    double idle_timeout;
    int64_t max_line;
    int64_t max_rows;
    int64_t inflate_threads; /* files of a directory read at once (docs/INPUT.md) */
    int interleave;          /* rap_interleave */
    int parse;               /* --parse: 0 auto, 1 gpu, 2 cpu (cli_reader_options) */
    int64_t gen_rows;        /* rows generated when no --input is given */
    /* the input schema (docs/SCHEMA.md) */
    char schema[RAP_OPT_STR];     /* --schema FILE; "" the built-in Criteo layout */
    char delimiter[RAP_OPT_STR];  /* tab | comma | one byte */
    bool header;
    char null_token[RAP_OPT_STR];
    int64_t max_list;
    rap_input_schema *in_schema;  /* loaded by cli_parse; NULL: none of the options above
                                   * given (everything as without a schema) */
    /* prep */
    char plan[RAP_OPT_STR];
    char output[RAP_OPT_STR];
    int device;              /* cli_device */
    int64_t batch;
    int format;              /* cli_format */
    int fusion;              /* cli_fusion */
    /* train: data and evaluation */
    char data[RAP_OPT_STR];
    char eval_data[RAP_OPT_STR];
    double eval_fraction;
    int64_t eval_rows;
    int64_t eval_every;
    int64_t gen_eval_rows;   /* evaluation rows generated when no --data is given */
    /* train: how long, outputs */
    int64_t steps, epochs;
    char metrics[RAP_OPT_STR];
    char save[RAP_OPT_STR];
    char save_every[RAP_OPT_STR]; /* steps, or a duration: 90s, 10m, 1h */
    int64_t keep;
    bool replan;             /* re-planning while training (docs/RUNTIME.md) */
    int64_t replan_every;
    double replan_threshold;
    double replan_lists;
    char replan_out[RAP_OPT_STR];    /* --capacity and --predictor: the fields above */
    bool progressive;        /* progressive validation (docs/TRAINING.md) */
    int64_t progressive_window;
    int guard;               /* 0 warn, 1 fail */
    bool guard_nan;
    int64_t guard_auc_rows;
    double guard_calibration;
    char resume[RAP_OPT_STR];
    int64_t log_every;
    /* train: model (a preset, then explicit options) */
    int model;               /* cli_model */
    int64_t emb_dim;
    char mlp_bot[RAP_OPT_STR];
    char mlp_top[RAP_OPT_STR];
    double lr;
    double adagrad_init;
    int optimizer;           /* rap_optimizer */
    int emb_dtype;           /* rap_emb_dtype */
    int precision;           /* rap_precision */
    bool cuda_graph;
    int64_t prep_lanes;      /* rap mode: streams of a window's independent slices */
    bool dry_run;            /* print the memory plan and exit (docs/MEMORY.md) */
    /* runtime: train and bench */
    int mode;                /* 0 auto, else 1 + rap_mode */
    char modes[RAP_OPT_STR];
    int64_t warmup;
    int64_t repeat;          /* bench: runs of the mode list, medians reported */
    int64_t cpu_workers;
    char schedule[RAP_OPT_STR];
    char trace[RAP_OPT_STR];
    int64_t trace_steps;
    bool json;
    bool mps_start;
    /* ranks */
    int64_t gpus;            /* --gpus N: N ranks as threads */
    int placement;           /* rap_placement (sched/placement.h): the choices' order;
                              * rap plan: 3 = all */
    double comm_timeout;     /* seconds; 0 = the default */
    /* export */
    char checkpoint[RAP_OPT_STR];
    /* plan (and predictor train): the planner's inputs and outputs */
    char capacity[RAP_OPT_STR];
    char predictor[RAP_OPT_STR];
    char report[RAP_OPT_STR];
    char fusion_out[RAP_OPT_STR];
    char in[RAP_OPT_STR];    /* predictor train: the measurements CSV */
    char gpu_name[RAP_OPT_STR]; /* --gpu NAME */
    int plan_fusion;         /* 0 ilp, 1 levels, 2 ilp-capacity, 3 none */
    bool split;
    int window_choice;       /* rap_window_choice: slowdown, earliest, room */
    int row_fusion;          /* 0 auto, 1 always, 2 never */
    int64_t row_descs;       /* row fusion: ops per row kernel */
    int64_t row_group;       /* --rows: row fusion stages per group, 0 off */
    double time_limit;
    int64_t extra_stages;
    int64_t row_shares;
    double link_gbps, link_latency_us;
    double grad_comm_ms;     /* assumed grad_comm capacity with --gpus > 1 */
    double cap_fraction;     /* < 0: off */
    char owners[RAP_OPT_STR];
    int64_t max_moves;
    char parse_model[RAP_OPT_STR]; /* plan --parse gpu: the parse's latency model */
    char parse_out[RAP_OPT_STR];   /* profile kernels: where the parse model goes */
    /* profile kernels / capacity */
    char plans[RAP_OPT_STR];
    char batches[RAP_OPT_STR];
    int64_t reps, rounds, target;
    double ilp_time, tolerance;
    bool flush;
    char currency[RAP_OPT_STR];
    char currency_phase[RAP_OPT_STR];
} cli_settings;

extern const rap_opt cli_options[];
extern const int cli_n_options;

/* Parses options for one subcommand (cmd: its CMD_ bit); prints the error
 * and the usage line and exits 2 on a bad option, prints the usage and
 * exits 0 on --help. Applies the model preset (--model) of train, bench,
 * plan and profile capacity. Prints the resolved settings unless quiet
 * (not for plan, predictor train and profile, which never did). */
void cli_parse(const char *cmd_name, unsigned cmd, int argc, char **argv, cli_settings *s);
/* True when option --name was given to the last cli_parse. */
bool cli_given(const char *name);
/* Exit codes of the rap command (docs/TRAINING.md "Exit codes"). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_ERROR = 1,        /* a failure, its message on stderr */
    CLI_EXIT_USAGE = 2,        /* bad command line (unknown option, value out of bounds) */
    CLI_EXIT_NO_ROWS = 3,      /* an input (training, evaluation, prep) has no usable row */
    CLI_EXIT_REJECTED = 4,     /* rejected rows passed --max-rejected */
    CLI_EXIT_INTERRUPTED = 130 /* stopped by a signal (outputs finished as the docs say) */
};
/* The exit code of a status: RAP_OK 0, RAP_ERR_NO_ROWS 3, RAP_ERR_INTERRUPTED
 * 130, any other 1. */
int cli_exit_code(rap_status st);
/* Prints "rap CMD: message" from rap_last_error() and returns the status's
 * exit code (cli_exit_code). */
int cli_fail(const char *cmd_name, rap_status st);
/* The rejected share of an input read to its end: CLI_EXIT_NO_ROWS when rows
 * were read and none was usable, CLI_EXIT_REJECTED when the rejected share
 * passes --max-rejected, each with its message printed; else CLI_EXIT_OK. */
int cli_check_rejected(const char *cmd_name, const cli_settings *s, const rap_reader_stats *st);
/* Checks before the work (check.c). cli_check_output: the directory of
 * path (option opt) takes a new file (a probe file created and removed),
 * or path is an existing non-regular file (device, fifo) writable by its
 * mode, never opened; "-" and "" pass. cli_check_input: path opens for
 * reading (a regular file, or a directory that lists; a fifo or device:
 * readable by its mode, not opened); "-" and "" pass. RAP_ERR_IO naming the option, the path and
 * the reason otherwise. */
rap_status cli_check_output(const char *opt, const char *path);
rap_status cli_check_input(const char *opt, const char *path);
/* A file shipped in rap's folder, named relative to it ("plans/plan0.plan"):
 * out gets rel when it opens from the current directory, else the path
 * beside the rap binary (its folder or the folder above: build/rap) where
 * it opens; false, out = rel, when neither. */
bool cli_shipped_path(const char *rel, char *out, size_t n);

/* Ranks as threads (--gpus N): whether a failed rank's message is only the
 * broken communicator another rank's failure left behind; the message to
 * report is the first rank's that is not, else the first failed rank's. */
bool cli_comm_broken_only(const char *msg);

/* Under mpirun, ranks other than 0 print errors only: argv with "--quiet"
 * appended (a new array, *argc updated; the caller frees it when it is not
 * argv), else argv itself. NULL on out of memory. */
char **cli_mpi_args(int *argc, char **argv);

/* Loads --plan: "default" is the plan built into rap (plans/default.plan). */
rap_status cli_load_plan(const char *spec, rap_plan **out);
/* Loads s->plan over s's input schema (cli_load_plan without one): the
 * plan names the schema's columns; a name the schema lacks is refused
 * here, before any data is read, naming plan:line:col and the schema. */
rap_status cli_load_plan_for(const cli_settings *s, rap_plan **out);
/* Resolves --device auto to cpu or gpu; errors if gpu is asked and absent. */
rap_status cli_resolve_device(int dev, rap_device *out);
/* When --input is empty, generates gen_rows rows (seed) into a temporary
 * file and points input at it; *tmp_out gets its path to remove, or "". */
rap_status cli_default_input(cli_settings *s, char *tmp_out, size_t n);
/* The reader options of the settings (--threads, --inflate-threads,
 * --interleave with --batch rows a turn, --parse) into rc. Cannot fail. */
void cli_reader_options(const cli_settings *s, rap_reader_config *rc);
/* Prints, unless --quiet, the reader's split of its threads for rc's input
 * ("  reader threads: ..."), the last line of the start-up settings. */
void cli_print_reader_threads(const cli_settings *s, const rap_reader_config *rc);

/* The model of rap train and rap bench from the settings (rap_model_config
 * defaults, then the widths, --emb-dim, --batch, --lr, --optimizer,
 * --adagrad-init, --precision, --seed, --threads); its shape is the plan's
 * (the pipeline builder fills it). RAP_ERR_ARG on malformed widths. */
rap_status cli_model_config(const cli_settings *s, rap_model_config *m);

/* Parses "512-256-128" into widths (at most max); RAP_ERR_ARG naming the
 * option on a malformed list. */
rap_status cli_parse_widths(const char *opt, const char *spec, int *w, int max, int *n);

int cmd_gen(int argc, char **argv);
int cmd_prep(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);      /* cmd_plan.c */
int cmd_predictor(int argc, char **argv); /* cmd_plan.c */
int cmd_prep_server(int argc, char **argv); /* hidden: the mps mode's server */

#endif /* RAP_CLI_H */
