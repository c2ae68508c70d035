/*
 * mlp_tune.cu -- how the MLP's cuBLASLt GEMMs get their algorithms: the
 * descriptor and layouts of a GEMM (gemm_build), the heuristics'
 * candidates and (v3) the listed configurations cuBLASLt accepts
 * (gemm_enum), the timing of candidates on the real buffers (time_op),
 * the process-wide cache of tuning decisions, and the re-check of an
 * algorithm when a batch has fewer rows (gemm_rows). The layers that use
 * them are in mlp.cu; the shared declarations in mlp_internal.h.
 *
 * Tuning (at create, unless RAP_GPU_TUNE=0): each GEMM times the
 * heuristics' first RAP_GPU_TUNE_ALGOS (8; the environment variable of that
 * name sets 1..64) algorithms on the real buffers
 * (filled with random values, zeroed again afterwards) and keeps the
 * fastest; each layer op then times its fused form against the plain GEMM
 * plus the fallback kernel and keeps the faster (a fused epilogue that
 * cuBLASLt runs as an extra pass can lose). RAP_GPU_VERBOSE=1 prints every
 * choice (algorithm id, tile, stages, split-K, times).
 *
 * Tuning decisions are kept for the process (tune_cache): a later model with
 * the same GEMM (shapes, types, epilogue, alignments, rows, device) takes
 * the first model's algorithm and fused-or-plain choice without timing. So
 * every mode of one `rap bench` trains with the same kernels: each timing
 * is a mean of TUNE_REPS short runs, and models tuned apart could differ by
 * a percent of the step (bench/RESULTS.md, 2026-11-29, commit 94b7b54).
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/mlp_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

#define RAP_GPU_TUNE_ALGOS 8   /* candidates timed a GEMM (RAP_GPU_TUNE_ALGOS=N) */
#define TUNE_ALGOS_MAX 64
#define TUNE_REPS 3

static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 1 && ((uintptr_t)p % al) != 0)
        al /= 2;
    return al;
}

void gemm_destroy(rap_gpu_gemm *x)
{
    if (x->a)
        cublasLtMatrixLayoutDestroy(x->a);
    if (x->b)
        cublasLtMatrixLayoutDestroy(x->b);
    if (x->d)
        cublasLtMatrixLayoutDestroy(x->d);
    if (x->desc)
        cublasLtMatmulDescDestroy(x->desc);
    memset(x, 0, sizeof *x);
}

/* The heuristics' first (up to max) algorithms for the current layouts
 * into res; *n 0 when none. */
