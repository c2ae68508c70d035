/* test_series.c -- data positions (src/data/position.h), log rotation under
 * follow (reader, row feed, rap prep --follow), periodic checkpoints
 * (--save-every, --keep, --resume latest) and every row trained exactly
 * once across runs killed with SIGKILL on a growing directory. */
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "data/position.h"
#include "data/reader_internal.h"
#include "run/rowfeed.h"
#include "run/train_series.h"

/* ------------------------------------------------------------ helpers */

#define REQUIRE_MSG(cond, ...)                                             \
    do {                                                                   \
        if (!(cond)) {                                                     \
            rap_test_fail(t, __FILE__, __LINE__, __VA_ARGS__);              \
            return;                                                        \
        }                                                                  \
    } while (0)

/* A good Criteo line whose int_0 is id, with its '\n'; its length. */
static int id_line(char *out, int64_t id)
{
    int n = sprintf(out, "%d\t%lld", (int)(id & 1), (long long)id);
    for (int j = 1; j < RAP_CRITEO_DENSE; j++)
        n += sprintf(out + n, "\t%d", (int)((id * 7 + j) % 50));
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++)
        n += sprintf(out + n, "\t%08x", (unsigned)((id * 2654435761u + (unsigned)j * 97u) % 1000u));
    out[n++] = '\n';
    out[n] = 0;
    return n;
}

/* Appends lines of ids [from, to) to path (fopen mode "ab": O_APPEND). */
static void append_ids(const char *path, int64_t from, int64_t to)
{
    FILE *f = fopen(path, "ab");
    if (!f)
        abort();
    char l[1024];
    for (int64_t i = from; i < to; i++)
        fwrite(l, 1, (size_t)id_line(l, i), f);
    fclose(f);
}

static void append_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "ab");
    if (!f)
        abort();
    fputs(s, f);
    fclose(f);
}

static void ms_sleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void tpath(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
}

/* Reads everything of cfg (batches of cap rows, chunks of chunk bytes):
 * the int_0 of each row into ids (up to max), and with track_positions
 * the position before each row k and after the last into pos[k]. */
static rap_status read_ids(rap_test_ctx *t, const rap_reader_config *cfg, size_t chunk,
                           int64_t cap, int64_t *ids, rap_data_position *pos, int64_t max,
                           int64_t *n_out)
{
    rap_reader *r;
    *n_out = 0;
    RAP_TRY(rap_reader_open_ex(cfg, chunk, &r));
    rap_batch b;
    rap_status st = rap_batch_create(&b, rap_schema_criteo(), cap, false);
    int64_t n = 0;
    while (st == RAP_OK && (st = rap_reader_next(r, &b)) == RAP_OK && b.rows > 0) {
        for (int64_t i = 0; i < b.rows; i++) {
            if (n + i < max)
                ids[n + i] = b.dense_valid[i] ? (int64_t)b.dense[i] : -1;
            if (pos && n + i + 1 <= max)
                CHECK_OK(rap_reader_position_at(r, b.first_row + i + 1, &pos[n + i + 1]));
        }
        if (pos && n == 0)
            CHECK_OK(rap_reader_position_at(r, b.first_row, &pos[0]));
        n += b.rows;
    }
    rap_batch_free(&b);
    rap_reader_close(r);
    *n_out = n;
    return st;
}

/* ------------------------------------------------------------ positions */

/* A directory of a plain file (with a reject and a line too long among
 * its rows), a gzip file and a file whose last line has no '\n': a
 * reader started at the position of any row reads exactly the rows from
 * that one on, whatever the batch and chunk sizes. */
