/* test_schema.c -- the input schema (docs/SCHEMA.md): the schema file and
 * its hostile forms, the built-in Criteo schema and plans/criteo.schema,
 * the string hash, every kind and encoding through the CPU schema parser,
 * lists (empty, null, one, many, over the limit), CSV quoting, the null
 * token, header checks, and the reader over schema files: batches,
 * rejects with reasons and file:line. */
#include "test.h"

#include <stdlib.h>

#include "core/core.h"
#include "data/parse_schema.h"

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text))
        abort();
    fclose(f);
}

/* The issue's example schema. */
static const char *k_example =
    "# name   kind     encoding  [list SEP]\n"
    "label    label\n"
    "price    dense\n"
    "age      dense\n"
    "user     sparse   str\n"
    "item     sparse   hex\n"
    "history  sparse   dec       list |\n"
    "ignored  skip\n";

/* Parses schema text (source "t.schema"); NULL with the message in err
 * on failure. */
static rap_input_schema *parse_schema(const char *text, char *err, size_t n)
{
    rap_input_schema *s = NULL;
    rap_status st = rap_input_schema_parse(text, "t.schema", &s);
    if (err && n)
        snprintf(err, n, "%s", st == RAP_OK ? "" : rap_last_error());
    return s;
}

/* ------------------------------------------------------------ the file */

RAP_TEST(schema_file_example)
{
    char err[512];
    rap_input_schema *s = parse_schema(k_example, err, sizeof err);
    REQUIRE(s);
    CHECK(s->n_cols == 7 && s->n_dense == 2 && s->n_sparse == 3 && s->n_lists == 1);
    CHECK(s->label == 0 && s->cols[0].kind == RAP_COL_LABEL);
    CHECK(s->cols[1].kind == RAP_COL_DENSE && s->cols[1].enc == RAP_ENC_FLOAT &&
          s->cols[1].col == 0 && s->cols[2].col == 1);
    CHECK(s->cols[3].enc == RAP_ENC_STR && s->cols[3].col == 0 && s->cols[3].list_sep == 0);
    CHECK(s->cols[4].enc == RAP_ENC_HEX64 && s->cols[4].col == 1);
    CHECK(s->cols[5].enc == RAP_ENC_DEC64 && s->cols[5].col == 2 && s->cols[5].list_sep == '|');
    CHECK(s->cols[6].kind == RAP_COL_SKIP && s->cols[6].col == -1);
    CHECK(s->cols[5].line == 7);
    CHECK(s->delimiter == '\t' && !s->header && !strcmp(s->null_token, "null") &&
          s->max_list == RAP_MAX_LIST_DEFAULT);
    rap_schema sh = rap_input_schema_shape(s);
    CHECK(sh.n_dense == 2 && sh.n_sparse == 3 && sh.ids_per_row == RAP_MAX_LIST_DEFAULT);
    CHECK(rap_input_schema_find(s, "history") == 5 && rap_input_schema_find(s, "nope") == -1);
    CHECK(!rap_input_schema_is_criteo(s));
    /* written and read back: the same columns */
    char *path = tmp_path("example_back.schema");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    CHECK_OK(rap_input_schema_write(s, f));
    fclose(f);
    rap_input_schema *b = NULL;
    CHECK_OK(rap_input_schema_load(path, &b));
    if (b) {
        CHECK(b->n_cols == s->n_cols);
        for (int i = 0; i < s->n_cols && i < b->n_cols; i++)
            CHECK_MSG(!strcmp(b->cols[i].name, s->cols[i].name) &&
                      b->cols[i].kind == s->cols[i].kind && b->cols[i].enc == s->cols[i].enc &&
                      b->cols[i].list_sep == s->cols[i].list_sep, "column %d differs", i);
    }
    rap_input_schema_free(b);
    rap_input_schema_free(s);
}

RAP_TEST(schema_file_words_and_encodings)
{
    char err[512];
    rap_input_schema *s = parse_schema("y label 01\r\n"
                                       "a dense int32   # a comment\n"
                                       "\n   # only a comment\n"
                                       "b sparse hex32\n"
                                       "c sparse str list comma\n"
                                       "d sparse hex list space\n",
                                       err, sizeof err);
    REQUIRE(s);
    CHECK(s->n_cols == 5);
    CHECK(s->cols[1].enc == RAP_ENC_INT32 && s->cols[2].enc == RAP_ENC_HEX32);
    CHECK(s->cols[3].list_sep == ',' && s->cols[4].list_sep == ' ');
    CHECK(s->cols[4].line == 7);
    rap_input_schema_free(s);
}

