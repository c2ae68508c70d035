/* train_series.c -- periodic checkpoints, --keep, --resume latest and the
 * data position in the metadata (train_series.h). */
#include "run/train_series.h"

#include "core/core.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SERIES 100000 /* files of one series looked at */

rap_status rap_series_parse_every(const char *text, int64_t *steps, double *seconds)
{
    *steps = 0;
    *seconds = 0;
    if (!text || !text[0])
        return RAP_OK;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    bool digits = true;
    for (const char *p = text; p < end; p++)
        digits = digits && isdigit((unsigned char)*p);
    double unit = 0;
    if (end != text && !*end && digits && errno == 0 && v <= 1e15)
        unit = -1; /* steps */
    else if (end != text && end[0] && !end[1] && errno == 0)
        unit = end[0] == 's' ? 1 : end[0] == 'm' ? 60 : end[0] == 'h' ? 3600 : 0;
    if (unit == 0 || !(v >= 0) || v > 1e9)
        return rap_fail(RAP_ERR_ARG, "--save-every: expected steps (a whole number) or a "
                        "duration with its unit (90s, 10m, 1.5h), got \"%s\"", text);
    if (unit < 0)
        *steps = (int64_t)v;
    else
        *seconds = v * unit;
    return RAP_OK;
}

void rap_series_init(rap_series *s, const char *save, int64_t every_steps, double every_s,
                     int64_t keep, double now)
{
    memset(s, 0, sizeof *s);
    s->save = save && save[0] ? save : NULL;
    s->every_steps = every_steps;
    s->every_s = every_s;
    s->keep = keep;
    s->last_t = now;
}

bool rap_series_due(const rap_series *s, int64_t step, double now)
{
    if (!s->save)
        return false;
    if (s->every_steps > 0 && step % s->every_steps == 0)
        return true;
    return s->every_s > 0 && now - s->last_t >= s->every_s;
}

/* Where the step goes in save's base name: the last '.' of the base name
 * (not a leading one), else its end. */
static size_t ext_at(const char *save)
{
    const char *base = strrchr(save, '/');
    base = base ? base + 1 : save;
    const char *dot = strrchr(base, '.');
    return dot && dot > base ? (size_t)(dot - save) : strlen(save);
}

void rap_series_name(const char *save, int64_t step, char *out, size_t n)
{
    size_t at = ext_at(save);
    snprintf(out, n, "%.*s-step%010lld%s", (int)at, save, (long long)step, save + at);
}

/* The series of save as found in its directory. */
typedef struct {
    char dir[4096];
    char prefix[1024], suffix[1024]; /* of a base name: prefix-stepNNNN suffix */
    int64_t *step;
    int64_t n, cap;
} series_list;

/* Splits save into its directory and the base name's parts. */
static void series_parts(const char *save, series_list *l)
{
    memset(l, 0, sizeof *l);
    const char *slash = strrchr(save, '/');
    if (slash)
        snprintf(l->dir, sizeof l->dir, "%.*s", (int)(slash - save), save);
    else
        snprintf(l->dir, sizeof l->dir, ".");
    if (slash && slash == save)
        snprintf(l->dir, sizeof l->dir, "/");
    const char *base = slash ? slash + 1 : save;
    size_t at = ext_at(save) - (size_t)(base - save);
    snprintf(l->prefix, sizeof l->prefix, "%.*s-step", (int)at, base);
    snprintf(l->suffix, sizeof l->suffix, "%s", base + at);
}

/* The step of a base name of the series, or -1. */
static int64_t series_step(const series_list *l, const char *name)
{
    size_t np = strlen(l->prefix), ns = strlen(l->suffix), nn = strlen(name);
    if (nn <= np + ns || strncmp(name, l->prefix, np) || strcmp(name + nn - ns, l->suffix))
        return -1;
    int64_t v = 0;
    for (size_t i = np; i < nn - ns; i++) {
        if (!isdigit((unsigned char)name[i]) || v > INT64_MAX / 10 - 10)
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

/* qsort's order of int64_t, ascending. */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Lists the series' steps, ascending. */
static rap_status series_list_steps(const char *save, series_list *l)
{
    series_parts(save, l);
    DIR *d = opendir(l->dir);
    if (!d)
        return rap_fail(RAP_ERR_IO, "%s: cannot list the checkpoints of %s (%s)", l->dir, save,
                        strerror(errno));
    rap_status st = RAP_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && l->n < MAX_SERIES) {
        int64_t s = series_step(l, e->d_name);
        if (s < 0)
            continue;
        if (l->n == l->cap) {
            int64_t c = l->cap ? 2 * l->cap : 16;
            int64_t *g = rap_realloc(l->step, (size_t)c * sizeof *g, "checkpoint list");
            if (!g) {
                st = RAP_ERR_NOMEM;
                break;
            }
            l->step = g;
            l->cap = c;
        }
        l->step[l->n++] = s;
    }
    closedir(d);
    if (st == RAP_OK)
        qsort(l->step, (size_t)l->n, sizeof *l->step, cmp_i64);
    return st;
}

/* Removes path and its shard files path.rank<r>. */
static rap_status remove_ckpt(const char *dir, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t nb = strlen(base);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            const char *r = e->d_name + nb;
            if (strncmp(e->d_name, base, nb) || strncmp(r, ".rank", 5) || !r[5])
                continue;
            bool digits = true;
            for (const char *p = r + 5; *p; p++)
                digits = digits && isdigit((unsigned char)*p);
            char sp[8192];
            snprintf(sp, sizeof sp, "%s/%s", dir, e->d_name);
            if (digits && unlink(sp) != 0 && errno != ENOENT) {
                closedir(d);
                return rap_fail(RAP_ERR_IO, "%s: cannot remove (%s)", sp, strerror(errno));
            }
        }
        closedir(d);
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return rap_fail(RAP_ERR_IO, "%s: cannot remove (%s)", path, strerror(errno));
    return RAP_OK;
}

