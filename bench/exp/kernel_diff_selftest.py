#!/usr/bin/env python3
"""Self-test of bench/exp/kernel_diff.py on synthetic CUPTI traces.

Usage: python3 bench/exp/kernel_diff_selftest.py      (exit 0: pass, 1: a mismatch)

Generates ideal.csv and rap.csv (cupti_trace.c's format) in a temporary
directory: init kernels, 10 slower warm-up steps and 60 timed steps of a
10-record training step (kernels, a memset, a loss memcpy; one kernel name
twice; one name with commas; ±0.1 µs jitter; rows shuffled), the training
stream id differing between the runs, one irregular step, and in rap a
preprocessing stream (one of its kernels shares a training kernel's name) and
a copy stream. rap = ideal + 2 µs on position 3's duration + 1 µs on the gap
before position 5. Checks that kernel_diff finds exactly these."""
import csv
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_diff  # noqa: E402

GATHER = "_ZN3rap3emb6gatherILi64EEEvPKfPf"
SGD = "void sgd<float, 2>(float*, int)"
# (kind, name, duration ns, gap before ns); position 0 is the step's first kernel
STEP = [
    ("kernel", GATHER, 20000, 5000),
    ("kernel", "_Z8pool_sumPKfPfi", 8000, 1500),
    ("kernel", "_Z4gemmPKfS0_Pf", 30000, 1000),
    ("kernel", "_Z8relu_fwdPfi", 4000, 1200),
    ("kernel", "_Z4gemmPKfS0_Pf", 25000, 900),
    ("kernel", "_Z8loss_bcePKfS0_Pf", 3000, 1100),
    ("kernel", SGD, 12000, 800),
    ("memset", "memset", 2000, 500),
    ("kernel", "_Z7emb_bwdPKfPf", 15000, 700),
    ("memcpy", "memcpy_DtoH", 2500, 600),
]
SLOW_DUR_POS, SLOW_DUR_US = 3, 2.0
SLOW_GAP_POS, SLOW_GAP_US = 5, 1.0
JITTER = 100  # ns, uniform ±
WARMUP, TIMED, IRREGULAR = 10, 60, 35  # step IRREGULAR has an extra kernel at its end


def gen(path, rap, seed):
    rnd = random.Random(seed)
    train = 13 if rap else 7
    rows, t = [], 1_000_000_000

    def rec(kind, name, stream, s, e, corr=0, graph=0):
        rows.append([kind, name, stream, corr, graph, s, e, 0 if kind != "kernel" else 128,
                     0 if kind != "kernel" else 256, 0 if kind == "kernel" else 4096])

    for i in range(3):  # init on the training stream and another
        rec("kernel", "_Z8init_rngPf", train, t, t + 3000)
        rec("kernel", "_Z8init_rngPf", 3, t, t + 3000)
        t += 10000
    rec("memcpy", "memcpy_HtoD", train, t, t + 5000)
    t += 50000
    for step in range(WARMUP + TIMED):
        slow = 1.5 if step < WARMUP else 1.0
        t0 = None
        for k, (kind, name, dur, gap) in enumerate(STEP):
            g = gap + rnd.uniform(-JITTER, JITTER) + (SLOW_GAP_US * 1000 if rap and k == SLOW_GAP_POS else 0)
            d = dur * slow + rnd.uniform(-JITTER, JITTER) + (SLOW_DUR_US * 1000 if rap and k == SLOW_DUR_POS else 0)
            t += int(g)
            if t0 is None:
                t0 = t
            rec(kind, name, train, t, t + int(d), corr=step, graph=1 + (k > 4))
            t += int(d)
        if step == IRREGULAR:
            t += 400
            rec("kernel", "_Z9log_statsPf", train, t, t + 900)
            t += 900
        if rap:  # preprocessing beside the step
            rec("memcpy", "memcpy_HtoD", 22, t0 + 2000, t0 + 32000)
            rec("kernel", "_Z11hash_bucketPKiPii", 21, t0 + 10000, t0 + 50000)
            rec("kernel", "_Z8pool_sumPKfPfi", 21, t0 + 60000, t0 + 65000)
    rec("kernel", "_Z8no_timesv", train, 0, 0)  # no timestamps: ignored
    rnd.shuffle(rows)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "name", "stream", "correlation", "graph", "start_ns", "end_ns", "grid", "block",
                    "bytes"])
        w.writerows(rows)


