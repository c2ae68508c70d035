/* test_util.c -- helpers several test files share: the rap binary beside
 * the test program, scratch paths, checkpoint comparison, GEMM tuning off. */
#include "test.h"

#include "dist/comm.h"
#include "model/half.h"
#include "run/checkpoint.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

const char *rap_test_bin(void)
{
    static char rap[1024];
    if (!rap[0]) {
        char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        snprintf(rap, sizeof rap, "%s/rap", exe);
    }
    return rap;
}

int rap_test_run_rap(const char *args, char *out, size_t n)
{
    char log[512], cmd[4096];
    snprintf(log, sizeof log, "%s/rap_cli.log", rap_test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1 </dev/null", rap_test_bin(), args, log);
    int st = system(cmd);
    FILE *f = fopen(log, "rb");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void rap_test_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", rap_test_tmpdir(), name);
}

int rap_test_temporaries(const char *path)
{
    char dir[1024], pre[600], old[600];
    snprintf(dir, sizeof dir, "%s", path);
    char *s = strrchr(dir, '/');
    const char *base = s ? s + 1 : path;
    snprintf(pre, sizeof pre, ".%s.tmp.", base);
    snprintf(old, sizeof old, "%s.tmp", base);
    if (s)
        *s = 0;
    else
        snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(s && !dir[0] ? "/" : dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += !strncmp(e->d_name, pre, strlen(pre)) || !strcmp(e->d_name, old);
    if (d)
        closedir(d);
    return n;
}

bool rap_test_same_checkpoints(const char *a, const char *b, int *n_tensors)
{
    rap_ckpt *x = NULL, *y = NULL;
    bool same = rap_ckpt_open(a, &x) == RAP_OK && rap_ckpt_open(b, &y) == RAP_OK && x->n == y->n &&
                x->n > 0;
    for (int i = 0; same && i < x->n; i++) {
        int j = rap_ckpt_find(y, x->t[i].name);
        same = j >= 0 && y->t[j].end - y->t[j].begin == x->t[i].end - x->t[i].begin;
        if (!same)
            break;
        size_t bytes = (size_t)(x->t[i].end - x->t[i].begin);
        float *p = malloc(bytes + 4), *q = malloc(bytes + 4);
        same = p && q && rap_ckpt_read(x, i, p) == RAP_OK && rap_ckpt_read(y, j, q) == RAP_OK &&
               !memcmp(p, q, bytes);
        free(p);
        free(q);
    }
    if (n_tensors)
        *n_tensors = x ? x->n : 0;
    rap_ckpt_close(x);
    rap_ckpt_close(y);
    return same;
}

void rap_test_tune_off(rap_test_env *e)
{
    const char *v = getenv("RAP_GPU_TUNE");
    e->had = v != NULL;
    snprintf(e->val, sizeof e->val, "%s", v ? v : "");
    setenv("RAP_GPU_TUNE", "0", 1);
}

void rap_test_tune_restore(const rap_test_env *e)
{
    if (e->had)
        setenv("RAP_GPU_TUNE", e->val, 1);
    else
        unsetenv("RAP_GPU_TUNE");
}

/* ------------------------------------------------------------ distributed tests' kit */

int rap_test_sh(const char *cmd, char *out, size_t n)
{
    static int k;
    char log[512], script[512], full[2048];
    snprintf(log, sizeof log, "%s/sh_cmd_%d.log", rap_test_tmpdir(), k);
    snprintf(script, sizeof script, "%s/sh_cmd_%d.sh", rap_test_tmpdir(), k++);
    /* the whole command in a script: the time limit and the redirection
     * then cover every part of "a && b" */
    FILE *sf = fopen(script, "w");
    if (!sf) {
        snprintf(out, n, "cannot write %s", script);
        return -1;
    }
    fprintf(sf, "%s\n", cmd);
    fclose(sf);
    snprintf(full, sizeof full, "timeout 90 sh %s >%s 2>&1 </dev/null", script, log);
    int st = system(full);
    FILE *f = fopen(log, "rb");
    size_t got = f ? fread(out, 1, n - 1, f) : 0;
    out[got] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *rap_test_no_mpi(void)
{
    if (rap_dist_detect(NULL))
        return "already under mpirun";
    if (!rap_comm_have_mpi())
        return "rap was built without MPI (no mpicc/OpenMPI headers)";
    if (system("mpirun --version >/dev/null 2>&1") != 0)
        return "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)";
    return NULL;
}

static const char *const k_dist_plan =
    "df[\"int_0\"] = (df[\"int_0\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_1\"] = (df[\"int_1\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"int_4\"] = (df[\"int_4\"].fill_null(0).clamp(-3, 1e9) + 4).log()\n"
    "df[\"cat_0\"] = functional.sigrid_hash(df[\"cat_0\"].fill_null(0), 0, 300)\n"
    "df[\"cat_1\"] = functional.sigrid_hash(df[\"cat_1\"].fill_null(0), 0, 200)\n"
    "df[\"cat_2\"] = functional.sigrid_hash(df[\"cat_2\"].fill_null(0), 0, 1000)\n"
    "df[\"cat_3\"] = functional.sigrid_hash(df[\"cat_3\"].fill_null(0), 0, 50)\n"
    "df[\"cat_4\"] = functional.sigrid_hash(df[\"cat_4\"].fill_null(0), 0, 700)\n";

bool rap_test_dist_inputs(rap_test_ctx *t, uint64_t seed, const char *tag, char *plan, char *data,
                          size_t n)
{
    char name[128];
    snprintf(name, sizeof name, "%s.plan", tag);
    rap_test_path(plan, n, name);
    FILE *f = fopen(plan, "w");
    if (!f)
        return false;
    fputs(k_dist_plan, f);
    for (int i = 0; i < 13; i++)
        if (i != 0 && i != 1 && i != 4)
            fprintf(f, "del df[\"int_%d\"]\n", i);
    for (int i = 5; i < 26; i++)
        fprintf(f, "del df[\"cat_%d\"]\n", i);
    fclose(f);
    snprintf(name, sizeof name, "%s_rows.tsv", tag);
    rap_test_path(data, n, name);
    rap_gen_config g;
    memset(&g, 0, sizeof g);
    g.rows = 3000;
    g.seed = seed;
    g.out = data;
    if (rap_gen_cardinalities("kaggle", g.card) != RAP_OK)
        return false;
    rap_gen_result r;
    if (rap_gen_write(&g, &r) != RAP_OK) {
        rap_test_fail(t, __FILE__, __LINE__, "rap gen: %s", rap_last_error());
        return false;
    }
    return true;
}

int rap_test_read_losses(const char *path, double *loss, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        if (!strstr(line, "\"event\":\"step\""))
            continue;
        const char *p = strstr(line, "\"loss\":");
        if (p)
            loss[n++] = atof(p + 7);
    }
    fclose(f);
    return n;
}

/* Element e of a tensor of type dt at p, as a double. */
static double st_value(const void *p, rap_st_dtype dt, size_t e)
{
    if (dt == RAP_ST_F32)
        return ((const float *)p)[e];
    uint16_t h = ((const uint16_t *)p)[e];
    return dt == RAP_ST_BF16 ? rap_bf16_to_f32(h) : rap_fp16_to_f32(h);
}

bool rap_test_close_weights(const char *a, const char *b, bool state, double tol, double *worst,
                            char *why, size_t wn)
{
    char ga[600];
    snprintf(ga, sizeof ga, "%s.gathered", a);
    *worst = 0;
    if (rap_ckpt_gather(a, ga, state) != RAP_OK) {
        snprintf(why, wn, "gather %s: %s", a, rap_last_error());
        return false;
    }
    rap_ckpt *x = NULL, *y = NULL;
    bool ok = rap_ckpt_open(ga, &x) == RAP_OK && rap_ckpt_open(b, &y) == RAP_OK;
    if (!ok)
        snprintf(why, wn, "open: %s", rap_last_error());
    if (ok && x->n != y->n) {
        snprintf(why, wn, "%d tensors in %s, %d in %s", x->n, a, y->n, b);
        ok = false;
    }
    for (int i = 0; ok && i < y->n; i++) {
        int j = rap_ckpt_find(x, y->t[i].name);
        size_t bytes = (size_t)(y->t[i].end - y->t[i].begin);
        if (j < 0 || (size_t)(x->t[j].end - x->t[j].begin) != bytes ||
            x->t[j].dtype != y->t[i].dtype) {
            snprintf(why, wn, "tensor %s missing or of another size or type in %s", y->t[i].name,
                     a);
            ok = false;
            break;
        }
        void *p = malloc(bytes + 4), *q = malloc(bytes + 4);
        ok = p && q && rap_ckpt_read(x, j, p) == RAP_OK && rap_ckpt_read(y, i, q) == RAP_OK;
        const rap_st_dtype dt = y->t[i].dtype;
        for (size_t e = 0; ok && e < bytes / rap_st_dtype_size(dt); e++) {
            double u = st_value(p, dt, e), v = st_value(q, dt, e);
            double d = fabs(u - v);
            if (d > *worst)
                *worst = d;
            if (d > tol * (1 + fabs(v))) {
                snprintf(why, wn, "%s[%zu]: %.9g in %s, %.9g in %s", y->t[i].name, e, u, a, v, b);
                ok = false;
            }
        }
        free(p);
        free(q);
    }
    rap_ckpt_close(x);
    rap_ckpt_close(y);
    return ok;
}

/* ------------------------------------------------------------ thread ranks */

typedef struct {
    rap_test_rank *x;
    rap_test_rank_fn fn;
} rank_start;

static void *rank_main(void *p)
{
    rank_start *s = p;
    s->x->st = s->fn(s->x);
    if (s->x->st != RAP_OK) {
        snprintf(s->x->err, sizeof s->x->err, "%s", rap_last_error());
        rap_comm_abort(s->x->c, 1); /* the others fail at once instead of timing out */
    }
    return NULL;
}

bool rap_test_run_ranks(rap_test_ctx *t, int R, double timeout, rap_test_rank_fn fn, void *arg,
                        rap_test_rank *x)
{
    rap_comm *c[8];
    rank_start s[8];
    pthread_t th[8];
    if (R < 1 || R > 8) {
        rap_test_fail(t, __FILE__, __LINE__, "rap_test_run_ranks: %d ranks (1..8)", R);
        return false;
    }
    if (rap_comm_threads_create(R, c) != RAP_OK) {
        rap_test_fail(t, __FILE__, __LINE__, "threads comm: %s", rap_last_error());
        return false;
    }
    for (int r = 0; r < R; r++) {
        memset(&x[r], 0, sizeof x[r]);
        x[r].rank = r;
        x[r].R = R;
        x[r].c = c[r];
        x[r].arg = arg;
        rap_comm_set_timeout(c[r], timeout);
        s[r] = (rank_start){&x[r], fn};
        pthread_create(&th[r], NULL, rank_main, &s[r]);
    }
    bool ok = true;
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < R; r++) {
        if (x[r].st != RAP_OK) {
            rap_test_fail(t, __FILE__, __LINE__, "R = %d rank %d: %s: %s", R, r,
                          rap_status_name(x[r].st), x[r].err);
            ok = false;
        }
        rap_comm_free(c[r]);
    }
    return ok;
}

/* ------------------------------------------------------------ Criteo text */

/* A good line for (seed, i): nulls, negative ints, mixed-case hex. */
int rap_test_criteo_line(char *out, uint64_t seed, int64_t i)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)i;
    int n = sprintf(out, "%d\t%lld", (int)(rap_splitmix64(&s) & 1), (long long)i);
    for (int j = 1; j < RAP_CRITEO_DENSE; j++) {
        uint64_t z = rap_splitmix64(&s);
        n += z % 9 == 0 ? sprintf(out + n, "\t")
                        : sprintf(out + n, "\t%lld", (long long)((int64_t)(z >> 40) % 5000) - 3);
    }
    for (int j = 0; j < RAP_CRITEO_SPARSE; j++) {
        uint64_t z = rap_splitmix64(&s);
        n += z % 9 == 0 ? sprintf(out + n, "\t")
                        : sprintf(out + n, (z & 1024) ? "\t%08x" : "\t%X", (unsigned)(z >> 32));
    }
    out[n++] = '\n';
    out[n] = 0;
    return n;
}

