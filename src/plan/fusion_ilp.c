/*
 * fusion_ilp.c -- the fusion integer program (fusion_ilp.h) on GLPK.
 *
 * Variables: x[i,s] = 1 when op i runs at stage s, for s in its window
 * [asap_i, S + 1 - height_i]; y[t,s] = 1 when a kernel of type t runs at
 * stage s. Rows:
 *   assign      sum_s x[i,s] = 1
 *   precedence  sum_{s' <= s} x[i,s'] <= sum_{s' <= s-1} x[j,s']   (j = input of i)
 *   link        x[i,s] <= y[type(i),s]
 * Objective: min sum_{t,s} fixed_ms[t] y[t,s] (+ const_ms). The LP is
 * solved by the simplex, then glp_intopt with tm_lim; the greedy level
 * fusion (x at asap) is offered as the first incumbent from the callback,
 * so a time limit always leaves a solution at least as good as greedy.
 */
#include "plan/fusion_ilp.h"

#include "plan/search.h"
#include "sched/fusion_file.h"

#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

rap_ilp_config rap_ilp_defaults(void)
{
    rap_ilp_config c;
    memset(&c, 0, sizeof c);
    c.batch = 4096;
    c.time_limit_s = 5.0;
    c.extra_stages = 2;
    return c;
}

int rap_ilp_type(const rap_ilp_costs *c, rap_op_type op, int variant)
{
    for (int t = 0; t < c->n; t++)
        if (c->op[t] == op && c->variant[t] == variant)
            return t;
    return -1;
}

static bool is_op(const rap_plan *p, int i)
{
    return i >= 0 && p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT;
}

rap_status rap_ilp_costs_of(const rap_plan *p, const rap_ilp_config *cfg, rap_ilp_costs *c)
{
    memset(c, 0, sizeof *c);
    int *nodes = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "ilp costs");
    if (!nodes)
        return RAP_ERR_NOMEM;
    double B = (double)cfg->batch;
    for (int i = 0; i < p->n_nodes; i++) {
        if (!is_op(p, i))
            continue;
        int v = rap_node_variant(p, i);
        if (rap_ilp_type(c, p->nodes[i].op, v) >= 0)
            continue;
        if (c->n == RAP_ILP_MAX_TYPES) {
            rap_free(nodes);
            return rap_fail(RAP_ERR_PLAN, "fusion ILP: more than %d kernel types", RAP_ILP_MAX_TYPES);
        }
        int t = c->n++, n = 0;
        c->op[t] = p->nodes[i].op;
        c->variant[t] = v;
        for (int j = i; j < p->n_nodes; j++)
            if (is_op(p, j) && p->nodes[j].op == c->op[t] && rap_node_variant(p, j) == v)
                nodes[n++] = j;
        c->n_ops[t] = n;
        /* one kernel of all n ops vs n kernels of one: a kernel's fixed
         * part and the per-op marginal of this type */
        rap_kfeat f;
        double single = 0;
        for (int j = 0; j < n; j++) {
            rap_kfeat_of(p, nodes, j, j + 1, B, B, &f);
            single += rap_predict_ms(cfg->pred, &f, NULL);
        }
        rap_kfeat_of(p, nodes, 0, n, B, B, &f);
        double all = rap_predict_ms(cfg->pred, &f, NULL);
        double fixed = n > 1 ? (single - all) / (n - 1) : single;
        double margin = n > 1 ? (all - fixed) / n : 0;
        if (fixed < 1e-6) { /* fusion predicted not to pay: keep a token cost */
            fixed = 1e-6;
            margin = single / n - fixed;
        }
        c->fixed_ms[t] = fixed;
        c->margin_ms[t] = margin;
        c->const_ms += margin * n;
    }
    rap_free(nodes);
    return RAP_OK;
}

double rap_ilp_objective(const rap_ilp_costs *c, const rap_fusion *f)
{
    double s = c->const_ms;
    for (int k = 0; k < f->n; k++) {
        int t = rap_ilp_type(c, f->kernels[k].op, f->kernels[k].variant);
        s += t >= 0 ? c->fixed_ms[t] : 0;
    }
    return s;
}

double rap_fusion_predicted_ms(const rap_plan *p, const rap_fusion *f, const rap_predictor *pred,
                               int64_t batch)
{
    double s = 0;
    for (int k = 0; k < f->n; k++) /* identities: 0 (launch nothing); row kernels too */
        s += rap_slice_ms(p, f, pred, k, 0, f->kernels[k].n, 0, batch, batch);
    return s;
}

/* ------------------------------------------------------------- heuristic */

/* Kernel elimination: given stages of every op (precedence holds), tries
 * to empty a kernel (type t, stage s) by moving each of its ops to another
 * stage where type t already has a kernel, between its input's stage and
 * its consumers' earliest stage. Repeats until no kernel can be emptied.
 * cons/cons_first: consumers of each node (CSR). */
