/* test_ideal_shard.c -- ideal mode from a rap shard (`rap prep --format
 * bin`, docs/RUNTIME.md): the shard's preprocessed batches, resident, train
 * the same weights as sequential mode on the raw rows; plan mismatches,
 * other modes, a batch size that differs, evaluation by hold-out and
 * corrupt shards are refused with their messages. GPU variant: REQUIRE_GPU. */
#include "test.h"

#include "core/core.h"
#include "data/shard.h"
#include "run/checkpoint.h"
#include "run/runtime.h"
#include "run/train.h"

#include <stdlib.h>
#include <string.h>

static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = (df[\"int_4\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

/* The same columns, cat_1 with another bound. */
static const char *k_plan_other =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = (df[\"int_4\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 250)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

#define SHARD_ROWS 3000 /* 47 batches of 64 (the last 56 rows) */
#define SHARD_B 64

static rap_status plan_of(const char *text, const char *name, rap_plan **out)
{
    return rap_test_plan_text(text, name, out);
}

static rap_status gen(const char *path, int64_t rows, uint64_t seed)
{
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = seed;
    g.out = path;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    return rap_gen_write(&g, &r);
}

/* What `rap prep --format bin --batch B` writes: reader batches of B rows,
 * preprocessed on the CPU, label and every output column. */
static rap_status write_shard(const rap_plan *plan, const char *in, const char *out, int64_t B)
{
    rap_fusion fus;
    memset(&fus, 0, sizeof fus);
    RAP_TRY(rap_fuse_levels(plan, &fus));
    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = RAP_CPU;
    pc.max_rows = B;
    pc.threads = 2;
    rap_prep *prep = NULL;
    rap_reader *rd = NULL;
    rap_batch b;
    memset(&b, 0, sizeof b);
    rap_shard_writer *w = NULL;
    rap_shard_col sc[64];
    rap_host_column cols[64];
    memset(cols, 0, sizeof cols);
    int nc = plan->n_cols;
    for (int c = 0; c < nc; c++) {
        const rap_node *n = &plan->nodes[plan->cols[c].node];
        memset(&sc[c], 0, sizeof sc[c]);
        snprintf(sc[c].name, sizeof sc[c].name, "%s", plan->cols[c].name);
        sc[c].kind = n->kind;
        sc[c].width = n->width;
        sc[c].bounded = n->bounded;
        sc[c].lo = n->lo;
        sc[c].hi = n->hi;
    }
    rap_reader_config rc = rap_reader_defaults();
    rc.input = in;
    rc.threads = 2;
    rap_status st = rap_prep_create(plan, &fus, &pc, &prep);
    if (st == RAP_OK)
        st = rap_batch_create(&b, plan->schema, B, false);
    if (st == RAP_OK)
        st = rap_reader_open(&rc, &rd);
    if (st == RAP_OK)
        st = rap_shard_create(out, sc, nc, &w);
    while (st == RAP_OK) {
        if ((st = rap_reader_next(rd, &b)) != RAP_OK || b.rows == 0)
            break;
        if ((st = rap_prep_load(prep, &b)) != RAP_OK || (st = rap_prep_run(prep)) != RAP_OK)
            break;
        for (int c = 0; st == RAP_OK && c < nc; c++)
            st = rap_prep_fetch(prep, c, &cols[c]);
        if (st == RAP_OK)
            st = rap_shard_write(w, b.label, b.rows, cols);
        for (int c = 0; c < nc; c++)
            rap_host_column_free(&cols[c]);
    }
    if (st == RAP_OK)
        st = rap_shard_close(w);
    else
        rap_shard_abort(w);
    rap_reader_close(rd);
    rap_batch_free(&b);
    rap_prep_free(prep);
    rap_fusion_free(&fus);
    return st;
}

static void small(rap_train_config *c, const rap_plan *plan, const char *data, rap_device dev)
{
    rap_train_defaults(c);
    c->plan = plan;
    c->plan_name = "shard.plan";
    c->data = data;
    c->device = dev;
    c->model.emb_dim = 4;
    c->model.n_bot = 2;
    c->model.bot[0] = 8;
    c->model.bot[1] = 4;
    c->model.n_top = 2;
    c->model.top[0] = 8;
    c->model.top[1] = 1;
    c->model.batch = SHARD_B;
    c->model.optimizer = RAP_ADAGRAD;
    c->model.lr = 0.05f;
    c->model.threads = 2;
    c->model.strict_fp32 = true;
    c->reader.threads = 2;
    c->eval_fraction = 0;
    c->log_interval = 1e9;
}

/* The rows and their shard, made once per test binary run. */
static rap_status fixture(const rap_plan *plan, char *tsv, char *shard, size_t n)
{
    rap_test_path(tsv, n, "ideal_rows.tsv");
    rap_test_path(shard, n, "ideal_rows.shard"); /* no .bin: detected by its magic */
    RAP_TRY(gen(tsv, SHARD_ROWS, 21));
    return write_shard(plan, tsv, shard, SHARD_B);
}

/* N steps (across the end of the first pass, 47 batches) in sequential mode
 * from the TSV and in ideal mode from the shard: the same weights, bit for
 * bit; then one epoch each. */
static void shard_matches_sequential(rap_test_ctx *t, rap_device dev)
{
    rap_plan *plan = NULL;
    REQUIRE_OK(plan_of(k_plan, "shard.plan", &plan));
    char tsv[512], shard[512], a[512], b[512];
    REQUIRE_OK(fixture(plan, tsv, shard, sizeof tsv));
    CHECK(rap_runtime_is_shard(shard));
    CHECK(!rap_runtime_is_shard(tsv));
    const char *sfx = dev == RAP_GPU ? "gpu" : "cpu";
    for (int run = 0; run < 2; run++) {
        char na[64], nb[64];
        snprintf(na, sizeof na, "seq_%s_%d.safetensors", sfx, run);
        snprintf(nb, sizeof nb, "ideal_%s_%d.safetensors", sfx, run);
        rap_test_path(a, sizeof a, na);
        rap_test_path(b, sizeof b, nb);
        rap_train_config c;
        rap_train_result r1, r2;
        small(&c, plan, tsv, dev);
        c.mode = RAP_MODE_SEQUENTIAL;
        if (run == 0)
            c.steps = 60;
        else
            c.epochs = 1;
        c.save = a;
        REQUIRE_OK(rap_train_run(&c, &r1));
        small(&c, plan, shard, dev);
        c.mode = RAP_MODE_IDEAL;
        if (run == 0)
            c.steps = 60;
        else
            c.epochs = 1;
        c.save = b;
        REQUIRE_OK(rap_train_run(&c, &r2));
        CHECK(r2.mode == RAP_MODE_IDEAL);
        CHECK(r1.step == r2.step);
        CHECK(r1.samples == r2.samples);
        CHECK(r2.step == (run == 0 ? 60 : 47));
        CHECK(r2.samples == (run == 0 ? 60 * SHARD_B - 8 : SHARD_ROWS)); /* one short batch */
        CHECK(rap_test_same_checkpoints(a, b, NULL));
    }
    /* and not trivially: fewer steps differ */
    {
        rap_train_config c;
        rap_train_result r;
        small(&c, plan, shard, dev);
        c.mode = RAP_MODE_IDEAL;
        c.steps = 59;
        char d[512];
        rap_test_path(d, sizeof d, "ideal_59.safetensors");
        c.save = d;
        REQUIRE_OK(rap_train_run(&c, &r));
        char na[64];
        snprintf(na, sizeof na, "seq_%s_0.safetensors", sfx);
        rap_test_path(a, sizeof a, na);
        CHECK(!rap_test_same_checkpoints(a, d, NULL));
    }
    rap_plan_free(plan);
}

RAP_TEST(ideal_shard_cpu_matches_sequential) { shard_matches_sequential(t, RAP_CPU); }

RAP_TEST(ideal_shard_gpu_matches_sequential)
{
    REQUIRE_GPU();
    const char *v = getenv("RAP_GPU_TUNE");
    char old[128];
    snprintf(old, sizeof old, "%s", v ? v : "");
    setenv("RAP_GPU_TUNE", "0", 1);
    shard_matches_sequential(t, RAP_GPU);
    if (v)
        setenv("RAP_GPU_TUNE", old, 1);
    else
        unsetenv("RAP_GPU_TUNE");
}

static rap_status train_expect_fail(const rap_train_config *c)
{
    rap_train_result r;
    return rap_train_run(c, &r);
}

RAP_TEST(ideal_shard_refusals)
{
    rap_plan *plan = NULL, *other = NULL;
    REQUIRE_OK(plan_of(k_plan, "shard.plan", &plan));
    REQUIRE_OK(plan_of(k_plan_other, "other.plan", &other));
    char tsv[512], shard[512];
    REQUIRE_OK(fixture(plan, tsv, shard, sizeof tsv));
    rap_train_config c;
    const char *msg;

    /* another plan: names the column and what differs, says which plan */
    small(&c, other, shard, RAP_CPU);
    c.mode = RAP_MODE_IDEAL;
    c.steps = 3;
    CHECK(train_expect_fail(&c) == RAP_ERR_ARG);
    msg = rap_last_error();
    CHECK(strstr(msg, "column cat_1") && strstr(msg, "bound [0, 199]") &&
          strstr(msg, "bound [0, 249]") && strstr(msg, "plan it was written with"));
    if (!strstr(msg, "column cat_1"))
        printf("    message: %s\n", msg);

    /* any other mode */
    rap_mode others[] = {RAP_MODE_SEQUENTIAL, RAP_MODE_CPU};
    for (int i = 0; i < 2; i++) {
        small(&c, plan, shard, RAP_CPU);
        c.mode = others[i];
        c.steps = 3;
        CHECK(train_expect_fail(&c) == RAP_ERR_ARG);
        CHECK(strstr(rap_last_error(), RAP_SHARD_NEEDS_IDEAL) != NULL);
    }

    /* evaluation by hold-out */
    small(&c, plan, shard, RAP_CPU);
    c.mode = RAP_MODE_IDEAL;
    c.steps = 3;
    c.eval_fraction = 0.1;
    CHECK(train_expect_fail(&c) == RAP_ERR_ARG);
    msg = rap_last_error();
    CHECK(strstr(msg, "--eval-data") && strstr(msg, "--eval-fraction 0"));

    /* evaluation from a raw TSV works */
    {
        small(&c, plan, shard, RAP_CPU);
        c.steps = 5; /* auto mode: ideal */
        c.eval_data = tsv;
        c.eval_rows = 500;
        rap_train_result r;
        REQUIRE_OK(rap_train_run(&c, &r));
        CHECK(r.mode == RAP_MODE_IDEAL && r.step == 5 && r.eval.rows == 500);
    }

    /* another batch size: no re-batching */
    small(&c, plan, shard, RAP_CPU);
    c.mode = RAP_MODE_IDEAL;
    c.steps = 3;
    c.model.batch = 32;
    CHECK(train_expect_fail(&c) == RAP_ERR_ARG);
    msg = rap_last_error();
    CHECK(strstr(msg, "batch 0 holds 64 rows") && strstr(msg, "--batch must equal"));

    /* corrupt shards: the shard reader's errors */
    FILE *f = fopen(shard, "rb");
    REQUIRE(f != NULL);
    static char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    REQUIRE(n > 1000 && n < sizeof buf);
    char bad[512];
    rap_test_path(bad, sizeof bad, "ideal_cut.shard");
    f = fopen(bad, "wb");
    REQUIRE(f != NULL);
    fwrite(buf, 1, n / 2, f); /* cut short: no footer */
    fclose(f);
    small(&c, plan, bad, RAP_CPU);
    c.mode = RAP_MODE_IDEAL;
    c.steps = 3;
    CHECK(train_expect_fail(&c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "no footer") != NULL);
    /* the third batch's marker damaged */
    char *p = buf;
    for (int k = 0; k < 3 && p; k++) {
        p = memmem(p + 1, n - (size_t)(p + 1 - buf), "RAPBATCH", 8);
    }
    REQUIRE(p != NULL);
    p[0] = 'X';
    rap_test_path(bad, sizeof bad, "ideal_marker.shard");
    f = fopen(bad, "wb");
    REQUIRE(f != NULL);
    fwrite(buf, 1, n, f);
    fclose(f);
    small(&c, plan, bad, RAP_CPU);
    c.mode = RAP_MODE_IDEAL;
    c.steps = 3;
    CHECK(train_expect_fail(&c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "bad batch marker at batch 2") != NULL);
    if (!strstr(rap_last_error(), "bad batch marker"))
        printf("    message: %s\n", rap_last_error());

    rap_plan_free(plan);
    rap_plan_free(other);
}
