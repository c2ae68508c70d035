/*
 * schedule.h -- which preprocessing kernels of the next batch run beside
 * which training phase (rap mode). File format: docs/SCHEDULE.md.
 *
 * src/sched holds the contract between the planner (src/plan, which
 * writes schedules, fusion files and per-rank manifests) and the runtime
 * (src/run, which reads, checks and runs them): the formats, their hashes
 * and their checks, below both (scripts/check_layers.sh).
 *
 * An iteration of training has windows, in this order: the four phases of
 * src/model/model.h (emb_forward, mlp_forward, mlp_backward, emb_backward),
 * the gradient communication (grad_comm, several GPUs) and `exposed`
 * (after the last phase: work that is not hidden). A schedule lists, per
 * window, slices of the fused kernels of a rap_fusion: kernel k,
 * descriptors [d0, d1), rows [r0, r1) of the batch (r1 may be "end").
 * The runtime records an event after each phase on the training stream and
 * launches that window's slices, in the listed order, on the preprocessing
 * stream after it (rap_prep_run_kernel(prep, k, d0, d1, r0, r1, stream)).
 *
 * A schedule is bound to one plan and one fusion by hashes of both; it is
 * checked against them by rap_schedule_validate before use: every
 * descriptor of every kernel covered exactly once over the rows, a slice
 * only after every slice producing its inputs, and a kernel that computes
 * its offsets (RAP_OFF_COMPUTED) split by rows starting with its r0 == 0
 * piece (EXECUTOR.md, "Running and splitting").
 *
 * Shapes: NSL slices.
 */
#ifndef RAP_SCHED_SCHEDULE_H
#define RAP_SCHED_SCHEDULE_H

#include "core/core.h"
#include "sched/hash.h" /* rap_plan_hash, rap_fusion_hash: what binds a schedule */

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_SCHEDULE_VERSION 1

typedef enum {
    RAP_WIN_EMB_FORWARD = 0,
    RAP_WIN_MLP_FORWARD,
    RAP_WIN_MLP_BACKWARD,
    RAP_WIN_EMB_BACKWARD,
    RAP_WIN_GRAD_COMM,
    RAP_WIN_EXPOSED,
    RAP_WIN_COUNT
} rap_window;

/* "emb_forward", ... as written in the file; "?" when out of range. */
const char *rap_window_name(rap_window w);
/* The window named name, or -1. */
int rap_window_parse(const char *name);

#define RAP_ROWS_END INT64_MAX /* r1: to the end of the batch */

typedef struct {
    int kernel;            /* index into the rap_fusion */
    int d0, d1;            /* descriptors [d0, d1) of the kernel */
    int64_t r0, r1;        /* rows [r0, r1); r1 RAP_ROWS_END = the batch's rows */
    double predicted_ms;   /* planner's standalone latency; < 0 when unknown */
    int line;              /* line in the schedule file (0: built in memory) */
    int share, shares;     /* shares > 0: rows [r0, r1) count from the first row of
                            * share `share` of `shares` equal shares of the batch
                            * (rap_hybrid_rows) and end with it ("share=K/N" in the
                            * file: a rank's own rows of a global batch); shares 0:
                            * rows of the whole batch */
} rap_slice;

typedef struct {
    char source[256];          /* file name or "<builtin ...>", for messages */
    char plan_name[128];       /* the plan it was made for (file name, no spaces) */
    uint64_t plan_hash;        /* rap_plan_hash of that plan */
    int n_kernels;             /* kernels of the fusion it was made for */
    uint64_t fusion_hash;      /* rap_fusion_hash of that fusion */
    rap_slice *slices;         /* (NSL) in window order, then launch order */
    int n_slices;              /* NSL */
    int cap_slices;
    int win_first[RAP_WIN_COUNT + 1]; /* window w: slices [win_first[w], win_first[w+1]) */
    int n_received;            /* the fusion's last n_received kernels compute columns this
                                * rank receives from other ranks (a per-rank schedule with
                                * moves, rank_schedule.h): never run, never read by a slice;
                                * 0 in schedule files */
    /* the GPU parse's budgets (`parse W lines=N [predicted_ms=MS]`): at the
     * start of window w the runtime launches up to parse_lines[w] lines of
     * parse kernels (0: none there); not fused kernels, so no part of the
     * plan or fusion hash, and slices are checked without them */
    int64_t parse_lines[RAP_WIN_COUNT];
    double parse_ms[RAP_WIN_COUNT];   /* the planner's prediction, < 0 when unknown */
    int parse_line[RAP_WIN_COUNT];    /* line in the file (0: built in memory) */
} rap_schedule;