static void eliminate_kernels(const rap_plan *p, const int *ops, int n, const int *type,
                              const int *cons_first, const int *cons, int S, int T, int *stage,
                              int *count /* (T * (S + 2)) ops per (type, stage) */, int *target)
{
    for (int i = 0; i < T * (S + 2); i++)
        count[i] = 0;
    for (int a = 0; a < n; a++)
        count[type[ops[a]] * (S + 2) + stage[ops[a]]]++;
    bool changed = true;
    while (changed) {
        changed = false;
        for (int t = 0; t < T; t++) {
            for (int s = 1; s <= S; s++) {
                if (count[t * (S + 2) + s] == 0)
                    continue;
                bool ok = true;
                for (int a = 0; a < n && ok; a++) {
                    int i = ops[a];
                    target[i] = -1;
                    if (type[i] != t || stage[i] != s)
                        continue;
                    int in = p->nodes[i].input;
                    int lo = is_op(p, in) ? stage[in] + 1 : 1, hi = S;
                    for (int c = cons_first[i]; c < cons_first[i + 1]; c++)
                        if (stage[cons[c]] - 1 < hi)
                            hi = stage[cons[c]] - 1;
                    for (int q = lo; q <= hi && target[i] < 0; q++)
                        if (q != s && count[t * (S + 2) + q] > 0)
                            target[i] = q;
                    ok = target[i] > 0;
                }
                if (!ok)
                    continue;
                for (int a = 0; a < n; a++) {
                    int i = ops[a];
                    if (type[i] == t && stage[i] == s && target[i] > 0) {
                        stage[i] = target[i];
                        count[t * (S + 2) + s]--;
                        count[t * (S + 2) + target[i]]++;
                    }
                }
                changed = true;
            }
        }
    }
}

static double stages_cost(const rap_ilp_costs *c, const int *count, int S)
{
    double s = 0;
    for (int t = 0; t < c->n; t++)
        for (int q = 1; q <= S; q++)
            s += count[t * (S + 2) + q] > 0 ? c->fixed_ms[t] : 0;
    return s;
}

/* ------------------------------------------------------------- the ILP */

/* Objective scale: ms -> us, so costs are O(1..100). */
#define SCALE 1000.0

/* One rap_fuse_ilp call: the plan's ops, their stage windows, the integer
 * program and its first incumbent. Arrays named by node are indexed by
 * plan node (N = p->n_nodes); only ops' entries are meaningful. ops[0..n)
 * are the representatives (the ops with variables), all[0..n_all) every
 * op, both in plan order. Stage g (1-based, g <= Sx) lies in window
 * (g - 1) / S; with NW = 1 there is one window and Sx = S. */
typedef struct {
    const rap_plan *p;
    const rap_ilp_config *cfg;
    rap_ilp_costs costs;
    int N, n, n_all, L;      /* nodes, representatives, ops, longest chain */
    int S, NW, Sx, T;        /* sub-stages a window, windows, stages, kernel types */
    int *ops;                /* (N) representatives (before ilp_representatives: every op) */
    int *all;                /* (N) every op */
    int *asap;               /* (N) earliest stage: 1 + the input op's */
    int *height;             /* (N) longest chain from the op to a last consumer (>= 1) */
    int *type;               /* (N) kernel type (index into costs) */
    int *rep;                /* (N) the op's representative */
    double *mult;            /* (N) ops a representative stands for */
    int *lo, *hi, *xcol;     /* (N) a representative's stages [lo, hi], column of x[i, lo] */
    int *ylo, *yhi, *ycol;   /* (T) a type's stages [ylo, yhi], column of y[t, ylo] */
    int ncol;                /* columns of the program (x then y) */
    int *stage;              /* (N) the incumbent, then the solution */
    double *start;           /* (ncol + 1) the incumbent as column values, 1-based */
    int *cons_first, *cons;  /* (N + 2), (N) consumers of each node (CSR) */
    int *count;              /* (T * (S + 2)) ops per (type, sub-stage) */
    int *target;             /* (N) scratch of eliminate_kernels, then first-fit stages */
    int *ia, *ja;            /* (nz + 1) the constraint matrix's entries, 1-based */
    double *ar;
    size_t nz;
    glp_prob *lp;
} ilp;

/* Window of stage g. */
static int win_of(const ilp *w, int g) { return (g - 1) / w->S; }

static void ilp_free(ilp *w)
{
    if (w->lp)
        glp_delete_prob(w->lp);
    int **ints[] = {&w->ops,  &w->all,  &w->asap,       &w->height, &w->type,  &w->rep,
                    &w->lo,   &w->hi,   &w->xcol,       &w->ylo,    &w->yhi,   &w->ycol,
                    &w->stage, &w->cons_first, &w->cons, &w->count, &w->target, &w->ia,
                    &w->ja};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        rap_free(*ints[i]);
        *ints[i] = NULL;
    }
    rap_free(w->mult);
    rap_free(w->start);
    rap_free(w->ar);
    w->mult = w->start = w->ar = NULL;
    w->lp = NULL;
}

