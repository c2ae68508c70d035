/*
 * reader_lane.c -- the reader's lane threads (reader_impl.h): each reads its
 * files one after the other (plain, or gzip inflated by source.c), cuts
 * the bytes into chunks of whole lines with the rule of lines.h, and
 * publishes the chunks in its ring in its input order.
 *
 * A chunk never spans two files. With one lane (L = 1) the lane reads a
 * file, stdin or a whole directory, follows growing files and new files
 * (--follow) and stops at max_rows; with L > 1 (several files of a
 * directory inflated at once, never with follow) lane j reads files j,
 * j + L, j + 2L, ... of the directory listing and rap_reader_next applies
 * max_rows. Stop: the lane looks at the stop flag before each read and
 * every <= 100 ms while waiting (follow sleep, pipe poll), drops a partial
 * line and ends; chunks already published are still handed out.
 */
#include "data/reader_impl.h"

#include "data/parquet.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define POLL_S 0.05 /* follow: how often a quiet input is looked at again */
#define MOVED_GRACE_S 0.25 /* follow: a file whose path names another file is read
                            * on this long (its writer may not have reopened yet) */

/* ---------------------------------------------------------- directory */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

rap_status reader_rescan(rap_reader *r, int64_t *added)
{
    *added = 0;
    DIR *d = opendir(r->input);
    if (!d)
        return rap_fail(RAP_ERR_IO, "%s: %s", r->input, strerror(errno));
    const char *last = r->n_names ? r->names[r->n_names - 1] : NULL;
    char **found = NULL;
    int64_t n = 0, cap = 0;
    rap_status st = RAP_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || (last && strcmp(e->d_name, last) <= 0))
            continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", r->input, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **g = rap_realloc(found, (size_t)cap * sizeof *g, "directory listing");
            if (!g) {
                st = RAP_ERR_NOMEM;
                break;
            }
            found = g;
        }
        if (!(found[n] = strdup(e->d_name))) {
            st = rap_fail(RAP_ERR_NOMEM, "out of memory listing %s", r->input);
            break;
        }
        n++;
    }
    closedir(d);
    if (st == RAP_OK && n > 0) {
        qsort(found, (size_t)n, sizeof *found, cmp_names);
        if (r->n_names + n > r->cap_names) {
            int64_t c = (r->n_names + n) * 2;
            char **g = rap_realloc(r->names, (size_t)c * sizeof *g, "directory listing");
            if (!g)
                st = RAP_ERR_NOMEM;
            else {
                r->names = g;
                r->cap_names = c;
            }
        }
        if (st == RAP_OK) {
            memcpy(r->names + r->n_names, found, (size_t)n * sizeof *found);
            r->n_names += n;
            *added = n;
            n = 0;
        }
    }
    for (int64_t i = 0; i < n; i++)
        free(found[i]);
    rap_free(found);
    return st;
}

/* --------------------------------------------------------- file table */

rap_status reader_ftab_add(rap_reader *r, rap_source *src, int64_t line0, int64_t *fid)
{
    uint64_t dev = 0, ino = 0;
    if (rap_source_is_regular(src))
        RAP_TRY(rap_source_identity(src, &dev, &ino));
    char *path = strdup(rap_source_name(src));
    if (!path)
        return rap_fail(RAP_ERR_NOMEM, "out of memory naming %s", rap_source_name(src));
    if (r->sync_init) /* else rap_reader_open, before any thread */
        pthread_mutex_lock(&r->mu);
    rap_status st = RAP_OK;
    if (r->n_ftab == r->cap_ftab) {
        int64_t c = r->cap_ftab ? 2 * r->cap_ftab : 16;
        void *g = rap_realloc(r->ftab, (size_t)c * sizeof *r->ftab, "file table");
        if (!g)
            st = RAP_ERR_NOMEM;
        else {
            r->ftab = g;
            r->cap_ftab = c;
        }
    }
    if (st == RAP_OK) {
        *fid = r->n_ftab;
        r->ftab[r->n_ftab].path = path;
        r->ftab[r->n_ftab].dev = dev;
        r->ftab[r->n_ftab].ino = ino;
        r->ftab[r->n_ftab].line0 = line0;
        r->n_ftab++;
    }
    if (r->sync_init)
        pthread_mutex_unlock(&r->mu);
    if (st != RAP_OK)
        free(path);
    return st;
}

/* ------------------------------------------------------------- slots */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Takes the slot of the lane's next sequence number for filling.
 * RAP_ERR_INTERRUPTED when the reader is being closed. */
