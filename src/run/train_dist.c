/* train_dist.c -- what the trainer's ranks agree on (train.h, docs/DIST.md):
 * the stop before each step, and at the end every rank's rows and sent
 * bytes gathered, summed and checked (each row trained exactly once). */
#include "run/train_internal.h"

#include "core/core.h"
#include "dist/comm.h"

#include <string.h>

/* Whether to stop before the next step. With ranks every rank must stop
 * at the same step: the stop requests are summed over the ranks (a small
 * collective per step). */
bool train_stopping(trainer *t)
{
    if (!t->rk.dist || t->rk.R == 1)
        return (t->rk.stopped = train_stop_requested(t));
    int64_t f = train_stop_requested(t);
    if (rap_comm_allreduce_host(t->c->comm, &f, 1, RAP_COMM_I64, "stop flag") != RAP_OK) {
        t->rk.comm_failed = true;
        return true;
    }
    return (t->rk.stopped = f > 0);
}

/* Ranks: every rank's rows of this run gathered (allgather), their sum in
 * res->ranks_samples; *list gets the final line's extra keys
 * (", \"ranks\":R, \"rank_samples\":[..], \"ranks_samples\":N"). */
rap_status train_gather_samples(trainer *t, char **list)
{
    rap_train_result *res = t->res;
    int64_t *all = rap_calloc(sizeof(int64_t) * (size_t)(2 * t->rk.R), "accounting");
    size_t cap = 160 + 48 * (size_t)t->rk.R, at = 0;
    char *s = rap_malloc(cap, "accounting");
    rap_status st = all && s ? RAP_OK : RAP_ERR_NOMEM;
    if (st == RAP_OK)
        st = rap_comm_allgather(t->c->comm, &t->rk.rank_samples, sizeof(int64_t), all,
                                "row accounting");
    if (st == RAP_OK) {
        res->ranks_samples = 0;
        at += (size_t)snprintf(s + at, cap - at, ", \"ranks\":%d, \"rank_samples\":[", t->rk.R);
        for (int r = 0; r < t->rk.R; r++) {
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
    /* preprocessed bytes moved: with placement batch every rank computed
     * the job's total from the exchanged counts, and the ranks' own sends
     * must add up to it (GPU ranks: fixed-size blocks, padding included; a
     * row with more ids than max_bag is reported by the check); with the
     * planner's moves each rank counts its own sends (fixed-size blocks,
     * padding included) and the total is their sum */
    int64_t all_sent = 0;
    bool sends = rap_pipeline_bytes_sent(t->pipe, &t->rk.rank_bytes_sent, &all_sent);
    bool own_only = sends && all_sent < 0;
    if (sends && !own_only)
        t->rk.bytes_moved = all_sent;
    if (st == RAP_OK)
        st = rap_pipeline_check(t->pipe);
    if (st == RAP_OK)
        st = rap_comm_allgather(t->c->comm, &t->rk.rank_bytes_sent, sizeof(int64_t), all + t->rk.R,
                                "byte accounting");
    if (st == RAP_OK && own_only) {
        int64_t moved = 0;
        for (int r = 0; r < t->rk.R; r++)
            moved += all[t->rk.R + r];
        t->rk.bytes_moved = moved;
    }
    if (st == RAP_OK) {
        int64_t sum = 0;
        res->bytes_moved = t->rk.bytes_moved;
        res->rank_bytes_sent = t->rk.rank_bytes_sent;
        at += (size_t)snprintf(s + at, cap - at, ", \"bytes_moved\":%lld, \"rank_bytes_sent\":[",
                               (long long)t->rk.bytes_moved);
        for (int r = 0; r < t->rk.R; r++) {
            sum += all[t->rk.R + r];
            at += (size_t)snprintf(s + at, cap - at, "%s%lld", r ? "," : "",
                                   (long long)all[t->rk.R + r]);
        }
        snprintf(s + at, cap - at, "]");
        if (sum != t->rk.bytes_moved)
            st = rap_fail(RAP_ERR_INTERNAL, "byte accounting: the ranks sent %lld bytes of "
                          "preprocessed ids in all, the exchanged counts say %lld",
                          (long long)sum, (long long)t->rk.bytes_moved);
    }
    rap_free(all);
    if (st != RAP_OK) {
        rap_free(s);
        return st;
    }
    *list = s;
    return RAP_OK;
}
