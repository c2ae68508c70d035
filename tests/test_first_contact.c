/* test_first_contact.c -- the rap command as a new user meets it: arguments
 * checked before the work, exit codes that tell, no silent success, and the
 * first-contact messages (help, --quiet, compact settings, no GPU, plan and
 * capacity hints). Runs build/rap (beside this test binary) through the
 * shell on data the tests make; the small plan of the distributed tests
 * keeps the tables small. */
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define NEED_RAP()                                                          \
    do {                                                                    \
        if (access(rap_test_bin(), X_OK) != 0)                              \
            SKIP("%s not built", rap_test_bin());                           \
    } while (0)

/* Writes src's lines to dst, each with a trailing tab (a 41st field: every
 * row rejected), or only every k-th line so when k > 1. */
static bool tab_lines(const char *src, const char *dst, int k)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    bool ok = in && out;
    char line[8192];
    long i = 0;
    while (ok && fgets(line, sizeof line, in)) {
        size_t n = strlen(line);
        bool bad = k <= 1 || i++ % k == 0;
        if (bad && n > 0 && line[n - 1] == '\n') {
            line[n - 1] = '\t';
            fputs(line, out);
            fputc('\n', out);
        } else {
            fputs(line, out);
        }
    }
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = false;
    return ok;
}

/* Files in dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

/* The small plan and 3,000 rows, once; an all-rejected copy of the rows. */
static bool inputs(rap_test_ctx *t, char *plan, char *data, char *bad, size_t n)
{
    if (!rap_test_dist_inputs(t, 11, "fc", plan, data, n))
        return false;
    rap_test_path(bad, n, "fc_all_rejected.tsv");
    return access(bad, R_OK) == 0 || tab_lines(data, bad, 1);
}

/* --save into a missing (or, not as root, read-only) directory and a
 * missing --eval-data are refused before any step; the probe file goes. */
RAP_TEST(first_checks_before_work)
{
    NEED_RAP();
    static char out[1 << 16];
    char plan[512], data[512], bad[512], args[4096], dir[512], ck[600];
    REQUIRE(inputs(t, plan, data, bad, sizeof plan));
    const char *base = "train --device cpu --threads 2 --batch 256 --eval-fraction 0";
    snprintf(args, sizeof args, "%s --plan %s --data %s --save /nonexistent_dir/run.safetensors",
             base, plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "--save /nonexistent_dir/run.safetensors") &&
                  strstr(out, "before any work"), "%s", out);
    CHECK_MSG(!strstr(out, "trained") && !strstr(out, "rows read"), "work done first:\n%s", out);
    snprintf(args, sizeof args, "%s --plan %s --data %s --eval-data /nonexistent_eval.tsv",
             "train --device cpu --threads 2 --batch 256", plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "--eval-data /nonexistent_eval.tsv") && !strstr(out, "trained"), "%s",
              out);
    snprintf(args, sizeof args, "%s --plan %s --data /nonexistent_data.tsv", base, plan);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "--data /nonexistent_data.tsv"), "%s", out);
    /* rap prep: --output's directory before reading */
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --output /nonexistent_dir/o.tsv",
             plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "before any work") && !strstr(out, "rows read"), "%s", out);
    /* a writable directory: trains, saves, and leaves no probe file */
    rap_test_path(dir, sizeof dir, "fc_save");
    mkdir(dir, 0755);
    snprintf(ck, sizeof ck, "%s/run.safetensors", dir);
    snprintf(args, sizeof args, "%s --plan %s --data %s --steps 2 --save %s --quiet", base, plan,
             data, ck);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK(access(ck, R_OK) == 0);
    CHECK(count_prefixed(dir, ".rap-probe") == 0);
    if (geteuid() == 0) {
        printf("    read-only directory: not checked as root (root writes there)\n");
        return;
    }
    char ro[512];
    rap_test_path(ro, sizeof ro, "fc_readonly");
    mkdir(ro, 0755);
    REQUIRE(chmod(ro, 0555) == 0);
    snprintf(args, sizeof args, "%s --plan %s --data %s --save %s/run.safetensors", base, plan,
             data, ro);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "before any work") && !strstr(out, "trained"), "%s", out);
    chmod(ro, 0755);
}

/* No usable row: exit 3 from prep, train and an --eval-data; the summary
 * names the field and value; --max-rejected F: exit 4. */
