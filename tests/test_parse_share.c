/* test_parse_share.c -- ranks sharing the parse of every chunk
 * (data/parse_share.h): on thread ranks with the kernels' CPU reference,
 * every rank's chunk (accounting, rejects, first message, staging rows) is
 * what parsing the whole chunk gives, bit for bit, on random text with
 * every kind of malformed line and chunks from one line to thousands; each
 * rank parsed only its piece; a rank that leaves, or ranks that cut other
 * chunks, end the sharing on every rank with a message and no wait; the
 * comm's dup gives the thread ranks a comm of their own. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/parse_backend.h"
#include "data/parse_ref.h"
#include "data/parse_share.h"
#include "data/reader_internal.h"
#include "dist/comm.h"

#include <sys/stat.h>

#define SH_LINES 5000
#define SH_CHUNK ((size_t)2 << 20)

typedef struct {
    char *text;      /* the input */
    size_t n;
    int64_t *cut;    /* (n_cut + 1) chunk boundaries (bytes, whole lines) */
    int n_cut;
    int leave_after; /* the last rank leaves after this many chunks (-1 never) */
    bool skew;       /* rank 1 gets other chunks */
} share_case;

/* Rows [0, n) of staging batches a and b equal (arrays byte for byte). */
static bool same_rows(const rap_batch *a, const rap_batch *b, int64_t n, char *why, size_t wn)
{
    const int64_t A = a->cap, B = b->cap;
    if (memcmp(a->label, b->label, sizeof(float) * (size_t)n)) {
        snprintf(why, wn, "labels differ");
        return false;
    }
    for (int j = 0; j < RAP_CRITEO_DENSE; j++)
        if (memcmp(a->dense + j * A, b->dense + j * B, sizeof(float) * (size_t)n) ||
            memcmp(a->dense_valid + j * A, b->dense_valid + j * B, (size_t)n)) {
            snprintf(why, wn, "dense column %d differs", j);
            return false;
        }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        const int64_t *oa = a->sparse_off + j * (A + 1), *ob = b->sparse_off + j * (B + 1);
        if (memcmp(oa, ob, sizeof(int64_t) * (size_t)(n + 1)) ||
            memcmp(a->sparse_ids + j * A, b->sparse_ids + j * B, sizeof(int64_t) * (size_t)oa[n]) ||
            memcmp(a->sparse_valid + j * A, b->sparse_valid + j * B, (size_t)n)) {
            snprintf(why, wn, "sparse column %d differs", j);
            return false;
        }
    }
    return true;
}

static bool same_parsed(const rap_parsed *a, const rap_parsed *b, char *why, size_t wn)
{
    if (a->n_lines != b->n_lines || a->n_used != b->n_used || a->n_rej != b->n_rej) {
        snprintf(why, wn, "shared %lld lines, %lld good, %lld rejected; whole %lld, %lld, %lld",
                 (long long)a->n_lines, (long long)a->n_used, (long long)a->n_rej,
                 (long long)b->n_lines, (long long)b->n_used, (long long)b->n_rej);
        return false;
    }
    for (int64_t i = 0; i < a->n_rej; i++)
        if (a->rej[i].line != b->rej[i].line || a->rej[i].pos != b->rej[i].pos ||
            a->rej[i].reason != b->rej[i].reason) {
            snprintf(why, wn, "reject %lld: line %lld pos %lld reason %d, whole: %lld %lld %d",
                     (long long)i, (long long)a->rej[i].line, (long long)a->rej[i].pos,
                     a->rej[i].reason, (long long)b->rej[i].line, (long long)b->rej[i].pos,
                     b->rej[i].reason);
            return false;
        }
    if (strcmp(a->first_msg, b->first_msg)) {
        snprintf(why, wn, "first message \"%s\", whole \"%s\"", a->first_msg, b->first_msg);
        return false;
    }
    return true;
}

