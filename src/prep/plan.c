/*
 * plan.c -- the plan's DAG: nodes, the column frame, and the static facts
 * every op derives for its output (kind, nullability, list lengths, id
 * range, how offsets are obtained). The parser (plan_parse.c) and tests build
 * plans through rap_plan_add_op; the executor and planner read the nodes.
 *
 * Preconditions checked here are those of docs/OPS.md ("Errors"); a
 * violation is RAP_ERR_PLAN naming source:line:col and what was expected.
 */
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const g_op_names[RAP_OP_COUNT] = {
    [RAP_OP_INPUT] = "input",
    [RAP_OP_FILL_NULL] = "fill_null",
    [RAP_OP_CAST] = "cast",
    [RAP_OP_LOGIT] = "logit",
    [RAP_OP_BOXCOX] = "boxcox",
    [RAP_OP_LOG] = "log",
    [RAP_OP_ADD] = "add",
    [RAP_OP_MUL] = "mul",
    [RAP_OP_ONEHOT] = "onehot",
    [RAP_OP_BUCKETIZE] = "bucketize",
    [RAP_OP_SIGRID_HASH] = "sigrid_hash",
    [RAP_OP_FIRSTX] = "firstx",
    [RAP_OP_CLAMP] = "clamp",
    [RAP_OP_NGRAM] = "ngram",
    [RAP_OP_MAPID] = "mapid",
};

const char *rap_op_name(rap_op_type t)
{
    return (t >= 0 && t < RAP_OP_COUNT) ? g_op_names[t] : "?";
}

static const char *kind_name(rap_kind k)
{
    return k == RAP_DENSE ? "dense" : k == RAP_SPARSE ? "sparse" : "vector";
}

/* ------------------------------------------------------------- growth */

static rap_status grow_nodes(rap_plan *p)
{
    if (p->n_nodes < p->cap_nodes)
        return RAP_OK;
    int cap = p->cap_nodes ? 2 * p->cap_nodes : 128;
    rap_node *n = rap_realloc(p->nodes, sizeof *n * (size_t)cap, "plan nodes");
    if (!n)
        return RAP_ERR_NOMEM;
    p->nodes = n;
    p->cap_nodes = cap;
    return RAP_OK;
}

static rap_status grow_cols(rap_plan *p)
{
    if (p->n_cols < p->cap_cols)
        return RAP_OK;
    int cap = p->cap_cols ? 2 * p->cap_cols : 64;
    rap_column_ref *c = rap_realloc(p->cols, sizeof *c * (size_t)cap, "plan columns");
    if (!c)
        return RAP_ERR_NOMEM;
    p->cols = c;
    p->cap_cols = cap;
    return RAP_OK;
}

/* ------------------------------------------------------------- create/free */

rap_status rap_plan_create(rap_schema schema, const char *source_name, rap_plan **out)
{
    *out = NULL;
    rap_plan *p = rap_calloc(sizeof *p, "plan");
    if (!p)
        return RAP_ERR_NOMEM;
    p->schema = schema;
    snprintf(p->source, sizeof p->source, "%s", source_name ? source_name : "<plan>");
    for (int j = 0; j < schema.n_dense + schema.n_sparse; j++) {
        bool dense = j < schema.n_dense;
        rap_status s = grow_nodes(p);
        if (s == RAP_OK)
            s = grow_cols(p);
        if (s != RAP_OK) {
            rap_plan_free(p);
            return s;
        }
        rap_node *n = &p->nodes[p->n_nodes];
        memset(n, 0, sizeof *n);
        n->op = RAP_OP_INPUT;
        n->input = -1;
        n->raw = dense ? j : j - schema.n_dense;
        n->kind = n->in_kind = dense ? RAP_DENSE : RAP_SPARSE;
        n->width = 1;
        n->nullable = true;
        n->len1 = !dense && schema.ids_per_row == 1;
        n->ids_per_row = dense ? 0 : schema.ids_per_row;
        n->off = dense ? RAP_OFF_NONE : RAP_OFF_SAME;
        /* Criteo ids are 32-bit hashes; other schemas: unbounded int64 */
        n->bounded = false;
        rap_column_ref *c = &p->cols[p->n_cols++];
        snprintf(c->name, sizeof c->name, dense ? "int_%d" : "cat_%d", n->raw);
        c->node = p->n_nodes++;
    }
    *out = p;
    return RAP_OK;
}

