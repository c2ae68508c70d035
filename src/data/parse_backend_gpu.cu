/* parse_backend_gpu.cu -- the gpu entry of the parse backends' table
 * (parse_backend.h) and device batches: a parser thread's pinned text and
 * offsets, its GPU parser (parse_gpu.h) on its own stream, the chunk's
 * parse with only the accounting coming back; a device batch's append
 * kernel. Without nvcc this file is compiled as C and every entry says
 * RAP_ERR_NO_GPU. */
#include "data/parse_backend.h"

#include "core/core.h"
#include "data/parse_backend_internal.h"
#include "data/parse_gpu.h"

#include <stdlib.h>
#include <string.h>

#ifdef __CUDACC__
#include "core/cuda_util.h"
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

/* ---- device batches */

extern "C" rap_status rap_batch_create_device(rap_batch *b, rap_schema s, int64_t cap)
{
    memset(b, 0, sizeof *b);
    if (cap <= 0 || s.n_dense < 0 || s.n_sparse < 0 || s.ids_per_row < 1)
        return rap_fail(RAP_ERR_ARG, "batch: bad shape (rows %lld, dense %d, sparse %d, ids/row %d)",
                        (long long)cap, s.n_dense, s.n_sparse, s.ids_per_row);
    size_t n = rap_batch_bytes(s, cap);
    void *block = NULL;
    RAP_TRY(rap_cuda_malloc(&block, n, "device batch"));
    rap_batch_view(b, s, cap, block);
    b->device = true;
    return RAP_OK;
}

extern "C" void rap_batch_free_any(rap_batch *b)
{
    if (!b)
        return;
    if (b->device) {
        rap_cuda_free(b->block);
        memset(b, 0, sizeof *b);
        return;
    }
    rap_batch_free(b);
}

/* Thread (row i, column y): y = 0 the label; 1..ND dense column y-1; then
 * sparse column j = y - 1 - ND: its valid byte, offset and ids, rebased on
 * dst's offset at `at` (0 when at is 0: that thread also writes off[0]). */
static __global__ void append_kernel(rap_batch dst, rap_batch src, int64_t a, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (i >= n)
        return;
    const int64_t at = dst.rows, bd = dst.cap, bs = src.cap, k = src.schema.ids_per_row;
    const int nd = src.schema.n_dense;
    if (y == 0) {
        dst.label[at + i] = src.label[a + i];
        return;
    }
    if (y <= nd) {
        int j = y - 1;
        dst.dense[j * bd + at + i] = src.dense[j * bs + a + i];
        dst.dense_valid[j * bd + at + i] = src.dense_valid[j * bs + a + i];
        return;
    }
    int j = y - 1 - nd;
    const int64_t *so = src.sparse_off + j * (bs + 1);
    int64_t *dof = dst.sparse_off + j * (bd + 1);
    int64_t d0 = at == 0 ? 0 : dof[at];
    if (at == 0 && i == 0)
        dof[0] = 0;
    int64_t base = d0 - so[a];
    int64_t e0 = so[a + i], e1 = so[a + i + 1];
    for (int64_t e = e0; e < e1; e++)
        dst.sparse_ids[j * bd * k + base + e] = src.sparse_ids[j * bs * k + e];
    dof[at + i + 1] = e1 + base;
    dst.sparse_valid[j * bd + at + i] = src.sparse_valid[j * bs + a + i];
}

extern "C" rap_status rap_batch_append_device(rap_batch *dst, const rap_batch *src, int64_t a,
                                              int64_t n, void *stream)
{
    if (n <= 0)
        return RAP_OK;
    if (dst->rows + n > dst->cap || a < 0 || a + n > src->cap)
        return rap_fail(RAP_ERR_INTERNAL, "device batch append: rows [%lld, +%lld) of %lld "
                        "after %lld of %lld", (long long)a, (long long)n, (long long)src->cap,
                        (long long)dst->rows, (long long)dst->cap);
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)(1 + src->schema.n_dense +
                                                     src->schema.n_sparse));
    append_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(*dst, *src, a, n);
    RAP_CUDA_LAUNCHED();
    dst->rows += n;
    return RAP_OK;
}

