/*
 * test.h -- the test harness: RAP_TEST(name) { ... } defines and registers a
 * test; CHECK(cond) records a failure (with file:line) and goes on;
 * REQUIRE(cond) records it and leaves the test; SKIP("why") leaves the test
 * as skipped, printing the reason. tests/test_main.c runs them all, or those
 * whose name contains argv[1]. The closing line is "N passed, N failed,
 * N skipped".
 */
#ifndef RAP_TEST_H
#define RAP_TEST_H

#include "rap.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int failures;
    int skipped;
    char skip_reason[256];
} rap_test_ctx;

typedef void (*rap_test_fn)(rap_test_ctx *t);
void rap_test_register(const char *name, rap_test_fn fn);
void rap_test_fail(rap_test_ctx *t, const char *file, int line, const char *fmt, ...);
/* A scratch directory for this test run (created once, removed at exit
 * unless RAP_KEEP_TMP is set). */
const char *rap_test_tmpdir(void);

/* Shared helpers (tests/test_util.c). */
/* build/rap, beside this test program. */
const char *rap_test_bin(void);
/* Runs `rap ARGS` (stdin /dev/null); its stdout+stderr into out (n bytes).
 * Returns the exit status, -1 when it did not exit. */
int rap_test_run_rap(const char *args, char *out, size_t n);
/* out = tmpdir/name. */
void rap_test_path(char *out, size_t n, const char *name);
/* Temporaries of the file path left in its directory: entries named
 * ".NAME.tmp.*" (core/out.h's) or "NAME.tmp"; their count. */
int rap_test_temporaries(const char *path);
/* Both checkpoints open, hold the same (non-zero) set of tensors, equal bit
 * for bit. n_tensors (may be NULL) gets the first one's tensor count. */
bool rap_test_same_checkpoints(const char *a, const char *b, int *n_tensors);
/* GPU runs compared bit for bit turn the GEMM tuning off: it picks
 * algorithms by timing at model creation (docs/TRAINING.md). tune_off sets
 * RAP_GPU_TUNE=0, tune_restore puts the previous value back. */
/* The distributed tests' kit (test_dist_train.c, test_dist_batch.c):
 * rap_test_sh runs a shell command (as a script: "a && b" whole) under
 * `timeout 90` (its output into out; the exit status, 124 timed out, -1
 * not exited); rap_test_no_mpi says
 * why MPI tests cannot run here, or NULL; rap_test_dist_inputs writes the
 * small plan (3 dense, 5 sparse columns: tables of 300, 200, 1000, 50, 700
 * rows) and 3,000 generated rows (seed) once per tag, paths into plan and
 * data (n bytes each); rap_test_read_losses reads the step losses of a
 * metrics file (their count, -1 no file); rap_test_close_weights compares
 * checkpoint a (gathered first: plain or sharded; with its optimizer state
 * when state) against plain b: the same tensors, values within tol
 * (relative + absolute), the largest difference into *worst, why not into
 * why. */
int rap_test_sh(const char *cmd, char *out, size_t n);
const char *rap_test_no_mpi(void);

/* Thread ranks for comm tests: rap_test_run_ranks runs fn on R (<= 8)
 * thread ranks of one threads comm, each with its collectives' timeout;
 * a rank whose fn fails aborts the comm (the others stop at once) and the
 * failure is recorded with its message; false when a rank failed. */
typedef struct rap_test_rank {
    int rank, R;
    struct rap_comm *c;
    void *arg;
    rap_status st;
    char err[512];
    int bad;            /* wrong values or statuses seen by the rank */
    double seconds;     /* for timeout tests */
    int64_t steps;      /* runs compared */
} rap_test_rank;
typedef rap_status (*rap_test_rank_fn)(rap_test_rank *x);
/* Criteo text for parser tests: rap_test_criteo_line writes good line i of
 * seed (nulls, negative ints, mixed-case hex; with its '\n'; returns its
 * bytes); rap_test_criteo_text writes `lines` lines, about one in four
 * malformed in one of many ways (every reason of the CPU parser, overflow
 * at the boundaries, CRLF, empty, long, binary, garbage), the last line
 * without '\n' when tail (out: room for 1200 bytes a line). */
int rap_test_criteo_line(char *out, uint64_t seed, int64_t i);
size_t rap_test_criteo_text(char *out, int64_t lines, uint64_t seed, bool tail);
/* splitmix64 on *state: deterministic test data; rnd01 uniform in [0, 1). */
uint64_t rap_test_rnd(uint64_t *state);
double rap_test_rnd01(uint64_t *state);
/* x rounded to bf16 (nearest even), as a float: what a bf16 GPU buffer
 * holds of it (finite x). */
