/*
 * queue.c -- bounded blocking queue of pointers (queue.h): a ring of cap
 * slots under one mutex, with one condition for "not full" (producers) and
 * one for "not empty" (consumers). close and stop broadcast both.
 */
#include "run/queue.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <time.h>

struct rap_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_full;
    pthread_cond_t not_empty;
    void **ring;     /* (cap) */
    int cap;
    int head;        /* index of the oldest item */
    int n;           /* items queued */
    bool closed;
    bool stopped;
};

const char *rap_queue_result_name(rap_queue_result r)
{
    switch (r) {
    case RAP_Q_OK: return "ok";
    case RAP_Q_CLOSED: return "closed";
    case RAP_Q_STOPPED: return "stopped";
    case RAP_Q_EMPTY: return "empty";
    case RAP_Q_FULL: return "full";
    case RAP_Q_TIMEOUT: return "timeout";
    }
    return "unknown";
}

rap_status rap_queue_create(int cap, rap_queue **out)
{
    *out = NULL;
    if (cap < 1)
        return rap_fail(RAP_ERR_ARG, "queue: expected a capacity >= 1, got %d", cap);
    rap_queue *q = rap_calloc(sizeof *q, "queue");
    if (!q)
        return RAP_ERR_NOMEM;
    q->ring = rap_calloc(sizeof(void *) * (size_t)cap, "queue ring");
    if (!q->ring) {
        rap_free(q);
        return RAP_ERR_NOMEM;
    }
    q->cap = cap;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&q->mu, NULL) != 0 || pthread_cond_init(&q->not_full, &ca) != 0 ||
        pthread_cond_init(&q->not_empty, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        rap_free(q->ring);
        rap_free(q);
        return rap_fail(RAP_ERR_INTERNAL, "queue: pthread init failed");
    }
    pthread_condattr_destroy(&ca);
    *out = q;
    return RAP_OK;
}

void rap_queue_free(rap_queue *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    rap_free(q->ring);
    rap_free(q);
}

/* Called with the lock held and room in the ring. */
static void put_locked(rap_queue *q, void *item)
{
    q->ring[(q->head + q->n) % q->cap] = item;
    q->n++;
    pthread_cond_signal(&q->not_empty);
}

/* Called with the lock held and an item in the ring. */
static void *take_locked(rap_queue *q)
{
    void *it = q->ring[q->head];
    q->ring[q->head] = NULL;
    q->head = (q->head + 1) % q->cap;
    q->n--;
    pthread_cond_signal(&q->not_full);
    return it;
}

static rap_queue_result push_impl(rap_queue *q, void *item, bool wait)
{
    if (!q || !item)
        return RAP_Q_STOPPED;
    pthread_mutex_lock(&q->mu);
    rap_queue_result r = RAP_Q_OK;
    for (;;) {
        if (q->stopped) {
            r = RAP_Q_STOPPED;
            break;
        }
        if (q->closed) {
            r = RAP_Q_CLOSED;
            break;
        }
        if (q->n < q->cap) {
            put_locked(q, item);
            break;
        }
        if (!wait) {
            r = RAP_Q_FULL;
            break;
        }
        pthread_cond_wait(&q->not_full, &q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return r;
}

rap_queue_result rap_queue_push(rap_queue *q, void *item) { return push_impl(q, item, true); }

rap_queue_result rap_queue_try_push(rap_queue *q, void *item) { return push_impl(q, item, false); }

/* mode: 0 wait forever, 1 do not wait, 2 wait until deadline. */
static rap_queue_result pop_impl(rap_queue *q, void **item, int mode, const struct timespec *deadline)
{
    *item = NULL;
    if (!q)
        return RAP_Q_STOPPED;
    pthread_mutex_lock(&q->mu);
    rap_queue_result r = RAP_Q_OK;
    for (;;) {
        if (q->stopped) {
            r = RAP_Q_STOPPED;
            break;
        }
        if (q->n > 0) {
            *item = take_locked(q);
            break;
        }
        if (q->closed) {
            r = RAP_Q_CLOSED;
            break;
        }
        if (mode == 1) {
            r = RAP_Q_EMPTY;
            break;
        }
        if (mode == 2) {
            if (pthread_cond_timedwait(&q->not_empty, &q->mu, deadline) == ETIMEDOUT &&
                q->n == 0 && !q->stopped && !q->closed) {
                r = RAP_Q_TIMEOUT;
                break;
            }
        } else {
            pthread_cond_wait(&q->not_empty, &q->mu);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return r;
}

rap_queue_result rap_queue_pop(rap_queue *q, void **item) { return pop_impl(q, item, 0, NULL); }

rap_queue_result rap_queue_try_pop(rap_queue *q, void **item) { return pop_impl(q, item, 1, NULL); }

rap_queue_result rap_queue_pop_timed(rap_queue *q, void **item, double timeout_s)
{
    struct timespec d;
    clock_gettime(CLOCK_MONOTONIC, &d);
    if (!(timeout_s > 0))
        timeout_s = 0;
    if (timeout_s > 1e6)
        timeout_s = 1e6;
    double whole = floor(timeout_s);
    d.tv_sec += (time_t)whole;
    d.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (d.tv_nsec >= 1000000000L) {
        d.tv_sec++;
        d.tv_nsec -= 1000000000L;
    }
    return pop_impl(q, item, 2, &d);
}

/* Sets *flag (closed or stopped) under q's lock and wakes every waiter,
 * pushers and poppers, to look at it. */
static void set_and_wake(rap_queue *q, bool *flag)
{
    pthread_mutex_lock(&q->mu);
    *flag = true;
    pthread_cond_broadcast(&q->not_full);
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

void rap_queue_close(rap_queue *q)
{
    if (q)
        set_and_wake(q, &q->closed);
}

void rap_queue_stop(rap_queue *q)
{
    if (q)
        set_and_wake(q, &q->stopped);
}

int rap_queue_size(rap_queue *q)
{
    if (!q)
        return 0;
    pthread_mutex_lock(&q->mu);
    int n = q->n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int rap_queue_capacity(const rap_queue *q) { return q ? q->cap : 0; }

bool rap_queue_closed(rap_queue *q)
{
    if (!q)
        return true;
    pthread_mutex_lock(&q->mu);
    bool c = q->closed;
    pthread_mutex_unlock(&q->mu);
    return c;
}

bool rap_queue_stopped(rap_queue *q)
{
    if (!q)
        return true;
    pthread_mutex_lock(&q->mu);
    bool s = q->stopped;
    pthread_mutex_unlock(&q->mu);
    return s;
}