RAP_TEST(first_exit_codes)
{
    NEED_RAP();
    static char out[1 << 16];
    char plan[512], data[512], bad[512], args[4096], o[512], some[512], ck[512];
    REQUIRE(inputs(t, plan, data, bad, sizeof plan));
    rap_test_path(o, sizeof o, "fc_prep_out.tsv");
    remove(o);
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --output %s", plan, bad, o);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 3);
    CHECK_MSG(strstr(out, "no usable row") && strstr(out, "rows read 3000 = used 0 + rejected 3000"),
              "%s", out);
    CHECK_MSG(strstr(out, "fc_all_rejected.tsv:1: expected 40 tab-separated fields, got 41"), "%s",
              out);
    CHECK_MSG(access(o, F_OK) != 0, "%s written from no usable row", o);
    /* a bad label names its value */
    char lab[512];
    rap_test_path(lab, sizeof lab, "fc_label.tsv");
    FILE *f = fopen(lab, "wb");
    REQUIRE(f);
    fputs("7\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13", f);
    for (int i = 0; i < 26; i++)
        fputs("\tab", f);
    fputs("\n", f);
    fclose(f);
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s", plan, lab);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 3);
    CHECK_MSG(strstr(out, "fc_label.tsv:1: expected label 0 or 1, got"), "%s", out);
    /* --max-rejected: 1 row in 10 rejected */
    rap_test_path(some, sizeof some, "fc_some_rejected.tsv");
    REQUIRE(tab_lines(data, some, 10));
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --max-rejected 0.05", plan,
             some);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 4);
    CHECK_MSG(strstr(out, "300 of 3000 rows rejected") && strstr(out, "--max-rejected 0.05"), "%s",
              out);
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --max-rejected 0.2", plan,
             some);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    const char *base = "train --device cpu --threads 2 --batch 256";
    snprintf(args, sizeof args, "%s --plan %s --data %s --eval-fraction 0 --max-rejected 0.05",
             base, plan, some);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 4);
    CHECK_MSG(strstr(out, "--max-rejected 0.05"), "%s", out);
    /* train: no usable training row */
    snprintf(args, sizeof args, "%s --plan %s --data %s --eval-fraction 0", base, plan, bad);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 3);
    CHECK_MSG(strstr(out, "no training rows"), "%s", out);
    /* train: --eval-data with no usable row fails, the checkpoint saved */
    rap_test_path(ck, sizeof ck, "fc_eval.safetensors");
    remove(ck);
    snprintf(args, sizeof args, "%s --plan %s --data %s --eval-data %s --steps 3 --save %s", base,
             plan, data, bad, ck);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 3);
    CHECK_MSG(strstr(out, "no usable row in --eval-data") && strstr(out, "3000 rejected") &&
                  strstr(out, "expected 40 tab-separated fields, got 41"), "%s", out);
    CHECK_MSG(access(ck, R_OK) == 0, "no checkpoint after the evaluation failed:\n%s", out);
}

/* --steps past the data says it reads the data again and about how many
 * passes; a resume with nothing left says why. */
RAP_TEST(first_steps_and_resume_say_what_happens)
{
    NEED_RAP();
    static char out[1 << 16];
    char plan[512], data[512], bad[512], args[4096], ck[512];
    REQUIRE(inputs(t, plan, data, bad, sizeof plan));
    rap_test_path(ck, sizeof ck, "fc_epoch.safetensors");
    const char *base = "train --device cpu --threads 2 --batch 1000 --eval-fraction 0";
    /* 3,000 rows: 3 steps a pass; --steps 7 runs 3 passes */
    snprintf(args, sizeof args, "%s --plan %s --data %s --steps 7", base, plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "--steps 7: the data ended at step 3") &&
                  strstr(out, "about 2 more passes"), "%s", out);
    /* one epoch, saved; the same command resumed trains nothing and says so */
    snprintf(args, sizeof args, "%s --plan %s --data %s --save %s", base, plan, data, ck);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    snprintf(args, sizeof args, "%s --plan %s --data %s --resume %s", base, plan, data, ck);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "nothing to train: the checkpoint finished pass 1") &&
                  strstr(out, "--epochs 2"), "%s", out);
    snprintf(args, sizeof args, "%s --plan %s --data %s --resume %s --steps 2", base, plan, data, ck);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "nothing to train: the checkpoint is at step 3 and --steps is 2"), "%s",
              out);
}

