/* test_plan_parse.c -- the plan language (src/prep/plan_parse.c): accepted
 * plans and the nodes they build, rejected plans and their exact messages,
 * and the shipped plans in plans/. */
#include "test.h"

#include "core/core.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

static const int64_t k_kaggle[26] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3,
                                     93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652,
                                     2173, 4, 7046547, 18, 15, 286181, 105, 142572};
static const int64_t k_1tb[26] = {45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62,
                                  29275261, 1572176, 345138, 10, 2209, 11267, 128, 4, 974, 14,
                                  48937457, 11316796, 40094537, 452104, 12606, 104, 35};

/* The node bound to column name (NULL if none). */
static const rap_node *col_node(const rap_plan *p, const char *name)
{
    int c = rap_plan_find(p, name);
    return c < 0 ? NULL : &p->nodes[p->cols[c].node];
}

static int col_index(const rap_plan *p, const char *name)
{
    int c = rap_plan_find(p, name);
    return c < 0 ? -1 : p->cols[c].node;
}

static const rap_node *input_of(const rap_plan *p, const rap_node *n)
{
    return n && n->input >= 0 ? &p->nodes[n->input] : NULL;
}

/* Raw node index of column name in a fresh Criteo plan (int_j -> j, cat_j -> 13 + j). */
static int raw_node(const char *name)
{
    return name[0] == 'i' ? atoi(name + 4) : 13 + atoi(name + 4);
}

static rap_plan *parse(rap_test_ctx *t, const char *text, const char *src)
{
    rap_plan *p = NULL;
    rap_status s = rap_plan_parse(text, src, rap_schema_criteo(), &p);
    CHECK_MSG(s == RAP_OK, "parse failed: %s", rap_last_error());
    return p;
}

/* Parses text expecting failure with code and exactly msg. */
static void expect_error(rap_test_ctx *t, int at, const char *text, rap_status code, const char *msg)
{
    rap_plan *p = (rap_plan *)1;
    rap_status s = rap_plan_parse(text, "e.plan", rap_schema_criteo(), &p);
    CHECK_MSG(s == code, "case at line %d: status %s, want %s (%s)", at, rap_status_name(s),
              rap_status_name(code), rap_last_error());
    CHECK_MSG(p == NULL, "case at line %d: *out not NULL on failure", at);
    CHECK_MSG(strcmp(rap_last_error(), msg) == 0, "case at line %d:\n      got  \"%s\"\n      want \"%s\"",
              at, rap_last_error(), msg);
    if (s == RAP_OK)
        rap_plan_free(p);
}

