/*
 * test_place.c -- preprocessing placement over R ranks (src/plan/place.c,
 * docs/PLANNER.md "Placement"): on plans 0-3 with R = 2, 4, 8 and assumed
 * capacities, search is never worse than owner and batch by its own cost
 * model; every (column, row share) reaches each rank that needs it exactly
 * once and every op runs once per row share where its column is placed;
 * owner moves no bytes, batch exactly the sparse ids; R = 1 is the
 * one-GPU schedule. CPU only.
 */
#include "test.h"

#include "plan/place.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>


static rap_model_shape paper_shape(const rap_plan *p, int64_t B)
{
    rap_model_shape sh = {0, 128, {512, 256, 128}, 3, {1024, 1024, 512, 256, 1}, 5, B, 0, 0, 0};
    for (int c = 0; c < p->n_cols; c++)
        sh.tables += p->nodes[p->cols[c].node].kind == RAP_SPARSE;
    return sh;
}

/* Ids bytes of one row of sparse column c, written out here independently
 * of rap_place_row_bytes: int64 ids, ids_per_row of them, plus an int64
 * offset unless every row holds one id. */
static int64_t ids_row_bytes(const rap_plan *p, int c)
{
    const rap_node *n = &p->nodes[p->cols[c].node];
    int64_t b = 8 * n->ids_per_row;
    if (!(n->len1 && !n->nullable))
        b += 8;
    return b;
}

/* The checks of one placement result r (no row-split tables: each table
 * has one consumer, its owner). */
