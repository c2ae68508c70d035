/*
 * pipeline_internal.h -- what the pipeline builder's files share
 * (pipeline.h's layout): the pipeline's private struct, its ranks' part,
 * and the functions pipeline.c and pipeline_run.c call across. Nothing outside
 * src/run/pipeline*.c includes it.
 */
#ifndef RAP_RUN_PIPELINE_INTERNAL_H
#define RAP_RUN_PIPELINE_INTERNAL_H

#include "dist/ids.h"
#include "dist/ids_exact.h"
#include "dist/moves.h"
#include "run/pipeline.h"

/* One rank's step of the hybrid-parallel model, the runtime's train_fn
 * with ranks: mb is the packed batch of the rank's preprocessing: with xg
 * (placement batch on GPU ranks) its own rows, the ids sent to the tables'
 * holders first; else the whole global batch of the rank plan (rtab: its
 * sparse columns' global tables; NULL: the whole plan), this rank training
 * rows rap_hybrid_rows(rows, R, rank). The loss: with loss_dev (GPU, R >
 * 1) the partial losses summed into it by NCCL on the stream; model_loss
 * (one GPU rank): the model's own, read by the runtime; else the global
 * mean loss at once (rap_hybrid_loss). */
typedef struct {
    rap_hybrid *hyb;
    rap_ids_xchg *xg;          /* or NULL */
    const int *rtab;           /* (n_rtab) or NULL */
    int n_rtab;
    int R, rank, n_dense;
    rap_model *model;
    void *stream;              /* the model's */
    rap_comm *ncomm;           /* with loss_dev */
    float *loss_dev;           /* device scalar, or NULL */
    bool model_loss;
    rap_moves *moves;          /* the planner's moves (prep_from_manifest), or NULL:
                                * exchanged before the hybrid step */
} pipe_step;

/* The ranks' part of a pipeline (pipeline_dist.c). */
typedef struct {
    rap_comm *comm;            /* this rank's host comm (not owned) */
    int R, rank;
    rap_model_shard shard;     /* this rank's share (the model copies it) */
    rap_model_config mc;       /* the model as this rank creates it */
    rap_comm *ncomm;           /* GPU: the NCCL comm over comm (owned) */
    rap_hybrid *hyb;
    rap_plan *rplan;           /* placement owner: this rank's columns (every dense one,
                                * the sparse ones of its tables); NULL = the plan */
    rap_fusion rfus;           /* rplan fused */
    rap_schedule *rsched;      /* per-rank manifests: this rank's merged schedule ... */
    rap_fusion rsfus;          /* ... and fusion (of rplan, or of the plan with one rank) */
    int rtab[RAP_MAX_TABLES];  /* (sparse columns of rplan) their global table */
    int n_rtab;
    rap_ids_exact *xb;         /* placement batch on CPU ranks (sequential, cpu mode): the
                                * ids with exact counts over the host comm */
    rap_ids_xchg *xg;          /* placement batch on GPU ranks: the id exchange (NCCL) */
    rap_moves *moves;          /* the per-rank manifest's moves, or NULL */
    float *loss_dev;           /* GPU, R > 1: (1) the step's global loss, device */
    struct rap_parse_xchg *px; /* (n_px) the feed's parser threads' exchanges when the
                                * ranks share the parse, each over a comm of its own
                                * (px[i].ctx: rap_comm_dup's, owned) */
    int n_px;
    pipe_step step;            /* the hybrid step's inputs (pipe_dist_step) */
} pipe_dist;

struct rap_pipeline {
    const rap_pipeline_plan *pl;
    rap_pipeline_rank r;
    rap_mode mode;
    void *stream;              /* GPU: the one stream of packing and the model */
    rap_model *model;
    bool dist;                 /* the plan's ranks > 0 */
    pipe_dist d;
    rap_rowfeed *feed;         /* between start and stop (not mps, not a shard) */
    rap_runtime *rt;           /* between start and stop */
    struct rap_progressive *progressive; /* handed to each runtime (not owned), or NULL */
};

/* P, the feed's batches, in mode m (pipeline_plan.c). */
int pipe_feed_batches(const rap_pipeline_config *c, rap_mode m);
/* The row feed's config of a run of pl in mode m, what sizes it (the
 * reader, the batches, who may parse): the memory plan's and open_feed's,
 * which adds the run's own (positions, passes, the gate, hooks). */
void pipe_feed_config(const rap_pipeline_plan *pl, rap_mode m, rap_rowfeed_config *fc);

/* Ranks: this rank's share and model config (into p->d) before the model
 * is created. */
rap_status pipe_dist_model_config(rap_pipeline *p);
/* Ranks, after the model: the NCCL comm (GPU), the hybrid step, the
 * rank's columns or its manifest's schedule and moves, the id exchange. */
rap_status pipe_dist_create(rap_pipeline *p);
/* Ranks: the runtime config's hybrid fields (train_fn and its loss, the
 * row share of placement batch). */
rap_status pipe_dist_runtime(rap_pipeline *p, rap_runtime_config *rc);
/* Frees the ranks' part (waiting for the hybrid step when an exchange's
 * buffers may still be read on the stream), all but the NCCL comm ... */
void pipe_dist_free(rap_pipeline *p);
/* ... which goes after the model (pipe_dist_free_comm). */
void pipe_dist_free_comm(rap_pipeline *p);

#endif /* RAP_RUN_PIPELINE_INTERNAL_H */
