/*
 * profile_parse.c -- the parse kernels' standalone latency (profile.h,
 * docs/PROFILE.md "The parse kernels"): generated Criteo text, and the
 * same rows with their categorical fields empty (short lines: lines and
 * bytes apart), parsed by rap_parse_gpu_run at several line counts, each
 * timed alone after a spin kernel (median of reps, L2 flushed before when
 * asked), fitted into a parse model (plan/parse_model.h).
 */
#include "plan/profile.h"

#include "core/file.h"
#include "data/parse_backend.h"
#include "data/parse_gpu.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The text of `rows` generated rows (seed) in *text (n bytes; rap_free). */
static rap_status gen_text(int64_t rows, uint64_t seed, char **text, size_t *n)
{
    char tmp[512];
    rap_status st = rap_prof_gen_file(rows, seed, "_parse", tmp, sizeof tmp);
    if (st == RAP_OK)
        st = rap_file_read(tmp, (size_t)1 << 31, "generated rows", text, n);
    remove(tmp);
    return st;
}

/* Line offsets of text[0, n) into start (room for lines + 1): at most
 * `lines` lines; returns how many. */
static int64_t cut(const char *text, size_t n, int64_t lines, int32_t *start)
{
    int64_t k = 0;
    size_t at = 0;
    while (at < n && k < lines) {
        start[k++] = (int32_t)at;
        const char *nl = memchr(text + at, '\n', n - at);
        at = nl ? (size_t)(nl - text) + 1 : n;
    }
    start[k] = (int32_t)at;
    return k;
}

/* The rows of text with their 26 categorical fields empty: each line up
 * to the tab before cat_0, then 25 tabs and its '\n'. out has room for n
 * bytes; returns its length. */
static size_t empty_cats(const char *text, size_t n, char *out)
{
    size_t o = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - text) : n, tabs = 0, keep = at;
        while (keep < end && tabs < RAP_CRITEO_DENSE + 1)
            tabs += text[keep++] == '\t';
        memcpy(out + o, text + at, keep - at);
        o += keep - at;
        for (int t = 0; t < RAP_CRITEO_SPARSE - 1; t++)
            out[o++] = '\t';
        out[o++] = '\n';
        at = end + 1;
    }
    return o;
}

typedef struct {
    const rap_prof_parse_config *c;
    rap_prof_gpu *g;
    rap_parse_gpu *gp;
    rap_batch dst;
    double *tmp;     /* (reps) */
} pprof;

/* Times lines [0, lines) of the uploaded text (bytes of them): median ms. */
static rap_status time_parse(pprof *P, int64_t lines, int64_t bytes, double *ms)
{
    void *st = rap_prof_prep_stream(P->g);
    for (int i = 0; i < P->c->reps; i++) {
        RAP_TRY(rap_prof_spin(P->g, st, 20));
        if (P->c->flush)
            RAP_TRY(rap_prof_flush(P->g, st));
        RAP_TRY(rap_prof_record(P->g, 0, st));
        uint64_t ticket;
        RAP_TRY(rap_parse_gpu_run(P->gp, rap_parse_gpu_text(P->gp), bytes,
                                  rap_parse_gpu_starts(P->gp), lines, &P->dst, NULL, &ticket));
        RAP_TRY(rap_prof_record(P->g, 1, st));
        RAP_TRY(rap_prof_elapsed(P->g, 0, 1, &P->tmp[i]));
    }
    *ms = rap_prof_median(P->tmp, P->c->reps);
    return RAP_OK;
}

