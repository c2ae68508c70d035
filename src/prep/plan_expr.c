/*
 * plan_expr.c -- the plan language's grammar (docs/PLAN_LANGUAGE.md):
 * the recursive-descent parser of expressions (calls, lists, unary signs,
 * arithmetic folded on numbers) and of statements, over the tokens of one
 * line that plan_parse.c's lexer made. Ops applied to a column append a
 * node through apply_op (plan_parse.c).
 */
#include "core/core.h"
#include "prep/plan_parse_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- expressions */

static rap_status parse_expr(parser *P, val *out);

/* Parses an argument list after '(' up to and including ')'. */
static rap_status parse_args(parser *P, arg *args, int *nargs)
{
    int n = 0;
    bool seen_kw = false;
    *nargs = 0;
    if (is_punct(cur(P), ")")) {
        P->pos++;
        return RAP_OK;
    }
    for (;;) {
        if (n == MAX_ARGS)
            return perr(P, cur(P)->col, "too many arguments (at most %d)", MAX_ARGS);
        arg *a = &args[n];
        memset(a, 0, sizeof *a);
        if (cur(P)->k == T_IDENT && is_punct(peek(P, 1), "=")) {
            a->kw = cur(P);
            seen_kw = true;
            P->pos += 2;
        } else if (seen_kw) {
            return perr(P, cur(P)->col, "positional argument after a keyword argument");
        }
        RAP_TRY(parse_expr(P, &a->v));
        n++;
        *nargs = n;
        if (is_punct(cur(P), ",")) {
            P->pos++;
            if (is_punct(cur(P), ")")) {
                P->pos++;
                return RAP_OK;
            }
            continue;
        }
        if (is_punct(cur(P), ")")) {
            P->pos++;
            return RAP_OK;
        }
        if (cur(P)->k == T_EOL)
            return expected(P, "')'");
        return expected(P, "',' or ')'");
    }
}

/* op name token at the current position, then '(' args ')'. */
static rap_status parse_call(parser *P, bool functional, const val *receiver, val *out)
{
    tok *name = cur(P);
    if (name->k != T_IDENT)
        return expected(P, functional ? "an operation name after 'functional.'"
                                      : "an operation name after '.'");
    const op_spec *op = find_op(name);
    if (!op)
        return unknown_op(P, name);
    P->pos++;
    if (!is_punct(cur(P), "(")) {
        char what[64];
        snprintf(what, sizeof what, "'(' after %s", op->name);
        return expected(P, what);
    }
    P->pos++;
    arg args[MAX_ARGS];
    int nargs;
    RAP_TRY(parse_args(P, args, &nargs));
    return apply_op(P, name, op, functional, receiver, args, nargs, out);
}

static rap_status parse_list(parser *P, val *out)
{
    P->pos++; /* '[' */
    out->k = V_LIST;
    out->list0 = P->n_elems;
    out->nlist = 0;
    while (!is_punct(cur(P), "]")) {
        if (cur(P)->k == T_EOL)
            return expected(P, "']'");
        val e;
        memset(&e, 0, sizeof e);
        RAP_TRY(parse_expr(P, &e));
        if (e.k != V_NUM) {
            char b[64];
            return perr(P, e.col, "a list holds numbers only, got %s", describe_val(&e, b, sizeof b));
        }
        if (P->n_elems == P->cap_elems) {
            int cap = P->cap_elems ? 2 * P->cap_elems : 256;
            list_elem *g = rap_realloc(P->elems, sizeof *g * (size_t)cap, "plan list");
            if (!g)
                return RAP_ERR_NOMEM;
            P->elems = g;
            P->cap_elems = cap;
        }
        list_elem *le = &P->elems[P->n_elems++];
        le->n = e.n;
        le->col = e.col;
        le->src = e.src;
        le->len = e.len;
        out->nlist++;
        if (is_punct(cur(P), ","))
            P->pos++;
        else if (!is_punct(cur(P), "]"))
            return expected(P, cur(P)->k == T_EOL ? "']'" : "',' or ']'");
    }
    P->pos++;
    return RAP_OK;
}

