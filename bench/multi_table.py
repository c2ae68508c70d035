#!/usr/bin/env python3
"""multi_table.py RAWDIR OUT.md OUT.json -- the table of bench/multi.

Reads the runs bench/multi left in RAWDIR:

  bench_<plan>_b<B>_g<N>_<placement>.json   `rap bench --json` (stdout), N GPUs,
                                            B rows per GPU; N = 1 is the plain
                                            one-GPU run (placement "none")
  plan_<plan>_b<B>_g<N>.json                `rap plan --gpus N --placement all
                                            --report` (predicted placement costs)

and writes one markdown file (throughput table, placement table, the goal
of issue #7) and one JSON file with every row. Fields read from `rap bench
--json`: modes[].mode, samples_per_s, vs_ideal (taken from the JSON
whenever present: with `rap bench --repeat R` the median over the R runs of
the ratio to the same run's ideal, not the ratio of the medians; recomputed
from the ideal row of the same plan, batch and GPU count only when absent
or null: bench/multi runs ideal once, with the first placement), exposed_ms,
samples_per_s_runs and vs_ideal_runs (--repeat's runs, copied into the JSON
rows when present), and, when the trainer reports them,
all_to_all_ms, all_reduce_ms, bytes_moved (per iteration; "n/a" when
absent). Pure standard library; no GPU needed (tests/test_multi_table.sh
runs it on fake inputs).
"""
import glob
import json
import os
import re
import sys

MODES = ["ideal", "cpu", "sequential", "stream", "mps", "rap"]
PLACEMENTS = ["batch", "owner", "search"]
BENCH_RE = re.compile(r"^bench_(?P<plan>.+)_b(?P<b>\d+)_g(?P<g>\d+)_(?P<pl>[a-z]+)\.json$")
PLAN_RE = re.compile(r"^plan_(?P<plan>.+)_b(?P<b>\d+)_g(?P<g>\d+)\.json$")


def num(x, fmt="{:.3f}"):
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return fmt.format(x)


def load(path):
    with open(path) as f:
        text = f.read()
    # rap bench --json prints one JSON object; tolerate log lines around it
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"{path}: no JSON object in the output")
    return json.loads(text[start:end + 1])