RAP_TEST(position_continue_at_every_row)
{
    char dir[512], a[600], bz[600], c[600];
    tpath(dir, sizeof dir, "pos_dir");
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(a, sizeof a, "%s/a.tsv", dir);
    snprintf(bz, sizeof bz, "%s/b.tsv.gz", dir);
    snprintf(c, sizeof c, "%s/c.tsv", dir);
    append_ids(a, 0, 20);
    append_text(a, "not a row\n");
    append_ids(a, 20, 40);
    char longl[1200];
    memset(longl, 'x', 1000);
    longl[1000] = '\n';
    longl[1001] = 0;
    append_text(a, longl);
    append_ids(a, 40, 60);
    gzFile g = gzopen(bz, "wb");
    REQUIRE(g);
    char l[1024];
    for (int64_t i = 60; i < 120; i++)
        gzwrite(g, l, (unsigned)id_line(l, i));
    gzclose(g);
    append_ids(c, 120, 150);
    FILE *f = fopen(c, "ab");
    int n1 = id_line(l, 150);
    fwrite(l, 1, (size_t)n1 - 1, f); /* no '\n' */
    fclose(f);
    const int64_t N = 151;
    rap_reader_config rc = rap_reader_defaults();
    rc.input = dir;
    rc.threads = 2;
    rc.max_line = 300;
    rc.track_positions = true;
    static int64_t ids[200], got[200];
    static rap_data_position pos[201];
    int64_t n;
    REQUIRE_OK(read_ids(t, &rc, 700, 7, ids, pos, 200, &n));
    REQUIRE_MSG(n == N, "rows %lld", (long long)n);
    for (int64_t i = 0; i < N; i++)
        CHECK_MSG(ids[i] == i, "row %lld holds %lld", (long long)i, (long long)ids[i]);
    CHECK(!pos[0].valid && pos[1].valid && pos[N].valid);
    CHECK_MSG(pos[N].line == 31 && strstr(pos[N].file, "c.tsv"), "%s:%lld", pos[N].file,
              (long long)pos[N].line);
    struct stat sb;
    REQUIRE(stat(c, &sb) == 0);
    CHECK_MSG(pos[N].offset == (int64_t)sb.st_size, "offset %lld, size %lld",
              (long long)pos[N].offset, (long long)sb.st_size);
    CHECK(pos[20].line == 20 && pos[21].line == 22); /* the reject between rows 19 and 20 */
    for (int64_t k = 1; k <= N; k++) {
        if (!(k % 9 == 0 || (k >= 18 && k <= 22) || (k >= 38 && k <= 42) || (k >= 58 && k <= 62) ||
              k >= 148 || k == 119 || k == 120 || k == 121))
            continue;
        rap_reader_config r2 = rc;
        r2.start = &pos[k];
        int64_t m;
        rap_status st = read_ids(t, &r2, k % 2 ? 700 : 0, k % 3 + 1, got, NULL, 200, &m);
        CHECK_MSG(st == RAP_OK, "start at row %lld: %s", (long long)k, rap_last_error());
        CHECK_MSG(m == N - k, "start at row %lld: %lld rows", (long long)k, (long long)m);
        for (int64_t i = 0; i < m && i < 200; i++)
            if (got[i] != k + i) {
                CHECK_MSG(0, "start at row %lld: row %lld holds %lld", (long long)k,
                          (long long)i, (long long)got[i]);
                break;
            }
    }
}

