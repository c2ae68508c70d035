#!/bin/bash
# bench/device_parse.sh BIN_DIR: the GPU parser on a GPU machine, from a
# carried build (BIN_DIR: rap_tests, bench_parse_gpu and lib/, as
# bench/exp/carry_parse.sh makes it in .carry/parse, the default), in
# about a minute or two: the parse tests (the CPU reference against the
# CPU parser, the kernels against the reference), compute-sanitizer's
# memcheck over the GPU parse tests and racecheck over one of them, then
# bench_parse_gpu on 4M generated rows. Everything lands in $OUT (or
# ./out); the last lines printed are the benchmark's table. Every step
# runs under timeout (exit 124: it hung, e.g. a look-back that waits on a
# tile never published).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/parse
test -f "$B/COMMIT" && echo "build of $(cat "$B/COMMIT")" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== parse tests"
timeout 120 "$B/rap_tests" parse_ > "$OUT/parse_tests.log" 2>&1
echo "rap_tests parse_ exit $?" | tee -a "$OUT/parse_tests.log"
grep -E "FAIL|SKIP|CHECK|passed" "$OUT/parse_tests.log" | head -20
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck: rap_tests parse_gpu"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/rap_tests" parse_gpu \
    > "$OUT/parse_memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$OUT/parse_memcheck.log"; tail -3 "$OUT/parse_memcheck.log"
  echo "== compute-sanitizer racecheck: rap_tests parse_gpu_long_lines"
  timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/rap_tests" \
    parse_gpu_long_lines > "$OUT/parse_racecheck.log" 2>&1
  echo "racecheck exit $?" | tee -a "$OUT/parse_racecheck.log"; tail -3 "$OUT/parse_racecheck.log"
fi
echo "== bench_parse_gpu --rows 4000000"
timeout 120 "$B/bench_parse_gpu" --rows 4000000 --json "$OUT/bench_parse_gpu.json" \
  > "$OUT/bench_parse_gpu.log" 2>&1
echo "bench_parse_gpu exit $?"
tail -12 "$OUT/bench_parse_gpu.log"
