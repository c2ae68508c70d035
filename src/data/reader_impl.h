/*
 * reader_impl.h -- the reader's inside, shared by reader.c (open, parser
 * threads, rap_reader_next), reader_lane.c (the lane threads that read,
 * inflate and cut files), reader_pos.c (data positions) and reader_share.c
 * (the ranks' shared parse). Nothing outside
 * src/data/reader*.c includes it.
 *
 * Letters: L lanes, S slots per lane, C chunk bytes, P parser threads.
 */
#ifndef RAP_READER_IMPL_H
#define RAP_READER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "data/lines.h"
#include "data/parse.h"
#include "data/parse_schema.h"
#include "data/position.h"
#include "data/parse_backend.h"
#include "data/reader_internal.h"
#include "data/source.h"

#define READER_MAX_LANES 256

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_FILLED, SLOT_PARSING, SLOT_PARSED };

typedef struct {
    int state;
    char *buf;            /* (C+1) whole lines, each ending in '\n' */
    size_t len;
    int64_t file_idx;     /* the file's index among the input's (0: a file, stdin) */
    bool first;           /* the file's first chunk (its header line, with --header) */
    int64_t skip;         /* lines before the parsed ones: 1 for a header taken off */
    int pq_group;         /* a Parquet file's row group to read (path), -1: text in buf */
    int64_t pq_max;       /* ... at most this many of its rows (-1: all) */
    char path[1024];      /* for messages */
    int64_t fid;          /* the file's entry in the reader's file table */
    int64_t file_off;     /* the file's byte offset of buf[0] (< 0 when buf[0] came
                           * before a truncation: offsets count from the new start) */
    rap_line_drop *drops; /* (cap_drops) lines whose tails were dropped (lines.h) */
    int64_t n_drops;
    bool added_nl;        /* the last line's '\n' is not in the file */
    rap_parsed out;       /* the chunk's accounting (cpu parser: and its rows) */
    rap_batch stage;      /* gpu, reference: its good rows (device or host) */
    rap_status parse_status;
    char parse_msg[256];
} slot;

struct rap_reader;

/* What a caller lends readers one after the other (rap_parse_res_create). */
struct rap_parse_res {
    const rap_parse_ops *ops;
    rap_parse_backend_config pcfg;
    void **state;         /* (n_state) parser threads' states */
    int n_state;
    rap_batch *stage;     /* (n_stage) slot j * S + i of lane j */
    int64_t n_stage;
    void *stream;         /* the consumer's appends */
};

/* One lane: a thread that reads its files one after the other (files
 * id, id + L, id + 2L, ... of a directory; every file when L = 1), cuts
 * them into chunks of whole lines and publishes the chunks, in its own
 * order, in its ring of S slots. */
typedef struct {
    struct rap_reader *r;
    int id;
    slot *slots;          /* (S) ring: sequence number k is slots[k % S] */
    char *carry;          /* (C) partial line moving to the next slot */
    pthread_cond_t cv;    /* the lane thread waits here for a free slot */
    pthread_t tid;
    bool started;
    /* guarded by r->mu */
    int64_t produced, parse_next, consumed;
    bool done;            /* the thread ended */
    rap_status err;       /* it ended on this error (rows before it handed out first) */
    int64_t err_file;     /* ... met in this file */
    char err_msg[2048];
    /* the lane thread only */
    int64_t lines_emitted; /* L = 1 and max_rows: lines published */
    rap_line_fill fill;    /* the slot being filled */
    slot *filling;
    int64_t fid;           /* the file being read: its file table entry */
    int64_t src_off;       /* its byte offset of the next byte read */
    double moved_since;    /* follow: when its path was first seen naming another file */
    bool moved;            /* follow: the file read last ended that way */
    bool final_at_end;     /* the file being read ends at its end, follow or not */
    /* rap_reader_next only: progress in the lane's oldest slot */
    bool c_started;
    int64_t c_u, c_k;      /* good rows, rejects taken from it */
    int64_t c_file, c_line_base, c_slot_base;
    int64_t c_fid;         /* the file of c_line_base */
    int64_t c_line, c_byte, c_drop, c_dsum; /* track_positions: the next line of the
                           * slot, its first byte, the drop records before it, their bytes */
    bool c_alive;          /* interleave: still in the rotation */
} lane;

