/*
 * memplan.c -- the memory plan of a run before anything is allocated
 * (memplan.h): each component sized by its allocator's own size function
 * (rap_model_mem_of, rap_prep_bytes, rap_input_bytes, rap_batch_bytes,
 * rap_rowfeed_bytes, rap_runtime_mem_of), checked against the free memory
 * with a reserve, and the table that shows it.
 */
#include "run/memplan.h"

#include "core/core.h"
#include "dist/hybrid.h"
#include "run/input.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Adds count components of `bytes` in all to pool (nothing for 0 bytes). */
static void add(rap_memplan *p, const char *what, int pool, bool pinned, int count, double bytes,
                const char *fmt, ...) RAP_PRINTF(7, 8);
static void add(rap_memplan *p, const char *what, int pool, bool pinned, int count, double bytes,
                const char *fmt, ...)
{
    if (bytes <= 0 || count <= 0)
        return;
    if (p->n == RAP_MEMPLAN_MAX) { /* cannot happen: the components are fewer */
        p->item[p->n - 1].bytes += bytes;
        p->total[pool] += bytes;
        return;
    }
    rap_mem_item *it = &p->item[p->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->what, sizeof it->what, "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof it->detail, fmt, ap);
    va_end(ap);
    it->pool = pool;
    it->pinned = pinned;
    it->count = count;
    it->bytes = bytes;
    p->total[pool] += bytes;
}

/* The model's parts on its device. */
static rap_status plan_model(const rap_memplan_config *c, rap_memplan *p, int dpool)
{
    rap_model_mem mm;
    RAP_TRY(rap_model_mem_of(c->model, c->device, &mm));
    const rap_model_config *m = c->model;
    const int te = m->shard ? m->shard->n_local : m->n_tables;
    for (int k = 0; k < RAP_MM_N; k++) {
        char d[80] = "";
        if (k == RAP_MM_TABLES || k == RAP_MM_TABLE_STATE)
            snprintf(d, sizeof d, "%d tables of dim %d, %s, %s", te, m->emb_dim,
                     rap_emb_dtype_name(m->emb_dtype), rap_optimizer_name(m->optimizer));
        else if (k == RAP_MM_ACT || k == RAP_MM_SORT)
            snprintf(d, sizeof d, "batch %lld", (long long)m->batch);
        else if (k >= RAP_MM_MLP && k <= RAP_MM_GRADS)
            snprintf(d, sizeof d, "%d + %d layers", m->n_bot, m->n_top);
        add(p, rap_model_mem_part_name(k), dpool, false, 1, (double)mm.part[k], "%s", d);
    }
    return RAP_OK;
}

/* count executors (and packing buffers) of B rows for plan on dev. */
static rap_status plan_execs(rap_memplan *p, const char *what, const rap_plan *plan,
                             const rap_fusion *fus, rap_device dev, int64_t B, int threads,
                             int count, int n_dense)
{
    if (count <= 0)
        return RAP_OK;
    rap_prep_config pc;
    memset(&pc, 0, sizeof pc);
    pc.device = dev;
    pc.max_rows = B;
    pc.threads = threads;
    double eb = 0;
    RAP_TRY(rap_prep_bytes(plan, fus, &pc, &eb));
    const int pool = dev == RAP_GPU ? RAP_MEM_DEVICE : RAP_MEM_HOST;
    char w[40];
    snprintf(w, sizeof w, "executor%s", what);
    add(p, w, pool, false, count, eb * count, "%d x %lld rows, %d kernels", count, (long long)B,
        fus->n);
    snprintf(w, sizeof w, "packing%s", what);
    add(p, w, pool, false, count, (double)rap_input_bytes(B, n_dense) * count,
        "%d x %lld rows x %d dense", count, (long long)B, n_dense);
    return RAP_OK;
}

/* The runtime's slots, jobs, blocks and ring. */
static rap_status plan_runtime(const rap_memplan_config *c, rap_memplan *p, int dpool)
{
    const rap_runtime_config *rc = c->runtime;
    rap_runtime_mem rm;
    RAP_TRY(rap_runtime_mem_of(rc, c->model, c->device, &rm));
    char w[40];
    snprintf(w, sizeof w, " (%s slots)", rap_mode_name(rc->mode));
    RAP_TRY(plan_execs(p, w, rc->plan, rc->fusion, c->device, rm.B, rc->prep_threads,
                       rm.slot_execs, rm.n_dense));
    RAP_TRY(plan_execs(p, " (cpu jobs)", rc->plan, rc->fusion, RAP_CPU, rm.B, 1, rm.host_execs,
                       rm.n_dense));
    const double raw = (double)rap_batch_bytes(rc->plan->schema, rm.B);
    add(p, "row share batches", RAP_MEM_HOST, rm.share_pinned, rm.share_batches, raw * rm.share_batches, "%d x %lld rows",
        rm.share_batches, (long long)rm.B);
    add(p, "model batch staging", RAP_MEM_HOST, true, rm.stage_blocks,
        (double)rm.blk_bytes * rm.stage_blocks, "%d jobs", rm.stage_blocks);
    add(p, "model batch blocks", dpool, false, rm.dev_blocks, (double)rm.blk_bytes * rm.dev_blocks,
        "%d slots", rm.dev_blocks);
    add(p, "loss ring", RAP_MEM_HOST, true, 1, (double)rm.ring_pinned, "%s", "pinned read-back");
    add(p, "step records", RAP_MEM_HOST, false, 1, (double)rm.records, "%s", "");
    if (rm.shard)
        p->skipped = "the shard's resident batches: sized by reading the shard, and checked "
                     "by the runtime before it allocates them";
    if (rm.mps)
        p->skipped = "mps mode: preprocessing runs in the server's process";
    return RAP_OK;
}

rap_status rap_memplan_make(const rap_memplan_config *c, rap_memplan *out)
{
    memset(out, 0, sizeof *out);
    out->avail[0] = out->avail[1] = out->used[0] = out->used[1] = -1;
    if (!c || !c->model)
        return rap_fail(RAP_ERR_ARG, "rap_memplan_make: a config with a model is required");
    out->device = c->device;
    const bool gpu = c->device == RAP_GPU;
    const int dpool = gpu ? RAP_MEM_DEVICE : RAP_MEM_HOST;
    out->reserve[RAP_MEM_DEVICE] = gpu ? RAP_MEMPLAN_GPU_RESERVE : 0;
    out->reserve[RAP_MEM_HOST] = RAP_MEMPLAN_HOST_RESERVE;
    RAP_TRY(plan_model(c, out, dpool));
    const int64_t B = c->model->batch;
    if (c->exec_plan)
        RAP_TRY(plan_execs(out, " (set-up)", c->exec_plan, c->exec_fusion, c->device, B,
                           c->exec_threads, 1, c->model->n_dense));
    if (c->runtime)
        RAP_TRY(plan_runtime(c, out, dpool));
    if (c->feed) {
        rap_rowfeed_mem fm;
        RAP_TRY(rap_rowfeed_bytes(c->feed, &fm));
        /* the GPU's parser keeps the rows on the device: the feed's
         * batches and the reader's are device memory then */
        const int fpool = fm.device ? RAP_MEM_DEVICE : RAP_MEM_HOST;
        add(out, "row feed batches", fpool, !fm.device && c->feed->pinned && gpu,
            c->feed->n_batches, (double)fm.pool, "%d x %lld rows", c->feed->n_batches,
            (long long)c->feed->batch_rows);
        add(out, "reader batch", fpool, false, 1, (double)fm.read_batch, "%s",
            "the rows copied out of the reader");
        add(out, "GPU parser", RAP_MEM_DEVICE, false, 1, (double)fm.parse_device, "%s",
            "its buffers and every slot's staging rows (40-byte lines at worst)");
        add(out, "GPU parser copies", RAP_MEM_HOST, true, 1, (double)fm.parse_pinned, "%s",
            "each parser thread's text, offsets and reject list");
        add(out, "reference parser", RAP_MEM_HOST, false, 1, (double)fm.parse_host, "%s",
            "the GPU parser's buffers and staging rows in host memory");
        add(out, "reader chunks", RAP_MEM_HOST, false, 1, (double)fm.chunks, "%s",
            "text read, a slot per parser and more");
        add(out, "parsed rows", RAP_MEM_HOST, false, 1, (double)fm.parsed, "%s",
            "estimate: 256 bytes of text a row");
    }
    const rap_schema s = c->runtime ? c->runtime->plan->schema
                         : c->exec_plan ? c->exec_plan->schema
                                        : rap_schema_criteo();
    if (c->eval_rows > 0)
        add(out, "evaluation batch", RAP_MEM_HOST, false, 1,
            (double)rap_batch_bytes(s, c->eval_rows), "%lld rows", (long long)c->eval_rows);
    if (c->step_batch) {
        add(out, "step batch", RAP_MEM_HOST, gpu, 1, (double)rap_batch_bytes(s, B), "%lld rows",
            (long long)B);
        add(out, "logits", RAP_MEM_HOST, false, 1, 4.0 * (double)B, "%lld rows", (long long)B);
    }
    if (c->ranks > 0 && c->map) {
        size_t hb = 0;
        RAP_TRY(rap_hybrid_bytes(c->map, c->rank, c->model, c->device, &hb));
        add(out, "hybrid exchange", dpool, false, 1, (double)hb, "rank %d of %d: all-to-all "
            "buffers, filtered tables", c->rank, c->ranks);
    }
    if (c->ranks > 1)
        out->skipped = "the id exchange (placement batch) and the planner's moves between "
                       "ranks are not sized yet; NCCL's own buffers are in the reserve";
    return RAP_OK;
}

/* /proc/meminfo's MemAvailable in bytes, -1 if unreadable. */
static double host_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    double got = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            got = (double)kb * 1024.0;
            break;
        }
    }
    fclose(f);
    return got;
}

