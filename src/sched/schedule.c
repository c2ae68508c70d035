/*
 * schedule.c -- rap-mode schedules: builder, parser, writer,
 * validation and the built-in schedules (schedule.h, docs/SCHEDULE.md).
 */
#include "sched/schedule.h"

#include "core/out.h"
#include "dist/hybrid.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *g_win_names[RAP_WIN_COUNT] = {"emb_forward",  "mlp_forward", "mlp_backward",
                                                 "emb_backward", "grad_comm",   "exposed"};

const char *rap_window_name(rap_window w)
{
    return (int)w >= 0 && w < RAP_WIN_COUNT ? g_win_names[w] : "?";
}

int rap_window_parse(const char *name)
{
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        if (strcmp(name, g_win_names[w]) == 0)
            return w;
    return -1;
}

/* ------------------------------------------------------------ building */

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Copies src into dst as one token: whitespace becomes '_'. */
static void token_copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src && *src ? src : "plan");
    for (char *c = dst; *c; c++)
        if (isspace((unsigned char)*c) || *c == '#')
            *c = '_';
}

static rap_schedule *sched_new(const char *source)
{
    rap_schedule *s = rap_calloc(sizeof *s, "schedule");
    if (!s)
        return NULL;
    snprintf(s->source, sizeof s->source, "%s", source ? source : "<schedule>");
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        s->parse_ms[w] = -1; /* no budget, no prediction */
    return s;
}

rap_status rap_schedule_create(const rap_plan *p, const rap_fusion *f, const char *source,
                               rap_schedule **out)
{
    *out = NULL;
    if (!p || !f)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_create: plan and fusion are required");
    rap_schedule *s = sched_new(source);
    if (!s)
        return RAP_ERR_NOMEM;
    token_copy(s->plan_name, sizeof s->plan_name, base_name(p->source));
    s->plan_hash = rap_plan_hash(p);
    s->n_kernels = f->n;
    s->fusion_hash = rap_fusion_hash(p, f);
    *out = s;
    return RAP_OK;
}

void rap_schedule_free(rap_schedule *s)
{
    if (!s)
        return;
    rap_free(s->slices);
    rap_free(s);
}

static rap_status add_slice(rap_schedule *s, rap_window w, const rap_slice *sl)
{
    if (s->n_slices == s->cap_slices) {
        int cap = s->cap_slices ? 2 * s->cap_slices : 64;
        rap_slice *n = rap_realloc(s->slices, sizeof *n * (size_t)cap, "schedule slices");
        if (!n)
            return RAP_ERR_NOMEM;
        s->slices = n;
        s->cap_slices = cap;
    }
    int at = s->win_first[w + 1];
    memmove(&s->slices[at + 1], &s->slices[at], sizeof *s->slices * (size_t)(s->n_slices - at));
    s->slices[at] = *sl;
    s->n_slices++;
    for (int v = w + 1; v <= RAP_WIN_COUNT; v++)
        s->win_first[v]++;
    return RAP_OK;
}

rap_status rap_schedule_add(rap_schedule *s, rap_window w, int kernel, int d0, int d1, int64_t r0,
                            int64_t r1, double predicted_ms)
{
    if (!s || (int)w < 0 || w >= RAP_WIN_COUNT)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_add: expected a schedule and a window 0..%d",
                        RAP_WIN_COUNT - 1);
    if (kernel < 0 || d0 < 0 || d1 <= d0 || r0 < 0 || r1 <= r0)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_add: expected kernel >= 0, 0 <= d0 < d1, "
                                     "0 <= r0 < r1 (got kernel %d, descs [%d, %d), rows [%lld, %lld))",
                        kernel, d0, d1, (long long)r0, (long long)r1);
    rap_slice sl = {kernel, d0, d1, r0, r1, predicted_ms < 0 ? -1 : predicted_ms, 0, 0, 0};
    return add_slice(s, w, &sl);
}

rap_status rap_schedule_add_slice(rap_schedule *s, rap_window w, const rap_slice *sl)
{
    if (sl->shares < 0 || (sl->shares > 0 && (sl->share < 0 || sl->share >= sl->shares)))
        return rap_fail(RAP_ERR_ARG, "rap_schedule_add_slice: share %d of %d", sl->share,
                        sl->shares);
    RAP_TRY(rap_schedule_add(s, w, sl->kernel, sl->d0, sl->d1, sl->r0, sl->r1, sl->predicted_ms));
    rap_slice *last = &s->slices[s->win_first[w + 1] - 1];
    last->share = sl->share;
    last->shares = sl->shares;
    return RAP_OK;
}

void rap_slice_rows(const rap_slice *sl, int64_t rows, int64_t *r0, int64_t *r1)
{
    int64_t base = 0, n = rows;
    if (sl->shares > 0)
        rap_hybrid_rows(rows, sl->shares, sl->share, &base, &n);
    *r0 = sl->r0 < n ? base + sl->r0 : base + n;
    *r1 = sl->r1 < n ? base + sl->r1 : base + n;
}