rap_status rap_plan_create_schema(const rap_input_schema *s, const char *source_name,
                                  rap_plan **out)
{
    RAP_TRY(rap_plan_create(rap_input_schema_shape(s), source_name, out));
    rap_plan *p = *out;
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        if (c->kind != RAP_COL_DENSE && c->kind != RAP_COL_SPARSE)
            continue;
        int k = c->kind == RAP_COL_DENSE ? c->col : s->n_dense + c->col;
        snprintf(p->cols[k].name, sizeof p->cols[k].name, "%s", c->name);
        rap_node *n = &p->nodes[p->cols[k].node];
        if (c->kind == RAP_COL_SPARSE)
            n->len1 = !c->list_sep; /* a plain field: one id or a null */
    }
    return RAP_OK;
}

void rap_plan_free(rap_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_nodes; i++) {
        rap_free(p->nodes[i].borders);
        rap_free(p->nodes[i].map);
    }
    rap_free(p->nodes);
    rap_free(p->cols);
    rap_free(p);
}

/* ------------------------------------------------------------- adding ops */

#define PLAN_ERR(p, n, ...)                                                      \
    plan_err((p), (n), __VA_ARGS__)

static rap_status plan_err(const rap_plan *p, const rap_node *n, const char *fmt, ...)
    RAP_PRINTF(3, 4);
static rap_status plan_err(const rap_plan *p, const rap_node *n, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rap_fail(RAP_ERR_PLAN, "%s:%d:%d: %s", p->source, n->line, n->col, msg);
}

static bool is_integral(double v) { return isfinite(v) && v == floor(v) && fabs(v) < 9.2e18; }

/* Checks the input kind against what op accepts. */
static rap_status check_kind(const rap_plan *p, const rap_node *n, bool dense_ok,
                             bool sparse_ok)
{
    rap_kind k = n->in_kind;
    if ((k == RAP_DENSE && dense_ok) || (k == RAP_SPARSE && sparse_ok))
        return RAP_OK;
    const char *want = dense_ok && sparse_ok ? "a dense or sparse column"
                       : dense_ok            ? "a dense column"
                                             : "a sparse column";
    return PLAN_ERR(p, n, "%s expects %s, got a %s column", rap_op_name(n->op), want,
                    kind_name(k));
}

/* Sets the facts of a sparse output whose lists have the same lengths as the
 * (sparse) input's. */
static void same_lists(rap_node *n, const rap_node *in)
{
    n->kind = RAP_SPARSE;
    n->nullable = in->nullable;
    n->len1 = in->len1;
    n->ids_per_row = in->ids_per_row;
    n->off = RAP_OFF_SAME;
    n->bounded = in->bounded;
    n->lo = in->lo;
    n->hi = in->hi;
}

/* A sparse one-id-per-row output from a dense input. */
static void one_id_from_dense(rap_node *n, const rap_node *in)
{
    n->kind = RAP_SPARSE;
    n->nullable = in->nullable;
    n->len1 = true;
    n->ids_per_row = 1;
    /* null rows are empty lists, so offsets depend on the data unless no
     * row can be null */
    n->off = in->nullable ? RAP_OFF_COMPUTED : RAP_OFF_ARANGE;
    n->bounded = false;
}

static void dense_like(rap_node *n, const rap_node *in)
{
    n->kind = RAP_DENSE;
    n->nullable = in->nullable;
    n->off = RAP_OFF_NONE;
}

