/*
 * graph.h -- CUDA graphs of the training phases (--cuda-graph): record the
 * work queued on a stream into an executable graph, then replay it.
 *
 * Memset nodes become kernel nodes. cuBLASLt (split-K GEMMs) and CUB (the
 * radix sort of the embedding backward) issue cudaMemsetAsync, which a
 * capture turns into memset nodes. On the H200 each such node costs the
 * training stream gaps before and after it that a kernel node does not
 * (docs/RUNTIME.md, "Modes"), so rap_run_graph_end replaces every memset
 * node by a kernel that writes the same bytes, with the same edges. The
 * environment variable RAP_GRAPH_MEMSET=node keeps the memset nodes (for
 * A/B runs).
 *
 * rap_graph_memset_ref is the CPU reference of that kernel: what a memset
 * node with these parameters writes. All entry points but the reference
 * return RAP_ERR_NO_GPU in a build without CUDA.
 */
#ifndef RAP_RUN_GRAPH_H
#define RAP_RUN_GRAPH_H

#include "model/model.h"
#include "rap.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording stream's work (thread-local capture mode). */
rap_status rap_run_graph_begin(void *stream);
/* Ends the recording, rewrites memset nodes (above) and instantiates:
 * *graph (opaque). *memsets_replaced (may be NULL) = how many memset nodes
 * became kernel nodes. */
rap_status rap_run_graph_end(void *stream, void **graph, int *memsets_replaced);
/* A training phase's graph: phase(m, mb) recorded on stream between
 * begin and end. A failing phase wins over the capture's status (*graph
 * NULL then). */
typedef rap_status (*rap_run_phase_fn)(rap_model *m, const rap_model_batch *mb);
rap_status rap_run_graph_capture(void *stream, rap_run_phase_fn phase, rap_model *m,
                                 const rap_model_batch *mb, void **graph,
                                 int *memsets_replaced);
rap_status rap_run_graph_launch(void *graph, void *stream);
/* The rewrite alone, on graph (a cudaGraph_t, not instantiated): every
 * memset node with plain edges and a destination aligned to its element
 * size becomes a kernel node; *replaced = how many. */
rap_status rap_run_graph_rewrite_memsets(void *graph, int *replaced);
void rap_run_graph_free(void *graph);

/* What a memset node writes: height rows of width elements of elem_size
 * bytes (1, 2 or 4; the low bytes of value, little-endian), row r at
 * dst + r * pitch (pitch unused when height is 1). */
void rap_graph_memset_ref(void *dst, size_t pitch, unsigned value, unsigned elem_size,
                          size_t width, size_t height);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_GRAPH_H */
