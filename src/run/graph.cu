/* graph.cu -- CUDA graphs of the training phases (graph.h): capture,
 * memset nodes rewritten as kernel nodes, instantiate, replay. The memset
 * kernel's CPU reference is rap_graph_memset_ref. Without nvcc this file is
 * compiled as C: the kernel and CUDA calls sit behind __CUDACC__. */
#include "run/graph.h"

#include "core/core.h"
#ifdef __CUDACC__
#include "core/cuda_util.h"
#include <cuda_runtime.h>
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The memset's value as a 32-bit word for a dst aligned to elem_size: byte
 * k of the word is byte (k mod elem_size) of value. */
static uint32_t memset_word(unsigned value, unsigned elem_size)
{
    if (elem_size == 1)
        return (value & 0xffu) * 0x01010101u;
    if (elem_size == 2)
        return (value & 0xffffu) * 0x00010001u;
    return (uint32_t)value;
}

void rap_graph_memset_ref(void *dst, size_t pitch, unsigned value, unsigned elem_size,
                          size_t width, size_t height)
{
    const uint32_t w = memset_word(value, elem_size);
    for (size_t r = 0; r < height; r++) {
        unsigned char *p = (unsigned char *)dst + r * pitch;
        for (size_t i = 0; i < width * elem_size; i++)
            p[i] = (unsigned char)(w >> (8 * (i % elem_size)));
    }
}

rap_status rap_run_graph_capture(void *stream, rap_run_phase_fn phase, rap_model *m,
                                 const rap_model_batch *mb, void **graph,
                                 int *memsets_replaced)
{
    *graph = NULL;
    if (memsets_replaced)
        *memsets_replaced = 0;
    RAP_TRY(rap_run_graph_begin(stream));
    rap_status sp = phase(m, mb);
    rap_status se = rap_run_graph_end(stream, graph, memsets_replaced); /* ends it anyway */
    if (sp != RAP_OK) {
        rap_run_graph_free(*graph);
        *graph = NULL;
        return sp;
    }
    return se;
}

#ifdef __CUDACC__

/* height rows of row_bytes bytes, row r at dst + r * pitch, each byte at
 * address a = byte (a mod 4) of word (dst is aligned to the element size,
 * so that is the element's byte). 16-byte stores between a byte-wise head
 * and tail. grid.y strides over rows, grid.x * blockDim.x over a row. */
__global__ void graph_memset_kernel(unsigned char *dst, size_t pitch, size_t row_bytes,
                                    size_t height, uint32_t word)
{
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const uint4 w4 = make_uint4(word, word, word, word);
    for (size_t r = blockIdx.y; r < height; r += gridDim.y) {
        unsigned char *p = dst + r * pitch;
        size_t head = (size_t)((16u - ((uintptr_t)p & 15u)) & 15u);
        if (head > row_bytes)
            head = row_bytes;
        const size_t nvec = (row_bytes - head) / 16;
        const size_t tail = head + nvec * 16;
        for (size_t i = t; i < head; i += stride)
            p[i] = (unsigned char)(word >> (8 * ((uintptr_t)(p + i) & 3u)));
        uint4 *v = (uint4 *)(p + head); /* (nvec) */
        for (size_t i = t; i < nvec; i += stride)
            v[i] = w4;
        for (size_t i = tail + t; i < row_bytes; i += stride)
            p[i] = (unsigned char)(word >> (8 * ((uintptr_t)(p + i) & 3u)));
    }
}

/* RAP_GRAPH_MEMSET=node: keep the memset nodes. */
static bool keep_memset_nodes(void)
{
    const char *e = getenv("RAP_GRAPH_MEMSET");
    return e && strcmp(e, "node") == 0;
}

static bool edges_default(const cudaGraphEdgeData *ed, size_t n)
{
    static const cudaGraphEdgeData zero = {};
    for (size_t i = 0; i < n; i++)
        if (memcmp(&ed[i], &zero, sizeof zero) != 0)
            return false;
    return true;
}

/* Replaces memset node m of graph g by a kernel node with its parameters
 * and edges. *done false (g unchanged) when the node is not one this can
 * replace: a destination not aligned to its element size, or an edge that
 * is not a plain dependency. */
