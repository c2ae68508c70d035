/*
 * comm.c -- rap_comm: the common part (argument checks, then the comm's
 * backend table: comm_internal.h rap_comm_backend), and the tables of the
 * threads and self backends (mpi: comm_mpi.c, nccl: comm_nccl.cu).
 *
 * Threads backend: the R comms share one state with a barrier (mutex +
 * condition variable on CLOCK_MONOTONIC, timed waits) and one slot per
 * rank where a rank posts its buffers. A collective is: post, barrier,
 * read the others' posted buffers, barrier (so nobody reuses a buffer
 * still being read). Allreduce is in place without scratch memory: rank r
 * sums chunk r of every rank's buffer in rank order and writes the sum to
 * every buffer, so every rank gets the same bits.
 */
#include "dist/comm_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t rap_comm_type_size(rap_comm_type t)
{
    return t == RAP_COMM_F32 ? 4 : 8;
}

double rap_comm_default_timeout(void)
{
    const char *e = getenv("RAP_COMM_TIMEOUT_S");
    if (e && *e) {
        char *end = NULL;
        double v = strtod(e, &end);
        if (end && *end == 0 && v > 0 && v <= RAP_COMM_MAX_TIMEOUT_S)
            return v;
        rap_warn("RAP_COMM_TIMEOUT_S=%s is not a number of seconds in (0, %g]: using 60", e,
                 RAP_COMM_MAX_TIMEOUT_S);
    }
    return 60.0;
}

rap_status rap_comm_timeout_error(rap_comm *c, const char *name)
{
    c->broken = true;
    return rap_fail(RAP_ERR_IO,
                    "rank %d: collective %s did not complete within %g s (a rank died or hangs)",
                    c->rank, name, c->timeout);
}

rap_status rap_comm_broken_error(rap_comm *c, const char *name)
{
    c->broken = true;
    return rap_fail(RAP_ERR_IO,
                    "rank %d: collective %s: the communicator is broken (an earlier collective "
                    "failed or timed out, or a rank aborted)",
                    c->rank, name);
}

/* A comm of kind (ops its backend table); NULL on out of memory. */
static rap_comm *comm_new(rap_comm_kind kind, const rap_comm_backend *ops, int rank, int size)
{
    rap_comm *c = rap_calloc(sizeof *c, "rap_comm");
    if (!c)
        return NULL;
    c->kind = kind;
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->timeout = rap_comm_default_timeout();
    return c;
}

/* ------------------------------------------------------------ threads */

typedef struct {
    const void *send;          /* alltoallv, allgather */
    const int64_t *scount, *sdispl;
    void *buf;                 /* allreduce, broadcast */
} th_slot;

typedef struct rap_threads_shared {
    int R;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* CLOCK_MONOTONIC */
    int arrived;
    uint64_t gen;
    bool broken;
    bool timed_out;            /* broken by a rank's timeout (else an abort) */
    char why[200];             /* the first failure, for the others' messages */
    int refs;
    th_slot *slot;             /* (R) */
} th_shared;

/* The error of a rank that finds the shared state broken (mutex held). */
static rap_status th_broken_error(rap_comm *c, const char *name, bool was_waiting)
{
    th_shared *s = c->sh;
    c->broken = true;
    if (was_waiting && s->timed_out) /* it waited as long: the same diagnosis */
        return rap_comm_timeout_error(c, name);
    return rap_fail(RAP_ERR_IO, "rank %d: collective %s: the communicator is broken (%s)", c->rank,
                    name, s->why[0] ? s->why : "an earlier collective failed");
}

