/* parse_share.c -- ranks sharing the parse of every chunk (parse_share.h). */
#include "data/parse_share.h"

#include "core/core.h"
#include "data/parse_backend_internal.h"
#include "data/parse_ref.h"

#include <stdlib.h>
#include <string.h>

enum { HDR = 8 };                              /* int64 a rank */
enum { H_KIND, H_STATUS, H_BYTES, H_LINES, H_OWN, H_USED, H_REJ };
enum { KIND_CHUNK = 1, KIND_LEAVE = 2 };

struct rap_parse_share {
    const rap_parse_xchg *x; /* rank, size; device: rows and blocks in device memory */
    const rap_parse_ops *ops;
    size_t C;
    int64_t max_line;
    rap_schema shape;        /* Criteo's */
    rap_parse_layout lay;    /* ... its fields, for the pieces' row bounds */
    int64_t *cut;            /* (R + 1) the chunk's pieces: rank p's lines [cut[p], cut[p + 1]) */
    int64_t *cap;            /* (R) their row bounds, the rows of their blocks */
    int32_t *start;          /* (C + 2) the chunk's line offsets */
    rap_parse_rej *rej;      /* (C + 1) host: this piece's, then the chunk's */
    int64_t *hdr;            /* (2 R HDR) host: sent (R HDR: the same block R times) and received */
    int64_t *cnt;            /* (4 R) scount, sdispl, rcount, rdispl */
    void *d_hdr;             /* (2 R HDR) comm memory (dev), else NULL */
    char *send, *recv;       /* comm memory */
    size_t send_bytes, recv_bytes;
    rap_parsed piece;        /* this rank's piece's accounting */
    bool ended;
    char end_msg[512];
    int64_t own_lines, lines;
};

static size_t align8(size_t x) { return (x + 7) & ~(size_t)7; }

void rap_parse_share_bytes(size_t chunk_bytes, int ranks, bool device, size_t *comm_mem,
                           size_t *host)
{
    const rap_schema s = rap_schema_criteo();
    const size_t R = (size_t)(ranks > 1 ? ranks : 1);
    const size_t rows = rap_batch_bytes(s, rap_parse_stage_rows(chunk_bytes));
    const size_t rej = align8(sizeof(rap_parse_rej) * (chunk_bytes + 1));
    /* the send block, the received blocks, on the device the headers */
    *comm_mem = (rows + rej) + (rows + R * rap_batch_bytes(s, 1) + rej + 8 * R) +
                (device ? 2 * R * HDR * sizeof(int64_t) : 0);
    /* the line offsets and the reject list (the small header arrays aside) */
    *host = sizeof(int32_t) * (chunk_bytes + 2) + sizeof(rap_parse_rej) * (chunk_bytes + 1);
}

static void *comm_alloc(rap_parse_share *s, size_t n, const char *what)
{
    void *p = NULL;
    if (s->x->device) {
        if (rap_cuda_malloc(&p, n, what) != RAP_OK)
            return NULL;
        return p;
    }
    return rap_aligned_alloc(n, what);
}

static void comm_free(const rap_parse_share *s, void *p)
{
    if (!p)
        return;
    if (s->x->device)
        rap_cuda_free(p);
    else
        rap_aligned_free(p);
}

void rap_parse_share_free(rap_parse_share *s)
{
    if (!s)
        return;
    comm_free(s, s->send);
    comm_free(s, s->recv);
    comm_free(s, s->d_hdr);
    rap_aligned_free(s->start);
    rap_aligned_free(s->rej);
    rap_free(s->hdr);
    rap_free(s->cnt);
    rap_free(s->cut);
    rap_free(s->cap);
    rap_free(s->piece.rej);
    rap_free(s);
}

