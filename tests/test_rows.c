/* test_rows.c -- row kernels (src/prep/ops/rows.cu): rap_op_rows_cpu and
 * rap_op_rows_gpu against the op files' own CPU references, bit for bit.
 *
 * A "prog" is a set of groups of descs over one row count n, with every
 * buffer it touches (inputs, offsets, outputs) owned by it, in the order it
 * was built. Each test builds the same prog twice from the same inputs: one
 * runs through the ops' CPU references desc after desc (rap_op_impls), the
 * other through the row kernel; then every buffer of the two progs must be
 * equal byte for byte (outputs start as a 0xab sentinel, so rows outside the
 * range run are checked too). Single-desc groups cover every op and every
 * non-COMPUTED variant; chains feed a desc's output to later descs of the
 * same group (lines, trees, an identity). GPU tests mirror the prog on the
 * device and compare with the CPU reference's prog. */
#include "test.h"

#include "core/core.h"
#include "prep/ops/op.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------ random data */

static uint64_t g_rng;

static uint64_t rnd(void) { return rap_test_rnd(&g_rng); }
/* flavor 0: small ids, some negative; 1: 32-bit hashes; 2: any int64 */
static int64_t rnd_id(int flavor)
{
    switch (flavor) {
    case 0: return (int64_t)(rnd() % 60) - 8;
    case 1: return (int64_t)(rnd() & 0xffffffffu);
    default: return (int64_t)rnd();
    }
}

/* ------------------------------------------------------------ columns */

/* A column: dense (x) or sparse (off, ids), valid NULL when no row is null. */
typedef struct {
    int kind;
    int64_t n;
    int width;
    const float *x;
    const int64_t *off;
    const int64_t *ids;
    const uint8_t *valid;
} col;

/* Dense column of n rows; nulls: ~15 % null rows holding 0. */
static col gen_dense(int64_t n, bool nulls)
{
    float *x;
    uint8_t *v;
    rap_test_rnd_dense(&g_rng, n, nulls, &x, &v);
    col c = {RAP_DENSE, n, 1, x, NULL, NULL, v};
    return c;
}

/* Sparse column: maxlen 1 is len1 (every non-null row one id), else
 * lengths 0..maxlen with an occasional long list; null rows are empty. */
static col gen_sparse(int64_t n, bool nulls, int maxlen, int flavor)
{
    int64_t *off = malloc(sizeof *off * (size_t)(n + 1));
    uint8_t *v = nulls ? malloc((size_t)n) : NULL;
    int64_t k = 0;
    for (int64_t r = 0; r < n; r++) {
        bool null = v && rnd() % 100 < 15;
        if (v)
            v[r] = !null;
        int64_t l = maxlen == 1 ? 1 : (int64_t)(rnd() % (uint64_t)(maxlen + 1));
        if (maxlen > 1 && rnd() % 50 == 0)
            l = 20 + (int64_t)(rnd() % 40);
        off[r] = k;
        k += null ? 0 : l;
    }
    off[n] = k;
    int64_t *ids = malloc(sizeof *ids * (size_t)(k ? k : 1));
    for (int64_t j = 0; j < k; j++)
        ids[j] = rnd_id(flavor);
    col c = {RAP_SPARSE, n, 1, NULL, off, ids, v};
    return c;
}

static void col_free(col *c)
{
    free((void *)c->x);
    free((void *)c->off);
    free((void *)c->ids);
    free((void *)c->valid);
    memset(c, 0, sizeof *c);
}

/* Every input of the progs, generated once per test. */
typedef struct {
    int64_t n;
    col dn, dv;         /* dense: nullable, no valid */
    col s1n, s1;        /* len1 sparse: nullable, no valid */
    col smn, sm;        /* multi-id sparse: nullable any int64, no valid 32-bit */
    col ss;             /* multi-id sparse, nullable, small ids */
    float fb[7];        /* float borders (dense bucketize) */
    double db[6];       /* double borders (sparse bucketize) */
    int64_t map[50];    /* mapid */
} inputs;

static void inputs_make(inputs *in, int64_t n, uint64_t seed)
{
    g_rng = seed;
    in->n = n;
    in->dn = gen_dense(n, true);
    in->dv = gen_dense(n, false);
    in->s1n = gen_sparse(n, true, 1, 1);
    in->s1 = gen_sparse(n, false, 1, 2);
    in->smn = gen_sparse(n, true, 5, 2);
    in->sm = gen_sparse(n, false, 4, 1);
    in->ss = gen_sparse(n, true, 6, 0);
    float fb[7] = {-3.0f, 0.0f, 0.0f, 1.0f, 2.5f, 10.0f, 1000.0f};
    double db[6] = {-100.0, 0.0, 5.0, 5.0, 1e6, 4294967296.0};
    memcpy(in->fb, fb, sizeof fb);
    memcpy(in->db, db, sizeof db);
    for (int i = 0; i < 50; i++)
        in->map[i] = rnd_id(2);
}

