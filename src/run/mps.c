/* mps.c -- the mps preprocessing mode (mps.h, docs/MPS.md): the message
 * codec, the MPS daemon control, the trainer-side client and the
 * `rap prep-server` body. CUDA calls sit behind RAP_HAVE_CUDA. */
#include "run/mps.h"

#include "core/core.h"
#include "core/cuda_util.h"
#include "run/input.h"
#include "run/pack.h"
#include "run/rowfeed.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MPS_MAGIC 0x4d504152u /* "RAPM" */
#define MPS_HEADER 12
#define MPS_SMALL 256         /* frame buffer for BATCH / RELEASE */
#define MPS_BIG 65536         /* any other frame */

/* Set in the server process by SIGTERM or the trainer's hang-up. */
static volatile sig_atomic_t g_srv_stop;

/* ================================================================ codec */

typedef struct {
    uint8_t *p;
    size_t cap, len;
    bool over;
} wbuf;

static void w_bytes(wbuf *w, const void *x, size_t n)
{
    if (w->over || n > w->cap - w->len) {
        w->over = true;
        return;
    }
    memcpy(w->p + w->len, x, n);
    w->len += n;
}
static void w_u32(wbuf *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_i32(wbuf *w, int32_t v) { w_bytes(w, &v, 4); }
static void w_i64(wbuf *w, int64_t v) { w_bytes(w, &v, 8); }
static void w_f64(wbuf *w, double v) { w_bytes(w, &v, 8); }
static void w_str(wbuf *w, const char *s, size_t field)
{
    size_t n = strnlen(s, field - 1);
    w_u32(w, (uint32_t)n);
    w_bytes(w, s, n);
}

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *bad; /* first problem, NULL if none */
} rbuf;

static void r_bytes(rbuf *r, void *x, size_t n)
{
    if (r->bad)
        return;
    if (n > r->len - r->pos) {
        r->bad = "message shorter than its fields";
        memset(x, 0, n);
        return;
    }
    memcpy(x, r->p + r->pos, n);
    r->pos += n;
}
static uint32_t r_u32(rbuf *r)
{
    uint32_t v = 0;
    r_bytes(r, &v, 4);
    return v;
}
static int32_t r_i32(rbuf *r)
{
    int32_t v = 0;
    r_bytes(r, &v, 4);
    return v;
}
static int64_t r_i64(rbuf *r)
{
    int64_t v = 0;
    r_bytes(r, &v, 8);
    return v;
}
static double r_f64(rbuf *r)
{
    double v = 0;
    r_bytes(r, &v, 8);
    return v;
}
static void r_str(rbuf *r, char *s, size_t field)
{
    uint32_t n = r_u32(r);
    s[0] = 0;
    if (r->bad)
        return;
    if (n >= field) {
        r->bad = "string longer than its field";
        return;
    }
    r_bytes(r, s, n);
    s[r->bad ? 0 : n] = 0;
}

static void put_stats(wbuf *w, const rap_reader_stats *st)
{
    w_i64(w, st->rows_read);
    w_i64(w, st->rows_used);
    w_i64(w, st->rows_rejected);
    w_i64(w, st->bytes_read);
    w_i32(w, st->files);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        w_i64(w, st->rejected[i]);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        for (int j = 0; j < RAP_REJ_EXAMPLES; j++)
            w_str(w, st->example[i][j], sizeof st->example[i][j]);
}

static void get_stats(rbuf *r, rap_reader_stats *st)
{
    st->rows_read = r_i64(r);
    st->rows_used = r_i64(r);
    st->rows_rejected = r_i64(r);
    st->bytes_read = r_i64(r);
    st->files = r_i32(r);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        st->rejected[i] = r_i64(r);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        for (int j = 0; j < RAP_REJ_EXAMPLES; j++)
            r_str(r, st->example[i][j], sizeof st->example[i][j]);
}

rap_status rap_mps_encode(const rap_mps_msg *m, uint8_t *buf, size_t cap, size_t *len)
{
    *len = 0;
    if (m->type < RAP_MPS_CONFIG || m->type >= RAP_MPS_MSG_COUNT)
        return rap_fail(RAP_ERR_ARG, "mps: cannot encode message type %d", (int)m->type);
    wbuf w = {buf, cap, 0, false};
    w_u32(&w, MPS_MAGIC);
    w_u32(&w, (uint32_t)m->type);
    w_u32(&w, 0); /* payload length, patched below */
    switch (m->type) {
    case RAP_MPS_CONFIG:
        if (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES)
            return rap_fail(RAP_ERR_ARG, "mps: CONFIG with %d tables", m->n_tables);
        w_i32(&w, m->version);
        w_str(&w, m->plan, sizeof m->plan);
        w_str(&w, m->input, sizeof m->input);
        w_i32(&w, m->threads);
        w_i32(&w, m->bad_rows);
        w_i32(&w, m->follow);
        w_f64(&w, m->idle_timeout_s);
        w_i64(&w, m->max_line);
        w_i64(&w, m->max_rows);
        w_i64(&w, m->batch_rows);
        w_i32(&w, m->n_slots);
        w_i32(&w, m->schema.n_dense);
        w_i32(&w, m->schema.n_sparse);
        w_i32(&w, m->schema.ids_per_row);
        w_i32(&w, m->n_dense);
        w_i32(&w, m->n_tables);
        w_i32(&w, m->device);
        w_i32(&w, m->log_level);
        w_bytes(&w, m->table_rows, sizeof(int64_t) * (size_t)m->n_tables);
        break;
    case RAP_MPS_SHAPE:
        if (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES)
            return rap_fail(RAP_ERR_ARG, "mps: SHAPE with %d tables", m->n_tables);
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        w_i32(&w, m->n_tables);
        w_bytes(&w, m->ids_cap, sizeof(int64_t) * (size_t)m->n_tables);
        break;
    case RAP_MPS_HANDLES:
        if (m->n_slots < 0 || m->n_slots > RAP_MPS_MAX_SLOTS)
            return rap_fail(RAP_ERR_ARG, "mps: HANDLES with %d slots", m->n_slots);
        w_i32(&w, m->n_slots);
        w_bytes(&w, m->mem_handle, RAP_MPS_HANDLE);
        w_i64(&w, (int64_t)m->total_bytes);
        w_i64(&w, (int64_t)m->slot_bytes);
        for (int s = 0; s < m->n_slots; s++) {
            w_bytes(&w, m->ready_handle[s], RAP_MPS_HANDLE);
            w_bytes(&w, m->free_handle[s], RAP_MPS_HANDLE);
        }
        break;
    case RAP_MPS_READY:
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        break;
    case RAP_MPS_BATCH:
        w_i32(&w, m->slot);
        w_i64(&w, m->seq);
        w_i64(&w, m->rows);
        break;
    case RAP_MPS_RELEASE:
        w_i32(&w, m->slot);
        break;
    case RAP_MPS_END:
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        w_i64(&w, m->batches);
        w_i64(&w, m->rows);
        put_stats(&w, &m->stats);
        break;
    default:
        break;
    }
    if (w.over)
        return rap_fail(RAP_ERR_ARG, "mps: message type %d does not fit in %zu bytes",
                        (int)m->type, cap);
    uint32_t payload = (uint32_t)(w.len - MPS_HEADER);
    memcpy(buf + 8, &payload, 4);
    *len = w.len;
    return RAP_OK;
}

