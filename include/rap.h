/*
 * rap.h -- public API of librap.
 *
 * rap trains DLRM recommendation models from raw click logs and runs the
 * input preprocessing on the training GPUs themselves (docs/ARCHITECTURE.md).
 * This header is the library's whole public surface for the data path:
 *
 *   raw TSV / CSV  --rap_reader--> rap_batch (columnar, host)
 *     (fields by rap_input_schema: Criteo's built in, or a schema file)
 *   plan file      --rap_plan_load--> rap_plan (DAG of ops on named columns)
 *   rap_plan + fusion --rap_prep_create--> rap_prep (executor, CPU or GPU)
 *   rap_prep_load(batch); rap_prep_run(); rap_prep_column() -> tensors
 *
 * Usage (error handling shortened):
 *
 *   rap_plan *plan;
 *   rap_plan_load("plans/default.plan", rap_schema_criteo(), &plan);
 *   rap_fusion fus;
 *   rap_fuse_levels(plan, &fus);
 *   rap_prep_config pc = { .device = RAP_GPU, .max_rows = 4096 };
 *   rap_prep *prep;
 *   rap_prep_create(plan, &fus, &pc, &prep);
 *   rap_reader_config rc = rap_reader_defaults();
 *   rc.input = "day_0.gz";
 *   rap_reader *rd;
 *   rap_reader_open(&rc, &rd);
 *   rap_batch b;
 *   rap_batch_create(&b, rap_schema_criteo(), 4096, true);
 *   while (rap_reader_next(rd, &b) == RAP_OK && b.rows > 0) {
 *       rap_prep_load(prep, &b);
 *       rap_prep_run(prep);
 *       ... rap_prep_column(prep, i, &view) ...
 *   }
 *
 * Conventions. Every function that can fail returns a rap_status; on failure
 * rap_last_error() holds a one-line message for the calling thread naming the
 * file, line and what was expected where that applies. The library never
 * calls exit(). Objects are made by x_create/x_open and released by
 * x_free/x_close, which accept NULL. Shapes are written beside pointers with
 * these letters: B rows of a batch (capacity), ND raw dense columns, NS raw
 * sparse columns, K ids per row of a raw sparse column, W vector width.
 */
#ifndef RAP_H
#define RAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum {
    RAP_OK = 0,
    RAP_ERR_ARG,         /* bad argument, option or call sequence */
    RAP_ERR_IO,          /* missing file, read or write failure */
    RAP_ERR_DATA,        /* malformed input row (bad-rows=fail) or corrupt file */
    RAP_ERR_PLAN,        /* plan rejected */
    RAP_ERR_NOMEM,       /* host or device memory exhausted */
    RAP_ERR_CUDA,        /* CUDA runtime or library error */
    RAP_ERR_NO_GPU,      /* GPU asked for, none usable (or built without CUDA) */
    RAP_ERR_INTERRUPTED, /* stopped by rap_reader_stop or a signal */
    RAP_ERR_INTERNAL,    /* a bug: please report */
    RAP_ERR_NO_ROWS      /* an input holds no usable row (all rejected, or empty) */
} rap_status;

const char *rap_status_name(rap_status s);
/* Message of the last failure on this thread ("" if none). Never NULL. */
const char *rap_last_error(void);

/* True when built with CUDA and at least one GPU is usable. The reason when
 * not is written to why (may be NULL). Cheap after the first call. */
bool rap_gpu_available(char *why, size_t why_len);

/* ------------------------------------------------------- schema and batches */

#define RAP_CRITEO_DENSE 13
#define RAP_CRITEO_SPARSE 26

/* Raw columns of the input: int_0..int_{ND-1} are dense, cat_0..cat_{NS-1}
 * are sparse with at most ids_per_row ids in a row (1 for Criteo). */
typedef struct {
    int n_dense;     /* ND */
    int n_sparse;    /* NS */
    int ids_per_row; /* K */
} rap_schema;

rap_schema rap_schema_criteo(void);

/* A raw columnar batch in host memory. All arrays live in one block with a
 * layout fixed by (schema, B), so a device copy is one memcpy of the block.
 * Null dense rows hold 0 with valid 0; null sparse rows are empty lists
 * (off[i] == off[i+1]) with valid 0. */
typedef struct {
    rap_schema schema;
    int64_t cap;           /* B */
    int64_t rows;          /* rows held, <= B */
    float *label;          /* (B) 0 or 1 */
    float *dense;          /* (ND, B) column j at dense + j*B */
    uint8_t *dense_valid;  /* (ND, B) 1 present, 0 null */
    int64_t *sparse_off;   /* (NS, B+1) column j at sparse_off + j*(B+1) */
    int64_t *sparse_ids;   /* (NS, B*K) column j at sparse_ids + j*B*K */
    uint8_t *sparse_valid; /* (NS, B) */
    int64_t first_row;     /* index of the batch's first row among used rows */
    void *block;           /* the one allocation behind the arrays */
    size_t block_bytes;
    bool pinned;           /* block is page-locked (cudaHostAlloc) */
    bool device;           /* block is device memory (rows parsed on the GPU): only
                            * copies and kernels read it, never the host */
} rap_batch;

