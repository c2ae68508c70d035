/* test_parse_model.c -- the GPU parse's latency model and its placement
 * (plan/parse_model.h): the least-squares fit recovers a linear model,
 * drops a slope that would be negative, and survives lines and bytes in
 * proportion; the model file round-trips and hostile files are refused;
 * rap_parse_place fills the window with the most room, splits over the
 * next when it has not room enough and puts the rest beside the window
 * with the most room, in whole tiles, after a real search over a fake
 * capacity file; rap plan --parse gpu refuses without a model and writes
 * parse lines with one. (rap profile kernels' timing of the kernels runs
 * on a GPU only: tests/test_profile.c.) */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/file.h"
#include "plan/capacity.h"
#include "plan/parse_model.h"
#include "plan/search.h"

/* Points of ms = a + b lines + c bytes at lines 1024 .. 65536 and the
 * given bytes a line (one or two lengths). */
static int make_points(rap_parse_point *p, double a, double b, double c, const double *bpl, int nb)
{
    int n = 0;
    for (int k = 0; k < nb; k++)
        for (int64_t l = 1024; l <= 65536; l *= 2) {
            int64_t bytes = (int64_t)llround(bpl[k] * (double)l);
            p[n++] = (rap_parse_point){l, bytes, a + b * (double)l + c * (double)bytes};
        }
    return n;
}

static bool close_to(double x, double want, double rel)
{
    return fabs(x - want) <= rel * fabs(want) + 1e-15;
}

RAP_TEST(parse_model_fit)
{
    rap_parse_point p[64];
    rap_parse_model m;
    /* two line lengths: every coefficient recovered */
    double two[2] = {251.5, 47.25};
    int n = make_points(p, 0.004, 2e-6, 5e-9, two, 2);
    REQUIRE_OK(rap_parse_model_fit(p, n, "GPU X", 251.5, &m));
    CHECK_MSG(close_to(m.ms0, 0.004, 1e-6) && close_to(m.ms_per_line, 2e-6, 1e-6) &&
                  close_to(m.ms_per_byte, 5e-9, 1e-6),
              "fit %.9g %.9g %.9g", m.ms0, m.ms_per_line, m.ms_per_byte);
    CHECK(m.rel_rms < 1e-9 && m.n_points == n && !strcmp(m.gpu, "GPU X") &&
          m.bytes_per_line == 251.5);
    CHECK(close_to(rap_parse_model_ms(&m, 8192, 8192 * 250), 0.004 + 2e-6 * 8192 + 5e-9 * 8192 * 250,
                   1e-6));
    CHECK(close_to(rap_parse_model_lines_ms(&m, 1000), 0.004 + 2e-6 * 1000 + 5e-9 * 251500, 1e-6));
    CHECK(rap_parse_model_ms(&m, 0, 0) > 0);
    /* a byte cheaper than nothing: dropped, lines and the intercept refitted */
    n = make_points(p, 0.01, 3e-6, -2e-9, two, 2);
    REQUIRE_OK(rap_parse_model_fit(p, n, "GPU X", 251.5, &m));
    CHECK(m.ms_per_byte == 0 && m.ms_per_line > 0 && m.rel_rms > 0);
    /* one line length: lines and bytes in proportion, one slope kept; the
     * predictions still hold */
    double one[1] = {200};
    n = make_points(p, 0.002, 1e-6, 4e-9, one, 1);
    REQUIRE_OK(rap_parse_model_fit(p, n, "GPU X", 200, &m));
    CHECK(m.ms_per_line == 0 || m.ms_per_byte == 0);
    CHECK_MSG(m.rel_rms < 1e-6 && close_to(rap_parse_model_lines_ms(&m, 30000),
                                           0.002 + (1e-6 + 4e-9 * 200) * 30000, 1e-6),
              "rms %g", m.rel_rms);
    /* refused: fewer than two usable points, a bad line length */
    rap_parse_point bad[3] = {{1024, 1000, 0.01}, {0, 10, 0.02}, {2048, 100, -1}};
    CHECK(rap_parse_model_fit(bad, 3, "GPU X", 250, &m) == RAP_ERR_ARG);
    CHECK(rap_parse_model_fit(p, n, "GPU X", 0, &m) == RAP_ERR_ARG);
}

