/*
 * plan_parse.c -- the plan language (docs/PLAN_LANGUAGE.md): a lexer and a
 * recursive-descent parser that turn TorchArrow-style statements such as
 *
 *   df["cat_0"] = functional.sigrid_hash(df["cat_0"].fill_null(0), 0, 1460)
 *
 * into the plan DAG through rap_plan_add_op / rap_plan_assign (plan.c, which
 * also derives every node's facts and checks the op preconditions). Nothing
 * in a plan is ever executed: the text is only read.
 *
 * One statement per line. The parser works line by line: the lexer turns a
 * line into tokens (ending with T_EOL), then the statement is parsed from
 * them. Expressions evaluate, at parse time, to a value: a column (a node of
 * the DAG), a number, a list of numbers, a string or a dtype. Every op
 * applied to a column appends one node; arithmetic on numbers alone is
 * folded. Errors are RAP_ERR_PLAN "source:line:col: what was expected".
 *
 * This file holds the tokens and the lexer, the parser's helpers, the op
 * table and the application of an op to its arguments, mapid files and the
 * entry points; the grammar of expressions and statements is plan_expr.c
 * (the shared types and declarations in plan_parse_internal.h).
 */
#include "core/core.h"
#include "prep/plan_parse_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const k_unsupported =
    "rap ops take one column and constants; see docs/PLAN_LANGUAGE.md";

/* ------------------------------------------------------------- op table */

/* Parameter names follow TorchArrow where it has the op (fill_null,
 * cast, sigrid_hash, bucketize, firstx; TorchArrow's own keyword names
 * value_col, col and num_to_copy are accepted too); torch for logit(eps)
 * and one_hot (num_classes); scipy for boxcox (lmbda: lambda is a Python
 * keyword); docs/OPS.md for the rest. */
static const op_spec g_ops[] = {
    {"fill_null", RAP_OP_FILL_NULL, 1, {"fill_value"}, {A_FLOAT}, {0}, 0},
    {"cast", RAP_OP_CAST, 1, {"dtype"}, {A_DTYPE}, {0}, 0},
    {"logit", RAP_OP_LOGIT, 1, {"eps"}, {A_FLOAT}, {0}, 0},
    {"boxcox", RAP_OP_BOXCOX, 1, {"lmbda"}, {A_FLOAT}, {0}, 0},
    {"log", RAP_OP_LOG, 0, {0}, {0}, {0}, 0},
    {"add", RAP_OP_ADD, 1, {"other"}, {A_FLOAT}, {0}, 0},
    {"mul", RAP_OP_MUL, 1, {"other"}, {A_FLOAT}, {0}, 0},
    {"onehot", RAP_OP_ONEHOT, 3, {"low", "high", "num_classes"}, {A_FLOAT, A_FLOAT, A_INT}, {0}, 0},
    {"bucketize", RAP_OP_BUCKETIZE, 1, {"borders"}, {A_BORDERS}, {0}, "value_col"},
    {"sigrid_hash", RAP_OP_SIGRID_HASH, 2, {"salt", "max_value"}, {A_INT, A_INT}, {0}, "value_col"},
    {"firstx", RAP_OP_FIRSTX, 1, {"x"}, {A_INT}, {"num_to_copy"}, "col"},
    {"clamp", RAP_OP_CLAMP, 2, {"lo", "hi"}, {A_FLOAT, A_FLOAT}, {0}, 0},
    {"ngram", RAP_OP_NGRAM, 1, {"n"}, {A_INT}, {0}, 0},
    {"mapid", RAP_OP_MAPID, 1, {"map"}, {A_MAP}, {0}, 0},
};
#define N_OPS ((int)(sizeof g_ops / sizeof g_ops[0]))

/* Records "source:line:col: msg" and returns RAP_ERR_PLAN. */
rap_status perr(const parser *P, int col, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rap_fail(RAP_ERR_PLAN, "%s:%d:%d: %s", P->plan->source, P->line, col, msg);
}

