/* test_bench.c -- rap bench --repeat R through the binary: the mode list
 * runs R times, every reported number is the median of the R runs, vs
 * ideal the median of the per-run ratios (src/cli/cmd_bench.c). A tiny plan
 * (2 dense, 2 sparse columns) keeps each run to a few milliseconds. On the
 * CPU ideal runs only from a shard (alone), so the ratios of other modes to
 * ideal are checked by the GPU test (skipped without a GPU). */
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n";

/* The tiny plan in the scratch directory (path into out, n bytes): the
 * columns above, every other input column deleted. */
static bool tiny_plan(char *out, size_t n)
{
    rap_test_path(out, n, "bench_tiny.plan");
    FILE *f = fopen(out, "w");
    if (!f)
        return false;
    fputs(k_plan, f);
    for (int i = 2; i < 13; i++)
        fprintf(f, "del df[\"int_%d\"]\n", i);
    for (int i = 2; i < 26; i++)
        fprintf(f, "del df[\"cat_%d\"]\n", i);
    return fclose(f) == 0;
}

/* The JSON object of mode `mode` in rap bench --json output: a pointer to
 * its "{\"mode\":..." and its length into *len (up to the closing brace;
 * the objects hold no nested ones), NULL if absent. */
static const char *mode_obj(const char *text, const char *mode, size_t *len)
{
    char key[64];
    snprintf(key, sizeof key, "{\"mode\":\"%s\"", mode);
    const char *p = strstr(text, key);
    if (!p)
        return NULL;
    const char *end = strchr(p, '}');
    if (!end)
        return NULL;
    *len = (size_t)(end - p + 1);
    return p;
}

/* Number of key "name" inside obj[0..len): true and *v if present (null:
 * NaN). */
static bool num_of(const char *obj, size_t len, const char *name, double *v)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(obj, key);
    if (!p || p >= obj + len)
        return false;
    p += strlen(key);
    if (!strncmp(p, "null", 4)) {
        *v = NAN;
        return true;
    }
    char *end;
    *v = strtod(p, &end);
    return end != p;
}

/* Array of numbers "name":[a,b,..] inside obj: its count (at most max;
 * null entries NaN), -1 if absent or malformed. */
