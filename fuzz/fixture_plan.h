/* fixture_plan.h -- the plan (and its shipped fusion) that the schedule,
 * fusion and rank-manifest entry points check their inputs against:
 * plans/plan0.plan and plans/h200/plan0_4096.schedule.fusion, loaded once. */
#ifndef RAP_FUZZ_FIXTURE_PLAN_H
#define RAP_FUZZ_FIXTURE_PLAN_H

#include "fuzz.h"

#include "sched/fusion_file.h"

static inline const rap_plan *fixture_plan(void)
{
    static rap_plan *p;
    if (!p && rap_plan_load(fuzz_repo_file("plans/plan0.plan"), rap_schema_criteo(), &p) != RAP_OK)
        fuzz_fail("cannot load plans/plan0.plan: %s", rap_last_error());
    return p;
}

static inline const rap_fusion *fixture_fusion(void)
{
    static rap_fusion f;
    static bool done;
    if (!done && rap_fusion_load(fixture_plan(), fuzz_repo_file("plans/h200/plan0_4096.schedule.fusion"),
                                 &f) != RAP_OK)
        fuzz_fail("cannot load plans/h200/plan0_4096.schedule.fusion: %s", rap_last_error());
    done = true;
    return &f;
}

#endif /* RAP_FUZZ_FIXTURE_PLAN_H */
