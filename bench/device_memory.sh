#!/bin/bash
# bench/device_memory.sh [BIN_DIR]: the paper's own workload on one GPU, in
# one device call from a carried build (nothing is built here), in this
# order (the capacity, plan and bench steps per batch):
#   emb       bench_train on plan 0's 27 tables (the paper's model, dim
#             128, bf16 GEMMs) with --emb-dtype fp32 and bf16 at 4096, 8192
#             and 65536: the embedding phases' times (the goal: 1.3x
#             faster in bf16)
#   capacity  rap profile capacity for plan 1 with the paper's model at
#             embedding dim 128 (512-256-128, 1024-1024-512-256-1), bf16
#             tables and row-wise Adagrad, at batch 4096 and 8192
#             (--rounds 3): about 43 GiB of tables, which fit one H200 in
#             bf16 (in fp32 with Adagrad they do not, docs/PROFILE.md)
#   plan      rap plan of those files with the committed predictor
#             (plans/h200/predictor), as plans 0 and 1 are shipped
#             (--fusion ilp-capacity --window-choice room, docs/PLANNER.md)
#   bench     rap bench --dry-run (the memory plan of every mode, before
#             anything is allocated), then rap bench, every mode, with those
#             schedules and the same model (--emb-dtype bf16 --optimizer
#             rowwise-adagrad, CUDA graphs): its JSON holds each mode's plan
#             beside the measured drop of free memory (docs/MEMORY.md)
# then one table of everything (bench/exp/memory_table.py).
# Knobs: OUT (default out), PARTS (capacity,plan,bench,emb), BUDGET
# (seconds for the whole call, default 240: every step runs under timeout
# with what is left, and is skipped, saying so, when too little is),
# BATCHES (4096 8192: capacity, plan, bench), STEPS (rap bench timed
# steps, 100), REPEAT (rap bench --repeat, 1), MODES (rap bench --modes,
# default every mode), EMB_OPT (bench_train's optimizer, rowwise-adagrad),
# EMB_STEPS (bench_train timed steps, 60), EMB_TYPES (the emb step's table
# types, "fp32 bf16"; TYPE:v4 adds the A/B of the 16-bit lookups' loads), GRAPH (rap bench's --cuda-graph;
# GRAPH="" runs without), EXTRA (more rap bench options, e.g. "--parse cpu
# --threads 16": the generated rows parsed by the host; the default, --parse
# auto, parses them on the GPU), TAG (appended to the bench files' names).
# BIN_DIR (default .carry/dev) holds rap, bench_train and lib/; `bash
# bench/exp/carry_dev.sh` prepares it (docs/PERF.md). Run from the
# repository root (the plans and the predictor are read from there).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
PARTS=${PARTS:-capacity,plan,bench,emb}
BUDGET=${BUDGET:-240}
BATCHES=${BATCHES:-4096 8192}
STEPS=${STEPS:-100}
REPEAT=${REPEAT:-1}
EMB_OPT=${EMB_OPT:-rowwise-adagrad}
EMB_STEPS=${EMB_STEPS:-60}
G=${GRAPH---cuda-graph}
T0=$(date +%s)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

left() { echo $((BUDGET - ($(date +%s) - T0))); }
note() { echo "$*" | tee -a "$SUMMARY"; }
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }

# lim NAME LIMIT MIN: the timeout for a step (LIMIT, or what is left less
# 5 s); empty when under MIN s are left (the step is skipped, and said so)
lim() {
  local l; l=$(left)
  if [ "$l" -lt "$3" ]; then echo "skipped $1: ${l}s left" | tee -a "$SUMMARY" >&2; return; fi
  l=$((l - 5)); [ "$2" -lt "$l" ] && l=$2; echo "$l"
}

# the paper's model at dim 128 with 16-bit tables and row-wise Adagrad
MODEL="--model paper --emb-dim 128 --mlp-bot 512-256-128 --mlp-top 1024-1024-512-256-1"
TYPES="--emb-dtype bf16 --optimizer rowwise-adagrad"

note "== $(cat "$B/COMMIT" 2>/dev/null || echo 'commit unknown') on $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"

