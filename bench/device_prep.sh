#!/bin/bash
# bench/device_prep.sh BUILD_DIR: the foundation's checks on a GPU machine
# (with a build carried there, docs/BUILD.md): GPU tests, a memory
# checker pass over the GPU tests, the preprocessing and parsing benchmarks,
# and `rap prep` on the GPU. Everything lands in $OUT (or ./out).
set -u -o pipefail
B=${1:-build}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== tests"
"$B/rap_tests" > "$OUT/tests.log" 2>&1; echo "rap_tests exit $?" | tee -a "$OUT/tests.log"
grep -E "FAIL|passed" "$OUT/tests.log"
echo "== compute-sanitizer memcheck on the GPU tests"
if command -v compute-sanitizer >/dev/null; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/rap_tests" _gpu > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$OUT/memcheck.log"; tail -3 "$OUT/memcheck.log"
fi
echo "== bench_prep"
"$B/bench_prep" --json "$OUT/bench_prep.json" > "$OUT/bench_prep.log" 2>&1; echo "exit $?"
echo "== bench_parse"
"$B/bench_parse" --rows 4000000 --json "$OUT/bench_parse.json" > "$OUT/bench_parse.log" 2>&1; echo "exit $?"
tail -20 "$OUT/bench_parse.log"
echo "== rap prep on the GPU (plan 0, 2M generated rows)"
"$B/rap" gen --rows 2000000 --seed 5 --out /tmp/day.tsv --quiet 2>&1 | tail -2
for plan in plans/plan0.plan plans/plan3.plan; do
  "$B/rap" prep --quiet --device gpu --plan $plan --input /tmp/day.tsv --batch 65536 2>&1 | tail -1
  "$B/rap" prep --quiet --device cpu --plan $plan --input /tmp/day.tsv --batch 65536 2>&1 | tail -1
done
"$B/rap" prep --quiet --device gpu --plan plans/plan0.plan --input /tmp/day.tsv --max-rows 100000 --output /tmp/g.tsv 2>&1 | tail -1
"$B/rap" prep --quiet --device cpu --plan plans/plan0.plan --input /tmp/day.tsv --max-rows 100000 --output /tmp/c.tsv 2>&1 | tail -1
cmp /tmp/g.tsv /tmp/c.tsv && echo "rap prep output: GPU == CPU byte for byte (100000 rows, plan 0)"
cat "$OUT/bench_prep.log" | tail -60
