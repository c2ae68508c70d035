/* test_dist_train.c -- rap train on several ranks (docs/DIST.md,
 * docs/TRAINING.md "Several ranks"): the built rap binary under
 * `mpirun -np R` (CPU model, MPI collectives) and with `--gpus N --device
 * cpu` (ranks as threads), on small generated data and a small plan:
 *   - R = 2, 3, 4 (and threads) == R = 1 with the same global batch (SGD):
 *     every step's loss and the final weights, to float tolerance;
 *   - every row trained exactly once across the ranks (the final line's
 *     per-rank counts against rap_hybrid_rows), evaluation == R = 1;
 *   - sharded checkpoints: round trip, resume on another R (2 -> 3, 3 -> 1,
 *     plain -> 2) == uninterrupted; a missing or corrupt shard file named;
 *   - a rank that hangs or dies: the others stop (timeout message, non-zero
 *     exit) within a short --comm-timeout, no hang;
 *   - GPU: --gpus 1 (the NCCL path with one rank) == the plain GPU path;
 *     with two GPUs, --gpus 2 and mpirun -np 2 == one GPU over 100 steps.
 * Every command runs under `timeout`, so a hang fails the test instead of
 * stopping the suite. */
#include "test.h"

#include "core/core.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "plan/parse_model.h"
#include "core/file.h"
#include "run/checkpoint.h"
#include "run/runtime.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROWS 3000   /* generated rows: 46 batches of 64 and one of 56 */
#define B 64
#define STEPS 20

static char g_data[512], g_plan[512];

/* The small plan and its generated rows, once. */
static bool setup(rap_test_ctx *t)
{
    if (g_data[0])
        return true;
    if (rap_test_dist_inputs(t, 5, "dist_small", g_plan, g_data, sizeof g_data))
        return true;
    g_data[0] = 0;
    return false;
}



/* `rap train` of the small model on R ranks: R 0 = the plain path (no
 * comm), R > 0 under mpirun -np R, R < 0 as -R threads (--gpus -R). */
static int train_env(int R, const char *env, const char *extra, char *out, size_t n)
{
    char cmd[4096], launcher[512] = "";
    if (R > 0)
        snprintf(launcher, sizeof launcher,
                 "mpirun --allow-run-as-root --oversubscribe -np %d %s%s ", R, env ? "-x " : "",
                 env ? env : "");
    else if (env)
        snprintf(launcher, sizeof launcher, "env %s ", env);
    snprintf(cmd, sizeof cmd,
             "%s%s train --device cpu --plan %s --data %s --batch %d --optimizer sgd --lr 0.05 "
             "--emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 --threads 1 --log-every 1 --quiet %s%s",
             launcher, rap_test_bin(), g_plan, g_data, B, R < 0 ? "--gpus " : "", "");
    size_t l = strlen(cmd);
    if (R < 0)
        snprintf(cmd + l, sizeof cmd - l, "%d ", -R);
    l = strlen(cmd);
    snprintf(cmd + l, sizeof cmd - l, " %s", extra);
    return rap_test_sh(cmd, out, n);
}

static int train(int R, const char *extra, char *out, size_t n)
{
    return train_env(R, NULL, extra, out, n);
}


/* The value of "key": in the last line of a metrics file (a number). */
static bool final_value(const char *path, const char *key, double *v)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f))
        snprintf(last, sizeof last, "%s", line);
    fclose(f);
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(last, k);
    if (!p)
        return false;
    *v = atof(p + strlen(k));
    return true;
}

/* The "rank_samples":[..] list of the final line. */
static int final_ranks(const char *path, int64_t *v, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f))
        snprintf(last, sizeof last, "%s", line);
    fclose(f);
    const char *p = strstr(last, "\"rank_samples\":[");
    if (!p)
        return -1;
    p += 16;
    int n = 0;
    while (*p && *p != ']' && n < max) {
        char *e;
        v[n++] = strtoll(p, &e, 10);
        p = *e == ',' ? e + 1 : e;
    }
    return n;
}

static bool close_to(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }


#define OUT 65536

