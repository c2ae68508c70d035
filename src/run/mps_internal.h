/*
 * mps_internal.h -- what the mps mode's files share (mps.h is the public
 * header):
 *   mps_proto.c   the message codec, send/receive, the slot layout
 *   mps_proc.c    child processes: wait, stop, describe, run a program
 *   mps_daemon.c  the private MPS control daemon (--mps-start)
 *   mps_client.c  the trainer's side: slots, events, the server process
 *   mps_server.c  the body of `rap prep-server`
 * Nothing outside src/run/mps_*.c includes it.
 */
#ifndef RAP_RUN_MPS_INTERNAL_H
#define RAP_RUN_MPS_INTERNAL_H

#include "core/core.h"
#include "run/mps.h"

#include <signal.h>
#include <sys/types.h>

/* Set in the server process by SIGTERM or the trainer's hang-up
 * (mps_server.c); a receive interrupted by a signal then ends instead of
 * being retried (mps_proto.c). */
extern volatile sig_atomic_t rap_mps_srv_stop;

/* Waits up to timeout_s for child pid to end. Returns true (and *status)
 * when it was reaped (or is not a child). */
bool rap_mps_wait_for(pid_t pid, double timeout_s, int *status);
/* Reaps child pid: timeout, SIGTERM, timeout, SIGKILL. Returns its wait
 * status. */
int rap_mps_stop_child(pid_t pid, double timeout_s);
/* "exited with status 1", "killed by signal 9 (Killed)", ... into buf. */
void rap_mps_describe_status(int status, char *buf, size_t n);
/* In a forked child whose exec failed: says so on stderr ("rap: cannot
 * <what> <path>: <errno's text>") with async-signal-safe calls only, and
 * exits with 127. */
void rap_mps_child_fail(const char *what, const char *path);
/* Runs argv[0] (a path) with stdin from `input` (NULL: /dev/null) and
 * stdout+stderr to out_path (NULL: /dev/null); waits up to timeout_s,
 * then kills it. Returns the wait status, or -1 if it could not start. */
int rap_mps_run_prog(char *const argv[], const char *input, const char *out_path,
                     double timeout_s);
/* Removes dir and everything under it (NULL or "" : nothing). */
void rap_mps_remove_tree(const char *dir);

#endif /* RAP_RUN_MPS_INTERNAL_H */
