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
 * Shares: K = R (--row-shares 1) makes share k rank k's rows; parts over
 * any set of them. With more shares per rank only whole-batch parts run.
 */
#include "sched/rank_schedule.h"

#include "core/checked.h"
#include "dist/hybrid.h"
#include "prep/subplan.h"
#include "sched/fusion_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PARTS 64
#define LINE 65536

struct rap_rank_part {
    uint64_t mask;         /* shares it runs over (bit k: share k of K) */
    bool whole;            /* every share: the whole global batch */
    int64_t rows;          /* the shares' rows of a global batch of Bg, concatenated */
    char sched[1024], fusion[1024];
    int *cols;             /* (n_cols) columns of p, in the listed order */
    int n_cols;
    int line;
};
typedef struct rap_rank_part part;

/* Rows of share k of K in a batch of n rows (K = R: rank k's rows). */
static int64_t share_rows(int64_t n, int K, int k)
{
    int64_t r0, cnt;
    rap_hybrid_rows(n, K, k, &r0, &cnt);
    return cnt;
}

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
    static const char *const keys[] = {"rows", "shares", "schedule", "fusion", "columns"};
    unsigned seen_keys = 0;
    while ((key = word(&rest))) {
        if (!(w = word(&rest)))
            goto bad;
        for (int k = 0; k < 5; k++)
            if (!strcmp(key, keys[k])) {
                if (seen_keys >> k & 1)
                    goto bad; /* a key twice */
                seen_keys |= 1u << k;
            }
        if (!strcmp(key, "rows")) {
            if (!rap_parse_i64_ok(w, 1, INT64_MAX, &rows, NULL))
                goto bad;
        }
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
    /* shares: all K (the whole batch), or any of them when K == R (share
     * k = rank k's rows: what moves between ranks) */
    uint64_t seen = 0;
    int n_sh = 0;
    int64_t want = 0;
    char *save = NULL;
    for (char *t = strtok_r(shares, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        if (!rap_parse_int_ok(t, 0, 63, &k, NULL) || k >= K || (seen >> k & 1))
            goto bad;
        seen |= (uint64_t)1 << k;
        want += share_rows(Bg, K, k);
        n_sh++;
    }
    pt->mask = seen;
    pt->whole = n_sh == K;
    pt->rows = rows;
    if (!pt->whole && K != R)
        return rap_fail(RAP_ERR_PLAN,
                        "%s:%d: a part over shares %s of %d (%d per rank): the runtime runs "
                        "parts over the whole global batch or over whole ranks' rows only "
                        "(plan with --row-shares 1)", path, line, shares, K, K / R);
    if (rows != want)
        return rap_fail(RAP_ERR_PLAN, "%s:%d: the part has %lld rows; its shares hold %lld of "
                                      "the global batch of %lld", path, line, (long long)rows,
                        (long long)want, (long long)Bg);
    (void)rank;
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

/* "send COL share k to d" / "recv COL share k from s" */
static rap_status parse_move(const char *path, int line, char *rest, bool send,
                             const rap_plan *p, int K, int rank, int R, rap_rank_move *mv)
{
    char *col = word(&rest), *ks = word(&rest), *k = word(&rest), *dir = word(&rest),
         *peer = word(&rest);
    char *end1 = NULL, *end2 = NULL;
    long kk = k ? strtol(k, &end1, 10) : -1, pp = peer ? strtol(peer, &end2, 10) : -1;
    if (!col || !ks || strcmp(ks, "share") || !k || *end1 || !dir ||
        strcmp(dir, send ? "to" : "from") || !peer || *end2 || word(&rest))
        return rap_fail(RAP_ERR_PLAN, "%s:%d: expected '%s COLUMN share K %s RANK'", path, line,
                        send ? "send" : "recv", send ? "to" : "from");
    mv->col = rap_plan_find(p, col);
    if (mv->col < 0)
        return rap_fail(RAP_ERR_PLAN, "%s:%d: column %s is not in plan %s", path, line, col,
                        p->source);
    if (kk < 0 || kk >= K || pp < 0 || pp >= R || pp == rank)
        return rap_fail(RAP_ERR_PLAN, "%s:%d: share %ld of %d, rank %ld of %d (not this rank, "
                                      "%d)", path, line, kk, K, pp, R, rank);
    if (K != R)
        return rap_fail(RAP_ERR_PLAN, "%s:%d: moves of shares finer than a rank's rows (%d "
                                      "shares, %d ranks): the runtime moves whole ranks' rows "
                                      "(plan with --row-shares 1)", path, line, K, R);
    mv->share = (int)kk;
    mv->peer = (int)pp;
    mv->line = line;
    return RAP_OK;
}

/* Appends mv to *list (grown by doubling). */
static rap_status push_move(rap_rank_move **list, int *n, int *cap, const rap_rank_move *mv)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 32;
        rap_rank_move *g = rap_realloc(*list, sizeof **list * (size_t)nc, "rank manifest");
        if (!g)
            return RAP_ERR_NOMEM;
        *list = g;
        *cap = nc;
    }
    (*list)[(*n)++] = *mv;
    return RAP_OK;
}

