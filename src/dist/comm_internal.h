/*
 * comm_internal.h -- the rap_comm struct and the backend entry points that
 * comm.c dispatches to (comm_mpi.c, comm_nccl.cu). Not for other modules.
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

/* comm_mpi.c (stubs failing with RAP_ERR_ARG without RAP_HAVE_MPI). */
rap_status rap_mpi_alltoallv(rap_comm *c, const float *send, const int64_t *scount,
                             const int64_t *sdispl, float *recv, const int64_t *rcount,
                             const int64_t *rdispl, const char *name);
rap_status rap_mpi_alltoallv_type(rap_comm *c, const void *send, const int64_t *scount,
                                  const int64_t *sdispl, void *recv, const int64_t *rcount,
                                  const int64_t *rdispl, rap_comm_type type, const char *name);
rap_status rap_mpi_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                             const char *name);
rap_status rap_mpi_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                             const char *name);
rap_status rap_mpi_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                             const char *name);
rap_status rap_mpi_barrier(rap_comm *c, const char *name);
rap_status rap_mpi_group_end(rap_comm *c, const char *name);
void rap_mpi_abort(rap_comm *c, int code);
void rap_mpi_free(rap_comm *c);

/* comm_nccl.cu (stubs without RAP_HAVE_NCCL). */
rap_status rap_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out);
rap_status rap_nccl_alltoallv(rap_comm *c, const float *send, const int64_t *scount,
                              const int64_t *sdispl, float *recv, const int64_t *rcount,
                              const int64_t *rdispl, const char *name);
rap_status rap_nccl_alltoallv_type(rap_comm *c, const void *send, const int64_t *scount,
                                   const int64_t *sdispl, void *recv, const int64_t *rcount,
                                   const int64_t *rdispl, rap_comm_type type, const char *name);
rap_status rap_nccl_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                              const char *name);
rap_status rap_nccl_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type, int root,
                              const char *name);
rap_status rap_nccl_group_begin(rap_comm *c);
rap_status rap_nccl_group_end(rap_comm *c, const char *name);
rap_status rap_nccl_wait(rap_comm *c, void *event, const char *name);
void rap_nccl_abort(rap_comm *c);
void rap_nccl_free(rap_comm *c);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_COMM_INTERNAL_H */