RAP_TEST(dist_train_matches_one_rank)
{
    if (!setup(t))
        return;
    const char *why = rap_test_no_mpi();
    char *out = malloc(OUT);
    REQUIRE(out);
    char ref[512], refm[512], args[2048];
    rap_test_path(ref, sizeof ref, "dist_ref.st");
    rap_test_path(refm, sizeof refm, "dist_ref.jsonl");
    snprintf(args, sizeof args, "--steps %d --eval-fraction 0 --save %s --metrics %s", STEPS, ref,
             refm);
    int rc = train(0, args, out, OUT);
    CHECK_MSG(rc == 0, "R=1: %s", out);
    double l1[STEPS + 4];
    REQUIRE(rap_test_read_losses(refm, l1, STEPS + 4) == STEPS);
    /* the search placement's per-rank manifests with moves (small assumed
     * capacities, an almost free link: each rank computes every column over
     * its own rows and the sparse ones cross to their tables' holders) */
    char sched[512], moves_arg[700];
    rap_test_path(sched, sizeof sched, "dist_moves");
    snprintf(args, sizeof args, "%s plan --plan %s --gpus 2 --batch %d --placement search "
             "--capacity-fraction 0.1 --link-latency-us 0 --link-gbps 1e4 --emb-dim 8 --out %s "
             "--quiet",
             rap_test_bin(), g_plan, B / 2, sched);
    rc = rap_test_sh(args, out, OUT);
    CHECK_MSG(rc == 0, "rap plan: %s", out);
    snprintf(moves_arg, sizeof moves_arg, "--schedule %s", sched);
    /* mpirun -np 2, 3, 4 (placement owner: each rank its columns), 2 in cpu
     * mode, 3 with placement batch (row shares, ids exchanged); then 2 ranks
     * as threads; 2 ranks (threads, mpirun) with the moves */
    const int runs[] = {2, 3, 4, 2, 3, -2, -2, 2};
    const char *const mode[] = {"", "", "", "--mode cpu --cpu-workers 2", "--placement batch", "",
                                moves_arg, moves_arg};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        int R = runs[k];
        if (R > 0 && why)
            continue;
        char ck[512], m[512];
        snprintf(args, sizeof args, "dist_r%d_%zu.st", R, k);
        rap_test_path(ck, sizeof ck, args);
        snprintf(args, sizeof args, "dist_r%d_%zu.jsonl", R, k);
        rap_test_path(m, sizeof m, args);
        snprintf(args, sizeof args, "--steps %d --eval-fraction 0 --save %s --metrics %s %s",
                 STEPS, ck, m, mode[k]);
        rc = train(R, args, out, OUT);
        CHECK_MSG(rc == 0, "R=%d: exit %d: %s", R, rc, out);
        if (rc != 0)
            continue;
        double lr[STEPS + 4];
        int n = rap_test_read_losses(m, lr, STEPS + 4);
        CHECK_MSG(n == STEPS, "R=%d: %d step lines", R, n);
        for (int s = 0; s < n && s < STEPS; s++)
            CHECK_MSG(close_to(lr[s], l1[s], 1e-5), "R=%d step %d: loss %.9g, one rank %.9g", R,
                      s + 1, lr[s], l1[s]);
        double worst, moved = 0;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(ck, ref, true, 1e-4, &worst, msg, sizeof msg),
                  "R=%d: %s", R, msg);
        if (mode[k] == moves_arg) /* the moves ran: preprocessed units crossed */
            CHECK_MSG(final_value(m, "bytes_moved", &moved) && moved > 0,
                      "R=%d with moves: bytes_moved %g", R, moved);
        printf("    R=%d (%s%s%s): losses within 1e-5 of one rank's, weights within %.2g%s\n",
               R < 0 ? -R : R, R < 0 ? "threads" : "mpirun", mode[k][0] ? " " : "",
               mode[k] == moves_arg ? "search with moves" : mode[k], worst,
               moved > 0 ? ", preprocessed units moved" : "");
        /* R > 1: a sharded checkpoint (manifest + one file per rank) */
        char shard[600];
        snprintf(shard, sizeof shard, "%s.rank%d", ck, (R < 0 ? -R : R) - 1);
        CHECK_MSG(access(shard, R_OK) == 0, "R=%d: no %s", R, shard);
    }
    if (why)
        printf("    mpirun runs skipped: %s\n", why);
    free(out);
}

RAP_TEST(dist_train_rows_once)
{
    if (!setup(t))
        return;
    const char *why = rap_test_no_mpi();
    char *out = malloc(OUT);
    REQUIRE(out);
    /* one epoch, 10% held out and evaluated: every training row once */
    char m1[512], args[2048];
    rap_test_path(m1, sizeof m1, "dist_once_1.jsonl");
    snprintf(args, sizeof args, "--epochs 1 --eval-fraction 0.1 --metrics %s", m1);
    int rc = train(0, args, out, OUT);
    REQUIRE(rc == 0);
    double n1 = 0, auc1 = 0, ll1 = 0;
    REQUIRE(final_value(m1, "samples_trained", &n1));
    REQUIRE(final_value(m1, "auc", &auc1) && final_value(m1, "logloss", &ll1));
    CHECK(n1 > 0.8 * ROWS && n1 < ROWS);
    const int runs[] = {3, -4};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        int R = runs[k], nr = R < 0 ? -R : R;
        if (R > 0 && why)
            continue;
        char m[512];
        snprintf(args, sizeof args, "dist_once_%d.jsonl", R);
        rap_test_path(m, sizeof m, args);
        snprintf(args, sizeof args, "--epochs 1 --eval-fraction 0.1 --metrics %s", m);
        rc = train(R, args, out, OUT);
        CHECK_MSG(rc == 0, "R=%d: %s", R, out);
        if (rc != 0)
            continue;
        double n = 0, auc = 0, ll = 0;
        CHECK(final_value(m, "samples_trained", &n) && n == n1);
        int64_t per[8];
        int got = final_ranks(m, per, 8);
        CHECK_MSG(got == nr, "R=%d: rank_samples has %d entries", R, got);
        /* the global batches: B rows each, the last the rest; rank r's
         * share of each as rap_hybrid_rows says */
        int64_t want[8] = {0}, sum = 0;
        for (int64_t left = (int64_t)n1; left > 0; left -= B) {
            int64_t rows = left < B ? left : B;
            for (int r = 0; r < nr; r++) {
                int64_t r0, cnt;
                rap_hybrid_rows(rows, nr, r, &r0, &cnt);
                want[r] += cnt;
            }
        }
        for (int r = 0; r < got && r < nr; r++) {
            CHECK_MSG(per[r] == want[r], "R=%d rank %d trained %lld rows, its shares are %lld", R,
                      r, (long long)per[r], (long long)want[r]);
            sum += per[r];
        }
        CHECK_MSG(sum == (int64_t)n1, "R=%d: the ranks trained %lld rows, one rank %.0f", R,
                  (long long)sum, n1);
        CHECK(final_value(m, "auc", &auc) && close_to(auc, auc1, 1e-4));
        CHECK(final_value(m, "logloss", &ll) && close_to(ll, ll1, 1e-4));
        CHECK_MSG(strstr(out, "ERROR") == NULL, "%s", out);
    }
    free(out);
}

