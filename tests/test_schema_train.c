/* test_schema_train.c -- a custom schema end to end: schema text, CSV-free
 * tab rows with string ids and multi-hot bags, the reader, a plan naming
 * the schema's columns, the CPU executor, the model; one SGD step whose
 * sum pooling over several ids and whose table update are checked against
 * the hand computation. Also the plan's refusals over a schema (a missing
 * column, the label, a skipped field) and rap gen --schema read back. */
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "model/cpu/cpu_model.h"
#include "model/model.h"
#include "run/input.h"

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text))
        abort();
    fclose(f);
}

static const char *k_schema = "y      label\n"
                              "price  dense\n"
                              "user   sparse str\n"
                              "note   skip\n"
                              "hist   sparse dec list |\n";

static const char *k_plan = "df[\"price\"] = df[\"price\"].fill_null(0)\n"
                            "df[\"user\"] = df[\"user\"].fill_null(0).sigrid_hash(0, 7)\n"
                            "df[\"hist\"] = df[\"hist\"].clamp(0, 9)\n";

/* The plan names the schema's columns; names the schema lacks, its label
 * and its skipped fields are refused with plan:line:col and the schema. */
RAP_TEST(schema_plan_names_columns)
{
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_parse(k_schema, "s.schema", &s));
    rap_plan *p = NULL;
    REQUIRE_OK(rap_plan_parse_schema(k_plan, "p.plan", s, &p));
    CHECK(p->n_cols == 3);
    CHECK(!strcmp(p->cols[0].name, "price") && !strcmp(p->cols[1].name, "user") &&
          !strcmp(p->cols[2].name, "hist"));
    CHECK(p->schema.n_dense == 1 && p->schema.n_sparse == 2 &&
          p->schema.ids_per_row == RAP_MAX_LIST_DEFAULT);
    /* the raw inputs: a plain sparse field holds one id, a list up to K */
    CHECK(p->nodes[1].op == RAP_OP_INPUT && p->nodes[1].len1);
    CHECK(p->nodes[2].op == RAP_OP_INPUT && !p->nodes[2].len1);
    rap_plan_free(p);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"df[\"a\"] = df[\"price\"].fill_null(0)\ndf[\"b\"] = df[\"histo\"].clamp(0, 9)\n",
         "p.plan:2:11: undefined column \"histo\" (the schema s.schema has no column \"histo\"; "
         "its inputs: price, user, hist)"},
        {"df[\"a\"] = df[\"y\"].fill_null(0)\n",
         "p.plan:1:11: undefined column \"y\" (in the schema s.schema, line 1, it is the label"},
        {"df[\"a\"] = df[\"note\"].fill_null(0)\n",
         "p.plan:1:11: undefined column \"note\" (the schema s.schema skips it, line 4)"},
        {"df[\"a\"] = df[\"int_0\"].fill_null(0)\n",
         "p.plan:1:11: undefined column \"int_0\" (the schema s.schema has no column"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = NULL;
        CHECK(rap_plan_parse_schema(bad[i].text, "p.plan", s, &p) == RAP_ERR_PLAN && !p);
        CHECK_MSG(strstr(rap_last_error(), bad[i].want), "case %zu: %s", i, rap_last_error());
    }
    /* from a file: the same refusal, before any data (there is none) */
    char *pp = tmp_path("missing_col.plan");
    write_text(pp, "df[\"z\"] = df[\"nosuch\"].fill_null(0)\n");
    p = NULL;
    CHECK(rap_plan_load_schema(pp, s, &p) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "missing_col.plan:1:11: undefined column \"nosuch\""));
    rap_input_schema_free(s);
}

