/* test_reader.c -- the Criteo TSV reader: values, every reject reason and
 * its message, accounting, gzip, directories, stdin, follow, thread-count
 * invariance, batch boundaries, huge lines and random garbage. */
#include "test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "data/parse.h"
#include "data/reader_internal.h"

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

/* ------------------------------------------------------------ helpers */

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
    uint64_t hash;   /* FNV-1a over every batch block handed out */
    int64_t batches;
} rows_t;

static void rows_free(rows_t *x)
{
    free(x->r);
    memset(x, 0, sizeof *x);
}

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rap_test_tmpdir(), name);
    return p;
}

static void write_bytes(const char *path, const char *data, size_t n, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f) {
        perror(path);
        abort();
    }
    if (n && fwrite(data, 1, n, f) != n)
        abort();
    fclose(f);
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text), "wb");
}

/* A deterministic good Criteo line for (seed, i), with about 10 % nulls,
 * negative integers and mixed-case hex. Written to out with its '\n';
 * returns its length. int_0 is always i (so order can be checked). */
static int good_line(char *out, uint64_t seed, int64_t i)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)i;
    int n = sprintf(out, "%d\t%lld", (int)(rap_splitmix64(&s) & 1), (long long)i);
    for (int j = 1; j < ND; j++) {
        uint64_t z = rap_splitmix64(&s);
        if (z % 10 == 0)
            n += sprintf(out + n, "\t");
        else
            n += sprintf(out + n, "\t%lld", (long long)((int64_t)(z >> 40) % 5000) - 3);
    }
    for (int j = 0; j < NS; j++) {
        uint64_t z = rap_splitmix64(&s);
        if (z % 10 == 0)
            n += sprintf(out + n, "\t");
        else
            n += sprintf(out + n, (z & 1024) ? "\t%08x" : "\t%X", (unsigned)(z >> 32));
    }
    out[n++] = '\n';
    out[n] = 0;
    return n;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ULL;
    return h;
}

/* Appends the rows of batch b to x (checking that first_row follows on). */
static void take_batch(rap_test_ctx *t, const rap_batch *b, rows_t *x)
{
    CHECK_MSG(b->first_row == x->n, "first_row %lld, expected %lld", (long long)b->first_row,
              (long long)x->n);
    if (x->n + b->rows > x->cap) {
        x->cap = (x->n + b->rows) * 2 + 16;
        x->r = realloc(x->r, (size_t)x->cap * sizeof *x->r);
    }
    int64_t B = b->cap;
    for (int64_t i = 0; i < b->rows; i++) {
        row_t *r = &x->r[x->n + i];
        memset(r, 0, sizeof *r);
        r->label = b->label[i];
        for (int j = 0; j < ND; j++) {
            r->d[j] = b->dense[j * B + i];
            r->dv[j] = b->dense_valid[j * B + i];
        }
        for (int j = 0; j < NS; j++) {
            const int64_t *off = b->sparse_off + j * (B + 1);
            int64_t len = off[i + 1] - off[i];
            r->sv[j] = b->sparse_valid[j * B + i];
            CHECK(len == r->sv[j]);
            if (len == 1)
                r->s[j] = b->sparse_ids[j * B + off[i]];
        }
    }
    x->n += b->rows;
    x->hash = fnv(x->hash ? x->hash : 1469598103934665603ULL, b->block, b->block_bytes);
    x->batches++;
}

/* Reads everything from cfg with batches of bcap rows. Returns the status of
 * the last rap_reader_next (RAP_OK at a clean end). */
static rap_status read_rows(rap_test_ctx *t, const rap_reader_config *cfg, size_t chunk,
                            int64_t bcap, rows_t *x, rap_reader_stats *st)
{
    rap_reader *rd;
    memset(x, 0, sizeof *x);
    rap_status s = rap_reader_open_ex(cfg, chunk, &rd);
    if (s != RAP_OK)
        return s;
    rap_batch b;
    s = rap_batch_create(&b, rap_schema_criteo(), bcap, false);
    if (s != RAP_OK) {
        rap_reader_close(rd);
        return s;
    }
    for (;;) {
        s = rap_reader_next(rd, &b);
        if (s != RAP_OK || b.rows == 0)
            break;
        take_batch(t, &b, x);
    }
    if (st)
        rap_reader_get_stats(rd, st);
    rap_batch_free(&b);
    rap_reader_close(rd);
    return s;
}

static rap_reader_config cfg_for(const char *input)
{
    rap_reader_config c = rap_reader_defaults();
    c.input = input;
    c.threads = 2;
    return c;
}

/* The row that rap_parse_line makes of line (expected values). */
static int ref_row(const char *line, size_t len, int64_t max_line, row_t *r)
{
    char msg[512];
    memset(r, 0, sizeof *r);
    return rap_parse_line(line, len, max_line, &r->label, r->d, r->dv, r->s, r->sv, msg,
                          sizeof msg);
}

/* ------------------------------------------------------------- tests */

RAP_TEST(reader_defaults)
{
    rap_reader_config c = rap_reader_defaults();
    CHECK(c.threads == 0 && c.bad_rows == RAP_BAD_SKIP && !c.follow);
    CHECK(c.idle_timeout_s == 0 && c.max_line == 65536 && c.max_rows == 0);
    CHECK(strcmp(rap_reject_reason_name(RAP_REJ_FIELDS), "fields") == 0);
    CHECK(strcmp(rap_reject_reason_name(RAP_REJ_BINARY), "binary") == 0);
    CHECK(strcmp(rap_reject_reason_name(RAP_REJ_RANGE), "range") == 0);
    rap_reader *r = NULL;
    CHECK(rap_reader_open(&c, &r) == RAP_ERR_ARG && r == NULL); /* no input */
    c.input = "-";
    c.max_line = 0;
    CHECK(rap_reader_open(&c, &r) == RAP_ERR_ARG);
}

