/*
 * train_internal.h -- what the trainer's files share (train.h): the
 * trainer's state, grouped by concern, and the functions they call across.
 * Nothing outside src/run/train*.c includes it.
 *
 *   train.c       the run: set-up through the pipeline builder, the loop,
 *                 losses, progress and metrics lines, the final accounting
 *   train_eval.c  evaluation (one rank, or rank 0 with the whole model)
 *   train_ckpt.c  checkpoints: save (sharded with ranks), the resume check
 *   train_dist.c  what the ranks agree on: the stop flag, the rows and
 *                 bytes each trained and sent
 *
 * Shapes: B batch rows (the global batch with ranks), R ranks.
 */
#ifndef RAP_RUN_TRAIN_INTERNAL_H
#define RAP_RUN_TRAIN_INTERNAL_H

#include "core/out.h"
#include "run/checkpoint.h"
#include "run/metrics.h"
#include "run/pipeline.h"
#include "run/progress.h"
#include "run/train.h"
#include "run/train_watch.h"
#include "run/train_series.h"

#define READ_ROWS 32768 /* rows per reader batch of the evaluation */

/* Where the run is in its input. */
typedef struct {
    int64_t step, epoch, pos;  /* pos: rows of the input consumed in this epoch */
    int64_t step0;             /* step at the start of this run */
    double frac0;              /* epochs done at the start of this run */
    int64_t samples_before;    /* samples trained by the checkpoint resumed from */
} train_position;

/* Progress, step lines and metrics. */
typedef struct {
    rap_metrics_file mf;
    rap_progress pg;
    double t_train;            /* seconds in steps */
    double starved_log, t_log; /* starved_s and t_train at the last log line */
    double loss_sum;
    int64_t loss_n;
    int64_t data_size;         /* bytes of a plain-file input (progress), else 0 */
} train_log;

/* Hybrid parallel (c->comm set). */
typedef struct {
    bool dist;                 /* a comm was given (even with one rank) */
    int rank, R;
    int64_t rank_samples;      /* rows this rank trained in this run */
    bool stopped;              /* the loop stopped on a stop request (every rank) */
    bool comm_failed;          /* the stop flag's collective failed: its error is set */
    int64_t bytes_moved;       /* preprocessed bytes sent between ranks, all ranks */
    int64_t rank_bytes_sent;   /* ... sent by this rank */
} train_ranks;

/* Evaluation: its own executor and packer over the pipeline's fusion. */
typedef struct {
    double holdout;            /* F when evaluating on held-out rows, else 0 */
    rap_pipeline_prep side;
    rap_batch eb;              /* reader batch of evaluation */
    rap_batch tb;              /* (B) rows of one evaluation batch */
    float *logits;             /* (B) host */
    rap_eval_acc acc;
} train_eval;

/* Periodic checkpoints and the data position (train_series.h). */
typedef struct {
    rap_series series;
    const char *resume;        /* the checkpoint to resume: --resume, or what --resume
                                * latest found (latest); NULL: none */
    char latest[4096];
    bool has_dpos;             /* dpos: just past the last row trained (the checkpoint's) */
    rap_data_position dpos;
    rap_data_position start;   /* resumed with --follow: this run reads on from there */
} train_series_state;

typedef struct {
    const rap_train_config *c;
    rap_train_result *res;
    rap_model_config mc;       /* the whole model (the plan's shape; the pipeline's stream) */
    rap_pipeline_config pcfg;
    rap_pipeline_plan *pl;
    rap_pipeline *pipe;
    rap_mode mode;
    bool shard;                /* --data is a rap shard (ideal mode, no feed) */
    const char *data_id;
    uint64_t plan_hash;
    char *plan_cols;
    rap_ckpt *ck;              /* --resume, open until its weights are loaded */
    rap_out_lock *save_lock;   /* rank 0: --save's, held for the whole run */
    train_position at;
    train_log log;
    train_ranks rk;
    train_eval ev;
    rap_train_watch watch;     /* progressive validation and guards (train_watch.h) */
    rap_replan *replan;        /* re-planning while training (run/replan.h), or NULL */
    int64_t saved_step;        /* step of the last checkpoint this run wrote, -1 none */
    train_series_state sr;
} trainer;

/* Messages of the run: from rank 0 only (every rank would say the same). */
#define T_INFO(t, ...) do { if ((t)->rk.rank == 0) rap_info(__VA_ARGS__); } while (0)
#define T_WARN(t, ...) do { if ((t)->rk.rank == 0) rap_warn(__VA_ARGS__); } while (0)

static inline bool train_stop_requested(const trainer *t) { return t->c->stop && *t->c->stop; }

/* train_eval.c: the evaluation's executor, packer and batches; the
 * evaluation (every rank calls it with ranks; rank 0 gets the result); its
 * line (and with event "eval" its metrics line); the free. */
rap_status train_eval_create(trainer *t);
rap_status train_evaluate(trainer *t, rap_eval_result *out);
rap_status train_log_eval(trainer *t, const rap_eval_result *e, const char *event);
void train_eval_free(trainer *t);

/* train_ckpt.c: the outputs claimed (--save and --metrics none of the
 * inputs, --save's lock taken on rank 0); the checkpoint at the current
 * step; the resume check (fills the position) of t->ck; the pipeline's
 * model_ready loading t->ck's weights (ctx: the trainer). */
rap_status train_claim_outputs(trainer *t);
rap_status train_save(trainer *t, const char *path);
/* A periodic checkpoint: the series file of this step (train_series.h),
 * then the oldest beyond --keep removed (rank 0). */
rap_status train_save_periodic(trainer *t);
rap_status train_check_resume(trainer *t);
rap_status train_load_weights(void *ctx, rap_model *m);

/* train_dist.c: whether to stop before the next step (with ranks every
 * rank at the same step); every rank's rows and bytes gathered and
 * checked, *list the final line's extra keys. */
bool train_stopping(trainer *t);
rap_status train_gather_samples(trainer *t, char **list);

#endif /* RAP_RUN_TRAIN_INTERNAL_H */
