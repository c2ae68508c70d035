/* train_eval.c -- the trainer's evaluation (train.h, docs/TRAINING.md):
 * the evaluation rows (held out of --data, or --eval-data) read again,
 * preprocessed by an executor of the evaluation's own over the pipeline's
 * fusion and predicted by the model; with ranks rank 0 gathers the whole
 * model first. */
#include "run/train_internal.h"

#include "core/core.h"
#include "core/json.h"
#include "dist/comm.h"

#include <math.h>
#include <string.h>

rap_status train_eval_create(trainer *t)
{
    const rap_train_config *c = t->c;
    rap_pipeline_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.plan = c->plan;
    pc.fusion = &t->pl->fusion;
    pc.device = c->device;
    pc.stream = rap_pipeline_stream(t->pipe);
    pc.batch_rows = t->mc.batch;
    pc.threads = c->reader.threads;
    pc.pack = true;
    RAP_TRY(rap_pipeline_prep_create(&pc, &t->ev.side));
    RAP_TRY(rap_batch_create(&t->ev.eb, c->plan->schema, READ_ROWS, false));
    RAP_TRY(rap_batch_create(&t->ev.tb, c->plan->schema, t->mc.batch, c->device == RAP_GPU));
    t->ev.logits = rap_malloc(sizeof(float) * (size_t)t->mc.batch, "logits");
    return t->ev.logits ? RAP_OK : RAP_ERR_NOMEM;
}

void train_eval_free(trainer *t)
{
    rap_eval_free(&t->ev.acc);
    rap_free(t->ev.logits);
    t->ev.logits = NULL;
    rap_batch_free(&t->ev.tb);
    rap_batch_free(&t->ev.eb);
    rap_pipeline_prep_free(&t->ev.side);
}

/* Runs the plan on tb and points mb at the result. */
static rap_status prepare(trainer *t, rap_model_batch *mb)
{
    RAP_TRY(rap_prep_load(t->ev.side.prep, &t->ev.tb));
    RAP_TRY(rap_prep_run(t->ev.side.prep));
    return rap_input_make(t->ev.side.input, t->ev.side.prep, mb);
}

/* Evaluates model m on the evaluation rows; stops early on a stop request. */
static rap_status evaluate_model(trainer *t, rap_model *m, rap_eval_result *out)
{
    const rap_train_config *c = t->c;
    rap_reader_config rc = c->reader;
    bool own = c->eval_data && c->eval_data[0];
    double frac = own ? 0 : c->eval_fraction;
    rc.input = own ? c->eval_data : c->data;
    if (own)
        rc.max_rows = 0;
    /* the evaluation reads host rows: the host's parser, or with --parse gpu
     * on the CPU backend the kernels' reference (as the training feed) */
    if (rc.parse != RAP_PARSE_CPU && rc.parse != RAP_PARSE_REF)
        rc.parse = rc.parse == RAP_PARSE_GPU && c->device != RAP_GPU ? RAP_PARSE_REF
                                                                     : RAP_PARSE_CPU;
    rap_eval_reset(&t->ev.acc);
    rap_reader *er;
    RAP_TRY(rap_reader_open(&rc, &er));
    rap_status st = RAP_OK;
    int64_t limit = c->eval_rows > 0 ? c->eval_rows : INT64_MAX;
    bool done = false;
    while (st == RAP_OK && !done) {
        st = rap_reader_next(er, &t->ev.eb);
        if (st != RAP_OK)
            break;
        bool end = t->ev.eb.rows == 0;
        for (int64_t r = 0; r < t->ev.eb.rows && !done; r++) {
            int64_t idx = t->ev.eb.first_row + r;
            if (frac > 0 && !rap_train_held_out(idx, frac))
                continue;
            rap_batch_append(&t->ev.tb, &t->ev.eb, r, 1);
            done = t->ev.acc.n + t->ev.tb.rows >= limit;
            if (t->ev.tb.rows == t->ev.tb.cap || done) {
                rap_model_batch mb;
                st = prepare(t, &mb);
                if (st == RAP_OK)
                    st = rap_model_predict(m, &mb, t->ev.logits);
                if (st == RAP_OK)
                    st = rap_eval_add(&t->ev.acc, t->ev.logits, t->ev.tb.label, t->ev.tb.rows);
                t->ev.tb.rows = 0;
                if (st != RAP_OK)
                    break;
            }
        }
        if (end && st == RAP_OK && t->ev.tb.rows > 0) {
            rap_model_batch mb;
            st = prepare(t, &mb);
            if (st == RAP_OK)
                st = rap_model_predict(m, &mb, t->ev.logits);
            if (st == RAP_OK)
                st = rap_eval_add(&t->ev.acc, t->ev.logits, t->ev.tb.label, t->ev.tb.rows);
            t->ev.tb.rows = 0;
        }
        if (end || train_stop_requested(t))
            done = true;
    }
    rap_reader_stats rs;
    rap_reader_get_stats(er, &rs);
    rap_reader_close(er);
    t->ev.tb.rows = 0;
    RAP_TRY(st);
    *out = rap_eval_compute(&t->ev.acc);
    if (out->rows == 0 && own && !train_stop_requested(t)) { /* asked for, none usable */
        char first[512];
        rap_reader_first_reject(&rs, first, sizeof first);
        return rap_fail(RAP_ERR_NO_ROWS, "evaluation: no usable row in --eval-data %s: %lld rows "
                        "read, %lld rejected%s%s", rc.input, (long long)rs.rows_read,
                        (long long)rs.rows_rejected, first[0] ? "; the first at " : "", first);
    }
    if (out->rows == 0)
        T_WARN(t, "evaluation: no rows to evaluate in %s%s", rc.input,
                 frac > 0 ? " (held-out rows)" : "");
    rap_debug("evaluation input %s: %lld rows read, %lld rejected", rc.input,
              (long long)rs.rows_read, (long long)rs.rows_rejected);
    return RAP_OK;
}

