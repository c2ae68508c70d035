/* checkpoint_shard.c -- sharded checkpoints (checkpoint.h "sharded"): the
 * shard files and the manifest, loading table rows from whichever files
 * hold them (re-sharding), and gathering the files into one plain file. */
#include "run/checkpoint_internal.h"

#include "core/checked.h"
#include "core/core.h"
#include "core/out.h"

#include <stdlib.h>
#include <string.h>

/* The metadata keys of sharding, dropped when the files become one, and
 * the update counter (gather sets it anew). */
static const char *const shard_step_keys[] = {"shard_rank", "shard_ranks", "shard_id",
                                              "shard_tables", "shard_files", "sharding",
                                              RAP_CKPT_EMB_STEP, NULL};

/* ------------------------------------------------------------- saving */

char *rap_ckpt_table_list(const rap_model *m)
{
    int nm = rap_model_n_tensors(m);
    size_t cap = 64 * (size_t)(nm + 1) + 1, at = 0;
    char *s = rap_malloc(cap, "checkpoint table list");
    if (!s)
        return NULL;
    s[0] = 0;
    int k = 0;
    for (int i = 0; i < nm; i++) {
        int table;
        int64_t row0;
        rap_model_tensor_origin(m, i, &table, &row0);
        if (table < 0)
            continue;
        at += (size_t)snprintf(s + at, cap - at, "%s%d:%lld:%lld", k++ ? "," : "", table,
                               (long long)row0, (long long)rap_model_tensor(m, i)->rows);
    }
    return s;
}

typedef struct {
    const rap_model *m;
    int *idx;     /* (n) model tensor of output tensor i */
    bool *state;  /* (n) its optimizer state instead of its weights */
} shard_src;

static rap_status fill_shard(void *ctx, int i, void *buf)
{
    shard_src *s = ctx;
    return rap_ckpt_fill_tensor(s->m, s->idx[i], s->state[i], buf);
}

/* The tensors of rank's shard file into t, idx, st_of (*n of them): the
 * tables (and the MLPs on rank 0), then their state when state. */
static rap_status shard_tensors(const char *path, int rank, const rap_model *m, bool state,
                                rap_ckpt_tensor *t, int *idx, bool *st_of, int *n)
{
    int nm = rap_model_n_tensors(m);
    *n = 0;
    for (int pass = 0; pass < (state ? 2 : 1); pass++)
        for (int i = 0; i < nm; i++) {
            int table;
            int64_t row0;
            rap_model_tensor_origin(m, i, &table, &row0);
            if (table < 0 && rank != 0)
                continue; /* the MLPs are the same on every rank: rank 0 writes them */
            rap_ckpt_model_tensor(m, i, pass == 1, &t[*n]);
            for (int j = 0; j < *n; j++)
                if (!strcmp(t[j].name, t[*n].name))
                    return rap_fail(RAP_ERR_INTERNAL, "%s: rank %d holds tensor %s twice (two row "
                                    "ranges of one table on one rank cannot be saved)", path, rank,
                                    t[*n].name);
            idx[*n] = i;
            st_of[*n] = pass == 1;
            (*n)++;
        }
    return RAP_OK;
}

rap_status rap_ckpt_save_shard(const char *path, int rank, int ranks, const char *shard_id,
                               const rap_model *m, bool state, const rap_meta *meta)
{
    int nm = rap_model_n_tensors(m);
    int cap = 2 * nm + 1;
    rap_ckpt_tensor *t = rap_calloc(sizeof *t * (size_t)cap, "checkpoint tensors");
    int *idx = rap_calloc(sizeof(int) * (size_t)cap, "checkpoint tensors");
    bool *st_of = rap_calloc(sizeof(bool) * (size_t)cap, "checkpoint tensors");
    char *tables = rap_ckpt_table_list(m);
    rap_meta mm = {0};
    rap_status st = t && idx && st_of && tables ? RAP_OK : RAP_ERR_NOMEM;
    int n = 0;
    if (st == RAP_OK)
        st = shard_tensors(path, rank, m, state, t, idx, st_of, &n);
    if (st == RAP_OK)
        st = rap_ckpt_meta_with_step(meta, m, &mm);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_rank", "%d", rank);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_ranks", "%d", ranks);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_id", "%s", shard_id);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_tables", "%s", tables);
    char file[1024];
    snprintf(file, sizeof file, "%s.rank%d", path, rank);
    shard_src src = {m, idx, st_of};
    if (st == RAP_OK)
        st = rap_ckpt_write(file, &mm, t, n, fill_shard, &src, true, NULL);
    rap_meta_free(&mm);
    rap_free(tables);
    rap_free(st_of);
    rap_free(idx);
    rap_free(t);
    return st;
}

