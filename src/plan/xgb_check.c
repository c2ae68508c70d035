/*
 * xgb_check.c -- an XGBoost model file checked before XGBoost sees it
 * (xgb_check.h): one pass of rap's JSON reader over the whole document,
 * keeping only what a tree's structure needs (children, parents, split
 * indices) until its node count is known.
 */
#include "plan/xgb_check.h"

#include "core/checked.h"
#include "core/core.h"
#include "core/json.h"

#include <stdlib.h>
#include <string.h>

/* A growing array of ints, for one tree's per-node values. */
typedef struct {
    int64_t *v; /* (n) */
    int64_t n, cap;
} ivec;

static rap_status ivec_push(ivec *a, int64_t x)
{
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int64_t *v = rap_realloc(a->v, sizeof *v * (size_t)cap, "XGBoost model check");
        if (!v)
            return RAP_ERR_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return RAP_OK;
}

/* One tree as read: the arrays the structure needs, the lengths of the
 * others, and its tree_param. */
typedef struct {
    ivec left, right, parent, split, dleft, stype;
    int64_t n_base, n_loss, n_cond, n_hess;
    int64_t id, num_nodes, num_feature;
} tree;

static void tree_free(tree *t)
{
    rap_free(t->left.v);
    rap_free(t->right.v);
    rap_free(t->parent.v);
    rap_free(t->split.v);
    rap_free(t->dleft.v);
    rap_free(t->stype.v);
}

/* The checker's state: the reader and what must agree at the end. */
typedef struct {
    rap_json_reader j;
    const char *file;
    int n_features;
    int64_t num_trees;     /* gbtree_model_param's, -1 before */
    int64_t n_trees;       /* trees listed */
    int64_t n_tree_info;
    ivec kid;              /* scratch: children counted per node */
} ck;

/* A key of the innermost object that must be one of keys[0..n) and come
 * once (seen: bit i for keys[i]). *which is its index, -1 at the end. */
static rap_status next_known_key(ck *c, const char *const *keys, int n, uint32_t *seen,
                                 int *which)
{
    char key[64];
    size_t len;
    bool more;
    *which = -1;
    RAP_TRY(rap_json_next_key(&c->j, &more, key, sizeof key, &len));
    if (!more)
        return RAP_OK;
    for (int i = 0; i < n && len < sizeof key; i++)
        if (!strcmp(key, keys[i])) {
            if (*seen >> i & 1)
                return rap_json_error(&c->j, "a key given twice");
            *seen |= 1u << i;
            *which = i;
            return RAP_OK;
        }
    char why[160];
    snprintf(why, sizeof why, "unknown key \"%.60s\" (not in the models rap writes)", key);
    return rap_json_error(&c->j, why);
}

/* Fails unless every one of the n keys was seen. */
static rap_status all_seen(ck *c, const char *const *keys, int n, uint32_t seen, const char *in)
{
    for (int i = 0; i < n; i++)
        if (!(seen >> i & 1)) {
            char why[160];
            snprintf(why, sizeof why, "%s lacks \"%s\"", in, keys[i]);
            return rap_json_error(&c->j, why);
        }
    return RAP_OK;
}

/* A string value that must be want. */
static rap_status want_string(ck *c, const char *want)
{
    char s[64];
    size_t len;
    RAP_TRY(rap_json_string(&c->j, s, sizeof s, &len));
    if (len >= sizeof s || strcmp(s, want)) {
        char why[160];
        snprintf(why, sizeof why, "\"%.40s\" where rap's models have \"%s\"", s, want);
        return rap_json_error(&c->j, why);
    }
    return RAP_OK;
}

/* A string value holding an integer in [lo, hi] ("300"). */
static rap_status int_string(ck *c, int64_t lo, int64_t hi, int64_t *v)
{
    char s[32];
    size_t len;
    RAP_TRY(rap_json_string(&c->j, s, sizeof s, &len));
    if (len >= sizeof s || !rap_parse_i64_ok(s, lo, hi, v, NULL)) {
        char why[160];
        snprintf(why, sizeof why, "\"%.31s\" is not an integer in [%lld, %lld]", s,
                 (long long)lo, (long long)hi);
        return rap_json_error(&c->j, why);
    }
    return RAP_OK;
}

