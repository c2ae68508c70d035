/*
 * cmd_plan.c -- `rap plan` (fusion, split, schedule search: writes a
 * schedule and a report) and `rap predictor train` (XGBoost latency models
 * from measured kernels). docs/PLANNER.md.
 *
 * Their options are rows of the one option table (settings.c, CMD_PLAN and
 * CMD_PREDICTOR).
 *
 * `rap plan --gpus R` (R > 1) places preprocessing over R ranks
 * (src/plan/place.c, docs/PLANNER.md "Placement") and writes one manifest
 * per rank (SCHEDULE.rank<r>) with its parts' schedules and fusions.
 */
#include "cli/cli.h"
#include "core/json.h"
#include "core/out.h"
#include "dist/shard.h"
#include "plan/parse_model.h"
#include "plan/place.h"
#include "plan/search.h"
#include "sched/fusion_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The model shape the plan trains: tables = the plan's sparse columns. */
static rap_status shape_of(const cli_settings *s, const rap_plan *p, rap_model_shape *sh)
{
    memset(sh, 0, sizeof *sh);
    for (int c = 0; c < p->n_cols; c++)
        sh->tables += p->nodes[p->cols[c].node].kind == RAP_SPARSE;
    sh->emb_dim = (int)s->emb_dim;
    RAP_TRY(cli_parse_widths("mlp-bot", s->mlp_bot, sh->bot, RAP_SHAPE_MAX_LAYERS, &sh->n_bot));
    RAP_TRY(cli_parse_widths("mlp-top", s->mlp_top, sh->top, RAP_SHAPE_MAX_LAYERS, &sh->n_top));
    sh->batch = s->batch;
    sh->precision = s->precision;
    sh->emb_dtype = s->emb_dtype;
    sh->optimizer = s->optimizer;
    return RAP_OK;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static int cmd_plan_gpus(const cli_settings *s);

/* Refuses an output of rap plan (the schedule, its fusion, the report,
 * with --gpus the rank manifests) that is one of its inputs (the plan
 * file, the capacity files, the predictor bundle's files). */
static rap_status outputs_not_inputs(const cli_settings *s)
{
    char caps[RAP_OPT_STR], fusion[RAP_OPT_STR + 16], rank[RAP_OPT_STR + 16];
    const char *in[3 + RAP_PLACE_MAX_RANKS];
    int n = 0;
    in[n++] = strcmp(s->plan, "default") ? s->plan : NULL; /* the built-in one */
    in[n++] = s->predictor;
    in[n++] = s->parse_model;
    snprintf(caps, sizeof caps, "%s", s->capacity);
    for (char *save = NULL, *f = strtok_r(caps, ",", &save); f && n < (int)(sizeof in / sizeof in[0]);
         f = strtok_r(NULL, ",", &save))
        in[n++] = f;
    snprintf(fusion, sizeof fusion, "%s%s", s->fusion_out[0] ? s->fusion_out : s->out,
             s->fusion_out[0] ? "" : ".fusion");
    RAP_TRY(rap_out_check_inputs(s->out, in, n));
    RAP_TRY(rap_out_check_inputs(fusion, in, n));
    RAP_TRY(rap_out_check_inputs(s->report, in, n));
    for (int r = 0; s->gpus > 1 && r < s->gpus; r++) {
        snprintf(rank, sizeof rank, "%s.rank%d", s->out, r);
        RAP_TRY(rap_out_check_inputs(rank, in, n));
    }
    return RAP_OK;
}

/* Row fusion (--rows N, --row-fusion) on top of *f, in place; N == 0,
 * never, or auto with more than RAP_ROW_AUTO_KERNELS kernels: f as it is. */
static rap_status fuse_rows(const rap_plan *plan, const cli_settings *s, rap_fusion *f)
{
    if (s->row_group <= 0 || s->row_fusion == 2 || (s->row_fusion == 0 && !rap_fuse_rows_pays(f)))
        return RAP_OK;
    rap_fusion r;
    RAP_TRY(rap_fuse_rows(plan, f, (int)s->row_group, (int)s->row_descs, &r));
    rap_fusion_free(f);
    *f = r;
    return RAP_OK;
}

/* The fusion --fusion asks for (the ILP, its capacity-aware variant when
 * predicted to expose less, levels or none; row fusion after it) and the
 * schedule searched for it; *method names the fusion kept. */
static rap_status fuse_and_search(const rap_plan *plan, const cli_settings *s,
                                  const rap_capacity *cap, const rap_search_config *sc,
                                  rap_fusion *fus, rap_schedule **sched, rap_search_result *sr,
                                  rap_ilp_result *ilp, const char **method)
{
    rap_status st = RAP_OK;
    if (s->plan_fusion == 0 || s->plan_fusion == 2) {
        rap_ilp_config ic = rap_ilp_defaults();
        ic.pred = sc->pred;
        ic.batch = s->batch;
        ic.time_limit_s = s->plan_fusion == 2 ? s->time_limit / 2 : s->time_limit;
        ic.extra_stages = (int)s->extra_stages;
        ic.verbose = s->verbose;
        st = rap_fuse_ilp(plan, &ic, fus, ilp);
        if (st == RAP_OK)
            st = fuse_rows(plan, s, fus);
        if (st == RAP_OK)
            st = rap_schedule_search(plan, fus, sc, s->out, sched, sr);
        if (st == RAP_OK && s->plan_fusion == 2) {
            /* the capacity-aware variant; kept when its schedule is
             * predicted to expose less */
            double caps[RAP_WIN_COUNT] = {0};
            for (int w = 0; w < RAP_CAP_WINDOWS; w++)
                caps[w] = cap->capacity_ms[w];
            ic.window_cap_ms = caps;
            ic.n_windows = RAP_WIN_COUNT;
            rap_fusion f2 = {0};
            rap_ilp_result r2;
            rap_schedule *s2 = NULL;
            rap_search_result sr2;
            st = rap_fuse_ilp(plan, &ic, &f2, &r2);
            if (st == RAP_OK)
                st = fuse_rows(plan, s, &f2);
            if (st == RAP_OK)
                st = rap_schedule_search(plan, &f2, sc, s->out, &s2, &sr2);
            if (st == RAP_OK && r2.capacity_aware &&
                sr2.total_exposed_ms < sr->total_exposed_ms - 1e-12) {
                rap_fusion_free(fus);
                rap_schedule_free(*sched);
                *fus = f2;
                *sched = s2;
                *sr = sr2;
                r2.solve_s += ilp->solve_s;
                *ilp = r2;
                *method = "ilp-capacity";
            } else {
                rap_fusion_free(&f2);
                rap_schedule_free(s2);
                *method = "ilp (capacity-aware variant not better)";
            }
        }
    } else {
        st = s->plan_fusion == 3 ? rap_fuse_none(plan, fus) : rap_fuse_levels(plan, fus);
        if (st == RAP_OK && s->plan_fusion != 3)
            st = fuse_rows(plan, s, fus);
        if (st == RAP_OK)
            st = rap_schedule_search(plan, fus, sc, s->out, sched, sr);
    }
    return st;
}

/* rap plan --parse gpu: the model --parse-model names, made for gpu
 * (checked when the capacity was measured or --gpu given). */
static rap_status load_parse_model(const cli_settings *s, const char *gpu, bool check_gpu,
                                   rap_parse_model *pm)
{
    if (!s->parse_model[0])
        return rap_fail(RAP_ERR_ARG, "--parse gpu needs the parse kernels' latency model: run "
                        "`rap profile kernels --out K.csv` on the GPU first (it times the parse "
                        "kernels and writes K.parse beside the CSV) and give --parse-model "
                        "K.parse");
    RAP_TRY(rap_parse_model_load(s->parse_model, pm));
    if (check_gpu && strcmp(pm->gpu, gpu))
        return rap_fail(RAP_ERR_ARG, "--parse-model %s was made for GPU %s, not %s (profile the "
                        "parse on this GPU)", s->parse_model, pm->gpu, gpu);
    return RAP_OK;
}

/* The parse of `batch` lines (and the rejects' share) by model pm added to
 * the windows of sched after its kernels were placed (sr). */
static rap_status plan_parse(const cli_settings *s, const rap_parse_model *pm, int64_t batch,
                             const rap_search_result *sr, rap_schedule *sched,
                             rap_parse_placement *pp)
{
    RAP_TRY(rap_parse_place(pm, sr, batch, RAP_PARSE_REJECT_SHARE, sched, pp));
    pp->model = s->parse_model;
    return RAP_OK;
}

/* The console lines of the parse's placement. */
static void print_parse(const rap_parse_placement *pp)
{
    fprintf(stderr, "  parse (GPU): %lld lines a batch", (long long)pp->lines_total);
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        if (pp->lines[w] > 0)
            fprintf(stderr, "; %s %lld lines (%.4f ms, room %.4f ms)",
                    rap_window_name((rap_window)w), (long long)pp->lines[w], pp->ms[w],
                    pp->room_ms[w]);
    if (pp->lines_over > 0)
        fprintf(stderr, "; %lld lines past every window's room", (long long)pp->lines_over);
    fputc('\n', stderr);
}

int cmd_plan(int argc, char **argv)
{
    cli_settings s;
    cli_parse("plan", CMD_PLAN, argc, argv, &s);
    if (!s.out[0]) {
        fprintf(stderr, "rap plan: --out SCHEDULE is required\n");
        return 2;
    }
    rap_status cs = outputs_not_inputs(&s);
    if (cs != RAP_OK)
        return cli_fail("plan", cs);
    if (s.gpus > 1)
        return cmd_plan_gpus(&s);
    if (s.placement != RAP_PLACE_SEARCH && cli_given("placement"))
        fprintf(stderr, "rap plan: --placement has no effect with one GPU\n");
    rap_plan *plan = NULL;
    rap_predictor *pred = NULL;
    rap_fusion fus = {0}, greedy = {0};
    rap_schedule *sched = NULL;
    rap_capacity cap;
    rap_model_shape shape;
    rap_ilp_result ilp;
    rap_search_result sr;
    memset(&ilp, 0, sizeof ilp);
    rap_status st = cli_load_plan(s.plan, &plan);
    if (st == RAP_OK && s.predictor[0])
        st = rap_predictor_load(s.predictor, &pred);
    if (st == RAP_OK)
        st = shape_of(&s, plan, &shape);
    if (st == RAP_OK) {
        if (s.capacity[0]) {
            st = rap_capacity_load(s.capacity, &cap);
            if (st == RAP_OK)
                st = rap_capacity_check(&cap, s.gpu_name, &shape);
        } else if (s.cap_fraction >= 0) {
            st = rap_place_capacity_fraction(plan, pred, s.batch, s.cap_fraction, &shape,
                                             s.gpu_name[0] ? s.gpu_name : rap_predictor_gpu(pred), &cap);
        } else {
            rap_capacity_assumed(&shape, s.gpu_name[0] ? s.gpu_name : rap_predictor_gpu(pred), &cap);
        }
    }
    const char *gpu = s.gpu_name[0] ? s.gpu_name : cap.gpu;
    if (st == RAP_OK && pred && (s.gpu_name[0] || !cap.assumed))
        st = rap_predictor_check(pred, gpu);
    double t0 = rap_now();
    if (st == RAP_OK)
        st = rap_fuse_levels(plan, &greedy);
    rap_search_config sc = {pred, &cap, s.batch, 1, !s.split,
                            (rap_window_choice)s.window_choice};
    const bool use_ilp = s.plan_fusion == 0 || s.plan_fusion == 2;
    const char *method = s.plan_fusion == 1 ? "levels" : s.plan_fusion == 3 ? "none" : "ilp";
    if (st == RAP_OK)
        st = fuse_and_search(plan, &s, &cap, &sc, &fus, &sched, &sr, &ilp, &method);
    double plan_s = rap_now() - t0;
    rap_parse_model pm;
    rap_parse_placement pp;
    const bool parse = s.parse == 1; /* --parse gpu */
    if (st == RAP_OK && parse)
        st = load_parse_model(&s, gpu, s.gpu_name[0] || !cap.assumed, &pm);
    if (st == RAP_OK && parse)
        st = plan_parse(&s, &pm, s.batch, &sr, sched, &pp);
    if (st == RAP_OK)
        st = rap_schedule_save(sched, s.out);
    char fusion_path[RAP_OPT_STR + 16];
    snprintf(fusion_path, sizeof fusion_path, "%s", s.fusion_out);
    if (!fusion_path[0])
        snprintf(fusion_path, sizeof fusion_path, "%s.fusion", s.out);
    if (st == RAP_OK)
        st = rap_fusion_save(plan, &fus, fusion_path);
    char latency[600], capsrc[600];
    snprintf(latency, sizeof latency, pred ? "xgboost predictor %s" : "analytic fallback (no predictor)",
             s.predictor);
    if (s.cap_fraction >= 0 && cap.assumed)
        snprintf(capsrc, sizeof capsrc, "assumed (no capacity file): every window %g x the plan's "
                 "predicted ms", s.cap_fraction);
    else
        snprintf(capsrc, sizeof capsrc, cap.assumed ? "assumed (no capacity file)" : "capacity file %s",
                 s.capacity);
    if (st == RAP_OK && s.report[0]) {
        rap_report_info info = {base_name(s.plan), gpu, latency, capsrc,
                                method, use_ilp ? &ilp : NULL,
                                rap_fusion_predicted_ms(plan, &fus, pred, s.batch), greedy.n,
                                rap_fusion_predicted_ms(plan, &greedy, pred, s.batch), s.batch,
                                parse ? &pp : NULL};
        rap_out *ro;
        st = rap_out_open(s.report, NULL, &ro);
        if (st == RAP_OK)
            st = rap_out_close(ro, rap_plan_report_json(rap_out_file(ro), plan, &fus, sched, &sr,
                                                        &info));
    }
    if (st == RAP_OK && !s.quiet) {
        fprintf(stderr, "rap plan: %s, %d ops, batch %lld, gpu %s\n", s.plan, rap_plan_n_ops(plan),
                (long long)s.batch, gpu);
        fprintf(stderr, "  latency: %s; capacity: %s\n", latency, capsrc);
        fprintf(stderr, "  fusion: %s, %d kernels (greedy levels: %d)", method, fus.n, greedy.n);
        if (use_ilp)
            fprintf(stderr, ", ILP %s in %.2f s, gap %.2f%%", ilp.status, ilp.solve_s, 100 * ilp.gap);
        fprintf(stderr, "\n  schedule: %d slices (%d kernels split), planned in %.2f s -> %s (fusion: %s)\n",
                sr.n_slices, sr.n_split, plan_s, s.out, fusion_path);
        for (int w = 0; w < RAP_WIN_COUNT; w++)
            fprintf(stderr, "  %-13s capacity %8.4f ms  load %8.4f ms  exposed %8.4f ms\n",
                    rap_window_name((rap_window)w), sr.capacity_ms[w], sr.load_ms[w], sr.exposed_ms[w]);
        fprintf(stderr, "  predicted hidden %.4f ms, exposed %.4f ms\n", sr.hidden_ms, sr.total_exposed_ms);
        if (parse)
            print_parse(&pp);
    }
    rap_schedule_free(sched);
    rap_fusion_free(&fus);
    rap_fusion_free(&greedy);
    rap_predictor_free(pred);
    rap_plan_free(plan);
    return st == RAP_OK ? 0 : cli_fail("plan", st);
}

/* ------------------------------------------------------ --gpus R > 1 */

/* Capacities of R ranks: FILE (every rank) or FILE0,..,FILE(R-1); else
 * assumed (with the grad_comm capacity of the settings), or the fraction
 * profile. *src describes them for the report. */
static rap_status load_capacities(const cli_settings *s, const rap_plan *plan,
                                  const rap_predictor *pred, const rap_model_shape *shape, int R,
                                  rap_capacity *cap, char *src, size_t n)
{
    const char *gpu = s->gpu_name[0] ? s->gpu_name : rap_predictor_gpu(pred);
    if (!s->capacity[0]) {
        for (int r = 0; r < R; r++) {
            if (s->cap_fraction >= 0) {
                RAP_TRY(rap_place_capacity_fraction(plan, pred, s->batch, s->cap_fraction, shape,
                                                    gpu, &cap[r]));
            } else {
                rap_capacity_assumed(shape, gpu, &cap[r]);
                cap[r].capacity_ms[RAP_WIN_GRAD_COMM] = s->grad_comm_ms;
            }
        }
        if (s->cap_fraction >= 0)
            snprintf(src, n, "assumed (no capacity file): every window, grad_comm included, %g x "
                     "the plan's one-GPU predicted ms", s->cap_fraction);
        else
            snprintf(src, n, "assumed (no capacity file; grad_comm %g ms)", s->grad_comm_ms);
        return RAP_OK;
    }
    char list[RAP_OPT_STR];
    snprintf(list, sizeof list, "%s", s->capacity);
    int k = 0;
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
        if (k >= R)
            return rap_fail(RAP_ERR_ARG, "--capacity: more files than the %d ranks", R);
        RAP_TRY(rap_capacity_load(f, &cap[k]));
        RAP_TRY(rap_capacity_check(&cap[k], s->gpu_name, shape));
        k++;
    }
    if (k != 1 && k != R)
        return rap_fail(RAP_ERR_ARG, "--capacity: %d files for %d ranks (expected 1 or %d)", k, R, R);
    for (int r = k; r < R; r++)
        cap[r] = cap[0];
    snprintf(src, n, "capacity file%s %s", k > 1 ? "s" : "", s->capacity);
    return RAP_OK;
}

