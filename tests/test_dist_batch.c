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

/* Runs a shell command (under `timeout 90`), its output into out. Returns
 * the exit status (124: timed out), -1 when it did not exit. */
static int sh(const char *cmd, char *out, size_t n)
{
    static int k;
    char log[512], full[8192];
    snprintf(log, sizeof log, "%s/dist_batch_cmd_%d.log", rap_test_tmpdir(), k++);
    snprintf(full, sizeof full, "timeout 90 %s >%s 2>&1 </dev/null", cmd, log);
    int st = system(full);
    FILE *f = fopen(log, "rb");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Why MPI runs cannot happen here, or NULL. */
static const char *no_mpi(void)
{
    if (!rap_comm_have_mpi())
        return "rap was built without MPI (no mpicc/OpenMPI headers)";
    if (system("mpirun --version >/dev/null 2>&1") != 0)
        return "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)";
    if (rap_dist_detect(NULL))
        return "already under mpirun";
    return NULL;
}

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
    const char *why = no_mpi();
    if (why)
        SKIP("%s", why);
    char *out = malloc(OUT), cmd[2048];
    REQUIRE(out);
    for (int np = 2; np <= 3; np++) {
        snprintf(cmd, sizeof cmd, "mpirun --allow-run-as-root --oversubscribe -np %d %s "
                 "mpichild_alltoallv_type", np, self_exe());
        int rc = sh(cmd, out, OUT);
        int done = 0;
        for (const char *p = out; (p = strstr(p, "1 passed, 0 failed, 0 skipped")); p++)
            done++;
        CHECK_MSG(rc == 0 && done == np, "mpirun -np %d: exit %d, %d ranks passed:\n%s", np, rc,
                  done, out);
    }
    free(out);
}
