/* cmd_gen.c -- rap gen: write Criteo-shaped TSV from a hidden teacher. */
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
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = s.rows;
    g.seed = (uint64_t)s.seed;
    g.out = s.out;
    g.threads = (int)s.threads;
    rap_status st = rap_gen_cardinalities(s.cardinalities, g.card);
    if (st != RAP_OK)
        return cli_fail("gen", st);
    rap_gen_result r;
    double t0 = rap_now();
    st = rap_gen_write(&g, &r);
    if (st != RAP_OK)
        return cli_fail("gen", st);
    double dt = rap_now() - t0;
    fprintf(stderr, "rap gen: wrote %lld rows (%.1f MB) to %s in %.2f s, %.1f%% positive\n",
            (long long)r.rows, (double)r.bytes / 1e6, s.out, dt,
            100.0 * (double)r.positives / (double)(r.rows ? r.rows : 1));
    fprintf(stderr, "rap gen: teacher AUC %.4f (the best any model can reach on these rows)\n",
            r.teacher_auc);
    return 0;
}
