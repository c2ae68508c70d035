/*
 * test_moves.c -- src/dist/moves: the placement planner's moves. A random
 * "truth" global batch and a random valid assignment of who computes which
 * unit (dense column segments of each share, sparse (table, share) per
 * holder: local or from another rank); every rank's input is the truth
 * with every value it did not compute poisoned (dense sentinels, garbage
 * lengths and ids in the other rows, offsets from a non-zero base, NULL
 * tables it computed nothing of). After a run: held tables equal the truth
 * (cut to L where assembled), received dense cells equal the truth, all
 * other dense cells untouched, bytes against the formula, the L overflow
 * on exactly the ranks that pack or assemble the row. The wire layout seen
 * by a raw receiver; invalid configs refused with messages. GPU (kernels
 * over a threads comm on one GPU) against the CPU path element for
 * element.
 */
#include "test.h"

#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/moves.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_R 4
#define MAX_T 4
#define MAX_K 8
#define MAX_ND 8
#define MAX_UNITS 512

typedef struct {
    int R, G, K, T, ND, L;
    int64_t Bg;
    uint64_t seed;
    bool gpu;  /* also dev RAP_GPU over the threads comm (one GPU), against the CPU */
    bool nccl; /* gpu: over a nccl comm instead, rank r on GPU r */
} mv_case;

/* Who computes what, the same on every rank. */
typedef struct {
    bool holds[MAX_R][MAX_T];
    int src[MAX_R][MAX_T][MAX_K]; /* for holder d: the rank computing (t, k); d = local */
    int nseg[MAX_K];              /* dense column segments of share k */
    int scol[MAX_K][MAX_ND], sw[MAX_K][MAX_ND], sprod[MAX_K][MAX_ND];
    int bad_t, bad_k;             /* the overflow step's table and share */
} assign;

static uint64_t hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    return rap_mix64(seed ^ rap_mix64(a * 1000003 + rap_mix64(b * 7919 + rap_mix64(c))));
}

static int64_t rows_of(int64_t n, int K, int k, int64_t *r0)
{
    int64_t q = n / K, e = n % K;
    *r0 = k * q + (k < e ? k : e);
    return q + (k < e);
}

/* Holders: table 0 by ranks 0 and R-1 (two holders), 1 by rank 1 % R (all
 * shares local), 2 by R-1, 3 by rank 2 (or 0) receiving every share.
 * Shares of tables 0 and 2 computed by a random rank (the holder itself
 * half the time or so); dense columns of share k cut into segments of 1..3
 * columns, each computed by a random rank (share 0's first by another rank
 * than its home), consumed by the home rank k/G. */
static void make_assign(const mv_case *c, assign *a)
{
    int R = c->R;
    uint64_t s = c->seed * 77 + 1;
    memset(a, 0, sizeof *a);
    for (int d = 0; d < R; d++)
        for (int t = 0; t < c->T; t++) {
            bool h = t == 0 ? d == 0 || d == R - 1 : t == 1 ? d == 1 % R : t == 2 ? d == R - 1
                                                                         : d == (R > 2 ? 2 : 0);
            a->holds[d][t] = h;
            for (int k = 0; k < c->K; k++) {
                int p = d;
                if (h && t == 3 && R > 1)
                    p = (d + 1 + (int)(rap_splitmix64(&s) % (uint64_t)(R - 1))) % R;
                else if (h && t != 1)
                    p = (int)(rap_splitmix64(&s) % (uint64_t)R);
                a->src[d][t][k] = h ? p : -1;
            }
        }
    for (int k = 0; k < c->K; k++) {
        int col = 0;
        while (col < c->ND) {
            int w = 1 + (int)(rap_splitmix64(&s) % 3), i = a->nseg[k]++;
            if (w > c->ND - col)
                w = c->ND - col;
            a->scol[k][i] = col;
            a->sw[k][i] = w;
            a->sprod[k][i] = (int)(rap_splitmix64(&s) % (uint64_t)R);
            col += w;
        }
    }
    a->sprod[0][0] = (0 / c->G + 1) % R; /* at least one dense unit moves (R > 1) */
    /* overflow: table 0, the first share some rank sends to a holder */
    a->bad_t = 0;
    a->bad_k = 0;
    for (int k = c->K - 1; k >= 0; k--)
        for (int d = 0; d < R; d++)
            if (a->holds[d][0] && a->src[d][0][k] != d)
                a->bad_k = k;
}

static uint64_t all_bits(int K)
{
    return K == 64 ? ~0ULL : (1ULL << K) - 1;
}