struct rap_reader {
    rap_reader_config cfg;
    rap_input_schema *schema; /* cfg.schema's copy (cfg.schema points here); NULL: Criteo */
    rap_schema_parser *sp;    /* the schema parser; NULL: Criteo's parser (parse.h) */
    rap_schema shape;         /* of the batches handed out */
    rap_input_schema *criteo; /* the built-in schema, for Parquet input without one */
    char *input;          /* copy of cfg.input */
    bool is_dir;
    rap_source *first;    /* file or stdin opened by rap_reader_open */
    char **names;         /* (n_names) directory entries read or to read, in order */
    int64_t n_names, cap_names;
    size_t C;             /* chunk bytes */
    int L, S, P;          /* lanes, slots per lane, parser threads */
    lane *lanes;          /* (L) */
    pthread_t *parser_tid; /* (P) */
    int parsers_started;
    const rap_parse_ops *ops; /* who parses (cfg.parse) */
    rap_parse_backend_config pcfg;
    void **parser_state;  /* (P) each parser thread's backend state */
    struct rap_parse_share **share; /* (P) with cfg.parse_xchg: parser thread i's share
                           * over parse_xchg[i] (parse_share.h); NULL: every line here */
    int64_t p_seq;        /* shared parse, guarded by mu: chunks taken (chunk p_seq is
                           * parser thread p_seq % P's) ... */
    int64_t p_file;       /* ... several lanes: the file whose chunks come next */
    atomic_int parser_ids; /* a starting parser thread takes the next index */
    void *rows_stream;    /* gpu: the consumer's appends (rap_reader_next, rap_reader_append) */
    rap_parse_res *res;   /* lent parser states, stages and stream (not freed); NULL: own */
    rap_parse_gate *gate; /* gpu, reference: where the chunks' parses are posted (not
                           * owned); NULL: launched by the parser threads */
    bool sync_init;

    pthread_mutex_t mu;   /* guards the rings and the flags below */
    pthread_cond_t cv_parser, cv_consumer;
    bool idle, closing;
    int want;             /* the lane rap_reader_next waits on: parsers look there first */
    atomic_int stop;

    /* lane 0 with L = 1 (follow) */
    double last_data;

    /* positions (track_positions, start) */
    struct { char *path; uint64_t dev, ino; int64_t line0; } *ftab; /* (n_ftab) every file
                           * opened, in order; guarded by mu */
    int64_t n_ftab, cap_ftab;
    int64_t cap_drops;    /* drop records per slot */
    rap_data_position start; /* start.valid: the position to start at */
    rap_position_target target;
    int64_t *row_fid, *row_off, *row_line; /* (cap_rows) each row of the last batch */
    int64_t cap_rows, pos_first, pos_n;  /* its first row's index, its rows */
    int64_t prev_fid, prev_off, prev_line; /* just before pos_first (fid -1: the start) */

    /* rap_reader_next only */
    int64_t c_file;       /* file order, L > 1: the file being handed out */
    int c_lane;           /* interleave: the lane of the turn */
    int64_t turn_left;    /* interleave: good rows left in the turn */
    int64_t lines_taken;  /* L > 1 with max_rows: lines handed out or rejected */
    bool c_end;
    rap_status sticky;
    char sticky_msg[2048];
    int64_t used_total;

    pthread_mutex_t st_mu; /* guards st */
    rap_reader_stats st;
};

/* reader_lane.c */

/* Appends the regular, non-hidden files of the input directory whose
 * names sort after the last name known, in strcmp order. *added: how many. */
rap_status reader_rescan(struct rap_reader *r, int64_t *added);
/* Appends the open file src to the file table (its lines counted from
 * line0 + 1); *fid: its entry. RAP_ERR_NOMEM, or RAP_ERR_IO from fstat. */
rap_status reader_ftab_add(struct rap_reader *r, rap_source *src, int64_t line0, int64_t *fid);
/* The lane thread (pthread start routine; arg: the lane). */
void *reader_lane_main(void *arg);
/* The schema Parquet columns are read by: cfg.schema's copy, else the
 * built-in Criteo one. */
const rap_input_schema *reader_pq_schema(const struct rap_reader *r);

/* reader_pos.c */

/* Opens the start position's file as r->first (file table entry 0, its
 * lines counted from the position's) and skips to its offset, which must
 * be 0, the file's end or just past a '\n'. RAP_ERR_DATA naming the
 * position when it does not fit the input (rap_position_resolve), errors
 * of the source, RAP_ERR_NOMEM. */
rap_status reader_open_start(struct rap_reader *r);
/* Records the positions just past rows [l->c_u, l->c_u + n) of slot sl,
 * to be rows [at, at + n) of the batch (rap_reader_next only; the row
 * arrays hold at + n rows). Cannot fail. */
void reader_track_rows(struct rap_reader *r, lane *l, const slot *sl, int64_t at, int64_t n);
/* A new batch of capacity cap: the last batch's last row becomes the
 * position before it; the row arrays grow to cap. RAP_ERR_NOMEM. */
rap_status reader_positions_begin(struct rap_reader *r, int64_t cap);

/* reader_share.c: the ranks' shared parse (data/parse_share.h). The
 * shared parse's next chunk (its lane; NULL: wait), under r->mu; each
 * parser thread's share where the reader shares (r->share, else NULL);
 * what they allocate beside the parser's (added to *device or *host);
 * every share's leave round, after the parser threads ended; freeing
 * them. */
lane *reader_share_next(rap_reader *r);
rap_status reader_make_shares(rap_reader *r);
void reader_share_bytes(const rap_reader_config *cfg, int lanes, int parsers, size_t C,
                        size_t *device, size_t *host);
void reader_shares_leave(rap_reader *r);
void reader_shares_free(rap_reader *r);

#endif /* RAP_READER_IMPL_H */