static rap_status acquire(lane *l, const char *path, int64_t file_idx)
{
    rap_reader *r = l->r;
    pthread_mutex_lock(&r->mu);
    slot *sl = &l->slots[l->produced % r->S];
    while (sl->state != SLOT_FREE && !r->closing)
        pthread_cond_wait(&l->cv, &r->mu);
    bool closing = r->closing;
    if (!closing)
        sl->state = SLOT_FILLING;
    pthread_mutex_unlock(&r->mu);
    if (closing)
        return RAP_ERR_INTERRUPTED;
    sl->len = 0;
    sl->file_idx = file_idx;
    sl->first = false;
    sl->skip = 0;
    sl->pq_group = -1;
    sl->pq_max = -1;
    sl->fid = l->fid;
    sl->file_off = l->src_off;
    sl->n_drops = 0;
    sl->added_nl = false;
    if (sl->path != path)
        snprintf(sl->path, sizeof sl->path, "%s", path);
    l->filling = sl;
    memset(&l->fill, 0, sizeof l->fill);
    l->fill.drops = sl->drops;
    l->fill.cap_drops = sl->drops ? r->cap_drops : 0;
    return RAP_OK;
}

/* Gives back a slot that is being filled, unpublished. */
static void release(lane *l)
{
    if (!l->filling)
        return;
    pthread_mutex_lock(&l->r->mu);
    l->filling->state = SLOT_FREE;
    pthread_mutex_unlock(&l->r->mu);
    l->filling = NULL;
}

/* Publishes buf[0, cut) of the slot being filled (whole lines) and, when
 * more, continues in a new slot holding buf[cut, len). With one lane and
 * max_rows, cuts after the last line allowed and sets *limit. */
static rap_status emit(lane *l, size_t cut, bool more, bool *limit)
{
    rap_reader *r = l->r;
    *limit = false;
    slot *sl = l->filling;
    char *b = sl->buf;
    if (r->cfg.max_rows > 0 && r->L == 1 && cut > 0) {
        int64_t left = r->cfg.max_rows - l->lines_emitted;
        const char *p = b, *end = b + cut;
        int64_t k = 0;
        if (sl->first && r->cfg.schema && r->cfg.schema->header) { /* not a row */
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            p = nl ? nl + 1 : end;
        }
        while (p < end && k < left) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl)
                break;
            p = nl + 1;
            k++;
        }
        l->lines_emitted += k;
        if (l->lines_emitted >= r->cfg.max_rows) {
            cut = (size_t)(p - b);
            *limit = true;
            more = false;
        }
    }
    size_t carry = l->fill.len - cut;
    if (more && carry > 0)
        memcpy(l->carry, b + cut, carry);
    if (cut == 0) {
        if (!more)
            release(l);
        return RAP_OK;
    }
    sl->len = cut;
    sl->n_drops = l->fill.n_drops;
    sl->added_nl = l->fill.added_nl && cut == l->fill.len;
    pthread_mutex_lock(&r->mu);
    sl->state = SLOT_FILLED;
    l->produced++;
    r->idle = false;
    pthread_cond_broadcast(&r->cv_parser); /* shared parse: the thread whose turn it is */
    pthread_mutex_unlock(&r->mu);
    l->filling = NULL;
    if (!more)
        return RAP_OK;
    rap_line_fill keep = l->fill;
    RAP_TRY(acquire(l, sl->path, sl->file_idx));
    memcpy(l->filling->buf, l->carry, carry);
    l->fill = keep;
    rap_line_fill_shift(&l->fill, cut);
    l->fill.drops = l->filling->drops; /* the records before cut went with sl */
    l->fill.n_drops = 0;
    l->filling->file_off = l->src_off - (int64_t)carry - keep.drop_cur;
    return RAP_OK;
}

static void add_bytes(rap_reader *r, size_t n)
{
    pthread_mutex_lock(&r->st_mu);
    r->st.bytes_read += (int64_t)n;
    pthread_mutex_unlock(&r->st_mu);
}

static void set_idle(rap_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->idle = true;
    pthread_cond_broadcast(&r->cv_consumer);
    pthread_mutex_unlock(&r->mu);
}

static bool idle_expired(const rap_reader *r)
{
    return r->cfg.idle_timeout_s > 0 && rap_now() - r->last_data >= r->cfg.idle_timeout_s;
}

/* ------------------------------------------------------------- files */

/* A followed plain file is shorter than what was read (copytruncate): it
 * is read again from its first byte as a new file of the table (lines
 * counted from 1 again). The partial line held (the slot holds nothing
 * else: its whole lines were just emitted) is kept: its writer goes on
 * writing it at the new start. */
