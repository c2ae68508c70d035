/* pool.c -- a fixed pool of worker threads running parallel for-loops.
 *
 * Work is handed out as an atomic counter over [0, n); the caller works too,
 * so a pool of 1 thread runs everything on the caller with no handoff. */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>

struct rap_pool {
    int threads;             /* including the caller */
    pthread_t *tid;          /* (threads-1) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t generation;     /* bumped for each rap_pool_for */
    int busy;                /* workers still in the current loop */
    bool quit;
    rap_pool_fn fn;
    void *ctx;
    int64_t n;
    atomic_llong next;
};

static void run_items(rap_pool *p)
{
    for (;;) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        p->fn(p->ctx, i);
    }
}

static void *worker(void *arg)
{
    rap_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_items(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rap_status rap_pool_create(int threads, rap_pool **out)
{
    *out = NULL;
    if (threads <= 0)
        threads = rap_ncores();
    rap_pool *p = rap_calloc(sizeof *p, "thread pool");
    if (!p)
        return RAP_ERR_NOMEM;
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->tid = rap_calloc(sizeof(pthread_t) * (size_t)threads, "thread pool");
    if (!p->tid) {
        rap_pool_free(p);
        return RAP_ERR_NOMEM;
    }
    for (int t = 0; t < threads - 1; t++) {
        if (pthread_create(&p->tid[t], NULL, worker, p) != 0) {
            p->threads = t + 1;
            rap_pool_free(p);
            return rap_fail(RAP_ERR_NOMEM, "cannot start thread %d of the pool", t + 1);
        }
    }
    *out = p;
    return RAP_OK;
}

int rap_pool_threads(const rap_pool *p) { return p ? p->threads : 1; }

void rap_pool_for(rap_pool *p, int64_t n, rap_pool_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    if (!p || p->threads == 1 || n == 1) {
        for (int64_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    run_items(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void rap_pool_free(rap_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->threads - 1; t++)
        pthread_join(p->tid[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    rap_free(p->tid);
    rap_free(p);
}
