/* fuzz_shard.c -- binary shards (src/data/shard.c, `rap prep --format
 * bin`): the bytes as a shard file, opened and read batch by batch; every
 * batch's columns must hold what the reader says. */
#include "fuzz.h"

#include "data/shard.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("input.shard", data, size);
    rap_shard_reader *r = NULL;
    if (!fuzz_refused(rap_shard_open(path, &r), path, NULL))
        return 0;
    int nc = rap_shard_n_cols(r);
    rap_host_column *cols = calloc((size_t)(nc ? nc : 1), sizeof *cols);
    for (int64_t b = 0; cols; b++) {
        float *label = NULL;
        int64_t rows = 0;
        rap_status st = rap_shard_next(r, &label, &rows, cols);
        if (!fuzz_refused(st, path, NULL) || rows == 0)
            break;
        for (int c = 0; c < nc; c++) {
            const rap_host_column *h = &cols[c];
            if (h->rows != rows || (h->kind == RAP_SPARSE && (h->off[0] != 0 || h->off[rows] < 0)))
                fuzz_fail("shard: batch %lld column %d is not what the reader checked",
                          (long long)b, c);
            rap_host_column_free(&cols[c]);
        }
        free(label);
    }
    free(cols);
    rap_shard_close_reader(r);
    return 0;
}