static void check_coverage(rap_test_ctx *t, const rap_plan *p, const int *owner,
                           const rap_place_result *r, const char *what)
{
    int R = r->ranks, K = r->ranks * r->shares, C = p->n_cols;
    int64_t Bg = r->batch * R;
    /* part of rank q computing (c): -1 none; two parts holding c: error */
    int *where = malloc(sizeof(int) * (size_t)(R * C));
    int *table = malloc(sizeof(int) * (size_t)C);
    for (int c = 0, tt = 0; c < C; c++)
        table[c] = p->nodes[p->cols[c].node].kind == RAP_SPARSE ? tt++ : -1;
    for (int i = 0; i < R * C; i++)
        where[i] = -1;
    for (int q = 0; q < R; q++)
        for (int i = 0; i < r->rank[q].n_parts; i++) {
            const rap_place_part *pt = &r->rank[q].parts[i];
            int64_t rows = 0;
            for (int k = 0; k < K; k++)
                if (pt->shares >> k & 1)
                    rows += (Bg * (k + 1)) / K - (Bg * k) / K;
            CHECK(rows == pt->rows);
            CHECK_OK(rap_schedule_validate(pt->sched, pt->sub, &pt->fusion, pt->rows));
            for (int j = 0; j < pt->n_cols; j++) {
                int c = pt->cols[j];
                if (where[q * C + c] >= 0) {
                    CHECK(!"a column in two parts of one rank");
                    fprintf(stderr, "  %s: column %s twice on rank %d\n", what, p->cols[c].name, q);
                }
                where[q * C + c] = i;
            }
        }
    /* every (column, share): computed by exactly one rank (no replication
     * without row-split tables), which is the source its consumer uses */
    int bad = 0;
    for (int c = 0; c < C; c++) {
        if (p->nodes[p->cols[c].node].op == RAP_OP_INPUT)
            continue;
        int64_t rows = 0;
        for (int k = 0; k < K; k++) {
            int n = 0, by = -1;
            for (int q = 0; q < R; q++) {
                int i = where[q * C + c];
                if (i >= 0 && (r->rank[q].parts[i].shares >> k & 1)) {
                    n++;
                    by = q;
                }
            }
            int d = table[c] >= 0 ? owner[table[c]] : k / r->shares;
            int s = r->src[((size_t)c * (size_t)K + (size_t)k) * (size_t)R + (size_t)d];
            if (n != 1 || s != by) {
                if (bad++ < 5)
                    fprintf(stderr, "  %s: column %s share %d computed %d times (by %d), source %d\n",
                            what, p->cols[c].name, k, n, by, s);
            }
            if (n == 1)
                rows += (Bg * (k + 1)) / K - (Bg * k) / K;
        }
        if (rows != Bg && bad++ < 5)
            fprintf(stderr, "  %s: column %s: %lld rows of %lld\n", what, p->cols[c].name,
                    (long long)rows, (long long)Bg);
    }
    CHECK(bad == 0);
    /* every op: per share, as many computations as distinct (rank, part)
     * groups among the columns that need it -- exactly once for an op
     * that feeds one column */
    int *count = calloc((size_t)p->n_nodes, sizeof(int));
    int *need = calloc((size_t)p->n_nodes, sizeof(int));
    int *stamp = malloc(sizeof(int) * (size_t)p->n_nodes);
    int *mark = malloc(sizeof(int) * (size_t)p->n_nodes);
    int opbad = 0, ops_seen = 0;
    for (int k = 0; k < K; k++) {
        memset(count, 0, sizeof(int) * (size_t)p->n_nodes);
        memset(need, 0, sizeof(int) * (size_t)p->n_nodes);
        for (int q = 0; q < R; q++)
            for (int i = 0; i < r->rank[q].n_parts; i++) {
                const rap_place_part *pt = &r->rank[q].parts[i];
                if (!(pt->shares >> k & 1))
                    continue;
                /* ops live in the sub-plan = computed here; the schedule
                 * covers every one of them (validated above) */
                for (int x = 0; x < p->n_nodes; x++)
                    count[x] += pt->sub->nodes[x].live && pt->sub->nodes[x].op != RAP_OP_INPUT;
                /* ops needed by this part's columns, each once per group */
                for (int x = 0; x < p->n_nodes; x++)
                    mark[x] = 0;
                for (int j = 0; j < pt->n_cols; j++)
                    for (int x = p->cols[pt->cols[j]].node; x >= 0 && p->nodes[x].op != RAP_OP_INPUT;
                         x = p->nodes[x].input)
                        mark[x] = 1;
                for (int x = 0; x < p->n_nodes; x++)
                    need[x] += mark[x];
            }
        for (int x = 0; x < p->n_nodes; x++) {
            if (!p->nodes[x].live || p->nodes[x].op == RAP_OP_INPUT)
                continue;
            ops_seen++;
            int consumers = 0; /* columns that need op x */
            for (int c = 0; c < C; c++)
                for (int y = p->cols[c].node; y >= 0; y = p->nodes[y].input)
                    if (y == x) {
                        consumers++;
                        break;
                    }
            if (count[x] != need[x] || count[x] < 1 || (consumers == 1 && count[x] != 1)) {
                if (opbad++ < 5)
                    fprintf(stderr, "  %s: op node %d share %d: computed %d, needed %d (%d columns)\n",
                            what, x, k, count[x], need[x], consumers);
            }
        }
    }
    (void)stamp;
    CHECK(opbad == 0);
    CHECK(ops_seen == K * rap_plan_n_ops(p));
    free(count);
    free(need);
    free(stamp);
    free(mark);
    free(where);
    free(table);
}

