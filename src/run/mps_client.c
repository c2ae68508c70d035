/* mps_client.c -- the trainer's side of the mps mode (mps.h, docs/MPS.md):
 * starts `rap prep-server`, sends it the configuration, allocates and
 * exports the S slots and their interprocess events, then hands the
 * server's batches to the trainer and gives the slots back. CUDA calls
 * sit behind RAP_HAVE_CUDA. */
#include "run/mps_internal.h"

#include "core/cuda_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
        int status = rap_mps_stop_child(c->pid, c->stop_timeout);
        c->pid = 0;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            char why[160];
            rap_mps_describe_status(status, why, sizeof why);
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
    int status = rap_mps_stop_child(c->pid, c->stop_timeout);
    c->pid = 0;
    rap_mps_describe_status(status, why, n);
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
        rap_mps_child_fail("start the prep server", argv[0]);
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
