/*
 * trace.c -- Chrome trace-event JSON timeline (trace.h, docs/TRACE.md).
 *
 * Recording claims a slot of the preallocated event array with an atomic
 * counter and fills it; a claim past the end counts a drop. GPU spans also
 * claim a pair of CUDA events from the pool; their slot holds the pair's
 * index until rap_trace_resolve turns the pair into times.
 */
#include "run/trace.h"

#include "core/json.h"
#include "core/out.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include "core/cuda_util.h"
#include <nvtx3/nvToolsExt.h>
#endif

typedef struct {
    char name[RAP_TRACE_NAME];
    const char *cat;
    int track;
    int gpu_pair;     /* -1: host span; else the pair whose events give ts, dur */
    int64_t arg;
    double ts_us;     /* from the trace's origin */
    double dur_us;
} trace_event;

typedef struct {
    char name[64];
    int device;       /* -1 host */
} trace_track;

#ifdef RAP_HAVE_CUDA
typedef struct {
    cudaEvent_t begin, end;
    atomic_int ended;
    nvtxRangeId_t range;
} gpu_pair;
#endif

struct rap_trace {
    trace_event *ev;     /* (cap) */
    int cap;
    atomic_llong n_claimed; /* slots claimed; those >= cap were dropped */
    atomic_llong dropped;
    atomic_int enabled;
    trace_track tracks[RAP_TRACE_MAX_TRACKS];
    int n_tracks;
    double origin;       /* rap_now() at create */
    int device;
#ifdef RAP_HAVE_CUDA
    gpu_pair *pairs;     /* (n_pairs) */
    int n_pairs;
    atomic_int pairs_claimed;
    cudaEvent_t origin_ev;
    bool have_origin_ev;
    bool origin_set;
    double origin_gpu_us; /* host time (us from origin) at which origin_ev completed */
#endif
};

static void copy_name(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "?");
}

rap_status rap_trace_create(const rap_trace_config *c, rap_trace **out)
{
    *out = NULL;
    rap_trace_config d = {0};
    if (c)
        d = *c;
    if (d.max_events < 0 || d.max_gpu_spans < 0)
        return rap_fail(RAP_ERR_ARG, "trace: expected max_events >= 0 and max_gpu_spans >= 0");
    if (d.max_events == 0)
        d.max_events = 65536;
#ifndef RAP_HAVE_CUDA
    if (d.max_gpu_spans > 0)
        return rap_fail(RAP_ERR_NO_GPU, "trace: GPU spans asked for, but rap was built without CUDA");
#endif
    rap_trace *t = rap_calloc(sizeof *t, "trace");
    if (!t)
        return RAP_ERR_NOMEM;
    t->ev = rap_calloc(sizeof *t->ev * (size_t)d.max_events, "trace events");
    if (!t->ev) {
        rap_free(t);
        return RAP_ERR_NOMEM;
    }
    t->cap = d.max_events;
    atomic_init(&t->n_claimed, 0);
    atomic_init(&t->dropped, 0);
    atomic_init(&t->enabled, 1);
    t->origin = rap_now();
    t->device = d.device;
    static const char *names[RAP_TRACK_BUILTIN] = {"training stream", "preprocessing stream",
                                                   "copy stream", "main thread", "feeder thread"};
    for (int k = 0; k < RAP_TRACK_BUILTIN; k++) {
        copy_name(t->tracks[k].name, sizeof t->tracks[k].name, names[k]);
        t->tracks[k].device = k <= RAP_TRACK_COPY ? d.device : -1;
    }
    t->n_tracks = RAP_TRACK_BUILTIN;
#ifdef RAP_HAVE_CUDA
    atomic_init(&t->pairs_claimed, 0);
    if (d.max_gpu_spans > 0) {
        t->pairs = rap_calloc(sizeof *t->pairs * (size_t)d.max_gpu_spans, "trace event pairs");
        if (!t->pairs) {
            rap_trace_free(t);
            return RAP_ERR_NOMEM;
        }
        for (int i = 0; i < d.max_gpu_spans; i++) {
            cudaError_t e1 = cudaEventCreate(&t->pairs[i].begin);
            cudaError_t e2 = e1 == cudaSuccess ? cudaEventCreate(&t->pairs[i].end) : e1;
            if (e2 != cudaSuccess) {
                if (e1 == cudaSuccess)
                    cudaEventDestroy(t->pairs[i].begin);
                rap_trace_free(t);
                return rap_fail(RAP_ERR_CUDA, "trace: cudaEventCreate (pair %d of %d): %s", i,
                                d.max_gpu_spans, cudaGetErrorString(e2));
            }
            atomic_init(&t->pairs[i].ended, 0);
            t->n_pairs = i + 1;
        }
        cudaError_t e = cudaEventCreate(&t->origin_ev);
        if (e != cudaSuccess) {
            rap_trace_free(t);
            return rap_fail(RAP_ERR_CUDA, "trace: cudaEventCreate (origin): %s", cudaGetErrorString(e));
        }
        t->have_origin_ev = true;
    }
#endif
    *out = t;
    return RAP_OK;
}