/* Plans 0-3 x R = 2, 4, 8: the three placements, their costs and checks. */
static void place_plans(rap_test_ctx *t, const char *const *names, int n_names, const int *Rs,
                        int n_R, double frac)
{
    const int64_t B = 4096;
    for (int q = 0; q < n_names; q++) {
        rap_plan *p;
        REQUIRE_SHIPPED_PLAN(names[q], &p);
        rap_model_shape sh = paper_shape(p, B);
        rap_capacity cap1;
        REQUIRE_OK(rap_place_capacity_fraction(p, NULL, B, frac, &sh, "test", &cap1));
        for (int ri = 0; ri < n_R; ri++) {
            int R = Rs[ri];
            int owner[256], T = 0;
            REQUIRE_OK(rap_place_owners_tablewise(p, R, owner, 256, &T));
            CHECK(T == sh.tables);
            rap_capacity cap[8];
            for (int r = 0; r < R; r++)
                cap[r] = cap1;
            rap_place_config cfg = {0};
            cfg.ranks = R;
            cfg.batch = B;
            cfg.shares = 1;
            cfg.owner = owner;
            cfg.cap = cap;
            cfg.link = rap_link_defaults();
            rap_place_result res[3];
            for (int k = 0; k < 3; k++) {
                REQUIRE_OK(rap_place_run(p, &cfg, (rap_placement)k, &res[k]));
                char what[128];
                snprintf(what, sizeof what, "%s R=%d %s", names[q], R, rap_placement_name(k));
                check_coverage(t, p, owner, &res[k], what);
            }
            /* owner: nothing moves; batch: each rank's rows of every sparse
             * column go to the owner unless it is the owner */
            CHECK(res[0].bytes_moved == 0);
            CHECK(res[0].comm_ms == 0);
            int64_t ids = 0;
            for (int c = 0, tt = 0; c < p->n_cols; c++)
                if (p->nodes[p->cols[c].node].kind == RAP_SPARSE) {
                    (void)owner[tt++];
                    ids += (int64_t)(R - 1) * B * ids_row_bytes(p, c);
                }
            CHECK(res[1].bytes_moved == ids);
            if (res[1].bytes_moved != ids)
                fprintf(stderr, "  %s R=%d batch: %lld bytes, ids %lld\n", names[q], R,
                        (long long)res[1].bytes_moved, (long long)ids);
            CHECK(res[1].comm_ms > 0);
            /* search <= both extremes by its own model */
            const double eps = 1e-9;
            CHECK(res[2].exposed_max_ms <= res[0].exposed_max_ms + eps);
            CHECK(res[2].exposed_max_ms <= res[1].exposed_max_ms + eps);
            /* the reported cost is the cost of the assignment returned */
            rap_place_result again;
            REQUIRE_OK(rap_place_evaluate(p, &cfg, res[2].src, &again));
            CHECK(fabs(again.exposed_max_ms - res[2].exposed_max_ms) < 1e-12);
            CHECK(again.bytes_moved == res[2].bytes_moved);
            /* cost = max over ranks of that rank's exposure */
            double mx = 0;
            for (int r = 0; r < R; r++)
                if (res[2].rank[r].exposed_total_ms > mx)
                    mx = res[2].rank[r].exposed_total_ms;
            CHECK(fabs(mx - res[2].exposed_max_ms) < 1e-12);
            printf("  %s R=%d frac %.2f: exposed max ms owner %.4f batch %.4f search %.4f "
                   "(%d moves from %s); bytes %lld %lld %lld\n",
                   names[q], R, frac, res[0].exposed_max_ms, res[1].exposed_max_ms,
                   res[2].exposed_max_ms, res[2].moves, res[2].start, (long long)res[0].bytes_moved,
                   (long long)res[1].bytes_moved, (long long)res[2].bytes_moved);
            rap_place_result_free(&again);
            for (int k = 0; k < 3; k++)
                rap_place_result_free(&res[k]);
        }
        rap_plan_free(p);
    }
}

RAP_TEST(place_plans01_R248)
{
    static const char *const names[] = {"plan0.plan", "plan1.plan"};
    static const int Rs[] = {2, 4, 8};
    place_plans(t, names, 2, Rs, 3, 0.15);
}

RAP_TEST(place_plans23_R248)
{
    static const char *const names[] = {"plan2.plan", "plan3.plan"};
    static const int Rs[] = {2, 4, 8};
    place_plans(t, names, 2, Rs, 3, 0.15);
}

