/* settings.c -- THE option table of the rap command. Usage text, parsing,
 * bounds and the printout of resolved settings all come from it. */
#include "cli/cli.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OFF(f) offsetof(cli_settings, f)
#define BIG 9.2e18

const rap_opt cli_options[] = {
    /* name           type            commands         field           default    min  max  choices  metavar  help */
    {"rows", RAP_OPT_INT, CMD_GEN, OFF(rows), "1000000", 1, BIG, NULL, "N", "rows to generate"},
    {"seed", RAP_OPT_INT, CMD_GEN | CMD_PREP, OFF(seed), "1", 0, BIG, NULL, "S", "random seed (same seed, same bytes)"},
    {"out", RAP_OPT_STRING, CMD_GEN, OFF(out), "-", 0, 0, NULL, "FILE", "output file (.gz: gzip; - : stdout)"},
    {"cardinalities", RAP_OPT_STRING, CMD_GEN, OFF(cardinalities), "kaggle", 0, 0, NULL, "kaggle|1tb|LIST", "ids per categorical column (26 comma-separated counts for LIST)"},
    {"plan", RAP_OPT_STRING, CMD_PREP, OFF(plan), "default", 0, 0, NULL, "FILE", "preprocessing plan (default: the built-in plans/default.plan)"},
    {"input", RAP_OPT_STRING, CMD_PREP, OFF(input), "", 0, 0, NULL, "IN", "Criteo TSV file (.gz ok), directory, or - for stdin (default: generated rows)"},
    {"gen-rows", RAP_OPT_INT, CMD_PREP, OFF(gen_rows), "200000", 1, BIG, NULL, "N", "rows generated when no --input is given"},
    {"output", RAP_OPT_STRING, CMD_PREP, OFF(output), "", 0, 0, NULL, "OUT", "write preprocessed rows here (default: summary only)"},
    {"format", RAP_OPT_ENUM, CMD_PREP, OFF(format), "tsv", 0, 0, "tsv|bin", NULL, "output format: TSV with a header, or rap's binary shard"},
    {"device", RAP_OPT_ENUM, CMD_PREP, OFF(device), "auto", 0, 0, "auto|cpu|gpu", NULL, "where to preprocess (auto: the GPU if there is one)"},
    {"batch", RAP_OPT_INT, CMD_PREP, OFF(batch), "65536", 1, 1 << 26, NULL, "B", "rows per batch"},
    {"fusion", RAP_OPT_ENUM, CMD_PREP, OFF(fusion), "levels", 0, 0, "levels|none", NULL, "horizontal fusion: same-type ops of a level in one kernel, or one kernel per op"},
    {"bad-rows", RAP_OPT_ENUM, CMD_PREP, OFF(bad_rows), "skip", 0, 0, "skip|fail", NULL, "malformed rows: count and skip, or stop at the first"},
    {"follow", RAP_OPT_BOOL, CMD_PREP, OFF(follow), "false", 0, 0, NULL, NULL, "keep reading rows appended to the input as it grows"},
    {"idle-timeout", RAP_OPT_DOUBLE, CMD_PREP, OFF(idle_timeout), "0", 0, 1e9, NULL, "SEC", "with --follow: stop after this long without new rows (0: never)"},
    {"max-line", RAP_OPT_INT, CMD_PREP, OFF(max_line), "65536", 64, 1 << 30, NULL, "BYTES", "longer input lines are rejected"},
    {"max-rows", RAP_OPT_INT, CMD_PREP, OFF(max_rows), "0", 0, BIG, NULL, "N", "stop after reading N rows (0: all)"},
    {"threads", RAP_OPT_INT, CMD_ALL, OFF(threads), "0", 0, 4096, NULL, "N", "CPU threads (0: all cores)"},
    {"quiet", RAP_OPT_BOOL, CMD_ALL, OFF(quiet), "false", 0, 0, NULL, NULL, "print errors only"},
    {"verbose", RAP_OPT_BOOL, CMD_ALL, OFF(verbose), "false", 0, 0, NULL, NULL, "print debugging detail"},
    {"help", RAP_OPT_BOOL, CMD_ALL, OFF(help), "false", 0, 0, NULL, NULL, "show this help"},
};
const int cli_n_options = (int)(sizeof cli_options / sizeof cli_options[0]);

int cli_fail(const char *cmd_name, rap_status st)
{
    const char *msg = rap_last_error();
    fprintf(stderr, "rap %s: %s\n", cmd_name, msg[0] ? msg : rap_status_name(st));
    return st == RAP_ERR_INTERRUPTED ? 130 : 1;
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
