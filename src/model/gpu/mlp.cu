/*
 * mlp.cu -- MLP layers on cuBLASLt.
 *
 * Row-major activations (n, ld) are column-major (ld, n) matrices, and a
 * row-major weight (out, in) is column-major (in, out), so for a layer
 *   forward   Y^T (out, n) = op_T(W) (out, in) * X^T (in, n)  [+ bias, ReLU]
 *   weights   dW  (in, out) = X^T (in, n) * op_T(dA^T) (n, out)  [BGRADB: db]
 *   inputs    dX^T (in, n) = W (in, out) * dA^T (out, n)  [DRELU: prev mask]
 * with dA the gradient of the layer's pre-activation (ReLU applied).
 *
 * At create every GEMM takes the most fused epilogue the heuristics accept:
 * forward RELU_AUX_BIAS (bitmask for the next layer's backward) > RELU_BIAS
 * / BIAS > plain + the bias/ReLU kernel (the bias as the fp32 master, then
 * as the compute copy); dX with DRELU_BGRAD > DRELU (the previous layer's
 * bitmask) > plain + the ReLU-backward kernel; dW with BGRADB > plain + a
 * column sum. Algorithms are picked once for B rows; when a batch has fewer
 * rows the layouts are resized and the algorithm re-checked (host only).
 *
 * Where a layer's bias gradient is made (v2, the default): a layer with a
 * ReLU whose gradient comes from the dX step of the layer above
 * (db_by_next) gets its db in that step, the pass that masks the gradient:
 * the DRELU_BGRAD epilogue (db as fp32), or DRELU and a column sum, or a
 * plain GEMM and one pass of drelu_colsum_kernel (mask and column sums
 * together; mlp_kernels.cu); the logit layer's own backward sums it for the
 * layer below it. Its dW GEMM is then plain. Only layers fed by something
 * else (the bottom MLP's last, fed by the interaction) keep BGRADB or a
 * column sum in their dW step. cuBLASLt runs BGRADB as a second kernel
 * over dA, so this saves a pass over every such gradient besides the
 * separate ReLU-backward pass. RAP_GPU_MLP=v1: the first arrangement (DRELU
 * only, db in each layer's dW step, scalar kernels) for an A/B.
 *
 * v3 (the default; RAP_GPU_MLP=v2 keeps v2): where the forward took
 * RELU_AUX_BIAS and a create-time probe saw cuBLASLt write that bitmask in
 * the own layout, the own ReLU-backward pass reads it (1 bit an element)
 * instead of y (2 or 4 bytes); the dX step also times DRELU (with a column
 * sum of the masked gradient) against DRELU_BGRAD before the winner meets
 * the plain GEMM and the own pass (v2 never tried DRELU where DRELU_BGRAD
 * was offered); mlp_kernels.cu's v3 passes.
 *
 * How each GEMM gets its algorithm, and the timing of fused against plain
 * forms: mlp_tune.cu.
 *
 * A plain forward's bias/ReLU kernel writes its own ReLU bitmask (a 32-bit
 * word per 32 columns, into l->aux) when out % 32 == 0, and the next
 * layer's plain dX masks with it instead of reading y.
 *
 * The GEMMs' inner width is kg (layer 0 of each MLP: ND and top_in rounded
 * up to 8, the padding zero in x, dx and the weight copies), so K and the
 * dX rows are 16-byte multiples. The logit layer (out == 1) runs on its
 * own kernels (gemv forward; one pass for dW, db and dX): cuBLASLt has no
 * good kernel for a 1-wide matrix with ld 1.
 */
#include "model/gpu/gpu_model.h"
#include "model/gpu/mlp_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(RAP_HAVE_CUDA) && defined(__CUDACC__)

/* ------------------------------------------------------ one layer's ops */

/* Whether layer l's forward writes its own ReLU mask (bias_act_kernel,
 * into l->aux, which then holds no cuBLASLt bitmask). */
static bool own_mask(const rap_gpu_layer *l)
{
    return !l->gemv && !l->fwd_bias && l->relu && l->want_aux && l->aux && l->out % 32 == 0;
}

/* Whether prev->aux holds a bitmask of prev's ReLU in the own layout that
 * the own ReLU-backward pass can read: the own one, or (v3) cuBLASLt's
 * from a RELU_AUX_BIAS forward where the create-time probe saw it written
 * in that layout (1 bit an element read instead of y). */
static bool bit_mask(const rap_gpu *g, const rap_gpu_layer *prev)
{
    if (own_mask(prev))
        return true;
    return g->mlp_ver >= 3 && g->lt_fwdmask_ok && prev->fwd_aux && prev->aux &&
           prev->out % 32 == 0;
}

/* Forward of layer l: y = [relu](x w^T + b). */
static rap_status layer_fwd(rap_gpu *g, rap_gpu_layer *l, int64_t rows)
{
    if (l->gemv)
        return rap_gpu_gemv_forward(g, l, rows);
    RAP_TRY(gemm_run(g, &l->fwd));
    if (!l->fwd_bias)
        RAP_TRY(rap_gpu_bias_act(g, l, rows, own_mask(l) ? (uint32_t *)l->aux : NULL));
    return RAP_OK;
}

/* dW and db of layer l (not the logit layer); db not here when the layer
 * above writes it (db_by_next). */
static rap_status layer_bw(rap_gpu *g, rap_gpu_layer *l, int64_t rows)
{
    RAP_TRY(gemm_run(g, &l->bw));
    if (!l->bw_bgrad && !l->db_by_next)
        RAP_TRY(rap_gpu_colsum(g, l->da, rows, l->out, l->db));
    return RAP_OK;
}

