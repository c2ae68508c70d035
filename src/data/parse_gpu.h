/*
 * parse_gpu.h -- the GPU parser: kernels that turn a line batch in device
 * memory into a rap_batch in device memory, row for row and reject for
 * reject what the CPU parser makes of the same lines. What is computed is
 * parse_ref.h's (the contract and its CPU reference); this file says how it
 * is launched. docs/INPUT.md "Parsing on the GPU" gives the design.
 *
 * One kernel does it all, one thread block per tile of RAP_PARSE_TILE
 * lines: a half-warp per line finds the field boundaries, the block
 * converts the tile's fields into shared memory (a warp one field of 32
 * lines); the tile's counters are ranked; a single-pass
 * prefix over the tiles (decoupled look-back) gives the tile its place; the
 * tile's good rows and rejects are written there. The text is read once
 * and the batch written once.
 *
 * Usage (errors not handled):
 *
 *   rap_parse_gpu_config pc = {.max_lines = 65536, .max_bytes = 64 << 20,
 *                              .max_line = 65536};
 *   rap_parse_gpu *p;
 *   rap_parse_gpu_create(&pc, stream, &p);       // all memory, once
 *   rap_batch dev;                                // arrays on the device
 *   rap_batch_view(&dev, rap_schema_criteo(), 65536, dev_block);
 *   for each line batch b (lines.h):
 *       rap_parse_gpu_upload(p, b.text, b.bytes, b.start, b.n);
 *       uint64_t ticket;
 *       rap_parse_gpu_run(p, rap_parse_gpu_text(p), b.bytes,
 *                         rap_parse_gpu_starts(p), b.n, &dev, NULL, &ticket);
 *       ... kernels that read dev follow on the stream ...
 *   later, no sync in the hot path:
 *       rap_parse_result r; bool ready;
 *       rap_parse_gpu_result(p, ticket, false, &r, &ready);
 *       if (ready) ... r.rows_used, r.rejected[], r.first[][] ...
 *
 * Splitting: a batch can be launched in pieces (begin, piece, ..., end),
 * each piece a range of whole tiles in line order on the one stream: the
 * runtime can fit a batch's parse into several windows. A piece may start
 * only at a multiple of RAP_PARSE_TILE lines and pieces must come in order
 * (a tile reads the prefix of the tiles before it, so an earlier piece
 * must have run). Nothing else splits: the result is whole after end.
 *
 * Letters: B rows of the destination batch (>= lines), L lines of a batch
 * at most (max_lines), NT tiles (ceil(L / RAP_PARSE_TILE)).
 */
#ifndef RAP_PARSE_GPU_H
#define RAP_PARSE_GPU_H

#include "data/parse_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Results kept on the host side at once: a ticket must be read before
 * RAP_PARSE_GPU_SLOTS more batches are ended. */
#define RAP_PARSE_GPU_SLOTS 4

typedef struct {
    int64_t max_lines;               /* L (>= 1) */
    int64_t max_bytes;               /* text of a batch at most: the parser's own buffer */
    int64_t max_line;                /* longer lines are RAP_REJ_LONG (as rap_parse_line) */
    const rap_parse_layout *layout;  /* NULL: Criteo's 40 fields (copied) */
    int64_t tiles_per_launch;        /* rap_parse_gpu_run: at most this many tiles
                                      * (RAP_PARSE_TILE lines, a block each) a launch,
                                      * so that the kernel holds few SMs at a time beside
                                      * the training's kernels; 0: one launch a batch */
} rap_parse_gpu_config;

typedef struct rap_parse_gpu rap_parse_gpu;

/* Allocates everything on the current GPU and the host's pinned result
 * slots; stream (a cudaStream_t; NULL the default stream) is where every
 * later call queues its work. Errors: RAP_ERR_ARG (config, layout),
 * RAP_ERR_NOMEM, RAP_ERR_CUDA; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_parse_gpu_create(const rap_parse_gpu_config *cfg, void *stream,
                                rap_parse_gpu **out);
/* Waits for the parser's queued work, then frees. Accepts NULL. */
void rap_parse_gpu_free(rap_parse_gpu *p);
/* The bytes rap_parse_gpu_create allocates for cfg: *device (its buffers,
 * the layout's tables of a few KB aside) and *pinned (the result slots).
 * Arithmetic only, also without CUDA; 0 for a config create refuses. */