def main():
    errors = []

    def check(cond, what):
        if not cond:
            errors.append(what)
            print("MISMATCH:", what)

    def close(x, want, tol, what):
        check(x is not None and abs(x - want) <= tol, "%s = %s, expected %.2f ± %.2f" % (what, x, want, tol))

    with tempfile.TemporaryDirectory() as d:
        ideal, rap, js = (os.path.join(d, n) for n in ("ideal.csv", "rap.csv", "out.json"))
        gen(ideal, False, 1)
        gen(rap, True, 2)

        res = kernel_diff.analyse(ideal, rap, nsteps=40)
        s = res["summary"]
        check(s["stream_ideal"] == 7 and s["stream_rap"] == 13, "training streams %s/%s, expected 7/13"
              % (s["stream_ideal"], s["stream_rap"]))
        check(s["period_ideal"] == len(STEP) and s["step_len_ideal"] == len(STEP)
              and s["step_len_rap"] == len(STEP), "period/step length %s/%s/%s, expected %d"
              % (s["period_ideal"], s["step_len_ideal"], s["step_len_rap"], len(STEP)))
        check(s["anchor"] == GATHER, "anchor %s, expected %s" % (s["anchor"], GATHER))
        check(s["steps_ideal"] == 40 and s["steps_rap"] == 40, "steps used %s/%s" % (s["steps_ideal"], s["steps_rap"]))
        check(s["skipped_ideal"] == 1 and s["skipped_rap"] == 1, "skipped %s/%s, expected 1/1"
              % (s["skipped_ideal"], s["skipped_rap"]))
        pos = res["positions"]
        check(len(pos) == len(STEP), "%d positions" % len(pos))
        for k, r in enumerate(pos):
            check(r["pos_ideal"] == k and r["pos_rap"] == k and r["name"] == STEP[k][1],
                  "position %d is %s/%s %s" % (k, r["pos_ideal"], r["pos_rap"], r["name"]))
            close(r["d_dur"], SLOW_DUR_US if k == SLOW_DUR_POS else 0.0, 0.1, "d_dur[%d]" % k)
            close(r["d_gap"], SLOW_GAP_US if k == SLOW_GAP_POS else 0.0, 0.1, "d_gap[%d]" % k)
            close(r["dur_ideal"], STEP[k][2] / 1000, 0.1, "dur_ideal[%d]" % k)
            close(r["gap_ideal"], STEP[k][3] / 1000, 0.1, "gap_ideal[%d]" % k)
        want = SLOW_DUR_US + SLOW_GAP_US
        close(s["span_median_rap"] - s["span_median_ideal"], want, 0.3, "median span diff")
        close(s["span_mean_rap"] - s["span_mean_ideal"], want, 0.1, "mean span diff")
        close(s["sum_d_dur"], SLOW_DUR_US, 0.3, "sum of duration diffs")
        close(s["sum_d_gap"], SLOW_GAP_US, 0.3, "sum of gap diffs")
        close(s["sum_d_dur_mean"] + s["sum_d_gap_mean"], want, 0.1, "sum of mean diffs")
        span = sum(x[2] + x[3] for x in STEP) / 1000
        close(s["span_median_ideal"], span, 0.4, "ideal span")
        side = {(x["stream"], x["name"]): x for x in res["side_rap"]}
        check(len(side) == 3, "%d side records, expected 3" % len(side))
        hb = side.get((21, "_Z11hash_bucketPKiPii"))
        check(hb is not None and hb["present"] == 40 and hb["beside"] == [0, 1, 2], "hash_bucket %s" % hb)
        if hb:
            close(hb["offset"], 10.0, 0.05, "hash_bucket offset")
            close(hb["dur"], 40.0, 0.05, "hash_bucket duration")
        cp = side.get((22, "memcpy_HtoD"))
        check(cp is not None and abs(cp["offset"] - 2.0) < 0.05 and cp["beside"] == [0, 1, 2], "copy %s" % cp)
        check(kernel_diff.shorten(GATHER) == "rap::emb::gather<...>", "shorten: %s" % kernel_diff.shorten(GATHER))

        # rotated steps: relu first; the slow duration is then k = 0, the slow gap k = 2
        res = kernel_diff.analyse(ideal, rap, nsteps=40, first="relu_fwd")
        pos = res["positions"]
        check(pos[0]["name"] == "_Z8relu_fwdPfi", "--first relu_fwd: position 0 is %s" % pos[0]["name"])
        close(pos[0]["d_dur"], SLOW_DUR_US, 0.1, "rotated d_dur[0]")
        close(pos[2]["d_gap"], SLOW_GAP_US, 0.1, "rotated d_gap[2]")

        # the CLI, with --json, and a --first that matches a name twice per step (must fail)
        out = subprocess.run([sys.executable, os.path.join(HERE, "kernel_diff.py"), ideal, rap, "--json", js],
                             capture_output=True, text=True)
        check(out.returncode == 0, "CLI exit %d: %s" % (out.returncode, out.stderr[-500:]))
        if out.returncode == 0:
            j = json.load(open(js))
            close(j["positions"][SLOW_DUR_POS]["d_dur"], SLOW_DUR_US, 0.1, "JSON d_dur")
            check("hash_bucket" in out.stdout and "step span" in out.stdout, "CLI output incomplete")
        bad = subprocess.run([sys.executable, os.path.join(HERE, "kernel_diff.py"), ideal, rap, "--first", "gemm"],
                             capture_output=True, text=True)
        check(bad.returncode != 0 and "occurs 2 times" in bad.stderr, "--first gemm: exit %d %s"
              % (bad.returncode, bad.stderr))
        if "-v" in sys.argv:
            print(out.stdout)
    print("kernel_diff selftest: %s" % ("FAIL (%d)" % len(errors) if errors else "pass"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