rap_status rap_mps_decode(const uint8_t *buf, size_t len, rap_mps_msg *m)
{
    if (len < MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: frame of %zu bytes, expected at least a %d-byte header",
                        len, MPS_HEADER);
    rbuf r = {buf, len, 0, NULL};
    uint32_t magic = r_u32(&r), type = r_u32(&r), payload = r_u32(&r);
    if (magic != MPS_MAGIC)
        return rap_fail(RAP_ERR_DATA, "mps: frame starts with 0x%08x, expected the magic 0x%08x",
                        magic, MPS_MAGIC);
    if (type < RAP_MPS_CONFIG || type >= RAP_MPS_MSG_COUNT)
        return rap_fail(RAP_ERR_DATA, "mps: unknown message type %u", type);
    if ((size_t)payload != len - MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: header says %u payload bytes, the frame holds %zu",
                        payload, len - MPS_HEADER);
    m->type = (rap_mps_msg_type)type;
    switch (m->type) {
    case RAP_MPS_CONFIG:
        m->version = r_i32(&r);
        r_str(&r, m->plan, sizeof m->plan);
        r_str(&r, m->input, sizeof m->input);
        m->threads = r_i32(&r);
        m->bad_rows = r_i32(&r);
        m->follow = r_i32(&r);
        m->idle_timeout_s = r_f64(&r);
        m->max_line = r_i64(&r);
        m->max_rows = r_i64(&r);
        m->batch_rows = r_i64(&r);
        m->n_slots = r_i32(&r);
        m->schema.n_dense = r_i32(&r);
        m->schema.n_sparse = r_i32(&r);
        m->schema.ids_per_row = r_i32(&r);
        m->n_dense = r_i32(&r);
        m->n_tables = r_i32(&r);
        m->device = r_i32(&r);
        m->log_level = r_i32(&r);
        if (!r.bad && (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES))
            return rap_fail(RAP_ERR_DATA, "mps: CONFIG with %d tables, expected 0..%d",
                            m->n_tables, RAP_MAX_TABLES);
        r_bytes(&r, m->table_rows, sizeof(int64_t) * (size_t)(r.bad ? 0 : m->n_tables));
        break;
    case RAP_MPS_SHAPE:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        m->n_tables = r_i32(&r);
        if (!r.bad && (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES))
            return rap_fail(RAP_ERR_DATA, "mps: SHAPE with %d tables, expected 0..%d",
                            m->n_tables, RAP_MAX_TABLES);
        r_bytes(&r, m->ids_cap, sizeof(int64_t) * (size_t)(r.bad ? 0 : m->n_tables));
        break;
    case RAP_MPS_HANDLES:
        m->n_slots = r_i32(&r);
        if (!r.bad && (m->n_slots < 0 || m->n_slots > RAP_MPS_MAX_SLOTS))
            return rap_fail(RAP_ERR_DATA, "mps: HANDLES with %d slots, expected 0..%d",
                            m->n_slots, RAP_MPS_MAX_SLOTS);
        r_bytes(&r, m->mem_handle, RAP_MPS_HANDLE);
        m->total_bytes = (uint64_t)r_i64(&r);
        m->slot_bytes = (uint64_t)r_i64(&r);
        for (int s = 0; s < m->n_slots && !r.bad; s++) {
            r_bytes(&r, m->ready_handle[s], RAP_MPS_HANDLE);
            r_bytes(&r, m->free_handle[s], RAP_MPS_HANDLE);
        }
        break;
    case RAP_MPS_READY:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        break;
    case RAP_MPS_BATCH:
        m->slot = r_i32(&r);
        m->seq = r_i64(&r);
        m->rows = r_i64(&r);
        break;
    case RAP_MPS_RELEASE:
        m->slot = r_i32(&r);
        break;
    case RAP_MPS_END:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        m->batches = r_i64(&r);
        m->rows = r_i64(&r);
        get_stats(&r, &m->stats);
        break;
    default:
        break;
    }
    if (r.bad)
        return rap_fail(RAP_ERR_DATA, "mps: message type %u: %s", type, r.bad);
    if (r.pos != len)
        return rap_fail(RAP_ERR_DATA, "mps: message type %u: %zu bytes left over", type,
                        len - r.pos);
    return RAP_OK;
}

static size_t frame_cap(rap_mps_msg_type t)
{
    return t == RAP_MPS_BATCH || t == RAP_MPS_RELEASE ? MPS_SMALL : MPS_BIG;
}

rap_status rap_mps_send(int fd, const rap_mps_msg *m)
{
    uint8_t small[MPS_SMALL];
    size_t cap = frame_cap(m->type), len = 0;
    uint8_t *buf = cap == MPS_SMALL ? small : rap_malloc(cap, "mps message");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = rap_mps_encode(m, buf, cap, &len);
    for (size_t done = 0; st == RAP_OK && done < len;) {
        ssize_t n = send(fd, buf + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            st = rap_fail(RAP_ERR_IO, "mps: sending message type %d: %s", (int)m->type,
                          n < 0 ? strerror(errno) : "nothing written");
        else
            done += (size_t)n;
    }
    if (buf != small)
        rap_free(buf);
    return st;
}

/* Reads exactly n bytes. Returns 1 on success, 0 on end of stream before
 * any byte, -1 on an error or an end in the middle (errno set). */
static int read_full(int fd, void *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = recv(fd, (char *)p + done, n - done, 0);
        if (k < 0 && errno == EINTR && !g_srv_stop)
            continue; /* a signal; in the server, SIGTERM ends the wait */
        if (k < 0)
            return -1;
        if (k == 0) {
            if (done == 0)
                return 0;
            errno = EPIPE;
            return -1;
        }
        done += (size_t)k;
    }
    return 1;
}

rap_status rap_mps_recv(int fd, rap_mps_msg *m, bool *closed)
{
    if (closed)
        *closed = false;
    uint8_t head[MPS_HEADER];
    int k = read_full(fd, head, MPS_HEADER);
    if (k == 0) {
        if (closed)
            *closed = true;
        return rap_fail(RAP_ERR_IO, "mps: the other side closed the connection");
    }
    if (k < 0)
        return rap_fail(RAP_ERR_IO, "mps: reading a message header: %s", strerror(errno));
    uint32_t magic, payload;
    memcpy(&magic, head, 4);
    memcpy(&payload, head + 8, 4);
    if (magic != MPS_MAGIC || payload > RAP_MPS_MAX_FRAME - MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: bad frame header (magic 0x%08x, %u payload bytes)",
                        magic, payload);
    size_t len = MPS_HEADER + (size_t)payload;
    uint8_t small[MPS_SMALL];
    uint8_t *buf = len <= MPS_SMALL ? small : rap_malloc(len, "mps message");
    if (!buf)
        return RAP_ERR_NOMEM;
    memcpy(buf, head, MPS_HEADER);
    rap_status st = RAP_OK;
    if (payload && read_full(fd, buf + MPS_HEADER, payload) != 1)
        st = rap_fail(RAP_ERR_IO, "mps: reading a %u-byte message: %s", payload,
                      strerror(errno ? errno : EPIPE));
    if (st == RAP_OK)
        st = rap_mps_decode(buf, len, m);
    if (buf != small)
        rap_free(buf);
    return st;
}

/* ================================================================ layout */

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

void rap_mps_layout_free(rap_mps_layout *l)
{
    if (!l)
        return;
    rap_free(l->off);
    rap_free(l->ids);
    memset(l, 0, sizeof *l);
}