RAP_TEST(dist_checkpoint_resharding)
{
    if (!setup(t))
        return;
    const char *why = rap_test_no_mpi();
    if (why)
        SKIP(why);
    char *out = malloc(OUT);
    REQUIRE(out);
    /* Adagrad: the optimizer state is re-sharded too */
    const char *opt = "--optimizer adagrad --lr 0.02 --eval-fraction 0";
    char full[512], args[2048];
    rap_test_path(full, sizeof full, "dist_ck_full.st");
    snprintf(args, sizeof args, "%s --steps %d --save %s", opt, STEPS, full);
    REQUIRE(train(0, args, out, OUT) == 0);
    /* from R1 ranks for STEPS/2 steps, then R2 ranks to STEPS (0: plain) */
    const int pairs[][2] = {{2, 3}, {3, 0}, {0, 2}, {2, 2}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        int r1 = pairs[k][0], r2 = pairs[k][1];
        char half[512], end[512];
        snprintf(args, sizeof args, "dist_ck_%d_%d_half.st", r1, r2);
        rap_test_path(half, sizeof half, args);
        snprintf(args, sizeof args, "dist_ck_%d_%d_end.st", r1, r2);
        rap_test_path(end, sizeof end, args);
        snprintf(args, sizeof args, "%s --steps %d --save %s", opt, STEPS / 2, half);
        int rc = train(r1, args, out, OUT);
        CHECK_MSG(rc == 0, "%d ranks, first half: %s", r1, out);
        snprintf(args, sizeof args, "%s --steps %d --resume %s --save %s", opt, STEPS, half, end);
        rc = train(r2, args, out, OUT);
        CHECK_MSG(rc == 0, "%d -> %d ranks: %s", r1, r2, out);
        if (rc != 0)
            continue;
        double worst;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(end, full, true, 1e-4, &worst, msg, sizeof msg),
                  "%d -> %d ranks: %s",
                  r1, r2, msg);
        printf("    %d -> %d ranks: weights and Adagrad state within %.2g of the uninterrupted "
               "run\n", r1 ? r1 : 1, r2 ? r2 : 1, worst);
    }
    /* rap export of a sharded checkpoint: whole tables, no optimizer state */
    {
        char end[512], exp[600], cmd[2048];
        rap_test_path(end, sizeof end, "dist_ck_2_3_end.st");
        snprintf(exp, sizeof exp, "%s.export", end);
        snprintf(cmd, sizeof cmd, "%s export --checkpoint %s --out %s --quiet", rap_test_bin(),
                 end, exp);
        CHECK_MSG(rap_test_sh(cmd, out, OUT) == 0, "export: %s", out);
        rap_ckpt *x = NULL;
        CHECK_OK(rap_ckpt_open(exp, &x));
        if (x) {
            int k = rap_ckpt_find(x, "emb_l.2.weight");
            CHECK(k >= 0 && x->t[k].shape[0] == 1000);
            CHECK(rap_ckpt_find(x, "top_l.2.bias") >= 0);
            CHECK(rap_ckpt_find(x, "optimizer.emb_l.2.weight.sum") < 0);
            CHECK(x->n == 5 + 4 + 4 && !rap_ckpt_is_manifest(x));
            const char *ct = rap_meta_get(&x->meta, "contents");
            CHECK(ct && !strcmp(ct, "weights"));
            CHECK_OK(rap_ckpt_verify(x));
        }
        rap_ckpt_close(x);
    }
    /* damaged shard files are named */
    char half[512], bad[600];
    rap_test_path(half, sizeof half, "dist_ck_2_3_half.st");
    snprintf(bad, sizeof bad, "%s.rank1", half);
    char moved[620];
    snprintf(moved, sizeof moved, "%s.away", bad);
    REQUIRE(rename(bad, moved) == 0);
    snprintf(args, sizeof args, "%s --steps %d --resume %s", opt, STEPS, half);
    int rc = train(2, args, out, OUT);
    CHECK_MSG(rc != 0 && strstr(out, "rank1") && strstr(out, "cannot open"),
              "missing shard: exit %d: %s", rc, out);
    REQUIRE(rename(moved, bad) == 0);
    FILE *f = fopen(bad, "r+b");
    REQUIRE(f);
    fseek(f, -5, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(ch ^ 0x5a, f);
    fclose(f);
    rc = train(3, args, out, OUT);
    CHECK_MSG(rc != 0 && strstr(out, "rank1") && strstr(out, "CRC"), "corrupt shard: exit %d: %s",
              rc, out);
    free(out);
}

