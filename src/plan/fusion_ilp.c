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

/* Objective scale: ms -> us, so costs are O(1..100). */
#define SCALE 1000.0

rap_status rap_fuse_ilp(const rap_plan *p, const rap_ilp_config *cfg, rap_fusion *f,
                        rap_ilp_result *res)
{
    double t0 = rap_now();
    memset(res, 0, sizeof *res);
    memset(f, 0, sizeof *f);
    rap_ilp_costs costs;
    RAP_TRY(rap_ilp_costs_of(p, cfg, &costs));
    int N = p->n_nodes;
    int *ops = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *opid = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *asap = rap_calloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *height = rap_calloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *lo = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *hi = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *xcol = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *type = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *stage = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *ylo = NULL, *yhi = NULL, *ycol = NULL, *ia = NULL, *ja = NULL;
    int *cons_first = NULL, *cons = NULL, *count = NULL, *target = NULL;
    int *all = NULL, *rep = NULL, *kid_first = NULL, *kids = NULL;
    uint64_t *shape = NULL, *acc = NULL;
    double *mult = NULL;
    double *ar = NULL, *start = NULL;
    glp_prob *lp = NULL;
    rap_status st = RAP_OK;
    if (!ops || !opid || !asap || !height || !lo || !hi || !xcol || !type || !stage) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    int n = 0, L = 0;
    for (int i = 0; i < N; i++) {
        opid[i] = -1;
        if (!is_op(p, i))
            continue;
        opid[i] = n;
        ops[n++] = i;
        int in = p->nodes[i].input;
        asap[i] = is_op(p, in) ? asap[in] + 1 : 1;
        L = asap[i] > L ? asap[i] : L;
        type[i] = rap_ilp_type(&costs, p->nodes[i].op, rap_node_variant(p, i));
    }
    for (int i = N - 1; i >= 0; i--) { /* topological: consumers come later */
        if (!is_op(p, i))
            continue;
        if (height[i] < 1)
            height[i] = 1;
        int in = p->nodes[i].input;
        if (is_op(p, in) && height[in] < height[i] + 1)
            height[in] = height[i] + 1;
    }
    /* Isomorphic subtrees share one stage assignment: copying the stages
     * of one copy onto another never adds a kernel, so the optimum is
     * unchanged. rep[i]: the representative of op i (i's input's
     * representative's first child of i's shape, or the first root op of
     * i's shape); only representatives get variables. */
    all = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    rep = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    shape = rap_calloc(sizeof(uint64_t) * (size_t)(N + 1), "ilp");
    acc = rap_calloc(sizeof(uint64_t) * (size_t)(N + 1), "ilp");
    kid_first = rap_calloc(sizeof(int) * (size_t)(N + 2), "ilp");
    kids = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    if (!all || !rep || !shape || !acc || !kid_first || !kids) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int i = N - 1; i >= 0; i--) {
        if (!is_op(p, i))
            continue;
        shape[i] = rap_mix64((uint64_t)type[i] * 0x100000001b3ULL + acc[i] + 1);
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
    int n_all = n, n_roots = 0;
    for (int a = 0; a < n; a++) {
        int i = ops[a], in = p->nodes[i].input;
        all[a] = i;
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
    n = 0;
    for (int a = 0; a < n_all; a++)
        if (rep[all[a]] == all[a])
            ops[n++] = all[a];
    res->n_reps = n;
    int S = cfg->extra_stages < 0 ? (n > L ? n : L) : L + cfg->extra_stages;
    /* capacity-aware: stages are (window, sub-stage), S sub-stages a window */
    int NW = cfg->window_cap_ms && cfg->n_windows > 1 ? cfg->n_windows : 1;
    if (NW > 1) {
        size_t vars = 0;
        for (int a = 0; a < n; a++)
            vars += (size_t)(NW * S + 2 - height[ops[a]] - asap[ops[a]]);
        if (vars > 6000) {
            NW = 1;
            rap_info("fusion ILP: capacity-aware variant too large (%zu stage variables), "
                     "fusing without capacities", vars);
        }
    }
    int Sx = NW * S;
    res->capacity_aware = NW > 1;
    mult = rap_calloc(sizeof(double) * (size_t)(N + 1), "ilp");
    if (!mult) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int a = 0; a < n_all; a++)
        mult[rep[all[a]]] += 1.0;
    res->n_ops = n_all;
    res->n_types = costs.n;
    res->n_stages = Sx;
    if (n == 0) {
        snprintf(res->status, sizeof res->status, "empty plan");
        res->optimal = true;
        res->solve_s = rap_now() - t0;
        goto out;
    }
    /* columns */
    int ncol = 0;
    for (int a = 0; a < n; a++) {
        int i = ops[a];
        lo[i] = asap[i];
        hi[i] = Sx + 1 - height[i];
        xcol[i] = ncol + 1;
        ncol += hi[i] - lo[i] + 1;
    }
    int T = costs.n;
    ylo = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    yhi = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    ycol = rap_malloc(sizeof(int) * (size_t)T, "ilp");
    if (!ylo || !yhi || !ycol) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int t = 0; t < T; t++) {
        ylo[t] = Sx + 1;
        yhi[t] = 0;
    }
    for (int a = 0; a < n; a++) {
        int i = ops[a], t = type[i];
        ylo[t] = lo[i] < ylo[t] ? lo[i] : ylo[t];
        yhi[t] = hi[i] > yhi[t] ? hi[i] : yhi[t];
    }
    int nx = ncol;
    for (int t = 0; t < T; t++) {
        ycol[t] = ncol + 1;
        ncol += yhi[t] - ylo[t] + 1;
    }
    /* nonzeros: assign w, precedence <= w*(w_i + w_j), link 2w per op */
    size_t nnz = 0;
    for (int a = 0; a < n; a++) {
        int i = ops[a], w = hi[i] - lo[i] + 1, in = p->nodes[i].input;
        nnz += (size_t)w * 3;
        if (is_op(p, in))
            nnz += (size_t)w * (size_t)(w + hi[in] - lo[in] + 1);
    }
    ia = rap_malloc(sizeof(int) * (nnz + 1), "ilp");
    ja = rap_malloc(sizeof(int) * (nnz + 1), "ilp");
    ar = rap_malloc(sizeof(double) * (nnz + 1), "ilp");
    nnz += (size_t)ncol; /* window capacity rows */
    start = rap_calloc(sizeof(double) * (size_t)(ncol + 1), "ilp");
    if (!ia || !ja || !ar || !start) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, ncol);
    for (int c = 1; c <= ncol; c++) {
        glp_set_col_kind(lp, c, GLP_BV);
        glp_set_obj_coef(lp, c, 0.0);
    }
    /* window of stage g (1-based): (g - 1) / S; the last is `exposed` */
