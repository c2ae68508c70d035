/* test_exec.c -- the preprocessing executor (src/prep/exec*.c|cu).
 *
 * Hand plans on batches made here, checked against values computed here;
 * random plans on random data (fused == unfused on the CPU, GPU == CPU bit
 * for bit, pieces of kernels == whole kernels); buffer reuse across loads
 * of different sizes; clean out-of-memory failure; misuse errors.
 *
 * Ops land one by one (src/prep/ops/): a test needing an op whose
 * implementation is missing skips with the op's name; random plans use only
 * the ops that exist. */
#include "test.h"

#include "core/core.h"
#include "prep/exec_internal.h"

#include <stdlib.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------ helpers */

static bool have_op(rap_op_type op, bool gpu)
{
    const rap_op_impl *im = &rap_op_impls[op];
    return gpu ? im->gpu != NULL : im->cpu != NULL;
}

/* Skips the test when one of the listed ops has no CPU implementation. */
#define NEED_OPS(...)                                                          \
    do {                                                                       \
        rap_op_type need_[] = {__VA_ARGS__};                                   \
        for (size_t q_ = 0; q_ < sizeof need_ / sizeof need_[0]; q_++)         \
            if (!have_op(need_[q_], false))                                    \
                SKIP("op %s not implemented yet", rap_op_name(need_[q_]));    \
    } while (0)

