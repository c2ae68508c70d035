/*
 * lines.h -- cutting a byte stream into whole lines, for the CPU parser's
 * reader (reader.c) and for a parser that takes lines as they are (the GPU
 * parser): no field is looked at, only '\n'.
 *
 * Two layers:
 *
 *   rap_line_fill   the rule for one buffer that bytes are appended to:
 *                   where the last, unfinished line starts, and what is
 *                   kept of a line longer than max_line. Such a line is
 *                   never buffered whole: its first max_line + 1 bytes are
 *                   kept and the rest dropped; the last kept byte is made 0
 *                   when the dropped tail holds a binary byte (or a '\r'
 *                   that more bytes follow), so a parser classifies the
 *                   prefix as binary or long exactly as it would the whole
 *                   line (parse.h: binary before long). At the end of the
 *                   input a last line without '\n' gets one.
 *   rap_lines       a cutter over a byte source (source.h): batches of up to
 *                   B whole lines in one contiguous block, with the line
 *                   start offsets, the file's name and the number of the
 *                   batch's first line. One thread; allocation-free after
 *                   rap_lines_create.
 *
 * A line in a batch is text[start[i], start[i+1] - 1): its '\n' is left out
 * and a '\r' before it is kept (the parser strips it, as rap_parse_line
 * does). Offsets are int32 from the start of the batch's text: the buffer
 * is at most 1 GiB, so they always fit.
 *
 * Usage:
 *
 *   rap_lines_config lc = {.max_lines = 65536, .max_line = 65536};
 *   rap_lines *c;
 *   rap_lines_create(&lc, &c);
 *   rap_source *src;
 *   rap_source_open("day_0.gz", &src);
 *   rap_lines_start(c, src);
 *   rap_line_batch b;
 *   while (rap_lines_next(c, &b) == RAP_OK && b.n > 0)
 *       ... line i of b is at b.text + b.start[i], reported as b.file:(b.first_line + i) ...
 *   rap_source_close(src);
 *   rap_lines_free(c);
 */
#ifndef RAP_LINES_H
#define RAP_LINES_H

#include "core/core.h"
#include "data/source.h"

/* ------------------------------------------------------------ the rule */

/* A line whose tail was dropped: its '\n' is at buffer byte `at`, and n
 * bytes of the input before it are not in the buffer (so a reader can tell
 * the input's offset of any line). */
typedef struct {
    size_t at;
    int64_t n;
} rap_line_drop;

typedef struct {
    size_t len;          /* bytes in the buffer */
    size_t line_start;   /* start of the line not yet ended by '\n' */
    bool skipping;       /* that line is too long: its further bytes are dropped */
    size_t prefix_end;   /* skipping: end of its kept first max_line + 1 bytes */
    bool bin;            /* skipping: a binary byte was dropped */
    bool last_cr;        /* skipping: the last dropped byte was '\r' */
    int64_t drop_cur;    /* skipping: bytes of the line dropped so far */
    rap_line_drop *drops; /* (cap_drops) the dropped lines' records, or NULL: none kept */
    int64_t n_drops, cap_drops;
    bool added_nl;       /* rap_line_fill_end gave the last line a '\n' the input lacks */
} rap_line_fill;

/* Takes in got new bytes at buf[f->len]: moves line_start past each '\n'
 * and drops the tail of a line longer than max_line (f->len then grows by
 * less than got); with drops set, records each such line while there is
 * room (a buffer of C bytes holds at most C / (max_line + 2) of them).
 * Cannot fail. */
void rap_line_fill_take(rap_line_fill *f, char *buf, size_t got, int64_t max_line);

/* The input ends: finishes a dropped line's prefix and gives a last line
 * without '\n' one, so that buf[0, f->len) is whole lines. Needs one byte
 * of room at buf[f->len]. Cannot fail. */
void rap_line_fill_end(rap_line_fill *f, char *buf);

/* buf[0, cut) was handed out and buf[cut, len) moved to buf[0]: shifts the
 * positions (cut <= line_start unless nothing follows). Cannot fail. */
void rap_line_fill_shift(rap_line_fill *f, size_t cut);

/* ---------------------------------------------------------- the cutter */

typedef struct {
    int64_t max_lines;   /* B: lines per batch at most (>= 1) */
    int64_t max_line;    /* longer lines are cut as rap_line_fill says (>= 1) */
    size_t buf_bytes;    /* text buffer; 0: 64 MiB; raised to 4 * (max_line + 2) */
    size_t read_bytes;   /* bytes asked of the source at a time; 0: 1 MiB (tests: small) */
} rap_lines_config;

typedef struct {
    const char *text;     /* (bytes) n whole lines, each ending in '\n'; valid
                           * until the next rap_lines_next */
    int64_t bytes;
    const int32_t *start; /* (n + 1) line i starts at text + start[i]; start[n] = bytes */
    int64_t n;            /* lines (<= B); 0 at the end of the input */
    const char *file;     /* name of the source (messages: file:line) */
    int64_t first_line;   /* 1-based line number of line 0 within file */
} rap_line_batch;

typedef struct rap_lines rap_lines;

/* Allocates the buffer (buf_bytes) and the offsets (B + 1). Errors:
 * RAP_ERR_ARG for max_lines or max_line < 1, or buf_bytes over 1 GiB;
 * RAP_ERR_NOMEM. */
rap_status rap_lines_create(const rap_lines_config *cfg, rap_lines **out);

/* Starts cutting src (not owned; line numbers from 1); drops what was left
 * of the previous source. Cannot fail. */
void rap_lines_start(rap_lines *c, rap_source *src);

/* The next batch: B lines, fewer only when the buffer holds no more whole
 * lines (lines longer than buf_bytes / (4 B)) or at the end of the input;
 * n == 0 at the end. The end is a regular file's end (a file that grows is
 * not waited for) or a closed pipe (a pipe is waited for). Errors: the
 * source's (RAP_ERR_IO "name: ..."); then the cutter must be started again. */
rap_status rap_lines_next(rap_lines *c, rap_line_batch *b);

/* Accepts NULL. */
void rap_lines_free(rap_lines *c);

#endif /* RAP_LINES_H */