/* --help of profile and predictor exits 0; --quiet silences gen and prep;
 * the start-up settings are compact unless --verbose. */
RAP_TEST(first_help_quiet_settings)
{
    NEED_RAP();
    static char out[1 << 16];
    char plan[512], data[512], bad[512], args[4096], g[512];
    REQUIRE(inputs(t, plan, data, bad, sizeof plan));
    CHECK(rap_test_run_rap("profile --help", out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "rap profile kernels"), "%s", out);
    CHECK(rap_test_run_rap("predictor --help", out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "rap predictor train"), "%s", out);
    CHECK(rap_test_run_rap("predictor", out, sizeof out) == 2);
    rap_test_path(g, sizeof g, "fc_quiet.tsv");
    snprintf(args, sizeof args, "gen --rows 500 --out %s --quiet", g);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(out[0] == 0, "rap gen --quiet printed:\n%s", out);
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --output /dev/null --quiet",
             plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(out[0] == 0, "rap prep --quiet printed:\n%s", out);
    /* compact: the options given, not the 30-odd defaults */
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s", plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "device=cpu") && !strstr(out, "max-line"), "%s", out);
    int lines = 0;
    for (const char *p = strstr(out, "settings"); p && *p && strncmp(p, "plan ", 5); p++)
        lines += *p == '\n';
    CHECK_MSG(lines <= 4, "%d lines of settings:\n%s", lines, out);
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --verbose", plan, data);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK_MSG(strstr(out, "max-line") && strstr(out, "(default)"), "%s", out);
}

/* A plan statement split over two lines gets a hint; plan 1's capacity
 * file names every mismatched model option at once. */
RAP_TEST(first_plan_and_capacity_hints)
{
    NEED_RAP();
    static char out[1 << 16];
    char p[512], args[4096], cap[512], sched[512];
    rap_test_path(p, sizeof p, "fc_split.plan");
    FILE *f = fopen(p, "wb");
    REQUIRE(f);
    fputs("df[\"cat_3\"] = functional.sigrid_hash(df[\"cat_3\"].fill_null(0),\n    0, 2202608)\n", f);
    fclose(f);
    snprintf(args, sizeof args, "prep --device cpu --gen-rows 10 --plan %s", p);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "fc_split.plan:1:") && strstr(out, "1 bracket open") &&
                  strstr(out, "join it with the next"), "%s", out);
    char plan1[512];
    if (!rap_test_plan_path("plan1.plan", plan1, sizeof plan1) ||
        !rap_test_plan_path("h200/capacity/plan1_4096.capacity", cap, sizeof cap))
        SKIP("plans/plan1.plan or its capacity file not found");
    rap_test_path(sched, sizeof sched, "fc_plan1.schedule");
    snprintf(args, sizeof args, "plan --plan %s --capacity %s --out %s", plan1, cap, sched);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "embedding dim 64, not 128 (--emb-dim 64)") &&
                  strstr(out, "bottom MLP 512-256-64, not 512-256-128 (--mlp-bot 512-256-64)"),
              "%s", out);
}

/* No GPU: "no CUDA GPU found (...)", never the runtime's "CUDA driver
 * version is insufficient"; rap profile kernels finds its default plans
 * from another directory (and then refuses for the missing GPU). */
RAP_TEST(first_no_gpu_messages)
{
    NEED_RAP();
    char why[256];
    if (rap_gpu_available(why, sizeof why))
        SKIP("a GPU is present: these are the messages of machines without one");
    static char out[1 << 16];
    char cmd[4096], bin[1024];
    if (!realpath(rap_test_bin(), bin))
        SKIP("cannot resolve %s", rap_test_bin());
    snprintf(cmd, sizeof cmd, "cd / && '%s' profile kernels --target 3", bin);
    CHECK(rap_test_sh(cmd, out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "need a GPU") && !strstr(out, "plan0.plan:"), "%s", out);
    if (strstr(why, "built without CUDA"))
        SKIP("built without CUDA: %s", why);
    CHECK_MSG(strstr(why, "no CUDA GPU found (") && !strstr(why, "driver version is insufficient"),
              "%s", why);
    CHECK(rap_test_run_rap("train --device gpu --gen-rows 100", out, sizeof out) == 1);
    CHECK_MSG(strstr(out, "no CUDA GPU found (") && !strstr(out, "insufficient"), "%s", out);
}