#define RAP_PARSE_LINES_MAX ((int64_t)1 << 40) /* a budget's lines at most */

/* An empty schedule bound to (p, f); source names it in messages. */
rap_status rap_schedule_create(const rap_plan *p, const rap_fusion *f, const char *source,
                               rap_schedule **out);
void rap_schedule_free(rap_schedule *s);
/* Appends a slice at the end of window w (windows stay in order whatever
 * the order of calls). r1 may be RAP_ROWS_END; predicted_ms < 0: none.
 * Checks only the window and that the ranges are non-empty. */
rap_status rap_schedule_add(rap_schedule *s, rap_window w, int kernel, int d0, int d1, int64_t r0,
                            int64_t r1, double predicted_ms);
/* Appends a copy of sl (its share and predicted_ms kept, line set to 0) at
 * the end of window w; the same checks as rap_schedule_add, and a share
 * within its shares. */
rap_status rap_schedule_add_slice(rap_schedule *s, rap_window w, const rap_slice *sl);
/* Sets window w's parse budget: lines (1 .. RAP_PARSE_LINES_MAX; 0
 * removes it), predicted_ms (< 0: unknown). RAP_ERR_ARG for a window or a
 * count out of range. */
rap_status rap_schedule_set_parse(rap_schedule *s, rap_window w, int64_t lines,
                                  double predicted_ms);
/* Whether any window of s has a parse budget (NULL: no). */
bool rap_schedule_has_parse(const rap_schedule *s);
/* The slices of window w, in launch order; *n their number. */
const rap_slice *rap_schedule_window(const rap_schedule *s, rap_window w, int *n);
/* Whether a and b run the same slices (kernel, descriptors, rows, share)
 * in the same windows and order, for the same plan and fusion; their
 * predicted latencies, sources and line numbers may differ, and their
 * parse budgets are not compared. NULL equals only NULL. */
bool rap_schedule_same_slices(const rap_schedule *a, const rap_schedule *b);

/* Parses schedule text. On a syntax error: RAP_ERR_PLAN with
 * "source:line: expected ...". Does not validate against a plan. */
rap_status rap_schedule_parse(const char *text, const char *source, rap_schedule **out);
/* Reads and parses a file (RAP_ERR_IO when it cannot be read). */
rap_status rap_schedule_load(const char *path, rap_schedule **out);
/* Writes s in the file format; parse(write(s)) == s (lines aside). */
rap_status rap_schedule_write(const rap_schedule *s, FILE *f);
rap_status rap_schedule_save(const rap_schedule *s, const char *path);

/* The rows of the batch slice sl runs in a batch of `rows` rows:
 * [*r0, *r1), empty (*r0 == *r1) when it lies past the batch's (or its
 * share's) end. */
void rap_slice_rows(const rap_slice *sl, int64_t rows, int64_t *r0, int64_t *r1);

/* Checks s against the plan and fusion it will run with, for batches of
 * at most max_rows rows: each descriptor's pieces cover [0, max_rows)
 * once, or lie in shares of one split of the batch (share=K/N), covering
 * each share they use once (the share's rows of max_rows); a slice runs
 * after the slices computing its inputs over its rows (the same share or
 * the whole batch). Pieces of a COMPUTED kernel may run in any order (the
 * first makes the offsets). RAP_ERR_PLAN with "source:line: ..." naming
 * the first violation. */
rap_status rap_schedule_validate(const rap_schedule *s, const rap_plan *p, const rap_fusion *f,
                                 int64_t max_rows);

/* The same checks in the order the hooked hybrid step (several ranks,
 * dist/hybrid.h) releases the windows: grad_comm (the gradient exchange)
 * before emb_backward. RAP_ERR_PLAN naming the slice that would run before
 * its input; RAP_OK at once when either window is empty. */
rap_status rap_schedule_validate_hybrid(const rap_schedule *s, const rap_plan *p,
                                        const rap_fusion *f, int64_t max_rows);

/* Built-in schedules (valid by construction for (p, f)):
 * embedding: every kernel whole, in the fusion's order (levels), the first
 * half (rounded down) beside emb_forward and the rest beside emb_backward
 * (a single kernel: emb_backward, where it slows training least, measured).
 * all_in: every kernel whole, in order, in window w (e.g. RAP_WIN_EXPOSED
 * for the sequential baseline). */
rap_status rap_schedule_builtin_embedding(const rap_plan *p, const rap_fusion *f,
                                          rap_schedule **out);
rap_status rap_schedule_all_in(const rap_plan *p, const rap_fusion *f, rap_window w,
                               rap_schedule **out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_SCHED_SCHEDULE_H */
