/* test_dist_batch.c -- placement batch on CPU ranks (docs/TRAINING.md
 * "Several ranks", docs/DIST.md "Data"): each rank preprocesses every
 * column over its own row share of the global batch, then the ids of each
 * table go to the table's holders through an all-to-all of int64.
 *   - rap_comm_alltoallv_type: int64 (values past 2^53, so they cannot pass
 *     through floats), double and float blocks, on the self and threads
 *     backends (R = 1..4) and under mpirun -np 2 and 3;
 *   - rap train --placement batch on 2 and 3 ranks (mpirun, threads; cpu
 *     mode too) == one rank with the same global batch: every step's loss
 *     and the final weights; every row trained once; the bytes moved equal
 *     what the shard map and the shares say (computed here), and the ranks'
 *     own sends add up to them; placement owner still moves nothing and
 *     still matches.
 * Commands run under `timeout`: a hang fails instead of stopping the suite. */
#include "test.h"

#include "core/core.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "run/checkpoint.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ typed all-to-all */

typedef struct {
    rap_comm *c;
    int bad;
    rap_status st;
    char err[512];
} xrank;

/* Rank me sends (me + 2 p) % 4 + 1 elements to p; element j of the block
 * from s to p is a value only (s, p, j) gives: int64 past 2^53, doubles
 * whose low bits matter, floats. Blocks land after a gap; the gaps and the
 * tail must stay untouched. */
static rap_status typed_ops(rap_comm *c, int *bad)
{
    int R = rap_comm_size(c), me = rap_comm_rank(c);
    int64_t sc[8], sd[8], rc[8], rd[8], ns = 0, nr = 0;
    for (int p = 0; p < R; p++) {
        sc[p] = (me + 2 * p) % 4 + 1;
        sd[p] = ns;
        ns += sc[p];
        rc[p] = (p + 2 * me) % 4 + 1;
        rd[p] = nr + 1; /* a gap of one */
        nr += rc[p] + 1;
    }
    int64_t si[64], ri[64];
    double sdd[64], rdd[64];
    float sf[64], rf[64];
    for (int p = 0; p < R; p++)
        for (int64_t j = 0; j < sc[p]; j++) {
            int64_t v = ((int64_t)1 << 60) + ((int64_t)me << 40) + ((int64_t)p << 20) + j * 3 + 1;
            si[sd[p] + j] = v;
            sdd[sd[p] + j] = 1.0 + (double)v * 1e-18 + 1e-15 * (double)(me * 7 + p * 3 + j);
            sf[sd[p] + j] = (float)(100 * me + 10 * p + j) + 0.125f;
        }
    for (int i = 0; i < 64; i++)
        ri[i] = -5, rdd[i] = -5, rf[i] = -5;
    RAP_TRY(rap_comm_alltoallv_type(c, si, sc, sd, ri, rc, rd, RAP_COMM_I64, "test i64"));
    RAP_TRY(rap_comm_alltoallv_type(c, sdd, sc, sd, rdd, rc, rd, RAP_COMM_F64, "test f64"));
    RAP_TRY(rap_comm_alltoallv_type(c, sf, sc, sd, rf, rc, rd, RAP_COMM_F32, "test f32"));
    for (int p = 0; p < R; p++) {
        *bad += ri[rd[p] - 1] != -5 || rdd[rd[p] - 1] != -5 || rf[rd[p] - 1] != -5;
        for (int64_t j = 0; j < rc[p]; j++) {
            int64_t v = ((int64_t)1 << 60) + ((int64_t)p << 40) + ((int64_t)me << 20) + j * 3 + 1;
            double d = 1.0 + (double)v * 1e-18 + 1e-15 * (double)(p * 7 + me * 3 + j);
            *bad += ri[rd[p] + j] != v;
            *bad += memcmp(&rdd[rd[p] + j], &d, sizeof d) != 0;
            *bad += rf[rd[p] + j] != (float)(100 * p + 10 * me + j) + 0.125f;
        }
    }
    *bad += ri[nr] != -5 || rdd[nr] != -5 || rf[nr] != -5;
    return RAP_OK;
}