static uint64_t rnd(uint64_t *s) { return rap_splitmix64(s); }
static double rnd01(uint64_t *s) { return (double)(rnd(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Fills rows [0, rows) of b with Criteo-like data: dense values mostly small
 * non-negative counts with a heavy tail, some negative, some fractional and
 * some exactly on 0.5/1.0/1.5; null rates per column; sparse lists of 0..K
 * ids (empty lists too), ids mostly 32-bit hashes, some small. */
static void fill_batch(rap_batch *b, int64_t rows, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 12345;
    const int64_t cap = b->cap, K = b->schema.ids_per_row;
    b->rows = rows;
    for (int64_t r = 0; r < rows; r++)
        b->label[r] = (float)(rnd(&s) & 1);
    for (int j = 0; j < b->schema.n_dense; j++) {
        double null_rate = 0.05 + 0.1 * (j % 4);
        float *x = b->dense + j * cap;
        uint8_t *v = b->dense_valid + j * cap;
        for (int64_t r = 0; r < rows; r++) {
            if (rnd01(&s) < null_rate) {
                x[r] = 0;
                v[r] = 0;
                continue;
            }
            v[r] = 1;
            double u = rnd01(&s);
            if (u < 0.05)
                x[r] = -(float)(rnd(&s) % 3);
            else if (u < 0.15)
                x[r] = 0.5f * (float)(rnd(&s) % 4);
            else if (u < 0.3)
                x[r] = (float)rnd01(&s);
            else
                x[r] = floorf(expf((float)(rnd01(&s) * 9.0)));
        }
    }
    for (int j = 0; j < b->schema.n_sparse; j++) {
        double null_rate = 0.03 + 0.07 * (j % 3);
        int64_t *off = b->sparse_off + j * (cap + 1);
        int64_t *ids = b->sparse_ids + j * cap * K;
        uint8_t *v = b->sparse_valid + j * cap;
        off[0] = 0;
        for (int64_t r = 0; r < rows; r++) {
            int64_t n = 0;
            if (rnd01(&s) < null_rate) {
                v[r] = 0;
            } else {
                v[r] = 1;
                n = K == 1 ? 1 : (int64_t)(rnd(&s) % (uint64_t)(K + 1));
            }
            for (int64_t q = 0; q < n; q++) {
                uint64_t u = rnd(&s);
                ids[off[r] + q] = (u & 7) == 0 ? (int64_t)(u >> 59) : (int64_t)(u >> 32);
            }
            off[r + 1] = off[r] + n;
        }
    }
}

static int add_op(rap_test_ctx *t, rap_plan *p, rap_op_type op, int input, double f0, double f1,
                  int64_t i0, int64_t i1)
{
    rap_node n = {0};
    n.op = op;
    n.input = input;
    n.f[0] = f0;
    n.f[1] = f1;
    n.i[0] = i0;
    n.i[1] = i1;
    n.line = 1;
    n.col = 1;
    int idx = -1;
    rap_status s = rap_plan_add_op(p, &n, &idx);
    CHECK_MSG(s == RAP_OK, "add_op %s: %s", rap_op_name(op), rap_last_error());
    return idx;
}

static int add_bucketize(rap_test_ctx *t, rap_plan *p, int input, const double *borders, int nb)
{
    rap_node n = {0};
    n.op = RAP_OP_BUCKETIZE;
    n.input = input;
    n.borders = (double *)borders;
    n.n_aux = nb;
    n.line = 1;
    n.col = 1;
    int idx = -1;
    rap_status s = rap_plan_add_op(p, &n, &idx);
    CHECK_MSG(s == RAP_OK, "add_op bucketize: %s", rap_last_error());
    return idx;
}

static int col_of(const rap_plan *p, const char *name) { return rap_plan_find(p, name); }
static int node_of(const rap_plan *p, const char *name) { return p->cols[rap_plan_find(p, name)].node; }

/* A host column of a raw batch column (arrays point into the batch). */
static rap_host_column raw_col(const rap_batch *b, bool dense, int j)
{
    rap_host_column c = {0};
    c.rows = b->rows;
    c.width = 1;
    if (dense) {
        c.kind = RAP_DENSE;
        c.val = b->dense + j * b->cap;
        c.valid = b->dense_valid + j * b->cap;
    } else {
        c.kind = RAP_SPARSE;
        c.off = b->sparse_off + j * (b->cap + 1);
        c.ids = b->sparse_ids + j * b->cap * b->schema.ids_per_row;
        c.valid = b->sparse_valid + j * b->cap;
    }
    return c;
}

/* An expected sparse column, built row by row. */
typedef struct {
    int64_t rows;
    int64_t *off;  /* (rows+1) */
    int64_t *ids;  /* (cap) */
    uint8_t *valid;
    int64_t cap;
} exp_col;

static void exp_init(exp_col *e, int64_t rows, int64_t ids_cap)
{
    e->rows = rows;
    e->cap = ids_cap > 0 ? ids_cap : 1;
    e->off = calloc((size_t)rows + 1, sizeof(int64_t));
    e->ids = calloc((size_t)e->cap, sizeof(int64_t));
    e->valid = calloc((size_t)rows + 1, 1);
}

static void exp_free(exp_col *e)
{
    free(e->off);
    free(e->ids);
    free(e->valid);
}

static void exp_push(exp_col *e, int64_t r, int64_t id) { e->ids[e->off[r + 1]++] = id; }
static void exp_row(exp_col *e, int64_t r, bool valid)
{
    e->off[r + 1] = e->off[r];
    e->valid[r] = valid;
}

/* Checks a fetched sparse column against an expected one. */
static void check_sparse(rap_test_ctx *t, const char *what, const rap_host_column *got,
                         const exp_col *e)
{
    CHECK_MSG(got->kind == RAP_SPARSE, "%s: kind %d, expected sparse", what, (int)got->kind);
    CHECK_MSG(got->rows == e->rows, "%s: %lld rows, expected %lld", what, (long long)got->rows,
              (long long)e->rows);
    if (got->kind != RAP_SPARSE || got->rows != e->rows)
        return;
    int bad = 0;
    for (int64_t r = 0; r < e->rows && bad < 5; r++) {
        bool ok = got->valid[r] == e->valid[r] && got->off[r + 1] - got->off[r] == e->off[r + 1] - e->off[r];
        for (int64_t q = 0; ok && q < e->off[r + 1] - e->off[r]; q++)
            ok = got->ids[got->off[r] + q] == e->ids[e->off[r] + q];
        if (!ok) {
            bad++;
            CHECK_MSG(0, "%s: row %lld: valid %d len %lld first id %lld, expected valid %d len %lld first id %lld",
                      what, (long long)r, got->valid[r], (long long)(got->off[r + 1] - got->off[r]),
                      (long long)(got->off[r + 1] > got->off[r] ? got->ids[got->off[r]] : -1),
                      e->valid[r], (long long)(e->off[r + 1] - e->off[r]),
                      (long long)(e->off[r + 1] > e->off[r] ? e->ids[e->off[r]] : -1));
        }
    }
    CHECK_MSG(got->off[0] == 0, "%s: fetched offsets start at %lld", what, (long long)got->off[0]);
}

/* Checks a fetched dense column: val and valid per row. */
static void check_dense(rap_test_ctx *t, const char *what, const rap_host_column *got,
                        const float *val, const uint8_t *valid, int64_t rows)
{
    CHECK_MSG(got->kind == RAP_DENSE && got->rows == rows, "%s: kind %d rows %lld", what,
              (int)got->kind, (long long)got->rows);
    if (got->kind != RAP_DENSE || got->rows != rows)
        return;
    int bad = 0;
    for (int64_t r = 0; r < rows && bad < 5; r++) {
        if (memcmp(&got->val[r], &val[r], sizeof(float)) != 0 || got->valid[r] != valid[r]) {
            bad++;
            CHECK_MSG(0, "%s: row %lld: %.9g valid %d, expected %.9g valid %d", what, (long long)r,
                      got->val[r], got->valid[r], val[r], valid[r]);
        }
    }
}

/* Two fetched columns are identical (floats by bits, or both NaN). */
static bool same_column(rap_test_ctx *t, const char *what, const rap_host_column *a,
                        const rap_host_column *b)
{
    if (a->kind != b->kind || a->width != b->width || a->rows != b->rows) {
        CHECK_MSG(0, "%s: shapes differ (kind %d/%d, width %d/%d, rows %lld/%lld)", what,
                  (int)a->kind, (int)b->kind, a->width, b->width, (long long)a->rows,
                  (long long)b->rows);
        return false;
    }
    for (int64_t r = 0; r < a->rows; r++)
        if (a->valid[r] != b->valid[r]) {
            CHECK_MSG(0, "%s: row %lld: valid %d vs %d", what, (long long)r, a->valid[r], b->valid[r]);
            return false;
        }
    if (a->kind == RAP_SPARSE) {
        if (memcmp(a->off, b->off, sizeof(int64_t) * (size_t)(a->rows + 1)) != 0) {
            for (int64_t r = 0; r <= a->rows; r++)
                if (a->off[r] != b->off[r]) {
                    CHECK_MSG(0, "%s: offset %lld: %lld vs %lld", what, (long long)r,
                              (long long)a->off[r], (long long)b->off[r]);
                    break;
                }
            return false;
        }
        for (int64_t q = 0; q < a->off[a->rows]; q++)
            if (a->ids[q] != b->ids[q]) {
                CHECK_MSG(0, "%s: id %lld: %lld vs %lld", what, (long long)q, (long long)a->ids[q],
                          (long long)b->ids[q]);
                return false;
            }
        return true;
    }
    int64_t n = a->rows * a->width;
    for (int64_t q = 0; q < n; q++) {
        float x = a->val[q], y = b->val[q];
        if (memcmp(&x, &y, sizeof x) != 0 && !(x != x && y != y)) {
            CHECK_MSG(0, "%s: value %lld (row %lld): %.9g vs %.9g", what, (long long)q,
                      (long long)(q / a->width), x, y);
            return false;
        }
    }
    return true;
}

/* Every column of a and b (same plan) is identical. */
static void same_outputs(rap_test_ctx *t, const char *what, const rap_plan *plan, const rap_prep *a,
                         const rap_prep *b)
{
    for (int c = 0; c < plan->n_cols; c++) {
        rap_host_column x, y;
        CHECK_OK(rap_prep_fetch(a, c, &x));
        CHECK_OK(rap_prep_fetch(b, c, &y));
        char name[160];
        snprintf(name, sizeof name, "%s: column %s", what, plan->cols[c].name);
        same_column(t, name, &x, &y);
        rap_host_column_free(&x);
        rap_host_column_free(&y);
    }
}

/* ------------------------------------------------------------ references */

static uint64_t twang_mix64(uint64_t k)
{
    k = ~k + (k << 21);
    k ^= k >> 24;
    k = k + (k << 3) + (k << 8);
    k ^= k >> 14;
    k = k + (k << 2) + (k << 4);
    k ^= k >> 28;
    k = k + (k << 31);
    return k;
}

static int64_t ref_sigrid(int64_t x, int64_t salt, int64_t max)
{
    const uint64_t kMul = 0x9ddfea08eb382d69ULL;
    uint64_t upper = (uint64_t)salt, lower = twang_mix64((uint64_t)x);
    uint64_t a = (lower ^ upper) * kMul;
    a ^= a >> 47;
    uint64_t b = (upper ^ a) * kMul;
    b ^= b >> 47;
    b = b * kMul;
    int64_t h = (int64_t)b;
    if (max == 1)
        return 0;
    int64_t m = h % max;
    return m < 0 ? m + max : m;
}

static int64_t ref_bucket(double v, const double *bd, int n)
{
    int i = 0;
    while (i < n && bd[i] < v)
        i++;
    if (i >= n - 1)
        return i;
    return v < bd[i + 1] ? i : i + 1;
}

/* Expected outputs of the sparse ops used by the hand plans. */
static void ref_fill_null_sparse(exp_col *e, const rap_host_column *x, int64_t v)
{
    for (int64_t r = 0; r < x->rows; r++) {
        exp_row(e, r, true);
        if (!x->valid[r])
            exp_push(e, r, v);
        else
            for (int64_t q = x->off[r]; q < x->off[r + 1]; q++)
                exp_push(e, r, x->ids[q]);
    }
}

static void ref_sigrid_col(exp_col *e, const exp_col *x, int64_t salt, int64_t max)
{
    for (int64_t r = 0; r < x->rows; r++) {
        exp_row(e, r, x->valid[r]);
        for (int64_t q = x->off[r]; q < x->off[r + 1]; q++)
            exp_push(e, r, ref_sigrid(x->ids[q], salt, max));
    }
}

static void ref_firstx(exp_col *e, const rap_host_column *x, int64_t k)
{
    for (int64_t r = 0; r < x->rows; r++) {
        exp_row(e, r, x->valid[r]);
        for (int64_t q = x->off[r]; q < x->off[r + 1] && q < x->off[r] + k; q++)
            exp_push(e, r, x->ids[q]);
    }
}

static void ref_ngram(exp_col *e, const exp_col *x, int64_t n)
{
    for (int64_t r = 0; r < x->rows; r++) {
        exp_row(e, r, x->valid[r]);
        int64_t len = x->off[r + 1] - x->off[r], m = n < len ? n : len;
        if (len == 0)
            continue;
        for (int64_t w = 0; w + m <= len; w++)
            for (int64_t q = 0; q < m; q++)
                exp_push(e, r, x->ids[x->off[r] + w + q]);
    }
}

static void exp_from_host(exp_col *e, const rap_host_column *x)
{
    for (int64_t r = 0; r < x->rows; r++) {
        exp_row(e, r, x->valid[r]);
        for (int64_t q = x->off[r]; q < x->off[r + 1]; q++)
            exp_push(e, r, x->ids[q]);
    }
}

/* ------------------------------------------------------------ hand plans */

/* Criteo-shaped (one id per row): fill_null on every column, bucketize of
 * the raw (nullable) int_0 into a new column, sigrid_hash after fill_null. */
RAP_TEST(exec_hand_criteo_shape)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH, RAP_OP_BUCKETIZE);
    rap_schema sc = {3, 3, 1};
    const int64_t B = 700;
    rap_plan *p;
    REQUIRE_OK(rap_plan_create(sc, "hand1", &p));
    static const double borders[] = {0.5, 1.0, 1.5};
    int bk = add_bucketize(t, p, node_of(p, "int_0"), borders, 3);
    CHECK(p->nodes[bk].off == RAP_OFF_COMPUTED);
    REQUIRE_OK(rap_plan_assign(p, "bucket", bk));
    for (int j = 0; j < 3; j++) {
        char name[16];
        snprintf(name, sizeof name, "int_%d", j);
        REQUIRE_OK(rap_plan_assign(p, name, add_op(t, p, RAP_OP_FILL_NULL, node_of(p, name), -1.5 + j, 0, 0, 0)));
        snprintf(name, sizeof name, "cat_%d", j);
        int f = add_op(t, p, RAP_OP_FILL_NULL, node_of(p, name), 7 + j, 0, 0, 0);
        CHECK(p->nodes[f].off == RAP_OFF_ARANGE);
        REQUIRE_OK(rap_plan_assign(p, name, add_op(t, p, RAP_OP_SIGRID_HASH, f, 0, 0, 11 * j, 1000 + j)));
    }
    rap_plan_finish(p);
    rap_fusion fu;
    REQUIRE_OK(rap_fuse_levels(p, &fu));
    rap_prep_config cfg = {.device = RAP_CPU, .max_rows = B, .threads = 2};
    rap_prep *ex;
    REQUIRE_OK(rap_prep_create(p, &fu, &cfg, &ex));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, sc, B, false));
    fill_batch(&b, B, 1);
    REQUIRE_OK(rap_prep_load(ex, &b));
    REQUIRE_OK(rap_prep_run(ex));
    REQUIRE_OK(rap_prep_sync(ex));
    CHECK(rap_prep_n_kernels(ex) == fu.n);
    CHECK(memcmp(rap_prep_label(ex), b.label, sizeof(float) * B) == 0);

    float *val = malloc(sizeof(float) * B);
    uint8_t *ones = malloc(B);
    memset(ones, 1, B);
    for (int j = 0; j < 3; j++) {
        char name[16];
        snprintf(name, sizeof name, "int_%d", j);
        rap_host_column x = raw_col(&b, true, j), got;
        for (int64_t r = 0; r < B; r++)
            val[r] = x.valid[r] ? x.val[r] : (float)(-1.5 + j);
        REQUIRE_OK(rap_prep_fetch(ex, col_of(p, name), &got));
        check_dense(t, name, &got, val, ones, B);
        rap_host_column_free(&got);

        snprintf(name, sizeof name, "cat_%d", j);
        rap_host_column xs = raw_col(&b, false, j);
        exp_col f, h;
        exp_init(&f, B, B);
        exp_init(&h, B, B);
        ref_fill_null_sparse(&f, &xs, 7 + j);
        ref_sigrid_col(&h, &f, 11 * j, 1000 + j);
        REQUIRE_OK(rap_prep_fetch(ex, col_of(p, name), &got));
        check_sparse(t, name, &got, &h);
        rap_col_view v;
        REQUIRE_OK(rap_prep_column(ex, col_of(p, name), &v));
        CHECK(v.bounded && v.lo == 0 && v.hi == 999 + j && v.valid == NULL);
        rap_host_column_free(&got);
        exp_free(&f);
        exp_free(&h);
    }
    /* bucketize of a nullable dense column: null rows are empty lists */
    rap_host_column x0 = raw_col(&b, true, 0), got;
    exp_col e;
    exp_init(&e, B, B);
    for (int64_t r = 0; r < B; r++) {
        exp_row(&e, r, x0.valid[r]);
        if (x0.valid[r])
            exp_push(&e, r, ref_bucket(x0.val[r], borders, 3));
    }
    REQUIRE_OK(rap_prep_fetch(ex, col_of(p, "bucket"), &got));
    check_sparse(t, "bucket", &got, &e);
    rap_host_column_free(&got);
    exp_free(&e);

    free(val);
    free(ones);
    rap_batch_free(&b);
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_plan_free(p);
}

