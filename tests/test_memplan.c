/* test_memplan.c -- the memory plan (run/memplan.h): its sizes equal what
 * the allocators allocate (the CPU model by part, the executor's arena,
 * the counted buffers of a whole run), and a run that does not fit is
 * refused before any buffer is allocated (counted by rap_mem_counted, not
 * timed); --dry-run and --batch 16777216 through the binary. */
#include "test.h"

#include "core/core.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/shard.h"
#include "model/cpu/cpu_model.h"
#include "model/model.h"
#include "run/memplan.h"
#include "run/train.h"

#include <stdlib.h>

static const char *k_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n";

/* The plan above with the raw columns it leaves untouched dropped. */
static rap_status parse_plan(rap_plan **out)
{
    return rap_test_plan_text(k_plan, "memplan", out);
}

static uint64_t counted(void)
{
    uint64_t b;
    rap_mem_counted(&b, NULL);
    return b;
}

static void small_model(rap_model_config *c)
{
    rap_model_config_defaults(c);
    c->n_dense = 3;
    c->n_tables = 3;
    c->table_rows[0] = 300;
    c->table_rows[1] = 7;
    c->table_rows[2] = 1000;
    c->emb_dim = 8;
    c->n_bot = 2;
    c->bot[0] = 16;
    c->bot[1] = 8;
    c->n_top = 3;
    c->top[0] = 32;
    c->top[1] = 8;
    c->top[2] = 1;
    c->batch = 100;
    c->threads = 2;
}

/* rap_model_mem_of equals, part by part, what create passed to the
 * allocator, and the buffer counter moved by exactly the buffers. */
static void check_model_parts(rap_test_ctx *t, const rap_model_config *c, const char *what)
{
    rap_model_mem plan, got;
    REQUIRE_OK(rap_model_mem_of(c, RAP_CPU, &plan));
    CHECK(plan.total == rap_model_bytes(c, RAP_CPU));
    uint64_t b0 = counted();
    rap_model *m = NULL;
    REQUIRE_OK(rap_model_create(c, RAP_CPU, &m));
    const uint64_t grew = counted() - b0;
    rap_cpu_model_allocated(m, &got);
    size_t sum = 0;
    for (int k = 0; k < RAP_MM_N; k++) {
        CHECK_MSG(plan.part[k] == got.part[k], "%s: %s planned %zu, allocated %zu", what,
                  rap_model_mem_part_name(k), plan.part[k], got.part[k]);
        sum += got.part[k];
    }
    CHECK(plan.total == got.total && got.total == sum);
    /* every buffer but the bookkeeping (rap_calloc) goes through the counter */
    CHECK_MSG(grew == plan.total - plan.part[RAP_MM_OTHER],
              "%s: the counter grew by %llu, the plan's buffers are %zu", what,
              (unsigned long long)grew, plan.total - plan.part[RAP_MM_OTHER]);
    rap_model_free(m);
}

RAP_TEST(memplan_model_parts_equal_cpu_allocation)
{
    rap_model_config c;
    small_model(&c);
    c.optimizer = RAP_ADAGRAD;
    check_model_parts(t, &c, "fp32 adagrad");
    c.optimizer = RAP_ROWWISE_ADAGRAD;
    c.emb_dtype = RAP_EMB_BF16;
    check_model_parts(t, &c, "bf16 rowwise");
    c.optimizer = RAP_SGD;
    c.emb_dtype = RAP_EMB_FP16;
    c.max_bag = 3;
    c.batch = 37;
    check_model_parts(t, &c, "fp16 sgd multi-hot");
    /* a shard: two local tables, exchange buffers for 50 global rows */
    rap_model_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.n_local = 2;
    sh.table[0] = 2;
    sh.row0[0] = 100;
    sh.rows[0] = 400;
    sh.table[1] = 0;
    sh.rows[1] = 300;
    sh.emb_batch = 50;
    sh.loss_rows = 50;
    c.optimizer = RAP_ADAGRAD;
    c.emb_dtype = RAP_EMB_FP32;
    c.max_bag = 0;
    c.batch = 25;
    c.shard = &sh;
    check_model_parts(t, &c, "shard");
    /* the parts move as they should: row-wise state is one float a row */
    rap_model_mem a, r;
    c.shard = NULL;
    c.optimizer = RAP_ADAGRAD;
    REQUIRE_OK(rap_model_mem_of(&c, RAP_CPU, &a));
    c.optimizer = RAP_ROWWISE_ADAGRAD;
    REQUIRE_OK(rap_model_mem_of(&c, RAP_CPU, &r));
    CHECK(a.part[RAP_MM_TABLE_STATE] == 4 * 1307 * 8 && r.part[RAP_MM_TABLE_STATE] == 4 * 1307);
    c.emb_dim = 0;
    CHECK(rap_model_mem_of(&c, RAP_CPU, &a) == RAP_ERR_ARG && a.total == 0);
}