static void inputs_free(inputs *in)
{
    col_free(&in->dn);
    col_free(&in->dv);
    col_free(&in->s1n);
    col_free(&in->s1);
    col_free(&in->smn);
    col_free(&in->sm);
    col_free(&in->ss);
}

/* ------------------------------------------------------------ progs */

#define SENTINEL 0xab

typedef struct {
    const void *src;    /* the input it copies, or NULL (an output) */
    void *h;            /* host memory, owned */
    size_t bytes;
    char what[48];
} pbuf;

typedef struct {
    int64_t n;
    rap_desc *d;        /* (max_d) */
    int nd, max_d;
    int32_t *heads;     /* (max_d + 1): heads[0..ng] */
    int ng;
    col *out;           /* (max_d): each desc's output column */
    pbuf *bufs;         /* (max_b) */
    int nb, max_b;
    bool bad;           /* a capacity was exceeded (the test fails) */
} prog;

static void prog_init(prog *p, int64_t n, int max_d, int max_b)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->max_d = max_d;
    p->max_b = max_b;
    p->d = calloc((size_t)max_d, sizeof *p->d);
    p->heads = calloc((size_t)max_d + 1, sizeof *p->heads);
    p->out = calloc((size_t)max_d, sizeof *p->out);
    p->bufs = calloc((size_t)max_b, sizeof *p->bufs);
}

static void prog_free(prog *p)
{
    for (int i = 0; i < p->nb; i++)
        free(p->bufs[i].h);
    free(p->d);
    free(p->heads);
    free(p->out);
    free(p->bufs);
    memset(p, 0, sizeof *p);
}

/* A new owned buffer of bytes (at least 8), a copy of src or the sentinel. */
static void *pbuf_add(prog *p, const void *src, size_t bytes, const char *what)
{
    if (p->nb == p->max_b) {
        p->bad = true;
        return NULL;
    }
    pbuf *b = &p->bufs[p->nb++];
    b->src = src;
    b->bytes = bytes < 8 ? 8 : bytes;
    b->h = malloc(b->bytes);
    memset(b->h, SENTINEL, b->bytes);
    if (src)
        memcpy(b->h, src, bytes);
    snprintf(b->what, sizeof b->what, "%s", what);
    return b->h;
}

/* The prog's copy of input memory src (one copy per src). */
static void *pin_mem(prog *p, const void *src, size_t bytes, const char *what)
{
    if (!src)
        return NULL;
    for (int i = 0; i < p->nb; i++)
        if (p->bufs[i].src == src)
            return p->bufs[i].h;
    return pbuf_add(p, src, bytes, what);
}

/* The prog's copy of an input column. */
static col pin(prog *p, const col *c)
{
    col o = *c;
    int64_t n = c->n;
    o.x = pin_mem(p, c->x, sizeof(float) * (size_t)(n * c->width), "input x");
    o.off = pin_mem(p, c->off, sizeof(int64_t) * (size_t)(n + 1), "input off");
    o.ids = pin_mem(p, c->ids, sizeof(int64_t) * (size_t)(c->off ? c->off[n] : 0), "input ids");
    o.valid = pin_mem(p, c->valid, (size_t)n, "input valid");
    return o;
}

/* Parameters of a desc (aux is pinned: aux_bytes of it). */
typedef struct {
    float f0, f1;
    int64_t i0, i1;
    const void *aux;
    size_t aux_bytes;
    int64_t naux;
    bool identity;      /* firstx SAME: the output is the input's buffers */
} prm;

/* Appends a desc of op over column in (a column of this prog) to the open
 * group; allocates its output (sentinel): dense/vector y (n x width),
 * sparse SAME (yoff = in's offsets, ids at its positions; an identity
 * writes into in's ids), ARANGE (yoff 0..n, n ids), COMPUTED (yoff, len
 * and ids, never written by a row kernel). Returns the desc index. */
static int add(prog *p, rap_op_type op, col in, int out_kind, int off_mode, int width, prm q)
{
    if (p->nd == p->max_d) {
        p->bad = true;
        return 0;
    }
    int i = p->nd++;
    int64_t n = p->n;
    char what[48];
    rap_desc *d = &p->d[i];
    memset(d, 0, sizeof *d);
    d->op = (int32_t)op;
    d->in_kind = in.kind;
    d->out_kind = out_kind;
    d->off_mode = off_mode;
    d->width = width;
    d->x = in.x;
    d->xoff = in.off;
    d->xids = in.ids;
    d->xvalid = in.valid;
    d->f0 = q.f0;
    d->f1 = q.f1;
    d->i0 = q.i0;
    d->i1 = q.i1;
    d->aux = pin_mem(p, q.aux, q.aux_bytes, "aux");
    d->naux = q.naux;
    col o = {out_kind, n, width, NULL, NULL, NULL, op == RAP_OP_FILL_NULL ? NULL : in.valid};
    snprintf(what, sizeof what, "desc %d (%s) output", i, rap_op_name(op));
    if (out_kind != RAP_SPARSE) {
        d->y = pbuf_add(p, NULL, sizeof(float) * (size_t)(n * width), what);
        o.x = d->y;
    } else if (off_mode == RAP_OFF_SAME) {
        d->yoff = (int64_t *)in.off;
        d->yids = q.identity ? (int64_t *)in.ids
                             : pbuf_add(p, NULL, sizeof(int64_t) * (size_t)in.off[n], what);
    } else if (off_mode == RAP_OFF_ARANGE) {
        d->yoff = pbuf_add(p, NULL, sizeof(int64_t) * (size_t)(n + 1), "arange offsets");
        if (d->yoff)
            for (int64_t r = 0; r <= n; r++)
                d->yoff[r] = r;
        d->yids = pbuf_add(p, NULL, sizeof(int64_t) * (size_t)n, what);
    } else {
        d->yoff = pbuf_add(p, NULL, sizeof(int64_t) * (size_t)(n + 1), "computed offsets");
        d->len = pbuf_add(p, NULL, sizeof(int64_t) * (size_t)(n + 1), "computed len");
        d->yids = pbuf_add(p, NULL, sizeof(int64_t) * (size_t)(4 * n), what);
    }
    o.off = d->yoff;
    o.ids = d->yids;
    p->out[i] = o;
    return i;
}

