/*
 * reader.c -- the Criteo TSV reader (rap.h, section "reader").
 *
 * Three kinds of threads share a ring of S slots:
 *
 *   reading thread  reads/decompresses the input into a slot's buffer (C
 *                   bytes), cuts it after its last complete line, carries
 *                   the partial line over to the next slot, and publishes
 *                   the slots in input order (sequence numbers 0, 1, ...).
 *                   A line longer than max_line is never buffered whole:
 *                   only its first max_line + 1 bytes are kept, and the
 *                   last kept byte is made 0 when the dropped tail holds a
 *                   binary byte (or when it is a '\r' that more bytes
 *                   follow), so the parser still classifies it as binary
 *                   or long, as it would the whole line. A last line with
 *                   no '\n' gets one when its file ends (never while a
 *                   follow waits for the rest of it).
 *   parser threads  parse published slots in any order (parse.c).
 *   the caller      rap_reader_next copies parsed slots into its batch in
 *                   sequence order, counts rejects and frees the slots.
 *
 * Memory is S slots of C bytes plus their parsed rows: it does not grow
 * with the input. Output does not depend on the number of threads or on
 * where chunks are cut: every line is parsed on its own, and batches are
 * filled in input order (only a follow that waits for data returns a batch
 * before it is full). Slot states: FREE -> FILLING (reader) -> FILLED ->
 * PARSING (a parser) -> PARSED -> FREE (rap_reader_next).
 *
 * A chunk never spans two files; the caller side numbers lines per file
 * for "path:line". Stop: rap_reader_stop only sets an atomic flag; the
 * reading thread looks at it before each read and every <= 100 ms while
 * waiting (follow sleep, pipe poll), drops a partial line and ends;
 * chunks already read are still parsed and handed out. Errors of the
 * reading thread (I/O, corrupt gzip) reach the caller after the rows read
 * before them.
 */
#include "data/reader_internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/parse.h"
#include "data/source.h"

#define DEFAULT_CHUNK ((size_t)1 << 20)
#define MAX_LINE_LIMIT ((int64_t)64 << 20)
#define MAX_THREADS 256
#define POLL_S 0.05 /* follow: how often a quiet input is looked at again */

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_FILLED, SLOT_PARSING, SLOT_PARSED };

typedef struct {
    int state;
    char *buf;            /* (C+1) whole lines, each ending in '\n' */
    size_t len;
    int64_t file_seq;     /* 1 for the first file opened, 2 for the next ... */
    char path[1024];      /* for messages */
    rap_parsed out;
    rap_status parse_status;
    char parse_msg[256];
} slot;

/* The reading thread's state while filling one slot. */
typedef struct {
    slot *sl;
    size_t len;           /* bytes in sl->buf */
    size_t line_start;    /* start of the line not yet ended by '\n' */
    bool skipping;        /* that line is too long: bytes are dropped */
    size_t prefix_end;    /* skipping: end of its kept first max_line+1 bytes */
    bool bin;             /* skipping: a binary byte was dropped */
    bool last_cr;         /* skipping: the last dropped byte was '\r' */
} filler;

struct rap_reader {
    rap_reader_config cfg;
    char *input;          /* copy of cfg.input */
    bool is_dir;
    rap_source *first;    /* file or stdin opened by rap_reader_open */
    char **names;         /* (n_names) directory entries read or to read, in order */
    int64_t n_names, cap_names;
    size_t C;             /* chunk bytes */
    int n_parsers;
    int S;
    slot *slots;          /* (S) */
    char *carry;          /* (C) partial line moving to the next slot */
    pthread_t reader_tid;
    bool reader_started;
    pthread_t *parser_tid; /* (n_parsers) */
    int parsers_started;
    bool sync_init;

    pthread_mutex_t mu;   /* guards the ring and the flags below */
    pthread_cond_t cv_reader, cv_parser, cv_consumer;
    int64_t produced, parse_next, consumed;
    bool reader_done, idle, closing;
    rap_status rd_err;
    char rd_msg[2048];
    atomic_int stop;