void rap_trace_free(rap_trace *t)
{
    if (!t)
        return;
#ifdef RAP_HAVE_CUDA
    for (int i = 0; i < t->n_pairs; i++) {
        cudaEventDestroy(t->pairs[i].begin);
        cudaEventDestroy(t->pairs[i].end);
    }
    if (t->have_origin_ev)
        cudaEventDestroy(t->origin_ev);
    rap_free(t->pairs);
#endif
    rap_free(t->ev);
    rap_free(t);
}

int rap_trace_add_track(rap_trace *t, const char *name, int device)
{
    if (!t || t->n_tracks >= RAP_TRACE_MAX_TRACKS)
        return -1;
    trace_track *k = &t->tracks[t->n_tracks];
    copy_name(k->name, sizeof k->name, name);
    k->device = device < 0 ? -1 : device;
    return t->n_tracks++;
}

void rap_trace_set_enabled(rap_trace *t, bool on)
{
    if (t)
        atomic_store(&t->enabled, on ? 1 : 0);
}

bool rap_trace_enabled(const rap_trace *t)
{
    return t && atomic_load(&((rap_trace *)t)->enabled);
}

/* Claims a slot; NULL (and a drop counted) when full. */
static trace_event *claim(rap_trace *t)
{
    long long i = atomic_fetch_add(&t->n_claimed, 1);
    if (i >= t->cap) {
        atomic_fetch_add(&t->dropped, 1);
        return NULL;
    }
    return &t->ev[i];
}

static bool track_ok(const rap_trace *t, int track)
{
    return track >= 0 && track < t->n_tracks;
}

void rap_trace_host_span(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                         double t0, double t1)
{
    if (!t || !atomic_load(&t->enabled) || !track_ok(t, track))
        return;
    trace_event *e = claim(t);
    if (!e)
        return;
    copy_name(e->name, sizeof e->name, name);
    e->cat = cat ? cat : "host";
    e->track = track;
    e->gpu_pair = -1;
    e->arg = arg;
    e->ts_us = (t0 - t->origin) * 1e6;
    e->dur_us = t1 > t0 ? (t1 - t0) * 1e6 : 0;
}

double rap_trace_host_begin(rap_trace *t, const char *name)
{
    if (!t || !atomic_load(&t->enabled))
        return 0;
#ifdef RAP_HAVE_CUDA
    nvtxRangePushA(name ? name : "?");
#endif
    return rap_now();
}

void rap_trace_host_end(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                        double t0)
{
    if (!t || t0 == 0)
        return; /* begin was not recorded (trace off then) */
#ifdef RAP_HAVE_CUDA
    nvtxRangePop();
#endif
    rap_trace_host_span(t, track, name, cat, arg, t0, rap_now());
}

