#!/bin/bash
# bench/exp/parse_ab.sh [BIN_DIR]: experiment script (not a benchmark of
# its own). The GPU parser's field conversion, the one-word path (default)
# against the byte loops (RAP_PARSE_GPU_LOOPS=1), in one device call from a
# carried build (BIN_DIR, default .carry/dev: rap, rap_tests,
# bench_parse_gpu, lib/, and libraptrace.so for the trace):
#   1. the GPU parse tests (kernels against the CPU reference, through the
#      reader, the feed and the trainer);
#   2. bench_parse_gpu on 4M rows, loops and words alternated (A B A B);
#   3. bench/device_rawlogs.sh on plan 0 at 8192 (CONFIGS, default: the
#      loops, the words, the words released at emb_backward and at
#      mlp_backward, --parse cpu);
#   4. a CUPTI trace of rap mode with --parse gpu (TRACE=0 skips it).
# Knobs: OUT (out), CONFIGS, GPU_THREADS (3), REPEAT (2), BATCH (8192).
set -u -o pipefail
B=${1:-.carry/dev}
B=$(cd "$B" && pwd) || { echo "no $1"; exit 1; }
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BATCH=${BATCH:-8192}
echo "== $(cat "$B/COMMIT" 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | head -1)" | tee "$OUT/ab_summary.txt"
for tp in parse_field_words parse_gpu parse_schema_gpu parse_feed_gpu train_parse_gpu; do
  timeout 150 "$B/rap_tests" "$tp" > "$OUT/tests_$tp.log" 2>&1
  echo "rap_tests $tp: exit $?; $(tail -1 "$OUT/tests_$tp.log")" | tee -a "$OUT/ab_summary.txt"
  grep -E "CHECK|FAIL" "$OUT/tests_$tp.log" | head -5 | tee -a "$OUT/ab_summary.txt"
done
for r in 1 2; do for v in loops words; do
  e=""; [ $v = loops ] && e="RAP_PARSE_GPU_LOOPS=1"
  env $e timeout 120 "$B/bench_parse_gpu" --rows 4000000 --json "$OUT/bpg_${v}_$r.json" \
    > "$OUT/bpg_${v}_$r.log" 2>&1
  echo "bench_parse_gpu $v run $r: exit $?" | tee -a "$OUT/ab_summary.txt"
  grep -iE "rows/s|M rows" "$OUT/bpg_${v}_$r.log" | head -6 | tee -a "$OUT/ab_summary.txt"
done; done
OUT=$OUT/rawlogs PLANS=plan0 BATCHES=$BATCH REPEAT=${REPEAT:-2} RAW_TESTS=0 \
  GPU_THREADS=${GPU_THREADS:-3} BUDGET=${RAW_BUDGET:-330} \
  CONFIGS=${CONFIGS:-"gpu_tsv_loops gpu_tsv gpu_tsv_wemb_backward gpu_tsv_wmlp_backward cpu_tsv"} \
  bash bench/device_rawlogs.sh "$B" > "$OUT/rawlogs.log" 2>&1
echo "rawlogs: exit $?" | tee -a "$OUT/ab_summary.txt"
if [ "${TRACE:-1}" = 1 ] && [ -f "$B/libraptrace.so" ]; then
  CUDA_INJECTION64_PATH=$B/libraptrace.so RAP_CUPTI_OUT="$OUT/trace_rap.csv" timeout 120 \
    "$B/rap" bench --plan plans/plan0.plan --model paper --batch "$BATCH" --steps 60 --warmup 20 \
    --modes rap --schedule "plans/h200/plan0_$BATCH.schedule" --cuda-graph --parse gpu \
    --threads "${GPU_THREADS:-3}" --data /tmp/rap_rawlogs/rows.tsv --json --quiet \
    > "$OUT/trace_rap.json" 2> "$OUT/trace_rap.err"
  echo "trace: exit $?" | tee -a "$OUT/ab_summary.txt"
  gzip -f "$OUT/trace_rap.csv" 2>/dev/null
fi
cat "$OUT/ab_summary.txt"
tail -12 "$OUT/rawlogs/table.txt" 2>/dev/null
