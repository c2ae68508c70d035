/* inflate.c -- the gzip inflaters: zlib, and ISA-L's igzip when built with
 * RAP_HAVE_ISAL (see inflate.h). */
#include "data/inflate.h"

#include <string.h>
#include <zlib.h>

#ifdef RAP_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

/* Both libraries count in 32 bits: feed at most this much at a time. */
#define STEP_MAX ((size_t)1 << 30)

static size_t clamp(size_t n) { return n > STEP_MAX ? STEP_MAX : n; }

/* ---------------------------------------------------------------- zlib */

static rap_status zlib_init(rap_inflater *z)
{
    z_stream *s = rap_calloc(sizeof *s, "zlib stream");
    if (!s)
        return RAP_ERR_NOMEM;
    if (inflateInit2(s, 15 + 16) != Z_OK) { /* 15 + 16: gzip wrapper only */
        rap_free(s);
        return rap_fail(RAP_ERR_NOMEM, "zlib inflateInit2 failed");
    }
    z->state = s;
    return RAP_OK;
}

static rap_infl_result zlib_inflate(rap_inflater *z)
{
    z_stream *s = z->state;
    s->next_in = (Bytef *)z->next_in;
    s->avail_in = (uInt)clamp(z->avail_in);
    s->next_out = z->next_out;
    s->avail_out = (uInt)clamp(z->avail_out);
    uInt in0 = s->avail_in, out0 = s->avail_out;
    int ret = inflate(s, Z_NO_FLUSH);
    z->next_in += in0 - s->avail_in;
    z->avail_in -= in0 - s->avail_in;
    z->next_out += out0 - s->avail_out;
    z->avail_out -= out0 - s->avail_out;
    if (ret == Z_STREAM_END)
        return RAP_INFL_END;
    if (ret == Z_OK || ret == Z_BUF_ERROR) /* Z_BUF_ERROR: no progress possible now */
        return RAP_INFL_MORE;
    snprintf(z->detail, sizeof z->detail, "zlib: %s", s->msg ? s->msg : zError(ret));
    return RAP_INFL_BAD;
}

static rap_status zlib_reset(rap_inflater *z)
{
    if (inflateReset(z->state) != Z_OK)
        return rap_fail(RAP_ERR_IO, "zlib inflateReset failed");
    return RAP_OK;
}

static void zlib_end(rap_inflater *z)
{
    inflateEnd(z->state);
    rap_free(z->state);
}

static const rap_inflate_ops ZLIB_OPS = {"zlib", zlib_init, zlib_inflate, zlib_reset, zlib_end};

/* --------------------------------------------------------------- ISA-L */

#ifdef RAP_HAVE_ISAL
static rap_status isal_init(rap_inflater *z)
{
    struct inflate_state *s = rap_malloc(sizeof *s, "ISA-L inflate state");
    if (!s)
        return RAP_ERR_NOMEM;
    isal_inflate_init(s);
    s->crc_flag = ISAL_GZIP; /* parse the gzip header, check CRC and length */
    z->state = s;
    return RAP_OK;
}

static const char *isal_reason(int ret)
{
    switch (ret) {
    case ISAL_INVALID_BLOCK: return "invalid deflate block";
    case ISAL_INVALID_SYMBOL: return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK: return "invalid distance";
    case ISAL_INVALID_WRAPPER: return "invalid gzip header or trailer";
    case ISAL_UNSUPPORTED_METHOD: return "unsupported compression method";
    case ISAL_INCORRECT_CHECKSUM: return "incorrect checksum";
    case ISAL_NEED_DICT: return "needs a dictionary";
    }
    return "unexpected return value";
}

static rap_infl_result isal_inflate_step(rap_inflater *z)
{
    struct inflate_state *s = z->state;
    s->next_in = (uint8_t *)z->next_in;
    s->avail_in = (uint32_t)clamp(z->avail_in);
    s->next_out = z->next_out;
    s->avail_out = (uint32_t)clamp(z->avail_out);
    uint32_t in0 = s->avail_in, out0 = s->avail_out;
    int ret = isal_inflate(s);
    z->next_in += in0 - s->avail_in;
    z->avail_in -= in0 - s->avail_in;
    z->next_out += out0 - s->avail_out;
    z->avail_out -= out0 - s->avail_out;
    if (ret != ISAL_DECOMP_OK && ret != ISAL_END_INPUT && ret != ISAL_OUT_OVERFLOW) {
        snprintf(z->detail, sizeof z->detail, "isa-l: %s (%d)", isal_reason(ret), ret);
        return RAP_INFL_BAD;
    }
    /* ISAL_BLOCK_FINISH: the member's data and trailer are done and its
     * output is flushed; the bytes after the trailer are left in next_in */
    return s->block_state == ISAL_BLOCK_FINISH ? RAP_INFL_END : RAP_INFL_MORE;
}

static rap_status isal_reset(rap_inflater *z)
{
    struct inflate_state *s = z->state;
    isal_inflate_reset(s);
    s->crc_flag = ISAL_GZIP;
    return RAP_OK;
}

static void isal_end(rap_inflater *z) { rap_free(z->state); }

static const rap_inflate_ops ISAL_OPS = {"isa-l", isal_init, isal_inflate_step, isal_reset,
                                         isal_end};
#endif

/* -------------------------------------------------------------- choice */

bool rap_inflate_have_isal(void)
{
#ifdef RAP_HAVE_ISAL
    return true;
#else
    return false;
#endif
}

const rap_inflate_ops *rap_inflate_backend(rap_inflate_kind kind)
{
#ifdef RAP_HAVE_ISAL
    if (kind == RAP_INFLATE_AUTO || kind == RAP_INFLATE_ISAL)
        return &ISAL_OPS;
#else
    if (kind == RAP_INFLATE_ISAL)
        return NULL;
#endif
    return &ZLIB_OPS;
}

rap_status rap_inflater_init(rap_inflater *z, rap_inflate_kind kind, const char *who)
{
    memset(z, 0, sizeof *z);
    const rap_inflate_ops *ops = rap_inflate_backend(kind);
    if (!ops)
        return rap_fail(RAP_ERR_ARG, "%s: ISA-L is not built into rap (built with ISAL=0 or "
                                     "without libisal-dev)", who);
    rap_status st = ops->init(z);
    if (st != RAP_OK) { /* the message is recorded */
        z->state = NULL;
        return st;
    }
    z->ops = ops;
    return RAP_OK;
}

void rap_inflater_end(rap_inflater *z)
{
    if (z->ops && z->state)
        z->ops->end(z);
    z->ops = NULL;
    z->state = NULL;
}
