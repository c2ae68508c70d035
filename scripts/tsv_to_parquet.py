#!/usr/bin/env python3
"""tsv_to_parquet.py SCHEMA IN.tsv OUT.parquet [ROWS_PER_GROUP] [NULL_TOKEN]

Writes the rows of a tab-separated file of an input schema (docs/SCHEMA.md)
as Parquet with pyarrow, column by column as rap maps Parquet to a schema,
so that tests can read the same rows from both files and compare:
label -> int8, dense float -> float64, dense int32 -> int32, sparse dec ->
int64, sparse hex/hex32/str -> string (hex parsed by rap by the encoding),
a list of dec -> list<int64>, any other list -> list<string>; an empty
field -> null (a list: an empty list; the null token: a null list);
skipped columns are left out. Values are written as they are, bad ones
included (the label as an integer), so the rejects match too.
"""
import sys

import pyarrow as pa
import pyarrow.parquet as pq


def read_schema(path):
    cols = []
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        name, kind = line[0], line[1]
        rest = line[2:]
        enc = rest[0] if rest and rest[0] != "list" else ""
        sep = None
        if "list" in rest:
            w = rest[rest.index("list") + 1]
            sep = {"space": " ", "tab": "\t", "comma": ",", "semicolon": ";",
                   "pipe": "|", "hash": "#", "colon": ":"}.get(w, w)
        cols.append((name, kind, enc, sep))
    return cols


def main():
    schema, src, out = sys.argv[1:4]
    group = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    null_token = sys.argv[5] if len(sys.argv) > 5 else "null"
    cols = read_schema(schema)
    data = {c[0]: [] for c in cols}
    for line in open(src, encoding="utf-8", errors="surrogateescape"):
        f = line.rstrip("\n").rstrip("\r").split("\t")
        for (name, kind, enc, sep), v in zip(cols, f):
            if kind == "skip":
                continue
            if sep is not None:
                if v == null_token:
                    data[name].append(None)
                elif v == "":
                    data[name].append([])
                elif enc == "dec":
                    data[name].append([int(x) for x in v.split(sep)])
                else:
                    data[name].append(v.split(sep))
            elif v == "":
                data[name].append(None)
            elif kind == "label":
                data[name].append(int(v))
            elif kind == "dense":
                data[name].append(int(v) if enc == "int32" else float(v))
            elif enc == "dec":
                data[name].append(int(v))
            else:
                data[name].append(v)
    arrays, names = [], []
    for name, kind, enc, sep in cols:
        if kind == "skip":
            continue
        if sep is not None:
            t = pa.list_(pa.int64() if enc == "dec" else pa.string())
        elif kind == "label":
            t = pa.int8()
        elif kind == "dense":
            t = pa.int32() if enc == "int32" else pa.float64()
        elif enc == "dec":
            t = pa.int64()
        else:
            t = pa.string()
        arrays.append(pa.array(data[name], type=t))
        names.append(name)
    pq.write_table(pa.table(arrays, names=names), out, row_group_size=group)


if __name__ == "__main__":
    main()
