/*
 * search.c -- split, schedule search and report (search.h).
 */
#include "plan/search.h"

#include "core/json.h"

#include <math.h>
#include <string.h>

/* A row kernel's slice: the predictor's "rows" model when it has one.
 * Else an estimate: one launch doing the work of one kernel per
 * (op, variant) among its nodes, so the sum of those kernels' predictions
 * less the launch cost of all but one. The launch cost of a type is its
 * prediction for one desc over one row. Identities cost nothing. */
static double rows_slice_ms(const rap_plan *p, const rap_kernel *kn, const rap_predictor *pred,
                            int d0, int d1, double rows)
{
    rap_kfeat kr; /* a trained "rows" model (rap profile kernels measures row kernels) first */
    rap_kfeat_of_rows(p, kn->nodes, d0, d1, rows, &kr);
    bool model = false;
    double ms = rap_predict_ms(pred, &kr, &model);
    if (model)
        return ms;
    int nodes[64];
    double sum = 0, launch_min = 0;
    int types = 0;
    bool *seen = rap_calloc(sizeof(bool) * (size_t)(d1 - d0 + 1), "row kernel prediction");
    if (!seen)
        return 0;
    for (int j = d0; j < d1; j++) {
        if (seen[j - d0] || rap_node_is_identity(p, kn->nodes[j]))
            continue;
        int a = kn->nodes[j], var = rap_node_variant(p, a);
        rap_op_type op = p->nodes[a].op;
        /* this type's nodes, in chunks of 64 (a kernel of a type is at
         * most as costly as its chunks together) */
        int n = 0;
        for (int i = j; i < d1; i++) {
            int b = kn->nodes[i];
            if (seen[i - d0] || p->nodes[b].op != op || rap_node_variant(p, b) != var)
                continue;
            seen[i - d0] = true;
            nodes[n++] = b;
            if (n == 64) {
                rap_kfeat kf;
                rap_kfeat_of(p, nodes, 0, n, rows, rows, &kf);
                sum += rap_predict_ms(pred, &kf, NULL);
                n = 0;
            }
        }
        if (n > 0) {
            rap_kfeat kf;
            rap_kfeat_of(p, nodes, 0, n, rows, rows, &kf);
            sum += rap_predict_ms(pred, &kf, NULL);
        }
        rap_kfeat k1;
        rap_kfeat_of(p, &a, 0, 1, 1, 1, &k1);
        double l = rap_predict_ms(pred, &k1, NULL);
        launch_min = types == 0 || l < launch_min ? l : launch_min;
        types++;
    }
    rap_free(seen);
    return types > 1 ? sum - (types - 1) * launch_min : sum;
}

double rap_slice_ms(const rap_plan *p, const rap_fusion *f, const rap_predictor *pred, int k,
                    int d0, int d1, int64_t r0, int64_t r1, int64_t batch)
{
    if (r1 > batch)
        r1 = batch;
    if (f->kernels[k].group)
        return rows_slice_ms(p, &f->kernels[k], pred, d0, d1, (double)(r1 - r0));
    if (rap_kernel_is_identity(p, &f->kernels[k]))
        return 0; /* a kernel of identities launches nothing (rap_node_is_identity) */
    rap_kfeat kf;
    /* a computed kernel's later pieces (r0 > 0) scan nothing: batch_rows 0 */
    bool later = r0 > 0 && p->nodes[f->kernels[k].nodes[d0]].off == RAP_OFF_COMPUTED;
    rap_kfeat_of(p, f->kernels[k].nodes, d0, d1, (double)(r1 - r0), later ? 0.0 : (double)batch,
                 &kf);
    return rap_predict_ms(pred, &kf, NULL);
}

rap_status rap_place_zero_comm(const rap_plan *p, int gpus, int *gpu_of)
{
    if (gpus != 1)
        return rap_fail(RAP_ERR_ARG, "planner: placement on %d GPUs is not implemented yet "
                        "(one GPU only)", gpus);
    for (int i = 0; i < p->n_nodes; i++)
        gpu_of[i] = 0;
    return RAP_OK;
}

/* The state of the search: what each window holds, where each node's
 * output is complete. */
typedef struct {
    const rap_plan *p;
    const rap_fusion *f;
    const rap_search_config *c;
    rap_schedule *s;
    double left[RAP_WIN_COUNT];
    int *done_win;     /* (N) window of the node's last piece; -1 raw or not yet */
    rap_search_result *res;
} search_state;