static rap_status derive(const rap_plan *p, rap_node *n)
{
    const rap_node *in = &p->nodes[n->input];
    n->in_kind = in->kind;
    n->width = 1;
    n->level = in->level + 1;
    if (in->kind == RAP_VECTOR)
        return PLAN_ERR(p, n, "%s expects a dense or sparse column, got a vector column "
                              "(onehot output can only be a model input)",
                        rap_op_name(n->op));
    switch (n->op) {
    case RAP_OP_FILL_NULL:
        if (in->kind == RAP_DENSE) {
            dense_like(n, in);
        } else {
            if (!is_integral(n->f[0]))
                return PLAN_ERR(p, n, "fill_null on a sparse column expects an integer id, got %.17g",
                                n->f[0]);
            int64_t v = (int64_t)n->f[0];
            same_lists(n, in);
            if (in->nullable) {
                if (in->len1) {
                    n->off = RAP_OFF_ARANGE;
                } else {
                    n->off = RAP_OFF_COMPUTED;
                    n->len1 = false;
                }
            }
            if (n->ids_per_row < 1)
                n->ids_per_row = 1;
            if (n->bounded) {
                n->lo = v < n->lo ? v : n->lo;
                n->hi = v > n->hi ? v : n->hi;
            }
        }
        n->nullable = false;
        return RAP_OK;
    case RAP_OP_CAST:
        if (n->i[0] != RAP_DENSE && n->i[0] != RAP_SPARSE)
            return PLAN_ERR(p, n, "cast expects float32 or int64");
        if (n->i[0] == RAP_DENSE) {
            dense_like(n, in); /* dense: identity; sparse: first id (empty -> 0) */
        } else if (in->kind == RAP_SPARSE) {
            same_lists(n, in);
        } else {
            one_id_from_dense(n, in);
        }
        return RAP_OK;
    case RAP_OP_LOGIT:
        RAP_TRY(check_kind(p, n, true, false));
        if (!(n->f[0] >= 0 && n->f[0] < 0.5))
            return PLAN_ERR(p, n, "logit expects 0 <= eps < 0.5, got %.9g", n->f[0]);
        dense_like(n, in);
        return RAP_OK;
    case RAP_OP_BOXCOX:
        RAP_TRY(check_kind(p, n, true, false));
        if (!isfinite(n->f[0]))
            return PLAN_ERR(p, n, "boxcox expects a finite lambda");
        dense_like(n, in);
        return RAP_OK;
    case RAP_OP_LOG:
    case RAP_OP_ADD:
    case RAP_OP_MUL:
        RAP_TRY(check_kind(p, n, true, false));
        if (n->op != RAP_OP_LOG && !isfinite(n->f[0]))
            return PLAN_ERR(p, n, "%s expects a finite constant", n->op == RAP_OP_ADD ? "+" : "*");
        dense_like(n, in);
        return RAP_OK;
    case RAP_OP_ONEHOT:
        RAP_TRY(check_kind(p, n, true, false));
        if (n->i[0] <= 0 || n->i[0] > 65536)
            return PLAN_ERR(p, n, "onehot expects 0 < C <= 65536, got %lld", (long long)n->i[0]);
        if (!(n->f[1] > n->f[0]) || !isfinite(n->f[0]) || !isfinite(n->f[1]))
            return PLAN_ERR(p, n, "onehot expects finite low < high, got low %.9g, high %.9g",
                            n->f[0], n->f[1]);
        n->kind = RAP_VECTOR;
        n->width = (int)n->i[0];
        n->nullable = in->nullable;
        n->off = RAP_OFF_NONE;
        return RAP_OK;
    case RAP_OP_BUCKETIZE:
        RAP_TRY(check_kind(p, n, true, true));
        if (n->n_aux < 1 || !n->borders)
            return PLAN_ERR(p, n, "bucketize expects a non-empty list of borders");
        for (int64_t j = 0; j < n->n_aux; j++) {
            if (!isfinite(n->borders[j]))
                return PLAN_ERR(p, n, "bucketize expects finite borders (border %lld)",
                                (long long)j);
            if (j > 0 && n->borders[j] < n->borders[j - 1])
                return PLAN_ERR(p, n, "bucketize expects non-decreasing borders, but border %lld (%.9g) < border %lld (%.9g)",
                                (long long)j, n->borders[j], (long long)(j - 1), n->borders[j - 1]);
            if (j > 1 && n->borders[j] == n->borders[j - 1] && n->borders[j] == n->borders[j - 2])
                return PLAN_ERR(p, n, "bucketize expects no border repeated more than twice, but %.9g appears 3 times",
                                n->borders[j]);
        }
        if (in->kind == RAP_DENSE)
            one_id_from_dense(n, in);
        else
            same_lists(n, in);
        n->bounded = true;
        n->lo = 0;
        n->hi = n->n_aux;
        return RAP_OK;
    case RAP_OP_SIGRID_HASH:
        RAP_TRY(check_kind(p, n, false, true));
        if (n->i[1] < 1)
            return PLAN_ERR(p, n, "sigrid_hash expects max >= 1, got %lld", (long long)n->i[1]);
        same_lists(n, in);
        n->bounded = true;
        n->lo = 0;
        n->hi = n->i[1] - 1;
        return RAP_OK;
    case RAP_OP_FIRSTX:
        RAP_TRY(check_kind(p, n, false, true));
        if (n->i[0] < 1)
            return PLAN_ERR(p, n, "firstx expects k >= 1, got %lld", (long long)n->i[0]);
        same_lists(n, in);
        if (in->ids_per_row > n->i[0] && !in->len1) {
            n->off = RAP_OFF_COMPUTED;
            n->ids_per_row = n->i[0];
        }
        return RAP_OK;
    case RAP_OP_CLAMP:
        RAP_TRY(check_kind(p, n, true, true));
        if (!(n->f[0] <= n->f[1]))
            return PLAN_ERR(p, n, "clamp expects lo <= hi, got lo %.9g, hi %.9g", n->f[0], n->f[1]);
        if (in->kind == RAP_DENSE) {
            dense_like(n, in);
        } else {
            if (!is_integral(n->f[0]) || !is_integral(n->f[1]))
                return PLAN_ERR(p, n, "clamp on a sparse column expects integer bounds, got %.17g, %.17g",
                                n->f[0], n->f[1]);
            int64_t lo = (int64_t)n->f[0], hi = (int64_t)n->f[1];
            same_lists(n, in);
            if (n->bounded) {
                n->lo = n->lo > lo ? (n->lo > hi ? hi : n->lo) : lo;
                n->hi = n->hi < hi ? (n->hi < lo ? lo : n->hi) : hi;
            } else {
                n->bounded = true;
                n->lo = lo;
                n->hi = hi;
            }
        }
        return RAP_OK;
    case RAP_OP_NGRAM: {
        RAP_TRY(check_kind(p, n, false, true));
        int64_t g = n->i[0];
        if (g < 1)
            return PLAN_ERR(p, n, "ngram expects n >= 1, got %lld", (long long)g);
        same_lists(n, in);
        int64_t L = in->ids_per_row;
        if (!in->len1 && g > 1 && L > 1) {
            n->off = RAP_OFF_COMPUTED;
            n->len1 = false;
            n->ids_per_row = L > g ? (L - g + 1) * g : L;
        }
        return RAP_OK;
    }
    case RAP_OP_MAPID: {
        RAP_TRY(check_kind(p, n, false, true));
        if (n->n_aux < 1 || !n->map)
            return PLAN_ERR(p, n, "mapid expects a non-empty map");
        same_lists(n, in);
        int64_t lo = 0, hi = 0; /* ids outside the map become 0 */
        for (int64_t j = 0; j < n->n_aux; j++) {
            lo = n->map[j] < lo ? n->map[j] : lo;
            hi = n->map[j] > hi ? n->map[j] : hi;
        }
        n->bounded = true;
        n->lo = lo;
        n->hi = hi;
        return RAP_OK;
    }
    case RAP_OP_INPUT:
    case RAP_OP_COUNT:
        break;
    }
    return PLAN_ERR(p, n, "unknown operation %d", (int)n->op);
}