#define WIN(g) (((g) - 1) / S)
    for (int t = 0; t < T; t++)
        for (int s = ylo[t]; s <= yhi[t]; s++) {
            double c = costs.fixed_ms[t];
            if (NW > 1)
                c = WIN(s) == NW - 1 ? c * 1.01 : c * 0.01;
            glp_set_obj_coef(lp, ycol[t] + s - ylo[t], c * SCALE);
        }
    if (NW > 1)
        for (int a = 0; a < n; a++) {
            int i = ops[a];
            for (int s = lo[i]; s <= hi[i]; s++)
                if (WIN(s) == NW - 1)
                    glp_set_obj_coef(lp, xcol[i] + s - lo[i],
                                     mult[i] * costs.margin_ms[type[i]] * SCALE);
        }
    size_t k = 0;
    int row = 0;
#define NZ(r, c, v) (k++, ia[k] = (r), ja[k] = (c), ar[k] = (v))
    for (int a = 0; a < n; a++) {
        int i = ops[a];
        row = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, row, GLP_FX, 1.0, 1.0);
        for (int s = lo[i]; s <= hi[i]; s++)
            NZ(row, xcol[i] + s - lo[i], 1.0);
        int in = p->nodes[i].input;
        if (is_op(p, in)) {
            for (int s = lo[i]; s < hi[i]; s++) {
                row = glp_add_rows(lp, 1);
                glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
                for (int q = lo[i]; q <= s; q++)
                    NZ(row, xcol[i] + q - lo[i], 1.0);
                for (int q = lo[in]; q <= s - 1 && q <= hi[in]; q++)
                    NZ(row, xcol[in] + q - lo[in], -1.0);
            }
        }
        int t = type[i];
        for (int s = lo[i]; s <= hi[i]; s++) {
            row = glp_add_rows(lp, 1);
            glp_set_row_bnds(lp, row, GLP_UP, 0.0, 0.0);
            NZ(row, xcol[i] + s - lo[i], 1.0);
            NZ(row, ycol[t] + s - ylo[t], -1.0);
        }
    }
    /* capacity rows: what a training window holds (whole kernels) */
    for (int w = 0; NW > 1 && w < NW - 1; w++) {
        row = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, row, GLP_UP, 0.0, cfg->window_cap_ms[w] * SCALE);
        for (int t = 0; t < T; t++)
            for (int s = ylo[t]; s <= yhi[t]; s++)
                if (WIN(s) == w)
                    NZ(row, ycol[t] + s - ylo[t], costs.fixed_ms[t] * SCALE);
        for (int a = 0; a < n; a++) {
            int i = ops[a];
            for (int s = lo[i]; s <= hi[i]; s++)
                if (WIN(s) == w)
                    NZ(row, xcol[i] + s - lo[i], mult[i] * costs.margin_ms[type[i]] * SCALE);
        }
    }
    /* the first incumbent: kernel elimination from the level fusion (asap)
     * and from the latest stages (alap), the better one */
    cons_first = rap_calloc(sizeof(int) * (size_t)(N + 2), "ilp");
    cons = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    count = rap_malloc(sizeof(int) * (size_t)T * (size_t)(S + 2), "ilp");
    target = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    int *alt = rap_malloc(sizeof(int) * (size_t)(N + 1), "ilp");
    if (!cons_first || !cons || !count || !target || !alt) {
        rap_free(alt);
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int a = 0; a < n; a++)
        if (is_op(p, p->nodes[ops[a]].input))
            cons_first[p->nodes[ops[a]].input + 1]++;
    for (int i = 0; i < N; i++)
        cons_first[i + 1] += cons_first[i];
    cons_first[N + 1] = cons_first[N];
    for (int i = 0; i < N; i++)
        target[i] = cons_first[i];
    for (int a = 0; a < n; a++) {
        int in = p->nodes[ops[a]].input;
        if (is_op(p, in))
            cons[target[in]++] = ops[a];
    }
    for (int a = 0; a < n; a++) {
        stage[ops[a]] = lo[ops[a]];
        alt[ops[a]] = S + 1 - height[ops[a]];
    }
    eliminate_kernels(p, ops, n, type, cons_first, cons, S, T, alt, count, target);
    double alt_cost = stages_cost(&costs, count, S);
    eliminate_kernels(p, ops, n, type, cons_first, cons, S, T, stage, count, target);
    if (alt_cost < stages_cost(&costs, count, S))
        for (int a = 0; a < n; a++)
            stage[ops[a]] = alt[ops[a]];
    rap_free(alt);
    if (NW > 1) {
        /* a better start: the plain ILP's stages (half the time) */
        rap_ilp_config pc = *cfg;
        pc.window_cap_ms = NULL;
        pc.n_windows = 0;
        pc.time_limit_s = cfg->time_limit_s / 2;
        rap_fusion pf;
        rap_ilp_result pr;
        if (rap_fuse_ilp(p, &pc, &pf, &pr) == RAP_OK) {
            if (pr.n_stages == S)
                for (int kk = 0; kk < pf.n; kk++)
                    for (int j = 0; j < pf.kernels[kk].n; j++)
                        if (rep[pf.kernels[kk].nodes[j]] == pf.kernels[kk].nodes[j])
                            stage[pf.kernels[kk].nodes[j]] = pf.kernels[kk].level;
            rap_fusion_free(&pf);
        }
    }
    if (NW > 1) {
        /* place its kernels whole, first fit in dependency order: stage
         * (window w, sub-stage s) = w * S + s */
        double left[64];
        for (int w = 0; w < NW - 1 && w < 64; w++)
            left[w] = cfg->window_cap_ms[w];
        for (int s = 1; s <= S; s++)
            for (int t = 0; t < T; t++) {
                double load = costs.fixed_ms[t];
                int wmin = 0;
                bool any = false;
                for (int a = 0; a < n; a++) {
                    int i = ops[a], in = p->nodes[i].input;
                    if (type[i] != t || stage[i] != s)
                        continue;
                    any = true;
                    load += mult[i] * costs.margin_ms[t];
                    if (is_op(p, in) && WIN(target[in]) > wmin)
                        wmin = WIN(target[in]); /* placed: its stage is earlier */
                }
                if (!any)
                    continue;
                int w = wmin;
                while (w < NW - 1 && w < 64 && left[w] < load)
                    w++;
                if (w >= 64)
                    w = NW - 1;
                if (w < NW - 1)
                    left[w] -= load;
                for (int a = 0; a < n; a++) {
                    int i = ops[a];
                    if (type[i] == t && stage[i] == s)
                        target[i] = w * S + s;
                }
            }
        for (int a = 0; a < n; a++)
            stage[ops[a]] = target[ops[a]];
    }
    for (int a = 0; a < n; a++) {
        int i = ops[a];
        start[xcol[i] + stage[i] - lo[i]] = 1.0;
        start[ycol[type[i]] + stage[i] - ylo[type[i]]] = 1.0;
    }
