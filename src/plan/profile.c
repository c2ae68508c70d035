/*
 * profile.c -- the kernel and capacity profilers (profile.h,
 * docs/PROFILE.md). Host logic; the CUDA calls are in profile_gpu.cu.
 */
#include "plan/profile.h"

#include "plan/features.h"
#include "plan/fusion_ilp.h"
#include "run/graph.h"
#include "run/input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ raw rows */

/* Generates `rows` Criteo-shaped rows (seed) into a temporary file and reads
 * them into b (capacity rows). */
rap_status rap_prof_gen_file(int64_t rows, uint64_t seed, const char *tag, char *path, size_t n)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, n, "%s/rap_profile%s_%d.tsv", dir && dir[0] ? dir : "/tmp", tag,
             (int)getpid());
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = rows;
    g.seed = seed;
    g.out = path;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result gr;
    return rap_gen_write(&g, &gr);
}

static rap_status raw_rows(int64_t rows, uint64_t seed, rap_batch *b)
{
    char tmp[512];
    rap_status st = rap_prof_gen_file(rows, seed, "", tmp, sizeof tmp);
    rap_reader *r = NULL;
    rap_batch part = {0};
    if (st == RAP_OK)
        st = rap_batch_create(b, rap_schema_criteo(), rows, true);
    if (st == RAP_OK)
        st = rap_batch_create(&part, rap_schema_criteo(), rows, false);
    if (st == RAP_OK) {
        rap_reader_config rc = rap_reader_defaults();
        rc.input = tmp;
        rc.bad_rows = RAP_BAD_FAIL;
        st = rap_reader_open(&rc, &r);
    }
    while (st == RAP_OK && b->rows < rows) {
        part.rows = 0;
        st = rap_reader_next(r, &part);
        if (st != RAP_OK || part.rows == 0)
            break;
        int64_t n = part.rows < rows - b->rows ? part.rows : rows - b->rows;
        rap_batch_append(b, &part, 0, n);
    }
    if (st == RAP_OK && b->rows < rows)
        st = rap_fail(RAP_ERR_INTERNAL, "profiler: generated %lld rows, read %lld",
                      (long long)rows, (long long)b->rows);
    rap_reader_close(r);
    rap_batch_free(&part);
    remove(tmp);
    return st;
}

/* ------------------------------------------------------------ kernels */

typedef struct {
    const rap_prof_kernels_config *c;
    rap_prof_gpu *g;
    FILE *csv;
    char gpu[RAP_GPU_NAME];
    int64_t n;          /* measurements written */
    double *tmp;        /* (reps) */
    uint64_t rng;
} kprof;

static uint64_t next_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Times descs [d0, d1) of kernel k over rows [r0, r1): median of reps. */
static rap_status time_slice(kprof *K, rap_prep *prep, int k, int d0, int d1, int64_t r0, int64_t r1,
                             double *ms)
{
    void *st = rap_prof_train_stream(K->g);
    for (int i = 0; i < K->c->reps; i++) {
        RAP_TRY(rap_prof_spin(K->g, st, 20));
        if (r0 > 0) /* computed kernels need their r0 == 0 piece first; harmless otherwise */
            RAP_TRY(rap_prep_run_kernel(prep, k, d0, d1, 0, r0, st));
        if (K->c->flush)
            RAP_TRY(rap_prof_flush(K->g, st));
        RAP_TRY(rap_prof_record(K->g, 0, st));
        RAP_TRY(rap_prep_run_kernel(prep, k, d0, d1, r0, r1, st));
        RAP_TRY(rap_prof_record(K->g, 1, st));
        RAP_TRY(rap_prof_elapsed(K->g, 0, 1, &K->tmp[i]));
    }
    *ms = rap_prof_median(K->tmp, K->c->reps);
    return RAP_OK;
}

