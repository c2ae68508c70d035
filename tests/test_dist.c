/*
 * test_dist.c -- src/dist: the comm backends (self, threads, and mpi under
 * mpirun), the table shard planner, the exchange kernels' references and
 * the hybrid-parallel step over R thread ranks against one unsharded model.
 */
#include "test.h"

#include "dist/comm.h"
#include "dist/hybrid_internal.h"
#include "dist/shard.h"
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ comm tests */

/* Every collective once, with values that show who sent what. */
static rap_status all_ops(rap_test_rank *x)
{
    rap_comm *c = x->c;
    int R = x->R, me = x->rank;
    if (rap_comm_rank(c) != me || rap_comm_size(c) != R)
        x->bad++;
    /* alltoallv: rank s sends (s + 1) * (p + 1) % 3 + p elements to p,
     * values 1000 s + 100 p + j. */
    int64_t sc[8], sd[8], rc[8], rd[8], ns = 0, nrv = 0;
    for (int p = 0; p < R; p++) {
        sc[p] = (me + 1) * (p + 1) % 3 + p;
        sd[p] = ns + 1; /* a gap of one element before each block */
        ns += sc[p] + 1;
        rc[p] = (p + 1) * (me + 1) % 3 + me;
        rd[p] = nrv;
        nrv += rc[p];
    }
    float send[128], recv[128];
    for (int i = 0; i < 128; i++)
        send[i] = -1, recv[i] = -7;
    for (int p = 0; p < R; p++)
        for (int64_t j = 0; j < sc[p]; j++)
            send[sd[p] + j] = (float)(1000 * me + 100 * p + j);
    RAP_TRY(rap_comm_alltoallv(c, send, sc, sd, recv, rc, rd, "test alltoallv"));
    for (int p = 0; p < R; p++)
        for (int64_t j = 0; j < rc[p]; j++)
            x->bad += recv[rd[p] + j] != (float)(1000 * p + 100 * me + j);
    x->bad += recv[nrv] != -7; /* nothing written past the blocks */
    /* allreduce of three types, sums known exactly. */
    float f[5];
    double d[3];
    int64_t l[2];
    for (int i = 0; i < 5; i++)
        f[i] = (float)(me + 1) * (float)(i + 1) * 0.5f;
    for (int i = 0; i < 3; i++)
        d[i] = (me + 1) * 0.25 + i;
    l[0] = (int64_t)1 << (40 + me);
    l[1] = -me;
    RAP_TRY(rap_comm_allreduce(c, f, 5, RAP_COMM_F32, "test f32"));
    RAP_TRY(rap_comm_allreduce(c, d, 3, RAP_COMM_F64, "test f64"));
    RAP_TRY(rap_comm_allreduce_host(c, l, 2, RAP_COMM_I64, "test i64"));
    double tri = R * (R + 1) / 2.0;
    for (int i = 0; i < 5; i++)
        x->bad += f[i] != (float)(tri * (i + 1) * 0.5);
    for (int i = 0; i < 3; i++)
        x->bad += d[i] != tri * 0.25 + R * i;
    int64_t want0 = 0;
    for (int p = 0; p < R; p++)
        want0 += (int64_t)1 << (40 + p);
    x->bad += l[0] != want0 || l[1] != -(int64_t)(R * (R - 1) / 2);
    /* broadcast from every root. */
    for (int root = 0; root < R; root++) {
        int64_t b[3] = {me, me * 2, me * 3};
        RAP_TRY(rap_comm_broadcast(c, b, 3, RAP_COMM_I64, root, "test bcast"));
        x->bad += b[0] != root || b[1] != 2 * root || b[2] != 3 * root;
    }
    /* allgather of a small struct. */
    struct {
        int r;
        char s[12];
    } mine = {me, "rank"}, all[8];
    mine.s[4] = (char)('0' + me);
    RAP_TRY(rap_comm_allgather(c, &mine, sizeof mine, all, "test allgather"));
    for (int p = 0; p < R; p++)
        x->bad += all[p].r != p || all[p].s[4] != '0' + p;
    /* a group: allreduce and alltoallv together. */
    float g[2] = {1, (float)me};
    for (int i = 0; i < 128; i++)
        recv[i] = -7;
    RAP_TRY(rap_comm_group_begin(c));
    RAP_TRY(rap_comm_allreduce(c, g, 2, RAP_COMM_F32, "group allreduce"));
    RAP_TRY(rap_comm_alltoallv(c, send, sc, sd, recv, rc, rd, "group alltoallv"));
    RAP_TRY(rap_comm_group_end(c, "group"));
    x->bad += g[0] != (float)R || g[1] != (float)(R * (R - 1) / 2);
    for (int p = 0; p < R; p++)
        for (int64_t j = 0; j < rc[p]; j++)
            x->bad += recv[rd[p] + j] != (float)(1000 * p + 100 * me + j);
    RAP_TRY(rap_comm_barrier(c, "test barrier"));
    RAP_TRY(rap_comm_wait(c, NULL, "test wait")); /* no-op on the host */
    /* A large allreduce of values of mixed magnitudes (rounding depends on
     * the order of the adds) gives the same bits on every rank: replicated
     * MLPs stay identical. Sizes that take MPI's small and large paths. */
    for (int big = 0; big < 2; big++) {
        int64_t nb = big ? 300001 : 37;
        float *v = rap_malloc(sizeof(float) * (size_t)nb, "test allreduce");
        if (!v)
            return RAP_ERR_NOMEM;
        uint64_t seed = 1234 + (uint64_t)me;
        for (int64_t i = 0; i < nb; i++) {
            uint64_t z = rap_splitmix64(&seed);
            v[i] = (float)(z % 100000) * (z & 1 ? 1e-7f : 1e3f) - 3.3f;
        }
        rap_status st = rap_comm_allreduce(c, v, nb, RAP_COMM_F32, "test big allreduce");
        uint64_t h = 1469598103934665603ULL, all[8];
        for (int64_t i = 0; st == RAP_OK && i < nb; i++) {
            uint32_t b;
            memcpy(&b, &v[i], 4);
            h = (h ^ b) * 1099511628211ULL;
        }
        rap_free(v);
        RAP_TRY(st);
        RAP_TRY(rap_comm_allgather(c, &h, sizeof h, all, "test hashes"));
        for (int p = 0; p < R; p++)
            x->bad += all[p] != all[0];
    }
    return RAP_OK;
}

RAP_TEST(dist_comm_self)
{
    rap_comm *c = NULL;
    REQUIRE_OK(rap_comm_self_create(&c));
    CHECK(rap_comm_kind_of(c) == RAP_COMM_SELF && !rap_comm_on_device(c));
    CHECK(rap_comm_host(c) == c && rap_comm_stream(c) == NULL);
    rap_test_rank x = {0};
    x.R = 1;
    x.c = c;
    CHECK_OK(all_ops(&x));
    CHECK_MSG(x.bad == 0, "self comm: %d wrong values", x.bad);
    rap_comm_free(c);
}