/* Reads the manifest's header, parts and moves into m. */
static rap_status read_manifest(const char *path, const rap_plan *p, rap_rank_manifest *m)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return rap_fail(RAP_ERR_IO, "%s: cannot open: %s (rap plan --gpus %d --out PREFIX writes "
                                    "PREFIX.rank<r>)", path, strerror(errno), m->R);
    char *buf = rap_malloc(LINE, "rank schedule");
    if (!buf) {
        fclose(f);
        return RAP_ERR_NOMEM;
    }
    rap_status st = RAP_OK;
    int line = 0, cap_s = 0, cap_r = 0, R = m->R, rank = m->rank;
    int64_t Bg = m->Bg;
    bool head = false, hplan = false, hplace = false;
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
            if (!kind || v[0] != R || v[1] != rank || v[3] != Bg || v[4] < R || v[4] > 64)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: planned for rank %lld of %lld ranks, global "
                                            "batch %lld; this is rank %d of %d, global batch %lld",
                              path, line, v[1], v[0], v[3], rank, R, (long long)Bg);
            m->K = (int)v[4];
            hplace = true;
        } else if (!strcmp(w, "part")) {
            if (!hplace || m->n_parts == MAX_PARTS)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: %s", path, line,
                              hplace ? "more than 64 parts" : "a part before the placement line");
            else if ((st = parse_part(path, line, rest, p, Bg, m->K, rank, R,
                                      &m->parts[m->n_parts])) == RAP_OK)
                m->n_parts++;
        } else if (!strcmp(w, "send") || !strcmp(w, "recv")) {
            rap_rank_move mv;
            bool send = !strcmp(w, "send");
            if (!hplace)
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: a move before the placement line", path, line);
            else if ((st = parse_move(path, line, rest, send, p, m->K, rank, R, &mv)) == RAP_OK)
                st = send ? push_move(&m->send, &m->n_send, &cap_s, &mv)
                          : push_move(&m->recv, &m->n_recv, &cap_r, &mv);
        } else {
            st = rap_fail(RAP_ERR_PLAN, "%s:%d: unknown line '%s' (expected plan, placement, "
                                        "part, send or recv)", path, line, w);
        }
    }
    if (st == RAP_OK && ferror(f))
        st = rap_fail(RAP_ERR_IO, "%s: read error", path);
    if (st == RAP_OK && (!hplan || !hplace || m->n_parts == 0))
        st = rap_fail(RAP_ERR_PLAN, "%s: truncated: no %s line", path,
                      !hplan ? "plan" : !hplace ? "placement" : "part");
    fclose(f);
    rap_free(buf);
    return st;
}

void rap_rank_manifest_free(rap_rank_manifest *m)
{
    if (!m)
        return;
    for (int q = 0; m->parts && q < MAX_PARTS; q++)
        rap_free(m->parts[q].cols);
    rap_free(m->parts);
    rap_free(m->cols);
    rap_free(m->col_shares);
    rap_free(m->send);
    rap_free(m->recv);
    rap_free(m);
}

