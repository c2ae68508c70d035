/*
 * reader.c -- the Criteo TSV reader (rap.h, section "reader").
 *
 * Three kinds of threads:
 *
 *   lane threads    L of them (reader_lane.c): each reads its files,
 *                   inflates gzip, cuts the bytes into chunks of whole
 *                   lines (lines.h: a line longer than max_line is kept as
 *                   a prefix the parser rejects the same way) and publishes
 *                   the chunks in its own ring of S slots in its input
 *                   order. L = 1 unless several files of a directory are
 *                   read at once (inflate_threads).
 *   parser threads  P of them: parse published slots of any lane in any
 *                   order (parse.c), the lane rap_reader_next waits on
 *                   first.
 *   the caller      rap_reader_next copies parsed slots into its batch in
 *                   the order rule's order, counts rejects and frees the
 *                   slots.
 *
 * The order rule (docs/INPUT.md). One lane: input order. L > 1, file order:
 * file k comes from lane k mod L, files in name order, so rows are exactly
 * those of one lane. L > 1, batch interleave: rows come in turns of
 * interleave_rows good rows; turn t comes from lane t mod L while every
 * lane has rows; a lane that runs out in a turn leaves the rotation and
 * the turn is filled from the next lane still in it, after which the next
 * turn goes to the lane after that one. Output does not depend on P, on
 * where chunks are cut or on timing: every line is parsed on its own, and
 * rows are handed out by the rule alone (only a follow that waits for data
 * returns a batch before it is full).
 *
 * Memory is L * S slots of C bytes plus their parsed rows: it does not grow
 * with the input. Slot states: FREE -> FILLING (lane) -> FILLED -> PARSING
 * (a parser) -> PARSED -> FREE (rap_reader_next). Errors of a lane (I/O,
 * corrupt gzip) reach the caller where the rule reaches them, after the
 * rows before them. Stop: rap_reader_stop sets an atomic flag the lanes
 * look at (reader_lane.c). Data positions (a start position, each row's
 * position with track_positions): reader_pos.c. The ranks' shared parse
 * (each rank parsing its piece of every chunk): reader_share.c.
 */
#include "data/reader_impl.h"
#include "data/parse_share.h"

#include "data/parquet.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_CHUNK ((size_t)1 << 20)
#define MAX_LINE_LIMIT ((int64_t)64 << 20)
#define MAX_THREADS 256
#define MAX_SLOTS 512        /* per lane */
#define ROW_BYTES_GUESS 256  /* interleave: a turn's bytes, to size a lane's ring */

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
    case RAP_REJ_QUOTE: return "quote";
    case RAP_REJ_LIST: return "list";
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
    c.inflate_threads = 1;
    c.interleave = RAP_INTERLEAVE_FILE;
    c.interleave_rows = 0;
    c.track_positions = false;
    c.start = NULL;
    return c;
}

/* ------------------------------------------------------------ threads */

/* The split of the budget for an input of `files` files (is_dir). */
static void split_threads(const rap_reader_config *cfg, bool is_dir, int64_t files,
                          rap_reader_threads *t)
{
    memset(t, 0, sizeof *t);
    t->files = files;
    int64_t lanes = 1;
    if (is_dir && !cfg->follow && cfg->inflate_threads > 1)
        lanes = files < cfg->inflate_threads ? files : cfg->inflate_threads;
    t->lanes = lanes < 1 ? 1 : (int)lanes;
    t->budget = cfg->threads ? cfg->threads : rap_ncores();
    t->parsers = t->budget - t->lanes >= 1 ? t->budget - t->lanes : 1;
    /* the GPU parses; a thread only feeds it a chunk and waits (two keep
     * it busy while one waits) */
    if (cfg->parse == RAP_PARSE_GPU && t->parsers > 2)
        t->parsers = 2;
    t->total = t->lanes + t->parsers;
    t->over = t->total > t->budget ? t->total - t->budget : 0;
    t->parse = cfg->parse;
}

rap_status rap_reader_plan_threads(const rap_reader_config *cfg, rap_reader_threads *out)
{
    memset(out, 0, sizeof *out);
    if (!cfg || !cfg->input || !cfg->input[0])
        return rap_fail(RAP_ERR_ARG, "reader: no input given (a file, a directory or \"-\")");
    bool is_dir = false;
    int64_t files = 1;
    if (strcmp(cfg->input, "-") != 0) {
        struct stat sb;
        if (stat(cfg->input, &sb) != 0)
            return rap_fail(RAP_ERR_IO, "%s: %s", cfg->input, strerror(errno));
        is_dir = S_ISDIR(sb.st_mode);
    }
    if (is_dir) { /* the reader's own listing rule */
        rap_reader tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.input = (char *)cfg->input;
        rap_status st = reader_rescan(&tmp, &files);
        for (int64_t i = 0; i < tmp.n_names; i++)
            free(tmp.names[i]);
        rap_free(tmp.names);
        RAP_TRY(st);
    }
    split_threads(cfg, is_dir, files, out);
    return RAP_OK;
}

void rap_reader_threads_line(const rap_reader_threads *t, char *out, size_t n)
{
    const char *what = t->parse == RAP_PARSE_GPU   ? "feeding the GPU parser"
                       : t->parse == RAP_PARSE_REF ? "parsing (the GPU parser's CPU reference)"
                                                   : "parsing";
    int k = snprintf(out, n, "%d reading+inflating (one file each), %d %s = %d threads "
                     "of a budget of %d", t->lanes, t->parsers, what, t->total, t->budget);
    if (t->over > 0 && k >= 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " (%d over: the reader needs a parser beside its "
                 "lanes)", t->over);
}

/* ------------------------------------------------------ parser threads */

/* A lane with a published, unparsed slot: rap_reader_next's first. When
 * the ranks share the parse, parser thread `me` takes the chunks k with k
 * mod P == me of reader_share_next's order: the same chunks as parser thread `me`
 * of every other rank, which its exchange pairs it with. */