RAP_TEST(dist_comm_threads)
{
    for (int R = 1; R <= 4; R++) {
        rap_test_rank x[8];
        if (!rap_test_run_ranks(t, R, 10, all_ops, NULL, x))
            return;
        for (int r = 0; r < R; r++)
            CHECK_MSG(x[r].bad == 0, "R = %d rank %d: %d wrong values", R, r, x[r].bad);
    }
}

/* The alltoallv counts of two ranks disagree: an error, not a hang. */
static rap_status mismatched(rap_test_rank *x)
{
    int64_t sc[2] = {1, 2}, sd[2] = {0, 1}, rc[2] = {1, 1}, rd[2] = {0, 1};
    float s[4] = {1, 2, 3, 4}, r[4];
    rap_status st = rap_comm_alltoallv(x->c, s, sc, sd, r, rc, rd, "mismatch");
    x->bad = st == RAP_OK ? 0 : 1;
    x->seconds = strstr(rap_last_error(), "2 elements, 1 expected") != NULL;
    return RAP_OK;
}

RAP_TEST(dist_comm_threads_mismatch)
{
    rap_test_rank x[2];
    REQUIRE(rap_test_run_ranks(t, 2, 10, mismatched, NULL, x));
    /* Every rank expects 1 element from every rank and sends 2 to rank 1:
     * rank 1 fails, naming it; rank 0 gets what it expects. */
    CHECK(x[0].bad == 0);
    CHECK(x[1].bad == 1 && x[1].seconds == 1);
}

/* Rank R-1 never joins: the others fail within the timeout. */
static rap_status hang_one(rap_test_rank *x)
{
    if (x->rank == x->R - 1)
        return RAP_OK; /* "died" */
    float v = 1;
    double t0 = rap_now();
    rap_status st = rap_comm_allreduce(x->c, &v, 1, RAP_COMM_F32, "grads");
    x->seconds = rap_now() - t0;
    char want[128];
    snprintf(want, sizeof want, "rank %d: collective grads did not complete within 0.3 s",
             x->rank);
    /* The first rank to time out says so; the other may see the broken
     * comm instead, at once. */
    bool msg = strstr(rap_last_error(), want) != NULL ||
               strstr(rap_last_error(), "communicator is broken") != NULL;
    x->bad = st == RAP_ERR_IO && msg ? 0 : 1;
    if (x->bad)
        snprintf(x->err, sizeof x->err, "%s -> %s", rap_status_name(st), rap_last_error());
    /* Every later collective fails at once. */
    double t1 = rap_now();
    st = rap_comm_barrier(x->c, "after");
    x->bad += st == RAP_OK || rap_now() - t1 > 0.1;
    return RAP_OK;
}

RAP_TEST(dist_comm_threads_timeout)
{
    for (int R = 2; R <= 3; R++) {
        rap_test_rank x[8];
        double t0 = rap_now();
        REQUIRE(rap_test_run_ranks(t, R, 0.3, hang_one, NULL, x));
        double took = rap_now() - t0;
        CHECK_MSG(took < 3, "R = %d: the ranks took %.2f s to give up", R, took);
        int timed_out = 0;
        for (int r = 0; r < R - 1; r++) {
            CHECK_MSG(x[r].bad == 0, "R = %d rank %d: %s", R, r, x[r].err);
            CHECK(x[r].seconds < 2.5);
            timed_out += x[r].seconds >= 0.25;
        }
        CHECK(timed_out >= 1); /* waited the timeout, not less */
    }
}

/* Rank 1 of a threads comm joining a barrier 50 ms late. */
static void *late_barrier(void *arg)
{
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    rap_comm_barrier(arg, "barrier");
    return NULL;
}

RAP_TEST(dist_comm_timeout_setting)
{
    char *old = getenv("RAP_COMM_TIMEOUT_S") ? strdup(getenv("RAP_COMM_TIMEOUT_S")) : NULL;
    unsetenv("RAP_COMM_TIMEOUT_S");
    CHECK(rap_comm_default_timeout() == 60);
    setenv("RAP_COMM_TIMEOUT_S", "2.5", 1);
    CHECK(rap_comm_default_timeout() == 2.5);
    rap_comm *c = NULL;
    REQUIRE_OK(rap_comm_self_create(&c));
    CHECK(rap_comm_timeout(c) == 2.5);
    rap_comm_set_timeout(c, 7);
    CHECK(rap_comm_timeout(c) == 7);
    rap_comm_set_timeout(c, -1); /* ignored */
    CHECK(rap_comm_timeout(c) == 7);
    rap_comm_free(c);
    setenv("RAP_COMM_TIMEOUT_S", "soon", 1);
    CHECK(rap_comm_default_timeout() == 60);
    /* no infinite or huge deadline (the threads barrier converts it to
     * whole seconds: inf or 1e300 were undefined behaviour there) */
    setenv("RAP_COMM_TIMEOUT_S", "inf", 1);
    CHECK(rap_comm_default_timeout() == 60);
    setenv("RAP_COMM_TIMEOUT_S", "1e300", 1);
    CHECK(rap_comm_default_timeout() == 60);
    unsetenv("RAP_COMM_TIMEOUT_S");
    rap_comm *th[2] = {NULL, NULL};
    REQUIRE_OK(rap_comm_threads_create(2, th));
    for (int r = 0; r < 2; r++) {
        rap_comm_set_timeout(th[r], INFINITY);
        CHECK(rap_comm_timeout(th[r]) == RAP_COMM_MAX_TIMEOUT_S);
        rap_comm_set_timeout(th[r], NAN); /* ignored */
        CHECK(rap_comm_timeout(th[r]) == RAP_COMM_MAX_TIMEOUT_S);
    }
    /* a barrier that rank 1 reaches late: rank 0 waits (an infinite
     * timeout used to make its deadline INT64_MIN seconds: at once) */
    pthread_t late;
    REQUIRE(pthread_create(&late, NULL, late_barrier, th[1]) == 0);
    CHECK_OK(rap_comm_barrier(th[0], "barrier"));
    pthread_join(late, NULL);
    for (int r = 0; r < 2; r++)
        rap_comm_free(th[r]);
    if (old)
        setenv("RAP_COMM_TIMEOUT_S", old, 1), free(old);
    else
        unsetenv("RAP_COMM_TIMEOUT_S");
}

RAP_TEST(dist_detect)
{
    /* Not under mpirun in the test suite (unless the mpi child). */
    const char *keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PMIX_RANK"};
    for (int i = 0; i < 4; i++)
        if (getenv(keys[i]))
            SKIP("running under mpirun");
    int n = 0;
    CHECK(!rap_dist_detect(&n) && n == 1);
    setenv("PMI_SIZE", "3", 1);
    CHECK(rap_dist_detect(&n) && n == 3);
    unsetenv("PMI_SIZE");
    rap_comm *c = NULL;
    if (!rap_comm_have_mpi()) {
        CHECK(rap_comm_mpi_init(&c) == RAP_ERR_ARG && c == NULL);
        CHECK(strstr(rap_last_error(), "without MPI") != NULL);
    }
    if (!rap_comm_have_nccl()) {
        rap_comm *h = NULL;
        REQUIRE_OK(rap_comm_self_create(&h));
        CHECK(rap_comm_nccl_create(h, 0, NULL, &c) == RAP_ERR_NO_GPU && c == NULL);
        rap_comm_free(h);
    }
}

