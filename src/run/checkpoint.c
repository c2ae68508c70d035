/* checkpoint.c -- rap checkpoints: format and version, tensor names, plain
 * save and load, the choice of loader (checkpoint.h). */
#include "run/checkpoint_internal.h"

#include "core/checked.h"
#include "core/core.h"
#include "model/half.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- shared */

rap_status rap_ckpt_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t, int n,
                          rap_safetensors_fill fill, void *ctx, bool check_finite,
                          rap_out_lock *held)
{
    static const char *const own[] = {"format", "format_version", "data_crc32", NULL};
    rap_meta m = {0};
    rap_status st = rap_meta_set(&m, "format", "%s", RAP_CKPT_FORMAT);
    if (st == RAP_OK)
        st = rap_meta_set(&m, "format_version", "%d", RAP_CKPT_VERSION);
    if (st == RAP_OK)
        st = rap_meta_copy(&m, meta, own, NULL);
    if (st == RAP_OK)
        st = rap_safetensors_write(path, &m, t, n, fill, ctx, check_finite, held);
    rap_meta_free(&m);
    return st;
}

void rap_ckpt_state_name(const char *name, char *out, size_t n)
{
    snprintf(out, n, "optimizer.%s.sum", name);
}

rap_st_dtype rap_ckpt_dtype_of(rap_emb_dtype t)
{
    return t == RAP_EMB_BF16 ? RAP_ST_BF16 : t == RAP_EMB_FP16 ? RAP_ST_F16 : RAP_ST_F32;
}

void rap_ckpt_model_tensor(const rap_model *m, int i, bool state, rap_ckpt_tensor *out)
{
    const rap_tensor_info *ti = rap_model_tensor(m, i);
    memset(out, 0, sizeof *out);
    int64_t rows = ti->rows, cols = ti->cols;
    if (state) {
        rap_ckpt_state_name(ti->name, out->name, sizeof out->name);
        if (rap_model_state_shape(m, i, &rows, &cols) != RAP_OK) { /* SGD: no state */
            rap_clear_error();
            rows = ti->rows;
            cols = ti->cols;
        }
        out->dtype = RAP_ST_F32;
    } else {
        snprintf(out->name, sizeof out->name, "%s", ti->name);
        out->dtype = rap_ckpt_dtype_of(rap_model_tensor_dtype(m, i));
    }
    size_t nl = strlen(ti->name);
    bool bias = nl > 5 && !strcmp(ti->name + nl - 5, ".bias");
    if (bias) {
        out->ndim = 1;
        out->shape[0] = rows * cols;
    } else {
        out->ndim = 2;
        out->shape[0] = rows;
        out->shape[1] = cols;
    }
}

rap_status rap_ckpt_fill_tensor(const rap_model *m, int i, bool state, void *buf)
{
    const int64_t rows = rap_model_tensor(m, i)->rows;
    if (state)
        return rap_model_get_state_rows(m, i, 0, rows, buf);
    return rap_model_get_rows(m, i, 0, rows, rap_model_tensor_dtype(m, i), buf);
}

/* "[a, b]" */
static void shape_str(const rap_ckpt_tensor *t, char *out, size_t n)
{
    int k = snprintf(out, n, "[");
    for (int d = 0; d < t->ndim && k < (int)n; d++)
        k += snprintf(out + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < (int)n)
        snprintf(out + k, n - (size_t)k, "]");
}

rap_status rap_ckpt_check_shape(const char *path, const rap_ckpt_tensor *t,
                                const rap_ckpt_tensor *want)
{
    bool same = t->ndim == want->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = t->shape[d] == want->shape[d];
    if (same)
        return RAP_OK;
    char a[96], b[96];
    shape_str(t, a, sizeof a);
    shape_str(want, b, sizeof b);
    return rap_fail(RAP_ERR_DATA, "%s: tensor %s has shape %s in the checkpoint, %s in this model",
                    path, want->name, a, b);
}