/* dX of layer l into prev's da (masked by prev's ReLU), or into dx. v2
 * (prev->db_by_next): prev's bias gradient too, from the GEMM's
 * DRELU_BGRAD epilogue, or a column sum after DRELU, or one pass of
 * drelu_colsum_kernel after a plain GEMM. */
static rap_status layer_bx(rap_gpu *g, rap_gpu_layer *l, const rap_gpu_layer *prev,
                           int64_t rows)
{
    RAP_TRY(gemm_run(g, &l->bx));
    if (!prev || !prev->relu)
        return RAP_OK;
    if (prev->db_by_next) {
        if (l->bx_drelu && l->bx_bgrad)
            return RAP_OK;
        return rap_gpu_drelu_colsum(g, prev, rows, l->bx_drelu ? 0 : bit_mask(g, prev) ? 2 : 1);
    }
    if (!l->bx_drelu)
        RAP_TRY(rap_gpu_drelu(g, prev, rows, own_mask(prev)));
    return RAP_OK;
}

typedef struct {
    rap_gpu_layer *l;
    const rap_gpu_layer *prev;
    int op; /* 0 forward, 1 dW, 2 dX */
} layer_op;

static rap_status run_layer_op(rap_gpu *g, void *arg)
{
    layer_op *o = (layer_op *)arg;
    if (o->op == 0)
        return layer_fwd(g, o->l, g->B);
    if (o->op == 1)
        return layer_bw(g, o->l, g->B);
    return layer_bx(g, o->l, o->prev, g->B);
}

/* ------------------------------------------------------------- set up */

/* RAP_GPU_UNFUSED=1 in the environment: plain GEMMs and the fallback
 * kernels only (to tell an epilogue problem from anything else);
 * RAP_GPU_UNFUSED=fwd: plain forward GEMMs only (the own bias/ReLU kernel
 * and bitmask; the backward may still fuse, with the own bitmask). */
static bool unfused(void)
{
    const char *e = getenv("RAP_GPU_UNFUSED");
    return e && *e && *e != '0' && strcmp(e, "fwd") != 0;
}

static bool unfused_fwd(void)
{
    const char *e = getenv("RAP_GPU_UNFUSED");
    return e && *e && *e != '0';
}

/* Whether the ReLU layers whose bitmask the layer above would read try the
 * RELU_BIAS forward (no bitmask: the ReLU backward then reads y) in place
 * of RELU_AUX_BIAS, timed against the plain GEMM and the own pass like any
 * fused form: the default with TF32 math, where cuBLASLt's RELU_BIAS
 * kernels run about as fast as the plain GEMM and its RELU_AUX_BIAS ones
 * about twice as slow, so the own bias/ReLU pass (8 bytes an element)
 * goes for 4 bytes more in the backward's. The timing at create sees the
 * forward only, not that read: the rule rests on the whole step measured
 * (tf32 at 65536 rows: 10.28 -> 10.83 M samples/s, bench/RESULTS.md
 * 2026-12-03), which a layer that wins its forward by less than the read
 * costs would not show. RAP_GPU_RELU_BIAS=0
 * keeps RELU_AUX_BIAS first; =1 tries RELU_BIAS in strict fp32 too. bf16
 * keeps the bitmask (its RELU_AUX_BIAS is fast). */
static bool relu_bias_fwd(const rap_gpu *g)
{
    if (g->bf16)
        return false;
    const char *e = getenv("RAP_GPU_RELU_BIAS");
    if (e && *e)
        return *e != '0';
    return g->tf32;
}

static void describe(const rap_gpu_gemm *x, char *buf, size_t n)
{
    int32_t id = -1;
    uint32_t tile = 0, stages = 0, splitk = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&x->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&x->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                         sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&x->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                         sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&x->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                         sizeof splitk, &w);
    snprintf(buf, n, "algo %d tile %u stages %u splitK %u", (int)id, tile, stages, splitk);
}

/* How keep_faster names its two candidates in RAP_GPU_VERBOSE lines: the
 * first, the alternative, and the alternative as timed. */
typedef struct {
    const char *first, *alt, *alt_timed;
} choice_names;

/* The role of a tuning decision in the tune cache: FNV-1a of what, from
 * seed. */
