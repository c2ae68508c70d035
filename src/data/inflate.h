/*
 * inflate.h -- gzip inflation behind one small function table, so that the
 * byte source (source.c) and the benchmark do not care which library does
 * the work.
 *
 * Two backends: ISA-L's igzip (when rap is built with it: RAP_HAVE_ISAL;
 * about 3-4x zlib's speed on one core, bench/RESULTS.md) and zlib (always
 * there: the fallback when ISA-L is not built in, and for anything ISA-L
 * cannot read; see source.c). One inflater decodes one gzip member at a
 * time: RAP_INFL_END reports the end of a member (its CRC and length
 * checked), after which reset() makes it ready for the next member.
 *
 * Usage:
 *
 *   rap_inflater z;
 *   rap_inflater_init(&z, RAP_INFLATE_AUTO, "day_0.gz");
 *   z.next_in = in; z.avail_in = n_in;
 *   z.next_out = out; z.avail_out = n_out;
 *   rap_infl_result r = z.ops->inflate(&z);   (next_* / avail_* advance)
 *   ...
 *   rap_inflater_end(&z);
 */
#ifndef RAP_INFLATE_H
#define RAP_INFLATE_H

#include "core/core.h"

typedef enum {
    RAP_INFLATE_AUTO = 0, /* ISA-L when built in, else zlib */
    RAP_INFLATE_ZLIB,
    RAP_INFLATE_ISAL,
} rap_inflate_kind;

typedef enum {
    RAP_INFL_MORE = 0, /* went as far as input and room allow: give more of either */
    RAP_INFL_END,      /* a gzip member ended here (checksum good) */
    RAP_INFL_BAD,      /* corrupt data: detail says the library's words */
} rap_infl_result;

typedef struct rap_inflater rap_inflater;

/* The function table of one backend. inflate() consumes from next_in and
 * writes to next_out, advancing both; it never writes past avail_out and
 * stops at the end of a member (the bytes after it stay in next_in). */
typedef struct {
    const char *name; /* "isa-l" or "zlib" */
    rap_status (*init)(rap_inflater *z);
    rap_infl_result (*inflate)(rap_inflater *z);
    rap_status (*reset)(rap_inflater *z);
    void (*end)(rap_inflater *z);
} rap_inflate_ops;

struct rap_inflater {
    const rap_inflate_ops *ops;
    const unsigned char *next_in;
    size_t avail_in;
    unsigned char *next_out;
    size_t avail_out;
    void *state;        /* the backend's stream, owned */
    char detail[128];   /* after RAP_INFL_BAD: the backend's reason (for logs) */
};

/* The table of a backend; NULL for ISA-L when rap was built without it.
 * AUTO gives ISA-L's when built in, else zlib's. Cannot fail. */
const rap_inflate_ops *rap_inflate_backend(rap_inflate_kind kind);

/* True when rap was built with ISA-L. */
bool rap_inflate_have_isal(void);

/* Makes z ready for the first member of a stream with the chosen backend.
 * who names the stream in messages. Errors: RAP_ERR_ARG "who: ISA-L is not
 * built into rap" for RAP_INFLATE_ISAL without it; RAP_ERR_NOMEM. On
 * failure z holds nothing to release. */
rap_status rap_inflater_init(rap_inflater *z, rap_inflate_kind kind, const char *who);

/* Releases the backend's state; z can be initialized again. Accepts a z
 * that was never initialized if it was zeroed. */
void rap_inflater_end(rap_inflater *z);

#endif /* RAP_INFLATE_H */
