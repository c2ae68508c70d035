// parquet.cc -- the C interface of parquet.h over Apache Arrow's C++
// Parquet reader: open a file, name its columns' types, copy one row
// group's columns into plain C arrays. The one C++ file of rap, kept to
// that (docs/BUILD.md says why the dependency): every decision about rows
// is parquet_rows.c's, in C. No exception leaves this file; every Arrow
// status becomes a rap_status with a message naming the file.
#include "data/parquet.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/core.h"

struct rap_pq {
    std::string path;
    std::shared_ptr<arrow::io::ReadableFile> file;
    std::unique_ptr<parquet::arrow::FileReader> reader;
    std::shared_ptr<arrow::Schema> schema;
};

extern "C" bool rap_pq_built(char *why, size_t n)
{
    if (why && n)
        why[0] = 0;
    return true;
}

static rap_status arrow_fail(rap_status st, const std::string &path, const char *what,
                             const arrow::Status &s)
{
    return rap_fail(st, "%s: %s: %s", path.c_str(), what, s.ToString().c_str());
}

extern "C" rap_status rap_pq_open(const char *path, rap_pq **out)
{
    *out = nullptr;
    try {
        std::unique_ptr<rap_pq> p(new rap_pq);
        p->path = path;
        auto f = arrow::io::ReadableFile::Open(path);
        if (!f.ok())
            return arrow_fail(RAP_ERR_IO, p->path, "cannot open", f.status());
        p->file = *f;
        auto r = parquet::arrow::OpenFile(p->file, arrow::default_memory_pool());
        if (!r.ok())
            return arrow_fail(RAP_ERR_DATA, p->path, "not a readable Parquet file (truncated "
                              "or corrupt footer?)", r.status());
        p->reader = std::move(*r);
        arrow::Status s = p->reader->GetSchema(&p->schema);
        if (!s.ok())
            return arrow_fail(RAP_ERR_DATA, p->path, "its schema", s);
        *out = p.release();
        return RAP_OK;
    } catch (const std::exception &e) {
        return rap_fail(RAP_ERR_DATA, "%s: not a readable Parquet file: %s", path, e.what());
    }
}

extern "C" void rap_pq_close(rap_pq *p) { delete p; }

extern "C" int rap_pq_groups(const rap_pq *p) { return p->reader->num_row_groups(); }

extern "C" int64_t rap_pq_rows(const rap_pq *p)
{
    return p->reader->parquet_reader()->metadata()->num_rows();
}

extern "C" int64_t rap_pq_group_rows(const rap_pq *p, int g)
{
    return p->reader->parquet_reader()->metadata()->RowGroup(g)->num_rows();
}

extern "C" int rap_pq_find(const rap_pq *p, const char *name)
{
    return p->schema->GetFieldIndex(name);
}

static bool pq_is_int(arrow::Type::type t)
{
    switch (t) {
    case arrow::Type::INT8: case arrow::Type::INT16: case arrow::Type::INT32:
    case arrow::Type::INT64: case arrow::Type::UINT8: case arrow::Type::UINT16:
    case arrow::Type::UINT32: case arrow::Type::UINT64: return true;
    default: return false;
    }
}

static bool pq_is_string(arrow::Type::type t)
{
    return t == arrow::Type::STRING || t == arrow::Type::LARGE_STRING ||
           t == arrow::Type::BINARY || t == arrow::Type::LARGE_BINARY;
}

static rap_pq_type type_of(const arrow::DataType &t)
{
    arrow::Type::type id = t.id();
    if (id == arrow::Type::BOOL)
        return RAP_PQ_BOOL;
    if (pq_is_int(id))
        return RAP_PQ_INT;
    if (id == arrow::Type::FLOAT || id == arrow::Type::DOUBLE)
        return RAP_PQ_FLOAT;
    if (pq_is_string(id))
        return RAP_PQ_STRING;
    if (id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST) {
        const auto &v = id == arrow::Type::LIST
                            ? static_cast<const arrow::ListType &>(t).value_type()
                            : static_cast<const arrow::LargeListType &>(t).value_type();
        if (pq_is_int(v->id()))
            return RAP_PQ_LIST_INT;
        if (pq_is_string(v->id()))
            return RAP_PQ_LIST_STRING;
    }
    return RAP_PQ_OTHER;
}

extern "C" rap_pq_type rap_pq_col_type(const rap_pq *p, int c, char *name, size_t n)
{
    const auto &t = *p->schema->field(c)->type();
    if (name && n)
        snprintf(name, n, "%s", t.ToString().c_str());
    return type_of(t);
}

/* ------------------------------------------------------------ copies */