/* Positions that do not fit the file system are refused, naming why. */
RAP_TEST(position_hostile_refused)
{
    char dir[512], a[600];
    tpath(dir, sizeof dir, "pos_hostile");
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(a, sizeof a, "%s/a.tsv", dir);
    append_ids(a, 0, 30);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = a;
    rc.threads = 2;
    rc.track_positions = true;
    static int64_t ids[64];
    static rap_data_position pos[65];
    int64_t n;
    REQUIRE_OK(read_ids(t, &rc, 0, 8, ids, pos, 64, &n));
    REQUIRE(n == 30 && pos[10].valid);
    struct {
        const char *what, *msg;
        rap_data_position p;
        const char *input;
    } v[9];
    for (int i = 0; i < 9; i++) {
        v[i].p = pos[10];
        v[i].input = a;
    }
    v[0].what = "another inode"; v[0].msg = "another one now"; v[0].p.ino ^= 0x5a5a5a;
    v[1].what = "mid-line"; v[1].msg = "not the start of a line"; v[1].p.offset += 3; v[1].p.line = 10;
    v[2].what = "past the end"; v[2].msg = "ends before"; v[2].p.offset += 100000;
    v[3].what = "lines beyond bytes"; v[3].msg = "cannot end at byte"; v[3].p.line = v[3].p.offset + 5;
    v[4].what = "negative"; v[4].msg = ">= 0"; v[4].p.offset = -1;
    v[5].what = "another file"; v[5].msg = "not the input"; snprintf(v[5].p.file, sizeof v[5].p.file, "/etc/hosts");
    v[6].what = "outside the directory"; v[6].msg = "not a file of the input directory"; v[6].input = dir;
    snprintf(v[6].p.file, sizeof v[6].p.file, "/etc/hosts");
    v[7].what = "hidden name"; v[7].msg = "not a file of the input directory"; v[7].input = dir;
    snprintf(v[7].p.file, sizeof v[7].p.file, "%s/.a.tsv", dir);
    v[8].what = "gone"; v[8].msg = "gone"; v[8].input = dir;
    snprintf(v[8].p.file, sizeof v[8].p.file, "%s/zz.tsv", dir);
    for (int i = 0; i < 9; i++) {
        rap_reader_config r2 = rc;
        r2.input = v[i].input;
        r2.start = &v[i].p;
        rap_reader *r = NULL;
        rap_status st = rap_reader_open(&r2, &r);
        CHECK_MSG(st == RAP_ERR_DATA && strstr(rap_last_error(), v[i].msg), "%s: %s: %s",
                  v[i].what, rap_status_name(st), rap_last_error());
        rap_reader_close(r);
    }
}

/* ------------------------------------------------------------ rotation */

typedef struct {
    char path[600];
} rot_writer;

/* The single file, rows 0..9 already there: grows, is copied and
 * truncated (copytruncate) and at once written past the old size again,
 * is renamed with a few rows still written to the renamed file and
 * replaced by a new file (create), which grows. Rows 0..64 in all, each
 * written once. */
static void *rotate_single(void *arg)
{
    rot_writer *w = arg;
    char old1[700], old2[700], cmd[1600];
    snprintf(old1, sizeof old1, "%s.1", w->path);
    snprintf(old2, sizeof old2, "%s.2", w->path);
    ms_sleep(300);
    append_ids(w->path, 10, 20);
    ms_sleep(300);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", w->path, old1); /* copytruncate */
    if (system(cmd) != 0 || truncate(w->path, 0) != 0)
        abort();
    append_ids(w->path, 20, 45); /* longer than before the truncation */
    ms_sleep(300);
    if (rename(w->path, old2) != 0) /* create */
        abort();
    append_ids(old2, 45, 50); /* the writer has not reopened yet */
    ms_sleep(50);
    append_ids(w->path, 50, 60);
    ms_sleep(300);
    append_ids(w->path, 60, 65);
    return NULL;
}

static void check_ids(rap_test_ctx *t, const int64_t *ids, int64_t n, int64_t want, const char *what)
{
    CHECK_MSG(n == want, "%s: %lld rows, expected %lld", what, (long long)n, (long long)want);
    for (int64_t i = 0; i < n && i < want; i++)
        if (ids[i] != i) {
            CHECK_MSG(0, "%s: row %lld holds line %lld", what, (long long)i, (long long)ids[i]);
            return;
        }
}

RAP_TEST(rotation_reader_copytruncate_and_create)
{
    rot_writer w;
    tpath(w.path, sizeof w.path, "rot_single.tsv");
    append_ids(w.path, 0, 10);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = w.path;
    rc.threads = 2;
    rc.follow = true;
    rc.idle_timeout_s = 1.2;
    rc.track_positions = true;
    pthread_t th;
    pthread_create(&th, NULL, rotate_single, &w);
    static int64_t ids[128];
    static rap_data_position pos[129];
    int64_t n;
    rap_status st = read_ids(t, &rc, 0, 4, ids, pos, 128, &n);
    pthread_join(th, NULL);
    REQUIRE_OK(st);
    check_ids(t, ids, n, 65, "single file");
    if (n == 65) { /* the last row: line 15 of the new file */
        struct stat sb;
        REQUIRE(stat(w.path, &sb) == 0);
        CHECK_MSG(pos[65].line == 15 && pos[65].ino == (uint64_t)sb.st_ino &&
                      pos[65].offset == (int64_t)sb.st_size,
                  "%s:%lld at %lld", pos[65].file, (long long)pos[65].line,
                  (long long)pos[65].offset);
        CHECK(pos[25].line == 5); /* line 5 of the truncated file */
    }
}

