/* test_mps.c -- the mps preprocessing mode (src/run/mps.h): the protocol's
 * codec, the MPS daemon control (with a fake nvidia-cuda-mps-control), and
 * on a GPU the client with a real `rap prep-server` child compared byte for
 * byte with in-process preprocessing. */
#include "test.h"

#include "core/core.h"
#include "run/input.h"
#include "run/mps.h"
#include "run/pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

static rap_mps_msg *new_msg(void) { return calloc(1, sizeof(rap_mps_msg)); }

static bool round_trip(rap_test_ctx *t, const rap_mps_msg *in, rap_mps_msg *out)
{
    static uint8_t buf[1 << 17];
    size_t len = 0;
    rap_status st = rap_mps_encode(in, buf, sizeof buf, &len);
    CHECK_MSG(st == RAP_OK, "encode type %d: %s", (int)in->type, rap_last_error());
    if (st != RAP_OK)
        return false;
    memset(out, 0xa5, sizeof *out);
    st = rap_mps_decode(buf, len, out);
    CHECK_MSG(st == RAP_OK, "decode type %d: %s", (int)in->type, rap_last_error());
    if (st != RAP_OK)
        return false;
    /* a truncated frame never decodes */
    for (size_t cut = 0; cut < len; cut += (len / 7) + 1)
        CHECK(rap_mps_decode(buf, cut, out) == RAP_ERR_DATA);
    st = rap_mps_decode(buf, len, out);
    return st == RAP_OK;
}

static void fill_stats(rap_reader_stats *s)
{
    memset(s, 0, sizeof *s);
    s->rows_read = 1000;
    s->rows_used = 990;
    s->rows_rejected = 10;
    s->bytes_read = 123456;
    s->files = 2;
    s->rejected[RAP_REJ_LABEL] = 7;
    s->rejected[RAP_REJ_CAT] = 3;
    snprintf(s->example[RAP_REJ_LABEL][0], 256, "day_0.tsv:17");
    snprintf(s->example[RAP_REJ_CAT][2], 256, "day_1.tsv:99");
}

/* ------------------------------------------------------------ codec */

RAP_TEST(mps_codec_round_trip)
{
    rap_mps_msg *a = new_msg(), *b = new_msg();
    REQUIRE(a && b);

    a->type = RAP_MPS_CONFIG;
    a->version = RAP_MPS_VERSION;
    snprintf(a->plan, sizeof a->plan, "plans/default.plan");
    snprintf(a->input, sizeof a->input, "/data/day_0.gz");
    a->threads = 3;
    a->bad_rows = RAP_BAD_FAIL;
    a->follow = 1;
    a->idle_timeout_s = 2.5;
    a->max_line = 65536;
    a->max_rows = 777;
    a->batch_rows = 4096;
    a->n_slots = 3;
    a->schema = rap_schema_criteo();
    a->n_dense = 13;
    a->n_tables = 26;
    a->device = 1;
    a->log_level = 3;
    for (int i = 0; i < 26; i++)
        a->table_rows[i] = 1000 + i;
    if (round_trip(t, a, b)) {
        CHECK(b->type == RAP_MPS_CONFIG && b->version == RAP_MPS_VERSION);
        CHECK(!strcmp(b->plan, a->plan) && !strcmp(b->input, a->input));
        CHECK(b->threads == 3 && b->bad_rows == RAP_BAD_FAIL && b->follow == 1);
        CHECK(b->idle_timeout_s == 2.5 && b->max_line == 65536 && b->max_rows == 777);
        CHECK(b->batch_rows == 4096 && b->n_slots == 3 && b->device == 1 && b->log_level == 3);
        CHECK(b->schema.n_dense == 13 && b->schema.n_sparse == 26 && b->schema.ids_per_row == 1);
        CHECK(b->n_dense == 13 && b->n_tables == 26);
        CHECK(!memcmp(b->table_rows, a->table_rows, 26 * sizeof(int64_t)));
    }

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_SHAPE;
    a->status = RAP_ERR_PLAN;
    snprintf(a->message, sizeof a->message, "x.plan:3:1: expected a column");
    a->n_tables = RAP_MAX_TABLES; /* the largest */
    for (int i = 0; i < RAP_MAX_TABLES; i++)
        a->ids_cap[i] = 1 + i % 5;
    if (round_trip(t, a, b)) {
        CHECK(b->type == RAP_MPS_SHAPE && b->status == RAP_ERR_PLAN);
        CHECK(!strcmp(b->message, a->message));
        CHECK(b->n_tables == RAP_MAX_TABLES);
        CHECK(!memcmp(b->ids_cap, a->ids_cap, sizeof(int64_t) * RAP_MAX_TABLES));
    }

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_HANDLES;
    a->n_slots = RAP_MPS_MAX_SLOTS;
    for (int i = 0; i < RAP_MPS_HANDLE; i++)
        a->mem_handle[i] = (uint8_t)(i * 7 + 1);
    a->total_bytes = 1ull << 33;
    a->slot_bytes = 1ull << 29;
    for (int s = 0; s < RAP_MPS_MAX_SLOTS; s++)
        for (int i = 0; i < RAP_MPS_HANDLE; i++) {
            a->ready_handle[s][i] = (uint8_t)(s * 31 + i);
            a->free_handle[s][i] = (uint8_t)(s * 17 + i * 3);
        }
    if (round_trip(t, a, b)) {
        CHECK(b->type == RAP_MPS_HANDLES && b->n_slots == RAP_MPS_MAX_SLOTS);
        CHECK(!memcmp(b->mem_handle, a->mem_handle, RAP_MPS_HANDLE));
        CHECK(b->total_bytes == a->total_bytes && b->slot_bytes == a->slot_bytes);
        CHECK(!memcmp(b->ready_handle, a->ready_handle, sizeof a->ready_handle));
        CHECK(!memcmp(b->free_handle, a->free_handle, sizeof a->free_handle));
    }

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_READY;
    a->status = RAP_OK;
    if (round_trip(t, a, b))
        CHECK(b->type == RAP_MPS_READY && b->status == RAP_OK && b->message[0] == 0);

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_BATCH;
    a->slot = 2;
    a->seq = 123456789012LL;
    a->rows = 4095;
    if (round_trip(t, a, b))
        CHECK(b->type == RAP_MPS_BATCH && b->slot == 2 && b->seq == a->seq && b->rows == 4095);

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_RELEASE;
    a->slot = 1;
    if (round_trip(t, a, b))
        CHECK(b->type == RAP_MPS_RELEASE && b->slot == 1);

    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_END;
    a->status = RAP_ERR_DATA;
    snprintf(a->message, sizeof a->message, "day_0.tsv:17: expected label 0 or 1");
    a->batches = 12;
    a->rows = 990;
    fill_stats(&a->stats);
    if (round_trip(t, a, b)) {
        CHECK(b->type == RAP_MPS_END && b->status == RAP_ERR_DATA);
        CHECK(!strcmp(b->message, a->message));
        CHECK(b->batches == 12 && b->rows == 990);
        const rap_reader_stats *x = &a->stats, *y = &b->stats;
        CHECK(y->rows_read == x->rows_read && y->rows_used == x->rows_used &&
              y->rows_rejected == x->rows_rejected && y->bytes_read == x->bytes_read &&
              y->files == x->files);
        CHECK(!memcmp(y->rejected, x->rejected, sizeof x->rejected));
        for (int i = 0; i < RAP_REJ_COUNT; i++)
            for (int j = 0; j < RAP_REJ_EXAMPLES; j++)
                CHECK(!strcmp(y->example[i][j], x->example[i][j]));
    }
    free(a);
    free(b);
}