static rap_status place(search_state *ss, rap_window w, int k, int d0, int d1, int64_t r0,
                        int64_t r1, double ms)
{
    RAP_TRY(rap_schedule_add(ss->s, w, k, d0, d1, r0, r1 >= ss->c->batch ? RAP_ROWS_END : r1, ms));
    if (w != RAP_WIN_EXPOSED)
        ss->left[w] -= ms;
    ss->res->load_ms[w] += ms;
    ss->res->n_slices++;
    for (int j = d0; j < d1; j++) {
        int nd = ss->f->kernels[k].nodes[j];
        if ((int)w > ss->done_win[nd])
            ss->done_win[nd] = (int)w;
    }
    return RAP_OK;
}

/* Earliest window desc j of kernel k may run in: that of its input's last piece. */
static int min_window(const search_state *ss, int k, int j)
{
    int in = ss->p->nodes[ss->f->kernels[k].nodes[j]].input;
    int w = in >= 0 ? ss->done_win[in] : -1;
    return w < 0 ? 0 : w;
}

/* End of the unit starting at desc d: d + 1, or for a row kernel the end
 * of d's group (its slices hold whole groups). */
static int unit_end(const rap_kernel *kn, int d)
{
    return kn->group ? kn->group[rap_kernel_group_of(kn, d) + 1] : d + 1;
}

/* Earliest window the unit starting at desc d may run in. */
static int unit_min_window(const search_state *ss, int k, int d)
{
    int w = 0;
    for (int j = d; j < unit_end(&ss->f->kernels[k], d); j++)
        w = min_window(ss, k, j) > w ? min_window(ss, k, j) : w;
    return w;
}

double rap_window_rate(const rap_capacity *cap, int w)
{
    if (w < 0 || w >= RAP_CAP_WINDOWS || cap->capacity_ms[w] <= 0)
        return HUGE_VAL;
    return cap->standalone_ms[w] > 0 ? cap->standalone_ms[w] / cap->capacity_ms[w] : 0;
}

