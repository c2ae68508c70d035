/*
 * train_watch.h -- what watches a training run while it trains:
 * progressive validation (run/progressive.h) and the guards
 * (run/guards.h), behind the few calls the training loop makes
 * (docs/TRAINING.md "Progressive validation", "Guards").
 *
 *   rap_train_watch w;
 *   rap_train_watch_create(&w, &cfg, dev, model_stream, B);  // before the loop
 *   runtime config .progressive = w.pv;
 *   ... each loss:     rap_train_watch_loss(&w, step, loss, &mf, &stop)
 *   ... each log line: rap_train_watch_check(&w, step, &mf, &pg, keys, sizeof keys)
 *   rap_train_watch_free(&w);
 *
 * Messages go to the log (rap_warn) and the metrics file ("guard" lines);
 * only rank 0 of a run calls it (progressive validation runs without ranks).
 */
#ifndef RAP_RUN_TRAIN_WATCH_H
#define RAP_RUN_TRAIN_WATCH_H

#include "run/guards.h"
#include "run/metrics.h"
#include "run/replan.h"
#include "run/progress.h"
#include "run/progressive.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rap_progressive *pv;          /* NULL without --progressive */
    int64_t window;               /* W */
    rap_guards g;
    rap_progressive_stats last;   /* at the last check (rows 0: none yet) */
    rap_guard_event stop_ev;      /* the trip that stops the run (action fail) */
} rap_train_watch;

/* progressive: keep a window of `window` rows (>= batch B, RAP_ERR_ARG
 * naming --progressive-window otherwise) on dev, queued on stream; guards
 * as gc (checked). Nothing is allocated after this. */
rap_status rap_train_watch_create(rap_train_watch *w, bool progressive, int64_t window,
                                  const rap_guard_config *gc, rap_device dev, void *stream,
                                  int64_t batch);
void rap_train_watch_free(rap_train_watch *w);

/* A step's loss: a non-finite one trips the nan guard (warning, metrics
 * line) and sets *stop; with the guard off nothing happens (*stop false). */
rap_status rap_train_watch_loss(rap_train_watch *w, int64_t step, double loss,
                                rap_metrics_file *mf, bool *stop);

/* A check at step `step` (a log line, or before a checkpoint): reads the
 * window (GPU: waits for the queued steps), runs the window guards (their
 * events to the log and the metrics), shows the metrics on the progress
 * line and writes the step line's extra keys into keys (",\"pv_rows\":..",
 * "" without --progressive). *stop: a guard tripped and the action is
 * fail (w->stop_ev says which). */
rap_status rap_train_watch_check(rap_train_watch *w, int64_t step, rap_metrics_file *mf,
                                 rap_progress *pg, char *keys, size_t keys_len, bool *stop);

/* A re-planning swap's metrics line ("event":"replan", its reason and the
 * schedule's file). */
rap_status rap_train_watch_replan_line(rap_metrics_file *mf, const rap_replan_event *ev);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_TRAIN_WATCH_H */
