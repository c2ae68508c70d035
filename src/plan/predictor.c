/*
 * predictor.c -- XGBoost latency models per kernel type (predictor.h).
 *
 * Each model learns log(measured ms / analytic ms): the trees only correct
 * the analytic estimate, so a slice outside the measured range still gets
 * a sensible answer (a tree predicts a constant beyond its last split).
 */
#include "plan/predictor_internal.h"

#include "core/file.h"
#include "core/out.h"
#include "plan/xgb_check.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xgboost/c_api.h>

#define MAX_TYPES 64

typedef struct {
    rap_op_type op;
    int variant;
    BoosterHandle booster;
    rap_pred_quality q;
} pred_model;

struct rap_predictor {
    char dir[512];
    char gpu[RAP_GPU_NAME];
    rap_analytic an;
    pred_model m[MAX_TYPES];
    int n;
};

static rap_status xgb_fail(const char *what)
{
    return rap_fail(RAP_ERR_INTERNAL, "xgboost: %s: %s", what, XGBGetLastError());
}

/* An op type by name; "rows" (row kernels) is RAP_OP_INPUT (features.h);
 * -1 for an unknown name. */
int rap_pred_op_parse(const char *name)
{
    if (!strcmp(name, "rows"))
        return RAP_OP_INPUT;
    for (int t = 1; t < RAP_OP_COUNT; t++)
        if (!strcmp(rap_op_name((rap_op_type)t), name))
            return t;
    return -1;
}

/* Strips s's leading blanks and tabs and its trailing blanks, tabs and
 * line ends, in place. */
void rap_pred_trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    if (i)
        memmove(s, s + i, n - i + 1);
}

/* ------------------------------------------------------------- models */

