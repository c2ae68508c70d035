/* test_json.c -- the JSON reader and writer of src/core/json.h: documents
 * read back as written, hostile texts refused with the byte offset,
 * nesting far past the limit refused without recursion. */
#include "test.h"

#include "core/core.h"
#include "core/json.h"

#include <stdlib.h>

/* Skips the one value of text (n bytes) and checks the end. */
static rap_status skip_all(const char *text, size_t n)
{
    rap_json_reader r;
    RAP_TRY(rap_json_reader_init(&r, text, n, RAP_JSON_MAX_BYTES, "t.json", "test text"));
    RAP_TRY(rap_json_skip(&r));
    return rap_json_end(&r);
}

static rap_status skip_str(const char *text) { return skip_all(text, strlen(text)); }

/* The one string of text, decoded into out (cap bytes), its length in *len. */
static rap_status read_str(const char *text, char *out, size_t cap, size_t *len)
{
    rap_json_reader r;
    RAP_TRY(rap_json_reader_init(&r, text, strlen(text), 1 << 20, "t.json", "test text"));
    RAP_TRY(rap_json_string(&r, out, cap, len));
    return rap_json_end(&r);
}

RAP_TEST(json_reader_accepts_valid_documents)
{
    static const char *const ok[] = {
        "{}", "[]", " {\"a\" : [1, -2.5e+3, 0, 0.25, true, false, null, \"x\"], \"b\": {}}\n",
        "[[[[]]]]", "\"\"", "-0", "1E9", "{\"k\":{\"k\":{\"k\":[{\"k\":null}]}}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK_MSG(skip_str(ok[i]) == RAP_OK, "%s: %s", ok[i], rap_last_error());

    /* strings decode escapes, pairs of surrogates and raw bytes >= 0x80 */
    char s[64];
    size_t len = 0;
    CHECK_OK(read_str("\"a\\\"b\\\\c\\/d\\n\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\xc3\xa9\"", s,
                      sizeof s, &len));
    CHECK_MSG(!strcmp(s, "a\"b\\c/d\n\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9") &&
                  len == strlen(s), "decoded \"%s\" (%zu bytes)", s, len);
    /* cut to the buffer, the whole length said */
    CHECK_OK(read_str("\"abcdefgh\"", s, 4, &len));
    CHECK(!strcmp(s, "abc") && len == 8);

    /* the walk of a document by keys and items */
    const char *doc = "{\"n\": 42, \"skip\": {\"deep\": [1, {\"x\": []}]}, \"v\": [7, 8], \"s\": \"hi\"}";
    rap_json_reader r;
    REQUIRE_OK(rap_json_reader_init(&r, doc, strlen(doc), 1000, "t.json", "doc"));
    REQUIRE_OK(rap_json_object_begin(&r));
    uint64_t n = 0, v[3] = {0};
    int nv = 0;
    char *str = NULL;
    for (int guard = 0; guard < 10; guard++) {
        char key[16];
        bool more;
        REQUIRE_OK(rap_json_next_key(&r, &more, key, sizeof key, NULL));
        if (!more)
            break;
        if (!strcmp(key, "n")) {
            REQUIRE_OK(rap_json_uint(&r, 100, &n));
        } else if (!strcmp(key, "v")) {
            REQUIRE_OK(rap_json_array_begin(&r));
            for (bool m = true; m;) {
                REQUIRE_OK(rap_json_next_item(&r, &m));
                if (m && nv < 3)
                    REQUIRE_OK(rap_json_uint(&r, UINT64_MAX, &v[nv++]));
            }
        } else if (!strcmp(key, "s")) {
            REQUIRE_OK(rap_json_string_dup(&r, 10, &str));
        } else {
            REQUIRE_OK(rap_json_skip(&r));
        }
    }
    CHECK_OK(rap_json_end(&r));
    CHECK(n == 42 && nv == 2 && v[0] == 7 && v[1] == 8);
    CHECK(str && !strcmp(str, "hi"));
    rap_free(str);
}

RAP_TEST(json_reader_refuses_hostile_texts)
{
    static const struct {
        const char *text;
        const char *why;  /* in the message */
        size_t at;        /* byte offset named */
    } bad[] = {
        {"{\"a\":1,}", "expected a string", 7},
        {"[1,]", "unexpected character", 3},
        {"[1 2]", "expected ',' or ']'", 3},
        {"{\"a\" 1}", "expected ':'", 5},
        {"{'a':1}", "expected a string", 1},
        {"[01]", "leading zero", 1},
        {"[1.]", "no digit after '.'", 3},
        {"[1e]", "no digit in the exponent", 3},
        {"[tru]", "unexpected character", 1},
        {"\"abc", "unterminated string", 4},
        {"\"a\\x\"", "bad escape", 3},
        {"\"\\u12g4\"", "four hex digits", 3},
        {"\"\\ud83d\"", "unpaired surrogate", 7},
        {"\"\\ude00\"", "unpaired surrogate", 7},
        {"\"\\u0000\"", "\\u0000", 7},
        {"\"a\tb\"", "control character", 2},
        {"{} x", "bytes after the JSON value", 3},
        {"[1", "expected ',' or ']'", 2},
        {"", "unexpected end", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rap_status st = skip_str(bad[i].text);
        char at[64];
        snprintf(at, sizeof at, "t.json: corrupt test text at byte %zu of the JSON: ", bad[i].at);
        CHECK_MSG(st == RAP_ERR_DATA && strstr(rap_last_error(), bad[i].why) &&
                      strstr(rap_last_error(), at),
                  "%s: %s (expected \"%s\" at byte %zu)", bad[i].text, rap_last_error(), bad[i].why,
                  bad[i].at);
    }
    /* a NUL inside the text, and bytes past n never read */
    CHECK(skip_all("[1,\0]", 5) == RAP_ERR_DATA);
    CHECK_OK(skip_all("[1]]]]", 3));

    /* integers: overflow and the caller's bound */
    rap_json_reader r;
    uint64_t v;
    const char *big = "18446744073709551616";
    REQUIRE_OK(rap_json_reader_init(&r, big, strlen(big), 100, "t.json", "n"));
    CHECK(rap_json_uint(&r, UINT64_MAX, &v) == RAP_ERR_DATA &&
          strstr(rap_last_error(), "integer too large"));
    const char *max = "18446744073709551615";
    REQUIRE_OK(rap_json_reader_init(&r, max, strlen(max), 100, "t.json", "n"));
    CHECK(rap_json_uint(&r, UINT64_MAX, &v) == RAP_OK && v == UINT64_MAX);
    REQUIRE_OK(rap_json_reader_init(&r, "300", 3, 100, "t.json", "n"));
    CHECK(rap_json_uint(&r, 255, &v) == RAP_ERR_DATA && strstr(rap_last_error(), "above 255"));
    REQUIRE_OK(rap_json_reader_init(&r, "2.5", 3, 100, "t.json", "n"));
    CHECK(rap_json_uint(&r, 255, &v) == RAP_ERR_DATA && strstr(rap_last_error(), "fraction"));

    /* the size limit, before anything is read */
    CHECK(rap_json_reader_init(&r, "[1, 2, 3]", 9, 8, "t.json", "n") == RAP_ERR_DATA &&
          strstr(rap_last_error(), "more than the 8"));
    /* a string longer than the caller allows */
    REQUIRE_OK(rap_json_reader_init(&r, "\"abcdef\"", 8, 100, "t.json", "n"));
    char *s = (char *)1;
    CHECK(rap_json_string_dup(&r, 5, &s) == RAP_ERR_DATA && !s);
}

RAP_TEST(json_reader_nesting_limit_without_recursion)
{
    /* 64 containers open are fine, 65 are refused; a million are refused
     * the same way (no recursion: the stack is not touched) */
    size_t n = 1000000;
    char *deep = rap_malloc(2 * n + 1, "deep");
    REQUIRE(deep);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    CHECK_OK(skip_all(deep + n - RAP_JSON_MAX_DEPTH, 2 * RAP_JSON_MAX_DEPTH));
    CHECK(skip_all(deep + n - RAP_JSON_MAX_DEPTH - 1, 2 * RAP_JSON_MAX_DEPTH + 2) == RAP_ERR_DATA &&
          strstr(rap_last_error(), "nesting too deep") &&
          strstr(rap_last_error(), "at byte 64 of the JSON"));
    CHECK(skip_all(deep, 2 * n) == RAP_ERR_DATA && strstr(rap_last_error(), "nesting too deep"));
    /* objects in arrays in objects, alternating */
    char mixed[512];
    size_t k = 0;
    for (int d = 0; d < 40; d++)
        k += (size_t)snprintf(mixed + k, sizeof mixed - k, d % 2 ? "[" : "{\"k\":");
    mixed[k++] = '0';
    for (int d = 39; d >= 0; d--)
        mixed[k++] = d % 2 ? ']' : '}';
    CHECK_MSG(skip_all(mixed, k) == RAP_OK, "%.*s: %s", (int)k, mixed, rap_last_error());
    rap_free(deep);
}

/* A sink into a fixed buffer. */
typedef struct {
    char buf[256];
    size_t n;
} sink_buf;

static void put_buf(void *ctx, const char *s, size_t n)
{
    sink_buf *b = ctx;
    if (b->n + n < sizeof b->buf) {
        memcpy(b->buf + b->n, s, n);
        b->n += n;
        b->buf[b->n] = 0;
    }
}

RAP_TEST(json_writer_round_trips_through_the_reader)
{
    const char *in = "quote \" backslash \\ tab \t nl \n bell \a \x1f del \x7f \xc3\xa9 end";
    sink_buf b = {{0}, 0};
    rap_json_escape(in, put_buf, &b);
    CHECK_MSG(!strcmp(b.buf, "\"quote \\\" backslash \\\\ tab \\u0009 nl \\u000a bell \\u0007 "
                             "\\u001f del \x7f \xc3\xa9 end\""), "%s", b.buf);
    char back[256];
    size_t len;
    CHECK_OK(read_str(b.buf, back, sizeof back, &len));
    CHECK(!strcmp(back, in) && len == strlen(in));
    sink_buf e = {{0}, 0};
    rap_json_escape(NULL, put_buf, &e);
    CHECK(!strcmp(e.buf, "\"\""));

    char num[RAP_JSON_NUM_LEN];
    CHECK(!strcmp(rap_json_num(0.1f, num), "0.100000001"));
    CHECK(!strcmp(rap_json_num(1e300, num), "1e+300"));
    CHECK(!strcmp(rap_json_num(NAN, num), "null"));
    CHECK(!strcmp(rap_json_num(-INFINITY, num), "null"));
    CHECK(!strcmp(rap_json_num(-3, num), "-3"));
}
