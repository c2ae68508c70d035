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
/* ------------------------------------------------ following a rotated file
 * (docs/INPUT.md "Log rotation") */

/* What rap_source_rotation saw of a followed plain file. */
typedef enum {
    RAP_ROT_NONE = 0,  /* the same file, not shorter than what was read */
    RAP_ROT_TRUNCATED, /* shorter than the bytes read from it (copytruncate) */
    RAP_ROT_MOVED,     /* its path now names another file or none (renamed or
                        * replaced: create style), or it was deleted */
} rap_rotation;

/* The identity of the open file (fstat: device and inode). Errors:
 * RAP_ERR_IO "name: ...". */
rap_status rap_source_identity(const rap_source *s, uint64_t *dev, uint64_t *ino);
/* Compares the open file with what path names now and with the bytes read
 * from it: shorter than them, or other bytes before the read offset than
 * those read (truncated and written again past it), is TRUNCATED. Only for
 * a regular plain file; stdin and gzip give NONE.
 * Errors: RAP_ERR_IO for a failing fstat of the open file. */
rap_status rap_source_rotation(const rap_source *s, const char *path, rap_rotation *out);
/* Reads a truncated plain file again from its first byte. RAP_ERR_IO for
 * a gzip file (a compressed stream cannot be followed through a
 * truncation) or a failing seek. */
rap_status rap_source_rewind(rap_source *s);
/* Skips the first n uncompressed bytes (a resume position): a seek for a
 * plain file, inflated and dropped for gzip; scratch (cap bytes) is used
 * for that. RAP_ERR_DATA "name: ... ends before byte n" when the file is
 * shorter. */
rap_status rap_source_skip(rap_source *s, int64_t n, char *scratch, size_t cap);

/* The name used in messages: the path, or "<stdin>". */
const char *rap_source_name(const rap_source *s);
/* Releases everything; accepts NULL. */
void rap_source_close(rap_source *s);

#endif /* RAP_SOURCE_H */
