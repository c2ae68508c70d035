/*
 * capacity.c -- the capacity file (capacity.h, docs/PLANNER.md).
 *
 *   rap-capacity 1
 *   gpu NVIDIA H200
 *   model tables=26 emb_dim=128 bot=512-256-128 top=1024-1024-512-256-1 batch=4096 precision=fp32 emb_dtype=bf16 optimizer=rowwise-adagrad
 *   tolerance 0.05
 *   window emb_forward standalone_ms=1.9 capacity_ms=1.2
 *   ... one line per window emb_forward, mlp_forward, mlp_backward, emb_backward, grad_comm
 *
 * emb_dtype and optimizer came later: a file without them holds fp32
 * tables and RAP_CAP_OPT_UNRECORDED (capacity.h).
 */
#include "plan/capacity.h"

#include "core/checked.h"
#include "core/out.h"
#include "model/model.h" /* RAP_MAX_TABLES, the type and optimizer names */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

void rap_shape_widths(const int *w, int n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? "-%d" : "%d", w[i]);
}

void rap_capacity_assumed(const rap_model_shape *shape, const char *gpu, rap_capacity *c)
{
    static const double cap[RAP_CAP_WINDOWS] = {1.0, 0.5, 0.5, 1.0, 0.0};
    static const double alone[RAP_CAP_WINDOWS] = {2.0, 1.0, 2.0, 3.0, 0.0};
    memset(c, 0, sizeof *c);
    snprintf(c->gpu, sizeof c->gpu, "%s", gpu && gpu[0] ? gpu : "assumed");
    c->shape = *shape;
    c->tolerance = 0.05;
    for (int w = 0; w < RAP_CAP_WINDOWS; w++) {
        c->capacity_ms[w] = cap[w];
        c->standalone_ms[w] = alone[w];
    }
    c->assumed = true;
    snprintf(c->source, sizeof c->source, "<assumed>");
}

rap_status rap_capacity_validate(const rap_capacity *c)
{
    const rap_model_shape *s = &c->shape;
    if (!c->gpu[0])
        return rap_fail(RAP_ERR_DATA, "capacity %s: no GPU name", c->source);
    if (s->tables < 1 || s->emb_dim < 1 || s->n_bot < 1 || s->n_top < 1 || s->batch < 1 ||
        (s->precision != 0 && s->precision != 1) || s->emb_dtype < 0 || s->emb_dtype > 2 ||
        s->optimizer < RAP_CAP_OPT_UNRECORDED || s->optimizer > 2)
        return rap_fail(RAP_ERR_DATA, "capacity %s: model shape incomplete (tables, emb_dim, bot, "
                        "top, batch >= 1, precision fp32|bf16, emb_dtype fp32|bf16|fp16, "
                        "optimizer sgd|adagrad|rowwise-adagrad expected)", c->source);
    if (!(c->tolerance >= 0 && c->tolerance < 1))
        return rap_fail(RAP_ERR_DATA, "capacity %s: tolerance %g not in [0, 1)", c->source, c->tolerance);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        if (!(c->capacity_ms[w] >= 0 && isfinite(c->capacity_ms[w])) ||
            !(c->standalone_ms[w] >= 0 && isfinite(c->standalone_ms[w])))
            return rap_fail(RAP_ERR_DATA, "capacity %s: window %s: expected finite ms >= 0",
                            c->source, rap_window_name((rap_window)w));
    return RAP_OK;
}