static rap_status gemm_candidates(rap_gpu *g, rap_gpu_gemm *x,
                                  cublasLtMatmulHeuristicResult_t *res, int max, int *n)
{
    *n = 0;
    cublasLtMatmulPreference_t pref = NULL;
    RAP_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = RAP_GPU_WS_BYTES;
    uint32_t aa = align_of(x->pa), ab = align_of(x->pb), ad = align_of(x->pd);
    cublasStatus_t s =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref);
        return rap_fail(RAP_ERR_CUDA, "%s:%d: cublasLtMatmulPreferenceSetAttribute: status %d",
                        __FILE__, __LINE__, (int)s);
    }
    memset(res, 0, sizeof *res * (size_t)max);
    int got = 0;
    s = cublasLtMatmulAlgoGetHeuristic(g->lt, x->desc, x->a, x->b, x->d, x->d, pref, max, res,
                                       &got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return RAP_OK;
    for (int i = 0; i < got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            res[(*n)++] = res[i];
    return RAP_OK;
}

/* RAP_GPU_TUNE_ENUM=1 in the environment: every GEMM also times the
 * configurations gemm_enum finds (not only where the heuristics offer
 * none for a fused epilogue). */
static bool tune_enum_all(void)
{
    const char *e = getenv("RAP_GPU_TUNE_ENUM");
    return e && *e && *e != '0';
}

/* Appends to res[*n..max) the configurations of s's types that cuBLASLt
 * lists (cublasLtMatmulAlgoGetIds) whose capabilities include s's
 * epilogue: each algorithm's tiles x stages, split-K 1, that
 * cublasLtMatmulAlgoCheck accepts for x's descriptor and layouts within
 * the workspace. What the heuristics may leave out (a fused epilogue they
 * offer nothing for, the TF32 weight-gradient GEMMs' other tiles). *ids,
 * *claim, *passed: algorithms listed, claiming the epilogue, configurations
 * accepted (for RAP_GPU_VERBOSE). Never fails: a refused call is a
 * configuration less. */
static void gemm_enum(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s,
                      cublasLtMatmulHeuristicResult_t *res, int max, int *n, int *ids,
                      int *claim, int *passed)
{
    int algo_ids[64], nid = 0;
    *ids = *claim = *passed = 0;
    if (cublasLtMatmulAlgoGetIds(g->lt, g->compute, CUDA_R_32F, s->at, s->bt, s->dt, s->dt, 64,
                                 algo_ids, &nid) != CUBLAS_STATUS_SUCCESS)
        return;
    *ids = nid;
    const uint32_t epi = (uint32_t)s->epi;
    for (int k = 0; k < nid && *n < max; k++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(g->lt, g->compute, CUDA_R_32F, s->at, s->bt, s->dt, s->dt,
                                   algo_ids[k], &algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        uint32_t mask = 0;
        size_t w = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_EPILOGUE_MASK, &mask,
                                              sizeof mask, &w) != CUBLAS_STATUS_SUCCESS ||
            (mask & epi) != epi)
            continue;
        (*claim)++;
        uint32_t tiles[64], stages[64];
        size_t nt = 0, ns = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles,
                                              sizeof tiles, &w) == CUBLAS_STATUS_SUCCESS)
            nt = w / sizeof tiles[0];
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages,
                                              sizeof stages, &w) == CUBLAS_STATUS_SUCCESS)
            ns = w / sizeof stages[0];
        if (nt == 0)
            tiles[nt++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
        if (ns == 0)
            stages[ns++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
        for (size_t ti = 0; ti < nt && *n < max; ti++)
            for (size_t si = 0; si < ns && *n < max; si++) {
                cublasLtMatmulAlgo_t a = algo;
                const uint32_t tile = tiles[ti], stage = stages[si];
                if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                         sizeof tile) != CUBLAS_STATUS_SUCCESS ||
                    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                         &stage, sizeof stage) !=
                        CUBLAS_STATUS_SUCCESS)
                    continue;
                cublasLtMatmulHeuristicResult_t r;
                memset(&r, 0, sizeof r);
                if (cublasLtMatmulAlgoCheck(g->lt, x->desc, x->a, x->b, x->d, x->d, &a, &r) !=
                        CUBLAS_STATUS_SUCCESS ||
                    r.workspaceSize > RAP_GPU_WS_BYTES)
                    continue;
                r.algo = a;
                r.state = CUBLAS_STATUS_SUCCESS;
                res[(*n)++] = r;
                (*passed)++;
            }
    }
}

/* Best (first) algorithm for the current layouts; *found false when none. */
rap_status gemm_pick(rap_gpu *g, rap_gpu_gemm *x, bool *found)
{
    cublasLtMatmulHeuristicResult_t res[1];
    int n = 0;
    RAP_TRY(gemm_candidates(g, x, res, 1, &n));
    *found = n > 0;
    if (n > 0)
        x->algo = res[0].algo;
    return RAP_OK;
}

/* RAP_GPU_TUNE=0 in the environment: no timing at create (the
 * heuristics' first algorithm, the most fused epilogue). */
bool tuning(void)
{
    const char *e = getenv("RAP_GPU_TUNE");
    return !(e && *e == '0');
}

/* RAP_GPU_TUNE_ALGOS=N in the environment (1..64): how many of the
 * heuristics' algorithms each GEMM times at create; default
 * RAP_GPU_TUNE_ALGOS. */