rap_status rap_mps_layout_make(int64_t B, int nd, int nt, const int64_t *ids_cap,
                               rap_mps_layout *l)
{
    memset(l, 0, sizeof *l);
    if (B < 1 || nd < 0 || nt < 0 || nt > RAP_MAX_TABLES || B > ((int64_t)1 << 40))
        return rap_fail(RAP_ERR_ARG, "mps: slot of %lld rows, %d dense, %d tables", (long long)B,
                        nd, nt);
    l->off = rap_calloc(sizeof(size_t) * (size_t)(nt ? nt : 1), "mps layout");
    l->ids = rap_calloc(sizeof(size_t) * (size_t)(nt ? nt : 1), "mps layout");
    if (!l->off || !l->ids) {
        rap_mps_layout_free(l);
        return RAP_ERR_NOMEM;
    }
    double total = 0;
    size_t at = 0;
    l->dense = at;
    at = align256(at + sizeof(float) * (size_t)B * (size_t)nd);
    l->label = at;
    at = align256(at + sizeof(float) * (size_t)B);
    total = (double)at;
    for (int t = 0; t < nt; t++) {
        if (ids_cap[t] < 1 || ids_cap[t] > (1 << 20)) {
            rap_mps_layout_free(l);
            return rap_fail(RAP_ERR_ARG, "mps: table %d with %lld ids per row", t,
                            (long long)ids_cap[t]);
        }
        l->off[t] = at;
        at = align256(at + sizeof(int64_t) * (size_t)(B + 1));
        l->ids[t] = at;
        at = align256(at + sizeof(int64_t) * (size_t)B * (size_t)ids_cap[t]);
        total += 8.0 * (double)(B + 1) + 8.0 * (double)B * (double)ids_cap[t] + 512;
    }
    if (total > 1e15) {
        rap_mps_layout_free(l);
        return rap_fail(RAP_ERR_ARG, "mps: a slot of %.3g bytes", total);
    }
    l->bytes = at;
    return RAP_OK;
}

/* ================================================================ processes */

/* Waits up to timeout_s for pid to end. Returns true (and *status) when it
 * was reaped. */
static bool wait_for(pid_t pid, double timeout_s, int *status)
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
static int stop_child(pid_t pid, double timeout_s)
{
    int status = 0;
    if (wait_for(pid, timeout_s, &status))
        return status;
    kill(pid, SIGTERM);
    if (wait_for(pid, timeout_s, &status))
        return status;
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

static void describe_status(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "ended with wait status 0x%x", status);
}