static rap_status predict_rows(BoosterHandle b, const float *x, int n, float *out)
{
    DMatrixHandle d;
    if (XGDMatrixCreateFromMat_omp(x, (bst_ulong)n, RAP_KFEAT_N, NAN, &d, 1))
        return xgb_fail("XGDMatrixCreateFromMat");
    bst_ulong len = 0;
    const float *res = NULL;
    int rc = XGBoosterPredict(b, d, 0, 0, 0, &len, &res);
    if (rc == 0 && len == (bst_ulong)n)
        memcpy(out, res, sizeof(float) * (size_t)n);
    XGDMatrixFree(d);
    if (rc)
        return xgb_fail("XGBoosterPredict");
    if (len != (bst_ulong)n)
        return rap_fail(RAP_ERR_INTERNAL, "xgboost: %d predictions for %d rows", (int)len, n);
    return RAP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *s, int n, double q)
{
    if (n == 0)
        return NAN;
    int i = (int)ceil(q * n) - 1;
    return s[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Trains one type's booster on rows (train rows: is_test 0). */
static rap_status train_type(const rap_analytic *an, const rap_pred_row *rows, int n,
                             const bool *is_test, BoosterHandle *out, rap_pred_quality *q)
{
    int ntr = 0, nte = 0;
    for (int i = 0; i < n; i++)
        is_test[i] ? nte++ : ntr++;
    if (ntr < 1)
        return rap_fail(RAP_ERR_DATA, "predictor: kernel type %s has no training rows", q->type);
    float *x = rap_malloc(sizeof(float) * RAP_KFEAT_N * (size_t)n, "predictor train");
    float *y = rap_malloc(sizeof(float) * (size_t)n, "predictor train");
    float *xt = rap_malloc(sizeof(float) * RAP_KFEAT_N * (size_t)(nte + 1), "predictor train");
    float *pt = rap_malloc(sizeof(float) * (size_t)(nte + 1), "predictor train");
    double *err = rap_malloc(sizeof(double) * (size_t)(nte + 1), "predictor train");
    rap_status st = RAP_OK;
    DMatrixHandle d = NULL;
    BoosterHandle b = NULL;
    if (!x || !y || !xt || !pt || !err) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    int a = 0, c = 0;
    for (int i = 0; i < n; i++) {
        if (is_test[i]) {
            rap_kfeat_vector(&rows[i].f, xt + (size_t)c++ * RAP_KFEAT_N);
            continue;
        }
        rap_kfeat_vector(&rows[i].f, x + (size_t)a * RAP_KFEAT_N);
        y[a++] = (float)log(rows[i].ms / rap_analytic_ms(an, &rows[i].f));
    }
    if (XGDMatrixCreateFromMat_omp(x, (bst_ulong)ntr, RAP_KFEAT_N, NAN, &d, 1) ||
        XGDMatrixSetFloatInfo(d, "label", y, (bst_ulong)ntr)) {
        st = xgb_fail("training matrix");
        goto out;
    }
    if (XGBoosterCreate(&d, 1, &b)) {
        st = xgb_fail("XGBoosterCreate");
        goto out;
    }
    static const char *const params[][2] = {
        {"objective", "reg:squarederror"}, {"max_depth", "6"}, {"eta", "0.1"},
        {"nthread", "1"}, {"seed", "0"}, {"base_score", "0"}, {"verbosity", "0"},
        {"min_child_weight", "1"}, {"lambda", "1"}, {"tree_method", "hist"}, {"max_bin", "256"}};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (XGBoosterSetParam(b, params[i][0], params[i][1])) {
            st = xgb_fail("XGBoosterSetParam");
            goto out;
        }
    for (int it = 0; it < 300; it++)
        if (XGBoosterUpdateOneIter(b, it, d)) {
            st = xgb_fail("XGBoosterUpdateOneIter");
            goto out;
        }
    q->n_train = ntr;
    q->n_test = nte;
    q->within10 = q->median = q->p95 = q->p99 = NAN;
    if (nte > 0) {
        RAP_TRY(predict_rows(b, xt, nte, pt));
        int k = 0, within = 0;
        for (int i = 0; i < n; i++) {
            if (!is_test[i])
                continue;
            double pred = exp(pt[k]) * rap_analytic_ms(an, &rows[i].f);
            err[k] = fabs(pred - rows[i].ms) / rows[i].ms;
            within += err[k] <= 0.10;
            k++;
        }
        qsort(err, (size_t)nte, sizeof *err, cmp_double);
        q->within10 = (double)within / nte;
        q->median = quantile(err, nte, 0.5);
        q->p95 = quantile(err, nte, 0.95);
        q->p99 = quantile(err, nte, 0.99);
    }
    *out = b;
    b = NULL;
out:
    if (b)
        XGBoosterFree(b);
    if (d)
        XGDMatrixFree(d);
    rap_free(x);
    rap_free(y);
    rap_free(xt);
    rap_free(pt);
    rap_free(err);
    return st;
}

void rap_pred_model_name(const char *type, char *buf, size_t n)
{
    snprintf(buf, n, "xgb_%s.json", type);
}

static void model_file(const char *dir, const char *type, char *buf, size_t n)
{
    char name[96];
    rap_pred_model_name(type, name, sizeof name);
    snprintf(buf, n, "%s/%s", dir, name);
}

/* One xgboost model file (JSON) through core/out.h. */
static rap_status save_booster(BoosterHandle b, const char *path, const char *csv)
{
    RAP_TRY(rap_out_check_inputs(path, &csv, 1));
    bst_ulong len = 0;
    const char *bytes = NULL;
    if (XGBoosterSaveModelToBuffer(b, "{\"format\": \"json\"}", &len, &bytes))
        return rap_fail(RAP_ERR_IO, "%s: xgboost cannot save: %s", path, XGBGetLastError());
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    if (fwrite(bytes, 1, (size_t)len, rap_out_file(o)) != (size_t)len) {
        rap_status st = rap_fail(RAP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        rap_out_abort(o);
        return st;
    }
    return rap_out_commit(o);
}

/* Writes the bundle into dir (created if needed); csv: the training file,
 * never overwritten. */
static rap_status save_bundle(const rap_predictor *p, const char *dir, const char *csv)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return rap_fail(RAP_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    char path[1024];
    for (int i = 0; i < p->n; i++) {
        model_file(dir, p->m[i].q.type, path, sizeof path);
        RAP_TRY(save_booster(p->m[i].booster, path, csv));
    }
    snprintf(path, sizeof path, "%s/predictor.txt", dir);
    RAP_TRY(rap_out_check_inputs(path, &csv, 1));
    rap_out *o;
    RAP_TRY(rap_out_open(path, NULL, &o));
    FILE *f = rap_out_file(o);
    fprintf(f, "rap-predictor %d\n", RAP_PREDICTOR_VERSION);
    fprintf(f, "gpu %s\n", p->gpu);
    fprintf(f, "analytic launch_ms=%.17g gbytes_per_s=%.17g\n", p->an.launch_ms, p->an.gbytes_per_s);
    fprintf(f, "# model target: log(ms / analytic ms); features: descs rows avg_width total_ids bytes batch_rows\n");
    for (int i = 0; i < p->n; i++) {
        const rap_pred_quality *q = &p->m[i].q;
        fprintf(f, "model %s op=%s variant=%d train=%d test=%d within10=%.6g median=%.6g p95=%.6g p99=%.6g\n",
                q->type, p->m[i].op == RAP_OP_INPUT ? "rows" : rap_op_name(p->m[i].op),
                p->m[i].variant, q->n_train, q->n_test,
                q->within10, q->median, q->p95, q->p99);
    }
    return rap_out_commit(o);
}

rap_status rap_predictor_train(const char *csv_path, const char *dir, rap_pred_quality *q,
                               int max_q, int *n_q)
{
    if (n_q)
        *n_q = 0;
    rap_pred_row *rows;
    int n;
    char gpu[RAP_GPU_NAME];
    RAP_TRY(rap_pred_csv_read(csv_path, &rows, &n, gpu));
    rap_predictor *p = rap_calloc(sizeof *p, "predictor");
    rap_pred_row *sub = rap_malloc(sizeof *sub * (size_t)n, "predictor");
    bool *is_test = rap_malloc(sizeof(bool) * (size_t)n, "predictor");
    bool *done = rap_calloc(sizeof(bool) * (size_t)n, "predictor");
    rap_status st = RAP_OK;
    if (!p || !sub || !is_test || !done) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    snprintf(p->gpu, sizeof p->gpu, "%s", gpu);
    p->an = rap_analytic_defaults();
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        if (p->n == MAX_TYPES) {
            st = rap_fail(RAP_ERR_DATA, "%s: more than %d kernel types", csv_path, MAX_TYPES);
            goto out;
        }
        int m = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && rows[j].f.op == rows[i].f.op && rows[j].f.variant == rows[i].f.variant) {
                done[j] = true;
                sub[m] = rows[j];
                is_test[m] = rap_mix64((uint64_t)rows[j].line) % 5 == 0;
                m++;
            }
        pred_model *pm = &p->m[p->n];
        pm->op = rows[i].f.op;
        pm->variant = rows[i].f.variant;
        rap_ktype_name(pm->op, pm->variant, pm->q.type, sizeof pm->q.type);
        st = train_type(&p->an, sub, m, is_test, &pm->booster, &pm->q);
        if (st != RAP_OK)
            goto out;
        p->n++;
        if (q && n_q && *n_q < max_q)
            q[(*n_q)++] = pm->q;
    }
    st = save_bundle(p, dir, csv_path);
    if (st == RAP_OK)
        st = rap_pred_manifest_write(dir);
out:
    rap_predictor_free(p);
    rap_free(rows);
    rap_free(sub);
    rap_free(is_test);
    rap_free(done);
    return st;
}

/* A "model TYPE op=OP variant=V ..." line of path:lineno into m, its
 * model file read (checked against the manifest m), checked by
 * rap_xgb_check and given to XGBoost from memory. */
static rap_status load_model(const char *dir, const rap_pred_manifest *man, const char *path,
                             int lineno, const char *line, pred_model *m)
{
    char op[64], want[64];
    int n = sscanf(line, "model %63s op=%63s variant=%d train=%d test=%d within10=%lf median=%lf "
                         "p95=%lf p99=%lf",
                   m->q.type, op, &m->variant, &m->q.n_train, &m->q.n_test, &m->q.within10,
                   &m->q.median, &m->q.p95, &m->q.p99);
    int o = n >= 3 ? rap_pred_op_parse(op) : -1;
    if (o >= 0)
        rap_ktype_name((rap_op_type)o, m->variant, want, sizeof want);
    if (o < 0 || m->variant < 0 || m->variant > RAP_PRED_MAX_VARIANT || strcmp(want, m->q.type))
        return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"model TYPE op=OP variant=V ...\" with "
                        "TYPE OP.V (V in 0..%d)", path, lineno, RAP_PRED_MAX_VARIANT);
    m->op = (rap_op_type)o;
    char name[96], mf[1200];
    rap_pred_model_name(m->q.type, name, sizeof name);
    snprintf(mf, sizeof mf, "%s/%s", dir, name);
    char *buf;
    size_t len;
    RAP_TRY(rap_pred_read_checked(dir, man, name, &buf, &len));
    rap_status st = rap_xgb_check(buf, len, RAP_KFEAT_N, mf);
    if (st == RAP_OK && XGBoosterCreate(NULL, 0, &m->booster))
        st = xgb_fail("XGBoosterCreate");
    if (st == RAP_OK && XGBoosterLoadModelFromBuffer(m->booster, buf, (bst_ulong)len))
        st = rap_fail(RAP_ERR_DATA, "%s:%d: cannot load model %s: %s", path, lineno, mf,
                      XGBGetLastError());
    rap_free(buf);
    return st;
}

