/* test_parse_feed.c -- the parse backends inside the reader and the row
 * feed (data/parse_backend.h): the kernels' CPU reference in place of the
 * launches gives, through the same reader and feed, exactly the CPU
 * parser's batches and accounting (rows, rejects, reasons, first lines,
 * bad_rows fail's message) on random text with every kind of malformed
 * line, over files, gzip, directories, lanes, interleave, max_rows, small
 * chunks, the hold-out and resume; the feed's resolution of --parse; on a
 * GPU the kernels' device batches equal the CPU parser's and the device
 * append equals rap_batch_append (skipped without one). */
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/core.h"
#include "data/parse_backend.h"
#include "data/parse_gate.h"
#include "data/parse_ref.h"
#include "data/reader_internal.h"
#include "run/rowfeed.h"
#include "run/train.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define ND RAP_CRITEO_DENSE
#define NS RAP_CRITEO_SPARSE

/* ------------------------------------------------------------ helpers */

static void write_file(const char *path, const char *d, size_t n, bool gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g || gzwrite(g, d, (unsigned)n) != (int)n)
            abort();
        gzclose(g);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n))
        abort();
    fclose(f);
}

/* Every used byte of the batches handed out, in a canonical form: rows,
 * first_row, then per row label, dense + valid, per sparse column the id
 * count, ids and valid. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    int64_t batches;
} dump_t;

static void put(dump_t *d, const void *x, size_t n)
{
    if (d->n + n > d->cap) {
        d->cap = (d->n + n) * 2 + 4096;
        d->p = realloc(d->p, d->cap);
    }
    memcpy(d->p + d->n, x, n);
    d->n += n;
}

static void dump_batch(dump_t *d, const rap_batch *b)
{
    put(d, &b->rows, 8);
    put(d, &b->first_row, 8);
    int64_t B = b->cap;
    for (int64_t i = 0; i < b->rows; i++) {
        put(d, &b->label[i], 4);
        for (int j = 0; j < ND; j++) {
            put(d, &b->dense[j * B + i], 4);
            put(d, &b->dense_valid[j * B + i], 1);
        }
        for (int j = 0; j < NS; j++) {
            const int64_t *off = b->sparse_off + j * (B + 1);
            int64_t c = off[i + 1] - off[i];
            put(d, &c, 8);
            for (int64_t e = off[i]; e < off[i + 1]; e++)
                put(d, &b->sparse_ids[j * B + e], 8);
            put(d, &b->sparse_valid[j * B + i], 1);
        }
    }
    d->batches++;
}

/* A host copy of batch b (device or host) in h (made with b's cap). */
static rap_status host_copy(const rap_batch *b, rap_batch *h)
{
    if (!h->block)
        RAP_TRY(rap_batch_create(h, b->schema, b->cap, false));
#ifdef RAP_HAVE_CUDA
    if (b->device) {
        if (cudaMemcpy(h->block, b->block, b->block_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            return rap_fail(RAP_ERR_CUDA, "test: copy of a device batch");
    } else
#endif
        memcpy(h->block, b->block, b->block_bytes);
    h->rows = b->rows;
    h->first_row = b->first_row;
    return RAP_OK;
}

/* Reads everything of cfg (parse kind k) in batches of bcap rows. */
static rap_status read_all(const rap_reader_config *cfg0, rap_parse_kind k, size_t chunk,
                           int64_t bcap, dump_t *d, rap_reader_stats *st, char *msg, size_t mn)
{
    rap_reader_config cfg = *cfg0;
    cfg.parse = k;
    memset(d, 0, sizeof *d);
    msg[0] = 0;
    rap_reader *rd;
    rap_status s = rap_reader_open_ex(&cfg, chunk, &rd);
    if (s != RAP_OK) {
        snprintf(msg, mn, "%s", rap_last_error());
        return s;
    }
    rap_batch b, h;
    memset(&h, 0, sizeof h);
    s = k == RAP_PARSE_GPU ? rap_batch_create_device(&b, rap_schema_criteo(), bcap)
                           : rap_batch_create(&b, rap_schema_criteo(), bcap, false);
    while (s == RAP_OK) {
        s = rap_reader_next(rd, &b);
        if (s != RAP_OK) {
            snprintf(msg, mn, "%s", rap_last_error());
            break;
        }
        if (b.rows == 0)
            break;
        if ((s = rap_reader_sync(rd)) != RAP_OK || (s = host_copy(&b, &h)) != RAP_OK)
            break;
        dump_batch(d, &h);
    }
    rap_reader_get_stats(rd, st);
    rap_batch_free_any(&b);
    rap_batch_free(&h);
    rap_reader_close(rd);
    return s;
}

/* The accounting equal; bytes and files too unless the read stopped early
 * (bad_rows fail: how far the lanes read ahead is timing). */
static bool same_stats_ex(rap_test_ctx *t, const rap_reader_stats *a, const rap_reader_stats *b,
                          bool bytes)
{
    bool ok = a->rows_read == b->rows_read && a->rows_used == b->rows_used &&
              a->rows_rejected == b->rows_rejected &&
              (!bytes || (a->bytes_read == b->bytes_read && a->files == b->files)) &&
              !memcmp(a->rejected, b->rejected, sizeof a->rejected);
    for (int r = 0; r < RAP_REJ_COUNT; r++)
        for (int e = 0; e < RAP_REJ_EXAMPLES; e++)
            ok = ok && !strcmp(a->example[r][e], b->example[r][e]);
    CHECK_MSG(ok, "accounting differs: read %lld/%lld used %lld/%lld rejected %lld/%lld",
              (long long)a->rows_read, (long long)b->rows_read, (long long)a->rows_used,
              (long long)b->rows_used, (long long)a->rows_rejected, (long long)b->rows_rejected);
    return ok;
}

static bool same_stats(rap_test_ctx *t, const rap_reader_stats *a, const rap_reader_stats *b)
{
    return same_stats_ex(t, a, b, true);
}

static void same_dump(rap_test_ctx *t, const dump_t *a, const dump_t *b, const char *what)
{
    CHECK_MSG(a->batches == b->batches && a->n == b->n && !memcmp(a->p, b->p, a->n),
              "%s: batches %lld/%lld, bytes %zu/%zu differ", what, (long long)a->batches,
              (long long)b->batches, a->n, b->n);
}

/* The input set: one plain file, one gzip file, a directory of 5 files
 * (plain and gzip, different lengths). */
static const char *inputs(int which)
{
    static char p[3][512];
    static bool made;
    if (!made) {
        char *d = malloc(6000 * 1300);
        snprintf(p[0], 512, "%s/pf_plain.tsv", rap_test_tmpdir());
        write_file(p[0], d, rap_test_criteo_text(d, 6000, 3, true), false);
        snprintf(p[1], 512, "%s/pf_gz.tsv.gz", rap_test_tmpdir());
        write_file(p[1], d, rap_test_criteo_text(d, 4000, 4, false), true);
        snprintf(p[2], 512, "%s/pf_dir", rap_test_tmpdir());
        mkdir(p[2], 0755);
        for (int f = 0; f < 5; f++) {
            char q[600];
            snprintf(q, sizeof q, "%s/part_%d%s", p[2], f, f % 2 ? ".gz" : ".tsv");
            write_file(q, d, rap_test_criteo_text(d, 700 + 450 * f, 10 + (uint64_t)f, f == 4), f % 2);
        }
        free(d);
        made = true;
    }
    return p[which];
}

/* ------------------------------------------------------------- tests */

/* What a reader of rc allocates for its parsing, counted (rap_mem_counted:
 * host batches and buffers, device memory), against rap_reader_parse_bytes:
 * the reference's host memory exactly; the GPU's device memory exactly
 * but for each parser's layout tables (a few KB). */
static void parser_bytes_check(rap_test_ctx *t, rap_reader_config rc)
{
    size_t dev, pin, host;
    REQUIRE_OK(rap_reader_parse_bytes(&rc, &dev, &pin, &host));
    rap_reader_threads th;
    REQUIRE_OK(rap_reader_plan_threads(&rc, &th));
    uint64_t b0, n0, b1, n1;
    rap_mem_counted(&b0, &n0);
    rap_reader *r;
    REQUIRE_OK(rap_reader_open(&rc, &r));
    rap_mem_counted(&b1, &n1);
    rap_reader_close(r);
    const double got = (double)(b1 - b0);
    if (rc.parse == RAP_PARSE_REF) {
        CHECK_MSG(dev == 0 && pin == 0 && got == (double)host,
                  "reference: planned %zu host bytes, allocated %.0f", host, got);
    } else {
        CHECK_MSG(host == 0 && pin > 0 && got >= (double)dev &&
                      got <= (double)dev + 65536.0 * th.parsers,
                  "gpu: planned %zu device bytes, allocated %.0f (%d parsers)", dev, got,
                  th.parsers);
    }
    /* the staging rows dominate: the plan grows with the chunk */
    CHECK(dev + host > (size_t)4 << 20);
}

/* parser_bytes_check of kind k on a file and on a directory read by 3 lanes. */
static void parser_bytes_cases(rap_test_ctx *t, rap_parse_kind k)
{
    for (int d = 0; d < 2; d++) {
        rap_reader_config rc = rap_reader_defaults();
        rc.input = inputs(d ? 2 : 0);
        rc.threads = 3;
        rc.inflate_threads = d ? 3 : 1;
        rc.parse = k;
        parser_bytes_check(t, rc);
    }
}

RAP_TEST(parse_feed_reference_bytes_equal_allocation)
{
    parser_bytes_cases(t, RAP_PARSE_REF);
    /* the host's parser: nothing besides its chunks */
    rap_reader_config rc = rap_reader_defaults();
    rc.input = inputs(0);
    rc.parse = RAP_PARSE_CPU;
    size_t dev, pin, host;
    REQUIRE_OK(rap_reader_parse_bytes(&rc, &dev, &pin, &host));
    CHECK(dev == 0 && pin == 0 && host == 0);
}

RAP_TEST(parse_feed_gpu_bytes_equal_allocation)
{
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        SKIP(why);
    parser_bytes_cases(t, RAP_PARSE_GPU);
}

RAP_TEST(parse_feed_reader_reference_equals_cpu)
{
    /* every input, threads, lanes, both orders, max_rows, small chunks,
     * odd batch sizes: the same batches and accounting */
    struct {
        int input, threads, lanes, interleave;
        int64_t max_rows, bcap;
        size_t chunk;
    } cases[] = {
        {0, 1, 1, 0, 0, 1000, 0},      {0, 3, 1, 0, 0, 97, 3000},   {0, 2, 1, 0, 2500, 333, 0},
        {1, 2, 1, 0, 0, 512, 0},       {1, 3, 1, 0, 0, 61, 2048},   {2, 2, 1, 0, 0, 256, 0},
        {2, 4, 3, 0, 0, 128, 4096},    {2, 4, 3, 1, 0, 200, 4096},  {2, 5, 5, 1, 1234, 77, 0},
        {2, 3, 2, 1, 0, 1, 1500},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rap_reader_config rc = rap_reader_defaults();
        rc.input = inputs(cases[c].input);
        rc.threads = cases[c].threads;
        rc.inflate_threads = cases[c].lanes;
        rc.interleave = cases[c].interleave ? RAP_INTERLEAVE_BATCH : RAP_INTERLEAVE_FILE;
        rc.interleave_rows = 150;
        rc.max_rows = cases[c].max_rows;
        rc.max_line = 300;
        dump_t a, b;
        rap_reader_stats sa, sb;
        char ma[2048], mb[2048];
        REQUIRE_OK(read_all(&rc, RAP_PARSE_CPU, cases[c].chunk, cases[c].bcap, &a, &sa, ma,
                            sizeof ma));
        REQUIRE_OK(read_all(&rc, RAP_PARSE_REF, cases[c].chunk, cases[c].bcap, &b, &sb, mb,
                            sizeof mb));
        CHECK_MSG(sa.rows_rejected > 50 && sa.rows_used > 500, "case %zu: %lld used, %lld "
                  "rejected (the text must mix both)", c, (long long)sa.rows_used,
                  (long long)sa.rows_rejected);
        /* every reason Criteo's tab text can have (quote and list are a
         * schema's: CSV quoting, lists) */
        int kinds = 0;
        for (int r = 0; r < RAP_REJ_QUOTE; r++)
            kinds += sa.rejected[r] > 0;
        CHECK_MSG(kinds == RAP_REJ_QUOTE || cases[c].max_rows > 0, "case %zu: %d reasons", c,
                  kinds);
        /* bytes read too, but where max_rows stops the read early with the
         * default chunks: the reader reads to the end of the chunk holding
         * the last row, and the host's chunk (1 MiB) is not the GPU
         * parser's (RAP_PARSE_GPU_CHUNK_DEFAULT) */
        same_stats_ex(t, &sa, &sb, cases[c].max_rows == 0 || cases[c].chunk != 0);
        same_dump(t, &a, &b, "reference vs cpu");
        free(a.p);
        free(b.p);
    }
}

RAP_TEST(parse_feed_reader_reference_fail_mode)
{
    /* bad_rows fail: the rows before the first reject, then the same
     * "file:line: expected ..." message naming the field */
    for (int in = 0; in < 3; in++) {
        rap_reader_config rc = rap_reader_defaults();
        rc.input = inputs(in);
        rc.threads = 3;
        rc.inflate_threads = in == 2 ? 3 : 1;
        rc.bad_rows = RAP_BAD_FAIL;
        rc.max_line = 300;
        dump_t a, b;
        rap_reader_stats sa, sb;
        char ma[2048], mb[2048];
        rap_status xa = read_all(&rc, RAP_PARSE_CPU, 2500, 100, &a, &sa, ma, sizeof ma);
        rap_status xb = read_all(&rc, RAP_PARSE_REF, 2500, 100, &b, &sb, mb, sizeof mb);
        CHECK(xa == RAP_ERR_DATA && xb == RAP_ERR_DATA);
        CHECK_MSG(!strcmp(ma, mb) && strstr(ma, ":") && strstr(ma, "expected"),
                  "messages differ: '%s' vs '%s'", ma, mb);
        same_stats_ex(t, &sa, &sb, false);
        same_dump(t, &a, &b, "fail mode");
        free(a.p);
        free(b.p);
    }
}

/* Runs a feed over input (parse kind k) and dumps every batch. */
static rap_status feed_all(rap_rowfeed_config fc, rap_parse_kind k, dump_t *d,
                           rap_rowfeed_stats *st)
{
    fc.reader.parse = k;
    memset(d, 0, sizeof *d);
    rap_rowfeed *f;
    RAP_TRY(rap_rowfeed_create(&fc, &f));
    rap_row_batch *rb;
    rap_batch h;
    memset(&h, 0, sizeof h);
    rap_status s;
    while ((s = rap_rowfeed_next(f, &rb, NULL)) == RAP_OK && rb) {
        if (rb->batch.rows > 0 && (s = host_copy(&rb->batch, &h)) != RAP_OK)
            break;
        h.rows = rb->batch.rows;
        h.first_row = rb->batch.first_row;
        int64_t tag[4] = {rb->seq, rb->pass, rb->pos_after, rb->end_of_pass};
        put(d, tag, sizeof tag);
        if (rb->batch.rows > 0)
            dump_batch(d, &h);
        rap_rowfeed_release(f, rb);
    }
    rap_batch_free(&h);
    rap_rowfeed_free(f, st);
    return s;
}

/* feed_all through the feed's parse gate: before each batch the consumer
 * releases `budget` lines (as the runtime does at a window's start; -2:
 * never, every line launched while it waits); *gs the gate's counts. */
static rap_status feed_gated(rap_rowfeed_config fc, rap_parse_kind k, int64_t budget, dump_t *d,
                             rap_rowfeed_stats *st, rap_parse_gate_stats *gs)
{
    fc.reader.parse = k;
    fc.parse_gate = true;
    memset(d, 0, sizeof *d);
    memset(gs, 0, sizeof *gs);
    rap_rowfeed *f;
    RAP_TRY(rap_rowfeed_create(&fc, &f));
    rap_parse_gate *g = rap_rowfeed_gate(f);
    if (!g) {
        rap_rowfeed_free(f, st);
        return rap_fail(RAP_ERR_INTERNAL, "test: the feed made no gate");
    }
    rap_row_batch *rb;
    rap_batch h;
    memset(&h, 0, sizeof h);
    rap_status s;
    for (;;) {
        if (budget != -2) {
            /* until a release found work, wait a little for a post (the
             * parsers run ahead while the consumer waits, bypassed) */
            for (int i = 0; i < 200; i++) {
                rap_parse_gate_get_stats(g, gs);
                if (gs->lines_in > 0 || gs->pending > 0)
                    break;
                usleep(1000);
            }
            rap_parse_gate_release(g, budget, NULL, NULL);
        }
        if ((s = rap_rowfeed_next(f, &rb, NULL)) != RAP_OK || !rb)
            break;
        if (rb->batch.rows > 0 && (s = host_copy(&rb->batch, &h)) != RAP_OK)
            break;
        h.rows = rb->batch.rows;
        h.first_row = rb->batch.first_row;
        int64_t tag[4] = {rb->seq, rb->pass, rb->pos_after, rb->end_of_pass};
        put(d, tag, sizeof tag);
        if (rb->batch.rows > 0)
            dump_batch(d, &h);
        rap_rowfeed_release(f, rb);
    }
    rap_parse_gate_get_stats(g, gs);
    rap_batch_free(&h);
    rap_rowfeed_free(f, st);
    return s;
}

/* The feed of parse_feed_rowfeed_reference_equals_cpu's input `in`. */
static void gate_feed_config(rap_rowfeed_config *fc, int in)
{
    memset(fc, 0, sizeof *fc);
    fc->reader = rap_reader_defaults();
    fc->reader.input = inputs(in);
    fc->reader.threads = 3;
    fc->reader.inflate_threads = in == 2 ? 2 : 1;
    fc->reader.max_line = 300;
    fc->chunk_bytes = 5000;
    fc->batch_rows = 250;
    fc->n_batches = 4;
    fc->holdout = in == 1 ? 0 : 0.1;
    fc->start_pos = in == 0 ? 777 : 0;
    fc->passes = 2;
    fc->device_batches = true;
}

RAP_TEST(parse_feed_gate_reference_equals_cpu)
{
    /* the reference's chunks posted to the feed's gate and parsed when the
     * consumer releases them: budgets of a tile, of a chunk's lines and of
     * everything, and none at all (every line parsed while the consumer
     * waits): the batches, markers and accounting of the host's parser;
     * every line read goes through the gate, inside or outside */
    const int64_t budgets[4] = {64, 1000, -1, -2};
    for (int in = 0; in < 3; in++) {
        rap_rowfeed_config fc;
        gate_feed_config(&fc, in);
        dump_t a;
        rap_rowfeed_stats sa;
        REQUIRE_OK(feed_all(fc, RAP_PARSE_CPU, &a, &sa));
        for (int k = 0; k < 4; k++) {
            dump_t b;
            rap_rowfeed_stats sb;
            rap_parse_gate_stats gs;
            REQUIRE_OK(feed_gated(fc, RAP_PARSE_GPU, budgets[k], &b, &sb, &gs));
            CHECK(sa.rows_out > 1000 && sa.rows_out == sb.rows_out);
            CHECK(sa.rows_held_out == sb.rows_held_out && sa.rows_skipped == sb.rows_skipped);
            CHECK(sb.passes_done == 2 && !memcmp(sa.ids_out, sb.ids_out, sizeof sa.ids_out));
            same_stats(t, &sa.reader, &sb.reader);
            same_dump(t, &a, &b, "gated feed");
            CHECK_MSG(gs.lines_in + gs.lines_out == sb.reader.rows_read && gs.pending == 0,
                      "input %d budget %lld: %lld lines in, %lld out, %lld read", in,
                      (long long)budgets[k], (long long)gs.lines_in, (long long)gs.lines_out,
                      (long long)sb.reader.rows_read);
            CHECK(budgets[k] != -2 || gs.lines_in == 0);
            CHECK(budgets[k] == -2 || gs.lines_in > 0);
            free(b.p);
        }
        free(a.p);
    }
}

RAP_TEST(parse_feed_gate_stop_midway)
{
    /* a consumer that stops after a few batches without releasing the
     * rest: the feed's free drains and closes the gate, no parser thread
     * is left waiting (the test would hang), nothing leaks (SAN=1) */
    rap_rowfeed_config fc;
    gate_feed_config(&fc, 2);
    fc.reader.parse = RAP_PARSE_GPU;
    fc.parse_gate = true;
    fc.passes = 0; /* until freed */
    rap_rowfeed *f;
    REQUIRE_OK(rap_rowfeed_create(&fc, &f));
    REQUIRE(rap_rowfeed_gate(f));
    for (int i = 0; i < 3; i++) {
        rap_row_batch *rb;
        REQUIRE_OK(rap_rowfeed_next(f, &rb, NULL));
        REQUIRE(rb);
        rap_rowfeed_release(f, rb);
    }
    rap_rowfeed_stats st;
    rap_rowfeed_free(f, &st);
    CHECK(st.batches_out == 3);
    /* the host's parser makes no gate */
    fc.reader.parse = RAP_PARSE_CPU;
    REQUIRE_OK(rap_rowfeed_create(&fc, &f));
    CHECK(!rap_rowfeed_gate(f));
    rap_rowfeed_free(f, NULL);
}

RAP_TEST(parse_feed_rowfeed_reference_equals_cpu)
{
    /* the training feed: hold-out by the accepted-row index, a resume
     * position, two passes: the same batches, markers and accounting */
    for (int in = 0; in < 3; in++) {
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = rap_reader_defaults();
        fc.reader.input = inputs(in);
        fc.reader.threads = 3;
        fc.reader.inflate_threads = in == 2 ? 2 : 1;
        fc.reader.max_line = 300;
        fc.chunk_bytes = 5000;
        fc.batch_rows = 250;
        fc.n_batches = 4;
        fc.holdout = in == 1 ? 0 : 0.1;
        fc.start_pos = in == 0 ? 777 : 0;
        fc.passes = 2;
        fc.device_batches = true; /* no GPU in use (pinned false): the reference */
        CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_CPU); /* auto: the host parser */
        dump_t a, b;
        rap_rowfeed_stats sa, sb;
        REQUIRE_OK(feed_all(fc, RAP_PARSE_CPU, &a, &sa));
        REQUIRE_OK(feed_all(fc, RAP_PARSE_GPU, &b, &sb)); /* resolved to the reference */
        CHECK(sa.rows_out > 1000 && sa.rows_out == sb.rows_out);
        CHECK(sa.rows_held_out == sb.rows_held_out && sa.rows_skipped == sb.rows_skipped);
        CHECK(in == 1 || sa.rows_held_out > 100);
        CHECK(sa.passes_done == 2 && sb.passes_done == 2);
        CHECK(sa.ids_out[0] > 0 && !memcmp(sa.ids_out, sb.ids_out, sizeof sa.ids_out));
        same_stats(t, &sa.reader, &sb.reader);
        same_dump(t, &a, &b, "feed");
        free(a.p);
        free(b.p);
    }
}

RAP_TEST(parse_feed_resolve)
{
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    struct {
        rap_parse_kind asked;
        bool pinned, device_batches, reader_batches;
        rap_parse_kind want;
    } cases[] = {
        {RAP_PARSE_AUTO, true, true, false, RAP_PARSE_GPU},  /* GPU mode on a GPU: the GPU's
                                                              * parser (docs/INPUT.md) */
        {RAP_PARSE_AUTO, false, true, false, RAP_PARSE_CPU}, /* the CPU backend */
        {RAP_PARSE_AUTO, true, false, false, RAP_PARSE_CPU}, /* cpu mode: host batches */
        {RAP_PARSE_AUTO, true, true, true, RAP_PARSE_CPU},   /* the mps server's feed */
        {RAP_PARSE_GPU, true, true, false, RAP_PARSE_GPU},
        {RAP_PARSE_GPU, false, true, false, RAP_PARSE_REF},  /* no GPU: the reference */
        {RAP_PARSE_GPU, false, false, false, RAP_PARSE_REF},
        {RAP_PARSE_GPU, true, false, false, RAP_PARSE_CPU},  /* cpu mode on a GPU */
        {RAP_PARSE_CPU, true, true, false, RAP_PARSE_CPU},
        {RAP_PARSE_REF, true, true, false, RAP_PARSE_REF},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fc.reader.parse = cases[c].asked;
        fc.pinned = cases[c].pinned;
        fc.device_batches = cases[c].device_batches;
        fc.reader_batches = cases[c].reader_batches;
        CHECK_MSG(rap_rowfeed_resolve_parse(&fc) == cases[c].want, "case %zu: %s, want %s", c,
                  rap_parse_kind_name(rap_rowfeed_resolve_parse(&fc)),
                  rap_parse_kind_name(cases[c].want));
    }
}

/* The GPU parse backend (and its reference) takes Criteo's text only: an
 * input read by another schema resolves auto to the host's parsers, and
 * gpu or reference asked for it is refused naming the schema, by the
 * reader and by the row feed before anything is read. */
RAP_TEST(parse_feed_schema_input_host)
{
    char path[512];
    snprintf(path, sizeof path, "%s/pf_schema.tsv", rap_test_tmpdir());
    const char *text = "1\t2.5\t7\n0\t1\t9\n";
    write_file(path, text, strlen(text), false);
    rap_input_schema *sc = NULL, *cr = NULL;
    REQUIRE_OK(rap_input_schema_parse("y label\nprice dense\nuser sparse dec\n", "pf.schema",
                                      &sc));
    REQUIRE_OK(rap_input_schema_criteo(&cr));
    rap_reader_config rc = rap_reader_defaults();
    rc.input = path;
    CHECK(rap_reader_criteo_text(&rc));
    rc.schema = cr;
    CHECK(rap_reader_criteo_text(&rc));
    rc.schema = sc;
    CHECK(!rap_reader_criteo_text(&rc));
    rap_reader *r = NULL;
    const rap_parse_kind refused[] = {RAP_PARSE_GPU, RAP_PARSE_REF};
    for (int k = 0; k < 2; k++) {
        rc.parse = refused[k];
        rap_status st = rap_reader_open(&rc, &r);
        CHECK_MSG(st == RAP_ERR_ARG && !r && strstr(rap_last_error(), "Criteo's layout, not the "
                  "schema pf.schema (use --parse cpu or auto)"), "%d: %s", st, rap_last_error());
        rap_clear_error();
    }
    rc.parse = RAP_PARSE_CPU;
    REQUIRE_OK(rap_reader_open(&rc, &r));
    rap_reader_close(r);
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = rc;
    fc.reader.parse = RAP_PARSE_AUTO;
    fc.pinned = fc.device_batches = true; /* where gpu is the GPU for Criteo's text */
    CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_CPU);
    fc.reader.schema = cr;
    CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_GPU); /* auto: Criteo's layout as a schema */
    fc.reader.parse = RAP_PARSE_GPU;
    CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_GPU); /* Criteo's layout as a schema */
    fc.reader.parse = RAP_PARSE_AUTO;
    fc.reader.schema = sc;
    fc.reader.parse = RAP_PARSE_GPU;
    fc.batch_rows = 64;
    fc.n_batches = 2;
    fc.passes = 1;
    rap_rowfeed *f = NULL;
    rap_status st = rap_rowfeed_create(&fc, &f);
    CHECK_MSG(st == RAP_ERR_ARG && !f && strstr(rap_last_error(), "not the schema pf.schema"),
              "%d: %s", st, rap_last_error());
    rap_clear_error();
    rap_input_schema_free(sc);
    rap_input_schema_free(cr);
}

