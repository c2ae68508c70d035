/*
 * parse_schema.h -- the CPU parser of any input schema (docs/SCHEMA.md):
 * lines of delimited fields (tab, or CSV with RFC 4180 quoting), each
 * field converted by its column's kind and encoding, multi-hot lists
 * included, into a rap_parsed whose sparse columns are lists (soff, sids).
 * The reader takes it for every schema that is not Criteo's (Criteo's own
 * parser, parse.h, is the fast path for that one).
 *
 * One line: a trailing '\r' is stripped; then, in this precedence, binary
 * (a byte pg_binary says is binary), long (over max_line), an unclosed
 * quote, the wrong number of fields (delimiters outside quotes), then the
 * fields: the smallest fault key over all of them (class, then field:
 * parse_algo.h), each field converted by pg_field, the code the GPU parser
 * runs. So this parser and the GPU parser's reference (parse_ref.h) give
 * every line the same reject, field and values: tests/test_parse_gpu.c
 * checks it on random text.
 *
 * Messages name the field by its column: "expected 1 to 16 hex digits in
 * an id of list history, got item 3 \"zz\"". For Criteo's schema they are
 * parse.c's words.
 */
#ifndef RAP_PARSE_SCHEMA_H
#define RAP_PARSE_SCHEMA_H

#include "data/parse.h"
#include "data/parse_ref.h"

typedef struct rap_schema_parser rap_schema_parser;

/* A parser for schema s (copied; rap_input_schema_check'd here).
 * Errors: RAP_ERR_ARG (the check's), RAP_ERR_NOMEM. */
rap_status rap_schema_parser_create(const rap_input_schema *s, rap_schema_parser **out);
/* Accepts NULL. */
void rap_schema_parser_free(rap_schema_parser *p);
/* The schema the parser holds. */
const rap_input_schema *rap_schema_parser_schema(const rap_schema_parser *p);

/* The format fields of s for pg_field (parse_algo.h). Cannot fail. */
void rap_parse_format_of(const rap_input_schema *s, rap_parse_format *fm);

/* Parses text[0..n), whole lines each ending in '\n', as rap_parse_chunk
 * does (out keeps its arrays between calls and grows them), the sparse
 * columns into out->soff / out->sids. Fails only with RAP_ERR_NOMEM. */
rap_status rap_parse_chunk_schema(const rap_schema_parser *p, const char *text, size_t n,
                                  int64_t max_line, rap_parsed *out);

/* One line s[0..len) without its '\n': -1 for a good row, else the
 * rap_reject_reason with "expected ..., got ..." in msg; *field (may be
 * NULL) gets the fault's field as the GPU parser reports it
 * (rap_parse_rej.field). Never reads outside s[0..len). */
int rap_parse_line_schema(const rap_schema_parser *p, const char *s, size_t len,
                          int64_t max_line, int *field, char *msg, size_t msg_len);

/* The list-shaped rap_parsed of nd dense, ns sparse columns, for other
 * producers of it (parquet_rows.c). reserve: row arrays for at least
 * rows, keeping the n_used rows there (the first call makes the id
 * lists); reserve_ids: room for k more ids in sparse column j, used held
 * (rejects: rap_parsed_reject, parse.h). Errors: RAP_ERR_NOMEM. */
rap_status rap_parsed_reserve(rap_parsed *o, int nd, int ns, int64_t rows);
rap_status rap_parsed_reserve_ids(rap_parsed *o, int j, int64_t used, int64_t k);

#endif /* RAP_PARSE_SCHEMA_H */