/* Waits until all R ranks arrived (or the deadline, or broken). */
static rap_status th_barrier(rap_comm *c, const char *name)
{
    th_shared *s = c->sh;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double whole = (double)(int64_t)c->timeout;
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((c->timeout - whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec += 1;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    if (s->broken) {
        rap_status st = th_broken_error(c, name, false);
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    uint64_t gen = s->gen;
    if (++s->arrived == s->R) {
        s->arrived = 0;
        s->gen++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return RAP_OK;
    }
    while (s->gen == gen && !s->broken) {
        int e = pthread_cond_timedwait(&s->cv, &s->mu, &dl);
        if (e == ETIMEDOUT && s->gen == gen && !s->broken) {
            s->broken = true; /* the others fail at once from now on */
            s->timed_out = true;
            snprintf(s->why, sizeof s->why,
                     "rank %d: collective %s did not complete within %g s (a rank died or hangs)",
                     c->rank, name, c->timeout);
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            return rap_comm_timeout_error(c, name);
        }
    }
    rap_status st = s->gen != gen ? RAP_OK : th_broken_error(c, name, true);
    pthread_mutex_unlock(&s->mu);
    return st;
}

static const rap_comm_backend threads_ops;

rap_status rap_comm_threads_create(int R, rap_comm **comms)
{
    if (R < 1 || R > 1024 || !comms)
        return rap_fail(RAP_ERR_ARG, "rap_comm_threads_create: R = %d (want 1..1024)", R);
    for (int r = 0; r < R; r++)
        comms[r] = NULL;
    th_shared *s = rap_calloc(sizeof *s, "threads comm");
    if (!s)
        return RAP_ERR_NOMEM;
    s->slot = rap_calloc(sizeof(th_slot) * (size_t)R, "threads comm slots");
    if (!s->slot) {
        rap_free(s);
        return RAP_ERR_NOMEM;
    }
    s->R = R;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    for (int r = 0; r < R; r++) {
        comms[r] = comm_new(RAP_COMM_THREADS, &threads_ops, r, R);
        if (!comms[r]) {
            for (int q = 0; q < r; q++)
                rap_free(comms[q]), comms[q] = NULL;
            pthread_cond_destroy(&s->cv);
            pthread_mutex_destroy(&s->mu);
            rap_free(s->slot);
            rap_free(s);
            return RAP_ERR_NOMEM;
        }
        comms[r]->sh = s;
    }
    s->refs = R;
    return RAP_OK;
}

static void th_release(rap_comm *c)
{
    th_shared *s = c->sh;
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        rap_free(s->slot);
        rap_free(s);
    }
    c->sh = NULL;
}

static rap_status th_alltoallv(rap_comm *c, const void *send, const int64_t *scount,
                               const int64_t *sdispl, void *recv, const int64_t *rcount,
                               const int64_t *rdispl, rap_comm_type type, const char *name)
{
    th_shared *s = c->sh;
    const size_t esize = rap_comm_type_size(type);
    int me = c->rank;
    s->slot[me].send = send;
    s->slot[me].scount = scount;
    s->slot[me].sdispl = sdispl;
    RAP_TRY(th_barrier(c, name));
    int bad = -1;
    for (int p = 0; p < s->R; p++) {
        const th_slot *sp = &s->slot[p];
        if (sp->scount[me] != rcount[p]) {
            if (bad < 0)
                bad = p;
            continue;
        }
        if (rcount[p] > 0)
            memcpy((char *)recv + (size_t)rdispl[p] * esize,
                   (const char *)sp->send + (size_t)sp->sdispl[me] * esize,
                   (size_t)rcount[p] * esize);
    }
    int64_t sent = bad >= 0 ? s->slot[bad].scount[me] : 0;
    RAP_TRY(th_barrier(c, name));
    if (bad >= 0)
        return rap_fail(RAP_ERR_ARG,
                        "rank %d: collective %s: rank %d sends %lld elements, %lld expected",
                        me, name, bad, (long long)sent, (long long)rcount[bad]);
    return RAP_OK;
}

static rap_status th_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                               const char *name)
{
    th_shared *s = c->sh;
    int me = c->rank, R = s->R;
    s->slot[me].buf = buf;
    RAP_TRY(th_barrier(c, name));
    int64_t i0 = n * me / R, i1 = n * (me + 1) / R;
    for (int64_t i = i0; i < i1; i++) {
        if (type == RAP_COMM_F32) {
            float v = ((float *)s->slot[0].buf)[i];
            for (int p = 1; p < R; p++)
                v += ((float *)s->slot[p].buf)[i];
            for (int p = 0; p < R; p++)
                ((float *)s->slot[p].buf)[i] = v;
        } else if (type == RAP_COMM_F64) {
            double v = ((double *)s->slot[0].buf)[i];
            for (int p = 1; p < R; p++)
                v += ((double *)s->slot[p].buf)[i];
            for (int p = 0; p < R; p++)
                ((double *)s->slot[p].buf)[i] = v;
        } else {
            int64_t v = ((int64_t *)s->slot[0].buf)[i];
            for (int p = 1; p < R; p++)
                v += ((int64_t *)s->slot[p].buf)[i];
            for (int p = 0; p < R; p++)
                ((int64_t *)s->slot[p].buf)[i] = v;
        }
    }
    return th_barrier(c, name);
}

static rap_status th_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                               const char *name)
{
    th_shared *s = c->sh;
    s->slot[c->rank].buf = buf;
    RAP_TRY(th_barrier(c, name));
    if (c->rank != root && n > 0)
        memcpy(buf, s->slot[root].buf, (size_t)n * rap_comm_type_size(type));
    return th_barrier(c, name);
}