static lane *parse_pick(rap_reader *r, int me)
{
    if (r->share) {
        lane *l = reader_share_next(r);
        return l && r->p_seq % r->P == me ? l : NULL;
    }
    for (int i = 0; i < r->L; i++) {
        lane *l = &r->lanes[(r->want + i) % r->L];
        if (l->parse_next < l->produced)
            return l;
    }
    return NULL;
}

const rap_input_schema *reader_pq_schema(const rap_reader *r)
{
    return r->schema ? r->schema : r->criteo;
}

/* Row group sl->pq_group of the Parquet file sl->path into sl->out (a
 * parser thread: its own open of the file). */
static rap_status parse_group(rap_reader *r, slot *sl)
{
    rap_pq *p;
    RAP_TRY(rap_pq_open(sl->path, &p));
    int map[RAP_SCHEMA_MAX_COLS];
    const rap_input_schema *s = reader_pq_schema(r);
    rap_status st = rap_pq_bind(p, sl->path, s, map);
    if (st == RAP_OK)
        st = rap_pq_parse_group(p, sl->path, s, map, sl->pq_group, sl->pq_max, &sl->out);
    rap_pq_close(p);
    return st;
}

/* Parses slot sl by the reader's parser: a Parquet row group on the host,
 * text of a schema by the schema parser, Criteo's text by the parse backend
 * (r->ops, its thread state ps). With --header, the first line of a file's
 * first chunk is checked against the schema and taken off (sl->skip = 1):
 * a difference is RAP_ERR_DATA naming it. A Parquet file met by a backend
 * of device rows (a directory's) is RAP_ERR_ARG naming it. */
static rap_status parse_slot(rap_reader *r, slot *sl, void *ps, rap_parse_share *sh)
{
    if (sl->pq_group >= 0 && r->ops->device_rows)
        return rap_fail(RAP_ERR_ARG, "%s: a Parquet file is read on the host; --parse %s "
                        "takes text in Criteo's layout (use --parse cpu or auto)", sl->path,
                        r->ops->name);
    if (sl->pq_group >= 0)
        return parse_group(r, sl);
    if (!r->sp && sh)
        return rap_parse_share_chunk(sh, ps, sl->buf, sl->len, &sl->out, &sl->stage);
    if (!r->sp)
        return r->ops->chunk(ps, sl->buf, sl->len, &sl->out, &sl->stage);
    const char *text = sl->buf;
    size_t n = sl->len;
    sl->skip = 0;
    if (sl->first && r->schema->header && n > 0) {
        const char *nl = memchr(text, '\n', n);
        size_t len = nl ? (size_t)(nl - text) : n;
        char where[1100];
        snprintf(where, sizeof where, "%s:1", sl->path);
        RAP_TRY(rap_input_schema_header(r->schema, text, len, where));
        sl->skip = 1;
        text += nl ? len + 1 : len;
        n -= nl ? len + 1 : len;
    }
    return rap_parse_chunk_schema(r->sp, text, n, r->cfg.max_line, &sl->out);
}

static void *parser_main(void *arg)
{
    rap_reader *r = arg;
    int me = atomic_fetch_add(&r->parser_ids, 1);
    void *ps = r->parser_state[me];
    rap_parse_share *sh = r->share ? r->share[me] : NULL;
    rap_status dev_st = r->ops->device_rows ? rap_parse_set_device(r->pcfg.device) : RAP_OK;
    char dev_msg[256] = "";
    if (dev_st != RAP_OK)
        snprintf(dev_msg, sizeof dev_msg, "%s", rap_last_error());
    pthread_mutex_lock(&r->mu);
    for (;;) {
        lane *l = NULL;
        while (!r->closing && !(l = parse_pick(r, me)))
            pthread_cond_wait(&r->cv_parser, &r->mu);
        if (r->closing)
            break;
        slot *sl = &l->slots[l->parse_next++ % r->S];
        sl->state = SLOT_PARSING;
        if (sh) { /* the next chunk is another thread's turn */
            r->p_seq++;
            pthread_cond_broadcast(&r->cv_parser);
        }
        pthread_mutex_unlock(&r->mu);
        int64_t own0, own1;
        rap_parse_share_counts(sh, &own0, NULL);
        sl->parse_status = dev_st != RAP_OK ? dev_st : parse_slot(r, sl, ps, sh);
        rap_parse_share_counts(sh, &own1, NULL);
        if (sl->parse_status == RAP_OK) {
            pthread_mutex_lock(&r->st_mu);
            r->st.lines_parsed_here += sh ? own1 - own0 : sl->out.n_lines;
            pthread_mutex_unlock(&r->st_mu);
        }
        if (sl->parse_status != RAP_OK)
            snprintf(sl->parse_msg, sizeof sl->parse_msg, "%s",
                     dev_st != RAP_OK ? dev_msg : rap_last_error());
        pthread_mutex_lock(&r->mu);
        sl->state = SLOT_PARSED;
        pthread_cond_broadcast(&r->cv_consumer);
    }
    pthread_mutex_unlock(&r->mu);
    rap_parse_share_leave(sh); /* the other ranks' thread `me` stop waiting for this one */
    return NULL;
}

/* -------------------------------------------------------------- open */

rap_status rap_reader_open(const rap_reader_config *cfg, rap_reader **out)
{
    return rap_reader_open_ex(cfg, 0, out);
}