/* Multi-id lists (K = 4): every COMPUTED path. */
typedef struct {
    rap_plan *p;
    int c_fill, c_hash, c_first, c_ngram, c_fng, c_bucket, c_dense;
} multi_plan;

static bool build_multi(rap_test_ctx *t, multi_plan *m)
{
    rap_schema sc = {2, 3, 4};
    if (rap_plan_create(sc, "hand2", &m->p) != RAP_OK)
        return false;
    rap_plan *p = m->p;
    static const double borders[] = {0, 2, 3, 5, 500, 1000};
    int f = add_op(t, p, RAP_OP_FILL_NULL, node_of(p, "cat_0"), 7, 0, 0, 0);
    CHECK(p->nodes[f].off == RAP_OFF_COMPUTED);
    int h = add_op(t, p, RAP_OP_SIGRID_HASH, f, 0, 0, 3, 1000);
    CHECK(p->nodes[h].off == RAP_OFF_SAME);
    int fx = add_op(t, p, RAP_OP_FIRSTX, node_of(p, "cat_1"), 0, 0, 2, 0);
    CHECK(p->nodes[fx].off == RAP_OFF_COMPUTED);
    int ng = add_op(t, p, RAP_OP_NGRAM, node_of(p, "cat_2"), 0, 0, 2, 0);
    CHECK(p->nodes[ng].off == RAP_OFF_COMPUTED);
    int fng = add_op(t, p, RAP_OP_NGRAM, fx, 0, 0, 2, 0); /* computed from computed */
    int bk = add_bucketize(t, p, node_of(p, "int_0"), borders, 6);
    CHECK(p->nodes[bk].off == RAP_OFF_COMPUTED);
    int fd = add_op(t, p, RAP_OP_FILL_NULL, node_of(p, "int_1"), 0.25, 0, 0, 0);
    bool ok = rap_plan_assign(p, "fill", f) == RAP_OK && rap_plan_assign(p, "hash", h) == RAP_OK &&
              rap_plan_assign(p, "first", fx) == RAP_OK && rap_plan_assign(p, "ngram", ng) == RAP_OK &&
              rap_plan_assign(p, "first_ngram", fng) == RAP_OK &&
              rap_plan_assign(p, "bucket", bk) == RAP_OK && rap_plan_assign(p, "int_1", fd) == RAP_OK;
    rap_plan_finish(p);
    m->c_fill = col_of(p, "fill");
    m->c_hash = col_of(p, "hash");
    m->c_first = col_of(p, "first");
    m->c_ngram = col_of(p, "ngram");
    m->c_fng = col_of(p, "first_ngram");
    m->c_bucket = col_of(p, "bucket");
    m->c_dense = col_of(p, "int_1");
    return ok;
}