/* A string value holding a finite number ("0E0"). */
static rap_status float_string(ck *c)
{
    char s[64];
    size_t len;
    RAP_TRY(rap_json_string(&c->j, s, sizeof s, &len));
    char *end = NULL;
    double x = len < sizeof s && len > 0 ? strtod(s, &end) : 0;
    if (len >= sizeof s || len == 0 || *end || !isfinite(x))
        return rap_json_error(&c->j, "expected a string holding a finite number");
    return RAP_OK;
}

/* An array of ints in [lo, hi], into a (may be NULL: only counted, *n). */
static rap_status int_array(ck *c, int64_t lo, int64_t hi, ivec *a, int64_t *n)
{
    RAP_TRY(rap_json_array_begin(&c->j));
    for (int64_t k = 0;; k++) {
        bool more;
        RAP_TRY(rap_json_next_item(&c->j, &more));
        if (!more) {
            if (n)
                *n = k;
            return RAP_OK;
        }
        if (k >= RAP_XGB_MAX_NODES)
            return rap_json_error(&c->j, "an array longer than a tree may be");
        int64_t v;
        RAP_TRY(rap_json_int(&c->j, lo, hi, &v));
        if (a)
            RAP_TRY(ivec_push(a, v));
    }
}

/* An array of finite numbers, counted into *n. */
static rap_status float_array(ck *c, int64_t *n)
{
    RAP_TRY(rap_json_array_begin(&c->j));
    for (int64_t k = 0;; k++) {
        bool more;
        RAP_TRY(rap_json_next_item(&c->j, &more));
        if (!more) {
            *n = k;
            return RAP_OK;
        }
        if (k >= RAP_XGB_MAX_NODES)
            return rap_json_error(&c->j, "an array longer than a tree may be");
        double x;
        RAP_TRY(rap_json_number(&c->j, &x));
    }
}

/* An array that must be empty. */
static rap_status empty_array(ck *c)
{
    int64_t n;
    RAP_TRY(int_array(c, 0, 0, NULL, &n));
    return n ? rap_json_error(&c->j, "a non-empty array where rap's models have none "
                              "(categorical splits, feature names)") : RAP_OK;
}

/* An object of string values (the learner's attributes). */
static rap_status string_object(ck *c)
{
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        bool more;
        RAP_TRY(rap_json_next_key(&c->j, &more, NULL, 0, NULL));
        if (!more)
            return RAP_OK;
        RAP_TRY(rap_json_string(&c->j, NULL, 0, NULL));
    }
}

/* "tree_param" of a tree. */
static rap_status tree_param(ck *c, tree *t)
{
    static const char *const keys[] = {"num_deleted", "num_feature", "num_nodes",
                                       "size_leaf_vector"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int k;
        RAP_TRY(next_known_key(c, keys, 4, &seen, &k));
        if (k < 0)
            break;
        if (k == 0 || k == 3)
            RAP_TRY(want_string(c, "0"));
        else if (k == 1)
            RAP_TRY(int_string(c, c->n_features, c->n_features, &t->num_feature));
        else
            RAP_TRY(int_string(c, 1, RAP_XGB_MAX_NODES, &t->num_nodes));
    }
    return all_seen(c, keys, 4, seen, "tree_param");
}

/* tree k's structure (xgb_check.h) once all of it is read. */
static rap_status tree_structure(ck *c, const tree *t, int64_t k)
{
    const int64_t N = t->num_nodes;
    const int64_t lens[] = {t->left.n, t->right.n, t->parent.n, t->split.n, t->dleft.n,
                            t->stype.n, t->n_base, t->n_loss, t->n_cond, t->n_hess};
    for (int a = 0; a < 10; a++)
        if (lens[a] != N)
            return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: tree %lld: a per-node array of "
                            "%lld entries, num_nodes is %lld", c->file, (long long)k,
                            (long long)lens[a], (long long)N);
    if (t->id != k)
        return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: tree %lld has id %lld", c->file,
                        (long long)k, (long long)t->id);
    c->kid.n = 0;
    for (int64_t i = 0; i < N; i++)
        RAP_TRY(ivec_push(&c->kid, 0));
    if (t->parent.v[0] != 2147483647)
        return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: tree %lld: the root has parent %lld",
                        c->file, (long long)k, (long long)t->parent.v[0]);
    for (int64_t i = 0; i < N; i++) {
        int64_t l = t->left.v[i], r = t->right.v[i];
        const char *why = NULL;
        if (t->split.v[i] >= c->n_features)
            why = "splits on a feature past the model's";
        else if ((l == -1) != (r == -1))
            why = "has one child";
        else if (l != -1 && (l <= i || r <= i || l >= N || r >= N || l == r))
            why = "has a child index out of (node, num_nodes) (a cycle or past the tree)";
        else if (l != -1 && (t->parent.v[l] != i || t->parent.v[r] != i))
            why = "is not its children's parent";
        if (why)
            return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: tree %lld node %lld %s", c->file,
                            (long long)k, (long long)i, why);
        if (l != -1) {
            c->kid.v[l]++;
            c->kid.v[r]++;
        }
    }
    for (int64_t i = 1; i < N; i++)
        if (c->kid.v[i] != 1)
            return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: tree %lld node %lld is the child of "
                            "%lld nodes, not one", c->file, (long long)k, (long long)i,
                            (long long)c->kid.v[i]);
    return RAP_OK;
}

