/* test_model_cpu.c -- the CPU reference of the DLRM model (src/model/model.c,
 * src/model/cpu/).
 *
 * Finite-difference gradient checks of every layer alone (linear with and
 * without ReLU, dot interaction, embedding bags with duplicate ids in a bag
 * and across rows and empty bags, BCE with logits) and of the whole model
 * on tiny sizes; SGD and Adagrad steps against hand computation (embedding
 * rows with duplicates get one update with the summed gradient); init
 * bounds and spread; bit-identical results across runs, thread counts and
 * a save/resume; config checks and their messages; the memory estimate and
 * the refusal before allocating; misuse errors. */
#include "test.h"

#include "core/core.h"
#include "model/cpu/cpu_model.h"

#include <stdlib.h>

/* ------------------------------------------------------------ helpers */

static double rnd01(uint64_t *s) { return (double)(rap_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }
static float rndu(uint64_t *s, float a) { return (float)((2.0 * rnd01(s) - 1.0) * a); }
static void fill_rand(float *p, size_t n, uint64_t *s, float a)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rndu(s, a);
}

/* |a - n| <= abs + rel * max(|a|, |n|): analytic a against numeric n. */
static bool close_to(double a, double n, double abs_tol, double rel_tol)
{
    double m = fabs(a) > fabs(n) ? fabs(a) : fabs(n);
    return fabs(a - n) <= abs_tol + rel_tol * m;
}

/* Central difference of f at *p: steps the float by about h, uses the
 * step the float actually took. */
typedef double (*scalar_fn)(void *ctx);
static double central_diff(float *p, double h, scalar_fn f, void *ctx)
{
    float x0 = *p;
    float xp = (float)(x0 + h), xm = (float)(x0 - h);
    *p = xp;
    double fp = f(ctx);
    *p = xm;
    double fm = f(ctx);
    *p = x0;
    return (fp - fm) / ((double)xp - (double)xm);
}

/* A batch owned by the test, host memory (the CPU model's device). */
#define TB_MAX_T 8
typedef struct {
    rap_model_batch b;
    float *dense, *label;
    int64_t *off[TB_MAX_T], *ids[TB_MAX_T];
} test_batch;

static void tb_free(test_batch *tb)
{
    free(tb->dense);
    free(tb->label);
    for (int t = 0; t < TB_MAX_T; t++) {
        free(tb->off[t]);
        free(tb->ids[t]);
    }
    memset(tb, 0, sizeof *tb);
}

/* Random batch of n rows for config c: dense in +-1, labels 0/1, bags of
 * 0..max_bag ids (duplicates likely when tables are small). */
static void tb_random(test_batch *tb, const rap_model_config *c, int64_t n, int max_bag,
                      uint64_t seed)
{
    memset(tb, 0, sizeof *tb);
    uint64_t s = seed;
    tb->dense = malloc(sizeof(float) * (size_t)(n * c->n_dense));
    tb->label = malloc(sizeof(float) * (size_t)n);
    fill_rand(tb->dense, (size_t)(n * c->n_dense), &s, 1.0f);
    for (int64_t r = 0; r < n; r++)
        tb->label[r] = (float)(rap_splitmix64(&s) & 1);
    for (int t = 0; t < c->n_tables; t++) {
        tb->off[t] = malloc(sizeof(int64_t) * (size_t)(n + 1));
        tb->ids[t] = malloc(sizeof(int64_t) * (size_t)(n * max_bag + 1));
        int64_t k = 0;
        tb->off[t][0] = 0;
        for (int64_t r = 0; r < n; r++) {
            int len = (int)(rap_splitmix64(&s) % (uint64_t)(max_bag + 1));
            for (int q = 0; q < len; q++)
                tb->ids[t][k++] = (int64_t)(rap_splitmix64(&s) % (uint64_t)c->table_rows[t]);
            tb->off[t][r + 1] = k;
        }
        tb->b.off[t] = tb->off[t];
        tb->b.ids[t] = tb->ids[t];
    }
    tb->b.rows = n;
    tb->b.dense = tb->dense;
    tb->b.label = tb->label;
}

/* The tiny model of the gradient checks: ND 3, T 3 tables of 5, 6, 7 rows,
 * D 4, bottom 5-4, top 6-1, B 5. */
static rap_model_config tiny_config(void)
{
    rap_model_config c;
    rap_model_config_defaults(&c);
    c.n_dense = 3;
    c.n_tables = 3;
    c.table_rows[0] = 5;
    c.table_rows[1] = 6;
    c.table_rows[2] = 7;
    c.emb_dim = 4;
    c.n_bot = 2;
    c.bot[0] = 5;
    c.bot[1] = 4;
    c.n_top = 2;
    c.top[0] = 6;
    c.top[1] = 1;
    c.batch = 5;
    c.threads = 1;
    c.seed = 7;
    return c;
}

/* The hand-made batch of the tiny model: duplicate ids within a bag and
 * across rows, and empty bags in every table. */
static void tb_tiny(test_batch *tb, const rap_model_config *c)
{
    static const int64_t off[3][6] = {{0, 2, 3, 3, 6, 7}, {0, 1, 1, 4, 6, 7}, {0, 1, 3, 4, 4, 6}};
    static const int64_t ids[3][7] = {
        {1, 1, 1, 4, 0, 1, 2}, /* rows: {1,1} {1} {} {4,0,1} {2} */
        {5, 0, 0, 0, 5, 2, 3}, /* rows: {5} {} {0,0,0} {5,2} {3} */
        {6, 2, 3, 1, 6, 6, 0}, /* rows: {6} {2,3} {1} {} {6,6} */
    };
    tb_random(tb, c, 5, 1, 99);
    for (int t = 0; t < 3; t++) {
        memcpy(tb->off[t], off[t], sizeof off[t]);
        free(tb->ids[t]);
        tb->ids[t] = malloc(sizeof ids[t]);
        memcpy(tb->ids[t], ids[t], sizeof ids[t]);
        tb->b.off[t] = tb->off[t];
        tb->b.ids[t] = tb->ids[t];
    }
    static const float lab[5] = {1, 0, 0, 1, 1};
    memcpy(tb->label, lab, sizeof lab);
}

static size_t tensor_len(const rap_model *m, int i)
{
    const rap_tensor_info *ti = rap_model_tensor(m, i);
    return (size_t)(ti->rows * ti->cols);
}

/* ------------------------------------------------------------ linear */

typedef struct {
    float *x, *w, *b, *y, *c;
    int64_t n;
    int in, out;
    bool relu;
} lin_fd;

static double lin_loss(void *p)
{
    lin_fd *k = p;
    rap_cpu_linear_forward(k->x, k->w, k->b, k->n, k->in, k->out, k->relu, k->y, NULL);
    double s = 0;
    for (int64_t i = 0; i < k->n * k->out; i++)
        s += (double)k->c[i] * (double)k->y[i];
    return s;
}

