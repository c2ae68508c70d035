/* test_input.c -- reading several files at once (lanes): file order with N
 * inflate threads equals one thread row for row; batch interleave follows
 * the documented rule (docs/INPUT.md) and reads every row once, with files
 * of different lengths, rejects, max_rows and bad_rows fail; the thread
 * split. And the line cutter (src/data/lines.h): its batches, parsed line
 * by line with rap_parse_line, give the reader's rows and reject
 * accounting exactly. */
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/core.h"
#include "data/lines.h"
#include "data/parse.h"
#include "data/reader_internal.h"

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

typedef struct {
    float label;
    float d[ND];
    uint8_t dv[ND];
    int64_t s[NS];
    uint8_t sv[NS];
} row_t;

typedef struct {
    row_t *r;
    int64_t n, cap;
} rows_t;

static void rows_push(rows_t *x, const row_t *r)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 1024;
        x->r = realloc(x->r, (size_t)x->cap * sizeof *x->r);
    }
    x->r[x->n++] = *r;
}

static void take_batch(const rap_batch *b, rows_t *x)
{
    int64_t B = b->cap;
    for (int64_t i = 0; i < b->rows; i++) {
        row_t r;
        memset(&r, 0, sizeof r);
        r.label = b->label[i];
        for (int j = 0; j < ND; j++) {
            r.d[j] = b->dense[j * B + i];
            r.dv[j] = b->dense_valid[j * B + i];
        }
        for (int j = 0; j < NS; j++) {
            const int64_t *off = b->sparse_off + j * (B + 1);
            r.sv[j] = b->sparse_valid[j * B + i];
            if (off[i + 1] > off[i])
                r.s[j] = b->sparse_ids[j * B + off[i]];
        }
        rows_push(x, &r);
    }
}

/* Reads all of cfg in batches of bcap rows; the status of the last call.
 * *before: rows handed out before a failure. */
static rap_status read_rows(const rap_reader_config *cfg, size_t chunk, int64_t bcap, rows_t *x,
                            rap_reader_stats *st, char *msg, size_t msg_n)
{
    rap_reader *rd;
    memset(x, 0, sizeof *x);
    msg[0] = 0;
    rap_status s = rap_reader_open_ex(cfg, chunk, &rd);
    if (s != RAP_OK) {
        snprintf(msg, msg_n, "%s", rap_last_error());
        return s;
    }
    rap_batch b;
    if (rap_batch_create(&b, rap_schema_criteo(), bcap, false) != RAP_OK)
        abort();
    for (;;) {
        s = rap_reader_next(rd, &b);
        if (s != RAP_OK) {
            snprintf(msg, msg_n, "%s", rap_last_error());
            break;
        }
        if (b.rows == 0)
            break;
        take_batch(&b, x);
    }
    if (st)
        rap_reader_get_stats(rd, st);
    rap_batch_free(&b);
    rap_reader_close(rd);
    return s;
}