/* Reader -> executor -> model, one SGD step, against the hand computation. */
RAP_TEST(schema_train_multi_hot_step)
{
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_parse(k_schema, "s.schema", &s));
    s->max_list = 4;
    char *data = tmp_path("bags.tsv");
    write_text(data, "1\t0.5\talice\tx\t1|2|2\n"
                     "0\t-1\tbob\ty\t3\n"
                     "1\t\tcarol\tz\t\n"
                     "0\t2\talice\tw\t0|4|5|1\n"
                     "1\t1\tdan\tv\tnull\n");
    rap_plan *p = NULL;
    REQUIRE_OK(rap_plan_parse_schema(k_plan, "p.plan", s, &p));
    rap_plan_finish(p);
    const int64_t B = 8;
    rap_reader_config rc = rap_reader_defaults();
    rc.input = data;
    rc.threads = 2;
    rc.schema = s;
    rap_reader *r = NULL;
    REQUIRE_OK(rap_reader_open(&rc, &r));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_reader_shape(&rc), B, false));
    REQUIRE_OK(rap_reader_next(r, &b));
    REQUIRE(b.rows == 5);
    rap_fusion fu;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_LEVELS, &fu));
    rap_prep_config pc = {RAP_CPU, B, 1, NULL};
    rap_prep *ex = NULL;
    REQUIRE_OK(rap_prep_create(p, &fu, &pc, &ex));
    rap_input *in = NULL;
    REQUIRE_OK(rap_input_create(p, RAP_CPU, B, NULL, &in));
    REQUIRE_OK(rap_prep_load(ex, &b));
    REQUIRE_OK(rap_prep_run(ex));
    REQUIRE_OK(rap_prep_sync(ex));
    rap_model_batch mb;
    REQUIRE_OK(rap_input_make(in, ex, &mb));
    int nd = 0, nt = 0;
    int64_t tr[RAP_MAX_TABLES];
    REQUIRE_OK(rap_input_shape(p, &nd, &nt, tr));
    REQUIRE(nd == 1 && nt == 2 && tr[0] == 7 && tr[1] == 10);
    /* the bags as written: table 1 is hist, ids as in the text */
    const int64_t want_off[6] = {0, 3, 4, 4, 8, 8}, want_ids[8] = {1, 2, 2, 3, 0, 4, 5, 1};
    for (int i = 0; i <= 5; i++)
        CHECK_MSG(mb.off[1][i] == want_off[i], "hist off[%d] = %lld", i,
                  (long long)mb.off[1][i]);
    for (int k = 0; k < 8; k++)
        CHECK(mb.ids[1][k] == want_ids[k]);
    /* user: one id a row, alice's twice the same */
    for (int i = 0; i <= 5; i++)
        CHECK(mb.off[0][i] == i);
    CHECK(mb.ids[0][0] == mb.ids[0][3]);
    CHECK(mb.dense[0] == 0.5f && mb.dense[1] == -1.0f && mb.dense[2] == 0.0f);

    rap_model_config c;
    rap_model_config_defaults(&c);
    c.n_dense = nd;
    c.n_tables = nt;
    c.table_rows[0] = tr[0];
    c.table_rows[1] = tr[1];
    c.emb_dim = 2;
    c.n_bot = 2;
    c.bot[0] = 3;
    c.bot[1] = 2;
    c.n_top = 2;
    c.top[0] = 3;
    c.top[1] = 1;
    c.batch = B;
    c.max_bag = 4;
    c.optimizer = RAP_SGD;
    c.lr = 0.5f;
    c.threads = 1;
    c.seed = 3;
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(&c, RAP_CPU, &m));
    int ti = -1; /* the tensor of table 1 */
    for (int i = 0; i < rap_model_n_tensors(m); i++)
        if (!strcmp(rap_model_tensor(m, i)->name, "emb_l.1.weight"))
            ti = i;
    REQUIRE(ti >= 0);
    float W[10][2], W1[10][2];
    REQUIRE_OK(rap_model_get(m, ti, &W[0][0]));
    REQUIRE_OK(rap_model_emb_forward(m, &mb));
    /* sum pooling by hand: pooled (rows, T, D), table 1 at t = 1 */
    const float *pool = rap_cpu_model_pooled(m);
    for (int d = 0; d < 2; d++) {
        float r0 = W[1][d] + W[2][d] + W[2][d];
        float r1 = W[3][d];
        float r3 = W[0][d] + W[4][d] + W[5][d] + W[1][d];
        CHECK_MSG(fabsf(pool[(0 * 2 + 1) * 2 + d] - r0) <= 1e-6f, "row 0 d %d: %g, by hand %g",
                  d, (double)pool[(0 * 2 + 1) * 2 + d], (double)r0);
        CHECK(fabsf(pool[(1 * 2 + 1) * 2 + d] - r1) <= 1e-6f);
        CHECK(pool[(2 * 2 + 1) * 2 + d] == 0.0f); /* an empty bag */
        CHECK_MSG(fabsf(pool[(3 * 2 + 1) * 2 + d] - r3) <= 1e-6f, "row 3 d %d: %g, by hand %g",
                  d, (double)pool[(3 * 2 + 1) * 2 + d], (double)r3);
        CHECK(pool[(4 * 2 + 1) * 2 + d] == 0.0f); /* a null bag */
    }
    REQUIRE_OK(rap_model_mlp_forward(m, &mb));
    REQUIRE_OK(rap_model_mlp_backward(m, &mb));
    const float *g = rap_cpu_model_demb(m);
    float g0[2], g1[2], g3[2];
    for (int d = 0; d < 2; d++) {
        g0[d] = g[(0 * 2 + 1) * 2 + d];
        g1[d] = g[(1 * 2 + 1) * 2 + d];
        g3[d] = g[(3 * 2 + 1) * 2 + d];
    }
    REQUIRE_OK(rap_model_emb_backward(m, &mb));
    REQUIRE_OK(rap_model_get(m, ti, &W1[0][0]));
    /* SGD by hand: each id's row moves by lr times the gradient of every
     * bag holding it, once per time it is held */
    const float lr = 0.5f;
    bool moved = false;
    for (int d = 0; d < 2; d++) {
        float want[10];
        for (int k = 0; k < 10; k++)
            want[k] = W[k][d];
        want[0] = W[0][d] - lr * g3[d];
        want[1] = W[1][d] - lr * (g0[d] + g3[d]);
        want[2] = W[2][d] - lr * (g0[d] + g0[d]);
        want[3] = W[3][d] - lr * g1[d];
        want[4] = W[4][d] - lr * g3[d];
        want[5] = W[5][d] - lr * g3[d];
        for (int k = 0; k < 10; k++) {
            CHECK_MSG(fabsf(W1[k][d] - want[k]) <= 1e-6f * (1 + fabsf(want[k])),
                      "row %d d %d: %.9g, by hand %.9g", k, d, (double)W1[k][d],
                      (double)want[k]);
            moved |= W1[k][d] != W[k][d];
        }
    }
    CHECK(moved); /* the step did something: the comparison can fail */
    rap_model_free(m);
    rap_input_free(in);
    rap_prep_free(ex);
    rap_fusion_free(&fu);
    rap_batch_free(&b);
    rap_reader_close(r);
    rap_plan_free(p);
    rap_input_schema_free(s);
}