/* In a forked child: only async-signal-safe calls. */
static void child_fail(const char *what, const char *path)
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
static int run_prog(char *const argv[], const char *input, const char *out_path, double timeout_s)
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
        child_fail("run", argv[0]);
    }
    close(in[0]);
    close(out);
    if (input) {
        size_t n = strlen(input);
        (void)!write(in[1], input, n);
    }
    close(in[1]);
    return stop_child(pid, timeout_s);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ================================================================ daemon */

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
        remove_tree(g_mps.pipe_dir);
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
    int status = run_prog(argv, NULL, out_path, 30.0);
    if (status != 0) {
        char what[128], said[512] = "";
        if (status < 0)
            snprintf(what, sizeof what, "could not be run (%s)", strerror(errno));
        else
            describe_status(status, what, sizeof what);
        FILE *f = fopen(out_path, "r");
        if (f) {
            if (!fgets(said, sizeof said, f))
                said[0] = 0;
            said[strcspn(said, "\n")] = 0;
            fclose(f);
        }
        st = rap_fail(RAP_ERR_IO, "--mps-start: `%s -d` %s%s%s: no MPS daemon started",
                      g_mps.control, what, said[0] ? ": " : "", said);
        remove_tree(g_mps.pipe_dir);
        remove_tree(g_mps.log_dir);
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
    int status = run_prog(argv, "quit\n", NULL, 10.0);
    if (status != 0 && g_mps.guard_fd >= 0) {
        /* the guardian holds on: when this process ends it quits again and
         * removes the directories (the pipe directory is needed for that) */
        char what[128];
        if (status < 0)
            snprintf(what, sizeof what, "could not be run (%s)", strerror(errno));
        else
            describe_status(status, what, sizeof what);
        rap_warn("mps: `echo quit | %s` %s; retried when this process ends", g_mps.control,
                 what);
    } else {
        if (status != 0)
            rap_warn("mps: `echo quit | %s` failed (wait status 0x%x)", g_mps.control, status);
        remove_tree(g_mps.pipe_dir);
        remove_tree(g_mps.log_dir);
        if (g_mps.guard_fd >= 0) {
            (void)!write(g_mps.guard_fd, "done\n", 5);
            close(g_mps.guard_fd);
            g_mps.guard_fd = -1;
            int gs;
            if (!wait_for(g_mps.guard_pid, 5.0, &gs)) {
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

/* ================================================================ client */

struct rap_mps_client {
    int fd;                 /* our end of the socket */
    pid_t pid;              /* the server, 0 once reaped */
    int S;
    int64_t B;
    int nd, nt;
    rap_mps_layout lay;
    void *base;             /* (S * lay.bytes) device memory, exported */
    void *ready[RAP_MPS_MAX_SLOTS], *freev[RAP_MPS_MAX_SLOTS]; /* cudaEvent_t */
    bool held[RAP_MPS_MAX_SLOTS];
    rap_mps_msg *msg;       /* scratch for received messages */
    rap_mps_msg *rel;       /* scratch for RELEASE */
    rap_mps_stats st;
    double stop_timeout;
    char exe[RAP_MPS_PATH];
};

void rap_mps_client_get_stats(const rap_mps_client *c, rap_mps_stats *st)
{
    if (c)
        *st = c->st;
    else
        memset(st, 0, sizeof *st);
}

int rap_mps_client_pid(const rap_mps_client *c) { return c ? (int)c->pid : 0; }

void rap_mps_client_free(rap_mps_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0) {
        shutdown(c->fd, SHUT_RDWR);
        close(c->fd);
        c->fd = -1;
    }
    if (c->pid > 0) {
        int status = stop_child(c->pid, c->stop_timeout);
        c->pid = 0;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            char why[160];
            describe_status(status, why, sizeof why);
            rap_debug("mps: prep server %s", why);
        }
    }
#ifdef RAP_HAVE_CUDA
    if (c->base || c->ready[0]) {
        /* the trainer's queued work may still read the slots */
        cudaDeviceSynchronize();
        for (int s = 0; s < c->S; s++) {
            if (c->ready[s])
                cudaEventDestroy((cudaEvent_t)c->ready[s]);
            if (c->freev[s])
                cudaEventDestroy((cudaEvent_t)c->freev[s]);
        }
        if (c->base)
            cudaFree(c->base);
        cudaGetLastError();
    }
#endif
    rap_mps_layout_free(&c->lay);
    rap_free(c->msg);
    rap_free(c->rel);
    rap_free(c);
}

#ifdef RAP_HAVE_CUDA

/* Reaps the server after the socket failed; fills why. */
static void reap_server(rap_mps_client *c, char *why, size_t n)
{
    if (c->pid <= 0) {
        snprintf(why, n, "already reaped");
        return;
    }
    int status = stop_child(c->pid, c->stop_timeout);
    c->pid = 0;
    describe_status(status, why, n);
}

/* Starts `exe prep-server --fd N` with the other end of a socketpair. */
static rap_status spawn_server(rap_mps_client *c)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return rap_fail(RAP_ERR_IO, "mps: socketpair: %s", strerror(errno));
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
    char *argv[] = {c->exe, "prep-server", "--fd", fdarg, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return rap_fail(RAP_ERR_IO, "mps: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0); /* terminal signals go to the trainer, which stops us */
        if (fcntl(sv[1], F_SETFD, 0) != 0)
            _exit(127);
        execv(argv[0], argv);
        child_fail("start the prep server", argv[0]);
    }
    close(sv[1]);
    c->fd = sv[0];
    c->pid = pid;
    return RAP_OK;
}

/* Receives a message of type want; a hang-up becomes an error naming how
 * the server ended. */
static rap_status recv_expect(rap_mps_client *c, rap_mps_msg_type want)
{
    bool closed = false;
    rap_status st = rap_mps_recv(c->fd, c->msg, &closed);
    if (st != RAP_OK) {
        char why[160];
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        reap_server(c, why, sizeof why);
        return rap_fail(closed ? RAP_ERR_INTERNAL : st, "prep server (%s) %s%s%s", c->exe, why,
                        closed ? "" : ": ", closed ? "" : msg);
    }
    if (c->msg->type != want)
        return rap_fail(RAP_ERR_INTERNAL, "mps: expected message type %d from the prep server, "
                                          "got %d", (int)want, (int)c->msg->type);
    return RAP_OK;
}

static rap_status client_setup(rap_mps_client *c, const rap_mps_config *cfg)
{
    rap_mps_msg *m = c->msg;
    int dev = 0;
    RAP_CUDA_TRY(cudaGetDevice(&dev));
    RAP_TRY(spawn_server(c));

    memset(m, 0, sizeof *m);
    m->type = RAP_MPS_CONFIG;
    m->version = RAP_MPS_VERSION;
    snprintf(m->plan, sizeof m->plan, "%s", cfg->plan);
    snprintf(m->input, sizeof m->input, "%s", cfg->reader.input ? cfg->reader.input : "");
    m->threads = cfg->reader.threads;
    m->bad_rows = (int32_t)cfg->reader.bad_rows;
    m->follow = cfg->reader.follow;
    m->idle_timeout_s = cfg->reader.idle_timeout_s;
    m->max_line = cfg->reader.max_line;
    m->max_rows = cfg->reader.max_rows;
    m->batch_rows = cfg->batch_rows;
    m->n_slots = cfg->n_slots;
    m->schema = cfg->schema;
    m->n_dense = cfg->n_dense;
    m->n_tables = cfg->n_tables;
    m->device = dev;
    m->log_level = rap_log_level();
    memcpy(m->table_rows, cfg->table_rows, sizeof(int64_t) * (size_t)cfg->n_tables);
    RAP_TRY(rap_mps_send(c->fd, m));

    RAP_TRY(recv_expect(c, RAP_MPS_SHAPE));
    if (m->status != RAP_OK)
        return rap_fail((rap_status)m->status, "prep server: %s", m->message);
    if (m->n_tables != c->nt)
        return rap_fail(RAP_ERR_INTERNAL, "mps: the server reports %d tables, expected %d",
                        m->n_tables, c->nt);
    RAP_TRY(rap_mps_layout_make(c->B, c->nd, c->nt, m->ids_cap, &c->lay));

    size_t total = c->lay.bytes * (size_t)c->S;
    RAP_TRY(rap_cuda_malloc(&c->base, total, "mps slots (model-ready batches)"));
    RAP_CUDA_TRY(cudaMemset(c->base, 0, total));
    memset(m, 0, sizeof *m);
    m->type = RAP_MPS_HANDLES;
    m->n_slots = c->S;
    cudaIpcMemHandle_t mh;
    RAP_CUDA_TRY(cudaIpcGetMemHandle(&mh, c->base));
    memcpy(m->mem_handle, &mh, RAP_MPS_HANDLE);
    m->total_bytes = total;
    m->slot_bytes = c->lay.bytes;
    for (int s = 0; s < c->S; s++) {
        cudaEvent_t r, f;
        RAP_CUDA_TRY(cudaEventCreateWithFlags(&r, cudaEventInterprocess | cudaEventDisableTiming));
        c->ready[s] = r;
        RAP_CUDA_TRY(cudaEventCreateWithFlags(&f, cudaEventInterprocess | cudaEventDisableTiming));
        c->freev[s] = f;
        cudaIpcEventHandle_t rh, fh;
        RAP_CUDA_TRY(cudaIpcGetEventHandle(&rh, r));
        RAP_CUDA_TRY(cudaIpcGetEventHandle(&fh, f));
        memcpy(m->ready_handle[s], &rh, RAP_MPS_HANDLE);
        memcpy(m->free_handle[s], &fh, RAP_MPS_HANDLE);
    }
    RAP_TRY(rap_mps_send(c->fd, m));
    RAP_TRY(recv_expect(c, RAP_MPS_READY));
    if (m->status != RAP_OK)
        return rap_fail((rap_status)m->status, "prep server: %s", m->message);
    return RAP_OK;
}

rap_status rap_mps_client_create(const rap_mps_config *cfg, rap_mps_client **out)
{
    _Static_assert(sizeof(cudaIpcMemHandle_t) == RAP_MPS_HANDLE, "IPC handle size");
    _Static_assert(sizeof(cudaIpcEventHandle_t) == RAP_MPS_HANDLE, "IPC handle size");
    *out = NULL;
    if (!cfg || !cfg->plan || !cfg->plan[0])
        return rap_fail(RAP_ERR_ARG, "mps: a plan (file or \"default\") is required");
    if (cfg->batch_rows < 1 || cfg->n_slots < 2 || cfg->n_slots > RAP_MPS_MAX_SLOTS)
        return rap_fail(RAP_ERR_ARG, "mps: batch of %lld rows and %d slots; expected B >= 1 and "
                                     "2 <= S <= %d",
                        (long long)cfg->batch_rows, cfg->n_slots, RAP_MPS_MAX_SLOTS);
    if (cfg->n_tables < 1 || cfg->n_tables > RAP_MAX_TABLES || cfg->n_dense < 1 ||
        !cfg->table_rows)
        return rap_fail(RAP_ERR_ARG, "mps: model shape with %d dense inputs and %d tables",
                        cfg->n_dense, cfg->n_tables);
    if (strlen(cfg->plan) >= RAP_MPS_PATH ||
        (cfg->reader.input && strlen(cfg->reader.input) >= RAP_MPS_PATH))
        return rap_fail(RAP_ERR_ARG, "mps: plan or input path longer than %d bytes",
                        RAP_MPS_PATH - 1);
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        return rap_fail(RAP_ERR_NO_GPU, "mps preprocessing needs a GPU: %s", why);
    rap_mps_client *c = rap_calloc(sizeof *c, "mps client");
    if (!c)
        return RAP_ERR_NOMEM;
    c->fd = -1;
    c->S = cfg->n_slots;
    c->B = cfg->batch_rows;
    c->nd = cfg->n_dense;
    c->nt = cfg->n_tables;
    c->stop_timeout = cfg->stop_timeout_s > 0 ? cfg->stop_timeout_s : 5.0;
    if (cfg->exe && cfg->exe[0]) {
        snprintf(c->exe, sizeof c->exe, "%s", cfg->exe);
    } else {
        ssize_t n = readlink("/proc/self/exe", c->exe, sizeof c->exe - 1);
        c->exe[n > 0 ? n : 0] = 0;
        if (n <= 0)
            snprintf(c->exe, sizeof c->exe, "/proc/self/exe");
    }
    c->msg = rap_calloc(sizeof *c->msg, "mps message");
    c->rel = rap_calloc(sizeof *c->rel, "mps message");
    if (!c->msg || !c->rel) {
        rap_mps_client_free(c);
        return RAP_ERR_NOMEM;
    }
    char how[RAP_MPS_PATH + 200];
    rap_info("mps: preprocessing in a second process (%s prep-server); %s", c->exe,
             rap_mps_describe(how, sizeof how));
    rap_status st = client_setup(c, cfg);
    if (st != RAP_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        rap_mps_client_free(c);
        return rap_fail(st, "%s", msg);
    }
    *out = c;
    return RAP_OK;
}

rap_status rap_mps_client_next(rap_mps_client *c, void *train_stream, int *slot,
                               rap_model_batch *mb, int64_t *rows)
{
    *slot = -1;
    *rows = 0;
    memset(mb, 0, sizeof *mb);
    if (c->st.ended) {
        if (c->st.error != RAP_OK)
            return rap_fail(c->st.error, "prep server: %s", c->st.message);
        return RAP_OK;
    }
    int held = 0;
    for (int s = 0; s < c->S; s++)
        held += c->held[s];
    if (held == c->S)
        return rap_fail(RAP_ERR_ARG, "mps: all %d slots are held: release one before asking for "
                                     "the next batch", c->S);
    bool closed = false;
    rap_status st = rap_mps_recv(c->fd, c->msg, &closed);
    if (st != RAP_OK) {
        char why[160], msg[512];
        snprintf(msg, sizeof msg, "%s", rap_last_error());
        reap_server(c, why, sizeof why);
        c->st.ended = true;
        c->st.error = closed ? RAP_ERR_INTERNAL : st;
        snprintf(c->st.message, sizeof c->st.message, "the server (%s) %s before the end of the "
                 "data%s%s", c->exe, why, closed ? "" : ": ", closed ? "" : msg);
        return rap_fail(c->st.error, "prep server: %s", c->st.message);
    }
    rap_mps_msg *m = c->msg;
    if (m->type == RAP_MPS_END) {
        c->st.ended = true;
        c->st.error = (rap_status)m->status;
        snprintf(c->st.message, sizeof c->st.message, "%s", m->message);
        c->st.server_batches = m->batches;
        c->st.server_rows = m->rows;
        c->st.reader = m->stats;
        if (c->st.error != RAP_OK)
            return rap_fail(c->st.error, "prep server: %s", c->st.message);
        return RAP_OK;
    }
    if (m->type != RAP_MPS_BATCH || m->slot < 0 || m->slot >= c->S || c->held[m->slot] ||
        m->rows < 1 || m->rows > c->B || m->seq != c->st.batches)
        return rap_fail(RAP_ERR_INTERNAL, "mps: unexpected message from the prep server (type "
                                          "%d, slot %d, batch %lld, %lld rows)",
                        (int)m->type, m->slot, (long long)m->seq, (long long)m->rows);
    int s = m->slot;
    RAP_CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)train_stream, (cudaEvent_t)c->ready[s], 0));
    char *base = (char *)c->base + (size_t)s * c->lay.bytes;
    mb->rows = m->rows;
    mb->dense = (const float *)(base + c->lay.dense);
    mb->label = (const float *)(base + c->lay.label);
    for (int t = 0; t < c->nt; t++) {
        mb->off[t] = (const int64_t *)(base + c->lay.off[t]);
        mb->ids[t] = (const int64_t *)(base + c->lay.ids[t]);
    }
    c->held[s] = true;
    c->st.batches++;
    c->st.rows += m->rows;
    *slot = s;
    *rows = m->rows;
    return RAP_OK;
}

