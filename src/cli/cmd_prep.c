/* cmd_prep.c -- rap prep: read raw rows, run a plan on the CPU or GPU, and
 * write the result as TSV (header, label first, then every column after the
 * plan) or as rap's binary shard. */
#include "cli/cli.h"
#include "core/out.h"
#include "data/shard.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static rap_reader *volatile g_reader;
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_reader)
        rap_reader_stop(g_reader);
}

/* ---------------------------------------------------------------- output */

typedef struct {
    rap_out *o; /* core/out.h: a temporary renamed when complete */
    FILE *f;    /* rap_out_file(o), unless gz */
    gzFile gz;  /* on a dup of o's fd */
    char path[RAP_OPT_STR];
    char *buf; /* line buffer */
    size_t cap, len;
} tsv_out;

static rap_status out_flush(tsv_out *o)
{
    if (!o->len)
        return RAP_OK;
    size_t n = o->len;
    o->len = 0;
    if (o->gz ? gzwrite(o->gz, o->buf, (unsigned)n) != (int)n : fwrite(o->buf, 1, n, o->f) != n)
        return rap_fail(RAP_ERR_IO, "%s: write failed (disk full?)", o->path);
    return RAP_OK;
}

static rap_status out_reserve(tsv_out *o, size_t n)
{
    if (o->len + n <= o->cap)
        return RAP_OK;
    RAP_TRY(out_flush(o));
    if (n > o->cap) {
        char *b = rap_realloc(o->buf, n, "output buffer");
        if (!b)
            return RAP_ERR_NOMEM;
        o->buf = b;
        o->cap = n;
    }
    return RAP_OK;
}

