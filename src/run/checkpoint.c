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

/* A plain checkpoint into a whole model: every tensor by name. */
static rap_status load_plain(rap_ckpt *c, rap_model *m, bool state)
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

/* ------------------------------------------------------------- sharded */

/* Which global table (and first row) model tensor i holds; -1 for MLP
 * tensors. */
static void origin_of(const rap_model *m, int i, int *table, int64_t *row0)
{
    rap_model_tensor_origin(m, i, table, row0);
}

char *rap_ckpt_table_list(const rap_model *m)
{
    int nm = rap_model_n_tensors(m);
    size_t cap = 64 * (size_t)(nm + 1) + 1, at = 0;
    char *s = rap_malloc(cap, "checkpoint table list");
    if (!s)
        return NULL;
    s[0] = 0;
    int k = 0;
    for (int i = 0; i < nm; i++) {
        int table;
        int64_t row0;
        origin_of(m, i, &table, &row0);
        if (table < 0)
            continue;
        at += (size_t)snprintf(s + at, cap - at, "%s%d:%lld:%lld", k++ ? "," : "", table,
                               (long long)row0, (long long)rap_model_tensor(m, i)->rows);
    }
    return s;
}

typedef struct {
    const rap_model *m;
    int *idx;     /* (n) model tensor of output tensor i */
    bool *state;  /* (n) its optimizer state instead of its weights */
} shard_src;

static rap_status fill_shard(void *ctx, int i, float *buf)
{
    shard_src *s = ctx;
    return s->state[i] ? rap_model_get_state(s->m, s->idx[i], buf)
                       : rap_model_get(s->m, s->idx[i], buf);
}

static void shard_path(const char *path, int rank, char *out, size_t n)
{
    snprintf(out, n, "%s.rank%d", path, rank);
}

rap_status rap_ckpt_save_shard(const char *path, int rank, int ranks, const char *shard_id,
                               const rap_model *m, bool state, const rap_meta *meta)
{
    int nm = rap_model_n_tensors(m);
    int cap = 2 * nm + 1;
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)cap, "checkpoint tensors");
    int *idx = rap_calloc(sizeof(int) * (size_t)cap, "checkpoint tensors");
    bool *st_of = rap_calloc(sizeof(bool) * (size_t)cap, "checkpoint tensors");
    char *tables = rap_ckpt_table_list(m);
    rap_meta mm = {0};
    rap_status st = t && idx && st_of && tables ? RAP_OK : RAP_ERR_NOMEM;
    int n = 0;
    for (int pass = 0; st == RAP_OK && pass < (state ? 2 : 1); pass++)
        for (int i = 0; st == RAP_OK && i < nm; i++) {
            int table;
            int64_t row0;
            origin_of(m, i, &table, &row0);
            if (table < 0 && rank != 0)
                continue; /* the MLPs are the same on every rank: rank 0 writes them */
            const rap_tensor_info *ti = rap_model_tensor(m, i);
            if (pass)
                state_name(ti->name, t[n].name, sizeof t[n].name);
            else
                snprintf(t[n].name, sizeof t[n].name, "%s", ti->name);
            for (int j = 0; j < n; j++)
                if (!strcmp(t[j].name, t[n].name))
                    st = rap_fail(RAP_ERR_INTERNAL, "%s: rank %d holds tensor %s twice (two row "
                                  "ranges of one table on one rank cannot be saved)", path, rank,
                                  t[n].name);
            model_shape(ti, &t[n]);
            idx[n] = i;
            st_of[n] = pass == 1;
            n++;
        }
    for (int i = 0; st == RAP_OK && meta && i < meta->n; i++)
        st = rap_meta_set(&mm, meta->key[i], "%s", meta->val[i]);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_rank", "%d", rank);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_ranks", "%d", ranks);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_id", "%s", shard_id);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_tables", "%s", tables);
    char file[1024];
    shard_path(path, rank, file, sizeof file);
    shard_src src = {m, idx, st_of};
    if (st == RAP_OK)
        st = write_file(file, &mm, t, n, fill_shard, &src, true);
    rap_meta_free(&mm);
    rap_free(tables);
    rap_free(st_of);
    rap_free(idx);
    rap_free(t);
    return st;
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

