/* test_inflate.c -- the gzip inflaters behind source.c: ISA-L and zlib give
 * the same bytes (one member, several, empty ones, header fields, files
 * made by the gzip command), fail truncated and corrupt data the same way
 * with the same message, and the automatic choice reads again with zlib
 * what ISA-L rejects without handing out a byte twice. */
#include "test.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "data/inflate.h"
#include "data/source.h"

static char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

/* Deterministic text: n bytes of lines of digits, tabs and hex, about as
 * compressible as Criteo rows. */
static char *make_text(size_t n, uint64_t seed)
{
    char *p = malloc(n + 1);
    uint64_t s = seed;
    size_t i = 0;
    while (i < n) {
        uint64_t z = rap_splitmix64(&s);
        int len = snprintf(p + i, n + 1 - i, "%d\t%u\t%08x\t%x\n", (int)(z & 1),
                           (unsigned)(z >> 40) % 1000, (unsigned)(z >> 8), (unsigned)(z % 97));
        i += len > 0 ? (size_t)len : 1;
    }
    p[n] = 0;
    return p;
}

/* One gzip member of data[0, n) with zlib's deflate, level, and a header
 * with a name, a comment and an extra field when fields. Appends to out. */
static size_t gz_member(unsigned char *out, const char *data, size_t n, int level, bool fields)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    gz_header h;
    memset(&h, 0, sizeof h);
    static unsigned char extra[] = "RAPX\x04" "\x00" "abcd";
    if (fields) {
        h.name = (Bytef *)"day_0.tsv";
        h.comment = (Bytef *)"made by test_inflate";
        h.extra = extra;
        h.extra_len = 10;
        h.hcrc = 1;
        deflateSetHeader(&z, &h);
    }
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)(n + n / 8 + 1024);
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    size_t k = z.total_out;
    deflateEnd(&z);
    return k;
}

static void put_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n))
        abort();
    fclose(f);
}

/* Reads all of path with the inflater kind, in reads of `step` bytes.
 * Returns the status; *out (malloc'd) and *n the bytes handed out before
 * it, msg the message. */
static rap_status read_all(const char *path, rap_inflate_kind kind, size_t step, char **out,
                           size_t *n, char *msg, size_t msg_n, char *used, size_t used_n)
{
    rap_source *s;
    *out = NULL;
    *n = 0;
    msg[0] = 0;
    rap_status st = rap_source_open_ex(path, kind, &s);
    if (st != RAP_OK)
        return st;
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + step + 2);
    for (;;) {
        if (len + step + 2 > cap) {
            cap *= 2;
            buf = realloc(buf, cap + step + 2);
        }
        size_t got;
        st = rap_source_read(s, buf + len, step, &got);
        if (st != RAP_OK)
            break;
        if (got == 0) {
            st = rap_source_finish(s, buf + len, &got);
            len += got;
            break;
        }
        len += got;
    }
    if (st != RAP_OK)
        snprintf(msg, msg_n, "%s", rap_last_error());
    if (used)
        snprintf(used, used_n, "%s", rap_source_inflater(s) ? rap_source_inflater(s) : "plain");
    rap_source_close(s);
    *out = buf;
    *n = len;
    return st;
}

#define NEED_ISAL()                                                                  \
    do {                                                                             \
        if (!rap_inflate_have_isal())                                                \
            SKIP("rap is built without ISA-L (ISAL=0 or no libisal-dev): no second " \
                 "inflater to compare zlib with");                                   \
    } while (0)

RAP_TEST(inflate_backends)
{
    CHECK(rap_inflate_backend(RAP_INFLATE_ZLIB) != NULL);
    CHECK(!strcmp(rap_inflate_backend(RAP_INFLATE_ZLIB)->name, "zlib"));
    if (rap_inflate_have_isal()) {
        CHECK(!strcmp(rap_inflate_backend(RAP_INFLATE_AUTO)->name, "isa-l"));
        CHECK(!strcmp(rap_inflate_backend(RAP_INFLATE_ISAL)->name, "isa-l"));
    } else {
        CHECK(!strcmp(rap_inflate_backend(RAP_INFLATE_AUTO)->name, "zlib"));
        CHECK(rap_inflate_backend(RAP_INFLATE_ISAL) == NULL);
        rap_source *s = NULL;
        CHECK(rap_source_open_ex("/dev/null", RAP_INFLATE_ISAL, &s) == RAP_ERR_ARG);
        CHECK(strstr(rap_last_error(), "ISA-L is not built into rap") != NULL);
    }
}

