#!/bin/bash
# A/B: the schedules planned with row fusion (plans/h200/<P>_<B>.schedule) vs
# without (<P>_<B>_norows.schedule), same binary, alternating, ideal and rap,
# --cuda-graph, median of REPEAT runs per invocation (bench/RESULTS.md,
# 2026-11-29, commits ca7dba8-07c0b68). PLANS, BATCHES, ROUNDS select;
# also VARIANTS (default "rows norows": any other name V = the ablation
# schedule plans/h200/<P>_<B>_<V>.schedule or the hand-made
# bench/exp/<P>_<B>_<V>.schedule
# (e.g. the row kernel whole in one window: emb_forward .. emb_backward),
# "prev" = the rows schedule run by .carry/build/rap_prev, an older binary).
export LD_LIBRARY_PATH=.carry/build/lib
for round in $(seq 1 ${ROUNDS:-2}); do for P in ${PLANS:-plan1 plan0}; do for B in ${BATCHES:-4096}; do
for V in ${VARIANTS:-rows norows}; do
  M="--model paper"; [ $P = plan1 ] && M="--model paper --emb-dim 64 --mlp-bot 512-256-64"
  S=plans/h200/${P}_$B.schedule
  case $V in rows|prev) ;; *) S=plans/h200/${P}_${B}_$V.schedule
    [ -f $S ] || S=bench/exp/${P}_${B}_$V.schedule;; esac
  BIN=.carry/build/rap; [ $V = prev ] && BIN=.carry/build/rap_prev
  [ -f $S ] && [ -x $BIN ] || continue
  timeout 200 $BIN bench --plan plans/$P.plan $M --batch $B \
    --steps 60 --warmup 34 --repeat ${REPEAT:-5} --cuda-graph --schedule $S --modes ideal,rap --json --quiet \
    > /tmp/l.json 2> /tmp/l.err || { echo "$P $B $V failed"; tail -3 /tmp/l.err; continue; }
  python3 - /tmp/l.json $P $B $V $round <<'P'
import json,sys
d=json.load(open(sys.argv[1])); m={x['mode']:x for x in d['modes']}
i,r=m['ideal'],m['rap']
ph=['emb_forward_ms','mlp_forward_ms','mlp_backward_ms','emb_backward_ms','exposed_ms']
print(sys.argv[2],sys.argv[3],sys.argv[4],'round',sys.argv[5],'vs_ideal %.4f'%r['vs_ideal'],'runs',' '.join('%.3f'%v for v in r['vs_ideal_runs']),'step +%.1fus'%((r['step_ms']-i['step_ms'])*1000),
      ' '.join('%s+%.1f'%(p[:7],(r[p]-i[p])*1000) for p in ph))
P
done; done; done; done
