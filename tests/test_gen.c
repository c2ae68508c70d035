/* test_gen.c -- the synthetic Criteo generator (src/data/gen.c) and the
 * exact AUC (src/core/metrics.c). */
#include "test.h"

#include "data/gen.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------- helpers */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static rap_gen_config config(const char *out, int64_t rows, uint64_t seed, const char *card,
                             int threads)
{
    rap_gen_config c;
    memset(&c, 0, sizeof c);
    c.out = out;
    c.rows = rows;
    c.seed = seed;
    c.threads = threads;
    rap_gen_cardinalities(card, c.card);
    return c;
}

static void path_in_tmp(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", rap_test_tmpdir(), name);
}

/* Splits text into lines and fields and checks the syntax of every row.
 * Counts nulls per column, positives and rows. Returns false (after
 * recording a failure) at the first bad row. */
typedef struct {
    int64_t rows, positives;
    int64_t int_null[RAP_CRITEO_DENSE], cat_null[RAP_CRITEO_SPARSE];
    int64_t negatives[RAP_CRITEO_DENSE];
    int64_t min_int;
} row_stats;

static bool is_hex8(const char *s, size_t n)
{
    if (n != 8)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool check_rows(rap_test_ctx *t, const char *text, size_t len, row_stats *st,
                       int64_t *ids /* (rows, 26), -1 for null, or NULL */, int64_t max_rows)
{
    memset(st, 0, sizeof *st);
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            CHECK_MSG(0, "row %lld has no newline", (long long)st->rows + 1);
            return false;
        }
        const char *f = p;
        int field = 0;
        for (;;) {
            const char *tab = memchr(f, '\t', (size_t)(nl - f));
            const char *fe = tab ? tab : nl;
            size_t n = (size_t)(fe - f);
            if (field == 0) {
                if (n != 1 || (f[0] != '0' && f[0] != '1')) {
                    CHECK_MSG(0, "row %lld: bad label", (long long)st->rows + 1);
                    return false;
                }
                st->positives += f[0] == '1';
            } else if (field <= RAP_CRITEO_DENSE) {
                int j = field - 1;
                if (n == 0) {
                    st->int_null[j]++;
                } else {
                    char tmp[32];
                    if (n >= sizeof tmp) {
                        CHECK_MSG(0, "row %lld: int_%d too long", (long long)st->rows + 1, j);
                        return false;
                    }
                    memcpy(tmp, f, n);
                    tmp[n] = 0;
                    char *e;
                    errno = 0;
                    long long v = strtoll(tmp, &e, 10);
                    if (*e || errno || (tmp[0] == '0' && n > 1) || tmp[0] == '+') {
                        CHECK_MSG(0, "row %lld: int_%d \"%s\" is not an integer",
                                  (long long)st->rows + 1, j, tmp);
                        return false;
                    }
                    if (v < 0)
                        st->negatives[j]++;
                    if (v < st->min_int)
                        st->min_int = v;
                }
            } else if (field <= RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE) {
                int c = field - 1 - RAP_CRITEO_DENSE;
                if (n == 0) {
                    st->cat_null[c]++;
                    if (ids && st->rows < max_rows)
                        ids[st->rows * RAP_CRITEO_SPARSE + c] = -1;
                } else if (!is_hex8(f, n)) {
                    CHECK_MSG(0, "row %lld: cat_%d is not 8 lowercase hex digits",
                              (long long)st->rows + 1, c);
                    return false;
                } else if (ids && st->rows < max_rows) {
                    ids[st->rows * RAP_CRITEO_SPARSE + c] = (int64_t)strtoul(f, NULL, 16);
                }
            }
            field++;
            if (!tab)
                break;
            f = tab + 1;
        }
        if (field != 40) {
            CHECK_MSG(0, "row %lld has %d fields, expected 40", (long long)st->rows + 1, field);
            return false;
        }
        st->rows++;
        p = nl + 1;
    }
    return true;
}

/* ---------------------------------------------------- cardinality specs */