static void print_rank_windows(const rap_place_result *r)
{
    fprintf(stderr, "  placement %s: exposed max %.4f ms, all-to-all %.4f ms, %lld bytes moved per "
            "iteration", rap_placement_name(r->kind), r->exposed_max_ms, r->comm_ms,
            (long long)r->bytes_moved);
    if (r->kind == RAP_PLACE_SEARCH)
        fprintf(stderr, " (%d moves from %s, %d rank plans evaluated)", r->moves, r->start,
                r->evaluations);
    fputc('\n', stderr);
    for (int q = 0; q < r->ranks; q++) {
        const rap_place_rank *rk = &r->rank[q];
        fprintf(stderr, "  rank %d: %d parts, exposed %.4f ms (prep %.4f, all-to-all %.4f), sent %lld "
                "B, received %lld B\n", q, rk->n_parts, rk->exposed_total_ms, rk->prep_exposed_ms,
                rk->comm_exposed_ms, (long long)rk->bytes_sent, (long long)rk->bytes_recv);
        for (int w = 0; w < RAP_WIN_COUNT; w++)
            fprintf(stderr, "    %-13s capacity %8.4f ms  load %8.4f ms  exposed %8.4f ms\n",
                    rap_window_name((rap_window)w), rk->capacity_ms[w], rk->load_ms[w],
                    rk->exposed_ms[w]);
    }
}

