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
 * CRC mismatch the model holds the corrupt values: do not use it.
 * c may be a sharded checkpoint's manifest and m a sharded model (any
 * number of ranks): each local table's rows are read from the files that
 * hold them; a missing, corrupt or inconsistent shard file is named. */
rap_status rap_ckpt_load_model(rap_ckpt *c, rap_model *m, bool state);

/* ------------------------------------------------------------ sharded
 *
 * A model trained on R ranks (model.h "hybrid parallel") is saved as R+1
 * files (docs/CHECKPOINT.md "Sharded checkpoints", docs/DIST.md):
 *   PATH.rank<r>  rank r's local tables ("emb_l.<t>.weight", rows
 *                 [row0, row0+rows) of global table t; "optimizer.*.sum"
 *                 likewise), metadata "shard_tables" = "t:row0:rows,..." in
 *                 tensor order, "shard_rank", "shard_ranks", "shard_id";
 *                 rank 0's file also holds the MLP tensors
 *   PATH          the manifest: no tensors; the trainer's metadata plus
 *                 "shard_ranks" R, "shard_files" (base names, comma
 *                 separated, beside PATH), "sharding" (every rank's
 *                 shard_tables, ';' separated) and "shard_id"
 * Every file is written atomically with its own data_crc32. The manifest is
 * written last (after every rank's file: the caller's barrier), and the
 * loader refuses shard files whose shard_id differs from the manifest's
 * (a crash between the two leaves a mismatch that is named, not mixed
 * weights). Loading reads, for every local table of the model, its rows
 * from whichever files hold them: a checkpoint saved on R ranks loads into
 * a model sharded over any number of ranks (re-sharding), a plain one into
 * a sharded model and a sharded one into a whole model. */

/* "t:row0:rows,..." of the model's local tables (all tables, row0 0, for a
 * whole model), in tensor order. Caller frees. NULL on out of memory. */
char *rap_ckpt_table_list(const rap_model *m);
/* Writes PATH.rank<rank> (see above): m's table tensors (and state), plus
 * the MLP tensors when rank is 0, with meta plus the shard keys. shard_id
 * is the same string on every rank and in the manifest. */
rap_status rap_ckpt_save_shard(const char *path, int rank, int ranks, const char *shard_id,
                               const rap_model *m, bool state, const rap_meta *meta);
/* Writes the manifest PATH (after every PATH.rank<r> is complete).
 * tables[r] is rank r's rap_ckpt_table_list. */
rap_status rap_ckpt_save_manifest(const char *path, int ranks, const char *shard_id,
                                  const char *const *tables, const rap_meta *meta);
/* True when the open checkpoint is a sharded checkpoint's manifest. */
bool rap_ckpt_is_manifest(const rap_ckpt *c);
/* Reads rows [row0, row0+rows) of 2-D tensor i into host (rows * cols). */
rap_status rap_ckpt_read_rows(rap_ckpt *c, int i, int64_t row0, int64_t rows, float *host);
/* Writes checkpoint `in` (plain or a manifest) as one plain checkpoint
 * `out` (every table whole, in table order, then the MLP tensors, then the
 * optimizer state when state is true and present), metadata of `in` minus
 * the shard keys. Every source's CRC is checked. */
rap_status rap_ckpt_gather(const char *in, const char *out, bool state);

/* Writes the weights of checkpoint `in` (every tensor not named
 * "optimizer.*"; a sharded checkpoint's tables gathered whole) to out,
 * atomically, with in's metadata minus the data position keys given in drop
 * (NULL-terminated list, may be NULL) and the shard keys. The source's CRC
 * is checked. */
rap_status rap_ckpt_export(const char *in, const char *out, const char *const *drop);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_CHECKPOINT_H */