    /* reading thread only */
    int64_t lines_emitted;
    double last_data;
    int64_t file_seq;

    /* rap_reader_next only */
    bool c_started;
    int64_t c_u, c_k;     /* progress in the current slot: good rows, rejects */
    int64_t c_file_seq, c_line_base, c_slot_base;
    rap_status sticky;
    char sticky_msg[2048];
    int64_t used_total;

    pthread_mutex_t st_mu; /* guards st */
    rap_reader_stats st;
};

/* ------------------------------------------------------------- names */

const char *rap_reject_reason_name(rap_reject_reason r)
{
    switch (r) {
    case RAP_REJ_FIELDS: return "fields";
    case RAP_REJ_LABEL: return "label";
    case RAP_REJ_INT: return "int";
    case RAP_REJ_CAT: return "cat";
    case RAP_REJ_RANGE: return "range";
    case RAP_REJ_LONG: return "long";
    case RAP_REJ_BINARY: return "binary";
    case RAP_REJ_COUNT: break;
    }
    return "unknown";
}

rap_reader_config rap_reader_defaults(void)
{
    rap_reader_config c;
    memset(&c, 0, sizeof c);
    c.input = NULL;
    c.threads = 0;
    c.bad_rows = RAP_BAD_SKIP;
    c.follow = false;
    c.idle_timeout_s = 0;
    c.max_line = 65536;
    c.max_rows = 0;
    return c;
}

/* ---------------------------------------------------------- directory */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the regular, non-hidden files of the input directory whose names
 * sort after the last name known, in strcmp order. *added: how many. */
static rap_status rescan(rap_reader *r, int64_t *added)
{
    *added = 0;
    DIR *d = opendir(r->input);
    if (!d)
        return rap_fail(RAP_ERR_IO, "%s: %s", r->input, strerror(errno));
    const char *last = r->n_names ? r->names[r->n_names - 1] : NULL;
    char **found = NULL;
    int64_t n = 0, cap = 0;
    rap_status st = RAP_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || (last && strcmp(e->d_name, last) <= 0))
            continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", r->input, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **g = rap_realloc(found, (size_t)cap * sizeof *g, "directory listing");
            if (!g) {
                st = RAP_ERR_NOMEM;
                break;
            }
            found = g;
        }
        if (!(found[n] = strdup(e->d_name))) {
            st = rap_fail(RAP_ERR_NOMEM, "out of memory listing %s", r->input);
            break;
        }
        n++;
    }
    closedir(d);
    if (st == RAP_OK && n > 0) {
        qsort(found, (size_t)n, sizeof *found, cmp_names);
        if (r->n_names + n > r->cap_names) {
            int64_t c = (r->n_names + n) * 2;
            char **g = rap_realloc(r->names, (size_t)c * sizeof *g, "directory listing");
            if (!g)
                st = RAP_ERR_NOMEM;
            else {
                r->names = g;
                r->cap_names = c;
            }
        }
        if (st == RAP_OK) {
            memcpy(r->names + r->n_names, found, (size_t)n * sizeof *found);
            r->n_names += n;
            *added = n;
            n = 0;
        }
    }
    for (int64_t i = 0; i < n; i++)
        free(found[i]);
    rap_free(found);
    return st;
}

/* ------------------------------------------------------ reading thread */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Takes the slot of the next sequence number for filling. RAP_ERR_INTERRUPTED
 * when the reader is being closed. */
static rap_status acquire(rap_reader *r, filler *f, const char *path)
{
    pthread_mutex_lock(&r->mu);
    slot *sl = &r->slots[r->produced % r->S];
    while (sl->state != SLOT_FREE && !r->closing)
        pthread_cond_wait(&r->cv_reader, &r->mu);
    bool closing = r->closing;
    if (!closing)
        sl->state = SLOT_FILLING;
    pthread_mutex_unlock(&r->mu);
    if (closing)
        return RAP_ERR_INTERRUPTED;
    sl->len = 0;
    sl->file_seq = r->file_seq;
    snprintf(sl->path, sizeof sl->path, "%s", path);
    f->sl = sl;
    f->len = 0;
    f->line_start = 0;
    return RAP_OK;
}