/* Table ownership as the trainer shards (src/dist/shard.c with the
 * arguments rap train and rap bench pass: no budget, one lookup per
 * table): owner[t] = the rank of table t's first part, holders[t] = every
 * rank with a part of it. T = the plan's sparse columns. */
static rap_status owners_as_trainer(const rap_plan *plan, int emb_dim, int R, int *owner,
                                    uint64_t *holders, int max_t, int *n_tables)
{
    int64_t rows[1024];
    int T = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        const rap_node *n = &plan->nodes[plan->cols[c].node];
        if (n->kind != RAP_SPARSE)
            continue;
        if (T >= max_t || T >= 1024)
            return rap_fail(RAP_ERR_ARG, "placement: more than %d tables", max_t);
        rows[T++] = n->bounded ? n->hi + 1 : 1;
    }
    rap_shard_map map;
    RAP_TRY(rap_shard_plan(rows, T, emb_dim, R, 0, NULL, &map));
    for (int t = 0; t < T; t++) {
        owner[t] = map.part[map.part0[t]].rank;
        holders[t] = 0;
        for (int q = map.part0[t]; q < map.part0[t + 1]; q++)
            holders[t] |= (uint64_t)1 << map.part[q].rank;
    }
    rap_shard_map_free(&map);
    *n_tables = T;
    return RAP_OK;
}