tok *cur(parser *P) { return &P->toks[P->pos]; }
tok *peek(parser *P, int ahead)
{
    int i = P->pos + ahead;
    return &P->toks[i < P->n_toks ? i : P->n_toks - 1];
}

bool is_punct(const tok *t, const char *p)
{
    return t->k == T_PUNCT && (int)strlen(p) == t->len && memcmp(t->s, p, (size_t)t->len) == 0;
}

bool is_ident(const tok *t, const char *name)
{
    return t->k == T_IDENT && (int)strlen(name) == t->len && memcmp(t->s, name, (size_t)t->len) == 0;
}

/* Writes how a token reads in a message: 'x', a string, end of line. */
const char *describe(const tok *t, char *buf, size_t n)
{
    if (t->k == T_EOL)
        snprintf(buf, n, "end of line");
    else if (t->len > 30)
        snprintf(buf, n, "'%.27s...'", t->s);
    else
        snprintf(buf, n, "'%.*s'", t->len, t->s);
    return buf;
}

/* Whether the line after the current one reads as the rest of a statement
 * (text that starts no statement: not df[...], del, a comment or blank). */
static bool next_line_continues(const parser *P)
{
    const char *q = P->next_line;
    if (!q)
        return false;
    while (*q == ' ' || *q == '\t')
        q++;
    return *q && *q != '\n' && *q != '\r' && *q != '#' && strncmp(q, "df[", 3) &&
           strncmp(q, "del ", 4);
}

/* Brackets ( and [ open before the current token of the line. */
static int open_brackets(const parser *P)
{
    int depth = 0;
    for (int i = 0; i < P->pos && i < P->n_toks; i++) {
        const tok *t = &P->toks[i];
        if (is_punct(t, "(") || is_punct(t, "["))
            depth++;
        else if ((is_punct(t, ")") || is_punct(t, "]")) && depth > 0)
            depth--;
    }
    return depth;
}

/* "expected WHAT, got TOKEN" at the current token. At the end of a line
 * with brackets still open whose next line reads as its rest, a hint: a
 * statement is one line. */
rap_status expected(parser *P, const char *what)
{
    char b[64];
    tok *t = cur(P);
    int open = t->k == T_EOL && next_line_continues(P) ? open_brackets(P) : 0;
    if (open > 0)
        return perr(P, t->col, "expected %s, got the end of the line with %d bracket%s open (a "
                    "statement is one line: join it with the next one)", what, open,
                    open == 1 ? "" : "s");
    if (t->k == T_EOL)
        return perr(P, t->col, "expected %s", what);
    return perr(P, t->col, "expected %s, got %s", what, describe(t, b, sizeof b));
}

rap_status expect_punct(parser *P, const char *p)
{
    if (!is_punct(cur(P), p)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", p);
        return expected(P, what);
    }
    P->pos++;
    return RAP_OK;
}

/* ------------------------------------------------------------- lexer */

static bool ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool ident_char(int c) { return ident_start(c) || (c >= '0' && c <= '9'); }
static bool digit(int c) { return c >= '0' && c <= '9'; }

static rap_status push_tok(parser *P, const tok *t)
{
    if (P->n_toks == P->cap_toks) {
        int cap = P->cap_toks ? 2 * P->cap_toks : 64;
        tok *n = rap_realloc(P->toks, sizeof *n * (size_t)cap, "plan tokens");
        if (!n)
            return RAP_ERR_NOMEM;
        P->toks = n;
        P->cap_toks = cap;
    }
    P->toks[P->n_toks++] = *t;
    return RAP_OK;
}

/* Two-character operators first, then one-character ones. Everything here
 * is a token so that unsupported operators get a clear message. */
static const char *const k_punct2[] = {"**", "//", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "<<", ">>"};
static const char k_punct1[] = "()[],.=+-*/%<>@&|^~:;{}!";

