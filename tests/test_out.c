/* test_out.c -- how rap writes files (core/out.h, docs/FILES.md): one
 * writer of a target at a time, never a half-written or mixed file, the
 * old file kept on any error, devices, fifos and links left what they are,
 * stale temporaries removed, an output never one of the inputs. The
 * writers are called as rap calls them (checkpoints, capacity files,
 * schedules) and through the rap binary. */
#include "test.h"

#include "core/core.h"
#include "core/out.h"
#include "plan/capacity.h"
#include "run/checkpoint.h"
#include "sched/schedule.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------- helpers */

static char *slurp(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    for (size_t k; b && (k = fread(b + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) {
        b[len] = 0;
        *n = len;
    }
    return b;
}

static bool put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The lock file core/out.h keeps beside path while it is written. */
static bool lock_file_exists(const char *path)
{
    char l[1100];
    const char *s = strrchr(path, '/');
    snprintf(l, sizeof l, "%.*s/.%s.lock", (int)(s - path), path, s + 1);
    return access(l, F_OK) == 0;
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* A private character device like /dev/null (minor 3) or /dev/full (7)
 * in the scratch directory, so that no test ever writes near the real
 * ones (a writer that renamed over a device would replace it for the
 * whole machine); when nodes cannot be made (not root) the real one,
 * which then cannot be replaced anyway. NULL when neither works. */
static const char *char_device(char *buf, size_t n, const char *name, unsigned minor)
{
    rap_test_path(buf, n, name);
    remove(buf);
    if (mknod(buf, S_IFCHR | 0666, makedev(1, minor)) == 0)
        return buf;
    if (geteuid() == 0)
        return NULL;
    snprintf(buf, n, "/dev/%s", minor == 3 ? "null" : "full");
    return access(buf, W_OK) == 0 ? buf : NULL;
}

static bool is_char_device(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* ------------------------------------------------------------- a checkpoint */

#define CK_T 3    /* tensors */
#define CK_E 4096 /* floats each */

/* A checkpoint of CK_T tensors of CK_E floats, all `value`; the fill of
 * tensor `hook_at` calls hook(arg) first (a writer made to wait there). */
typedef struct {
    float value;
    int hook_at;
    void (*hook)(void *arg);
    void *arg;
} ck_fill;

static rap_status fill_const(void *ctx, int i, void *out)
{
    ck_fill *f = ctx;
    float *buf = out; /* (CK_E) every tensor is F32 */
    if (i == f->hook_at && f->hook)
        f->hook(f->arg);
    for (int j = 0; j < CK_E; j++)
        buf[j] = f->value;
    return RAP_OK;
}

static rap_status ck_write(const char *path, ck_fill *f)
{
    rap_ckpt_tensor t[CK_T];
    memset(t, 0, sizeof t);
    for (int i = 0; i < CK_T; i++) {
        snprintf(t[i].name, sizeof t[i].name, "emb_l.%d.weight", i);
        t[i].ndim = 2;
        t[i].shape[0] = CK_E / 4;
        t[i].shape[1] = 4;
    }
    rap_meta m = {0};
    rap_status st = rap_meta_set(&m, "format", "%s", RAP_CKPT_FORMAT);
    if (st == RAP_OK)
        st = rap_meta_set(&m, "format_version", "%d", RAP_CKPT_VERSION);
    if (st == RAP_OK)
        st = rap_safetensors_write(path, &m, t, CK_T, fill_const, f, true, NULL);
    rap_meta_free(&m);
    return st;
}

static rap_status ck_write_value(const char *path, float v)
{
    ck_fill f = {v, -1, NULL, NULL};
    return ck_write(path, &f);
}

/* path is a whole checkpoint (its CRC verifies) whose every value is v. */
static bool ck_holds(const char *path, float v)
{
    rap_ckpt *c = NULL;
    bool ok = rap_ckpt_open(path, &c) == RAP_OK && rap_ckpt_verify(c) == RAP_OK && c->n == CK_T;
    float *buf = malloc(sizeof(float) * CK_E);
    for (int i = 0; ok && buf && i < CK_T; i++) {
        ok = rap_ckpt_read(c, i, buf) == RAP_OK;
        for (int j = 0; ok && j < CK_E; j++)
            ok = buf[j] == v;
    }
    free(buf);
    rap_ckpt_close(c);
    return ok && buf;
}

/* ------------------------------------------------------------- the module itself */

RAP_TEST(out_commit_abort_and_lock_files)
{
    char p[512], dir[512];
    rap_test_path(p, sizeof p, "out_basic.txt");
    remove(p);
    rap_out *o = NULL;
    REQUIRE_OK(rap_out_open(p, NULL, &o));
    CHECK(access(p, F_OK) != 0);               /* nothing at the target before commit */
    CHECK(rap_test_temporaries(p) == 1 && lock_file_exists(p));
    fputs("first\n", rap_out_file(o));
    REQUIRE_OK(rap_out_commit(o));
    size_t n;
    char *b = slurp(p, &n);
    CHECK(b && !strcmp(b, "first\n"));
    free(b);
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    /* abort: the old file as it was, nothing left beside it */
    REQUIRE_OK(rap_out_open(p, NULL, &o));
    fputs("second\n", rap_out_file(o));
    rap_out_abort(o);
    b = slurp(p, &n);
    CHECK(b && !strcmp(b, "first\n"));
    free(b);
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    /* a directory is refused; a missing folder is named */
    snprintf(dir, sizeof dir, "%s", rap_test_tmpdir());
    CHECK(rap_out_open(dir, NULL, &o) == RAP_ERR_IO && o == NULL);
    CHECK_MSG(strstr(rap_last_error(), "is a directory"), "%s", rap_last_error());
    CHECK(rap_out_open("/nonexistent-rap-dir/x", NULL, &o) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "/nonexistent-rap-dir/x: cannot create"), "%s",
              rap_last_error());
    remove(p);
}

RAP_TEST(out_second_writer_fails_at_open)
{
    char p[512], msg[600];
    rap_test_path(p, sizeof p, "out_lock.txt");
    remove(p);
    rap_out *a = NULL, *b = NULL;
    REQUIRE_OK(rap_out_open(p, NULL, &a));
    CHECK(rap_out_open(p, NULL, &b) == RAP_ERR_IO && b == NULL);
    snprintf(msg, sizeof msg, "%s: another writer holds it (pid %ld)", p, (long)getpid());
    CHECK_MSG(strstr(rap_last_error(), msg), "%s", rap_last_error());
    CHECK(rap_test_temporaries(p) == 1); /* the first writer's, untouched */
    fputs("a\n", rap_out_file(a));
    REQUIRE_OK(rap_out_commit(a));
    REQUIRE_OK(rap_out_open(p, NULL, &b)); /* released at commit */
    rap_out_abort(b);
    /* a lock held across writes: others fail, the holder writes */
    rap_out_lock *l = NULL;
    REQUIRE_OK(rap_out_lock_take(p, &l));
    CHECK(rap_out_open(p, NULL, &b) == RAP_ERR_IO);
    rap_out_opts held = {.held = l};
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(rap_out_open(p, &held, &b));
        fprintf(rap_out_file(b), "held %d\n", k);
        CHECK_OK(rap_out_commit(b));
        CHECK(lock_file_exists(p)); /* still held */
    }
    rap_out_lock_release(l);
    CHECK(!lock_file_exists(p));
    size_t n;
    char *text = slurp(p, &n);
    CHECK(text && !strcmp(text, "held 1\n"));
    free(text);
    remove(p);
}

RAP_TEST(out_check_inputs)
{
    char in[512], sym[512], hard[512], dir[512], inside[512], other[512];
    rap_test_path(in, sizeof in, "ci_in.txt");
    rap_test_path(sym, sizeof sym, "ci_link.txt");
    rap_test_path(hard, sizeof hard, "ci_hard.txt");
    rap_test_path(dir, sizeof dir, "ci_dir");
    rap_test_path(other, sizeof other, "ci_other.txt");
    snprintf(inside, sizeof inside, "%s/day_0", dir);
    remove(sym);
    remove(hard);
    mkdir(dir, 0777);
    REQUIRE(put_file(in, "x\n") && put_file(other, "y\n") && put_file(inside, "z\n"));
    REQUIRE(symlink(in, sym) == 0 && link(in, hard) == 0);
    const char *ins[] = {NULL, "", "-", "/nonexistent-rap", in, dir};
    CHECK(rap_out_check_inputs(in, ins, 6) == RAP_ERR_ARG);
    CHECK_MSG(strstr(rap_last_error(), "is the same file as the input") &&
                  strstr(rap_last_error(), "refusing to overwrite it"), "%s", rap_last_error());
    CHECK(rap_out_check_inputs(sym, ins, 6) == RAP_ERR_ARG); /* links followed */
    CHECK(rap_out_check_inputs(hard, ins, 6) == RAP_ERR_ARG); /* same inode, other name */
    CHECK(rap_out_check_inputs(inside, ins, 6) == RAP_ERR_ARG); /* a file of an input folder */
    CHECK(strstr(rap_last_error(), "day_0"));
    CHECK_OK(rap_out_check_inputs(other, ins, 6));
    CHECK_OK(rap_out_check_inputs("/nonexistent-rap/out", ins, 6)); /* nothing to overwrite */
    CHECK_OK(rap_out_check_inputs("", ins, 6));
    CHECK_OK(rap_out_check_inputs("-", ins, 6));
    remove(sym);
    remove(hard);
    remove(inside);
    rmdir(dir);
}

/* ------------------------------------------------------------- writers at once */

typedef struct {
    const char *path;
    ck_fill fill;
    rap_status st;
    char msg[1024];
    atomic_int *a_in, *b_seen; /* A is in its fill; B reached its fill or ended */
} ck_job;

static void a_waits(void *arg)
{
    ck_job *j = arg;
    atomic_store(j->a_in, 1);
    for (int i = 0; i < 10000 && !atomic_load(j->b_seen); i++)
        usleep(1000);
}

static void b_reached(void *arg) { atomic_store(((ck_job *)arg)->b_seen, 1); }

static void *ck_thread(void *arg)
{
    ck_job *j = arg;
    j->st = ck_write(j->path, &j->fill);
    snprintf(j->msg, sizeof j->msg, "%s", rap_last_error());
    if (j->fill.hook == b_reached)
        atomic_store(j->b_seen, 1);
    return NULL;
}

/* Two threads save one checkpoint at once: A is stopped inside its data
 * until B has started its own save (or given up). B fails at once naming
 * the other writer; A's file is whole, its CRC verifies and it holds A's
 * values. (Before: both wrote PATH.tmp, one printed success and the file
 * held the other's bytes.) */
RAP_TEST(out_checkpoint_writers_at_once)
{
    char p[512];
    rap_test_path(p, sizeof p, "at_once.safetensors");
    remove(p);
    atomic_int a_in = 0, b_seen = 0;
    ck_job a = {p, {1.0f, 0, a_waits, NULL}, RAP_OK, "", &a_in, &b_seen};
    ck_job b = {p, {2.0f, 0, b_reached, NULL}, RAP_OK, "", &a_in, &b_seen};
    a.fill.arg = &a;
    b.fill.arg = &b;
    pthread_t ta, tb;
    REQUIRE(pthread_create(&ta, NULL, ck_thread, &a) == 0);
    for (int i = 0; i < 10000 && !atomic_load(&a_in); i++)
        usleep(1000);
    REQUIRE(pthread_create(&tb, NULL, ck_thread, &b) == 0);
    pthread_join(tb, NULL);
    pthread_join(ta, NULL);
    CHECK_MSG(a.st == RAP_OK, "A: %s", a.msg);
    CHECK_MSG(b.st == RAP_ERR_IO && strstr(b.msg, "another writer holds it"), "B: %s", b.msg);
    CHECK(ck_holds(p, 1.0f));
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    remove(p);
}

/* ------------------------------------------------------------- a killed writer */

static void signal_and_hang(void *arg)
{
    int fd = *(int *)arg;
    if (write(fd, "r", 1) != 1)
        _exit(3);
    for (;;)
        pause();
}

/* A writer process stopped in the middle of a checkpoint: while it lives,
 * a second writer fails naming its pid and its temporary stays; once it is
 * killed, the next writer succeeds and removes the stale temporary. */
RAP_TEST(out_killed_writer_stale_temporary)
{
    char p[512], msg[600];
    rap_test_path(p, sizeof p, "killed.safetensors");
    remove(p);
    REQUIRE_OK(ck_write_value(p, 9.0f)); /* an old checkpoint */
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        ck_fill f = {3.0f, 1, signal_and_hang, &pipefd[1]};
        ck_write(p, &f);
        _exit(2);
    }
    close(pipefd[1]);
    struct pollfd pf = {pipefd[0], POLLIN, 0};
    char c = 0;
    bool ready = poll(&pf, 1, 30000) == 1 && read(pipefd[0], &c, 1) == 1;
    close(pipefd[0]);
    if (ready) {
        CHECK(rap_test_temporaries(p) == 1);
        CHECK(ck_write_value(p, 4.0f) == RAP_ERR_IO);
        snprintf(msg, sizeof msg, "another writer holds it (pid %ld)", (long)pid);
        CHECK_MSG(strstr(rap_last_error(), msg), "%s", rap_last_error());
        CHECK(rap_test_temporaries(p) == 1); /* a live writer's temporary is kept */
        CHECK(ck_holds(p, 9.0f));
    }
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    REQUIRE(ready);
    CHECK(rap_test_temporaries(p) == 1); /* what the killed writer left */
    CHECK(ck_holds(p, 9.0f));            /* the old file, whole */
    CHECK_OK(ck_write_value(p, 5.0f));
    CHECK(ck_holds(p, 5.0f));
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    remove(p);
}

/* ------------------------------------------------------------- errors mid-write */

/* In a child limited to 64-byte files (RLIMIT_FSIZE: writes past it fail
 * with EFBIG), save `what` over path: 0 when that failed with RAP_ERR_IO
 * naming path. */
static int save_limited(const char *path, const rap_capacity *cap, const rap_schedule *sched)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {64, 64};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(4);
        rap_status st = cap ? rap_capacity_save(cap, path) : rap_schedule_save(sched, path);
        _exit(st == RAP_ERR_IO && strstr(rap_last_error(), path) ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* A write that fails half way (the file size limit) leaves the old file as
 * it was and no temporary, for the capacity file and the schedule.
 * (Before: both were written in place, truncated first.) */
RAP_TEST(out_error_mid_write_keeps_old_file)
{
    char p[512], old[512];
    rap_test_path(p, sizeof p, "midwrite.capacity");
    rap_test_path(old, sizeof old, "midwrite.capacity.old");
    rap_model_shape sh = {26, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0, 0, 0};
    rap_capacity c;
    rap_capacity_assumed(&sh, "NVIDIA H200", &c);
    c.assumed = false;
    REQUIRE_OK(rap_capacity_save(&c, p));
    REQUIRE_OK(rap_capacity_save(&c, old));
    c.tolerance = 0.25;
    CHECK(save_limited(p, &c, NULL) == 0);
    CHECK(same_bytes(p, old));
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    remove(p);
    remove(old);

    char sp[256];
    if (!rap_test_plan_path("h200/plan0_4096.schedule", sp, sizeof sp))
        SKIP("plans/h200 not found from the working directory");
    rap_schedule *s = NULL;
    REQUIRE_OK(rap_schedule_load(sp, &s));
    rap_test_path(p, sizeof p, "midwrite.schedule");
    REQUIRE_OK(rap_schedule_save(s, p));
    CHECK(save_limited(p, NULL, s) == 0);
    CHECK(same_bytes(p, sp)); /* the schedule writer writes the shipped bytes */
    CHECK(rap_test_temporaries(p) == 0 && !lock_file_exists(p));
    rap_schedule_free(s);
    remove(p);
}

/* ------------------------------------------------------------- links, fifos, devices */

/* A symbolic link: the file it points to is written, the link stays a
 * link, and the temporary and lock went beside the file. (Before: the
 * link was replaced by a regular file.) */
RAP_TEST(out_symlink_followed)
{
    char sub[512], real[600], lnk[512];
    rap_test_path(sub, sizeof sub, "link_target_dir");
    mkdir(sub, 0777);
    snprintf(real, sizeof real, "%s/real.safetensors", sub);
    rap_test_path(lnk, sizeof lnk, "link.safetensors");
    remove(lnk);
    REQUIRE_OK(ck_write_value(real, 1.0f));
    REQUIRE(symlink(real, lnk) == 0);
    CHECK_OK(ck_write_value(lnk, 2.0f));
    struct stat st;
    CHECK(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(ck_holds(real, 2.0f));
    CHECK(rap_test_temporaries(real) == 0 && rap_test_temporaries(lnk) == 0);
    /* a dangling link: its target is created */
    remove(real);
    CHECK_OK(ck_write_value(lnk, 3.0f));
    CHECK(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode) && ck_holds(real, 3.0f));
    remove(lnk);
    remove(real);
    rmdir(sub);
}

typedef struct {
    const char *path;
    atomic_int opened;
    char *buf;
    size_t n, cap;
} fifo_reader;

static void *read_fifo(void *arg)
{
    fifo_reader *r = arg;
    int fd = open(r->path, O_RDONLY);
    atomic_store(&r->opened, fd >= 0 ? 1 : -1);
    if (fd < 0)
        return NULL;
    for (;;) {
        if (r->n == r->cap) {
            char *b = realloc(r->buf, r->cap ? 2 * r->cap : 1 << 16);
            if (!b)
                break;
            r->buf = b;
            r->cap = r->cap ? 2 * r->cap : 1 << 16;
        }
        ssize_t k = read(fd, r->buf + r->n, r->cap - r->n);
        if (k <= 0)
            break;
        r->n += (size_t)k;
    }
    close(fd);
    return NULL;
}

/* A checkpoint written to a fifo (read by a thread) comes out byte for
 * byte as a file would, CRC included, and the fifo is still a fifo; a
 * device like /dev/null stays a device and a full one (/dev/full) fails
 * with its reason. (Before: each was replaced by a regular file.) */
RAP_TEST(out_fifo_and_devices_written_through)
{
    char fifo[512], ref[512], got[512];
    rap_test_path(fifo, sizeof fifo, "ck.fifo");
    rap_test_path(ref, sizeof ref, "ck_ref.safetensors");
    rap_test_path(got, sizeof got, "ck_got.safetensors");
    remove(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    /* held open both ways so that neither side blocks for the other, and
     * closed after the write: then the reader sees the end */
    int keep = open(fifo, O_RDWR);
    REQUIRE(keep >= 0);
    fifo_reader r = {.path = fifo};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, read_fifo, &r) == 0);
    for (int i = 0; i < 10000 && !atomic_load(&r.opened); i++)
        usleep(1000);
    rap_status st = ck_write_value(fifo, 6.0f);
    close(keep);
    pthread_join(th, NULL);
    CHECK_MSG(st == RAP_OK, "%s", rap_last_error());
    struct stat sb;
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    REQUIRE_OK(ck_write_value(ref, 6.0f));
    FILE *f = fopen(got, "wb");
    REQUIRE(f);
    CHECK(fwrite(r.buf ? r.buf : "", 1, r.n, f) == r.n);
    fclose(f);
    free(r.buf);
    CHECK(same_bytes(got, ref) && ck_holds(got, 6.0f));
    CHECK(rap_test_temporaries(fifo) == 0);
    remove(fifo);
    remove(got);
    remove(ref);

    char dn[512], df[512];
    const char *null_dev = char_device(dn, sizeof dn, "null", 3);
    const char *full_dev = char_device(df, sizeof df, "full", 7);
    if (!null_dev || !full_dev)
        SKIP("cannot make device nodes (and running as root: the real ones are not touched)");
    CHECK_OK(ck_write_value(null_dev, 1.0f));
    CHECK(is_char_device(null_dev));
    rap_model_shape sh = {26, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, 4096, 0, 0, 0};
    rap_capacity c;
    rap_capacity_assumed(&sh, "NVIDIA H200", &c);
    c.assumed = false;
    CHECK_OK(rap_capacity_save(&c, null_dev));
    CHECK(is_char_device(null_dev));
    CHECK(ck_write_value(full_dev, 1.0f) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "No space left on device"), "%s", rap_last_error());
    CHECK(rap_capacity_save(&c, full_dev) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "No space left on device"), "%s", rap_last_error());
    CHECK(is_char_device(full_dev));
    CHECK(rap_test_temporaries(null_dev) == 0 && rap_test_temporaries(full_dev) == 0);
    if (strncmp(null_dev, "/dev/", 5))
        remove(null_dev);
    if (strncmp(full_dev, "/dev/", 5))
        remove(full_dev);
}

