/* batch.c -- the raw columnar batch: one block, fixed layout per (schema, B). */
#include "core/core.h"

#include <string.h>

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Lays out the arrays of a batch inside block (NULL: only sizes). Returns
 * the block size. Order: label, dense, dense_valid, sparse_off, sparse_ids,
 * sparse_valid; each array starts on a 256-byte boundary. */
static size_t layout(rap_batch *b, rap_schema s, int64_t cap, char *block)
{
    size_t B = (size_t)cap, nd = (size_t)s.n_dense, ns = (size_t)s.n_sparse;
    size_t k = (size_t)(s.ids_per_row > 0 ? s.ids_per_row : 1);
    size_t at = 0;
#define PLACE(field, type, count)                                    \
    do {                                                             \
        if (b)                                                       \
            b->field = block ? (type *)(void *)(block + at) : NULL;  \
        at += align256(sizeof(type) * (count));                      \
    } while (0)
    PLACE(label, float, B);
    PLACE(dense, float, nd * B);
    PLACE(dense_valid, uint8_t, nd * B);
    PLACE(sparse_off, int64_t, ns * (B + 1));
    PLACE(sparse_ids, int64_t, ns * B * k);
    PLACE(sparse_valid, uint8_t, ns * B);
#undef PLACE
    return at;
}

size_t rap_batch_bytes(rap_schema s, int64_t cap) { return layout(NULL, s, cap, NULL); }

void rap_batch_view(rap_batch *b, rap_schema s, int64_t cap, void *block)
{
    memset(b, 0, sizeof *b);
    b->schema = s;
    b->cap = cap;
    b->block = block;
    b->block_bytes = layout(b, s, cap, block);
}

rap_status rap_batch_create(rap_batch *b, rap_schema s, int64_t cap, bool pinned)
{
    memset(b, 0, sizeof *b);
    if (cap <= 0 || s.n_dense < 0 || s.n_sparse < 0 || s.ids_per_row < 1)
        return rap_fail(RAP_ERR_ARG, "batch: bad shape (rows %lld, dense %d, sparse %d, ids/row %d)",
                        (long long)cap, s.n_dense, s.n_sparse, s.ids_per_row);
    size_t n = rap_batch_bytes(s, cap);
    bool got_pinned = false;
    void *block = rap_host_alloc(n, pinned, &got_pinned, "input batch");
    if (!block)
        return RAP_ERR_NOMEM;
    memset(block, 0, n);
    rap_batch_view(b, s, cap, block);
    b->pinned = got_pinned;
    return RAP_OK;
}

void rap_batch_free(rap_batch *b)
{
    if (!b)
        return;
    rap_host_free(b->block, b->pinned);
    memset(b, 0, sizeof *b);
}

rap_schema rap_schema_criteo(void)
{
    rap_schema s = {RAP_CRITEO_DENSE, RAP_CRITEO_SPARSE, 1};
    return s;
}

/* Appends rows [a, a+n) of src to dst (same schema) column by column: one
 * memcpy per column (the sparse ids of a column in one piece, its offsets
 * rebased). dst->rows + n <= dst->cap. Same result as appending row by row. */
void rap_batch_append(rap_batch *dst, const rap_batch *src, int64_t a, int64_t n)
{
    int64_t d = dst->rows, bd = dst->cap, bs = src->cap;
    int nd = src->schema.n_dense, ns = src->schema.n_sparse;
    int64_t k = src->schema.ids_per_row;
    memcpy(dst->label + d, src->label + a, sizeof(float) * (size_t)n);
    for (int j = 0; j < nd; j++) {
        memcpy(dst->dense + j * bd + d, src->dense + j * bs + a, sizeof(float) * (size_t)n);
        memcpy(dst->dense_valid + j * bd + d, src->dense_valid + j * bs + a, (size_t)n);
    }
    for (int j = 0; j < ns; j++) {
        const int64_t *so = src->sparse_off + j * (bs + 1);
        int64_t *dof = dst->sparse_off + j * (bd + 1);
        if (d == 0)
            dof[0] = 0;
        int64_t base = dof[d] - so[a];
        memcpy(dst->sparse_ids + j * bd * k + dof[d], src->sparse_ids + j * bs * k + so[a],
               sizeof(int64_t) * (size_t)(so[a + n] - so[a]));
        for (int64_t i = 1; i <= n; i++)
            dof[d + i] = so[a + i] + base;
        memcpy(dst->sparse_valid + j * bd + d, src->sparse_valid + j * bs + a, (size_t)n);
    }
    dst->rows = d + n;
}