/* 16-bit tables with row-wise Adagrad on thread ranks: 2 ranks for half
 * the steps, resumed on 3 (the tables and their one-value-a-row state
 * re-sharded, the update counter carried) == the uninterrupted plain run,
 * within a bf16 rounding step (the ranks' summed MLP gradients differ in
 * the last float bits, and one such bit can tip a stochastic rounding). */
RAP_TEST(dist_checkpoint_resharding_bf16_rowwise)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    const char *opt = "--optimizer rowwise-adagrad --emb-dtype bf16 --lr 0.02 --eval-fraction 0";
    char full[512], half[512], end[512], args[2048];
    rap_test_path(full, sizeof full, "dist_ck16_full.st");
    rap_test_path(half, sizeof half, "dist_ck16_half.st");
    rap_test_path(end, sizeof end, "dist_ck16_end.st");
    snprintf(args, sizeof args, "%s --steps %d --save %s", opt, STEPS, full);
    REQUIRE(train(0, args, out, OUT) == 0);
    snprintf(args, sizeof args, "%s --steps %d --save %s", opt, STEPS / 2, half);
    CHECK_MSG(train(-2, args, out, OUT) == 0, "2 thread ranks, first half: %s", out);
    snprintf(args, sizeof args, "%s --steps %d --resume %s --save %s", opt, STEPS, half, end);
    int rc = train(-3, args, out, OUT);
    CHECK_MSG(rc == 0, "2 -> 3 thread ranks: %s", out);
    if (rc == 0) {
        double worst;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(end, full, true, 1e-2, &worst, msg, sizeof msg),
                  "2 -> 3 ranks: %s", msg);
        printf("    bf16, row-wise Adagrad, 2 -> 3 thread ranks: weights and state within %.2g "
               "of the uninterrupted run\n", worst);
        rap_ckpt *x = NULL;
        CHECK_OK(rap_ckpt_open(end, &x));
        if (x) {
            const char *es = rap_meta_get(&x->meta, "emb_step");
            CHECK(rap_ckpt_is_manifest(x) && !es); /* the counter is in the shard files */
        }
        rap_ckpt_close(x);
        char r0[600];
        snprintf(r0, sizeof r0, "%s.rank0", end);
        CHECK_OK(rap_ckpt_open(r0, &x));
        if (x) {
            const char *es = rap_meta_get(&x->meta, "emb_step");
            CHECK_MSG(es && atoi(es) == STEPS, "emb_step %s", es ? es : "(none)");
            int k = rap_ckpt_find(x, "emb_l.0.weight");
            CHECK(k < 0 || x->t[k].dtype == RAP_ST_BF16);
        }
        rap_ckpt_close(x);
    }
    free(out);
}

RAP_TEST(dist_rank_dies_others_stop)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    const char *why = rap_test_no_mpi();
    /* threads: rank 1 leaves after step 3; the others time out */
    double t0 = rap_now();
    int rc = train_env(-3, "RAP_TEST_RANK_HANG=1:3", "--steps 50 --eval-fraction 0 "
                       "--comm-timeout 2", out, OUT);
    double dt = rap_now() - t0;
    CHECK_MSG(rc != 0 && rc != 124, "threads, a rank stops: exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "did not complete within 2") != NULL, "threads: %s", out);
    CHECK_MSG(dt < 30, "threads: %.1f s", dt);
    printf("    threads, a rank stops: the others stopped after %.1f s\n", dt);
    /* threads: a rank that fails breaks the comm: the others stop at once,
     * whatever --comm-timeout */
    t0 = rap_now();
    rc = train_env(-3, "RAP_TEST_RANK_EXIT=2:2", "--steps 50 --eval-fraction 0 --comm-timeout 60",
                   out, OUT);
    dt = rap_now() - t0;
    CHECK_MSG(rc != 0 && rc != 124, "threads, a rank fails: exit %d: %s", rc, out);
    CHECK_MSG(dt < 20, "threads, a rank fails: %.1f s with --comm-timeout 60: %s", dt, out);
    printf("    threads, a rank fails: the others stopped after %.1f s (--comm-timeout 60)\n", dt);
    if (why) {
        free(out);
        SKIP(why);
    }
    /* mpirun: rank 1 hangs after step 3: the others time out, say so, and
     * MPI_Abort ends the job */
    t0 = rap_now();
    rc = train_env(3, "RAP_TEST_RANK_HANG=1:3", "--steps 50 --eval-fraction 0 --comm-timeout 2",
                   out, OUT);
    dt = rap_now() - t0;
    CHECK_MSG(rc != 0 && rc != 124, "mpirun, a rank hangs: exit %d", rc);
    CHECK_MSG(strstr(out, "did not complete within 2") != NULL &&
                  strstr(out, "a rank died or hangs") != NULL, "mpirun, hang: %s", out);
    CHECK_MSG(dt < 30, "mpirun, hang: %.1f s", dt);
    printf("    a rank hangs: the others stopped after %.1f s (--comm-timeout 2)\n", dt);
    /* rank 1 dies after step 3 */
    t0 = rap_now();
    rc = train_env(3, "RAP_TEST_RANK_EXIT=1:3", "--steps 50 --eval-fraction 0 --comm-timeout 2",
                   out, OUT);
    dt = rap_now() - t0;
    CHECK_MSG(rc != 0 && rc != 124, "mpirun, a rank dies: exit %d: %s", rc, out);
    CHECK_MSG(dt < 30, "mpirun, a rank dies: %.1f s", dt);
    printf("    a rank dies: the job ended after %.1f s, exit %d\n", dt, rc);
    free(out);
}

