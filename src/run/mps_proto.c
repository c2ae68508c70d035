/* mps_proto.c -- the mps mode's message codec (mps.h, docs/MPS.md): the
 * frames of every message, their encoding and decoding (every count and
 * length checked), sending and receiving them on a stream socket, and the
 * byte layout of a slot both processes compute. Works without CUDA. */
#include "run/mps_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#define MPS_MAGIC 0x4d504152u /* "RAPM" */
#define MPS_HEADER 12
#define MPS_SMALL 256         /* frame buffer for BATCH / RELEASE */
#define MPS_BIG 65536         /* any other frame */

/* ================================================================ codec */

typedef struct {
    uint8_t *p;
    size_t cap, len;
    bool over;
} wbuf;

static void w_bytes(wbuf *w, const void *x, size_t n)
{
    if (w->over || n > w->cap - w->len) {
        w->over = true;
        return;
    }
    memcpy(w->p + w->len, x, n);
    w->len += n;
}
static void w_u32(wbuf *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_i32(wbuf *w, int32_t v) { w_bytes(w, &v, 4); }
static void w_i64(wbuf *w, int64_t v) { w_bytes(w, &v, 8); }
static void w_f64(wbuf *w, double v) { w_bytes(w, &v, 8); }
static void w_str(wbuf *w, const char *s, size_t field)
{
    size_t n = strnlen(s, field - 1);
    w_u32(w, (uint32_t)n);
    w_bytes(w, s, n);
}

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *bad; /* first problem, NULL if none */
} rbuf;

static void r_bytes(rbuf *r, void *x, size_t n)
{
    if (r->bad)
        return;
    if (n > r->len - r->pos) {
        r->bad = "message shorter than its fields";
        memset(x, 0, n);
        return;
    }
    memcpy(x, r->p + r->pos, n);
    r->pos += n;
}
static uint32_t r_u32(rbuf *r)
{
    uint32_t v = 0;
    r_bytes(r, &v, 4);
    return v;
}
static int32_t r_i32(rbuf *r)
{
    int32_t v = 0;
    r_bytes(r, &v, 4);
    return v;
}
static int64_t r_i64(rbuf *r)
{
    int64_t v = 0;
    r_bytes(r, &v, 8);
    return v;
}
static double r_f64(rbuf *r)
{
    double v = 0;
    r_bytes(r, &v, 8);
    return v;
}
static void r_str(rbuf *r, char *s, size_t field)
{
    uint32_t n = r_u32(r);
    s[0] = 0;
    if (r->bad)
        return;
    if (n >= field) {
        r->bad = "string longer than its field";
        return;
    }
    r_bytes(r, s, n);
    s[r->bad ? 0 : n] = 0;
}

static void put_stats(wbuf *w, const rap_reader_stats *st)
{
    w_i64(w, st->rows_read);
    w_i64(w, st->rows_used);
    w_i64(w, st->rows_rejected);
    w_i64(w, st->bytes_read);
    w_i32(w, st->files);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        w_i64(w, st->rejected[i]);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        for (int j = 0; j < RAP_REJ_EXAMPLES; j++) {
            w_str(w, st->example[i][j], sizeof st->example[i][j]);
            w_str(w, st->detail[i][j], sizeof st->detail[i][j]);
        }
}

static void get_stats(rbuf *r, rap_reader_stats *st)
{
    st->rows_read = r_i64(r);
    st->rows_used = r_i64(r);
    st->rows_rejected = r_i64(r);
    st->bytes_read = r_i64(r);
    st->files = r_i32(r);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        st->rejected[i] = r_i64(r);
    for (int i = 0; i < RAP_REJ_COUNT; i++)
        for (int j = 0; j < RAP_REJ_EXAMPLES; j++) {
            r_str(r, st->example[i][j], sizeof st->example[i][j]);
            r_str(r, st->detail[i][j], sizeof st->detail[i][j]);
        }
}

