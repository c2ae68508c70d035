/*
 * place.h -- which rank preprocesses which (feature, rows) on R GPUs
 * (docs/PLANNER.md "Placement", docs/DIST.md "Data").
 *
 * Hybrid-parallel training (docs/DIST.md) needs, every iteration: on rank
 * r, the dense columns of its own rows [r*B, (r+1)*B) of the global batch
 * (Bg = R*B rows), and on every rank holding rows of table t, the ids of
 * sparse column t over all Bg rows. Every rank reads the whole raw global
 * batch, so raw inputs never move; only processed columns may.
 *
 * A *unit* is (column c, row share k): the global batch is cut into K =
 * R*G row shares (G shares per rank's rows), share k = rows
 * [k*Bg/K, (k+1)*Bg/K), homed on rank k/G. Each unit has consumers (dense:
 * its home rank; sparse: every holder of the table) and, per consumer, one
 * source rank that computes it (the assignment). A source other than the
 * consumer sends rows(k) * bytes-per-row(c) over the interconnect.
 *
 * A rank computes, per column, a set of shares; columns with equal share
 * sets form one *part*: a sub-plan (the plan with only those columns,
 * rap_plan_hash of its live nodes), fused (levels, or the config's fuser)
 * and run over the part's rows (its shares concatenated). Each rank's parts
 * are planned in turn by the one-GPU split + schedule search
 * (rap_schedule_search) on what the rank's windows have left, parts that
 * send first. An op shared by two columns placed in different parts
 * (plan 0/1: fill_null(int_0) feeds int_0 and bucketize_int_0) is
 * computed in each: recomputing it is what avoids traffic.
 *
 * Cost (ms of standalone work, the planner's currency): per rank, the
 * exposed preprocessing of its search, plus its part of the all-to-all of
 * the moved units: T_r = max(sent_r, received_r) / bandwidth + latency (0
 * when it moves nothing), which is placed first in grad_comm (min(T_r,
 * capacity) reserved before the rank's preprocessing is planned). When
 * every unit r sends or receives is complete before `exposed` on its
 * source, r exposes T_r minus the reserve; otherwise its all-to-all starts
 * after the latest such source's exposed work and is exposed whole.
 * Placement cost = max over ranks (the iteration waits for the slowest).
 *
 * Placements: owner (each sparse column on the holders of its table over
 * all Bg rows, dense data parallel: zero bytes), batch (every rank every
 * column over its own rows; sparse ids go to the holders), search (greedy
 * moves from owner, docs/PLANNER.md).
 *
 * Letters: R ranks, T tables (sparse columns, frame order), C columns of
 * the plan, K = R*G row shares.
 */
#ifndef RAP_PLAN_PLACE_H
#define RAP_PLAN_PLACE_H

#include "plan/search.h"
#include "sched/placement.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PLACE_MAX_RANKS 64  /* R; also R*G <= 64 (share sets are bit masks) */

/* Interconnect model: an all-to-all moves bytes at gbytes_per_s per
 * direction per GPU, plus latency_us once. */
typedef struct {
    double gbytes_per_s;
    double latency_us;
} rap_link;

/* NVLink on H200 (assumed): 300 GB/s per direction per GPU effective
 * all-to-all, 10 us. */
rap_link rap_link_defaults(void);

/* Fuses a part's sub-plan (e.g. rap_fuse_levels or an ILP). */
typedef rap_status (*rap_place_fuse_fn)(const rap_plan *sub, rap_fusion *f, void *ctx);

typedef struct {
    int ranks;                /* R, 1..RAP_PLACE_MAX_RANKS */
    int64_t batch;            /* B rows per rank; the global batch is R*B */
    int shares;               /* G row shares per rank (search granularity); R*G <= 64 */
    const int *owner;         /* (T) rank owning table t */
    const uint64_t *holders;  /* (T) bit r: rank r holds rows of t; NULL: the owner only */
    const rap_capacity *cap;  /* (R) windows of each rank (grad_comm included) */
    const rap_predictor *pred;/* NULL: analytic fallback */
    rap_link link;
    rap_place_fuse_fn fuse;   /* NULL: rap_fuse_levels */
    void *fuse_ctx;
    int max_moves;            /* search: accepted moves at most (<= 0: 1000) */
} rap_place_config;

