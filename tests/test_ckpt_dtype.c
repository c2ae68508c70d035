/* test_ckpt_dtype.c -- checkpoints of 16-bit tables and row-wise Adagrad:
 * the tables in their own type and the row-wise state one value a row,
 * train N + save + load + train M == train N + M bit for bit, the update
 * counter carried, conversion between the table types and from Adagrad's
 * state, sharded files and gather, and `rap export`'s file read by an
 * independent safetensors reader written here (docs/CHECKPOINT.md). */
#include "test.h"

#include "core/core.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "model/half.h"
#include "model/model.h"
#include "run/checkpoint.h"

#include <stdlib.h>
#include <unistd.h>

/* ------------------------------------------------------------ models */

/* 4 dense, tables of 10, 20, 5 rows, dim 4; the given storage and optimizer. */
static void cfg_of(rap_emb_dtype dt, rap_optimizer opt, uint64_t seed, rap_model_config *c)
{
    rap_model_config_defaults(c);
    c->n_dense = 4;
    c->n_tables = 3;
    c->table_rows[0] = 10;
    c->table_rows[1] = 20;
    c->table_rows[2] = 5;
    c->emb_dim = 4;
    c->n_bot = 2;
    c->bot[0] = 8;
    c->bot[1] = 4;
    c->n_top = 2;
    c->top[0] = 8;
    c->top[1] = 1;
    c->batch = 16;
    c->optimizer = opt;
    c->emb_dtype = dt;
    c->lr = 0.05f;
    c->seed = seed;
    c->threads = 1;
}

static rap_status model_of(rap_emb_dtype dt, rap_optimizer opt, uint64_t seed, rap_model **m)
{
    rap_model_config c;
    cfg_of(dt, opt, seed, &c);
    return rap_model_create(&c, RAP_CPU, m);
}

/* steps training steps on a fixed batch (every table row touched). */
static rap_status train_some(rap_model *m, int steps)
{
    enum { B = 16 };
    float dense[B * 4], label[B];
    int64_t off[3][B + 1], ids[3][B];
    static const int rows[3] = {10, 20, 5};
    for (int r = 0; r < B; r++) {
        for (int j = 0; j < 4; j++)
            dense[r * 4 + j] = (float)((r * 7 + j * 3) % 11) / 11.0f;
        label[r] = (float)(r % 3 == 0);
        for (int t = 0; t < 3; t++) {
            off[t][r] = r;
            ids[t][r] = (r * (t + 3)) % rows[t];
        }
    }
    rap_model_batch b;
    memset(&b, 0, sizeof b);
    b.rows = B;
    b.dense = dense;
    b.label = label;
    for (int t = 0; t < 3; t++) {
        off[t][B] = B;
        b.off[t] = off[t];
        b.ids[t] = ids[t];
    }
    for (int s = 0; s < steps; s++)
        RAP_TRY(rap_model_train_step(m, &b));
    return RAP_OK;
}

/* Bytes of tensor i of m in its storage type. */
static size_t tensor_bytes(const rap_model *m, int i)
{
    const rap_tensor_info *ti = rap_model_tensor(m, i);
    return (size_t)(ti->rows * ti->cols) * rap_emb_dtype_size(rap_model_tensor_dtype(m, i));
}

/* Every tensor's bits (its storage type), with state its optimizer state,
 * and the update counter the same in a and b. */
static bool same_bits(const rap_model *a, const rap_model *b, bool state)
{
    int n = rap_model_n_tensors(a);
    bool same = n == rap_model_n_tensors(b);
    for (int i = 0; same && i < n; i++) {
        const rap_tensor_info *ti = rap_model_tensor(a, i);
        size_t bytes = tensor_bytes(a, i);
        void *x = malloc(bytes), *y = malloc(bytes);
        rap_emb_dtype dt = rap_model_tensor_dtype(a, i);
        same = x && y && rap_model_tensor_dtype(b, i) == dt &&
               rap_model_get_rows(a, i, 0, ti->rows, dt, x) == RAP_OK &&
               rap_model_get_rows(b, i, 0, ti->rows, dt, y) == RAP_OK && !memcmp(x, y, bytes);
        if (same && state) {
            int64_t sr, sc;
            same = rap_model_state_shape(a, i, &sr, &sc) == RAP_OK &&
                   (size_t)(sr * sc) * 4 <= bytes * 2 &&
                   rap_model_get_state_rows(a, i, 0, sr, (float *)x) == RAP_OK &&
                   rap_model_get_state_rows(b, i, 0, sr, (float *)y) == RAP_OK &&
                   !memcmp(x, y, (size_t)(sr * sc) * 4);
        }
        free(x);
        free(y);
    }
    uint64_t sa = 1, sb = 2;
    return same && rap_model_get_emb_step(a, &sa) == RAP_OK &&
           rap_model_get_emb_step(b, &sb) == RAP_OK && sa == sb;
}