/* Rank me's config lists (shuffled: the module sorts them). */
static int make_lists(const mv_case *c, const assign *a, int me, rap_move *send, int *ns,
                      rap_move *recv, int *nr, uint64_t *local, bool *holds)
{
    *ns = *nr = 0;
    for (int t = 0; t < c->T; t++) {
        holds[t] = a->holds[me][t];
        local[t] = 0;
    }
    for (int d = 0; d < c->R; d++)
        for (int t = 0; t < c->T; t++)
            for (int k = 0; k < c->K; k++) {
                if (!a->holds[d][t])
                    continue;
                int p = a->src[d][t][k];
                if (d == me && p == me)
                    local[t] |= 1ULL << k;
                else if (d == me)
                    recv[(*nr)++] = (rap_move){RAP_MOVE_SPARSE, t, 0, k, p};
                else if (p == me)
                    send[(*ns)++] = (rap_move){RAP_MOVE_SPARSE, t, 0, k, d};
            }
    for (int k = 0; k < c->K; k++) {
        int home = k / c->G;
        for (int i = 0; i < a->nseg[k]; i++) {
            int p = a->sprod[k][i];
            if (p == home)
                continue;
            rap_move m = {RAP_MOVE_DENSE, a->scol[k][i], a->sw[k][i], k, 0};
            if (home == me) {
                m.peer = p;
                recv[(*nr)++] = m;
            } else if (p == me) {
                m.peer = home;
                send[(*ns)++] = m;
            }
        }
    }
    uint64_t s = hash4(c->seed, (uint64_t)me, 5, 5);
    for (int pass = 0; pass < 2; pass++) {
        rap_move *l = pass ? recv : send;
        int n = pass ? *nr : *ns;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(rap_splitmix64(&s) % (uint64_t)(i + 1));
            rap_move tmp = l[i];
            l[i] = l[j];
            l[j] = tmp;
        }
    }
    return *ns + *nr;
}

/* Does rank me compute column col of share k? */
static bool dense_mine(const assign *a, int me, int k, int col)
{
    for (int i = 0; i < a->nseg[k]; i++)
        if (col >= a->scol[k][i] && col < a->scol[k][i] + a->sw[k][i])
            return a->sprod[k][i] == me;
    return false;
}

/* Does rank me receive column col of share k? */
static bool dense_recv(const mv_case *c, const assign *a, int me, int k, int col)
{
    return k / c->G == me && !dense_mine(a, me, k, col) && !dense_mine(a, k / c->G, k, col);
}

/* Does rank me compute (t, k) (for itself or another holder)? */
static bool sparse_mine(const mv_case *c, const assign *a, int me, int t, int k)
{
    for (int d = 0; d < c->R; d++)
        if (a->holds[d][t] && a->src[d][t][k] == me)
            return true;
    return false;
}

static bool all_local(const mv_case *c, const assign *a, int me, int t)
{
    if (!a->holds[me][t])
        return false;
    for (int k = 0; k < c->K; k++)
        if (a->src[me][t][k] != me)
            return false;
    return true;
}

/* Whether rank me packs or assembles-locally the rows of (t, k). */
static bool reports(const mv_case *c, const assign *a, int me, int t, int k)
{
    for (int d = 0; d < c->R; d++)
        if (d != me && a->holds[d][t] && a->src[d][t][k] == me)
            return true;
    return a->holds[me][t] && a->src[me][t][k] == me && !all_local(c, a, me, t);
}

/* ------------------------------------------------------------ batches */

typedef struct {
    float *dense;          /* (n, ND) */
    float *label;          /* (n) */
    int64_t *off[MAX_T];   /* (n+1) */
    int64_t *ids[MAX_T];
} batch;

static void batch_free(batch *b)
{
    free(b->dense);
    free(b->label);
    for (int t = 0; t < MAX_T; t++) {
        free(b->off[t]);
        free(b->ids[t]);
    }
    memset(b, 0, sizeof *b);
}

/* The truth: dense values from (seed, row, col), 0..L ids a row (row % 5
 * == 0 none, == 1 L), row bad_row of table bad_t L+1 ids. */