static rap_status truncated(lane *l, rap_source *src)
{
    rap_reader *r = l->r;
    RAP_TRY(rap_source_rewind(src));
    int64_t fid;
    RAP_TRY(reader_ftab_add(r, src, 0, &fid));
    l->fid = fid;
    l->src_off = 0;
    l->filling->fid = fid;
    l->filling->file_off = -(int64_t)l->fill.len - l->fill.drop_cur;
    rap_info("%s: truncated while followed (copytruncate): reading it again from its first "
             "byte", rap_source_name(src));
    return RAP_OK;
}

/* Follow: looks at what the quiet file's path names now. A truncation is
 * read again at once; a path naming another file (or none) for
 * MOVED_GRACE_S ends the file (*final, l->moved). */
static rap_status rotation(lane *l, rap_source *src, bool *final)
{
    rap_rotation rot;
    RAP_TRY(rap_source_rotation(src, rap_source_name(src), &rot));
    if (rot == RAP_ROT_TRUNCATED) {
        l->moved_since = -1;
        return truncated(l, src);
    }
    if (rot != RAP_ROT_MOVED) {
        l->moved_since = -1;
        return RAP_OK;
    }
    double now = rap_now();
    if (l->moved_since < 0) {
        l->moved_since = now;
    } else if (now - l->moved_since >= MOVED_GRACE_S) {
        *final = true;
        l->moved = true;
        rap_info("%s: renamed, replaced or deleted while followed: its rows read to its end",
                 rap_source_name(src));
    }
    return RAP_OK;
}

/* The file has no more bytes now: decides whether it has ended. Emits
 * the complete lines so far when it has not (a follow), rescans a followed
 * directory, sleeps. *final: read it to its end now; *end: stop reading
 * altogether (the follow timed out, max_rows reached). */
static rap_status quiet_input(lane *l, rap_source *src, int64_t dir_idx, bool *final, bool *end)
{
    rap_reader *r = l->r;
    bool pipe = !rap_source_is_regular(src);
    *final = pipe ? rap_source_at_end(src)
                  : (!r->cfg.follow || l->final_at_end || (r->is_dir && dir_idx < r->n_names - 1));
    if (*final)
        return RAP_OK;
    bool limit = false;
    if (l->fill.line_start > 0) { /* let the caller see complete lines now */
        rap_status st = emit(l, l->fill.line_start, true, &limit);
        if (st != RAP_OK || limit) {
            *end = true;
            return st;
        }
    }
    if (!r->cfg.follow)
        return RAP_OK; /* a pipe with nothing yet: wait on */
    if (!pipe && r->is_dir) {
        int64_t added;
        RAP_TRY(reader_rescan(r, &added));
        *final = added > 0;
    }
    if (!*final && idle_expired(r)) {
        *final = true;
        *end = true;
    }
    if (!*final) {
        set_idle(r);
        if (!pipe)
            sleep_s(POLL_S);
    }
    /* looked at after the sleep, right before the next read: a file
     * truncated and written again meanwhile is not read at the old offset */
    if (!pipe && !*final)
        RAP_TRY(rotation(l, src, final));
    return RAP_OK;
}

/* Reads one file (dir_idx: its index in names, or 0) to its end. *end:
 * stop reading altogether (stopped, max_rows reached, follow timed out). */
static rap_status read_file(lane *l, rap_source *src, int64_t dir_idx, bool *end)
{
    rap_reader *r = l->r;
    pthread_mutex_lock(&r->st_mu);
    r->st.files++;
    pthread_mutex_unlock(&r->st_mu);
    rap_status st = acquire(l, rap_source_name(src), dir_idx);
    if (st != RAP_OK) {
        *end = true;
        return RAP_OK;
    }
    l->filling->first = true;
    bool limit = false;
    for (;;) {
        if (atomic_load(&r->stop)) { /* a partial line is dropped */
            release(l);
            *end = true;
            return RAP_OK;
        }
        if (r->C - l->fill.len < r->C / 4) { /* nearly full: hand over whole lines */
            st = emit(l, l->fill.line_start, true, &limit);
            if (st != RAP_OK || limit) {
                *end = true;
                return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
            }
            continue;
        }
        size_t got;
        st = rap_source_read(src, l->filling->buf + l->fill.len, r->C - l->fill.len, &got);
        if (st != RAP_OK) {
            release(l);
            return st;
        }
        if (got > 0) {
            add_bytes(r, got);
            l->src_off += (int64_t)got;
            r->last_data = rap_now();
            rap_line_fill_take(&l->fill, l->filling->buf, got, r->cfg.max_line);
            continue;
        }
        bool final = false;
        st = quiet_input(l, src, dir_idx, &final, end);
        if (st != RAP_OK || *end) {
            if (st != RAP_OK || !final) {
                release(l);
                return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
            }
        }
        if (!final)
            continue;
        /* the file ends here */
        char tail[2];
        size_t nt;
        st = rap_source_finish(src, tail, &nt);
        if (st != RAP_OK) {
            release(l);
            return st;
        }
        if (nt > 0) {
            memcpy(l->filling->buf + l->fill.len, tail, nt);
            add_bytes(r, nt);
            l->src_off += (int64_t)nt;
            rap_line_fill_take(&l->fill, l->filling->buf, nt, r->cfg.max_line);
        }
        rap_line_fill_end(&l->fill, l->filling->buf);
        st = emit(l, l->fill.len, false, &limit);
        if (limit)
            *end = true;
        return st == RAP_ERR_INTERRUPTED ? RAP_OK : st;
    }
}