/* The hybrid path with one rank (--gpus 1, on the CPU: a threads comm of
 * one) trains and evaluates exactly what the plain path does. */
RAP_TEST(dist_gpus1_cpu_matches_plain)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    char a[512], b[512], ma[512], mb[512], args[2048];
    rap_test_path(a, sizeof a, "dist_plain.st");
    rap_test_path(b, sizeof b, "dist_gpus1.st");
    rap_test_path(ma, sizeof ma, "dist_plain.jsonl");
    rap_test_path(mb, sizeof mb, "dist_gpus1.jsonl");
    snprintf(args, sizeof args, "--epochs 1 --eval-fraction 0.1 --save %s --metrics %s", a, ma);
    REQUIRE(train(0, args, out, OUT) == 0);
    snprintf(args, sizeof args, "--epochs 1 --eval-fraction 0.1 --save %s --metrics %s", b, mb);
    int rc = train(-1, args, out, OUT);
    CHECK_MSG(rc == 0, "--gpus 1: %s", out);
    CHECK_MSG(rap_test_same_checkpoints(a, b, NULL), "--gpus 1 trained other weights");
    double x = 0, y = 1, lx = 0, ly = 1;
    CHECK(final_value(ma, "auc", &x) && final_value(mb, "auc", &y) && x == y);
    CHECK(final_value(ma, "logloss", &lx) && final_value(mb, "logloss", &ly) && lx == ly);
    free(out);
}

RAP_TEST(dist_gpus1_matches_plain_gpu)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    rap_test_env env;
    rap_test_tune_off(&env);
    char a[512], b[512], cmd[4096];
    rap_test_path(a, sizeof a, "dist_gpu_plain.st");
    /* plain sequential, then --gpus 1 in sequential and rap mode */
    static const char *const modes[] = {"sequential", "sequential", "rap"};
    for (int k = 0; k < 3; k++) {
        snprintf(b, sizeof b, "%s/dist_gpu_gpus1_%s.st", rap_test_tmpdir(), modes[k]);
        snprintf(cmd, sizeof cmd,
                 "%s train --device gpu --plan %s --data %s --batch %d --optimizer sgd --lr 0.05 "
                 "--steps %d --eval-fraction 0 --mode %s --quiet --save %s%s",
                 rap_test_bin(), g_plan, g_data, B, STEPS, modes[k], k ? b : a,
                 k ? " --gpus 1" : "");
        int rc = rap_test_sh(cmd, out, OUT);
        CHECK_MSG(rc == 0, "%s: %s", k ? "--gpus 1" : "plain", out);
        if (k == 0 || rc != 0)
            continue;
        double worst;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(b, a, true, 1e-5, &worst, msg, sizeof msg),
                  "%s: %s", modes[k], msg);
        printf("    --gpus 1 (%s) vs plain GPU: largest difference %.3g (%s)\n", modes[k], worst,
               rap_test_same_checkpoints(a, b, NULL) ? "bit for bit" : "not bit for bit");
    }
    rap_test_tune_restore(&env);
    free(out);
}

/* Two GPUs (issue #7's correctness run): the plain one-GPU path against
 * --gpus 2 (sequential and rap mode; placement owner, batch (ids exchanged
 * between the GPUs), and owner with the planner's per-rank schedules) and
 * mpirun -np 2, same global batch,
 * 100 steps (the data's 47 batches repeat): every step's loss and the final
 * weights to float tolerance. The ranks sum their gradients with NCCL in
 * another order than one GPU's reduction: not bit for bit, and the rounding
 * differences grow with the steps. With the default TF32 GEMMs they reach
 * 3.7e-4 (losses) and 1.3e-3 (weights, relative) by step 100 (H200,
 * 83f4f2c), the size of TF32's rounding itself; the runs here use plain
 * fp32 GEMMs (--precision fp32-strict) so that the check is one of float
 * rounding: 1e-4 relative on the losses, 1e-3 on the weights (the CPU
 * tests: 1e-5 over 20 steps). A wrong gradient or a row trained twice moves
 * them by far more. */