rap_status rap_parse_share_create(const rap_parse_xchg *x, const rap_parse_ops *ops,
                                  size_t chunk_bytes, int64_t max_line, rap_parse_share **out)
{
    *out = NULL;
    if (!x || !x->alltoallv || x->size < 2 || x->rank < 0 || x->rank >= x->size || !ops ||
        chunk_bytes < 1)
        return rap_fail(RAP_ERR_ARG, "parse share: needs an exchange of 2 or more ranks and a "
                        "parser");
    if (x->device != ops->device_rows)
        return rap_fail(RAP_ERR_ARG, "parse share: the %s parser's rows are in %s memory, the "
                        "exchange's in %s memory", ops->name, ops->device_rows ? "device" : "host",
                        x->device ? "device" : "host");
    rap_parse_share *s = rap_calloc(sizeof *s, "parse share");
    if (!s)
        return RAP_ERR_NOMEM;
    s->x = x;
    s->ops = ops;
    s->C = chunk_bytes;
    s->max_line = max_line;
    s->shape = rap_schema_criteo();
    rap_parse_layout_criteo(&s->lay);
    const size_t R = (size_t)x->size;
    const size_t rows = rap_batch_bytes(s->shape, rap_parse_stage_rows(chunk_bytes));
    const size_t rej = align8(sizeof(rap_parse_rej) * (chunk_bytes + 1));
    s->send_bytes = rows + rej;
    s->recv_bytes = rows + R * rap_batch_bytes(s->shape, 1) + rej + 8 * R;
    s->start = rap_aligned_alloc(sizeof(int32_t) * (chunk_bytes + 2), "parse share offsets");
    s->rej = rap_aligned_alloc(sizeof(rap_parse_rej) * (chunk_bytes + 1), "parse share rejects");
    s->hdr = rap_calloc(2 * R * HDR * sizeof(int64_t), "parse share headers");
    s->cnt = rap_calloc(4 * R * sizeof(int64_t), "parse share counts");
    s->cut = rap_calloc((R + 1) * sizeof(int64_t), "parse share pieces");
    s->cap = rap_calloc(R * sizeof(int64_t), "parse share pieces");
    s->send = comm_alloc(s, s->send_bytes, "parse share send block");
    s->recv = comm_alloc(s, s->recv_bytes, "parse share blocks");
    if (x->device)
        s->d_hdr = comm_alloc(s, 2 * R * HDR * sizeof(int64_t), "parse share headers");
    if (!s->start || !s->rej || !s->hdr || !s->cnt || !s->cut || !s->cap || !s->send ||
        !s->recv || (x->device && !s->d_hdr)) {
        rap_parse_share_free(s);
        return RAP_ERR_NOMEM;
    }
    *out = s;
    return RAP_OK;
}

void rap_parse_share_counts(const rap_parse_share *s, int64_t *own_lines, int64_t *lines)
{
    if (own_lines)
        *own_lines = s ? s->own_lines : 0;
    if (lines)
        *lines = s ? s->lines : 0;
}

/* Ends the sharing with a message; later chunks fail with it. */
static rap_status end_share(rap_parse_share *s, rap_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rap_status end_share(rap_parse_share *s, rap_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->end_msg, sizeof s->end_msg, fmt, ap);
    va_end(ap);
    s->ended = true;
    return rap_fail(st, "%s", s->end_msg);
}

/* Copies n bytes between host and comm memory (either way), waited for. */
static rap_status copy_mem(rap_parse_share *s, void *dst, const void *src, size_t n)
{
    if (n == 0)
        return RAP_OK;
    if (!s->x->device) {
        memcpy(dst, src, n);
        return RAP_OK;
    }
    return rap_parse_copy_sync(dst, src, n, s->x->stream);
}

/* The headers' round: this rank's h (HDR) to every rank, theirs into
 * s->hdr + R * HDR (rank p's at p * HDR). */
static rap_status exchange_headers(rap_parse_share *s, const int64_t *h)
{
    const int R = s->x->size;
    int64_t *sc = s->cnt, *sd = sc + R, *rc = sd + R, *rd = rc + R;
    for (int p = 0; p < R; p++) {
        sc[p] = HDR;
        sd[p] = 0;
        rc[p] = HDR;
        rd[p] = (int64_t)p * HDR;
    }
    int64_t *got = s->hdr + (size_t)R * HDR;
    if (!s->x->device) {
        memcpy(s->hdr, h, HDR * sizeof *h);
        return s->x->alltoallv(s->x->ctx, s->hdr, sc, sd, got, rc, rd, "parse share header");
    }
    int64_t *dsend = s->d_hdr, *drecv = dsend + (size_t)R * HDR;
    RAP_TRY(copy_mem(s, dsend, h, HDR * sizeof *h));
    RAP_TRY(s->x->alltoallv(s->x->ctx, dsend, sc, sd, drecv, rc, rd, "parse share header"));
    return copy_mem(s, got, drecv, (size_t)R * HDR * sizeof *got);
}

void rap_parse_share_leave(rap_parse_share *s)
{
    if (!s || s->ended)
        return;
    int64_t h[HDR] = {KIND_LEAVE};
    if (exchange_headers(s, h) != RAP_OK)
        rap_clear_error();
    s->ended = true;
    snprintf(s->end_msg, sizeof s->end_msg, "parse share: this rank left");
}

/* The pieces of a chunk of `lines` lines (s->start its offsets): rank p's
 * the lines of tiles [p NT / R, (p + 1) NT / R), and their row bounds. */