/* Publishes the slot being filled as row group g of a Parquet file (the
 * parser threads read it: parse_slot). */
static void publish_group(lane *l, int g, int64_t max)
{
    rap_reader *r = l->r;
    slot *sl = l->filling;
    sl->pq_group = g;
    sl->pq_max = max;
    sl->len = 0;
    pthread_mutex_lock(&r->mu);
    sl->state = SLOT_FILLED;
    l->produced++;
    r->idle = false;
    pthread_cond_broadcast(&r->cv_parser); /* shared parse: the thread whose turn it is */
    pthread_mutex_unlock(&r->mu);
    l->filling = NULL;
}

/* A Parquet file (file table entry fid; dir_idx as for read_file): its footer read and its
 * columns bound to the schema here, then one slot a row group, in order,
 * each read and made into rows by a parser thread. A file is read whole
 * (no follow); with one lane, max_rows cuts the groups. */
static rap_status read_parquet(lane *l, const char *path, int64_t fid, int64_t dir_idx,
                               bool *end)
{
    rap_reader *r = l->r;
    l->fid = fid; /* the file table's entry of path (its slots' lines) */
    pthread_mutex_lock(&r->st_mu);
    r->st.files++;
    pthread_mutex_unlock(&r->st_mu);
    rap_pq *p;
    RAP_TRY(rap_pq_open(path, &p));
    int map[RAP_SCHEMA_MAX_COLS];
    rap_status st = rap_pq_bind(p, path, reader_pq_schema(r), map);
    int groups = rap_pq_groups(p);
    int64_t *rows = rap_malloc(sizeof *rows * (size_t)(groups + 1), "Parquet row groups");
    if (st == RAP_OK && !rows)
        st = RAP_ERR_NOMEM;
    for (int g = 0; st == RAP_OK && g < groups; g++)
        rows[g] = rap_pq_group_rows(p, g);
    rap_pq_close(p);
    for (int g = 0; st == RAP_OK && g < groups; g++) {
        if (atomic_load(&r->stop)) {
            *end = true;
            break;
        }
        int64_t max = -1;
        if (r->cfg.max_rows > 0 && r->L == 1) {
            int64_t left = r->cfg.max_rows - l->lines_emitted;
            max = rows[g] < left ? rows[g] : left;
            l->lines_emitted += max;
        }
        if (acquire(l, path, dir_idx) != RAP_OK) {
            *end = true;
            break;
        }
        l->filling->first = g == 0;
        publish_group(l, g, max);
        if (max >= 0 && l->lines_emitted >= r->cfg.max_rows) {
            *end = true;
            break;
        }
    }
    rap_free(rows);
    return st;
}

/* Reads src from its byte off (already skipped to) as file table entry
 * fid, then closes it; *end as for read_file. */
static rap_status read_tracked(lane *l, rap_source *src, int64_t fid, int64_t off,
                               int64_t dir_idx, bool *end)
{
    l->fid = fid;
    l->src_off = off;
    l->moved = false;
    l->moved_since = -1;
    rap_status st = read_file(l, src, dir_idx, end);
    rap_source_close(src);
    return st;
}

/* Opens path as a new entry of the file table and reads it. */
static rap_status read_path(lane *l, const char *path, int64_t dir_idx, bool *end)
{
    rap_source *src;
    RAP_TRY(rap_source_open(path, &src));
    int64_t fid;
    rap_status st = reader_ftab_add(l->r, src, 0, &fid);
    if (st != RAP_OK) {
        rap_source_close(src);
        return st;
    }
    return read_tracked(l, src, fid, 0, dir_idx, end);
}

/* Opens and reads file i of the directory (the start position's file:
 * r->first, opened by rap_reader_open); *end as for read_file. */
