/* test_plan_core.c -- DAG facts derived by rap_plan_add_op, and fusion. */
#include "test.h"

static int add(rap_test_ctx *t, rap_plan *p, rap_op_type op, int input, double f0, int64_t i0,
               int64_t i1)
{
    rap_node n = {0};
    n.op = op;
    n.input = input;
    n.f[0] = f0;
    n.i[0] = i0;
    n.i[1] = i1;
    n.line = 1;
    n.col = 1;
    int idx = -1;
    rap_status s = rap_plan_add_op(p, &n, &idx);
    CHECK_MSG(s == RAP_OK, "add_op %s: %s", rap_op_name(op), rap_last_error());
    return idx;
}

RAP_TEST(plan_core_facts)
{
    rap_plan *p;
    REQUIRE_OK(rap_plan_create(rap_schema_criteo(), "t.plan", &p));
    REQUIRE(p->n_cols == 39);
    REQUIRE(rap_plan_find(p, "int_0") == 0 && rap_plan_find(p, "cat_25") == 38);
    int cat0 = p->cols[rap_plan_find(p, "cat_0")].node;
    int f = add(t, p, RAP_OP_FILL_NULL, cat0, 0, 0, 0);
    CHECK(p->nodes[f].off == RAP_OFF_ARANGE && !p->nodes[f].nullable && p->nodes[f].len1);
    int h = add(t, p, RAP_OP_SIGRID_HASH, f, 0, 0, 1460);
    CHECK(p->nodes[h].bounded && p->nodes[h].lo == 0 && p->nodes[h].hi == 1459);
    CHECK(p->nodes[h].off == RAP_OFF_SAME && p->nodes[h].level == 2);
    REQUIRE_OK(rap_plan_assign(p, "cat_0", h));
    CHECK(rap_plan_finish(p) == 2);
    rap_fusion fu;
    REQUIRE_OK(rap_fuse_levels(p, &fu));
    CHECK(fu.n == 2);
    rap_fusion_free(&fu);
    /* a precondition failure names the position */
    rap_node bad = {0};
    bad.op = RAP_OP_SIGRID_HASH;
    bad.input = h;
    bad.i[1] = 0;
    bad.line = 7;
    bad.col = 12;
    int idx;
    CHECK(rap_plan_add_op(p, &bad, &idx) == RAP_ERR_PLAN);
    CHECK(strstr(rap_last_error(), "t.plan:7:12: sigrid_hash expects max >= 1") != NULL);
    rap_plan_free(p);
}