/* ------------------------------------------------------------- the rap command */

static bool have_rap(void) { return access(rap_test_bin(), X_OK) == 0; }

/* `rap gen` rows into tmpdir/name. */
static bool gen_file(const char *name, int rows, int seed, char *path, size_t n)
{
    rap_test_path(path, n, name);
    char args[1024], out[4096];
    snprintf(args, sizeof args, "gen --rows %d --seed %d --cardinalities kaggle --out %s", rows,
             seed, path);
    return rap_test_run_rap(args, out, sizeof out) == 0;
}

/* The output named as an input is refused before any work, and the input
 * is left as it was: prep (also through a hard link), export, plan.
 * (Before: each overwrote its input.) */
RAP_TEST(cli_out_same_as_input_refused)
{
    if (!have_rap())
        SKIP("%s not built", rap_test_bin());
    char raw[512], keep[512], hard[512], ck[512], plan[256], planc[512], args[2048];
    static char out[1 << 16];
    REQUIRE(gen_file("same_raw.tsv", 50, 1, raw, sizeof raw));
    rap_test_path(keep, sizeof keep, "same_raw_copy.tsv");
    rap_test_path(hard, sizeof hard, "same_raw_hard.tsv");
    size_t n;
    char *b = slurp(raw, &n);
    REQUIRE(b);
    REQUIRE(put_file(keep, b));
    free(b);
    snprintf(args, sizeof args, "prep --device cpu --input %s --output %s", raw, raw);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "is the same file as the input"), "%s", out);
    CHECK(same_bytes(raw, keep));
    remove(hard);
    REQUIRE(link(raw, hard) == 0);
    snprintf(args, sizeof args, "prep --device cpu --input %s --output %s --format bin", raw, hard);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "refusing to overwrite it"), "%s", out);
    CHECK(same_bytes(raw, keep));
    remove(hard);

    rap_test_path(ck, sizeof ck, "same.safetensors");
    REQUIRE_OK(ck_write_value(ck, 1.5f));
    snprintf(args, sizeof args, "export --checkpoint %s --out %s", ck, ck);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "is the same file as the input"), "%s", out);
    CHECK(ck_holds(ck, 1.5f));
    rap_ckpt *c = NULL;
    CHECK_OK(rap_ckpt_open(ck, &c));
    if (c) /* still the checkpoint, not an export of it */
        CHECK(!rap_meta_get(&c->meta, "contents"));
    rap_ckpt_close(c);
    remove(ck);

    if (!rap_test_plan_path("plan0.plan", plan, sizeof plan))
        SKIP("plans/ not found from the working directory");
    rap_test_path(planc, sizeof planc, "same.plan");
    b = slurp(plan, &n);
    REQUIRE(b);
    REQUIRE(put_file(planc, b));
    free(b);
    snprintf(args, sizeof args, "plan --plan %s --out %s --fusion levels --quiet", planc, planc);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "is the same file as the input"), "%s", out);
    CHECK(same_bytes(planc, plan));
    snprintf(args, sizeof args, "plan --plan %s --out %s.s --report %s --fusion levels --quiet",
             planc, planc, planc);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK(same_bytes(planc, plan));
    remove(planc);
    remove(keep);
    remove(raw);
}