/* ------------------------------------------------------------ shard planner */

static void check_map(rap_test_ctx *t, const rap_shard_map *m, const int64_t *rows,
                      int64_t budget)
{
    rap_status s = rap_shard_map_check(m, rows, budget);
    CHECK_MSG(s == RAP_OK, "map check: %s", rap_last_error());
}

RAP_TEST(dist_shard_tablewise)
{
    /* 8 equal tables on 4 ranks: 2 each. */
    int64_t rows[8];
    for (int i = 0; i < 8; i++)
        rows[i] = 1000;
    rap_shard_map m;
    REQUIRE_OK(rap_shard_plan(rows, 8, 16, 4, 0, NULL, &m));
    check_map(t, &m, rows, 0);
    CHECK(m.n_parts == 8);
    for (int r = 0; r < 4; r++) {
        CHECK(m.shard[r].n_local == 2);
        CHECK(m.bytes[r] == 2 * 1000 * 16 * 4);
    }
    /* Largest first onto the least loaded rank, ties to the lowest rank:
     * tables 0..3 on ranks 0..3, then 4..7 likewise. */
    for (int i = 0; i < 8; i++)
        CHECK(m.part[m.part0[i]].rank == i % 4);
    rap_shard_map_free(&m);

    /* Sizes 100, 90, 80, 10, 10, 10 on 3 ranks: 100, 90, 80 go to ranks
     * 0, 1, 2; the first 10 to rank 2 (80 bytes, least); the second to rank
     * 1 (90 bytes and 1 table, before rank 2's 90 bytes and 2 tables); the
     * last to rank 2 (90 bytes, least): 100 each. */
    int64_t r2[6] = {100, 90, 80, 10, 10, 10};
    REQUIRE_OK(rap_shard_plan(r2, 6, 1, 3, 0, NULL, &m));
    check_map(t, &m, r2, 0);
    CHECK(m.part[m.part0[0]].rank == 0);
    CHECK(m.part[m.part0[1]].rank == 1);
    CHECK(m.part[m.part0[2]].rank == 2);
    CHECK(m.part[m.part0[3]].rank == 2); /* 80 is least */
    CHECK(m.part[m.part0[4]].rank == 1); /* 90 (1 lookup) before 90 (2) */
    CHECK(m.part[m.part0[5]].rank == 2); /* 90 is least */
    int64_t mx = 0, mn = INT64_MAX;
    for (int r = 0; r < 3; r++)
        mx = m.bytes[r] > mx ? m.bytes[r] : mx, mn = m.bytes[r] < mn ? m.bytes[r] : mn;
    CHECK(mx == mn); /* 110 each */
    rap_shard_map_free(&m);

    /* Lookups break ties of bytes: the heavy table avoids the rank with
     * more lookups. */
    int64_t r3[3] = {10, 10, 10};
    double look[3] = {5, 1, 1};
    REQUIRE_OK(rap_shard_plan(r3, 3, 1, 2, 0, look, &m));
    check_map(t, &m, r3, 0);
    CHECK(m.part[m.part0[0]].rank == 0); /* most lookups placed first */
    CHECK(m.part[m.part0[1]].rank == 1);
    CHECK(m.part[m.part0[2]].rank == 1); /* 10 bytes each: rank 1 has fewer lookups */
    rap_shard_map_free(&m);
}

RAP_TEST(dist_shard_rowwise)
{
    /* One table of 1000 rows (D 4: 16000 bytes) and small ones, budget
     * 6000 bytes on 4 ranks: the big one over 3 ranks (334, 333, 333 rows:
     * 5344 bytes), the fewest that hold equal ranges. */
    int64_t rows[3] = {1000, 20, 30};
    rap_shard_map m;
    REQUIRE_OK(rap_shard_plan(rows, 3, 4, 4, 6000, NULL, &m));
    check_map(t, &m, rows, 6000);
    CHECK(m.part0[1] - m.part0[0] == 3);
    CHECK(m.part[0].rows == 334 && m.part[1].rows == 333 && m.part[2].rows == 333);
    CHECK(m.part[0].row0 == 0 && m.part[1].row0 == 334 && m.part[2].row0 == 667);
    for (int p = 0; p < 3; p++)
        CHECK(m.part[p].rank == p);
    /* The small tables on the empty rank 3 first. */
    CHECK(m.part[m.part0[2]].rank == 3);
    char desc[512];
    rap_shard_map_describe(&m, desc, sizeof desc);
    CHECK(strstr(desc, "t0[0,334)") != NULL);
    rap_shard_map_free(&m);

    /* Does not fit: the message gives needed and available. */
    rap_status s = rap_shard_plan(rows, 3, 4, 2, 6000, NULL, &m);
    CHECK(s == RAP_ERR_NOMEM);
    CHECK(strstr(rap_last_error(), "tables need 16800 bytes") != NULL);
    CHECK(strstr(rap_last_error(), "2 ranks x 6000 bytes = 12000") != NULL);
    CHECK(m.shard == NULL && m.part == NULL);
    /* Bad arguments. */
    CHECK(rap_shard_plan(rows, 0, 4, 2, 0, NULL, &m) == RAP_ERR_ARG);
    int64_t zero[1] = {0};
    CHECK(rap_shard_plan(zero, 1, 4, 2, 0, NULL, &m) == RAP_ERR_ARG);
}

RAP_TEST(dist_shard_properties)
{
    /* Random tables, budgets from tight to loose: every row held once,
     * budgets respected, deterministic; with no budget, balanced (the
     * spread of bytes at most the largest table). */
    uint64_t seed = 42;
    for (int trial = 0; trial < 300; trial++) {
        int T = 1 + (int)(rap_splitmix64(&seed) % 40);
        int R = 1 + (int)(rap_splitmix64(&seed) % 8);
        int D = 1 + (int)(rap_splitmix64(&seed) % 8);
        int64_t rows[40], need = 0, biggest = 0;
        double look[40];
        for (int i = 0; i < T; i++) {
            int big = rap_splitmix64(&seed) % 5 == 0;
            rows[i] = 1 + (int64_t)(rap_splitmix64(&seed) % (big ? 100000 : 1000));
            look[i] = (double)(rap_splitmix64(&seed) % 4);
            need += rows[i] * D * 4;
            biggest = rows[i] * D * 4 > biggest ? rows[i] * D * 4 : biggest;
        }
        /* budget: from just enough (plus slack for whole-row rounding) to 2x. */
        double f = 1.0 + (double)(rap_splitmix64(&seed) % 100) / 100.0;
        int64_t budget = trial % 4 == 0 ? 0 : (int64_t)(f * (double)need / R) + (int64_t)D * 4 * T;
        rap_shard_map a, b;
        rap_status s = rap_shard_plan(rows, T, D, R, budget, trial % 2 ? look : NULL, &a);
        CHECK_MSG(s == RAP_OK, "trial %d: %s", trial, rap_last_error());
        if (s != RAP_OK)
            continue;
        check_map(t, &a, rows, budget);
        REQUIRE_OK(rap_shard_plan(rows, T, D, R, budget, trial % 2 ? look : NULL, &b));
        CHECK(a.n_parts == b.n_parts &&
              memcmp(a.part, b.part, sizeof(rap_shard_part) * (size_t)a.n_parts) == 0);
        if (budget == 0) {
            CHECK(a.n_parts == T); /* no split without a budget */
            int64_t mx = 0, mn = INT64_MAX;
            for (int r = 0; r < R; r++)
                mx = a.bytes[r] > mx ? a.bytes[r] : mx, mn = a.bytes[r] < mn ? a.bytes[r] : mn;
            CHECK_MSG(mx - mn <= biggest, "trial %d: bytes spread %lld > largest table %lld",
                      trial, (long long)(mx - mn), (long long)biggest);
        }
        rap_shard_map_free(&a);
        rap_shard_map_free(&b);
    }
}