/* Gives back a slot that is being filled, unpublished. */
static void release(rap_reader *r, filler *f)
{
    if (!f->sl)
        return;
    pthread_mutex_lock(&r->mu);
    f->sl->state = SLOT_FREE;
    pthread_mutex_unlock(&r->mu);
    f->sl = NULL;
}

/* Publishes buf[0, cut) of the slot being filled (whole lines) and, when
 * more, continues in a new slot holding buf[cut, len). With max_rows, cuts
 * after the last line allowed and sets *limit. */
static rap_status emit(rap_reader *r, filler *f, size_t cut, bool more, bool *limit)
{
    *limit = false;
    char *b = f->sl->buf;
    if (r->cfg.max_rows > 0 && cut > 0) {
        int64_t left = r->cfg.max_rows - r->lines_emitted;
        const char *p = b, *end = b + cut;
        int64_t k = 0;
        while (p < end && k < left) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl)
                break;
            p = nl + 1;
            k++;
        }
        r->lines_emitted += k;
        if (r->lines_emitted >= r->cfg.max_rows) {
            cut = (size_t)(p - b);
            *limit = true;
            more = false;
        }
    }
    size_t carry = f->len - cut;
    if (more && carry > 0)
        memcpy(r->carry, b + cut, carry);
    if (cut == 0) {
        if (!more)
            release(r, f);
        return RAP_OK;
    }
    f->sl->len = cut;
    pthread_mutex_lock(&r->mu);
    f->sl->state = SLOT_FILLED;
    r->produced++;
    r->idle = false;
    pthread_cond_signal(&r->cv_parser);
    pthread_mutex_unlock(&r->mu);
    f->sl = NULL;
    if (!more)
        return RAP_OK;
    char path[1024];
    snprintf(path, sizeof path, "%s", r->slots[(r->produced - 1) % r->S].path);
    RAP_TRY(acquire(r, f, path));
    memcpy(f->sl->buf, r->carry, carry);
    f->len = carry;
    f->line_start = 0;
    if (f->skipping)
        f->prefix_end -= cut;
    return RAP_OK;
}

/* Takes in got new bytes at buf[len]: finds where the last line starts and
 * drops the tail of a line longer than max_line (see the top comment). */
static void take_bytes(rap_reader *r, filler *f, size_t got)
{
    char *b = f->sl->buf;
    size_t at = f->len, end = f->len + got;
    const size_t keep = (size_t)r->cfg.max_line + 1;
    while (at < end) {
        if (f->skipping) {
            for (; at < end; at++) {
                unsigned c = (unsigned char)b[at];
                if (c == '\n')
                    break;
                if (f->last_cr) /* a '\r' not at the end of the line */
                    f->bin = true;
                f->last_cr = c == '\r';
                if (!f->last_cr && ((c < 0x20 && c != '\t') || c >= 0x7f))
                    f->bin = true;
            }
            if (at == end) {
                end = f->prefix_end;
                break;
            }
            if (f->bin)
                b[f->prefix_end - 1] = 0;
            b[f->prefix_end] = '\n';
            size_t rest = end - (at + 1);
            memmove(b + f->prefix_end + 1, b + at + 1, rest);
            f->line_start = f->prefix_end + 1;
            at = f->line_start;
            end = at + rest;
            f->skipping = false;
            continue;
        }
        const char *nl = memrchr(b + at, '\n', end - at);
        if (nl)
            f->line_start = (size_t)(nl - b) + 1;
        if (end - f->line_start > keep) {
            f->prefix_end = f->line_start + keep;
            /* more bytes follow, so a '\r' here is not at the line's end */
            if (b[f->prefix_end - 1] == '\r')
                b[f->prefix_end - 1] = 0;
            f->skipping = true;
            f->bin = false;
            f->last_cr = false;
            at = f->prefix_end;
            continue;
        }
        at = end;
    }
    f->len = end;
}

