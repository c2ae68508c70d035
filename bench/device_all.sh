#!/bin/bash
# bench/device_all.sh BUILD_DIR PARTS: the GPU checks and benchmarks of the
# trainer and runtime, run on a GPU machine with a build carried there
# (docs/BUILD.md).
# PARTS is a comma list of: tests, mps, train, rapdefault, bench, trace.
# Everything lands in $OUT (or ./out); a short summary is printed last.
set -u -o pipefail
B=${1:-build}
# libraries gathered by scripts/gather_libs.sh (GLPK, XGBoost) travel in $B/lib
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PARTS=${2:-tests,mps,train,rapdefault}
OUT=${OUT:-out}
mkdir -p "$OUT"
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if has tests; then
  echo "== rap_tests (all)"
  timeout 200 "$B/rap_tests" > "$OUT/tests.log" 2>&1; echo "rap_tests exit $?"
  grep -E "FAIL|^    " "$OUT/tests.log" | head -30; tail -1 "$OUT/tests.log"
fi
if has mps; then
  echo "== mps daemon test alone"
  timeout 120 "$B/rap_tests" mps_gpu_daemon > "$OUT/mps.log" 2>&1; echo "exit $?"; tail -3 "$OUT/mps.log"
fi
if has train; then
  echo "== bench/train.sh"
  BENCH_TRAIN_BIN=$B/bench_train timeout 400 bash bench/train.sh "$OUT/bt" > "$OUT/bench_train.log" 2>&1
  echo "exit $?"; grep -A 12 "^== table" "$OUT/bench_train.log" | head -14
fi
if has rapdefault; then
  echo "== rap train (no arguments) on the GPU"
  ( time timeout 200 "$B/rap" train --metrics "$OUT/default_metrics.jsonl" ) > "$OUT/rap_default.log" 2>&1
  echo "exit $?"; grep -E "auc|AUC|samples/s|real" "$OUT/rap_default.log" | tail -6
fi
if has export; then
  echo "== checkpoint -> rap export -> PyTorch's safetensors loader"
  timeout 120 "$B/rap" train --quiet --gen-rows 50000 --gen-eval-rows 5000 --steps 20 --save /tmp/rap_ck.safetensors > "$OUT/export.log" 2>&1
  timeout 60 "$B/rap" export --checkpoint /tmp/rap_ck.safetensors --out /tmp/rap_model.safetensors >> "$OUT/export.log" 2>&1
  python3 - <<'PY' 2>&1 | tee -a "$OUT/export.log"
from safetensors.torch import load_file
for f in ("/tmp/rap_ck.safetensors", "/tmp/rap_model.safetensors"):
    t = load_file(f)
    print(f, len(t), "tensors;", "emb_l.0.weight", tuple(t["emb_l.0.weight"].shape), "bot_l.0.weight", tuple(t["bot_l.0.weight"].shape), "top_l.0.bias", tuple(t["top_l.0.bias"].shape))
PY
fi
if has bench; then
  for plan in plan0 plan1; do for b in 4096 8192; do
    echo "== rap bench $plan batch $b"
    timeout 100 "$B/rap" bench --plan plans/$plan.plan --model paper --batch $b --steps 30 --warmup 5 \
      --quiet > "$OUT/bench_${plan}_$b.txt" 2> "$OUT/bench_${plan}_$b.err"
    echo "exit $?"; cat "$OUT/bench_${plan}_$b.txt"; tail -3 "$OUT/bench_${plan}_$b.err"
  done; done
fi
if has trace; then
  echo "== traces (stream, rap), plan 0, batch 4096"
  timeout 90 "$B/rap" bench --plan plans/plan0.plan --model paper --batch 4096 --steps 20 --warmup 5 \
    --modes stream,rap --trace "$OUT/trace.json" --quiet > "$OUT/trace_bench.txt" 2>&1
  echo "exit $?"; ls -la "$OUT"/trace*.json 2>/dev/null
fi
