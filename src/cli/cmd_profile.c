/*
 * cmd_profile.c -- `rap profile kernels` and `rap profile capacity`: the GPU
 * measurements the planner runs on (docs/PROFILE.md). Options: rows of the
 * one option table (settings.c, CMD_PROF_KERNELS and CMD_PROF_CAPACITY).
 */
#include "cli/cli.h"
#include "core/out.h"
#include "plan/profile.h"
#include "run/pipeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST 64

/* Splits "a,b,c" in place into items; -1 when there are more than max. */
static int split_list(char *s, char **items, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
        if (*tok) {
            if (n == max)
                return -1;
            items[n++] = tok;
        }
    return n;
}

/* The end of a measurement file o (NULL: none): committed when st is
 * RAP_OK or when something was measured (a later failure keeps those
 * lines), else dropped (the old file stays). Returns st (its message
 * kept), or the commit's failure when st was RAP_OK. */
static rap_status keep_measured(rap_out *o, rap_status st, bool wrote)
{
    if (!o || st == RAP_OK)
        return o ? rap_out_commit(o) : st;
    if (!wrote) {
        rap_out_abort(o);
        return st;
    }
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    rap_out_commit(o);
    return rap_fail(st, "%s", msg);
}

/* Where the parse model goes: --parse-out, else --out with .parse in
 * place of .csv (or after it); "" with neither (stdout: the model is
 * only logged). */
static void parse_model_path(const cli_settings *s, char *out, size_t n)
{
    if (s->parse_out[0] || !s->out[0]) {
        snprintf(out, n, "%s", s->parse_out);
        return;
    }
    size_t l = strlen(s->out);
    if (l > 4 && !strcmp(s->out + l - 4, ".csv"))
        snprintf(out, n, "%.*s.parse", (int)(l - 4), s->out);
    else
        snprintf(out, n, "%s.parse", s->out);
}

/* The parse kernels timed and their latency model fitted, written to
 * path (logged only when path is ""). */
static rap_status profile_parse(const cli_settings *s, const char *path)
{
    static const int64_t lines[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};
    rap_prof_parse_config pc = {lines, (int)(sizeof lines / sizeof lines[0]), (int)s->reps,
                                (uint64_t)s->seed, s->flush};
    rap_parse_model m;
    RAP_TRY(rap_profile_parse(&pc, &m));
    rap_info("profile kernels: the parse kernels: %.4f ms + %.3g ms a line + %.3g ms a byte "
             "(%d points, relative RMS error %.3f; %.1f bytes a generated line)", m.ms0,
             m.ms_per_line, m.ms_per_byte, m.n_points, m.rel_rms, m.bytes_per_line);
    return path[0] ? rap_parse_model_save(&m, path) : RAP_OK;
}

static int profile_kernels(int argc, char **argv)
{
    cli_settings s;
    cli_parse("profile kernels", CMD_PROF_KERNELS, argc, argv, &s);
    char *names[MAX_LIST], *bs[MAX_LIST];
    int np = split_list(s.plans, names, MAX_LIST), nb = split_list(s.batches, bs, MAX_LIST);
    rap_plan *plans[MAX_LIST] = {0};
    int64_t batches[MAX_LIST];
    rap_status st = RAP_OK;
    if (np < 1 || nb < 1)
        st = rap_fail(RAP_ERR_ARG, "--%s: expected 1 to %d comma-separated items",
                      np < 1 ? "plans" : "batches", MAX_LIST);
    for (int i = 0; i < nb && st == RAP_OK; i++) {
        char *end = NULL;
        batches[i] = strtoll(bs[i], &end, 10);
        if (!end || *end || batches[i] < 2)
            st = rap_fail(RAP_ERR_ARG, "--batches: \"%s\" is not a row count >= 2", bs[i]);
    }
    /* the default --plans are rap's own: found from any directory */
    bool own_plans = !cli_given("plans");
    static char paths[MAX_LIST][RAP_OPT_STR];
    const char *used[MAX_LIST];
    for (int i = 0; i < np && st == RAP_OK; i++) {
        bool shipped = own_plans && strcmp(names[i], "default");
        snprintf(paths[i], sizeof paths[i], "%s", names[i]);
        if (shipped && !cli_shipped_path(names[i], paths[i], sizeof paths[i]))
            st = rap_fail(RAP_ERR_IO, "--plans (default) %s: not found from this directory nor "
                          "beside the rap binary; run from rap's folder or give --plans", names[i]);
        else if (shipped && strcmp(paths[i], names[i]))
            (i == 0 ? rap_info : rap_debug)("--plans (default): rap's shipped plans, %s is %s",
                                            names[i], paths[i]);
        used[i] = paths[i];
        if (st == RAP_OK)
            st = cli_load_plan(paths[i], &plans[i]);
    }
    rap_out *o = NULL;
    if (st == RAP_OK)
        st = rap_out_check_inputs(s.out, used, np);
    if (st == RAP_OK && s.out[0])
        st = rap_out_open(s.out, NULL, &o);
    int64_t n = 0;
    if (st == RAP_OK) {
        rap_prof_kernels_config c = {(const rap_plan *const *)plans, np, s.ilp_time, batches, nb,
                                     (int)s.reps, s.target, (uint64_t)s.seed, s.flush};
        st = rap_profile_kernels(&c, o ? rap_out_file(o) : stdout, &n);
    }
    st = keep_measured(o, st, n > 0);
    char parse_out[RAP_OPT_STR + 8];
    parse_model_path(&s, parse_out, sizeof parse_out);
    if (st == RAP_OK && parse_out[0])
        st = rap_out_check_inputs(parse_out, used, np);
    for (int i = 0; i < np; i++)
        rap_plan_free(plans[i]);
    if (st == RAP_OK)
        st = profile_parse(&s, parse_out);
    if (st != RAP_OK)
        return cli_fail("profile kernels", st);
    if (!s.quiet)
        fprintf(stderr, "rap profile kernels: %lld measurements%s%s%s%s\n", (long long)n,
                s.out[0] ? " -> " : "", s.out, parse_out[0] ? "; the parse model -> " : "",
                parse_out);
    return 0;
}