static void add_bytes(rap_reader *r, size_t n)
{
    pthread_mutex_lock(&r->st_mu);
    r->st.bytes_read += (int64_t)n;
    pthread_mutex_unlock(&r->st_mu);
}

static void set_idle(rap_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->idle = true;
    pthread_cond_broadcast(&r->cv_consumer);
    pthread_mutex_unlock(&r->mu);
}

static bool idle_expired(const rap_reader *r)
{
    return r->cfg.idle_timeout_s > 0 && rap_now() - r->last_data >= r->cfg.idle_timeout_s;
}

/* Reads one file (dir_idx: its index in names, or 0) to its end. *end: stop
 * reading altogether (stopped, max_rows reached, follow timed out). */
static rap_status read_file(rap_reader *r, rap_source *src, int64_t dir_idx, bool *end)
{
    filler f;
    memset(&f, 0, sizeof f);
    r->file_seq++;
    pthread_mutex_lock(&r->st_mu);
    r->st.files++;
    pthread_mutex_unlock(&r->st_mu);
    rap_status st = acquire(r, &f, rap_source_name(src));
    if (st != RAP_OK) {
        *end = true;
        return RAP_OK;
    }
    bool limit = false;
    for (;;) {
        if (atomic_load(&r->stop)) { /* a partial line is dropped */
            release(r, &f);
            *end = true;
            return RAP_OK;
        }
        if (r->C - f.len < r->C / 4) { /* nearly full: hand over whole lines */
            st = emit(r, &f, f.line_start, true, &limit);
            if (st != RAP_OK || limit) {
                *end = true;
                return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
            }
            continue;
        }
        size_t got;
        st = rap_source_read(src, f.sl->buf + f.len, r->C - f.len, &got);
        if (st != RAP_OK) {
            release(r, &f);
            return st;
        }
        if (got > 0) {
            add_bytes(r, got);
            r->last_data = rap_now();
            take_bytes(r, &f, got);
            continue;
        }
        bool pipe = !rap_source_is_regular(src);
        bool final = pipe ? rap_source_at_end(src)
                          : (!r->cfg.follow || (r->is_dir && dir_idx < r->n_names - 1));
        if (!final) {
            if (f.line_start > 0) { /* let the caller see complete lines now */
                st = emit(r, &f, f.line_start, true, &limit);
                if (st != RAP_OK || limit) {
                    *end = true;
                    return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
                }
            }
            if (!r->cfg.follow)
                continue; /* a pipe with nothing yet: wait on */
            if (!pipe && r->is_dir) {
                int64_t added;
                st = rescan(r, &added);
                if (st != RAP_OK) {
                    release(r, &f);
                    return st;
                }
                final = added > 0;
            }
            if (!final && idle_expired(r)) {
                final = true;
                *end = true;
            }
            if (!final) {
                set_idle(r);
                if (!pipe)
                    sleep_s(POLL_S);
                continue;
            }
        }
        /* the file ends here */
        char tail[2];
        size_t nt;
        st = rap_source_finish(src, tail, &nt);
        if (st != RAP_OK) {
            release(r, &f);
            return st;
        }
        if (nt > 0) {
            memcpy(f.sl->buf + f.len, tail, nt);
            add_bytes(r, nt);
            take_bytes(r, &f, nt);
        }
        if (f.skipping) {
            if (f.bin)
                f.sl->buf[f.prefix_end - 1] = 0;
            f.sl->buf[f.prefix_end] = '\n';
            f.len = f.prefix_end + 1;
            f.skipping = false;
        } else if (f.len > f.line_start) { /* a last line with no '\n' is a row */
            f.sl->buf[f.len++] = '\n';
        }
        st = emit(r, &f, f.len, false, &limit);
        if (limit)
            *end = true;
        return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
    }
}

