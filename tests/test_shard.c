/* test_shard.c -- the binary shard: round trip, truncation, corruption. */
#include "test.h"

#include "data/shard.h"

#include <stdlib.h>

static void fill(rap_host_column *c, rap_kind kind, int width, int64_t rows, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->width = width;
    c->rows = rows;
    c->valid = malloc((size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        c->valid[r] = (uint8_t)((seed + (uint64_t)r) % 5 != 0);
    if (kind == RAP_SPARSE) {
        c->off = malloc(sizeof(int64_t) * (size_t)(rows + 1));
        c->off[0] = 0;
        for (int64_t r = 0; r < rows; r++)
            c->off[r + 1] = c->off[r] + (c->valid[r] ? (int64_t)((seed + (uint64_t)r) % 3) : 0);
        c->ids = malloc(sizeof(int64_t) * (size_t)(c->off[rows] + 1));
        for (int64_t j = 0; j < c->off[rows]; j++)
            c->ids[j] = (int64_t)(seed * 1000 + (uint64_t)j) - 7;
    } else {
        c->val = malloc(sizeof(float) * (size_t)(rows * width));
        for (int64_t j = 0; j < rows * width; j++)
            c->val[j] = (float)j * 0.25f - (float)seed;
    }
}

static bool same(const rap_host_column *a, const rap_host_column *b)
{
    if (a->kind != b->kind || a->rows != b->rows || a->width != b->width)
        return false;
    if (memcmp(a->valid, b->valid, (size_t)a->rows))
        return false;
    if (a->kind == RAP_SPARSE)
        return !memcmp(a->off, b->off, sizeof(int64_t) * (size_t)(a->rows + 1)) &&
               !memcmp(a->ids, b->ids, sizeof(int64_t) * (size_t)a->off[a->rows]);
    return !memcmp(a->val, b->val, sizeof(float) * (size_t)(a->rows * a->width));
}

static const rap_shard_col g_cols[3] = {
    {"int_0", RAP_DENSE, 1, false, 0, 0},
    {"cat_0", RAP_SPARSE, 1, true, 0, 99},
    {"oh", RAP_VECTOR, 4, false, 0, 0},
};

static void write_shard(rap_test_ctx *t, const char *path, int batches, rap_host_column in[][3],
                        float lab[][100])
{
    rap_shard_writer *w;
    REQUIRE_OK(rap_shard_create(path, g_cols, 3, &w));
    for (int b = 0; b < batches; b++)
        CHECK_OK(rap_shard_write(w, lab[b], in[b][0].rows, in[b]));
    CHECK_OK(rap_shard_close(w));
}

RAP_TEST(shard_round_trip_and_corruption)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.rapbin", rap_test_tmpdir());
    rap_host_column in[2][3];
    float lab[2][100];
    int64_t rows[2] = {100, 37};
    for (int b = 0; b < 2; b++) {
        fill(&in[b][0], RAP_DENSE, 1, rows[b], 1 + (uint64_t)b);
        fill(&in[b][1], RAP_SPARSE, 1, rows[b], 2 + (uint64_t)b);
        fill(&in[b][2], RAP_VECTOR, 4, rows[b], 3 + (uint64_t)b);
        for (int r = 0; r < 100; r++)
            lab[b][r] = (float)((r + b) % 2);
    }
    write_shard(t, path, 2, in, lab);
    rap_shard_reader *r;
    REQUIRE_OK(rap_shard_open(path, &r));
    CHECK(rap_shard_n_cols(r) == 3 && rap_shard_rows(r) == 137 && rap_shard_batches(r) == 2);
    CHECK(!strcmp(rap_shard_cols(r)[1].name, "cat_0") && rap_shard_cols(r)[1].hi == 99);
    for (int b = 0; b < 3; b++) {
        rap_host_column out[3];
        float *l;
        int64_t n;
        REQUIRE_OK(rap_shard_next(r, &l, &n, out));
        if (b == 2) {
            CHECK(n == 0);
            break;
        }
        CHECK(n == rows[b]);
        CHECK(!memcmp(l, lab[b], sizeof(float) * (size_t)n));
        for (int c = 0; c < 3; c++) {
            CHECK(same(&in[b][c], &out[c]));
            rap_host_column_free(&out[c]);
        }
        free(l);
    }
    rap_shard_close_reader(r);

    /* truncated: every cut is rejected, never a crash */
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)size);
    REQUIRE(fread(bytes, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    char cut[512];
    snprintf(cut, sizeof cut, "%s/cut.rapbin", rap_test_tmpdir());
    for (long n = 0; n < size; n += 97) {
        f = fopen(cut, "wb");
        fwrite(bytes, 1, (size_t)n, f);
        fclose(f);
        CHECK(rap_shard_open(cut, &r) == RAP_ERR_DATA);
    }
    CHECK(strstr(rap_last_error(), "truncated") != NULL);
    /* a flipped byte in a batch's row count or offsets is caught */
    int caught = 0;
    for (long at = 16 + 3 * 96; at < size - 24; at += 131) {
        char saved = bytes[at];
        bytes[at] ^= 0x40;
        f = fopen(cut, "wb");
        fwrite(bytes, 1, (size_t)size, f);
        fclose(f);
        bytes[at] = saved;
        if (rap_shard_open(cut, &r) != RAP_OK) {
            caught++;
            continue;
        }
        rap_status s = RAP_OK;
        for (;;) {
            rap_host_column out[3];
            float *l;
            int64_t n;
            s = rap_shard_next(r, &l, &n, out);
            if (s != RAP_OK || n == 0)
                break;
            for (int c = 0; c < 3; c++)
                rap_host_column_free(&out[c]);
            free(l);
        }
        caught += s != RAP_OK;
        rap_shard_close_reader(r);
    }
    CHECK(caught > 0); /* value bytes may flip silently; structure may not */
    /* wrong magic, wrong version */
    bytes[0] = 'X';
    f = fopen(cut, "wb");
    fwrite(bytes, 1, (size_t)size, f);
    fclose(f);
    CHECK(rap_shard_open(cut, &r) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "not a rap shard") != NULL);
    bytes[0] = 'R';
    bytes[8] = 9;
    f = fopen(cut, "wb");
    fwrite(bytes, 1, (size_t)size, f);
    fclose(f);
    CHECK(rap_shard_open(cut, &r) == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "version 9") != NULL);
    free(bytes);
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < 3; c++)
            rap_host_column_free(&in[b][c]);
    CHECK(rap_shard_open("/nonexistent/x.rapbin", &r) == RAP_ERR_IO);
}