/* ------------------------------------------------------------ exchange kernels */

RAP_TEST(dist_filter_reference)
{
    /* 4 rows; keep [10, 20). */
    int64_t off[5] = {0, 3, 3, 6, 8};
    int64_t ids[8] = {5, 10, 19, 20, 15, 9, 12, 12};
    int64_t oo[5], oi[8];
    int64_t k = rap_hybrid_filter_cpu(off, ids, 4, 10, 10, oo, oi);
    CHECK(k == 5);
    int64_t want_off[5] = {0, 2, 2, 3, 5}, want_ids[5] = {0, 9, 5, 2, 2};
    CHECK(memcmp(oo, want_off, sizeof want_off) == 0);
    CHECK(memcmp(oi, want_ids, sizeof want_ids) == 0);
    /* Offsets not starting at 0. */
    int64_t off2[3] = {3, 5, 8};
    k = rap_hybrid_filter_cpu(off2, ids, 2, 10, 10, oo, oi);
    CHECK(k == 3 && oo[0] == 0 && oo[1] == 1 && oo[2] == 3 && oi[0] == 5 && oi[2] == 2);
}

RAP_TEST(dist_scatter_gather_reference)
{
    /* 2 ranks; rank 0 holds t0 and t1[0,5); rank 1 holds t1[5,10) and t2. */
    int64_t rows[3] = {4, 10, 4};
    rap_shard_map m;
    REQUIRE_OK(rap_shard_plan(rows, 3, 2, 2, 0, NULL, &m));
    /* Build the parts by hand instead of the planner's choice. */
    int part0[4] = {0, 1, 3, 4}, table[4] = {0, 1, 1, 2};
    int64_t cum[4] = {0, 0, 2, 2}, tl[4] = {2, 2, 2, 2}, local[4] = {0, 1, 0, 1};
    rap_hybrid_parts pa = {part0, table, cum, tl, local};
    int64_t nr = 3;
    int D = 2;
    float recv[3 * 4 * 2];
    for (int i = 0; i < 24; i++)
        recv[i] = (float)(i + 1);
    float emb[3 * 8];
    for (int i = 0; i < 24; i++)
        emb[i] = -1;
    rap_hybrid_scatter_cpu(recv, nr, 3, D, &pa, emb, 8);
    for (int64_t i = 0; i < nr; i++) {
        /* t0: rank 0 block, local 0 */
        for (int d = 0; d < D; d++) {
            float t0 = recv[(i * 2 + 0) * D + d];
            float t1 = recv[(i * 2 + 1) * D + d] + recv[nr * D * 2 + (i * 2 + 0) * D + d];
            float t2 = recv[nr * D * 2 + (i * 2 + 1) * D + d];
            CHECK(emb[i * 8 + 0 * D + d] == t0);
            CHECK(emb[i * 8 + 1 * D + d] == t1);
            CHECK(emb[i * 8 + 2 * D + d] == t2);
        }
        CHECK(emb[i * 8 + 6] == -1 && emb[i * 8 + 7] == -1); /* past T*D untouched */
    }
    float send[24];
    rap_hybrid_gather_cpu(emb, 8, nr, 4, D, &pa, send);
    for (int64_t i = 0; i < nr; i++)
        for (int d = 0; d < D; d++) {
            CHECK(send[(i * 2 + 0) * D + d] == emb[i * 8 + 0 * D + d]);
            CHECK(send[(i * 2 + 1) * D + d] == emb[i * 8 + 1 * D + d]);
            CHECK(send[nr * D * 2 + (i * 2 + 0) * D + d] == emb[i * 8 + 1 * D + d]);
            CHECK(send[nr * D * 2 + (i * 2 + 1) * D + d] == emb[i * 8 + 2 * D + d]);
        }
    rap_shard_map_free(&m);
}

RAP_TEST(dist_rows_split)
{
    int64_t r0, n;
    rap_hybrid_rows(13, 4, 0, &r0, &n);
    CHECK(r0 == 0 && n == 4);
    rap_hybrid_rows(13, 4, 1, &r0, &n);
    CHECK(r0 == 4 && n == 3);
    rap_hybrid_rows(13, 4, 3, &r0, &n);
    CHECK(r0 == 10 && n == 3);
    rap_hybrid_rows(2, 3, 2, &r0, &n);
    CHECK(r0 == 2 && n == 0);
}

/* ------------------------------------------------------------ hybrid step */

#define HT 5
#define HSTEPS 5
#define HMAXR 4

typedef struct {
    rap_model_config g;          /* the unsharded config (batch Bg) */
    int64_t Bg;
    int64_t n[HSTEPS];           /* rows of each global batch */
    float *dense[HSTEPS];        /* (Bg, ND) */
    float *label[HSTEPS];
    int64_t *off[HSTEPS][HT];    /* (Bg+1) */
    int64_t *ids[HSTEPS][HT];
    rap_shard_map map;
    /* Results of the ranks: loss of each step; weights after each step. */
    double loss[HMAXR][HSTEPS];
    float *w[HMAXR][HSTEPS];     /* every tensor of the rank, one after another */
    /* The phase hooks each rank saw (begin = 2p, end = 2p + 1), and its
     * communication accounting at the end with what it should be. */
    int hook[HMAXR][HSTEPS * 2 * RAP_HYB_PHASES + 1];
    int n_hook[HMAXR];
    rap_hybrid_comm comm[HMAXR];
    int64_t want_bytes[HMAXR];
} hyb_case;

typedef struct {
    hyb_case *hc;
    int rank;
} hyb_hook_ctx;

static rap_status hyb_hook(hyb_hook_ctx *x, int code)
{
    hyb_case *hc = x->hc;
    int *n = &hc->n_hook[x->rank];
    if (*n < HSTEPS * 2 * RAP_HYB_PHASES + 1)
        hc->hook[x->rank][(*n)++] = code;
    return RAP_OK;
}
static rap_status hyb_hook_begin(void *c, rap_hybrid_phase p) { return hyb_hook(c, 2 * (int)p); }
static rap_status hyb_hook_end(void *c, rap_hybrid_phase p) { return hyb_hook(c, 2 * (int)p + 1); }

static size_t tensors_floats(const rap_model *m)
{
    size_t n = 0;
    for (int i = 0; i < rap_model_n_tensors(m); i++)
        n += (size_t)(rap_model_tensor(m, i)->rows * rap_model_tensor(m, i)->cols);
    return n;
}

