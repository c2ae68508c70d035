/* checkpoint.c -- safetensors checkpoints (checkpoint.h). */
#include "run/checkpoint.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
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

/* ------------------------------------------------------- string builder */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
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

/* A JSON string literal (quotes, escapes; other bytes as they are). */
static void sb_json(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_fmt(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* ------------------------------------------------------------- writing */

/* Fills buf (the tensor's floats) with tensor i. */
typedef rap_status (*fill_fn)(void *ctx, int i, float *buf);

static int64_t n_elems(const rap_ckpt_tensor *t)
{
    int64_t e = 1;
    for (int d = 0; d < t->ndim; d++)
        e *= t->shape[d];
    return e;
}

static rap_status fsync_dir_of(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    int fd = open(dirname(tmp), O_RDONLY);
    if (fd < 0)
        return RAP_OK; /* best effort: some file systems refuse */
    fsync(fd);
    close(fd);
    return RAP_OK;
}

/* Writes a safetensors file of n tensors (names, shapes in t; begin/end
 * computed here) with metadata, atomically. check_finite refuses NaN/inf. */
static rap_status write_file(const char *path, const rap_meta *meta, rap_ckpt_tensor *t, int n,
                             fill_fn fill, void *ctx, bool check_finite)
{
    sbuf h = {0};
    uint64_t at = 0;
    int64_t max_elems = 1;
    for (int i = 0; i < n; i++) {
        int64_t e = n_elems(&t[i]);
        t[i].begin = at;
        at += 4 * (uint64_t)e;
        t[i].end = at;
        if (e > max_elems)
            max_elems = e;
    }
    sb_str(&h, "{\"__metadata__\":{\"format\":");
    sb_json(&h, RAP_CKPT_FORMAT);
    sb_fmt(&h, ",\"format_version\":\"%d\"", RAP_CKPT_VERSION);
    for (int i = 0; meta && i < meta->n; i++) {
        const char *k = meta->key[i];
        if (!strcmp(k, "format") || !strcmp(k, "format_version") || !strcmp(k, "data_crc32"))
            continue;
        sb_str(&h, ",");
        sb_json(&h, k);
        sb_str(&h, ":");
        sb_json(&h, meta->val[i]);
    }
    sb_str(&h, ",\"data_crc32\":\"");
    size_t crc_at = h.n; /* 8 placeholder digits, patched after the data */
    sb_str(&h, "00000000\"}");
    for (int i = 0; i < n; i++) {
        sb_str(&h, ",");
        sb_json(&h, t[i].name);
        sb_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++)
            sb_fmt(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        sb_fmt(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t[i].begin,
               (unsigned long long)t[i].end);
    }
    sb_str(&h, "}");
    while (h.n % 8)
        sb_str(&h, " ");
    if (h.oom) {
        rap_free(h.p);
        return RAP_ERR_NOMEM;
    }

    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    float *buf = rap_malloc(sizeof(float) * (size_t)max_elems, "checkpoint tensor buffer");
    FILE *f = buf ? fopen(tmp, "wb") : NULL;
    rap_status st = RAP_OK;
    if (!buf)
        st = RAP_ERR_NOMEM;
    else if (!f)
        st = rap_fail(RAP_ERR_IO, "%s: cannot create (%s)", tmp, strerror(errno));
    uint8_t len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (uint8_t)((uint64_t)h.n >> (8 * k));
    if (st == RAP_OK && (fwrite(len8, 1, 8, f) != 8 || fwrite(h.p, 1, h.n, f) != h.n))
        st = rap_fail(RAP_ERR_IO, "%s: write failed (%s)", tmp, strerror(errno));
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; st == RAP_OK && i < n; i++) {
        size_t e = (size_t)n_elems(&t[i]);
        st = fill(ctx, i, buf);
        if (st != RAP_OK)
            break;
        if (check_finite)
            for (size_t j = 0; j < e; j++)
                if (!isfinite(buf[j])) {
                    st = rap_fail(RAP_ERR_DATA,
                                  "%s: tensor %s holds %s at element %zu: not writing a "
                                  "poisoned checkpoint (%s left as it was)",
                                  path, t[i].name, isnan(buf[j]) ? "NaN" : "inf", j, path);
                    break;
                }
        if (st != RAP_OK)
            break;
        /* crc32 takes a uInt length: feed it in pieces below 4 GiB */
        const uint8_t *p = (const uint8_t *)buf;
        for (size_t left = 4 * e; left > 0;) {
            uInt k = left > (1u << 30) ? (1u << 30) : (uInt)left;
            crc = crc32(crc, p, k);
            p += k;
            left -= k;
        }
        if (fwrite(buf, 4, e, f) != e)
            st = rap_fail(RAP_ERR_IO, "%s: write failed (%s; disk full?)", tmp, strerror(errno));
    }
    if (st == RAP_OK) {
        char hex[9];
        snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
        if (fseek(f, (long)(8 + crc_at), SEEK_SET) != 0 || fwrite(hex, 1, 8, f) != 8)
            st = rap_fail(RAP_ERR_IO, "%s: write failed (%s)", tmp, strerror(errno));
    }
    if (st == RAP_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = rap_fail(RAP_ERR_IO, "%s: flush failed (%s; disk full?)", tmp, strerror(errno));
    if (f && fclose(f) != 0 && st == RAP_OK)
        st = rap_fail(RAP_ERR_IO, "%s: close failed (%s)", tmp, strerror(errno));
    if (st == RAP_OK && rename(tmp, path) != 0)
        st = rap_fail(RAP_ERR_IO, "%s: cannot rename to %s (%s)", tmp, path, strerror(errno));
    if (st == RAP_OK)
        fsync_dir_of(path);
    else if (f)
        remove(tmp);
    rap_free(buf);
    rap_free(h.p);
    return st;
}

typedef struct {
    const rap_model *m;
    int n_model; /* tensors of the model; state tensors follow */
} model_src;

static rap_status fill_model(void *ctx, int i, float *buf)
{
    model_src *s = ctx;
    if (i < s->n_model)
        return rap_model_get(s->m, i, buf);
    return rap_model_get_state(s->m, i - s->n_model, buf);
}

/* Shape of a model tensor as PyTorch has it: biases are 1-D. */
static void model_shape(const rap_tensor_info *ti, rap_ckpt_tensor *t)
{
    size_t nl = strlen(ti->name);
    bool bias = nl > 5 && !strcmp(ti->name + nl - 5, ".bias");
    if (bias) {
        t->ndim = 1;
        t->shape[0] = ti->rows * ti->cols;
    } else {
        t->ndim = 2;
        t->shape[0] = ti->rows;
        t->shape[1] = ti->cols;
    }
}

static void state_name(const char *name, char *out, size_t n)
{
    snprintf(out, n, "optimizer.%s.sum", name);
}

rap_status rap_ckpt_save(const char *path, const rap_model *m, bool state, const rap_meta *meta)
{
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)(n ? n : 1), "checkpoint tensors");
    if (!t)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i % nm);
        if (i < nm)
            snprintf(t[i].name, sizeof t[i].name, "%s", ti->name);
        else
            state_name(ti->name, t[i].name, sizeof t[i].name);
        model_shape(ti, &t[i]);
    }
    model_src src = {m, nm};
    rap_status st = write_file(path, meta, t, n, fill_model, &src, true);
    rap_free(t);
    return st;
}