/* The per-node arrays (N + 1 entries each; mult, asap and height zeroed).
 * RAP_ERR_NOMEM when one cannot be had (ilp_free frees the others). */
static rap_status ilp_alloc_nodes(ilp *w)
{
    size_t n = (size_t)(w->N + 1);
    w->ops = rap_malloc(sizeof(int) * n, "ilp");
    w->all = rap_malloc(sizeof(int) * n, "ilp");
    w->asap = rap_calloc(sizeof(int) * n, "ilp");
    w->height = rap_calloc(sizeof(int) * n, "ilp");
    w->type = rap_malloc(sizeof(int) * n, "ilp");
    w->rep = rap_malloc(sizeof(int) * n, "ilp");
    w->mult = rap_calloc(sizeof(double) * n, "ilp");
    w->lo = rap_malloc(sizeof(int) * n, "ilp");
    w->hi = rap_malloc(sizeof(int) * n, "ilp");
    w->xcol = rap_malloc(sizeof(int) * n, "ilp");
    w->stage = rap_malloc(sizeof(int) * n, "ilp");
    w->cons_first = rap_calloc(sizeof(int) * (n + 1), "ilp");
    w->cons = rap_malloc(sizeof(int) * n, "ilp");
    w->target = rap_malloc(sizeof(int) * n, "ilp");
    if (!w->ops || !w->all || !w->asap || !w->height || !w->type || !w->rep || !w->mult ||
        !w->lo || !w->hi || !w->xcol || !w->stage || !w->cons_first || !w->cons || !w->target)
        return RAP_ERR_NOMEM;
    return RAP_OK;
}

/* ops (every op, plan order) and n, each op's asap stage and type, the
 * longest chain L, and each op's height (plans are topological: consumers
 * come later). This function can't fail. */
static void ilp_levels(ilp *w)
{
    const rap_plan *p = w->p;
    int n = 0, L = 0;
    for (int i = 0; i < w->N; i++) {
        if (!is_op(p, i))
            continue;
        w->ops[n++] = i;
        int in = p->nodes[i].input;
        w->asap[i] = is_op(p, in) ? w->asap[in] + 1 : 1;
        L = w->asap[i] > L ? w->asap[i] : L;
        w->type[i] = rap_ilp_type(&w->costs, p->nodes[i].op, rap_node_variant(p, i));
    }
    for (int i = w->N - 1; i >= 0; i--) {
        if (!is_op(p, i))
            continue;
        if (w->height[i] < 1)
            w->height[i] = 1;
        int in = p->nodes[i].input;
        if (is_op(p, in) && w->height[in] < w->height[i] + 1)
            w->height[in] = w->height[i] + 1;
    }
    w->n = w->n_all = n;
    w->L = L;
}

/* Isomorphic subtrees share one stage assignment: copying the stages of
 * one copy onto another never adds a kernel, so the optimum is unchanged.
 * rep[i]: the representative of op i (i's input's representative's first
 * child of i's shape, or the first root op of i's shape); only
 * representatives get variables. Sets all (every op), rep, mult, and ops
 * and n to the representatives. RAP_ERR_NOMEM (nothing else changed but
 * all and rep). */
static rap_status ilp_representatives(ilp *w)
{
    const rap_plan *p = w->p;
    int N = w->N, n = w->n, *ops = w->ops, *rep = w->rep;
    uint64_t *shape = rap_calloc(sizeof(uint64_t) * (size_t)(N + 1), "ilp");
    uint64_t *acc = rap_calloc(sizeof(uint64_t) * (size_t)(N + 1), "ilp");
    int *kid_first = rap_calloc(sizeof(int) * (size_t)(N + 2), "ilp");
    int *kids = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    rap_status st = RAP_OK;
    if (!shape || !acc || !kid_first || !kids) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int i = N - 1; i >= 0; i--) {
        if (!is_op(p, i))
            continue;
        shape[i] = rap_mix64((uint64_t)w->type[i] * 0x100000001b3ULL + acc[i] + 1);
        if (is_op(p, p->nodes[i].input))
            acc[p->nodes[i].input] += rap_mix64(shape[i] ^ 0x5bd1e995ULL);
    }
    for (int a = 0; a < n; a++)
        if (is_op(p, p->nodes[ops[a]].input))
            kid_first[p->nodes[ops[a]].input + 1]++;
    for (int i = 0; i < N; i++)
        kid_first[i + 1] += kid_first[i];
    kid_first[N + 1] = kid_first[N];
    for (int i = 0; i < N; i++)
        rep[i] = kid_first[i]; /* fill cursor */
    for (int a = 0; a < n; a++) {
        int in = p->nodes[ops[a]].input;
        if (is_op(p, in))
            kids[rep[in]++] = ops[a];
    }
    int n_roots = 0;
    for (int a = 0; a < n; a++) {
        int i = ops[a], in = p->nodes[i].input;
        w->all[a] = i;
        rep[i] = i;
        if (is_op(p, in)) {
            int jr = rep[in];
            for (int c = kid_first[jr]; c < kid_first[jr + 1]; c++)
                if (shape[kids[c]] == shape[i]) {
                    rep[i] = kids[c];
                    break;
                }
        } else {
            for (int r = 0; r < n_roots; r++) /* ops[0..n_roots) hold the root reps */
                if (shape[ops[r]] == shape[i]) {
                    rep[i] = ops[r];
                    break;
                }
            if (rep[i] == i)
                ops[n_roots++] = i;
        }
    }
    w->n = 0;
    for (int a = 0; a < w->n_all; a++)
        if (rep[w->all[a]] == w->all[a])
            ops[w->n++] = w->all[a];
    for (int a = 0; a < w->n_all; a++)
        w->mult[rep[w->all[a]]] += 1.0;