static rap_status measure(kprof *K, const rap_plan *p, rap_prep *prep, const rap_kernel *kn, int k,
                          int d0, int d1, int64_t r0, int64_t r1, int64_t N)
{
    double ms = 0;
    RAP_TRY(time_slice(K, prep, k, d0, d1, r0, r1, &ms));
    rap_kfeat f;
    bool computed = p->nodes[kn->nodes[d0]].off == RAP_OFF_COMPUTED;
    /* batch_rows: the rows a computed kernel's r0 == 0 piece scans; 0 for a
     * later piece, which scans nothing (features.h) */
    if (kn->group)
        rap_kfeat_of_rows(p, kn->nodes, d0, d1, (double)(r1 - r0), &f);
    else
        rap_kfeat_of(p, kn->nodes, d0, d1, (double)(r1 - r0),
                     computed && r0 > 0 ? 0.0 : (double)N, &f);
    fprintf(K->csv, "%s,%s,%d,%.0f,%.0f,%.4f,%.0f,%.0f,%.0f,%.6f\n", K->gpu,
            rap_kernel_op_name(kn), f.variant, f.descs, f.rows, f.avg_width, f.total_ids, f.bytes,
            f.batch_rows, ms);
    K->n++;
    if (K->n % 1000 == 0)
        rap_info("profile kernels: %lld measurements", (long long)K->n);
    return RAP_OK;
}

static bool done(const kprof *K) { return K->c->target > 0 && K->n >= K->c->target; }

/* The grid over one fusion of one plan at batch N (docs/PROFILE.md):
 * descriptor ranges whole, first one, first half, and a random range;
 * row ranges whole, first half, second half, a random range. */
static rap_status grid_fusion(kprof *K, const rap_plan *p, const rap_fusion *f, rap_prep *prep,
                              int64_t N, int max_per_type, bool rows_only)
{
    int counted[64][24];
    memset(counted, 0, sizeof counted);
    for (int k = 0; k < f->n && !done(K); k++) {
        const rap_kernel *kn = &f->kernels[k];
        if (rows_only && !kn->group)
            continue; /* measured with the other fusions */
        int v = kn->variant < 24 ? kn->variant : 23;
        if (rap_kernel_is_identity(p, kn))
            continue; /* identities launch nothing: nothing to measure */
        if (max_per_type > 0 && counted[kn->op][v]++ >= max_per_type)
            continue;
        int n = kn->n;
        int dr[4][2] = {{0, n}, {0, 1}, {0, (n + 1) / 2}, {0, n}};
        int nd = 3;
        if (n > 2) {
            int a = (int)(next_rand(&K->rng) % (uint64_t)n);
            int b = a + 1 + (int)(next_rand(&K->rng) % (uint64_t)(n - a));
            dr[3][0] = a;
            dr[3][1] = b;
            nd = 4;
        }
        if (kn->group) /* row kernels: pieces of whole groups */
            for (int i = 0; i < nd; i++)
                for (int e = 0; e < 2; e++) {
                    int x = dr[i][e];
                    if (x > 0 && x < n) {
                        int g = rap_kernel_group_of(kn, x);
                        x = e == 1 && kn->group[g] == 0 ? kn->group[g + 1] : kn->group[g];
                    }
                    dr[i][e] = x;
                }
        int64_t h = N / 2;
        int64_t ra = (int64_t)(next_rand(&K->rng) % (uint64_t)N);
        int64_t rb = ra + 1 + (int64_t)(next_rand(&K->rng) % (uint64_t)(N - ra));
        int64_t rr[4][2] = {{0, N}, {0, h}, {h, N}, {ra, rb}};
        for (int i = 0; i < nd && !done(K); i++) {
            if (dr[i][1] <= dr[i][0] || (i > 0 && dr[i][0] == dr[0][0] && dr[i][1] == dr[0][1]))
                continue;
            if (i == 2 && dr[2][1] == dr[1][1])
                continue;
            for (int j = 0; j < 4 && !done(K); j++) {
                if (rr[j][1] <= rr[j][0])
                    continue;
                RAP_TRY(measure(K, p, prep, kn, k, dr[i][0], dr[i][1], rr[j][0], rr[j][1], N));
            }
        }
    }
    return RAP_OK;
}

