#!/bin/bash
# bench/exp/device_heapcheck.sh [BIN_DIR]: looks for the host heap
# corruption that `compute-sanitizer --tool memcheck rap_tests parse_gpu`
# ended with (bench/RESULTS.md, 2026-12-02): the GPU parse tests with
# glibc's heap checks (MALLOC_CHECK_=3, MALLOC_PERTURB_), then under
# compute-sanitizer; when a run aborts, the same run under cuda-gdb with
# the heap checks for the backtrace of the abort. TESTS (default
# "parse_gpu parse_feed_gpu train_parse_gpu"): the rap_tests filters;
# MEMCHECK_LIMIT (240): seconds for the compute-sanitizer run.
# Run from the repository root with a carried build (bench/exp/carry_dev.sh).
set -u -o pipefail
. "$(dirname "$0")/../carried.sh" && carried_build "${1:-}" .carry/dev
echo "== $(cat "$B/COMMIT" 2>/dev/null)"
gdb_bt() { # name args...: the backtrace of an abort
  local n=$1; shift
  MALLOC_CHECK_=3 MALLOC_PERTURB_=165 timeout 200 cuda-gdb -batch -ex "set pagination off" \
    -ex run -ex bt -ex "thread apply all bt 10" --args "$@" > "$OUT/gdb_$n.txt" 2>&1
  grep -v "^\[New Thread\|^\[Thread .* exited\|^$" "$OUT/gdb_$n.txt" | grep -B2 -A40 "SIG\|signal" | head -80
}
for f in ${TESTS:-parse_gpu parse_feed_gpu train_parse_gpu}; do
  MALLOC_CHECK_=3 MALLOC_PERTURB_=165 timeout 150 "$B/rap_tests" "$f" > "$OUT/heap_$f.log" 2>&1
  rc=$?
  echo "heap-checked rap_tests $f: exit $rc -- $(tail -1 "$OUT/heap_$f.log")"
  [ $rc -ge 128 ] && { tail -5 "$OUT/heap_$f.log"; gdb_bt "$f" "$B/rap_tests" "$f"; }
done
if command -v compute-sanitizer > /dev/null 2>&1; then
  timeout "${MEMCHECK_LIMIT:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/rap_tests" parse_gpu \
    > "$OUT/memcheck_parse_gpu.log" 2>&1
  rc=$?
  echo "memcheck rap_tests parse_gpu: exit $rc -- $(grep -E 'ERROR SUMMARY|passed' "$OUT/memcheck_parse_gpu.log" | tail -2 | tr '\n' ' ')"
  grep -iE "corrupt|double free|invalid pointer|abort" "$OUT/memcheck_parse_gpu.log" | head -5
else
  echo "no compute-sanitizer on this machine"
fi
