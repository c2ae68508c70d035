/*
 * progress.h -- what a training run shows while it runs, on stderr.
 *
 * On a terminal: one line redrawn in place (at most 10 times a second):
 *   [########......]  42%  1,234,567 rows  45,210 samples/s  loss 0.4512  ETA 0:31
 * (the bar and the ETA only when the fraction done is known). Otherwise
 * (a file, a pipe, CI): a plain line every interval seconds.
 */
#ifndef RAP_RUN_PROGRESS_H
#define RAP_RUN_PROGRESS_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    bool enabled;
    bool tty;
    double interval;     /* seconds between plain lines */
    double t0, last;     /* start, last draw */
    bool drawn;          /* a bar line is on screen */
    char extra[96];      /* shown after the loss (progressive metrics), or "" */
} rap_progress;

/* enabled false: every call is a no-op. tty: draw a bar (else plain lines
 * every interval seconds). */
void rap_progress_init(rap_progress *p, bool enabled, bool tty, double interval);
/* Reports the state: samples trained in this run, step, mean recent loss,
 * fraction done in [0, 1] or < 0 when unknown. Draws when it is time, or
 * always when force is true. */
void rap_progress_update(rap_progress *p, int64_t samples, int64_t step, double loss,
                         double frac, bool force);
/* Text shown after the loss from now on ("" for none; cut at 95 bytes):
 * progressive validation's "pv AUC 0.7712 logloss 0.4710 cal 1.02". */
void rap_progress_set_extra(rap_progress *p, const char *text);
/* Ends the bar line (newline) so that other output can follow. */
void rap_progress_clear(rap_progress *p);

/* "1,234,567" into buf (32 bytes). */
const char *rap_fmt_count(int64_t n, char *buf);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_PROGRESS_H */
