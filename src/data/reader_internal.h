/* reader_internal.h -- knobs of the reader for tests and benches. */
#ifndef RAP_READER_INTERNAL_H
#define RAP_READER_INTERNAL_H

#include "core/core.h"

/* rap_reader_open with the chunk size chosen by the caller (bytes handed to
 * one parser at a time; 0 = the default, 1 MiB). It is raised to at least
 * 2 * (max_line + 2) so that a line of max_line bytes always fits. Small
 * chunks let tests put many chunk boundaries in a small input. */
rap_status rap_reader_open_ex(const rap_reader_config *cfg, size_t chunk_bytes, rap_reader **out);

#endif /* RAP_READER_INTERNAL_H */