rap_status rap_profile_kernels(const rap_prof_kernels_config *c, FILE *csv, int64_t *n_out)
{
    *n_out = 0;
    if (c->reps < 1 || c->n_plans < 1 || c->n_batches < 1)
        return rap_fail(RAP_ERR_ARG, "profile kernels: needs plans, batches and reps >= 1");
    int64_t maxN = 0;
    for (int i = 0; i < c->n_batches; i++) {
        if (c->batches[i] < 2)
            return rap_fail(RAP_ERR_ARG, "profile kernels: batch %lld: expected at least 2 rows",
                            (long long)c->batches[i]);
        maxN = c->batches[i] > maxN ? c->batches[i] : maxN;
    }
    kprof K;
    memset(&K, 0, sizeof K);
    K.c = c;
    K.csv = csv;
    K.rng = c->seed;
    K.tmp = rap_malloc(sizeof(double) * (size_t)c->reps, "profiler timings");
    if (!K.tmp)
        return rap_fail(RAP_ERR_NOMEM, "profile kernels: out of memory");
    rap_batch raw = {0};
    rap_status st = rap_prof_gpu_create(4, &K.g); /* first: refuses clearly without a GPU */
    if (st == RAP_OK)
        st = rap_prof_gpu_name(K.gpu, sizeof K.gpu);
    for (char *q = K.gpu; *q; q++) /* the CSV's separator */
        if (*q == ',')
            *q = ' ';
    if (st == RAP_OK) {
        rap_info("profile kernels: generating %lld rows", (long long)maxN);
        st = raw_rows(maxN, c->seed, &raw);
    }
    if (st == RAP_OK) {
        fprintf(csv, "# rap profile kernels: standalone latency of fused kernel slices "
                     "(median of %d, L2 %s)\n# gpu %s\n",
                c->reps, c->flush ? "flushed" : "warm", K.gpu);
        fprintf(csv, "gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms\n");
    }
    for (int pi = 0; st == RAP_OK && pi < c->n_plans && !done(&K); pi++) {
        const rap_plan *p = c->plans[pi];
        /* fusions: by levels (every op type, real degrees), one per op
         * (degree 1; a few kernels per type), levels then rows (row
         * kernels: the "rows" type), and the ILP's when asked */
        for (int fi = 0; st == RAP_OK && fi < 4 && !done(&K); fi++) {
            rap_fusion f = {0};
            if (fi == 0)
                st = rap_fuse_levels(p, &f);
            else if (fi == 1)
                st = rap_fuse_none(p, &f);
            else if (fi == 3)
                st = rap_fuse(p, RAP_FUSE_ROWS, &f);
            else if (c->ilp_time_s > 0) {
                rap_ilp_config ic = rap_ilp_defaults();
                ic.batch = maxN;
                ic.time_limit_s = c->ilp_time_s;
                rap_ilp_result ir;
                st = rap_fuse_ilp(p, &ic, &f, &ir);
            } else
                continue;
            rap_prep *prep = NULL;
            if (st == RAP_OK) {
                rap_prep_config pc = {RAP_GPU, maxN, 0, rap_prof_train_stream(K.g)};
                st = rap_prep_create(p, &f, &pc, &prep);
            }
            for (int bi = 0; st == RAP_OK && bi < c->n_batches && !done(&K); bi++) {
                int64_t N = c->batches[bi];
                int64_t keep = raw.rows;
                raw.rows = N;
                st = rap_prep_load(prep, &raw);
                raw.rows = keep;
                if (st == RAP_OK)
                    st = rap_prep_run(prep);
                if (st == RAP_OK)
                    st = rap_prep_sync(prep);
                if (st == RAP_OK)
                    st = grid_fusion(&K, p, &f, prep, N, fi == 1 ? 3 : 0, fi == 3);
                rap_info("profile kernels: %s, %s fusion, %lld rows: %lld measurements so far",
                         p->source, fi == 0 ? "levels" : fi == 1 ? "no" : fi == 3 ? "row" : "ILP",
                         (long long)N,
                         (long long)K.n);
            }
            rap_prep_free(prep);
            rap_fusion_free(&f);
        }
    }
    *n_out = K.n;
    rap_batch_free(&raw);
    rap_prof_gpu_free(K.g);
    rap_free(K.tmp);
    return st;
}

/* ------------------------------------------------------------ capacity */

enum { EV_PHASE0 = 0, EV_END = 4, EV_PROBE_END = 5, EV_P0 = 6, EV_P1 = 7, EV_N = 8 };

