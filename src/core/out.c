/* out.c -- the one way rap writes a file (out.h, docs/FILES.md). */
#include "core/out.h"

#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The part of NAME that goes into ".NAME.lock" and ".NAME.tmp.<pid>.<hex>",
 * so that both stay within NAME_MAX (255) for any NAME. */
#define NAME_KEEP 200
#define MAX_LINKS 40

typedef enum { OUT_STDOUT, OUT_DIRECT, OUT_TEMP, OUT_STREAM } out_kind;

struct rap_out_lock {
    int fd;                 /* -1: no lock (a non-regular target) */
    char target[PATH_MAX];  /* symbolic links resolved */
    char lock[PATH_MAX];    /* the lock file */
};

struct rap_out {
    out_kind kind;
    FILE *f;
    char path[PATH_MAX];    /* as given: messages name it */
    char target[PATH_MAX];  /* symbolic links resolved: what is written */
    char tmp[PATH_MAX];     /* OUT_TEMP: the temporary */
    char dir[PATH_MAX];     /* the target's directory */
    rap_out_lock *lock;     /* NULL for stdout and non-regular targets */
    bool own_lock;
};

/* ------------------------------------------------------------- names */

/* dir and base of path ("." for a bare name). False when path names a
 * directory by its form ("", "x/", "/") or is too long. */
static bool split_path(const char *path, char *dir, size_t dn, char *base, size_t bn)
{
    const char *s = strrchr(path, '/');
    const char *b = s ? s + 1 : path;
    if (!*b || !strcmp(b, ".") || !strcmp(b, "..") || strlen(b) >= bn)
        return false;
    snprintf(base, bn, "%s", b);
    if (!s)
        snprintf(dir, dn, ".");
    else if (s == path)
        snprintf(dir, dn, "/");
    else if ((size_t)(s - path) >= dn)
        return false;
    else
        snprintf(dir, dn, "%.*s", (int)(s - path), path);
    return true;
}

/* The target of path: symbolic links followed (also dangling ones, whose
 * target the writer then creates), into out (PATH_MAX bytes). */
static rap_status resolve(const char *path, char *out)
{
    if (strlen(path) >= PATH_MAX)
        return rap_fail(RAP_ERR_ARG, "%.200s...: path too long", path);
    snprintf(out, PATH_MAX, "%s", path);
    for (int hop = 0;; hop++) {
        struct stat st;
        if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode))
            return RAP_OK; /* absent (the open says why, if it matters) or not a link */
        if (hop == MAX_LINKS)
            return rap_fail(RAP_ERR_IO, "%s: too many levels of symbolic links", path);
        char link[PATH_MAX], next[2 * PATH_MAX];
        ssize_t k = readlink(out, link, sizeof link - 1);
        if (k < 0)
            return rap_fail(RAP_ERR_IO, "%s: cannot read the symbolic link %s: %s", path, out,
                            strerror(errno));
        link[k] = 0;
        const char *s = strrchr(out, '/');
        if (link[0] == '/' || !s)
            snprintf(next, sizeof next, "%s", link);
        else
            snprintf(next, sizeof next, "%.*s/%s", (int)(s - out), out, link);
        if (strlen(next) >= PATH_MAX)
            return rap_fail(RAP_ERR_ARG, "%s: the target of its symbolic link is too long", path);
        snprintf(out, PATH_MAX, "%s", next);
    }
}

/* 64 random bits for a temporary's name: getrandom, else the clock, the
 * pid and a counter mixed (a name need only be unlikely to be taken:
 * O_EXCL decides). */
static uint64_t random64(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 ((uint64_t)getpid() << 40) ^ counter++;
    return rap_splitmix64(&s);
}

/* ------------------------------------------------------------- stale temporaries */

/* The start of process pid in seconds since the epoch, from /proc; -1
 * when unknown. */
static double proc_start(long pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!s)
        return -1;
    unsigned long long start = 0;
    int field = 2;
    for (char *t = s + 1; *t && field < 22; t++)
        if (*t == ' ' && ++field == 22 && sscanf(t + 1, "%llu", &start) != 1)
            return -1;
    if (field != 22)
        return -1;
    long long btime = -1;
    f = fopen("/proc/stat", "r");
    while (f && fgets(buf, sizeof buf, f))
        if (sscanf(buf, "btime %lld", &btime) == 1)
            break;
    if (f)
        fclose(f);
    long tck = sysconf(_SC_CLK_TCK);
    if (btime < 0 || tck <= 0)
        return -1;
    return (double)btime + (double)start / (double)tck;
}

