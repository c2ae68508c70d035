/*
 * predictor.c -- XGBoost latency models per kernel type (predictor.h).
 *
 * Each model learns log(measured ms / analytic ms): the trees only correct
 * the analytic estimate, so a slice outside the measured range still gets
 * a sensible answer (a tree predicts a constant beyond its last split).
 */
#include "plan/predictor.h"

#include "core/out.h"

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

/* An op type by name; "rows" (row kernels) is RAP_OP_INPUT (features.h). */
static int op_parse(const char *name)
{
    if (!strcmp(name, "rows"))
        return RAP_OP_INPUT;
    for (int t = 1; t < RAP_OP_COUNT; t++)
        if (!strcmp(rap_op_name((rap_op_type)t), name))
            return t;
    return -1;
}

/* ------------------------------------------------------------- CSV */

typedef struct {
    rap_kfeat f;
    double ms;
    int line;
} csv_row;

static const char *const g_cols[] = {"gpu", "op", "variant", "descs", "rows", "avg_width",
                                     "total_ids", "bytes", "batch_rows", "ms"};
#define N_COLS 10

static void trim(char *s)
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

/* Splits line at commas in place; returns the number of fields (<= max). */
static int split_csv(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = 0;
        p = c + 1;
    }
    for (int i = 0; i < n; i++)
        trim(f[i]);
    return n;
}

