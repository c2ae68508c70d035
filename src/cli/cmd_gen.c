/* cmd_gen.c -- rap gen: write Criteo-shaped TSV (or rows of --schema) from a hidden
 * teacher. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cmd_gen(int argc, char **argv)
{
    cli_settings s;
    cli_parse("gen", CMD_GEN, argc, argv, &s);
    if (!strcmp(s.out, "-") && isatty(STDOUT_FILENO)) {
        fprintf(stderr, "rap gen: give --out FILE (refusing to write rows to a terminal)\n");
        return 2;
    }
    rap_status st = cli_check_output("out", s.out);
    if (st != RAP_OK)
        return cli_fail("gen", st);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = s.rows;
    g.seed = (uint64_t)s.seed;
    g.out = s.out;
    g.threads = (int)s.threads;
    int64_t card[RAP_SCHEMA_MAX_COLS];
    if (s.in_schema) { /* any schema (docs/GENERATOR.md "Any schema") */
        g.schema = s.in_schema;
        g.list_mean = s.list_mean;
        if (rap_opts_given(cli_options, cli_n_options, "cardinalities")) {
            st = rap_gen_cardinalities_n(s.cardinalities, s.in_schema->n_sparse, card);
            g.schema_card = card;
        }
    } else {
        st = rap_gen_cardinalities(s.cardinalities, g.card);
    }
    if (st != RAP_OK)
        return cli_fail("gen", st);
    rap_gen_result r;
    double t0 = rap_now();
    st = rap_gen_write(&g, &r);
    if (st != RAP_OK)
        return cli_fail("gen", st);
    double dt = rap_now() - t0;
    if (s.quiet)
        return 0;
    fprintf(stderr, "rap gen: wrote %lld rows (%.1f MB) to %s in %.2f s, %.1f%% positive\n",
            (long long)r.rows, (double)r.bytes / 1e6, s.out, dt,
            100.0 * (double)r.positives / (double)(r.rows ? r.rows : 1));
    fprintf(stderr, "rap gen: teacher AUC %.4f (the best any model can reach on these rows)\n",
            r.teacher_auc);
    if (s.in_schema && s.in_schema->header)
        fprintf(stderr, "rap gen: the first line is a header naming the columns\n");
    return 0;
}
