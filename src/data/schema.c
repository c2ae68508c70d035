/* schema.c -- the input schema (rap.h, section "input schema";
 * docs/SCHEMA.md): the schema file, the built-in Criteo schema, the format
 * check, the header check and the string hash. */
#include "core/core.h"
#include "data/parse_algo.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CRITEO_SOURCE "<built-in criteo>"

/* ------------------------------------------------------------- names */

const char *rap_col_enc_name(rap_col_enc e)
{
    switch (e) {
    case RAP_ENC_LABEL01: return "01";
    case RAP_ENC_INT32: return "int32";
    case RAP_ENC_HEX32: return "hex32";
    case RAP_ENC_FLOAT: return "float";
    case RAP_ENC_HEX64: return "hex";
    case RAP_ENC_DEC64: return "dec";
    case RAP_ENC_STR: return "str";
    default: return "";
    }
}

static const char *kind_name(rap_col_kind k)
{
    switch (k) {
    case RAP_COL_LABEL: return "label";
    case RAP_COL_DENSE: return "dense";
    case RAP_COL_SPARSE: return "sparse";
    default: return "skip";
    }
}

/* Separators that are written as words in a schema file. */
static const struct {
    const char *word;
    char c;
} g_sep_words[] = {{"space", ' '}, {"tab", '\t'},  {"comma", ','}, {"semicolon", ';'},
                   {"pipe", '|'},  {"hash", '#'},  {"colon", ':'}};

uint64_t rap_hash_str(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int rap_input_convert(rap_col_enc enc, const char *s, size_t n, float *fv, int64_t *iv)
{
    float f = 0.0f;
    int64_t v = 0;
    if (enc <= RAP_ENC_NONE || enc >= RAP_ENC_COUNT || n == 0 || n > INT32_MAX)
        return enc == RAP_ENC_LABEL01 ? RAP_REJ_LABEL : RAP_REJ_CAT;
    int cls = pg_item((int)enc, (const uint8_t *)s, (int32_t)n, 0, &f, &v);
    if (cls != PG_OK)
        return pg_key_reason(pg_key(cls, 0));
    if (fv)
        *fv = f;
    if (iv)
        *iv = v;
    return -1;
}

/* ------------------------------------------------------------ objects */

static rap_input_schema *schema_new(const char *source)
{
    rap_input_schema *s = rap_calloc(sizeof *s, "input schema");
    if (!s)
        return NULL;
    snprintf(s->source, sizeof s->source, "%s", source ? source : "<schema>");
    s->label = -1;
    s->delimiter = '\t';
    s->header = false;
    snprintf(s->null_token, sizeof s->null_token, "null");
    s->max_list = RAP_MAX_LIST_DEFAULT;
    return s;
}

void rap_input_schema_free(rap_input_schema *s) { rap_free(s); }

/* Appends a column; numbers it among its kind. The caller checked room. */
static void add_col(rap_input_schema *s, const char *name, rap_col_kind kind, rap_col_enc enc,
                    char sep, int line)
{
    rap_schema_col *c = &s->cols[s->n_cols];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->kind = kind;
    c->enc = enc;
    c->list_sep = sep;
    c->line = line;
    c->col = kind == RAP_COL_DENSE ? s->n_dense++ : kind == RAP_COL_SPARSE ? s->n_sparse++ : -1;
    if (kind == RAP_COL_LABEL)
        s->label = s->n_cols;
    if (sep)
        s->n_lists++;
    s->n_cols++;
}

rap_status rap_input_schema_criteo(rap_input_schema **out)
{
    *out = NULL;
    rap_input_schema *s = schema_new(CRITEO_SOURCE);
    if (!s)
        return RAP_ERR_NOMEM;
    char name[32];
    add_col(s, "label", RAP_COL_LABEL, RAP_ENC_LABEL01, 0, 0);
    for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
        snprintf(name, sizeof name, "int_%d", j);
        add_col(s, name, RAP_COL_DENSE, RAP_ENC_INT32, 0, 0);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        snprintf(name, sizeof name, "cat_%d", j);
        add_col(s, name, RAP_COL_SPARSE, RAP_ENC_HEX32, 0, 0);
    }
    *out = s;
    return RAP_OK;
}