static void tmp_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
}

/* The file's header text (NUL-terminated, caller frees) and its length. */
static char *read_header(const char *path, uint64_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char l8[8];
    if (!f || fread(l8, 1, 8, f) != 8) {
        if (f)
            fclose(f);
        return NULL;
    }
    *len = 0;
    for (int k = 0; k < 8; k++)
        *len |= (uint64_t)l8[k] << (8 * k);
    char *h = *len < (1u << 24) ? calloc(1, *len + 1) : NULL;
    if (h && fread(h, 1, *len, f) != *len) {
        free(h);
        h = NULL;
    }
    fclose(f);
    return h;
}

/* ------------------------------------------------------------ round trip, resume */

/* For 16-bit tables with row-wise Adagrad (and fp32 with Adagrad): the
 * file holds the tables as BF16 / F16 and the row-wise state as (rows, 1)
 * F32, the counter in emb_step; N steps, save, load into a fresh model
 * (the same seed: it keys the rounding stream), M more steps == N + M
 * steps, every bit. */
RAP_TEST(ckpt16_resume_bit_exact)
{
    const rap_emb_dtype dts[3] = {RAP_EMB_BF16, RAP_EMB_FP16, RAP_EMB_FP32};
    const rap_optimizer opts[3] = {RAP_ROWWISE_ADAGRAD, RAP_ROWWISE_ADAGRAD, RAP_ADAGRAD};
    const char *names[3] = {"BF16", "F16", "F32"};
    for (int k = 0; k < 3; k++) {
        rap_model *a = NULL, *b = NULL, *whole = NULL;
        REQUIRE_OK(model_of(dts[k], opts[k], 1, &a));
        REQUIRE_OK(model_of(dts[k], opts[k], 1, &whole));
        REQUIRE_OK(model_of(dts[k], opts[k], 1, &b)); /* untrained */
        REQUIRE_OK(train_some(a, 3));
        REQUIRE_OK(train_some(whole, 5));
        char path[512];
        tmp_path(path, sizeof path, "rt16.safetensors");
        REQUIRE_OK(rap_ckpt_save(path, a, true, NULL, NULL));

        uint64_t len = 0;
        char *hdr = read_header(path, &len);
        REQUIRE(hdr);
        char want[256];
        snprintf(want, sizeof want, "\"emb_l.0.weight\":{\"dtype\":\"%s\",\"shape\":[10,4],",
                 names[k]);
        CHECK_MSG(strstr(hdr, want), "%s not in %s", want, hdr);
        snprintf(want, sizeof want, "\"optimizer.emb_l.1.weight.sum\":{\"dtype\":\"F32\","
                 "\"shape\":[20,%d],", k < 2 ? 1 : 4);
        CHECK_MSG(strstr(hdr, want), "%s not in %s", want, hdr);
        CHECK(strstr(hdr, "\"emb_step\":\"3\""));
        free(hdr);

        rap_ckpt *c = NULL;
        REQUIRE_OK(rap_ckpt_open(path, &c));
        CHECK(!same_bits(a, b, true));
        REQUIRE_OK(rap_ckpt_load_model(c, b, true));
        rap_ckpt_close(c);
        CHECK(same_bits(a, b, true));
        REQUIRE_OK(train_some(b, 2));
        CHECK_MSG(same_bits(whole, b, true), "%s: 3 + save + load + 2 steps != 5 steps",
                  names[k]);
        rap_model_free(a);
        rap_model_free(b);
        rap_model_free(whole);
    }
}

/* Without the counter the rounding stream would restart: a resumed bf16
 * model that did not get it differs from the uninterrupted one (so the
 * test above can fail). */
