#!/bin/bash
# bench/device_house.sh [BIN_DIR]: rap bench of plans 0 and 1 at batch 4096
# and 8192 with the shipped schedules (plans/h200), every mode, as the last
# table of bench/RESULTS.md measured them (the defaults: 300 steps, mps
# last; --repeat 3 --warmup 34 --cuda-graph), so a change of structure can
# be checked to change nothing. Plan 1 runs the model the schedules were
# planned for (dim 64, bottom 512-256-64). Each run under timeout from one
# BUDGET (default 300 s; a run is skipped, saying so, under 40 s left).
# CONFIGS: the runs (default "plan1:4096 plan1:8192 plan0:4096 plan0:8192"),
# REPEAT (3), EXTRA (more rap bench options: e.g. "--parse cpu --threads
# 16"; the generated rows are parsed by --parse auto, the GPU's parser on
# a GPU, unless it says otherwise). Results: $OUT/<plan>_<batch>.json and
# .err, a table last.
# BIN_DIR (default .carry/dev) holds rap and lib/ (bench/exp/carry_dev.sh).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
BUDGET=${BUDGET:-300}
CONFIGS=${CONFIGS:-plan1:4096 plan1:8192 plan0:4096 plan0:8192}
T0=$(date +%s)
for c in $CONFIGS; do
  P=${c%%:*}; N=${c##*:}
  l=$((BUDGET - ($(date +%s) - T0) - 5))
  if [ "$l" -lt 40 ]; then echo "skipped $P $N: ${l}s left"; continue; fi
  [ "$l" -gt 150 ] && l=150
  M="--model paper"; [ "$P" = plan1 ] && M="--model paper --emb-dim 64 --mlp-bot 512-256-64"
  s=$(date +%s)
  timeout "$l" "$B/rap" bench --plan "plans/$P.plan" $M --batch "$N" --repeat "${REPEAT:-3}" \
    --warmup 34 --cuda-graph --schedule "plans/h200/${P}_$N.schedule" ${EXTRA:-} --json --quiet \
    > "$OUT/${P}_$N.json" 2> "$OUT/${P}_$N.err"
  echo "$P $N: exit $? in $(( $(date +%s) - s )) s"
done
python3 - "$OUT" $CONFIGS <<'PY'
import json, os, sys
out = sys.argv[1]
print('| plan, batch | rap/ideal (runs) | ' + ' | '.join(['sequential', 'stream', 'mps', 'cpu', 'gpu']) + ' | ideal step ms |')
for c in sys.argv[2:]:
    p, n = c.split(':')
    f = os.path.join(out, '%s_%s.json' % (p, n))
    try:
        d = json.load(open(f))
    except Exception as e:
        print('| %s %s | no result (%s) |' % (p, n, e.__class__.__name__)); continue
    m = {x['mode']: x for x in d['modes']}
    r = m.get('rap')
    cells = []
    for k in ['sequential', 'stream', 'mps', 'cpu', 'gpu']:
        cells.append('%.3f' % m[k]['vs_ideal'] if k in m else '-')
    rr = '%.4f (%s)' % (r['vs_ideal'], ' '.join('%.3f' % v for v in r.get('vs_ideal_runs', []))) if r else '-'
    print('| %s %s | %s | %s | %.3f |' % (p, n, rr, ' | '.join(cells), m['ideal']['step_ms'] if 'ideal' in m else 0))
PY