static rap_status get_all(const rap_model *m, float *out)
{
    for (int i = 0; i < rap_model_n_tensors(m); i++) {
        RAP_TRY(rap_model_get(m, i, out));
        out += rap_model_tensor(m, i)->rows * rap_model_tensor(m, i)->cols;
    }
    return RAP_OK;
}

static void hyb_batch(const hyb_case *hc, int s, rap_model_batch *b)
{
    memset(b, 0, sizeof *b);
    b->rows = hc->n[s];
    b->dense = hc->dense[s];
    b->label = hc->label[s];
    for (int t = 0; t < HT; t++) {
        b->off[t] = hc->off[s][t];
        b->ids[t] = hc->ids[s][t];
    }
}

static rap_status hyb_rank(rap_test_rank *x)
{
    hyb_case *hc = x->arg;
    rap_model_shard sh;
    rap_model_config mc;
    rap_model *m = NULL;
    rap_hybrid *h = NULL;
    RAP_TRY(rap_hybrid_model_config(&hc->g, &hc->map, x->rank, hc->Bg, &sh, &mc));
    RAP_TRY(rap_model_create(&mc, RAP_CPU, &m));
    rap_status st = rap_hybrid_create(m, &hc->map, x->c, &h);
    size_t nw = tensors_floats(m);
    hyb_hook_ctx hx = {hc, x->rank};
    rap_hybrid_hooks hk = {hyb_hook_begin, hyb_hook_end, &hx};
    if (st == RAP_OK)
        rap_hybrid_set_hooks(h, &hk);
    rap_model_shard_bufs bufs;
    if (st == RAP_OK)
        st = rap_model_shard_buffers(m, &bufs);
    int64_t tls = 0; /* local tables of all ranks */
    for (int q = 0; q < x->R; q++)
        tls += hc->map.shard[q].n_local;
    int64_t TL = hc->map.shard[x->rank].n_local, D = hc->g.emb_dim;
    hc->want_bytes[x->rank] = 0;
    for (int s = 0; st == RAP_OK && s < HSTEPS; s++) {
        if (x->R > 1) { /* forward: others' rows of my tables; reverse: my rows of theirs */
            int64_t r0, nr, other = 0;
            for (int q = 0; q < x->R; q++) {
                rap_hybrid_rows(hc->n[s], x->R, q, &r0, &nr);
                if (q != x->rank)
                    other += nr;
            }
            rap_hybrid_rows(hc->n[s], x->R, x->rank, &r0, &nr);
            hc->want_bytes[x->rank] +=
                4 * D * (other * TL + nr * (tls - TL)) +
                (int64_t)(2.0 * (x->R - 1) / x->R * 4 * (double)bufs.n_grads);
        }
        rap_model_batch glob, loc;
        hyb_batch(hc, s, &glob);
        int64_t row0, nr;
        rap_hybrid_rows(glob.rows, x->R, x->rank, &row0, &nr);
        memset(&loc, 0, sizeof loc);
        loc.rows = nr;
        loc.dense = glob.dense + row0 * hc->g.n_dense;
        loc.label = glob.label + row0;
        st = rap_hybrid_step(h, &glob, &loc);
        if (st == RAP_OK)
            st = rap_hybrid_loss(h, &hc->loss[x->rank][s]);
        if (st == RAP_OK) {
            hc->w[x->rank][s] = malloc(sizeof(float) * nw);
            st = get_all(m, hc->w[x->rank][s]);
        }
    }
    if (h)
        rap_hybrid_comm_get(h, &hc->comm[x->rank]);
    rap_hybrid_free(h);
    rap_model_free(m);
    return st;
}

static bool close_to(float a, float b)
{
    return fabsf(a - b) <= 2e-5f + 2e-4f * fabsf(b);
}

/* R thread ranks vs one unsharded model over HSTEPS steps; the last
 * global batch has last_n rows (< Bg: a short batch; < R: ranks with no
 * rows). */
