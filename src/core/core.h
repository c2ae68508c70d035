/*
 * core.h -- errors, logging, memory, time and a thread pool: what every
 * other module of librap uses. Nothing here exits the process.
 */
#ifndef RAP_CORE_H
#define RAP_CORE_H

#include "rap.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RAP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RAP_PRINTF(a, b)
#endif

/* Records a formatted message as this thread's last error and returns code,
 * so a failure is one line: `return rap_fail(RAP_ERR_IO, "%s: %s", ...)`. */
rap_status rap_fail(rap_status code, const char *fmt, ...) RAP_PRINTF(2, 3);
/* Prefixes the current message with "context: " and returns code. */
rap_status rap_fail_context(rap_status code, const char *fmt, ...) RAP_PRINTF(2, 3);
void rap_clear_error(void);

/* Returns from the enclosing function when a call fails. */
#define RAP_TRY(call)                    \
    do {                                 \
        rap_status rap_try_s_ = (call);  \
        if (rap_try_s_ != RAP_OK)        \
            return rap_try_s_;           \
    } while (0)

/* Logging to stderr. Level: 0 quiet, 1 warnings, 2 info (default), 3 debug. */
void rap_log_set_level(int level);
int rap_log_level(void);
void rap_info(const char *fmt, ...) RAP_PRINTF(1, 2);
void rap_warn(const char *fmt, ...) RAP_PRINTF(1, 2);
void rap_debug(const char *fmt, ...) RAP_PRINTF(1, 2);

/* Allocation that records "out of memory: N bytes for WHAT" on failure and
 * returns NULL. rap_calloc zeroes. rap_free accepts NULL. */
void *rap_malloc(size_t n, const char *what);
void *rap_calloc(size_t n, const char *what);
void *rap_realloc(void *p, size_t n, const char *what);
void rap_free(void *p);
/* 64-byte aligned, for arrays worked on by several threads or copied to GPU. */
void *rap_aligned_alloc(size_t n, const char *what);
void rap_aligned_free(void *p);
/* Page-locked host memory when a GPU is usable, else aligned memory;
 * *pinned says which. Free with rap_host_free(p, pinned). */
void *rap_host_alloc(size_t n, bool want_pinned, bool *pinned, const char *what);
void rap_host_free(void *p, bool pinned);
/* Bytes and calls of buffer allocation so far in this process: every
 * rap_aligned_alloc, rap_host_alloc and rap_cuda_malloc that succeeded
 * (the allocators of the model, the executor, batches, packing and the
 * exchanges; the small bookkeeping of rap_malloc / rap_calloc is not
 * counted). Atomic, never reset: the tests take a difference (the memory
 * plan refuses before any of these, docs/MEMORY.md). Either pointer may be
 * NULL. */
void rap_mem_counted(uint64_t *bytes, uint64_t *calls);
/* Records n bytes of one more buffer allocation (the allocators above
 * call it). */
void rap_mem_count(size_t n);

/* Monotonic seconds. */
double rap_now(void);
/* Number of online cores (>= 1). */
int rap_ncores(void);

/* A fixed pool of worker threads. rap_pool_for runs fn(ctx, i) for i in
 * [0, n) on the workers and the caller, returning when all are done. Not
 * reentrant: one rap_pool_for at a time per pool. */
typedef struct rap_pool rap_pool;
typedef void (*rap_pool_fn)(void *ctx, int64_t i);
rap_status rap_pool_create(int threads, rap_pool **out); /* threads 0 = cores */
int rap_pool_threads(const rap_pool *p);
void rap_pool_for(rap_pool *p, int64_t n, rap_pool_fn fn, void *ctx);
void rap_pool_free(rap_pool *p);

/* Splitmix64: the project's seedable hash/generator step. */
static inline uint64_t rap_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* The splitmix64 finaliser of x (one step from state x): the project's
 * one 64-bit mixer. Its values are in files already written (the plan and
 * fusion hashes of schedules and checkpoints, sched/hash.c; the fusion
 * ILP's classes of isomorphic subtrees, hence the shipped schedules; the
 * predictor's held-out rows): they must never change. */
static inline uint64_t rap_mix64(uint64_t x)
{
    uint64_t s = x;
    return rap_splitmix64(&s);
}

/* Device memory on the current GPU, n bytes (256 when n is 0), with a
 * message naming what and how much is free on failure (RAP_ERR_NOMEM or
 * RAP_ERR_CUDA); RAP_ERR_NO_GPU in a build without CUDA. Free accepts NULL. */
rap_status rap_cuda_malloc(void **p, size_t n, const char *what);
void rap_cuda_free(void *p);
/* Host -> device copy of n bytes, synchronous (n 0: nothing). */
rap_status rap_cuda_upload(void *dev, const void *host, size_t n);
/* n bytes (at least 8) of device dev's memory: the GPU's (rap_cuda_malloc)
 * or host memory aligned to 64 bytes; freed by rap_dev_free with the same
 * dev (NULL accepted). For buffers that live where a module computes. */
rap_status rap_dev_alloc(rap_device dev, void **p, size_t n, const char *what);
void rap_dev_free(rap_device dev, void *p);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_H */
