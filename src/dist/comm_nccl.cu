/*
 * comm_nccl.cu -- the nccl backend of rap_comm: device buffers, collectives
 * enqueued on the comm's stream. Compiled with RAP_HAVE_NCCL (CUDA builds
 * where nccl.h was found); otherwise stubs that fail with RAP_ERR_NO_GPU.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): init and
 * every enqueue may return ncclInProgress, and are then polled with
 * ncclCommGetAsyncError against the deadline. Completion on the GPU is
 * waited for by nccl_wait (cudaEventQuery/cudaStreamQuery polling,
 * ncclCommGetAsyncError, deadline, then ncclCommAbort). The functions are
 * the nccl backend table (nccl_ops, comm_internal.h); comm.c has checked
 * their arguments.
 */
#include "dist/comm_internal.h"

#if defined(RAP_HAVE_NCCL) && defined(RAP_HAVE_CUDA)

#include "core/cuda_util.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <string.h>
#include <time.h>

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    bool own_stream;
    int device;
} nccl_state;

extern "C" bool rap_comm_have_nccl(void) { return true; }

static void nap(void)
{
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static rap_status nccl_fail(rap_comm *c, ncclResult_t e, const char *what, const char *name)
{
    c->broken = true;
    return rap_fail(RAP_ERR_IO, "rank %d: collective %s: %s: %s (%s)", c->rank, name, what,
                    ncclGetErrorString(e), ncclGetLastError(NULL));
}

/* After a NCCL call in non-blocking mode: waits (bounded) while the comm
 * reports ncclInProgress. */
static rap_status nccl_settle(rap_comm *c, ncclResult_t e, const char *what, const char *name)
{
    nccl_state *s = (nccl_state *)c->be;
    double deadline = rap_now() + c->timeout;
    while (e == ncclInProgress) {
        if (rap_now() > deadline) {
            ncclCommAbort(s->comm);
            s->comm = NULL;
            return rap_comm_timeout_error(c, name);
        }
        nap();
        ncclResult_t a = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(s->comm, &a);
        e = q != ncclSuccess ? q : a;
    }
    if (e != ncclSuccess)
        return nccl_fail(c, e, what, name);
    return RAP_OK;
}

static void nccl_free(rap_comm *c);
static const rap_comm_backend *nccl_backend(void);

extern "C" rap_status rap_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out)
{
    *out = NULL;
    RAP_CUDA_TRY(cudaSetDevice(device));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (host->rank == 0) {
        ncclResult_t e = ncclGetUniqueId(&id);
        if (e != ncclSuccess)
            return rap_fail(RAP_ERR_IO, "ncclGetUniqueId: %s", ncclGetErrorString(e));
    }
    static_assert(sizeof(ncclUniqueId) % 8 == 0, "unique id of whole int64s");
    RAP_TRY(rap_comm_broadcast(host, &id, (int64_t)(sizeof id / 8), RAP_COMM_I64, 0,
                               "nccl unique id"));
    rap_comm *c = (rap_comm *)rap_calloc(sizeof *c, "rap_comm");
    nccl_state *s = (nccl_state *)rap_calloc(sizeof *s, "nccl comm");
    if (!c || !s) {
        rap_free(c), rap_free(s);
        return RAP_ERR_NOMEM;
    }
    c->kind = RAP_COMM_NCCL;
    c->ops = nccl_backend();
    c->rank = host->rank;
    c->size = host->size;
    c->timeout = host->timeout;
    c->host = host;
    c->be = s;
    s->device = device;
    if (stream) {
        s->stream = (cudaStream_t)stream;
    } else {
        cudaError_t ce = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
        if (ce != cudaSuccess) {
            rap_free(c), rap_free(s);
            return rap_fail(RAP_ERR_CUDA, "cudaStreamCreate: %s", cudaGetErrorString(ce));
        }
        s->own_stream = true;
    }
    c->stream = s->stream;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t e = ncclCommInitRankConfig(&s->comm, c->size, id, c->rank, &cfg);
    rap_status st = nccl_settle(c, e, "ncclCommInitRankConfig", "nccl init");
    if (st != RAP_OK) {
        nccl_free(c);
        rap_free(c);
        return st;
    }
    *out = c;
    return RAP_OK;
}

static void nccl_abort(rap_comm *c)
{
    nccl_state *s = (nccl_state *)c->be;
    if (s && s->comm) {
        ncclCommAbort(s->comm);
        s->comm = NULL;
    }
}

static void nccl_free(rap_comm *c)
{
    nccl_state *s = (nccl_state *)c->be;
    if (!s)
        return;
    if (s->comm) {
        if (c->broken) {
            ncclCommAbort(s->comm);
        } else {
            ncclResult_t e = ncclCommFinalize(s->comm);
            if (nccl_settle(c, e, "ncclCommFinalize", "nccl finalize") == RAP_OK)
                ncclCommDestroy(s->comm);
            else if (s->comm)
                ncclCommAbort(s->comm);
        }
        s->comm = NULL;
    }
    if (s->own_stream)
        cudaStreamDestroy(s->stream);
    rap_free(s);
    c->be = NULL;
}

static ncclDataType_t nccl_type(rap_comm_type t)
{
    return t == RAP_COMM_F32 ? ncclFloat32 : t == RAP_COMM_F64 ? ncclFloat64 : ncclInt64;
}