/* The exchange over a threads comm, as run/pipeline_dist.c makes it. */
static rap_status comm_alltoallv(void *ctx, const void *send, const int64_t *scount,
                                 const int64_t *sdispl, void *recv, const int64_t *rcount,
                                 const int64_t *rdispl, const char *name)
{
    return rap_comm_alltoallv_type(ctx, send, scount, sdispl, recv, rcount, rdispl,
                                   RAP_COMM_I64, name);
}

typedef struct {
    rap_parse_xchg x;
    const rap_parse_ops *ops;
    rap_parse_backend_config pcfg;
    void *ps;
    rap_batch stage, whole_stage;
    rap_parsed out, whole;
    rap_parse_share *sh;
} share_rank;

static void share_rank_free(share_rank *k)
{
    rap_parse_share_free(k->sh);
    if (k->ps)
        k->ops->free(k->ps);
    k->ops->stage_free(&k->stage);
    k->ops->stage_free(&k->whole_stage);
    rap_free(k->out.rej);
    rap_free(k->whole.rej);
}

static rap_status share_rank_make(share_rank *k, rap_comm *c)
{
    memset(k, 0, sizeof *k);
    k->ops = rap_parse_ops_of(RAP_PARSE_REF);
    k->pcfg.chunk_bytes = SH_CHUNK;
    k->pcfg.max_line = 1000;
    RAP_TRY(k->ops->create(&k->pcfg, &k->ps));
    RAP_TRY(k->ops->stage_create(&k->pcfg, &k->stage));
    RAP_TRY(k->ops->stage_create(&k->pcfg, &k->whole_stage));
    k->x = (rap_parse_xchg){rap_comm_rank(c), rap_comm_size(c), false, NULL, c, comm_alltoallv};
    return rap_parse_share_create(&k->x, k->ops, SH_CHUNK, k->pcfg.max_line, &k->sh);
}

/* Every chunk shared, then parsed whole by the same backend: equal. */
static rap_status share_ranks_fn(rap_test_rank *x)
{
    const share_case *sc = x->arg;
    share_rank k;
    rap_status st = share_rank_make(&k, x->c);
    int64_t lines = 0;
    for (int i = 0; st == RAP_OK && i < sc->n_cut; i++) {
        const bool last = x->rank == x->R - 1;
        if (last && i == sc->leave_after) {
            rap_parse_share_leave(k.sh);
            break;
        }
        int q = sc->skew && x->rank == 1 ? (i + 1) % sc->n_cut : i;
        const char *t = sc->text + sc->cut[q];
        size_t n = (size_t)(sc->cut[q + 1] - sc->cut[q]);
        rap_status cs = rap_parse_share_chunk(k.sh, k.ps, t, n, &k.out, &k.stage);
        if (sc->skew || (sc->leave_after >= 0 && i >= sc->leave_after)) {
            /* the sharing ended on every rank: this chunk fails, so does the next */
            rap_status want = sc->skew ? RAP_ERR_DATA : RAP_ERR_IO;
            const char *say = sc->skew ? "cut different chunks" : "stopped parsing";
            if (cs != want || !strstr(rap_last_error(), say)) {
                snprintf(x->err, sizeof x->err, "chunk %d: %s (%s), expected %s with \"%s\"", i,
                         rap_status_name(cs), rap_last_error(), rap_status_name(want), say);
                x->bad++;
            }
            rap_clear_error();
            if (rap_parse_share_chunk(k.sh, k.ps, t, n, &k.out, &k.stage) == RAP_OK)
                x->bad++;
            rap_clear_error();
            break;
        }
        if (cs != RAP_OK) {
            st = cs;
            snprintf(x->err, sizeof x->err, "chunk %d: %s", i, rap_last_error());
            break;
        }
        rap_status ws = k.ops->chunk(k.ps, t, n, &k.whole, &k.whole_stage);
        char why[512];
        if (ws != RAP_OK) {
            st = ws;
            snprintf(x->err, sizeof x->err, "whole chunk %d: %s", i, rap_last_error());
        } else if (!same_parsed(&k.out, &k.whole, why, sizeof why) ||
                   !same_rows(&k.stage, &k.whole_stage, k.whole.n_used, why, sizeof why)) {
            snprintf(x->err, sizeof x->err, "chunk %d of %zu bytes: %s", i, n, why);
            x->bad++;
        }
        lines += k.whole.n_lines;
        x->steps++;
    }
    int64_t own = 0, seen = 0;
    rap_parse_share_counts(k.sh, &own, &seen);
    x->seconds = (double)own; /* this rank's own lines, summed by the caller */
    if (st == RAP_OK && seen != lines && sc->leave_after < 0 && !sc->skew) {
        snprintf(x->err, sizeof x->err, "%lld lines shared, %lld parsed whole", (long long)seen,
                 (long long)lines);
        x->bad++;
    }
    share_rank_free(&k);
    return st;
}