static int64_t int_at(const arrow::Array &a, int64_t i)
{
    switch (a.type_id()) {
    case arrow::Type::INT8: return static_cast<const arrow::Int8Array &>(a).Value(i);
    case arrow::Type::INT16: return static_cast<const arrow::Int16Array &>(a).Value(i);
    case arrow::Type::INT32: return static_cast<const arrow::Int32Array &>(a).Value(i);
    case arrow::Type::INT64: return static_cast<const arrow::Int64Array &>(a).Value(i);
    case arrow::Type::UINT8: return static_cast<const arrow::UInt8Array &>(a).Value(i);
    case arrow::Type::UINT16: return static_cast<const arrow::UInt16Array &>(a).Value(i);
    case arrow::Type::UINT32: return static_cast<const arrow::UInt32Array &>(a).Value(i);
    case arrow::Type::UINT64:
        return (int64_t) static_cast<const arrow::UInt64Array &>(a).Value(i);
    case arrow::Type::BOOL: return static_cast<const arrow::BooleanArray &>(a).Value(i);
    default: return 0;
    }
}

static double float_at(const arrow::Array &a, int64_t i)
{
    switch (a.type_id()) {
    case arrow::Type::FLOAT: return static_cast<const arrow::FloatArray &>(a).Value(i);
    default: return static_cast<const arrow::DoubleArray &>(a).Value(i);
    }
}

static std::string_view bytes_at(const arrow::Array &a, int64_t i)
{
    switch (a.type_id()) {
    case arrow::Type::STRING: return static_cast<const arrow::StringArray &>(a).GetView(i);
    case arrow::Type::LARGE_STRING:
        return static_cast<const arrow::LargeStringArray &>(a).GetView(i);
    case arrow::Type::BINARY: return static_cast<const arrow::BinaryArray &>(a).GetView(i);
    default: return static_cast<const arrow::LargeBinaryArray &>(a).GetView(i);
    }
}