static rap_status parse_primary(parser *P, val *out)
{
    tok *t = cur(P);
    if (t->k == T_NUM) {
        out->k = V_NUM;
        out->n.is_int = t->is_int;
        out->n.i = t->i;
        out->n.d = t->d;
        P->pos++;
        return RAP_OK;
    }
    if (t->k == T_STR) {
        out->k = V_STR;
        out->str = t->s + 1;
        out->str_len = t->len - 2;
        P->pos++;
        return RAP_OK;
    }
    if (is_punct(t, "["))
        return parse_list(P, out);
    if (is_punct(t, "(")) {
        P->pos++;
        RAP_TRY(parse_expr(P, out));
        return expect_punct(P, ")");
    }
    if (is_ident(t, "df")) {
        P->pos++;
        if (!is_punct(cur(P), "["))
            return expected(P, "'[' after df");
        char name[sizeof P->plan->cols[0].name];
        int name_col;
        RAP_TRY(parse_column_name(P, name, sizeof name, &name_col));
        int c = rap_plan_find(P->plan, name);
        if (c < 0)
            return undefined_column(P, t->col, name);
        out->k = V_COL;
        out->node = P->plan->cols[c].node;
        return RAP_OK;
    }
    if (is_ident(t, "functional")) {
        P->pos++;
        RAP_TRY(expect_punct(P, "."));
        return parse_call(P, true, NULL, out);
    }
    if (is_ident(t, "dt")) {
        P->pos++;
        RAP_TRY(expect_punct(P, "."));
        tok *d = cur(P);
        if (is_ident(d, "int64"))
            out->dtype = RAP_SPARSE;
        else if (is_ident(d, "float32"))
            out->dtype = RAP_DENSE;
        else if (d->k == T_IDENT)
            return perr(P, d->col, "unknown dtype dt.%.*s: expected dt.int64 or dt.float32", d->len, d->s);
        else
            return expected(P, "a dtype name after 'dt.'");
        out->k = V_DTYPE;
        P->pos++;
        return RAP_OK;
    }
    if (t->k == T_IDENT)
        return perr(P, t->col, "unknown name \"%.*s\": expected df[\"column\"], functional.OP(...), "
                               "a number, a list or a string", t->len, t->s);
    return expected(P, "an expression");
}

static rap_status parse_postfix(parser *P, val *out)
{
    int b = P->pos;
    RAP_TRY(parse_primary(P, out));
    span(P, out, b);
    for (;;) {
        if (is_punct(cur(P), ".")) {
            P->pos++;
            val r = *out;
            RAP_TRY(parse_call(P, false, &r, out));
        } else if (is_punct(cur(P), "[")) {
            return perr(P, cur(P)->col, "indexing is not supported: %s", k_unsupported);
        } else if (is_punct(cur(P), "(")) {
            return perr(P, cur(P)->col, "calling a value is not supported: expected an operation "
                                        "as df[\"x\"].OP(...) or functional.OP(...)");
        } else {
            break;
        }
        span(P, out, b);
    }
    return RAP_OK;
}

static rap_status parse_unary(parser *P, val *out)
{
    tok *t = cur(P);
    if (is_punct(t, "-") || is_punct(t, "+")) {
        int b = P->pos;
        P->pos++;
        if (++P->depth > MAX_DEPTH)
            return perr(P, t->col, "expression nested too deeply (at most %d levels)", MAX_DEPTH);
        rap_status s = parse_unary(P, out);
        P->depth--;
        if (s != RAP_OK)
            return s;
        if (out->k != V_NUM) {
            char d[64];
            if (out->k == V_COL)
                return perr(P, t->col, "unary %c on a column is not supported: %s (write "
                                       "column * -1)", *t->s, k_unsupported);
            return perr(P, t->col, "unary %c expects a number, got %s", *t->s,
                        describe_val(out, d, sizeof d));
        }
        if (*t->s == '-') {
            if (out->n.is_int) {
                if (out->n.i == INT64_MIN)
                    return perr(P, t->col, "integer out of range (64-bit signed)");
                out->n.i = -out->n.i;
            }
            out->n.d = -out->n.d;
        }
        span(P, out, b);
        return RAP_OK;
    }
    return parse_postfix(P, out);
}