/* Hybrid parallel: rank 0 gathers the whole model (every part of every
 * table broadcast from the rank holding it, the MLPs its own) into a
 * model of the global config and evaluates it; the other ranks wait.
 * Rank 0 then holds the whole model once more during the evaluation. */
static rap_status evaluate_dist(trainer *t, rap_eval_result *out)
{
    rap_comm *c = t->c->comm;
    const rap_shard_map *map = &t->pl->map;
    rap_model *mine = rap_pipeline_model(t->pipe);
    int D = t->mc.emb_dim;
    memset(out, 0, sizeof *out);
    out->auc = out->logloss = out->accuracy = NAN;
    RAP_TRY(rap_hybrid_wait(rap_pipeline_hybrid(t->pipe)));
    RAP_TRY(rap_model_sync(mine));
    rap_model *whole = NULL;
    rap_status st = RAP_OK;
    if (t->rk.rank == 0)
        st = rap_model_create(&t->mc, t->c->device, &whole);
    int64_t bad = st != RAP_OK; /* everyone learns whether rank 0 can evaluate */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    RAP_TRY(rap_comm_allreduce_host(c, &bad, 1, RAP_COMM_I64, "evaluation model"));
    if (bad) {
        rap_model_free(whole);
        return t->rk.rank == 0 ? rap_fail(st, "evaluation: %s", msg)
                            : rap_fail(RAP_ERR_NOMEM, "evaluation: rank 0 cannot hold the whole "
                                       "model to evaluate it (its message says why)");
    }
    int64_t maxr = 1;
    for (int tb = 0; tb < t->mc.n_tables; tb++)
        maxr = t->mc.table_rows[tb] > maxr ? t->mc.table_rows[tb] : maxr;
    float *full = rap_malloc(sizeof(float) * (size_t)(maxr * D), "evaluation table");
    if (!full) {
        rap_model_free(whole);
        return RAP_ERR_NOMEM;
    }
    /* Every rank runs every broadcast, in order, whatever failed here (a
     * rank that left the loop early would meet the others' broadcasts with
     * its next collective); a local failure is reported after the loop by
     * the "evaluation done" all-reduce. Only a failed collective (the comm
     * is then broken on every rank) ends the loop. */
    rap_status cs = RAP_OK;
    for (int tb = 0; cs == RAP_OK && tb < t->mc.n_tables; tb++) {
        for (int p = map->part0[tb]; cs == RAP_OK && p < map->part0[tb + 1]; p++) {
            const rap_shard_part *pt = &map->part[p];
            float *dst = full + pt->row0 * D;
            if (pt->rank == t->rk.rank && st == RAP_OK)
                st = rap_model_get(mine, pt->local, dst);
            cs = rap_comm_broadcast(c, dst, pt->rows * D, RAP_COMM_F32, pt->rank,
                                    "evaluation tables");
        }
        if (cs == RAP_OK && st == RAP_OK && whole)
            st = rap_model_set(whole, tb, full);
    }
    rap_free(full);
    if (cs != RAP_OK) {
        rap_model_free(whole);
        return cs;
    }
    /* the MLPs (every rank holds the same): rank 0's */
    int nl = rap_model_n_tensors(mine), nw = whole ? rap_model_n_tensors(whole) : 0;
    int tl = rap_pipeline_shard(t->pipe)->n_local;
    for (int i = tl; st == RAP_OK && whole && i < nl; i++) {
        const rap_tensor_info *ti = rap_model_tensor(mine, i);
        float *buf = rap_malloc(sizeof(float) * (size_t)(ti->rows * ti->cols), "evaluation");
        int j = t->mc.n_tables + (i - tl);
        if (!buf)
            st = RAP_ERR_NOMEM;
        else if (j >= nw)
            st = rap_fail(RAP_ERR_INTERNAL, "evaluation: tensor %d of the rank's model has no "
                          "counterpart", i);
        else
            st = rap_model_get(mine, i, buf);
        if (st == RAP_OK)
            st = rap_model_set(whole, j, buf);
        rap_free(buf);
    }
    if (st == RAP_OK && whole)
        st = evaluate_model(t, whole, out);
    rap_model_free(whole);
    /* the others wait for rank 0 (evaluation may outlast a collective's
     * timeout: theirs is lengthened for this wait) */
    double to = rap_comm_timeout(c);
    if (t->rk.rank != 0 && to < 3600)
        rap_comm_set_timeout(c, 3600);
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    bad = st != RAP_OK;
    cs = rap_comm_allreduce_host(c, &bad, 1, RAP_COMM_I64, "evaluation done");
    rap_comm_set_timeout(c, to);
    if (st != RAP_OK)
        return rap_fail(st, "%s", msg);
    RAP_TRY(cs);
    if (bad)
        return rap_fail(RAP_ERR_INTERNAL, "evaluation failed on %lld other rank(s) (their "
                        "messages say why)", (long long)bad);
    return RAP_OK;
}