/* Allocates a batch of capacity cap. pinned asks for page-locked memory when
 * a GPU is available (silently plain memory otherwise). */
rap_status rap_batch_create(rap_batch *b, rap_schema s, int64_t cap, bool pinned);
void rap_batch_free(rap_batch *b);
/* Points the arrays of b into block (b->block_bytes bytes, rap_batch_bytes).
 * Used to mirror a host batch on the device. */
void rap_batch_view(rap_batch *b, rap_schema s, int64_t cap, void *block);
size_t rap_batch_bytes(rap_schema s, int64_t cap);
/* Appends rows [a, a+n) of src to dst (same schema) column by column, the
 * sparse offsets rebased. Requires dst->rows + n <= dst->cap. Cannot fail. */
void rap_batch_append(rap_batch *dst, const rap_batch *src, int64_t a, int64_t n);

/* ------------------------------------------------------------ input schema */

/* What the fields of an input line are (docs/SCHEMA.md): one column a
 * field, in file order, each with a kind and an encoding, read from a
 * schema file (`--schema FILE`) or built in (Criteo's 40 fields, also
 * shipped as plans/criteo.schema). The schema decides the batch's shape
 * (rap_input_schema_shape): dense column j of the batch is the j-th dense
 * field, sparse column j the j-th sparse field, K = max_list when a
 * sparse field is a list (multi-hot), else 1.
 *
 * What any reader must make of a row (the text reader here, a Parquet
 * reader alike): the label field's 0 or 1 into label; each dense field's
 * value (float32) or a null (0, valid 0) into its dense column; each
 * sparse field's ids into its sparse column: one id or none (a null) for
 * a plain field, 0..max_list ids for a list (an empty list is valid 1
 * with no ids, a null list valid 0 with no ids); ids of `str` fields by
 * rap_hash_str of their bytes, of `hex`/`dec` fields as rap_input_convert
 * says. A row that cannot be made so is rejected with its reason
 * (rap_reject_reason), counted, never trained on. */

typedef enum {
    RAP_COL_SKIP = 0, /* read past: never a fault, no column */
    RAP_COL_LABEL,    /* the batch's label (exactly one field) */
    RAP_COL_DENSE,    /* a dense column: float + valid */
    RAP_COL_SPARSE,   /* a sparse column: one int64 id or none, or a list of ids */
} rap_col_kind;

typedef enum {
    RAP_ENC_NONE = 0, /* skip */
    RAP_ENC_LABEL01,  /* label `01`: "0" or "1" */
    RAP_ENC_INT32,    /* dense `int32`: decimal in [-2^31, 2^31) (Criteo's integers) */
    RAP_ENC_HEX32,    /* sparse `hex32`: 1..8 hex digits, unsigned (Criteo's categories) */
    RAP_ENC_FLOAT,    /* dense `float`: a decimal number, rounded to float32 */
    RAP_ENC_HEX64,    /* sparse `hex`: 1..16 hex digits, the int64 of those 64 bits */
    RAP_ENC_DEC64,    /* sparse `dec`: a signed decimal in [-2^63, 2^63) */
    RAP_ENC_STR,      /* sparse `str`: any bytes, hashed by rap_hash_str */
    RAP_ENC_COUNT
} rap_col_enc;

#define RAP_SCHEMA_MAX_COLS 512   /* fields of a line at most */
#define RAP_SCHEMA_NAME 64        /* bytes of a column name, with its NUL */
#define RAP_MAX_LIST_DEFAULT 32   /* --max-list */
#define RAP_MAX_LIST_LIMIT 4096   /* --max-list at most */
#define RAP_NULL_TOKEN_MAX 31     /* bytes of --null-token at most */

typedef struct {
    char name[RAP_SCHEMA_NAME];
    rap_col_kind kind;
    rap_col_enc enc;
    char list_sep;    /* sparse: 0 one id (or none), else a list of ids separated by it */
    int col;          /* dense, sparse: index among the batch's columns of that kind; else -1 */
    int line;         /* line of the schema file (0: built in) */
} rap_schema_col;

typedef struct {
    char source[256];         /* the schema file, or "<built-in criteo>" */
    int n_cols;               /* NF: fields of a line */
    int n_dense, n_sparse;    /* ND, NS */
    int n_lists;              /* sparse columns that are lists */
    int label;                /* field of the label */
    rap_schema_col cols[RAP_SCHEMA_MAX_COLS]; /* (NF) in file order */
    /* the text format: defaults from load, set by the options after it */
    char delimiter;           /* '\t' (no quoting); any other: RFC 4180 quoting (CSV) */
    bool header;              /* every file's first line names the columns */
    char null_token[RAP_NULL_TOKEN_MAX + 1]; /* a list field holding exactly this is null */
    int max_list;             /* ids a list may hold (K) */
} rap_input_schema;

