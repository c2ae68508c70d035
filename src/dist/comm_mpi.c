/*
 * comm_mpi.c -- the mpi backend of rap_comm (OpenMPI), compiled only with
 * RAP_HAVE_MPI (the Makefile defines it when mpicc reports its flags);
 * otherwise rap_comm_mpi_init fails with a clear message.
 *
 * Every collective is started non-blocking (MPI_Ialltoallv, MPI_Iallreduce,
 * MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier) and polled with MPI_Testall
 * against the comm's deadline. Counts are converted to int (MPI's type):
 * a count past INT_MAX elements is refused. Inside a group the requests
 * are collected and completed together at group_end. The functions are
 * the mpi backend table (mpi_ops, comm_internal.h); comm.c has checked
 * their arguments.
 */
#include "dist/comm_internal.h"

#ifdef RAP_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <string.h>
#include <time.h>

typedef struct {
    MPI_Comm comm;
    int n_req;                                   /* pending requests (group) */
    MPI_Request req[RAP_COMM_MAX_GROUP];
    int *counts;                                 /* (MAX_GROUP, 4, R) int counts/displs */
    const char *group_name;
} mpi_state;

static int g_mpi_comms;        /* live MPI comms of this process */
static bool g_we_initialised;  /* MPI_Init was ours: finalize with the last comm */

bool rap_comm_have_mpi(void) { return true; }

static rap_status mpi_err(rap_comm *c, int e, const char *what, const char *name)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(e, msg, &len);
    c->broken = true;
    return rap_fail(RAP_ERR_IO, "rank %d: collective %s: %s failed: %s", c->rank, name, what, msg);
}

/* Polls the pending requests until all complete or the deadline. */
static rap_status mpi_complete(rap_comm *c, const char *name)
{
    mpi_state *s = c->be;
    double deadline = rap_now() + c->timeout;
    long spins = 0;
    while (s->n_req > 0) {
        int flag = 0;
        int e = MPI_Testall(s->n_req, s->req, &flag, MPI_STATUSES_IGNORE);
        if (e != MPI_SUCCESS) {
            s->n_req = 0;
            return mpi_err(c, e, "MPI_Testall", name);
        }
        if (flag) {
            s->n_req = 0;
            return RAP_OK;
        }
        if (++spins > 2000) {
            if (rap_now() > deadline) {
                s->n_req = 0; /* left pending: the comm is broken, the job aborts */
                return rap_comm_timeout_error(c, name);
            }
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    return RAP_OK;
}

/* A request slot (and its int arrays) for the next collective. */
static rap_status mpi_slot(rap_comm *c, const char *name, int *slot)
{
    mpi_state *s = c->be;
    if (s->n_req >= RAP_COMM_MAX_GROUP)
        return rap_fail(RAP_ERR_ARG, "collective %s: more than %d collectives in one group", name,
                        RAP_COMM_MAX_GROUP);
    *slot = s->n_req;
    return RAP_OK;
}

/* After starting request `slot`: complete now unless in a group. */
static rap_status mpi_started(rap_comm *c, int e, const char *what, const char *name)
{
    mpi_state *s = c->be;
    if (e != MPI_SUCCESS)
        return mpi_err(c, e, what, name);
    s->n_req++;
    if (c->in_group) {
        s->group_name = name;
        return RAP_OK;
    }
    return mpi_complete(c, name);
}

static MPI_Datatype mpi_type(rap_comm_type t)
{
    return t == RAP_COMM_F32 ? MPI_FLOAT : t == RAP_COMM_F64 ? MPI_DOUBLE : MPI_INT64_T;
}

static const rap_comm_backend mpi_ops;

rap_status rap_comm_mpi_init(rap_comm **out)
{
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        int e = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (e != MPI_SUCCESS)
            return rap_fail(RAP_ERR_IO, "MPI_Init_thread failed (error %d)", e);
        g_we_initialised = true;
        if (provided < MPI_THREAD_SERIALIZED)
            rap_warn("MPI gives thread level %d, below MPI_THREAD_SERIALIZED: call rap's "
                     "collectives from the thread that started MPI",
                     provided);
    }
    rap_comm *c = rap_calloc(sizeof *c, "rap_comm");
    mpi_state *s = rap_calloc(sizeof *s, "mpi comm");
    int R = 0, r = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &R);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    int *counts = rap_calloc(sizeof(int) * RAP_COMM_MAX_GROUP * 4 * (size_t)(R > 0 ? R : 1),
                             "mpi counts");
    if (!c || !s || !counts) {
        rap_free(c), rap_free(s), rap_free(counts);
        return RAP_ERR_NOMEM;
    }
    s->counts = counts;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &s->comm) != MPI_SUCCESS) {
        rap_free(c), rap_free(s), rap_free(counts);
        return rap_fail(RAP_ERR_IO, "MPI_Comm_dup(MPI_COMM_WORLD) failed");
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    c->kind = RAP_COMM_MPI;
    c->ops = &mpi_ops;
    c->rank = r;
    c->size = R;
    c->timeout = rap_comm_default_timeout();
    c->be = s;
    g_mpi_comms++;
    *out = c;
    return RAP_OK;
}

