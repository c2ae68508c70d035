/*
 * parse_ref.h -- the GPU parser's contract (parse_gpu.h runs it) and its CPU
 * reference: the same algorithm in plain C, so that CI, which has no GPU,
 * proves the algorithm against the CPU parser (parse.h) and the GPU test
 * proves the kernels against this reference, bit for bit.
 *
 * Input: a line batch (lines.h): a text block, n lines, int32 offsets
 * start[0..n] (line i is text[start[i], start[i+1] - 1), its '\n' left
 * out, a '\r' before it kept). Output: the good rows packed densely in a
 * rap_batch (include/rap.h: label, dense + valid, sparse_off / sparse_ids
 * with one id per row, null rows empty lists), every rejected line in a
 * reject list in line order (line, good rows before it, reason, field), and
 * a small result (rows used, rejects per reason, the first rejects of each
 * reason). Every line gets exactly what rap_parse_line (parse.c) gives it:
 * the same reject reason in the same precedence (binary, long, fields,
 * label, int, range (int), cat, range (cat)) and the same values. The
 * messages ("expected ..., got ...") are not made here: the host makes them
 * for the few rejects it reports by parsing those lines again with
 * rap_parse_line (rap_parse_ref_message), which is exact by construction.
 *
 * What a field is comes from a column-descriptor table (rap_parse_layout):
 * one entry per field, its kind (label, dense, sparse, skip), its encoding
 * and its column. rap_parse_layout_criteo fills it for Criteo's 40 fields;
 * a schema adds encodings (parse_algo.h: pg_field) and entries, nothing
 * else.
 *
 * The algorithm (docs/INPUT.md "Parsing on the GPU"), per line:
 *   1. boundaries: the line's bytes in aligned 16-byte words, 32 words (a
 *      warp's stride, 512 bytes) at a time: per word a tab mask and a
 *      binary mask; the tab counts prefix-summed over the words give each
 *      tab's rank, the first NF - 1 tab positions are kept; the first
 *      binary byte ends the scan;
 *   2. line faults: binary, long (length without '\r' over max_line),
 *      fields (tabs != NF - 1);
 *   3. conversion: each field by its descriptor, a fault key (class,
 *      field) for a bad one; the line's reject is the smallest key;
 * then per tile of RAP_PARSE_TILE lines: counters (accepted, each sparse
 * column's ids, each reason's rejects) ranked within the tile, an
 * exclusive prefix of the counters over the tiles before, and a scatter of
 * the tile's good rows and rejects to their places.
 *
 * Letters: B rows of the batch (its capacity, >= n), NF fields, NC
 * counters (1 + NS + RAP_REJ_COUNT).
 */
#ifndef RAP_PARSE_REF_H
#define RAP_PARSE_REF_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_PARSE_MAX_FIELDS 64 /* NF at most: two rounds of a warp's lanes */
#define RAP_PARSE_TILE 64       /* lines per tile (a thread block on the GPU) */
#define RAP_PARSE_FIRST RAP_REJ_EXAMPLES /* first rejects of each reason kept */
/* counters per tile: accepted, ids of each sparse column, each reason */
#define RAP_PARSE_MAX_COUNTERS 64
#define RAP_PARSE_MAX_SPARSE (RAP_PARSE_MAX_COUNTERS - 1 - RAP_REJ_COUNT) /* 54 */

/* The kinds and encodings of a field are rap.h's (rap_col_kind,
 * rap_col_enc: the input schema's). */
typedef struct {
    uint8_t kind; /* rap_col_kind */
    uint8_t enc;  /* rap_col_enc */
    int16_t col;  /* index among the columns of its kind (dense or sparse); 0 else */
    uint8_t sep;  /* sparse: 0 one id or none; else a list separated by this byte */
    uint8_t pad;
    int16_t list; /* a list: its index among the layout's lists; -1 else */
} rap_parse_field;

/* The text format every field's conversion needs (docs/SCHEMA.md). */
typedef struct {
    int32_t max_list;   /* ids a list may hold */
    uint8_t delim;      /* the field delimiter */
    uint8_t quote;      /* 1: RFC 4180 quoting ('"'), for any delimiter but tab */
    uint8_t text8;      /* 1: bytes 0x80..0xff are text (a schema with a str column) */
    uint8_t null_len;   /* bytes of null_tok */
    uint8_t null_tok[RAP_NULL_TOKEN_MAX + 1]; /* a list field exactly this is a null */
} rap_parse_format;