/* Checks every column of the multi plan for the batch b. */
static void check_multi(rap_test_ctx *t, const multi_plan *m, const rap_prep *ex, const rap_batch *b)
{
    static const double borders[] = {0, 2, 3, 5, 500, 1000};
    const int64_t R = b->rows, cap = R * 16 + 1;
    rap_host_column c0 = raw_col(b, false, 0), c1 = raw_col(b, false, 1), c2 = raw_col(b, false, 2);
    exp_col f, h, fx, ng, fng, bk, x2;
    exp_init(&f, R, cap);
    exp_init(&h, R, cap);
    exp_init(&fx, R, cap);
    exp_init(&ng, R, cap);
    exp_init(&fng, R, cap);
    exp_init(&bk, R, cap);
    exp_init(&x2, R, cap);
    ref_fill_null_sparse(&f, &c0, 7);
    ref_sigrid_col(&h, &f, 3, 1000);
    ref_firstx(&fx, &c1, 2);
    exp_from_host(&x2, &c2);
    ref_ngram(&ng, &x2, 2);
    ref_ngram(&fng, &fx, 2);
    rap_host_column d0 = raw_col(b, true, 0), d1 = raw_col(b, true, 1);
    for (int64_t r = 0; r < R; r++) {
        exp_row(&bk, r, d0.valid[r]);
        if (d0.valid[r])
            exp_push(&bk, r, ref_bucket(d0.val[r], borders, 6));
    }
    struct {
        int col;
        exp_col *e;
        const char *name;
    } cases[] = {{m->c_fill, &f, "fill_null multi-id"}, {m->c_hash, &h, "sigrid_hash after fill"},
                 {m->c_first, &fx, "firstx(2)"},       {m->c_ngram, &ng, "ngram(2)"},
                 {m->c_fng, &fng, "ngram(firstx)"},    {m->c_bucket, &bk, "bucketize nullable dense"}};
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        rap_host_column got;
        CHECK_OK(rap_prep_fetch(ex, cases[q].col, &got));
        check_sparse(t, cases[q].name, &got, cases[q].e);
        rap_host_column_free(&got);
        exp_free(cases[q].e);
    }
    exp_free(&x2);
    float *val = malloc(sizeof(float) * (size_t)(R + 1));
    uint8_t *ones = malloc((size_t)R + 1);
    memset(ones, 1, (size_t)R + 1);
    for (int64_t r = 0; r < R; r++)
        val[r] = d1.valid[r] ? d1.val[r] : 0.25f;
    rap_host_column got;
    CHECK_OK(rap_prep_fetch(ex, m->c_dense, &got));
    check_dense(t, "fill_null dense", &got, val, ones, R);
    rap_host_column_free(&got);
    free(val);
    free(ones);
}

RAP_TEST(exec_hand_multi_id)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH, RAP_OP_FIRSTX, RAP_OP_NGRAM, RAP_OP_BUCKETIZE);
    multi_plan m;
    REQUIRE(build_multi(t, &m));
    const int64_t B = 1500;
    for (int fused = 0; fused < 3; fused++) { /* none, levels, levels + rows */
        rap_fusion fu;
        REQUIRE_OK(rap_fuse(m.p, fused == 0 ? RAP_FUSE_NONE : fused == 1 ? RAP_FUSE_LEVELS
                                                                        : RAP_FUSE_ROWS, &fu));
        rap_prep_config cfg = {.device = RAP_CPU, .max_rows = B, .threads = 3};
        rap_prep *ex;
        REQUIRE_OK(rap_prep_create(m.p, &fu, &cfg, &ex));
        rap_batch b;
        REQUIRE_OK(rap_batch_create(&b, m.p->schema, B, false));
        fill_batch(&b, B, 2 + fused);
        REQUIRE_OK(rap_prep_load(ex, &b));
        REQUIRE_OK(rap_prep_run(ex));
        check_multi(t, &m, ex, &b);
        rap_batch_free(&b);
        rap_prep_free(ex);
        rap_fusion_free(&fu);
    }
    rap_plan_free(m.p);
}