static rap_status th_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                               const char *name)
{
    th_shared *s = c->sh;
    s->slot[c->rank].send = send;
    RAP_TRY(th_barrier(c, name));
    for (int p = 0; p < s->R; p++)
        if (bytes)
            memcpy((char *)recv + (size_t)p * bytes, s->slot[p].send, bytes);
    return th_barrier(c, name);
}

/* Breaks the shared state: every rank's collective fails at once. */
static void th_abort(rap_comm *c, int code)
{
    (void)code;
    pthread_mutex_lock(&c->sh->mu);
    if (!c->sh->broken)
        snprintf(c->sh->why, sizeof c->sh->why, "rank %d aborted", c->rank);
    c->sh->broken = true;
    pthread_cond_broadcast(&c->sh->cv);
    pthread_mutex_unlock(&c->sh->mu);
}

static const rap_comm_backend threads_ops = {
    .alltoallv = th_alltoallv,
    .allreduce = th_allreduce,
    .broadcast = th_broadcast,
    .allgather = th_allgather,
    .barrier = th_barrier,
    .abort = th_abort,
    .free = th_release,
};

/* ------------------------------------------------------------ self */

/* The self backend: one rank, whose all-to-all and all-gather are copies
 * (checked counts) and whose other collectives have nothing to do. */
static rap_status self_alltoallv(rap_comm *c, const void *send, const int64_t *scount,
                                 const int64_t *sdispl, void *recv, const int64_t *rcount,
                                 const int64_t *rdispl, rap_comm_type type, const char *name)
{
    size_t es = rap_comm_type_size(type);
    if (scount[0] != rcount[0])
        return rap_fail(RAP_ERR_ARG, "collective %s: sends %lld elements, receives %lld", name,
                        (long long)scount[0], (long long)rcount[0]);
    if (scount[0] > 0)
        memmove((char *)recv + (size_t)rdispl[0] * es, (const char *)send + (size_t)sdispl[0] * es,
                (size_t)scount[0] * es);
    return RAP_OK;
}

static rap_status self_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                 const char *name)
{
    return RAP_OK;
}

static rap_status self_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                                 const char *name)
{
    return RAP_OK;
}

static rap_status self_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                                 const char *name)
{
    if (bytes)
        memmove(recv, send, bytes);
    return RAP_OK;
}

static rap_status self_barrier(rap_comm *c, const char *name) { return RAP_OK; }

static const rap_comm_backend self_ops = {
    .alltoallv = self_alltoallv,
    .allreduce = self_allreduce,
    .broadcast = self_broadcast,
    .allgather = self_allgather,
    .barrier = self_barrier,
};

rap_status rap_comm_self_create(rap_comm **out)
{
    *out = comm_new(RAP_COMM_SELF, &self_ops, 0, 1);
    return *out ? RAP_OK : RAP_ERR_NOMEM;
}