static void cut_pieces(rap_parse_share *s, int64_t lines)
{
    const int R = s->x->size;
    const int64_t nt = (lines + RAP_PARSE_TILE - 1) / RAP_PARSE_TILE;
    for (int p = 0; p <= R; p++) {
        int64_t l = nt * p / R * RAP_PARSE_TILE;
        s->cut[p] = l < lines ? l : lines;
    }
    for (int p = 0; p < R; p++)
        s->cap[p] = rap_parse_rows_bound(&s->lay, s->cut[p + 1] - s->cut[p],
                                         (int64_t)s->start[s->cut[p + 1]] - s->start[s->cut[p]]);
}

static size_t rows_bytes(const rap_parse_share *s, int64_t cap)
{
    return cap > 0 ? rap_batch_bytes(s->shape, cap) : 0;
}

static void view(const rap_parse_share *s, rap_batch *b, int64_t cap, char *block)
{
    rap_batch_view(b, s->shape, cap, block);
    b->device = s->x->device;
}

/* This rank's piece: parsed by the backend into the send block. */
static rap_status parse_piece(rap_parse_share *s, void *ps, const char *text)
{
    const int me = s->x->rank;
    const int64_t a = s->cut[me], b = s->cut[me + 1], cap = s->cap[me];
    s->piece.n_lines = s->piece.n_used = s->piece.n_rej = 0;
    if (b <= a)
        return RAP_OK;
    rap_batch mine;
    view(s, &mine, cap, s->send);
    const size_t off = (size_t)s->start[a], n = (size_t)s->start[b] - off;
    RAP_TRY(s->ops->chunk(ps, text + off, n, &s->piece, &mine));
    if (s->piece.n_lines != b - a || s->piece.n_used > cap || s->piece.n_rej > b - a ||
        s->piece.n_used + s->piece.n_rej != b - a)
        return rap_fail(RAP_ERR_INTERNAL, "parse share: the piece of %lld lines parsed into "
                        "%lld lines, %lld good, %lld rejected", (long long)(b - a),
                        (long long)s->piece.n_lines, (long long)s->piece.n_used,
                        (long long)s->piece.n_rej);
    return RAP_OK;
}

/* The round's headers checked against what this rank knows of the chunk. */
static rap_status check_headers(rap_parse_share *s, int64_t bytes, int64_t lines)
{
    const int me = s->x->rank;
    const int64_t *g = s->hdr + (size_t)s->x->size * HDR;
    for (int p = 0; p < s->x->size; p++) {
        const int64_t *h = g + (size_t)p * HDR;
        if (h[H_KIND] == KIND_LEAVE)
            return end_share(s, RAP_ERR_IO, "parse share: rank %d stopped parsing its share of "
                             "the chunks (its reader closed) while rank %d still parses",
                             p, me);
        if (h[H_KIND] != KIND_CHUNK)
            return end_share(s, RAP_ERR_IO, "parse share: rank %d sent a header of kind %lld",
                             p, (long long)h[H_KIND]);
        if (h[H_STATUS] != RAP_OK)
            return end_share(s, RAP_ERR_IO, "parse share: rank %d could not parse its piece of "
                             "the chunk (%s)", p, rap_status_name((rap_status)h[H_STATUS]));
        if (h[H_BYTES] != bytes || h[H_LINES] != lines)
            return end_share(s, RAP_ERR_DATA, "parse share: the ranks cut different chunks: "
                             "rank %d one of %lld bytes, %lld lines, rank %d one of %lld bytes, "
                             "%lld lines (every rank must read the same input the same way)",
                             p, (long long)h[H_BYTES], (long long)h[H_LINES], me,
                             (long long)bytes, (long long)lines);
        const int64_t a = s->cut[p], b = s->cut[p + 1];
        if (h[H_OWN] != b - a || h[H_USED] < 0 || h[H_REJ] < 0 ||
            h[H_USED] + h[H_REJ] != b - a || h[H_USED] > s->cap[p])
            return end_share(s, RAP_ERR_IO, "parse share: rank %d's piece of lines [%lld, %lld) "
                             "came back as %lld lines, %lld good, %lld rejected", p,
                             (long long)a, (long long)b, (long long)h[H_OWN],
                             (long long)h[H_USED], (long long)h[H_REJ]);
    }
    return RAP_OK;
}

