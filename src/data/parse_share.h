/*
 * parse_share.h -- ranks sharing the parse of every chunk (docs/INPUT.md
 * "Ranks share the parse").
 *
 * Every rank's reader cuts the same chunks of the same input. Rank r of R
 * parses only its piece of each chunk: the lines of tiles [r * NT / R,
 * (r + 1) * NT / R), NT tiles of RAP_PARSE_TILE lines, with its own parse
 * backend (gpu or reference), into its send block. One exchange over the
 * ranks' exchange (the parser thread's own, rap_parse_xchg) gives
 * every rank every piece's good rows and rejects; appended in rank order
 * they are the chunk's staging rows and accounting that parsing the whole
 * chunk gives, byte for byte (a line's parse does not depend on the lines
 * around it), so the reader and everything after it stay as they are.
 *
 * Per chunk, two collectives (alltoallv with the same block to every
 * rank, rap_parse_xchg): a header of 8 int64 a rank (what it did, its status, the chunk's
 * bytes and lines, its piece's lines, good rows and rejects), then the
 * blocks: a piece's rows in the layout of a batch of cap_p rows
 * (rap_batch_view; cap_p = rap_parse_rows_bound of the piece, which every
 * rank computes from the text) followed by its rejects (rap_parse_rej, 12
 * bytes each). In the exchange's memory: device memory for NCCL (the
 * gpu backend), host memory for threads (the reference).
 *
 * A rank that stops (its reader closed) sends a header saying so once
 * (rap_parse_share_leave); a round in which any rank left, failed, or cut
 * another chunk (bytes or lines differ) ends the sharing on every rank
 * alike: that chunk and every later one fail with a message naming the
 * rank, and no rank waits for a collective that will not come.
 *
 * Letters: C chunk bytes, R ranks.
 */
#ifndef RAP_PARSE_SHARE_H
#define RAP_PARSE_SHARE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "data/parse_backend.h"

/* The ranks' exchange a share runs over, made by the caller from a comm
 * (run/pipeline_dist.c: a dup of the rank's NCCL or threads comm): an
 * all-to-all-v of 8-byte elements as comm.h's, complete on return, its
 * buffers device memory when `device` (then its collectives and the
 * share's appends run on `stream`). One a parser thread, paired with the
 * same thread of every other rank. */
typedef struct rap_parse_xchg {
    int rank, size;
    bool device;
    void *stream;
    void *ctx;
    rap_status (*alltoallv)(void *ctx, const void *send, const int64_t *scount,
                            const int64_t *sdispl, void *recv, const int64_t *rcount,
                            const int64_t *rdispl, const char *name);
} rap_parse_xchg;

typedef struct rap_parse_share rap_parse_share;

/* The share of one parser thread over x (not owned; size >= 2, on the
 * device when ops has device rows), for chunks of at most chunk_bytes
 * bytes; max_line as the reader's. Errors: RAP_ERR_ARG (an exchange in the
 * wrong memory), RAP_ERR_NOMEM, RAP_ERR_CUDA. */
rap_status rap_parse_share_create(const rap_parse_xchg *x, const rap_parse_ops *ops,
                                  size_t chunk_bytes, int64_t max_line, rap_parse_share **out);
/* Accepts NULL. Does not leave (rap_parse_share_leave first). */
void rap_parse_share_free(rap_parse_share *s);

/* What a share allocates (the counted allocations, rap_mem_counted):
 * *comm_mem in the exchange's memory (device memory when device), *host on
 * the host, for chunks of C bytes and R ranks. Cannot fail. */
void rap_parse_share_bytes(size_t chunk_bytes, int ranks, bool device, size_t *comm_mem,
                           size_t *host);

/* ops->chunk of text[0, n) (whole lines) with this rank's piece only, ps
 * the parser thread's backend state; then the exchange: out and stage as
 * ops->chunk of the whole text gives them. Errors: the backend's; those
 * of the collectives; RAP_ERR_DATA when the ranks cut different chunks;
 * RAP_ERR_IO when another rank left or failed (the sharing has ended). */
rap_status rap_parse_share_chunk(rap_parse_share *s, void *ps, const char *text, size_t n,
                                 rap_parsed *out, rap_batch *stage);

/* Tells the other ranks that this one parses no more chunks (once; no-op
 * when the sharing has ended). Cannot fail: an error ends the sharing. */
void rap_parse_share_leave(rap_parse_share *s);

/* Lines this rank parsed itself, and lines of the chunks shared (either
 * pointer may be NULL; s NULL: 0). */
void rap_parse_share_counts(const rap_parse_share *s, int64_t *own_lines, int64_t *lines);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_SHARE_H */
