/*
 * rank_schedule.c -- the planner's per-rank manifest merged into one
 * fusion and one schedule of the rank's plan (rank_schedule.h).
 *
 * Manifest (docs/PLANNER.md "Outputs", written by rap_place_save_rank):
 *   rap-placement 1
 *   plan FILE HASH
 *   placement KIND ranks R rank r batch B global_batch BG shares K
 *   part I rows N shares k,k,.. schedule FILE fusion FILE columns c,c,..
 *   send COL share k to d      |  recv COL share k from s
 */
#include "run/rank_schedule.h"

#include "dist/hybrid.h"
#include "plan/fusion_ilp.h"
#include "plan/place.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PARTS 16
#define LINE 65536

typedef struct {
    int rows_all;          /* 1: the whole global batch; 0: one share */
    int share;             /* the share, when not the whole batch */
    char sched[1024], fusion[1024];
    int *cols;             /* (n_cols) columns of p, in the listed order */
    int n_cols;
    int line;
} part;

bool rap_rank_schedule_exists(const char *prefix)
{
    char path[1100];
    snprintf(path, sizeof path, "%s.rank0", prefix);
    return prefix && prefix[0] && access(path, R_OK) == 0;
}

/* name as written, else beside the manifest */
static void resolve(const char *manifest, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s", name);
    if (name[0] == '/' || access(out, R_OK) == 0)
        return;
    const char *slash = strrchr(manifest, '/');
    if (slash)
        snprintf(out, n, "%.*s/%s", (int)(slash - manifest), manifest, name);
}

static char *word(char **s)
{
    char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '\n' || *p == '\r')
        return NULL;
    char *w = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
        p++;
    if (*p)
        *p++ = 0;
    *s = p;
    return w;
}

