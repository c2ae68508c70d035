/* mps_server.c -- the body of `rap prep-server` (mps.h, docs/MPS.md): one
 * client served on a socket -- the configuration checked against the plan,
 * the client's slots and events opened, then every raw batch of the row
 * feed preprocessed on the GPU into a free slot and announced, until the
 * end of the data, an error (sent to the client) or the client's hang-up.
 * CUDA calls sit behind RAP_HAVE_CUDA. */
#include "run/mps_internal.h"

#include "core/cuda_util.h"
#include "run/input.h"
#include "run/pack.h"
#include "run/pipeline.h"
#include "run/rowfeed.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* Set in the server process by SIGTERM or the trainer's hang-up. */
volatile sig_atomic_t rap_mps_srv_stop;

/* The server's row feed, for rap_mps_server_stop (a signal handler). */
static _Atomic(rap_rowfeed *) g_srv_feed;

void rap_mps_server_stop(void)
{
    rap_mps_srv_stop = 1;
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
    rap_pipeline_prep side;       /* the fusion, the executor and the row feed */
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

/* Opens the client's slots and events, builds the preprocessing side
 * (the plan fused by levels, the executor, the row feed: the pipeline
 * builder's, run/pipeline.h). */
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
    rap_pipeline_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.plan = sv->plan;
    pc.fusion_kind = RAP_FUSE_LEVELS;
    pc.device = RAP_GPU;
    pc.stream = sv->stream;
    pc.batch_rows = sv->B;
    pc.feed = &fc;
    RAP_TRY(rap_pipeline_prep_create(&pc, &sv->side));
    atomic_store(&g_srv_feed, sv->side.feed);
    if (rap_mps_srv_stop)
        rap_rowfeed_stop(sv->side.feed);
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
        RAP_TRY(rap_prep_column(sv->side.prep, sv->dcol[i], &v));
        sv->pc[i].val = v.val;
        sv->pc[i].valid = v.valid;
        sv->pc[i].width = v.width;
    }
    RAP_TRY(rap_pack_dense_gpu(sv->pc, sv->n_dcols, rows, sv->nd, (float *)(base + sv->lay.dense),
                               sv->stream));
    const enum cudaMemcpyKind d2d = cudaMemcpyDeviceToDevice;
    RAP_CUDA_TRY(cudaMemcpyAsync(base + sv->lay.label, rap_prep_label(sv->side.prep),
                                 sizeof(float) * (size_t)rows, d2d, sv->stream));
    for (int t = 0; t < sv->nt; t++) {
        RAP_TRY(rap_prep_column(sv->side.prep, sv->scol[t], &v));
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
        if (rap_mps_srv_stop || !take_release(sv, st))
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
        st = rap_rowfeed_next(sv->side.feed, &fb, NULL);
        if (st != RAP_OK || !fb)
            break;
        if (fb->batch.rows == 0) { /* the end-of-pass marker: the end comes next */
            rap_rowfeed_release(sv->side.feed, fb);
            continue;
        }
        rap_status ws = RAP_OK;
        int s = rap_mps_srv_stop ? -1 : pick_slot(sv, &next_slot, &ws);
        if (s < 0) {
            rap_rowfeed_release(sv->side.feed, fb);
            st = rap_mps_srv_stop ? RAP_OK : ws; /* stopped: END says so below */
            gone = !rap_mps_srv_stop && ws == RAP_OK;
            break;
        }
        if (sv->wait_free[s]) {
            cudaError_t e = cudaStreamWaitEvent(sv->stream, sv->freev[s], 0);
            if (e != cudaSuccess) {
                rap_rowfeed_release(sv->side.feed, fb);
                st = rap_fail(RAP_ERR_CUDA, "mps: waiting on slot %d's free event: %s", s,
                              cudaGetErrorString(e));
                break;
            }
            sv->wait_free[s] = false;
        }
        int64_t rows = fb->batch.rows;
        st = rap_prep_load(sv->side.prep, &fb->batch);
        if (st == RAP_OK && cudaEventRecord(sv->copied, sv->stream) != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "mps: cudaEventRecord failed");
        if (st == RAP_OK)
            st = rap_prep_run(sv->side.prep);
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
        rap_rowfeed_release(sv->side.feed, fb);
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
    rap_rowfeed_get_stats(sv->side.feed, &fst);
    memset(m, 0, sizeof *m);
    if (gone)
        return; /* the trainer hung up: nobody to tell */
    m->type = RAP_MPS_END;
    m->status = st;
    if (st == RAP_OK && rap_mps_srv_stop) {
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
    rap_pipeline_prep_free(&sv->side);
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
        rap_pipeline_prep_free(&sv->side);
        if (rap_mps_send(fd, m) == RAP_OK) {
            /* releases may still come; the end is the trainer's hang-up */
            while (!rap_mps_srv_stop && rap_mps_recv(fd, m, &closed) == RAP_OK) {
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