/* R = 1: one part, every column over the batch: the one-GPU schedule. */
RAP_TEST(place_one_rank_is_one_gpu)
{
    static const char *const names[] = {"plan0.plan", "plan2.plan"};
    for (int q = 0; q < 2; q++) {
        rap_plan *p;
        REQUIRE_SHIPPED_PLAN(names[q], &p);
        rap_model_shape sh = paper_shape(p, 4096);
        rap_capacity cap;
        REQUIRE_OK(rap_place_capacity_fraction(p, NULL, 4096, 0.2, &sh, "test", &cap));
        int owner[256], T;
        REQUIRE_OK(rap_place_owners_tablewise(p, 1, owner, 256, &T));
        rap_fusion f;
        REQUIRE_OK(rap_fuse_levels(p, &f));
        rap_search_config sc = {NULL, &cap, 4096, 1, false, RAP_CHOICE_EARLIEST}; /* first fit, as placement */
        rap_schedule *one;
        rap_search_result sr;
        REQUIRE_OK(rap_schedule_search(p, &f, &sc, "one", &one, &sr));
        rap_place_config cfg = {0};
        cfg.ranks = 1;
        cfg.batch = 4096;
        cfg.owner = owner;
        cfg.cap = &cap;
        cfg.link = rap_link_defaults();
        for (int k = 0; k < 3; k++) {
            rap_place_result r;
            REQUIRE_OK(rap_place_run(p, &cfg, (rap_placement)k, &r));
            REQUIRE(r.rank[0].n_parts == 1);
            const rap_schedule *s = r.rank[0].parts[0].sched;
            CHECK(r.bytes_moved == 0);
            CHECK(s->plan_hash == one->plan_hash);
            CHECK(s->fusion_hash == one->fusion_hash);
            CHECK(s->n_slices == one->n_slices);
            for (int w = 0; w <= RAP_WIN_COUNT; w++)
                CHECK(s->win_first[w] == one->win_first[w]);
            for (int i = 0; i < s->n_slices && i < one->n_slices; i++) {
                const rap_slice *a = &s->slices[i], *b = &one->slices[i];
                CHECK(a->kernel == b->kernel && a->d0 == b->d0 && a->d1 == b->d1 && a->r0 == b->r0 &&
                      a->r1 == b->r1 && a->predicted_ms == b->predicted_ms);
            }
            CHECK(fabs(r.exposed_max_ms - sr.total_exposed_ms) < 1e-12);
            CHECK(sr.total_exposed_ms > 0); /* a capacity that hides only part of it */
            rap_place_result_free(&r);
        }
        rap_schedule_free(one);
        rap_fusion_free(&f);
        rap_plan_free(p);
    }
}

/* Assignments that lose or invent a unit are refused; moving a unit to
 * another rank costs its bytes, and the all-to-all is exposed (it runs on
 * the training stream before the step, whatever grad_comm's capacity). */
