/* pipeline_dist.c -- the ranks' part of the pipeline builder (pipeline.h,
 * docs/DIST.md, docs/TRAINING.md "Several ranks"): this rank's share of
 * the tables, the hybrid step and its NCCL comm, which columns the rank
 * preprocesses (placement owner and search: its own; with the placement
 * planner's per-rank manifests its merged schedule and the moves; batch:
 * every column over its rows, then the id exchange), and the step the
 * runtime calls in place of the model's phases. */
#include "run/pipeline_internal.h"

#include "core/core.h"
#include "data/parse_share.h"
#include "data/reader_internal.h"
#include "prep/subplan.h"
#include "sched/hash.h"
#include "sched/rank_schedule.h"

#include <string.h>

/* The whole batch's view for the hybrid step of a rank part's batch mb:
 * its sparse column k is global table rtab[k]. */
static void rank_batch(const rap_model_batch *mb, const int *rtab, int n_rtab,
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

/* A rank's preprocessing from the placement planner's manifest m (with
 * --schedule S and ranks): *sfus and *sched the merged fusion and schedule
 * of the rank plan rp (rap_subplan_rank_with given m->col_shares; NULL:
 * the plan p), after checking that every unit the rank consumes (its own
 * rows of every dense column, every row of the tables it holds in map) is
 * computed here or received, and (a collective, moves_agree) that every
 * rank's manifest agrees with m; *moves the exchange of m's send/recv
 * units over xc (the host comm on CPU ranks, the NCCL comm on GPU ranks),
 * NULL when m moves nothing. L: the most ids of a row in a table (the
 * model's max_bag). RAP_ERR_PLAN naming the manifest. */
static rap_status prep_from_manifest(const rap_rank_manifest *m, const rap_plan *p,
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

/* ------------------------------------------------------------ the step */

/* The runtime's step with ranks: this rank's rows of the global batch mb
 * (dense, label) and the ids of every table over all its rows through the
 * hybrid step; the global mean loss back (a collective). */
static rap_status dist_step(const pipe_step *d, const rap_model_batch *mb, int64_t rows,
                            double *loss)
{
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
            rank_batch(mb, d->rtab, d->n_rtab, &g);
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

/* The runtime's train_fn with ranks: placement batch on CPU ranks
 * exchanges the ids with exact counts first (rap_ids_exact); everything
 * else is the shared step. */
static rap_status dist_train(void *ctx, const rap_model_batch *mb, int64_t rows, double *loss)
{
    pipe_dist *d = ctx;
    if (!d->xb)
        return dist_step(&d->step, mb, rows, loss);
    rap_model_batch loc, g;
    RAP_TRY(rap_ids_exact_run(d->xb, mb, &g));
    memset(&loc, 0, sizeof loc);
    loc.rows = mb->rows;
    loc.dense = mb->dense;
    loc.label = mb->label;
    RAP_TRY(rap_hybrid_step(d->hyb, &g, &loc));
    return rap_hybrid_loss(d->hyb, loss);
}

/* ------------------------------------------------------------ create */

rap_status pipe_dist_model_config(rap_pipeline *p)
{
    pipe_dist *d = &p->d;
    d->comm = p->r.comm;
    d->R = rap_comm_size(d->comm);
    d->rank = rap_comm_rank(d->comm);
    if (d->R != p->pl->cfg.ranks)
        return rap_fail(RAP_ERR_ARG, "pipeline: planned for %d ranks, the comm has %d",
                        p->pl->cfg.ranks, d->R);
    RAP_TRY(rap_hybrid_model_config(&p->pl->model, &p->pl->map, d->rank, p->pl->model.batch,
                                    &d->shard, &d->mc));
    d->mc.stream = p->stream;
    return RAP_OK;
}

/* The holders of each table (R, T), for the id exchanges. */
static bool *table_holders(const rap_pipeline *p)
{
    int R = p->d.R, T = p->pl->model.n_tables;
    bool *holds = rap_calloc(sizeof(bool) * (size_t)(R * T), "id exchange");
    if (holds)
        rap_shard_holds(&p->pl->map, holds);
    return holds;
}

/* Placement batch: each rank its row share, the ids exchanged: CPU ranks
 * in sequential or cpu mode with exact counts over the host comm (other
 * CPU modes: the whole batch); GPU ranks (every mode but mps) through
 * NCCL on the model's stream, fixed-size blocks (dist/ids.h). */
static rap_status id_exchange(rap_pipeline *p)
{
    const rap_pipeline_plan *pl = p->pl;
    pipe_dist *d = &p->d;
    rap_device dev = pl->cfg.device;
    bool cpu = dev == RAP_CPU && (p->mode == RAP_MODE_SEQUENTIAL || p->mode == RAP_MODE_CPU);
    bool gpu = dev == RAP_GPU && p->mode != RAP_MODE_MPS;
    if (d->R <= 1 || pl->cfg.placement != RAP_PLACE_BATCH || pl->shard || (!cpu && !gpu))
        return RAP_OK;
    bool *holds = table_holders(p);
    if (!holds)
        return RAP_ERR_NOMEM;
    int T = pl->model.n_tables, K = pl->model.max_bag > 0 ? pl->model.max_bag : 1;
    rap_status st = cpu ? rap_ids_exact_create(d->comm, T, holds, pl->model.batch, K, &d->xb)
                        : rap_ids_xchg_create(d->ncomm, RAP_GPU, T, holds, pl->model.batch, K,
                                              &d->xg);
    rap_free(holds);
    return st;
}

/* A parser thread's exchange (data/parse_share.h) over its comm: the
 * comm's alltoallv of int64s, waited for on a NCCL comm's stream. */
static rap_status xchg_alltoallv(void *ctx, const void *send, const int64_t *scount,
                                 const int64_t *sdispl, void *recv, const int64_t *rcount,
                                 const int64_t *rdispl, const char *name)
{
    rap_comm *c = ctx;
    RAP_TRY(rap_comm_alltoallv_type(c, send, scount, sdispl, recv, rcount, rdispl, RAP_COMM_I64,
                                    name));
    return rap_comm_wait(c, NULL, name);
}

/* The comms of the feed's parser threads where the ranks share its parse
 * (rap_reader_share_parsers): a dup of the NCCL comm for the gpu parser,
 * of the host comm for its reference; none under mpirun without a GPU
 * (an mpi comm has one thread's collectives at a time). */
static rap_status parse_comms(rap_pipeline *p)
{
    pipe_dist *d = &p->d;
    if (d->R <= 1 || p->mode == RAP_MODE_MPS || p->pl->shard)
        return RAP_OK;
    rap_rowfeed_config fc;
    pipe_feed_config(p->pl, p->mode, &fc);
    fc.reader.parse = rap_rowfeed_resolve_parse(&fc);
    const int P = rap_reader_share_parsers(&fc.reader);
    rap_comm *base = fc.reader.parse == RAP_PARSE_GPU ? d->ncomm : d->comm;
    if (P < 1 || !base)
        return RAP_OK;
    if (rap_comm_kind_of(base) == RAP_COMM_MPI) {
        rap_debug("rank %d: every line parsed on each rank (the reference parser over an mpi "
                  "comm)", d->rank);
        return RAP_OK;
    }
    d->px = rap_calloc((size_t)P * sizeof *d->px, "parse exchanges");
    if (!d->px)
        return RAP_ERR_NOMEM;
    for (; d->n_px < P; d->n_px++) {
        rap_comm *c;
        RAP_TRY(rap_comm_dup(base, p->r.gpu >= 0 ? p->r.gpu : 0, &c));
        d->px[d->n_px] = (rap_parse_xchg){rap_comm_rank(c), rap_comm_size(c),
                                          rap_comm_on_device(c), rap_comm_stream(c), c,
                                          xchg_alltoallv};
    }
    rap_debug("rank %d: its %d parser thread%s share the parse with %d ranks", d->rank, P,
              P == 1 ? "" : "s", d->R);
    return RAP_OK;
}

rap_status pipe_dist_create(rap_pipeline *p)
{
    const rap_pipeline_plan *pl = p->pl;
    const rap_pipeline_config *c = &pl->cfg;
    pipe_dist *d = &p->d;
    rap_comm *hc = d->comm;
    if (c->device == RAP_GPU) {
        RAP_TRY(rap_comm_nccl_create(d->comm, p->r.gpu >= 0 ? p->r.gpu : 0, p->stream, &d->ncomm));
        hc = d->ncomm;
    }
    RAP_TRY(rap_hybrid_create(p->model, &pl->map, hc, &d->hyb));
    /* placement owner (and search, which starts there): only this rank's
     * columns, and with the planner's per-rank manifest those it computes
     * for others; batch: every column (see docs/TRAINING.md) */
    rap_rank_manifest *man = NULL;
    if (pl->sched == RAP_PIPE_SCHED_RANKS) /* the planner's, per rank */
        RAP_TRY(rap_rank_manifest_load(c->schedule, c->plan, d->rank, d->R, pl->model.batch,
                                       &man));
    rap_status ms = RAP_OK;
    if (d->R > 1 && c->placement != RAP_PLACE_BATCH && !pl->shard &&
        pl->sched != RAP_PIPE_SCHED_FILE)
        ms = rap_subplan_rank_with(c->plan, d->shard.table, d->shard.n_local,
                                   man ? man->col_shares : NULL, c->fusion == RAP_FUSE_NONE,
                                   &d->rplan, &d->rfus, d->rtab, &d->n_rtab);
    if (ms == RAP_OK && man)
        ms = prep_from_manifest(man, c->plan, d->rplan, &pl->map, d->rank, pl->model.max_bag,
                                d->ncomm ? d->ncomm : d->comm, c->device, &d->rsfus, &d->rsched,
                                &d->moves);
    rap_rank_manifest_free(man);
    RAP_TRY(ms);
    RAP_TRY(id_exchange(p));
    return parse_comms(p);
}

rap_status pipe_dist_runtime(rap_pipeline *p, rap_runtime_config *rc)
{
    pipe_dist *d = &p->d;
    rap_device dev = p->pl->cfg.device;
    rc->train_fn = dist_train;
    rc->train_ctx = d;
    rc->hybrid = d->hyb; /* its phases timed, the windows beside them */
    rc->batch_rows = p->pl->model.batch;
    if (d->xb || d->xg) { /* placement batch: the executor preprocesses this rank's rows */
        rc->row_share_ranks = d->R;
        rc->row_share_rank = d->rank;
    }
    /* on the GPU the loss is read back asynchronously, as without ranks,
     * instead of waiting for each step: one rank's is the global loss;
     * with more, NCCL sums the partial losses into loss_dev on the
     * training stream after each step (dist_step) */
    bool model_loss = dev == RAP_GPU;
    rc->train_fn_model_loss = model_loss;
    if (model_loss && d->R > 1) {
        if (!d->loss_dev)
            RAP_TRY(rap_cuda_malloc((void **)&d->loss_dev, 256, "the global loss"));
        rc->train_loss_dev = d->loss_dev;
    }
    d->step = (pipe_step){d->hyb, d->xg, d->rplan ? d->rtab : NULL, d->n_rtab,
                          d->R, d->rank, p->pl->model.n_dense, p->model, p->stream,
                          d->ncomm, d->loss_dev, model_loss, d->moves};
    return RAP_OK;
}

void pipe_dist_free(rap_pipeline *p)
{
    pipe_dist *d = &p->d;
    if (d->xg || d->moves) { /* their buffers may still be read on the stream */
        if (d->hyb)
            rap_hybrid_wait(d->hyb);
        rap_ids_xchg_free(d->xg);
        d->xg = NULL;
        rap_moves_free(d->moves);
        d->moves = NULL;
    }
    rap_hybrid_free(d->hyb);
    d->hyb = NULL;
    rap_schedule_free(d->rsched);
    d->rsched = NULL;
    rap_fusion_free(&d->rsfus);
    rap_subplan_rank_free(d->rplan, &d->rfus);
    d->rplan = NULL;
    rap_ids_exact_free(d->xb);
    d->xb = NULL;
    rap_cuda_free(d->loss_dev);
    d->loss_dev = NULL;
}

void pipe_dist_free_comm(rap_pipeline *p)
{
    for (int i = 0; i < p->d.n_px; i++)
        rap_comm_free(p->d.px[i].ctx);
    rap_free(p->d.px);
    p->d.px = NULL;
    p->d.n_px = 0;
    rap_comm_free(p->d.ncomm);
    p->d.ncomm = NULL;
}