rap_status rap_plan_add_op(rap_plan *p, const rap_node *src, int *idx)
{
    if (src->input < 0 || src->input >= p->n_nodes)
        return rap_fail(RAP_ERR_PLAN, "%s:%d:%d: input node %d does not exist (cycle or forward reference)",
                        p->source, src->line, src->col, src->input);
    if (src->op <= RAP_OP_INPUT || src->op >= RAP_OP_COUNT)
        return rap_fail(RAP_ERR_PLAN, "%s:%d:%d: unknown operation", p->source, src->line, src->col);
    RAP_TRY(grow_nodes(p));
    rap_node n = *src;
    n.borders = NULL;
    n.map = NULL;
    /* copy the owned arrays */
    if (src->op == RAP_OP_BUCKETIZE && src->borders && src->n_aux > 0) {
        n.borders = rap_malloc(sizeof(double) * (size_t)src->n_aux, "bucketize borders");
        if (!n.borders)
            return RAP_ERR_NOMEM;
        memcpy(n.borders, src->borders, sizeof(double) * (size_t)src->n_aux);
    }
    if (src->op == RAP_OP_MAPID && src->map && src->n_aux > 0) {
        n.map = rap_malloc(sizeof(int64_t) * (size_t)src->n_aux, "mapid map");
        if (!n.map)
            return RAP_ERR_NOMEM;
        memcpy(n.map, src->map, sizeof(int64_t) * (size_t)src->n_aux);
    }
    n.raw = -1;
    n.mean_ids = 0; /* measured on raw columns only (re-planning) */
    n.live = false;
    rap_status s = derive(p, &n);
    if (s != RAP_OK) {
        rap_free(n.borders);
        rap_free(n.map);
        return s;
    }
    p->nodes[p->n_nodes] = n;
    *idx = p->n_nodes++;
    return RAP_OK;
}