/* ------------------------------------------------------------ the file */

typedef struct {
    const char *s;
    int len, col; /* col 1-based */
} token;

/* Splits line[0, n) (no '\n') into at most max tokens (space or tab
 * separated, '#' starts a comment). Returns the count, max + 1 when there
 * are more. */
static int tokenize(const char *line, int n, token *t, int max)
{
    int k = 0, i = 0;
    while (i < n) {
        while (i < n && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i >= n || line[i] == '#')
            break;
        int a = i;
        while (i < n && line[i] != ' ' && line[i] != '\t' && line[i] != '#')
            i++;
        if (k == max)
            return max + 1;
        t[k++] = (token){line + a, i - a, a + 1};
    }
    return k;
}

static bool tok_is(const token *t, const char *w)
{
    return (size_t)t->len == strlen(w) && memcmp(t->s, w, (size_t)t->len) == 0;
}

/* "file:line:col: expected WHAT, got "TOKEN"". */
static rap_status bad(const char *src, int line, const token *t, const char *what)
{
    return rap_fail(RAP_ERR_ARG, "%s:%d:%d: expected %s, got \"%.*s\"", src, line, t->col, what,
                    t->len > 40 ? 40 : t->len, t->s);
}

static rap_status parse_sep(const char *src, int line, const token *t, char *sep)
{
    for (size_t i = 0; i < sizeof g_sep_words / sizeof g_sep_words[0]; i++) {
        if (tok_is(t, g_sep_words[i].word)) {
            *sep = g_sep_words[i].c;
            return RAP_OK;
        }
    }
    unsigned c = t->len == 1 ? (unsigned char)t->s[0] : 0;
    if (c > 0x20 && c < 0x7f && c != '"') {
        *sep = (char)c;
        return RAP_OK;
    }
    return bad(src, line, t, "a list separator: one printable byte other than '\"' (or space, "
                             "tab, comma, semicolon, pipe, hash, colon)");
}

/* The encoding token of a column of kind k (NULL: none given). */
static rap_status parse_enc(const char *src, int line, rap_col_kind k, const token *t,
                            rap_col_enc *enc)
{
    switch (k) {
    case RAP_COL_LABEL:
        *enc = RAP_ENC_LABEL01;
        if (t && !tok_is(t, "01"))
            return bad(src, line, t, "the label's encoding 01 (a label is 0 or 1), or none");
        return RAP_OK;
    case RAP_COL_DENSE:
        *enc = RAP_ENC_FLOAT;
        if (t && tok_is(t, "int32"))
            *enc = RAP_ENC_INT32;
        else if (t && !tok_is(t, "float"))
            return bad(src, line, t, "a dense encoding: float (the default) or int32");
        return RAP_OK;
    case RAP_COL_SPARSE:
        if (!t)
            return rap_fail(RAP_ERR_ARG, "%s:%d: expected a sparse encoding after \"sparse\": "
                                         "hex, hex32, dec or str", src, line);
        if (tok_is(t, "hex"))
            *enc = RAP_ENC_HEX64;
        else if (tok_is(t, "hex32"))
            *enc = RAP_ENC_HEX32;
        else if (tok_is(t, "dec"))
            *enc = RAP_ENC_DEC64;
        else if (tok_is(t, "str"))
            *enc = RAP_ENC_STR;
        else
            return bad(src, line, t, "a sparse encoding: hex, hex32, dec or str");
        return RAP_OK;
    default:
        *enc = RAP_ENC_NONE;
        if (t)
            return bad(src, line, t, "nothing after \"skip\"");
        return RAP_OK;
    }
}

static rap_status check_name(const char *src, int line, const token *t)
{
    if (t->len >= RAP_SCHEMA_NAME)
        return bad(src, line, t, "a column name of at most 63 bytes");
    for (int i = 0; i < t->len; i++) {
        unsigned c = (unsigned char)t->s[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == ',')
            return bad(src, line, t, "a column name of printable bytes other than '\"' and ','");
    }
    return RAP_OK;
}

