/*
 * exec.c -- the preprocessing executor: the compile step shared by both
 * devices (plan + fusion -> one arena holding the input block, every node's
 * output buffers, the scratch and the descriptor tables; per-node data
 * views), and the CPU side (load, run on a thread pool, fetch). The GPU
 * side is exec_gpu.cu; docs/EXECUTOR.md describes the whole.
 *
 * Contract kept here: rap_prep_create allocates everything; load, run,
 * run_kernel, column and label allocate nothing (fetch allocates the host
 * column it returns). One executor is used by one thread at a time.
 */
#include "prep/exec_internal.h"
#include "prep/ops/divu64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest max_rows accepted: keeps every size computation far from
 * overflowing int64/size_t. */
#define MAX_ROWS_LIMIT ((int64_t)1 << 40)
/* CPU work item: rows of one descriptor handled by one pool task. */
#define CPU_CHUNK_ROWS 32768
#define CPU_MIN_CHUNK_ROWS 1024

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ------------------------------------------------------------ arena layout */

/* A layout cursor. Sizing pass: base NULL, only bytes are counted; pointer
 * pass: base is the arena and place() hands out pointers. The byte count is
 * kept in double as well so that absurd sizes are reported, not wrapped. */
typedef struct {
    char *base;
    size_t at;
    double at_d;
} arena_cursor;

/* Reserves count elements of elem bytes on a 256-byte boundary. Returns the
 * pointer (NULL in the sizing pass or when count is 0). */
static void *place(arena_cursor *c, double count, size_t elem)
{
    double bytes = count * (double)elem;
    if (bytes <= 0)
        return NULL;
    c->at_d += bytes + 256;
    if (c->at_d > 4.0e18) /* too big to represent: the memory check fails */
        return NULL;
    void *ptr = c->base ? c->base + c->at : NULL;
    c->at += align256((size_t)bytes);
    return ptr;
}

/* Bytes of the aux array op.h wants for node n (0 for other ops). */
static size_t aux_bytes_of(const rap_node *n)
{
    if (n->op == RAP_OP_BUCKETIZE)
        return (size_t)n->n_aux * (n->in_kind == RAP_DENSE ? sizeof(float) : sizeof(double));
    if (n->op == RAP_OP_MAPID)
        return (size_t)n->n_aux * sizeof(int64_t);
    return 0;
}

/* Static part of every live node's view (kind, width, ids capacity, id
 * range), in topological order so an input's capacity is known first. */
static void set_static_views(rap_prep *p, const rap_plan *plan)
{
    for (int i = 0; i < plan->n_nodes; i++) {
        const rap_node *n = &plan->nodes[i];
        rap_prep_node *v = &p->nodes[i];
        memset(v, 0, sizeof *v);
        v->input = n->input;
        if (n->op != RAP_OP_INPUT && !n->live)
            continue;
        v->has_view = true;
        v->kind = n->kind;
        v->width = n->kind == RAP_VECTOR ? n->width : 1;
        v->bounded = n->bounded;
        v->lo = n->lo;
        v->hi = n->hi;
        if (n->kind != RAP_SPARSE)
            continue;
        if (n->op == RAP_OP_INPUT) {
            v->ids_cap = p->schema.ids_per_row;
        } else if (n->off == RAP_OFF_SAME) {
            /* ids are written at the input's positions: its capacity */
            int64_t in_cap = p->nodes[n->input].ids_cap;
            v->ids_cap = n->ids_per_row > in_cap ? n->ids_per_row : in_cap;
        } else if (n->off == RAP_OFF_ARANGE) {
            v->ids_cap = 1;
        } else {
            v->ids_cap = n->ids_per_row > 1 ? n->ids_per_row : 1;
        }
    }
}

/* Lays out the arena (see exec_internal.h): input block, arange, each live
 * op node's own buffers, len/sums scratch, aux region (aux_total bytes),
 * and on the GPU the descriptor table and the scan's temporary storage.
 * With c->base set, also points every view into it. */
static void layout(rap_prep *p, const rap_plan *plan, arena_cursor *c, size_t aux_total)
{
    const int64_t B = p->B;
    const rap_schema s = p->schema;
    const double Bd = (double)B;
    bool need_arange = false;
    for (int i = 0; i < plan->n_nodes; i++)
        need_arange |= plan->nodes[i].live && plan->nodes[i].op != RAP_OP_INPUT &&
                       plan->nodes[i].off == RAP_OFF_ARANGE;

    /* the input block, mirroring the host rap_batch */
    double in_d = Bd * (4.0 + 5.0 * s.n_dense + s.n_sparse * (17.0 + 8.0 * s.ids_per_row)) +
                  8.0 * s.n_sparse + 1536.0;
    void *blk = place(c, in_d < 1e15 ? (double)rap_batch_bytes(s, B) : in_d, 1);
    if (c->base)
        rap_batch_view(&p->in, s, B, blk);
    p->arange = need_arange ? place(c, Bd + 1, sizeof(int64_t)) : NULL;

    /* own output buffers of live op nodes (identities have none) */
    for (int i = 0; i < plan->n_nodes; i++) {
        const rap_node *n = &plan->nodes[i];
        rap_prep_node *v = &p->nodes[i];
        if (!n->live || n->op == RAP_OP_INPUT || rap_node_is_identity(plan, i))
            continue;
        if (n->kind == RAP_DENSE || n->kind == RAP_VECTOR) {
            v->val = place(c, Bd * v->width, sizeof(float));
        } else {
            v->ids = place(c, Bd * (double)v->ids_cap, sizeof(int64_t));
            if (n->off == RAP_OFF_COMPUTED)
                v->off = place(c, Bd + 1, sizeof(int64_t));
        }
    }
    p->len = place(c, (double)p->ndc * (Bd + 1), sizeof(int64_t));
    p->sums = p->device == RAP_GPU ? place(c, (double)p->ndc * (Bd + 1), sizeof(int64_t)) : NULL;
    p->aux = place(c, (double)aux_total, 1);
    if (p->device == RAP_GPU) {
        p->descs_dev = place(c, (double)p->n_descs, sizeof(rap_desc));
        p->heads_dev = place(c, (double)p->n_heads, sizeof(int32_t));
        p->scan_tmp = place(c, (double)p->scan_tmp_bytes, 1);
    }
    if (!c->base)
        return;

    /* shared pointers, in topological order */
    for (int i = 0; i < plan->n_nodes; i++) {
        const rap_node *n = &plan->nodes[i];
        rap_prep_node *v = &p->nodes[i];
        if (n->op == RAP_OP_INPUT) {
            if (n->kind == RAP_DENSE) {
                v->val = p->in.dense + (size_t)n->raw * (size_t)B;
                v->valid = p->in.dense_valid + (size_t)n->raw * (size_t)B;
            } else {
                v->off = p->in.sparse_off + (size_t)n->raw * (size_t)(B + 1);
                v->ids = p->in.sparse_ids + (size_t)n->raw * (size_t)B * (size_t)s.ids_per_row;
                v->valid = p->in.sparse_valid + (size_t)n->raw * (size_t)B;
            }
            continue;
        }
        if (!n->live)
            continue;
        const rap_prep_node *x = &p->nodes[n->input];
        v->valid = n->op == RAP_OP_FILL_NULL ? NULL : x->valid;
        if (n->off == RAP_OFF_SAME)
            v->off = x->off;
        else if (n->off == RAP_OFF_ARANGE)
            v->off = p->arange;
        if (rap_node_is_identity(plan, i)) { /* the input's values as they are */
            v->val = x->val;
            v->ids = x->ids;
        }
    }
}