/* Closes the group opened after the previous one. */
static void end_group(prog *p) { p->heads[++p->ng] = p->nd; }

/* The reference: each group's descs in order, each over [r0, r1), through
 * the op's own CPU reference. */
static void run_ref(prog *p, int64_t r0, int64_t r1)
{
    for (int g = 0; g < p->ng; g++)
        for (int s = p->heads[g]; s < p->heads[g + 1]; s++)
            rap_op_impls[p->d[s].op].cpu(&p->d[s], r0, r1);
}

static void run_rows(prog *p, int64_t r0, int64_t r1)
{
    for (int g = 0; g < p->ng; g++)
        rap_op_rows_cpu(p->d, p->heads, g, r0, r1);
}

/* True when every buffer of a and b (built alike) is equal byte for byte;
 * otherwise records a failure naming the first difference (t != NULL). */
static bool same_progs(rap_test_ctx *t, const prog *a, const prog *b, const char *what)
{
    if (a->nb != b->nb || a->bad || b->bad) {
        if (t)
            rap_test_fail(t, __FILE__, __LINE__, "%s: progs built differently (%d, %d buffers)",
                          what, a->nb, b->nb);
        return false;
    }
    for (int i = 0; i < a->nb; i++) {
        const unsigned char *x = a->bufs[i].h, *y = b->bufs[i].h;
        if (a->bufs[i].bytes != b->bufs[i].bytes)
            return false;
        if (memcmp(x, y, a->bufs[i].bytes) == 0)
            continue;
        size_t j = 0;
        while (x[j] == y[j])
            j++;
        if (t)
            rap_test_fail(t, __FILE__, __LINE__,
                          "%s: buffer %d (%s) differs at byte %zu of %zu (reference 0x%02x, "
                          "row kernel 0x%02x)",
                          what, i, a->bufs[i].what, j, a->bufs[i].bytes, x[j], y[j]);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ builders */

static prm P0(void)
{
    prm q;
    memset(&q, 0, sizeof q);
    return q;
}

static prm PF(float f0, float f1)
{
    prm q = P0();
    q.f0 = f0;
    q.f1 = f1;
    return q;
}

static prm PI(int64_t i0, int64_t i1)
{
    prm q = P0();
    q.i0 = i0;
    q.i1 = i1;
    return q;
}

#define D RAP_DENSE
#define S RAP_SPARSE
#define NONE RAP_OFF_NONE
#define SAME RAP_OFF_SAME
#define ARANGE RAP_OFF_ARANGE

/* One single-desc group per (op, non-COMPUTED variant, parameters). */
static void build_singles(prog *p, const inputs *in)
{
    col dn = pin(p, &in->dn), dv = pin(p, &in->dv), s1n = pin(p, &in->s1n);
    col s1 = pin(p, &in->s1), smn = pin(p, &in->smn), sm = pin(p, &in->sm);
    col ss = pin(p, &in->ss);
    prm q;
#define ONE(...)                                                           \
    do {                                                                   \
        add(p, __VA_ARGS__);                                               \
        end_group(p);                                                      \
    } while (0)
    /* fill_null: dense, sparse SAME (no nulls), sparse ARANGE (len1) */
    ONE(RAP_OP_FILL_NULL, dn, D, NONE, 1, PF(7.5f, 0));
    ONE(RAP_OP_FILL_NULL, dv, D, NONE, 1, PF(1.0f, 0));
    ONE(RAP_OP_FILL_NULL, sm, S, SAME, 1, PI(-3, 0));
    ONE(RAP_OP_FILL_NULL, s1n, S, ARANGE, 1, PI(99, 0));
    ONE(RAP_OP_FILL_NULL, s1, S, ARANGE, 1, PI(-5, 0));
    /* cast: dense -> dense, sparse -> dense, sparse -> sparse, dense -> sparse */
    ONE(RAP_OP_CAST, dn, D, NONE, 1, PI(RAP_DENSE, 0));
    ONE(RAP_OP_CAST, smn, D, NONE, 1, PI(RAP_DENSE, 0));
    ONE(RAP_OP_CAST, s1n, D, NONE, 1, PI(RAP_DENSE, 0));
    ONE(RAP_OP_CAST, smn, S, SAME, 1, PI(RAP_SPARSE, 0));
    ONE(RAP_OP_CAST, dv, S, ARANGE, 1, PI(RAP_SPARSE, 0));
    ONE(RAP_OP_CAST, dn, S, ARANGE, 1, PI(RAP_SPARSE, 0));
    /* dense -> dense float ops */
    ONE(RAP_OP_LOGIT, dn, D, NONE, 1, PF(0.0f, 0));
    ONE(RAP_OP_LOGIT, dv, D, NONE, 1, PF(1e-5f, 0));
    ONE(RAP_OP_BOXCOX, dn, D, NONE, 1, PF(0.0f, 0));
    ONE(RAP_OP_BOXCOX, dn, D, NONE, 1, PF(0.5f, 0));
    ONE(RAP_OP_BOXCOX, dv, D, NONE, 1, PF(-1.25f, 0));
    ONE(RAP_OP_LOG, dn, D, NONE, 1, P0());
    ONE(RAP_OP_LOG, dv, D, NONE, 1, P0());
    ONE(RAP_OP_ADD, dn, D, NONE, 1, PF(3.0f, 0));
    ONE(RAP_OP_MUL, dv, D, NONE, 1, PF(-0.1f, 0));
    /* onehot: dense -> vector */
    q = PF(-5.0f, 30.0f);
    q.i0 = 7;
    ONE(RAP_OP_ONEHOT, dn, RAP_VECTOR, NONE, 7, q);
    q = PF(0.0f, 1.0f);
    q.i0 = 1;
    ONE(RAP_OP_ONEHOT, dv, RAP_VECTOR, NONE, 1, q);
    /* bucketize: dense ARANGE (float borders), sparse SAME (double) */
    q = P0();
    q.aux = in->fb;
    q.aux_bytes = sizeof in->fb;
    q.naux = 7;
    ONE(RAP_OP_BUCKETIZE, dv, S, ARANGE, 1, q);
    ONE(RAP_OP_BUCKETIZE, dn, S, ARANGE, 1, q);
    q.naux = 1; /* one border */
    ONE(RAP_OP_BUCKETIZE, dv, S, ARANGE, 1, q);
    q = P0();
    q.aux = in->db;
    q.aux_bytes = sizeof in->db;
    q.naux = 6;
    ONE(RAP_OP_BUCKETIZE, smn, S, SAME, 1, q);
    ONE(RAP_OP_BUCKETIZE, sm, S, SAME, 1, q);
    /* sigrid_hash (SAME) */
    ONE(RAP_OP_SIGRID_HASH, smn, S, SAME, 1, PI(3, 1460));
    ONE(RAP_OP_SIGRID_HASH, s1n, S, SAME, 1, PI(-1, 1));
    ONE(RAP_OP_SIGRID_HASH, sm, S, SAME, 1, PI(0, INT64_MAX));
    /* firstx SAME: a copy into its own buffer, and an identity */
    ONE(RAP_OP_FIRSTX, sm, S, SAME, 1, PI(100, 0));
    q = PI(1, 0);
    q.identity = true;
    ONE(RAP_OP_FIRSTX, s1n, S, SAME, 1, q);
    /* clamp: dense, sparse SAME */
    ONE(RAP_OP_CLAMP, dn, D, NONE, 1, PF(-1.0f, 2.0f));
    ONE(RAP_OP_CLAMP, dv, D, NONE, 1, PF(0.0f, 0.0f));
    ONE(RAP_OP_CLAMP, ss, S, SAME, 1, PI(0, 10));
    ONE(RAP_OP_CLAMP, smn, S, SAME, 1, PI(INT64_MIN / 2, 1000));
    /* ngram SAME: n == 1 on lists, n > 1 on a len1 column */
    ONE(RAP_OP_NGRAM, smn, S, SAME, 1, PI(1, 0));
    ONE(RAP_OP_NGRAM, s1n, S, SAME, 1, PI(3, 0));
    /* mapid (SAME): small ids (some outside the map), any int64 */
    q = P0();
    q.aux = in->map;
    q.aux_bytes = sizeof in->map;
    q.naux = 50;
    ONE(RAP_OP_MAPID, ss, S, SAME, 1, q);
    ONE(RAP_OP_MAPID, smn, S, SAME, 1, q);
#undef ONE
}

/* Groups of 2-4 descs where later descs read earlier outputs. */
static void build_chains(prog *p, const inputs *in)
{
    col dn = pin(p, &in->dn), dv = pin(p, &in->dv), s1n = pin(p, &in->s1n);
    col smn = pin(p, &in->smn), sm = pin(p, &in->sm), ss = pin(p, &in->ss);
    prm fbq = P0(), dbq = P0(), mq = P0(), q;
    fbq.aux = in->fb;
    fbq.aux_bytes = sizeof in->fb;
    fbq.naux = 7;
    dbq.aux = in->db;
    dbq.aux_bytes = sizeof in->db;
    dbq.naux = 6;
    mq.aux = in->map;
    mq.aux_bytes = sizeof in->map;
    mq.naux = 50;
    int a, b, c;

    /* dense line: fill_null -> logit -> clamp */
    a = add(p, RAP_OP_FILL_NULL, dn, D, NONE, 1, PF(0.25f, 0));
    b = add(p, RAP_OP_LOGIT, p->out[a], D, NONE, 1, PF(1e-5f, 0));
    add(p, RAP_OP_CLAMP, p->out[b], D, NONE, 1, PF(-3.0f, 3.0f));
    end_group(p);

    /* sparse line: fill_null ARANGE -> sigrid_hash -> clamp -> bucketize */
    a = add(p, RAP_OP_FILL_NULL, s1n, S, ARANGE, 1, PI(77, 0));
    b = add(p, RAP_OP_SIGRID_HASH, p->out[a], S, SAME, 1, PI(5, 1000));
    c = add(p, RAP_OP_CLAMP, p->out[b], S, SAME, 1, PI(100, 800));
    add(p, RAP_OP_BUCKETIZE, p->out[c], S, SAME, 1, dbq);
    end_group(p);

    /* tree: fill_null -> {bucketize ARANGE, logit -> onehot} */
    a = add(p, RAP_OP_FILL_NULL, dn, D, NONE, 1, PF(-1.5f, 0));
    add(p, RAP_OP_BUCKETIZE, p->out[a], S, ARANGE, 1, fbq);
    b = add(p, RAP_OP_LOGIT, p->out[a], D, NONE, 1, PF(0.0f, 0));
    q = PF(-10.0f, 10.0f);
    q.i0 = 7;
    add(p, RAP_OP_ONEHOT, p->out[b], RAP_VECTOR, NONE, 7, q);
    end_group(p);

    /* through an identity: add -> cast ARANGE -> firstx (identity) -> sigrid_hash */
    a = add(p, RAP_OP_ADD, dv, D, NONE, 1, PF(3.0f, 0));
    b = add(p, RAP_OP_CAST, p->out[a], S, ARANGE, 1, PI(RAP_SPARSE, 0));
    q = PI(1, 0);
    q.identity = true;
    c = add(p, RAP_OP_FIRSTX, p->out[b], S, SAME, 1, q);
    add(p, RAP_OP_SIGRID_HASH, p->out[c], S, SAME, 1, PI(-9, 97));
    end_group(p);

    /* lists: sigrid_hash -> mapid -> ngram (n 1) -> cast to dense */
    a = add(p, RAP_OP_SIGRID_HASH, smn, S, SAME, 1, PI(-7, 50));
    b = add(p, RAP_OP_MAPID, p->out[a], S, SAME, 1, mq);
    c = add(p, RAP_OP_NGRAM, p->out[b], S, SAME, 1, PI(1, 0));
    add(p, RAP_OP_CAST, p->out[c], D, NONE, 1, PI(RAP_DENSE, 0));
    end_group(p);

    /* sparse -> dense -> float ops: cast -> boxcox -> mul -> log */
    a = add(p, RAP_OP_CAST, s1n, D, NONE, 1, PI(RAP_DENSE, 0));
    b = add(p, RAP_OP_BOXCOX, p->out[a], D, NONE, 1, PF(0.5f, 0));
    c = add(p, RAP_OP_MUL, p->out[b], D, NONE, 1, PF(-0.5f, 0));
    add(p, RAP_OP_LOG, p->out[c], D, NONE, 1, P0());
    end_group(p);

    /* clamp -> firstx (own buffer) -> bucketize sparse */
    a = add(p, RAP_OP_CLAMP, ss, S, SAME, 1, PI(-2, 20));
    b = add(p, RAP_OP_FIRSTX, p->out[a], S, SAME, 1, PI(1000, 0));
    add(p, RAP_OP_BUCKETIZE, p->out[b], S, SAME, 1, dbq);
    end_group(p);

    /* fill_null SAME (no nulls) -> sigrid_hash -> cast sparse -> sparse */
    a = add(p, RAP_OP_FILL_NULL, sm, S, SAME, 1, PI(4, 0));
    b = add(p, RAP_OP_SIGRID_HASH, p->out[a], S, SAME, 1, PI(11, 1 << 20));
    add(p, RAP_OP_CAST, p->out[b], S, SAME, 1, PI(RAP_SPARSE, 0));
    end_group(p);

    /* dense -> two: boxcox and fill_null of the same input, then add of
     * fill_null's (a desc reading the group's input next to a chain) */
    a = add(p, RAP_OP_BOXCOX, dn, D, NONE, 1, PF(2.0f, 0));
    b = add(p, RAP_OP_FILL_NULL, dn, D, NONE, 1, PF(0.5f, 0));
    add(p, RAP_OP_ADD, p->out[b], D, NONE, 1, PF(-0.5f, 0));
    end_group(p);
    (void)a;
}

#undef D
#undef S
#undef NONE
#undef SAME
#undef ARANGE

typedef void (*builder)(prog *p, const inputs *in);

/* Builds b into ref and rows alike (at least min_groups groups). */
static void build_twice(rap_test_ctx *t, builder b, const inputs *in, prog *ref, prog *rows,
                        int min_groups)
{
    prog_init(ref, in->n, 512, 1024);
    prog_init(rows, in->n, 512, 1024);
    b(ref, in);
    b(rows, in);
    CHECK(!ref->bad && !rows->bad && ref->ng >= min_groups);
}

/* ------------------------------------------------------------ CPU tests */

#define RN 3001 /* rows: not a multiple of the block size */

/* Builds b twice; runs the reference over the ranges on one and the row
 * kernel over the same ranges on the other; compares. */
static void cpu_case(rap_test_ctx *t, builder b, const inputs *in, int nr, const int64_t *ranges,
                     const char *what)
{
    prog ref, rows;
    build_twice(t, b, in, &ref, &rows, 1);
    for (int i = 0; i < nr; i++) {
        run_ref(&ref, ranges[2 * i], ranges[2 * i + 1]);
        run_rows(&rows, ranges[2 * i], ranges[2 * i + 1]);
    }
    same_progs(t, &ref, &rows, what);
    prog_free(&ref);
    prog_free(&rows);
}

RAP_TEST(rows_single_cpu)
{
    inputs in;
    inputs_make(&in, RN, 0x1234);
    /* every op type appears */
    prog p;
    prog_init(&p, in.n, 512, 1024);
    build_singles(&p, &in);
    bool seen[RAP_OP_COUNT] = {false};
    for (int s = 0; s < p.nd; s++)
        seen[p.d[s].op] = true;
    for (int op = RAP_OP_FILL_NULL; op < RAP_OP_COUNT; op++)
        CHECK_MSG(seen[op], "no single-desc case for %s", rap_op_name((rap_op_type)op));
    CHECK(p.ng == p.nd && p.nd >= 40);
    prog_free(&p);

    int64_t all[2] = {0, RN};
    cpu_case(t, build_singles, &in, 1, all, "singles, all rows");
    int64_t sub[2] = {RN / 3, 2 * RN / 3 + 1};
    cpu_case(t, build_singles, &in, 1, sub, "singles, rows [1000, 2001)");
    int64_t pieces[8] = {0, 17, 17, 17, 17, 2500, 2500, RN};
    cpu_case(t, build_singles, &in, 4, pieces, "singles, four pieces");
    int64_t last[2] = {RN - 1, RN};
    cpu_case(t, build_singles, &in, 1, last, "singles, last row");
    inputs_free(&in);
}

RAP_TEST(rows_chains_cpu)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        inputs in;
        inputs_make(&in, RN, seed * 0x9876543ULL);
        int64_t all[2] = {0, RN};
        cpu_case(t, build_chains, &in, 1, all, "chains, all rows");
        int64_t sub[2] = {257, 1999};
        cpu_case(t, build_chains, &in, 1, sub, "chains, rows [257, 1999)");
        int64_t pieces[6] = {0, 1000, 1000, 1000, 1000, RN};
        cpu_case(t, build_chains, &in, 3, pieces, "chains, pieces");
        inputs_free(&in);
    }
}

