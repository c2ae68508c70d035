#!/bin/bash
# bench/device_rawlogs.sh [BIN_DIR]: raw Criteo text parsed on the GPU
# inside the training (--parse gpu) against the host's parser threads
# (--parse cpu), in one device call from a carried build (nothing is built
# here). Data made on the device by `rap gen` (kaggle cardinalities): one
# plain TSV of ROWS rows, and a directory of 4 .gz files of ROWS/4 rows each.
# Then, for plans 0 and 1 at batch 4096 and 8192 (the paper's model, the
# shipped schedules plans/h200/planP_B.schedule, CUDA graphs), `rap bench
# --modes ideal,rap` in four input configurations:
#   gpu_tsv  --parse gpu --threads 1 on the plain TSV
#   gpu_gz   --parse gpu --threads 4 --inflate-threads 4 --interleave batch
#            on the .gz directory
#   cpu_tsv  --parse cpu --threads 16 on the plain TSV
#   cpu_gz   --parse cpu --threads 16 --inflate-threads 4 --interleave batch
#            on the .gz directory
# and the GPU parse in the training's windows (rap mode gates it, docs/
# RUNTIME.md "The parse in the windows"), gpu_tsv with the parse released:
#   gpu_tsv_wnow           RAP_PARSE_WINDOW=now: launched as the parser posts
#                          (no gate: the behaviour before the gate)
#   gpu_tsv_wemb_forward,  RAP_PARSE_WINDOW=W: all pending parse work at
#   gpu_tsv_wmlp_forward,  the start of phase W (mlp_backward is the
#   gpu_tsv_wmlp_backward, default without parse lines)
#   gpu_tsv_wemb_backward
#   gpu_tsv_wplanned       the shipped schedule re-planned with rap plan
#                          --parse gpu (its parse lines: budgets per window),
#                          from a parse model `rap profile kernels` measures
#                          here first (OUT/parse_profile.parse)
# CONFIGS=windows runs those six.
# Reported (bench/exp/rawlogs_table.py, the last lines printed): rap's
# samples/s, rap / ideal, the seconds rap waited for rows, the host CPU
# seconds per million rows trained (getrusage of the rap process over the
# measured steps, every thread: rap bench's host_cpu_s_per_mrow), and with
# the gate the lines parsed inside the windows and outside them (while rap
# waited for rows) over the measured steps (median of the runs).
# Knobs: OUT (default out), BUDGET (seconds for the whole call, default
# 540: every step runs under timeout with what is left, and is skipped,
# saying so, when too little is), ROWS (4000000), STEPS (200), WARMUP (20),
# REPEAT (rap bench --repeat: 3, the medians reported), PARSE_MODEL (a
# parse model file the _wplanned configurations use instead of profiling),
# PLANS (plan0 plan1), BATCHES (4096 8192), CONFIGS (gpu_tsv gpu_gz cpu_tsv
# cpu_gz; a gpu one with _tN appended runs with RAP_PARSE_GPU_TILES=N; the
# gpu_tsv_wW ones above, or windows for all six; _loops appended: with
# RAP_PARSE_GPU_LOOPS=1; _ibeside appended: ideal with RAP_IDEAL_PARSE=beside,
# the parse of its next group beside its steps), GPU_THREADS (--threads of
# gpu_tsv: 1, one parser thread; 3 gives two), GRAPH (--cuda-graph; GRAPH="" runs without), RAW_TESTS (1: first the
# GPU tests of --parse gpu when BIN_DIR has rap_tests; 0 skips them),
# DATA_DIR (/tmp/rap_rawlogs: the generated data, kept between calls).
# BIN_DIR (default .carry/dev) holds rap and lib/; `bash bench/exp/carry_dev.sh`
# prepares it. Run from the repository root (the plans are read from there).
# The six window variants of one plan at both batches take about 12 benches
# (1-2 minutes each at REPEAT=3): one plan a call, e.g.
#   CONFIGS=windows PLANS=plan0 bash bench/device_rawlogs.sh
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
BUDGET=${BUDGET:-540}
ROWS=${ROWS:-4000000}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
REPEAT=${REPEAT:-3}
PLANS=${PLANS:-plan0 plan1}
BATCHES=${BATCHES:-4096 8192}
CONFIGS=${CONFIGS:-gpu_tsv gpu_gz cpu_tsv cpu_gz}
[ "$CONFIGS" = windows ] && CONFIGS="gpu_tsv_wnow gpu_tsv_wemb_forward gpu_tsv_wmlp_forward gpu_tsv_wmlp_backward gpu_tsv_wemb_backward gpu_tsv_wplanned"
GPU_THREADS=${GPU_THREADS:-1}
G=${GRAPH---cuda-graph}
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
note() { echo "$*" | tee -a "$SUMMARY"; }
# lim NAME LIMIT MIN: the timeout for a step (LIMIT, or what is left less
# 5 s); empty when under MIN s are left (the step is skipped, and said so)
lim() {
  local l; l=$(left)
  if [ "$l" -lt "$3" ]; then echo "skipped $1: ${l}s left" | tee -a "$SUMMARY" >&2; return; fi
  l=$((l - 5)); [ "$2" -lt "$l" ] && l=$2; echo "$l"
}