rap_status rap_mps_client_release(rap_mps_client *c, int slot, void *train_stream)
{
    if (!c || slot < 0 || slot >= c->S || !c->held[slot])
        return rap_fail(RAP_ERR_ARG, "mps: release of slot %d, which is not held", slot);
    RAP_CUDA_TRY(cudaEventRecord((cudaEvent_t)c->freev[slot], (cudaStream_t)train_stream));
    c->held[slot] = false;
    if (c->st.ended)
        return RAP_OK; /* the server produces nothing more */
    c->rel->type = RAP_MPS_RELEASE;
    c->rel->slot = slot;
    return rap_mps_send(c->fd, c->rel);
}

#else /* no CUDA */

rap_status rap_mps_client_create(const rap_mps_config *cfg, rap_mps_client **out)
{
    (void)cfg;
    *out = NULL;
    char why[256];
    rap_gpu_available(why, sizeof why);
    return rap_fail(RAP_ERR_NO_GPU, "mps preprocessing needs a GPU shared through CUDA IPC: %s",
                    why);
}

rap_status rap_mps_client_next(rap_mps_client *c, void *train_stream, int *slot,
                               rap_model_batch *mb, int64_t *rows)
{
    (void)c;
    (void)train_stream;
    (void)mb;
    *slot = -1;
    *rows = 0;
    return rap_fail(RAP_ERR_NO_GPU, "mps preprocessing: built without CUDA");
}

rap_status rap_mps_client_release(rap_mps_client *c, int slot, void *train_stream)
{
    (void)c;
    (void)slot;
    (void)train_stream;
    return rap_fail(RAP_ERR_NO_GPU, "mps preprocessing: built without CUDA");
}

#endif

/* ================================================================ server */

/* The server's row feed, for rap_mps_server_stop (a signal handler). */
static _Atomic(rap_rowfeed *) g_srv_feed;

void rap_mps_server_stop(void)
{
    g_srv_stop = 1;
    rap_rowfeed *f = atomic_load(&g_srv_feed);
    if (f)
        rap_rowfeed_stop(f);
}

/* True when the trainer has hung up on fd: the last receive saw the end of
 * the stream (closed), or the socket reports the peer's close (it closed
 * with our messages unread: the receive or send then fails with ECONNRESET
 * or EPIPE instead). A hang-up is a normal end for the server, not an
 * error. */
static bool trainer_gone(int fd, bool closed)
{
    if (closed)
        return true;
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP));
}

/* Receives the first message, which must be CONFIG of this version.
 * RAP_OK with *gone set when the trainer hung up before sending it (nothing
 * to serve, nobody to tell); an error for anything else. */
static rap_status recv_config(int fd, rap_mps_msg *cfg, bool *gone)
{
    bool closed = false;
    *gone = false;
    rap_status st = rap_mps_recv(fd, cfg, &closed);
    if (st != RAP_OK) {
        *gone = trainer_gone(fd, closed);
        return *gone ? RAP_OK : st;
    }
    if (cfg->type != RAP_MPS_CONFIG || cfg->version != RAP_MPS_VERSION)
        return rap_fail(RAP_ERR_INTERNAL, "mps: expected CONFIG version %d, got type %d version %d",
                        RAP_MPS_VERSION, (int)cfg->type, cfg->version);
    return RAP_OK;
}

#ifdef RAP_HAVE_CUDA

typedef struct {
    int fd;
    rap_mps_msg *m;
    int S;
    int64_t B;
    int nd, nt;
    rap_plan *plan;
    rap_fusion fus;
    bool fus_ok;
    rap_prep *prep;
    rap_rowfeed *feed;
    cudaStream_t stream;
    cudaEvent_t copied;           /* after the batch upload: the host batch is free */
    char *base;                   /* the client's slots, opened */
    cudaEvent_t ready[RAP_MPS_MAX_SLOTS], freev[RAP_MPS_MAX_SLOTS];
    bool held[RAP_MPS_MAX_SLOTS]; /* handed to the client, not released */
    bool wait_free[RAP_MPS_MAX_SLOTS];
    rap_mps_layout lay;
    int64_t ids_cap[RAP_MAX_TABLES];
    int *dcol, *scol, n_dcols;
    rap_pack_col *pc;
    int wake[2];                  /* stops the hang-up watcher */
    pthread_t watcher;
    bool watching;
} server;

