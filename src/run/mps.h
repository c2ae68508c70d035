/*
 * mps.h -- the `mps` preprocessing mode: preprocessing in a second process
 * (`rap prep-server`, a hidden subcommand) that shares the GPU with the
 * trainer, through MPS when a daemon runs; ready tensors are handed to the
 * trainer by CUDA IPC (docs/MPS.md).
 *
 * Trainer side:
 *
 *   rap_mps_daemon_start();          // optional (--mps-start), BEFORE any CUDA call
 *   rap_mps_client *c;
 *   rap_mps_client_create(&cfg, &c);  // allocates S slots, starts the server
 *   int slot; rap_model_batch mb; int64_t rows;
 *   while ((st = rap_mps_client_next(c, stream, &slot, &mb, &rows)) == RAP_OK && slot >= 0) {
 *       ... train on mb (device pointers into slot `slot`) on `stream` ...
 *       rap_mps_client_release(c, slot, stream);
 *   }
 *   // st != RAP_OK: the server's error (its message), after the good batches
 *   rap_mps_client_get_stats(c, &stats);   // the server's reader accounting
 *   rap_mps_client_free(c);           // stops and reaps the server
 *
 * The slots live in the trainer's memory: S model-ready batches, each
 * dense (B, ND) float, labels (B), and per table t offsets (B+1) and ids
 * (B * K_t) int64 (K_t: the plan's bound on ids per row of the column).
 * Per slot two interprocess events: ready[s] (recorded by the server after
 * writing the slot) and free[s] (recorded by the trainer after its last use).
 * Neither side waits on the host for the other's GPU work.
 *
 * Built without CUDA everything compiles; client_create returns
 * RAP_ERR_NO_GPU. The message codec and the daemon control work anywhere.
 */
#ifndef RAP_RUN_MPS_H
#define RAP_RUN_MPS_H

#include "model/model.h"
#include "rap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ MPS daemon */

/* Starts a private MPS control daemon: makes a pipe and a log directory
 * (mkdtemp under $TMPDIR or /tmp), exports CUDA_MPS_PIPE_DIRECTORY and
 * CUDA_MPS_LOG_DIRECTORY for this process and its children, and runs
 * `nvidia-cuda-mps-control -d` (the program named by $RAP_MPS_CONTROL when
 * set: tests use a fake). Must be called before the first CUDA call of the
 * process, or the trainer is not an MPS client. Registers an atexit hook
 * and a guardian process that stop the daemon when this process ends in any
 * way. Calling it again while started does nothing. On failure (program
 * missing or failing) nothing is left behind: RAP_ERR_IO with the reason.
 * Never changes the GPU's compute mode or settings. */
rap_status rap_mps_daemon_start(void);
/* Stops what rap_mps_daemon_start started: `echo quit |
 * nvidia-cuda-mps-control` with the same environment (waiting at most a
 * few seconds), removes both directories, restores the environment.
 * Idempotent; does nothing if nothing was started (or in a forked child).
 * Call it after the GPU work is done (the atexit hook does). */
void rap_mps_daemon_stop(void);
/* True while a daemon started by rap_mps_daemon_start runs. */
bool rap_mps_daemon_started(void);
/* How the two processes will share the GPU, one line into buf: "MPS daemon
 * started by rap (...)", "an MPS daemon already running (...)" or "no MPS
 * daemon: the trainer and the preprocessing server time-share the GPU".
 * Returns buf. */
const char *rap_mps_describe(char *buf, size_t n);

/* ------------------------------------------------------------ client */

#define RAP_MPS_MAX_SLOTS 16
#define RAP_MPS_PATH 1024
#define RAP_MPS_TEXT 1024
#define RAP_MPS_HANDLE 64 /* bytes of a cudaIpcMemHandle_t / cudaIpcEventHandle_t */