static uint64_t role_hash(uint64_t seed, const char *what)
{
    uint64_t h = seed;
    for (const char *c = what; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
}

/* The op's GEMM *x as made (with *flag and *flag2, when not NULL, as they
 * are) against the GEMM of spec alt made in its place with the flags
 * cleared: times both through o, unless the tune cache holds the decision
 * (keyed by alt and role), and keeps alt (flags cleared) when it is at
 * least 3 % faster, else the first (x and the flags as they were: the more
 * fused form wins a tie). Says which under RAP_GPU_VERBOSE, named by nm.
 * Errors of gemm_make and time_op. */
static rap_status keep_faster(rap_gpu *g, layer_op *o, rap_gpu_gemm *x, bool *flag, bool *flag2,
                              const gemm_spec *alt, uint64_t role, const char *what,
                              const choice_names *nm)
{
    char d1[96], d2[96] = "-";
    float t1 = 0.0f, t2 = 1e30f;
    tune_key key = key_of(g, alt, 1);
    key.role = role;
    tune_entry te;
    const bool cached = tune_find(&key, &te);
    if (!cached)
        RAP_TRY(time_op(g, run_layer_op, o, &t1));
    describe(x, d1, sizeof d1);
    const bool f1 = *flag, f2 = flag2 ? *flag2 : false;
    rap_gpu_gemm keep = *x;
    bool ok = false;
    rap_status s = gemm_make(g, x, alt, &ok);
    if (s != RAP_OK) {
        gemm_destroy(&keep);
        return s;
    }
    if (ok) {
        *flag = false;
        if (flag2)
            *flag2 = false;
        if (!cached)
            s = time_op(g, run_layer_op, o, &t2);
        describe(x, d2, sizeof d2);
        if (s != RAP_OK) {
            gemm_destroy(&keep);
            return s;
        }
    }
    const bool use_alt = ok && (cached ? te.found : t2 < 0.97f * t1);
    if (!cached)
        tune_keep(&key, use_alt, NULL);
    if (use_alt) {
        gemm_destroy(&keep);
    } else {
        if (ok)
            gemm_destroy(x);
        *x = keep;
        *flag = f1;
        if (flag2)
            *flag2 = f2;
    }
    if (verbose() && cached)
        fprintf(stderr, "rap GPU tune: %s: as tuned before [%s] -> %s\n", what,
                use_alt ? d2 : d1, use_alt ? nm->alt : nm->first);
    else if (verbose())
        fprintf(stderr, "rap GPU tune: %s: %s %.4f ms [%s], %s %.4f ms [%s] -> %s\n", what,
                nm->first, t1, d1, nm->alt_timed, t2, d2, use_alt ? nm->alt : nm->first);
    return RAP_OK;
}

/* The op's GEMM x was made fused (flag, flag2 set); times it against the
 * plain GEMM of spec plain plus the fallback kernel and keeps the faster
 * (the flags follow). The decision is keyed by the plain GEMM (the fused
 * one follows from it and the layer). */
static rap_status fused_or_plain(rap_gpu *g, layer_op *o, rap_gpu_gemm *x, bool *flag,
                                 bool *flag2, gemm_spec *plain, const char *what)
{
    static const choice_names names = {"fused", "plain", "plain+kernel"};
    return keep_faster(g, o, x, flag, flag2, plain, role_hash(1469598103934665603ull, what),
                       what, &names);
}

const char *epi_name(uint32_t e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    default: return "DEFAULT";
    }
}

/* v3: l's dX GEMM was made with DRELU_BGRAD (prev's bias gradient in its
 * epilogue); times it against the DRELU GEMM of spec dr plus the column
 * sum of prev's masked gradient (mode 0 of the own pass) and keeps the
 * faster in l->bx, the flags following (DRELU must win by 3 %: the more
 * fused form is kept on a tie). The decision is cached like
 * fused_or_plain's. The winner then meets the plain GEMM there. Called
 * with l->bx_drelu and l->bx_bgrad set (DRELU_BGRAD made). */
static rap_status bgrad_or_drelu(rap_gpu *g, layer_op *o, gemm_spec *dr, const char *what)
{
    /* DRELU: the mask in the GEMM, the column sum after (bx_bgrad cleared) */
    static const choice_names names = {"DRELU_BGRAD", "DRELU", "DRELU+colsum"};
    return keep_faster(g, o, &o->l->bx, &o->l->bx_bgrad, NULL, dr,
                       role_hash(1469598103934665603ull ^ 0x9e3779b97f4a7c15ull, what), what,
                       &names);
}

/* One matrix of a GEMM as cuBLASLt sees it (column major): type, rows,
 * columns, leading dimension, data. */
typedef struct {
    cudaDataType t;
    uint64_t r, c;
    int64_t ld;
    const void *p;
} gemm_mat;

static gemm_mat mat(cudaDataType t, int64_t r, int64_t c, int64_t ld, const void *p)
{
    gemm_mat m = {t, (uint64_t)r, (uint64_t)c, ld, p};
    return m;
}

/* The spec of D = op_a(A) op_b(B): everything else zero (no epilogue
 * chosen yet, no bias, no aux, no operand in the row count). */
static gemm_spec spec_of(cublasOperation_t ta, cublasOperation_t tb, gemm_mat a, gemm_mat b,
                         gemm_mat d)
{
    gemm_spec s;
    memset(&s, 0, sizeof s);
    s.ta = ta;
    s.tb = tb;
    s.at = a.t;
    s.ar = a.r;
    s.ac = a.c;
    s.lda = a.ld;
    s.pa = a.p;
    s.bt = b.t;
    s.br = b.r;
    s.bc = b.c;
    s.ldb = b.ld;
    s.pb = b.p;
    s.dt = d.t;
    s.dr = d.r;
    s.dc = d.c;
    s.ldd = d.ld;
    s.pd = (void *)d.p;
    return s;
}

/* s as the plain GEMM: the default epilogue, no bias, no aux. */
static void spec_plain(gemm_spec *s)
{
    s->epi = CUBLASLT_EPILOGUE_DEFAULT;
    s->bias = NULL;
    s->bias_type = -1;
    s->aux = NULL;
    s->aux_ld = 0;
}

/* RAP_GPU_VERBOSE: says which fused candidate cuBLASLt offered nothing for. */
static void say_none(const char *name, const char *op, const gemm_spec *s)
{
    if (verbose())
        fprintf(stderr, "rap GPU tune: %s %s: no algorithm for %s (bias %s)\n", name, op,
                epi_name(s->epi),
                !s->bias ? "none" : s->bias_type == (int)CUDA_R_32F ? "fp32" : "default type");
}