typedef struct {
    char dir[600];
} dir_writer;

/* A directory (a.tsv: rows 0..9 there) whose old files are deleted while
 * it is followed, the file being read among them. Rows 0..39. */
static void *rotate_dir(void *arg)
{
    dir_writer *w = arg;
    char p[700];
    ms_sleep(300);
    snprintf(p, sizeof p, "%s/b.tsv", w->dir);
    append_ids(p, 10, 20);
    ms_sleep(300);
    snprintf(p, sizeof p, "%s/a.tsv", w->dir);
    unlink(p);
    ms_sleep(200);
    snprintf(p, sizeof p, "%s/c.tsv", w->dir);
    append_ids(p, 20, 30);
    snprintf(p, sizeof p, "%s/b.tsv", w->dir);
    unlink(p);
    ms_sleep(300);
    snprintf(p, sizeof p, "%s/c.tsv", w->dir); /* the file being followed */
    unlink(p);
    ms_sleep(400);
    snprintf(p, sizeof p, "%s/d.tsv", w->dir);
    append_ids(p, 30, 40);
    return NULL;
}

RAP_TEST(rotation_reader_directory_deleted)
{
    dir_writer w;
    tpath(w.dir, sizeof w.dir, "rot_dir");
    REQUIRE(mkdir(w.dir, 0755) == 0);
    char a[700];
    snprintf(a, sizeof a, "%s/a.tsv", w.dir);
    append_ids(a, 0, 10);
    rap_reader_config rc = rap_reader_defaults();
    rc.input = w.dir;
    rc.threads = 2;
    rc.follow = true;
    rc.idle_timeout_s = 1.2;
    pthread_t th;
    pthread_create(&th, NULL, rotate_dir, &w);
    static int64_t ids[128];
    int64_t n;
    rap_status st = read_ids(t, &rc, 0, 4, ids, NULL, 128, &n);
    pthread_join(th, NULL);
    REQUIRE_OK(st);
    check_ids(t, ids, n, 40, "directory");
}

/* The trainer's feed on the rotated single file: the batches of B rows
 * hold rows 0..64 once each, in order; each batch's data position is the
 * reader's after its last row. */
RAP_TEST(rotation_feed_both_styles)
{
    rot_writer w;
    tpath(w.path, sizeof w.path, "rot_feed.tsv");
    append_ids(w.path, 0, 10);
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rap_reader_defaults();
    fc.reader.input = w.path;
    fc.reader.threads = 2;
    fc.reader.follow = true;
    fc.reader.idle_timeout_s = 1.2;
    fc.batch_rows = 8;
    fc.n_batches = 3;
    fc.passes = 1;
    fc.track_positions = true;
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&fc, &f));
    pthread_t th;
    pthread_create(&th, NULL, rotate_single, &w);
    static int64_t ids[128];
    int64_t n = 0, last_line = -1;
    rap_row_batch *rb;
    rap_status st;
    while ((st = rap_rowfeed_next(f, &rb, NULL)) == RAP_OK && rb) {
        for (int64_t i = 0; i < rb->batch.rows && n < 128; i++)
            ids[n++] = (int64_t)rb->batch.dense[i];
        if (rb->batch.rows > 0) {
            CHECK(rb->has_data_pos && rb->data_pos.rows == rb->pos_after);
            last_line = rb->data_pos.line;
        }
        rap_rowfeed_release(f, rb);
    }
    pthread_join(th, NULL);
    rap_rowfeed_free(f, NULL);
    REQUIRE_OK(st);
    check_ids(t, ids, n, 65, "feed");
    CHECK_MSG(last_line == 15, "last line %lld", (long long)last_line);
}