/* A schema file (docs/SCHEMA.md "The file"): one column a line, "name kind
 * [encoding] [list SEP]", '#' comments. The format is the default one
 * (tab, no header, "null", RAP_MAX_LIST_DEFAULT). On failure RAP_ERR_ARG
 * (RAP_ERR_IO) with "file:line:col: expected ..., got ..." and *out NULL. */
rap_status rap_input_schema_load(const char *path, rap_input_schema **out);
rap_status rap_input_schema_parse(const char *text, const char *source, rap_input_schema **out);
/* The built-in Criteo schema: label, int_0..int_12 (int32), cat_0..cat_25
 * (hex32), tab separated, no header. */
rap_status rap_input_schema_criteo(rap_input_schema **out);
void rap_input_schema_free(rap_input_schema *s);
/* The format fits the columns: a delimiter that is not '"', '\r', '\n' or
 * NUL; list separators other than '"' and, without quoting, the
 * delimiter; max_list in [1, RAP_MAX_LIST_LIMIT]; a non-empty null token
 * of printable bytes holding no delimiter, separator or quote. Else
 * RAP_ERR_ARG naming the option and the column. */
rap_status rap_input_schema_check(const rap_input_schema *s);
/* The batch shape: {ND, NS, n_lists ? max_list : 1}. Cannot fail. */
rap_schema rap_input_schema_shape(const rap_input_schema *s);
/* Whether s is Criteo's layout and format (then the reader takes its
 * Criteo parser: the same rows, rejects and messages). */
bool rap_input_schema_is_criteo(const rap_input_schema *s);
/* Field index of the column called name, or -1. */
int rap_input_schema_find(const rap_input_schema *s, const char *name);
/* Checks a header line (its '\n' left out; a '\r' before it and CSV
 * quotes are taken off) against the schema's names: RAP_OK, or
 * RAP_ERR_DATA "where: the header ..., the schema (file:line) ..." naming
 * the first difference. */
rap_status rap_input_schema_header(const rap_input_schema *s, const char *line, size_t len,
                                   const char *where);
/* Writes the schema file of s (its columns; the format is not part of
 * the file). Errors: RAP_ERR_IO. */
rap_status rap_input_schema_write(const rap_input_schema *s, FILE *f);
/* "01", "int32", "float", "hex32", "hex", "dec", "str" ("" for none). */
const char *rap_col_enc_name(rap_col_enc e);

/* The hash of a `str` id: 64-bit FNV-1a of the bytes (offset basis
 * 0xcbf29ce484222325, prime 0x100000001b3), the id its bits as int64.
 * rap_hash_str("foobar", 6) == 0x85944171f73967e8. Cannot fail. */
uint64_t rap_hash_str(const void *p, size_t n);

/* One value s[0, n) of encoding enc as the text reader converts it (no
 * quotes, not a list, not empty): *fv for label and dense encodings, *iv
 * for sparse ones. Returns -1, or the reject reason (RAP_REJ_LABEL,
 * _INT, _CAT, _RANGE). For readers of other formats holding values as
 * strings. */
int rap_input_convert(rap_col_enc enc, const char *s, size_t n, float *fv, int64_t *iv);

/* ------------------------------------------------------------------ reader */

typedef enum { RAP_BAD_SKIP = 0, RAP_BAD_FAIL = 1 } rap_bad_rows;

typedef enum {
    RAP_REJ_FIELDS = 0, /* wrong number of fields (a missing column) */
    RAP_REJ_LABEL,      /* label other than 0 or 1 */
    RAP_REJ_INT,        /* dense field not a number of its encoding */
    RAP_REJ_CAT,        /* sparse field (or an id of a list) not an id of its encoding */
    RAP_REJ_RANGE,      /* value out of range */
    RAP_REJ_LONG,       /* line longer than max_line */
    RAP_REJ_BINARY,     /* byte that is not printable text */
    RAP_REJ_QUOTE,      /* CSV quoting broken: a quote not closed on its line, or a
                         * quote inside a field that is not wholly quoted */
    RAP_REJ_LIST,       /* a list of more ids than the schema's max_list */
    RAP_REJ_COUNT
} rap_reject_reason;

const char *rap_reject_reason_name(rap_reject_reason r);

/* The order of rows when several files of a directory are read at once
 * (inflate_threads > 1; docs/INPUT.md). */
typedef enum {
    RAP_INTERLEAVE_FILE = 0, /* file after file, in name order: as with one thread */
    RAP_INTERLEAVE_BATCH,    /* turns of interleave_rows rows, file i mod N, ... */
} rap_interleave;

/* Who parses the text (docs/INPUT.md "Parsing on the GPU"): the host's
 * parser threads, or the GPU's parse kernels fed with raw line chunks (rows
 * then stay in device memory), or the CPU reference of those kernels in
 * their place (the same path on the host: CI and the CPU backend). AUTO is
 * the CPU parser for a reader; the row feed resolves it (rowfeed.h). */