/* One element of "trees". */
static rap_status one_tree(ck *c, int64_t k, tree *t)
{
    static const char *const keys[] = {
        "base_weights", "categories", "categories_nodes", "categories_segments",
        "categories_sizes", "default_left", "id", "left_children", "loss_changes", "parents",
        "right_children", "split_conditions", "split_indices", "split_type", "sum_hessian",
        "tree_param"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 16, &seen, &w));
        if (w < 0)
            break;
        switch (w) {
        case 0: RAP_TRY(float_array(c, &t->n_base)); break;
        case 1: case 2: case 3: case 4: RAP_TRY(empty_array(c)); break;
        case 5: RAP_TRY(int_array(c, 0, 1, &t->dleft, NULL)); break;
        case 6: RAP_TRY(rap_json_int(&c->j, 0, RAP_XGB_MAX_TREES, &t->id)); break;
        case 7: RAP_TRY(int_array(c, -1, RAP_XGB_MAX_NODES, &t->left, NULL)); break;
        case 8: RAP_TRY(float_array(c, &t->n_loss)); break;
        case 9: RAP_TRY(int_array(c, 0, 2147483647, &t->parent, NULL)); break;
        case 10: RAP_TRY(int_array(c, -1, RAP_XGB_MAX_NODES, &t->right, NULL)); break;
        case 11: RAP_TRY(float_array(c, &t->n_cond)); break;
        case 12: RAP_TRY(int_array(c, 0, INT32_MAX, &t->split, NULL)); break;
        case 13: RAP_TRY(int_array(c, 0, 0, &t->stype, NULL)); break;
        case 14: RAP_TRY(float_array(c, &t->n_hess)); break;
        default: RAP_TRY(tree_param(c, t)); break;
        }
    }
    RAP_TRY(all_seen(c, keys, 16, seen, "a tree"));
    return tree_structure(c, t, k);
}

/* "trees": every tree, counted into c->n_trees. */
static rap_status trees(ck *c)
{
    RAP_TRY(rap_json_array_begin(&c->j));
    for (int64_t k = 0;; k++) {
        bool more;
        RAP_TRY(rap_json_next_item(&c->j, &more));
        if (!more) {
            c->n_trees = k;
            return RAP_OK;
        }
        if (k >= RAP_XGB_MAX_TREES)
            return rap_json_error(&c->j, "more trees than rap reads");
        tree t;
        memset(&t, 0, sizeof t);
        rap_status st = one_tree(c, k, &t);
        tree_free(&t);
        RAP_TRY(st);
    }
}

/* "gradient_booster" -> "model". */
static rap_status gbtree_model(ck *c)
{
    static const char *const keys[] = {"gbtree_model_param", "tree_info", "trees"};
    static const char *const pkeys[] = {"num_parallel_tree", "num_trees", "size_leaf_vector"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 3, &seen, &w));
        if (w < 0)
            break;
        if (w == 1) {
            RAP_TRY(int_array(c, 0, 0, NULL, &c->n_tree_info));
        } else if (w == 2) {
            RAP_TRY(trees(c));
        } else {
            uint32_t ps = 0;
            RAP_TRY(rap_json_object_begin(&c->j));
            for (;;) {
                int k;
                RAP_TRY(next_known_key(c, pkeys, 3, &ps, &k));
                if (k < 0)
                    break;
                if (k == 1)
                    RAP_TRY(int_string(c, 0, RAP_XGB_MAX_TREES, &c->num_trees));
                else
                    RAP_TRY(want_string(c, k == 0 ? "1" : "0"));
            }
            RAP_TRY(all_seen(c, pkeys, 3, ps, "gbtree_model_param"));
        }
    }
    RAP_TRY(all_seen(c, keys, 3, seen, "the gbtree model"));
    if (c->num_trees != c->n_trees || c->n_tree_info != c->n_trees)
        return rap_fail(RAP_ERR_DATA, "%s: XGBoost model: num_trees %lld, %lld trees, %lld "
                        "tree_info entries: they must agree", c->file, (long long)c->num_trees,
                        (long long)c->n_trees, (long long)c->n_tree_info);
    return RAP_OK;
}

