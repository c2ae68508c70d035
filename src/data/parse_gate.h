/*
 * parse_gate.h -- the parse gate: where the GPU parse backend's parser
 * threads leave the launches of their chunks' parse kernels, so that the
 * runtime launches them inside the training's windows instead of whenever
 * a chunk is cut (docs/INPUT.md "The parse gate").
 *
 * A parser thread copies a chunk's text and offsets to the device as
 * without a gate, then posts the chunk as a *job* (its lines, a launch
 * function table and its state) and waits; it does not launch anything.
 * Whoever releases work takes pieces off the gate, oldest job first, and
 * launches them through the job's table: piece(line0, line1, event) for
 * whole tiles of RAP_PARSE_GATE_TILE lines in line order (the last piece
 * ends at the job's end), then end() after a job's last piece. The event
 * (a cudaEvent_t the training stream recorded where a phase starts) is
 * what the job's stream waits for before the piece runs, so the piece
 * runs beside that phase. Once its job is ended the parser thread wakes
 * and waits for its results itself, on its own thread, as without a gate.
 *
 * Who releases:
 *   the runtime, at the start of each window with a parse budget:
 *     rap_parse_gate_release(g, lines, event) launches up to `lines`
 *     lines (whole tiles, at least one tile when work is pending; < 0 all),
 *     rap_parse_gate_release_jobs the same rounded up to whole jobs (what
 *     the runtime calls by default);
 *   anyone who must not wait for a window (the runtime waiting for a batch
 *     the feed does not have yet, a reader closing with parser threads
 *     still waiting): rap_parse_gate_bypass(g, true) launches everything
 *     pending at once and every job posted while bypassed, until
 *     rap_parse_gate_bypass(g, false) (the calls nest, each on counts);
 *   rap_parse_gate_close: bypassed for good (shutdown).
 * Lines launched by release count as inside the windows, every other as
 * outside (rap_parse_gate_stats): progress never waits for a window.
 *
 *   rap_parse_gate *g;  rap_parse_gate_create(&g);
 *   parser thread:  job.ops = &my_ops; job.ctx = state; job.n_lines = n;
 *                   rap_parse_gate_run(g, &job);   // posted, launched, ended
 *   runtime:        rap_parse_gate_release(g, 8256, ev_phase, NULL);
 *
 * The gate allocates nothing after create: a job is the poster's (one per
 * parser thread, reused), linked into the FIFO while posted. Launches run
 * under the gate's lock, so a job's pieces are launched in order even when
 * several threads release at once. Not with cpu parsing (no launches).
 */
#ifndef RAP_PARSE_GATE_H
#define RAP_PARSE_GATE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PARSE_GATE_TILE 64 /* lines of a tile: RAP_PARSE_TILE (parse_ref.h) */

/* What launches a job's work: its backend's functions (the GPU parser's,
 * the CPU reference's, a test's). Both run on the releasing thread, under
 * the gate's lock; an error (with its message) ends the job: its remaining
 * pieces are not launched and the poster's wait returns the error. */
typedef struct {
    /* Queues lines [line0, line1) of the job: line0 the end of the last
     * piece (0 first), line1 a multiple of RAP_PARSE_GATE_TILE or the job's
     * end, after making the job's stream wait for event (NULL: no wait). */
    rap_status (*piece)(void *ctx, int64_t line0, int64_t line1, void *event);
    /* After the job's last piece: queues what ends it (its result). */
    rap_status (*end)(void *ctx);
} rap_parse_launch_ops;

/* A chunk's parse, posted by its parser thread (the fields up to n_lines
 * set by it; the rest the gate's, under its lock). */
typedef struct rap_parse_job {
    const rap_parse_launch_ops *ops;
    void *ctx;
    int64_t n_lines;       /* 0 still takes one piece (0, 0) */
    /* the gate's */
    int64_t next_line;     /* lines launched */
    bool done;             /* ended (or failed): the poster may go on */
    rap_status st;         /* RAP_OK, or the launch's error ... */
    char msg[256];         /* ... and its message */
    struct rap_parse_job *next;
} rap_parse_job;

typedef struct {
    int64_t jobs;          /* posted */
    int64_t lines_in;      /* launched by rap_parse_gate_release: inside the windows */
    int64_t lines_out;     /* launched at once: bypassed or closed (outside) */
    int64_t pieces;        /* piece calls */
    int64_t pending;       /* lines posted and not launched (now) */
} rap_parse_gate_stats;

typedef struct rap_parse_gate rap_parse_gate;

/* An open gate (not bypassed), nothing pending. RAP_ERR_NOMEM. */
rap_status rap_parse_gate_create(rap_parse_gate **out);
/* Frees g. Nobody may be waiting on it (close it and join the posters
 * first). NULL accepted. */
void rap_parse_gate_free(rap_parse_gate *g);

/* Posts job (not posted before, or done): at the end of the FIFO, or
 * launched whole at once when the gate is bypassed or closed (counted
 * outside). Cannot fail: a launch's error is the job's (rap_parse_gate_wait). */
void rap_parse_gate_post(rap_parse_gate *g, rap_parse_job *job);
/* Waits until job is done; returns its status (its message set again on
 * this thread). */
rap_status rap_parse_gate_wait(rap_parse_gate *g, rap_parse_job *job);
/* post, then wait: the parser thread's call. */
rap_status rap_parse_gate_run(rap_parse_gate *g, rap_parse_job *job);

/* Launches pending work oldest first: at most max_lines lines (rounded down
 * to whole tiles, at least one tile when any is pending; a job's last
 * piece, which may hold fewer lines than a tile, counts as a tile), or all
 * of it when max_lines < 0, each piece after its stream waits for event.
 * Counted inside. *launched (may be NULL) gets the lines launched. Cannot
 * fail (see rap_parse_launch_ops). */
void rap_parse_gate_release(rap_parse_gate *g, int64_t max_lines, void *event,
                            int64_t *launched);
/* rap_parse_gate_release, every job it starts launched to its end: whole
 * jobs oldest first until at least max_lines lines were launched (the
 * first job's rest when it was begun by a release before; at least one
 * job when any is pending; all when max_lines < 0). A chunk's rows come
 * only when all of its lines are parsed, so a job begun and left for the
 * next windows feeds nothing until then (docs/RUNTIME.md "The release").
 * Counted inside. Cannot fail (see rap_parse_launch_ops). */
void rap_parse_gate_release_jobs(rap_parse_gate *g, int64_t max_lines, void *event,
                                 int64_t *launched);
/* on: launches everything pending now and, until as many calls with off,
 * every job at its post (no event waited for; counted outside). */
void rap_parse_gate_bypass(rap_parse_gate *g, bool on);
/* Launches everything pending and bypasses the gate for good. Idempotent. */
void rap_parse_gate_close(rap_parse_gate *g);
/* The counts so far (any thread). */
void rap_parse_gate_get_stats(rap_parse_gate *g, rap_parse_gate_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_GATE_H */
