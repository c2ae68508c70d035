/* train.c -- the training loop, evaluation and resume (train.h). */
#include "run/train.h"

#include "core/core.h"
#include "core/json.h"
#include "core/out.h"
#include "dist/comm.h"
#include "dist/hybrid.h"
#include "dist/ids.h"
#include "dist/shard.h"
#include "prep/subplan.h"
#include "run/checkpoint_meta.h"
#include "run/input.h"
#include "run/pack.h"
#include "run/progress.h"
#include "sched/fusion_file.h"
#include "sched/hash.h"
#include "sched/rank_schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_ROWS 32768 /* rows per reader batch */

bool rap_train_held_out(int64_t i, double f)
{
    if (f <= 0)
        return false;
    uint64_t h = rap_mix64((uint64_t)i ^ RAP_HOLDOUT_KEY);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < f;
}

void rap_train_defaults(rap_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->eval_fraction = 0.1;
    c->teacher_auc = NAN;
    c->reader = rap_reader_defaults();
    c->plan_name = "";
    rap_model_config_defaults(&c->model);
    c->device = RAP_CPU;
    c->mode = -1;
    c->log_interval = 5;
}

/* ------------------------------------------------------------ trainer */

typedef struct {
    const rap_train_config *c;
    rap_train_result *res;
    rap_model_config mc;
    void *stream;            /* GPU: the one stream of prep, packing and model */
    rap_fusion fus;
    rap_prep *prep;
    rap_input *input;
    rap_model *model;
    rap_rowfeed *feed;       /* training rows, every pass */
    rap_runtime *rt;         /* the pipelined steps */
    rap_mode mode;
    rap_batch eb;            /* reader batch of evaluation */
    rap_batch tb;            /* (B) rows of one step or of one evaluation batch */
    float *logits;           /* (B) host */
    rap_metrics_file mf;
    rap_out_lock *save_lock; /* rank 0: --save's, held for the whole run */
    rap_progress pg;
    rap_eval_acc acc;
    double holdout;          /* F when evaluating on held-out rows, else 0 */
    bool shard;              /* --data is a rap shard (ideal mode, no feed) */
    /* position */
    int64_t step, epoch, pos;  /* pos: rows of the input consumed in this epoch */
    int64_t step0;             /* step at the start of this run */
    double frac0;              /* epochs done at the start of this run */
    int64_t samples_before;
    const char *data_id;
    uint64_t plan_hash;
    char *plan_cols;
    double t_train;            /* seconds in steps */
    double starved_log, t_log; /* starved_s and t_train at the last log line */
    double loss_sum;
    int64_t loss_n;
    int64_t data_size;         /* bytes of a plain-file input (progress), else 0 */
    /* hybrid parallel (c->comm set) */
    bool dist;                 /* a comm was given (even with one rank) */
    int rank, R;
    rap_comm *ncomm;           /* GPU: the NCCL comm over c->comm (owned) */
    rap_shard_map map;         /* tables -> ranks */
    rap_model_shard rshard;    /* this rank's share (the model copies it) */
    rap_model_config mc_rank;  /* the model as this rank creates it */
    rap_hybrid *hyb;
    int64_t rank_samples;      /* rows this rank trained in this run */
    bool stopped;              /* the loop stopped on a stop request (every rank) */
    bool model_loss;           /* GPU: the runtime reads the loss back asynchronously */
    float *loss_dev;           /* GPU, R > 1: (1) the step's global loss, device */
    bool comm_failed;          /* the stop flag's collective failed: its error is set */
    rap_plan *rplan;           /* placement owner: this rank's columns (every dense one,
                                * the sparse ones of its tables); NULL = the plan */
    rap_fusion rfus;           /* rplan fused */
    rap_schedule *rsched;      /* rank_schedule: this rank's merged schedule ... */
    rap_fusion rsfus;          /* ... and fusion (of rplan, or of the plan with one rank) */
    int rtab[RAP_MAX_TABLES];  /* (sparse columns of rplan) their global table */
    int n_rtab;
    /* placement batch on CPU ranks (xb_*): this rank preprocesses every
     * column over its row share; each table's ids go to its holders */
    bool xb;
    bool *xb_holds;            /* (R, T) rank p holds (a part of) table t */
    int xb_tab[RAP_MAX_TABLES]; /* tables this rank holds, ascending */
    int xb_ntab;
    int64_t xb_K;              /* ids per row at most (the model's max_bag) */
    int64_t *xb_hdr;           /* (R, 1+T) each rank's share rows, then its ids per table */
    int64_t *xb_send, *xb_recv; /* the id exchange's buffers */
    int64_t *xb_cnt;           /* (4, R) send counts, displacements, receive counts, displs */
    int64_t *xb_off, *xb_ids;  /* (ntab, Bg+1) and (ntab, Bg*K): the global batch's ids of
                                * this rank's tables */
    rap_ids_xchg *xg;          /* placement batch, GPU ranks: the id exchange (NCCL) */
    rap_moves *moves;          /* the per-rank schedule's moves (rank_schedule with
                                * send/recv lines), or NULL */
    rap_train_dist dstep;      /* the hybrid step's inputs (rap_train_dist_step) */
    int64_t bytes_moved;       /* preprocessed bytes sent between ranks, all ranks */
    int64_t rank_bytes_sent;   /* ... sent by this rank */
    int64_t exit_step;         /* test hook RAP_TEST_RANK_EXIT: _exit(1) after this step */
    int64_t hang_step;         /* test hook RAP_TEST_RANK_HANG: stop answering after it */
} trainer;

/* Messages of the run: from rank 0 only (every rank would say the same). */
#define T_INFO(t, ...) do { if ((t)->rank == 0) rap_info(__VA_ARGS__); } while (0)
#define T_WARN(t, ...) do { if ((t)->rank == 0) rap_warn(__VA_ARGS__); } while (0)

static bool stop_requested(const trainer *t) { return t->c->stop && *t->c->stop; }

