/* fuzz_schedule.c -- schedules (src/sched/schedule.c): the bytes as a
 * schedule file, parsed, then validated against plans/plan0.plan and its
 * shipped fusion at two batch sizes (one way and in the hybrid order); a
 * schedule that parses is written and parsed again, which must give the
 * same slices. */
#include "fixture_plan.h"

#include "sched/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rap_plan *p = fixture_plan();
    const rap_fusion *f = fixture_fusion();
    const char *path = fuzz_write("input.schedule", data, size);
    rap_schedule *s = NULL;
    if (!fuzz_refused(rap_schedule_load(path, &s), path, NULL))
        return 0;
    static const int64_t rows[2] = {4096, 7};
    for (int k = 0; k < 2; k++) {
        fuzz_refused(rap_schedule_validate(s, p, f, rows[k]), path, NULL);
        fuzz_refused(rap_schedule_validate_hybrid(s, p, f, rows[k]), path, NULL);
    }
    char *text = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&text, &n);
    if (!mem)
        fuzz_fail("open_memstream failed");
    rap_status st = rap_schedule_write(s, mem);
    fclose(mem);
    rap_schedule *t = NULL;
    if (st != RAP_OK || rap_schedule_parse(text, path, &t) != RAP_OK)
        fuzz_fail("schedule: written again, it does not parse: %s", rap_last_error());
    if (t->n_slices != s->n_slices || t->plan_hash != s->plan_hash ||
        t->fusion_hash != s->fusion_hash || t->n_kernels != s->n_kernels ||
        memcmp(t->win_first, s->win_first, sizeof s->win_first))
        fuzz_fail("schedule: written and parsed again, it differs");
    for (int i = 0; i < s->n_slices; i++) {
        const rap_slice *a = &s->slices[i], *b = &t->slices[i];
        if (a->kernel != b->kernel || a->d0 != b->d0 || a->d1 != b->d1 || a->r0 != b->r0 ||
            a->r1 != b->r1 || a->share != b->share || a->shares != b->shares)
            fuzz_fail("schedule: slice %d differs after writing and parsing again", i);
    }
    rap_schedule_free(t);
    rap_schedule_free(s);
    free(text);
    return 0;
}