static rap_status read_dir_file(lane *l, int64_t i, bool *end)
{
    rap_reader *r = l->r;
    if (r->first && r->start.valid && i == r->target.dir_index) {
        rap_source *src = r->first;
        r->first = NULL;
        return read_tracked(l, src, 0, r->start.offset, i, end);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->input, r->names[i]);
    if (rap_pq_is_parquet(path)) { /* a file table entry as for text, then its row groups */
        rap_source *src;
        RAP_TRY(rap_source_open(path, &src));
        int64_t fid;
        rap_status st = reader_ftab_add(r, src, 0, &fid);
        rap_source_close(src);
        return st == RAP_OK ? read_parquet(l, path, fid, i, end) : st;
    }
    return read_path(l, path, i, end);
}

/* Follow: waits for path to name a file again (a single file renamed or
 * deleted: its writer creates it anew). *gone: stopped or timed out. */
static void wait_for_path(rap_reader *r, const char *path, bool *gone)
{
    *gone = false;
    for (;;) {
        struct stat sb;
        if (atomic_load(&r->stop) || idle_expired(r)) {
            *gone = true;
            return;
        }
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            return;
        set_idle(r);
        sleep_s(POLL_S);
    }
}

/* A single file (or stdin): from the start position when there is one
 * (and for a file renamed away since, then the input from its first
 * byte); with follow, a file renamed or replaced is followed by the file
 * its path names next. */
static rap_status read_single(lane *l)
{
    rap_reader *r = l->r;
    bool end = false;
    rap_source *src = r->first;
    r->first = NULL;
    if (strcmp(r->input, "-") && rap_pq_is_parquet(r->input)) { /* read whole, no follow */
        rap_source_close(src);
        return read_parquet(l, r->input, 0, 0, &end); /* entry 0: rap_reader_open's */
    }
    bool again = r->target.then_input;
    l->final_at_end = again; /* renamed away before the position was taken */
    rap_status st = read_tracked(l, src, 0, r->start.valid ? r->start.offset : 0, 0, &end);
    l->final_at_end = false;
    while (st == RAP_OK && !end && (again || (r->cfg.follow && l->moved))) {
        again = false;
        bool gone;
        wait_for_path(r, r->input, &gone);
        if (gone)
            break;
        st = read_path(l, r->input, 0, &end);
    }
    return st;
}

/* The lane's files; *file: the index of the file an error came from. */
static rap_status read_all(lane *l, int64_t *file)
{
    rap_reader *r = l->r;
    bool end = false;
    *file = 0;
    if (!r->is_dir)
        return read_single(l);
    if (r->L > 1) { /* files id, id + L, ...; the listing is fixed */
        for (int64_t i = l->id; i < r->n_names && !end; i += r->L) {
            if (atomic_load(&r->stop))
                return RAP_OK;
            *file = i;
            RAP_TRY(read_dir_file(l, i, &end));
        }
        return RAP_OK;
    }
    int64_t i = r->start.valid ? r->target.dir_index : 0;
    for (;;) {
        if (atomic_load(&r->stop))
            return RAP_OK;
        if (i < r->n_names) {
            *file = i;
            RAP_TRY(read_dir_file(l, i, &end));
            if (end)
                return RAP_OK;
            /* a name replaced by a new file (create style) is read again */
            char path[4096];
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", r->input, r->names[i]);
            if (!(r->cfg.follow && l->moved && i == r->n_names - 1 && stat(path, &sb) == 0 &&
                  S_ISREG(sb.st_mode)))
                i++;
            continue;
        }
        *file = i;
        if (!r->cfg.follow)
            return RAP_OK;
        int64_t added;
        RAP_TRY(reader_rescan(r, &added));
        if (added > 0)
            continue;
        if (idle_expired(r))
            return RAP_OK;
        set_idle(r);
        sleep_s(POLL_S);
    }
}

void *reader_lane_main(void *arg)
{
    lane *l = arg;
    rap_reader *r = l->r;
    if (r->L == 1)
        r->last_data = rap_now();
    int64_t file = 0;
    rap_status st = read_all(l, &file);
    pthread_mutex_lock(&r->mu);
    if (st != RAP_OK && st != RAP_ERR_INTERRUPTED) {
        l->err = st;
        l->err_file = file;
        snprintf(l->err_msg, sizeof l->err_msg, "%s", rap_last_error());
    }
    l->done = true;
    pthread_cond_broadcast(&r->cv_consumer);
    pthread_cond_broadcast(&r->cv_parser); /* shared parse: past this lane's files */
    pthread_mutex_unlock(&r->mu);
    return NULL;
}
