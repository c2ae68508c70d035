#!/bin/bash
# bench/device_planner.sh BUILD_DIR PART: the planner's GPU work, run on a
# GPU machine with a build carried there (docs/PROFILE.md, docs/BUILD.md).
#
#   profile   rap profile kernels (the predictor's CSV) and rap profile
#             capacity for plans 0-3 at batch 4096 and 8192 (plan 1 at
#             embedding dim 64: dim 128 does not fit one H200), plus the
#             currency check; everything packed into $OUT/profile.tgz
#   bench     rap bench, every mode, with the planned schedules of
#             plans/h200/ (and the ablation schedules unless ABLATION=0),
#             into $OUT/bench.tgz; each invocation runs its mode list
#             REPEAT (default 3) times (rap bench --repeat): every number
#             the median of the runs, vs_ideal the median of the per-run
#             ratios; the timeouts grow with REPEAT
#   multi     bench/multi on MULTI_GPUS (default 2) GPUs, plans MPLANS
#             (plan0,plan1), batches MBATCHES (4096,8192), into $OUT/multi.tgz
#             (REPEAT, default 3, passed on: rap bench --repeat)
#   tests     the whole rap_tests (TESTS: one filter); tlist: one run per
#             filter of TLIST ("dist_gpus rt_gpu ..."), logs into tests.log
#   cost1     plan 0 at 4096, ideal/sequential/rap, plain vs --gpus 1 (the
#             hybrid NCCL path with one rank), no graphs: $OUT/cost1.txt
#
# Results land in $OUT (or ./out); logs are summarised on stdout.
set -u -o pipefail
B=${1:-build}
PARTS=${2:-profile}
has() { case ",$PARTS," in *",$1,"*) return 0;; esac; return 1; }
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
W=/tmp/rap_planner
rm -rf "$W"; mkdir -p "$W/prof" "$W/bench"

# model options of plan P (plan 1: dim 64, see above)
model_of() {
  if [ "$1" = plan1 ]; then echo "--model paper --emb-dim 64 --mlp-bot 512-256-64"
  else echo "--model paper"; fi
}

if has tests; then
  echo "== rap_tests ${TESTS:-(all)}"
  start=$(date +%s)
  timeout ${TTIMEOUT:-400} "$B/rap_tests" ${TESTS:-} > "$W/tests.log" 2>&1; echo "exit $? after $(( $(date +%s) - start )) s"
  grep -E "FAIL|^    " "$W/tests.log" | head -30; tail -1 "$W/tests.log"; cp "$W/tests.log" "$OUT/tests.log"
fi

if has tlist; then
  # several rap_tests filters (one substring each): TLIST="dist_gpus rt_gpu ..."
  for f in ${TLIST:-dist_gpus}; do
    timeout ${TTIMEOUT:-300} "$B/rap_tests" "$f" > "$W/t_$f.log" 2>&1
    echo "== rap_tests $f: exit $?"; grep -E "FAIL|SKIP|passed|^    " "$W/t_$f.log" | head -${TLINES:-12}
    cat "$W/t_$f.log" >> "$OUT/tests.log"
  done
fi

if has cost1; then
  # the hybrid (NCCL) path with one rank against the plain path, no graphs
  for g in "" "--gpus 1"; do
    echo "== rap bench plan0 4096 ${g:-plain}"
    timeout 200 "$B/rap" bench --plan plans/plan0.plan --model paper --batch 4096 --steps 60 \
      --warmup 20 --repeat ${REPEAT:-3} --modes ideal,sequential,rap --quiet $g > "$W/cost1_${g:+gpus1}.txt" 2>&1
    echo "exit $?"; cat "$W/cost1_${g:+gpus1}.txt"
  done
  cat "$W"/cost1_*.txt > "$OUT/cost1.txt"
fi