/* Every kind of broken schema text: refused with file:line[:col] and
 * what was expected. */
RAP_TEST(schema_file_hostile)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "t.schema: no columns"},
        {"# nothing\n\n", "t.schema: no columns"},
        {"a dense\n", "t.schema: no label column"},
        {"y label\nlonely\n", "t.schema:2:1: expected \"name kind [encoding] [list SEP]\", got "
                              "a name alone"},
        {"y label\na densee\n", "t.schema:2:3: expected a kind: label, dense, sparse or skip, "
                                "got \"densee\""},
        {"y label\na dense hex\n", "t.schema:2:9: expected a dense encoding"},
        {"y label\na sparse\n", "t.schema:2: expected a sparse encoding after \"sparse\""},
        {"y label\na sparse int\n", "t.schema:2:10: expected a sparse encoding: hex, hex32, dec "
                                    "or str, got \"int\""},
        {"y label\na dense list |\n", "t.schema:2:9: expected no list on a column that is not "
                                      "sparse"},
        {"y label\na sparse dec list\n", "t.schema:2:18: expected a separator after \"list\""},
        {"y label\na sparse dec list ||\n", "t.schema:2:19: expected a list separator"},
        {"y label\na sparse dec list \"\n", "t.schema:2:19: expected a list separator"},
        {"y label\na sparse dec list | extra\n", "t.schema:2:21: expected the end of the line"},
        {"y label\na dense\na sparse hex\n", "t.schema:3:1: column \"a\" again (first at line 2)"},
        {"y label\nz label\n", "t.schema:2:1: a second label \"z\" (the label is \"y\", line 1)"},
        {"y label 02\n", "t.schema:1:9: expected the label's encoding 01"},
        {"y label\na,b dense\n", "t.schema:2:1: expected a column name of printable bytes"},
        {"y label\na skip str\n", "t.schema:2:8: expected nothing after \"skip\""},
        {"y label\na sparse dec list | b c d\n", "t.schema:2: expected \"name kind [encoding] "
                                                 "[list SEP]\", got more words"},
        {"y label\n"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa dense\n",
         "t.schema:2:1: expected a column name of at most 63 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        rap_input_schema *s = parse_schema(cases[i].text, err, sizeof err);
        CHECK_MSG(!s, "case %zu accepted", i);
        CHECK_MSG(strstr(err, cases[i].want), "case %zu: got \"%s\", expected \"%s\"", i, err,
                  cases[i].want);
        rap_input_schema_free(s);
    }
    /* too many columns */
    size_t cap = (RAP_SCHEMA_MAX_COLS + 2) * 24;
    char *big = malloc(cap);
    REQUIRE(big);
    size_t n = (size_t)snprintf(big, cap, "y label\n");
    for (int i = 0; i < RAP_SCHEMA_MAX_COLS; i++)
        n += (size_t)snprintf(big + n, cap - n, "c%d dense\n", i);
    char err[512];
    rap_input_schema *s = parse_schema(big, err, sizeof err);
    CHECK(!s && strstr(err, "more than 512 columns"));
    free(big);
    /* files: missing, NUL bytes, too large */
    CHECK(rap_input_schema_load(tmp_path("no_such.schema"), &s) == RAP_ERR_IO && !s);
    CHECK(strstr(rap_last_error(), "no_such.schema: cannot open schema"));
    char *p = tmp_path("nul.schema");
    FILE *f = fopen(p, "wb");
    REQUIRE(f);
    fwrite("y label\n\0a dense\n", 1, 17, f);
    fclose(f);
    CHECK(rap_input_schema_load(p, &s) == RAP_ERR_ARG && strstr(rap_last_error(), "NUL byte"));
    p = tmp_path("huge.schema");
    f = fopen(p, "wb");
    REQUIRE(f);
    for (int i = 0; i < (1 << 17) + 1; i++)
        fwrite("#2345678", 1, 8, f);
    fclose(f);
    CHECK(rap_input_schema_load(p, &s) == RAP_ERR_ARG && strstr(rap_last_error(), "1 MiB"));
}