/* Pre-activations of the layer change sign between p-h and p+h: the finite
 * difference straddles a ReLU kink and is skipped. */
static bool lin_kink(lin_fd *k, float *p, double h)
{
    float x0 = *p;
    float *yp = malloc(sizeof(float) * (size_t)(k->n * k->out));
    float *ym = malloc(sizeof(float) * (size_t)(k->n * k->out));
    *p = (float)(x0 + h);
    rap_cpu_linear_forward(k->x, k->w, k->b, k->n, k->in, k->out, false, yp, NULL);
    *p = (float)(x0 - h);
    rap_cpu_linear_forward(k->x, k->w, k->b, k->n, k->in, k->out, false, ym, NULL);
    *p = x0;
    bool kink = false;
    for (int64_t i = 0; i < k->n * k->out; i++)
        if ((yp[i] > 0) != (ym[i] > 0))
            kink = true;
    free(yp);
    free(ym);
    return kink;
}

static void check_linear(rap_test_ctx *t, bool relu, rap_pool *pool)
{
    enum { N = 6, IN = 5, OUT = 4 };
    uint64_t s = relu ? 11 : 12;
    float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT], c[N * OUT], dy[N * OUT];
    float dw[OUT * IN], db[OUT], dx[N * IN];
    fill_rand(x, N * IN, &s, 1.0f);
    fill_rand(w, OUT * IN, &s, 1.0f);
    fill_rand(b, OUT, &s, 0.5f);
    fill_rand(c, N * OUT, &s, 1.0f);
    lin_fd k = {x, w, b, y, c, N, IN, OUT, relu};
    lin_loss(&k);
    int zeros = 0;
    for (int i = 0; i < N * OUT; i++)
        zeros += y[i] == 0.0f;
    if (relu)
        CHECK_MSG(zeros > 0 && zeros < N * OUT, "ReLU test should have some zero outputs (%d)",
                  zeros);
    memcpy(dy, c, sizeof dy);
    rap_cpu_linear_backward(x, w, y, dy, N, IN, OUT, relu, dw, db, dx, pool);
    struct {
        float *p, *g;
        int n;
        const char *name;
    } sets[3] = {{x, dx, N * IN, "x"}, {w, dw, OUT * IN, "w"}, {b, db, OUT, "b"}};
    int checked = 0, skipped = 0, bad = 0;
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < sets[q].n; i++) {
            double h = 1e-2;
            if (relu && lin_kink(&k, &sets[q].p[i], h)) {
                skipped++;
                continue;
            }
            double num = central_diff(&sets[q].p[i], h, lin_loss, &k);
            checked++;
            if (!close_to(sets[q].g[i], num, 1e-4, 1e-4) && bad++ < 5)
                CHECK_MSG(0, "linear%s d%s[%d]: analytic %.7g, numeric %.7g", relu ? "+relu" : "",
                          sets[q].name, i, (double)sets[q].g[i], num);
        }
    CHECK(bad == 0);
    CHECK_MSG(checked >= (N * IN + OUT * IN + OUT) * 9 / 10, "only %d coordinates checked (%d skipped)",
              checked, skipped);
}

RAP_TEST(model_cpu_linear_grad)
{
    rap_pool *pool;
    REQUIRE_OK(rap_pool_create(2, &pool));
    check_linear(t, false, NULL);
    check_linear(t, true, NULL);
    check_linear(t, true, pool);
    rap_pool_free(pool);
}

/* ------------------------------------------------------------ interaction */

typedef struct {
    float *x, *emb, *out, *c;
    int64_t n;
    int T, D;
} inter_fd;

static int inter_width(int T, int D) { return D + (T + 1) * T / 2; }

static double inter_loss(void *p)
{
    inter_fd *k = p;
    rap_cpu_interaction_forward(k->x, k->emb, k->n, k->T, k->D, k->out, NULL);
    double s = 0;
    for (int64_t i = 0; i < k->n * inter_width(k->T, k->D); i++)
        s += (double)k->c[i] * (double)k->out[i];
    return s;
}

RAP_TEST(model_cpu_interaction_grad)
{
    enum { N = 3, T = 3, D = 4, W = D + (T + 1) * T / 2 };
    uint64_t s = 21;
    float x[N * D], emb[N * T * D], out[N * W], c[N * W], dx[N * D], demb[N * T * D];
    fill_rand(x, N * D, &s, 1.0f);
    fill_rand(emb, N * T * D, &s, 1.0f);
    fill_rand(c, N * W, &s, 1.0f);
    inter_fd k = {x, emb, out, c, N, T, D};
    inter_loss(&k);
    /* Forward values by hand: row 1, the pair (2,1) is emb[1,1] . emb[1,0];
     * pairs run (1,0) (2,0) (2,1) (3,0) (3,1) (3,2). */
    double dot = 0;
    for (int d = 0; d < D; d++)
        dot += (double)emb[(1 * T + 1) * D + d] * emb[(1 * T + 0) * D + d];
    CHECK(fabs(out[1 * W + D + 2] - dot) < 1e-6);
    dot = 0;
    for (int d = 0; d < D; d++)
        dot += (double)emb[(2 * T + 2) * D + d] * x[2 * D + d];
    CHECK(fabs(out[2 * W + D + 3] - dot) < 1e-6);
    CHECK(memcmp(out + W, x + D, sizeof(float) * D) == 0);

    rap_pool *pool;
    REQUIRE_OK(rap_pool_create(2, &pool));
    rap_cpu_interaction_backward(x, emb, c, N, T, D, dx, demb, pool);
    rap_pool_free(pool);
    int bad = 0, checked = 0;
    for (int i = 0; i < N * D; i++, checked++) {
        double num = central_diff(&x[i], 1e-2, inter_loss, &k);
        if (!close_to(dx[i], num, 1e-4, 1e-4) && bad++ < 5)
            CHECK_MSG(0, "interaction dx[%d]: analytic %.7g, numeric %.7g", i, (double)dx[i], num);
    }
    for (int i = 0; i < N * T * D; i++, checked++) {
        double num = central_diff(&emb[i], 1e-2, inter_loss, &k);
        if (!close_to(demb[i], num, 1e-4, 1e-4) && bad++ < 5)
            CHECK_MSG(0, "interaction demb[%d]: analytic %.7g, numeric %.7g", i, (double)demb[i],
                      num);
    }
    CHECK(bad == 0);
    CHECK(checked == N * D + N * T * D);
}

/* ------------------------------------------------------------ embedding bag */

typedef struct {
    float *tab[3];
    int64_t R[3];
    const int64_t *off[3], *ids[3];
    float *emb, *c;
    int64_t n;
    int T, D;
} bag_fd;

