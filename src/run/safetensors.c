/* safetensors.c -- the safetensors container, written and read (safetensors.h). */
#include "run/safetensors.h"

#include "core/checked.h"
#include "core/core.h"
#include "core/json.h"
#include "core/out.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------- metadata */

rap_status rap_meta_set(rap_meta *m, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *v = rap_malloc((size_t)len + 1, "metadata value");
    if (!v)
        return RAP_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(v, (size_t)len + 1, fmt, ap);
    va_end(ap);
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->key[i], key)) {
            rap_free(m->val[i]);
            m->val[i] = v;
            return RAP_OK;
        }
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        char **k = rap_realloc(m->key, sizeof(char *) * (size_t)cap, "metadata");
        if (!k) {
            rap_free(v);
            return RAP_ERR_NOMEM;
        }
        m->key = k;
        char **vv = rap_realloc(m->val, sizeof(char *) * (size_t)cap, "metadata");
        if (!vv) {
            rap_free(v);
            return RAP_ERR_NOMEM;
        }
        m->val = vv;
        m->cap = cap;
    }
    m->key[m->n] = rap_malloc(strlen(key) + 1, "metadata key");
    if (!m->key[m->n]) {
        rap_free(v);
        return RAP_ERR_NOMEM;
    }
    strcpy(m->key[m->n], key);
    m->val[m->n++] = v;
    return RAP_OK;
}

const char *rap_meta_get(const rap_meta *m, const char *key)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->key[i], key))
            return m->val[i];
    return NULL;
}

static bool in_list(const char *key, const char *const *list)
{
    for (int k = 0; list && list[k]; k++)
        if (!strcmp(key, list[k]))
            return true;
    return false;
}

rap_status rap_meta_copy(rap_meta *out, const rap_meta *in, const char *const *skip1,
                         const char *const *skip2)
{
    for (int i = 0; in && i < in->n; i++)
        if (!in_list(in->key[i], skip1) && !in_list(in->key[i], skip2))
            RAP_TRY(rap_meta_set(out, in->key[i], "%s", in->val[i]));
    return RAP_OK;
}