/* True when the temporary (st) of process pid can no longer be written:
 * that process is this one (which holds the lock, so it is not writing
 * it), is gone, or is a later process that reuses the pid (started after
 * the file was last written). A process whose start is unknown counts as
 * its writer. */
static bool is_stale(long pid, const struct stat *st)
{
    if (pid == (long)getpid())
        return true;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    double start = proc_start(pid);
    return start >= 0 && start > (double)st->st_mtime + 1;
}

/* Removes the stale temporaries ".BASE.tmp.<pid>.<16 hex>" of dir. Only
 * called with the target's lock held: no other rap writer of this target
 * is running, so a temporary whose writer is gone is garbage. */
static void remove_stale(const char *dir, const char *base)
{
    char prefix[NAME_KEEP + 16];
    int pl = snprintf(prefix, sizeof prefix, ".%.*s.tmp.", NAME_KEEP, base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, (size_t)pl) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (pid <= 0 || *end != '.' || strlen(end + 1) != 16 ||
            strspn(end + 1, "0123456789abcdef") != 16)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            !is_stale(pid, &st))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            rap_warn("%s/%s: removed, a temporary left by a writer that did not finish (pid %ld)",
                     dir, e->d_name, pid);
    }
    closedir(d);
}

/* ------------------------------------------------------------- the lock */

/* "PATH: another writer holds it (pid N)" from the lock file fd. */
static rap_status busy(const char *path, int fd)
{
    char b[32];
    ssize_t k = pread(fd, b, sizeof b - 1, 0);
    b[k > 0 ? k : 0] = 0;
    long pid = strtol(b, NULL, 10);
    if (pid > 0)
        return rap_fail(RAP_ERR_IO, "%s: another writer holds it (pid %ld)", path, pid);
    return rap_fail(RAP_ERR_IO, "%s: another writer holds it", path);
}

/* Takes the lock of target (resolved; path for messages) into l. The lock
 * file is created if needed; after flock the file held must still be the
 * one at its path (the previous holder removes it at release), else the
 * lock is taken again on the new one. */
static rap_status lock_take(const char *path, const char *dir, const char *base,
                            rap_out_lock *l)
{
    snprintf(l->lock, sizeof l->lock, "%s/.%.*s.lock", dir, NAME_KEEP, base);
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(l->lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0) {
            int e = errno;
            struct stat st;
            if (e == ENOENT || e == ENOTDIR || stat(dir, &st) != 0)
                return rap_fail(RAP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
            return rap_fail(RAP_ERR_IO, "%s: cannot create its lock file %s: %s", path, l->lock,
                            strerror(e));
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            rap_status st = e == EWOULDBLOCK
                                ? busy(path, fd)
                                : rap_fail(RAP_ERR_IO, "%s: cannot lock %s: %s", path, l->lock,
                                           strerror(e));
            close(fd);
            return st;
        }
        struct stat held, now;
        if (fstat(fd, &held) == 0 && stat(l->lock, &now) == 0 && held.st_dev == now.st_dev &&
            held.st_ino == now.st_ino) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
                rap_debug("%s: cannot write the pid into %s", path, l->lock);
            l->fd = fd;
            return RAP_OK;
        }
        close(fd); /* removed by the holder we waited for: lock the new one */
    }
    return rap_fail(RAP_ERR_IO, "%s: cannot take the lock %s (it keeps being replaced)", path,
                    l->lock);
}

void rap_out_lock_release(rap_out_lock *l)
{
    if (!l)
        return;
    if (l->fd >= 0) {
        unlink(l->lock); /* while held: whoever opened it before sees it replaced and retries */
        close(l->fd);
    }
    rap_free(l);
}

/* What path is: resolved into target, its dir and base; *regular false for
 * an existing non-regular file (written through). */
