/* source.c -- byte sources: plain or gzip files and stdin (see source.h).
 *
 * Gzip members are inflated by the backend of inflate.h: ISA-L when rap is
 * built with it, else zlib. When ISA-L rejects a member of a regular file
 * (auto choice only), the member is read again from its first byte with
 * zlib, the bytes already handed out are skipped, zlib reads the rest of
 * that member and ISA-L takes over again at the next one: so anything
 * zlib reads is read, and data that both reject fails with zlib's verdict.
 * (ISA-L 2.30 rejects, for one, a header with a header CRC that reaches it
 * in two pieces.) Every corrupt-data failure has one message, "<name>:
 * corrupt gzip data (member K)", whichever inflater saw it; the library's
 * own words go to the debug log.
 */
#include "data/source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/inflate.h"

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
    rap_inflate_kind kind; /* asked for at open */
    rap_inflater z;
    bool z_init;
    bool z_mid;       /* fed bytes of a member whose end was not seen yet */
    bool z_ended;     /* the last member ended: the next byte starts a new one */
    int64_t raw_base;     /* regular file: the descriptor's offset at open */
    int64_t raw_read;     /* raw bytes read from the descriptor since open */
    int64_t member_start; /* raw offset (from raw_base) of the current member */
    int64_t member_out;   /* bytes of the current member handed out */
    int64_t member_no;    /* 1-based number of the current member */
    bool fell_back;       /* zlib reads the current member for ISA-L */
    bool bad;             /* corrupt data met: the next read fails */
    unsigned char tail[64]; /* the last raw bytes read (a followed file rewritten in
                             * place is told by them: rap_source_rotation) */
    size_t tail_len;
};

rap_status rap_source_open(const char *path, rap_source **out)
{
    return rap_source_open_ex(path, RAP_INFLATE_AUTO, out);
}

rap_status rap_source_open_ex(const char *path, rap_inflate_kind kind, rap_source **out)
{
    *out = NULL;
    if (!rap_inflate_backend(kind))
        return rap_fail(RAP_ERR_ARG, "%s: ISA-L is not built into rap (built with ISAL=0 or "
                                     "without libisal-dev)", path);
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
    s->kind = kind;
    if (s->regular) {
        off_t at = lseek(s->fd, 0, SEEK_CUR);
        s->raw_base = at > 0 ? (int64_t)at : 0;
    }
    *out = s;
    return RAP_OK;
}

/* Keeps the last bytes of the n just read in s->tail. */
static void keep_tail(rap_source *s, const void *buf, size_t n)
{
    const size_t cap = sizeof s->tail;
    if (n >= cap) {
        memcpy(s->tail, (const char *)buf + n - cap, cap);
        s->tail_len = cap;
        return;
    }
    size_t keep = s->tail_len + n > cap ? cap - n : s->tail_len;
    memmove(s->tail, s->tail + s->tail_len - keep, keep);
    memcpy(s->tail + keep, buf, n);
    s->tail_len = keep + n;
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
        s->raw_read += r;
        keep_tail(s, buf, (size_t)r);
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
        RAP_TRY(rap_inflater_init(&s->z, s->kind, s->name));
        s->z_init = true;
        s->mode = MODE_GZIP;
        s->member_no = 1;
    } else {
        s->mode = MODE_PLAIN;
    }
    return RAP_OK;
}

/* Swaps the inflater for a fresh one of kind (between members). */
static rap_status swap_inflater(rap_source *s, rap_inflate_kind kind)
{
    unsigned char *out = s->z.next_out; /* inflate_some's output stays */
    size_t room = s->z.avail_out;
    rap_inflater_end(&s->z);
    s->z_init = false;
    RAP_TRY(rap_inflater_init(&s->z, kind, s->name));
    s->z_init = true;
    s->z.next_out = out;
    s->z.avail_out = room;
    return RAP_OK;
}

static rap_status back_to_isal(rap_source *s)
{
    s->fell_back = false;
    return swap_inflater(s, RAP_INFLATE_ISAL);
}

/* Inflates into out[0, n) until at least one byte is there or no input is
 * there now (*got 0). Starts the next member after one ends. RAP_INFL_BAD
 * from the inflater gives *bad true (and RAP_OK). */