static const char *base_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

rap_status rap_ckpt_save_manifest(const char *path, int ranks, const char *shard_id,
                                  const char *const *tables, const rap_meta *meta,
                                  rap_out_lock *held)
{
    rap_meta mm = {0};
    rap_status st = rap_meta_copy(&mm, meta, NULL, NULL);
    size_t cap = 64, at = 0, at2 = 0;
    for (int r = 0; r < ranks; r++)
        cap += strlen(base_of(path)) + 24 + strlen(tables[r]);
    char *files = rap_malloc(cap, "manifest"), *sharding = rap_malloc(cap, "manifest");
    if (st == RAP_OK && (!files || !sharding))
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK) {
        files[0] = sharding[0] = 0;
        for (int r = 0; r < ranks; r++) {
            at += (size_t)snprintf(files + at, cap - at, "%s%s.rank%d", r ? "," : "",
                                   base_of(path), r);
            at2 += (size_t)snprintf(sharding + at2, cap - at2, "%s%s", r ? ";" : "", tables[r]);
        }
        st = rap_meta_set(&mm, "shard_ranks", "%d", ranks);
    }
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_id", "%s", shard_id);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "shard_files", "%s", files);
    if (st == RAP_OK)
        st = rap_meta_set(&mm, "sharding", "%s", sharding);
    if (st == RAP_OK)
        st = rap_ckpt_write(path, &mm, NULL, 0, NULL, NULL, false, held);
    rap_free(files);
    rap_free(sharding);
    rap_meta_free(&mm);
    return st;
}

bool rap_ckpt_is_manifest(const rap_ckpt *c)
{
    return c && rap_meta_get(&c->meta, "shard_files") != NULL;
}

/* ------------------------------------------------------------- the files of a checkpoint */

/* One file rows can come from: its table tensors, each rows [row0,
 * row0 + rows) of global table `table`. */
typedef struct {
    rap_ckpt *c;
    bool own;
    int n;
    int *table;      /* (n) */
    int64_t *row0;   /* (n) */
    int64_t *rows;   /* (n) */
} ck_src;

/* The files of a checkpoint: one for a plain one, R for a sharded one
 * (source r is rank r's file: source 0 holds the MLP tensors). */
typedef struct {
    const char *path; /* the checkpoint as given (for messages) */
    ck_src *s;
    int n;
} ck_set;

static void set_free(ck_set *set)
{
    for (int i = 0; i < set->n; i++) {
        if (set->s[i].own)
            rap_ckpt_close(set->s[i].c);
        rap_free(set->s[i].table);
        rap_free(set->s[i].row0);
        rap_free(set->s[i].rows);
    }
    rap_free(set->s);
    memset(set, 0, sizeof *set);
}

/* A plain checkpoint's table list: its emb_l.T.weight tensors, whole. */
static rap_status src_whole_tables(ck_src *src)
{
    rap_ckpt *c = src->c;
    for (int i = 0; i < c->n; i++) {
        int t, used = 0;
        if (sscanf(c->t[i].name, "emb_l.%d.weight%n", &t, &used) == 1 &&
            c->t[i].name[used] == 0 && c->t[i].ndim == 2) {
            if (t < 0 || t >= RAP_MAX_TABLES)
                return rap_fail(RAP_ERR_DATA, "%s: tensor %s: table index out of range "
                                "(0..%d)", c->path, c->t[i].name, RAP_MAX_TABLES - 1);
            src->table[src->n] = t;
            src->row0[src->n] = 0;
            src->rows[src->n++] = c->t[i].shape[0];
        }
    }
    return RAP_OK;
}