/* Gather, the row arrays: thread (row i, column y) as append_kernel's, from
 * source row idx[i]. */
static __global__ void gather_rows_kernel(rap_batch dst, rap_batch src, const int32_t *idx,
                                          int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (i >= n)
        return;
    const int64_t at = dst.rows, bd = dst.cap, bs = src.cap, r = idx[i];
    const int nd = src.schema.n_dense;
    if (y == 0) {
        dst.label[at + i] = src.label[r];
    } else if (y <= nd) {
        int j = y - 1;
        dst.dense[j * bd + at + i] = src.dense[j * bs + r];
        dst.dense_valid[j * bd + at + i] = src.dense_valid[j * bs + r];
    } else {
        int j = y - 1 - nd;
        dst.sparse_valid[j * bd + at + i] = src.sparse_valid[j * bs + r];
    }
}

/* 256 threads a block: the kernel takes 87 registers a thread on sm_90,
 * and 1024 of them passed the 65536 registers of a block ("too many
 * resources requested for launch" on the H200, 2026-12-02, aa545c8) */
#define GATHER_THREADS 256

/* Gather, the sparse columns: a block a column; the rows' id counts
 * scanned a block-wide chunk at a time (in row order), each row's ids
 * copied after the ids before it, offsets rebased on dst's at `at`. */
static __global__ void __launch_bounds__(GATHER_THREADS)
    gather_sparse_kernel(rap_batch dst, rap_batch src, const int32_t *idx, int64_t n)
{
    typedef cub::BlockScan<int64_t, GATHER_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    const int j = blockIdx.x;
    const int64_t at = dst.rows, bd = dst.cap, bs = src.cap, k = src.schema.ids_per_row;
    const int64_t *so = src.sparse_off + j * (bs + 1);
    const int64_t *sid = src.sparse_ids + j * bs * k;
    int64_t *dof = dst.sparse_off + j * (bd + 1);
    int64_t *did = dst.sparse_ids + j * bd * k;
    int64_t base = at == 0 ? 0 : dof[at];
    if (at == 0 && threadIdx.x == 0)
        dof[0] = 0;
    for (int64_t c0 = 0; c0 < n; c0 += GATHER_THREADS) {
        int64_t i = c0 + threadIdx.x, cnt = 0, e0 = 0;
        if (i < n) {
            e0 = so[idx[i]];
            cnt = so[idx[i] + 1] - e0;
        }
        int64_t excl, agg;
        scan_t(tmp).ExclusiveSum(cnt, excl, agg);
        if (i < n) {
            for (int64_t e = 0; e < cnt; e++)
                did[base + excl + e] = sid[e0 + e];
            dof[at + i + 1] = base + excl + cnt;
        }
        base += agg;
        __syncthreads(); /* tmp reused by the next chunk's scan */
    }
}

extern "C" rap_status rap_batch_gather_device(rap_batch *dst, const rap_batch *src,
                                              const int32_t *d_idx, int64_t n, void *stream)
{
    if (n <= 0)
        return RAP_OK;
    if (dst->rows + n > dst->cap)
        return rap_fail(RAP_ERR_INTERNAL, "device batch gather: %lld rows after %lld of %lld",
                        (long long)n, (long long)dst->rows, (long long)dst->cap);
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)(1 + src->schema.n_dense +
                                                     src->schema.n_sparse));
    gather_rows_kernel<<<grid, 256, 0, st>>>(*dst, *src, d_idx, n);
    RAP_CUDA_LAUNCHED();
    if (src->schema.n_sparse > 0) {
        gather_sparse_kernel<<<(unsigned)src->schema.n_sparse, GATHER_THREADS, 0, st>>>(
            *dst, *src, d_idx, n);
        RAP_CUDA_LAUNCHED();
    }
    dst->rows += n;
    return RAP_OK;
}