static rap_status nccl_alltoallv(rap_comm *c, const void *send, const int64_t *scount,
                                 const int64_t *sdispl, void *recv, const int64_t *rcount,
                                 const int64_t *rdispl, rap_comm_type type, const char *name)
{
    nccl_state *s = (nccl_state *)c->be;
    size_t es = rap_comm_type_size(type);
    ncclDataType_t nt = nccl_type(type);
    if (!c->in_group)
        RAP_TRY(nccl_settle(c, ncclGroupStart(), "ncclGroupStart", name));
    for (int p = 0; p < c->size; p++) {
        if (scount[p] > 0) {
            ncclResult_t e = ncclSend((const char *)send + (size_t)sdispl[p] * es,
                                      (size_t)scount[p], nt, p, s->comm, s->stream);
            if (e != ncclSuccess && e != ncclInProgress)
                return nccl_fail(c, e, "ncclSend", name);
        }
        if (rcount[p] > 0) {
            ncclResult_t e = ncclRecv((char *)recv + (size_t)rdispl[p] * es, (size_t)rcount[p],
                                      nt, p, s->comm, s->stream);
            if (e != ncclSuccess && e != ncclInProgress)
                return nccl_fail(c, e, "ncclRecv", name);
        }
    }
    if (!c->in_group)
        return nccl_settle(c, ncclGroupEnd(), "ncclGroupEnd", name);
    return RAP_OK;
}

static rap_status nccl_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                 const char *name)
{
    nccl_state *s = (nccl_state *)c->be;
    ncclResult_t e = ncclAllReduce(buf, buf, (size_t)n, nccl_type(type), ncclSum, s->comm,
                                   s->stream);
    if (c->in_group)
        return e == ncclSuccess || e == ncclInProgress ? RAP_OK
                                                        : nccl_fail(c, e, "ncclAllReduce", name);
    return nccl_settle(c, e, "ncclAllReduce", name);
}

static rap_status nccl_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                 int root, const char *name)
{
    nccl_state *s = (nccl_state *)c->be;
    ncclResult_t e = ncclBroadcast(buf, buf, (size_t)n, nccl_type(type), root, s->comm,
                                   s->stream);
    if (c->in_group)
        return e == ncclSuccess || e == ncclInProgress ? RAP_OK
                                                        : nccl_fail(c, e, "ncclBroadcast", name);
    return nccl_settle(c, e, "ncclBroadcast", name);
}

static rap_status nccl_group_begin(rap_comm *c)
{
    return nccl_settle(c, ncclGroupStart(), "ncclGroupStart", "group");
}

static rap_status nccl_group_end(rap_comm *c, const char *name)
{
    return nccl_settle(c, ncclGroupEnd(), "ncclGroupEnd", name);
}

static rap_status nccl_wait(rap_comm *c, void *event, const char *name)
{
    nccl_state *s = (nccl_state *)c->be;
    double deadline = rap_now() + c->timeout;
    for (long spins = 0;; spins++) {
        cudaError_t q = event ? cudaEventQuery((cudaEvent_t)event) : cudaStreamQuery(s->stream);
        if (q == cudaSuccess)
            return RAP_OK;
        if (q != cudaErrorNotReady) {
            c->broken = true;
            return rap_fail(RAP_ERR_CUDA, "rank %d: waiting for %s: %s", c->rank, name,
                            cudaGetErrorString(q));
        }
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(s->comm, &a);
        if (a != ncclSuccess && a != ncclInProgress) {
            rap_status st = nccl_fail(c, a, "asynchronous NCCL error", name);
            nccl_abort(c);
            return st;
        }
        if (spins > 1000) {
            if (rap_now() > deadline) {
                nccl_abort(c);
                return rap_comm_timeout_error(c, name);
            }
            nap();
        }
    }
}

/* Aborts the NCCL comm, then its host comm (the host collectives of the
 * other ranks fail too). */
static void nccl_abort_all(rap_comm *c, int code)
{
    nccl_abort(c);
    rap_comm_abort(c->host, code);
}

/* In rap_comm_backend's member order. No allgather or barrier: comm.c
 * runs those on the host comm. */
static const rap_comm_backend nccl_ops = {
    nccl_alltoallv,   /* alltoallv */
    nccl_allreduce,   /* allreduce */
    nccl_broadcast,   /* broadcast */
    NULL,             /* allgather */
    NULL,             /* barrier */
    nccl_group_begin, /* group_begin */
    nccl_group_end,   /* group_end */
    nccl_wait,        /* wait */
    nccl_abort_all,   /* abort */
    nccl_free,        /* free */
};

/* The table (rap_nccl_create sets it in every nccl comm). */
static const rap_comm_backend *nccl_backend(void) { return &nccl_ops; }

#else /* no NCCL */

#define NO_NCCL                                                                      \
    return rap_fail(RAP_ERR_NO_GPU, "this rap was built without NCCL (CUDA and nccl.h " \
                                    "are needed when it is compiled)")

#ifdef __cplusplus
extern "C" {
#endif
bool rap_comm_have_nccl(void) { return false; }
rap_status rap_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out)
{
    *out = NULL;
    NO_NCCL;
}
#ifdef __cplusplus
}
#endif

#endif
