#!/bin/bash
# bench/device_roofline_ab.sh [BIN_DIR]: one device call of the roofline
# work, from a carried build (nothing is built here):
#   1. tests: rap_tests model_gpu (the GPU model against the CPU, every new
#      kernel and variant at odd sizes), then the other tests that train the
#      GPU model (shard, one-rank dist, runtime, trainer, graphs), one
#      rap_tests run per name filter (TESTS: the filters, in order);
#   2. per variant, in the order of VARIANTS: bench (bench_train, the
#      paper's model, plan 0's 27 tables, SGD, at batch 4096, 8192 and 65536
#      in bf16 and tf32; the tuning's choices in train_<variant>.err), then
#      trace (a CUPTI kernel trace at 65536 per precision,
#      bench/exp/cupti_trace.c, summarised per kernel by kernel_steps.py);
#   3. the table: bench/exp/roofline_table.py (step times, then the us per
#      step of each kernel group per variant).
# Variants (environment of the GPU model, docs/PERF.md):
#   new      the defaults (interaction v4 where it applies, else v3; MLP v3)
#   r1       RAP_GPU_INTERACT=v2 RAP_GPU_MLP=v2 (the kernels of the first
#            roofline round: new against r1 is this round's gain)
#   mlp2     RAP_GPU_MLP=v2 (only the interaction changes against r1)
#   ia2      RAP_GPU_INTERACT=v2 (only the MLP changes against r1)
#   base     RAP_GPU_INTERACT=v1 RAP_GPU_MLP=v1 (the kernels before both rounds)
#   ia1      RAP_GPU_INTERACT=v1 (the first interaction, the newest MLP)
#   mlp1     RAP_GPU_MLP=v1 (the first MLP, the newest interaction)
#   nobgrad  RAP_GPU_DRELU_BGRAD=0 (the defaults without cuBLASLt's
#            DRELU_BGRAD epilogue: DRELU + column sum, or the own pass)
#   enum     RAP_GPU_TUNE_ENUM=1 (the defaults, every GEMM also timing the
#            configurations cuBLASLt lists beyond its heuristics)
#   algos32  RAP_GPU_TUNE_ALGOS=32 (the defaults, 32 GEMM candidates timed)
#   zfp32    RAP_GPU_ZBF=0 (the defaults with a bf16 model's interaction
#            input in fp32, as before 2026-12-02: the v3 interaction)
#   zde      RAP_GPU_ZBF=de (the defaults with de in bf16 too)
#   v3       RAP_GPU_INTERACT=v3 (the v3 interaction instead of v4: in bf16
#            with a bf16 z, in tf32 in place of the TF32 tensor cores)
# Knobs: OUT (default out), PARTS (tests,bench,trace), VARIANTS (the list
# above), BUDGET (seconds for the whole call, default 570: every step runs
# under timeout with what is left, the most important first), STEPS (60),
# BATCHES (the bench's batch sizes, default 4096,8192,65536; the traces
# always run 65536), TESTS (the rap_tests name filters, default
# model_gpu and the other GPU-training tests), TEST_LIMIT (seconds for
# the model_gpu filter, default 200).
# BIN_DIR (default .carry/dev) holds rap, rap_tests, bench_train,
# libraptrace.so and lib/ (docs/PERF.md says how to prepare it).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
PARTS=${PARTS:-tests,bench,trace}
VARIANTS=${VARIANTS:-new r1 mlp2 ia2 base nobgrad enum algos32}
BUDGET=${BUDGET:-570}
STEPS=${STEPS:-60}
BATCHES=${BATCHES:-4096,8192,65536}
TESTS=${TESTS:-model_gpu model_shard_gpu dist_gpus1 rt_gpu train_gpu train_resume_bit_identical_gpu ideal_shard_gpu graph_gpu}
TEST_LIMIT=${TEST_LIMIT:-200}
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
note() { echo "$*" | tee -a "$SUMMARY"; }
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }

# lim NAME LIMIT: the timeout for a step (LIMIT, or what is left less 20 s);
# empty when under 50 s are left (the step is skipped, and said so)
lim() {
  local l; l=$(left)
  if [ "$l" -lt 50 ]; then echo "skipped $1: ${l}s left" | tee -a "$SUMMARY" >&2; return; fi
  l=$((l - 20)); [ "$2" -lt "$l" ] && l=$2; echo "$l"
}