void rap_meta_free(rap_meta *m)
{
    for (int i = 0; i < m->n; i++) {
        rap_free(m->key[i]);
        rap_free(m->val[i]);
    }
    rap_free(m->key);
    rap_free(m->val);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- tensors */

const char *rap_st_dtype_name(rap_st_dtype t)
{
    switch (t) {
    case RAP_ST_F32: return "F32";
    case RAP_ST_BF16: return "BF16";
    case RAP_ST_F16: return "F16";
    }
    return "?";
}

size_t rap_st_dtype_size(rap_st_dtype t)
{
    switch (t) {
    case RAP_ST_F32: return 4;
    case RAP_ST_BF16:
    case RAP_ST_F16: return 2;
    }
    return 0;
}

/* The dtype called name; false for one rap does not read. */
static bool dtype_parse(const char *name, rap_st_dtype *out)
{
    for (int k = RAP_ST_F32; k <= RAP_ST_F16; k++)
        if (!strcmp(name, rap_st_dtype_name((rap_st_dtype)k))) {
            *out = (rap_st_dtype)k;
            return true;
        }
    return false;
}

int64_t rap_ckpt_tensor_elems(const rap_ckpt_tensor *t)
{
    int64_t e = 1;
    for (int d = 0; d < t->ndim; d++)
        e *= t->shape[d];
    return e;
}

uint64_t rap_ckpt_tensor_bytes(const rap_ckpt_tensor *t)
{
    return (uint64_t)rap_ckpt_tensor_elems(t) * rap_st_dtype_size(t->dtype);
}

/* ------------------------------------------------------- the header text */

/* A growing string; oom records a failed allocation (every later put is
 * dropped). */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(void *ctx, const char *s, size_t n)
{
    sbuf *b = ctx;
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = rap_realloc(b->p, cap, "checkpoint header");
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) RAP_PRINTF(2, 3);
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char t[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    sb_put(b, t, (size_t)(n < (int)sizeof t ? n : (int)sizeof t - 1));
}

static void sb_json(sbuf *b, const char *s) { rap_json_escape(s, sb_put, b); }

/* The header JSON of meta and the n tensors t (offsets set), listed in
 * the order ord (n indices into t), padded to a multiple of 8 bytes;
 * *crc_at is the offset in it of the 8 placeholder digits of data_crc32.
 * RAP_ERR_NOMEM leaves h empty. */
static rap_status build_header(sbuf *h, const rap_meta *meta, const rap_ckpt_tensor *t,
                               const int *ord, int n, size_t *crc_at)
{
    sb_str(h, "{\"__metadata__\":{");
    for (int i = 0; meta && i < meta->n; i++) {
        if (!strcmp(meta->key[i], "data_crc32"))
            continue;
        sb_json(h, meta->key[i]);
        sb_str(h, ":");
        sb_json(h, meta->val[i]);
        sb_str(h, ",");
    }
    sb_str(h, "\"data_crc32\":\"");
    *crc_at = h->n; /* patched after the data */
    sb_str(h, "00000000\"}");
    for (int k = 0; k < n; k++) {
        const rap_ckpt_tensor *x = &t[ord[k]];
        sb_str(h, ",");
        sb_json(h, x->name);
        sb_fmt(h, ":{\"dtype\":\"%s\",\"shape\":[", rap_st_dtype_name(x->dtype));
        for (int d = 0; d < x->ndim; d++)
            sb_fmt(h, "%s%lld", d ? "," : "", (long long)x->shape[d]);
        sb_fmt(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)x->begin,
               (unsigned long long)x->end);
    }
    sb_str(h, "}");
    while (h->n % 8)
        sb_str(h, " ");
    if (!h->oom)
        return RAP_OK;
    rap_free(h->p);
    memset(h, 0, sizeof *h);
    return RAP_ERR_NOMEM;
}

/* ------------------------------------------------------------- writing */

/* Adds the bytes at buf to the running CRC (zlib takes a uInt length: in
 * pieces below 4 GiB). */
static uLong crc_add(uLong crc, const void *buf, size_t bytes)
{
    const uint8_t *p = (const uint8_t *)buf;
    for (size_t left = bytes; left > 0;) {
        uInt k = left > (1u << 30) ? (1u << 30) : (uInt)left;
        crc = crc32(crc, p, k);
        p += k;
        left -= k;
    }
    return crc;
}

/* The first element of the e elements of type dt at buf that is NaN or
 * inf (*nan says which), or e when all are finite. */
static size_t first_nonfinite(const void *buf, rap_st_dtype dt, size_t e, bool *nan)
{
    if (dt == RAP_ST_F32) {
        const float *x = buf;
        for (size_t j = 0; j < e; j++)
            if (!isfinite(x[j])) {
                *nan = isnan(x[j]);
                return j;
            }
        return e;
    }
    /* 16 bits: the exponent all ones is inf (mantissa 0) or NaN */
    const uint16_t *x = buf;
    const uint16_t exp = dt == RAP_ST_BF16 ? 0x7f80 : 0x7c00;
    for (size_t j = 0; j < e; j++)
        if ((x[j] & exp) == exp) {
            *nan = (x[j] & (uint16_t)~(exp | 0x8000)) != 0;
            return j;
        }
    return e;
}

/* Passes over the data section: every tensor in the order ord from fill
 * through buf (the largest tensor's bytes), checked finite when asked,
 * written to f unless f is NULL (a pass that only computes the CRC); *crc
 * its CRC. */