/* ------------------------------------------------------------ validation */

/* The fusion covers the plan's live op nodes exactly once, each kernel
 * holds one (op, variant), kernels follow dependencies, and the plan was
 * finished. kernel_of: (n_nodes) scratch. RAP_ERR_ARG naming the fault. */
static rap_status check_fusion(const rap_plan *plan, const rap_fusion *f, int *kernel_of)
{
    for (int i = 0; i < plan->n_nodes; i++)
        kernel_of[i] = -1;
    for (int c = 0; c < plan->n_cols; c++) {
        int nd = plan->cols[c].node;
        if (nd < 0 || nd >= plan->n_nodes)
            return rap_fail(RAP_ERR_ARG, "executor: column %s refers to node %d of %d",
                            plan->cols[c].name, nd, plan->n_nodes);
        if (plan->nodes[nd].op != RAP_OP_INPUT && !plan->nodes[nd].live)
            return rap_fail(RAP_ERR_ARG, "executor: column %s is not live: call rap_plan_finish "
                                         "before rap_prep_create",
                            plan->cols[c].name);
    }
    for (int k = 0; k < f->n; k++) {
        const rap_kernel *kn = &f->kernels[k];
        if (kn->n < 1 || !kn->nodes)
            return rap_fail(RAP_ERR_ARG, "executor: kernel %d of the fusion has no nodes", k);
        bool computed = false;
        for (int j = 0; j < kn->n; j++) {
            int i = kn->nodes[j];
            if (i < 0 || i >= plan->n_nodes)
                return rap_fail(RAP_ERR_ARG, "executor: kernel %d names node %d of %d", k, i,
                                plan->n_nodes);
            const rap_node *n = &plan->nodes[i];
            if (n->op == RAP_OP_INPUT || !n->live)
                return rap_fail(RAP_ERR_ARG, "executor: kernel %d names node %d, which is %s", k,
                                i, n->op == RAP_OP_INPUT ? "a raw input" : "not live");
            if (kn->group && !rap_node_row_local(plan, i))
                return rap_fail(RAP_ERR_ARG, "executor: row kernel %d holds node %d (%s, line %d), "
                                             "whose offsets are computed: not row-local",
                                k, i, rap_op_name(n->op), n->line);
            if (!kn->group && (n->op != kn->op || rap_node_variant(plan, i) != kn->variant))
                return rap_fail(RAP_ERR_ARG, "executor: kernel %d (%s, variant %d) holds node %d "
                                             "(%s, variant %d): a kernel fuses one op and variant",
                                k, rap_op_name(kn->op), kn->variant, i, rap_op_name(n->op),
                                rap_node_variant(plan, i));
            if (kernel_of[i] >= 0)
                return rap_fail(RAP_ERR_ARG, "executor: node %d is in kernels %d and %d", i,
                                kernel_of[i], k);
            bool c_ = n->off == RAP_OFF_COMPUTED;
            if (j > 0 && c_ != computed)
                return rap_fail(RAP_ERR_ARG, "executor: kernel %d mixes computed and fixed offsets", k);
            computed = c_;
            kernel_of[i] = k;
        }
        rap_status st = rap_fusion_check_groups(kn, k);
        if (st != RAP_OK)
            return rap_fail_context(RAP_ERR_ARG, "executor");
    }
    for (int i = 0; i < plan->n_nodes; i++) {
        const rap_node *n = &plan->nodes[i];
        if (n->op == RAP_OP_INPUT || !n->live)
            continue;
        if (kernel_of[i] < 0)
            return rap_fail(RAP_ERR_ARG, "executor: live node %d (%s, line %d) is in no kernel of "
                                         "the fusion",
                            i, rap_op_name(n->op), n->line);
        int in = n->input;
        if (plan->nodes[in].op != RAP_OP_INPUT && kernel_of[in] >= kernel_of[i] &&
            !rap_fusion_same_group(f, kernel_of[i], in, i))
            return rap_fail(RAP_ERR_ARG, "executor: node %d (kernel %d) reads node %d, which runs "
                                         "in kernel %d: kernels must follow dependencies",
                            i, kernel_of[i], in, kernel_of[in]);
        if (n->kind == RAP_SPARSE && n->off == RAP_OFF_SAME &&
            plan->nodes[in].kind != RAP_SPARSE)
            return rap_fail(RAP_ERR_INTERNAL, "executor: node %d shares offsets with a non-sparse input", i);
    }
    return RAP_OK;
}

/* Every kernel's op has the implementation this device needs (op files
 * land one by one: a missing one is reported, not called). */
static rap_status check_impls(const rap_plan *plan, const rap_fusion *f, rap_device dev)
{
    for (int k = 0; k < f->n; k++) {
        if (f->kernels[k].group) /* row kernels: ops/rows.cu, every device */
            continue;
        rap_op_type op = f->kernels[k].op;
        const rap_op_impl *im = &rap_op_impls[op];
        bool computed = plan->nodes[f->kernels[k].nodes[0]].off == RAP_OFF_COMPUTED;
        const char *dname = dev == RAP_GPU ? "GPU" : "CPU";
        bool have = dev == RAP_GPU ? im->gpu != NULL : im->cpu != NULL;
        if (!have)
            return rap_fail(RAP_ERR_INTERNAL, "op %s has no %s implementation", rap_op_name(op), dname);
        bool have_len = dev == RAP_GPU ? im->len_gpu != NULL : im->len_cpu != NULL;
        if (computed && !have_len)
            return rap_fail(RAP_ERR_INTERNAL, "op %s has no %s length phase (needed where its "
                                              "output offsets are computed)",
                            rap_op_name(op), dname);
    }
    return RAP_OK;
}