/* "part I rows N shares k,.. schedule F fusion F columns c,.." */
static rap_status parse_part(const char *path, int line, char *rest, const rap_plan *p,
                             int64_t Bg, int K, int rank, int R, part *pt)
{
    memset(pt, 0, sizeof *pt);
    pt->line = line;
    char *w, *key;
    int64_t rows = -1;
    char *shares = NULL, *cols = NULL;
    if (!word(&rest)) /* the part's index */
        goto bad;
    while ((key = word(&rest))) {
        if (!(w = word(&rest)))
            goto bad;
        if (!strcmp(key, "rows"))
            rows = strtoll(w, NULL, 10);
        else if (!strcmp(key, "shares"))
            shares = w;
        else if (!strcmp(key, "schedule"))
            resolve(path, w, pt->sched, sizeof pt->sched);
        else if (!strcmp(key, "fusion"))
            resolve(path, w, pt->fusion, sizeof pt->fusion);
        else if (!strcmp(key, "columns"))
            cols = w;
        else
            goto bad;
    }
    if (rows < 1 || !shares || !cols || !pt->sched[0] || !pt->fusion[0])
        goto bad;
    /* shares: all K (the whole batch) or the rank's own single share */
    uint64_t seen = 0;
    int n_sh = 0, one = -1;
    char *save = NULL;
    for (char *t = strtok_r(shares, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = atoi(t);
        if (k < 0 || k >= K || k >= 64)
            goto bad;
        seen |= (uint64_t)1 << k;
        one = k;
        n_sh++;
    }
    if (n_sh == K) {
        pt->rows_all = 1;
        if (rows != Bg)
            return rap_fail(RAP_ERR_PLAN, "%s:%d: a part over every share has %lld rows, the "
                                          "global batch %lld", path, line, (long long)rows,
                            (long long)Bg);
    } else if (n_sh == 1 && K == R && one == rank) {
        int64_t r0, nr;
        rap_hybrid_rows(Bg, R, rank, &r0, &nr);
        if (rows != nr)
            return rap_fail(RAP_ERR_PLAN, "%s:%d: the part over share %d has %lld rows; this "
                                          "rank trains %lld of the global batch", path, line, one,
                            (long long)rows, (long long)nr);
        pt->share = one;
    } else {
        return rap_fail(RAP_ERR_PLAN,
                        "%s:%d: a part over shares %s of %d: the runtime runs parts over the "
                        "whole global batch or over the rank's own rows (share %d of %d) only "
                        "(plan with --placement owner and --row-shares 1)",
                        path, line, shares, K, rank, R);
    }
    (void)seen;
    int n = 1;
    for (const char *c = cols; *c; c++)
        n += *c == ',';
    pt->cols = rap_malloc(sizeof(int) * (size_t)n, "rank schedule");
    if (!pt->cols)
        return RAP_ERR_NOMEM;
    for (char *t = strtok_r(cols, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int c = rap_plan_find(p, t);
        if (c < 0)
            return rap_fail(RAP_ERR_PLAN, "%s:%d: column %s is not in plan %s", path, line, t,
                            p->source);
        pt->cols[pt->n_cols++] = c;
    }
    return RAP_OK;
bad:
    return rap_fail(RAP_ERR_PLAN, "%s:%d: expected 'part I rows N shares k,k,.. schedule FILE "
                                  "fusion FILE columns NAME,NAME,..'", path, line);
}

/* Reads the manifest's header and parts. */
static rap_status read_manifest(const char *path, const rap_plan *p, int rank, int R, int64_t Bg,
                                part *parts, int *n_parts)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return rap_fail(RAP_ERR_IO, "%s: cannot open: %s (rap plan --gpus %d --out PREFIX writes "
                                    "PREFIX.rank<r>)", path, strerror(errno), R);
    char *buf = rap_malloc(LINE, "rank schedule");
    if (!buf) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    rap_status st = RAP_OK;
    int line = 0, K = 0;
    bool head = false, hplan = false, hplace = false;
    *n_parts = 0;
    while (st == RAP_OK && fgets(buf, LINE, f)) {
        line++;
        char *rest = buf, *w = word(&rest);
        if (!w || w[0] == '#')
            continue;
        if (!head) {
            char *v = word(&rest);
            if (strcmp(w, "rap-placement") || !v || strcmp(v, "1"))
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: expected 'rap-placement 1' (a manifest of "
                                            "rap plan --gpus)", path, line);
            head = true;
        } else if (!strcmp(w, "plan")) {
            char *name = word(&rest), *hash = word(&rest);
            unsigned long long h = hash ? strtoull(hash, NULL, 16) : 0, want = rap_plan_hash(p);
            if (!name || !hash || h != want)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: made for plan %s (hash %s), not for %s "
                                            "(hash %016llx): plan again with rap plan --gpus %d",
                              path, line, name ? name : "?", hash ? hash : "?", p->source, want, R);
            hplan = true;
        } else if (!strcmp(w, "placement")) {
            char *kind = word(&rest), *key;
            long long v[5] = {-1, -1, -1, -1, -1};
            static const char *const keys[5] = {"ranks", "rank", "batch", "global_batch",
                                                "shares"};
            while ((key = word(&rest))) {
                char *val = word(&rest);
                for (int k = 0; k < 5 && val; k++)
                    if (!strcmp(key, keys[k]))
                        v[k] = strtoll(val, NULL, 10);
            }
            if (!kind || v[0] != R || v[1] != rank || v[3] != Bg || v[4] < R)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: planned for rank %lld of %lld ranks, global "
                                            "batch %lld; this is rank %d of %d, global batch %lld",
                              path, line, v[1], v[0], v[3], rank, R, (long long)Bg);
            K = (int)v[4];
            hplace = true;
        } else if (!strcmp(w, "part")) {
            if (!hplace || *n_parts == MAX_PARTS)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: %s", path, line,
                              hplace ? "more than 16 parts" : "a part before the placement line");
            else if ((st = parse_part(path, line, rest, p, Bg, K, rank, R, &parts[*n_parts])) ==
                     RAP_OK)
                (*n_parts)++;
        } else if (!strcmp(w, "send") || !strcmp(w, "recv")) {
            st = rap_fail(RAP_ERR_PLAN, "%s:%d: this placement moves preprocessed columns between "
                                        "ranks ('%s' lines); the runtime does not exchange "
                                        "preprocessed columns yet: plan with --placement owner "
                                        "(or search where it makes no move)", path, line, w);
        } else {
            st = rap_fail(RAP_ERR_PLAN, "%s:%d: unknown line '%s' (expected plan, placement, "
                                        "part, send or recv)", path, line, w);
        }
    }
    if (st == RAP_OK && ferror(f))
        st = rap_fail(RAP_ERR_IO, "%s: read error", path);
    if (st == RAP_OK && (!hplan || !hplace || *n_parts == 0))
        st = rap_fail(RAP_ERR_PLAN, "%s: truncated: no %s line", path,
                      !hplan ? "plan" : !hplace ? "placement" : "part");
    fclose(f);
    rap_free(buf);
    return st;
}

