/* test_parquet.c -- Parquet input (docs/SCHEMA.md "Parquet"): rows written
 * by pyarrow (scripts/tsv_to_parquet.py) read to the same batches as the
 * same rows in TSV, rejects included, with one thread and several, in one
 * file and in a directory; a truncated file, a missing column and a column
 * of the wrong type refused with a message naming the file and the column.
 * Skips (saying why) when rap was built without Arrow or python3 has no
 * pyarrow. */
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "core/core.h"
#include "data/parquet.h"

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

static void write_text(const char *path, const char *text, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text))
        abort();
    fclose(f);
}

static const char *k_schema = "y     label\n"
                              "price dense\n"
                              "age   dense int32\n"
                              "user  sparse str\n"
                              "item  sparse hex\n"
                              "hist  sparse dec list |\n"
                              "note  skip\n"
                              "tags  sparse str list ;\n";

/* Why the Parquet tests cannot run here, or NULL. */
static const char *no_parquet(void)
{
    static char why[512];
    if (!rap_pq_built(why, sizeof why))
        return why;
    if (system("python3 -c 'import pyarrow' >/dev/null 2>&1") != 0)
        return "python3 has no pyarrow (pip install pyarrow) to write the test files";
    return NULL;
}

/* Runs the converter: schema, tsv -> parquet, rows a group. */
static int to_parquet(const char *schema, const char *tsv, const char *pq, int group)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 scripts/tsv_to_parquet.py '%s' '%s' '%s' %d", schema, tsv,
             pq, group);
    return system(cmd);
}

typedef struct {
    rap_batch all;   /* every row, one batch */
    rap_reader_stats st;
    rap_status status;
    char err[512];
} got_t;

/* Reads input by s in batches of cap rows into g->all (capacity max). */
static void read_input(rap_test_ctx *t, const char *input, const rap_input_schema *s, int threads,
                       int64_t cap, int64_t max, got_t *g)
{
    memset(g, 0, sizeof *g);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = input;
    rc.threads = threads;
    rc.schema = s;
    rc.inflate_threads = threads > 2 ? 2 : 1;
    rap_reader *r = NULL;
    g->status = rap_reader_open(&rc, &r);
    if (g->status != RAP_OK) {
        snprintf(g->err, sizeof g->err, "%s", rap_last_error());
        return;
    }
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_reader_shape(&rc), cap, false));
    REQUIRE_OK(rap_batch_create(&g->all, rap_reader_shape(&rc), max, false));
    for (;;) {
        g->status = rap_reader_next(r, &b);
        if (g->status != RAP_OK) {
            snprintf(g->err, sizeof g->err, "%s", rap_last_error());
            break;
        }
        if (b.rows == 0)
            break;
        REQUIRE(g->all.rows + b.rows <= max);
        rap_batch_append(&g->all, &b, 0, b.rows);
    }
    rap_reader_get_stats(r, &g->st);
    rap_batch_free(&b);
    rap_reader_close(r);
}

/* The rows of a and b are the same, value for value. */
static void same_rows(rap_test_ctx *t, const rap_batch *a, const rap_batch *b, const char *what)
{
    CHECK_MSG(a->rows == b->rows, "%s: %lld rows vs %lld", what, (long long)a->rows,
              (long long)b->rows);
    int bad = 0;
    const int64_t A = a->cap, B = b->cap, K = a->schema.ids_per_row;
    for (int64_t i = 0; i < a->rows && i < b->rows && bad < 5; i++) {
        if (a->label[i] != b->label[i])
            CHECK_MSG(bad++ < 0, "%s: row %lld label", what, (long long)i);
        for (int j = 0; j < a->schema.n_dense; j++)
            if (memcmp(&a->dense[j * A + i], &b->dense[j * B + i], 4) ||
                a->dense_valid[j * A + i] != b->dense_valid[j * B + i])
                CHECK_MSG(bad++ < 0, "%s: row %lld dense %d: %.9g/%d vs %.9g/%d", what,
                          (long long)i, j, (double)a->dense[j * A + i], a->dense_valid[j * A + i],
                          (double)b->dense[j * B + i], b->dense_valid[j * B + i]);
        for (int j = 0; j < a->schema.n_sparse; j++) {
            const int64_t *oa = a->sparse_off + j * (A + 1), *ob = b->sparse_off + j * (B + 1);
            int64_t na = oa[i + 1] - oa[i], nb = ob[i + 1] - ob[i];
            if (na != nb || a->sparse_valid[j * A + i] != b->sparse_valid[j * B + i]) {
                CHECK_MSG(bad++ < 0, "%s: row %lld sparse %d: %lld ids valid %d vs %lld valid %d",
                          what, (long long)i, j, (long long)na, a->sparse_valid[j * A + i],
                          (long long)nb, b->sparse_valid[j * B + i]);
                continue;
            }
            for (int64_t k = 0; k < na; k++)
                if (a->sparse_ids[j * A * K + oa[i] + k] != b->sparse_ids[j * B * K + ob[i] + k])
                    CHECK_MSG(bad++ < 0, "%s: row %lld sparse %d id %lld differs", what,
                              (long long)i, j, (long long)k);
        }
    }
}

