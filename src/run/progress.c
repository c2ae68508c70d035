/* progress.c -- progress bar or periodic lines (progress.h). */
#include "run/progress.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

const char *rap_fmt_count(int64_t n, char *buf)
{
    char t[32];
    int len = snprintf(t, sizeof t, "%lld", (long long)(n < 0 ? -n : n));
    int o = 0;
    if (n < 0)
        buf[o++] = '-';
    for (int i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = t[i];
    }
    buf[o] = 0;
    return buf;
}

void rap_progress_init(rap_progress *p, bool enabled, bool tty, double interval)
{
    memset(p, 0, sizeof *p);
    p->enabled = enabled;
    p->tty = tty;
    p->interval = interval > 0 ? interval : 5;
    p->t0 = p->last = rap_now();
}

static void fmt_time(double s, char *buf)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, 32, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, 32, "%ld:%02ld", t / 60, t % 60);
}

void rap_progress_update(rap_progress *p, int64_t samples, int64_t step, double loss,
                         double frac, bool force)
{
    if (!p->enabled)
        return;
    double now = rap_now();
    if (!force && now - p->last < (p->tty ? 0.1 : p->interval))
        return;
    p->last = now;
    double el = now - p->t0;
    double rate = el > 0 ? (double)samples / el : 0;
    char rows[32], rate_s[32], eta[32], line[384];
    rap_fmt_count(samples, rows);
    rap_fmt_count((int64_t)rate, rate_s);
    int n = 0;
    bool known = frac >= 0 && frac <= 1;
    if (p->tty && known) {
        int w = 24, fill = (int)(frac * w);
        char bar[32];
        for (int i = 0; i < w; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        n += snprintf(line + n, sizeof line - (size_t)n, "[%s] %3d%%  ", bar, (int)(frac * 100));
    }
    n += snprintf(line + n, sizeof line - (size_t)n, "step %lld  %s rows  %s samples/s  loss %.4f",
                  (long long)step, rows, rate_s, loss);
    if (p->extra[0])
        n += snprintf(line + n, sizeof line - (size_t)n, "  %s", p->extra);
    if (known && frac > 0.001 && frac < 1) {
        fmt_time(el * (1 - frac) / frac, eta);
        snprintf(line + n, sizeof line - (size_t)n, "  ETA %s", eta);
    }
    if (p->tty) {
        fprintf(stderr, "\r%s\033[K", line);
        p->drawn = true;
    } else {
        fprintf(stderr, "rap train: %s\n", line);
    }
    fflush(stderr);
}

void rap_progress_set_extra(rap_progress *p, const char *text)
{
    snprintf(p->extra, sizeof p->extra, "%s", text ? text : "");
}

void rap_progress_clear(rap_progress *p)
{
    if (p->enabled && p->tty && p->drawn) {
        fputc('\n', stderr);
        fflush(stderr);
    }
    p->drawn = false;
}