/* Writes text to tmpdir/name; its path in path. */
static void write_text(const char *name, const char *text, char *path, size_t n)
{
    rap_test_path(path, n, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(text, 1, strlen(text), f);
        fclose(f);
    }
}

RAP_TEST(parse_model_file)
{
    rap_parse_point p[64];
    double two[2] = {251.5, 47.25};
    int n = make_points(p, 0.004, 2e-6, 5e-9, two, 2);
    rap_parse_model m, r;
    REQUIRE_OK(rap_parse_model_fit(p, n, "NVIDIA H200", 251.5, &m));
    char path[512];
    rap_test_path(path, sizeof path, "m.parse");
    REQUIRE_OK(rap_parse_model_save(&m, path));
    REQUIRE_OK(rap_parse_model_load(path, &r));
    CHECK(!strcmp(r.gpu, "NVIDIA H200") && r.ms0 == m.ms0 && r.ms_per_line == m.ms_per_line &&
          r.ms_per_byte == m.ms_per_byte && r.bytes_per_line == m.bytes_per_line &&
          r.rel_rms == m.rel_rms && r.n_points == n);
    for (int i = 0; i < n; i++)
        CHECK(r.pt[i].lines == m.pt[i].lines && r.pt[i].bytes == m.pt[i].bytes &&
              r.pt[i].ms == m.pt[i].ms);
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", ":"},
        {"# nothing\n", "(the file is empty)"},
        {"rap-capacity 1\n", ":1: expected \"rap-parse-model 1\""},
        {"rap-parse-model 2\n", ":1: version 2 is not supported"},
        {"rap-parse-model 1x\n", ":1: expected \"rap-parse-model 1\""},
        {"rap-parse-model 1\nfit ms0=0 ms_per_line=0 ms_per_byte=0 bytes_per_line=1 rel_rms=0\n",
         "expected a \"gpu NAME\" line"},
        {"rap-parse-model 1\ngpu G\n", "expected a \"fit ...\" line"},
        {"rap-parse-model 1\ngpu G\ngpu H\n", ":3: expected one \"gpu NAME\" line"},
        {"rap-parse-model 1\ngpu \n", ":2: unknown line"},
        {"rap-parse-model 1\ngpu G\nfit ms0=0 ms_per_line=-1 ms_per_byte=0 bytes_per_line=1 "
         "rel_rms=0\n", ":3: expected one \"fit"},
        {"rap-parse-model 1\ngpu G\nfit ms0=0 ms_per_line=1 ms_per_byte=0 bytes_per_line=0 "
         "rel_rms=0\n", ":3: expected one \"fit"},
        {"rap-parse-model 1\ngpu G\nfit ms0=nan ms_per_line=1 ms_per_byte=0 bytes_per_line=1 "
         "rel_rms=0\n", ":3: expected one \"fit"},
        {"rap-parse-model 1\ngpu G\nfit ms0=0 ms_per_line=1 bytes_per_line=1 rel_rms=0\n",
         ":3: expected one \"fit"},
        {"rap-parse-model 1\ngpu G\nfit ms0=0 ms_per_line=1 ms_per_byte=0 bytes_per_line=1 "
         "rel_rms=0 extra=1\n", ":3: expected one \"fit"},
        {"rap-parse-model 1\ngpu G\npoint lines=1.5 bytes=10 ms=1\n", ":3: expected \"point"},
        {"rap-parse-model 1\ngpu G\npoint lines=10 bytes=10 ms=0\n", ":3: expected \"point"},
        {"rap-parse-model 1\ngpu G\npoint lines=10 ms=1\n", ":3: expected \"point"},
        {"rap-parse-model 1\ngpu G\nwindow x\n", ":3: unknown line (expected gpu, fit or point)"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char q[512];
        write_text("bad.parse", cases[i].text, q, sizeof q);
        rap_status st = rap_parse_model_load(q, &r);
        CHECK_MSG(st == RAP_ERR_DATA && strstr(rap_last_error(), cases[i].want) &&
                      strstr(rap_last_error(), "bad.parse"),
                  "case %d: %s: %s", i, rap_status_name(st), rap_last_error());
    }
    /* a NUL byte, a file too large, none at all */
    char q[512];
    rap_test_path(q, sizeof q, "nul.parse");
    FILE *f = fopen(q, "wb");
    REQUIRE(f);
    fwrite("rap-parse-model 1\n\0gpu G\n", 1, 25, f);
    fclose(f);
    CHECK(rap_parse_model_load(q, &r) == RAP_ERR_DATA && strstr(rap_last_error(), "NUL"));
    rap_test_path(q, sizeof q, "big.parse");
    f = fopen(q, "wb");
    REQUIRE(f);
    for (int i = 0; i < (1 << 20) / 16 + 1; i++)
        fputs("# a long comment\n", f);
    fclose(f);
    CHECK(rap_parse_model_load(q, &r) == RAP_ERR_DATA);
    rap_test_path(q, sizeof q, "none.parse");
    CHECK(rap_parse_model_load(q, &r) == RAP_ERR_IO);
}