rap_status rap_schedule_set_parse(rap_schedule *s, rap_window w, int64_t lines,
                                  double predicted_ms)
{
    if (!s || (int)w < 0 || w >= RAP_WIN_COUNT || lines < 0 || lines > RAP_PARSE_LINES_MAX)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_set_parse: expected a window 0..%d and 0 to "
                        "%lld lines (got window %d, %lld lines)", RAP_WIN_COUNT - 1,
                        (long long)RAP_PARSE_LINES_MAX, (int)w, (long long)lines);
    s->parse_lines[w] = lines;
    s->parse_ms[w] = lines > 0 && predicted_ms >= 0 ? predicted_ms : -1;
    s->parse_line[w] = 0;
    return RAP_OK;
}

bool rap_schedule_has_parse(const rap_schedule *s)
{
    for (int w = 0; s && w < RAP_WIN_COUNT; w++)
        if (s->parse_lines[w] > 0)
            return true;
    return false;
}

const rap_slice *rap_schedule_window(const rap_schedule *s, rap_window w, int *n)
{
    if (!s || (int)w < 0 || w >= RAP_WIN_COUNT) {
        *n = 0;
        return NULL;
    }
    *n = s->win_first[w + 1] - s->win_first[w];
    return s->slices ? s->slices + s->win_first[w] : NULL; /* none yet: NULL, *n 0 */
}

bool rap_schedule_same_slices(const rap_schedule *a, const rap_schedule *b)
{
    if (!a || !b)
        return a == b;
    if (a->plan_hash != b->plan_hash || a->fusion_hash != b->fusion_hash ||
        a->n_kernels != b->n_kernels || a->n_slices != b->n_slices ||
        a->n_received != b->n_received)
        return false;
    for (int w = 0; w <= RAP_WIN_COUNT; w++)
        if (a->win_first[w] != b->win_first[w])
            return false;
    for (int i = 0; i < a->n_slices; i++) {
        const rap_slice *x = &a->slices[i], *y = &b->slices[i];
        if (x->kernel != y->kernel || x->d0 != y->d0 || x->d1 != y->d1 || x->r0 != y->r0 ||
            x->r1 != y->r1 || x->share != y->share || x->shares != y->shares)
            return false;
    }
    return true;
}

/* ------------------------------------------------------------ writer */

rap_status rap_schedule_write(const rap_schedule *s, FILE *f)
{
    fprintf(f, "rap-schedule %d\n", RAP_SCHEDULE_VERSION);
    fprintf(f, "# windows in training order; slices launch in the order listed "
               "(docs/SCHEDULE.md)\n");
    fprintf(f, "plan %s %016llx\n", s->plan_name, (unsigned long long)s->plan_hash);
    fprintf(f, "fusion %d %016llx\n", s->n_kernels, (unsigned long long)s->fusion_hash);
    for (int w = 0; w < RAP_WIN_COUNT; w++) { /* the GPU parse's budgets */
        if (s->parse_lines[w] <= 0)
            continue;
        fprintf(f, "parse %s lines=%lld", g_win_names[w], (long long)s->parse_lines[w]);
        if (s->parse_ms[w] >= 0)
            fprintf(f, " predicted_ms=%.17g", s->parse_ms[w]);
        fputc('\n', f);
    }
    for (int w = 0; w < RAP_WIN_COUNT; w++) {
        int n;
        const rap_slice *sl = rap_schedule_window(s, (rap_window)w, &n);
        if (n == 0)
            continue;
        fprintf(f, "window %s\n", g_win_names[w]);
        for (int i = 0; i < n; i++) {
            fprintf(f, "slice kernel=%d descs=%d:%d rows=%lld:", sl[i].kernel, sl[i].d0, sl[i].d1,
                    (long long)sl[i].r0);
            if (sl[i].r1 == RAP_ROWS_END)
                fprintf(f, "end");
            else
                fprintf(f, "%lld", (long long)sl[i].r1);
            if (sl[i].predicted_ms >= 0)
                fprintf(f, " predicted_ms=%.17g", sl[i].predicted_ms);
            if (sl[i].shares > 0)
                fprintf(f, " share=%d/%d", sl[i].share, sl[i].shares);
            fputc('\n', f);
        }
    }
    if (fflush(f) != 0 || ferror(f))
        return rap_fail(RAP_ERR_IO, "schedule: write failed");
    return RAP_OK;
}

rap_status rap_schedule_save(const rap_schedule *s, const char *path)
{
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    rap_status st = rap_schedule_write(s, rap_out_file(o));
    if (st != RAP_OK)
        rap_fail_context(st, "%s", path);
    return rap_out_close(o, st);
}

/* ------------------------------------------------------------ parser */

#define MAX_TOKENS 16

typedef struct {
    const char *source;
    int line;
} parse_ctx;

static rap_status perr(const parse_ctx *c, const char *fmt, ...) RAP_PRINTF(2, 3);
static rap_status perr(const parse_ctx *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rap_fail(RAP_ERR_PLAN, "%s:%d: %s", c->source, c->line, msg);
}