note "== $(cat "$B/COMMIT" 2>/dev/null || echo 'commit unknown') on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); $(nproc) cores"

# first the GPU tests of this path (the kernels through the reader, the
# feed, the trainer and thread ranks against the CPU parser), if rap_tests
# was carried: a failure here makes the numbers below suspect
if [ -x "$B/rap_tests" ] && [ "${RAW_TESTS-1}" = 1 ]; then
  for tp in parse_gate parse_feed_gpu train_parse_gpu dist_parse_gpu_row_shares_gpu; do
    t=$(lim "tests $tp" 120 30)
    [ -z "$t" ] && continue
    timeout "$t" "$B/rap_tests" "$tp" > "$OUT/tests_$tp.log" 2>&1
    note "rap_tests $tp: exit $?; $(tail -1 "$OUT/tests_$tp.log")"
    grep -E "CHECK|FAIL|SKIP" "$OUT/tests_$tp.log" | head -5 | tee -a "$SUMMARY"
  done
fi

# the data, on the device's local disk
D=${DATA_DIR:-/tmp/rap_rawlogs}
mkdir -p "$D/gz"
start=$(date +%s)
if [ ! -s "$D/rows.tsv" ]; then
  timeout "$(lim gen 120 30 || echo 1)" "$B/rap" gen --rows "$ROWS" --seed 7 --out "$D/rows.tsv" \
    --quiet > "$OUT/gen_tsv.log" 2>&1
fi
for k in 0 1 2 3; do
  case " $CONFIGS " in *_gz*) ;; *) break;; esac
  [ -s "$D/gz/day_$k.gz" ] || timeout 150 "$B/rap" gen --rows $((ROWS / 4)) --seed $((10 + k)) \
    --threads 4 --out "$D/gz/day_$k.gz" --quiet > "$OUT/gen_gz_$k.log" 2>&1 &
done
wait
note "data: $(du -sh "$D/rows.tsv" | cut -f1) plain, $(du -sh "$D/gz" | cut -f1) gzip in $(( $(date +%s) - start )) s"

# CONFIG_tN (N a number): that configuration with RAP_PARSE_GPU_TILES=N
# (the GPU parser's tiles a launch; 0 a chunk in one launch); CONFIG_wW:
# with RAP_PARSE_WINDOW=W (planned: none, the planned schedule's budgets);
# CONFIG_loops (last): with RAP_PARSE_GPU_LOOPS=1 (every field by the byte
# loops, the kernels' conversion before the one-word path)
env_of() {
  case $1 in *_ibeside) echo "RAP_IDEAL_PARSE=beside";; esac
  local c=${1%_ibeside}
  case $c in *_loops) echo "RAP_PARSE_GPU_LOOPS=1";; esac
  c=${c%_loops}
  case $c in
    *_t[0-9]*) echo "RAP_PARSE_GPU_TILES=${c##*_t}";;
    *_wplanned) ;;
    *_w*) echo "RAP_PARSE_WINDOW=${c##*_w}";;
  esac
}
args_of() {
  local base=${1%_ibeside}
  base=${base%_loops}
  base=${base%_t[0-9]*}
  case ${base%_w*} in
    gpu_tsv) echo "--parse gpu --threads $GPU_THREADS --data $D/rows.tsv";;
    gpu_gz)  echo "--parse gpu --threads 4 --inflate-threads 4 --interleave batch --data $D/gz";;
    cpu_tsv) echo "--parse cpu --threads 16 --data $D/rows.tsv";;
    cpu_gz)  echo "--parse cpu --threads 16 --inflate-threads 4 --interleave batch --data $D/gz";;
  esac
}