static int profile_capacity(int argc, char **argv)
{
    cli_settings s;
    cli_parse("profile capacity", CMD_PROF_CAPACITY, argc, argv, &s);
    rap_plan *plan = NULL;
    rap_status st = cli_load_plan(s.plan, &plan);
    rap_prof_capacity_config c;
    memset(&c, 0, sizeof c);
    rap_model_config *m = &c.model;
    rap_model_config_defaults(m);
    if (st == RAP_OK)
        st = cli_parse_widths("mlp-bot", s.mlp_bot, m->bot, RAP_MAX_LAYERS, &m->n_bot);
    if (st == RAP_OK)
        st = cli_parse_widths("mlp-top", s.mlp_top, m->top, RAP_MAX_LAYERS, &m->n_top);
    m->emb_dim = (int)s.emb_dim;
    m->batch = s.batch;
    m->precision = (rap_precision)s.precision;
    m->emb_dtype = (rap_emb_dtype)s.emb_dtype;
    m->optimizer = (rap_optimizer)s.optimizer;
    m->lr = 0.02f; /* the paper preset's (the timing does not depend on it) */
    m->seed = (uint64_t)s.seed;
    if (st == RAP_OK) /* the shape of the model the plan trains */
        st = rap_pipeline_model_shape(plan, m);
    if (st == RAP_OK)
        st = rap_model_config_check(m);
    rap_out *cur = NULL;
    const char *in = s.plan;
    if (st == RAP_OK)
        st = rap_out_check_inputs(s.out, &in, 1);
    if (st == RAP_OK)
        st = rap_out_check_inputs(s.currency, &in, 1);
    if (st == RAP_OK && s.currency[0])
        st = rap_out_open(s.currency, NULL, &cur);
    rap_capacity cap;
    if (st == RAP_OK) {
        c.plan = plan;
        c.tolerance = s.tolerance;
        c.reps = (int)s.reps;
        c.rounds = (int)s.rounds;
        c.seed = (uint64_t)s.seed;
        c.currency_csv = cur ? rap_out_file(cur) : NULL;
        c.currency_phase = s.currency_phase;
        c.cuda_graph = s.cuda_graph;
        st = rap_profile_capacity(&c, &cap);
    }
    st = keep_measured(cur, st, cur && ftell(rap_out_file(cur)) > 0);
    if (st == RAP_OK)
        st = s.out[0] ? rap_capacity_save(&cap, s.out) : rap_capacity_write(&cap, stdout);
    rap_plan_free(plan);
    if (st != RAP_OK)
        return cli_fail("profile capacity", st);
    if (!s.quiet && s.out[0])
        fprintf(stderr, "rap profile capacity: -> %s\n", s.out);
    return 0;
}

int cmd_profile(int argc, char **argv)
{
    bool help = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"));
    if (argc >= 1 && !strcmp(argv[0], "kernels"))
        return profile_kernels(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "capacity"))
        return profile_capacity(argc - 1, argv + 1);
    fprintf(help ? stdout : stderr,
            "usage: rap profile kernels [options]    measure fused kernel slices (CSV)\n"
            "       rap profile capacity [options]   measure the training windows' leftover capacity\n"
            "       (rap profile kernels --help, rap profile capacity --help list the options)\n");
    return help ? 0 : 2;
}