RAP_TEST(inflate_same_bytes)
{
    NEED_ISAL();
    /* members: 3 MB at level 6 with header fields, empty, 1 byte, 700 kB at
     * level 1, 200 kB stored (level 0) */
    const size_t sizes[] = {3000000, 0, 1, 700000, 200000};
    const int levels[] = {6, 6, 9, 1, 0};
    size_t total = 0;
    for (int i = 0; i < 5; i++)
        total += sizes[i];
    char *text = make_text(total, 11);
    unsigned char *gz = malloc(total + total / 4 + 8192);
    size_t at = 0, off = 0, one = 0;
    for (int i = 0; i < 5; i++) {
        at += gz_member(gz + at, text + off, sizes[i], levels[i], i == 0);
        off += sizes[i];
        if (i == 0)
            one = at;
    }
    const char *single = tpath("inf_single.gz"), *multi = tpath("inf_multi.gz");
    put_file(single, gz, one);
    put_file(multi, gz, at);
    const size_t steps[] = {1 << 20, 65536, 4099, 17};
    for (int f = 0; f < 2; f++) {
        const char *path = f ? multi : single;
        size_t want = f ? total : sizes[0];
        for (int k = 0; k < 4; k++) {
            if (steps[k] < 1000 && f == 0)
                continue; /* 17-byte reads of 3 MB: slow, the multi file has small members */
            for (int kind = RAP_INFLATE_AUTO; kind <= RAP_INFLATE_ISAL; kind++) {
                char *out, msg[512], used[16];
                size_t n;
                rap_status st = read_all(path, (rap_inflate_kind)kind, steps[k], &out, &n, msg,
                                         sizeof msg, used, sizeof used);
                CHECK_MSG(st == RAP_OK, "%s kind %d step %zu: %s", path, kind, steps[k], msg);
                CHECK_MSG(n == want && memcmp(out, text, want) == 0,
                          "%s kind %d step %zu: %zu bytes, expected %zu", path, kind, steps[k], n,
                          want);
                CHECK(strcmp(used, kind == RAP_INFLATE_ZLIB ? "zlib" : "isa-l") == 0);
                free(out);
            }
        }
    }
    free(gz);
    free(text);
}

RAP_TEST(inflate_gzip_command)
{
    if (system("command -v gzip >/dev/null 2>&1") != 0)
        SKIP("no gzip command on this machine");
    const char *plain = tpath("inf_cli.tsv"), *gz = tpath("inf_cli.tsv.gz");
    size_t n = 2500000;
    char *text = make_text(n, 5);
    put_file(plain, text, n);
    char cmd[1200];
    /* two members: gzip -9 of the whole file, then gzip -1 of it again (the
     * command stores the name and time in the header) */
    snprintf(cmd, sizeof cmd, "gzip -9 -c '%s' > '%s' && gzip -1 -c '%s' >> '%s'", plain, gz, plain,
             gz);
    REQUIRE(system(cmd) == 0);
    char *za, *ia, msg[512];
    size_t zn, in;
    CHECK_OK(read_all(gz, RAP_INFLATE_ZLIB, 1 << 20, &za, &zn, msg, sizeof msg, NULL, 0));
    /* without ISA-L built in, auto is zlib again: the file still checks zlib */
    CHECK_OK(read_all(gz, rap_inflate_have_isal() ? RAP_INFLATE_ISAL : RAP_INFLATE_AUTO, 1 << 20,
                      &ia, &in, msg, sizeof msg, NULL, 0));
    CHECK(zn == 2 * n && in == 2 * n);
    CHECK(zn == in && memcmp(za, ia, zn) == 0);
    CHECK(memcmp(za, text, n) == 0 && memcmp(za + n, text, n) == 0);
    free(za);
    free(ia);
    free(text);
}

/* The three ways to read path: each must fail with status want_st and the
 * same message containing want_msg; zlib's and auto's bytes before the
 * failure are the same (auto reads again with zlib what ISA-L rejects). */