RAP_TEST(ckpt16_counter_matters)
{
    rap_model *a = NULL, *whole = NULL;
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 1, &a));
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 1, &whole));
    REQUIRE_OK(train_some(a, 3));
    REQUIRE_OK(train_some(whole, 5));
    REQUIRE_OK(rap_model_set_emb_step(a, 0)); /* as a load without emb_step would leave it */
    REQUIRE_OK(train_some(a, 2));
    REQUIRE_OK(rap_model_set_emb_step(a, 5));
    CHECK(!same_bits(whole, a, false));
    rap_model_free(a);
    rap_model_free(whole);
}

/* ------------------------------------------------------------ conversion */

/* Element e of the storage bits x of type dt, as a float (exact). */
static float value_of(const void *x, rap_emb_dtype dt, int64_t e)
{
    if (dt == RAP_EMB_FP32)
        return ((const float *)x)[e];
    uint16_t h = ((const uint16_t *)x)[e];
    return dt == RAP_EMB_BF16 ? rap_bf16_to_f32(h) : rap_fp16_to_f32(h);
}

/* A float's bits in type dt, rounded to nearest even, into element e of y. */
static void store_rn(void *y, rap_emb_dtype dt, int64_t e, float v)
{
    if (dt == RAP_EMB_FP32)
        ((float *)y)[e] = v;
    else
        ((uint16_t *)y)[e] = dt == RAP_EMB_BF16 ? rap_f32_to_bf16_rn(v) : rap_f32_to_fp16_rn(v);
}

/* A checkpoint of tables of one type loads into a model of another: 16 ->
 * 32 widened exactly, 32 -> 16 rounded to nearest even, 16 -> the other
 * 16 through fp32 to nearest; the MLPs and the state as they are. */
RAP_TEST(ckpt16_converts_table_types)
{
    const rap_emb_dtype all[3] = {RAP_EMB_FP32, RAP_EMB_BF16, RAP_EMB_FP16};
    for (int f = 0; f < 3; f++) {
        rap_model *src = NULL;
        REQUIRE_OK(model_of(all[f], RAP_ROWWISE_ADAGRAD, 1, &src));
        REQUIRE_OK(train_some(src, 3));
        char path[512];
        tmp_path(path, sizeof path, "conv.safetensors");
        REQUIRE_OK(rap_ckpt_save(path, src, true, NULL, NULL));
        for (int d = 0; d < 3; d++) {
            rap_model *dst = NULL;
            REQUIRE_OK(model_of(all[d], RAP_ROWWISE_ADAGRAD, 7, &dst));
            rap_ckpt *c = NULL;
            REQUIRE_OK(rap_ckpt_open(path, &c));
            CHECK_OK(rap_ckpt_load_model(c, dst, true));
            rap_ckpt_close(c);
            int bad = 0;
            for (int i = 0; i < rap_model_n_tensors(src); i++) {
                const rap_tensor_info *ti = rap_model_tensor(src, i);
                int64_t e = ti->rows * ti->cols;
                void *x = malloc(tensor_bytes(src, i)), *y = malloc(tensor_bytes(dst, i)),
                     *w = malloc(tensor_bytes(dst, i));
                REQUIRE(x && y && w);
                rap_emb_dtype sd = rap_model_tensor_dtype(src, i);
                rap_emb_dtype dd = rap_model_tensor_dtype(dst, i);
                REQUIRE_OK(rap_model_get_rows(src, i, 0, ti->rows, sd, x));
                REQUIRE_OK(rap_model_get_rows(dst, i, 0, ti->rows, dd, y));
                for (int64_t j = 0; j < e; j++)
                    store_rn(w, dd, j, value_of(x, sd, j));
                bad += memcmp(w, y, tensor_bytes(dst, i)) != 0;
                /* exact where nothing is lost */
                if (sd != RAP_EMB_FP32 && (dd == RAP_EMB_FP32 || dd == sd))
                    for (int64_t j = 0; j < e; j++)
                        bad += value_of(x, sd, j) != value_of(y, dd, j);
                free(x);
                free(y);
                free(w);
            }
            CHECK_MSG(bad == 0, "%s -> %s: %d tensors or values differ", rap_emb_dtype_name(all[f]),
                      rap_emb_dtype_name(all[d]), bad);
            rap_model_free(dst);
        }
        rap_model_free(src);
    }
}

