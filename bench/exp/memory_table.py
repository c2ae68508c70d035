#!/usr/bin/env python3
"""The summary of bench/device_memory.sh:

1. the embedding phases of bench_train (train_fp32.json, train_bf16.json:
   plan 0's tables, the same optimizer and GEMM precision), per batch:
   emb_forward, emb_backward and their sum in ms for each table type, the
   fp32 / bf16 ratio of the sum (the goal: 1.3), the step and the model's
   bytes;
2. per batch of plan 1 with bf16 tables and row-wise Adagrad: the capacity
   file's windows (plan1_<B>_bf16.capacity) and rap bench's modes
   (bench_plan1_<B>.json): samples/s, vs ideal, step and exposed ms, or why
   a mode was skipped;
3. per mode the memory plan beside the measured use (the same JSON:
   mem_plan_gib, the buffers planned on the GPU; mem_used_setup_gib and
   mem_used_steps_gib, the drop of free memory after set-up and after the
   steps): plan / peak and whether it is within 5 % of the peak (the
   issue's goal), and the plan with its reserve.

Usage: memory_table.py OUTDIR (prints the tables; a missing file is said,
not an error).
"""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"  ({os.path.basename(path)}: {e})")
        return None


def emb_table(out):
    print("embedding phases, bench_train (plan 0's 27 tables, dim 128), ms per step:")
    runs = {}
    for dt in ("fp32", "bf16"):
        j = load(os.path.join(out, f"train_{dt}.json"))
        if not j:
            continue
        opt = j.get("model", {}).get("optimizer", "?")
        for r in j.get("results", []):
            if r.get("error"):
                print(f"  {dt} batch {r.get('batch')}: {r['error']}")
                continue
            runs[(dt, r["batch"], r["precision"])] = (r, opt)
    keys = sorted({(b, p) for (_, b, p) in runs})
    if not keys:
        print("  (no results)")
        return
    print(f"  {'batch':>6} {'gemm':>5} {'opt':>15} | {'fp32 fwd':>8} {'bwd':>7} {'sum':>7} |"
          f" {'bf16 fwd':>8} {'bwd':>7} {'sum':>7} | {'fp32/bf16':>9} | {'step fp32':>9}"
          f" {'bf16':>7} | {'model GB':>8} {'bf16':>6}")
    for b, p in keys:
        a, opt = runs.get(("fp32", b, p), (None, "?"))
        c, opt2 = runs.get(("bf16", b, p), (None, opt))

        def ph(r):
            if not r:
                return None, None, None
            f, w = r["phase_ms"]["emb_forward"], r["phase_ms"]["emb_backward"]
            return f, w, f + w

        af, ab, asum = ph(a)
        cf, cb, csum = ph(c)
        fmt = lambda v, n=7: f"{v:{n}.3f}" if v is not None else " " * (n - 1) + "-"
        ratio = f"{asum / csum:9.2f}" if asum and csum else "        -"
        print(f"  {b:>6} {p:>5} {opt or opt2:>15} | {fmt(af, 8)} {fmt(ab)} {fmt(asum)} |"
              f" {fmt(cf, 8)} {fmt(cb)} {fmt(csum)} | {ratio} |"
              f" {fmt(a and a['step_ms'], 9)} {fmt(c and c['step_ms'])} |"
              f" {fmt(a and a['model_bytes_gb'], 8)} {fmt(c and c['model_bytes_gb'], 6)}")


def plan1_tables(out):
    caps = sorted(glob.glob(os.path.join(out, "plan1_*_bf16.capacity")))
    benches = sorted(glob.glob(os.path.join(out, "bench_plan1_*.json")))
    batches = sorted({int(m.group(1)) for p in caps + benches
                      for m in [re.search(r"_(\d+)(_bf16)?\.(capacity|json)$", p)] if m})
    if not batches:
        print("plan 1, bf16 tables, row-wise Adagrad: (no capacity or bench results)")
        return
    for b in batches:
        print(f"\nplan 1, dim 128, bf16 tables, row-wise Adagrad, batch {b}:")
        cp = os.path.join(out, f"plan1_{b}_bf16.capacity")
        if os.path.exists(cp):
            with open(cp) as f:
                for line in f:
                    if line.startswith(("model", "window")):
                        print("  " + line.rstrip())
        else:
            print("  (no capacity file)")
        j = load(os.path.join(out, f"bench_plan1_{b}.json"))
        if not j:
            continue
        print(f"  {'mode':<11} {'samples/s':>12} {'vs ideal':>8} {'step ms':>8} {'exposed':>8}"
              f" {'GPU GB':>7}")
        for m in j.get("modes", []):
            if "skipped" in m:
                print(f"  {m['mode']:<11} skipped: {m['skipped']}")
                continue
            g = lambda k: m.get(k) if isinstance(m.get(k), (int, float)) else float("nan")
            print(f"  {m['mode']:<11} {g('samples_per_s'):12,.0f} {g('vs_ideal'):8.3f}"
                  f" {g('step_ms'):8.3f} {g('exposed_ms'):8.3f} {g('gpu_gb'):7.1f}")
        mem_table(j)


def mem_table(j):
    """The memory plan beside the measured use, per mode that ran."""
    num = lambda m, k: m.get(k) if isinstance(m.get(k), (int, float)) else None
    rows = [m for m in j.get("modes", []) if "skipped" not in m and num(m, "mem_plan_gib")]
    if not rows:
        print("  memory plan: (not in this JSON)")
        return
    print(f"  {'mode':<11} {'plan GiB':>8} {'+reserve':>8} {'set-up':>8} {'steps':>8}"
          f" {'plan/peak':>9} {'within 5%':>9}")
    for m in rows:
        plan, res = num(m, "mem_plan_gib"), num(m, "mem_reserve_gib") or 0.0
        a, b = num(m, "mem_used_setup_gib"), num(m, "mem_used_steps_gib")
        peak = max([v for v in (a, b) if v is not None], default=None)
        fmt = lambda v: f"{v:8.3f}" if v is not None else "       -"
        ratio = plan / peak if peak else None
        ok = ("yes" if abs(ratio - 1) <= 0.05 else "no") if ratio else "-"
        rs = f"{ratio:9.3f}" if ratio else f"{'-':>9}"
        print(f"  {m['mode']:<11} {fmt(plan)} {fmt(plan + res)} {fmt(a)} {fmt(b)} {rs} {ok:>9}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    emb_table(out)
    plan1_tables(out)


if __name__ == "__main__":
    main()