static int cmd_plan_gpus(const cli_settings *s)
{
    const int R = (int)s->gpus;
    if (cli_given("fusion") && s->plan_fusion != 1) {
        fprintf(stderr, "rap plan: --gpus %d fuses each rank's parts by levels; --fusion ilp and "
                "ilp-capacity are one-GPU only for now\n", R);
        return 2;
    }
    if (cli_given("fusion-out"))
        fprintf(stderr, "rap plan: --fusion-out is ignored with --gpus: each part's fusion is "
                "written beside its schedule\n");
    if (R * s->row_shares > 64) {
        fprintf(stderr, "rap plan: --gpus %d x --row-shares %lld > 64\n", R, (long long)s->row_shares);
        return 2;
    }
    rap_plan *plan = NULL;
    rap_predictor *pred = NULL;
    rap_model_shape shape;
    rap_capacity *cap = rap_calloc(sizeof *cap * (size_t)R, "plan capacities");
    int owner[1024], T = 0;
    uint64_t holders[1024];
    char capsrc[RAP_OPT_STR + 200], latency[RAP_OPT_STR + 64];
    rap_place_result res[3];
    memset(res, 0, sizeof res);
    rap_status st = cap ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = cli_load_plan(s->plan, &plan);
    if (st == RAP_OK && s->predictor[0])
        st = rap_predictor_load(s->predictor, &pred);
    if (st == RAP_OK)
        st = shape_of(s, plan, &shape);
    if (st == RAP_OK)
        st = load_capacities(s, plan, pred, &shape, R, cap, capsrc, sizeof capsrc);
    const char *gpu = st == RAP_OK ? (s->gpu_name[0] ? s->gpu_name : cap[0].gpu) : "";
    if (st == RAP_OK && pred && (s->gpu_name[0] || !cap[0].assumed))
        st = rap_predictor_check(pred, gpu);
    if (st == RAP_OK)
        st = owners_as_trainer(plan, (int)s->emb_dim, R, owner, holders, 1024, &T);
    if (st == RAP_OK && s->owners[0]) {
        char list[RAP_OPT_STR];
        snprintf(list, sizeof list, "%s", s->owners);
        int k = 0;
        for (char *save = NULL, *f = strtok_r(list, ",", &save); f && st == RAP_OK;
             f = strtok_r(NULL, ",", &save), k++) {
            char *end;
            long v = strtol(f, &end, 10);
            if (*end || v < 0 || v >= R || k >= T)
                st = rap_fail(RAP_ERR_ARG, "--owners: entry %d \"%s\": expected a rank 0..%d for "
                              "each of the plan's %d tables", k, f, R - 1, T);
            else {
                owner[k] = (int)v;
                holders[k] = (uint64_t)1 << v;
            }
        }
        if (st == RAP_OK && k != T)
            st = rap_fail(RAP_ERR_ARG, "--owners: %d entries for the plan's %d tables", k, T);
    }
    snprintf(latency, sizeof latency, pred ? "xgboost predictor %s" : "analytic fallback (no predictor)",
             s->predictor);
    rap_place_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.ranks = R;
    cfg.batch = s->batch;
    cfg.shares = (int)s->row_shares;
    cfg.owner = owner;
    cfg.holders = holders;
    cfg.cap = cap;
    cfg.pred = pred;
    cfg.link.gbytes_per_s = s->link_gbps;
    cfg.link.latency_us = s->link_latency_us;
    cfg.max_moves = (int)s->max_moves;
    double t0 = rap_now();
    int first = s->placement == 3 ? 0 : s->placement, last = s->placement == 3 ? 2 : s->placement;
    for (int k = first; k <= last && st == RAP_OK; k++)
        st = rap_place_run(plan, &cfg, (rap_placement)k, &res[k]);
    double plan_s = rap_now() - t0;
    const rap_place_result *chosen = &res[last];
    /* --parse gpu: every rank reads the lines of the whole global batch
     * and parses its piece of each chunk, a 1/R share (the ranks share the
     * parse: docs/INPUT.md; a run that cannot share, lanes interleaved by
     * batch or a followed input, parses the rest outside the windows), in
     * its own windows' room after its parts: the budgets go into its first
     * part's schedule */
    rap_parse_model pm;
    rap_parse_placement *pp = s->parse == 1 ? rap_calloc(sizeof *pp * (size_t)R, "parse placement")
                                            : NULL;
    if (st == RAP_OK && s->parse == 1 && !pp)
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK && pp)
        st = load_parse_model(s, gpu, s->gpu_name[0] || !cap[0].assumed, &pm);
    for (int r = 0; r < R && st == RAP_OK && pp; r++) {
        rap_place_rank *rk = &res[last].rank[r];
        rap_search_result room;
        memset(&room, 0, sizeof room);
        memcpy(room.capacity_ms, rk->capacity_ms, sizeof room.capacity_ms);
        memcpy(room.load_ms, rk->load_ms, sizeof room.load_ms);
        if (rk->n_parts < 1)
            st = rap_fail(RAP_ERR_INTERNAL, "--parse gpu: rank %d has no part", r);
        else
            st = plan_parse(s, &pm, s->batch, &room, rk->parts[0].sched, &pp[r]);
    }
    for (int r = 0; r < R && st == RAP_OK; r++)
        st = rap_place_save_rank(plan, chosen, r, s->out);
    if (st == RAP_OK && s->report[0]) {
        rap_out *ro;
        st = rap_out_open(s->report, NULL, &ro);
        if (st == RAP_OK) {
            FILE *fp = rap_out_file(ro);
            fputs("{\n  \"plan\": ", fp);
            rap_json_put_str(fp, base_name(s->plan));
            fprintf(fp, ",\n  \"plan_hash\": \"%016llx\",\n  \"gpus\": %d,\n"
                        "  \"batch_per_gpu\": %lld,\n  \"global_batch\": %lld,\n  \"gpu\": ",
                    (unsigned long long)rap_plan_hash(plan), R, (long long)s->batch,
                    (long long)s->batch * R);
            rap_json_put_str(fp, gpu);
            fputs(",\n  \"latency_model\": ", fp);
            rap_json_put_str(fp, latency);
            fputs(",\n  \"capacity_source\": ", fp);
            rap_json_put_str(fp, capsrc);
            fprintf(fp, ",\n  \"units\": \"ms of standalone work\",\n  \"fusion\": \"levels (per part)\",\n"
                        "  \"link\": {\"gbytes_per_s\": %g, \"latency_us\": %g},\n"
                        "  \"ownership\": \"%s\",\n  \"owner_of_table\": [",
                    s->link_gbps, s->link_latency_us,
                    s->owners[0] ? "--owners" : "rap_shard_plan as the trainer calls it (table-wise, "
                                                "no budget)");
            for (int t = 0; t < T; t++)
                fprintf(fp, "%s%d", t ? ", " : "", owner[t]);
            fprintf(fp, "],\n  \"written\": \"%s\",\n  \"placements\": [\n   ",
                    rap_placement_name(chosen->kind));
            for (int k = first; k <= last && st == RAP_OK; k++) {
                if (k > first)
                    fprintf(fp, ",\n   ");
                st = rap_place_report_json(fp, plan, &res[k]);
            }
            fprintf(fp, "\n  ]");
            if (pp) { /* --parse gpu: each rank's (rank order) */
                fprintf(fp, ",\n  \"parse\": [");
                for (int r = 0; r < R; r++) {
                    fprintf(fp, "%s", r ? ",\n   " : "\n   ");
                    rap_parse_placement_json(fp, &pp[r]);
                }
                fprintf(fp, "\n  ]");
            }
            fprintf(fp, "\n}\n");
            st = rap_out_close(ro, st);
        }
    }
    if (st == RAP_OK && !s->quiet) {
        fprintf(stderr, "rap plan: %s, %d ops, %d GPUs, batch %lld per GPU (global %lld), gpu %s\n",
                s->plan, rap_plan_n_ops(plan), R, (long long)s->batch, (long long)s->batch * R, gpu);
        fprintf(stderr, "  latency: %s; capacity: %s\n  link: %g GB/s, %g us; fusion: levels per "
                "part; planned in %.2f s -> %s.rank<r>\n", latency, capsrc, s->link_gbps,
                s->link_latency_us, plan_s, s->out);
        print_rank_windows(chosen);
        for (int r = 0; pp && r < R; r++) {
            fprintf(stderr, "  rank %d", r);
            print_parse(&pp[r]);
        }
    }
    if (st == RAP_OK && s->placement == 3) {
        printf("| placement | exposed max ms | exposed ms per rank | all-to-all ms | bytes moved / iteration |\n");
        printf("|---|---|---|---|---|\n");
        for (int k = 0; k < 3; k++) {
            printf("| %s%s | %.4f | ", rap_placement_name(k),
                   k == 2 ? (res[2].moves ? "" : " (no move helped)") : "", res[k].exposed_max_ms);
            for (int r = 0; r < R; r++)
                printf("%s%.4f", r ? " " : "", res[k].rank[r].exposed_total_ms);
            printf(" | %.4f | %lld |\n", res[k].comm_ms, (long long)res[k].bytes_moved);
        }
    }
    for (int k = 0; k < 3; k++)
        rap_place_result_free(&res[k]);
    rap_free(pp);
    rap_free(cap);
    rap_predictor_free(pred);
    rap_plan_free(plan);
    return st == RAP_OK ? 0 : cli_fail("plan", st);
}