/* fp32 values beyond fp16's range are refused, not loaded as inf. */
RAP_TEST(ckpt16_refuses_out_of_range)
{
    rap_model *src = NULL, *dst = NULL;
    REQUIRE_OK(model_of(RAP_EMB_FP32, RAP_SGD, 1, &src));
    REQUIRE_OK(model_of(RAP_EMB_FP16, RAP_SGD, 1, &dst));
    float row[4] = {1.0f, 70000.0f, 0.0f, -2.0f};
    REQUIRE_OK(rap_model_set_rows(src, 1, 3, 1, RAP_EMB_FP32, row));
    char path[512];
    tmp_path(path, sizeof path, "range.safetensors");
    REQUIRE_OK(rap_ckpt_save(path, src, false, NULL, NULL));
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(path, &c));
    CHECK(rap_ckpt_load_model(c, dst, false) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "emb_l.1.weight") && strstr(rap_last_error(), "F16") &&
                  strstr(rap_last_error(), "range"),
              "%s", rap_last_error());
    rap_ckpt_close(c);
    rap_model_free(src);
    rap_model_free(dst);
}

/* Adagrad's per-element state resumes as row-wise Adagrad's: each row
 * starts as the mean of its sums, the MLPs' state as it is. Row-wise
 * state into Adagrad is refused, saying why. */
RAP_TEST(ckpt16_state_conversion)
{
    rap_model *ada = NULL, *rw = NULL, *back = NULL;
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ADAGRAD, 1, &ada));
    REQUIRE_OK(train_some(ada, 3));
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 7, &rw));
    char path[512], path2[512];
    tmp_path(path, sizeof path, "ada.safetensors");
    tmp_path(path2, sizeof path2, "rw.safetensors");
    REQUIRE_OK(rap_ckpt_save(path, ada, true, NULL, NULL));
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(path, &c));
    REQUIRE_OK(rap_ckpt_load_model(c, rw, true));
    rap_ckpt_close(c);
    CHECK(same_bits(ada, rw, false)); /* the weights as they were */
    int bad = 0, nonzero = 0;
    for (int i = 0; i < rap_model_n_tensors(ada); i++) {
        const rap_tensor_info *ti = rap_model_tensor(ada, i);
        float *s = malloc(sizeof(float) * (size_t)(ti->rows * ti->cols));
        float *r = malloc(sizeof(float) * (size_t)(ti->rows * ti->cols));
        REQUIRE(s && r);
        REQUIRE_OK(rap_model_get_state(ada, i, s));
        REQUIRE_OK(rap_model_get_state(rw, i, r));
        int table;
        rap_model_tensor_origin(ada, i, &table, NULL);
        if (table < 0) {
            bad += memcmp(s, r, sizeof(float) * (size_t)(ti->rows * ti->cols)) != 0;
        } else {
            for (int64_t row = 0; row < ti->rows; row++) {
                double sum = 0;
                for (int64_t j = 0; j < ti->cols; j++)
                    sum += s[row * ti->cols + j];
                bad += r[row] != (float)(sum / (double)ti->cols);
                nonzero += r[row] != 0;
            }
        }
        free(s);
        free(r);
    }
    CHECK_MSG(bad == 0, "%d state rows or tensors differ", bad);
    CHECK(nonzero > 10); /* trained rows: the sums are not all 0 */
    /* row-wise state into Adagrad: refused, saying why */
    REQUIRE_OK(rap_ckpt_save(path2, rw, true, NULL, NULL));
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ADAGRAD, 7, &back));
    REQUIRE_OK(rap_ckpt_open(path2, &c));
    CHECK(rap_ckpt_load_model(c, back, true) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "optimizer.emb_l.0.weight.sum") &&
                  strstr(rap_last_error(), "cannot be recovered"),
              "%s", rap_last_error());
    CHECK_OK(rap_ckpt_load_model(c, back, false)); /* the weights alone load */
    rap_ckpt_close(c);
    rap_model_free(ada);
    rap_model_free(rw);
    rap_model_free(back);
}

/* ------------------------------------------------------------ sharded */

/* A recognisable state value of global row r of table t. */
static float state_value(int t, int64_t r) { return 0.25f * (float)(t + 1) + 0.001f * (float)r; }

/* Sets every table row's row-wise state of m (whole or sharded) to
 * state_value and the counter to step. */
static rap_status mark(rap_model *m, uint64_t step)
{
    for (int i = 0; i < rap_model_n_tensors(m); i++) {
        int t;
        int64_t row0;
        rap_model_tensor_origin(m, i, &t, &row0);
        if (t < 0)
            continue;
        const rap_tensor_info *ti = rap_model_tensor(m, i);
        for (int64_t r = 0; r < ti->rows; r++) {
            float v = state_value(t, row0 + r);
            RAP_TRY(rap_model_set_state_rows(m, i, r, 1, &v));
        }
    }
    return rap_model_set_emb_step(m, step);
}