# plan 1's tables (the 1TB cardinalities) take 171 GiB in fp32 with
# Adagrad: bf16 with row-wise Adagrad, as the memory issue measures them
types_of() { [ "$1" = plan1 ] && echo "--emb-dtype bf16 --optimizer rowwise-adagrad"; }

# the planned variant: the parse kernels profiled once (a short kernel grid
# beside: rap profile kernels always measures kernels first), then each
# shipped schedule planned again with --parse gpu (same inputs and options
# as plans/h200's, docs/PLANNER.md), in OUT
PM=$OUT/parse_profile.parse
case " $CONFIGS " in *_wplanned*)
  t=$(lim "profile kernels" 120 30)
  if [ -n "${PARSE_MODEL:-}" ] && [ -s "$PARSE_MODEL" ]; then
    cp "$PARSE_MODEL" "$PM" && note "the parse model: $PARSE_MODEL (not profiled again)"
  elif [ -n "$t" ]; then
    timeout "$t" "$B/rap" profile kernels --plans plans/plan0.plan --batches 4096 --reps 5 \
      --target 40 --ilp-time 0 --out "$OUT/parse_profile.csv" > "$OUT/parse_profile.log" 2>&1
    note "profile kernels (the parse model): exit $?; $(grep -h 'the parse kernels:' "$OUT/parse_profile.log" | tail -1)"
  fi
  for plan in $PLANS; do for b in $BATCHES; do
    [ -s "$PM" ] || break 2
    shape=""; [ "$plan" = plan1 ] && shape="--emb-dim 64 --mlp-bot 512-256-64"
    "$B/rap" plan --plan plans/$plan.plan --capacity plans/h200/capacity/${plan}_$b.capacity $shape \
      --predictor plans/h200/predictor --window-choice room --batch "$b" --parse gpu \
      --parse-model "$PM" --out "$OUT/${plan}_${b}_parse.schedule" \
      --report "$OUT/${plan}_${b}_parse.report.json" > "$OUT/plan_${plan}_$b.log" 2>&1
    note "plan $plan $b --parse gpu: exit $?; $(grep -h 'parse (GPU)' "$OUT/plan_${plan}_$b.log")"
  done; done;;
esac

for plan in $PLANS; do for b in $BATCHES; do for cf in $CONFIGS; do
  S=plans/h200/${plan}_$b.schedule
  case $cf in *_wplanned)
    S=$OUT/${plan}_${b}_parse.schedule
    [ -s "$S" ] || { note "bench $plan $b $cf: skipped (no schedule planned with --parse gpu)"; continue; };;
  esac
  t=$(lim "bench $plan $b $cf" 90 30)
  [ -z "$t" ] && continue
  J=$OUT/bench_${plan}_${b}_$cf.json
  env $(env_of "$cf") timeout "$t" "$B/rap" bench --plan plans/$plan.plan --model paper --batch "$b" \
    --steps "$STEPS" --warmup "$WARMUP" --repeat "$REPEAT" --modes ideal,rap --schedule "$S" $G \
    $(args_of "$cf") $(types_of "$plan") \
    --json --quiet > "$J" 2> "${J%.json}.err"
  note "bench $plan $b $cf: exit $?; $(tail -1 "${J%.json}.err")"
done; done; done

python3 bench/exp/rawlogs_table.py "$OUT" > "$OUT/table.txt" 2>&1
note "done in $(($(date +%s) - T0)) s"
cat "$SUMMARY" > "$OUT/summary_all.txt"
cat "$OUT/table.txt" >> "$OUT/summary_all.txt"
# last: the table (the reply carries the end of the output)
cat "$OUT/table.txt"