/* ------------------------------------------------------------ common */

bool rap_dist_detect(int *size)
{
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (int i = 0; i < 3; i++) {
        const char *e = getenv(names[i]);
        if (e && *e) {
            if (size)
                *size = atoi(e) > 0 ? atoi(e) : 1;
            return true;
        }
    }
    if (getenv("PMIX_RANK")) {
        if (size)
            *size = 1;
        return true;
    }
    if (size)
        *size = 1;
    return false;
}

rap_status rap_comm_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out)
{
    *out = NULL;
    if (!host || host->kind == RAP_COMM_NCCL)
        return rap_fail(RAP_ERR_ARG, "rap_comm_nccl_create: needs a host comm (self, threads, mpi)");
    return rap_nccl_create(host, device, stream, out);
}

rap_status rap_comm_dup(rap_comm *c, int device, rap_comm **out)
{
    *out = NULL;
    if (!c)
        return rap_fail(RAP_ERR_ARG, "rap_comm_dup: no comm");
    rap_status st = RAP_OK;
    switch (c->kind) {
    case RAP_COMM_SELF:
        st = rap_comm_self_create(out);
        break;
    case RAP_COMM_NCCL:
        st = rap_comm_nccl_create(c->host, device, NULL, out);
        break;
    case RAP_COMM_MPI:
        return rap_fail(RAP_ERR_ARG, "rap_comm_dup: an mpi comm has one thread's collectives "
                        "at a time (MPI_THREAD_SERIALIZED)");
    case RAP_COMM_THREADS: {
        /* rank 0 makes the set; its address travels as an int64 */
        rap_comm **set = NULL;
        int64_t addr = 0;
        if (c->rank == 0) {
            set = rap_calloc(sizeof *set * (size_t)c->size, "threads comm");
            if (set && rap_comm_threads_create(c->size, set) == RAP_OK)
                addr = (int64_t)(intptr_t)set;
            else
                rap_clear_error();
        }
        st = rap_comm_broadcast(c, &addr, 1, RAP_COMM_I64, 0, "comm dup");
        if (st == RAP_OK && addr)
            *out = ((rap_comm **)(intptr_t)addr)[c->rank];
        rap_status bs = rap_comm_barrier(c, "comm dup"); /* every rank took its own */
        if (c->rank == 0)
            rap_free(set); /* the array; each rank owns its comm */
        if (st == RAP_OK && bs != RAP_OK)
            st = bs;
        if (st == RAP_OK && !addr)
            st = rap_fail(RAP_ERR_NOMEM, "rap_comm_dup: rank 0 could not make the threads comm");
        if (st != RAP_OK && *out) {
            rap_comm_free(*out);
            *out = NULL;
        }
        break;
    }
    }
    if (st == RAP_OK && *out)
        rap_comm_set_timeout(*out, c->timeout);
    return st;
}

void rap_comm_free(rap_comm *c)
{
    if (!c)
        return;
    if (c->ops->free)
        c->ops->free(c);
    rap_free(c);
}

int rap_comm_rank(const rap_comm *c) { return c->rank; }
int rap_comm_size(const rap_comm *c) { return c->size; }
rap_comm_kind rap_comm_kind_of(const rap_comm *c) { return c->kind; }
bool rap_comm_on_device(const rap_comm *c) { return c->kind == RAP_COMM_NCCL; }
rap_comm *rap_comm_host(rap_comm *c) { return c->kind == RAP_COMM_NCCL ? c->host : c; }
bool rap_comm_broken(const rap_comm *c) { return c->broken; }
void rap_comm_set_broken(rap_comm *c)
{
    if (c)
        c->broken = true;
}
void *rap_comm_stream(const rap_comm *c) { return c->kind == RAP_COMM_NCCL ? c->stream : NULL; }
double rap_comm_timeout(const rap_comm *c) { return c->timeout; }