/* ------------------------------------------------------------- JSON */

typedef struct {
    const char *p, *end;
    const char *path;
    const char *start;
} jp;

static rap_status jerr(jp *j, const char *what)
{
    return rap_fail(RAP_ERR_DATA, "%s: corrupt checkpoint header at byte %ld of the JSON: %s",
                    j->path, (long)(j->p - j->start), what);
}

static void jws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool jlit(jp *j, char c)
{
    jws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* A string into out (cap n, truncated silently beyond; *len = full length). */
static rap_status jstr(jp *j, char *out, size_t n, size_t *len)
{
    if (!jlit(j, '"'))
        return jerr(j, "expected a string");
    size_t k = 0;
    while (j->p < j->end && *j->p != '"') {
        unsigned c = (unsigned char)*j->p++;
        if (c == '\\') {
            if (j->p >= j->end)
                break;
            char e = *j->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case '/': case '\\': case '"': c = (unsigned char)e; break;
            case 'u': {
                if (j->end - j->p < 4)
                    return jerr(j, "bad \\u escape");
                char hx[5] = {j->p[0], j->p[1], j->p[2], j->p[3], 0};
                char *e2;
                unsigned long u = strtoul(hx, &e2, 16);
                if (*e2)
                    return jerr(j, "bad \\u escape");
                j->p += 4;
                /* UTF-8 encode (BMP; surrogates kept as they are) */
                char u8[3];
                int m = 0;
                if (u < 0x80) {
                    u8[m++] = (char)u;
                } else if (u < 0x800) {
                    u8[m++] = (char)(0xc0 | (u >> 6));
                    u8[m++] = (char)(0x80 | (u & 0x3f));
                } else {
                    u8[m++] = (char)(0xe0 | (u >> 12));
                    u8[m++] = (char)(0x80 | ((u >> 6) & 0x3f));
                    u8[m++] = (char)(0x80 | (u & 0x3f));
                }
                for (int q = 0; q < m; q++, k++)
                    if (k + 1 < n)
                        out[k] = u8[q];
                continue;
            }
            default:
                return jerr(j, "bad escape in a string");
            }
        } else if (c < 0x20) {
            return jerr(j, "control character in a string");
        }
        if (k + 1 < n)
            out[k] = (char)c;
        k++;
    }
    if (j->p >= j->end)
        return jerr(j, "unterminated string");
    j->p++;
    if (n)
        out[k < n ? k : n - 1] = 0;
    if (len)
        *len = k;
    return RAP_OK;
}