static rap_status place_kernel(search_state *ss, int k)
{
    const rap_kernel *kn = &ss->f->kernels[k];
    const int64_t B = ss->c->batch;
    const rap_predictor *pred = ss->c->pred;
    int slices0 = ss->res->n_slices;
    int d = 0;
    int64_t r = 0;     /* rows of desc d already placed (row split in progress) */
    int row_win = 0;   /* window of the last row piece of desc d */
    if (ss->c->no_split) { /* the ablation: whole kernels only */
        int w0 = 0;
        for (int j = 0; j < kn->n; j++)
            w0 = min_window(ss, k, j) > w0 ? min_window(ss, k, j) : w0;
        double ms = rap_slice_ms(ss->p, ss->f, pred, k, 0, kn->n, 0, B, B);
        int w = w0;
        while (w < RAP_WIN_EXPOSED && ss->left[w] < ms)
            w++;
        return place(ss, (rap_window)w, k, 0, kn->n, 0, B, ms);
    }
    if (ss->c->choice != RAP_CHOICE_EARLIEST) {
        /* whole, where a ms of it slows training least */
        int w0 = 0;
        for (int j = 0; j < kn->n; j++)
            w0 = min_window(ss, k, j) > w0 ? min_window(ss, k, j) : w0;
        double ms = rap_slice_ms(ss->p, ss->f, pred, k, 0, kn->n, 0, B, B);
        int best = -1;
        for (int w = w0; w < RAP_WIN_EXPOSED; w++) {
            if (ss->left[w] < ms)
                continue;
            bool better = best < 0 ||
                          (ss->c->choice == RAP_CHOICE_ROOM ? ss->left[w] > ss->left[best]
                                            : rap_window_rate(ss->c->cap, w) <
                                                  rap_window_rate(ss->c->cap, best));
            if (better)
                best = w;
        }
        if (best >= 0)
            return place(ss, (rap_window)best, k, 0, kn->n, 0, B, ms);
    }
    while (d < kn->n) {
        bool placed = false;
        int u = unit_end(kn, d); /* the unit [d, u): one desc, or a row kernel's group */
        int w0 = unit_min_window(ss, k, d);
        if (r > 0 && row_win > w0)
            w0 = row_win;
        for (int w = w0; w < RAP_WIN_EXPOSED && !placed; w++) {
            double left = ss->left[w];
            if (left <= 0)
                continue;
            if (r == 0) {
                /* the most whole descs [d, e) that fit and may run in w */
                int e = d;
                double ms = 0;
                while (e < kn->n && unit_min_window(ss, k, e) <= w) {
                    int e2 = unit_end(kn, e);
                    double m = rap_slice_ms(ss->p, ss->f, pred, k, d, e2, 0, B, B);
                    if (m > left)
                        break;
                    ms = m;
                    e = e2;
                }
                if (e > d) {
                    RAP_TRY(place(ss, (rap_window)w, k, d, e, 0, B, ms));
                    d = e;
                    placed = true;
                    break;
                }
            }
            /* unit d alone does not fit (or is part done): the most rows */
            if (rap_slice_ms(ss->p, ss->f, pred, k, d, u, r, r + 1, B) > left)
                continue;
            int64_t lo = r + 1, hi = B; /* largest r1 in [lo, hi] that fits */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo + 1) / 2;
                if (rap_slice_ms(ss->p, ss->f, pred, k, d, u, r, mid, B) <= left)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            double ms = rap_slice_ms(ss->p, ss->f, pred, k, d, u, r, lo, B);
            RAP_TRY(place(ss, (rap_window)w, k, d, u, r, lo, ms));
            row_win = w;
            if (lo >= B) {
                d = u;
                r = 0;
            } else {
                r = lo;
            }
            placed = true;
        }
        if (placed)
            continue;
        /* nothing fits: the rest of unit d, then every later unit, exposed */
        if (r > 0) {
            RAP_TRY(place(ss, RAP_WIN_EXPOSED, k, d, u, r, B,
                          rap_slice_ms(ss->p, ss->f, pred, k, d, u, r, B, B)));
            d = u;
            r = 0;
        }
        if (d < kn->n) {
            RAP_TRY(place(ss, RAP_WIN_EXPOSED, k, d, kn->n, 0, B,
                          rap_slice_ms(ss->p, ss->f, pred, k, d, kn->n, 0, B, B)));
            d = kn->n;
        }
    }
    if (ss->res->n_slices - slices0 > 1)
        ss->res->n_split++;
    return RAP_OK;
}

static rap_status search_once(const rap_plan *p, const rap_fusion *f, const rap_search_config *c,
                              const char *source, rap_schedule **out, rap_search_result *res)
{
    *out = NULL;
    memset(res, 0, sizeof *res);
    if (c->batch < 1 || !c->cap)
        return rap_fail(RAP_ERR_ARG, "schedule search: expected batch >= 1 and a capacity");
    int gpus = c->gpus < 1 ? 1 : c->gpus;
    int *gpu_of = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "search");
    int *done = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "search");
    if (!gpu_of || !done) {
        rap_free(gpu_of);
        rap_free(done);
        return RAP_ERR_NOMEM;
    }
    rap_status st = rap_place_zero_comm(p, gpus, gpu_of);
    search_state ss = {p, f, c, NULL, {0}, done, res};
    if (st == RAP_OK)
        st = rap_schedule_create(p, f, source, &ss.s);
    for (int i = 0; i < p->n_nodes; i++)
        done[i] = -1;
    for (int w = 0; w < RAP_WIN_EXPOSED; w++) {
        ss.left[w] = c->cap->capacity_ms[w];
        res->capacity_ms[w] = c->cap->capacity_ms[w];
    }
    for (int k = 0; k < f->n && st == RAP_OK; k++)
        st = place_kernel(&ss, k);
    if (st == RAP_OK)
        st = rap_schedule_validate(ss.s, p, f, c->batch);
    rap_free(gpu_of);
    rap_free(done);
    if (st != RAP_OK) {
        rap_schedule_free(ss.s);
        return st;
    }
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        double ex = res->load_ms[w] - res->capacity_ms[w];
        res->exposed_ms[w] = w == RAP_WIN_EXPOSED ? res->load_ms[w] : ex > 1e-12 ? ex : 0;
        res->total_exposed_ms += res->exposed_ms[w];
        res->hidden_ms += res->load_ms[w] - res->exposed_ms[w];
    }
    *out = ss.s;
    return RAP_OK;
}