/* Evaluates the model (every rank calls it with ranks; rank 0 gets the
 * result). */
rap_status train_evaluate(trainer *t, rap_eval_result *out)
{
    /* with a comm, even of one rank: the whole model (rap_model_predict of a
     * sharded model does not give the whole model's logits) */
    if (t->rk.dist)
        return evaluate_dist(t, out);
    return evaluate_model(t, rap_pipeline_model(t->pipe), out);
}

rap_status train_log_eval(trainer *t, const rap_eval_result *e, const char *event)
{
    char a[32], b[32], d[32], te[32];
    rap_progress_clear(&t->log.pg);
    if (e->rows > 0) {
        char rows[32];
        if (isfinite(t->c->teacher_auc))
            snprintf(te, sizeof te, " (teacher %.4f)", t->c->teacher_auc);
        else
            te[0] = 0;
        T_INFO(t, "eval at step %lld: AUC %.4f%s  logloss %.4f  accuracy %.4f  on %s rows",
                 (long long)t->at.step, e->auc, te, e->logloss, e->accuracy,
                 rap_fmt_count(e->rows, rows));
    }
    if (strcmp(event, "eval"))
        return RAP_OK;
    return rap_metrics_line(&t->log.mf,
                            "\"event\":\"eval\",\"step\":%lld,\"rows\":%lld,\"auc\":%s,"
                            "\"logloss\":%s,\"accuracy\":%s",
                            (long long)t->at.step, (long long)e->rows, rap_json_num(e->auc, a),
                            rap_json_num(e->logloss, b), rap_json_num(e->accuracy, d));
}