/* The format check names the option. */
RAP_TEST(schema_format_check)
{
    rap_input_schema *s = parse_schema(k_example, NULL, 0);
    REQUIRE(s);
    CHECK_OK(rap_input_schema_check(s));
    s->max_list = 0;
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG && strstr(rap_last_error(), "--max-list"));
    s->max_list = RAP_MAX_LIST_LIMIT + 1;
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG);
    s->max_list = 5;
    s->delimiter = '"';
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG && strstr(rap_last_error(), "--delimiter"));
    s->delimiter = ',';
    CHECK_OK(rap_input_schema_check(s));
    snprintf(s->null_token, sizeof s->null_token, "a|b");
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG && strstr(rap_last_error(), "--null-token"));
    snprintf(s->null_token, sizeof s->null_token, "a,b");
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG);
    s->null_token[0] = 0;
    CHECK(rap_input_schema_check(s) == RAP_ERR_ARG);
    snprintf(s->null_token, sizeof s->null_token, "NA");
    CHECK_OK(rap_input_schema_check(s));
    /* a tab-separated list in a tab-separated file cannot be told apart */
    rap_input_schema *u = parse_schema("y label\nh sparse dec list tab\n", NULL, 0);
    REQUIRE(u);
    CHECK(rap_input_schema_check(u) == RAP_ERR_ARG &&
          strstr(rap_last_error(), "t.schema:2: the list h is separated by the delimiter"));
    u->delimiter = ',';
    CHECK_OK(rap_input_schema_check(u));
    rap_input_schema_free(u);
    rap_input_schema_free(s);
}

/* The built-in schema and the shipped file are Criteo's layout. */
RAP_TEST(schema_criteo_builtin_and_file)
{
    rap_input_schema *c = NULL, *f = NULL;
    REQUIRE_OK(rap_input_schema_criteo(&c));
    CHECK(c->n_cols == 40 && c->n_dense == 13 && c->n_sparse == 26 && c->n_lists == 0);
    CHECK(rap_input_schema_is_criteo(c));
    rap_schema sh = rap_input_schema_shape(c);
    rap_schema cr = rap_schema_criteo();
    CHECK(sh.n_dense == cr.n_dense && sh.n_sparse == cr.n_sparse &&
          sh.ids_per_row == cr.ids_per_row);
    CHECK_OK(rap_input_schema_load("plans/criteo.schema", &f));
    if (f) {
        CHECK(rap_input_schema_is_criteo(f));
        CHECK(f->n_cols == c->n_cols);
    }
    c->header = true; /* the layout, not the format: not Criteo's fast path */
    CHECK(!rap_input_schema_is_criteo(c));
    rap_input_schema_free(f);
    rap_input_schema_free(c);
}

/* FNV-1a 64 as docs/SCHEMA.md states it. */
RAP_TEST(schema_string_hash)
{
    CHECK(rap_hash_str("", 0) == 0xcbf29ce484222325ULL);
    CHECK(rap_hash_str("a", 1) == 0xaf63dc4c8601ec8cULL);
    CHECK(rap_hash_str("foobar", 6) == 0x85944171f73967e8ULL);
    int64_t iv = 0;
    CHECK(rap_input_convert(RAP_ENC_STR, "foobar", 6, NULL, &iv) == -1);
    CHECK(iv == (int64_t)0x85944171f73967e8ULL);
}

/* ------------------------------------------------------------ lines */

typedef struct {
    rap_schema_parser *p;
    rap_parsed o;
} lp_t;

/* Parses one line (with its '\n' added) and returns the reject reason
 * (-1 good) and the message in msg. */
static int one_line(const rap_schema_parser *p, const char *line, char *msg, size_t n)
{
    return rap_parse_line_schema(p, line, strlen(line), 65536, NULL, msg, n);
}

static rap_schema_parser *parser_of(const char *text, char delim, const char *null_tok,
                                    int max_list)
{
    rap_input_schema *s = parse_schema(text, NULL, 0);
    if (!s)
        return NULL;
    s->delimiter = delim;
    if (null_tok)
        snprintf(s->null_token, sizeof s->null_token, "%s", null_tok);
    if (max_list)
        s->max_list = max_list;
    rap_schema_parser *p = NULL;
    rap_status st = rap_schema_parser_create(s, &p);
    rap_input_schema_free(s);
    return st == RAP_OK ? p : NULL;
}