static void *xrank_main(void *p)
{
    xrank *x = p;
    x->st = typed_ops(x->c, &x->bad);
    if (x->st != RAP_OK) {
        snprintf(x->err, sizeof x->err, "%s", rap_last_error());
        rap_comm_abort(x->c, 1);
    }
    return NULL;
}

RAP_TEST(dist_batch_alltoallv_type)
{
    rap_comm *self = NULL;
    REQUIRE_OK(rap_comm_self_create(&self));
    int bad = 0;
    CHECK_OK(typed_ops(self, &bad));
    CHECK_MSG(bad == 0, "self: %d wrong values", bad);
    rap_comm_free(self);
    for (int R = 1; R <= 4; R++) {
        rap_comm *c[4];
        xrank x[4];
        pthread_t th[4];
        REQUIRE_OK(rap_comm_threads_create(R, c));
        for (int r = 0; r < R; r++) {
            memset(&x[r], 0, sizeof x[r]);
            x[r].c = c[r];
            rap_comm_set_timeout(c[r], 10);
            pthread_create(&th[r], NULL, xrank_main, &x[r]);
        }
        for (int r = 0; r < R; r++)
            pthread_join(th[r], NULL);
        for (int r = 0; r < R; r++) {
            CHECK_MSG(x[r].st == RAP_OK, "R = %d rank %d: %s", R, r, x[r].err);
            CHECK_MSG(x[r].bad == 0, "R = %d rank %d: %d wrong values", R, r, x[r].bad);
            rap_comm_free(c[r]);
        }
    }
}

/* Run under mpirun by dist_batch_alltoallv_mpi (skipped otherwise). */
RAP_TEST(mpichild_alltoallv_type)
{
    int n = 0;
    if (!rap_dist_detect(&n))
        SKIP("not under mpirun (dist_batch_alltoallv_mpi runs it)");
    rap_comm *c = NULL;
    REQUIRE_OK(rap_comm_mpi_init(&c));
    int bad = 0;
    CHECK_OK(typed_ops(c, &bad));
    CHECK_MSG(bad == 0, "mpi rank %d: %d wrong values", rap_comm_rank(c), bad);
    rap_comm_free(c);
}

/* ------------------------------------------------------------ harness */



#define OUT 65536

/* This test binary (the mpirun children run it). */
static const char *self_exe(void)
{
    static char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    return exe;
}

RAP_TEST(dist_batch_alltoallv_mpi)
{
    const char *why = rap_test_no_mpi();
    if (why)
        SKIP("%s", why);
    char *out = malloc(OUT), cmd[2048];
    REQUIRE(out);
    for (int np = 2; np <= 3; np++) {
        snprintf(cmd, sizeof cmd, "mpirun --allow-run-as-root --oversubscribe -np %d %s "
                 "mpichild_alltoallv_type", np, self_exe());
        int rc = rap_test_sh(cmd, out, OUT);
        int done = 0;
        for (const char *p = out; (p = strstr(p, "1 passed, 0 failed, 0 skipped")); p++)
            done++;
        CHECK_MSG(rc == 0 && done == np, "mpirun -np %d: exit %d, %d ranks passed:\n%s", np, rc,
                  done, out);
    }
    free(out);
}

/* ------------------------------------------------------------ rap train --placement batch */

#define ROWS 3000 /* one epoch: 46 global batches of 64 rows and one of 56 */
#define B 64
#define NT 5

static const int64_t k_rows[NT] = {300, 200, 1000, 50, 700};

static char g_data[512], g_plan[512];

/* The small plan and its generated rows, once. */
static bool setup(rap_test_ctx *t)
{
    if (g_data[0])
        return true;
    if (rap_test_dist_inputs(t, 7, "dist_batch", g_plan, g_data, sizeof g_data))
        return true;
    g_data[0] = 0;
    return false;
}

/* `rap train` of the small model: R 0 = the plain path, R > 0 under
 * mpirun -np R, R < 0 as -R threads (--gpus -R). One epoch, SGD. */
