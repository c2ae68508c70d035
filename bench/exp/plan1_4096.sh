#!/bin/bash
# plan 1 at 4096: schedule variants A (planned), B (all in mlp_backward), C (kernel 5 exposed)
# (bench/RESULTS.md, 2026-11-29, commit d61e43f). Usage: OUT=DIR bash bench/exp/plan1_4096.sh
# with the build carried in .carry/build (docs/PROFILE.md).
export LD_LIBRARY_PATH=.carry/build/lib
OUT=${OUT:-out}; mkdir -p "$OUT"
S=plans/h200/plan1_4096.schedule; D=$(mktemp -d)
cp $S $D/A.schedule; cp $S.fusion $D/A.schedule.fusion
sed '/^window emb_backward/d' $S > $D/B.schedule
{ sed '/^window emb_backward/,$d' $S; echo "window exposed"; tail -1 $S; } > $D/C.schedule
cp $S.fusion $D/B.schedule.fusion; cp $S.fusion $D/C.schedule.fusion
for round in 1 2; do for V in ${VARS:-A B C}; do
  timeout 200 .carry/build/rap bench --plan plans/plan1.plan --model paper --emb-dim 64 --mlp-bot 512-256-64 --batch 4096 \
    --steps 60 --warmup 34 --repeat ${REPEAT:-5} --cuda-graph --schedule $D/$V.schedule --modes ideal,rap --json --quiet \
    > $OUT/${V}_$round.json 2> $OUT/${V}_$round.err || { echo "$V failed"; tail -3 $OUT/${V}_$round.err; }
  python3 - $OUT/${V}_$round.json $V $round <<'P'
import json,sys
d=json.load(open(sys.argv[1])); m={x['mode']:x for x in d['modes']}
i,r=m['ideal'],m['rap']
ph=['emb_forward_ms','mlp_forward_ms','mlp_backward_ms','emb_backward_ms','exposed_ms']
print(sys.argv[2],sys.argv[3],'vs_ideal %.4f'%r['vs_ideal'],'runs',' '.join('%.3f'%v for v in r['vs_ideal_runs']),'step +%.1fus'%((r['step_ms']-i['step_ms'])*1000),
      ' '.join('%s+%.1f'%(p[:7],(r[p]-i[p])*1000) for p in ph))
P
done; done
