#!/bin/bash
# A/B: .carry/build/rap_old (a second untimed event recorded at each phase boundary) vs
# .carry/build/rap, plans 1 and 0 at 4096, alternating (bench/RESULTS.md, 2026-11-29, commit f19de0e)
export LD_LIBRARY_PATH=.carry/build/lib
for round in 1 2; do for P in plan1 plan0; do for V in rap_old rap; do
  M="--model paper"; [ $P = plan1 ] && M="--model paper --emb-dim 64 --mlp-bot 512-256-64"
  timeout 200 .carry/build/$V bench --plan plans/$P.plan $M --batch 4096 \
    --steps 60 --warmup 34 --repeat ${REPEAT:-5} --cuda-graph --schedule plans/h200/${P}_4096.schedule --modes ideal,rap --json --quiet \
    > /tmp/l.json 2> /tmp/l.err || { echo "$P $V failed"; tail -3 /tmp/l.err; }
  python3 - /tmp/l.json $P $V $round <<'P'
import json,sys
d=json.load(open(sys.argv[1])); m={x['mode']:x for x in d['modes']}
i,r=m['ideal'],m['rap']
ph=['emb_forward_ms','mlp_forward_ms','mlp_backward_ms','emb_backward_ms','exposed_ms']
print(sys.argv[2],sys.argv[3],'round',sys.argv[4],'vs_ideal %.4f'%r['vs_ideal'],'runs',' '.join('%.3f'%v for v in r['vs_ideal_runs']),'step +%.1fus'%((r['step_ms']-i['step_ms'])*1000),
      ' '.join('%s+%.1f'%(p[:7],(r[p]-i[p])*1000) for p in ph))
P
done; done; done