static int train_b(int R, int64_t batch, const char *extra, char *out, size_t n)
{
    char cmd[4096], launcher[256] = "", gpus[32] = "";
    if (R > 0)
        snprintf(launcher, sizeof launcher, "mpirun --allow-run-as-root --oversubscribe -np %d ",
                 R);
    if (R < 0)
        snprintf(gpus, sizeof gpus, "--gpus %d", -R);
    snprintf(cmd, sizeof cmd,
             "%s%s train --device cpu --plan %s --data %s --batch %lld --optimizer sgd --lr 0.05 "
             "--emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 --threads 1 --log-every 1 --epochs 1 "
             "--eval-fraction 0 %s %s",
             launcher, rap_test_bin(), g_plan, g_data, (long long)batch, gpus, extra);
    return rap_test_sh(cmd, out, n);
}

static int train(int R, const char *extra, char *out, size_t n)
{
    return train_b(R, B, extra, out, n);
}


/* The last line of a metrics file. */
static bool last_line(const char *path, char *last, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[4096];
    last[0] = 0;
    while (fgets(line, sizeof line, f))
        snprintf(last, n, "%s", line);
    fclose(f);
    return last[0] != 0;
}

/* "key":N of a line, or -1. */
static int64_t num(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    return p ? strtoll(p + strlen(k), NULL, 10) : -1;
}

/* "key":[a,b,..] of a line into v; the count, or -1. */
static int list(const char *line, const char *key, int64_t *v, int max)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":[", key);
    const char *p = strstr(line, k);
    if (!p)
        return -1;
    p += strlen(k);
    int n = 0;
    while (*p && *p != ']' && n < max) {
        char *e;
        v[n++] = strtoll(p, &e, 10);
        p = *e == ',' ? e + 1 : e;
    }
    return n;
}

static bool close_to(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }


/* What placement batch must move in one epoch on nr ranks, from the shard
 * map the trainer makes and the row shares alone: every rank s sends each
 * other rank p, for each table p holds, its share's offsets and ids (one id
 * a row here): 16 bytes a row. sent[s] per rank; returns the sum. */
static int64_t expected_bytes(int nr, int64_t rows, int64_t batch, int64_t *sent)
{
    rap_shard_map map;
    memset(&map, 0, sizeof map);
    if (rap_shard_plan(k_rows, NT, 8, nr, 0, NULL, &map) != RAP_OK)
        return -1;
    int held[8] = {0}; /* tables rank p holds */
    for (int tb = 0; tb < NT; tb++) {
        bool seen[8] = {false};
        for (int q = map.part0[tb]; q < map.part0[tb + 1]; q++)
            if (!seen[map.part[q].rank]) {
                seen[map.part[q].rank] = true;
                held[map.part[q].rank]++;
            }
    }
    rap_shard_map_free(&map);
    int64_t all = 0;
    for (int s = 0; s < nr; s++)
        sent[s] = 0;
    for (int64_t left = rows; left > 0; left -= batch) {
        int64_t n = left < batch ? left : batch;
        for (int s = 0; s < nr; s++) {
            int64_t r0, cnt, others = 0;
            rap_hybrid_rows(n, nr, s, &r0, &cnt);
            for (int p = 0; p < nr; p++)
                others += p == s ? 0 : held[p];
            sent[s] += 16 * cnt * others;
        }
    }
    for (int s = 0; s < nr; s++)
        all += sent[s];
    return all;
}