/* The rows of a chunk: its values by the parsed arrays. */
RAP_TEST(schema_parse_values_every_encoding)
{
    rap_schema_parser *p = parser_of("y label\nf dense\ni dense int32\nh sparse hex\n"
                                     "h3 sparse hex32\nd sparse dec\ns sparse str\nx skip\n",
                                     '\t', NULL, 0);
    REQUIRE(p);
    const char *text = "1\t1.5\t-7\tffffffffffffffff\tABCDEF01\t-9223372036854775808\tfoobar\tw\n"
                       "0\t\t\t\t\t\t\t\n"
                       "0\t-2.5e-3\t2147483647\t0\t0\t9223372036854775807\t\"q\"\tz\n"
                       "1\t.5\t0\t7fffffffffffffff\tffffffff\t-0\ta b\t\n";
    rap_parsed o;
    memset(&o, 0, sizeof o);
    REQUIRE_OK(rap_parse_chunk_schema(p, text, strlen(text), 65536, &o));
    CHECK_MSG(o.n_lines == 4 && o.n_used == 4 && o.n_rej == 0, "%lld lines, %lld used: %s",
              (long long)o.n_lines, (long long)o.n_used, o.first_msg);
    const int64_t R = o.cap;
    CHECK(o.label[0] == 1.0f && o.label[1] == 0.0f);
    CHECK(o.dense[0] == 1.5f && o.dense_valid[0] == 1 && o.dense_valid[1] == 0);
    CHECK(o.dense[2] == -2.5e-3f && o.dense[3] == 0.5f);
    CHECK(o.dense[R + 0] == -7.0f && o.dense[R + 2] == 2147483647.0f);
    /* sparse column j, row i: one id or none */
    int64_t want[4][4] = {{-1, (int64_t)0xABCDEF01, INT64_MIN, (int64_t)rap_hash_str("foobar", 6)},
                          {0, 0, 0, 0},
                          {0, 0, INT64_MAX, (int64_t)rap_hash_str("\"q\"", 3)},
                          {INT64_MAX, 0xffffffffLL, 0, (int64_t)rap_hash_str("a b", 3)}};
    for (int j = 0; j < 4; j++) {
        const int64_t *so = o.soff + j * (R + 1);
        for (int i = 0; i < 4; i++) {
            int64_t n = so[i + 1] - so[i];
            if (i == 1) {
                CHECK_MSG(n == 0 && o.sparse_valid[j * R + i] == 0, "col %d row 1: a null", j);
                continue;
            }
            CHECK_MSG(n == 1 && o.sparse_valid[j * R + i] == 1, "col %d row %d: %lld ids", j,
                      i, (long long)n);
            if (n == 1)
                CHECK_MSG(o.sids[j][so[i]] == want[i][j], "col %d row %d: %llx, want %llx", j,
                          i, (unsigned long long)o.sids[j][so[i]],
                          (unsigned long long)want[i][j]);
        }
    }
    rap_parsed_free(&o);
    rap_schema_parser_free(p);
}

/* Rejects of every encoding, with their reasons and the field's name. */
RAP_TEST(schema_parse_rejects_name_the_field)
{
    rap_schema_parser *p = parser_of("y label\nf dense\ni dense int32\nh sparse hex\n"
                                     "d sparse dec\nhist sparse dec list |\n",
                                     '\t', NULL, 4);
    REQUIRE(p);
    static const struct {
        const char *line;
        int reason;
        const char *msg;
    } cases[] = {
        {"1\t1\t1\t1\t1\t1", -1, ""},
        {"2\t1\t1\t1\t1\t1", RAP_REJ_LABEL, "expected label 0 or 1, got \"2\""},
        {"\t1\t1\t1\t1\t1", RAP_REJ_LABEL, "expected label 0 or 1, got \"\""},
        {"1\t1x\t1\t1\t1\t1", RAP_REJ_INT, "expected a number in f, got \"1x\""},
        {"1\t1e40\t1\t1\t1\t1", RAP_REJ_RANGE, "expected f within float32's range, got \"1e40\""},
        {"1\t1\t2147483648\t1\t1\t1", RAP_REJ_RANGE, "expected i in [-2147483648, 2147483647]"},
        {"1\t1\t1\t1g\t1\t1", RAP_REJ_CAT, "expected 1 to 16 hex digits in h, got \"1g\""},
        {"1\t1\t1\t10000000000000000\t1\t1", RAP_REJ_RANGE, "at most 16 hex digits in h"},
        {"1\t1\t1\t1\t9223372036854775808\t1", RAP_REJ_RANGE,
         "expected d in [-9223372036854775808, 9223372036854775807], got"},
        {"1\t1\t1\t1\t1.0\t1", RAP_REJ_CAT, "expected a decimal integer in d, got \"1.0\""},
        {"1\t1\t1\t1\t1\t1|2|x", RAP_REJ_CAT,
         "expected a decimal integer in each id of list hist, got item 3 \"x\""},
        {"1\t1\t1\t1\t1\t1||2", RAP_REJ_CAT, "in each id of list hist, got an empty item 2"},
        {"1\t1\t1\t1\t1\t1|2|3|4|5", RAP_REJ_LIST,
         "expected at most 4 ids in list hist (--max-list), got 5"},
        {"1\t1\t1\t1\t1\t1|99999999999999999999", RAP_REJ_RANGE,
         "expected each id of list hist in [-9223372036854775808"},
        {"1\t1\t1\t1\t1", RAP_REJ_FIELDS, "expected 6 tab-separated fields, got 5"},
        {"1\t1\t1\t1\t1\t1\t1", RAP_REJ_FIELDS, "expected 6 tab-separated fields, got 7"},
        {"1\t1\t1\t\x01\t1\t1", RAP_REJ_BINARY, "expected printable text, got byte 0x01"},
        {"1\t1\t1\t\xc3\xa9\t1\t1", RAP_REJ_BINARY, "got byte 0xc3"},
        /* the smallest fault class wins, then the first field */
        {"1\t1x\t1\t1g\t1\t1", RAP_REJ_INT, "in f,"},
        {"3\t1x\t1\t1g\t1\t1", RAP_REJ_LABEL, "label"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512];
        int r = one_line(p, cases[i].line, msg, sizeof msg);
        CHECK_MSG(r == cases[i].reason, "case %zu: reason %d, expected %d (%s)", i, r,
                  cases[i].reason, msg);
        CHECK_MSG(strstr(msg, cases[i].msg), "case %zu: \"%s\", expected \"%s\"", i, msg,
                  cases[i].msg);
    }
    rap_schema_parser_free(p);
}