/* 1-based column of the first occurrence of needle in line, plus skip. */
static int col_of(const char *line, const char *needle, int skip)
{
    const char *q = strstr(line, needle);
    return q ? (int)(q - line) + 1 + skip : -1;
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Finds plans/<name> from the repository root or a build directory. */

/* ------------------------------------------------------------- accepted */

typedef struct {
    const char *line;
    const char *out;     /* column written */
    const char *in;      /* raw column read */
    rap_op_type op;
    double f0, f1;
    int64_t i0, i1;
    const char *method;  /* text before the op name's column (".name(") */
} op_case;

static const op_case k_method_cases[] = {
    {"df[\"a\"] = df[\"int_0\"].fill_null(1.5)", "a", "int_0", RAP_OP_FILL_NULL, 1.5, 0, 0, 0, ".fill_null("},
    {"df[\"b\"] = df[\"int_1\"].cast(dt.int64)", "b", "int_1", RAP_OP_CAST, 0, 0, RAP_SPARSE, 0, ".cast("},
    {"df[\"c\"] = df[\"cat_0\"].cast(\"float32\")", "c", "cat_0", RAP_OP_CAST, 0, 0, RAP_DENSE, 0, ".cast("},
    {"df[\"d\"] = df[\"int_2\"].logit(1e-5)", "d", "int_2", RAP_OP_LOGIT, 1e-5, 0, 0, 0, ".logit("},
    {"df[\"e\"] = df[\"int_3\"].boxcox(0.5)", "e", "int_3", RAP_OP_BOXCOX, 0.5, 0, 0, 0, ".boxcox("},
    {"df[\"f\"] = df[\"int_4\"].log()", "f", "int_4", RAP_OP_LOG, 0, 0, 0, 0, ".log("},
    {"df[\"g\"] = df[\"int_5\"].add(2)", "g", "int_5", RAP_OP_ADD, 2, 0, 0, 0, ".add("},
    {"df[\"h\"] = df[\"int_6\"].mul(-0.5)", "h", "int_6", RAP_OP_MUL, -0.5, 0, 0, 0, ".mul("},
    {"df[\"i\"] = df[\"int_7\"].onehot(-1, 10, 5)", "i", "int_7", RAP_OP_ONEHOT, -1, 10, 5, 0, ".onehot("},
    {"df[\"j\"] = df[\"int_8\"].bucketize([0.5, 1, 1.5e0])", "j", "int_8", RAP_OP_BUCKETIZE, 0, 0, 0, 0, ".bucketize("},
    {"df[\"k\"] = df[\"cat_1\"].sigrid_hash(7, 100)", "k", "cat_1", RAP_OP_SIGRID_HASH, 0, 0, 7, 100, ".sigrid_hash("},
    {"df[\"l\"] = df[\"cat_2\"].firstx(3)", "l", "cat_2", RAP_OP_FIRSTX, 0, 0, 3, 0, ".firstx("},
    {"df[\"m\"] = df[\"cat_3\"].clamp(-2, 10)", "m", "cat_3", RAP_OP_CLAMP, -2, 10, 0, 0, ".clamp("},
    {"df[\"n\"] = df[\"cat_4\"].ngram(2)", "n", "cat_4", RAP_OP_NGRAM, 0, 0, 2, 0, ".ngram("},
    {"df[\"o\"] = df[\"cat_5\"].mapid([3, 2, -1])", "o", "cat_5", RAP_OP_MAPID, 0, 0, 0, 0, ".mapid("},
};
#define N_CASES ((int)(sizeof k_method_cases / sizeof k_method_cases[0]))

/* The same ops in the functional style (same order, same columns). */
static const char *const k_functional_lines[N_CASES] = {
    "df[\"a\"] = functional.fill_null(df[\"int_0\"], 1.5)",
    "df[\"b\"] = functional.cast(df[\"int_1\"], dt.int64)",
    "df[\"c\"] = functional.cast(df[\"cat_0\"], 'float32')",
    "df[\"d\"] = functional.logit(df[\"int_2\"], 0.00001)",
    "df[\"e\"] = functional.boxcox(df[\"int_3\"], 5e-1)",
    "df[\"f\"] = functional.log(df[\"int_4\"])",
    "df[\"g\"] = functional.add(df[\"int_5\"], 2.0)",
    "df[\"h\"] = functional.mul(df[\"int_6\"], -.5)",
    "df[\"i\"] = functional.onehot(df[\"int_7\"], -1, 10, 5)",
    "df[\"j\"] = functional.bucketize(df[\"int_8\"], [0.5, 1.0, 1.5,])",
    "df[\"k\"] = functional.sigrid_hash(df[\"cat_1\"], 7, 100)",
    "df[\"l\"] = functional.firstx(df[\"cat_2\"], 3)",
    "df[\"m\"] = functional.clamp(df[\"cat_3\"], -2, 10)",
    "df[\"n\"] = functional.ngram(df[\"cat_4\"], 2)",
    "df[\"o\"] = functional.mapid(df[\"cat_5\"], [3, 2, -1])",
};

/* Checks column k's node of p against case k; functional: the op name's
 * column is after "functional.". */
static void check_case(rap_test_ctx *t, const rap_plan *p, int k, const char *line, bool functional)
{
    const op_case *c = &k_method_cases[k];
    const rap_node *n = col_node(p, c->out);
    CHECK_MSG(n != NULL, "column %s missing", c->out);
    if (!n)
        return;
    CHECK_MSG(n->op == c->op, "%s: op %s, want %s", c->out, rap_op_name(n->op), rap_op_name(c->op));
    CHECK_MSG(n->input == raw_node(c->in), "%s: input %d, want %d", c->out, n->input, raw_node(c->in));
    CHECK_MSG(n->f[0] == c->f0 && n->f[1] == c->f1, "%s: f %g %g", c->out, n->f[0], n->f[1]);
    CHECK_MSG(n->i[0] == c->i0 && n->i[1] == c->i1, "%s: i %lld %lld", c->out, (long long)n->i[0],
              (long long)n->i[1]);
    CHECK_MSG(n->line == k + 1, "%s: line %d, want %d", c->out, n->line, k + 1);
    int want_col = functional ? col_of(line, "functional.", 11) : col_of(line, c->method, 1);
    CHECK_MSG(n->col == want_col, "%s: col %d, want %d", c->out, n->col, want_col);
    if (c->op == RAP_OP_BUCKETIZE) {
        CHECK(n->n_aux == 3 && n->borders && n->borders[0] == 0.5 && n->borders[1] == 1.0 &&
              n->borders[2] == 1.5);
        CHECK(n->kind == RAP_SPARSE && n->bounded && n->lo == 0 && n->hi == 3);
    }
    if (c->op == RAP_OP_MAPID)
        CHECK(n->n_aux == 3 && n->map && n->map[0] == 3 && n->map[1] == 2 && n->map[2] == -1);
    if (c->op == RAP_OP_ONEHOT)
        CHECK(n->kind == RAP_VECTOR && n->width == 5);
    if (c->op == RAP_OP_CAST)
        CHECK(n->kind == (rap_kind)c->i0);
}

RAP_TEST(plan_parse_every_op_method_style)
{
    char text[4096] = "";
    for (int k = 0; k < N_CASES; k++) {
        strcat(text, k_method_cases[k].line);
        strcat(text, "\n");
    }
    rap_plan *p = parse(t, text, "m.plan");
    REQUIRE(p);
    CHECK(rap_plan_n_ops(p) == N_CASES);
    CHECK(p->n_cols == 39 + N_CASES);
    for (int k = 0; k < N_CASES; k++) {
        CHECK(rap_plan_find(p, k_method_cases[k].out) == 39 + k);
        check_case(t, p, k, k_method_cases[k].line, false);
    }
    CHECK(strcmp(p->source, "m.plan") == 0);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_every_op_functional_style)
{
    char text[4096] = "";
    for (int k = 0; k < N_CASES; k++) {
        strcat(text, k_functional_lines[k]);
        strcat(text, "\n");
    }
    rap_plan *p = parse(t, text, "f.plan");
    REQUIRE(p);
    CHECK(rap_plan_n_ops(p) == N_CASES);
    for (int k = 0; k < N_CASES; k++)
        check_case(t, p, k, k_functional_lines[k], true);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_nesting)
{
    const char *text =
        "df[\"c\"] = functional.firstx(functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 100), 1)\n"
        "df[\"d\"] = functional.logit(df[\"int_0\"] * 0.01, 1e-5)\n"
        "df[\"e\"] = (df[\"int_2\"] + 3).log()\n"
        "df[\"f\"] = functional.sigrid_hash(df[\"cat_1\"], 1, 50).firstx(1).clamp(0, 9)\n";
    rap_plan *p = parse(t, text, "n.plan");
    REQUIRE(p);
    CHECK(rap_plan_n_ops(p) == 10);
    const rap_node *c = col_node(p, "c"), *h = input_of(p, c), *f = input_of(p, h);
    REQUIRE(c && h && f);
    CHECK(c->op == RAP_OP_FIRSTX && c->i[0] == 1 && c->line == 1 && c->col == 22);
    CHECK(h->op == RAP_OP_SIGRID_HASH && h->i[0] == 0 && h->i[1] == 100 && h->col == 40);
    CHECK(f->op == RAP_OP_FILL_NULL && f->f[0] == 0 && f->input == raw_node("cat_0") && f->col == 64);
    CHECK(c->kind == RAP_SPARSE && c->bounded && c->lo == 0 && c->hi == 99 && c->level == 3);
    const rap_node *d = col_node(p, "d"), *m = input_of(p, d);
    REQUIRE(d && m);
    CHECK(d->op == RAP_OP_LOGIT && d->f[0] == 1e-5 && d->line == 2 && d->col == 22);
    CHECK(m->op == RAP_OP_MUL && m->f[0] == 0.01 && m->input == raw_node("int_0") && m->col == 40);
    const rap_node *e = col_node(p, "e"), *a = input_of(p, e);
    REQUIRE(e && a);
    CHECK(e->op == RAP_OP_LOG && e->line == 3 && e->col == 29);
    CHECK(a->op == RAP_OP_ADD && a->f[0] == 3 && a->input == raw_node("int_2") && a->col == 24);
    const rap_node *g = col_node(p, "f");
    REQUIRE(g);
    CHECK(g->op == RAP_OP_CLAMP && g->lo == 0 && g->hi == 9 && g->level == 3);
    CHECK(input_of(p, g)->op == RAP_OP_FIRSTX && input_of(p, input_of(p, g))->op == RAP_OP_SIGRID_HASH);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_arithmetic)
{
    const char *text =
        "df[\"a\"] = df[\"int_0\"] - 2.5\n"
        "df[\"b\"] = 3 + df[\"int_1\"]\n"
        "df[\"c\"] = 2 * df[\"int_2\"]\n"
        "df[\"d\"] = (1 + 2) * df[\"int_3\"] * -1e-3\n"
        "df[\"e\"] = df[\"int_4\"] + -4\n"
        "df[\"f\"] = df[\"int_5\"].clamp(-3, 1E9)\n"
        "df[\"g\"] = df[\"int_6\"] * .5 + 1\n"
        "df[\"h\"] = df[\"int_7\"] + (2 * 3 - 0.5)\n"
        "df[\"i\"] = df[\"int_8\"] - -7\n";
    rap_plan *p = parse(t, text, "a.plan");
    REQUIRE(p);
    const rap_node *n;
    n = col_node(p, "a");
    CHECK(n->op == RAP_OP_ADD && n->f[0] == -2.5 && n->col == 23 && n->input == raw_node("int_0"));
    n = col_node(p, "b");
    CHECK(n->op == RAP_OP_ADD && n->f[0] == 3 && n->col == 13 && n->input == raw_node("int_1"));
    n = col_node(p, "c");
    CHECK(n->op == RAP_OP_MUL && n->f[0] == 2 && n->col == 13 && n->input == raw_node("int_2"));
    n = col_node(p, "d");
    CHECK(n->op == RAP_OP_MUL && n->f[0] == -1e-3 && n->col == 33);
    CHECK(input_of(p, n)->op == RAP_OP_MUL && input_of(p, n)->f[0] == 3 &&
          input_of(p, n)->input == raw_node("int_3"));
    n = col_node(p, "e");
    CHECK(n->op == RAP_OP_ADD && n->f[0] == -4);
    n = col_node(p, "f");
    CHECK(n->op == RAP_OP_CLAMP && n->f[0] == -3 && n->f[1] == 1e9);
    n = col_node(p, "g");
    CHECK(n->op == RAP_OP_ADD && n->f[0] == 1 && input_of(p, n)->op == RAP_OP_MUL &&
          input_of(p, n)->f[0] == 0.5);
    n = col_node(p, "h"); /* constants fold: one add of 5.5 */
    CHECK(n->op == RAP_OP_ADD && n->f[0] == 5.5 && n->input == raw_node("int_7"));
    n = col_node(p, "i");
    CHECK(n->op == RAP_OP_ADD && n->f[0] == 7);
    CHECK(rap_plan_n_ops(p) == 11);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_copies_del_comments)
{
    const char *text =
        "# a comment line\n"
        "import torcharrow.dtypes as dt\n"
        "from torcharrow import functional\n"
        "\n"
        "   \t\n"
        "df[\"int_13\"] = df[\"int_0\"]   # a copy: no op\n"
        "df['x'] = df['int_13'].fill_null(0)\r\n"
        "del df[\"int_1\"]\n"
        "df[\"y\"] = df[\"cat_0\"]\n"
        "  df[\"int_13\"] = df[\"x\"]\n"
        "df[\"cat_0\"] = df[\"cat_0\"].fill_null(0) # overwrite in place\n"
        "df[\"int_1\"] = df[\"int_2\"].log()"; /* last line without newline */
    rap_plan *p = parse(t, text, "c.plan");
    REQUIRE(p);
    CHECK(rap_plan_n_ops(p) == 3);
    /* frame: int_0, int_2..int_12, cat_0..cat_25, int_13, x, y, int_1 */
    CHECK(p->n_cols == 39 - 1 + 4);
    CHECK(rap_plan_find(p, "int_0") == 0 && rap_plan_find(p, "int_2") == 1);
    CHECK(rap_plan_find(p, "cat_0") == 12);
    CHECK(rap_plan_find(p, "int_13") == 38 && rap_plan_find(p, "x") == 39);
    CHECK(rap_plan_find(p, "y") == 40 && rap_plan_find(p, "int_1") == 41);
    /* the copy bound the raw node; int_13 was then rebound to x's node */
    CHECK(col_index(p, "int_13") == col_index(p, "x"));
    CHECK(col_node(p, "x")->op == RAP_OP_FILL_NULL && col_node(p, "x")->input == raw_node("int_0"));
    CHECK(col_node(p, "x")->line == 7 && col_node(p, "x")->col == 24);
    CHECK(col_index(p, "y") == raw_node("cat_0"));
    CHECK(col_node(p, "cat_0")->op == RAP_OP_FILL_NULL && col_node(p, "cat_0")->line == 11);
    CHECK(col_node(p, "int_1")->op == RAP_OP_LOG && col_node(p, "int_1")->input == raw_node("int_2"));
    rap_plan_free(p);

    /* an empty plan is the raw columns */
    p = parse(t, "", "empty.plan");
    REQUIRE(p);
    CHECK(p->n_cols == 39 && rap_plan_n_ops(p) == 0);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_keyword_arguments)
{
    const char *text =
        "df[\"a\"] = functional.sigrid_hash(df[\"cat_0\"], salt=5, max_value=100)\n"
        "df[\"b\"] = functional.sigrid_hash(input=df[\"cat_1\"], max_value=7, salt=1)\n"
        "df[\"c\"] = df[\"cat_2\"].firstx(x=2)\n"
        "df[\"d\"] = functional.bucketize(df[\"int_0\"], borders=[1, 2])\n"
        "df[\"e\"] = df[\"int_1\"].onehot(num_classes=4, low=0, high=1)\n"
        "df[\"f\"] = df[\"int_2\"].fill_null(fill_value=-1).boxcox(lmbda=0).cast(dtype=dt.int64)\n"
        "df[\"g\"] = df[\"cat_3\"].clamp(lo=0, hi=9).ngram(n=3).mapid(map=[0, 1])\n"
        "df[\"h\"] = df[\"int_3\"].logit(eps=0.25)\n"
        "df[\"i\"] = functional.clamp(df[\"int_4\"], 1, hi=2)\n"
        /* TorchArrow's own keyword names */
        "df[\"j\"] = functional.firstx(col=df[\"cat_4\"], num_to_copy=3)\n"
        "df[\"k\"] = functional.sigrid_hash(value_col=df[\"cat_5\"], salt=2, max_value=9)\n"
        "df[\"l\"] = functional.bucketize(value_col=df[\"int_5\"], borders=[0])\n";
    rap_plan *p = parse(t, text, "k.plan");
    REQUIRE(p);
    const rap_node *n;
    n = col_node(p, "a");
    CHECK(n->op == RAP_OP_SIGRID_HASH && n->i[0] == 5 && n->i[1] == 100);
    n = col_node(p, "b");
    CHECK(n->op == RAP_OP_SIGRID_HASH && n->i[0] == 1 && n->i[1] == 7 && n->input == raw_node("cat_1"));
    n = col_node(p, "c");
    CHECK(n->op == RAP_OP_FIRSTX && n->i[0] == 2);
    n = col_node(p, "d");
    CHECK(n->op == RAP_OP_BUCKETIZE && n->n_aux == 2 && n->borders[1] == 2);
    n = col_node(p, "e");
    CHECK(n->op == RAP_OP_ONEHOT && n->f[0] == 0 && n->f[1] == 1 && n->i[0] == 4 && n->width == 4);
    n = col_node(p, "f");
    CHECK(n->op == RAP_OP_CAST && n->i[0] == RAP_SPARSE);
    CHECK(input_of(p, n)->op == RAP_OP_BOXCOX && input_of(p, n)->f[0] == 0);
    CHECK(input_of(p, input_of(p, n))->op == RAP_OP_FILL_NULL && input_of(p, input_of(p, n))->f[0] == -1);
    n = col_node(p, "g");
    CHECK(n->op == RAP_OP_MAPID && n->n_aux == 2 && n->map[1] == 1);
    CHECK(input_of(p, n)->op == RAP_OP_NGRAM && input_of(p, n)->i[0] == 3);
    CHECK(input_of(p, input_of(p, n))->op == RAP_OP_CLAMP && input_of(p, input_of(p, n))->f[1] == 9);
    n = col_node(p, "h");
    CHECK(n->op == RAP_OP_LOGIT && n->f[0] == 0.25);
    n = col_node(p, "i");
    CHECK(n->op == RAP_OP_CLAMP && n->f[0] == 1 && n->f[1] == 2);
    n = col_node(p, "j");
    CHECK(n->op == RAP_OP_FIRSTX && n->i[0] == 3 && n->input == raw_node("cat_4"));
    n = col_node(p, "k");
    CHECK(n->op == RAP_OP_SIGRID_HASH && n->i[0] == 2 && n->i[1] == 9 && n->input == raw_node("cat_5"));
    n = col_node(p, "l");
    CHECK(n->op == RAP_OP_BUCKETIZE && n->n_aux == 1 && n->input == raw_node("int_5"));
    CHECK(rap_plan_n_ops(p) == 16);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_mapid_file)
{
    char dir[512], path[600], plan[600], text[1024];
    snprintf(dir, sizeof dir, "%s/plandir", rap_test_tmpdir());
    snprintf(path, sizeof path, "%s/maps", dir);
    REQUIRE(mkdir(dir, 0700) == 0 || access(dir, W_OK) == 0);
    REQUIRE(mkdir(path, 0700) == 0 || access(path, W_OK) == 0);
    snprintf(path, sizeof path, "%s/maps/ids.txt", dir);
    REQUIRE(write_file(path, "5\n\n# a comment\n  7  \r\n-1\n"));
    snprintf(path, sizeof path, "%s/maps/bad.txt", dir);
    REQUIRE(write_file(path, "1\nx1\n"));
    snprintf(plan, sizeof plan, "%s/p.plan", dir);
    REQUIRE(write_file(plan, "# relative to the plan's directory\n"
                             "df[\"m\"] = df[\"cat_0\"].mapid(\"maps/ids.txt\")\n"));
    rap_plan *p = NULL;
    REQUIRE_OK(rap_plan_load(plan, rap_schema_criteo(), &p));
    const rap_node *n = col_node(p, "m");
    REQUIRE(n);
    CHECK(n->op == RAP_OP_MAPID && n->n_aux == 3 && n->map[0] == 5 && n->map[1] == 7 && n->map[2] == -1);
    CHECK(n->bounded && n->lo == -1 && n->hi == 7);
    CHECK(strcmp(p->source, plan) == 0);
    rap_plan_free(p);
    /* an absolute path, functional and keyword style */
    snprintf(text, sizeof text, "df[\"m\"] = functional.mapid(df[\"cat_1\"], map=\"%s/maps/ids.txt\")\n", dir);
    p = parse(t, text, "abs.plan");
    REQUIRE(p);
    CHECK(col_node(p, "m")->n_aux == 3 && col_node(p, "m")->map[1] == 7);
    rap_plan_free(p);
    /* errors name the map file and its line, then the plan position */
    char want[1200];
    snprintf(text, sizeof text, "df[\"m\"] = df[\"cat_0\"].mapid('maps/bad.txt')\n");
    p = (rap_plan *)1;
    CHECK(rap_plan_parse(text, plan, rap_schema_criteo(), &p) == RAP_ERR_PLAN && p == NULL);
    snprintf(want, sizeof want, "%s/maps/bad.txt:2: expected one integer per line, got \"x1\" (mapid map of %s:1:29)",
             dir, plan);
    CHECK_MSG(strcmp(rap_last_error(), want) == 0, "got \"%s\"", rap_last_error());
    snprintf(text, sizeof text, "\ndf[\"m\"] = df[\"cat_0\"].mapid('maps/none.txt')\n");
    CHECK(rap_plan_parse(text, plan, rap_schema_criteo(), &p) == RAP_ERR_PLAN && p == NULL);
    snprintf(want, sizeof want, "%s:2:29: cannot open mapid file \"%s/maps/none.txt\": No such file or directory",
             plan, dir);
    CHECK_MSG(strcmp(rap_last_error(), want) == 0, "got \"%s\"", rap_last_error());
}

/* ------------------------------------------------------------- rejected */

#define ERR(text, msg) expect_error(t, __LINE__, text, RAP_ERR_PLAN, msg)

RAP_TEST(plan_parse_rejects_with_exact_messages)
{
    /* unknown ops */
    ERR("df[\"a\"] = df[\"cat_0\"].sigrid_hsh(0, 10)",
        "e.plan:1:23: unknown operation \"sigrid_hsh\" (did you mean sigrid_hash?)");
    ERR("df[\"a\"] = functional.FirstX(df[\"cat_0\"], 1)",
        "e.plan:1:22: unknown operation \"FirstX\" (did you mean firstx?)");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(0).frobnicate()",
        "e.plan:1:36: unknown operation \"frobnicate\" (known: fill_null, cast, logit, boxcox, log, "
        "add, mul, onehot, bucketize, sigrid_hash, firstx, clamp, ngram, mapid)");
    /* argument counts, names and types */
    ERR("df[\"a\"] = df[\"cat_0\"].sigrid_hash(0)",
        "e.plan:1:23: sigrid_hash expects 2 arguments (salt, max_value), got 1");
    ERR("df[\"a\"] = functional.sigrid_hash(df[\"cat_0\"], 0)",
        "e.plan:1:22: sigrid_hash expects 3 arguments (input, salt, max_value), got 2");
    ERR("df[\"a\"] = df[\"int_0\"].log(1)", "e.plan:1:23: log expects no arguments, got 1");
    ERR("df[\"a\"] = functional.firstx(df[\"cat_0\"])",
        "e.plan:1:22: firstx expects 2 arguments (input, x), got 1");
    ERR("df[\"a\"] = df[\"cat_0\"].firstx(k=1)", "e.plan:1:30: firstx has no parameter \"k\" (parameters: x)");
    ERR("df[\"a\"] = functional.sigrid_hash(df[\"cat_0\"], salt=0, salt=1)",
        "e.plan:1:55: sigrid_hash got two values for salt");
    ERR("df[\"a\"] = functional.sigrid_hash(salt=0, df[\"cat_0\"], 1)",
        "e.plan:1:42: positional argument after a keyword argument");
    ERR("df[\"a\"] = df[\"cat_0\"].sigrid_hash(0, 1.5)",
        "e.plan:1:38: sigrid_hash expects an integer for max_value, got 1.5");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(\"x\")",
        "e.plan:1:33: fill_null expects a number for fill_value, got \"x\"");
    ERR("df[\"a\"] = df[\"int_0\"].clamp(0, df[\"int_1\"])",
        "e.plan:1:32: clamp expects a number for hi, got a column (rap ops take one column and "
        "constants; see docs/PLAN_LANGUAGE.md)");
    ERR("df[\"a\"] = df[\"int_0\"].bucketize(0.5)",
        "e.plan:1:33: bucketize expects a list of numbers for borders, got 0.5");
    ERR("df[\"a\"] = df[\"cat_0\"].mapid([1, 2.5])", "e.plan:1:33: mapid expects integer ids in map, got 2.5");
    ERR("df[\"a\"] = df[\"int_0\"].cast(dt.int32)",
        "e.plan:1:31: unknown dtype dt.int32: expected dt.int64 or dt.float32");
    ERR("df[\"a\"] = df[\"int_0\"].cast(\"int8\")",
        "e.plan:1:28: cast expects dt.int64 or dt.float32 for dtype, got \"int8\"");
    ERR("df[\"a\"] = functional.log(3)", "e.plan:1:26: log expects a column as input, got 3");
    /* columns */
    ERR("df[\"a\"] = df[\"cat_99\"].fill_null(0)", "e.plan:1:11: undefined column \"cat_99\"");
    ERR("df[\"b\"] = df[\"a\"].log()\n\ndf[\"a\"] = df[\"int_0\"]\n",
        "e.plan:1:11: undefined column \"a\" (defined later at line 3)");
    ERR("del df[\"int_0\"]\ndf[\"a\"] = df[\"int_0\"].log()",
        "e.plan:2:11: undefined column \"int_0\" (deleted at line 1)");
    ERR("del df[\"zzz\"]", "e.plan:1:5: undefined column \"zzz\"");
    ERR("df[\"\"] = df[\"int_0\"]", "e.plan:1:4: column name must not be empty");
    ERR("df[0] = df[\"int_0\"]", "e.plan:1:4: expected a column name in quotes, got '0'");
    /* arithmetic */
    ERR("df[\"a\"] = df[\"int_0\"] + df[\"int_1\"]",
        "e.plan:1:23: adding two columns is not supported: rap ops take one column and constants; "
        "see docs/PLAN_LANGUAGE.md");
    ERR("df[\"a\"] = df[\"int_0\"] * df[\"int_1\"].log()",
        "e.plan:1:23: multiplying two columns is not supported: rap ops take one column and "
        "constants; see docs/PLAN_LANGUAGE.md");
    ERR("df[\"a\"] = df[\"int_0\"] / 2",
        "e.plan:1:23: division is not supported: rap ops take one column and constants; see "
        "docs/PLAN_LANGUAGE.md");
    ERR("df[\"a\"] = df[\"int_0\"] ** 2",
        "e.plan:1:23: '**' is not supported: rap ops take one column and constants; see "
        "docs/PLAN_LANGUAGE.md");
    ERR("df[\"a\"] = 2 - df[\"int_0\"]",
        "e.plan:1:13: number - column is not supported: rap ops take one column and constants; "
        "see docs/PLAN_LANGUAGE.md (write column * -1 + 2)");
    ERR("df[\"a\"] = -df[\"int_0\"]",
        "e.plan:1:11: unary - on a column is not supported: rap ops take one column and "
        "constants; see docs/PLAN_LANGUAGE.md (write column * -1)");
    /* syntax */
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(0", "e.plan:1:34: expected ')'");
    ERR("df[\"a\"] = (df[\"int_0\"] + 3.log()", "e.plan:1:26: malformed number '3.log'");
    ERR("df[\"a\"] = (df[\"int_0\"] + 3", "e.plan:1:27: expected ')'");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(0 1)", "e.plan:1:35: expected ',' or ')', got '1'");
    ERR("x = 3", "e.plan:1:1: not a statement: expected df[\"name\"] = EXPR or del df[\"name\"]");
    ERR("df[\"a\"] = df[\"int_0\"]\n  print(df)",
        "e.plan:2:3: not a statement: expected df[\"name\"] = EXPR or del df[\"name\"]");
    ERR("df[\"a\"] = 3", "e.plan:1:11: expected a column expression, got 3 (a column is df[\"name\"] "
                       "or an op applied to one)");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(0) extra", "e.plan:1:36: expected end of line, got 'extra'");
    ERR("df[\"a\"] = df[\"int_0\"] = df[\"int_1\"]",
        "e.plan:1:23: expected end of line, got '=' (one assignment per statement)");
    ERR("df[\"a\"] += 1", "e.plan:1:9: expected '=', got '+='");
    ERR("df[\"a] = 1", "e.plan:1:4: unterminated string: expected a closing \"");
    ERR("df[\"a\"] = df[\"int_0\"]$", "e.plan:1:22: unexpected character '$'");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(1e400)", "e.plan:1:33: number 1e400 is out of range");
    ERR("df[\"a\"] = df[\"int_0\"].log", "e.plan:1:26: expected '(' after log");
    ERR("df[\"a\"] = foo(df[\"int_0\"])",
        "e.plan:1:11: unknown name \"foo\": expected df[\"column\"], functional.OP(...), a number, "
        "a list or a string");
    /* preconditions, from rap_plan_add_op */
    ERR("df[\"a\"] = df[\"cat_0\"].sigrid_hash(0, 0)", "e.plan:1:23: sigrid_hash expects max >= 1, got 0");
    ERR("df[\"a\"] = df[\"int_0\"].sigrid_hash(0, 10)",
        "e.plan:1:23: sigrid_hash expects a sparse column, got a dense column");
    ERR("df[\"a\"] = df[\"int_0\"].bucketize([])", "e.plan:1:23: bucketize expects a non-empty list of borders");
    ERR("df[\"a\"] = df[\"int_0\"].onehot(0, 1, 0)", "e.plan:1:23: onehot expects 0 < C <= 65536, got 0");
    ERR("df[\"a\"] = df[\"cat_0\"].fill_null(0.5)",
        "e.plan:1:23: fill_null on a sparse column expects an integer id, got 0.5");
    ERR("df[\"a\"] = df[\"cat_0\"] * 2", "e.plan:1:23: mul expects a dense column, got a sparse column");
    ERR("df[\"a\"] = df[\"int_0\"].fill_null(0)\ndf[\"b\"] = functional.logit(df[\"a\"], 0.5)",
        "e.plan:2:22: logit expects 0 <= eps < 0.5, got 0.5");
    ERR("df[\"a\"] = df[\"int_0\"].onehot(0, 10, 4).log()",
        "e.plan:1:40: log expects a dense or sparse column, got a vector column (onehot output can "
        "only be a model input)");
}

RAP_TEST(plan_parse_rejects_deep_nesting)
{
    /* 99 levels are fine, 5000 are an error, not a stack overflow */
    static char text[20000];
    int n = snprintf(text, sizeof text, "df[\"a\"] = df[\"int_0\"] + ");
    for (int k = 0; k < 98; k++)
        text[n++] = '(';
    text[n++] = '1';
    for (int k = 0; k < 98; k++)
        text[n++] = ')';
    text[n] = 0;
    rap_plan *p = parse(t, text, "deep.plan");
    CHECK(p && col_node(p, "a")->op == RAP_OP_ADD && col_node(p, "a")->f[0] == 1);
    rap_plan_free(p);
    n = snprintf(text, sizeof text, "df[\"a\"] = df[\"int_0\"] + ");
    for (int k = 0; k < 5000; k++)
        text[n++] = k % 2 ? '-' : '(';
    text[n] = 0;
    ERR(text, "e.plan:1:124: expression nested too deeply (at most 100 levels)");
}

RAP_TEST(plan_parse_load_missing_file)
{
    char path[600];
    snprintf(path, sizeof path, "%s/no_such.plan", rap_test_tmpdir());
    rap_plan *p = (rap_plan *)1;
    CHECK(rap_plan_load(path, rap_schema_criteo(), &p) == RAP_ERR_IO);
    CHECK(p == NULL);
    char want[700];
    snprintf(want, sizeof want, "%s: cannot open plan: No such file or directory", path);
    CHECK_MSG(strcmp(rap_last_error(), want) == 0, "got \"%s\"", rap_last_error());
    /* a load failure inside the file names the path */
    snprintf(path, sizeof path, "%s/bad.plan", rap_test_tmpdir());
    REQUIRE(write_file(path, "# bad\ndf[\"a\"] = df[\"int_0\"].fill_nul(0)\n"));
    CHECK(rap_plan_load(path, rap_schema_criteo(), &p) == RAP_ERR_PLAN);
    snprintf(want, sizeof want, "%s:2:23: unknown operation \"fill_nul\" (did you mean fill_null?)", path);
    CHECK_MSG(strcmp(rap_last_error(), want) == 0, "got \"%s\"", rap_last_error());
}

/* Runs a parse with stderr captured into buf. */
static rap_status parse_capturing(const char *text, const char *src, rap_plan **p, char *buf, size_t n)
{
    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", rap_test_tmpdir());
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
    rap_status s = rap_plan_parse(text, src, rap_schema_criteo(), p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t got = fread(buf, 1, n - 1, f);
        buf[got] = 0;
        fclose(f);
    }
    return s;
}

RAP_TEST(plan_parse_warns_unused_results)
{
    int level = rap_log_level();
    rap_log_set_level(1);
    char err[2048];
    rap_plan *p = NULL;
    rap_status s = parse_capturing("df[\"a\"] = df[\"int_0\"].fill_null(0)\n"
                                   "df[\"a\"] = df[\"int_1\"].log()\n"
                                   "df[\"b\"] = df[\"cat_0\"].sigrid_hash(0, 10)\n"
                                   "del df[\"b\"]\n",
                                   "w.plan", &p, err, sizeof err);
    rap_log_set_level(level);
    CHECK_MSG(s == RAP_OK, "%s", rap_last_error());
    CHECK_MSG(strcmp(err, "warning: w.plan:1: result of fill_null is never used\n"
                          "warning: w.plan:3: result of sigrid_hash is never used\n") == 0,
              "stderr: \"%s\"", err);
    if (p) {
        CHECK(rap_plan_n_ops(p) == 1 && p->n_nodes == 39 + 3);
        rap_plan_free(p);
    }
    /* no warning when everything is used */
    p = NULL;
    s = parse_capturing("df[\"a\"] = df[\"int_0\"].fill_null(0).log()\n", "w.plan", &p, err, sizeof err);
    CHECK(s == RAP_OK && err[0] == 0);
    rap_plan_free(p);
}

/* ------------------------------------------------------------- shipped plans */

static rap_plan *load_shipped(rap_test_ctx *t, const char *name)
{
    char path[256];
    if (!rap_test_plan_path(name, path, sizeof path)) {
        CHECK_MSG(false, "plans/%s not found (run from the repository root)", name);
        return NULL;
    }
    rap_plan *p = NULL;
    rap_status s = rap_plan_load(path, rap_schema_criteo(), &p);
    CHECK_MSG(s == RAP_OK, "%s: %s", path, rap_last_error());
    return p;
}

/* Every sparse output column has a bounded id range (an embedding table). */
static void check_sparse_bounded(rap_test_ctx *t, const rap_plan *p, int *n_dense, int *n_sparse)
{
    *n_dense = *n_sparse = 0;
    for (int c = 0; c < p->n_cols; c++) {
        const rap_node *n = &p->nodes[p->cols[c].node];
        if (n->kind == RAP_SPARSE) {
            (*n_sparse)++;
            CHECK_MSG(n->bounded && n->lo >= 0 && n->hi >= n->lo, "%s: column %s not bounded",
                      p->source, p->cols[c].name);
        } else {
            (*n_dense)++;
        }
        CHECK_MSG(!n->nullable, "%s: column %s may hold nulls", p->source, p->cols[c].name);
    }
}

static void check_plan01(rap_test_ctx *t, const char *name, const int64_t *card)
{
    rap_plan *p = load_shipped(t, name);
    if (!p)
        return;
    CHECK_MSG(rap_plan_n_ops(p) == 105, "%s: %d ops", name, rap_plan_n_ops(p));
    CHECK(p->n_cols == 40);
    CHECK(p->n_nodes == 39 + 105); /* no dead nodes */
    int count[RAP_OP_COUNT] = {0};
    for (int i = 0; i < p->n_nodes; i++)
        count[p->nodes[i].op] += p->nodes[i].live;
    CHECK(count[RAP_OP_FILL_NULL] == 39 && count[RAP_OP_BUCKETIZE] == 1);
    CHECK(count[RAP_OP_SIGRID_HASH] == 26 && count[RAP_OP_FIRSTX] == 26 && count[RAP_OP_LOGIT] == 13);
    char nm[32];
    for (int j = 0; j < 13; j++) {
        snprintf(nm, sizeof nm, "int_%d", j);
        const rap_node *n = col_node(p, nm);
        CHECK(rap_plan_find(p, nm) == j);
        CHECK(n && n->op == RAP_OP_LOGIT && n->f[0] == 1e-5 && input_of(p, n)->op == RAP_OP_FILL_NULL &&
              input_of(p, n)->f[0] == 0 && input_of(p, n)->input == j);
    }
    for (int j = 0; j < 26; j++) {
        snprintf(nm, sizeof nm, "cat_%d", j);
        const rap_node *n = col_node(p, nm), *h = input_of(p, n), *f = input_of(p, h);
        CHECK(rap_plan_find(p, nm) == 13 + j);
        CHECK_MSG(n && n->op == RAP_OP_FIRSTX && n->i[0] == 1 && h->op == RAP_OP_SIGRID_HASH &&
                      h->i[0] == 0 && h->i[1] == card[j] && f->op == RAP_OP_FILL_NULL && f->input == 13 + j,
                  "%s: %s chain", name, nm);
        CHECK(n && n->bounded && n->lo == 0 && n->hi == card[j] - 1);
    }
    CHECK(rap_plan_find(p, "bucketize_int_0") == 39);
    const rap_node *b = col_node(p, "bucketize_int_0");
    CHECK(b && b->op == RAP_OP_BUCKETIZE && b->n_aux == 3 && b->borders[0] == 0.5 &&
          b->borders[1] == 1.0 && b->borders[2] == 1.5);
    /* from the filled int_0, not the raw one */
    CHECK(b && input_of(p, b)->op == RAP_OP_FILL_NULL && input_of(p, b)->input == 0);
    CHECK(b && b->kind == RAP_SPARSE && b->off == RAP_OFF_ARANGE && b->hi == 3);
    int nd, ns;
    check_sparse_bounded(t, p, &nd, &ns);
    CHECK(nd == 13 && ns == 27);
    rap_plan_free(p);
}

RAP_TEST(plan_parse_shipped_plan0_plan1)
{
    check_plan01(t, "plan0.plan", k_kaggle);
    check_plan01(t, "plan1.plan", k_1tb);
}

static void check_plan23(rap_test_ctx *t, const char *name, int D, int S, int n_ops)
{
    rap_plan *p = load_shipped(t, name);
    if (!p)
        return;
    CHECK_MSG(rap_plan_n_ops(p) == n_ops, "%s: %d ops, want %d", name, rap_plan_n_ops(p), n_ops);
    CHECK(p->n_nodes == p->schema.n_dense + p->schema.n_sparse + n_ops);
    CHECK(p->n_cols == D + S);
    int nd, ns;
    check_sparse_bounded(t, p, &nd, &ns);
    CHECK_MSG(nd == D && ns == S, "%s: %d dense, %d sparse", name, nd, ns);
    char nm[32];
    int types = 0, count[RAP_OP_COUNT] = {0};
    for (int i = 0; i < p->n_nodes; i++)
        count[p->nodes[i].op] += p->nodes[i].live;
    for (int k = 0; k < RAP_OP_COUNT; k++)
        types += count[k] > 0;
    CHECK(count[RAP_OP_LOGIT] && count[RAP_OP_BOXCOX] && count[RAP_OP_ONEHOT] &&
          count[RAP_OP_SIGRID_HASH] && count[RAP_OP_CLAMP] && count[RAP_OP_FIRSTX] && count[RAP_OP_NGRAM]);
    /* every copy reads its raw column */
    for (int j = 0; j < D; j++) {
        snprintf(nm, sizeof nm, "int_%d", j);
        const rap_node *n = col_node(p, nm);
        while (n && n->op != RAP_OP_INPUT)
            n = input_of(p, n);
        CHECK_MSG(n && n->kind == RAP_DENSE && n->raw == j % 13, "%s: %s", name, nm);
    }
    for (int j = 0; j < S; j++) {
        snprintf(nm, sizeof nm, "cat_%d", j);
        const rap_node *n = col_node(p, nm);
        while (n && n->op != RAP_OP_INPUT)
            n = input_of(p, n);
        CHECK_MSG(n && n->kind == RAP_SPARSE && n->raw == j % 26, "%s: %s", name, nm);
    }
    rap_plan_free(p);
}

RAP_TEST(plan_parse_shipped_plan2_plan3)
{
    /* sizes from plans/make_plans.py */
    check_plan23(t, "plan2.plan", 26, 52, 285);
    check_plan23(t, "plan3.plan", 52, 104, 1819);
}

RAP_TEST(plan_parse_shipped_default)
{
    rap_plan *p = load_shipped(t, "default.plan");
    if (!p)
        return;
    CHECK(rap_plan_n_ops(p) == 13 * 4 + 26 * 2);
    CHECK(p->n_cols == 39 && rap_plan_find(p, "bucketize_int_0") < 0);
    char nm[32];
    for (int j = 0; j < 13; j++) {
        snprintf(nm, sizeof nm, "int_%d", j);
        const rap_node *l = col_node(p, nm), *a = input_of(p, l), *c = input_of(p, a), *f = input_of(p, c);
        CHECK(l && l->op == RAP_OP_LOG && a->op == RAP_OP_ADD && a->f[0] == 4 && c->op == RAP_OP_CLAMP &&
              c->f[0] == -3 && c->f[1] == 1e9 && f->op == RAP_OP_FILL_NULL && f->f[0] == -3 &&
              f->input == j);
    }
    for (int j = 0; j < 26; j++) {
        snprintf(nm, sizeof nm, "cat_%d", j);
        const rap_node *h = col_node(p, nm);
        /* 16 table rows per id, at most 10^6 (plans/make_plans.py) */
        int64_t want = 16 * k_kaggle[j] < 1000000 ? 16 * k_kaggle[j] : 1000000;
        CHECK(h && h->op == RAP_OP_SIGRID_HASH && h->i[0] == 0 && h->i[1] == want &&
              input_of(p, h)->op == RAP_OP_FILL_NULL);
    }
    int nd, ns;
    check_sparse_bounded(t, p, &nd, &ns);
    CHECK(nd == 13 && ns == 26);
    rap_plan_free(p);
}