RAP_TEST(gen_cardinalities)
{
    int64_t c[RAP_CRITEO_SPARSE];
    REQUIRE_OK(rap_gen_cardinalities("kaggle", c));
    int64_t sum = 0;
    for (int i = 0; i < RAP_CRITEO_SPARSE; i++)
        sum += c[i];
    CHECK(sum == 33762577);
    CHECK(c[0] == 1460 && c[2] == 10131227 && c[25] == 142572);
    REQUIRE_OK(rap_gen_cardinalities("1tb", c));
    CHECK(c[0] == 45833188 && c[19] == 48937457 && c[25] == 35);
    REQUIRE_OK(rap_gen_cardinalities("1TB", c));
    REQUIRE_OK(rap_gen_cardinalities(
        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,4294967296", c));
    CHECK(c[0] == 1 && c[24] == 25 && c[25] == 4294967296LL);

    struct {
        const char *spec, *msg;
    } bad[] = {
        {"", "empty spec"},
        {NULL, "empty spec"},
        {"criteo", "expected \"kaggle\", \"1tb\" or 26 comma-separated positive integers"},
        {"1,2,3", "3 values, expected 26"},
        {"7", "1 value, expected 26"},
        {"1,2,x,4", "value 3 at column 5 is not a positive integer"},
        {"1,,3", "value 2 at column 3 is not a positive integer"},
        {"1,2,", "value 3 at column 5 is not a positive integer"},
        {"0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "value 1 is 0"},
        {"1,-5,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "value 2 is negative"},
        {"1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,4294967297", "value 26 is larger than"},
        {"1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,99999999999999999999",
         "value 26 is larger than"},
        {"1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "more than 26 values"},
        {"1.5,1,1", "value 1 at column 1 is not a positive integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int k = 0; k < RAP_CRITEO_SPARSE; k++)
            c[k] = 77;
        rap_status s = rap_gen_cardinalities(bad[i].spec, c);
        CHECK_MSG(s == RAP_ERR_ARG, "spec \"%s\" accepted", bad[i].spec ? bad[i].spec : "(null)");
        CHECK_MSG(strstr(rap_last_error(), bad[i].msg) != NULL, "spec \"%s\": message \"%s\"",
                  bad[i].spec ? bad[i].spec : "(null)", rap_last_error());
        CHECK(c[0] == 77); /* untouched on failure */
    }
}

/* ------------------------------------------------------------ sampling */

RAP_TEST(gen_zipf_samplers)
{
    /* rejection-inversion over [0, 1000) and over a tail [50, 1000),
     * against the exact probabilities of the first ranks (5 sigma) */
    const double s = 1.1;
    const int n = 1000, draws = 400000;
    double norm = 0, norm_tail = 0;
    for (int k = 0; k < n; k++) {
        norm += pow(k + 1.0, -s);
        if (k >= 50)
            norm_tail += pow(k + 1.0, -s);
    }
    rap_zipf_ri z, zt;
    rap_zipf_ri_init(&z, 0, n, s);
    rap_zipf_ri_init(&zt, 50, n, s);
    int64_t *cnt = calloc(n, sizeof *cnt), *cnt_t = calloc(n, sizeof *cnt_t);
    uint64_t rng = 12345;
    bool in_range = true;
    for (int i = 0; i < draws; i++) {
        int64_t a = rap_zipf_ri_draw(&z, &rng), b = rap_zipf_ri_draw(&zt, &rng);
        if (a < 0 || a >= n || b < 50 || b >= n) {
            in_range = false;
            break;
        }
        cnt[a]++;
        cnt_t[b]++;
    }
    CHECK(in_range);
    int ranks[] = {0, 1, 2, 9, 99, 999};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        int k = ranks[i];
        double p = pow(k + 1.0, -s) / norm, e = p * draws, sd = sqrt(e * (1 - p));
        CHECK_MSG(fabs(cnt[k] - e) < 5 * sd + 1, "ri rank %d: %lld draws, expected %.0f", k,
                  (long long)cnt[k], e);
    }
    int tranks[] = {50, 51, 60, 500, 999};
    for (size_t i = 0; i < sizeof tranks / sizeof tranks[0]; i++) {
        int k = tranks[i];
        double p = pow(k + 1.0, -s) / norm_tail, e = p * draws, sd = sqrt(e * (1 - p));
        CHECK_MSG(fabs(cnt_t[k] - e) < 5 * sd + 1, "ri tail rank %d: %lld draws, expected %.0f",
                  k, (long long)cnt_t[k], e);
    }
    free(cnt);
    free(cnt_t);

    /* the generator's sampler: alias head + rejection-inversion tail */
    const int64_t big = 3000000;
    rap_zipf hz;
    REQUIRE_OK(rap_zipf_init(&hz, big, s));
    double hnorm = 0, head_mass = 0;
    for (int64_t k = 0; k < big; k++) {
        double w = pow(k + 1.0, -s);
        hnorm += w;
        if (k < RAP_GEN_ZIPF_HEAD)
            head_mass += w;
    }
    int64_t c0 = 0, c1 = 0, ctail = 0, bad = 0;
    for (int i = 0; i < draws; i++) {
        int64_t k = rap_zipf_draw(&hz, &rng);
        bad += k < 0 || k >= big;
        c0 += k == 0;
        c1 += k == 1;
        ctail += k >= RAP_GEN_ZIPF_HEAD;
    }
    CHECK(bad == 0);
    double e0 = draws / hnorm, e1 = draws * pow(2.0, -s) / hnorm;
    double pt = 1 - head_mass / hnorm, et = draws * pt;
    CHECK_MSG(fabs(c0 - e0) < 5 * sqrt(e0), "rank 0: %lld, expected %.0f", (long long)c0, e0);
    CHECK_MSG(fabs(c1 - e1) < 5 * sqrt(e1), "rank 1: %lld, expected %.0f", (long long)c1, e1);
    CHECK_MSG(fabs(ctail - et) < 5 * sqrt(et * (1 - pt)), "tail: %lld, expected %.0f",
              (long long)ctail, et);
    rap_zipf_free(&hz);

    /* a card smaller than the head: pure alias table, all ranks reachable */
    REQUIRE_OK(rap_zipf_init(&hz, 3, 1.2));
    int64_t c3[3] = {0, 0, 0};
    for (int i = 0; i < 30000; i++) {
        int64_t k = rap_zipf_draw(&hz, &rng);
        REQUIRE(k >= 0 && k < 3);
        c3[k]++;
    }
    CHECK(c3[0] > c3[1] && c3[1] > c3[2] && c3[2] > 0);
    rap_zipf_free(&hz);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

RAP_TEST(gen_ids_distinct)
{
    /* distinct ranks give distinct ids, per column; columns differ */
    const int n = 200000;
    uint32_t *v = malloc(sizeof *v * n);
    for (int c = 0; c < 3; c++) {
        for (int r = 0; r < n; r++)
            v[r] = rap_gen_id(c, (uint32_t)r);
        qsort(v, n, sizeof *v, cmp_u32);
        int dup = 0;
        for (int r = 1; r < n; r++)
            dup += v[r] == v[r - 1];
        CHECK_MSG(dup == 0, "column %d: %d duplicate ids", c, dup);
    }
    CHECK(rap_gen_id(0, 0) != rap_gen_id(1, 0));
    CHECK(rap_gen_id(0, 0) != rap_gen_id(0, 1));
    free(v);
}

/* ------------------------------------------------------ files and rows */

RAP_TEST(gen_determinism)
{
    char a[512], b[512], c[512];
    path_in_tmp(a, sizeof a, "det_a.tsv");
    path_in_tmp(b, sizeof b, "det_b.tsv");
    path_in_tmp(c, sizeof c, "det_c.tsv");
    /* 2.5 blocks: a partial last block too */
    int64_t rows = RAP_GEN_BLOCK_ROWS * 2 + RAP_GEN_BLOCK_ROWS / 2;
    rap_gen_config ca = config(a, rows, 7, "kaggle", 1);
    rap_gen_config cb = config(b, rows, 7, "kaggle", 4);
    rap_gen_config cc = config(c, rows, 8, "kaggle", 2);
    rap_gen_result ra, rb, rc;
    REQUIRE_OK(rap_gen_write(&ca, &ra));
    REQUIRE_OK(rap_gen_write(&cb, &rb));
    REQUIRE_OK(rap_gen_write(&cc, &rc));
    size_t la, lb, lc;
    char *ta = read_file(a, &la), *tb = read_file(b, &lb), *tc = read_file(c, &lc);
    REQUIRE(ta && tb && tc);
    CHECK(la == lb && memcmp(ta, tb, la) == 0);
    CHECK(la != lc || memcmp(ta, tc, la) != 0);
    CHECK(ra.rows == rows && rb.rows == rows);
    CHECK(ra.positives == rb.positives && ra.teacher_auc == rb.teacher_auc);
    CHECK(ra.bytes == (int64_t)la && rc.bytes == (int64_t)lc);
    /* no temporary file left behind */
    CHECK(rap_test_temporaries(a) == 0);
    /* the first block of a longer file is the same rows */
    rap_gen_config cd = config(c, RAP_GEN_BLOCK_ROWS + 10, 7, "kaggle", 2);
    REQUIRE_OK(rap_gen_write(&cd, &rc));
    free(tc);
    tc = read_file(c, &lc);
    REQUIRE(tc);
    CHECK(lc < la && memcmp(ta, tc, lc) == 0);
    free(ta);
    free(tb);
    free(tc);
    remove(a);
    remove(b);
    remove(c);
}

RAP_TEST(gen_rows_syntax_rates)
{
    char a[512];
    path_in_tmp(a, sizeof a, "rows.tsv");
    const int64_t rows = 60000;
    rap_gen_config cfg = config(a, rows, 3, "kaggle", 0);
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&cfg, &res));
    size_t len;
    char *text = read_file(a, &len);
    REQUIRE(text);
    row_stats st;
    REQUIRE(check_rows(t, text, len, &st, NULL, 0));
    CHECK(st.rows == rows && res.rows == rows);
    CHECK(st.positives == res.positives);
    CHECK(res.bytes == (int64_t)len);
    double pr = (double)st.positives / rows;
    CHECK_MSG(pr > 0.20 && pr < 0.30, "positive rate %.3f", pr);
    /* null rates within 0.015 of the configured ones (sd <= 0.002) */
    for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
        double r = (double)st.int_null[j] / rows;
        CHECK_MSG(fabs(r - rap_gen_int_null[j]) < 0.015, "int_%d null rate %.3f, configured %.3f",
                  j, r, rap_gen_int_null[j]);
    }
    for (int c = 0; c < RAP_CRITEO_SPARSE; c++) {
        double r = (double)st.cat_null[c] / rows;
        CHECK_MSG(fabs(r - rap_gen_cat_null[c]) < 0.015, "cat_%d null rate %.3f, configured %.3f",
                  c, r, rap_gen_cat_null[c]);
    }
    /* some columns about 40% null, some never null */
    CHECK(st.int_null[0] > rows * 0.35 && st.int_null[1] == 0);
    CHECK(st.cat_null[19] > rows * 0.35 && st.cat_null[0] == 0);
    /* small negatives, mostly in int_1 */
    CHECK(st.min_int >= -3);
    CHECK(st.negatives[1] > rows / 100);
    int64_t other = 0;
    for (int j = 0; j < RAP_CRITEO_DENSE; j++)
        if (j != 1)
            other += st.negatives[j];
    CHECK(other < st.negatives[1]);
    CHECK_MSG(res.teacher_auc > 0.7 && res.teacher_auc < 0.9, "teacher AUC %.4f",
              res.teacher_auc);
    free(text);
    remove(a);
}

RAP_TEST(gen_small_cardinality_zipf)
{
    char a[512];
    path_in_tmp(a, sizeof a, "small.tsv");
    const int64_t rows = 30000;
    rap_gen_config cfg = config(a, rows, 11, "kaggle", 2);
    for (int c = 0; c < RAP_CRITEO_SPARSE; c++)
        cfg.card[c] = 10;
    cfg.card[2] = 1; /* one id only */
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&cfg, &res));
    size_t len;
    char *text = read_file(a, &len);
    REQUIRE(text);
    int64_t *ids = malloc(sizeof *ids * (size_t)rows * RAP_CRITEO_SPARSE);
    row_stats st;
    REQUIRE(check_rows(t, text, len, &st, ids, rows));
    REQUIRE(st.rows == rows);
    for (int c = 0; c < RAP_CRITEO_SPARSE; c++) {
        /* distinct ids and their counts (at most a few: linear scan) */
        uint32_t seen[64];
        int64_t count[64];
        int nd = 0;
        bool overflow = false;
        for (int64_t r = 0; r < rows; r++) {
            if (ids[r * RAP_CRITEO_SPARSE + c] < 0)
                continue;
            uint32_t v = (uint32_t)ids[r * RAP_CRITEO_SPARSE + c];
            int k = 0;
            while (k < nd && seen[k] != v)
                k++;
            if (k == nd) {
                if (nd == 64) {
                    overflow = true;
                    break;
                }
                seen[nd] = v;
                count[nd++] = 0;
            }
            count[k]++;
        }
        int64_t card = cfg.card[c];
        CHECK_MSG(!overflow && nd <= card, "cat_%d: %d distinct ids for cardinality %lld", c, nd,
                  (long long)card);
        if (card == 10) {
            CHECK_MSG(nd == 10, "cat_%d: %d distinct ids of 10", c, nd);
            /* the most frequent id is rank 0's, and much more frequent
             * than the rarest (Zipf: (1/10)^-s > 10x) */
            int top = 0, low = 0;
            for (int k = 1; k < nd; k++) {
                if (count[k] > count[top])
                    top = k;
                if (count[k] < count[low])
                    low = k;
            }
            CHECK(seen[top] == rap_gen_id(c, 0));
            CHECK_MSG(count[top] > 8 * count[low], "cat_%d: top %lld, rarest %lld", c,
                      (long long)count[top], (long long)count[low]);
        } else {
            CHECK(nd == 1 && seen[0] == rap_gen_id(c, 0));
        }
    }
    free(ids);
    free(text);
    remove(a);
}

RAP_TEST(gen_zipf_heavy_kaggle)
{
    /* In a large-cardinality column, the top id is far more frequent than
     * a uniform draw would make it, and ids are mostly of low ranks. */
    char a[512];
    path_in_tmp(a, sizeof a, "heavy.tsv");
    const int64_t rows = 40000;
    rap_gen_config cfg = config(a, rows, 5, "kaggle", 2);
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&cfg, &res));
    size_t len;
    char *text = read_file(a, &len);
    REQUIRE(text);
    int64_t *ids = malloc(sizeof *ids * (size_t)rows * RAP_CRITEO_SPARSE);
    row_stats st;
    REQUIRE(check_rows(t, text, len, &st, ids, rows));
    int c = 2; /* cardinality 10,131,227 */
    uint32_t top = rap_gen_id(c, 0), second = rap_gen_id(c, 1);
    int64_t n_top = 0, n_second = 0, present = 0;
    uint32_t *col = malloc(sizeof *col * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        if (ids[r * RAP_CRITEO_SPARSE + c] < 0)
            continue;
        uint32_t v = (uint32_t)ids[r * RAP_CRITEO_SPARSE + c];
        col[present++] = v;
        n_top += v == top;
        n_second += v == second;
    }
    qsort(col, (size_t)present, sizeof *col, cmp_u32);
    int64_t distinct = present > 0;
    for (int64_t r = 1; r < present; r++)
        distinct += col[r] != col[r - 1];
    CHECK_MSG(n_top > present / 50, "top id %lld of %lld rows", (long long)n_top,
              (long long)present);
    CHECK(n_top > n_second && n_second > 0);
    /* heavy tail: many ids seen once, but far fewer distinct than rows */
    CHECK_MSG(distinct > present / 10 && distinct < present * 9 / 10, "%lld distinct of %lld",
              (long long)distinct, (long long)present);
    free(col);
    free(ids);
    free(text);
    remove(a);
}