/* One column line: name kind [encoding] [list SEP]. */
static rap_status parse_line(rap_input_schema *s, int line, const token *t, int n)
{
    const char *src = s->source;
    if (n < 2)
        return rap_fail(RAP_ERR_ARG, "%s:%d:%d: expected \"name kind [encoding] [list SEP]\", "
                                     "got a name alone", src, line, t[0].col);
    RAP_TRY(check_name(src, line, &t[0]));
    char name[RAP_SCHEMA_NAME];
    snprintf(name, sizeof name, "%.*s", t[0].len, t[0].s);
    int dup = rap_input_schema_find(s, name);
    if (dup >= 0)
        return rap_fail(RAP_ERR_ARG, "%s:%d:%d: column \"%s\" again (first at line %d)", src,
                        line, t[0].col, name, s->cols[dup].line);
    rap_col_kind k;
    if (tok_is(&t[1], "label"))
        k = RAP_COL_LABEL;
    else if (tok_is(&t[1], "dense"))
        k = RAP_COL_DENSE;
    else if (tok_is(&t[1], "sparse"))
        k = RAP_COL_SPARSE;
    else if (tok_is(&t[1], "skip"))
        k = RAP_COL_SKIP;
    else
        return bad(src, line, &t[1], "a kind: label, dense, sparse or skip");
    int at = 2;
    const token *et = at < n && !tok_is(&t[at], "list") ? &t[at++] : NULL;
    rap_col_enc enc = RAP_ENC_NONE;
    RAP_TRY(parse_enc(src, line, k, et, &enc));
    char sep = 0;
    if (at < n && tok_is(&t[at], "list")) {
        if (k != RAP_COL_SPARSE)
            return bad(src, line, &t[at], "no list on a column that is not sparse (a list "
                                          "is a multi-hot sparse column)");
        if (at + 1 >= n)
            return rap_fail(RAP_ERR_ARG, "%s:%d:%d: expected a separator after \"list\"", src,
                            line, t[at].col + 4);
        RAP_TRY(parse_sep(src, line, &t[at + 1], &sep));
        at += 2;
    }
    if (at < n)
        return bad(src, line, &t[at], "the end of the line (name kind [encoding] [list SEP])");
    if (k == RAP_COL_LABEL && s->label >= 0)
        return rap_fail(RAP_ERR_ARG, "%s:%d:%d: a second label \"%s\" (the label is \"%s\", "
                                     "line %d)", src, line, t[0].col, name,
                        s->cols[s->label].name, s->cols[s->label].line);
    if (s->n_cols == RAP_SCHEMA_MAX_COLS)
        return rap_fail(RAP_ERR_ARG, "%s:%d: more than %d columns", src, line,
                        RAP_SCHEMA_MAX_COLS);
    add_col(s, name, k, enc, sep, line);
    return RAP_OK;
}

rap_status rap_input_schema_parse(const char *text, const char *source, rap_input_schema **out)
{
    *out = NULL;
    if (!text)
        return rap_fail(RAP_ERR_ARG, "rap_input_schema_parse: text is NULL");
    rap_input_schema *s = schema_new(source);
    if (!s)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    const char *p = text;
    for (int line = 1; *p && st == RAP_OK; line++) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        token t[8];
        int k = tokenize(p, n, t, 6);
        if (k > 6)
            st = rap_fail(RAP_ERR_ARG, "%s:%d: expected \"name kind [encoding] [list SEP]\", "
                                       "got more words", s->source, line);
        else if (k > 0)
            st = parse_line(s, line, t, k);
        p = nl ? nl + 1 : p + strlen(p);
    }
    if (st == RAP_OK && s->n_cols == 0)
        st = rap_fail(RAP_ERR_ARG, "%s: no columns (one a line: name kind [encoding] "
                                   "[list SEP])", s->source);
    if (st == RAP_OK && s->label < 0)
        st = rap_fail(RAP_ERR_ARG, "%s: no label column (one column of kind label: the 0/1 "
                                   "the model learns)", s->source);
    if (st != RAP_OK) {
        rap_free(s);
        return st;
    }
    *out = s;
    return RAP_OK;
}