/* The parts' columns are exactly rp's. */
static rap_status same_columns(const char *path, const rap_plan *p, const part *parts, int np,
                               const rap_plan *rp)
{
    int total = 0;
    for (int q = 0; q < np; q++)
        for (int i = 0; i < parts[q].n_cols; i++) {
            const char *name = p->cols[parts[q].cols[i]].name;
            if (rap_plan_find(rp, name) < 0)
                return rap_fail(RAP_ERR_PLAN, "%s:%d: column %s is not one this rank "
                                              "preprocesses (its dense columns and the sparse "
                                              "columns of its tables)", path, parts[q].line, name);
            total++;
        }
    if (total != rp->n_cols)
        return rap_fail(RAP_ERR_PLAN, "%s: the parts list %d columns, this rank preprocesses %d "
                                      "(its dense columns and the sparse columns of its tables)",
                        path, total, rp->n_cols);
    return RAP_OK;
}

rap_status rap_rank_schedule_load(const char *prefix, const rap_plan *p, int rank, int R,
                                  int64_t Bg, const rap_plan *rp, rap_fusion *fus,
                                  rap_schedule **out)
{
    *out = NULL;
    memset(fus, 0, sizeof *fus);
    char path[1100];
    snprintf(path, sizeof path, "%s.rank%d", prefix, rank);
    part parts[MAX_PARTS];
    memset(parts, 0, sizeof parts);
    int np = 0;
    rap_plan *sub[MAX_PARTS] = {0};
    rap_fusion pf[MAX_PARTS];
    rap_schedule *ps[MAX_PARTS] = {0};
    memset(pf, 0, sizeof pf);
    int koff[MAX_PARTS + 1] = {0};
    rap_status st = read_manifest(path, p, rank, R, Bg, parts, &np);
    if (st == RAP_OK)
        st = same_columns(path, p, parts, np, rp);
    /* each part's own files, checked against its sub-plan */
    for (int q = 0; q < np && st == RAP_OK; q++) {
        int64_t r0, nr;
        rap_hybrid_rows(Bg, R, rank, &r0, &nr);
        st = rap_place_sub_plan(p, parts[q].cols, parts[q].n_cols, &sub[q]);
        if (st == RAP_OK)
            st = rap_fusion_load(sub[q], parts[q].fusion, &pf[q]);
        if (st == RAP_OK)
            st = rap_schedule_load(parts[q].sched, &ps[q]);
        if (st == RAP_OK)
            st = rap_schedule_validate(ps[q], sub[q], &pf[q], parts[q].rows_all ? Bg : nr);
        koff[q + 1] = koff[q] + pf[q].n;
    }
    /* one fusion: the parts' kernels in part order (node indices are p's,
     * and so rp's: sub-plans and rank plans copy every node). An op two
     * parts need (e.g. fill_null(int_0) under a dense column and under
     * bucketize(int_0)) is computed once: by the first part over the whole
     * batch that has it, else by the first part; the others drop it (and
     * their slices' descriptor ranges shrink accordingly). */
    int *keeper = NULL, *kmap = NULL, *dmap = NULL;
    if (st == RAP_OK) {
        keeper = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "rank fusion");
        kmap = rap_malloc(sizeof(int) * (size_t)(koff[np] + 1), "rank fusion");
        fus->kernels = rap_calloc(sizeof(rap_kernel) * (size_t)(koff[np] + 1), "rank fusion");
        st = keeper && kmap && fus->kernels ? RAP_OK : RAP_ERR_NOMEM;
    }
    for (int i = 0; keeper && i < p->n_nodes; i++)
        keeper[i] = -1;
    for (int pass = 0; pass < 2 && st == RAP_OK; pass++) /* whole-batch parts first */
        for (int q = 0; q < np; q++)
            for (int k = 0; parts[q].rows_all == !pass && k < pf[q].n; k++)
                for (int j = 0; j < pf[q].kernels[k].n; j++)
                    if (keeper[pf[q].kernels[k].nodes[j]] < 0)
                        keeper[pf[q].kernels[k].nodes[j]] = q;
    int max_n = 1;
    for (int q = 0; q < np; q++)
        for (int k = 0; k < pf[q].n; k++)
            max_n = pf[q].kernels[k].n + 1 > max_n ? pf[q].kernels[k].n + 1 : max_n;
    if (st == RAP_OK) {
        dmap = rap_malloc(sizeof(int) * (size_t)(koff[np] + 1) * (size_t)max_n, "rank fusion");
        st = dmap ? RAP_OK : RAP_ERR_NOMEM;
    }
    for (int q = 0; q < np && st == RAP_OK; q++)
        for (int k = 0; k < pf[q].n && st == RAP_OK; k++) {
            const rap_kernel *s = &pf[q].kernels[k];
            int *dm = dmap + (size_t)(koff[q] + k) * (size_t)max_n; /* (n+1) kept before desc j */
            rap_kernel *d = &fus->kernels[fus->n];
            *d = *s;
            d->n = 0;
            d->nodes = rap_malloc(sizeof(int) * (size_t)(s->n + 1), "rank fusion");
            if (!d->nodes) {
                st = RAP_ERR_NOMEM;
                break;
            }
            for (int j = 0; j < s->n; j++) {
                dm[j] = d->n;
                if (keeper[s->nodes[j]] == q)
                    d->nodes[d->n++] = s->nodes[j];
            }
            dm[s->n] = d->n;
            if (d->n == 0) { /* every op computed by another part */
                rap_free(d->nodes);
                d->nodes = NULL;
                kmap[koff[q] + k] = -1;
                continue;
            }
            kmap[koff[q] + k] = fus->n++;
        }
    if (st == RAP_OK && (st = rap_fusion_check(rp, fus)) != RAP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rap_last_error());
        st = rap_fail(st, "%s: the parts' fusions together are not one fusion of this rank's "
                          "columns: %s", path, why);
    }
    /* one schedule: per window the parts' slices in part order */
    if (st == RAP_OK)
        st = rap_schedule_create(rp, fus, path, out);
    for (int w = 0; w < RAP_WIN_COUNT && st == RAP_OK; w++)
        for (int q = 0; q < np && st == RAP_OK; q++) {
            int n;
            const rap_slice *sl = rap_schedule_window(ps[q], (rap_window)w, &n);
            for (int i = 0; i < n && st == RAP_OK; i++) {
                int g = koff[q] + sl[i].kernel;
                const int *dm = dmap + (size_t)g * (size_t)max_n;
                rap_slice x = sl[i];
                x.kernel = kmap[g];
                x.d0 = dm[sl[i].d0];
                x.d1 = dm[sl[i].d1];
                if (x.kernel < 0 || x.d1 <= x.d0)
                    continue; /* its ops are another part's */
                x.share = parts[q].rows_all ? 0 : parts[q].share;
                x.shares = parts[q].rows_all ? 0 : R;
                st = rap_schedule_add_slice(*out, (rap_window)w, &x);
            }
        }
    rap_free(keeper);
    rap_free(kmap);
    rap_free(dmap);
    if (st == RAP_OK)
        st = rap_schedule_validate(*out, rp, fus, Bg);
    for (int q = 0; q < MAX_PARTS; q++) {
        rap_free(parts[q].cols); /* also a part whose line failed */
        rap_schedule_free(ps[q]);
        rap_fusion_free(&pf[q]);
        rap_place_sub_plan_free(sub[q]);
    }
    if (st != RAP_OK) {
        rap_schedule_free(*out);
        *out = NULL;
        rap_fusion_free(fus);
        memset(fus, 0, sizeof *fus);
    }
    return st;
}