/* Host memory the system can still give (MemAvailable), or 0 if unknown. */
static double host_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (double)kb * 1024.0;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    return pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
}

/* ------------------------------------------------------------ descriptors */

/* Descriptor of node i, the j-th of a kernel (its len scratch slot j).
 * aux: where the node's aux array lies as the device will see it. */
static void fill_desc(const rap_prep *p, const rap_plan *plan, int i, int j, bool computed,
                      const void *aux, rap_desc *d)
{
    const rap_node *n = &plan->nodes[i];
    const rap_prep_node *x = &p->nodes[n->input], *y = &p->nodes[i];
    memset(d, 0, sizeof *d);
    d->x = x->val;
    d->xoff = x->off;
    d->xids = x->ids;
    d->xvalid = x->valid;
    d->y = y->val;
    d->yoff = y->off;
    d->yids = y->ids;
    d->len = computed ? p->len + (size_t)j * (size_t)(p->B + 1) : NULL;
    d->f0 = (float)n->f[0];
    d->f1 = (float)n->f[1];
    d->i0 = n->i[0];
    d->i1 = n->i[1];
    if (n->op == RAP_OP_FILL_NULL && n->in_kind == RAP_SPARSE)
        d->i0 = (int64_t)n->f[0];
    if (n->op == RAP_OP_CLAMP && n->in_kind == RAP_SPARSE) {
        d->i0 = (int64_t)n->f[0];
        d->i1 = (int64_t)n->f[1];
    }
    /* the ids' modulus by a multiply (not with RAP_PREP_ROWS=each: `%`) */
    if (n->op == RAP_OP_SIGRID_HASH && d->i1 >= 1 && !p->rows_each)
        rap_divu64_make((uint64_t)d->i1, &d->dmul, &d->dinfo);
    if (n->op == RAP_OP_BUCKETIZE || n->op == RAP_OP_MAPID) {
        d->aux = aux;
        d->naux = n->n_aux;
    }
    d->width = y->width;
    d->off_mode = (int32_t)n->off;
    d->in_kind = (int32_t)n->in_kind;
    d->out_kind = (int32_t)n->kind;
    d->op = (int32_t)n->op;
}

/* Writes node n's aux array, converted as op.h asks, at dst (host). */
static void fill_aux(const rap_node *n, void *dst)
{
    if (n->op == RAP_OP_BUCKETIZE && n->in_kind == RAP_DENSE) {
        float *b = dst;
        for (int64_t k = 0; k < n->n_aux; k++)
            b[k] = (float)n->borders[k];
    } else if (n->op == RAP_OP_BUCKETIZE) {
        memcpy(dst, n->borders, sizeof(double) * (size_t)n->n_aux);
    } else if (n->op == RAP_OP_MAPID) {
        memcpy(dst, n->map, sizeof(int64_t) * (size_t)n->n_aux);
    }
}

/* ------------------------------------------------------------ create/free */

/* Releases the arena (after the stream's work), an owned stream, the pool
 * and the host tables. Accepts NULL and a partly built executor. */
void rap_prep_free(rap_prep *p)
{
    if (!p)
        return;
    if (p->device == RAP_GPU)
        rap_prep_gpu_free(p);
    else
        rap_aligned_free(p->arena);
    p->arena = NULL;
    rap_pool_free(p->pool);
    rap_free(p->nodes);
    rap_free(p->col_node);
    rap_free(p->kernels);
    rap_free(p->descs);
    rap_free(p->desc_node);
    rap_free(p->ready);
    rap_free(p->heads);
    rap_free(p);
}

/* The host tables of p (views, columns, kernels, descriptor numbering,
 * row groups), the aux offsets (aux_off, *aux_total) and the arena's
 * sizing pass into *cur: everything create knows before it allocates a
 * buffer (rap_prep_bytes stops here). On failure the caller frees p. */
static rap_status size_arena(rap_prep *p, const rap_plan *plan, const rap_fusion *f,
                             size_t *aux_off, size_t *aux_total_out, arena_cursor *cur)
{
    const int64_t B = p->B;
    p->nodes = rap_calloc(sizeof *p->nodes * (size_t)plan->n_nodes, "executor node views");
    p->col_node = rap_malloc(sizeof(int) * (size_t)(plan->n_cols + 1), "executor columns");
    p->kernels = rap_calloc(sizeof *p->kernels * (size_t)(f->n + 1), "executor kernels");
    if (!p->nodes || !p->col_node || !p->kernels)
        return RAP_ERR_NOMEM;
    p->n_nodes = plan->n_nodes;
    p->n_cols = plan->n_cols;
    for (int c = 0; c < plan->n_cols; c++)
        p->col_node[c] = plan->cols[c].node;

    /* kernels and descriptor numbering */
    p->n_kernels = f->n;
    p->n_descs = 0;
    p->ndc = 0;
    for (int k = 0; k < f->n; k++) {
        rap_prep_kernel *kn = &p->kernels[k];
        kn->op = f->kernels[k].op;
        kn->variant = f->kernels[k].variant;
        kn->level = f->kernels[k].level;
        kn->n = f->kernels[k].n;
        kn->first = p->n_descs;
        kn->computed = plan->nodes[f->kernels[k].nodes[0]].off == RAP_OFF_COMPUTED;
        kn->identity = rap_kernel_is_identity(plan, &f->kernels[k]);
        if (f->kernels[k].group) {
            kn->n_groups = f->kernels[k].n_groups;
            kn->head0 = p->n_heads;
            p->n_heads += kn->n_groups + 1;
        }
        p->n_descs += kn->n;
        if (kn->computed && kn->n > p->ndc)
            p->ndc = kn->n;
    }
    p->descs = rap_calloc(sizeof(rap_desc) * (size_t)(p->n_descs + 1), "executor descriptors");
    p->desc_node = rap_malloc(sizeof(int) * (size_t)(p->n_descs + 1), "executor descriptors");
    p->ready = rap_calloc(sizeof(uint32_t) * (size_t)(p->n_descs + 1), "executor descriptors");
    p->heads = rap_malloc(sizeof(int32_t) * (size_t)(p->n_heads + 1), "executor row groups");
    if (!p->descs || !p->desc_node || !p->ready || !p->heads)
        return RAP_ERR_NOMEM;
    for (int k = 0; k < f->n; k++)
        for (int g = 0; f->kernels[k].group && g <= f->kernels[k].n_groups; g++)
            p->heads[p->kernels[k].head0 + g] = (int32_t)f->kernels[k].group[g];

    /* aux region: one slot per bucketize/mapid node, 16-byte aligned */
    size_t aux_total = 0;
    for (int i = 0; i < plan->n_nodes; i++) {
        aux_off[i] = aux_total;
        if (plan->nodes[i].live && plan->nodes[i].op != RAP_OP_INPUT)
            aux_total += (aux_bytes_of(&plan->nodes[i]) + 15) & ~(size_t)15;
    }

    /* sizing pass */
    set_static_views(p, plan);
    if (p->device == RAP_GPU && p->ndc > 0)
        RAP_TRY(rap_prep_gpu_scan_bytes((int64_t)p->ndc * (B + 1), &p->scan_tmp_bytes));
    *cur = (arena_cursor){NULL, 0, 0};
    layout(p, plan, cur, aux_total);
    *aux_total_out = aux_total;
    return RAP_OK;
}