typedef enum {
    RAP_PARSE_AUTO = 0,
    RAP_PARSE_CPU,           /* rap_parse_chunk on parser threads */
    RAP_PARSE_GPU,           /* the GPU parse kernels (parse_gpu.h) */
    RAP_PARSE_REF,           /* their CPU reference (parse_ref.h) */
} rap_parse_kind;

const char *rap_parse_kind_name(rap_parse_kind k);

typedef struct {
    const char *input;      /* file (plain or gzip), directory, or "-" */
    int threads;            /* every thread the reader starts: lanes + parsers; 0 = all cores */
    rap_bad_rows bad_rows;
    bool follow;            /* wait for appended rows and new files */
    double idle_timeout_s;  /* follow: end after this long with no data; 0 never */
    int64_t max_line;       /* longer lines are rejected (bytes) */
    int64_t max_rows;       /* stop after reading this many rows; 0 = all */
    int inflate_threads;    /* files of a directory read and inflated at once, each by
                             * its own thread (a lane); 0 or 1: one (docs/INPUT.md) */
    rap_interleave interleave; /* the order of their rows */
    int64_t interleave_rows;   /* RAP_INTERLEAVE_BATCH: good rows per turn (>= 1) */
    const rap_input_schema *schema; /* the fields of a line and their format; NULL:
                                     * Criteo's (built in). Copied by rap_reader_open */
    bool track_positions;      /* keep each row's data position (src/data/position.h);
                                * one lane only */
    const struct rap_data_position *start; /* start there (checked; copied at open);
                                * NULL: the input's start; one lane only */
    rap_parse_kind parse;      /* who parses; GPU: rap_reader_next fills batches whose
                                * arrays are device memory (rap_batch.device) */
    int parse_share_ranks;     /* ranks reading the same input that share its parse
                                * (gpu, reference; docs/INPUT.md "Ranks share the
                                * parse"): each parses its piece of every chunk. Not
                                * with follow or with several lanes interleaved by
                                * batch; 0 or 1: every line parsed here. Sizes count
                                * it (rap_reader_parse_bytes) */
    const struct rap_parse_xchg *parse_xchg; /* (n_parse_xchg) ... the exchange of each
                                * parser thread with the same thread of the other ranks
                                * (over a comm of its own; NCCL for gpu); NULL: not shared */
    int n_parse_xchg;
} rap_reader_config;

rap_reader_config rap_reader_defaults(void);
/* The shape of the batches rap_reader_next fills for cfg: the schema's
 * (rap_input_schema_shape), Criteo's without one. Cannot fail. */
rap_schema rap_reader_shape(const rap_reader_config *cfg);

/* How the reader splits its thread budget (docs/INPUT.md): `lanes` threads
 * each read, inflate and cut one file at a time (min(inflate_threads,
 * files) for a directory without follow, else 1) and `parsers` =
 * max(1, budget - lanes) parse (parse gpu: at most 2, feeding the GPU). budget is threads, or the cores for 0; the
 * reader's smallest form is lanes + 1 threads, so total can pass a budget
 * below that (over says by how much). Looks at the input (a directory's
 * file count); errors as rap_reader_open's for a missing input. */
typedef struct {
    int lanes, parsers, total, budget, over;
    int64_t files;          /* files of the directory (1 for a file or stdin) */
    rap_parse_kind parse;   /* cfg's: gpu's "parsers" only feed the GPU (at most 2) */
} rap_reader_threads;
rap_status rap_reader_plan_threads(const rap_reader_config *cfg, rap_reader_threads *out);
/* The bytes a reader of cfg allocates, from the sizing rap_reader_open
 * uses: *chunks, every lane's chunk slots and carry buffer (fixed at
 * open); *parsed, the parsed rows of those slots, which grow with the
 * rows a chunk holds: estimated at 256 bytes of text a row (real Criteo
 * lines are 150 to 400); 0 for the gpu and reference parsers, whose rows
 * are in staging batches (rap_reader_parse_bytes). Looks at the input as
 * rap_reader_plan_threads does; an input that is not there (yet: rows
 * generated later) is sized as one file. Can't fail. */
rap_status rap_reader_bytes(const rap_reader_config *cfg, size_t *chunks, size_t *parsed);
/* The bytes its parsing allocates besides, for cfg's parse as given (auto
 * and cpu: 0; resolve auto first): *device (gpu: the parser threads' GPU
 * parsers and every slot's staging batch, sized for the worst case of
 * 40-byte lines), *pinned (gpu: each parser thread's copy of the text, its
 * offsets and reject list) and *host (reference: the same in ordinary
 * memory). Sized as rap_reader_bytes. Can't fail. */
rap_status rap_reader_parse_bytes(const rap_reader_config *cfg, size_t *device, size_t *pinned,
                                  size_t *host);