static rap_status check_config(const rap_reader_config *cfg)
{
    if (!cfg || !cfg->input || !cfg->input[0])
        return rap_fail(RAP_ERR_ARG, "reader: no input given (a file, a directory or \"-\")");
    if (cfg->threads < 0 || cfg->threads > MAX_THREADS)
        return rap_fail(RAP_ERR_ARG, "reader: expected threads in [0, %d], got %d", MAX_THREADS,
                        cfg->threads);
    if (cfg->inflate_threads < 0 || cfg->inflate_threads > READER_MAX_LANES)
        return rap_fail(RAP_ERR_ARG, "reader: expected inflate_threads in [0, %d], got %d",
                        READER_MAX_LANES, cfg->inflate_threads);
    if (cfg->interleave != RAP_INTERLEAVE_FILE && cfg->interleave != RAP_INTERLEAVE_BATCH)
        return rap_fail(RAP_ERR_ARG, "reader: expected interleave file or batch");
    if (cfg->interleave == RAP_INTERLEAVE_BATCH && cfg->interleave_rows < 1)
        return rap_fail(RAP_ERR_ARG, "reader: batch interleave needs interleave_rows >= 1 (the "
                                     "rows of a turn), got %lld", (long long)cfg->interleave_rows);
    if (cfg->max_line < 1 || cfg->max_line > MAX_LINE_LIMIT)
        return rap_fail(RAP_ERR_ARG, "reader: expected max_line in [1, %lld], got %lld",
                        (long long)MAX_LINE_LIMIT, (long long)cfg->max_line);
    if ((cfg->track_positions || cfg->start) && cfg->inflate_threads > 1 && !cfg->follow)
        return rap_fail(RAP_ERR_ARG, "reader: data positions need one reading thread "
                                     "(inflate_threads 1, or follow)");
    if (cfg->max_rows < 0 || !(cfg->idle_timeout_s >= 0) ||
        (cfg->bad_rows != RAP_BAD_SKIP && cfg->bad_rows != RAP_BAD_FAIL))
        return rap_fail(RAP_ERR_ARG, "reader: expected max_rows >= 0, idle_timeout >= 0 and "
                                     "bad_rows skip or fail");
    if ((int)cfg->parse < RAP_PARSE_AUTO || (int)cfg->parse > RAP_PARSE_REF)
        return rap_fail(RAP_ERR_ARG, "reader: expected parse auto, cpu, gpu or reference");
    size_t gpu_chunk;
    if (cfg->parse == RAP_PARSE_GPU || cfg->parse == RAP_PARSE_REF)
        RAP_TRY(rap_parse_gpu_chunk_bytes(1, &gpu_chunk));
    return RAP_OK;
}

/* The chunk bytes *C and slots per lane *S of a reader of cfg with the
 * threads t (chunk_bytes 0: the default). */
static void lane_shape(const rap_reader_config *cfg, const rap_reader_threads *t,
                       size_t chunk_bytes, size_t *C, int *S)
{
    size_t need = 2 * ((size_t)cfg->max_line + 2);
    size_t c = chunk_bytes ? chunk_bytes : DEFAULT_CHUNK;
    if (!chunk_bytes && (t->parse == RAP_PARSE_GPU || t->parse == RAP_PARSE_REF) &&
        rap_parse_gpu_chunk_bytes(t->lanes, &c) != RAP_OK)
        rap_clear_error(); /* the default: check_config reported the knob */
    if (c < need)
        c = need;
    if (c < 64)
        c = 64;
    /* a slot per parser, up to 4 more so that one slow chunk does not stall
     * the others, one being filled and one being copied out; interleaved
     * lanes also hold a turn's rows while the other lanes have theirs */
    int64_t s = t->parsers + (t->parsers < 4 ? t->parsers : 4) + 2;
    if (t->lanes > 1 && cfg->interleave == RAP_INTERLEAVE_BATCH) {
        double turn = (double)cfg->interleave_rows * ROW_BYTES_GUESS / (double)c;
        int64_t u = turn + 3 > MAX_SLOTS ? MAX_SLOTS : (int64_t)turn + 3;
        if (u > s)
            s = u;
    }
    *C = c;
    *S = (int)(s > MAX_SLOTS ? MAX_SLOTS : s);
}

rap_status rap_reader_bytes(const rap_reader_config *cfg, size_t *chunks, size_t *parsed)
{
    *chunks = *parsed = 0;
    rap_reader_threads t;
    if (rap_reader_plan_threads(cfg, &t) != RAP_OK) { /* not there yet: as one file */
        rap_clear_error();
        split_threads(cfg, false, 1, &t);
    }
    size_t C;
    int S;
    lane_shape(cfg, &t, 0, &C, &S);
    *chunks = (size_t)t.lanes * ((size_t)S * (C + 1) + C);
    /* the gpu and reference parsers' rows are in the slots' staging
     * batches (rap_reader_parse_bytes) */
    if (cfg->parse != RAP_PARSE_GPU && cfg->parse != RAP_PARSE_REF)
        *parsed = (size_t)t.lanes * (size_t)S * (C / ROW_BYTES_GUESS) * rap_parsed_row_bytes();
    return RAP_OK;
}

rap_status rap_reader_parse_bytes(const rap_reader_config *cfg, size_t *device, size_t *pinned,
                                  size_t *host)
{
    *device = *pinned = *host = 0;
    rap_reader_threads t;
    if (rap_reader_plan_threads(cfg, &t) != RAP_OK) { /* as rap_reader_bytes */
        rap_clear_error();
        split_threads(cfg, false, 1, &t);
    }
    size_t C;
    int S;
    lane_shape(cfg, &t, 0, &C, &S);
    rap_parse_backend_bytes(cfg->parse, C + 1, cfg->max_line, t.parsers,
                            (int64_t)t.lanes * S, device, pinned, host);
    reader_share_bytes(cfg, t.lanes, t.parsers, C + 1, device, host);
    return RAP_OK;
}

static rap_status make_parsers(rap_reader *r);

/* L lanes, P parser threads, S slots a lane and C chunk bytes of a reader
 * of cfg over an input of `files` files (is_dir). Cannot fail. */
static void reader_sizes(const rap_reader_config *cfg, bool is_dir, int64_t files,
                         size_t chunk_bytes, int *L, int *P, int *S, size_t *C)
{
    rap_reader_threads t;
    split_threads(cfg, is_dir, files, &t);
    *L = t.lanes;
    *P = t.parsers;
    lane_shape(cfg, &t, chunk_bytes, C, S);
}

/* Sizes and allocates the lanes and their slots; starts nothing. Each
 * lane: S chunks of C + 1 bytes and a carry buffer of C (rap_reader_bytes). */
