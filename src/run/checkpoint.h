/*
 * checkpoint.h -- model checkpoints: what rap keeps in a safetensors file
 * (safetensors.h, docs/CHECKPOINT.md) and how a model is saved to and
 * loaded from one.
 *
 * rap writes the tensors named as the dlrm reference's modules
 * (emb_l.t.weight, bot_l.2i.weight, ...; rap_model_tensor), the tables in
 * their storage type (F32, BF16, F16), the MLPs in F32, followed by the
 * optimizer state "optimizer.NAME.sum" (F32: Adagrad's accumulator,
 * PyTorch's name for it; a table's row-wise Adagrad state (rows, 1)) when
 * there is one. Metadata always starts with "format" (RAP_CKPT_FORMAT)
 * and "format_version" and ends with "data_crc32"; a file holding tables
 * records "emb_step" (rap_model_get_emb_step); the trainer adds the model
 * config, plan and data position (checkpoint_meta.h). Every file is
 * written atomically and a tensor holding NaN or inf is refused before
 * the rename (rap_safetensors_write). Loading converts a table of another
 * type and Adagrad's state into row-wise Adagrad's (docs/CHECKPOINT.md
 * "Types and conversion").
 *
 * Files, one job each:
 *   checkpoint.c         format and version, tensor names, plain save and
 *                        load, the choice of loader
 *   checkpoint_shard.c   sharded checkpoints: shard files, the manifest,
 *                        loading rows from any number of files, gather
 *   checkpoint_export.c  rap export's weights-only file
 *   checkpoint_meta.c    the trainer's metadata (checkpoint_meta.h)
 *   safetensors.c        the container itself (safetensors.h)
 */
#ifndef RAP_RUN_CHECKPOINT_H
#define RAP_RUN_CHECKPOINT_H

#include "model/model.h"
#include "run/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_CKPT_FORMAT "rap-dlrm"
#define RAP_CKPT_VERSION 1
/* Most shard files a sharded checkpoint's manifest may list (its ranks). */
#define RAP_CKPT_MAX_RANKS 4096

/* Writes the model's tensors (and, when state is true, its optimizer state)
 * with meta (plus format, format_version, emb_step, data_crc32) to path,
 * atomically (core/out.h; held: the caller's lock on path, or NULL: one is
 * taken for the write). On failure path is untouched and no temporary file
 * is left. */
rap_status rap_ckpt_save(const char *path, const rap_model *m, bool state, const rap_meta *meta,
                         rap_out_lock *held);

/* rap_safetensors_open, then checks that the file is a rap checkpoint
 * ("format" RAP_CKPT_FORMAT) of a version this rap reads. RAP_ERR_IO
 * (cannot open), RAP_ERR_DATA (truncated, corrupt or not rap's). */
rap_status rap_ckpt_open(const char *path, rap_ckpt **out);

/* Loads every tensor of m (and its optimizer state when state is true)
 * from c, after checking that each exists with the model's shape (errors
 * name the tensor and both shapes) and that the data matches its CRC, and
 * the update counter when c records one. A table of another type is
 * converted, Adagrad's per-element state into row-wise state by its row
 * means; row-wise state into per-element state is refused. On a CRC
 * mismatch the model holds the corrupt values: do not use it.
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
 * tables[r] is rank r's rap_ckpt_table_list; held as rap_ckpt_save. */
rap_status rap_ckpt_save_manifest(const char *path, int ranks, const char *shard_id,
                                  const char *const *tables, const rap_meta *meta,
                                  rap_out_lock *held);
/* True when the open checkpoint is a sharded checkpoint's manifest. */
bool rap_ckpt_is_manifest(const rap_ckpt *c);
/* Writes checkpoint `in` (plain or a manifest) as one plain checkpoint
 * `out` (every table whole, in table order and its type, then the MLP
 * tensors, then the optimizer state and emb_step when state is true and
 * present), metadata of `in` minus the shard keys. Every source's CRC is
 * checked. */
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