static void hyb_run(rap_test_ctx *t, int R, rap_optimizer opt, int64_t budget, int64_t last_n)
{
    hyb_case *hc = calloc(1, sizeof *hc);
    rap_model_config *g = &hc->g;
    rap_model_config_defaults(g);
    g->n_dense = 3;
    g->n_tables = HT;
    int64_t rows[HT] = {50, 7, 200, 30, 11};
    for (int i = 0; i < HT; i++)
        g->table_rows[i] = rows[i];
    g->emb_dim = 4;
    g->n_bot = 2, g->bot[0] = 8, g->bot[1] = 4;
    g->n_top = 2, g->top[0] = 8, g->top[1] = 1;
    hc->Bg = 13;
    g->batch = hc->Bg;
    g->max_bag = 3;
    g->optimizer = opt;
    g->lr = opt == RAP_SGD ? 0.5f : 0.1f;
    g->threads = 1;
    g->seed = 7;
    uint64_t seed = 99 + (uint64_t)R;
    for (int s = 0; s < HSTEPS; s++) {
        int64_t n = s == HSTEPS - 1 ? last_n : hc->Bg;
        hc->n[s] = n;
        hc->dense[s] = malloc(sizeof(float) * (size_t)(n * g->n_dense));
        hc->label[s] = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n * g->n_dense; i++)
            hc->dense[s][i] = (float)(rap_splitmix64(&seed) % 1000) / 500.0f - 1.0f;
        for (int64_t i = 0; i < n; i++)
            hc->label[s][i] = (float)(rap_splitmix64(&seed) % 2);
        for (int tt = 0; tt < HT; tt++) {
            hc->off[s][tt] = malloc(sizeof(int64_t) * (size_t)(n + 1));
            hc->ids[s][tt] = malloc(sizeof(int64_t) * (size_t)(n * 3 + 1));
            int64_t k = 0;
            hc->off[s][tt][0] = 0;
            for (int64_t i = 0; i < n; i++) {
                int len = (int)(rap_splitmix64(&seed) % 4);
                for (int j = 0; j < len; j++)
                    hc->ids[s][tt][k++] = (int64_t)(rap_splitmix64(&seed) % (uint64_t)rows[tt]);
                hc->off[s][tt][i + 1] = k;
            }
        }
    }
    rap_status st = rap_shard_plan(rows, HT, g->emb_dim, R, budget, NULL, &hc->map);
    CHECK_MSG(st == RAP_OK, "plan: %s", rap_last_error());
    if (st != RAP_OK)
        goto out;
    bool split = false;
    for (int tt = 0; tt < HT; tt++)
        split |= hc->map.part0[tt + 1] - hc->map.part0[tt] > 1;
    CHECK_MSG(split || budget == 0, "R = %d: no table was split (budget %lld)", R,
              (long long)budget);

    rap_test_rank x[8];
    if (!rap_test_run_ranks(t, R, 20, hyb_rank, hc, x))
        goto out;
    /* every phase's hooks, in order, every step, on every rank (also
     * without rows); the communication counted */
    for (int r = 0; r < R; r++) {
        CHECK_MSG(hc->n_hook[r] == HSTEPS * 2 * RAP_HYB_PHASES, "R = %d rank %d: %d hook calls",
                  R, r, hc->n_hook[r]);
        for (int k = 0; k < hc->n_hook[r] && k < HSTEPS * 2 * RAP_HYB_PHASES; k++)
            if (hc->hook[r][k] != k % (2 * RAP_HYB_PHASES)) {
                CHECK_MSG(false, "R = %d rank %d: hook call %d is %d, expected %d", R, r, k,
                          hc->hook[r][k], k % (2 * RAP_HYB_PHASES));
                break;
            }
        CHECK_MSG(hc->comm[r].steps == HSTEPS, "R = %d rank %d: %lld steps counted", R, r,
                  (long long)hc->comm[r].steps);
        CHECK_MSG(hc->comm[r].bytes_sent == hc->want_bytes[r],
                  "R = %d rank %d: %lld bytes sent counted, expected %lld", R, r,
                  (long long)hc->comm[r].bytes_sent, (long long)hc->want_bytes[r]);
        CHECK(hc->comm[r].a2a_ms >= 0 && hc->comm[r].grad_ms >= 0);
        CHECK(R > 1 || (hc->comm[r].a2a_ms == 0 && hc->comm[r].grad_ms == 0));
    }

    /* The reference: one unsharded model, batch Bg. */
    rap_model *ref = NULL;
    st = rap_model_create(g, RAP_CPU, &ref);
    CHECK_MSG(st == RAP_OK, "reference model: %s", rap_last_error());
    if (st != RAP_OK)
        goto out;
    int nt = rap_model_n_tensors(ref);
    float *rw = malloc(sizeof(float) * tensors_floats(ref));
    int bad = 0;
    for (int s = 0; s < HSTEPS && bad < 10; s++) {
        rap_model_batch b;
        hyb_batch(hc, s, &b);
        CHECK_OK(rap_model_train_step(ref, &b));
        double rl = 0;
        CHECK_OK(rap_model_last_loss(ref, &rl));
        CHECK_OK(get_all(ref, rw));
        for (int r = 0; r < R; r++) {
            CHECK_MSG(fabs(hc->loss[r][s] - rl) <= 1e-5 * (1 + fabs(rl)),
                      "R = %d step %d rank %d: loss %.9g, unsharded %.9g", R, s, r,
                      hc->loss[r][s], rl);
            CHECK(hc->loss[r][s] == hc->loss[0][s]); /* the same sum on every rank */
        }
        /* Tables: each part against its rows of the reference table. */
        size_t at_ref = 0;
        for (int tt = 0; tt < HT; tt++) {
            for (int p = hc->map.part0[tt]; p < hc->map.part0[tt + 1]; p++) {
                const rap_shard_part *q = &hc->map.part[p];
                size_t at = 0;
                for (int k = 0; k < q->local; k++)
                    at += (size_t)(hc->map.shard[q->rank].rows[k] * g->emb_dim);
                const float *mine = hc->w[q->rank][s] + at;
                const float *want = rw + at_ref + (size_t)(q->row0 * g->emb_dim);
                for (int64_t e = 0; e < q->rows * g->emb_dim && bad < 10; e++)
                    if (!close_to(mine[e], want[e])) {
                        bad++;
                        rap_test_fail(t, __FILE__, __LINE__,
                                      "R = %d step %d table %d row %lld: %.9g, unsharded %.9g", R,
                                      s, tt, (long long)(q->row0 + e / g->emb_dim), mine[e],
                                      want[e]);
                    }
            }
            at_ref += (size_t)(rows[tt] * g->emb_dim);
        }
        /* MLP tensors: equal on every rank bit for bit, close to the
         * reference. */
        size_t mlp = tensors_floats(ref) - at_ref;
        for (int r = 0; r < R; r++) {
            size_t at = 0;
            for (int k = 0; k < hc->map.shard[r].n_local; k++)
                at += (size_t)(hc->map.shard[r].rows[k] * g->emb_dim);
            const float *mine = hc->w[r][s] + at;
            const float *rank0 = hc->w[0][s];
            size_t at0 = 0;
            for (int k = 0; k < hc->map.shard[0].n_local; k++)
                at0 += (size_t)(hc->map.shard[0].rows[k] * g->emb_dim);
            CHECK_MSG(memcmp(mine, rank0 + at0, sizeof(float) * mlp) == 0,
                      "R = %d step %d: rank %d's MLP differs from rank 0's", R, s, r);
            for (size_t e = 0; e < mlp && bad < 10; e++)
                if (!close_to(mine[e], rw[at_ref + e])) {
                    bad++;
                    rap_test_fail(t, __FILE__, __LINE__,
                                  "R = %d step %d rank %d MLP element %zu: %.9g, unsharded %.9g",
                                  R, s, r, e, mine[e], rw[at_ref + e]);
                }
        }
    }
    (void)nt;
    free(rw);
    rap_model_free(ref);
out:
    for (int s = 0; s < HSTEPS; s++) {
        free(hc->dense[s]);
        free(hc->label[s]);
        for (int tt = 0; tt < HT; tt++)
            free(hc->off[s][tt]), free(hc->ids[s][tt]);
        for (int r = 0; r < HMAXR; r++)
            free(hc->w[r][s]);
    }
    rap_shard_map_free(&hc->map);
    free(hc);
}

/* Budgets that split table 2 (200 rows x 4 x 4 bytes = 3200 bytes) for
 * each R; 298 rows = 4768 bytes in all. */
static const int64_t HBUDGET[HMAXR + 1] = {0, 0, 2600, 1800, 1300};

RAP_TEST(dist_hybrid_sgd)
{
    for (int R = 2; R <= HMAXR; R++)
        hyb_run(t, R, RAP_SGD, HBUDGET[R], 10);
}

RAP_TEST(dist_hybrid_adagrad)
{
    for (int R = 2; R <= HMAXR; R++)
        hyb_run(t, R, RAP_ADAGRAD, HBUDGET[R], 10);
}

RAP_TEST(dist_hybrid_tablewise)
{
    /* No budget: whole tables only; R = 1 over the threads backend too. */
    for (int R = 1; R <= HMAXR; R++)
        hyb_run(t, R, RAP_SGD, 0, 13);
}

