#!/bin/bash
# bench/device_continuous.sh [BIN_DIR]: continuous training's two device
# measurements, in one device call from a carried build (nothing is built
# here; `bash bench/exp/carry_dev.sh` prepares BIN_DIR, default .carry/dev):
#   tests   the GPU tests of both (rap_tests progressive, replan_swap,
#           guard): the kernel against the CPU reference bin for bin, the
#           trainer's progressive metrics against an offline evaluation on
#           the GPU, a swap in rap mode against the new schedule from the
#           start, bit for bit
#   pv      progressive validation's cost: rap bench of plan 0 (the paper's
#           model, batch 4096, the shipped schedule, CUDA graphs) in rap
#           mode without and with --progressive, interleaved ROUNDS times;
#           samples/s of each, the median cost in % (the goal: <= 1 %);
#           and rap train on generated rows without and with --progressive
#           (the trainer's step lines read the window: its cost there too)
#   replan  a --follow --replan run on a directory whose list lengths
#           change mid-run: part 1 as generated, part 2 with every
#           categorical field of the first half of the columns blanked
#           (empty lists: the computed-offset kernels' work changes),
#           copied in PART2_AFTER seconds into the run; the swap in the
#           log, the metrics and the trace (--trace-steps covers it); then
#           rap bench (ideal, rap) on each part with the shipped schedule
#           and with the one swapped in (--replan-out): rap / ideal before
#           and after
# Knobs: OUT (default out), PARTS (tests,pv,replan), BUDGET (seconds for the
# whole call, default 480: each step under timeout with what is left, and
# skipped, saying so, when too little is), ROUNDS (pv: 3), STEPS (rap bench
# timed steps, 200), ROWS (generated rows per part, 2000000), PART2_AFTER
# (seconds, 8: within the run's --idle-timeout 15 of the first part's end),
# EVERY (--replan-every, 50), DATA_DIR (/tmp/rap_continuous:
# the generated data and the followed directory, outside OUT so that the
# results stay small).
# Run from the repository root (plans/ are read from there).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
OUT=$(cd "$OUT" && pwd)
PARTS=${PARTS:-tests,pv,replan}
BUDGET=${BUDGET:-480}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
ROWS=${ROWS:-2000000}
PART2_AFTER=${PART2_AFTER:-8}
EVERY=${EVERY:-50}
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
note() { echo "$*" | tee -a "$SUMMARY"; }
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }
lim() {
  local l; l=$(left)
  if [ "$l" -lt "$3" ]; then echo "skipped $1: ${l}s left" | tee -a "$SUMMARY" >&2; return; fi
  l=$((l - 5)); [ "$2" -lt "$l" ] && l=$2; echo "$l"
}

MODEL="--model paper --batch 4096"
PLAN=plans/plan0.plan
SCHED=plans/h200/plan0_4096.schedule
CAP=plans/h200/capacity/plan0_4096.capacity
PRED=plans/h200/predictor

note "== $(cat "$B/COMMIT" 2>/dev/null || echo 'commit unknown') on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"

if has tests; then
  for p in progressive replan_swap guard; do
    t=$(lim "tests $p" 120 20); [ -z "$t" ] && continue
    timeout "$t" "$B/rap_tests" "$p" > "$OUT/tests_$p.log" 2>&1
    note "rap_tests $p: exit $? $(tail -1 "$OUT/tests_$p.log")"
    grep -h "SKIP\|FAIL" "$OUT/tests_$p.log" | head -5 | tee -a "$SUMMARY"
  done
fi

# samples/s of mode rap in a rap bench --json file
sps() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print([m["samples_per_s"] for m in d["modes"] if m["mode"]=="rap"][0])' "$1" 2>/dev/null || echo nan; }

if has pv; then
  for r in $(seq 1 "$ROUNDS"); do
    for pv in off on; do
      t=$(lim "pv bench $r $pv" 60 20); [ -z "$t" ] && continue
      flag=""; [ "$pv" = on ] && flag="--progressive"
      timeout "$t" "$B/rap" bench --plan $PLAN $MODEL --schedule $SCHED --modes rap --cuda-graph \
        --steps "$STEPS" --warmup 20 $flag --json --quiet > "$OUT/pv_bench_${pv}_$r.json" \
        2> "$OUT/pv_bench_${pv}_$r.err"
      note "rap bench $pv round $r: exit $? samples/s $(sps "$OUT/pv_bench_${pv}_$r.json")"
    done
  done
  python3 - "$OUT" "$ROUNDS" <<'PY' | tee -a "$SUMMARY"
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def sps(p):
    try:
        return [m["samples_per_s"] for m in json.load(open(p))["modes"] if m["mode"] == "rap"][0]
    except Exception:
        return None