/* The GPU's free bytes (current device), -1 if unknown. */
static double gpu_free(void)
{
    size_t fr = 0;
    if (!rap_gpu_available(NULL, 0) || rap_rt_mem_free(&fr) != RAP_OK) {
        rap_clear_error();
        return -1;
    }
    return (double)fr;
}

void rap_memplan_measure_avail(rap_memplan *p)
{
    p->avail[RAP_MEM_HOST] = host_available();
    p->avail[RAP_MEM_DEVICE] = p->device == RAP_GPU ? gpu_free() : -1;
}

void rap_memplan_measure_used(rap_memplan *p, int k)
{
    if (p->device != RAP_GPU || p->avail[RAP_MEM_DEVICE] < 0 || k < 0 || k > 1)
        return;
    const double f = gpu_free();
    if (f >= 0)
        p->used[k] = p->avail[RAP_MEM_DEVICE] - f;
}

/* The largest component of pool k. */
static const rap_mem_item *largest(const rap_memplan *p, int k)
{
    const rap_mem_item *best = NULL;
    for (int i = 0; i < p->n; i++)
        if (p->item[i].pool == k && (!best || p->item[i].bytes > best->bytes))
            best = &p->item[i];
    return best;
}

rap_status rap_memplan_check(const rap_memplan *p)
{
    for (int k = 0; k < 2; k++) {
        if (p->avail[k] < 0 || p->total[k] + p->reserve[k] <= p->avail[k])
            continue;
        const rap_mem_item *big = largest(p, k);
        return rap_fail(RAP_ERR_NOMEM,
                        "the memory plan needs %.2f GiB of %s memory (%.2f of buffers + %.2f "
                        "reserve), %.2f GiB %s; the largest part: %s, %.2f GiB (%s)",
                        (p->total[k] + p->reserve[k]) / GIB, k ? "host" : "GPU", p->total[k] / GIB,
                        p->reserve[k] / GIB, p->avail[k] / GIB, k ? "available" : "free",
                        big ? big->what : "-", big ? big->bytes / GIB : 0.0,
                        big ? big->detail : "");
    }
    return RAP_OK;
}

