/* checkpoint_meta.c -- the trainer's checkpoint metadata (checkpoint_meta.h). */
#include "run/checkpoint_meta.h"

#include "core/checked.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

const char *const rap_ckpt_soft_keys[] = {"lr", "batch", "precision", "adagrad_eps", NULL};

const char *const rap_ckpt_position_keys[] = {"step", "epoch", "rows_in_epoch", "data",
                                              "eval_fraction", "rng_state", "samples_trained",
                                              "data_file", "data_dev", "data_inode",
                                              "data_offset", "data_line", NULL};

/* Keys that must match on resume, besides the plan (compared by hash) and
 * the optimizer (its own rule: check_optimizer). */
static const char *const shape_keys[] = {"n_dense", "n_tables", "table_rows", "emb_dim",
                                         "mlp_bot", "mlp_top", NULL};

/* ------------------------------------------------------------- writing */

void rap_ckpt_meta_widths(const int *w, int n, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%d", i ? "-" : "", w[i]);
}

/* "table_rows": the rows of every table, comma separated. */
static rap_status set_table_rows(rap_meta *m, const rap_model_config *mc)
{
    size_t cap = 24 * (size_t)mc->n_tables + 1, at = 0;
    char *rows = rap_malloc(cap, "metadata");
    if (!rows)
        return RAP_ERR_NOMEM;
    rows[0] = 0;
    for (int i = 0; i < mc->n_tables; i++)
        at += (size_t)snprintf(rows + at, cap - at, "%s%lld", i ? "," : "",
                               (long long)mc->table_rows[i]);
    rap_status st = rap_meta_set(m, "table_rows", "%s", rows);
    rap_free(rows);
    return st;
}

rap_status rap_ckpt_meta_model(rap_meta *m, const rap_model_config *mc, const rap_ckpt_plan *plan)
{
    char buf[256];
    RAP_TRY(rap_meta_set(m, "contents", "checkpoint"));
    RAP_TRY(rap_meta_set(m, "n_dense", "%d", mc->n_dense));
    RAP_TRY(rap_meta_set(m, "n_tables", "%d", mc->n_tables));
    RAP_TRY(set_table_rows(m, mc));
    RAP_TRY(rap_meta_set(m, "emb_dim", "%d", mc->emb_dim));
    rap_ckpt_meta_widths(mc->bot, mc->n_bot, buf, sizeof buf);
    RAP_TRY(rap_meta_set(m, "mlp_bot", "%s", buf));
    rap_ckpt_meta_widths(mc->top, mc->n_top, buf, sizeof buf);
    RAP_TRY(rap_meta_set(m, "mlp_top", "%s", buf));
    RAP_TRY(rap_meta_set(m, "optimizer", "%s", rap_optimizer_name(mc->optimizer)));
    RAP_TRY(rap_meta_set(m, "emb_dtype", "%s", rap_emb_dtype_name(mc->emb_dtype)));
    RAP_TRY(rap_meta_set(m, "lr", "%.9g", (double)mc->lr));
    RAP_TRY(rap_meta_set(m, "adagrad_eps", "%.9g", (double)mc->adagrad_eps));
    RAP_TRY(rap_meta_set(m, "adagrad_init", "%.9g", (double)mc->adagrad_init));
    RAP_TRY(rap_meta_set(m, "batch", "%lld", (long long)mc->batch));
    RAP_TRY(rap_meta_set(m, "precision", "%s", mc->precision == RAP_BF16 ? "bf16" : "fp32"));
    RAP_TRY(rap_meta_set(m, "seed", "%llu", (unsigned long long)mc->seed));
    RAP_TRY(rap_meta_set(m, "plan_name", "%s", plan->name ? plan->name : ""));
    RAP_TRY(rap_meta_set(m, "plan_source", "%s", plan->source ? plan->source : ""));
    RAP_TRY(rap_meta_set(m, "plan_hash", "%016llx", (unsigned long long)plan->hash));
    RAP_TRY(rap_meta_set(m, "plan_columns", "%s", plan->columns ? plan->columns : ""));
    return RAP_OK;
}

rap_status rap_ckpt_meta_position(rap_meta *m, const rap_ckpt_position *p)
{
    RAP_TRY(rap_meta_set(m, "step", "%lld", (long long)p->step));
    RAP_TRY(rap_meta_set(m, "epoch", "%lld", (long long)p->epoch));
    RAP_TRY(rap_meta_set(m, "rows_in_epoch", "%lld", (long long)p->rows_in_epoch));
    RAP_TRY(rap_meta_set(m, "data", "%s", p->data ? p->data : ""));
    RAP_TRY(rap_meta_set(m, "eval_fraction", "%.9g", p->eval_fraction));
    RAP_TRY(rap_meta_set(m, "samples_trained", "%lld", (long long)p->samples_trained));
    /* The trainer draws no random numbers after initialisation: the state
     * of its generator is the seed itself. */
    RAP_TRY(rap_meta_set(m, "rng_state", "splitmix64:%016llx", (unsigned long long)p->rng_state));
    return RAP_OK;
}