off = [sps(f"{out}/pv_bench_off_{r}.json") for r in range(1, n + 1)]
on = [sps(f"{out}/pv_bench_on_{r}.json") for r in range(1, n + 1)]
costs = [100 * (a - b) / a for a, b in zip(off, on) if a and b]
print("progressive validation, rap bench plan 0 batch 4096: samples/s off", off, "on", on)
print("cost per round (%):", [round(c, 2) for c in costs],
      "median %.2f %%" % statistics.median(costs) if costs else "no pair measured",
      "(goal <= 1 %)")
PY
  for pv in off on; do
    t=$(lim "pv train $pv" 90 30); [ -z "$t" ] && continue
    flag=""; [ "$pv" = on ] && flag="--progressive"
    timeout "$t" "$B/rap" train --plan $PLAN $MODEL --schedule $SCHED --cuda-graph --gen-rows 4000000 \
      --gen-eval-rows 10000 --eval-rows 10000 $flag --metrics "$OUT/pv_train_$pv.jsonl" \
      > "$OUT/pv_train_$pv.log" 2>&1
    note "rap train $pv: exit $? $(tail -1 "$OUT/pv_train_$pv.jsonl" | grep -o '"samples_per_s":[^,]*')"
  done
  grep -h "pv AUC" "$OUT/pv_train_on.log" | tail -2 | tee -a "$SUMMARY"
fi

if has replan; then
  DATA=${DATA_DIR:-/tmp/rap_continuous}
  D=$DATA/follow
  rm -rf "$D" "$OUT/rs"*; mkdir -p "$D"
  t=$(lim "replan gen" 120 30)
  if [ -n "$t" ]; then
    timeout "$t" "$B/rap" gen --rows "$ROWS" --seed 7 --out "$DATA/part1.tsv" 2> "$OUT/gen1.err"
    timeout "$t" "$B/rap" gen --rows "$ROWS" --seed 8 --out "$DATA/part2_full.tsv" 2> "$OUT/gen2.err"
    # label, 13 dense, 26 categorical: blank categorical fields 15..27 (empty lists)
    awk 'BEGIN{FS=OFS="\t"} {for (i = 15; i <= 27; i++) $i = ""; print}' "$DATA/part2_full.tsv" \
      > "$DATA/part2.tsv"
    cp "$DATA/part1.tsv" "$D/a.tsv"
    note "replan data: $(wc -l < "$DATA/part1.tsv") rows, then $(wc -l < "$DATA/part2.tsv") with 13 categorical columns empty"
  fi
  t=$(lim "replan train" 150 60)
  if [ -n "$t" ]; then
    ( sleep "$PART2_AFTER"; cp "$DATA/part2.tsv" "$D/.b.tsv.tmp" && mv "$D/.b.tsv.tmp" "$D/b.tsv" ) &  # a dot file is never read as data
    timeout "$t" "$B/rap" train --plan $PLAN $MODEL --schedule $SCHED --data "$D" --follow \
      --idle-timeout 15 --eval-fraction 0 --replan --replan-every "$EVERY" --capacity $CAP \
      --predictor $PRED --replan-out "$OUT/rs" --trace "$OUT/replan_trace.json" --trace-steps 1000 \
      --metrics "$OUT/replan.jsonl" --log-every 100 > "$OUT/replan_train.log" 2>&1
    note "rap train --follow --replan: exit $?"
    wait
    grep -h "replan" "$OUT/replan_train.log" | head -20 | tee -a "$SUMMARY"
    grep -h '"event":"replan"' "$OUT/replan.jsonl" | tee -a "$SUMMARY"
    grep -o '"name":"replan: [a-z]*"' "$OUT/replan_trace.json" 2>/dev/null | sort | uniq -c | tee -a "$SUMMARY"
  fi
  NEW=$(ls -1 "$OUT"/rs.step* 2>/dev/null | grep -v fusion | tail -1)
  for part in part1 part2; do
    for s in shipped new; do
      S=$SCHED; [ "$s" = new ] && S=$NEW
      [ -z "$S" ] && { note "bench $part $s: no schedule swapped in"; continue; }
      t=$(lim "bench $part $s" 90 30); [ -z "$t" ] && continue
      timeout "$t" "$B/rap" bench --plan $PLAN $MODEL --schedule "$S" --data "$DATA/$part.tsv" \
        --modes ideal,rap --cuda-graph --steps "$STEPS" --warmup 20 --json --quiet \
        > "$OUT/bench_${part}_$s.json" 2> "$OUT/bench_${part}_$s.err"
      note "bench $part with the $s schedule: exit $? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("rap/ideal", [round(m["vs_ideal"],4) for m in d["modes"] if m["mode"]=="rap"])' "$OUT/bench_${part}_$s.json" 2>&1)"
    done
  done
fi
note "== done in $(( $(date +%s) - T0 )) s"