rap_status rap_rank_manifest_load(const char *prefix, const rap_plan *p, int rank, int R,
                                  int64_t Bg, rap_rank_manifest **out)
{
    *out = NULL;
    rap_rank_manifest *m = rap_calloc(sizeof *m, "rank manifest");
    if (!m)
        return RAP_ERR_NOMEM;
    snprintf(m->path, sizeof m->path, "%s.rank%d", prefix, rank);
    m->R = R;
    m->rank = rank;
    m->Bg = Bg;
    m->parts = rap_calloc(sizeof *m->parts * MAX_PARTS, "rank manifest");
    m->col_shares = rap_calloc(sizeof(uint64_t) * (size_t)(p->n_cols + 1), "rank manifest");
    m->cols = rap_malloc(sizeof(int) * (size_t)(p->n_cols + 1), "rank manifest");
    rap_status st = m->parts && m->col_shares && m->cols ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = read_manifest(m->path, p, m);
    /* the columns computed here and their shares; a column in two parts
     * must not run a share twice */
    for (int q = 0; st == RAP_OK && q < m->n_parts; q++)
        for (int i = 0; i < m->parts[q].n_cols; i++) {
            int c = m->parts[q].cols[i];
            if (m->col_shares[c] & m->parts[q].mask) {
                st = rap_fail(RAP_ERR_PLAN, "%s:%d: column %s: shares computed by two parts",
                              m->path, m->parts[q].line, p->cols[c].name);
                break;
            }
            m->col_shares[c] |= m->parts[q].mask;
        }
    for (int c = 0; st == RAP_OK && c < p->n_cols; c++)
        if (m->col_shares[c])
            m->cols[m->n_cols++] = c;
    /* a unit sent is computed here; one received is not */
    for (int i = 0; st == RAP_OK && i < m->n_send; i++)
        if (!(m->col_shares[m->send[i].col] >> m->send[i].share & 1))
            st = rap_fail(RAP_ERR_PLAN, "%s:%d: sends share %d of %s, which no part of this rank "
                                        "computes", m->path, m->send[i].line, m->send[i].share,
                          p->cols[m->send[i].col].name);
    for (int i = 0; st == RAP_OK && i < m->n_recv; i++)
        if (m->col_shares[m->recv[i].col] >> m->recv[i].share & 1)
            st = rap_fail(RAP_ERR_PLAN, "%s:%d: receives share %d of %s, which a part of this "
                                        "rank computes too", m->path, m->recv[i].line,
                          m->recv[i].share, p->cols[m->recv[i].col].name);
    if (st != RAP_OK) {
        rap_rank_manifest_free(m);
        return st;
    }
    *out = m;
    return RAP_OK;
}

/* The pieces of a part slice [a, b) of the part's concatenated shares
 * (planned for batches of Bg): one per share it touches, rows relative to
 * the share ("end" where it reaches the share's end, so that short batches
 * are covered); a whole-batch part: the slice itself. */
typedef struct {
    int share; /* -1: the whole batch */
    int64_t r0, r1;
} piece;

static int part_pieces(const part *pt, int K, int64_t Bg, int64_t a, int64_t b, piece *out)
{
    if (pt->whole) {
        out[0] = (piece){-1, a, b};
        return 1;
    }
    if (b > pt->rows)
        b = pt->rows;
    int n = 0;
    int64_t c = 0;
    for (int k = 0; k < K; k++) {
        if (!(pt->mask >> k & 1))
            continue;
        int64_t m = share_rows(Bg, K, k), lo = a > c ? a : c, hi = b < c + m ? b : c + m;
        if (lo < hi)
            out[n++] = (piece){k, lo - c, hi == c + m ? RAP_ROWS_END : hi - c};
        c += m;
    }
    return n;
}