/* Whole-token integer in [lo, hi]. */
static bool parse_i64(const char *t, int64_t lo, int64_t hi, int64_t *v)
{
    if (!*t || isspace((unsigned char)*t))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(t, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

/* 1..16 hex digits, optional 0x. */
static bool parse_hash(const char *t, uint64_t *v)
{
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
        t += 2;
    size_t n = strlen(t);
    if (n < 1 || n > 16)
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        int c = tolower((unsigned char)t[i]), d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return true;
}

/* "a:b" with b possibly "end" (allow_end). */
static bool parse_range(const char *t, bool allow_end, int64_t hi, int64_t *a, int64_t *b)
{
    const char *colon = strchr(t, ':');
    if (!colon || colon - t > 30)
        return false;
    char left[32];
    memcpy(left, t, (size_t)(colon - t));
    left[colon - t] = 0;
    if (!parse_i64(left, 0, hi, a))
        return false;
    if (allow_end && strcmp(colon + 1, "end") == 0) {
        *b = RAP_ROWS_END;
        return true;
    }
    return parse_i64(colon + 1, 0, hi, b);
}

static rap_status parse_slice(const parse_ctx *c, char **tok, int nt, rap_slice *sl)
{
    bool have_k = false, have_d = false, have_r = false, have_ms = false, have_sh = false;
    sl->predicted_ms = -1;
    sl->line = c->line;
    for (int i = 1; i < nt; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return perr(c, "expected key=value in a slice, got '%s'", tok[i]);
        *eq = 0;
        const char *key = tok[i], *val = eq + 1;
        int64_t a, b;
        if (strcmp(key, "kernel") == 0) {
            if (have_k)
                return perr(c, "kernel= given twice");
            if (!parse_i64(val, 0, 1 << 30, &a))
                return perr(c, "expected kernel=K with K a kernel index >= 0, got '%s'", val);
            sl->kernel = (int)a;
            have_k = true;
        } else if (strcmp(key, "descs") == 0) {
            if (have_d)
                return perr(c, "descs= given twice");
            if (!parse_range(val, false, 1 << 30, &a, &b) || b <= a)
                return perr(c, "expected descs=D0:D1 with 0 <= D0 < D1, got '%s'", val);
            sl->d0 = (int)a;
            sl->d1 = (int)b;
            have_d = true;
        } else if (strcmp(key, "rows") == 0) {
            if (have_r)
                return perr(c, "rows= given twice");
            if (!parse_range(val, true, INT64_MAX - 1, &a, &b) || b <= a)
                return perr(c, "expected rows=R0:R1 with 0 <= R0 < R1 (R1 a number or 'end'), got '%s'",
                            val);
            sl->r0 = a;
            sl->r1 = b;
            have_r = true;
        } else if (strcmp(key, "predicted_ms") == 0) {
            if (have_ms)
                return perr(c, "predicted_ms= given twice");
            char *end;
            errno = 0;
            double x = strtod(val, &end);
            if (!*val || *end || errno || !(x >= 0) || x > 1e9)
                return perr(c, "expected predicted_ms=MS with MS a number >= 0, got '%s'", val);
            sl->predicted_ms = x;
            have_ms = true;
        } else if (strcmp(key, "share") == 0) {
            if (have_sh)
                return perr(c, "share= given twice");
            char *slash = strchr(val, '/');
            int64_t k = -1, n = 0;
            if (slash) {
                *slash = 0;
                bool ok = parse_i64(val, 0, 1 << 20, &k) && parse_i64(slash + 1, 1, 1 << 20, &n);
                *slash = '/';
                if (!ok)
                    k = -1;
            }
            if (k < 0 || k >= n)
                return perr(c, "expected share=K/N with 0 <= K < N (share K of N equal shares of "
                               "the batch), got '%s'", val);
            sl->share = (int)k;
            sl->shares = (int)n;
            have_sh = true;
        } else {
            return perr(c, "unknown slice key '%s' (expected kernel, descs, rows, predicted_ms or "
                           "share)", key);
        }
    }
    if (!have_k || !have_d || !have_r)
        return perr(c, "expected a slice with kernel=, descs= and rows= (missing %s)",
                    !have_k ? "kernel=" : !have_d ? "descs=" : "rows=");
    return RAP_OK;
}

/* `parse WINDOW lines=N [predicted_ms=MS]` into s (each window once). */
static rap_status parse_budget(const parse_ctx *c, char **tok, int nt, rap_schedule *s)
{
    int w = nt >= 2 ? rap_window_parse(tok[1]) : -1;
    if (w < 0)
        return perr(c, "expected 'parse WINDOW lines=N [predicted_ms=MS]' with WINDOW one of "
                       "emb_forward, mlp_forward, mlp_backward, emb_backward, grad_comm, exposed");
    if (s->parse_lines[w] > 0)
        return perr(c, "a second parse line for window %s (first on line %d)", tok[1],
                    s->parse_line[w]);
    int64_t lines = 0;
    double ms = -1;
    for (int i = 2; i < nt; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return perr(c, "expected key=value in a parse line, got '%s'", tok[i]);
        *eq = 0;
        const char *key = tok[i], *val = eq + 1;
        if (strcmp(key, "lines") == 0) {
            if (lines > 0)
                return perr(c, "lines= given twice");
            if (!parse_i64(val, 1, RAP_PARSE_LINES_MAX, &lines))
                return perr(c, "expected lines=N with N a line count in [1, %lld], got '%s'",
                            (long long)RAP_PARSE_LINES_MAX, val);
        } else if (strcmp(key, "predicted_ms") == 0) {
            if (ms >= 0)
                return perr(c, "predicted_ms= given twice");
            char *end;
            errno = 0;
            double x = strtod(val, &end);
            if (!*val || *end || errno || !(x >= 0) || x > 1e9)
                return perr(c, "expected predicted_ms=MS with MS a number >= 0, got '%s'", val);
            ms = x;
        } else {
            return perr(c, "unknown parse key '%s' (expected lines or predicted_ms)", key);
        }
    }
    if (lines <= 0)
        return perr(c, "expected lines=N in a parse line");
    s->parse_lines[w] = lines;
    s->parse_ms[w] = ms;
    s->parse_line[w] = c->line;
    return RAP_OK;
}

rap_status rap_schedule_parse(const char *text, const char *source, rap_schedule **out)
{
    *out = NULL;
    rap_schedule *s = sched_new(source);
    if (!s)
        return RAP_ERR_NOMEM;
    parse_ctx c = {s->source, 0};
    rap_status st = RAP_OK;
    bool have_header = false, have_plan = false, have_fusion = false;
    int window = -1;
    char line[4096];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        c.line++;
        if (len >= sizeof line) {
            st = perr(&c, "line longer than %d bytes", (int)sizeof line - 1);
            goto fail;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (nl ? 1 : 0);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *tok[MAX_TOKENS + 1];
        int nt = 0;
        char *save = NULL; /* strtok_r: rank threads parse their schedules at once */
        for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
            if (nt == MAX_TOKENS) {
                st = perr(&c, "more than %d words on a line", MAX_TOKENS);
                goto fail;
            }
            tok[nt++] = t;
        }
        if (nt == 0)
            continue;
        if (!have_header) {
            int64_t v;
            if (strcmp(tok[0], "rap-schedule") != 0 || nt != 2) {
                st = perr(&c, "expected 'rap-schedule %d' as the first line", RAP_SCHEDULE_VERSION);
                goto fail;
            }
            if (!parse_i64(tok[1], 0, 1 << 30, &v) || v != RAP_SCHEDULE_VERSION) {
                st = perr(&c, "schedule version '%s' is not supported (this rap reads version %d)",
                          tok[1], RAP_SCHEDULE_VERSION);
                goto fail;
            }
            have_header = true;
        } else if (strcmp(tok[0], "plan") == 0) {
            if (have_plan) {
                st = perr(&c, "a second 'plan' line");
                goto fail;
            }
            if (nt != 3 || !parse_hash(tok[2], &s->plan_hash)) {
                st = perr(&c, "expected 'plan NAME HASH' (HASH: 16 hex digits)");
                goto fail;
            }
            token_copy(s->plan_name, sizeof s->plan_name, tok[1]);
            have_plan = true;
        } else if (strcmp(tok[0], "fusion") == 0) {
            int64_t v;
            if (have_fusion) {
                st = perr(&c, "a second 'fusion' line");
                goto fail;
            }
            if (nt != 3 || !parse_i64(tok[1], 0, 1 << 30, &v) || !parse_hash(tok[2], &s->fusion_hash)) {
                st = perr(&c, "expected 'fusion N_KERNELS HASH' (HASH: 16 hex digits)");
                goto fail;
            }
            s->n_kernels = (int)v;
            have_fusion = true;
        } else if (strcmp(tok[0], "window") == 0) {
            if (!have_plan || !have_fusion) {
                st = perr(&c, "expected the 'plan' and 'fusion' lines before the first window");
                goto fail;
            }
            int w = nt == 2 ? rap_window_parse(tok[1]) : -1;
            if (w < 0) {
                st = perr(&c, "expected 'window NAME' with NAME one of emb_forward, mlp_forward, "
                              "mlp_backward, emb_backward, grad_comm, exposed");
                goto fail;
            }
            if (w <= window) {
                st = perr(&c, "window %s after %s: windows must appear once each, in training order "
                              "(emb_forward, mlp_forward, mlp_backward, emb_backward, grad_comm, exposed)",
                          tok[1], g_win_names[window]);
                goto fail;
            }
            window = w;
        } else if (strcmp(tok[0], "parse") == 0) {
            if (!have_plan || !have_fusion) {
                st = perr(&c, "expected the 'plan' and 'fusion' lines before a parse line");
                goto fail;
            }
            if ((st = parse_budget(&c, tok, nt, s)) != RAP_OK)
                goto fail;
        } else if (strcmp(tok[0], "slice") == 0) {
            if (window < 0) {
                st = perr(&c, "expected a 'window NAME' line before the first slice");
                goto fail;
            }
            rap_slice sl = {0};
            if ((st = parse_slice(&c, tok, nt, &sl)) != RAP_OK)
                goto fail;
            if ((st = add_slice(s, (rap_window)window, &sl)) != RAP_OK)
                goto fail;
        } else {
            st = perr(&c, "unknown line '%s' (expected plan, fusion, parse, window or slice)",
                      tok[0]);
            goto fail;
        }
    }
    if (!have_header || !have_plan || !have_fusion) {
        c.line++;
        st = perr(&c, "unexpected end of file: expected %s",
                  !have_header ? "'rap-schedule 1'" : !have_plan ? "a 'plan NAME HASH' line"
                                                                 : "a 'fusion N_KERNELS HASH' line");
        goto fail;
    }
    *out = s;
    return RAP_OK;
fail:
    rap_schedule_free(s);
    return st;
}

rap_status rap_schedule_load(const char *path, rap_schedule **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rap_fail(RAP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = rap_malloc(cap, "schedule text");
    if (!buf) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= ((size_t)256 << 20)) {
                fclose(f);
                rap_free(buf);
                return rap_fail(RAP_ERR_IO, "%s: larger than 256 MiB: not a schedule", path);
            }
            char *nb = rap_realloc(buf, cap * 2, "schedule text");
            if (!nb) {
                fclose(f);
                rap_free(buf);
                return RAP_ERR_NOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (r == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        rap_free(buf);
        return rap_fail(RAP_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        rap_free(buf);
        return rap_fail(RAP_ERR_PLAN, "%s: holds a NUL byte: not a schedule", path);
    }
    rap_status st = rap_schedule_parse(buf, path, out);
    rap_free(buf);
    return st;
}

/* ------------------------------------------------------------ validation */

/* "source:line" of slice i (or "source: slice i" when built in memory). */
static const char *where(const rap_schedule *s, int i, char *buf, size_t n)
{
    if (s->slices[i].line > 0)
        snprintf(buf, n, "%s:%d", s->source, s->slices[i].line);
    else
        snprintf(buf, n, "%s: slice %d", s->source, i);
    return buf;
}

static void fmt_r1(char *buf, size_t n, int64_t r1)
{
    if (r1 == RAP_ROWS_END)
        snprintf(buf, n, "end");
    else
        snprintf(buf, n, "%lld", (long long)r1);
}

typedef struct {
    int64_t r0, r1;
    int slice;
    int share;  /* RAP_SH_WHOLE: the whole batch */
} piece;

#define RAP_SH_WHOLE 64 /* index of "the whole batch" among a node's shares */

static int cmp_piece(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->share != y->share)
        return x->share < y->share ? -1 : 1;
    if (x->r0 != y->r0)
        return x->r0 < y->r0 ? -1 : 1;
    return x->slice < y->slice ? -1 : x->slice > y->slice;
}

/* Whether s was made for this plan and this fusion (their hashes and the
 * fusion's kernel count). RAP_ERR_PLAN saying what it was made for. */
static rap_status check_binding(const rap_schedule *s, const rap_plan *p, const rap_fusion *f)
{
    uint64_t ph = rap_plan_hash(p);
    if (s->plan_hash != ph)
        return rap_fail(RAP_ERR_PLAN, "%s: made for plan %s (hash %016llx), not for %s (hash %016llx): "
                                      "make a schedule for this plan",
                        s->source, s->plan_name, (unsigned long long)s->plan_hash, p->source,
                        (unsigned long long)ph);
    uint64_t fh = rap_fusion_hash(p, f);
    if (s->n_kernels != f->n || s->fusion_hash != fh)
        return rap_fail(RAP_ERR_PLAN, "%s: made for a fusion of %d kernels (hash %016llx), not for "
                                      "this one of %d kernels (hash %016llx)",
                        s->source, s->n_kernels, (unsigned long long)s->fusion_hash, f->n,
                        (unsigned long long)fh);
    return RAP_OK;
}

/* Every slice on its own: an existing kernel, descriptors within it (a row
 * kernel's cut only between its groups), non-empty rows. RAP_ERR_PLAN
 * naming the first slice that is not. */
static rap_status check_ranges(const rap_schedule *s, const rap_fusion *f)
{
    char w1[300];
    for (int i = 0; i < s->n_slices; i++) {
        const rap_slice *sl = &s->slices[i];
        if (sl->kernel < 0 || sl->kernel >= f->n)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d does not exist (the fusion has %d kernels)",
                            where(s, i, w1, sizeof w1), sl->kernel, f->n);
        int nd = f->kernels[sl->kernel].n;
        if (sl->d0 < 0 || sl->d1 > nd || sl->d0 >= sl->d1)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d: descriptors [%d, %d) out of its %d",
                            where(s, i, w1, sizeof w1), sl->kernel, sl->d0, sl->d1, nd);
        const rap_kernel *kr = &f->kernels[sl->kernel];
        if (kr->group && (kr->group[rap_kernel_group_of(kr, sl->d0)] != sl->d0 ||
                          (sl->d1 < nd && kr->group[rap_kernel_group_of(kr, sl->d1)] != sl->d1)))
            return rap_fail(RAP_ERR_PLAN, "%s: row kernel %d: descriptors [%d, %d) cut one of its "
                                          "groups (a slice of a row kernel holds whole groups)",
                            where(s, i, w1, sizeof w1), sl->kernel, sl->d0, sl->d1);
        if (sl->r0 < 0 || sl->r1 <= sl->r0)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d: empty or negative rows [%lld, %lld)",
                            where(s, i, w1, sizeof w1), sl->kernel, (long long)sl->r0,
                            (long long)sl->r1);
    }
    return RAP_OK;
}

