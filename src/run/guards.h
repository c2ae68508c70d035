/*
 * guards.h -- guards against a training run failing silently
 * (docs/TRAINING.md "Guards"): each one watches one symptom, and when it
 * trips the trainer writes a warning to the log and a "guard" line to the
 * metrics; with action fail it also stops the run (and keeps the last good
 * checkpoint: see the trainer).
 *
 *   nan          a training loss that is NaN or infinite (every step)
 *   auc          progressive validation's AUC within band (0.01) of 0.5 at
 *                every check over auc_rows rows trained while the labels
 *                are mixed (each label at least 1% of the window's rows)
 *   calibration  the window's mean prediction more than calib_factor times
 *                the mean label, or less than 1/calib_factor of it
 *
 * The window guards (auc, calibration) read progressive validation's
 * statistics (run/progressive.h) at each check (the trainer's step lines
 * and before each checkpoint), and only once the window is full: a new
 * model's first predictions (near 0.5 for every row) would otherwise trip
 * both. Without --progressive only the nan guard runs.
 *
 * A guard trips once and stays tripped until its condition clears (a
 * second event, "cleared"); the checks are plain functions of what they
 * are given (no clock, no I/O): the trainer reports the events.
 */
#ifndef RAP_RUN_GUARDS_H
#define RAP_RUN_GUARDS_H

#include "rap.h"
#include "run/progressive.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RAP_GUARD_WARN = 0, RAP_GUARD_FAIL = 1 } rap_guard_action;
typedef enum { RAP_GUARD_NAN = 0, RAP_GUARD_AUC, RAP_GUARD_CALIBRATION, RAP_GUARD_COUNT } rap_guard_kind;

#define RAP_GUARD_AUC_BAND 0.01
#define RAP_GUARD_MIXED 0.01           /* each label at least this share of the window */
#define RAP_GUARD_DEFAULT_AUC_ROWS 1000000
#define RAP_GUARD_DEFAULT_CALIBRATION 2.0

typedef struct {
    rap_guard_action action;  /* --guard warn|fail (default warn) */
    bool nan;                 /* --guard-nan (default on) */
    int64_t auc_rows;         /* --guard-auc-rows; 0: the auc guard off */
    double calib_factor;      /* --guard-calibration; 0: off, else > 1 */
} rap_guard_config;

/* A guard's change of state. */
typedef struct {
    rap_guard_kind kind;
    bool tripped;             /* true: it tripped; false: it cleared */
    int64_t step;
    double value;             /* the loss, the AUC, or mean prediction / mean label */
    char why[256];            /* one sentence: what was seen and the rule */
} rap_guard_event;

typedef struct {
    rap_guard_config c;
    bool tripped[RAP_GUARD_COUNT];
    int64_t auc_since;        /* rows seen at the start of the in-band checks, -1 none */
    int64_t trips;            /* events that were trips, all guards */
} rap_guards;

/* Defaults: warn, nan on, auc over RAP_GUARD_DEFAULT_AUC_ROWS rows,
 * calibration factor RAP_GUARD_DEFAULT_CALIBRATION. */
void rap_guard_defaults(rap_guard_config *c);
/* RAP_ERR_ARG naming the option for a factor in (0, 1]. */
rap_status rap_guard_config_check(const rap_guard_config *c);
void rap_guards_init(rap_guards *g, const rap_guard_config *c);
/* "nan", "auc", "calibration". */
const char *rap_guard_name(rap_guard_kind k);

/* The loss of step `step`: true with *ev when the nan guard trips. */
bool rap_guards_loss(rap_guards *g, int64_t step, double loss, rap_guard_event *ev);
/* A check of the window's statistics at step `step`: the events (at most
 * two per guard kind) into ev[0..*n). */
void rap_guards_window(rap_guards *g, int64_t step, int64_t window,
                       const rap_progressive_stats *ps, rap_guard_event *ev, int *n);
/* Whether a guard is tripped now and the action is fail. */
bool rap_guards_stop(const rap_guards *g);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_GUARDS_H */