/* Replaces field f (0-based) of line l (k bytes with '\n') by v. */
static int set_field(char *l, int k, int f, const char *v)
{
    int a = 0;
    for (int i = 0; i < f; i++)
        a = (int)(strchr(l + a, '\t') - l) + 1;
    int b = a;
    while (l[b] != '\t' && l[b] != '\n')
        b++;
    int vl = (int)strlen(v);
    memmove(l + a + vl, l + b, (size_t)(k - b + 1));
    memcpy(l + a, v, (size_t)vl);
    return k - (b - a) + vl;
}

/* lines lines, about one in four malformed in one of many ways (the CPU
 * parser's every reason, overflow at the boundaries, CRLF, empty, long,
 * binary, garbage); the last line without '\n' when tail. */
size_t rap_test_criteo_text(char *out, int64_t lines, uint64_t seed, bool tail)
{
    static const char *ints[] = {"2147483648", "-2147483649", "99999999999", "12a", "-", "+5",
                                 "2147483647", "-2147483648", "00000000002147483647"};
    static const char *cats[] = {"123456789", "xyz", "0000000g", "ABCDEF01", "-1", "fffffffff"};
    size_t n = 0;
    uint64_t s = seed;
    char l[4096];
    for (int64_t i = 0; i < lines; i++) {
        int k = rap_test_criteo_line(l, seed, i);
        uint64_t z = rap_splitmix64(&s);
        switch (z % 24) {
        case 0: k = set_field(l, k, 0, (z & 256) ? "2" : ""); break;
        case 1: k = set_field(l, k, 1 + (int)((z >> 8) % RAP_CRITEO_DENSE), ints[(z >> 16) % 9]); break;
        case 2: k = set_field(l, k, 1 + RAP_CRITEO_DENSE + (int)((z >> 8) % RAP_CRITEO_SPARSE), cats[(z >> 16) % 6]); break;
        case 3: l[k - 1] = '\r'; l[k++] = '\n'; break;
        case 4: l[0] = '\n'; k = 1; break;
        case 5: { /* a field dropped or doubled */
            char *tb = strchr(l, '\t');
            if (z & 256) {
                memmove(tb, tb + 1, (size_t)k - (size_t)(tb - l));
                k--;
            } else {
                memmove(tb + 1, tb, (size_t)k - (size_t)(tb - l));
                k++;
            }
            break;
        }
        case 6: { /* long, maybe a binary byte or '\r' late */
            int len = 250 + (int)((z >> 8) % 900);
            for (int j = 0; j < len; j++)
                l[j] = (j % 9 == 8) ? '\t' : '7';
            if (z & (1 << 20))
                l[len - 1 - (int)((z >> 24) % 200)] = (z & (1 << 21)) ? '\r' : 0x01;
            l[len] = '\n';
            k = len + 1;
            break;
        }
        case 7: /* a byte changed */
            l[(z >> 8) % (uint64_t)(k - 1)] = (char)((z >> 32) | 1);
            if (l[(z >> 8) % (uint64_t)(k - 1)] == '\n')
                l[(z >> 8) % (uint64_t)(k - 1)] = 'n';
            break;
        case 8: /* garbage */
            k = (int)((z >> 8) % 100);
            for (int j = 0; j < k; j++) {
                l[j] = (char)(rap_splitmix64(&s) & 0xff);
                if (l[j] == '\n')
                    l[j] = '\t';
            }
            l[k++] = '\n';
            break;
        default: break;
        }
        memcpy(out + n, l, (size_t)k);
        n += (size_t)k;
    }
    if (tail && n > 0 && out[n - 1] == '\n')
        n--;
    return n;
}

