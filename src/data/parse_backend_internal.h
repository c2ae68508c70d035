/* parse_backend_internal.h -- what parse_backend.c and parse_backend_gpu.cu
 * share. Nothing else includes it. */
#ifndef RAP_PARSE_BACKEND_INTERNAL_H
#define RAP_PARSE_BACKEND_INTERNAL_H

#include "data/parse_backend.h"
#include "data/parse_gpu.h"
#include "data/parse_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Offsets of the lines of text[0, n) (whole lines: every line ends in
 * '\n', the last one may not): start[0..k], start[k] = n; returns k.
 * start has room for n + 1 entries. Cannot fail. */
int64_t rap_parse_cut_lines(const char *text, size_t n, int32_t *start);
/* R, the staging rows of a chunk of chunk_bytes: its good rows at most. */
int64_t rap_parse_stage_rows(size_t chunk_bytes);
/* The reader's view of a parsed chunk from the kernels' result and reject
 * list (line order): n_lines, n_used, rej (grown as needed), first_msg
 * (the CPU parser's message for rej[0], from the text). RAP_ERR_NOMEM. */
rap_status rap_parse_take_rejects(rap_parsed *o, const rap_parse_rej *rej, int64_t n_rej,
                                  const rap_parse_result *res, const char *text,
                                  const int32_t *start, int64_t max_line);

/* A parser thread's buffers for chunks of C bytes (rap_parse_backend_config's
 * chunk_bytes): its copy of the text (gpu: pinned), the line offsets and
 * the reject list (room for C + 1 lines); and its GPU parser's config
 * (tiles_per_launch 0). What the backends allocate and
 * rap_parse_backend_bytes counts. Cannot fail. */
typedef struct {
    size_t text, start, rej;
} rap_parse_thread_sizes;
rap_parse_thread_sizes rap_parse_thread_sizes_of(size_t C);
void rap_parse_gpu_thread_config(size_t C, int64_t max_line, rap_parse_gpu_config *pc);

/* Tiles (RAP_PARSE_TILE lines, a thread block each) a launch of the GPU
 * parser beside the training: RAP_PARSE_GPU_TILES_DEFAULT, or the
 * environment's RAP_PARSE_GPU_TILES (an A/B knob: 0 launches a chunk's
 * tiles at once). RAP_ERR_ARG for a value that is not a count. */
#define RAP_PARSE_GPU_TILES_DEFAULT 0
rap_status rap_parse_gpu_tiles_per_launch(int64_t *tiles);

/* The gpu entries of the table (parse_backend_gpu.cu). */
rap_status rap_parse_gpu_state_create(const rap_parse_backend_config *c, void **state);
void rap_parse_gpu_state_free(void *state);
rap_status rap_parse_gpu_stage_create(const rap_parse_backend_config *c, rap_batch *stage);
rap_status rap_parse_gpu_chunk(void *state, const char *text, size_t n, rap_parsed *out,
                               rap_batch *stage);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_BACKEND_INTERNAL_H */