/* Appends slice x (kernel, descs set) once per piece. */
static rap_status add_pieces(rap_schedule *s, rap_window w, rap_slice x, const piece *pc, int np,
                             int K, uint64_t only)
{
    for (int i = 0; i < np; i++) {
        if (pc[i].share >= 0 && !(only >> pc[i].share & 1))
            continue;
        x.r0 = pc[i].r0;
        x.r1 = pc[i].r1;
        x.share = pc[i].share >= 0 ? pc[i].share : 0;
        x.shares = pc[i].share >= 0 ? K : 0;
        RAP_TRY(rap_schedule_add_slice(s, w, &x));
    }
    return RAP_OK;
}

rap_status rap_rank_schedule_make(const rap_rank_manifest *m, const rap_plan *p,
                                  const rap_plan *rp, rap_fusion *fus, rap_schedule **out)
{
    *out = NULL;
    memset(fus, 0, sizeof *fus);
    const char *path = m->path;
    int np = m->n_parts, K = m->K;
    const part *parts = m->parts;
    rap_plan *sub[MAX_PARTS] = {0};
    rap_fusion pf[MAX_PARTS];
    rap_schedule *ps[MAX_PARTS] = {0};
    memset(pf, 0, sizeof pf);
    int koff[MAX_PARTS + 1] = {0};
    rap_status st = RAP_OK;
    for (int i = 0; i < m->n_cols && st == RAP_OK; i++)
        if (rap_plan_find(rp, p->cols[m->cols[i]].name) < 0)
            st = rap_fail(RAP_ERR_INTERNAL, "%s: column %s is computed by this rank but not in "
                          "its plan", path, p->cols[m->cols[i]].name);
    /* each part's own files, checked against its sub-plan */
    for (int q = 0; q < np && st == RAP_OK; q++) {
        st = rap_subplan_make(p, parts[q].cols, parts[q].n_cols, &sub[q]);
        if (st == RAP_OK)
            st = rap_fusion_load(sub[q], parts[q].fusion, &pf[q]);
        for (int k = 0; st == RAP_OK && k < pf[q].n; k++)
            if (pf[q].kernels[k].group) /* the merge below keeps or drops single ops */
                st = rap_fail(RAP_ERR_PLAN, "%s: kernel %d is a row kernel: parts of a rank's "
                              "manifest hold one-type kernels only (rap plan --gpus R makes "
                              "them so)", parts[q].fusion, k);
        if (st == RAP_OK)
            st = rap_schedule_load(parts[q].sched, &ps[q]);
        if (st == RAP_OK)
            st = rap_schedule_validate(ps[q], sub[q], &pf[q], parts[q].rows);
        if (st != RAP_OK && st != RAP_ERR_NOMEM) /* the manifest named the file */
            rap_fail_context(st, "%s:%d: part %d", path, parts[q].line, q);
        koff[q + 1] = koff[q] + pf[q].n;
    }
    /* one fusion: the parts' kernels in part order (node indices are p's,
     * and so rp's: sub-plans and rank plans copy every node). An op two
     * parts need (e.g. fill_null(int_0) under a dense column and under
     * bucketize(int_0)) is in one kernel: the first part over the whole
     * batch that has it, else the first part (its keeper). Each share of
     * such an op is computed once, by the first part (keeper first) that
     * runs it there; where that is not the keeper, its slices run the op's
     * descriptor on the keeper's kernel (owner[node * 64 + k]: that part).
     * Then one kernel per op of the rank plan that no part computes: the
     * columns this rank receives (never run, schedule n_received). */
    int *keeper = NULL, *kmap = NULL, *dmap = NULL, *npos = NULL;
    signed char *owner = NULL;
    if (st == RAP_OK) {
        keeper = rap_malloc(sizeof(int) * (size_t)(p->n_nodes + 1), "rank fusion");
        npos = rap_malloc(sizeof(int) * 2 * (size_t)(p->n_nodes + 1), "rank fusion");
        owner = rap_malloc((size_t)(p->n_nodes + 1) * 64, "rank fusion");
        kmap = rap_malloc(sizeof(int) * (size_t)(koff[np] + 1), "rank fusion");
        fus->kernels = rap_calloc(sizeof(rap_kernel) * (size_t)(koff[np] + p->n_nodes + 1),
                                  "rank fusion");
        st = keeper && npos && owner && kmap && fus->kernels ? RAP_OK : RAP_ERR_NOMEM;
    }
    for (int i = 0; keeper && i < p->n_nodes; i++)
        keeper[i] = npos[2 * i] = npos[2 * i + 1] = -1;
    if (owner)
        memset(owner, -1, (size_t)(p->n_nodes + 1) * 64);
    for (int pass = 0; pass < 2 && st == RAP_OK; pass++) /* whole-batch parts first */
        for (int q = 0; q < np; q++)
            for (int k = 0; parts[q].whole == !pass && k < pf[q].n; k++)
                for (int j = 0; j < pf[q].kernels[k].n; j++) {
                    int nd = pf[q].kernels[k].nodes[j];
                    if (keeper[nd] < 0)
                        keeper[nd] = q;
                }
    for (int pass = 0; pass < 2 && st == RAP_OK; pass++) /* share owners: the keeper, then in order */
        for (int q = 0; q < np; q++)
            for (int k = 0; k < pf[q].n; k++)
                for (int j = 0; j < pf[q].kernels[k].n; j++) {
                    int nd = pf[q].kernels[k].nodes[j];
                    if ((keeper[nd] == q) != !pass)
                        continue;
                    for (int sh = 0; sh < K; sh++)
                        if ((parts[q].mask >> sh & 1) && owner[nd * 64 + sh] < 0)
                            owner[nd * 64 + sh] = (signed char)q;
                }
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
            d->group = NULL; /* one-type kernels only (checked above) */
            d->n_groups = 0;
            d->n = 0;
            d->nodes = rap_malloc(sizeof(int) * (size_t)(s->n + 1), "rank fusion");
            if (!d->nodes) {
                st = RAP_ERR_NOMEM;
                break;
            }
            for (int j = 0; j < s->n; j++) {
                dm[j] = d->n;
                if (keeper[s->nodes[j]] == q) {
                    npos[2 * s->nodes[j]] = fus->n;
                    npos[2 * s->nodes[j] + 1] = d->n;
                    d->nodes[d->n++] = s->nodes[j];
                }
            }
            dm[s->n] = d->n;
            if (d->n == 0) { /* every op kept by another part */
                rap_free(d->nodes);
                d->nodes = NULL;
                kmap[koff[q] + k] = -1;
                continue;
            }
            kmap[koff[q] + k] = fus->n++;
        }
    int received = 0;
    for (int i = 0; st == RAP_OK && i < rp->n_nodes; i++) {
        const rap_node *n = &rp->nodes[i];
        if (!n->live || n->op == RAP_OP_INPUT || npos[2 * i] >= 0)
            continue;
        rap_kernel *d = &fus->kernels[fus->n];
        d->nodes = rap_malloc(sizeof(int), "rank fusion");
        if (!d->nodes) {
            st = RAP_ERR_NOMEM;
            break;
        }
        d->op = n->op;
        d->variant = rap_node_variant(rp, i);
        d->level = n->level;
        d->nodes[0] = i;
        d->n = 1;
        fus->n++;
        received++;
    }
    if (st == RAP_OK && (st = rap_fusion_check(rp, fus)) != RAP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rap_last_error());
        st = rap_fail(st, "%s: the parts' fusions together are not one fusion of this rank's "
                          "columns: %s", path, why);
    }
    /* one schedule: per window the parts' slices in part order, each cut
     * into its shares; an op kept by another part runs here on the
     * keeper's kernel in the shares this part owns */
    if (st == RAP_OK && (st = rap_schedule_create(rp, fus, path, out)) == RAP_OK)
        (*out)->n_received = received;
    for (int w = 0; w < RAP_WIN_COUNT && st == RAP_OK; w++)
        for (int q = 0; q < np && st == RAP_OK; q++) {
            int n;
            const rap_slice *sl = rap_schedule_window(ps[q], (rap_window)w, &n);
            for (int i = 0; i < n && st == RAP_OK; i++) {
                piece pc[64];
                int npc = part_pieces(&parts[q], K, m->Bg, sl[i].r0, sl[i].r1, pc);
                int g = koff[q] + sl[i].kernel;
                const int *dm = dmap + (size_t)g * (size_t)max_n;
                rap_slice x = sl[i];
                x.kernel = kmap[g];
                x.d0 = dm[sl[i].d0];
                x.d1 = dm[sl[i].d1];
                if (x.kernel >= 0 && x.d1 > x.d0)
                    st = add_pieces(*out, (rap_window)w, x, pc, npc, K, ~(uint64_t)0);
                for (int j = sl[i].d0; j < sl[i].d1 && st == RAP_OK; j++) {
                    int nd = pf[q].kernels[sl[i].kernel].nodes[j];
                    if (keeper[nd] == q || parts[q].whole)
                        continue; /* ran above, or its keeper runs it on every share */
                    uint64_t mine = 0;
                    for (int sh = 0; sh < K; sh++)
                        if (owner[nd * 64 + sh] == q)
                            mine |= (uint64_t)1 << sh;
                    if (!mine)
                        continue;
                    rap_slice y = sl[i];
                    y.kernel = npos[2 * nd];
                    y.d0 = npos[2 * nd + 1];
                    y.d1 = y.d0 + 1;
                    st = add_pieces(*out, (rap_window)w, y, pc, npc, K, mine);
                }
            }
        }
    /* the GPU parse's budgets (rap plan --gpus N --parse gpu writes them
     * into the rank's first part): each window the parts' lines together */
    for (int w = 0; w < RAP_WIN_COUNT && st == RAP_OK; w++) {
        int64_t lines = 0;
        double ms = 0;
        for (int q = 0; q < np; q++)
            if (ps[q] && ps[q]->parse_lines[w] > 0) {
                lines += ps[q]->parse_lines[w];
                ms = ms >= 0 && ps[q]->parse_ms[w] >= 0 ? ms + ps[q]->parse_ms[w] : -1;
            }
        if (lines > 0)
            st = rap_schedule_set_parse(*out, (rap_window)w, lines, ms);
    }
    rap_free(keeper);
    rap_free(kmap);
    rap_free(dmap);
    rap_free(npos);
    rap_free(owner);
    if (st == RAP_OK)
        st = rap_schedule_validate(*out, rp, fus, m->Bg);
    for (int q = 0; q < MAX_PARTS; q++) {
        rap_schedule_free(ps[q]);
        rap_fusion_free(&pf[q]);
        rap_subplan_free(sub[q]);
    }
    if (st != RAP_OK) {
        rap_schedule_free(*out);
        *out = NULL;
        rap_fusion_free(fus);
        memset(fus, 0, sizeof *fus);
    }
    return st;
}

