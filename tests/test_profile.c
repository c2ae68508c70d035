/* test_profile.c -- the GPU profilers (src/plan/profile.c): without a GPU
 * they refuse clearly; with one, their outputs are sane and usable by the
 * planner (the kernel CSV trains a predictor, the capacity file loads). */
#include "test.h"

#include "plan/capacity.h"
#include "plan/predictor.h"
#include "plan/profile.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

RAP_TEST(profile_median)
{
    double v[5] = {5, 1, 4, 2, 3};
    CHECK(rap_prof_median(v, 5) == 3);
    double w[4] = {4, 1, 3, 2};
    CHECK(rap_prof_median(w, 4) == 2.5);
}

RAP_TEST(profile_cli_refuses_without_gpu)
{
    char why[256];
    if (rap_gpu_available(why, sizeof why))
        SKIP("a GPU is present: the refusal is for machines without one");
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char out[4096];
    CHECK(rap_test_run_rap("profile kernels --target 3", out, sizeof out) == 1);
    CHECK(strstr(out, "need a GPU") != NULL);
    /* --out: no CSV left behind when nothing was measured */
    char csv[512], args[1024];
    rap_test_path(csv, sizeof csv, "prof_refused.csv");
    snprintf(args, sizeof args, "profile kernels --target 3 --out %s", csv);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(access(csv, F_OK) != 0, "%s exists after the refusal", csv);
    rap_test_path(csv, sizeof csv, "prof_refused.parse"); /* nor the parse model */
    CHECK_MSG(access(csv, F_OK) != 0, "%s exists after the refusal", csv);
    CHECK(rap_test_run_rap("profile capacity --model small --batch 256", out, sizeof out) == 1);
    CHECK(strstr(out, "need a GPU") != NULL);
    CHECK(rap_test_run_rap("profile", out, sizeof out) == 2);
    CHECK(strstr(out, "usage: rap profile kernels") != NULL);
}

/* Kernel CSV: the requested number of lines, every latency positive, and the
 * CSV is accepted by the predictor trainer. */
RAP_TEST(profile_kernels_gpu)
{
    REQUIRE_GPU();
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char csv[512], dir[512], args[2048], out[8192];
    rap_test_path(csv, sizeof csv, "prof_kernels.csv");
    rap_test_path(dir, sizeof dir, "prof_pred");
    snprintf(args, sizeof args,
             "profile kernels --plans default --batches 512,2048 --reps 3 --target 300 "
             "--ilp-time 0 --out %s", csv);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    FILE *f = fopen(csv, "r");
    REQUIRE(f != NULL);
    char line[1024];
    int rows = 0, bad = 0;
    bool header = false;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        if (!header) {
            header = strncmp(line, "gpu,op,variant,descs,rows", 25) == 0;
            continue;
        }
        const char *last = strrchr(line, ',');
        double ms = last ? atof(last + 1) : -1;
        bad += !(ms > 0 && ms < 100);
        rows++;
    }
    fclose(f);
    CHECK(header);
    CHECK(rows == 300);
    CHECK(bad == 0);
    snprintf(args, sizeof args, "predictor train --in %s --out %s --quiet", csv, dir);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    remove(csv);
    /* the parse kernels' model beside the CSV: loads, 7 line counts of two
     * lengths measured, slopes >= 0, a larger batch costs more, a close fit */
    char pm_path[512];
    rap_test_path(pm_path, sizeof pm_path, "prof_kernels.parse");
    rap_parse_model pm;
    REQUIRE_OK(rap_parse_model_load(pm_path, &pm));
    CHECK(pm.gpu[0] && pm.n_points == 14 && pm.ms_per_line >= 0 && pm.ms_per_byte >= 0);
    CHECK(pm.bytes_per_line > 100 && pm.bytes_per_line < 400);
    CHECK(rap_parse_model_lines_ms(&pm, 65536) > rap_parse_model_lines_ms(&pm, 1024));
    CHECK_MSG(pm.rel_rms < 0.3, "the parse model's relative RMS error %.3f", pm.rel_rms);
    for (int i = 0; i < pm.n_points; i++)
        CHECK(pm.pt[i].ms > 0 && pm.pt[i].ms < 100);
}

/* Capacity file: loads back, standalone times positive, capacities finite,
 * non-negative and not absurd (a phase cannot hide 100x its own length). */
RAP_TEST(profile_capacity_gpu)
{
    REQUIRE_GPU();
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char path[512], cur[512], args[2048], out[8192];
    rap_test_path(path, sizeof path, "prof.capacity");
    rap_test_path(cur, sizeof cur, "prof_currency.csv");
    snprintf(args, sizeof args,
             "profile capacity --model small --batch 2048 --reps 5 --out %s --currency %s "
             "--currency-phase emb_backward", path, cur);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    rap_capacity c;
    REQUIRE_OK(rap_capacity_load(path, &c));
    CHECK(c.shape.batch == 2048);
    CHECK(c.shape.emb_dim == 16);
    CHECK(fabs(c.tolerance - 0.02) < 1e-9);
    for (int w = 0; w < RAP_WIN_GRAD_COMM; w++) {
        CHECK(c.standalone_ms[w] > 0);
        CHECK(c.capacity_ms[w] >= 0 && c.capacity_ms[w] < 100 * c.standalone_ms[w]);
    }
    CHECK(c.capacity_ms[RAP_WIN_GRAD_COMM] == 0);
    FILE *f = fopen(cur, "r");
    REQUIRE(f != NULL);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += line[0] != '#' && strncmp(line, "type,", 5) != 0;
    fclose(f);
    CHECK(n >= 3); /* three sizes of at least one kernel */
    remove(path);
    remove(cur);
}

/* --cuda-graph: the phases replayed as graphs (as rap bench --cuda-graph
 * runs them); the file says so in a comment and loads as any other. */
RAP_TEST(profile_capacity_gpu_graphs)
{
    REQUIRE_GPU();
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char path[512], args[2048], out[8192];
    rap_test_path(path, sizeof path, "prof_graph.capacity");
    snprintf(args, sizeof args,
             "profile capacity --model small --batch 2048 --reps 5 --cuda-graph --out %s", path);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    rap_capacity c;
    REQUIRE_OK(rap_capacity_load(path, &c));
    CHECK(c.shape.batch == 2048);
    for (int w = 0; w < RAP_WIN_GRAD_COMM; w++) {
        CHECK(c.standalone_ms[w] > 0);
        CHECK(c.capacity_ms[w] >= 0 && c.capacity_ms[w] < 100 * c.standalone_ms[w]);
    }
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char line[512];
    bool said = false;
    while (fgets(line, sizeof line, f))
        said |= strstr(line, "# measured by rap profile capacity --cuda-graph") == line;
    fclose(f);
    CHECK(said);
    remove(path);
}

/* Lists longer than the table holds are refused, not cut short. */
RAP_TEST(profile_cli_list_limits)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char args[2048], out[4096];
    int at = snprintf(args, sizeof args, "profile kernels --batches ");
    for (int i = 0; i < 65; i++)
        at += snprintf(args + at, sizeof args - (size_t)at, "%s%d", i ? "," : "", 100 + i);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK(strstr(out, "--batches: expected 1 to 64") != NULL);
    CHECK(rap_test_run_rap("profile kernels --plans ,", out, sizeof out) == 1);
    CHECK(strstr(out, "--plans: expected 1 to 64") != NULL);
}
