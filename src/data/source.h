/*
 * source.h -- a byte source: one file (plain or gzip) or stdin, giving its
 * uncompressed bytes. Gzip is detected by the magic bytes 1f 8b, not by the
 * name, so a gzip stream on stdin works too; concatenated gzip members are
 * read one after the other. A source can be read again after it reported
 * "no data now": a regular file that grows gives the appended bytes (and a
 * gzip stream being written is inflated as far as its bytes go).
 * Gzip is inflated by ISA-L when rap is built with it, else by zlib; zlib
 * also reads again any member of a regular file that ISA-L rejects
 * (source.c says how). Corrupt data fails with "<name>: corrupt gzip data
 * (member K)" whichever inflater found it.
 */
#ifndef RAP_SOURCE_H
#define RAP_SOURCE_H

#include "core/core.h"
#include "data/inflate.h"

typedef struct rap_source rap_source;

/* Opens path ("-" = stdin, not closed by rap_source_close). On failure:
 * RAP_ERR_IO "path: <OS reason>", *out NULL. */
rap_status rap_source_open(const char *path, rap_source **out);
/* The same with the inflater chosen (tests, benchmarks): RAP_INFLATE_AUTO
 * is rap_source_open's (ISA-L, zlib when it rejects a member); ZLIB and
 * ISAL use that one alone. ISAL without ISA-L built in: RAP_ERR_ARG. */
rap_status rap_source_open_ex(const char *path, rap_inflate_kind kind, rap_source **out);
/* Reads up to n uncompressed bytes into buf; *got == 0 means no bytes now:
 * end of a regular file (for now), a pipe closed (rap_source_at_end) or, for
 * a pipe, nothing within about 100 ms (so callers can poll a stop flag).
 * Errors: RAP_ERR_IO "path: ..." for a read failure or corrupt gzip data. */
rap_status rap_source_read(rap_source *s, char *buf, size_t n, size_t *got);
/* True for a regular file (it may still grow) and false for a pipe or tty. */
bool rap_source_is_regular(const rap_source *s);
/* True when a pipe reported end of file: no byte will ever come again. */
bool rap_source_at_end(const rap_source *s);
bool rap_source_is_gzip(const rap_source *s);
/* The inflater reading a gzip source now ("isa-l", "zlib"); NULL for plain
 * text or before the format is known. */
const char *rap_source_inflater(const rap_source *s);
/* Called once at the real end of the input: returns in buf (room for >= 2
 * bytes) the 0 or 1 bytes held back while the format was undecided, and
 * fails with RAP_ERR_IO "path: truncated gzip data" when a gzip member is
 * incomplete. */
rap_status rap_source_finish(rap_source *s, char *buf, size_t *got);
/* The name used in messages: the path, or "<stdin>". */
const char *rap_source_name(const rap_source *s);
/* Releases everything; accepts NULL. */
void rap_source_close(rap_source *s);

#endif /* RAP_SOURCE_H */