rap_status rap_capacity_write(const rap_capacity *c, FILE *f)
{
    char bot[256], top[256];
    rap_shape_widths(c->shape.bot, c->shape.n_bot, bot, sizeof bot);
    rap_shape_widths(c->shape.top, c->shape.n_top, top, sizeof top);
    fprintf(f, "rap-capacity %d\n", RAP_CAPACITY_VERSION);
    if (!strncmp(c->source, "measured", 8)) /* how (a comment: loading skips it) */
        fprintf(f, "# %s\n", c->source);
    fprintf(f, "gpu %s\n", c->gpu);
    fprintf(f, "model tables=%d emb_dim=%d bot=%s top=%s batch=%lld precision=%s emb_dtype=%s",
            c->shape.tables, c->shape.emb_dim, bot, top, (long long)c->shape.batch,
            c->shape.precision ? "bf16" : "fp32",
            rap_emb_dtype_name((rap_emb_dtype)c->shape.emb_dtype));
    if (c->shape.optimizer != RAP_CAP_OPT_UNRECORDED)
        fprintf(f, " optimizer=%s", rap_optimizer_name((rap_optimizer)c->shape.optimizer));
    fputc('\n', f);
    fprintf(f, "tolerance %.17g\n", c->tolerance);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        fprintf(f, "window %s standalone_ms=%.17g capacity_ms=%.17g\n",
                rap_window_name((rap_window)w), c->standalone_ms[w], c->capacity_ms[w]);
    return ferror(f) ? rap_fail(RAP_ERR_IO, "capacity: write failed") : RAP_OK;
}

rap_status rap_capacity_save(const rap_capacity *c, const char *path)
{
    RAP_TRY(rap_capacity_validate(c));
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    return rap_out_close(o, rap_capacity_write(c, rap_out_file(o)));
}

/* The keys after precision= on a model line (at p): emb_dtype=fp32|bf16|fp16
 * and optimizer=sgd|adagrad|rowwise-adagrad, each at most once, in any
 * order. RAP_ERR_DATA for anything else. */
static rap_status parse_model_keys(const char *p, rap_model_shape *sh)
{
    bool seen_dt = false, seen_opt = false;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            return RAP_OK;
        char tok[64];
        size_t l = strcspn(p, " \t");
        if (l >= sizeof tok)
            return RAP_ERR_DATA;
        memcpy(tok, p, l);
        tok[l] = 0;
        p += l;
        bool ok = false;
        for (int k = 0; k < 3 && !ok; k++) {
            char want[64];
            snprintf(want, sizeof want, "emb_dtype=%s", rap_emb_dtype_name((rap_emb_dtype)k));
            if (!seen_dt && !strcmp(tok, want)) {
                sh->emb_dtype = k;
                ok = seen_dt = true;
            }
            snprintf(want, sizeof want, "optimizer=%s", rap_optimizer_name((rap_optimizer)k));
            if (!ok && !seen_opt && !strcmp(tok, want)) {
                sh->optimizer = k;
                ok = seen_opt = true;
            }
        }
        if (!ok)
            return RAP_ERR_DATA;
    }
}

