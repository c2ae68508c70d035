#!/usr/bin/env python3
"""bench/place_compare.py RAP [OUT.md]: the placement comparison of
docs/PLANNER.md ("Placement over several GPUs"): `rap plan --placement all`
for plans 0-3 on R = 2, 4, 8 GPUs, batch 4096 per GPU, with assumed
capacities F = 0.15 and 0.25 (--capacity-fraction), analytic latencies.
Prints one markdown table per F (exposed = max over ranks, ms; MB per
iteration; search's gain over owner and batch; planning seconds)."""
import json, os, subprocess, sys, tempfile, time

rap = sys.argv[1] if len(sys.argv) > 1 else "build/rap"
out = open(sys.argv[2], "w") if len(sys.argv) > 2 else sys.stdout
tmp = tempfile.mkdtemp(prefix="place_compare_")

def gain(a, b):
    if a == 0 and b == 0:
        return "1x"
    if b == 0:
        return "all hidden"
    return "%.1fx" % (a / b)

for F in ("0.15", "0.25"):
    print("\nF = %s:\n" % F, file=out)
    print("| plan | R | owner ms | batch ms | search ms | moves | owner MB | batch MB | search MB "
          "| vs owner | vs batch | planning s |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|", file=out)
    for plan in ("plan0", "plan1", "plan2", "plan3"):
        for R in (2, 4, 8):
            rep = os.path.join(tmp, "%s_%d_%s.json" % (plan, R, F))
            t0 = time.time()
            subprocess.run([rap, "plan", "--plan", "plans/%s.plan" % plan, "--gpus", str(R),
                            "--batch", "4096", "--placement", "all", "--capacity-fraction", F,
                            "--out", os.path.join(tmp, "S"), "--report", rep, "--quiet"],
                           check=True, stdout=subprocess.DEVNULL)
            secs = time.time() - t0
            pl = {p["placement"]: p for p in json.load(open(rep))["placements"]}
            o, b, s = (pl[k]["exposed_max_ms"] for k in ("owner", "batch", "search"))
            mb = [pl[k]["bytes_moved"] / 1e6 for k in ("owner", "batch", "search")]
            print("| %s | %d | %.4f | %.4f | %.4f | %d | %.2f | %.2f | %.2f | %s | %s | %.1f |"
                  % (plan, R, o, b, s, pl["search"].get("moves", 0), mb[0], mb[1], mb[2],
                     gain(o, s), gain(b, s), secs), file=out, flush=True)