static rap_status write_data(FILE *f, const char *path, const rap_ckpt_tensor *t, const int *ord,
                             int n, rap_safetensors_fill fill, void *ctx, bool check_finite,
                             void *buf, uLong *crc)
{
    *crc = crc32(0L, Z_NULL, 0);
    for (int k = 0; k < n; k++) {
        const int i = ord[k];
        const size_t e = (size_t)rap_ckpt_tensor_elems(&t[i]);
        const size_t bytes = (size_t)rap_ckpt_tensor_bytes(&t[i]);
        RAP_TRY(fill(ctx, i, buf));
        bool nan = false;
        size_t j = check_finite ? first_nonfinite(buf, t[i].dtype, e, &nan) : e;
        if (j < e)
            return rap_fail(RAP_ERR_DATA,
                            "%s: tensor %s holds %s at element %zu: not writing a "
                            "poisoned checkpoint (%s left as it was)",
                            path, t[i].name, nan ? "NaN" : "inf", j, path);
        *crc = crc_add(*crc, buf, bytes);
        if (f && fwrite(buf, 1, bytes, f) != bytes)
            return rap_fail(RAP_ERR_IO, "%s: write failed (%s; disk full?)", path, strerror(errno));
    }
    return RAP_OK;
}

static void put_crc(uint8_t *at, uLong crc)
{
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    memcpy(at, hex, 8);
}

/* Writes the whole file to o: length, header h, data (in the order ord),
 * the CRC digits at crc_at. A regular file gets the data in one pass and
 * the digits patched after it; a file that cannot seek back (a fifo, a
 * device) gets the data twice from fill: once for the CRC, once written
 * (the CRCs must agree). */
static rap_status write_all(rap_out *o, const char *path, sbuf *h, size_t crc_at,
                            const rap_ckpt_tensor *t, const int *ord, int n,
                            rap_safetensors_fill fill, void *ctx, bool check_finite, void *buf)
{
    FILE *f = rap_out_file(o);
    bool seek = rap_out_seekable(o);
    uLong crc = 0, crc2;
    if (!seek) {
        RAP_TRY(write_data(NULL, path, t, ord, n, fill, ctx, check_finite, buf, &crc));
        put_crc((uint8_t *)h->p + crc_at, crc);
    }
    uint8_t len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (uint8_t)((uint64_t)h->n >> (8 * k));
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(h->p, 1, h->n, f) != h->n)
        return rap_fail(RAP_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    RAP_TRY(write_data(f, path, t, ord, n, fill, ctx, check_finite && seek, buf, &crc2));
    if (!seek && crc2 != crc)
        return rap_fail(RAP_ERR_INTERNAL, "%s: the tensors changed while they were written", path);
    if (seek) {
        uint8_t hex[8];
        put_crc(hex, crc2);
        if (fseek(f, (long)(8 + crc_at), SEEK_SET) != 0 || fwrite(hex, 1, 8, f) != 8)
            return rap_fail(RAP_ERR_IO, "%s: write failed (%s)", path, strerror(errno));
    }
    return RAP_OK;
}

/* The layout order of the n tensors t into ord: widest element first,
 * the order given within one width (every tensor then starts at a
 * multiple of its element size: the data section starts at a multiple of
 * 8). Sets every tensor's begin and end; returns the largest tensor's
 * bytes. */
static uint64_t layout(rap_ckpt_tensor *t, int n, int *ord)
{
    static const size_t widths[] = {4, 2};
    uint64_t at = 0, most = 0;
    int k = 0;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < n; i++) {
            if (rap_st_dtype_size(t[i].dtype) != widths[w])
                continue;
            ord[k++] = i;
            t[i].begin = at;
            at += rap_ckpt_tensor_bytes(&t[i]);
            t[i].end = at;
            if (t[i].end - t[i].begin > most)
                most = t[i].end - t[i].begin;
        }
    return most;
}

