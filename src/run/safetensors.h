/*
 * safetensors.h -- the safetensors container: files of F32, BF16 and F16
 * tensors with string metadata, written and read (docs/CHECKPOINT.md
 * "Layout").
 *
 * File layout (https://github.com/huggingface/safetensors):
 *   u64 little-endian N, then N bytes of JSON (padded with spaces so that
 *   8 + N is a multiple of 8), then the data section: every tensor's bytes,
 *   contiguous, in the order the header lists them, no holes.
 *   JSON: {"__metadata__": {string: string}, "NAME": {"dtype": "F32",
 *   "shape": [..], "data_offsets": [begin, end]}, ...}, offsets relative to
 *   the start of the data section.
 * The writer lays the tensors out widest type first (stable: the order
 * given within a type), as safetensors' own writer does, so that every
 * tensor starts at a multiple of its element size; it puts the metadata
 * in the order given and adds "data_crc32" last (CRC-32 of the data
 * section, 8 hex digits); the reader checks the structure, rap_ckpt_verify
 * the data against that CRC. What rap keeps in such files (checkpoint.h)
 * is not this module's business.
 *
 * Every safetensors file rap reads or writes is a checkpoint file (a
 * checkpoint, a shard file, a manifest or an export), hence the names of
 * the open file and its tensors: rap_ckpt, rap_ckpt_tensor.
 *
 * Usage:
 *     rap_ckpt *c;
 *     RAP_TRY(rap_safetensors_open(path, &c));
 *     int i = rap_ckpt_find(c, "emb_l.0.weight");
 *     ... rap_ckpt_read(c, i, host) ...; rap_ckpt_verify(c);
 *     rap_ckpt_close(c);
 */
#ifndef RAP_RUN_SAFETENSORS_H
#define RAP_RUN_SAFETENSORS_H

#include "core/out.h"
#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header rap accepts (the safetensors reference's own limit). */
#define RAP_ST_MAX_HEADER 100000000ull
/* Largest tensor rap reads, in bytes: the product of a shape never
 * overflows an int64 (the reader checks it, rap_safetensors_open). */
#define RAP_ST_MAX_TENSOR_BYTES (1ull << 62)

/* String metadata: ordered key/value pairs, owned copies. Zero-initialise
 * ({0}) before the first rap_meta_set. */
typedef struct {
    char **key;   /* (n) */
    char **val;   /* (n) */
    int n, cap;
} rap_meta;

/* Sets key to the formatted value: replaces an existing key's value in
 * place (its position stays), else appends. On failure m is unchanged. */
rap_status rap_meta_set(rap_meta *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Value of key, or NULL. */
const char *rap_meta_get(const rap_meta *m, const char *key);
/* Appends to out every pair of in (may be NULL) whose key is in neither
 * NULL-terminated list skip1, skip2 (each may be NULL). */
rap_status rap_meta_copy(rap_meta *out, const rap_meta *in, const char *const *skip1,
                         const char *const *skip2);
/* Frees the pairs; m is empty ({0}) after. */
void rap_meta_free(rap_meta *m);

/* Element types (safetensors' names "F32", "BF16", "F16"): IEEE float32,
 * bfloat16 (the top half of a float32) and IEEE float16, little-endian. */
typedef enum { RAP_ST_F32 = 0, RAP_ST_BF16 = 1, RAP_ST_F16 = 2 } rap_st_dtype;

/* "F32", "BF16", "F16"; "?" for another value. */
const char *rap_st_dtype_name(rap_st_dtype t);
/* Bytes of one element: 4, 2, 2; 0 for another value. */
size_t rap_st_dtype_size(rap_st_dtype t);

typedef struct {
    char name[128];
    rap_st_dtype dtype;    /* 0 (a zeroed tensor): F32 */
    int ndim;
    int64_t shape[4];
    uint64_t begin, end;   /* in the data section */
} rap_ckpt_tensor;

/* Elements of a tensor (the product of its shape; at most 2^60 in a file
 * rap_safetensors_open accepted), and its bytes. */
int64_t rap_ckpt_tensor_elems(const rap_ckpt_tensor *t);
uint64_t rap_ckpt_tensor_bytes(const rap_ckpt_tensor *t);

/* An open, structurally checked safetensors file. */
typedef struct {
    char path[512];
    FILE *f;
    uint64_t header_len;   /* N */
    uint64_t data_len;     /* bytes of the data section */
    rap_ckpt_tensor *t;    /* (n) in header order */
    int n;
    rap_meta meta;
} rap_ckpt;

/* Fills buf with tensor i: rap_ckpt_tensor_bytes of it, elements of its
 * dtype. */
typedef rap_status (*rap_safetensors_fill)(void *ctx, int i, void *buf);

/* Writes a safetensors file of the n tensors t (names, dtypes and shapes;
 * begin and end are set here, in the layout order of the header comment),
 * their data from fill, and meta (in its order, a "data_crc32" in it left
 * out) then "data_crc32", through core/out.h: a temporary beside path,
 * fsync'd and renamed over it, so path is always either the old file or
 * the whole new one; a second writer of path fails at once. held: the
 * caller's lock on path (rap_out_lock_take) or NULL. With check_finite a
 * tensor holding NaN or inf (in any of the types) is refused
 * (RAP_ERR_DATA) before the rename. On failure path is untouched and no
 * temporary file is left. A non-regular path (a fifo, a device) is written
 * through, fill then runs twice per tensor (the CRC comes before the
 * data). */
rap_status rap_safetensors_write(const char *path, const rap_meta *meta, rap_ckpt_tensor *t,
                                 int n, rap_safetensors_fill fill, void *ctx, bool check_finite,
                                 rap_out_lock *held);

/* Opens path and checks everything but the data bytes: the header length
 * against the file size, the JSON (core/json.h), every tensor's dtype
 * (F32, BF16 or F16), shape and offsets (as long as shape and dtype need,
 * contiguous, covering the data section exactly). Errors say what is wrong and where: RAP_ERR_IO (cannot open),
 * RAP_ERR_DATA (truncated or corrupt). *out is NULL on failure. */
rap_status rap_safetensors_open(const char *path, rap_ckpt **out);
/* Closes c (NULL is fine). */
void rap_ckpt_close(rap_ckpt *c);
/* Index of the tensor called name, or -1. */
int rap_ckpt_find(const rap_ckpt *c, const char *name);
/* Reads tensor i into host as stored (rap_ckpt_tensor_bytes of it). */
rap_status rap_ckpt_read(rap_ckpt *c, int i, void *host);
/* Reads rows [row0, row0+rows) of tensor i (1-D or 2-D) into host as
 * stored (rows * cols elements of its dtype). */
rap_status rap_ckpt_read_rows(rap_ckpt *c, int i, int64_t row0, int64_t rows, void *host);
/* Reads the whole data section and checks it against data_crc32. */
rap_status rap_ckpt_verify(rap_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_SAFETENSORS_H */