/* rap prep --follow on the rotated file: all 65 rows, none twice. */
RAP_TEST(rotation_prep_follow_cli)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    rot_writer w;
    tpath(w.path, sizeof w.path, "rot_prep.tsv");
    append_ids(w.path, 0, 10);
    char out[600], plan[600], args[2048];
    tpath(out, sizeof out, "rot_prep_out.tsv");
    if (!rap_test_plan_path("plan0.plan", plan, sizeof plan))
        SKIP("plans/ not found from the working directory");
    snprintf(args, sizeof args, "prep --device cpu --plan %s --input %s --output %s --follow "
             "--idle-timeout 1.2 --batch 7 --threads 2", plan, w.path, out);
    pthread_t th;
    pthread_create(&th, NULL, rotate_single, &w);
    static char log[1 << 16];
    int rc = rap_test_run_rap(args, log, sizeof log);
    pthread_join(th, NULL);
    CHECK_MSG(rc == 0, "%s", log);
    CHECK_MSG(strstr(log, "rows read 65 = used 65 + rejected 0"), "%s", log);
    FILE *f = fopen(out, "rb");
    REQUIRE(f);
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    CHECK_MSG(lines == 66, "%d lines (a header and 65 rows expected)", lines);
}

/* ------------------------------------------------------------ series */

RAP_TEST(series_every_and_names)
{
    int64_t s;
    double d;
    CHECK(rap_series_parse_every("10", &s, &d) == RAP_OK && s == 10 && d == 0);
    CHECK(rap_series_parse_every("90s", &s, &d) == RAP_OK && s == 0 && d == 90);
    CHECK(rap_series_parse_every("10m", &s, &d) == RAP_OK && d == 600);
    CHECK(rap_series_parse_every("1.5h", &s, &d) == RAP_OK && d == 5400);
    CHECK(rap_series_parse_every("0", &s, &d) == RAP_OK && s == 0 && d == 0);
    const char *bad[] = {"abc", "10x", "-5", "1e3", "5.5", "s", "10ms", "-1m"};
    for (int i = 0; i < 8; i++)
        CHECK_MSG(rap_series_parse_every(bad[i], &s, &d) == RAP_ERR_ARG &&
                      strstr(rap_last_error(), "--save-every"),
                  "%s accepted", bad[i]);
    char n[512];
    rap_series_name("d/run.st", 120, n, sizeof n);
    CHECK_MSG(!strcmp(n, "d/run-step0000000120.st"), "%s", n);
    rap_series_name("d.x/run", 7, n, sizeof n);
    CHECK_MSG(!strcmp(n, "d.x/run-step0000000007"), "%s", n);
    rap_series_name(".hidden", 7, n, sizeof n);
    CHECK_MSG(!strcmp(n, ".hidden-step0000000007"), "%s", n);
    rap_series sr;
    rap_series_init(&sr, "x.st", 3, 0, 0, 100);
    CHECK(rap_series_due(&sr, 3, 100) && !rap_series_due(&sr, 4, 1e9));
    rap_series_init(&sr, "x.st", 0, 5, 0, 100);
    CHECK(!rap_series_due(&sr, 3, 104) && rap_series_due(&sr, 4, 105));
    rap_series_init(&sr, "", 1, 1, 0, 100);
    CHECK(!rap_series_due(&sr, 1, 1e9));
}

static const char *g_small_model = "--emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 --optimizer sgd "
                                   "--lr 0.05 --eval-fraction 0 --threads 1 --quiet";

/* --save-every 2 --keep 2 keeps the newest two periodic files beside
 * --save; --resume latest takes the newest complete one, never a
 * temporary file (a write killed midway) nor a truncated one. */
