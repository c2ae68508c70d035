/* mps_proc.c -- child processes of the mps mode (mps_internal.h): waiting
 * for, stopping and describing a child, running a program with its input
 * and output redirected (the MPS control program), removing a directory
 * tree. */
#include "run/mps_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Waits up to timeout_s for pid to end. Returns true (and *status) when it
 * was reaped. */
bool rap_mps_wait_for(pid_t pid, double timeout_s, int *status)
{
    double end = rap_now() + timeout_s;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (rap_now() >= end)
            return false;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Reaps pid: timeout, SIGTERM, timeout, SIGKILL. */
int rap_mps_stop_child(pid_t pid, double timeout_s)
{
    int status = 0;
    if (rap_mps_wait_for(pid, timeout_s, &status))
        return status;
    kill(pid, SIGTERM);
    if (rap_mps_wait_for(pid, timeout_s, &status))
        return status;
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

void rap_mps_describe_status(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "ended with wait status 0x%x", status);
}

/* In a forked child: only async-signal-safe calls. */
void rap_mps_child_fail(const char *what, const char *path)
{
    const char *e = strerror(errno);
    (void)!write(2, "rap: cannot ", 12);
    (void)!write(2, what, strlen(what));
    (void)!write(2, " ", 1);
    (void)!write(2, path, strlen(path));
    (void)!write(2, ": ", 2);
    (void)!write(2, e, strlen(e));
    (void)!write(2, "\n", 1);
    _exit(127);
}

/* Runs argv[0] (a path) with stdin from `input` (NULL: /dev/null) and
 * stdout+stderr to out_path (NULL: /dev/null); waits up to timeout_s,
 * then kills it. Returns the wait status, or -1 if it could not start. */
int rap_mps_run_prog(char *const argv[], const char *input, const char *out_path, double timeout_s)
{
    int in[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                   0600);
    if (out < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]);
        close(in[1]);
        close(out);
        return -1;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0); /* Ctrl-C on the terminal is for the trainer */
        if (dup2(in[0], 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
            _exit(127);
        execv(argv[0], argv);
        rap_mps_child_fail("run", argv[0]);
    }
    close(in[0]);
    close(out);
    if (input) {
        size_t n = strlen(input);
        (void)!write(in[1], input, n);
    }
    close(in[1]);
    return rap_mps_stop_child(pid, timeout_s);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void rap_mps_remove_tree(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
