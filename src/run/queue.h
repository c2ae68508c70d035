/*
 * queue.h -- a bounded blocking queue of pointers, for the runtime's
 * pipeline (reader -> feeder -> trainer): multi-producer, multi-consumer.
 *
 * The capacity is fixed at create; push, pop, close and stop allocate
 * nothing. Two ways to end:
 *
 *   close  graceful (end of data): pushes fail with RAP_Q_CLOSED, pops
 *          return the items still queued, then RAP_Q_CLOSED. Every
 *          blocked thread wakes.
 *   stop   abort (errors, shutdown): every push and pop, blocked or not,
 *          returns RAP_Q_STOPPED at once; queued items stay in the queue
 *          (their owner frees them, the queue never owns what it holds).
 *
 * Items are never NULL (NULL is refused by push).
 */
#ifndef RAP_RUN_QUEUE_H
#define RAP_RUN_QUEUE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RAP_Q_OK = 0,
    RAP_Q_CLOSED,  /* push: queue closed; pop: closed and drained */
    RAP_Q_STOPPED, /* rap_queue_stop was called */
    RAP_Q_EMPTY,   /* try_pop: nothing queued (still open) */
    RAP_Q_FULL,    /* try_push: no room (still open) */
    RAP_Q_TIMEOUT  /* pop_timed: nothing came in time */
} rap_queue_result;

const char *rap_queue_result_name(rap_queue_result r);

typedef struct rap_queue rap_queue;

/* A queue holding at most cap (>= 1) pointers. RAP_ERR_ARG for cap < 1,
 * RAP_ERR_NOMEM when the ring cannot be allocated. */
rap_status rap_queue_create(int cap, rap_queue **out);
/* Frees the queue (NULL accepted). No thread may be using it any more:
 * stop it and join its users first. Items still queued are not freed. */
void rap_queue_free(rap_queue *q);

/* Appends item (not NULL), waiting while the queue is full. RAP_Q_OK, or
 * RAP_Q_CLOSED / RAP_Q_STOPPED (item not queued; the caller keeps it). */
rap_queue_result rap_queue_push(rap_queue *q, void *item);
/* Like push without waiting: RAP_Q_FULL when there is no room. */
rap_queue_result rap_queue_try_push(rap_queue *q, void *item);
/* Takes the oldest item, waiting while the queue is empty and open.
 * RAP_Q_OK with *item set, RAP_Q_CLOSED once closed and drained, or
 * RAP_Q_STOPPED (*item NULL for both). */
rap_queue_result rap_queue_pop(rap_queue *q, void **item);
/* Like pop without waiting: RAP_Q_EMPTY when nothing is queued. */
rap_queue_result rap_queue_try_pop(rap_queue *q, void **item);
/* Like pop, waiting at most timeout_s seconds: RAP_Q_TIMEOUT then. */
rap_queue_result rap_queue_pop_timed(rap_queue *q, void **item, double timeout_s);

/* Graceful end: see the header comment. Idempotent, any thread. */
void rap_queue_close(rap_queue *q);
/* Abort: see the header comment. Idempotent, any thread (not from a signal
 * handler: it takes the queue's lock). */
void rap_queue_stop(rap_queue *q);

/* Items queued now (a snapshot). */
int rap_queue_size(rap_queue *q);
int rap_queue_capacity(const rap_queue *q);
bool rap_queue_closed(rap_queue *q);
bool rap_queue_stopped(rap_queue *q);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_QUEUE_H */