RAP_TEST(gen_teacher_auc_range)
{
    char a[512];
    path_in_tmp(a, sizeof a, "teacher.tsv");
    rap_gen_config cfg = config(a, 200000, 1, "kaggle", 0);
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&cfg, &res));
    CHECK_MSG(res.teacher_auc > 0.70 && res.teacher_auc < 0.90, "kaggle teacher AUC %.4f",
              res.teacher_auc);
    double pr = (double)res.positives / res.rows;
    CHECK_MSG(pr > 0.22 && pr < 0.28, "positive rate %.4f", pr);
    /* other cardinalities are calibrated too */
    rap_gen_config c2 = config(a, 100000, 2, "1tb", 0);
    REQUIRE_OK(rap_gen_write(&c2, &res));
    CHECK_MSG(res.teacher_auc > 0.70 && res.teacher_auc < 0.90, "1tb teacher AUC %.4f",
              res.teacher_auc);
    /* zero rows: an empty file, AUC undefined */
    rap_gen_config c3 = config(a, 0, 2, "kaggle", 0);
    REQUIRE_OK(rap_gen_write(&c3, &res));
    CHECK(res.rows == 0 && res.bytes == 0 && isnan(res.teacher_auc));
    size_t len;
    char *text = read_file(a, &len);
    CHECK(text && len == 0);
    free(text);
    remove(a);
}

