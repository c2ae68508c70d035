/*
 * features.c -- static features of kernel slices (features.h) and the
 * analytic fallback latency model.
 */
#include "plan/features.h"

#include <stdio.h>

rap_analytic rap_analytic_defaults(void)
{
    rap_analytic a = {0.006, 2000.0};
    return a;
}

double rap_analytic_ms(const rap_analytic *a, const rap_kfeat *f)
{
    /* a computed kernel's r0 == 0 piece also runs the length pass and the
     * scan over the batch; later pieces (batch_rows 0) only write */
    double launches = f->computed && f->batch_rows > 0 ? 3.0 : 1.0;
    return launches * a->launch_ms + f->bytes / (a->gbytes_per_s * 1e9) * 1e3;
}

/* The measured mean ids a row of node's output (rap_node.mean_ids of its
 * raw column, through a chain of ops that keep the input's lengths); 0
 * when not measured or when some op on the way changes the lengths. */
static double measured_width(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    while (n->op != RAP_OP_INPUT) {
        if (n->off != RAP_OFF_SAME || n->input < 0)
            return 0;
        n = &p->nodes[n->input];
    }
    return n->kind == RAP_SPARSE ? n->mean_ids : 0;
}

double rap_node_in_width(const rap_plan *p, int node)
{
    const int i = p->nodes[node].input;
    const rap_node *in = &p->nodes[i];
    if (in->kind != RAP_SPARSE)
        return 1.0;
    double m = measured_width(p, i);
    if (m > 0)
        return m;
    return in->ids_per_row > 0 ? (double)in->ids_per_row : 1.0;
}

double rap_node_row_bytes(const rap_plan *p, int node)
{
    const rap_node *n = &p->nodes[node];
    const rap_node *in = &p->nodes[n->input];
    double b = 0;
    if (in->kind == RAP_DENSE) {
        b += 4 + (in->nullable ? 1 : 0);
    } else {
        b += 8.0 * rap_node_in_width(p, node);
        if (n->off != RAP_OFF_SAME)
            b += 8 + (in->nullable ? 1 : 0);
    }
    if (n->kind == RAP_DENSE)
        b += 4;
    else if (n->kind == RAP_VECTOR)
        b += 4.0 * n->width;
    else {
        double m = n->off == RAP_OFF_SAME ? measured_width(p, node) : 0;
        b += 8.0 * (m > 0 ? m : n->ids_per_row > 0 ? (double)n->ids_per_row : 1.0) +
             (n->off == RAP_OFF_COMPUTED ? 8 : 0);
    }
    return b;
}

void rap_kfeat_of(const rap_plan *p, const int *nodes, int d0, int d1, double rows,
                  double batch_rows, rap_kfeat *f)
{
    const rap_node *first = &p->nodes[nodes[d0]];
    f->op = first->op;
    f->variant = rap_node_variant(p, nodes[d0]);
    f->computed = first->off == RAP_OFF_COMPUTED;
    f->descs = d1 - d0;
    f->rows = rows;
    f->batch_rows = batch_rows;
    double w = 0, bytes = 0;
    for (int j = d0; j < d1; j++) {
        w += rap_node_in_width(p, nodes[j]);
        bytes += rap_node_row_bytes(p, nodes[j]);
    }
    f->avg_width = d1 > d0 ? w / (d1 - d0) : 0;
    f->total_ids = rows * w;
    f->bytes = rows * bytes;
}

void rap_kfeat_vector(const rap_kfeat *f, float out[RAP_KFEAT_N])
{
    out[0] = (float)f->descs;
    out[1] = (float)f->rows;
    out[2] = (float)f->avg_width;
    out[3] = (float)f->total_ids;
    out[4] = (float)f->bytes;
    out[5] = (float)f->batch_rows;
}

void rap_ktype_name(rap_op_type op, int variant, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%d", op == RAP_OP_INPUT ? "rows" : rap_op_name(op), variant);
}

void rap_kfeat_of_rows(const rap_plan *p, const int *nodes, int d0, int d1, double rows,
                       rap_kfeat *f)
{
    rap_kfeat_of(p, nodes, d0, d1, rows, rows, f);
    f->op = RAP_OP_INPUT;
    f->variant = 0;
    f->computed = false;
}
