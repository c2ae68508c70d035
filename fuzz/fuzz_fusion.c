/* fuzz_fusion.c -- fusion files (src/sched/fusion_file.c): the bytes as a
 * fusion file of plans/plan0.plan; one that loads must pass
 * rap_fusion_check, and the built-in schedules of it must validate. */
#include "fixture_plan.h"

#include "sched/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rap_plan *p = fixture_plan();
    const char *path = fuzz_write("input.fusion", data, size);
    rap_fusion f;
    if (!fuzz_refused(rap_fusion_load(p, path, &f), path, NULL))
        return 0;
    if (rap_fusion_check(p, &f) != RAP_OK)
        fuzz_fail("fusion: a loaded fusion fails its check: %s", rap_last_error());
    rap_schedule *s = NULL;
    if (rap_schedule_builtin_embedding(p, &f, &s) == RAP_OK &&
        rap_schedule_validate(s, p, &f, 4096) != RAP_OK)
        fuzz_fail("fusion: the built-in schedule of a loaded fusion does not validate: %s",
                  rap_last_error());
    rap_schedule_free(s);
    rap_fusion_free(&f);
    return 0;
}
