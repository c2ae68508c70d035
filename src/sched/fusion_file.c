/*
 * fusion_file.c -- fusion files (fusion_file.h): the kernels of a fusion by
 * live op ids, bound to a plan by rap_plan_hash; and the check of a fusion
 * against its plan.
 */
#include "sched/fusion_file.h"

#include "core/out.h"
#include "sched/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Whether node i is a live op (not a raw input): what a fusion holds. */
static bool live_op(const rap_plan *p, int i)
{
    return p->nodes[i].live && p->nodes[i].op != RAP_OP_INPUT;
}

/* The same for any index: false for i < 0 (no input). */
static bool is_op(const rap_plan *p, int i)
{
    return i >= 0 && live_op(p, i);
}

rap_status rap_fusion_check(const rap_plan *p, const rap_fusion *f)
{
    int *kof = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "fusion check");
    if (!kof)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < p->n_nodes; i++)
        kof[i] = -1;
    rap_status st = RAP_OK;
    for (int k = 0; k < f->n && st == RAP_OK; k++) {
        const rap_kernel *kn = &f->kernels[k];
        for (int j = 0; j < kn->n && st == RAP_OK; j++) {
            int i = kn->nodes[j];
            if (i < 0 || i >= p->n_nodes || !is_op(p, i))
                st = rap_fail(RAP_ERR_PLAN, "fusion: kernel %d holds node %d, not a live op", k, i);
            else if (kof[i] >= 0)
                st = rap_fail(RAP_ERR_PLAN, "fusion: node %d is in kernels %d and %d", i, kof[i], k);
            else if (kn->group ? !rap_node_row_local(p, i)
                               : p->nodes[i].op != kn->op || rap_node_variant(p, i) != kn->variant)
                st = rap_fail(RAP_ERR_PLAN, "fusion: kernel %d (%s.%d) holds node %d of type %s.%d",
                              k, rap_op_name(kn->op), kn->variant, i, rap_op_name(p->nodes[i].op),
                              rap_node_variant(p, i));
            else
                kof[i] = k;
        }
    }
    for (int i = 0; i < p->n_nodes && st == RAP_OK; i++) {
        if (!is_op(p, i))
            continue;
        if (kof[i] < 0)
            st = rap_fail(RAP_ERR_PLAN, "fusion: op node %d (plan line %d) is in no kernel", i,
                          p->nodes[i].line);
        else if (is_op(p, p->nodes[i].input) && kof[p->nodes[i].input] >= kof[i] &&
                 !rap_fusion_same_group(f, kof[i], p->nodes[i].input, i))
            st = rap_fail(RAP_ERR_PLAN, "fusion: node %d runs in kernel %d, not after its input's "
                          "kernel %d", i, kof[i], kof[p->nodes[i].input]);
    }
    for (int k = 0; k < f->n && st == RAP_OK; k++)
        st = rap_fusion_check_groups(&f->kernels[k], k);
    rap_free(kof);
    return st;
}


rap_status rap_fusion_save(const rap_plan *p, const rap_fusion *f, const char *path)
{
    int *id = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "fusion file");
    if (!id)
        return RAP_ERR_NOMEM;
    for (int i = 0, n = 0; i < p->n_nodes; i++)
        id[i] = live_op(p, i) ? n++ : -1;
    rap_out *o;
    rap_status st = rap_out_open(path, NULL, &o);
    if (st != RAP_OK) {
        rap_free(id);
        return st;
    }
    FILE *fp = rap_out_file(o);
    char name[128];
    const char *b = strrchr(p->source, '/');
    snprintf(name, sizeof name, "%s", b ? b + 1 : p->source);
    for (char *c = name; *c; c++)
        if (*c == ' ' || *c == '\t')
            *c = '_';
    fprintf(fp, "rap-fusion 2\n# kernels in launch order; ops are live op ids in plan order, a row "
                "kernel's groups separated by ';' (docs/PLANNER.md)\n");
    fprintf(fp, "plan %s %016llx\n", name, (unsigned long long)rap_plan_hash(p));
    for (int k = 0; k < f->n; k++) {
        const rap_kernel *kn = &f->kernels[k];
        fprintf(fp, "kernel op=%s variant=%d level=%d ops=", rap_kernel_op_name(kn),
                kn->variant, kn->level);
        for (int j = 0, g = 0; j < kn->n; j++) {
            bool head = kn->group && g < kn->n_groups && kn->group[g] == j;
            g += head;
            fprintf(fp, "%s%d", j == 0 ? "" : head ? ";" : ",", id[kn->nodes[j]]);
        }
        fputc('\n', fp);
    }
    rap_free(id);
    return rap_out_commit(o);
}