static rap_status setup_fwd(rap_gpu *g, rap_gpu_layer *l, const char *name)
{
    if (l->gemv) {
        l->fwd_bias = true;
        return RAP_OK;
    }
    gemm_spec s = spec_of(CUBLAS_OP_T, CUBLAS_OP_N, mat(g->act, l->kg, l->out, l->ldw, l->wc),
                          mat(g->act, l->kg, g->B, l->ldx, l->x),
                          mat(l->ytype, l->out, g->B, l->ldy, l->y));
    s.n_in_d = true;
    bool ok = false;
    /* (epilogue, aux, bias pointer, bias type) candidates, most fused first */
    const bool d32 = l->ytype == CUDA_R_32F;
    /* the bias: in bf16 the fp32 master, then the bf16 copy; in fp32 the
     * master, then (v2) its copy in the padded layout (256-byte aligned) */
    const int nbv = (g->bf16 && !d32) || (!g->bf16 && g->mlp_ver >= 2) ? 2 : 1;
    const bool aux_first = l->relu && l->want_aux && !relu_bias_fwd(g);
    for (int aux = aux_first ? 1 : 0; aux >= 0 && !ok && !unfused_fwd(); aux--) {
        for (int bv = 0; bv < nbv && !ok; bv++) {
            s.epi = l->relu ? (aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS)
                            : CUBLASLT_EPILOGUE_BIAS;
            s.bias = bv == 1 ? l->bc : l->b;
            s.bias_type = (g->bf16 && !d32 && bv == 0) ? (int)CUDA_R_32F : -1;
            s.aux = aux ? l->aux : NULL;
            s.aux_ld = aux ? l->aux_ld : 0;
            RAP_TRY(gemm_make(g, &l->fwd, &s, &ok));
            if (ok) {
                l->fwd_bias = true;
                l->fwd_aux = aux == 1;
            } else {
                say_none(name, "forward", &s);
            }
        }
    }
    const uint32_t fused_epi = ok ? (uint32_t)s.epi : 0u;
    spec_plain(&s);
    if (ok && tuning()) {
        layer_op o = {l, NULL, 0};
        char what[64];
        snprintf(what, sizeof what, "%s forward (%lld -> %d) %s", name, (long long)l->kg,
                 l->out, epi_name(fused_epi));
        RAP_TRY(fused_or_plain(g, &o, &l->fwd, &l->fwd_bias, &l->fwd_aux, &s, what));
    }
    if (!ok) {
        RAP_TRY(gemm_make(g, &l->fwd, &s, &ok));
        l->fwd_bias = l->fwd_aux = false;
    }
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the forward GEMM of a "
                        "(%d -> %d) layer at %lld rows",
                        l->in, l->out, (long long)g->B);
    return RAP_OK;
}

static rap_status setup_bw(rap_gpu *g, rap_gpu_layer *l, const char *name)
{
    if (l->gemv) {
        l->bw_bgrad = true;
        return RAP_OK;
    }
    gemm_spec s = spec_of(CUBLAS_OP_N, CUBLAS_OP_T, mat(g->act, l->kg, g->B, l->ldx, l->x),
                          mat(g->act, l->out, g->B, l->out, l->da),
                          mat(CUDA_R_32F, l->kg, l->out, l->ldw, l->dw));
    s.n_in_a = true;
    s.epi = CUBLASLT_EPILOGUE_BGRADB;
    s.bias = l->db;
    s.bias_type = -1;
    bool ok = false;
    /* db_by_next: the layer above writes db, the plain GEMM is all */
    if (!unfused() && !l->db_by_next) {
        RAP_TRY(gemm_make(g, &l->bw, &s, &ok));
        if (!ok)
            say_none(name, "dW", &s);
    }
    l->bw_bgrad = ok;
    spec_plain(&s);
    if (ok && tuning()) {
        layer_op o = {l, NULL, 1};
        char what[64];
        snprintf(what, sizeof what, "%s dW (%lld x %d)", name, (long long)l->kg, l->out);
        RAP_TRY(fused_or_plain(g, &o, &l->bw, &l->bw_bgrad, NULL, &s, what));
    }
    if (!ok)
        RAP_TRY(gemm_make(g, &l->bw, &s, &ok));
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the weight-gradient GEMM "
                        "of a (%d -> %d) layer",
                        l->in, l->out);
    return RAP_OK;
}

/* RAP_GPU_DRELU_BGRAD=0 in the environment: v2 without the DRELU_BGRAD
 * candidate (DRELU and a column sum, or the plain GEMM and
 * drelu_colsum_kernel), to tell its share of an A/B. */
static bool drelu_bgrad_allowed(void)
{
    const char *e = getenv("RAP_GPU_DRELU_BGRAD");
    return !(e && *e == '0');
}

/* The dX GEMM of l (prev: the layer below, or NULL). v2: prev's bias
 * gradient moves here (prev->db_by_next) when prev has a ReLU. Before
 * prev's setup_bw. */