#undef NZ
    glp_load_matrix(lp, (int)k, ia, ja, ar);
    res->n_cols = ncol;
    res->n_rows = glp_get_num_rows(lp);
    (void)nx;

    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = cfg->verbose ? GLP_MSG_ON : GLP_MSG_OFF;
    sm.tm_lim = (int)(cfg->time_limit_s * 1000.0);

    int rc = glp_simplex(lp, &sm);
    bool heuristic_only = rc != 0 || glp_get_status(lp) != GLP_OPT;
    if (heuristic_only) {
        /* no LP in time: the kernel-elimination solution, bounded below by
         * one kernel per type */
        double lb = NW > 1 ? 0 : costs.const_ms;
        for (int t = 0; t < T; t++)
            lb += costs.fixed_ms[t] * (NW > 1 ? 0.01 : 1);
        res->bound = lb;
        res->time_limit = true;
        snprintf(res->status, sizeof res->status, "LP not solved (glp_simplex %d): heuristic", rc);
        goto build;
    }
    double lp_bound = glp_get_obj_val(lp);
    cb_state cs = {start, false, 0, false};
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
    rc = glp_intopt(lp, &io);
    int ms = glp_mip_status(lp);
    if (ms != GLP_OPT && ms != GLP_FEAS) {
        st = rap_fail(RAP_ERR_INTERNAL, "fusion ILP: no integer solution (glp_intopt %d, status %d)",
                      rc, ms);
        goto out;
    }
    double obj = glp_mip_obj_val(lp);
    res->optimal = ms == GLP_OPT && rc == 0;
    res->time_limit = rc == GLP_ETMLIM;
    double bound = cs.have_bound ? cs.bound : lp_bound;
    if (bound < lp_bound)
        bound = lp_bound;
    if (res->optimal || bound > obj)
        bound = obj;
    res->objective = obj / SCALE + (NW > 1 ? 0 : costs.const_ms);
    res->bound = bound / SCALE + (NW > 1 ? 0 : costs.const_ms);
    res->gap = res->objective > 0 ? (res->objective - res->bound) / res->objective : 0;
    snprintf(res->status, sizeof res->status, "%s",
             res->optimal ? "optimal" : res->time_limit ? "time limit (incumbent)" : "feasible");
    /* read the stages and build the kernels */
    for (int a = 0; a < n; a++) {
        int i = ops[a];
        stage[i] = -1;
        for (int s = lo[i]; s <= hi[i]; s++)
            if (glp_mip_col_val(lp, xcol[i] + s - lo[i]) > 0.5)
                stage[i] = s;
        if (stage[i] < 0) {
            st = rap_fail(RAP_ERR_INTERNAL, "fusion ILP: op node %d has no stage", i);
            goto out;
        }
    }