var_env() {
  case $1 in
    new) echo "";;
    r1) echo "RAP_GPU_INTERACT=v2 RAP_GPU_MLP=v2";;
    mlp2) echo "RAP_GPU_MLP=v2";;
    ia2) echo "RAP_GPU_INTERACT=v2";;
    base) echo "RAP_GPU_INTERACT=v1 RAP_GPU_MLP=v1";;
    ia1) echo "RAP_GPU_INTERACT=v1";;
    mlp1) echo "RAP_GPU_MLP=v1";;
    nobgrad) echo "RAP_GPU_DRELU_BGRAD=0";;
    enum) echo "RAP_GPU_TUNE_ENUM=1";;
    algos32) echo "RAP_GPU_TUNE_ALGOS=32";;
    zfp32) echo "RAP_GPU_ZBF=0";;
    zde) echo "RAP_GPU_ZBF=de";;
    v3) echo "RAP_GPU_INTERACT=v3";;
    *) echo "UNKNOWN_VARIANT=$1";;
  esac
}

note "== $(cat "$B/COMMIT" 2>/dev/null || echo 'commit unknown') on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"

if has tests; then
  # rap_tests takes one name filter (a prefix) a run
  : > "$OUT/tests_other.log"
  for f in $TESTS; do
    if [ "$f" = model_gpu ]; then
      t=$(lim tests_model_gpu "$TEST_LIMIT")
      [ -z "$t" ] && continue
      timeout "$t" "$B/rap_tests" model_gpu > "$OUT/tests_model_gpu.log" 2>&1
      note "tests model_gpu: exit $? -- $(tail -1 "$OUT/tests_model_gpu.log")"
      grep -E "FAIL|^    " "$OUT/tests_model_gpu.log" | head -30 | tee -a "$SUMMARY"
      continue
    fi
    t=$(lim "tests $f" 60)
    [ -z "$t" ] && continue
    timeout "$t" "$B/rap_tests" $f > "$OUT/tests_$f.log" 2>&1
    rc=$?
    cat "$OUT/tests_$f.log" >> "$OUT/tests_other.log"
    note "tests $f: exit $rc -- $(tail -1 "$OUT/tests_$f.log")"
  done
  grep -E "FAIL|^    " "$OUT/tests_other.log" | head -15 | tee -a "$SUMMARY"
fi

# per variant, most important first: its bench, then its traces
for V in $VARIANTS; do
  if has bench; then
    t=$(lim "bench $V" 90)
    if [ -n "$t" ]; then
      batches=$BATCHES
      case $V in algos32|enum) batches=65536;; esac
      # RAP_GPU_VERBOSE: the tuning's choices (fused or plain, algorithms) in the .err file
      env $(var_env "$V") RAP_GPU_VERBOSE=1 timeout "$t" "$B/bench_train" --batches $batches --k 4 \
        --precision bf16,fp32 --steps "$STEPS" --warmup 10 --json "$OUT/train_$V.json" \
        > "$OUT/train_$V.log" 2> "$OUT/train_$V.err"
      note "bench $V ($(var_env "$V")): exit $?; $(grep -h 'GEMM epilogues fused' "$OUT/train_$V.err" "$OUT/train_$V.log" 2>/dev/null | sort | uniq -c | tr '\n' ' ')"
    fi
  fi
  if has trace && [ "$V" != algos32 ]; then
    for p in bf16 fp32; do
      t=$(lim "trace $V $p" 60)
      [ -z "$t" ] && continue
      env $(var_env "$V") CUDA_INJECTION64_PATH=$B/libraptrace.so RAP_CUPTI_OUT="$OUT/k_${V}_$p.csv" \
        timeout "$t" "$B/bench_train" --batches 65536 --k 4 --precision $p --steps 20 --warmup 0 \
        --no-graph > "$OUT/trace_${V}_$p.log" 2>&1
      rc=$?
      if [ -s "$OUT/k_${V}_$p.csv" ]; then
        python3 bench/exp/kernel_steps.py "$OUT/k_${V}_$p.csv" > "$OUT/ksteps_${V}_$p.txt" 2>&1
        gzip -f "$OUT/k_${V}_$p.csv"
      fi
      note "trace $V $p: exit $rc; $(tail -1 "$OUT/ksteps_${V}_$p.txt" 2>/dev/null)"
    done
  fi
done

python3 bench/exp/roofline_table.py "$OUT" > "$OUT/table.txt" 2>&1
note "done in $(($(date +%s) - T0)) s"
cat "$SUMMARY" > "$OUT/summary_all.txt"
cat "$OUT/table.txt" >> "$OUT/summary_all.txt"
# last: the short table (the reply carries the end of the output)
cat "$OUT/table.txt"
