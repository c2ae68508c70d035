/* test_h200_files.c -- the committed H200 planning files (plans/h200/,
 * docs/PROFILE.md) stay usable: the predictor loads and is for the H200,
 * every capacity file loads and matches the model shape its plan trains,
 * and every schedule validates against its plan and its fusion file. */
#include "test.h"

#include "plan/capacity.h"
#include "plan/predictor.h"
#include "run/input.h"
#include "sched/fusion_file.h"
#include "sched/schedule.h"

#include <unistd.h>

static const char *h200_dir(void)
{
    static const char *const where[] = {"plans/h200", "../plans/h200", "../../plans/h200"};
    for (int i = 0; i < 3; i++)
        if (access(where[i], R_OK) == 0)
            return where[i];
    return NULL;
}

RAP_TEST(h200_files_load_and_match)
{
    const char *dir = h200_dir();
    if (!dir)
        SKIP("plans/h200 not found from the working directory");
    char path[1024];
    snprintf(path, sizeof path, "%s/predictor", dir);
    rap_predictor *pred = NULL;
    REQUIRE_OK(rap_predictor_load(path, &pred));
    CHECK_OK(rap_predictor_check(pred, "NVIDIA H200"));
    CHECK(rap_predictor_check(pred, "NVIDIA A100-SXM4-80GB") != RAP_OK); /* another GPU */
    rap_predictor_free(pred);

    static const char *const plans[] = {"plan0", "plan1", "plan2", "plan3"};
    static const int batches[] = {4096, 8192};
    static const char *const variants[] = {"", "_nofusion", "_nosplit"};
    int checked = 0;
    for (int p = 0; p < 4; p++) {
        snprintf(path, sizeof path, "%s/../%s.plan", dir, plans[p]);
        rap_plan *plan = NULL;
        REQUIRE_OK(rap_plan_load(path, rap_schema_criteo(), &plan));
        int n_dense = 0, n_tables = 0;
        static int64_t rows[RAP_MAX_TABLES];
        REQUIRE_OK(rap_input_shape(plan, &n_dense, &n_tables, rows));
        for (int b = 0; b < 2; b++) {
            /* the capacity file is for the model this plan trains at this batch */
            snprintf(path, sizeof path, "%s/capacity/%s_%d.capacity", dir, plans[p], batches[b]);
            rap_capacity cap;
            REQUIRE_OK(rap_capacity_load(path, &cap));
            rap_model_shape sh = cap.shape;
            CHECK(sh.tables == n_tables);
            CHECK(sh.batch == batches[b]);
            CHECK(sh.emb_dim == (p == 1 ? 64 : 128)); /* plan 1 at dim 64: docs/PROFILE.md */
            CHECK_OK(rap_capacity_check(&cap, "NVIDIA H200", &sh));
            sh.batch = batches[1 - b];
            CHECK(rap_capacity_check(&cap, "NVIDIA H200", &sh) != RAP_OK); /* another batch */
            for (int v = 0; v < 3; v++) {
                char sched[1024], fus[1100];
                snprintf(sched, sizeof sched, "%s/%s_%d%s.schedule", dir, plans[p], batches[b],
                         variants[v]);
                snprintf(fus, sizeof fus, "%s.fusion", sched);
                rap_fusion f = {0};
                rap_schedule *s = NULL;
                CHECK_OK(rap_fusion_load(plan, fus, &f));
                CHECK_OK(rap_schedule_load(sched, &s));
                if (s && f.n > 0) {
                    CHECK_OK(rap_schedule_validate(s, plan, &f, batches[b]));
                    checked++;
                }
                rap_schedule_free(s);
                rap_fusion_free(&f);
            }
        }
        rap_plan_free(plan);
    }
    CHECK(checked == 24);
}