RAP_TEST(dist_batch_matches_one_rank)
{
    if (!setup(t))
        return;
    const char *why = rap_test_no_mpi();
    char *out = malloc(OUT);
    REQUIRE(out);
    char ref[512], refm[512], args[2048], last[4096];
    rap_test_path(ref, sizeof ref, "dist_batch_ref.st");
    rap_test_path(refm, sizeof refm, "dist_batch_ref.jsonl");
    snprintf(args, sizeof args, "--save %s --metrics %s --quiet", ref, refm);
    int rc0 = train(0, args, out, OUT);
    CHECK_MSG(rc0 == 0, "one rank: exit %d: %s", rc0, out);
    if (rc0 != 0) {
        free(out);
        return;
    }
    enum { MAXS = 64 };
    double l1[MAXS];
    int steps = rap_test_read_losses(refm, l1, MAXS);
    REQUIRE(steps == ROWS / B + 1);
    REQUIRE(last_line(refm, last, sizeof last));
    int64_t rows = num(last, "samples_trained");
    REQUIRE(rows == ROWS);
    /* mpirun -np 2 and 3, 2 in cpu mode; 2 and 3 threads (3 in cpu mode);
     * then owner on 3 threads and 2 under mpirun: unchanged, nothing moved */
    const int runs[] = {2, 3, 2, -2, -3, -3, -3, 2};
    const char *const extra[] = {"--placement batch", "--placement batch",
                                 "--placement batch --mode cpu --cpu-workers 2",
                                 "--placement batch", "--placement batch",
                                 "--placement batch --mode cpu --cpu-workers 2",
                                 "--placement owner", "--placement owner"};
    int done = 0;
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        int R = runs[k], nr = R < 0 ? -R : R;
        bool batch = strstr(extra[k], "batch") != NULL;
        if (R > 0 && why)
            continue;
        char ck[512], m[512];
        snprintf(args, sizeof args, "dist_batch_%zu.st", k);
        rap_test_path(ck, sizeof ck, args);
        snprintf(args, sizeof args, "dist_batch_%zu.jsonl", k);
        rap_test_path(m, sizeof m, args);
        snprintf(args, sizeof args, "--save %s --metrics %s %s", ck, m, extra[k]);
        int rc = train(R, args, out, OUT);
        CHECK_MSG(rc == 0, "%d ranks, %s: exit %d: %s", R, extra[k], rc, out);
        if (rc != 0)
            continue;
        /* the data path ran as named */
        CHECK_MSG(strstr(out, batch ? "over its own rows of the global batch, then sends each "
                                      "table's ids"
                                    : "the sparse columns of its own tables") != NULL,
                  "%d ranks, %s: %s", R, extra[k], out);
        double lr[MAXS];
        int n = rap_test_read_losses(m, lr, MAXS);
        CHECK_MSG(n == steps, "%d ranks, %s: %d step lines, one rank %d", R, extra[k], n, steps);
        int off = 0;
        for (int s = 0; s < n && s < steps; s++)
            off += !close_to(lr[s], l1[s], 1e-5);
        CHECK_MSG(off == 0, "%d ranks, %s: %d of %d steps' losses differ from one rank's (step 1: "
                  "%.9g vs %.9g)", R, extra[k], off, n, lr[0], l1[0]);
        double worst;
        char msg[512] = "";
        CHECK_MSG(rap_test_close_weights(ck, ref, false, 1e-4, &worst, msg, sizeof msg),
                  "%d ranks, %s: %s", R,
                  extra[k], msg);
        /* every row once: each rank its shares */
        CHECK(last_line(m, last, sizeof last));
        CHECK_MSG(num(last, "samples_trained") == rows && num(last, "ranks_samples") == rows,
                  "%d ranks: %s", R, last);
        int64_t per[8], sent[8], want[8] = {0}, want_sent[8];
        CHECK_MSG(list(last, "rank_samples", per, 8) == nr, "%d ranks: %s", R, last);
        for (int64_t left = rows; left > 0; left -= B)
            for (int r = 0; r < nr; r++) {
                int64_t r0, cnt;
                rap_hybrid_rows(left < B ? left : B, nr, r, &r0, &cnt);
                want[r] += cnt;
            }
        for (int r = 0; r < nr; r++)
            CHECK_MSG(per[r] == want[r], "%d ranks: rank %d trained %lld rows, its shares %lld",
                      R, r, (long long)per[r], (long long)want[r]);
        /* bytes moved: as computed here from the shard map and the shares;
         * owner moves none */
        int64_t moved = num(last, "bytes_moved");
        int64_t expect = batch ? expected_bytes(nr, rows, B, want_sent) : 0;
        if (!batch)
            for (int r = 0; r < nr; r++)
                want_sent[r] = 0;
        CHECK_MSG(moved == expect && (!batch || moved > 0),
                  "%d ranks, %s: bytes_moved %lld, expected %lld", R, extra[k], (long long)moved,
                  (long long)expect);
        CHECK_MSG(list(last, "rank_bytes_sent", sent, 8) == nr, "%d ranks: %s", R, last);
        for (int r = 0; r < nr; r++)
            CHECK_MSG(sent[r] == want_sent[r], "%d ranks, %s: rank %d sent %lld bytes, expected "
                      "%lld", R, extra[k], r, (long long)sent[r], (long long)want_sent[r]);
        printf("    %d ranks (%s, %s): %d losses within 1e-5, weights within %.2g; %lld bytes "
               "of ids moved (%.0f per step)\n", nr, R < 0 ? "threads" : "mpirun", extra[k], n,
               worst, (long long)moved, (double)moved / n);
        done++;
    }
    CHECK(done >= 5);
    if (why)
        printf("    mpirun runs skipped: %s\n", why);
    free(out);
}