/* Grows a malloc'd array to hold n elements of size sz (doubling). */
static bool grow(void **p, int64_t *cap, int64_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    int64_t c = *cap * 2 > n ? *cap * 2 : n + 16;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* Appends the rows of chunk a (of column type t) to out. */
static bool append_chunk(const arrow::Array &a, rap_pq_type t, rap_pq_column *out, int64_t *bcap,
                         int64_t *icap, int64_t *nbytes)
{
    const int64_t n0 = out->n, n = a.length();
    for (int64_t i = 0; i < n; i++) {
        int64_t r = n0 + i;
        out->valid[r] = a.IsValid(i) ? 1 : 0;
        switch (t) {
        case RAP_PQ_BOOL:
        case RAP_PQ_INT: out->i64[r] = out->valid[r] ? int_at(a, i) : 0; break;
        case RAP_PQ_FLOAT: out->f64[r] = out->valid[r] ? float_at(a, i) : 0.0; break;
        case RAP_PQ_STRING: {
            std::string_view v = out->valid[r] ? bytes_at(a, i) : std::string_view();
            if (!grow((void **)&out->bytes, bcap, *nbytes + (int64_t)v.size() + 1, 1))
                return false;
            memcpy(out->bytes + *nbytes, v.data(), v.size());
            *nbytes += (int64_t)v.size();
            out->off[r + 1] = *nbytes;
            break;
        }
        default: { /* lists */
            const bool large = a.type_id() == arrow::Type::LARGE_LIST;
            int64_t b = 0, e = 0;
            if (out->valid[r]) {
                if (!large) {
                    b = static_cast<const arrow::ListArray &>(a).value_offset(i);
                    e = b + static_cast<const arrow::ListArray &>(a).value_length(i);
                } else {
                    b = static_cast<const arrow::LargeListArray &>(a).value_offset(i);
                    e = b + static_cast<const arrow::LargeListArray &>(a).value_length(i);
                }
            }
            const arrow::Array &v =
                large ? *static_cast<const arrow::LargeListArray &>(a).values()
                      : *static_cast<const arrow::ListArray &>(a).values();
            int64_t m = out->m + (e - b), before = *icap;
            if (!grow((void **)&out->ivalid, icap, m + 1, 1))
                return false;
            if (*icap != before) { /* the items' other array follows ivalid's capacity */
                int64_t **q = t == RAP_PQ_LIST_INT ? &out->i64 : &out->soff;
                int64_t *g = (int64_t *)realloc(*q, (size_t)(*icap + 1) * 8);
                if (!g)
                    return false;
                *q = g;
            }
            for (int64_t k = b; k < e; k++) {
                int64_t at = out->m++;
                out->ivalid[at] = v.IsValid(k) ? 1 : 0;
                if (t == RAP_PQ_LIST_INT) {
                    out->i64[at] = out->ivalid[at] ? int_at(v, k) : 0;
                } else {
                    std::string_view s = out->ivalid[at] ? bytes_at(v, k) : std::string_view();
                    if (!grow((void **)&out->bytes, bcap, *nbytes + (int64_t)s.size() + 1, 1))
                        return false;
                    memcpy(out->bytes + *nbytes, s.data(), s.size());
                    *nbytes += (int64_t)s.size();
                    out->soff[at + 1] = *nbytes;
                }
            }
            out->off[r + 1] = out->m;
            break;
        }
        }
    }
    out->n = n0 + n;
    return true;
}

/* Copies column a (all chunks) of type t into out. */
static rap_status copy_column(const rap_pq *p, int g, int c, const arrow::ChunkedArray &a,
                              rap_pq_type t, rap_pq_column *out)
{
    memset(out, 0, sizeof *out);
    out->type = t;
    const int64_t n = a.length();
    out->valid = (uint8_t *)malloc((size_t)n + 1);
    bool ok = out->valid != nullptr;
    if (t == RAP_PQ_BOOL || t == RAP_PQ_INT)
        ok = ok && (out->i64 = (int64_t *)malloc((size_t)(n + 1) * 8));
    if (t == RAP_PQ_FLOAT)
        ok = ok && (out->f64 = (double *)malloc((size_t)(n + 1) * 8));
    if (t == RAP_PQ_STRING || t == RAP_PQ_LIST_INT || t == RAP_PQ_LIST_STRING)
        ok = ok && (out->off = (int64_t *)calloc((size_t)n + 1, 8));
    if (t == RAP_PQ_LIST_STRING)
        ok = ok && (out->soff = (int64_t *)calloc(1, 8));
    int64_t bcap = 0, icap = 0, nbytes = 0;
    for (int k = 0; ok && k < a.num_chunks(); k++) {
        if (type_of(*a.chunk(k)->type()) != t)
            return rap_fail(RAP_ERR_DATA, "%s: row group %d, column \"%s\": a chunk of type %s",
                            p->path.c_str(), g, p->schema->field(c)->name().c_str(),
                            a.chunk(k)->type()->ToString().c_str());
        ok = append_chunk(*a.chunk(k), t, out, &bcap, &icap, &nbytes);
    }
    if (!ok)
        return rap_fail(RAP_ERR_NOMEM, "%s: out of memory reading row group %d",
                        p->path.c_str(), g);
    return RAP_OK;
}

extern "C" rap_status rap_pq_read(rap_pq *p, int g, const int *cols, int k, rap_pq_column *out)
{
    for (int i = 0; i < k; i++)
        memset(&out[i], 0, sizeof out[i]);
    if (g < 0 || g >= rap_pq_groups(p))
        return rap_fail(RAP_ERR_ARG, "%s: no row group %d", p->path.c_str(), g);
    try {
        /* the leaf columns of the top-level ones asked for */
        std::vector<int> leaves;
        const auto &fields = p->reader->manifest().schema_fields;
        for (int i = 0; i < k; i++) {
            std::vector<const parquet::arrow::SchemaField *> st{&fields[cols[i]]};
            while (!st.empty()) {
                const parquet::arrow::SchemaField *f = st.back();
                st.pop_back();
                if (f->is_leaf())
                    leaves.push_back(f->column_index);
                for (auto it = f->children.rbegin(); it != f->children.rend(); ++it)
                    st.push_back(&*it);
            }
        }
        auto t = p->reader->ReadRowGroup(g, leaves);
        if (!t.ok())
            return arrow_fail(RAP_ERR_DATA, p->path, ("row group " + std::to_string(g)).c_str(),
                              t.status());
        std::shared_ptr<arrow::Table> table = *t;
        for (int i = 0; i < k; i++) {
            const std::string &name = p->schema->field(cols[i])->name();
            auto col = table->GetColumnByName(name);
            if (!col)
                return rap_fail(RAP_ERR_DATA, "%s: row group %d has no column \"%s\"",
                                p->path.c_str(), g, name.c_str());
            rap_pq_type ty = rap_pq_col_type(p, cols[i], nullptr, 0);
            RAP_TRY(copy_column(p, g, cols[i], *col, ty, &out[i]));
        }
        return RAP_OK;
    } catch (const std::exception &e) {
        return rap_fail(RAP_ERR_DATA, "%s: row group %d: %s", p->path.c_str(), g, e.what());
    }
}

extern "C" void rap_pq_column_free(rap_pq_column *c, int k)
{
    for (int i = 0; c && i < k; i++) {
        free(c[i].valid);
        free(c[i].i64);
        free(c[i].f64);
        free(c[i].off);
        free(c[i].ivalid);
        free(c[i].soff);
        free(c[i].bytes);
        memset(&c[i], 0, sizeof c[i]);
    }
}
