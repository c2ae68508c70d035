/* position.c -- checking a start position against the file system
 * (position.h). The reader's own bookkeeping of positions is in reader.c
 * and reader_lane.c. */
#include "data/position.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void rap_position_describe(const rap_data_position *p, char *out, size_t n)
{
    if (!p || !p->valid) {
        snprintf(out, n, "the start of the input");
        return;
    }
    snprintf(out, n, "%s:%lld (byte offset %lld, row %lld)", p->file, (long long)p->line,
             (long long)p->offset, (long long)p->rows);
}

/* The fields on their own: no negative count, a line count the bytes can
 * hold (every line has at least its '\n', the last one perhaps not), a
 * file name that is a name. */
static rap_status check_fields(const rap_data_position *p)
{
    if (!memchr(p->file, 0, sizeof p->file) || !p->file[0])
        return rap_fail(RAP_ERR_DATA, "data position: no file named (or a name that is not "
                                      "terminated)");
    if (p->offset < 0 || p->line < 0 || p->rows < 0)
        return rap_fail(RAP_ERR_DATA, "data position %s: expected offset, line and rows >= 0, "
                        "got %lld, %lld, %lld", p->file, (long long)p->offset,
                        (long long)p->line, (long long)p->rows);
    if (p->line > p->offset + 1 || (p->line == 0) != (p->offset == 0))
        return rap_fail(RAP_ERR_DATA, "data position %s: %lld lines cannot end at byte %lld",
                        p->file, (long long)p->line, (long long)p->offset);
    return RAP_OK;
}

/* A single file whose path names another file now: the old one under
 * another name in the same directory (renamed, create style). */
static bool find_renamed(const char *input, const rap_data_position *p, char *out, size_t n)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", input);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_ino == p->ino &&
            (uint64_t)sb.st_dev == p->dev) {
            snprintf(out, n, "%s", path);
            found = true;
        }
    }
    closedir(d);
    return found;
}

rap_status rap_position_resolve(const char *input, bool is_dir, const rap_data_position *p,
                                rap_position_target *out)
{
    memset(out, 0, sizeof *out);
    RAP_TRY(check_fields(p));
    struct stat sb;
    if (is_dir) {
        const char *name = strrchr(p->file, '/');
        name = name ? name + 1 : p->file;
        size_t dl = strlen(input);
        while (dl > 1 && input[dl - 1] == '/')
            dl--;
        if (name[0] == '.' || (size_t)(name - p->file) != dl + 1 ||
            strncmp(p->file, input, dl) != 0)
            return rap_fail(RAP_ERR_DATA, "data position %s: not a file of the input directory "
                            "%s", p->file, input);
        snprintf(out->path, sizeof out->path, "%s", p->file);
        if (stat(out->path, &sb) != 0)
            return rap_fail(RAP_ERR_DATA, "data position %s: the file is gone (%s): the rows "
                            "after its line %lld cannot be read; refusing to guess where to go "
                            "on", p->file, strerror(errno), (long long)p->line);
        if ((uint64_t)sb.st_ino != p->ino || (uint64_t)sb.st_dev != p->dev)
            return rap_fail(RAP_ERR_DATA, "data position %s: the name now holds another file "
                            "(inode %llu, the position's was %llu): replaced since the "
                            "checkpoint", p->file, (unsigned long long)sb.st_ino,
                            (unsigned long long)p->ino);
    } else {
        if (strcmp(p->file, input) != 0)
            return rap_fail(RAP_ERR_DATA, "data position %s: not the input %s", p->file, input);
        if (stat(input, &sb) != 0 || (uint64_t)sb.st_ino != p->ino ||
            (uint64_t)sb.st_dev != p->dev) {
            if (!find_renamed(input, p, out->path, sizeof out->path))
                return rap_fail(RAP_ERR_DATA, "data position %s: the file is another one now "
                                "and no file of its directory is the position's (inode %llu): "
                                "the rows after its line %lld are gone", p->file,
                                (unsigned long long)p->ino, (long long)p->line);
            out->then_input = true;
            if (stat(out->path, &sb) != 0)
                return rap_fail(RAP_ERR_IO, "%s: %s", out->path, strerror(errno));
        } else {
            snprintf(out->path, sizeof out->path, "%s", input);
        }
    }
    if (!S_ISREG(sb.st_mode))
        return rap_fail(RAP_ERR_DATA, "data position %s: not a regular file", out->path);
    return RAP_OK;
}
