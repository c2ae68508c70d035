#!/usr/bin/env python3
"""The summary of bench/device_roofline_ab.sh: step time per variant,
precision and batch (bench_train JSON), then per 65536-row step the
microseconds of each kernel group (CUPTI traces, median over the last 11
steps between emb_fwd_kernel starts, as kernel_steps.py counts them), so a
variant's gain shows where it came from.

Usage: roofline_table.py OUTDIR   (reads train_<variant>.json and
k_<variant>_<bf16|fp32>.csv.gz there; prints the tables; writes
OUTDIR/kernel_groups.json)

Groups, by kernel name:
  ia_fwd   interaction forward (interact_fwd*)
  ia_bwd   interaction backward (interact_bwd*)
  own_elt  the MLP's own elementwise and column-sum kernels (bias_act*,
           drelu*, colsum*)
  logit    the logit layer's own kernels (gemv_*)
  lt_epi   cuBLASLt's separate epilogue passes (cublasLt::epilogue::*, BGRADB)
  gemm     cuBLASLt GEMMs and their split-K reductions
  emb      embedding forward and update (emb_*, CUB's radix sort)
  other    the rest (loss, dense optimizer, memsets, conversions)
"""
import collections
import csv
import glob
import gzip
import json
import os
import re
import statistics
import sys

GROUPS = [
    ("ia_fwd", r"interact_fwd"),
    ("ia_bwd", r"interact_bwd"),
    ("own_elt", r"bias_act|drelu|colsum"),
    ("logit", r"gemv_"),
    ("lt_epi", r"cublasLt::epilogue|Bgrad"),
    ("gemm", r"nvjet|xmma|gemm|cutlass|splitKreduce|sm90_|sm80_|ampere|magma"),
    ("emb", r"emb_|radix|Radix|cub::"),
]


def group_of(name):
    for g, pat in GROUPS:
        if re.search(pat, name):
            return g
    return "other"


def step_groups(path):
    """Median us per step of each group and of the step span; None when the
    trace has too few steps."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        rows = [r for r in csv.DictReader(f)]
    anc = sorted(int(r["start_ns"]) for r in rows if "emb_fwd_kernel" in r["name"])
    if len(anc) < 3:
        return None
    a = anc[-12:]
    per = collections.defaultdict(list)
    spans = []
    for i in range(len(a) - 1):
        t0, t1 = a[i], a[i + 1]
        spans.append(t1 - t0)
        c = collections.Counter()
        for r in rows:
            s = int(r["start_ns"])
            if t0 <= s < t1:
                c[group_of(r["name"])] += int(r["end_ns"]) - s
        for g in [x for x, _ in GROUPS] + ["other"]:
            per[g].append(c[g])
    out = {g: statistics.median(v) / 1e3 for g, v in per.items()}
    out["step"] = statistics.median(spans) / 1e3
    out["kernels"] = sum(out[g] for g in per)
    return out


def main():
    d = sys.argv[1]
    print("== step time (bench_train: graph replay median; M samples/s)")
    print("%-9s %-5s %7s %9s %9s %8s" % ("variant", "prec", "batch", "eager_ms", "graph_ms", "M/s"))
    for js in sorted(glob.glob(os.path.join(d, "train_*.json"))):
        v = os.path.basename(js)[6:-5]
        try:
            res = json.load(open(js)).get("results", [])
        except (OSError, ValueError) as e:
            print("%-9s (unreadable: %s)" % (v, e))
            continue
        for r in res:
            if r.get("error"):
                print("%-9s %-5s %7s  error: %s" % (v, r.get("precision"), r.get("batch"), r["error"]))
                continue
            print("%-9s %-5s %7d %9.3f %9.3f %8.2f" % (
                v, r["precision"], r["batch"], r.get("step_ms", 0), r.get("graph_step_ms", 0),
                r.get("best_samples_per_s", 0) / 1e6))
    names = [g for g, _ in GROUPS] + ["other"]
    print("== per kernel group, us per step at 65536 (CUPTI, eager steps)")
    print("%-9s %-5s %7s " % ("variant", "prec", "step") + " ".join("%7s" % g for g in names))
    allg = {}
    for k in sorted(glob.glob(os.path.join(d, "k_*_*.csv.gz"))):
        m = re.match(r"k_(.+)_(bf16|fp32)\.csv\.gz$", os.path.basename(k))
        if not m:
            continue
        try:
            sg = step_groups(k)
        except (OSError, ValueError, KeyError) as e:
            print("%-9s %-5s unreadable: %s" % (m.group(1), m.group(2), e))
            continue
        if not sg:
            print("%-9s %-5s too few steps" % (m.group(1), m.group(2)))
            continue
        allg["%s_%s" % (m.group(1), m.group(2))] = sg
        print("%-9s %-5s %7.1f " % (m.group(1), m.group(2), sg["step"]) +
              " ".join("%7.1f" % sg[g] for g in names))
    with open(os.path.join(d, "kernel_groups.json"), "w") as f:
        json.dump(allg, f, indent=1)


if __name__ == "__main__":
    main()