/* One line for the start-up settings: "L reading+inflating (one file each),
 * P parsing = T threads (...)". Cannot fail. */
void rap_reader_threads_line(const rap_reader_threads *t, char *out, size_t n);

#define RAP_REJ_EXAMPLES 5
typedef struct {
    int64_t rows_read;     /* == rows_used + rows_rejected, always */
    int64_t rows_used;
    int64_t rows_rejected;
    int64_t bytes_read;    /* uncompressed bytes */
    int files;             /* files opened so far */
    int64_t rejected[RAP_REJ_COUNT];
    /* "path:line" of the first few rejects of each reason */
    char example[RAP_REJ_COUNT][RAP_REJ_EXAMPLES][256];
    /* what was wrong with each of them, naming the field and its value
     * ("expected label 0 or 1, got \"2\""); "" where not known */
    char detail[RAP_REJ_COUNT][RAP_REJ_EXAMPLES][160];
    int parse_share_ranks;    /* ranks sharing the parse (0: not shared) */
    int64_t lines_parsed_here; /* lines this rank's parser threads parsed
                               * themselves (shared: about rows_read / ranks) */
} rap_reader_stats;

typedef struct rap_reader rap_reader;

rap_status rap_reader_open(const rap_reader_config *cfg, rap_reader **out);
/* Fills b (its shape rap_reader_shape's) with the next rows in input order, up to
 * b->cap. At the end of the data, returns RAP_OK with b->rows == 0. With
 * bad_rows = fail, the first malformed row gives RAP_ERR_DATA and the message
 * "path:line: expected ...". Blocks while following a growing input. */
rap_status rap_reader_next(rap_reader *r, rap_batch *b);
/* Asks the reader to end: safe from any thread and from a signal handler.
 * The next call of rap_reader_next returns rows already parsed, then end. */
void rap_reader_stop(rap_reader *r);
void rap_reader_get_stats(const rap_reader *r, rap_reader_stats *st);
/* Prints the accounting: rows read = used + rejected, then each reason
 * with its first places and what was wrong (field and value) at the first
 * few of them. */
void rap_reader_print_stats(const rap_reader_stats *st, FILE *f);
/* "path:line: what was wrong" of the first example of the first reason
 * with rejects, into out (n bytes); "" when nothing was rejected. Cannot
 * fail. */
void rap_reader_first_reject(const rap_reader_stats *st, char *out, size_t n);
void rap_reader_close(rap_reader *r);

/* --------------------------------------------------------------- generator */

typedef struct {
    int64_t rows;
    uint64_t seed;
    const char *out;          /* path ("-" = stdout); a .gz name writes gzip */
    int64_t card[RAP_CRITEO_SPARSE]; /* ids of cat_j are drawn from card[j] values */
    int threads;              /* 0 = all cores; output does not depend on it */
    /* rows of a schema instead of Criteo's (docs/GENERATOR.md "Any schema") */
    const rap_input_schema *schema; /* NULL: Criteo's 40 fields (card above) */
    const int64_t *schema_card; /* (NS) ids of sparse column j drawn from schema_card[j]
                                 * values; NULL: RAP_GEN_SCHEMA_CARD each */
    double list_mean;         /* lists: mean length (geometric, at most max_list); 0: 3 */
} rap_gen_config;

#define RAP_GEN_SCHEMA_CARD 10000

typedef struct {
    int64_t rows;
    int64_t positives;
    int64_t bytes;            /* uncompressed bytes written */
    double teacher_auc;       /* AUC of the hidden teacher on the rows written */
} rap_gen_result;

/* spec: "kaggle", "1tb", or 26 comma-separated positive integers. */
rap_status rap_gen_cardinalities(const char *spec, int64_t card[RAP_CRITEO_SPARSE]);
/* For a schema of n sparse columns: n comma-separated positive integers,
 * or one for all of them. */
rap_status rap_gen_cardinalities_n(const char *spec, int n, int64_t *card);
rap_status rap_gen_write(const rap_gen_config *cfg, rap_gen_result *res);

/* Exact ROC AUC (sort based; tied scores count one half). label is 0/1.
 * Returns NaN when only one class is present. */
double rap_auc(const float *score, const float *label, int64_t n);

/* -------------------------------------------------------------------- plan */

typedef enum { RAP_DENSE = 0, RAP_SPARSE = 1, RAP_VECTOR = 2 } rap_kind;

typedef enum {
    RAP_OP_INPUT = 0, /* a raw column */
    RAP_OP_FILL_NULL,
    RAP_OP_CAST,
    RAP_OP_LOGIT,
    RAP_OP_BOXCOX,
    RAP_OP_LOG,
    RAP_OP_ADD,
    RAP_OP_MUL,
    RAP_OP_ONEHOT,
    RAP_OP_BUCKETIZE,
    RAP_OP_SIGRID_HASH,
    RAP_OP_FIRSTX,
    RAP_OP_CLAMP,
    RAP_OP_NGRAM,
    RAP_OP_MAPID,
    RAP_OP_COUNT
} rap_op_type;

