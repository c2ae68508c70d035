#!/bin/bash
# bench/exp/parse_trace_pair.sh [BIN_DIR]: experiment script. CUPTI traces
# of rap mode on plan 0 (BATCH, default 8192) with the GPU's parser
# (--parse gpu --threads 1, the environment's RAP_PARSE_* knobs as given)
# and with the host's (--parse cpu --threads 16), one after the other in one
# call, for a kernel-by-kernel comparison (bench/exp/trace_compare.py).
# Needs BIN_DIR's libraptrace.so. OUT (out), STEPS (200).
set -u -o pipefail
. "$(dirname "$0")/../carried.sh" && carried_build "${1:-}" .carry/dev
BATCH=${BATCH:-8192}
D=${DATA_DIR:-/tmp/rap_rawlogs}
mkdir -p "$D"
[ -s "$D/rows.tsv" ] || "$B/rap" gen --rows 4000000 --seed 7 --out "$D/rows.tsv" --quiet
for p in gpu cpu; do
  th=1; [ $p = cpu ] && th=16
  CUDA_INJECTION64_PATH=$B/libraptrace.so RAP_CUPTI_OUT="$OUT/trace_$p.csv" \
    timeout 150 "$B/rap" bench --plan plans/plan0.plan --model paper --batch "$BATCH" \
    --steps "${STEPS:-200}" --warmup 20 --modes rap --schedule "plans/h200/plan0_$BATCH.schedule" \
    --cuda-graph --parse $p --threads $th --data "$D/rows.tsv" --json --quiet \
    > "$OUT/trace_$p.json" 2> "$OUT/trace_$p.err"
  echo "trace $p: exit $?; $(tail -1 "$OUT/trace_$p.err")"
done