RAP_TEST(parse_feed_reference_short_lines)
{
    /* a chunk of many empty lines: the staging batch needs room for the
     * good rows the bytes can hold (rap_parse_rows_bound), not one a line */
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    char text[4096 + 1024];
    size_t n = 0;
    for (int i = 0; i < 4096; i++)
        text[n++] = '\n';
    n += (size_t)rap_test_criteo_line(text + n, 1, 5);
    int32_t start[4100];
    int64_t lines = 0;
    for (size_t p = 0; p < n;) {
        start[lines++] = (int32_t)p;
        p = (size_t)((char *)memchr(text + p, '\n', n - p) - text) + 1;
    }
    start[lines] = (int32_t)n;
    CHECK(lines == 4097);
    int64_t bound = rap_parse_rows_bound(&lay, lines, (int64_t)n);
    CHECK(bound == (int64_t)n / RAP_CRITEO_FIELDS && bound < lines);
    rap_batch b;
    REQUIRE_OK(rap_batch_create(&b, rap_schema_criteo(), bound, false));
    rap_parse_rej *rej = malloc(sizeof *rej * (size_t)lines);
    rap_parse_result res;
    REQUIRE_OK(rap_parse_ref(&lay, text, (int64_t)n, start, lines, 65536, &b, rej, &res));
    CHECK(res.rows_used == 1 && res.rows_rejected == 4096 && b.dense[0] == 5.0f);
    CHECK(res.rejected[RAP_REJ_FIELDS] == 4096 && rej[4095].line == 4095);
    rap_batch small;
    REQUIRE_OK(rap_batch_create(&small, rap_schema_criteo(), bound - 1, false));
    CHECK(rap_parse_ref(&lay, text, (int64_t)n, start, lines, 65536, &small, rej, &res) ==
          RAP_ERR_ARG);
    rap_batch_free(&small);
    rap_batch_free(&b);
    free(rej);
}

