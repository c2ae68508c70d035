/* fuzz_tsv.c -- Criteo TSV rows (src/data/parse.c, and the GPU parser's
 * CPU reference src/data/parse_ref.c): the bytes as a chunk of lines (a
 * '\n' added when the last has none) through rap_parse_chunk, at two
 * line-length limits, and every line through rap_parse_line; the chunk's
 * counts must add up and agree with the lines'; the GPU parser's
 * reference must give the same good rows and the same rejects. */
#include "fuzz.h"

#include "data/parse.h"
#include "data/parse_ref.h"

#include <stdlib.h>
#include <string.h>

/* The GPU parser's CPU reference on the same lines (n bytes, `lines`
 * lines, as the line cutter would hand them: int32 offsets) must agree
 * with the CPU parser's p: the rows used, each reject's line and reason,
 * the labels of the good rows. */
static void against_ref(const char *text, size_t n, int64_t lines, int64_t max_line,
                        const rap_parsed *p)
{
    if (n > (size_t)INT32_MAX)
        return;
    int32_t *start = malloc(sizeof(int32_t) * (size_t)(lines + 1));
    rap_parse_rej *rj = malloc(sizeof *rj * (size_t)(lines + 1));
    rap_batch b;
    memset(&b, 0, sizeof b);
    if (!start || !rj || rap_batch_create(&b, rap_schema_criteo(), lines > 0 ? lines : 1, false)) {
        free(start);
        free(rj);
        return;
    }
    int64_t l = 0;
    start[0] = 0;
    for (size_t i = 0; i < n; i++)
        if (text[i] == '\n')
            start[++l] = (int32_t)(i + 1);
    rap_parse_layout lay;
    rap_parse_layout_criteo(&lay);
    rap_parse_result res;
    if (rap_parse_ref(&lay, text, (int64_t)n, start, lines, max_line, &b, rj, &res) != RAP_OK)
        fuzz_fail("parse_ref refused a line batch: %s", rap_last_error());
    if (res.rows_used != p->n_used || res.rows_rejected != p->n_rej)
        fuzz_fail("parse_ref: %lld used, %lld rejected; parse_chunk %lld, %lld",
                  (long long)res.rows_used, (long long)res.rows_rejected, (long long)p->n_used,
                  (long long)p->n_rej);
    for (int64_t i = 0; i < p->n_rej; i++)
        if (rj[i].line != p->rej[i].line || rj[i].reason != p->rej[i].reason ||
            rj[i].pos != p->rej[i].pos)
            fuzz_fail("parse_ref: reject %lld is line %d reason %d, parse_chunk line %lld "
                      "reason %d", (long long)i, rj[i].line, rj[i].reason,
                      (long long)p->rej[i].line, p->rej[i].reason);
    const int64_t B = b.cap, R = p->cap;
    const int64_t K = b.schema.ids_per_row > 0 ? b.schema.ids_per_row : 1;
    for (int64_t r = 0; r < p->n_used; r++) {
        bool same = b.label[r] == p->label[r];
        for (int j = 0; same && j < RAP_CRITEO_DENSE; j++)
            same = b.dense_valid[j * B + r] == p->dense_valid[j * R + r] &&
                   !memcmp(&b.dense[j * B + r], &p->dense[j * R + r], sizeof(float));
        for (int j = 0; same && j < RAP_CRITEO_SPARSE; j++) {
            const int64_t *off = b.sparse_off + j * (B + 1);
            bool v = p->sparse_valid[j * R + r];
            same = b.sparse_valid[j * B + r] == v && off[r + 1] - off[r] == (v ? 1 : 0) &&
                   (!v || b.sparse_ids[j * B * K + off[r]] == p->sparse[j * R + r]);
        }
        if (!same)
            fuzz_fail("parse_ref: good row %lld differs from parse_chunk's", (long long)r);
    }
    rap_batch_free(&b);
    free(start);
    free(rj);
}

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
        against_ref(text, n, lines, max_line[k], &p);
        rap_parsed_free(&p);
    }
    free(text);
    return 0;
}