RAP_TEST(series_keep_and_resume_latest)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[600], data[600], dir[600], save[700], args[4096];
    REQUIRE(rap_test_dist_inputs(t, 5, "series", plan, data, sizeof plan));
    tpath(dir, sizeof dir, "series_keep");
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(save, sizeof save, "%s/m.st", dir);
    static char out[1 << 16];
    snprintf(args, sizeof args, "train --device cpu --plan %s --data %s --batch 64 %s --steps 9 "
             "--save %s --save-every 2 --keep 2", plan, data, g_small_model, save);
    REQUIRE_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    char s2[800], s4[800], s6[800], s8[800], s10[800];
    rap_series_name(save, 2, s2, sizeof s2);
    rap_series_name(save, 4, s4, sizeof s4);
    rap_series_name(save, 6, s6, sizeof s6);
    rap_series_name(save, 8, s8, sizeof s8);
    rap_series_name(save, 10, s10, sizeof s10);
    CHECK(access(s2, F_OK) != 0 && access(s4, F_OK) != 0);
    CHECK(access(s6, F_OK) == 0 && access(s8, F_OK) == 0 && access(save, F_OK) == 0);
    /* the final --save (step 9) is the newest */
    char found[4096];
    bool ok;
    REQUIRE_OK(rap_series_latest(save, found, sizeof found, &ok));
    CHECK_MSG(ok && !strcmp(found, save), "%s", found);
    /* without it: step 8, unless truncated; a .tmp of step 10 never */
    REQUIRE(unlink(save) == 0);
    char tmp[900];
    snprintf(tmp, sizeof tmp, "%s.tmp", s10);
    append_text(tmp, "half a checkpoint");
    snprintf(tmp, sizeof tmp, "%s/.m-step0000000010.st.tmp.99999.0123456789abcdef", dir);
    append_text(tmp, "half a checkpoint"); /* core/out's temporary */
    REQUIRE_OK(rap_series_latest(save, found, sizeof found, &ok));
    CHECK_MSG(ok && !strcmp(found, s8), "%s", found);
    struct stat sb;
    REQUIRE(stat(s8, &sb) == 0 && truncate(s8, sb.st_size / 2) == 0);
    REQUIRE_OK(rap_series_latest(save, found, sizeof found, &ok));
    CHECK_MSG(ok && !strcmp(found, s6), "%s", found);
    /* the CLI says which and continues from step 6 */
    snprintf(args, sizeof args, "train --device cpu --plan %s --data %s --batch 64 --emb-dim 8 "
             "--mlp-bot 16-8 --mlp-top 16-1 --optimizer sgd --lr 0.05 --eval-fraction 0 "
             "--threads 1 --steps 10 --save %s --save-every 2 --keep 2 --resume latest",
             plan, data, save);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(strstr(out, "--resume latest: ") && strstr(out, "step0000000006") &&
                  strstr(out, "resume: step 6"),
              "%s", out);
    CHECK(access(save, F_OK) == 0 && access(s8, F_OK) == 0); /* step 10 is the final --save */
    /* an empty series: from the start */
    snprintf(args, sizeof args, "train --device cpu --plan %s --data %s --batch 64 --emb-dim 8 "
             "--mlp-bot 16-8 --mlp-top 16-1 --optimizer sgd --lr 0.05 --eval-fraction 0 "
             "--threads 1 --steps 1 --save %s/none.st --resume latest", plan, data, dir);
    CHECK_MSG(rap_test_run_rap(args, out, sizeof out) == 0 &&
                  strstr(out, "no checkpoint of") && strstr(out, "initial weights"),
              "%s", out);
}

/* ---------------------------------------------------------- exactly once */

#define K9_FILES 24
#define K9_ROWS 150   /* per file */
#define K9_RUNS 5     /* killed runs before the last one */

typedef struct {
    char dir[600];
} k9_writer;

/* A file of K9_ROWS rows every 120 ms (written as .part, renamed: a
 * file appears whole; the reader also follows a file that grows). */
static void *k9_write(void *arg)
{
    k9_writer *w = arg;
    for (int k = 1; k < K9_FILES; k++) {
        ms_sleep(120);
        char p[700], q[700];
        snprintf(p, sizeof p, "%s/.f%03d.part", w->dir, k);
        snprintf(q, sizeof q, "%s/f%03d.tsv", w->dir, k);
        append_ids(p, (int64_t)k * K9_ROWS, (int64_t)(k + 1) * K9_ROWS);
        if (rename(p, q) != 0)
            abort();
    }
    return NULL;
}