typedef struct {
    int n_fields;             /* NF */
    int n_dense, n_sparse;    /* ND, NS: columns of the batch */
    int n_lists;              /* sparse columns that are lists (NL) */
    rap_parse_format fmt;
    rap_parse_field f[RAP_PARSE_MAX_FIELDS];
} rap_parse_layout;

/* Criteo: label, int_0..int_12 (INT32), cat_0..cat_25 (HEX32), tab
 * separated. Cannot fail. */
void rap_parse_layout_criteo(rap_parse_layout *out);
/* The layout of an input schema (its format included). RAP_ERR_ARG when
 * it has more fields or sparse columns than the GPU parser takes (NF <=
 * 64, NS <= RAP_PARSE_MAX_SPARSE), naming the schema. */
rap_status rap_parse_layout_schema(const rap_input_schema *s, rap_parse_layout *out);
/* RAP_OK when l is one the parser takes: 1 <= NF <= 64, one label field,
 * each dense and sparse column exactly once, NS <= RAP_PARSE_MAX_SPARSE,
 * encodings that fit their kinds, lists numbered 0..NL-1 in field order
 * (sparse only, a separator that is not '"' nor, unquoted, the
 * delimiter), max_list in [1, RAP_MAX_LIST_LIMIT]. Else RAP_ERR_ARG
 * naming what is wrong. */
rap_status rap_parse_layout_check(const rap_parse_layout *l);

/* A rejected line. 12 bytes, the same on host and device. */
typedef struct {
    int32_t line;   /* index of the line in the batch (0-based) */
    int32_t pos;    /* good rows of the batch before it */
    int16_t reason; /* rap_reject_reason */
    int16_t field;  /* 0-based field where the fault was found: the field of the
                     * first binary byte (NF when past the last field); for
                     * fields, the first field missing (count < NF) or the
                     * first one too many (NF); -1 for long */
} rap_parse_rej;

/* A batch's accounting. 640 bytes without padding, the same on host and
 * device. first[r][k] for k >= rejected[r] is {-1, -1, -1, -1}. */
typedef struct {
    int64_t n_lines;
    int64_t rows_used;
    int64_t rows_rejected;              /* n_lines - rows_used */
    int64_t rejected[RAP_REJ_COUNT];
    rap_parse_rej first[RAP_REJ_COUNT][RAP_PARSE_FIRST]; /* in line order */
    int32_t first_line;                 /* the batch's first rejected line, -1 none */
} rap_parse_result;

/* The good rows lines [0, n) of n_bytes bytes can hold at most, when their
 * offsets are in order: min(n, n_bytes / NF) (a good line has NF - 1 tabs
 * and its '\n'). A destination batch needs this capacity, not n: a chunk
 * of many short lines needs no room for rows it cannot have. With offsets
 * out of order nothing is written past it either (such rows are lost; the
 * counts stay). Cannot fail. */
int64_t rap_parse_rows_bound(const rap_parse_layout *l, int64_t n, int64_t n_bytes);

/* The whole algorithm on the host: lines [0, n) of text (n_bytes bytes;
 * start (n + 1), non-decreasing, start[n] <= n_bytes: offsets out of order
 * or past the text are clamped, so nothing outside text[0, n_bytes) is
 * read). Writes the good rows to rows [0, used) of dst (host memory, the
 * layout's ND and NS, cap >= rap_parse_rows_bound, any ids_per_row), the rejects to rej[0,
 * rejected) (room for n) and res. max_line as rap_parse_line's. Nothing
 * else of dst is written. Errors: RAP_ERR_ARG for a bad layout, shape or
 * size. */
rap_status rap_parse_ref(const rap_parse_layout *l, const char *text, int64_t n_bytes,
                         const int32_t *start, int64_t n, int64_t max_line, rap_batch *dst,
                         rap_parse_rej *rej, rap_parse_result *res);

/* The CPU parser's reason and message for line `line` of a batch (host
 * text and offsets): rap_parse_line on that line, as the reader would call
 * it. Returns the reason (-1: a good row). For the few rejects a caller
 * reports (bad_rows fail, examples), after the GPU has found them. */
int rap_parse_ref_message(const char *text, const int32_t *start, int64_t line, int64_t max_line,
                          char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PARSE_REF_H */
