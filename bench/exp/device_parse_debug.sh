#!/bin/bash
# bench/exp/device_parse_debug.sh [BIN_DIR]: the GPU parse path's tests and
# one short `rap bench --parse gpu` under cuda-gdb (the device machine has
# no gdb), printing every thread's backtrace if it stops on a signal.
# Data: DATA_DIR (/tmp/rap_parse_debug), ROWS rows (400000) by `rap gen`.
# Run from the repository root with a carried build (bench/exp/carry_dev.sh).
set -u -o pipefail
. "$(dirname "$0")/../carried.sh" && carried_build "${1:-}" .carry/dev
D=${DATA_DIR:-/tmp/rap_parse_debug}
mkdir -p "$D"
echo "== $(cat "$B/COMMIT" 2>/dev/null)"
for tp in parse_feed_gpu train_parse_gpu dist_parse_gpu; do
  timeout 120 "$B/rap_tests" "$tp" > "$OUT/tests_$tp.log" 2>&1
  echo "rap_tests $tp: exit $?"; grep -E "CHECK|FAIL|SKIP|REQUIRE|error|passed" "$OUT/tests_$tp.log" | head -12
done
[ -s "$D/rows.tsv" ] || timeout 60 "$B/rap" gen --rows "${ROWS:-400000}" --seed 7 --out "$D/rows.tsv" --quiet
ARGS="bench --plan plans/plan0.plan --model paper --batch 4096 --steps 40 --warmup 5 --modes ideal,rap --schedule plans/h200/plan0_4096.schedule --cuda-graph --data $D/rows.tsv --json --quiet"
for p in "--parse gpu --threads 1" "--parse gpu --threads 4"; do
  timeout 120 "$B/rap" $ARGS $p > "$OUT/bench.json" 2> "$OUT/bench.err"
  rc=$?
  echo "rap bench $p: exit $rc; $(tail -2 "$OUT/bench.err")"
  if [ $rc -ge 128 ] || [ $rc = 124 ]; then
    timeout 150 cuda-gdb -batch -ex "set pagination off" -ex run -ex bt -ex "thread apply all bt 12" \
      --args "$B/rap" $ARGS $p > "$OUT/gdb.txt" 2>&1
    grep -v "^\[New Thread\|^\[Thread .* exited\|^$" "$OUT/gdb.txt" | grep -A40 "SIG\|signal" | head -120
    break
  fi
done