/* The steps of create after validation; on failure the caller frees p. */
static rap_status build(rap_prep *p, const rap_plan *plan, const rap_fusion *f,
                        const rap_prep_config *cfg, size_t *aux_off, void **staging)
{
    const int64_t B = p->B;
    size_t aux_total = 0;
    arena_cursor cur;
    RAP_TRY(size_arena(p, plan, f, aux_off, &aux_total, &cur));
    const double gib = 1024.0 * 1024.0 * 1024.0;

    /* memory check, before anything big is allocated */
    if (p->device == RAP_GPU) {
        size_t free_b = 0, total_b = 0;
        RAP_TRY(rap_prep_gpu_meminfo(&free_b, &total_b));
        if (cur.at_d > 4.0e18 || cur.at_d > (double)free_b)
            return rap_fail(RAP_ERR_NOMEM, "plan needs %.2f GiB of GPU memory for batches of %lld "
                                           "rows, %.2f GiB free",
                            cur.at_d / gib, (long long)B, (double)free_b / gib);
    } else {
        double avail = host_available_bytes();
        if (cur.at_d > 4.0e18 || (avail > 0 && cur.at_d > avail))
            return rap_fail(RAP_ERR_NOMEM, "plan needs %.2f GiB of host memory for batches of %lld "
                                           "rows, %.2f GiB available",
                            cur.at_d / gib, (long long)B, avail / gib);
    }
    p->arena_bytes = cur.at;

    /* the arena, then the pointer pass */
    if (p->device == RAP_GPU) {
        RAP_TRY(rap_prep_gpu_alloc(p, cfg->stream));
    } else {
        p->arena = rap_aligned_alloc(p->arena_bytes, "executor buffers");
        if (!p->arena)
            return RAP_ERR_NOMEM;
    }
    cur = (arena_cursor){p->arena, 0, 0};
    layout(p, plan, &cur, aux_total);
    if (cur.at != p->arena_bytes)
        return rap_fail(RAP_ERR_INTERNAL, "executor: layout passes disagree (%zu vs %zu bytes)",
                        cur.at, p->arena_bytes);
    /* zeroed (GPU: by rap_prep_gpu_alloc): a never-loaded executor holds
     * well-defined empty rows, and every page is touched now, not in a run */
    if (p->device == RAP_CPU)
        memset(p->arena, 0, p->arena_bytes);

    /* aux arrays: written in place (CPU) or staged and uploaded (GPU) */
    char *aux_host = p->aux;
    if (p->device == RAP_GPU && aux_total > 0) {
        *staging = rap_calloc(aux_total, "executor aux staging");
        if (!*staging)
            return RAP_ERR_NOMEM;
        aux_host = *staging;
    }
    for (int i = 0; i < plan->n_nodes; i++)
        if (plan->nodes[i].live && aux_bytes_of(&plan->nodes[i]) > 0)
            fill_aux(&plan->nodes[i], aux_host + aux_off[i]);

    /* descriptor tables, in each kernel's node order */
    for (int k = 0; k < f->n; k++) {
        const rap_prep_kernel *kn = &p->kernels[k];
        for (int j = 0; j < kn->n; j++) {
            int i = f->kernels[k].nodes[j];
            const void *aux = aux_bytes_of(&plan->nodes[i]) > 0 ? (char *)p->aux + aux_off[i] : NULL;
            fill_desc(p, plan, i, j, kn->computed, aux, &p->descs[kn->first + j]);
            p->desc_node[kn->first + j] = i;
        }
    }

    if (p->device == RAP_GPU) {
        if (aux_total > 0)
            RAP_TRY(rap_prep_gpu_upload(p, p->aux, *staging, aux_total));
        RAP_TRY(rap_prep_gpu_upload(p, p->descs_dev, p->descs, sizeof(rap_desc) * (size_t)p->n_descs));
        RAP_TRY(rap_prep_gpu_upload(p, p->heads_dev, p->heads, sizeof(int32_t) * (size_t)p->n_heads));
        if (p->arange)
            RAP_TRY(rap_prep_gpu_fill_arange(p, p->arange, B + 1));
    } else {
        p->descs_dev = p->descs;
        p->heads_dev = p->heads;
        if (p->arange)
            for (int64_t r = 0; r <= B; r++)
                p->arange[r] = r;
        RAP_TRY(rap_pool_create(cfg->threads, &p->pool));
    }
    return RAP_OK;
}

/* RAP_PREP_ROWS: *each true for each, false for once or unset; RAP_ERR_ARG
 * for anything else. */
static rap_status prep_rows_env(bool *each)
{
    const char *e = getenv("RAP_PREP_ROWS");
    *each = e && !strcmp(e, "each");
    if (!e || !e[0] || !strcmp(e, "once") || *each)
        return RAP_OK;
    return rap_fail(RAP_ERR_ARG, "RAP_PREP_ROWS=%s: expected once (a row kernel chooses each "
                    "desc's op once for its rows, the default) or each (the executor before "
                    "2026-12-04, for A/B runs)", e);
}

rap_status rap_prep_knobs_check(void)
{
    bool each;
    return prep_rows_env(&each);
}

/* The checks of create before it sizes anything: args, schema, the knob,
 * the GPU, fusion vs plan, op implementations. */
