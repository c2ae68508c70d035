/*
 * out.h -- the one way rap writes a file (docs/FILES.md "How rap writes
 * files"). Every writer of librap and of the rap command goes through it:
 * checkpoints, exports, prep output, shards, schedules, fusion files,
 * placements, capacity files, predictors, traces, reports, profiles and
 * the metrics stream.
 *
 *     rap_out *o;
 *     RAP_TRY(rap_out_open(path, NULL, &o));
 *     FILE *f = rap_out_file(o);
 *     fprintf(f, "...");
 *     if (something_failed) {
 *         rap_out_abort(o);          // the old PATH is untouched
 *         return st;
 *     }
 *     return rap_out_commit(o);      // PATH is the new file, whole
 *
 * What a regular (or absent) target gets:
 *   - a lock: flock(LOCK_EX | LOCK_NB) on the lock file ".NAME.lock" beside
 *     it, taken before anything is written; a second writer of the same
 *     target fails at once with "PATH: another writer holds it (pid N)";
 *   - a temporary ".NAME.tmp.<pid>.<16 hex>" beside it, created with
 *     O_EXCL, so that two writers never share bytes;
 *   - at commit: flush, fsync, close, rename over PATH, fsync of the
 *     directory, then the lock file is removed and the lock released;
 *     on any error (and at abort) the temporary is removed: PATH is then
 *     what it was before;
 *   - temporaries of the same target left by a writer that died (its pid
 *     gone, or reused by a process started after the file was last
 *     written) are removed, only while the lock is held.
 * A target that exists and is not a regular file (a device such as
 * /dev/null or /dev/full, a fifo, a terminal) is written through: no lock,
 * no temporary, no rename, every write and the final flush checked. A
 * symbolic link is followed: the file it points to is the target (its
 * directory gets the lock and the temporary; the link stays a link).
 * A directory is refused.
 *
 * Not thread-safe per object; different objects may be used by different
 * threads (two objects of one target conflict like two processes).
 */
#ifndef RAP_CORE_OUT_H
#define RAP_CORE_OUT_H

#include "rap.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rap_out rap_out;
typedef struct rap_out_lock rap_out_lock;

typedef struct {
    /* Write the target itself, truncated once the lock is held, instead of
     * a temporary renamed at commit: for a stream read while it grows (the
     * metrics file). A crash leaves what was written so far. */
    bool stream;
    /* "-" means standard output (no lock, no file): commit flushes it. */
    bool dash_is_stdout;
    /* A lock the caller already holds on this target (rap_out_lock_take),
     * or NULL: the object takes and releases its own. */
    rap_out_lock *held;
} rap_out_opts;

/* Opens path for writing as described above (opts NULL: the defaults, all
 * false). On failure (*o NULL, RAP_ERR_IO or RAP_ERR_ARG) nothing was
 * created and the message names path: "PATH: another writer holds it
 * (pid N)", "PATH: is a directory", "PATH: cannot create: ...". */
rap_status rap_out_open(const char *path, const rap_out_opts *opts, rap_out **o);
/* The stream to write to (stdout for "-"). Its errors are checked at
 * commit; writers may check earlier for a better message. Never fclose it. */
FILE *rap_out_file(rap_out *o);
/* Its file descriptor, for writers that write(2) or hand it to another
 * library (gzdopen of a dup: close that before commit or abort). */
int rap_out_fd(rap_out *o);
/* True when the bytes go to a regular file, which can be seeked back into
 * (a checkpoint patches its CRC); false for stdout and non-regular targets. */
bool rap_out_seekable(const rap_out *o);
/* Flushes and checks the stream, fsyncs, closes, renames the temporary
 * over the target, fsyncs the directory, releases the lock; frees o in
 * every case. On failure (RAP_ERR_IO naming the path and the reason) the
 * temporary is removed and the target is as it was. */
rap_status rap_out_commit(rap_out *o);
/* Closes, removes the temporary, releases the lock, frees o; the target is
 * as it was (a stream keeps what was written). Accepts NULL. Can't fail. */
void rap_out_abort(rap_out *o);
/* The end of most writers: rap_out_commit when st is RAP_OK (its status
 * returned), else rap_out_abort and st (its message kept). */
rap_status rap_out_close(rap_out *o, rap_status st);

/* Takes the lock of path's target for longer than one write (a trainer
 * holds its --save target for the whole run, so that a second run fails
 * at its start, not after hours of training); pass it in
 * rap_out_opts.held. For a non-regular target *l holds no lock. Errors as
 * rap_out_open. */
rap_status rap_out_lock_take(const char *path, rap_out_lock **l);
/* Removes the lock file and releases the lock; frees l. Accepts NULL. */
void rap_out_lock_release(rap_out_lock *l);

/* Refuses an output that is one of the inputs: RAP_ERR_ARG "OUT is the
 * same file as the input IN: refusing to overwrite it" when out exists
 * and has the device and inode of one of the n inputs, or of a file
 * directly inside an input that is a directory. NULL, "" and "-" entries
 * (and out "" or "-") are skipped; a missing input is not an error here
 * (its reader says so). Symbolic links are followed. */
rap_status rap_out_check_inputs(const char *out, const char *const *inputs, int n);

#ifdef __cplusplus
}
#endif
#endif /* RAP_CORE_OUT_H */