RAP_TEST(reader_values)
{
    /* fields: label, 13 ints, 26 cats */
    char line1[1024], line2[1024], data[4096];
    int n = sprintf(line1, "1\t5\t-3\t\t2147483647\t-2147483648\t0\t-0\t00000000000007\t9\t10\t11\t12\t13"
                           "\t05db9164\t\tFFFFFFFF\tabcdef\t0\t1");
    for (int j = 6; j < NS; j++)
        n += sprintf(line1 + n, "\t%x", j);
    sprintf(line2, "0");
    for (int j = 0; j < ND + NS; j++)
        strcat(line2, "\t");
    /* line 2 with CRLF; a 3rd line (= line1) with no final newline */
    snprintf(data, sizeof data, "%s\n%s\r\n%s", line1, line2, line1);
    const char *path = tmp_path("values.tsv");
    write_text(path, data);
    rap_reader_config c = cfg_for(path);
    rows_t x;
    rap_reader_stats st;
    REQUIRE_OK(read_rows(t, &c, 0, 16, &x, &st));
    REQUIRE(x.n == 3);
    const row_t *r = &x.r[0];
    CHECK(r->label == 1.0f);
    CHECK(r->d[0] == 5.0f && r->dv[0] == 1);
    CHECK(r->d[1] == -3.0f && r->dv[1] == 1);
    CHECK(r->d[2] == 0.0f && r->dv[2] == 0);
    CHECK(r->d[3] == 2147483647.0f && r->d[4] == -2147483648.0f);
    CHECK(r->d[5] == 0.0f && r->dv[5] == 1);
    CHECK(r->d[6] == 0.0f && !signbit(r->d[6])); /* "-0" is +0 */
    CHECK(r->d[7] == 7.0f);                      /* leading zeros */
    CHECK(r->d[12] == 13.0f);
    CHECK(r->s[0] == 98275684 && r->sv[0] == 1); /* 05db9164 */
    CHECK(r->s[1] == 0 && r->sv[1] == 0);
    CHECK(r->s[2] == 4294967295LL);
    CHECK(r->s[3] == 0xabcdef && r->s[4] == 0 && r->sv[4] == 1 && r->s[5] == 1);
    CHECK(r->s[25] == 25);
    const row_t *z = &x.r[1];
    CHECK(z->label == 0.0f);
    for (int j = 0; j < ND; j++)
        CHECK(z->dv[j] == 0 && z->d[j] == 0.0f);
    for (int j = 0; j < NS; j++)
        CHECK(z->sv[j] == 0);
    CHECK(memcmp(&x.r[2], &x.r[0], sizeof(row_t)) == 0);
    CHECK(st.rows_read == 3 && st.rows_used == 3 && st.rows_rejected == 0);
    CHECK(st.files == 1 && st.bytes_read == (int64_t)strlen(data));
    rows_free(&x);
}

/* A file of two good lines and then `bad`, read with bad_rows fail: the
 * first next() gives the two rows, the second the error `want`. */
static void expect_fail(rap_test_ctx *t, const char *bad, size_t bad_len, int64_t max_line,
                        const char *want)
{
    static int k;
    char name[64];
    snprintf(name, sizeof name, "fail%d.tsv", k++);
    const char *path = tmp_path(name);
    char good[1024];
    int g = good_line(good, 1, 0);
    FILE *f = fopen(path, "wb");
    fwrite(good, 1, (size_t)g, f);
    fwrite(good, 1, (size_t)g, f);
    fwrite(bad, 1, bad_len, f);
    fwrite("\n", 1, 1, f);
    fwrite(good, 1, (size_t)g, f);
    fclose(f);
    rap_reader_config c = cfg_for(path);
    c.bad_rows = RAP_BAD_FAIL;
    c.max_line = max_line;
    rap_reader *rd;
    REQUIRE_OK(rap_reader_open_ex(&c, 0, &rd));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 10, false));
    rap_status s = rap_reader_next(rd, &b);
    CHECK(s == RAP_OK && b.rows == 2);
    s = rap_reader_next(rd, &b);
    CHECK(s == RAP_ERR_DATA);
    char exp[1024];
    snprintf(exp, sizeof exp, "%s:3: %s", path, want);
    CHECK_MSG(strcmp(rap_last_error(), exp) == 0, "message \"%s\", expected \"%s\"",
              rap_last_error(), exp);
    CHECK(rap_reader_next(rd, &b) == RAP_ERR_DATA); /* sticky */
    rap_reader_stats st;
    rap_reader_get_stats(rd, &st);
    CHECK(st.rows_used == 2 && st.rows_rejected == 1 && st.rows_read == 3);
    rap_batch_free(&b);
    rap_reader_close(rd);
}

/* A good line with field f (0 label, 1..13 ints, 14.. cats) replaced. */
static int with_field(char *out, int f, const char *v)
{
    int n = 0;
    for (int i = 0; i < 40; i++) {
        const char *x = i == f ? v : (i == 0 ? "1" : (i <= ND ? "7" : "0a"));
        n += sprintf(out + n, "%s%s", i ? "\t" : "", x);
    }
    return n;
}