static rap_status setup_bx(rap_gpu *g, rap_gpu_layer *l, rap_gpu_layer *prev, const char *name)
{
    if (prev && prev->relu && g->mlp_ver >= 2)
        prev->db_by_next = true;
    if (l->gemv) {
        l->bx_drelu = true;
        return RAP_OK;
    }
    gemm_spec s = spec_of(CUBLAS_OP_N, CUBLAS_OP_N, mat(g->act, l->kg, l->out, l->ldw, l->wc),
                          mat(g->act, l->out, g->B, l->out, l->da),
                          mat(g->act, l->kg, g->B, l->lddx, l->dx));
    s.n_in_d = true;
    bool ok = false;
    l->bx_drelu = l->bx_bgrad = false;
    /* with a bitmask of prev (cuBLASLt's; v2 also the own one where the
     * probe saw cuBLASLt read it): DRELU_BGRAD (v2, where the probe saw
     * its bias gradient right: prev's db, fp32, from the epilogue), then
     * DRELU */
    const bool v2 = g->mlp_ver >= 2;
    const bool mask = prev && prev->relu &&
                      (prev->fwd_aux || (v2 && g->lt_mask_ok && own_mask(prev)));
    if (mask && !unfused()) {
        s.aux = prev->aux;
        s.aux_ld = prev->aux_ld;
        if (v2 && g->lt_bgrad_ok && drelu_bgrad_allowed()) {
            s.epi = CUBLASLT_EPILOGUE_DRELU_BGRAD;
            s.bias = prev->db;
            s.bias_type = g->bf16 ? (int)CUDA_R_32F : -1;
            RAP_TRY(gemm_make(g, &l->bx, &s, &ok));
            l->bx_drelu = l->bx_bgrad = ok;
            if (!ok)
                say_none(name, "dX", &s);
            if (ok && g->mlp_ver >= 3 && tuning()) { /* v3: DRELU + column sum too */
                gemm_spec dr = s;
                dr.epi = CUBLASLT_EPILOGUE_DRELU;
                dr.bias = NULL;
                dr.bias_type = -1;
                layer_op o = {l, prev, 2};
                char what[64];
                snprintf(what, sizeof what, "%s dX (%lld x %d) DRELU_BGRAD or DRELU", name,
                         (long long)l->kg, l->out);
                RAP_TRY(bgrad_or_drelu(g, &o, &dr, what));
                if (!l->bx_bgrad)
                    s = dr;
            }
        }
        if (!ok) {
            s.epi = CUBLASLT_EPILOGUE_DRELU;
            s.bias = NULL;
            s.bias_type = -1;
            RAP_TRY(gemm_make(g, &l->bx, &s, &ok));
            l->bx_drelu = ok;
            if (!ok)
                say_none(name, "dX", &s);
        }
    }
    const uint32_t fused_epi = ok ? (uint32_t)s.epi : 0u;
    spec_plain(&s);
    if (ok && tuning()) {
        layer_op o = {l, prev, 2};
        char what[64];
        snprintf(what, sizeof what, "%s dX (%lld x %d) %s", name, (long long)l->kg, l->out,
                 epi_name(fused_epi));
        RAP_TRY(fused_or_plain(g, &o, &l->bx, &l->bx_drelu, &l->bx_bgrad, &s, what));
    }
    if (!ok)
        RAP_TRY(gemm_make(g, &l->bx, &s, &ok));
    if (!ok)
        return rap_fail(RAP_ERR_CUDA,
                        "GPU model: cuBLASLt offers no algorithm for the input-gradient GEMM "
                        "of a (%d -> %d) layer",
                        l->in, l->out);
    return RAP_OK;
}

static rap_status setup_mlp(rap_gpu *g, rap_gpu_layer *L, int n, const char *mlp)
{
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s[%d]", mlp, i);
        RAP_TRY(setup_fwd(g, &L[i], name));
    }
    /* top down: a layer's dX set-up decides where the layer below's db
     * is made before that layer's dW set-up */
    for (int i = n - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "%s[%d]", mlp, i);
        if (L[i].need_dx)
            RAP_TRY(setup_bx(g, &L[i], i > 0 ? &L[i - 1] : NULL, name));
        RAP_TRY(setup_bw(g, &L[i], name));
    }
    return RAP_OK;
}

/* Word i of the tuning fill: two bf16 values in (-1, 1) (a finite float
 * too, read as fp32). */
static __global__ void tune_fill_kernel(uint32_t *p, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        const float a = (float)(h & 0xffffu) / 65536.0f * 2.0f - 1.0f;
        const float b = (float)(h >> 16) / 65536.0f * 2.0f - 1.0f;
        const uint32_t ha = __bfloat16_as_ushort(__float2bfloat16_rn(a));
        const uint32_t hb = __bfloat16_as_ushort(__float2bfloat16_rn(b));
        p[i] = (ha << 16) | hb;
    }
}

/* ------------------------------------------------------ epilogue probe */

#define PROBE_M 128 /* rows of the probe's output: one aux_ld of bits */
#define PROBE_N 64  /* its columns (and the inner width) */

static size_t al256b(size_t x) { return (x + 255) / 256 * 256; }

/* Builds, picks and runs the probe GEMM of spec s and waits for it: *ran
 * false (and RAP_OK) where cuBLASLt has no algorithm for it or refuses it
 * at run time. RAP_ERR_CUDA when the run fails on the device. */
static rap_status probe_gemm(rap_gpu *g, const gemm_spec *s, bool *ran)
{
    *ran = false;
    rap_gpu_gemm x;
    bool built = false, found = false;
    RAP_TRY(gemm_build(g, &x, s, &built));
    if (!built)
        return RAP_OK;
    rap_status st = gemm_pick(g, &x, &found);
    if (st != RAP_OK || !found) {
        gemm_destroy(&x);
        return st;
    }
    if (gemm_run(g, &x) != RAP_OK) { /* refused at run time: as not offered */
        rap_clear_error();
        gemm_destroy(&x);
        return RAP_OK;
    }
    const cudaError_t e = cudaStreamSynchronize(g->stream);
    gemm_destroy(&x);
    if (e != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "GPU model: epilogue probe: %s", cudaGetErrorString(e));
    *ran = true;
    return RAP_OK;
}

