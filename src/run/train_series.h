/*
 * train_series.h -- periodic checkpoints (docs/TRAINING.md "Periodic
 * checkpoints and exactly once"): when one is due, its name, pruning to
 * --keep, --resume latest, and the data position in the metadata.
 *
 * A series belongs to --save PATH: checkpoint k of step S is written to
 * PATH with "-step" and S (zero-padded to 10 digits) put before the
 * extension of its base name (run.st -> run-step0000000120.st; run ->
 * run-step0000000120), by the checkpoint writer (temporary file, fsync,
 * rename: a file of the series is whole or absent). Once the new file is
 * complete, the oldest files of the series beyond --keep are removed (with
 * their .rank<r> shard files). --resume latest takes the newest complete
 * checkpoint among the series and PATH itself: the highest step whose file
 * opens as a checkpoint; a file that does not (a truncated copy, another
 * program's file) is named and passed over; a temporary file is never a
 * candidate. No checkpoint at all: training starts from the initial
 * weights (the first run of a job that always passes --resume latest).
 *
 * Data position keys (docs/CHECKPOINT.md "Metadata"): data_file,
 * data_dev, data_inode, data_offset, data_line, written when the trainer
 * knows where the first untrained row is (position.h); rows_in_epoch is
 * the position's row count.
 */
#ifndef RAP_RUN_TRAIN_SERIES_H
#define RAP_RUN_TRAIN_SERIES_H

#include "data/position.h"
#include "run/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *save;      /* --save PATH (NULL or "": no series) */
    int64_t every_steps;   /* a checkpoint every N steps; 0: not by steps */
    double every_s;        /* ... or every this many seconds; 0: not by time */
    int64_t keep;          /* files of the series kept; 0: all */
    double last_t;         /* when the last one was written (or the run started) */
} rap_series;

/* "N" (steps) or a duration with its unit, "90s", "10m", "1h" (a decimal
 * number before the unit). "" or "0": never. Errors: RAP_ERR_ARG naming
 * the text and the forms expected. */
rap_status rap_series_parse_every(const char *text, int64_t *steps, double *seconds);

/* Fills s; now: the run's start (rap_now). Cannot fail. */
void rap_series_init(rap_series *s, const char *save, int64_t every_steps, double every_s,
                     int64_t keep, double now);

/* True when a periodic checkpoint is due after global step `step` at time
 * now. Cannot fail. */
bool rap_series_due(const rap_series *s, int64_t step, double now);

/* The name of the series file of step (see above), into out (n bytes).
 * Cannot fail (a name too long is cut). */
void rap_series_name(const char *save, int64_t step, char *out, size_t n);

/* Removes the oldest files of the series beyond s->keep (keep 0: none),
 * with their shard files. Called only after the newest one is complete.
 * Errors: RAP_ERR_IO naming the file that could not be removed or the
 * directory that could not be listed. */
rap_status rap_series_prune(const rap_series *s);

/* --resume latest: the newest complete checkpoint of save's series (or
 * save itself) into out (n bytes); *found false when there is none. Each
 * file passed over is said with rap_warn. Errors: RAP_ERR_ARG without
 * save; RAP_ERR_IO when the directory cannot be listed. */
rap_status rap_series_latest(const char *save, char *out, size_t n, bool *found);

/* The checkpoint --resume names: resume itself, or for "latest" the one
 * rap_series_latest finds (said with rap_info unless quiet) into buf (n
 * bytes); *out NULL when there is none (or resume is NULL or ""). Errors
 * as rap_series_latest's. */
rap_status rap_series_resume_path(const char *resume, const char *save, bool quiet, char *buf,
                                  size_t n, const char **out);

/* Sets the data position keys of p (valid positions only; else nothing). */
rap_status rap_series_meta_write(rap_meta *m, const rap_data_position *p);

/* Reads the data position keys of ck into p (rows: rows_in_epoch);
 * *has false when the checkpoint has none. RAP_ERR_DATA for keys that are
 * present but malformed (a number that is not one, a missing partner). */
rap_status rap_series_meta_read(const rap_ckpt *ck, int64_t rows_in_epoch, rap_data_position *p,
                                bool *has);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_TRAIN_SERIES_H */