RAP_TEST(place_evaluate_units_and_comm)
{
    rap_plan *p;
    REQUIRE_SHIPPED_PLAN("plan0.plan", &p);
    const int R = 2;
    const int64_t B = 4096;
    rap_model_shape sh = paper_shape(p, B);
    rap_capacity cap[2];
    rap_capacity_assumed(&sh, "test", &cap[0]);
    cap[0].capacity_ms[RAP_WIN_GRAD_COMM] = 0.5;
    cap[1] = cap[0];
    int owner[64], T;
    REQUIRE_OK(rap_place_owners_tablewise(p, R, owner, 64, &T));
    rap_place_config cfg = {0};
    cfg.ranks = R;
    cfg.batch = B;
    cfg.owner = owner;
    cfg.cap = cap;
    cfg.link = rap_link_defaults();
    rap_place_result own;
    REQUIRE_OK(rap_place_run(p, &cfg, RAP_PLACE_OWNER, &own));
    CHECK(own.exposed_max_ms == 0); /* plan 0 fits the assumed windows */
    int C = p->n_cols, K = R;
    size_t n = (size_t)C * (size_t)K * (size_t)R;
    int *src = malloc(sizeof(int) * n);
    memcpy(src, own.src, sizeof(int) * n);
    /* the first sparse column: its share 1 computed by the other rank */
    int c0 = -1;
    for (int c = 0; c < C && c0 < 0; c++)
        if (p->nodes[p->cols[c].node].kind == RAP_SPARSE)
            c0 = c;
    REQUIRE(c0 >= 0);
    int o = owner[0], other = 1 - o;
    src[((size_t)c0 * K + 1) * R + o] = other;
    rap_place_result mv;
    REQUIRE_OK(rap_place_evaluate(p, &cfg, src, &mv));
    int64_t want = (2 * B - B) * ids_row_bytes(p, c0); /* share 1: rows [B, 2B) */
    CHECK(mv.bytes_moved == want);
    CHECK(mv.rank[other].bytes_sent == want && mv.rank[o].bytes_recv == want);
    double T_ms = (double)want / 300e9 * 1e3 + 0.010;
    CHECK(fabs(mv.comm_ms - T_ms) < 1e-12);
    CHECK(fabs(mv.exposed_max_ms - T_ms) < 1e-12); /* not hidden in grad_comm */
    CHECK(mv.rank[o].load_ms[RAP_WIN_GRAD_COMM] < 1e-12);
    CHECK(fabs(mv.rank[o].comm_exposed_ms - T_ms) < 1e-12 && mv.rank[o].comm_hidden_ms == 0);
    rap_place_result_free(&mv);
    /* no grad_comm capacity: the same */
    cap[0].capacity_ms[RAP_WIN_GRAD_COMM] = 0;
    cap[1].capacity_ms[RAP_WIN_GRAD_COMM] = 0;
    REQUIRE_OK(rap_place_evaluate(p, &cfg, src, &mv));
    CHECK(fabs(mv.exposed_max_ms - T_ms) < 1e-12);
    CHECK(fabs(mv.rank[0].comm_exposed_ms - T_ms) < 1e-12);
    rap_place_result_free(&mv);
    /* a consumer with no source, and a source for a non-consumer: refused */
    src[((size_t)c0 * K + 1) * R + o] = -1;
    CHECK(rap_place_evaluate(p, &cfg, src, &mv) == RAP_ERR_ARG);
    src[((size_t)c0 * K + 1) * R + o] = o;
    src[((size_t)c0 * K + 1) * R + other] = o;
    CHECK(rap_place_evaluate(p, &cfg, src, &mv) == RAP_ERR_ARG);
    free(src);
    rap_place_result_free(&own);
    rap_plan_free(p);
}

/* ------------------------------------------------ bench/multi, no GPU */

/* A stand-in for `rap` (bench/plan with the flags bench/multi assumes):
 * ideal 100000 samples/s on one GPU, 0.95 x N x that on N; rap 0.995 (search),
 * 0.99 (owner), 0.98 (batch) of ideal; FAKE_NO_PLACEMENT=1: rap bench
 * without --placement. */