static double bag_loss(void *p)
{
    bag_fd *k = p;
    for (int t = 0; t < k->T; t++)
        rap_cpu_bag_forward(k->tab[t], RAP_EMB_FP32, k->R[t], k->D, k->off[t], k->ids[t], k->n,
                            k->T, t, k->emb, NULL);
    double s = 0;
    for (int64_t i = 0; i < k->n * k->T * k->D; i++)
        s += (double)k->c[i] * (double)k->emb[i];
    return s;
}

RAP_TEST(model_cpu_bag_grad)
{
    rap_model_config c = tiny_config();
    test_batch tb;
    tb_tiny(&tb, &c);
    enum { N = 5, T = 3, D = 4 };
    uint64_t s = 31;
    float tab[3][7 * D], t0[3][7 * D], emb[N * T * D], cc[N * T * D];
    float *tabs[3] = {tab[0], tab[1], tab[2]};
    for (int tt = 0; tt < T; tt++)
        fill_rand(tab[tt], 7 * D, &s, 1.0f);
    fill_rand(cc, N * T * D, &s, 1.0f);
    memcpy(t0, tab, sizeof tab);
    bag_fd k = {{tab[0], tab[1], tab[2]}, {5, 6, 7}, {0}, {0}, emb, cc, N, T, D};
    for (int tt = 0; tt < T; tt++) {
        k.off[tt] = tb.off[tt];
        k.ids[tt] = tb.ids[tt];
    }
    bag_loss(&k);
    /* Forward by hand: table 0 row 0 is {1,1}: twice row 1; row 2 empty. */
    for (int d = 0; d < D; d++) {
        CHECK(emb[(0 * T + 0) * D + d] == tab[0][1 * D + d] + tab[0][1 * D + d]);
        CHECK(emb[(2 * T + 0) * D + d] == 0.0f);
        CHECK(emb[(1 * T + 1) * D + d] == 0.0f);
    }
    /* A bad id is counted and skipped. */
    int64_t bad_ids[2] = {1, 9}, bad_off[2] = {0, 2};
    CHECK(rap_cpu_bag_forward(tab[0], RAP_EMB_FP32, 5, D, bad_off, bad_ids, 1, T, 0, emb,
                              NULL) == 1);
    bag_loss(&k);

    /* SGD with lr 1: table change = -(summed gradient). */
    rap_cpu_key keys[64], tmp[64];
    int64_t seg[4];
    rap_cpu_emb_update u = {.T = T, .D = D, .n = N, .tables = (void *const *)tabs,
                            .state = NULL,
                            .off = k.off, .ids = k.ids, .demb = cc, .opt = RAP_SGD, .lr = 1.0f,
                            .eps = 0, .keys = keys, .tmp = tmp, .seg = seg};
    rap_cpu_emb_backward(&u, NULL);
    int bad = 0, checked = 0, nonzero = 0;
    float gsum[3][7 * D];
    for (int tt = 0; tt < T; tt++)
        for (int64_t j = 0; j < k.R[tt] * D; j++) {
            /* Hand aggregation of the gradient in the same (row, position)
             * order, float, as one SGD update would use. */
            int64_t id = j / D;
            int d = (int)(j % D);
            float g = 0.0f;
            for (int64_t r = 0; r < N; r++)
                for (int64_t p = k.off[tt][r]; p < k.off[tt][r + 1]; p++)
                    if (k.ids[tt][p] == id)
                        g += cc[(r * T + tt) * D + d];
            gsum[tt][j] = g;
            float want = t0[tt][j] - 1.0f * g;
            if (tab[tt][j] != want && bad++ < 5)
                CHECK_MSG(0, "bag SGD table %d [%lld]: %.9g, want %.9g", tt, (long long)j,
                          (double)tab[tt][j], (double)want);
            nonzero += g != 0.0f;
        }
    CHECK(bad == 0);
    CHECK(nonzero > 20);
    /* Finite differences of the forward against the aggregated gradient. */
    memcpy(tab, t0, sizeof tab);
    bad = 0;
    for (int tt = 0; tt < T; tt++)
        for (int64_t j = 0; j < k.R[tt] * D; j++, checked++) {
            double num = central_diff(&tab[tt][j], 1e-2, bag_loss, &k);
            if (!close_to(gsum[tt][j], num, 1e-4, 1e-4) && bad++ < 5)
                CHECK_MSG(0, "bag table %d [%lld]: analytic %.7g, numeric %.7g", tt, (long long)j,
                          (double)gsum[tt][j], num);
        }
    CHECK(bad == 0);
    CHECK(checked == (5 + 6 + 7) * D);

    /* Adagrad: one update per touched row with the summed gradient;
     * untouched rows and their state unchanged. */
    memcpy(tab, t0, sizeof tab);
    float st[3][7 * D];
    float *sts[3] = {st[0], st[1], st[2]};
    for (int tt = 0; tt < T; tt++)
        for (int j = 0; j < 7 * D; j++)
            st[tt][j] = 0.1f;
    u.state = sts;
    u.opt = RAP_ADAGRAD;
    u.lr = 0.05f;
    u.eps = 1e-8f;
    rap_cpu_emb_backward(&u, NULL);
    bad = 0;
    for (int tt = 0; tt < T; tt++)
        for (int64_t j = 0; j < k.R[tt] * D; j++) {
            bool touched = false;
            for (int64_t p = 0; p < k.off[tt][N]; p++)
                touched |= k.ids[tt][p] == j / D;
            float g = gsum[tt][j];
            float ws = touched ? 0.1f + g * g : 0.1f;
            float ww = touched ? t0[tt][j] - 0.05f * (g / (sqrtf(ws) + 1e-8f)) : t0[tt][j];
            if ((st[tt][j] != ws || tab[tt][j] != ww) && bad++ < 5)
                CHECK_MSG(0, "bag Adagrad table %d [%lld]: w %.9g s %.9g, want %.9g %.9g", tt,
                          (long long)j, (double)tab[tt][j], (double)st[tt][j], (double)ww,
                          (double)ws);
        }
    CHECK(bad == 0);
    tb_free(&tb);
}

/* Many keys (over the 1024-key chunks of the group pass, groups straddling
 * chunk edges): the pool gives the same bits as one thread, and the result
 * matches an aggregation in double. */