/* The text and chunk boundaries: whole lines, chunks of 1 line to about
 * 1,500 lines (some pieces of a rank empty, one tile or several). */
static bool share_input(rap_test_ctx *t, share_case *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->text = malloc((size_t)SH_LINES * 1200);
    sc->cut = malloc(sizeof(int64_t) * (SH_LINES + 2));
    if (!sc->text || !sc->cut) {
        rap_test_fail(t, __FILE__, __LINE__, "no memory for the input");
        free(sc->text);
        free(sc->cut);
        return false;
    }
    sc->n = rap_test_criteo_text(sc->text, SH_LINES, 77, false);
    static const int sizes[] = {1, 2, 63, 64, 65, 130, 1500, 7, 700, 129, 1024};
    int64_t at = 0;
    int k = 0;
    sc->cut[0] = 0;
    while ((size_t)at < sc->n) {
        int want = sizes[k % (int)(sizeof sizes / sizeof sizes[0])];
        int64_t e = at;
        for (int l = 0; l < want && (size_t)e < sc->n; l++) {
            const char *nl = memchr(sc->text + e, '\n', sc->n - (size_t)e);
            e = nl ? nl - sc->text + 1 : (int64_t)sc->n;
        }
        sc->cut[++k] = e;
        at = e;
    }
    sc->n_cut = k;
    sc->leave_after = -1;
    return true;
}

RAP_TEST(parse_share_reference_equals_whole)
{
    share_case sc;
    if (!share_input(t, &sc))
        return;
    static const int ranks[] = {2, 3, 5, 8};
    for (int i = 0; i < 4; i++) {
        rap_test_rank x[8];
        int R = ranks[i];
        if (!rap_test_run_ranks(t, R, 30, share_ranks_fn, &sc, x))
            continue;
        double own = 0;
        for (int r = 0; r < R; r++) {
            CHECK_MSG(x[r].bad == 0, "R = %d rank %d: %s", R, r, x[r].err);
            CHECK_MSG(x[r].steps == sc.n_cut, "R = %d rank %d: %lld of %d chunks", R, r,
                      (long long)x[r].steps, sc.n_cut);
            own += x[r].seconds;
            /* a rank parses about 1/R of the lines (whole tiles of 64) */
            CHECK_MSG(x[r].seconds <= SH_LINES / R + 64.0 * sc.n_cut, "R = %d rank %d parsed "
                      "%.0f of %d lines", R, r, x[r].seconds, SH_LINES);
        }
        CHECK_MSG(own == SH_LINES, "R = %d: the ranks parsed %.0f lines of %d", R, own, SH_LINES);
    }
    free(sc.text);
    free(sc.cut);
}

RAP_TEST(parse_share_leave_and_skew_end_every_rank)
{
    share_case sc;
    if (!share_input(t, &sc))
        return;
    rap_test_rank x[8];
    for (int pass = 0; pass < 3; pass++) {
        sc.leave_after = pass == 0 ? 3 : pass == 1 ? 0 : -1;
        sc.skew = pass == 2;
        int R = pass == 1 ? 3 : 2;
        double t0 = rap_now();
        if (!rap_test_run_ranks(t, R, 20, share_ranks_fn, &sc, x))
            continue;
        for (int r = 0; r < R; r++)
            CHECK_MSG(x[r].bad == 0, "case %d rank %d: %s", pass, r, x[r].err);
        /* nobody waited for a collective that did not come */
        CHECK_MSG(rap_now() - t0 < 10, "case %d took %.1f s", pass, rap_now() - t0);
    }
    free(sc.text);
    free(sc.cut);
}