static rap_status parse_widths(const char *s, int *w, int *n)
{
    *n = 0;
    while (*s) {
        const char *end;
        int v;
        if (*n >= RAP_SHAPE_MAX_LAYERS || !rap_parse_int_ok(s, 1, RAP_SHAPE_MAX_WIDTH, &v, &end) ||
            (*end && *end != '-'))
            return RAP_ERR_DATA;
        w[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n ? RAP_OK : RAP_ERR_DATA;
}

/* The "model tables=T emb_dim=D bot=.. top=.. batch=B precision=P" line p
 * (keys in this order, as rap_capacity_write puts them), then the keys of
 * parse_model_keys, into *sh (emb_dtype fp32 and the optimizer
 * RAP_CAP_OPT_UNRECORDED when absent); false when malformed or a value is
 * out of range. */
static bool parse_model(const char *p, rap_model_shape *sh)
{
    static const char *const keys[] = {"tables=", "emb_dim=", "bot=", "top=", "batch=",
                                       "precision="};
    char word[6][256];
    int n = 0;
    const char *q = p + 6; /* after "model " */
    while (*q && n < 6) {
        while (*q == ' ')
            q++;
        size_t len = strcspn(q, " ");
        size_t kl = strlen(keys[n]);
        if (len == 0 || len >= sizeof word[0] || strncmp(q, keys[n], kl))
            return false;
        memcpy(word[n], q + kl, len - kl);
        word[n][len - kl] = 0;
        q += len;
        n++;
    }
    sh->emb_dtype = 0;
    sh->optimizer = RAP_CAP_OPT_UNRECORDED;
    if (n != 6 || parse_model_keys(q, sh) != RAP_OK)
        return false;
    if (!rap_parse_int_ok(word[0], 1, RAP_MAX_TABLES, &sh->tables, NULL) ||
        !rap_parse_int_ok(word[1], 1, RAP_SHAPE_MAX_WIDTH, &sh->emb_dim, NULL) ||
        parse_widths(word[2], sh->bot, &sh->n_bot) != RAP_OK ||
        parse_widths(word[3], sh->top, &sh->n_top) != RAP_OK ||
        !rap_parse_i64_ok(word[4], 1, (int64_t)1 << 40, &sh->batch, NULL) ||
        (strcmp(word[5], "fp32") && strcmp(word[5], "bf16")))
        return false;
    sh->precision = !strcmp(word[5], "bf16");
    return true;
}

rap_status rap_capacity_load(const char *path, rap_capacity *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return rap_fail(RAP_ERR_IO, "capacity %s: cannot open: %s", path, strerror(errno));
    char line[1024];
    int lineno = 0;
    bool magic = false, model = false, seen[RAP_CAP_WINDOWS] = {0};
    rap_status st = RAP_OK;
    c->tolerance = 0.05;
    while (fgets(line, sizeof line, f) && st == RAP_OK) {
        lineno++;
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            continue;
        int ver;
        if (!magic) {
            if (sscanf(p, "rap-capacity %d", &ver) != 1)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-capacity %d\"", path, lineno,
                              RAP_CAPACITY_VERSION);
            else if (ver != RAP_CAPACITY_VERSION)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: version %d is not supported (expected %d)", path,
                              lineno, ver, RAP_CAPACITY_VERSION);
            magic = true;
        } else if (!strncmp(p, "gpu ", 4)) {
            const char *g = p + 4;
            while (*g == ' ' || *g == '\t')
                g++;
            if (strlen(g) >= sizeof c->gpu)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: GPU name longer than %d bytes", path, lineno,
                              (int)sizeof c->gpu - 1);
            snprintf(c->gpu, sizeof c->gpu, "%s", g);
        } else if (!strncmp(p, "model ", 6)) {
            if (model)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: a second model line", path, lineno);
            else if (!parse_model(p, &c->shape))
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"model tables=T emb_dim=D bot=W-W.. "
                              "top=W-..-1 batch=B precision=fp32|bf16 [emb_dtype=fp32|bf16|fp16] "
                              "[optimizer=sgd|adagrad|rowwise-adagrad]\" (T 1..%d, widths 1..%d)",
                              path, lineno, RAP_MAX_TABLES, RAP_SHAPE_MAX_WIDTH);
            model = true;
        } else if (!strncmp(p, "tolerance ", 10)) {
            char *end;
            c->tolerance = strtod(p + 10, &end);
            if (end == p + 10 || *end)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"tolerance X\"", path, lineno);
        } else if (!strncmp(p, "window ", 7)) {
            char name[64];
            double alone, cap;
            int w = -1;
            int used = 0;
            if (sscanf(p, "window %63s standalone_ms=%lf capacity_ms=%lf%n", name, &alone, &cap,
                       &used) != 3 || p[used] != 0 ||
                (w = rap_window_parse(name)) < 0 || w >= RAP_CAP_WINDOWS) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"window NAME standalone_ms=X "
                              "capacity_ms=Y\" with NAME one of emb_forward, mlp_forward, "
                              "mlp_backward, emb_backward, grad_comm", path, lineno);
            } else if (seen[w]) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: window %s given twice", path, lineno, name);
            } else {
                seen[w] = true;
                c->standalone_ms[w] = alone;
                c->capacity_ms[w] = cap;
            }
        } else {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: expected gpu, model, tolerance or window, got \"%.40s\"",
                          path, lineno, p);
        }
    }
    fclose(f);
    if (st != RAP_OK)
        return st;
    if (!magic)
        return rap_fail(RAP_ERR_DATA, "%s: empty (expected \"rap-capacity %d\")", path, RAP_CAPACITY_VERSION);
    if (!model)
        return rap_fail(RAP_ERR_DATA, "%s: no \"model ...\" line", path);
    for (int w = 0; w < RAP_CAP_WINDOWS; w++)
        if (!seen[w])
            return rap_fail(RAP_ERR_DATA, "%s: no line for window %s", path,
                            rap_window_name((rap_window)w));
    return rap_capacity_validate(c);
}

