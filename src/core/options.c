/* options.c -- the table-driven option parser (see options.h). */
#include "core/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TABLE RAP_OPT_MAX_ROWS
static bool g_given[MAX_TABLE];

static void *field(const rap_opt *o, void *settings) { return (char *)settings + o->offset; }

/* Index of `value` among "a|b|c", or -1. */
static int enum_index(const char *choices, const char *value)
{
    int i = 0;
    size_t vl = strlen(value);
    for (const char *c = choices; *c; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == vl && strncmp(c, value, len) == 0)
            return i;
        if (!bar)
            break;
        c = bar + 1;
    }
    return -1;
}

static void enum_name(const char *choices, int idx, char *out, size_t n)
{
    const char *c = choices;
    for (int i = 0; i < idx && c; i++) {
        c = strchr(c, '|');
        if (c)
            c++;
    }
    if (!c) {
        snprintf(out, n, "?");
        return;
    }
    const char *bar = strchr(c, '|');
    size_t len = bar ? (size_t)(bar - c) : strlen(c);
    snprintf(out, n, "%.*s", (int)len, c);
}

static rap_status set_value(const rap_opt *o, const char *v, void *settings)
{
    char *end = NULL;
    switch (o->type) {
    case RAP_OPT_INT: {
        errno = 0;
        double d = strtod(v, &end); /* accepts 1e6 */
        if (end == v || *end || errno || d != floor(d))
            return rap_fail(RAP_ERR_ARG, "--%s expects an integer, got \"%s\"", o->name, v);
        if (d < o->min || d > o->max)
            return rap_fail(RAP_ERR_ARG, "--%s must be in [%.0f, %.0f], got %s", o->name,
                            o->min, o->max, v);
        *(int64_t *)field(o, settings) = (int64_t)d;
        return RAP_OK;
    }
    case RAP_OPT_DOUBLE: {
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(d))
            return rap_fail(RAP_ERR_ARG, "--%s expects a number, got \"%s\"", o->name, v);
        if (d < o->min || d > o->max)
            return rap_fail(RAP_ERR_ARG, "--%s must be in [%g, %g], got %s", o->name, o->min,
                            o->max, v);
        *(double *)field(o, settings) = d;
        return RAP_OK;
    }
    case RAP_OPT_STRING:
        if (strlen(v) >= RAP_OPT_STR)
            return rap_fail(RAP_ERR_ARG, "--%s: value longer than %d characters", o->name,
                            RAP_OPT_STR - 1);
        snprintf((char *)field(o, settings), RAP_OPT_STR, "%s", v);
        return RAP_OK;
    case RAP_OPT_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
            *(bool *)field(o, settings) = true;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
            *(bool *)field(o, settings) = false;
        else
            return rap_fail(RAP_ERR_ARG, "--%s expects true or false, got \"%s\"", o->name, v);
        return RAP_OK;
    case RAP_OPT_ENUM: {
        int i = enum_index(o->choices, v);
        if (i < 0)
            return rap_fail(RAP_ERR_ARG, "--%s expects one of %s, got \"%s\"", o->name,
                            o->choices, v);
        *(int *)field(o, settings) = i;
        return RAP_OK;
    }
    }
    return rap_fail(RAP_ERR_INTERNAL, "option %s: bad type", o->name);
}

rap_status rap_opts_defaults(const rap_opt *table, int n, unsigned cmd, void *settings)
{
    for (int i = 0; i < n && i < MAX_TABLE; i++) {
        g_given[i] = false;
        if (!(table[i].cmds & cmd))
            continue;
        rap_status s = set_value(&table[i], table[i].def, settings);
        if (s != RAP_OK)
            return rap_fail_context(RAP_ERR_INTERNAL, "default of --%s", table[i].name);
    }
    return RAP_OK;
}

/* Levenshtein distance, for "did you mean". */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
            d[i][j] = c < x ? (c < y ? c : y) : (x < y ? x : y);
        }
    return d[la][lb];
}

static int find(const rap_opt *table, int n, unsigned cmd, const char *name)
{
    for (int i = 0; i < n; i++)
        if ((table[i].cmds & cmd) && !strcmp(table[i].name, name))
            return i;
    return -1;
}

