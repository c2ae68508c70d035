/*
 * hybrid_internal.h -- the exchange kernels of the hybrid step: CPU
 * references (hybrid.c) and GPU launchers (hybrid_gpu.cu), for hybrid.c
 * and the tests that compare them.
 *
 * Letters: nr rows of this rank's share, T global tables, D dim, P parts
 * (local tables of all ranks, in the shard map's order), TLs = sum over
 * ranks of their local tables.
 *
 * The exchange layouts: block s of `recv` (forward) and of `send`
 * (reverse) holds rank s's local tables for this rank's rows,
 * (nr, TL_s, D), at nr * D * cum[s] where cum[s] = sum of TL_q, q < s. Part
 * p (rank s, local k) of row i is at nr*D*pcum[p] + (i*ptl[p] + plocal[p])*D.
 */
#ifndef RAP_DIST_HYBRID_INTERNAL_H
#define RAP_DIST_HYBRID_INTERNAL_H

#include "dist/hybrid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-part layout arrays (P each). */
typedef struct {
    const int *part0;       /* (T+1) parts of table t */
    const int *table;       /* (P) global table */
    const int64_t *cum;     /* (P) sum of TL of ranks before the part's rank */
    const int64_t *tl;      /* (P) TL of the part's rank */
    const int64_t *local;   /* (P) local index on its rank */
} rap_hybrid_parts;

/* emb[i*ld + t*D + d] = sum over parts p of table t (map order) of
 * recv(p, i, d), for i < nr, t < T. */
void rap_hybrid_scatter_cpu(const float *recv, int64_t nr, int T, int D,
                            const rap_hybrid_parts *pa, float *emb, int64_t ld);
/* send(p, i, d) = demb[i*ld + table[p]*D + d] for every part p, i < nr. */
void rap_hybrid_gather_cpu(const float *demb, int64_t ld, int64_t nr, int P, int D,
                           const rap_hybrid_parts *pa, float *send);

/* GPU launchers (device pointers; pa's arrays on the device), on stream.
 * RAP_ERR_NO_GPU without CUDA. */
rap_status rap_hybrid_scatter_gpu(const float *recv, int64_t nr, int T, int D,
                                  const rap_hybrid_parts *pa, float *emb, int64_t ld,
                                  void *stream);
rap_status rap_hybrid_gather_gpu(const float *demb, int64_t ld, int64_t nr, int P, int D,
                                 const rap_hybrid_parts *pa, float *send, void *stream);
/* GPU filter (same result as rap_hybrid_filter_cpu); out_ids holds cap
 * ids: the kept ids past cap are dropped and out_off clamped to cap (the
 * caller sizes cap from max_bag). scratch: scratch_bytes from
 * rap_hybrid_filter_gpu_scratch(n_max). */
size_t rap_hybrid_filter_gpu_scratch(int64_t n_max);
rap_status rap_hybrid_filter_gpu(const int64_t *off, const int64_t *ids, int64_t n, int64_t row0,
                                 int64_t rows, int64_t *out_off, int64_t *out_ids, int64_t cap,
                                 void *scratch, size_t scratch_bytes, void *stream);

/* Device memory helpers for hybrid.c (compiled as C): RAP_ERR_NO_GPU
 * without CUDA. */
rap_status rap_hybrid_dev_zero(void *p, size_t bytes, void *stream);
rap_status rap_hybrid_event_create(void **ev);
void rap_hybrid_event_free(void *ev);
rap_status rap_hybrid_event_record(void *ev, void *stream);
/* A non-blocking stream on the current device (*device: its index), its
 * release (NULL accepted), and a stream waiting for an event. */
rap_status rap_hybrid_stream_create(void **stream, int *device);
void rap_hybrid_stream_free(void *stream);
rap_status rap_hybrid_stream_wait(void *stream, void *ev);
/* A timing event (elapsed readable), and the ms from a to b (both done). */
rap_status rap_hybrid_timer_create(void **ev);
rap_status rap_hybrid_elapsed(void *a, void *b, double *ms);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DIST_HYBRID_INTERNAL_H */
