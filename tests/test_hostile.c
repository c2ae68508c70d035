/* test_hostile.c -- files a user could be handed, refused with a message
 * naming the file and what was wrong (never a crash): the checked
 * arithmetic of core/checked.h, and one hostile file per reader of the
 * issue's findings (shapes multiplying past 64 bits, shard footers
 * claiming petabytes, a CSV value past int, a predictor bundle changed
 * after it was written, an XGBoost model whose tree loops). The fuzzing
 * harness (fuzz/, make fuzz-replay) replays many more. */
#include "test.h"

#include "core/checked.h"
#include "core/file.h"
#include "data/shard.h"
#include "plan/capacity.h"
#include "plan/predictor.h"
#include "plan/xgb_check.h"
#include "run/safetensors.h"

#include <stdlib.h>
#include <string.h>

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

RAP_TEST(hostile_checked_arithmetic)
{
    uint64_t u = 7;
    CHECK(rap_mul_u64_ok(1ull << 32, 1ull << 31, &u) && u == 1ull << 63);
    u = 7;
    CHECK(!rap_mul_u64_ok(1ull << 32, 1ull << 32, &u) && u == 7); /* unchanged */
    CHECK(!rap_add_u64_ok(UINT64_MAX, 1, &u));
    size_t z;
    CHECK(rap_mul_size_ok(0, SIZE_MAX, &z) && z == 0);
    CHECK(!rap_add_size_ok(SIZE_MAX, 1, &z));
    int64_t v;
    CHECK(rap_mul_i64_ok(-(1ll << 31), 1ll << 32, &v) && v == INT64_MIN);
    CHECK(!rap_mul_i64_ok(-1, INT64_MIN, &v));
    CHECK(!rap_mul_i64_ok(1ll << 32, -(1ll << 32), &v));
    CHECK(!rap_add_i64_ok(INT64_MAX, 1, &v));
    CHECK(!rap_sub_i64_ok(INT64_MIN, 1, &v));
    CHECK(rap_sub_i64_ok(-1, INT64_MAX, &v) && v == INT64_MIN);
    CHECK(!rap_i64_to_size_ok(-1, &z));
    CHECK(rap_float_to_int64_ok(-9223372036854775808.0, INT64_MIN, INT64_MAX, &v) && v == INT64_MIN);
    CHECK(!rap_float_to_int64_ok(9223372036854775808.0, INT64_MIN, INT64_MAX, &v));
    CHECK(!rap_float_to_int64_ok(NAN, INT64_MIN, INT64_MAX, &v));
    CHECK(!rap_float_to_int64_ok(1.5, 0, 10, &v));
    int i;
    CHECK(!rap_float_to_int_ok(3e9, INT32_MIN, INT32_MAX, &i));
    CHECK(rap_parse_i64_ok("-9223372036854775808", INT64_MIN, INT64_MAX, &v, NULL) && v == INT64_MIN);
    CHECK(!rap_parse_i64_ok("9223372036854775808", INT64_MIN, INT64_MAX, &v, NULL));
    CHECK(!rap_parse_i64_ok("12x", 0, 100, &v, NULL));
    CHECK(!rap_parse_i64_ok(" 12", 0, 100, &v, NULL));
    const char *end;
    CHECK(rap_parse_int_ok("12:3", 0, 100, &i, &end) && i == 12 && *end == ':');
    CHECK(!rap_parse_int_ok("2147483648", 0, INT32_MAX, &i, NULL));
}

/* A safetensors file of one tensor whose shape (header text) is given. */
static void write_st(const char *path, const char *shape, const char *offsets)
{
    char h[512];
    int n = snprintf(h, sizeof h, "{\"__metadata__\":{},\"t\":{\"dtype\":\"F32\",\"shape\":%s,"
                     "\"data_offsets\":%s}}", shape, offsets);
    while (n % 8)
        h[n++] = ' ';
    uint8_t buf[600];
    for (int k = 0; k < 8; k++)
        buf[k] = (uint8_t)((uint64_t)n >> (8 * k));
    memcpy(buf + 8, h, (size_t)n);
    memset(buf + 8 + n, 0, 16);
    write_bytes(path, buf, 8 + (size_t)n + 16);
}

RAP_TEST(hostile_safetensors_shape_overflow)
{
    char path[512];
    rap_test_path(path, sizeof path, "overflow.safetensors");
    rap_ckpt *c = NULL;
    /* 2^40 * 2^40 * 2^24 elements: past 64 bits; their product mod 2^64 is 0 */
    write_st(path, "[1099511627776,1099511627776,16777216]", "[0,0]");
    CHECK(rap_safetensors_open(path, &c) == RAP_ERR_DATA && !c);
    CHECK(strstr(rap_last_error(), path) && strstr(rap_last_error(), "2^64 bytes"));
    /* 2^40 * 2^21 floats: 2^63 bytes, within 64 bits but past the bound */
    write_st(path, "[1099511627776,2097152]", "[0,0]");
    CHECK(rap_safetensors_open(path, &c) == RAP_ERR_DATA && !c);
    CHECK(strstr(rap_last_error(), path) && strstr(rap_last_error(), "2^62 bytes"));
    /* the same file with a shape that fits opens */
    write_st(path, "[2,2]", "[0,16]");
    REQUIRE_OK(rap_safetensors_open(path, &c));
    CHECK(rap_ckpt_tensor_elems(&c->t[0]) == 4);
    rap_ckpt_close(c);
}