/* Reads the measurement CSV: rows (owned, *n), the GPU name. */
static rap_status read_csv(const char *path, csv_row **rows_out, int *n_out, char *gpu)
{
    *rows_out = NULL;
    *n_out = 0;
    gpu[0] = 0;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return rap_fail(RAP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, idx[N_COLS], cap = 0, n = 0;
    csv_row *rows = NULL;
    bool header = false;
    rap_status st = RAP_OK;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        trim(line);
        if (!line[0] || line[0] == '#')
            continue;
        char *f[64];
        int nf = split_csv(line, f, 64);
        if (!header) {
            for (int c = 0; c < N_COLS; c++) {
                idx[c] = -1;
                for (int i = 0; i < nf; i++)
                    if (!strcmp(f[i], g_cols[c]))
                        idx[c] = i;
                if (idx[c] < 0) {
                    st = rap_fail(RAP_ERR_DATA, "%s:%d: expected a header naming column \"%s\" "
                                  "(gpu,op,variant,descs,rows,avg_width,total_ids,bytes,batch_rows,ms)",
                                  path, lineno, g_cols[c]);
                    goto out;
                }
            }
            header = true;
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            csv_row *r = rap_realloc(rows, sizeof *r * (size_t)cap, "predictor csv");
            if (!r) {
                st = RAP_ERR_NOMEM;
                goto out;
            }
            rows = r;
        }
        csv_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        double v[N_COLS];
        for (int c = 0; c < N_COLS; c++) {
            if (idx[c] >= nf) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected %d fields, got %d", path, lineno,
                              idx[c] + 1, nf);
                goto out;
            }
            if (c <= 1)
                continue;
            char *end;
            v[c] = strtod(f[idx[c]], &end);
            if (end == f[idx[c]] || *end || !isfinite(v[c])) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: column %s: expected a number, got \"%s\"",
                              path, lineno, g_cols[c], f[idx[c]]);
                goto out;
            }
        }
        const char *g = f[idx[0]];
        if (!gpu[0]) {
            snprintf(gpu, RAP_GPU_NAME, "%s", g);
        } else if (strcmp(gpu, g)) {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: GPU \"%s\" differs from the file's first GPU \"%s\" "
                          "(one predictor per GPU: split the file)", path, lineno, g, gpu);
            goto out;
        }
        int op = op_parse(f[idx[1]]);
        if (op < 0) {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: unknown op \"%s\"", path, lineno, f[idx[1]]);
            goto out;
        }
        if (v[9] <= 0 || v[3] < 1 || v[4] < 1) {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: expected ms > 0, descs >= 1, rows >= 1", path, lineno);
            goto out;
        }
        r->f.op = (rap_op_type)op;
        r->f.variant = (int)v[2];
        r->f.computed = r->f.variant >= 9;
        r->f.descs = v[3];
        r->f.rows = v[4];
        r->f.avg_width = v[5];
        r->f.total_ids = v[6];
        r->f.bytes = v[7];
        r->f.batch_rows = v[8];
        r->ms = v[9];
        r->line = lineno;
        n++;
    }
    if (!header)
        st = rap_fail(RAP_ERR_DATA, "%s: empty (expected a header line)", path);
    else if (n == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: no measurements", path);
out:
    fclose(fp);
    if (st != RAP_OK) {
        rap_free(rows);
        return st;
    }
    *rows_out = rows;
    *n_out = n;
    return RAP_OK;
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
static rap_status train_type(const rap_analytic *an, const csv_row *rows, int n,
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

static void model_file(const char *dir, const char *type, char *buf, size_t n)
{
    snprintf(buf, n, "%s/xgb_%s.json", dir, type);
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
    csv_row *rows;
    int n;
    char gpu[RAP_GPU_NAME];
    RAP_TRY(read_csv(csv_path, &rows, &n, gpu));
    rap_predictor *p = rap_calloc(sizeof *p, "predictor");
    csv_row *sub = rap_malloc(sizeof *sub * (size_t)n, "predictor");
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
out:
    rap_predictor_free(p);
    rap_free(rows);
    rap_free(sub);
    rap_free(is_test);
    rap_free(done);
    return st;
}

rap_status rap_predictor_load(const char *dir, rap_predictor **out)
{
    *out = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/predictor.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return rap_fail(RAP_ERR_IO, "predictor %s: cannot open %s: %s", dir, path, strerror(errno));
    rap_predictor *p = rap_calloc(sizeof *p, "predictor");
    if (!p) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    p->an = rap_analytic_defaults();
    char line[1024];
    int lineno = 0;
    bool magic = false, have_gpu = false;
    rap_status st = RAP_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        trim(line);
        if (!line[0] || line[0] == '#')
            continue;
        int ver;
        if (!magic) {
            if (sscanf(line, "rap-predictor %d", &ver) != 1) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-predictor %d\"", path, lineno,
                              RAP_PREDICTOR_VERSION);
                break;
            }
            if (ver != RAP_PREDICTOR_VERSION) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: version %d is not supported (expected %d)", path,
                              lineno, ver, RAP_PREDICTOR_VERSION);
                break;
            }
            magic = true;
        } else if (!strncmp(line, "gpu ", 4)) {
            snprintf(p->gpu, sizeof p->gpu, "%s", line + 4);
            trim(p->gpu);
            have_gpu = p->gpu[0] != 0;
        } else if (!strncmp(line, "analytic ", 9)) {
            if (sscanf(line, "analytic launch_ms=%lf gbytes_per_s=%lf", &p->an.launch_ms,
                       &p->an.gbytes_per_s) != 2 || !(p->an.gbytes_per_s > 0)) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"analytic launch_ms=X gbytes_per_s=Y\"",
                              path, lineno);
                break;
            }
        } else if (!strncmp(line, "model ", 6)) {
            if (p->n == MAX_TYPES) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: more than %d models", path, lineno, MAX_TYPES);
                break;
            }
            pred_model *m = &p->m[p->n];
            char op[64];
            if (sscanf(line, "model %63s op=%63s variant=%d train=%d test=%d within10=%lf median=%lf "
                             "p95=%lf p99=%lf",
                       m->q.type, op, &m->variant, &m->q.n_train, &m->q.n_test, &m->q.within10,
                       &m->q.median, &m->q.p95, &m->q.p99) < 3 ||
                op_parse(op) < 0) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"model TYPE op=OP variant=V ...\"",
                              path, lineno);
                break;
            }
            m->op = (rap_op_type)op_parse(op);
            char mf[1024];
            model_file(dir, m->q.type, mf, sizeof mf);
            if (XGBoosterCreate(NULL, 0, &m->booster)) {
                st = xgb_fail("XGBoosterCreate");
                break;
            }
            p->n++;
            if (XGBoosterLoadModel(m->booster, mf)) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: cannot load model %s: %s", path, lineno, mf,
                              XGBGetLastError());
                break;
            }
        } else {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: expected gpu, analytic or model, got \"%.40s\"",
                          path, lineno, line);
            break;
        }
    }
    fclose(f);
    if (st == RAP_OK && !magic)
        st = rap_fail(RAP_ERR_DATA, "%s: empty (expected \"rap-predictor %d\")", path,
                      RAP_PREDICTOR_VERSION);
    if (st == RAP_OK && !have_gpu)
        st = rap_fail(RAP_ERR_DATA, "%s: no \"gpu NAME\" line", path);
    if (st != RAP_OK) {
        rap_predictor_free(p);
        return st;
    }
    *out = p;
    return RAP_OK;
}

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
