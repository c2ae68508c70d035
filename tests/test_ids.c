/*
 * test_ids.c -- src/dist/ids: the id exchange of --placement batch. Every
 * rank generates the same global batch, keeps its share (offsets from a
 * non-zero base, garbage before it), runs the exchange, and compares what
 * it got with the global batch's ids of the tables it holds (the direct
 * concatenation of the shares); bytes against an independent count; a row
 * with K+1 ids. CPU over 1-4 thread ranks; GPU (nccl) against the CPU
 * reference element for element.
 */
#include "test.h"

#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/ids.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------ data */

#define MAX_T 160

typedef struct {
    int R, T, K;
    int64_t Bg;
    bool gpu;       /* also the nccl exchange, compared with the CPU one */
    int bad_table;  /* the overflow step's table (rank R-1's first row) */
} ids_case;

/* Who holds what: one rank holds all; else table t % 4 == 0 by ranks 0
 * and R-1, 1 by 0, 2 by R-1, 3 by rank 2 (or R-1): with R >= 3 rank 1
 * holds nothing. */
static bool holder(const ids_case *k, int p, int t)
{
    int R = k->R;
    if (R == 1)
        return true;
    switch (t % 4) {
    case 0:
        return p == 0 || p == R - 1;
    case 1:
        return p == 0;
    case 2:
        return p == R - 1;
    default:
        return p == (R > 2 ? 2 : R - 1);
    }
}

/* A global batch: T tables over n rows, offsets from 0. */
typedef struct {
    int64_t *off[MAX_T]; /* (n+1) */
    int64_t *ids[MAX_T]; /* (n*(K+1)) */
} gbatch;

static void gb_free(gbatch *b, int T)
{
    for (int t = 0; t < T; t++) {
        free(b->off[t]);
        free(b->ids[t]);
        b->off[t] = b->ids[t] = NULL;
    }
}

static uint64_t hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    return rap_mix64(seed ^ rap_mix64(a * 1000003 + rap_mix64(b * 7919 + rap_mix64(c))));
}

/* Rows g % 5 == 0 have no ids, g % 5 == 1 K ids, the others 0..K at
 * random; row bad_row of table bad_t K+1 (or K when cut). Id j of row g
 * depends on (seed, t, g, j) only, so the cut batch is the first K. */