static rap_status validate(const rap_plan *plan, const rap_fusion *fusion,
                           const rap_prep_config *cfg)
{
    if (!plan || !fusion || !cfg)
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: plan, fusion and config are required");
    if (cfg->device != RAP_CPU && cfg->device != RAP_GPU)
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: device must be RAP_CPU or RAP_GPU, got %d",
                        (int)cfg->device);
    if (cfg->max_rows < 1 || cfg->max_rows > MAX_ROWS_LIMIT)
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: max_rows must be in [1, 2^40], got %lld",
                        (long long)cfg->max_rows);
    if (cfg->threads < 0)
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: threads must be >= 0, got %d", cfg->threads);
    const rap_schema s = plan->schema;
    if (s.n_dense < 0 || s.n_sparse < 0 || s.ids_per_row < 1 || s.ids_per_row > (1 << 20))
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: bad schema (dense %d, sparse %d, ids/row %d)",
                        s.n_dense, s.n_sparse, s.ids_per_row);
    RAP_TRY(rap_prep_knobs_check());
    if (cfg->device == RAP_GPU) {
        char why[256];
        if (!rap_gpu_available(why, sizeof why))
            return rap_fail(RAP_ERR_NO_GPU, "GPU executor asked for, but %s", why);
    }

    int *kernel_of = rap_malloc(sizeof(int) * (size_t)(plan->n_nodes + 1), "executor check");
    if (!kernel_of)
        return RAP_ERR_NOMEM;
    rap_status st = check_fusion(plan, fusion, kernel_of);
    rap_free(kernel_of);
    RAP_TRY(st);
    RAP_TRY(check_impls(plan, fusion, cfg->device));

    return RAP_OK;
}

/* A new executor for plan with its host tables, before any buffer, and
 * its aux offsets (n_nodes + 1); on failure nothing stays allocated. */
static rap_status start(const rap_plan *plan, const rap_prep_config *cfg, rap_prep **out,
                        size_t **aux_off)
{
    rap_prep *p = rap_calloc(sizeof *p, "executor");
    *aux_off = rap_malloc(sizeof(size_t) * (size_t)(plan->n_nodes + 1), "executor aux");
    if (!p || !*aux_off) {
        rap_free(p);
        rap_free(*aux_off);
        *aux_off = NULL;
        return RAP_ERR_NOMEM;
    }
    p->device = cfg->device;
    p->schema = plan->schema;
    p->B = cfg->max_rows;
    (void)prep_rows_env(&p->rows_each); /* validate() refused a bad value */
    *out = p;
    return RAP_OK;
}

rap_status rap_prep_bytes(const rap_plan *plan, const rap_fusion *fusion,
                          const rap_prep_config *cfg, double *bytes)
{
    *bytes = 0;
    RAP_TRY(validate(plan, fusion, cfg));
    rap_prep *p;
    size_t *aux_off, aux_total = 0;
    RAP_TRY(start(plan, cfg, &p, &aux_off));
    arena_cursor cur;
    rap_status st = size_arena(p, plan, fusion, aux_off, &aux_total, &cur);
    if (st == RAP_OK)
        *bytes = cur.at_d > 4.0e18 ? cur.at_d : (double)cur.at;
    rap_free(aux_off);
    rap_prep_free(p);
    return st;
}

/* Validates, sizes, checks the memory, allocates and fills everything.
 * On failure *out is NULL, nothing stays allocated, and the message says
 * why. The plan and fusion are not kept: they may be freed after create. */
rap_status rap_prep_create(const rap_plan *plan, const rap_fusion *fusion,
                           const rap_prep_config *cfg, rap_prep **out)
{
    if (!out)
        return rap_fail(RAP_ERR_ARG, "rap_prep_create: out is NULL");
    *out = NULL;
    RAP_TRY(validate(plan, fusion, cfg));
    rap_prep *p;
    size_t *aux_off;
    RAP_TRY(start(plan, cfg, &p, &aux_off));
    void *staging = NULL;
    rap_status st = build(p, plan, fusion, cfg, aux_off, &staging);
    rap_free(staging);
    rap_free(aux_off);
    if (st != RAP_OK) {
        rap_prep_free(p);
        return st;
    }
    *out = p;
    return RAP_OK;
}

/* ------------------------------------------------------------ load */

/* Checks b (schema, rows <= B, sparse offset ends: not for a batch in
 * device memory) and copies it into the input block: CPU synchronously (b
 * reusable at once), GPU asynchronously on the executor's stream (b, host
 * or device memory, unchanged until rap_prep_sync). Starts a new
 * generation: COMPUTED offsets of the previous batch no longer count. */
rap_status rap_prep_load(rap_prep *p, const rap_batch *b)
{
    if (!p || !b)
        return rap_fail(RAP_ERR_ARG, "rap_prep_load: executor and batch are required");
    const rap_schema s = p->schema;
    if (b->schema.n_dense != s.n_dense || b->schema.n_sparse != s.n_sparse ||
        b->schema.ids_per_row != s.ids_per_row)
        return rap_fail(RAP_ERR_ARG, "rap_prep_load: batch schema (%d dense, %d sparse, %d ids/row) "
                                     "differs from the plan's (%d, %d, %d)",
                        b->schema.n_dense, b->schema.n_sparse, b->schema.ids_per_row, s.n_dense,
                        s.n_sparse, s.ids_per_row);
    if (b->rows < 0 || b->rows > p->B || b->rows > b->cap)
        return rap_fail(RAP_ERR_ARG, "rap_prep_load: batch of %lld rows (capacity %lld) does not "
                                     "fit an executor made for %lld rows",
                        (long long)b->rows, (long long)b->cap, (long long)p->B);
    const int64_t rows = b->rows, K = s.ids_per_row;
    if (!b->label || (s.n_dense && (!b->dense || !b->dense_valid)) ||
        (s.n_sparse && (!b->sparse_off || !b->sparse_ids || !b->sparse_valid)))
        return rap_fail(RAP_ERR_ARG, "rap_prep_load: batch arrays are not allocated");
    if (b->device && p->device != RAP_GPU)
        return rap_fail(RAP_ERR_ARG, "rap_prep_load: a batch in device memory for an executor "
                                     "on the CPU");
    /* a device batch (the GPU parser's rows) is not read by the host: its
     * offsets were made by the kernels that the host parser's equal */
    for (int j = 0; !b->device && j < s.n_sparse; j++) {
        const int64_t *off = b->sparse_off + (size_t)j * (size_t)(b->cap + 1);
        if (off[0] != 0 || off[rows] < 0 || off[rows] > rows * K)
            return rap_fail(RAP_ERR_DATA, "rap_prep_load: sparse column cat_%d has offsets %lld..%lld "
                                          "for %lld rows (expected 0..at most %lld)",
                            j, (long long)off[0], (long long)off[rows], (long long)rows,
                            (long long)(rows * K));
    }
    if (p->device == RAP_GPU) {
        RAP_TRY(rap_prep_gpu_load(p, b));
    } else {
        /* CPU: copy the used rows (b may be reused as soon as load returns) */
        const size_t B = (size_t)p->B, cap = (size_t)b->cap, r = (size_t)rows;
        memcpy(p->in.label, b->label, sizeof(float) * r);
        for (int j = 0; j < s.n_dense; j++) {
            memcpy(p->in.dense + j * B, b->dense + j * cap, sizeof(float) * r);
            memcpy(p->in.dense_valid + j * B, b->dense_valid + j * cap, r);
        }
        for (int j = 0; j < s.n_sparse; j++) {
            const int64_t *off = b->sparse_off + j * (cap + 1);
            memcpy(p->in.sparse_off + j * (B + 1), off, sizeof(int64_t) * (r + 1));
            memcpy(p->in.sparse_ids + j * B * (size_t)K, b->sparse_ids + j * cap * (size_t)K,
                   sizeof(int64_t) * (size_t)off[rows]);
            memcpy(p->in.sparse_valid + j * B, b->sparse_valid + j * cap, r);
        }
    }
    p->rows = rows;
    p->first_row = b->first_row;
    p->in.rows = rows;
    if (++p->generation == 0)
        p->generation = 1;
    return RAP_OK;
}