# first the short one: the table types side by side
if has emb; then
  # EMB_TYPES: fp32, bf16, fp16, or TYPE:v4 (RAP_GPU_EMB_FWD=v4: the
  # 16-bit lookups with 8-byte loads, the A/B of the 16-byte ones)
  for item in ${EMB_TYPES:-fp32 bf16}; do
    dt=${item%%:*}; env=""; name=$dt
    case $item in *:v4) env="RAP_GPU_EMB_FWD=v4"; name=${dt}_v4;; esac
    t=$(lim "emb $name" 60 25)
    [ -z "$t" ] && continue
    env $env timeout "$t" "$B/bench_train" --batches 4096,8192,65536 --precision bf16 --k 4 \
      --optimizer "$EMB_OPT" --emb-dtype "$dt" --steps "$EMB_STEPS" --warmup 10 --no-graph \
      --json "$OUT/train_$name.json" > "$OUT/train_$name.log" 2> "$OUT/train_$name.err"
    note "bench_train $name ($EMB_OPT): exit $?"
  done
fi

for b in $BATCHES; do
  C=$OUT/plan1_${b}_bf16.capacity
  S=$OUT/plan1_${b}_bf16.schedule
  if has capacity; then
    t=$(lim "capacity $b" 70 40)
    if [ -n "$t" ]; then
      start=$(date +%s)
      timeout "$t" "$B/rap" profile capacity --plan plans/plan1.plan $MODEL $TYPES --batch "$b" \
        --rounds 3 --out "$C" > "$OUT/capacity_$b.log" 2>&1
      note "capacity plan1 $b: exit $? after $(( $(date +%s) - start )) s; $(grep -h 'window\|model' "$C" 2>/dev/null | tr '\n' ';')"
      [ -s "$C" ] || tail -3 "$OUT/capacity_$b.log" | tee -a "$SUMMARY"
    fi
  fi
  if has plan && [ -s "$C" ]; then
    t=$(lim "plan $b" 30 15)
    if [ -n "$t" ]; then
      timeout "$t" "$B/rap" plan --plan plans/plan1.plan --capacity "$C" \
        --predictor plans/h200/predictor --batch "$b" $MODEL $TYPES --fusion ilp-capacity \
        --time-limit 4 --window-choice room --out "$S" --report "$OUT/plan1_${b}_bf16.report.json" \
        > "$OUT/plan_$b.log" 2>&1
      note "plan plan1 $b: exit $?; $(grep -h 'exposed' "$OUT/plan_$b.log" | tail -1)"
    fi
  fi
  if has bench; then # the memory plan of every mode, before anything is allocated
    t=$(lim "dry-run $b" 20 10)
    [ -n "$t" ] && timeout "$t" "$B/rap" bench --plan plans/plan1.plan $MODEL $TYPES --batch "$b" \
      $G --dry-run --quiet > "$OUT/dryrun_plan1_$b.txt" 2>&1
    [ -n "$t" ] && note "dry-run plan1 $b: exit $?; $(grep -h 'GPU:' "$OUT/dryrun_plan1_$b.txt" | head -1)"
  fi
  if has bench && [ -s "$S" ]; then
    t=$(lim "bench $b" 150 40)
    if [ -n "$t" ]; then
      timeout "$t" "$B/rap" bench --plan plans/plan1.plan $MODEL $TYPES --batch "$b" \
        --steps "$STEPS" --warmup 34 --repeat "$REPEAT" $G --schedule "$S" ${MODES:+--modes $MODES} \
        ${EXTRA:-} --json --quiet > "$OUT/bench_plan1_$b${TAG:-}.json" 2> "$OUT/bench_plan1_$b${TAG:-}.err"
      note "bench plan1 $b${TAG:-} (${MODES:-every mode}, the schedule above${EXTRA:+, $EXTRA}): exit $?; $(tail -1 "$OUT/bench_plan1_$b${TAG:-}.err")"
    fi
  fi
done

python3 bench/exp/memory_table.py "$OUT" > "$OUT/table.txt" 2>&1
note "done in $(($(date +%s) - T0)) s"
cat "$SUMMARY" > "$OUT/summary_all.txt"
cat "$OUT/table.txt" >> "$OUT/summary_all.txt"
# last: the table (the reply carries the end of the output)
cat "$OUT/table.txt"