/* ------------------------------------------------------------- GPU */

RAP_TEST(parse_feed_gpu_reader_equals_cpu)
{
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        SKIP(why);
    for (int in = 0; in < 3; in++) {
        rap_reader_config rc = rap_reader_defaults();
        rc.input = inputs(in);
        rc.threads = 3;
        rc.inflate_threads = in == 2 ? 3 : 1;
        rc.interleave = in == 2 ? RAP_INTERLEAVE_BATCH : RAP_INTERLEAVE_FILE;
        rc.interleave_rows = 150;
        rc.max_line = 300;
        dump_t a, b;
        rap_reader_stats sa, sb;
        char ma[2048], mb[2048];
        REQUIRE_OK(read_all(&rc, RAP_PARSE_CPU, 3000, 333, &a, &sa, ma, sizeof ma));
        REQUIRE_OK(read_all(&rc, RAP_PARSE_GPU, 3000, 333, &b, &sb, mb, sizeof mb));
        same_stats(t, &sa, &sb);
        same_dump(t, &a, &b, "gpu vs cpu");
        free(a.p);
        free(b.p);
        rc.bad_rows = RAP_BAD_FAIL;
        CHECK(read_all(&rc, RAP_PARSE_CPU, 3000, 100, &a, &sa, ma, sizeof ma) == RAP_ERR_DATA);
        CHECK(read_all(&rc, RAP_PARSE_GPU, 3000, 100, &b, &sb, mb, sizeof mb) == RAP_ERR_DATA);
        CHECK_MSG(!strcmp(ma, mb), "'%s' vs '%s'", ma, mb);
        same_dump(t, &a, &b, "gpu fail mode");
        free(a.p);
        free(b.p);
    }
}