/* Appends "; " (after the first) and the formatted text to buf (n bytes). */
static void add_mismatch(char *buf, size_t n, const char *fmt, ...) RAP_PRINTF(3, 4);
static void add_mismatch(char *buf, size_t n, const char *fmt, ...)
{
    size_t at = strlen(buf);
    if (at + 3 >= n)
        return;
    if (at) {
        memcpy(buf + at, "; ", 3);
        at += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, n - at, fmt, ap);
    va_end(ap);
}

rap_status rap_capacity_check(const rap_capacity *c, const char *gpu, const rap_model_shape *want)
{
    const rap_model_shape *s = &c->shape;
    char a[256], b[256];
    if (gpu && gpu[0] && strcmp(c->gpu, gpu))
        return rap_fail(RAP_ERR_ARG, "capacity %s was made for GPU \"%s\", not \"%s\"", c->source,
                        c->gpu, gpu);
    if (!want)
        return RAP_OK;
    /* every difference at once, each with the option that matches the file */
    char m[1600] = "";
    if (s->tables != want->tables)
        add_mismatch(m, sizeof m, "%d embedding tables, not %d (the plan's sparse columns)",
                     s->tables, want->tables);
    if (s->emb_dim != want->emb_dim)
        add_mismatch(m, sizeof m, "embedding dim %d, not %d (--emb-dim %d)", s->emb_dim,
                     want->emb_dim, s->emb_dim);
    rap_shape_widths(s->bot, s->n_bot, a, sizeof a);
    rap_shape_widths(want->bot, want->n_bot, b, sizeof b);
    if (strcmp(a, b))
        add_mismatch(m, sizeof m, "bottom MLP %s, not %s (--mlp-bot %s)", a, b, a);
    rap_shape_widths(s->top, s->n_top, a, sizeof a);
    rap_shape_widths(want->top, want->n_top, b, sizeof b);
    if (strcmp(a, b))
        add_mismatch(m, sizeof m, "top MLP %s, not %s (--mlp-top %s)", a, b, a);
    if (s->batch != want->batch)
        add_mismatch(m, sizeof m, "batch %lld, not %lld (--batch %lld)", (long long)s->batch,
                     (long long)want->batch, (long long)s->batch);
    if (s->precision != want->precision)
        add_mismatch(m, sizeof m, "precision %s, not %s (--precision %s)",
                     s->precision ? "bf16" : "fp32", want->precision ? "bf16" : "fp32",
                     s->precision ? "bf16" : "fp32");
    if (s->emb_dtype != want->emb_dtype)
        add_mismatch(m, sizeof m, "%s embedding tables, not %s (--emb-dtype %s; rap profile "
                     "capacity --emb-dtype %s measures the other)",
                     rap_emb_dtype_name((rap_emb_dtype)s->emb_dtype),
                     rap_emb_dtype_name((rap_emb_dtype)want->emb_dtype),
                     rap_emb_dtype_name((rap_emb_dtype)s->emb_dtype),
                     rap_emb_dtype_name((rap_emb_dtype)want->emb_dtype));
    const char *wo = rap_optimizer_name((rap_optimizer)want->optimizer);
    if (s->optimizer == RAP_CAP_OPT_UNRECORDED && want->optimizer == RAP_ROWWISE_ADAGRAD)
        add_mismatch(m, sizeof m, "an unrecorded optimizer (a file that records no optimizer "
                     "was made for sgd or adagrad), not %s (rap profile capacity --optimizer %s "
                     "measures it)", wo, wo);
    if (s->optimizer != RAP_CAP_OPT_UNRECORDED && s->optimizer != want->optimizer)
        add_mismatch(m, sizeof m, "optimizer %s, not %s (--optimizer %s; rap profile capacity "
                     "--optimizer %s measures it)", rap_optimizer_name((rap_optimizer)s->optimizer),
                     wo, rap_optimizer_name((rap_optimizer)s->optimizer), wo);
    if (m[0])
        return rap_fail(RAP_ERR_ARG, "capacity %s was made for %s", c->source, m);
    return RAP_OK;
}