RAP_TEST(mps_codec_rejects)
{
    rap_mps_msg *a = new_msg(), *b = new_msg();
    REQUIRE(a && b);
    uint8_t buf[4096];
    size_t len = 0;
    a->type = RAP_MPS_BATCH;
    a->slot = 1;
    a->rows = 5;
    REQUIRE_OK(rap_mps_encode(a, buf, sizeof buf, &len));
    CHECK(len == 12 + 4 + 8 + 8);
    /* bad magic */
    buf[0] ^= 0xff;
    CHECK(rap_mps_decode(buf, len, b) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "magic") != NULL);
    buf[0] ^= 0xff;
    /* unknown type */
    uint32_t ty = 99;
    memcpy(buf + 4, &ty, 4);
    CHECK(rap_mps_decode(buf, len, b) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "type") != NULL);
    ty = RAP_MPS_BATCH;
    memcpy(buf + 4, &ty, 4);
    /* a byte too many */
    uint32_t pl = (uint32_t)(len - 12 + 1);
    buf[len] = 0;
    memcpy(buf + 8, &pl, 4);
    CHECK(rap_mps_decode(buf, len + 1, b) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "left over") != NULL);
    /* too many tables */
    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_SHAPE;
    a->n_tables = RAP_MAX_TABLES + 1;
    CHECK(rap_mps_encode(a, buf, sizeof buf, &len) == RAP_ERR_ARG);
    a->n_tables = 3;
    REQUIRE_OK(rap_mps_encode(a, buf, sizeof buf, &len));
    int32_t big = RAP_MAX_TABLES + 1; /* n_tables sits after status and the empty message */
    memcpy(buf + 12 + 4 + 4, &big, 4);
    CHECK(rap_mps_decode(buf, len, b) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "tables") != NULL);
    /* a string longer than its field */
    memset(a, 0, sizeof *a);
    a->type = RAP_MPS_READY;
    REQUIRE_OK(rap_mps_encode(a, buf, sizeof buf, &len));
    uint32_t slen = RAP_MPS_TEXT + 5;
    memcpy(buf + 12 + 4, &slen, 4);
    CHECK(rap_mps_decode(buf, len, b) == RAP_ERR_DATA);
    /* too small a buffer */
    a->type = RAP_MPS_END;
    CHECK(rap_mps_encode(a, buf, 64, &len) == RAP_ERR_ARG);
    free(a);
    free(b);
}

RAP_TEST(mps_socket_messages)
{
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    rap_mps_msg *a = new_msg(), *b = new_msg();
    REQUIRE(a && b);
    a->type = RAP_MPS_END;
    a->status = RAP_OK;
    a->batches = 3;
    a->rows = 30;
    fill_stats(&a->stats);
    CHECK_OK(rap_mps_send(sv[0], a));
    memset(a, 0, sizeof *a);
    for (int i = 0; i < 100; i++) {
        a->type = RAP_MPS_RELEASE;
        a->slot = i % 4;
        CHECK_OK(rap_mps_send(sv[0], a));
    }
    bool closed = true;
    CHECK_OK(rap_mps_recv(sv[1], b, &closed));
    CHECK(!closed && b->type == RAP_MPS_END && b->rows == 30 && b->stats.rows_rejected == 10);
    CHECK(!strcmp(b->stats.example[RAP_REJ_CAT][2], "day_1.tsv:99"));
    for (int i = 0; i < 100; i++) {
        CHECK_OK(rap_mps_recv(sv[1], b, &closed));
        CHECK(b->type == RAP_MPS_RELEASE && b->slot == i % 4);
    }
    close(sv[0]);
    CHECK(rap_mps_recv(sv[1], b, &closed) == RAP_ERR_IO);
    CHECK(closed);
    close(sv[1]);
    free(a);
    free(b);
}