RAP_TEST(reader_reject_messages)
{
    char l[70000];
    int n;
    n = with_field(l, 39, "ff");
    n -= 3; /* drop the last field: 39 fields */
    expect_fail(t, l, (size_t)n, 65536, "expected 40 tab-separated fields, got 39");
    expect_fail(t, "", 0, 65536, "expected 40 tab-separated fields, got 1");
    n = with_field(l, 39, "ff\t1");
    expect_fail(t, l, (size_t)n, 65536, "expected 40 tab-separated fields, got 41");
    n = with_field(l, 0, "2");
    expect_fail(t, l, (size_t)n, 65536, "expected label 0 or 1, got \"2\"");
    n = with_field(l, 0, "");
    expect_fail(t, l, (size_t)n, 65536, "expected label 0 or 1, got \"\"");
    n = with_field(l, 0, "01");
    expect_fail(t, l, (size_t)n, 65536, "expected label 0 or 1, got \"01\"");
    n = with_field(l, 4, "1x");
    expect_fail(t, l, (size_t)n, 65536, "expected an integer in int_3, got \"1x\"");
    n = with_field(l, 1, "-");
    expect_fail(t, l, (size_t)n, 65536, "expected an integer in int_0, got \"-\"");
    n = with_field(l, 2, "+5");
    expect_fail(t, l, (size_t)n, 65536, "expected an integer in int_1, got \"+5\"");
    n = with_field(l, 1, "2147483648");
    expect_fail(t, l, (size_t)n, 65536,
                "expected int_0 in [-2147483648, 2147483647], got \"2147483648\"");
    n = with_field(l, 13, "-2147483649");
    expect_fail(t, l, (size_t)n, 65536,
                "expected int_12 in [-2147483648, 2147483647], got \"-2147483649\"");
    n = with_field(l, 16, "xyz");
    expect_fail(t, l, (size_t)n, 65536, "expected 1 to 8 hex digits in cat_2, got \"xyz\"");
    n = with_field(l, 18, "123456789");
    expect_fail(t, l, (size_t)n, 65536,
                "expected at most 8 hex digits in cat_4, got \"123456789\"");
    n = with_field(l, 20, "0x12");
    expect_fail(t, l, (size_t)n, 65536, "expected 1 to 8 hex digits in cat_6, got \"0x12\"");
    /* binary: NUL, a '\r' inside the line, a byte >= 0x80, DEL; before all else */
    n = with_field(l, 5, "12");
    l[10] = 0;
    expect_fail(t, l, (size_t)n, 65536, "expected printable text, got byte 0x00 at byte 11");
    n = with_field(l, 5, "1\r2");
    expect_fail(t, l, (size_t)n, 65536, "expected printable text, got byte 0x0d at byte 12");
    n = with_field(l, 17, "\xc3\xa9");
    expect_fail(t, l, (size_t)n, 65536, "expected printable text, got byte 0xc3 at byte 38");
    n = with_field(l, 0, "\x7f");
    expect_fail(t, l, (size_t)n, 65536, "expected printable text, got byte 0x7f at byte 1");
    expect_fail(t, "1\t\x01", 3, 65536, "expected printable text, got byte 0x01 at byte 3");
    /* long: over max_line (but binary wins over long) */
    char zeros[1200];
    memset(zeros, '0', 1100);
    zeros[1100] = 0;
    n = with_field(l, 1, zeros);
    expect_fail(t, l, (size_t)n, 1000, "expected a line of at most 1000 bytes, got a longer one");
    memset(l, 'a', 69000);
    expect_fail(t, l, 69000, 65536, "expected a line of at most 65536 bytes, got a longer one");
    l[68000] = 0x02;
    expect_fail(t, l, 69000, 65536, "expected printable text, got byte 0x02 at byte 68001");
    /* precedence: fields before label, label before int, int before range,
     * range of an int before a bad categorical */
    n = sprintf(l, "5\tx\t1");
    expect_fail(t, l, (size_t)n, 65536, "expected 40 tab-separated fields, got 3");
    n = with_field(l, 0, "x");
    l[4] = 'q'; /* int_1 "q" too */
    expect_fail(t, l, (size_t)n, 65536, "expected label 0 or 1, got \"x\"");
    n = with_field(l, 1, "99999999999");
    l[n - 1] = 'z'; /* cat_25 "0z" */
    l[16] = 'q'; /* int_2 "q" */
    expect_fail(t, l, (size_t)n, 65536, "expected an integer in int_2, got \"q\"");
    n = with_field(l, 9, "99999999999");
    l[n - 1] = 'z';
    expect_fail(t, l, (size_t)n, 65536,
                "expected int_8 in [-2147483648, 2147483647], got \"99999999999\"");
    n = with_field(l, 15, "123456789");
    l[n - 1] = 'z';
    expect_fail(t, l, (size_t)n, 65536, "expected 1 to 8 hex digits in cat_25, got \"0z\"");
}

RAP_TEST(reader_skip_accounting)
{
    /* 1000 lines: every 10th bad, reasons in turn */
    const char *path = tmp_path("skip.tsv");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    char l[2048];
    int64_t want[RAP_REJ_COUNT] = {0};
    int64_t first_line[RAP_REJ_COUNT];
    for (int k = 0; k < RAP_REJ_COUNT; k++)
        first_line[k] = -1;
    int bad_kind = 0;
    for (int64_t i = 0; i < 1000; i++) {
        int n = good_line(l, 2, i);
        if (i % 10 == 3) {
            int why = bad_kind++ % 6;
            int r[] = {RAP_REJ_FIELDS, RAP_REJ_LABEL, RAP_REJ_INT, RAP_REJ_CAT, RAP_REJ_RANGE,
                       RAP_REJ_BINARY};
            switch (why) {
            case 0: n = sprintf(l, "1\t2\t3\n"); break;
            case 1: l[0] = '7'; break;
            case 2: n = with_field(l, 3, "1.5"); l[n++] = '\n'; break;
            case 3: n = with_field(l, 30, "g"); l[n++] = '\n'; break;
            case 4: n = with_field(l, 30, "fffffffff"); l[n++] = '\n'; break;
            case 5: l[5] = 1; break;
            }
            want[r[why]]++;
            if (first_line[r[why]] < 0)
                first_line[r[why]] = i + 1;
        }
        fwrite(l, 1, (size_t)n, f);
    }
    fclose(f);
    rap_reader_config c = cfg_for(path);
    rows_t x;
    rap_reader_stats st;
    REQUIRE_OK(read_rows(t, &c, 4096, 64, &x, &st));
    CHECK(st.rows_read == 1000 && st.rows_used == 900 && st.rows_rejected == 100);
    CHECK(x.n == 900);
    for (int k = 0; k < RAP_REJ_COUNT; k++) {
        CHECK_MSG(st.rejected[k] == want[k], "%s: %lld, expected %lld",
                  rap_reject_reason_name((rap_reject_reason)k), (long long)st.rejected[k],
                  (long long)want[k]);
        if (first_line[k] > 0) {
            char e[600];
            snprintf(e, sizeof e, "%s:%lld", path, (long long)first_line[k]);
            CHECK_MSG(strcmp(st.example[k][0], e) == 0, "example %s, expected %s",
                      st.example[k][0], e);
            CHECK(st.example[k][RAP_REJ_EXAMPLES - 1][0] != 0);
        }
    }
    /* int_0 of the used rows is their line index, in order */
    int64_t j = 0;
    for (int64_t i = 0; i < 1000; i++) {
        if (i % 10 == 3)
            continue;
        if (j < x.n && x.r[j].d[0] != (float)i) {
            CHECK_MSG(0, "row %lld holds line %g", (long long)j, x.r[j].d[0]);
            break;
        }
        j++;
    }
    /* print_stats */
    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    rap_reader_print_stats(&st, m);
    fclose(m);
    CHECK(strstr(buf, "rows read 1000 = used 900 + rejected 100\n") == buf);
    CHECK(strstr(buf, "fields") && strstr(buf, "binary"));
    char e[600];
    snprintf(e, sizeof e, "%s:%lld", path, (long long)first_line[RAP_REJ_LABEL]);
    CHECK(strstr(buf, e) != NULL);
    free(buf);
    rows_free(&x);
}