static rap_status make_lanes(rap_reader *r, size_t chunk_bytes)
{
    const rap_reader_config *cfg = &r->cfg;
    reader_sizes(&r->cfg, r->is_dir, r->is_dir ? r->n_names : 1, chunk_bytes, &r->L, &r->P,
                 &r->S, &r->C);
    /* every dropped line keeps max_line + 2 bytes of a slot */
    r->cap_drops = (int64_t)(r->C / ((size_t)cfg->max_line + 2)) + 1;
    RAP_TRY(make_parsers(r));
    RAP_TRY(reader_make_shares(r));
    r->lanes = rap_calloc((size_t)r->L * sizeof *r->lanes, "reader lanes");
    r->parser_tid = rap_calloc((size_t)r->P * sizeof(pthread_t), "reader threads");
    if (!r->lanes || !r->parser_tid)
        return RAP_ERR_NOMEM;
    for (int j = 0; j < r->L; j++) {
        lane *l = &r->lanes[j];
        l->r = r;
        l->id = j;
        l->c_file = -1;
        l->c_fid = -1;
        l->c_alive = true;
        l->slots = rap_calloc((size_t)r->S * sizeof *l->slots, "reader slots");
        l->carry = rap_malloc(r->C, "reader carry buffer");
        if (!l->slots || !l->carry)
            return RAP_ERR_NOMEM;
        for (int i = 0; i < r->S; i++) {
            if (!(l->slots[i].buf = rap_malloc(r->C + 1, "reader chunk")))
                return RAP_ERR_NOMEM;
            if (cfg->track_positions &&
                !(l->slots[i].drops = rap_malloc((size_t)r->cap_drops * sizeof(rap_line_drop),
                                                 "reader line records")))
                return RAP_ERR_NOMEM;
            if (r->res)
                l->slots[i].stage = r->res->stage[j * r->S + i]; /* lent */
            else
                RAP_TRY(r->ops->stage_create(&r->pcfg, &l->slots[i].stage));
        }
    }
    return RAP_OK;
}

/* Who parses: the backend, each parser thread's state and, on the GPU, the
 * consumer's stream (the device is the opening thread's); lent by res
 * (r->res) when it was made for this reader's sizes. */
static rap_status make_parsers(rap_reader *r)
{
    r->ops = rap_parse_ops_of(r->cfg.parse);
    r->pcfg.chunk_bytes = r->C + 1; /* a slot: C bytes and a last line's added '\n' */
    r->pcfg.max_line = r->cfg.max_line;
    r->pcfg.device = r->ops->device_rows ? rap_parse_device() : 0;
    r->pcfg.gate = r->gate;
    rap_parse_res *res = r->res;
    r->res = NULL;
    if (res && res->ops == r->ops && res->pcfg.chunk_bytes == r->C + 1 &&
        res->pcfg.max_line == r->cfg.max_line && res->pcfg.gate == r->gate &&
        res->n_state >= r->P &&
        res->n_stage >= (int64_t)r->L * r->S) {
        r->res = res;
        r->pcfg = res->pcfg;
        r->parser_state = res->state;
        r->rows_stream = res->stream;
        return RAP_OK;
    }
    r->parser_state = rap_calloc((size_t)r->P * sizeof(void *), "reader parsers");
    if (!r->parser_state)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < r->P; i++)
        RAP_TRY(r->ops->create(&r->pcfg, &r->parser_state[i]));
    if (r->ops->device_rows)
        RAP_TRY(rap_parse_stream_create(&r->rows_stream));
    return RAP_OK;
}

void rap_parse_res_free(rap_parse_res *x)
{
    if (!x)
        return;
    if (x->stream)
        rap_parse_sync(x->stream);
    for (int i = 0; x->state && i < x->n_state; i++)
        x->ops->free(x->state[i]);
    for (int64_t i = 0; x->stage && i < x->n_stage; i++)
        x->ops->stage_free(&x->stage[i]);
    rap_free(x->state);
    rap_free(x->stage);
    rap_parse_stream_free(x->stream);
    rap_free(x);
}

rap_status rap_parse_res_create(const rap_reader_config *cfg, size_t chunk_bytes,
                                rap_parse_res **out)
{
    return rap_parse_res_create_gate(cfg, chunk_bytes, NULL, out);
}

rap_status rap_parse_res_create_gate(const rap_reader_config *cfg, size_t chunk_bytes,
                                     rap_parse_gate *gate, rap_parse_res **out)
{
    *out = NULL;
    rap_reader_threads t;
    RAP_TRY(check_config(cfg));
    RAP_TRY(rap_reader_check_parse(cfg));
    RAP_TRY(rap_reader_plan_threads(cfg, &t));
    const rap_parse_ops *ops = rap_parse_ops_of(cfg->parse);
    if (!ops->device_rows)
        return RAP_OK; /* nothing worth keeping: host memory */
    rap_parse_res *x = rap_calloc(sizeof *x, "parse resources");
    if (!x)
        return RAP_ERR_NOMEM;
    int L, P, S;
    size_t C;
    reader_sizes(cfg, t.files > 1 || t.lanes > 1, t.files, chunk_bytes, &L, &P, &S, &C);
    x->ops = ops;
    x->pcfg.chunk_bytes = C + 1;
    x->pcfg.max_line = cfg->max_line;
    x->pcfg.device = rap_parse_device();
    x->pcfg.gate = gate;
    x->state = rap_calloc((size_t)P * sizeof(void *), "parse resources");
    x->stage = rap_calloc((size_t)L * (size_t)S * sizeof(rap_batch), "parse resources");
    rap_status st = x->state && x->stage ? RAP_OK : RAP_ERR_NOMEM;
    for (int i = 0; st == RAP_OK && i < P; i++, x->n_state++)
        st = ops->create(&x->pcfg, &x->state[i]);
    for (int64_t i = 0; st == RAP_OK && i < (int64_t)L * S; i++, x->n_stage++)
        st = ops->stage_create(&x->pcfg, &x->stage[i]);
    if (st == RAP_OK)
        st = rap_parse_stream_create(&x->stream);
    if (st != RAP_OK) {
        rap_parse_res_free(x);
        return st;
    }
    *out = x;
    return RAP_OK;
}