/* ------------------------------------------------------------- the frame */

int rap_plan_find(const rap_plan *p, const char *name)
{
    for (int i = 0; i < p->n_cols; i++)
        if (strcmp(p->cols[i].name, name) == 0)
            return i;
    return -1;
}

rap_status rap_plan_assign(rap_plan *p, const char *name, int node)
{
    if (node < 0 || node >= p->n_nodes)
        return rap_fail(RAP_ERR_ARG, "assign %s: no node %d", name, node);
    if (strlen(name) == 0 || strlen(name) >= sizeof p->cols[0].name)
        return rap_fail(RAP_ERR_PLAN, "column name must have 1 to %zu characters",
                        sizeof p->cols[0].name - 1);
    int c = rap_plan_find(p, name);
    if (c >= 0) {
        p->cols[c].node = node;
        return RAP_OK;
    }
    RAP_TRY(grow_cols(p));
    rap_column_ref *r = &p->cols[p->n_cols++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->node = node;
    return RAP_OK;
}

rap_status rap_plan_drop(rap_plan *p, const char *name)
{
    int c = rap_plan_find(p, name);
    if (c < 0)
        return rap_fail(RAP_ERR_PLAN, "del: no column named \"%s\"", name);
    memmove(&p->cols[c], &p->cols[c + 1], sizeof p->cols[0] * (size_t)(p->n_cols - c - 1));
    p->n_cols--;
    return RAP_OK;
}

int rap_plan_finish(rap_plan *p)
{
    for (int i = 0; i < p->n_nodes; i++)
        p->nodes[i].live = false;
    for (int c = 0; c < p->n_cols; c++)
        p->nodes[p->cols[c].node].live = true;
    /* nodes are topological: a live node's input is earlier */
    for (int i = p->n_nodes - 1; i >= 0; i--)
        if (p->nodes[i].live && p->nodes[i].input >= 0)
            p->nodes[p->nodes[i].input].live = true;
    return rap_plan_n_ops(p);
}

int rap_plan_n_ops(const rap_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n_nodes; i++)
        n += p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT;
    return n;
}

/* ------------------------------------------------------------- fusion */

bool rap_node_is_identity(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    return n->op == RAP_OP_FIRSTX && n->off == RAP_OFF_SAME;
}

bool rap_kernel_is_identity(const rap_plan *p, const rap_kernel *k)
{
    for (int j = 0; j < k->n; j++)
        if (!rap_node_is_identity(p, k->nodes[j]))
            return false;
    return true;
}

bool rap_fuse_rows_pays(const rap_fusion *f) { return f->n <= RAP_ROW_AUTO_KERNELS; }

int rap_node_variant(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    return (int)n->in_kind * 3 + (int)n->kind + (n->off == RAP_OFF_COMPUTED ? 9 : 0);
}

