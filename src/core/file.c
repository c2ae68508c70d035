/* file.c -- a file read whole, bounded, and the 64-bit checksum (file.h). */
#include "core/file.h"

#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

rap_status rap_file_read(const char *path, size_t max, const char *what, char **buf, size_t *n)
{
    *buf = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        rap_status st = rap_fail(RAP_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
        if (f)
            fclose(f);
        return st;
    }
    rap_status st = RAP_OK;
    if (!S_ISREG(sb.st_mode))
        st = rap_fail(RAP_ERR_IO, "%s: %s is not a regular file", path, what);
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)max)
        st = rap_fail(RAP_ERR_DATA, "%s: %s of %lld bytes, more than the %zu rap reads", path,
                      what, (long long)sb.st_size, max);
    size_t len = st == RAP_OK ? (size_t)sb.st_size : 0;
    char *b = st == RAP_OK ? rap_malloc(len + 1, what) : NULL;
    if (st == RAP_OK && !b)
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK && fread(b, 1, len, f) != len)
        st = rap_fail(RAP_ERR_IO, "%s: cannot read %s (%s)", path, what,
                      ferror(f) ? strerror(errno) : "shorter than its size: changed while read");
    if (st == RAP_OK && fgetc(f) != EOF)
        st = rap_fail(RAP_ERR_IO, "%s: %s grew while being read", path, what);
    fclose(f);
    if (st != RAP_OK) {
        rap_free(b);
        return st;
    }
    b[len] = 0;
    *buf = b;
    *n = len;
    return RAP_OK;
}

uint64_t rap_checksum64(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x72617063686b3634ULL; /* "rapchk64" */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int k = 0; k < 8; k++)
            w |= (uint64_t)s[i + k] << (8 * k);
        h = rap_mix64(h ^ w);
    }
    uint64_t w = 0;
    for (int k = 0; i + (size_t)k < n; k++)
        w |= (uint64_t)s[i + k] << (8 * k);
    h = rap_mix64(h ^ w);
    return rap_mix64(h ^ (uint64_t)n);
}