static rap_status start_threads(rap_reader *r)
{
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->st_mu, NULL);
    pthread_cond_init(&r->cv_parser, NULL);
    pthread_cond_init(&r->cv_consumer, NULL);
    for (int j = 0; j < r->L; j++)
        pthread_cond_init(&r->lanes[j].cv, NULL);
    r->sync_init = true;
    atomic_init(&r->stop, 0);
    for (int i = 0; i < r->P; i++) {
        if (pthread_create(&r->parser_tid[i], NULL, parser_main, r) != 0)
            return rap_fail(RAP_ERR_NOMEM, "reader: cannot start parser thread %d: %s", i,
                            strerror(errno));
        r->parsers_started++;
    }
    for (int j = 0; j < r->L; j++) {
        if (pthread_create(&r->lanes[j].tid, NULL, reader_lane_main, &r->lanes[j]) != 0)
            return rap_fail(RAP_ERR_NOMEM, "reader: cannot start reading thread %d", j);
        r->lanes[j].started = true;
    }
    return RAP_OK;
}

/* Copies schema s into r; a schema that is not Criteo's layout gets the
 * schema parser (Criteo's keeps parse.c's: the same rows, rejects and
 * messages as without a schema). */
static rap_status open_schema(rap_reader *r, const rap_input_schema *s)
{
    RAP_TRY(rap_input_schema_check(s));
    r->schema = rap_malloc(sizeof *r->schema, "reader schema");
    if (!r->schema)
        return RAP_ERR_NOMEM;
    *r->schema = *s;
    r->cfg.schema = r->schema;
    if (rap_input_schema_is_criteo(s))
        return RAP_OK;
    return rap_schema_parser_create(s, &r->sp);
}

/* A single Parquet input is refused at open when it cannot be read by
 * the schema (no Arrow, truncated, a column missing or of the wrong
 * type), before any row is read. */
static rap_status check_parquet(rap_reader *r)
{
    if (!strcmp(r->input, "-") || !rap_pq_is_parquet(r->input))
        return RAP_OK;
    rap_pq *p;
    RAP_TRY(rap_pq_open(r->input, &p));
    int map[RAP_SCHEMA_MAX_COLS];
    rap_status st = rap_pq_bind(p, r->input, reader_pq_schema(r), map);
    rap_pq_close(p);
    return st;
}

bool rap_reader_criteo_text(const rap_reader_config *cfg)
{
    if (!cfg || (cfg->schema && !rap_input_schema_is_criteo(cfg->schema)))
        return false;
    return !cfg->input || !strcmp(cfg->input, "-") || !rap_pq_is_parquet(cfg->input);
}

rap_status rap_reader_check_parse(const rap_reader_config *cfg)
{
    if ((cfg->parse != RAP_PARSE_GPU && cfg->parse != RAP_PARSE_REF) ||
        rap_reader_criteo_text(cfg))
        return RAP_OK;
    const char *kind = cfg->parse == RAP_PARSE_GPU ? "gpu" : "reference";
    if (cfg->schema && !rap_input_schema_is_criteo(cfg->schema))
        return rap_fail(RAP_ERR_ARG, "reader: --parse %s parses text in Criteo's layout, not "
                        "the schema %s (use --parse cpu or auto)", kind, cfg->schema->source);
    return rap_fail(RAP_ERR_ARG, "reader: --parse %s parses text in Criteo's layout; %s is a "
                    "Parquet file (use --parse cpu or auto)", kind, cfg->input);
}

rap_schema rap_reader_shape(const rap_reader_config *cfg)
{
    if (cfg && cfg->schema)
        return rap_input_schema_shape(cfg->schema);
    return rap_schema_criteo();
}

rap_status rap_reader_open_ex(const rap_reader_config *cfg, size_t chunk_bytes, rap_reader **out)
{
    return rap_reader_open_res(cfg, chunk_bytes, NULL, out);
}

rap_status rap_reader_open_res(const rap_reader_config *cfg, size_t chunk_bytes,
                               rap_parse_res *res, rap_reader **out)
{
    return rap_reader_open_gate(cfg, chunk_bytes, res, NULL, out);
}

rap_status rap_reader_open_gate(const rap_reader_config *cfg, size_t chunk_bytes,
                                rap_parse_res *res, rap_parse_gate *gate, rap_reader **out)
{
    *out = NULL;
    RAP_TRY(check_config(cfg));
    RAP_TRY(rap_reader_check_parse(cfg));
    rap_reader *r = rap_calloc(sizeof *r, "reader");
    if (!r)
        return RAP_ERR_NOMEM;
    r->cfg = *cfg;
    r->res = res; /* kept by make_parsers if it fits */
    r->gate = gate;
    r->input = strdup(cfg->input);
    r->cfg.input = r->input;
    r->cfg.schema = NULL;
    r->shape = rap_reader_shape(cfg);
    rap_status st = RAP_OK;
    if (!r->input) {
        st = rap_fail(RAP_ERR_NOMEM, "reader: out of memory");
        goto fail;
    }
    if (cfg->schema && (st = open_schema(r, cfg->schema)) != RAP_OK)
        goto fail;
    if (!cfg->schema && (st = rap_input_schema_criteo(&r->criteo)) != RAP_OK)
        goto fail;
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
        if ((st = reader_rescan(r, &added)) != RAP_OK)
            goto fail;
    } else if ((st = check_parquet(r)) != RAP_OK) {
        goto fail;
    }
    if (cfg->start && cfg->start->valid) {
        r->start = *cfg->start;
        if (!r->start.file[0] || !memchr(r->start.file, 0, sizeof r->start.file)) {
            st = rap_fail(RAP_ERR_DATA, "data position: no file named");
            goto fail;
        }
        r->cfg.start = &r->start;
        r->used_total = r->start.rows;
        r->prev_fid = 0;
        r->prev_off = r->start.offset;
        r->prev_line = r->start.line;
        if ((st = reader_open_start(r)) != RAP_OK)
            goto fail;
    } else {
        r->cfg.start = NULL;
        r->prev_fid = -1;
        if (!r->is_dir) {
            int64_t fid;
            if ((st = rap_source_open(r->input, &r->first)) != RAP_OK ||
                (st = reader_ftab_add(r, r->first, 0, &fid)) != RAP_OK)
                goto fail;
        }
    }
    r->pos_first = r->used_total;
    if ((st = make_lanes(r, chunk_bytes)) != RAP_OK)
        goto fail;
    r->turn_left = r->cfg.interleave_rows;
    if ((st = start_threads(r)) != RAP_OK)
        goto fail;
    *out = r;
    return RAP_OK;