/* The chains test can fail: the reference run with each group's descs in
 * reverse order (a desc before the one it reads) differs from in order. */
RAP_TEST(rows_chains_order_matters)
{
    inputs in;
    inputs_make(&in, RN, 77);
    prog a, b;
    prog_init(&a, in.n, 512, 1024);
    prog_init(&b, in.n, 512, 1024);
    build_chains(&a, &in);
    build_chains(&b, &in);
    run_rows(&a, 0, RN);
    for (int g = 0; g < b.ng; g++)
        for (int s = b.heads[g + 1] - 1; s >= b.heads[g]; s--)
            rap_op_impls[b.d[s].op].cpu(&b.d[s], 0, RN);
    CHECK(!same_progs(NULL, &a, &b, "reversed"));
    /* and a one-desc change in a parameter shows too */
    prog c;
    prog_init(&c, in.n, 512, 1024);
    build_chains(&c, &in);
    c.d[1].f0 = 2e-5f; /* the first chain's logit eps */
    run_rows(&c, 0, RN);
    CHECK(!same_progs(NULL, &a, &c, "eps"));
    prog_free(&a);
    prog_free(&b);
    prog_free(&c);
    inputs_free(&in);
}

/* COMPUTED descs (never given to a row kernel) and RAP_OP_INPUT: the row
 * functions write nothing. */