/* ------------------------------------------------------------ raw batches */

uint64_t rap_test_rnd(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

float rap_test_round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

double rap_test_rnd01(uint64_t *s)
{
    return (double)(rap_test_rnd(s) >> 11) * (1.0 / 9007199254740992.0);
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rap_test_rnd_float(uint64_t *s)
{
    switch (rap_test_rnd(s) % 20) {
    case 0: /* NaN with a random payload and sign */
        return bits_float((0x7f800001u + (uint32_t)(rap_test_rnd(s) % 0x7fffffu)) |
                          (rap_test_rnd(s) & 1 ? 0x80000000u : 0));
    case 1: return rap_test_rnd(s) & 1 ? INFINITY : -INFINITY;
    case 2: return rap_test_rnd(s) & 1 ? 0.0f : -0.0f;
    case 3: return (float)((rap_test_rnd01(s) - 0.5) * 2e30);
    case 4: return bits_float((uint32_t)(rap_test_rnd(s) % 0x800000u)); /* subnormal */
    case 5: case 6: return (float)(int)(rap_test_rnd(s) % 21) - 5.0f;
    case 7: case 8: case 9: return (float)rap_test_rnd01(s);
    case 10: return (float)(rap_test_rnd01(s) * 1e5);
    default: return (float)((rap_test_rnd01(s) - 0.5) * 40.0);
    }
}

void rap_test_rnd_dense(uint64_t *s, int64_t n, bool nulls, float **x, uint8_t **valid)
{
    *x = malloc(sizeof **x * (size_t)n);
    *valid = nulls ? malloc((size_t)n) : NULL;
    for (int64_t r = 0; r < n; r++) {
        (*x)[r] = rap_test_rnd_float(s);
        if (*valid) {
            (*valid)[r] = rap_test_rnd(s) % 100 >= 15;
            if (!(*valid)[r])
                (*x)[r] = 0.0f;
        }
    }
}

rap_status rap_test_plan_text(const char *text, const char *source, rap_plan **out)
{
    RAP_TRY(rap_plan_parse(text, source, rap_schema_criteo(), out));
    rap_plan *p = *out;
    for (int c = p->n_cols - 1; c >= 0; c--)
        if (p->nodes[p->cols[c].node].op == RAP_OP_INPUT) {
            char n[64];
            snprintf(n, sizeof n, "%s", p->cols[c].name);
            RAP_TRY(rap_plan_drop(p, n));
        }
    rap_plan_finish(p);
    return RAP_OK;
}

const char *rap_test_plan_path(const char *name, char *buf, size_t n)
{
    static const char *const pre[] = {"plans/", "../plans/", "../../plans/"};
    for (size_t k = 0; k < sizeof pre / sizeof pre[0]; k++) {
        snprintf(buf, n, "%s%s", pre[k], name);
        if (access(buf, R_OK) == 0)
            return buf;
    }
    return NULL;
}

void rap_test_fill_batch(rap_batch *b, int64_t rows, uint64_t seed)
{
    uint64_t s = seed;
    const int64_t cap = b->cap, K = b->schema.ids_per_row;
    b->rows = rows;
    for (int64_t r = 0; r < rows; r++)
        b->label[r] = (float)(rap_test_rnd(&s) & 1);
    for (int j = 0; j < b->schema.n_dense; j++)
        for (int64_t r = 0; r < rows; r++) {
            bool v = rap_test_rnd01(&s) > 0.1;
            b->dense_valid[j * cap + r] = v;
            b->dense[j * cap + r] = v ? (float)(rap_test_rnd01(&s) * 50 - 5) : 0;
        }
    for (int j = 0; j < b->schema.n_sparse; j++) {
        int64_t *off = b->sparse_off + j * (cap + 1);
        int64_t *ids = b->sparse_ids + j * cap * K;
        off[0] = 0;
        for (int64_t r = 0; r < rows; r++) {
            bool v = rap_test_rnd01(&s) > 0.1;
            b->sparse_valid[j * cap + r] = v;
            int64_t n = v ? (int64_t)(rap_test_rnd(&s) % (uint64_t)(K + 1)) : 0;
            for (int64_t q = 0; q < n; q++)
                ids[off[r] + q] = (int64_t)(rap_test_rnd(&s) >> 33);
            off[r + 1] = off[r] + n;
        }
    }
}