static rap_status inflate_some(rap_source *s, char *out, size_t n, size_t *got, bool *bad)
{
    rap_inflater *z = &s->z;
    *bad = false;
    z->next_out = (unsigned char *)out;
    z->avail_out = n;
    while (z->avail_out == n) {
        if (s->in_pos == s->in_len) {
            size_t r;
            RAP_TRY(raw_read(s, s->in, IN_BYTES, &r));
            if (r == 0)
                break; /* no input now */
            s->in_pos = 0;
            s->in_len = r;
        }
        if (s->in_pos == 0 && s->in_len < IN_BYTES && s->regular && !s->z_mid) {
            /* the first bytes (2 were sniffed): fill up, so that ISA-L sees
             * the first header whole (it fails some split ones) */
            size_t r;
            RAP_TRY(raw_read(s, s->in + s->in_len, IN_BYTES - s->in_len, &r));
            s->in_len += r;
        }
        if (s->z_ended) { /* a further gzip member follows */
            if (s->fell_back) /* zlib read the member ISA-L rejected: ISA-L again */
                RAP_TRY(back_to_isal(s));
            RAP_TRY(z->ops->reset(z));
            s->z_ended = false;
            s->member_no++;
            s->member_start = s->raw_read - (int64_t)(s->in_len - s->in_pos);
            s->member_out = 0;
        }
        z->next_in = s->in + s->in_pos;
        z->avail_in = s->in_len - s->in_pos;
        rap_infl_result res = z->ops->inflate(z);
        s->in_pos = s->in_len - z->avail_in;
        s->z_mid = true;
        if (res == RAP_INFL_END) {
            s->z_mid = false;
            s->z_ended = true;
        } else if (res == RAP_INFL_BAD) {
            *bad = true;
            break;
        }
    }
    *got = n - z->avail_out;
    s->member_out += (int64_t)*got;
    return RAP_OK;
}

static rap_status corrupt(const rap_source *s)
{
    rap_debug("%s: gzip member %lld: %s", s->name, (long long)s->member_no, s->z.detail);
    return rap_fail(RAP_ERR_IO, "%s: corrupt gzip data (member %lld)", s->name,
                    (long long)s->member_no);
}

/* ISA-L rejected the current member: zlib reads it again from its first
 * byte, skipping the member_out bytes already handed out (decoders agree on
 * every byte both can decode), using buf (n bytes) as scratch. ISA-L takes
 * over again at the next member. */
static rap_status fall_back(rap_source *s, char *buf, size_t n)
{
    rap_debug("%s: ISA-L could not read gzip member %lld (%s); reading it again with zlib",
              s->name, (long long)s->member_no, s->z.detail);
    RAP_TRY(swap_inflater(s, RAP_INFLATE_ZLIB));
    s->fell_back = true;
    if (lseek(s->fd, (off_t)(s->raw_base + s->member_start), SEEK_SET) < 0)
        return rap_fail(RAP_ERR_IO, "%s: seek: %s", s->name, strerror(errno));
    s->raw_read = s->member_start;
    s->in_pos = s->in_len = 0;
    s->z_mid = s->z_ended = false;
    int64_t skip = s->member_out;
    s->member_out = 0;
    while (s->member_out < skip) {
        int64_t left = skip - s->member_out;
        size_t got;
        bool bad;
        RAP_TRY(inflate_some(s, buf, left < (int64_t)n ? (size_t)left : n, &got, &bad));
        if (bad || got == 0 || (s->z_ended && s->member_out < skip))
            return corrupt(s);
    }
    return RAP_OK;
}

/* Can zlib read the current member again for ISA-L? */
static bool can_fall_back(const rap_source *s)
{
    return s->kind == RAP_INFLATE_AUTO && !s->fell_back && s->regular &&
           s->z.ops == rap_inflate_backend(RAP_INFLATE_ISAL);
}

/* The bytes decoded before corrupt data are handed out (so they do not
 * depend on how the caller sizes its reads), and the error comes with the
 * next call; with a fall-back to come they are dropped instead, and zlib
 * decodes them again. */