static int runs_of(const char *obj, size_t len, const char *name, double *v, int max)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":[", name);
    const char *p = strstr(obj, key);
    if (!p || p >= obj + len)
        return -1;
    p += strlen(key);
    int k = 0;
    while (*p != ']') {
        if (k >= max)
            return -1;
        if (!strncmp(p, "null", 4)) {
            v[k++] = NAN;
            p += 4;
        } else {
            char *end;
            v[k++] = strtod(p, &end);
            if (end == p)
                return -1;
            p = end;
        }
        if (*p == ',')
            p++;
        else if (*p != ']')
            return -1;
    }
    return k;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(const double *v, int n)
{
    double s[128];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* JSON numbers carry 9 significant digits. */
static bool close9(double a, double b) { return fabs(a - b) <= 1e-8 * fmax(fabs(a), fabs(b)); }

/* Checks mode `mode` of the output: R runs of samples/s, samples_per_s
 * their median; the runs into sps (R of them). False if the runs are not
 * there. */
static bool check_sps_median(rap_test_ctx *t, const char *text, const char *mode, int R,
                             double *sps)
{
    size_t len = 0;
    const char *o = mode_obj(text, mode, &len);
    CHECK_MSG(o, "no mode %s in: %s", mode, text);
    if (!o)
        return false;
    int n = runs_of(o, len, "samples_per_s_runs", sps, 128);
    CHECK_MSG(n == R, "%s: %d samples_per_s_runs, expected %d: %.*s", mode, n, R, (int)len, o);
    double med;
    CHECK(num_of(o, len, "samples_per_s", &med));
    if (n == R) {
        for (int k = 0; k < R; k++)
            CHECK_MSG(sps[k] > 0, "%s run %d: %g samples/s", mode, k, sps[k]);
        CHECK_MSG(close9(med, median_of(sps, R)), "%s: samples_per_s %.9g, median of the runs "
                  "%.9g", mode, med, median_of(sps, R));
    }
    return n == R;
}

/* cpu and sequential, 3 runs: "repeat":3, 3 runs each, samples/s their
 * median; no ideal on the CPU from raw rows: vs_ideal null in every run;
 * the progress lines name the run; the table says "median of 3 runs". */
RAP_TEST(bench_repeat_cpu_medians)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[512], args[2048];
    REQUIRE(tiny_plan(plan, sizeof plan));
    static char out[1 << 16];
    snprintf(args, sizeof args,
             "bench --device cpu --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--cpu-workers 2 --modes cpu,sequential --repeat 3 --json", plan);
    int rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    const char *json = strstr(out, "{\"plan\"");
    REQUIRE(json);
    CHECK_MSG(strstr(json, "\"repeat\":3,"), "%s", json);
    CHECK_MSG(strstr(out, "bench: mode cpu (run 1/3)") && strstr(out, "bench: mode cpu (run 3/3)") &&
                  strstr(out, "bench: mode sequential (run 2/3)"),
              "%s", out);
    static const char *const modes[] = {"cpu", "sequential"};
    for (int m = 0; m < 2; m++) {
        double sps[128], vs[128], v = 0;
        check_sps_median(t, json, modes[m], 3, sps);
        size_t len = 0;
        const char *o = mode_obj(json, modes[m], &len);
        if (!o)
            continue;
        CHECK(runs_of(o, len, "vs_ideal_runs", vs, 128) == 3 && isnan(vs[0]) && isnan(vs[2]));
        CHECK(num_of(o, len, "vs_ideal", &v) && isnan(v));
        /* the keys of R = 1 come first, in their order */
        CHECK_MSG(strstr(o, "\",\"samples_per_s\":") && strstr(o, ",\"samples_per_s_runs\":[") >
                      strstr(o, "\"gpu_gb\":"), "%.*s", (int)len, o);
    }
    /* R = 2: the median is the mean of the two; the table's header */
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes sequential --repeat 2 --json", plan);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    double sps[128];
    check_sps_median(t, out, "sequential", 2, sps);
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes sequential --repeat 2", plan);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "; median of 2 runs") && strstr(out, "\nsequential "),
              "exit %d: %s", rc, out);
    /* a mode failing in one run only (--trace is written by the last run,
     * here into a folder that does not exist): reported failed, naming it */
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes cpu,sequential --repeat 2 --trace /nonexistent_rap_dir/t.json --json", plan);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0 &&
                  strstr(out, "{\"mode\":\"cpu\",\"skipped\":\"failed (run 2/2): trace: "
                              "/nonexistent_rap_dir/t.cpu.json: cannot create") &&
                  strstr(out, "{\"mode\":\"sequential\",\"skipped\":\"failed (run 2/2): "),
              "exit %d: %s", rc, out);
    /* a writable --trace: written once per mode, by the last run */
    char trace[512];
    rap_test_path(trace, sizeof trace, "bench_rep.json");
    snprintf(args, sizeof args,
             "bench --device cpu --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes sequential --repeat 2 --trace %s", plan, trace);
    rc = rap_test_run_rap(args, out, sizeof out);
    const char *w = strstr(out, "bench: sequential timeline written to");
    CHECK_MSG(rc == 0 && w && !strstr(w + 30, "timeline written") &&
                  w > strstr(out, "bench: mode sequential (run 2/2)"),
              "exit %d: %s", rc, out);
    /* R = 1 (the default): the header as before, "repeat":1, one run */
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes sequential", plan);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0 && !strstr(out, "median of") && strstr(out, "(medians per step, ms)\n"),
              "exit %d: %s", rc, out);
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --steps 3 --warmup 1 --batch 64 --threads 2 "
             "--modes sequential --json", plan);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "\"repeat\":1,"), "exit %d: %s", rc, out);
    check_sps_median(t, out, "sequential", 1, sps);
}

/* ideal from a shard on the CPU, 3 runs: each run's ratio and the median
 * are exactly 1, samples/s the median of the runs. */
RAP_TEST(bench_repeat_ideal_shard)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[512], shard[512], args[2048];
    REQUIRE(tiny_plan(plan, sizeof plan));
    rap_test_path(shard, sizeof shard, "bench_tiny.shard");
    static char out[1 << 16];
    snprintf(args, sizeof args,
             "prep --quiet --device cpu --plan %s --format bin --output %s --batch 64 "
             "--gen-rows 640 --threads 2", plan, shard);
    int rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "rap prep: exit %d: %s", rc, out);
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --data %s --modes ideal --steps 3 --warmup 1 "
             "--batch 64 --threads 2 --repeat 3 --json", plan, shard);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "\"repeat\":3,"), "%s", out);
    double sps[128], vs[128], v = 0;
    check_sps_median(t, out, "ideal", 3, sps);
    size_t len = 0;
    const char *o = mode_obj(out, "ideal", &len);
    REQUIRE(o);
    CHECK_MSG(runs_of(o, len, "vs_ideal_runs", vs, 128) == 3 && vs[0] == 1 && vs[1] == 1 &&
                  vs[2] == 1,
              "%.*s", (int)len, o);
    CHECK_MSG(num_of(o, len, "vs_ideal", &v) && v == 1, "%.*s", (int)len, o);
}