rap_status rap_ckpt_save_manifest(const char *path, int ranks, const char *shard_id,
                                  const char *const *tables, const rap_meta *meta)
{
    rap_meta mm = {0};
    rap_status st = RAP_OK;
    for (int i = 0; st == RAP_OK && meta && i < meta->n; i++)
        st = rap_meta_set(&mm, meta->key[i], "%s", meta->val[i]);
    size_t cap = 64, at = 0, at2 = 0;
    for (int r = 0; r < ranks; r++)
        cap += strlen(base_of(path)) + 24 + strlen(tables[r]);
    char *files = rap_malloc(cap, "manifest"), *sharding = rap_malloc(cap, "manifest");
    if (st == RAP_OK && (!files || !sharding))
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK) {
        files[0] = sharding[0] = 0;
        for (int r = 0; r < ranks; r++) {
            at += (size_t)snprintf(files + at, cap - at, "%s%s.rank%d", r ? "," : "",
                                   base_of(path), r);
            at2 += (size_t)snprintf(sharding + at2, cap - at2, "%s%s", r ? ";" : "", tables[r]);
        }
        st = rap_meta_set(&mm, "shard_ranks", "%d", ranks);
    }
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_id", "%s", shard_id);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_files", "%s", files);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "sharding", "%s", sharding);
    if (st == RAP_OK)
        st = write_file(path, &mm, NULL, 0, NULL, NULL, false);
    rap_free(files);
    rap_free(sharding);
    rap_meta_free(&mm);
    return st;
}

bool rap_ckpt_is_manifest(const rap_ckpt *c)
{
    return c && rap_meta_get(&c->meta, "shard_files") != NULL;
}

rap_status rap_ckpt_read_rows(rap_ckpt *c, int i, int64_t row0, int64_t rows, float *host)
{
    const rap_ckpt_tensor *t = &c->t[i];
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    if (t->ndim < 1 || row0 < 0 || rows < 0 || row0 + rows > t->shape[0])
        return rap_fail(RAP_ERR_INTERNAL, "%s: rows [%lld, %lld) of tensor %s: out of its %lld "
                        "rows", c->path, (long long)row0, (long long)(row0 + rows), t->name,
                        (long long)t->shape[0]);
    size_t e = (size_t)(rows * cols);
    if (fseeko(c->f, (off_t)(8 + c->header_len + t->begin + 4 * (uint64_t)(row0 * cols)),
               SEEK_SET) != 0 ||
        fread(host, 4, e, c->f) != e)
        return rap_fail(RAP_ERR_IO, "%s: cannot read rows of tensor %s (%s)", c->path, t->name,
                        strerror(errno));
    return RAP_OK;
}

/* One file rows can come from: its table tensors, each rows [row0,
 * row0 + rows) of global table `table`. */
typedef struct {
    rap_ckpt *c;
    bool own;
    int n;
    int *table;      /* (n) */
    int64_t *row0;   /* (n) */
    int64_t *rows;   /* (n) */
} ck_src;

/* The files of a checkpoint: one for a plain one, R for a sharded one
 * (source r is rank r's file: source 0 holds the MLP tensors). */
typedef struct {
    const char *path; /* the checkpoint as given (for messages) */
    ck_src *s;
    int n;
} ck_set;

static void set_free(ck_set *set)
{
    for (int i = 0; i < set->n; i++) {
        if (set->s[i].own)
            rap_ckpt_close(set->s[i].c);
        rap_free(set->s[i].table);
        rap_free(set->s[i].row0);
        rap_free(set->s[i].rows);
    }
    rap_free(set->s);
    memset(set, 0, sizeof *set);
}

/* Fills src's table list from "t:row0:rows,..." (shard files) or, for a
 * plain checkpoint, from its emb_l.T.weight tensors (whole tables). */