static rap_status replace_memset(cudaGraph_t g, cudaGraphNode_t m, bool *done)
{
    *done = false;
    cudaMemsetParams mp;
    RAP_CUDA_TRY(cudaGraphMemsetNodeGetParams(m, &mp));
    const unsigned es = mp.elementSize;
    if ((es != 1 && es != 2 && es != 4) || ((uintptr_t)mp.dst % es) != 0 ||
        (mp.height > 1 && mp.pitch % es != 0))
        return RAP_OK;
    size_t n_in = 0, n_out = 0;
    RAP_CUDA_TRY(cudaGraphNodeGetDependencies(m, NULL, NULL, &n_in));
    RAP_CUDA_TRY(cudaGraphNodeGetDependentNodes(m, NULL, NULL, &n_out));
    const size_t n_all = n_in + n_out;
    cudaGraphNode_t *nodes = /* (n_in + n_out): dependencies, then dependents */
        (cudaGraphNode_t *)rap_malloc(sizeof *nodes * (n_all ? n_all : 1), "graph edges");
    cudaGraphEdgeData *ed = /* (n_in + n_out) */
        (cudaGraphEdgeData *)rap_malloc(sizeof *ed * (n_all ? n_all : 1), "graph edges");
    if (!nodes || !ed) {
        rap_free(nodes);
        rap_free(ed);
        return RAP_ERR_NOMEM;
    }
    rap_status st = RAP_OK;
    cudaError_t e = cudaSuccess;
    size_t got_in = n_in, got_out = n_out;
    if (n_in)
        e = cudaGraphNodeGetDependencies(m, nodes, ed, &got_in);
    if (e == cudaSuccess && n_out)
        e = cudaGraphNodeGetDependentNodes(m, nodes + n_in, ed + n_in, &got_out);
    if (e != cudaSuccess) {
        st = rap_fail(RAP_ERR_CUDA, "graph: reading a memset node's edges: %s",
                      cudaGetErrorString(e));
    } else if (got_in == n_in && got_out == n_out && edges_default(ed, n_all)) {
        unsigned char *dst = (unsigned char *)mp.dst;
        size_t pitch = mp.pitch, row_bytes = mp.width * es, height = mp.height ? mp.height : 1;
        uint32_t word = memset_word(mp.value, es);
        void *args[] = {&dst, &pitch, &row_bytes, &height, &word};
        const size_t vecs = row_bytes / 16 + 1;
        cudaKernelNodeParams kp = {};
        kp.func = (void *)graph_memset_kernel;
        kp.blockDim = dim3(256);
        kp.gridDim = dim3((unsigned)((vecs + 255) / 256 < 1024 ? (vecs + 255) / 256 : 1024),
                          (unsigned)(height < 65535 ? height : 65535));
        kp.kernelParams = args;
        cudaGraphNode_t k = NULL;
        e = cudaGraphAddKernelNode(&k, g, nodes, n_in, &kp);
        for (size_t i = 0; e == cudaSuccess && i < n_out; i++)
            e = cudaGraphAddDependencies(g, &k, &nodes[n_in + i], NULL, 1);
        if (e == cudaSuccess)
            e = cudaGraphDestroyNode(m);
        if (e != cudaSuccess)
            st = rap_fail(RAP_ERR_CUDA, "graph: replacing a memset node by a kernel: %s",
                          cudaGetErrorString(e));
        else
            *done = true;
    }
    rap_free(nodes);
    rap_free(ed);
    return st;
}

/* Every memset node of graph replaced (replace_memset); *n = how many. */
extern "C" rap_status rap_run_graph_rewrite_memsets(void *graph, int *n)
{
    cudaGraph_t g = (cudaGraph_t)graph;
    *n = 0;
    size_t count = 0;
    RAP_CUDA_TRY(cudaGraphGetNodes(g, NULL, &count));
    if (count == 0)
        return RAP_OK;
    cudaGraphNode_t *nodes =
        (cudaGraphNode_t *)rap_malloc(sizeof *nodes * count, "graph nodes"); /* (count) */
    if (!nodes)
        return RAP_ERR_NOMEM;
    rap_status st = RAP_OK;
    cudaError_t e = cudaGraphGetNodes(g, nodes, &count);
    if (e != cudaSuccess)
        st = rap_fail(RAP_ERR_CUDA, "graph: listing nodes: %s", cudaGetErrorString(e));
    for (size_t i = 0; st == RAP_OK && i < count; i++) {
        cudaGraphNodeType type;
        e = cudaGraphNodeGetType(nodes[i], &type);
        if (e != cudaSuccess) {
            st = rap_fail(RAP_ERR_CUDA, "graph: node type: %s", cudaGetErrorString(e));
            break;
        }
        if (type != cudaGraphNodeTypeMemset)
            continue;
        bool done = false;
        st = replace_memset(g, nodes[i], &done);
        *n += done;
    }
    rap_free(nodes);
    return st;
}

extern "C" rap_status rap_run_graph_begin(void *stream)
{
    RAP_CUDA_TRY(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
    return RAP_OK;
}

extern "C" rap_status rap_run_graph_end(void *stream, void **graph, int *memsets_replaced)
{
    *graph = NULL;
    if (memsets_replaced)
        *memsets_replaced = 0;
    cudaGraph_t g = NULL;
    RAP_CUDA_TRY(cudaStreamEndCapture((cudaStream_t)stream, &g));
    int n = 0;
    rap_status st = keep_memset_nodes() ? RAP_OK : rap_run_graph_rewrite_memsets(g, &n);
    if (st != RAP_OK) {
        cudaGraphDestroy(g);
        return st;
    }
    cudaGraphExec_t e = NULL;
    cudaError_t err = cudaGraphInstantiate(&e, g, 0);
    cudaGraphDestroy(g);
    if (err != cudaSuccess)
        return rap_fail(RAP_ERR_CUDA, "cudaGraphInstantiate: %s", cudaGetErrorString(err));
    if (memsets_replaced)
        *memsets_replaced = n;
    *graph = (void *)e;
    return RAP_OK;
}

extern "C" rap_status rap_run_graph_launch(void *graph, void *stream)
{
    RAP_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream));
    return RAP_OK;
}

extern "C" void rap_run_graph_free(void *graph)
{
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

#else /* no CUDA: every GPU entry point says so */

#define NO_GPU rap_fail(RAP_ERR_NO_GPU, "rap was built without CUDA (make CUDA=0)")

rap_status rap_run_graph_begin(void *stream)
{
    (void)stream;
    return NO_GPU;
}
rap_status rap_run_graph_end(void *stream, void **graph, int *memsets_replaced)
{
    (void)stream;
    *graph = NULL;
    if (memsets_replaced)
        *memsets_replaced = 0;
    return NO_GPU;
}
rap_status rap_run_graph_launch(void *graph, void *stream)
{
    (void)graph, (void)stream;
    return NO_GPU;
}
rap_status rap_run_graph_rewrite_memsets(void *graph, int *replaced)
{
    (void)graph;
    *replaced = 0;
    return NO_GPU;
}
void rap_run_graph_free(void *graph) { (void)graph; }

#endif