void rap_fusion_free(rap_fusion *f)
{
    if (!f)
        return;
    for (int k = 0; k < f->n; k++) {
        rap_free(f->kernels[k].nodes);
        rap_free(f->kernels[k].group);
    }
    rap_free(f->kernels);
    f->kernels = NULL;
    f->n = 0;
}

rap_status rap_fuse_none(const rap_plan *p, rap_fusion *f)
{
    f->n = 0;
    f->kernels = rap_calloc(sizeof *f->kernels * (size_t)(p->n_nodes + 1), "fusion");
    if (!f->kernels)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < p->n_nodes; i++) {
        const rap_node *n = &p->nodes[i];
        if (!n->live || n->op == RAP_OP_INPUT)
            continue;
        rap_kernel *k = &f->kernels[f->n];
        k->nodes = rap_malloc(sizeof(int), "fusion");
        if (!k->nodes) {
            rap_fusion_free(f);
            return RAP_ERR_NOMEM;
        }
        k->op = n->op;
        k->variant = rap_node_variant(p, i);
        k->level = n->level;
        k->nodes[0] = i;
        k->n = 1;
        f->n++;
    }
    return RAP_OK;
}

rap_status rap_fuse_levels(const rap_plan *p, rap_fusion *f)
{
    f->n = 0;
    f->kernels = rap_calloc(sizeof *f->kernels * (size_t)(p->n_nodes + 1), "fusion");
    int *group = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "fusion");
    if (!f->kernels || !group) {
        rap_free(group);
        rap_fusion_free(f);
        return RAP_ERR_NOMEM;
    }
    int max_level = 0;
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].level > max_level)
            max_level = p->nodes[i].level;
    /* level by level; inside a level, kernels in order of their first node */
    for (int lv = 1; lv <= max_level; lv++) {
        int first = f->n;
        for (int i = 0; i < p->n_nodes; i++) {
            const rap_node *n = &p->nodes[i];
            if (!n->live || n->op == RAP_OP_INPUT || n->level != lv)
                continue;
            int var = rap_node_variant(p, i), k;
            for (k = first; k < f->n; k++)
                if (f->kernels[k].op == n->op && f->kernels[k].variant == var)
                    break;
            if (k == f->n) {
                f->kernels[k].op = n->op;
                f->kernels[k].variant = var;
                f->kernels[k].level = lv;
                f->kernels[k].n = 0;
                f->n++;
            }
            group[i] = k;
            f->kernels[k].n++;
        }
        for (int k = first; k < f->n; k++) {
            f->kernels[k].nodes = rap_malloc(sizeof(int) * (size_t)f->kernels[k].n, "fusion");
            if (!f->kernels[k].nodes) {
                rap_free(group);
                rap_fusion_free(f);
                return RAP_ERR_NOMEM;
            }
            f->kernels[k].n = 0;
        }
        for (int i = 0; i < p->n_nodes; i++) {
            const rap_node *n = &p->nodes[i];
            if (!n->live || n->op == RAP_OP_INPUT || n->level != lv)
                continue;
            rap_kernel *k = &f->kernels[group[i]];
            k->nodes[k->n++] = i;
        }
    }
    rap_free(group);
    return RAP_OK;
}

/* ------------------------------------------------------------ row fusion */

bool rap_node_row_local(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    return n->live && n->op != RAP_OP_INPUT && n->off != RAP_OFF_COMPUTED;
}

const char *rap_kernel_op_name(const rap_kernel *k)
{
    return k->group ? "rows" : rap_op_name(k->op);
}

