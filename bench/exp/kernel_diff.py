#!/usr/bin/env python3
"""Kernel-by-kernel comparison of two CUPTI traces (bench/exp/cupti_trace.c).

Usage: python3 bench/exp/kernel_diff.py IDEAL.csv RAP.csv [--steps N]
           [--first NAME_SUBSTRING] [--stream-ideal ID] [--stream-rap ID]
           [--kernels-only] [--json FILE]

IDEAL.csv from `rap bench --modes ideal`, RAP.csv from `rap bench --modes rap`.

Training stream: in IDEAL, the stream with the most kernel records; in RAP,
the stream with the most kernels whose names occur on IDEAL's training stream
(--stream-ideal/--stream-rap override). Its records (kernels, and the
memcpy/memset on it unless --kernels-only) form a sequence that repeats once
per step; the period p is the smallest p with names[i] == names[i+p] for
> 95% of i over the last 40% of the run. Steps start at the anchor kernel:
--first (a substring of one kernel name that occurs once per step), by default
the first kernel of the run whose name occurs exactly once per period. The
most common step sequence is the canonical one; steps that differ from it are
skipped (counted), and the last --steps (default 40) canonical steps are used.

Per position k of the step: median duration (end - start) and median gap
(start of k minus end of the previous training-stream record; for k = 0 the
previous step's last record, e.g. its loss copy), ideal vs rap, in µs.
Positions are matched by name (difflib) when the two step sequences differ.
Summary: step span (anchor start to the next anchor start), totals of the
median diffs, and the mean-based totals (those add up to the mean span diff).
Then, for RAP, the records on other streams per step: name, median duration,
median start offset from the step's anchor start, and which training
positions (by their median offsets) they overlap.
"""
import argparse
import bisect
import collections
import csv
import difflib
import json
import re
import statistics
import sys

NS_PER_US = 1000.0


def load(path):
    """Records of a trace CSV as tuples (start, end, kind, name, stream), sorted by time;
    records without timestamps (start == end == 0) are dropped."""
    recs = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            s, e = int(r["start_ns"]), int(r["end_ns"])
            if s == 0 and e == 0:
                continue
            recs.append((s, e, r["kind"], r["name"], int(r["stream"])))
    recs.sort(key=lambda x: (x[0], x[1]))
    if not recs:
        sys.exit("%s: no records with timestamps" % path)
    return recs


def shorten(name, width=60):
    """A readable form of a (mangled) kernel name, at most width characters:
    _Z[N]<len><id>...[I...E] becomes a::b<...>; anything else is kept."""
    if name.startswith("_Z"):
        s, i, parts = name, 2, []
        nested = i < len(s) and s[i] == "N"
        i += nested
        while i < len(s):
            m = re.match(r"\d+", s[i:])
            if not m:
                break
            n = int(m.group())
            i += len(m.group())
            parts.append(s[i:i + n])
            i += n
            if i < len(s) and s[i] == "I":
                parts[-1] += "<...>"
                break
            if not nested:
                break
        if parts:
            name = "::".join(parts)
    return name if len(name) <= width else name[:width - 3] + "..."