/* Runs the plan on tb and points mb at the result. */
static rap_status prepare(trainer *t, rap_model_batch *mb)
{
    RAP_TRY(rap_prep_load(t->prep, &t->tb));
    RAP_TRY(rap_prep_run(t->prep));
    return rap_input_make(t->input, t->prep, mb);
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
    rap_eval_reset(&t->acc);
    rap_reader *er;
    RAP_TRY(rap_reader_open(&rc, &er));
    rap_status st = RAP_OK;
    int64_t limit = c->eval_rows > 0 ? c->eval_rows : INT64_MAX;
    bool done = false;
    while (st == RAP_OK && !done) {
        st = rap_reader_next(er, &t->eb);
        if (st != RAP_OK)
            break;
        bool end = t->eb.rows == 0;
        for (int64_t r = 0; r < t->eb.rows && !done; r++) {
            int64_t idx = t->eb.first_row + r;
            if (frac > 0 && !rap_train_held_out(idx, frac))
                continue;
            rap_batch_append(&t->tb, &t->eb, r, 1);
            done = t->acc.n + t->tb.rows >= limit;
            if (t->tb.rows == t->tb.cap || done) {
                rap_model_batch mb;
                st = prepare(t, &mb);
                if (st == RAP_OK)
                    st = rap_model_predict(m, &mb, t->logits);
                if (st == RAP_OK)
                    st = rap_eval_add(&t->acc, t->logits, t->tb.label, t->tb.rows);
                t->tb.rows = 0;
                if (st != RAP_OK)
                    break;
            }
        }
        if (end && st == RAP_OK && t->tb.rows > 0) {
            rap_model_batch mb;
            st = prepare(t, &mb);
            if (st == RAP_OK)
                st = rap_model_predict(m, &mb, t->logits);
            if (st == RAP_OK)
                st = rap_eval_add(&t->acc, t->logits, t->tb.label, t->tb.rows);
            t->tb.rows = 0;
        }
        if (end || stop_requested(t))
            done = true;
    }
    rap_reader_stats rs;
    rap_reader_get_stats(er, &rs);
    rap_reader_close(er);
    t->tb.rows = 0;
    RAP_TRY(st);
    *out = rap_eval_compute(&t->acc);
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
    const rap_shard_map *map = &t->map;
    int D = t->mc.emb_dim;
    memset(out, 0, sizeof *out);
    out->auc = out->logloss = out->accuracy = NAN;
    RAP_TRY(rap_hybrid_wait(t->hyb));
    RAP_TRY(rap_model_sync(t->model));
    rap_model *whole = NULL;
    rap_status st = RAP_OK;
    if (t->rank == 0)
        st = rap_model_create(&t->mc, t->c->device, &whole);
    int64_t bad = st != RAP_OK; /* everyone learns whether rank 0 can evaluate */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    RAP_TRY(rap_comm_allreduce_host(c, &bad, 1, RAP_COMM_I64, "evaluation model"));
    if (bad) {
        rap_model_free(whole);
        return t->rank == 0 ? rap_fail(st, "evaluation: %s", msg)
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
            if (pt->rank == t->rank && st == RAP_OK)
                st = rap_model_get(t->model, pt->local, dst);
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
    int nl = rap_model_n_tensors(t->model), nw = whole ? rap_model_n_tensors(whole) : 0;
    int tl = t->rshard.n_local;
    for (int i = tl; st == RAP_OK && whole && i < nl; i++) {
        const rap_tensor_info *ti = rap_model_tensor(t->model, i);
        float *buf = rap_malloc(sizeof(float) * (size_t)(ti->rows * ti->cols), "evaluation");
        int j = t->mc.n_tables + (i - tl);
        if (!buf)
            st = RAP_ERR_NOMEM;
        else if (j >= nw)
            st = rap_fail(RAP_ERR_INTERNAL, "evaluation: tensor %d of the rank's model has no "
                          "counterpart", i);
        else
            st = rap_model_get(t->model, i, buf);
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
    if (t->rank != 0 && to < 3600)
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
static rap_status evaluate(trainer *t, rap_eval_result *out)
{
    /* with a comm, even of one rank: the whole model (rap_model_predict of a
     * sharded model does not give the whole model's logits) */
    if (t->dist)
        return evaluate_dist(t, out);
    return evaluate_model(t, t->model, out);
}

static rap_status log_eval(trainer *t, const rap_eval_result *e, const char *event)
{
    char a[32], b[32], d[32], te[32];
    rap_progress_clear(&t->pg);
    if (e->rows > 0) {
        char rows[32];
        if (isfinite(t->c->teacher_auc))
            snprintf(te, sizeof te, " (teacher %.4f)", t->c->teacher_auc);
        else
            te[0] = 0;
        T_INFO(t, "eval at step %lld: AUC %.4f%s  logloss %.4f  accuracy %.4f  on %s rows",
                 (long long)t->step, e->auc, te, e->logloss, e->accuracy,
                 rap_fmt_count(e->rows, rows));
    }
    if (strcmp(event, "eval"))
        return RAP_OK;
    return rap_metrics_line(&t->mf,
                            "\"event\":\"eval\",\"step\":%lld,\"rows\":%lld,\"auc\":%s,"
                            "\"logloss\":%s,\"accuracy\":%s",
                            (long long)t->step, (long long)e->rows, rap_json_num(e->auc, a),
                            rap_json_num(e->logloss, b), rap_json_num(e->accuracy, d));
}

/* ------------------------------------------------------------ checkpoints */

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
static rap_status save_sharded(trainer *t, const rap_meta *m)
{
    rap_comm *c = t->c->comm;
    const char *path = t->c->save;
    int64_t nonce = 0;
    if (t->rank == 0)
        nonce = (int64_t)((uint64_t)(rap_now() * 1e6) ^ ((uint64_t)getpid() << 32));
    RAP_TRY(rap_comm_broadcast(c, &nonce, 1, RAP_COMM_I64, 0, "checkpoint id"));
    char id[64];
    snprintf(id, sizeof id, "%lld-%016llx", (long long)t->step, (unsigned long long)nonce);
    rap_status st = rap_hybrid_wait(t->hyb);
    if (st == RAP_OK)
        st = rap_model_sync(t->model);
    if (st == RAP_OK)
        st = rap_ckpt_save_shard(path, t->rank, t->R, id, t->model, t->mc.optimizer != RAP_SGD,
                                 m);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    int64_t failed = st != RAP_OK;
    RAP_TRY(rap_comm_allreduce_host(c, &failed, 1, RAP_COMM_I64, "checkpoint shards"));
    if (st != RAP_OK)
        return rap_fail(st, "rank %d: %s", t->rank, msg);
    if (failed)
        return rap_fail(RAP_ERR_IO, "%s: %lld other rank(s) could not write their shard file "
                        "(their messages say why); the manifest was not written", path,
                        (long long)failed);
    if (t->rank == 0) {
        char **tables = rap_calloc(sizeof(char *) * (size_t)t->R, "checkpoint tables");
        st = tables ? RAP_OK : RAP_ERR_NOMEM;
        for (int r = 0; st == RAP_OK && r < t->R; r++)
            if (!(tables[r] = rank_tables(&t->map.shard[r])))
                st = RAP_ERR_NOMEM;
        if (st == RAP_OK)
            st = rap_ckpt_save_manifest(path, t->R, id, (const char *const *)tables, m,
                                    t->save_lock);
        for (int r = 0; tables && r < t->R; r++)
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

static rap_status save(trainer *t)
{
    rap_meta m = {0};
    rap_ckpt_position pos = {.step = t->step,
                             .epoch = t->epoch,
                             .rows_in_epoch = t->pos,
                             .data = t->data_id,
                             .eval_fraction = t->holdout,
                             .samples_trained = t->samples_before + t->res->samples,
                             .rng_state = t->mc.seed};
    rap_status st = run_meta(t, &m);
    if (st == RAP_OK)
        st = rap_ckpt_meta_position(&m, &pos);
    if (st == RAP_OK)
        st = rap_meta_set(&m, "device", "%s", t->c->device == RAP_GPU ? "gpu" : "cpu");
    if (st == RAP_OK && t->dist)
        st = rap_meta_set(&m, "ranks", "%d", t->R);
    if (st == RAP_OK && t->dist && t->R > 1)
        st = save_sharded(t, &m);
    else if (st == RAP_OK)
        st = rap_ckpt_save(t->c->save, t->model, t->mc.optimizer != RAP_SGD, &m,
                           t->save_lock);
    rap_meta_free(&m);
    if (st == RAP_OK) {
        t->res->saved = true;
        rap_progress_clear(&t->pg);
        T_INFO(t, "saved checkpoint %s at step %lld", t->c->save, (long long)t->step);
    }
    return st;
}

/* Refuses a --save or --metrics that is one of the inputs (--save equal to
 * --resume is how a run continues: the checkpoint is read whole and closed
 * in setup, long before a save replaces it by a rename), then takes the
 * lock of --save for the whole run on rank 0 (which writes SAVE): a second
 * run with the same --save fails now, not after its training. */
static rap_status claim_outputs(trainer *t)
{
    const rap_train_config *c = t->c;
    const char *in[] = {c->data, c->eval_data, c->resume};
    RAP_TRY(rap_out_check_inputs(c->save, in, 2));
    RAP_TRY(rap_out_check_inputs(c->metrics, in, 3));
    if (t->rank == 0 && c->save && c->save[0])
        RAP_TRY(rap_out_lock_take(c->save, &t->save_lock));
    return RAP_OK;
}

/* Checks the checkpoint against this run; fills step and position. */
static rap_status check_resume(trainer *t, rap_ckpt *ck)
{
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
    t->step = pos.step;
    t->samples_before = pos.samples_trained;
    bool same_data = !strcmp(pos.data, t->data_id);
    if (same_data) {
        t->epoch = pos.epoch;
        t->pos = pos.rows_in_epoch;
        T_INFO(t, "resume: step %lld, continuing %s at row %lld of epoch %lld", (long long)t->step,
                 t->data_id, (long long)t->pos, (long long)t->epoch);
    } else {
        T_INFO(t, "resume: step %lld; the checkpoint was trained on %s, this run reads %s from "
                 "its first row", (long long)t->step, pos.data, t->data_id);
    }
    const char *sr = rap_meta_get(&ck->meta, "shard_ranks");
    int ck_ranks = sr ? atoi(sr) : 1;
    if (ck_ranks != t->R)
        T_INFO(t, "resume: the checkpoint was saved by %d rank%s, this run has %d: its tables "
               "are re-sharded", ck_ranks, ck_ranks == 1 ? "" : "s", t->R);
    if (pos.has_eval_fraction && same_data && pos.eval_fraction != t->holdout)
        T_WARN(t, "resume: the checkpoint held out %.9g of the rows for evaluation, this run %g: "
                 "the evaluation rows and the training rows overlap",
                 pos.eval_fraction, t->holdout);
    return RAP_OK;
}

/* ------------------------------------------------------------ run */

static double fraction_done(trainer *t)
{
    const rap_train_config *c = t->c;
    double f = -1;
    if (c->steps > 0 && c->steps > t->step0)
        f = (double)(t->step - t->step0) / (double)(c->steps - t->step0);
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    double in_epoch = -1;
    if (c->data_rows > 0)
        in_epoch = (double)t->pos / (double)c->data_rows;
    else if (t->data_size > 0 && t->feed) {
        rap_rowfeed_stats st;
        rap_rowfeed_get_stats(t->feed, &st);
        in_epoch = (double)(st.reader.bytes_read - st.passes_done * t->data_size) /
                   (double)t->data_size;
    }
    if (epochs > 0 && in_epoch >= 0 && epochs > t->frac0) {
        double g = ((double)t->epoch + (in_epoch < 1 ? in_epoch : 1) - t->frac0) /
                   ((double)epochs - t->frac0);
        f = g > f ? g : f;
    }
    return f > 1 ? 1 : f;
}

static rap_status take_losses(trainer *t, bool wait);

/* A step line: the mean loss of exactly the steps since the last line. On
 * the GPU the losses come back asynchronously, so the line waits for the
 * queued steps' losses first (one drain per line: with --log-every 1 every
 * step is synchronous, the default time-based lines cost one drain a
 * --log-interval). */
static rap_status log_step(trainer *t, bool force)
{
    if (t->rt)
        RAP_TRY(take_losses(t, true));
    double loss = t->loss_n ? t->loss_sum / (double)t->loss_n : NAN;
    if (t->loss_n)
        t->res->loss = loss;
    double f = fraction_done(t);
    rap_progress_update(&t->pg, t->res->samples, t->step, loss, f, true);
    (void)force;
    char a[32], b[32];
    double rate = t->t_train > 0 ? (double)t->res->samples / t->t_train : 0;
    t->loss_sum = 0;
    t->loss_n = 0;
    /* starvation since the last line: the trainer waited for rows */
    double starved = 0;
    if (t->rt) {
        rap_runtime_stats rs;
        rap_runtime_get_stats(t->rt, &rs);
        starved = rs.starved_s - t->starved_log;
        double period = t->t_train - t->t_log;
        if (period > 0 && starved > 0.5 * period) {
            rap_progress_clear(&t->pg);
            T_INFO(t, "data-bound: waited %.1f s of the last %.1f s for training rows (step %lld)",
                     starved, period, (long long)t->step);
        }
        t->starved_log = rs.starved_s;
        t->t_log = t->t_train;
    }
    return rap_metrics_line(&t->mf,
                            "\"event\":\"step\",\"step\":%lld,\"epoch\":%lld,\"samples\":%lld,"
                            "\"loss\":%s,\"samples_per_s\":%s,\"elapsed_s\":%.3f,\"starved_s\":%.3f",
                            (long long)t->step, (long long)t->epoch,
                            (long long)(t->samples_before + t->res->samples),
                            rap_json_num(loss, a), rap_json_num(rate, b), t->t_train, starved);
}

static rap_status rank_plan(trainer *t, const uint64_t *extra);
static rap_status xb_setup(trainer *t);
static rap_status xg_setup(trainer *t);

static rap_status setup(trainer *t)
{
    const rap_train_config *c = t->c;
    t->R = 1;
    t->res->ranks = 1;
    if (c->comm) {
        t->dist = true;
        t->rank = rap_comm_rank(c->comm);
        t->R = rap_comm_size(c->comm);
        t->res->rank = t->rank;
        t->res->ranks = t->R;
        const char *e = getenv("RAP_TEST_RANK_EXIT"), *h = getenv("RAP_TEST_RANK_HANG");
        int r;
        long long k;
        if (e && sscanf(e, "%d:%lld", &r, &k) == 2 && r == t->rank)
            t->exit_step = k;
        if (h && sscanf(h, "%d:%lld", &r, &k) == 2 && r == t->rank)
            t->hang_step = k;
        if (c->device == RAP_GPU && c->gpu >= 0)
            RAP_TRY(rap_rt_set_device(c->gpu));
    }
    if (!c->plan)
        return rap_fail(RAP_ERR_ARG, "train: no plan");
    if (!c->data || !c->data[0])
        return rap_fail(RAP_ERR_ARG, "train: no training input (--data)");
    t->mc = c->model;
    RAP_TRY(rap_input_shape(c->plan, &t->mc.n_dense, &t->mc.n_tables, t->mc.table_rows));
    t->mc.max_bag = 1;
    for (int i = 0; i < c->plan->n_cols; i++) {
        const rap_node *n = &c->plan->nodes[c->plan->cols[i].node];
        if (n->kind == RAP_SPARSE && n->ids_per_row > t->mc.max_bag)
            t->mc.max_bag = n->ids_per_row;
    }
    RAP_TRY(rap_model_config_check(&t->mc));
    if (c->device != RAP_GPU && t->mc.precision == RAP_BF16)
        return rap_fail(RAP_ERR_ARG, "--precision bf16 needs --device gpu (the CPU model "
                        "computes in float32)");
    if (c->device != RAP_GPU && c->cuda_graph)
        return rap_fail(RAP_ERR_ARG, "--cuda-graph needs --device gpu");
    if (t->dist && t->R > 1 && !strcmp(c->data, "-"))
        return rap_fail(RAP_ERR_ARG, "--data -: with %d ranks every rank reads the input itself, "
                        "and stdin reaches one of them: give a file", t->R);
    if (t->dist && t->R > 1 && c->reader.follow)
        return rap_fail(RAP_ERR_ARG, "--follow: with %d ranks every rank reads the input itself "
                        "and they could see a growing file end at different rows: not supported",
                        t->R);
    if (t->dist && c->cuda_graph)
        return rap_fail(RAP_ERR_ARG, "--cuda-graph: the hybrid-parallel step (ranks, --gpus) "
                        "exchanges data between ranks in every step and is not captured");
    RAP_TRY(claim_outputs(t));
    t->data_id = c->data_id && c->data_id[0] ? c->data_id : c->data;
    t->holdout = c->eval_data && c->eval_data[0] ? 0 : c->eval_fraction;
    t->plan_hash = rap_plan_columns_hash(c->plan, &t->plan_cols);
    if (!t->plan_cols)
        return RAP_ERR_NOMEM;
    size_t dl = strlen(c->data);
    struct stat sb;
    if (strcmp(c->data, "-") && (dl < 3 || strcmp(c->data + dl - 3, ".gz")) &&
        stat(c->data, &sb) == 0 && S_ISREG(sb.st_mode))
        t->data_size = (int64_t)sb.st_size;

    t->mode = c->mode >= 0 ? (rap_mode)c->mode
                           : (c->device == RAP_GPU && !c->cuda_graph ? RAP_MODE_RAP
                                                                     : RAP_MODE_SEQUENTIAL);
    t->shard = rap_runtime_is_shard(c->data);
    if (t->shard) { /* preprocessed batches: ideal mode only (auto picks it) */
        if (c->mode < 0)
            t->mode = RAP_MODE_IDEAL;
        if (t->mode != RAP_MODE_IDEAL)
            return rap_fail(RAP_ERR_ARG, "--data %s: " RAP_SHARD_NEEDS_IDEAL " (not --mode %s)",
                            c->data, rap_mode_name(t->mode));
        if (c->eval_data && c->eval_data[0] && rap_runtime_is_shard(c->eval_data))
            return rap_fail(RAP_ERR_ARG, "--eval-data %s is a rap shard: evaluation reads raw "
                            "rows (give the TSV, or --eval-fraction 0)", c->eval_data);
        if (t->holdout > 0)
            return rap_fail(RAP_ERR_ARG, "--data %s is a rap shard: no rows can be held out of "
                            "its preprocessed batches for evaluation: give --eval-data (a raw "
                            "TSV) or --eval-fraction 0", c->data);
    }
    t->res->mode = t->mode;
    if (t->dist && t->mode == RAP_MODE_MPS)
        return rap_fail(RAP_ERR_ARG, "--mode mps: not with ranks (--gpus, mpirun): its "
                        "preprocessing server serves one trainer");
    if (!t->shard) {
        char why[256];
        if (!rap_mode_available(t->mode, c->device, why, sizeof why))
            return rap_fail(RAP_ERR_ARG, "--mode %s: %s", rap_mode_name(t->mode), why);
    }
    if (c->device == RAP_GPU) {
        RAP_TRY(rap_runtime_train_stream_create(&t->stream));
        t->mc.stream = t->stream;
    }
    if (c->fusion_file && c->fusion_file[0])
        RAP_TRY(rap_fusion_load(c->plan, c->fusion_file, &t->fus));
    else
        RAP_TRY(rap_fuse(c->plan, (rap_fuse_kind)c->fusion, &t->fus));
    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = c->device;
    pc.max_rows = t->mc.batch;
    pc.threads = c->reader.threads;
    pc.stream = t->stream;
    RAP_TRY(rap_prep_create(c->plan, &t->fus, &pc, &t->prep));
    RAP_TRY(rap_input_create(c->plan, c->device, t->mc.batch, t->stream, &t->input));
    RAP_TRY(rap_input_bind(t->input, t->prep, NULL));

    rap_ckpt *ck = NULL;
    if (c->resume && c->resume[0]) {
        RAP_TRY(rap_ckpt_open(c->resume, &ck));
        rap_status st = check_resume(t, ck);
        if (st != RAP_OK) {
            rap_ckpt_close(ck);
            return st;
        }
    }
    const rap_model_config *mcfg = &t->mc;
    if (t->dist) { /* this rank's tables and rows (docs/DIST.md) */
        rap_status ps = rap_shard_plan(t->mc.table_rows, t->mc.n_tables, t->mc.emb_dim, t->R, 0,
                                       NULL, &t->map);
        if (ps == RAP_OK)
            ps = rap_hybrid_model_config(&t->mc, &t->map, t->rank, t->mc.batch, &t->rshard,
                                         &t->mc_rank);
        if (ps != RAP_OK) {
            rap_ckpt_close(ck);
            return ps;
        }
        mcfg = &t->mc_rank;
        if (t->rank == 0) {
            char desc[4096];
            rap_shard_map_describe(&t->map, desc, sizeof desc);
            rap_info("hybrid parallel: %d rank%s over %s, global batch %lld, placement %s; "
                     "tables:\n%s", t->R, t->R == 1 ? "" : "s",
                     rap_comm_kind_name(rap_comm_kind_of(c->comm)), (long long)t->mc.batch,
                     rap_placement_name(c->placement), desc);
        }
    }
    rap_status st = rap_model_create(mcfg, c->device, &t->model);
    if (st != RAP_OK) {
        int64_t tab = 0;
        for (int i = 0; i < t->mc.n_tables; i++)
            tab += t->mc.table_rows[i];
        rap_fail_context(st, "cannot create the model (plan %s: %d tables, %lld rows of dim %d)",
                         c->plan->source, t->mc.n_tables, (long long)tab, t->mc.emb_dim);
    }
    if (st == RAP_OK && ck) {
        st = rap_ckpt_load_model(ck, t->model, t->mc.optimizer != RAP_SGD);
        if (st != RAP_OK)
            rap_fail_context(st, "--resume");
    }
    rap_ckpt_close(ck);
    RAP_TRY(st);
    if (t->dist) {
        rap_comm *hc = c->comm;
        if (c->device == RAP_GPU) {
            RAP_TRY(rap_comm_nccl_create(c->comm, c->gpu >= 0 ? c->gpu : 0, t->stream, &t->ncomm));
            hc = t->ncomm;
        }
        RAP_TRY(rap_hybrid_create(t->model, &t->map, hc, &t->hyb));
        /* placement owner (and search, which starts there): only this
         * rank's columns, and with the planner's per-rank manifest those it
         * computes for others; batch: every column (see docs/TRAINING.md) */
        rap_rank_manifest *man = NULL;
        if (c->rank_schedule && c->rank_schedule[0]) { /* the planner's, per rank */
            if (c->placement == RAP_PLACE_BATCH && t->R > 1)
                return rap_fail(RAP_ERR_ARG, "--schedule %s (per-rank manifests) runs placement "
                                "owner or search; --placement batch has no per-rank plan",
                                c->rank_schedule);
            RAP_TRY(rap_rank_manifest_load(c->rank_schedule, c->plan, t->rank, t->R, t->mc.batch,
                                           &man));
        }
        rap_status ms = RAP_OK;
        if (t->R > 1 && c->placement != RAP_PLACE_BATCH && !t->shard && !c->schedule &&
            !(c->fusion_file && c->fusion_file[0]))
            ms = rank_plan(t, man ? man->col_shares : NULL);
        if (ms == RAP_OK && man)
            ms = rap_train_prep_from_manifest(man, c->plan, t->rplan, &t->map, t->rank,
                                              t->mc.max_bag, t->ncomm ? t->ncomm : c->comm,
                                              c->device, &t->rsfus, &t->rsched, &t->moves);
        rap_rank_manifest_free(man);
        RAP_TRY(ms);
        /* placement batch: each rank its row share, ids exchanged (CPU
         * ranks in sequential or cpu mode; other CPU modes: the whole batch) */
        if (t->R > 1 && c->placement == RAP_PLACE_BATCH && !t->shard && c->device == RAP_CPU &&
            (t->mode == RAP_MODE_SEQUENTIAL || t->mode == RAP_MODE_CPU))
            RAP_TRY(xb_setup(t));
        /* ... on GPU ranks (every mode but mps): the same through NCCL on the
         * model's stream, fixed-size blocks (dist/ids.h) */
        if (t->R > 1 && c->placement == RAP_PLACE_BATCH && !t->shard && c->device == RAP_GPU &&
            t->mode != RAP_MODE_MPS)
            RAP_TRY(xg_setup(t));
        if (t->rank == 0 && t->R > 1)
            rap_info("placement %s: each rank preprocesses %s",
                     rap_placement_name(c->placement),
                     t->rplan ? (t->rsched && t->mode == RAP_MODE_RAP
                                     ? "the sparse columns of its own tables over the whole "
                                       "global batch and every dense column over its own rows "
                                       "(the planner's per-rank schedule)"
                                     : "every dense column and the sparse columns of its own "
                                       "tables, over the whole global batch")
                     : t->xb || t->xg ? "every column over its own rows of the global batch, then "
                                "sends each table's ids to the table's holders"
                              : "every column of the whole global batch");
    }

    if (c->rank_schedule && c->rank_schedule[0] && !t->dist)
        return rap_fail(RAP_ERR_ARG, "--schedule %s: %s.rank<r> are the placement planner's "
                        "per-rank manifests (rap plan --gpus R): train with --gpus R or under "
                        "mpirun -np R, or give one schedule file", c->rank_schedule,
                        c->rank_schedule);
    RAP_TRY(rap_batch_create(&t->eb, c->plan->schema, READ_ROWS, false));
    RAP_TRY(rap_batch_create(&t->tb, c->plan->schema, t->mc.batch, c->device == RAP_GPU));
    t->logits = rap_malloc(sizeof(float) * (size_t)t->mc.batch, "logits");
    if (!t->logits)
        return RAP_ERR_NOMEM;
    RAP_TRY(rap_metrics_open(&t->mf, t->rank == 0 ? c->metrics : NULL));

    int64_t tab = 0;
    for (int i = 0; i < t->mc.n_tables; i++)
        tab += t->mc.table_rows[i];
    char bot[128], top[128];
    rap_ckpt_meta_widths(t->mc.bot, t->mc.n_bot, bot, sizeof bot);
    rap_ckpt_meta_widths(t->mc.top, t->mc.n_top, top, sizeof top);
    T_INFO(t, "model: %d dense inputs, %d %s tables (%lld rows) of dim %d, bottom MLP %s, top MLP "
             "%s, %s lr %g, batch %lld, on the %s (%.2f GB), mode %s",
             t->mc.n_dense, t->mc.n_tables, rap_emb_dtype_name(t->mc.emb_dtype), (long long)tab,
             t->mc.emb_dim, bot, top, rap_optimizer_name(t->mc.optimizer), (double)t->mc.lr,
             (long long)t->mc.batch,
             c->device == RAP_GPU ? "GPU" : "CPU",
             (double)rap_model_bytes(&t->mc, c->device) / 1e9, rap_mode_name(t->mode));
    return RAP_OK;
}

static rap_status open_feed(trainer *t, int64_t passes);

static rap_status rank_plan(trainer *t, const uint64_t *extra)
{
    return rap_subplan_rank_with(t->c->plan, t->rshard.table, t->rshard.n_local, extra,
                                 t->c->fusion == RAP_FUSE_NONE, &t->rplan, &t->rfus, t->rtab,
                                 &t->n_rtab);
}

static void rank_plan_free(trainer *t)
{
    rap_schedule_free(t->rsched);
    t->rsched = NULL;
    rap_fusion_free(&t->rsfus);
    rap_subplan_rank_free(t->rplan, &t->rfus);
    t->rplan = NULL;
}

/* The whole batch's view for the hybrid step of a rank part's batch mb:
 * its sparse column k is global table rtab[k]. */
void rap_train_rank_batch(const rap_model_batch *mb, const int *rtab, int n_rtab,
                          rap_model_batch *g)
{
    memset(g, 0, sizeof *g);
    g->rows = mb->rows;
    g->dense = mb->dense;
    g->label = mb->label;
    for (int k = 0; k < n_rtab; k++) {
        g->off[rtab[k]] = mb->off[k];
        g->ids[rtab[k]] = mb->ids[k];
    }
}

/* ------------------------------------------------------------ the planner's moves */

/* A hash of the units of list l with peer `peer`, in (col, share) order
 * (order-free: the sum of each unit's mix). */
static uint64_t units_hash(const rap_rank_move *l, int n, int peer)
{
    uint64_t h = 0;
    for (int i = 0; i < n; i++)
        if (l[i].peer == peer)
            h += rap_mix64(((uint64_t)(uint32_t)l[i].col << 32 | (uint32_t)l[i].share) + 1);
    return h;
}

/* Whether every rank's manifest agrees with m (a collective over the host
 * comm c): the units rank s sends this rank are the ones m receives from
 * s. RAP_ERR_PLAN naming m and the rank otherwise (manifests of two
 * plannings would scramble the exchange over MPI or NCCL). */
static rap_status moves_agree(rap_comm *c, const rap_rank_manifest *m)
{
    int R = rap_comm_size(c), me = rap_comm_rank(c);
    uint64_t *all = rap_malloc(sizeof(uint64_t) * (size_t)(R * R + R), "moves check"),
             *mine = all ? all + R * R : NULL;
    if (!all)
        return RAP_ERR_NOMEM;
    for (int d = 0; d < R; d++) /* what this rank sends to d */
        mine[d] = units_hash(m->send, m->n_send, d);
    rap_status st = rap_comm_allgather(c, mine, sizeof(uint64_t) * (size_t)R, all,
                                       "per-rank manifests");
    for (int s = 0; st == RAP_OK && s < R; s++)
        if (s != me && all[s * R + me] != units_hash(m->recv, m->n_recv, s))
            st = rap_fail(RAP_ERR_PLAN, "%s: the units this rank receives from rank %d are not "
                          "the ones rank %d's manifest sends it: manifests of different "
                          "plannings (plan once with rap plan --gpus %d --out PREFIX)", m->path,
                          s, s, R);
    rap_free(all);
    return st;
}

/* m's units as the moves module's: a dense column at its offset in the
 * packed dense (columns side by side in frame order), a sparse one at its
 * table (the sparse columns in frame order). */
static void to_moves(const rap_plan *p, const rap_rank_move *in, int n, const int *doff,
                     const int *tab, rap_move *out)
{
    for (int i = 0; i < n; i++) {
        const rap_node *nd = &p->nodes[p->cols[in[i].col].node];
        bool sparse = nd->kind == RAP_SPARSE;
        out[i] = (rap_move){sparse ? RAP_MOVE_SPARSE : RAP_MOVE_DENSE,
                            sparse ? tab[in[i].col] : doff[in[i].col], sparse ? 0 : nd->width,
                            in[i].share, in[i].peer};
    }
}

rap_status rap_train_prep_from_manifest(const rap_rank_manifest *m, const rap_plan *p,
                                        const rap_plan *rp, const rap_shard_map *map, int rank,
                                        int L, rap_comm *xc, rap_device dev, rap_fusion *sfus,
                                        rap_schedule **sched, rap_moves **moves)
{
    *moves = NULL;
    *sched = NULL;
    int C = p->n_cols, R = m->R, T = 0, ND = 0;
    int *doff = rap_malloc(sizeof(int) * (size_t)(2 * C + 1), "moves"), *tab = NULL;
    bool *holds = rap_calloc(sizeof(bool) * (size_t)(R * RAP_MAX_TABLES + 1), "moves");
    uint64_t local[RAP_MAX_TABLES] = {0};
    rap_move *send = rap_malloc(sizeof(rap_move) * (size_t)(m->n_send + 1), "moves");
    rap_move *recv = rap_malloc(sizeof(rap_move) * (size_t)(m->n_recv + 1), "moves");
    rap_status st = doff && holds && send && recv ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK) {
        tab = doff + C;
        rap_shard_holds(map, holds);
    }
    const bool *mine = holds ? holds + rank * map->n_tables : NULL;
    /* every unit this rank consumes: computed here or received */
    for (int c = 0; st == RAP_OK && c < C; c++) {
        const rap_node *nd = &p->nodes[p->cols[c].node];
        bool sparse = nd->kind == RAP_SPARSE;
        doff[c] = sparse ? -1 : ND;
        tab[c] = sparse ? T : -1;
        /* K == R: share k is rank k's rows; finer shares (no moves, whole
         * parts only): the rank needs every share of what it trains on */
        uint64_t all = m->K >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << m->K) - 1), need = 0,
                 got = m->col_shares[c];
        if (sparse && mine[T])
            need = all;
        if (!sparse)
            need = m->K == R ? (uint64_t)1 << rank : all;
        for (int i = 0; i < m->n_recv; i++)
            if (m->recv[i].col == c)
                got |= (uint64_t)1 << m->recv[i].share;
        if ((need & got) != need) {
            int k = 0;
            while (!((need & ~got) >> k & 1))
                k++;
            st = rap_fail(RAP_ERR_PLAN, "%s: column %s, share %d of %d, which this rank trains "
                          "on, is neither computed by its parts nor received (a manifest of "
                          "another sharding?)", m->path, p->cols[c].name, k, m->K);
        }
        if (sparse) {
            if (T < RAP_MAX_TABLES)
                local[T] = mine[T] ? m->col_shares[c] : 0;
            T++;
        } else {
            ND += nd->width;
        }
    }
    if (st == RAP_OK)
        st = rap_rank_schedule_make(m, p, rp ? rp : p, sfus, sched);
    if (st == RAP_OK) /* a collective: every rank's manifest against the others' */
        st = moves_agree(rap_comm_host(xc), m);
    if (st == RAP_OK && (m->n_send || m->n_recv)) {
        to_moves(p, m->send, m->n_send, doff, tab, send);
        to_moves(p, m->recv, m->n_recv, doff, tab, recv);
        rap_moves_config mc = {m->K, T, ND, m->Bg, L > 0 ? L : 1, send, m->n_send, recv,
                               m->n_recv, local, mine};
        st = rap_moves_create(xc, dev, &mc, moves);
        if (st != RAP_OK)
            rap_fail_context(st, "%s", m->path);
    }
    rap_free(doff);
    rap_free(holds);
    rap_free(send);
    rap_free(recv);
    if (st != RAP_OK) {
        rap_schedule_free(*sched);
        *sched = NULL;
        rap_fusion_free(sfus);
    }
    return st;
}

/* ------------------------------------------------------------ placement batch */

/* Buffers of the id exchange, sized for the largest share
 * (ceil(Bg / R) rows) and K ids a row. */
static rap_status xb_setup(trainer *t)
{
    int R = t->R, T = t->mc.n_tables;
    int64_t Bg = t->mc.batch, sm = (Bg + R - 1) / R;
    t->xb_K = t->mc.max_bag > 0 ? t->mc.max_bag : 1;
    t->xb_holds = rap_calloc(sizeof(bool) * (size_t)(R * T), "id exchange");
    if (!t->xb_holds)
        return RAP_ERR_NOMEM;
    int64_t pairs = 0; /* (rank, table held) */
    rap_shard_holds(&t->map, t->xb_holds);
    t->xb_ntab = 0;
    for (int tb = 0; tb < T; tb++) {
        for (int r = 0; r < R; r++)
            pairs += t->xb_holds[r * T + tb];
        if (t->xb_holds[t->rank * T + tb])
            t->xb_tab[t->xb_ntab++] = tb;
    }
    int64_t per = sm * (1 + t->xb_K); /* a share's offsets and ids of one table */
    int nt = t->xb_ntab > 0 ? t->xb_ntab : 1;
    t->xb_hdr = rap_malloc(sizeof(int64_t) * (size_t)((R + 1) * (1 + T)), "id exchange");
    t->xb_cnt = rap_malloc(sizeof(int64_t) * (size_t)(4 * R), "id exchange");
    t->xb_send = rap_malloc(sizeof(int64_t) * (size_t)(pairs * per + 1), "id exchange (send)");
    t->xb_recv = rap_malloc(sizeof(int64_t) * (size_t)(R * nt * per), "id exchange (receive)");
    t->xb_off = rap_malloc(sizeof(int64_t) * (size_t)(nt * (Bg + 1)), "global offsets");
    t->xb_ids = rap_malloc(sizeof(int64_t) * (size_t)(nt * Bg * t->xb_K), "global ids");
    if (!t->xb_hdr || !t->xb_cnt || !t->xb_send || !t->xb_recv || !t->xb_off || !t->xb_ids)
        return RAP_ERR_NOMEM;
    t->xb = true;
    return RAP_OK;
}

static void xb_free(trainer *t)
{
    rap_free(t->xb_holds);
    rap_free(t->xb_hdr);
    rap_free(t->xb_cnt);
    rap_free(t->xb_send);
    rap_free(t->xb_recv);
    rap_free(t->xb_off);
    rap_free(t->xb_ids);
    t->xb_holds = NULL;
    t->xb_hdr = t->xb_cnt = t->xb_send = t->xb_recv = t->xb_off = t->xb_ids = NULL;
    t->xb = false;
}

/* Placement batch on GPU ranks: the id exchange of dist/ids.h over the
 * NCCL comm (holders of each table as xb_setup). */
static rap_status xg_setup(trainer *t)
{
    int R = t->R, T = t->mc.n_tables;
    bool *holds = rap_calloc(sizeof(bool) * (size_t)(R * T), "id exchange");
    if (!holds)
        return RAP_ERR_NOMEM;
    rap_shard_holds(&t->map, holds);
    rap_status st = rap_ids_xchg_create(t->ncomm, RAP_GPU, T, holds, t->mc.batch,
                                        t->mc.max_bag > 0 ? t->mc.max_bag : 1, &t->xg);
    rap_free(holds);
    return st;
}

/* Bytes a step moves between ranks (every rank computes the same from the
 * header): source s sends each other holder p of table t its share's
 * offsets and ids, 8 bytes each. */
static int64_t xb_step_bytes(const trainer *t, int64_t *sent_by_me)
{
    int R = t->R, T = t->mc.n_tables;
    int64_t all = 0;
    *sent_by_me = 0;
    for (int src = 0; src < R; src++) {
        const int64_t *h = t->xb_hdr + src * (1 + T);
        for (int p = 0; p < R; p++)
            for (int tb = 0; p != src && tb < T; tb++)
                if (t->xb_holds[p * T + tb]) {
                    all += 8 * (h[0] + h[1 + tb]);
                    if (src == t->rank)
                        *sent_by_me += 8 * (h[0] + h[1 + tb]);
                }
    }
    return all;
}

/* Placement batch: mb holds this rank's share of the global batch (every
 * column). Two rounds: every rank's share rows and ids per table
 * (allgather), then the offsets and ids of each table to its holders
 * (all-to-all of int64); g gets the global batch's ids of this rank's
 * tables in global row order (shares in rank order), the others NULL. */
static rap_status xb_exchange(trainer *t, const rap_model_batch *mb, rap_model_batch *g)
{
    rap_comm *c = t->c->comm;
    int R = t->R, T = t->mc.n_tables;
    int64_t nr = mb->rows, *mine = t->xb_hdr + R * (1 + T);
    mine[0] = nr;
    for (int tb = 0; tb < T; tb++)
        mine[1 + tb] = mb->off[tb][nr] - mb->off[tb][0];
    RAP_TRY(rap_comm_allgather(c, mine, sizeof(int64_t) * (size_t)(1 + T), t->xb_hdr,
                               "id exchange counts"));
    int64_t n = 0;
    for (int s = 0; s < R; s++)
        n += t->xb_hdr[s * (1 + T)];
    for (int s = 0; s < R; s++) {
        int64_t r0, cnt;
        rap_hybrid_rows(n, R, s, &r0, &cnt);
        if (n > t->mc.batch || t->xb_hdr[s * (1 + T)] != cnt)
            return rap_fail(RAP_ERR_INTERNAL, "id exchange: rank %d preprocessed %lld rows of a "
                            "global batch of %lld, its share is %lld", s,
                            (long long)t->xb_hdr[s * (1 + T)], (long long)n, (long long)cnt);
        for (int tb = 0; tb < T; tb++)
            if (t->xb_hdr[s * (1 + T) + 1 + tb] > cnt * t->xb_K)
                return rap_fail(RAP_ERR_DATA, "id exchange: rank %d has %lld ids of table %d "
                                "in %lld rows (at most %lld a row)", s,
                                (long long)t->xb_hdr[s * (1 + T) + 1 + tb], tb, (long long)cnt,
                                (long long)t->xb_K);
    }
    int64_t *sc = t->xb_cnt, *sd = sc + R, *rc = sd + R, *rd = rc + R, at = 0;
    for (int p = 0; p < R; p++) { /* to p: its tables' offsets (rebased) and ids */
        sd[p] = at;
        for (int tb = 0; tb < T; tb++) {
            if (!t->xb_holds[p * T + tb])
                continue;
            const int64_t *off = mb->off[tb];
            for (int64_t i = 0; i < nr; i++)
                t->xb_send[at++] = off[i + 1] - off[0];
            memcpy(t->xb_send + at, mb->ids[tb] + off[0], sizeof(int64_t) * (size_t)mine[1 + tb]);
            at += mine[1 + tb];
        }
        sc[p] = at - sd[p];
    }
    at = 0;
    for (int s = 0; s < R; s++) {
        const int64_t *h = t->xb_hdr + s * (1 + T);
        rd[s] = at;
        for (int k = 0; k < t->xb_ntab; k++)
            at += h[0] + h[1 + t->xb_tab[k]];
        rc[s] = at - rd[s];
    }
    RAP_TRY(rap_comm_alltoallv_type(c, t->xb_send, sc, sd, t->xb_recv, rc, rd, RAP_COMM_I64,
                                    "id exchange"));
    /* assemble: shares in rank order are the global rows in order */
    memset(g, 0, sizeof *g);
    g->rows = n;
    int64_t Bg = t->mc.batch;
    for (int k = 0; k < t->xb_ntab; k++) {
        int64_t *goff = t->xb_off + k * (Bg + 1), *gids = t->xb_ids + k * Bg * t->xb_K;
        int64_t row = 0, base = 0;
        goff[0] = 0;
        for (int s = 0; s < R; s++) {
            const int64_t *h = t->xb_hdr + s * (1 + T), *blk = t->xb_recv + rd[s];
            for (int q = 0; q < k; q++) /* the earlier tables of the block */
                blk += h[0] + h[1 + t->xb_tab[q]];
            int64_t ns = h[1 + t->xb_tab[k]];
            for (int64_t i = 0; i < h[0]; i++)
                goff[row + i + 1] = base + blk[i];
            memcpy(gids + base, blk + h[0], sizeof(int64_t) * (size_t)ns);
            row += h[0];
            base += ns;
        }
        g->off[t->xb_tab[k]] = goff;
        g->ids[t->xb_tab[k]] = gids;
    }
    int64_t sent = 0;
    t->bytes_moved += xb_step_bytes(t, &sent);
    t->rank_bytes_sent += sent;
    return RAP_OK;
}

/* The runtime's step with ranks: this rank's rows of the global batch mb
 * (dense, label) and the ids of every table over all its rows through the
 * hybrid step; the global mean loss back (a collective). */
rap_status rap_train_dist_step(void *ctx, const rap_model_batch *mb, int64_t rows, double *loss)
{
    const rap_train_dist *d = ctx;
    int64_t r0, nr;
    rap_model_batch loc, g, mg;
    memset(&loc, 0, sizeof loc);
    const rap_model_batch *glob = mb;
    if (d->xg) { /* placement batch on GPU ranks: through NCCL, on the stream */
        RAP_TRY(rap_ids_xchg_run(d->xg, mb, rows, &g));
        nr = mb->rows;
        loc.dense = mb->dense;
        loc.label = mb->label;
        glob = &g;
    } else {
        rap_hybrid_rows(mb->rows, d->R, d->rank, &r0, &nr);
        loc.dense = mb->dense + r0 * d->n_dense;
        loc.label = mb->label + r0;
        if (d->rtab) { /* the rank's columns: its sparse ones to their global tables */
            rap_train_rank_batch(mb, d->rtab, d->n_rtab, &g);
            glob = &g;
        }
        if (d->moves) { /* the units other ranks computed for this one, and ours to them:
                         * dense ones land in mb's dense (the runtime's packing buffer of
                         * this batch), held tables are assembled */
            rap_model_batch view = *glob;
            RAP_TRY(rap_moves_run(d->moves, &view, (float *)mb->dense, mb->rows, &mg));
            glob = &mg;
        }
    }
    loc.rows = nr;
    RAP_TRY(rap_hybrid_step(d->hyb, glob, &loc));
    if (d->loss_dev) { /* GPU ranks: the partial losses summed by NCCL on the stream */
        const float *part;
        RAP_TRY(rap_rt_model_loss_ptr(d->model, &part));
        if (nr > 0)
            RAP_TRY(rap_rt_d2d(d->loss_dev, part, sizeof(float), d->stream));
        else
            RAP_TRY(rap_rt_zero(d->loss_dev, sizeof(float), d->stream));
        return rap_comm_allreduce(d->ncomm, d->loss_dev, 1, RAP_COMM_F32, "loss allreduce");
    }
    if (d->model_loss) /* one GPU rank: the runtime reads the model's loss, no wait */
        return RAP_OK;
    return rap_hybrid_loss(d->hyb, loss);
}

/* The trainer's train_fn: placement batch on CPU ranks exchanges the ids
 * with exact counts first (xb_exchange); everything else is the shared
 * step. */
static rap_status dist_train(void *ctx, const rap_model_batch *mb, int64_t rows, double *loss)
{
    trainer *t = ctx;
    if (!t->xb)
        return rap_train_dist_step(&t->dstep, mb, rows, loss);
    rap_model_batch loc, g;
    RAP_TRY(xb_exchange(t, mb, &g));
    memset(&loc, 0, sizeof loc);
    loc.rows = mb->rows;
    loc.dense = mb->dense;
    loc.label = mb->label;
    RAP_TRY(rap_hybrid_step(t->hyb, &g, &loc));
    return rap_hybrid_loss(t->hyb, loss);
}

/* Starts the row feed (every remaining pass) and the runtime. */
static rap_status open_pipeline(trainer *t, int64_t passes)
{
    const rap_train_config *c = t->c;
    rap_runtime_config rc;
    memset(&rc, 0, sizeof rc);
    if (t->mode == RAP_MODE_MPS) {
        if (t->holdout > 0 || t->pos > 0)
            return rap_fail(RAP_ERR_ARG, "--mode mps: the preprocessing server reads every row "
                            "of --data in order: give --eval-data (or --eval-fraction 0), and "
                            "resume only from a checkpoint at the end of a pass");
        rc.plan_spec = c->plan_name && c->plan_name[0] ? c->plan_name : "default";
        rc.reader = c->reader;
        rc.reader.input = c->data;
    } else if (t->shard) { /* ideal from a shard: no feed */
        rc.shard = c->data;
        rc.shard_passes = passes;
        rc.shard_start_rows = t->pos;
    } else {
        RAP_TRY(open_feed(t, passes));
    }
    rc.mode = t->mode;
    rc.plan = t->rplan ? t->rplan : c->plan;
    rc.fusion = t->rsched ? &t->rsfus : t->rplan ? &t->rfus : &t->fus;
    rc.schedule = t->rsched ? t->rsched : c->schedule;
    rc.cpu_workers = c->cpu_workers;
    rc.prep_threads = c->reader.threads;
    rc.cuda_graph = c->cuda_graph;
    rc.prep_lanes = c->prep_lanes;
    rc.trace = c->trace;
    if (t->dist) {
        rc.train_fn = dist_train;
        rc.train_ctx = t;
        rc.hybrid = t->hyb; /* its phases timed, the windows beside them */
        rc.batch_rows = t->mc.batch;
        if (t->xb || t->xg) { /* placement batch: the executor preprocesses this rank's rows */
            rc.row_share_ranks = t->R;
            rc.row_share_rank = t->rank;
        }
        /* on the GPU the loss is read back asynchronously, as without
         * ranks, instead of waiting for each step: one rank's is the global
         * loss; with more, NCCL sums the partial losses into loss_dev on
         * the training stream after each step (dist_train) */
        t->model_loss = c->device == RAP_GPU;
        rc.train_fn_model_loss = t->model_loss;
        if (t->model_loss && t->R > 1) {
            if (!t->loss_dev)
                RAP_TRY(rap_cuda_malloc((void **)&t->loss_dev, 256, "the global loss"));
            rc.train_loss_dev = t->loss_dev;
        }
        t->dstep = (rap_train_dist){t->hyb, t->xg, t->rplan ? t->rtab : NULL, t->n_rtab,
                                    t->R, t->rank, t->mc.n_dense, t->model, t->stream,
                                    t->ncomm, t->loss_dev, t->model_loss, t->moves};
    }
    RAP_TRY(rap_runtime_create(&rc, t->model, t->feed, &t->rt));
    /* ranks: every rank's set-up (pinned and device allocations, which may
     * synchronise every GPU of the process) done before any rank queues a
     * collective: a rank still allocating while another's NCCL kernel waits
     * for it can hang both (seen with --gpus 2 in cpu mode, bench/RESULTS.md) */
    if (t->dist)
        RAP_TRY(rap_comm_barrier(c->comm, "set-up done"));
    return RAP_OK;
}

static rap_status open_feed(trainer *t, int64_t passes)
{
    const rap_train_config *c = t->c;
    rap_rowfeed_config fc;
    memset(&fc, 0, sizeof fc);
    fc.reader = c->reader;
    fc.reader.input = c->data;
    fc.batch_rows = t->mc.batch;
    int workers = c->cpu_workers > 0 ? c->cpu_workers : rap_ncores();
    fc.n_batches = t->mode == RAP_MODE_CPU ? workers + 2 : 8; /* reading overlaps training */
    fc.pinned = c->device == RAP_GPU;
    fc.holdout = t->holdout;
    fc.start_pos = t->pos;
    fc.passes = passes;
    fc.trace = c->trace;
    fc.stop = c->stop;
    return rap_rowfeed_create(&fc, &t->feed);
}

/* Ends the pipeline (waiting for the GPU) and adds its accounting. */
static void close_pipeline(trainer *t)
{
    if (t->rt) {
        rap_runtime_stats rs;
        rap_runtime_sync(t->rt);
        rap_runtime_get_stats(t->rt, &rs);
        t->res->starved_s += rs.starved_s;
        if (rs.timed_steps > 0)
            t->res->exposed_ms = rs.exposed_ms / (double)rs.timed_steps;
        if (rs.have_reader)
            t->res->data = rs.reader;
        rap_runtime_free(t->rt);
        t->rt = NULL;
    }
    if (t->feed) {
        rap_rowfeed_stats fs;
        rap_rowfeed_free(t->feed, &fs);
        t->feed = NULL;
        t->res->data = fs.reader;
        t->res->rows_held_out += fs.rows_held_out;
        /* read, but never trained: read ahead by the feed, or handed to the
         * runtime (prepared for the next step) when the run stopped */
        t->res->rows_pending = fs.reader.rows_used - fs.rows_held_out - fs.rows_skipped -
                               t->res->samples;
        t->res->rows_skipped += fs.rows_skipped;
    }
}

/* Takes the losses of completed steps (all of them when wait), in order:
 * sums them for the log and stops at a non-finite one, naming its step. */
static rap_status take_losses(trainer *t, bool wait)
{
    int64_t idx;
    double loss;
    rap_status st;
    while (rap_runtime_next_loss(t->rt, wait, &idx, &loss, &st)) {
        if (!isfinite(loss)) {
            int64_t step = t->step0 + idx + 1;
            t->res->nan_step = step;
            rap_progress_clear(&t->pg);
            return rap_fail(RAP_ERR_DATA,
                            "the training loss is %s at step %lld (lr %g too high?): stopped; "
                            "no checkpoint written at this step",
                            isnan(loss) ? "NaN" : "infinite", (long long)step, (double)t->mc.lr);
        }
        t->loss_sum += loss;
        t->loss_n++;
    }
    return st;
}

/* Waits for the queued steps and checks their losses (before a save or an
 * evaluation). */
static rap_status settle(trainer *t)
{
    if (t->hyb) /* bounded by the comm's timeout: a rank may have died */
        RAP_TRY(rap_hybrid_wait(t->hyb));
    RAP_TRY(rap_runtime_sync(t->rt));
    return take_losses(t, true);
}

static void teardown(trainer *t)
{
    close_pipeline(t);
    rap_metrics_close(&t->mf);
    rap_out_lock_release(t->save_lock);
    t->save_lock = NULL;
    rap_eval_free(&t->acc);
    rap_free(t->logits);
    rap_batch_free(&t->tb);
    rap_batch_free(&t->eb);
    if (t->xg || t->moves) { /* their buffers may still be read on the stream */
        if (t->hyb)
            rap_hybrid_wait(t->hyb);
        rap_ids_xchg_free(t->xg);
        t->xg = NULL;
        rap_moves_free(t->moves);
        t->moves = NULL;
    }
    rap_hybrid_free(t->hyb);
    t->hyb = NULL;
    rank_plan_free(t);
    xb_free(t);
    rap_cuda_free(t->loss_dev);
    t->loss_dev = NULL;
    rap_model_free(t->model);
    rap_comm_free(t->ncomm);
    t->ncomm = NULL;
    rap_shard_map_free(&t->map);
    rap_input_free(t->input);
    rap_prep_free(t->prep);
    rap_fusion_free(&t->fus);
    rap_rt_stream_free(t->stream);
    rap_free(t->plan_cols);
}

static bool finished(const trainer *t)
{
    const rap_train_config *c = t->c;
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    if (c->steps > 0 && t->step >= c->steps)
        return true;
    return epochs > 0 && t->epoch >= epochs;
}

/* Whether to stop before the next step. With ranks every rank must stop
 * at the same step: the stop requests are summed over the ranks (a small
 * collective per step). */
static bool stopping(trainer *t)
{
    if (!t->dist || t->R == 1)
        return (t->stopped = stop_requested(t));
    int64_t f = stop_requested(t);
    if (rap_comm_allreduce_host(t->c->comm, &f, 1, RAP_COMM_I64, "stop flag") != RAP_OK) {
        t->comm_failed = true;
        return true;
    }
    return (t->stopped = f > 0);
}

/* Test hooks (RAP_TEST_RANK_EXIT / RAP_TEST_RANK_HANG = "rank:step"): the
 * rank dies, or stops answering, after that step (tests/test_dist_train.c).
 * A rank that is a thread (threads comm) leaves its loop with an error
 * instead: the process must go on for the others to report. */
static rap_status test_hooks(trainer *t)
{
    bool hit = (t->exit_step > 0 && t->step == t->exit_step) ||
               (t->hang_step > 0 && t->step == t->hang_step);
    if (hit && rap_comm_kind_of(t->c->comm) == RAP_COMM_THREADS)
        return rap_fail(RAP_ERR_INTERNAL, "rank %d: test hook: this rank stops after step %lld",
                        t->rank, (long long)t->step);
    if (t->exit_step > 0 && t->step == t->exit_step) {
        fprintf(stderr, "rank %d: RAP_TEST_RANK_EXIT: exiting after step %lld\n", t->rank,
                (long long)t->step);
        _exit(1);
    }
    if (t->hang_step > 0 && t->step == t->hang_step) {
        fprintf(stderr, "rank %d: RAP_TEST_RANK_HANG: hanging after step %lld\n", t->rank,
                (long long)t->step);
        for (;;)
            sleep(1000);
    }
    return RAP_OK;
}

static rap_status loop(trainer *t)
{
    const rap_train_config *c = t->c;
    rap_train_result *res = t->res;
    t->step0 = t->step;
    t->frac0 = (double)t->epoch + (c->data_rows > 0 ? (double)t->pos / (double)c->data_rows : 0);
    rap_progress_init(&t->pg, c->progress && t->rank == 0, c->tty, c->log_interval);
    if (finished(t))
        return RAP_OK;
    int64_t epochs = c->epochs > 0 ? c->epochs : (c->steps > 0 ? 0 : 1);
    RAP_TRY(open_pipeline(t, epochs > 0 ? epochs - t->epoch : 0));
    double last_log = rap_now();
    int64_t pass_start = t->pos;
    while (!finished(t) && !stopping(t)) {
        double t0 = rap_now();
        rap_step_info in;
        RAP_TRY(rap_runtime_step(t->rt, &in));
        t->t_train += rap_now() - t0;
        if (in.end)
            break; /* stopped, or a followed input went idle */
        if (in.rows > 0) {
            t->step++;
            t->pos = in.pos_after;
            res->samples += in.rows;
            res->steps_run++;
            if (t->dist) { /* rows counted once: this rank's share */
                int64_t r0, nr;
                rap_hybrid_rows(in.rows, t->R, t->rank, &r0, &nr);
                t->rank_samples += nr;
                res->rank_samples = t->rank_samples;
                RAP_TRY(test_hooks(t));
            }
            if (c->trace && c->trace_steps > 0 && res->steps_run >= c->trace_steps)
                rap_trace_set_enabled(c->trace, false);
            RAP_TRY(take_losses(t, false));
        }
        if (in.end_of_pass) {
            if (pass_start == 0 && in.pass_rows == 0)
                return rap_fail(RAP_ERR_DATA, "%s: no training rows (%s)", c->data,
                                in.pos_after == 0 ? "the input holds no usable row"
                                                  : "every row is held out for evaluation");
            t->epoch++;
            t->pos = 0;
            pass_start = 0;
        }
        if (in.rows == 0)
            continue;
        double now = rap_now();
        if (c->log_every > 0 ? t->step % c->log_every == 0 : now - last_log >= c->log_interval) {
            RAP_TRY(log_step(t, false));
            last_log = now;
        } else if (c->tty) {
            double loss = t->loss_n ? t->loss_sum / (double)t->loss_n : NAN;
            rap_progress_update(&t->pg, res->samples, t->step, loss, fraction_done(t), false);
        }
        if (c->eval_every > 0 && t->step % c->eval_every == 0 && !finished(t)) {
            RAP_TRY(settle(t));
            rap_eval_result e;
            RAP_TRY(evaluate(t, &e));
            RAP_TRY(log_eval(t, &e, "eval"));
        }
        if (c->save && c->save[0] && c->save_every > 0 && t->step % c->save_every == 0 &&
            !finished(t)) {
            RAP_TRY(settle(t));
            RAP_TRY(save(t));
        }
    }
    if (t->comm_failed)
        return RAP_ERR_IO; /* the collective's message is set */
    double t0 = rap_now();
    RAP_TRY(settle(t));
    t->t_train += rap_now() - t0;
    if (t->loss_n)
        RAP_TRY(log_step(t, true));
    rap_progress_clear(&t->pg);
    return RAP_OK;
}

/* Ranks: every rank's rows of this run gathered (allgather), their sum in
 * res->ranks_samples; *list gets the final line's extra keys
 * (", \"ranks\":R, \"rank_samples\":[..], \"ranks_samples\":N"). */
static rap_status gather_samples(trainer *t, char **list)
{
    rap_train_result *res = t->res;
    int64_t *all = rap_calloc(sizeof(int64_t) * (size_t)(2 * t->R), "accounting");
    size_t cap = 160 + 48 * (size_t)t->R, at = 0;
    char *s = rap_malloc(cap, "accounting");
    rap_status st = all && s ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_comm_allgather(t->c->comm, &t->rank_samples, sizeof(int64_t), all,
                                "row accounting");
    if (st == RAP_OK) {
        res->ranks_samples = 0;
        at += (size_t)snprintf(s + at, cap - at, ", \"ranks\":%d, \"rank_samples\":[", t->R);
        for (int r = 0; r < t->R; r++) {
            res->ranks_samples += all[r];
            at += (size_t)snprintf(s + at, cap - at, "%s%lld", r ? "," : "", (long long)all[r]);
        }
        at += (size_t)snprintf(s + at, cap - at, "], \"ranks_samples\":%lld",
                               (long long)res->ranks_samples);
        if (res->ranks_samples != res->samples)
            st = rap_fail(RAP_ERR_INTERNAL, "row accounting: the ranks trained %lld rows in all, "
                          "the global batches held %lld", (long long)res->ranks_samples,
                          (long long)res->samples);
    }
    /* preprocessed bytes moved (placement batch): every rank computed the
     * job's total from the exchanged counts; the ranks' own sends must add
     * up to it (GPU ranks: fixed-size blocks, padding included; a row with
     * more ids than max_bag is reported here) */
    if (st == RAP_OK && t->xg) {
        rap_ids_xchg_bytes(t->xg, &t->rank_bytes_sent, &t->bytes_moved);
        st = rap_ids_xchg_check(t->xg);
    }
    /* moves (the planner's per-rank schedules): each rank counts its own
     * sends (fixed-size blocks, padding included); the total is their sum */
    if (st == RAP_OK && t->moves) {
        rap_moves_bytes(t->moves, &t->rank_bytes_sent);
        st = rap_moves_check(t->moves);
    }
    if (st == RAP_OK)
        st = rap_comm_allgather(t->c->comm, &t->rank_bytes_sent, sizeof(int64_t), all + t->R,
                                "byte accounting");
    if (st == RAP_OK && t->moves) {
        int64_t moved = 0;
        for (int r = 0; r < t->R; r++)
            moved += all[t->R + r];
        t->bytes_moved = moved;
    }
    if (st == RAP_OK) {
        int64_t sum = 0;
        res->bytes_moved = t->bytes_moved;
        res->rank_bytes_sent = t->rank_bytes_sent;
        at += (size_t)snprintf(s + at, cap - at, ", \"bytes_moved\":%lld, \"rank_bytes_sent\":[",
                               (long long)t->bytes_moved);
        for (int r = 0; r < t->R; r++) {
            sum += all[t->R + r];
            at += (size_t)snprintf(s + at, cap - at, "%s%lld", r ? "," : "",
                                   (long long)all[t->R + r]);
        }
        snprintf(s + at, cap - at, "]");
        if (sum != t->bytes_moved)
            st = rap_fail(RAP_ERR_INTERNAL, "byte accounting: the ranks sent %lld bytes of "
                          "preprocessed ids in all, the exchanged counts say %lld",
                          (long long)sum, (long long)t->bytes_moved);
    }
    rap_free(all);
    if (st != RAP_OK) {
        rap_free(s);
        return st;
    }
    *list = s;
    return RAP_OK;
}

rap_status rap_train_run(const rap_train_config *c, rap_train_result *res)
{
    memset(res, 0, sizeof *res);
    res->eval.auc = res->eval.logloss = res->eval.accuracy = NAN;
    res->loss = NAN;
    trainer t;
    memset(&t, 0, sizeof t);
    t.c = c;
    t.res = res;
    rap_status st = setup(&t);
    if (st == RAP_OK)
        st = loop(&t);
    res->step = t.step;
    res->samples_total = t.samples_before + res->samples;
    res->train_seconds = t.t_train;
    res->samples_per_s = t.t_train > 0 ? (double)res->samples / t.t_train : 0;
    res->interrupted = st == RAP_OK && (t.dist ? t.stopped : stop_requested(&t));
    /* make sure the training reader's rows are counted (waits for the GPU) */
    close_pipeline(&t);
    /* ranks: every rank's share summed (each row trained exactly once) */
    char *rank_list = NULL;
    if (st == RAP_OK && t.dist)
        st = gather_samples(&t, &rank_list);
    char a[32], b[32], d[32], e[32], te[32];
    if (st == RAP_OK && !res->interrupted && t.holdout + (c->eval_data && c->eval_data[0]) > 0) {
        st = evaluate(&t, &res->eval);
        if (st == RAP_OK)
            st = log_eval(&t, &res->eval, "eval");
    }
    if (st == RAP_OK && c->save && c->save[0])
        st = save(&t);
    if (st == RAP_OK && !res->interrupted) {
        T_INFO(&t, "trained %lld steps (%lld samples) in %.1f s: %.0f samples/s", (long long)res->steps_run,
                 (long long)res->samples, res->train_seconds, res->samples_per_s);
        st = rap_metrics_line(
            &t.mf,
            "\"event\":\"final\", \"auc\":%s, \"logloss\":%s, \"accuracy\":%s, "
            "\"samples_trained\":%lld, \"rows_rejected\":%lld, \"samples_per_s\":%s, "
            "\"step\":%lld, \"eval_rows\":%lld, \"teacher_auc\":%s%s",
            rap_json_num(res->eval.auc, a), rap_json_num(res->eval.logloss, b),
            rap_json_num(res->eval.accuracy, d), (long long)res->samples_total,
            (long long)res->data.rows_rejected, rap_json_num(res->samples_per_s, e),
            (long long)res->step, (long long)res->eval.rows, rap_json_num(c->teacher_auc, te),
            rank_list ? rank_list : "");
    } else if (st == RAP_OK) {
        rap_metrics_line(&t.mf,
                         "\"event\":\"interrupted\", \"step\":%lld, \"samples_trained\":%lld, "
                         "\"rows_rejected\":%lld, \"saved\":%s",
                         (long long)res->step, (long long)res->samples_total,
                         (long long)res->data.rows_rejected, res->saved ? "true" : "false");
        st = rap_fail(RAP_ERR_INTERRUPTED, "interrupted after step %lld%s%s", (long long)res->step,
                      res->saved ? ": checkpoint saved to " : " (no --save: nothing saved)",
                      res->saved ? c->save : "");
    }
    rap_free(rank_list);
    /* teardown must not clobber the message of a failure */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rap_last_error());
    teardown(&t);
    if (st != RAP_OK)
        rap_fail(st, "%s", msg);
    return st;
}
