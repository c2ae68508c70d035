/* gen_schema.c -- synthetic rows of any input schema with a hidden teacher
 * (docs/GENERATOR.md "Any schema"), for tests and demos that need no
 * outside data: rap gen --schema.
 *
 * Per field, in file order (j counts the fields of that kind):
 *   label    Bernoulli(sigmoid(bias + z)), bias set once on a calibration
 *            sample so that 25% of the rows are positive;
 *   dense    null (empty) with probability 0.1; float: N(0, 1) printed
 *            with 6 significant digits; int32: a count floor(4 (U^-1 - 1))
 *            capped at 10^6;
 *   sparse   null with probability 0.05 (an empty field; a list: the null
 *            token); a plain field one id of rank r ~ Zipf(1.05) over
 *            card_j ranks; a list L ids of independent ranks, L geometric
 *            on {0, 1, ..} with mean list_mean, at most max_list;
 *   skip     a word "w<n>".
 * An id is the rank mixed with the column's key (a bijection of 64 bits):
 * hex its 64 bits in hex (hex32: the low 32), dec as a signed integer,
 * str "v" and the base-36 digits. The teacher's z: sum_j w_j x_j over the
 * dense fields (x = the float, or log1p of the count; a null 0.3 w_j) plus
 * sum over the sparse ids of eff(column, rank) (sum pooling, as the model
 * pools a bag), eff = 0.9 exp(-r/64) N(0, 1) for r < 256, a fixed world
 * from the schema alone: a seed only picks rows. Fields holding the
 * delimiter or a quote are written quoted (CSV); --header writes the
 * column names first (the file written through core/out, as every writer).
 * One thread: the bytes depend on the schema, the
 * seed, the cardinalities, list_mean and the format only. */
#include "data/gen.h"

#include "core/core.h"
#include "core/out.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define GS_EFF_RANKS 256
#define GS_CAL_ROWS 8192
#define GS_ID_BYTES 22 /* an id (at most 20 bytes) and its separator */
#define GS_WORLD 0x7261705f73636865ULL /* "rap_sche" */

typedef struct {
    const rap_input_schema *s;
    int64_t *card;   /* (NS) */
    rap_zipf *zipf;  /* (NS) */
    float *eff;      /* (NS, GS_EFF_RANKS) */
    float *w;        /* (ND) */
    double list_mean, bias;
    size_t field_cap, line_cap; /* bytes of a field, of a line, at most */
    char *field;                /* (field_cap) scratch */
} gs_world;

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* The id of rank r in sparse column j: a bijection of the 64 bits. */
static uint64_t gs_id(int j, uint64_t r)
{
    return mix64(r * 2 + 1 + mix64(GS_WORLD + (uint64_t)j) * 0x100000001ULL);
}

rap_status rap_gen_cardinalities_n(const char *spec, int n, int64_t *card)
{
    const char *p = spec ? spec : "";
    int k = 0;
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > RAP_GEN_MAX_CARD || (*end && *end != ',') ||
            k >= n)
            return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": expected %d comma-separated "
                            "integers in [1, %lld] (one a sparse column of the schema), or one "
                            "for all", spec ? spec : "", n, RAP_GEN_MAX_CARD);
        card[k++] = v;
        if (!*end)
            break;
        p = end + 1;
    }
    if (k == 1)
        for (int j = 1; j < n; j++)
            card[j] = card[0];
    else if (k != n)
        return rap_fail(RAP_ERR_ARG, "cardinalities \"%s\": %d counts, the schema has %d sparse "
                        "columns", spec, k, n);
    return RAP_OK;
}