RAP_TEST(dist_hybrid_empty_ranks)
{
    /* A last batch of R - 1 rows: rank R-1 trains no row of it (zero
     * gradients into the all-reduce), yet its tables are updated. The
     * model must accept emb_forward, dense_apply, emb_backward with no MLP
     * phases between (model.h, rap_model_dense_apply): probe that first. */
    {
        rap_model_config g, mc;
        rap_model_config_defaults(&g);
        g.n_tables = 1;
        g.table_rows[0] = 4;
        g.n_dense = 2;
        g.emb_dim = 4;
        g.n_bot = 1, g.bot[0] = 4;
        g.n_top = 1, g.top[0] = 1;
        g.batch = 2;
        g.threads = 1;
        int64_t rows[1] = {4};
        rap_shard_map map;
        rap_model_shard sh;
        REQUIRE_OK(rap_shard_plan(rows, 1, 4, 2, 0, NULL, &map));
        REQUIRE_OK(rap_hybrid_model_config(&g, &map, 0, 1, &sh, &mc));
        rap_model *m = NULL;
        REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &m));
        int64_t off[2] = {0, 1}, ids[1] = {2};
        rap_model_batch b;
        memset(&b, 0, sizeof b);
        b.rows = 1;
        b.off[0] = off;
        b.ids[0] = ids;
        rap_model_shard_bufs bufs;
        rap_status st = rap_model_emb_forward(m, &b);
        if (st == RAP_OK)
            st = rap_model_shard_buffers(m, &bufs);
        if (st == RAP_OK) {
            memset(bufs.demb_out, 0, sizeof(float) * 4);
            memset(bufs.grads, 0, sizeof(float) * bufs.n_grads);
            st = rap_model_dense_apply(m);
        }
        if (st == RAP_OK)
            st = rap_model_emb_backward(m, &b);
        char why[300];
        snprintf(why, sizeof why, "%s", rap_last_error());
        rap_model_free(m);
        rap_shard_map_free(&map);
        if (st != RAP_OK)
            SKIP("the CPU model refuses a rank with no rows of a short batch "
                 "(emb_forward, dense_apply, emb_backward): %s", why);
    }
    for (int R = 2; R <= HMAXR; R++)
        hyb_run(t, R, R % 2 ? RAP_ADAGRAD : RAP_SGD, HBUDGET[R], R - 1);
}

/* ------------------------------------------------------------ mpi */

/* Children run by dist_mpi under mpirun (skipped otherwise). */
RAP_TEST(mpichild_comm)
{
    int n = 0;
    if (!rap_dist_detect(&n))
        SKIP("not under mpirun (dist_mpi runs it)");
    rap_comm *c = NULL;
    REQUIRE_OK(rap_comm_mpi_init(&c));
    CHECK(rap_comm_kind_of(c) == RAP_COMM_MPI && rap_comm_size(c) == n);
    rap_test_rank x = {0};
    x.rank = rap_comm_rank(c);
    x.R = rap_comm_size(c);
    x.c = c;
    CHECK_OK(all_ops(&x));
    CHECK_MSG(x.bad == 0, "mpi rank %d: %d wrong values", x.rank, x.bad);
    rap_comm_free(c);
}

RAP_TEST(mpichild_timeout)
{
    if (!rap_dist_detect(NULL))
        SKIP("not under mpirun (dist_mpi runs it)");
    rap_comm *c = NULL;
    REQUIRE_OK(rap_comm_mpi_init(&c));
    rap_comm_set_timeout(c, 1);
    if (rap_comm_rank(c) == 1) {
        sleep(20); /* hangs: never joins; MPI_Abort of rank 0 ends it */
        return;
    }
    float v = 1;
    rap_status st = rap_comm_allreduce(c, &v, 1, RAP_COMM_F32, "stuck");
    fprintf(stderr, "child: %s: %s\n", rap_status_name(st), rap_last_error());
    fflush(stderr);
    rap_comm_abort(c, 3);
}

static int run_mpi(const char *test, int np, char *out, size_t cap, double *secs)
{
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0)
        return -1;
    exe[k] = 0;
    char cmd[1400];
    snprintf(cmd, sizeof cmd,
             "timeout 60 mpirun --allow-run-as-root --oversubscribe -np %d %s %s 2>&1", np, exe,
             test);
    double t0 = rap_now();
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int rc = pclose(f);
    *secs = rap_now() - t0;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

RAP_TEST(dist_mpi)
{
    if (!rap_comm_have_mpi())
        SKIP("rap was built without MPI");
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        SKIP("mpirun is not installed");
    if (rap_dist_detect(NULL))
        SKIP("already under mpirun");
    static char out[65536];
    double secs = 0;
    for (int np = 2; np <= 3; np++) {
        int rc = run_mpi("mpichild_comm", np, out, sizeof out, &secs);
        int done = 0;
        for (const char *p = out; (p = strstr(p, "1 passed, 0 failed, 0 skipped")); p++)
            done++;
        CHECK_MSG(rc == 0 && done == np, "mpirun -np %d: exit %d, %d ranks passed:\n%s", np, rc,
                  done, out);
    }
    int rc = run_mpi("mpichild_timeout", 2, out, sizeof out, &secs);
    CHECK_MSG(rc != 0 && rc != 124, "timeout child: exit %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, "rank 0: collective stuck did not complete within 1 s (a rank died "
                          "or hangs)") != NULL,
              "timeout child:\n%s", out);
    CHECK_MSG(secs < 15, "timeout child took %.1f s", secs);
    printf("    mpirun -np 2: a rank hangs, the other stops after %.1f s (timeout 1 s)\n", secs);
}

/* ------------------------------------------------------------ GPU */

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 8) != cudaSuccess)
        return NULL;
    if (host && bytes)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}
#endif