/* Ids capacity per row of a sparse node's buffer, as the executor sizes it
 * (exec.c set_static_views): the slot copies that many per row. */
static int64_t ids_cap_of(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    if (n->op == RAP_OP_INPUT)
        return p->schema.ids_per_row;
    if (n->off == RAP_OFF_SAME) {
        int64_t c = ids_cap_of(p, n->input);
        return n->ids_per_row > c ? n->ids_per_row : c;
    }
    if (n->off == RAP_OFF_ARANGE)
        return 1;
    return n->ids_per_row > 1 ? n->ids_per_row : 1;
}

/* Checks the plan against the client's model shape; fills the column
 * lists and ids capacities. */
static rap_status server_shape(server *sv, const rap_mps_msg *cfg)
{
    const rap_plan *p = sv->plan;
    if (p->schema.n_dense != cfg->schema.n_dense || p->schema.n_sparse != cfg->schema.n_sparse ||
        p->schema.ids_per_row != cfg->schema.ids_per_row)
        return rap_fail(RAP_ERR_ARG, "plan %s is for %d dense, %d sparse, %d ids per row; the "
                                     "trainer reads %d, %d, %d",
                        p->source, p->schema.n_dense, p->schema.n_sparse, p->schema.ids_per_row,
                        cfg->schema.n_dense, cfg->schema.n_sparse, cfg->schema.ids_per_row);
    int nd, nt;
    int64_t *rows = rap_malloc(sizeof(int64_t) * RAP_MAX_TABLES, "table rows");
    if (!rows)
        return RAP_ERR_NOMEM;
    rap_status st = rap_input_shape(p, &nd, &nt, rows);
    if (st == RAP_OK && (nd != cfg->n_dense || nt != cfg->n_tables))
        st = rap_fail(RAP_ERR_ARG, "plan %s gives %d dense inputs and %d tables; the model has "
                                   "%d and %d", p->source, nd, nt, cfg->n_dense, cfg->n_tables);
    for (int t = 0; st == RAP_OK && t < nt; t++)
        if (rows[t] != cfg->table_rows[t])
            st = rap_fail(RAP_ERR_ARG, "plan %s: table %d has %lld rows, the model's %lld",
                          p->source, t, (long long)rows[t], (long long)cfg->table_rows[t]);
    rap_free(rows);
    RAP_TRY(st);
    sv->nd = nd;
    sv->nt = nt;
    size_t nc = (size_t)p->n_cols;
    sv->dcol = rap_calloc(sizeof(int) * nc, "mps columns");
    sv->scol = rap_calloc(sizeof(int) * nc, "mps columns");
    sv->pc = rap_calloc(sizeof(rap_pack_col) * nc, "mps columns");
    if (!sv->dcol || !sv->scol || !sv->pc)
        return RAP_ERR_NOMEM;
    int t = 0;
    for (int c = 0; c < p->n_cols; c++) {
        int node = p->cols[c].node;
        if (p->nodes[node].kind == RAP_SPARSE) {
            sv->ids_cap[t] = ids_cap_of(p, node);
            sv->scol[t++] = c;
        } else {
            sv->dcol[sv->n_dcols++] = c;
        }
    }
    return RAP_OK;
}

/* Opens the client's slots and events, builds the executor and the
 * row feed. */
static rap_status server_open(server *sv, const rap_mps_msg *cfg, const rap_mps_msg *h)
{
    if (h->n_slots != sv->S || h->slot_bytes != sv->lay.bytes ||
        h->total_bytes != sv->lay.bytes * (uint64_t)sv->S)
        return rap_fail(RAP_ERR_INTERNAL, "mps: the client's slots (%d of %llu bytes) do not "
                                          "match the layout (%d of %zu bytes)",
                        h->n_slots, (unsigned long long)h->slot_bytes, sv->S, sv->lay.bytes);
    cudaIpcMemHandle_t mh;
    memcpy(&mh, h->mem_handle, RAP_MPS_HANDLE);
    void *base = NULL;
    RAP_CUDA_TRY(cudaIpcOpenMemHandle(&base, mh, cudaIpcMemLazyEnablePeerAccess));
    sv->base = base;
    for (int s = 0; s < sv->S; s++) {
        cudaIpcEventHandle_t eh;
        memcpy(&eh, h->ready_handle[s], RAP_MPS_HANDLE);
        RAP_CUDA_TRY(cudaIpcOpenEventHandle(&sv->ready[s], eh));
        memcpy(&eh, h->free_handle[s], RAP_MPS_HANDLE);
        RAP_CUDA_TRY(cudaIpcOpenEventHandle(&sv->freev[s], eh));
    }
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&sv->stream, cudaStreamNonBlocking));
    RAP_CUDA_TRY(cudaEventCreateWithFlags(&sv->copied, cudaEventDisableTiming));
    RAP_TRY(rap_fuse_levels(sv->plan, &sv->fus));
    sv->fus_ok = true;
    rap_prep_config pc = {.device = RAP_GPU, .max_rows = sv->B, .stream = sv->stream};
    RAP_TRY(rap_prep_create(sv->plan, &sv->fus, &pc, &sv->prep));
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = cfg->input;
    fc.reader.threads = cfg->threads;
    fc.reader.bad_rows = (rap_bad_rows)cfg->bad_rows;
    fc.reader.follow = cfg->follow != 0;
    fc.reader.idle_timeout_s = cfg->idle_timeout_s;
    if (cfg->max_line > 0)
        fc.reader.max_line = cfg->max_line;
    fc.reader.max_rows = cfg->max_rows;
    fc.batch_rows = sv->B;
    fc.n_batches = 3;
    fc.pinned = true;
    fc.passes = 1;
    fc.reader_batches = true; /* every row in order, batches as the reader reads them */
    fc.open_at_create = true; /* an input that cannot be opened is told in READY */
    RAP_TRY(rap_rowfeed_create(&fc, &sv->feed));
    atomic_store(&g_srv_feed, sv->feed);
    if (g_srv_stop)
        rap_rowfeed_stop(sv->feed);
    return RAP_OK;
}

/* Watches the socket for the client's hang-up (the client freed, or died)
 * while the main thread may be blocked in the reader. */
static void *watch_hangup(void *arg)
{
    server *sv = arg;
    struct pollfd pf[2] = {{sv->fd, POLLRDHUP, 0}, {sv->wake[0], POLLIN, 0}};
    for (;;) {
        int r = poll(pf, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (pf[1].revents & (POLLIN | POLLHUP)))
            return NULL;
        if (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            rap_mps_server_stop();
            return NULL;
        }
    }
}

