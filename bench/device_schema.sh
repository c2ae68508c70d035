#!/bin/bash
# bench/device_schema.sh BIN_DIR: the GPU parser over input schemas on a GPU
# machine, from a carried build (BIN_DIR: rap_tests, bench_schema and lib/,
# as bench/exp/carry_schema.sh makes it in .carry/schema, the default), in
# about two minutes: the schema parse tests (the reference against the CPU
# schema parser; on the GPU the device string hash against the host's and
# the kernels, lists and CSV quoting included, against the reference), the
# Criteo parse tests again (the kernel changed), compute-sanitizer memcheck
# over the GPU schema tests, then bench_schema on 2M generated multi-hot
# rows (the CPU reader and the GPU kernels; Parquet is skipped: this build
# has no Arrow, and the Parquet numbers come from the development machine).
# Everything lands in $OUT (or ./out); every step runs under timeout.
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/schema
test -f "$B/COMMIT" && echo "build of $(cat "$B/COMMIT")" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== schema parse tests"
timeout 150 "$B/rap_tests" parse_ > "$OUT/parse_tests.log" 2>&1
echo "rap_tests parse_ exit $?" | tee -a "$OUT/parse_tests.log"
grep -E "FAIL|SKIP|CHECK|passed" "$OUT/parse_tests.log" | head -30
if command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck: rap_tests parse_schema_gpu"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/rap_tests" \
    parse_schema_gpu > "$OUT/schema_memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$OUT/schema_memcheck.log"; tail -3 "$OUT/schema_memcheck.log"
fi
echo "== bench_schema --rows 2000000"
timeout 200 "$B/bench_schema" --rows 2000000 --out /tmp/rap_bench_schema.tsv \
  > "$OUT/bench_schema.log" 2>&1
echo "bench_schema exit $?"
tail -12 "$OUT/bench_schema.log"