RAP_TEST(memplan_executor_bytes_equal_arena)
{
    rap_plan *plan = NULL;
    REQUIRE_OK(parse_plan(&plan));
    for (int kind = 0; kind < 2; kind++) {
        rap_fusion fus;
        REQUIRE_OK(rap_fuse(plan, kind ? RAP_FUSE_NONE : RAP_FUSE_AUTO, &fus));
        for (int64_t B = 1; B <= 5000; B *= 71) {
            rap_prep_config pc = {.device = RAP_CPU, .max_rows = B, .threads = 1};
            double want = 0;
            REQUIRE_OK(rap_prep_bytes(plan, &fus, &pc, &want));
            uint64_t b0 = counted();
            rap_prep *p = NULL;
            REQUIRE_OK(rap_prep_create(plan, &fus, &pc, &p));
            const double got = (double)(counted() - b0);
            CHECK_MSG(want == got && want > 0, "fusion %d, B %lld: planned %.0f, allocated %.0f",
                      kind, (long long)B, want, got);
            rap_prep_free(p);
        }
        rap_fusion_free(&fus);
    }
    /* a batch too large to represent is a huge size, not an error */
    rap_fusion fus;
    REQUIRE_OK(rap_fuse(plan, RAP_FUSE_AUTO, &fus));
    rap_prep_config pc = {.device = RAP_CPU, .max_rows = (int64_t)1 << 40};
    double huge = 0;
    CHECK_OK(rap_prep_bytes(plan, &fus, &pc, &huge));
    CHECK(huge >= 8.0 * (double)((int64_t)1 << 40)); /* at least the offsets' 8 bytes a row */
    rap_fusion_free(&fus);
    rap_plan_free(plan);
}

/* Writes n generated rows to tmpdir/name once. */
static rap_status gen_rows(const char *name, int64_t n, char *path, size_t len)
{
    rap_test_path(path, len, name);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = n;
    g.seed = 5;
    g.out = path;
    RAP_TRY(rap_gen_cardinalities("kaggle", g.card));
    rap_gen_result r;
    return rap_gen_write(&g, &r);
}

/* Bytes of the plan's component named what (0 if absent). */
static double item_bytes(const rap_memplan *p, const char *what)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->item[i].what, what))
            return p->item[i].bytes;
    return 0;
}

static void train_config(rap_train_config *c, const rap_plan *plan, const char *data)
{
    rap_train_defaults(c);
    c->plan = plan;
    c->plan_name = "memplan";
    c->data = data;
    c->model.emb_dim = 4;
    c->model.n_bot = 2;
    c->model.bot[0] = 8;
    c->model.bot[1] = 4;
    c->model.n_top = 2;
    c->model.top[0] = 8;
    c->model.top[1] = 1;
    c->model.batch = 64;
    c->model.optimizer = RAP_ADAGRAD;
    c->model.threads = 2;
    c->reader.threads = 2;
    c->eval_fraction = 0;
    c->steps = 3;
    c->progress = false;
}