RAP_TEST(gen_gzip_output)
{
    char plain[512], gz[512];
    path_in_tmp(plain, sizeof plain, "z.tsv");
    path_in_tmp(gz, sizeof gz, "z.tsv.gz");
    int64_t rows = RAP_GEN_BLOCK_ROWS * 3 + 17;
    rap_gen_config cp = config(plain, rows, 9, "kaggle", 2);
    rap_gen_config cz = config(gz, rows, 9, "kaggle", 3);
    rap_gen_result rp, rz;
    REQUIRE_OK(rap_gen_write(&cp, &rp));
    REQUIRE_OK(rap_gen_write(&cz, &rz));
    CHECK(rp.bytes == rz.bytes && rp.positives == rz.positives);
    size_t lp, lz;
    char *tp = read_file(plain, &lp);
    char *tz = read_file(gz, &lz);
    REQUIRE(tp && tz);
    CHECK(lz > 2 && (unsigned char)tz[0] == 0x1f && (unsigned char)tz[1] == 0x8b);
    CHECK(lz < lp / 2);
    /* gzopen reads the concatenated members back to the plain bytes */
    gzFile g = gzopen(gz, "rb");
    REQUIRE(g);
    char *back = malloc(lp + 1024);
    size_t got = 0;
    for (;;) {
        int n = gzread(g, back + got, (unsigned)(lp + 1024 - got));
        REQUIRE(n >= 0);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    gzclose(g);
    CHECK(got == lp && memcmp(back, tp, lp) == 0);
    /* zero rows in gzip: a valid empty stream */
    rap_gen_config c0 = config(gz, 0, 9, "kaggle", 1);
    REQUIRE_OK(rap_gen_write(&c0, &rz));
    g = gzopen(gz, "rb");
    REQUIRE(g);
    CHECK(gzread(g, back, 16) == 0);
    gzclose(g);
    free(back);
    free(tp);
    free(tz);
    remove(plain);
    remove(gz);
}

RAP_TEST(gen_errors)
{
    rap_gen_result res;
    rap_gen_config cfg = config("/nonexistent-dir-rap/x.tsv", 10, 1, "kaggle", 1);
    CHECK(rap_gen_write(&cfg, &res) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "/nonexistent-dir-rap/x.tsv") != NULL, "message: %s",
              rap_last_error());
    cfg = config("x.tsv", -1, 1, "kaggle", 1);
    CHECK(rap_gen_write(&cfg, &res) == RAP_ERR_ARG);
    cfg = config(NULL, 10, 1, "kaggle", 1);
    CHECK(rap_gen_write(&cfg, &res) == RAP_ERR_ARG);
    cfg = config("x.tsv", 10, 1, "kaggle", 1);
    cfg.card[4] = 0;
    CHECK(rap_gen_write(&cfg, &res) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "cat_4") != NULL);
    /* a full disk: writes fail, the error names the path, no file remains
     * (the path is a link to /dev/full: the generator writes through it) */
    if (access("/dev/full", W_OK) == 0) {
        char link_path[600];
        path_in_tmp(link_path, sizeof link_path, "full.tsv");
        remove(link_path);
        if (symlink("/dev/full", link_path) == 0) {
            cfg = config(link_path, 20000, 1, "kaggle", 2);
            CHECK(rap_gen_write(&cfg, &res) == RAP_ERR_IO);
            CHECK_MSG(strstr(rap_last_error(), link_path) != NULL, "message: %s",
                      rap_last_error());
            struct stat sb;
            CHECK(lstat(link_path, &sb) == 0 && S_ISLNK(sb.st_mode)); /* still the link */
            CHECK(stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode));
            CHECK(rap_test_temporaries(link_path) == 0);
            remove(link_path);
        }
    }
}

