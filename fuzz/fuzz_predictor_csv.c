/* fuzz_predictor_csv.c -- the predictor's measurements CSV
 * (src/plan/predictor_csv.c, what `rap predictor train --in` reads): the
 * bytes as the CSV; every row read must hold values in range. */
#include "fuzz.h"

#include "core/core.h"
#include "plan/predictor_internal.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("kernels.csv", data, size);
    rap_pred_row *rows = NULL;
    int n = 0;
    char gpu[RAP_GPU_NAME];
    if (!fuzz_refused(rap_pred_csv_read(path, &rows, &n, gpu), path, NULL))
        return 0;
    for (int i = 0; i < n; i++)
        if (!(rows[i].ms > 0) || !isfinite(rows[i].ms) || rows[i].f.variant < 0 ||
            rows[i].f.variant > RAP_PRED_MAX_VARIANT || !(rows[i].f.descs >= 1) || !gpu[0])
            fuzz_fail("predictor csv: row %d read out of range", i);
    rap_free(rows);
    return 0;
}