/* ------------------------------------------------------------ CPU run */

typedef struct {
    const rap_desc *d;
    rap_op_cpu_fn fn;       /* one-type kernels: fn on desc u */
    const int32_t *heads;   /* row kernels (fn NULL): group u of these heads */
    int64_t r0, r1, chunk, nchunks;
} cpu_job;

static void cpu_job_item(void *ctx, int64_t i)
{
    const cpu_job *j = ctx;
    int64_t u = i / j->nchunks, c = i % j->nchunks;
    int64_t a = j->r0 + c * j->chunk;
    int64_t b = a + j->chunk < j->r1 ? a + j->chunk : j->r1;
    if (j->fn)
        j->fn(&j->d[u], a, b);
    else
        rap_op_rows_cpu(j->d, j->heads, (int)u, a, b);
}

/* Runs nu units (descs with fn, else row-kernel groups of heads) x rows
 * [r0, r1), split into row chunks so that every pool thread has work (a
 * group's chunk runs its descs one after the other: rows never cross
 * chunks). */
static void cpu_for_units(rap_prep *p, const rap_desc *d, rap_op_cpu_fn fn, const int32_t *heads,
                          int nu, int64_t r0, int64_t r1)
{
    int64_t n = r1 - r0, chunk = CPU_CHUNK_ROWS;
    int64_t want = (4 * (int64_t)rap_pool_threads(p->pool) + nu - 1) / nu; /* chunks per unit */
    if (want > 1 && (n + want - 1) / want < chunk)
        chunk = (n + want - 1) / want;
    if (chunk < CPU_MIN_CHUNK_ROWS)
        chunk = CPU_MIN_CHUNK_ROWS;
    cpu_job job = {d, fn, heads, r0, r1, chunk, (n + chunk - 1) / chunk};
    rap_pool_for(p->pool, (int64_t)nu * job.nchunks, cpu_job_item, &job);
}

/* fn over nd descs x rows [r0, r1). */
static void cpu_for(rap_prep *p, const rap_desc *d, int nd, int64_t r0, int64_t r1,
                    rap_op_cpu_fn fn)
{
    cpu_for_units(p, d, fn, NULL, nd, r0, r1);
}

typedef struct {
    const rap_desc *d;
    int64_t rows;
} cpu_scan_job;

/* yoff = exclusive prefix sum of len over rows [0, rows]. */
static void cpu_scan_item(void *ctx, int64_t i)
{
    const cpu_scan_job *j = ctx;
    const rap_desc *d = &j->d[i];
    int64_t s = 0;
    d->yoff[0] = 0;
    for (int64_t r = 0; r < j->rows; r++) {
        s += d->len[r];
        d->yoff[r + 1] = s;
    }
}

/* CPU piece: with len (a COMPUTED kernel's offsets to make), len phase
 * over all rows and the per-desc scan first; then the write phase over
 * [r0, r1). */
static rap_status cpu_run_kernel(rap_prep *p, int k, int d0, int d1, int64_t r0, int64_t r1,
                                 bool len)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    const rap_op_impl *im = &rap_op_impls[kn->op];
    const rap_desc *d = p->descs + kn->first + d0;
    int nd = d1 - d0;
    if (len) {
        cpu_for(p, d, nd, 0, p->rows, im->len_cpu);
        cpu_scan_job sj = {d, p->rows};
        rap_pool_for(p->pool, nd, cpu_scan_item, &sj);
        p->launches += 2;
    }
    if (r1 > r0) {
        cpu_for(p, d, nd, r0, r1, im->cpu);
        p->launches++;
    }
    return RAP_OK;
}

/* CPU piece of a row kernel: groups [g0, g1) over rows [r0, r1). */
static void cpu_run_rows(rap_prep *p, int k, int g0, int g1, int64_t r0, int64_t r1)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    cpu_for_units(p, p->descs + kn->first, NULL, p->heads + kn->head0 + g0, g1 - g0, r0, r1);
    p->launches++;
}

/* Group g0 of row kernel k starting at desc d0 and g1 ending at d1, or
 * RAP_ERR_ARG: a piece of a row kernel holds whole groups. */
static rap_status rows_range(const rap_prep *p, int k, int d0, int d1, int *g0, int *g1)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    const int32_t *h = p->heads + kn->head0;
    *g0 = *g1 = -1;
    for (int g = 0; g <= kn->n_groups; g++) {
        if (h[g] == d0)
            *g0 = g;
        if (h[g] == d1)
            *g1 = g;
    }
    if (*g0 < 0 || *g1 < 0)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run_kernel: row kernel %d: descriptors [%d, %d) "
                        "cut a group (a piece holds whole groups)", k, d0, d1);
    return RAP_OK;
}

/* ------------------------------------------------------------ run */

/* Checks the ranges, clips r1 to the loaded rows, then runs the piece on
 * the device. A COMPUTED kernel's offsets (len phase over all loaded rows
 * + prefix sum) are made by a piece at r0 == 0 and by the first piece of a
 * batch whose descs have none yet, whatever its r0: a rank of several may
 * compute only a later share of a column (docs/EXECUTOR.md "Running and
 * splitting"). */