out:
    rap_free(shape);
    rap_free(acc);
    rap_free(kid_first);
    rap_free(kids);
    return st;
}

/* S (sub-stages a window: L + extra_stages, or one per op), NW (the
 * windows of the capacity-aware variant, 1 without it or when it would
 * need more than 6000 stage variables) and Sx = NW * S. This function
 * can't fail. */
static void ilp_stages(ilp *w)
{
    const rap_ilp_config *cfg = w->cfg;
    int n = w->n, L = w->L;
    int S = cfg->extra_stages < 0 ? (n > L ? n : L) : L + cfg->extra_stages;
    int NW = cfg->window_cap_ms && cfg->n_windows > 1 ? cfg->n_windows : 1;
    if (NW > 1) {
        size_t vars = 0;
        for (int a = 0; a < n; a++)
            vars += (size_t)(NW * S + 2 - w->height[w->ops[a]] - w->asap[w->ops[a]]);
        if (vars > 6000) {
            NW = 1;
            rap_info("fusion ILP: capacity-aware variant too large (%zu stage variables), "
                     "fusing without capacities", vars);
        }
    }
    w->S = S;
    w->NW = NW;
    w->Sx = NW * S;
}

/* The columns: x[i, s] for each representative i and s in [asap_i,
 * Sx + 1 - height_i] (xcol[i]: x[i, lo[i]]), then y[t, s] for each type
 * over the union of its ops' windows (ycol[t]: y[t, ylo[t]]); ncol in all.
 * RAP_ERR_NOMEM. */
static rap_status ilp_columns(ilp *w)
{
    int ncol = 0, T = w->T;
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a];
        w->lo[i] = w->asap[i];
        w->hi[i] = w->Sx + 1 - w->height[i];
        w->xcol[i] = ncol + 1;
        ncol += w->hi[i] - w->lo[i] + 1;
    }
    w->ylo = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    w->yhi = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    w->ycol = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    if (!w->ylo || !w->yhi || !w->ycol)
        return RAP_ERR_NOMEM;
    for (int t = 0; t < T; t++) {
        w->ylo[t] = w->Sx + 1;
        w->yhi[t] = 0;
    }
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a], t = w->type[i];
        w->ylo[t] = w->lo[i] < w->ylo[t] ? w->lo[i] : w->ylo[t];
        w->yhi[t] = w->hi[i] > w->yhi[t] ? w->hi[i] : w->yhi[t];
    }
    for (int t = 0; t < T; t++) {
        w->ycol[t] = ncol + 1;
        ncol += w->yhi[t] - w->ylo[t] + 1;
    }
    w->ncol = ncol;
    return RAP_OK;
}

/* Room for the constraint matrix (assign w, precedence <= w * (w_i + w_j)
 * and link 2w entries per op; the capacity rows at most one a column) and
 * the start vector. RAP_ERR_NOMEM. */
static rap_status ilp_alloc_matrix(ilp *w)
{
    const rap_plan *p = w->p;
    size_t nnz = 0;
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a], wd = w->hi[i] - w->lo[i] + 1, in = p->nodes[i].input;
        nnz += (size_t)wd * 3;
        if (is_op(p, in))
            nnz += (size_t)wd * (size_t)(wd + w->hi[in] - w->lo[in] + 1);
    }
    nnz += (size_t)w->ncol; /* window capacity rows */
    w->ia = rap_malloc(sizeof(int) * (nnz + 1), "ilp");
    w->ja = rap_malloc(sizeof(int) * (nnz + 1), "ilp");
    w->ar = rap_malloc(sizeof(double) * (nnz + 1), "ilp");
    w->start = rap_calloc(sizeof(double) * (size_t)(w->ncol + 1), "ilp");
    if (!w->ia || !w->ja || !w->ar || !w->start)
        return RAP_ERR_NOMEM;
    return RAP_OK;
}

