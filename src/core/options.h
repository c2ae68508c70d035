/*
 * options.h -- one table drives every command-line option: its name, type,
 * bounds, default, which subcommands take it, where it is stored and its
 * help. The parser, the usage text and the "settings" printout all read the
 * same table, so they cannot drift apart (redis config.c's lesson).
 */
#ifndef RAP_OPTIONS_H
#define RAP_OPTIONS_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RAP_OPT_INT,    /* int64_t field */
    RAP_OPT_DOUBLE, /* double field */
    RAP_OPT_STRING, /* char[RAP_OPT_STR] field */
    RAP_OPT_BOOL,   /* bool field; "--name" sets it, "--no-name" clears it */
    RAP_OPT_ENUM    /* int field: index of the value in `choices` ("a|b|c") */
} rap_opt_type;

#define RAP_OPT_STR 512
#define RAP_OPT_MAX_ROWS 256 /* rows of a table the parser tracks (rap_opts_given) */

typedef struct {
    const char *name;    /* without the leading "--" */
    rap_opt_type type;
    unsigned cmds;       /* bit mask of the subcommands that take it */
    size_t offset;       /* of the field in the caller's settings struct */
    const char *def;     /* default, as it would be typed */
    double min, max;     /* bounds for INT and DOUBLE (inclusive) */
    const char *choices; /* ENUM: "cpu|gpu" */
    const char *metavar; /* shown in usage: "N", "FILE" */
    const char *help;
} rap_opt;

/* Sets every option of table (n entries) that `cmd` takes to its default. */
rap_status rap_opts_defaults(const rap_opt *table, int n, unsigned cmd, void *settings);
/* Parses argv[0..argc) ("--name value", "--name=value", "--flag", "--no-flag")
 * into settings. Errors (unknown option, with the nearest name; missing or
 * malformed value; out of bounds) -> RAP_ERR_ARG with a message. Positional
 * arguments are rejected. Records which options were given (rap_opts_given). */
rap_status rap_opts_parse(const rap_opt *table, int n, unsigned cmd, int argc, char **argv,
                          void *settings);
/* True when option `name` was given on the command line (by any of its
 * rows: a table may hold one row of a name per group of commands). */
bool rap_opts_given(const rap_opt *table, int n, const char *name);
/* Usage of subcommand cmd: one line per option with metavar, default, help. */
void rap_opts_usage(const rap_opt *table, int n, unsigned cmd, FILE *f);
/* The resolved settings, one "name = value" per line, prefixed by prefix. */
void rap_opts_print(const rap_opt *table, int n, unsigned cmd, const void *settings,
                    const char *prefix, FILE *f);
/* The options given on the command line alone, "name=value" separated by
 * spaces, in lines of about width characters each starting with prefix
 * (nothing when none was given). Returns how many it printed. */
int rap_opts_print_given(const rap_opt *table, int n, unsigned cmd, const void *settings,
                         const char *prefix, int width, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* RAP_OPTIONS_H */
