/* parse_model.c -- the GPU parse's latency model: fit, file, prediction,
 * and its placement into a schedule's windows (parse_model.h,
 * docs/PLANNER.md "The parse in the windows"). */
#include "plan/parse_model.h"

#include "core/checked.h"
#include "core/file.h"
#include "core/out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ fit */

/* Least squares of ms on the columns `use` of (1, lines / 1e4, bytes / 1e6)
 * (scaled: the normal matrix stays well conditioned), unscaled into c[3]
 * (0 for a column not used). False when the normal matrix is singular. */
static bool solve_cols(const rap_parse_point *p, int n, const bool use[3], double c[3])
{
    static const double scale[3] = {1, 1e4, 1e6};
    int col[3], k = 0;
    for (int j = 0; j < 3; j++)
        if (use[j])
            col[k++] = j;
    double a[3][4] = {{0}};
    for (int i = 0; i < n; i++) {
        double x[3] = {1, (double)p[i].lines / scale[1], (double)p[i].bytes / scale[2]};
        for (int r = 0; r < k; r++) {
            for (int q = 0; q < k; q++)
                a[r][q] += x[col[r]] * x[col[q]];
            a[r][k] += x[col[r]] * p[i].ms;
        }
    }
    double big = 0;
    for (int r = 0; r < k; r++)
        big = fmax(big, fabs(a[r][r]));
    for (int r = 0; r < k; r++) { /* Gauss-Jordan, partial pivoting */
        int piv = r;
        for (int q = r + 1; q < k; q++)
            if (fabs(a[q][r]) > fabs(a[piv][r]))
                piv = q;
        if (!(fabs(a[piv][r]) > 1e-12 * big))
            return false;
        for (int q = 0; q <= k; q++) {
            double t = a[r][q];
            a[r][q] = a[piv][q];
            a[piv][q] = t;
        }
        for (int q = 0; q < k; q++) {
            if (q == r)
                continue;
            double f = a[q][r] / a[r][r];
            for (int z = r; z <= k; z++)
                a[q][z] -= f * a[r][z];
        }
    }
    c[0] = c[1] = c[2] = 0;
    for (int r = 0; r < k; r++)
        c[col[r]] = a[r][k] / a[r][r] / scale[col[r]];
    return true;
}

/* Relative RMS error of c over the points. */
static double rel_rms(const rap_parse_point *p, int n, const double c[3])
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        double e = (c[0] + c[1] * (double)p[i].lines + c[2] * (double)p[i].bytes - p[i].ms) /
                   p[i].ms;
        s += e * e;
    }
    return sqrt(s / (double)n);
}

rap_status rap_parse_model_fit(const rap_parse_point *pts, int n, const char *gpu,
                               double bytes_per_line, rap_parse_model *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->gpu, sizeof m->gpu, "%s", gpu && gpu[0] ? gpu : "unknown");
    snprintf(m->source, sizeof m->source, "<fit>");
    for (int i = 0; i < n && m->n_points < RAP_PARSE_MODEL_POINTS; i++)
        if (pts[i].lines > 0 && pts[i].bytes >= 0 && pts[i].ms > 0 && isfinite(pts[i].ms))
            m->pt[m->n_points++] = pts[i];
    if (m->n_points < 2 || !(bytes_per_line > 0) || !isfinite(bytes_per_line))
        return rap_fail(RAP_ERR_ARG, "parse model: %d usable points (2 at least: lines and ms "
                        "> 0) and %g bytes a line (> 0)", m->n_points, bytes_per_line);
    /* the whole fit; else the better of the fits with one slope; else a
     * constant */
    static const bool sets[4][3] = {{1, 1, 1}, {1, 1, 0}, {1, 0, 1}, {1, 0, 0}};
    double best[3] = {0}, best_err = INFINITY;
    for (int s = 0; s < 4 && !isfinite(best_err); s++) {
        int last = s == 1 ? 2 : s; /* the one-slope fits compete */
        for (int q = s; q <= last; q++) {
            double c[3];
            if (!solve_cols(m->pt, m->n_points, sets[q], c) || c[1] < 0 || c[2] < 0)
                continue;
            double e = rel_rms(m->pt, m->n_points, c);
            if (e < best_err) {
                memcpy(best, c, sizeof best);
                best_err = e;
            }
        }
        if (last == 2)
            s = 2;
    }
    if (!isfinite(best_err))
        return rap_fail(RAP_ERR_ARG, "parse model: the least-squares fit of %d points is singular",
                        m->n_points);
    m->ms0 = best[0];
    m->ms_per_line = best[1];
    m->ms_per_byte = best[2];
    m->bytes_per_line = bytes_per_line;
    m->rel_rms = best_err;
    return RAP_OK;
}

double rap_parse_model_ms(const rap_parse_model *m, int64_t lines, int64_t bytes)
{
    double ms = m->ms0 + m->ms_per_line * (double)lines + m->ms_per_byte * (double)bytes;
    return ms > 0 ? ms : 0;
}