/* Writes the loaded and run batch into slot s on the server's stream. */
static rap_status server_pack(server *sv, int s, int64_t rows)
{
    char *base = sv->base + (size_t)s * sv->lay.bytes;
    rap_col_view v;
    for (int i = 0; i < sv->n_dcols; i++) {
        RAP_TRY(rap_prep_column(sv->prep, sv->dcol[i], &v));
        sv->pc[i].val = v.val;
        sv->pc[i].valid = v.valid;
        sv->pc[i].width = v.width;
    }
    RAP_TRY(rap_pack_dense_gpu(sv->pc, sv->n_dcols, rows, sv->nd, (float *)(base + sv->lay.dense),
                               sv->stream));
    const enum cudaMemcpyKind d2d = cudaMemcpyDeviceToDevice;
    RAP_CUDA_TRY(cudaMemcpyAsync(base + sv->lay.label, rap_prep_label(sv->prep),
                                 sizeof(float) * (size_t)rows, d2d, sv->stream));
    for (int t = 0; t < sv->nt; t++) {
        RAP_TRY(rap_prep_column(sv->prep, sv->scol[t], &v));
        if (v.kind != RAP_SPARSE || !v.off || !v.ids)
            return rap_fail(RAP_ERR_INTERNAL, "mps: table %d's column is not sparse", t);
        RAP_CUDA_TRY(cudaMemcpyAsync(base + sv->lay.off[t], v.off,
                                     sizeof(int64_t) * (size_t)(rows + 1), d2d, sv->stream));
        /* the whole capacity: offsets may start anywhere inside it */
        RAP_CUDA_TRY(cudaMemcpyAsync(base + sv->lay.ids[t], v.ids,
                                     sizeof(int64_t) * (size_t)sv->B * (size_t)sv->ids_cap[t],
                                     d2d, sv->stream));
    }
    return RAP_OK;
}

/* Takes one message from the client: a RELEASE marks its slot free. false
 * when the client went away (*st RAP_OK) or misbehaved (*st set). */
static bool take_release(server *sv, rap_status *st)
{
    bool closed = false;
    *st = rap_mps_recv(sv->fd, sv->m, &closed);
    if (*st != RAP_OK) {
        if (closed)
            *st = RAP_OK;
        return false;
    }
    int r = sv->m->slot;
    if (sv->m->type != RAP_MPS_RELEASE || r < 0 || r >= sv->S || !sv->held[r]) {
        *st = rap_fail(RAP_ERR_INTERNAL, "mps: unexpected message type %d (slot %d) from the "
                                         "trainer", (int)sv->m->type, r);
        return false;
    }
    sv->held[r] = false;
    sv->wait_free[r] = true;
    return true;
}

/* A free slot for the next batch: reads the releases already sent, then,
 * while every slot is held, waits for one. Slots are taken in turn from
 * *next on, so a released slot rests as long as possible before reuse.
 * -1 when the client went away (*st RAP_OK) or misbehaved (*st set). */
static int pick_slot(server *sv, int *next, rap_status *st)
{
    *st = RAP_OK;
    for (;;) {
        struct pollfd pf = {sv->fd, POLLIN, 0};
        while (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLIN | POLLHUP | POLLERR)))
            if (!take_release(sv, st))
                return -1;
        for (int k = 0; k < sv->S; k++) {
            int s = (*next + k) % sv->S;
            if (!sv->held[s]) {
                *next = (s + 1) % sv->S;
                return s;
            }
        }
        if (g_srv_stop || !take_release(sv, st))
            return -1;
    }
}

/* The batch loop. Returns with the END message filled in sv->m (type 0
 * when the client went away and nothing is to be sent). */
static void server_loop(server *sv)
{
    rap_mps_msg *m = sv->m;
    int64_t seq = 0, rows_out = 0;
    int next_slot = 0;
    rap_status st = RAP_OK;
    bool gone = false;
    for (;;) {
        rap_row_batch *fb = NULL;
        st = rap_rowfeed_next(sv->feed, &fb, NULL);
        if (st != RAP_OK || !fb)
            break;
        if (fb->batch.rows == 0) { /* the end-of-pass marker: the end comes next */
            rap_rowfeed_release(sv->feed, fb);
            continue;
        }
        rap_status ws = RAP_OK;
        int s = g_srv_stop ? -1 : pick_slot(sv, &next_slot, &ws);
        if (s < 0) {
            rap_rowfeed_release(sv->feed, fb);
            st = g_srv_stop ? RAP_OK : ws; /* stopped: END says so below */
            gone = !g_srv_stop && ws == RAP_OK;
            break;
        }
        if (sv->wait_free[s]) {
            cudaError_t e = cudaStreamWaitEvent(sv->stream, sv->freev[s], 0);
            if (e != cudaSuccess) {
                rap_rowfeed_release(sv->feed, fb);
                st = rap_fail(RAP_ERR_CUDA, "mps: waiting on slot %d's free event: %s", s,
                              cudaGetErrorString(e));
                break;
            }
            sv->wait_free[s] = false;
        }
        int64_t rows = fb->batch.rows;
        st = rap_prep_load(sv->prep, &fb->batch);
        if (st == RAP_OK && cudaEventRecord(sv->copied, sv->stream) != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "mps: cudaEventRecord failed");
        if (st == RAP_OK)
            st = rap_prep_run(sv->prep);
        if (st == RAP_OK)
            st = server_pack(sv, s, rows);
        if (st == RAP_OK) {
            cudaError_t e = cudaEventRecord(sv->ready[s], sv->stream);
            if (e != cudaSuccess)
                st = rap_fail(RAP_ERR_CUDA, "mps: recording slot %d's ready event: %s", s,
                              cudaGetErrorString(e));
        }
        if (st == RAP_OK) {
            memset(m, 0, offsetof(rap_mps_msg, message));
            m->type = RAP_MPS_BATCH;
            m->slot = s;
            m->seq = seq;
            m->rows = rows;
            if (rap_mps_send(sv->fd, m) != RAP_OK) {
                gone = true; /* the client closed: nothing to tell it */
                st = RAP_OK;
            }
        }
        /* the host batch is free once its upload is done */
        cudaError_t e = cudaEventSynchronize(sv->copied);
        rap_rowfeed_release(sv->feed, fb);
        if (st == RAP_OK && e != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "mps: batch upload: %s", cudaGetErrorString(e));
        if (st != RAP_OK || gone)
            break;
        sv->held[s] = true;
        seq++;
        rows_out += rows;
    }
    /* every slot write done before the end is announced (and we may exit) */
    cudaError_t e = cudaStreamSynchronize(sv->stream);
    if (st == RAP_OK && e != cudaSuccess)
        st = rap_fail(RAP_ERR_CUDA, "mps: server stream: %s", cudaGetErrorString(e));
    rap_rowfeed_stats fst;
    rap_rowfeed_get_stats(sv->feed, &fst);
    memset(m, 0, sizeof *m);
    if (gone)
        return; /* the trainer hung up: nobody to tell */
    m->type = RAP_MPS_END;
    m->status = st;
    if (st == RAP_OK && g_srv_stop) {
        m->status = RAP_ERR_INTERRUPTED;
        snprintf(m->message, sizeof m->message, "stopped (SIGTERM or the trainer hung up) after "
                 "%lld batches", (long long)seq);
    } else if (st != RAP_OK) {
        snprintf(m->message, sizeof m->message, "%s", rap_last_error());
    }
    m->batches = seq;
    m->rows = rows_out;
    m->stats = fst.reader;
}

static void server_free(server *sv)
{
    if (sv->watching) {
        (void)!write(sv->wake[1], "x", 1);
        pthread_join(sv->watcher, NULL);
        sv->watching = false;
    }
    if (sv->wake[0] >= 0)
        close(sv->wake[0]);
    if (sv->wake[1] >= 0)
        close(sv->wake[1]);
    sv->wake[0] = sv->wake[1] = -1;
    atomic_store(&g_srv_feed, NULL);
    rap_rowfeed_free(sv->feed, NULL);
    sv->feed = NULL;
    rap_prep_free(sv->prep);
    sv->prep = NULL;
    if (sv->fus_ok)
        rap_fusion_free(&sv->fus);
    sv->fus_ok = false;
    if (sv->stream)
        cudaStreamSynchronize(sv->stream);
    for (int s = 0; s < sv->S; s++) {
        if (sv->ready[s])
            cudaEventDestroy(sv->ready[s]);
        if (sv->freev[s])
            cudaEventDestroy(sv->freev[s]);
        sv->ready[s] = sv->freev[s] = NULL;
    }
    if (sv->copied)
        cudaEventDestroy(sv->copied);
    if (sv->base)
        cudaIpcCloseMemHandle(sv->base);
    if (sv->stream)
        cudaStreamDestroy(sv->stream);
    cudaGetLastError();
    sv->copied = NULL;
    sv->base = NULL;
    sv->stream = NULL;
    rap_plan_free(sv->plan);
    sv->plan = NULL;
    rap_mps_layout_free(&sv->lay);
    rap_free(sv->dcol);
    rap_free(sv->scol);
    rap_free(sv->pc);
    sv->dcol = sv->scol = NULL;
    sv->pc = NULL;
}