typedef struct {
    const rap_prof_capacity_config *c;
    rap_prof_gpu *g;
    rap_model *m;
    rap_model_batch mb;
    rap_prep *prep;        /* the plan's kernels (currency check) */
    rap_fusion fus;
    double *a, *e;         /* (reps) scratch */
    double *r0, *r1;       /* (reps) scratch */
    void *graphs[4];       /* each phase's CUDA graph (cuda_graph), else NULL */
} cprof;

static const rap_run_phase_fn g_phase[4] = {rap_model_emb_forward, rap_model_mlp_forward,
                                    rap_model_mlp_backward, rap_model_emb_backward};

/* A co-run job: n probes and optionally one kernel slice, beside phase p. */
typedef struct {
    int phase;
    int probes;
    int kernel;            /* -1: none */
    int d0, d1;
    int64_t r0, r1;
    int copies;            /* the kernel slice this many times (>= 1 when kernel >= 0) */
} corun;

/* One training step; the co-run work (if any) starts with phase j->phase
 * on the preprocessing stream. ph[4] gets each phase's ms, *end the ms from
 * the phase's start to the end of the co-run work. */
static rap_status step(cprof *C, const corun *j, double ph[4], double *end)
{
    void *ts = rap_prof_train_stream(C->g), *ps = rap_prof_prep_stream(C->g);
    RAP_TRY(rap_prof_spin(C->g, ts, 150));
    for (int p = 0; p < 4; p++) {
        RAP_TRY(rap_prof_record(C->g, EV_PHASE0 + p, ts));
        if (C->graphs[p])
            RAP_TRY(rap_run_graph_launch(C->graphs[p], ts));
        else
            RAP_TRY(g_phase[p](C->m, &C->mb));
    }
    RAP_TRY(rap_prof_record(C->g, EV_END, ts));
    bool work = j && (j->probes > 0 || j->kernel >= 0);
    if (work) {
        RAP_TRY(rap_prof_wait(C->g, ps, EV_PHASE0 + j->phase));
        for (int c = 0; j->kernel >= 0 && c < j->copies; c++)
            RAP_TRY(rap_prep_run_kernel(C->prep, j->kernel, j->d0, j->d1, j->r0, j->r1, ps));
        RAP_TRY(rap_prof_probe(C->g, ps, j->probes));
        RAP_TRY(rap_prof_record(C->g, EV_PROBE_END, ps));
    }
    for (int p = 0; p < 4; p++)
        RAP_TRY(rap_prof_elapsed(C->g, EV_PHASE0 + p, EV_PHASE0 + p + 1, &ph[p]));
    *end = 0;
    if (work)
        RAP_TRY(rap_prof_elapsed(C->g, EV_PHASE0 + j->phase, EV_PROBE_END, end));
    return RAP_OK;
}

/* Medians over reps of: phase j->phase alone (*base), the phase and the
 * phases after it in the step alone (*rest0) and with the co-run work
 * (*rest1), and the co-run work's end (*end), interleaved so that drift
 * cancels. */
static rap_status corun_point(cprof *C, const corun *j, double *base, double *rest0,
                              double *rest1, double *end)
{
    double ph[4], e;
    for (int i = 0; i < C->c->reps; i++) {
        RAP_TRY(step(C, NULL, ph, &e));
        C->a[i] = ph[j->phase];
        C->r0[i] = 0;
        for (int q = j->phase; q < 4; q++)
            C->r0[i] += ph[q];
        RAP_TRY(step(C, j, ph, &e));
        C->r1[i] = 0;
        for (int q = j->phase; q < 4; q++)
            C->r1[i] += ph[q];
        C->e[i] = e;
    }
    *base = rap_prof_median(C->a, C->c->reps);
    *rest0 = rap_prof_median(C->r0, C->c->reps);
    *rest1 = rap_prof_median(C->r1, C->c->reps);
    *end = rap_prof_median(C->e, C->c->reps);
    return RAP_OK;
}

/* Whether the work fits: the step from this phase on slowed by at most the
 * tolerance of the phase (so a slowdown that spills into later phases, e.g.
 * through the caches, counts too), and the work done by the phase's end
 * (within the tolerance). */