RAP_TEST(model_cpu_bag_backward_many)
{
    rap_model_config c = tiny_config();
    c.table_rows[0] = 3;
    c.table_rows[1] = 40;
    c.table_rows[2] = 1000;
    c.batch = 700;
    test_batch tb;
    tb_random(&tb, &c, 700, 4, 41);
    int T = 3, D = 4;
    int64_t n = 700;
    uint64_t s = 42;
    float *tabs1[3], *tabs2[3], *st1[3], *st2[3];
    float *demb = malloc(sizeof(float) * (size_t)(n * T * D));
    fill_rand(demb, (size_t)(n * T * D), &s, 1.0f);
    for (int tt = 0; tt < T; tt++) {
        size_t len = (size_t)(c.table_rows[tt] * D);
        tabs1[tt] = malloc(sizeof(float) * len);
        tabs2[tt] = malloc(sizeof(float) * len);
        st1[tt] = calloc(len, sizeof(float));
        st2[tt] = calloc(len, sizeof(float));
        fill_rand(tabs1[tt], len, &s, 1.0f);
        memcpy(tabs2[tt], tabs1[tt], sizeof(float) * len);
    }
    int64_t K = tb.off[0][n] + tb.off[1][n] + tb.off[2][n];
    CHECK(K > 2 * 1024);
    rap_cpu_key *keys = malloc(sizeof *keys * (size_t)K), *tmp = malloc(sizeof *tmp * (size_t)K);
    int64_t seg[4];
    rap_pool *pool;
    REQUIRE_OK(rap_pool_create(2, &pool));
    const int64_t *off[3] = {tb.off[0], tb.off[1], tb.off[2]};
    const int64_t *ids[3] = {tb.ids[0], tb.ids[1], tb.ids[2]};
    rap_cpu_emb_update u = {.T = T, .D = D, .n = n, .tables = (void *const *)tabs1,
                            .state = st1, .off = off,
                            .ids = ids, .demb = demb, .opt = RAP_ADAGRAD, .lr = 0.1f,
                            .eps = 1e-8f, .keys = keys, .tmp = tmp, .seg = seg};
    rap_cpu_emb_backward(&u, NULL);
    u.tables = (void *const *)tabs2;
    u.state = st2;
    rap_cpu_emb_backward(&u, pool);
    int bad = 0;
    for (int tt = 0; tt < T; tt++) {
        size_t len = (size_t)(c.table_rows[tt] * D);
        CHECK(memcmp(tabs1[tt], tabs2[tt], sizeof(float) * len) == 0);
        CHECK(memcmp(st1[tt], st2[tt], sizeof(float) * len) == 0);
        /* Adagrad from state 0: state = g^2 exactly as aggregated. */
        for (size_t j = 0; j < len; j++) {
            double g = 0;
            for (int64_t r = 0; r < n; r++)
                for (int64_t p = off[tt][r]; p < off[tt][r + 1]; p++)
                    if (ids[tt][p] == (int64_t)(j / (size_t)D))
                        g += demb[(r * T + tt) * D + (int64_t)(j % (size_t)D)];
            if (!close_to(st1[tt][j], g * g, 1e-6, 1e-4) && bad++ < 5)
                CHECK_MSG(0, "table %d [%zu]: state %.9g, want %.9g", tt, j, (double)st1[tt][j],
                          g * g);
        }
    }
    CHECK(bad == 0);
    rap_pool_free(pool);
    for (int tt = 0; tt < T; tt++) {
        free(tabs1[tt]);
        free(tabs2[tt]);
        free(st1[tt]);
        free(st2[tt]);
    }
    free(keys);
    free(tmp);
    free(demb);
    tb_free(&tb);
}

/* ------------------------------------------------------------ loss */

typedef struct {
    float *logit, *label;
    int64_t n;
} bce_fd;

static double bce_loss(void *p)
{
    bce_fd *k = p;
    return rap_cpu_bce(k->logit, k->label, k->n, NULL);
}

RAP_TEST(model_cpu_bce_grad)
{
    float logit[8] = {0.0f, 1.5f, -2.25f, 4.0f, -0.3f, 20.0f, -20.0f, 0.7f};
    float label[8] = {1, 0, 1, 1, 0, 0, 1, 1};
    float dl[8];
    bce_fd k = {logit, label, 8};
    double loss = rap_cpu_bce(logit, label, 8, dl);
    double want = 0;
    for (int i = 0; i < 8; i++) {
        double s = logit[i], y = label[i];
        double p = 1.0 / (1.0 + exp(-s));
        want -= y * log(p) + (1 - y) * log(1 - p);
    }
    want /= 8;
    CHECK_MSG(fabs(loss - want) < 1e-9 * (1 + want), "loss %.12g, want %.12g", loss, want);
    float one = 0, lab1 = 1;
    CHECK(fabs(rap_cpu_bce(&one, &lab1, 1, NULL) - log(2.0)) < 1e-15);
    float big = 200.0f, lab0 = 0;
    CHECK(fabs(rap_cpu_bce(&big, &lab0, 1, NULL) - 200.0) < 1e-9); /* no overflow */
    for (int i = 0; i < 8; i++) {
        double num = central_diff(&logit[i], 1e-3, bce_loss, &k);
        CHECK_MSG(close_to(dl[i], num, 1e-7, 1e-4), "dlogit[%d]: analytic %.9g, numeric %.9g", i,
                  (double)dl[i], num);
    }
}

/* ------------------------------------------------------------ whole model */

typedef struct {
    rap_model *m;
    test_batch *tb;
} model_fd;

static double model_loss(void *p)
{
    model_fd *k = p;
    double loss = NAN;
    if (rap_model_emb_forward(k->m, &k->tb->b) != RAP_OK ||
        rap_model_mlp_forward(k->m, &k->tb->b) != RAP_OK ||
        rap_model_last_loss(k->m, &loss) != RAP_OK)
        return NAN;
    return loss;
}

/* FD of tensor i's every coordinate through rap_model_set. */
static void fd_tensor(rap_model *m, test_batch *tb, int i, double h, double *num)
{
    size_t len = tensor_len(m, i);
    float *v = malloc(sizeof(float) * len);
    rap_model_get(m, i, v);
    model_fd k = {m, tb};
    for (size_t j = 0; j < len; j++) {
        float x0 = v[j];
        float xp = (float)(x0 + h), xm = (float)(x0 - h);
        v[j] = xp;
        rap_model_set(m, i, v);
        double fp = model_loss(&k);
        v[j] = xm;
        rap_model_set(m, i, v);
        double fm = model_loss(&k);
        v[j] = x0;
        rap_model_set(m, i, v);
        num[j] = (fp - fm) / ((double)xp - (double)xm);
    }
    free(v);
}

