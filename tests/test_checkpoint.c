/* test_checkpoint.c -- safetensors checkpoints: round trip, format details,
 * corrupt / truncated / other-shape files refused with messages, atomic
 * writes, export. */
#include "test.h"

#include "core/core.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "model/model.h"
#include "run/checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A tiny model's config: 4 dense, tables of 10, 20, 5 rows, dim emb_dim. */
static void tiny_config(int emb_dim, uint64_t seed, rap_optimizer opt, rap_model_config *out)
{
    rap_model_config c;
    rap_model_config_defaults(&c);
    c.n_dense = 4;
    c.n_tables = 3;
    c.table_rows[0] = 10;
    c.table_rows[1] = 20;
    c.table_rows[2] = 5;
    c.emb_dim = emb_dim;
    c.n_bot = 2;
    c.bot[0] = 8;
    c.bot[1] = emb_dim;
    c.n_top = 2;
    c.top[0] = 8;
    c.top[1] = 1;
    c.batch = 16;
    c.optimizer = opt;
    c.lr = 0.05f;
    c.seed = seed;
    c.threads = 1;
    *out = c;
}

/* That model on the CPU. */
static rap_status tiny_model(int emb_dim, uint64_t seed, rap_optimizer opt, rap_model **m)
{
    rap_model_config c;
    tiny_config(emb_dim, seed, opt, &c);
    return rap_model_create(&c, RAP_CPU, m);
}

/* Trains a few steps on a fixed synthetic batch so that weights and
 * optimizer state are no longer their initial values. */
static rap_status train_some(rap_model *m, int steps)
{
    enum { B = 16 };
    float dense[B * 4], label[B];
    int64_t off[3][B + 1], ids[3][B];
    for (int r = 0; r < B; r++) {
        for (int j = 0; j < 4; j++)
            dense[r * 4 + j] = (float)((r * 7 + j * 3) % 11) / 11.0f;
        label[r] = (float)(r % 3 == 0);
        for (int t = 0; t < 3; t++) {
            off[t][r] = r;
            ids[t][r] = (r * (t + 3)) % (t == 0 ? 10 : t == 1 ? 20 : 5);
        }
    }
    for (int t = 0; t < 3; t++)
        off[t][B] = B;
    rap_model_batch b;
    memset(&b, 0, sizeof b);
    b.rows = B;
    b.dense = dense;
    b.label = label;
    for (int t = 0; t < 3; t++) {
        b.off[t] = off[t];
        b.ids[t] = ids[t];
    }
    for (int s = 0; s < steps; s++)
        RAP_TRY(rap_model_train_step(m, &b));
    return RAP_OK;
}

static int64_t tensor_elems(const rap_tensor_info *ti) { return ti->rows * ti->cols; }

/* True when every tensor (and state, if asked) of a and b is the same bytes. */
static bool same_model(const rap_model *a, const rap_model *b, bool state)
{
    int n = rap_model_n_tensors(a);
    if (n != rap_model_n_tensors(b))
        return false;
    bool same = true;
    for (int i = 0; i < n && same; i++) {
        int64_t e = tensor_elems(rap_model_tensor(a, i));
        float *x = malloc(sizeof(float) * (size_t)e), *y = malloc(sizeof(float) * (size_t)e);
        same = x && y && rap_model_get(a, i, x) == RAP_OK && rap_model_get(b, i, y) == RAP_OK &&
               !memcmp(x, y, sizeof(float) * (size_t)e);
        if (same && state)
            same = rap_model_get_state(a, i, x) == RAP_OK &&
                   rap_model_get_state(b, i, y) == RAP_OK &&
                   !memcmp(x, y, sizeof(float) * (size_t)e);
        free(x);
        free(y);
    }
    return same;
}

