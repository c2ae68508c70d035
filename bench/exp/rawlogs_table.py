#!/usr/bin/env python3
"""The table of bench/device_rawlogs.sh: per plan and batch, for each input
configuration (gpu_tsv, gpu_gz, cpu_tsv, cpu_gz, a gpu one with _tN:
RAP_PARSE_GPU_TILES=N, gpu_tsv_wW: the parse released at window W or by
the planned schedule's budgets, _loops: RAP_PARSE_GPU_LOOPS=1, _ibeside:
RAP_IDEAL_PARSE=beside; bench_<plan>_<B>_<cfg>.json),
ideal's samples/s and their ratio to B over ideal's median step (1 when no
step is slower than the median: below 1, steps slowed by work beside them),
rap mode's samples/s, rap / ideal (the same invocation's ideal), the seconds
rap waited for rows over the measured steps, the host CPU seconds per
million rows trained (getrusage of the process: user + system of every
thread, over the measured steps) and, where the parse was gated, the lines
parsed inside the windows and outside them over the measured steps; a
skipped mode says why, a missing file is said.

Usage: rawlogs_table.py OUTDIR
"""
import glob
import json
import os
import re
import sys

CONFIGS = ("gpu_tsv", "gpu_gz", "cpu_tsv", "cpu_gz")
WINDOWS = ("now", "emb_forward", "mlp_forward", "mlp_backward", "emb_backward", "planned")
WHAT = {
    "gpu_tsv": "--parse gpu --threads 1, plain TSV",
    "gpu_gz": "--parse gpu --threads 4, 4 .gz files",
    "cpu_tsv": "--parse cpu --threads 16, plain TSV",
    "cpu_gz": "--parse cpu --threads 16, 4 .gz files",
}


def split(cf):
    """'gpu_tsv_t16' -> ('gpu_tsv', '16', ''); 'gpu_tsv_wmlp_forward' ->
    ('gpu_tsv', '', 'mlp_forward'); 'gpu_tsv' -> ('gpu_tsv', '', ''); a
    trailing '_ibeside' (RAP_IDEAL_PARSE=beside), then '_loops'
    (RAP_PARSE_GPU_LOOPS=1), is left out."""
    cf = cf[:-len("_ibeside")] if cf.endswith("_ibeside") else cf
    cf = cf[:-len("_loops")] if cf.endswith("_loops") else cf
    m = re.match(r"^(.*)_t(\d+)$", cf)
    if m:
        return (m.group(1), m.group(2), "")
    m = re.match(r"^(gpu_[a-z]+)_w([a-z_]+)$", cf)
    if m:
        return (m.group(1), "", m.group(2))
    return (cf, "", "")


def num(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else "-"


def main(out):
    print("rap bench --modes ideal,rap with raw text (the paper's model, shipped schedules)")
    print("%-6s %5s %-22s %12s %10s %12s %8s %9s %12s %11s %11s  %s" % (
        "plan", "batch", "input", "ideal rows/s", "ideal/med", "rap rows/s", "rap/ideal",
        "waited_s", "cpu_s/Mrow", "parse_in", "parse_out", "configuration"))
    for plan in ("plan0", "plan1"):
        for b in (4096, 8192):
            pre = os.path.join(out, "bench_%s_%d_" % (plan, b))
            found = [f[len(pre):-5] for f in glob.glob(pre + "*.json")]
            def order(cf):
                base, t, w = split(cf)
                return (CONFIGS.index(base) if base in CONFIGS else 9, int(t) if t.isdigit() else -1,
                        WINDOWS.index(w) if w in WINDOWS else -1, cf.endswith("_loops"),
                        cf.endswith("_ibeside"))
            for cf in sorted(found, key=order):
                p = pre + cf + ".json"
                try:
                    with open(p) as f:
                        j = json.load(f)
                except (OSError, ValueError) as e:
                    print("%-6s %5d %-8s (%s)" % (plan, b, cf, e))
                    continue
                rap = [m for m in j.get("modes", []) if m.get("mode") == "rap"]
                if not rap:
                    print("%-6s %5d %-8s (no rap row)" % (plan, b, cf))
                    continue
                m = rap[0]
                if "skipped" in m:
                    print("%-6s %5d %-8s skipped: %s" % (plan, b, cf, m["skipped"]))
                    continue
                base, t, w = split(cf)
                what = WHAT.get(base, cf) + (", RAP_PARSE_GPU_TILES=" + t if t else "")
                if w == "planned":
                    what += ", schedule planned with --parse gpu"
                elif w:
                    what += ", RAP_PARSE_WINDOW=" + w
                if cf[:-len("_ibeside")].endswith("_loops") or cf.endswith("_loops"):
                    what += ", RAP_PARSE_GPU_LOOPS=1"
                if cf.endswith("_ibeside"):
                    what += ", RAP_IDEAL_PARSE=beside"
                what += ", mlp fwd/bwd %s/%s ms" % (num(m.get("mlp_forward_ms"), "%.3f"),
                                                    num(m.get("mlp_backward_ms"), "%.3f"))
                runs = " ".join("%.3f" % x for x in m.get("vs_ideal_runs", []))
                idl = [x for x in j.get("modes", []) if x.get("mode") == "ideal"]
                isps = idl[0].get("samples_per_s") if idl else None
                istep = idl[0].get("step_ms") if idl else None
                imed = (isps / (b / (istep * 1e-3)) if isinstance(isps, (int, float)) and
                        isinstance(istep, (int, float)) and istep > 0 else None)
                print("%-6s %5d %-22s %12s %10s %12s %8s %9s %12s %11s %11s  %s (runs %s)" % (
                    plan, b, cf, num(isps, "%.0f"), num(imed, "%.4f"),
                    num(m.get("samples_per_s"), "%.0f"),
                    num(m.get("vs_ideal"), "%.3f"), num(m.get("starved_s"), "%.2f"),
                    num(m.get("host_cpu_s_per_mrow"), "%.3f"),
                    num(m.get("parse_lines_in"), "%.0f"), num(m.get("parse_lines_out"), "%.0f"),
                    what, runs))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
