/*
 * parse.h -- the Criteo TSV line parser (docs/DATA.md): label, 13 integer and
 * 26 hex categorical fields, tab separated, empty field = null.
 *
 * A chunk of text (whole lines, each ending in '\n') is parsed into a
 * rap_parsed: columnar arrays of its good rows plus a list of its rejected
 * lines. Good rows take a fast path (hand-written digit and hex loops); any
 * line the fast path does not accept is classified by a careful slow path
 * that gives the exact reject reason and message, in this precedence:
 * binary, long, fields, label, int, range (int), cat, range (cat).
 * The length compared with max_line leaves out the '\n' and a trailing
 * '\r'; any other byte below 0x20 but tab, 0x7f and bytes >= 0x80 are binary.
 *
 * Letters: R rows the arrays of a rap_parsed hold (its capacity).
 */
#ifndef RAP_PARSE_H
#define RAP_PARSE_H

#include "core/core.h"

#define RAP_CRITEO_FIELDS (1 + RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE) /* 40 */

typedef struct {
    int64_t line;   /* index of the line within the chunk (0-based) */
    int64_t pos;    /* good rows of the chunk before this line */
    int reason;     /* rap_reject_reason */
    int msg;        /* index in rap_parsed.msg of its "expected ..., got ..." or -1 */
} rap_parse_reject;

/* Messages a chunk keeps: of the first RAP_REJ_EXAMPLES rejects of each
 * reason (the reader's examples show them; every example has its message
 * however the input is cut into chunks). */
#define RAP_PARSE_MSGS (RAP_REJ_COUNT * RAP_REJ_EXAMPLES)

typedef struct {
    int64_t cap;           /* R */
    int64_t n_lines;       /* lines in the chunk */
    int64_t n_used;        /* good rows held */
    float *label;          /* (R) */
    float *dense;          /* (ND, R) column j at dense + j*R; null 0 */
    uint8_t *dense_valid;  /* (ND, R) */
    int64_t *sparse;       /* (NS, R) the id of the row; null 0 */
    uint8_t *sparse_valid; /* (NS, R) */
    rap_parse_reject *rej; /* (n_rej) in line order */
    int64_t n_rej, cap_rej;
    char first_msg[512];   /* "expected ..., got ..." of rej[0] */
    char msg[RAP_PARSE_MSGS][160]; /* messages of the first rejects of each reason */
    int n_msg;
    int reason_msgs[RAP_REJ_COUNT]; /* messages kept of each reason in this chunk */
    void *block;           /* the allocation behind the row arrays */
    /* The schema parser's (parse_schema.h): its ND and NS, and the sparse
     * columns as lists; sparse is NULL then. NULL / 0 for Criteo's. */
    int nd, ns;
    int64_t *soff;         /* (NS, R + 1) column j's good row i holds ids
                            * sids[j][soff[j*(R+1)+i] .. soff[j*(R+1)+i+1]) */
    int64_t **sids;        /* (NS) each column's ids, good rows in order */
    int64_t *sids_cap;     /* (NS) */
} rap_parsed;

/* Parses text[0..n), whole lines each ending in '\n' (a trailing '\r' before
 * it is stripped). Lines longer than max_line bytes are RAP_REJ_LONG. out
 * keeps its arrays between calls and grows them when a chunk needs more
 * rows (so memory follows the largest chunk, not the input). Fails only
 * with RAP_ERR_NOMEM. */
rap_status rap_parse_chunk(const char *text, size_t n, int64_t max_line, rap_parsed *out);
void rap_parsed_free(rap_parsed *p);
/* Appends a reject of line for reason (before the next good row: pos =
 * n_used), with no message (msg -1), growing the reject list; for every
 * producer of a rap_parsed. RAP_ERR_NOMEM. */
rap_status rap_parsed_reject(rap_parsed *o, int64_t line, int reason);
/* Bytes of one row of a rap_parsed's arrays (what its growth allocates
 * per row of capacity). Can't fail. */
size_t rap_parsed_row_bytes(void);

/* One line s[0..len) without its '\n': returns -1 for a good row (values
 * written to the arrays, which may be NULL) or the rap_reject_reason, with
 * "expected ..., got ..." in msg. Never reads outside s[0..len). */
int rap_parse_line(const char *s, size_t len, int64_t max_line, float *label,
                   float dense[RAP_CRITEO_DENSE], uint8_t dense_valid[RAP_CRITEO_DENSE],
                   int64_t sparse[RAP_CRITEO_SPARSE], uint8_t sparse_valid[RAP_CRITEO_SPARSE],
                   char *msg, size_t msg_len);

#endif /* RAP_PARSE_H */