rap_status rap_safetensors_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t,
                                 int n, rap_safetensors_fill fill, void *ctx, bool check_finite,
                                 rap_out_lock *held)
{
    for (int i = 0; i < n; i++)
        if (!rap_st_dtype_size(t[i].dtype))
            return rap_fail(RAP_ERR_INTERNAL, "%s: tensor %s has dtype %d", path, t[i].name,
                            (int)t[i].dtype);
    int *ord = rap_malloc(sizeof(int) * (size_t)(n ? n : 1), "checkpoint layout");
    if (!ord)
        return RAP_ERR_NOMEM;
    const uint64_t most = layout(t, n, ord);
    sbuf h = {0};
    size_t crc_at = 0;
    rap_status st = build_header(&h, meta, t, ord, n, &crc_at);
    if (st != RAP_OK) {
        rap_free(ord);
        return st;
    }
    void *buf = rap_malloc((size_t)(most ? most : 4), "checkpoint tensor buffer");
    rap_out_opts oo = {.held = held};
    rap_out *o = NULL;
    st = buf ? rap_out_open(path, &oo, &o) : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = write_all(o, path, &h, crc_at, t, ord, n, fill, ctx, check_finite, buf);
    if (st == RAP_OK)
        st = rap_out_commit(o);
    else
        rap_out_abort(o);
    rap_free(buf);
    rap_free(h.p);
    rap_free(ord);
    return st;
}

/* ------------------------------------------------------------- the header, read */

/* The value of "__metadata__": an object of strings, into c->meta. */
static rap_status parse_meta(rap_ckpt *c, rap_json_reader *j)
{
    const char *not_strings = "__metadata__ must be an object of strings";
    if (!rap_json_peek(j, '{'))
        return rap_json_error(j, not_strings);
    RAP_TRY(rap_json_object_begin(j));
    for (;;) {
        char key[256];
        size_t len;
        bool more;
        RAP_TRY(rap_json_next_key(j, &more, key, sizeof key, &len));
        if (!more)
            return RAP_OK;
        if (len >= sizeof key)
            return rap_json_error(j, "metadata key too long");
        if (!rap_json_peek(j, '"'))
            return rap_json_error(j, not_strings);
        char *v;
        RAP_TRY(rap_json_string_dup(j, RAP_ST_MAX_HEADER, &v));
        rap_status st = rap_meta_set(&c->meta, key, "%s", v);
        rap_free(v);
        RAP_TRY(st);
    }
}

/* The value of "shape": at most 4 dimensions of at most 2^40 each, whose
 * product, in bytes of F32, is at most RAP_ST_MAX_TENSOR_BYTES (so that
 * rap_ckpt_tensor_elems and every size computed from it cannot
 * overflow). */
static rap_status parse_shape(rap_json_reader *j, rap_ckpt_tensor *t)
{
    if (!rap_json_peek(j, '['))
        return rap_json_error(j, "expected the shape array");
    RAP_TRY(rap_json_array_begin(j));
    t->ndim = 0;
    uint64_t bytes = 4;
    for (;;) {
        bool more;
        RAP_TRY(rap_json_next_item(j, &more));
        if (!more)
            return RAP_OK;
        uint64_t v;
        RAP_TRY(rap_json_uint(j, UINT64_MAX, &v));
        if (t->ndim >= 4 || v > (1ull << 40))
            return rap_json_error(j, "shape with more than 4 dimensions or too large");
        if (!rap_mul_u64_ok(bytes, v, &bytes))
            return rap_json_error(j, "a shape whose elements need more than 2^64 bytes");
        if (bytes > RAP_ST_MAX_TENSOR_BYTES)
            return rap_json_error(j, "a shape whose elements need more than 2^62 bytes");
        t->shape[t->ndim++] = (int64_t)v;
    }
}

/* The value of "data_offsets": exactly two integers. */
static rap_status parse_offsets(rap_json_reader *j, rap_ckpt_tensor *t)
{
    if (!rap_json_peek(j, '['))
        return rap_json_error(j, "expected the data_offsets array");
    RAP_TRY(rap_json_array_begin(j));
    uint64_t *v[2] = {&t->begin, &t->end};
    bool more;
    for (int k = 0; k < 2; k++) {
        RAP_TRY(rap_json_next_item(j, &more));
        if (!more)
            return rap_json_error(j, "data_offsets needs two numbers");
        RAP_TRY(rap_json_uint(j, UINT64_MAX, v[k]));
    }
    RAP_TRY(rap_json_next_item(j, &more));
    if (more)
        return rap_json_error(j, "data_offsets needs two numbers");
    return RAP_OK;
}