RAP_TEST(dist_gpus2_matches_one_gpu)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
    int have = 0;
    if (rap_rt_device_count(&have) != RAP_OK || have < 2)
        SKIP("needs two GPUs; this machine has %d", have);
    if (!setup(t))
        return;
    enum { N = 100 };
    char *out = malloc(OUT);
    REQUIRE(out);
    rap_test_env env;
    rap_test_tune_off(&env);
    const char *why = rap_test_no_mpi();
    /* the placement planner's per-rank schedules (owner) for run 5 */
    char sched[512], cmd[4096];
    rap_test_path(sched, sizeof sched, "dist_g2_owner");
    snprintf(cmd, sizeof cmd, "%s plan --plan %s --gpus 2 --batch %d --placement owner --out %s "
             "--quiet", rap_test_bin(), g_plan, B / 2, sched);
    int prc = rap_test_sh(cmd, out, OUT);
    CHECK_MSG(prc == 0, "rap plan --gpus 2: %s", out);
    /* ... and the search's, with moves (as dist_train_matches_one_rank), for run 7 */
    char msched[512];
    rap_test_path(msched, sizeof msched, "dist_g2_moves");
    snprintf(cmd, sizeof cmd, "%s plan --plan %s --gpus 2 --batch %d --placement search "
             "--capacity-fraction 0.1 --link-latency-us 0 --link-gbps 1e4 --emb-dim 8 --out %s "
             "--quiet",
             rap_test_bin(), g_plan, B / 2, msched);
    int mrc = rap_test_sh(cmd, out, OUT);
    CHECK_MSG(mrc == 0, "rap plan --gpus 2 --placement search: %s", out);
    enum { K = 8 };
    static const char *const name[K] = {
        "one GPU", "--gpus 2 sequential", "--gpus 2 rap", "--gpus 2 rap, placement batch",
        "--gpus 2 sequential, placement batch", "--gpus 2 rap, planned per-rank schedules",
        "mpirun -np 2 rap", "--gpus 2 rap, per-rank schedules with moves"};
    static const char *const pre[K] = {"", "", "", "", "", "", "mpirun --allow-run-as-root -np 2 ",
                                       ""};
    const char *post[K] = {"--mode sequential", "--gpus 2 --mode sequential",
                           "--gpus 2 --mode rap", "--gpus 2 --mode rap --placement batch",
                           "--gpus 2 --mode sequential --placement batch", NULL, "--mode rap",
                           NULL};
    char per_rank[700], with_moves[700];
    snprintf(per_rank, sizeof per_rank, "--gpus 2 --mode rap --schedule %s", sched);
    snprintf(with_moves, sizeof with_moves, "--gpus 2 --mode rap --schedule %s", msched);
    post[5] = per_rank;
    post[7] = with_moves;
    char ck[K][512], m[K][512];
    double ref[N + 4];
    for (int k = 0; k < K; k++) {
        if ((k == 5 && prc != 0) || (k == 7 && mrc != 0))
            continue;
        if (k == 6 && why) {
            printf("    mpirun run skipped: %s\n", why);
            continue;
        }
        snprintf(cmd, sizeof cmd, "dist_g2_%d.st", k);
        rap_test_path(ck[k], sizeof ck[k], cmd);
        snprintf(cmd, sizeof cmd, "dist_g2_%d.jsonl", k);
        rap_test_path(m[k], sizeof m[k], cmd);
        snprintf(cmd, sizeof cmd,
                 "%s%s train --device gpu --plan %s --data %s --batch %d --optimizer sgd "
                 "--lr 0.05 --steps %d --eval-fraction 0 --log-every 1 --precision fp32-strict "
                 "--quiet --save %s --metrics %s %s",
                 pre[k], rap_test_bin(), g_plan, g_data, B, N, ck[k], m[k], post[k]);
        int rc = rap_test_sh(cmd, out, OUT);
        CHECK_MSG(rc == 0, "%s: exit %d: %s", name[k], rc, out);
        if (rc != 0) {
            if (k == 0)
                break;
            continue;
        }
        double l[N + 4];
        int n = rap_test_read_losses(m[k], k ? l : ref, N + 4);
        CHECK_MSG(n == N, "%s: %d step lines, expected %d", name[k], n, N);
        if (k == 0 || n != N)
            continue;
        double wl = 0;
        for (int s = 0; s < N; s++) {
            double d = fabs(l[s] - ref[s]) / (1 + fabs(ref[s]));
            wl = d > wl ? d : wl;
            CHECK_MSG(close_to(l[s], ref[s], 1e-4), "%s step %d: loss %.9g, one GPU %.9g",
                      name[k], s + 1, l[s], ref[s]);
        }
        double worst;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(ck[k], ck[0], true, 1e-3, &worst, msg, sizeof msg),
                  "%s: %s", name[k], msg);
        printf("    %s vs one GPU, %d steps: losses within %.2g, weights within %.2g\n",
               name[k], N, wl, worst);
        if (k == 3 || k == 4 || k == 7) { /* ids (or preprocessed units) crossed */
            double moved = 0;
            CHECK_MSG(final_value(m[k], "bytes_moved", &moved) && moved > 0,
                      "%s: bytes_moved %g in the final line", name[k], moved);
            printf("    %s: %.0f bytes of ids moved\n", name[k], moved);
        }
    }
    rap_test_tune_restore(&env);
    free(out);
}

/* Whether a run's final metrics line says the ranks shared the parse: how
 * many ranks, and the lines this rank parsed itself. */
static bool shared_parse(const char *metrics, double *ranks, double *here)
{
    return final_value(metrics, "parse_share_ranks", ranks) &&
           final_value(metrics, "parse_lines_here", here);
}

/* --parse gpu on 2 thread ranks with row shares (--placement batch: each
 * rank preprocesses its rows of the global batch): on the CPU the kernels'
 * reference parses in their place, and every rank trains exactly what
 * --parse cpu trains, bit for bit (on a GPU: the kernels, the rows copied
 * into the share on the device). The ranks share the parse (each parses
 * its piece of every chunk, data/parse_share.h): with one parser thread,
 * with three, and with RAP_PARSE_SHARE=0 (every line on each rank) the
 * same weights; the final line says how many lines this rank parsed. */