/* ------------------------------------------------------------- resuming */

/* Appends "key: checkpoint A, this run B; " for list key (comma or dash
 * separated), naming the first differing element. */
static void diff_list(const char *key, const char *a, const char *b, char *msg, size_t cap)
{
    size_t at = strlen(msg);
    int i = 0;
    const char *p = a, *q = b;
    while (*p || *q) {
        size_t lp = strcspn(p, ",-"), lq = strcspn(q, ",-");
        if (lp != lq || strncmp(p, q, lp)) {
            if (!*p || !*q)
                snprintf(msg + at, cap - at, "%s: the checkpoint has %s, this run %s; ", key, a, b);
            else
                snprintf(msg + at, cap - at, "%s: item %d is %.*s in the checkpoint, %.*s in this "
                         "run; ", key, i, (int)lp, p, (int)lq, q);
            return;
        }
        p += lp + (p[lp] != 0);
        q += lq + (q[lq] != 0);
        i++;
    }
}

/* Names of the plan columns that differ between two "name:hash,..." lists. */
static void diff_columns(const char *a, const char *b, char *msg, size_t cap)
{
    size_t at = strlen(msg);
    at += (size_t)snprintf(msg + at, cap - at, "plan: ");
    int shown = 0;
    /* columns of b missing or changed in a, then columns of a missing in b */
    for (int pass = 0; pass < 2; pass++) {
        const char *x = pass ? a : b, *y = pass ? b : a;
        for (const char *p = x; *p && shown < 6;) {
            size_t l = strcspn(p, ",");
            const char *colon = memchr(p, ':', l);
            size_t nl = colon ? (size_t)(colon - p) : l;
            const char *found = NULL;
            for (const char *q = y; *q;) {
                size_t lq = strcspn(q, ",");
                if (lq > nl && q[nl] == ':' && !strncmp(q, p, nl)) {
                    found = q;
                    if (lq != l || strncmp(q, p, l))
                        found = (const char *)1;
                    break;
                }
                q += lq + (q[lq] != 0);
            }
            if (!found || found == (const char *)1) {
                if (!(pass && found))
                    at += (size_t)snprintf(msg + at, cap - at, "%scolumn %.*s %s", shown ? ", " : "",
                                           (int)nl, p, !found ? (pass ? "is only in the checkpoint"
                                                                      : "is not in the checkpoint")
                                                              : "is computed differently");
                if (!(pass && found))
                    shown++;
            }
            p += l + (p[l] != 0);
        }
    }
    if (!shown)
        snprintf(msg + at, cap - at, "the columns are the same but their order differs");
    at = strlen(msg);
    snprintf(msg + at, cap - at, "; ");
}

/* The checkpoint's value of key, or dflt when it has none (a file written
 * before the key existed). */
static const char *ck_value(const rap_ckpt *ck, const char *key, const char *dflt)
{
    const char *v = rap_meta_get(&ck->meta, key);
    return v ? v : dflt;
}

/* Appends the optimizer's difference to msg: the same optimizer, or
 * Adagrad's per-element state into row-wise Adagrad (its row means:
 * rap_ckpt_meta_notices) resume; row-wise into Adagrad cannot. */
static void check_optimizer(const rap_ckpt *ck, const rap_meta *run, char *msg, size_t cap)
{
    const char *a = ck_value(ck, "optimizer", "(missing)");
    const char *b = rap_meta_get(run, "optimizer");
    if (!b)
        b = "";
    if (!strcmp(a, b) || (!strcmp(a, "adagrad") && !strcmp(b, "rowwise-adagrad")))
        return;
    size_t at = strlen(msg);
    if (!strcmp(a, "rowwise-adagrad") && !strcmp(b, "adagrad"))
        snprintf(msg + at, cap - at, "optimizer: the checkpoint has rowwise-adagrad, this run "
                 "adagrad: row-wise Adagrad keeps one value a table row (the mean of the row's "
                 "squared gradients), from which Adagrad's per-element sums cannot be recovered; ");
    else
        snprintf(msg + at, cap - at, "optimizer: the checkpoint has %s, this run %s; ", a, b);
}