/* One line of predictor.txt (after the version line) into p. */
static rap_status load_line(rap_predictor *p, const rap_pred_manifest *man, const char *path,
                            int lineno, const char *line, bool *have_gpu)
{
    if (!strncmp(line, "gpu ", 4)) {
        snprintf(p->gpu, sizeof p->gpu, "%s", line + 4);
        rap_pred_trim(p->gpu);
        *have_gpu = p->gpu[0] != 0;
        return RAP_OK;
    }
    if (!strncmp(line, "analytic ", 9)) {
        if (sscanf(line, "analytic launch_ms=%lf gbytes_per_s=%lf", &p->an.launch_ms,
                   &p->an.gbytes_per_s) != 2 || !(p->an.gbytes_per_s > 0) ||
            !isfinite(p->an.gbytes_per_s) || !(p->an.launch_ms >= 0) ||
            !isfinite(p->an.launch_ms))
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"analytic launch_ms=X "
                            "gbytes_per_s=Y\" (finite, X >= 0, Y > 0)", path, lineno);
        return RAP_OK;
    }
    if (!strncmp(line, "model ", 6)) {
        if (p->n == MAX_TYPES)
            return rap_fail(RAP_ERR_DATA, "%s:%d: more than %d models", path, lineno, MAX_TYPES);
        pred_model *m = &p->m[p->n];
        rap_status st = load_model(p->dir, man, path, lineno, line, m);
        if (m->booster)
            p->n++; /* freed with p */
        RAP_TRY(st);
        for (int i = 0; i < p->n - 1; i++)
            if (p->m[i].op == m->op && p->m[i].variant == m->variant)
                return rap_fail(RAP_ERR_DATA, "%s:%d: a second model for %s", path, lineno,
                                m->q.type);
        return RAP_OK;
    }
    return rap_fail(RAP_ERR_DATA, "%s:%d: expected gpu, analytic or model, got \"%.40s\"", path,
                    lineno, line);
}