static char *tpath(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

/* ------------------------------------------------------------ lanes */

/* Line i of file f: a good row whose int_0 is the id f * 1e6 + i, or a
 * malformed one when bad(f, i). */
static bool bad_line(int f, int64_t i) { return f != 2 && (f * 7 + i) % 53 == 5; }

static int put_line(char *out, int f, int64_t i)
{
    uint64_t s = (uint64_t)f * 0x9e3779b97f4a7c15ULL + (uint64_t)i * 31 + 7;
    if (bad_line(f, i)) {
        switch (i % 3) {
        case 0: return sprintf(out, "2\t1\t2\n");                  /* fields */
        case 1: return sprintf(out, "x\t%lld%s\n", (long long)i, /* label */
                               "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t");
        default: return sprintf(out, "1\t\x01\n");                 /* binary */
        }
    }
    int n = sprintf(out, "%d\t%lld", (int)(rap_splitmix64(&s) & 1), (long long)f * 1000000 + i);
    for (int j = 1; j < ND; j++)
        n += sprintf(out + n, "\t%d", (int)(rap_splitmix64(&s) % 1000));
    for (int j = 0; j < NS; j++)
        n += sprintf(out + n, "\t%x", (unsigned)(rap_splitmix64(&s) >> 36));
    out[n++] = '\n';
    return n;
}

#define NF 6
static const int64_t FILE_ROWS[NF] = {1500, 4100, 300, 0, 2600, 777};

/* Writes the directory: files f0..f5 of FILE_ROWS lines, odd ones gzip. */
static const char *make_dir(const char *name)
{
    const char *dir = tpath(name);
    mkdir(dir, 0755);
    char l[1024];
    for (int f = 0; f < NF; f++) {
        char p[600];
        snprintf(p, sizeof p, "%s/f%d%s", dir, f, f % 2 ? ".gz" : ".tsv");
        if (f % 2) {
            gzFile g = gzopen(p, "wb6");
            for (int64_t i = 0; i < FILE_ROWS[f]; i++)
                gzwrite(g, l, (unsigned)put_line(l, f, i));
            gzclose(g);
        } else {
            FILE *o = fopen(p, "wb");
            for (int64_t i = 0; i < FILE_ROWS[f]; i++)
                fwrite(l, 1, (size_t)put_line(l, f, i), o);
            fclose(o);
        }
    }
    return dir;
}

/* The order rule of docs/INPUT.md, written out plainly: the ids of the
 * good rows in the order batch interleave hands them out with L lanes and
 * turns of U rows, up to max_lines lines (0: all; rejects count as lines).
 * *first_bad: index in the output where the first reject was reached. */
static int64_t expected_order(int L, int64_t U, int64_t max_lines, int64_t *ids,
                              int64_t *first_bad)
{
    int64_t pos_f[NF], pos_i[NF]; /* lane j: at file pos_f[j], line pos_i[j] */
    bool alive[NF];
    for (int j = 0; j < L; j++) {
        pos_f[j] = j;
        pos_i[j] = 0;
        alive[j] = true;
    }
    int64_t n = 0, lines = 0;
    *first_bad = -1;
    int c = 0;
    int64_t left = U;
    for (;;) {
        int live = 0;
        for (int j = 0; j < L; j++)
            live += alive[j];
        if (!live || (max_lines && lines >= max_lines))
            return n;
        /* the next line of lane c, if any */
        while (pos_f[c] < NF && pos_i[c] >= FILE_ROWS[pos_f[c]]) {
            pos_f[c] += L;
            pos_i[c] = 0;
        }
        if (pos_f[c] >= NF) { /* out of rows: the turn goes on with the next lane */
            alive[c] = false;
            for (int k = 1; k <= L; k++)
                if (alive[(c + k) % L]) {
                    c = (c + k) % L;
                    break;
                }
            continue;
        }
        int f = (int)pos_f[c];
        int64_t i = pos_i[c]++;
        lines++;
        if (bad_line(f, i)) {
            if (*first_bad < 0)
                *first_bad = n;
            continue;
        }
        ids[n++] = (int64_t)f * 1000000 + i;
        if (--left == 0) { /* the turn is over: the next lane still in the rotation */
            left = U;
            for (int k = 1; k <= L; k++)
                if (alive[(c + k) % L]) {
                    c = (c + k) % L;
                    break;
                }
        }
    }
}

static rap_reader_config lanes_cfg(const char *dir, int N, int threads)
{
    rap_reader_config c = rap_reader_defaults();
    c.input = dir;
    c.threads = threads;
    c.inflate_threads = N;
    return c;
}

static bool same_stats(const rap_reader_stats *a, const rap_reader_stats *b, bool examples)
{
    if (a->rows_read != b->rows_read || a->rows_used != b->rows_used ||
        a->rows_rejected != b->rows_rejected || a->bytes_read != b->bytes_read ||
        a->files != b->files)
        return false;
    for (int k = 0; k < RAP_REJ_COUNT; k++)
        if (a->rejected[k] != b->rejected[k])
            return false;
    return !examples || memcmp(a->example, b->example, sizeof a->example) == 0;
}

RAP_TEST(lanes_file_order_equals_one_thread)
{
    const char *dir = make_dir("lanes_fo");
    rows_t one, x;
    rap_reader_stats s1, sx;
    char msg[512];
    rap_reader_config c = lanes_cfg(dir, 1, 2);
    REQUIRE_OK(read_rows(&c, 5000, 700, &one, &s1, msg, sizeof msg));
    int64_t good = 0;
    for (int f = 0; f < NF; f++)
        for (int64_t i = 0; i < FILE_ROWS[f]; i++)
            good += !bad_line(f, i);
    CHECK(one.n == good && s1.rows_read == 9277 && s1.files == NF);
    const int Ns[] = {2, 3, 6, 16};
    for (int k = 0; k < 4; k++) {
        for (int chunk = 0; chunk < 2; chunk++) {
            c = lanes_cfg(dir, Ns[k], Ns[k] + 2);
            REQUIRE_OK(read_rows(&c, chunk ? 0 : 3000, chunk ? 4096 : 333, &x, &sx, msg,
                                 sizeof msg));
            CHECK_MSG(x.n == one.n && memcmp(x.r, one.r, (size_t)one.n * sizeof(row_t)) == 0,
                      "N %d: %lld rows differ from one thread's", Ns[k], (long long)x.n);
            CHECK_MSG(same_stats(&sx, &s1, true), "N %d: accounting differs", Ns[k]);
            free(x.r);
        }
    }
    /* max_rows: the same first lines as one thread (which stops reading) */
    c = lanes_cfg(dir, 1, 2);
    c.max_rows = 5555;
    rows_t lim1;
    REQUIRE_OK(read_rows(&c, 4000, 1000, &lim1, &s1, msg, sizeof msg));
    c.inflate_threads = 3;
    c.threads = 4;
    REQUIRE_OK(read_rows(&c, 4000, 1000, &x, &sx, msg, sizeof msg));
    CHECK(s1.rows_read == 5555 && sx.rows_read == 5555);
    CHECK(x.n == lim1.n && memcmp(x.r, lim1.r, (size_t)x.n * sizeof(row_t)) == 0);
    CHECK(memcmp(s1.rejected, sx.rejected, sizeof s1.rejected) == 0);
    free(x.r);
    free(lim1.r);
    free(one.r);
}

/* Checks that x's ids (int_0) are exactly ids[0, n). */
static void check_ids(rap_test_ctx *t, const rows_t *x, const int64_t *ids, int64_t n,
                      const char *what)
{
    CHECK_MSG(x->n == n, "%s: %lld rows, expected %lld", what, (long long)x->n, (long long)n);
    int64_t m = x->n < n ? x->n : n, bad = 0;
    for (int64_t i = 0; i < m && bad < 3; i++)
        if ((int64_t)x->r[i].d[0] != ids[i]) {
            CHECK_MSG(false, "%s: row %lld has id %lld, expected %lld", what, (long long)i,
                      (long long)x->r[i].d[0], (long long)ids[i]);
            bad++;
        }
}

RAP_TEST(lanes_batch_interleave_order)
{
    const char *dir = make_dir("lanes_il");
    int64_t *ids = malloc(20000 * sizeof *ids), first_bad;
    char msg[512], what[128];
    /* the whole-file reads, to check values too: id -> row */
    rows_t all;
    rap_reader_config c = lanes_cfg(dir, 1, 2);
    REQUIRE_OK(read_rows(&c, 0, 4096, &all, NULL, msg, sizeof msg));
    const int Ls[] = {2, 3, 4, 6};
    const int64_t Us[] = {500, 64, 1000, 1};
    for (int k = 0; k < 4; k++) {
        int64_t n = expected_order(Ls[k], Us[k], 0, ids, &first_bad);
        for (int cap = 0; cap < 2; cap++) { /* the caller's batch size does not matter */
            c = lanes_cfg(dir, Ls[k], Ls[k] + 1);
            c.interleave = RAP_INTERLEAVE_BATCH;
            c.interleave_rows = Us[k];
            rows_t x;
            rap_reader_stats st;
            REQUIRE_OK(read_rows(&c, cap ? 0 : 2500, cap ? Us[k] : 333, &x, &st, msg,
                                 sizeof msg));
            snprintf(what, sizeof what, "L %d, U %lld, batch %lld", Ls[k], (long long)Us[k],
                     (long long)(cap ? Us[k] : 333));
            check_ids(t, &x, ids, n, what);
            CHECK(st.rows_used == all.n && st.rows_read == 9277 && st.files == NF);
            /* every row once, with its values: a sorted copy equals file order */
            int64_t *pos = calloc(NF * 5000, sizeof *pos);
            int64_t base[NF + 1] = {0};
            for (int f = 0; f < NF; f++)
                base[f + 1] = base[f] + FILE_ROWS[f];
            (void)base;
            int64_t ok = 0;
            for (int64_t i = 0; i < all.n; i++) {
                int64_t id = (int64_t)all.r[i].d[0];
                pos[(id / 1000000) * 5000 + id % 1000000] = i + 1;
            }
            for (int64_t i = 0; i < x.n; i++) {
                int64_t id = (int64_t)x.r[i].d[0];
                int64_t *p = &pos[(id / 1000000) * 5000 + id % 1000000];
                if (*p > 0 && memcmp(&x.r[i], &all.r[*p - 1], sizeof(row_t)) == 0) {
                    ok++;
                    *p = 0; /* once */
                }
            }
            CHECK_MSG(ok == all.n, "%s: %lld of %lld rows matched once", what, (long long)ok,
                      (long long)all.n);
            free(pos);
            free(x.r);
        }
    }
    /* the first turns: batch i from file i mod N while all files last */
    c = lanes_cfg(dir, 3, 4);
    c.interleave = RAP_INTERLEAVE_BATCH;
    c.interleave_rows = 100;
    rows_t x;
    REQUIRE_OK(read_rows(&c, 0, 100, &x, NULL, msg, sizeof msg));
    for (int b = 0; b < 9 && x.n >= 900; b++)
        CHECK_MSG((int64_t)x.r[b * 100].d[0] / 1000000 == b % 3, "batch %d from file %lld", b,
                  (long long)x.r[b * 100].d[0] / 1000000);
    free(x.r);
    /* max_rows counts lines (rejects too) in the rule's order */
    c = lanes_cfg(dir, 3, 4);
    c.interleave = RAP_INTERLEAVE_BATCH;
    c.interleave_rows = 250;
    c.max_rows = 3001;
    int64_t n = expected_order(3, 250, 3001, ids, &first_bad);
    rap_reader_stats st;
    REQUIRE_OK(read_rows(&c, 0, 512, &x, &st, msg, sizeof msg));
    check_ids(t, &x, ids, n, "max_rows 3001");
    CHECK(st.rows_read == 3001);
    free(x.r);
    /* bad_rows fail: the rows before the first reject the rule reaches */
    c.max_rows = 0;
    c.bad_rows = RAP_BAD_FAIL;
    n = expected_order(3, 250, 0, ids, &first_bad);
    REQUIRE(first_bad >= 0);
    rap_status s = read_rows(&c, 0, 512, &x, NULL, msg, sizeof msg);
    CHECK(s == RAP_ERR_DATA);
    check_ids(t, &x, ids, first_bad, "bad_rows fail");
    CHECK_MSG(strstr(msg, "/f") && strstr(msg, ": expected"), "message: %s", msg);
    free(x.r);
    free(all.r);
    free(ids);
}

RAP_TEST(lanes_errors_and_threads)
{
    const char *dir = tpath("lanes_err");
    mkdir(dir, 0755);
    char p[600], l[1024];
    /* a.tsv 300 good rows, b.gz corrupt after 200 rows' worth, c.tsv 300 */
    for (int f = 0; f < 3; f++) {
        snprintf(p, sizeof p, "%s/%c%s", dir, 'a' + f, f == 1 ? ".gz" : ".tsv");
        if (f == 1) {
            char *text = malloc(3000 * 1024);
            size_t n = 0;
            for (int64_t i = 0; i < 3000; i++)
                n += (size_t)put_line(text + n, 2, i);
            uLongf zn = compressBound(n) + 64;
            unsigned char *z = malloc(zn);
            /* a gzip member by hand: header, raw deflate, no trailer, garbage */
            z_stream zs;
            memset(&zs, 0, sizeof zs);
            deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
            zs.next_in = (Bytef *)text;
            zs.avail_in = (uInt)n;
            zs.next_out = z;
            zs.avail_out = (uInt)zn;
            deflate(&zs, Z_FINISH);
            size_t k = zs.total_out;
            deflateEnd(&zs);
            for (size_t j = k * 2 / 3; j < k * 2 / 3 + 64; j++)
                z[j] ^= 0x5a;
            FILE *o = fopen(p, "wb");
            fwrite(z, 1, k, o);
            fclose(o);
            free(z);
            free(text);
        } else {
            FILE *o = fopen(p, "wb");
            for (int64_t i = 0; i < 300; i++)
                fwrite(l, 1, (size_t)put_line(l, 2, i), o);
            fclose(o);
        }
    }
    rows_t one, x;
    char m1[512], mx[512];
    rap_reader_config c = lanes_cfg(dir, 1, 2);
    rap_status s1 = read_rows(&c, 0, 128, &one, NULL, m1, sizeof m1);
    CHECK(s1 == RAP_ERR_IO && strstr(m1, "b.gz: corrupt gzip data (member 1)"));
    CHECK(one.n >= 300 && one.n < 3300);
    c = lanes_cfg(dir, 3, 4); /* file order: the same rows, then the same error */
    rap_status sx = read_rows(&c, 0, 128, &x, NULL, mx, sizeof mx);
    CHECK(sx == s1 && !strcmp(mx, m1));
    CHECK(x.n == one.n && memcmp(x.r, one.r, (size_t)one.n * sizeof(row_t)) == 0);
    free(x.r);
    free(one.r);

    /* the split of the thread budget */
    rap_reader_threads th;
    c = lanes_cfg(dir, 2, 8);
    REQUIRE_OK(rap_reader_plan_threads(&c, &th));
    CHECK(th.files == 3 && th.lanes == 2 && th.parsers == 6 && th.total == 8 && th.over == 0);
    c.inflate_threads = 16; /* no more lanes than files */
    REQUIRE_OK(rap_reader_plan_threads(&c, &th));
    CHECK(th.lanes == 3 && th.parsers == 5);
    c.threads = 2; /* a lane each and a parser: one over a budget of 2 */
    REQUIRE_OK(rap_reader_plan_threads(&c, &th));
    CHECK(th.lanes == 3 && th.parsers == 1 && th.total == 4 && th.over == 2);
    char line[256];
    rap_reader_threads_line(&th, line, sizeof line);
    CHECK_MSG(strstr(line, "3 reading+inflating") && strstr(line, "1 parsing = 4 threads") &&
                  strstr(line, "2 over"),
              "line: %s", line);
    c.follow = true; /* a followed directory: one lane */
    REQUIRE_OK(rap_reader_plan_threads(&c, &th));
    CHECK(th.lanes == 1);
    snprintf(p, sizeof p, "%s/a.tsv", dir);
    c = lanes_cfg(p, 4, 0); /* one file: one lane; 0 = the cores */
    REQUIRE_OK(rap_reader_plan_threads(&c, &th));
    CHECK(th.lanes == 1 && th.budget == rap_ncores() && th.total == (rap_ncores() > 1 ? rap_ncores() : 2));
    c.interleave = RAP_INTERLEAVE_BATCH; /* without rows a turn */
    rap_reader *rd;
    CHECK(rap_reader_open(&c, &rd) == RAP_ERR_ARG);
    CHECK(strstr(rap_last_error(), "interleave_rows") != NULL);
}

/* ------------------------------------------------------ line cutter */

/* Random Criteo text with every kind of line the parser rejects: too many
 * or few fields, bad label, binary bytes (in a long line's dropped tail
 * too), lines longer than max_line, '\r' inside and at the end, empty
 * lines, and no '\n' at the very end. */
static char *messy_text(uint64_t seed, int64_t lines, int64_t max_line, size_t *n)
{
    size_t cap = (size_t)lines * 400 + (size_t)max_line * 8 * 50, k = 0;
    char *p = malloc(cap);
    uint64_t s = seed;
    for (int64_t i = 0; i < lines; i++) {
        uint64_t z = rap_splitmix64(&s);
        int kind = (int)(z % 40);
        if (kind == 0) { /* empty */
        } else if (kind == 1) {
            k += (size_t)sprintf(p + k, "1\t2\t3");
        } else if (kind == 2 || kind == 3) { /* longer than max_line, maybe binary late */
            int64_t len = max_line + 1 + (int64_t)(z >> 40) % (3 * max_line);
            for (int64_t j = 0; j < len; j++)
                p[k++] = (j % 41 == 40) ? '\t' : (char)('0' + j % 10);
            if (kind == 3)
                p[k - 3] = (z & 2) ? '\x07' : '\r';
        } else {
            k += (size_t)put_line(p + k, (int)(z % 5), i) - 1; /* without '\n' */
            if (kind == 4)
                p[k - 5] = '\x80';
            if (kind == 5)
                p[k - 9] = '\r';
            if (kind == 6)
                p[0 + k - 1] = 'g'; /* a bad hex digit (or int) */
        }
        if (kind == 7 || kind == 2)
            p[k++] = '\r'; /* CRLF */
        if (i < lines - 1)
            p[k++] = '\n';
    }
    *n = k;
    return p;
}

/* The cutter's result: rows parsed line by line, and the rejects. */
typedef struct {
    rows_t rows;
    int64_t rejected[RAP_REJ_COUNT];
    char example[RAP_REJ_COUNT][RAP_REJ_EXAMPLES][256];
    int64_t lines, batches;
} cut_t;

static rap_status cut_file(rap_test_ctx *t, const char *path, const rap_lines_config *lc,
                           cut_t *o)
{
    memset(o, 0, sizeof *o);
    rap_lines *c;
    RAP_TRY(rap_lines_create(lc, &c));
    rap_source *src;
    rap_status st = rap_source_open(path, &src);
    if (st != RAP_OK) {
        rap_lines_free(c);
        return st;
    }
    rap_lines_start(c, src);
    rap_line_batch b;
    while ((st = rap_lines_next(c, &b)) == RAP_OK && b.n > 0) {
        CHECK(b.n <= lc->max_lines && b.start[0] == 0 && b.start[b.n] == b.bytes);
        CHECK(b.first_line == o->lines + 1 && !strcmp(b.file, path));
        for (int64_t i = 0; i < b.n; i++) {
            const char *s = b.text + b.start[i];
            size_t len = (size_t)(b.start[i + 1] - b.start[i] - 1);
            CHECK(s[len] == '\n' && memchr(s, '\n', len) == NULL);
            row_t r;
            memset(&r, 0, sizeof r);
            char msg[512];
            int why = rap_parse_line(s, len, lc->max_line, &r.label, r.d, r.dv, r.s, r.sv, msg,
                                     sizeof msg);
            if (why < 0) {
                for (int j = 0; j < NS; j++)
                    if (!r.sv[j])
                        r.s[j] = 0;
                rows_push(&o->rows, &r);
            } else {
                int64_t e = o->rejected[why]++;
                if (e < RAP_REJ_EXAMPLES)
                    snprintf(o->example[why][e], 256, "%s:%lld", b.file,
                             (long long)(b.first_line + i));
            }
        }
        o->lines += b.n;
        o->batches++;
    }
    rap_source_close(src);
    rap_lines_free(c);
    return st;
}

RAP_TEST(lines_cutter_matches_reader)
{
    const int64_t max_line = 300;
    size_t n;
    char *text = messy_text(77, 6000, max_line, &n);
    const char *plain = tpath("lines_messy.tsv"), *gz = tpath("lines_messy.gz");
    FILE *f = fopen(plain, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    gzFile g = gzopen(gz, "wb6");
    gzwrite(g, text, (unsigned)n);
    gzclose(g);
    for (int file = 0; file < 2; file++) {
        const char *path = file ? gz : plain;
        rap_reader_config rc = rap_reader_defaults();
        rc.input = path;
        rc.threads = 2;
        rc.max_line = max_line;
        rows_t want;
        rap_reader_stats st;
        char msg[512];
        REQUIRE_OK(read_rows(&rc, 4 * 1024, 1000, &want, &st, msg, sizeof msg));
        CHECK(st.rows_rejected > 300 && st.rejected[RAP_REJ_LONG] > 50 &&
              st.rejected[RAP_REJ_BINARY] > 50 && st.rejected[RAP_REJ_FIELDS] > 50);
        const int64_t Bs[] = {1, 7, 1000, 100000};
        const size_t reads[] = {3, 301, 0, 65536};
        const size_t bufs[] = {0, 1300, 5000, 0};
        for (int k = 0; k < 4; k++) {
            rap_lines_config lc = {Bs[k], max_line, bufs[k], reads[k]};
            if (k == 0 && file == 0)
                lc.read_bytes = 1; /* one byte at a time: every split */
            cut_t o;
            REQUIRE_OK(cut_file(t, path, &lc, &o));
            CHECK_MSG(o.rows.n == want.n &&
                          memcmp(o.rows.r, want.r, (size_t)want.n * sizeof(row_t)) == 0,
                      "%s, B %lld: %lld rows, the reader %lld", path, (long long)Bs[k],
                      (long long)o.rows.n, (long long)want.n);
            CHECK(o.lines == st.rows_read);
            CHECK(memcmp(o.rejected, st.rejected, sizeof o.rejected) == 0);
            CHECK_MSG(memcmp(o.example, st.example, sizeof o.example) == 0,
                      "%s, B %lld: reject positions differ (%s vs %s)", path, (long long)Bs[k],
                      o.example[RAP_REJ_LONG][0], st.example[RAP_REJ_LONG][0]);
            if (Bs[k] == 7)
                CHECK(o.batches >= o.lines / 7);
            free(o.rows.r);
        }
        free(want.r);
    }
    /* a line of max_line bytes exactly is whole; one more byte is long */
    const char *edge = tpath("lines_edge.tsv");
    f = fopen(edge, "wb");
    for (int i = 0; i < 2; i++) {
        for (int64_t j = 0; j < max_line + i; j++)
            fputc('a', f);
        fputs("\r\n", f);
    }
    fclose(f);
    rap_lines_config lc = {10, max_line, 0, 0};
    cut_t o;
    REQUIRE_OK(cut_file(t, edge, &lc, &o));
    CHECK(o.lines == 2 && o.rejected[RAP_REJ_FIELDS] == 1 && o.rejected[RAP_REJ_LONG] == 1);
    free(text);
}

RAP_TEST(lines_cutter_config)
{
    rap_lines *c;
    rap_lines_config lc = {0, 100, 0, 0};
    CHECK(rap_lines_create(&lc, &c) == RAP_ERR_ARG);
    lc.max_lines = 5;
    lc.buf_bytes = (size_t)2 << 30;
    CHECK(rap_lines_create(&lc, &c) == RAP_ERR_ARG);
    lc.buf_bytes = 0;
    REQUIRE_OK(rap_lines_create(&lc, &c));
    rap_line_batch b;
    CHECK(rap_lines_next(c, &b) == RAP_ERR_ARG); /* no source */
    /* an empty file: no lines; a file of one byte without '\n': one line */
    const char *e = tpath("lines_empty.tsv"), *one = tpath("lines_one.tsv");
    FILE *f = fopen(e, "wb");
    fclose(f);
    f = fopen(one, "wb");
    fputc('7', f);
    fclose(f);
    rap_source *s;
    REQUIRE_OK(rap_source_open(e, &s));
    rap_lines_start(c, s);
    CHECK_OK(rap_lines_next(c, &b));
    CHECK(b.n == 0);
    rap_source_close(s);
    REQUIRE_OK(rap_source_open(one, &s));
    rap_lines_start(c, s);
    CHECK_OK(rap_lines_next(c, &b));
    CHECK(b.n == 1 && b.bytes == 2 && b.text[0] == '7' && b.text[1] == '\n');
    CHECK_OK(rap_lines_next(c, &b));
    CHECK(b.n == 0);
    rap_source_close(s);
    rap_lines_free(c);
}