static double gs_normal(uint64_t *rng)
{
    double u = rap_gen_uniform(rng), v = rap_gen_uniform(rng);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

static void world_free(gs_world *w)
{
    for (int j = 0; w->zipf && j < w->s->n_sparse; j++)
        rap_zipf_free(&w->zipf[j]);
    rap_free(w->zipf);
    rap_free(w->card);
    rap_free(w->eff);
    rap_free(w->w);
    rap_free(w->field);
    memset(w, 0, sizeof *w);
}

/* Writes id of encoding enc into o; returns its length. */
static int put_id(char *o, rap_col_enc enc, uint64_t id)
{
    switch (enc) {
    case RAP_ENC_HEX32: return sprintf(o, "%x", (unsigned)(id & 0xffffffffu));
    case RAP_ENC_HEX64: return sprintf(o, "%llx", (unsigned long long)id);
    case RAP_ENC_DEC64: return sprintf(o, "%lld", (long long)(int64_t)id);
    default: {
        char d[16];
        int n = 0;
        uint64_t x = id >> 16; /* 48 bits: at most 10 base-36 digits */
        do {
            d[n++] = "0123456789abcdefghijklmnopqrstuvwxyz"[x % 36];
            x /= 36;
        } while (x);
        o[0] = 'v';
        for (int i = 0; i < n; i++)
            o[1 + i] = d[n - 1 - i];
        return n + 1;
    }
    }
}

/* The field f[0, n) into out, quoted when it must be (CSV). Returns the
 * bytes written. */
static int put_field(char *out, const char *f, int n, const rap_input_schema *s)
{
    bool q = false;
    if (s->delimiter != '\t')
        for (int i = 0; i < n && !q; i++)
            q = f[i] == s->delimiter || f[i] == '"';
    if (!q) {
        memcpy(out, f, (size_t)n);
        return n;
    }
    int k = 0;
    out[k++] = '"';
    for (int i = 0; i < n; i++) {
        if (f[i] == '"')
            out[k++] = '"';
        out[k++] = f[i];
    }
    out[k++] = '"';
    return k;
}

/* One row into line (no '\n'); *z its teacher score before the bias.
 * Returns the row's length; the label field is written by the caller
 * at label_at (1 byte reserved). */
static int make_row(const gs_world *w, uint64_t *rng, char *line, int *label_at, double *z)
{
    const rap_input_schema *s = w->s;
    char *f = w->field;
    int n = 0;
    double zz = 0.0;
    for (int c = 0; c < s->n_cols; c++) {
        const rap_schema_col *col = &s->cols[c];
        if (c)
            line[n++] = s->delimiter;
        int k = 0;
        switch (col->kind) {
        case RAP_COL_LABEL:
            *label_at = n;
            line[n++] = '0';
            continue;
        case RAP_COL_DENSE:
            if (rap_gen_uniform(rng) < 0.1) {
                zz += 0.3 * w->w[col->col];
            } else if (col->enc == RAP_ENC_INT32) {
                double u = rap_gen_uniform(rng);
                double x = floor(4.0 * (1.0 / (u > 1e-6 ? u : 1e-6) - 1.0));
                x = x > 1e6 ? 1e6 : x;
                k = sprintf(f, "%lld", (long long)x);
                zz += w->w[col->col] * log1p(x);
            } else {
                double x = gs_normal(rng);
                k = sprintf(f, "%.6g", x);
                zz += w->w[col->col] * strtod(f, NULL);
            }
            break;
        case RAP_COL_SPARSE: {
            const int j = col->col;
            bool null = rap_gen_uniform(rng) < 0.05;
            if (null && col->list_sep) {
                k = sprintf(f, "%s", s->null_token);
                break;
            }
            if (null)
                break;
            int64_t L = 1;
            if (col->list_sep) {
                double p = 1.0 / (w->list_mean + 1.0);
                L = 0;
                while (L < s->max_list && rap_gen_uniform(rng) >= p)
                    L++;
            }
            for (int64_t i = 0; i < L; i++) {
                int64_t r = rap_zipf_draw(&w->zipf[j], rng);
                if (i)
                    f[k++] = col->list_sep;
                k += put_id(f + k, col->enc, gs_id(j, (uint64_t)r));
                if (r < GS_EFF_RANKS)
                    zz += w->eff[j * GS_EFF_RANKS + r];
            }
            break;
        }
        default:
            k = sprintf(f, "w%u", (unsigned)(mix64(*rng += 0x9e3779b97f4a7c15ULL) % 1000));
            break;
        }
        n += put_field(line + n, f, k, s);
    }
    *z = zz;
    return n;
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The world of schema s: cardinalities, Zipf tables, effects, weights,
 * and the bias for 25% positives on a calibration sample. */
static rap_status world_init(gs_world *w, const rap_gen_config *cfg)
{
    const rap_input_schema *s = cfg->schema;
    memset(w, 0, sizeof *w);
    w->s = s;
    w->list_mean = cfg->list_mean > 0 ? cfg->list_mean : 3.0;
    int ns = s->n_sparse, nd = s->n_dense;
    w->card = rap_calloc(sizeof *w->card * (size_t)(ns + 1), "generator cardinalities");
    w->zipf = rap_calloc(sizeof *w->zipf * (size_t)(ns + 1), "generator Zipf tables");
    w->eff = rap_calloc(sizeof *w->eff * (size_t)(ns + 1) * GS_EFF_RANKS, "generator effects");
    w->w = rap_calloc(sizeof *w->w * (size_t)(nd + 1), "generator weights");
    /* a field: a list of max_list ids, a name, a number, the null token;
     * a line: every field quoted (each byte doubled, two quotes), delimiters */
    w->field_cap = (size_t)s->max_list * GS_ID_BYTES + 2 * RAP_SCHEMA_NAME + 64;
    w->line_cap = (size_t)s->n_cols * (2 * w->field_cap + 3) + 2;
    w->field = rap_malloc(w->field_cap, "generator field");
    if (!w->card || !w->zipf || !w->eff || !w->w || !w->field)
        return RAP_ERR_NOMEM;
    uint64_t rng = GS_WORLD;
    for (int j = 0; j < ns; j++) {
        w->card[j] = cfg->schema_card ? cfg->schema_card[j] : RAP_GEN_SCHEMA_CARD;
        if (w->card[j] < 1 || w->card[j] > RAP_GEN_MAX_CARD)
            return rap_fail(RAP_ERR_ARG, "gen: cardinality of sparse column %d must be in [1, "
                            "%lld], got %lld", j, RAP_GEN_MAX_CARD, (long long)w->card[j]);
        RAP_TRY(rap_zipf_init(&w->zipf[j], w->card[j], 1.05));
        for (int r = 0; r < GS_EFF_RANKS; r++)
            w->eff[j * GS_EFF_RANKS + r] = (float)(0.9 * exp(-r / 64.0) * gs_normal(&rng));
    }
    for (int j = 0; j < nd; j++)
        w->w[j] = (float)(0.5 * gs_normal(&rng));
    /* calibration: the bias for a 25% mean of sigmoid(bias + z) */
    double *z = rap_malloc(sizeof *z * GS_CAL_ROWS, "generator calibration");
    char *line = rap_malloc(w->line_cap, "generator line");
    if (!z || !line) {
        rap_free(z);
        rap_free(line);
        return RAP_ERR_NOMEM;
    }
    uint64_t cr = GS_WORLD ^ 0x63616c31ULL;
    for (int i = 0; i < GS_CAL_ROWS; i++) {
        int at;
        make_row(w, &cr, line, &at, &z[i]);
    }
    double lo = -20, hi = 20;
    for (int it = 0; it < 60; it++) {
        double b = 0.5 * (lo + hi), m = 0;
        for (int i = 0; i < GS_CAL_ROWS; i++)
            m += sigmoid(b + z[i]);
        if (m / GS_CAL_ROWS > 0.25)
            hi = b;
        else
            lo = b;
    }
    w->bias = 0.5 * (lo + hi);
    rap_free(z);
    rap_free(line);
    return RAP_OK;
}

/* The sink: a FILE (plain, stdout) or a gzFile (.gz). */
typedef struct {
    FILE *f;
    gzFile gz;
    const char *path;
} gs_out;

static rap_status out_write(gs_out *o, const char *p, size_t n)
{
    if (o->gz ? gzwrite(o->gz, p, (unsigned)n) != (int)n : fwrite(p, 1, n, o->f) != n)
        return rap_fail(RAP_ERR_IO, "%s: write failed: %s", o->path, strerror(errno));
    return RAP_OK;
}

/* The rows (header first) into o; fills res. */
static rap_status gen_rows(const rap_gen_config *cfg, const gs_world *w, gs_out *o,
                           rap_gen_result *res)
{
    const rap_input_schema *s = cfg->schema;
    char *line = rap_malloc(w->line_cap, "generator line");
    int64_t keep = cfg->rows < RAP_GEN_AUC_MAX_ROWS ? cfg->rows : RAP_GEN_AUC_MAX_ROWS;
    float *score = rap_malloc(sizeof *score * (size_t)(keep + 1), "generator scores");
    float *label = rap_malloc(sizeof *label * (size_t)(keep + 1), "generator labels");
    rap_status st = RAP_OK;
    if (!line || !score || !label)
        st = RAP_ERR_NOMEM;
    if (st == RAP_OK && s->header) {
        int n = 0;
        for (int c = 0; c < s->n_cols; c++) {
            if (c)
                line[n++] = s->delimiter;
            n += put_field(line + n, s->cols[c].name, (int)strlen(s->cols[c].name), s);
        }
        line[n++] = '\n';
        st = out_write(o, line, (size_t)n);
        res->bytes += n;
    }
    uint64_t rng = mix64((uint64_t)cfg->seed ^ GS_WORLD) + 1;
    for (int64_t i = 0; i < cfg->rows && st == RAP_OK; i++) {
        int at = 0;
        double z;
        int n = make_row(w, &rng, line, &at, &z);
        double p = sigmoid(w->bias + z);
        int y = rap_gen_uniform(&rng) < p;
        line[at] = (char)('0' + y);
        line[n++] = '\n';
        res->positives += y;
        if (i < keep) {
            score[i] = (float)p;
            label[i] = (float)y;
        }
        st = out_write(o, line, (size_t)n);
        res->bytes += n;
        res->rows++;
    }
    if (st == RAP_OK && keep > 0)
        res->teacher_auc = rap_auc(score, label, keep);
    rap_free(line);
    rap_free(score);
    rap_free(label);
    return st;
}

rap_status rap_gen_write_schema(const rap_gen_config *cfg, rap_gen_result *res)
{
    RAP_TRY(rap_input_schema_check(cfg->schema));
    if (!(cfg->list_mean >= 0) || cfg->list_mean > 4096)
        return rap_fail(RAP_ERR_ARG, "gen: list mean must be in [0, 4096] (0: 3), got %g",
                        cfg->list_mean);
    gs_world w;
    rap_status st = world_init(&w, cfg);
    if (st != RAP_OK) {
        world_free(&w);
        return st;
    }
    const char *path = cfg->out;
    size_t pl = strlen(path);
    bool gz = strcmp(path, "-") && pl > 3 && !strcmp(path + pl - 3, ".gz");
    rap_out_opts oo = {.dash_is_stdout = true};
    rap_out *out = NULL;
    st = rap_out_open(path, &oo, &out);
    gs_out o = {out ? rap_out_file(out) : NULL, NULL, path};
    if (st == RAP_OK && gz) { /* zlib writes through a dup of the output's descriptor */
        int fd = dup(rap_out_fd(out));
        o.gz = fd >= 0 ? gzdopen(fd, "wb1") : NULL;
        if (!o.gz) {
            if (fd >= 0)
                close(fd);
            st = rap_fail(RAP_ERR_IO, "%s: cannot start gzip output: %s", path, strerror(errno));
        }
    }
    if (st == RAP_OK)
        st = gen_rows(cfg, &w, &o, res);
    world_free(&w);
    if (o.gz && gzclose(o.gz) != Z_OK && st == RAP_OK)
        st = rap_fail(RAP_ERR_IO, "%s: gzip write failed: %s", path, strerror(errno));
    return out ? rap_out_close(out, st) : st;
}