rap_status rap_mps_encode(const rap_mps_msg *m, uint8_t *buf, size_t cap, size_t *len)
{
    *len = 0;
    if (m->type < RAP_MPS_CONFIG || m->type >= RAP_MPS_MSG_COUNT)
        return rap_fail(RAP_ERR_ARG, "mps: cannot encode message type %d", (int)m->type);
    wbuf w = {buf, cap, 0, false};
    w_u32(&w, MPS_MAGIC);
    w_u32(&w, (uint32_t)m->type);
    w_u32(&w, 0); /* payload length, patched below */
    switch (m->type) {
    case RAP_MPS_CONFIG:
        if (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES)
            return rap_fail(RAP_ERR_ARG, "mps: CONFIG with %d tables", m->n_tables);
        w_i32(&w, m->version);
        w_str(&w, m->plan, sizeof m->plan);
        w_str(&w, m->input, sizeof m->input);
        w_i32(&w, m->threads);
        w_i32(&w, m->bad_rows);
        w_i32(&w, m->follow);
        w_f64(&w, m->idle_timeout_s);
        w_i64(&w, m->max_line);
        w_i64(&w, m->max_rows);
        w_i64(&w, m->batch_rows);
        w_i32(&w, m->n_slots);
        w_i32(&w, m->schema.n_dense);
        w_i32(&w, m->schema.n_sparse);
        w_i32(&w, m->schema.ids_per_row);
        w_i32(&w, m->n_dense);
        w_i32(&w, m->n_tables);
        w_i32(&w, m->device);
        w_i32(&w, m->log_level);
        w_bytes(&w, m->table_rows, sizeof(int64_t) * (size_t)m->n_tables);
        break;
    case RAP_MPS_SHAPE:
        if (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES)
            return rap_fail(RAP_ERR_ARG, "mps: SHAPE with %d tables", m->n_tables);
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        w_i32(&w, m->n_tables);
        w_bytes(&w, m->ids_cap, sizeof(int64_t) * (size_t)m->n_tables);
        break;
    case RAP_MPS_HANDLES:
        if (m->n_slots < 0 || m->n_slots > RAP_MPS_MAX_SLOTS)
            return rap_fail(RAP_ERR_ARG, "mps: HANDLES with %d slots", m->n_slots);
        w_i32(&w, m->n_slots);
        w_bytes(&w, m->mem_handle, RAP_MPS_HANDLE);
        w_i64(&w, (int64_t)m->total_bytes);
        w_i64(&w, (int64_t)m->slot_bytes);
        for (int s = 0; s < m->n_slots; s++) {
            w_bytes(&w, m->ready_handle[s], RAP_MPS_HANDLE);
            w_bytes(&w, m->free_handle[s], RAP_MPS_HANDLE);
        }
        break;
    case RAP_MPS_READY:
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        break;
    case RAP_MPS_BATCH:
        w_i32(&w, m->slot);
        w_i64(&w, m->seq);
        w_i64(&w, m->rows);
        break;
    case RAP_MPS_RELEASE:
        w_i32(&w, m->slot);
        break;
    case RAP_MPS_END:
        w_i32(&w, m->status);
        w_str(&w, m->message, sizeof m->message);
        w_i64(&w, m->batches);
        w_i64(&w, m->rows);
        put_stats(&w, &m->stats);
        break;
    default:
        break;
    }
    if (w.over)
        return rap_fail(RAP_ERR_ARG, "mps: message type %d does not fit in %zu bytes",
                        (int)m->type, cap);
    uint32_t payload = (uint32_t)(w.len - MPS_HEADER);
    memcpy(buf + 8, &payload, 4);
    *len = w.len;
    return RAP_OK;
}