double rap_parse_model_lines_ms(const rap_parse_model *m, int64_t lines)
{
    return rap_parse_model_ms(m, lines, (int64_t)llround(m->bytes_per_line * (double)lines));
}

/* ------------------------------------------------------------ file */

rap_status rap_parse_model_write(const rap_parse_model *m, FILE *f)
{
    fprintf(f, "rap-parse-model %d\n", RAP_PARSE_MODEL_VERSION);
    fprintf(f, "# ms of one launch of the parse kernels = ms0 + ms_per_line * lines + "
               "ms_per_byte * bytes (docs/PLANNER.md)\n");
    fprintf(f, "gpu %s\n", m->gpu);
    fprintf(f, "fit ms0=%.17g ms_per_line=%.17g ms_per_byte=%.17g bytes_per_line=%.17g "
               "rel_rms=%.17g\n", m->ms0, m->ms_per_line, m->ms_per_byte, m->bytes_per_line,
            m->rel_rms);
    for (int i = 0; i < m->n_points; i++)
        fprintf(f, "point lines=%lld bytes=%lld ms=%.17g\n", (long long)m->pt[i].lines,
                (long long)m->pt[i].bytes, m->pt[i].ms);
    return ferror(f) ? rap_fail(RAP_ERR_IO, "parse model: write failed") : RAP_OK;
}

rap_status rap_parse_model_save(const rap_parse_model *m, const char *path)
{
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    return rap_out_close(o, rap_parse_model_write(m, rap_out_file(o)));
}

/* The value of key `key=` as the next word of *p (p moves past it). */
static bool take_num(char **p, const char *key, double *v)
{
    size_t kl = strlen(key);
    while (**p == ' ' || **p == '\t')
        (*p)++;
    if (strncmp(*p, key, kl) || (*p)[kl] != '=')
        return false;
    char *end;
    *v = strtod(*p + kl + 1, &end);
    if (end == *p + kl + 1 || (*end && *end != ' ' && *end != '\t') || !isfinite(*v))
        return false;
    *p = end;
    return true;
}

/* The end of a line: only blanks left. */
static bool at_end(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return *p == 0;
}

/* One line (p, without its '\n') of a model file into m; *state: 0
 * before the magic line, 1 after. */
static rap_status load_line(rap_parse_model *m, char *p, int lineno, int *state, bool *gpu,
                            bool *fit)
{
    const char *path = m->source;
    if (*state == 0) {
        int ver;
        char *end;
        if (strncmp(p, "rap-parse-model ", 16) || !rap_parse_int_ok(p + 16, 0, 1 << 30, &ver,
                                                                     (const char **)&end) ||
            !at_end(end))
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-parse-model %d\" (the parse "
                            "model `rap profile kernels` writes)", path, lineno,
                            RAP_PARSE_MODEL_VERSION);
        if (ver != RAP_PARSE_MODEL_VERSION)
            return rap_fail(RAP_ERR_DATA, "%s:%d: version %d is not supported (expected %d)",
                            path, lineno, ver, RAP_PARSE_MODEL_VERSION);
        *state = 1;
        return RAP_OK;
    }
    if (!strncmp(p, "gpu ", 4)) {
        const char *g = p + 4;
        while (*g == ' ' || *g == '\t')
            g++;
        if (*gpu || !*g || strlen(g) >= sizeof m->gpu)
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected one \"gpu NAME\" line (a name of 1 to "
                            "%d bytes)", path, lineno, (int)sizeof m->gpu - 1);
        snprintf(m->gpu, sizeof m->gpu, "%s", g);
        *gpu = true;
        return RAP_OK;
    }
    if (!strncmp(p, "fit ", 4)) {
        char *q = p + 4;
        double v[5];
        static const char *const keys[5] = {"ms0", "ms_per_line", "ms_per_byte",
                                            "bytes_per_line", "rel_rms"};
        bool ok = !*fit;
        for (int k = 0; k < 5 && ok; k++)
            ok = take_num(&q, keys[k], &v[k]);
        if (!ok || !at_end(q) || fabs(v[0]) > 1e6 || v[1] < 0 || v[1] > 1e6 || v[2] < 0 ||
            v[2] > 1e6 || !(v[3] > 0) || v[3] > (double)(1 << 30) || v[4] < 0)
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected one \"fit ms0=X ms_per_line=X "
                            "ms_per_byte=X bytes_per_line=X rel_rms=X\" line (finite; slopes "
                            ">= 0, bytes_per_line > 0)", path, lineno);
        m->ms0 = v[0];
        m->ms_per_line = v[1];
        m->ms_per_byte = v[2];
        m->bytes_per_line = v[3];
        m->rel_rms = v[4];
        *fit = true;
        return RAP_OK;
    }
    if (!strncmp(p, "point ", 6)) {
        char *q = p + 6;
        double l, b, ms;
        if (m->n_points >= RAP_PARSE_MODEL_POINTS)
            return rap_fail(RAP_ERR_DATA, "%s:%d: more than %d points", path, lineno,
                            RAP_PARSE_MODEL_POINTS);
        if (!take_num(&q, "lines", &l) || !take_num(&q, "bytes", &b) || !take_num(&q, "ms", &ms) ||
            !at_end(q) || !(l >= 1 && l <= 1e12 && l == floor(l)) ||
            !(b >= 0 && b <= 1e15 && b == floor(b)) || !(ms > 0))
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"point lines=N bytes=N ms=X\" "
                            "(whole counts, ms > 0)", path, lineno);
        m->pt[m->n_points++] = (rap_parse_point){(int64_t)l, (int64_t)b, ms};
        return RAP_OK;
    }
    return rap_fail(RAP_ERR_DATA, "%s:%d: unknown line (expected gpu, fit or point)", path,
                    lineno);
}