static void write_gz(const char *path, int64_t from, int64_t to, const char *mode)
{
    gzFile g = gzopen(path, mode);
    char l[2048];
    for (int64_t i = from; i < to; i++) {
        int n = good_line(l, 3, i);
        gzwrite(g, l, (unsigned)n);
    }
    gzclose(g);
}

static void write_plain(const char *path, int64_t from, int64_t to)
{
    FILE *f = fopen(path, "wb");
    char l[2048];
    for (int64_t i = from; i < to; i++) {
        int n = good_line(l, 3, i);
        fwrite(l, 1, (size_t)n, f);
    }
    fclose(f);
}

static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(*n + 1);
    if (fread(p, 1, *n, f) != *n)
        abort();
    fclose(f);
    return p;
}

RAP_TEST(reader_gzip)
{
    const char *plain = tmp_path("gz_plain.tsv"), *gz = tmp_path("gz_one.data");
    write_plain(plain, 0, 5000);
    write_gz(gz, 0, 5000, "wb6");
    rap_reader_config c = cfg_for(plain);
    rows_t a, b;
    rap_reader_stats sa, sb;
    REQUIRE_OK(read_rows(t, &c, 0, 1000, &a, &sa));
    c.input = gz; /* no .gz in the name: found by the magic bytes */
    REQUIRE_OK(read_rows(t, &c, 0, 1000, &b, &sb));
    CHECK(a.n == 5000 && b.n == 5000);
    CHECK(a.n == b.n && memcmp(a.r, b.r, (size_t)a.n * sizeof(row_t)) == 0);
    CHECK(sa.bytes_read == sb.bytes_read && sb.rows_read == 5000);
    rows_free(&b);

    /* two members, concatenated */
    const char *m1 = tmp_path("gz_m1.gz"), *m2 = tmp_path("gz_m2.gz"), *cat = tmp_path("gz_cat.gz");
    write_gz(m1, 0, 2000, "wb1");
    write_gz(m2, 2000, 5000, "wb9");
    size_t n1, n2;
    char *p1 = slurp(m1, &n1), *p2 = slurp(m2, &n2);
    write_bytes(cat, p1, n1, "wb");
    write_bytes(cat, p2, n2, "ab");
    c.input = cat;
    REQUIRE_OK(read_rows(t, &c, 0, 777, &b, &sb));
    CHECK(b.n == 5000 && memcmp(a.r, b.r, (size_t)a.n * sizeof(row_t)) == 0);
    rows_free(&b);

    /* corrupt: bytes changed in the middle */
    char *bad = malloc(n1);
    memcpy(bad, p1, n1);
    for (size_t i = n1 / 2; i < n1 / 2 + 64; i++)
        bad[i] ^= 0x5a;
    const char *cor = tmp_path("gz_corrupt.gz");
    write_bytes(cor, bad, n1, "wb");
    c.input = cor;
    rap_status s = read_rows(t, &c, 0, 1000, &b, NULL);
    CHECK(s == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), cor) && strstr(rap_last_error(), "gzip"), "message: %s",
              rap_last_error());
    rows_free(&b);
    /* truncated */
    const char *tr = tmp_path("gz_trunc.gz");
    write_bytes(tr, p1, n1 - 20, "wb");
    c.input = tr;
    s = read_rows(t, &c, 0, 1000, &b, NULL);
    CHECK(s == RAP_ERR_IO);
    CHECK_MSG(strstr(rap_last_error(), tr) && strstr(rap_last_error(), "truncated"),
              "message: %s", rap_last_error());
    rows_free(&b);
    free(bad);
    free(p1);
    free(p2);
    rows_free(&a);
}

RAP_TEST(reader_missing_and_unreadable)
{
    rap_reader_config c = cfg_for(tmp_path("no_such_file.tsv"));
    rap_reader *r = NULL;
    CHECK(rap_reader_open(&c, &r) == RAP_ERR_IO && r == NULL);
    CHECK_MSG(strstr(rap_last_error(), "no_such_file.tsv: No such file or directory") != NULL,
              "message: %s", rap_last_error());
    if (geteuid() != 0) { /* root reads anything */
        const char *p = tmp_path("noperm.tsv");
        write_text(p, "1\n");
        chmod(p, 0);
        c.input = p;
        CHECK(rap_reader_open(&c, &r) == RAP_ERR_IO);
        CHECK(strstr(rap_last_error(), "Permission denied") != NULL);
    }
    /* empty file: no rows, no error */
    const char *e = tmp_path("empty.tsv");
    write_text(e, "");
    c.input = e;
    rows_t x;
    rap_reader_stats st;
    REQUIRE_OK(read_rows(t, &c, 0, 10, &x, &st));
    CHECK(x.n == 0 && st.rows_read == 0 && st.files == 1);
    /* one byte, no newline: one (bad) row */
    write_text(e, "1");
    REQUIRE_OK(read_rows(t, &c, 0, 10, &x, &st));
    CHECK(st.rows_read == 1 && st.rejected[RAP_REJ_FIELDS] == 1);
    /* "\n" alone: one empty line; the empty string after it is no row */
    write_text(e, "\n");
    REQUIRE_OK(read_rows(t, &c, 0, 10, &x, &st));
    CHECK(st.rows_read == 1 && st.rejected[RAP_REJ_FIELDS] == 1);
}