/* A model of 1e-5 ms a line and nothing else: a tile is 0.00064 ms. */
static void flat_model(rap_parse_model *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->gpu, sizeof m->gpu, "G");
    m->ms_per_line = 1e-5;
    m->bytes_per_line = 250;
}

RAP_TEST(parse_model_place_rooms)
{
    rap_parse_model m;
    flat_model(&m);
    rap_plan *p;
    REQUIRE_OK(rap_test_plan_text("df[\"int_0\"] = df[\"int_0\"].fill_null(0)\n", "p.plan", &p));
    rap_fusion f;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_LEVELS, &f));
    /* batch 4096: 4096 x 1.01 = 4137 lines, 65 tiles = 4160 (0.0416 ms) */
    static const struct {
        double cap[RAP_CAP_WINDOWS], load[RAP_CAP_WINDOWS];
        int64_t lines[RAP_WIN_COUNT], over;
    } cases[] = {
        /* one window has room for all: the one with the most */
        {{0, 0.01, 0.05, 0.06, 0}, {0, 0, 0, 0.015, 0}, {0, 0, 4160, 0, 0, 0}, 0},
        /* 46 tiles fit mlp_backward's 0.03 ms, the other 19 mlp_forward's */
        {{0, 0.02, 0.04, 0.001, 0}, {0, 0, 0.01, 0, 0}, {0, 1216, 2944, 0, 0, 0}, 0},
        /* 15 tiles, then 7, the rest beside the first (the most room) */
        {{0.005, 0, 0.01, 0.0003, 0}, {0, 0, 0, 0, 0}, {448, 0, 960 + 2752, 0, 0, 0}, 2752},
        /* no room anywhere (loads over capacity): all beside the most room,
         * the earliest of equals */
        {{0, 0, 0, 0, 0}, {0, 0, 0.1, 0, 0}, {4160, 0, 0, 0, 0, 0}, 4160},
    };
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        rap_search_result sr;
        memset(&sr, 0, sizeof sr);
        for (int w = 0; w < RAP_CAP_WINDOWS; w++) {
            sr.capacity_ms[w] = cases[c].cap[w];
            sr.load_ms[w] = cases[c].load[w];
        }
        rap_schedule *s;
        REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
        rap_parse_placement pp;
        REQUIRE_OK(rap_parse_place(&m, &sr, 4096, 0.01, s, &pp));
        CHECK(pp.lines_total == 4160 && pp.lines_over == cases[c].over);
        int64_t sum = 0;
        for (int w = 0; w < RAP_WIN_COUNT; w++) {
            CHECK_MSG(pp.lines[w] == cases[c].lines[w] && s->parse_lines[w] == cases[c].lines[w],
                      "case %d window %d: %lld lines (schedule %lld), expected %lld", c, w,
                      (long long)pp.lines[w], (long long)s->parse_lines[w],
                      (long long)cases[c].lines[w]);
            CHECK(pp.lines[w] % 64 == 0);
            CHECK(pp.lines[w] == 0 || close_to(s->parse_ms[w], 1e-5 * (double)pp.lines[w], 1e-9));
            sum += pp.lines[w];
        }
        CHECK(sum == 4160 && s->parse_lines[RAP_WIN_EXPOSED] == 0);
        rap_schedule_free(s);
    }
    rap_search_result sr;
    memset(&sr, 0, sizeof sr);
    rap_schedule *s;
    REQUIRE_OK(rap_schedule_builtin_embedding(p, &f, &s));
    rap_parse_placement pp;
    CHECK(rap_parse_place(&m, &sr, 0, 0.01, s, &pp) == RAP_ERR_ARG);
    REQUIRE_OK(rap_parse_place(&m, &sr, 64, 0, s, &pp)); /* a whole tile: no reject share */
    CHECK(pp.lines_total == 64);
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(parse_model_place_after_search)
{
    /* a capacity file, the search placing the plan's kernels first, then
     * the parse into what they left: every tile placed, never where the
     * kernels left less room than another window had */
    char cap_path[512];
    write_text("fake.capacity",
               "rap-capacity 1\ngpu FAKE GPU\nmodel tables=2 emb_dim=16 bot=64-16 top=64-32-1 "
               "batch=4096 precision=fp32\ntolerance 0.02\n"
               "window emb_forward standalone_ms=0.03 capacity_ms=0\n"
               "window mlp_forward standalone_ms=0.2 capacity_ms=0.02\n"
               "window mlp_backward standalone_ms=0.5 capacity_ms=0.05\n"
               "window emb_backward standalone_ms=0.15 capacity_ms=0.03\n"
               "window grad_comm standalone_ms=0 capacity_ms=0\n",
               cap_path, sizeof cap_path);
    rap_capacity cap;
    REQUIRE_OK(rap_capacity_load(cap_path, &cap));
    rap_plan *p;
    REQUIRE_OK(rap_test_plan_text(
        "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
        "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
        "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n",
        "p.plan", &p));
    rap_fusion f;
    REQUIRE_OK(rap_fuse(p, RAP_FUSE_LEVELS, &f));
    rap_search_config sc = {NULL, &cap, 4096, 1, false, RAP_CHOICE_ROOM};
    rap_schedule *s;
    rap_search_result sr;
    REQUIRE_OK(rap_schedule_search(p, &f, &sc, "fake", &s, &sr));
    rap_parse_model m;
    flat_model(&m);
    m.ms0 = 0.001;
    rap_parse_placement pp;
    REQUIRE_OK(rap_parse_place(&m, &sr, 4096, 0.01, s, &pp));
    int64_t sum = 0;
    int most = 0;
    for (int w = 0; w < RAP_WIN_EXPOSED; w++) {
        CHECK(close_to(pp.room_ms[w], sr.capacity_ms[w] - sr.load_ms[w], 1e-12));
        if (pp.room_ms[w] > pp.room_ms[most])
            most = w;
        sum += pp.lines[w];
        /* a window with parse lines fits them (the overflow aside) */
        if (pp.lines[w] > 0 && w != most)
            CHECK(pp.ms[w] <= pp.room_ms[w] + 1e-12);
    }
    CHECK(sum == pp.lines_total && pp.lines_total == 4160 && pp.lines[most] > 0);
    CHECK(pp.lines[RAP_WIN_EMB_FORWARD] == 0); /* no capacity there */
    CHECK_OK(rap_schedule_validate(s, p, &f, 4096));
    rap_schedule_free(s);
    rap_fusion_free(&f);
    rap_plan_free(p);
}