if has extra; then
  echo "== rap profile kernels: the op types plans 0-3 lack"
  timeout 200 "$B/rap" profile kernels --plans plans/profile_ops.plan,default --target ${KTARGET2:-4000} \
    --out "$W/prof/kernels_extra.csv" > "$W/prof/kernels_extra.log" 2>&1; echo "exit $?"; tail -1 "$W/prof/kernels_extra.log"
  for pb in plan3:4096:mlp_backward plan3:4096:mlp_forward plan0:4096:mlp_backward; do
    IFS=: read plan b ph <<< "$pb"
    echo "== currency check $plan $b beside $ph"
    timeout 200 "$B/rap" profile capacity --plan plans/$plan.plan $(model_of $plan) --batch $b \
      --out "$W/prof/${plan}_${b}_again.capacity" --currency "$W/prof/currency_${plan}_${b}_$ph.csv" \
      --currency-phase $ph > "$W/prof/cur_${plan}_${b}_$ph.log" 2>&1
    echo "exit $?"; grep "profile capacity:" "$W/prof/cur_${plan}_${b}_$ph.log" | tail -4; head -1 "$W/prof/currency_${plan}_${b}_$ph.csv"
  done
  tar czf "$OUT/extra.tgz" -C "$W" prof
fi

if has profile; then
  echo "== rap_tests profile"
  timeout 300 "$B/rap_tests" profile > "$W/prof/tests.log" 2>&1; echo "exit $?"; tail -2 "$W/prof/tests.log"
  echo "== rap profile kernels"
  start=$(date +%s)
  timeout 400 "$B/rap" profile kernels --out "$W/prof/kernels.csv" --target ${KTARGET:-16000} \
    > "$W/prof/kernels.log" 2>&1; echo "exit $? after $(( $(date +%s) - start )) s"
  tail -3 "$W/prof/kernels.log"; wc -l "$W/prof/kernels.csv"
  for plan in plan0 plan1 plan2 plan3; do for b in 4096 8192; do
    extra=""
    [ "$plan" = plan3 ] && [ "$b" = 4096 ] && extra="--currency $W/prof/currency_${plan}_$b.csv --currency-phase mlp_backward"
    [ "$plan" = plan0 ] && [ "$b" = 4096 ] && extra="--currency $W/prof/currency_${plan}_$b.csv --currency-phase emb_backward"
    echo "== rap profile capacity $plan $b"
    start=$(date +%s)
    timeout 300 "$B/rap" profile capacity --plan plans/$plan.plan $(model_of $plan) --batch $b \
      --out "$W/prof/${plan}_$b.capacity" $extra > "$W/prof/cap_${plan}_$b.log" 2>&1
    echo "exit $? after $(( $(date +%s) - start )) s"; grep "profile capacity:" "$W/prof/cap_${plan}_$b.log" | tail -5
  done; done
  tar czf "$OUT/profile.tgz" -C "$W" prof
fi

if has replan; then
  # measure the capacities again, plan with them on the GPU machine, into
  # $W/h200 (the layout of plans/h200), then `bench` below uses them
  mkdir -p "$W/h200/capacity"; cp -r plans/h200/predictor "$W/h200/"
  for plan in plan0 plan1 plan2 plan3; do for b in 4096 8192; do
    timeout 200 "$B/rap" profile capacity --plan plans/$plan.plan $(model_of $plan) --batch $b \
      --out "$W/h200/capacity/${plan}_$b.capacity" > "$W/h200/cap_${plan}_$b.log" 2>&1
    echo "capacity $plan $b: exit $?"; grep "profile capacity:" "$W/h200/cap_${plan}_$b.log" | tail -4
    common="--plan plans/$plan.plan --capacity $W/h200/capacity/${plan}_$b.capacity --predictor $W/h200/predictor --batch $b $(model_of $plan) --quiet"
    S=$W/h200/${plan}_$b
    timeout 60 "$B/rap" plan $common --fusion ilp-capacity --time-limit 4 --out $S.schedule --report $S.report.json
    timeout 60 "$B/rap" plan $common --fusion none --out ${S}_nofusion.schedule
    timeout 60 "$B/rap" plan $common --fusion ilp-capacity --time-limit 4 --no-split --out ${S}_nosplit.schedule
    timeout 60 "$B/rap" plan $common --fusion ilp-capacity --time-limit 4 --rows 0 --out ${S}_norows.schedule
    timeout 60 "$B/rap" plan $common --fusion ilp-capacity --time-limit 4 --window-choice earliest --out ${S}_earliest.schedule
    echo "planned $plan $b: exit $?"
  done; done
  SCHED_DIR=$W/h200