/* Scans a number at s (digits, optional fraction, optional exponent). */
static rap_status lex_number(parser *P, const char *s, tok *t, const char **end)
{
    const char *p = s;
    bool is_int = true;
    while (digit(*p))
        p++;
    if (*p == '.') {
        is_int = false;
        p++;
        while (digit(*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        is_int = false;
        const char *q = p + 1;
        if (*q == '+' || *q == '-')
            q++;
        if (!digit(*q))
            return perr(P, t->col, "malformed number '%.*s': expected digits after the exponent",
                        (int)(q - s), s);
        while (digit(*q))
            q++;
        p = q;
    }
    if (ident_char(*p) || *p == '.') {
        const char *q = p;
        while (ident_char(*q) || *q == '.')
            q++;
        return perr(P, t->col, "malformed number '%.*s'", (int)(q - s), s);
    }
    int len = (int)(p - s);
    if (len >= MAX_NUM_TEXT)
        return perr(P, t->col, "number too long (%d characters)", len);
    char buf[MAX_NUM_TEXT];
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    t->k = T_NUM;
    t->s = s;
    t->len = len;
    t->is_int = is_int;
    errno = 0;
    if (is_int) {
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE)
            return perr(P, t->col, "integer %s is out of range (64-bit signed)", buf);
        t->i = (int64_t)v;
        t->d = (double)v;
    } else {
        t->d = strtod(buf, NULL);
        if (!isfinite(t->d))
            return perr(P, t->col, "number %s is out of range", buf);
    }
    *end = p;
    return RAP_OK;
}

/* Tokenizes the line starting at s (up to '\n' or the end of the text) into
 * P->toks, ending with T_EOL; sets P->next_line. */
static rap_status lex_line(parser *P, const char *s)
{
    P->n_toks = 0;
    P->pos = 0;
    P->line_start = s;
    const char *p = s;
    for (;;) {
        tok t;
        memset(&t, 0, sizeof t);
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v')
            p++;
        if (*p == '#')
            while (*p && *p != '\n')
                p++;
        t.col = (int)(p - s) + 1;
        t.s = p;
        if (*p == 0 || *p == '\n') {
            P->next_line = *p ? p + 1 : NULL;
            t.k = T_EOL;
            return push_tok(P, &t);
        }
        if (ident_start((unsigned char)*p)) {
            while (ident_char((unsigned char)*p))
                p++;
            t.k = T_IDENT;
            t.len = (int)(p - t.s);
        } else if (digit(*p) || (*p == '.' && digit(p[1]))) {
            RAP_TRY(lex_number(P, p, &t, &p));
        } else if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (*p && *p != '\n' && *p != q) {
                if (*p == '\\')
                    return perr(P, (int)(p - s) + 1, "escape sequences are not supported in strings");
                p++;
            }
            if (*p != q)
                return perr(P, t.col, "unterminated string: expected a closing %c", q);
            p++;
            t.k = T_STR;
            t.len = (int)(p - t.s);
        } else {
            t.k = T_PUNCT;
            for (size_t k = 0; k < sizeof k_punct2 / sizeof k_punct2[0]; k++)
                if (p[0] == k_punct2[k][0] && p[1] == k_punct2[k][1])
                    t.len = 2;
            if (!t.len && strchr(k_punct1, *p))
                t.len = 1;
            if (!t.len) {
                unsigned char c = (unsigned char)*p;
                if (c >= 32 && c < 127)
                    return perr(P, t.col, "unexpected character '%c'", c);
                return perr(P, t.col, "unexpected byte 0x%02x (plans are ASCII text outside comments and strings)", c);
            }
            p += t.len;
        }
        RAP_TRY(push_tok(P, &t));
    }
}

/* ------------------------------------------------------------- helpers */

/* Sets v's source span from token b to the token before the current one. */
void span(parser *P, val *v, int b)
{
    const tok *first = &P->toks[b];
    const tok *last = &P->toks[P->pos > b ? P->pos - 1 : b];
    v->col = first->col;
    v->src = first->s;
    v->len = (int)(last->s + last->len - first->s);
}

const char *describe_val(const val *v, char *buf, size_t n)
{
    switch (v->k) {
    case V_COL: snprintf(buf, n, "a column"); break;
    case V_LIST: snprintf(buf, n, "a list"); break;
    default:
        if (v->len > 40)
            snprintf(buf, n, "%.37s...", v->src);
        else
            snprintf(buf, n, "%.*s", v->len, v->src);
    }
    return buf;
}

