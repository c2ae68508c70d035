/* test_ops_gpu.c -- every op's fused GPU launch against its CPU reference
 * (src/prep/ops/), bit for bit, over several descs and two row pieces, on
 * random columns with nulls and sentinels around every output; and the
 * CPU reference over row pieces against one launch. The hand-checked CPU
 * tests: test_ops.c. */
#include "test.h"

#include "core/core.h"
#include "prep/ops/divu64.h"
#include "prep/ops/mathf.h"
#include "prep/ops/op.h"
#include "test_ops_util.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static uint64_t g_rng = 0x5851f42d4c957f2dULL;

/* splitmix64: deterministic test data. */
static uint64_t rnd(void) { return rap_test_rnd(&g_rng); }

/* uniform in [0, 1) */
static double rnd01(void) { return rap_test_rnd01(&g_rng); }

/* ------------------------------------------------------------ GPU vs CPU */

/* One desc of a GPU test: random input, the CPU reference's output, the
 * sizes of every buffer (to mirror it on the device). All cases of one
 * launch have the same rows n. */
typedef struct {
    rap_desc h;         /* host pointers: input and the CPU reference's output */
    rap_op_type op;
    int64_t n;          /* rows */
    int64_t y_n;        /* floats in y (n * width), 0: none */
    int64_t yids_n;     /* ids in yids, 0: none */
    size_t aux_bytes;
    int64_t total;      /* COMPUTED: output ids */
} gcase;

#define SENTINEL 0xab /* byte every output buffer starts with, on both sides */

static void gcase_free(gcase *g)
{
    free((void *)g->h.x);
    free((void *)g->h.xvalid);
    free((void *)g->h.xoff);
    free((void *)g->h.xids);
    free(g->h.y);
    if (g->h.yoff != g->h.xoff)
        free(g->h.yoff);
    free(g->h.yids);
    free(g->h.len);
    free((void *)g->h.aux);
    memset(g, 0, sizeof *g);
}

/* A float that exercises the ops: ordinary values in several ranges, exact
 * integers, [0, 1] (logit), zeros of both signs, NaNs with payloads,
 * infinities, huge and subnormal values. */
static int64_t rnd_id(int flavor)
{
    switch (flavor) {
    case 0: return (int64_t)(rnd() % 40) - 8;           /* small, some negative */
    case 1: return (int64_t)(rnd() & 0xffffffffu);      /* Criteo: 32-bit hashes */
    default: return (int64_t)rnd();                     /* any int64 */
    }
}

/* Dense input column of n rows (nulls: ~15 % null rows, holding 0). */
static void gen_dense(gcase *g, int64_t n, bool nulls)
{
    float *x;
    uint8_t *v;
    rap_test_rnd_dense(&g_rng, n, nulls, &x, &v);
    g->h.x = x;
    g->h.xvalid = v;
    g->h.in_kind = RAP_DENSE;
    g->n = n;
}

/* Sparse input column: maxlen 1 is a len1 column (every non-null row one
 * id); otherwise lengths 0..maxlen with an occasional long list. */
static void gen_sparse(gcase *g, int64_t n, bool nulls, int maxlen, int id_flavor)
{
    int64_t *off = malloc(sizeof *off * (size_t)(n + 1));
    uint8_t *v = nulls ? malloc((size_t)n) : NULL;
    int64_t *lens = malloc(sizeof *lens * (size_t)n), k = 0;
    for (int64_t r = 0; r < n; r++) {
        bool null = v && rnd() % 100 < 15;
        if (v)
            v[r] = !null;
        int64_t l = maxlen == 1 ? 1 : (int64_t)(rnd() % (uint64_t)(maxlen + 1));
        if (maxlen > 1 && rnd() % 50 == 0)
            l = 60 + (int64_t)(rnd() % 60);
        lens[r] = null ? 0 : l;
        off[r] = k;
        k += lens[r];
    }
    off[n] = k;
    int64_t *ids = malloc(sizeof *ids * (size_t)(k ? k : 1));
    for (int64_t j = 0; j < k; j++)
        ids[j] = rnd_id(id_flavor);
    free(lens);
    g->h.xoff = off;
    g->h.xids = ids;
    g->h.xvalid = v;
    g->h.in_kind = RAP_SPARSE;
    g->n = n;
}