static void build_computed(prog *p, const inputs *in)
{
    col dn = pin(p, &in->dn), smn = pin(p, &in->smn);
    prm q = P0();
    q.aux = in->fb;
    q.aux_bytes = sizeof in->fb;
    q.naux = 7;
    add(p, RAP_OP_FILL_NULL, smn, RAP_SPARSE, RAP_OFF_COMPUTED, 1, PI(3, 0));
    add(p, RAP_OP_CAST, dn, RAP_SPARSE, RAP_OFF_COMPUTED, 1, PI(RAP_SPARSE, 0));
    add(p, RAP_OP_BUCKETIZE, dn, RAP_SPARSE, RAP_OFF_COMPUTED, 1, q);
    add(p, RAP_OP_FIRSTX, smn, RAP_SPARSE, RAP_OFF_COMPUTED, 1, PI(2, 0));
    add(p, RAP_OP_NGRAM, smn, RAP_SPARSE, RAP_OFF_COMPUTED, 1, PI(2, 0));
    int i = add(p, RAP_OP_ADD, dn, RAP_DENSE, RAP_OFF_NONE, 1, PF(1.0f, 0));
    p->d[i].op = RAP_OP_INPUT;
    end_group(p);
}

RAP_TEST(rows_computed_untouched)
{
    inputs in;
    inputs_make(&in, 500, 5);
    prog a, b;
    prog_init(&a, in.n, 16, 64);
    prog_init(&b, in.n, 16, 64);
    build_computed(&a, &in);
    build_computed(&b, &in);
    run_rows(&b, 0, 500);
    same_progs(t, &a, &b, "computed descs");
    prog_free(&a);
    prog_free(&b);
    inputs_free(&in);
}