const char *rap_comm_kind_name(rap_comm_kind k)
{
    switch (k) {
    case RAP_COMM_SELF: return "self";
    case RAP_COMM_THREADS: return "threads";
    case RAP_COMM_MPI: return "mpi";
    case RAP_COMM_NCCL: return "nccl";
    }
    return "?";
}

void rap_comm_set_timeout(rap_comm *c, double seconds)
{
    if (seconds > 0) /* NaN fails this too */
        c->timeout = seconds < RAP_COMM_MAX_TIMEOUT_S ? seconds : RAP_COMM_MAX_TIMEOUT_S;
}

void rap_comm_abort(rap_comm *c, int code)
{
    if (!c)
        return;
    c->broken = true;
    if (c->ops->abort)
        c->ops->abort(c, code);
}

/* Common checks of every collective. */
static rap_status pre(rap_comm *c, const char *name)
{
    if (c->broken)
        return rap_comm_broken_error(c, name);
    return RAP_OK;
}

rap_status rap_comm_alltoallv(rap_comm *c, const float *send, const int64_t *scount,
                              const int64_t *sdispl, float *recv, const int64_t *rcount,
                              const int64_t *rdispl, const char *name)
{
    RAP_TRY(pre(c, name));
    return c->ops->alltoallv(c, send, scount, sdispl, recv, rcount, rdispl, RAP_COMM_F32, name);
}

rap_status rap_comm_alltoallv_type(rap_comm *c, const void *send, const int64_t *scount,
                                   const int64_t *sdispl, void *recv, const int64_t *rcount,
                                   const int64_t *rdispl, rap_comm_type type, const char *name)
{
    RAP_TRY(pre(c, name));
    return c->ops->alltoallv(c, send, scount, sdispl, recv, rcount, rdispl, type, name);
}

rap_status rap_comm_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                              const char *name)
{
    RAP_TRY(pre(c, name));
    if (n < 0)
        return rap_fail(RAP_ERR_ARG, "collective %s: %lld elements", name, (long long)n);
    return c->ops->allreduce(c, buf, n, type, name);
}

rap_status rap_comm_allreduce_host(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                   const char *name)
{
    return rap_comm_allreduce(rap_comm_host(c), buf, n, type, name);
}

rap_status rap_comm_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                              const char *name)
{
    RAP_TRY(pre(c, name));
    if (root < 0 || root >= c->size || n < 0)
        return rap_fail(RAP_ERR_ARG, "collective %s: root %d of %d ranks, %lld elements", name,
                        root, c->size, (long long)n);
    return c->ops->broadcast(c, buf, n, type, root, name);
}

rap_status rap_comm_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                              const char *name)
{
    c = rap_comm_host(c);
    RAP_TRY(pre(c, name));
    if (!c->ops->allgather) /* a host comm has one */
        return RAP_ERR_INTERNAL;
    return c->ops->allgather(c, send, bytes, recv, name);
}

rap_status rap_comm_barrier(rap_comm *c, const char *name)
{
    c = rap_comm_host(c);
    RAP_TRY(pre(c, name));
    if (!c->ops->barrier) /* a host comm has one */
        return RAP_ERR_INTERNAL;
    return c->ops->barrier(c, name);
}

rap_status rap_comm_group_begin(rap_comm *c)
{
    if (c->in_group)
        return rap_fail(RAP_ERR_ARG, "rap_comm_group_begin: already in a group (no nesting)");
    RAP_TRY(pre(c, "group"));
    if (c->ops->group_begin)
        RAP_TRY(c->ops->group_begin(c));
    c->in_group = true;
    return RAP_OK;
}

rap_status rap_comm_group_end(rap_comm *c, const char *name)
{
    if (!c->in_group)
        return rap_fail(RAP_ERR_ARG, "rap_comm_group_end: no group begun");
    c->in_group = false;
    return c->ops->group_end ? c->ops->group_end(c, name) : RAP_OK;
}

rap_status rap_comm_wait(rap_comm *c, void *event, const char *name)
{
    if (!c->ops->wait)
        return RAP_OK;
    RAP_TRY(pre(c, name));
    return c->ops->wait(c, event, name);
}