build:
    for (int a = 0; a < n_all; a++)
        stage[all[a]] = stage[rep[all[a]]];
    n = n_all;
    memcpy(ops, all, sizeof(int) * (size_t)n_all);
    f->kernels = rap_calloc(sizeof *f->kernels * (size_t)(n + 1), "fusion");
    if (!f->kernels) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int s = 1; s <= Sx; s++) {
        for (int a = 0; a < n; a++) {
            int i = ops[a];
            if (stage[i] != s)
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
                kn->nodes = rap_malloc(sizeof(int) * (size_t)costs.n_ops[type[i]], "fusion");
                if (!kn->nodes) {
                    st = RAP_ERR_NOMEM;
                    goto out;
                }
            }
            f->kernels[kk].nodes[f->kernels[kk].n++] = i;
        }
    }
    res->n_kernels = f->n;
    if (NW > 1) {
        /* report the exposed ms of whole kernels; gap on the ILP objective */
        res->exposed_ms = 0;
        double all_fixed = 0;
        for (int kk = 0; kk < f->n; kk++) {
            int t = rap_ilp_type(&costs, f->kernels[kk].op, f->kernels[kk].variant);
            all_fixed += costs.fixed_ms[t];
            if (WIN(f->kernels[kk].level) == NW - 1)
                res->exposed_ms += costs.fixed_ms[t] + costs.margin_ms[t] * f->kernels[kk].n;
        }
        res->objective = res->exposed_ms + 0.01 * all_fixed;
    } else {
        res->objective = rap_ilp_objective(&costs, f);
    }
    if (heuristic_only)
        res->gap = res->objective > 0 ? (res->objective - res->bound) / res->objective : 0;
    st = rap_fusion_check(p, f);
#undef WIN
out:
    if (lp)
        glp_delete_prob(lp);
    if (st != RAP_OK)
        rap_fusion_free(f);
    res->solve_s = rap_now() - t0;
    rap_free(ops);
    rap_free(opid);
    rap_free(asap);
    rap_free(height);
    rap_free(lo);
    rap_free(hi);
    rap_free(xcol);
    rap_free(type);
    rap_free(stage);
    rap_free(ylo);
    rap_free(yhi);
    rap_free(ycol);
    rap_free(ia);
    rap_free(ja);
    rap_free(ar);
    rap_free(start);
    rap_free(cons_first);
    rap_free(cons);
    rap_free(count);
    rap_free(target);
    rap_free(all);
    rap_free(rep);
    rap_free(shape);
    rap_free(acc);
    rap_free(kid_first);
    rap_free(kids);
    rap_free(mult);
    return st;
}