static int min3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

/* Edit distance (case-insensitive), for "did you mean". */
static int edit_distance(const char *a, int la, const char *b)
{
    int lb = (int)strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int ca = a[i - 1] | 0x20, cb = b[j - 1] | 0x20;
            d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (ca != cb));
        }
    return d[la][lb];
}

const op_spec *find_op(const tok *t)
{
    for (int k = 0; k < N_OPS; k++)
        if (is_ident(t, g_ops[k].name))
            return &g_ops[k];
    return NULL;
}

rap_status unknown_op(parser *P, const tok *t)
{
    int best = -1, bd = 99;
    for (int k = 0; k < N_OPS; k++) {
        int d = edit_distance(t->s, t->len, g_ops[k].name);
        if (d < bd) {
            bd = d;
            best = k;
        }
    }
    int limit = t->len <= 4 ? 1 : t->len <= 8 ? 2 : 3;
    if (best >= 0 && bd <= limit)
        return perr(P, t->col, "unknown operation \"%.*s\" (did you mean %s?)", t->len, t->s,
                    g_ops[best].name);
    char list[400] = "";
    for (int k = 0; k < N_OPS; k++) {
        strcat(list, g_ops[k].name);
        if (k + 1 < N_OPS)
            strcat(list, ", ");
    }
    return perr(P, t->col, "unknown operation \"%.*s\" (known: %s)", t->len, t->s, list);
}

/* Line number (> P->line) of the first later statement assigning column
 * name, or 0. A plain text scan: later lines have not been parsed. */
static int defined_later(const parser *P, const char *name)
{
    int line = P->line + 1;
    size_t nl = strlen(name);
    for (const char *s = P->next_line; s && *s; line++) {
        const char *p = s;
        while (*p == ' ' || *p == '\t')
            p++;
        if (p[0] == 'd' && p[1] == 'f' && !ident_char((unsigned char)p[2])) {
            p += 2;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == '[') {
                p++;
                while (*p == ' ' || *p == '\t')
                    p++;
                char q = *p;
                if ((q == '"' || q == '\'') && strncmp(p + 1, name, nl) == 0 && p[1 + nl] == q) {
                    p += nl + 2;
                    while (*p == ' ' || *p == '\t')
                        p++;
                    if (*p == ']') {
                        p++;
                        while (*p == ' ' || *p == '\t')
                            p++;
                        if (p[0] == '=' && p[1] != '=')
                            return line;
                    }
                }
            }
        }
        s = strchr(s, '\n');
        if (s)
            s++;
    }
    return 0;
}

/* A name the plan never defined, read over the input schema: what the
 * schema holds under it (its label, a skipped field), or that it holds
 * nothing so called, and the columns it does have. */
static rap_status schema_column(parser *P, int col, const char *name)
{
    const rap_input_schema *s = P->schema;
    int f = rap_input_schema_find(s, name);
    if (f >= 0 && s->cols[f].kind == RAP_COL_LABEL)
        return perr(P, col, "undefined column \"%s\" (in the schema %s, line %d, it is the "
                    "label: the model's target, not an input of the plan)", name, s->source,
                    s->cols[f].line);
    if (f >= 0)
        return perr(P, col, "undefined column \"%s\" (the schema %s skips it, line %d)", name,
                    s->source, s->cols[f].line);
    char have[600] = "";
    size_t k = 0;
    for (int i = 0; i < s->n_cols && k + 80 < sizeof have; i++) {
        const rap_schema_col *c = &s->cols[i];
        if (c->kind == RAP_COL_DENSE || c->kind == RAP_COL_SPARSE)
            k += (size_t)snprintf(have + k, sizeof have - k, "%s%s", k ? ", " : "", c->name);
    }
    return perr(P, col, "undefined column \"%s\" (the schema %s has no column \"%s\"; its "
                "inputs: %s)", name, s->source, name, have[0] ? have : "none");
}