/* ------------------------------------------------------------ GPU tests */

#ifdef RAP_HAVE_CUDA
/* Thread blocks launched by the op kernels (ops/registry.cu, mathf.h). */
extern long long rap_op_blocks_launched;

/* The device pointer for host pointer h inside one of p's buffers (dev[i]
 * mirrors bufs[i]); NULL stays NULL. */
static void *xlate(rap_test_ctx *t, const prog *p, void **dev, const void *h)
{
    if (!h)
        return NULL;
    const char *c = h;
    for (int i = 0; i < p->nb; i++) {
        const char *b = p->bufs[i].h;
        if (c >= b && c < b + p->bufs[i].bytes)
            return (char *)dev[i] + (c - b);
    }
    rap_test_fail(t, __FILE__, __LINE__, "a desc pointer outside the prog's buffers");
    return NULL;
}

/* Runs p's groups through rap_op_rows_gpu (one launch per range, all
 * groups) on a device mirror, then copies every buffer back into p. */
static void gpu_rows(rap_test_ctx *t, prog *p, int nr, const int64_t *ranges)
{
    void **dev = calloc((size_t)p->nb, sizeof *dev);
    rap_desc *hd = calloc((size_t)(p->nd ? p->nd : 1), sizeof *hd);
    rap_desc *dd = NULL;
    int32_t *dh = NULL;
    for (int i = 0; i < p->nb; i++) {
        if (cudaMalloc(&dev[i], p->bufs[i].bytes) != cudaSuccess ||
            cudaMemcpy(dev[i], p->bufs[i].h, p->bufs[i].bytes, cudaMemcpyHostToDevice) !=
                cudaSuccess) {
            rap_test_fail(t, __FILE__, __LINE__, "cudaMalloc/cudaMemcpy of %zu bytes",
                          p->bufs[i].bytes);
            goto done;
        }
    }
    for (int s = 0; s < p->nd; s++) {
        rap_desc *d = &hd[s];
        *d = p->d[s];
        d->x = xlate(t, p, dev, d->x);
        d->xoff = xlate(t, p, dev, d->xoff);
        d->xids = xlate(t, p, dev, d->xids);
        d->xvalid = xlate(t, p, dev, d->xvalid);
        d->y = xlate(t, p, dev, d->y);
        d->yoff = xlate(t, p, dev, d->yoff);
        d->yids = xlate(t, p, dev, d->yids);
        d->len = xlate(t, p, dev, d->len);
        d->aux = xlate(t, p, dev, d->aux);
    }
    if (t->failures)
        goto done;
    if (cudaMalloc((void **)&dd, sizeof *hd * (size_t)(p->nd ? p->nd : 1)) != cudaSuccess ||
        cudaMemcpy(dd, hd, sizeof *hd * (size_t)p->nd, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMalloc((void **)&dh, sizeof *dh * (size_t)(p->ng + 1)) != cudaSuccess ||
        cudaMemcpy(dh, p->heads, sizeof *dh * (size_t)(p->ng + 1), cudaMemcpyHostToDevice) !=
            cudaSuccess) {
        rap_test_fail(t, __FILE__, __LINE__, "descs or heads to the device");
        goto done;
    }
    long long blocks0 = __atomic_load_n(&rap_op_blocks_launched, __ATOMIC_RELAXED);
    for (int i = 0; i < nr; i++)
        CHECK_OK(rap_op_rows_gpu(dd, dh, p->ng, ranges[2 * i], ranges[2 * i + 1], 0));
    /* nothing to do: no groups, an empty or reversed range */
    CHECK_OK(rap_op_rows_gpu(dd, dh, 0, 0, p->n, 0));
    CHECK_OK(rap_op_rows_gpu(dd, dh, p->ng, 5, 5, 0));
    CHECK_OK(rap_op_rows_gpu(dd, dh, p->ng, 9, 3, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(__atomic_load_n(&rap_op_blocks_launched, __ATOMIC_RELAXED) > blocks0);
    for (int i = 0; i < p->nb; i++)
        CHECK(cudaMemcpy(p->bufs[i].h, dev[i], p->bufs[i].bytes, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
done:
    for (int i = 0; i < p->nb; i++)
        cudaFree(dev[i]);
    cudaFree(dd);
    cudaFree(dh);
    free(dev);
    free(hd);
}

/* The reference on the CPU, the row kernel on the GPU, same ranges. */
static void gpu_case(rap_test_ctx *t, builder b, const inputs *in, int nr, const int64_t *ranges,
                     const char *what)
{
    prog ref, rows;
    build_twice(t, b, in, &ref, &rows, 2);
    for (int i = 0; i < nr; i++)
        run_ref(&ref, ranges[2 * i], ranges[2 * i + 1]);
    gpu_rows(t, &rows, nr, ranges);
    same_progs(t, &ref, &rows, what);
    prog_free(&ref);
    prog_free(&rows);
}
#endif /* RAP_HAVE_CUDA */

RAP_TEST(rows_single_gpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    inputs in;
    inputs_make(&in, RN, 0x1234);
    int64_t all[2] = {0, RN};
    gpu_case(t, build_singles, &in, 1, all, "GPU singles, all rows");
    int64_t sub[2] = {RN / 3, 2 * RN / 3 + 1};
    gpu_case(t, build_singles, &in, 1, sub, "GPU singles, rows [1000, 2001)");
    int64_t pieces[6] = {0, 300, 300, 300, 300, RN};
    gpu_case(t, build_singles, &in, 3, pieces, "GPU singles, pieces");
    inputs_free(&in);
#endif
}

RAP_TEST(rows_chains_gpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    for (uint64_t seed = 1; seed <= 2; seed++) {
        inputs in;
        inputs_make(&in, RN, seed * 0x9876543ULL);
        int64_t all[2] = {0, RN};
        gpu_case(t, build_chains, &in, 1, all, "GPU chains, all rows");
        int64_t sub[2] = {257, 1999};
        gpu_case(t, build_chains, &in, 1, sub, "GPU chains, rows [257, 1999)");
        int64_t pieces[4] = {0, 1000, 1000, RN};
        gpu_case(t, build_chains, &in, 2, pieces, "GPU chains, pieces");
        inputs_free(&in);
    }
    /* many rows: a grid-stride loop that wraps (more rows than bx * 256
     * would cover only past 16M rows, so this checks the plain mapping on
     * a large batch) */
    inputs big;
    inputs_make(&big, 200003, 99);
    int64_t r[2] = {3, 200003};
    gpu_case(t, build_chains, &big, 1, r, "GPU chains, 200003 rows");
    inputs_free(&big);
#endif
}

/* More groups than one grid's y (65535): the launcher's group offset. Each
 * group g: y_g = x + g, then y_g * 2 (a chain of two), rows [2, 7). */
RAP_TEST(rows_many_groups_gpu)
{
    REQUIRE_GPU();
#ifdef RAP_HAVE_CUDA
    const int ng = 65535 + 37;
    const int64_t n = 8;
    prog ref, rows;
    prog *ps[2] = {&ref, &rows};
    float x[8] = {1.0f, -2.0f, NAN, 4.0f, INFINITY, 0.5f, -0.0f, 3.0f};
    for (int k = 0; k < 2; k++) {
        prog *p = ps[k];
        prog_init(p, n, 2 * ng, 4);
        float *hx = pbuf_add(p, x, sizeof x, "x");
        float *y1 = pbuf_add(p, NULL, sizeof(float) * (size_t)(n * ng), "y1");
        float *y2 = pbuf_add(p, NULL, sizeof(float) * (size_t)(n * ng), "y2");
        for (int g = 0; g < ng; g++) {
            rap_desc *d = &p->d[p->nd++];
            d->op = RAP_OP_ADD;
            d->in_kind = d->out_kind = RAP_DENSE;
            d->off_mode = RAP_OFF_NONE;
            d->width = 1;
            d->x = hx;
            d->y = y1 + (int64_t)g * n;
            d->f0 = (float)g;
            rap_desc *e = &p->d[p->nd++];
            *e = *d;
            e->op = RAP_OP_MUL;
            e->x = d->y;
            e->y = y2 + (int64_t)g * n;
            e->f0 = 2.0f;
            end_group(p);
        }
    }
    run_ref(&ref, 2, 7);
    int64_t r[2] = {2, 7};
    gpu_rows(t, &rows, 1, r);
    same_progs(t, &ref, &rows, "GPU, 65572 groups");
    /* a spot value: group 65540, row 3: (4 + 65540) * 2 */
    CHECK(((float *)rows.bufs[2].h)[(int64_t)65540 * n + 3] == 131088.0f);
    prog_free(&ref);
    prog_free(&rows);
#endif
}