static rap_status read_all(rap_reader *r)
{
    bool end = false;
    if (!r->is_dir) {
        rap_source *src = r->first;
        r->first = NULL;
        rap_status st = read_file(r, src, 0, &end);
        rap_source_close(src);
        return st;
    }
    int64_t i = 0;
    for (;;) {
        if (atomic_load(&r->stop))
            return RAP_OK;
        if (i < r->n_names) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", r->input, r->names[i]);
            rap_source *src;
            RAP_TRY(rap_source_open(path, &src));
            rap_status st = read_file(r, src, i, &end);
            rap_source_close(src);
            if (st != RAP_OK || end)
                return st;
            i++;
            continue;
        }
        if (!r->cfg.follow)
            return RAP_OK;
        int64_t added;
        RAP_TRY(rescan(r, &added));
        if (added > 0)
            continue;
        if (idle_expired(r))
            return RAP_OK;
        set_idle(r);
        sleep_s(POLL_S);
    }
}

static void *reader_main(void *arg)
{
    rap_reader *r = arg;
    r->last_data = rap_now();
    rap_status st = read_all(r);
    pthread_mutex_lock(&r->mu);
    if (st != RAP_OK && st != RAP_ERR_INTERRUPTED) {
        r->rd_err = st;
        snprintf(r->rd_msg, sizeof r->rd_msg, "%s", rap_last_error());
    }
    r->reader_done = true;
    pthread_cond_broadcast(&r->cv_consumer);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ------------------------------------------------------ parser threads */

static void *parser_main(void *arg)
{
    rap_reader *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->closing && r->parse_next >= r->produced)
            pthread_cond_wait(&r->cv_parser, &r->mu);
        if (r->closing)
            break;
        slot *sl = &r->slots[r->parse_next++ % r->S];
        sl->state = SLOT_PARSING;
        pthread_mutex_unlock(&r->mu);
        sl->parse_status = rap_parse_chunk(sl->buf, sl->len, r->cfg.max_line, &sl->out);
        if (sl->parse_status != RAP_OK)
            snprintf(sl->parse_msg, sizeof sl->parse_msg, "%s", rap_last_error());
        pthread_mutex_lock(&r->mu);
        sl->state = SLOT_PARSED;
        pthread_cond_broadcast(&r->cv_consumer);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* -------------------------------------------------------------- open */

rap_status rap_reader_open(const rap_reader_config *cfg, rap_reader **out)
{
    return rap_reader_open_ex(cfg, 0, out);
}

rap_status rap_reader_open_ex(const rap_reader_config *cfg, size_t chunk_bytes, rap_reader **out)
{
    *out = NULL;
    if (!cfg || !cfg->input || !cfg->input[0])
        return rap_fail(RAP_ERR_ARG, "reader: no input given (a file, a directory or \"-\")");
    if (cfg->threads < 0 || cfg->threads > MAX_THREADS)
        return rap_fail(RAP_ERR_ARG, "reader: expected threads in [0, %d], got %d", MAX_THREADS,
                        cfg->threads);
    if (cfg->max_line < 1 || cfg->max_line > MAX_LINE_LIMIT)
        return rap_fail(RAP_ERR_ARG, "reader: expected max_line in [1, %lld], got %lld",
                        (long long)MAX_LINE_LIMIT, (long long)cfg->max_line);
    if (cfg->max_rows < 0 || !(cfg->idle_timeout_s >= 0) ||
        (cfg->bad_rows != RAP_BAD_SKIP && cfg->bad_rows != RAP_BAD_FAIL))
        return rap_fail(RAP_ERR_ARG, "reader: expected max_rows >= 0, idle_timeout >= 0 and "
                                     "bad_rows skip or fail");
    rap_reader *r = rap_calloc(sizeof *r, "reader");
    if (!r)
        return RAP_ERR_NOMEM;
    r->cfg = *cfg;
    r->input = strdup(cfg->input);
    r->cfg.input = r->input;
    rap_status st = RAP_OK;
    if (!r->input) {
        st = rap_fail(RAP_ERR_NOMEM, "reader: out of memory");
        goto fail;
    }
    if (strcmp(r->input, "-") != 0) {
        struct stat sb;
        if (stat(r->input, &sb) != 0) {
            st = rap_fail(RAP_ERR_IO, "%s: %s", r->input, strerror(errno));
            goto fail;
        }
        r->is_dir = S_ISDIR(sb.st_mode);
    }
    if (r->is_dir) {
        int64_t added;
        if ((st = rescan(r, &added)) != RAP_OK)
            goto fail;
    } else if ((st = rap_source_open(r->input, &r->first)) != RAP_OK) {
        goto fail;
    }
    size_t need = 2 * ((size_t)cfg->max_line + 2);
    r->C = chunk_bytes ? chunk_bytes : DEFAULT_CHUNK;
    if (r->C < need)
        r->C = need;
    if (r->C < 64)
        r->C = 64;
    r->n_parsers = cfg->threads ? cfg->threads : rap_ncores();
    /* a slot per parser, up to 4 more so that one slow chunk does not stall
     * the others, one being filled and one being copied out */
    r->S = r->n_parsers + (r->n_parsers < 4 ? r->n_parsers : 4) + 2;
    r->slots = rap_calloc((size_t)r->S * sizeof *r->slots, "reader slots");
    r->carry = rap_malloc(r->C, "reader carry buffer");
    r->parser_tid = rap_calloc((size_t)r->n_parsers * sizeof(pthread_t), "reader threads");
    if (!r->slots || !r->carry || !r->parser_tid) {
        st = RAP_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < r->S; i++) {
        if (!(r->slots[i].buf = rap_malloc(r->C + 1, "reader chunk"))) {
            st = RAP_ERR_NOMEM;
            goto fail;
        }
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->st_mu, NULL);
    pthread_cond_init(&r->cv_reader, NULL);
    pthread_cond_init(&r->cv_parser, NULL);
    pthread_cond_init(&r->cv_consumer, NULL);
    r->sync_init = true;
    atomic_init(&r->stop, 0);
    for (int i = 0; i < r->n_parsers; i++) {
        if (pthread_create(&r->parser_tid[i], NULL, parser_main, r) != 0) {
            st = rap_fail(RAP_ERR_NOMEM, "reader: cannot start parser thread %d: %s", i,
                          strerror(errno));
            goto fail;
        }
        r->parsers_started++;
    }
    if (pthread_create(&r->reader_tid, NULL, reader_main, r) != 0) {
        st = rap_fail(RAP_ERR_NOMEM, "reader: cannot start the reading thread");
        goto fail;
    }
    r->reader_started = true;
    *out = r;
    return RAP_OK;
fail:
    rap_reader_close(r);
    return st;
}

/* -------------------------------------------------------------- next */

static void count_reject(rap_reader *r, const slot *sl, const rap_parse_reject *e)
{
    pthread_mutex_lock(&r->st_mu);
    int64_t n = r->st.rejected[e->reason]++;
    r->st.rows_rejected++;
    if (n < RAP_REJ_EXAMPLES)
        snprintf(r->st.example[e->reason][n], sizeof r->st.example[e->reason][n], "%s:%lld",
                 sl->path, (long long)(r->c_slot_base + e->line + 1));
    pthread_mutex_unlock(&r->st_mu);
}

/* Appends good rows [u, u+n) of o to b. */
static void copy_rows(rap_batch *b, const rap_parsed *o, int64_t u, int64_t n)
{
    const int64_t B = b->cap, R = o->cap, at = b->rows;
    memcpy(b->label + at, o->label + u, (size_t)n * sizeof(float));
    for (int j = 0; j < RAP_CRITEO_DENSE; j++) {
        memcpy(b->dense + j * B + at, o->dense + j * R + u, (size_t)n * sizeof(float));
        memcpy(b->dense_valid + j * B + at, o->dense_valid + j * R + u, (size_t)n);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        int64_t *off = b->sparse_off + j * (B + 1);
        int64_t *ids = b->sparse_ids + j * B; /* K = 1 */
        const int64_t *x = o->sparse + j * R + u;
        const uint8_t *v = o->sparse_valid + j * R + u;
        int64_t c = off[at];
        for (int64_t i = 0; i < n; i++) {
            ids[c] = x[i]; /* c <= at + i < B */
            c += v[i];
            off[at + i + 1] = c;
        }
        memcpy(b->sparse_valid + j * B + at, v, (size_t)n);
    }
    b->rows += n;
}

/* Moves rows of the parsed slot sl into b, counting rejects in order.
 * *done when the slot is used up. With bad_rows fail, the first reject gives
 * RAP_ERR_DATA (and becomes sticky) once the rows before it are handed out. */
static rap_status take_slot(rap_reader *r, slot *sl, rap_batch *b, bool *done)
{
    *done = false;
    const rap_parsed *o = &sl->out;
    if (sl->parse_status != RAP_OK) {
        r->sticky = sl->parse_status;
        snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", sl->parse_msg);
        return r->sticky;
    }
    if (!r->c_started) {
        r->c_started = true;
        r->c_u = r->c_k = 0;
        if (sl->file_seq != r->c_file_seq) {
            r->c_file_seq = sl->file_seq;
            r->c_line_base = 0;
        }
        r->c_slot_base = r->c_line_base;
    }
    for (;;) {
        while (r->c_k < o->n_rej && o->rej[r->c_k].pos <= r->c_u) {
            const rap_parse_reject *e = &o->rej[r->c_k];
            if (r->cfg.bad_rows == RAP_BAD_FAIL) {
                if (b->rows > 0)
                    return RAP_OK; /* the error comes with the next call */
                count_reject(r, sl, e);
                r->c_k++;
                r->sticky = RAP_ERR_DATA;
                snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s:%lld: %s", sl->path,
                         (long long)(r->c_slot_base + e->line + 1), o->first_msg);
                return RAP_ERR_DATA;
            }
            count_reject(r, sl, e);
            r->c_k++;
        }
        if (r->c_u == o->n_used && r->c_k == o->n_rej) {
            r->c_line_base += o->n_lines;
            *done = true;
            return RAP_OK;
        }
        if (b->rows == b->cap)
            return RAP_OK;
        int64_t lim = r->c_k < o->n_rej ? o->rej[r->c_k].pos : o->n_used;
        int64_t n = lim - r->c_u;
        if (n > b->cap - b->rows)
            n = b->cap - b->rows;
        copy_rows(b, o, r->c_u, n);
        r->c_u += n;
        r->used_total += n;
        pthread_mutex_lock(&r->st_mu);
        r->st.rows_used += n;
        pthread_mutex_unlock(&r->st_mu);
    }
}

