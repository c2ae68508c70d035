/*
 * json.h -- the one JSON reader and writer of librap.
 *
 * Reader: a strict pull reader over a text in memory, for files rap treats
 * as hostile (a checkpoint's header, anything read from disk). The caller
 * walks the document it expects, asking for an object, its keys, strings,
 * integers, or skipping values it does not use:
 *
 *     rap_json_reader r;
 *     RAP_TRY(rap_json_reader_init(&r, text, n, RAP_JSON_MAX_BYTES, path, "header"));
 *     RAP_TRY(rap_json_object_begin(&r));
 *     char key[64];
 *     size_t len;
 *     for (bool more;;) {
 *         RAP_TRY(rap_json_next_key(&r, &more, key, sizeof key, &len));
 *         if (!more)
 *             break;
 *         if (!strcmp(key, "rows"))
 *             RAP_TRY(rap_json_uint(&r, UINT64_MAX, &rows));
 *         else
 *             RAP_TRY(rap_json_skip(&r));
 *     }
 *     RAP_TRY(rap_json_end(&r));
 *
 * Guarantees: it never reads outside [text, text + n); it does not recurse
 * (nesting is counted, at most RAP_JSON_MAX_DEPTH containers open); a text
 * longer than the caller's limit is refused before it is looked at; every
 * integer is checked for overflow. The grammar is RFC 8259's, strictly: no
 * trailing commas, no comments, no leading zeros, no single quotes, four
 * hex digits in \u escapes, surrogates only in pairs. Strings are decoded
 * to UTF-8; \u0000 is refused (rap's strings are C strings); bytes >= 0x80
 * are passed through as they are (rap's writers copy such bytes from the
 * user's strings, paths for instance, without checking them).
 *
 * Every error is RAP_ERR_DATA with one message naming the file, what the
 * text is and the byte offset in it:
 *     "FILE: corrupt WHAT at byte N of the JSON: WHY"
 *
 * Writer: string literals and numbers, to a FILE or to any sink, so that
 * every JSON file rap writes escapes and formats the same way.
 */
#ifndef RAP_CORE_JSON_H
#define RAP_CORE_JSON_H

#include "rap.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Containers open at once, at most (objects and arrays together). */
#define RAP_JSON_MAX_DEPTH 64
/* A default limit on the text's length for rap_json_reader_init. */
#define RAP_JSON_MAX_BYTES ((size_t)1 << 30)

typedef struct {
    const char *start;  /* the text, (n) bytes */
    const char *p;      /* next byte to read */
    const char *end;    /* start + n */
    const char *file;   /* names the file in messages */
    const char *what;   /* what the text is, for messages ("checkpoint header") */
    int depth;          /* containers open */
    uint64_t is_obj;    /* bit d: container d is an object (else an array) */
    uint64_t fresh;     /* bit d: container d has had no member yet */
} rap_json_reader;

/* Starts reading text (n bytes, not NUL-terminated). Refuses (RAP_ERR_DATA)
 * a text longer than max_bytes. file and what are kept for the messages
 * and must outlive the reader. */
rap_status rap_json_reader_init(rap_json_reader *r, const char *text, size_t n, size_t max_bytes,
                                const char *file, const char *what);

/* Fails with RAP_ERR_DATA: "FILE: corrupt WHAT at byte N of the JSON: why"
 * (N the offset of the next byte to read). For the caller's own checks. */
rap_status rap_json_error(const rap_json_reader *r, const char *why);

/* Offset of the next byte to read. */
size_t rap_json_offset(const rap_json_reader *r);

/* True when the next byte after whitespace is c (nothing is consumed but
 * the whitespace). For choosing what to read next. */
bool rap_json_peek(rap_json_reader *r, char c);

/* Reads '{' (or '['): a container opens. Fails when the next value is not
 * one, or when RAP_JSON_MAX_DEPTH are open already. */
rap_status rap_json_object_begin(rap_json_reader *r);
rap_status rap_json_array_begin(rap_json_reader *r);

/* The next member of the innermost open object: reads ',' (not before the
 * first) and the key (into key, as rap_json_string) and ':'; the caller
 * then reads its value. At the closing '}' the object closes and *more is
 * false. */
rap_status rap_json_next_key(rap_json_reader *r, bool *more, char *key, size_t cap, size_t *len);

/* The next element of the innermost open array: reads ',' (not before the
 * first); the caller then reads the element. At the closing ']' the array
 * closes and *more is false. */
rap_status rap_json_next_item(rap_json_reader *r, bool *more);

/* A string value, decoded: its first cap - 1 bytes and a NUL into out
 * (out may be NULL with cap 0: the string is only checked and measured);
 * *len (may be NULL) is its whole decoded length, so that len >= cap says
 * it was cut. */
rap_status rap_json_string(rap_json_reader *r, char *out, size_t cap, size_t *len);

/* A string value into a new allocation (rap_free it), refused when longer
 * than max_len bytes. *out is NULL on failure. */
rap_status rap_json_string_dup(rap_json_reader *r, size_t max_len, char **out);

/* A non-negative integer value (no sign, fraction or exponent) of at most
 * max. */
rap_status rap_json_uint(rap_json_reader *r, uint64_t max, uint64_t *v);

/* An integer value in [lo, hi] (an optional '-', digits; no fraction or
 * exponent). */
rap_status rap_json_int(rap_json_reader *r, int64_t lo, int64_t hi, int64_t *v);

/* A number value (RFC 8259's grammar, at most 64 characters) as a double;
 * refused when it is beyond double's range (1e999). */
rap_status rap_json_number(rap_json_reader *r, double *v);

/* Skips one value of any kind (nested containers included), checking its
 * grammar. */
rap_status rap_json_skip(rap_json_reader *r);

/* Checks that only whitespace follows (every container closed). */
rap_status rap_json_end(rap_json_reader *r);

/* ------------------------------------------------------------ writer */

/* Where rap_json_escape puts its bytes: n bytes at s (not NUL-terminated). */
typedef void (*rap_json_sink)(void *ctx, const char *s, size_t n);

/* Puts s as a JSON string literal: the quotes, '"' and '\' escaped with a
 * backslash, bytes below 0x20 as \u00XX, every other byte as it is. A NULL
 * s is the empty string. Can't fail (the sink may record its own error). */
void rap_json_escape(const char *s, rap_json_sink put, void *ctx);

/* rap_json_escape to a FILE (errors stay in ferror(f)). */
void rap_json_put_str(FILE *f, const char *s);

/* Bytes of the buffer rap_json_num writes into. */
#define RAP_JSON_NUM_LEN 32

/* A JSON number for x: 9 significant digits ("%.9g", enough to give a
 * float back exactly), or null when x is NaN or infinite (JSON has
 * neither). Returns buf (RAP_JSON_NUM_LEN bytes) or the literal "null". */
const char *rap_json_num(double x, char *buf);

/* rap_json_num to a FILE. */
void rap_json_put_num(FILE *f, double x);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_JSON_H */