/* What the coverage and order checks share: the schedule, its plan and
 * fusion (ranges already checked), and tables built from them. */
typedef struct {
    const rap_schedule *s;
    const rap_plan *p;
    const rap_fusion *f;
    int64_t max_rows;
    int run_kernels; /* kernels [0, run_kernels) run; the others are received */
    int *first;      /* (f->n + 1) kernel k's slices: order[first[k] .. first[k + 1]) */
    int *order;      /* (NSL) slice indices grouped by kernel, schedule order kept */
    piece *pc;       /* (NSL) scratch: the pieces of one descriptor */
    int *done;       /* (n_nodes * 65) done[node * 65 + k]: the last slice computing the
                      * node in share k (RAP_SH_WHOLE: over the whole batch), -1 none */
    int *kof, *jof;  /* (n_nodes) kernel and descriptor computing each node, -1 none */
} vcheck;

static void vcheck_free(vcheck *v)
{
    rap_free(v->first);
    rap_free(v->order);
    rap_free(v->pc);
    rap_free(v->done);
    rap_free(v->kof);
    rap_free(v->jof);
    memset(v, 0, sizeof *v);
}

/* Allocates v's tables and groups the slices by kernel (counting sort);
 * done, kof and jof start at -1 (filled by check_coverage). RAP_ERR_NOMEM
 * with v freed. */