static void small_plan_file(char *path, size_t n)
{
    rap_test_path(path, n, "out_small.plan");
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fputs("df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
          "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n", f);
    for (int j = 1; j < RAP_CRITEO_DENSE; j++)
        fprintf(f, "del df[\"int_%d\"]\n", j);
    for (int j = 1; j < RAP_CRITEO_SPARSE; j++)
        fprintf(f, "del df[\"cat_%d\"]\n", j);
    fclose(f);
}

/* A full device through the command: an error naming the reason, a
 * non-zero exit, never "saved"/"wrote", and the device still a device.
 * (Before: export and train replaced the device with a regular file and
 * said they had written it.) */
RAP_TEST(cli_out_full_device)
{
    if (!have_rap())
        SKIP("%s not built", rap_test_bin());
    char df[512], ck[512], plan[512], raw[512], args[2048];
    static char out[1 << 16];
    const char *full = char_device(df, sizeof df, "cli_full", 7);
    if (!full)
        SKIP("cannot make device nodes (and running as root: the real ones are not touched)");
    rap_test_path(ck, sizeof ck, "full_src.safetensors");
    REQUIRE_OK(ck_write_value(ck, 2.5f));
    snprintf(args, sizeof args, "export --checkpoint %s --out %s", ck, full);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "No space left on device") && !strstr(out, "wrote"), "%s", out);
    CHECK(is_char_device(full));
    small_plan_file(plan, sizeof plan);
    snprintf(args, sizeof args,
             "train --device cpu --plan %s --gen-rows 300 --eval-fraction 0 --batch 64 "
             "--threads 1 --steps 2 --save %s",
             plan, full);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "No space left on device") && !strstr(out, "saved checkpoint"), "%s",
              out);
    CHECK(is_char_device(full));
    REQUIRE(gen_file("full_raw.tsv", 30, 2, raw, sizeof raw));
    snprintf(args, sizeof args, "prep --device cpu --input %s --output %s", raw, full);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "disk full") || strstr(out, "No space left"), "%s", out);
    CHECK(is_char_device(full));
    if (strncmp(full, "/dev/", 5))
        remove(full);
    remove(ck);
    remove(raw);
    remove(plan);
}

