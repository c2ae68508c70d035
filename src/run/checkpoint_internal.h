/*
 * checkpoint_internal.h -- what checkpoint.c, checkpoint_shard.c and
 * checkpoint_export.c share (checkpoint.h). Not for other modules.
 */
#ifndef RAP_RUN_CHECKPOINT_INTERNAL_H
#define RAP_RUN_CHECKPOINT_INTERNAL_H

#include "run/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rap_safetensors_write of a rap checkpoint file: "format" and
 * "format_version" first, then meta (its own format keys left out). held:
 * the caller's lock on path, or NULL. */
rap_status rap_ckpt_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t, int n,
                          rap_safetensors_fill fill, void *ctx, bool check_finite,
                          rap_out_lock *held);

/* The metadata key of the model's embedding update counter
 * (rap_model_get_emb_step): every file that holds tables has it. */
#define RAP_CKPT_EMB_STEP "emb_step"

/* "optimizer.NAME.sum": the name of tensor NAME's optimizer state. */
void rap_ckpt_state_name(const char *name, char *out, size_t n);

/* The file's type of a table stored as t. */
rap_st_dtype rap_ckpt_dtype_of(rap_emb_dtype t);

/* The file's tensor for model tensor i of m (its optimizer state when
 * state): its name, its dtype (the tensor's storage type; the state F32)
 * and its shape as PyTorch has it (biases 1-D; a table's row-wise Adagrad
 * state (rows, 1): rap_model_state_shape). */
void rap_ckpt_model_tensor(const rap_model *m, int i, bool state, rap_ckpt_tensor *out);

/* Copies model tensor i (its state when state) into buf, as
 * rap_ckpt_model_tensor describes it. */
rap_status rap_ckpt_fill_tensor(const rap_model *m, int i, bool state, void *buf);

/* RAP_ERR_DATA naming both shapes when t (of the file at path) does not
 * have want's shape. */
rap_status rap_ckpt_check_shape(const char *path, const rap_ckpt_tensor *t,
                                const rap_ckpt_tensor *want);

/* Whether t (of the file at path; a table read from shard files: its
 * pieces' dtype and columns over the model tensor's rows) loads into
 * model tensor i of m (its state when state): weights of the same shape
 * in any of the three types (converted, docs/CHECKPOINT.md "Types"); state
 * in F32 of the same shape or, into a table's row-wise state (rows, 1),
 * Adagrad's per-element sums (rows, D) (their row means are taken).
 * RAP_ERR_DATA naming the tensor and both shapes otherwise, and saying why
 * row-wise state does not load as per-element state. */
rap_status rap_ckpt_check_loadable(const char *path, const rap_ckpt_tensor *t, const rap_model *m,
                                   int i, bool state);

/* Puts rows [row0, row0 + n) of model tensor i (its state when state)
 * from buf, which holds them as the file at path has them: elements of
 * type dt, fcols a row (checked by rap_ckpt_check_loadable). Converts in
 * place: buf holds n * max(fcols, the tensor's cols) floats. RAP_ERR_DATA
 * for a value beyond the range of the model's 16-bit type. */
rap_status rap_ckpt_put_rows(const char *path, rap_model *m, int i, bool state, int64_t row0,
                             int64_t n, rap_st_dtype dt, int64_t fcols, void *buf);
/* The bytes buf needs for rap_ckpt_put_rows of n rows: as stored when
 * nothing converts, else n * max(fcols, cols) floats. */
size_t rap_ckpt_put_bytes(const rap_model *m, int i, bool state, int64_t n, rap_st_dtype dt,
                          int64_t fcols);

/* meta plus RAP_CKPT_EMB_STEP = m's counter, into out ({0} before; the
 * caller frees it). */
rap_status rap_ckpt_meta_with_step(const rap_meta *meta, const rap_model *m, rap_meta *out);

/* The counter recorded in meta (of the file at path) into *step, *has
 * whether there is one. RAP_ERR_DATA for a value that is not a number. */
rap_status rap_ckpt_emb_step_of(const char *path, const rap_meta *meta, bool *has,
                                uint64_t *step);

/* checkpoint_shard.c: loads c (plain or a manifest) into m (whole or
 * sharded) table rows by table rows, from whichever files hold them. */
rap_status rap_ckpt_load_rows(rap_ckpt *c, rap_model *m, bool state);

/* checkpoint_shard.c: writes the files of c as one plain file out (state:
 * with the optimizer tensors if present), with c's metadata minus drop
 * (NULL-terminated, may be NULL) and the shard keys, "contents" set to
 * contents when not NULL. */
rap_status rap_ckpt_gather_write(rap_ckpt *c, const char *out, bool state,
                                 const char *const *drop, const char *contents);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_CHECKPOINT_INTERNAL_H */