static rap_status dup_fn(rap_test_rank *x)
{
    rap_comm *d = NULL;
    RAP_TRY(rap_comm_dup(x->c, 0, &d));
    if (rap_comm_rank(d) != x->rank || rap_comm_size(d) != x->R ||
        rap_comm_kind_of(d) != RAP_COMM_THREADS)
        x->bad++;
    int64_t v = x->rank + 1;
    rap_status st = rap_comm_allreduce(d, &v, 1, RAP_COMM_I64, "dup sum");
    if (st == RAP_OK && v != (int64_t)x->R * (x->R + 1) / 2)
        x->bad++;
    rap_comm_free(d);
    return st;
}

RAP_TEST(parse_share_comm_dup)
{
    rap_test_rank x[8];
    for (int R = 1; R <= 4; R += 3)
        if (rap_test_run_ranks(t, R, 20, dup_fn, NULL, x))
            for (int r = 0; r < R; r++)
                CHECK_MSG(x[r].bad == 0, "R = %d rank %d: the dup comm is not a copy", R, r);
    rap_comm *self = NULL, *d = NULL;
    REQUIRE_OK(rap_comm_self_create(&self));
    CHECK_OK(rap_comm_dup(self, 0, &d));
    CHECK(d && rap_comm_size(d) == 1);
    rap_comm_free(d);
    rap_comm_free(self);
}

/* The share's device side on one GPU (NCCL needs a GPU a rank, so the
 * exchange itself runs on two GPUs: dist_parse_gpu_row_shares_gpu): a
 * piece parsed by the kernels into a block laid out for its row bound
 * (cap_p) holds the reference's rows byte for byte once copied back
 * (rap_parse_copy_sync), and device appends from such blocks into a
 * staging batch equal the host's appends. */
