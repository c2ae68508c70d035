/*
 * fuzz.h -- what the fuzzing entry points share (docs/FUZZ.md).
 *
 * Every entry point fuzz/fuzz_FORMAT.c defines
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 * and hands the bytes to rap's reader of that format as a user's file
 * would reach it (through a temporary file where the reader takes a
 * path). It is built with libFuzzer (`make fuzz FORMAT=x`, clang) or with
 * fuzz/replay.c, which runs it over the files of a corpus directory
 * (`make fuzz-replay`, gcc, ASan/UBSan; make test runs it).
 *
 * What a run checks besides "no crash, no hang, no sanitizer report":
 * fuzz_refused says a refusal is one of the codes a reader of hostile
 * files may give and that its message names the file; a broken promise
 * aborts, so the fuzzer keeps the input as a crash.
 */
#ifndef RAP_FUZZ_H
#define RAP_FUZZ_H

#include "rap.h"

#include <stddef.h>
#include <stdint.h>

/* Once per process: quiet logging, the per-process temporary directory
 * (removed at exit). Every helper below calls it. */
void fuzz_init(void);

/* The per-process temporary directory ("/tmp/rap-fuzz.XXXXXX"). */
const char *fuzz_dir(void);

/* Writes the bytes to fuzz_dir()/name (replacing it) and returns its path
 * (static storage, valid until the next call with the same name slot:
 * the caller copies it when it needs two). Aborts when it cannot write. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);

/* The bytes as a NUL-terminated string (malloc'd; free it). */
char *fuzz_text(const uint8_t *data, size_t size);

/* A file of the repository (fixtures, plans), found from the working
 * directory or $RAP_FUZZ_ROOT: its path (static storage, one slot). Aborts
 * when it is not there. */
const char *fuzz_repo_file(const char *rel);

/* After a reader of hostile bytes returned st for the file at path:
 * RAP_OK, or one of RAP_ERR_DATA, RAP_ERR_IO, RAP_ERR_PLAN (and
 * RAP_ERR_NOMEM) whose message names the file (path or its base name,
 * name_too: another name that counts). Anything else aborts with the
 * status and message. Returns st == RAP_OK. */
bool fuzz_refused(rap_status st, const char *path, const char *name_too);

/* Aborts with a message (an invariant of a reader's output broke). */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif /* RAP_FUZZ_H */