/* A list: empty, null, one, many, at the limit, over it; --null-token. */
RAP_TEST(schema_parse_lists)
{
    for (int custom = 0; custom < 2; custom++) {
        rap_schema_parser *p =
            parser_of("y label\nhist sparse hex list |\nt sparse str list ;\n", '\t',
                      custom ? "NA" : NULL, 3);
        REQUIRE(p);
        const char *null = custom ? "NA" : "null";
        char text[512];
        snprintf(text, sizeof text,
                 "1\t\t\n"          /* empty lists: valid, no ids */
                 "0\t%s\t%s\n"      /* null lists: not valid, no ids */
                 "1\ta\tx\n"        /* one id */
                 "0\t1|2|ff\tx;y;\"z\"\n" /* three ids */
                 "1\t1|2|3|4\tx\n"  /* over the limit: rejected */
                 "1\t%s\t%s\n",     /* the other token is an id of str */
                 null, null, null, custom ? "null" : "NA");
        rap_parsed o;
        memset(&o, 0, sizeof o);
        REQUIRE_OK(rap_parse_chunk_schema(p, text, strlen(text), 65536, &o));
        CHECK(o.n_lines == 6);
        CHECK_MSG(o.n_used == 5 && o.n_rej == 1, "used %lld, rejected %lld: %s",
                  (long long)o.n_used, (long long)o.n_rej, o.first_msg);
        CHECK(o.n_rej == 1 && o.rej[0].line == 4 && o.rej[0].reason == RAP_REJ_LIST);
        const int64_t R = o.cap;
        const int64_t *h = o.soff, *tl = o.soff + (R + 1);
        int64_t hn[5] = {0, 0, 1, 3, 0}, tn[5] = {0, 0, 1, 3, 1};
        uint8_t hv[5] = {1, 0, 1, 1, 0}, tv[5] = {1, 0, 1, 1, 1};
        for (int i = 0; i < 5; i++) {
            CHECK_MSG(h[i + 1] - h[i] == hn[i] && o.sparse_valid[i] == hv[i],
                      "hist row %d: %lld ids valid %d", i, (long long)(h[i + 1] - h[i]),
                      o.sparse_valid[i]);
            CHECK_MSG(tl[i + 1] - tl[i] == tn[i] && o.sparse_valid[R + i] == tv[i],
                      "t row %d: %lld ids valid %d", i, (long long)(tl[i + 1] - tl[i]),
                      o.sparse_valid[R + i]);
        }
        CHECK(o.sids[0][h[2]] == 0xa);
        CHECK(o.sids[0][h[3]] == 1 && o.sids[0][h[3] + 1] == 2 && o.sids[0][h[3] + 2] == 0xff);
        CHECK(o.sids[1][tl[3]] == (int64_t)rap_hash_str("x", 1) &&
              o.sids[1][tl[3] + 2] == (int64_t)rap_hash_str("\"z\"", 3));
        /* the last good row: the other token is an id of the str list */
        CHECK(o.sids[1][tl[4]] == (int64_t)rap_hash_str(custom ? "null" : "NA", custom ? 4 : 2));
        rap_parsed_free(&o);
        rap_schema_parser_free(p);
    }
}