RAP_TEST(parse_model_plan_cli)
{
    /* rap plan --parse gpu: refused without a model, saying what to run;
     * with one, the schedule carries parse lines; without --parse the
     * same schedule without them */
    char out[8192], cmd[4096], model[512], a[512], b[512];
    rap_parse_point p[64];
    double two[2] = {250, 50};
    int n = make_points(p, 0.003, 1.5e-6, 4e-9, two, 2);
    rap_parse_model m;
    REQUIRE_OK(rap_parse_model_fit(p, n, "assumed", 250, &m));
    rap_test_path(model, sizeof model, "cli.parse");
    REQUIRE_OK(rap_parse_model_save(&m, model));
    rap_test_path(a, sizeof a, "cli_plain.schedule");
    rap_test_path(b, sizeof b, "cli_parse.schedule");
    snprintf(cmd, sizeof cmd, "plan --quiet --parse gpu --out %s", b);
    int rc = rap_test_run_rap(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "rap profile kernels") && strstr(out, "--parse-model"),
              "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "plan --quiet --out %s", a);
    CHECK_MSG(rap_test_run_rap(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "plan --parse gpu --parse-model %s --out %s", model, b);
    CHECK_MSG(rap_test_run_rap(cmd, out, sizeof out) == 0, "%s", out);
    CHECK_MSG(strstr(out, "parse (GPU): 4160 lines a batch"), "%s", out); /* 4096 x 1.01 */
    rap_schedule *sa, *sb;
    REQUIRE_OK(rap_schedule_load(a, &sa));
    REQUIRE_OK(rap_schedule_load(b, &sb));
    CHECK(!rap_schedule_has_parse(sa) && rap_schedule_has_parse(sb));
    CHECK(rap_schedule_same_slices(sa, sb));
    int64_t sum = 0;
    for (int w = 0; w < RAP_WIN_COUNT; w++)
        sum += sb->parse_lines[w];
    CHECK(sum == 4160);
    rap_schedule_free(sa);
    rap_schedule_free(sb);
    /* another GPU's model, when the GPU is known; --gpus refuses */
    snprintf(cmd, sizeof cmd, "plan --quiet --gpu OTHER --parse gpu --parse-model %s --out %s",
             model, b);
    rc = rap_test_run_rap(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "was made for GPU assumed, not OTHER"), "exit %d: %s", rc, out);
    /* --gpus 2: the ranks share the parse, each parses its half of the
     * global batch's lines (4096 x 1.01, whole tiles) in its own windows,
     * the budgets in its first
     * part's schedule; the merged rank schedule carries them (test_dist_
     * train.c trains through them) */
    char pre[512], part[600], rep[512];
    rap_test_path(pre, sizeof pre, "cli_parse_gpus");
    rap_test_path(rep, sizeof rep, "cli_parse_gpus.json");
    snprintf(cmd, sizeof cmd, "plan --gpus 2 --parse gpu --parse-model %s --out %s --report %s",
             model, pre, rep);
    rc = rap_test_run_rap(cmd, out, sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "rank 1  parse (GPU): 4160 lines a batch"), "exit %d: %s",
              rc, out);
    /* the report: each rank's placement, in rank order */
    char *js = NULL;
    size_t jn = 0;
    if (rc == 0 && rap_file_read(rep, 1 << 20, "report", &js, &jn) == RAP_OK) {
        const char *at = strstr(js, "\"parse\": [");
        int ranks = 0;
        for (const char *q = at; q && (q = strstr(q, "\"lines_over_room\"")); q++)
            ranks += !strncmp(q - 15, "\"lines\": 4160, ", 15);
        CHECK_MSG(at && ranks == 2, "report: %d ranks' parse of 4160 lines: %s", ranks, js);
    } else {
        CHECK_MSG(false, "no report %s: %s", rep, rap_last_error());
    }
    free(js);
    for (int r = 0; r < 2 && rc == 0; r++) {
        snprintf(part, sizeof part, "%s.rank%d.0", pre, r);
        rap_schedule *sp;
        REQUIRE_OK(rap_schedule_load(part, &sp));
        int64_t lines = 0;
        for (int w = 0; w < RAP_WIN_COUNT; w++)
            lines += sp->parse_lines[w];
        CHECK_MSG(lines == 4160, "rank %d: %lld lines", r, (long long)lines);
        rap_schedule_free(sp);
    }
}