fail:
    rap_reader_close(r);
    return st;
}

/* -------------------------------------------------------------- next */

static void count_reject(rap_reader *r, const lane *l, const slot *sl, const rap_parse_reject *e)
{
    pthread_mutex_lock(&r->st_mu);
    int64_t n = r->st.rejected[e->reason]++;
    r->st.rows_rejected++;
    if (n < RAP_REJ_EXAMPLES) {
        snprintf(r->st.example[e->reason][n], sizeof r->st.example[e->reason][n], "%s:%lld",
                 sl->path, (long long)(l->c_slot_base + e->line + 1));
        if (e->msg >= 0 && e->msg < sl->out.n_msg)
            snprintf(r->st.detail[e->reason][n], sizeof r->st.detail[e->reason][n], "%s",
                     sl->out.msg[e->msg]);
    }
    pthread_mutex_unlock(&r->st_mu);
}

/* Appends good rows [u, u+n) of o (the schema parser's: sparse columns
 * as lists, at most K ids a row) to b. */
static void copy_rows_lists(rap_batch *b, const rap_parsed *o, int64_t u, int64_t n)
{
    const int64_t B = b->cap, R = o->cap, at = b->rows, K = b->schema.ids_per_row;
    memcpy(b->label + at, o->label + u, (size_t)n * sizeof(float));
    for (int j = 0; j < o->nd; j++) {
        memcpy(b->dense + j * B + at, o->dense + j * R + u, (size_t)n * sizeof(float));
        memcpy(b->dense_valid + j * B + at, o->dense_valid + j * R + u, (size_t)n);
    }
    for (int j = 0; j < o->ns; j++) {
        int64_t *off = b->sparse_off + j * (B + 1);
        int64_t *ids = b->sparse_ids + j * B * K;
        const int64_t *so = o->soff + j * (R + 1) + u, *x = o->sids[j];
        int64_t c = off[at], n_ids = so[n] - so[0];
        memcpy(ids + c, x + so[0], (size_t)n_ids * sizeof *ids); /* <= K ids a row */
        for (int64_t i = 0; i < n; i++)
            off[at + i + 1] = c + (so[i + 1] - so[0]);
        memcpy(b->sparse_valid + j * B + at, o->sparse_valid + j * R + u, (size_t)n);
    }
    b->rows += n;
}

/* Good rows the reader may still hand out in this call of take_slot: the
 * turn's rest (interleave) and, with several lanes, max_rows' rest. */
static int64_t rows_allowed(const rap_reader *r)
{
    int64_t n = INT64_MAX;
    if (r->L > 1 && r->cfg.interleave == RAP_INTERLEAVE_BATCH)
        n = r->turn_left;
    if (r->L > 1 && r->cfg.max_rows > 0 && r->cfg.max_rows - r->lines_taken < n)
        n = r->cfg.max_rows - r->lines_taken;
    return n;
}

static bool lines_left(const rap_reader *r)
{
    return !(r->L > 1 && r->cfg.max_rows > 0 && r->lines_taken >= r->cfg.max_rows);
}

/* Moves rows of the parsed slot sl of lane l into b, counting rejects in
 * order, while rows_allowed lets it (a turn ends right after its last row:
 * the rejects after it come with the lane's next turn). *done when the slot is used up. With
 * bad_rows fail, the first reject gives RAP_ERR_DATA (and becomes sticky)
 * once the rows before it are handed out. */
static rap_status take_slot(rap_reader *r, lane *l, slot *sl, rap_batch *b, bool *done)
{
    *done = false;
    const rap_parsed *o = &sl->out;
    if (sl->parse_status != RAP_OK) {
        r->sticky = sl->parse_status;
        snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", sl->parse_msg);
        return r->sticky;
    }
    if (!l->c_started) {
        l->c_started = true;
        l->c_u = l->c_k = 0;
        l->c_line = l->c_byte = l->c_drop = l->c_dsum = 0;
        if (sl->fid != l->c_fid) { /* a new file (or a file read again from its start) */
            l->c_fid = sl->fid;
            l->c_file = sl->file_idx;
            pthread_mutex_lock(&r->mu);
            l->c_line_base = r->ftab[sl->fid].line0;
            pthread_mutex_unlock(&r->mu);
        }
        l->c_slot_base = l->c_line_base + sl->skip;
    }
    for (;;) {
        while (l->c_k < o->n_rej && o->rej[l->c_k].pos <= l->c_u && rows_allowed(r) > 0) {
            const rap_parse_reject *e = &o->rej[l->c_k];
            if (r->cfg.bad_rows == RAP_BAD_FAIL) {
                if (b->rows > 0)
                    return RAP_OK; /* the error comes with the next call */
                count_reject(r, l, sl, e);
                l->c_k++;
                r->lines_taken++;
                r->sticky = RAP_ERR_DATA;
                snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s:%lld: %s", sl->path,
                         (long long)(l->c_slot_base + e->line + 1), o->first_msg);
                return RAP_ERR_DATA;
            }
            count_reject(r, l, sl, e);
            l->c_k++;
            r->lines_taken++;
        }
        if (l->c_u == o->n_used && l->c_k == o->n_rej) {
            l->c_line_base += o->n_lines + sl->skip;
            *done = true;
            return RAP_OK;
        }
        int64_t allowed = rows_allowed(r);
        if (b->rows == b->cap || allowed == 0)
            return RAP_OK;
        int64_t lim = l->c_k < o->n_rej ? o->rej[l->c_k].pos : o->n_used;
        int64_t n = lim - l->c_u;
        if (n > b->cap - b->rows)
            n = b->cap - b->rows;
        if (n > allowed)
            n = allowed;
        if (n == 0)
            return RAP_OK; /* max_rows reached at a reject */
        if (r->cfg.track_positions)
            reader_track_rows(r, l, sl, b->rows, n);
        rap_status ast = r->sp || sl->pq_group >= 0
                             ? (copy_rows_lists(b, o, l->c_u, n), RAP_OK)
                             : rap_parse_rows_append(r->ops, b, o, &sl->stage, l->c_u, n,
                                                     r->rows_stream);
        if (ast != RAP_OK) {
            r->sticky = ast;
            snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", rap_last_error());
            return ast;
        }
        l->c_u += n;
        r->used_total += n;
        r->lines_taken += n;
        if (r->L > 1 && r->cfg.interleave == RAP_INTERLEAVE_BATCH)
            r->turn_left -= n;
        pthread_mutex_lock(&r->st_mu);
        r->st.rows_used += n;
        pthread_mutex_unlock(&r->st_mu);
    }
}

