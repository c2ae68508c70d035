/*
 * comm_internal.h -- the rap_comm struct and the backend table that comm.c
 * calls (its own self and threads backends, comm_mpi.c, comm_nccl.cu). Not
 * for other modules.
 */
#ifndef RAP_DIST_COMM_INTERNAL_H
#define RAP_DIST_COMM_INTERNAL_H

#include "dist/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_COMM_MAX_GROUP 16

struct rap_threads_shared;

struct rap_comm {
    rap_comm_kind kind;
    const struct rap_comm_backend *ops; /* the backend of kind (below) */
    int rank, size;
    double timeout;                    /* seconds */
    bool broken;
    bool in_group;
    struct rap_threads_shared *sh;     /* threads: state shared by the R comms */
    void *be;                          /* mpi / nccl: the backend's state */
    rap_comm *host;                    /* nccl: comm of the host collectives */
    void *stream;                      /* nccl: cudaStream_t */
};

/* The error of a collective past its deadline; marks c broken. */
rap_status rap_comm_timeout_error(rap_comm *c, const char *name);
/* The error of a collective on a broken comm. */
rap_status rap_comm_broken_error(rap_comm *c, const char *name);
size_t rap_comm_type_size(rap_comm_type t);

/* A backend: one const table per kind, filled once in its own file
 * (self and threads: comm.c; mpi: comm_mpi.c; nccl: comm_nccl.cu) and set
 * by the function that makes the comm. comm.c checks the arguments and
 * that the comm is not broken before it calls an entry; an entry returns
 * a status and records one message (a failure that leaves the ranks out
 * of step marks the comm broken). Entries that may be NULL say what NULL
 * means. */
typedef struct rap_comm_backend {
    /* Elements of type from send[sdispl[p]..] (scount[p]) to rank p, from
     * rank p into recv[rdispl[p]..] (rcount[p]). */
    rap_status (*alltoallv)(rap_comm *c, const void *send, const int64_t *scount,
                            const int64_t *sdispl, void *recv, const int64_t *rcount,
                            const int64_t *rdispl, rap_comm_type type, const char *name);
    /* In place: every rank gets the sum of the n elements. */
    rap_status (*allreduce)(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                            const char *name);
    /* In place: every rank gets root's n elements. */
    rap_status (*broadcast)(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                            const char *name);
    /* Host comms only (NULL: the call is an internal error; comm.c sends
     * these to rap_comm_host). */
    rap_status (*allgather)(rap_comm *c, const void *send, size_t bytes, void *recv,
                            const char *name);
    rap_status (*barrier)(rap_comm *c, const char *name);
    /* Collectives between these two complete together (NULL: nothing to
     * do). */
    rap_status (*group_begin)(rap_comm *c);
    rap_status (*group_end)(rap_comm *c, const char *name);
    /* Waits for the device work before event (NULL: host collectives are
     * complete on return). */
    rap_status (*wait)(rap_comm *c, void *event, const char *name);
    /* Makes the other ranks' collectives fail now (NULL: nothing to tell
     * them); comm.c has marked c broken. */
    void (*abort)(rap_comm *c, int code);
    /* Frees the backend's state (NULL: none); comm.c frees c. */
    void (*free)(rap_comm *c);
} rap_comm_backend;

/* comm_nccl.cu: the nccl comm of host's ranks (comm.h
 * rap_comm_nccl_create, host checked); RAP_ERR_NO_GPU without NCCL. */
rap_status rap_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_COMM_INTERNAL_H */