/* Element i of a host copy of act values (bf16 or fp32, g->bf16) as a
 * float. */
static float probe_value(const rap_gpu *g, const char *host, size_t i)
{
    float v;
    if (g->bf16) {
        uint16_t h;
        memcpy(&h, host + 2 * i, 2);
        return rap_bf16_to_f32(h);
    }
    memcpy(&v, host + 4 * i, 4);
    return v;
}

/* Runs the probe GEMM of spec s (DRELU or DRELU_BGRAD on the buffers of
 * probe_epilogues) and checks it: *ran whether cuBLASLt had an algorithm,
 * *out_ok the output equals the mask's bits, *db_ok (DRELU_BGRAD) the bias
 * gradient equals their row sums. */
static rap_status probe_run(rap_gpu *g, const gemm_spec *s, const uint32_t *mask, char *host,
                            float *hdb, bool *ran, bool *out_ok, bool *db_ok)
{
    *ran = *out_ok = *db_ok = false;
    bool done = false;
    RAP_TRY(probe_gemm(g, s, &done));
    if (!done)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpy(host, s->pd, g->es * PROBE_M * PROBE_N, cudaMemcpyDeviceToHost));
    if (s->bias)
        RAP_CUDA_TRY(
            cudaMemcpy(hdb, s->bias, sizeof(float) * PROBE_M, cudaMemcpyDeviceToHost));
    *ran = true;
    *out_ok = *db_ok = true;
    for (int m = 0; m < PROBE_M; m++) {
        int sum = 0;
        for (int n = 0; n < PROBE_N; n++) {
            const int bit = (int)((mask[n * (PROBE_M / 32) + m / 32] >> (m % 32)) & 1u);
            const float v = probe_value(g, host, (size_t)n * PROBE_M + m);
            if (v != (float)bit)
                *out_ok = false;
            sum += bit;
        }
        if (s->bias && hdb[m] != (float)sum)
            *db_ok = false;
    }
    if (!s->bias)
        *db_ok = false;
    return RAP_OK;
}

/* Whether cuBLASLt's RELU_AUX_BIAS epilogue writes its bitmask in the own
 * layout (v3), seen on the probe's buffers (dev, host: A ones at 0, B at
 * off_b, D at s->pd, the mask at off_m, an fp32 bias at off_db): D (M x N)
 * = ones (M x N) * diag(s_n) + b_m with s_n = +-1 and b_m in {-1.5, -0.5,
 * 0.5, 1.5}, so the ReLU is on where s_n + b_m > 0, a pattern of both m
 * and n; the mask starts as the complement of the expected bits. *ran
 * whether cuBLASLt had an algorithm, *ok the bits (and D) right. */
static rap_status probe_fwd_mask(rap_gpu *g, gemm_spec *s, char *dev, char *host, size_t off_b,
                                 size_t off_m, size_t off_db, uint64_t *rng, bool *ran, bool *ok)
{
    *ran = *ok = false;
    const size_t es = g->es, words = (size_t)PROBE_N * (PROBE_M / 32);
    float sn[PROBE_N], bm[PROBE_M];
    for (int n = 0; n < PROBE_N; n++)
        sn[n] = (rap_splitmix64(rng) & 1) ? 1.0f : -1.0f;
    for (int m = 0; m < PROBE_M; m++)
        bm[m] = (float)(rap_splitmix64(rng) % 4) - 1.5f;
    char *hb = host + off_b;
    uint32_t *hm = (uint32_t *)(host + off_m);
    for (int k = 0; k < PROBE_N; k++)
        for (int n = 0; n < PROBE_N; n++) {
            const float v = k == n ? sn[n] : 0.0f;
            char *at = hb + es * ((size_t)n * PROBE_N + k);
            if (g->bf16) {
                const uint16_t h = v == 1.0f ? 0x3f80 : v == -1.0f ? 0xbf80 : 0;
                memcpy(at, &h, 2);
            } else {
                memcpy(at, &v, 4);
            }
        }
    memset(hm, 0, 4 * words);
    for (int n = 0; n < PROBE_N; n++)
        for (int m = 0; m < PROBE_M; m++)
            if (!(sn[n] + bm[m] > 0.0f)) /* the complement of the expected bit */
                hm[(size_t)n * (PROBE_M / 32) + m / 32] |= 1u << (m % 32);
    memcpy(host + off_db, bm, sizeof bm);
    RAP_CUDA_TRY(cudaMemcpy(dev + off_b, hb, es * PROBE_N * PROBE_N, cudaMemcpyHostToDevice));
    RAP_CUDA_TRY(cudaMemcpy(dev + off_m, hm, 4 * words, cudaMemcpyHostToDevice));
    RAP_CUDA_TRY(cudaMemcpy(dev + off_db, bm, sizeof bm, cudaMemcpyHostToDevice));
    s->epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    s->bias = dev + off_db;
    s->bias_type = g->bf16 ? (int)CUDA_R_32F : -1;
    s->aux = dev + off_m;
    s->aux_ld = PROBE_M;
    bool done = false;
    RAP_TRY(probe_gemm(g, s, &done));
    if (!done)
        return RAP_OK;
    RAP_CUDA_TRY(cudaMemcpy(hm, dev + off_m, 4 * words, cudaMemcpyDeviceToHost));
    char *hd = host + ((const char *)s->pd - dev); /* D's room in the host copy */
    RAP_CUDA_TRY(cudaMemcpy(hd, s->pd, es * PROBE_M * PROBE_N, cudaMemcpyDeviceToHost));
    *ran = true;
    *ok = true;
    for (int n = 0; n < PROBE_N; n++)
        for (int m = 0; m < PROBE_M; m++) {
            const float want = sn[n] + bm[m] > 0.0f ? sn[n] + bm[m] : 0.0f;
            const uint32_t bit = (hm[(size_t)n * (PROBE_M / 32) + m / 32] >> (m % 32)) & 1u;
            const float v = probe_value(g, hd, (size_t)n * PROBE_M + m);
            if (bit != (uint32_t)(want > 0.0f) || v != want)
                *ok = false;
        }
    return RAP_OK;
}