rap_status rap_opts_parse(const rap_opt *table, int n, unsigned cmd, int argc, char **argv,
                          void *settings)
{
    for (int a = 0; a < argc; a++) {
        const char *arg = argv[a];
        if (strncmp(arg, "--", 2) != 0 || !arg[2])
            return rap_fail(RAP_ERR_ARG, "unexpected argument \"%s\" (options start with --)", arg);
        char name[128];
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name)
            return rap_fail(RAP_ERR_ARG, "unknown option \"%s\"", arg);
        memcpy(name, arg + 2, len);
        name[len] = 0;
        int i = find(table, n, cmd, name);
        bool negated = false;
        if (i < 0 && !strncmp(name, "no-", 3)) {
            i = find(table, n, cmd, name + 3);
            if (i >= 0 && table[i].type == RAP_OPT_BOOL)
                negated = true;
            else
                i = -1;
        }
        if (i < 0) {
            int best = -1, bd = 99;
            for (int j = 0; j < n; j++) {
                if (!(table[j].cmds & cmd))
                    continue;
                int d = edit_distance(name, table[j].name);
                if (d < bd) {
                    bd = d;
                    best = j;
                }
            }
            if (best >= 0 && bd <= 3)
                return rap_fail(RAP_ERR_ARG, "unknown option --%s (did you mean --%s?)", name,
                                table[best].name);
            return rap_fail(RAP_ERR_ARG, "unknown option --%s (see --help)", name);
        }
        const rap_opt *o = &table[i];
        const char *value;
        if (o->type == RAP_OPT_BOOL && !eq) {
            value = negated ? "false" : "true";
        } else if (negated) {
            return rap_fail(RAP_ERR_ARG, "--no-%s takes no value", o->name);
        } else if (eq) {
            value = eq + 1;
        } else {
            if (a + 1 >= argc)
                return rap_fail(RAP_ERR_ARG, "--%s expects a value (%s)", o->name,
                                o->metavar ? o->metavar : "VALUE");
            value = argv[++a];
        }
        RAP_TRY(set_value(o, value, settings));
        if (i < MAX_TABLE)
            g_given[i] = true;
    }
    return RAP_OK;
}

bool rap_opts_given(const rap_opt *table, int n, const char *name)
{
    /* every row of that name: the one the command took is among them (the
     * others were cleared by rap_opts_defaults and cannot be set) */
    for (int i = 0; i < n && i < MAX_TABLE; i++)
        if (!strcmp(table[i].name, name) && g_given[i])
            return true;
    return false;
}

void rap_opts_usage(const rap_opt *table, int n, unsigned cmd, FILE *f)
{
    for (int i = 0; i < n; i++) {
        const rap_opt *o = &table[i];
        if (!(o->cmds & cmd))
            continue;
        char left[96];
        if (o->type == RAP_OPT_BOOL)
            snprintf(left, sizeof left, "--%s", o->name);
        else if (o->type == RAP_OPT_ENUM)
            snprintf(left, sizeof left, "--%s %s", o->name, o->choices);
        else
            snprintf(left, sizeof left, "--%s %s", o->name, o->metavar ? o->metavar : "VALUE");
        fprintf(f, "  %-28s %s", left, o->help);
        if (o->def && o->def[0] && strcmp(o->def, "false") != 0)
            fprintf(f, " [%s]", o->def);
        fprintf(f, "\n");
    }
}

/* The value of option o in settings, as it would be typed, into v (n bytes). */
static void format_value(const rap_opt *o, const void *settings, char *v, size_t n)
{
    const void *p = (const char *)settings + o->offset;
    switch (o->type) {
    case RAP_OPT_INT: snprintf(v, n, "%lld", (long long)*(const int64_t *)p); break;
    case RAP_OPT_DOUBLE: snprintf(v, n, "%g", *(const double *)p); break;
    case RAP_OPT_STRING: snprintf(v, n, "%s", (const char *)p); break;
    case RAP_OPT_BOOL: snprintf(v, n, "%s", *(const bool *)p ? "true" : "false"); break;
    case RAP_OPT_ENUM: enum_name(o->choices, *(const int *)p, v, n); break;
    }
}

void rap_opts_print(const rap_opt *table, int n, unsigned cmd, const void *settings,
                    const char *prefix, FILE *f)
{
    for (int i = 0; i < n; i++) {
        const rap_opt *o = &table[i];
        if (!(o->cmds & cmd))
            continue;
        char v[RAP_OPT_STR + 8];
        format_value(o, settings, v, sizeof v);
        fprintf(f, "%s%-16s = %s%s\n", prefix, o->name, v[0] ? v : "\"\"",
                (i < MAX_TABLE && g_given[i]) ? "" : "  (default)");
    }
}

int rap_opts_print_given(const rap_opt *table, int n, unsigned cmd, const void *settings,
                         const char *prefix, int width, FILE *f)
{
    int col = 0, shown = 0;
    for (int i = 0; i < n && i < MAX_TABLE; i++) {
        const rap_opt *o = &table[i];
        if (!(o->cmds & cmd) || !g_given[i])
            continue;
        char v[RAP_OPT_STR + 8], item[RAP_OPT_STR + 80];
        format_value(o, settings, v, sizeof v);
        int len = snprintf(item, sizeof item, "%s=%s", o->name, v[0] ? v : "\"\"");
        if (col > 0 && col + 1 + len > width) {
            fputc('\n', f);
            col = 0;
        }
        col += col ? fprintf(f, " %s", item) : fprintf(f, "%s%s", prefix, item);
        shown++;
    }
    if (col > 0)
        fputc('\n', f);
    return shown;
}
