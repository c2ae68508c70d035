/*
 * parse_backend.h -- who parses the reader's chunks: a function table with
 * one entry per rap_parse_kind (docs/INPUT.md "Parsing on the GPU"):
 *
 *   cpu        rap_parse_chunk on the host (parse.h): rows in the chunk's
 *              rap_parsed arrays.
 *   gpu        the chunk's raw text copied into a pinned buffer and sent to
 *              the device; the parse kernels (parse_gpu.h) write its good
 *              rows into the slot's staging batch in device memory; only the
 *              accounting comes back (counts, the reject list, 12 bytes a
 *              reject), and the message of the first reject is made on the
 *              host from the text (rap_parse_ref_message).
 *   reference  the kernels' CPU reference (parse_ref.h) in place of the
 *              launches, staging in host memory: the same path, in CI and
 *              on the CPU backend.
 *
 * The reader (reader.c) stays the one place that decides which rows go
 * where: for every kind a parsed chunk is a rap_parsed whose n_lines,
 * n_used, rej[] and first_msg are what rap_parse_chunk gives the same text
 * (tests/test_parse_feed.c), so the accounting (rows read = used +
 * rejected, reasons, first lines, bad_rows fail naming file:line and the
 * field, max_rows, the interleave turns) is the reader's own. Only where
 * the good rows live differs, and the append op moves them.
 *
 * With a gate (rap_parse_backend_config.gate) gpu and reference do not
 * launch: the chunk is posted to the gate as a job and its parser thread
 * waits until the job was launched and ended by whoever released it, then
 * for the result (the GPU's on its stream, on this thread); reference runs
 * the whole of rap_parse_ref at the job's end, on the releasing thread.
 *
 * Threads: a backend instance (create) belongs to one parser thread; the
 * staging batches belong to the reader's slots; append runs on the
 * consumer's thread (on the GPU on a stream of its own, rap_parse_sync).
 *
 * Letters: C chunk bytes, R staging rows (C / NF + 1: a good line holds
 * NF - 1 tabs and its '\n'), NF fields.
 */
#ifndef RAP_PARSE_BACKEND_H
#define RAP_PARSE_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "data/parse.h"
#include "data/parse_gate.h"

typedef struct {
    size_t chunk_bytes;   /* C: the largest chunk parsed at once */
    int64_t max_line;     /* as rap_parse_line's */
    int device;           /* gpu: the CUDA device (each thread sets it) */
    rap_parse_gate *gate; /* gpu, reference: the parse of a chunk is posted here and
                           * launched by whoever releases it (parse_gate.h); NULL:
                           * launched by the parser thread itself. Not owned */
} rap_parse_backend_config;

typedef struct {
    const char *name;     /* "cpu", "gpu", "reference" */
    bool device_rows;     /* good rows (staging and batches) are device memory */
    /* One parser thread's state (buffers, the GPU parser and its stream). */
    rap_status (*create)(const rap_parse_backend_config *c, void **state);
    void (*free)(void *state);
    /* A slot's staging batch (R rows; unused by cpu: cap 0). */
    rap_status (*stage_create)(const rap_parse_backend_config *c, rap_batch *stage);
    void (*stage_free)(rap_batch *stage);
    /* Parses text[0, n) (whole lines, each ending in '\n') into out (n_lines,
     * n_used, rej, first_msg; cpu: also its rows) and stage (the rows). */
    rap_status (*chunk)(void *state, const char *text, size_t n, rap_parsed *out,
                        rap_batch *stage);
} rap_parse_ops;

/* The reader's chunk with the gpu (and reference) parser when the reader
 * is not given one, for a reader of `lanes` lanes: the environment's
 * RAP_PARSE_GPU_CHUNK_MB (whole MiB, 1 to 256; an A/B knob), else
 * RAP_PARSE_GPU_CHUNK_DEFAULT / lanes, at least RAP_PARSE_GPU_CHUNK_MIN.
 * A chunk is a parser thread's job at the gate: the lines one release
 * launches, and one chunk of 1 MiB (4,352 Criteo lines) a release did not
 * feed a batch of 8192 a step (docs/INPUT.md "The chunk"). Its device
 * memory grows with it, so lanes share the default. RAP_ERR_ARG for a
 * value that is not such a count (*bytes then the default). */
#define RAP_PARSE_GPU_CHUNK_DEFAULT ((size_t)8 << 20)
#define RAP_PARSE_GPU_CHUNK_MIN ((size_t)1 << 20)
rap_status rap_parse_gpu_chunk_bytes(int lanes, size_t *bytes);