fi

if has bench; then
  # every mode replays its phases as CUDA graphs (--cuda-graph) unless GRAPH=""
  # is given; 34 warm-up steps so that ideal's 32 slots capture theirs before
  # timing starts
  G=${GRAPH---cuda-graph}
  REP=${REPEAT:-3}
  # schedules: plans/h200/<plan>_<batch>[_<variant>].schedule (+ .fusion)
  for plan in ${PLANS:-plan0 plan1 plan2 plan3}; do for b in ${BATCHES:-4096 8192}; do
    S=${SCHED_DIR:-plans/h200}/${plan}_$b
    [ -f "$S.schedule" ] || { echo "no $S.schedule"; continue; }
    echo "== rap bench $plan $b: every mode, planned schedule"
    timeout $((150 * REP)) "$B/rap" bench --plan plans/$plan.plan $(model_of $plan) --batch $b --steps ${STEPS:-300} \
      --warmup 34 --repeat $REP $G --schedule "$S.schedule" ${MODES:+--modes $MODES} --json --quiet \
      > "$W/bench/${plan}_$b.json" 2> "$W/bench/${plan}_$b.err"
    echo "exit $?"; tail -2 "$W/bench/${plan}_$b.err"
    [ "${ABLATION:-1}" = 0 ] && continue
    for v in ${VARIANTS:-nofusion nosplit norows earliest}; do
      [ -f "${S}_$v.schedule" ] || continue
      echo "== rap bench $plan $b: rap without ${v#no}"
      timeout $((100 * REP)) "$B/rap" bench --plan plans/$plan.plan $(model_of $plan) --batch $b --steps ${STEPS:-300} \
        --warmup 34 --repeat $REP $G --schedule "${S}_$v.schedule" --modes ideal,rap --json --quiet \
        > "$W/bench/${plan}_${b}_$v.json" 2> "$W/bench/${plan}_${b}_$v.err"
      echo "exit $?"
    done
    echo "== rap bench $plan $b: rap without the schedule (planned fusion, launched when ready = stream)"
    timeout $((100 * REP)) "$B/rap" bench --plan plans/$plan.plan $(model_of $plan) --batch $b --steps ${STEPS:-300} \
      --warmup 34 --repeat $REP $G --schedule "$S.schedule" --modes ideal,stream --json --quiet \
      > "$W/bench/${plan}_${b}_nosched.json" 2> "$W/bench/${plan}_${b}_nosched.err"
    echo "exit $?"
    [ -n "${PARTIAL_TGZ:-}" ] && tar czf "$OUT/bench.tgz" -C "$W" bench
  done; done
  [ -d "$W/h200" ] && tar czf "$OUT/bench.tgz" -C "$W" bench h200 || tar czf "$OUT/bench.tgz" -C "$W" bench
fi

if has multi; then
  echo "== bench/multi on ${MULTI_GPUS:-2} GPUs"
  start=$(date +%s)
  MODEL_plan1="--emb-dim 64 --mlp-bot 512-256-64" PLANS=${MPLANS:-plan0,plan1} \
    PLAN_ARGS=${MPLAN_ARGS---predictor plans/h200/predictor} \
    BATCHES=${MBATCHES:-4096,8192} STEPS=${MSTEPS:-50} WARMUP=${MWARMUP:-10} RAP=$B/rap \
    REPEAT=${REPEAT:-3} TIMEOUT=$((120 * ${REPEAT:-3})) \
    bash bench/multi "$W/multi" ${MULTI_GPUS:-2} > "$W/multi.log" 2>&1
  echo "exit $? after $(( $(date +%s) - start )) s"; tail -40 "$W/multi.log"
  tar czf "$OUT/multi.tgz" -C "$W" multi multi.log
fi
