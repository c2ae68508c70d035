/*
 * file.h -- a file read whole into memory, bounded, and a 64-bit checksum
 * of bytes: what the readers of small hostile files (predictor bundles,
 * their manifest) check before anything else looks at them.
 *
 * Usage:
 *     char *text;
 *     size_t n;
 *     RAP_TRY(rap_file_read(path, 64 << 20, "predictor model", &text, &n));
 *     if (rap_checksum64(text, n) != want) ...
 *     rap_free(text);
 */
#ifndef RAP_CORE_FILE_H
#define RAP_CORE_FILE_H

#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads the regular file path whole into a new allocation *buf (n bytes
 * plus a NUL after them; rap_free it). Refuses a file larger than max
 * bytes before reading it (RAP_ERR_DATA "PATH: WHAT of N bytes, more than
 * the MAX rap reads"), a path that is not a regular file and one that
 * cannot be read (RAP_ERR_IO naming it and the OS's reason). *buf is NULL
 * on failure. what names the file's role in messages. */
rap_status rap_file_read(const char *path, size_t max, const char *what, char **buf, size_t *n);

/* A 64-bit checksum of n bytes at p: every 8 bytes (little-endian, the
 * last ones padded with zeros) mixed into the state with rap_mix64, then
 * the length. Its values are in files (predictor manifests): it must never
 * change. Can't fail. */
uint64_t rap_checksum64(const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_FILE_H */