/* CSV: RFC 4180 quoting, delimiters and separators inside quotes, "",
 * CRLF; broken quoting rejected with RAP_REJ_QUOTE. */
RAP_TEST(schema_parse_csv_quoting)
{
    rap_schema_parser *p = parser_of("y label\nname sparse str\nv dense\n"
                                     "tags sparse str list ,\n",
                                     ',', NULL, 8);
    REQUIRE(p);
    const char *text = "1,\"a,b\",2.5,\"x,y,z\"\r\n"
                       "0,\"say \"\"hi\"\"\",\"3\",\"\"\n"
                       "1,plain,,one\n"
                       "0,\"open,1,x\n"
                       "1,a\"b,1,x\n"
                       "1,\"a\"b,1,x\n"
                       "1,\"\"\"\",1,\"p,\"\"q\"\"\"\n";
    rap_parsed o;
    memset(&o, 0, sizeof o);
    REQUIRE_OK(rap_parse_chunk_schema(p, text, strlen(text), 65536, &o));
    CHECK_MSG(o.n_lines == 7 && o.n_used == 4 && o.n_rej == 3, "%lld used %lld rej: %s",
              (long long)o.n_used, (long long)o.n_rej, o.first_msg);
    for (int k = 0; k < o.n_rej; k++)
        CHECK_MSG(o.rej[k].reason == RAP_REJ_QUOTE, "reject %d: reason %d", k, o.rej[k].reason);
    CHECK(strstr(o.first_msg, "expected a closing quote in field 2 (name)"));
    const int64_t R = o.cap;
    const int64_t *n = o.soff, *tg = o.soff + (R + 1);
    CHECK(o.sids[0][n[0]] == (int64_t)rap_hash_str("a,b", 3));
    CHECK(o.sids[0][n[1]] == (int64_t)rap_hash_str("say \"hi\"", 8));
    CHECK(o.sids[0][n[3]] == (int64_t)rap_hash_str("\"", 1));
    CHECK(o.dense[0] == 2.5f && o.dense[1] == 3.0f && o.dense_valid[2] == 0);
    CHECK(tg[1] - tg[0] == 3 && o.sids[1][tg[0] + 1] == (int64_t)rap_hash_str("y", 1));
    CHECK(tg[2] - tg[1] == 0 && o.sparse_valid[R + 1] == 1); /* "" is an empty list */
    CHECK(tg[3] - tg[2] == 1);
    CHECK(tg[4] - tg[3] == 2 && o.sids[1][tg[3] + 1] == (int64_t)rap_hash_str("\"q\"", 3));
    char msg[512];
    int why = one_line(p, "1,a\"b\"c,1,x", msg, sizeof msg);
    CHECK_MSG(why == RAP_REJ_QUOTE && strstr(msg, "in name, got \"a\"b\"c\""), "%d: %s", why, msg);
    rap_parsed_free(&o);
    rap_schema_parser_free(p);
}

/* The header check names the first difference. */
RAP_TEST(schema_header_check)
{
    rap_input_schema *s = parse_schema("y label\nprice dense\nuser sparse str\n", NULL, 0);
    REQUIRE(s);
    const char *good = "y\tprice\tuser";
    CHECK_OK(rap_input_schema_header(s, good, strlen(good), "f.tsv:1"));
    const char *crlf = "y\tprice\tuser\r";
    CHECK_OK(rap_input_schema_header(s, crlf, strlen(crlf), "f.tsv:1"));
    const char *bad = "y\tcost\tuser";
    CHECK(rap_input_schema_header(s, bad, strlen(bad), "f.tsv:1") == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "f.tsv:1: header column 2 is \"cost\", the schema t.schema "
                                   "(line 2) says \"price\""));
    const char *shrt = "y\tprice";
    CHECK(rap_input_schema_header(s, shrt, strlen(shrt), "f.tsv:1") == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "the header has 2 columns, the schema t.schema has 3: "
                                   "\"user\" (line 3) is missing"));
    const char *lng = "y\tprice\tuser\textra";
    CHECK(rap_input_schema_header(s, lng, strlen(lng), "f.tsv:1") == RAP_ERR_DATA);
    CHECK(strstr(rap_last_error(), "more than the schema's 3 columns"));
    s->delimiter = ',';
    const char *csv = "\"y\",price,\"user\"";
    CHECK_OK(rap_input_schema_header(s, csv, strlen(csv), "f.csv:1"));
    rap_input_schema_free(s);
}

/* ------------------------------------------------------------ reader */