/* Fills src's table list from "t:row0:rows,..." (shard files) or, for a
 * plain checkpoint, from its emb_l.T.weight tensors (whole tables). */
static rap_status src_tables(ck_src *src, const char *list, const char *what)
{
    rap_ckpt *c = src->c;
    int cap = c->n + 1;
    src->table = rap_calloc(sizeof(int) * (size_t)cap, "checkpoint tables");
    src->row0 = rap_calloc(sizeof(int64_t) * (size_t)cap, "checkpoint tables");
    src->rows = rap_calloc(sizeof(int64_t) * (size_t)cap, "checkpoint tables");
    if (!src->table || !src->row0 || !src->rows)
        return RAP_ERR_NOMEM;
    src->n = 0;
    if (!list)
        return src_whole_tables(src);
    for (const char *p = list; *p;) {
        int t = 0;
        int64_t r0 = 0, nr = 0;
        /* rows start below 2^40 (a shape's largest dimension): their ends
         * and sums cannot overflow */
        if (src->n >= cap || !rap_parse_int_ok(p, 0, RAP_MAX_TABLES - 1, &t, &p) || *p++ != ':' ||
            !rap_parse_i64_ok(p, 0, (int64_t)1 << 40, &r0, &p) || *p++ != ':' ||
            !rap_parse_i64_ok(p, 1, (int64_t)1 << 40, &nr, &p))
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard_tables metadata \"%.200s\" (%s): "
                            "expected TABLE:ROW0:ROWS,.. with TABLE < %d and rows below 2^40",
                            c->path, list, what, RAP_MAX_TABLES);
        char name[64];
        snprintf(name, sizeof name, "emb_l.%d.weight", t);
        int k = rap_ckpt_find(c, name);
        if (k < 0 || c->t[k].ndim != 2 || c->t[k].shape[0] != nr)
            return rap_fail(RAP_ERR_DATA, "%s: shard_tables lists rows [%lld, %lld) of table %d, "
                            "but the file %s", c->path, (long long)r0, (long long)(r0 + nr), t,
                            k < 0 ? "has no such tensor" : "holds another number of rows");
        src->table[src->n] = t;
        src->row0[src->n] = r0;
        src->rows[src->n++] = nr;
        if (*p == ',')
            p++;
        else if (*p)
            return rap_fail(RAP_ERR_DATA, "%s: corrupt shard_tables metadata \"%s\"", c->path,
                            list);
    }
    return RAP_OK;
}

/* Opens rank r's shard file `file` of manifest c (shard_id id) into src:
 * checked against the manifest and CRC-verified. */
static rap_status open_shard(rap_ckpt *c, int r, const char *id, const char *file, ck_src *src)
{
    src->own = true;
    char why[2048];
    rap_status st = rap_ckpt_open(file, &src->c);
    if (st != RAP_OK) {
        snprintf(why, sizeof why, "%s", rap_last_error());
        return rap_fail(st, "sharded checkpoint %s: shard file of rank %d: %s", c->path, r, why);
    }
    const char *sid = rap_meta_get(&src->c->meta, "shard_id");
    const char *sr = rap_meta_get(&src->c->meta, "shard_rank");
    int srank = -1;
    if (!sid || strcmp(sid, id) || !sr || !rap_parse_int_ok(sr, 0, INT32_MAX, &srank, NULL) ||
        srank != r)
        return rap_fail(RAP_ERR_DATA, "sharded checkpoint %s: shard file %s is not rank %d "
                        "of this checkpoint (shard_id %s, the manifest's %s): written by "
                        "another save (a save interrupted between the shard files and the "
                        "manifest?)", c->path, file, r, sid ? sid : "(none)", id);
    st = rap_ckpt_verify(src->c);
    if (st != RAP_OK) {
        snprintf(why, sizeof why, "%s", rap_last_error());
        return rap_fail(st, "sharded checkpoint %s: shard file of rank %d: %s", c->path, r, why);
    }
    return src_tables(src, rap_meta_get(&src->c->meta, "shard_tables"), file);
}