static const char *const g_fake_rap =
    "#!/bin/bash\n"
    "cmd=$1; shift\n"
    "if [ \"$1\" = --help ]; then\n"
    "  if [ \"$cmd\" = bench ]; then\n"
    "    echo 'usage: rap bench [options]'; echo '  --gpus N   ranks'\n"
    "    [ -z \"${FAKE_NO_PLACEMENT:-}\" ] && echo '  --placement batch|owner|search  which'\n"
    "    echo '  --json   JSON'; echo '  --modes M,M  modes'; echo '  --model small|paper  model'\n"
    "  else echo '  --placement owner|batch|search|all  which'; fi\n"
    "  exit 0\n"
    "fi\n"
    "gpus=1; report=; pl=none; modes=\n"
    "while [ $# -gt 0 ]; do case $1 in --gpus) gpus=$2; shift;; --report) report=$2; shift;;\n"
    "  --placement) pl=$2; shift;; --modes) modes=$2; shift;; esac; shift; done\n"
    "if [ \"$cmd\" = plan ]; then\n"
    "  cat > \"$report\" <<JSON\n"
    "{\"latency_model\": \"analytic fallback (no predictor)\", \"capacity_source\": \"assumed\",\n"
    " \"placements\": [{\"placement\": \"owner\", \"exposed_max_ms\": 0.02, \"bytes_moved\": 0},\n"
    "  {\"placement\": \"batch\", \"exposed_max_ms\": 0.03, \"bytes_moved\": 884736},\n"
    "  {\"placement\": \"search\", \"exposed_max_ms\": 0.01, \"bytes_moved\": 262144, \"moves\": 2}]}\n"
    "JSON\n"
    "  echo '| placement | table |'; exit 0\n"
    "fi\n"
    "ideal=$(( gpus == 1 ? 100000 : 95000 * gpus ))\n"
    "case $pl in search|none) f=0.995;; owner) f=0.99;; *) f=0.98;; esac\n"
    "case $pl in search) by=262144;; batch) by=884736;; *) by=0;; esac\n"
    "echo 'log line before the JSON'\n"
    "printf '{\"plan\":\"p\",\"modes\":['\n"
    "sep=\n"
    "for m in ${modes//,/ }; do\n"
    "  case $m in ideal) s=$ideal;; rap) s=$(awk -v i=$ideal -v f=$f 'BEGIN{print i*f}');;\n"
    "    *) s=$(( ideal / 2 ));; esac\n"
    "  printf '%s\\n{\"mode\":\"%s\",\"samples_per_s\":%s,\"exposed_ms\":0.001' \"$sep\" $m $s\n"
    "  [ $gpus -gt 1 ] && printf ',\"all_to_all_ms\":0.5,\"all_reduce_ms\":0.25,\"bytes_moved\":%s' $by\n"
    "  printf '}'; sep=,\n"
    "done\n"
    "echo ']}'\n";

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

RAP_TEST(place_bench_multi_script_fake_rap)
{
    static const char *const where[] = {"bench/multi", "../bench/multi", "../../bench/multi"};
    const char *script = NULL;
    for (int i = 0; i < 3 && !script; i++)
        if (access(where[i], R_OK) == 0)
            script = where[i];
    if (!script)
        SKIP("bench/multi not found from the working directory");
    if (system("python3 -c 'import json' >/dev/null 2>&1") != 0)
        SKIP("no python3");
    char dir[512], fake[600], cmd[4096], md[600], js[600];
    rap_test_path(dir, sizeof dir, "multi");
    snprintf(fake, sizeof fake, "%s/fake_rap", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    REQUIRE(system(cmd) == 0);
    FILE *f = fopen(fake, "w");
    REQUIRE(f);
    fputs(g_fake_rap, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "chmod +x '%s'", fake);
    REQUIRE(system(cmd) == 0);
    /* the whole script on the stand-in: 1 and 2 GPUs, plan0, batch 4096 */
    snprintf(cmd, sizeof cmd,
             "NVIDIA_SMI= RAP='%s' PLANS=plan0 BATCHES=4096 bash '%s' '%s/out' 2 > '%s/stdout' "
             "2> '%s/stderr'",
             fake, script, dir, dir, dir);
    int rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    snprintf(md, sizeof md, "%s/out/multi.md", dir);
    snprintf(js, sizeof js, "%s/out/multi.json", dir);
    /* 2 GPUs: 190000 = 0.95 x 2 x 100000: efficiency 0.950 */
    CHECK(file_has(md, "| plan0 | 4096 | 2 | search | ideal | 190000 | 1.000 | 0.950 | 0.500 | 0.250 |"));
    CHECK(file_has(md, "| plan0 | 4096 | 1 | none | rap | 99500 | 0.995 | 1.000 | n/a | n/a |"));
    CHECK(file_has(md, "| plan0 | 4096 | 2 | search | rap | 189050 | 0.995 | 0.950 |"));
    CHECK(file_has(md, "| plan0 | 4096 | 2 | owner | rap | 188100 | 0.990 |"));
    /* placement rows: predicted (the plan report) and measured (rap mode) */
    CHECK(file_has(md, "| plan0 | 4096 | 2 | search | 0.0100 | 262144 | 2 | 0.0010 | 262144 | 189050 |"));
    CHECK(file_has(md, "| plan0 | 4096 | 2 | batch | 0.0300 | 884736 |  | 0.0010 | 884736 | 186200 |"));
    CHECK(file_has(md, "plan0, batch 4096/GPU, 2 GPUs: rap/ideal 0.995 -> met"));
    CHECK(file_has(js, "\"scaling_efficiency\": 0.95"));
    /* a rap bench without --placement: stops at once, naming the flag */
    snprintf(cmd, sizeof cmd,
             "FAKE_NO_PLACEMENT=1 RAP='%s' PLANS=plan0 BATCHES=4096 bash '%s' '%s/out2' 2 "
             "> '%s/stdout2' 2> '%s/stderr2'", fake, script, dir, dir, dir);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 3);
    char err2[600];
    snprintf(err2, sizeof err2, "%s/stderr2", dir);
    CHECK(file_has(err2, "rap bench does not support --placement yet"));
    snprintf(cmd, sizeof cmd, "%s/out2/raw/bench_plan0_b4096_g1_none.json", dir);
    CHECK(access(cmd, F_OK) != 0); /* nothing ran */
}

