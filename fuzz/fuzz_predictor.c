/* fuzz_predictor.c -- predictor bundles (src/plan/predictor.c,
 * predictor_manifest.c): the bytes as a bundle directory packed as
 * "==> NAME SIZE\n" + SIZE bytes per file (fuzz/pack.sh writes them),
 * unpacked into a fresh directory and loaded; a bundle that loads
 * predicts a few kernels. The MANIFEST's checksums stop a changed file
 * before XGBoost sees it (the models themselves: fuzz_xgb.c). */
#include "fuzz.h"

#include "plan/predictor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILES 64

static bool plain(const char *s)
{
    if (!s[0] || s[0] == '.')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char names[MAX_FILES][64];
    static int n_names;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bundle", fuzz_dir());
    mkdir(dir, 0700);
    for (int i = 0; i < n_names; i++) { /* the previous input's files */
        char f[600];
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        remove(f);
    }
    n_names = 0;
    size_t at = 0;
    while (at < size && n_names < MAX_FILES) {
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        if (!nl || nl - (data + at) > 100)
            break;
        char head[128], name[64];
        unsigned long len;
        size_t hl = (size_t)(nl - (data + at));
        memcpy(head, data + at, hl);
        head[hl] = 0;
        if (sscanf(head, "==> %63s %lu", name, &len) != 2 || !plain(name))
            break;
        at += hl + 1;
        if (len > size - at)
            len = size - at;
        char f[600];
        snprintf(f, sizeof f, "%s/%s", dir, name);
        FILE *fp = fopen(f, "wb");
        if (!fp || fwrite(data + at, 1, len, fp) != len || fclose(fp) != 0)
            fuzz_fail("cannot write %s", f);
        snprintf(names[n_names++], sizeof names[0], "%s", name);
        at += len;
    }
    rap_predictor *p = NULL;
    if (!fuzz_refused(rap_predictor_load(dir, &p), dir, NULL))
        return 0;
    static const rap_op_type ops[] = {RAP_OP_FILL_NULL, RAP_OP_SIGRID_HASH, RAP_OP_INPUT};
    for (int i = 0; i < 3; i++)
        for (int v = 0; v < 5; v++) {
            rap_kfeat f = {.op = ops[i], .variant = v, .descs = 1 + v, .rows = 4096,
                           .avg_width = 1, .total_ids = 4096, .bytes = 65536,
                           .batch_rows = 4096};
            bool model;
            double ms = rap_predict_ms(p, &f, &model);
            if (!(ms >= 0))
                fuzz_fail("predictor: %g ms predicted", ms);
        }
    (void)rap_predictor_check(p, "NVIDIA H200");
    rap_predictor_free(p);
    return 0;
}