RAP_TEST(model_cpu_model_grad)
{
    rap_model_config c = tiny_config();
    c.lr = 1.0f; /* SGD: a table's change is minus its gradient */
    rap_model *m;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    test_batch tb;
    tb_tiny(&tb, &c);
    int nt = rap_model_n_tensors(m);
    REQUIRE(nt == 3 + 4 + 4);
    double *num[16];
    float *before[16];
    const double h = 2e-3;
    for (int i = 0; i < nt; i++) {
        num[i] = malloc(sizeof(double) * tensor_len(m, i));
        before[i] = malloc(sizeof(float) * tensor_len(m, i));
        REQUIRE_OK(rap_model_get(m, i, before[i]));
        fd_tensor(m, &tb, i, h, num[i]);
    }
    /* Dense input FD. */
    double nd[15];
    model_fd k = {m, &tb};
    for (int j = 0; j < 15; j++)
        nd[j] = central_diff(&tb.dense[j], h, model_loss, &k);

    REQUIRE_OK(rap_model_emb_forward(m, &tb.b));
    REQUIRE_OK(rap_model_mlp_forward(m, &tb.b));
    REQUIRE_OK(rap_model_mlp_backward(m, &tb.b));
    const float *ddense = rap_cpu_model_ddense(m);
    int bad = 0, checked = 0, nonzero = 0;
    for (int j = 0; j < 15; j++, checked++) {
        nonzero += ddense[j] != 0.0f;
        if (!close_to(ddense[j], nd[j], 2e-4, 2e-2) && bad++ < 5)
            CHECK_MSG(0, "model d dense[%d]: analytic %.7g, numeric %.7g", j, (double)ddense[j],
                      nd[j]);
    }
    for (int i = 3; i < nt; i++) {
        size_t len = tensor_len(m, i);
        float *g = malloc(sizeof(float) * len);
        REQUIRE_OK(rap_model_get_grad(m, i, g));
        for (size_t j = 0; j < len; j++, checked++) {
            nonzero += g[j] != 0.0f;
            if (!close_to(g[j], num[i][j], 2e-4, 2e-2) && bad++ < 5)
                CHECK_MSG(0, "model d %s[%zu]: analytic %.7g, numeric %.7g",
                          rap_model_tensor(m, i)->name, j, (double)g[j], num[i][j]);
        }
        free(g);
    }
    REQUIRE_OK(rap_model_emb_backward(m, &tb.b));
    for (int i = 0; i < 3; i++) {
        size_t len = tensor_len(m, i);
        float *after = malloc(sizeof(float) * len);
        REQUIRE_OK(rap_model_get(m, i, after));
        for (size_t j = 0; j < len; j++, checked++) {
            double g = (double)before[i][j] - (double)after[j];
            nonzero += g != 0.0;
            if (!close_to(g, num[i][j], 2e-4, 2e-2) && bad++ < 5)
                CHECK_MSG(0, "model d %s[%zu]: analytic %.7g, numeric %.7g",
                          rap_model_tensor(m, i)->name, j, g, num[i][j]);
        }
        free(after);
    }
    CHECK(bad == 0);
    CHECK_MSG(checked == 15 + 117 + 72, "checked %d", checked);
    CHECK_MSG(nonzero > checked / 2, "only %d of %d gradients non-zero", nonzero, checked);
    for (int i = 0; i < nt; i++) {
        free(num[i]);
        free(before[i]);
    }
    tb_free(&tb);
    rap_model_free(m);
}

/* The forward pass by hand, in double, from the model's own tensors:
 * bottom MLP with ReLU after every layer, bag sums, [x, z_i . z_j (i > j)]
 * in row-major lower-triangle order, top MLP with ReLU but the last. */
RAP_TEST(model_cpu_forward_reference)
{
    rap_model_config c = tiny_config();
    c.n_top = 3;
    c.top[1] = 3;
    c.top[2] = 1;
    rap_model *m;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    test_batch tb;
    tb_tiny(&tb, &c);
    int nt = rap_model_n_tensors(m);
    float *v[16];
    for (int i = 0; i < nt; i++) {
        v[i] = malloc(sizeof(float) * tensor_len(m, i));
        REQUIRE_OK(rap_model_get(m, i, v[i]));
    }
    float logits[5];
    REQUIRE_OK(rap_model_predict(m, &tb.b, logits));
    int relu_zero = 0;
    double loss = 0;
    for (int r = 0; r < 5; r++) {
        double h[64], h2[64];
        int w = 3;
        for (int j = 0; j < 3; j++)
            h[j] = tb.dense[r * 3 + j];
        for (int l = 0; l < 2; l++) { /* tensors 3.. : bot weight, bias */
            const float *W = v[3 + 2 * l], *bb = v[4 + 2 * l];
            for (int o = 0; o < c.bot[l]; o++) {
                double a = bb[o];
                for (int j = 0; j < w; j++)
                    a += (double)W[o * w + j] * h[j];
                h2[o] = a > 0 ? a : 0;
                relu_zero += a <= 0;
            }
            w = c.bot[l];
            memcpy(h, h2, sizeof(double) * (size_t)w);
        }
        double z[4][4];
        memcpy(z[0], h, sizeof z[0]);
        for (int tt = 0; tt < 3; tt++)
            for (int d = 0; d < 4; d++) {
                z[1 + tt][d] = 0;
                for (int64_t p = tb.off[tt][r]; p < tb.off[tt][r + 1]; p++)
                    z[1 + tt][d] += v[tt][tb.ids[tt][p] * 4 + d];
            }
        double in[10];
        memcpy(in, z[0], sizeof z[0]);
        int p = 4;
        for (int i = 1; i < 4; i++)
            for (int j = 0; j < i; j++) {
                in[p] = 0;
                for (int d = 0; d < 4; d++)
                    in[p] += z[i][d] * z[j][d];
                p++;
            }
        memcpy(h, in, sizeof in);
        w = 10;
        for (int l = 0; l < 3; l++) {
            const float *W = v[7 + 2 * l], *bb = v[8 + 2 * l];
            for (int o = 0; o < c.top[l]; o++) {
                double a = bb[o];
                for (int j = 0; j < w; j++)
                    a += (double)W[o * w + j] * h[j];
                h2[o] = l < 2 && a < 0 ? 0 : a;
            }
            w = c.top[l];
            memcpy(h, h2, sizeof(double) * (size_t)w);
        }
        CHECK_MSG(close_to(logits[r], h[0], 1e-6, 1e-5), "row %d: logit %.9g, by hand %.9g", r,
                  (double)logits[r], h[0]);
        double y = tb.label[r];
        loss += -(y * log(1 / (1 + exp(-h[0]))) + (1 - y) * log(1 - 1 / (1 + exp(-h[0]))));
    }
    CHECK_MSG(relu_zero > 0, "no bottom ReLU was active");
    REQUIRE_OK(rap_model_emb_forward(m, &tb.b));
    REQUIRE_OK(rap_model_mlp_forward(m, &tb.b));
    double got;
    REQUIRE_OK(rap_model_last_loss(m, &got));
    CHECK_MSG(close_to(got, loss / 5, 1e-7, 1e-5), "loss %.9g, by hand %.9g", got, loss / 5);
    for (int i = 0; i < nt; i++)
        free(v[i]);
    tb_free(&tb);
    rap_model_free(m);
}