rap_status rap_mps_decode(const uint8_t *buf, size_t len, rap_mps_msg *m)
{
    if (len < MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: frame of %zu bytes, expected at least a %d-byte header",
                        len, MPS_HEADER);
    rbuf r = {buf, len, 0, NULL};
    uint32_t magic = r_u32(&r), type = r_u32(&r), payload = r_u32(&r);
    if (magic != MPS_MAGIC)
        return rap_fail(RAP_ERR_DATA, "mps: frame starts with 0x%08x, expected the magic 0x%08x",
                        magic, MPS_MAGIC);
    if (type < RAP_MPS_CONFIG || type >= RAP_MPS_MSG_COUNT)
        return rap_fail(RAP_ERR_DATA, "mps: unknown message type %u", type);
    if ((size_t)payload != len - MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: header says %u payload bytes, the frame holds %zu",
                        payload, len - MPS_HEADER);
    m->type = (rap_mps_msg_type)type;
    switch (m->type) {
    case RAP_MPS_CONFIG:
        m->version = r_i32(&r);
        r_str(&r, m->plan, sizeof m->plan);
        r_str(&r, m->input, sizeof m->input);
        m->threads = r_i32(&r);
        m->bad_rows = r_i32(&r);
        m->follow = r_i32(&r);
        m->idle_timeout_s = r_f64(&r);
        m->max_line = r_i64(&r);
        m->max_rows = r_i64(&r);
        m->batch_rows = r_i64(&r);
        m->n_slots = r_i32(&r);
        m->schema.n_dense = r_i32(&r);
        m->schema.n_sparse = r_i32(&r);
        m->schema.ids_per_row = r_i32(&r);
        m->n_dense = r_i32(&r);
        m->n_tables = r_i32(&r);
        m->device = r_i32(&r);
        m->log_level = r_i32(&r);
        if (!r.bad && (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES))
            return rap_fail(RAP_ERR_DATA, "mps: CONFIG with %d tables, expected 0..%d",
                            m->n_tables, RAP_MAX_TABLES);
        r_bytes(&r, m->table_rows, sizeof(int64_t) * (size_t)(r.bad ? 0 : m->n_tables));
        break;
    case RAP_MPS_SHAPE:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        m->n_tables = r_i32(&r);
        if (!r.bad && (m->n_tables < 0 || m->n_tables > RAP_MAX_TABLES))
            return rap_fail(RAP_ERR_DATA, "mps: SHAPE with %d tables, expected 0..%d",
                            m->n_tables, RAP_MAX_TABLES);
        r_bytes(&r, m->ids_cap, sizeof(int64_t) * (size_t)(r.bad ? 0 : m->n_tables));
        break;
    case RAP_MPS_HANDLES:
        m->n_slots = r_i32(&r);
        if (!r.bad && (m->n_slots < 0 || m->n_slots > RAP_MPS_MAX_SLOTS))
            return rap_fail(RAP_ERR_DATA, "mps: HANDLES with %d slots, expected 0..%d",
                            m->n_slots, RAP_MPS_MAX_SLOTS);
        r_bytes(&r, m->mem_handle, RAP_MPS_HANDLE);
        m->total_bytes = (uint64_t)r_i64(&r);
        m->slot_bytes = (uint64_t)r_i64(&r);
        for (int s = 0; s < m->n_slots && !r.bad; s++) {
            r_bytes(&r, m->ready_handle[s], RAP_MPS_HANDLE);
            r_bytes(&r, m->free_handle[s], RAP_MPS_HANDLE);
        }
        break;
    case RAP_MPS_READY:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        break;
    case RAP_MPS_BATCH:
        m->slot = r_i32(&r);
        m->seq = r_i64(&r);
        m->rows = r_i64(&r);
        break;
    case RAP_MPS_RELEASE:
        m->slot = r_i32(&r);
        break;
    case RAP_MPS_END:
        m->status = r_i32(&r);
        r_str(&r, m->message, sizeof m->message);
        m->batches = r_i64(&r);
        m->rows = r_i64(&r);
        get_stats(&r, &m->stats);
        break;
    default:
        break;
    }
    if (r.bad)
        return rap_fail(RAP_ERR_DATA, "mps: message type %u: %s", type, r.bad);
    if (r.pos != len)
        return rap_fail(RAP_ERR_DATA, "mps: message type %u: %zu bytes left over", type,
                        len - r.pos);
    return RAP_OK;
}

static size_t frame_cap(rap_mps_msg_type t)
{
    return t == RAP_MPS_BATCH || t == RAP_MPS_RELEASE ? MPS_SMALL : MPS_BIG;
}

rap_status rap_mps_send(int fd, const rap_mps_msg *m)
{
    uint8_t small[MPS_SMALL];
    size_t cap = frame_cap(m->type), len = 0;
    uint8_t *buf = cap == MPS_SMALL ? small : rap_malloc(cap, "mps message");
    if (!buf)
        return RAP_ERR_NOMEM;
    rap_status st = rap_mps_encode(m, buf, cap, &len);
    for (size_t done = 0; st == RAP_OK && done < len;) {
        ssize_t n = send(fd, buf + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            st = rap_fail(RAP_ERR_IO, "mps: sending message type %d: %s", (int)m->type,
                          n < 0 ? strerror(errno) : "nothing written");
        else
            done += (size_t)n;
    }
    if (buf != small)
        rap_free(buf);
    return st;
}

/* Reads exactly n bytes. Returns 1 on success, 0 on end of stream before
 * any byte, -1 on an error or an end in the middle (errno set). */
static int read_full(int fd, void *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = recv(fd, (char *)p + done, n - done, 0);
        if (k < 0 && errno == EINTR && !rap_mps_srv_stop)
            continue; /* a signal; in the server, SIGTERM ends the wait */
        if (k < 0)
            return -1;
        if (k == 0) {
            if (done == 0)
                return 0;
            errno = EPIPE;
            return -1;
        }
        done += (size_t)k;
    }
    return 1;
}