RAP_TEST(memplan_train_refuses_before_allocating)
{
    rap_plan *plan = NULL;
    REQUIRE_OK(parse_plan(&plan));
    char data[512];
    REQUIRE_OK(gen_rows("memplan_rows.tsv", 2000, data, sizeof data));
    rap_train_config c;
    rap_train_result *res = malloc(sizeof *res);
    REQUIRE(res);
    /* the plan of the run, nothing allocated */
    train_config(&c, plan, data);
    c.dry_run = true;
    uint64_t b0, n0, b1, n1;
    rap_mem_counted(&b0, &n0);
    CHECK_OK(rap_train_run(&c, res));
    rap_mem_counted(&b1, &n1);
    CHECK(b1 == b0 && n1 == n0);
    CHECK(res->planned && res->steps_run == 0);
    const double planned = res->memplan.total[RAP_MEM_HOST];
    CHECK(planned > 0 && res->memplan.total[RAP_MEM_DEVICE] == 0);
    /* a free pool smaller than the plan: refused, and no buffer allocated */
    c.dry_run = false;
    c.mem_avail = planned / 2;
    rap_mem_counted(&b0, &n0);
    rap_status st = rap_train_run(&c, res);
    rap_mem_counted(&b1, &n1);
    CHECK_MSG(st == RAP_ERR_NOMEM, "status %s: %s", rap_status_name(st), rap_last_error());
    CHECK(strstr(rap_last_error(), "refused before allocating") != NULL);
    CHECK_MSG(b1 == b0 && n1 == n0, "refused, yet %llu bytes in %llu buffers were allocated",
              (unsigned long long)(b1 - b0), (unsigned long long)(n1 - n0));
    CHECK(res->steps_run == 0);
    /* it fits: the run allocates (the counter sees it), and what it
     * allocates is what was planned. The counter does not see the reader's
     * chunks (rap_malloc) and sees its parsed rows grow as chunks come
     * (planned by an estimate): the rest, at least 95 % of it, is exact */
    c.mem_avail = 0;
    const double chunks = item_bytes(&res->memplan, "reader chunks"),
                 parsed = item_bytes(&res->memplan, "parsed rows");
    CHECK(chunks > 0 && parsed > 0);
    rap_mem_counted(&b0, &n0);
    CHECK_OK(rap_train_run(&c, res));
    rap_mem_counted(&b1, &n1);
    const double used = (double)(b1 - b0), counted_plan = planned - chunks;
    CHECK(res->steps_run == 3 && n1 > n0);
    CHECK_MSG(used <= counted_plan && used >= 0.95 * (counted_plan - parsed),
              "the run allocated %.0f bytes of buffers, the plan %.0f (%.0f of them parsed "
              "rows, estimated)", used, counted_plan, parsed);
    free(res);
    rap_plan_free(plan);
}

RAP_TEST(memplan_table_and_check)
{
    rap_model_config mc;
    small_model(&mc);
    mc.optimizer = RAP_ADAGRAD;
    mc.table_rows[2] = 100000; /* the tables the largest part */
    rap_memplan_config mp;
    memset(&mp, 0, sizeof mp);
    mp.model = &mc;
    mp.device = RAP_CPU;
    rap_memplan p;
    REQUIRE_OK(rap_memplan_make(&mp, &p));
    rap_model_mem mm;
    REQUIRE_OK(rap_model_mem_of(&mc, RAP_CPU, &mm));
    CHECK(p.total[RAP_MEM_HOST] == (double)mm.total && p.total[RAP_MEM_DEVICE] == 0);
    CHECK(p.reserve[RAP_MEM_HOST] == RAP_MEMPLAN_HOST_RESERVE && p.reserve[RAP_MEM_DEVICE] == 0);
    CHECK(p.avail[0] == -1 && p.avail[1] == -1);
    CHECK_OK(rap_memplan_check(&p)); /* nothing measured: nothing to refuse */
    p.avail[RAP_MEM_HOST] = p.total[RAP_MEM_HOST] + p.reserve[RAP_MEM_HOST];
    CHECK_OK(rap_memplan_check(&p));
    p.avail[RAP_MEM_HOST] -= 1;
    CHECK(rap_memplan_check(&p) == RAP_ERR_NOMEM);
    CHECK(strstr(rap_last_error(), "host memory") && strstr(rap_last_error(), "tables"));
    char buf[8192];
    rap_memplan_format(&p, buf, sizeof buf);
    CHECK(strstr(buf, "memory plan (CPU run)") && strstr(buf, "table state") &&
          strstr(buf, "reserve"));
    char small[40];
    rap_memplan_format(&p, small, sizeof small); /* cut, terminated */
    CHECK(strlen(small) == sizeof small - 1);
    mc.emb_dim = 0;
    CHECK(rap_memplan_make(&mp, &p) == RAP_ERR_ARG);
}