static void dist_parse_case(rap_test_ctx *t, const char *dev)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    char ck[4][512], m[4][512], args[2048];
    static const char *env[4] = {NULL, NULL, NULL, "RAP_PARSE_SHARE=0"};
    static const char *extra[4] = {"", "", " --threads 4", ""};
    for (int k = 0; k < 4; k++) {
        snprintf(ck[k], sizeof ck[k], "%s/dist_parse_%d_%s.st", rap_test_tmpdir(), k, dev);
        snprintf(m[k], sizeof m[k], "%s/dist_parse_%d_%s.jsonl", rap_test_tmpdir(), k, dev);
        remove(m[k]);
        snprintf(args, sizeof args, "--steps %d --eval-fraction 0.1 --placement batch --parse %s "
                 "--save %s --metrics %s%s%s", STEPS, k ? "gpu" : "cpu", ck[k], m[k],
                 strcmp(dev, "gpu") ? "" : " --device gpu", extra[k]);
        int rc = train_env(-2, env[k], args, out, OUT);
        CHECK_MSG(rc == 0, "2 thread ranks, --parse %s%s%s: %s", k ? "gpu" : "cpu", extra[k],
                  env[k] ? env[k] : "", out);
        if (rc != 0) {
            free(out);
            return;
        }
    }
    /* sharded checkpoints: each gathered (with its state), then exactly equal */
    char ga[600];
    snprintf(ga, sizeof ga, "%s.whole", ck[0]);
    CHECK_OK(rap_ckpt_gather(ck[0], ga, true));
    for (int k = 1; k < 4; k++) {
        double worst = 1;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(ck[k], ga, true, 0, &worst, msg, sizeof msg) &&
                      worst == 0,
                  "--parse gpu%s%s trained other weights: %s", extra[k], env[k] ? env[k] : "",
                  msg);
        double ranks = 0, here = 0;
        bool shared = shared_parse(m[k], &ranks, &here);
        if (k == 3) {
            CHECK_MSG(!shared, "RAP_PARSE_SHARE=0 still shared the parse");
            continue;
        }
        /* rank 0's first piece of each chunk: about half of the lines read */
        CHECK_MSG(shared && ranks == 2 && here > 0.3 * ROWS && here < 0.7 * ROWS,
                  "--parse gpu%s: the ranks did not share the parse (%g ranks, %g lines of "
                  "%d parsed here)", extra[k], ranks, here, ROWS);
        printf("    --parse gpu%s: rank 0 parsed %.0f lines itself\n", extra[k], here);
    }
    free(out);
}

RAP_TEST(dist_parse_gpu_row_shares_cpu) { dist_parse_case(t, "cpu"); }

/* The shared parse over several lanes: a directory of three files read by
 * two lanes (--inflate-threads 2, file order), 2 thread ranks: the chunks
 * reach the parser threads in the consumer's order (file by file) on every
 * rank, so the ranks share the parse and train exactly --parse cpu's
 * weights; with --interleave batch (turns that depend on each chunk's good
 * rows) every rank parses every line, the same weights too. */
RAP_TEST(dist_parse_share_lanes_cpu)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT), *text = NULL;
    REQUIRE(out);
    char dir[512], path[600], ck[4][512], m[4][512], args[2048];
    snprintf(dir, sizeof dir, "%s/dist_share_dir", rap_test_tmpdir());
    snprintf(args, sizeof args, "rm -rf %s && mkdir -p %s", dir, dir);
    rap_test_sh(args, out, OUT);
    size_t n = 0;
    REQUIRE_OK(rap_file_read(g_data, (size_t)1 << 26, "rows", &text, &n));
    /* 1000 lines a file: day_0 .. day_2 */
    size_t at = 0;
    for (int f = 0; f < 3; f++) {
        size_t e = at;
        for (int l = 0; l < ROWS / 3 && e < n; l++) {
            const char *nl = memchr(text + e, '\n', n - e);
            e = nl ? (size_t)(nl - text) + 1 : n;
        }
        if (f == 2)
            e = n;
        snprintf(path, sizeof path, "%s/day_%d.tsv", dir, f);
        FILE *fp = fopen(path, "wb");
        REQUIRE(fp);
        CHECK(fwrite(text + at, 1, e - at, fp) == e - at);
        fclose(fp);
        at = e;
    }
    free(text);
    static const char *how[4] = {"--parse cpu", "--parse gpu", "--parse gpu --interleave batch",
                                 "--parse cpu --interleave batch"};
    for (int k = 0; k < 4; k++) {
        snprintf(ck[k], sizeof ck[k], "%s/dist_share_lanes_%d.st", rap_test_tmpdir(), k);
        snprintf(m[k], sizeof m[k], "%s/dist_share_lanes_%d.jsonl", rap_test_tmpdir(), k);
        remove(m[k]);
        snprintf(args, sizeof args, "--steps %d --eval-fraction 0 --placement batch %s "
                 "--inflate-threads 2 --threads 4 --data %s --save %s --metrics %s", STEPS,
                 how[k], dir, ck[k], m[k]);
        int rc = train(-2, args, out, OUT);
        CHECK_MSG(rc == 0, "2 thread ranks, %s: %s", how[k], out);
        if (rc != 0) {
            free(out);
            return;
        }
    }
    char ga[2][600];
    for (int k = 0; k < 2; k++) { /* the host parser's, in file order and by batch */
        snprintf(ga[k], sizeof ga[k], "%s.whole", ck[k ? 3 : 0]);
        CHECK_OK(rap_ckpt_gather(ck[k ? 3 : 0], ga[k], true));
    }
    for (int k = 1; k < 3; k++) {
        double worst = 1, ranks = 0, here = 0;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(ck[k], ga[k - 1], true, 0, &worst, msg, sizeof msg) &&
                      worst == 0,
                  "%s trained other weights: %s", how[k], msg);
        bool shared = shared_parse(m[k], &ranks, &here);
        if (k == 2) {
            CHECK_MSG(!shared, "--interleave batch shared the parse");
            continue;
        }
        CHECK_MSG(shared && ranks == 2 && here > 0.3 * ROWS && here < 0.7 * ROWS,
                  "%s over two lanes: not shared (%g ranks, %g lines of %d parsed here)",
                  how[k], ranks, here, ROWS);
        printf("    three files, two lanes: rank 0 parsed %.0f of %d lines itself\n", here,
               ROWS);
    }
    free(out);
}