static rap_status src_tables(ck_src *src, const char *list, const char *what)
{
    rap_ckpt *c = src->c;
    int cap = c->n + 1;
    src->table = rap_calloc(sizeof(int) * (size_t)cap, "checkpoint tables");
    src->row0 = rap_calloc(sizeof(int64_t) * (size_t)cap, "checkpoint tables");
    src->rows = rap_calloc(sizeof(int64_t) * (size_t)cap, "checkpoint tables");
    if (!src->table || !src->row0 || !src->rows)
        return RAP_ERR_NOMEM;
    src->n = 0;
    if (!list) {
        for (int i = 0; i < c->n; i++) {
            int t, used = 0;
            if (sscanf(c->t[i].name, "emb_l.%d.weight%n", &t, &used) == 1 &&
                c->t[i].name[used] == 0 && c->t[i].ndim == 2) {
                if (t < 0 || t >= RAP_MAX_TABLES)
                    return rap_fail(RAP_ERR_DATA, "%s: tensor %s: table index out of range "
                                    "(0..%d)", c->path, c->t[i].name, RAP_MAX_TABLES - 1);
                src->table[src->n] = t;
                src->row0[src->n] = 0;
                src->rows[src->n++] = c->t[i].shape[0];
            }
        }
        return RAP_OK;
    }
    for (const char *p = list; *p;) {
        int t, used = 0;
        long long r0, nr;
        if (src->n >= cap || sscanf(p, "%d:%lld:%lld%n", &t, &r0, &nr, &used) != 3 || t < 0 ||
            t >= RAP_MAX_TABLES || r0 < 0 || nr < 1)
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard_tables metadata \"%s\" (%s)", c->path,
                            list, what);
        char name[64];
        snprintf(name, sizeof name, "emb_l.%d.weight", t);
        int k = rap_ckpt_find(c, name);
        if (k < 0 || c->t[k].ndim != 2 || c->t[k].shape[0] != nr)
            return rap_fail(RAP_ERR_DATA, "%s: shard_tables lists rows [%lld, %lld) of table %d, "
                            "but the file %s", c->path, r0, r0 + nr, t,
                            k < 0 ? "has no such tensor" : "holds another number of rows");
        src->table[src->n] = t;
        src->row0[src->n] = r0;
        src->rows[src->n++] = nr;
        p += used;
        if (*p == ',')
            p++;
        else if (*p)
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard_tables metadata \"%s\"", c->path,
                            list);
    }
    return RAP_OK;
}

/* Opens the sources of c (not owned; a manifest's shard files are opened,
 * checked against it and CRC-verified). */
static rap_status set_open(rap_ckpt *c, ck_set *set)
{
    memset(set, 0, sizeof *set);
    set->path = c->path;
    if (!rap_ckpt_is_manifest(c)) {
        set->s = rap_calloc(sizeof(ck_src), "checkpoint sources");
        if (!set->s)
            return RAP_ERR_NOMEM;
        set->n = 1;
        set->s[0].c = c;
        RAP_TRY(rap_ckpt_verify(c));
        return src_tables(&set->s[0], rap_meta_get(&c->meta, "shard_tables"), "plain");
    }
    const char *files = rap_meta_get(&c->meta, "shard_files");
    const char *rs = rap_meta_get(&c->meta, "shard_ranks");
    const char *id = rap_meta_get(&c->meta, "shard_id");
    int ranks = rs ? atoi(rs) : 0;
    if (ranks < 1 || ranks > 1 << 20 || !id)
        return rap_fail(RAP_ERR_DATA, "%s: corrupt sharded checkpoint manifest (shard_ranks "
                        "\"%s\", shard_id %s)", c->path, rs ? rs : "", id ? "present" : "missing");
    set->s = rap_calloc(sizeof(ck_src) * (size_t)ranks, "checkpoint sources");
    if (!set->s)
        return RAP_ERR_NOMEM;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
    const char *p = files;
    for (int r = 0; r < ranks; r++) {
        size_t l = strcspn(p, ",");
        if (l == 0)
            return rap_fail(RAP_ERR_DATA, "%s: the manifest lists %d shard files for %d ranks",
                            c->path, r, ranks);
        char file[2048];
        snprintf(file, sizeof file, "%s%.*s", dir, (int)l, p);
        p += l + (p[l] == ',');
        ck_src *src = &set->s[set->n++];
        src->own = true;
        char why[2048];
        rap_status st = rap_ckpt_open(file, &src->c);
        if (st != RAP_OK) {
            snprintf(why, sizeof why, "%s", rap_last_error());
            return rap_fail(st, "sharded checkpoint %s: shard file of rank %d: %s", c->path, r,
                            why);
        }
        const char *sid = rap_meta_get(&src->c->meta, "shard_id");
        const char *sr = rap_meta_get(&src->c->meta, "shard_rank");
        if (!sid || strcmp(sid, id) || !sr || atoi(sr) != r)
            return rap_fail(RAP_ERR_DATA, "sharded checkpoint %s: shard file %s is not rank %d "
                            "of this checkpoint (shard_id %s, the manifest's %s): written by "
                            "another save (a save interrupted between the shard files and the "
                            "manifest?)", c->path, file, r, sid ? sid : "(none)", id);
        st = rap_ckpt_verify(src->c);
        if (st != RAP_OK) {
            snprintf(why, sizeof why, "%s", rap_last_error());
            return rap_fail(st, "sharded checkpoint %s: shard file of rank %d: %s", c->path, r,
                            why);
        }
        RAP_TRY(src_tables(src, rap_meta_get(&src->c->meta, "shard_tables"), file));
    }
    return RAP_OK;
}