def detect_period(names):
    """Smallest p with names[i] == names[i+p] for > 95% of i over the last 40% of names."""
    tail = names[int(len(names) * 0.6):]
    for p in range(1, len(tail) // 3 + 1):
        m = len(tail) - p
        allowed, bad = int(m * 0.05), 0
        for i in range(m):
            if tail[i] != tail[i + p]:
                bad += 1
                if bad > allowed:
                    break
        if bad <= allowed and bad < 0.05 * m:
            return p
    return None


def pick_anchor(seq, p, first):
    """The step's first record name: the one name containing `first` (once per period),
    or the first kernel name in the run that occurs exactly once in the last period."""
    window = collections.Counter(r[3] for r in seq[-p:])
    if first:
        cands = sorted(n for n in window if first in n)
        if not cands:
            sys.exit("--first %r: no training-stream name in the last period contains it" % first)
        if len(cands) > 1:
            sys.exit("--first %r matches several names: %s" % (first, ", ".join(shorten(c) for c in cands)))
        if window[cands[0]] != 1:
            sys.exit("--first %r: %s occurs %d times per step; pick a name that occurs once"
                     % (first, shorten(cands[0]), window[cands[0]]))
        return cands[0]
    once = {n for n, c in window.items() if c == 1}
    for r in seq:
        if r[2] == "kernel" and r[3] in once:
            return r[3]
    sys.exit("no record name occurs exactly once per period; pass --first")


def steps_of(seq, anchor):
    """Splits seq at the anchor's occurrences; yields (index of the anchor, records of the step).
    The part before the first anchor is not a step; the last step ends with the sequence."""
    idx = [i for i, r in enumerate(seq) if r[3] == anchor]
    for j, a in enumerate(idx):
        b = idx[j + 1] if j + 1 < len(idx) else len(seq)
        yield a, seq[a:b]


class Run:
    """One trace's training stream, steps and per-position samples."""

    def __init__(self, path, recs, stream, kernels_only):
        self.path, self.recs, self.stream = path, recs, stream
        self.seq = [r for r in recs if r[4] == stream and (r[2] == "kernel" or not kernels_only)]

    def segment(self, anchor, nsteps):
        """Chooses the canonical step and the last nsteps steps that follow it."""
        self.anchor = anchor
        all_steps = [(a, st) for a, st in steps_of(self.seq, anchor) if a > 0]
        if not all_steps:
            sys.exit("%s: anchor %s never follows another training record" % (self.path, shorten(anchor)))
        common = collections.Counter(tuple(r[3] for r in st) for _, st in all_steps)
        self.canon = list(common.most_common(1)[0][0])
        used, skipped = [], 0
        for a, st in reversed(all_steps):
            if len(used) == nsteps:
                break
            if [r[3] for r in st] == self.canon:
                used.append(a)
            else:
                skipped += 1
        self.starts, self.skipped = used[::-1], skipped
        self.anchor_idx = [i for i, r in enumerate(self.seq) if r[3] == anchor]
        p = len(self.canon)
        self.dur = [[] for _ in range(p)]
        self.gap = [[] for _ in range(p)]
        for a in self.starts:
            for k in range(p):
                r, prev = self.seq[a + k], self.seq[a + k - 1]
                self.dur[k].append((r[1] - r[0]) / NS_PER_US)
                self.gap[k].append((r[0] - prev[1]) / NS_PER_US)
        self.spans = []
        for a in self.starts:
            j = bisect.bisect_right(self.anchor_idx, a)
            if j < len(self.anchor_idx):
                self.spans.append((self.seq[self.anchor_idx[j]][0] - self.seq[a][0]) / NS_PER_US)
        self.negative_gaps = sum(g < 0 for col in self.gap for g in col)

    def side(self):
        """Records on other streams, per used step, keyed (stream, name, occurrence in the step):
        lists of (start offset from the anchor start, duration), in µs."""
        out = collections.defaultdict(list)
        others = [r for r in self.recs if r[4] != self.stream]
        ostart = [r[0] for r in others]
        for a in self.starts:
            t0 = self.seq[a][0]
            j = bisect.bisect_right(self.anchor_idx, a)
            t1 = self.seq[self.anchor_idx[j]][0] if j < len(self.anchor_idx) else self.seq[-1][1]
            occ = collections.Counter()
            for r in others[bisect.bisect_left(ostart, t0):bisect.bisect_left(ostart, t1)]:
                key = (r[4], r[2], r[3])
                out[key + (occ[key],)].append(((r[0] - t0) / NS_PER_US, (r[1] - r[0]) / NS_PER_US))
                occ[key] += 1
        return out

    def offsets(self):
        """Median start and end offset of each position from its step's anchor start, in µs."""
        res = []
        for k in range(len(self.canon)):
            s = [(self.seq[a + k][0] - self.seq[a][0]) / NS_PER_US for a in self.starts]
            e = [(self.seq[a + k][1] - self.seq[a][0]) / NS_PER_US for a in self.starts]
            res.append((statistics.median(s), statistics.median(e)))
        return res


def training_stream(recs, names=None):
    """The stream with the most kernels (with a name in `names`, when given)."""
    c = collections.Counter(r[4] for r in recs if r[2] == "kernel" and (names is None or r[3] in names))
    if not c:
        sys.exit("no kernel records%s" % (" with the ideal training stream's names" if names else ""))
    return c.most_common(1)[0][0]


def med(v):
    return statistics.median(v) if v else float("nan")


def mean(v):
    return statistics.fmean(v) if v else float("nan")


def analyse(ideal_path, rap_path, nsteps=40, first=None, stream_ideal=None, stream_rap=None,
            kernels_only=False):
    """Both runs segmented and compared; returns a dict (what --json writes)."""
    ri, rr = load(ideal_path), load(rap_path)
    si = stream_ideal if stream_ideal is not None else training_stream(ri)
    I = Run(ideal_path, ri, si, kernels_only)
    ideal_names = {r[3] for r in I.seq if r[2] == "kernel"}
    sr = stream_rap if stream_rap is not None else training_stream(rr, ideal_names)
    R = Run(rap_path, rr, sr, kernels_only)
    p = detect_period([r[3] for r in I.seq])
    if p is None:
        sys.exit("%s: no period found on training stream %d" % (ideal_path, si))
    anchor = pick_anchor(I.seq, p, first)
    I.segment(anchor, nsteps)
    if anchor not in {r[3] for r in R.seq}:
        sys.exit("%s: anchor %s not on training stream %d" % (rap_path, shorten(anchor), sr))
    R.segment(anchor, nsteps)
    pr = detect_period([r[3] for r in R.seq])

    rows = []
    sm = difflib.SequenceMatcher(None, I.canon, R.canon, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            pairs = [(i1 + t, j1 + t) for t in range(i2 - i1)]
        else:
            pairs = [(i, None) for i in range(i1, i2)] + [(None, j) for j in range(j1, j2)]
        for ki, kr in pairs:
            name = I.canon[ki] if ki is not None else R.canon[kr]
            row = {"pos_ideal": ki, "pos_rap": kr, "name": name, "short": shorten(name)}
            for tag2, run, k in (("ideal", I, ki), ("rap", R, kr)):
                row["dur_" + tag2] = med(run.dur[k]) if k is not None else None
                row["gap_" + tag2] = med(run.gap[k]) if k is not None else None
                row["dur_mean_" + tag2] = mean(run.dur[k]) if k is not None else None
                row["gap_mean_" + tag2] = mean(run.gap[k]) if k is not None else None
            both = ki is not None and kr is not None
            for q in ("dur", "gap", "dur_mean", "gap_mean"):
                row["d_" + q] = row[q + "_rap"] - row[q + "_ideal"] if both else None
            rows.append(row)

    def tot(key):
        return sum(r[key] for r in rows if r[key] is not None)

    summary = {
        "steps_ideal": len(I.starts), "steps_rap": len(R.starts),
        "skipped_ideal": I.skipped, "skipped_rap": R.skipped,
        "period_ideal": p, "period_rap": pr, "step_len_ideal": len(I.canon), "step_len_rap": len(R.canon),
        "stream_ideal": si, "stream_rap": sr, "anchor": anchor,
        "span_median_ideal": med(I.spans), "span_median_rap": med(R.spans),
        "span_mean_ideal": mean(I.spans), "span_mean_rap": mean(R.spans),
        "sum_d_dur": tot("d_dur"), "sum_d_gap": tot("d_gap"),
        "sum_d_dur_mean": tot("d_dur_mean"), "sum_d_gap_mean": tot("d_gap_mean"),
        "negative_gaps_ideal": I.negative_gaps, "negative_gaps_rap": R.negative_gaps,
    }
    offs = R.offsets()
    side = []
    for (stream, kind, name, occ), v in R.side().items():
        o, d = med([x[0] for x in v]), med([x[1] for x in v])
        beside = [k for k, (s, e) in enumerate(offs) if s < o + d and o < e]
        side.append({"stream": stream, "kind": kind, "name": name, "short": shorten(name), "occurrence": occ,
                     "present": len(v), "dur": d, "offset": o, "beside": beside})
    side.sort(key=lambda x: (x["offset"], x["stream"]))
    return {"ideal": ideal_path, "rap": rap_path, "summary": summary, "positions": rows, "side_rap": side}


def fmt(x, w=8):
    return "%*s" % (w, "-") if x is None else "%*.2f" % (w, x)


def ranges(ks):
    """[3,4,5,9] -> '3-5,9'."""
    out, i = [], 0
    while i < len(ks):
        j = i
        while j + 1 < len(ks) and ks[j + 1] == ks[j] + 1:
            j += 1
        out.append(str(ks[i]) if i == j else "%d-%d" % (ks[i], ks[j]))
        i = j + 1
    return ",".join(out)


def report(res):
    s = res["summary"]
    print("ideal %s: training stream %d, period %d, step %d records, %d steps used (%d skipped)"
          % (res["ideal"], s["stream_ideal"], s["period_ideal"], s["step_len_ideal"], s["steps_ideal"],
             s["skipped_ideal"]))
    print("rap   %s: training stream %d, period %s, step %d records, %d steps used (%d skipped)"
          % (res["rap"], s["stream_rap"], s["period_rap"], s["step_len_rap"], s["steps_rap"], s["skipped_rap"]))
    print("step anchor: %s" % shorten(s["anchor"], 200))
    if s["step_len_ideal"] != s["period_ideal"]:
        print("WARNING: ideal step length %d != period %d (anchor not once per period?)"
              % (s["step_len_ideal"], s["period_ideal"]))
    for t in ("ideal", "rap"):
        if s["negative_gaps_" + t]:
            print("WARNING: %d negative gaps in %s: records on the training stream overlap" % (s["negative_gaps_" + t], t))
    print("\nmedians in µs; gap = start - end of the previous training-stream record; * |diff| >= 0.5")
    print("%4s %4s  %-60s %8s %8s %8s %8s %8s %8s" % ("k", "k_r", "name", "dur_i", "dur_r", "d_dur",
                                                    "gap_i", "gap_r", "d_gap"))
    for r in res["positions"]:
        mark = "*" if any(r[q] is not None and abs(r[q]) >= 0.5 for q in ("d_dur", "d_gap")) else " "
        print("%4s %4s  %-60s %s %s %s %s %s %s %s" % (
            "-" if r["pos_ideal"] is None else r["pos_ideal"], "-" if r["pos_rap"] is None else r["pos_rap"],
            r["short"], fmt(r["dur_ideal"]), fmt(r["dur_rap"]), fmt(r["d_dur"]), fmt(r["gap_ideal"]),
            fmt(r["gap_rap"]), fmt(r["d_gap"]), mark))
    print("\nstep span (anchor to next anchor): median ideal %.2f rap %.2f diff %+.2f µs; "
          "mean ideal %.2f rap %.2f diff %+.2f µs"
          % (s["span_median_ideal"], s["span_median_rap"], s["span_median_rap"] - s["span_median_ideal"],
             s["span_mean_ideal"], s["span_mean_rap"], s["span_mean_rap"] - s["span_mean_ideal"]))
    print("sum of median diffs: durations %+.2f µs, gaps %+.2f µs, total %+.2f µs"
          % (s["sum_d_dur"], s["sum_d_gap"], s["sum_d_dur"] + s["sum_d_gap"]))
    print("sum of mean diffs:   durations %+.2f µs, gaps %+.2f µs, total %+.2f µs (~ mean span diff)"
          % (s["sum_d_dur_mean"], s["sum_d_gap_mean"], s["sum_d_dur_mean"] + s["sum_d_gap_mean"]))
    print("\nrap: other streams per step (offset = start - anchor start, medians in µs; "
          "beside = training positions k_r overlapped)")
    print("%6s %-6s %-60s %7s %8s %9s  %s" % ("stream", "kind", "name", "present", "dur", "offset", "beside"))
    for x in res["side_rap"]:
        print("%6d %-6s %-60s %7s %8.2f %9.2f  %s" % (
            x["stream"], x["kind"], x["short"] + ("" if x["occurrence"] == 0 else " #%d" % x["occurrence"]),
            "%d/%d" % (x["present"], s["steps_rap"]), x["dur"], x["offset"], ranges(x["beside"])))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ideal")
    ap.add_argument("rap")
    ap.add_argument("--steps", type=int, default=40, help="last whole steps used (default 40)")
    ap.add_argument("--first", help="substring of the step's first kernel name")
    ap.add_argument("--stream-ideal", type=int)
    ap.add_argument("--stream-rap", type=int)
    ap.add_argument("--kernels-only", action="store_true", help="ignore memcpy/memset on the training stream")
    ap.add_argument("--json", help="also write the table and summary as JSON to this file")
    a = ap.parse_args(argv)
    res = analyse(a.ideal, a.rap, a.steps, a.first, a.stream_ideal, a.stream_rap, a.kernels_only)
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