static void put(tsv_out *o, const char *s, size_t n)
{
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void put_i64(tsv_out *o, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%lld", (long long)v);
    put(o, t, (size_t)n);
}

static void put_f32(tsv_out *o, float v)
{
    char t[32];
    int n = snprintf(t, sizeof t, "%.9g", (double)v);
    put(o, t, (size_t)n);
}

/* Finishes the file (rename into place) when ok, else removes it. */
static rap_status out_close(tsv_out *o, bool ok)
{
    rap_status s = ok ? out_flush(o) : RAP_OK;
    if (o->gz && gzclose(o->gz) != Z_OK && s == RAP_OK)
        s = rap_fail(RAP_ERR_IO, "%s: write failed", o->path);
    o->gz = NULL;
    s = rap_out_close(o->o, ok ? s : RAP_ERR_IO);
    o->o = NULL;
    rap_free(o->buf);
    o->buf = NULL;
    return s;
}

/* Starts the output (out_close finishes or drops it); on failure nothing
 * is left open. */
static rap_status out_open(tsv_out *o, const char *path)
{
    memset(o, 0, sizeof o[0]);
    snprintf(o->path, sizeof o->path, "%s", path);
    rap_out_opts oo = {.dash_is_stdout = true};
    RAP_TRY(rap_out_open(path, &oo, &o->o));
    size_t pl = strlen(path);
    rap_status st = RAP_OK;
    if (strcmp(path, "-") != 0 && pl > 3 && !strcmp(path + pl - 3, ".gz")) {
        int fd = dup(rap_out_fd(o->o));
        if (fd < 0 || !(o->gz = gzdopen(fd, "wb6"))) {
            if (fd >= 0)
                close(fd);
            st = rap_fail(RAP_ERR_IO, "%s: cannot start gzip", path);
        }
    } else {
        o->f = rap_out_file(o->o);
    }
    o->cap = 1 << 20;
    if (st == RAP_OK && !(o->buf = rap_malloc(o->cap, "output buffer")))
        st = RAP_ERR_NOMEM;
    if (st != RAP_OK)
        out_close(o, false);
    return st;
}

static rap_status write_tsv_rows(tsv_out *o, const rap_plan *plan, const float *label,
                                 int64_t rows, const rap_host_column *cols)
{
    for (int64_t r = 0; r < rows; r++) {
        size_t need = 8;
        for (int c = 0; c < plan->n_cols; c++) {
            const rap_host_column *h = &cols[c];
            if (h->kind == RAP_SPARSE)
                need += 24 * (size_t)(h->off[r + 1] - h->off[r]) + 8;
            else
                need += 20 * (size_t)h->width + 8;
        }
        RAP_TRY(out_reserve(o, need));
        put(o, label[r] != 0 ? "1" : "0", 1);
        for (int c = 0; c < plan->n_cols; c++) {
            const rap_host_column *h = &cols[c];
            put(o, "\t", 1);
            if (!h->valid[r]) {
                put(o, "null", 4);
                continue;
            }
            if (h->kind == RAP_SPARSE) {
                for (int64_t j = h->off[r]; j < h->off[r + 1]; j++) {
                    if (j > h->off[r])
                        put(o, ",", 1);
                    put_i64(o, h->ids[j]);
                }
            } else {
                for (int w = 0; w < h->width; w++) {
                    if (w)
                        put(o, ",", 1);
                    put_f32(o, h->val[r * h->width + w]);
                }
            }
        }
        put(o, "\n", 1);
    }
    return RAP_OK;
}

/* ---------------------------------------------------------------- summary */

static void print_model_inputs(const rap_plan *plan)
{
    int dense_cols = 0, dense_width = 0, tables = 0, unbounded = 0;
    int64_t table_rows = 0;
    for (int c = 0; c < plan->n_cols; c++) {
        const rap_node *n = &plan->nodes[plan->cols[c].node];
        if (n->kind == RAP_SPARSE) {
            if (n->bounded && n->lo >= 0) {
                tables++;
                table_rows += n->hi + 1;
            } else {
                unbounded++;
                rap_warn("column %s has no bounded id range: it cannot be an embedding table "
                         "(end its chain with sigrid_hash, clamp, bucketize or mapid)",
                         plan->cols[c].name);
            }
        } else {
            dense_cols++;
            dense_width += n->width;
        }
    }
    rap_info("model inputs: %d dense columns (width %d), %d embedding tables (%lld rows in all)%s",
             dense_cols, dense_width, tables, (long long)table_rows,
             unbounded ? ", plus unbounded sparse columns (see warnings)" : "");
}

/* ---------------------------------------------------------------- main */

typedef struct {
    rap_plan *plan;
    rap_fusion fusion;
    rap_prep *prep;
    rap_reader *reader;
    rap_batch batch;
    rap_host_column *cols; /* (n_cols) */
    tsv_out out;
    bool out_open;
    rap_shard_writer *shard;
    char tmp_input[512];
    int exit_code; /* cli_check_rejected's, its message printed */
} prep_job;

static void job_free(prep_job *j)
{
    if (j->cols) {
        for (int c = 0; j->plan && c < j->plan->n_cols; c++)
            rap_host_column_free(&j->cols[c]);
        rap_free(j->cols);
    }
    g_reader = NULL;
    rap_reader_close(j->reader);
    rap_prep_free(j->prep);
    rap_batch_free(&j->batch);
    rap_fusion_free(&j->fusion);
    rap_plan_free(j->plan);
    if (j->tmp_input[0])
        remove(j->tmp_input);
}

static rap_status run(cli_settings *s, prep_job *j)
{
    RAP_TRY(cli_check_input("input", s->input)); /* before any work */
    RAP_TRY(cli_check_output("output", s->output));
    rap_device dev;
    RAP_TRY(cli_resolve_device(s->device, &dev));
    RAP_TRY(cli_load_plan_for(s, &j->plan));
    rap_plan *plan = j->plan;
    RAP_TRY(rap_fuse(plan, (rap_fuse_kind)s->fusion, &j->fusion));
    rap_info("plan %s: %d ops in %d kernels (%s fusion), %d output columns", plan->source,
             rap_plan_n_ops(plan), j->fusion.n, s->fusion == FUSE_NONE ? "no" : s->fusion == FUSE_LEVELS ? "level" : "level + row",
             plan->n_cols);
    print_model_inputs(plan);

    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = dev;
    pc.max_rows = s->batch;
    pc.threads = (int)s->threads;
    RAP_TRY(rap_prep_create(plan, &j->fusion, &pc, &j->prep));
    RAP_TRY(rap_batch_create(&j->batch, plan->schema, s->batch, dev == RAP_GPU));
    j->cols = rap_calloc(sizeof *j->cols * (size_t)(plan->n_cols ? plan->n_cols : 1), "columns");
    if (!j->cols)
        return RAP_ERR_NOMEM;

    RAP_TRY(cli_default_input(s, j->tmp_input, sizeof j->tmp_input));
    const char *in = s->input;
    RAP_TRY(rap_out_check_inputs(s->output, &in, 1));
    rap_reader_config rc = rap_reader_defaults();
    rc.input = s->input;
    cli_reader_options(s, &rc);
    rc.bad_rows = (rap_bad_rows)s->bad_rows;
    rc.follow = s->follow;
    rc.idle_timeout_s = s->idle_timeout;
    rc.max_line = s->max_line;
    rc.max_rows = s->max_rows;
    cli_print_reader_threads(s, &rc);
    RAP_TRY(rap_reader_open(&rc, &j->reader));
    g_reader = j->reader;

    if (s->output[0] && s->format == FMT_TSV) {
        RAP_TRY(out_open(&j->out, s->output));
        j->out_open = true;
        RAP_TRY(out_reserve(&j->out, 64 * (size_t)(plan->n_cols + 1)));
        put(&j->out, "label", 5);
        for (int c = 0; c < plan->n_cols; c++) {
            put(&j->out, "\t", 1);
            put(&j->out, plan->cols[c].name, strlen(plan->cols[c].name));
        }
        put(&j->out, "\n", 1);
    } else if (s->output[0]) {
        rap_shard_col *sc = rap_calloc(sizeof *sc * (size_t)(plan->n_cols ? plan->n_cols : 1), "shard columns");
        if (!sc)
            return RAP_ERR_NOMEM;
        for (int c = 0; c < plan->n_cols; c++) {
            const rap_node *n = &plan->nodes[plan->cols[c].node];
            snprintf(sc[c].name, sizeof sc[c].name, "%s", plan->cols[c].name);
            sc[c].kind = n->kind;
            sc[c].width = n->width;
            sc[c].bounded = n->bounded;
            sc[c].lo = n->lo;
            sc[c].hi = n->hi;
        }
        rap_status st = rap_shard_create(s->output, sc, plan->n_cols, &j->shard);
        rap_free(sc);
        RAP_TRY(st);
    }

    double t_start = rap_now(), t_read = 0, t_prep = 0, t_write = 0;
    int64_t batches = 0, rows = 0;
    for (;;) {
        double t0 = rap_now();
        RAP_TRY(rap_reader_next(j->reader, &j->batch));
        double t1 = rap_now();
        t_read += t1 - t0;
        if (j->batch.rows == 0)
            break;
        RAP_TRY(rap_prep_load(j->prep, &j->batch));
        RAP_TRY(rap_prep_run(j->prep));
        RAP_TRY(rap_prep_sync(j->prep));
        double t2 = rap_now();
        t_prep += t2 - t1;
        if (s->output[0]) {
            for (int c = 0; c < plan->n_cols; c++) {
                rap_host_column_free(&j->cols[c]);
                RAP_TRY(rap_prep_fetch(j->prep, c, &j->cols[c]));
            }
            const float *label = j->batch.label; /* the label passes through untouched */
            if (j->shard)
                RAP_TRY(rap_shard_write(j->shard, label, j->batch.rows, j->cols));
            else
                RAP_TRY(write_tsv_rows(&j->out, plan, label, j->batch.rows, j->cols));
        }
        t_write += rap_now() - t2;
        batches++;
        rows += j->batch.rows;
        if (rap_log_level() >= 3)
            rap_debug("batch %lld: %lld rows", (long long)batches, (long long)j->batch.rows);
    }
    double dt = rap_now() - t_start;
    rap_reader_stats st;
    rap_reader_get_stats(j->reader, &st);
    if (!s->quiet)
        rap_reader_print_stats(&st, stderr);
    if (!g_interrupted) { /* no usable row, or too many rejected: no output written */
        j->exit_code = cli_check_rejected("prep", s, &st);
        if (j->exit_code != CLI_EXIT_OK)
            return RAP_ERR_DATA;
    }
    if (j->out_open) {
        j->out_open = false;
        RAP_TRY(out_close(&j->out, true));
    }
    if (j->shard) {
        rap_shard_writer *w = j->shard;
        j->shard = NULL;
        RAP_TRY(rap_shard_close(w));
    }
    rap_info("prep: %lld rows in %lld batches on the %s in %.2f s: %.0f rows/s end to end "
             "(read+parse %.2f s, preprocess %.3f s = %.0f rows/s, %lld kernel launches, write %.2f s)",
             (long long)rows, (long long)batches, dev == RAP_GPU ? "GPU" : "CPU", dt,
             (double)rows / (dt > 0 ? dt : 1e-9), t_read, t_prep,
             (double)rows / (t_prep > 0 ? t_prep : 1e-9), (long long)rap_prep_launches(j->prep),
             t_write);
    if (s->output[0])
        rap_info("wrote %s (%s)", s->output, s->format == FMT_BIN ? "binary shard" : "TSV");
    if (g_interrupted)
        return rap_fail(RAP_ERR_INTERRUPTED, "interrupted: stopped after %lld rows (accounting above)",
                        (long long)rows);
    return RAP_OK;
}

int cmd_prep(int argc, char **argv)
{
    cli_settings s;
    cli_parse("prep", CMD_PREP, argc, argv, &s);
    prep_job j;
    memset(&j, 0, sizeof j);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rap_status st = run(&s, &j);
    if (st != RAP_OK) {
        if (j.out_open)
            out_close(&j.out, false);
        rap_shard_abort(j.shard);
        j.shard = NULL;
        if (j.reader && st != RAP_ERR_INTERRUPTED && !j.exit_code) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", rap_last_error());
            rap_reader_stats rs;
            rap_reader_get_stats(j.reader, &rs);
            rap_reader_print_stats(&rs, stderr); /* the failure's context, even with --quiet */
            rap_fail(st, "%s", msg);
        }
    }
    int code = j.exit_code ? j.exit_code : st == RAP_OK ? 0 : cli_fail("prep", st);
    job_free(&j);
    return code;
}