/* ------------------------------------------------------------- converting */

rap_status rap_ckpt_check_loadable(const char *path, const rap_ckpt_tensor *t, const rap_model *m,
                                   int i, bool state)
{
    rap_ckpt_tensor want;
    rap_ckpt_model_tensor(m, i, state, &want);
    if (!state)
        return rap_ckpt_check_shape(path, t, &want);
    if (t->dtype != RAP_ST_F32)
        return rap_fail(RAP_ERR_DATA, "%s: tensor %s is %s; optimizer state is F32", path,
                        t->name, rap_st_dtype_name(t->dtype));
    const int64_t d = rap_model_tensor(m, i)->cols;
    int tb = -1; /* a table (>= 0) or an MLP tensor */
    rap_model_tensor_origin(m, i, &tb, NULL);
    if (tb >= 0 && t->ndim == 2 && want.ndim == 2 && t->shape[0] == want.shape[0] && d > 1) {
        if (want.shape[1] == 1 && t->shape[1] == d)
            return RAP_OK; /* Adagrad's per-element sums into row-wise state: their row means */
        if (want.shape[1] == d && t->shape[1] == 1)
            return rap_fail(RAP_ERR_DATA, "%s: tensor %s holds row-wise Adagrad's state (one "
                            "value a row, the mean of the row's squared gradients), this model "
                            "keeps Adagrad's per element: the per-element sums cannot be "
                            "recovered from their row means (resume with --optimizer "
                            "rowwise-adagrad)", path, want.name);
    }
    return rap_ckpt_check_shape(path, t, &want);
}

/* The n 16-bit values of type dt at buf widened to floats in place
 * (exact), from the last: float j covers halves 2j and 2j + 1, read
 * before. Bytes move by memcpy: the one buffer is read as one type and
 * written as another. */
static void widen_in_place(void *buf, rap_st_dtype dt, int64_t n)
{
    char *p = buf;
    for (int64_t j = n - 1; j >= 0; j--) {
        uint16_t v;
        memcpy(&v, p + 2 * j, sizeof v);
        const float x = dt == RAP_ST_F16 ? rap_fp16_to_f32(v) : rap_bf16_to_f32(v);
        memcpy(p + 4 * j, &x, sizeof x);
    }
}

/* The n floats at buf rounded to nearest even into type dt (16 bits) in
 * place, from the first: half j lands on bytes of float j / 2, read
 * before (memcpy, as above). RAP_ERR_DATA naming element e0 + j of tensor
 * name (of the file at path) when a finite value rounds to inf: beyond the
 * type's range. */
static rap_status narrow_in_place(const char *path, const char *name, int64_t e0, void *buf,
                                  rap_st_dtype dt, int64_t n)
{
    char *p = buf;
    const uint16_t exp = dt == RAP_ST_F16 ? 0x7c00 : 0x7f80;
    for (int64_t j = 0; j < n; j++) {
        float x;
        memcpy(&x, p + 4 * j, sizeof x);
        const uint16_t v = dt == RAP_ST_F16 ? rap_f32_to_fp16_rn(x) : rap_f32_to_bf16_rn(x);
        if ((v & exp) == exp && isfinite(x))
            return rap_fail(RAP_ERR_DATA, "%s: tensor %s element %lld is %g, beyond the range "
                            "of %s (the model's --emb-dtype)", path, name, (long long)(e0 + j),
                            (double)x, rap_st_dtype_name(dt));
        memcpy(p + 2 * j, &v, sizeof v);
    }
    return RAP_OK;
}