def mode_rows(doc):
    rows = {}
    ideal = None
    for m in doc.get("modes", []):
        if m.get("mode") == "ideal" and m.get("samples_per_s"):
            ideal = m["samples_per_s"]
    for m in doc.get("modes", []):
        name = m.get("mode")
        if not name:
            continue
        if "skipped" in m:
            rows[name] = {"skipped": m["skipped"]}
            continue
        sps = m.get("samples_per_s")
        vs = m.get("vs_ideal")
        if vs is None and ideal and sps is not None:
            vs = sps / ideal
        rows[name] = {
            "samples_per_s": sps,
            "vs_ideal": vs,
            "exposed_ms": m.get("exposed_ms"),
            "all_to_all_ms": m.get("all_to_all_ms"),
            # the dense all-reduce runs in one NCCL group with the reverse
            # all-to-all: timed together (rap bench "grad_exchange_ms")
            "all_reduce_ms": m.get("all_reduce_ms", m.get("grad_exchange_ms")),
            "model_bytes_per_step": m.get("model_bytes_per_step"),
            # preprocessing traffic (ids of placement batch), when measured
            "bytes_moved": m.get("bytes_moved", m.get("prep_bytes_per_step")),
        }
        for k in ("samples_per_s_runs", "vs_ideal_runs"):
            if k in m:
                rows[name][k] = m[k]
    return rows


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    raw, out_md, out_json = argv[1:]
    bench = {}   # (plan, B, N, placement) -> {mode: row}
    plans = {}   # (plan, B, N) -> {placement: {...}}
    errors = []
    for path in sorted(glob.glob(os.path.join(raw, "*.json"))):
        name = os.path.basename(path)
        mb, mp = BENCH_RE.match(name), PLAN_RE.match(name)
        try:
            if mb:
                key = (mb["plan"], int(mb["b"]), int(mb["g"]), mb["pl"])
                bench[key] = mode_rows(load(path))
            elif mp:
                doc = load(path)
                key = (mp["plan"], int(mp["b"]), int(mp["g"]))
                plans[key] = {p["placement"]: {"exposed_max_ms": p.get("exposed_max_ms"),
                                               "bytes_moved": p.get("bytes_moved"),
                                               "comm_ms": p.get("comm_ms"),
                                               "moves": p.get("moves")}
                              for p in doc.get("placements", [])}
                plans[key]["_capacity"] = doc.get("capacity_source")
                plans[key]["_latency"] = doc.get("latency_model")
        except (ValueError, KeyError, TypeError) as e:
            errors.append(f"{name}: {e}")
    if not bench and not plans:
        print(f"multi_table.py: no bench_*.json or plan_*.json in {raw}", file=sys.stderr)
        return 1

    rows_out = []
    md = ["# bench/multi results", ""]
    md.append("Throughput: `rap bench` per mode; GPUs = 1 is the plain one-GPU run with the same "
              "batch per GPU; scaling efficiency = samples/s / (GPUs x one-GPU samples/s of the "
              "same mode); all-to-all: rank 0's forward all-to-all of the pooled embeddings, "
              "all-reduce: rank 0's gradient exchange (the dense all-reduce and the reverse "
              "all-to-all, one NCCL group, timed together), ms per iteration (CUDA events around "
              "the collectives, median of the runs).")
    md.append("")
    md.append("| plan | batch/GPU | GPUs | placement | mode | samples/s | vs ideal | scaling eff. | "
              "all-to-all ms | all-reduce (+ rev. all-to-all) ms |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted(bench, key=lambda k: (k[0], k[1], k[2], PLACEMENTS.index(k[3])
                                        if k[3] in PLACEMENTS else -1))
    def ideal_of(plan, b, g):
        # the ideal mode runs once per (plan, batch, GPUs), with the first placement
        for (p2, b2, g2, _), rows in bench.items():
            if (p2, b2, g2) == (plan, b, g) and rows.get("ideal", {}).get("samples_per_s"):
                return rows["ideal"]["samples_per_s"]
        return None

    for key in keys:
        plan, b, g, pl = key
        base = bench.get((plan, b, 1, "none"), {})
        ideal = ideal_of(plan, b, g)
        for mode in MODES:
            r = bench[key].get(mode)
            if r is not None and r.get("vs_ideal") is None and ideal and r.get("samples_per_s"):
                r["vs_ideal"] = r["samples_per_s"] / ideal
            r = bench[key].get(mode)
            if r is None:
                continue
            row = {"plan": plan, "batch_per_gpu": b, "gpus": g, "placement": pl, "mode": mode}
            if "skipped" in r:
                row["skipped"] = r["skipped"]
                rows_out.append(row)
                md.append(f"| {plan} | {b} | {g} | {pl} | {mode} | skipped: {r['skipped']} | | | | |")
                continue
            eff = None
            b1 = base.get(mode, {}).get("samples_per_s")
            if b1 and r["samples_per_s"] is not None:
                eff = r["samples_per_s"] / (g * b1)
            row.update(r)
            row["scaling_efficiency"] = eff
            rows_out.append(row)
            md.append(f"| {plan} | {b} | {g} | {pl} | {mode} | {num(r['samples_per_s'], '{:.0f}')} | "
                      f"{num(r['vs_ideal'])} | {num(eff)} | {num(r['all_to_all_ms'])} | "
                      f"{num(r['all_reduce_ms'])} |")

    md += ["", "Placement: predicted by `rap plan --gpus N --placement all` (max over ranks of the "
           "exposed preprocessing + all-to-all, ms of standalone work; bytes moved over the "
           "interconnect per iteration), and measured in `rap` mode with `--placement P` where "
           "the trainer reports it.", ""]
    md.append("| plan | batch/GPU | GPUs | placement | predicted exposed ms | predicted bytes/iter | "
              "search moves | measured exposed ms (rap) | measured bytes/iter | rap samples/s |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    place_out = []
    for key in sorted(set(plans) | {k[:3] for k in bench if k[2] > 1}):
        plan, b, g = key
        pred = plans.get(key, {})
        for pl in PLACEMENTS:
            p = pred.get(pl, {})
            m = bench.get((plan, b, g, pl), {}).get("rap", {})
            row = {"plan": plan, "batch_per_gpu": b, "gpus": g, "placement": pl,
                   "predicted_exposed_ms": p.get("exposed_max_ms"),
                   "predicted_bytes_moved": p.get("bytes_moved"),
                   "search_moves": p.get("moves"),
                   "measured_exposed_ms": m.get("exposed_ms"),
                   "measured_bytes_moved": m.get("bytes_moved"),
                   "rap_samples_per_s": m.get("samples_per_s")}
            if not p and not m:
                continue
            place_out.append(row)
            md.append(f"| {plan} | {b} | {g} | {pl} | {num(row['predicted_exposed_ms'], '{:.4f}')} | "
                      f"{num(row['predicted_bytes_moved'], '{:d}')} | "
                      f"{num(row['search_moves'], '{:d}') if pl == 'search' else ''} | "
                      f"{num(row['measured_exposed_ms'], '{:.4f}')} | "
                      f"{num(row['measured_bytes_moved'], '{:d}')} | "
                      f"{num(row['rap_samples_per_s'], '{:.0f}')} |")
    srcs = sorted({(v.get("_latency"), v.get("_capacity")) for v in plans.values()})
    for lat, cap in srcs:
        md.append(f"\nPredicted with: latency {lat}; capacity {cap}.")

    # issue #7's goal: rap >= 0.99 of ideal on every GPU count, plans 0 and 1
    goal = []
    md += ["", "Goal (issue #7): `rap` at least 0.99 of `ideal` for plans 0 and 1 on every GPU count.", ""]
    for key in keys:
        plan, b, g, pl = key
        if plan not in ("plan0", "plan1") or pl not in ("none", "search"):
            continue
        r = bench[key].get("rap", {})
        vs = r.get("vs_ideal")
        ok = vs is not None and vs >= 0.99
        goal.append({"plan": plan, "batch_per_gpu": b, "gpus": g, "rap_vs_ideal": vs, "met": ok})
        md.append(f"- {plan}, batch {b}/GPU, {g} GPU{'s' if g > 1 else ''}: rap/ideal {num(vs)} "
                  f"-> {'met' if ok else 'NOT met'}")
    if errors:
        md += ["", "Unreadable runs:", ""] + [f"- {e}" for e in errors]
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(out_json, "w") as f:
        json.dump({"throughput": rows_out, "placement": place_out, "goal": goal,
                   "errors": errors}, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