/* Appends the matrix entry (row r, column c) = v. */
static void ilp_nz(ilp *w, int r, int c, double v)
{
    size_t k = ++w->nz;
    w->ia[k] = r;
    w->ja[k] = c;
    w->ar[k] = v;
}

/* Creates the program: binary columns, the objective (a kernel's fixed
 * cost for each y; capacity-aware: 1.01 x it in `exposed`, 0.01 x
 * elsewhere, plus the ops' margins of x in `exposed`) and the rows, in
 * this order: per representative its assign row, precedence rows and link
 * rows, then one capacity row per training window. The entries go to
 * ia/ja/ar (loaded by ilp_solve). This function can't fail. */
static void ilp_program(ilp *w)
{
    const rap_plan *p = w->p;
    const rap_ilp_costs *c = &w->costs;
    int NW = w->NW, T = w->T;
    glp_prob *lp = w->lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, w->ncol);
    for (int col = 1; col <= w->ncol; col++) {
        glp_set_col_kind(lp, col, GLP_BV);
        glp_set_obj_coef(lp, col, 0.0);
    }
    for (int t = 0; t < T; t++)
        for (int s = w->ylo[t]; s <= w->yhi[t]; s++) {
            double cost = c->fixed_ms[t];
            if (NW > 1)
                cost = win_of(w, s) == NW - 1 ? cost * 1.01 : cost * 0.01;
            glp_set_obj_coef(lp, w->ycol[t] + s - w->ylo[t], cost * SCALE);
        }
    if (NW > 1)
        for (int a = 0; a < w->n; a++) {
            int i = w->ops[a];
            for (int s = w->lo[i]; s <= w->hi[i]; s++)
                if (win_of(w, s) == NW - 1)
                    glp_set_obj_coef(lp, w->xcol[i] + s - w->lo[i],
                                     w->mult[i] * c->margin_ms[w->type[i]] * SCALE);
        }
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a], lo = w->lo[i], hi = w->hi[i];
        int row = glp_add_rows(lp, 1); /* assign: sum_s x[i, s] = 1 */
        glp_set_row_bnds(lp, row, GLP_FX, 1.0, 1.0);
        for (int s = lo; s <= hi; s++)
            ilp_nz(w, row, w->xcol[i] + s - lo, 1.0);
        int in = p->nodes[i].input;
        if (is_op(p, in)) /* precedence: i by s only where its input ran by s - 1 */
            for (int s = lo; s < hi; s++) {
                row = glp_add_rows(lp, 1);
                glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
                for (int q = lo; q <= s; q++)
                    ilp_nz(w, row, w->xcol[i] + q - lo, 1.0);
                for (int q = w->lo[in]; q <= s - 1 && q <= w->hi[in]; q++)
                    ilp_nz(w, row, w->xcol[in] + q - w->lo[in], -1.0);
            }
        int t = w->type[i];
        for (int s = lo; s <= hi; s++) { /* link: x[i, s] <= y[t, s] */
            row = glp_add_rows(lp, 1);
            glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
            ilp_nz(w, row, w->xcol[i] + s - lo, 1.0);
            ilp_nz(w, row, w->ycol[t] + s - w->ylo[t], -1.0);
        }
    }
    /* capacity rows: what a training window holds (whole kernels) */
    for (int win = 0; NW > 1 && win < NW - 1; win++) {
        int row = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, row, GLP_UP, 0.0, w->cfg->window_cap_ms[win] * SCALE);
        for (int t = 0; t < T; t++)
            for (int s = w->ylo[t]; s <= w->yhi[t]; s++)
                if (win_of(w, s) == win)
                    ilp_nz(w, row, w->ycol[t] + s - w->ylo[t], c->fixed_ms[t] * SCALE);
        for (int a = 0; a < w->n; a++) {
            int i = w->ops[a];
            for (int s = w->lo[i]; s <= w->hi[i]; s++)
                if (win_of(w, s) == win)
                    ilp_nz(w, row, w->xcol[i] + s - w->lo[i],
                           w->mult[i] * c->margin_ms[w->type[i]] * SCALE);
        }
    }
}

/* stage[] of the representatives: kernel elimination from the level
 * fusion (asap) and from the latest stages (alap), the better one (ties:
 * asap). Builds cons_first/cons. RAP_ERR_NOMEM. */