static int tune_algos(void)
{
    const char *e = getenv("RAP_GPU_TUNE_ALGOS");
    const int n = e && *e ? atoi(e) : RAP_GPU_TUNE_ALGOS;
    return n < 1 ? 1 : n > TUNE_ALGOS_MAX ? TUNE_ALGOS_MAX : n;
}

/* RAP_GPU_VERBOSE=1: print the choices made at create. */
bool verbose(void)
{
    const char *e = getenv("RAP_GPU_VERBOSE");
    return e && *e && *e != '0';
}

rap_status gemm_run(rap_gpu *g, rap_gpu_gemm *x)
{
    const float one = 1.0f, zero = 0.0f;
    RAP_CUBLAS_TRY(cublasLtMatmul(g->lt, x->desc, &one, x->pa, x->a, x->pb, x->b, &zero, x->pd,
                                  x->d, x->pd, x->d, &x->algo, g->ws, RAP_GPU_WS_BYTES,
                                  g->stream));
    return RAP_OK;
}

/* Times op(g, arg) on g->stream: one warm-up, then the mean of TUNE_REPS
 * runs in ms; 1e30 when a run fails (the failure is cleared). */
rap_status time_op(rap_gpu *g, timed_fn op, void *arg, float *ms)
{
    *ms = 1e30f;
    cudaEvent_t e0 = NULL, e1 = NULL;
    RAP_CUDA_TRY(cudaEventCreate(&e0));
    cudaError_t ce = cudaEventCreate(&e1);
    if (ce != cudaSuccess) {
        cudaEventDestroy(e0);
        return rap_fail(RAP_ERR_CUDA, "%s:%d: cudaEventCreate: %s", __FILE__, __LINE__,
                        cudaGetErrorString(ce));
    }
    bool ran = op(g, arg) == RAP_OK;
    if (ran)
        ce = cudaEventRecord(e0, g->stream);
    for (int r = 0; r < TUNE_REPS && ran && ce == cudaSuccess; r++)
        ran = op(g, arg) == RAP_OK;
    if (ran && ce == cudaSuccess)
        ce = cudaEventRecord(e1, g->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(g->stream);
    float t = 0.0f;
    if (ran && ce == cudaSuccess)
        ce = cudaEventElapsedTime(&t, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (ce != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "%s:%d: timing a GEMM: %s", __FILE__, __LINE__,
                        cudaGetErrorString(ce));
    if (!ran) {
        rap_clear_error();
        return RAP_OK;
    }
    *ms = t / TUNE_REPS;
    return RAP_OK;
}

static rap_status run_gemm_op(rap_gpu *g, void *x) { return gemm_run(g, (rap_gpu_gemm *)x); }

/* ------------------------------------------------------------ tune cache */

#define TUNE_CACHE_MAX 512
static tune_entry g_tune[TUNE_CACHE_MAX];
static int g_n_tune;
static long long g_tune_hits;
static pthread_mutex_t g_tune_mu = PTHREAD_MUTEX_INITIALIZER;

tune_key key_of(const rap_gpu *g, const gemm_spec *s, int kind)
{
    tune_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.dev = g->dev;
    k.compute = (int)g->compute;
    k.kind = kind;
    k.ta = (int)s->ta;
    k.tb = (int)s->tb;
    k.at = (int)s->at;
    k.bt = (int)s->bt;
    k.dt = (int)s->dt;
    k.epi = (int)s->epi;
    k.bias_type = s->bias_type;
    k.ar = s->ar, k.ac = s->ac, k.br = s->br, k.bc = s->bc, k.dr = s->dr, k.dc = s->dc;
    k.lda = s->lda, k.ldb = s->ldb, k.ldd = s->ldd, k.aux_ld = s->aux_ld;
    k.rows = g->B;
    k.aa = align_of(s->pa), k.ab = align_of(s->pb), k.ad = align_of(s->pd);
    k.bias = s->bias != NULL;
    k.aux = s->aux != NULL;
    return k;
}

/* The entry of k, or NULL; g_tune_mu held. */
static tune_entry *tune_at(const tune_key *k)
{
    for (int i = 0; i < g_n_tune; i++)
        if (memcmp(&g_tune[i].key, k, sizeof *k) == 0)
            return &g_tune[i];
    return NULL;
}

/* *e = the cached decision for k; false when there is none. */
bool tune_find(const tune_key *k, tune_entry *e)
{
    pthread_mutex_lock(&g_tune_mu);
    const tune_entry *at = tune_at(k);
    if (at) {
        *e = *at;
        g_tune_hits++;
    }
    pthread_mutex_unlock(&g_tune_mu);
    return at != NULL;
}

/* Keeps a decision (the first one made for k stays; a full cache keeps
 * nothing more: later models tune again). */
void tune_keep(const tune_key *k, bool found, const cublasLtMatmulAlgo_t *algo)
{
    pthread_mutex_lock(&g_tune_mu);
    if (!tune_at(k) && g_n_tune < TUNE_CACHE_MAX) {
        tune_entry *e = &g_tune[g_n_tune++];
        memset(e, 0, sizeof *e);
        e->key = *k;
        e->found = found;
        if (algo)
            e->algo = *algo;
    }
    pthread_mutex_unlock(&g_tune_mu);
}

extern "C" long long rap_gpu_tune_cache_hits(void)
{
    pthread_mutex_lock(&g_tune_mu);
    long long n = g_tune_hits;
    pthread_mutex_unlock(&g_tune_mu);
    return n;
}

static rap_status time_gemm(rap_gpu *g, rap_gpu_gemm *x, float *ms)
{
    return time_op(g, run_gemm_op, x, ms);
}

#define DESC_SET(attr, val)                                                              \
    do {                                                                                 \
        if (cublasLtMatmulDescSetAttribute(x->desc, attr, &(val), sizeof(val)) !=         \
            CUBLAS_STATUS_SUCCESS) {                                                     \
            gemm_destroy(x);                                                             \
            return RAP_OK; /* not supported here: *ok stays false */                     \
        }                                                                                \
    } while (0)

/* The descriptor and layouts of x from s (no algorithm yet); *ok false (x
 * destroyed) when cuBLASLt refuses an attribute. */
rap_status gemm_build(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s, bool *ok)
{
    *ok = false;
    memset(x, 0, sizeof *x);
    RAP_CUBLAS_TRY(cublasLtMatmulDescCreate(&x->desc, g->compute, CUDA_R_32F));
    int32_t ta = s->ta, tb = s->tb;
    uint32_t epi = s->epi;
    DESC_SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    DESC_SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (s->bias) {
        const void *bp = s->bias;
        DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
        if (s->bias_type >= 0) {
            int32_t bt = s->bias_type;
            DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt);
        }
    }
    if (s->aux) {
        void *ap = s->aux;
        int64_t ld = s->aux_ld;
        DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ap);
        DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    }
    cublasStatus_t st = cublasLtMatrixLayoutCreate(&x->a, s->at, s->ar, s->ac, s->lda);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&x->b, s->bt, s->br, s->bc, s->ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&x->d, s->dt, s->dr, s->dc, s->ldd);
    if (st != CUBLAS_STATUS_SUCCESS) {
        gemm_destroy(x);
        return rap_fail(RAP_ERR_CUDA, "%s:%d: cublasLtMatrixLayoutCreate: status %d", __FILE__,
                        __LINE__, (int)st);
    }
    x->pa = s->pa;
    x->pb = s->pb;
    x->pd = s->pd;
    x->n_in_a = s->n_in_a;
    x->n_in_d = s->n_in_d;
    x->rows = g->B;
    *ok = true;
    return RAP_OK;
}