RAP_TEST(mps_layout)
{
    rap_mps_layout l;
    int64_t cap[3] = {1, 3, 1};
    REQUIRE_OK(rap_mps_layout_make(1000, 13, 3, cap, &l));
    CHECK(l.dense == 0);
    CHECK(l.label >= 1000 * 13 * 4 && l.label % 256 == 0);
    CHECK(l.off[0] >= l.label + 4000 && l.off[0] % 256 == 0);
    CHECK(l.ids[0] >= l.off[0] + 1001 * 8 && l.ids[0] % 256 == 0);
    CHECK(l.off[1] >= l.ids[0] + 1000 * 8);
    CHECK(l.off[2] >= l.ids[1] + 3000 * 8);
    CHECK(l.bytes >= l.ids[2] + 1000 * 8 && l.bytes % 256 == 0);
    rap_mps_layout_free(&l);
    cap[1] = 0;
    CHECK(rap_mps_layout_make(1000, 13, 3, cap, &l) == RAP_ERR_ARG);
    CHECK(rap_mps_layout_make(0, 13, 3, cap, &l) == RAP_ERR_ARG);
}

/* ------------------------------------------------------------ daemon */

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int count_str(const char *s, const char *w)
{
    int n = 0;
    for (const char *p = s; s && (p = strstr(p, w)); p += strlen(w))
        n++;
    return n;
}

/* Saved environment of a daemon test. */
typedef struct {
    char *tmpdir, *control, *path, *pipe;
} env_save;

static char *dup_env(const char *k)
{
    const char *v = getenv(k);
    return v ? strdup(v) : NULL;
}

static void put_env(const char *k, char *v)
{
    if (v)
        setenv(k, v, 1);
    else
        unsetenv(k);
    free(v);
}

static env_save save_env(void)
{
    env_save e = {dup_env("TMPDIR"), dup_env("RAP_MPS_CONTROL"), dup_env("PATH"),
                  dup_env("CUDA_MPS_PIPE_DIRECTORY")};
    return e;
}

static void restore_env(env_save *e)
{
    put_env("TMPDIR", e->tmpdir);
    put_env("RAP_MPS_CONTROL", e->control);
    put_env("PATH", e->path);
    put_env("CUDA_MPS_PIPE_DIRECTORY", e->pipe);
}

/* A fresh directory under the test tmpdir. */
static void fresh_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
    mkdir(out, 0700);
}

/* A fake nvidia-cuda-mps-control: logs its arguments, environment and
 * stdin to log; exits with code. */
static void write_fake_control(const char *path, const char *log, int code)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f,
            "#!/bin/sh\n"
            "echo \"args:$* pipe:$CUDA_MPS_PIPE_DIRECTORY log:$CUDA_MPS_LOG_DIRECTORY\" >> '%s'\n"
            "if [ \"$1\" != -d ]; then read cmd; echo \"cmd:$cmd\" >> '%s'; fi\n"
            "[ %d = 0 ] || echo 'fake control: cannot start' >&2\n"
            "exit %d\n",
            log, log, code, code);
    fclose(f);
    chmod(path, 0755);
}

RAP_TEST(mps_daemon_absent)
{
    env_save e = save_env();
    char tmp[512], empty[512];
    fresh_dir(tmp, sizeof tmp, "mps_absent_tmp");
    fresh_dir(empty, sizeof empty, "mps_absent_path");
    setenv("TMPDIR", tmp, 1);
    /* not on PATH */
    unsetenv("RAP_MPS_CONTROL");
    setenv("PATH", empty, 1);
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    rap_status st = rap_mps_daemon_start();
    CHECK(st == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "nvidia-cuda-mps-control was not found on PATH"),
              "message: %s", rap_last_error());
    CHECK(!rap_mps_daemon_started());
    CHECK(getenv("CUDA_MPS_PIPE_DIRECTORY") == NULL);
    CHECK(count_entries(tmp) == 0);
    /* named but missing */
    restore_env(&e);
    e = save_env();
    setenv("TMPDIR", tmp, 1);
    setenv("RAP_MPS_CONTROL", "/nonexistent/nvidia-cuda-mps-control", 1);
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    CHECK(rap_mps_daemon_start() == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "/nonexistent/nvidia-cuda-mps-control") != NULL);
    CHECK(count_entries(tmp) == 0);
    CHECK(getenv("CUDA_MPS_PIPE_DIRECTORY") == NULL);
    rap_mps_daemon_stop(); /* nothing started: nothing happens */
    CHECK(!rap_mps_daemon_started());
    /* without a daemon the mode time-shares, and says so */
    char how[1200];
    rap_mps_describe(how, sizeof how);
    CHECK_MSG(strstr(how, "time-share") || strstr(how, "already running"), "%s", how);
    restore_env(&e);
}