/* predictor.txt's text (NUL-terminated, modified) into p. */
static rap_status load_text(rap_predictor *p, const rap_pred_manifest *man, const char *path,
                            char *text)
{
    int lineno = 0;
    bool magic = false, have_gpu = false;
    for (char *s = text; *s;) {
        char *nl = strchr(s, '\n'), *line = s;
        if (nl)
            *nl = 0;
        s = nl ? nl + 1 : s + strlen(s);
        lineno++;
        if (strlen(line) > 1000)
            return rap_fail(RAP_ERR_DATA, "%s:%d: line longer than 1000 bytes", path, lineno);
        rap_pred_trim(line);
        if (!line[0] || line[0] == '#')
            continue;
        if (magic) {
            RAP_TRY(load_line(p, man, path, lineno, line, &have_gpu));
            continue;
        }
        int ver;
        if (sscanf(line, "rap-predictor %d", &ver) != 1)
            return rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-predictor %d\"", path, lineno,
                            RAP_PREDICTOR_VERSION);
        if (ver != RAP_PREDICTOR_VERSION)
            return rap_fail(RAP_ERR_DATA, "%s:%d: version %d is not supported (expected %d)",
                            path, lineno, ver, RAP_PREDICTOR_VERSION);
        magic = true;
    }
    if (!magic)
        return rap_fail(RAP_ERR_DATA, "%s: empty (expected \"rap-predictor %d\")", path,
                        RAP_PREDICTOR_VERSION);
    if (!have_gpu)
        return rap_fail(RAP_ERR_DATA, "%s: no \"gpu NAME\" line", path);
    return RAP_OK;
}