rap_status undefined_column(parser *P, int col, const char *name)
{
    int later = defined_later(P, name);
    int del = 0;
    for (int i = 0; i < P->n_deleted; i++)
        if (strcmp(P->deleted[i].name, name) == 0)
            del = P->deleted[i].node;
    char hint[80] = "";
    if (del && later)
        snprintf(hint, sizeof hint, " (deleted at line %d, defined again at line %d)", del, later);
    else if (del)
        snprintf(hint, sizeof hint, " (deleted at line %d)", del);
    else if (later)
        snprintf(hint, sizeof hint, " (defined later at line %d)", later);
    if (!del && !later && P->schema)
        return schema_column(P, col, name);
    return perr(P, col, "undefined column \"%s\"%s", name, hint);
}

/* Parses `[ "name" ]` after df (the current token is '['); copies the name. */
rap_status parse_column_name(parser *P, char *name, size_t cap, int *name_col)
{
    RAP_TRY(expect_punct(P, "["));
    tok *t = cur(P);
    if (t->k != T_STR)
        return expected(P, "a column name in quotes");
    int n = t->len - 2;
    *name_col = t->col;
    if (n < 1)
        return perr(P, t->col, "column name must not be empty");
    if ((size_t)n >= cap)
        return perr(P, t->col, "column name too long (%d characters, at most %zu)", n, cap - 1);
    memcpy(name, t->s + 1, (size_t)n);
    name[n] = 0;
    P->pos++;
    return expect_punct(P, "]");
}

rap_status add_node(parser *P, rap_node *n, int *idx)
{
    RAP_TRY(rap_plan_add_op(P->plan, n, idx));
    return RAP_OK;
}

/* ------------------------------------------------------------- mapid files */

/* Largest mapid file read (1 GiB: some 50 million ids). */
#define MAX_MAP_BYTES ((int64_t)1 << 30)

/* Reads a file of one integer per line (blank lines and '#' lines skipped)
 * into a new array *out (n_out ids). Errors name the file and its line, and
 * the plan position that asked for it (col). */
static rap_status read_map_file(parser *P, int col, const val *v, int64_t **out, int64_t *n_out)
{
    char rel[1024], path[2048];
    if (v->str_len < 1)
        return perr(P, col, "mapid expects a file name, got an empty string");
    if (v->str_len >= (int)sizeof rel)
        return perr(P, col, "mapid file name too long");
    memcpy(rel, v->str, (size_t)v->str_len);
    rel[v->str_len] = 0;
    if (rel[0] == '/' || !P->base_dir[0])
        snprintf(path, sizeof path, "%s", rel);
    else
        snprintf(path, sizeof path, "%s/%s", P->base_dir, rel);
    FILE *f = fopen(path, "r");
    if (!f)
        return perr(P, col, "cannot open mapid file \"%s\": %s", path, strerror(errno));
    /* a device or a fifo would never end (or never start): regular files only */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > MAX_MAP_BYTES) {
        fclose(f);
        return perr(P, col, "mapid file \"%s\" is not a regular file of at most %lld bytes",
                    path, (long long)MAX_MAP_BYTES);
    }
    int64_t n = 0, cap = 1024;
    int64_t *m = rap_malloc(sizeof *m * (size_t)cap, "mapid map");
    if (!m) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int ln = 0;
    rap_status s = RAP_OK;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        ln++;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            *--e = 0;
        if (*p == 0 || *p == '#')
            continue;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || *end || errno == ERANGE) {
            s = rap_fail(RAP_ERR_PLAN, "%s:%d: expected one integer per line, got \"%.40s\" (mapid map of %s:%d:%d)",
                         path, ln, p, P->plan->source, P->line, col);
            break;
        }
        if (n == cap) {
            cap *= 2;
            int64_t *g = rap_realloc(m, sizeof *m * (size_t)cap, "mapid map");
            if (!g) {
                s = RAP_ERR_NOMEM;
                break;
            }
            m = g;
        }
        m[n++] = (int64_t)x;
    }
    if (s == RAP_OK && ferror(f))
        s = rap_fail(RAP_ERR_PLAN, "%s:%d:%d: reading mapid file \"%s\" failed", P->plan->source,
                     P->line, col, path);
    if (s == RAP_OK && n == 0)
        s = rap_fail(RAP_ERR_PLAN, "%s: mapid file holds no ids (mapid map of %s:%d:%d)", path,
                     P->plan->source, P->line, col);
    free(line);
    fclose(f);
    if (s != RAP_OK) {
        rap_free(m);
        return s;
    }
    *out = m;
    *n_out = n;
    return RAP_OK;
}