/* A non-negative integer. */
static rap_status juint(jp *j, uint64_t *v)
{
    jws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return jerr(j, "expected a non-negative integer");
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (x > (UINT64_MAX - 9) / 10)
            return jerr(j, "integer too large");
        x = x * 10 + (uint64_t)(*j->p++ - '0');
    }
    *v = x;
    return RAP_OK;
}

static rap_status jskip(jp *j, int depth)
{
    if (depth > 64)
        return jerr(j, "nesting too deep");
    jws(j);
    if (j->p >= j->end)
        return jerr(j, "unexpected end");
    char c = *j->p;
    if (c == '"')
        return jstr(j, NULL, 0, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (jlit(j, close))
            return RAP_OK;
        do {
            if (c == '{') {
                RAP_TRY(jstr(j, NULL, 0, NULL));
                if (!jlit(j, ':'))
                    return jerr(j, "expected ':'");
            }
            RAP_TRY(jskip(j, depth + 1));
        } while (jlit(j, ','));
        if (!jlit(j, close))
            return jerr(j, "expected ',' or the closing bracket");
        return RAP_OK;
    }
    /* number or literal */
    const char *s = j->p;
    while (j->p < j->end && strchr("+-0123456789.eEtruefalsn", *j->p))
        j->p++;
    if (j->p == s)
        return jerr(j, "unexpected character");
    return RAP_OK;
}