/* Two CPU ranks of bf16 tables with row-wise state save their shard
 * files and the manifest; gathered it is the whole model's file, the
 * counter included; the manifest loads into a whole model and into three
 * ranks (re-sharding) with every bit; shard files that disagree on the
 * counter are refused. */
RAP_TEST(ckpt16_sharded_gather_and_reshard)
{
    rap_model_config g;
    cfg_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 1, &g);
    rap_shard_map m2, m3;
    REQUIRE_OK(rap_shard_plan(g.table_rows, g.n_tables, g.emb_dim, 2, 0, NULL, &m2));
    REQUIRE_OK(rap_shard_plan(g.table_rows, g.n_tables, g.emb_dim, 3, 0, NULL, &m3));
    char path[512], gathered[512], plain[512];
    tmp_path(path, sizeof path, "sh16.safetensors");
    tmp_path(gathered, sizeof gathered, "sh16_gathered.safetensors");
    tmp_path(plain, sizeof plain, "sh16_plain.safetensors");
    rap_model *whole = NULL, *back = NULL, *r2[2] = {NULL, NULL}, *r3[3] = {NULL, NULL, NULL};
    REQUIRE_OK(rap_model_create(&g, RAP_CPU, &whole));
    REQUIRE_OK(mark(whole, 7));
    REQUIRE_OK(rap_ckpt_save(plain, whole, true, NULL, NULL));
    char *tables[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        rap_model_shard sh;
        rap_model_config mc;
        REQUIRE_OK(rap_hybrid_model_config(&g, &m2, r, g.batch, &sh, &mc));
        REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &r2[r]));
        REQUIRE_OK(mark(r2[r], 7));
        REQUIRE_OK(rap_ckpt_save_shard(path, r, 2, "t16", r2[r], true, NULL));
        tables[r] = rap_ckpt_table_list(r2[r]);
        REQUIRE(tables[r]);
    }
    REQUIRE_OK(rap_ckpt_save_manifest(path, 2, "t16", (const char *const *)tables, NULL, NULL));
    CHECK_OK(rap_ckpt_gather(path, gathered, true));
    int n = 0;
    CHECK(rap_test_same_checkpoints(plain, gathered, &n));
    CHECK(n == 2 * rap_model_n_tensors(whole));
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(gathered, &c));
    CHECK(rap_meta_get(&c->meta, "emb_step") && !strcmp(rap_meta_get(&c->meta, "emb_step"), "7"));
    rap_ckpt_close(c);
    /* the manifest into a whole model and into three ranks */
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 9, &back));
    REQUIRE_OK(rap_ckpt_open(path, &c));
    CHECK_OK(rap_ckpt_load_model(c, back, true));
    CHECK(same_bits(whole, back, true));
    for (int r = 0; r < 3; r++) {
        rap_model_shard sh;
        rap_model_config mc;
        REQUIRE_OK(rap_hybrid_model_config(&g, &m3, r, g.batch, &sh, &mc));
        mc.seed = 9; /* other initial weights */
        REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &r3[r]));
        CHECK_OK(rap_ckpt_load_model(c, r3[r], true));
        uint64_t st = 0;
        CHECK(rap_model_get_emb_step(r3[r], &st) == RAP_OK && st == 7);
        /* every local row as the whole model has it */
        for (int i = 0; i < rap_model_n_tensors(r3[r]); i++) {
            int tb;
            int64_t row0;
            rap_model_tensor_origin(r3[r], i, &tb, &row0);
            if (tb < 0)
                continue;
            const rap_tensor_info *ti = rap_model_tensor(r3[r], i);
            uint16_t a[4], b[4];
            float sa, sb;
            for (int64_t row = 0; row < ti->rows; row++) {
                CHECK_OK(rap_model_get_rows(r3[r], i, row, 1, RAP_EMB_BF16, a));
                CHECK_OK(rap_model_get_rows(whole, tb, row0 + row, 1, RAP_EMB_BF16, b));
                CHECK_OK(rap_model_get_state_rows(r3[r], i, row, 1, &sa));
                CHECK_OK(rap_model_get_state_rows(whole, tb, row0 + row, 1, &sb));
                CHECK(!memcmp(a, b, sizeof a) && sa == sb);
            }
        }
    }
    rap_ckpt_close(c);
    /* rank 1's file from another save's counter: refused, naming it */
    REQUIRE_OK(rap_model_set_emb_step(r2[1], 8));
    REQUIRE_OK(rap_ckpt_save_shard(path, 1, 2, "t16", r2[1], true, NULL));
    REQUIRE_OK(rap_ckpt_open(path, &c));
    CHECK(rap_ckpt_load_model(c, back, true) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "emb_step") && strstr(rap_last_error(), "rank1"), "%s",
              rap_last_error());
    rap_ckpt_close(c);
    for (int r = 0; r < 3; r++) {
        if (r < 2) {
            rap_model_free(r2[r]);
            rap_free(tables[r]);
        }
        rap_model_free(r3[r]);
    }
    rap_model_free(whole);
    rap_model_free(back);
    rap_shard_map_free(&m2);
    rap_shard_map_free(&m3);
}

