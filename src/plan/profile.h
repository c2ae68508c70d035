/*
 * profile.h -- the GPU profilers that feed the planner (docs/PROFILE.md):
 *
 *   rap profile kernels   standalone latency of fused preprocessing kernel
 *                         slices over plans, fusions, batch rows, descriptor
 *                         ranges (fusion degree) and row ranges (split
 *                         sizes) -> the measurements CSV of PLANNER.md, the
 *                         input of `rap predictor train`.
 *                         The parse kernels too (rap_profile_parse): a
 *                         latency model of the GPU parse (parse_model.h).
 *   rap profile capacity  each training phase's standalone time and its
 *                         leftover capacity: the most standalone work
 *                         (calibrated probe kernels) that co-runs beside the
 *                         phase, finishing within it, while slowing it by at
 *                         most the tolerance -> a capacity file (capacity.h).
 *                         Optionally the currency check: real preprocessing
 *                         kernels co-run beside a phase, the capacity they
 *                         consume vs their standalone latency vs their
 *                         thread-block count.
 *
 * Everything runs on the GPU; without one the calls fail with
 * RAP_ERR_NO_GPU and the reason. Timing: CUDA events on the streams, after
 * a spin kernel that lets the host queue the whole measured sequence first
 * (so launch overhead on the host is not measured), medians of repeats.
 */
#ifndef RAP_PLAN_PROFILE_H
#define RAP_PLAN_PROFILE_H

#include "model/model.h"
#include "plan/capacity.h"
#include "plan/parse_model.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ kernels */

typedef struct {
    const rap_plan *const *plans; /* (n_plans) */
    int n_plans;
    double ilp_time_s;         /* also profile the ILP fusion's kernels (0: not) */
    const int64_t *batches;    /* (n_batches) batch rows to load */
    int n_batches;
    int reps;                  /* timed repeats per slice (median), >= 1 */
    int64_t target;            /* stop after this many measurements (0 = the whole grid) */
    uint64_t seed;
    bool flush;                /* overwrite the L2 cache before every timed slice */
} rap_prof_kernels_config;

/* Measures the grid of kernel slices (docs/PROFILE.md) and writes one CSV
 * line per slice to csv (header first, `# gpu` comment). Progress goes to
 * the log. *n_out gets the number of measurements. */
rap_status rap_profile_kernels(const rap_prof_kernels_config *c, FILE *csv, int64_t *n_out);

/* ------------------------------------------------------------ the parse kernels */

typedef struct {
    const int64_t *lines;      /* (n_lines) line counts timed, 1 .. 2^24 */
    int n_lines;               /* 1 .. RAP_PARSE_MODEL_POINTS / 2 */
    int reps;                  /* timed repeats per point (median), >= 1 */
    uint64_t seed;             /* of the generated rows */
    bool flush;                /* overwrite the L2 cache before every timed launch */
} rap_prof_parse_config;

/* Times the GPU parse kernels (data/parse_gpu.h) alone on generated
 * Criteo text and on the same rows with empty categorical fields (short
 * lines), at every line count of c, and fits *m (plan/parse_model.h; the
 * GPU's name, the generated rows' mean line). RAP_ERR_NO_GPU without one. */
rap_status rap_profile_parse(const rap_prof_parse_config *c, rap_parse_model *m);

/* ------------------------------------------------------------ capacity */

#define RAP_PROF_MAX_ROUNDS 64

typedef struct {
    const rap_plan *plan;      /* plan the model trains (tables, ids) */
    rap_model_config model;    /* shape, batch, precision, emb_dtype, optimizer (tables
                                * from the plan) */
    double tolerance;          /* allowed phase slowdown, e.g. 0.02 */
    int reps;                  /* training steps per measured point (median) */
    int rounds;                /* searches per phase, capacity from the median
                                * (1 to RAP_PROF_MAX_ROUNDS) */
    uint64_t seed;
    FILE *currency_csv;        /* NULL: no currency check; else one line per
                                * co-run kernel slice (docs/PROFILE.md) */
    const char *currency_phase; /* phase the currency check co-runs beside */
    bool cuda_graph;           /* each phase replayed as a CUDA graph (run/graph.h), as
                                * the runtime runs them with --cuda-graph */
} rap_prof_capacity_config;

/* Fills cap (gpu, shape, tolerance, standalone_ms, capacity_ms; grad_comm 0
 * on one GPU). */
rap_status rap_profile_capacity(const rap_prof_capacity_config *c, rap_capacity *cap);

/* ------------------------------------------------------------ GPU helpers
 * (profile_gpu.cu; RAP_ERR_NO_GPU without CUDA). */

typedef struct rap_prof_gpu rap_prof_gpu;

/* Streams (training at high priority, prep at low priority), a pool of
 * events, an L2 flush buffer and the probe buffers. */
/* Writes `rows` rows of rap's generator (Kaggle cardinalities, seed) to a
 * temporary TSV file named by tag and this process in $TMPDIR (or /tmp);
 * its name into path (n bytes). The caller removes it. (profile.c) */
rap_status rap_prof_gen_file(int64_t rows, uint64_t seed, const char *tag, char *path, size_t n);
rap_status rap_prof_gpu_create(int n_events, rap_prof_gpu **out);
void rap_prof_gpu_free(rap_prof_gpu *g);
void *rap_prof_train_stream(rap_prof_gpu *g);
void *rap_prof_prep_stream(rap_prof_gpu *g);
/* Keeps stream busy for about us microseconds (one block spinning), so the
 * host can queue what follows before the GPU reaches it. */
rap_status rap_prof_spin(rap_prof_gpu *g, void *stream, double us);
/* Overwrites the L2 cache (a memset of a buffer larger than it). */
rap_status rap_prof_flush(rap_prof_gpu *g, void *stream);
/* n probe kernels on stream: each streams a fixed buffer (read and write,
 * memory bound like preprocessing, ~4 blocks per SM). */
rap_status rap_prof_probe(rap_prof_gpu *g, void *stream, int n);
rap_status rap_prof_record(rap_prof_gpu *g, int ev, void *stream);
rap_status rap_prof_wait(rap_prof_gpu *g, void *stream, int ev);
/* ms between events e0 and e1 (waits for e1). */
rap_status rap_prof_elapsed(rap_prof_gpu *g, int e0, int e1, double *ms);
rap_status rap_prof_sync(void);
/* cudaDeviceProp.name of the current device. */
rap_status rap_prof_gpu_name(char *buf, size_t n);

/* Thread blocks launched by fused preprocessing kernels so far (0 without
 * CUDA). */
long long rap_prof_blocks_launched(void);

/* Median of v[0..n) (sorts v). */
double rap_prof_median(double *v, int n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_PROFILE_H */