RAP_TEST(reader_directory_order)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/dir1", rap_test_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0);
    char p[600], sub[600];
    /* names written out of order; c.gz is gzip; .hidden and a subdir skipped */
    snprintf(p, sizeof p, "%s/b.tsv", dir);
    write_plain(p, 100, 200);
    snprintf(p, sizeof p, "%s/a.tsv", dir);
    write_plain(p, 0, 100);
    snprintf(p, sizeof p, "%s/c.gz", dir);
    write_gz(p, 200, 300, "wb");
    snprintf(p, sizeof p, "%s/.hidden", dir);
    write_text(p, "garbage\n");
    snprintf(sub, sizeof sub, "%s/sub", dir);
    REQUIRE(mkdir(sub, 0755) == 0);
    snprintf(p, sizeof p, "%s/zz.tsv", sub);
    write_text(p, "garbage\n");
    /* b.tsv: its 5th line made bad; line numbers restart in each file */
    snprintf(p, sizeof p, "%s/b.tsv", dir);
    size_t n;
    char *txt = slurp(p, &n);
    char *l5 = txt;
    for (int i = 0; i < 4; i++)
        l5 = strchr(l5, '\n') + 1;
    l5[0] = '9';
    write_bytes(p, txt, n, "wb");
    free(txt);
    rap_reader_config c = cfg_for(dir);
    rows_t x;
    rap_reader_stats st;
    REQUIRE_OK(read_rows(t, &c, 0, 33, &x, &st));
    CHECK(st.files == 3 && st.rows_read == 300 && x.n == 299);
    for (int64_t i = 0, j = 0; i < 300 && j < x.n; i++) {
        if (i == 104)
            continue;
        if (x.r[j].d[0] != (float)i) {
            CHECK_MSG(0, "row %lld is line %g", (long long)j, x.r[j].d[0]);
            break;
        }
        j++;
    }
    char e[700];
    snprintf(e, sizeof e, "%s/b.tsv:5", dir);
    CHECK_MSG(strcmp(st.example[RAP_REJ_LABEL][0], e) == 0, "example %s",
              st.example[RAP_REJ_LABEL][0]);
    rows_free(&x);
}

typedef struct {
    int fd;
    const char *data;
    size_t n;
    int pieces;
} pipe_writer;