/* ------------------------------------------------------------ an independent reader */

/* A JSON reader of just what a safetensors header holds: objects,
 * arrays, strings (escapes kept as written but \" and \\ undone), and
 * non-negative integers. Written here from the format, sharing nothing
 * with src/. */
typedef struct {
    const char *p, *end;
    bool bad;
} jr;

static void jr_ws(jr *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool jr_eat(jr *j, char c)
{
    jr_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

static void jr_str(jr *j, char *out, size_t n)
{
    size_t k = 0;
    if (!jr_eat(j, '"')) {
        j->bad = true;
        return;
    }
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\' && j->p < j->end)
            c = *j->p++;
        if (k + 1 < n)
            out[k++] = c;
    }
    out[k] = 0;
    if (!jr_eat(j, '"'))
        j->bad = true;
}

static uint64_t jr_uint(jr *j)
{
    jr_ws(j);
    uint64_t v = 0;
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        v = v * 10 + (uint64_t)(*j->p++ - '0');
    if (j->p == s)
        j->bad = true;
    return v;
}

typedef struct {
    char name[128], dtype[16];
    int ndim;
    uint64_t shape[4], begin, end;
} pt_tensor;

typedef struct {
    pt_tensor t[64];
    int n;
    char meta_keys[64][64], meta_vals[64][256];
    int n_meta;
} pt_file;

/* An array of at most 4 integers into v; their count. */
static int jr_uints(jr *j, uint64_t *v)
{
    int k = 0;
    if (!jr_eat(j, '['))
        j->bad = true;
    while (!j->bad && !jr_eat(j, ']')) {
        uint64_t x = jr_uint(j);
        if (k < 4)
            v[k] = x;
        k++;
        if (!jr_eat(j, ',') && (jr_ws(j), j->p < j->end && *j->p != ']'))
            j->bad = true;
    }
    return k;
}

/* One tensor's object. */
static void pt_tensor_obj(jr *j, pt_tensor *t)
{
    if (!jr_eat(j, '{'))
        j->bad = true;
    while (!j->bad && !jr_eat(j, '}')) {
        char key[32];
        jr_str(j, key, sizeof key);
        if (!jr_eat(j, ':'))
            j->bad = true;
        if (!strcmp(key, "dtype")) {
            jr_str(j, t->dtype, sizeof t->dtype);
        } else if (!strcmp(key, "shape")) {
            t->ndim = jr_uints(j, t->shape);
        } else if (!strcmp(key, "data_offsets")) {
            uint64_t v[4] = {0};
            if (jr_uints(j, v) != 2)
                j->bad = true;
            t->begin = v[0];
            t->end = v[1];
        } else {
            j->bad = true; /* nothing else in a rap file */
        }
        jr_eat(j, ',');
    }
}

/* The whole header: __metadata__ (strings) and the tensors. */
static bool pt_parse(const char *text, size_t n, pt_file *f)
{
    memset(f, 0, sizeof *f);
    jr j = {text, text + n, false};
    if (!jr_eat(&j, '{'))
        return false;
    while (!j.bad && !jr_eat(&j, '}')) {
        char key[128];
        jr_str(&j, key, sizeof key);
        if (!jr_eat(&j, ':'))
            return false;
        if (!strcmp(key, "__metadata__")) {
            if (!jr_eat(&j, '{'))
                return false;
            while (!j.bad && !jr_eat(&j, '}') && f->n_meta < 64) {
                jr_str(&j, f->meta_keys[f->n_meta], sizeof f->meta_keys[0]);
                if (!jr_eat(&j, ':'))
                    return false;
                jr_str(&j, f->meta_vals[f->n_meta++], sizeof f->meta_vals[0]);
                jr_eat(&j, ',');
            }
        } else if (f->n < 64) {
            snprintf(f->t[f->n].name, sizeof f->t[0].name, "%s", key);
            pt_tensor_obj(&j, &f->t[f->n++]);
        } else {
            return false;
        }
        jr_eat(&j, ',');
    }
    jr_ws(&j);
    return !j.bad && j.p == j.end; /* only the padding spaces after the object */
}

static const char *pt_meta(const pt_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key))
            return f->meta_vals[i];
    return NULL;
}