rap_status rap_pred_load_with(const char *dir, const rap_pred_manifest *man, rap_predictor **out)
{
    *out = NULL;
    char path[1200];
    snprintf(path, sizeof path, "%s/predictor.txt", dir);
    char *text;
    size_t n;
    RAP_TRY(rap_pred_read_checked(dir, man, "predictor.txt", &text, &n));
    rap_predictor *p = rap_calloc(sizeof *p, "predictor");
    rap_status st = p ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK && strlen(text) != n)
        st = rap_fail(RAP_ERR_DATA, "%s: holds a NUL byte: not a predictor description", path);
    if (st == RAP_OK) {
        snprintf(p->dir, sizeof p->dir, "%s", dir);
        p->an = rap_analytic_defaults();
        st = load_text(p, man, path, text);
    }
    rap_free(text);
    if (st != RAP_OK) {
        rap_predictor_free(p);
        return st;
    }
    *out = p;
    return RAP_OK;
}

rap_status rap_predictor_load(const char *dir, rap_predictor **out)
{
    *out = NULL;
    rap_pred_manifest m;
    RAP_TRY(rap_pred_manifest_read(dir, &m));
    rap_status st = rap_pred_load_with(dir, &m, out);
    rap_pred_manifest_free(&m);
    return st;
}

rap_status rap_predictor_write_manifest(const char *dir) { return rap_pred_manifest_write(dir); }

void rap_predictor_free(rap_predictor *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        if (p->m[i].booster)
            XGBoosterFree(p->m[i].booster);
    rap_free(p);
}

const char *rap_predictor_gpu(const rap_predictor *p) { return p ? p->gpu : ""; }

rap_status rap_predictor_check(const rap_predictor *p, const char *gpu)
{
    if (p && gpu && gpu[0] && strcmp(p->gpu, gpu))
        return rap_fail(RAP_ERR_ARG, "predictor %s was made for GPU \"%s\", not \"%s\"", p->dir,
                        p->gpu, gpu);
    return RAP_OK;
}

double rap_predict_ms(const rap_predictor *p, const rap_kfeat *f, bool *model)
{
    rap_analytic def = rap_analytic_defaults();
    const rap_analytic *an = p ? &p->an : &def;
    double base = rap_analytic_ms(an, f);
    if (model)
        *model = false;
    if (!p)
        return base;
    for (int i = 0; i < p->n; i++) {
        if (p->m[i].op != f->op || p->m[i].variant != f->variant)
            continue;
        float x[RAP_KFEAT_N], y;
        rap_kfeat_vector(f, x);
        if (predict_rows(p->m[i].booster, x, 1, &y) != RAP_OK)
            return base; /* cannot happen with a loaded model; keep the estimate */
        if (model)
            *model = true;
        return exp(y) * base;
    }
    return base;
}

int rap_predictor_n_types(const rap_predictor *p) { return p ? p->n : 0; }

const rap_pred_quality *rap_predictor_quality(const rap_predictor *p, int i)
{
    return p && i >= 0 && i < p->n ? &p->m[i].q : NULL;
}