/* Builds x from s for B rows; *ok false (x destroyed) when the heuristics
 * offer no algorithm for it. */
rap_status gemm_make(rap_gpu *g, rap_gpu_gemm *x, const gemm_spec *s, bool *ok)
{
    RAP_TRY(gemm_build(g, x, s, ok));
    if (!*ok)
        return RAP_OK;
    *ok = false;
    const bool tune = tuning();
    const tune_key key = key_of(g, s, 0);
    tune_entry te;
    if (tune && tune_find(&key, &te)) { /* a model before this one tuned it */
        if (!te.found) {
            gemm_destroy(x);
            return RAP_OK;
        }
        x->algo = te.algo;
        x->ready = true;
        *ok = true;
        return RAP_OK;
    }
    cublasLtMatmulHeuristicResult_t res[TUNE_ALGOS_MAX];
    int n = 0;
    rap_status rs = gemm_candidates(g, x, res, tune ? tune_algos() : 1, &n);
    /* v3 while tuning: the listed configurations too, where the heuristics
     * offer nothing for a fused epilogue (or every GEMM: RAP_GPU_TUNE_ENUM) */
    if (rs == RAP_OK && tune && g->mlp_ver >= 3 &&
        ((n == 0 && s->epi != CUBLASLT_EPILOGUE_DEFAULT) || tune_enum_all())) {
        const int n0 = n;
        int ids = 0, claim = 0, passed = 0;
        gemm_enum(g, x, s, res, TUNE_ALGOS_MAX, &n, &ids, &claim, &passed);
        if (verbose())
            fprintf(stderr,
                    "rap GPU tune: %s GEMM (%llu x %llu x %llu): heuristics %d, listed algorithms "
                    "%d, %d claiming the epilogue, %d configurations accepted\n",
                    epi_name((uint32_t)s->epi), (unsigned long long)s->dr,
                    (unsigned long long)s->dc, (unsigned long long)(s->ta == CUBLAS_OP_T ? s->ar : s->ac),
                    n0, ids, claim, passed);
    }
    if (rs == RAP_OK && n == 0 && tune)
        tune_keep(&key, false, NULL);
    if (rs != RAP_OK || n == 0) {
        gemm_destroy(x);
        return rs;
    }
    x->algo = res[0].algo;
    x->ready = true;
    if (n > 1) {
        float best = 1e30f;
        int bi = -1;
        for (int i = 0; i < n; i++) {
            x->algo = res[i].algo;
            float ms = 0.0f;
            RAP_TRY(time_gemm(g, x, &ms));
            if (ms < best) {
                best = ms;
                bi = i;
            }
        }
        if (bi < 0) { /* none ran */
            gemm_destroy(x);
            return RAP_OK;
        }
        x->algo = res[bi].algo;
    }
    if (tune)
        tune_keep(&key, true, &x->algo);
    *ok = true;
    return RAP_OK;
}