rap_status rap_parse_model_load(const char *path, rap_parse_model *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->source, sizeof m->source, "%s", path);
    char *text;
    size_t n;
    RAP_TRY(rap_file_read(path, 1 << 20, "parse model", &text, &n));
    if (strlen(text) != n) {
        rap_free(text);
        return rap_fail(RAP_ERR_DATA, "%s: holds a NUL byte: not a parse model", path);
    }
    int lineno = 0, state = 0;
    bool gpu = false, fit = false;
    rap_status st = RAP_OK;
    for (char *p = text, *nl; st == RAP_OK && p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl)
            *nl = 0;
        lineno++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == '\r' || p[l - 1] == ' ' || p[l - 1] == '\t'))
            p[--l] = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p && *p != '#')
            st = load_line(m, p, lineno, &state, &gpu, &fit);
    }
    rap_free(text);
    if (st == RAP_OK && (!state || !gpu || !fit))
        st = rap_fail(RAP_ERR_DATA, "%s: expected %s", path,
                      !state ? "\"rap-parse-model 1\" (the file is empty)"
                      : !gpu ? "a \"gpu NAME\" line" : "a \"fit ...\" line");
    return st;
}

/* ------------------------------------------------------------ placement */

/* The most lines, in whole tiles, whose parse fits `room` ms (at most
 * `want`, a multiple of the tile). */
static int64_t lines_fitting(const rap_parse_model *m, double room, int64_t want)
{
    if (rap_parse_model_lines_ms(m, want) <= room)
        return want;
    int64_t lo = 0, hi = want / RAP_PARSE_PLAN_TILE; /* tiles: lo fits, hi does not */
    if (rap_parse_model_lines_ms(m, RAP_PARSE_PLAN_TILE) > room)
        return 0;
    lo = 1;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rap_parse_model_lines_ms(m, mid * RAP_PARSE_PLAN_TILE) <= room)
            lo = mid;
        else
            hi = mid;
    }
    return lo * RAP_PARSE_PLAN_TILE;
}

rap_status rap_parse_place(const rap_parse_model *m, const rap_search_result *sr, int64_t batch,
                           double reject_share, rap_schedule *s, rap_parse_placement *out)
{
    memset(out, 0, sizeof *out);
    if (batch < 1 || !(reject_share >= 0) || reject_share > 1)
        return rap_fail(RAP_ERR_ARG, "parse placement: a batch of %lld rows, reject share %g "
                        "(expected >= 1 and [0, 1])", (long long)batch, reject_share);
    const int64_t T = RAP_PARSE_PLAN_TILE;
    int64_t want = (int64_t)ceil((double)batch * (1 + reject_share) - 1e-9);
    want = (want + T - 1) / T * T;
    out->lines_total = want;
    double room[RAP_WIN_COUNT];
    int most = 0; /* the window with the most room before the parse */
    for (int w = 0; w < RAP_WIN_EXPOSED; w++) {
        room[w] = sr->capacity_ms[w] - sr->load_ms[w];
        out->room_ms[w] = room[w];
        if (room[w] > room[most])
            most = w;
    }
    bool used[RAP_WIN_COUNT] = {0};
    int64_t left = want;
    while (left > 0) {
        int w = -1;
        for (int v = 0; v < RAP_WIN_EXPOSED; v++)
            if (!used[v] && room[v] > 0 && (w < 0 || room[v] > room[w]))
                w = v;
        if (w < 0)
            break;
        used[w] = true;
        int64_t n = lines_fitting(m, room[w], left);
        if (n == 0)
            break; /* not a tile fits the most room left: none fits elsewhere */
        out->lines[w] = n;
        room[w] -= rap_parse_model_lines_ms(m, n);
        left -= n;
    }
    if (left > 0) { /* the rest beside the window that had the most room */
        out->lines[most] += left;
        out->lines_over = left;
    }
    for (int w = 0; w < RAP_WIN_EXPOSED; w++) {
        if (!out->lines[w])
            continue;
        out->ms[w] = rap_parse_model_lines_ms(m, out->lines[w]);
        RAP_TRY(rap_schedule_set_parse(s, (rap_window)w, out->lines[w], out->ms[w]));
    }
    return RAP_OK;
}