typedef struct {
    const char *plan;          /* plan file, or "default" (the plan built into rap) */
    rap_reader_config reader;  /* input, threads, bad_rows, follow, max_rows ... */
    int64_t batch_rows;        /* B >= 1 */
    int n_slots;               /* S in [2, RAP_MPS_MAX_SLOTS] */
    rap_schema schema;         /* of the raw input (Criteo's) */
    /* the model's input shape, checked against the plan by the server */
    int n_dense;               /* ND */
    int n_tables;              /* T */
    const int64_t *table_rows; /* (T) R_t */
    const char *exe;           /* the rap binary to run as the server; NULL = /proc/self/exe */
    double stop_timeout_s;     /* free: wait this long for the server to exit before
                                  SIGTERM, then as long before SIGKILL; 0 = 5 */
} rap_mps_config;

typedef struct {
    int64_t batches;           /* batches handed to the trainer */
    int64_t rows;              /* rows in them */
    bool ended;                /* the server's end (or error) was received */
    rap_status error;          /* the server's error, RAP_OK if none */
    char message[RAP_MPS_TEXT];/* its message */
    int64_t server_batches;    /* batches the server produced (== batches at the end) */
    int64_t server_rows;
    rap_reader_stats reader;   /* the server's reader accounting (at the end) */
} rap_mps_stats;

typedef struct rap_mps_client rap_mps_client;

/* Starts the server (fork + exec of cfg->exe with `prep-server --fd N`),
 * sends it the configuration, allocates the S slots and 2S events on the
 * current GPU, exports them and waits until the server has opened them and
 * built its executor. Logs one line saying how the GPU is shared. On
 * failure the server is stopped and nothing is left: the server's message
 * (plan error, shape mismatch, missing input) or the local one. */
rap_status rap_mps_client_create(const rap_mps_config *cfg, rap_mps_client **out);
/* Waits for the next batch: on RAP_OK with *slot >= 0, *rows > 0 and mb
 * holds device pointers into the slot, valid until it is released; the
 * training stream (a cudaStream_t; NULL = the default stream) waits on the
 * slot's ready event (no host wait). At the end of the data: RAP_OK with
 * *slot = -1, *rows = 0. A server error (bad row with bad_rows=fail, I/O,
 * CUDA), or the server's death, returns that status with its message, after
 * every good batch before it. RAP_ERR_ARG when all S slots are held. */
rap_status rap_mps_client_next(rap_mps_client *c, void *train_stream, int *slot,
                               rap_model_batch *mb, int64_t *rows);
/* Gives slot back: records its free event on train_stream (after the work
 * queued there that reads the slot) and tells the server. RAP_ERR_ARG for a
 * slot not held. */
rap_status rap_mps_client_release(rap_mps_client *c, int slot, void *train_stream);
void rap_mps_client_get_stats(const rap_mps_client *c, rap_mps_stats *st);
/* The server's process id (0 once reaped). */
int rap_mps_client_pid(const rap_mps_client *c);
/* Stops the server (closes the socket; SIGTERM, then SIGKILL after the
 * timeout), reaps it, waits for the GPU, frees the slots and events.
 * NULL accepted. */
void rap_mps_client_free(rap_mps_client *c);

/* ------------------------------------------------------------ server */

typedef rap_status (*rap_mps_plan_loader)(const char *spec, rap_plan **out);

/* The body of `rap prep-server --fd FD`: serves one client on the socket
 * fd until the end of the data, an error (sent to the client), or the
 * client's hang-up. load resolves the plan spec ("default"). Returns RAP_OK
 * when the client was served, was told of the error (it reports it), or
 * went away -- a hang-up at any point (before CONFIG, after SHAPE instead
 * of HANDLES, during the batches, after END) is a normal end; an error
 * only when nothing could be told (a broken socket, a first message that
 * is not CONFIG, another message out of order). Without CUDA (or a GPU) it
 * answers the CONFIG with RAP_ERR_NO_GPU. */
rap_status rap_mps_server_run(int fd, rap_mps_plan_loader load);
/* Asks a running server to stop (SIGTERM handler): async-signal-safe. */
void rap_mps_server_stop(void);

