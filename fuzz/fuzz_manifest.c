/* fuzz_manifest.c -- per-rank manifests (src/sched/rank_schedule.c, what
 * `rap plan --gpus 2 --out s` writes as s.rank<r>): the bytes as both
 * ranks' manifests of plans/plan0.plan on 2 ranks (global batch 1024),
 * beside the part files the planner wrote with the seeds
 * (fuzz/fixtures/manifest/); each is loaded and, when it loads, merged
 * into a fusion and a schedule of the plan, which must validate. */
#include "fixture_plan.h"

#include "sched/rank_schedule.h"

#include <stdio.h>
#include <string.h>

static const char *const g_parts[] = {"s.rank0.0", "s.rank0.0.fusion", "s.rank0.1",
                                      "s.rank0.1.fusion", "s.rank1.0", "s.rank1.0.fusion",
                                      "s.rank1.1", "s.rank1.1.fusion"};

static void fixtures(void)
{
    static bool done;
    for (size_t i = 0; !done && i < sizeof g_parts / sizeof g_parts[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "fuzz/fixtures/manifest/%s", g_parts[i]);
        FILE *f = fopen(fuzz_repo_file(rel), "rb");
        static uint8_t buf[1 << 16];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        fuzz_write(g_parts[i], buf, n);
    }
    done = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rap_plan *p = fixture_plan();
    fixtures();
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/s", fuzz_dir());
    for (int rank = 0; rank < 2; rank++) {
        char name[32];
        snprintf(name, sizeof name, "s.rank%d", rank);
        fuzz_write(name, data, size);
        rap_rank_manifest *m = NULL;
        if (!fuzz_refused(rap_rank_manifest_load(prefix, p, rank, 2, 1024, &m), name, NULL))
            continue;
        rap_fusion f;
        memset(&f, 0, sizeof f);
        rap_schedule *s = NULL;
        rap_status st = rap_rank_schedule_make(m, p, p, &f, &s);
        if (fuzz_refused(st, name, "s.rank")) {
            if (rap_schedule_validate(s, p, &f, 1024) != RAP_OK)
                fuzz_fail("manifest: the merged schedule does not validate: %s",
                          rap_last_error());
            rap_schedule_free(s);
            rap_fusion_free(&f);
        }
        rap_rank_manifest_free(m);
    }
    return 0;
}