rap_status rap_reader_next(rap_reader *r, rap_batch *b)
{
    if (!r || !b || !b->block || b->cap < 1 || b->schema.n_dense != RAP_CRITEO_DENSE ||
        b->schema.n_sparse != RAP_CRITEO_SPARSE || b->schema.ids_per_row != 1)
        return rap_fail(RAP_ERR_ARG, "reader: expected a Criteo batch (13 dense, 26 sparse, "
                                     "1 id per row) of capacity >= 1");
    b->rows = 0;
    b->first_row = r->used_total;
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++)
        b->sparse_off[j * (b->cap + 1)] = 0;
    if (r->sticky != RAP_OK)
        return rap_fail(r->sticky, "%s", r->sticky_msg);
    rap_status st = RAP_OK;
    pthread_mutex_lock(&r->mu);
    while (b->rows < b->cap) {
        slot *sl = &r->slots[r->consumed % r->S];
        if (r->consumed < r->produced && sl->state == SLOT_PARSED) {
            pthread_mutex_unlock(&r->mu);
            bool done;
            st = take_slot(r, sl, b, &done);
            pthread_mutex_lock(&r->mu);
            if (done) {
                sl->state = SLOT_FREE;
                r->consumed++;
                r->c_started = false;
                pthread_cond_signal(&r->cv_reader);
            }
            if (st != RAP_OK || (!done && b->rows < b->cap))
                break; /* an error, or rows held back before a fail-mode reject */
            continue;
        }
        if (r->consumed == r->produced) {
            if (r->reader_done) {
                if (r->rd_err != RAP_OK) {
                    r->sticky = r->rd_err;
                    snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", r->rd_msg);
                    if (b->rows == 0)
                        st = r->sticky;
                }
                break;
            }
            if (b->rows > 0 && r->idle)
                break; /* following a quiet input: hand out what there is */
        }
        pthread_cond_wait(&r->cv_consumer, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (st != RAP_OK)
        return rap_fail(st, "%s", r->sticky_msg);
    return RAP_OK;
}

void rap_reader_stop(rap_reader *r)
{
    if (r)
        atomic_store(&r->stop, 1);
}

void rap_reader_get_stats(const rap_reader *r, rap_reader_stats *st)
{
    rap_reader *m = (rap_reader *)r; /* the lock is not part of the value */
    pthread_mutex_lock(&m->st_mu);
    *st = r->st;
    pthread_mutex_unlock(&m->st_mu);
    st->rows_read = st->rows_used + st->rows_rejected;
}

/* Long descriptions of the reasons, for the accounting printout. */
static const char *reason_text(rap_reject_reason r)
{
    switch (r) {
    case RAP_REJ_FIELDS: return "wrong number of fields";
    case RAP_REJ_LABEL: return "label not 0 or 1";
    case RAP_REJ_INT: return "integer field not a number";
    case RAP_REJ_CAT: return "categorical field not hex";
    case RAP_REJ_RANGE: return "value out of range";
    case RAP_REJ_LONG: return "line too long";
    case RAP_REJ_BINARY: return "binary bytes";
    case RAP_REJ_COUNT: break;
    }
    return "unknown";
}

void rap_reader_print_stats(const rap_reader_stats *st, FILE *f)
{
    fprintf(f, "rows read %lld = used %lld + rejected %lld\n", (long long)st->rows_read,
            (long long)st->rows_used, (long long)st->rows_rejected);
    /* only the reasons that occurred */
    for (int k = 0; k < RAP_REJ_COUNT; k++) {
        if (!st->rejected[k])
            continue;
        fprintf(f, "  rejected %lld: %s (%s)", (long long)st->rejected[k],
                reason_text((rap_reject_reason)k), rap_reject_reason_name((rap_reject_reason)k));
        int64_t n = st->rejected[k] < RAP_REJ_EXAMPLES ? st->rejected[k] : RAP_REJ_EXAMPLES;
        for (int64_t i = 0; i < n; i++)
            fprintf(f, "%s%s", i ? ", " : ", first at ", st->example[k][i]);
        fprintf(f, "\n");
    }
    fprintf(f, "  %lld bytes from %d file%s\n", (long long)st->bytes_read, st->files,
            st->files == 1 ? "" : "s");
}

void rap_reader_close(rap_reader *r)
{
    if (!r)
        return;
    if (r->sync_init) {
        atomic_store(&r->stop, 1);
        pthread_mutex_lock(&r->mu);
        r->closing = true;
        pthread_cond_broadcast(&r->cv_reader);
        pthread_cond_broadcast(&r->cv_parser);
        pthread_cond_broadcast(&r->cv_consumer);
        pthread_mutex_unlock(&r->mu);
        if (r->reader_started)
            pthread_join(r->reader_tid, NULL);
        for (int i = 0; i < r->parsers_started; i++)
            pthread_join(r->parser_tid[i], NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->st_mu);
        pthread_cond_destroy(&r->cv_reader);
        pthread_cond_destroy(&r->cv_parser);
        pthread_cond_destroy(&r->cv_consumer);
    }
    rap_source_close(r->first);
    for (int i = 0; r->slots && i < r->S; i++) {
        rap_free(r->slots[i].buf);
        rap_parsed_free(&r->slots[i].out);
    }
    rap_free(r->slots);
    rap_free(r->carry);
    rap_free(r->parser_tid);
    for (int64_t i = 0; i < r->n_names; i++)
        free(r->names[i]);
    rap_free(r->names);
    free(r->input);
    rap_free(r);
}