rap_status rap_ckpt_put_rows(const char *path, rap_model *m, int i, bool state, int64_t row0,
                             int64_t n, rap_st_dtype dt, int64_t fcols, void *buf)
{
    if (!state) {
        const rap_emb_dtype own = rap_model_tensor_dtype(m, i);
        const rap_st_dtype ost = rap_ckpt_dtype_of(own);
        if (dt != ost) { /* through fp32: 16 -> 32 exact, 32 -> 16 to nearest even */
            if (dt != RAP_ST_F32)
                widen_in_place(buf, dt, n * fcols);
            if (ost != RAP_ST_F32)
                RAP_TRY(narrow_in_place(path, rap_model_tensor(m, i)->name, row0 * fcols, buf, ost,
                                        n * fcols));
        }
        return rap_model_set_rows(m, i, row0, n, own, buf);
    }
    int64_t scols = 0;
    RAP_TRY(rap_model_state_shape(m, i, NULL, &scols));
    if (fcols != scols) { /* per-element sums into one value a row: their means */
        float *x = buf;
        for (int64_t r = 0; r < n; r++) {
            double sum = 0;
            for (int64_t e = 0; e < fcols; e++)
                sum += x[r * fcols + e];
            x[r] = (float)(sum / (double)fcols);
        }
    }
    return rap_model_set_state_rows(m, i, row0, n, buf);
}

size_t rap_ckpt_put_bytes(const rap_model *m, int i, bool state, int64_t n, rap_st_dtype dt,
                          int64_t fcols)
{
    const int64_t cols = rap_model_tensor(m, i)->cols;
    if (!state && dt == rap_ckpt_dtype_of(rap_model_tensor_dtype(m, i)))
        return rap_st_dtype_size(dt) * (size_t)(n * fcols);
    return sizeof(float) * (size_t)(n * (fcols > cols ? fcols : cols));
}

/* ------------------------------------------------------------- the update counter */

rap_status rap_ckpt_meta_with_step(const rap_meta *meta, const rap_model *m, rap_meta *out)
{
    uint64_t step = 0;
    RAP_TRY(rap_model_get_emb_step(m, &step));
    RAP_TRY(rap_meta_copy(out, meta, NULL, NULL));
    return rap_meta_set(out, RAP_CKPT_EMB_STEP, "%llu", (unsigned long long)step);
}

rap_status rap_ckpt_emb_step_of(const char *path, const rap_meta *meta, bool *has,
                                uint64_t *step)
{
    const char *v = rap_meta_get(meta, RAP_CKPT_EMB_STEP);
    *has = v != NULL;
    *step = 0;
    if (!v)
        return RAP_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!v[0] || *end || errno || v[0] == '-')
        return rap_fail(RAP_ERR_DATA, "%s: metadata %s is \"%.40s\", expected a count", path,
                        RAP_CKPT_EMB_STEP, v);
    *step = (uint64_t)x;
    return RAP_OK;
}

/* ------------------------------------------------------------- saving */

typedef struct {
    const rap_model *m;
    int n_model; /* tensors of the model; state tensors follow */
} model_src;

static rap_status fill_model(void *ctx, int i, void *buf)
{
    model_src *s = ctx;
    return rap_ckpt_fill_tensor(s->m, i % s->n_model, i >= s->n_model, buf);
}

rap_status rap_ckpt_save(const char *path, const rap_model *m, bool state, const rap_meta *meta,
                         rap_out_lock *held)
{
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)(n ? n : 1), "checkpoint tensors");
    if (!t)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < n; i++)
        rap_ckpt_model_tensor(m, i % nm, i >= nm, &t[i]);
    model_src src = {m, nm};
    rap_meta mm = {0};
    rap_status st = rap_ckpt_meta_with_step(meta, m, &mm);
    if (st == RAP_OK)
        st = rap_ckpt_write(path, &mm, t, n, fill_model, &src, true, held);
    rap_meta_free(&mm);
    rap_free(t);
    return st;
}

/* ------------------------------------------------------------- opening */

