/* test_cli.c -- the rap command as a user meets it: exit codes, messages,
 * outputs. Runs build/rap (next to this test binary) through the shell. */
#include "test.h"

#include "data/shard.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static bool files_equal(const char *a, const char *b)
{
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

RAP_TEST(cli_gen_deterministic)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char err[65536];
    const char *d = rap_test_tmpdir();
    char args[2048], a[512], b[512];
    snprintf(a, sizeof a, "%s/g1.tsv", d);
    snprintf(b, sizeof b, "%s/g2.tsv", d);
    snprintf(args, sizeof args, "gen --rows 3000 --seed 7 --out %s --threads 1", a);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    CHECK(strstr(err, "teacher AUC") != NULL);
    snprintf(args, sizeof args, "gen --rows 3000 --seed 7 --out %s --threads 2", b);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    CHECK(files_equal(a, b));
    snprintf(args, sizeof args, "gen --rows 3000 --seed 8 --out %s", b);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    CHECK(!files_equal(a, b));
    CHECK(rap_test_run_rap("gen --rows 10 --cardinalities 1,2,3 --out /dev/null", err, sizeof err) == 1);
    CHECK(strstr(err, "26") != NULL);
}

RAP_TEST(cli_prep_outputs_and_accounting)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char err[65536];
    const char *d = rap_test_tmpdir();
    char in[512], out[512], bin[512], args[4096];
    snprintf(in, sizeof in, "%s/p_in.tsv", d);
    snprintf(out, sizeof out, "%s/p_out.tsv", d);
    snprintf(bin, sizeof bin, "%s/p_out.rapbin", d);
    snprintf(args, sizeof args, "gen --rows 2500 --seed 3 --out %s", in);
    REQUIRE(rap_test_run_rap(args, err, sizeof err) == 0);
    /* a malformed row appended: skipped and counted */
    FILE *f = fopen(in, "ab");
    REQUIRE(f);
    fputs("2\t1\t2\n", f);
    fclose(f);
    snprintf(args, sizeof args,
             "prep --device cpu --plan plans/plan0.plan --input %s --output %s --batch 1000", in, out);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    CHECK_MSG(strstr(err, "rows read 2501 = used 2500 + rejected 1") != NULL, "%s", err);
    CHECK(strstr(err, "p_in.tsv:2501") != NULL);
    f = fopen(out, "rb");
    REQUIRE(f);
    char line[8192];
    int lines = 0;
    REQUIRE(fgets(line, sizeof line, f));
    CHECK(!strncmp(line, "label\tint_0\tint_1", 17));
    CHECK(strstr(line, "\tbucketize_int_0\n") != NULL);
    while (fgets(line, sizeof line, f))
        lines++;
    fclose(f);
    CHECK(lines == 2500);
    /* binary shard of the same rows */
    snprintf(args, sizeof args,
             "prep --device cpu --plan plans/plan0.plan --input %s --output %s --format bin --batch 1000",
             in, bin);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    rap_shard_reader *r;
    REQUIRE_OK(rap_shard_open(bin, &r));
    CHECK(rap_shard_rows(r) == 2500 && rap_shard_batches(r) == 3 && rap_shard_n_cols(r) == 40);
    rap_shard_close_reader(r);
    /* fail mode stops at the bad row, names it, writes no output file */
    remove(out);
    snprintf(args, sizeof args,
             "prep --device cpu --plan plans/plan0.plan --input %s --output %s --bad-rows fail", in, out);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 1);
    CHECK_MSG(strstr(err, "p_in.tsv:2501: expected") != NULL, "%s", err);
    CHECK(access(out, F_OK) != 0);
}

