/* parquet_rows.c -- a Parquet row group to rows of an input schema
 * (parquet.h, docs/SCHEMA.md "Parquet"): the schema's columns found in the
 * file by name and their types checked (rap_pq_bind), then each row made
 * as the text parser makes it, into the same list-shaped rap_parsed the
 * schema parser fills, with the same rejects and reasons:
 *   label   bool, integer 0/1 or float 0.0/1.0; anything else, a null: label;
 *   dense   bool, integer or float, to float32; a null: valid 0; NaN,
 *           infinities or beyond float32: range;
 *   sparse  integer: the id as it is; string: converted by the column's
 *           encoding as text is (str hashed, hex/dec parsed: cat, range);
 *           an empty string or a null: a null;
 *   list    list<integer> or list<string>, items as above (a null or
 *           empty-string item: cat); a null list: valid 0; an empty one:
 *           valid 1, no ids; more than max_list ids: list.
 * The smallest fault over the fields (class, then field) is the row's, as
 * for text. A row's "line" is its row number in the file. */
#include "data/parquet.h"

#include "core/core.h"
#include "data/parse_algo.h"
#include "data/parse_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Whether Parquet type t can feed column c. */
static bool fits(const rap_schema_col *c, rap_pq_type t)
{
    switch (c->kind) {
    case RAP_COL_LABEL:
    case RAP_COL_DENSE: return t == RAP_PQ_BOOL || t == RAP_PQ_INT || t == RAP_PQ_FLOAT;
    case RAP_COL_SPARSE:
        if (c->list_sep)
            return t == RAP_PQ_LIST_INT || t == RAP_PQ_LIST_STRING;
        return t == RAP_PQ_INT || t == RAP_PQ_STRING;
    default: return true;
    }
}

static const char *want_of(const rap_schema_col *c)
{
    switch (c->kind) {
    case RAP_COL_LABEL: return "a bool, integer or float column (0 or 1)";
    case RAP_COL_DENSE: return "a bool, integer or float column";
    default:
        return c->list_sep ? "a list<integer> or list<string> column (a multi-hot list)"
                           : "an integer or string column";
    }
}

rap_status rap_pq_bind(const rap_pq *p, const char *path, const rap_input_schema *s, int *map)
{
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        map[f] = -1;
        if (c->kind == RAP_COL_SKIP)
            continue;
        int k = rap_pq_find(p, c->name);
        if (k < 0)
            return rap_fail(RAP_ERR_DATA, "%s: no column \"%s\", which the schema %s names "
                            "(line %d): a Parquet file must hold every column of the schema "
                            "but its skipped ones, by name", path, c->name, s->source, c->line);
        char tn[128];
        rap_pq_type t = rap_pq_col_type(p, k, tn, sizeof tn);
        if (!fits(c, t))
            return rap_fail(RAP_ERR_DATA, "%s: column \"%s\" is %s; the schema %s (line %d) makes "
                            "it %s%s: expected %s", path, c->name, tn, s->source, c->line,
                            c->kind == RAP_COL_LABEL ? "the label" : c->kind == RAP_COL_DENSE
                            ? "dense" : "sparse", c->list_sep ? " (a list)" : "", want_of(c));
        map[f] = k;
    }
    return RAP_OK;
}

/* ------------------------------------------------------------ values */

typedef struct {
    int cls;          /* PG_* fault class, PG_OK */
    char msg[256];    /* its message, when cls != PG_OK */
} fault;

static void set_fault(fault *x, int cls, const char *fmt, ...) RAP_PRINTF(3, 4);
static void set_fault(fault *x, int cls, const char *fmt, ...)
{
    x->cls = cls;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, sizeof x->msg, fmt, ap);
    va_end(ap);
}

/* A numeric value of row r (label or dense): *v, or a fault. */
static bool number(const rap_pq_column *c, int64_t r, double *v)
{
    *v = c->type == RAP_PQ_FLOAT ? c->f64[r] : (double)c->i64[r];
    return true;
}

/* A string id b[0, n) by the column's encoding; false with the fault. */
static bool string_id(const rap_schema_col *col, const char *b, int64_t n, int64_t *id,
                      fault *x, int item)
{
    if (col->enc == RAP_ENC_STR) {
        *id = (int64_t)rap_hash_str(b, (size_t)n);
        return true;
    }
    int why = rap_input_convert(col->enc, b, (size_t)n, NULL, id);
    if (why < 0)
        return true;
    int cls = why == RAP_REJ_RANGE ? PG_SPARSE_RANGE : PG_SPARSE;
    if (item > 0)
        set_fault(x, cls, "expected an id of encoding %s in each item of list %s, got item %d "
                  "\"%.*s\"", rap_col_enc_name(col->enc), col->name, item,
                  (int)(n > 40 ? 40 : n), b);
    else
        set_fault(x, cls, "expected an id of encoding %s in %s, got \"%.*s\"",
                  rap_col_enc_name(col->enc), col->name, (int)(n > 40 ? 40 : n), b);
    return false;
}

