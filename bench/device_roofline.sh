#!/bin/bash
# bench/device_roofline.sh BIN_DIR: the trainer's step at batch 65536 on the
# GPU (the paper's model, plan 0's tables): samples/s in bf16 and tf32
# (bench_train, eager and graph), then one CUPTI kernel trace per precision
# summarised per kernel and step (bench/exp/kernel_steps.py). BIN_DIR holds rap,
# bench_train, libraptrace.so (bench/exp/build_cupti_trace.sh) and lib/
# (scripts/gather_libs.sh). Results under $OUT (default ./out).
set -u -o pipefail
B=${1:-.carry/dev}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BATCH=${BATCH:-65536}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
D=$(mktemp -d)

echo "== bench_train batch $BATCH"
timeout 200 "$B/bench_train" --batches "$BATCH" --k 4 --data-dir "$D" --precision bf16,fp32 --steps 60 --warmup 10 \
  --json "$OUT/rap_train.json" > "$OUT/rap_train.log" 2>&1; echo "exit $?"
grep -iE "samples/s|step|graph" "$OUT/rap_train.log" | tail -12
for p in bf16 fp32; do
  echo "== CUPTI trace $p"
  CUDA_INJECTION64_PATH=$PWD/$B/libraptrace.so RAP_CUPTI_OUT="$OUT/k_$p.csv" \
    timeout 200 "$B/bench_train" --batches "$BATCH" --k 4 --data-dir "$D" --precision $p --steps 20 --warmup 0 \
    --no-graph > "$OUT/trace_$p.log" 2>&1; echo "exit $?"
  python3 bench/exp/kernel_steps.py "$OUT/k_$p.csv" | tee "$OUT/ksteps_$p.txt"
  gzip -f "$OUT/k_$p.csv"
done
rm -rf "$D"
