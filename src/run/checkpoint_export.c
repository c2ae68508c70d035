/* checkpoint_export.c -- rap export's file: a checkpoint's weights alone
 * (checkpoint.h rap_ckpt_export, docs/CHECKPOINT.md "Export and PyTorch"). */
#include "run/checkpoint_internal.h"

#include "core/core.h"
#include "core/out.h"

#include <string.h>

typedef struct {
    rap_ckpt *c;
    int *src; /* (n) source tensor of each output tensor */
} export_src;

static rap_status fill_export(void *ctx, int i, void *buf)
{
    export_src *e = ctx;
    return rap_ckpt_read(e->c, e->src[i], buf);
}

/* A plain checkpoint's weights: its tensors but "optimizer.*", in order and
 * in their types; the metadata without drop and the update counter (it
 * belongs with the optimizer state). */
static rap_status export_plain(rap_ckpt *c, const char *in, const char *out,
                               const char *const *drop)
{
    rap_status st = rap_out_check_inputs(out, &in, 1);
    if (st == RAP_OK)
        st = rap_ckpt_verify(c);
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
    static const char *const step_key[] = {RAP_CKPT_EMB_STEP, NULL};
    if (st == RAP_OK)
        st = rap_meta_copy(&meta, &c->meta, drop, step_key);
    if (st == RAP_OK)
        st = rap_meta_set(&meta, "contents", "weights");
    if (st == RAP_OK && n == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: no model tensors to export", in);
    export_src e = {c, src};
    if (st == RAP_OK)
        st = rap_ckpt_write(out, &meta, t, n, fill_export, &e, false, NULL);
    rap_meta_free(&meta);
    rap_free(t);
    rap_free(src);
    return st;
}

rap_status rap_ckpt_export(const char *in, const char *out, const char *const *drop)
{
    rap_ckpt *c;
    RAP_TRY(rap_ckpt_open(in, &c));
    rap_status st;
    if (rap_ckpt_is_manifest(c)) /* sharded: every table gathered whole */
        st = rap_ckpt_gather_write(c, out, false, drop, "weights");
    else
        st = export_plain(c, in, out, drop);
    rap_ckpt_close(c);
    return st;
}