RAP_TEST(parse_feed_gpu_rowfeed_equals_cpu)
{
    /* --parse gpu against the host's parser through the row feed: with a
     * hold-out (the kept rows gathered by index on the GPU) and without
     * (the reader's batches straight into the pool's, as rap bench reads) */
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        SKIP(why);
    for (int h = 0; h < 2; h++) {
        rap_rowfeed_config fc;
        memset(&fc, 0, sizeof fc);
        fc.reader = rap_reader_defaults();
        fc.reader.input = inputs(2);
        fc.reader.threads = 3;
        fc.reader.max_line = 300;
        fc.chunk_bytes = 5000;
        fc.batch_rows = 250;
        fc.n_batches = 4;
        fc.holdout = h == 0 ? 0.1 : 0.0;
        fc.passes = 2;
        fc.pinned = true;
        fc.device_batches = true;
        fc.reader.parse = RAP_PARSE_GPU;
        CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_GPU);
        dump_t a, b;
        rap_rowfeed_stats sa, sb;
        REQUIRE_OK(feed_all(fc, RAP_PARSE_CPU, &a, &sa));
        REQUIRE_OK(feed_all(fc, RAP_PARSE_GPU, &b, &sb));
        CHECK(sa.rows_out == sb.rows_out && sa.rows_held_out == sb.rows_held_out);
        /* the ids a column (the re-planner's list lengths), counted on
         * the host from the GPU's offsets copied back */
        CHECK(sa.ids_out[0] > 0 && !memcmp(sa.ids_out, sb.ids_out, sizeof sa.ids_out));
        same_stats(t, &sa.reader, &sb.reader);
        same_dump(t, &a, &b, h == 0 ? "gpu feed, hold-out" : "gpu feed");
        free(a.p);
        free(b.p);
    }
}