/* `rap predictor manifest --out DIR`: the MANIFEST of a bundle written
 * before manifests existed (the bundle is loaded with it first). */
static int predictor_manifest(int argc, char **argv)
{
    cli_settings s;
    cli_parse("predictor manifest", CMD_PREDICTOR, argc, argv, &s);
    if (!s.out[0] || s.in[0]) {
        fprintf(stderr, "rap predictor manifest: --out DIR (the bundle) is required, --in is not "
                        "taken\n");
        return 2;
    }
    rap_status st = rap_predictor_write_manifest(s.out);
    if (st != RAP_OK)
        return cli_fail("predictor manifest", st);
    if (!s.quiet)
        fprintf(stderr, "rap predictor manifest: %s/MANIFEST written\n", s.out);
    return 0;
}

int cmd_predictor(int argc, char **argv)
{
    if (argc >= 1 && !strcmp(argv[0], "manifest"))
        return predictor_manifest(argc - 1, argv + 1);
    if (argc < 1 || strcmp(argv[0], "train")) {
        bool help = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"));
        fprintf(help ? stdout : stderr, "usage: rap predictor train --in kernels.csv --out DIR\n"
                "       rap predictor manifest --out DIR   (a bundle's MANIFEST)\n"
                "       (rap predictor train --help lists the options)\n");
        return help ? 0 : 2;
    }
    cli_settings s;
    cli_parse("predictor train", CMD_PREDICTOR, argc - 1, argv + 1, &s);
    if (!s.in[0] || !s.out[0]) {
        fprintf(stderr, "rap predictor train: --in CSV and --out DIR are required\n");
        return 2;
    }
    rap_pred_quality q[64];
    int nq = 0;
    rap_status st = rap_predictor_train(s.in, s.out, q, 64, &nq);
    if (st != RAP_OK)
        return cli_fail("predictor train", st);
    printf("| kernel type | train | held out | within 10%% | median rel. err | p95 | p99 |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nq; i++)
        printf("| %s | %d | %d | %.1f%% | %.4f | %.4f | %.4f |\n", q[i].type, q[i].n_train,
               q[i].n_test, 100 * q[i].within10, q[i].median, q[i].p95, q[i].p99);
    if (!s.quiet)
        fprintf(stderr, "rap predictor train: %d kernel types -> %s/predictor.txt\n", nq, s.out);
    return 0;
}