/* ------------------------------------------------------------ optimizers */

static void check_optimizer_steps(rap_test_ctx *t, rap_optimizer opt)
{
    rap_model_config c = tiny_config();
    c.optimizer = opt;
    c.lr = 0.05f;
    c.adagrad_init = 0.01f;
    rap_model *m;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    test_batch tb;
    tb_tiny(&tb, &c);
    int nt = rap_model_n_tensors(m);
    float *w[16], *s[16];
    for (int i = 0; i < nt; i++) {
        w[i] = malloc(sizeof(float) * tensor_len(m, i));
        s[i] = malloc(sizeof(float) * tensor_len(m, i));
        REQUIRE_OK(rap_model_get(m, i, w[i]));
        if (opt == RAP_ADAGRAD) {
            REQUIRE_OK(rap_model_get_state(m, i, s[i]));
            for (size_t j = 0; j < tensor_len(m, i); j++)
                CHECK(s[i][j] == 0.01f);
        } else {
            CHECK(rap_model_get_state(m, i, s[i]) == RAP_ERR_ARG);
        }
    }
    int bad = 0;
    for (int step = 0; step < 2; step++) {
        REQUIRE_OK(rap_model_emb_forward(m, &tb.b));
        REQUIRE_OK(rap_model_mlp_forward(m, &tb.b));
        REQUIRE_OK(rap_model_mlp_backward(m, &tb.b));
        /* Embedding gradients by hand from the pooled-embedding gradient:
         * summed over duplicates in (row, position) order, one update. */
        const float *demb = rap_cpu_model_demb(m);
        float *gt[3];
        for (int tt = 0; tt < 3; tt++) {
            size_t len = tensor_len(m, tt);
            gt[tt] = calloc(len, sizeof(float));
            for (int64_t r = 0; r < 5; r++)
                for (int64_t p = tb.off[tt][r]; p < tb.off[tt][r + 1]; p++)
                    for (int d = 0; d < 4; d++)
                        gt[tt][tb.ids[tt][p] * 4 + d] += demb[(r * 3 + tt) * 4 + d];
        }
        REQUIRE_OK(rap_model_emb_backward(m, &tb.b));
        for (int i = 0; i < nt; i++) {
            size_t len = tensor_len(m, i);
            float *g = malloc(sizeof(float) * len), *now = malloc(sizeof(float) * len);
            float *snow = malloc(sizeof(float) * len);
            if (i < 3)
                memcpy(g, gt[i], sizeof(float) * len);
            else
                REQUIRE_OK(rap_model_get_grad(m, i, g));
            REQUIRE_OK(rap_model_get(m, i, now));
            if (opt == RAP_ADAGRAD)
                REQUIRE_OK(rap_model_get_state(m, i, snow));
            for (size_t j = 0; j < len; j++) {
                bool touched = true;
                if (i < 3) {
                    touched = false;
                    for (int64_t p = 0; p < tb.off[i][5]; p++)
                        touched |= tb.ids[i][p] == (int64_t)(j / 4);
                }
                if (!touched) {
                    if ((now[j] != w[i][j] || (opt == RAP_ADAGRAD && snow[j] != s[i][j])) &&
                        bad++ < 5)
                        CHECK_MSG(0, "step %d %s[%zu]: untouched row changed", step,
                                  rap_model_tensor(m, i)->name, j);
                    continue;
                }
                if (opt == RAP_SGD) {
                    w[i][j] = w[i][j] - 0.05f * g[j];
                } else {
                    s[i][j] = s[i][j] + g[j] * g[j];
                    w[i][j] = w[i][j] - 0.05f * (g[j] / (sqrtf(s[i][j]) + 1e-8f));
                    if (snow[j] != s[i][j] && bad++ < 5)
                        CHECK_MSG(0, "step %d %s[%zu]: state %.9g, want %.9g", step,
                                  rap_model_tensor(m, i)->name, j, (double)snow[j],
                                  (double)s[i][j]);
                }
                if (now[j] != w[i][j] && bad++ < 5)
                    CHECK_MSG(0, "step %d %s[%zu]: %.9g, want %.9g", step,
                              rap_model_tensor(m, i)->name, j, (double)now[j], (double)w[i][j]);
            }
            free(g);
            free(now);
            free(snow);
        }
        for (int tt = 0; tt < 3; tt++)
            free(gt[tt]);
    }
    CHECK(bad == 0);
    for (int i = 0; i < nt; i++) {
        free(w[i]);
        free(s[i]);
    }
    tb_free(&tb);
    rap_model_free(m);
}

RAP_TEST(model_cpu_sgd_step) { check_optimizer_steps(t, RAP_SGD); }
RAP_TEST(model_cpu_adagrad_step) { check_optimizer_steps(t, RAP_ADAGRAD); }

/* ------------------------------------------------------------ init */

RAP_TEST(model_cpu_init)
{
    rap_model_config c = tiny_config();
    c.n_dense = 200;
    c.table_rows[0] = 3;
    c.table_rows[1] = 1000;
    c.table_rows[2] = 50000;
    c.emb_dim = 8;
    c.bot[0] = 300;
    c.bot[1] = 8;
    c.top[0] = 512;
    rap_model *m;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    for (int i = 0; i < rap_model_n_tensors(m); i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i);
        size_t len = tensor_len(m, i);
        float *v = malloc(sizeof(float) * len);
        REQUIRE_OK(rap_model_get(m, i, v));
        double sum = 0, sq = 0, mx = 0;
        for (size_t j = 0; j < len; j++) {
            sum += v[j];
            sq += (double)v[j] * v[j];
            mx = fabs(v[j]) > mx ? fabs(v[j]) : mx;
        }
        double mean = sum / (double)len, sd = sqrt(sq / (double)len - mean * mean);
        if (i < 3) {
            float bound = (float)(1.0 / sqrt((double)ti->rows));
            CHECK_MSG(mx <= bound, "%s: max |v| %g above %g", ti->name, mx, (double)bound);
            CHECK_MSG(mx > 0.8 * bound, "%s: max |v| %g, bound %g", ti->name, mx, (double)bound);
            /* Uniform in +-bound: sd = bound / sqrt(3). */
            if (len > 1000)
                CHECK_MSG(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.05, "%s: sd %g", ti->name, sd);
            CHECK(v[len - 1] == rap_init_table_value(c.seed, i, len - 1, ti->rows));
            CHECK(v[5] == rap_init_table_value(c.seed, i, 5, ti->rows));
        } else {
            bool bias = ti->cols == 1;
            double want = bias ? sqrt(1.0 / (double)ti->rows)
                               : sqrt(2.0 / (double)(ti->rows + ti->cols));
            double tol = len >= 10000 ? 0.03 : len >= 300 ? 0.2 : 0.6;
            if (len > 1)
                CHECK_MSG(fabs(sd / want - 1) < tol, "%s: sd %g, want %g (n %zu)", ti->name, sd,
                      want, len);
            CHECK_MSG(fabs(mean) < 4 * want / sqrt((double)len) + 1e-9, "%s: mean %g", ti->name,
                      mean);
        }
        free(v);
    }
    /* Same seed, same weights; another seed, others. */
    rap_model *m2, *m3;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m2));
    c.seed = 8;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m3));
    for (int i = 0; i < rap_model_n_tensors(m); i++) {
        size_t len = tensor_len(m, i);
        float *a = malloc(sizeof(float) * len), *b = malloc(sizeof(float) * len),
              *d = malloc(sizeof(float) * len);
        rap_model_get(m, i, a);
        rap_model_get(m2, i, b);
        rap_model_get(m3, i, d);
        CHECK(memcmp(a, b, sizeof(float) * len) == 0);
        CHECK(memcmp(a, d, sizeof(float) * len) != 0);
        free(a);
        free(b);
        free(d);
    }
    rap_model_free(m);
    rap_model_free(m2);
    rap_model_free(m3);
}