/* Bytes of one element of the named type, as the safetensors format
 * defines them (0 for one rap never writes). */
static uint64_t pt_size(const char *dtype)
{
    return !strcmp(dtype, "F32") ? 4 : !strcmp(dtype, "BF16") || !strcmp(dtype, "F16") ? 2 : 0;
}

/* rap export of a bf16 model with row-wise Adagrad, read as PyTorch's
 * safetensors reads it: the 8-byte little-endian length, a JSON header
 * padded with spaces to a multiple of 8, every tensor's dtype and shape
 * giving its byte length, offsets contiguous from 0 covering the data
 * exactly, each tensor aligned to its element size; the tables are BF16
 * with the model's bits, the MLPs F32 with its values; no optimizer
 * state, no training position or counter. */
RAP_TEST(ckpt16_export_read_independently)
{
    rap_model *m = NULL;
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 1, &m));
    REQUIRE_OK(train_some(m, 2));
    char path[512], out[512];
    tmp_path(path, sizeof path, "ex16_full.safetensors");
    tmp_path(out, sizeof out, "ex16.safetensors");
    rap_meta meta = {0};
    REQUIRE_OK(rap_meta_set(&meta, "step", "2"));
    REQUIRE_OK(rap_meta_set(&meta, "emb_dtype", "bf16"));
    REQUIRE_OK(rap_ckpt_save(path, m, true, &meta, NULL));
    rap_meta_free(&meta);
    const char *drop[] = {"step", NULL};
    REQUIRE_OK(rap_ckpt_export(path, out, drop));

    FILE *fp = fopen(out, "rb");
    REQUIRE(fp);
    REQUIRE(fseek(fp, 0, SEEK_END) == 0);
    long size = ftell(fp);
    REQUIRE(size > 8 && fseek(fp, 0, SEEK_SET) == 0);
    unsigned char *all = malloc((size_t)size);
    REQUIRE(all && fread(all, 1, (size_t)size, fp) == (size_t)size);
    fclose(fp);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++)
        n |= (uint64_t)all[k] << (8 * k);
    REQUIRE(n > 2 && 8 + n <= (uint64_t)size);
    CHECK((8 + n) % 8 == 0);
    CHECK(all[8] == '{' && all[8 + n - 1] != 0);
    static pt_file f;
    REQUIRE(pt_parse((const char *)all + 8, (size_t)n, &f));
    const unsigned char *data = all + 8 + n;
    const uint64_t data_len = (uint64_t)size - 8 - n;
    /* layout: sorted by begin, contiguous from 0, covering the data */
    CHECK(f.n == rap_model_n_tensors(m));
    uint64_t at = 0;
    for (int done = 0; done < f.n; done++) {
        int next = -1;
        for (int i = 0; i < f.n; i++)
            if (f.t[i].begin == at)
                next = i;
        CHECK_MSG(next >= 0, "no tensor starts at byte %llu", (unsigned long long)at);
        REQUIRE(next >= 0);
        pt_tensor *pt = &f.t[next];
        uint64_t es = pt_size(pt->dtype), elems = 1;
        CHECK_MSG(es > 0, "%s: dtype %s", pt->name, pt->dtype);
        for (int d = 0; d < pt->ndim; d++)
            elems *= pt->shape[d];
        CHECK_MSG(pt->end - pt->begin == es * elems, "%s: %llu bytes for %llu elements of %s",
                  pt->name, (unsigned long long)(pt->end - pt->begin), (unsigned long long)elems,
                  pt->dtype);
        CHECK(es && pt->begin % es == 0); /* aligned to its element */
        at = pt->end;
    }
    CHECK(at == data_len);
    /* the values: each tensor against the model */
    for (int i = 0; i < rap_model_n_tensors(m); i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i);
        pt_tensor *pt = NULL;
        for (int k = 0; k < f.n; k++)
            if (!strcmp(f.t[k].name, ti->name))
                pt = &f.t[k];
        CHECK_MSG(pt, "%s not in the export", ti->name);
        REQUIRE(pt);
        int table;
        rap_model_tensor_origin(m, i, &table, NULL);
        CHECK_MSG(!strcmp(pt->dtype, table >= 0 ? "BF16" : "F32"), "%s is %s", ti->name,
                  pt->dtype);
        size_t bytes = tensor_bytes(m, i);
        void *x = malloc(bytes);
        REQUIRE(x);
        REQUIRE_OK(rap_model_get_rows(m, i, 0, ti->rows, rap_model_tensor_dtype(m, i), x));
        CHECK_MSG(pt->end - pt->begin == bytes && !memcmp(data + pt->begin, x, bytes),
                  "%s: other bytes", ti->name);
        free(x);
    }
    for (int k = 0; k < f.n; k++)
        CHECK(strncmp(f.t[k].name, "optimizer.", 10) != 0);
    CHECK(pt_meta(&f, "contents") && !strcmp(pt_meta(&f, "contents"), "weights"));
    CHECK(pt_meta(&f, "emb_dtype") && !strcmp(pt_meta(&f, "emb_dtype"), "bf16"));
    CHECK(!pt_meta(&f, "step") && !pt_meta(&f, "emb_step"));
    CHECK(pt_meta(&f, "data_crc32") && strlen(pt_meta(&f, "data_crc32")) == 8);
    free(all);
    /* and rap reads it back into a bf16 model with the same bits */
    rap_model *b = NULL;
    REQUIRE_OK(model_of(RAP_EMB_BF16, RAP_ROWWISE_ADAGRAD, 5, &b));
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(out, &c));
    CHECK_OK(rap_ckpt_load_model(c, b, false));
    rap_ckpt_close(c);
    REQUIRE_OK(rap_model_set_emb_step(b, 2)); /* the export has no counter */
    CHECK(same_bits(m, b, false));
    rap_model_free(m);
    rap_model_free(b);
}

