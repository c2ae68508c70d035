/* reader_share.c -- the reader's side of the ranks' shared parse
 * (data/parse_share.h, docs/INPUT.md "Ranks share the parse"): whether a
 * reader shares, each parser thread's share, the order its chunks are
 * parsed in, what the shares allocate. */
#include "data/reader_impl.h"
#include "data/parse_share.h"

#include <stdlib.h>
#include <string.h>

/* The shared parse's next chunk (the lane of its slot), in the order the
 * consumer takes them, or NULL to wait: one lane's in order; several
 * lanes' (file order, interleave file) file by file, file f's chunks from
 * lane f mod L until that lane's next slot is of a later file or the lane
 * is done, as next_lane takes them. The same on every rank: the same
 * files cut into the same chunks. */
lane *reader_share_next(rap_reader *r)
{
    if (r->L == 1)
        return r->lanes[0].parse_next < r->lanes[0].produced ? &r->lanes[0] : NULL;
    for (;;) {
        if (r->p_file >= r->n_names)
            return NULL;
        lane *l = &r->lanes[r->p_file % r->L];
        if (l->parse_next < l->produced) {
            if (l->slots[l->parse_next % r->S].file_idx > r->p_file) {
                r->p_file++;
                continue;
            }
            return l;
        }
        if (!l->done)
            return NULL;
        r->p_file++;
    }
}

/* Why a reader of cfg with L lanes and P parser threads does not share the
 * parse (NULL: it does); comms: also that cfg->parse_xchg has an exchange
 * of the ranks for each parser thread. */
static const char *share_refusal(const rap_reader_config *cfg, int L, int P, bool comms)
{
    if (cfg->parse_share_ranks < 2)
        return "no ranks to share with";
    const char *e = getenv("RAP_PARSE_SHARE");
    if (e && !strcmp(e, "0"))
        return "RAP_PARSE_SHARE=0";
    if (cfg->parse != RAP_PARSE_GPU && cfg->parse != RAP_PARSE_REF)
        return "only the gpu parser (and its reference) shares";
    if (!rap_reader_criteo_text(cfg))
        return "a schema's text or Parquet";
    if (L != 1 && cfg->interleave != RAP_INTERLEAVE_FILE)
        return "several files read at once, their rows interleaved by batch (the turns "
               "depend on each chunk's good rows)";
    if (cfg->follow)
        return "a followed input (the ranks may see it at different lengths)";
    if (comms && (!cfg->parse_xchg || cfg->n_parse_xchg != P))
        return "no exchange for each parser thread";
    for (int i = 0; comms && i < P; i++)
        if (cfg->parse_xchg[i].size != cfg->parse_share_ranks)
            return "exchanges of another number of ranks";
    return NULL;
}

int rap_reader_share_parsers(const rap_reader_config *cfg)
{
    rap_reader_threads t;
    if (rap_reader_plan_threads(cfg, &t) != RAP_OK) {
        rap_clear_error();
        return 0;
    }
    return share_refusal(cfg, t.lanes, t.parsers, false) ? 0 : t.parsers;
}

/* The shares of the parser threads (share_refusal NULL). */
rap_status reader_make_shares(rap_reader *r)
{
    const char *why = share_refusal(&r->cfg, r->L, r->P, true);
    if (why) {
        if (r->cfg.parse_share_ranks > 1)
            rap_debug("reader: every line parsed on this rank: %s", why);
        return RAP_OK;
    }
    r->share = rap_calloc((size_t)r->P * sizeof *r->share, "parse shares");
    if (!r->share)
        return RAP_ERR_NOMEM;
    for (int i = 0; i < r->P; i++)
        RAP_TRY(rap_parse_share_create(&r->cfg.parse_xchg[i], r->ops, r->pcfg.chunk_bytes,
                                       r->cfg.max_line, &r->share[i]));
    r->st.parse_share_ranks = r->cfg.parse_share_ranks;
    return RAP_OK;
}

void reader_share_bytes(const rap_reader_config *cfg, int lanes, int parsers, size_t C,
                        size_t *device, size_t *host)
{
    if (share_refusal(cfg, lanes, parsers, false))
        return;
    size_t cm, hm;
    const bool gpu = cfg->parse == RAP_PARSE_GPU;
    rap_parse_share_bytes(C, cfg->parse_share_ranks, gpu, &cm, &hm);
    *(gpu ? device : host) += (size_t)parsers * cm;
    *host += (size_t)parsers * hm;
}

void reader_shares_leave(rap_reader *r)
{
    for (int i = 0; r->share && i < r->P; i++)
        rap_parse_share_leave(r->share[i]); /* a no-op once left */
}

void reader_shares_free(rap_reader *r)
{
    for (int i = 0; r->share && i < r->P; i++)
        rap_parse_share_free(r->share[i]);
    rap_free(r->share);
    r->share = NULL;
}