static void same_failure(rap_test_ctx *t, const char *path, rap_status want_st,
                         const char *want_msg, const char *what, const char *text, bool exact)
{
    char *b[3], m[3][512], used[3][16];
    size_t n[3];
    rap_status st[3];
    for (int k = 0; k < 3; k++)
        st[k] = read_all(path, (rap_inflate_kind)k, 65536, &b[k], &n[k], m[k], sizeof m[k],
                         used[k], sizeof used[k]);
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(st[k] == want_st, "%s, kind %d: %s, expected %s", what, k,
                  rap_status_name(st[k]), rap_status_name(want_st));
        CHECK_MSG(strstr(m[k], path) && strstr(m[k], want_msg), "%s, kind %d: message \"%s\"",
                  what, k, m[k]);
        CHECK_MSG(strcmp(m[k], m[RAP_INFLATE_ZLIB]) == 0, "%s: \"%s\" vs zlib's \"%s\"", what,
                  m[k], m[RAP_INFLATE_ZLIB]);
    }
    if (exact) /* a corrupt member: zlib decided for auto too */
        CHECK_MSG(n[RAP_INFLATE_AUTO] == n[RAP_INFLATE_ZLIB] &&
                      memcmp(b[RAP_INFLATE_AUTO], b[RAP_INFLATE_ZLIB], n[RAP_INFLATE_ZLIB]) == 0,
                  "%s: auto handed out %zu bytes, zlib %zu", what, n[RAP_INFLATE_AUTO],
                  n[RAP_INFLATE_ZLIB]);
    else /* cut short: each hands out what it decoded (ISA-L holds a few bytes back) */
        for (int k = 0; k < 3; k++)
            CHECK_MSG(memcmp(b[k], text, n[k]) == 0, "%s, kind %d: wrong bytes", what, k);
    for (int k = 0; k < 3; k++)
        free(b[k]);
}

RAP_TEST(inflate_same_failures)
{
    NEED_ISAL();
    /* three members of 400 kB each */
    size_t part = 400000;
    char *text = make_text(3 * part, 23);
    unsigned char *gz = malloc(4 * part);
    size_t ends[3], at = 0;
    for (int i = 0; i < 3; i++) {
        at += gz_member(gz + at, text + i * part, part, 6, i == 1);
        ends[i] = at;
    }
    const char *p = tpath("inf_bad.gz");
    char what[128];
    /* truncated: in the first header, in the middle of members 1 and 3, in
     * the last trailer */
    const size_t cuts[] = {5, ends[0] / 2, ends[1] + (ends[2] - ends[1]) / 2, ends[2] - 3};
    for (int i = 0; i < 4; i++) {
        put_file(p, gz, cuts[i]);
        snprintf(what, sizeof what, "cut at %zu of %zu", cuts[i], at);
        same_failure(t, p, RAP_ERR_IO, "truncated gzip data", what, text, false);
    }
    /* corrupt: 64 bytes changed in the middle of member 1, 2, 3; a changed
     * CRC; garbage after the last member */
    const size_t at_bytes[] = {ends[0] / 2, ends[0] + (ends[1] - ends[0]) / 2,
                               ends[1] + (ends[2] - ends[1]) / 3};
    const char *member[] = {"(member 1)", "(member 2)", "(member 3)"};
    unsigned char *bad = malloc(at + 64);
    for (int i = 0; i < 3; i++) {
        memcpy(bad, gz, at);
        for (size_t j = at_bytes[i]; j < at_bytes[i] + 64; j++)
            bad[j] ^= 0x5a;
        put_file(p, bad, at);
        snprintf(what, sizeof what, "64 bytes changed at %zu", at_bytes[i]);
        same_failure(t, p, RAP_ERR_IO, member[i], what, text, true);
        same_failure(t, p, RAP_ERR_IO, "corrupt gzip data", what, text, true);
    }
    memcpy(bad, gz, at);
    bad[ends[1] - 8] ^= 1; /* member 2's CRC */
    put_file(p, bad, at);
    same_failure(t, p, RAP_ERR_IO, "corrupt gzip data (member 2)", "a changed CRC", text, true);
    memcpy(bad, gz, at);
    memcpy(bad + at, "not gzip at all", 15);
    put_file(p, bad, at + 15);
    same_failure(t, p, RAP_ERR_IO, "corrupt gzip data (member 4)", "garbage after the end", text,
                 true);
    free(bad);
    free(gz);
    free(text);
}