RAP_TEST(parquet_same_batches_as_tsv)
{
    const char *why = no_parquet();
    if (why)
        SKIP("%s", why);
    char *sp = tmp_path("pq.schema"), *tsv = tmp_path("pq.tsv"), *pqf = tmp_path("pq.parquet");
    write_text(sp, k_schema, "wb");
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_load(sp, &s));
    s->max_list = 5;
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = 5000;
    g.seed = 11;
    g.out = tsv;
    g.schema = s;
    g.list_mean = 2;
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&g, &res));
    /* rejects both files hold: a label 2, a list of 6 ids, a bad hex id */
    write_text(tsv, "2\t1.5\t3\tu\tab\t1\tn\tx\n"
                    "1\t1.5\t3\tu\tab\t1|2|3|4|5|6\tn\tx\n"
                    "0\t\t\t\tzz\t\tn\t\n"
                    "1\t-2.5\t7\tv\tff\t\tn\ta;b\n",
               "ab");
    REQUIRE(to_parquet(sp, tsv, pqf, 700) == 0);
    REQUIRE(rap_pq_is_parquet(pqf) && !rap_pq_is_parquet(tsv));
    got_t a, b;
    read_input(t, tsv, s, 2, 333, 6000, &a);
    REQUIRE_OK(a.status);
    CHECK(a.st.rows_read == 5004 && a.st.rows_rejected == 3);
    const int threads[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        read_input(t, pqf, s, threads[k], 1000, 6000, &b);
        CHECK_MSG(b.status == RAP_OK, "%s", b.err);
        char what[64];
        snprintf(what, sizeof what, "parquet, %d threads", threads[k]);
        same_rows(t, &a.all, &b.all, what);
        CHECK_MSG(b.st.rows_read == a.st.rows_read && b.st.rows_used == a.st.rows_used &&
                  !memcmp(b.st.rejected, a.st.rejected, sizeof a.st.rejected),
                  "%s: read %lld used %lld, TSV %lld %lld", what, (long long)b.st.rows_read,
                  (long long)b.st.rows_used, (long long)a.st.rows_read,
                  (long long)a.st.rows_used);
        CHECK(b.st.rejected[RAP_REJ_LABEL] == 1 && b.st.rejected[RAP_REJ_LIST] == 1 &&
              b.st.rejected[RAP_REJ_CAT] == 1);
        CHECK_MSG(strstr(b.st.example[RAP_REJ_LIST][0], "pq.parquet:5002"), "%s",
                  b.st.example[RAP_REJ_LIST][0]);
        rap_batch_free(&b.all);
    }
    /* a directory of two Parquet files reads as their rows in name order */
    char *dir = tmp_path("pqdir");
    mkdir(dir, 0755);
    char p1[600], p2[600], cmd[2048];
    snprintf(p1, sizeof p1, "%s/a.parquet", dir);
    snprintf(p2, sizeof p2, "%s/b.data", dir); /* by content, whatever the name */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", pqf, p1, pqf, p2);
    REQUIRE(system(cmd) == 0);
    read_input(t, dir, s, 3, 4096, 12000, &b);
    CHECK_MSG(b.status == RAP_OK, "%s", b.err);
    CHECK(b.all.rows == 2 * a.all.rows && b.st.rows_rejected == 6);
    rap_batch_free(&b.all);
    /* --bad-rows fail names the file, the row and the field */
    rap_reader_config rc = rap_reader_defaults();
    rc.input = pqf;
    rc.schema = s;
    rc.bad_rows = RAP_BAD_FAIL;
    rap_reader *r = NULL;
    REQUIRE_OK(rap_reader_open(&rc, &r));
    rap_batch bt;
    REQUIRE_OK(rap_batch_create(&bt, rap_reader_shape(&rc), 8192, false));
    rap_status st = RAP_OK;
    while ((st = rap_reader_next(r, &bt)) == RAP_OK && bt.rows > 0)
        ;
    CHECK(st == RAP_ERR_DATA &&
          strstr(rap_last_error(), "pq.parquet:5001: expected label 0 or 1, got 2"));
    rap_batch_free(&bt);
    rap_reader_close(r);
    rap_batch_free(&a.all);
    rap_input_schema_free(s);
}