/* Opens the sources of c (not owned; a manifest's shard files are opened,
 * checked against it and CRC-verified). */
static rap_status set_open(rap_ckpt *c, ck_set *set)
{
    memset(set, 0, sizeof *set);
    set->path = c->path;
    if (!rap_ckpt_is_manifest(c)) {
        set->s = rap_calloc(sizeof(ck_src), "checkpoint sources");
        if (!set->s)
            return RAP_ERR_NOMEM;
        set->n = 1;
        set->s[0].c = c;
        RAP_TRY(rap_ckpt_verify(c));
        return src_tables(&set->s[0], rap_meta_get(&c->meta, "shard_tables"), "plain");
    }
    const char *files = rap_meta_get(&c->meta, "shard_files");
    const char *rs = rap_meta_get(&c->meta, "shard_ranks");
    const char *id = rap_meta_get(&c->meta, "shard_id");
    int ranks = 0, listed = 1;
    for (const char *q = files; *q; q++)
        listed += *q == ',';
    if (!rs || !rap_parse_int_ok(rs, 1, RAP_CKPT_MAX_RANKS, &ranks, NULL) || !id)
        return rap_fail(RAP_ERR_DATA, "%s: corrupt sharded checkpoint manifest (shard_ranks "
                        "\"%.40s\" not in 1..%d, shard_id %s)", c->path, rs ? rs : "",
                        RAP_CKPT_MAX_RANKS, id ? "present" : "missing");
    if (listed != ranks)
        return rap_fail(RAP_ERR_DATA, "%s: the manifest lists %d shard files for %d ranks",
                        c->path, listed, ranks);
    set->s = rap_calloc(sizeof(ck_src) * (size_t)ranks, "checkpoint sources");
    if (!set->s)
        return RAP_ERR_NOMEM;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
    const char *p = files;
    for (int r = 0; r < ranks; r++) {
        size_t l = strcspn(p, ",");
        if (l == 0)
            return rap_fail(RAP_ERR_DATA, "%s: the manifest lists %d shard files for %d ranks",
                            c->path, r, ranks);
        char file[2048];
        snprintf(file, sizeof file, "%s%.*s", dir, (int)l, p);
        p += l + (p[l] == ',');
        RAP_TRY(open_shard(c, r, id, file, &set->s[set->n++]));
    }
    return RAP_OK;
}

/* The name of global table `table`'s tensor (state: its optimizer state). */
static void table_tensor_name(int table, bool state, char *out, size_t n)
{
    char wname[64];
    snprintf(wname, sizeof wname, "emb_l.%d.weight", table);
    if (state)
        rap_ckpt_state_name(wname, out, n);
    else
        snprintf(out, n, "%s", wname);
}

/* The dtype and columns of global table `table`'s tensor (state: its
 * optimizer state) in the first source holding rows of it; *found false
 * when no source lists the table or that source lacks the tensor (the
 * caller's read then says which rows are missing). */
static void set_table_form(const ck_set *set, int table, bool state, rap_st_dtype *dt,
                           int64_t *cols, bool *found)
{
    char name[160];
    table_tensor_name(table, state, name, sizeof name);
    *found = false;
    for (int s = 0; s < set->n && !*found; s++)
        for (int k = 0; k < set->s[s].n && !*found; k++) {
            if (set->s[s].table[k] != table)
                continue;
            int ti = rap_ckpt_find(set->s[s].c, name);
            if (ti < 0 || set->s[s].c->t[ti].ndim != 2)
                return;
            *dt = set->s[s].c->t[ti].dtype;
            *cols = set->s[s].c->t[ti].shape[1];
            *found = true;
        }
}

