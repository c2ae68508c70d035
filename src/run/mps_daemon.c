/* mps_daemon.c -- control of a private MPS daemon for the mps mode
 * (mps.h, docs/MPS.md): nvidia-cuda-mps-control started with its own pipe
 * and log directories, a guardian process that stops it when this process
 * ends in any way, and how the two processes will share the GPU. */
#include "run/mps_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock;
    bool started;
    bool atexit_done;
    pid_t owner;              /* the process that started it */
    char control[RAP_MPS_PATH];
    char pipe_dir[RAP_MPS_PATH];
    char log_dir[RAP_MPS_PATH];
    char *old_pipe, *old_log; /* environment before start (NULL: unset) */
    bool had_pipe, had_log;
    int guard_fd;             /* write end of the guardian's stdin */
    pid_t guard_pid;
} g_mps = {.lock = PTHREAD_MUTEX_INITIALIZER, .guard_fd = -1};

#define ENV_PIPE "CUDA_MPS_PIPE_DIRECTORY"
#define ENV_LOG "CUDA_MPS_LOG_DIRECTORY"

/* The control program: $RAP_MPS_CONTROL, else nvidia-cuda-mps-control on
 * PATH. */
static rap_status find_control(char *out, size_t n)
{
    const char *over = getenv("RAP_MPS_CONTROL");
    if (over && over[0]) {
        if (access(over, X_OK) != 0)
            return rap_fail(RAP_ERR_IO,
                            "--mps-start: RAP_MPS_CONTROL=%s is not an executable program (%s)",
                            over, strerror(errno));
        snprintf(out, n, "%s", over);
        return RAP_OK;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path && path[0] ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/nvidia-cuda-mps-control", d[0] ? d : ".");
        if (access(out, X_OK) == 0)
            return RAP_OK;
    }
    out[0] = 0;
    return rap_fail(RAP_ERR_IO,
                    "--mps-start: nvidia-cuda-mps-control was not found on PATH (%s): cannot "
                    "start an MPS daemon (run without --mps-start to time-share the GPU)",
                    path ? path : "unset");
}

static void restore_env(void)
{
    if (g_mps.had_pipe)
        setenv(ENV_PIPE, g_mps.old_pipe, 1);
    else
        unsetenv(ENV_PIPE);
    if (g_mps.had_log)
        setenv(ENV_LOG, g_mps.old_log, 1);
    else
        unsetenv(ENV_LOG);
    free(g_mps.old_pipe);
    free(g_mps.old_log);
    g_mps.old_pipe = g_mps.old_log = NULL;
    g_mps.had_pipe = g_mps.had_log = false;
}

static void atexit_stop(void) { rap_mps_daemon_stop(); }

/* The guardian: a shell holding the read end of a pipe as stdin. When this
 * process ends in any way the pipe reaches its end and the shell stops the
 * daemon and removes the directories; rap_mps_daemon_stop writes "done"
 * first, and the shell just exits. */
static void start_guardian(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        rap_warn("mps: no guardian for the MPS daemon (pipe: %s): it is stopped only on a "
                 "normal exit", strerror(errno));
        return;
    }
    static const char script[] =
        "read r; [ \"$r\" = done ] && exit 0; echo quit | \"$1\"; rm -rf \"$2\" \"$3\"";
    char *argv[] = {"/bin/sh", "-c", (char *)script, "rap-mps-guardian", g_mps.control,
                    g_mps.pipe_dir, g_mps.log_dir, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        rap_warn("mps: no guardian for the MPS daemon (fork: %s)", strerror(errno));
        return;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        int devnull = open("/dev/null", O_WRONLY);
        if (dup2(p[0], 0) < 0 || devnull < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
            _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[0]);
    g_mps.guard_fd = p[1];
    g_mps.guard_pid = pid;
}

