/* metrics.c -- evaluation metrics and the metrics file (metrics.h). */
#include "run/metrics.h"

#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

rap_status rap_eval_add(rap_eval_acc *a, const float *logit, const float *label, int64_t n)
{
    if (a->n + n > a->cap) {
        int64_t cap = a->cap ? a->cap : 65536;
        while (cap < a->n + n)
            cap *= 2;
        float *s = rap_realloc(a->score, sizeof(float) * (size_t)cap, "evaluation scores");
        if (!s)
            return RAP_ERR_NOMEM;
        a->score = s;
        float *l = rap_realloc(a->label, sizeof(float) * (size_t)cap, "evaluation labels");
        if (!l)
            return RAP_ERR_NOMEM;
        a->label = l;
        a->cap = cap;
    }
    memcpy(a->score + a->n, logit, sizeof(float) * (size_t)n);
    memcpy(a->label + a->n, label, sizeof(float) * (size_t)n);
    a->n += n;
    return RAP_OK;
}

void rap_eval_reset(rap_eval_acc *a) { a->n = 0; }

void rap_eval_free(rap_eval_acc *a)
{
    rap_free(a->score);
    rap_free(a->label);
    memset(a, 0, sizeof *a);
}

double rap_bce_logit(double z, double y)
{
    /* max(z, 0) - z*y + log(1 + exp(-|z|)): stable for any z */
    return (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
}

rap_eval_result rap_eval_compute(const rap_eval_acc *a)
{
    rap_eval_result r = {a->n, NAN, NAN, NAN};
    if (a->n == 0)
        return r;
    double loss = 0;
    int64_t right = 0;
    for (int64_t i = 0; i < a->n; i++) {
        loss += rap_bce_logit(a->score[i], a->label[i]);
        right += (a->score[i] >= 0) == (a->label[i] != 0);
    }
    r.logloss = loss / (double)a->n;
    r.accuracy = (double)right / (double)a->n;
    r.auc = rap_auc(a->score, a->label, a->n);
    return r;
}

rap_status rap_metrics_open(rap_metrics_file *m, const char *path)
{
    memset(m, 0, sizeof *m);
    if (!path || !path[0])
        return RAP_OK;
    snprintf(m->path, sizeof m->path, "%s", path);
    m->f = fopen(path, "w");
    if (!m->f)
        return rap_fail(RAP_ERR_IO, "--metrics %s: cannot create (%s)", path, strerror(errno));
    return RAP_OK;
}

rap_status rap_metrics_line(rap_metrics_file *m, const char *fmt, ...)
{
    if (!m->f)
        return RAP_OK;
    va_list ap;
    va_start(ap, fmt);
    fputc('{', m->f);
    vfprintf(m->f, fmt, ap);
    va_end(ap);
    fputs("}\n", m->f);
    if (fflush(m->f) != 0 || ferror(m->f))
        return rap_fail(RAP_ERR_IO, "%s: write failed (%s)", m->path, strerror(errno));
    return RAP_OK;
}

rap_status rap_metrics_close(rap_metrics_file *m)
{
    rap_status st = RAP_OK;
    if (m->f && fclose(m->f) != 0)
        st = rap_fail(RAP_ERR_IO, "%s: close failed (%s)", m->path, strerror(errno));
    m->f = NULL;
    return st;
}