void rap_parse_gpu_bytes(const rap_parse_gpu_config *cfg, size_t *device, size_t *pinned);

/* The parser's own device buffers: text (max_bytes, 16-byte aligned and
 * padded) and offsets (max_lines + 1). */
char *rap_parse_gpu_text(rap_parse_gpu *p);
int32_t *rap_parse_gpu_starts(rap_parse_gpu *p);
/* Queues copies of a host line batch into those buffers (the host memory
 * must stay as it is until they ran; pinned memory lets them overlap).
 * RAP_ERR_ARG when it does not fit. */
rap_status rap_parse_gpu_upload(rap_parse_gpu *p, const char *text, int64_t n_bytes,
                                const int32_t *start, int64_t n_lines);

/* Queues the parse of lines [0, n_lines) (device text and start as in
 * parse_ref.h; text 16-byte aligned and readable up to n_bytes rounded up
 * to 16, as the parser's own buffer and any cudaMalloc'd buffer of that
 * size are) into rows [0, used) of dst (device arrays, the layout's
 * columns, cap >= rap_parse_rows_bound, n_lines at most). Nothing is
 * waited for. *result_dev (may be NULL) gets the batch's result on the device, valid once the stream
 * reaches it; *ticket names it for rap_parse_gpu_result. The reject list
 * (rap_parse_gpu_rejects) belongs to the latest batch. Errors: RAP_ERR_ARG
 * for arguments that do not fit, RAP_ERR_CUDA for a failed launch. */
rap_status rap_parse_gpu_run(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                             const int32_t *d_start, int64_t n_lines, const rap_batch *dst,
                             const rap_parse_result **result_dev, uint64_t *ticket);

/* The same in pieces: begin (checks, nothing queued), then pieces covering
 * [0, n_lines) in order, line0 a multiple of RAP_PARSE_TILE (line1 too,
 * or n_lines), then end (queues the result's copy to the host). A batch of
 * 0 lines still takes one piece (0, 0). */
rap_status rap_parse_gpu_begin(rap_parse_gpu *p, const char *d_text, int64_t n_bytes,
                               const int32_t *d_start, int64_t n_lines, const rap_batch *dst);
rap_status rap_parse_gpu_piece(rap_parse_gpu *p, int64_t line0, int64_t line1);
rap_status rap_parse_gpu_end(rap_parse_gpu *p, const rap_parse_result **result_dev,
                             uint64_t *ticket);
/* Closes an open batch without ending it (after a piece failed): the next
 * begin may follow; the pieces queued still run, their result is never
 * read. Cannot fail; nothing open: nothing done. */
void rap_parse_gpu_abort(rap_parse_gpu *p);

/* The result of batch `ticket` on the host: *ready false (and *out
 * untouched) while the stream has not reached it, unless wait, which
 * waits. Errors: RAP_ERR_ARG for a ticket not issued or older than the
 * last RAP_PARSE_GPU_SLOTS; RAP_ERR_CUDA. */
rap_status rap_parse_gpu_result(rap_parse_gpu *p, uint64_t ticket, bool wait,
                                rap_parse_result *out, bool *ready);

/* The latest batch's rejects on the device, in line order: entries [0,
 * rows_rejected) of its result. Valid until the next batch's kernels run
 * (copies queued on the stream before the next run see it). */
const rap_parse_rej *rap_parse_gpu_rejects(const rap_parse_gpu *p);

/* For the benchmark only: later batches run only the kernel's first
 * `stages` phases (1: boundaries and conversion; 2: and the counters and
 * the prefix over tiles; 3: all, the default), so that timing each gives
 * each phase's cost. Below 3 the batch and the result are incomplete. */
void rap_parse_gpu_stages(rap_parse_gpu *p, int stages);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_GPU_H */
