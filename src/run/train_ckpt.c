/* train_ckpt.c -- the trainer's checkpoints (train.h, docs/CHECKPOINT.md):
 * the model, plan and position keys of this run, the save (one file, or
 * with ranks a shard per rank and rank 0's manifest), and the resume check
 * and load of --resume. */
#include "run/train_internal.h"

#include "core/core.h"
#include "dist/comm.h"
#include "run/checkpoint_meta.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This run's model and plan keys (checkpoint_meta.h). */
static rap_status run_meta(const trainer *t, rap_meta *m)
{
    rap_ckpt_plan plan = {t->c->plan_name, t->c->plan->source, t->plan_hash, t->plan_cols};
    return rap_ckpt_meta_model(m, &t->mc, &plan);
}

/* "t:row0:rows,..." of rank r's local tables (rap_ckpt_table_list's form). */
static char *rank_tables(const rap_model_shard *sh)
{
    size_t cap = 64 * (size_t)(sh->n_local + 1), at = 0;
    char *s = rap_malloc(cap, "checkpoint tables");
    if (!s)
        return NULL;
    s[0] = 0;
    for (int k = 0; k < sh->n_local; k++)
        at += (size_t)snprintf(s + at, cap - at, "%s%d:%lld:%lld", k ? "," : "", sh->table[k],
                               (long long)sh->row0[k], (long long)sh->rows[k]);
    return s;
}

/* Every rank writes SAVE.rank<r>; once all have, rank 0 writes the
 * manifest SAVE (docs/CHECKPOINT.md "Sharded checkpoints"). */
static rap_status save_sharded(trainer *t, const rap_meta *m, const char *path)
{
    rap_comm *c = t->c->comm;
    int64_t nonce = 0;
    if (t->rk.rank == 0)
        nonce = (int64_t)((uint64_t)(rap_now() * 1e6) ^ ((uint64_t)getpid() << 32));
    RAP_TRY(rap_comm_broadcast(c, &nonce, 1, RAP_COMM_I64, 0, "checkpoint id"));
    char id[64];
    snprintf(id, sizeof id, "%lld-%016llx", (long long)t->at.step, (unsigned long long)nonce);
    rap_status st = rap_hybrid_wait(rap_pipeline_hybrid(t->pipe));
    if (st == RAP_OK)
        st = rap_model_sync(rap_pipeline_model(t->pipe));
    if (st == RAP_OK)
        st = rap_ckpt_save_shard(path, t->rk.rank, t->rk.R, id, rap_pipeline_model(t->pipe),
                                 t->mc.optimizer != RAP_SGD, m);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    int64_t failed = st != RAP_OK;
    RAP_TRY(rap_comm_allreduce_host(c, &failed, 1, RAP_COMM_I64, "checkpoint shards"));
    if (st != RAP_OK)
        return rap_fail(st, "rank %d: %s", t->rk.rank, msg);
    if (failed)
        return rap_fail(RAP_ERR_IO, "%s: %lld other rank(s) could not write their shard file "
                        "(their messages say why); the manifest was not written", path,
                        (long long)failed);
    if (t->rk.rank == 0) {
        char **tables = rap_calloc(sizeof(char *) * (size_t)t->rk.R, "checkpoint tables");
        st = tables ? RAP_OK : RAP_ERR_NOMEM;
        for (int r = 0; st == RAP_OK && r < t->rk.R; r++)
            if (!(tables[r] = rank_tables(&t->pl->map.shard[r])))
                st = RAP_ERR_NOMEM;
        if (st == RAP_OK)
            st = rap_ckpt_save_manifest(path, t->rk.R, id, (const char *const *)tables, m,
                                        !strcmp(path, t->c->save) ? t->save_lock : NULL);
        for (int r = 0; tables && r < t->rk.R; r++)
            rap_free(tables[r]);
        rap_free(tables);
        snprintf(msg, sizeof msg, "%s", rap_last_error());
    }
    failed = st != RAP_OK;
    RAP_TRY(rap_comm_allreduce_host(c, &failed, 1, RAP_COMM_I64, "checkpoint manifest"));
    if (st != RAP_OK)
        return rap_fail(st, "%s", msg);
    if (failed)
        return rap_fail(RAP_ERR_IO, "%s: rank 0 could not write the manifest", path);
    return RAP_OK;
}

rap_status train_save(trainer *t, const char *path)
{
    rap_meta m = {0};
    rap_ckpt_position pos = {.step = t->at.step,
                             .epoch = t->at.epoch,
                             .rows_in_epoch = t->at.pos,
                             .data = t->data_id,
                             .eval_fraction = t->ev.holdout,
                             .samples_trained = t->at.samples_before + t->res->samples,
                             .rng_state = t->mc.seed};
    rap_status st = run_meta(t, &m);
    if (st == RAP_OK)
        st = rap_ckpt_meta_position(&m, &pos);
    if (st == RAP_OK && t->sr.has_dpos)
        st = rap_series_meta_write(&m, &t->sr.dpos);
    if (st == RAP_OK)
        st = rap_meta_set(&m, "device", "%s", t->c->device == RAP_GPU ? "gpu" : "cpu");
    if (st == RAP_OK && t->rk.dist)
        st = rap_meta_set(&m, "ranks", "%d", t->rk.R);
    if (st == RAP_OK && t->rk.dist && t->rk.R > 1)
        st = save_sharded(t, &m, path);
    else if (st == RAP_OK)
        st = rap_ckpt_save(path, rap_pipeline_model(t->pipe), t->mc.optimizer != RAP_SGD, &m,
                           !strcmp(path, t->c->save) ? t->save_lock : NULL);
    rap_meta_free(&m);
    if (st == RAP_OK) {
        t->res->saved = true;
        t->saved_step = t->at.step;
        rap_progress_clear(&t->log.pg);
        T_INFO(t, "saved checkpoint %s at step %lld", path, (long long)t->at.step);
    }
    return st;
}

