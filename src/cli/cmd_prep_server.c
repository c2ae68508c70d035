/* cmd_prep_server.c -- `rap prep-server --fd N`: the preprocessing process
 * of the mps mode (docs/MPS.md). Not for people: the trainer's
 * rap_mps_client_create starts it with one end of a socketpair as fd N and
 * talks to it in the protocol of src/run/mps.h. It reads raw rows, runs the
 * plan on the GPU and writes model-ready batches into the trainer's slots
 * (CUDA IPC). It ends at the end of the data or when the trainer hangs up;
 * SIGTERM stops it; SIGINT is the trainer's business (it is ignored here:
 * the trainer stops us through the socket). Exit status: 0 when the
 * trainer was served, was told of an error (it reports it) or hung up, at
 * any point; 1 when nothing could be told (broken socket, protocol
 * violation); 2 when not started as `prep-server --fd N`. */
#include "cli/cli.h"
#include "core/core.h"
#include "run/mps.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_sigterm(int sig)
{
    (void)sig;
    rap_mps_server_stop();
}

int cmd_prep_server(int argc, char **argv)
{
    long fd = -1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--fd") && i + 1 < argc) {
            char *end = NULL;
            fd = strtol(argv[++i], &end, 10);
            if (!end || *end || fd < 0 || fd > 1 << 20)
                fd = -1;
        } else {
            fd = -1;
            break;
        }
    }
    if (fd < 0) {
        fprintf(stderr, "rap prep-server: internal subcommand of the mps preprocessing mode, "
                        "started by the trainer as `rap prep-server --fd N`\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    rap_status st = rap_mps_server_run((int)fd, cli_load_plan);
    if (st != RAP_OK) {
        fprintf(stderr, "rap prep-server: %s\n", rap_last_error());
        return 1;
    }
    return 0;
}