/* Sets the output of g (kind, offsets mode, width), allocates it filled
 * with SENTINEL, and runs the CPU reference over [0, n). */
static void gen_output(gcase *g, rap_op_type op, int out_kind, int off_mode, int width)
{
    int64_t n = g->n;
    g->op = op;
    g->h.out_kind = out_kind;
    g->h.off_mode = off_mode;
    g->h.width = width;
    if (out_kind != RAP_SPARSE) {
        g->y_n = n * width;
        g->h.y = malloc(sizeof(float) * (size_t)g->y_n);
        memset(g->h.y, SENTINEL, sizeof(float) * (size_t)g->y_n);
    } else if (off_mode == RAP_OFF_SAME) {
        g->h.yoff = (int64_t *)g->h.xoff;
        g->yids_n = g->h.xoff[n] + 1;
    } else if (off_mode == RAP_OFF_ARANGE) {
        g->yids_n = n;
    } else {
        g->h.yoff = malloc(sizeof(int64_t) * (size_t)(n + 1));
        g->h.len = malloc(sizeof(int64_t) * (size_t)(n + 1));
        memset(g->h.len, SENTINEL, sizeof(int64_t) * (size_t)(n + 1));
        rap_op_impls[op].len_cpu(&g->h, 0, n);
        g->h.yoff[0] = 0;
        for (int64_t r = 0; r < n; r++)
            g->h.yoff[r + 1] = g->h.yoff[r] + g->h.len[r];
        g->total = g->h.yoff[n];
        g->yids_n = g->total + 1;
    }
    if (g->yids_n) {
        g->h.yids = malloc(sizeof(int64_t) * (size_t)g->yids_n);
        memset(g->h.yids, SENTINEL, sizeof(int64_t) * (size_t)g->yids_n);
    }
    rap_op_impls[op].cpu(&g->h, 0, n);
}

#ifdef RAP_HAVE_CUDA
/* Device copy of n bytes of host memory (NULL stays NULL). */
static void *dev_copy(rap_test_ctx *t, const void *h, size_t n)
{
    if (!h)
        return NULL;
    void *d = NULL;
    if (cudaMalloc(&d, n ? n : 1) != cudaSuccess ||
        cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) {
        rap_test_fail(t, __FILE__, __LINE__, "cudaMalloc/cudaMemcpy of %zu bytes", n);
        return NULL;
    }
    return d;
}

static void *dev_sentinel(rap_test_ctx *t, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n ? n : 1) != cudaSuccess || cudaMemset(d, SENTINEL, n) != cudaSuccess) {
        rap_test_fail(t, __FILE__, __LINE__, "cudaMalloc/cudaMemset of %zu bytes", n);
        return NULL;
    }
    return d;
}

/* First differing element of two arrays of elem-byte items, or -1. */
static int64_t first_diff(const void *a, const void *b, int64_t n, size_t elem)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + (size_t)i * elem, (const char *)b + (size_t)i * elem, elem))
            return i;
    return -1;
}

/* Runs the nd cases (same op, same n) as ONE fused GPU launch per phase, in
 * two row pieces [0, k) and [k, n) (plus an empty piece), and compares
 * every output buffer with the CPU reference byte for byte: floats too. */
