/* parse_backend.c -- the parse backends' table (parse_backend.h): the cpu
 * parser and the kernels' CPU reference here, the GPU's entry points in
 * parse_backend_gpu.cu; what they share (line offsets, the reject list
 * in the reader's form). */
#include "data/parse_backend.h"

#include "core/core.h"
#include "data/parse_backend_internal.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(RAP_PARSE_GATE_TILE == RAP_PARSE_TILE, "the gate's tiles are the kernels'");

/* ---- shared */

int64_t rap_parse_cut_lines(const char *text, size_t n, int32_t *start)
{
    int64_t k = 0;
    const char *p = text, *end = text + n;
    while (p < end) {
        start[k++] = (int32_t)(p - text);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    start[k] = (int32_t)n;
    return k;
}

rap_status rap_parse_gpu_chunk_bytes(int lanes, size_t *bytes)
{
    size_t d = RAP_PARSE_GPU_CHUNK_DEFAULT / (size_t)(lanes > 1 ? lanes : 1);
    *bytes = d > RAP_PARSE_GPU_CHUNK_MIN ? d : RAP_PARSE_GPU_CHUNK_MIN;
    const char *e = getenv("RAP_PARSE_GPU_CHUNK_MB");
    if (!e || !e[0])
        return RAP_OK;
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > 256)
        return rap_fail(RAP_ERR_ARG, "RAP_PARSE_GPU_CHUNK_MB=%s: expected the GPU parser's "
                        "chunk in whole MiB, 1 to 256", e);
    *bytes = (size_t)v << 20;
    return RAP_OK;
}

int64_t rap_parse_stage_rows(size_t chunk_bytes)
{
    return (int64_t)(chunk_bytes / RAP_CRITEO_FIELDS) + 1;
}

rap_parse_thread_sizes rap_parse_thread_sizes_of(size_t C)
{
    rap_parse_thread_sizes z = {C + 16, sizeof(int32_t) * (C + 2), sizeof(rap_parse_rej) * (C + 1)};
    return z;
}

void rap_parse_gpu_thread_config(size_t C, int64_t max_line, rap_parse_gpu_config *pc)
{
    memset(pc, 0, sizeof *pc);
    pc->max_lines = (int64_t)C + 1;
    pc->max_bytes = (int64_t)C;
    pc->max_line = max_line;
}

void rap_parse_backend_bytes(rap_parse_kind k, size_t chunk_bytes, int64_t max_line,
                             int parsers, int64_t slots, size_t *device, size_t *pinned,
                             size_t *host)
{
    *device = *pinned = *host = 0;
    if (k != RAP_PARSE_GPU && k != RAP_PARSE_REF)
        return;
    /* a thread's offsets and reject list (both kinds), its text (gpu) */
    const rap_parse_thread_sizes z = rap_parse_thread_sizes_of(chunk_bytes);
    const size_t stage = rap_batch_bytes(rap_schema_criteo(), rap_parse_stage_rows(chunk_bytes));
    if (k == RAP_PARSE_REF) {
        *host = (size_t)parsers * (z.start + z.rej) + (size_t)slots * stage;
        return;
    }
    rap_parse_gpu_config pc;
    rap_parse_gpu_thread_config(chunk_bytes, max_line, &pc);
    size_t gdev, gpin;
    rap_parse_gpu_bytes(&pc, &gdev, &gpin);
    *device = (size_t)parsers * gdev + (size_t)slots * stage;
    *pinned = (size_t)parsers * (z.text + z.start + z.rej + gpin);
}

rap_status rap_parse_take_rejects(rap_parsed *o, const rap_parse_rej *rej, int64_t n_rej,
                                  const rap_parse_result *res, const char *text,
                                  const int32_t *start, int64_t max_line)
{
    o->n_lines = res->n_lines;
    o->n_used = res->rows_used;
    o->n_rej = 0;
    o->first_msg[0] = 0;
    if (n_rej > o->cap_rej) {
        rap_parse_reject *nr = rap_realloc(o->rej, (size_t)n_rej * sizeof *nr, "reject list");
        if (!nr)
            return RAP_ERR_NOMEM;
        o->rej = nr;
        o->cap_rej = n_rej;
    }
    for (int64_t i = 0; i < n_rej; i++) {
        o->rej[i].line = rej[i].line;
        o->rej[i].pos = rej[i].pos;
        o->rej[i].reason = rej[i].reason;
    }
    o->n_rej = n_rej;
    if (n_rej > 0) { /* the CPU parser's own words for the one a caller may report */
        char msg[512];
        rap_parse_ref_message(text, start, rej[0].line, max_line, msg, sizeof msg);
        snprintf(o->first_msg, sizeof o->first_msg, "%s", msg);
    }
    return RAP_OK;
}