/* The ids of list column c at row r into ids (room for K); *cnt. */
static bool list_ids(const rap_schema_col *col, const rap_pq_column *c, int64_t r, int K,
                     int64_t *ids, int32_t *cnt, fault *x)
{
    int64_t b = c->off[r], e = c->off[r + 1], n = e - b;
    *cnt = 0;
    for (int64_t k = b; k < e; k++) {
        int item = (int)(k - b) + 1;
        if (!c->ivalid[k] ||
            (c->type == RAP_PQ_LIST_STRING && c->soff[k + 1] == c->soff[k])) {
            set_fault(x, PG_SPARSE, "expected an id in each item of list %s, got a %s item %d",
                      col->name, c->ivalid[k] ? "empty" : "null", item);
            return false;
        }
        int64_t id = c->type == RAP_PQ_LIST_INT ? c->i64[k] : 0;
        if (c->type == RAP_PQ_LIST_STRING &&
            !string_id(col, c->bytes + c->soff[k], c->soff[k + 1] - c->soff[k], &id, x, item))
            return false;
        if (k - b < K)
            ids[k - b] = id;
    }
    if (n > K) {
        set_fault(x, PG_LIST, "expected at most %d ids in list %s (--max-list), got %lld", K,
                  col->name, (long long)n);
        return false;
    }
    *cnt = (int32_t)n;
    return true;
}

/* Field f (column col, data c) of row r into row `at` of o; false with
 * the fault. */
static rap_status one_field(const rap_input_schema *s, int f, const rap_pq_column *c, int64_t r,
                            rap_parsed *o, int64_t at, fault *x)
{
    const rap_schema_col *col = &s->cols[f];
    const int64_t R = o->cap;
    x->cls = PG_OK;
    double v;
    switch (col->kind) {
    case RAP_COL_LABEL:
        if (!c->valid[r] || !number(c, r, &v) || (v != 0.0 && v != 1.0)) {
            if (c->valid[r])
                set_fault(x, PG_LABEL, "expected label 0 or 1, got %.17g", v);
            else
                set_fault(x, PG_LABEL, "expected label 0 or 1, got a null");
            return RAP_OK;
        }
        o->label[at] = (float)v;
        return RAP_OK;
    case RAP_COL_DENSE: {
        float fv = 0.0f;
        if (c->valid[r]) {
            number(c, r, &v);
            fv = (float)v;
            if (isnan(v) || isinf(fv)) {
                set_fault(x, PG_DENSE_RANGE, "expected %s within float32's range, got %g",
                          col->name, v);
                return RAP_OK;
            }
        }
        o->dense[col->col * R + at] = fv;
        o->dense_valid[col->col * R + at] = c->valid[r];
        return RAP_OK;
    }
    case RAP_COL_SPARSE: {
        const int j = col->col, K = s->max_list;
        int64_t *soff = o->soff + j * (R + 1), base = soff[at];
        RAP_TRY(rap_parsed_reserve_ids(o, j, base, K));
        int64_t *ids = o->sids[j] + base;
        int32_t cnt = 0;
        uint8_t valid = c->valid[r];
        if (col->list_sep) {
            if (valid && !list_ids(col, c, r, K, ids, &cnt, x))
                return RAP_OK;
        } else if (valid && c->type == RAP_PQ_INT) {
            ids[0] = c->i64[r];
            cnt = 1;
        } else if (valid) {
            int64_t n = c->off[r + 1] - c->off[r];
            if (n == 0)
                valid = 0; /* an empty string: a null, as an empty text field */
            else if (!string_id(col, c->bytes + c->off[r], n, &ids[0], x, 0))
                return RAP_OK;
            cnt = valid;
        }
        soff[at + 1] = base + cnt;
        o->sparse_valid[j * R + at] = valid;
        return RAP_OK;
    }
    default: return RAP_OK;
    }
}

rap_status rap_pq_parse_group(rap_pq *p, const char *path, const rap_input_schema *s,
                              const int *map, int g, int64_t max_rows, rap_parsed *o)
{
    int cols[RAP_SCHEMA_MAX_COLS], fields[RAP_SCHEMA_MAX_COLS], k = 0;
    for (int f = 0; f < s->n_cols; f++) {
        if (map[f] >= 0) {
            cols[k] = map[f];
            fields[k++] = f;
        }
    }
    rap_pq_column *c = rap_calloc(sizeof *c * (size_t)(k ? k : 1), "Parquet columns");
    if (!c)
        return RAP_ERR_NOMEM;
    rap_status st = rap_pq_read(p, g, cols, k, c);
    int64_t n = rap_pq_group_rows(p, g);
    if (max_rows >= 0 && max_rows < n)
        n = max_rows;
    for (int i = 0; st == RAP_OK && i < k; i++)
        if (c[i].n < n)
            st = rap_fail(RAP_ERR_DATA, "%s: row group %d: column \"%s\" has %lld rows, the "
                          "group %lld", path, g, s->cols[fields[i]].name, (long long)c[i].n,
                          (long long)n);
    o->n_lines = n;
    o->n_used = 0;
    o->n_rej = 0;
    o->first_msg[0] = 0;
    if (st == RAP_OK)
        st = rap_parsed_reserve(o, s->n_dense, s->n_sparse, n + 1);
    for (int j = 0; st == RAP_OK && j < s->n_sparse; j++)
        o->soff[j * (o->cap + 1)] = 0;
    fault best, x;
    for (int64_t r = 0; st == RAP_OK && r < n; r++) {
        uint32_t key = PG_KEY_OK;
        for (int i = 0; st == RAP_OK && i < k; i++) {
            st = one_field(s, fields[i], &c[i], r, o, o->n_used, &x);
            uint32_t kk = x.cls == PG_OK ? PG_KEY_OK : pg_key(x.cls, fields[i]);
            if (kk < key) {
                key = kk;
                best = x;
            }
        }
        if (st != RAP_OK)
            break;
        if (key == PG_KEY_OK) {
            o->n_used++;
            continue;
        }
        if (o->n_rej == 0)
            snprintf(o->first_msg, sizeof o->first_msg, "%s", best.msg);
        st = rap_parsed_reject(o, r, pg_key_reason(key));
    }
    rap_pq_column_free(c, k);
    rap_free(c);
    return st;
}