/* ------------------------------------------------------------ hostile files */

/* Writes a safetensors file of header text h (padded here) and n data bytes. */
static bool write_raw(const char *path, const char *h, size_t n)
{
    size_t len = strlen(h), pad = (8 - (8 + len) % 8) % 8;
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    uint64_t total = len + pad;
    bool ok = true;
    for (int k = 0; k < 8; k++)
        ok &= fputc((int)((total >> (8 * k)) & 0xff), f) != EOF;
    ok &= fwrite(h, 1, len, f) == len;
    for (size_t k = 0; k < pad; k++)
        ok &= fputc(' ', f) != EOF;
    for (size_t k = 0; k < n; k++)
        ok &= fputc(0, f) != EOF;
    return fclose(f) == 0 && ok;
}

/* Types rap does not read, a BF16 tensor given F32's length, a shape
 * whose bytes overflow: refused with messages, never read past the file. */
RAP_TEST(ckpt16_rejects_bad_types)
{
    char path[512];
    tmp_path(path, sizeof path, "hostile16.safetensors");
    rap_ckpt *c = NULL;
    REQUIRE(write_raw(path, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
                      16));
    CHECK(rap_safetensors_open(path, &c) == RAP_ERR_DATA && !c);
    CHECK_MSG(strstr(rap_last_error(), "F64"), "%s", rap_last_error());
    REQUIRE(write_raw(path, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                      16));
    CHECK(rap_safetensors_open(path, &c) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "needs 8") && strstr(rap_last_error(), "BF16"), "%s",
              rap_last_error());
    REQUIRE(write_raw(path, "{\"a\":{\"dtype\":\"F16\",\"shape\":[1099511627776,1099511627776],"
                            "\"data_offsets\":[0,8]}}",
                      8));
    CHECK(rap_safetensors_open(path, &c) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "2^64"), "%s", rap_last_error());
    REQUIRE(write_raw(path, "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                      12));
    CHECK_OK(rap_safetensors_open(path, &c)); /* well formed: both types read */
    if (c)
        CHECK(c->n == 2 && c->t[0].dtype == RAP_ST_F16 && c->t[1].dtype == RAP_ST_F32);
    rap_ckpt_close(c);
}