typedef struct {
    int64_t rows;
    double label_sum, dense_sum;
    int64_t ids, id_sum, nulls;
} sums_t;

static rap_status read_all(rap_test_ctx *t, const rap_reader_config *cfg, int64_t cap,
                           sums_t *out, rap_reader_stats *st)
{
    memset(out, 0, sizeof *out);
    rap_reader *r = NULL;
    RAP_TRY(rap_reader_open(cfg, &r));
    rap_batch b;
    rap_status s = rap_batch_create(&b, rap_reader_shape(cfg), cap, false);
    if (s != RAP_OK) {
        rap_reader_close(r);
        return s;
    }
    for (;;) {
        s = rap_reader_next(r, &b);
        if (s != RAP_OK || b.rows == 0)
            break;
        const int64_t B = b.cap, K = b.schema.ids_per_row;
        for (int64_t i = 0; i < b.rows; i++) {
            out->label_sum += b.label[i];
            for (int j = 0; j < b.schema.n_dense; j++)
                out->dense_sum += b.dense[j * B + i];
            for (int j = 0; j < b.schema.n_sparse; j++) {
                const int64_t *off = b.sparse_off + j * (B + 1);
                CHECK(off[i + 1] - off[i] <= K);
                out->ids += off[i + 1] - off[i];
                for (int64_t k = off[i]; k < off[i + 1]; k++)
                    out->id_sum += b.sparse_ids[j * B * K + k];
                out->nulls += !b.sparse_valid[j * B + i];
            }
        }
        out->rows += b.rows;
    }
    rap_reader_get_stats(r, st);
    rap_batch_free(&b);
    rap_reader_close(r);
    return s;
}

/* CSV with a header and lists through the reader: values, the header
 * taken off, rejects counted with their reason and file:line (the header
 * is line 1), --bad-rows fail naming the field, a wrong header refused. */
RAP_TEST(schema_reader_csv_header_lists)
{
    rap_input_schema *s = parse_schema("y label\nv dense\nu sparse dec\n"
                                       "h sparse dec list |\n",
                                       NULL, 0);
    REQUIRE(s);
    s->delimiter = ',';
    s->header = true;
    s->max_list = 3;
    char *path = tmp_path("lists.csv");
    write_text(path, "y,v,u,h\n"
                     "1,1.5,7,1|2\n"
                     "0,,8,\n"
                     "1,2,9,1|2|3|4\n"  /* line 4: over the limit */
                     "0,1,\"10\",null\n"
                     "1,1,x,5\n");      /* line 6: a bad id */
    rap_reader_config cfg = rap_reader_defaults();
    cfg.input = path;
    cfg.threads = 2;
    cfg.schema = s;
    rap_schema sh = rap_reader_shape(&cfg);
    CHECK(sh.n_dense == 1 && sh.n_sparse == 2 && sh.ids_per_row == 3);
    for (int cap = 1; cap <= 4; cap += 3) {
        sums_t sum;
        rap_reader_stats st;
        CHECK_OK(read_all(t, &cfg, cap, &sum, &st));
        CHECK_MSG(sum.rows == 3 && st.rows_read == 5 && st.rows_rejected == 2,
                  "%lld rows, %lld read, %lld rejected", (long long)sum.rows,
                  (long long)st.rows_read, (long long)st.rows_rejected);
        CHECK(sum.label_sum == 1.0 && sum.dense_sum == 2.5);
        CHECK_MSG(sum.ids == 3 + 2 && sum.id_sum == 7 + 8 + 10 + 1 + 2, "%lld ids, sum %lld",
                  (long long)sum.ids, (long long)sum.id_sum);
        CHECK(sum.nulls == 1);
        CHECK(st.rejected[RAP_REJ_LIST] == 1 && st.rejected[RAP_REJ_CAT] == 1);
        CHECK_MSG(strstr(st.example[RAP_REJ_LIST][0], "lists.csv:4"), "%s",
                  st.example[RAP_REJ_LIST][0]);
        CHECK(strstr(st.example[RAP_REJ_CAT][0], "lists.csv:6"));
    }
    cfg.bad_rows = RAP_BAD_FAIL;
    sums_t sum;
    rap_reader_stats st;
    CHECK(read_all(t, &cfg, 16, &sum, &st) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "lists.csv:4: expected at most 3 ids in list h"), "%s",
              rap_last_error());
    cfg.bad_rows = RAP_BAD_SKIP;
    write_text(path, "y,v,user,h\n1,1,1,1\n");
    CHECK(read_all(t, &cfg, 16, &sum, &st) == RAP_ERR_DATA);
    CHECK_MSG(strstr(rap_last_error(), "lists.csv:1: header column 3 is \"user\", the schema "
                                       "t.schema (line 3) says \"u\""), "%s", rap_last_error());
    rap_input_schema_free(s);
}

