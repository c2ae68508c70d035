/* fuzz_tsv.c -- Criteo TSV rows (src/data/parse.c): the bytes as a chunk
 * of lines (a '\n' added when the last has none) through rap_parse_chunk,
 * at two line-length limits, and every line through rap_parse_line; the
 * chunk's counts must add up and agree with the lines'. */
#include "fuzz.h"

#include "data/parse.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    size_t n = size;
    if (n == 0 || text[n - 1] != '\n')
        text[n++] = '\n';
    int64_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    static const int64_t max_line[2] = {65536, 40};
    for (int k = 0; k < 2; k++) {
        rap_parsed p;
        memset(&p, 0, sizeof p);
        if (rap_parse_chunk(text, n, max_line[k], &p) != RAP_OK) {
            rap_parsed_free(&p);
            continue; /* out of memory only */
        }
        if (p.n_lines != lines || p.n_used + p.n_rej != p.n_lines || p.n_used > p.cap)
            fuzz_fail("parse_chunk: %lld lines, %lld used + %lld rejected, expected %lld lines",
                      (long long)p.n_lines, (long long)p.n_used, (long long)p.n_rej,
                      (long long)lines);
        /* each line alone: the same verdict as in the chunk */
        int64_t rej = 0, line = 0;
        for (size_t at = 0; at < n; line++) {
            const char *nl = memchr(text + at, '\n', n - at);
            size_t len = (size_t)(nl - (text + at));
            float label, dense[RAP_CRITEO_DENSE];
            uint8_t dv[RAP_CRITEO_DENSE], sv[RAP_CRITEO_SPARSE];
            int64_t sparse[RAP_CRITEO_SPARSE];
            char msg[256];
            int r = rap_parse_line(text + at, len, max_line[k], &label, dense, dv, sparse, sv, msg,
                                   sizeof msg);
            if (r >= 0) {
                if (rej >= p.n_rej || p.rej[rej].line != line || p.rej[rej].reason != r)
                    fuzz_fail("line %lld: parse_line rejects it (reason %d), parse_chunk does "
                              "not agree", (long long)line, r);
                rej++;
            }
            at += len + 1;
        }
        if (rej != p.n_rej)
            fuzz_fail("parse_chunk rejected %lld lines, parse_line %lld", (long long)p.n_rej,
                      (long long)rej);
        rap_parsed_free(&p);
    }
    free(text);
    return 0;
}
