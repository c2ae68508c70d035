/*
 * checkpoint.h -- model checkpoints in the safetensors format.
 *
 * File layout (https://github.com/huggingface/safetensors, docs/CHECKPOINT.md):
 *   u64 little-endian N, then N bytes of JSON (padded with spaces so that
 *   8 + N is a multiple of 8), then the data section: every tensor's bytes,
 *   contiguous, in the order the header lists them, no holes.
 *   JSON: {"__metadata__": {string: string}, "NAME": {"dtype": "F32",
 *   "shape": [..], "data_offsets": [begin, end]}, ...}, offsets relative to
 *   the start of the data section.
 * rap writes F32 tensors only, named as the dlrm reference's modules
 * (emb_l.t.weight, bot_l.2i.weight, ...; rap_model_tensor), followed by the
 * optimizer state "optimizer.NAME.sum" (Adagrad's accumulator, PyTorch's
 * name for it) when there is one. Metadata always holds "format"
 * (RAP_CKPT_FORMAT), "format_version" and "data_crc32" (CRC-32 of the data
 * section, 8 hex digits); the trainer adds the model config, plan and data
 * position.
 *
 * Writing is atomic: PATH.tmp is written, fsync'd and renamed over PATH
 * (then the directory is fsync'd), so PATH is always either the old file or
 * the whole new one. A tensor holding NaN or inf is refused before the
 * rename.
 */
#ifndef RAP_RUN_CHECKPOINT_H
#define RAP_RUN_CHECKPOINT_H

#include "model/model.h"
#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_CKPT_FORMAT "rap-dlrm"
#define RAP_CKPT_VERSION 1
/* Largest header rap accepts (the safetensors reference's own limit). */
#define RAP_CKPT_MAX_HEADER 100000000ull

/* String metadata: ordered key/value pairs, owned copies. */
typedef struct {
    char **key;   /* (n) */
    char **val;   /* (n) */
    int n, cap;
} rap_meta;

/* Sets key to the formatted value (replacing an existing one). */
rap_status rap_meta_set(rap_meta *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Value of key, or NULL. */
const char *rap_meta_get(const rap_meta *m, const char *key);
void rap_meta_free(rap_meta *m);

/* Writes the model's tensors (and, when state is true, its optimizer state)
 * with meta (plus format, format_version, data_crc32) to path, atomically.
 * On failure path is untouched and no temporary file is left. */
rap_status rap_ckpt_save(const char *path, const rap_model *m, bool state, const rap_meta *meta);

typedef struct {
    char name[128];
    int ndim;
    int64_t shape[4];
    uint64_t begin, end;   /* in the data section */
} rap_ckpt_tensor;

/* An open, structurally checked checkpoint. */
typedef struct {
    char path[512];
    FILE *f;
    uint64_t header_len;   /* N */
    uint64_t data_len;     /* bytes of the data section */
    rap_ckpt_tensor *t;    /* (n) in header order */
    int n;
    rap_meta meta;
} rap_ckpt;

/* Opens path and checks everything but the data bytes: the header length
 * against the file size, the JSON, every tensor's dtype (F32), shape and
 * offsets (contiguous, covering the data section exactly). Errors say what
 * is wrong and where: RAP_ERR_IO (cannot open), RAP_ERR_DATA (truncated or
 * corrupt). */
rap_status rap_ckpt_open(const char *path, rap_ckpt **out);
void rap_ckpt_close(rap_ckpt *c);
/* Index of the tensor called name, or -1. */
int rap_ckpt_find(const rap_ckpt *c, const char *name);
/* Reads tensor i's floats into host (shape product floats). */
rap_status rap_ckpt_read(rap_ckpt *c, int i, float *host);
/* Reads the whole data section and checks it against data_crc32. */
rap_status rap_ckpt_verify(rap_ckpt *c);

/* Loads every tensor of m (and its optimizer state when state is true)
 * from c, after checking that each exists with the model's shape (errors
 * name the tensor and both shapes) and that the data matches its CRC. On a
 * CRC mismatch the model holds the corrupt values: do not use it. */
rap_status rap_ckpt_load_model(rap_ckpt *c, rap_model *m, bool state);

/* Writes the weights of checkpoint `in` (every tensor not named
 * "optimizer.*") to out, atomically, with in's metadata minus the data
 * position keys given in drop (NULL-terminated list, may be NULL). The
 * source's CRC is checked while copying. */
rap_status rap_ckpt_export(const char *in, const char *out, const char *const *drop);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_CHECKPOINT_H */
