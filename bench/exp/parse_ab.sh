#!/bin/bash
# bench/exp/parse_ab.sh [BIN_DIR]: experiment script (not a benchmark of
# its own). The GPU parser's field conversion, the one-word path (default)
# against the byte loops (RAP_PARSE_GPU_LOOPS=1), in one device call from a
# carried build (BIN_DIR, default .carry/dev: rap, rap_tests,
# bench_parse_gpu, lib/, and libraptrace.so for the trace):
#   1. the GPU parse tests (kernels against the CPU reference, through the
#      reader, the feed and the trainer);
#   2. bench_parse_gpu on 4M rows, the variants alternated (A B A B;
#      BPG_VARIANTS, default "loops words"; w16: RAP_PARSE_GPU_WARPS=16);
#   3. bench/device_rawlogs.sh on plan 0 at 8192, one call per item of
#      RUNS ("VARIANT:GPU_THREADS:CONFIG,CONFIG...");
#   4. a CUPTI trace of rap mode with --parse gpu (TRACE
#      "VARIANT:GPU_THREADS:WINDOW", "-" no gate; TRACE=0 skips it).
# Knobs: OUT (out), REPEAT (2), BATCH (8192), RAW_BUDGET (150 s a run),
# AB_TESTS (0: step 1 skipped, where the call ran the whole test program),
# AB_PLANS (plan0) and AB_BATCHES (BATCH) of the RUNS.
set -u -o pipefail
. "$(dirname "$0")/../carried.sh" && carried_build "${1:-}" .carry/dev
BATCH=${BATCH:-8192}
echo "== $(cat "$B/COMMIT" 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | head -1)" | tee "$OUT/ab_summary.txt"
for tp in parse_field_words parse_gpu parse_schema_gpu parse_feed_gpu train_parse_gpu; do
  [ "${AB_TESTS:-1}" = 0 ] && break
  timeout 150 "$B/rap_tests" "$tp" > "$OUT/tests_$tp.log" 2>&1
  echo "rap_tests $tp: exit $?; $(tail -1 "$OUT/tests_$tp.log")" | tee -a "$OUT/ab_summary.txt"
  grep -E "CHECK|FAIL" "$OUT/tests_$tp.log" | head -5 | tee -a "$OUT/ab_summary.txt"
done
# variant V of the kernels, parts joined by '+': loops (RAP_PARSE_GPU_LOOPS=1),
# words (the default), w16 or w32 (RAP_PARSE_GPU_WARPS=16 or 32), single
# (RAP_PARSE_GPU_PAIRS=0: one line a warp at a time), lb1
# (RAP_PARSE_GPU_LOOKBACK=1: the look-back one predecessor a round), cN
# (RAP_PARSE_GPU_CHUNK_MB=N: the reader's chunks of N MiB), tN
# (RAP_PARSE_GPU_TILES=N: at most N tiles a launch), bN
# (RAP_PARSE_WINDOW_LINES=N: with a _wW configuration, at most N lines a
# release at window W), tiles (RAP_PARSE_RELEASE=tiles: a release stops at
# its budget, mid-chunk)
env_v() {
  local IFS=+
  for x in $1; do
    case $x in
      loops) echo RAP_PARSE_GPU_LOOPS=1;; w16) echo RAP_PARSE_GPU_WARPS=16;; w32) echo RAP_PARSE_GPU_WARPS=32;;
      single) echo RAP_PARSE_GPU_PAIRS=0;; lb1) echo RAP_PARSE_GPU_LOOKBACK=1;;
      c[0-9]*) echo RAP_PARSE_GPU_CHUNK_MB=${x#c};; t[0-9]*) echo RAP_PARSE_GPU_TILES=${x#t};;
      b[0-9]*) echo RAP_PARSE_WINDOW_LINES=${x#b};; tiles) echo RAP_PARSE_RELEASE=tiles;;
    esac
  done
}
for r in 1 2; do for v in ${BPG_VARIANTS:-loops words}; do
  env $(env_v $v) timeout 120 "$B/bench_parse_gpu" --rows 4000000 --json "$OUT/bpg_${v}_$r.json" \
    > "$OUT/bpg_${v}_$r.log" 2>&1
  echo "bench_parse_gpu $v run $r: exit $?" | tee -a "$OUT/ab_summary.txt"
  grep -E "^(one batch|batches|phases)" "$OUT/bpg_${v}_$r.log" | tee -a "$OUT/ab_summary.txt"
done; done
# RUNS: "V:GPU_THREADS:CONFIGS" items (CONFIGS comma-separated), each a
# device_rawlogs.sh call in OUT/rawlogs_V_GPU_THREADS
RUNS=${RUNS:-"loops:3:gpu_tsv words:3:gpu_tsv,gpu_tsv_wemb_backward,gpu_tsv_wmlp_backward,cpu_tsv"}
for run in $RUNS; do
  v=${run%%:*}; rest=${run#*:}; th=${rest%%:*}; cf=${rest#*:}
  env $(env_v $v) OUT=$OUT/rawlogs_${v}_$th PLANS="${AB_PLANS:-plan0}" BATCHES="${AB_BATCHES:-$BATCH}" REPEAT=${REPEAT:-2} \
    RAW_TESTS=0 GPU_THREADS=$th BUDGET=${RAW_BUDGET:-150} CONFIGS="${cf//,/ }" \
    bash bench/device_rawlogs.sh "$B" > "$OUT/rawlogs_${v}_$th.log" 2>&1
  echo "rawlogs $v, GPU_THREADS=$th: exit $?" | tee -a "$OUT/ab_summary.txt"
  tail -n +3 "$OUT/rawlogs_${v}_$th/table.txt" | tee -a "$OUT/ab_summary.txt"
done
# TRACE: "V:GPU_THREADS:WINDOW" (WINDOW "-": no gate), or 0 for none
TRACE=${TRACE:-words:3:-}
if [ "$TRACE" != 0 ] && [ -f "$B/libraptrace.so" ]; then
  v=${TRACE%%:*}; rest=${TRACE#*:}; th=${rest%%:*}; w=${rest#*:}
  we=""; [ "$w" != - ] && we="RAP_PARSE_WINDOW=$w"
  env $(env_v $v) $we CUDA_INJECTION64_PATH=$B/libraptrace.so RAP_CUPTI_OUT="$OUT/trace_rap.csv" \
    timeout 120 "$B/rap" bench --plan plans/plan0.plan --model paper --batch "$BATCH" --steps 60 \
    --warmup 20 --modes rap --schedule "plans/h200/plan0_$BATCH.schedule" --cuda-graph \
    --parse gpu --threads "$th" --data /tmp/rap_rawlogs/rows.tsv --json --quiet \
    > "$OUT/trace_rap.json" 2> "$OUT/trace_rap.err"
  echo "trace $TRACE: exit $?" | tee -a "$OUT/ab_summary.txt"
  gzip -f "$OUT/trace_rap.csv" 2>/dev/null
fi
