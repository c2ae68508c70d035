/* source.c -- byte sources: plain or gzip files and stdin (see source.h). */
#include "data/source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IN_BYTES (256 * 1024) /* compressed input buffer */

enum { MODE_UNKNOWN = 0, MODE_PLAIN, MODE_GZIP };

struct rap_source {
    char *name;       /* path or "<stdin>", owned */
    int fd;
    bool own_fd;      /* false for stdin */
    bool regular;     /* S_ISREG: may grow, never blocks */
    bool eof;         /* pipe closed */
    int mode;
    unsigned char *in; /* (IN_BYTES) raw bytes: sniffed magic or gzip input */
    size_t in_pos, in_len;
    z_stream z;
    bool z_init;
    bool z_mid;       /* fed bytes of a member whose end was not seen yet */
    bool z_ended;     /* the last member ended: the next byte starts a new one */
};

rap_status rap_source_open(const char *path, rap_source **out)
{
    *out = NULL;
    rap_source *s = rap_calloc(sizeof *s, "byte source");
    if (!s)
        return RAP_ERR_NOMEM;
    bool is_stdin = strcmp(path, "-") == 0;
    s->name = strdup(is_stdin ? "<stdin>" : path);
    s->in = rap_malloc(IN_BYTES, "byte source input buffer");
    if (!s->name || !s->in) {
        rap_source_close(s);
        return rap_fail(RAP_ERR_NOMEM, "out of memory opening %s", path);
    }
    if (is_stdin) {
        s->fd = 0;
    } else {
        s->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (s->fd < 0) {
            rap_status st = rap_fail(RAP_ERR_IO, "%s: %s", path, strerror(errno));
            s->fd = -1;
            rap_source_close(s);
            return st;
        }
        s->own_fd = true;
    }
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) {
        rap_status st = rap_fail(RAP_ERR_IO, "%s: %s", s->name, strerror(errno));
        rap_source_close(s);
        return st;
    }
    if (S_ISDIR(sb.st_mode)) {
        rap_status st = rap_fail(RAP_ERR_IO, "%s: is a directory", s->name);
        rap_source_close(s);
        return st;
    }
    s->regular = S_ISREG(sb.st_mode);
    *out = s;
    return RAP_OK;
}

/* Reads raw bytes from the descriptor. A pipe is polled for at most 100 ms
 * so that the caller regains control; *got 0 then means "nothing yet". */
static rap_status raw_read(rap_source *s, void *buf, size_t n, size_t *got)
{
    *got = 0;
    if (s->eof)
        return RAP_OK;
    if (!s->regular) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        int k = poll(&p, 1, 100);
        if (k < 0 && errno != EINTR)
            return rap_fail(RAP_ERR_IO, "%s: poll: %s", s->name, strerror(errno));
        if (k <= 0)
            return RAP_OK;
    }
    for (;;) {
        ssize_t r = read(s->fd, buf, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return RAP_OK;
        if (r < 0)
            return rap_fail(RAP_ERR_IO, "%s: read: %s", s->name, strerror(errno));
        if (r == 0 && !s->regular)
            s->eof = true;
        *got = (size_t)r;
        return RAP_OK;
    }
}

/* Sniffs the first two bytes. Leaves mode UNKNOWN while fewer are there. */
static rap_status sniff(rap_source *s)
{
    while (s->in_len < 2) {
        size_t got;
        RAP_TRY(raw_read(s, s->in + s->in_len, 2 - s->in_len, &got));
        if (got == 0)
            return RAP_OK;
        s->in_len += got;
    }
    if (s->in[0] == 0x1f && s->in[1] == 0x8b) {
        memset(&s->z, 0, sizeof s->z);
        if (inflateInit2(&s->z, 15 + 16) != Z_OK)
            return rap_fail(RAP_ERR_NOMEM, "%s: zlib inflateInit2 failed", s->name);
        s->z_init = true;
        s->mode = MODE_GZIP;
    } else {
        s->mode = MODE_PLAIN;
    }
    return RAP_OK;
}

static rap_status gz_read(rap_source *s, char *buf, size_t n, size_t *got)
{
    z_stream *z = &s->z;
    z->next_out = (Bytef *)buf;
    z->avail_out = (uInt)(n > (1u << 30) ? (1u << 30) : n);
    uInt want = z->avail_out;
    while (z->avail_out == want) {
        if (s->in_pos == s->in_len) {
            size_t r;
            RAP_TRY(raw_read(s, s->in, IN_BYTES, &r));
            if (r == 0)
                break; /* no input now */
            s->in_pos = 0;
            s->in_len = r;
        }
        if (s->z_ended) { /* a further gzip member follows */
            if (inflateReset(z) != Z_OK)
                return rap_fail(RAP_ERR_IO, "%s: zlib inflateReset failed", s->name);
            s->z_ended = false;
        }
        z->next_in = s->in + s->in_pos;
        z->avail_in = (uInt)(s->in_len - s->in_pos);
        int ret = inflate(z, Z_NO_FLUSH);
        s->in_pos = s->in_len - z->avail_in;
        s->z_mid = true;
        if (ret == Z_STREAM_END) {
            s->z_mid = false;
            s->z_ended = true;
        } else if (ret == Z_BUF_ERROR && z->avail_in == 0) {
            /* no progress possible: needs more input; loop reads it */
        } else if (ret != Z_OK) {
            return rap_fail(RAP_ERR_IO, "%s: corrupt gzip data (zlib: %s)", s->name,
                            z->msg ? z->msg : zError(ret));
        }
    }
    *got = want - z->avail_out;
    return RAP_OK;
}

rap_status rap_source_read(rap_source *s, char *buf, size_t n, size_t *got)
{
    *got = 0;
    if (n == 0)
        return RAP_OK;
    if (s->mode == MODE_UNKNOWN) {
        RAP_TRY(sniff(s));
        if (s->mode == MODE_UNKNOWN)
            return RAP_OK;
    }
    if (s->mode == MODE_GZIP)
        return gz_read(s, buf, n, got);
    if (s->in_pos < s->in_len) { /* the sniffed bytes first */
        size_t k = s->in_len - s->in_pos < n ? s->in_len - s->in_pos : n;
        memcpy(buf, s->in + s->in_pos, k);
        s->in_pos += k;
        *got = k;
        return RAP_OK;
    }
    return raw_read(s, buf, n, got);
}

bool rap_source_is_regular(const rap_source *s) { return s->regular; }
bool rap_source_at_end(const rap_source *s) { return s->eof; }
bool rap_source_is_gzip(const rap_source *s) { return s->mode == MODE_GZIP; }
const char *rap_source_name(const rap_source *s) { return s->name; }

rap_status rap_source_finish(rap_source *s, char *buf, size_t *got)
{
    *got = 0;
    if (s->mode == MODE_UNKNOWN) { /* 0 or 1 byte in all: plain text */
        memcpy(buf, s->in, s->in_len);
        *got = s->in_len;
        s->in_pos = s->in_len;
        s->mode = MODE_PLAIN;
        return RAP_OK;
    }
    if (s->mode == MODE_GZIP && (s->z_mid || s->in_pos < s->in_len))
        return rap_fail(RAP_ERR_IO, "%s: truncated gzip data (unexpected end of file)", s->name);
    return RAP_OK;
}

void rap_source_close(rap_source *s)
{
    if (!s)
        return;
    if (s->z_init)
        inflateEnd(&s->z);
    if (s->own_fd && s->fd >= 0)
        close(s->fd);
    free(s->name);
    rap_free(s->in);
    rap_free(s);
}