static rap_status parse_tensor(jp *j, rap_ckpt_tensor *t)
{
    if (!jlit(j, '{'))
        return jerr(j, "expected a tensor object");
    bool has_dtype = false, has_shape = false, has_off = false;
    if (!jlit(j, '}'))
        do {
            char key[64];
            RAP_TRY(jstr(j, key, sizeof key, NULL));
            if (!jlit(j, ':'))
                return jerr(j, "expected ':'");
            if (!strcmp(key, "dtype")) {
                char dt[32];
                RAP_TRY(jstr(j, dt, sizeof dt, NULL));
                if (strcmp(dt, "F32"))
                    return rap_fail(RAP_ERR_DATA, "%s: tensor %s has dtype %s; rap reads F32 only",
                                    j->path, t->name, dt);
                has_dtype = true;
            } else if (!strcmp(key, "shape")) {
                if (!jlit(j, '['))
                    return jerr(j, "expected the shape array");
                t->ndim = 0;
                if (!jlit(j, ']')) {
                    do {
                        uint64_t v;
                        RAP_TRY(juint(j, &v));
                        if (t->ndim >= 4 || v > (1ull << 40))
                            return jerr(j, "shape with more than 4 dimensions or too large");
                        t->shape[t->ndim++] = (int64_t)v;
                    } while (jlit(j, ','));
                    if (!jlit(j, ']'))
                        return jerr(j, "expected ']' after the shape");
                }
                has_shape = true;
            } else if (!strcmp(key, "data_offsets")) {
                if (!jlit(j, '['))
                    return jerr(j, "expected the data_offsets array");
                RAP_TRY(juint(j, &t->begin));
                if (!jlit(j, ','))
                    return jerr(j, "data_offsets needs two numbers");
                RAP_TRY(juint(j, &t->end));
                if (!jlit(j, ']'))
                    return jerr(j, "data_offsets needs two numbers");
                has_off = true;
            } else {
                RAP_TRY(jskip(j, 1));
            }
        } while (jlit(j, ','));
    if (!jlit(j, '}'))
        return jerr(j, "expected '}' after a tensor");
    if (!has_dtype || !has_shape || !has_off)
        return rap_fail(RAP_ERR_DATA, "%s: tensor %s lacks dtype, shape or data_offsets", j->path,
                        t->name);
    return RAP_OK;
}