float rap_test_round_bf16(float x);
/* A float that exercises the ops: NaNs with random payloads and signs,
 * infinities, signed zeros, huge, subnormal, small integers, [0, 1),
 * ordinary values. */
float rap_test_rnd_float(uint64_t *state);
/* n dense values of rap_test_rnd_float into a new *x; nulls: a new *valid
 * with ~15 % null rows (their values 0), else *valid NULL. */
void rap_test_rnd_dense(uint64_t *state, int64_t n, bool nulls, float **x, uint8_t **valid);
/* Parses plan text (Criteo's schema, source name for messages) and drops
 * the raw columns it leaves untouched, so that only the columns it
 * computes feed a model; rap_plan_finish'ed. */
rap_status rap_test_plan_text(const char *text, const char *source, rap_plan **out);
/* The shipped plan file `name` looked up in plans/ from the working
 * directory or up to two folders above: buf, or NULL when not found. */
const char *rap_test_plan_path(const char *name, char *buf, size_t n);
/* Random raw rows (seeded): labels 0/1, about 10 % nulls, dense values in
 * [-5, 45), 0..ids_per_row ids a row (below 2^31). */
void rap_test_fill_batch(rap_batch *b, int64_t rows, uint64_t seed);

bool rap_test_run_ranks(rap_test_ctx *t, int R, double timeout, rap_test_rank_fn fn, void *arg,
                        rap_test_rank *x);
bool rap_test_dist_inputs(rap_test_ctx *t, uint64_t seed, const char *tag, char *plan, char *data,
                          size_t n);
int rap_test_read_losses(const char *path, double *loss, int max);
bool rap_test_close_weights(const char *a, const char *b, bool state, double tol, double *worst,
                            char *why, size_t wn);

typedef struct {
    bool had;
    char val[128];
} rap_test_env;
void rap_test_tune_off(rap_test_env *e);
void rap_test_tune_restore(const rap_test_env *e);

#define RAP_TEST(name)                                                     \
    static void name(rap_test_ctx *t);                                     \
    __attribute__((constructor)) static void name##_register(void)        \
    {                                                                      \
        rap_test_register(#name, name);                                    \
    }                                                                      \
    static void name(rap_test_ctx *t)

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond))                                                       \
            rap_test_fail(t, __FILE__, __LINE__, "CHECK(%s)", #cond);       \
    } while (0)

#define CHECK_MSG(cond, ...)                                               \
    do {                                                                   \
        if (!(cond))                                                       \
            rap_test_fail(t, __FILE__, __LINE__, __VA_ARGS__);              \
    } while (0)

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond)) {                                                     \
            rap_test_fail(t, __FILE__, __LINE__, "REQUIRE(%s)", #cond);     \
            return;                                                        \
        }                                                                  \
    } while (0)

/* A library call that must succeed; prints rap_last_error() if not. */
#define REQUIRE_OK(call)                                                   \
    do {                                                                   \
        rap_status s_ = (call);                                            \
        if (s_ != RAP_OK) {                                                \
            rap_test_fail(t, __FILE__, __LINE__, "%s -> %s: %s", #call,     \
                          rap_status_name(s_), rap_last_error());           \
            return;                                                        \
        }                                                                  \
    } while (0)

#define CHECK_OK(call)                                                     \
    do {                                                                   \
        rap_status s_ = (call);                                            \
        if (s_ != RAP_OK)                                                  \
            rap_test_fail(t, __FILE__, __LINE__, "%s -> %s: %s", #call,     \
                          rap_status_name(s_), rap_last_error());           \
    } while (0)

#define SKIP(...)                                                          \
    do {                                                                   \
        t->skipped = 1;                                                    \
        snprintf(t->skip_reason, sizeof t->skip_reason, __VA_ARGS__);      \
        return;                                                            \
    } while (0)

/* Loads shipped plan plans/NAME (Criteo schema) into *pp, or skips the test
 * when plans/ is not found from the working directory (rap_test_plan_path). */
#define REQUIRE_SHIPPED_PLAN(name, pp)                                     \
    do {                                                                   \
        char plan_buf_[256];                                               \
        const char *plan_path_ =                                           \
            rap_test_plan_path((name), plan_buf_, sizeof plan_buf_);       \
        if (!plan_path_)                                                   \
            SKIP("plans/ not found from the working directory");           \
        REQUIRE_OK(rap_plan_load(plan_path_, rap_schema_criteo(), (pp)));  \
    } while (0)

/* Skips the test with the reason when no GPU is usable. */
#define REQUIRE_GPU()                                                      \
    do {                                                                   \
        char why_[200];                                                    \
        if (!rap_gpu_available(why_, sizeof why_))                         \
            SKIP("%s", why_);                                              \
    } while (0)

#endif /* RAP_TEST_H */