/* ------------------------------------------------------------ protocol */

typedef enum {
    RAP_MPS_CONFIG = 1, /* client -> server: plan, reader, B, S, schema, model shape */
    RAP_MPS_SHAPE,      /* server -> client: status; ids capacity K_t per table */
    RAP_MPS_HANDLES,    /* client -> server: slot memory and event handles */
    RAP_MPS_READY,      /* server -> client: status (opened, executor built) */
    RAP_MPS_BATCH,      /* server -> client: slot s holds batch seq with rows rows */
    RAP_MPS_RELEASE,    /* client -> server: slot s is free (free[s] recorded) */
    RAP_MPS_END,        /* server -> client: status, message, accounting */
    RAP_MPS_MSG_COUNT
} rap_mps_msg_type;

/* Every field of every message; which are sent depends on type. */
typedef struct {
    rap_mps_msg_type type;
    int32_t version;                 /* CONFIG */
    int32_t status;                  /* SHAPE, READY, END: a rap_status */
    char message[RAP_MPS_TEXT];      /* SHAPE, READY, END */
    /* CONFIG */
    char plan[RAP_MPS_PATH];
    char input[RAP_MPS_PATH];
    int32_t threads, bad_rows, follow;
    double idle_timeout_s;
    int64_t max_line, max_rows;
    int64_t batch_rows;
    int32_t n_slots;
    rap_schema schema;
    int32_t n_dense, n_tables;
    int32_t device, log_level;
    int64_t table_rows[RAP_MAX_TABLES]; /* (n_tables) CONFIG */
    int64_t ids_cap[RAP_MAX_TABLES];    /* (n_tables) SHAPE */
    /* HANDLES */
    uint8_t mem_handle[RAP_MPS_HANDLE];
    uint64_t total_bytes, slot_bytes;
    uint8_t ready_handle[RAP_MPS_MAX_SLOTS][RAP_MPS_HANDLE]; /* (n_slots) */
    uint8_t free_handle[RAP_MPS_MAX_SLOTS][RAP_MPS_HANDLE];  /* (n_slots) */
    /* BATCH, RELEASE */
    int32_t slot;
    int64_t seq, rows;
    /* END */
    int64_t batches;                 /* also rows: totals */
    rap_reader_stats stats;
} rap_mps_msg;

#define RAP_MPS_VERSION 1
#define RAP_MPS_MAX_FRAME (1u << 20)

/* Encodes m into buf (cap bytes): a 12-byte header (magic, type, payload
 * length) then the payload. *len gets the frame's size. RAP_ERR_ARG on a
 * bad type or count, or when cap is too small. */
rap_status rap_mps_encode(const rap_mps_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* Decodes one whole frame (len bytes) into m. RAP_ERR_DATA naming what is
 * wrong: magic, type, length, a count out of range, a string without its
 * end, bytes left over. */
rap_status rap_mps_decode(const uint8_t *buf, size_t len, rap_mps_msg *m);
/* Sends / receives one message on a stream socket (all bytes; EINTR
 * retried; no SIGPIPE). recv: RAP_ERR_IO "closed" on a clean end of
 * stream before a header (*closed set when closed is not NULL). */
rap_status rap_mps_send(int fd, const rap_mps_msg *m);
rap_status rap_mps_recv(int fd, rap_mps_msg *m, bool *closed);

/* Byte layout of one slot (both sides compute it from the same numbers):
 * offsets from the slot's start, 256-byte aligned. off/ids: (T) arrays. */
typedef struct {
    size_t dense, label;
    size_t *off, *ids; /* (T) */
    size_t bytes;      /* of one slot */
} rap_mps_layout;
rap_status rap_mps_layout_make(int64_t B, int nd, int nt, const int64_t *ids_cap,
                               rap_mps_layout *l);
void rap_mps_layout_free(rap_mps_layout *l);

#ifdef __cplusplus
}
#endif
#endif /* RAP_RUN_MPS_H */