/* What cuBLASLt's DRELU epilogues do with a bitmask in the own layout (bit
 * m % 32 of word n * (M / 32) + m / 32 for output element (m, n), as the
 * bias/ReLU kernel writes it), seen once at create on one small GEMM: D
 * (M x N) = ones (M x N) * I (N x N), so the masked output must be the
 * mask's bits, and DRELU_BGRAD's bias gradient their row sums. Sets
 * g->lt_mask_ok (the own bitmask can feed DRELU: its layout is cuBLASLt's)
 * and g->lt_bgrad_ok (DRELU_BGRAD's bias gradient is that of the masked
 * output, the one this code needs); an epilogue with no algorithm here
 * leaves its flag false (the real GEMMs then do not use it). v3 also sets
 * g->lt_fwdmask_ok (probe_fwd_mask). */
static rap_status probe_epilogues(rap_gpu *g)
{
    const size_t es = g->es, na = (size_t)PROBE_M * PROBE_N, nb = (size_t)PROBE_N * PROBE_N;
    const size_t words = (size_t)PROBE_N * (PROBE_M / 32);
    const size_t off_b = al256b(es * na), off_d = off_b + al256b(es * nb);
    const size_t off_m = off_d + al256b(es * na), off_db = off_m + al256b(4 * words);
    const size_t total = off_db + al256b(sizeof(float) * PROBE_M);
    g->lt_mask_ok = g->lt_bgrad_ok = g->lt_fwdmask_ok = false;
    g->lt_probe = 0;
    char *dev = NULL;
    char *host = (char *)rap_malloc(total, "GPU model epilogue probe");
    if (!host)
        return RAP_ERR_NOMEM;
    rap_status st = rap_cuda_malloc((void **)&dev, total, "GPU model epilogue probe");
    uint64_t r = 0x5eed;
    if (st == RAP_OK) {
        memset(host, 0, total);
        for (size_t i = 0; i < na + nb; i++) { /* A: ones; B: the identity */
            const size_t j = i < na ? i : i - na;
            const float v = i < na ? 1.0f : (j % PROBE_N == j / PROBE_N ? 1.0f : 0.0f);
            char *at = host + (i < na ? 0 : off_b) + es * j;
            if (g->bf16) {
                const uint16_t h = v == 1.0f ? 0x3f80 : 0;
                memcpy(at, &h, 2);
            } else {
                memcpy(at, &v, 4);
            }
        }
        uint32_t *mask = (uint32_t *)(host + off_m);
        for (size_t i = 0; i < words; i++)
            mask[i] = (uint32_t)(rap_splitmix64(&r) >> 16);
        cudaError_t e = cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "GPU model: epilogue probe: %s", cudaGetErrorString(e));
    }
    gemm_spec s;
    memset(&s, 0, sizeof s);
    s.ta = s.tb = CUBLAS_OP_N;
    s.at = s.bt = s.dt = g->act;
    s.ar = PROBE_M, s.ac = PROBE_N, s.lda = PROBE_M;
    s.br = PROBE_N, s.bc = PROBE_N, s.ldb = PROBE_N;
    s.dr = PROBE_M, s.dc = PROBE_N, s.ldd = PROBE_M;
    s.aux_ld = PROBE_M;
    float hdb[PROBE_M];
    /* the mask the probe GEMMs read: a copy, the host one is overwritten */
    uint32_t hmask[PROBE_N * (PROBE_M / 32)];
    if (st == RAP_OK) {
        memcpy(hmask, host + off_m, sizeof hmask);
        s.pa = dev;
        s.pb = dev + off_b;
        s.pd = dev + off_d;
        s.aux = dev + off_m;
    }
    for (int k = 0; k < 2 && st == RAP_OK; k++) {
        const bool bgrad = k == 0;
        s.epi = bgrad ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
        s.bias = bgrad ? dev + off_db : NULL;
        s.bias_type = bgrad && g->bf16 ? (int)CUDA_R_32F : -1;
        bool ran = false, out_ok = false, db_ok = false;
        st = probe_run(g, &s, hmask, host, hdb, &ran, &out_ok, &db_ok);
        if (ran)
            g->lt_probe |= bgrad ? 1 : 2;
        if (ran && out_ok)
            g->lt_mask_ok = true;
        if (bgrad && ran && out_ok && db_ok)
            g->lt_bgrad_ok = true;
    }
    if (st == RAP_OK && g->mlp_ver >= 3) {
        bool ran = false;
        st = probe_fwd_mask(g, &s, dev, host, off_b, off_m, off_db, &r, &ran,
                            &g->lt_fwdmask_ok);
        if (ran)
            g->lt_probe |= 4;
    }
    if (dev)
        cudaFree(dev);
    rap_free(host);
    return st;
}

