/* test_sched.c -- src/sched, the planner-runtime contract: the hashes that
 * bind files to a plan keep their values (shipped schedules and fusion
 * files, checkpoints already written), and the include layers that keep
 * the contract below both the planner and the runtime hold
 * (scripts/check_layers.sh, with its self-test). */
#include "test.h"

#include "sched/fusion_file.h"
#include "sched/hash.h"

#include <stdlib.h>
#include <unistd.h>

/* Values written by the hashes before they moved into sched/hash.c (plans
 * 0 and 3: the plan hashes of the schedules in plans/h200; the column hashes as
 * checkpoints of these plans record them). */
RAP_TEST(sched_hash_values)
{
    static const struct {
        const char *plan;
        uint64_t plan_hash, columns_hash;
        const char *cols_head;
    } want[] = {
        {"plan0.plan", 0x098878ff954c82f3ULL, 0xd6cfabf49a822059ULL, "int_0:b5091fa6,int_1:16a40d20,"},
        {"plan3.plan", 0x68af9c2b88164321ULL, 0x84f501a4a30f32c5ULL, "int_0:cef02537,int_1:d8817334,"},
        {"default.plan", 0x171a94f2d8f9016bULL, 0xa8a48747b8b15deaULL, "int_0:16b81480,int_1:c39885f4,"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        rap_plan *p = NULL;
        REQUIRE_SHIPPED_PLAN(want[i].plan, &p);
        CHECK(rap_plan_hash(p) == want[i].plan_hash);
        char *cols = NULL;
        CHECK(rap_plan_columns_hash(p, &cols) == want[i].columns_hash);
        CHECK(rap_plan_columns_hash(p, NULL) == want[i].columns_hash);
        REQUIRE(cols != NULL);
        CHECK(strncmp(cols, want[i].cols_head, strlen(want[i].cols_head)) == 0);
        free(cols);
        rap_plan_free(p);
    }
    /* the fusion hash as plans/h200/plan0_4096.schedule records it */
    char path[256];
    if (!rap_test_plan_path("h200/plan0_4096.schedule.fusion", path, sizeof path))
        SKIP("plans/h200 not found from the working directory");
    rap_plan *p = NULL;
    REQUIRE_SHIPPED_PLAN("plan0.plan", &p);
    rap_fusion f;
    REQUIRE_OK(rap_fusion_load(p, path, &f));
    CHECK(f.n == 1);
    CHECK(rap_fusion_hash(p, &f) == 0x410f17824df372a1ULL);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(sched_layers)
{
    static const char *const where[] = {".", "..", "../.."};
    const char *root = NULL;
    char script[256];
    for (int i = 0; i < 3 && !root; i++) {
        snprintf(script, sizeof script, "%s/scripts/check_layers.sh", where[i]);
        if (access(script, R_OK) == 0)
            root = where[i];
    }
    if (!root)
        SKIP("scripts/check_layers.sh not found from the working directory");
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "sh %s --self-test", script);
    int rc = rap_test_sh(cmd, out, sizeof out);
    if (rc != 0)
        rap_test_fail(t, __FILE__, __LINE__, "%s: exit %d: %s", cmd, rc, out);
    snprintf(cmd, sizeof cmd, "sh %s %s", script, root);
    rc = rap_test_sh(cmd, out, sizeof out);
    if (rc != 0)
        rap_test_fail(t, __FILE__, __LINE__, "%s: exit %d: %s", cmd, rc, out);
}