const char *rap_op_name(rap_op_type t);

/* How a sparse output's offsets are obtained. */
typedef enum {
    RAP_OFF_NONE = 0, /* not sparse */
    RAP_OFF_SAME,     /* identical to the input's: shared, not computed */
    RAP_OFF_ARANGE,   /* 0,1,2,..: every row holds exactly one id */
    RAP_OFF_COMPUTED  /* list lengths change: lengths, prefix sum, then write */
} rap_off_mode;

/* One node of the plan's DAG: a raw input column or one op applied to one
 * input node (every op is unary; its other arguments are constants). */
typedef struct {
    rap_op_type op;
    int input;          /* node index of the input; -1 for RAP_OP_INPUT */
    int raw;            /* INPUT: raw column index (dense or sparse per kind) */
    rap_kind in_kind;   /* kind of the input (INPUT: == kind) */
    rap_kind kind;      /* kind of the output */
    int width;          /* VECTOR: W; 1 otherwise */
    /* parameters, as written (see docs/OPS.md):
     *   FILL_NULL f[0]=v; CAST i[0]=target kind (RAP_DENSE float32 /
     *   RAP_SPARSE int64); LOGIT f[0]=eps; BOXCOX f[0]=lambda; ADD/MUL
     *   f[0]=c; ONEHOT f[0]=low f[1]=high i[0]=C; SIGRID_HASH i[0]=salt
     *   i[1]=max; FIRSTX i[0]=k; CLAMP f[0]=lo f[1]=hi; NGRAM i[0]=n */
    double f[2];
    int64_t i[2];
    double *borders;    /* BUCKETIZE: (n_aux) non-decreasing, owned */
    int64_t *map;       /* MAPID: (n_aux), owned */
    int64_t n_aux;
    /* static facts about the output, derived when the node is added */
    bool nullable;      /* may hold null rows */
    bool len1;          /* sparse: every non-null row holds exactly one id */
    int64_t ids_per_row; /* sparse: bound on ids per row (capacity) */
    bool bounded;       /* sparse: every id lies in [lo, hi] */
    int64_t lo, hi;
    rap_off_mode off;
    double mean_ids;    /* sparse INPUT: mean ids a row measured on the data (set by
                         * re-planning while training, never by the parser); 0:
                         * unknown, the cost model takes the bound ids_per_row */
    int level;          /* 0 for inputs, else 1 + the input's level */
    int line, col;      /* position in the plan source (0 for inputs) */
    bool live;          /* some output column depends on it */
} rap_node;

typedef struct {
    char name[64];
    int node;
} rap_column_ref;

typedef struct {
    rap_schema schema;
    char source[256];     /* plan file name, for messages */
    rap_node *nodes;      /* (n_nodes) topological: inputs first, then ops */
    int n_nodes;
    int cap_nodes;
    rap_column_ref *cols; /* (n_cols) columns after the plan, in frame order */
    int n_cols;
    int cap_cols;
} rap_plan;

/* Parses a plan file (plan language: docs/PLAN_LANGUAGE.md). Nothing is
 * executed. On failure: RAP_ERR_PLAN (or RAP_ERR_IO) and the message
 * "file:line:col: what was expected". */
rap_status rap_plan_load(const char *path, rap_schema schema, rap_plan **out);
rap_status rap_plan_parse(const char *text, const char *source_name,
                          rap_schema schema, rap_plan **out);
/* The same over an input schema: the raw columns are the schema's dense
 * and sparse columns by their names (a plain sparse column holds one id
 * a row, a list up to max_list), the plan's shape the schema's. A plan
 * naming a column the schema lacks is refused before any data is read:
 * "plan:line:col: undefined column "x" (the schema FILE has no column
 * "x"; ...)". */
rap_status rap_plan_load_schema(const char *path, const rap_input_schema *s, rap_plan **out);
rap_status rap_plan_parse_schema(const char *text, const char *source_name,
                                 const rap_input_schema *s, rap_plan **out);
void rap_plan_free(rap_plan *p);

/* Building plans programmatically (the parser uses these too). */
/* A plan holding the raw columns only: label is implicit; int_j, cat_j. */
rap_status rap_plan_create(rap_schema schema, const char *source_name, rap_plan **out);
/* The same with the input schema's column names and per-column facts. */
rap_status rap_plan_create_schema(const rap_input_schema *s, const char *source_name,
                                  rap_plan **out);
/* Appends op node `n` (op, input, params, line/col set by the caller; facts
 * are derived here) after checking the input kind and preconditions of
 * docs/OPS.md. Returns the new node's index in *idx. On a violated precondition:
 * RAP_ERR_PLAN with "source:line:col: ...". */
rap_status rap_plan_add_op(rap_plan *p, const rap_node *n, int *idx);
/* Binds column `name` to node (new column appended at the end of the frame,
 * an existing one keeps its position). */