static rap_status vcheck_init(vcheck *v, const rap_schedule *s, const rap_plan *p,
                              const rap_fusion *f, int64_t max_rows)
{
    memset(v, 0, sizeof *v);
    v->s = s;
    v->p = p;
    v->f = f;
    v->max_rows = max_rows;
    v->run_kernels = f->n - s->n_received;
    v->first = rap_calloc(sizeof(int) * (size_t)(f->n + 1), "schedule check");
    v->order = rap_malloc(sizeof(int) * (size_t)(s->n_slices + 1), "schedule check");
    v->pc = rap_malloc(sizeof(piece) * (size_t)(s->n_slices + 1), "schedule check");
    v->done = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1) * 65, "schedule check");
    v->kof = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "schedule check");
    v->jof = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "schedule check");
    int *fill = rap_malloc(sizeof(int) * (size_t)(f->n + 1), "schedule check");
    if (!v->first || !v->order || !v->pc || !v->done || !v->kof || !v->jof || !fill) {
        rap_free(fill);
        vcheck_free(v);
        return RAP_ERR_NOMEM;
    }
    for (int i = 0; i < s->n_slices; i++)
        v->first[s->slices[i].kernel + 1]++;
    for (int k = 0; k < f->n; k++)
        v->first[k + 1] += v->first[k];
    memcpy(fill, v->first, sizeof(int) * (size_t)(f->n + 1));
    for (int i = 0; i < s->n_slices; i++)
        v->order[fill[s->slices[i].kernel]++] = i;
    rap_free(fill);
    for (int i = 0; i < p->n_nodes; i++)
        v->kof[i] = v->jof[i] = -1;
    for (int i = 0; i < p->n_nodes * 65; i++)
        v->done[i] = -1;
    return RAP_OK;
}

