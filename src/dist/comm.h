/*
 * comm.h -- collectives between the ranks of a hybrid-parallel run
 * (docs/DIST.md "Ranks and processes").
 *
 * One rap_comm per rank. Backends:
 *   self     one rank: every collective is a copy or nothing.
 *   threads  R ranks as R threads of one process, over shared memory
 *            (rap_comm_threads_create makes all R; thread r uses comms[r]).
 *   mpi      one rank per process under mpirun (OpenMPI); built only when
 *            the MPI headers were found (RAP_HAVE_MPI).
 *   nccl     GPU buffers, on a CUDA stream; built only with CUDA and NCCL
 *            (RAP_HAVE_NCCL). Made from a host comm (mpi, threads or self)
 *            that carries the unique id, and that does its host collectives.
 *
 * Every rank calls the same collectives in the same order (as MPI). Buffers
 * are in the comm's memory: device memory for nccl (rap_comm_on_device),
 * host memory otherwise. Counts and displacements are in elements.
 *
 * Every collective has a deadline: rap_comm_timeout (default 60 s, or
 * RAP_COMM_TIMEOUT_S). A collective that does not complete in time fails
 * with RAP_ERR_IO and "rank R: collective NAME did not complete within T s
 * (a rank died or hangs)"; the comm is then broken (every later collective
 * fails at once). Under MPI the caller should then call rap_comm_abort,
 * which ends every process (MPI_Abort): the library never exits itself.
 *
 * Usage (threads):
 *     rap_comm *c[4];
 *     RAP_TRY(rap_comm_threads_create(4, c));
 *     // thread r: rap_comm_allreduce(c[r], grads, n, RAP_COMM_F32, "grads");
 *     for (r...) rap_comm_free(c[r]);
 */
#ifndef RAP_DIST_COMM_H
#define RAP_DIST_COMM_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RAP_COMM_SELF = 0,
    RAP_COMM_THREADS = 1,
    RAP_COMM_MPI = 2,
    RAP_COMM_NCCL = 3
} rap_comm_kind;

/* Element types of allreduce and broadcast. */
typedef enum { RAP_COMM_F32 = 0, RAP_COMM_F64 = 1, RAP_COMM_I64 = 2 } rap_comm_type;

typedef struct rap_comm rap_comm;

/* ------------------------------------------------------------ creation */

/* One rank, no communication. */
rap_status rap_comm_self_create(rap_comm **out);

/* R ranks (1 <= R <= 1024) sharing memory: comms[r] is rank r's comm, to
 * be used by one thread. Each is freed by rap_comm_free (the shared state
 * goes with the last one). */
rap_status rap_comm_threads_create(int R, rap_comm **comms);

/* Are we started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
 * PMIX_RANK set)? Puts the world size in *size when given (1 if not). */
bool rap_dist_detect(int *size);

/* Whether this build has the mpi / nccl backend. */
bool rap_comm_have_mpi(void);
bool rap_comm_have_nccl(void);

/* MPI_Init (once; MPI_Init_thread with MPI_THREAD_SERIALIZED) and a comm
 * over MPI_COMM_WORLD. rap_comm_free of the last MPI comm calls
 * MPI_Finalize. RAP_ERR_ARG when built without MPI. */
rap_status rap_comm_mpi_init(rap_comm **out);

/* A NCCL comm of host->size ranks, rank host->rank, on GPU `device`, whose
 * collectives run on `stream` (cudaStream_t; NULL = a stream of its own).
 * Every rank of `host` must call it at the same time (the unique id of
 * rank 0 is broadcast over `host`: in memory for threads, MPI_Bcast for
 * mpi). The host comm must outlive it; host collectives of the NCCL comm
 * (allgather, barrier, *_host) go through it. Initialisation is bounded by
 * the timeout too. RAP_ERR_NO_GPU when built without NCCL. */
rap_status rap_comm_nccl_create(rap_comm *host, int device, void *stream, rap_comm **out);

/* A second comm of c's ranks for the collectives of another thread (a
 * parser thread's, beside the training's): every rank of c calls it at the
 * same point, as a collective of c. threads: a new set of R comms shared
 * by the ranks (made by rank 0, handed out over c); self: a self comm;
 * nccl: a NCCL comm over c's host comm on GPU `device`, on a stream of its
 * own; mpi: RAP_ERR_ARG (MPI is initialised MPI_THREAD_SERIALIZED: one
 * thread's MPI calls at a time). The new comm takes c's timeout. */
rap_status rap_comm_dup(rap_comm *c, int device, rap_comm **out);

/* Frees one rank's comm (NCCL: ncclCommDestroy, or ncclCommAbort when
 * broken). Accepts NULL. */
void rap_comm_free(rap_comm *c);