RAP_TEST(dist_gpu_kernels)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    /* Filter, scatter and gather on the GPU == their CPU references, bit
     * for bit, on random data (the planner's parts of a split table). */
    uint64_t seed = 5;
    int64_t n = 1000, rows_t = 997, row0 = 300, rows = 400;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1)), *ids = malloc(sizeof(int64_t) * 5000);
    off[0] = 7; /* offsets need not start at 0 */
    for (int64_t i = 0; i < n; i++) {
        int len = (int)(rap_splitmix64(&seed) % 5);
        for (int j = 0; j < len; j++)
            ids[off[i] + j] = (int64_t)(rap_splitmix64(&seed) % (uint64_t)rows_t);
        off[i + 1] = off[i] + len;
    }
    int64_t *ro = malloc(sizeof(int64_t) * (size_t)(n + 1)), *ri = malloc(sizeof(int64_t) * 5000);
    int64_t kept = rap_hybrid_filter_cpu(off, ids, n, row0, rows, ro, ri);
    int64_t *d_off = dev_copy(off, sizeof(int64_t) * (size_t)(n + 1));
    int64_t *d_ids = dev_copy(ids, sizeof(int64_t) * 5000);
    int64_t *d_ro = dev_copy(NULL, sizeof(int64_t) * (size_t)(n + 1));
    int64_t *d_ri = dev_copy(NULL, sizeof(int64_t) * 5000);
    size_t sb = rap_hybrid_filter_gpu_scratch(n);
    void *d_scr = dev_copy(NULL, sb);
    REQUIRE(d_off && d_ids && d_ro && d_ri && d_scr);
    CHECK_OK(rap_hybrid_filter_gpu(d_off, d_ids, n, row0, rows, d_ro, d_ri, 5000, d_scr, sb, NULL));
    int64_t *go = malloc(sizeof(int64_t) * (size_t)(n + 1)), *gi = malloc(sizeof(int64_t) * 5000);
    cudaMemcpy(go, d_ro, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyDeviceToHost);
    cudaMemcpy(gi, d_ri, sizeof(int64_t) * 5000, cudaMemcpyDeviceToHost);
    CHECK(memcmp(go, ro, sizeof(int64_t) * (size_t)(n + 1)) == 0);
    CHECK(memcmp(gi, ri, sizeof(int64_t) * (size_t)kept) == 0);

    /* Exchange kernels: 3 ranks, tables split by a budget. */
    int64_t trows[4] = {100, 40, 30, 20};
    int D = 8;
    rap_shard_map map;
    REQUIRE_OK(rap_shard_plan(trows, 4, D, 3, 2200, NULL, &map)); /* splits t0, t2, t3 */
    int P = map.n_parts, T = 4;
    int64_t cum[4] = {0}, pcum[16], ptl[16], ploc[16];
    int ptab[16];
    for (int s = 0; s < 3; s++)
        cum[s + 1] = cum[s] + map.shard[s].n_local;
    for (int p = 0; p < P; p++) {
        ptab[p] = map.shard[map.part[p].rank].table[map.part[p].local];
        pcum[p] = cum[map.part[p].rank];
        ptl[p] = map.shard[map.part[p].rank].n_local;
        ploc[p] = map.part[p].local;
    }
    rap_hybrid_parts pa = {map.part0, ptab, pcum, ptl, ploc};
    rap_hybrid_parts pd = {dev_copy(map.part0, sizeof(int) * 5), dev_copy(ptab, sizeof(int) * 16),
                           dev_copy(pcum, 8 * 16), dev_copy(ptl, 8 * 16), dev_copy(ploc, 8 * 16)};
    int64_t nr = 37, ld = T * D + 8;
    size_t nx = (size_t)(nr * cum[3] * D);
    float *recv = malloc(sizeof(float) * nx), *emb = malloc(sizeof(float) * (size_t)(nr * ld));
    float *gemb = malloc(sizeof(float) * (size_t)(nr * ld));
    for (size_t i = 0; i < nx; i++)
        recv[i] = (float)(rap_splitmix64(&seed) % 100000) / 7777.0f - 6.0f;
    for (int64_t i = 0; i < nr * ld; i++)
        emb[i] = gemb[i] = -3;
    float *d_recv = dev_copy(recv, sizeof(float) * nx);
    float *d_emb = dev_copy(emb, sizeof(float) * (size_t)(nr * ld));
    rap_hybrid_scatter_cpu(recv, nr, T, D, &pa, emb, ld);
    CHECK_OK(rap_hybrid_scatter_gpu(d_recv, nr, T, D, &pd, d_emb, ld, NULL));
    cudaMemcpy(gemb, d_emb, sizeof(float) * (size_t)(nr * ld), cudaMemcpyDeviceToHost);
    CHECK(memcmp(gemb, emb, sizeof(float) * (size_t)(nr * ld)) == 0);
    float *send = malloc(sizeof(float) * nx), *gsend = malloc(sizeof(float) * nx);
    float *d_send = dev_copy(NULL, sizeof(float) * nx);
    rap_hybrid_gather_cpu(emb, ld, nr, P, D, &pa, send);
    CHECK_OK(rap_hybrid_gather_gpu(d_emb, ld, nr, P, D, &pd, d_send, NULL));
    cudaMemcpy(gsend, d_send, sizeof(float) * nx, cudaMemcpyDeviceToHost);
    CHECK(memcmp(gsend, send, sizeof(float) * nx) == 0);
    void *frees[] = {d_off, d_ids, d_ro, d_ri, d_scr, (void *)pd.part0, (void *)pd.table,
                     (void *)pd.cum, (void *)pd.tl, (void *)pd.local, d_recv, d_emb, d_send};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        cudaFree(frees[i]);
    free(off), free(ids), free(ro), free(ri), free(go), free(gi);
    free(recv), free(emb), free(gemb), free(send), free(gsend);
    rap_shard_map_free(&map);
#endif
}

#ifdef RAP_HAVE_CUDA
/* One rank per GPU over a threads host comm: a NCCL comm each, every
 * device collective checked against known values. */
static rap_status nccl_rank(rap_test_rank *x)
{
    rap_comm *n = NULL;
    RAP_TRY(rap_comm_nccl_create(x->c, x->rank, NULL, &n));
    rap_status st = RAP_OK;
    int R = x->R, me = x->rank;
    float h[64], *d = NULL;
    if (cudaMalloc((void **)&d, sizeof(float) * 128) != cudaSuccess) {
        rap_comm_free(n);
        return rap_fail(RAP_ERR_CUDA, "cudaMalloc");
    }
    /* allreduce */
    for (int i = 0; i < 16; i++)
        h[i] = (float)(me + 1) * (float)i;
    cudaMemcpy(d, h, sizeof(float) * 16, cudaMemcpyHostToDevice);
    st = rap_comm_allreduce(n, d, 16, RAP_COMM_F32, "nccl allreduce");
    if (st == RAP_OK)
        st = rap_comm_wait(n, NULL, "nccl allreduce");
    cudaMemcpy(h, d, sizeof(float) * 16, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 16; i++)
        x->bad += h[i] != (float)(R * (R + 1) / 2) * (float)i;
    /* alltoallv: 2 elements to each rank, value 100 * from + to */
    int64_t sc[8], sd[8], rc[8], rd[8];
    for (int p = 0; p < R; p++) {
        sc[p] = rc[p] = 2;
        sd[p] = rd[p] = 2 * p;
        h[2 * p] = h[2 * p + 1] = (float)(100 * me + p);
    }
    cudaMemcpy(d, h, sizeof(float) * 2 * (size_t)R, cudaMemcpyHostToDevice);
    if (st == RAP_OK)
        st = rap_comm_alltoallv(n, d, sc, sd, d + 64, rc, rd, "nccl alltoallv");
    if (st == RAP_OK)
        st = rap_comm_wait(n, NULL, "nccl alltoallv");
    cudaMemcpy(h, d + 64, sizeof(float) * 2 * (size_t)R, cudaMemcpyDeviceToHost);
    for (int p = 0; p < R; p++)
        x->bad += h[2 * p] != (float)(100 * p + me) || h[2 * p + 1] != (float)(100 * p + me);
    /* broadcast from the last rank, and a host allreduce through the host comm */
    h[0] = (float)me;
    cudaMemcpy(d, h, sizeof(float), cudaMemcpyHostToDevice);
    if (st == RAP_OK)
        st = rap_comm_broadcast(n, d, 1, RAP_COMM_F32, R - 1, "nccl bcast");
    if (st == RAP_OK)
        st = rap_comm_wait(n, NULL, "nccl bcast");
    cudaMemcpy(h, d, sizeof(float), cudaMemcpyDeviceToHost);
    x->bad += h[0] != (float)(R - 1);
    double loss = 0.5;
    if (st == RAP_OK)
        st = rap_comm_allreduce_host(n, &loss, 1, RAP_COMM_F64, "host allreduce");
    x->bad += loss != 0.5 * R;
    cudaFree(d);
    rap_comm_free(n);
    return st;
}
#endif

RAP_TEST(dist_nccl_comm)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
#ifdef RAP_HAVE_CUDA
    int ngpu = 0;
    cudaGetDeviceCount(&ngpu);
    int R = ngpu < 4 ? ngpu : 4;
    rap_test_rank x[8];
    if (!rap_test_run_ranks(t, R, 60, nccl_rank, NULL, x))
        return;
    for (int r = 0; r < R; r++)
        CHECK_MSG(x[r].bad == 0, "R = %d rank %d: %d wrong values", R, r, x[r].bad);
    printf("    %d GPU rank(s): NCCL allreduce, alltoallv, broadcast, host allreduce\n", R);
#endif
}