RAP_TEST(memplan_cli_dry_run_and_refusal)
{
    char out[32768];
    /* --dry-run: the table, exit 0, no rows generated, nothing trained */
    int rc = rap_test_run_rap("train --device cpu --dry-run --quiet", out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "memory plan (CPU run)") && strstr(out, "executor (set-up)") &&
          strstr(out, "row feed batches"));
    CHECK(!strstr(out, "generated"));
    /* the batch: refused with the table, before rows are generated */
    rc = rap_test_run_rap("train --device cpu --batch 16777216 --quiet", out, sizeof out);
    CHECK_MSG(rc != 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "refused before allocating") && strstr(out, "activations"),
              "%s", out);
    CHECK(!strstr(out, "generated"));
    rc = rap_test_run_rap("bench --device cpu --dry-run --modes sequential --quiet", out,
                          sizeof out);
    CHECK_MSG(rc == 0 && strstr(out, "memory plan (CPU run)"), "exit %d: %s", rc, out);
    rc = rap_test_run_rap("bench --device cpu --batch 16777216 --modes sequential --quiet", out,
                          sizeof out);
    CHECK_MSG(rc != 0 && strstr(out, "refused before allocating"), "exit %d: %s", rc, out);
}

RAP_TEST(memplan_hybrid_bytes_equal_allocation)
{
    /* three ranks (thread comms; a CPU step's create exchanges nothing):
     * each rank's planned exchange buffers equal what create allocates */
    enum { R = 3 };
    rap_model_config g;
    small_model(&g);
    g.table_rows[2] = 60000; /* 1.9 MB: split over ranks of 1 MB each */
    g.batch = 90;
    g.max_bag = 2;
    rap_shard_map map;
    memset(&map, 0, sizeof map);
    REQUIRE_OK(rap_shard_plan(g.table_rows, g.n_tables, g.emb_dim, R, 1000000, NULL, &map));
    rap_comm *comms[R] = {0};
    REQUIRE_OK(rap_comm_threads_create(R, comms));
    bool split = false;
    for (int r = 0; r < R; r++) {
        rap_model_shard sh;
        rap_model_config mc;
        REQUIRE_OK(rap_hybrid_model_config(&g, &map, r, g.batch, &sh, &mc));
        for (int k = 0; k < sh.n_local; k++)
            split |= sh.rows[k] != g.table_rows[sh.table[k]];
        size_t want = 0;
        REQUIRE_OK(rap_hybrid_bytes(&map, r, &mc, RAP_CPU, &want));
        rap_model *m = NULL;
        REQUIRE_OK(rap_model_create(&mc, RAP_CPU, &m));
        rap_hybrid *h = NULL;
        const uint64_t b0 = counted();
        rap_status st = rap_hybrid_create(m, &map, comms[r], &h);
        const uint64_t got = counted() - b0;
        CHECK_OK(st);
        CHECK_MSG(want == got && want > 0, "rank %d: planned %zu, allocated %llu", r, want,
                  (unsigned long long)got);
        rap_hybrid_free(h);
        rap_model_free(m);
    }
    CHECK(split); /* the filtered tables' buffers were part of it */
    size_t b;
    CHECK(rap_hybrid_bytes(&map, R, &g, RAP_CPU, &b) == RAP_ERR_ARG); /* no such rank */
    for (int r = 0; r < R; r++)
        rap_comm_free(comms[r]);
    rap_shard_map_free(&map);
}