static rap_status gz_read(rap_source *s, char *buf, size_t n, size_t *got)
{
    *got = 0;
    if (s->bad)
        return corrupt(s);
    RAP_TRY(inflate_some(s, buf, n, got, &s->bad));
    if (!s->bad)
        return RAP_OK;
    if (!can_fall_back(s))
        return *got > 0 ? RAP_OK : corrupt(s);
    s->member_out -= (int64_t)*got; /* not handed out */
    s->bad = false;
    RAP_TRY(fall_back(s, buf, n));
    RAP_TRY(inflate_some(s, buf, n, got, &s->bad));
    return s->bad && *got == 0 ? corrupt(s) : RAP_OK;
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
const char *rap_source_inflater(const rap_source *s)
{
    return s->mode == MODE_GZIP && s->z_init ? s->z.ops->name : NULL;
}
const char *rap_source_name(const rap_source *s) { return s->name; }

rap_status rap_source_identity(const rap_source *s, uint64_t *dev, uint64_t *ino)
{
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return rap_fail(RAP_ERR_IO, "%s: %s", s->name, strerror(errno));
    *dev = (uint64_t)sb.st_dev;
    *ino = (uint64_t)sb.st_ino;
    return RAP_OK;
}

rap_status rap_source_rotation(const rap_source *s, const char *path, rap_rotation *out)
{
    *out = RAP_ROT_NONE;
    if (!s->regular || s->mode == MODE_GZIP || !s->own_fd)
        return RAP_OK;
    struct stat fd_sb, path_sb;
    if (fstat(s->fd, &fd_sb) != 0)
        return rap_fail(RAP_ERR_IO, "%s: %s", s->name, strerror(errno));
    if (fd_sb.st_nlink == 0 || stat(path, &path_sb) != 0 || path_sb.st_ino != fd_sb.st_ino ||
        path_sb.st_dev != fd_sb.st_dev) {
        *out = RAP_ROT_MOVED;
        return RAP_OK;
    }
    int64_t at = s->raw_base + s->raw_read;
    if ((int64_t)fd_sb.st_size < at) {
        *out = RAP_ROT_TRUNCATED;
        return RAP_OK;
    }
    /* truncated and grown past the offset again: the bytes before it differ */
    unsigned char now[sizeof s->tail];
    size_t k = s->tail_len <= (size_t)at ? s->tail_len : (size_t)at;
    if (k > 0 && (pread(s->fd, now, k, (off_t)(at - (int64_t)k)) != (ssize_t)k ||
                  memcmp(now, s->tail + s->tail_len - k, k) != 0))
        *out = RAP_ROT_TRUNCATED;
    return RAP_OK;
}

rap_status rap_source_rewind(rap_source *s)
{
    if (s->mode == MODE_GZIP)
        return rap_fail(RAP_ERR_IO, "%s: a gzip file was truncated while followed: its "
                        "compressed stream cannot be read from a new start", s->name);
    if (!s->regular || lseek(s->fd, 0, SEEK_SET) < 0)
        return rap_fail(RAP_ERR_IO, "%s: seek to the start: %s", s->name,
                        s->regular ? strerror(errno) : "not a regular file");
    s->raw_base = 0;
    s->raw_read = 0;
    s->in_pos = s->in_len = 0;
    s->tail_len = 0;
    return RAP_OK;
}

rap_status rap_source_skip(rap_source *s, int64_t n, char *scratch, size_t cap)
{
    int64_t done = 0;
    if (s->mode == MODE_UNKNOWN && n > 0)
        RAP_TRY(sniff(s));
    if (s->mode == MODE_PLAIN && s->regular) {
        struct stat sb;
        if (fstat(s->fd, &sb) != 0)
            return rap_fail(RAP_ERR_IO, "%s: %s", s->name, strerror(errno));
        if ((int64_t)sb.st_size < s->raw_base + n)
            return rap_fail(RAP_ERR_DATA, "%s: the file has %lld bytes, it ends before byte %lld",
                            s->name, (long long)(sb.st_size - s->raw_base), (long long)n);
        size_t held = s->in_len - s->in_pos;
        if ((int64_t)held >= n) {
            s->in_pos += (size_t)n;
            return RAP_OK;
        }
        s->in_pos = s->in_len;
        int64_t at = s->raw_base + n;
        if (lseek(s->fd, (off_t)at, SEEK_SET) < 0)
            return rap_fail(RAP_ERR_IO, "%s: seek: %s", s->name, strerror(errno));
        s->raw_read = n;
        /* the bytes before the new offset, as if read */
        size_t k = n < (int64_t)sizeof s->tail ? (size_t)n : sizeof s->tail;
        ssize_t r = pread(s->fd, s->tail, k, (off_t)(at - (int64_t)k));
        s->tail_len = r == (ssize_t)k ? k : 0;
        return RAP_OK;
    }
    while (done < n) {
        size_t got;
        int64_t left = n - done;
        RAP_TRY(rap_source_read(s, scratch, left < (int64_t)cap ? (size_t)left : cap, &got));
        if (got == 0)
            return rap_fail(RAP_ERR_DATA, "%s: the data ends after %lld bytes, before byte %lld",
                            s->name, (long long)done, (long long)n);
        done += (int64_t)got;
    }
    return RAP_OK;
}

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
        rap_inflater_end(&s->z);
    if (s->own_fd && s->fd >= 0)
        close(s->fd);
    free(s->name);
    rap_free(s->in);
    rap_free(s);
}