static rap_status gradient_booster(ck *c)
{
    static const char *const keys[] = {"model", "name"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 2, &seen, &w));
        if (w < 0)
            break;
        RAP_TRY(w == 0 ? gbtree_model(c) : want_string(c, "gbtree"));
    }
    return all_seen(c, keys, 2, seen, "gradient_booster");
}

static rap_status learner_model_param(ck *c)
{
    static const char *const keys[] = {"base_score", "boost_from_average", "num_class",
                                       "num_feature", "num_target"};
    uint32_t seen = 0;
    int64_t v;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 5, &seen, &w));
        if (w < 0)
            break;
        switch (w) {
        case 0: RAP_TRY(float_string(c)); break;
        case 1: RAP_TRY(int_string(c, 0, 1, &v)); break;
        case 2: RAP_TRY(want_string(c, "0")); break;
        case 3: RAP_TRY(int_string(c, c->n_features, c->n_features, &v)); break;
        default: RAP_TRY(want_string(c, "1")); break;
        }
    }
    return all_seen(c, keys, 5, seen, "learner_model_param");
}

static rap_status objective(ck *c)
{
    static const char *const keys[] = {"name", "reg_loss_param"};
    static const char *const rkeys[] = {"scale_pos_weight"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 2, &seen, &w));
        if (w < 0)
            break;
        if (w == 0) {
            RAP_TRY(want_string(c, "reg:squarederror"));
            continue;
        }
        uint32_t rs = 0;
        RAP_TRY(rap_json_object_begin(&c->j));
        for (;;) {
            int k;
            RAP_TRY(next_known_key(c, rkeys, 1, &rs, &k));
            if (k < 0)
                break;
            RAP_TRY(float_string(c));
        }
        RAP_TRY(all_seen(c, rkeys, 1, rs, "reg_loss_param"));
    }
    return all_seen(c, keys, 2, seen, "objective");
}

static rap_status learner(ck *c)
{
    static const char *const keys[] = {"attributes", "feature_names", "feature_types",
                                       "gradient_booster", "learner_model_param", "objective"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 6, &seen, &w));
        if (w < 0)
            break;
        switch (w) {
        case 0: RAP_TRY(string_object(c)); break;
        case 1: case 2: RAP_TRY(empty_array(c)); break;
        case 3: RAP_TRY(gradient_booster(c)); break;
        case 4: RAP_TRY(learner_model_param(c)); break;
        default: RAP_TRY(objective(c)); break;
        }
    }
    return all_seen(c, keys, 6, seen, "learner");
}

/* The document: {"learner": .., "version": [major, minor, patch]}. */
static rap_status document(ck *c)
{
    static const char *const keys[] = {"learner", "version"};
    uint32_t seen = 0;
    RAP_TRY(rap_json_object_begin(&c->j));
    for (;;) {
        int w;
        RAP_TRY(next_known_key(c, keys, 2, &seen, &w));
        if (w < 0)
            break;
        if (w == 0) {
            RAP_TRY(learner(c));
            continue;
        }
        int64_t n, major;
        ivec v = {0};
        rap_status st = int_array(c, 0, 1000000, &v, &n);
        major = st == RAP_OK && n == 3 ? v.v[0] : -1;
        rap_free(v.v);
        RAP_TRY(st);
        if (major != 1)
            return rap_json_error(&c->j, "version: expected [1, minor, patch] (XGBoost 1.x, "
                                  "whose models rap checks)");
    }
    RAP_TRY(all_seen(c, keys, 2, seen, "the model"));
    return rap_json_end(&c->j);
}

rap_status rap_xgb_check(const char *text, size_t n, int n_features, const char *file)
{
    ck c;
    memset(&c, 0, sizeof c);
    c.file = file;
    c.n_features = n_features;
    c.num_trees = -1;
    rap_status st = rap_json_reader_init(&c.j, text, n, RAP_JSON_MAX_BYTES, file, "XGBoost model");
    if (st == RAP_OK)
        st = document(&c);
    rap_free(c.kid.v);
    return st;
}