/* ---- cpu: the host parser, rows in the chunk's arrays */

static rap_status cpu_create(const rap_parse_backend_config *c, void **state)
{
    rap_parse_backend_config *s = rap_malloc(sizeof *s, "parser");
    *state = s;
    if (!s)
        return RAP_ERR_NOMEM;
    *s = *c;
    return RAP_OK;
}

static void cpu_free(void *state) { rap_free(state); }

static rap_status cpu_stage_create(const rap_parse_backend_config *c, rap_batch *stage)
{
    (void)c;
    memset(stage, 0, sizeof *stage);
    return RAP_OK;
}

static void cpu_stage_free(rap_batch *stage) { memset(stage, 0, sizeof *stage); }

static rap_status cpu_chunk(void *state, const char *text, size_t n, rap_parsed *out,
                            rap_batch *stage)
{
    (void)stage;
    const rap_parse_backend_config *c = state;
    return rap_parse_chunk(text, n, c->max_line, out);
}

/* ---- reference: the kernels' algorithm on the host, in their place */

typedef struct {
    rap_parse_backend_config cfg;
    rap_parse_layout lay;
    int32_t *start;       /* (C + 2) line offsets */
    rap_parse_rej *rej;   /* (C + 1) the chunk's rejects */
    /* with a gate: the chunk posted, parsed whole by its end */
    rap_parse_job job;
    const char *text;
    int64_t n_bytes, n_lines;
    rap_batch *stage;
    rap_parse_result res;
} ref_state;

static void ref_free(void *state)
{
    ref_state *s = state;
    if (!s)
        return;
    rap_aligned_free(s->start);
    rap_aligned_free(s->rej);
    rap_free(s);
}

static rap_status ref_create(const rap_parse_backend_config *c, void **state)
{
    *state = NULL;
    ref_state *s = rap_calloc(sizeof *s, "reference parser");
    if (!s)
        return RAP_ERR_NOMEM;
    s->cfg = *c;
    rap_parse_layout_criteo(&s->lay);
    /* counted (rap_mem_counted), as the memory plan sizes them */
    const rap_parse_thread_sizes z = rap_parse_thread_sizes_of(c->chunk_bytes);
    s->start = rap_aligned_alloc(z.start, "reference parser offsets");
    s->rej = rap_aligned_alloc(z.rej, "reference parser rejects");
    if (!s->start || !s->rej) {
        ref_free(s);
        return RAP_ERR_NOMEM;
    }
    *state = s;
    return RAP_OK;
}

static rap_status ref_stage_create(const rap_parse_backend_config *c, rap_batch *stage)
{
    return rap_batch_create(stage, rap_schema_criteo(), rap_parse_stage_rows(c->chunk_bytes),
                            false);
}

/* The gate's launches of a posted chunk on the releasing thread: the
 * pieces are the kernels' (whole tiles, in order: checked); the reference
 * cannot split, so the whole chunk is parsed at the end. */
static rap_status ref_piece(void *ctx, int64_t line0, int64_t line1, void *event)
{
    (void)event;
    ref_state *s = ctx;
    if (line0 != s->job.next_line || line1 < line0 || line1 > s->n_lines ||
        (line1 != s->n_lines && line1 % RAP_PARSE_TILE))
        return rap_fail(RAP_ERR_INTERNAL, "reference parser: piece [%lld, %lld) of %lld lines "
                        "out of order", (long long)line0, (long long)line1,
                        (long long)s->n_lines);
    return RAP_OK;
}

static rap_status ref_end(void *ctx)
{
    ref_state *s = ctx;
    return rap_parse_ref(&s->lay, s->text, s->n_bytes, s->start, s->n_lines, s->cfg.max_line,
                         s->stage, s->rej, &s->res);
}