static rap_status ilp_eliminated_start(ilp *w)
{
    const rap_plan *p = w->p;
    int N = w->N, n = w->n, S = w->S, T = w->T, *ops = w->ops;
    w->count = rap_malloc(sizeof(int) * (size_t)T * (size_t)(S + 2), "ilp");
    int *alt = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    if (!w->count || !alt) {
        rap_free(alt);
        return RAP_ERR_NOMEM;
    }
    for (int a = 0; a < n; a++)
        if (is_op(p, p->nodes[ops[a]].input))
            w->cons_first[p->nodes[ops[a]].input + 1]++;
    for (int i = 0; i < N; i++)
        w->cons_first[i + 1] += w->cons_first[i];
    w->cons_first[N + 1] = w->cons_first[N];
    for (int i = 0; i < N; i++)
        w->target[i] = w->cons_first[i];
    for (int a = 0; a < n; a++) {
        int in = p->nodes[ops[a]].input;
        if (is_op(p, in))
            w->cons[w->target[in]++] = ops[a];
    }
    for (int a = 0; a < n; a++) {
        w->stage[ops[a]] = w->lo[ops[a]];
        alt[ops[a]] = S + 1 - w->height[ops[a]];
    }
    eliminate_kernels(p, ops, n, w->type, w->cons_first, w->cons, S, T, alt, w->count, w->target);
    double alt_cost = stages_cost(&w->costs, w->count, S);
    eliminate_kernels(p, ops, n, w->type, w->cons_first, w->cons, S, T, w->stage, w->count,
                      w->target);
    if (alt_cost < stages_cost(&w->costs, w->count, S))
        for (int a = 0; a < n; a++)
            w->stage[ops[a]] = alt[ops[a]];
    rap_free(alt);
    return RAP_OK;
}

/* Capacity-aware: a better start, the plain ILP's stages (half the time
 * limit), when it solves with the same S. Otherwise stage[] is left as
 * it is. This function can't fail. */
static void ilp_plain_start(ilp *w)
{
    rap_ilp_config pc = *w->cfg;
    pc.window_cap_ms = NULL;
    pc.n_windows = 0;
    pc.time_limit_s = w->cfg->time_limit_s / 2;
    rap_fusion pf;
    rap_ilp_result pr;
    if (rap_fuse_ilp(w->p, &pc, &pf, &pr) != RAP_OK)
        return;
    if (pr.n_stages == w->S)
        for (int k = 0; k < pf.n; k++)
            for (int j = 0; j < pf.kernels[k].n; j++)
                if (w->rep[pf.kernels[k].nodes[j]] == pf.kernels[k].nodes[j])
                    w->stage[pf.kernels[k].nodes[j]] = pf.kernels[k].level;
    rap_fusion_free(&pf);
}

/* Capacity-aware: places the start's kernels (sub-stages 1..S) whole,
 * first fit in dependency order, each in the earliest training window at
 * or after its inputs' with room left, else `exposed`: stage (window w,
 * sub-stage s) = w * S + s. This function can't fail. */
static void ilp_first_fit(ilp *w)
{
    const rap_plan *p = w->p;
    const rap_ilp_costs *c = &w->costs;
    int n = w->n, S = w->S, NW = w->NW, *ops = w->ops, *stage = w->stage, *target = w->target;
    double left[64];
    for (int win = 0; win < NW - 1 && win < 64; win++)
        left[win] = w->cfg->window_cap_ms[win];
    for (int s = 1; s <= S; s++)
        for (int t = 0; t < w->T; t++) {
            double load = c->fixed_ms[t];
            int wmin = 0;
            bool any = false;
            for (int a = 0; a < n; a++) {
                int i = ops[a], in = p->nodes[i].input;
                if (w->type[i] != t || stage[i] != s)
                    continue;
                any = true;
                load += w->mult[i] * c->margin_ms[t];
                if (is_op(p, in) && win_of(w, target[in]) > wmin)
                    wmin = win_of(w, target[in]); /* placed: its stage is earlier */
            }
            if (!any)
                continue;
            int win = wmin;
            while (win < NW - 1 && win < 64 && left[win] < load)
                win++;
            if (win >= 64)
                win = NW - 1;
            if (win < NW - 1)
                left[win] -= load;
            for (int a = 0; a < n; a++) {
                int i = ops[a];
                if (w->type[i] == t && stage[i] == s)
                    target[i] = win * S + s;
            }
        }
    for (int a = 0; a < n; a++)
        stage[ops[a]] = target[ops[a]];
}

/* The first incumbent in stage[] and as column values in start[]: kernel
 * elimination, and with capacities the plain ILP's stages placed first
 * fit. RAP_ERR_NOMEM. */
static rap_status ilp_incumbent(ilp *w)
{
    RAP_TRY(ilp_eliminated_start(w));
    if (w->NW > 1) {
        ilp_plain_start(w);
        ilp_first_fit(w);
    }
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a], t = w->type[i];
        w->start[w->xcol[i] + w->stage[i] - w->lo[i]] = 1.0;
        w->start[w->ycol[t] + w->stage[i] - w->ylo[t]] = 1.0;
    }
    return RAP_OK;
}