rap_status rap_input_schema_load(const char *path, rap_input_schema **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rap_fail(RAP_ERR_IO, "%s: cannot open schema: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = rap_malloc(cap + 1, "schema text");
    if (!buf) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    n = fread(buf, 1, cap, f);
    bool more = n == cap && fgetc(f) != EOF;
    bool err = ferror(f) != 0;
    fclose(f);
    rap_status st = RAP_OK;
    if (err)
        st = rap_fail(RAP_ERR_IO, "%s: read error", path);
    else if (more)
        st = rap_fail(RAP_ERR_ARG, "%s: larger than 1 MiB: expected a schema file", path);
    else if (memchr(buf, 0, n))
        st = rap_fail(RAP_ERR_ARG, "%s: holds a NUL byte: expected a text schema", path);
    if (st == RAP_OK) {
        buf[n] = 0;
        st = rap_input_schema_parse(buf, path, out);
    }
    rap_free(buf);
    return st;
}

/* --------------------------------------------------------- questions */

rap_schema rap_input_schema_shape(const rap_input_schema *s)
{
    rap_schema r = {s->n_dense, s->n_sparse, s->n_lists > 0 ? s->max_list : 1};
    return r;
}

int rap_input_schema_find(const rap_input_schema *s, const char *name)
{
    for (int f = 0; f < s->n_cols; f++)
        if (!strcmp(s->cols[f].name, name))
            return f;
    return -1;
}

bool rap_input_schema_is_criteo(const rap_input_schema *s)
{
    if (!s || s->n_cols != 1 + RAP_CRITEO_DENSE + RAP_CRITEO_SPARSE || s->delimiter != '\t' ||
        s->header)
        return false;
    char name[32];
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        rap_col_kind k = f == 0 ? RAP_COL_LABEL : f <= RAP_CRITEO_DENSE ? RAP_COL_DENSE
                                                                         : RAP_COL_SPARSE;
        rap_col_enc e = k == RAP_COL_LABEL ? RAP_ENC_LABEL01
                        : k == RAP_COL_DENSE ? RAP_ENC_INT32 : RAP_ENC_HEX32;
        if (f == 0)
            snprintf(name, sizeof name, "label");
        else if (k == RAP_COL_DENSE)
            snprintf(name, sizeof name, "int_%d", f - 1);
        else
            snprintf(name, sizeof name, "cat_%d", f - 1 - RAP_CRITEO_DENSE);
        if (c->kind != k || c->enc != e || c->list_sep || strcmp(c->name, name))
            return false;
    }
    return true;
}

/* How the delimiter is named in messages. */
static void delim_word(char d, char *out, size_t n)
{
    if (d == '\t')
        snprintf(out, n, "tab");
    else if (d == ',')
        snprintf(out, n, "comma");
    else
        snprintf(out, n, "'%c'", d);
}

rap_status rap_input_schema_check(const rap_input_schema *s)
{
    unsigned d = (unsigned char)s->delimiter;
    if (d != '\t' && (d <= 0x20 || d >= 0x7f || d == '"'))
        return rap_fail(RAP_ERR_ARG, "--delimiter: expected tab or one printable byte other "
                                     "than '\"', got byte 0x%02x", d);
    if (s->max_list < 1 || s->max_list > RAP_MAX_LIST_LIMIT)
        return rap_fail(RAP_ERR_ARG, "--max-list: expected 1 to %d ids, got %d",
                        RAP_MAX_LIST_LIMIT, s->max_list);
    size_t nl = strlen(s->null_token);
    if (nl == 0)
        return rap_fail(RAP_ERR_ARG, "--null-token: expected a non-empty token (an empty list "
                                     "field is an empty list)");
    for (size_t i = 0; i < nl; i++) {
        unsigned c = (unsigned char)s->null_token[i];
        bool sep = false;
        for (int f = 0; f < s->n_cols; f++)
            sep |= s->cols[f].list_sep && (unsigned char)s->cols[f].list_sep == c;
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == d || sep)
            return rap_fail(RAP_ERR_ARG, "--null-token \"%s\": expected printable bytes that "
                                         "are no delimiter, list separator or quote",
                            s->null_token);
    }
    for (int f = 0; f < s->n_cols; f++) {
        const rap_schema_col *c = &s->cols[f];
        if (c->list_sep && (unsigned char)c->list_sep == d && d == '\t') {
            char w[16];
            delim_word(s->delimiter, w, sizeof w);
            return rap_fail(RAP_ERR_ARG, "%s:%d: the list %s is separated by the delimiter "
                                         "(%s), which cannot be quoted without CSV: give the "
                                         "list another separator", s->source, c->line, c->name,
                            w);
        }
    }
    return RAP_OK;
}