/* RAP_GPU_MLP=v1 in the environment: the first epilogue candidates and
 * kernels (DRELU only, ReLU backward and bias gradient as separate passes,
 * scalar kernels); =v2: the second (v3 without its probe of the forward
 * bitmask, its DRELU candidate beside DRELU_BGRAD and mlp_kernels.cu's v3
 * passes); for an A/B in one build. Default 3. */
static int mlp_version(void)
{
    const char *e = getenv("RAP_GPU_MLP");
    if (e && strcmp(e, "v1") == 0)
        return 1;
    return e && strcmp(e, "v2") == 0 ? 2 : 3;
}

rap_status rap_gpu_mlp_setup(rap_gpu *g)
{
    g->mlp_ver = mlp_version();
    if (g->mlp_ver >= 2 && !unfused())
        RAP_TRY(probe_epilogues(g));
    /* the activations: random while tuning (never time on zeros), zero
     * after (the padding columns must be zero) */
    const bool tune = tuning();
    char *act0 = (char *)g->z, *act1 = (char *)g->blk_arena + g->arena_bytes;
    if (tune) {
        const int64_t words = (int64_t)((size_t)(act1 - act0) / 4);
        tune_fill_kernel<<<rap_gpu_blocks(words, 256, g->sms * 16), 256, 0, g->stream>>>(
            (uint32_t *)act0, words);
        RAP_CUDA_LAUNCHED();
    }
    RAP_TRY(setup_mlp(g, g->bot, g->n_bot, "bottom"));
    RAP_TRY(setup_mlp(g, g->top, g->n_top, "top"));
    if (tune) {
        RAP_CUDA_TRY(cudaMemsetAsync(act0, 0, (size_t)(act1 - act0), g->stream));
        RAP_CUDA_TRY(
            cudaMemsetAsync(g->grads, 0, sizeof(float) * (size_t)g->segs.n_pad, g->stream));
    }
    g->cur_rows = g->B;
    int fused = 0, total = 0, by_dx = 0, by_next = 0;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            fused += L[i].fwd_bias + (L[i].bw_bgrad || L[i].db_by_next) +
                     (L[i].bx_drelu || i == 0);
            total += 3;
            by_dx += L[i].bx_bgrad;
            by_next += L[i].db_by_next;
        }
    }
    /* a bias gradient made by the layer above counts as fused */
    rap_info("GPU model: %d of %d GEMM epilogues fused%s (MLP v%d: %d bias gradients by the "
             "layer above, %d of them in its DRELU_BGRAD epilogue; probe: DRELU_BGRAD %s, "
             "DRELU %s, own bitmask %s, RELU_AUX_BIAS bitmask %s)",
             fused, total, unfused_fwd() ? " (RAP_GPU_UNFUSED)" : "", g->mlp_ver, by_next, by_dx,
             !(g->lt_probe & 1) ? "not offered" : g->lt_bgrad_ok ? "right" : "WRONG",
             !(g->lt_probe & 2) ? "not offered" : "offered",
             g->lt_mask_ok ? "read right" : "not usable",
             g->mlp_ver < 3 ? "not probed" : !(g->lt_probe & 4) ? "not offered"
                                           : g->lt_fwdmask_ok ? "own layout" : "other layout");
    return RAP_OK;
}

rap_status rap_gpu_mlp_set_rows(rap_gpu *g, int64_t rows)
{
    if (rows == g->cur_rows)
        return RAP_OK;
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        int n = k ? g->n_top : g->n_bot;
        for (int i = 0; i < n; i++) {
            RAP_TRY(gemm_rows(g, &L[i].fwd, rows));
            RAP_TRY(gemm_rows(g, &L[i].bw, rows));
            RAP_TRY(gemm_rows(g, &L[i].bx, rows));
        }
    }
    g->cur_rows = rows;
    return RAP_OK;
}

void rap_gpu_mlp_destroy(rap_gpu *g)
{
    for (int k = 0; k < 2; k++) {
        rap_gpu_layer *L = k ? g->top : g->bot;
        for (int i = 0; i < RAP_MAX_LAYERS; i++) {
            gemm_destroy(&L[i].fwd);
            gemm_destroy(&L[i].bw);
            gemm_destroy(&L[i].bx);
        }
    }
}

/* ------------------------------------------------------------- phases */

rap_status rap_gpu_mlp_forward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows)
{
    for (int i = 0; i < n; i++)
        RAP_TRY(layer_fwd(g, &L[i], rows));
    return RAP_OK;
}

rap_status rap_gpu_mlp_backward(rap_gpu *g, rap_gpu_layer *L, int n, int64_t rows)
{
    for (int i = n - 1; i >= 0; i--) {
        rap_gpu_layer *l = &L[i];
        const rap_gpu_layer *prev = i > 0 ? &L[i - 1] : NULL;
        if (l->gemv) {
            RAP_TRY(rap_gpu_gemv_backward(g, l, prev, rows,
                                          prev && prev->db_by_next ? prev->db : NULL));
            continue;
        }
        RAP_TRY(layer_bw(g, l, rows));
        if (l->need_dx)
            RAP_TRY(layer_bx(g, l, prev, rows));
    }
    return RAP_OK;
}

#else
typedef int rap_mlp_cu_empty;
#endif