extern "C" rap_status rap_batch_ids_device(const rap_batch *b, int n, int64_t *ids, void *stream)
{
    if (n <= 0 || b->rows <= 0) {
        for (int j = 0; j < n; j++)
            ids[j] = 0;
        return RAP_OK;
    }
    if (n > 64)
        return rap_fail(RAP_ERR_INTERNAL, "device batch ids: %d columns, at most 64", n);
    int64_t first[64], last[64]; /* (n) column j's first and last offset */
    const size_t pitch = sizeof(int64_t) * (size_t)(b->cap + 1);
    cudaStream_t st = (cudaStream_t)stream;
    RAP_CUDA_TRY(cudaMemcpy2DAsync(first, sizeof(int64_t), b->sparse_off, pitch, sizeof(int64_t),
                                   (size_t)n, cudaMemcpyDeviceToHost, st));
    RAP_CUDA_TRY(cudaMemcpy2DAsync(last, sizeof(int64_t), b->sparse_off + b->rows, pitch,
                                   sizeof(int64_t), (size_t)n, cudaMemcpyDeviceToHost, st));
    RAP_CUDA_TRY(cudaStreamSynchronize(st));
    for (int j = 0; j < n; j++)
        ids[j] = last[j] - first[j];
    return RAP_OK;
}

extern "C" rap_status rap_batch_dense_to_host(const rap_batch *b, int j, float *vals,
                                              uint8_t *valid)
{
    if (j < 0 || j >= b->schema.n_dense || b->rows <= 0)
        return b->rows <= 0 ? RAP_OK
                            : rap_fail(RAP_ERR_INTERNAL, "device batch: no dense column %d", j);
    RAP_CUDA_TRY(cudaMemcpy(vals, b->dense + (size_t)j * (size_t)b->cap,
                            sizeof(float) * (size_t)b->rows, cudaMemcpyDeviceToHost));
    RAP_CUDA_TRY(cudaMemcpy(valid, b->dense_valid + (size_t)j * (size_t)b->cap, (size_t)b->rows,
                            cudaMemcpyDeviceToHost));
    return RAP_OK;
}

extern "C" rap_status rap_parse_idx_create(int64_t n, int32_t **h_idx, int32_t **d_idx)
{
    *h_idx = NULL;
    *d_idx = NULL;
    RAP_CUDA_TRY(cudaHostAlloc((void **)h_idx, sizeof(int32_t) * (size_t)n, cudaHostAllocDefault));
    return rap_cuda_malloc((void **)d_idx, sizeof(int32_t) * (size_t)n, "row gather indices");
}

extern "C" void rap_parse_idx_free(int32_t *h_idx, int32_t *d_idx)
{
    if (h_idx)
        cudaFreeHost(h_idx);
    rap_cuda_free(d_idx);
}