rap_status rap_ckpt_open(const char *path, rap_ckpt **out)
{
    rap_ckpt *c;
    RAP_TRY(rap_safetensors_open(path, &c));
    const char *fmt = rap_meta_get(&c->meta, "format");
    const char *ver = rap_meta_get(&c->meta, "format_version");
    rap_status st = RAP_OK;
    int v = 0;
    if (!fmt || strcmp(fmt, RAP_CKPT_FORMAT))
        st = rap_fail(RAP_ERR_DATA, "%s: a safetensors file, but not a rap checkpoint (format "
                      "\"%s\", expected \"%s\")", path, fmt ? fmt : "", RAP_CKPT_FORMAT);
    else if (!ver || !rap_parse_int_ok(ver, 0, INT32_MAX, &v, NULL) || v != RAP_CKPT_VERSION)
        st = rap_fail(RAP_ERR_DATA, "%s: checkpoint format version %s, this rap reads %d", path,
                      ver ? ver : "(none)", RAP_CKPT_VERSION);
    if (st != RAP_OK) {
        rap_ckpt_close(c);
        return st;
    }
    *out = c;
    return RAP_OK;
}

/* ------------------------------------------------------------- loading */

/* The columns a row of file tensor t has when it holds `rows` rows (a
 * bias is 1-D). */
static int64_t file_cols(const rap_ckpt_tensor *t, int64_t rows)
{
    if (t->ndim == 2)
        return t->shape[1];
    return rows > 0 ? rap_ckpt_tensor_elems(t) / rows : 0;
}

/* A plain checkpoint into a whole model: every tensor by name. */
static rap_status load_plain(rap_ckpt *c, rap_model *m, bool state)
{
    RAP_TRY(rap_ckpt_verify(c));
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    /* check every name, shape and type before touching the model */
    size_t most = 4; /* bytes of the largest tensor, as read or as converted */
    for (int i = 0; i < n; i++) {
        rap_ckpt_tensor want;
        rap_ckpt_model_tensor(m, i % nm, i >= nm, &want);
        int k = rap_ckpt_find(c, want.name);
        if (k < 0)
            return rap_fail(RAP_ERR_DATA, "%s: no tensor %s (the model has %d tensors%s, the "
                            "checkpoint %d)", c->path, want.name, nm,
                            state ? " plus optimizer state" : "", c->n);
        RAP_TRY(rap_ckpt_check_loadable(c->path, &c->t[k], m, i % nm, i >= nm));
        const int64_t rows = rap_model_tensor(m, i % nm)->rows;
        size_t e = rap_ckpt_put_bytes(m, i % nm, i >= nm, rows, c->t[k].dtype,
                                      file_cols(&c->t[k], rows));
        most = e > most ? e : most;
    }
    void *buf = rap_malloc(most, "checkpoint tensor buffer");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    for (int i = 0; i < n && st == RAP_OK; i++) {
        rap_ckpt_tensor want;
        rap_ckpt_model_tensor(m, i % nm, i >= nm, &want);
        const rap_ckpt_tensor *t = &c->t[rap_ckpt_find(c, want.name)];
        const int64_t rows = rap_model_tensor(m, i % nm)->rows;
        st = rap_ckpt_read(c, (int)(t - c->t), buf);
        if (st == RAP_OK)
            st = rap_ckpt_put_rows(c->path, m, i % nm, i >= nm, 0, rows, t->dtype,
                                   file_cols(t, rows), buf);
    }
    rap_free(buf);
    bool has = false;
    uint64_t step = 0;
    if (st == RAP_OK)
        st = rap_ckpt_emb_step_of(c->path, &c->meta, &has, &step);
    if (st == RAP_OK && has)
        st = rap_model_set_emb_step(m, step);
    return st;
}

rap_status rap_ckpt_load_model(rap_ckpt *c, rap_model *m, bool state)
{
    const rap_model_config *mc = rap_model_config_of(m);
    if (!rap_ckpt_is_manifest(c) && !(mc && mc->shard) &&
        !rap_meta_get(&c->meta, "shard_tables"))
        return load_plain(c, m, state);
    return rap_ckpt_load_rows(c, m, state);
}