/* ------------------------------------------------------------------ AUC */

static double brute_auc(const float *s, const float *y, int n)
{
    double num = 0, np = 0, nn = 0;
    for (int i = 0; i < n; i++) {
        np += y[i] > 0.5f;
        nn += y[i] <= 0.5f;
    }
    for (int i = 0; i < n; i++) {
        if (y[i] <= 0.5f)
            continue;
        for (int j = 0; j < n; j++) {
            if (y[j] > 0.5f)
                continue;
            num += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
        }
    }
    return num / (np * nn);
}

RAP_TEST(auc_matches_brute_force)
{
    uint64_t rng = 99;
    for (int trial = 0; trial < 6; trial++) {
        int n = 50 + trial * 600;
        float *s = malloc(sizeof *s * n), *y = malloc(sizeof *y * n);
        for (int i = 0; i < n; i++) {
            double u = rap_gen_uniform(&rng);
            /* trials 0-2: few distinct scores (many ties), negatives and
             * both zeros; 3-5: continuous scores */
            if (trial < 3)
                s[i] = (float)((int)(u * 7) - 3) * 0.5f;
            else
                s[i] = (float)(u * 4 - 2);
            if (s[i] == 0 && (i & 1))
                s[i] = -0.0f;
            /* labels correlated with the score */
            y[i] = rap_gen_uniform(&rng) < 0.3 + 0.1 * s[i] ? 1.0f : 0.0f;
        }
        double a = rap_auc(s, y, n), b = brute_auc(s, y, n);
        CHECK_MSG(fabs(a - b) < 1e-12, "trial %d: auc %.15f, brute force %.15f", trial, a, b);
        free(s);
        free(y);
    }
    float s[4] = {0.1f, 0.2f, 0.3f, 0.4f}, y[4] = {0, 0, 1, 1};
    CHECK(rap_auc(s, y, 4) == 1.0);
    float yr[4] = {1, 1, 0, 0};
    CHECK(rap_auc(s, yr, 4) == 0.0);
    float same[4] = {2, 2, 2, 2};
    CHECK(rap_auc(same, y, 4) == 0.5);
    float one[4] = {1, 1, 1, 1};
    CHECK(isnan(rap_auc(s, one, 4)));
    float zero[4] = {0, 0, 0, 0};
    CHECK(isnan(rap_auc(s, zero, 4)));
    CHECK(isnan(rap_auc(s, y, 0)));
    /* large n: radix sort over all key digits (scores spanning magnitudes) */
    int n = 1 << 20;
    float *ls = malloc(sizeof *ls * n), *ly = malloc(sizeof *ly * n);
    for (int i = 0; i < n; i++) {
        ls[i] = (float)((double)i * 1e-3 - 300.0);
        ly[i] = (float)((i * 2654435761u >> 7) % 3 == 0); /* independent of score */
    }
    ly[n - 1] = 1;
    ly[0] = 0;
    double a = rap_auc(ls, ly, n);
    CHECK_MSG(fabs(a - 0.5) < 0.01, "auc %.4f on labels independent of the score", a);
    for (int i = 0; i < n; i++)
        ly[i] = i >= n / 2;
    CHECK(rap_auc(ls, ly, n) == 1.0);
    free(ls);
    free(ly);
}
