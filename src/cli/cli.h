/*
 * cli.h -- the rap command: settings of every subcommand (one struct, filled
 * from one option table in settings.c) and the subcommand entry points.
 * Only this folder calls exit(); the library returns statuses.
 */
#ifndef RAP_CLI_H
#define RAP_CLI_H

#include "core/options.h"
#include "rap.h"

/* Subcommand bits of rap_opt.cmds. */
enum {
    CMD_GEN = 1u << 0,
    CMD_PREP = 1u << 1,
    CMD_ALL = 0xffffffffu
};

typedef enum { DEV_AUTO = 0, DEV_CPU = 1, DEV_GPU = 2 } cli_device;
typedef enum { FMT_TSV = 0, FMT_BIN = 1 } cli_format;
typedef enum { FUSE_LEVELS = 0, FUSE_NONE = 1 } cli_fusion;

typedef struct {
    /* common */
    int64_t threads;
    bool quiet, verbose, help;
    /* gen */
    int64_t rows;
    int64_t seed;
    char out[RAP_OPT_STR];
    char cardinalities[RAP_OPT_STR];
    /* data in */
    char input[RAP_OPT_STR];
    int bad_rows;            /* rap_bad_rows */
    bool follow;
    double idle_timeout;
    int64_t max_line;
    int64_t max_rows;
    int64_t gen_rows;        /* rows generated when no --input is given */
    /* prep */
    char plan[RAP_OPT_STR];
    char output[RAP_OPT_STR];
    int device;              /* cli_device */
    int64_t batch;
    int format;              /* cli_format */
    int fusion;              /* cli_fusion */
} cli_settings;

extern const rap_opt cli_options[];
extern const int cli_n_options;

/* Parses options for one subcommand; prints the error or the usage and
 * exits on failure or --help. Prints the resolved settings unless quiet. */
void cli_parse(const char *cmd_name, unsigned cmd, int argc, char **argv, cli_settings *s);
/* Prints "rap CMD: message" from rap_last_error() and returns exit code 1. */
int cli_fail(const char *cmd_name, rap_status st);

/* Loads --plan: "default" is the plan built into rap (plans/default.plan). */
rap_status cli_load_plan(const char *spec, rap_plan **out);
/* Resolves --device auto to cpu or gpu; errors if gpu is asked and absent. */
rap_status cli_resolve_device(int dev, rap_device *out);
/* When --input is empty, generates gen_rows rows (seed) into a temporary
 * file and points input at it; *tmp_out gets its path to remove, or "". */
rap_status cli_default_input(cli_settings *s, char *tmp_out, size_t n);

int cmd_gen(int argc, char **argv);
int cmd_prep(int argc, char **argv);

#endif /* RAP_CLI_H */
