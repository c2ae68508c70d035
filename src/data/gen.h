/*
 * gen.h -- internals of the synthetic Criteo generator (src/data/gen.c),
 * exposed for tests: the Zipf samplers, the rank-to-id mix and the per-column
 * null rates the generator is built on. The public entry points are
 * rap_gen_cardinalities and rap_gen_write in rap.h; docs/GENERATOR.md
 * describes the generative model and the teacher.
 */
#ifndef RAP_DATA_GEN_H
#define RAP_DATA_GEN_H

#include "rap.h"

/* Rows per generated block. A block is made from an RNG seeded by (seed,
 * block index) alone, which is what makes the output independent of the
 * number of threads. Changing it changes every file: it is part of the
 * format of a seed. */
#define RAP_GEN_BLOCK_ROWS 8192
/* The teacher AUC is computed on at most this many rows (the first ones):
 * 8 bytes of memory per row. */
#define RAP_GEN_AUC_MAX_ROWS 100000000LL
/* Largest cardinality: ids are 32-bit, so at most 2^32 distinct ones. */
#define RAP_GEN_MAX_CARD 4294967296LL
/* The Zipf sampler of a column is an alias table over its first
 * RAP_GEN_ZIPF_HEAD ranks (one uniform per draw) plus, when the column has
 * more ranks, one slot for the tail, drawn by rejection-inversion. */
#define RAP_GEN_ZIPF_HEAD 4096

/* Probability that int_j / cat_j is empty (Criteo Kaggle-like). */
extern const float rap_gen_int_null[RAP_CRITEO_DENSE];
extern const float rap_gen_cat_null[RAP_CRITEO_SPARSE];

/* Zipf over ranks first..n-1: P(rank = k) proportional to (k+1)^-s, s > 0.
 * Rejection-inversion (Hoermann & Derflinger 1996): O(1) expected per draw
 * (about 1.1 uniforms, one log and one exp), no table, any n up to 2^53. */
typedef struct {
    double s;          /* exponent */
    double n;          /* last 1-based rank */
    double m;          /* first 1-based rank (first + 1) */
    double h_lo;       /* H(m + 0.5) - h(m) */
    double h_n;        /* H(n + 0.5) */
    double sv;         /* squeeze threshold */
} rap_zipf_ri;

void rap_zipf_ri_init(rap_zipf_ri *z, int64_t first, int64_t n, double s);
/* Draws a rank in [first, n) using the splitmix64 state *rng. */
int64_t rap_zipf_ri_draw(const rap_zipf_ri *z, uint64_t *rng);

/* Zipf over ranks 0..n-1 as the generator draws it: alias table over the
 * head, rejection-inversion for the tail. The tail's total mass is the
 * integral H(n+0.5) - H(head+0.5) (midpoint rule; relative error below
 * 1e-9 for a head of 4096), everything else is exact. */
typedef struct {
    uint32_t *table;   /* (slots, 2): accept slot i when the coin is below
                        * table[2i], else take slot table[2i+1] */
    uint32_t slots;    /* head ranks, + 1 when there is a tail */
    uint32_t head;     /* min(n, RAP_GEN_ZIPF_HEAD) */
    rap_zipf_ri tail;  /* ranks [head, n) when n > head */
} rap_zipf;

rap_status rap_zipf_init(rap_zipf *z, int64_t n, double s);
int64_t rap_zipf_draw(const rap_zipf *z, uint64_t *rng);
void rap_zipf_free(rap_zipf *z);

/* Uniform double in [0, 1) from a splitmix64 state. */
static inline double rap_gen_uniform(uint64_t *rng)
{
    uint64_t s = *rng += 0x9e3779b97f4a7c15ULL;
    s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ULL;
    s = (s ^ (s >> 27)) * 0x94d049bb133111ebULL;
    s ^= s >> 31;
    return (double)(s >> 11) * 0x1.0p-53;
}

/* The id written for rank `rank` of column col: a bijective 32-bit mix of
 * the rank keyed per column, so distinct ranks give distinct ids and ids
 * look like hashes. Fixed across seeds (same ranks, same ids). */
uint32_t rap_gen_id(int col, uint32_t rank);

/* rap_gen_write for cfg->schema (gen_schema.c; docs/GENERATOR.md "Any
 * schema"): one thread, the same bytes for the same schema, format, seed,
 * cardinalities and list mean. Errors as rap_gen_write's. */
rap_status rap_gen_write_schema(const rap_gen_config *cfg, rap_gen_result *res);

#endif /* RAP_DATA_GEN_H */