/* One part of a rank: columns computed over the same row shares. */
typedef struct {
    int *cols;                /* (n_cols) frame indices into the plan's columns */
    int n_cols;
    uint64_t shares;          /* bit k: share k */
    int64_t rows;             /* rows of those shares */
    rap_plan *sub;            /* the plan with these columns only (owned here) */
    rap_fusion fusion;
    rap_schedule *sched;      /* over [0, rows) */
    rap_search_result sr;     /* of the search on what earlier parts left */
    bool sends;               /* some unit of it goes to another rank */
} rap_place_part;

typedef struct {
    rap_place_part *parts;    /* (n_parts) in planning order */
    int n_parts;
    double capacity_ms[RAP_WIN_COUNT];  /* the rank's capacity (exposed: 0) */
    double load_ms[RAP_WIN_COUNT];      /* preprocessing (+ the hidden all-to-all in grad_comm) */
    double exposed_ms[RAP_WIN_COUNT];   /* exposed: preprocessing + exposed all-to-all */
    double prep_exposed_ms;   /* preprocessing that fits no window */
    double comm_ms;           /* its part of the all-to-all: max(sent, recv) / bw + latency */
    double comm_reserved_ms;  /* of grad_comm, kept for it before preprocessing is placed */
    double comm_hidden_ms, comm_exposed_ms;
    double exposed_total_ms;  /* prep_exposed_ms + comm_exposed_ms */
    bool ready;               /* every unit it sends or receives is complete before `exposed` */
    int64_t bytes_sent, bytes_recv;
} rap_place_rank;

typedef struct {
    rap_placement kind;
    int ranks, shares, n_cols;
    int64_t batch;
    int *src;                 /* (C, K, R) source rank of unit (c, k) for consumer d; -1: not a consumer */
    rap_place_rank *rank;     /* (R) */
    double exposed_max_ms;    /* the cost */
    double exposed_sum_ms;    /* tie-break of the search */
    double comm_ms;           /* the longest rank part of the all-to-all */
    int64_t bytes_moved;      /* per iteration, all ranks */
    int moves;                /* search: accepted moves */
    int evaluations;          /* search: rank plans evaluated */
    char start[32];           /* search: "owner", or "batch" when that walk was better */
} rap_place_result;

/* Table-wise ownership for when no shard map is at hand: the rule of
 * src/dist/shard.h without a memory budget (so no row splits): tables
 * largest first (hi + 1 rows; ties: more ids per row, then lower index),
 * each onto the rank with the fewest rows so far (ties: fewest ids per
 * row, then lowest rank). owner: (T) with T = the plan's sparse columns
 * in frame order (*n_tables). */
rap_status rap_place_owners_tablewise(const rap_plan *p, int ranks, int *owner, int max_tables,
                                      int *n_tables);

/* An assumed capacity for comparisons (reports say so): every window,
 * grad_comm included, hides `fraction` x the predicted standalone ms of
 * the whole plan fused by levels over `batch` rows (one GPU's work). */
rap_status rap_place_capacity_fraction(const rap_plan *p, const rap_predictor *pred, int64_t batch,
                                       double fraction, const rap_model_shape *shape,
                                       const char *gpu, rap_capacity *cap);

/* Bytes one row of column c moves: dense 4, vector 4*W, sparse 8 per id
 * (ids_per_row, int64) + 8 for the row's offset unless every row holds
 * exactly one id (len1 and not nullable). */
int64_t rap_place_row_bytes(const rap_plan *p, int col);

/* Runs placement `kind` and plans every rank. *out is filled (free with
 * rap_place_result_free; zeroed on failure). R = 1: one part per rank
 * (every column, all B rows), the one-GPU schedule. */
rap_status rap_place_run(const rap_plan *p, const rap_place_config *c, rap_placement kind,
                         rap_place_result *out);
/* Plans the assignment src (C, K, R) (as rap_place_result.src) and fills
 * *out with its cost: rap_place_run's evaluation, for checking. */
rap_status rap_place_evaluate(const rap_plan *p, const rap_place_config *c, const int *src,
                              rap_place_result *out);
void rap_place_result_free(rap_place_result *r);

/* Writes rank r's files: PREFIX.rank<r> (a manifest: parts, their columns,
 * shares, rows, schedule and fusion files, and the units it sends and
 * receives) and, per part i, PREFIX.rank<r>.<i> (schedule) and
 * PREFIX.rank<r>.<i>.fusion. */
rap_status rap_place_save_rank(const rap_plan *p, const rap_place_result *r, int rank,
                               const char *prefix);

/* Appends the JSON object of one placement (per-rank windows, comm,
 * exposed max, bytes moved) to fp. */
rap_status rap_place_report_json(FILE *fp, const rap_plan *p, const rap_place_result *r);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_PLACE_H */