static void path_in_tmp(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static bool copy_prefix(const char *from, const char *to, long n)
{
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    bool ok = f && g;
    for (long i = 0; ok && i < n; i++) {
        int c = fgetc(f);
        ok = c != EOF && fputc(c, g) != EOF;
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return ok;
}

static bool poke(const char *path, long at, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return false;
    bool ok = fseek(f, at, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n;
    fclose(f);
    return ok;
}

RAP_TEST(ckpt_round_trip)
{
    rap_model *a = NULL, *b = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_ADAGRAD, &a));
    REQUIRE_OK(train_some(a, 3));
    char path[512];
    path_in_tmp(path, sizeof path, "rt.safetensors");
    rap_meta meta = {0};
    REQUIRE_OK(rap_meta_set(&meta, "step", "%d", 3));
    REQUIRE_OK(rap_meta_set(&meta, "note", "quote \" backslash \\ tab \t end"));
    REQUIRE_OK(rap_ckpt_save(path, a, true, &meta, NULL));
    rap_meta_free(&meta);

    /* the format, byte by byte where the spec is strict */
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    unsigned char len8[8];
    REQUIRE(fread(len8, 1, 8, f) == 8);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++)
        n |= (uint64_t)len8[k] << (8 * k);
    CHECK(n % 8 == 0);
    char *hdr = calloc(1, n + 1);
    REQUIRE(hdr && fread(hdr, 1, n, f) == n);
    fclose(f);
    CHECK(hdr[0] == '{');
    CHECK(strstr(hdr, "\"emb_l.0.weight\":{\"dtype\":\"F32\",\"shape\":[10,4],\"data_offsets\":[0,160]}"));
    CHECK(strstr(hdr, "\"bot_l.0.bias\":{\"dtype\":\"F32\",\"shape\":[8],"));
    CHECK(strstr(hdr, "\"optimizer.emb_l.0.weight.sum\""));
    CHECK(strstr(hdr, "\"format\":\"rap-dlrm\""));
    free(hdr);

    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(path, &c));
    CHECK(c->n == 2 * rap_model_n_tensors(a));
    CHECK(rap_meta_get(&c->meta, "step") && !strcmp(rap_meta_get(&c->meta, "step"), "3"));
    CHECK(rap_meta_get(&c->meta, "note") &&
          !strcmp(rap_meta_get(&c->meta, "note"), "quote \" backslash \\ tab \t end"));
    CHECK((long)(8 + c->header_len + c->data_len) == file_size(path));
    REQUIRE_OK(tiny_model(4, 99, RAP_ADAGRAD, &b)); /* other initial weights */
    CHECK(!same_model(a, b, false));
    REQUIRE_OK(rap_ckpt_load_model(c, b, true));
    CHECK(same_model(a, b, true));
    rap_ckpt_close(c);

    /* training on from both gives the same bytes */
    REQUIRE_OK(train_some(a, 2));
    REQUIRE_OK(train_some(b, 2));
    CHECK(same_model(a, b, true));
    rap_model_free(a);
    rap_model_free(b);
}

RAP_TEST(ckpt_rejects_corrupt_and_truncated)
{
    rap_model *a = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_ADAGRAD, &a));
    char path[512], bad[512];
    path_in_tmp(path, sizeof path, "good.safetensors");
    path_in_tmp(bad, sizeof bad, "bad.safetensors");
    REQUIRE_OK(rap_ckpt_save(path, a, true, NULL, NULL));
    long size = file_size(path);
    REQUIRE(size > 100);
    rap_ckpt *c = NULL;

    /* cut short in the data */
    REQUIRE(copy_prefix(path, bad, size - 10));
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA && !c);
    CHECK(strstr(rap_last_error(), "truncated"));
    /* cut short in the header */
    REQUIRE(copy_prefix(path, bad, 40));
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "truncated"));
    /* shorter than the length field */
    REQUIRE(copy_prefix(path, bad, 5));
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "truncated"));
    /* an absurd header length */
    REQUIRE(copy_prefix(path, bad, size));
    unsigned char big[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    REQUIRE(poke(bad, 0, big, 8));
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "header length"));
    /* a broken JSON header */
    REQUIRE(copy_prefix(path, bad, size));
    REQUIRE(poke(bad, 8 + 1, "#", 1));
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "corrupt checkpoint header"));
    /* flipped data bytes: the structure is fine, the CRC is not */
    REQUIRE(copy_prefix(path, bad, size));
    REQUIRE(poke(bad, size - 3, "\x55\xAA", 2));
    REQUIRE_OK(rap_ckpt_open(bad, &c));
    CHECK(rap_ckpt_load_model(c, a, true) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "CRC"));
    rap_ckpt_close(c);
    c = NULL;
    /* not there */
    CHECK(rap_ckpt_open("/nonexistent/x.safetensors", &c) == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "/nonexistent/x.safetensors"));
    /* a file that is not a checkpoint at all */
    FILE *g = fopen(bad, "wb");
    REQUIRE(g);
    fputs("label\tint_0\n1\t2\n", g);
    fclose(g);
    CHECK(rap_ckpt_open(bad, &c) == RAP_ERR_DATA);
    rap_model_free(a);
}

