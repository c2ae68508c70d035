/* test_main.c -- runs the registered tests: rap_tests [name-substring]. */
#include "test.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

#define MAX_TESTS 1024

static struct {
    const char *name;
    rap_test_fn fn;
} g_tests[MAX_TESTS];
static int g_n;
static char g_tmp[256];

void rap_test_register(const char *name, rap_test_fn fn)
{
    if (g_n < MAX_TESTS) {
        g_tests[g_n].name = name;
        g_tests[g_n].fn = fn;
        g_n++;
    }
}

void rap_test_fail(rap_test_ctx *t, const char *file, int line, const char *fmt, ...)
{
    t->failures++;
    if (t->failures == 1)
        fprintf(stderr, "\n");
    if (t->failures > 10)
        return; /* enough to see the pattern */
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

const char *rap_test_tmpdir(void)
{
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "/tmp/rap_tests_XXXXXX");
        if (!mkdtemp(g_tmp)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return g_tmp;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 ? -1 : 0;
}

/* The temporary folder removed in this process (no shell): a system() from
 * an exit handler aborted in glibc's malloc under compute-sanitizer's
 * child-process tracking (bench/RESULTS.md, 2026-12-02). */
static void cleanup_tmp(void)
{
    if (g_tmp[0] && !getenv("RAP_KEEP_TMP") &&
        nftw(g_tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
}

static int cmp_tests(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    /* registration order depends on link order; sort by name for stable runs */
    qsort(g_tests, (size_t)g_n, sizeof g_tests[0], cmp_tests);
    atexit(cleanup_tmp);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n; i++) {
        if (filter && !strstr(g_tests[i].name, filter))
            continue;
        rap_test_ctx t = {0};
        fprintf(stderr, "%-48s ", g_tests[i].name);
        fflush(stderr);
        double t0 = rap_now();
        g_tests[i].fn(&t);
        double dt = rap_now() - t0;
        if (t.failures) {
            fprintf(stderr, "FAIL (%d)\n", t.failures);
            failed++;
        } else if (t.skipped) {
            fprintf(stderr, "SKIP: %s\n", t.skip_reason);
            skipped++;
        } else {
            fprintf(stderr, "ok %.2fs\n", dt);
            passed++;
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