/* No slice runs a kernel of received columns (the last n_received).
 * RAP_ERR_PLAN naming the first such slice. */
static rap_status check_received(const vcheck *v)
{
    char w1[300];
    for (int k = v->run_kernels; k < v->f->n; k++)
        if (v->first[k + 1] > v->first[k])
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) computes columns this rank receives "
                                          "from others: it must not run",
                            where(v->s, v->order[v->first[k]], w1, sizeof w1), k,
                            rap_kernel_op_name(&v->f->kernels[k]));
    return RAP_OK;
}

/* The pieces pc[g0, g1) of kernel k's descriptor j (node `node`), all in
 * one share (or over the whole batch) of the split of s0, sorted by r0:
 * they cover the share's rows of a max_rows batch (the whole batch: all
 * max_rows) once, without overlap or gap. Records in done the last slice
 * computing the node there. RAP_ERR_PLAN naming the first violation. */
static rap_status check_share_cover(vcheck *v, int k, int j, int node, int g0, int g1,
                                    const rap_slice *s0)
{
    const rap_schedule *s = v->s;
    const rap_kernel *kn = &v->f->kernels[k];
    const piece *pc = v->pc;
    char w1[300], w2[300], e1[32];
    int64_t cover = v->max_rows, base_unused;
    if (pc[g0].share != RAP_SH_WHOLE)
        rap_hybrid_rows(v->max_rows, s0->shares, pc[g0].share, &base_unused, &cover);
    int64_t at = 0;
    int last = -1;
    for (int q = g0; q < g1; q++) {
        if (pc[q].r0 < at) {
            fmt_r1(e1, sizeof e1, pc[q].r1);
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d rows [%lld, %s) "
                                          "are already run by %s: rows covered twice",
                            where(s, pc[q].slice, w1, sizeof w1), k, rap_kernel_op_name(kn), j,
                            (long long)pc[q].r0, e1, where(s, last, w2, sizeof w2));
        }
        if (pc[q].r0 > at && at < cover)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d: rows [%lld, %lld) "
                                          "are never run (a gap before %s)",
                            s->source, k, rap_kernel_op_name(kn), j, (long long)at,
                            (long long)pc[q].r0, where(s, pc[q].slice, w1, sizeof w1));
        at = pc[q].r1;
        last = pc[q].slice;
        int *d = &v->done[node * 65 + pc[q].share];
        if (pc[q].slice > *d)
            *d = pc[q].slice;
    }
    if (at < cover)
        return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d: rows [%lld, %lld) are "
                                      "never run (%s hold up to %lld rows; write "
                                      "rows=R0:end)",
                        s->source, k, rap_kernel_op_name(kn), j, (long long)at, (long long)cover,
                        pc[g0].share != RAP_SH_WHOLE ? "its share's" : "batches",
                        (long long)cover);
    return RAP_OK;
}