/* Appends to buf at *at (n bytes). */
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...) RAP_PRINTF(4, 5);
static void put(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    if (*at >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at = *at + (size_t)k < n ? *at + (size_t)k : n - 1;
}

void rap_memplan_format(const rap_memplan *p, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = 0;
    size_t at = 0;
    const bool gpu = p->device == RAP_GPU;
    put(buf, n, &at, "memory plan (%s run)\n  %-30s %-6s %12s  %s\n", gpu ? "GPU" : "CPU",
        "component", "where", "MiB", "sized by");
    for (int i = 0; i < p->n; i++) {
        const rap_mem_item *it = &p->item[i];
        put(buf, n, &at, "  %-30s %-6s %12.1f  %s\n", it->what,
            it->pool == RAP_MEM_DEVICE ? "gpu" : it->pinned ? "pinned" : "host",
            it->bytes / (1024.0 * 1024.0), it->detail);
    }
    for (int k = 0; k < 2; k++) {
        if (k == RAP_MEM_DEVICE && !gpu)
            continue;
        put(buf, n, &at, "  %s: %.3f GiB of buffers + %.3f GiB reserve = %.3f GiB", 
            k ? "host" : "GPU", p->total[k] / GIB, p->reserve[k] / GIB,
            (p->total[k] + p->reserve[k]) / GIB);
        if (p->avail[k] >= 0)
            put(buf, n, &at, "; %.3f GiB %s", p->avail[k] / GIB, k ? "available" : "free");
        put(buf, n, &at, "\n");
    }
    if (p->skipped)
        put(buf, n, &at, "  not counted: %s\n", p->skipped);
}

void rap_memplan_print(const rap_memplan *p, FILE *f)
{
    char buf[8192];
    rap_memplan_format(p, buf, sizeof buf);
    fputs(buf, f);
}

void rap_memplan_summary(const rap_memplan *p, char *buf, size_t n)
{
    size_t at = 0;
    if (!n)
        return;
    buf[0] = 0;
    const int k0 = p->device == RAP_GPU ? RAP_MEM_DEVICE : RAP_MEM_HOST;
    put(buf, n, &at, "memory: %s %.3f GiB planned (+%.3f reserve)", k0 ? "host" : "GPU",
        p->total[k0] / GIB, p->reserve[k0] / GIB);
    if (k0 == RAP_MEM_DEVICE) {
        for (int k = 0; k < 2; k++)
            if (p->used[k] >= 0)
                put(buf, n, &at, ", %.3f used %s (plan/use %.3f)", p->used[k] / GIB,
                    k ? "after the first steps" : "after set-up",
                    p->used[k] > 0 ? p->total[k0] / p->used[k] : NAN);
        put(buf, n, &at, "; host %.3f GiB planned", p->total[RAP_MEM_HOST] / GIB);
    }
}