/* The predicted slowdown of a schedule's windows, up to the common
 * factor tolerance: sum over windows of load x rap_window_rate. */
static double slowdown_of(const rap_search_result *r, const rap_capacity *cap)
{
    double s = 0;
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        if (r->load_ms[w] > 0)
            s += r->load_ms[w] * rap_window_rate(cap, w);
    return s;
}

rap_status rap_schedule_search(const rap_plan *p, const rap_fusion *f, const rap_search_config *c,
                               const char *source, rap_schedule **out, rap_search_result *res)
{
    RAP_TRY(search_once(p, f, c, source, out, res));
    if (c->choice == RAP_CHOICE_EARLIEST)
        return RAP_OK;
    /* least slowdown per kernel can push a later kernel past every window
     * (its input went late): exposed latency first, then slowdown; the
     * first-fit schedule wins when it exposes less */
    rap_search_config ce = *c;
    ce.choice = RAP_CHOICE_EARLIEST;
    rap_schedule *se = NULL;
    rap_search_result re;
    RAP_TRY(search_once(p, f, &ce, source, &se, &re));
    bool first_fit = re.total_exposed_ms < res->total_exposed_ms - 1e-12 ||
                     (c->choice != RAP_CHOICE_ROOM && re.total_exposed_ms <= res->total_exposed_ms + 1e-12 &&
                      slowdown_of(&re, c->cap) < slowdown_of(res, c->cap) - 1e-12);
    if (first_fit) {
        rap_schedule_free(*out);
        *out = se;
        *res = re;
    } else {
        rap_schedule_free(se);
    }
    return RAP_OK;
}

/* ------------------------------------------------------------- report */

void rap_parse_placement_json(FILE *fp, const rap_parse_placement *pp)
{
    fprintf(fp, "{\"model\": ");
    rap_json_put_str(fp, pp->model ? pp->model : "");
    fprintf(fp, ", \"lines\": %lld, \"lines_over_room\": %lld, \"windows\": [",
            (long long)pp->lines_total, (long long)pp->lines_over);
    int k = 0;
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        if (pp->lines[w] <= 0)
            continue;
        fprintf(fp, "%s{\"name\": \"%s\", \"lines\": %lld, \"predicted_ms\": ", k++ ? ", " : "",
                rap_window_name((rap_window)w), (long long)pp->lines[w]);
        rap_json_put_num(fp, pp->ms[w]);
        fprintf(fp, ", \"room_ms\": ");
        rap_json_put_num(fp, pp->room_ms[w]);
        fputc('}', fp);
    }
    fprintf(fp, "]}");
}

/* The report's "parse" member (rap plan --parse gpu). */
static void report_parse(FILE *fp, const rap_parse_placement *pp)
{
    fprintf(fp, ",\n  \"parse\": ");
    rap_parse_placement_json(fp, pp);
}