rap_status rap_prep_run_kernel(rap_prep *p, int k, int d0, int d1, int64_t r0, int64_t r1,
                               void *stream)
{
    if (!p)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run_kernel: executor is NULL");
    if (k < 0 || k >= p->n_kernels)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run_kernel: kernel %d of %d", k, p->n_kernels);
    const rap_prep_kernel *kn = &p->kernels[k];
    if (d0 < 0 || d1 > kn->n || d0 > d1)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run_kernel: kernel %d: descriptors [%d, %d) of %d", k,
                        d0, d1, kn->n);
    if (r0 < 0 || r1 < r0)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run_kernel: kernel %d: rows [%lld, %lld)", k,
                        (long long)r0, (long long)r1);
    if (r1 > p->rows)
        r1 = p->rows;
    if (d0 == d1 || p->rows == 0 || kn->identity) /* identities: nothing to compute */
        return RAP_OK;
    if (kn->n_groups > 0) {
        int g0, g1;
        RAP_TRY(rows_range(p, k, d0, d1, &g0, &g1));
        if (r1 <= r0)
            return RAP_OK;
        if (p->device == RAP_GPU)
            return rap_prep_gpu_run_rows(p, k, g0, g1, r0, r1, stream);
        cpu_run_rows(p, k, g0, g1, r0, r1);
        return RAP_OK;
    }
    bool len = kn->computed && r0 == 0;
    for (int j = d0; kn->computed && !len && j < d1; j++)
        len = p->ready[kn->first + j] != p->generation;
    if (p->device == RAP_GPU)
        RAP_TRY(rap_prep_gpu_run_kernel(p, k, d0, d1, r0, r1, len, stream));
    else
        RAP_TRY(cpu_run_kernel(p, k, d0, d1, r0, r1, len));
    if (len)
        for (int j = d0; j < d1; j++)
            p->ready[kn->first + j] = p->generation;
    return RAP_OK;
}

/* Every kernel in order, all descs, all loaded rows. */
rap_status rap_prep_run(rap_prep *p)
{
    if (!p)
        return rap_fail(RAP_ERR_ARG, "rap_prep_run: executor is NULL");
    for (int k = 0; k < p->n_kernels; k++)
        RAP_TRY(rap_prep_run_kernel(p, k, 0, p->kernels[k].n, 0, p->rows, NULL));
    return RAP_OK;
}

/* Waits for the executor's stream (CPU: work is already done). */
rap_status rap_prep_sync(rap_prep *p)
{
    if (!p)
        return rap_fail(RAP_ERR_ARG, "rap_prep_sync: executor is NULL");
    return p->device == RAP_GPU ? rap_prep_gpu_sync(p) : RAP_OK;
}

rap_status rap_prep_pack_dense(rap_prep *p, const int *cols, int n, float *dst, int stride,
                               bool *in_place)
{
    *in_place = false;
    if (!p || n < 0 || (n > 0 && (!cols || !dst)) || stride < 1)
        return rap_fail(RAP_ERR_ARG, "rap_prep_pack_dense: bad arguments (%d columns, stride %d)",
                        n, stride);
    int *desc_of = rap_malloc(sizeof(int) * (size_t)(n + 1), "packing in place");
    if (!desc_of)
        return RAP_ERR_NOMEM;
    /* the row-kernel desc computing each column; all or nothing */
    bool ok = true;
    int at = 0;
    for (int i = 0; i < n && ok; i++) {
        if (cols[i] < 0 || cols[i] >= p->n_cols) {
            rap_free(desc_of);
            return rap_fail(RAP_ERR_ARG, "rap_prep_pack_dense: column %d of %d", cols[i], p->n_cols);
        }
        int node = p->col_node[cols[i]];
        const rap_prep_node *v = &p->nodes[node];
        if (v->kind == RAP_SPARSE) {
            rap_free(desc_of);
            return rap_fail(RAP_ERR_ARG, "rap_prep_pack_dense: column %d is sparse", cols[i]);
        }
        desc_of[i] = -1;
        for (int k = 0; k < p->n_kernels && desc_of[i] < 0; k++)
            for (int j = 0; p->kernels[k].n_groups > 0 && j < p->kernels[k].n; j++)
                if (p->desc_node[p->kernels[k].first + j] == node)
                    desc_of[i] = p->kernels[k].first + j;
        for (int q = 0; q < i && desc_of[i] >= 0; q++)
            ok &= desc_of[q] != desc_of[i];
        ok &= desc_of[i] >= 0;
        at += v->width;
    }
    if (ok && at > stride) {
        rap_free(desc_of);
        return rap_fail(RAP_ERR_ARG, "rap_prep_pack_dense: the columns are %d floats wide, the "
                        "packed rows %d", at, stride);
    }
    if (ok) {
        at = 0;
        for (int i = 0; i < n; i++) {
            p->descs[desc_of[i]].pack = dst + at;
            p->descs[desc_of[i]].pack_stride = stride;
            at += p->nodes[p->col_node[cols[i]]].width;
        }
        if (p->device == RAP_GPU) {
            rap_status st = rap_prep_gpu_upload(p, p->descs_dev, p->descs,
                                                sizeof(rap_desc) * (size_t)p->n_descs);
            if (st != RAP_OK) {
                rap_free(desc_of);
                return st;
            }
        }
        *in_place = true;
    }
    rap_free(desc_of);
    return RAP_OK;
}

int rap_prep_n_kernels(const rap_prep *p) { return p ? p->n_kernels : 0; }

int rap_prep_unit_start(const rap_prep *p, int k, int d)
{
    const rap_prep_kernel *kn = &p->kernels[k];
    if (kn->n_groups == 0 || d >= kn->n)
        return d;
    const int32_t *h = p->heads + kn->head0;
    int g = 0;
    while (g + 1 < kn->n_groups && h[g + 1] <= d)
        g++;
    return h[g];
}

int rap_prep_n_descs(const rap_prep *p, int k)
{
    return p && k >= 0 && k < p->n_kernels ? p->kernels[k].n : 0;
}

int64_t rap_prep_launches(const rap_prep *p) { return p ? p->launches : 0; }

/* ------------------------------------------------------------ columns */