/* Buffers are made once: batches of other sizes (and a batch of another
 * capacity) reuse them, and every result is still right. */
RAP_TEST(exec_reuse_buffers)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH, RAP_OP_FIRSTX, RAP_OP_NGRAM, RAP_OP_BUCKETIZE);
    multi_plan m;
    REQUIRE(build_multi(t, &m));
    const int64_t B = 1024;
    rap_fusion fu;
    REQUIRE_OK(rap_fuse_levels(m.p, &fu));
    rap_prep_config cfg = {.device = RAP_CPU, .max_rows = B};
    rap_prep *ex;
    REQUIRE_OK(rap_prep_create(m.p, &fu, &cfg, &ex));
    rap_col_view first[16];
    for (int c = 0; c < m.p->n_cols && c < 16; c++)
        REQUIRE_OK(rap_prep_column(ex, c, &first[c]));
    static const int64_t sizes[] = {1024, 17, 1, 600, 0, 1023};
    for (size_t q = 0; q < sizeof sizes / sizeof sizes[0]; q++) {
        rap_batch b;
        int64_t cap = q == 3 ? 700 : B; /* a batch of another capacity */
        REQUIRE_OK(rap_batch_create(&b, m.p->schema, cap, false));
        fill_batch(&b, sizes[q], 10 + q);
        REQUIRE_OK(rap_prep_load(ex, &b));
        /* the caller's batch may change right after a CPU load */
        memset(b.block, 0xA5, b.block_bytes);
        REQUIRE_OK(rap_prep_run(ex));
        fill_batch(&b, sizes[q], 10 + q);
        check_multi(t, &m, ex, &b);
        for (int c = 0; c < m.p->n_cols && c < 16; c++) {
            rap_col_view v;
            REQUIRE_OK(rap_prep_column(ex, c, &v));
            CHECK(v.rows == sizes[q]);
            CHECK_MSG(v.val == first[c].val && v.off == first[c].off && v.ids == first[c].ids &&
                          v.valid == first[c].valid,
                      "column %d moved between loads", c);
        }
        rap_batch_free(&b);
    }
    /* more rows than max_rows is refused */
    rap_batch big;
    REQUIRE_OK(rap_batch_create(&big, m.p->schema, B + 1, false));
    fill_batch(&big, B + 1, 3);
    CHECK(rap_prep_load(ex, &big) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "does not fit") != NULL);
    rap_batch_free(&big);
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_plan_free(m.p);
}

/* ------------------------------------------------------------ random plans */

/* A random plan over schema sc with about n_ops ops, using only ops that
 * have CPU (and, if gpu, GPU) implementations. */
static rap_plan *random_plan(rap_test_ctx *t, rap_schema sc, int n_ops, uint64_t seed, bool gpu)
{
    uint64_t s = seed * 7919 + 3;
    rap_plan *p;
    if (rap_plan_create(sc, "random", &p) != RAP_OK)
        return NULL;
    int made = 0;
    for (int tries = 0; made < n_ops && tries < n_ops * 20; tries++) {
        int input = (int)(rnd(&s) % (uint64_t)p->n_nodes);
        const rap_node *in = &p->nodes[input];
        if (in->kind == RAP_VECTOR || in->ids_per_row > 24)
            continue;
        rap_op_type op = (rap_op_type)(1 + rnd(&s) % (RAP_OP_COUNT - 1));
        if (!have_op(op, false) || (gpu && !have_op(op, true)))
            continue;
        bool dense = in->kind == RAP_DENSE;
        rap_node n = {0};
        n.op = op;
        n.input = input;
        n.line = tries + 1;
        n.col = 1;
        double borders[8];
        int64_t map[40];
        switch (op) {
        case RAP_OP_FILL_NULL:
            n.f[0] = dense ? 0.5 * (double)(rnd(&s) % 5) : (double)(rnd(&s) % 50);
            break;
        case RAP_OP_CAST:
            n.i[0] = rnd(&s) & 1 ? RAP_DENSE : RAP_SPARSE;
            break;
        case RAP_OP_LOGIT:
            n.f[0] = rnd(&s) & 1 ? 1e-5 : 0.1;
            break;
        case RAP_OP_BOXCOX:
            n.f[0] = (double)(rnd(&s) % 3) * 0.5 - 0.5;
            break;
        case RAP_OP_ADD:
        case RAP_OP_MUL:
            n.f[0] = rnd(&s) & 1 ? 3.0 : 0.25;
            break;
        case RAP_OP_ONEHOT:
            n.f[0] = 0;
            n.f[1] = 10 + (double)(rnd(&s) % 90);
            n.i[0] = 1 + (int64_t)(rnd(&s) % 9);
            break;
        case RAP_OP_BUCKETIZE: {
            int nb = 1 + (int)(rnd(&s) % 7);
            double v = dense ? -1 : 0;
            for (int q = 0; q < nb; q++) {
                v += dense ? 0.5 * (double)(rnd(&s) % 4) : (double)(rnd(&s) % 8);
                borders[q] = v;
            }
            n.borders = borders;
            n.n_aux = nb;
            break;
        }
        case RAP_OP_SIGRID_HASH:
            n.i[0] = (int64_t)(rnd(&s) % 1000);
            n.i[1] = rnd(&s) & 1 ? 1 + (int64_t)(rnd(&s) % 100000) : ((int64_t)1 << 40);
            break;
        case RAP_OP_FIRSTX:
            n.i[0] = 1 + (int64_t)(rnd(&s) % 3);
            break;
        case RAP_OP_CLAMP:
            n.f[0] = dense ? 0.5 : (double)(rnd(&s) % 10);
            n.f[1] = n.f[0] + (dense ? 20.5 : (double)(rnd(&s) % 1000000));
            break;
        case RAP_OP_NGRAM:
            n.i[0] = 1 + (int64_t)(rnd(&s) % 3);
            break;
        case RAP_OP_MAPID: {
            int nm = 5 + (int)(rnd(&s) % 35);
            for (int q = 0; q < nm; q++)
                map[q] = (int64_t)(rnd(&s) % 1000) - 10;
            n.map = map;
            n.n_aux = nm;
            break;
        }
        default:
            break;
        }
        int idx;
        if (rap_plan_add_op(p, &n, &idx) != RAP_OK)
            continue; /* e.g. a dense-only op drawn for a sparse input */
        made++;
        if (rnd(&s) % 3 != 0) {
            char name[32];
            snprintf(name, sizeof name, "c%d", made);
            if (rap_plan_assign(p, name, idx) != RAP_OK)
                CHECK(0);
        }
    }
    rap_plan_finish(p);
    if (getenv("EXEC_DEBUG")) {
        int nc = 0, live = 0, ops[RAP_OP_COUNT] = {0};
        for (int i = 0; i < p->n_nodes; i++)
            if (p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT) {
                live++;
                ops[p->nodes[i].op]++;
                nc += p->nodes[i].off == RAP_OFF_COMPUTED;
            }
        fprintf(stderr, "plan seed %llu: %d live ops, %d computed:", (unsigned long long)seed, live, nc);
        for (int o = 1; o < RAP_OP_COUNT; o++)
            fprintf(stderr, " %s=%d", rap_op_name((rap_op_type)o), ops[o]);
        fprintf(stderr, "\n");
    }
    return p;
}

