/* fs.c -- file helpers shared by every writer of rap. */
#include "core/core.h"

#include <stdio.h>
#include <sys/stat.h>

bool rap_write_via_tmp(const char *path, char *tmp, size_t n)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* /dev/null, a fifo, a terminal: renaming over it would replace it */
        snprintf(tmp, n, "%s", path);
        return false;
    }
    snprintf(tmp, n, "%s.tmp", path);
    return true;
}
