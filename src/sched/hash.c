/*
 * hash.c -- the plan, fusion and column hashes (hash.h).
 *
 * Every hash here is a chain of hmix steps over 64-bit words (a double by
 * its bit pattern) from a fixed seed, rap_mix64 (core.h) the one mixer.
 * The three walks differ in what they feed the chain, not in how they mix:
 * rap_plan_hash the live nodes in plan order (no names), rap_fusion_hash the
 * kernels, rap_plan_columns_hash each column's chain and name. Changing any
 * of them changes files already written (schedules, fusion files,
 * checkpoints): do not.
 */
#include "sched/hash.h"

#include "core/bits.h"

#include <string.h>

#define SEED_PLAN 0x7261702d706c616eULL    /* "rap-plan" */
#define SEED_FUSION 0x7261702d66757365ULL  /* "rap-fuse" */
#define SEED_COLUMNS 0x706c616e68617368ULL /* "planhash" */

/* One step of the chain: h absorbs the word v. */
static uint64_t hmix(uint64_t h, uint64_t v) { return rap_mix64(h ^ rap_mix64(v)); }

/* h absorbs the bit pattern of x. */
static uint64_t hdouble(uint64_t h, double x)
{
    return hmix(h, rap_f64_bits(x));
}

/* rank[i]: index of node i among live nodes, -1 when not live. */
static int *live_ranks(const rap_plan *p)
{
    int *rank = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "plan hash");
    if (!rank)
        return NULL;
    int r = 0;
    for (int i = 0; i < p->n_nodes; i++)
        rank[i] = p->nodes[i].live ? r++ : -1;
    return rank;
}

/* The node's parameters as rap.h lists them per op; unused fields are left
 * out so that whatever they hold does not change the hash. */
static uint64_t hash_params(uint64_t h, const rap_node *n)
{
    switch (n->op) {
    case RAP_OP_FILL_NULL:
    case RAP_OP_LOGIT:
    case RAP_OP_BOXCOX:
    case RAP_OP_ADD:
    case RAP_OP_MUL:
        return hdouble(h, n->f[0]);
    case RAP_OP_CAST:
    case RAP_OP_FIRSTX:
    case RAP_OP_NGRAM:
        return hmix(h, (uint64_t)n->i[0]);
    case RAP_OP_ONEHOT:
        return hmix(hdouble(hdouble(h, n->f[0]), n->f[1]), (uint64_t)n->i[0]);
    case RAP_OP_SIGRID_HASH:
        return hmix(hmix(h, (uint64_t)n->i[0]), (uint64_t)n->i[1]);
    case RAP_OP_CLAMP:
        return hdouble(hdouble(h, n->f[0]), n->f[1]);
    case RAP_OP_BUCKETIZE:
        h = hmix(h, (uint64_t)n->n_aux);
        for (int64_t k = 0; k < n->n_aux && n->borders; k++)
            h = hdouble(h, n->borders[k]);
        return h;
    case RAP_OP_MAPID:
        h = hmix(h, (uint64_t)n->n_aux);
        for (int64_t k = 0; k < n->n_aux && n->map; k++)
            h = hmix(h, (uint64_t)n->map[k]);
        return h;
    default:
        return h;
    }
}

uint64_t rap_plan_hash(const rap_plan *p)
{
    uint64_t h = SEED_PLAN;
    h = hmix(hmix(hmix(h, (uint64_t)p->schema.n_dense), (uint64_t)p->schema.n_sparse),
             (uint64_t)p->schema.ids_per_row);
    int *rank = live_ranks(p);
    if (!rank)
        return 0;
    for (int i = 0; i < p->n_nodes; i++) {
        const rap_node *n = &p->nodes[i];
        if (!n->live)
            continue;
        h = hmix(h, (uint64_t)rank[i]);
        h = hmix(h, (uint64_t)n->op);
        h = hmix(h, (uint64_t)(int64_t)(n->input >= 0 ? rank[n->input] : -1));
        h = hmix(h, (uint64_t)(int64_t)(n->op == RAP_OP_INPUT ? n->raw : -1));
        h = hmix(h, (uint64_t)n->in_kind);
        h = hmix(h, (uint64_t)n->kind);
        h = hmix(h, (uint64_t)n->width);
        h = hash_params(h, n);
    }
    rap_free(rank);
    return h;
}

uint64_t rap_fusion_hash(const rap_plan *p, const rap_fusion *f)
{
    uint64_t h = hmix(SEED_FUSION, (uint64_t)f->n);
    int *rank = live_ranks(p);
    if (!rank)
        return 0;
    for (int k = 0; k < f->n; k++) {
        const rap_kernel *kn = &f->kernels[k];
        h = hmix(hmix(hmix(hmix(h, (uint64_t)kn->op), (uint64_t)kn->variant), (uint64_t)kn->level),
                 (uint64_t)kn->n);
        for (int j = 0; j < kn->n; j++) {
            int nd = kn->nodes[j];
            h = hmix(h, (uint64_t)(int64_t)(nd >= 0 && nd < p->n_nodes ? rank[nd] : -2));
        }
        for (int g = 0; kn->group && g <= kn->n_groups; g++) /* row kernels: their groups */
            h = hmix(h, (uint64_t)(int64_t)kn->group[g] + 0x9e37);
    }
    rap_free(rank);
    return h;
}

/* A column's op chain from node idx down to its raw input: every field of
 * every node on it (rap_plan_hash's hash_params leaves unused fields out;
 * this one keeps them, as checkpoints were written with it). */
static uint64_t chain_hash(const rap_plan *p, int idx)
{
    uint64_t h = SEED_PLAN;
    for (int depth = 0; idx >= 0 && depth < 100000; depth++) {
        const rap_node *n = &p->nodes[idx];
        h = hmix(h, (uint64_t)n->op);
        h = hmix(h, (uint64_t)n->kind);
        h = hmix(h, (uint64_t)n->in_kind);
        h = hmix(h, (uint64_t)n->width);
        h = hdouble(h, n->f[0]);
        h = hdouble(h, n->f[1]);
        h = hmix(h, (uint64_t)n->i[0]);
        h = hmix(h, (uint64_t)n->i[1]);
        h = hmix(h, (uint64_t)n->n_aux);
        for (int64_t k = 0; k < n->n_aux; k++)
            h = n->borders ? hdouble(h, n->borders[k]) : hmix(h, (uint64_t)n->map[k]);
        if (n->op == RAP_OP_INPUT)
            h = hmix(h, (uint64_t)n->raw);
        idx = n->input;
    }
    return h;
}

uint64_t rap_plan_columns_hash(const rap_plan *plan, char **cols)
{
    uint64_t h = SEED_COLUMNS;
    size_t cap = 1, at = 0;
    for (int c = 0; c < plan->n_cols; c++)
        cap += strlen(plan->cols[c].name) + 20;
    char *s = cols ? rap_malloc(cap, "plan columns") : NULL;
    if (s)
        s[0] = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        uint64_t ch = chain_hash(plan, plan->cols[c].node);
        for (const char *q = plan->cols[c].name; *q; q++)
            ch = hmix(ch, (uint64_t)(unsigned char)*q);
        h = hmix(h, ch);
        if (s)
            at += (size_t)snprintf(s + at, cap - at, "%s%s:%08x", c ? "," : "", plan->cols[c].name,
                                   (unsigned)(ch >> 32));
    }
    if (cols)
        *cols = s;
    return h;
}