static const rap_parse_launch_ops g_ref_gate_ops = {ref_piece, ref_end};

static rap_status ref_chunk(void *state, const char *text, size_t n, rap_parsed *out,
                            rap_batch *stage)
{
    ref_state *s = state;
    if (n > s->cfg.chunk_bytes)
        return rap_fail(RAP_ERR_INTERNAL, "reference parser: a chunk of %zu bytes, at most %zu",
                        n, s->cfg.chunk_bytes);
    int64_t lines = rap_parse_cut_lines(text, n, s->start);
    if (s->cfg.gate) { /* posted: parsed by whoever releases it */
        s->text = text;
        s->n_bytes = (int64_t)n;
        s->n_lines = lines;
        s->stage = stage;
        s->job.ops = &g_ref_gate_ops;
        s->job.ctx = s;
        s->job.n_lines = lines;
        RAP_TRY(rap_parse_gate_run(s->cfg.gate, &s->job));
    } else {
        RAP_TRY(rap_parse_ref(&s->lay, text, (int64_t)n, s->start, lines, s->cfg.max_line,
                              stage, s->rej, &s->res));
    }
    return rap_parse_take_rejects(out, s->rej, s->res.rows_rejected, &s->res, text, s->start,
                                  s->cfg.max_line);
}

/* ---- the table */

static const rap_parse_ops g_ops[] = {
    [RAP_PARSE_AUTO] = {"cpu", false, cpu_create, cpu_free, cpu_stage_create, cpu_stage_free,
                        cpu_chunk},
    [RAP_PARSE_CPU] = {"cpu", false, cpu_create, cpu_free, cpu_stage_create, cpu_stage_free,
                       cpu_chunk},
    [RAP_PARSE_GPU] = {"gpu", true, rap_parse_gpu_state_create, rap_parse_gpu_state_free,
                       rap_parse_gpu_stage_create, rap_batch_free_any, rap_parse_gpu_chunk},
    [RAP_PARSE_REF] = {"reference", false, ref_create, ref_free, ref_stage_create,
                       rap_batch_free_any, ref_chunk},
};

const rap_parse_ops *rap_parse_ops_of(rap_parse_kind k)
{
    if ((int)k < 0 || (int)k > RAP_PARSE_REF)
        k = RAP_PARSE_CPU;
    return &g_ops[k];
}

const char *rap_parse_kind_name(rap_parse_kind k)
{
    switch (k) {
    case RAP_PARSE_AUTO: return "auto";
    case RAP_PARSE_CPU: return "cpu";
    case RAP_PARSE_GPU: return "gpu";
    case RAP_PARSE_REF: return "reference";
    }
    return "unknown";
}

/* Appends good rows [u, u+n) of o (the cpu parser's layout) to b. */
static void copy_parsed(rap_batch *b, const rap_parsed *o, int64_t u, int64_t n)
{
    const int64_t B = b->cap, R = o->cap, at = b->rows;
    memcpy(b->label + at, o->label + u, (size_t)n * sizeof(float));
    for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
        memcpy(b->dense + j * B + at, o->dense + j * R + u, (size_t)n * sizeof(float));
        memcpy(b->dense_valid + j * B + at, o->dense_valid + j * R + u, (size_t)n);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        int64_t *off = b->sparse_off + j * (B + 1);
        int64_t *ids = b->sparse_ids + j * B; /* K = 1 */
        const int64_t *x = o->sparse + j * R + u;
        const uint8_t *v = o->sparse_valid + j * R + u;
        int64_t c = off[at];
        for (int64_t i = 0; i < n; i++) {
            ids[c] = x[i]; /* c <= at + i < B */
            c += v[i];
            off[at + i + 1] = c;
        }
        memcpy(b->sparse_valid + j * B + at, v, (size_t)n);
    }
    b->rows += n;
}

rap_status rap_parse_rows_append(const rap_parse_ops *ops, rap_batch *b, const rap_parsed *o,
                                 const rap_batch *stage, int64_t u, int64_t n, void *stream)
{
    if (ops->device_rows)
        return rap_batch_append_device(b, stage, u, n, stream);
    if (stage->cap > 0) {
        rap_batch_append(b, stage, u, n);
        return RAP_OK;
    }
    copy_parsed(b, o, u, n);
    return RAP_OK;
}