/* ------------------------------------------------------------- ops */

static void param_list(const op_spec *op, bool with_input, char *buf, size_t n)
{
    buf[0] = 0;
    size_t used = 0;
    if (with_input)
        used += (size_t)snprintf(buf + used, n - used, "input");
    for (int k = 0; k < op->np && used < n; k++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", op->pn[k]);
}

/* Converts a number argument for a float parameter, rejecting integers that
 * a double would round. */
static rap_status arg_float(parser *P, const op_spec *op, int k, const val *v, double *out)
{
    char b[64];
    if (v->k != V_NUM)
        return perr(P, v->col, "%s expects a number for %s, got %s%s%s%s", op->name, op->pn[k],
                    describe_val(v, b, sizeof b), v->k == V_COL ? " (" : "",
                    v->k == V_COL ? k_unsupported : "", v->k == V_COL ? ")" : "");
    if (v->n.is_int && fabs((double)v->n.i) > EXACT_INT_LIMIT)
        return perr(P, v->col, "%s expects %s within +-2^53 (exact as a double), got %lld", op->name,
                    op->pn[k], (long long)v->n.i);
    *out = v->n.d;
    return RAP_OK;
}

static rap_status arg_int(parser *P, const op_spec *op, int k, const val *v, int64_t *out)
{
    char b[64];
    if (v->k != V_NUM || !v->n.is_int)
        return perr(P, v->col, "%s expects an integer for %s, got %s%s%s%s", op->name, op->pn[k],
                    describe_val(v, b, sizeof b), v->k == V_COL ? " (" : "",
                    v->k == V_COL ? k_unsupported : "", v->k == V_COL ? ")" : "");
    *out = v->n.i;
    return RAP_OK;
}

/* Applies op to input column `in` with the arguments given (for the method
 * style, args excludes the receiver; for the functional style, args[0] or
 * input= is the input). name is the op's name token (the node's position).
 * Appends the node and returns it as a column value in *out. */
rap_status apply_op(parser *P, const tok *name, const op_spec *op, bool functional,
                           const val *receiver, arg *args, int nargs, val *out)
{
    int nslots = op->np + (functional ? 1 : 0);
    const val *slot[4] = {0};
    char plist[160];
    param_list(op, functional, plist, sizeof plist);
    /* bind positional then keyword arguments to slots */
    for (int a = 0; a < nargs; a++) {
        int s = -1;
        if (!args[a].kw) {
            s = a;
        } else {
            const tok *kw = args[a].kw;
            if (functional && (is_ident(kw, "input") || (op->in_alias && is_ident(kw, op->in_alias))))
                s = 0;
            for (int k = 0; k < op->np && s < 0; k++)
                if (is_ident(kw, op->pn[k]) || (op->alias[k] && is_ident(kw, op->alias[k])))
                    s = k + (functional ? 1 : 0);
            if (s < 0)
                return perr(P, kw->col, "%s has no parameter \"%.*s\" (parameters: %s)", op->name,
                            kw->len, kw->s, plist[0] ? plist : "none");
        }
        if (s < nslots && slot[s])
            return perr(P, args[a].kw->col, "%s got two values for %s", op->name,
                        functional && s == 0 ? "input" : op->pn[s - (functional ? 1 : 0)]);
        if (s < nslots)
            slot[s] = &args[a].v;
    }
    if (nargs != nslots) {
        if (nslots == 0)
            return perr(P, name->col, "%.*s expects no arguments, got %d", name->len, name->s, nargs);
        return perr(P, name->col, "%s expects %d argument%s (%s), got %d", op->name, nslots,
                    nslots == 1 ? "" : "s", plist, nargs);
    }
    const val *in = functional ? slot[0] : receiver;
    const val *const *par = functional ? slot + 1 : slot;
    char b[64];
    if (in->k != V_COL)
        return perr(P, in->col, "%s expects a column as input, got %s", op->name,
                    describe_val(in, b, sizeof b));

    rap_node n;
    memset(&n, 0, sizeof n);
    n.op = op->op;
    n.input = in->node;
    n.line = P->line;
    n.col = name->col;
    int nf = 0, ni = 0;
    double *borders = NULL;
    int64_t *map = NULL;
    rap_status s = RAP_OK;
    for (int k = 0; k < op->np && s == RAP_OK; k++) {
        const val *v = par[k];
        switch (op->pt[k]) {
        case A_FLOAT:
            s = arg_float(P, op, k, v, &n.f[nf++]);
            break;
        case A_INT:
            s = arg_int(P, op, k, v, &n.i[ni++]);
            break;
        case A_DTYPE:
            if (v->k == V_DTYPE) {
                n.i[ni++] = v->dtype;
            } else if (v->k == V_STR && v->str_len == 5 && memcmp(v->str, "int64", 5) == 0) {
                n.i[ni++] = RAP_SPARSE;
            } else if (v->k == V_STR && v->str_len == 7 && memcmp(v->str, "float32", 7) == 0) {
                n.i[ni++] = RAP_DENSE;
            } else {
                s = perr(P, v->col, "%s expects dt.int64 or dt.float32 for %s, got %s", op->name,
                         op->pn[k], describe_val(v, b, sizeof b));
            }
            break;
        case A_BORDERS:
            if (v->k != V_LIST) {
                s = perr(P, v->col, "%s expects a list of numbers for %s, got %s", op->name,
                         op->pn[k], describe_val(v, b, sizeof b));
                break;
            }
            borders = rap_malloc(sizeof *borders * (size_t)(v->nlist + 1), "bucketize borders");
            if (!borders) {
                s = RAP_ERR_NOMEM;
                break;
            }
            for (int j = 0; j < v->nlist; j++)
                borders[j] = P->elems[v->list0 + j].n.d;
            n.borders = borders;
            n.n_aux = v->nlist;
            break;
        case A_MAP:
            if (v->k == V_STR) {
                s = read_map_file(P, v->col, v, &map, &n.n_aux);
            } else if (v->k == V_LIST) {
                map = rap_malloc(sizeof *map * (size_t)(v->nlist + 1), "mapid map");
                if (!map) {
                    s = RAP_ERR_NOMEM;
                    break;
                }
                for (int j = 0; j < v->nlist && s == RAP_OK; j++) {
                    const list_elem *e = &P->elems[v->list0 + j];
                    if (!e->n.is_int)
                        s = perr(P, e->col, "%s expects integer ids in %s, got %.*s", op->name,
                                 op->pn[k], e->len, e->src);
                    map[j] = e->n.i;
                }
                n.n_aux = v->nlist;
            } else {
                s = perr(P, v->col, "%s expects a list of integers or a file name for %s, got %s",
                         op->name, op->pn[k], describe_val(v, b, sizeof b));
            }
            n.map = map;
            break;
        }
    }
    int idx = -1;
    if (s == RAP_OK)
        s = add_node(P, &n, &idx); /* copies borders/map */
    rap_free(borders);
    rap_free(map);
    if (s != RAP_OK)
        return s;
    out->k = V_COL;
    out->node = idx;
    return RAP_OK;
}

/* ------------------------------------------------------------- entry points */

/* Warns, once per op, about nodes no output column depends on. */
static void warn_unused(const rap_plan *p)
{
    for (int i = 0; i < p->n_nodes; i++) {
        const rap_node *n = &p->nodes[i];
        if (n->op != RAP_OP_INPUT && !n->live)
            rap_warn("%s:%d: result of %s is never used", p->source, n->line, rap_op_name(n->op));
    }
}

/* Parses text into the raw-columns plan `plan` (taken over: freed on
 * failure); schema (may be NULL) only words messages. */
static rap_status parse_into(const char *text, const char *source_name, rap_plan *plan,
                             const rap_input_schema *schema, rap_plan **out)
{
    parser P;
    memset(&P, 0, sizeof P);
    P.plan = plan;
    P.schema = schema;
    rap_status s = RAP_OK;
    /* directory of the plan, for mapid files */
    char dir[1024] = "";
    const char *slash = source_name ? strrchr(source_name, '/') : NULL;
    if (slash) {
        size_t n = (size_t)(slash - source_name);
        if (n == 0)
            n = 1; /* "/x.plan" -> "/" */
        if (n >= sizeof dir)
            n = sizeof dir - 1;
        memcpy(dir, source_name, n);
        dir[n] = 0;
    }
    P.base_dir = dir;
    P.text = text;
    const char *line = text;
    P.line = 1;
    while (line && s == RAP_OK) {
        P.n_elems = 0;
        P.depth = 0;
        s = lex_line(&P, line);
        if (s == RAP_OK)
            s = parse_statement(&P);
        line = P.next_line;
        P.line++;
    }
    rap_free(P.toks);
    rap_free(P.elems);
    rap_free(P.deleted);
    if (s != RAP_OK) {
        rap_plan_free(P.plan);
        return s;
    }
    rap_plan_finish(P.plan);
    warn_unused(P.plan);
    *out = P.plan;
    return RAP_OK;
}

rap_status rap_plan_parse(const char *text, const char *source_name, rap_schema schema,
                          rap_plan **out)
{
    *out = NULL;
    if (!text)
        return rap_fail(RAP_ERR_ARG, "rap_plan_parse: text is NULL");
    rap_plan *p;
    RAP_TRY(rap_plan_create(schema, source_name, &p));
    return parse_into(text, source_name, p, NULL, out);
}

rap_status rap_plan_parse_schema(const char *text, const char *source_name,
                                 const rap_input_schema *s, rap_plan **out)
{
    *out = NULL;
    if (!text || !s)
        return rap_fail(RAP_ERR_ARG, "rap_plan_parse_schema: text or schema is NULL");
    rap_plan *p;
    RAP_TRY(rap_plan_create_schema(s, source_name, &p));
    return parse_into(text, source_name, p, s, out);
}

/* Reads plan file path into *text (NUL-terminated, the caller frees it).
 * Errors: RAP_ERR_IO, RAP_ERR_PLAN (a NUL byte), RAP_ERR_NOMEM. */
static rap_status read_plan(const char *path, char **text)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rap_fail(RAP_ERR_IO, "%s: cannot open plan: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = rap_malloc(cap + 1, "plan text");
    if (!buf) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        char *g = rap_realloc(buf, cap + 1, "plan text");
        if (!g) {
            rap_free(buf);
            fclose(f);
            return RAP_ERR_NOMEM;
        }
        buf = g;
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) {
        rap_free(buf);
        return rap_fail(RAP_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    if (memchr(buf, 0, n)) {
        rap_free(buf);
        return rap_fail(RAP_ERR_PLAN, "%s: holds a NUL byte: expected a text plan", path);
    }
    *text = buf;
    return RAP_OK;
}

rap_status rap_plan_load(const char *path, rap_schema schema, rap_plan **out)
{
    *out = NULL;
    char *buf;
    RAP_TRY(read_plan(path, &buf));
    rap_status s = rap_plan_parse(buf, path, schema, out);
    rap_free(buf);
    return s;
}

rap_status rap_plan_load_schema(const char *path, const rap_input_schema *schema,
                                rap_plan **out)
{
    *out = NULL;
    char *buf;
    RAP_TRY(read_plan(path, &buf));
    rap_status s = rap_plan_parse_schema(buf, path, schema, out);
    rap_free(buf);
    return s;
}