/* Sends a SHAPE or READY reply carrying st (and the message when failed). */
static rap_status reply(server *sv, rap_mps_msg_type type, rap_status st)
{
    rap_mps_msg *m = sv->m;
    char msg[RAP_MPS_TEXT];
    snprintf(msg, sizeof msg, "%s", st == RAP_OK ? "" : rap_last_error());
    memset(m, 0, sizeof *m);
    m->type = type;
    m->status = st;
    snprintf(m->message, sizeof m->message, "%s", msg);
    if (type == RAP_MPS_SHAPE && st == RAP_OK) {
        m->n_tables = sv->nt;
        memcpy(m->ids_cap, sv->ids_cap, sizeof(int64_t) * (size_t)sv->nt);
    }
    return rap_mps_send(sv->fd, m);
}

rap_status rap_mps_server_run(int fd, rap_mps_plan_loader load)
{
    server *sv = rap_calloc(sizeof *sv, "mps server");
    rap_mps_msg *cfg = rap_calloc(sizeof *cfg, "mps message");
    rap_mps_msg *m = rap_calloc(sizeof *m, "mps message");
    if (!sv || !cfg || !m) {
        rap_free(sv);
        rap_free(cfg);
        rap_free(m);
        return RAP_ERR_NOMEM;
    }
    sv->fd = fd;
    sv->m = m;
    sv->wake[0] = sv->wake[1] = -1;
    bool closed = false, gone = false;
    rap_status st = recv_config(fd, cfg, &gone);
    if (st != RAP_OK || gone)
        goto done; /* no client to answer (an error), or it went away (RAP_OK) */
    rap_log_set_level(cfg->log_level);
    sv->S = cfg->n_slots;
    sv->B = cfg->batch_rows;
    /* the configuration, then the shape */
    rap_status cs = RAP_OK;
    char why[256];
    if (sv->S < 2 || sv->S > RAP_MPS_MAX_SLOTS || sv->B < 1)
        cs = rap_fail(RAP_ERR_ARG, "mps: %d slots of %lld rows", sv->S, (long long)sv->B);
    else if (!rap_gpu_available(why, sizeof why))
        cs = rap_fail(RAP_ERR_NO_GPU, "the prep server needs a GPU: %s", why);
    if (cs == RAP_OK) {
        cudaError_t e = cudaSetDevice(cfg->device);
        if (e != cudaSuccess)
            cs = rap_fail(RAP_ERR_CUDA, "mps: cudaSetDevice(%d): %s", cfg->device,
                          cudaGetErrorString(e));
    }
    if (cs == RAP_OK)
        cs = load(cfg->plan, &sv->plan);
    if (cs == RAP_OK)
        cs = server_shape(sv, cfg);
    if (cs == RAP_OK)
        cs = rap_mps_layout_make(sv->B, sv->nd, sv->nt, sv->ids_cap, &sv->lay);
    st = reply(sv, RAP_MPS_SHAPE, cs);
    if (st != RAP_OK && trainer_gone(fd, false))
        st = RAP_OK; /* it went away while we worked: nobody to tell */
    if (st != RAP_OK || cs != RAP_OK)
        goto done; /* cs: told; the trainer reports it */
    /* the handles; the trainer may hang up instead (it gave up after the
     * shape, or it is a test of this first exchange): a normal end */
    st = rap_mps_recv(fd, m, &closed);
    if (st != RAP_OK && trainer_gone(fd, closed)) {
        rap_debug("prep-server: the trainer hung up before sending the slots");
        st = RAP_OK;
        goto done;
    }
    if (st == RAP_OK && m->type != RAP_MPS_HANDLES)
        st = rap_fail(RAP_ERR_INTERNAL, "mps: expected HANDLES, got type %d", (int)m->type);
    if (st != RAP_OK)
        goto done;
    rap_mps_msg *h = rap_malloc(sizeof *h, "mps message");
    if (!h) {
        st = RAP_ERR_NOMEM;
        goto done;
    }
    *h = *m;
    cs = server_open(sv, cfg, h);
    rap_free(h);
    st = reply(sv, RAP_MPS_READY, cs);
    if (st != RAP_OK && trainer_gone(fd, false))
        st = RAP_OK; /* it went away while we opened: nobody to tell */
    if (st != RAP_OK || cs != RAP_OK)
        goto done; /* cs: told; the trainer reports it */
    if (pipe2(sv->wake, O_CLOEXEC) == 0 &&
        pthread_create(&sv->watcher, NULL, watch_hangup, sv) == 0)
        sv->watching = true;
    rap_debug("prep-server: serving %d slots of %lld rows (plan %s, input %s)", sv->S,
              (long long)sv->B, cfg->plan, cfg->input);
    server_loop(sv);
    if (m->type == RAP_MPS_END) {
        if (m->status != RAP_OK && m->status != RAP_ERR_INTERRUPTED)
            rap_debug("prep-server: ending with %s: %s", rap_status_name((rap_status)m->status),
                      m->message);
        /* free the executor now; keep the slots open until the trainer hangs up */
        if (sv->watching) {
            (void)!write(sv->wake[1], "x", 1);
            pthread_join(sv->watcher, NULL);
            sv->watching = false;
        }
        atomic_store(&g_srv_feed, NULL);
        rap_rowfeed_free(sv->feed, NULL);
        sv->feed = NULL;
        rap_prep_free(sv->prep);
        sv->prep = NULL;
        if (rap_mps_send(fd, m) == RAP_OK) {
            /* releases may still come; the end is the trainer's hang-up */
            while (!g_srv_stop && rap_mps_recv(fd, m, &closed) == RAP_OK) {
            }
        }
    }
    st = RAP_OK;
done:
    server_free(sv);
    rap_free(sv);
    rap_free(cfg);
    rap_free(m);
    return st;
}

#else /* no CUDA */

rap_status rap_mps_server_run(int fd, rap_mps_plan_loader load)
{
    (void)load;
    rap_mps_msg *m = rap_calloc(sizeof *m, "mps message");
    if (!m)
        return RAP_ERR_NOMEM;
    bool gone = false;
    rap_status st = recv_config(fd, m, &gone);
    if (st == RAP_OK && !gone) {
        char why[256];
        rap_gpu_available(why, sizeof why);
        rap_status e = rap_fail(RAP_ERR_NO_GPU, "the prep server needs a GPU: %s", why);
        memset(m, 0, sizeof *m);
        m->type = RAP_MPS_SHAPE;
        m->status = e;
        snprintf(m->message, sizeof m->message, "%s", rap_last_error());
        st = rap_mps_send(fd, m); /* told: the trainer reports it */
        if (st != RAP_OK && trainer_gone(fd, false))
            st = RAP_OK;          /* or it went away: nobody to tell */
        (void)e;
    }
    rap_free(m);
    return st;
}

#endif