rap_status rap_plan_assign(rap_plan *p, const char *name, int node);
/* Removes a column from the frame (del df["x"]). */
rap_status rap_plan_drop(rap_plan *p, const char *name);
/* Frame index of column `name`, or -1. */
int rap_plan_find(const rap_plan *p, const char *name);
/* Marks live nodes; call after the last assignment. Returns number of ops
 * (non-input nodes) that are live. */
int rap_plan_finish(rap_plan *p);
/* Number of live op nodes. */
int rap_plan_n_ops(const rap_plan *p);

/* ------------------------------------------------------------------ fusion */

/* A kernel: live nodes of one op type (and one variant) at one dependency
 * level, run by one launch over a table of descriptors. A row kernel
 * (group != NULL) holds nodes of any op types whose outputs are row-local
 * (no computed offsets) in groups: each group is a tree of nodes reading
 * one another in order, nodes[group[g] .. group[g+1]), run row by row by
 * one thread (vertical fusion, docs/EXECUTOR.md "Row kernels"). */
typedef struct {
    rap_op_type op; /* RAP_OP_INPUT for a row kernel */
    int variant;   /* op-specific kernel variant (e.g. dense vs sparse input); 0 for rows */
    int level;
    int *nodes;    /* (n) node indices, owned */
    int n;
    int *group;    /* row kernel: (n_groups + 1) starts in nodes, owned; else NULL */
    int n_groups;
} rap_kernel;

typedef struct {
    rap_kernel *kernels; /* (n) in an order that respects dependencies */
    int n;
} rap_fusion;

/* Greedy fusion: ops of the same type and variant in the same level form one
 * kernel. */
rap_status rap_fuse_levels(const rap_plan *p, rap_fusion *f);
/* No fusion: one kernel per op. */
rap_status rap_fuse_none(const rap_plan *p, rap_fusion *f);
/* Vertical fusion on top of fusion `in`: every live op whose output is
 * row-local (offsets not computed) joins the group of its input when that
 * is row-local too and the group has fewer than max_stages nodes; groups
 * whose roots' inputs are ready at the same point form row kernels of at
 * most max_descs nodes (>= max_stages), the other kernels of `in` stay as
 * they are. Kernels come out in dependency order (longest path). *out is
 * a new fusion. */
rap_status rap_fuse_rows(const rap_plan *p, const rap_fusion *in, int max_stages, int max_descs,
                        rap_fusion *out);
/* The built-in fusions: by levels, none, by levels then rows
 * (rap_fuse_rows with RAP_ROW_STAGES, RAP_ROW_DESCS), or auto: rows when
 * the fusion by levels has at most RAP_ROW_AUTO_KERNELS kernels (small,
 * launch-bound plans gain from row kernels, larger ones lose: measured in
 * bench/RESULTS.md), else levels. */
typedef enum {
    RAP_FUSE_LEVELS = 0,
    RAP_FUSE_NONE = 1,
    RAP_FUSE_ROWS = 2,
    RAP_FUSE_AUTO = 3
} rap_fuse_kind;
#define RAP_ROW_STAGES 8
#define RAP_ROW_DESCS 128
#define RAP_ROW_AUTO_KERNELS 8
rap_status rap_fuse(const rap_plan *p, rap_fuse_kind kind, rap_fusion *f);
/* Whether node `node`'s output is row-local: row r of the output depends
 * on row r of the input only and lies where row r alone says (dense,
 * vector, or sparse with SAME or ARANGE offsets). */
bool rap_node_row_local(const rap_plan *p, int node);
/* The group of a row kernel holding its descriptor/node j (0 when k is
 * not a row kernel: one desc is one unit). */
int rap_kernel_group_of(const rap_kernel *k, int j);
/* The op name of a kernel ("rows" for a row kernel). */
const char *rap_kernel_op_name(const rap_kernel *k);
/* Whether nodes a and b are in one group of row kernel k, a before b. */
bool rap_fusion_same_group(const rap_fusion *f, int k, int a, int b);
/* Kernel k's group table is well formed (none for a one-type kernel;
 * else starting at 0, ending at n, no group empty). RAP_ERR_PLAN if not. */
rap_status rap_fusion_check_groups(const rap_kernel *kn, int k);
/* Whether op node `node` gives back its input as it is: firstx(k) on lists
 * of at most k ids (its SAME offsets: the ids stay where they are). The
 * executor lets its output be the input's buffers and launches nothing
 * for a kernel of identities (docs/EXECUTOR.md). */
bool rap_node_is_identity(const rap_plan *p, int node);
/* Whether every node of kernel k is an identity: it launches nothing. */
bool rap_kernel_is_identity(const rap_plan *p, const rap_kernel *k);
/* Whether `auto` row fusion applies to fusion f: at most
 * RAP_ROW_AUTO_KERNELS kernels (small, launch-bound plans). */