static rap_status fits(cprof *C, const corun *j, bool *ok)
{
    double base, rest0, rest1, end;
    RAP_TRY(corun_point(C, j, &base, &rest0, &rest1, &end));
    double allowed = base * C->c->tolerance;
    *ok = rest1 - rest0 <= allowed && end <= base + allowed;
    rap_debug("profile capacity: phase %d probes %d copies %d: phase %.4f ms, from it on %.4f -> "
              "%.4f ms, work ends %.4f: %s", j->phase, j->probes, j->kernel >= 0 ? j->copies : 0,
              base, rest0, rest1, end, *ok ? "fits" : "no");
    return RAP_OK;
}

static int cmp_int(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Most probes that fit beside the phase j.phase (no kernel). */
static rap_status max_probes(cprof *C, corun j, int *best)
{
    j.probes = 0;
    j.kernel = -1;
    bool ok = false;
    int lo = 0, hi = -1; /* lo fits, hi does not */
    for (int n = 1; n <= 8192; n *= 2) {
        j.probes = n;
        RAP_TRY(fits(C, &j, &ok));
        if (!ok) {
            hi = n;
            break;
        }
        lo = n;
    }
    if (hi < 0) {
        *best = lo;
        return RAP_OK;
    }
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        j.probes = mid;
        RAP_TRY(fits(C, &j, &ok));
        if (ok)
            lo = mid;
        else
            hi = mid;
    }
    *best = lo;
    return RAP_OK;
}

/* Standalone ms of n probes (and the job's kernel), median of reps. */
static rap_status standalone(cprof *C, const corun *j, int n, double *ms)
{
    void *ps = rap_prof_prep_stream(C->g);
    for (int i = 0; i < C->c->reps; i++) {
        RAP_TRY(rap_prof_spin(C->g, ps, 30));
        RAP_TRY(rap_prof_record(C->g, EV_P0, ps));
        if (j && j->kernel >= 0)
            RAP_TRY(rap_prep_run_kernel(C->prep, j->kernel, j->d0, j->d1, j->r0, j->r1, ps));
        RAP_TRY(rap_prof_probe(C->g, ps, n));
        RAP_TRY(rap_prof_record(C->g, EV_P1, ps));
        RAP_TRY(rap_prof_elapsed(C->g, EV_P0, EV_P1, &C->a[i]));
    }
    *ms = rap_prof_median(C->a, C->c->reps);
    return RAP_OK;
}

static const char *const g_phase_names[4] = {"emb_forward", "mlp_forward", "mlp_backward",
                                             "emb_backward"};

/* Most copies of the job's kernel slice that fit beside its phase (no
 * probes): doubling, then bisection, as max_probes. */
static rap_status max_copies(cprof *C, corun j, int *best)
{
    j.probes = 0;
    bool ok = false;
    int lo = 0, hi = -1;
    for (int n = 1; n <= 4096; n *= 2) {
        j.copies = n;
        RAP_TRY(fits(C, &j, &ok));
        if (!ok) {
            hi = n;
            break;
        }
        lo = n;
    }
    while (hi > 0 && hi - lo > 1) {
        j.copies = (lo + hi) / 2;
        RAP_TRY(fits(C, &j, &ok));
        if (ok)
            lo = j.copies;
        else
            hi = j.copies;
    }
    *best = lo;
    return RAP_OK;
}

/* The currency check (docs/PROFILE.md). Beside one phase of capacity C
 * (ms of standalone probe work), for kernel slices of every type in the
 * plan: m = the most copies of the slice that fit (same test as the
 * capacity), its standalone ms L and its thread blocks N. If standalone
 * latency is the right currency, m x L ~ C for every slice; if thread
 * blocks were, m x N would be the constant instead. One CSV line per
 * slice: whole kernel, half and an eighth of the rows. */