static rap_status classify(const char *path, char *target, char *dir, char *base,
                           bool *regular)
{
    if (!path || !path[0])
        return rap_fail(RAP_ERR_ARG, "no output path given");
    RAP_TRY(resolve(path, target));
    struct stat st;
    bool exists = stat(target, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return rap_fail(RAP_ERR_IO, "%s: is a directory", path);
    *regular = !exists || S_ISREG(st.st_mode);
    if (*regular && !split_path(target, dir, PATH_MAX, base, NAME_MAX + 1))
        return rap_fail(RAP_ERR_IO, "%s: is a directory or too long a name", path);
    return RAP_OK;
}

rap_status rap_out_lock_take(const char *path, rap_out_lock **out)
{
    *out = NULL;
    rap_out_lock *l = rap_calloc(sizeof *l, "output lock");
    if (!l)
        return RAP_ERR_NOMEM;
    l->fd = -1;
    char dir[PATH_MAX], base[NAME_MAX + 1];
    bool regular = false;
    rap_status st = classify(path, l->target, dir, base, &regular);
    if (st == RAP_OK && regular)
        st = lock_take(path, dir, base, l);
    if (st != RAP_OK) {
        rap_free(l);
        return st;
    }
    *out = l;
    return RAP_OK;
}

/* ------------------------------------------------------------- open, commit */

/* Creates the temporary of o (O_EXCL: a fresh random name until one is
 * free); its fd or -1 with the message set. */
static int create_tmp(rap_out *o, const char *base)
{
    int e = EEXIST;
    for (int tries = 0; tries < 100 && e == EEXIST; tries++) {
        snprintf(o->tmp, sizeof o->tmp, "%s/.%.*s.tmp.%ld.%016llx", o->dir, NAME_KEEP, base,
                 (long)getpid(), (unsigned long long)random64());
        int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0)
            return fd;
        e = errno;
    }
    rap_fail(RAP_ERR_IO, "%s: cannot create %s: %s", o->path, o->tmp, strerror(e));
    o->tmp[0] = 0; /* not ours: never removed */
    return -1;
}

