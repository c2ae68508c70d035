/* fuzz_xgb.c -- XGBoost model files (src/plan/xgb_check.c): the bytes as
 * a predictor's model; one that rap_xgb_check accepts is given to XGBoost
 * (from memory, as rap_predictor_load does) and predicts rows, NaN
 * features included. A crash or hang here is a model the check should
 * have refused. */
#include "fuzz.h"

#include "plan/features.h"
#include "plan/xgb_check.h"

#include <math.h>
#include <xgboost/c_api.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    const char *name = "xgb_fuzz.json";
    if (!fuzz_refused(rap_xgb_check((const char *)data, size, RAP_KFEAT_N, name), name, NULL))
        return 0;
    BoosterHandle b;
    if (XGBoosterCreate(NULL, 0, &b))
        fuzz_fail("XGBoosterCreate: %s", XGBGetLastError());
    if (XGBoosterLoadModelFromBuffer(b, data, (bst_ulong)size) == 0) {
        float x[3 * RAP_KFEAT_N];
        for (int i = 0; i < 3 * RAP_KFEAT_N; i++)
            x[i] = i < RAP_KFEAT_N ? (float)(i * 1000) : i < 2 * RAP_KFEAT_N ? NAN : -1e30f;
        DMatrixHandle d;
        if (XGDMatrixCreateFromMat(x, 3, RAP_KFEAT_N, NAN, &d) == 0) {
            bst_ulong len = 0;
            const float *out = NULL;
            if (XGBoosterPredict(b, d, 0, 0, 0, &len, &out) == 0 && len != 3)
                fuzz_fail("xgb: %llu predictions for 3 rows", (unsigned long long)len);
            XGDMatrixFree(d);
        }
    }
    XGBoosterFree(b);
    return 0;
}