static void gpu_compare(rap_test_ctx *t, gcase *g, int nd, int64_t k)
{
    rap_op_type op = g[0].op;
    int64_t n = g[0].n;
    const rap_op_impl *im = &rap_op_impls[op];
    rap_desc *hd = calloc((size_t)nd, sizeof *hd); /* descs with device pointers */
    bool any_computed = false;
    for (int i = 0; i < nd; i++) {
        const rap_desc *h = &g[i].h;
        rap_desc *d = &hd[i];
        *d = *h;
        if (h->x)
            d->x = dev_copy(t, h->x, sizeof(float) * (size_t)n);
        d->xvalid = dev_copy(t, h->xvalid, (size_t)n);
        if (h->xoff) {
            d->xoff = dev_copy(t, h->xoff, sizeof(int64_t) * (size_t)(n + 1));
            d->xids = dev_copy(t, h->xids, sizeof(int64_t) * (size_t)(h->xoff[n] ? h->xoff[n] : 1));
        }
        d->aux = dev_copy(t, h->aux, g[i].aux_bytes);
        d->y = g[i].y_n ? dev_sentinel(t, sizeof(float) * (size_t)g[i].y_n) : NULL;
        d->yids = g[i].yids_n ? dev_sentinel(t, sizeof(int64_t) * (size_t)g[i].yids_n) : NULL;
        d->yoff = h->off_mode == RAP_OFF_SAME ? (int64_t *)d->xoff : NULL;
        d->len = NULL;
        if (h->off_mode == RAP_OFF_COMPUTED) {
            any_computed = true;
            d->len = dev_sentinel(t, sizeof(int64_t) * (size_t)(n + 1));
            d->yoff = dev_sentinel(t, sizeof(int64_t) * (size_t)(n + 1));
        }
    }
    rap_desc *dd = dev_copy(t, hd, sizeof *hd * (size_t)nd);
    if (t->failures)
        goto done;
    if (any_computed) {
        CHECK_OK(im->len_gpu(dd, nd, 0, k, 0));
        CHECK_OK(im->len_gpu(dd, nd, k, k, 0));
        CHECK_OK(im->len_gpu(dd, nd, k, n, 0));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        int64_t *len = malloc(sizeof(int64_t) * (size_t)(n + 1));
        int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1));
        for (int i = 0; i < nd; i++) {
            if (g[i].h.off_mode != RAP_OFF_COMPUTED)
                continue;
            CHECK(cudaMemcpy(len, hd[i].len, sizeof(int64_t) * (size_t)n,
                             cudaMemcpyDeviceToHost) == cudaSuccess);
            int64_t j = first_diff(len, g[i].h.len, n, sizeof(int64_t));
            CHECK_MSG(j < 0, "%s desc %d: len[%lld] GPU %lld, CPU %lld", rap_op_name(op), i,
                      (long long)j, (long long)(j < 0 ? 0 : len[j]),
                      (long long)(j < 0 ? 0 : g[i].h.len[j]));
            /* the executor's scan, from the GPU's lengths */
            off[0] = 0;
            for (int64_t r = 0; r < n; r++)
                off[r + 1] = off[r] + len[r];
            CHECK(cudaMemcpy(hd[i].yoff, off, sizeof(int64_t) * (size_t)(n + 1),
                             cudaMemcpyHostToDevice) == cudaSuccess);
        }
        free(len);
        free(off);
    }
    CHECK_OK(im->gpu(dd, nd, 0, k, 0));
    CHECK_OK(im->gpu(dd, nd, k, k, 0));
    CHECK_OK(im->gpu(dd, 0, 0, n, 0));
    CHECK_OK(im->gpu(dd, nd, k, n, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    for (int i = 0; i < nd && t->failures < 5; i++) {
        if (g[i].y_n) {
            float *y = malloc(sizeof(float) * (size_t)g[i].y_n);
            CHECK(cudaMemcpy(y, hd[i].y, sizeof(float) * (size_t)g[i].y_n,
                             cudaMemcpyDeviceToHost) == cudaSuccess);
            int64_t j = first_diff(y, g[i].h.y, g[i].y_n, sizeof(float));
            CHECK_MSG(j < 0, "%s desc %d: y[%lld] GPU %.9g (0x%08x), CPU %.9g (0x%08x), input %.9g",
                      rap_op_name(op), i, (long long)j, j < 0 ? 0.0 : (double)y[j],
                      j < 0 ? 0u : fbits(y[j]), j < 0 ? 0.0 : (double)g[i].h.y[j],
                      j < 0 ? 0u : fbits(g[i].h.y[j]),
                      (j < 0 || !g[i].h.x) ? 0.0 : (double)g[i].h.x[j / g[i].h.width]);
            free(y);
        }
        if (g[i].yids_n) {
            int64_t *ids = malloc(sizeof(int64_t) * (size_t)g[i].yids_n);
            CHECK(cudaMemcpy(ids, hd[i].yids, sizeof(int64_t) * (size_t)g[i].yids_n,
                             cudaMemcpyDeviceToHost) == cudaSuccess);
            int64_t j = first_diff(ids, g[i].h.yids, g[i].yids_n, sizeof(int64_t));
            CHECK_MSG(j < 0, "%s desc %d: yids[%lld] GPU %lld, CPU %lld", rap_op_name(op), i,
                      (long long)j, (long long)(j < 0 ? 0 : ids[j]),
                      (long long)(j < 0 ? 0 : g[i].h.yids[j]));
            free(ids);
        }
    }
done:
    for (int i = 0; i < nd; i++) {
        rap_desc *d = &hd[i];
        cudaFree((void *)d->x);
        cudaFree((void *)d->xvalid);
        cudaFree((void *)d->xoff);
        cudaFree((void *)d->xids);
        cudaFree((void *)d->aux);
        cudaFree(d->y);
        cudaFree(d->yids);
        if (g[i].h.off_mode == RAP_OFF_COMPUTED) {
            cudaFree(d->yoff);
            cudaFree(d->len);
        }
    }
    cudaFree(dd);
    free(hd);
}
#endif /* RAP_HAVE_CUDA */

/* Compares the cases on the GPU (nothing without one), one fused launch
 * per run of consecutive cases of the same op, then frees them. */
static void gpu_check_free(rap_test_ctx *t, gcase *g, int nd)
{
#ifdef RAP_HAVE_CUDA
    char why[200];
    if (rap_gpu_available(why, sizeof why)) {
        for (int a = 0, b; a < nd; a = b) {
            for (b = a + 1; b < nd && g[b].op == g[a].op; b++)
                ;
            int64_t n = g[a].n;
            gpu_compare(t, g + a, b - a, n / 3);
            gpu_compare(t, g + a, b - a, n); /* one piece, then an empty one */
        }
    }
#endif
    for (int i = 0; i < nd; i++)
        gcase_free(&g[i]);
}

#define GN 3001 /* rows of a GPU test: not a multiple of the block size */

static void *dup_mem(const void *p, size_t n)
{
    void *q = malloc(n);
    memcpy(q, p, n);
    return q;
}

/* nd dense -> dense cases of op with f0 = params[i]. */
static int dense_build(gcase *g, rap_op_type op, const float *params, int nd)
{
    for (int i = 0; i < nd; i++) {
        gen_dense(&g[i], GN, i % 2 == 0);
        g[i].h.f0 = params[i];
        gen_output(&g[i], op, RAP_DENSE, RAP_OFF_NONE, 1);
    }
    return nd;
}

static int build_fill_null(gcase *g)
{
    gen_dense(&g[0], GN, true);
    g[0].h.f0 = 7.5f;
    gen_output(&g[0], RAP_OP_FILL_NULL, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_dense(&g[1], GN, false);
    gen_output(&g[1], RAP_OP_FILL_NULL, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_sparse(&g[2], GN, false, 5, 2);
    g[2].h.i0 = -3;
    gen_output(&g[2], RAP_OP_FILL_NULL, RAP_SPARSE, RAP_OFF_SAME, 1);
    gen_sparse(&g[3], GN, true, 1, 1);
    g[3].h.i0 = 99;
    gen_output(&g[3], RAP_OP_FILL_NULL, RAP_SPARSE, RAP_OFF_ARANGE, 1);
    gen_sparse(&g[4], GN, true, 6, 2);
    g[4].h.i0 = -1;
    gen_output(&g[4], RAP_OP_FILL_NULL, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    gen_sparse(&g[5], GN, true, 3, 0);
    g[5].h.i0 = 5;
    gen_output(&g[5], RAP_OP_FILL_NULL, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    return 6;
}

static int build_cast(gcase *g)
{
    gen_dense(&g[0], GN, true);
    g[0].h.i0 = RAP_DENSE;
    gen_output(&g[0], RAP_OP_CAST, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_sparse(&g[1], GN, true, 4, 2);
    g[1].h.i0 = RAP_DENSE;
    gen_output(&g[1], RAP_OP_CAST, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_sparse(&g[2], GN, true, 1, 1);
    g[2].h.i0 = RAP_DENSE;
    gen_output(&g[2], RAP_OP_CAST, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_sparse(&g[3], GN, true, 5, 2);
    g[3].h.i0 = RAP_SPARSE;
    gen_output(&g[3], RAP_OP_CAST, RAP_SPARSE, RAP_OFF_SAME, 1);
    gen_dense(&g[4], GN, false);
    g[4].h.i0 = RAP_SPARSE;
    gen_output(&g[4], RAP_OP_CAST, RAP_SPARSE, RAP_OFF_ARANGE, 1);
    gen_dense(&g[5], GN, true);
    g[5].h.i0 = RAP_SPARSE;
    gen_output(&g[5], RAP_OP_CAST, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    gen_dense(&g[6], GN, true);
    g[6].h.i0 = RAP_SPARSE;
    gen_output(&g[6], RAP_OP_CAST, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    return 7;
}

static int build_logit(gcase *g)
{
    float eps[3] = {1e-5f, 0.0f, 0.1f};
    return dense_build(g, RAP_OP_LOGIT, eps, 3);
}

static int build_boxcox(gcase *g)
{
    float lambda[6] = {0.0f, 0.5f, -1.3f, 2.7f, 1e-3f, -0.25f};
    return dense_build(g, RAP_OP_BOXCOX, lambda, 6);
}

static int build_log(gcase *g)
{
    float none[2] = {0, 0};
    return dense_build(g, RAP_OP_LOG, none, 2);
}

static int build_add_mul(gcase *g)
{
    float c[4] = {3.0f, -0.5f, 1e30f, 0.1f};
    dense_build(g, RAP_OP_ADD, c, 4);
    return 4 + dense_build(g + 4, RAP_OP_MUL, c, 4);
}

static int build_clamp(gcase *g)
{
    gen_dense(&g[0], GN, true);
    g[0].h.f0 = -1.0f;
    g[0].h.f1 = 2.0f;
    gen_output(&g[0], RAP_OP_CLAMP, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_dense(&g[1], GN, false);
    g[1].h.f0 = 0.5f;
    g[1].h.f1 = 0.5f;
    gen_output(&g[1], RAP_OP_CLAMP, RAP_DENSE, RAP_OFF_NONE, 1);
    gen_sparse(&g[2], GN, true, 4, 0);
    g[2].h.i0 = 0;
    g[2].h.i1 = 10;
    gen_output(&g[2], RAP_OP_CLAMP, RAP_SPARSE, RAP_OFF_SAME, 1);
    gen_sparse(&g[3], GN, false, 1, 2);
    g[3].h.i0 = -1000000000000000000LL;
    g[3].h.i1 = 1000000000000000000LL;
    gen_output(&g[3], RAP_OP_CLAMP, RAP_SPARSE, RAP_OFF_SAME, 1);
    return 4;
}

static int build_onehot(gcase *g)
{
    int w[4] = {1, 7, 300, 33};
    float lo[4] = {0.0f, -5.0f, 0.0f, -1.0f}, hi[4] = {1.0f, 5.0f, 1.0f, 30.0f};
    for (int i = 0; i < 4; i++) {
        gen_dense(&g[i], GN, i != 1);
        g[i].h.f0 = lo[i];
        g[i].h.f1 = hi[i];
        g[i].h.i0 = w[i];
        gen_output(&g[i], RAP_OP_ONEHOT, RAP_VECTOR, RAP_OFF_NONE, w[i]);
    }
    return 4;
}

static int build_bucketize(gcase *g)
{
    float fb[6] = {0.0f, 0.5f, 1.0f, 1.0f, 1.5f, 10.0f};
    double db[7] = {-5, 0, 0, 3, 7, 20, 4e9};
    double db1[1] = {2};
    gen_dense(&g[0], GN, false);
    g[0].h.aux = dup_mem(fb, sizeof fb);
    g[0].aux_bytes = sizeof fb;
    g[0].h.naux = 6;
    gen_output(&g[0], RAP_OP_BUCKETIZE, RAP_SPARSE, RAP_OFF_ARANGE, 1);
    gen_dense(&g[1], GN, true);
    g[1].h.aux = dup_mem(fb, sizeof fb);
    g[1].aux_bytes = sizeof fb;
    g[1].h.naux = 6;
    gen_output(&g[1], RAP_OP_BUCKETIZE, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    gen_sparse(&g[2], GN, true, 5, 0);
    g[2].h.aux = dup_mem(db, sizeof db);
    g[2].aux_bytes = sizeof db;
    g[2].h.naux = 7;
    gen_output(&g[2], RAP_OP_BUCKETIZE, RAP_SPARSE, RAP_OFF_SAME, 1);
    gen_sparse(&g[3], GN, false, 1, 1);
    g[3].h.aux = dup_mem(db, sizeof db);
    g[3].aux_bytes = sizeof db;
    g[3].h.naux = 7;
    gen_output(&g[3], RAP_OP_BUCKETIZE, RAP_SPARSE, RAP_OFF_SAME, 1);
    gen_sparse(&g[4], GN, true, 3, 0);
    g[4].h.aux = dup_mem(db1, sizeof db1);
    g[4].aux_bytes = sizeof db1;
    g[4].h.naux = 1;
    gen_output(&g[4], RAP_OP_BUCKETIZE, RAP_SPARSE, RAP_OFF_SAME, 1);
    return 5;
}

static int build_sigrid_hash(gcase *g)
{
    int64_t salt[5] = {0, 7, -3, 12345, 0};
    int64_t max[5] = {1460, 1, 1000003, INT64_MAX, 10131227};
    for (int i = 0; i < 5; i++) {
        gen_sparse(&g[i], GN, i % 2 == 0, i < 2 ? 1 : 6, i == 2 ? 0 : 2);
        g[i].h.i0 = salt[i];
        g[i].h.i1 = max[i];
        if (i >= 2) /* the executor's reciprocal on both sides; by `%` below */
            rap_divu64_make((uint64_t)max[i], &g[i].h.dmul, &g[i].h.dinfo);
        gen_output(&g[i], RAP_OP_SIGRID_HASH, RAP_SPARSE, RAP_OFF_SAME, 1);
    }
    return 5;
}

static int build_firstx(gcase *g)
{
    gen_sparse(&g[0], GN, true, 1, 2);
    g[0].h.i0 = 1;
    gen_output(&g[0], RAP_OP_FIRSTX, RAP_SPARSE, RAP_OFF_SAME, 1);
    int64_t k[3] = {1, 2, 5};
    for (int i = 1; i < 4; i++) {
        gen_sparse(&g[i], GN, i != 2, 7, 2);
        g[i].h.i0 = k[i - 1];
        gen_output(&g[i], RAP_OP_FIRSTX, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    }
    return 4;
}

static int build_ngram(gcase *g)
{
    gen_sparse(&g[0], GN, true, 1, 2);
    g[0].h.i0 = 3;
    gen_output(&g[0], RAP_OP_NGRAM, RAP_SPARSE, RAP_OFF_SAME, 1);
    int64_t n[3] = {2, 3, 7};
    for (int i = 1; i < 4; i++) {
        gen_sparse(&g[i], GN, i != 2, 6, 2);
        g[i].h.i0 = n[i - 1];
        gen_output(&g[i], RAP_OP_NGRAM, RAP_SPARSE, RAP_OFF_COMPUTED, 1);
    }
    return 4;
}

static int build_mapid(gcase *g)
{
    int64_t nmap[3] = {10, 1000, 1};
    for (int i = 0; i < 3; i++) {
        gen_sparse(&g[i], GN, i != 1, i == 2 ? 1 : 5, i == 1 ? 2 : 0);
        int64_t *map = malloc(sizeof *map * (size_t)nmap[i]);
        for (int64_t j = 0; j < nmap[i]; j++)
            map[j] = (int64_t)rnd();
        g[i].h.aux = map;
        g[i].aux_bytes = sizeof *map * (size_t)nmap[i];
        g[i].h.naux = nmap[i];
        gen_output(&g[i], RAP_OP_MAPID, RAP_SPARSE, RAP_OFF_SAME, 1);
    }
    return 3;
}

/* The GPU tests' cases, by op (add and mul: 4 + 4 cases of two ops). */
typedef int (*build_fn)(gcase *g);
static const struct {
    const char *name;
    build_fn build;
} k_builds[] = {
    {"fill_null", build_fill_null},
    {"cast", build_cast},
    {"logit", build_logit},
    {"boxcox", build_boxcox},
    {"log", build_log},
    {"add_mul", build_add_mul},
    {"clamp", build_clamp},
    {"onehot", build_onehot},
    {"bucketize", build_bucketize},
    {"sigrid_hash", build_sigrid_hash},
    {"firstx", build_firstx},
    {"ngram", build_ngram},
    {"mapid", build_mapid},
};

#define MAX_CASES 8

/* Every GPU test's cases through the CPU reference in two row pieces
 * [0, k) and [k, n): the same bytes as one piece (the executor splits
 * kernels into pieces that fit a window). Runs the test data generator
 * in CPU-only builds too. */
RAP_TEST(ops_cpu_pieces)
{
    for (size_t b = 0; b < sizeof k_builds / sizeof k_builds[0]; b++) {
        gcase g[MAX_CASES];
        memset(g, 0, sizeof g);
        int nd = k_builds[b].build(g);
        for (int i = 0; i < nd; i++) {
            gcase c = g[i];
            rap_desc d = c.h;
            int64_t n = c.n, k = n / 3;
            const rap_op_impl *im = &rap_op_impls[c.op];
            float *y = c.y_n ? malloc(sizeof(float) * (size_t)c.y_n) : NULL;
            int64_t *yids = c.yids_n ? malloc(sizeof(int64_t) * (size_t)c.yids_n) : NULL;
            int64_t *len = NULL;
            if (y)
                memset(y, SENTINEL, sizeof(float) * (size_t)c.y_n);
            if (yids)
                memset(yids, SENTINEL, sizeof(int64_t) * (size_t)c.yids_n);
            d.y = y;
            d.yids = yids;
            if (d.off_mode == RAP_OFF_COMPUTED) {
                len = malloc(sizeof(int64_t) * (size_t)(n + 1));
                d.len = len;
                im->len_cpu(&d, k, n);
                im->len_cpu(&d, 0, k);
                CHECK_MSG(ids_eq(len, c.h.len, n), "%s case %d: len differs in pieces",
                          k_builds[b].name, i);
                /* d.yoff is the reference's scan of the same lengths */
            }
            im->cpu(&d, k, n);
            im->cpu(&d, k, k);
            im->cpu(&d, 0, k);
            if (y)
                CHECK_MSG(memcmp(y, c.h.y, sizeof(float) * (size_t)c.y_n) == 0,
                          "%s case %d: y differs in pieces", k_builds[b].name, i);
            if (yids)
                CHECK_MSG(ids_eq(yids, c.h.yids, c.yids_n), "%s case %d: yids differ in pieces",
                          k_builds[b].name, i);
            free(y);
            free(yids);
            free(len);
            gcase_free(&g[i]);
        }
    }
}

RAP_TEST(ops_fill_null_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_fill_null(g));
}

RAP_TEST(ops_cast_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_cast(g));
}

RAP_TEST(ops_logit_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_logit(g));
}

RAP_TEST(ops_boxcox_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_boxcox(g));
}

RAP_TEST(ops_log_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_log(g));
}

RAP_TEST(ops_add_mul_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_add_mul(g));
}

RAP_TEST(ops_clamp_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_clamp(g));
}

RAP_TEST(ops_onehot_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_onehot(g));
}

RAP_TEST(ops_bucketize_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_bucketize(g));
}

RAP_TEST(ops_sigrid_hash_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_sigrid_hash(g));
}

RAP_TEST(ops_firstx_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_firstx(g));
}

RAP_TEST(ops_ngram_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_ngram(g));
}

RAP_TEST(ops_mapid_gpu)
{
    REQUIRE_GPU();
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    gpu_check_free(t, g, build_mapid(g));
}

/* More descs than gridDim.y allows (65535): desc i reads and writes only
 * its own row (dense: x + i, y + i; sparse: offsets 0, 1, 2, .. shared,
 * each desc over one row of its own offset pointer), so a desc left out
 * of the launch leaves a sentinel behind. */
RAP_TEST(ops_gpu_many_descs)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    enum { ND = 70001 };
    float *x = malloc(sizeof(float) * ND), *y = malloc(sizeof(float) * ND);
    int64_t *off = malloc(sizeof(int64_t) * (ND + 1)), *ids = malloc(sizeof(int64_t) * ND);
    int64_t *yids = malloc(sizeof(int64_t) * ND);
    rap_desc *hd = calloc(ND, sizeof *hd);
    for (int i = 0; i < ND; i++) {
        x[i] = (float)i * 0.5f;
        off[i] = i;
        ids[i] = (int64_t)rnd();
    }
    off[ND] = ND;
    float *dx = dev_copy(t, x, sizeof(float) * ND);
    float *dy = dev_sentinel(t, sizeof(float) * ND);
    int64_t *doff = dev_copy(t, off, sizeof(int64_t) * (ND + 1));
    int64_t *dids = dev_copy(t, ids, sizeof(int64_t) * ND);
    int64_t *dyids = dev_sentinel(t, sizeof(int64_t) * ND);
    REQUIRE(t->failures == 0);
    /* dense: add */
    for (int i = 0; i < ND; i++) {
        hd[i] = dense_desc(dx + i, NULL, dy + i);
        hd[i].f0 = 1.0f;
    }
    rap_desc *dd = dev_copy(t, hd, sizeof *hd * ND);
    REQUIRE(dd != NULL);
    CHECK_OK(rap_op_impls[RAP_OP_ADD].gpu(dd, ND, 0, 1, 0));
    /* sparse: sigrid_hash, desc i over row 0 of offsets off + i */
    for (int i = 0; i < ND; i++) {
        memset(&hd[i], 0, sizeof hd[i]);
        hd[i].xoff = doff + i;
        hd[i].xids = dids;
        hd[i].yoff = doff + i;
        hd[i].yids = dyids;
        hd[i].i0 = 5;
        hd[i].i1 = 1000;
        hd[i].in_kind = hd[i].out_kind = RAP_SPARSE;
        hd[i].off_mode = RAP_OFF_SAME;
    }
    rap_desc *dd2 = dev_copy(t, hd, sizeof *hd * ND);
    REQUIRE(dd2 != NULL);
    CHECK_OK(rap_op_impls[RAP_OP_SIGRID_HASH].gpu(dd2, ND, 0, 1, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaMemcpy(y, dy, sizeof(float) * ND, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(yids, dyids, sizeof(int64_t) * ND, cudaMemcpyDeviceToHost) == cudaSuccess);
    /* the CPU reference on the same layout */
    float *ry = malloc(sizeof(float) * ND);
    int64_t *ryids = malloc(sizeof(int64_t) * ND);
    for (int i = 0; i < ND; i++) {
        rap_desc d = dense_desc(x + i, NULL, ry + i);
        d.f0 = 1.0f;
        rap_op_impls[RAP_OP_ADD].cpu(&d, 0, 1);
        memset(&d, 0, sizeof d);
        d.xoff = off + i;
        d.xids = ids;
        d.yoff = off + i;
        d.yids = ryids;
        d.i0 = 5;
        d.i1 = 1000;
        d.in_kind = d.out_kind = RAP_SPARSE;
        d.off_mode = RAP_OFF_SAME;
        rap_op_impls[RAP_OP_SIGRID_HASH].cpu(&d, 0, 1);
    }
    int64_t j = first_diff(y, ry, ND, sizeof(float));
    CHECK_MSG(j < 0, "add, %d descs: y[%lld] differs", ND, (long long)j);
    j = first_diff(yids, ryids, ND, sizeof(int64_t));
    CHECK_MSG(j < 0, "sigrid_hash, %d descs: yids[%lld] differs", ND, (long long)j);
    cudaFree(dd);
    cudaFree(dd2);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(doff);
    cudaFree(dids);
    cudaFree(dyids);
    free(ry);
    free(ryids);
    free(x);
    free(y);
    free(off);
    free(ids);
    free(yids);
    free(hd);
#endif
}

/* mathf.h's bit identity at scale: log, logit and boxcox over 2^21 rows of
 * random float bit patterns (every class: subnormals, NaNs, infinities,
 * both signs) and of values in (0, 100], GPU vs CPU byte for byte. */
RAP_TEST(ops_mathf_gpu_bits)
{
    REQUIRE_GPU();
    enum { N = 1 << 21 };
    gcase g[MAX_CASES];
    memset(g, 0, sizeof g);
    float params[6] = {0.0f, 1e-5f, 0.0f, 0.37f, -2.5f, 1.75f};
    rap_op_type ops[6] = {RAP_OP_LOG, RAP_OP_LOGIT, RAP_OP_BOXCOX, RAP_OP_BOXCOX, RAP_OP_BOXCOX,
                          RAP_OP_BOXCOX};
    for (int i = 0; i < 6; i++) {
        float *x = malloc(sizeof(float) * N);
        for (int64_t r = 0; r < N; r++)
            x[r] = r % 2 ? bitsf((uint32_t)rnd()) : (float)(1e-6 + 100.0 * rnd01());
        g[i].h.x = x;
        g[i].h.in_kind = RAP_DENSE;
        g[i].n = N;
        g[i].h.f0 = params[i];
        gen_output(&g[i], ops[i], RAP_DENSE, RAP_OFF_NONE, 1);
    }
    gpu_check_free(t, g, 6);
}