#ifdef RAP_HAVE_CUDA
rap_status rap_trace_gpu_origin(rap_trace *t, void *stream)
{
    if (!t)
        return RAP_OK;
    if (!t->have_origin_ev)
        return rap_fail(RAP_ERR_ARG, "trace: no GPU spans were asked for at create (max_gpu_spans 0)");
    RAP_CUDA_TRY(cudaEventRecord(t->origin_ev, (cudaStream_t)stream));
    RAP_CUDA_TRY(cudaEventSynchronize(t->origin_ev));
    t->origin_gpu_us = (rap_now() - t->origin) * 1e6;
    t->origin_set = true;
    return RAP_OK;
}

int rap_trace_gpu_begin(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                        void *stream)
{
    if (!t || !atomic_load(&t->enabled) || !track_ok(t, track) || !t->origin_set)
        return -1;
    int p = atomic_fetch_add(&t->pairs_claimed, 1);
    if (p >= t->n_pairs) {
        atomic_fetch_add(&t->dropped, 1);
        return -1;
    }
    trace_event *e = claim(t);
    if (!e)
        return -1;
    copy_name(e->name, sizeof e->name, name);
    e->cat = cat ? cat : "gpu";
    e->track = track;
    e->gpu_pair = p;
    e->arg = arg;
    e->ts_us = e->dur_us = 0;
    gpu_pair *g = &t->pairs[p];
    if (cudaEventRecord(g->begin, (cudaStream_t)stream) != cudaSuccess) {
        e->gpu_pair = -2; /* dropped at resolve */
        return -1;
    }
    g->range = nvtxRangeStartA(e->name);
    return p;
}

rap_status rap_trace_gpu_end(rap_trace *t, int span, void *stream)
{
    if (!t || span < 0 || span >= t->n_pairs)
        return RAP_OK;
    gpu_pair *g = &t->pairs[span];
    RAP_CUDA_TRY(cudaEventRecord(g->end, (cudaStream_t)stream));
    nvtxRangeEnd(g->range);
    atomic_store(&g->ended, 1);
    return RAP_OK;
}
#else
rap_status rap_trace_gpu_origin(rap_trace *t, void *stream)
{
    if (!t)
        return RAP_OK;
    return rap_fail(RAP_ERR_NO_GPU, "trace: GPU spans need a build with CUDA");
}

int rap_trace_gpu_begin(rap_trace *t, int track, const char *name, const char *cat, int64_t arg,
                        void *stream)
{
    return -1;
}

rap_status rap_trace_gpu_end(rap_trace *t, int span, void *stream)
{
    return RAP_OK;
}
#endif

int64_t rap_trace_recorded(const rap_trace *t)
{
    if (!t)
        return 0;
    long long n = atomic_load(&((rap_trace *)t)->n_claimed);
    return n < t->cap ? n : t->cap;
}

int64_t rap_trace_dropped(const rap_trace *t)
{
    return t ? atomic_load(&((rap_trace *)t)->dropped) : 0;
}

rap_status rap_trace_resolve(rap_trace *t)
{
    if (!t)
        return RAP_OK;
    int64_t n = rap_trace_recorded(t);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        trace_event *e = &t->ev[i];
        bool keep = e->gpu_pair == -1;
#ifdef RAP_HAVE_CUDA
        if (e->gpu_pair >= 0) {
            gpu_pair *g = &t->pairs[e->gpu_pair];
            if (atomic_load(&g->ended)) {
                float b_ms, e_ms;
                RAP_CUDA_TRY(cudaEventSynchronize(g->begin));
                RAP_CUDA_TRY(cudaEventSynchronize(g->end));
                RAP_CUDA_TRY(cudaEventElapsedTime(&b_ms, t->origin_ev, g->begin));
                RAP_CUDA_TRY(cudaEventElapsedTime(&e_ms, t->origin_ev, g->end));
                e->ts_us = t->origin_gpu_us + b_ms * 1e3;
                e->dur_us = e_ms > b_ms ? (e_ms - b_ms) * 1e3 : 0;
                keep = true;
            }
        }
#endif
        if (keep)
            t->ev[kept++] = *e;
        else
            atomic_fetch_add(&t->dropped, 1);
    }
    /* the slots past kept are free again; nothing records while resolving */
    atomic_store(&t->n_claimed, kept);
    for (int64_t i = 0; i < kept; i++)
        t->ev[i].gpu_pair = -1; /* resolved: a host-clock span from now on */
    return RAP_OK;
}