/* rap plan --gpus 2 --parse gpu: each rank's manifest carries the parse
 * budgets of the whole global batch's lines, and 2 thread ranks training
 * through them run the gated parse (the kernels' reference on the CPU):
 * every line of the input counted once, inside the windows or outside, and
 * exactly the weights of --parse cpu with the same manifests. With this
 * input (3,000 lines, one chunk) and a budget of 128 lines a step every
 * line is parsed while the first step waits for rows, outside; that the
 * windows release the budgets is rt_parse's own test on one rank
 * (train_parse_gpu_gated_*). */
RAP_TEST(dist_parse_planned_cpu)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    char model[512], sched[512], args[2048], a[512], b[512], m[512];
    rap_parse_point pt[8];
    for (int k = 0; k < 8; k++) { /* 0.002 ms + 1 ns a line + 4 ps a byte */
        int64_t l = (int64_t)1024 << k;
        pt[k] = (rap_parse_point){l, 250 * l, 0.002 + 1e-6 * (double)l + 4e-9 * 250.0 * (double)l};
    }
    rap_parse_model pm;
    REQUIRE_OK(rap_parse_model_fit(pt, 8, "assumed", 250, &pm));
    rap_test_path(model, sizeof model, "dist_parse.parse");
    REQUIRE_OK(rap_parse_model_save(&pm, model));
    rap_test_path(sched, sizeof sched, "dist_parse_planned");
    snprintf(args, sizeof args, "%s plan --plan %s --gpus 2 --batch %d --emb-dim 8 "
             "--capacity-fraction 0.5 --parse gpu --parse-model %s --out %s --quiet",
             rap_test_bin(), g_plan, B / 2, model, sched);
    int rc = rap_test_sh(args, out, OUT);
    CHECK_MSG(rc == 0, "rap plan: %s", out);
    snprintf(a, sizeof a, "%s/dist_planned_cpu.st", rap_test_tmpdir());
    snprintf(b, sizeof b, "%s/dist_planned_gpu.st", rap_test_tmpdir());
    rap_test_path(m, sizeof m, "dist_planned_gpu.jsonl");
    for (int k = 0; k < 2 && rc == 0; k++) {
        snprintf(args, sizeof args, "--steps %d --eval-fraction 0.1 --parse %s --schedule %s "
                 "--save %s --metrics %s", STEPS, k ? "gpu" : "cpu", sched, k ? b : a, m);
        rc = train(-2, args, out, OUT);
        CHECK_MSG(rc == 0, "2 thread ranks, --parse %s: %s", k ? "gpu" : "cpu", out);
    }
    if (rc == 0) {
        double in = -1, outside = -1, here = -1;
        /* the ranks share the parse: this rank's gate saw the lines it parsed */
        CHECK_MSG(final_value(m, "parse_lines_in", &in) &&
                      final_value(m, "parse_lines_out", &outside) &&
                      final_value(m, "parse_lines_here", &here) && in + outside == here &&
                      here > 0.3 * ROWS && here < 0.7 * ROWS,
                  "the planned parse: gated? %g lines inside the windows, %g outside, of %g "
                  "parsed on this rank (of %d)", in, outside, here, ROWS);
        printf("    --parse gpu (the reference) gated by the planned budgets: %.0f lines inside "
               "the windows, %.0f outside\n", in, outside);
        double worst = 1;
        char msg[512] = "", ga[600], gb[600];
        snprintf(ga, sizeof ga, "%s.whole", a);
        snprintf(gb, sizeof gb, "%s.whole", b);
        CHECK_OK(rap_ckpt_gather(a, ga, true));
        CHECK_OK(rap_ckpt_gather(b, gb, true));
        CHECK_MSG(rap_test_close_weights(gb, ga, true, 0, &worst, msg, sizeof msg) && worst == 0,
                  "--parse gpu through the planned budgets trained other weights: %s", msg);
    }
    free(out);
}

RAP_TEST(dist_parse_gpu_row_shares_gpu)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
    int have = 0;
    if (rap_rt_device_count(&have) != RAP_OK || have < 2)
        SKIP("needs two GPUs (2 thread ranks, a GPU each); this machine has %d", have);
    rap_test_env env;
    rap_test_tune_off(&env);
    dist_parse_case(t, "gpu");
    rap_test_tune_restore(&env);
}
