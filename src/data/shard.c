/* shard.c -- the binary columnar shard (format in shard.h). */
#include "data/shard.h"
#include "core/checked.h"
#include "core/core.h"
#include "core/out.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MAGIC[8] = {'R', 'A', 'P', 'S', 'H', 'A', 'R', 'D'};
static const char BATCH[8] = {'R', 'A', 'P', 'B', 'A', 'T', 'C', 'H'};
static const char FOOT[8] = {'R', 'A', 'P', 'F', 'O', 'O', 'T', '!'};

typedef struct {
    char name[64];
    uint32_t kind, width;
    uint8_t bounded, pad[7];
    int64_t lo, hi;
} disk_col; /* 96 bytes */

struct rap_shard_writer {
    rap_out *o;        /* core/out.h: a temporary renamed at close */
    FILE *f;           /* rap_out_file(o) */
    char path[1024];
    int n_cols;
    rap_shard_col *cols;
    int64_t batches, rows;
};

struct rap_shard_reader {
    FILE *f;
    char path[1024];
    int n_cols;
    rap_shard_col *cols;
    int64_t batches, rows; /* from the footer */
    int64_t read_batches, read_rows;
    long data_start, data_end;
};

static rap_status wr(rap_shard_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return rap_fail(RAP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return RAP_OK;
}

rap_status rap_shard_create(const char *path, const rap_shard_col *cols, int n_cols,
                            rap_shard_writer **out)
{
    *out = NULL;
    rap_shard_writer *w = rap_calloc(sizeof *w, "shard writer");
    if (!w)
        return RAP_ERR_NOMEM;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->n_cols = n_cols;
    w->cols = rap_malloc(sizeof *cols * (size_t)(n_cols ? n_cols : 1), "shard columns");
    if (!w->cols) {
        rap_free(w);
        return RAP_ERR_NOMEM;
    }
    memcpy(w->cols, cols, sizeof *cols * (size_t)n_cols);
    rap_status os = rap_out_open(path, NULL, &w->o);
    if (os != RAP_OK) {
        rap_free(w->cols);
        rap_free(w);
        return os;
    }
    w->f = rap_out_file(w->o);
    uint32_t v = RAP_SHARD_VERSION, nc = (uint32_t)n_cols;
    rap_status s = wr(w, MAGIC, 8);
    if (s == RAP_OK) s = wr(w, &v, 4);
    if (s == RAP_OK) s = wr(w, &nc, 4);
    for (int c = 0; c < n_cols && s == RAP_OK; c++) {
        disk_col d;
        memset(&d, 0, sizeof d);
        snprintf(d.name, sizeof d.name, "%s", cols[c].name);
        d.kind = (uint32_t)cols[c].kind;
        d.width = (uint32_t)cols[c].width;
        d.bounded = cols[c].bounded;
        d.lo = cols[c].lo;
        d.hi = cols[c].hi;
        s = wr(w, &d, sizeof d);
    }
    if (s != RAP_OK) {
        rap_shard_abort(w);
        return s;
    }
    *out = w;
    return RAP_OK;
}

static int64_t payload_bytes(const rap_shard_col *cols, int n_cols, int64_t rows,
                             const rap_host_column *hc)
{
    int64_t n = 4 * rows;
    for (int c = 0; c < n_cols; c++) {
        n += rows; /* valid */
        if (cols[c].kind == RAP_SPARSE)
            n += 8 * (rows + 1) + 8 * (hc ? hc[c].off[rows] - hc[c].off[0] : 0);
        else
            n += 4 * rows * cols[c].width;
    }
    return n;
}

rap_status rap_shard_write(rap_shard_writer *w, const float *label, int64_t rows,
                           const rap_host_column *cols)
{
    int64_t bytes = payload_bytes(w->cols, w->n_cols, rows, cols);
    RAP_TRY(wr(w, BATCH, 8));
    RAP_TRY(wr(w, &rows, 8));
    RAP_TRY(wr(w, &bytes, 8));
    RAP_TRY(wr(w, label, sizeof(float) * (size_t)rows));
    for (int c = 0; c < w->n_cols; c++) {
        const rap_host_column *h = &cols[c];
        if (h->rows != rows || h->kind != w->cols[c].kind)
            return rap_fail(RAP_ERR_ARG, "shard %s: column %s has %lld rows of kind %d, expected %lld of kind %d",
                            w->path, w->cols[c].name, (long long)h->rows, (int)h->kind,
                            (long long)rows, (int)w->cols[c].kind);
        RAP_TRY(wr(w, h->valid, (size_t)rows));
        if (h->kind == RAP_SPARSE) {
            int64_t base = h->off[0];
            if (base == 0) {
                RAP_TRY(wr(w, h->off, sizeof(int64_t) * (size_t)(rows + 1)));
            } else {
                for (int64_t i = 0; i <= rows; i++) {
                    int64_t o = h->off[i] - base;
                    RAP_TRY(wr(w, &o, 8));
                }
            }
            RAP_TRY(wr(w, h->ids + base, sizeof(int64_t) * (size_t)(h->off[rows] - base)));
        } else {
            RAP_TRY(wr(w, h->val, sizeof(float) * (size_t)(rows * w->cols[c].width)));
        }
    }
    w->batches++;
    w->rows += rows;
    return RAP_OK;
}

rap_status rap_shard_close(rap_shard_writer *w)
{
    if (!w)
        return RAP_OK;
    rap_status s = wr(w, FOOT, 8);
    if (s == RAP_OK) s = wr(w, &w->batches, 8);
    if (s == RAP_OK) s = wr(w, &w->rows, 8);
    s = rap_out_close(w->o, s);
    rap_free(w->cols);
    rap_free(w);
    return s;
}

void rap_shard_abort(rap_shard_writer *w)
{
    if (!w)
        return;
    rap_out_abort(w->o);
    rap_free(w->cols);
    rap_free(w);
}

/* ------------------------------------------------------------- reader */

static rap_status rd(rap_shard_reader *r, void *p, size_t n, const char *what)
{
    if (n && fread(p, 1, n, r->f) != n)
        return rap_fail(RAP_ERR_DATA, "%s: truncated or corrupt shard: cannot read %s (batch %lld)",
                        r->path, what, (long long)r->read_batches);
    return RAP_OK;
}

rap_status rap_shard_open(const char *path, rap_shard_reader **out)
{
    *out = NULL;
    rap_shard_reader *r = rap_calloc(sizeof *r, "shard reader");
    if (!r)
        return RAP_ERR_NOMEM;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->f = fopen(path, "rb");
    if (!r->f) {
        rap_status s = rap_fail(RAP_ERR_IO, "%s: %s", path, strerror(errno));
        rap_free(r);
        return s;
    }
    char magic[8];
    uint32_t v = 0, nc = 0;
    rap_status s = rd(r, magic, 8, "header");
    if (s == RAP_OK && memcmp(magic, MAGIC, 8) != 0)
        s = rap_fail(RAP_ERR_DATA, "%s: not a rap shard (bad magic number)", path);
    if (s == RAP_OK) s = rd(r, &v, 4, "header");
    if (s == RAP_OK && v != RAP_SHARD_VERSION)
        s = rap_fail(RAP_ERR_DATA, "%s: shard version %u, this rap reads version %u", path, v,
                     RAP_SHARD_VERSION);
    if (s == RAP_OK) s = rd(r, &nc, 4, "header");
    if (s == RAP_OK && nc > 100000)
        s = rap_fail(RAP_ERR_DATA, "%s: corrupt shard header (%u columns)", path, nc);
    if (s == RAP_OK) {
        r->n_cols = (int)nc;
        r->cols = rap_calloc(sizeof *r->cols * (nc ? nc : 1), "shard columns");
        if (!r->cols)
            s = RAP_ERR_NOMEM;
    }
    for (uint32_t c = 0; c < nc && s == RAP_OK; c++) {
        disk_col d;
        s = rd(r, &d, sizeof d, "column header");
        if (s != RAP_OK)
            break;
        if (d.kind > RAP_VECTOR || d.width < 1 || d.width > 65536 || !memchr(d.name, 0, 64)) {
            s = rap_fail(RAP_ERR_DATA, "%s: corrupt column header %u", path, c);
            break;
        }
        memcpy(r->cols[c].name, d.name, 64);
        r->cols[c].kind = (rap_kind)d.kind;
        r->cols[c].width = (int)d.width;
        r->cols[c].bounded = d.bounded;
        r->cols[c].lo = d.lo;
        r->cols[c].hi = d.hi;
    }
    if (s == RAP_OK) {
        r->data_start = ftell(r->f);
        char foot[8];
        if (fseek(r->f, -24, SEEK_END) != 0 || ftell(r->f) < r->data_start ||
            fread(foot, 1, 8, r->f) != 8 || memcmp(foot, FOOT, 8) != 0 ||
            fread(&r->batches, 8, 1, r->f) != 1 || fread(&r->rows, 8, 1, r->f) != 1)
            s = rap_fail(RAP_ERR_DATA, "%s: truncated shard (no footer): the writer did not finish", path);
        r->data_end = ftell(r->f) - 24;
        /* every batch takes 24 bytes of header at least, every row 4 of label */
        long data = r->data_end - r->data_start;
        if (s == RAP_OK && (r->batches < 0 || r->rows < 0 || r->batches > data / 24 ||
                            r->rows > data / 4))
            s = rap_fail(RAP_ERR_DATA, "%s: corrupt shard footer: %lld batches of %lld rows in "
                         "%ld bytes of data", path, (long long)r->batches, (long long)r->rows, data);
        if (s == RAP_OK && fseek(r->f, r->data_start, SEEK_SET) != 0)
            s = rap_fail(RAP_ERR_IO, "%s: seek failed", path);
    }
    if (s != RAP_OK) {
        rap_shard_close_reader(r);
        return s;
    }
    *out = r;
    return RAP_OK;
}

int rap_shard_n_cols(const rap_shard_reader *r) { return r->n_cols; }
const rap_shard_col *rap_shard_cols(const rap_shard_reader *r) { return r->cols; }
int64_t rap_shard_rows(const rap_shard_reader *r) { return r->rows; }
int64_t rap_shard_batches(const rap_shard_reader *r) { return r->batches; }

/* The bytes a batch of n rows takes without its ids (labels, valid flags,
 * values, offsets) into *out: false when that overflows. Checked before
 * anything of the batch is allocated. */
static bool batch_bytes_ok(const rap_shard_reader *r, int64_t n, int64_t *out)
{
    int64_t total, part;
    if (!rap_mul_i64_ok(n, 4, &total))
        return false;
    for (int c = 0; c < r->n_cols; c++) {
        if (!rap_add_i64_ok(total, n, &total))
            return false;
        if (r->cols[c].kind == RAP_SPARSE) {
            if (!rap_add_i64_ok(n, 1, &part) || !rap_mul_i64_ok(part, 8, &part))
                return false;
        } else if (!rap_mul_i64_ok(n, r->cols[c].width, &part) || !rap_mul_i64_ok(part, 4, &part)) {
            return false;
        }
        if (!rap_add_i64_ok(total, part, &total))
            return false;
    }
    *out = total;
    return true;
}

rap_status rap_shard_next(rap_shard_reader *r, float **label, int64_t *rows,
                          rap_host_column *cols)
{
    *label = NULL;
    *rows = 0;
    memset(cols, 0, sizeof *cols * (size_t)r->n_cols);
    if (r->read_batches == r->batches) {
        if (ftell(r->f) != r->data_end)
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard: data after the last batch", r->path);
        if (r->read_rows != r->rows)
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard: its batches hold %lld rows, the "
                            "footer says %lld", r->path, (long long)r->read_rows,
                            (long long)r->rows);
        return RAP_OK;
    }
    char magic[8];
    int64_t n = 0, bytes = 0;
    RAP_TRY(rd(r, magic, 8, "batch header"));
    if (memcmp(magic, BATCH, 8) != 0)
        return rap_fail(RAP_ERR_DATA, "%s: corrupt shard: bad batch marker at batch %lld", r->path,
                        (long long)r->read_batches);
    RAP_TRY(rd(r, &n, 8, "batch header"));
    RAP_TRY(rd(r, &bytes, 8, "batch header"));
    long left = r->data_end - ftell(r->f);
    /* no batch is empty (the writer writes none; *rows 0 means the end) */
    if (n < 1 || bytes < 0 || bytes > left || n > bytes)
        return rap_fail(RAP_ERR_DATA, "%s: corrupt shard: batch %lld claims %lld rows in %lld bytes, %ld bytes left",
                        r->path, (long long)r->read_batches, (long long)n, (long long)bytes, left);
    int64_t least;
    if (!batch_bytes_ok(r, n, &least) || least > bytes)
        return rap_fail(RAP_ERR_DATA, "%s: corrupt shard: batch %lld claims %lld rows in %lld "
                        "bytes; its columns need more", r->path, (long long)r->read_batches,
                        (long long)n, (long long)bytes);
    rap_status s = RAP_OK;
    float *lab = rap_malloc(sizeof(float) * (size_t)(n ? n : 1), "shard labels");
    if (!lab)
        return RAP_ERR_NOMEM;
    s = rd(r, lab, sizeof(float) * (size_t)n, "labels");
    int64_t got = 4 * n;
    for (int c = 0; c < r->n_cols && s == RAP_OK; c++) {
        rap_host_column *h = &cols[c];
        h->kind = r->cols[c].kind;
        h->width = r->cols[c].width;
        h->rows = n;
        h->valid = rap_malloc((size_t)(n ? n : 1), "shard column");
        if (!h->valid) { s = RAP_ERR_NOMEM; break; }
        s = rd(r, h->valid, (size_t)n, "valid flags");
        got += n;
        if (s != RAP_OK)
            break;
        if (h->kind == RAP_SPARSE) {
            h->off = rap_malloc(sizeof(int64_t) * (size_t)(n + 1), "shard offsets");
            if (!h->off) { s = RAP_ERR_NOMEM; break; }
            s = rd(r, h->off, sizeof(int64_t) * (size_t)(n + 1), "offsets");
            if (s != RAP_OK)
                break;
            got += 8 * (n + 1);
            for (int64_t i = 0; i < n && s == RAP_OK; i++)
                if (h->off[i + 1] < h->off[i])
                    s = rap_fail(RAP_ERR_DATA, "%s: corrupt shard: decreasing offsets in column %s", r->path, r->cols[c].name);
            if (s == RAP_OK && (h->off[0] != 0 || h->off[n] > (bytes - got) / 8))
                s = rap_fail(RAP_ERR_DATA, "%s: corrupt shard: column %s offsets exceed the batch", r->path, r->cols[c].name);
            if (s != RAP_OK)
                break;
            h->ids = rap_malloc(sizeof(int64_t) * (size_t)(h->off[n] ? h->off[n] : 1), "shard ids");
            if (!h->ids) { s = RAP_ERR_NOMEM; break; }
            s = rd(r, h->ids, sizeof(int64_t) * (size_t)h->off[n], "ids");
            got += 8 * h->off[n];
        } else {
            size_t cnt = (size_t)(n * h->width);
            h->val = rap_malloc(sizeof(float) * (cnt ? cnt : 1), "shard values");
            if (!h->val) { s = RAP_ERR_NOMEM; break; }
            s = rd(r, h->val, sizeof(float) * cnt, "values");
            got += 4 * (int64_t)cnt;
        }
    }
    if (s == RAP_OK && got != bytes)
        s = rap_fail(RAP_ERR_DATA, "%s: corrupt shard: batch %lld holds %lld bytes, header says %lld",
                     r->path, (long long)r->read_batches, (long long)got, (long long)bytes);
    if (s != RAP_OK) {
        for (int c = 0; c < r->n_cols; c++)
            rap_host_column_free(&cols[c]);
        rap_free(lab);
        return s;
    }
    r->read_batches++;
    r->read_rows += n;
    *label = lab;
    *rows = n;
    return RAP_OK;
}

void rap_shard_close_reader(rap_shard_reader *r)
{
    if (!r)
        return;
    if (r->f)
        fclose(r->f);
    rap_free(r->cols);
    rap_free(r);
}