/* Reads (buf non-NULL) or checks (buf NULL) rows [row0, row0 + rows) of
 * global table `table`, `cols` wide in type dt (every piece must be), from
 * the sources that hold them (state: the optimizer accumulator instead of
 * the weights), as stored. */
static rap_status set_table_rows(ck_set *set, int table, int64_t row0, int64_t rows, int64_t cols,
                                 rap_st_dtype dt, bool state, void *buf)
{
    char name[160];
    table_tensor_name(table, state, name, sizeof name);
    const size_t es = rap_st_dtype_size(dt);
    int64_t covered = 0;
    for (int s = 0; s < set->n; s++) {
        ck_src *src = &set->s[s];
        for (int k = 0; k < src->n; k++) {
            if (src->table[k] != table)
                continue;
            int64_t a = src->row0[k] > row0 ? src->row0[k] : row0;
            int64_t b0 = src->row0[k] + src->rows[k], b1 = row0 + rows;
            int64_t b = b0 < b1 ? b0 : b1;
            if (a >= b)
                continue;
            int ti = rap_ckpt_find(src->c, name);
            if (ti < 0)
                return rap_fail(RAP_ERR_DATA, "%s: no tensor %s (%s)", src->c->path, name,
                                state ? "the checkpoint holds no optimizer state" : "corrupt");
            const rap_ckpt_tensor *t = &src->c->t[ti];
            if (t->ndim != 2 || t->shape[1] != cols || t->shape[0] != src->rows[k])
                return rap_fail(RAP_ERR_DATA, "%s: tensor %s has shape [%lld, %lld] in the "
                                "checkpoint, the other files' rows of it are %lld wide",
                                src->c->path, name, (long long)t->shape[0],
                                (long long)(t->ndim == 2 ? t->shape[1] : 1), (long long)cols);
            if (t->dtype != dt)
                return rap_fail(RAP_ERR_DATA, "%s: tensor %s is %s, the other files' rows of it "
                                "%s", src->c->path, name, rap_st_dtype_name(t->dtype),
                                rap_st_dtype_name(dt));
            if (buf)
                RAP_TRY(rap_ckpt_read_rows(src->c, ti, a - src->row0[k], b - a,
                                           (char *)buf + es * (size_t)((a - row0) * cols)));
            covered += b - a;
            if (covered > rows) /* overlapping: said below (and no sum can overflow) */
                break;
        }
        if (covered > rows)
            break;
    }
    if (covered != rows)
        return rap_fail(RAP_ERR_DATA, "%s: rows [%lld, %lld) of table %d (%s): %lld of them are in "
                        "the checkpoint's files%s", set->path, (long long)row0,
                        (long long)(row0 + rows), table, name, (long long)covered,
                        covered < rows ? " (the checkpoint's table is smaller, or a shard is "
                                         "missing)" : " (overlapping shards)");
    return RAP_OK;
}

/* The update counter the sources record (*has: any does). RAP_ERR_DATA
 * when two files record different ones. */
static rap_status set_emb_step(const ck_set *set, bool *has, uint64_t *step)
{
    *has = false;
    *step = 0;
    for (int s = 0; s < set->n; s++) {
        bool h;
        uint64_t v;
        RAP_TRY(rap_ckpt_emb_step_of(set->s[s].c->path, &set->s[s].c->meta, &h, &v));
        if (h && *has && v != *step)
            return rap_fail(RAP_ERR_DATA, "%s: the checkpoint's files record %s %llu and %llu "
                            "(%s): written by different saves", set->path, RAP_CKPT_EMB_STEP,
                            (unsigned long long)*step, (unsigned long long)v,
                            set->s[s].c->path);
        if (h) {
            *has = true;
            *step = v;
        }
    }
    return RAP_OK;
}

