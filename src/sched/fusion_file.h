/*
 * fusion_file.h -- a fusion as the planner chose it, in a file beside the
 * schedule made for it, and the check that a fusion fits its plan.
 *
 * The runtime must run exactly the fusion a schedule was made for (the
 * schedule holds only its hash, sched/hash.h), so `rap plan` writes it
 * and `rap train` / `rap bench` read it (docs/PLANNER.md, "Fusion file").
 */
#ifndef RAP_SCHED_FUSION_FILE_H
#define RAP_SCHED_FUSION_FILE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks f against p: every live op in exactly one kernel, kernels of one
 * op and variant (a row kernel: row-local ops, its groups well formed),
 * every kernel after the kernels of its inputs (or, in a row kernel, later
 * in the same group).
 * RAP_ERR_PLAN naming the first violation. */
rap_status rap_fusion_check(const rap_plan *p, const rap_fusion *f);

/* Fusion files. Format (docs/PLANNER.md, "Fusion file"):
 *   rap-fusion 2            (version 1, without row kernels, still loads)
 *   plan NAME HASH          (rap_plan_hash, 16 hex digits)
 *   kernel op=OP variant=V level=L ops=I,J,...   (live op ids, plan order)
 *   kernel op=rows variant=0 level=L ops=I,J;K,...  (a row kernel: groups by ';')
 * Loading checks the plan hash, every kernel against the plan and the
 * whole with rap_fusion_check. */
rap_status rap_fusion_save(const rap_plan *p, const rap_fusion *f, const char *path);
/* Reads path into *f (zeroed first; freed again on failure). RAP_ERR_IO
 * when it cannot be opened, RAP_ERR_DATA naming the file and line of a
 * malformed one, RAP_ERR_PLAN when it was made for another plan or does
 * not fit this one. */
rap_status rap_fusion_load(const rap_plan *p, const char *path, rap_fusion *f);

#ifdef __cplusplus
}
#endif
#endif /* RAP_SCHED_FUSION_FILE_H */