/* A shard with no column, no batch and footer (batches, rows). */
static void write_shard(const char *path, int64_t batches, int64_t rows)
{
    uint8_t b[40];
    memcpy(b, "RAPSHARD", 8);
    uint32_t v = RAP_SHARD_VERSION, nc = 0;
    memcpy(b + 8, &v, 4);
    memcpy(b + 12, &nc, 4);
    memcpy(b + 16, "RAPFOOT!", 8);
    memcpy(b + 24, &batches, 8);
    memcpy(b + 32, &rows, 8);
    write_bytes(path, b, sizeof b);
}

RAP_TEST(hostile_shard_footer)
{
    char path[512];
    rap_test_path(path, sizeof path, "hostile.shard");
    rap_shard_reader *r = NULL;
    write_shard(path, (int64_t)1 << 50, 1); /* 2^50 batches in no bytes */
    CHECK(rap_shard_open(path, &r) == RAP_ERR_DATA && !r);
    CHECK(strstr(rap_last_error(), path) && strstr(rap_last_error(), "footer"));
    write_shard(path, 0, -5);
    CHECK(rap_shard_open(path, &r) == RAP_ERR_DATA);
    write_shard(path, 0, 0); /* an empty shard is fine */
    REQUIRE_OK(rap_shard_open(path, &r));
    CHECK(rap_shard_batches(r) == 0);
    rap_shard_close_reader(r);
}

RAP_TEST(hostile_capacity_values)
{
    char path[512];
    rap_test_path(path, sizeof path, "hostile.capacity");
    const char *head = "rap-capacity 1\ngpu NVIDIA H200\n";
    const char *win = "tolerance 0.05\nwindow emb_forward standalone_ms=1 capacity_ms=1\n"
                      "window mlp_forward standalone_ms=1 capacity_ms=1\n"
                      "window mlp_backward standalone_ms=1 capacity_ms=1\n"
                      "window emb_backward standalone_ms=1 capacity_ms=1\n"
                      "window grad_comm standalone_ms=0 capacity_ms=0\n";
    char text[2048];
    rap_capacity c;
    /* a width past int */
    snprintf(text, sizeof text, "%smodel tables=26 emb_dim=128 bot=512-4294967424 top=1 batch=4096 "
             "precision=fp32\n%s", head, win);
    write_text(path, text);
    CHECK(rap_capacity_load(path, &c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), path) && strstr(rap_last_error(), ":3:"));
    snprintf(text, sizeof text, "%smodel tables=26 emb_dim=128 bot=512-128 top=1 batch=4096 "
             "precision=fp32\n%s", head, win);
    write_text(path, text);
    CHECK_OK(rap_capacity_load(path, &c));
}

RAP_TEST(hostile_predictor_csv_past_int)
{
    char csv[512], dir[512];
    rap_test_path(csv, sizeof csv, "hostile_kernels.csv");
    rap_test_path(dir, sizeof dir, "hostile_pred");
    write_text(csv, "gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms\n"
                    "NVIDIA H200,logit,0,1,4096,1,4096,65536,4096,0.01\n"
                    "NVIDIA H200,logit,3000000000,1,4096,1,4096,65536,4096,0.01\n");
    CHECK(rap_predictor_train(csv, dir, NULL, 0, NULL) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), csv) && strstr(rap_last_error(), ":3:") &&
          strstr(rap_last_error(), "variant"));
    write_text(csv, "gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms\n"
                    "NVIDIA H200,logit,0,nan,4096,1,4096,65536,4096,0.01\n");
    CHECK(rap_predictor_train(csv, dir, NULL, 0, NULL) == RAP_ERR_DATA);
}

/* A tree of the shipped model file text (n bytes): its first
 * "left_children":[1,... changed to point at node 0 (a cycle). */
static bool make_cycle(char *text)
{
    char *p = strstr(text, "\"left_children\":[1,");
    if (!p)
        return false;
    p[strlen("\"left_children\":[")] = '0';
    return true;
}

RAP_TEST(hostile_predictor_bundle)
{
    char buf[256];
    const char *ship = rap_test_plan_path("h200/predictor", buf, sizeof buf);
    if (!ship)
        SKIP("plans/ not found from the working directory");
    char dir[512], cmd[1200], out[4096];
    rap_test_path(dir, sizeof dir, "hostile_bundle");
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", dir, ship, dir);
    REQUIRE(rap_test_sh(cmd, out, sizeof out) == 0);
    rap_predictor *p = NULL;
    REQUIRE_OK(rap_predictor_load(dir, &p));
    rap_predictor_free(p);
    /* a model made to loop: XGBoost would spin forever on it */
    char model[600], *text;
    size_t n;
    snprintf(model, sizeof model, "%s/xgb_cast.1.json", dir);
    REQUIRE_OK(rap_file_read(model, 64 << 20, "model", &text, &n));
    REQUIRE(make_cycle(text));
    CHECK(rap_xgb_check(text, n, 6, model) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), model) && strstr(rap_last_error(), "tree 0 node"));
    write_bytes(model, text, n);
    rap_free(text);
    /* the manifest stops it first, naming the file */
    CHECK(rap_predictor_load(dir, &p) == RAP_ERR_DATA && !p);
    CHECK(strstr(rap_last_error(), "xgb_cast.1.json") && strstr(rap_last_error(), "checksum"));
    /* a manifest written over it does not make it loadable */
    CHECK(rap_predictor_write_manifest(dir) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "xgb_cast.1.json"));
    /* no manifest: refused, saying how to write one */
    snprintf(model, sizeof model, "%s/MANIFEST", dir);
    remove(model);
    CHECK(rap_predictor_load(dir, &p) == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "MANIFEST") && strstr(rap_last_error(), "rap predictor manifest"));
}