rap_status rap_series_prune(const rap_series *s)
{
    if (!s->save || s->keep <= 0)
        return RAP_OK;
    series_list l;
    rap_status st = series_list_steps(s->save, &l);
    for (int64_t i = 0; st == RAP_OK && i + s->keep < l.n; i++) {
        char path[4096];
        rap_series_name(s->save, l.step[i], path, sizeof path);
        st = remove_ckpt(l.dir, path);
    }
    rap_free(l.step);
    return st;
}

/* The step recorded in checkpoint path, or -1 when it does not open as
 * one (said aloud). */
static int64_t ckpt_step(const char *path, bool quiet_missing)
{
    rap_ckpt *ck;
    if (rap_ckpt_open(path, &ck) != RAP_OK) {
        if (!quiet_missing)
            rap_warn("--resume latest: %s passed over: %s", path, rap_last_error());
        return -1;
    }
    const char *v = rap_meta_get(&ck->meta, "step");
    char *end = NULL;
    long long s = v ? strtoll(v, &end, 10) : -1;
    bool bad = !v || !v[0] || *end || s < 0; /* before the close frees v */
    rap_ckpt_close(ck);
    if (bad) {
        rap_warn("--resume latest: %s passed over: no step in its metadata", path);
        return -1;
    }
    return s;
}

rap_status rap_series_latest(const char *save, char *out, size_t n, bool *found)
{
    *found = false;
    out[0] = 0;
    if (!save || !save[0])
        return rap_fail(RAP_ERR_ARG, "--resume latest: give --save PATH, the name of the "
                                     "checkpoints to look for");
    series_list l;
    RAP_TRY(series_list_steps(save, &l));
    int64_t best = -1;
    for (int64_t i = l.n - 1; i >= 0 && best < 0; i--) {
        char path[4096];
        rap_series_name(save, l.step[i], path, sizeof path);
        int64_t s = ckpt_step(path, false);
        if (s >= 0) {
            best = s;
            snprintf(out, n, "%s", path);
        }
    }
    rap_free(l.step);
    if (access(save, F_OK) == 0) {
        int64_t s = ckpt_step(save, false);
        if (s > best) {
            best = s;
            snprintf(out, n, "%s", save);
        }
    }
    *found = best >= 0;
    return RAP_OK;
}

rap_status rap_series_resume_path(const char *resume, const char *save, bool quiet, char *buf,
                                  size_t n, const char **out)
{
    *out = resume && resume[0] ? resume : NULL;
    if (!*out || strcmp(resume, "latest") != 0)
        return RAP_OK;
    bool found;
    RAP_TRY(rap_series_latest(save, buf, n, &found));
    if (!quiet && found)
        rap_info("--resume latest: %s", buf);
    else if (!quiet)
        rap_info("--resume latest: no checkpoint of %s yet: training starts from the initial "
                 "weights", save);
    *out = found ? buf : NULL;
    return RAP_OK;
}

/* ------------------------------------------------------------ metadata */

rap_status rap_series_meta_write(rap_meta *m, const rap_data_position *p)
{
    if (!p || !p->valid)
        return RAP_OK;
    RAP_TRY(rap_meta_set(m, "data_file", "%s", p->file));
    RAP_TRY(rap_meta_set(m, "data_dev", "%" PRIu64, p->dev));
    RAP_TRY(rap_meta_set(m, "data_inode", "%" PRIu64, p->ino));
    RAP_TRY(rap_meta_set(m, "data_offset", "%lld", (long long)p->offset));
    return rap_meta_set(m, "data_line", "%lld", (long long)p->line);
}

/* A key's value as a number >= 0 (u64 range). */
static rap_status meta_u64(const rap_ckpt *ck, const char *key, uint64_t *v)
{
    const char *s = rap_meta_get(&ck->meta, key);
    char *end = NULL;
    errno = 0;
    unsigned long long x = s ? strtoull(s, &end, 10) : 0;
    if (!s || !s[0] || *end || errno || s[0] == '-')
        return rap_fail(RAP_ERR_DATA, "checkpoint %s: data position key %s: expected a "
                        "number >= 0, got %s", ck->path, key, s ? s : "nothing");
    *v = x;
    return RAP_OK;
}

rap_status rap_series_meta_read(const rap_ckpt *ck, int64_t rows_in_epoch, rap_data_position *p,
                                bool *has)
{
    memset(p, 0, sizeof *p);
    *has = false;
    const char *file = rap_meta_get(&ck->meta, "data_file");
    if (!file)
        return RAP_OK;
    if (strlen(file) >= sizeof p->file || !file[0])
        return rap_fail(RAP_ERR_DATA, "checkpoint %s: data_file empty or longer than %d bytes",
                        ck->path, RAP_POSITION_PATH - 1);
    uint64_t off, line;
    RAP_TRY(meta_u64(ck, "data_dev", &p->dev));
    RAP_TRY(meta_u64(ck, "data_inode", &p->ino));
    RAP_TRY(meta_u64(ck, "data_offset", &off));
    RAP_TRY(meta_u64(ck, "data_line", &line));
    if (off > (uint64_t)INT64_MAX || line > (uint64_t)INT64_MAX)
        return rap_fail(RAP_ERR_DATA, "checkpoint %s: data position beyond 2^63", ck->path);
    snprintf(p->file, sizeof p->file, "%s", file);
    p->offset = (int64_t)off;
    p->line = (int64_t)line;
    p->rows = rows_in_epoch;
    p->valid = true;
    *has = true;
    return RAP_OK;
}