/* The runs' log (RAP_TEST_STEP_LOG, cmd_train.c): R, S and B lines. The
 * rows each run trained count only up to the step the next run resumed
 * from: the steps after it were trained into weights that died with the
 * run (their rows are replayed from the checkpoint's position). */
static void k9_count(rap_test_ctx *t, const char *log, int64_t total, int *runs, int *resumed)
{
    FILE *f = fopen(log, "r");
    REQUIRE(f);
    enum { MAXB = 4096 };
    static int64_t *bids[64][MAXB];   /* [run][seq] the batch's ids */
    static int64_t bn[64][MAXB];
    static int64_t sseq[64][MAXB], sstep[64][MAXB], ns[64], rstep[64];
    memset(bids, 0, sizeof bids);
    memset(ns, 0, sizeof ns);
    int run = -1;
    static char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == 'R' && run < 63) {
            run++;
            rstep[run] = strtoll(line + 2, NULL, 10);
        } else if (line[0] == 'S' && run >= 0 && ns[run] < MAXB) {
            long long st, sq, pa, rows;
            if (sscanf(line + 2, "%lld %lld %lld %lld", &st, &sq, &pa, &rows) == 4) {
                sstep[run][ns[run]] = st;
                sseq[run][ns[run]++] = sq;
            }
        } else if (line[0] == 'B' && run >= 0) {
            char *p = line + 2, *e;
            long long sq = strtoll(p, &e, 10);
            if (sq < 0 || sq >= MAXB || !strchr(line, '\n'))
                continue; /* a line cut by the kill */
            int64_t cap = 256, n = 0, *v = malloc(sizeof *v * (size_t)cap);
            for (p = e; *p && *p != '\n';) {
                long long x = strtoll(p, &e, 10);
                if (e == p)
                    break;
                if (n == cap)
                    v = realloc(v, sizeof *v * (size_t)(cap *= 2));
                v[n++] = x;
                p = e;
            }
            free(bids[run][sq]);
            bids[run][sq] = v;
            bn[run][sq] = n;
        }
    }
    fclose(f);
    *runs = run + 1;
    *resumed = 0;
    for (int r = 1; r <= run; r++)
        *resumed += rstep[r] > 0;
    int64_t *cnt = calloc((size_t)total, sizeof *cnt);
    int64_t strays = 0, missing_batch = 0;
    for (int r = 0; r <= run; r++) {
        int64_t upto = r < run ? rstep[r + 1] : INT64_MAX;
        for (int64_t i = 0; i < ns[r]; i++) {
            if (sstep[r][i] > upto)
                continue;
            int64_t sq = sseq[r][i];
            if (sq < 0 || sq >= MAXB || !bids[r][sq]) {
                missing_batch++;
                continue;
            }
            for (int64_t j = 0; j < bn[r][sq]; j++) {
                int64_t id = bids[r][sq][j];
                if (id < 0 || id >= total)
                    strays++;
                else
                    cnt[id]++;
            }
        }
    }
    int64_t zero = 0, twice = 0, first_bad = -1;
    for (int64_t i = 0; i < total; i++) {
        if (cnt[i] != 1 && first_bad < 0)
            first_bad = i;
        zero += cnt[i] == 0;
        twice += cnt[i] > 1;
    }
    CHECK_MSG(zero == 0 && twice == 0 && strays == 0 && missing_batch == 0,
              "%d runs: %lld rows never trained, %lld more than once (first: line %lld, %lld "
              "times), %lld ids out of range, %lld steps without their batch",
              run + 1, (long long)zero, (long long)twice, (long long)first_bad,
              (long long)(first_bad >= 0 ? cnt[first_bad] : 0), (long long)strays,
              (long long)missing_batch);
    for (int r = 0; r <= run; r++)
        for (int64_t s = 0; s < MAXB; s++)
            free(bids[r][s]);
    free(cnt);
}

/* rap train --follow on a directory that grows, killed with SIGKILL at
 * random moments K9_RUNS times, each run started with --resume latest,
 * then one run to the end (idle timeout): every line is trained exactly
 * once in the lineage of the final weights. */
