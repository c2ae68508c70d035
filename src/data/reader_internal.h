/* reader_internal.h -- knobs of the reader for tests and benches. */
#ifndef RAP_READER_INTERNAL_H
#define RAP_READER_INTERNAL_H

#include "core/core.h"

/* rap_reader_open with the chunk size chosen by the caller (bytes handed to
 * one parser at a time; 0 = the default, 1 MiB). It is raised to at least
 * 2 * (max_line + 2) so that a line of max_line bytes always fits. Small
 * chunks let tests put many chunk boundaries in a small input. */
rap_status rap_reader_open_ex(const rap_reader_config *cfg, size_t chunk_bytes, rap_reader **out);

/* Whether a reader of cfg reads text in Criteo's layout, the one the
 * GPU parse backend and its reference take: no schema or Criteo's, and
 * the input not a Parquet file (a directory's Parquet files are refused
 * when met). Cannot fail. */
bool rap_reader_criteo_text(const rap_reader_config *cfg);
/* RAP_OK unless cfg->parse is a backend of that layout (gpu, reference)
 * and the input is not such text: RAP_ERR_ARG naming the schema or the
 * Parquet file. */
rap_status rap_reader_check_parse(const rap_reader_config *cfg);
/* What a reader with the GPU parser allocates on the device (its parser
 * threads' buffers, its slots' staging batches, its stream), made once by
 * a caller that opens one reader after the other (the row feed: one a
 * pass), so that the next reader allocates nothing there: sized as a
 * reader of cfg over its input as it is now. *out NULL (nothing to keep)
 * for a parser whose rows are host memory. Errors as rap_reader_open's
 * for the input, RAP_ERR_NOMEM, RAP_ERR_CUDA. */
typedef struct rap_parse_res rap_parse_res;
typedef struct rap_parse_gate rap_parse_gate;
rap_status rap_parse_res_create(const rap_reader_config *cfg, size_t chunk_bytes,
                                rap_parse_res **out);
/* The same for readers that post their chunks to gate (may be NULL:
 * rap_parse_res_create), the one rap_reader_open_gate will be given. */
rap_status rap_parse_res_create_gate(const rap_reader_config *cfg, size_t chunk_bytes,
                                     rap_parse_gate *gate, rap_parse_res **out);
/* Waits for the appends queued from it and frees it. Accepts NULL. */
void rap_parse_res_free(rap_parse_res *x);
/* rap_reader_open_ex with res lent (may be NULL): used when it was made for
 * this reader's sizes (else the reader makes its own); not freed by close.
 * One reader at a time may borrow it. */
rap_status rap_reader_open_res(const rap_reader_config *cfg, size_t chunk_bytes,
                               rap_parse_res *res, rap_reader **out);
/* rap_reader_open_res whose parse backend (gpu, reference; others ignore
 * it) posts each chunk's parse to gate (data/parse_gate.h, not owned; NULL:
 * none) instead of launching it: someone must release the gate, or bypass
 * it, for the reader to go on. rap_reader_close bypasses it while it joins
 * the parser threads (none waits forever); the gate stays open after. */
rap_status rap_reader_open_gate(const rap_reader_config *cfg, size_t chunk_bytes,
                                rap_parse_res *res, rap_parse_gate *gate, rap_reader **out);

/* The parser threads of a reader of cfg that would share its parse with
 * cfg->parse_share_ranks ranks (each needs an exchange of its own in
 * cfg->parse_xchg), or 0 when it would parse every line itself (it shares
 * with the gpu parser or its reference, without follow, one lane or several
 * in file order; RAP_PARSE_SHARE=0 turns it off). Looks at the input as rap_reader_plan_threads does. */
int rap_reader_share_parsers(const rap_reader_config *cfg);

/* Whether the reader's batches are device memory (parse gpu). */
bool rap_reader_rows_on_device(const rap_reader *r);
/* rap_batch_append for the reader's batches: on the host, or for device
 * batches queued on the reader's own stream, after the appends of
 * rap_reader_next (the caller's thread: the one that calls next). */
rap_status rap_reader_append(rap_reader *r, rap_batch *dst, const rap_batch *src, int64_t a,
                             int64_t n);
/* The stream of the reader's appends (gpu), for more work ordered with
 * them; NULL for host rows. */
void *rap_reader_rows_stream(rap_reader *r);
/* Waits until every append queued (by rap_reader_next and
 * rap_reader_append) has run: then the batches hold their rows for any
 * stream. Host rows: nothing to wait for. */
rap_status rap_reader_sync(rap_reader *r);

#endif /* RAP_READER_INTERNAL_H */
