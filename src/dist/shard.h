/*
 * shard.h -- placing the embedding tables on the ranks (docs/DIST.md
 * "Model parallelism").
 *
 * Table-wise: tables in order of bytes, largest first (ties: more lookups,
 * then lower table index), each onto the rank with the least bytes
 * assigned among those with room for it (ties: fewest lookups, then lowest
 * rank). A table that no rank has room for is split row-wise into equal
 * row ranges (sizes differ by at most one row) over the fewest ranks that
 * hold them, taking the ranks with the most room first (ties: lowest
 * rank); if no equal split fits, the ranks with the most room are filled
 * in turn. Each (table, row range) is one local table of its rank; a
 * rank's local tables are ordered by (global table, first row).
 * Deterministic from the arguments. Bytes of a row: D * sizeof(float)
 * (weights only: halve the budget for Adagrad's state).
 *
 * Letters: T tables, R ranks, D embedding dim, P parts (local tables of all
 * ranks, P >= T).
 */
#ifndef RAP_DIST_SHARD_H
#define RAP_DIST_SHARD_H

#include "core/core.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One local table: rows [row0, row0 + rows) of a global table, held by
 * `rank` as its local table `local`. */
typedef struct {
    int rank;
    int local;
    int64_t row0, rows;
} rap_shard_part;

typedef struct {
    int n_ranks;              /* R */
    int n_tables;             /* T */
    int emb_dim;              /* D */
    rap_model_shard *shard;   /* (R) rank r's local tables (emb_batch and
                               * loss_rows 0: set by rap_hybrid_model_config) */
    int *part0;               /* (T+1) parts of table t: part[part0[t] .. part0[t+1]) */
    rap_shard_part *part;     /* (P) by table, then row0 */
    int n_parts;              /* P */
    int64_t *bytes;           /* (R) table bytes placed on rank r */
    double *lookups;          /* (R) lookups per batch row placed on rank r */
} rap_shard_map;

/* Places T tables of table_rows[t] rows and dimension D on R ranks with
 * budget_bytes each (0 = no limit). lookups (T, may be NULL = 1 each):
 * ids per row of each table. Fills *out (free with rap_shard_map_free;
 * zeroed on failure). RAP_ERR_ARG for bad arguments; RAP_ERR_NOMEM with
 * "tables need N bytes, R ranks x B bytes = M available" when they cannot
 * fit. */
rap_status rap_shard_plan(const int64_t *table_rows, int T, int emb_dim, int R,
                          int64_t budget_bytes, const double *lookups, rap_shard_map *out);
void rap_shard_map_free(rap_shard_map *m);

/* holds[r * T + t] (n_ranks x n_tables, zeroed first): rank r holds table t
 * or a row range of it (the holders of --placement batch's ids). */
void rap_shard_holds(const rap_shard_map *m, bool *holds);

/* Checks a map's invariants (every row of every table held exactly once,
 * shards consistent with parts, budget respected when budget > 0).
 * RAP_ERR_INTERNAL naming the first violation. */
rap_status rap_shard_map_check(const rap_shard_map *m, const int64_t *table_rows,
                               int64_t budget_bytes);

/* One line per rank ("rank 0: 3 tables, 1.2 GB: t0 t5[0,500) ...") into
 * buf (n bytes), for logs. */
void rap_shard_map_describe(const rap_shard_map *m, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_SHARD_H */