/* kind: rap_fuse_kind (LEVELS, NONE, ROWS). */
static rap_status make_exec(const rap_plan *p, rap_fuse_kind kind, rap_device dev, int64_t B,
                            rap_prep **ex)
{
    rap_fusion fu;
    RAP_TRY(rap_fuse(p, kind, &fu));
    rap_prep_config cfg = {.device = dev, .max_rows = B, .threads = 2};
    rap_status s = rap_prep_create(p, &fu, &cfg, ex);
    rap_fusion_free(&fu);
    return s;
}

static const rap_schema g_rand_schema = {4, 5, 3};

/* Fused (by levels, and by levels then rows) and unfused runs of the same
 * plan give identical columns (CPU). */
static void fused_vs_unfused(rap_test_ctx *t, rap_fuse_kind kind)
{
    const int64_t B = 777;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        rap_plan *p = random_plan(t, g_rand_schema, 10 + (int)(seed * 5), seed, false);
        REQUIRE(p);
        rap_prep *a = NULL, *b = NULL;
        REQUIRE_OK(make_exec(p, kind, RAP_CPU, B, &a));
        REQUIRE_OK(make_exec(p, RAP_FUSE_NONE, RAP_CPU, B, &b));
        rap_batch bt;
        REQUIRE_OK(rap_batch_create(&bt, g_rand_schema, B, false));
        for (int round = 0; round < 2; round++) {
            fill_batch(&bt, round ? 413 : B, seed * 10 + (uint64_t)round);
            REQUIRE_OK(rap_prep_load(a, &bt));
            REQUIRE_OK(rap_prep_load(b, &bt));
            REQUIRE_OK(rap_prep_run(a));
            REQUIRE_OK(rap_prep_run(b));
            char what[64];
            snprintf(what, sizeof what, "seed %llu round %d", (unsigned long long)seed, round);
            same_outputs(t, what, p, a, b);
        }
        CHECK(rap_prep_n_kernels(a) <= rap_prep_n_kernels(b));
        CHECK(rap_prep_launches(a) > 0 && rap_prep_launches(a) <= rap_prep_launches(b));
        rap_batch_free(&bt);
        rap_prep_free(a);
        rap_prep_free(b);
        rap_plan_free(p);
        if (t->failures)
            return;
    }
}

RAP_TEST(exec_random_fused_vs_unfused_cpu)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    fused_vs_unfused(t, RAP_FUSE_LEVELS);
}

RAP_TEST(exec_random_rows_vs_unfused_cpu)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    fused_vs_unfused(t, RAP_FUSE_ROWS);
}

/* Runs every kernel of ex in pieces: descs split in up to 3 parts, each
 * part's rows in up to 4 parts (the last reaching past the batch, which
 * is clipped), in order of r0 or, with rotate, starting from a later part
 * and wrapping (a rank computing a later share of a column first:
 * the first piece of a batch makes a COMPUTED kernel's offsets). */
static rap_status run_in_pieces(rap_prep *ex, int64_t rows, uint64_t seed, void *stream,
                                bool rotate)
{
    uint64_t s = seed;
    for (int k = 0; k < rap_prep_n_kernels(ex); k++) {
        int nd = rap_prep_n_descs(ex, k);
        int cut1 = (int)(rnd(&s) % (uint64_t)(nd + 1)), cut2 = (int)(rnd(&s) % (uint64_t)(nd + 1));
        if (cut1 > cut2) {
            int q = cut1;
            cut1 = cut2;
            cut2 = q;
        }
        int dcuts[4] = {0, rap_prep_unit_start(ex, k, cut1), rap_prep_unit_start(ex, k, cut2), nd};
        for (int dp = 0; dp < 3; dp++) {
            int64_t cut[5] = {0};
            for (int rp = 0; rp < 4; rp++) {
                int64_t r1 = rp == 3 ? rows + 100
                                     : cut[rp] + (int64_t)(rnd(&s) % (uint64_t)(rows / 3 + 2));
                cut[rp + 1] = r1 < rows || rp == 3 ? r1 : rows;
            }
            int rot = rotate ? 1 + (int)(rnd(&s) % 3) : 0;
            for (int i = 0; i < 4; i++) {
                int rp = (rot + i) % 4;
                RAP_TRY(rap_prep_run_kernel(ex, k, dcuts[dp], dcuts[dp + 1], cut[rp], cut[rp + 1],
                                            stream));
            }
        }
    }
    return RAP_OK;
}

/* A kernel run in desc pieces and row pieces equals the whole. On the GPU
 * the pieces run on a stream of the caller's (after the load is synced). */
static void pieces_test(rap_test_ctx *t, rap_device dev)
{
    void *stream = NULL;
#ifdef RAP_HAVE_CUDA
    cudaStream_t cs = NULL;
    if (dev == RAP_GPU) {
        REQUIRE(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess);
        stream = cs;
    }
#endif
    const int64_t B = 900;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        rap_plan *p = random_plan(t, g_rand_schema, 30, seed + 100, dev == RAP_GPU);
        REQUIRE(p);
        rap_prep *whole = NULL, *parts = NULL;
        /* odd seeds: row kernels, in pieces of whole groups */
        rap_fuse_kind kind = (seed & 1) ? RAP_FUSE_ROWS : RAP_FUSE_LEVELS;
        REQUIRE_OK(make_exec(p, RAP_FUSE_LEVELS, dev, B, &whole));
        REQUIRE_OK(make_exec(p, kind, dev, B, &parts));
        rap_batch bt;
        REQUIRE_OK(rap_batch_create(&bt, g_rand_schema, B, dev == RAP_GPU));
        fill_batch(&bt, 851, seed + 7);
        REQUIRE_OK(rap_prep_load(whole, &bt));
        REQUIRE_OK(rap_prep_load(parts, &bt));
        REQUIRE_OK(rap_prep_run(whole));
        REQUIRE_OK(rap_prep_sync(parts));
        REQUIRE_OK(run_in_pieces(parts, 851, seed, stream, (seed & 2) == 0));
        REQUIRE_OK(rap_prep_sync(whole));
#ifdef RAP_HAVE_CUDA
        if (cs)
            REQUIRE(cudaStreamSynchronize(cs) == cudaSuccess);
#endif
        same_outputs(t, "pieces", p, whole, parts);
        rap_batch_free(&bt);
        rap_prep_free(whole);
        rap_prep_free(parts);
        rap_plan_free(p);
        if (t->failures)
            break;
    }