static rap_status currency(cprof *C, int phase, double cap_ms, int cap_probes)
{
    FILE *out = C->c->currency_csv;
    fprintf(out, "# currency check beside %s: capacity %.4f ms (%d probes of standalone work)\n",
            g_phase_names[phase], cap_ms, cap_probes);
    fprintf(out, "type,descs,rows,standalone_ms,blocks,fit_copies,copies_x_ms,copies_x_blocks\n");
    int64_t B = C->mb.rows;
    for (int k = 0; k < C->fus.n; k++) {
        const rap_kernel *kn = &C->fus.kernels[k];
        char type[64];
        rap_ktype_name(kn->op, kn->variant, type, sizeof type);
        const int64_t rows[3] = {B, B / 2, B / 8};
        for (int s = 0; s < 3; s++) {
            corun j = {phase, 0, k, 0, kn->n, 0, rows[s] > 0 ? rows[s] : 1, 1};
            double l = 0;
            RAP_TRY(standalone(C, &j, 0, &l));
            long long b0 = rap_prof_blocks_launched();
            RAP_TRY(rap_prep_run_kernel(C->prep, k, 0, kn->n, 0, j.r1, rap_prof_prep_stream(C->g)));
            long long blocks = rap_prof_blocks_launched() - b0;
            RAP_TRY(rap_prof_sync());
            int m = 0;
            RAP_TRY(max_copies(C, j, &m));
            fprintf(out, "%s,%d,%lld,%.6f,%lld,%d,%.6f,%lld\n", type, kn->n, (long long)j.r1, l,
                    blocks, m, m * l, m * blocks);
            fflush(out);
        }
    }
    return RAP_OK;
}

