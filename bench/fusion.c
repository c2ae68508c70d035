/*
 * bench/fusion.c -- greedy level fusion (rap_fuse_levels) vs the fusion ILP
 * (src/plan/fusion_ilp.h) on plans/plan0..3.plan: kernels, predicted total
 * latency, solve time and optimality gap, as a markdown table.
 *
 *   bench_fusion [--predictor DIR] [--batch B] [--time-limit S] [--extra-stages N] [PLAN...]
 *
 * Without --predictor the analytic fallback predicts (labelled so).
 * A second table compares the predicted exposed latency after the split
 * and search for: greedy fusion, the ILP, and the capacity-aware ILP,
 * with each window (emb_forward .. emb_backward) holding --window-share
 * (default 0.2) of the greedy fusion's predicted total (grad_comm 0).
 */
#include "plan/search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *pred_dir = NULL;
    double share = 0.2;
    rap_ilp_config cfg = rap_ilp_defaults();
    const char *plans[16];
    int n_plans = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--predictor") && a + 1 < argc)
            pred_dir = argv[++a];
        else if (!strcmp(argv[a], "--batch") && a + 1 < argc)
            cfg.batch = atoll(argv[++a]);
        else if (!strcmp(argv[a], "--time-limit") && a + 1 < argc)
            cfg.time_limit_s = atof(argv[++a]);
        else if (!strcmp(argv[a], "--window-share") && a + 1 < argc)
            share = atof(argv[++a]);
        else if (!strcmp(argv[a], "--verbose"))
            cfg.verbose = true;
        else if (!strcmp(argv[a], "--extra-stages") && a + 1 < argc)
            cfg.extra_stages = atoi(argv[++a]);
        else if (argv[a][0] == '-') {
            fprintf(stderr, "usage: bench_fusion [--predictor DIR] [--batch B] [--time-limit S] "
                            "[--extra-stages N] [PLAN...]\n");
            return 2;
        } else if (n_plans < 16)
            plans[n_plans++] = argv[a];
    }
    static const char *def[] = {"plans/plan0.plan", "plans/plan1.plan", "plans/plan2.plan",
                                "plans/plan3.plan"};
    if (n_plans == 0) {
        memcpy(plans, def, sizeof def);
        n_plans = 4;
    }
    rap_predictor *pred = NULL;
    if (pred_dir && rap_predictor_load(pred_dir, &pred) != RAP_OK) {
        fprintf(stderr, "bench_fusion: %s\n", rap_last_error());
        return 1;
    }
    cfg.pred = pred;
    printf("latency: %s; batch %lld; ILP: %d extra stages, time limit %.1f s\n\n",
           pred ? "XGBoost predictor" : "ANALYTIC fallback (no predictor)", (long long)cfg.batch,
           cfg.extra_stages, cfg.time_limit_s);
    printf("| plan | ops | greedy kernels | greedy pred. ms | ILP kernels | ILP pred. ms | ILP solve s | gap | status | stages | ILP ops | cols | rows |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int i = 0; i < n_plans; i++) {
        rap_plan *p = NULL;
        rap_fusion g = {0}, f = {0};
        rap_ilp_result r;
        if (rap_plan_load(plans[i], rap_schema_criteo(), &p) != RAP_OK ||
            rap_fuse_levels(p, &g) != RAP_OK || rap_fuse_ilp(p, &cfg, &f, &r) != RAP_OK) {
            fprintf(stderr, "bench_fusion: %s: %s\n", plans[i], rap_last_error());
            rc = 1;
        } else {
            const char *name = strrchr(plans[i], '/');
            printf("| %s | %d | %d | %.4f | %d | %.4f | %.2f | %.2f%% | %s | %d | %d | %d | %d |\n",
                   name ? name + 1 : plans[i], rap_plan_n_ops(p), g.n,
                   rap_fusion_predicted_ms(p, &g, pred, cfg.batch), f.n,
                   rap_fusion_predicted_ms(p, &f, pred, cfg.batch), r.solve_s, 100 * r.gap,
                   r.status, r.n_stages, r.n_reps, r.n_cols, r.n_rows);
            fflush(stdout);
        }
        rap_fusion_free(&g);
        rap_fusion_free(&f);
        rap_plan_free(p);
    }
    printf("\nexposed after split + search, each training window holding %.0f%% of the greedy "
           "fusion's predicted total (grad_comm 0):\n\n", 100 * share);
    printf("| plan | window ms | greedy: kernels, exposed ms | ILP: kernels, exposed ms | capacity-aware ILP: kernels, exposed ms, solve s, status | best of ILP and capacity-aware: exposed ms |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_plans && rc == 0; i++) {
        rap_plan *p = NULL;
        rap_fusion g = {0}, f = {0}, h = {0};
        rap_ilp_result r, rh;
        rap_schedule *s1 = NULL, *s2 = NULL, *s3 = NULL;
        rap_search_result x1, x2, x3;
        rap_model_shape sh = {26, 128, {128}, 1, {1}, 1, cfg.batch, 0, 0, 0};
        rap_capacity cap;
        rap_capacity_assumed(&sh, "bench", &cap);
        if (rap_plan_load(plans[i], rap_schema_criteo(), &p) != RAP_OK ||
            rap_fuse_levels(p, &g) != RAP_OK) {
            fprintf(stderr, "bench_fusion: %s: %s\n", plans[i], rap_last_error());
            rc = 1;
            break;
        }
        double win = share * rap_fusion_predicted_ms(p, &g, pred, cfg.batch);
        double caps[RAP_WIN_COUNT];
        for (int w = 0; w < RAP_CAP_WINDOWS; w++)
            cap.capacity_ms[w] = caps[w] = w < RAP_WIN_GRAD_COMM ? win : 0;
        caps[RAP_WIN_EXPOSED] = 0;
        rap_ilp_config cc = cfg;
        cc.window_cap_ms = caps;
        cc.n_windows = RAP_WIN_COUNT;
        rap_search_config sc = {pred, &cap, cfg.batch, 1, false, RAP_CHOICE_SLOWDOWN};
        if (rap_fuse_ilp(p, &cfg, &f, &r) != RAP_OK || rap_fuse_ilp(p, &cc, &h, &rh) != RAP_OK ||
            rap_schedule_search(p, &g, &sc, "g", &s1, &x1) != RAP_OK ||
            rap_schedule_search(p, &f, &sc, "f", &s2, &x2) != RAP_OK ||
            rap_schedule_search(p, &h, &sc, "h", &s3, &x3) != RAP_OK) {
            fprintf(stderr, "bench_fusion: %s: %s\n", plans[i], rap_last_error());
            rc = 1;
        } else {
            const char *name = strrchr(plans[i], '/');
            printf("| %s | %.4f | %d, %.4f | %d, %.4f | %d, %.4f, %.2f, %s%s | %.4f |\n",
                   name ? name + 1 : plans[i], win, g.n, x1.total_exposed_ms, f.n,
                   x2.total_exposed_ms, h.n, x3.total_exposed_ms, rh.solve_s, rh.status,
                   rh.capacity_aware ? "" : " (variant too large: plain ILP)",
                   x3.total_exposed_ms < x2.total_exposed_ms ? x3.total_exposed_ms : x2.total_exposed_ms);
            fflush(stdout);
        }
        rap_schedule_free(s1);
        rap_schedule_free(s2);
        rap_schedule_free(s3);
        rap_fusion_free(&g);
        rap_fusion_free(&f);
        rap_fusion_free(&h);
        rap_plan_free(p);
    }
    rap_predictor_free(pred);
    return rc;
}