typedef struct {
    const double *start;  /* (n_cols + 1) the greedy solution, 1-based */
    bool offered;
    double bound;         /* best bound seen (scaled) */
    bool have_bound;
} cb_state;

static void ilp_callback(glp_tree *tree, void *info)
{
    cb_state *cs = info;
    int r = glp_ios_reason(tree);
    if (r == GLP_IHEUR && !cs->offered) {
        cs->offered = true;
        glp_ios_heur_sol(tree, cs->start);
    }
    int best = glp_ios_best_node(tree);
    if (best) {
        double b = glp_ios_node_bound(tree, best);
        if (!cs->have_bound || b > cs->bound) {
            cs->bound = b;
            cs->have_bound = true;
        }
    }
}

/* Loads the matrix and solves: the LP by the simplex, then glp_intopt
 * (the incumbent offered first) within what is left of the time limit
 * (started at t0). Fills res's sizes, objective, bound, gap and status and
 * stage[] of the representatives with the solution. No LP in time:
 * *heuristic_only, stage[] stays the incumbent, bound one kernel per type.
 * RAP_ERR_INTERNAL when there is no integer solution. */
static rap_status ilp_solve(ilp *w, double t0, rap_ilp_result *res, bool *heuristic_only)
{
    const rap_ilp_config *cfg = w->cfg;
    int NW = w->NW;
    glp_load_matrix(w->lp, (int)w->nz, w->ia, w->ja, w->ar);
    res->n_cols = w->ncol;
    res->n_rows = glp_get_num_rows(w->lp);

    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = cfg->verbose ? GLP_MSG_ON : GLP_MSG_OFF;
    sm.tm_lim = (int)(cfg->time_limit_s * 1000.0);
    int rc = glp_simplex(w->lp, &sm);
    *heuristic_only = rc != 0 || glp_get_status(w->lp) != GLP_OPT;
    if (*heuristic_only) {
        /* no LP in time: the kernel-elimination solution, bounded below by
         * one kernel per type */
        double lb = NW > 1 ? 0 : w->costs.const_ms;
        for (int t = 0; t < w->T; t++)
            lb += w->costs.fixed_ms[t] * (NW > 1 ? 0.01 : 1);
        res->bound = lb;
        res->time_limit = true;
        snprintf(res->status, sizeof res->status, "LP not solved (glp_simplex %d): heuristic", rc);
        return RAP_OK;
    }
    double lp_bound = glp_get_obj_val(w->lp);
    cb_state cs = {w->start, false, 0, false};
    glp_iocp io;
    glp_init_iocp(&io);
    io.msg_lev = cfg->verbose ? GLP_MSG_ON : GLP_MSG_OFF;
    double left_ms = (cfg->time_limit_s - (rap_now() - t0)) * 1000.0;
    io.tm_lim = left_ms < 100 ? 100 : left_ms > 2e9 ? 2000000000 : (int)left_ms;
    io.cb_func = ilp_callback;
    io.cb_info = &cs;
    io.fp_heur = GLP_OFF;
    /* cuts did not narrow plan 3's gap within 5 s (tried: MIR, GMI,
     * clique, cover; branching and backtracking variants) */
    io.mir_cuts = GLP_OFF;
    io.clq_cuts = GLP_OFF;
    io.mip_gap = 1e-9;
    rc = glp_intopt(w->lp, &io);
    int ms = glp_mip_status(w->lp);
    if (ms != GLP_OPT && ms != GLP_FEAS)
        return rap_fail(RAP_ERR_INTERNAL, "fusion ILP: no integer solution (glp_intopt %d, status %d)",
                        rc, ms);
    double obj = glp_mip_obj_val(w->lp);
    res->optimal = ms == GLP_OPT && rc == 0;
    res->time_limit = rc == GLP_ETMLIM;
    double bound = cs.have_bound ? cs.bound : lp_bound;
    if (bound < lp_bound)
        bound = lp_bound;
    if (res->optimal || bound > obj)
        bound = obj;
    res->objective = obj / SCALE + (NW > 1 ? 0 : w->costs.const_ms);
    res->bound = bound / SCALE + (NW > 1 ? 0 : w->costs.const_ms);
    res->gap = res->objective > 0 ? (res->objective - res->bound) / res->objective : 0;
    snprintf(res->status, sizeof res->status, "%s",
             res->optimal ? "optimal" : res->time_limit ? "time limit (incumbent)" : "feasible");
    for (int a = 0; a < w->n; a++) {
        int i = w->ops[a];
        w->stage[i] = -1;
        for (int s = w->lo[i]; s <= w->hi[i]; s++)
            if (glp_mip_col_val(w->lp, w->xcol[i] + s - w->lo[i]) > 0.5)
                w->stage[i] = s;
        if (w->stage[i] < 0)
            return rap_fail(RAP_ERR_INTERNAL, "fusion ILP: op node %d has no stage", i);
    }
    return RAP_OK;
}