static void *write_pipe(void *arg)
{
    pipe_writer *w = arg;
    size_t step = w->n / (size_t)w->pieces + 1;
    for (size_t at = 0; at < w->n; at += step) {
        size_t k = at + step > w->n ? w->n - at : step;
        if (write(w->fd, w->data + at, k) != (ssize_t)k)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    close(w->fd);
    return NULL;
}

/* Reads data through a pipe put on fd 0, as "-". */
static rap_status read_stdin(rap_test_ctx *t, const char *data, size_t n, rows_t *x,
                             rap_reader_stats *st)
{
    int saved = dup(0), p[2];
    if (saved < 0 || pipe(p) != 0)
        return RAP_ERR_IO;
    dup2(p[0], 0);
    close(p[0]);
    pipe_writer w = {p[1], data, n, 7};
    pthread_t th;
    pthread_create(&th, NULL, write_pipe, &w);
    rap_reader_config c = cfg_for("-");
    rap_status s = read_rows(t, &c, 0, 500, x, st);
    pthread_join(th, NULL);
    dup2(saved, 0);
    close(saved);
    return s;
}

RAP_TEST(reader_stdin)
{
    const char *plain = tmp_path("stdin.tsv"), *gz = tmp_path("stdin.gz");
    write_plain(plain, 0, 3000);
    write_gz(gz, 0, 3000, "wb");
    size_t n, ng;
    char *d = slurp(plain, &n), *dg = slurp(gz, &ng);
    rows_t a, b, x;
    rap_reader_stats st;
    rap_reader_config c = cfg_for(plain);
    REQUIRE_OK(read_rows(t, &c, 0, 500, &a, NULL));
    REQUIRE_OK(read_stdin(t, d, n, &b, &st));
    CHECK(b.n == 3000 && memcmp(a.r, b.r, (size_t)a.n * sizeof(row_t)) == 0);
    CHECK(st.bytes_read == (int64_t)n);
    REQUIRE_OK(read_stdin(t, dg, ng, &x, &st));
    CHECK(x.n == 3000 && memcmp(a.r, x.r, (size_t)a.n * sizeof(row_t)) == 0);
    /* a bad row on stdin is reported as <stdin>:line */
    d[0] = 'x';
    rows_free(&x);
    REQUIRE_OK(read_stdin(t, d, n, &x, &st));
    CHECK(x.n == 2999 && strcmp(st.example[RAP_REJ_LABEL][0], "<stdin>:1") == 0);
    rows_free(&a);
    rows_free(&b);
    rows_free(&x);
    free(d);
    free(dg);
}

static void ms_sleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void append_lines(const char *path, int64_t from, int64_t to)
{
    FILE *f = fopen(path, "ab");
    char l[2048];
    for (int64_t i = from; i < to; i++) {
        int n = good_line(l, 3, i);
        fwrite(l, 1, (size_t)n, f);
    }
    fclose(f);
}

typedef struct {
    char dir[512];
} follow_writer;

/* Appends to a.tsv in steps (one line in two halves), then starts b.tsv,
 * appends to it, and leaves a last line without its newline. */
static void *follow_write(void *arg)
{
    follow_writer *w = arg;
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/a.tsv", w->dir);
    snprintf(b, sizeof b, "%s/b.tsv", w->dir);
    ms_sleep(150);
    append_lines(a, 10, 20);
    ms_sleep(150);
    char l[2048];
    int n = good_line(l, 3, 20);
    write_bytes(a, l, 30, "ab");
    ms_sleep(200);
    write_bytes(a, l + 30, (size_t)n - 30, "ab");
    ms_sleep(150);
    append_lines(b, 21, 30);
    ms_sleep(150);
    append_lines(b, 30, 40);
    n = good_line(l, 3, 40);
    write_bytes(b, l, (size_t)n - 1, "ab"); /* no '\n': a row once the follow times out */
    return NULL;
}

RAP_TEST(reader_follow_idle)
{
    follow_writer w;
    snprintf(w.dir, sizeof w.dir, "%s/follow", rap_test_tmpdir());
    REQUIRE(mkdir(w.dir, 0755) == 0);
    char a[600];
    snprintf(a, sizeof a, "%s/a.tsv", w.dir);
    append_lines(a, 0, 10);
    rap_reader_config c = cfg_for(w.dir);
    c.follow = true;
    c.idle_timeout_s = 0.8;
    pthread_t th;
    pthread_create(&th, NULL, follow_write, &w);
    double t0 = rap_now();
    rows_t x;
    rap_reader_stats st;
    rap_status s = read_rows(t, &c, 0, 1000, &x, &st);
    double dt = rap_now() - t0;
    pthread_join(th, NULL);
    REQUIRE_OK(s);
    CHECK_MSG(x.n == 41, "rows %lld", (long long)x.n);
    for (int64_t i = 0; i < x.n; i++)
        if (x.r[i].d[0] != (float)i) {
            CHECK_MSG(0, "row %lld holds line %g", (long long)i, x.r[i].d[0]);
            break;
        }
    CHECK(st.files == 2 && st.rows_read == 41);
    CHECK(x.batches > 1); /* rows were handed out while following */
    CHECK_MSG(dt > 1.4 && dt < 5.0, "took %.2f s", dt);
    rows_free(&x);
}

static void *stop_later(void *arg)
{
    ms_sleep(300);
    rap_reader_stop((rap_reader *)arg);
    return NULL;
}

RAP_TEST(reader_follow_stop)
{
    const char *p = tmp_path("follow_stop.tsv");
    write_plain(p, 0, 5);
    write_bytes(p, "1\t2", 3, "ab"); /* a partial line: never completed */
    rap_reader_config c = cfg_for(p);
    c.follow = true; /* and no idle timeout: only stop ends it */
    rap_reader *rd;
    REQUIRE_OK(rap_reader_open(&c, &rd));
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 100, false));
    pthread_t th;
    double t0 = rap_now();
    pthread_create(&th, NULL, stop_later, rd);
    int64_t rows = 0;
    rap_status s;
    while ((s = rap_reader_next(rd, &b)) == RAP_OK && b.rows > 0)
        rows += b.rows;
    double dt = rap_now() - t0;
    pthread_join(th, NULL);
    CHECK(s == RAP_OK && rows == 5);
    CHECK_MSG(dt < 1.5, "stop took %.2f s", dt);
    CHECK(rap_reader_next(rd, &b) == RAP_OK && b.rows == 0);
    rap_reader_stats st;
    rap_reader_get_stats(rd, &st);
    CHECK(st.rows_read == 5 && st.rows_used == 5);
    rap_batch_free(&b);
    rap_reader_close(rd);
}

/* A file with good rows and every kind of bad row, for the invariance and
 * fuzz tests: some CRLF, some long lines (max_line 300), some garbage. */
static size_t make_mixed(char *out, int64_t lines, uint64_t seed)
{
    size_t n = 0;
    uint64_t s = seed;
    char l[4096];
    for (int64_t i = 0; i < lines; i++) {
        int k = good_line(l, seed, i);
        uint64_t z = rap_splitmix64(&s);
        switch (z % 16) {
        case 0: /* a random byte changed */
            l[(z >> 8) % (uint64_t)(k - 1)] = (char)(z >> 32);
            if (l[(z >> 8) % (uint64_t)(k - 1)] == '\n')
                l[(z >> 8) % (uint64_t)(k - 1)] = 'n';
            break;
        case 1: /* random garbage, any byte but '\n' */
            k = (int)((z >> 8) % 120);
            for (int j = 0; j < k; j++) {
                l[j] = (char)(rap_splitmix64(&s) & 0xff);
                if (l[j] == '\n')
                    l[j] = '\t';
            }
            l[k++] = '\n';
            break;
        case 2: /* CRLF */
            l[k - 1] = '\r';
            l[k++] = '\n';
            break;
        case 3: { /* long: 250..1500 bytes, maybe with a binary byte or '\r' late */
            int len = 250 + (int)((z >> 8) % 1250);
            for (int j = 0; j < len; j++)
                l[j] = (j % 9 == 8) ? '\t' : '7';
            if (z & (1 << 20))
                l[len - 1 - (int)((z >> 24) % 200)] = (z & (1 << 21)) ? '\r' : 0x01;
            if (z & (1 << 22))
                l[len - 1] = '\r';
            l[len] = '\n';
            k = len + 1;
            break;
        }
        case 4: /* a field dropped or doubled */
            if (z & 256) {
                char *tb = strchr(l, '\t');
                memmove(tb, tb + 1, (size_t)k - (size_t)(tb - l));
                k--;
            } else {
                memmove(l + 2, l + 1, (size_t)k);
                l[1] = '\t';
                k++;
            }
            break;
        case 5: /* empty line */
            l[0] = '\n';
            k = 1;
            break;
        default:
            break;
        }
        memcpy(out + n, l, (size_t)k);
        n += (size_t)k;
    }
    return n;
}