/* rap gen --schema: the rows read back without a reject, the same bytes
 * for the same seed, list lengths within max_list with about the mean
 * asked for, a header when asked, CSV quoting where fields need it. */
RAP_TEST(schema_gen_reads_back)
{
    rap_input_schema *s = NULL;
    REQUIRE_OK(rap_input_schema_parse("y label\nf dense\ni dense int32\nu sparse str\n"
                                      "h sparse hex\nh3 sparse hex32\nd sparse dec\n"
                                      "l sparse dec list |\nt sparse str list ,\nz skip\n",
                                      "g.schema", &s));
    s->max_list = 6;
    for (int csv = 0; csv < 2; csv++) {
        s->delimiter = csv ? ',' : '\t';
        s->header = csv;
        char *a = tmp_path(csv ? "g1.csv" : "g1.tsv"), *b2 = tmp_path(csv ? "g2.csv" : "g2.tsv");
        rap_gen_config g;
        memset(&g, 0, sizeof g);
        g.rows = 20000;
        g.seed = 5;
        g.out = a;
        g.schema = s;
        g.list_mean = 2.0;
        rap_gen_result res;
        REQUIRE_OK(rap_gen_write(&g, &res));
        CHECK(res.rows == 20000 && res.positives > 3000 && res.positives < 7000);
        CHECK_MSG(res.teacher_auc > 0.6 && res.teacher_auc < 0.95, "teacher AUC %g",
                  res.teacher_auc);
        g.out = b2;
        rap_gen_result res2;
        REQUIRE_OK(rap_gen_write(&g, &res2));
        FILE *fa = fopen(a, "rb"), *fb = fopen(b2, "rb");
        REQUIRE(fa && fb);
        int ca, cb, same = 1;
        do {
            ca = fgetc(fa);
            cb = fgetc(fb);
            same &= ca == cb;
        } while (ca != EOF && cb != EOF);
        fclose(fa);
        fclose(fb);
        CHECK(same);
        rap_reader_config rc = rap_reader_defaults();
        rc.input = a;
        rc.threads = 2;
        rc.schema = s;
        rc.bad_rows = RAP_BAD_FAIL;
        rap_reader *r = NULL;
        REQUIRE_OK(rap_reader_open(&rc, &r));
        rap_batch bt;
        REQUIRE_OK(rap_batch_create(&bt, rap_reader_shape(&rc), 4096, false));
        int64_t rows = 0, ids = 0, bags = 0, nulls = 0;
        const int j = 4; /* l: the 5th sparse column */
        for (;;) {
            rap_status st = rap_reader_next(r, &bt);
            CHECK_MSG(st == RAP_OK, "%s", rap_last_error());
            if (st != RAP_OK || bt.rows == 0)
                break;
            const int64_t *off = bt.sparse_off + j * (bt.cap + 1);
            for (int64_t i = 0; i < bt.rows; i++) {
                int64_t n = off[i + 1] - off[i];
                CHECK(n >= 0 && n <= 6);
                if (bt.sparse_valid[j * bt.cap + i]) {
                    ids += n;
                    bags++;
                } else {
                    nulls++;
                }
            }
            rows += bt.rows;
        }
        CHECK(rows == 20000);
        double mean = (double)ids / (double)(bags ? bags : 1);
        /* geometric mean 2 capped at 6: 2 (1 - (2/3)^6) = 1.82 */
        CHECK_MSG(mean > 1.7 && mean < 1.95, "mean list length %.3f", mean);
        CHECK_MSG(nulls > 700 && nulls < 1300, "%lld null lists", (long long)nulls);
        rap_batch_free(&bt);
        rap_reader_close(r);
    }
    rap_input_schema_free(s);
}