static void mpi_free(rap_comm *c)
{
    mpi_state *s = c->be;
    if (!s)
        return;
    if (!c->broken)
        MPI_Comm_free(&s->comm);
    rap_free(s->counts);
    rap_free(s);
    c->be = NULL;
    if (--g_mpi_comms == 0 && g_we_initialised && !c->broken) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Finalize();
        g_we_initialised = false;
    }
}

static void mpi_abort(rap_comm *c, int code)
{
    mpi_state *s = c->be;
    MPI_Abort(s ? s->comm : MPI_COMM_WORLD, code ? code : 1);
}

static rap_status to_int(int64_t v, int *out, const char *name)
{
    if (v < 0 || v > INT_MAX)
        return rap_fail(RAP_ERR_ARG, "collective %s: count or displacement %lld is past MPI's int",
                        name, (long long)v);
    *out = (int)v;
    return RAP_OK;
}

static rap_status mpi_alltoallv(rap_comm *c, const void *send, const int64_t *scount,
                                const int64_t *sdispl, void *recv, const int64_t *rcount,
                                const int64_t *rdispl, rap_comm_type type, const char *name)
{
    mpi_state *s = c->be;
    int slot = 0, R = c->size;
    RAP_TRY(mpi_slot(c, name, &slot));
    int *sc = s->counts + (size_t)slot * 4 * R, *sd = sc + R, *rc = sd + R, *rd = rc + R;
    for (int p = 0; p < R; p++) {
        RAP_TRY(to_int(scount[p], &sc[p], name));
        RAP_TRY(to_int(sdispl[p], &sd[p], name));
        RAP_TRY(to_int(rcount[p], &rc[p], name));
        RAP_TRY(to_int(rdispl[p], &rd[p], name));
    }
    int e = MPI_Ialltoallv(send, sc, sd, mpi_type(type), recv, rc, rd, mpi_type(type), s->comm,
                           &s->req[slot]);
    return mpi_started(c, e, "MPI_Ialltoallv", name);
}

static rap_status mpi_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                const char *name)
{
    mpi_state *s = c->be;
    int slot = 0, ni = 0;
    RAP_TRY(mpi_slot(c, name, &slot));
    RAP_TRY(to_int(n, &ni, name));
    int e = MPI_Iallreduce(MPI_IN_PLACE, buf, ni, mpi_type(type), MPI_SUM, s->comm, &s->req[slot]);
    return mpi_started(c, e, "MPI_Iallreduce", name);
}

static rap_status mpi_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                                const char *name)
{
    mpi_state *s = c->be;
    int slot = 0, ni = 0;
    RAP_TRY(mpi_slot(c, name, &slot));
    RAP_TRY(to_int(n, &ni, name));
    int e = MPI_Ibcast(buf, ni, mpi_type(type), root, s->comm, &s->req[slot]);
    return mpi_started(c, e, "MPI_Ibcast", name);
}

static rap_status mpi_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                                const char *name)
{
    mpi_state *s = c->be;
    int slot = 0, ni = 0;
    RAP_TRY(mpi_slot(c, name, &slot));
    RAP_TRY(to_int((int64_t)bytes, &ni, name));
    int e = MPI_Iallgather(send, ni, MPI_BYTE, recv, ni, MPI_BYTE, s->comm, &s->req[slot]);
    return mpi_started(c, e, "MPI_Iallgather", name);
}

static rap_status mpi_barrier(rap_comm *c, const char *name)
{
    mpi_state *s = c->be;
    int slot = 0;
    RAP_TRY(mpi_slot(c, name, &slot));
    int e = MPI_Ibarrier(s->comm, &s->req[slot]);
    return mpi_started(c, e, "MPI_Ibarrier", name);
}

static rap_status mpi_group_end(rap_comm *c, const char *name)
{
    return mpi_complete(c, name);
}

static const rap_comm_backend mpi_ops = {
    .alltoallv = mpi_alltoallv,
    .allreduce = mpi_allreduce,
    .broadcast = mpi_broadcast,
    .allgather = mpi_allgather,
    .barrier = mpi_barrier,
    .group_end = mpi_group_end,
    .abort = mpi_abort,
    .free = mpi_free,
};

#else /* !RAP_HAVE_MPI */

bool rap_comm_have_mpi(void) { return false; }

rap_status rap_comm_mpi_init(rap_comm **out)
{
    *out = NULL;
    return rap_fail(RAP_ERR_ARG, "this rap was built without MPI (no mpicc/OpenMPI headers "
                                 "when it was compiled): install libopenmpi-dev and rebuild");
}

#endif