extern "C" rap_status rap_parse_idx_upload(int32_t *d_idx, const int32_t *h_idx, int64_t n,
                                           void *stream)
{
    if (n > 0)
        RAP_CUDA_TRY(cudaMemcpyAsync(d_idx, h_idx, sizeof(int32_t) * (size_t)n,
                                     cudaMemcpyHostToDevice, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_parse_stream_create(void **stream)
{
    cudaStream_t s;
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return RAP_OK;
}

extern "C" rap_status rap_parse_sync(void *stream)
{
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

extern "C" rap_status rap_parse_copy_sync(void *dst, const void *src, size_t n, void *stream)
{
    RAP_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream));
    RAP_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return RAP_OK;
}

extern "C" void rap_parse_stream_free(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" int rap_parse_device(void)
{
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return d;
}

extern "C" rap_status rap_parse_set_device(int device)
{
    RAP_CUDA_TRY(cudaSetDevice(device));
    return RAP_OK;
}

/* ---- a parser thread on the GPU */

extern "C" rap_status rap_parse_gpu_tiles_per_launch(int64_t *tiles)
{
    *tiles = RAP_PARSE_GPU_TILES_DEFAULT;
    const char *e = getenv("RAP_PARSE_GPU_TILES");
    if (!e || !e[0])
        return RAP_OK;
    char *end = NULL;
    long long v = strtoll(e, &end, 10);
    if (*end || v < 0 || v > (1LL << 30))
        return rap_fail(RAP_ERR_ARG, "RAP_PARSE_GPU_TILES=%s: expected a whole number of tiles "
                        "a launch, 0 (every tile of a chunk in one launch) to 2^30", e);
    *tiles = v;
    return RAP_OK;
}

typedef struct {
    rap_parse_backend_config cfg;
    cudaStream_t stream;
    rap_parse_gpu *gp;
    char *h_text;          /* (C + 16) pinned: the chunk's raw text */
    int32_t *h_start;      /* (C + 2) pinned: its line offsets */
    rap_parse_rej *h_rej;  /* (C + 1) pinned: the reject list copied back */
    int64_t tiles;         /* tiles a launch at most (RAP_PARSE_GPU_TILES; 0: a piece whole) */
    rap_parse_job job;     /* with a gate: the chunk posted */
    uint64_t ticket;       /* ... and its result, set by its end */
} gpu_state;

extern "C" void rap_parse_gpu_state_free(void *state)
{
    gpu_state *s = (gpu_state *)state;
    if (!s)
        return;
    rap_parse_gpu_free(s->gp);
    if (s->h_text)
        cudaFreeHost(s->h_text);
    if (s->h_start)
        cudaFreeHost(s->h_start);
    if (s->h_rej)
        cudaFreeHost(s->h_rej);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    rap_free(s);
}

static rap_status gpu_state_make(gpu_state *s, const rap_parse_backend_config *c)
{
    RAP_TRY(rap_parse_set_device(c->device));
    RAP_CUDA_TRY(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    const rap_parse_thread_sizes z = rap_parse_thread_sizes_of(c->chunk_bytes);
    RAP_CUDA_TRY(cudaHostAlloc((void **)&s->h_text, z.text, cudaHostAllocDefault));
    RAP_CUDA_TRY(cudaHostAlloc((void **)&s->h_start, z.start, cudaHostAllocDefault));
    RAP_CUDA_TRY(cudaHostAlloc((void **)&s->h_rej, z.rej, cudaHostAllocDefault));
    rap_parse_gpu_config pc;
    rap_parse_gpu_thread_config(c->chunk_bytes, c->max_line, &pc);
    RAP_TRY(rap_parse_gpu_tiles_per_launch(&pc.tiles_per_launch));
    s->tiles = pc.tiles_per_launch;
    return rap_parse_gpu_create(&pc, s->stream, &s->gp);
}

extern "C" rap_status rap_parse_gpu_state_create(const rap_parse_backend_config *c, void **state)
{
    *state = NULL;
    gpu_state *s = (gpu_state *)rap_calloc(sizeof *s, "GPU parser thread");
    if (!s)
        return RAP_ERR_NOMEM;
    s->cfg = *c;
    rap_status st = gpu_state_make(s, c);
    if (st != RAP_OK) {
        rap_parse_gpu_state_free(s);
        return st;
    }
    *state = s;
    return RAP_OK;
}

extern "C" rap_status rap_parse_gpu_stage_create(const rap_parse_backend_config *c,
                                                 rap_batch *stage)
{
    RAP_TRY(rap_parse_set_device(c->device));
    return rap_batch_create_device(stage, rap_schema_criteo(),
                                   rap_parse_stage_rows(c->chunk_bytes));
}

/* The gate's launches of a posted chunk (parse_gate.h), on the releasing
 * thread: a piece after the parser's stream waits for the phase's event,
 * in launches of at most s->tiles tiles (as rap_parse_gpu_run's); the end
 * queues the result's copy. A failed piece closes the open batch. */
static rap_status gate_piece(void *ctx, int64_t line0, int64_t line1, void *event)
{
    gpu_state *s = (gpu_state *)ctx;
    rap_status st = RAP_OK;
    if (event && cudaStreamWaitEvent(s->stream, (cudaEvent_t)event, 0) != cudaSuccess)
        st = rap_fail(RAP_ERR_CUDA, "GPU parser: wait for the window's event: %s",
                      cudaGetErrorString(cudaGetLastError()));
    const int64_t step = s->tiles > 0 ? s->tiles * RAP_PARSE_TILE : line1 - line0;
    for (int64_t l0 = line0; st == RAP_OK;) {
        int64_t l1 = line1 - l0 > step ? l0 + step : line1;
        st = rap_parse_gpu_piece(s->gp, l0, l1);
        l0 = l1;
        if (l0 >= line1)
            break;
    }
    if (st != RAP_OK)
        rap_parse_gpu_abort(s->gp);
    return st;
}

static rap_status gate_end(void *ctx)
{
    gpu_state *s = (gpu_state *)ctx;
    rap_status st = rap_parse_gpu_end(s->gp, NULL, &s->ticket);
    if (st != RAP_OK)
        rap_parse_gpu_abort(s->gp);
    return st;
}

static const rap_parse_launch_ops g_gate_ops = {gate_piece, gate_end};

/* The chunk's kernels: queued here, or without a gate posted to it and
 * launched by whoever releases it (this thread waits meanwhile). */
static rap_status gpu_launch(gpu_state *s, int64_t lines, int64_t n, rap_batch *stage,
                             uint64_t *ticket)
{
    if (!s->cfg.gate)
        return rap_parse_gpu_run(s->gp, rap_parse_gpu_text(s->gp), n, rap_parse_gpu_starts(s->gp),
                                 lines, stage, NULL, ticket);
    RAP_TRY(rap_parse_gpu_begin(s->gp, rap_parse_gpu_text(s->gp), n, rap_parse_gpu_starts(s->gp),
                                lines, stage));
    s->job.ops = &g_gate_ops;
    s->job.ctx = s;
    s->job.n_lines = lines;
    RAP_TRY(rap_parse_gate_run(s->cfg.gate, &s->job));
    *ticket = s->ticket;
    return RAP_OK;
}

/* The host's part: offsets and the raw text into pinned memory, the copy
 * and the kernel queued (or posted to the gate), then (this thread waits,
 * the training does not) the result and the reject list back. */
extern "C" rap_status rap_parse_gpu_chunk(void *state, const char *text, size_t n,
                                          rap_parsed *out, rap_batch *stage)
{
    gpu_state *s = (gpu_state *)state;
    if (n > s->cfg.chunk_bytes)
        return rap_fail(RAP_ERR_INTERNAL, "GPU parser: a chunk of %zu bytes, at most %zu", n,
                        s->cfg.chunk_bytes);
    int64_t lines = rap_parse_cut_lines(text, n, s->h_start);
    memcpy(s->h_text, text, n);
    RAP_TRY(rap_parse_gpu_upload(s->gp, s->h_text, (int64_t)n, s->h_start, lines));
    uint64_t ticket;
    RAP_TRY(gpu_launch(s, lines, (int64_t)n, stage, &ticket));
    rap_parse_result res;
    bool ready;
    RAP_TRY(rap_parse_gpu_result(s->gp, ticket, true, &res, &ready));
    if (res.rows_rejected > 0) {
        RAP_CUDA_TRY(cudaMemcpyAsync(s->h_rej, rap_parse_gpu_rejects(s->gp),
                                     sizeof(rap_parse_rej) * (size_t)res.rows_rejected,
                                     cudaMemcpyDeviceToHost, s->stream));
        RAP_CUDA_TRY(cudaStreamSynchronize(s->stream));
    }
    return rap_parse_take_rejects(out, s->h_rej, res.rows_rejected, &res, text, s->h_start,
                                  s->cfg.max_line);
}

#else /* no CUDA */

#define NO_GPU(what) rap_fail(RAP_ERR_NO_GPU, "%s: rap was built without CUDA (make CUDA=0)", what)

rap_status rap_batch_create_device(rap_batch *b, rap_schema s, int64_t cap)
{
    (void)s;
    (void)cap;
    memset(b, 0, sizeof *b);
    return NO_GPU("device batch");
}

void rap_batch_free_any(rap_batch *b) { rap_batch_free(b); }

rap_status rap_batch_append_device(rap_batch *dst, const rap_batch *src, int64_t a, int64_t n,
                                   void *stream)
{
    (void)dst, (void)src, (void)a, (void)n, (void)stream;
    return NO_GPU("device batch append");
}

rap_status rap_batch_gather_device(rap_batch *dst, const rap_batch *src, const int32_t *d_idx,
                                   int64_t n, void *stream)
{
    (void)dst, (void)src, (void)d_idx, (void)n, (void)stream;
    return NO_GPU("device batch gather");
}

rap_status rap_batch_ids_device(const rap_batch *b, int n, int64_t *ids, void *stream)
{
    (void)b, (void)n, (void)ids, (void)stream;
    return NO_GPU("device batch ids");
}

rap_status rap_batch_dense_to_host(const rap_batch *b, int j, float *vals, uint8_t *valid)
{
    (void)b, (void)j, (void)vals, (void)valid;
    return NO_GPU("device batch copy");
}

rap_status rap_parse_idx_create(int64_t n, int32_t **h_idx, int32_t **d_idx)
{
    (void)n;
    *h_idx = NULL;
    *d_idx = NULL;
    return NO_GPU("device batch gather");
}

void rap_parse_idx_free(int32_t *h_idx, int32_t *d_idx) { (void)h_idx, (void)d_idx; }

rap_status rap_parse_idx_upload(int32_t *d_idx, const int32_t *h_idx, int64_t n, void *stream)
{
    (void)d_idx, (void)h_idx, (void)n, (void)stream;
    return NO_GPU("device batch gather");
}

rap_status rap_parse_stream_create(void **stream)
{
    *stream = NULL;
    return NO_GPU("GPU parser");
}

rap_status rap_parse_sync(void *stream)
{
    (void)stream;
    return RAP_OK;
}

void rap_parse_stream_free(void *stream) { (void)stream; }

rap_status rap_parse_copy_sync(void *dst, const void *src, size_t n, void *stream)
{
    (void)dst, (void)src, (void)n, (void)stream;
    return NO_GPU("device copy");
}

int rap_parse_device(void) { return 0; }

rap_status rap_parse_set_device(int device)
{
    (void)device;
    return NO_GPU("GPU parser");
}

rap_status rap_parse_gpu_tiles_per_launch(int64_t *tiles)
{
    *tiles = RAP_PARSE_GPU_TILES_DEFAULT;
    return RAP_OK;
}

rap_status rap_parse_gpu_state_create(const rap_parse_backend_config *c, void **state)
{
    (void)c;
    *state = NULL;
    return NO_GPU("--parse gpu");
}

void rap_parse_gpu_state_free(void *state) { (void)state; }

rap_status rap_parse_gpu_stage_create(const rap_parse_backend_config *c, rap_batch *stage)
{
    (void)c;
    memset(stage, 0, sizeof *stage);
    return NO_GPU("--parse gpu");
}

rap_status rap_parse_gpu_chunk(void *state, const char *text, size_t n, rap_parsed *out,
                               rap_batch *stage)
{
    (void)state, (void)text, (void)n, (void)out, (void)stage;
    return NO_GPU("--parse gpu");
}

#endif /* __CUDACC__ */