/* The command line: rap gen --schema (CSV with a header), rap prep over it
 * with the same options, a plan naming a missing column refused (exit 1,
 * plan:line:col and the schema) before any data is read, a header that
 * differs refused naming it, the default plan refused over another schema,
 * a bad schema file refused at the option (exit 2), and rap train end to
 * end over a multi-hot schema. */
RAP_TEST(schema_cli_gen_prep_train)
{
    char *sp = tmp_path("cli.schema"), *pp = tmp_path("cli.plan"), *bad = tmp_path("bad.plan");
    char *csv = tmp_path("cli.csv"), *outp = tmp_path("cli_out.tsv");
    write_text(sp, k_schema);
    write_text(pp, k_plan);
    write_text(bad, "df[\"price\"] = df[\"price\"].fill_null(0)\n"
                    "df[\"h\"] = df[\"histo\"].clamp(0, 9)\n");
    static char out[1 << 16];
    char args[4096];
    snprintf(args, sizeof args, "gen --schema %s --delimiter comma --header --rows 3000 "
             "--max-list 6 --list-mean 2 --out %s --quiet", sp, csv);
    int grc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(grc == 0, "%s", out);
    REQUIRE(grc == 0);
    FILE *f = fopen(csv, "rb");
    REQUIRE(f);
    char first[256] = "";
    CHECK(fgets(first, sizeof first, f) && !strcmp(first, "y,price,user,note,hist\n"));
    fclose(f);
    snprintf(args, sizeof args, "prep --schema %s --delimiter comma --header --max-list 6 "
             "--plan %s --input %s --output %s --device cpu", sp, pp, csv, outp); /* the summary */
    int rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "rows read 3000 = used 3000 + rejected 0"), "%d: %s", rc,
              out);
    f = fopen(outp, "rb");
    REQUIRE(f);
    CHECK(fgets(first, sizeof first, f) && !strcmp(first, "label\tprice\tuser\thist\n"));
    fclose(f);
    /* a plan naming a column the schema lacks: refused before reading (no
     * row read, no output written) */
    char *outq = tmp_path("cli_bad_out.tsv");
    snprintf(args, sizeof args, "prep --schema %s --delimiter comma --header --plan %s "
             "--input %s --output %s --device cpu", sp, bad, csv, outq);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "bad.plan:2:11: undefined column \"histo\" (the schema ") &&
              strstr(out, "cli.schema has no column \"histo\"") && !strstr(out, "rows read") &&
              access(outq, F_OK) != 0,
              "%d: %s", rc, out);
    /* the header checked: without --header the header line is a reject;
     * with another schema's names it is an error naming the difference */
    snprintf(args, sizeof args, "prep --schema %s --delimiter comma --max-list 6 --plan %s "
             "--input %s --device cpu --quiet --bad-rows fail", sp, pp, csv);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "cli.csv:1: expected label 0 or 1, got \"y\""), "%d: %s",
              rc, out);
    char *sp2 = tmp_path("cli2.schema");
    write_text(sp2, "y label\nprice dense\nuser sparse str\nnote skip\n"
                    "history sparse dec list |\n");
    snprintf(args, sizeof args, "prep --schema %s --delimiter comma --header --input %s "
             "--device cpu --quiet --plan %s", sp2, csv, pp);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "undefined column \"hist\""), "%d: %s", rc, out);
    write_text(pp, "df[\"price\"] = df[\"price\"].fill_null(0)\n");
    snprintf(args, sizeof args, "prep --schema %s --delimiter comma --header --input %s "
             "--device cpu --quiet --plan %s", sp2, csv, pp);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "cli.csv:1: header column 5 is \"hist\", the schema ") &&
              strstr(out, "(line 5) says \"history\""), "%d: %s", rc, out);
    write_text(pp, k_plan);
    /* the default plan reads Criteo's columns */
    snprintf(args, sizeof args, "prep --schema %s --input %s --device cpu --quiet", sp, csv);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 1 && strstr(out, "the built-in default plan reads Criteo's columns"), "%d: %s",
              rc, out);
    /* a broken schema file: the option's error, exit 2 */
    char *bs = tmp_path("broken.schema");
    write_text(bs, "y label\nx dense hex\n");
    snprintf(args, sizeof args, "prep --schema %s --device cpu --quiet", bs);
    rc = rap_test_run_rap(args, out, sizeof out);
    CHECK_MSG(rc == 2 && strstr(out, "broken.schema:2:9: expected a dense encoding"), "%d: %s",
              rc, out);
    /* rap train end to end over the schema (generated rows: rap gen --schema),
     * ids hashed into tables of 4096 rows */
    write_text(pp, "df[\"price\"] = df[\"price\"].fill_null(0)\n"
                   "df[\"user\"] = df[\"user\"].fill_null(0).sigrid_hash(0, 4096)\n"
                   "df[\"hist\"] = df[\"hist\"].sigrid_hash(1, 4096)\n");
    snprintf(args, sizeof args, "train --schema %s --plan %s --device cpu --gen-rows 40000 "
             "--gen-eval-rows 5000 --max-list 6 --batch 512 --threads 2", sp, pp);
    rc = rap_test_run_rap(args, out, sizeof out);
    const char *auc = strstr(out, "rap train: AUC ");
    CHECK_MSG(rc == 0 && auc, "%d: %s", rc, out);
    const char *teach = strstr(out, "teacher AUC ");
    CHECK(teach);
    if (auc && teach) /* it learns: within 0.06 of the best possible */
        CHECK_MSG(atof(auc + 15) > atof(teach + 12) - 0.06, "%s (%.24s)", auc, teach);
}
