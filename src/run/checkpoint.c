/* checkpoint.c -- rap checkpoints: format and version, tensor names, plain
 * save and load, the choice of loader (checkpoint.h). */
#include "run/checkpoint_internal.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- shared */

rap_status rap_ckpt_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t, int n,
                          rap_safetensors_fill fill, void *ctx, bool check_finite)
{
    static const char *const own[] = {"format", "format_version", "data_crc32", NULL};
    rap_meta m = {0};
    rap_status st = rap_meta_set(&m, "format", "%s", RAP_CKPT_FORMAT);
    if (st == RAP_OK)
        st = rap_meta_set(&m, "format_version", "%d", RAP_CKPT_VERSION);
    if (st == RAP_OK)
        st = rap_meta_copy(&m, meta, own, NULL);
    if (st == RAP_OK)
        st = rap_safetensors_write(path, &m, t, n, fill, ctx, check_finite);
    rap_meta_free(&m);
    return st;
}

void rap_ckpt_state_name(const char *name, char *out, size_t n)
{
    snprintf(out, n, "optimizer.%s.sum", name);
}

void rap_ckpt_model_tensor(const rap_tensor_info *ti, bool state, rap_ckpt_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (state)
        rap_ckpt_state_name(ti->name, out->name, sizeof out->name);
    else
        snprintf(out->name, sizeof out->name, "%s", ti->name);
    size_t nl = strlen(ti->name);
    bool bias = nl > 5 && !strcmp(ti->name + nl - 5, ".bias");
    if (bias) {
        out->ndim = 1;
        out->shape[0] = ti->rows * ti->cols;
    } else {
        out->ndim = 2;
        out->shape[0] = ti->rows;
        out->shape[1] = ti->cols;
    }
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

/* ------------------------------------------------------------- saving */

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

rap_status rap_ckpt_save(const char *path, const rap_model *m, bool state, const rap_meta *meta)
{
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)(n ? n : 1), "checkpoint tensors");
    if (!t)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < n; i++)
        rap_ckpt_model_tensor(rap_model_tensor(m, i % nm), i >= nm, &t[i]);
    model_src src = {m, nm};
    rap_status st = rap_ckpt_write(path, meta, t, n, fill_model, &src, true);
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
    if (!fmt || strcmp(fmt, RAP_CKPT_FORMAT))
        st = rap_fail(RAP_ERR_DATA, "%s: a safetensors file, but not a rap checkpoint (format "
                      "\"%s\", expected \"%s\")", path, fmt ? fmt : "", RAP_CKPT_FORMAT);
    else if (!ver || atoi(ver) != RAP_CKPT_VERSION)
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

/* A plain checkpoint into a whole model: every tensor by name. */
static rap_status load_plain(rap_ckpt *c, rap_model *m, bool state)
{
    RAP_TRY(rap_ckpt_verify(c));
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    /* check every name and shape before touching the model */
    int64_t max_elems = 1;
    for (int i = 0; i < n; i++) {
        rap_ckpt_tensor want;
        rap_ckpt_model_tensor(rap_model_tensor(m, i % nm), i >= nm, &want);
        int k = rap_ckpt_find(c, want.name);
        if (k < 0)
            return rap_fail(RAP_ERR_DATA, "%s: no tensor %s (the model has %d tensors%s, the "
                            "checkpoint %d)", c->path, want.name, nm,
                            state ? " plus optimizer state" : "", c->n);
        RAP_TRY(rap_ckpt_check_shape(c->path, &c->t[k], &want));
        if (rap_ckpt_tensor_elems(&c->t[k]) > max_elems)
            max_elems = rap_ckpt_tensor_elems(&c->t[k]);
    }
    float *buf = rap_malloc(sizeof(float) * (size_t)max_elems, "checkpoint tensor buffer");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    for (int i = 0; i < n && st == RAP_OK; i++) {
        rap_ckpt_tensor want;
        rap_ckpt_model_tensor(rap_model_tensor(m, i % nm), i >= nm, &want);
        st = rap_ckpt_read(c, rap_ckpt_find(c, want.name), buf);
        if (st == RAP_OK)
            st = i < nm ? rap_model_set(m, i, buf) : rap_model_set_state(m, i - nm, buf);
    }
    rap_free(buf);
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