/* Reads (buf non-NULL) or checks (buf NULL) rows [row0, row0 + rows) of
 * global table `table`, `cols` wide, from the sources that hold them
 * (state: the optimizer accumulator instead of the weights). */
static rap_status set_table_rows(ck_set *set, int table, int64_t row0, int64_t rows, int64_t cols,
                                 bool state, float *buf)
{
    char wname[64], name[160];
    snprintf(wname, sizeof wname, "emb_l.%d.weight", table);
    if (state)
        state_name(wname, name, sizeof name);
    else
        snprintf(name, sizeof name, "%s", wname);
    int64_t covered = 0;
    for (int s = 0; s < set->n; s++) {
        ck_src *src = &set->s[s];
        for (int k = 0; k < src->n; k++) {
            if (src->table[k] != table)
                continue;
            int64_t a = src->row0[k] > row0 ? src->row0[k] : row0;
            int64_t b0 = src->row0[k] + src->rows[k], b1 = row0 + rows;
            int64_t b = b0 < b1 ? b0 : b1;
            if (a >= b)
                continue;
            int ti = rap_ckpt_find(src->c, name);
            if (ti < 0)
                return rap_fail(RAP_ERR_DATA, "%s: no tensor %s (%s)", src->c->path, name,
                                state ? "the checkpoint holds no optimizer state" : "corrupt");
            const rap_ckpt_tensor *t = &src->c->t[ti];
            if (t->ndim != 2 || t->shape[1] != cols || t->shape[0] != src->rows[k])
                return rap_fail(RAP_ERR_DATA, "%s: tensor %s has shape [%lld, %lld] in the "
                                "checkpoint, this model's rows are %lld wide", src->c->path, name,
                                (long long)t->shape[0], (long long)(t->ndim == 2 ? t->shape[1] : 1),
                                (long long)cols);
            if (buf)
                RAP_TRY(rap_ckpt_read_rows(src->c, ti, a - src->row0[k], b - a,
                                           buf + (a - row0) * cols));
            covered += b - a;
        }
    }
    if (covered != rows)
        return rap_fail(RAP_ERR_DATA, "%s: rows [%lld, %lld) of table %d (%s): %lld of them are in "
                        "the checkpoint's files%s", set->path, (long long)row0,
                        (long long)(row0 + rows), table, name, (long long)covered,
                        covered < rows ? " (the checkpoint's table is smaller, or a shard is "
                                         "missing)" : " (overlapping shards)");
    return RAP_OK;
}

/* The source holding MLP tensor `name`, its index in *ti; NULL if none. */
static ck_src *set_find(ck_set *set, const char *name, int *ti)
{
    for (int s = 0; s < set->n; s++) {
        int k = rap_ckpt_find(set->s[s].c, name);
        if (k >= 0) {
            *ti = k;
            return &set->s[s];
        }
    }
    return NULL;
}

