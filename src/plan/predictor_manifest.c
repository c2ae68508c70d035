/*
 * predictor_manifest.c -- a predictor bundle's MANIFEST (predictor_internal.h,
 * docs/PLANNER.md "Predictor bundle"): the size and 64-bit checksum of
 * each of its files, checked before anything else reads them, so that a
 * file changed after `rap predictor train` (or cut short, or swapped for
 * another) is refused with its name before XGBoost sees a byte of it.
 *
 *   rap-predictor-manifest 1
 *   file predictor.txt 2024 7d3c0e5a9b1f2468
 *   file xgb_add.0.json 505169 0f1e2d3c4b5a6978
 *   ...
 */
#include "plan/predictor_internal.h"

#include "core/checked.h"
#include "core/core.h"
#include "core/file.h"
#include "core/out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILES 128

/* A plain file name: [A-Za-z0-9._-], not starting with '.', shorter than n. */
static bool plain_name(const char *s, size_t n)
{
    size_t k = 0;
    for (; s[k]; k++) {
        char c = s[k];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok || k + 1 >= n)
            return false;
    }
    return k > 0 && s[0] != '.';
}

void rap_pred_manifest_free(rap_pred_manifest *m)
{
    rap_free(m->f);
    m->f = NULL;
    m->n = 0;
}

/* One "file NAME BYTES SUM" line (its words w, nw of them) into m. */
static rap_status manifest_line(rap_pred_manifest *m, int lineno, char **w, int nw)
{
    int64_t bytes = 0;
    uint64_t sum = 0;
    bool ok = nw == 4 && !strcmp(w[0], "file") && plain_name(w[1], sizeof m->f[0].name) &&
              rap_parse_i64_ok(w[2], 0, (int64_t)RAP_PRED_MAX_MODEL, &bytes, NULL) &&
              strlen(w[3]) == 16;
    for (int k = 0; ok && k < 16; k++) {
        char c = w[3][k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        ok = d >= 0;
        sum = sum << 4 | (uint64_t)(d & 15);
    }
    if (!ok)
        return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"file NAME BYTES CHECKSUM\" (a plain "
                        "file name, at most %zu bytes, 16 lower-case hex digits)", m->path, lineno,
                        RAP_PRED_MAX_MODEL);
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->f[i].name, w[1]))
            return rap_fail(RAP_ERR_DATA, "%s:%d: file %s listed twice", m->path, lineno, w[1]);
    if (m->n == MAX_FILES)
        return rap_fail(RAP_ERR_DATA, "%s:%d: more than %d files", m->path, lineno, MAX_FILES);
    rap_pred_file *f = &m->f[m->n++];
    snprintf(f->name, sizeof f->name, "%s", w[1]);
    f->bytes = (uint64_t)bytes;
    f->sum = sum;
    return RAP_OK;
}

/* The text (NUL-terminated) of a MANIFEST into m. */
static rap_status manifest_parse(rap_pred_manifest *m, char *text)
{
    int lineno = 0;
    bool magic = false;
    char *save = NULL;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        if (!nl)
            return rap_fail(RAP_ERR_DATA, "%s:%d: the file ends inside a line (truncated?)",
                            m->path, lineno + 1);
        *nl = 0;
        char *line = p;
        p = nl + 1;
        lineno++;
        char *w[5];
        int nw = 0;
        for (char *t = strtok_r(line, " \t\r", &save); t && nw < 5; t = strtok_r(NULL, " \t\r", &save))
            w[nw++] = t;
        if (nw == 0 || w[0][0] == '#')
            continue;
        if (!magic) {
            if (nw != 2 || strcmp(w[0], "rap-predictor-manifest") || strcmp(w[1], "1"))
                return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-predictor-manifest 1\"",
                                m->path, lineno);
            magic = true;
            continue;
        }
        RAP_TRY(manifest_line(m, lineno, w, nw));
    }
    if (!magic)
        return rap_fail(RAP_ERR_DATA, "%s: empty (expected \"rap-predictor-manifest 1\")", m->path);
    return RAP_OK;
}

rap_status rap_pred_manifest_read(const char *dir, rap_pred_manifest *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s/MANIFEST", dir);
    char *text;
    size_t n;
    rap_status st = rap_file_read(m->path, RAP_PRED_MAX_TEXT, "predictor manifest", &text, &n);
    if (st == RAP_ERR_IO)
        return rap_fail(RAP_ERR_IO, "predictor %s: no readable MANIFEST (%s): every bundle lists "
                        "its files' sizes and checksums, checked before XGBoost reads them; "
                        "rap predictor train writes it, rap predictor manifest --out %s writes "
                        "one for a bundle you trust", dir, rap_last_error(), dir);
    RAP_TRY(st);
    if (strlen(text) != n)
        st = rap_fail(RAP_ERR_DATA, "%s: holds a NUL byte: not a manifest", m->path);
    m->f = st == RAP_OK ? rap_calloc(sizeof *m->f * MAX_FILES, "predictor manifest") : NULL;
    if (st == RAP_OK && !m->f)
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = manifest_parse(m, text);
    rap_free(text);
    if (st != RAP_OK)
        rap_pred_manifest_free(m);
    return st;
}