bool rap_fuse_rows_pays(const rap_fusion *f);
/* Kernel variant of a node: nodes fuse only with equal (op, variant). */
int rap_node_variant(const rap_plan *p, int node);
void rap_fusion_free(rap_fusion *f);

/* -------------------------------------------------------------- executor */

typedef enum { RAP_CPU = 0, RAP_GPU = 1 } rap_device;

typedef struct {
    rap_device device;
    int64_t max_rows;   /* B: largest batch that will be loaded */
    int threads;        /* CPU: worker threads, 0 = all cores */
    void *stream;       /* GPU: cudaStream_t to run on; NULL = the default */
} rap_prep_config;

typedef struct rap_prep rap_prep;

/* Compiles the plan for one device: allocates every buffer (for max_rows)
 * and descriptor table now, so loading and running allocate nothing. */
rap_status rap_prep_create(const rap_plan *plan, const rap_fusion *fusion,
                           const rap_prep_config *cfg, rap_prep **out);
void rap_prep_free(rap_prep *p);
/* The executor's environment knob, checked (rap_prep_create checks it too):
 * RAP_PREP_ROWS = once (unset: the default; a row kernel chooses each
 * desc's op once for its rows, sigrid_hash reduces by its table size's
 * reciprocal) or each (for A/B runs: the executor before 2026-12-04, the
 * op chosen again for every row and `%`). RAP_ERR_ARG naming the variable
 * and its values for anything else. */
rap_status rap_prep_knobs_check(void);
/* The bytes of the buffers rap_prep_create would allocate for cfg (its
 * arena: host memory on the CPU, device memory on the GPU), from the same
 * sizing pass and after the same checks; nothing but small host tables is
 * allocated (and freed again). A plan too large to represent gives a huge
 * value (more than any device holds), not an error. */
rap_status rap_prep_bytes(const rap_plan *plan, const rap_fusion *fusion,
                          const rap_prep_config *cfg, double *bytes);
/* Copies a host batch into the executor's input buffers (GPU: asynchronous
 * on the stream; b must stay unchanged until rap_prep_sync). */
rap_status rap_prep_load(rap_prep *p, const rap_batch *b);
/* Runs every kernel in order. */
rap_status rap_prep_run(rap_prep *p);
/* Runs part of kernel k: descriptors [d0, d1) over rows [r0, r1) of the
 * loaded batch (r1 clipped to its rows). Pieces of a kernel covering its
 * rows, run in any order, reproduce the whole kernel (the first piece of a
 * batch makes a COMPUTED kernel's offsets). stream NULL = the executor's. */
rap_status rap_prep_run_kernel(rap_prep *p, int k, int d0, int d1,
                               int64_t r0, int64_t r1, void *stream);
rap_status rap_prep_sync(rap_prep *p);
/* Packing in place: asks the row kernels to also write output columns
 * cols[0..n) (frame indices of dense or vector columns) side by side into
 * dst (max_rows, stride) as they compute them: column i at dst + the sum of
 * the earlier columns' widths (dst on the executor's device). *in_place is
 * true when every column is computed by a row kernel and no node feeds two
 * of them: then every run writes dst, and the caller need not pack.
 * Otherwise nothing changes and *in_place is false. GPU: uploads the
 * descriptor table (call it before the training loop). */
rap_status rap_prep_pack_dense(rap_prep *p, const int *cols, int n, float *dst, int stride,
                               bool *in_place);
int rap_prep_n_kernels(const rap_prep *p);
/* Kernel launches (GPU) or kernel calls (CPU) since creation. */
int64_t rap_prep_launches(const rap_prep *p);

/* A column after the plan, as pointers into the executor's buffers (device
 * pointers on the GPU). Valid until the next load. */
typedef struct {
    rap_kind kind;
    int width;             /* W for vectors, else 1 */
    int64_t rows;
    const float *val;      /* dense (B) or vector (B, W) */
    const int64_t *off;    /* sparse (B+1) */
    const int64_t *ids;    /* sparse (off[rows]) */
    const uint8_t *valid;  /* (B) or NULL when no row can be null */
    bool bounded;          /* sparse: ids in [lo, hi] */
    int64_t lo, hi;
} rap_col_view;

rap_status rap_prep_column(const rap_prep *p, int col, rap_col_view *v);
const float *rap_prep_label(const rap_prep *p); /* (rows) */

/* A column copied to host memory (for output, tests and the CPU path). */
typedef struct {
    rap_kind kind;
    int width;
    int64_t rows;
    float *val;       /* (rows*width) */
    int64_t *off;     /* (rows+1) */
    int64_t *ids;     /* (off[rows]) */
    uint8_t *valid;   /* (rows): always present here, 1 when non-nullable */
} rap_host_column;

rap_status rap_prep_fetch(const rap_prep *p, int col, rap_host_column *out);
void rap_host_column_free(rap_host_column *c);

#ifdef __cplusplus
}
#endif
#endif /* RAP_H */