/* The fusion of stage[]: every op at its representative's stage; per
 * stage, one kernel per type in order of the type's first op, nodes in
 * plan order, level = stage. RAP_ERR_NOMEM (f partly built: the caller
 * frees it). */
static rap_status ilp_fusion(ilp *w, rap_fusion *f)
{
    const rap_plan *p = w->p;
    int n = w->n_all;
    for (int a = 0; a < n; a++)
        w->stage[w->all[a]] = w->stage[w->rep[w->all[a]]];
    f->kernels = rap_calloc(sizeof *f->kernels * (size_t)(n + 1), "fusion");
    if (!f->kernels)
        return RAP_ERR_NOMEM;
    for (int s = 1; s <= w->Sx; s++) {
        for (int a = 0; a < n; a++) {
            int i = w->all[a];
            if (w->stage[i] != s)
                continue;
            int kk;
            for (kk = f->n - 1; kk >= 0 && f->kernels[kk].level == s; kk--)
                if (f->kernels[kk].op == p->nodes[i].op &&
                    f->kernels[kk].variant == rap_node_variant(p, i))
                    break;
            if (kk < 0 || f->kernels[kk].level != s) {
                kk = f->n++;
                rap_kernel *kn = &f->kernels[kk];
                kn->op = p->nodes[i].op;
                kn->variant = rap_node_variant(p, i);
                kn->level = s;
                kn->nodes = rap_malloc(sizeof(int) * (size_t)w->costs.n_ops[w->type[i]], "fusion");
                if (!kn->nodes)
                    return RAP_ERR_NOMEM;
            }
            f->kernels[kk].nodes[f->kernels[kk].n++] = i;
        }
    }
    return RAP_OK;
}

/* res's kernels and the objective of the fusion built: capacity-aware,
 * the predicted exposed ms of whole kernels + 1 % of every kernel's fixed
 * cost; else the linearised cost. The gap of a heuristic-only solve is
 * taken on it. This function can't fail. */
static void ilp_report(const ilp *w, const rap_fusion *f, bool heuristic_only,
                       rap_ilp_result *res)
{
    res->n_kernels = f->n;
    if (w->NW > 1) {
        res->exposed_ms = 0;
        double all_fixed = 0;
        for (int k = 0; k < f->n; k++) {
            int t = rap_ilp_type(&w->costs, f->kernels[k].op, f->kernels[k].variant);
            all_fixed += w->costs.fixed_ms[t];
            if (win_of(w, f->kernels[k].level) == w->NW - 1)
                res->exposed_ms += w->costs.fixed_ms[t] + w->costs.margin_ms[t] * f->kernels[k].n;
        }
        res->objective = res->exposed_ms + 0.01 * all_fixed;
    } else {
        res->objective = rap_ilp_objective(&w->costs, f);
    }
    if (heuristic_only)
        res->gap = res->objective > 0 ? (res->objective - res->bound) / res->objective : 0;
}

rap_status rap_fuse_ilp(const rap_plan *p, const rap_ilp_config *cfg, rap_fusion *f,
                        rap_ilp_result *res)
{
    double t0 = rap_now();
    memset(res, 0, sizeof *res);
    memset(f, 0, sizeof *f);
    ilp w;
    memset(&w, 0, sizeof w);
    w.p = p;
    w.cfg = cfg;
    w.N = p->n_nodes;
    RAP_TRY(rap_ilp_costs_of(p, cfg, &w.costs));
    w.T = w.costs.n;
    bool heuristic_only = false;
    rap_status st = ilp_alloc_nodes(&w);
    if (st == RAP_OK) {
        ilp_levels(&w);
        st = ilp_representatives(&w);
    }
    if (st != RAP_OK)
        goto out;
    res->n_reps = w.n;
    ilp_stages(&w);
    res->capacity_aware = w.NW > 1;
    res->n_ops = w.n_all;
    res->n_types = w.costs.n;
    res->n_stages = w.Sx;
    if (w.n == 0) {
        snprintf(res->status, sizeof res->status, "empty plan");
        res->optimal = true;
        goto out;
    }
    if ((st = ilp_columns(&w)) != RAP_OK || (st = ilp_alloc_matrix(&w)) != RAP_OK)
        goto out;
    ilp_program(&w);
    if ((st = ilp_incumbent(&w)) != RAP_OK)
        goto out;
    if ((st = ilp_solve(&w, t0, res, &heuristic_only)) != RAP_OK)
        goto out;
    if ((st = ilp_fusion(&w, f)) != RAP_OK)
        goto out;
    ilp_report(&w, f, heuristic_only, res);
    st = rap_fusion_check(p, f);
out:
    ilp_free(&w);
    if (st != RAP_OK)
        rap_fusion_free(f);
    res->solve_s = rap_now() - t0;
    return st;
}