/* A table split row-wise over both ranks: every holder needs all its ids.
 * owner: each holder preprocesses it over the global batch (no bytes);
 * batch: each rank sends its rows' ids to the other holder. */
RAP_TEST(place_row_split_table_holders)
{
    rap_plan *p;
    REQUIRE_SHIPPED_PLAN("plan0.plan", &p);
    const int R = 2;
    const int64_t B = 4096;
    rap_model_shape sh = paper_shape(p, B);
    rap_capacity cap[2];
    REQUIRE_OK(rap_place_capacity_fraction(p, NULL, B, 0.25, &sh, "test", &cap[0]));
    cap[1] = cap[0];
    int owner[64], T;
    REQUIRE_OK(rap_place_owners_tablewise(p, R, owner, 64, &T));
    uint64_t holders[64];
    for (int t = 0; t < T; t++)
        holders[t] = (uint64_t)1 << owner[t];
    holders[0] = 3; /* table 0 on ranks 0 and 1 */
    rap_place_config cfg = {0};
    cfg.ranks = R;
    cfg.batch = B;
    cfg.owner = owner;
    cfg.holders = holders;
    cfg.cap = cap;
    cfg.link = rap_link_defaults();
    int c0 = -1;
    for (int c = 0; c < p->n_cols && c0 < 0; c++)
        if (p->nodes[p->cols[c].node].kind == RAP_SPARSE)
            c0 = c;
    REQUIRE(c0 >= 0);
    rap_place_result res[3];
    for (int k = 0; k < 3; k++)
        REQUIRE_OK(rap_place_run(p, &cfg, (rap_placement)k, &res[k]));
    /* owner: both ranks compute column c0 over both shares, nothing moves */
    CHECK(res[0].bytes_moved == 0);
    for (int q = 0; q < R; q++) {
        bool found = false;
        for (int i = 0; i < res[0].rank[q].n_parts; i++)
            for (int j = 0; j < res[0].rank[q].parts[i].n_cols; j++)
                if (res[0].rank[q].parts[i].cols[j] == c0) {
                    found = true;
                    CHECK(res[0].rank[q].parts[i].shares == 3);
                    CHECK(res[0].rank[q].parts[i].rows == R * B);
                }
        CHECK(found);
    }
    /* batch: table 0 crosses both ways, the others once */
    int64_t want = 0;
    for (int c = 0, t = 0; c < p->n_cols; c++)
        if (p->nodes[p->cols[c].node].kind == RAP_SPARSE)
            want += (t++ == 0 ? 2 : 1) * B * ids_row_bytes(p, c);
    CHECK(res[1].bytes_moved == want);
    CHECK(res[2].exposed_max_ms <= res[0].exposed_max_ms + 1e-9);
    CHECK(res[2].exposed_max_ms <= res[1].exposed_max_ms + 1e-9);
    /* every holder gets every share of c0 from exactly one source */
    for (int k = 0; k < 3; k++)
        for (int sh2 = 0; sh2 < R; sh2++)
            for (int d = 0; d < R; d++) {
                int s = res[k].src[((size_t)c0 * R + (size_t)sh2) * R + (size_t)d];
                CHECK(s >= 0 && s < R);
            }
    for (int k = 0; k < 3; k++)
        rap_place_result_free(&res[k]);
    rap_plan_free(p);
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y)
            same = false;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* rap plan --gpus: one manifest per rank with its parts' files, the three
 * placements in the report; --gpus 1 writes what plain rap plan writes. */