/* Kernel k's descriptor j (node `node`, a kernel that runs): some slice
 * runs it; its pieces lie all over the whole batch or all in shares of
 * one split; each share used (or the whole batch) is covered once
 * (check_share_cover). RAP_ERR_PLAN naming the first violation. */
static rap_status check_desc(vcheck *v, int k, int j, int node)
{
    const rap_schedule *s = v->s;
    const rap_kernel *kn = &v->f->kernels[k];
    char w1[300];
    int np = 0;
    for (int q = v->first[k]; q < v->first[k + 1]; q++) {
        const rap_slice *sl = &s->slices[v->order[q]];
        if (sl->d0 <= j && j < sl->d1)
            v->pc[np++] = (piece){sl->r0, sl->r1, v->order[q],
                                  sl->shares > 0 ? sl->share : RAP_SH_WHOLE};
    }
    if (np == 0)
        return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d (plan %s:%d) is never run: "
                                      "every descriptor must be covered once",
                        s->source, k, rap_kernel_op_name(kn), j, v->p->source,
                        v->p->nodes[node].line);
    qsort(v->pc, (size_t)np, sizeof *v->pc, cmp_piece);
    const rap_slice *s0 = &s->slices[v->pc[0].slice];
    for (int q = 1; q < np; q++) {
        const rap_slice *sq = &s->slices[v->pc[q].slice];
        if ((sq->shares > 0) != (s0->shares > 0) || (sq->shares > 0 && sq->shares != s0->shares))
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d: its pieces lie in "
                                          "shares of different splits of the batch, or in "
                                          "shares and over the whole batch",
                            where(s, v->pc[q].slice, w1, sizeof w1), k, rap_kernel_op_name(kn), j);
    }
    /* each group (one share, or the whole batch): pieces in order of r0 */
    for (int g0 = 0; g0 < np;) {
        int g1 = g0;
        while (g1 < np && v->pc[g1].share == v->pc[g0].share)
            g1++;
        RAP_TRY(check_share_cover(v, k, j, node, g0, g1, s0));
        g0 = g1;
    }
    return RAP_OK;
}

/* Coverage: each descriptor of a kernel that runs over [0, max_rows)
 * exactly once, or each share it runs in over that share's rows exactly
 * once. Fills kof and jof (every kernel's nodes, received ones too) and
 * done. RAP_ERR_PLAN naming the first violation. */
static rap_status check_coverage(vcheck *v)
{
    for (int k = 0; k < v->f->n; k++) {
        const rap_kernel *kn = &v->f->kernels[k];
        for (int j = 0; j < kn->n; j++) {
            int node = kn->nodes[j];
            v->kof[node] = k;
            v->jof[node] = j;
            if (k >= v->run_kernels)
                continue; /* received: never run */
            RAP_TRY(check_desc(v, k, j, node));
        }
    }
    return RAP_OK;
}

/* Slice i runs after every slice producing its descriptors' inputs over
 * its rows (the same share, or the whole batch); an input in its own row
 * group is computed by the same thread just before. Needs kof, jof and
 * done (check_coverage). RAP_ERR_PLAN naming the first violation. */
static rap_status check_slice_inputs(const vcheck *v, int i)
{
    const rap_schedule *s = v->s;
    const rap_plan *p = v->p;
    const rap_fusion *f = v->f;
    const int *kof = v->kof, *jof = v->jof;
    char w1[300], w2[300];
    const rap_slice *sl = &s->slices[i];
    const rap_kernel *kn = &f->kernels[sl->kernel];
    int sh = sl->shares > 0 ? sl->share : RAP_SH_WHOLE;
    for (int j = sl->d0; j < sl->d1; j++) {
        int in = p->nodes[kn->nodes[j]].input;
        if (in < 0 || p->nodes[in].op == RAP_OP_INPUT)
            continue;
        if (kof[in] == sl->kernel && kn->group && jof[in] < j &&
            rap_kernel_group_of(kn, jof[in]) == rap_kernel_group_of(kn, j))
            continue; /* its own group: the same thread computed it just before */
        if (kof[in] < 0)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d desc %d reads plan node %d, which no "
                                          "kernel of the fusion produces",
                            where(s, i, w1, sizeof w1), sl->kernel, j, in);
        if (kof[in] >= v->run_kernels)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d reads kernel %d (%s) desc "
                                          "%d, a column this rank receives and does not compute",
                            where(s, i, w1, sizeof w1), sl->kernel, rap_kernel_op_name(kn), j,
                            kof[in], rap_op_name(f->kernels[kof[in]].op), jof[in]);
        int dw = v->done[in * 65 + RAP_SH_WHOLE],
            ds = sh != RAP_SH_WHOLE ? v->done[in * 65 + sh] : -1;
        int d = dw >= 0 ? dw : ds;
        if (d < 0)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d reads rows its input, "
                                          "kernel %d (%s) desc %d, does not compute (%s): run "
                                          "the input over those rows too",
                            where(s, i, w1, sizeof w1), sl->kernel, rap_kernel_op_name(kn), j,
                            kof[in], rap_op_name(f->kernels[kof[in]].op), jof[in],
                            sh == RAP_SH_WHOLE ? "it runs on shares of the batch only"
                                               : "not in this share");
        if (d >= i)
            return rap_fail(RAP_ERR_PLAN, "%s: kernel %d (%s) desc %d (plan %s:%d) runs before its "
                                          "input, kernel %d (%s) desc %d, is complete (%s): list "
                                          "producers first",
                            where(s, i, w1, sizeof w1), sl->kernel, rap_kernel_op_name(kn), j,
                            p->source, p->nodes[kn->nodes[j]].line, kof[in],
                            rap_op_name(f->kernels[kof[in]].op), jof[in],
                            where(s, d, w2, sizeof w2));
    }
    return RAP_OK;
}