/* ------------------------------------------------------------ determinism */

static rap_model_config mid_config(int threads)
{
    rap_model_config c;
    rap_model_config_defaults(&c);
    c.n_dense = 13;
    c.n_tables = 4;
    c.table_rows[0] = 100;
    c.table_rows[1] = 7;
    c.table_rows[2] = 5000;
    c.table_rows[3] = 50;
    c.emb_dim = 16;
    c.n_bot = 3;
    c.bot[0] = 128;
    c.bot[1] = 64;
    c.bot[2] = 16;
    c.n_top = 3;
    c.top[0] = 256;
    c.top[1] = 128;
    c.top[2] = 1;
    c.batch = 512;
    c.optimizer = RAP_ADAGRAD;
    c.lr = 0.05f;
    c.threads = threads;
    c.seed = 3;
    return c;
}

/* Trains steps [from, to) of a fixed batch sequence; losses into loss. */
static rap_status train_steps(rap_model *m, int from, int to, double *loss)
{
    const rap_model_config *c = rap_model_config_of(m);
    for (int i = from; i < to; i++) {
        test_batch tb;
        tb_random(&tb, c, i % 2 ? c->batch : c->batch - 37, 3, 1000 + (uint64_t)i);
        rap_status s = rap_model_train_step(m, &tb.b);
        if (s == RAP_OK)
            s = rap_model_last_loss(m, &loss[i]);
        tb_free(&tb);
        if (s != RAP_OK)
            return s;
    }
    return RAP_OK;
}

/* Every tensor and state of a and b identical, bit for bit. */
static bool same_bits(const rap_model *a, const rap_model *b)
{
    bool same = true;
    for (int i = 0; i < rap_model_n_tensors(a); i++) {
        size_t len = tensor_len(a, i);
        float *x = malloc(sizeof(float) * len), *y = malloc(sizeof(float) * len);
        rap_model_get(a, i, x);
        rap_model_get(b, i, y);
        same &= memcmp(x, y, sizeof(float) * len) == 0;
        if (rap_model_config_of(a)->optimizer == RAP_ADAGRAD) {
            rap_model_get_state(a, i, x);
            rap_model_get_state(b, i, y);
            same &= memcmp(x, y, sizeof(float) * len) == 0;
        }
        free(x);
        free(y);
    }
    return same;
}

RAP_TEST(model_cpu_determinism)
{
    rap_model_config c1 = mid_config(1), c2 = mid_config(2);
    rap_model *a, *b, *d;
    REQUIRE_OK(rap_model_create(&c2, RAP_CPU, &a));
    REQUIRE_OK(rap_model_create(&c2, RAP_CPU, &b));
    REQUIRE_OK(rap_model_create(&c1, RAP_CPU, &d));
    double la[4], lb[4], ld[4];
    REQUIRE_OK(train_steps(a, 0, 4, la));
    REQUIRE_OK(train_steps(b, 0, 4, lb));
    REQUIRE_OK(train_steps(d, 0, 4, ld));
    CHECK(memcmp(la, lb, sizeof la) == 0);
    CHECK_MSG(memcmp(la, ld, sizeof la) == 0, "losses 2 threads %.17g, 1 thread %.17g", la[3],
              ld[3]);
    CHECK(same_bits(a, b));
    CHECK_MSG(same_bits(a, d), "1 thread and 2 threads differ");
    /* It did train: the loss moved, the weights changed. */
    CHECK(la[0] != la[3]);
    CHECK(la[0] > 0.5 && la[0] < 1.0);
    rap_model *fresh;
    REQUIRE_OK(rap_model_create(&c2, RAP_CPU, &fresh));
    CHECK(!same_bits(a, fresh));
    rap_model_free(fresh);
    rap_model_free(a);
    rap_model_free(b);
    rap_model_free(d);
}

/* Train 2N == train N, save every tensor and state, load into a model made
 * from another seed, train N. */
RAP_TEST(model_cpu_resume)
{
    rap_model_config c = mid_config(2);
    rap_model *a, *b, *r;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &a));
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &b));
    double la[4], lr[4];
    REQUIRE_OK(train_steps(a, 0, 4, la));
    REQUIRE_OK(train_steps(b, 0, 2, lr));
    c.seed = 12345;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &r));
    for (int i = 0; i < rap_model_n_tensors(b); i++) {
        size_t len = tensor_len(b, i);
        float *x = malloc(sizeof(float) * len);
        REQUIRE_OK(rap_model_get(b, i, x));
        REQUIRE_OK(rap_model_set(r, i, x));
        REQUIRE_OK(rap_model_get_state(b, i, x));
        REQUIRE_OK(rap_model_set_state(r, i, x));
        free(x);
    }
    REQUIRE_OK(train_steps(r, 2, 4, lr));
    CHECK(memcmp(la + 2, lr + 2, 2 * sizeof(double)) == 0);
    CHECK(same_bits(a, r));
    rap_model_free(a);
    rap_model_free(b);
    rap_model_free(r);
}

/* ------------------------------------------------------------ config, bytes, misuse */

static void expect_bad(rap_test_ctx *t, const rap_model_config *c, const char *msg)
{
    rap_status s = rap_model_config_check(c);
    CHECK_MSG(s == RAP_ERR_ARG && strstr(rap_last_error(), msg),
              "config check: %s '%s', expected ERR_ARG with '%s'", rap_status_name(s),
              rap_last_error(), msg);
    rap_model *m = NULL;
    CHECK(rap_model_create(c, RAP_CPU, &m) == RAP_ERR_ARG && m == NULL);
}