rap_status rap_fusion_load(const rap_plan *p, const char *path, rap_fusion *f)
{
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return rap_fail(RAP_ERR_IO, "fusion %s: cannot open: %s", path, strerror(errno));
    int n_ops = 0;
    int *node = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "fusion file");
    f->kernels = rap_calloc(sizeof *f->kernels * (size_t)(p->n_nodes + 1), "fusion file");
    size_t cap = 1 << 16;
    char *line = rap_malloc(cap, "fusion file");
    rap_status st = RAP_OK;
    if (!node || !f->kernels || !line) {
        st = RAP_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < p->n_nodes; i++)
        if (live_op(p, i))
            node[n_ops++] = i;
    int lineno = 0;
    bool magic = false, have_plan = false;
    while (st == RAP_OK && fgets(line, (int)cap, fp)) {
        lineno++;
        size_t len = strlen(line);
        if (len == cap - 1 && line[len - 1] != '\n') {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: line longer than %zu bytes", path, lineno, cap - 2);
            break;
        }
        if (len && line[len - 1] != '\n' && feof(fp)) { /* rap_fusion_save ends every line */
            st = rap_fail(RAP_ERR_DATA, "%s:%d: the file ends inside this line (no newline): "
                          "truncated? write it again with rap plan", path, lineno);
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = 0;
        if (!len || line[0] == '#')
            continue;
        int ver;
        if (!magic) {
            if (sscanf(line, "rap-fusion %d", &ver) != 1 || ver < 1 || ver > 2)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"rap-fusion 1\" or \"rap-fusion 2\"",
                              path, lineno);
            magic = true;
        } else if (!strncmp(line, "plan ", 5)) {
            char name[256];
            unsigned long long h;
            if (sscanf(line, "plan %255s %llx", name, &h) != 2)
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"plan NAME HASH\"", path, lineno);
            else if (h != rap_plan_hash(p))
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: fusion made for plan %s (hash %016llx), not "
                              "this plan (hash %016llx)", path, lineno, name, h,
                              (unsigned long long)rap_plan_hash(p));
            have_plan = true;
        } else if (!strncmp(line, "kernel ", 7)) {
            char op[64];
            int variant, level, at = 0;
            if (!have_plan || sscanf(line, "kernel op=%63s variant=%d level=%d ops=%n", op, &variant,
                                     &level, &at) != 3 || at == 0 || f->n >= p->n_nodes ||
                variant < 0 || variant > 64 || level < 0 || level > (1 << 20)) {
                st = rap_fail(RAP_ERR_DATA, "%s:%d: expected \"kernel op=OP variant=V level=L "
                              "ops=I,J,..\" after the plan line (V 0..64, L 0..2^20, at most one "
                              "kernel per op)", path, lineno);
                break;
            }
            rap_kernel *kn = &f->kernels[f->n++];
            kn->variant = variant;
            kn->level = level;
            kn->op = RAP_OP_COUNT;
            bool rows = !strcmp(op, "rows");
            for (int t = 1; t < RAP_OP_COUNT; t++)
                if (!strcmp(op, rap_op_name((rap_op_type)t)))
                    kn->op = (rap_op_type)t;
            int count = 1, groups = 1;
            for (const char *c = line + at; *c; c++) {
                count += *c == ',' || *c == ';';
                groups += *c == ';';
            }
            kn->nodes = rap_malloc(sizeof(int) * (size_t)count, "fusion file");
            if (rows) {
                kn->op = RAP_OP_INPUT;
                kn->group = rap_malloc(sizeof(int) * (size_t)(groups + 1), "fusion file");
            }
            if (!kn->nodes || (rows && !kn->group)) {
                st = RAP_ERR_NOMEM;
                break;
            }
            if (rows)
                kn->group[kn->n_groups++] = 0;
            const char *c = line + at;
            while (st == RAP_OK && *c) {
                char *end;
                long v = strtol(c, &end, 10);
                if (end == c || v < 0 || v >= n_ops || (*end && *end != ',' && *end != ';') ||
                    (*end == ';' && !rows))
                    st = rap_fail(RAP_ERR_DATA, "%s:%d: expected op ids 0..%d separated by commas%s",
                                  path, lineno, n_ops - 1, rows ? " (groups by ';')" : "");
                else
                    kn->nodes[kn->n++] = node[v];
                if (st == RAP_OK && *end == ';')
                    kn->group[kn->n_groups++] = kn->n;
                c = *end ? end + 1 : end;
            }
            if (rows && st == RAP_OK)
                kn->group[kn->n_groups] = kn->n;
            if (st == RAP_OK && (kn->op == RAP_OP_COUNT || kn->n == 0))
                st = rap_fail(RAP_ERR_DATA, "%s:%d: unknown op \"%s\" or no ops", path, lineno, op);
        } else {
            st = rap_fail(RAP_ERR_DATA, "%s:%d: expected plan or kernel, got \"%.40s\"", path,
                          lineno, line);
        }
    }
    if (st == RAP_OK && !have_plan)
        st = rap_fail(RAP_ERR_DATA, "%s: no \"plan NAME HASH\" line", path);
    if (st == RAP_OK) {
        st = rap_fusion_check(p, f);
        if (st != RAP_OK)
            rap_fail_context(st, "%s", path);
    }
out:
    fclose(fp);
    rap_free(node);
    rap_free(line);
    if (st != RAP_OK)
        rap_fusion_free(f);
    return st;
}
