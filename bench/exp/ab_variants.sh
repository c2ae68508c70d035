#!/bin/bash
# A/B of builds or flags on the shipped schedules (plans/h200), ideal and
# rap in the same invocation, alternating ROUNDS times, median of REPEAT
# runs each (bench/RESULTS.md, 2026-11-29, commits 3b6d938-11f7901: the
# step graph of df9c1d1 and the copy's phase). VARIANTS: BINARY:FLAG pairs, binaries in
# .carry/build (e.g. an experimental build beside rap), FLAG a rap bench
# option without its dashes (several joined by +: cuda-graph+prep-l2-streaming); BINARY:FLAG:NAME runs bench/exp/<plan>_<batch>_NAME.schedule
# instead of the shipped one.
# Usage: OUT=DIR [PLANS=..] [BATCHES=..] [ROUNDS=2] [REPEAT=5] [STEPS=300] [VARIANTS=..] bash bench/exp/ab_variants.sh
export LD_LIBRARY_PATH=.carry/build/lib
OUT=${OUT:-out}; mkdir -p "$OUT"; W=$(mktemp -d)
for R in $(seq ${ROUNDS:-2}); do
for P in ${PLANS:-plan1 plan0}; do for B in ${BATCHES:-4096}; do for V in ${VARIANTS:-rap:cuda-graph}; do
  X=${V%%:*}; G=${V#*:}; N=; case $G in *:*) N=${G#*:}; G=${G%%:*};; esac
  M="--model paper"; [ $P = plan1 ] && M="--model paper --emb-dim 64 --mlp-bot 512-256-64"
  S=plans/h200/${P}_$B.schedule; [ -n "$N" ] && S=bench/exp/${P}_${B}_$N.schedule
  F=$W/${P}_${B}_${X}_${G}_${N}_$R
  timeout 300 .carry/build/$X bench --plan plans/$P.plan $M --batch $B --steps ${STEPS:-300} --warmup 34 \
    --repeat ${REPEAT:-5} --${G//+/ --} --schedule $S --modes ideal,rap \
    --json --quiet > $F.json 2> $F.err || { echo "$P $B $V failed"; tail -3 $F.err; continue; }
  python3 - $F.json $P $B $V $R <<'P'
import json,sys
d=json.load(open(sys.argv[1])); m={x['mode']:x for x in d['modes']}
i,r=m['ideal'],m['rap']
print('%s %s %-34s round %s: rap/ideal %.4f runs %s | step ideal %.4f rap %.4f ms (+%.1f us)' % (
      sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], r['vs_ideal'],
      ' '.join('%.3f'%v for v in r['vs_ideal_runs']), i['step_ms'], r['step_ms'],
      1e3*(r['step_ms']-i['step_ms'])))
P
done; done; done; done
tar czf "$OUT/ab_variants.tgz" -C $W .
