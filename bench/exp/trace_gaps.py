#!/usr/bin/env python3
"""Phase spans and the gaps between them, from rap bench --trace files.

Usage: python3 bench/exp/trace_gaps.py TRACE.json [TRACE.json ...]

For each trace (a rap bench --trace timeline of one mode, e.g. t.ideal.json
and t.rap.json), prints per training phase its mean span and the mean gap
from the previous phase's end to its start (the step boundary for
emb_forward), in µs, and the preprocessing/copy spans per step. Compares
where rap mode's step time goes beyond ideal's (bench/RESULTS.md)."""
import json
import statistics
import sys

PHASES = ["emb_forward", "mlp_forward", "mlp_backward", "emb_backward"]


def spans(path):
    d = json.load(open(path))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    return sorted((e for e in ev if e.get("ph") == "X"), key=lambda e: e["ts"])


def report(path):
    ev = spans(path)
    train = [e for e in ev if e["name"] in PHASES]
    dur = {p: [] for p in PHASES}
    gap = {p: [] for p in PHASES}
    for i, e in enumerate(train):
        dur[e["name"]].append(e["dur"])
        if i > 0:
            prev = train[i - 1]
            gap[e["name"]].append(e["ts"] - (prev["ts"] + prev["dur"]))
    gpu = train[0]["pid"] if train else None  # the GPU tracks' process
    other = {}
    for e in ev:
        if e["name"] not in PHASES and e.get("pid") == gpu:
            other.setdefault(e["name"], []).append(e["dur"])
    print(path)
    print("  %-13s %9s %9s %4s" % ("phase", "span µs", "gap µs", "n"))
    total = 0.0
    for p in PHASES:
        if not dur[p]:
            continue
        d = statistics.mean(dur[p])
        g = statistics.mean(gap[p]) if gap[p] else float("nan")
        total += d + (g if gap[p] else 0)
        print("  %-13s %9.1f %9.1f %4d" % (p, d, g, len(dur[p])))
    print("  %-13s %9.1f" % ("step", total))
    for name, v in sorted(other.items()):
        print("  other: %-20s %7.1f µs mean, %d spans" % (name, statistics.mean(v), len(v)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for f in sys.argv[1:]:
        report(f)