rap_status rap_mps_recv(int fd, rap_mps_msg *m, bool *closed)
{
    if (closed)
        *closed = false;
    uint8_t head[MPS_HEADER];
    int k = read_full(fd, head, MPS_HEADER);
    if (k == 0) {
        if (closed)
            *closed = true;
        return rap_fail(RAP_ERR_IO, "mps: the other side closed the connection");
    }
    if (k < 0)
        return rap_fail(RAP_ERR_IO, "mps: reading a message header: %s", strerror(errno));
    uint32_t magic, payload;
    memcpy(&magic, head, 4);
    memcpy(&payload, head + 8, 4);
    if (magic != MPS_MAGIC || payload > RAP_MPS_MAX_FRAME - MPS_HEADER)
        return rap_fail(RAP_ERR_DATA, "mps: bad frame header (magic 0x%08x, %u payload bytes)",
                        magic, payload);
    size_t len = MPS_HEADER + (size_t)payload;
    uint8_t small[MPS_SMALL];
    uint8_t *buf = len <= MPS_SMALL ? small : rap_malloc(len, "mps message");
    if (!buf)
        return RAP_ERR_NOMEM;
    memcpy(buf, head, MPS_HEADER);
    rap_status st = RAP_OK;
    if (payload && read_full(fd, buf + MPS_HEADER, payload) != 1)
        st = rap_fail(RAP_ERR_IO, "mps: reading a %u-byte message: %s", payload,
                      strerror(errno ? errno : EPIPE));
    if (st == RAP_OK)
        st = rap_mps_decode(buf, len, m);
    if (buf != small)
        rap_free(buf);
    return st;
}

/* ================================================================ layout */

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

void rap_mps_layout_free(rap_mps_layout *l)
{
    if (!l)
        return;
    rap_free(l->off);
    rap_free(l->ids);
    memset(l, 0, sizeof *l);
}

rap_status rap_mps_layout_make(int64_t B, int nd, int nt, const int64_t *ids_cap,
                               rap_mps_layout *l)
{
    memset(l, 0, sizeof *l);
    if (B < 1 || nd < 0 || nt < 0 || nt > RAP_MAX_TABLES || B > ((int64_t)1 << 40))
        return rap_fail(RAP_ERR_ARG, "mps: slot of %lld rows, %d dense, %d tables", (long long)B,
                        nd, nt);
    l->off = rap_calloc(sizeof(size_t) * (size_t)(nt ? nt : 1), "mps layout");
    l->ids = rap_calloc(sizeof(size_t) * (size_t)(nt ? nt : 1), "mps layout");
    if (!l->off || !l->ids) {
        rap_mps_layout_free(l);
        return RAP_ERR_NOMEM;
    }
    double total = 0;
    size_t at = 0;
    l->dense = at;
    at = align256(at + sizeof(float) * (size_t)B * (size_t)nd);
    l->label = at;
    at = align256(at + sizeof(float) * (size_t)B);
    total = (double)at;
    for (int t = 0; t < nt; t++) {
        if (ids_cap[t] < 1 || ids_cap[t] > (1 << 20)) {
            rap_mps_layout_free(l);
            return rap_fail(RAP_ERR_ARG, "mps: table %d with %lld ids per row", t,
                            (long long)ids_cap[t]);
        }
        l->off[t] = at;
        at = align256(at + sizeof(int64_t) * (size_t)(B + 1));
        l->ids[t] = at;
        at = align256(at + sizeof(int64_t) * (size_t)B * (size_t)ids_cap[t]);
        total += 8.0 * (double)(B + 1) + 8.0 * (double)B * (double)ids_cap[t] + 512;
    }
    if (total > 1e15) {
        rap_mps_layout_free(l);
        return rap_fail(RAP_ERR_ARG, "mps: a slot of %.3g bytes", total);
    }
    l->bytes = at;
    return RAP_OK;
}
