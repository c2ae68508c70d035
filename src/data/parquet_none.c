/* parquet_none.c -- parquet.h's magic test, and its whole interface when
 * rap is built without Apache Arrow (the pyarrow wheel's libarrow and
 * libparquet were not found: docs/BUILD.md): every Parquet file is
 * refused, saying what to install. */
#include "data/parquet.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool rap_pq_is_parquet(const char *path)
{
    struct stat sb; /* a fifo or a device is never read ahead: its bytes are the reader's */
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char m[4];
    bool yes = fread(m, 1, 4, f) == 4 && !memcmp(m, "PAR1", 4);
    fclose(f);
    return yes;
}

#ifndef RAP_HAVE_ARROW
#define RAP_PQ_WHY "rap was built without Apache Arrow's Parquet reader: install it with " \
                   "`pip install pyarrow` (the wheel ships libarrow and libparquet), then " \
                   "rebuild rap (docs/BUILD.md)"

bool rap_pq_built(char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "%s", RAP_PQ_WHY);
    return false;
}

rap_status rap_pq_open(const char *path, rap_pq **out)
{
    *out = NULL;
    return rap_fail(RAP_ERR_ARG, "%s: a Parquet file, but %s", path, RAP_PQ_WHY);
}

void rap_pq_close(rap_pq *p) { (void)p; }
int rap_pq_groups(const rap_pq *p) { (void)p; return 0; }
int64_t rap_pq_rows(const rap_pq *p) { (void)p; return 0; }
int64_t rap_pq_group_rows(const rap_pq *p, int g) { (void)p, (void)g; return 0; }
int rap_pq_find(const rap_pq *p, const char *name) { (void)p, (void)name; return -1; }

rap_pq_type rap_pq_col_type(const rap_pq *p, int c, char *name, size_t n)
{
    (void)p, (void)c;
    if (name && n)
        name[0] = 0;
    return RAP_PQ_OTHER;
}

rap_status rap_pq_read(rap_pq *p, int g, const int *cols, int k, rap_pq_column *out)
{
    (void)p, (void)g, (void)cols;
    memset(out, 0, sizeof *out * (size_t)(k > 0 ? k : 0));
    return rap_fail(RAP_ERR_ARG, "%s", RAP_PQ_WHY);
}

void rap_pq_column_free(rap_pq_column *c, int k) { (void)c, (void)k; }
#endif /* RAP_HAVE_ARROW */
