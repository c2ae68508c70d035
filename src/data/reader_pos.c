/*
 * reader_pos.c -- the reader's data positions (position.h): opening the
 * input at a start position, recording where each row of the last batch
 * ends (track_positions) and answering rap_reader_position_at from that.
 *
 * A row's position is the file table entry of its file, the byte offset
 * just past its line (counting the tails lines.h dropped and leaving out a
 * '\n' the lane added at the file's end) and its line number. The row
 * arrays hold the last batch's rows only; the position before its first
 * row is kept apart (prev_*), so a batch's first row, its rows and the one
 * just past it can all be asked for.
 */
#include "data/reader_impl.h"

#include <string.h>

/* ------------------------------------------------------------- start */

/* The start position's file of the directory: its index in name order. */
static rap_status start_index(rap_reader *r)
{
    const char *name = strrchr(r->start.file, '/');
    name = name ? name + 1 : r->start.file;
    for (int64_t i = 0; i < r->n_names; i++)
        if (!strcmp(r->names[i], name)) {
            r->target.dir_index = i;
            return RAP_OK;
        }
    return rap_fail(RAP_ERR_DATA, "data position %s: not a regular file of %s", r->start.file,
                    r->input);
}

/* Opens the start position's file as r->first (file table entry 0, its
 * lines counted from the position's) and skips to its offset, which must
 * be 0, the file's end or just past a '\n'. */
rap_status reader_open_start(rap_reader *r)
{
    RAP_TRY(rap_position_resolve(r->input, r->is_dir, &r->start, &r->target));
    if (r->is_dir)
        RAP_TRY(start_index(r));
    RAP_TRY(rap_source_open(r->target.path, &r->first));
    int64_t fid;
    RAP_TRY(reader_ftab_add(r, r->first, r->start.line, &fid));
    int64_t off = r->start.offset;
    if (off == 0)
        return RAP_OK;
    char *scratch = rap_malloc(1 << 16, "position scratch");
    if (!scratch)
        return RAP_ERR_NOMEM;
    char c = 0, c2;
    size_t got = 0, got2 = 0;
    rap_status st = rap_source_skip(r->first, off - 1, scratch, 1 << 16);
    if (st == RAP_OK)
        st = rap_source_read(r->first, &c, 1, &got);
    if (st == RAP_OK && got == 1 && c != '\n')
        st = rap_source_read(r->first, &c2, 1, &got2);
    rap_free(scratch);
    if (st == RAP_OK && got == 0)
        st = rap_fail(RAP_ERR_DATA, "%s: the file ends before byte %lld", r->target.path,
                      (long long)off);
    if (st == RAP_OK && c != '\n' && got2 != 0)
        st = rap_fail(RAP_ERR_DATA, "%s: byte offset %lld is not the start of a line",
                      r->target.path, (long long)off);
    if (st != RAP_OK) {
        char d[1200];
        rap_position_describe(&r->start, d, sizeof d);
        return rap_fail_context(st, "data position %s (truncated or rewritten since?)", d);
    }
    return RAP_OK;
}

/* --------------------------------------------------------- tracking */

/* Records the positions just past rows [l->c_u, l->c_u + n) of slot sl,
 * to be rows [at, at + n) of the batch: each row's line found by walking
 * the slot's lines once (rejects before row u: l->c_k of them), its file
 * offset from the slot's and the dropped tails before it. */
void reader_track_rows(rap_reader *r, lane *l, const slot *sl, int64_t at, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t j = l->c_u + i + l->c_k; /* the row's line in the slot */
        while (l->c_line <= j) {
            const char *nl = memchr(sl->buf + l->c_byte, '\n', sl->len - (size_t)l->c_byte);
            l->c_byte = nl ? (int64_t)(nl - sl->buf) + 1 : (int64_t)sl->len;
            l->c_line++;
        }
        while (l->c_drop < sl->n_drops && (int64_t)sl->drops[l->c_drop].at < l->c_byte)
            l->c_dsum += sl->drops[l->c_drop++].n;
        int64_t off = sl->file_off + l->c_byte + l->c_dsum;
        if (sl->added_nl && l->c_byte == (int64_t)sl->len)
            off--;
        r->row_fid[at + i] = sl->fid;
        r->row_off[at + i] = off;
        r->row_line[at + i] = l->c_slot_base + j + 1;
    }
}

/* A new batch of capacity cap: the last batch's last row becomes the
 * position before it; the row arrays grow to cap (the first batch, or a
 * larger one). */
rap_status reader_positions_begin(rap_reader *r, int64_t cap)
{
    if (r->pos_n > 0) {
        int64_t k = r->pos_n - 1;
        r->prev_fid = r->row_fid[k];
        r->prev_off = r->row_off[k];
        r->prev_line = r->row_line[k];
    }
    r->pos_first = r->used_total;
    r->pos_n = 0;
    if (cap <= r->cap_rows)
        return RAP_OK;
    int64_t *a = rap_realloc(r->row_fid, (size_t)cap * sizeof *a, "reader positions");
    if (!a)
        return RAP_ERR_NOMEM;
    r->row_fid = a;
    int64_t *o = rap_realloc(r->row_off, (size_t)cap * sizeof *o, "reader positions");
    if (!o)
        return RAP_ERR_NOMEM;
    r->row_off = o;
    int64_t *li = rap_realloc(r->row_line, (size_t)cap * sizeof *li, "reader positions");
    if (!li)
        return RAP_ERR_NOMEM;
    r->row_line = li;
    r->cap_rows = cap;
    return RAP_OK;
}

/* ------------------------------------------------------------ asking */

rap_status rap_reader_position_at(rap_reader *r, int64_t row, rap_data_position *out)
{
    memset(out, 0, sizeof *out);
    if (!r || !r->cfg.track_positions)
        return rap_fail(RAP_ERR_ARG, "reader: positions asked of a reader that does not keep "
                                     "them (track_positions)");
    int64_t fid, off, line;
    if (row == r->pos_first) {
        fid = r->prev_fid;
        off = r->prev_off;
        line = r->prev_line;
    } else if (row > r->pos_first && row <= r->pos_first + r->pos_n) {
        int64_t k = row - r->pos_first - 1;
        fid = r->row_fid[k];
        off = r->row_off[k];
        line = r->row_line[k];
    } else {
        return rap_fail(RAP_ERR_ARG, "reader: the position of row %lld asked, the last batch "
                        "holds rows %lld to %lld", (long long)row, (long long)r->pos_first,
                        (long long)(r->pos_first + r->pos_n));
    }
    out->rows = row;
    if (fid < 0)
        return RAP_OK; /* the start of the input */
    out->valid = true;
    out->offset = off;
    out->line = line;
    pthread_mutex_lock(&r->mu);
    snprintf(out->file, sizeof out->file, "%s", r->ftab[fid].path);
    out->dev = r->ftab[fid].dev;
    out->ino = r->ftab[fid].ino;
    pthread_mutex_unlock(&r->mu);
    return RAP_OK;
}