RAP_TEST(parse_feed_gpu_gate_equals_ungated)
{
    /* the kernels launched by the gate's releases (budgets of a tile, of
     * a few tiles, everything, none: launched while the consumer waits)
     * against the kernels launched by the parser threads: the same device
     * batches, batch for batch, and the same accounting */
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        SKIP(why);
    const int64_t budgets[4] = {64, 300, -1, -2};
    for (int h = 0; h < 2; h++) {
        rap_rowfeed_config fc;
        gate_feed_config(&fc, 2);
        fc.start_pos = 0;
        fc.holdout = h == 0 ? 0.1 : 0.0;
        fc.pinned = true;
        fc.reader.parse = RAP_PARSE_GPU;
        CHECK(rap_rowfeed_resolve_parse(&fc) == RAP_PARSE_GPU);
        dump_t a;
        rap_rowfeed_stats sa;
        REQUIRE_OK(feed_all(fc, RAP_PARSE_GPU, &a, &sa));
        for (int k = 0; k < 4; k++) {
            dump_t b;
            rap_rowfeed_stats sb;
            rap_parse_gate_stats gs;
            REQUIRE_OK(feed_gated(fc, RAP_PARSE_GPU, budgets[k], &b, &sb, &gs));
            CHECK(sa.rows_out == sb.rows_out && sa.rows_held_out == sb.rows_held_out);
            CHECK(!memcmp(sa.ids_out, sb.ids_out, sizeof sa.ids_out));
            same_stats(t, &sa.reader, &sb.reader);
            same_dump(t, &a, &b, "gpu feed through the gate");
            CHECK(gs.lines_in + gs.lines_out == sb.reader.rows_read);
            CHECK((budgets[k] == -2) == (gs.lines_in == 0));
            free(b.p);
        }
        free(a.p);
    }
}