int rap_kernel_group_of(const rap_kernel *k, int j)
{
    if (!k->group)
        return j;
    int lo = 0, hi = k->n_groups - 1; /* last g with group[g] <= j */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (k->group[mid] <= j)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int uf_find(int *parent, int i)
{
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

/* Units: the groups (by their root node) and the kernels of `in` holding
 * no row-local node. unit_of[i]: unit of node i (-1 raw input). A group
 * has one input from outside, its root's; a unit's level is 1 + the
 * largest level of the units it reads (raw inputs: 0). */
rap_status rap_fuse_rows(const rap_plan *p, const rap_fusion *in, int max_stages, int max_descs,
                        rap_fusion *out)
{
    memset(out, 0, sizeof *out);
    const int N = p->n_nodes;
    if (max_stages < 1 || max_descs < max_stages)
        return rap_fail(RAP_ERR_ARG, "row fusion: at most %d ops a group and %d a kernel: need 1 "
                        "or more, and a kernel at least a group", max_stages, max_descs);
    int *parent = rap_malloc(sizeof(int) * (size_t)(N + 1), "row fusion");
    int *size = rap_calloc(sizeof(int) * (size_t)(N + 1), "row fusion");
    int *unit_of = rap_malloc(sizeof(int) * (size_t)(N + 1), "row fusion");
    int *ulevel = rap_calloc(sizeof(int) * (size_t)(2 * N + in->n + 1), "row fusion");
    int *kof = rap_malloc(sizeof(int) * (size_t)(N + 1), "row fusion");
    rap_status st = RAP_OK;
    out->kernels = rap_calloc(sizeof *out->kernels * (size_t)(N + in->n + 1), "row fusion");
    if (!parent || !size || !unit_of || !ulevel || !kof || !out->kernels) {
        st = RAP_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < N; i++) {
        parent[i] = i;
        size[i] = 1;
        unit_of[i] = -1;
        kof[i] = -1;
    }
    for (int k = 0; k < in->n; k++)
        for (int j = 0; j < in->kernels[k].n; j++)
            kof[in->kernels[k].nodes[j]] = k;
    /* groups: node order is a topological order (inputs come first) */
    for (int i = 0; i < N; i++) {
        if (!rap_node_row_local(p, i))
            continue;
        int x = p->nodes[i].input;
        if (x < 0 || !rap_node_row_local(p, x))
            continue;
        int r = uf_find(parent, x);
        if (size[r] >= max_stages)
            continue;
        parent[i] = r;
        size[r]++;
    }
    /* units: groups are numbered by root node (0..N), kernels of `in` N + k */
    for (int i = 0; i < N; i++) {
        if (!p->nodes[i].live || p->nodes[i].op == RAP_OP_INPUT)
            continue;
        if (rap_node_row_local(p, i))
            unit_of[i] = uf_find(parent, i);
        else if (kof[i] >= 0)
            unit_of[i] = N + kof[i];
        else {
            st = rap_fail(RAP_ERR_ARG, "row fusion: live node %d is in no kernel of the fusion", i);
            goto done;
        }
    }
    /* unit levels, by relaxation in node order: a node's unit is at least
     * one above its input's unit (same unit: a group member, no step).
     * Nodes come in topological order, but a kernel of `in` may hold
     * nodes of several plan levels: repeat until nothing changes. */
    bool changed = true;
    int rounds = 0;
    while (changed) {
        changed = false;
        if (++rounds > N + 2) {
            st = rap_fail(RAP_ERR_INTERNAL, "row fusion: the kernels of the fusion form a cycle");
            goto done;
        }
        for (int i = 0; i < N; i++) {
            int u = unit_of[i];
            if (u < 0)
                continue;
            int x = p->nodes[i].input, ux = x >= 0 ? unit_of[x] : -1;
            int need = ux < 0 ? 1 : (ux == u ? ulevel[u] : ulevel[ux] + 1);
            if (ulevel[u] < need) {
                ulevel[u] = need;
                changed = true;
            }
        }
    }
    int max_level = 0;
    for (int u = 0; u < 2 * N + in->n; u++)
        max_level = ulevel[u] > max_level ? ulevel[u] : max_level;
    /* kernels, level by level: the level's groups in row kernels of at
     * most max_descs ops (a group of one node still: vertical or not, one
     * launch for many row-local ops), then the level's kernels of `in` in
     * their order */
    for (int lv = 1; lv <= max_level; lv++) {
        rap_kernel *kn = NULL;
        /* groups in order of their roots; members in node order (inputs
         * before the nodes that read them) */
        for (int root = 0; root < N; root++) {
            if (unit_of[root] != root || ulevel[root] != lv)
                continue;
            int size = 0;
            for (int i = root; i < N; i++)
                size += unit_of[i] == root;
            if (kn && kn->n + size > max_descs) { /* full: close it */
                kn->group[kn->n_groups] = kn->n;
                kn = NULL;
            }
            if (!kn) {
                kn = &out->kernels[out->n++];
                kn->op = RAP_OP_INPUT;
                kn->level = lv;
                int cap = max_descs < N ? max_descs : N;
                kn->nodes = rap_malloc(sizeof(int) * (size_t)(cap + 1), "row fusion");
                kn->group = rap_malloc(sizeof(int) * (size_t)(cap + 2), "row fusion");
                if (!kn->nodes || !kn->group) {
                    st = RAP_ERR_NOMEM;
                    goto done;
                }
            }
            kn->group[kn->n_groups++] = kn->n;
            for (int i = root; i < N; i++)
                if (unit_of[i] == root)
                    kn->nodes[kn->n++] = i;
        }
        if (kn)
            kn->group[kn->n_groups] = kn->n;
        for (int k = 0; k < in->n; k++) {
            if (ulevel[N + k] != lv)
                continue;
            const rap_kernel *src = &in->kernels[k];
            rap_kernel *kn = &out->kernels[out->n++];
            *kn = *src;
            kn->level = lv;
            kn->group = NULL;
            kn->n_groups = 0;
            kn->nodes = rap_malloc(sizeof(int) * (size_t)src->n, "row fusion");
            if (!kn->nodes) {
                st = RAP_ERR_NOMEM;
                goto done;
            }
            kn->n = 0;
            for (int j = 0; j < src->n; j++) /* only its non-row-local nodes */
                if (!rap_node_row_local(p, src->nodes[j]))
                    kn->nodes[kn->n++] = src->nodes[j];
            if (kn->n == 0) {
                rap_free(kn->nodes);
                out->n--;
            }
        }
    }
done:
    if (st != RAP_OK)
        rap_fusion_free(out);
    rap_free(parent);
    rap_free(size);
    rap_free(unit_of);
    rap_free(ulevel);
    rap_free(kof);
    return st;
}

bool rap_fusion_same_group(const rap_fusion *f, int k, int a, int b)
{
    const rap_kernel *kn = &f->kernels[k];
    if (!kn->group)
        return false;
    int ja = -1, jb = -1;
    for (int j = 0; j < kn->n; j++) {
        ja = kn->nodes[j] == a ? j : ja;
        jb = kn->nodes[j] == b ? j : jb;
    }
    return ja >= 0 && jb > ja && rap_kernel_group_of(kn, ja) == rap_kernel_group_of(kn, jb);
}

rap_status rap_fusion_check_groups(const rap_kernel *kn, int k)
{
    if (!kn->group)
        return kn->n_groups == 0 ? RAP_OK
                                 : rap_fail(RAP_ERR_PLAN, "fusion: kernel %d has groups but no "
                                            "group table", k);
    if (kn->op != RAP_OP_INPUT || kn->n_groups < 1 || kn->group[0] != 0 ||
        kn->group[kn->n_groups] != kn->n)
        return rap_fail(RAP_ERR_PLAN, "fusion: row kernel %d: its %d groups must start at node 0 "
                        "and end at its last node (%d)", k, kn->n_groups, kn->n);
    for (int g = 0; g < kn->n_groups; g++)
        if (kn->group[g + 1] <= kn->group[g])
            return rap_fail(RAP_ERR_PLAN, "fusion: row kernel %d: group %d is empty", k, g);
    return RAP_OK;
}

rap_status rap_fuse(const rap_plan *p, rap_fuse_kind kind, rap_fusion *f)
{
    if (kind == RAP_FUSE_NONE)
        return rap_fuse_none(p, f);
    RAP_TRY(rap_fuse_levels(p, f));
    if (kind != RAP_FUSE_ROWS && (kind != RAP_FUSE_AUTO || !rap_fuse_rows_pays(f)))
        return RAP_OK;
    rap_fusion r;
    rap_status st = rap_fuse_rows(p, f, RAP_ROW_STAGES, RAP_ROW_DESCS, &r);
    rap_fusion_free(f);
    if (st == RAP_OK)
        *f = r;
    return st;
}