RAP_TEST(parse_share_device_blocks_gpu)
{
    REQUIRE_GPU();
    share_case sc;
    if (!share_input(t, &sc))
        return;
    const rap_parse_ops *og = rap_parse_ops_of(RAP_PARSE_GPU), *orf = rap_parse_ops_of(RAP_PARSE_REF);
    rap_parse_backend_config pc = {SH_CHUNK, 1000, 0, NULL};
    void *pg = NULL, *pr = NULL, *stream = NULL, *dblk = NULL;
    rap_batch gstage = {0}, rstage = {0};
    rap_parsed og_out = {0}, or_out = {0};
    char *hblk = NULL, *back = NULL, *sback = NULL;
    /* lines [64, 64 + 1400) of the text: whole tiles, every kind of line */
    int64_t lines = 0, want0 = 64, want1 = 64 + 1400;
    size_t b0 = 0, b1 = 0;
    for (size_t i = 0; i < sc.n && lines < want1; i++)
        if (sc.text[i] == '\n') {
            lines++;
            if (lines == want0)
                b0 = i + 1;
            if (lines == want1)
                b1 = i + 1;
        }
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    const int64_t cap = rap_parse_rows_bound(&lay, want1 - want0, (int64_t)(b1 - b0));
    const rap_schema s = rap_schema_criteo();
    const size_t bytes = rap_batch_bytes(s, cap);
    rap_status st = og->create(&pc, &pg);
    if (st == RAP_OK)
        st = orf->create(&pc, &pr);
    if (st == RAP_OK)
        st = rap_parse_stream_create(&stream);
    if (st == RAP_OK)
        st = rap_cuda_malloc(&dblk, bytes, "test block");
    if (st == RAP_OK)
        st = og->stage_create(&pc, &gstage);
    if (st == RAP_OK)
        st = orf->stage_create(&pc, &rstage);
    hblk = calloc(1, bytes);
    back = calloc(1, bytes);
    sback = calloc(1, gstage.block_bytes ? gstage.block_bytes : 1);
    CHECK_MSG(st == RAP_OK && hblk && back && sback, "set-up: %s", rap_last_error());
    rap_batch dv, hv, bv;
    if (st == RAP_OK && hblk && back && sback) {
        rap_batch_view(&dv, s, cap, dblk);
        dv.device = true;
        rap_batch_view(&hv, s, cap, hblk);
        CHECK_OK(og->chunk(pg, sc.text + b0, b1 - b0, &og_out, &dv));
        CHECK_OK(orf->chunk(pr, sc.text + b0, b1 - b0, &or_out, &hv));
        char why[512] = "";
        CHECK_MSG(same_parsed(&og_out, &or_out, why, sizeof why), "kernels against the "
                  "reference: %s", why);
        CHECK_OK(rap_parse_copy_sync(back, dblk, bytes, stream));
        rap_batch_view(&bv, s, cap, back);
        CHECK_MSG(same_rows(&bv, &hv, or_out.n_used, why, sizeof why), "the block: %s", why);
        /* appends from the block, twice, on the device and on the host */
        gstage.rows = rstage.rows = 0;
        for (int k = 0; k < 2; k++) {
            CHECK_OK(rap_batch_append_device(&gstage, &dv, 0, og_out.n_used, stream));
            rap_batch_append(&rstage, &hv, 0, or_out.n_used);
        }
        CHECK_OK(rap_parse_copy_sync(sback, gstage.block, gstage.block_bytes, stream));
        rap_batch sv;
        rap_batch_view(&sv, s, gstage.cap, sback);
        CHECK_MSG(gstage.rows == rstage.rows &&
                      same_rows(&sv, &rstage, rstage.rows, why, sizeof why),
                  "the device appends (%lld rows, host %lld): %s", (long long)gstage.rows,
                  (long long)rstage.rows, why);
        printf("    a piece of %lld lines: %lld good rows in a block of %lld, equal on the "
               "device and the host\n", (long long)(want1 - want0), (long long)or_out.n_used,
               (long long)cap);
    }
    free(hblk);
    free(back);
    free(sback);
    rap_cuda_free(dblk);
    og->stage_free(&gstage);
    orf->stage_free(&rstage);
    if (pg)
        og->free(pg);
    if (pr)
        orf->free(pr);
    rap_parse_stream_free(stream);
    rap_free(og_out.rej);
    rap_free(or_out.rej);
    free(sc.text);
    free(sc.cut);
}

/* ---- through the reader: thread ranks, each with its own reader of the
 * same input and an exchange a parser thread, against an unshared reader */

typedef struct {
    const char *input;
    int lanes, threads;
    size_t chunk;
} reader_case;

static void hash_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 0x100000001b3ULL;
}

/* Every batch of a reader of cfg: the rows' bytes hashed, the accounting. */
static rap_status read_hash(const rap_reader_config *cfg, size_t chunk, uint64_t *h,
                            rap_reader_stats *st)
{
    rap_reader *rd;
    RAP_TRY(rap_reader_open_ex(cfg, chunk, &rd));
    rap_batch b;
    rap_status s = rap_batch_create(&b, rap_schema_criteo(), 97, false);
    *h = 0xcbf29ce484222325ULL;
    while (s == RAP_OK && (s = rap_reader_next(rd, &b)) == RAP_OK && b.rows > 0) {
        const size_t r = (size_t)b.rows, B = (size_t)b.cap;
        hash_bytes(h, b.label, r * sizeof(float));
        for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
            hash_bytes(h, b.dense + j * B, r * sizeof(float));
            hash_bytes(h, b.dense_valid + j * B, r);
        }
        for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
            const int64_t *off = b.sparse_off + j * (B + 1);
            hash_bytes(h, off, (r + 1) * sizeof *off);
            hash_bytes(h, b.sparse_ids + j * B, (size_t)off[r] * sizeof(int64_t));
            hash_bytes(h, b.sparse_valid + j * B, r);
        }
    }
    rap_reader_get_stats(rd, st);
    rap_reader_close(rd);
    rap_batch_free(&b);
    return s;
}