/* One tensor's object: dtype (F32, BF16, F16), shape, data_offsets; other
 * keys are skipped. */
static rap_status parse_tensor(rap_json_reader *j, rap_ckpt_tensor *t)
{
    if (!rap_json_peek(j, '{'))
        return rap_json_error(j, "expected a tensor object");
    RAP_TRY(rap_json_object_begin(j));
    bool has_dtype = false, has_shape = false, has_off = false;
    for (;;) {
        char key[64];
        bool more;
        RAP_TRY(rap_json_next_key(j, &more, key, sizeof key, NULL));
        if (!more)
            break;
        if (!strcmp(key, "dtype")) {
            char dt[32];
            RAP_TRY(rap_json_string(j, dt, sizeof dt, NULL));
            if (!dtype_parse(dt, &t->dtype))
                return rap_fail(RAP_ERR_DATA, "%s: tensor %s has dtype %s; rap reads F32, BF16 "
                                "and F16", j->file, t->name, dt);
            has_dtype = true;
        } else if (!strcmp(key, "shape")) {
            RAP_TRY(parse_shape(j, t));
            has_shape = true;
        } else if (!strcmp(key, "data_offsets")) {
            RAP_TRY(parse_offsets(j, t));
            has_off = true;
        } else {
            RAP_TRY(rap_json_skip(j));
        }
    }
    if (!has_dtype || !has_shape || !has_off)
        return rap_fail(RAP_ERR_DATA, "%s: tensor %s lacks dtype, shape or data_offsets", j->file,
                        t->name);
    return RAP_OK;
}

/* The header text (n bytes) into c->t, c->n and c->meta. */
static rap_status parse_header(rap_ckpt *c, const char *text, size_t n)
{
    rap_json_reader j;
    RAP_TRY(rap_json_reader_init(&j, text, n, RAP_ST_MAX_HEADER, c->path, "checkpoint header"));
    if (!rap_json_peek(&j, '{'))
        return rap_json_error(&j, "the header does not start with '{'");
    RAP_TRY(rap_json_object_begin(&j));
    int cap = 0;
    for (;;) {
        char name[sizeof c->t[0].name];
        size_t len;
        bool more;
        RAP_TRY(rap_json_next_key(&j, &more, name, sizeof name, &len));
        if (!more)
            break;
        if (len >= sizeof name)
            return rap_json_error(&j, "tensor name too long");
        if (!strcmp(name, "__metadata__")) {
            RAP_TRY(parse_meta(c, &j));
            continue;
        }
        if (c->n == cap) {
            cap = cap ? 2 * cap : 64;
            rap_ckpt_tensor *t = rap_realloc(c->t, sizeof *t * (size_t)cap, "checkpoint tensors");
            if (!t)
                return RAP_ERR_NOMEM;
            c->t = t;
        }
        rap_ckpt_tensor *t = &c->t[c->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        if (rap_ckpt_find(c, name) >= 0)
            return rap_fail(RAP_ERR_DATA, "%s: tensor %s appears twice", c->path, name);
        RAP_TRY(parse_tensor(&j, t));
        c->n++;
    }
    return rap_json_end(&j);
}

/* ------------------------------------------------------------- reading */

void rap_ckpt_close(rap_ckpt *c)
{
    if (!c)
        return;
    if (c->f)
        fclose(c->f);
    rap_free(c->t);
    rap_meta_free(&c->meta);
    rap_free(c);
}

int rap_ckpt_find(const rap_ckpt *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->t[i].name, name))
            return i;
    return -1;
}