rap_status train_save_periodic(trainer *t)
{
    char path[4096];
    rap_series_name(t->c->save, t->at.step, path, sizeof path);
    RAP_TRY(train_save(t, path));
    t->sr.series.last_t = rap_now();
    return t->rk.rank == 0 ? rap_series_prune(&t->sr.series) : RAP_OK;
}

/* Refuses a --save or --metrics that is one of the inputs (--save equal to
 * --resume is how a run continues: the checkpoint is read whole and closed
 * in setup, long before a save replaces it by a rename), then takes the
 * lock of --save for the whole run on rank 0 (which writes SAVE): a second
 * run with the same --save fails now, not after its training. */
rap_status train_claim_outputs(trainer *t)
{
    const rap_train_config *c = t->c;
    const char *in[] = {c->data, c->eval_data, c->resume};
    RAP_TRY(rap_out_check_inputs(c->save, in, 2));
    RAP_TRY(rap_out_check_inputs(c->metrics, in, 3));
    if (t->rk.rank == 0 && c->save && c->save[0])
        RAP_TRY(rap_out_lock_take(c->save, &t->save_lock));
    return RAP_OK;
}

/* Checks the checkpoint against this run; fills step and position. */
rap_status train_check_resume(trainer *t)
{
    rap_ckpt *ck = t->ck;
    rap_meta run = {0};
    rap_status st = run_meta(t, &run);
    if (st == RAP_OK)
        st = rap_ckpt_meta_check_model(ck, &run);
    /* allowed differences, said aloud */
    for (int k = 0; st == RAP_OK && rap_ckpt_soft_keys[k]; k++) {
        const char *a = rap_meta_get(&ck->meta, rap_ckpt_soft_keys[k]);
        const char *b = rap_meta_get(&run, rap_ckpt_soft_keys[k]);
        if (a && strcmp(a, b))
            T_INFO(t, "resume: %s was %s, continuing with %s", rap_ckpt_soft_keys[k], a, b);
    }
    rap_ckpt_notices nt;
    rap_ckpt_meta_notices(ck, &run, &nt);
    if (st == RAP_OK && nt.dtype[0])
        T_INFO(t, "resume: %s", nt.dtype);
    if (st == RAP_OK && nt.state[0])
        T_INFO(t, "resume: %s", nt.state);
    if (st == RAP_OK && nt.seed[0])
        T_WARN(t, "resume: %s", nt.seed);
    rap_meta_free(&run);
    RAP_TRY(st);
    rap_ckpt_position pos;
    RAP_TRY(rap_ckpt_meta_read_position(ck, &pos));
    t->at.step = pos.step;
    t->at.samples_before = pos.samples_trained;
    bool same_data = !strcmp(pos.data, t->data_id);
    if (same_data) {
        t->at.epoch = pos.epoch;
        t->at.pos = pos.rows_in_epoch;
        bool has;
        RAP_TRY(rap_series_meta_read(ck, t->at.pos, &t->sr.start, &has));
        if (has && t->c->reader.follow) {
            char d[1200];
            rap_position_describe(&t->sr.start, d, sizeof d);
            T_INFO(t, "resume: reading on from %s", d);
            t->sr.dpos = t->sr.start;
            t->sr.has_dpos = true;
        } else {
            t->sr.start.valid = false; /* not followed: the rows before are read and skipped */
        }
        T_INFO(t, "resume: step %lld, continuing %s at row %lld of epoch %lld",
               (long long)t->at.step, t->data_id, (long long)t->at.pos, (long long)t->at.epoch);
    } else {
        T_INFO(t, "resume: step %lld; the checkpoint was trained on %s, this run reads %s from "
                 "its first row", (long long)t->at.step, pos.data, t->data_id);
    }
    const char *sr = rap_meta_get(&ck->meta, "shard_ranks");
    int ck_ranks = sr ? atoi(sr) : 1;
    if (ck_ranks != t->rk.R)
        T_INFO(t, "resume: the checkpoint was saved by %d rank%s, this run has %d: its tables "
               "are re-sharded", ck_ranks, ck_ranks == 1 ? "" : "s", t->rk.R);
    if (pos.has_eval_fraction && same_data && pos.eval_fraction != t->ev.holdout)
        T_WARN(t, "resume: the checkpoint held out %.9g of the rows for evaluation, this run %g: "
                 "the evaluation rows and the training rows overlap",
                 pos.eval_fraction, t->ev.holdout);
    return RAP_OK;
}

rap_status train_load_weights(void *ctx, rap_model *m)
{
    trainer *t = ctx;
    rap_status st = rap_ckpt_load_model(t->ck, m, t->mc.optimizer != RAP_SGD);
    if (st != RAP_OK)
        rap_fail_context(st, "--resume");
    rap_ckpt_close(t->ck);
    t->ck = NULL;
    return st;
}