static int cmp_event(const void *a, const void *b)
{
    const trace_event *x = a, *y = b;
    if (x->ts_us != y->ts_us)
        return x->ts_us < y->ts_us ? -1 : 1;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    /* a longer span first, so that nested spans follow their parent */
    if (x->dur_us != y->dur_us)
        return x->dur_us > y->dur_us ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int track_pid(const trace_track *k) { return k->device < 0 ? 1 : 2 + k->device; }

rap_status rap_trace_write_file(rap_trace *t, FILE *f)
{
    if (!t)
        return RAP_OK;
    RAP_TRY(rap_trace_resolve(t));
    int64_t n = rap_trace_recorded(t);
    qsort(t->ev, (size_t)n, sizeof *t->ev, cmp_event);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"dropped\":%lld,\"recorded\":%lld},\n"
               "\"traceEvents\":[\n",
            (long long)rap_trace_dropped(t), (long long)n);
    /* metadata: process and track names, and the track order */
    bool pid_named[2 + RAP_TRACE_MAX_TRACKS] = {false};
    bool first = true;
    for (int k = 0; k < t->n_tracks; k++) {
        const trace_track *tk = &t->tracks[k];
        int pid = track_pid(tk);
        if (pid < 2 + RAP_TRACE_MAX_TRACKS && !pid_named[pid]) {
            pid_named[pid] = true;
            char pname[32];
            if (tk->device < 0)
                snprintf(pname, sizeof pname, "host");
            else
                snprintf(pname, sizeof pname, "GPU %d", tk->device);
            fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"name\":",
                    first ? "" : ",\n", pid);
            rap_json_put_str(f, pname);
            fprintf(f, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"sort_index\":%d}}",
                    pid, tk->device < 0 ? 1000 : tk->device);
            first = false;
        }
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                first ? "" : ",\n", pid, k + 1);
        rap_json_put_str(f, tk->name);
        fprintf(f, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"sort_index\":%d}}",
                pid, k + 1, k);
        first = false;
    }
    for (int64_t i = 0; i < n; i++) {
        const trace_event *e = &t->ev[i];
        fprintf(f, ",\n{\"name\":");
        rap_json_put_str(f, e->name);
        fprintf(f, ",\"cat\":");
        rap_json_put_str(f, e->cat);
        fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
                track_pid(&t->tracks[e->track]), e->track + 1, e->ts_us, e->dur_us);
        if (e->arg != RAP_TRACE_NO_ARG)
            fprintf(f, ",\"args\":{\"n\":%lld}", (long long)e->arg);
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
    if (fflush(f) != 0 || ferror(f))
        return rap_fail(RAP_ERR_IO, "trace: write failed");
    return RAP_OK;
}

rap_status rap_trace_write(rap_trace *t, const char *path)
{
    if (!t)
        return RAP_OK;
    rap_out *o;
    rap_status st = rap_out_open(path, NULL, &o);
    if (st != RAP_OK)
        return rap_fail_context(st, "trace");
    st = rap_trace_write_file(t, rap_out_file(o));
    if (st != RAP_OK)
        rap_fail_context(st, "%s", path);
    return rap_out_close(o, st);
}