/* The Criteo schema given explicitly reads the same rows as no schema. */
RAP_TEST(schema_reader_criteo_same_as_builtin)
{
    char *path = tmp_path("criteo.tsv");
    write_text(path, "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf\t1\t2\t3\t4"
                     "\t5\t6\t7\t8\t9\ta\tb\tc\td\te\tf\t10\t11\t12\t13\t14\n"
                     "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"
                     "\t\t\t\n"
                     "x\tbad\n");
    rap_input_schema *c = NULL;
    REQUIRE_OK(rap_input_schema_load("plans/criteo.schema", &c));
    rap_reader_config cfg = rap_reader_defaults();
    cfg.input = path;
    sums_t a, b;
    rap_reader_stats sa, sb;
    CHECK_OK(read_all(t, &cfg, 8, &a, &sa));
    cfg.schema = c;
    CHECK_OK(read_all(t, &cfg, 8, &b, &sb));
    CHECK(a.rows == 2 && b.rows == 2 && a.id_sum == b.id_sum && a.dense_sum == b.dense_sum);
    CHECK(sa.rows_rejected == 1 && sb.rows_rejected == 1 &&
          sa.rejected[RAP_REJ_FIELDS] == sb.rejected[RAP_REJ_FIELDS]);
    rap_input_schema_free(c);
}

/* Random schema texts (mutations of a good one, random bytes): each is
 * taken or refused with a message naming the file, never anything else;
 * and random lines through a parser of each schema taken never fault. */
RAP_TEST(schema_file_fuzz)
{
    uint64_t rng = 99;
    const char *words[] = {"label", "dense", "sparse", "skip", "str", "hex", "hex32", "dec",
                           "int32", "float", "01", "list", "|", ";", "comma", "#", "\n",
                           " ", "\t", "\"", "a", "b", "x,y", "\r\n", "tab"};
    int taken = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        char text[2048];
        size_t n = 0;
        int parts = 1 + (int)(rap_splitmix64(&rng) % 40);
        if (it % 2 == 0) { /* a good schema with one or two bytes changed */
            n = (size_t)snprintf(text, sizeof text, "%s", k_example);
            for (int k = 0; k < 1 + (it / 2) % 2; k++) {
                uint64_t r = rap_splitmix64(&rng);
                text[r % n] = " \t#|xyz\n,;\"a"[(r >> 32) % 13];
            }
            parts = 0;
        }
        for (int k = 0; k < parts && n + 64 < sizeof text; k++) {
            uint64_t r = rap_splitmix64(&rng);
            if (r % 10 == 0)
                text[n++] = (char)(1 + (r >> 8) % 255); /* any byte but NUL */
            else
                n += (size_t)snprintf(text + n, sizeof text - n, "%s%s",
                                      words[(r >> 8) % (sizeof words / sizeof words[0])],
                                      (r >> 20) % 3 ? " " : "");
        }
        text[n] = 0;
        rap_input_schema *s = NULL;
        rap_status st = rap_input_schema_parse(text, "f.schema", &s);
        if (st == RAP_OK) {
            taken++;
            CHECK(s && s->label >= 0 && s->n_cols >= 1);
            rap_schema_parser *p = NULL;
            if (s && rap_schema_parser_create(s, &p) == RAP_OK) {
                for (int l = 0; l < 20; l++) {
                    char line[128];
                    int len = (int)(rap_splitmix64(&rng) % sizeof line);
                    for (int i = 0; i < len; i++) {
                        uint64_t r = rap_splitmix64(&rng);
                        line[i] = r % 4 == 0 ? '\t' : r % 7 == 0 ? '|' : (char)(r >> 8);
                    }
                    char msg[256];
                    int field = 0;
                    int why = rap_parse_line_schema(p, line, (size_t)len, 100, &field, msg,
                                                    sizeof msg);
                    CHECK(why >= -1 && why < RAP_REJ_COUNT && field >= -1 &&
                          field <= s->n_cols);
                }
                rap_schema_parser_free(p);
            }
        } else {
            refused++;
            CHECK(!s && st == RAP_ERR_ARG);
            CHECK_MSG(!strncmp(rap_last_error(), "f.schema", 8), "%s", rap_last_error());
        }
        rap_input_schema_free(s);
    }
    CHECK_MSG(taken > 20 && refused > 20, "%d taken, %d refused", taken, refused);
}