rap_status rap_plan_report_json(FILE *fp, const rap_plan *p, const rap_fusion *f,
                                const rap_schedule *s, const rap_search_result *r,
                                const rap_report_info *info)
{
    int *opid = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "report");
    if (!opid)
        return RAP_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < p->n_nodes; i++)
        opid[i] = p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT ? n++ : -1;
    fprintf(fp, "{\n  \"plan\": ");
    rap_json_put_str(fp, info->plan_name);
    fprintf(fp, ",\n  \"plan_hash\": \"%016llx\",\n  \"batch\": %lld,\n  \"gpu\": ",
            (unsigned long long)s->plan_hash, (long long)info->batch);
    rap_json_put_str(fp, info->gpu);
    fprintf(fp, ",\n  \"latency_model\": ");
    rap_json_put_str(fp, info->latency_model);
    fprintf(fp, ",\n  \"capacity_source\": ");
    rap_json_put_str(fp, info->capacity_source);
    fprintf(fp, ",\n  \"units\": \"ms of standalone work\",\n  \"fusion\": {\"method\": ");
    rap_json_put_str(fp, info->fusion_method);
    fprintf(fp, ", \"kernels\": %d, \"predicted_ms\": ", f->n);
    rap_json_put_num(fp, info->fusion_predicted_ms);
    fprintf(fp, ", \"greedy_kernels\": %d, \"greedy_predicted_ms\": ", info->greedy_kernels);
    rap_json_put_num(fp, info->greedy_predicted_ms);
    if (info->ilp) {
        fprintf(fp, ", \"ilp_objective_ms\": ");
        rap_json_put_num(fp, info->ilp->objective);
        fprintf(fp, ", \"ilp_bound_ms\": ");
        rap_json_put_num(fp, info->ilp->bound);
        fprintf(fp, ", \"ilp_gap\": ");
        rap_json_put_num(fp, info->ilp->gap);
        fprintf(fp, ", \"ilp_solve_s\": ");
        rap_json_put_num(fp, info->ilp->solve_s);
        fprintf(fp, ", \"ilp_status\": ");
        rap_json_put_str(fp, info->ilp->status);
        fprintf(fp, ", \"ilp_stages\": %d, \"ilp_ops_with_variables\": %d", info->ilp->n_stages,
                info->ilp->n_reps);
    }
    fprintf(fp, "},\n  \"ops\": [");
    for (int i = 0, c = 0; i < p->n_nodes; i++) {
        if (opid[i] < 0)
            continue;
        const rap_node *nd = &p->nodes[i];
        const rap_node *in = &p->nodes[nd->input];
        fprintf(fp, "%s\n    {\"id\": %d, \"node\": %d, \"line\": %d, \"type\": \"%s\", \"variant\": %d, "
                    "\"inputs\": [",
                c++ ? "," : "", opid[i], i, nd->line, rap_op_name(nd->op), rap_node_variant(p, i));
        if (opid[nd->input] >= 0)
            fprintf(fp, "%d]", opid[nd->input]);
        else
            fprintf(fp, "], \"raw_input\": \"%s_%d\"", in->kind == RAP_DENSE ? "int" : "cat", in->raw);
        fputc('}', fp);
    }
    fprintf(fp, "\n  ],\n  \"kernels\": [");
    for (int q = 0; q < s->n_slices; q++) {
        const rap_slice *sl = &s->slices[q];
        int w = 0;
        while (w < RAP_WIN_COUNT - 1 && q >= s->win_first[w + 1])
            w++;
        const rap_kernel *kn = &f->kernels[sl->kernel];
        fprintf(fp, "%s\n    {\"kernel\": %d, \"type\": \"%s.%d\", \"ops\": [", q ? "," : "",
                sl->kernel, rap_kernel_op_name(kn), kn->variant);
        for (int j = sl->d0; j < sl->d1; j++)
            fprintf(fp, "%s%d", j > sl->d0 ? ", " : "", opid[kn->nodes[j]]);
        fprintf(fp, "], \"descs\": [%d, %d], \"rows\": [%lld, ", sl->d0, sl->d1, (long long)sl->r0);
        if (sl->r1 == RAP_ROWS_END)
            fprintf(fp, "\"end\"");
        else
            fprintf(fp, "%lld", (long long)sl->r1);
        fprintf(fp, "], \"window\": \"%s\", \"order\": %d, \"predicted_ms\": ",
                rap_window_name((rap_window)w), q);
        rap_json_put_num(fp, sl->predicted_ms);
        fputc('}', fp);
    }
    fprintf(fp, "\n  ],\n  \"windows\": [");
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        fprintf(fp, "%s\n    {\"name\": \"%s\", \"capacity_ms\": ", w ? "," : "",
                rap_window_name((rap_window)w));
        rap_json_put_num(fp, r->capacity_ms[w]);
        fprintf(fp, ", \"load_ms\": ");
        rap_json_put_num(fp, r->load_ms[w]);
        fprintf(fp, ", \"exposed_ms\": ");
        rap_json_put_num(fp, r->exposed_ms[w]);
        fputc('}', fp);
    }
    fprintf(fp, "\n  ],\n  \"predicted_hidden_ms\": ");
    rap_json_put_num(fp, r->hidden_ms);
    fprintf(fp, ",\n  \"predicted_exposed_ms\": ");
    rap_json_put_num(fp, r->total_exposed_ms);
    fprintf(fp, ",\n  \"slices\": %d,\n  \"split_kernels\": %d", r->n_slices, r->n_split);
    if (info->parse)
        report_parse(fp, info->parse);
    fprintf(fp, "\n}\n");
    rap_free(opid);
    return ferror(fp) ? rap_fail(RAP_ERR_IO, "report: write failed") : RAP_OK;
}