RAP_TEST(ckpt_rejects_other_shape)
{
    rap_model *a = NULL, *b = NULL, *s = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_ADAGRAD, &a));
    REQUIRE_OK(tiny_model(8, 1, RAP_ADAGRAD, &b));
    REQUIRE_OK(tiny_model(4, 1, RAP_SGD, &s));
    char path[512];
    path_in_tmp(path, sizeof path, "shape.safetensors");
    REQUIRE_OK(rap_ckpt_save(path, s, false, NULL, NULL)); /* SGD: no state tensors */
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(path, &c));
    CHECK(rap_ckpt_load_model(c, b, false) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "emb_l.0.weight") && strstr(rap_last_error(), "[10, 4]") &&
          strstr(rap_last_error(), "[10, 8]"));
    CHECK(rap_ckpt_load_model(c, a, true) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "optimizer.emb_l.0.weight.sum"));
    CHECK_OK(rap_ckpt_load_model(c, a, false));
    rap_ckpt_close(c);
    rap_model_free(a);
    rap_model_free(b);
    rap_model_free(s);
}

RAP_TEST(ckpt_poisoned_model_not_written)
{
    rap_model *a = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_SGD, &a));
    char path[512];
    path_in_tmp(path, sizeof path, "poison.safetensors");
    REQUIRE_OK(rap_ckpt_save(path, a, false, NULL, NULL));
    long size = file_size(path);
    int last = rap_model_n_tensors(a) - 1;
    const rap_tensor_info *ti = rap_model_tensor(a, last);
    float *v = calloc((size_t)tensor_elems(ti), sizeof(float));
    REQUIRE(v);
    REQUIRE_OK(rap_model_get(a, last, v));
    v[0] = NAN;
    REQUIRE_OK(rap_model_set(a, last, v));
    free(v);
    REQUIRE_OK(train_some(a, 0));
    CHECK(rap_ckpt_save(path, a, false, NULL, NULL) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "NaN") && strstr(rap_last_error(), ti->name));
    CHECK(file_size(path) == size);   /* the old checkpoint is intact */
    CHECK(rap_test_temporaries(path) == 0); /* and no temporary file is left */
    rap_ckpt *c = NULL;
    CHECK_OK(rap_ckpt_open(path, &c));
    if (c)
        CHECK_OK(rap_ckpt_verify(c));
    rap_ckpt_close(c);
    /* an unwritable place: error naming it, nothing created */
    CHECK(rap_ckpt_save("/nonexistent/dir/x.safetensors", a, false, NULL, NULL) == RAP_ERR_IO);
    CHECK(strstr(rap_last_error(), "/nonexistent/dir/x.safetensors"));
    rap_model_free(a);
}

RAP_TEST(ckpt_export_weights_only)
{
    rap_model *a = NULL, *b = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_ADAGRAD, &a));
    REQUIRE_OK(train_some(a, 2));
    char path[512], out[512];
    path_in_tmp(path, sizeof path, "full.safetensors");
    path_in_tmp(out, sizeof out, "weights.safetensors");
    rap_meta meta = {0};
    REQUIRE_OK(rap_meta_set(&meta, "step", "2"));
    REQUIRE_OK(rap_meta_set(&meta, "emb_dim", "4"));
    REQUIRE_OK(rap_ckpt_save(path, a, true, &meta, NULL));
    rap_meta_free(&meta);
    const char *drop[] = {"step", NULL};
    REQUIRE_OK(rap_ckpt_export(path, out, drop));
    rap_ckpt *c = NULL;
    REQUIRE_OK(rap_ckpt_open(out, &c));
    CHECK(c->n == rap_model_n_tensors(a));
    for (int i = 0; i < c->n; i++)
        CHECK(strncmp(c->t[i].name, "optimizer.", 10) != 0);
    CHECK(!rap_meta_get(&c->meta, "step"));
    CHECK(rap_meta_get(&c->meta, "emb_dim") && !strcmp(rap_meta_get(&c->meta, "emb_dim"), "4"));
    CHECK(rap_meta_get(&c->meta, "contents") &&
          !strcmp(rap_meta_get(&c->meta, "contents"), "weights"));
    REQUIRE_OK(tiny_model(4, 7, RAP_ADAGRAD, &b));
    CHECK_OK(rap_ckpt_load_model(c, b, false));
    CHECK(same_model(a, b, false));
    rap_ckpt_close(c);
    /* exporting a corrupt checkpoint fails and writes nothing */
    char bad[512], out2[512];
    path_in_tmp(bad, sizeof bad, "full_bad.safetensors");
    path_in_tmp(out2, sizeof out2, "weights_bad.safetensors");
    REQUIRE(copy_prefix(path, bad, file_size(path)));
    REQUIRE(poke(bad, file_size(path) - 1, "\x7f", 1));
    CHECK(rap_ckpt_export(bad, out2, NULL) == RAP_ERR_DATA);
    CHECK(access(out2, F_OK) != 0);
    rap_model_free(a);
    rap_model_free(b);
}