RAP_TEST(reader_threads_invariance)
{
    const int64_t lines = 20000;
    char *d = malloc((size_t)lines * 1600);
    size_t n = make_mixed(d, lines, 7);
    const char *p = tmp_path("mixed.tsv");
    write_bytes(p, d, n, "wb");
    rap_reader_config c = cfg_for(p);
    c.max_line = 300;
    rows_t a, b, g;
    rap_reader_stats sa, sb, sg;
    c.threads = 1;
    REQUIRE_OK(read_rows(t, &c, 0, 1000, &a, &sa));
    c.threads = 4;
    REQUIRE_OK(read_rows(t, &c, 4096, 1000, &b, &sb)); /* small chunks too */
    CHECK(a.n > 10000 && a.n == b.n && a.batches == b.batches);
    CHECK(a.n == b.n && memcmp(a.r, b.r, (size_t)a.n * sizeof(row_t)) == 0);
    CHECK_MSG(a.hash == b.hash, "batch blocks differ between 1 and 4 threads");
    CHECK(memcmp(&sa, &sb, sizeof sa) == 0);
    CHECK(sa.rows_read == lines && sa.rows_used + sa.rows_rejected == sa.rows_read);
    /* the same as gzip, 3 threads */
    const char *pg = tmp_path("mixed.gz");
    gzFile gf = gzopen(pg, "wb1");
    gzwrite(gf, d, (unsigned)n);
    gzclose(gf);
    c.input = pg;
    c.threads = 3;
    REQUIRE_OK(read_rows(t, &c, 0, 1000, &g, &sg));
    CHECK(g.n == a.n && g.hash == a.hash);
    CHECK(memcmp(sg.rejected, sa.rejected, sizeof sa.rejected) == 0);
    rows_free(&a);
    rows_free(&b);
    rows_free(&g);
    free(d);
}

RAP_TEST(reader_batch_boundaries)
{
    const char *p = tmp_path("bounds.tsv");
    write_plain(p, 0, 100);
    rap_reader_config c = cfg_for(p);
    rap_reader *rd;
    REQUIRE_OK(rap_reader_open_ex(&c, 600, &rd)); /* about 3 lines a chunk */
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 7, false));
    rows_t x = {0};
    int nb = 0;
    rap_status s;
    while ((s = rap_reader_next(rd, &b)) == RAP_OK && b.rows > 0) {
        CHECK(b.rows == (nb < 14 ? 7 : 2));
        CHECK(b.first_row == (int64_t)nb * 7);
        take_batch(t, &b, &x);
        nb++;
    }
    CHECK(s == RAP_OK && nb == 15 && x.n == 100);
    char l[2048];
    for (int64_t i = 0; i < x.n; i++) {
        int k = good_line(l, 3, i);
        row_t r;
        CHECK(ref_row(l, (size_t)k - 1, 65536, &r) < 0);
        if (memcmp(&r, &x.r[i], sizeof r) != 0) {
            CHECK_MSG(0, "row %lld differs", (long long)i);
            break;
        }
    }
    CHECK(rap_reader_next(rd, &b) == RAP_OK && b.rows == 0);
    rap_batch_free(&b);
    rap_reader_close(rd);
    rows_free(&x);
    /* max_rows counts rows read, bad ones too */
    write_text(p, "x\n");
    append_lines(p, 1, 100);
    c.max_rows = 25;
    rap_reader_stats st;
    REQUIRE_OK(read_rows(t, &c, 600, 10, &x, &st));
    CHECK(st.rows_read == 25 && st.rows_used == 24 && x.n == 24);
    rows_free(&x);
}

RAP_TEST(reader_huge_line)
{
    /* good, 20 MB line, good, 3 MB line with a NUL near its end, good,
     * line of exactly max_line (+ '\r'), line of max_line + 1 */
    const char *p = tmp_path("huge.tsv");
    char l[2048];
    int k = good_line(l, 3, 0);
    write_bytes(p, l, (size_t)k, "wb");
    size_t big = 20u << 20;
    char *h = malloc(big + 1);
    memset(h, '5', big);
    h[big] = '\n';
    write_bytes(p, h, big + 1, "ab");
    k = good_line(l, 3, 1);
    write_bytes(p, l, (size_t)k, "ab");
    memset(h, '5', 3u << 20);
    h[(3u << 20) - 10] = 0;
    h[3u << 20] = '\n';
    write_bytes(p, h, (3u << 20) + 1, "ab");
    k = good_line(l, 3, 2);
    write_bytes(p, l, (size_t)k, "ab");
    const int64_t max_line = 1000;
    /* a good row padded to exactly max_line bytes with leading zeros */
    char pad[1200];
    int plen = with_field(pad, 1, "3");
    int extra = (int)max_line - plen;
    memmove(pad + 2 + extra, pad + 2, (size_t)plen - 2);
    memset(pad + 2, '0', (size_t)extra);
    plen = (int)max_line;
    pad[plen] = '\r';
    pad[plen + 1] = '\n';
    write_bytes(p, pad, (size_t)plen + 2, "ab"); /* max_line + '\r': good */
    pad[plen] = '\n';
    write_bytes(p, pad, (size_t)plen + 1, "ab"); /* max_line: good */
    memmove(pad + 3, pad + 2, (size_t)plen);
    pad[2] = '0';
    pad[plen + 1] = '\n';
    write_bytes(p, pad, (size_t)plen + 2, "ab"); /* max_line + 1: long */
    pad[plen + 1] = '\r';
    pad[plen + 2] = '\n';
    write_bytes(p, pad, (size_t)plen + 3, "ab"); /* max_line + 1 + '\r': long */
    free(h);
    for (int th = 1; th <= 2; th++) {
        rap_reader_config c = cfg_for(p);
        c.threads = th;
        c.max_line = max_line;
        rows_t x;
        rap_reader_stats st;
        REQUIRE_OK(read_rows(t, &c, th == 1 ? 0 : 5000, 10, &x, &st));
        CHECK_MSG(st.rows_read == 9 && st.rows_used == 5, "read %lld used %lld",
                  (long long)st.rows_read, (long long)st.rows_used);
        CHECK(st.rejected[RAP_REJ_LONG] == 3 && st.rejected[RAP_REJ_BINARY] == 1);
        char e[600];
        snprintf(e, sizeof e, "%s:4", p);
        CHECK(strcmp(st.example[RAP_REJ_BINARY][0], e) == 0);
        CHECK(x.n == 5 && x.r[2].d[0] == 2.0f && x.r[3].d[0] == 3.0f && x.r[4].d[0] == 3.0f);
        rows_free(&x);
    }
}

