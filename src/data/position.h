/*
 * position.h -- where the reader stands in its input: the data position a
 * checkpoint records so that a resumed run starts at the first row the
 * checkpoint's weights have not trained on (docs/INPUT.md "Positions",
 * docs/TRAINING.md "Exactly once").
 *
 * A position names a line boundary of one file of the input: the file (its
 * path as the reader opened it, and its identity, device and inode), the
 * uncompressed byte offset just past the last line consumed, the number of
 * lines of that file before it, and the number of used rows of the whole
 * input before it (the index the hold-out rule keys on, rap_train_held_out).
 * Within a directory the files come in name order, so a position also says
 * which files are done: those whose names sort before its file's.
 *
 * The reader reports positions when rap_reader_config.track_positions is
 * set (rap_reader_position_at, below) and starts from one given as
 * rap_reader_config.start. A start position is hostile input: it is
 * checked against the file system before anything is read, and refused
 * (RAP_ERR_DATA, a message naming the file and what does not match) when
 * its file is not the input's (another directory, a hidden or missing
 * name), when the file is another file than the position's (another
 * inode, and for a single file no file of its directory is the old one),
 * when the file is shorter than the offset (truncated since), or when the
 * offset is not at the start of a line.
 *
 *   rap_reader_config rc = rap_reader_defaults();
 *   rc.input = "logs/"; rc.follow = true; rc.track_positions = true;
 *   rap_reader_open(&rc, &r);
 *   rap_reader_next(r, &b);                 // rows first_row .. first_row + rows
 *   rap_data_position p;
 *   rap_reader_position_at(r, b.first_row + 10, &p); // after the batch's 10th row
 *   ...
 *   rc.start = &p;                          // a later run starts there
 */
#ifndef RAP_DATA_POSITION_H
#define RAP_DATA_POSITION_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAP_POSITION_PATH 1024

typedef struct rap_data_position {
    bool valid;                   /* false: the start of the input (nothing consumed) */
    char file[RAP_POSITION_PATH]; /* the file as opened: the input, or input/name */
    uint64_t dev, ino;            /* its identity when it was read */
    int64_t offset;               /* uncompressed bytes of the file before the next line */
    int64_t line;                 /* lines of the file before the next line */
    int64_t rows;                 /* used rows of the input before it */
} rap_data_position;

/* The file a start position continues in, as rap_position_resolve found it. */
typedef struct {
    char path[4096];   /* the position's file (renamed: its new name) */
    bool then_input;   /* a single file renamed away: after it, the input from byte 0 */
    int64_t dir_index; /* a directory: the file's index in name order (set by the reader) */
} rap_position_target;

/* Checks start position p against input (a file or a directory; is_dir
 * says which) as the header says and fills *out. Errors: RAP_ERR_DATA
 * with the reason, naming the position's file; RAP_ERR_IO for a failing
 * stat or directory listing. */
rap_status rap_position_resolve(const char *input, bool is_dir, const rap_data_position *p,
                                rap_position_target *out);

/* "file:line (byte offset O, row R)" or "the start of the input", into out
 * (n bytes). Cannot fail. */
void rap_position_describe(const rap_data_position *p, char *out, size_t n);

struct rap_reader;
/* The position just before used row `row` of the input (rows before it:
 * row), for a row of the last batch rap_reader_next returned, or just past
 * it: row in [b.first_row, b.first_row + b.rows]. Consumer thread only
 * (the thread calling rap_reader_next). Errors: RAP_ERR_ARG without
 * track_positions or for a row outside that range. */
rap_status rap_reader_position_at(struct rap_reader *r, int64_t row, rap_data_position *out);

#ifdef __cplusplus
}
#endif
#endif /* RAP_DATA_POSITION_H */