/* A lookup in the data views: pointers into the arena, no copy, no wait. */
rap_status rap_prep_column(const rap_prep *p, int col, rap_col_view *v)
{
    if (!p || !v)
        return rap_fail(RAP_ERR_ARG, "rap_prep_column: executor and view are required");
    if (col < 0 || col >= p->n_cols)
        return rap_fail(RAP_ERR_ARG, "rap_prep_column: column %d of %d", col, p->n_cols);
    const rap_prep_node *n = &p->nodes[p->col_node[col]];
    memset(v, 0, sizeof *v);
    v->kind = n->kind;
    v->width = n->width;
    v->rows = p->rows;
    v->val = n->val;
    v->off = n->off;
    v->ids = n->ids;
    v->valid = n->valid;
    v->bounded = n->bounded;
    v->lo = n->lo;
    v->hi = n->hi;
    return RAP_OK;
}

const float *rap_prep_label(const rap_prep *p) { return p ? p->in.label : NULL; }

/* Copies n bytes of an executor buffer to host memory (after the queued
 * work, on the GPU). */
static rap_status copy_out(const rap_prep *p, void *dst, const void *src, size_t n)
{
    if (n == 0)
        return RAP_OK;
    if (p->device == RAP_GPU)
        return rap_prep_gpu_download(p, dst, src, n);
    memcpy(dst, src, n);
    return RAP_OK;
}

/* Frees the arrays of a fetched column and zeroes it. Accepts NULL. */
void rap_host_column_free(rap_host_column *c)
{
    if (!c)
        return;
    rap_free(c->val);
    rap_free(c->off);
    rap_free(c->ids);
    rap_free(c->valid);
    memset(c, 0, sizeof *c);
}

/* Copies view n's loaded rows into freshly allocated host arrays of out
 * (the caller frees out on failure). */
static rap_status fetch(const rap_prep *p, const rap_prep_node *n, rap_host_column *out)
{
    const int64_t rows = p->rows;
    const size_t r = (size_t)rows;
    out->kind = n->kind;
    out->width = n->width;
    out->rows = rows;
    out->valid = rap_malloc(r, "fetched column");
    if (!out->valid)
        return RAP_ERR_NOMEM;
    if (n->valid)
        RAP_TRY(copy_out(p, out->valid, n->valid, r));
    else
        memset(out->valid, 1, r);
    if (n->kind != RAP_SPARSE) {
        size_t cnt = r * (size_t)n->width;
        out->val = rap_malloc(sizeof(float) * cnt, "fetched column");
        if (!out->val)
            return RAP_ERR_NOMEM;
        return copy_out(p, out->val, n->val, sizeof(float) * cnt);
    }
    out->off = rap_malloc(sizeof(int64_t) * (r + 1), "fetched column");
    if (!out->off)
        return RAP_ERR_NOMEM;
    RAP_TRY(copy_out(p, out->off, n->off, sizeof(int64_t) * (r + 1)));
    int64_t base = out->off[0], cnt = out->off[rows] - base;
    if (base < 0 || cnt < 0 || base + cnt > (int64_t)p->B * n->ids_cap)
        return rap_fail(RAP_ERR_INTERNAL, "rap_prep_fetch: offsets %lld..%lld outside the column's "
                                          "%lld ids",
                        (long long)base, (long long)out->off[rows], (long long)(p->B * n->ids_cap));
    out->ids = rap_malloc(sizeof(int64_t) * (size_t)cnt, "fetched column");
    if (!out->ids)
        return RAP_ERR_NOMEM;
    RAP_TRY(copy_out(p, out->ids, n->ids + base, sizeof(int64_t) * (size_t)cnt));
    for (int64_t i = 0; i <= rows; i++)
        out->off[i] -= base;
    return RAP_OK;
}

/* Waits for queued work and copies column col to host memory (see rap.h).
 * On failure out is empty. */
rap_status rap_prep_fetch(const rap_prep *p, int col, rap_host_column *out)
{
    if (!p || !out)
        return rap_fail(RAP_ERR_ARG, "rap_prep_fetch: executor and output are required");
    memset(out, 0, sizeof *out);
    if (col < 0 || col >= p->n_cols)
        return rap_fail(RAP_ERR_ARG, "rap_prep_fetch: column %d of %d", col, p->n_cols);
    rap_status st = fetch(p, &p->nodes[p->col_node[col]], out);
    if (st != RAP_OK)
        rap_host_column_free(out);
    return st;
}

/* ------------------------------------------------------------ accounting */

/* Number of ids in rows [0, rows) of a sparse view. */
static rap_status n_ids(const rap_prep *p, const rap_prep_node *n, int64_t *cnt)
{
    int64_t a = 0, b = 0;
    RAP_TRY(copy_out(p, &a, n->off, sizeof a));
    RAP_TRY(copy_out(p, &b, n->off + p->rows, sizeof b));
    *cnt = b - a;
    return RAP_OK;
}

/* Bytes of one column over the loaded rows. with_off counts its per-row
 * offsets, with_valid its valid array (when it has one). */
static rap_status col_bytes(const rap_prep *p, const rap_prep_node *n, bool with_off,
                            bool with_valid, int64_t *bytes)
{
    const int64_t R = p->rows;
    int64_t b = n->valid && with_valid ? R : 0;
    if (n->kind == RAP_SPARSE) {
        int64_t cnt = 0;
        RAP_TRY(n_ids(p, n, &cnt));
        b += 8 * cnt + (with_off ? 8 * (R + 1) : 0);
    } else {
        b += 4 * R * n->width;
    }
    *bytes = b;
    return RAP_OK;
}

rap_status rap_prep_kernel_bytes(const rap_prep *p, int k, int64_t *bytes)
{
    *bytes = 0;
    if (!p || k < 0 || k >= p->n_kernels)
        return rap_fail(RAP_ERR_ARG, "rap_prep_kernel_bytes: kernel %d", k);
    const rap_prep_kernel *kn = &p->kernels[k];
    int64_t total = 0;
    for (int j = 0; j < kn->n; j++) {
        int i = p->desc_node[kn->first + j];
        const rap_prep_node *x = &p->nodes[p->nodes[i].input], *y = &p->nodes[i];
        /* a sparse op keeping its input's lists (SAME) walks the ids only;
         * other ops read the per-row offsets and the valid array */
        bool same = y->kind == RAP_SPARSE && p->descs[kn->first + j].off_mode == RAP_OFF_SAME;
        int64_t bx = 0, by = 0;
        RAP_TRY(col_bytes(p, x, !same, !same, &bx));
        /* outputs share their input's valid (never written); offsets are
         * written only when computed */
        RAP_TRY(col_bytes(p, y, kn->computed, false, &by));
        total += bx + by;
    }
    *bytes = total;
    return RAP_OK;
}