#ifdef RAP_HAVE_CUDA
    if (cs)
        cudaStreamDestroy(cs);
#endif
}

RAP_TEST(exec_random_pieces_cpu)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    pieces_test(t, RAP_CPU);
}

RAP_TEST(exec_random_pieces_gpu)
{
    REQUIRE_GPU();
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    pieces_test(t, RAP_GPU);
}

/* GPU fused (and unfused) == CPU, bit for bit, on random plans; batches of
 * B rows (one block copy) and of another capacity (strided copies). */
RAP_TEST(exec_random_gpu_vs_cpu)
{
    REQUIRE_GPU();
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    const int64_t B = 2048;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        rap_plan *p = random_plan(t, g_rand_schema, 15 + (int)(seed * 6), seed + 1000, true);
        REQUIRE(p);
        rap_prep *cpu = NULL, *gpu = NULL, *gpu_unfused = NULL;
        REQUIRE_OK(make_exec(p, RAP_FUSE_NONE, RAP_CPU, B, &cpu));
        /* odd seeds: the GPU's row kernels against the unfused CPU */
        REQUIRE_OK(make_exec(p, (seed & 1) ? RAP_FUSE_ROWS : RAP_FUSE_LEVELS, RAP_GPU, B, &gpu));
        REQUIRE_OK(make_exec(p, RAP_FUSE_NONE, RAP_GPU, B, &gpu_unfused));
        for (int round = 0; round < 3; round++) {
            int64_t cap = round == 2 ? 1500 : B, rows = round == 0 ? B : 1234;
            rap_batch bt;
            REQUIRE_OK(rap_batch_create(&bt, g_rand_schema, cap, true));
            fill_batch(&bt, rows, seed * 3 + (uint64_t)round);
            REQUIRE_OK(rap_prep_load(cpu, &bt));
            REQUIRE_OK(rap_prep_load(gpu, &bt));
            REQUIRE_OK(rap_prep_load(gpu_unfused, &bt));
            REQUIRE_OK(rap_prep_run(cpu));
            REQUIRE_OK(rap_prep_run(gpu));
            REQUIRE_OK(rap_prep_run(gpu_unfused));
            REQUIRE_OK(rap_prep_sync(gpu));
            REQUIRE_OK(rap_prep_sync(gpu_unfused));
            char what[64];
            snprintf(what, sizeof what, "gpu vs cpu, seed %llu round %d", (unsigned long long)seed, round);
            same_outputs(t, what, p, cpu, gpu);
            snprintf(what, sizeof what, "gpu unfused vs cpu, seed %llu round %d",
                     (unsigned long long)seed, round);
            same_outputs(t, what, p, cpu, gpu_unfused);
            rap_batch_free(&bt);
        }
        rap_prep_free(cpu);
        rap_prep_free(gpu);
        rap_prep_free(gpu_unfused);
        rap_plan_free(p);
        if (t->failures)
            return;
    }
}

/* The GPU executor on the hand multi-id plan, checked against the values
 * computed here (not only against the CPU executor). */
RAP_TEST(exec_hand_multi_id_gpu)
{
    REQUIRE_GPU();
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH, RAP_OP_FIRSTX, RAP_OP_NGRAM, RAP_OP_BUCKETIZE);
    multi_plan m;
    REQUIRE(build_multi(t, &m));
    const int64_t B = 3000;
    rap_fusion fu;
    REQUIRE_OK(rap_fuse_levels(m.p, &fu));
    rap_prep_config cfg = {.device = RAP_GPU, .max_rows = B};
    rap_prep *ex;
    REQUIRE_OK(rap_prep_create(m.p, &fu, &cfg, &ex));
    static const int64_t sizes[] = {3000, 5, 2999};
    for (int q = 0; q < 3; q++) {
        rap_batch b;
        REQUIRE_OK(rap_batch_create(&b, m.p->schema, B, true));
        fill_batch(&b, sizes[q], 50 + (uint64_t)q);
        REQUIRE_OK(rap_prep_load(ex, &b));
        REQUIRE_OK(rap_prep_run(ex));
        REQUIRE_OK(rap_prep_sync(ex));
        check_multi(t, &m, ex, &b);
        rap_batch_free(&b);
    }
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_plan_free(m.p);
}

/* ------------------------------------------------------------ failures */

static rap_plan *small_plan(rap_test_ctx *t)
{
    rap_plan *p;
    if (rap_plan_create(rap_schema_criteo(), "small", &p) != RAP_OK)
        return NULL;
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        char name[16];
        snprintf(name, sizeof name, "cat_%d", j);
        int f = add_op(t, p, RAP_OP_FILL_NULL, node_of(p, name), 0, 0, 0, 0);
        rap_plan_assign(p, name, f);
    }
    rap_plan_finish(p);
    return p;
}

/* A plan too big for the memory fails before allocating, with the message. */
static void oom_test(rap_test_ctx *t, rap_device dev)
{
    rap_plan *p = small_plan(t);
    REQUIRE(p);
    rap_fusion fu;
    REQUIRE_OK(rap_fuse_levels(p, &fu));
    rap_prep_config cfg = {.device = dev, .max_rows = (int64_t)1 << 36};
    rap_prep *ex = (rap_prep *)1;
    rap_status s = rap_prep_create(p, &fu, &cfg, &ex);
    CHECK_MSG(s == RAP_ERR_NOMEM, "got %s: %s", rap_status_name(s), rap_last_error());
    CHECK(ex == NULL);
    char want[160];
    snprintf(want, sizeof want, "GiB of %s memory for batches of 68719476736 rows",
             dev == RAP_GPU ? "GPU" : "host");
    CHECK_MSG(strstr(rap_last_error(), "plan needs ") && strstr(rap_last_error(), want),
              "message: %s", rap_last_error());
    /* and a sensible size still works afterwards */
    cfg.max_rows = 4096;
    REQUIRE_OK(rap_prep_create(p, &fu, &cfg, &ex));
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_plan_free(p);
}

