/* fuzz_capacity.c -- capacity files (src/plan/capacity.c): the bytes as a
 * capacity file; one that loads is checked against a shape, written and
 * loaded again, which must give the same capacity. */
#include "fuzz.h"

#include "plan/capacity.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = fuzz_write("input.capacity", data, size);
    char path[512], again[512];
    snprintf(path, sizeof path, "%s", p);
    snprintf(again, sizeof again, "%s/again.capacity", fuzz_dir());
    rap_capacity c, d;
    if (!fuzz_refused(rap_capacity_load(path, &c), path, NULL))
        return 0;
    rap_model_shape want = c.shape;
    want.tables++;
    (void)rap_capacity_check(&c, "NVIDIA H200", &c.shape);
    (void)rap_capacity_check(&c, "", &want);
    if (rap_capacity_save(&c, again) != RAP_OK || rap_capacity_load(again, &d) != RAP_OK)
        fuzz_fail("capacity: a loaded capacity does not save and load again: %s",
                  rap_last_error());
    if (memcmp(&c.shape, &d.shape, sizeof c.shape) || strcmp(c.gpu, d.gpu) ||
        c.tolerance != d.tolerance ||
        memcmp(c.capacity_ms, d.capacity_ms, sizeof c.capacity_ms) ||
        memcmp(c.standalone_ms, d.standalone_ms, sizeof c.standalone_ms))
        fuzz_fail("capacity: saved and loaded again, it differs");
    return 0;
}
