/* lines.c -- whole lines out of a byte stream: the buffer rule shared with
 * the reader, and the line cutter (see lines.h). */
#include "data/lines.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define DEFAULT_BUF ((size_t)64 << 20)
#define DEFAULT_READ ((size_t)1 << 20)
#define MAX_BUF ((size_t)1 << 30)

/* ------------------------------------------------------------ the rule */

void rap_line_fill_take(rap_line_fill *f, char *b, size_t got, int64_t max_line)
{
    size_t at = f->len, end = f->len + got;
    const size_t keep = (size_t)max_line + 1;
    while (at < end) {
        if (f->skipping) {
            size_t at0 = at;
            for (; at < end; at++) {
                unsigned c = (unsigned char)b[at];
                if (c == '\n')
                    break;
                if (f->last_cr) /* a '\r' not at the end of the line */
                    f->bin = true;
                f->last_cr = c == '\r';
                if (!f->last_cr && ((c < 0x20 && c != '\t') || c >= 0x7f))
                    f->bin = true;
            }
            f->drop_cur += (int64_t)(at - at0);
            if (at == end) {
                end = f->prefix_end;
                break;
            }
            if (f->drops && f->n_drops < f->cap_drops)
                f->drops[f->n_drops++] = (rap_line_drop){f->prefix_end, f->drop_cur};
            f->drop_cur = 0;
            if (f->bin)
                b[f->prefix_end - 1] = 0;
            b[f->prefix_end] = '\n';
            size_t rest = end - (at + 1);
            memmove(b + f->prefix_end + 1, b + at + 1, rest);
            f->line_start = f->prefix_end + 1;
            at = f->line_start;
            end = at + rest;
            f->skipping = false;
            continue;
        }
        const char *nl = memrchr(b + at, '\n', end - at);
        if (nl)
            f->line_start = (size_t)(nl - b) + 1;
        if (end - f->line_start > keep) {
            f->prefix_end = f->line_start + keep;
            /* more bytes follow, so a '\r' here is not at the line's end */
            if (b[f->prefix_end - 1] == '\r')
                b[f->prefix_end - 1] = 0;
            f->skipping = true;
            f->bin = false;
            f->last_cr = false;
            at = f->prefix_end;
            continue;
        }
        at = end;
    }
    f->len = end;
}

void rap_line_fill_end(rap_line_fill *f, char *b)
{
    if (f->skipping) {
        if (f->drops && f->n_drops < f->cap_drops)
            f->drops[f->n_drops++] = (rap_line_drop){f->prefix_end, f->drop_cur};
        f->drop_cur = 0;
        if (f->bin)
            b[f->prefix_end - 1] = 0;
        b[f->prefix_end] = '\n';
        f->len = f->prefix_end + 1;
        f->skipping = false;
        f->added_nl = true;
    } else if (f->len > f->line_start) { /* a last line with no '\n' is a row */
        b[f->len++] = '\n';
        f->added_nl = true;
    }
    f->line_start = f->len;
}

void rap_line_fill_shift(rap_line_fill *f, size_t cut)
{
    f->len -= cut;
    f->line_start = f->line_start >= cut ? f->line_start - cut : 0;
    if (f->skipping)
        f->prefix_end -= cut;
}

/* ---------------------------------------------------------- the cutter */

struct rap_lines {
    rap_lines_config cfg;
    char *buf;           /* (cap + 1) bytes from the source; batches are views */
    size_t cap;
    int32_t *start;      /* (B + 1) offsets of the batch being gathered */
    rap_source *src;
    rap_line_fill f;     /* positions in buf */
    size_t base;         /* start of the batch being gathered */
    size_t scan;         /* lines before scan are counted in start[] */
    int64_t n;           /* lines counted */
    int64_t lines_out;   /* lines handed out from src */
    size_t last_bytes;   /* bytes of the last batch */
    bool ended;          /* the source's end was taken in */
};

rap_status rap_lines_create(const rap_lines_config *cfg, rap_lines **out)
{
    *out = NULL;
    if (!cfg || cfg->max_lines < 1 || cfg->max_lines > INT32_MAX - 1 || cfg->max_line < 1 ||
        cfg->max_line > (int64_t)(MAX_BUF / 4) - 2 || cfg->buf_bytes > MAX_BUF)
        return rap_fail(RAP_ERR_ARG, "line cutter: expected max_lines in [1, 2^31 - 2], max_line "
                                     "in [1, 2^28 - 2] and a buffer of at most 1 GiB");
    rap_lines *c = rap_calloc(sizeof *c, "line cutter");
    if (!c)
        return RAP_ERR_NOMEM;
    c->cfg = *cfg;
    c->cap = cfg->buf_bytes ? cfg->buf_bytes : DEFAULT_BUF;
    if (c->cap < 4 * ((size_t)cfg->max_line + 2))
        c->cap = 4 * ((size_t)cfg->max_line + 2);
    if (!c->cfg.read_bytes)
        c->cfg.read_bytes = DEFAULT_READ;
    c->buf = rap_malloc(c->cap + 1, "line cutter buffer");
    c->start = rap_malloc(((size_t)cfg->max_lines + 1) * sizeof *c->start, "line offsets");
    if (!c->buf || !c->start) {
        rap_lines_free(c);
        return RAP_ERR_NOMEM;
    }
    *out = c;
    return RAP_OK;
}