RAP_TEST(series_kill9_exactly_once)
{
    if (access(rap_test_bin(), X_OK) != 0)
        SKIP("%s not built", rap_test_bin());
    char plan[600], data[600], dir[600], save[700], log[700], cmd[8192];
    REQUIRE(rap_test_dist_inputs(t, 5, "series", plan, data, sizeof plan));
    k9_writer w;
    tpath(w.dir, sizeof w.dir, "k9_data");
    tpath(dir, sizeof dir, "k9_ckpt");
    REQUIRE(mkdir(w.dir, 0755) == 0 && mkdir(dir, 0755) == 0);
    snprintf(save, sizeof save, "%s/m.st", dir);
    snprintf(log, sizeof log, "%s/steps.log", dir);
    char f0[700];
    snprintf(f0, sizeof f0, "%s/f000.tsv", w.dir);
    append_ids(f0, 0, K9_ROWS);
    pthread_t th;
    pthread_create(&th, NULL, k9_write, &w);
    uint64_t rng = 0x6b696c6c39ull ^ (uint64_t)time(NULL);
    static char out[1 << 16];
    char train[4096];
    /* RAP_TEST_SERIES_DEVICE=gpu: the same on the GPU, and with
     * RAP_TEST_SERIES_PARSE=gpu parsed there (bench/device_series.sh) */
    const char *dev = getenv("RAP_TEST_SERIES_DEVICE");
    dev = dev && !strcmp(dev, "gpu") ? "gpu" : "cpu";
    const char *parse = getenv("RAP_TEST_SERIES_PARSE");
    parse = parse && !strcmp(parse, "gpu") ? "gpu" : "auto";
    snprintf(train, sizeof train,
             "RAP_TEST_STEP_LOG='%s' '%s' train --device %s --parse %s --plan %s --data %s "
             "--follow --batch 32 --emb-dim 8 --mlp-bot 16-8 --mlp-top 16-1 --optimizer adagrad "
             "--lr 0.05 --eval-fraction 0 --threads 2 --save %s --save-every 3 --keep 2 "
             "--resume latest", log, rap_test_bin(), dev, parse, plan, w.dir, save);
    /* each run is killed after 4 to 16 steps of its own (so that it wrote
     * a checkpoint: the step after a save is logged once the save is
     * complete) and 0 to 60 ms more, wherever that falls (in a step, in a
     * checkpoint's write, waiting for data); at most 10 s a run */
    for (int k = 0; k < K9_RUNS; k++) {
        int steps = 4 + (int)(rap_test_rnd(&rng) % 13), ms = (int)(rap_test_rnd(&rng) % 61);
        snprintf(cmd, sizeof cmd,
                 "n() { c=$(grep -c '^S' '%s' 2>/dev/null); echo ${c:-0}; }; b=$(n); "
                 "%s --idle-timeout 30 >>'%s/run.out' 2>&1 & p=$!; i=0; "
                 "while [ \"$(n)\" -lt $((b + %d)) ] && [ $i -lt 500 ]; do sleep 0.02; "
                 "i=$((i + 1)); done; sleep 0.%03d; kill -9 $p; wait $p; true",
                 log, train, dir, steps, ms);
        rap_test_sh(cmd, out, sizeof out);
    }
    pthread_join(th, NULL);
    snprintf(cmd, sizeof cmd, "%s --idle-timeout 1.5", train);
    int rc = rap_test_sh(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "last run: %d: %s", rc, out);
    int runs = 0, resumed = 0;
    k9_count(t, log, (int64_t)K9_FILES * K9_ROWS, &runs, &resumed);
    CHECK_MSG(runs == K9_RUNS + 1, "%d runs in the log", runs);
    /* not the trivial case of every run starting afresh: runs resumed from
     * a checkpoint, reading on from its data position */
    char rout[700];
    snprintf(rout, sizeof rout, "%s/run.out", dir);
    FILE *f = fopen(rout, "rb");
    size_t got = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[got] = 0;
    if (f)
        fclose(f);
    CHECK_MSG(resumed >= K9_RUNS && strstr(out, "resume: reading on from"),
              "%d runs resumed from a checkpoint: %s", resumed, out);
}
