/* fuzz_json.c -- rap's JSON reader itself (src/core/json.c): the bytes as
 * a JSON text walked value by value with the typed readers (objects,
 * keys, strings, integers, numbers) and, for comparison, skipped whole by
 * rap_json_skip: the walk and the skip must agree on whether the text is
 * JSON. */
#include "fuzz.h"

#include "core/core.h"
#include "core/json.h"

#include <string.h>

/* Reads one value with the typed readers (containers iteratively: depth
 * is the reader's own). */
static rap_status walk(rap_json_reader *r)
{
    const int base = r->depth;
    do {
        if (rap_json_peek(r, '{')) {
            RAP_TRY(rap_json_object_begin(r));
        } else if (rap_json_peek(r, '[')) {
            RAP_TRY(rap_json_array_begin(r));
        } else if (rap_json_peek(r, '"')) {
            char *s = NULL;
            RAP_TRY(rap_json_string_dup(r, 1 << 20, &s));
            rap_free(s);
        } else {
            rap_json_reader t = *r; /* try the number readers on a copy */
            int64_t i;
            uint64_t u;
            double d;
            if (rap_json_int(&t, INT64_MIN, INT64_MAX, &i) == RAP_OK) {
                t = *r;
                if (rap_json_number(&t, &d) != RAP_OK)
                    fuzz_fail("json: an integer rap_json_number refuses");
            }
            t = *r;
            if (rap_json_uint(&t, UINT64_MAX, &u) == RAP_OK) {
                t = *r;
                if (rap_json_int(&t, 0, INT64_MAX, &i) == RAP_OK && (uint64_t)i != u)
                    fuzz_fail("json: rap_json_int and rap_json_uint disagree");
            }
            RAP_TRY(rap_json_skip(r));
        }
        while (r->depth > base) {
            bool more;
            char key[16];
            size_t len;
            if ((r->is_obj >> (r->depth - 1)) & 1)
                RAP_TRY(rap_json_next_key(r, &more, key, sizeof key, &len));
            else
                RAP_TRY(rap_json_next_item(r, &more));
            if (more)
                break;
        }
    } while (r->depth > base);
    return RAP_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    rap_json_reader a, b;
    const char *text = (const char *)data;
    rap_status sa = rap_json_reader_init(&a, text, size, 1 << 20, "fuzz.json", "JSON text");
    if (sa == RAP_OK)
        sa = walk(&a);
    if (sa == RAP_OK)
        sa = rap_json_end(&a);
    rap_status sb = rap_json_reader_init(&b, text, size, 1 << 20, "fuzz.json", "JSON text");
    if (sb == RAP_OK)
        sb = rap_json_skip(&b);
    if (sb == RAP_OK)
        sb = rap_json_end(&b);
    fuzz_refused(sa, "fuzz.json", NULL);
    fuzz_refused(sb, "fuzz.json", NULL);
    if ((sa == RAP_OK) != (sb == RAP_OK))
        fuzz_fail("json: the typed walk says %d, rap_json_skip %d", (int)sa, (int)sb);
    return 0;
}
