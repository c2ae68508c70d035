/* input.c -- executor columns -> rap_model_batch (input.h). */
#include "run/input.h"

#include "core/core.h"
#include "run/pack.h"

#include <string.h>

struct rap_input {
    const rap_plan *plan;
    rap_device dev;
    int64_t max_rows;   /* B */
    void *stream;
    int n_dense;        /* ND */
    int n_tables;       /* T */
    int n_dcols;        /* dense and vector columns */
    int *dcol;          /* (n_dcols) their frame indices */
    int *scol;          /* (T) frame index of table t's column */
    rap_pack_col *pc;   /* (n_dcols) packing descriptors, rebuilt per batch */
    float *dense;       /* (B, ND) packed, on dev */
    const rap_prep *bound; /* an executor whose row kernels pack in place, or NULL */
};

rap_status rap_input_shape(const rap_plan *plan, int *n_dense, int *n_tables,
                           int64_t *table_rows)
{
    int nd = 0, nt = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        const rap_node *n = &plan->nodes[plan->cols[c].node];
        const char *name = plan->cols[c].name;
        if (n->kind != RAP_SPARSE) {
            nd += n->width;
            continue;
        }
        if (!n->bounded)
            return rap_fail(RAP_ERR_PLAN,
                            "%s: column %s holds ids with no known bound, so it cannot index an "
                            "embedding table (end its chain with sigrid_hash, clamp, bucketize "
                            "or mapid)",
                            plan->source, name);
        if (n->lo < 0)
            return rap_fail(RAP_ERR_PLAN,
                            "%s: column %s may hold negative ids (bound [%lld, %lld]); an "
                            "embedding table needs ids >= 0",
                            plan->source, name, (long long)n->lo, (long long)n->hi);
        if (nt >= RAP_MAX_TABLES)
            return rap_fail(RAP_ERR_PLAN, "%s: more than %d sparse columns (tables)",
                            plan->source, RAP_MAX_TABLES);
        table_rows[nt++] = n->hi + 1;
    }
    if (nd == 0)
        return rap_fail(RAP_ERR_PLAN, "%s: no dense column: the bottom MLP needs at least one",
                        plan->source);
    if (nt == 0)
        return rap_fail(RAP_ERR_PLAN, "%s: no sparse column: the model needs at least one table",
                        plan->source);
    *n_dense = nd;
    *n_tables = nt;
    return RAP_OK;
}

void rap_input_free(rap_input *in)
{
    if (!in)
        return;
    if (in->dev == RAP_GPU)
        rap_cuda_free(in->dense);
    else
        rap_aligned_free(in->dense);
    rap_free(in->dcol);
    rap_free(in->scol);
    rap_free(in->pc);
    rap_free(in);
}

size_t rap_input_bytes(int64_t max_rows, int n_dense)
{
    return sizeof(float) * (size_t)max_rows * (size_t)n_dense;
}

rap_status rap_input_create(const rap_plan *plan, rap_device dev, int64_t max_rows, void *stream,
                            rap_input **out)
{
    *out = NULL;
    int64_t rows[RAP_MAX_TABLES];
    int nd, nt;
    RAP_TRY(rap_input_shape(plan, &nd, &nt, rows));
    if (max_rows < 1)
        return rap_fail(RAP_ERR_ARG, "input: batch of %lld rows", (long long)max_rows);
    rap_input *in = rap_calloc(sizeof *in, "input");
    if (!in)
        return RAP_ERR_NOMEM;
    in->plan = plan;
    in->dev = dev;
    in->max_rows = max_rows;
    in->stream = stream;
    in->n_dense = nd;
    in->n_tables = nt;
    size_t nc = (size_t)plan->n_cols;
    in->dcol = rap_calloc(sizeof(int) * nc, "input columns");
    in->scol = rap_calloc(sizeof(int) * nc, "input columns");
    in->pc = rap_calloc(sizeof(rap_pack_col) * nc, "input columns");
    if (!in->dcol || !in->scol || !in->pc) {
        rap_input_free(in);
        return RAP_ERR_NOMEM;
    }
    int t = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        if (plan->nodes[plan->cols[c].node].kind == RAP_SPARSE)
            in->scol[t++] = c;
        else
            in->dcol[in->n_dcols++] = c;
    }
    size_t bytes = rap_input_bytes(max_rows, nd);
    rap_status st = RAP_OK;
    if (dev == RAP_GPU)
        st = rap_cuda_malloc((void **)&in->dense, bytes, "packed dense input");
    else if (!(in->dense = rap_aligned_alloc(bytes, "packed dense input")))
        st = RAP_ERR_NOMEM;
    if (st != RAP_OK) {
        rap_input_free(in);
        return st;
    }
    *out = in;
    return RAP_OK;
}

rap_status rap_input_make(rap_input *in, const rap_prep *prep, rap_model_batch *mb)
{
    memset(mb, 0, sizeof *mb);
    const float *label = rap_prep_label(prep);
    rap_col_view v;
    int64_t rows = -1;
    for (int i = 0; i < in->n_dcols; i++) {
        RAP_TRY(rap_prep_column(prep, in->dcol[i], &v));
        if (v.kind == RAP_SPARSE)
            return rap_fail(RAP_ERR_INTERNAL, "input: column %s is sparse, the plan said dense",
                            in->plan->cols[in->dcol[i]].name);
        in->pc[i].val = v.val;
        in->pc[i].valid = v.valid;
        in->pc[i].width = v.width;
        rows = v.rows;
    }
    for (int t = 0; t < in->n_tables; t++) {
        RAP_TRY(rap_prep_column(prep, in->scol[t], &v));
        const rap_node *n = &in->plan->nodes[in->plan->cols[in->scol[t]].node];
        if (v.kind != RAP_SPARSE || !v.bounded || v.lo != n->lo || v.hi != n->hi)
            return rap_fail(RAP_ERR_INTERNAL,
                            "input: column %s does not have the plan's kind and bound",
                            in->plan->cols[in->scol[t]].name);
        mb->off[t] = v.off;
        mb->ids[t] = v.ids;
        rows = v.rows;
    }
    if (rows < 0 || rows > in->max_rows)
        return rap_fail(RAP_ERR_ARG, "input: batch of %lld rows, the trainer was made for %lld",
                        (long long)rows, (long long)in->max_rows);
    if (prep == in->bound)
        ; /* packed in place by the executor's row kernels */
    else if (in->dev == RAP_GPU)
        RAP_TRY(rap_pack_dense_gpu(in->pc, in->n_dcols, rows, in->n_dense, in->dense, in->stream));
    else
        RAP_TRY(rap_pack_dense_cpu(in->pc, in->n_dcols, rows, in->n_dense, in->dense));
    mb->rows = rows;
    mb->dense = in->dense;
    mb->label = label;
    return RAP_OK;
}

rap_status rap_input_bind(rap_input *in, rap_prep *prep, bool *in_place)
{
    bool ok = false;
    RAP_TRY(rap_prep_pack_dense(prep, in->dcol, in->n_dcols, in->dense, in->n_dense, &ok));
    in->bound = ok ? prep : NULL;
    if (in_place)
        *in_place = ok;
    return RAP_OK;
}