rap_status rap_profile_capacity(const rap_prof_capacity_config *c, rap_capacity *cap)
{
    memset(cap, 0, sizeof *cap);
    if (c->reps < 3 || !(c->tolerance > 0 && c->tolerance < 1))
        return rap_fail(RAP_ERR_ARG, "profile capacity: needs reps >= 3 and 0 < tolerance < 1");
    cprof C;
    memset(&C, 0, sizeof C);
    C.c = c;
    rap_model_config mc = c->model;
    const int64_t B = mc.batch;
    C.a = rap_malloc(sizeof(double) * (size_t)c->reps, "profiler timings");
    C.e = rap_malloc(sizeof(double) * (size_t)c->reps, "profiler timings");
    C.r0 = rap_malloc(sizeof(double) * (size_t)c->reps, "profiler timings");
    C.r1 = rap_malloc(sizeof(double) * (size_t)c->reps, "profiler timings");
    rap_batch raw = {0};
    rap_input *in = NULL;
    rap_status st = C.a && C.e && C.r0 && C.r1
                        ? RAP_OK
                        : rap_fail(RAP_ERR_NOMEM, "profile capacity: out of memory");
    if (st == RAP_OK)
        st = rap_prof_gpu_create(EV_N, &C.g);
    if (st == RAP_OK)
        st = rap_prof_gpu_name(cap->gpu, sizeof cap->gpu);
    if (st == RAP_OK)
        st = raw_rows(B, c->seed, &raw);
    if (st == RAP_OK)
        st = rap_fuse_levels(c->plan, &C.fus);
    if (st == RAP_OK) {
        rap_prep_config pc = {RAP_GPU, B, 0, rap_prof_prep_stream(C.g)};
        st = rap_prep_create(c->plan, &C.fus, &pc, &C.prep);
    }
    if (st == RAP_OK)
        st = rap_input_create(c->plan, RAP_GPU, B, rap_prof_prep_stream(C.g), &in);
    if (st == RAP_OK)
        st = rap_prep_load(C.prep, &raw);
    if (st == RAP_OK)
        st = rap_prep_run(C.prep);
    if (st == RAP_OK)
        st = rap_input_make(in, C.prep, &C.mb);
    if (st == RAP_OK)
        st = rap_prep_sync(C.prep);
    if (st == RAP_OK) {
        mc.stream = rap_prof_train_stream(C.g);
        st = rap_model_create(&mc, RAP_GPU, &C.m);
    }
    /* the shape the capacity is for */
    if (st == RAP_OK) {
        rap_model_shape *sh = &cap->shape;
        sh->tables = mc.n_tables;
        sh->emb_dim = mc.emb_dim;
        sh->n_bot = mc.n_bot;
        sh->n_top = mc.n_top;
        memcpy(sh->bot, mc.bot, sizeof(int) * (size_t)mc.n_bot);
        memcpy(sh->top, mc.top, sizeof(int) * (size_t)mc.n_top);
        sh->batch = B;
        sh->precision = (int)mc.precision;
        sh->emb_dtype = (int)mc.emb_dtype;
        sh->optimizer = (int)mc.optimizer;
        cap->tolerance = c->tolerance;
        snprintf(cap->source, sizeof cap->source, "measured by rap profile capacity%s",
                 c->cuda_graph ? " --cuda-graph" : "");
    }
    /* with graphs: one direct step first (lazy module loading), then each
     * phase captured as the runtime captures it */
    double ph[4], e;
    if (st == RAP_OK && c->cuda_graph)
        st = step(&C, NULL, ph, &e);
    for (int p = 0; st == RAP_OK && c->cuda_graph && p < 4; p++)
        st = rap_run_graph_capture(rap_prof_train_stream(C.g), g_phase[p], C.m, &C.mb,
                                   &C.graphs[p], NULL);
    /* warm up (GEMM tuning happened at create; caches, clocks) */
    for (int i = 0; st == RAP_OK && i < 20; i++)
        st = step(&C, NULL, ph, &e);
    int cur_phase = -1;
    for (int p = 0; p < 4 && c->currency_phase; p++)
        if (!strcmp(c->currency_phase, g_phase_names[p]))
            cur_phase = p;
    if (st == RAP_OK && c->currency_csv && cur_phase < 0)
        st = rap_fail(RAP_ERR_ARG, "profile capacity: --currency-phase %s: expected one of "
                      "emb_forward, mlp_forward, mlp_backward, emb_backward",
                      c->currency_phase ? c->currency_phase : "(none)");
    int probes_of[4] = {0};
    for (int p = 0; st == RAP_OK && p < 4; p++) {
        double v[4][64];
        int reps = c->reps < 64 ? c->reps : 64;
        for (int i = 0; st == RAP_OK && i < reps; i++) {
            st = step(&C, NULL, ph, &e);
            v[p][i] = ph[p];
        }
        if (st != RAP_OK)
            break;
        cap->standalone_ms[p] = rap_prof_median(v[p], reps);
        corun j = {p, 0, -1, 0, 0, 0, 0, 0};
        /* the median of rounds searches: one search of a small window
         * varies by a few probes from run to run */
        int n = 0, got[RAP_PROF_MAX_ROUNDS];
        const int rounds = c->rounds < 1                     ? 1
                           : c->rounds > RAP_PROF_MAX_ROUNDS ? RAP_PROF_MAX_ROUNDS
                                                             : c->rounds;
        for (int r = 0; st == RAP_OK && r < rounds; r++)
            st = max_probes(&C, j, &got[r]);
        if (st == RAP_OK) {
            qsort(got, (size_t)rounds, sizeof got[0], cmp_int);
            n = got[rounds / 2];
            if (rounds > 1)
                rap_debug("profile capacity: %s: probes that fit, %d rounds: %d to %d, median %d",
                          g_phase_names[p], rounds, got[0], got[rounds - 1], n);
        }
        double ms = 0;
        if (st == RAP_OK && n > 0)
            st = standalone(&C, NULL, n, &ms);
        probes_of[p] = n;
        cap->capacity_ms[p] = ms;
        rap_info("profile capacity: %-12s alone %.4f ms, hides %d probes = %.4f ms of standalone "
                 "work (tolerance %.1f%%)", g_phase_names[p], cap->standalone_ms[p], n, ms,
                 100 * c->tolerance);
    }
    cap->standalone_ms[RAP_WIN_GRAD_COMM] = 0; /* one GPU: no communication */
    cap->capacity_ms[RAP_WIN_GRAD_COMM] = 0;
    if (st == RAP_OK && c->currency_csv)
        st = currency(&C, cur_phase, cap->capacity_ms[cur_phase], probes_of[cur_phase]);
    if (st == RAP_OK)
        st = rap_prof_sync();
    for (int p = 0; p < 4; p++)
        rap_run_graph_free(C.graphs[p]);
    rap_model_free(C.m);
    rap_input_free(in);
    rap_prep_free(C.prep);
    rap_fusion_free(&C.fus);
    rap_batch_free(&raw);
    rap_prof_gpu_free(C.g);
    rap_free(C.a);
    rap_free(C.e);
    rap_free(C.r0);
    rap_free(C.r1);
    return st;
}