/* Edge cases of the exchange on thread ranks: a last global batch of 3
 * rows on 4 ranks (rank 3 has no row of it: it sends nothing and receives
 * the others' ids), and 6 ranks for 5 tables (one rank holds no table: it
 * only sends). Both == one rank; bytes as computed. */
RAP_TEST(dist_batch_edges)
{
    if (!setup(t))
        return;
    char *out = malloc(OUT);
    REQUIRE(out);
    const int64_t batch[] = {999, B}; /* 3000 = 3 x 999 + 3 */
    const int ranks[] = {4, 6};
    for (int k = 0; k < 2; k++) {
        char m1[512], m[512], args[1024], last[4096];
        snprintf(args, sizeof args, "dist_batch_edge1_%d.jsonl", k);
        rap_test_path(m1, sizeof m1, args);
        snprintf(args, sizeof args, "dist_batch_edge_%d.jsonl", k);
        rap_test_path(m, sizeof m, args);
        snprintf(args, sizeof args, "--metrics %s --quiet", m1);
        int rc = train_b(0, batch[k], args, out, OUT);
        CHECK_MSG(rc == 0, "one rank, batch %lld: %s", (long long)batch[k], out);
        snprintf(args, sizeof args, "--metrics %s --quiet --placement batch", m);
        int rc2 = train_b(-ranks[k], batch[k], args, out, OUT);
        CHECK_MSG(rc2 == 0, "%d ranks, batch %lld: %s", ranks[k], (long long)batch[k], out);
        if (rc || rc2)
            continue;
        double l1[64], lr[64];
        int n1 = rap_test_read_losses(m1, l1, 64), n = rap_test_read_losses(m, lr, 64);
        CHECK_MSG(n1 > 0 && n == n1, "%d ranks: %d steps, one rank %d", ranks[k], n, n1);
        for (int s = 0; s < n && s < n1; s++)
            CHECK_MSG(close_to(lr[s], l1[s], 1e-5), "%d ranks step %d: loss %.9g, one rank %.9g",
                      ranks[k], s + 1, lr[s], l1[s]);
        int64_t sent[8], want[8];
        CHECK(last_line(m, last, sizeof last));
        int64_t expect = expected_bytes(ranks[k], ROWS, batch[k], want);
        CHECK_MSG(num(last, "bytes_moved") == expect && expect > 0, "%d ranks: bytes %lld, "
                  "expected %lld", ranks[k], (long long)num(last, "bytes_moved"),
                  (long long)expect);
        CHECK(list(last, "rank_bytes_sent", sent, 8) == ranks[k]);
        for (int r = 0; r < ranks[k]; r++)
            CHECK_MSG(sent[r] == want[r], "%d ranks: rank %d sent %lld, expected %lld", ranks[k],
                      r, (long long)sent[r], (long long)want[r]);
        printf("    %d ranks, batch %lld: %d losses within 1e-5 of one rank's, %lld bytes moved\n",
               ranks[k], (long long)batch[k], n, (long long)expect);
    }
    free(out);
}