static bool gb_make(gbatch *b, int T, int K, int64_t n, uint64_t seed, int64_t bad_row, int bad_t,
                    bool cut)
{
    memset(b, 0, sizeof *b);
    for (int t = 0; t < T; t++) {
        b->off[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        b->ids[t] = malloc(sizeof(int64_t) * (size_t)(n * (K + 1) + 1));
        if (!b->off[t] || !b->ids[t])
            return false;
        b->off[t][0] = 0;
        for (int64_t g = 0; g < n; g++) {
            int64_t len = g % 5 == 0   ? 0
                          : g % 5 == 1 ? K
                                       : (int64_t)(hash4(seed, (uint64_t)t, (uint64_t)g, 999) %
                                                   (uint64_t)(K + 1));
            if (g == bad_row && t == bad_t)
                len = cut ? K : K + 1;
            for (int64_t j = 0; j < len; j++)
                b->ids[t][b->off[t][g] + j] =
                    (int64_t)t * 100000 +
                    (int64_t)(hash4(seed, (uint64_t)t, (uint64_t)g, (uint64_t)j) % 100000);
            b->off[t][g + 1] = b->off[t][g] + len;
        }
    }
    return true;
}

/* Rank `rank`'s share of b (rows r0 .. r0+nr): offsets from a base of 3..
 * (ids before it -7), as a batch in mine. */
static bool share_make(gbatch *sh, const gbatch *b, int T, int64_t r0, int64_t nr, int rank,
                       rap_model_batch *mine)
{
    memset(sh, 0, sizeof *sh);
    memset(mine, 0, sizeof *mine);
    mine->rows = nr;
    for (int t = 0; t < T; t++) {
        int64_t base = 3 + rank + t % 5, cnt = b->off[t][r0 + nr] - b->off[t][r0];
        sh->off[t] = malloc(sizeof(int64_t) * (size_t)(nr + 1));
        sh->ids[t] = malloc(sizeof(int64_t) * (size_t)(base + cnt + 1));
        if (!sh->off[t] || !sh->ids[t])
            return false;
        for (int64_t i = 0; i <= nr; i++)
            sh->off[t][i] = base + b->off[t][r0 + i] - b->off[t][r0];
        for (int64_t j = 0; j < base; j++)
            sh->ids[t][j] = -7;
        memcpy(sh->ids[t] + base, b->ids[t] + b->off[t][r0], sizeof(int64_t) * (size_t)cnt);
        sh->ids[t][base + cnt] = -7;
        mine->off[t] = sh->off[t];
        mine->ids[t] = sh->ids[t];
    }
    return true;
}

/* g (host pointers) == the global batch e's tables this rank holds, NULL
 * for the others; differences counted (the first few printed). */
static int compare(const ids_case *k, int rank, const rap_model_batch *g, const gbatch *e,
                   int64_t n, const char *what)
{
    int bad = 0;
    if (g->rows != n)
        bad++;
    for (int t = 0; t < k->T; t++) {
        if (!holder(k, rank, t)) {
            bad += g->off[t] != NULL || g->ids[t] != NULL;
            continue;
        }
        if (!g->off[t] || !g->ids[t]) {
            bad++;
            continue;
        }
        int d = memcmp(g->off[t], e->off[t], sizeof(int64_t) * (size_t)(n + 1)) != 0;
        if (!d)
            d = memcmp(g->ids[t], e->ids[t], sizeof(int64_t) * (size_t)e->off[t][n]) != 0;
        if (d && bad < 3)
            printf("    %s: R = %d K = %d rank %d n = %lld: table %d differs\n", what, k->R,
                   k->K, rank, (long long)n, t);
        bad += d;
    }
    return bad;
}

/* Bytes of one run counted table by table: every holder p of t other
 * than the sender s gets ns * (1 + K) words from s. */
static void count_bytes(const ids_case *k, int rank, int64_t n, int64_t *me, int64_t *all)
{
    for (int t = 0; t < k->T; t++)
        for (int p = 0; p < k->R; p++) {
            if (!holder(k, p, t))
                continue;
            for (int s = 0; s < k->R; s++) {
                int64_t r0, ns;
                rap_hybrid_rows(n, k->R, s, &r0, &ns);
                if (s == p)
                    continue;
                *all += 8 * ns * (1 + k->K);
                if (s == rank)
                    *me += 8 * ns * (1 + k->K);
            }
        }
}

#ifdef RAP_HAVE_CUDA
/* The device side of one rank's share: per table, offsets and ids. */
typedef struct {
    int64_t *off[MAX_T]; /* (sm+1) */
    int64_t *ids[MAX_T]; /* (8 + sm*(K+1)) */
    rap_model_batch mine; /* the share, device pointers */
} dev_share;

static rap_status dev_share_alloc(dev_share *d, int T, int64_t sm, int K)
{
    memset(d, 0, sizeof *d);
    for (int t = 0; t < T; t++) {
        if (cudaMalloc((void **)&d->off[t], sizeof(int64_t) * (size_t)(sm + 1)) != cudaSuccess ||
            cudaMalloc((void **)&d->ids[t], sizeof(int64_t) * (size_t)(16 + sm * (K + 1))) !=
                cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: cudaMalloc of a share");
    }
    return RAP_OK;
}

static void dev_share_free(dev_share *d, int T)
{
    for (int t = 0; t < T; t++) {
        cudaFree(d->off[t]);
        cudaFree(d->ids[t]);
    }
}

/* Uploads the host share (mine: host pointers, nr rows) into d->mine. */
static rap_status dev_share_upload(dev_share *d, int T, const rap_model_batch *mine)
{
    int64_t nr = mine->rows;
    memset(&d->mine, 0, sizeof d->mine);
    d->mine.rows = nr;
    for (int t = 0; t < T; t++) {
        size_t nid = (size_t)(mine->off[t][nr] + 1);
        if (cudaMemcpy(d->off[t], mine->off[t], sizeof(int64_t) * (size_t)(nr + 1),
                       cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(d->ids[t], mine->ids[t], sizeof(int64_t) * nid, cudaMemcpyHostToDevice) !=
                cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: upload of a share");
        d->mine.off[t] = d->off[t];
        d->mine.ids[t] = d->ids[t];
    }
    return RAP_OK;
}

/* The GPU result g (device pointers) downloaded into h (host arrays
 * (Bg+1) and (Bg*K) per table), as host batch hb. */
static rap_status download(const rap_model_batch *g, int T, int64_t Bg, int K, gbatch *h,
                           rap_model_batch *hb)
{
    memset(hb, 0, sizeof *hb);
    hb->rows = g->rows;
    for (int t = 0; t < T; t++) {
        if (!g->off[t])
            continue;
        if (!h->off[t]) {
            h->off[t] = malloc(sizeof(int64_t) * (size_t)(Bg + 1));
            h->ids[t] = malloc(sizeof(int64_t) * (size_t)(Bg * K + 1));
            if (!h->off[t] || !h->ids[t])
                return RAP_ERR_NOMEM;
        }
        if (cudaMemcpy(h->off[t], g->off[t], sizeof(int64_t) * (size_t)(g->rows + 1),
                       cudaMemcpyDeviceToHost) != cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: download of offsets");
        int64_t nid = h->off[t][g->rows];
        if (nid < 0 || nid > Bg * K)
            return rap_fail(RAP_ERR_INTERNAL, "test: table %d: %lld ids", t, (long long)nid);
        if (nid > 0 && cudaMemcpy(h->ids[t], g->ids[t], sizeof(int64_t) * (size_t)nid,
                                  cudaMemcpyDeviceToHost) != cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: download of ids");
        hb->off[t] = h->off[t];
        hb->ids[t] = h->ids[t];
    }
    return RAP_OK;
}
#endif

/* ------------------------------------------------------------ one rank */

/* The steps: n = Bg, a short last batch, n = 2 and n = 1 (ranks without
 * rows when R > n), a step where rank R-1's first row has K+1 ids in
 * bad_table, then one more normal step. */
static rap_status ids_rank(rap_test_rank *x)
{
    const ids_case *k = x->arg;
    int R = k->R, T = k->T, K = k->K, me = x->rank;
    int64_t Bg = k->Bg;
    bool holds[8 * MAX_T];
    for (int p = 0; p < R; p++)
        for (int t = 0; t < T; t++)
            holds[p * T + t] = holder(k, p, t);
    rap_ids_xchg *cx = NULL;
    rap_status st = rap_ids_xchg_create(x->c, RAP_GPU, T, holds, Bg, K, &cx);
    x->bad += st != RAP_ERR_ARG || cx != NULL; /* a GPU exchange needs a nccl comm */
    st = RAP_OK;
    RAP_TRY(rap_ids_xchg_create(x->c, RAP_CPU, T, holds, Bg, K, &cx));
    rap_comm *nc = NULL;
    rap_ids_xchg *gx = NULL;
    gbatch dl;
    memset(&dl, 0, sizeof dl);
#ifdef RAP_HAVE_CUDA
    dev_share ds;
    memset(&ds, 0, sizeof ds);
    if (k->gpu) {
        st = rap_comm_nccl_create(x->c, me, NULL, &nc);
        if (st == RAP_OK)
            st = rap_ids_xchg_create(nc, RAP_GPU, T, holds, Bg, K, &gx);
        if (st == RAP_OK)
            st = dev_share_alloc(&ds, T, (Bg + R - 1) / R, K);
    }
#endif
    int64_t steps[] = {Bg, Bg - 3, 2, 1, Bg, Bg - 1};
    int nsteps = (int)(sizeof steps / sizeof steps[0]), bad_step = 4;
    int64_t me_bytes = 0, all_bytes = 0;
    static rap_model_batch mine[8], g[8]; /* per rank (64 KiB each) */
#ifdef RAP_HAVE_CUDA
    static rap_model_batch hg[8];
#endif
    for (int s = 0; st == RAP_OK && s < nsteps; s++) {
        int64_t n = steps[s], r0, nr, bad_row = -1;
        if (s == bad_step) {
            int64_t b0, bn;
            rap_hybrid_rows(n, R, R - 1, &b0, &bn);
            bad_row = b0;
        }
        gbatch glob, want, sh;
        memset(&sh, 0, sizeof sh);
        bool ok = gb_make(&glob, T, K, n, 11 + (uint64_t)s, bad_row, k->bad_table, false) &&
                  gb_make(&want, T, K, n, 11 + (uint64_t)s, bad_row, k->bad_table, true);
        rap_hybrid_rows(n, R, me, &r0, &nr);
        ok = ok && share_make(&sh, &glob, T, r0, nr, me, &mine[me]);
        if (!ok)
            st = rap_fail(RAP_ERR_NOMEM, "test: batch");
        /* CPU */
        if (st == RAP_OK) {
            bool expect_bad = s == bad_step && me == R - 1;
            rap_status rs = rap_ids_xchg_run(cx, &mine[me], n, &g[me]);
            if (expect_bad) {
                char want_msg[64];
                snprintf(want_msg, sizeof want_msg, "table %d:", k->bad_table);
                x->bad += rs != RAP_ERR_DATA || !strstr(rap_last_error(), want_msg);
                if (rs != RAP_ERR_DATA)
                    printf("    R = %d rank %d: overflow gave %s\n", R, me, rap_status_name(rs));
            } else {
                st = rs;
            }
        }
        if (st == RAP_OK) {
            x->bad += compare(k, me, &g[me], &want, n, "CPU");
            count_bytes(k, me, n, &me_bytes, &all_bytes);
            x->steps++;
        }
#ifdef RAP_HAVE_CUDA
        if (st == RAP_OK && k->gpu) {
            st = dev_share_upload(&ds, T, &mine[me]);
            rap_model_batch dg;
            if (st == RAP_OK)
                st = rap_ids_xchg_run(gx, &ds.mine, n, &dg);
            if (st == RAP_OK)
                st = rap_comm_wait(nc, NULL, "test id exchange");
            if (st == RAP_OK)
                st = download(&dg, T, Bg, K, &dl, &hg[me]);
            if (st == RAP_OK) {
                x->bad += compare(k, me, &hg[me], &want, n, "GPU");
                /* element for element with the CPU reference */
                rap_model_batch *c = &g[me];
                for (int t = 0; t < T; t++)
                    if (c->off[t])
                        x->bad += memcmp(c->off[t], hg[me].off[t],
                                         sizeof(int64_t) * (size_t)(n + 1)) != 0 ||
                                  memcmp(c->ids[t], hg[me].ids[t],
                                         sizeof(int64_t) * (size_t)c->off[t][n]) != 0;
            }
        }
#endif
        gb_free(&glob, T);
        gb_free(&want, T);
        gb_free(&sh, T);
    }
    if (st == RAP_OK) {
        int64_t bm = -1, ba = -1;
        rap_ids_xchg_bytes(cx, &bm, &ba);
        if (bm != me_bytes || ba != all_bytes) {
            printf("    R = %d K = %d rank %d: bytes %lld / %lld, counted %lld / %lld\n", R, K,
                   me, (long long)bm, (long long)ba, (long long)me_bytes, (long long)all_bytes);
            x->bad++;
        }
        x->bad += R > 1 && all_bytes <= 0;
        /* the overflow on rank R-1 only */
        rap_status cs = rap_ids_xchg_check(cx);
        x->bad += cs != (me == R - 1 ? RAP_ERR_DATA : RAP_OK);
        /* n outside 1..Bg: refused on every rank before any collective */
        rap_model_batch gg;
        x->bad += rap_ids_xchg_run(cx, &mine[me], Bg + 1, &gg) != RAP_ERR_ARG;
        x->bad += rap_ids_xchg_run(cx, &mine[me], 0, &gg) != RAP_ERR_ARG;
    }
#ifdef RAP_HAVE_CUDA
    if (st == RAP_OK && k->gpu) {
        int64_t bm = -1, ba = -1;
        rap_ids_xchg_bytes(gx, &bm, &ba);
        x->bad += bm != me_bytes || ba != all_bytes;
        rap_status cs = rap_ids_xchg_check(gx);
        char want_msg[64];
        snprintf(want_msg, sizeof want_msg, "table %d:", k->bad_table);
        if (me == R - 1) {
            x->bad += cs != RAP_ERR_DATA || !strstr(rap_last_error(), want_msg);
            if (cs != RAP_ERR_DATA)
                printf("    GPU R = %d rank %d: check gave %s\n", R, me, rap_status_name(cs));
        } else {
            x->bad += cs != RAP_OK;
        }
    }
    if (nc)
        rap_comm_wait(nc, NULL, "test id exchange end");
    dev_share_free(&ds, T);
#endif
    gb_free(&dl, T);
    rap_ids_xchg_free(gx);
    rap_ids_xchg_free(cx);
    rap_comm_free(nc);
    return st;
}

/* ------------------------------------------------------------ tests */

RAP_TEST(ids_cpu_threads)
{
    /* R = 1..4 thread ranks, K = 1 and 3, Bg = 10: steps of 10, 7, 2, 1
     * rows (ranks without rows for R > 2), table 0 held by two ranks, rank
     * 1 holding none (R >= 3); the overflow in table 2. */
    for (int R = 1; R <= 4; R++)
        for (int K = 1; K <= 3; K += 2) {
            ids_case k = {.R = R, .T = 4, .K = K, .Bg = 10, .gpu = false, .bad_table = 2};
            rap_test_rank x[8];
            if (!rap_test_run_ranks(t, R, 20, ids_rank, &k, x))
                return;
            for (int r = 0; r < R; r++) {
                CHECK_MSG(x[r].bad == 0, "R = %d K = %d rank %d: %d wrong values", R, K, r,
                          x[r].bad);
                CHECK(x[r].steps == 6);
            }
        }
    printf("    R = 1..4 thread ranks, K = 1, 3: ids == concatenated shares, bytes, overflow\n");
}

RAP_TEST(ids_cpu_pack_layout)
{
    /* The packed block of one table, K = 2, 3 rows of 0, 3 (cut) and 2
     * ids, offsets from 5, into blocks 1 and 0 of the send buffer. */
    int64_t off[4] = {5, 5, 8, 10};
    int64_t ids[10] = {-1, -1, -1, -1, -1, 10, 11, 12, 13, 14};
    int blk[2] = {1, 0};
    int64_t send[2 * 9], bad_row = -2;
    memset(send, 0xff, sizeof send);
    int64_t most = rap_ids_pack_cpu(off, ids, blk, 2, 3, 2, send, &bad_row);
    CHECK(most == 3);
    CHECK(bad_row == 1);
    int64_t want[9] = {0, 2, 2, 0, 0, 10, 11, 13, 14};
    CHECK(memcmp(send, want, sizeof want) == 0);
    CHECK(memcmp(send + 9, want, sizeof want) == 0);
    /* assemble: R = 2, n = 3 (shares of 2 and 1 rows), one held table */
    int64_t recv[9] = {/* rank 0: 2 rows */ 1, 2, 7, 0, 8, 9,
                       /* rank 1: 1 row */ 1, 6, 0};
    int64_t goff[4], gids[6];
    rap_ids_assemble_cpu(recv, 3, 2, 1, 2, 3, goff, gids);
    int64_t woff[4] = {0, 1, 3, 4}, wids[4] = {7, 8, 9, 6};
    CHECK(memcmp(goff, woff, sizeof woff) == 0);
    CHECK(memcmp(gids, wids, sizeof wids) == 0);
}

RAP_TEST(ids_gpu_nccl)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
#ifdef RAP_HAVE_CUDA
    int ngpu = 0;
    cudaGetDeviceCount(&ngpu);
    /* one GPU: R = 1 (4 tables; 130 tables: two pack launches); two: R = 2 */
    ids_case cases[] = {
        {.R = 1, .T = 4, .K = 3, .Bg = 1000, .gpu = true, .bad_table = 2},
        {.R = 1, .T = 130, .K = 2, .Bg = 50, .gpu = true, .bad_table = 129},
        {.R = 2, .T = 4, .K = 1, .Bg = 999, .gpu = true, .bad_table = 2},
        {.R = 2, .T = 4, .K = 3, .Bg = 1000, .gpu = true, .bad_table = 0},
        {.R = 2, .T = 130, .K = 2, .Bg = 51, .gpu = true, .bad_table = 128},
    };
    int done = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ids_case *k = &cases[i];
        if (k->R > ngpu)
            continue;
        rap_test_rank x[8];
        if (!rap_test_run_ranks(t, k->R, 60, ids_rank, k, x))
            return;
        for (int r = 0; r < k->R; r++) {
            CHECK_MSG(x[r].bad == 0, "R = %d T = %d K = %d rank %d: %d wrong values", k->R, k->T,
                      k->K, r, x[r].bad);
            CHECK(x[r].steps == 6);
        }
        done++;
    }
    if (ngpu < 2)
        printf("    %d GPU: R = 1 only (R = 2 needs two GPUs)\n", ngpu);
    printf("    %d GPU case(s): nccl exchange == CPU reference == concatenated shares, bytes, "
           "overflow flag\n", done);
#endif
}
