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
 * "format_version" first, then meta (its own format keys left out). */
rap_status rap_ckpt_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t, int n,
                          rap_safetensors_fill fill, void *ctx, bool check_finite);

/* "optimizer.NAME.sum": the name of tensor NAME's optimizer state. */
void rap_ckpt_state_name(const char *name, char *out, size_t n);

/* The file's tensor for model tensor ti (its optimizer state when state):
 * its name, and its shape as PyTorch has it (biases 1-D). */
void rap_ckpt_model_tensor(const rap_tensor_info *ti, bool state, rap_ckpt_tensor *out);

/* RAP_ERR_DATA naming both shapes when t (of the file at path) does not
 * have want's shape. */
rap_status rap_ckpt_check_shape(const char *path, const rap_ckpt_tensor *t,
                                const rap_ckpt_tensor *want);

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