RAP_TEST(parquet_refusals)
{
    const char *why = no_parquet();
    if (why)
        SKIP("%s", why);
    char *sp = tmp_path("pqr.schema"), *tsv = tmp_path("pqr.tsv"), *pqf = tmp_path("pqr.parquet");
    write_text(sp, k_schema, "wb");
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_load(sp, &s));
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = 2000;
    g.seed = 3;
    g.out = tsv;
    g.schema = s;
    rap_gen_result res;
    REQUIRE_OK(rap_gen_write(&g, &res));
    REQUIRE(to_parquet(sp, tsv, pqf, 500) == 0);
    got_t b;
    /* truncated: the first half of the file */
    char *cut = tmp_path("pqr_cut.parquet");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "head -c $(( $(stat -c %%s '%s') / 2 )) '%s' > '%s'", pqf, pqf, cut);
    REQUIRE(system(cmd) == 0);
    read_input(t, cut, s, 2, 1000, 4000, &b);
    CHECK_MSG(b.status == RAP_ERR_DATA && strstr(b.err, "pqr_cut.parquet: not a readable "
              "Parquet file"), "%d: %s", b.status, b.err);
    /* a missing column: the schema names one the file lacks */
    rap_input_schema *m = NULL;
    char text[1024];
    snprintf(text, sizeof text, "%sextra sparse dec\n", k_schema);
    REQUIRE_OK(rap_input_schema_parse(text, "more.schema", &m));
    read_input(t, pqf, m, 2, 1000, 4000, &b);
    CHECK_MSG(b.status == RAP_ERR_DATA && strstr(b.err, "pqr.parquet: no column \"extra\", "
              "which the schema more.schema names (line 9)"), "%d: %s", b.status, b.err);
    rap_input_schema_free(m);
    /* a column of the wrong type: user (a string) read as dense */
    snprintf(text, sizeof text, "y label\nprice dense\nage dense int32\nuser dense\n"
                                "item sparse hex\nhist sparse dec list |\n"
                                "tags sparse str list ;\n");
    REQUIRE_OK(rap_input_schema_parse(text, "wrong.schema", &m));
    read_input(t, pqf, m, 2, 1000, 4000, &b);
    CHECK_MSG(b.status == RAP_ERR_DATA && strstr(b.err, "pqr.parquet: column \"user\" is string; "
              "the schema wrong.schema (line 4) makes it dense: expected a bool, integer or "
              "float column"), "%d: %s", b.status, b.err);
    rap_input_schema_free(m);
    /* a list column read as a plain one */
    snprintf(text, sizeof text, "y label\nprice dense\nage dense int32\nuser sparse str\n"
                                "item sparse hex\nhist sparse dec\ntags sparse str list ;\n");
    REQUIRE_OK(rap_input_schema_parse(text, "plain.schema", &m));
    read_input(t, pqf, m, 2, 1000, 4000, &b);
    CHECK_MSG(b.status == RAP_ERR_DATA && strstr(b.err, "column \"hist\" is list<"), "%s", b.err);
    rap_input_schema_free(m);
    rap_input_schema_free(s);
}

/* Built without Arrow: a Parquet file is refused saying what to install
 * (the message of this build is checked either way). */
RAP_TEST(parquet_built_or_says_why)
{
    char why[512];
    bool built = rap_pq_built(why, sizeof why);
    if (built)
        CHECK(why[0] == 0);
    else
        CHECK(strstr(why, "pip install pyarrow") && strstr(why, "docs/BUILD.md"));
    char *f = tmp_path("fake.parquet");
    write_text(f, "PAR1 not really", "wb");
    CHECK(rap_pq_is_parquet(f));
    rap_pq *p = NULL;
    rap_status st = rap_pq_open(f, &p);
    CHECK(st != RAP_OK && !p);
    CHECK_MSG(strstr(rap_last_error(), "fake.parquet") &&
              (built ? strstr(rap_last_error(), "not a readable Parquet file") != NULL
                     : strstr(rap_last_error(), "pip install pyarrow") != NULL),
              "%s", rap_last_error());
}