rap_status rap_pred_read_checked(const char *dir, const rap_pred_manifest *m, const char *name,
                                 char **buf, size_t *n)
{
    *buf = NULL;
    *n = 0;
    const rap_pred_file *f = NULL;
    for (int i = 0; i < m->n && !f; i++)
        if (!strcmp(m->f[i].name, name))
            f = &m->f[i];
    if (!f)
        return rap_fail(RAP_ERR_DATA, "predictor %s: %s is not in %s: the bundle was changed "
                        "after it was written", dir, name, m->path);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *b;
    size_t len;
    rap_status st = rap_file_read(path, (size_t)f->bytes, "predictor file", &b, &len);
    if (st == RAP_ERR_DATA)
        return rap_fail(RAP_ERR_DATA, "%s: larger than the %llu bytes %s lists: changed after "
                        "the bundle was written", path, (unsigned long long)f->bytes, m->path);
    RAP_TRY(st);
    uint64_t sum = rap_checksum64(b, len);
    if (len != f->bytes || sum != f->sum) {
        rap_free(b);
        return rap_fail(RAP_ERR_DATA, "%s: %zu bytes of checksum %016llx, %s lists %llu bytes of "
                        "checksum %016llx: changed or damaged after the bundle was written",
                        path, len, (unsigned long long)sum, m->path,
                        (unsigned long long)f->bytes, (unsigned long long)f->sum);
    }
    *buf = b;
    *n = len;
    return RAP_OK;
}

/* Adds dir/name's size and checksum to m. */
static rap_status add_file(const char *dir, const char *name, rap_pred_manifest *m)
{
    if (!plain_name(name, sizeof m->f[0].name) || m->n == MAX_FILES)
        return rap_fail(RAP_ERR_DATA, "predictor %s: cannot list file \"%.60s\" (not a plain "
                        "name, or more than %d files)", dir, name, MAX_FILES);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *b;
    size_t len;
    RAP_TRY(rap_file_read(path, RAP_PRED_MAX_MODEL, "predictor file", &b, &len));
    rap_pred_file *f = &m->f[m->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->bytes = len;
    f->sum = rap_checksum64(b, len);
    rap_free(b);
    return RAP_OK;
}

/* The manifest of dir as it is now: predictor.txt and the model file of
 * every "model TYPE" line of it. Nothing is trusted yet: the load that
 * follows checks it all. */
static rap_status manifest_of(const char *dir, rap_pred_manifest *m)
{
    RAP_TRY(add_file(dir, "predictor.txt", m));
    char path[1200], *text;
    size_t n;
    snprintf(path, sizeof path, "%s/predictor.txt", dir);
    RAP_TRY(rap_file_read(path, RAP_PRED_MAX_TEXT, "predictor description", &text, &n));
    rap_status st = RAP_OK;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && st == RAP_OK;
         line = strtok_r(NULL, "\n", &save)) {
        char type[64], name[96];
        if (sscanf(line, "model %63s", type) != 1)
            continue;
        rap_pred_model_name(type, name, sizeof name);
        bool dup = false;
        for (int i = 0; i < m->n; i++)
            dup |= !strcmp(m->f[i].name, name);
        if (!dup)
            st = add_file(dir, name, m);
    }
    rap_free(text);
    return st;
}

/* Writes m as path through core/out.h (a temporary renamed over it; a
 * second writer fails at once). */
static rap_status manifest_save(const rap_pred_manifest *m, const char *path)
{
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    FILE *f = rap_out_file(o);
    fprintf(f, "rap-predictor-manifest 1\n# file NAME BYTES CHECKSUM (rap_checksum64): checked "
               "before any file of the bundle is read (docs/PLANNER.md)\n");
    for (int i = 0; i < m->n; i++)
        fprintf(f, "file %s %llu %016llx\n", m->f[i].name, (unsigned long long)m->f[i].bytes,
                (unsigned long long)m->f[i].sum);
    return rap_out_commit(o);
}

rap_status rap_pred_manifest_write(const char *dir)
{
    rap_pred_manifest m;
    memset(&m, 0, sizeof m);
    snprintf(m.path, sizeof m.path, "%s/MANIFEST", dir);
    m.f = rap_calloc(sizeof *m.f * MAX_FILES, "predictor manifest");
    if (!m.f)
        return RAP_ERR_NOMEM;
    rap_status st = manifest_of(dir, &m);
    rap_predictor *p = NULL;
    if (st == RAP_OK)
        st = rap_pred_load_with(dir, &m, &p);
    rap_predictor_free(p);
    if (st == RAP_OK)
        st = manifest_save(&m, m.path);
    rap_pred_manifest_free(&m);
    return st;
}