/* The fd of o's bytes, opened as o->kind says; -1 with the message set. */
static int open_kind(rap_out *o, const char *base)
{
    int fd = -1;
    if (o->kind == OUT_TEMP)
        return create_tmp(o, base);
    if (o->kind == OUT_STREAM) /* the lock is held: truncating is ours to do */
        fd = open(o->target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    else /* a device, a fifo (this waits for its reader), a terminal */
        fd = open(o->target, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        rap_fail(RAP_ERR_IO, "%s: cannot %s: %s", o->path,
                 o->kind == OUT_STREAM ? "create" : "open for writing", strerror(errno));
    return fd;
}

rap_status rap_out_open(const char *path, const rap_out_opts *opts, rap_out **out)
{
    *out = NULL;
    rap_out_opts none = {0};
    if (!opts)
        opts = &none;
    rap_out *o = rap_calloc(sizeof *o, "output file");
    if (!o)
        return RAP_ERR_NOMEM;
    snprintf(o->path, sizeof o->path, "%s", path ? path : "");
    if (opts->dash_is_stdout && path && !strcmp(path, "-")) {
        o->kind = OUT_STDOUT;
        o->f = stdout;
        *out = o;
        return RAP_OK;
    }
    char base[NAME_MAX + 1];
    bool regular = false;
    rap_status st = classify(path, o->target, o->dir, base, &regular);
    o->kind = !regular ? OUT_DIRECT : opts->stream ? OUT_STREAM : OUT_TEMP;
    if (st == RAP_OK && regular && opts->held) {
        if (opts->held->fd < 0 || strcmp(opts->held->target, o->target) != 0)
            st = rap_fail(RAP_ERR_INTERNAL, "%s: the lock held is that of %s", path,
                          opts->held->target);
        o->lock = opts->held;
    } else if (st == RAP_OK && regular) {
        o->lock = rap_calloc(sizeof *o->lock, "output lock");
        st = o->lock ? RAP_OK : RAP_ERR_NOMEM;
        o->own_lock = o->lock != NULL;
        if (o->lock) {
            o->lock->fd = -1;
            snprintf(o->lock->target, sizeof o->lock->target, "%s", o->target);
        }
        if (st == RAP_OK)
            st = lock_take(path, o->dir, base, o->lock);
    }
    if (st == RAP_OK && regular)
        remove_stale(o->dir, base);
    int fd = st == RAP_OK ? open_kind(o, base) : -1;
    if (st == RAP_OK && fd < 0)
        st = RAP_ERR_IO;
    if (st == RAP_OK && !(o->f = fdopen(fd, "wb"))) {
        st = rap_fail(RAP_ERR_IO, "%s: fdopen: %s", path, strerror(errno));
        close(fd);
    }
    if (st != RAP_OK) {
        o->f = NULL;
        rap_out_abort(o);
        return st;
    }
    *out = o;
    return RAP_OK;
}

FILE *rap_out_file(rap_out *o) { return o->f; }

int rap_out_fd(rap_out *o) { return fileno(o->f); }

bool rap_out_seekable(const rap_out *o) { return o->kind == OUT_TEMP || o->kind == OUT_STREAM; }

/* Flush, fsync (regular files) and close of o->f, checked. */
static rap_status finish(rap_out *o)
{
    int e = 0;
    if (fflush(o->f) != 0)
        e = errno ? errno : EIO;
    else if (ferror(o->f))
        e = EIO; /* an earlier write failed; its errno is gone */
    if (!e && o->kind != OUT_STDOUT && o->kind != OUT_DIRECT && fsync(fileno(o->f)) != 0)
        e = errno;
    if (o->kind == OUT_STDOUT) {
        o->f = NULL;
    } else {
        if (fclose(o->f) != 0 && !e)
            e = errno ? errno : EIO;
        o->f = NULL;
    }
    if (e)
        return rap_fail(RAP_ERR_IO, "%s: write failed: %s", o->path, strerror(e));
    return RAP_OK;
}

/* fsync of the directory, so that the rename survives a crash. Best
 * effort: the file is in place and whole either way (a crash before the
 * directory reaches the disk leaves the old file, also whole). */
static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        rap_debug("%s: fsync of the directory failed: %s", dir, strerror(errno));
    close(fd);
}

rap_status rap_out_commit(rap_out *o)
{
    if (!o)
        return rap_fail(RAP_ERR_INTERNAL, "rap_out_commit: no file");
    rap_status st = finish(o);
    if (st == RAP_OK && o->kind == OUT_TEMP) {
        if (rename(o->tmp, o->target) != 0)
            st = rap_fail(RAP_ERR_IO, "%s: cannot rename %s to it: %s", o->path, o->tmp,
                          strerror(errno));
        else
            o->tmp[0] = 0;
        if (st == RAP_OK)
            fsync_dir(o->dir);
    }
    rap_out_abort(o); /* removes the temporary when it is still there */
    return st;
}

void rap_out_abort(rap_out *o)
{
    if (!o)
        return;
    if (o->f && o->kind != OUT_STDOUT)
        fclose(o->f);
    else if (o->f)
        fflush(o->f);
    if (o->kind == OUT_TEMP && o->tmp[0])
        unlink(o->tmp);
    if (o->own_lock)
        rap_out_lock_release(o->lock);
    rap_free(o);
}

rap_status rap_out_close(rap_out *o, rap_status st)
{
    if (st == RAP_OK)
        return rap_out_commit(o);
    rap_out_abort(o);
    return st;
}

/* ------------------------------------------------------------- inputs */

/* RAP_ERR_ARG when st (out's) is the file `name` (shown as IN). */
static rap_status same(const char *out, const struct stat *o, const char *in,
                       const struct stat *s)
{
    if (o->st_dev == s->st_dev && o->st_ino == s->st_ino)
        return rap_fail(RAP_ERR_ARG, "%s is the same file as the input %s: refusing to "
                        "overwrite it", out, in);
    return RAP_OK;
}

rap_status rap_out_check_inputs(const char *out, const char *const *inputs, int n)
{
    struct stat os;
    if (!out || !out[0] || !strcmp(out, "-") || stat(out, &os) != 0 || !S_ISREG(os.st_mode))
        return RAP_OK; /* nothing there to overwrite; a device is written through */
    for (int i = 0; i < n; i++) {
        const char *in = inputs[i];
        struct stat s;
        if (!in || !in[0] || !strcmp(in, "-") || stat(in, &s) != 0)
            continue;
        RAP_TRY(same(out, &os, in, &s));
        if (!S_ISDIR(s.st_mode))
            continue;
        DIR *d = opendir(in);
        rap_status st = RAP_OK;
        for (struct dirent *e; d && st == RAP_OK && (e = readdir(d)) != NULL;) {
            struct stat es;
            if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &es, 0) != 0)
                continue;
            if (os.st_dev == es.st_dev && os.st_ino == es.st_ino)
                st = rap_fail(RAP_ERR_ARG, "%s is the same file as the input %s/%s: refusing "
                              "to overwrite it", out, in, e->d_name);
        }
        if (d)
            closedir(d);
        RAP_TRY(st);
    }
    return RAP_OK;
}