rap_status rap_schedule_validate(const rap_schedule *s, const rap_plan *p, const rap_fusion *f,
                                 int64_t max_rows)
{
    if (!s || !p || !f || max_rows < 1)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_validate: expected a schedule, plan, fusion "
                                     "and max_rows >= 1");
    RAP_TRY(check_binding(s, p, f));
    RAP_TRY(check_ranges(s, f));
    vcheck v;
    RAP_TRY(vcheck_init(&v, s, p, f, max_rows));
    rap_status st = check_received(&v);
    if (st == RAP_OK)
        st = check_coverage(&v);
    for (int i = 0; i < s->n_slices && st == RAP_OK; i++)
        st = check_slice_inputs(&v, i);
    vcheck_free(&v);
    return st;
}

rap_status rap_schedule_validate_hybrid(const rap_schedule *s, const rap_plan *p,
                                        const rap_fusion *f, int64_t max_rows)
{
    int ng, ne;
    rap_schedule_window(s, RAP_WIN_GRAD_COMM, &ng);
    rap_schedule_window(s, RAP_WIN_EMB_BACKWARD, &ne);
    if (ng == 0 || ne == 0)
        return RAP_OK;
    /* a copy with the two windows' slices swapped: slice order = launch order */
    rap_schedule *tmp = NULL;
    RAP_TRY(rap_schedule_create(p, f, s->source, &tmp));
    tmp->plan_hash = s->plan_hash;
    tmp->fusion_hash = s->fusion_hash;
    tmp->n_kernels = s->n_kernels;
    tmp->n_received = s->n_received;
    rap_status st = RAP_OK;
    for (int w = 0; w < RAP_WIN_COUNT && st == RAP_OK; w++) {
        rap_window from = w == RAP_WIN_EMB_BACKWARD ? RAP_WIN_GRAD_COMM
                        : w == RAP_WIN_GRAD_COMM   ? RAP_WIN_EMB_BACKWARD
                                                   : (rap_window)w;
        int n;
        const rap_slice *sl = rap_schedule_window(s, from, &n);
        for (int i = 0; i < n && st == RAP_OK; i++)
            if ((st = rap_schedule_add_slice(tmp, (rap_window)w, &sl[i])) == RAP_OK)
                tmp->slices[tmp->win_first[w + 1] - 1].line = sl[i].line;
    }
    if (st == RAP_OK && (st = rap_schedule_validate(tmp, p, f, max_rows)) != RAP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rap_last_error());
        st = rap_fail(RAP_ERR_PLAN, "%s (with ranks grad_comm's slices run before "
                                    "emb_backward's: here listed in that order)", why);
    }
    rap_schedule_free(tmp);
    return st;
}

/* ------------------------------------------------------------ built-ins */

static rap_status whole_kernels(rap_schedule *s, const rap_fusion *f, int k0, int k1, rap_window w)
{
    for (int k = k0; k < k1; k++)
        if (f->kernels[k].n > 0)
            RAP_TRY(rap_schedule_add(s, w, k, 0, f->kernels[k].n, 0, RAP_ROWS_END, -1));
    return RAP_OK;
}

rap_status rap_schedule_builtin_embedding(const rap_plan *p, const rap_fusion *f,
                                          rap_schedule **out)
{
    RAP_TRY(rap_schedule_create(p, f, "<builtin embedding schedule>", out));
    int half = f->n / 2; /* one kernel (a row kernel): emb_backward, where it costs least */
    rap_status st = whole_kernels(*out, f, 0, half, RAP_WIN_EMB_FORWARD);
    if (st == RAP_OK)
        st = whole_kernels(*out, f, half, f->n, RAP_WIN_EMB_BACKWARD);
    if (st != RAP_OK) {
        rap_schedule_free(*out);
        *out = NULL;
    }
    return st;
}

rap_status rap_schedule_all_in(const rap_plan *p, const rap_fusion *f, rap_window w,
                               rap_schedule **out)
{
    *out = NULL;
    if ((int)w < 0 || w >= RAP_WIN_COUNT)
        return rap_fail(RAP_ERR_ARG, "rap_schedule_all_in: window %d out of range", (int)w);
    char name[64];
    snprintf(name, sizeof name, "<builtin %s schedule>", g_win_names[w]);
    RAP_TRY(rap_schedule_create(p, f, name, out));
    rap_status st = whole_kernels(*out, f, 0, f->n, w);
    if (st != RAP_OK) {
        rap_schedule_free(*out);
        *out = NULL;
    }
    return st;
}
