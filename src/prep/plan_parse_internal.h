/*
 * plan_parse_internal.h -- what the two halves of the plan language's
 * parser share: plan_parse.c (tokens, the lexer, the op table and the ops
 * applied, mapid files, the entry points) and plan_expr.c (expressions
 * and statements). Each function's contract is at its definition.
 */
#ifndef RAP_PREP_PLAN_PARSE_INTERNAL_H
#define RAP_PREP_PLAN_PARSE_INTERNAL_H

#include "core/core.h"

#define MAX_ARGS 8
/* deepest nesting of parentheses, calls and unary signs */
#define MAX_DEPTH 100
#define MAX_NUM_TEXT 128
/* integers up to 2^53 convert to double exactly */
#define EXACT_INT_LIMIT 9007199254740992.0

/* ------------------------------------------------------------- tokens */

typedef enum { T_EOL = 0, T_IDENT, T_NUM, T_STR, T_PUNCT } tok_kind;

typedef struct {
    tok_kind k;
    int col;          /* 1-based byte column */
    const char *s;    /* the token's source text (s, len) */
    int len;
    bool is_int;      /* T_NUM: written without '.' or exponent */
    int64_t i;        /* T_NUM, is_int */
    double d;         /* T_NUM: value (also for integers) */
} tok;

/* ------------------------------------------------------------- values */

typedef struct {
    bool is_int;
    int64_t i; /* is_int only */
    double d;  /* always */
} num;

/* an element of a list literal, kept in the parser's per-line arena */
typedef struct {
    num n;
    int col;
    const char *src;
    int len;
} list_elem;

typedef enum { V_NUM, V_COL, V_LIST, V_STR, V_DTYPE } vkind;

typedef struct {
    vkind k;
    int col;            /* where the value's text starts */
    const char *src;    /* its source text (src, len), for messages */
    int len;
    num n;              /* V_NUM */
    int node;           /* V_COL: node index */
    int list0, nlist;   /* V_LIST: P->elems[list0 .. list0+nlist) */
    const char *str;    /* V_STR: contents without quotes (str, str_len) */
    int str_len;
    rap_kind dtype;     /* V_DTYPE: RAP_DENSE float32, RAP_SPARSE int64 */
} val;


typedef enum { A_FLOAT, A_INT, A_BORDERS, A_MAP, A_DTYPE } arg_type;

typedef struct {
    const char *name;
    rap_op_type op;
    int np;                 /* parameters after the input */
    const char *pn[3];      /* their names (keyword arguments) */
    arg_type pt[3];
    const char *alias[3];   /* TorchArrow's name of a parameter where it differs */
    const char *in_alias;   /* TorchArrow's name of the input, besides "input" */
} op_spec;

/* ------------------------------------------------------------- parser */

typedef struct {
    rap_plan *plan;
    const char *text;       /* the whole plan */
    const char *base_dir;   /* directory of the plan file, for mapid files ("" = cwd) */
    int line;               /* current line, 1-based */
    const char *line_start;
    const char *next_line;  /* start of the line after the current one (or NULL) */
    tok *toks;              /* (n_toks) current line's tokens, ending with T_EOL */
    int n_toks, cap_toks;
    int pos;                /* next token */
    int depth;              /* nesting of expressions, bounded (stack) */
    list_elem *elems;       /* (n_elems) list literals of the current line */
    int n_elems, cap_elems;
    rap_column_ref *deleted; /* (n_deleted) name, line of each del */
    int n_deleted, cap_deleted;
    const rap_input_schema *schema; /* the input's, for messages; NULL: Criteo's */
} parser;

typedef struct {
    const tok *kw;   /* keyword name token, or NULL for a positional argument */
    val v;
} arg;

extern const char *const k_unsupported;

/* plan_parse.c */
rap_status add_node(parser *P, rap_node *n, int *idx);
rap_status apply_op(parser *P, const tok *name, const op_spec *op, bool functional,
                    const val *receiver, arg *args, int nargs, val *out);
tok *cur(parser *P);
const char *describe(const tok *t, char *buf, size_t n);
const char *describe_val(const val *v, char *buf, size_t n);
rap_status expect_punct(parser *P, const char *p);
rap_status expected(parser *P, const char *what);
const op_spec *find_op(const tok *t);
bool is_ident(const tok *t, const char *name);
bool is_punct(const tok *t, const char *p);
rap_status parse_column_name(parser *P, char *name, size_t cap, int *name_col);
tok *peek(parser *P, int ahead);
rap_status perr(const parser *P, int col, const char *fmt, ...) RAP_PRINTF(3, 4);
void span(parser *P, val *v, int b);
rap_status undefined_column(parser *P, int col, const char *name);
rap_status unknown_op(parser *P, const tok *t);

/* plan_expr.c */
rap_status parse_statement(parser *P);

#endif