/* ------------------------------------------------------------ queries */

int rap_comm_rank(const rap_comm *c);
int rap_comm_size(const rap_comm *c);
rap_comm_kind rap_comm_kind_of(const rap_comm *c);
const char *rap_comm_kind_name(rap_comm_kind k);
/* True for nccl: collective buffers are device pointers. */
bool rap_comm_on_device(const rap_comm *c);
/* The comm for host data: itself, or the host comm of a NCCL comm. */
rap_comm *rap_comm_host(rap_comm *c);
/* True once a collective failed or timed out. */
bool rap_comm_broken(const rap_comm *c);
/* Marks c broken (every later collective fails at once; freeing a nccl
 * comm then aborts it instead of finalizing): for a second comm of a rank
 * whose first one failed, which may wait for a peer that is gone. */
void rap_comm_set_broken(rap_comm *c);

/* The longest timeout, in seconds (a deadline stays a finite time). */
#define RAP_COMM_MAX_TIMEOUT_S 1e6

/* Timeout of every collective of this rank's comm, in seconds: values
 * <= 0 (and NaN) are ignored, larger ones than RAP_COMM_MAX_TIMEOUT_S
 * clamped to it. */
void rap_comm_set_timeout(rap_comm *c, double seconds);
double rap_comm_timeout(const rap_comm *c);
/* The default for new comms: RAP_COMM_TIMEOUT_S when it is a number of
 * seconds in (0, RAP_COMM_MAX_TIMEOUT_S], else 60 (with a warning when it
 * is set but not such a number). */
double rap_comm_default_timeout(void);

/* Ends every process of the job after a failure: MPI_Abort(code) for mpi
 * (and an nccl comm over mpi); ncclCommAbort for nccl; marks the comm
 * broken otherwise (then returns: the caller exits). */
void rap_comm_abort(rap_comm *c, int code);

/* ------------------------------------------------------------ collectives
 * `name` names the collective in error messages ("emb alltoall"). */

/* All-to-all-v of floats: sends send[sdispl[p] .. + scount[p]) to rank p
 * and receives rank p's block into recv[rdispl[p] .. + rcount[p]).
 * scount/sdispl/rcount/rdispl: (size) each, in elements. rcount[p] must
 * equal what p sends here (checked by threads; MPI/NCCL trust it). send
 * and recv must not overlap. */
rap_status rap_comm_alltoallv(rap_comm *c, const float *send, const int64_t *scount,
                              const int64_t *sdispl, float *recv, const int64_t *rcount,
                              const int64_t *rdispl, const char *name);

/* The same for elements of `type` (int64 ids, doubles or floats): counts and
 * displacements in elements of that type; the bits are moved as they are. */
rap_status rap_comm_alltoallv_type(rap_comm *c, const void *send, const int64_t *scount,
                                   const int64_t *sdispl, void *recv, const int64_t *rcount,
                                   const int64_t *rdispl, rap_comm_type type, const char *name);

/* In-place sum over the ranks of buf (n elements of type), the same sum
 * (bit for bit) on every rank. */
rap_status rap_comm_allreduce(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                              const char *name);

/* Root's buf (n elements of type) into every rank's buf. */
rap_status rap_comm_broadcast(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                              int root, const char *name);

/* Host memory always: every rank's `bytes` bytes of send into
 * recv[r * bytes ..] (recv: size * bytes). */
rap_status rap_comm_allgather(rap_comm *c, const void *send, size_t bytes, void *recv,
                              const char *name);

/* Host memory always: allreduce of host data (NCCL comms use their host
 * comm), for counters and losses. */
rap_status rap_comm_allreduce_host(rap_comm *c, void *buf, int64_t n, rap_comm_type type,
                                   const char *name);

/* Every rank reaches it before any leaves. */
rap_status rap_comm_barrier(rap_comm *c, const char *name);

/* Groups: the collectives between group_begin and group_end may run
 * concurrently (NCCL: one ncclGroup; MPI: started non-blocking, completed
 * at group_end; self/threads: run at once). Their buffers must not be
 * touched before group_end returns. No nesting; at most 16 collectives. */
rap_status rap_comm_group_begin(rap_comm *c);
rap_status rap_comm_group_end(rap_comm *c, const char *name);

/* NCCL: waits, polling against the timeout (and ncclCommGetAsyncError),
 * until `event` (a cudaEvent_t recorded after the collectives; NULL = the
 * whole stream) has completed; on timeout aborts the NCCL comm and fails.
 * Other backends: returns RAP_OK at once (their collectives complete
 * before returning). */
rap_status rap_comm_wait(rap_comm *c, void *event, const char *name);

/* The stream of a NCCL comm (NULL for others). */
void *rap_comm_stream(const rap_comm *c);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_COMM_H */
