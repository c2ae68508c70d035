/*
 * predictor_internal.h -- what the files of the latency predictor share
 * (predictor.h): predictor.c (models, training, loading), predictor_csv.c
 * (the measurements CSV) and predictor_manifest.c (the bundle's MANIFEST).
 * Not for other modules (the fuzzing harness reads the CSV through it).
 */
#ifndef RAP_PLAN_PREDICTOR_INTERNAL_H
#define RAP_PLAN_PREDICTOR_INTERNAL_H

#include "plan/predictor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest kernel variant (rap_node_variant: in_kind * 3 + kind, + 9
 * when offsets are computed). */
#define RAP_PRED_MAX_VARIANT 17

/* Largest predictor.txt and MANIFEST, and largest model file, rap reads. */
#define RAP_PRED_MAX_TEXT ((size_t)1 << 20)
#define RAP_PRED_MAX_MODEL ((size_t)256 << 20)

/* One measured kernel of the CSV. */
typedef struct {
    rap_kfeat f;
    double ms;
    int line;
} rap_pred_row;

/* predictor.c, for the readers of predictor.txt and the CSV: */
/* An op type by name; "rows" (row kernels) is RAP_OP_INPUT (features.h);
 * -1 for an unknown name. */
int rap_pred_op_parse(const char *name);
/* Strips s's leading blanks and tabs and its trailing blanks, tabs and
 * line ends, in place. */
void rap_pred_trim(char *s);

/* Reads the measurements CSV at path (docs/PLANNER.md "Measurements CSV"):
 * *rows (rap_free them; *n of them, at least one) and the GPU name (gpu,
 * RAP_GPU_NAME bytes). Every value is range-checked before it is
 * converted: RAP_ERR_DATA "PATH:LINE: what was wrong", RAP_ERR_IO when
 * it cannot be read. */
rap_status rap_pred_csv_read(const char *path, rap_pred_row **rows, int *n, char *gpu);

/* The model file of kernel type `type` ("sigrid_hash.4") in a bundle:
 * "xgb_TYPE.json" (name only, no directory). */
void rap_pred_model_name(const char *type, char *buf, size_t n);

/* A bundle's MANIFEST (docs/PLANNER.md "Predictor bundle"): the size and
 * rap_checksum64 of each of its files. */
typedef struct {
    char name[96];
    uint64_t bytes;
    uint64_t sum;
} rap_pred_file;

typedef struct {
    char path[1100];          /* DIR/MANIFEST, for messages */
    rap_pred_file *f;         /* (n) */
    int n;
} rap_pred_manifest;

/* Reads and checks dir's MANIFEST (its syntax; names plain file names,
 * each once). RAP_ERR_IO when there is none (the message says how to
 * write one), RAP_ERR_DATA naming the line of a bad one. */
rap_status rap_pred_manifest_read(const char *dir, rap_pred_manifest *m);
void rap_pred_manifest_free(rap_pred_manifest *m);

/* Reads file `name` of the bundle dir whole (*buf, *n; rap_free it) after
 * checking that m lists it and that its size and checksum are m's:
 * RAP_ERR_DATA naming the file and what differs. */
rap_status rap_pred_read_checked(const char *dir, const rap_pred_manifest *m, const char *name,
                                 char **buf, size_t *n);

/* Loads the bundle dir whose files m lists (predictor.c): every file
 * read once, checked against m, its models checked by rap_xgb_check,
 * then given to XGBoost from memory. */
rap_status rap_pred_load_with(const char *dir, const rap_pred_manifest *m, rap_predictor **out);

/* Writes dir's MANIFEST for predictor.txt and the model files it names,
 * after loading the bundle with exactly that manifest (so every model
 * passed rap_xgb_check and XGBoost), atomically (MANIFEST.tmp renamed). */
rap_status rap_pred_manifest_write(const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* RAP_PLAN_PREDICTOR_INTERNAL_H */