RAP_TEST(cli_bad_input_messages)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char err[65536];
    const char *d = rap_test_tmpdir();
    char plan[512], args[2048];
    CHECK(rap_test_run_rap("prep --input /nonexistent/day_0.gz --device cpu", err, sizeof err) == 1);
    CHECK(strstr(err, "/nonexistent/day_0.gz") != NULL);
    snprintf(plan, sizeof plan, "%s/bad.plan", d);
    write_text(plan, "# ok\ndf[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"], 0)\n");
    snprintf(args, sizeof args, "prep --device cpu --plan %s", plan);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 1);
    CHECK_MSG(strstr(err, "bad.plan:2:") != NULL && strstr(err, "sigrid_hash") != NULL, "%s", err);
    CHECK(rap_test_run_rap("prep --batch 0", err, sizeof err) == 2);
    CHECK(strstr(err, "--batch must be in") != NULL);
    CHECK(rap_test_run_rap("prep --bath 10", err, sizeof err) == 2);
    CHECK(strstr(err, "did you mean --batch") != NULL);
    CHECK(rap_test_run_rap("prep --device tpu", err, sizeof err) == 2);
    CHECK(strstr(err, "auto|cpu|gpu") != NULL);
    CHECK(rap_test_run_rap("frobnicate", err, sizeof err) == 2);
    CHECK(rap_test_run_rap("prep --help", err, sizeof err) == 0);
    CHECK(strstr(err, "--bad-rows skip|fail") != NULL);
}

RAP_TEST(cli_parse_knobs_checked_first)
{
    /* the GPU parse's environment knobs: a bad value refused before the
     * model is built or a row read, naming the variable; nothing written */
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char err[65536];
    char data[512], save[512], args[2048];
    rap_test_path(data, sizeof data, "knobs.tsv");
    rap_test_path(save, sizeof save, "knobs.safetensors");
    snprintf(args, sizeof args, "gen --rows 500 --out %s --quiet", data);
    REQUIRE(rap_test_run_rap(args, err, sizeof err) == 0);
    const char *bad[][2] = {{"RAP_PARSE_RELEASE", "halfway"},
                            {"RAP_PARSE_WINDOW_LINES", "0"},
                            {"RAP_PARSE_WINDOW", "sometime"},
                            {"RAP_PARSE_GPU_CHUNK_MB", "999"},
                            {"RAP_IDEAL_PARSE", "sometimes"},
                            {"RAP_PREP_ROWS", "twice"}};
    for (int i = 0; i < 6; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        snprintf(args, sizeof args, "train --data %s --steps 5 --batch 64 --parse gpu --save %s",
                 data, save);
        int rc = rap_test_run_rap(args, err, sizeof err);
        CHECK_MSG(rc == 1 && strstr(err, bad[i][0]) && !strstr(err, "model:") &&
                      access(save, F_OK) != 0,
                  "train with %s=%s: exit %d: %s", bad[i][0], bad[i][1], rc, err);
        rc = rap_test_run_rap("bench --steps 5 --batch 64 --modes sequential --device cpu", err,
                              sizeof err);
        CHECK_MSG(rc == 1 && strstr(err, bad[i][0]), "bench with %s=%s: exit %d: %s", bad[i][0],
                  bad[i][1], rc, err);
        unsetenv(bad[i][0]);
    }
}

/* Writing to a path that is not a regular file (here a link to /dev/null)
 * must write through it, never rename a temporary file over it. */
RAP_TEST(cli_output_to_special_file)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    static char err[65536];
    char link[512], args[2048];
    snprintf(link, sizeof link, "%s/devnull", rap_test_tmpdir());
    REQUIRE(symlink("/dev/null", link) == 0);
    snprintf(args, sizeof args, "gen --rows 100 --out %s", link);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    snprintf(args, sizeof args, "prep --device cpu --gen-rows 500 --output %s", link);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    snprintf(args, sizeof args, "prep --device cpu --gen-rows 500 --format bin --output %s", link);
    CHECK(rap_test_run_rap(args, err, sizeof err) == 0);
    struct stat st;
    REQUIRE(lstat(link, &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    REQUIRE(stat("/dev/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
}