rap_status rap_rank_schedule_load(const char *prefix, const rap_plan *p, int rank, int R,
                                  int64_t Bg, const rap_plan *rp, rap_fusion *fus,
                                  rap_schedule **out)
{
    *out = NULL;
    memset(fus, 0, sizeof *fus);
    rap_rank_manifest *m = NULL;
    RAP_TRY(rap_rank_manifest_load(prefix, p, rank, R, Bg, &m));
    rap_status st = RAP_OK;
    if (m->n_send || m->n_recv)
        st = rap_fail(RAP_ERR_PLAN, "%s:%d: this placement moves preprocessed columns between "
                                    "ranks: load it with rap_rank_manifest_load and run the "
                                    "moves (rap train and rap bench do)", m->path,
                      m->n_send ? m->send[0].line : m->recv[0].line);
    for (int c = 0; st == RAP_OK && c < rp->n_cols; c++) {
        int pc = rap_plan_find(p, rp->cols[c].name);
        if (pc < 0 || !m->col_shares[pc])
            st = rap_fail(RAP_ERR_PLAN, "%s: column %s of this rank's plan is computed by none of "
                                        "its parts", m->path, rp->cols[c].name);
    }
    if (st == RAP_OK)
        st = rap_rank_schedule_make(m, p, rp, fus, out);
    rap_rank_manifest_free(m);
    return st;
}