static int cmp_begin(const void *a, const void *b)
{
    const rap_ckpt_tensor *x = *(rap_ckpt_tensor *const *)a, *y = *(rap_ckpt_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* The tensors' offsets: each as long as its shape and dtype need,
 * contiguous in offset order, covering the data section exactly. */
static rap_status check_layout(rap_ckpt *c)
{
    rap_ckpt_tensor **s = rap_malloc(sizeof *s * (size_t)(c->n ? c->n : 1), "checkpoint check");
    if (!s)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < c->n; i++)
        s[i] = &c->t[i];
    qsort(s, (size_t)c->n, sizeof *s, cmp_begin);
    rap_status st = RAP_OK;
    uint64_t at = 0;
    for (int i = 0; i < c->n && st == RAP_OK; i++) {
        const rap_ckpt_tensor *t = s[i];
        uint64_t want = rap_st_dtype_size(t->dtype);
        bool big = false; /* the shape's bytes beyond 2^64: no file holds them */
        for (int d = 0; d < t->ndim; d++)
            big |= __builtin_mul_overflow(want, (uint64_t)t->shape[d], &want);
        if (big)
            st = rap_fail(RAP_ERR_DATA, "%s: tensor %s: its shape needs more than 2^64 bytes",
                          c->path, t->name);
        else if (t->end < t->begin || t->end - t->begin != want)
            st = rap_fail(RAP_ERR_DATA,
                          "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, its shape "
                          "needs %llu (%s)",
                          c->path, t->name, (unsigned long long)t->begin,
                          (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                          (unsigned long long)want, rap_st_dtype_name(t->dtype));
        else if (t->begin != at)
            st = rap_fail(RAP_ERR_DATA,
                          "%s: tensor %s starts at byte %llu of the data, expected %llu (tensors "
                          "must be contiguous)",
                          c->path, t->name, (unsigned long long)t->begin, (unsigned long long)at);
        at = t->end;
    }
    if (st == RAP_OK && at > c->data_len)
        st = rap_fail(RAP_ERR_DATA,
                      "%s: truncated: the header lists %llu bytes of tensor data, the file holds "
                      "%llu",
                      c->path, (unsigned long long)at, (unsigned long long)c->data_len);
    else if (st == RAP_OK && at < c->data_len)
        st = rap_fail(RAP_ERR_DATA,
                      "%s: %llu bytes after the last tensor (corrupt or not a safetensors file)",
                      c->path, (unsigned long long)(c->data_len - at));
    rap_free(s);
    return st;
}

/* Opens c->path, reads its header length and header into *text (n bytes),
 * checked against the file's size. */
static rap_status read_header(rap_ckpt *c, char **text)
{
    const char *path = c->path;
    struct stat sb;
    c->f = fopen(path, "rb");
    if (!c->f || fstat(fileno(c->f), &sb) != 0)
        return rap_fail(RAP_ERR_IO, "%s: cannot open checkpoint (%s)", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return rap_fail(RAP_ERR_IO, "%s: not a regular file", path);
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len8[8];
    if (size < 8 || fread(len8, 1, 8, c->f) != 8)
        return rap_fail(RAP_ERR_DATA, "%s: truncated: %llu bytes, a checkpoint starts with an "
                        "8-byte header length", path, (unsigned long long)size);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++)
        n |= (uint64_t)len8[k] << (8 * k);
    if (n < 2 || n > RAP_ST_MAX_HEADER)
        return rap_fail(RAP_ERR_DATA, "%s: not a safetensors checkpoint (header length %llu)",
                        path, (unsigned long long)n);
    if (8 + n > size)
        return rap_fail(RAP_ERR_DATA, "%s: truncated: the header needs %llu bytes, the file has "
                        "%llu", path, (unsigned long long)(8 + n), (unsigned long long)size);
    c->header_len = n;
    c->data_len = size - 8 - n;
    *text = rap_malloc(n, "checkpoint header");
    if (!*text)
        return RAP_ERR_NOMEM;
    if (fread(*text, 1, n, c->f) != n)
        return rap_fail(RAP_ERR_IO, "%s: read failed", path);
    return RAP_OK;
}

rap_status rap_safetensors_open(const char *path, rap_ckpt **out)
{
    *out = NULL;
    rap_ckpt *c = rap_calloc(sizeof *c, "checkpoint");
    if (!c)
        return RAP_ERR_NOMEM;
    snprintf(c->path, sizeof c->path, "%s", path);
    char *text = NULL;
    rap_status st = read_header(c, &text);
    if (st == RAP_OK)
        st = parse_header(c, text, c->header_len);
    if (st == RAP_OK)
        st = check_layout(c);
    rap_free(text);
    if (st != RAP_OK) {
        rap_ckpt_close(c);
        return st;
    }
    *out = c;
    return RAP_OK;
}

rap_status rap_ckpt_read(rap_ckpt *c, int i, void *host)
{
    const rap_ckpt_tensor *t = &c->t[i];
    size_t bytes = (size_t)rap_ckpt_tensor_bytes(t);
    if (fseeko(c->f, (off_t)(8 + c->header_len + t->begin), SEEK_SET) != 0 ||
        fread(host, 1, bytes, c->f) != bytes)
        return rap_fail(RAP_ERR_IO, "%s: cannot read tensor %s (%s)", c->path, t->name,
                        strerror(errno));
    return RAP_OK;
}

rap_status rap_ckpt_read_rows(rap_ckpt *c, int i, int64_t row0, int64_t rows, void *host)
{
    const rap_ckpt_tensor *t = &c->t[i];
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    const uint64_t es = rap_st_dtype_size(t->dtype);
    if (t->ndim < 1 || row0 < 0 || rows < 0 || row0 + rows > t->shape[0])
        return rap_fail(RAP_ERR_INTERNAL, "%s: rows [%lld, %lld) of tensor %s: out of its %lld "
                        "rows", c->path, (long long)row0, (long long)(row0 + rows), t->name,
                        (long long)t->shape[0]);
    size_t bytes = (size_t)(es * (uint64_t)(rows * cols));
    if (fseeko(c->f, (off_t)(8 + c->header_len + t->begin + es * (uint64_t)(row0 * cols)),
               SEEK_SET) != 0 ||
        fread(host, 1, bytes, c->f) != bytes)
        return rap_fail(RAP_ERR_IO, "%s: cannot read rows of tensor %s (%s)", c->path, t->name,
                        strerror(errno));
    return RAP_OK;
}

/* CRC-32 of the whole data section, read in pieces of 1 MiB. */
static rap_status crc_of_data(rap_ckpt *c, uLong *out)
{
    size_t bufn = 1 << 20;
    uint8_t *buf = rap_malloc(bufn, "checkpoint read buffer");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    uLong crc = crc32(0L, Z_NULL, 0);
    if (fseeko(c->f, (off_t)(8 + c->header_len), SEEK_SET) != 0)
        st = rap_fail(RAP_ERR_IO, "%s: seek failed", c->path);
    for (uint64_t left = c->data_len; st == RAP_OK && left > 0;) {
        size_t k = left < bufn ? (size_t)left : bufn;
        if (fread(buf, 1, k, c->f) != k)
            st = rap_fail(RAP_ERR_IO, "%s: read failed", c->path);
        crc = crc32(crc, buf, (uInt)k);
        left -= k;
    }
    rap_free(buf);
    *out = crc;
    return st;
}

rap_status rap_ckpt_verify(rap_ckpt *c)
{
    const char *want = rap_meta_get(&c->meta, "data_crc32");
    if (!want)
        return rap_fail(RAP_ERR_DATA, "%s: no data_crc32 in the metadata", c->path);
    uLong crc;
    RAP_TRY(crc_of_data(c, &crc));
    char hex[9];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    if (strcmp(hex, want))
        return rap_fail(RAP_ERR_DATA,
                        "%s: corrupt: the tensor data's CRC-32 is %s, the header says %s", c->path,
                        hex, want);
    return RAP_OK;
}
