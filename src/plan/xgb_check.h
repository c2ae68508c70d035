/*
 * xgb_check.h -- an XGBoost model file checked before XGBoost sees it.
 *
 * XGBoost trusts its model files: a child index past a tree's nodes makes
 * its prediction loop spin forever, a split on a feature past the
 * matrix's columns or a tree count that is not the number of trees makes
 * it read outside its arrays (measured with XGBoost 1.7). So a predictor
 * bundle's model is read by rap's own JSON reader (core/json.h) first and
 * refused unless it is exactly what rap_predictor_train writes: the JSON
 * model of XGBoost 1.x for a gbtree booster of objective reg:squarederror
 * on n_features numeric features, every tree well formed:
 *   - every per-node array as long as tree_param.num_nodes (1..2^20);
 *   - node i a leaf (both children -1) or split (both children in
 *     (i, num_nodes), distinct, their parent i), every node but the root
 *     the child of exactly one node, the root's parent 2147483647: a tree,
 *     no cycle, no orphan;
 *   - split indices in [0, n_features), default_left 0 or 1, split types
 *     0 (numeric), no categories, finite numbers, num_deleted 0;
 *   - num_trees == the trees listed == tree_info's entries (all 0: one
 *     output group), id of tree k == k.
 * Unknown keys are refused too: a key rap does not know could change what
 * XGBoost does with the rest.
 */
#ifndef RAP_PLAN_XGB_CHECK_H
#define RAP_PLAN_XGB_CHECK_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most nodes of one tree and trees of one model rap accepts. */
#define RAP_XGB_MAX_NODES (1 << 20)
#define RAP_XGB_MAX_TREES 100000

/* Checks text (n bytes, not NUL-terminated) as above. RAP_ERR_DATA with
 * "FILE: corrupt XGBoost model at byte N of the JSON: WHY" (file names it),
 * or "FILE: XGBoost model: tree K node I: WHY". */
rap_status rap_xgb_check(const char *text, size_t n, int n_features, const char *file);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_XGB_CHECK_H */