RAP_TEST(reader_fuzz)
{
    /* random garbage and mutated rows: no crash, accounting holds, and each
     * line is classified as rap_parse_line classifies it alone */
    const int64_t lines = 6000;
    char *d = malloc((size_t)lines * 1600);
    size_t n = make_mixed(d, lines, 99);
    /* also a burst of pure random bytes, newlines included */
    uint64_t s = 5;
    for (int i = 0; i < 200000; i++)
        d[n++] = (char)(rap_splitmix64(&s) & 0xff);
    const char *p = tmp_path("fuzz.bin");
    write_bytes(p, d, n, "wb");
    const int64_t max_line = 300;
    int64_t want_lines = 0, want_used = 0, want_rej[RAP_REJ_COUNT] = {0};
    row_t *want = malloc((size_t)(lines + 200000) * sizeof(row_t));
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(d + at, '\n', n - at);
        size_t len = nl ? (size_t)(nl - (d + at)) : n - at;
        int why = ref_row(d + at, len, max_line, &want[want_used]);
        if (why < 0)
            want_used++;
        else
            want_rej[why]++;
        want_lines++;
        at += len + 1;
    }
    for (int th = 1; th <= 3; th += 2) {
        rap_reader_config c = cfg_for(p);
        c.threads = th;
        c.max_line = max_line;
        rows_t x;
        rap_reader_stats st;
        REQUIRE_OK(read_rows(t, &c, th == 1 ? 0 : 2000, 333, &x, &st));
        CHECK(st.rows_read == want_lines && st.rows_used == want_used);
        CHECK(st.rows_used + st.rows_rejected == st.rows_read);
        CHECK(memcmp(st.rejected, want_rej, sizeof want_rej) == 0);
        CHECK(st.bytes_read == (int64_t)n);
        CHECK(x.n == want_used);
        for (int64_t i = 0; i < x.n && i < want_used; i++)
            if (memcmp(&x.r[i], &want[i], sizeof(row_t)) != 0) {
                CHECK_MSG(0, "row %lld differs from rap_parse_line", (long long)i);
                break;
            }
        rows_free(&x);
    }
    free(want);
    free(d);
}

typedef struct {
    const char *path;
} gz_writer;

/* Appends two more gzip members to a growing file, with pauses. */
static void *gz_append(void *arg)
{
    gz_writer *w = arg;
    ms_sleep(200);
    write_gz(w->path, 100, 200, "ab");
    ms_sleep(200);
    write_gz(w->path, 200, 300, "ab");
    return NULL;
}

RAP_TEST(reader_follow_gzip)
{
    /* a gzip file that grows by whole members while it is followed */
    gz_writer w = {tmp_path("follow.gz")};
    write_gz(w.path, 0, 100, "wb");
    rap_reader_config c = cfg_for(w.path);
    c.follow = true;
    c.idle_timeout_s = 0.6;
    pthread_t th;
    pthread_create(&th, NULL, gz_append, &w);
    rows_t x;
    rap_reader_stats st;
    rap_status s = read_rows(t, &c, 0, 64, &x, &st);
    pthread_join(th, NULL);
    REQUIRE_OK(s);
    CHECK_MSG(x.n == 300 && st.rows_read == 300, "rows %lld", (long long)x.n);
    for (int64_t i = 0; i < x.n; i++)
        if (x.r[i].d[0] != (float)i) {
            CHECK_MSG(0, "row %lld holds line %g", (long long)i, x.r[i].d[0]);
            break;
        }
    rows_free(&x);
}

static rap_reader *volatile g_sig_reader;

static void on_alarm(int sig)
{
    (void)sig;
    rap_reader_stop(g_sig_reader); /* async-signal-safe: one atomic store */
}

RAP_TEST(reader_stop_from_signal)
{
    /* following stdin (a pipe that stays open), stopped by SIGALRM */
    int saved = dup(0), p[2];
    REQUIRE(saved >= 0 && pipe(p) == 0);
    dup2(p[0], 0);
    close(p[0]);
    char l[2048];
    for (int i = 0; i < 10; i++) {
        int n = good_line(l, 3, i);
        REQUIRE(write(p[1], l, (size_t)n) == n);
    }
    rap_reader_config c = cfg_for("-");
    c.follow = true;
    rap_reader *rd;
    rap_status s = rap_reader_open(&c, &rd);
    if (s != RAP_OK) {
        dup2(saved, 0);
        close(saved);
        close(p[1]);
        REQUIRE_OK(s);
    }
    g_sig_reader = rd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 300000}};
    setitimer(ITIMER_REAL, &it, NULL);
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), 4, false));
    int64_t rows = 0;
    double t0 = rap_now();
    while ((s = rap_reader_next(rd, &b)) == RAP_OK && b.rows > 0)
        rows += b.rows;
    double dt = rap_now() - t0;
    CHECK(s == RAP_OK && rows == 10);
    CHECK_MSG(dt > 0.2 && dt < 1.5, "stopped after %.2f s", dt);
    signal(SIGALRM, SIG_DFL);
    rap_batch_free(&b);
    rap_reader_close(rd);
    close(p[1]);
    dup2(saved, 0);
    close(saved);
}