rap_status rap_ckpt_meta_check_model(const rap_ckpt *ck, const rap_meta *run)
{
    char msg[1600] = "";
    for (int k = 0; shape_keys[k]; k++) {
        const char *a = rap_meta_get(&ck->meta, shape_keys[k]);
        const char *b = rap_meta_get(run, shape_keys[k]);
        if (!a)
            a = "(missing)";
        if (!b)
            b = "";
        if (strcmp(a, b))
            diff_list(shape_keys[k], a, b, msg, sizeof msg);
    }
    check_optimizer(ck, run, msg, sizeof msg);
    const char *ph = rap_meta_get(&ck->meta, "plan_hash");
    const char *rh = rap_meta_get(run, "plan_hash");
    if (!ph || !rh || strcmp(ph, rh)) {
        const char *pc = rap_meta_get(&ck->meta, "plan_columns");
        const char *rc = rap_meta_get(run, "plan_columns");
        diff_columns(pc ? pc : "", rc ? rc : "", msg, sizeof msg);
    }
    if (!msg[0])
        return RAP_OK;
    size_t l = strlen(msg);
    if (l >= 2)
        msg[l - 2] = 0;
    const char *pn = rap_meta_get(&ck->meta, "plan_name");
    const char *eb = rap_meta_get(&ck->meta, "emb_dim"), *mb = rap_meta_get(&ck->meta, "mlp_bot");
    const char *mt = rap_meta_get(&ck->meta, "mlp_top"), *op = rap_meta_get(&ck->meta, "optimizer");
    return rap_fail(RAP_ERR_ARG,
                    "--resume %s: the checkpoint does not match this run: %s (it was trained "
                    "with --plan %s --emb-dim %s --mlp-bot %s --mlp-top %s --optimizer %s "
                    "--emb-dtype %s)",
                    ck->path, msg, pn && pn[0] ? pn : "?", eb ? eb : "?", mb ? mb : "?",
                    mt ? mt : "?", op ? op : "?", ck_value(ck, "emb_dtype", "fp32"));
}

/* "16 -> 32 widens exactly" and so on: how tables stored as a are loaded
 * as b (a != b). */
static const char *conversion_of(const char *a, const char *b)
{
    if (!strcmp(b, "fp32"))
        return "widened exactly";
    if (!strcmp(a, "fp32"))
        return "rounded to nearest even";
    return "widened to fp32, then rounded to nearest even";
}

void rap_ckpt_meta_notices(const rap_ckpt *ck, const rap_meta *run, rap_ckpt_notices *out)
{
    memset(out, 0, sizeof *out);
    const char *a = ck_value(ck, "emb_dtype", "fp32");
    const char *b = rap_meta_get(run, "emb_dtype");
    if (b && strcmp(a, b))
        snprintf(out->dtype, sizeof out->dtype, "the checkpoint's tables are %s, this run's "
                 "--emb-dtype is %s: every table is converted (%s)", a, b, conversion_of(a, b));
    const char *oa = ck_value(ck, "optimizer", "");
    const char *ob = rap_meta_get(run, "optimizer");
    if (ob && !strcmp(oa, "adagrad") && !strcmp(ob, "rowwise-adagrad"))
        snprintf(out->state, sizeof out->state, "the checkpoint was trained with adagrad, this "
                 "run with rowwise-adagrad: each table row's state starts as the mean of its "
                 "per-element sums (the MLPs' Adagrad state carries over as it is)");
    const char *sa = rap_meta_get(&ck->meta, "seed"), *sb = rap_meta_get(run, "seed");
    if (sa && sb && strcmp(sa, sb) && b && strcmp(b, "fp32"))
        snprintf(out->seed, sizeof out->seed, "the checkpoint was trained with --seed %s, this "
                 "run has --seed %s: the seed keys the %s tables' stochastic rounding, so the "
                 "run rounds otherwise than the uninterrupted one would", sa, sb, b);
}

rap_status rap_ckpt_meta_read_position(const rap_ckpt *ck, rap_ckpt_position *p)
{
    memset(p, 0, sizeof *p);
    const char *s = rap_meta_get(&ck->meta, "step");
    const char *e = rap_meta_get(&ck->meta, "epoch");
    const char *r = rap_meta_get(&ck->meta, "rows_in_epoch");
    const char *d = rap_meta_get(&ck->meta, "data");
    const char *n = rap_meta_get(&ck->meta, "samples_trained");
    if (!s || !e || !r || !d || !n)
        return rap_fail(RAP_ERR_DATA, "%s: checkpoint metadata lacks the training position "
                        "(step, epoch, rows_in_epoch, data, samples_trained): an exported "
                        "model cannot be resumed", ck->path);
    const char *const keys[4] = {"step", "epoch", "rows_in_epoch", "samples_trained"};
    const char *const vals[4] = {s, e, r, n};
    int64_t *const dst[4] = {&p->step, &p->epoch, &p->rows_in_epoch, &p->samples_trained};
    for (int k = 0; k < 4; k++)
        if (!rap_parse_i64_ok(vals[k], 0, INT64_MAX, dst[k], NULL))
            return rap_fail(RAP_ERR_DATA, "%s: checkpoint metadata %s is \"%.40s\", expected an "
                            "integer >= 0", ck->path, keys[k], vals[k]);
    p->data = d;
    const char *ef = rap_meta_get(&ck->meta, "eval_fraction");
    p->has_eval_fraction = ef != NULL;
    p->eval_fraction = 0.0;
    if (ef) {
        char *end;
        p->eval_fraction = strtod(ef, &end);
        if (end == ef || *end || !(p->eval_fraction >= 0 && p->eval_fraction < 1))
            return rap_fail(RAP_ERR_DATA, "%s: checkpoint metadata eval_fraction is \"%.40s\", "
                            "expected a number in [0, 1)", ck->path, ef);
    }
    return RAP_OK;
}
