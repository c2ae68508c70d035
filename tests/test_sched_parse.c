/* test_sched_parse.c -- the GPU parse's budgets in schedule files
 * (docs/SCHEDULE.md, `parse WINDOW lines=N [predicted_ms=MS]`): written
 * and read back exactly, with the same plan and fusion lines and slices as
 * without them; a file without them reads as before; every malformed
 * parse line is refused naming its line. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sched/schedule.h"


static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = df[\"int_1\"].fill_null(0)\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n";

/* s written to a string (malloc'd). */
static char *to_string(const rap_schedule *s)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return NULL;
    rap_status st = rap_schedule_write(s, f);
    fclose(f);
    if (st != RAP_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

RAP_TEST(sched_parse_lines_roundtrip)
{
    rap_plan *p;
    REQUIRE_OK(rap_test_plan_text(k_plan, "small.plan", &p));
    rap_fusion f;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_LEVELS, &f));
    rap_schedule *plain, *s;
    REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &plain));
    REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
    CHECK(!rap_schedule_has_parse(s) && !rap_schedule_has_parse(NULL));
    REQUIRE_OK(rap_schedule_set_parse(s, RAP_WIN_MLP_BACKWARD, 8320, 0.015625));
    REQUIRE_OK(rap_schedule_set_parse(s, RAP_WIN_EMB_FORWARD, 64, -1));
    REQUIRE_OK(rap_schedule_set_parse(s, RAP_WIN_EXPOSED, 1, 0));
    REQUIRE_OK(rap_schedule_set_parse(s, RAP_WIN_MLP_FORWARD, 500, 1));
    REQUIRE_OK(rap_schedule_set_parse(s, RAP_WIN_MLP_FORWARD, 0, 1)); /* removed again */
    CHECK(rap_schedule_has_parse(s));
    CHECK(rap_schedule_set_parse(s, RAP_WIN_COUNT, 64, -1) == RAP_ERR_ARG);
    CHECK(rap_schedule_set_parse(s, RAP_WIN_EXPOSED, -1, -1) == RAP_ERR_ARG);
    CHECK(rap_schedule_set_parse(s, RAP_WIN_EXPOSED, RAP_PARSE_LINES_MAX + 1, -1) == RAP_ERR_ARG);
    CHECK_OK(rap_schedule_validate(s, p, &f, 4096)); /* slices checked as without them */
    char *a = to_string(s), *b0 = to_string(plain);
    REQUIRE(a && b0);
    /* the parse lines after the fusion line, in window order; the plan and
     * fusion lines (their hashes) and the slices as without them */
    CHECK(strstr(a, "parse emb_forward lines=64\nparse mlp_backward lines=8320 "
                    "predicted_ms=0.015625\nparse exposed lines=1 predicted_ms=0\n"));
    CHECK(!strstr(a, "mlp_forward lines"));
    CHECK(!strstr(b0, "parse "));
    char *rest = a, *q;
    while ((q = strstr(rest, "parse ")) != NULL) { /* a without its parse lines is b0 */
        char *nl = strchr(q, '\n');
        REQUIRE(nl);
        memmove(q, nl + 1, strlen(nl + 1) + 1);
        rest = q;
    }
    CHECK_MSG(!strcmp(a, b0), "without its parse lines:\n%s\nplain:\n%s", a, b0);
    free(a);
    a = to_string(s);
    rap_schedule *r;
    REQUIRE_OK(rap_schedule_parse(a, "rt.sched", &r));
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        CHECK_MSG(r->parse_lines[w] == s->parse_lines[w] && r->parse_ms[w] == s->parse_ms[w],
                  "window %d: %lld lines %.17g ms, wrote %lld lines %.17g ms", w,
                  (long long)r->parse_lines[w], r->parse_ms[w], (long long)s->parse_lines[w],
                  s->parse_ms[w]);
    CHECK(r->parse_line[RAP_WIN_EMB_FORWARD] == 5 && r->parse_line[RAP_WIN_EXPOSED] == 7);
    CHECK(rap_schedule_same_slices(r, s) && rap_schedule_same_slices(r, plain));
    CHECK(r->plan_hash == plain->plan_hash && r->fusion_hash == plain->fusion_hash);
    CHECK_OK(rap_schedule_validate(r, p, &f, 4096));
    char *a2 = to_string(r);
    REQUIRE(a2);
    CHECK(!strcmp(a, a2)); /* written again: the same bytes */
    /* a file without parse lines reads as before: none */
    rap_schedule *o;
    REQUIRE_OK(rap_schedule_parse(b0, "old.sched", &o));
    CHECK(!rap_schedule_has_parse(o) && rap_schedule_same_slices(o, plain));
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        CHECK(o->parse_lines[w] == 0);
    /* a parse line may come anywhere after the fusion line */
    const char *late = "rap-schedule 1\nplan x 1\nfusion 1 2\nwindow exposed\n"
                       "slice kernel=0 descs=0:1 rows=0:end\n\tparse  grad_comm lines=7 # c\r\n";
    rap_schedule *l;
    REQUIRE_OK(rap_schedule_parse(late, "late.sched", &l));
    CHECK(l->parse_lines[RAP_WIN_GRAD_COMM] == 7 && l->parse_ms[RAP_WIN_GRAD_COMM] < 0 &&
          l->parse_line[RAP_WIN_GRAD_COMM] == 6 && l->n_slices == 1);
    rap_schedule_free(l);
    free(a);
    free(a2);
    free(b0);
    rap_schedule_free(o);
    rap_schedule_free(r);
    rap_schedule_free(s);
    rap_schedule_free(plain);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(sched_parse_lines_refused)
{
    static const char *const H = "rap-schedule 1\nplan p.plan 00000000000000ab\nfusion 3 0x12\n";
    static const struct {
        const char *body; /* after H, unless it starts with '!' (whole text) */
        const char *want;
    } cases[] = {
        {"!rap-schedule 1\nparse mlp_backward lines=64\n",
         ":2: expected the 'plan' and 'fusion' lines before a parse line"},
        {"!rap-schedule 1\nplan p 1\nparse mlp_backward lines=64\nfusion 1 1\n",
         ":3: expected the 'plan' and 'fusion' lines before a parse line"},
        {"parse\n", ":4: expected 'parse WINDOW lines=N [predicted_ms=MS]' with WINDOW one of"},
        {"parse mlp lines=64\n", ":4: expected 'parse WINDOW lines=N"},
        {"parse lines=64\n", ":4: expected 'parse WINDOW lines=N"},
        {"parse mlp_backward\n", ":4: expected lines=N in a parse line"},
        {"parse mlp_backward predicted_ms=1\n", ":4: expected lines=N in a parse line"},
        {"parse mlp_backward lines=0\n", ":4: expected lines=N with N a line count in [1, "},
        {"parse mlp_backward lines=-64\n", ":4: expected lines=N with N a line count"},
        {"parse mlp_backward lines=6x\n", ":4: expected lines=N with N a line count"},
        {"parse mlp_backward lines=\n", ":4: expected lines=N with N a line count"},
        {"parse mlp_backward lines=1099511627777\n", ":4: expected lines=N with N a line count"},
        {"parse mlp_backward lines=64 lines=64\n", ":4: lines= given twice"},
        {"parse mlp_backward lines=64 predicted_ms=-1\n", ":4: expected predicted_ms=MS"},
        {"parse mlp_backward lines=64 predicted_ms=inf\n", ":4: expected predicted_ms=MS"},
        {"parse mlp_backward lines=64 predicted_ms=1 predicted_ms=1\n",
         ":4: predicted_ms= given twice"},
        {"parse mlp_backward lines=64 tiles=1\n", ":4: unknown parse key 'tiles' (expected lines"},
        {"parse mlp_backward 64\n", ":4: expected key=value in a parse line, got '64'"},
        {"parse mlp_backward lines=64\nwindow exposed\nparse mlp_backward lines=128\n",
         ":6: a second parse line for window mlp_backward (first on line 4)"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    char text[2048];
    for (int i = 0; i < n; i++) {
        if (cases[i].body[0] == '!')
            snprintf(text, sizeof text, "%s", cases[i].body + 1);
        else
            snprintf(text, sizeof text, "%s%s", H, cases[i].body);
        rap_schedule *s = (rap_schedule *)1;
        rap_status st = rap_schedule_parse(text, "t.sched", &s);
        CHECK_MSG(st == RAP_ERR_PLAN && s == NULL, "case %d: status %s", i, rap_status_name(st));
        CHECK_MSG(strncmp(rap_last_error(), "t.sched:", 8) == 0 &&
                      strstr(rap_last_error(), cases[i].want) != NULL,
                  "case %d: message '%s', expected '%s'", i, rap_last_error(), cases[i].want);
    }
    /* the largest count is taken */
    snprintf(text, sizeof text, "%sparse emb_backward lines=1099511627776 predicted_ms=2.5\n", H);
    rap_schedule *s;
    REQUIRE_OK(rap_schedule_parse(text, "t.sched", &s));
    CHECK(s->parse_lines[RAP_WIN_EMB_BACKWARD] == RAP_PARSE_LINES_MAX &&
          s->parse_ms[RAP_WIN_EMB_BACKWARD] == 2.5);
    rap_schedule_free(s);
}
