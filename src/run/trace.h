/*
 * trace.h -- a timeline of a few iterations, written as a Chrome /
 * Perfetto trace (JSON trace-event format, docs/TRACE.md).
 *
 * One track per stream (training, preprocessing, copy) and per host thread
 * (the runtime's main thread, the feeder thread that reads batches); more
 * tracks can be added (other GPUs, CPU workers). Spans are recorded into a
 * buffer allocated at create: recording never allocates and never blocks;
 * when the buffer is full the span is dropped and counted.
 *
 * Host spans are measured with rap_now(). GPU spans are pairs of CUDA
 * events recorded on the stream around the work, taken from a pool made
 * at create; their times are read after the iterations (rap_trace_resolve,
 * which waits for the events) relative to one origin event, and placed on
 * the host clock by the host time at which the origin event completed.
 * Built with CUDA, spans are also NVTX ranges for Nsight Systems: host
 * spans push/pop (they must nest per thread), GPU spans start/end ranges
 * (they may overlap). Without CUDA the GPU functions are stubs.
 *
 * Every function accepts a NULL trace and then does nothing, so the
 * runtime can call them unconditionally. Recording functions are
 * thread-safe; create, add_track, resolve, write and free are not (call
 * them when no thread records).
 */
#ifndef RAP_RUN_TRACE_H
#define RAP_RUN_TRACE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tracks every trace has, in display order. */
typedef enum {
    RAP_TRACK_TRAIN = 0, /* GPU: training stream (phases) */
    RAP_TRACK_PREP,      /* GPU: preprocessing stream (kernels of the next batch) */
    RAP_TRACK_COPY,      /* GPU: host-to-device copies of batches */
    RAP_TRACK_MAIN,      /* host: the runtime's thread */
    RAP_TRACK_FEEDER,    /* host: the feeder thread (reading and parsing waits) */
    RAP_TRACK_BUILTIN
} rap_track;

#define RAP_TRACE_MAX_TRACKS 64
#define RAP_TRACE_NAME 48     /* span names longer than this are cut */
#define RAP_TRACE_NO_ARG INT64_MIN

typedef struct {
    int max_events;     /* spans kept (host and GPU); 0 = 65536 */
    int max_gpu_spans;  /* CUDA event pairs made at create; 0 = none */
    int device;         /* GPU of the built-in GPU tracks (for the name) */
} rap_trace_config;

typedef struct rap_trace rap_trace;

/* Allocates the buffers (and, with CUDA and max_gpu_spans > 0, the events
 * on the current device). RAP_ERR_NO_GPU when GPU spans are asked for
 * without CUDA. The host time origin is now. */
rap_status rap_trace_create(const rap_trace_config *c, rap_trace **out);
void rap_trace_free(rap_trace *t);

/* Adds a track named name (copied) on device (-1: host, g >= 0: GPU g);
 * returns its id, or -1 when RAP_TRACE_MAX_TRACKS are in use or t is NULL. */
int rap_trace_add_track(rap_trace *t, const char *name, int device);
/* Recording on (default) or off: spans recorded while off are ignored
 * (not counted as dropped). Used to trace only a few iterations. */
void rap_trace_set_enabled(rap_trace *t, bool on);
bool rap_trace_enabled(const rap_trace *t);

/* A host span that ends now: NVTX push at begin; end pops and records
 * [t0, now) on track. begin returns rap_now() (0 when t is NULL or off).
 * cat must be a string literal (stored as a pointer); arg is written as
 * args.n unless RAP_TRACE_NO_ARG. */
double rap_trace_host_begin(rap_trace *t, const char *name);
void rap_trace_host_end(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                        double t0);
/* Records [t0, t1) (rap_now() seconds) on track; no NVTX. */
void rap_trace_host_span(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                         double t0, double t1);

/* GPU spans (stream: a cudaStream_t, NULL = legacy default stream).
 * gpu_origin records the origin event on stream and waits for it: call it
 * once, before the first gpu_begin. gpu_begin records the start event and
 * returns a span id, or -1 when the trace is off, NULL or full (counted as
 * dropped); gpu_end(-1) does nothing. Without CUDA: RAP_ERR_NO_GPU / -1. */
rap_status rap_trace_gpu_origin(rap_trace *t, void *stream);
int rap_trace_gpu_begin(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                        void *stream);
rap_status rap_trace_gpu_end(rap_trace *t, int span, void *stream);

/* Turns the GPU spans recorded so far into times: waits for their events.
 * Spans not ended by now are dropped. Idempotent; recording may go on
 * afterwards (call it again, or write, at the end). */
rap_status rap_trace_resolve(rap_trace *t);
/* Resolves, sorts the spans by start time and writes the JSON file.
 * RAP_ERR_IO with the path on failure. */
rap_status rap_trace_write(rap_trace *t, const char *path);
/* Same, to an open stream. */
rap_status rap_trace_write_file(rap_trace *t, FILE *f);

/* Spans kept so far, and spans dropped (buffer or event pool full, or
 * never ended). */
int64_t rap_trace_recorded(const rap_trace *t);
int64_t rap_trace_dropped(const rap_trace *t);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_TRACE_H */
