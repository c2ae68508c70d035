#!/bin/bash
# rap / ideal of the planned schedules of plans/h200 (plans 0, 1, 3 at 4096
# and 8192), --cuda-graph, median of REPEAT runs (bench/RESULTS.md);
# build carried in .carry/build. Usage: OUT=DIR bash bench/exp/final_ratios.sh
export LD_LIBRARY_PATH=.carry/build/lib
OUT=${OUT:-out}; mkdir -p "$OUT"
for P in ${PLANS:-plan0 plan1 plan3}; do for B in 4096 8192; do
  M="--model paper"; [ $P = plan1 ] && M="--model paper --emb-dim 64 --mlp-bot 512-256-64"
  timeout 300 .carry/build/rap bench --plan plans/$P.plan $M --batch $B --steps 60 --warmup 34 \
    --repeat ${REPEAT:-3} --cuda-graph --schedule plans/h200/${P}_$B.schedule --modes ideal,rap \
    --json --quiet > "$OUT/${P}_$B.json" 2> "$OUT/${P}_$B.err" || { echo "$P $B failed"; tail -3 "$OUT/${P}_$B.err"; }
  python3 - "$OUT/${P}_$B.json" $P $B <<'P'
import json,sys
d=json.load(open(sys.argv[1])); m={x['mode']:x for x in d['modes']}
i,r=m['ideal'],m['rap']
print('%s %s rap/ideal %.4f runs %s step ideal %.3f rap %.3f ms' % (sys.argv[2], sys.argv[3], r['vs_ideal'],
      ' '.join('%.3f'%v for v in r['vs_ideal_runs']), i['step_ms'], r['step_ms']))
P
done; done
