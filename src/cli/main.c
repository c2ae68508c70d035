/* main.c -- the rap command: dispatch to subcommands. */
#include "cli/cli.h"
#include "run/runtime.h"

#include <stdio.h>
#include <string.h>

int cmd_profile(int argc, char **argv); /* cmd_profile.c */

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} g_cmds[] = {
    {"train", cmd_train, "train a DLRM from raw Criteo logs, evaluate it, save checkpoints"},
    {"bench", cmd_bench, "compare the preprocessing modes (" RAP_MODE_NAMES(", ") ") on one model"},
    {"export", cmd_export, "write a checkpoint's model weights alone (safetensors, for PyTorch)"},
    {"prep", cmd_prep, "run a preprocessing plan over Criteo logs (CPU or GPU)"},
    {"gen", cmd_gen, "write Criteo-shaped TSV with a hidden teacher model"},
    {"plan", cmd_plan, "plan fusion and the schedule of preprocessing beside training (writes a schedule)"},
    {"profile", cmd_profile, "profile kernels | capacity: measure kernel latencies and the training windows' leftover capacity on the GPU"},
    {"predictor", cmd_predictor, "predictor train: fit the kernel latency models from measurements (manifest: a bundle's checksums)"},
    /* the mps mode's second process, started by rap itself: not listed */
    {"prep-server", cmd_prep_server, NULL},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: rap COMMAND [options]   (rap COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (g_cmds[i].help)
            fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].help);
    fprintf(f, "\nWith no command, rap runs `rap train` on built-in defaults.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cmd_train(0, argv + 1);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(argv[1], g_cmds[i].name))
            return g_cmds[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "rap: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