static rap_status reader_share_fn(rap_test_rank *x)
{
    const reader_case *rc = x->arg;
    rap_reader_config cfg = rap_reader_defaults();
    cfg.input = rc->input;
    cfg.parse = RAP_PARSE_REF;
    cfg.threads = rc->threads;
    cfg.inflate_threads = rc->lanes;
    cfg.max_line = 1000;
    cfg.parse_share_ranks = x->R;
    const int P = rap_reader_share_parsers(&cfg);
    if (P < 1 || P > 8) {
        snprintf(x->err, sizeof x->err, "a reader of %d lanes and %d threads: %d parser threads "
                 "to share with", rc->lanes, rc->threads, P);
        x->bad++;
        return RAP_OK;
    }
    rap_comm *pc[8] = {0};
    rap_parse_xchg px[8];
    rap_status st = RAP_OK;
    for (int i = 0; st == RAP_OK && i < P; i++) {
        st = rap_comm_dup(x->c, 0, &pc[i]);
        if (st == RAP_OK)
            px[i] = (rap_parse_xchg){x->rank, x->R, false, NULL, pc[i], comm_alltoallv};
    }
    cfg.parse_xchg = px;
    cfg.n_parse_xchg = P;
    uint64_t hs = 0, hw = 0;
    rap_reader_stats ss, sw;
    if (st == RAP_OK)
        st = read_hash(&cfg, rc->chunk, &hs, &ss);
    if (st == RAP_OK) { /* the same reader, every line parsed here */
        rap_reader_config w = cfg;
        w.parse_share_ranks = 0;
        w.parse_xchg = NULL;
        w.n_parse_xchg = 0;
        st = read_hash(&w, rc->chunk, &hw, &sw);
    }
    if (st != RAP_OK)
        snprintf(x->err, sizeof x->err, "%s", rap_last_error());
    else if (hs != hw || ss.rows_read != sw.rows_read || ss.rows_rejected != sw.rows_rejected ||
             memcmp(ss.rejected, sw.rejected, sizeof ss.rejected) ||
             memcmp(ss.example, sw.example, sizeof ss.example) ||
             ss.parse_share_ranks != x->R || sw.parse_share_ranks != 0 ||
             sw.lines_parsed_here != sw.rows_read) {
        snprintf(x->err, sizeof x->err, "shared: hash %016llx, %lld rows read, %lld rejected, "
                 "%d ranks; alone: %016llx, %lld, %lld", (unsigned long long)hs,
                 (long long)ss.rows_read, (long long)ss.rows_rejected, ss.parse_share_ranks,
                 (unsigned long long)hw, (long long)sw.rows_read, (long long)sw.rows_rejected);
        x->bad++;
    }
    x->seconds = (double)ss.lines_parsed_here;
    x->steps = ss.rows_read;
    for (int i = 0; i < P; i++)
        rap_comm_free(pc[i]);
    return st;
}

/* Small chunks (about 30 lines: many a parser thread), one lane and two
 * (a directory of three files in file order), two and three parser
 * threads, 2 and 3 ranks: every rank reads exactly the unshared reader's
 * batches and accounting, and the ranks' own lines add up to the lines. */
