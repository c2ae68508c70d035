#!/usr/bin/env python3
"""bench/planner_table.py DIR [PLANS_DIR]: the tables of bench/RESULTS.md
("planned schedules") from the JSON files bench/device_planner.sh writes
(DIR/planP_B*.json) and the planner reports (PLANS_DIR/planP_B.report.json):
every mode vs ideal, rap's speedups, the ablation, and predicted vs measured
exposed latency per window (measured = rap's phase minus ideal's phase,
the time the co-running work added; exposed = the time training waited).

Ratios are taken as `rap bench` measured them: a mode's ratio to ideal is
the JSON's "vs_ideal" (with --repeat R, the median over the R runs of the
ratio within each run), computed from samples_per_s only when the field is
missing or null; a ratio between two modes (rap vs sequential, ...) is the
median over the runs of the per-run ratios when both carry
"samples_per_s_runs" of the same length, else the ratio of samples_per_s."""
import json, os, statistics, sys

d = sys.argv[1]
pd = sys.argv[2] if len(sys.argv) > 2 else "plans/h200"
PH = ["emb_forward", "mlp_forward", "mlp_backward", "emb_backward"]

def load(f):
    try:
        return {m["mode"]: m for m in json.load(open(f))["modes"] if m.get("samples_per_s")}
    except (OSError, ValueError, KeyError):
        return {}

def vs_ideal(m, k):
    """mode k's ratio to ideal in one file's modes m: the JSON's, else computed"""
    v = m[k].get("vs_ideal")
    if v is None and "ideal" in m:
        v = m[k]["samples_per_s"] / m["ideal"]["samples_per_s"]
    return v

def pair(a, b):
    """a's samples/s over b's: the median of the per-run ratios when both have the runs"""
    ra, rb = a.get("samples_per_s_runs"), b.get("samples_per_s_runs")
    if ra and rb and len(ra) == len(rb) and all(ra) and all(rb):
        return statistics.median(x / y for x, y in zip(ra, rb))
    return a["samples_per_s"] / b["samples_per_s"]

rows, abl, win = [], [], []
for plan in ["plan0", "plan1", "plan2", "plan3"]:
    for b in [4096, 8192]:
        m = load(f"{d}/{plan}_{b}.json")
        if not m:
            continue
        ideal = m["ideal"]["samples_per_s"]
        ratio = {k: vs_ideal(m, k) for k in m}
        rows.append(f"| {plan} | {b} | " + " | ".join(
            f"{ratio[k]:.3f}" if ratio.get(k) is not None else "-" for k in
            ["sequential", "stream", "mps", "cpu", "rap"]) + f" | {ideal/1e6:.2f} M | " +
            " | ".join(f"{pair(m['rap'], m[k]):.3f}" if k in m and "rap" in m else "-" for k in
                       ["sequential", "stream", "mps", "cpu"]) + " |")
        a = [f"{ratio.get('rap') or 0:.3f}"]
        for v, mode in [("nofusion", "rap"), ("nosched", "stream"), ("nosplit", "rap"),
                        ("norows", "rap"), ("earliest", "rap")]:
            mm = load(f"{d}/{plan}_{b}_{v}.json")
            a.append(f"{vs_ideal(mm, mode):.3f}" if mode in mm and "ideal" in mm else "-")
        abl.append(f"| {plan} | {b} | " + " | ".join(a) + " |")
        rep = f"{pd}/{plan}_{b}.report.json"
        if os.path.exists(rep) and "rap" in m:
            w = {x["name"]: x for x in json.load(open(rep))["windows"]}
            cells = []
            for p in PH:
                meas = m["rap"][p + "_ms"] - m["ideal"][p + "_ms"]
                cells.append(f"{w[p]['load_ms']:.3f} / {w[p]['exposed_ms']:.3f} / {meas:+.3f}")
            cells.append(f"{w['exposed']['exposed_ms']:.3f} / {m['rap']['exposed_ms']:.3f}")
            step = m["rap"]["step_ms"] - m["ideal"]["step_ms"]
            win.append(f"| {plan} | {b} | " + " | ".join(cells) + f" | {step:+.3f} |")

print("| plan | batch | sequential | stream | mps | cpu | **rap** | ideal samples/s | rap vs sequential | vs stream | vs mps | vs cpu |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
print("\n".join(rows))
print("\nAblation (throughput / ideal of the same invocation):\n")
print("| plan | batch | rap | without fusion | without the schedule (stream, planned fusion) | without the split | without row fusion | first fit (not least slowdown) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
print("\n".join(abl))
print("\nPredicted vs measured, per window (ms per step; training windows: predicted load / predicted exposed / measured slowdown of the phase vs ideal; exposed window: predicted / measured):\n")
print("| plan | batch | " + " | ".join(PH) + " | exposed | step vs ideal |")
print("|---|---:|" + "---|" * 5 + "---:|")
print("\n".join(win))