/* ------------------------------------------------------------ header */

/* Field k of a header line (split outside quotes, quotes taken off, ""
 * as one quote) into out. */
static void header_field(const char *p, size_t n, bool quote, char *out, size_t cap)
{
    size_t a = 0, b = n;
    bool esc = false;
    if (quote && n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        a = 1;
        b = n - 1;
        esc = true;
    }
    size_t k = 0;
    for (size_t i = a; i < b && k + 1 < cap; i++) {
        out[k++] = p[i];
        if (esc && p[i] == '"' && i + 1 < b && p[i + 1] == '"')
            i++;
    }
    out[k] = 0;
}

rap_status rap_input_schema_header(const rap_input_schema *s, const char *line, size_t len,
                                   const char *where)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    const bool quote = s->delimiter != '\t';
    int f = 0;
    size_t a = 0;
    bool inq = false;
    char name[2 * RAP_SCHEMA_NAME];
    for (size_t i = 0; i <= len; i++) {
        if (i < len && quote && line[i] == '"')
            inq = !inq;
        if (i < len && (line[i] != s->delimiter || inq))
            continue;
        header_field(line + a, i - a, quote, name, sizeof name);
        a = i + 1;
        if (f >= s->n_cols)
            return rap_fail(RAP_ERR_DATA, "%s: the header has more than the schema's %d columns "
                                          "(%s): column %d is \"%.40s\"", where, s->n_cols,
                            s->source, f + 1, name);
        const rap_schema_col *c = &s->cols[f];
        if (strcmp(name, c->name))
            return rap_fail(RAP_ERR_DATA, "%s: header column %d is \"%.40s\", the schema %s "
                                          "(line %d) says \"%s\"", where, f + 1, name,
                            s->source, c->line, c->name);
        f++;
    }
    if (f < s->n_cols)
        return rap_fail(RAP_ERR_DATA, "%s: the header has %d columns, the schema %s has %d: "
                                      "\"%s\" (line %d) is missing", where, f, s->source,
                        s->n_cols, s->cols[f].name, s->cols[f].line);
    return RAP_OK;
}

rap_status rap_input_schema_write(const rap_input_schema *s, FILE *f)
{
    int w = 0;
    for (int i = 0; i < s->n_cols; i++) {
        int n = (int)strlen(s->cols[i].name);
        w = n > w ? n : w;
    }
    bool ok = fprintf(f, "# %-*s kind    encoding  [list SEP]\n", w > 2 ? w - 2 : 0, "name") > 0;
    for (int i = 0; ok && i < s->n_cols; i++) {
        const rap_schema_col *c = &s->cols[i];
        char sep[16] = "";
        for (size_t k = 0; c->list_sep && k < sizeof g_sep_words / sizeof g_sep_words[0]; k++)
            if (g_sep_words[k].c == c->list_sep && (c->list_sep <= ' ' || c->list_sep == '#'))
                snprintf(sep, sizeof sep, "%s", g_sep_words[k].word);
        if (c->list_sep && !sep[0])
            snprintf(sep, sizeof sep, "%c", c->list_sep);
        int n = fprintf(f, "%-*s %-8s%s%s%s%s\n", w, c->name, kind_name(c->kind),
                        rap_col_enc_name(c->enc), c->list_sep ? "  list " : "", sep, "");
        ok = n > 0;
    }
    if (!ok || fflush(f) != 0)
        return rap_fail(RAP_ERR_IO, "writing a schema: %s", strerror(errno));
    return RAP_OK;
}