RAP_TEST(parse_share_reader_equals_unshared)
{
    char *text = malloc((size_t)SH_LINES * 1200);
    REQUIRE(text);
    size_t n = rap_test_criteo_text(text, SH_LINES, 91, false);
    char file[512], dir[512], path[600];
    rap_test_path(file, sizeof file, "share_rows.tsv");
    rap_test_path(dir, sizeof dir, "share_dir");
    mkdir(dir, 0755);
    FILE *f = fopen(file, "wb");
    REQUIRE(f);
    CHECK(fwrite(text, 1, n, f) == n);
    fclose(f);
    size_t at = 0;
    for (int k = 0; k < 3; k++) { /* thirds, cut at lines */
        size_t e = k == 2 ? n : (n / 3) * (size_t)(k + 1);
        while (e < n && text[e - 1] != '\n')
            e++;
        snprintf(path, sizeof path, "%s/part_%d.tsv", dir, k);
        f = fopen(path, "wb");
        REQUIRE(f);
        CHECK(fwrite(text + at, 1, e - at, f) == e - at);
        fclose(f);
        at = e;
    }
    free(text);
    const reader_case cases[] = {{file, 1, 3, 8192}, {file, 1, 4, 8192}, {dir, 2, 5, 8192},
                                 {dir, 2, 4, 20000}};
    for (int c = 0; c < 4; c++)
        for (int R = 2; R <= 3; R++) {
            rap_test_rank x[8];
            if (!rap_test_run_ranks(t, R, 30, reader_share_fn, (void *)&cases[c], x))
                continue;
            double own = 0;
            for (int r = 0; r < R; r++) {
                CHECK_MSG(x[r].bad == 0, "case %d, R = %d, rank %d: %s", c, R, r, x[r].err);
                own += x[r].seconds;
            }
            CHECK_MSG(own == (double)x[0].steps, "case %d, R = %d: the ranks parsed %.0f lines "
                      "of %lld", c, R, own, (long long)x[0].steps);
        }
}

static rap_status no_alltoallv(void *ctx, const void *send, const int64_t *scount,
                               const int64_t *sdispl, void *recv, const int64_t *rcount,
                               const int64_t *rdispl, const char *name)
{
    (void)ctx, (void)send, (void)scount, (void)sdispl, (void)recv, (void)rcount, (void)rdispl;
    return rap_fail(RAP_ERR_INTERNAL, "%s: not in this test", name);
}

/* What a share allocates is what rap_parse_share_bytes counts (the memory
 * plan's number for each parser thread), for the reference in host memory
 * and, on a GPU, for the kernels in device memory. */
static void share_bytes_case(rap_test_ctx *t, const rap_parse_ops *ops, int R, size_t C)
{
    rap_parse_xchg x = {0, R, ops->device_rows, NULL, NULL, no_alltoallv};
    size_t cm, hm;
    rap_parse_share_bytes(C, R, ops->device_rows, &cm, &hm);
    uint64_t b0, n0, b1, n1;
    rap_mem_counted(&b0, &n0);
    rap_parse_share *sh = NULL;
    REQUIRE_OK(rap_parse_share_create(&x, ops, C, 1000, &sh));
    rap_mem_counted(&b1, &n1);
    rap_parse_share_free(sh);
    CHECK_MSG((double)(b1 - b0) == (double)(cm + hm), "%s, %d ranks, chunks of %zu bytes: "
              "allocated %.0f bytes, counted %zu + %zu", ops->name, R, C, (double)(b1 - b0), cm,
              hm);
}

RAP_TEST(parse_share_bytes_equal_allocation)
{
    for (int R = 2; R <= 8; R *= 2)
        share_bytes_case(t, rap_parse_ops_of(RAP_PARSE_REF), R, ((size_t)1 << 20) + 1);
    /* a comm in the wrong memory is refused */
    rap_parse_xchg x = {0, 2, true, NULL, NULL, no_alltoallv};
    rap_parse_share *sh = NULL;
    CHECK(rap_parse_share_create(&x, rap_parse_ops_of(RAP_PARSE_REF), 4096, 1000, &sh) ==
              RAP_ERR_ARG && !sh);
    rap_clear_error();
}

RAP_TEST(parse_share_bytes_equal_allocation_gpu)
{
    REQUIRE_GPU();
    for (int R = 2; R <= 8; R *= 2)
        share_bytes_case(t, rap_parse_ops_of(RAP_PARSE_GPU), R, ((size_t)8 << 20) + 1);
}