rap_status rap_parse_share_chunk(rap_parse_share *s, void *ps, const char *text, size_t n,
                                 rap_parsed *out, rap_batch *stage)
{
    if (s->ended)
        return rap_fail(RAP_ERR_IO, "%s", s->end_msg);
    if (n > s->C)
        return rap_fail(RAP_ERR_INTERNAL, "parse share: a chunk of %zu bytes, at most %zu", n,
                        s->C);
    const int R = s->x->size, me = s->x->rank;
    const int64_t lines = rap_parse_cut_lines(text, n, s->start);
    cut_pieces(s, lines);
    const int64_t own = s->cut[me + 1] - s->cut[me];
    rap_status pst = parse_piece(s, ps, text);
    char pmsg[512] = "";
    if (pst != RAP_OK)
        snprintf(pmsg, sizeof pmsg, "%s", rap_last_error());
    int64_t h[HDR] = {KIND_CHUNK, pst, (int64_t)n, lines, own, s->piece.n_used,
                      s->piece.n_rej, 0};
    if (pst != RAP_OK)
        h[H_OWN] = h[H_USED] = h[H_REJ] = 0;
    rap_status st = exchange_headers(s, h);
    if (st != RAP_OK)
        return end_share(s, st, "%s", rap_last_error());
    if (pst != RAP_OK)
        return end_share(s, pst, "%s", pmsg);
    RAP_TRY(check_headers(s, (int64_t)n, lines));

    /* the blocks: rows (cap_p layout) then rejects, 8-byte elements */
    const int64_t *g = s->hdr + (size_t)R * HDR;
    int64_t *sc = s->cnt, *sd = sc + R, *rc = sd + R, *rd = rc + R;
    const size_t my_rows = rows_bytes(s, s->cap[me]);
    const size_t my_block = my_rows + align8(sizeof(rap_parse_rej) * (size_t)s->piece.n_rej);
    for (int64_t i = 0; i < s->piece.n_rej; i++) {
        const rap_parse_reject *e = &s->piece.rej[i];
        s->rej[i] = (rap_parse_rej){(int32_t)e->line, (int32_t)e->pos, (int16_t)e->reason, -1};
    }
    RAP_TRY(copy_mem(s, s->send + my_rows, s->rej, sizeof(rap_parse_rej) * (size_t)s->piece.n_rej));
    size_t at = 0;
    for (int p = 0; p < R; p++) {
        const size_t blk = rows_bytes(s, s->cap[p]) +
                           align8(sizeof(rap_parse_rej) * (size_t)g[p * HDR + H_REJ]);
        sc[p] = (int64_t)(my_block / 8);
        sd[p] = 0;
        rc[p] = (int64_t)(blk / 8);
        rd[p] = (int64_t)(at / 8);
        at += blk;
    }
    if (at > s->recv_bytes)
        return end_share(s, RAP_ERR_INTERNAL, "parse share: the chunk's blocks need %zu bytes, "
                         "%zu allocated", at, s->recv_bytes);
    st = s->x->alltoallv(s->x->ctx, s->send, sc, sd, s->recv, rc, rd, "parse share blocks");
    if (st != RAP_OK)
        return end_share(s, st, "%s", rap_last_error());

    /* the chunk's rows and rejects in rank order */
    stage->rows = 0;
    int64_t used = 0, nrej = 0;
    for (int p = 0; p < R; p++) {
        const int64_t pa = s->cut[p], pb = s->cut[p + 1], pcap = s->cap[p],
                      pu = g[p * HDR + H_USED], pr = g[p * HDR + H_REJ];
        char *blk = s->recv + rd[p] * 8;
        if (pu > 0) {
            rap_batch v;
            view(s, &v, pcap, blk);
            if (s->x->device)
                RAP_TRY(rap_batch_append_device(stage, &v, 0, pu, s->x->stream));
            else
                rap_batch_append(stage, &v, 0, pu);
        }
        rap_parse_rej *r = s->rej + nrej;
        RAP_TRY(copy_mem(s, r, blk + rows_bytes(s, pcap), sizeof *r * (size_t)pr));
        for (int64_t i = 0; i < pr; i++) {
            if (r[i].line < 0 || r[i].line >= pb - pa || r[i].pos < 0 || r[i].pos > pu ||
                r[i].reason < 0 || r[i].reason >= RAP_REJ_COUNT)
                return end_share(s, RAP_ERR_IO, "parse share: rank %d sent a reject at line "
                                 "%d of its %lld (position %d of %lld, reason %d)", p,
                                 r[i].line, (long long)(pb - pa), r[i].pos, (long long)pu,
                                 r[i].reason);
            r[i].line += (int32_t)pa;
            r[i].pos += (int32_t)used;
        }
        used += pu;
        nrej += pr;
    }
    if (s->x->device)
        RAP_TRY(rap_parse_sync(s->x->stream));
    s->own_lines += own;
    s->lines += lines;
    rap_parse_result res;
    memset(&res, 0, sizeof res);
    res.n_lines = lines;
    res.rows_used = used;
    res.rows_rejected = nrej;
    return rap_parse_take_rejects(out, s->rej, nrej, &res, text, s->start, s->max_line);
}