rap_status gemm_rows(rap_gpu *g, rap_gpu_gemm *x, int64_t rows)
{
    if (!x->ready || x->rows == rows)
        return RAP_OK;
    uint64_t n = (uint64_t)rows;
    RAP_CUBLAS_TRY(
        cublasLtMatrixLayoutSetAttribute(x->b, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    if (x->n_in_a)
        RAP_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(x->a, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    if (x->n_in_d)
        RAP_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(x->d, CUBLASLT_MATRIX_LAYOUT_COLS, &n, sizeof n));
    x->rows = rows;
    cublasLtMatmulHeuristicResult_t chk;
    memset(&chk, 0, sizeof chk);
    if (cublasLtMatmulAlgoCheck(g->lt, x->desc, x->a, x->b, x->d, x->d, &x->algo, &chk) ==
            CUBLAS_STATUS_SUCCESS &&
        chk.workspaceSize <= RAP_GPU_WS_BYTES)
        return RAP_OK;
    bool found = false;
    RAP_TRY(gemm_pick(g, x, &found));
    if (!found)
        return rap_fail(RAP_ERR_CUDA, "GPU model: cuBLASLt has no algorithm for a layer GEMM "
                                      "at %lld rows",
                        (long long)rows);
    return RAP_OK;
}

#else
long long rap_gpu_tune_cache_hits(void) { return 0; }
#endif
