#!/usr/bin/env python3
"""render_trace.py -- draw rap timeline traces (rap train/bench --trace FILE,
docs/TRACE.md) as a PNG: one panel per trace file, one row per track
(training stream, preprocessing stream, copy stream, host threads), one bar
per span, coloured by category (phase, prep, copy, read, wait).

  python3 scripts/render_trace.py bench.stream.json bench.rap.json \
      --titles stream,rap -o docs/img/runtime_trace.png [--steps 3] [--from-ms 0]

Panels share the time axis when --share is given (same scale for both
modes). Needs matplotlib (pip install matplotlib). Used for docs/RUNTIME.md.
"""
import argparse
import json
import sys

COLORS = {
    "phase": "#4878d0",
    "prep": "#ee854a",
    "copy": "#6acc64",
    "read": "#956cb4",
    "wait": "#d65f5f",
}
PHASE_SHADES = {
    "emb_forward": "#2f5fb3",
    "mlp_forward": "#5b8fdf",
    "mlp_backward": "#86aeea",
    "emb_backward": "#1d3f7a",
}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names, order, spans = {}, {}, []
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "M":
            if e.get("name") == "thread_name":
                names[key] = e["args"]["name"]
            elif e.get("name") == "thread_sort_index":
                order[key] = e["args"].get("sort_index", 0)
        elif e.get("ph") == "X":
            spans.append((key, float(e["ts"]) / 1000.0, float(e["dur"]) / 1000.0,
                          e.get("name", ""), e.get("cat", "")))
    return names, order, spans


def first_steps(spans, steps):
    """Time window covering the first `steps` emb_forward phases."""
    starts = sorted(t for (_, t, _, n, c) in spans if c == "phase" and n in ("emb_forward", "step (graph)"))
    if not starts:
        return None
    end = starts[steps] if len(starts) > steps else max(t + d for (_, t, d, _, _) in spans)
    return starts[0], end


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="trace JSON files")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--titles", default="", help="comma-separated panel titles (default: file names)")
    ap.add_argument("--steps", type=int, default=3, help="show the first N training steps (0: all)")
    ap.add_argument("--share", action="store_true", help="same time scale in every panel")
    ap.add_argument("--width", type=float, default=14.0, help="figure width in inches")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.exit("render_trace.py needs matplotlib: pip install matplotlib")

    titles = args.titles.split(",") if args.titles else args.traces
    loaded = [load(p) for p in args.traces]
    windows = []
    for names, order, spans in loaded:
        w = first_steps(spans, args.steps) if args.steps > 0 else None
        if w is None and spans:
            w = (min(t for (_, t, _, _, _) in spans), max(t + d for (_, t, d, _, _) in spans))
        windows.append(w or (0.0, 1.0))
    span_ms = max(b - a for a, b in windows)

    heights = [max(2, len({s[0] for s in sp})) * 0.45 + 0.8 for (_, _, sp) in loaded]
    fig, axes = plt.subplots(len(loaded), 1, figsize=(args.width, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for i, ((names, order, spans), (t0, t1)) in enumerate(zip(loaded, windows)):
        ax = axes[i][0]
        keys = sorted({s[0] for s in spans}, key=lambda k: (order.get(k, 1 << 20), k))
        # GPU tracks first (pid >= 2), then host threads
        keys.sort(key=lambda k: (0 if (k[0] or 0) >= 2 else 1, order.get(k, 1 << 20)))
        row = {k: j for j, k in enumerate(keys)}
        for (key, t, d, name, cat) in spans:
            if t + d < t0 or t > t1:
                continue
            color = PHASE_SHADES.get(name, COLORS.get(cat, "#8c8c8c"))
            y = len(keys) - 1 - row[key]
            ax.broken_barh([(t - t0, max(d, 1e-3))], (y - 0.38, 0.76), facecolors=color,
                           edgecolors="black", linewidth=0.2)
            if cat == "phase" and d > 0.06 * (t1 - t0):
                ax.text(t - t0 + d / 2, y, name, ha="center", va="center", fontsize=7, color="white")
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([names.get(k, "%s/%s" % k) for k in reversed(keys)], fontsize=8)
        ax.set_xlim(0, span_ms if args.share else (t1 - t0))
        ax.set_title(titles[i] if i < len(titles) else args.traces[i], fontsize=10, loc="left")
        ax.grid(axis="x", linestyle=":", linewidth=0.5)
        if i == len(loaded) - 1:
            ax.set_xlabel("ms")
    handles = [Patch(color=c, label=k) for k, c in PHASE_SHADES.items()]
    handles += [Patch(color=COLORS[k], label=k) for k in ("prep", "copy", "read", "wait")]
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(args.out, dpi=150)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