static rap_status parse_header(rap_ckpt *c, const char *text, size_t n)
{
    jp j = {text, text + n, c->path, text};
    if (!jlit(&j, '{'))
        return jerr(&j, "the header does not start with '{'");
    int cap = 0;
    if (!jlit(&j, '}'))
        do {
            char name[sizeof c->t[0].name];
            size_t len;
            RAP_TRY(jstr(&j, name, sizeof name, &len));
            if (len >= sizeof name)
                return jerr(&j, "tensor name too long");
            if (!jlit(&j, ':'))
                return jerr(&j, "expected ':'");
            if (!strcmp(name, "__metadata__")) {
                if (!jlit(&j, '{'))
                    return jerr(&j, "__metadata__ must be an object of strings");
                if (!jlit(&j, '}'))
                    do {
                        char key[256];
                        RAP_TRY(jstr(&j, key, sizeof key, NULL));
                        if (!jlit(&j, ':'))
                            return jerr(&j, "expected ':'");
                        jws(&j);
                        const char *s = j.p;
                        size_t vl;
                        RAP_TRY(jstr(&j, NULL, 0, &vl));
                        char *v = rap_malloc(vl + 1, "metadata");
                        if (!v)
                            return RAP_ERR_NOMEM;
                        j.p = s;
                        rap_status st = jstr(&j, v, vl + 1, NULL);
                        if (st == RAP_OK)
                            st = rap_meta_set(&c->meta, key, "%s", v);
                        rap_free(v);
                        RAP_TRY(st);
                    } while (jlit(&j, ','));
                if (!jlit(&j, '}'))
                    return jerr(&j, "expected '}' after __metadata__");
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
        } while (jlit(&j, ','));
    if (!jlit(&j, '}'))
        return jerr(&j, "expected ',' or '}'");
    jws(&j);
    if (j.p != j.end)
        return jerr(&j, "bytes after the JSON object (only spaces may pad it)");
    return RAP_OK;
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
        uint64_t want = 4 * (uint64_t)n_elems(t);
        if (t->end < t->begin || t->end - t->begin != want)
            st = rap_fail(RAP_ERR_DATA,
                          "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, its shape "
                          "needs %llu",
                          c->path, t->name, (unsigned long long)t->begin,
                          (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                          (unsigned long long)want);
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

rap_status rap_ckpt_open(const char *path, rap_ckpt **out)
{
    *out = NULL;
    rap_ckpt *c = rap_calloc(sizeof *c, "checkpoint");
    if (!c)
        return RAP_ERR_NOMEM;
    snprintf(c->path, sizeof c->path, "%s", path);
    rap_status st = RAP_OK;
    char *text = NULL;
    struct stat sb;
    c->f = fopen(path, "rb");
    if (!c->f || fstat(fileno(c->f), &sb) != 0) {
        st = rap_fail(RAP_ERR_IO, "%s: cannot open checkpoint (%s)", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = rap_fail(RAP_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len8[8];
    if (size < 8 || fread(len8, 1, 8, c->f) != 8) {
        st = rap_fail(RAP_ERR_DATA, "%s: truncated: %llu bytes, a checkpoint starts with an "
                      "8-byte header length", path, (unsigned long long)size);
        goto done;
    }
    uint64_t n = 0;
    for (int k = 0; k < 8; k++)
        n |= (uint64_t)len8[k] << (8 * k);
    if (n < 2 || n > RAP_CKPT_MAX_HEADER) {
        st = rap_fail(RAP_ERR_DATA, "%s: not a safetensors checkpoint (header length %llu)", path,
                      (unsigned long long)n);
        goto done;
    }
    if (8 + n > size) {
        st = rap_fail(RAP_ERR_DATA, "%s: truncated: the header needs %llu bytes, the file has %llu",
                      path, (unsigned long long)(8 + n), (unsigned long long)size);
        goto done;
    }
    c->header_len = n;
    c->data_len = size - 8 - n;
    text = rap_malloc(n, "checkpoint header");
    if (!text) {
        st = RAP_ERR_NOMEM;
        goto done;
    }
    if (fread(text, 1, n, c->f) != n) {
        st = rap_fail(RAP_ERR_IO, "%s: read failed", path);
        goto done;
    }
    st = parse_header(c, text, n);
    if (st == RAP_OK)
        st = check_layout(c);
    if (st == RAP_OK) {
        const char *fmt = rap_meta_get(&c->meta, "format");
        const char *ver = rap_meta_get(&c->meta, "format_version");
        if (!fmt || strcmp(fmt, RAP_CKPT_FORMAT))
            st = rap_fail(RAP_ERR_DATA, "%s: a safetensors file, but not a rap checkpoint (format "
                          "\"%s\", expected \"%s\")", path, fmt ? fmt : "", RAP_CKPT_FORMAT);
        else if (!ver || atoi(ver) != RAP_CKPT_VERSION)
            st = rap_fail(RAP_ERR_DATA, "%s: checkpoint format version %s, this rap reads %d",
                          path, ver ? ver : "(none)", RAP_CKPT_VERSION);
    }
done:
    rap_free(text);
    if (st != RAP_OK) {
        rap_ckpt_close(c);
        return st;
    }
    *out = c;
    return RAP_OK;
}

rap_status rap_ckpt_read(rap_ckpt *c, int i, float *host)
{
    const rap_ckpt_tensor *t = &c->t[i];
    size_t e = (size_t)n_elems(t);
    if (fseeko(c->f, (off_t)(8 + c->header_len + t->begin), SEEK_SET) != 0 ||
        fread(host, 4, e, c->f) != e)
        return rap_fail(RAP_ERR_IO, "%s: cannot read tensor %s (%s)", c->path, t->name,
                        strerror(errno));
    return RAP_OK;
}

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

static void shape_str(const rap_ckpt_tensor *t, char *out, size_t n)
{
    int k = snprintf(out, n, "[");
    for (int d = 0; d < t->ndim && k < (int)n; d++)
        k += snprintf(out + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < (int)n)
        snprintf(out + k, n - (size_t)k, "]");
}

rap_status rap_ckpt_load_model(rap_ckpt *c, rap_model *m, bool state)
{
    RAP_TRY(rap_ckpt_verify(c));
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    /* check every name and shape before touching the model */
    int64_t max_elems = 1;
    for (int i = 0; i < n; i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i % nm);
        rap_ckpt_tensor want;
        memset(&want, 0, sizeof want);
        if (i < nm)
            snprintf(want.name, sizeof want.name, "%s", ti->name);
        else
            state_name(ti->name, want.name, sizeof want.name);
        model_shape(ti, &want);
        int k = rap_ckpt_find(c, want.name);
        if (k < 0)
            return rap_fail(RAP_ERR_DATA, "%s: no tensor %s (the model has %d tensors%s, the "
                            "checkpoint %d)", c->path, want.name, nm,
                            state ? " plus optimizer state" : "", c->n);
        const rap_ckpt_tensor *t = &c->t[k];
        bool same = t->ndim == want.ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == want.shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(t, a, sizeof a);
            shape_str(&want, b, sizeof b);
            return rap_fail(RAP_ERR_DATA, "%s: tensor %s has shape %s in the checkpoint, %s in "
                            "this model", c->path, want.name, a, b);
        }
        if (n_elems(t) > max_elems)
            max_elems = n_elems(t);
    }
    float *buf = rap_malloc(sizeof(float) * (size_t)max_elems, "checkpoint tensor buffer");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    for (int i = 0; i < n && st == RAP_OK; i++) {
        const rap_tensor_info *ti = rap_model_tensor(m, i % nm);
        char name[160];
        if (i < nm)
            snprintf(name, sizeof name, "%s", ti->name);
        else
            state_name(ti->name, name, sizeof name);
        st = rap_ckpt_read(c, rap_ckpt_find(c, name), buf);
        if (st == RAP_OK)
            st = i < nm ? rap_model_set(m, i, buf) : rap_model_set_state(m, i - nm, buf);
    }
    rap_free(buf);
    return st;
}

/* ------------------------------------------------------------- export */

typedef struct {
    rap_ckpt *c;
    int *src; /* (n) source tensor of each output tensor */
} export_src;

static rap_status fill_export(void *ctx, int i, float *buf)
{
    export_src *e = ctx;
    return rap_ckpt_read(e->c, e->src[i], buf);
}

rap_status rap_ckpt_export(const char *in, const char *out, const char *const *drop)
{
    rap_ckpt *c;
    RAP_TRY(rap_ckpt_open(in, &c));
    rap_status st = rap_ckpt_verify(c);
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)(c->n ? c->n : 1), "export tensors");
    int *src = rap_calloc(sizeof(int) * (size_t)(c->n ? c->n : 1), "export tensors");
    rap_meta meta = {0};
    if (st == RAP_OK && (!t || !src))
        st = RAP_ERR_NOMEM;
    int n = 0;
    for (int i = 0; st == RAP_OK && i < c->n; i++) {
        if (!strncmp(c->t[i].name, "optimizer.", 10))
            continue;
        t[n] = c->t[i];
        src[n++] = i;
    }
    for (int i = 0; st == RAP_OK && i < c->meta.n; i++) {
        bool skip = false;
        for (int k = 0; drop && drop[k]; k++)
            skip |= !strcmp(c->meta.key[i], drop[k]);
        if (!skip)
            st = rap_meta_set(&meta, c->meta.key[i], "%s", c->meta.val[i]);
    }
    if (st == RAP_OK)
        st = rap_meta_set(&meta, "contents", "weights");
    if (st == RAP_OK && n == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: no model tensors to export", in);
    export_src e = {c, src};
    if (st == RAP_OK)
        st = write_file(out, &meta, t, n, fill_export, &e, false);
    rap_meta_free(&meta);
    rap_free(t);
    rap_free(src);
    rap_ckpt_close(c);
    return st;
}