static bool unsupported_binop(const tok *t)
{
    static const char *const ops[] = {"/", "//", "%", "**", "@", "&", "|", "^", "<<", ">>",
                                      "<", ">", "<=", ">=", "==", "!="};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (is_punct(t, ops[k]))
            return true;
    return false;
}

static const char *binop_word(char op)
{
    return op == '+' ? "adding" : op == '-' ? "subtracting" : "multiplying";
}

/* a OP b for OP in + - *, folding numbers; column OP number appends an
 * add/mul node positioned at the operator. */
static rap_status binop(parser *P, const tok *op, const val *a, const val *b, val *out)
{
    char c = *op->s;
    char d1[64], d2[64];
    if ((a->k != V_NUM && a->k != V_COL) || (b->k != V_NUM && b->k != V_COL)) {
        const val *bad = (a->k != V_NUM && a->k != V_COL) ? a : b;
        return perr(P, op->col, "'%c' expects columns and numbers, got %s", c,
                    describe_val(bad, d1, sizeof d1));
    }
    if (a->k == V_NUM && b->k == V_NUM) {
        out->k = V_NUM;
        num x = a->n, y = b->n, r;
        r.is_int = x.is_int && y.is_int;
        r.i = 0;
        if (r.is_int) {
            bool ovf = c == '+'   ? __builtin_add_overflow(x.i, y.i, &r.i)
                       : c == '-' ? __builtin_sub_overflow(x.i, y.i, &r.i)
                                  : __builtin_mul_overflow(x.i, y.i, &r.i);
            if (ovf)
                return perr(P, op->col, "integer overflow in %.*s %c %.*s", a->len, a->src, c,
                            b->len, b->src);
            r.d = (double)r.i;
        } else {
            r.d = c == '+' ? x.d + y.d : c == '-' ? x.d - y.d : x.d * y.d;
            if (!isfinite(r.d))
                return perr(P, op->col, "%.*s %c %.*s is out of range", a->len, a->src, c, b->len, b->src);
        }
        out->n = r;
        return RAP_OK;
    }
    if (a->k == V_COL && b->k == V_COL)
        return perr(P, op->col, "%s two columns is not supported: %s", binop_word(c), k_unsupported);
    if (c == '-' && a->k == V_NUM)
        return perr(P, op->col, "number - column is not supported: %s (write column * -1 + %.*s)",
                    k_unsupported, a->len, a->src);
    const val *col = a->k == V_COL ? a : b;
    const val *k = a->k == V_COL ? b : a;
    if (k->n.is_int && fabs((double)k->n.i) > EXACT_INT_LIMIT)
        return perr(P, k->col, "constant %s is not exact as a double (at most 2^53)",
                    describe_val(k, d2, sizeof d2));
    rap_node n;
    memset(&n, 0, sizeof n);
    n.op = c == '*' ? RAP_OP_MUL : RAP_OP_ADD;
    n.input = col->node;
    n.f[0] = c == '-' ? -k->n.d : k->n.d; /* x - c == x + (-c), exactly */
    n.line = P->line;
    n.col = op->col;
    int idx;
    RAP_TRY(add_node(P, &n, &idx));
    out->k = V_COL;
    out->node = idx;
    return RAP_OK;
}

static rap_status parse_term(parser *P, val *out)
{
    int b = P->pos;
    RAP_TRY(parse_unary(P, out));
    for (;;) {
        tok *t = cur(P);
        if (is_punct(t, "/"))
            return perr(P, t->col, "division is not supported: %s", k_unsupported);
        if (unsupported_binop(t) && !is_punct(t, "/"))
            return perr(P, t->col, "'%.*s' is not supported: %s", t->len, t->s, k_unsupported);
        if (!is_punct(t, "*"))
            return RAP_OK;
        P->pos++;
        val rhs;
        memset(&rhs, 0, sizeof rhs);
        RAP_TRY(parse_unary(P, &rhs));
        val lhs = *out;
        RAP_TRY(binop(P, t, &lhs, &rhs, out));
        span(P, out, b);
    }
}