/* What a reader's parsing of kind k allocates beside its chunk slots, for
 * `parsers` parser threads and `slots` slots, chunk_bytes (C) as
 * rap_parse_backend_config's: *device (gpu: each thread's GPU parser, each
 * slot's staging batch of R rows), *pinned (gpu: each thread's text,
 * offsets and reject list, room for C + 1 lines), *host (reference: the
 * same in ordinary memory; cpu: 0, its rows are the reader's rap_parsed
 * estimate). Arithmetic only; cannot fail. */
void rap_parse_backend_bytes(rap_parse_kind k, size_t chunk_bytes, int64_t max_line,
                             int parsers, int64_t slots, size_t *device, size_t *pinned,
                             size_t *host);

/* The table entry of kind k (AUTO: cpu). Cannot fail. */
const rap_parse_ops *rap_parse_ops_of(rap_parse_kind k);

/* Appends good rows [u, u + n) of a parsed chunk to b (b->rows + n <=
 * b->cap): from o's arrays (cpu) or from stage (gpu: on stream, device to
 * device, b device memory; reference: host). Errors: RAP_ERR_CUDA. */
rap_status rap_parse_rows_append(const rap_parse_ops *ops, rap_batch *b, const rap_parsed *o,
                                 const rap_batch *stage, int64_t u, int64_t n, void *stream);

/* ---- device batches (batch_gpu.cu) */

/* A batch of cap rows whose block is device memory (b->device). Errors:
 * RAP_ERR_NOMEM, RAP_ERR_CUDA; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_batch_create_device(rap_batch *b, rap_schema s, int64_t cap);
/* Frees a batch made by rap_batch_create_device or rap_batch_create. */
void rap_batch_free_any(rap_batch *b);
/* rap_batch_append for device batches, queued on stream: rows [a, a + n)
 * of src after dst's rows, the sparse offsets rebased (dst->rows grows at
 * once; the bytes are there when the stream reaches them). Same bytes as
 * rap_batch_append. Errors: RAP_ERR_CUDA; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_batch_append_device(rap_batch *dst, const rap_batch *src, int64_t a, int64_t n,
                                   void *stream);
/* Rows idx[0, n) of src (device indices d_idx, in any order) after dst's
 * rows, queued on stream: the bytes of rap_batch_append of each row in
 * turn (one launch for the row arrays, one for the sparse columns). The
 * row feed's hold-out: the kept rows of a reader batch in one gather
 * instead of an append per run. Errors: RAP_ERR_CUDA; RAP_ERR_NO_GPU
 * without CUDA. */
rap_status rap_batch_gather_device(rap_batch *dst, const rap_batch *src, const int32_t *d_idx,
                                   int64_t n, void *stream);
/* The ids in the rows of the first n sparse columns of device batch b
 * (ids[j] = off[rows] - off[0] of column j), copied back on stream and
 * waited for. The host never reads a device batch's offsets itself.
 * Errors: RAP_ERR_CUDA; RAP_ERR_NO_GPU without CUDA. */
rap_status rap_batch_ids_device(const rap_batch *b, int n, int64_t *ids, void *stream);
/* Dense column j of rows [0, b->rows) of device batch b into vals and
 * valid (b->rows each, host memory), waited for: for test hooks and
 * messages, never the training's path. Errors: RAP_ERR_CUDA;
 * RAP_ERR_NO_GPU without CUDA. */
rap_status rap_batch_dense_to_host(const rap_batch *b, int j, float *vals, uint8_t *valid);
/* n gather indices: a pinned host list and its device copy; the copy
 * queued on stream (the host list unchanged until the stream reached it). */
rap_status rap_parse_idx_create(int64_t n, int32_t **h_idx, int32_t **d_idx);
void rap_parse_idx_free(int32_t *h_idx, int32_t *d_idx);
rap_status rap_parse_idx_upload(int32_t *d_idx, const int32_t *h_idx, int64_t n, void *stream);
/* A stream for the consumer's appends on the current device; sync; free. */
rap_status rap_parse_stream_create(void **stream);
rap_status rap_parse_sync(void *stream);
/* n bytes between host and device memory (either way), queued on stream
 * and waited for. */
rap_status rap_parse_copy_sync(void *dst, const void *src, size_t n, void *stream);
void rap_parse_stream_free(void *stream);
/* The current CUDA device (0 without CUDA), and setting it on this thread. */
int rap_parse_device(void);
rap_status rap_parse_set_device(int device);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_BACKEND_H */
