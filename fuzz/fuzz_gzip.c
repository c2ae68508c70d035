/* fuzz_gzip.c -- gzip streams and plain text through the byte source
 * (src/data/source.c, inflate.c) and the line cutter (src/data/lines.c):
 * the bytes as a file, read whole with each inflater (ISA-L when built in,
 * zlib), which must give the same bytes when both succeed; then cut into
 * lines, which must be whole and in order. */
#include "fuzz.h"

#include "core/core.h"
#include "data/lines.h"
#include "data/source.h"

#include <string.h>

/* Reads the source at path whole with inflater kind: its bytes' count and
 * checksum. Returns whether it succeeded. */
static bool read_all(const char *path, rap_inflate_kind kind, size_t *n, uint64_t *sum)
{
    rap_source *s = NULL;
    rap_status st = rap_source_open_ex(path, kind, &s);
    if (st == RAP_ERR_ARG)
        return false; /* ISA-L not built in */
    *n = 0;
    *sum = 0;
    char buf[4097];
    for (size_t piece = 1; st == RAP_OK; piece = piece * 2 % 4093 + 1) {
        size_t got = 0;
        st = rap_source_read(s, buf, piece, &got);
        if (st != RAP_OK || got == 0)
            break;
        for (size_t i = 0; i < got; i++)
            *sum = (*sum ^ (unsigned char)buf[i]) * 0x100000001b3ULL;
        *n += got;
    }
    size_t got = 0;
    if (st == RAP_OK)
        st = rap_source_finish(s, buf, &got);
    for (size_t i = 0; st == RAP_OK && i < got; i++)
        *sum = (*sum ^ (unsigned char)buf[i]) * 0x100000001b3ULL;
    *n += got;
    rap_source_close(s);
    return fuzz_refused(st, path, NULL);
}

/* Cuts the file at path into lines: every batch's lines whole. */
static void cut_lines(const char *path)
{
    rap_lines_config lc = {.max_lines = 16, .max_line = 64, .buf_bytes = 4096, .read_bytes = 97};
    rap_lines *c = NULL;
    rap_source *s = NULL;
    if (rap_lines_create(&lc, &c) != RAP_OK || rap_source_open(path, &s) != RAP_OK) {
        rap_lines_free(c);
        rap_source_close(s);
        return;
    }
    rap_lines_start(c, s);
    int64_t next_line = 1;
    for (;;) {
        rap_line_batch b;
        rap_status st = rap_lines_next(c, &b);
        if (!fuzz_refused(st, path, NULL) || b.n == 0)
            break;
        if (b.n > lc.max_lines || b.first_line != next_line || b.start[0] != 0 ||
            b.start[b.n] != b.bytes)
            fuzz_fail("lines: a batch of %lld lines from line %lld, expected line %lld",
                      (long long)b.n, (long long)b.first_line, (long long)next_line);
        for (int64_t i = 0; i < b.n; i++)
            if (b.start[i + 1] <= b.start[i] || b.text[b.start[i + 1] - 1] != '\n')
                fuzz_fail("lines: line %lld of a batch is not whole", (long long)i);
        next_line += b.n;
    }
    rap_lines_free(c);
    rap_source_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("input.gz", data, size);
    size_t n1 = 0, n2 = 0;
    uint64_t s1 = 0, s2 = 0;
    bool ok1 = read_all(path, RAP_INFLATE_AUTO, &n1, &s1);
    bool ok2 = read_all(path, RAP_INFLATE_ZLIB, &n2, &s2);
    if (ok1 && ok2 && (n1 != n2 || s1 != s2))
        fuzz_fail("gzip: the default inflater gives %zu bytes, zlib %zu (or other bytes)", n1, n2);
    cut_lines(path);
    return 0;
}