static bool truth_make(const mv_case *c, int64_t n, uint64_t seed, int bad_t, int64_t bad_row,
                       batch *b)
{
    memset(b, 0, sizeof *b);
    b->dense = malloc(sizeof(float) * (size_t)(n * c->ND + 1));
    b->label = malloc(sizeof(float) * (size_t)n);
    if (!b->dense || !b->label)
        return false;
    for (int64_t i = 0; i < n * c->ND; i++)
        b->dense[i] = (float)(hash4(seed, 1, (uint64_t)i, 0) % 20001) / 100.0f - 100.0f;
    for (int64_t i = 0; i < n; i++)
        b->label[i] = (float)(i % 2);
    for (int t = 0; t < c->T; t++) {
        b->off[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        b->ids[t] = malloc(sizeof(int64_t) * (size_t)(n * (c->L + 1) + 1));
        if (!b->off[t] || !b->ids[t])
            return false;
        b->off[t][0] = 0;
        for (int64_t g = 0; g < n; g++) {
            int64_t len = g % 5 == 0 ? 0 : g % 5 == 1 ? c->L
                          : (int64_t)(hash4(seed, 2, (uint64_t)t, (uint64_t)g) %
                                      (uint64_t)(c->L + 1));
            if (t == bad_t && g == bad_row)
                len = c->L + 1;
            for (int64_t j = 0; j < len; j++)
                b->ids[t][b->off[t][g] + j] =
                    1000000 * t + (int64_t)(hash4(seed, 3, (uint64_t)(t * 100000 + g),
                                                  (uint64_t)j) % 1000000);
            b->off[t][g + 1] = b->off[t][g] + len;
        }
    }
    return true;
}

/* Rank me's input: the truth where me computed it, poison elsewhere. */
static bool input_make(const mv_case *c, const assign *a, int me, int64_t n, const batch *tr,
                       uint64_t seed, batch *in)
{
    int K = c->K, ND = c->ND, L = c->L;
    memset(in, 0, sizeof *in);
    in->dense = malloc(sizeof(float) * (size_t)(n * ND + 1));
    in->label = malloc(sizeof(float) * (size_t)n);
    if (!in->dense || !in->label)
        return false;
    memcpy(in->label, tr->label, sizeof(float) * (size_t)n);
    for (int k = 0; k < K; k++) {
        int64_t r0, nr = rows_of(n, K, k, &r0);
        for (int64_t i = r0; i < r0 + nr; i++)
            for (int col = 0; col < ND; col++)
                in->dense[i * ND + col] = dense_mine(a, me, k, col)
                                              ? tr->dense[i * ND + col]
                                              : -1.0e6f - (float)(i * ND + col);
    }
    for (int t = 0; t < c->T; t++) {
        bool any = false;
        for (int k = 0; k < K; k++)
            any = any || sparse_mine(c, a, me, t, k);
        if (!any)
            continue; /* NULL: nothing of it read */
        int64_t base = 5 + me + t;
        in->off[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        in->ids[t] = malloc(sizeof(int64_t) * (size_t)(base + n * (L + 3) + 1));
        if (!in->off[t] || !in->ids[t])
            return false;
        for (int64_t j = 0; j < base; j++)
            in->ids[t][j] = -7;
        in->off[t][0] = base;
        for (int k = 0; k < K; k++) {
            int64_t r0, nr = rows_of(n, K, k, &r0);
            bool mine = sparse_mine(c, a, me, t, k);
            for (int64_t g = r0; g < r0 + nr; g++) {
                int64_t o = in->off[t][g], len;
                if (mine) {
                    len = tr->off[t][g + 1] - tr->off[t][g];
                    memcpy(in->ids[t] + o, tr->ids[t] + tr->off[t][g],
                           sizeof(int64_t) * (size_t)len);
                } else { /* garbage: up to L+2 ids (never read) */
                    len = (int64_t)(hash4(seed, 9, (uint64_t)(me * 1000 + t), (uint64_t)g) %
                                    (uint64_t)(L + 3));
                    for (int64_t j = 0; j < len; j++)
                        in->ids[t][o + j] = -1000 - j;
                }
                in->off[t][g + 1] = o + len;
            }
        }
    }
    return true;
}

static void as_model_batch(const batch *b, int64_t n, rap_model_batch *mb)
{
    memset(mb, 0, sizeof *mb);
    mb->rows = n;
    mb->dense = b->dense;
    mb->label = b->label;
    for (int t = 0; t < MAX_T; t++) {
        mb->off[t] = b->off[t];
        mb->ids[t] = b->ids[t];
    }
}

/* g (host) against the truth: held tables (assembled cut to L, all-local
 * mb's arrays as they are), NULL others; dense received == truth, the rest
 * == the input before the run. Counts wrong values. */
static int check_result(const mv_case *c, const assign *a, int me, int64_t n, const batch *tr,
                        const float *dense0, const float *dense, const rap_model_batch *mb,
                        const rap_model_batch *g)
{
    int bad = 0, K = c->K, ND = c->ND, L = c->L;
    bad += g->rows != n || g->dense != dense || g->label != mb->label;
    for (int k = 0; k < K; k++) {
        int64_t r0, nr = rows_of(n, K, k, &r0);
        for (int64_t i = r0; i < r0 + nr; i++)
            for (int col = 0; col < ND; col++) {
                float want = dense_recv(c, a, me, k, col) ? tr->dense[i * ND + col]
                                                          : dense0[i * ND + col];
                if (memcmp(&want, &dense[i * ND + col], sizeof want) != 0) {
                    if (bad < 3)
                        printf("    R = %d rank %d n = %lld: dense [%lld, %d] = %g, want %g\n",
                               c->R, me, (long long)n, (long long)i, col,
                               (double)dense[i * ND + col], (double)want);
                    bad++;
                }
            }
    }
    for (int t = 0; t < c->T; t++) {
        if (!a->holds[me][t]) {
            bad += g->off[t] != NULL || g->ids[t] != NULL;
            continue;
        }
        if (!g->off[t] || !g->ids[t]) {
            bad++;
            continue;
        }
        bool pass = all_local(c, a, me, t);
        if (pass && (g->off[t] != mb->off[t] || g->ids[t] != mb->ids[t]))
            bad++;
        int64_t d = 0;
        if (!pass && g->off[t][0] != 0)
            d++;
        for (int64_t r = 0; r < n && !d; r++) {
            int64_t len = tr->off[t][r + 1] - tr->off[t][r], m = !pass && len > L ? L : len;
            d += g->off[t][r + 1] - g->off[t][r] != m; /* row r at ids[off[r] ..) either way */
            for (int64_t j = 0; j < m && !d; j++)
                d += g->ids[t][g->off[t][r] + j] != tr->ids[t][tr->off[t][r] + j];
        }
        if (d && bad < 3)
            printf("    R = %d rank %d n = %lld: table %d differs\n", c->R, me, (long long)n, t);
        bad += d != 0;
    }
    return bad;
}

/* ------------------------------------------------------------ GPU side */

#ifdef RAP_HAVE_CUDA
/* A rank's input on the device (sized for Bg rows). */
typedef struct {
    float *dense, *label;
    int64_t *off[MAX_T], *ids[MAX_T];
    rap_model_batch mb; /* device pointers, NULL tables as the host input's */
} dbatch;

static rap_status dbatch_alloc(dbatch *d, const mv_case *c)
{
    memset(d, 0, sizeof *d);
    size_t nd = sizeof(float) * (size_t)(c->Bg * c->ND + 1);
    if (cudaMalloc((void **)&d->dense, nd) != cudaSuccess ||
        cudaMalloc((void **)&d->label, sizeof(float) * (size_t)c->Bg) != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "test: cudaMalloc of a batch");
    for (int t = 0; t < c->T; t++)
        if (cudaMalloc((void **)&d->off[t], sizeof(int64_t) * (size_t)(c->Bg + 1)) !=
                cudaSuccess ||
            cudaMalloc((void **)&d->ids[t], sizeof(int64_t) * (size_t)(32 + c->Bg * (c->L + 3))) !=
                cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: cudaMalloc of a table");
    return RAP_OK;
}

static void dbatch_free(dbatch *d)
{
    cudaFree(d->dense);
    cudaFree(d->label);
    for (int t = 0; t < MAX_T; t++) {
        cudaFree(d->off[t]);
        cudaFree(d->ids[t]);
    }
}

static rap_status dbatch_upload(dbatch *d, const mv_case *c, const batch *in, int64_t n)
{
    memset(&d->mb, 0, sizeof d->mb);
    d->mb.rows = n;
    d->mb.dense = d->dense;
    d->mb.label = d->label;
    if (cudaMemcpy(d->dense, in->dense, sizeof(float) * (size_t)(n * c->ND),
                   cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(d->label, in->label, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice) !=
            cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "test: upload of dense");
    for (int t = 0; t < c->T; t++) {
        if (!in->off[t])
            continue;
        if (cudaMemcpy(d->off[t], in->off[t], sizeof(int64_t) * (size_t)(n + 1),
                       cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(d->ids[t], in->ids[t], sizeof(int64_t) * (size_t)in->off[t][n],
                       cudaMemcpyHostToDevice) != cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: upload of table %d", t);
        d->mb.off[t] = d->off[t];
        d->mb.ids[t] = d->ids[t];
    }
    return RAP_OK;
}

/* The GPU result dg (device) against the CPU result g (host, after the CPU
 * run; dense_cpu its dense), element for element. */
static rap_status compare_gpu(const mv_case *c, int me, int64_t n, const dbatch *d,
                              const rap_model_batch *dg, const rap_model_batch *mb,
                              const rap_model_batch *g, const float *dense_cpu, int *bad)
{
    size_t nd = (size_t)(n * c->ND);
    float *hd = malloc(sizeof(float) * (nd + 1));
    int64_t *ho = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int64_t *hi = malloc(sizeof(int64_t) * (size_t)(n * c->L + 1));
    rap_status st = hd && ho && hi ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK && cudaMemcpy(hd, d->dense, sizeof(float) * nd, cudaMemcpyDeviceToHost) !=
                            cudaSuccess)
        st = rap_fail(RAP_ERR_CUDA, "test: download of dense");
    if (st == RAP_OK) {
        *bad += dg->rows != n || dg->dense != d->dense || dg->label != d->label;
        int db = memcmp(hd, dense_cpu, sizeof(float) * nd) != 0;
        if (db)
            printf("    GPU R = %d rank %d n = %lld: dense differs from the CPU's\n", c->R, me,
                   (long long)n);
        *bad += db;
    }
    for (int t = 0; st == RAP_OK && t < c->T; t++) {
        if (!g->off[t]) {
            *bad += dg->off[t] != NULL || dg->ids[t] != NULL;
            continue;
        }
        if (g->off[t] == mb->off[t]) { /* passed through on the CPU: on the GPU too */
            *bad += dg->off[t] != d->off[t] || dg->ids[t] != d->ids[t];
            continue;
        }
        if (!dg->off[t] || dg->off[t] == d->off[t]) {
            *bad += 1;
            continue;
        }
        if (cudaMemcpy(ho, dg->off[t], sizeof(int64_t) * (size_t)(n + 1),
                       cudaMemcpyDeviceToHost) != cudaSuccess) {
            st = rap_fail(RAP_ERR_CUDA, "test: download of offsets");
            break;
        }
        int64_t nid = ho[n];
        if (nid < 0 || nid > n * c->L || nid != g->off[t][n]) {
            *bad += 1;
            continue;
        }
        if (nid > 0 && cudaMemcpy(hi, dg->ids[t], sizeof(int64_t) * (size_t)nid,
                                  cudaMemcpyDeviceToHost) != cudaSuccess) {
            st = rap_fail(RAP_ERR_CUDA, "test: download of ids");
            break;
        }
        int dt = memcmp(ho, g->off[t], sizeof(int64_t) * (size_t)(n + 1)) != 0 ||
                 memcmp(hi, g->ids[t], sizeof(int64_t) * (size_t)nid) != 0;
        if (dt)
            printf("    GPU R = %d rank %d n = %lld: table %d differs from the CPU's\n", c->R, me,
                   (long long)n, t);
        *bad += dt;
    }
    free(hd);
    free(ho);
    free(hi);
    return st;
}
#endif

/* ------------------------------------------------------------ one rank */

/* Steps: n = Bg, a short batch not divisible by K, 3 and 1 rows (empty
 * shares), Bg with the overflow row, Bg - 1. */
static rap_status moves_rank(rap_test_rank *x)
{
    const mv_case *c = x->arg;
    int me = x->rank, K = c->K, L = c->L;
    int64_t Bg = c->Bg;
    assign a;
    make_assign(c, &a);
    rap_move send[MAX_UNITS], recv[MAX_UNITS];
    uint64_t local[MAX_T];
    bool holds[MAX_T];
    int ns, nr;
    make_lists(c, &a, me, send, &ns, recv, &nr, local, holds);
    rap_moves_config cfg = {.K = K, .T = c->T, .ND = c->ND, .Bg = Bg, .L = L, .send = send,
                            .n_send = ns, .recv = recv, .n_recv = nr, .local = local,
                            .holds = holds};
    rap_moves *cx = NULL, *gx = NULL;
    rap_comm *nc = NULL;
    RAP_TRY(rap_moves_create(x->c, RAP_CPU, &cfg, &cx));
    rap_model_batch *mb = malloc(sizeof *mb), *g = malloc(sizeof *g), *dg = malloc(sizeof *dg);
    rap_status st = mb && g && dg ? RAP_OK : rap_fail(RAP_ERR_NOMEM, "test: batches");
#ifdef RAP_HAVE_CUDA
    dbatch *d = NULL;
    if (st == RAP_OK && c->gpu) {
        d = malloc(sizeof *d);
        st = d ? RAP_OK : RAP_ERR_NOMEM;
        if (st == RAP_OK && cudaSetDevice(c->nccl ? me : 0) != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "test: cudaSetDevice");
        if (st == RAP_OK && c->nccl)
            st = rap_comm_nccl_create(x->c, me, NULL, &nc);
        if (st == RAP_OK)
            st = dbatch_alloc(d, c);
        if (st == RAP_OK)
            st = rap_moves_create(nc ? nc : x->c, RAP_GPU, &cfg, &gx);
    }
#endif
    int64_t steps[] = {Bg, Bg - 5, 3, 1, Bg, Bg - 1};
    int nsteps = (int)(sizeof steps / sizeof steps[0]), bad_step = 4;
    int64_t want_bytes = 0;
    bool rep = reports(c, &a, me, a.bad_t, a.bad_k);
    char want_msg[32];
    snprintf(want_msg, sizeof want_msg, "table %d:", a.bad_t);
    for (int s = 0; st == RAP_OK && s < nsteps; s++) {
        int64_t n = steps[s], bad_row = -1, r0;
        if (s == bad_step) {
            rows_of(n, K, a.bad_k, &r0);
            bad_row = r0;
        }
        batch tr, in;
        memset(&in, 0, sizeof in);
        float *dense0 = malloc(sizeof(float) * (size_t)(n * c->ND + 1));
        if (!dense0 || !truth_make(c, n, c->seed * 100 + (uint64_t)s, a.bad_t, bad_row, &tr) ||
            !input_make(c, &a, me, n, &tr, c->seed + (uint64_t)s, &in))
            st = rap_fail(RAP_ERR_NOMEM, "test: batch");
        if (st == RAP_OK) {
            memcpy(dense0, in.dense, sizeof(float) * (size_t)(n * c->ND));
            as_model_batch(&in, n, mb);
            rap_status rs = rap_moves_run(cx, mb, in.dense, n, g);
            if (s == bad_step && rep) {
                if (rs != RAP_ERR_DATA || !strstr(rap_last_error(), want_msg)) {
                    printf("    R = %d rank %d: overflow gave %s: %s\n", c->R, me,
                           rap_status_name(rs), rap_last_error());
                    x->bad++;
                }
            } else {
                st = rs;
            }
        }
        if (st == RAP_OK) {
            x->bad += check_result(c, &a, me, n, &tr, dense0, in.dense, mb, g);
            for (int i = 0; i < ns; i++) {
                int64_t rows = rows_of(n, K, send[i].share, &r0);
                want_bytes += send[i].kind == RAP_MOVE_DENSE ? 4 * rows * send[i].width
                                                             : 8 * rows * (1 + L);
            }
            x->steps++;
        }
#ifdef RAP_HAVE_CUDA
        if (st == RAP_OK && c->gpu) {
            /* the same input (dense0: before the CPU run wrote into it) */
            float *cpu_dense = in.dense;
            in.dense = dense0;
            st = dbatch_upload(d, c, &in, n);
            in.dense = cpu_dense;
            if (st == RAP_OK)
                st = rap_moves_run(gx, &d->mb, d->dense, n, dg);
            if (st == RAP_OK && nc)
                st = rap_comm_wait(nc, NULL, "test moves");
            if (st == RAP_OK && cudaDeviceSynchronize() != cudaSuccess)
                st = rap_fail(RAP_ERR_CUDA, "test: GPU run");
            if (st == RAP_OK)
                st = compare_gpu(c, me, n, d, dg, mb, g, in.dense, &x->bad);
        }
#endif
        free(dense0);
        batch_free(&tr);
        batch_free(&in);
    }
    if (st == RAP_OK) {
        int64_t b = -1;
        rap_moves_bytes(cx, &b);
        if (b != want_bytes) {
            printf("    R = %d rank %d: bytes %lld, want %lld\n", c->R, me, (long long)b,
                   (long long)want_bytes);
            x->bad++;
        }
        rap_status cs = rap_moves_check(cx);
        x->bad += cs != (rep ? RAP_ERR_DATA : RAP_OK);
        if (rep)
            x->bad += !strstr(rap_last_error(), want_msg);
        /* refused on the host before any collective */
        mb->rows = Bg + 1;
        x->bad += rap_moves_run(cx, mb, NULL, Bg + 1, g) != RAP_ERR_ARG;
        mb->rows = 2;
        x->bad += rap_moves_run(cx, mb, NULL, 3, g) != RAP_ERR_ARG;
        x->bad += rap_moves_run(cx, mb, NULL, 0, g) != RAP_ERR_ARG;
    }
#ifdef RAP_HAVE_CUDA
    if (st == RAP_OK && c->gpu) {
        int64_t b = -1;
        rap_moves_bytes(gx, &b);
        x->bad += b != want_bytes;
        rap_status cs = rap_moves_check(gx);
        x->bad += cs != (rep ? RAP_ERR_DATA : RAP_OK);
        if (rep)
            x->bad += !strstr(rap_last_error(), want_msg);
    }
    if (nc)
        rap_comm_wait(nc, NULL, "test moves end");
    if (d) {
        cudaDeviceSynchronize();
        dbatch_free(d);
        free(d);
    }
#endif
    rap_moves_free(gx);
    rap_comm_free(nc);
    rap_moves_free(cx);
    free(mb);
    free(g);
    free(dg);
    return st;
}

/* Runs one case on its R thread ranks; false when it could not run. */
static bool run_case(rap_test_ctx *t, mv_case *c)
{
    rap_test_rank x[8];
    if (!rap_test_run_ranks(t, c->R, 30, moves_rank, c, x))
        return false;
    for (int r = 0; r < c->R; r++) {
        CHECK_MSG(x[r].bad == 0, "R = %d G = %d L = %d Bg = %lld rank %d: %d wrong values",
                  c->R, c->G, c->L, (long long)c->Bg, r, x[r].bad);
        CHECK(x[r].steps == 6);
    }
    return true;
}

/* What a case's assignment exercises, over all ranks. */
static void case_stats(const mv_case *c, int *dense_units, int *sparse_units, int *reporters,
                       int *assembled)
{
    assign a;
    make_assign(c, &a);
    rap_move send[MAX_UNITS], recv[MAX_UNITS];
    uint64_t local[MAX_T];
    bool holds[MAX_T];
    *dense_units = *sparse_units = *reporters = *assembled = 0;
    for (int me = 0; me < c->R; me++) {
        int ns, nr;
        make_lists(c, &a, me, send, &ns, recv, &nr, local, holds);
        for (int i = 0; i < ns; i++)
            *(send[i].kind == RAP_MOVE_DENSE ? dense_units : sparse_units) += 1;
        *reporters += reports(c, &a, me, a.bad_t, a.bad_k);
        for (int t = 0; t < c->T; t++)
            *assembled += holds[t] && local[t] != all_bits(c->K) && local[t] != 0;
    }
}

/* ------------------------------------------------------------ tests */

RAP_TEST(moves_cpu_threads)
{
    /* R = 1..4 thread ranks, K = R*G shares (G = 1, 2); Bg = 23 (short
     * batches of 18, 3, 1 rows) with L = 3, and Bg = 16 with L = 1. */
    int cases = 0, units = 0;
    for (int R = 1; R <= 4; R++)
        for (int G = 1; G <= 2; G++)
            for (int v = 0; v < 2; v++) {
                mv_case c = {.R = R, .G = G, .K = R * G, .T = 4, .ND = v ? 5 : 7,
                             .L = v ? 1 : 3, .Bg = v ? 16 : 23,
                             .seed = (uint64_t)(100 * R + 10 * G + v + 1), .gpu = false};
                int du, su, rp, as;
                case_stats(&c, &du, &su, &rp, &as);
                if (R > 1) {
                    CHECK_MSG(du > 0 && su > 0 && rp > 0, "R = %d G = %d: %d dense, %d sparse "
                              "units, %d reporters: the case exercises too little", R, G, du,
                              su, rp);
                    units += du + su;
                }
                if (!run_case(t, &c))
                    return;
                cases++;
            }
    printf("    %d cases (R = 1..4, K = R, 2R; %d units sent): held tables == truth, received "
           "dense == truth, the rest untouched, bytes, overflow on the right ranks\n", cases,
           units);
}

/* Rank 0 runs the moves; rank 1 receives with raw all-to-alls and checks
 * the words: canonical order and ids.h's block layout. */
static rap_status wire_rank(rap_test_rank *x)
{
    /* Bg = n = 5, K = 2: share 0 rows 0..2, share 1 rows 3..4; L = 2 */
    int R = 2;
    float dense[15];
    for (int i = 0; i < 15; i++)
        dense[i] = (float)(10 * (i / 3) + i % 3); /* row*10 + col */
    int64_t off0[6] = {4, 4, 5, 6, 6, 9}; /* table 0: row 4 has 3 ids (cut to 2) */
    int64_t ids0[9] = {-1, -1, -1, -1, 100, 101, 140, 141, 142};
    int64_t off1[6] = {0, 2, 2, 3, 4, 4};
    int64_t ids1[4] = {210, 211, 220, 230};
    int64_t sc[2] = {0, 0}, sd[2] = {0, 0}, rc[2], rd[2] = {0, 0};
    if (x->rank == 0) {
        rap_move send[4] = {{RAP_MOVE_SPARSE, 1, 0, 0, 1}, {RAP_MOVE_DENSE, 1, 2, 1, 1},
                            {RAP_MOVE_SPARSE, 0, 0, 1, 1}, {RAP_MOVE_DENSE, 0, 1, 0, 1}};
        uint64_t local[2] = {0, 0};
        bool holds[2] = {false, false};
        rap_moves_config cfg = {.K = 2, .T = 2, .ND = 3, .Bg = 5, .L = 2, .send = send,
                                .n_send = 4, .local = local, .holds = holds};
        rap_moves *m = NULL;
        RAP_TRY(rap_moves_create(x->c, RAP_CPU, &cfg, &m));
        rap_model_batch *mb = calloc(1, sizeof *mb), *g = malloc(sizeof *g);
        if (!mb || !g) {
            rap_moves_free(m);
            return RAP_ERR_NOMEM;
        }
        mb->rows = 5;
        mb->dense = dense;
        mb->off[0] = off0;
        mb->ids[0] = ids0;
        mb->off[1] = off1;
        mb->ids[1] = ids1;
        rap_status st = rap_moves_run(m, mb, dense, 5, g);
        x->bad += st != RAP_ERR_DATA || !strstr(rap_last_error(), "table 0: row 4");
        int64_t b = 0;
        rap_moves_bytes(m, &b);
        x->bad += b != 4 * (3 * 1 + 2 * 2) + 8 * (2 * 3 + 3 * 3);
        x->bad += g->off[0] != NULL || g->off[1] != NULL || g->dense != dense;
        free(mb);
        free(g);
        rap_moves_free(m);
        return RAP_OK;
    }
    float rf[8];
    int64_t ri[16];
    for (int i = 0; i < 8; i++)
        rf[i] = -9;
    for (int i = 0; i < 16; i++)
        ri[i] = -9;
    rc[0] = 7;
    rc[1] = 0;
    RAP_TRY(rap_comm_group_begin(x->c));
    rap_status st = rap_comm_alltoallv(x->c, rf, sc, sd, rf, rc, rd, "wire dense");
    rc[0] = 15;
    if (st == RAP_OK)
        st = rap_comm_alltoallv_type(x->c, ri, sc, sd, ri, rc, rd, RAP_COMM_I64, "wire sparse");
    rap_status ge = rap_comm_group_end(x->c, "wire");
    RAP_TRY(st);
    RAP_TRY(ge);
    (void)R;
    /* dense (col 0, share 0): rows 0..2 col 0; (cols 1..2, share 1): rows 3..4 */
    float wf[8] = {0, 10, 20, 31, 32, 41, 42, -9};
    /* sparse (table 0, share 1): lengths of rows 3, 4 (4 cut to 2), ids padded;
     * (table 1, share 0): rows 0..2 */
    int64_t wi[16] = {0, 2, 0, 0, 140, 141, 2, 0, 1, 210, 211, 0, 0, 220, 0, -9};
    for (int i = 0; i < 8; i++)
        if (memcmp(&rf[i], &wf[i], sizeof(float)) != 0) {
            printf("    wire: dense word %d = %g, want %g\n", i, (double)rf[i], (double)wf[i]);
            x->bad++;
        }
    for (int i = 0; i < 16; i++)
        if (ri[i] != wi[i]) {
            printf("    wire: sparse word %d = %lld, want %lld\n", i, (long long)ri[i],
                   (long long)wi[i]);
            x->bad++;
        }
    return RAP_OK;
}

RAP_TEST(moves_cpu_wire_layout)
{
    rap_test_rank x[8];
    if (!rap_test_run_ranks(t, 2, 20, wire_rank, NULL, x))
        return;
    CHECK_MSG(x[0].bad == 0, "sender: %d wrong values", x[0].bad);
    CHECK_MSG(x[1].bad == 0, "receiver: %d wrong words", x[1].bad);
}

/* create on rank 0 of 3 must refuse cfg with RAP_ERR_ARG and `msg` in the
 * message. */
static void refused(rap_test_ctx *t, rap_comm *c, const rap_moves_config *cfg, const char *msg,
                    const char *what)
{
    rap_moves *m = NULL;
    rap_status st = rap_moves_create(c, RAP_CPU, cfg, &m);
    CHECK_MSG(st == RAP_ERR_ARG && m == NULL && strstr(rap_last_error(), msg),
              "%s: got %s, \"%s\" (want \"%s\")", what, rap_status_name(st), rap_last_error(),
              msg);
    rap_moves_free(m);
}

RAP_TEST(moves_cpu_refuses)
{
    rap_comm *c[3];
    REQUIRE_OK(rap_comm_threads_create(3, c));
    /* valid: K = 3, table 0 held with shares 0, 1 local and 2 from rank 1;
     * a dense unit (columns 1..2, share 0) to rank 2, one from rank 2 */
    rap_move send[4] = {{RAP_MOVE_DENSE, 1, 2, 0, 2}, {RAP_MOVE_SPARSE, 1, 0, 2, 1}};
    rap_move recv[4] = {{RAP_MOVE_SPARSE, 0, 0, 2, 1}, {RAP_MOVE_DENSE, 0, 2, 1, 2}};
    uint64_t local[2] = {3, 0};
    bool holds[2] = {true, false};
    rap_moves_config ok = {.K = 3, .T = 2, .ND = 4, .Bg = 10, .L = 2, .send = send, .n_send = 2,
                           .recv = recv, .n_recv = 2, .local = local, .holds = holds};
    rap_moves *m = NULL;
    CHECK_OK(rap_moves_create(c[0], RAP_CPU, &ok, &m));
    rap_moves_free(m);
    rap_moves_config k = ok;
    rap_move s2[4], r2[4];
    uint64_t l2[2];
    k.send = s2;
    k.recv = r2;
    k.local = l2;
#define RESET() (memcpy(s2, send, sizeof s2), memcpy(r2, recv, sizeof r2), \
                 memcpy(l2, local, sizeof l2), k.n_send = 2, k.n_recv = 2, k.K = 3)
    RESET();
    s2[0].peer = 0;
    refused(t, c[0], &k, "dense unit (columns 1..2, share 0) to rank 0: peer is this rank",
            "own rank");
    RESET();
    s2[1].peer = 3;
    refused(t, c[0], &k, "peer 3 is not a rank", "peer out of range");
    RESET();
    r2[1].share = 3;
    refused(t, c[0], &k, "share 3 outside 0..2", "share out of range");
    RESET();
    s2[0].col = 3;
    refused(t, c[0], &k, "columns [3, 3 + 2) not inside the 4 dense columns", "dense past ND");
    RESET();
    s2[0].width = 0;
    refused(t, c[0], &k, "not inside the 4 dense columns", "width 0");
    RESET();
    s2[1].col = 2;
    refused(t, c[0], &k, "table 2 outside 0..1", "table out of range");
    RESET();
    l2[0] = 1;
    refused(t, c[0], &k, "held table 0: share 1 is neither local nor received", "missing share");
    RESET();
    l2[0] = 7;
    refused(t, c[0], &k, "sparse unit (table 0, share 2) from rank 1: share 2 of table 0 is "
            "also local", "local and received");
    RESET();
    r2[2] = r2[0];
    r2[2].peer = 2;
    k.n_recv = 3;
    refused(t, c[0], &k, "share 2 of table 0 is received twice", "received twice");
    RESET();
    r2[0].col = 1;
    refused(t, c[0], &k, "sparse unit (table 1, share 2) from rank 1: table 1 is not held",
            "recv of a table not held");
    RESET();
    s2[2] = s2[0];
    k.n_send = 3;
    refused(t, c[0], &k, "send list has the dense unit (columns 1..2, share 0) to rank 2 twice",
            "duplicate send");
    RESET();
    r2[2] = r2[1];
    r2[2].col = 1;
    r2[2].width = 1;
    r2[2].peer = 1;
    k.n_recv = 3;
    refused(t, c[0], &k, "column 1 of share 1 is received twice", "overlapping dense");
    RESET();
    l2[1] = 1;
    refused(t, c[0], &k, "local shares 0x1 of a table this rank does not hold", "local not held");
    RESET();
    l2[0] = 0xb;
    refused(t, c[0], &k, "name a share >= K = 3", "local past K");
    RESET();
    k.K = 0;
    refused(t, c[0], &k, "K = 0 (1..64)", "K = 0");
    RESET();
    k.K = 65;
    refused(t, c[0], &k, "K = 65 (1..64)", "K = 65");
    RESET();
    s2[1].kind = (rap_move_kind)7;
    refused(t, c[0], &k, "send unit 1: kind 7", "bad kind");
#undef RESET
#ifndef RAP_HAVE_CUDA
    m = NULL;
    CHECK(rap_moves_create(c[0], RAP_GPU, &ok, &m) == RAP_ERR_NO_GPU && m == NULL);
#endif
    for (int r = 0; r < 3; r++)
        rap_comm_free(c[r]);
}

RAP_TEST(moves_gpu_threads_one_gpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    /* The GPU kernels with R = 1..4 thread ranks on one GPU (a threads
     * comm: staged host all-to-alls), against the CPU path element for
     * element, in the same ranks. */
    int cases = 0;
    for (int R = 1; R <= 4; R++)
        for (int G = 1; G <= 2; G++)
            for (int v = 0; v < 2; v++) {
                mv_case c = {.R = R, .G = G, .K = R * G, .T = 4, .ND = v ? 5 : 7,
                             .L = v ? 1 : 3, .Bg = v ? 16 : 23,
                             .seed = (uint64_t)(100 * R + 10 * G + v + 1), .gpu = true};
                if (!run_case(t, &c))
                    return;
                cases++;
            }
    printf("    %d cases on one GPU: GPU == CPU element for element, == truth, bytes, overflow "
           "flag\n", cases);
#endif
}

RAP_TEST(moves_gpu_nccl)
{
    REQUIRE_GPU();
    if (!rap_comm_have_nccl())
        SKIP("rap was built without NCCL");
#ifdef RAP_HAVE_CUDA
    int ngpu = 0;
    cudaGetDeviceCount(&ngpu);
    if (ngpu < 2)
        SKIP("%d GPU: the nccl moves need two (one rank a GPU)", ngpu);
    /* R = 2..min(GPUs, 4) ranks over NCCL, one GPU each, against the CPU
     * path in the same ranks. */
    int cases = 0;
    for (int R = 2; R <= (ngpu < 4 ? ngpu : 4); R++)
        for (int G = 1; G <= 2; G++) {
            mv_case c = {.R = R, .G = G, .K = R * G, .T = 4, .ND = 7, .L = 3, .Bg = 23,
                         .seed = (uint64_t)(100 * R + 10 * G + 1), .gpu = true, .nccl = true};
            if (!run_case(t, &c))
                return;
            cases++;
        }
    printf("    %d cases over NCCL: GPU == CPU element for element, == truth, bytes, overflow "
           "flag\n", cases);
#endif
}
