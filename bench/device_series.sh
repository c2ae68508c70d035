#!/bin/bash
# bench/device_series.sh BUILD: periodic checkpoints and exactly once on a
# GPU machine, from a build whose rap_tests and rap sit side by side
# (BUILD, default build; with a carried build put its lib/ on
# LD_LIBRARY_PATH first). Runs tests/test_series.c as on the CPU (data
# positions, rotation, --keep, --resume latest, SIGKILL loop), then the
# SIGKILL loop again with rap train --device gpu (rap mode: steps queued
# ahead on the GPU, checkpoints after a drain), once for each --parse in
# KILL9_PARSE (default "auto gpu": the host's parser, then the GPU's):
# every line must be trained exactly once. About two minutes; everything
# lands in $OUT (or ./out).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== rap_tests series (CPU trainer), position, rotation"
for t in series position rotation; do
  timeout 180 "$B/rap_tests" "$t" > "$OUT/$t.log" 2>&1
  echo "rap_tests $t exit $?" | tee -a "$OUT/$t.log"
  grep -E "FAIL|CHECK|passed" "$OUT/$t.log" | head -10
done
for parse in ${KILL9_PARSE:-auto gpu}; do
  echo "== rap_tests series_kill9 with --device gpu --parse $parse"
  RAP_TEST_SERIES_DEVICE=gpu RAP_TEST_SERIES_PARSE=$parse timeout 240 "$B/rap_tests" series_kill9 \
    > "$OUT/kill9_gpu_$parse.log" 2>&1
  echo "rap_tests series_kill9 (gpu, --parse $parse) exit $?" | tee -a "$OUT/kill9_gpu_$parse.log"
  grep -E "FAIL|CHECK|passed|Segmentation" "$OUT/kill9_gpu_$parse.log" | head -10
done
