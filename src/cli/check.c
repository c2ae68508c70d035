/* check.c -- the rap command's checks before the work: outputs can be
 * written, inputs can be read, found before the first row is read rather
 * than after a run's work is done. */
#include "cli/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory part of path into dir (n bytes): "." for a bare name. */
static void dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

rap_status cli_check_output(const char *opt, const char *path)
{
    if (!path[0] || !strcmp(path, "-"))
        return RAP_OK;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return rap_fail(RAP_ERR_IO, "--%s %s: is a directory (give a file name)", opt, path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a device or fifo is written through, not replaced; not opened
         * here (a fifo's reader would see the probe's close as its end) */
        if (access(path, W_OK) != 0)
            return rap_fail(RAP_ERR_IO, "--%s %s: cannot write: %s", opt, path, strerror(errno));
        return RAP_OK;
    }
    char dir[RAP_OPT_STR], probe[RAP_OPT_STR + 64];
    dir_of(path, dir, sizeof dir);
    snprintf(probe, sizeof probe, "%s/.rap-probe-%d-XXXXXX", dir, (int)getpid());
    int fd = mkstemp(probe);
    if (fd < 0)
        return rap_fail(RAP_ERR_IO, "--%s %s: cannot create a file in %s: %s (checked before "
                        "any work)", opt, path, dir, strerror(errno));
    close(fd);
    if (unlink(probe) != 0)
        return rap_fail(RAP_ERR_IO, "--%s %s: cannot remove the probe file %s: %s", opt, path,
                        probe, strerror(errno));
    return RAP_OK;
}

rap_status cli_check_input(const char *opt, const char *path)
{
    if (!path[0] || !strcmp(path, "-"))
        return RAP_OK;
    struct stat st;
    if (stat(path, &st) != 0)
        return rap_fail(RAP_ERR_IO, "--%s %s: %s (checked before any work)", opt, path,
                        strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return rap_fail(RAP_ERR_IO, "--%s %s: cannot list the directory: %s", opt, path,
                            strerror(errno));
        closedir(d);
        return RAP_OK;
    }
    if (!S_ISREG(st.st_mode)) { /* a fifo or device: opening it would take its writer's data */
        if (access(path, R_OK) != 0)
            return rap_fail(RAP_ERR_IO, "--%s %s: cannot read: %s (checked before any work)", opt,
                            path, strerror(errno));
        return RAP_OK;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return rap_fail(RAP_ERR_IO, "--%s %s: cannot read: %s (checked before any work)", opt,
                        path, strerror(errno));
    close(fd);
    return RAP_OK;
}

bool cli_shipped_path(const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s", rel);
    if (rel[0] == '/' || access(rel, R_OK) == 0)
        return true;
    char exe[RAP_OPT_STR];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = 0; /* the binary's folder, then its parent (build/rap: the repository) */
    char cand[2 * RAP_OPT_STR];
    for (int up = 0; up < 2; up++) {
        snprintf(cand, sizeof cand, "%s%s/%s", exe, up ? "/.." : "", rel);
        if (access(cand, R_OK) == 0) {
            char *real = realpath(cand, NULL);
            snprintf(out, n, "%s", real ? real : cand);
            free(real);
            return true;
        }
    }
    return false;
}