RAP_TEST(exec_oom_message_cpu)
{
    NEED_OPS(RAP_OP_FILL_NULL);
    oom_test(t, RAP_CPU);
}

RAP_TEST(exec_oom_message_gpu)
{
    REQUIRE_GPU();
    NEED_OPS(RAP_OP_FILL_NULL);
    oom_test(t, RAP_GPU);
}

RAP_TEST(exec_misuse)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_FIRSTX);
    rap_prep_free(NULL);
    rap_host_column_free(NULL);
    rap_schema sc = {1, 2, 4};
    rap_plan *p;
    REQUIRE_OK(rap_plan_create(sc, "misuse", &p));
    int fx = add_op(t, p, RAP_OP_FIRSTX, node_of(p, "cat_0"), 0, 0, 1, 0);
    int f2 = add_op(t, p, RAP_OP_FILL_NULL, fx, 3, 0, 0, 0);
    REQUIRE_OK(rap_plan_assign(p, "x", f2));
    rap_fusion fu;
    /* not finished: nothing is live */
    REQUIRE_OK(rap_fuse_levels(p, &fu));
    rap_prep_config cfg = {.device = RAP_CPU, .max_rows = 100};
    rap_prep *ex = NULL;
    CHECK(rap_prep_create(p, &fu, &cfg, &ex) == RAP_ERR_ARG && ex == NULL);
    CHECK(strstr(rap_last_error(), "rap_plan_finish") != NULL);
    rap_fusion_free(&fu);
    rap_plan_finish(p);
    REQUIRE_OK(rap_fuse_levels(p, &fu));
    REQUIRE(fu.n == 2);
    /* kernels out of dependency order */
    rap_kernel tmp = fu.kernels[0];
    fu.kernels[0] = fu.kernels[1];
    fu.kernels[1] = tmp;
    CHECK(rap_prep_create(p, &fu, &cfg, &ex) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "dependencies") != NULL);
    fu.kernels[1] = fu.kernels[0];
    fu.kernels[0] = tmp;
    cfg.max_rows = 0;
    CHECK(rap_prep_create(p, &fu, &cfg, &ex) == RAP_ERR_ARG);
    cfg.max_rows = 100;
    char why[200];
    if (!rap_gpu_available(why, sizeof why)) {
        cfg.device = RAP_GPU;
        CHECK(rap_prep_create(p, &fu, &cfg, &ex) == RAP_ERR_NO_GPU);
        CHECK(strstr(rap_last_error(), why) != NULL);
        cfg.device = RAP_CPU;
    }
    REQUIRE_OK(rap_prep_create(p, &fu, &cfg, &ex));
    /* before any load: runs nothing, columns are empty */
    REQUIRE_OK(rap_prep_run(ex));
    rap_host_column c;
    REQUIRE_OK(rap_prep_fetch(ex, 0, &c));
    CHECK(c.rows == 0);
    rap_host_column_free(&c);
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, sc, 100, false));
    fill_batch(&b, 100, 5);
    REQUIRE_OK(rap_prep_load(ex, &b));
    CHECK(rap_prep_run_kernel(ex, 2, 0, 1, 0, 100, NULL) == RAP_ERR_ARG);
    CHECK(rap_prep_run_kernel(ex, 0, 0, 2, 0, 100, NULL) == RAP_ERR_ARG);
    CHECK(rap_prep_run_kernel(ex, 0, 0, 1, 0, 50, NULL) == RAP_OK);
    CHECK(rap_prep_run_kernel(ex, 0, 0, 1, 50, 100, NULL) == RAP_OK);
    CHECK(rap_prep_fetch(ex, 5, &c) == RAP_ERR_ARG);
    /* a batch of another schema */
    rap_batch other;
    REQUIRE_OK(rap_batch_create(&other, rap_schema_criteo(), 100, false));
    CHECK(rap_prep_load(ex, &other) == RAP_ERR_ARG);
    rap_batch_free(&other);
    rap_batch_free(&b);
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_plan_free(p);
}

/* Bytes moved per kernel (the benchmark's GB/s): dense fill_null reads
 * values and valid and writes values; sigrid_hash on one-id lists reads and
 * writes the ids only. */
RAP_TEST(exec_kernel_bytes)
{
    NEED_OPS(RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH);
    rap_schema sc = {2, 1, 1};
    rap_plan *p;
    REQUIRE_OK(rap_plan_create(sc, "bytes", &p));
    REQUIRE_OK(rap_plan_assign(p, "int_0", add_op(t, p, RAP_OP_FILL_NULL, node_of(p, "int_0"), 0, 0, 0, 0)));
    REQUIRE_OK(rap_plan_assign(p, "int_1", add_op(t, p, RAP_OP_FILL_NULL, node_of(p, "int_1"), 0, 0, 0, 0)));
    REQUIRE_OK(rap_plan_assign(p, "cat_0", add_op(t, p, RAP_OP_SIGRID_HASH, node_of(p, "cat_0"), 0, 0, 1, 100)));
    rap_plan_finish(p);
    rap_prep *ex;
    REQUIRE_OK(make_exec(p, RAP_FUSE_LEVELS, RAP_CPU, 500, &ex));
    REQUIRE(rap_prep_n_kernels(ex) == 2);
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, sc, 500, false));
    fill_batch(&b, 321, 9);
    REQUIRE_OK(rap_prep_load(ex, &b));
    REQUIRE_OK(rap_prep_run(ex));
    int64_t n_ids = b.sparse_off[321], k0 = 0, k1 = 0;
    CHECK(n_ids > 200 && n_ids < 321);
    REQUIRE_OK(rap_prep_kernel_bytes(ex, 0, &k0));
    REQUIRE_OK(rap_prep_kernel_bytes(ex, 1, &k1));
    CHECK_MSG(k0 == 2 * (321 * 4 + 321 + 321 * 4), "fill_null kernel: %lld bytes", (long long)k0);
    CHECK_MSG(k1 == 2 * 8 * n_ids, "sigrid_hash kernel: %lld bytes, %lld ids", (long long)k1,
              (long long)n_ids);
    CHECK(rap_prep_kernel_bytes(ex, 2, &k0) == RAP_ERR_ARG);
    rap_batch_free(&b);
    rap_prep_free(ex);
    rap_plan_free(p);
}