RAP_TEST(place_cli_rap_plan_gpus)
{
    char buf[256];
    const char *path = rap_test_plan_path("plan0.plan", buf, sizeof buf);
    if (!path)
        SKIP("plans/ not found from the working directory");
    char s[512], rep[512], args[2048], out[1 << 14], f[700];
    rap_test_path(s, sizeof s, "placeS");
    rap_test_path(rep, sizeof rep, "place_report.json");
    snprintf(args, sizeof args, "plan --plan %s --gpus 4 --placement all --capacity-fraction 0.25 "
             "--out %s --report %s", path, s, rep);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK(strstr(out, "| search |") && strstr(out, "| owner | ") && strstr(out, "| batch | "));
    for (int r = 0; r < 4; r++) {
        snprintf(f, sizeof f, "%s.rank%d", s, r);
        CHECK(file_has(f, "rap-placement 1"));
        CHECK(file_has(f, "part 0 rows "));
        snprintf(f, sizeof f, "%s.rank%d.0", s, r);
        CHECK(access(f, R_OK) == 0);
        snprintf(f, sizeof f, "%s.rank%d.0.fusion", s, r);
        CHECK(file_has(f, "rap-fusion 2"));
    }
    CHECK(file_has(rep, "\"placement\": \"owner\""));
    CHECK(file_has(rep, "\"placement\": \"batch\""));
    CHECK(file_has(rep, "\"placement\": \"search\""));
    CHECK(file_has(rep, "\"ownership\": \"rap_shard_plan"));
    /* --gpus 1 == no --gpus: same schedule and fusion files */
    char a[512], b[512], fa[700], fb[700];
    rap_test_path(a, sizeof a, "place_one_a");
    rap_test_path(b, sizeof b, "place_one_b");
    snprintf(args, sizeof args, "plan --plan %s --fusion levels --out %s --quiet", path, a);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    snprintf(args, sizeof args, "plan --plan %s --fusion levels --gpus 1 --out %s --quiet", path, b);
    REQUIRE(rap_test_run_rap(args, out, sizeof out) == 0);
    CHECK(same_file(a, b));
    snprintf(fa, sizeof fa, "%s.fusion", a);
    snprintf(fb, sizeof fb, "%s.fusion", b);
    CHECK(same_file(fa, fb));
    /* refusals: ILP fusion per part, owners of the wrong length */
    snprintf(args, sizeof args, "plan --plan %s --gpus 2 --fusion ilp --out %s", path, s);
    CHECK(rap_test_run_rap(args, out, sizeof out) == 2);
    CHECK(strstr(out, "one-GPU only") != NULL);
    snprintf(args, sizeof args, "plan --plan %s --gpus 2 --owners 0,1 --out %s", path, s);
    CHECK(rap_test_run_rap(args, out, sizeof out) != 0);
    CHECK(strstr(out, "2 entries for the plan's 27 tables") != NULL);
}