rap_status rap_mps_daemon_start(void)
{
    pthread_mutex_lock(&g_mps.lock);
    if (g_mps.started && g_mps.owner == getpid()) {
        pthread_mutex_unlock(&g_mps.lock);
        return RAP_OK;
    }
    char control[RAP_MPS_PATH];
    rap_status st = find_control(control, sizeof control);
    if (st != RAP_OK) {
        pthread_mutex_unlock(&g_mps.lock);
        return st;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0])
        tmp = "/tmp";
    snprintf(g_mps.control, sizeof g_mps.control, "%s", control);
    snprintf(g_mps.pipe_dir, sizeof g_mps.pipe_dir, "%s/rap-mps-pipe-XXXXXX", tmp);
    snprintf(g_mps.log_dir, sizeof g_mps.log_dir, "%s/rap-mps-log-XXXXXX", tmp);
    if (!mkdtemp(g_mps.pipe_dir)) {
        st = rap_fail(RAP_ERR_IO, "--mps-start: cannot make %s: %s", g_mps.pipe_dir,
                      strerror(errno));
        g_mps.pipe_dir[0] = g_mps.log_dir[0] = 0;
        pthread_mutex_unlock(&g_mps.lock);
        return st;
    }
    if (!mkdtemp(g_mps.log_dir)) {
        st = rap_fail(RAP_ERR_IO, "--mps-start: cannot make %s: %s", g_mps.log_dir,
                      strerror(errno));
        rap_mps_remove_tree(g_mps.pipe_dir);
        g_mps.pipe_dir[0] = g_mps.log_dir[0] = 0;
        pthread_mutex_unlock(&g_mps.lock);
        return st;
    }
    const char *op = getenv(ENV_PIPE), *ol = getenv(ENV_LOG);
    g_mps.had_pipe = op != NULL;
    g_mps.had_log = ol != NULL;
    g_mps.old_pipe = op ? strdup(op) : NULL;
    g_mps.old_log = ol ? strdup(ol) : NULL;
    setenv(ENV_PIPE, g_mps.pipe_dir, 1);
    setenv(ENV_LOG, g_mps.log_dir, 1);

    char out_path[RAP_MPS_PATH + 32];
    snprintf(out_path, sizeof out_path, "%s/rap-start.out", g_mps.log_dir);
    char *argv[] = {g_mps.control, "-d", NULL};
    int status = rap_mps_run_prog(argv, NULL, out_path, 30.0);
    if (status != 0) {
        char what[128], said[512] = "";
        if (status < 0)
            snprintf(what, sizeof what, "could not be run (%s)", strerror(errno));
        else
            rap_mps_describe_status(status, what, sizeof what);
        FILE *f = fopen(out_path, "r");
        if (f) {
            if (!fgets(said, sizeof said, f))
                said[0] = 0;
            said[strcspn(said, "\n")] = 0;
            fclose(f);
        }
        st = rap_fail(RAP_ERR_IO, "--mps-start: `%s -d` %s%s%s: no MPS daemon started",
                      g_mps.control, what, said[0] ? ": " : "", said);
        rap_mps_remove_tree(g_mps.pipe_dir);
        rap_mps_remove_tree(g_mps.log_dir);
        g_mps.pipe_dir[0] = g_mps.log_dir[0] = 0;
        restore_env();
        pthread_mutex_unlock(&g_mps.lock);
        return st;
    }
    g_mps.started = true;
    g_mps.owner = getpid();
    start_guardian();
    if (!g_mps.atexit_done) {
        atexit(atexit_stop);
        g_mps.atexit_done = true;
    }
    rap_info("mps: MPS control daemon started (%s=%s, %s=%s)", ENV_PIPE, g_mps.pipe_dir, ENV_LOG,
             g_mps.log_dir);
    pthread_mutex_unlock(&g_mps.lock);
    return RAP_OK;
}

void rap_mps_daemon_stop(void)
{
    pthread_mutex_lock(&g_mps.lock);
    if (!g_mps.started || g_mps.owner != getpid()) {
        pthread_mutex_unlock(&g_mps.lock);
        return;
    }
    char *argv[] = {g_mps.control, NULL};
    int status = rap_mps_run_prog(argv, "quit\n", NULL, 10.0);
    if (status != 0 && g_mps.guard_fd >= 0) {
        /* the guardian holds on: when this process ends it quits again and
         * removes the directories (the pipe directory is needed for that) */
        char what[128];
        if (status < 0)
            snprintf(what, sizeof what, "could not be run (%s)", strerror(errno));
        else
            rap_mps_describe_status(status, what, sizeof what);
        rap_warn("mps: `echo quit | %s` %s; retried when this process ends", g_mps.control,
                 what);
    } else {
        if (status != 0)
            rap_warn("mps: `echo quit | %s` failed (wait status 0x%x)", g_mps.control, status);
        rap_mps_remove_tree(g_mps.pipe_dir);
        rap_mps_remove_tree(g_mps.log_dir);
        if (g_mps.guard_fd >= 0) {
            (void)!write(g_mps.guard_fd, "done\n", 5);
            close(g_mps.guard_fd);
            g_mps.guard_fd = -1;
            int gs;
            if (!rap_mps_wait_for(g_mps.guard_pid, 5.0, &gs)) {
                kill(g_mps.guard_pid, SIGKILL);
                waitpid(g_mps.guard_pid, &gs, 0);
            }
            g_mps.guard_pid = 0;
        }
        rap_info("mps: MPS control daemon stopped (%s removed)", g_mps.pipe_dir);
    }
    restore_env();
    g_mps.pipe_dir[0] = g_mps.log_dir[0] = 0;
    g_mps.started = false;
    pthread_mutex_unlock(&g_mps.lock);
}

bool rap_mps_daemon_started(void)
{
    pthread_mutex_lock(&g_mps.lock);
    bool s = g_mps.started && g_mps.owner == getpid();
    pthread_mutex_unlock(&g_mps.lock);
    return s;
}

const char *rap_mps_describe(char *buf, size_t n)
{
    if (rap_mps_daemon_started()) {
        snprintf(buf, n, "MPS daemon started by rap (%s=%s): the trainer and the "
                         "preprocessing server are its clients", ENV_PIPE, getenv(ENV_PIPE));
        return buf;
    }
    const char *dir = getenv(ENV_PIPE);
    if (!dir || !dir[0])
        dir = "/tmp/nvidia-mps";
    char ctl[RAP_MPS_PATH + 16];
    snprintf(ctl, sizeof ctl, "%s/control", dir);
    struct stat sb;
    if (stat(ctl, &sb) == 0)
        snprintf(buf, n, "an MPS daemon already running (control pipe %s), not started by rap: "
                         "both processes are its clients", ctl);
    else
        snprintf(buf, n, "no MPS daemon (none started by rap, no %s): the trainer and the "
                         "preprocessing server time-share the GPU", ctl);
    return buf;
}