static rap_status parse_sum(parser *P, val *out);

/* An expression; bounds the nesting so that no plan can exhaust the stack. */
static rap_status parse_expr(parser *P, val *out)
{
    if (++P->depth > MAX_DEPTH)
        return perr(P, cur(P)->col, "expression nested too deeply (at most %d levels)", MAX_DEPTH);
    rap_status s = parse_sum(P, out);
    P->depth--;
    return s;
}

static rap_status parse_sum(parser *P, val *out)
{
    int b = P->pos;
    memset(out, 0, sizeof *out);
    RAP_TRY(parse_term(P, out));
    for (;;) {
        tok *t = cur(P);
        if (!is_punct(t, "+") && !is_punct(t, "-"))
            return RAP_OK;
        P->pos++;
        val rhs;
        memset(&rhs, 0, sizeof rhs);
        RAP_TRY(parse_term(P, &rhs));
        val lhs = *out;
        RAP_TRY(binop(P, t, &lhs, &rhs, out));
        span(P, out, b);
    }
}

/* ------------------------------------------------------------- statements */

static rap_status expect_eol(parser *P)
{
    tok *t = cur(P);
    if (t->k == T_EOL)
        return RAP_OK;
    char b[64];
    if (is_punct(t, "="))
        return perr(P, t->col, "expected end of line, got '=' (one assignment per statement)");
    return perr(P, t->col, "expected end of line, got %s", describe(t, b, sizeof b));
}

rap_status parse_statement(parser *P)
{
    tok *t = cur(P);
    if (t->k == T_EOL)
        return RAP_OK; /* blank or comment */
    /* `import ...` / `from ... import ...` lines of a pasted TorchArrow
     * script carry no operation: skipped */
    if (is_ident(t, "import") || is_ident(t, "from"))
        return RAP_OK;
    char name[sizeof P->plan->cols[0].name];
    int name_col;
    if (is_ident(t, "del")) {
        P->pos++;
        tok *d = cur(P);
        if (!is_ident(d, "df"))
            return expected(P, "df[\"name\"] after del");
        P->pos++;
        RAP_TRY(parse_column_name(P, name, sizeof name, &name_col));
        RAP_TRY(expect_eol(P));
        if (rap_plan_find(P->plan, name) < 0)
            return undefined_column(P, d->col, name);
        RAP_TRY(rap_plan_drop(P->plan, name));
        if (P->n_deleted == P->cap_deleted) {
            int cap = P->cap_deleted ? 2 * P->cap_deleted : 16;
            rap_column_ref *g = rap_realloc(P->deleted, sizeof *g * (size_t)cap, "plan deletions");
            if (!g)
                return RAP_ERR_NOMEM;
            P->deleted = g;
            P->cap_deleted = cap;
        }
        rap_column_ref *r = &P->deleted[P->n_deleted++];
        snprintf(r->name, sizeof r->name, "%s", name);
        r->node = P->line;
        return RAP_OK;
    }
    if (!is_ident(t, "df"))
        return perr(P, t->col, "not a statement: expected df[\"name\"] = EXPR or del df[\"name\"]");
    P->pos++;
    if (!is_punct(cur(P), "["))
        return expected(P, "'[' after df");
    RAP_TRY(parse_column_name(P, name, sizeof name, &name_col));
    if (!is_punct(cur(P), "="))
        return expected(P, "'='");
    P->pos++;
    val v;
    RAP_TRY(parse_expr(P, &v));
    RAP_TRY(expect_eol(P));
    if (v.k != V_COL) {
        char b[64];
        return perr(P, v.col, "expected a column expression, got %s (a column is df[\"name\"] "
                              "or an op applied to one)", describe_val(&v, b, sizeof b));
    }
    return rap_plan_assign(P->plan, name, v.node);
}