void rap_lines_start(rap_lines *c, rap_source *src)
{
    c->src = src;
    memset(&c->f, 0, sizeof c->f);
    c->base = c->scan = 0;
    c->n = 0;
    c->lines_out = 0;
    c->last_bytes = 0;
    c->ended = false;
}

/* Counts the whole lines in [scan, line_start) into start[], up to B.
 * Newlines are found 16 bytes at a time (SSE2, in every x86-64) rather
 * than with a memchr call per line: with ~250-byte lines the calls cost as
 * much as the search. */
static void count_lines(rap_lines *c)
{
    const int64_t B = c->cfg.max_lines;
    const char *b = c->buf;
    size_t p = c->scan, end = c->f.line_start;
    const size_t base = c->base;
    int32_t *st = c->start;
    int64_t n = c->n;
#ifdef __SSE2__
    const __m128i nl = _mm_set1_epi8('\n');
    while (n < B && p + 16 <= end) { /* [p, p + 16) lies before line_start */
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(b + p)), nl));
        while (m) {
            size_t next = p + (size_t)__builtin_ctz(m) + 1;
            st[++n] = (int32_t)(next - base);
            if (n == B) {
                c->n = n;
                c->scan = next;
                return;
            }
            m &= m - 1;
        }
        p += 16; /* p may now be inside a line: the loop below finds its end */
    }
#endif
    while (n < B && p < end) {
        const char *q = memchr(b + p, '\n', end - p);
        p = (size_t)(q - b) + 1; /* every line before line_start ends in '\n' */
        st[++n] = (int32_t)(p - base);
    }
    c->n = n;
    c->scan = p;
}

/* Moves the batch being gathered and the bytes after it to buf[0]. */
static void compact(rap_lines *c)
{
    size_t k = c->base;
    if (k == 0)
        return;
    memmove(c->buf, c->buf + k, c->f.len - k);
    rap_line_fill_shift(&c->f, k);
    c->scan -= k;
    c->base = 0;
}

/* Reads once more from the source into the buffer (room must be there);
 * at its end takes in the held-back bytes and closes the last line. */
static rap_status fill(rap_lines *c)
{
    size_t room = c->cap - c->f.len, want = c->cfg.read_bytes < room ? c->cfg.read_bytes : room;
    for (;;) {
        size_t got;
        RAP_TRY(rap_source_read(c->src, c->buf + c->f.len, want, &got));
        if (got > 0) {
            rap_line_fill_take(&c->f, c->buf, got, c->cfg.max_line);
            return RAP_OK;
        }
        if (rap_source_is_regular(c->src) || rap_source_at_end(c->src))
            break;
        /* a pipe with nothing yet: wait on */
    }
    char tail[2];
    size_t nt;
    RAP_TRY(rap_source_finish(c->src, tail, &nt));
    if (nt > 0) {
        if (nt > c->cap - c->f.len) /* cannot happen: room >= C/4 */
            return rap_fail(RAP_ERR_IO, "%s: line cutter out of room", rap_source_name(c->src));
        memcpy(c->buf + c->f.len, tail, nt);
        rap_line_fill_take(&c->f, c->buf, nt, c->cfg.max_line);
    }
    rap_line_fill_end(&c->f, c->buf);
    c->ended = true;
    return RAP_OK;
}

rap_status rap_lines_next(rap_lines *c, rap_line_batch *b)
{
    memset(b, 0, sizeof *b);
    if (!c->src)
        return rap_fail(RAP_ERR_ARG, "line cutter: no source (rap_lines_start)");
    b->file = rap_source_name(c->src);
    /* the previous batch's lines are gone: the next one starts behind them */
    c->base = c->scan;
    c->n = 0;
    c->start[0] = 0;
    /* too little room for another batch like the last one: move the bytes
     * after it to the front now, while they are a partial read (a move in
     * the middle of a batch would copy the batch) */
    if (c->cap - c->base < 2 * c->last_bytes + c->cap / 4)
        compact(c);
    for (;;) {
        count_lines(c);
        if (c->n == c->cfg.max_lines || c->ended)
            break;
        if (c->cap - c->f.len < c->cap / 4) { /* nearly full */
            if (c->base > 0) {
                compact(c);
                continue;
            }
            break; /* lines longer than cap / (4 B) on average: a short batch */
        }
        RAP_TRY(fill(c));
    }
    b->text = c->buf + c->base;
    b->start = c->start;
    b->n = c->n;
    b->bytes = c->start[c->n];
    b->first_line = c->lines_out + 1;
    c->lines_out += c->n;
    c->last_bytes = (size_t)b->bytes;
    return RAP_OK;
}

void rap_lines_free(rap_lines *c)
{
    if (!c)
        return;
    rap_free(c->buf);
    rap_free(c->start);
    rap_free(c);
}