/* A sharded checkpoint written by two CPU ranks (rap_ckpt_save_shard +
 * rap_ckpt_save_manifest, as train.c does) gathers into the whole model;
 * with rank 0's shard file missing, gather and export fail naming it
 * (they used to read the missing file's tensor count: a NULL dereference). */
RAP_TEST(ckpt_sharded_gather_and_missing_rank0)
{
    rap_model_config g;
    tiny_config(4, 1, RAP_SGD, &g);
    rap_shard_map map;
    REQUIRE_OK(rap_shard_plan(g.table_rows, g.n_tables, g.emb_dim, 2, 0, NULL, &map));
    char path[512], gathered[512], exported[512];
    path_in_tmp(path, sizeof path, "sharded.safetensors");
    path_in_tmp(gathered, sizeof gathered, "sharded_gathered.safetensors");
    path_in_tmp(exported, sizeof exported, "sharded_exported.safetensors");
    rap_meta meta = {0};
    REQUIRE_OK(rap_meta_set(&meta, "step", "0"));
    rap_model *m[2] = {NULL, NULL};
    char *tables[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        rap_model_shard sh;
        rap_model_config mc;
        REQUIRE_OK(rap_hybrid_model_config(&g, &map, r, g.batch, &sh, &mc));
        REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &m[r]));
        REQUIRE_OK(rap_ckpt_save_shard(path, r, 2, "test-1", m[r], false, &meta));
        tables[r] = rap_ckpt_table_list(m[r]);
        REQUIRE(tables[r]);
    }
    REQUIRE_OK(rap_ckpt_save_manifest(path, 2, "test-1", (const char *const *)tables, &meta, NULL));
    /* gathered: the whole model (a sharded model starts from the whole
     * model's rows, so the same seed gives the same bits) */
    rap_model *whole = NULL, *back = NULL;
    REQUIRE_OK(tiny_model(4, 1, RAP_SGD, &whole));
    REQUIRE_OK(tiny_model(4, 7, RAP_SGD, &back));
    CHECK_OK(rap_ckpt_gather(path, gathered, false));
    rap_ckpt *c = NULL;
    CHECK_OK(rap_ckpt_open(gathered, &c));
    if (c) {
        CHECK(!rap_ckpt_is_manifest(c) && c->n == rap_model_n_tensors(whole));
        CHECK_OK(rap_ckpt_load_model(c, back, false));
        CHECK(same_model(whole, back, false));
    }
    rap_ckpt_close(c);
    /* rank 0's file missing: an error naming it, nothing written */
    char rank0[600], away[620];
    snprintf(rank0, sizeof rank0, "%s.rank0", path);
    snprintf(away, sizeof away, "%s.away", rank0);
    REQUIRE(rename(rank0, away) == 0);
    CHECK(unlink(gathered) == 0);
    CHECK(rap_ckpt_gather(path, gathered, false) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "rank 0") && strstr(rap_last_error(), "cannot open"), "%s",
              rap_last_error());
    CHECK(access(gathered, F_OK) != 0);
    CHECK(rap_ckpt_export(path, exported, NULL) == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), "rank 0"), "%s", rap_last_error());
    CHECK(access(exported, F_OK) != 0);
    for (int r = 0; r < 2; r++) {
        rap_model_free(m[r]);
        rap_free(tables[r]);
    }
    rap_model_free(whole);
    rap_model_free(back);
    rap_meta_free(&meta);
    rap_shard_map_free(&map);
}