/* --repeat outside [1, 100]: refused before anything runs, naming the
 * option and its range, exit 2. */
RAP_TEST(bench_repeat_refused)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char out[1 << 14];
    static const char *const bad[] = {"0", "101", "-1"};
    for (int i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "bench --device cpu --modes sequential --repeat %s", bad[i]);
        int rc = rap_test_run_rap(args, out, sizeof out);
        CHECK_MSG(rc == 2, "--repeat %s: exit %d: %s", bad[i], rc, out);
        CHECK_MSG(strstr(out, "--repeat must be in [1, 100]") && !strstr(out, "bench: mode"),
                  "--repeat %s: %s", bad[i], out);
    }
    int rc = rap_test_run_rap("bench --help", out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "--repeat R"), "%s", out);
}

/* GPU: ideal, sequential and rap, 3 runs: every mode's vs_ideal is the
 * median over the runs of its samples/s over the same run's ideal, each
 * run's ratio that one, ideal's 1. */
RAP_TEST(bench_repeat_gpu_ratios)
{
    REQUIRE_GPU();
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[512], args[2048];
    REQUIRE(tiny_plan(plan, sizeof plan));
    static char out[1 << 16];
    snprintf(args, sizeof args,
             "bench --device gpu --quiet --plan %s --steps 5 --warmup 2 --batch 512 "
             "--modes ideal,sequential,stream,rap --repeat 3 --json", plan);
    int rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "\"repeat\":3,"), "%s", out);
    double ideal[128];
    REQUIRE(check_sps_median(t, out, "ideal", 3, ideal));
    static const char *const modes[] = {"ideal", "sequential", "stream", "rap"};
    for (int m = 0; m < 4; m++) {
        double sps[128], vs[128], ratio[3], v = 0;
        if (!check_sps_median(t, out, modes[m], 3, sps))
            continue;
        size_t len = 0;
        const char *o = mode_obj(out, modes[m], &len);
        bool have = runs_of(o, len, "vs_ideal_runs", vs, 128) == 3 && num_of(o, len, "vs_ideal", &v);
        CHECK_MSG(have, "%.*s", (int)len, o);
        if (!have)
            continue;
        for (int k = 0; k < 3; k++) {
            ratio[k] = sps[k] / ideal[k];
            CHECK_MSG(fabs(vs[k] - ratio[k]) <= 1e-7 * ratio[k], "%s run %d: vs_ideal %.9g, "
                      "samples/s over ideal's %.9g", modes[m], k, vs[k], ratio[k]);
        }
        CHECK_MSG(fabs(v - median_of(ratio, 3)) <= 1e-7 * v, "%s: vs_ideal %.9g, median of the "
                  "per-run ratios %.9g", modes[m], v, median_of(ratio, 3));
        if (m == 0)
            CHECK_MSG(v == 1 && vs[0] == 1 && vs[1] == 1 && vs[2] == 1, "%.*s", (int)len, o);
    }
}

/* The defaults: no --steps measures 50 steps on the CPU (300 on the GPU);
 * no --modes runs every mode with mps last (the mode right after mps
 * measured faster than itself elsewhere, bench/RESULTS.md, 2026-11-29,
 * commit ddad953), listed in that order, those that cannot run here as
 * skipped. */
RAP_TEST(bench_defaults_steps_and_mode_order)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[512], args[2048];
    REQUIRE(tiny_plan(plan, sizeof plan));
    static char out[1 << 16];
    snprintf(args, sizeof args,
             "bench --device cpu --quiet --plan %s --warmup 1 --batch 64 --threads 2 "
             "--cpu-workers 2 --json", plan);
    int rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    const char *json = strstr(out, "{\"plan\"");
    REQUIRE(json);
    CHECK_MSG(strstr(json, "\"steps\":50,"), "%s", json);
    static const char *const order[] = {"ideal", "cpu", "sequential", "stream", "rap", "mps"};
    const char *prev = json;
    for (int i = 0; i < 6; i++) {
        size_t len = 0;
        const char *o = mode_obj(json, order[i], &len);
        CHECK_MSG(o && o > prev, "mode %s missing or out of order: %s", order[i], json);
        if (o)
            prev = o;
    }
    size_t len = 0;
    const char *seq = mode_obj(json, "sequential", &len);
    CHECK_MSG(seq && strstr(seq, "\"samples\":3200") && strstr(seq, "\"samples\":3200") < seq + len,
              "50 steps of 64 rows: %.*s", (int)len, seq ? seq : "");
    int r2 = rap_test_run_rap("bench --help", out, sizeof out);
    CHECK_MSG(r2 == 0 && strstr(out, "ideal,cpu,sequential,stream,rap,mps") &&
                  strstr(out, "0: 300 on the GPU"),
              "%s", out);
}
