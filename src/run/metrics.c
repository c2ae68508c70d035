/* metrics.c -- evaluation metrics and the metrics file (metrics.h). */
#include "run/metrics.h"

#include "core/core.h"
#include "core/out.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

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
    rap_out_opts oo = {.stream = true};
    rap_status st = rap_out_open(path, &oo, &m->o);
    if (st != RAP_OK)
        return rap_fail_context(st, "--metrics");
    return RAP_OK;
}

/* Writes the n bytes at p with write(2), short writes continued: a line is
 * one call, so a process that dies leaves whole lines. */
static rap_status write_all(rap_metrics_file *m, const char *p, size_t n)
{
    int fd = rap_out_fd(m->o);
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return rap_fail(RAP_ERR_IO, "%s: write failed (%s)", m->path,
                            k < 0 ? strerror(errno) : "nothing written");
        p += k;
        n -= (size_t)k;
    }
    return RAP_OK;
}

rap_status rap_metrics_line(rap_metrics_file *m, const char *fmt, ...)
{
    if (!m->o)
        return RAP_OK;
    char small[8192], *line = small;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(small + 1, sizeof small - 3, fmt, ap);
    va_end(ap);
    if (len < 0)
        return rap_fail(RAP_ERR_INTERNAL, "%s: bad metrics format", m->path);
    if ((size_t)len > sizeof small - 4) { /* a long final line: the loop is over */
        if (!(line = rap_malloc((size_t)len + 4, "metrics line")))
            return RAP_ERR_NOMEM;
        va_start(ap, fmt);
        vsnprintf(line + 1, (size_t)len + 1, fmt, ap);
        va_end(ap);
    }
    line[0] = '{';
    memcpy(line + 1 + len, "}\n", 2);
    rap_status st = write_all(m, line, (size_t)len + 3);
    if (line != small)
        rap_free(line);
    return st;
}

rap_status rap_metrics_close(rap_metrics_file *m)
{
    rap_status st = m->o ? rap_out_commit(m->o) : RAP_OK;
    m->o = NULL;
    return st;
}
