/* common.c -- helpers of the fuzzing entry points (fuzz.h). */
#include "fuzz.h"

#include "core/core.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    if (g_dir[0])
        nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

void fuzz_init(void)
{
    if (g_dir[0])
        return;
    rap_log_set_level(0);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/rap-fuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_dir))
        fuzz_fail("cannot create %s: %s", g_dir, strerror(errno));
    atexit(cleanup);
}

const char *fuzz_dir(void)
{
    fuzz_init();
    return g_dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[256];
    fuzz_init();
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        fuzz_fail("cannot write %s: %s", path, strerror(errno));
    return path;
}

char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        fuzz_fail("out of memory");
    if (size)
        memcpy(s, data, size);
    s[size] = 0;
    return s;
}

const char *fuzz_repo_file(const char *rel)
{
    static char path[1024];
    const char *root = getenv("RAP_FUZZ_ROOT");
    static const char *const where[] = {".", "..", "../.."};
    for (int i = -1; i < 3; i++) {
        if (i < 0 && !(root && root[0]))
            continue;
        snprintf(path, sizeof path, "%s/%s", i < 0 ? root : where[i], rel);
        if (access(path, R_OK) == 0)
            return path;
    }
    fuzz_fail("%s not found from the working directory (set RAP_FUZZ_ROOT to the repository)",
              rel);
}

bool fuzz_refused(rap_status st, const char *path, const char *name_too)
{
    if (st == RAP_OK)
        return true;
    const char *msg = rap_last_error();
    if (st != RAP_ERR_DATA && st != RAP_ERR_IO && st != RAP_ERR_PLAN && st != RAP_ERR_NOMEM)
        fuzz_fail("%s: refused with status %d, not DATA, IO or PLAN: %s", path, (int)st, msg);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (st != RAP_ERR_NOMEM && !strstr(msg, base) && !(name_too && strstr(msg, name_too)))
        fuzz_fail("%s: the message does not name the file: %s", path, msg);
    return false;
}