enum { NL_TAKE, NL_WAIT, NL_END, NL_ERR };

/* The state of lane l's oldest slot for the caller. */
static int lane_head(const rap_reader *r, const lane *l)
{
    if (l->consumed < l->produced)
        return l->slots[l->consumed % r->S].state == SLOT_PARSED ? NL_TAKE : NL_WAIT;
    if (!l->done)
        return NL_WAIT;
    return l->err != RAP_OK ? NL_ERR : NL_END;
}

/* The first lane after lane `from` (cyclically, itself last) still in the
 * interleave rotation; -1 when none is. */
static int next_alive(const rap_reader *r, int from)
{
    for (int k = 1; k <= r->L; k++) {
        int j = (from + k) % r->L;
        if (r->lanes[j].c_alive)
            return j;
    }
    return -1;
}

/* The lane the order rule takes the next rows from (under r->mu), and
 * whether they are there: NL_TAKE, NL_WAIT, NL_END (no more rows), NL_ERR
 * (*out's error comes now). */
static int next_lane(rap_reader *r, lane **out)
{
    if (r->L == 1) {
        *out = &r->lanes[0];
        return lane_head(r, *out);
    }
    if (r->cfg.interleave == RAP_INTERLEAVE_FILE) {
        for (;;) { /* file c_file is lane (c_file mod L)'s until a later file's slot */
            if (r->c_file >= r->n_names)
                return NL_END;
            lane *l = *out = &r->lanes[r->c_file % r->L];
            r->want = l->id;
            if (l->consumed < l->produced &&
                l->slots[l->consumed % r->S].file_idx > r->c_file) {
                r->c_file++;
                continue;
            }
            int h = lane_head(r, l);
            if (h == NL_END || (h == NL_ERR && l->err_file > r->c_file)) {
                r->c_file++;
                continue;
            }
            return h;
        }
    }
    for (;;) { /* batch interleave: turns over the lanes still in the rotation */
        if (r->turn_left == 0) {
            int j = next_alive(r, r->c_lane);
            if (j < 0)
                return NL_END;
            r->c_lane = j;
            r->turn_left = r->cfg.interleave_rows;
        }
        lane *l = *out = &r->lanes[r->c_lane];
        r->want = l->id;
        int h = lane_head(r, l);
        if (h != NL_END)
            return h;
        l->c_alive = false; /* out of rows: the turn goes on with the next lane */
        int j = next_alive(r, r->c_lane);
        if (j < 0)
            return NL_END;
        r->c_lane = j;
    }
}