/* Both texts (full, empty categoricals) at every line count into pts. */
static rap_status measure_all(pprof *P, char *const text[2], const size_t n[2], int32_t *start,
                              int64_t maxL, rap_parse_point *pts, int *np, double *bpl)
{
    const rap_prof_parse_config *c = P->c;
    for (int v = 0; v < 2; v++) {
        int64_t L = cut(text[v], n[v], maxL, start);
        if (L < maxL)
            return rap_fail(RAP_ERR_INTERNAL, "profile parse: %lld lines generated, %lld wanted",
                            (long long)L, (long long)maxL);
        if (v == 0)
            *bpl = (double)start[L] / (double)L;
        RAP_TRY(rap_parse_gpu_upload(P->gp, text[v], start[L], start, L));
        RAP_TRY(rap_prof_sync());
        for (int i = 0; i < c->n_lines; i++) {
            double ms;
            int64_t l = c->lines[i];
            RAP_TRY(time_parse(P, l, start[l], &ms));
            pts[*np] = (rap_parse_point){l, start[l], ms};
            (*np)++;
            rap_debug("profile parse: %s lines, %lld lines, %lld bytes: %.4f ms",
                      v ? "short" : "generated", (long long)l, (long long)start[l], ms);
        }
    }
    return RAP_OK;
}

rap_status rap_profile_parse(const rap_prof_parse_config *c, rap_parse_model *m)
{
    memset(m, 0, sizeof *m);
    int64_t maxL = 0;
    for (int i = 0; i < c->n_lines; i++) {
        if (c->lines[i] < 1 || c->lines[i] > (1 << 24))
            return rap_fail(RAP_ERR_ARG, "profile parse: %lld lines (1 to 2^24)",
                            (long long)c->lines[i]);
        maxL = c->lines[i] > maxL ? c->lines[i] : maxL;
    }
    if (c->n_lines < 1 || c->n_lines > RAP_PARSE_MODEL_POINTS / 2 || c->reps < 1)
        return rap_fail(RAP_ERR_ARG, "profile parse: 1 to %d line counts and reps >= 1",
                        RAP_PARSE_MODEL_POINTS / 2);
    pprof P;
    memset(&P, 0, sizeof P);
    P.c = c;
    char *text[2] = {NULL, NULL}, gpu[RAP_GPU_NAME] = "";
    size_t n[2] = {0, 0};
    int32_t *start = NULL;
    rap_parse_point pts[RAP_PARSE_MODEL_POINTS];
    int np = 0;
    double bpl = 0;
    rap_status st = rap_prof_gpu_create(4, &P.g); /* first: refuses clearly without a GPU */
    if (st == RAP_OK)
        st = rap_prof_gpu_name(gpu, sizeof gpu);
    if (st == RAP_OK)
        st = gen_text(maxL, c->seed, &text[0], &n[0]);
    if (st == RAP_OK) {
        text[1] = rap_malloc(n[0] + 16, "profile parse text");
        start = rap_malloc(sizeof(int32_t) * (size_t)(maxL + 1), "profile parse offsets");
        P.tmp = rap_malloc(sizeof(double) * (size_t)c->reps, "profile parse timings");
        st = text[1] && start && P.tmp ? RAP_OK : RAP_ERR_NOMEM;
    }
    if (st == RAP_OK) {
        n[1] = empty_cats(text[0], n[0], text[1]);
        rap_parse_gpu_config pc;
        memset(&pc, 0, sizeof pc);
        pc.max_lines = maxL;
        pc.max_bytes = (int64_t)n[0];
        pc.max_line = 65536;
        st = rap_parse_gpu_create(&pc, rap_prof_prep_stream(P.g), &P.gp);
    }
    if (st == RAP_OK)
        st = rap_batch_create_device(&P.dst, rap_schema_criteo(), maxL);
    if (st == RAP_OK)
        st = measure_all(&P, text, n, start, maxL, pts, &np, &bpl);
    if (st == RAP_OK)
        st = rap_parse_model_fit(pts, np, gpu, bpl, m);
    rap_parse_gpu_free(P.gp);
    rap_batch_free_any(&P.dst);
    rap_prof_gpu_free(P.g);
    rap_free(P.tmp);
    rap_free(start);
    rap_free(text[0]);
    rap_free(text[1]);
    return st;
}