RAP_TEST(parse_feed_gpu_append_equals_host)
{
    /* rap_batch_append_device against rap_batch_append: runs of rows from
     * two sources at odd offsets and lengths, nulls in every column, the
     * destination's used bytes equal; rap_batch_gather_device against
     * appending row by row */
    char why[256];
    if (!rap_gpu_available(why, sizeof why))
        SKIP(why);
#ifdef RAP_HAVE_CUDA
    const int64_t cap = 700;
    rap_batch src[2], hd, dd, back;
    memset(&back, 0, sizeof back);
    uint64_t s = 77;
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(rap_batch_create(&src[k], rap_schema_criteo(), cap, false));
        rap_batch *b = &src[k];
        for (int j = 0; j < NS; j++)
            b->sparse_off[j * (cap + 1)] = 0;
        for (int64_t i = 0; i < cap; i++) {
            b->label[i] = (float)(rap_splitmix64(&s) & 1);
            for (int j = 0; j < ND; j++) {
                uint64_t z = rap_splitmix64(&s);
                b->dense_valid[j * cap + i] = z % 7 != 0;
                b->dense[j * cap + i] = z % 7 ? (float)(int)(z >> 40) : 0.0f;
            }
            for (int j = 0; j < NS; j++) {
                uint64_t z = rap_splitmix64(&s);
                int64_t *off = b->sparse_off + j * (cap + 1);
                uint8_t v = z % 5 != 0;
                b->sparse_valid[j * cap + i] = v;
                if (v)
                    b->sparse_ids[j * cap + off[i]] = (int64_t)(z >> 20);
                off[i + 1] = off[i] + v;
            }
        }
        b->rows = cap;
    }
    rap_batch dsrc[2];
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(rap_batch_create_device(&dsrc[k], rap_schema_criteo(), cap));
        REQUIRE(cudaMemcpy(dsrc[k].block, src[k].block, src[k].block_bytes,
                           cudaMemcpyHostToDevice) == cudaSuccess);
    }
    REQUIRE_OK(rap_batch_create(&hd, rap_schema_criteo(), 1000, false));
    REQUIRE_OK(rap_batch_create_device(&dd, rap_schema_criteo(), 1000));
    const int64_t runs[][3] = {{0, 0, 1}, {1, 5, 250}, {0, 1, 1}, {1, 300, 399}, {0, 699, 1},
                               {0, 64, 300}, {1, 0, 48}};
    hd.rows = dd.rows = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        rap_batch_append(&hd, &src[runs[r][0]], runs[r][1], runs[r][2]);
        REQUIRE_OK(rap_batch_append_device(&dd, &dsrc[runs[r][0]], runs[r][1], runs[r][2], NULL));
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE_OK(host_copy(&dd, &back));
    CHECK(hd.rows == 1000 && back.rows == 1000);
    dump_t a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    dump_batch(&a, &hd);
    dump_batch(&b, &back);
    same_dump(t, &a, &b, "device append");
    for (int j = 0; j < NS; j++)
        CHECK(back.sparse_off[j * 1001] == 0 &&
              back.sparse_off[j * 1001 + 1000] == hd.sparse_off[j * 1001 + 1000]);
    free(a.p);
    free(b.p);
    /* the gather: rows by index (any order, repeats), in two gathers after
     * an append, against appending each row alone on the host; more rows
     * than a block's chunk (1024) */
    rap_batch hg, dg;
    REQUIRE_OK(rap_batch_create(&hg, rap_schema_criteo(), 2600, false));
    REQUIRE_OK(rap_batch_create_device(&dg, rap_schema_criteo(), 2600));
    int32_t *h_idx, *d_idx;
    REQUIRE_OK(rap_parse_idx_create(2600, &h_idx, &d_idx));
    hg.rows = dg.rows = 0;
    rap_batch_append(&hg, &src[0], 3, 100);
    REQUIRE_OK(rap_batch_append_device(&dg, &dsrc[0], 3, 100, NULL));
    int64_t n1 = 1500, n2 = 1000;
    for (int64_t i = 0; i < n1 + n2; i++)
        h_idx[i] = (int32_t)(rap_splitmix64(&s) % (uint64_t)cap);
    for (int64_t i = 0; i < n1 + n2; i++)
        rap_batch_append(&hg, &src[1], h_idx[i], 1);
    REQUIRE_OK(rap_parse_idx_upload(d_idx, h_idx, n1 + n2, NULL));
    REQUIRE_OK(rap_batch_gather_device(&dg, &dsrc[1], d_idx, n1, NULL));
    REQUIRE_OK(rap_batch_gather_device(&dg, &dsrc[1], d_idx + n1, n2, NULL));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    rap_batch gback;
    memset(&gback, 0, sizeof gback);
    REQUIRE_OK(host_copy(&dg, &gback));
    CHECK(hg.rows == 2600 && gback.rows == 2600);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    dump_batch(&a, &hg);
    dump_batch(&b, &gback);
    same_dump(t, &a, &b, "device gather");
    free(a.p);
    free(b.p);
    rap_parse_idx_free(h_idx, d_idx);
    rap_batch_free(&hg);
    rap_batch_free_any(&dg);
    rap_batch_free(&gback);
    for (int k = 0; k < 2; k++) {
        rap_batch_free(&src[k]);
        rap_batch_free_any(&dsrc[k]);
    }
    rap_batch_free(&hd);
    rap_batch_free_any(&dd);
    rap_batch_free(&back);
#endif
}