/* Loads m from the sources: every local table's rows wherever they are. */
static rap_status load_from_set(ck_set *set, rap_model *m, bool state)
{
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    int64_t max_elems = 1;
    for (int pass = 0; pass < 2; pass++) { /* check everything, then read */
        float *buf = NULL;
        if (pass) {
            buf = rap_malloc(sizeof(float) * (size_t)max_elems, "checkpoint tensor buffer");
            if (!buf)
                return RAP_ERR_NOMEM;
        }
        rap_status st = RAP_OK;
        for (int i = 0; i < n && st == RAP_OK; i++) {
            const rap_tensor_info *ti = rap_model_tensor(m, i % nm);
            bool is_state = i >= nm;
            int table;
            int64_t row0;
            origin_of(m, i % nm, &table, &row0);
            int64_t e = ti->rows * ti->cols;
            if (e > max_elems)
                max_elems = e;
            if (table >= 0) {
                st = set_table_rows(set, table, row0, ti->rows, ti->cols, is_state, buf);
            } else {
                rap_ckpt_tensor want;
                memset(&want, 0, sizeof want);
                if (is_state)
                    state_name(ti->name, want.name, sizeof want.name);
                else
                    snprintf(want.name, sizeof want.name, "%s", ti->name);
                model_shape(ti, &want);
                int k;
                ck_src *src = set_find(set, want.name, &k);
                if (!src) {
                    st = rap_fail(RAP_ERR_DATA, "%s: no tensor %s in the checkpoint%s", set->path,
                                  want.name, set->n > 1 ? " (rank 0's shard file holds the MLPs)"
                                                        : "");
                    break;
                }
                const rap_ckpt_tensor *t = &src->c->t[k];
                bool same = t->ndim == want.ndim;
                for (int d = 0; same && d < t->ndim; d++)
                    same = t->shape[d] == want.shape[d];
                if (!same) {
                    char a[96], b[96];
                    shape_str(t, a, sizeof a);
                    shape_str(&want, b, sizeof b);
                    st = rap_fail(RAP_ERR_DATA, "%s: tensor %s has shape %s in the checkpoint, %s "
                                  "in this model", src->c->path, want.name, a, b);
                    break;
                }
                if (buf)
                    st = rap_ckpt_read(src->c, k, buf);
            }
            if (st == RAP_OK && buf)
                st = is_state ? rap_model_set_state(m, i - nm, buf) : rap_model_set(m, i, buf);
        }
        rap_free(buf);
        RAP_TRY(st);
    }
    return RAP_OK;
}

/* Output tensors of a gathered checkpoint: tables whole (table order),
 * the MLP tensors of source 0 (their order), then the state likewise. */
typedef struct {
    ck_set *set;
    int *table;    /* (n) global table or -1 */
    int *src_ti;   /* (n) MLP: tensor index in source 0 */
    bool *state;   /* (n) */
    int64_t *cols; /* (n) */
} gather_src;

static rap_status fill_gather(void *ctx, int i, float *buf)
{
    gather_src *g = ctx;
    if (g->table[i] < 0)
        return rap_ckpt_read(g->set->s[0].c, g->src_ti[i], buf);
    /* the rows of table t: from 0 to the end of the last range */
    int64_t rows = 0;
    for (int s = 0; s < g->set->n; s++)
        for (int k = 0; k < g->set->s[s].n; k++)
            if (g->set->s[s].table[k] == g->table[i] &&
                g->set->s[s].row0[k] + g->set->s[s].rows[k] > rows)
                rows = g->set->s[s].row0[k] + g->set->s[s].rows[k];
    return set_table_rows(g->set, g->table[i], 0, rows, g->cols[i], g->state[i], buf);
}

/* Writes the sources of c as one plain file (state: with the optimizer
 * tensors), metadata of c minus drop and the shard keys, plus extra. */