/* Starts `rap ARGS` in the background, its output into log: its pid. */
static pid_t spawn_rap(const char *args, const char *log)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s %s >%s 2>&1 </dev/null", rap_test_bin(), args, log);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits (up to 60 s, then kills) for pid: its exit status, -1 if killed. */
static int wait_rap(pid_t pid)
{
    int status = 0;
    for (int i = 0; i < 600; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Lines of the text and whether they all have as many tab-separated
 * fields as its first. */
static int tsv_lines(const char *text, bool *same_fields)
{
    int lines = 0, first = -1;
    *same_fields = true;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        if (!e)
            e = p + strlen(p);
        int f = 1;
        for (const char *q = p; q < e; q++)
            f += *q == '\t';
        if (first < 0)
            first = f;
        *same_fields &= f == first;
        lines++;
        p = *e ? e + 1 : e;
    }
    return lines;
}

/* Two `rap prep` with one --output: the first reads a fifo the test feeds
 * and is held in the middle of its output; the second fails at once
 * naming the first's pid; the first then completes, and the output is its
 * rows alone, every line whole. (Before: both said "wrote" and the file
 * mixed lines of both.) */
RAP_TEST(cli_prep_writers_at_once)
{
    if (!have_rap())
        SKIP("%s not built", rap_test_bin());
    char raw1[512], raw2[512], fifo[512], outp[512], log1[512], args[2048];
    static char out[1 << 16];
    REQUIRE(gen_file("once_1.tsv", 200, 3, raw1, sizeof raw1));
    REQUIRE(gen_file("once_2.tsv", 77, 4, raw2, sizeof raw2));
    rap_test_path(fifo, sizeof fifo, "once.fifo");
    rap_test_path(outp, sizeof outp, "once_out.tsv");
    rap_test_path(log1, sizeof log1, "once_1.log");
    remove(fifo);
    remove(outp);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    size_t n1;
    char *rows = slurp(raw1, &n1);
    REQUIRE(rows && n1 > 1000);
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN); /* a writer that died: EPIPE, not death */
    snprintf(args, sizeof args, "prep --device cpu --batch 64 --input %s --output %s", fifo, outp);
    pid_t p1 = spawn_rap(args, log1);
    REQUIRE(p1 > 0);
    int fd = open(fifo, O_WRONLY); /* waits for the first prep to open its input */
    bool fed = fd >= 0 && write(fd, rows, 1000) == 1000;
    bool started = false; /* the first prep has its output open */
    for (int i = 0; fed && i < 200 && !started; i++) {
        started = rap_test_temporaries(outp) > 0;
        if (!started)
            usleep(50000);
    }
    snprintf(args, sizeof args, "prep --device cpu --input %s --output %s", raw2, outp);
    int rc2 = rap_test_run_rap(args, out, sizeof out);
    char want[128];
    snprintf(want, sizeof want, "another writer holds it (pid %ld)", (long)p1);
    CHECK_MSG(rc2 == 1 && strstr(out, want), "exit %d: %s", rc2, out);
    if (fd >= 0) {
        fed = fed && write(fd, rows + 1000, n1 - 1000) == (ssize_t)(n1 - 1000);
        close(fd);
    }
    int rc1 = wait_rap(p1);
    signal(SIGPIPE, old_pipe);
    CHECK(fed && started);
    size_t nl;
    char *log = slurp(log1, &nl);
    CHECK_MSG(rc1 == 0, "exit %d: %s", rc1, log ? log : "");
    free(log);
    size_t no;
    char *text = slurp(outp, &no);
    REQUIRE(text);
    bool same_fields;
    CHECK(tsv_lines(text, &same_fields) == 1 + 200 && same_fields); /* header + its rows */
    free(text);
    free(rows);
    CHECK(rap_test_temporaries(outp) == 0 && !lock_file_exists(outp));
    remove(fifo);
    remove(outp);
    remove(raw1);
    remove(raw2);
}
