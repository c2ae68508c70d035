/* parse_gate.c -- the parse gate (parse_gate.h): a FIFO of posted jobs
 * under one mutex, the pieces launched on the releasing thread. */
#include "data/parse_gate.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct rap_parse_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a job done: its poster looks */
    rap_parse_job *head, *tail; /* posted, not ended, oldest first */
    int bypass;              /* rap_parse_gate_bypass(true) calls not undone */
    bool closed;
    rap_parse_gate_stats st;
};

rap_status rap_parse_gate_create(rap_parse_gate **out)
{
    *out = NULL;
    rap_parse_gate *g = rap_calloc(sizeof *g, "parse gate");
    if (!g)
        return RAP_ERR_NOMEM;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return RAP_OK;
}

void rap_parse_gate_free(rap_parse_gate *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    rap_free(g);
}

/* Tiles of job j not launched yet (a job of 0 lines: its one piece). */
static int64_t tiles_left(const rap_parse_job *j)
{
    int64_t left = j->n_lines - j->next_line;
    if (j->n_lines == 0)
        return j->next_line == 0 && !j->done ? 1 : 0;
    return (left + RAP_PARSE_GATE_TILE - 1) / RAP_PARSE_GATE_TILE;
}

/* The job's end (done, its poster woken); taken off the FIFO's head. */
static void job_finish(rap_parse_gate *g, rap_parse_job *j, rap_status st)
{
    if (st != RAP_OK && j->st == RAP_OK) {
        j->st = st;
        snprintf(j->msg, sizeof j->msg, "%s", rap_last_error());
    }
    g->st.pending -= j->n_lines - j->next_line;
    j->done = true;
    if (g->head == j) {
        g->head = j->next;
        if (!g->head)
            g->tail = NULL;
    }
    j->next = NULL;
    pthread_cond_broadcast(&g->cv);
}

/* Launches up to `tiles` tiles of head job j (under the lock), counted in
 * or out; ends it after its last piece. Returns the tiles taken. */
static int64_t launch(rap_parse_gate *g, rap_parse_job *j, int64_t tiles, void *event, bool in)
{
    int64_t have = tiles_left(j);
    int64_t t = tiles < have ? tiles : have;
    int64_t l0 = j->next_line;
    int64_t l1 = t == have ? j->n_lines : l0 + t * RAP_PARSE_GATE_TILE;
    rap_status st = j->ops->piece(j->ctx, l0, l1, event);
    g->st.pieces++;
    if (st != RAP_OK) {
        job_finish(g, j, st);
        return t;
    }
    j->next_line = l1;
    g->st.pending -= l1 - l0;
    if (in)
        g->st.lines_in += l1 - l0;
    else
        g->st.lines_out += l1 - l0;
    if (t == have) {
        j->next_line = j->n_lines;
        job_finish(g, j, j->ops->end(j->ctx));
    }
    return t;
}

/* Everything pending, at once (under the lock), counted outside. */
static void launch_all(rap_parse_gate *g)
{
    while (g->head)
        launch(g, g->head, INT64_MAX, NULL, false);
}

void rap_parse_gate_post(rap_parse_gate *g, rap_parse_job *job)
{
    pthread_mutex_lock(&g->mu);
    job->next_line = 0;
    job->done = false;
    job->st = RAP_OK;
    job->msg[0] = 0;
    job->next = NULL;
    if (g->tail)
        g->tail->next = job;
    else
        g->head = job;
    g->tail = job;
    g->st.jobs++;
    g->st.pending += job->n_lines;
    if (g->bypass > 0 || g->closed)
        launch_all(g); /* the FIFO holds this job only: older ones went when bypassed */
    pthread_mutex_unlock(&g->mu);
}

rap_status rap_parse_gate_wait(rap_parse_gate *g, rap_parse_job *job)
{
    pthread_mutex_lock(&g->mu);
    while (!job->done)
        pthread_cond_wait(&g->cv, &g->mu);
    rap_status st = job->st;
    pthread_mutex_unlock(&g->mu);
    if (st != RAP_OK)
        return rap_fail(st, "%s", job->msg);
    return RAP_OK;
}

rap_status rap_parse_gate_run(rap_parse_gate *g, rap_parse_job *job)
{
    rap_parse_gate_post(g, job);
    return rap_parse_gate_wait(g, job);
}

void rap_parse_gate_release(rap_parse_gate *g, int64_t max_lines, void *event, int64_t *launched)
{
    pthread_mutex_lock(&g->mu);
    int64_t before = g->st.lines_in;
    int64_t tiles = max_lines < 0 ? INT64_MAX : max_lines / RAP_PARSE_GATE_TILE;
    if (tiles < 1)
        tiles = 1; /* at least a tile when work is pending */
    while (g->head && tiles > 0)
        tiles -= launch(g, g->head, tiles, event, true);
    if (launched)
        *launched = g->st.lines_in - before;
    pthread_mutex_unlock(&g->mu);
}

void rap_parse_gate_release_jobs(rap_parse_gate *g, int64_t max_lines, void *event,
                                 int64_t *launched)
{
    pthread_mutex_lock(&g->mu);
    int64_t before = g->st.lines_in;
    do { /* whole jobs until the budget is spent; at least one */
        if (!g->head)
            break;
        launch(g, g->head, INT64_MAX, event, true);
    } while (max_lines < 0 || g->st.lines_in - before < max_lines);
    if (launched)
        *launched = g->st.lines_in - before;
    pthread_mutex_unlock(&g->mu);
}

void rap_parse_gate_bypass(rap_parse_gate *g, bool on)
{
    pthread_mutex_lock(&g->mu);
    if (on) {
        g->bypass++;
        launch_all(g);
    } else if (g->bypass > 0) {
        g->bypass--;
    }
    pthread_mutex_unlock(&g->mu);
}

void rap_parse_gate_close(rap_parse_gate *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    launch_all(g);
    pthread_mutex_unlock(&g->mu);
}

void rap_parse_gate_get_stats(rap_parse_gate *g, rap_parse_gate_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    *st = g->st;
    pthread_mutex_unlock(&g->mu);
}