static rap_status gather_write(rap_ckpt *c, const char *out, bool state, const char *const *drop,
                               const char *contents)
{
    ck_set set;
    rap_status st = set_open(c, &set);
    if (st != RAP_OK) { /* set.s[0].c may be NULL (rank 0's file did not open) */
        set_free(&set);
        return st;
    }
    int cap = 2 * set.s[0].c->n + 16;
    int tmax = -1;
    for (int s = 0; st == RAP_OK && s < set.n; s++)
        for (int k = 0; k < set.s[s].n; k++)
            tmax = set.s[s].table[k] > tmax ? set.s[s].table[k] : tmax;
    cap += 2 * (tmax + 1);
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)cap, "gather tensors");
    gather_src g = {&set, rap_calloc(sizeof(int) * (size_t)cap, "gather"),
                    rap_calloc(sizeof(int) * (size_t)cap, "gather"),
                    rap_calloc(sizeof(bool) * (size_t)cap, "gather"),
                    rap_calloc(sizeof(int64_t) * (size_t)cap, "gather")};
    if (st == RAP_OK && (!t || !g.table || !g.src_ti || !g.state || !g.cols))
        st = RAP_ERR_NOMEM;
    bool has_state = st == RAP_OK && set.n > 0 && state;
    if (has_state) { /* only when the files hold it */
        has_state = false;
        for (int k = 0; k < set.s[0].c->n; k++)
            has_state |= !strncmp(set.s[0].c->t[k].name, "optimizer.", 10);
    }
    int n = 0;
    for (int pass = 0; st == RAP_OK && pass < (has_state ? 2 : 1); pass++) {
        for (int tb = 0; st == RAP_OK && tb <= tmax; tb++) {
            int64_t rows = 0, cols = 0;
            for (int s = 0; s < set.n; s++)
                for (int k = 0; k < set.s[s].n; k++)
                    if (set.s[s].table[k] == tb) {
                        int64_t e = set.s[s].row0[k] + set.s[s].rows[k];
                        rows = e > rows ? e : rows;
                        char nm[64];
                        snprintf(nm, sizeof nm, "emb_l.%d.weight", tb);
                        int ti = rap_ckpt_find(set.s[s].c, nm);
                        if (ti >= 0)
                            cols = set.s[s].c->t[ti].shape[1];
                    }
            if (rows == 0) {
                st = rap_fail(RAP_ERR_DATA, "%s: table %d is in none of the checkpoint's files "
                              "(tables 0 to %d are)", c->path, tb, tmax);
                break;
            }
            char wn[64];
            snprintf(wn, sizeof wn, "emb_l.%d.weight", tb);
            if (pass)
                state_name(wn, t[n].name, sizeof t[n].name);
            else
                snprintf(t[n].name, sizeof t[n].name, "%s", wn);
            t[n].ndim = 2;
            t[n].shape[0] = rows;
            t[n].shape[1] = cols;
            g.table[n] = tb;
            g.state[n] = pass == 1;
            g.cols[n] = cols;
            st = set_table_rows(&set, tb, 0, rows, cols, pass == 1, NULL);
            n++;
        }
        for (int k = 0; st == RAP_OK && k < set.s[0].c->n; k++) {
            const rap_ckpt_tensor *x = &set.s[0].c->t[k];
            bool opt = !strncmp(x->name, "optimizer.", 10);
            bool emb = !strncmp(x->name + (opt ? 10 : 0), "emb_l.", 6);
            if (emb || opt != (pass == 1))
                continue;
            if (n >= cap) {
                st = rap_fail(RAP_ERR_INTERNAL, "%s: too many tensors", c->path);
                break;
            }
            t[n] = *x;
            g.table[n] = -1;
            g.src_ti[n] = k;
            n++;
        }
    }
    rap_meta meta = {0};
    static const char *const shard_keys[] = {"shard_rank", "shard_ranks", "shard_id",
                                             "shard_tables", "shard_files", "sharding", NULL};
    for (int i = 0; st == RAP_OK && i < c->meta.n; i++) {
        bool skip = false;
        for (int k = 0; drop && drop[k]; k++)
            skip |= !strcmp(c->meta.key[i], drop[k]);
        for (int k = 0; shard_keys[k]; k++)
            skip |= !strcmp(c->meta.key[i], shard_keys[k]);
        if (!skip)
            st = rap_meta_set(&meta, c->meta.key[i], "%s", c->meta.val[i]);
    }
    if (st == RAP_OK && contents)
        st = rap_meta_set(&meta, "contents", "%s", contents);
    if (st == RAP_OK && n == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: no model tensors", c->path);
    if (st == RAP_OK)
        st = write_file(out, &meta, t, n, fill_gather, &g, false);
    rap_meta_free(&meta);
    rap_free(t);
    rap_free(g.table);
    rap_free(g.src_ti);
    rap_free(g.state);
    rap_free(g.cols);
    set_free(&set);
    return st;
}

rap_status rap_ckpt_load_model(rap_ckpt *c, rap_model *m, bool state)
{
    const rap_model_config *mc = rap_model_config_of(m);
    if (!rap_ckpt_is_manifest(c) && !(mc && mc->shard) &&
        !rap_meta_get(&c->meta, "shard_tables"))
        return load_plain(c, m, state);
    ck_set set;
    rap_status st = set_open(c, &set);
    if (st == RAP_OK)
        st = load_from_set(&set, m, state);
    set_free(&set);
    return st;
}

rap_status rap_ckpt_gather(const char *in, const char *out, bool state)
{
    rap_ckpt *c;
    RAP_TRY(rap_ckpt_open(in, &c));
    rap_status st = gather_write(c, out, state, NULL, NULL);
    rap_ckpt_close(c);
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
    if (rap_ckpt_is_manifest(c)) { /* sharded: every table gathered whole */
        rap_status gs = gather_write(c, out, false, drop, "weights");
        rap_ckpt_close(c);
        return gs;
    }
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