rap_status rap_reader_next(rap_reader *r, rap_batch *b)
{
    if (r && b && r->schema && (b->schema.n_dense != r->shape.n_dense ||
                                b->schema.n_sparse != r->shape.n_sparse ||
                                b->schema.ids_per_row != r->shape.ids_per_row))
        return rap_fail(RAP_ERR_ARG, "reader: expected a batch of the schema %s (%d dense, %d "
                        "sparse, %d ids per row), got %d, %d, %d", r->schema->source,
                        r->shape.n_dense, r->shape.n_sparse, r->shape.ids_per_row,
                        b->schema.n_dense, b->schema.n_sparse, b->schema.ids_per_row);
    if (!r || !b || !b->block || b->cap < 1 ||
        (!r->schema && (b->schema.n_dense != RAP_CRITEO_DENSE ||
                        b->schema.n_sparse != RAP_CRITEO_SPARSE || b->schema.ids_per_row != 1)))
        return rap_fail(RAP_ERR_ARG, "reader: expected a Criteo batch (13 dense, 26 sparse, "
                                     "1 id per row) of capacity >= 1");
    if (b->device != r->ops->device_rows)
        return rap_fail(RAP_ERR_ARG, "reader: parse %s fills batches in %s memory, got one in "
                        "%s memory", r->ops->name, r->ops->device_rows ? "device" : "host",
                        b->device ? "device" : "host");
    b->rows = 0;
    b->first_row = r->used_total;
    for (int j = 0; !b->device && j < b->schema.n_sparse; j++)
        b->sparse_off[j * (b->cap + 1)] = 0; /* device: the first append writes it */
    if (r->cfg.track_positions)
        RAP_TRY(reader_positions_begin(r, b->cap));
    if (r->sticky != RAP_OK)
        return rap_fail(r->sticky, "%s", r->sticky_msg);
    rap_status st = RAP_OK;
    pthread_mutex_lock(&r->mu);
    while (b->rows < b->cap && !r->c_end) {
        lane *l;
        int h = next_lane(r, &l);
        if (h == NL_END)
            break;
        if (h == NL_ERR) {
            r->sticky = l->err;
            snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", l->err_msg);
            if (b->rows == 0)
                st = r->sticky;
            break;
        }
        if (h == NL_WAIT) {
            if (b->rows > 0 && r->idle)
                break; /* following a quiet input: hand out what there is */
            pthread_cond_wait(&r->cv_consumer, &r->mu);
            continue;
        }
        slot *sl = &l->slots[l->consumed % r->S];
        pthread_mutex_unlock(&r->mu);
        bool done;
        st = take_slot(r, l, sl, b, &done);
        /* gpu: the slot's staging rows are parsed again once it is free, so
         * the appends queued from them must have run */
        if (done && st == RAP_OK && r->ops->device_rows &&
            (st = rap_parse_sync(r->rows_stream)) != RAP_OK) {
            r->sticky = st;
            snprintf(r->sticky_msg, sizeof r->sticky_msg, "%s", rap_last_error());
        }
        pthread_mutex_lock(&r->mu);
        if (done) {
            sl->state = SLOT_FREE;
            l->consumed++;
            l->c_started = false;
            pthread_cond_signal(&l->cv);
        }
        if (!lines_left(r)) { /* max_rows with several lanes: the end */
            r->c_end = true;
            atomic_store(&r->stop, 1);
        }
        bool turn_over = r->L > 1 && r->cfg.interleave == RAP_INTERLEAVE_BATCH &&
                         r->turn_left == 0;
        if (st != RAP_OK || (!done && b->rows < b->cap && !turn_over && !r->c_end))
            break; /* an error, or rows held back before a fail-mode reject */
    }
    pthread_mutex_unlock(&r->mu);
    r->pos_n = b->rows;
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
    case RAP_REJ_QUOTE: return "CSV quoting broken";
    case RAP_REJ_LIST: return "list longer than --max-list";
    case RAP_REJ_COUNT: break;
    }
    return "unknown";
}

void rap_reader_first_reject(const rap_reader_stats *st, char *out, size_t n)
{
    out[0] = 0;
    for (int k = 0; k < RAP_REJ_COUNT; k++) {
        if (!st->rejected[k] || !st->example[k][0][0])
            continue;
        snprintf(out, n, "%s%s%s", st->example[k][0], st->detail[k][0][0] ? ": " : "",
                 st->detail[k][0]);
        return;
    }
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
        /* what was wrong, field and value, of the first few */
        for (int64_t i = 0; i < n && i < 3; i++)
            if (st->detail[k][i][0])
                fprintf(f, "    %s: %s\n", st->example[k][i], st->detail[k][i]);
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
        for (int j = 0; j < r->L; j++)
            pthread_cond_broadcast(&r->lanes[j].cv);
        pthread_cond_broadcast(&r->cv_parser);
        pthread_cond_broadcast(&r->cv_consumer);
        pthread_mutex_unlock(&r->mu);
        if (r->gate) /* a parser thread waiting for its launch finishes */
            rap_parse_gate_bypass(r->gate, true);
        for (int j = 0; j < r->L; j++)
            if (r->lanes[j].started)
                pthread_join(r->lanes[j].tid, NULL);
        for (int i = 0; i < r->parsers_started; i++)
            pthread_join(r->parser_tid[i], NULL);
        reader_shares_leave(r); /* a thread that never started too */
        if (r->gate)
            rap_parse_gate_bypass(r->gate, false);
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->st_mu);
        for (int j = 0; j < r->L; j++)
            pthread_cond_destroy(&r->lanes[j].cv);
        pthread_cond_destroy(&r->cv_parser);
        pthread_cond_destroy(&r->cv_consumer);
    }
    rap_source_close(r->first);
    for (int j = 0; r->lanes && j < r->L; j++) {
        lane *l = &r->lanes[j];
        for (int i = 0; l->slots && i < r->S; i++) {
            rap_free(l->slots[i].buf);
            rap_free(l->slots[i].drops);
            rap_parsed_free(&l->slots[i].out);
            if (r->ops && !r->res)
                r->ops->stage_free(&l->slots[i].stage);
        }
        rap_free(l->slots);
        rap_free(l->carry);
    }
    reader_shares_free(r);
    rap_free(r->lanes);
    rap_free(r->parser_tid);
    rap_schema_parser_free(r->sp);
    rap_free(r->schema);
    rap_input_schema_free(r->criteo);
    if (r->res) { /* lent: the appends queued from its stages done, nothing freed */
        if (r->rows_stream)
            rap_parse_sync(r->rows_stream);
    } else {
        for (int i = 0; r->parser_state && i < r->P; i++)
            r->ops->free(r->parser_state[i]);
        rap_free(r->parser_state);
        rap_parse_stream_free(r->rows_stream);
    }
    for (int64_t i = 0; i < r->n_names; i++)
        free(r->names[i]);
    rap_free(r->names);
    for (int64_t i = 0; i < r->n_ftab; i++)
        free(r->ftab[i].path);
    rap_free(r->ftab);
    rap_free(r->row_fid);
    rap_free(r->row_off);
    rap_free(r->row_line);
    free(r->input);
    rap_free(r);
}

bool rap_reader_rows_on_device(const rap_reader *r) { return r && r->ops && r->ops->device_rows; }

rap_status rap_reader_append(rap_reader *r, rap_batch *dst, const rap_batch *src, int64_t a,
                             int64_t n)
{
    if (dst->device || src->device)
        return rap_batch_append_device(dst, src, a, n, r->rows_stream);
    rap_batch_append(dst, src, a, n);
    return RAP_OK;
}

void *rap_reader_rows_stream(rap_reader *r) { return r ? r->rows_stream : NULL; }

rap_status rap_reader_sync(rap_reader *r)
{
    return r->ops && r->ops->device_rows ? rap_parse_sync(r->rows_stream) : RAP_OK;
}
