/*
 * parquet.h -- Parquet files through Apache Arrow's C++ reader, behind a C
 * interface of rap's own (docs/SCHEMA.md "Parquet"). The C++ side
 * (parquet.cc, the one C++ file of rap, built when the pyarrow wheel's
 * libarrow and libparquet are found: docs/BUILD.md) only opens a file,
 * says what its columns are and copies the columns of one row group into
 * plain C arrays; what a row is made of, and every reject, is C
 * (parquet_rows.c). Built without Arrow, rap_pq_open refuses every file
 * saying what to install (parquet_none.c).
 *
 *   rap_pq *p;
 *   rap_pq_open("day0.parquet", &p);
 *   int c = rap_pq_find(p, "history");           // a top-level column
 *   rap_pq_column col;
 *   rap_pq_read(p, 0, &c, 1, &col);               // row group 0
 *   ... col.type, col.valid, col.off, col.i64 ...
 *   rap_pq_column_free(&col, 1);
 *   rap_pq_close(p);
 *
 * Letters: n rows of the group, m items of its lists. Internal to src/data.
 */
#ifndef RAP_DATA_PARQUET_H
#define RAP_DATA_PARQUET_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a column holds, as rap maps it to a schema's kinds. */
typedef enum {
    RAP_PQ_OTHER = 0,  /* anything else (struct, map, dictionary, decimal, ...) */
    RAP_PQ_BOOL,       /* bool: i64 0 or 1 */
    RAP_PQ_INT,        /* int8..int64, uint8..uint64 (uint64's bits as int64): i64 */
    RAP_PQ_FLOAT,      /* float32, float64: f64 */
    RAP_PQ_STRING,     /* string, binary (large too): bytes [off[i], off[i+1]) */
    RAP_PQ_LIST_INT,   /* list<integer> (large too): items [off[i], off[i+1]) of i64 */
    RAP_PQ_LIST_STRING /* list<string or binary>: items' bytes [soff[k], soff[k+1]) */
} rap_pq_type;

/* One column of one row group, copied out of Arrow (owned here). */
typedef struct {
    rap_pq_type type;
    int64_t n;          /* rows */
    uint8_t *valid;     /* (n) 1: a value, 0: a null */
    int64_t *i64;       /* BOOL, INT: (n); LIST_INT: (m) items */
    double *f64;        /* FLOAT: (n) */
    int64_t *off;       /* STRING: (n + 1) into bytes; LIST_*: (n + 1) into the items */
    int64_t m;          /* LIST_*: items */
    uint8_t *ivalid;    /* LIST_*: (m) 1: an item, 0: a null item */
    int64_t *soff;      /* LIST_STRING: (m + 1) into bytes */
    char *bytes;        /* STRING, LIST_STRING */
} rap_pq_column;

typedef struct rap_pq rap_pq;

/* Whether rap was built with Arrow's Parquet reader; else why not into why
 * (what to install). */
bool rap_pq_built(char *why, size_t n);
/* Whether the file at path is a regular file starting with Parquet's
 * magic "PAR1" (by content, whatever its name). False when it cannot be
 * read, and for anything but a regular file (a fifo, a device: their
 * bytes are not read ahead here; Parquet needs a file it can seek in). */
bool rap_pq_is_parquet(const char *path);

/* Opens path and reads its footer. Errors (naming the file): RAP_ERR_IO
 * (cannot open), RAP_ERR_DATA (not Parquet, truncated, corrupt footer),
 * RAP_ERR_ARG (built without Arrow: what to install), RAP_ERR_NOMEM. */
rap_status rap_pq_open(const char *path, rap_pq **out);
/* Accepts NULL. */
void rap_pq_close(rap_pq *p);
int rap_pq_groups(const rap_pq *p);
int64_t rap_pq_rows(const rap_pq *p);
int64_t rap_pq_group_rows(const rap_pq *p, int g);
/* The top-level column called name, or -1. */
int rap_pq_find(const rap_pq *p, const char *name);
/* Column c's type, and Arrow's name of it (e.g. "list<item: int64>") into
 * name (may be NULL). */
rap_pq_type rap_pq_col_type(const rap_pq *p, int c, char *name, size_t n);
/* Columns cols[0, k) of row group g into out[0, k) (freed by the caller
 * with rap_pq_column_free, also after a failure). Errors naming the file
 * and the group: RAP_ERR_DATA (corrupt or truncated data, a type that
 * changed), RAP_ERR_NOMEM. Not thread-safe on one rap_pq: a thread opens
 * its own. */
rap_status rap_pq_read(rap_pq *p, int g, const int *cols, int k, rap_pq_column *out);
void rap_pq_column_free(rap_pq_column *c, int k);

/* ---- rows of a schema (parquet_rows.c, C) ---- */

/* Finds each column of schema s in p by name (map[f]: p's column of field
 * f, -1 for a skipped field) and checks its type fits the column's kind.
 * Errors: RAP_ERR_DATA naming path, the column, its type, the schema's
 * file and line and what was expected. */
rap_status rap_pq_bind(const rap_pq *p, const char *path, const rap_input_schema *s, int *map);
#ifndef __cplusplus
#include "data/parse.h"
/* Row group g of p (at most max_rows of its rows; -1 all) into o as the
 * schema parser fills it (lists: soff, sids), rejects with reasons, the
 * first's message in o->first_msg, o->n_lines the rows looked at. Errors:
 * rap_pq_read's. */
rap_status rap_pq_parse_group(rap_pq *p, const char *path, const rap_input_schema *s,
                              const int *map, int g, int64_t max_rows, rap_parsed *o);
#endif

#ifdef __cplusplus
}
#endif
#endif /* RAP_DATA_PARQUET_H */