RAP_TEST(model_cpu_config_check)
{
    rap_model_config c;
    rap_model_config_defaults(&c);
    CHECK_OK(rap_model_config_check(&c));
    CHECK(c.bot[c.n_bot - 1] == c.emb_dim && c.top[c.n_top - 1] == 1 && c.lr == 0.1f);
    c = tiny_config();
    CHECK_OK(rap_model_config_check(&c));
    c.bot[1] = 5;
    expect_bad(t, &c, "bottom MLP ends in 5, expected the embedding dim 4");
    c = tiny_config();
    c.top[1] = 2;
    expect_bad(t, &c, "top MLP ends in 2, expected 1");
    c = tiny_config();
    c.n_tables = 0;
    expect_bad(t, &c, "n_tables 0");
    c = tiny_config();
    c.table_rows[1] = 0;
    expect_bad(t, &c, "table 1 has 0 rows");
    c = tiny_config();
    c.n_bot = 0;
    expect_bad(t, &c, "0 bottom layers");
    c = tiny_config();
    c.lr = 0.0f;
    expect_bad(t, &c, "lr 0");
    c = tiny_config();
    c.batch = 0;
    expect_bad(t, &c, "batch 0");
    c = tiny_config();
    c.top[0] = 0;
    expect_bad(t, &c, "top layer 0 width 0");
    c = tiny_config(); /* sizes that would overflow the byte counts */
    c.table_rows[0] = c.table_rows[1] = (int64_t)1 << 40;
    c.emb_dim = c.bot[1] = 1 << 22;
    expect_bad(t, &c, "beyond any machine");
    CHECK(rap_model_bytes(&c, RAP_CPU) == 0);
}

RAP_TEST(model_cpu_bytes)
{
    rap_model_config c = tiny_config();
    size_t sgd = rap_model_bytes(&c, RAP_CPU);
    size_t params = (size_t)(5 + 6 + 7) * 4 + 117;
    CHECK(sgd > 4 * params);
    CHECK(sgd < 1 << 20);
    c.optimizer = RAP_ADAGRAD;
    CHECK(rap_model_bytes(&c, RAP_CPU) == sgd + 4 * params);
    c.optimizer = RAP_SGD;
    c.batch = 1000;
    size_t big = rap_model_bytes(&c, RAP_CPU);
    /* Activations per row: at least bottom, top, pooled, interaction and
     * their gradients. */
    CHECK(big > sgd + 995 * 4 * (5 + 4 + 6 + 1 + 2 * 12 + 2 * 10));
    c.top[1] = 3;
    CHECK(rap_model_bytes(&c, RAP_CPU) == 0); /* invalid config */
    /* A table far beyond any host: refused before allocating, with sizes. */
    c = tiny_config();
    c.n_tables = 1;
    c.table_rows[0] = (int64_t)1 << 40;
    c.emb_dim = 128;
    c.bot[1] = 128;
    size_t need = rap_model_bytes(&c, RAP_CPU);
    CHECK(need >= ((size_t)1 << 40) * 128 * 4);
    rap_model *m = NULL;
    double t0 = rap_now();
    rap_status s = rap_model_create(&c, RAP_CPU, &m);
    CHECK_MSG(s == RAP_ERR_NOMEM && m == NULL && strstr(rap_last_error(), "model needs") &&
                  strstr(rap_last_error(), "GiB available"),
              "%s: %s", rap_status_name(s), rap_last_error());
    CHECK(rap_now() - t0 < 1.0);
}

RAP_TEST(model_cpu_tensors_and_misuse)
{
    rap_model_config c = tiny_config();
    rap_model *m;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    static const struct {
        const char *name;
        int64_t rows, cols;
    } want[] = {{"emb_l.0.weight", 5, 4},  {"emb_l.1.weight", 6, 4}, {"emb_l.2.weight", 7, 4},
                {"bot_l.0.weight", 5, 3},  {"bot_l.0.bias", 5, 1},   {"bot_l.2.weight", 4, 5},
                {"bot_l.2.bias", 4, 1},    {"top_l.0.weight", 6, 10}, {"top_l.0.bias", 6, 1},
                {"top_l.2.weight", 1, 6},  {"top_l.2.bias", 1, 1}};
    REQUIRE(rap_model_n_tensors(m) == 11);
    for (int i = 0; i < 11; i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i);
        CHECK_MSG(strcmp(ti->name, want[i].name) == 0 && ti->rows == want[i].rows &&
                      ti->cols == want[i].cols,
                  "tensor %d: %s (%lld, %lld)", i, ti->name, (long long)ti->rows,
                  (long long)ti->cols);
    }
    CHECK(rap_model_tensor(m, 11) == NULL);
    CHECK(rap_model_device(m) == RAP_CPU);
    float buf[64];
    CHECK(rap_model_get(m, 11, buf) == RAP_ERR_ARG);
    CHECK(rap_model_get_state(m, 0, buf) == RAP_ERR_ARG); /* SGD */
    CHECK(rap_model_get_grad(m, 0, buf) == RAP_ERR_ARG);  /* table */
    double loss;
    CHECK(rap_model_last_loss(m, &loss) == RAP_ERR_ARG);

    test_batch tb;
    tb_tiny(&tb, &c);
    CHECK(rap_model_mlp_forward(m, &tb.b) == RAP_ERR_ARG); /* no emb_forward yet */
    REQUIRE_OK(rap_model_emb_forward(m, &tb.b));
    CHECK(rap_model_mlp_backward(m, &tb.b) == RAP_ERR_ARG); /* no mlp_forward */
    REQUIRE_OK(rap_model_mlp_forward(m, &tb.b));
    REQUIRE_OK(rap_model_last_loss(m, &loss));
    /* predict gives the logits the loss was computed from. */
    float logits[5];
    REQUIRE_OK(rap_model_predict(m, &tb.b, logits));
    CHECK(rap_cpu_bce(logits, tb.label, 5, NULL) == loss);
    /* Batches too large, or with ids out of range. */
    tb.b.rows = 6;
    CHECK(rap_model_emb_forward(m, &tb.b) == RAP_ERR_ARG);
    tb.b.rows = 5;
    tb.ids[2][3] = 7;
    rap_status s = rap_model_emb_forward(m, &tb.b);
    CHECK_MSG(s == RAP_ERR_DATA && strstr(rap_last_error(), "table 2 row 2: id 7 outside [0, 7)"),
              "%s: %s", rap_status_name(s), rap_last_error());
    CHECK(rap_model_mlp_forward(m, &tb.b) == RAP_ERR_ARG);
    tb.ids[2][3] = 1;
    /* Many ids per bag: the sort keys grow, training goes on. */
    test_batch big;
    tb_random(&big, &c, 5, 20, 5);
    REQUIRE_OK(rap_model_train_step(m, &big.b));
    tb_free(&big);
    tb_free(&tb);
    rap_model_free(m);
}