RAP_TEST(inflate_pipe)
{
    /* stdin-like: a pipe through the gzip'd bytes, read by ISA-L where
     * built in (no read again possible: a corrupt member fails at once,
     * with the same message as zlib's) */
    size_t n = 900000;
    char *text = make_text(n, 9);
    unsigned char *gz = malloc(n + 4096);
    size_t k = gz_member(gz, text, n, 6, false);
    const char *p = tpath("inf_pipe.gz"), *q = tpath("inf_pipe_bad.gz");
    put_file(p, gz, k);
    for (size_t j = k / 2; j < k / 2 + 64; j++)
        gz[j] ^= 0x5a;
    put_file(q, gz, k);
    for (int bad = 0; bad < 2; bad++) {
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "cat '%s'", bad ? q : p);
        FILE *f = popen(cmd, "r");
        REQUIRE(f);
        int saved = dup(0);
        dup2(fileno(f), 0);
        rap_source *s;
        REQUIRE_OK(rap_source_open("-", &s));
        char *buf = malloc(n + 16);
        size_t len = 0, got;
        rap_status st;
        for (;;) {
            st = rap_source_read(s, buf + len, n + 2 - len, &got);
            if (st != RAP_OK || (got == 0 && rap_source_at_end(s)))
                break;
            len += got;
        }
        if (!bad) {
            CHECK_OK(st);
            CHECK(len == n && memcmp(buf, text, n) == 0);
            CHECK(!strcmp(rap_source_inflater(s), rap_inflate_have_isal() ? "isa-l" : "zlib"));
        } else {
            CHECK(st == RAP_ERR_IO);
            CHECK_MSG(!strcmp(rap_last_error(), "<stdin>: corrupt gzip data (member 1)"),
                      "message: %s", rap_last_error());
        }
        rap_source_close(s);
        dup2(saved, 0);
        close(saved);
        pclose(f);
        free(buf);
    }
    free(gz);
    free(text);
}

RAP_TEST(inflate_fallback_to_zlib)
{
    NEED_ISAL();
    /* A member ISA-L cannot read: its header has a header CRC and reaches
     * ISA-L in two pieces, because it straddles the end of the source's
     * first raw read (256 KiB, source.c's IN_BYTES). Member 1 is stored
     * (level 0) data sized so that member 2's header starts 5 bytes before
     * that end; member 3 is plain. */
    const size_t RAW = 256 * 1024, part = 300000;
    char *text = make_text(3 * part, 31);
    unsigned char *gz = malloc(4 * part + 65536);
    size_t x = RAW - 5 - 18 - 5 * (RAW / 65535 + 1), k1 = 0;
    for (int tries = 0; tries < 200; tries++) {
        k1 = gz_member(gz, text, x, 0, false);
        if (k1 == RAW - 5)
            break;
        x += k1 < RAW - 5 ? 1 : (size_t)-1;
    }
    REQUIRE(k1 == RAW - 5);
    size_t k2 = gz_member(gz + k1, text + x, part, 6, true);
    size_t k3 = gz_member(gz + k1 + k2, text + x + part, part, 6, false);
    const char *p = tpath("inf_split_header.gz");
    put_file(p, gz, k1 + k2 + k3);
    size_t want = x + 2 * part;
    char *out, msg[512], used[16];
    size_t n;
    rap_status st = read_all(p, RAP_INFLATE_ISAL, 1 << 20, &out, &n, msg, sizeof msg, NULL, 0);
    free(out);
    if (st == RAP_OK)
        SKIP("this ISA-L reads a split header with a header CRC: no member it rejects to "
             "test the fall-back with");
    CHECK_MSG(strstr(msg, "corrupt gzip data (member 2)"), "ISA-L alone: %s", msg);
    /* auto: zlib reads member 2 again, ISA-L member 3; every byte once */
    for (size_t step = 1 << 20; step >= 1000; step /= 7) {
        CHECK_OK(read_all(p, RAP_INFLATE_AUTO, step, &out, &n, msg, sizeof msg, used,
                          sizeof used));
        CHECK_MSG(n == want && memcmp(out, text, want) == 0, "auto, reads of %zu: %zu bytes of %zu",
                  step, n, want);
        CHECK_MSG(!strcmp(used, "isa-l"), "auto ended with %s", used);
        free(out);
    }
    /* and through the reader: the same rows as a zlib-only read */
    free(gz);
    free(text);
}
