/*
 * predictor_csv.c -- the measurements CSV the predictor is trained on
 * (predictor_internal.h; docs/PLANNER.md "Measurements CSV"): a header
 * naming the columns, then one measured kernel a line. Every value is
 * checked before it is converted (a variant past int, a NaN, a negative
 * size are refused with the line).
 */
#include "plan/predictor_internal.h"

#include "core/checked.h"
#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_cols[] = {"gpu", "op", "variant", "descs", "rows", "avg_width",
                                     "total_ids", "bytes", "batch_rows", "ms"};
#define N_COLS 10
/* Largest feature value (and ms) accepted: far beyond any kernel, well
 * inside a float (the models' features are floats). */
#define MAX_VALUE 1e18

/* Splits line at commas in place; returns the number of fields (<= max). */
static int split_csv(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = 0;
        p = c + 1;
    }
    for (int i = 0; i < n; i++)
        rap_pred_trim(f[i]);
    return n;
}

/* The header line's fields f (nf) into idx: the field of each column. */
static rap_status read_header(const char *path, int lineno, char **f, int nf, int idx[N_COLS])
{
    for (int c = 0; c < N_COLS; c++) {
        idx[c] = -1;
        for (int i = 0; i < nf; i++)
            if (!strcmp(f[i], g_cols[c]))
                idx[c] = i;
        if (idx[c] < 0)
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected a header naming column \"%s\" "
                            "(gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms)",
                            path, lineno, g_cols[c]);
    }
    return RAP_OK;
}

/* One measurement line's fields f (nf) into r; gpu is the file's GPU
 * (set by its first row). */
static rap_status read_row(const char *path, int lineno, char **f, int nf, const int idx[N_COLS],
                           char *gpu, rap_pred_row *r)
{
    memset(r, 0, sizeof *r);
    double v[N_COLS] = {0};
    for (int c = 0; c < N_COLS; c++) {
        if (idx[c] >= nf)
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected %d fields, got %d", path, lineno,
                            idx[c] + 1, nf);
        if (c <= 1)
            continue;
        char *end;
        errno = 0;
        v[c] = strtod(f[idx[c]], &end);
        if (end == f[idx[c]] || *end || !isfinite(v[c]) || v[c] < 0 || v[c] > MAX_VALUE)
            return rap_fail(RAP_ERR_DATA, "%s:%d: column %s: expected a number in [0, %g], got "
                            "\"%.40s\"", path, lineno, g_cols[c], MAX_VALUE, f[idx[c]]);
    }
    const char *g = f[idx[0]];
    if (!g[0])
        return rap_fail(RAP_ERR_DATA, "%s:%d: no GPU name", path, lineno);
    if (!gpu[0])
        snprintf(gpu, RAP_GPU_NAME, "%s", g);
    else if (strcmp(gpu, g))
        return rap_fail(RAP_ERR_DATA, "%s:%d: GPU \"%.60s\" differs from the file's first GPU "
                        "\"%s\" (one predictor per GPU: split the file)", path, lineno, g, gpu);
    int op = rap_pred_op_parse(f[idx[1]]);
    if (op < 0)
        return rap_fail(RAP_ERR_DATA, "%s:%d: unknown op \"%.40s\"", path, lineno, f[idx[1]]);
    if (!rap_float_to_int_ok(v[2], 0, RAP_PRED_MAX_VARIANT, &r->f.variant))
        return rap_fail(RAP_ERR_DATA, "%s:%d: column variant: expected an integer in [0, %d], "
                        "got \"%.40s\"", path, lineno, RAP_PRED_MAX_VARIANT, f[idx[2]]);
    if (v[9] <= 0 || v[3] < 1 || v[4] < 1)
        return rap_fail(RAP_ERR_DATA, "%s:%d: expected ms > 0, descs >= 1, rows >= 1", path,
                        lineno);
    r->f.op = (rap_op_type)op;
    r->f.computed = r->f.variant >= 9;
    r->f.descs = v[3];
    r->f.rows = v[4];
    r->f.avg_width = v[5];
    r->f.total_ids = v[6];
    r->f.bytes = v[7];
    r->f.batch_rows = v[8];
    r->ms = v[9];
    r->line = lineno;
    return RAP_OK;
}

/* Reads the lines of fp (path) into *rows (*n, *cap). */
static rap_status read_lines(FILE *fp, const char *path, rap_pred_row **rows, int *n, int *cap,
                             char *gpu)
{
    char line[4096];
    int lineno = 0, idx[N_COLS];
    bool header = false;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(fp))
            return rap_fail(RAP_ERR_DATA, "%s:%d: line longer than %d bytes", path, lineno,
                            (int)sizeof line - 2);
        rap_pred_trim(line);
        if (!line[0] || line[0] == '#')
            continue;
        char *f[64];
        int nf = split_csv(line, f, 64);
        if (!header) {
            RAP_TRY(read_header(path, lineno, f, nf, idx));
            header = true;
            continue;
        }
        if (*n == INT32_MAX / 2)
            return rap_fail(RAP_ERR_DATA, "%s:%d: too many rows", path, lineno);
        if (*n == *cap) {
            int c = *cap ? 2 * *cap : 1024;
            rap_pred_row *r = rap_realloc(*rows, sizeof *r * (size_t)c, "predictor csv");
            if (!r)
                return RAP_ERR_NOMEM;
            *rows = r;
            *cap = c;
        }
        RAP_TRY(read_row(path, lineno, f, nf, idx, gpu, &(*rows)[*n]));
        (*n)++;
    }
    if (ferror(fp))
        return rap_fail(RAP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    if (!header)
        return rap_fail(RAP_ERR_DATA, "%s: empty (expected a header line)", path);
    if (*n == 0)
        return rap_fail(RAP_ERR_DATA, "%s: no measurements", path);
    return RAP_OK;
}

rap_status rap_pred_csv_read(const char *path, rap_pred_row **rows_out, int *n_out, char *gpu)
{
    *rows_out = NULL;
    *n_out = 0;
    gpu[0] = 0;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return rap_fail(RAP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    rap_pred_row *rows = NULL;
    int n = 0, cap = 0;
    rap_status st = read_lines(fp, path, &rows, &n, &cap, gpu);
    fclose(fp);
    if (st != RAP_OK) {
        rap_free(rows);
        return st;
    }
    *rows_out = rows;
    *n_out = n;
    return RAP_OK;
}
