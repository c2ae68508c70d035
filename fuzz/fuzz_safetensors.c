/* fuzz_safetensors.c -- safetensors checkpoints (src/run/safetensors.c,
 * checkpoint*.c): the bytes as the file DIR/ckpt beside two fixed shard
 * files (DIR/ckpt.rank0, DIR/ckpt.rank1: fuzz/fixtures/safetensors/, so
 * that a manifest finds them), opened as a safetensors file and as a rap
 * checkpoint; one that opens has its data verified and read, its training
 * position read, is gathered and exported (written to DIR), and is loaded
 * into a CPU model of the shape, table type and optimizer its own metadata
 * gives (when small), whole, and as rank 0 of 2 with its tables split by
 * rows and held in another type (the load converts). */
#include "fuzz.h"

#include "core/checked.h"
#include "model/model.h"
#include "run/checkpoint.h"
#include "run/checkpoint_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies fixture rel into the temporary directory as name. */
static void fixture(const char *rel, const char *name)
{
    FILE *f = fopen(fuzz_repo_file(rel), "rb");
    static uint8_t buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    fuzz_write(name, buf, n);
}

/* "a-b-c" into w (at most RAP_MAX_LAYERS, each 1..64): false otherwise. */
static bool widths(const char *s, int *w, int *n)
{
    *n = 0;
    while (s && *s) {
        int v;
        if (*n == RAP_MAX_LAYERS || !rap_parse_int_ok(s, 1, 64, &v, &s) || (*s && *s++ != '-'))
            return false;
        w[(*n)++] = v;
    }
    return *n > 0;
}

/* A small model config from the checkpoint's metadata; false when it has
 * none or it is not small. */
static bool config_of(const rap_ckpt *c, rap_model_config *mc)
{
    memset(mc, 0, sizeof *mc);
    const char *nd = rap_meta_get(&c->meta, "n_dense"), *nt = rap_meta_get(&c->meta, "n_tables");
    const char *tr = rap_meta_get(&c->meta, "table_rows"), *ed = rap_meta_get(&c->meta, "emb_dim");
    const char *op = rap_meta_get(&c->meta, "optimizer");
    if (!nd || !nt || !tr || !ed || !op || !rap_parse_int_ok(nd, 1, 64, &mc->n_dense, NULL) ||
        !rap_parse_int_ok(nt, 1, 8, &mc->n_tables, NULL) ||
        !rap_parse_int_ok(ed, 1, 16, &mc->emb_dim, NULL) ||
        !widths(rap_meta_get(&c->meta, "mlp_bot"), mc->bot, &mc->n_bot) ||
        !widths(rap_meta_get(&c->meta, "mlp_top"), mc->top, &mc->n_top) ||
        mc->bot[mc->n_bot - 1] != mc->emb_dim || mc->top[mc->n_top - 1] != 1)
        return false;
    const char *p = tr;
    for (int t = 0; t < mc->n_tables; t++)
        if (!rap_parse_i64_ok(p, 2, 4096, &mc->table_rows[t], &p) ||
            (*p && *p++ != ',') || (t == mc->n_tables - 1 && *p))
            return false;
    mc->optimizer = RAP_SGD;
    for (int k = 0; k < 3; k++)
        if (!strcmp(op, rap_optimizer_name((rap_optimizer)k)))
            mc->optimizer = (rap_optimizer)k;
    const char *dt = rap_meta_get(&c->meta, "emb_dtype");
    mc->emb_dtype = RAP_EMB_FP32;
    for (int k = 0; dt && k < 3; k++)
        if (!strcmp(dt, rap_emb_dtype_name((rap_emb_dtype)k)))
            mc->emb_dtype = (rap_emb_dtype)k;
    mc->batch = 4;
    mc->lr = 0.1f;
    mc->adagrad_eps = 1e-8f;
    mc->threads = 1;
    mc->seed = 1;
    return true;
}

/* Loads c into a model of config mc (sharded: rank 0 of 2, every table's
 * first half of rows, its tables in another type than the file's: fp16
 * for fp32, fp32 for a 16-bit type, so that loading converts). */
static void load(rap_ckpt *c, const rap_model_config *base, bool sharded, const char *path)
{
    rap_model_config mc = *base;
    if (sharded)
        mc.emb_dtype = mc.emb_dtype == RAP_EMB_FP32 ? RAP_EMB_FP16 : RAP_EMB_FP32;
    rap_model_shard sh;
    memset(&sh, 0, sizeof sh);
    if (sharded) {
        sh.n_local = mc.n_tables;
        for (int t = 0; t < mc.n_tables; t++) {
            sh.table[t] = t;
            sh.row0[t] = 0;
            sh.rows[t] = mc.table_rows[t] / 2;
        }
        sh.emb_batch = 2 * mc.batch;
        sh.loss_rows = 2 * mc.batch;
        mc.shard = &sh;
    }
    rap_model *m = NULL;
    if (rap_model_create(&mc, RAP_CPU, &m) != RAP_OK)
        return;
    /* the trainer loads the state exactly when its optimizer keeps one */
    for (int state = 0; state < (mc.optimizer != RAP_SGD ? 2 : 1); state++)
        fuzz_refused(rap_ckpt_load_model(c, m, state == 1), path, "ckpt");
    rap_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool fixtures;
    if (!fixtures) {
        fixture("fuzz/fixtures/safetensors/ckpt.rank0", "ckpt.rank0");
        fixture("fuzz/fixtures/safetensors/ckpt.rank1", "ckpt.rank1");
        fixtures = true;
    }
    char path[512], out[512];
    snprintf(path, sizeof path, "%s", fuzz_write("ckpt", data, size));
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    rap_ckpt *c = NULL;
    if (fuzz_refused(rap_safetensors_open(path, &c), path, NULL)) {
        if (fuzz_refused(rap_ckpt_verify(c), path, NULL)) {
            for (int i = 0; i < c->n; i++) {
                int64_t e = rap_ckpt_tensor_elems(&c->t[i]);
                if (e < 0 || e > (1 << 20))
                    continue;
                float *buf = malloc(sizeof(float) * (size_t)(e ? e : 1));
                if (buf)
                    fuzz_refused(rap_ckpt_read(c, i, buf), path, NULL);
                free(buf);
            }
        }
        rap_ckpt_close(c);
    }
    if (!fuzz_refused(rap_ckpt_open(path, &c), path, NULL))
        return 0;
    rap_ckpt_position pos;
    fuzz_refused(rap_ckpt_meta_read_position(c, &pos), path, NULL);
    rap_model_config mc;
    if (config_of(c, &mc)) {
        load(c, &mc, false, path);
        load(c, &mc, true, path);
    }
    rap_ckpt_close(c);
    fuzz_refused(rap_ckpt_gather(path, out, true), path, "ckpt");
    fuzz_refused(rap_ckpt_export(path, out, rap_ckpt_position_keys), path, "ckpt");
    remove(out);
    return 0;
}
