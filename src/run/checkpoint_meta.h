/*
 * checkpoint_meta.h -- what the trainer records in a checkpoint's metadata
 * (docs/CHECKPOINT.md "Metadata") and how it compares a checkpoint with
 * the run that resumes it.
 *
 * Three groups of keys, all strings:
 *   model and plan  contents, n_dense, n_tables, table_rows, emb_dim,
 *                   mlp_bot, mlp_top, optimizer, emb_dtype, lr,
 *                   adagrad_eps, adagrad_init, batch, precision, seed,
 *                   plan_name, plan_source, plan_hash, plan_columns
 *                   (rap_ckpt_meta_model; must match on resume, but for
 *                   rap_ckpt_soft_keys, which may differ and are said
 *                   aloud, emb_dtype, which converts the tables, and the
 *                   optimizer adagrad resumed as rowwise-adagrad, which
 *                   converts the tables' state: rap_ckpt_meta_notices).
 *                   A file without emb_dtype (written before it existed)
 *                   holds fp32 tables.
 *   position        step, epoch, rows_in_epoch, data, eval_fraction,
 *                   samples_trained, rng_state (rap_ckpt_meta_position;
 *                   rap export drops them: rap_ckpt_position_keys)
 *   where           device, ranks (the trainer's own)
 * The order of rap_meta_set calls is the order in the file's header, so
 * each group is always written in the order above.
 */
#ifndef RAP_RUN_CHECKPOINT_META_H
#define RAP_RUN_CHECKPOINT_META_H

#include "run/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The preprocessing plan a model was trained with. */
typedef struct {
    const char *name;      /* --plan as given (NULL: "") */
    const char *source;    /* the file it was read from (NULL: "") */
    uint64_t hash;         /* rap_plan_hash: every column's name and op chain */
    const char *columns;   /* "name:hash8,..." per column, frame order (NULL: "") */
} rap_ckpt_plan;

/* The metadata's form of MLP widths, "512-256-128" (cap bytes into out,
 * cut if longer). The optimizer and emb_dtype are written by their option
 * names (rap_optimizer_name, rap_emb_dtype_name). */
void rap_ckpt_meta_widths(const int *w, int n, char *out, size_t cap);

/* Sets "contents" = "checkpoint" and the model and plan keys of mc and
 * plan, in the order of the header comment. */
rap_status rap_ckpt_meta_model(rap_meta *m, const rap_model_config *mc, const rap_ckpt_plan *plan);

/* RAP_ERR_ARG when the model and plan keys of checkpoint ck differ from
 * the run's (run: rap_ckpt_meta_model of this run), naming every key that
 * differs (the first differing element of a list, the plan's columns by
 * name; for rowwise-adagrad resumed as adagrad, why that cannot be) and
 * the options the checkpoint was trained with. The soft keys and
 * emb_dtype are not compared. */
rap_status rap_ckpt_meta_check_model(const rap_ckpt *ck, const rap_meta *run);

/* What a resume that rap_ckpt_meta_check_model allowed converts or
 * changes, as sentences for the log ("" when nothing): dtype, the tables'
 * storage type (naming both); state, Adagrad's state into row-wise
 * Adagrad's; seed, another seed with 16-bit tables (it keys their
 * rounding: the resumed run is no longer the uninterrupted one). */
typedef struct {
    char dtype[256];
    char state[256];
    char seed[256];
} rap_ckpt_notices;
void rap_ckpt_meta_notices(const rap_ckpt *ck, const rap_meta *run, rap_ckpt_notices *out);

/* Model keys that may differ between a checkpoint and the run resuming it
 * (the trainer says so). NULL-terminated. */
extern const char *const rap_ckpt_soft_keys[];

/* Where training stands. */
typedef struct {
    int64_t step;             /* global step */
    int64_t epoch;            /* epochs completed */
    int64_t rows_in_epoch;    /* rows of the input consumed in this epoch */
    const char *data;         /* which input (reading: points into the checkpoint's metadata) */
    bool has_eval_fraction;   /* reading: the checkpoint records one */
    double eval_fraction;     /* the hold-out fraction of the input */
    int64_t samples_trained;  /* since initialisation */
    uint64_t rng_state;       /* splitmix64 state of the trainer's generator */
} rap_ckpt_position;

/* Sets the position keys of p, in the order of the header comment. */
rap_status rap_ckpt_meta_position(rap_meta *m, const rap_ckpt_position *p);

/* Reads the position of checkpoint ck (rng_state is left 0: it is the
 * seed, compared with the model keys). RAP_ERR_DATA when a key is missing
 * (an export: the position was dropped). */
rap_status rap_ckpt_meta_read_position(const rap_ckpt *ck, rap_ckpt_position *p);

/* The position keys: what rap export drops. NULL-terminated. */
extern const char *const rap_ckpt_position_keys[];

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_CHECKPOINT_META_H */
