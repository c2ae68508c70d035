/* test_util.c -- helpers several test files share: the rap binary beside
 * the test program, scratch paths, checkpoint comparison, GEMM tuning off. */
#include "test.h"

#include "run/checkpoint.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

const char *rap_test_bin(void)
{
    static char rap[1024];
    if (!rap[0]) {
        char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        snprintf(rap, sizeof rap, "%s/rap", exe);
    }
    return rap;
}

int rap_test_run_rap(const char *args, char *out, size_t n)
{
    char log[512], cmd[4096];
    snprintf(log, sizeof log, "%s/rap_cli.log", rap_test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1 </dev/null", rap_test_bin(), args, log);
    int st = system(cmd);
    FILE *f = fopen(log, "rb");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void rap_test_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
}

bool rap_test_same_checkpoints(const char *a, const char *b, int *n_tensors)
{
    rap_ckpt *x = NULL, *y = NULL;
    bool same = rap_ckpt_open(a, &x) == RAP_OK && rap_ckpt_open(b, &y) == RAP_OK && x->n == y->n &&
                x->n > 0;
    for (int i = 0; same && i < x->n; i++) {
        int j = rap_ckpt_find(y, x->t[i].name);
        same = j >= 0 && y->t[j].end - y->t[j].begin == x->t[i].end - x->t[i].begin;
        if (!same)
            break;
        size_t bytes = (size_t)(x->t[i].end - x->t[i].begin);
        float *p = malloc(bytes + 4), *q = malloc(bytes + 4);
        same = p && q && rap_ckpt_read(x, i, p) == RAP_OK && rap_ckpt_read(y, j, q) == RAP_OK &&
               !memcmp(p, q, bytes);
        free(p);
        free(q);
    }
    if (n_tensors)
        *n_tensors = x ? x->n : 0;
    rap_ckpt_close(x);
    rap_ckpt_close(y);
    return same;
}

void rap_test_tune_off(rap_test_env *e)
{
    const char *v = getenv("RAP_GPU_TUNE");
    e->had = v != NULL;
    snprintf(e->val, sizeof e->val, "%s", v ? v : "");
    setenv("RAP_GPU_TUNE", "0", 1);
}

void rap_test_tune_restore(const rap_test_env *e)
{
    if (e->had)
        setenv("RAP_GPU_TUNE", e->val, 1);
    else
        unsetenv("RAP_GPU_TUNE");
}
