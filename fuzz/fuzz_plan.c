/* fuzz_plan.c -- plan files (src/prep/plan_parse.c, the plan language):
 * the bytes as a plan's text; a plan that parses is hashed and fused by
 * levels, and the fusion must pass its own check. */
#include "fuzz.h"

#include "sched/fusion_file.h"
#include "sched/hash.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    char *text = fuzz_text(data, size);
    rap_plan *p = NULL;
    rap_status st = rap_plan_parse(text, "fuzz.plan", rap_schema_criteo(), &p);
    if (fuzz_refused(st, "fuzz.plan", NULL)) {
        (void)rap_plan_hash(p);
        rap_fusion f;
        if (rap_fuse_levels(p, &f) == RAP_OK) {
            if (rap_fusion_check(p, &f) != RAP_OK)
                fuzz_fail("plan: the levels fusion of a parsed plan fails its check: %s",
                          rap_last_error());
            rap_fusion_free(&f);
        }
        rap_plan_free(p);
    }
    free(text);
    return 0;
}