/* The source holding MLP tensor `name`, its index in *ti; NULL if none. */
static ck_src *set_find(ck_set *set, const char *name, int *ti)
{
    for (int s = 0; s < set->n; s++) {
        int k = rap_ckpt_find(set->s[s].c, name);
        if (k >= 0) {
            *ti = k;
            return &set->s[s];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------- loading */

/* Reads (buf non-NULL) or checks (buf NULL) MLP tensor i of m (its state
 * when state) from whichever source holds it, into the model; *bytes: the
 * buffer it needs. */
static rap_status set_mlp_tensor(ck_set *set, rap_model *m, int i, bool state, void *buf,
                                 size_t *bytes)
{
    rap_ckpt_tensor want;
    rap_ckpt_model_tensor(m, i, state, &want);
    int k;
    ck_src *src = set_find(set, want.name, &k);
    if (!src)
        return rap_fail(RAP_ERR_DATA, "%s: no tensor %s in the checkpoint%s", set->path,
                        want.name, set->n > 1 ? " (rank 0's shard file holds the MLPs)" : "");
    const rap_ckpt_tensor *t = &src->c->t[k];
    RAP_TRY(rap_ckpt_check_loadable(src->c->path, t, m, i, state));
    const rap_tensor_info *ti = rap_model_tensor(m, i);
    const int64_t fcols = rap_ckpt_tensor_elems(t) / ti->rows;
    *bytes = rap_ckpt_put_bytes(m, i, state, ti->rows, t->dtype, fcols);
    if (!buf)
        return RAP_OK;
    RAP_TRY(rap_ckpt_read(src->c, k, buf));
    return rap_ckpt_put_rows(src->c->path, m, i, state, 0, ti->rows, t->dtype, fcols, buf);
}

/* Reads (buf non-NULL) or checks (buf NULL) local table i of m (its state
 * when state) from the rows of its global table wherever they are, into
 * the model; *bytes: the buffer it needs. */
static rap_status set_table_tensor(ck_set *set, rap_model *m, int i, bool state, void *buf,
                                   size_t *bytes)
{
    const rap_tensor_info *ti = rap_model_tensor(m, i);
    int table;
    int64_t row0;
    rap_model_tensor_origin(m, i, &table, &row0);
    rap_ckpt_tensor ft; /* the file's form of these rows */
    rap_ckpt_model_tensor(m, i, state, &ft);
    bool found;
    set_table_form(set, table, state, &ft.dtype, &ft.shape[1], &found);
    *bytes = rap_ckpt_put_bytes(m, i, state, ti->rows, ft.dtype, ft.shape[1]);
    if (found) /* else the read below names the missing rows */
        RAP_TRY(rap_ckpt_check_loadable(set->path, &ft, m, i, state));
    RAP_TRY(set_table_rows(set, table, row0, ti->rows, ft.shape[1], ft.dtype, state, buf));
    if (!buf)
        return RAP_OK;
    return rap_ckpt_put_rows(set->path, m, i, state, 0, ti->rows, ft.dtype, ft.shape[1], buf);
}

/* Loads m from the sources: every local table's rows wherever they are,
 * then the update counter. Pass 0 checks everything, pass 1 reads. */
static rap_status load_from_set(ck_set *set, rap_model *m, bool state)
{
    int nm = rap_model_n_tensors(m);
    int n = state ? 2 * nm : nm;
    size_t most = 4; /* bytes of the largest tensor, as read or as converted */
    bool has = false;
    uint64_t step = 0;
    RAP_TRY(set_emb_step(set, &has, &step));
    for (int pass = 0; pass < 2; pass++) {
        void *buf = NULL;
        if (pass) {
            buf = rap_malloc(most, "checkpoint tensor buffer");
            if (!buf)
                return RAP_ERR_NOMEM;
        }
        rap_status st = RAP_OK;
        for (int i = 0; i < n && st == RAP_OK; i++) {
            int table;
            rap_model_tensor_origin(m, i % nm, &table, NULL);
            size_t e = 0;
            if (table >= 0)
                st = set_table_tensor(set, m, i % nm, i >= nm, buf, &e);
            else
                st = set_mlp_tensor(set, m, i % nm, i >= nm, buf, &e);
            most = e > most ? e : most;
        }
        rap_free(buf);
        RAP_TRY(st);
    }
    return has ? rap_model_set_emb_step(m, step) : RAP_OK;
}

rap_status rap_ckpt_load_rows(rap_ckpt *c, rap_model *m, bool state)
{
    ck_set set;
    rap_status st = set_open(c, &set);
    if (st == RAP_OK)
        st = load_from_set(&set, m, state);
    set_free(&set);
    return st;
}

/* ------------------------------------------------------------- gather */

/* Output tensors of a gathered checkpoint: tables whole (table order),
 * the MLP tensors of source 0 (their order), then the state likewise. */
typedef struct {
    ck_set *set;
    rap_ckpt_tensor *t;  /* (cap) the output tensors, n of them */
    int n, cap;
    int *table;          /* (cap) global table or -1 */
    int *src_ti;         /* (cap) MLP: tensor index in source 0 */
    bool *state;         /* (cap) */
    int64_t *cols;       /* (cap) */
} gather_src;

static void gather_free(gather_src *g)
{
    rap_free(g->t);
    rap_free(g->table);
    rap_free(g->src_ti);
    rap_free(g->state);
    rap_free(g->cols);
}

/* Rows of table tb over every source: up to the end of its last range. */
static int64_t table_rows_of(const ck_set *set, int tb)
{
    int64_t rows = 0;
    for (int s = 0; s < set->n; s++)
        for (int k = 0; k < set->s[s].n; k++)
            if (set->s[s].table[k] == tb && set->s[s].row0[k] + set->s[s].rows[k] > rows)
                rows = set->s[s].row0[k] + set->s[s].rows[k];
    return rows;
}

static rap_status fill_gather(void *ctx, int i, void *buf)
{
    gather_src *g = ctx;
    if (g->table[i] < 0)
        return rap_ckpt_read(g->set->s[0].c, g->src_ti[i], buf);
    return set_table_rows(g->set, g->table[i], 0, table_rows_of(g->set, g->table[i]), g->cols[i],
                          g->t[i].dtype, g->state[i], buf);
}

/* Adds every table 0..tmax whole (the state's when state: per element or
 * one value a row, as the files have it), each checked to be covered
 * exactly by the sources, in one type. */
static rap_status gather_tables(gather_src *g, const char *path, int tmax, bool state)
{
    ck_set *set = g->set;
    for (int tb = 0; tb <= tmax; tb++) {
        int64_t rows = table_rows_of(set, tb), cols = 0;
        rap_st_dtype dt = RAP_ST_F32;
        bool found;
        set_table_form(set, tb, state, &dt, &cols, &found);
        if (rows == 0)
            return rap_fail(RAP_ERR_DATA, "%s: table %d is in none of the checkpoint's files "
                            "(tables 0 to %d are)", path, tb, tmax);
        rap_ckpt_tensor *t = &g->t[g->n];
        table_tensor_name(tb, state, t->name, sizeof t->name);
        t->dtype = dt;
        t->ndim = 2;
        t->shape[0] = rows;
        t->shape[1] = cols;
        g->table[g->n] = tb;
        g->state[g->n] = state;
        g->cols[g->n] = cols;
        g->n++;
        RAP_TRY(set_table_rows(set, tb, 0, rows, cols, dt, state, NULL));
    }
    return RAP_OK;
}

/* Adds source 0's MLP tensors (or their state), in its order. */
static rap_status gather_mlps(gather_src *g, const char *path, bool state)
{
    const rap_ckpt *c0 = g->set->s[0].c;
    for (int k = 0; k < c0->n; k++) {
        const rap_ckpt_tensor *x = &c0->t[k];
        bool opt = !strncmp(x->name, "optimizer.", 10);
        bool emb = !strncmp(x->name + (opt ? 10 : 0), "emb_l.", 6);
        if (emb || opt != state)
            continue;
        if (g->n >= g->cap)
            return rap_fail(RAP_ERR_INTERNAL, "%s: too many tensors", path);
        g->t[g->n] = *x;
        g->table[g->n] = -1;
        g->src_ti[g->n] = k;
        g->n++;
    }
    return RAP_OK;
}

/* The output tensors of the sources of c: tables, MLPs, then (when state
 * and the files hold it) the same for the optimizer state. */
static rap_status gather_plan(rap_ckpt *c, ck_set *set, bool state, gather_src *g)
{
    int tmax = -1;
    for (int s = 0; s < set->n; s++)
        for (int k = 0; k < set->s[s].n; k++)
            tmax = set->s[s].table[k] > tmax ? set->s[s].table[k] : tmax;
    memset(g, 0, sizeof *g);
    g->set = set;
    g->cap = 2 * set->s[0].c->n + 16 + 2 * (tmax + 1);
    size_t cap = (size_t)g->cap;
    g->t = rap_calloc(sizeof *g->t * cap, "gather tensors");
    g->table = rap_calloc(sizeof(int) * cap, "gather");
    g->src_ti = rap_calloc(sizeof(int) * cap, "gather");
    g->state = rap_calloc(sizeof(bool) * cap, "gather");
    g->cols = rap_calloc(sizeof(int64_t) * cap, "gather");
    if (!g->t || !g->table || !g->src_ti || !g->state || !g->cols)
        return RAP_ERR_NOMEM;
    bool has_state = false; /* only when the files hold it */
    for (int k = 0; state && k < set->s[0].c->n; k++)
        has_state |= !strncmp(set->s[0].c->t[k].name, "optimizer.", 10);
    for (int pass = 0; pass < (has_state ? 2 : 1); pass++) {
        RAP_TRY(gather_tables(g, c->path, tmax, pass == 1));
        RAP_TRY(gather_mlps(g, c->path, pass == 1));
    }
    return RAP_OK;
}

/* RAP_ERR_ARG when out is c itself or one of the files of set. */
static rap_status out_not_input(const char *out, const rap_ckpt *c, const ck_set *set)
{
    const char *whole = c->path;
    RAP_TRY(rap_out_check_inputs(out, &whole, 1));
    for (int i = 0; i < set->n; i++) {
        const char *f = set->s[i].c ? set->s[i].c->path : NULL;
        RAP_TRY(rap_out_check_inputs(out, &f, 1));
    }
    return RAP_OK;
}

rap_status rap_ckpt_gather_write(rap_ckpt *c, const char *out, bool state,
                                 const char *const *drop, const char *contents)
{
    ck_set set;
    rap_status st = set_open(c, &set);
    if (st == RAP_OK)
        st = out_not_input(out, c, &set);
    if (st != RAP_OK) { /* set.s[0].c may be NULL (rank 0's file did not open) */
        set_free(&set);
        return st;
    }
    gather_src g;
    st = gather_plan(c, &set, state, &g);
    rap_meta meta = {0};
    if (st == RAP_OK)
        st = rap_meta_copy(&meta, &c->meta, drop, shard_step_keys);
    bool has = false; /* the update counter: the sources', with the state only */
    uint64_t step = 0;
    if (st == RAP_OK && state)
        st = set_emb_step(&set, &has, &step);
    if (st == RAP_OK && has)
        st = rap_meta_set(&meta, RAP_CKPT_EMB_STEP, "%llu", (unsigned long long)step);
    if (st == RAP_OK && contents)
        st = rap_meta_set(&meta, "contents", "%s", contents);
    if (st == RAP_OK && g.n == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: no model tensors", c->path);
    if (st == RAP_OK)
        st = rap_ckpt_write(out, &meta, g.t, g.n, fill_gather, &g, false, NULL);
    rap_meta_free(&meta);
    gather_free(&g);
    set_free(&set);
    return st;
}

rap_status rap_ckpt_gather(const char *in, const char *out, bool state)
{
    rap_ckpt *c;
    RAP_TRY(rap_ckpt_open(in, &c));
    rap_status st = rap_ckpt_gather_write(c, out, state, NULL, NULL);
    rap_ckpt_close(c);
    return st;
}