RAP_TEST(mps_daemon_fake_control)
{
    env_save e = save_env();
    char tmp[512], bin[512], ctl[600], log[600];
    fresh_dir(tmp, sizeof tmp, "mps_fake_tmp");
    fresh_dir(bin, sizeof bin, "mps_fake_bin");
    snprintf(ctl, sizeof ctl, "%s/control", bin);
    snprintf(log, sizeof log, "%s/log", bin);
    setenv("TMPDIR", tmp, 1);
    setenv("RAP_MPS_CONTROL", ctl, 1);
    setenv("CUDA_MPS_PIPE_DIRECTORY", "/previous/pipe", 1);
    char old_log[512] = "";
    if (getenv("CUDA_MPS_LOG_DIRECTORY"))
        snprintf(old_log, sizeof old_log, "%s", getenv("CUDA_MPS_LOG_DIRECTORY"));

    /* a control that fails: an error with its words, nothing left */
    write_fake_control(ctl, log, 3);
    CHECK(rap_mps_daemon_start() == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "exited with status 3") &&
                  strstr(rap_last_error(), "fake control: cannot start"),
              "message: %s", rap_last_error());
    CHECK(count_entries(tmp) == 0);
    CHECK(!strcmp(getenv("CUDA_MPS_PIPE_DIRECTORY"), "/previous/pipe"));
    unlink(log);

    /* a control that works */
    write_fake_control(ctl, log, 0);
    REQUIRE_OK(rap_mps_daemon_start());
    CHECK(rap_mps_daemon_started());
    CHECK_OK(rap_mps_daemon_start()); /* again: nothing new */
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY"), *logd = getenv("CUDA_MPS_LOG_DIRECTORY");
    REQUIRE(pipe && logd);
    CHECK(!strncmp(pipe, tmp, strlen(tmp)) && !strncmp(logd, tmp, strlen(tmp)));
    struct stat sb;
    CHECK(stat(pipe, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(count_entries(tmp) == 2);
    char how[1200];
    rap_mps_describe(how, sizeof how);
    CHECK_MSG(strstr(how, "started by rap"), "%s", how);
    char *text = read_file(log);
    CHECK_MSG(text && count_str(text, "args:-d") == 1, "log: %s", text ? text : "(none)");
    CHECK(text && strstr(text, pipe) != NULL);

    rap_mps_daemon_stop();
    CHECK(!rap_mps_daemon_started());
    CHECK(count_entries(tmp) == 0);
    CHECK(!strcmp(getenv("CUDA_MPS_PIPE_DIRECTORY"), "/previous/pipe"));
    const char *lg = getenv("CUDA_MPS_LOG_DIRECTORY");
    CHECK_MSG(lg == NULL ? old_log[0] == 0 : !strcmp(lg, old_log), "log dir now %s", lg);
    rap_mps_daemon_stop(); /* idempotent */
    usleep(200 * 1000);    /* the guardian was told "done": it must not quit again */
    text = read_file(log);
    CHECK_MSG(text && count_str(text, "cmd:quit") == 1, "log: %s", text ? text : "(none)");
    restore_env(&e);
}

/* The process that started the daemon dies without stopping it: the
 * guardian stops it and removes the directories. */
RAP_TEST(mps_daemon_guardian)
{
    env_save e = save_env();
    char tmp[512], bin[512], ctl[600], log[600];
    fresh_dir(tmp, sizeof tmp, "mps_guard_tmp");
    fresh_dir(bin, sizeof bin, "mps_guard_bin");
    snprintf(ctl, sizeof ctl, "%s/control", bin);
    snprintf(log, sizeof log, "%s/log", bin);
    write_fake_control(ctl, log, 0);
    setenv("TMPDIR", tmp, 1);
    setenv("RAP_MPS_CONTROL", ctl, 1);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        rap_log_set_level(0);
        _exit(rap_mps_daemon_start() == RAP_OK ? 0 : 1); /* no atexit, no stop */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int left = -1;
    char *text = NULL;
    for (int i = 0; i < 500; i++) {
        left = count_entries(tmp);
        text = read_file(log);
        if (left == 0 && text && strstr(text, "cmd:quit"))
            break;
        usleep(10 * 1000);
    }
    CHECK_MSG(left == 0, "%d entries left in %s", left, tmp);
    CHECK_MSG(text && count_str(text, "cmd:quit") == 1, "log: %s", text ? text : "(none)");
    CHECK(!rap_mps_daemon_started()); /* the child's daemon is not ours */
    restore_env(&e);
}

RAP_TEST(mps_client_without_gpu)
{
    char why[256];
    if (rap_gpu_available(why, sizeof why))
        SKIP("a GPU is usable: mps_gpu_* cover the client");
    int64_t rows[2] = {10, 10};
    rap_mps_config c = {0};
    c.plan = "default";
    c.reader = rap_reader_defaults();
    c.reader.input = "/nonexistent";
    c.batch_rows = 16;
    c.n_slots = 2;
    c.schema = rap_schema_criteo();
    c.n_dense = 13;
    c.n_tables = 2;
    c.table_rows = rows;
    rap_mps_client *cl = (rap_mps_client *)1;
    CHECK(rap_mps_client_create(&c, &cl) == RAP_ERR_NO_GPU);
    CHECK(cl == NULL);
    CHECK_MSG(strstr(rap_last_error(), "mps") && strstr(rap_last_error(), why),
              "message: %s", rap_last_error());
    rap_mps_client_free(NULL);
}

/* ------------------------------------------------------------ GPU */

static void rap_path(char *out, size_t n)
{
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(out, n, "%s/rap", exe);
}

static void plan_path(char *out, size_t n)
{
    static const char *const pre[] = {"plans/", "../plans/", "../../plans/"};
    char p[256] = "plans/default.plan";
    for (size_t k = 0; k < sizeof pre / sizeof pre[0]; k++) {
        snprintf(p, sizeof p, "%sdefault.plan", pre[k]);
        if (access(p, R_OK) == 0)
            break;
    }
    if (!realpath(p, out))
        snprintf(out, n, "%s", p);
}

/* Generated rows with a malformed line inserted every `every` lines (0:
 * none). Returns the number of malformed lines. */
static int64_t make_data(const char *path, int64_t rows, int every, uint64_t seed)
{
    char clean[600];
    snprintf(clean, sizeof clean, "%s.clean", path);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = seed;
    g.out = clean;
    if (rap_gen_cardinalities("kaggle", g.card) != RAP_OK)
        return -1;
    rap_gen_result r;
    if (rap_gen_write(&g, &r) != RAP_OK)
        return -1;
    FILE *in = fopen(clean, "r"), *out = fopen(path, "w");
    if (!in || !out)
        return -1;
    char line[8192];
    int64_t i = 0, bad = 0;
    while (fgets(line, sizeof line, in)) {
        if (every > 0 && i % every == every - 1) {
            fputs(bad % 2 ? "x\t1\t2\n" : "2\tnot a row\n", out);
            bad++;
        }
        fputs(line, out);
        i++;
    }
    fclose(in);
    fclose(out);
    unlink(clean);
    return bad;
}

/* One model batch on the host. */
typedef struct {
    int64_t rows;
    float *dense, *label;
    int64_t *off[RAP_MAX_TABLES];
    int64_t *ids[RAP_MAX_TABLES];
    int64_t nids[RAP_MAX_TABLES];
} host_batch;

static void host_batch_free(host_batch *h, int nt)
{
    free(h->dense);
    free(h->label);
    for (int t = 0; t < nt; t++) {
        free(h->off[t]);
        free(h->ids[t]);
    }
}

/* Copies a device model batch to the host (after stream's work). */
static rap_status fetch_batch(const rap_model_batch *mb, int nd, int nt, void *stream,
                              host_batch *h)
{
    memset(h, 0, sizeof *h);
    int64_t r = mb->rows;
    h->rows = r;
    h->dense = malloc(sizeof(float) * (size_t)(r * nd));
    h->label = malloc(sizeof(float) * (size_t)r);
    if (!h->dense || !h->label)
        return RAP_ERR_NOMEM;
    RAP_TRY(rap_run_download(h->dense, mb->dense, sizeof(float) * (size_t)(r * nd), stream));
    RAP_TRY(rap_run_download(h->label, mb->label, sizeof(float) * (size_t)r, stream));
    for (int t = 0; t < nt; t++) {
        h->off[t] = malloc(sizeof(int64_t) * (size_t)(r + 1));
        if (!h->off[t])
            return RAP_ERR_NOMEM;
        RAP_TRY(rap_run_download(h->off[t], mb->off[t], sizeof(int64_t) * (size_t)(r + 1),
                                 stream));
        int64_t a = h->off[t][0], n = h->off[t][r] - a;
        if (a < 0 || n < 0)
            return rap_fail(RAP_ERR_INTERNAL, "table %d: offsets %lld..%lld", t, (long long)a,
                            (long long)h->off[t][r]);
        h->nids[t] = n;
        h->ids[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        if (!h->ids[t])
            return RAP_ERR_NOMEM;
        if (n)
            RAP_TRY(rap_run_download(h->ids[t], mb->ids[t] + a, sizeof(int64_t) * (size_t)n,
                                     stream));
    }
    return RAP_OK;
}

#define MAX_BATCHES 64

/* The same rows preprocessed in this process: rap_reader + rap_prep on
 * the GPU + rap_input. */
static rap_status reference(const char *input, const rap_plan *plan, int64_t B, int nd, int nt,
                            host_batch *out, int *n_out, rap_reader_stats *rs)
{
    *n_out = 0;
    rap_fusion fus;
    RAP_TRY(rap_fuse_levels(plan, &fus));
    void *stream = NULL;
    RAP_TRY(rap_run_stream_create(&stream));
    rap_prep_config pc = {.device = RAP_GPU, .max_rows = B, .stream = stream};
    rap_prep *prep = NULL;
    rap_input *in = NULL;
    rap_reader *rd = NULL;
    rap_batch b;
    memset(&b, 0, sizeof b);
    rap_status st = rap_prep_create(plan, &fus, &pc, &prep);
    if (st == RAP_OK)
        st = rap_input_create(plan, RAP_GPU, B, stream, &in);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = input;
    rc.threads = 2;
    if (st == RAP_OK)
        st = rap_reader_open(&rc, &rd);
    if (st == RAP_OK)
        st = rap_batch_create(&b, rap_schema_criteo(), B, true);
    while (st == RAP_OK) {
        st = rap_reader_next(rd, &b);
        if (st != RAP_OK || b.rows == 0)
            break;
        if (*n_out >= MAX_BATCHES) {
            st = rap_fail(RAP_ERR_INTERNAL, "more than %d batches", MAX_BATCHES);
            break;
        }
        rap_model_batch mb;
        st = rap_prep_load(prep, &b);
        if (st == RAP_OK)
            st = rap_prep_run(prep);
        if (st == RAP_OK)
            st = rap_input_make(in, prep, &mb);
        if (st == RAP_OK)
            st = fetch_batch(&mb, nd, nt, stream, &out[(*n_out)++]);
        if (st == RAP_OK)
            st = rap_prep_sync(prep);
    }
    if (rd)
        rap_reader_get_stats(rd, rs);
    rap_reader_close(rd);
    rap_batch_free(&b);
    rap_input_free(in);
    rap_prep_free(prep);
    rap_fusion_free(&fus);
    rap_run_stream_free(stream);
    return st;
}

static bool same_batch(rap_test_ctx *t, int i, const host_batch *a, const host_batch *b, int nd,
                       int nt)
{
    int before = t->failures;
    CHECK_MSG(a->rows == b->rows, "batch %d: %lld rows vs %lld", i, (long long)a->rows,
              (long long)b->rows);
    if (a->rows != b->rows)
        return false;
    size_t r = (size_t)a->rows;
    CHECK_MSG(!memcmp(a->dense, b->dense, sizeof(float) * r * (size_t)nd), "batch %d: dense", i);
    CHECK_MSG(!memcmp(a->label, b->label, sizeof(float) * r), "batch %d: labels", i);
    for (int tb = 0; tb < nt; tb++) {
        CHECK_MSG(!memcmp(a->off[tb], b->off[tb], sizeof(int64_t) * (r + 1)),
                  "batch %d table %d: offsets", i, tb);
        CHECK_MSG(a->nids[tb] == b->nids[tb] &&
                      !memcmp(a->ids[tb], b->ids[tb], sizeof(int64_t) * (size_t)a->nids[tb]),
                  "batch %d table %d: ids", i, tb);
    }
    return t->failures == before;
}

static bool pid_gone(int pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/* The whole exchange: generated rows with malformed lines, the client and
 * a real server, every batch compared with in-process preprocessing. */
static void gpu_round_trip(rap_test_ctx *t, const char *tag)
{
    char data[512], plan_file[1024], rap[1024];
    snprintf(data, sizeof data, "%s/mps_%s.tsv", rap_test_tmpdir(), tag);
    int64_t bad = make_data(data, 5000, 293, 11);
    REQUIRE(bad > 0);
    plan_path(plan_file, sizeof plan_file);
    rap_path(rap, sizeof rap);
    if (access(rap, X_OK) != 0)
        SKIP("%s not built", rap);
    rap_plan *plan = NULL;
    REQUIRE_OK(rap_plan_load(plan_file, rap_schema_criteo(), &plan));
    int nd = 0, nt = 0;
    static int64_t table_rows[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(plan, &nd, &nt, table_rows));
    const int64_t B = 700; /* 5000 / 700: a short last batch */

    static host_batch ref[MAX_BATCHES], got[MAX_BATCHES];
    int n_ref = 0, n_got = 0;
    rap_reader_stats rs;
    memset(&rs, 0, sizeof rs);
    rap_status st = reference(data, plan, B, nd, nt, ref, &n_ref, &rs);
    CHECK_MSG(st == RAP_OK, "reference: %s", rap_last_error());
    CHECK(rs.rows_used == 5000 && rs.rows_rejected == bad);

    rap_mps_config c;
    memset(&c, 0, sizeof c);
    c.plan = plan_file;
    c.reader = rap_reader_defaults();
    c.reader.input = data;
    c.reader.threads = 2;
    c.batch_rows = B;
    c.n_slots = 3;
    c.schema = rap_schema_criteo();
    c.n_dense = nd;
    c.n_tables = nt;
    c.table_rows = table_rows;
    c.exe = rap;
    rap_mps_client *cl = NULL;
    void *stream = NULL;
    REQUIRE_OK(rap_run_stream_create(&stream));
    st = rap_mps_client_create(&c, &cl);
    CHECK_MSG(st == RAP_OK, "create: %s", rap_last_error());
    int pid = rap_mps_client_pid(cl);
    CHECK(st != RAP_OK || pid > 0);
    int held = -1;
    while (st == RAP_OK) {
        int slot;
        int64_t rows;
        rap_model_batch mb;
        st = rap_mps_client_next(cl, stream, &slot, &mb, &rows);
        CHECK_MSG(st == RAP_OK, "next: %s", rap_last_error());
        if (st != RAP_OK || slot < 0)
            break;
        CHECK(rows == mb.rows && rows > 0 && rows <= B);
        REQUIRE(n_got < MAX_BATCHES);
        /* keep one slot held over the next call: slots are used in turn */
        st = fetch_batch(&mb, nd, nt, stream, &got[n_got++]);
        CHECK_MSG(st == RAP_OK, "fetch: %s", rap_last_error());
        if (held >= 0)
            CHECK_OK(rap_mps_client_release(cl, held, stream));
        held = slot;
    }
    if (held >= 0)
        CHECK_OK(rap_mps_client_release(cl, held, stream));
    /* the accounting: the server's reader, the rows handed out */
    rap_mps_stats ms;
    rap_mps_client_get_stats(cl, &ms);
    CHECK(ms.ended && ms.error == RAP_OK);
    CHECK_MSG(ms.reader.rows_read == ms.reader.rows_used + ms.reader.rows_rejected,
              "read %lld used %lld rejected %lld", (long long)ms.reader.rows_read,
              (long long)ms.reader.rows_used, (long long)ms.reader.rows_rejected);
    CHECK(ms.reader.rows_used == 5000 && ms.reader.rows_rejected == bad);
    CHECK(ms.reader.rejected[RAP_REJ_FIELDS] + ms.reader.rejected[RAP_REJ_LABEL] == bad);
    CHECK(ms.rows == 5000 && ms.server_rows == 5000 && ms.batches == ms.server_batches);
    CHECK(!memcmp(ms.reader.rejected, rs.rejected, sizeof rs.rejected));
    /* byte for byte */
    CHECK_MSG(n_got == n_ref, "%d batches through the server, %d in process", n_got, n_ref);
    for (int i = 0; i < n_got && i < n_ref; i++)
        if (!same_batch(t, i, &ref[i], &got[i], nd, nt))
            break;
    rap_mps_client_free(cl);
    CHECK_MSG(pid_gone(pid), "prep server %d still there after free", pid);
    for (int i = 0; i < n_ref; i++)
        host_batch_free(&ref[i], nt);
    for (int i = 0; i < n_got; i++)
        host_batch_free(&got[i], nt);
    rap_run_stream_free(stream);
    rap_plan_free(plan);
}

/* Without an MPS daemon started by the test (time-sharing, or a daemon that
 * already runs on the machine). */
RAP_TEST(mps_gpu_round_trip)
{
    REQUIRE_GPU();
    if (getenv("RAP_MPS_INNER"))
        SKIP("inside mps_gpu_daemon");
    char how[1200];
    rap_info("mps_gpu_round_trip: %s", rap_mps_describe(how, sizeof how));
    gpu_round_trip(t, "timeshare");
}

/* With a private MPS daemon, as `rap train --mps-start` runs it: in a fresh
 * process (this binary running mps_gpu_inner) that starts the daemon before
 * its first CUDA call, so that it and its server are both MPS clients, and
 * leaves the stop to the atexit hook. Afterwards nothing is left in its
 * TMPDIR (the daemon's pipe and log directories). */
RAP_TEST(mps_gpu_daemon)
{
    REQUIRE_GPU();
    if (getenv("RAP_MPS_INNER"))
        SKIP("inside mps_gpu_daemon");
    char exe[1024], tmp[512];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    fresh_dir(tmp, sizeof tmp, "mps_daemon_tmp");
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "RAP_MPS_INNER=1 TMPDIR='%s' '%s' mps_gpu_inner 2>&1", tmp, exe);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int status = pclose(p);
    const char *skip = strstr(out, "SKIP: ");
    if (skip && strstr(out, "0 passed, 0 failed, 1 skipped")) {
        char why[256];
        snprintf(why, sizeof why, "%s", skip + 6);
        why[strcspn(why, "\n")] = 0;
        SKIP("%s", why);
    }
    CHECK_MSG(status == 0 && strstr(out, "1 passed, 0 failed"), "inner run (status %d):\n%s",
              status, out);
    CHECK_MSG(strstr(out, "MPS daemon started by rap"), "inner run:\n%s", out);
    /* the daemon was stopped and its directories removed */
    int left = -1;
    for (int i = 0; i < 1500 && left != 0; i++) {
        left = count_entries(tmp);
        if (left)
            usleep(10 * 1000);
    }
    CHECK_MSG(left == 0, "%d entries left in %s after the run", left, tmp);
}

RAP_TEST(mps_gpu_inner)
{
    if (!getenv("RAP_MPS_INNER"))
        SKIP("runs inside mps_gpu_daemon");
    /* first, before any CUDA call of this process */
    if (rap_mps_daemon_start() != RAP_OK)
        SKIP("no MPS daemon: %s", rap_last_error());
    REQUIRE_GPU();
    char how[1200];
    rap_info("mps_gpu_inner: %s", rap_mps_describe(how, sizeof how));
    gpu_round_trip(t, "mps");
    /* the stop is the atexit hook's (the outer test checks it) */
}

/* Errors come back with the server's message: a bad row with
 * bad_rows=fail after the good batches; a model that does not fit the plan
 * at create. The server is gone either way. */
RAP_TEST(mps_gpu_errors)
{
    REQUIRE_GPU();
    if (getenv("RAP_MPS_INNER"))
        SKIP("inside mps_gpu_daemon");
    char data[512], plan_file[1024], rap[1024];
    snprintf(data, sizeof data, "%s/mps_errors.tsv", rap_test_tmpdir());
    REQUIRE(make_data(data, 3000, 2500, 12) == 1); /* line 2500 is malformed */
    plan_path(plan_file, sizeof plan_file);
    rap_path(rap, sizeof rap);
    if (access(rap, X_OK) != 0)
        SKIP("%s not built", rap);
    rap_plan *plan = NULL;
    REQUIRE_OK(rap_plan_load(plan_file, rap_schema_criteo(), &plan));
    int nd = 0, nt = 0;
    static int64_t table_rows[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(plan, &nd, &nt, table_rows));
    rap_plan_free(plan);

    rap_mps_config c;
    memset(&c, 0, sizeof c);
    c.plan = plan_file;
    c.reader = rap_reader_defaults();
    c.reader.input = data;
    c.reader.bad_rows = RAP_BAD_FAIL;
    c.batch_rows = 1000;
    c.n_slots = 2;
    c.schema = rap_schema_criteo();
    c.n_dense = nd;
    c.n_tables = nt;
    c.table_rows = table_rows;
    c.exe = rap;
    rap_mps_client *cl = NULL;
    REQUIRE_OK(rap_mps_client_create(&c, &cl));
    int pid = rap_mps_client_pid(cl);
    int64_t rows_ok = 0;
    rap_status st;
    for (;;) {
        int slot;
        int64_t rows;
        rap_model_batch mb;
        st = rap_mps_client_next(cl, NULL, &slot, &mb, &rows);
        if (st != RAP_OK || slot < 0)
            break;
        rows_ok += rows;
        CHECK_OK(rap_mps_client_release(cl, slot, NULL));
    }
    CHECK(st == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "prep server") &&
                  strstr(rap_last_error(), "mps_errors.tsv:2500:"),
              "message: %s", rap_last_error());
    /* the good rows before the bad one all arrive: 1000, 1000, 499 */
    CHECK_MSG(rows_ok == 2499, "%lld good rows before the error", (long long)rows_ok);
    rap_mps_stats ms;
    rap_mps_client_get_stats(cl, &ms);
    CHECK(ms.ended && ms.error == RAP_ERR_DATA);
    rap_mps_client_free(cl);
    CHECK(pid_gone(pid));

    /* the model's shape disagrees with the plan */
    c.reader.bad_rows = RAP_BAD_SKIP;
    c.n_dense = nd + 1;
    cl = NULL;
    st = rap_mps_client_create(&c, &cl);
    CHECK(st == RAP_ERR_ARG && cl == NULL);
    CHECK_MSG(strstr(rap_last_error(), "prep server") && strstr(rap_last_error(), "dense"),
              "message: %s", rap_last_error());
    /* a missing input */
    c.n_dense = nd;
    c.reader.input = "/nonexistent/day_0.gz";
    st = rap_mps_client_create(&c, &cl);
    CHECK(st == RAP_ERR_IO && cl == NULL);
    CHECK_MSG(strstr(rap_last_error(), "/nonexistent/day_0.gz"), "message: %s", rap_last_error());
}

/* Starts `rap prep-server --fd N` with the other end of a socketpair
 * (stderr to /dev/null when quiet). Returns the trainer's end, -1 on
 * failure; *pid the server. */
static int start_server(const char *rap, bool quiet, pid_t *pid)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
    fflush(NULL);
    *pid = fork();
    if (*pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (*pid == 0) {
        fcntl(sv[1], F_SETFD, 0);
        if (quiet) {
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0)
                dup2(nul, 2);
        }
        execl(rap, rap, "prep-server", "--fd", fdarg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    return sv[0];
}

/* Waits up to 10 s for the server to end (then kills it). *status: its
 * wait status. false when it had to be killed. */
static bool wait_server(pid_t pid, int *status)
{
    for (int i = 0; i < 1000; i++) {
        if (waitpid(pid, status, WNOHANG) == pid)
            return true;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

static void fill_config(rap_mps_msg *m, const char *plan_file, int nd, int nt,
                        const int64_t *table_rows)
{
    memset(m, 0, sizeof *m);
    m->type = RAP_MPS_CONFIG;
    m->version = RAP_MPS_VERSION;
    snprintf(m->plan, sizeof m->plan, "%s", plan_file);
    snprintf(m->input, sizeof m->input, "/nonexistent");
    m->batch_rows = 100;
    m->n_slots = 2;
    m->schema = rap_schema_criteo();
    m->n_dense = nd;
    m->n_tables = nt;
    memcpy(m->table_rows, table_rows, sizeof(int64_t) * (size_t)nt);
    m->log_level = 1;
}

/* The server binary alone, through the protocol's first exchange. Its exit
 * status: 0 when the trainer was served, was told of the error (it reports
 * it), or hung up, at any point; 1 only when nothing could be told (a
 * first message that is not CONFIG); 2 without --fd.
 *  - CONFIG answered (the shape on a GPU, RAP_ERR_NO_GPU without); on a GPU
 *    the server then waits for the slots (HANDLES) and, when the trainer
 *    hangs up instead, exits with 0 (the input, never opened, does not
 *    exist: it is only read after HANDLES);
 *  - a model shape that does not fit the plan: told in SHAPE, 0;
 *  - a hang-up before CONFIG: 0;
 *  - a first message that is not CONFIG: no answer, 1. */
RAP_TEST(mps_server_binary)
{
    char rap[1024], plan_file[1024];
    rap_path(rap, sizeof rap);
    if (access(rap, X_OK) != 0)
        SKIP("%s not built", rap);
    plan_path(plan_file, sizeof plan_file);
    rap_plan *plan = NULL;
    REQUIRE_OK(rap_plan_load(plan_file, rap_schema_criteo(), &plan));
    int nd = 0, nt = 0;
    static int64_t table_rows[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(plan, &nd, &nt, table_rows));
    rap_plan_free(plan);
    bool gpu = rap_gpu_available(NULL, 0);

    /* without --fd: refused */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' prep-server >/dev/null 2>&1", rap);
    int rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);

    rap_mps_msg *m = new_msg();
    REQUIRE(m);
    pid_t pid = 0;
    int status = 0;
    bool closed = false;

    /* the shape, then the trainer hangs up instead of sending HANDLES */
    int fd = start_server(rap, false, &pid);
    REQUIRE(fd >= 0);
    fill_config(m, plan_file, nd, nt, table_rows);
    CHECK_OK(rap_mps_send(fd, m));
    CHECK_OK(rap_mps_recv(fd, m, &closed));
    CHECK(m->type == RAP_MPS_SHAPE);
    if (gpu) {
        CHECK_MSG(m->status == RAP_OK, "shape: %s", m->message);
        CHECK(m->n_tables == nt);
        for (int i = 0; i < m->n_tables; i++)
            CHECK(m->ids_cap[i] >= 1);
        /* it waits for the trainer's slots: still there */
        usleep(200 * 1000);
        CHECK_MSG(waitpid(pid, &status, WNOHANG) == 0,
                  "prep server ended (wait status 0x%x) before the trainer's HANDLES or hang-up",
                  status);
    } else {
        CHECK(m->status == RAP_ERR_NO_GPU);
        CHECK_MSG(strstr(m->message, "GPU") != NULL, "message: %s", m->message);
    }
    close(fd); /* the trainer hangs up */
    status = 0;
    CHECK_MSG(wait_server(pid, &status), "prep server still running 10 s after the hang-up");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "after the shape: wait status 0x%x",
              status);

    /* a configuration error is told (SHAPE), then a normal end */
    fd = start_server(rap, false, &pid);
    REQUIRE(fd >= 0);
    fill_config(m, plan_file, nd + 1, nt, table_rows);
    CHECK_OK(rap_mps_send(fd, m));
    CHECK_OK(rap_mps_recv(fd, m, &closed));
    CHECK(m->type == RAP_MPS_SHAPE);
    if (gpu)
        CHECK_MSG(m->status == RAP_ERR_ARG && strstr(m->message, "dense"), "shape: %s %s",
                  rap_status_name((rap_status)m->status), m->message);
    else
        CHECK(m->status == RAP_ERR_NO_GPU);
    close(fd);
    status = 0;
    CHECK_MSG(wait_server(pid, &status), "prep server still running 10 s after the hang-up");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "after an error: wait status 0x%x",
              status);

    /* the trainer hangs up before CONFIG: a normal end */
    fd = start_server(rap, false, &pid);
    REQUIRE(fd >= 0);
    close(fd);
    status = 0;
    CHECK_MSG(wait_server(pid, &status), "prep server still running 10 s after the hang-up");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "before CONFIG: wait status 0x%x",
              status);

    /* a first message that is not CONFIG: nothing to answer, status 1 */
    fd = start_server(rap, true, &pid);
    REQUIRE(fd >= 0);
    memset(m, 0, sizeof *m);
    m->type = RAP_MPS_RELEASE;
    m->slot = 0;
    CHECK_OK(rap_mps_send(fd, m));
    closed = false;
    CHECK(rap_mps_recv(fd, m, &closed) != RAP_OK && closed);
    close(fd);
    status = 0;
    CHECK_MSG(wait_server(pid, &status), "prep server still running 10 s after the hang-up");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 1, "not CONFIG: wait status 0x%x",
              status);
    free(m);
}
