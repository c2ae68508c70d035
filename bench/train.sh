#!/usr/bin/env bash
# bench/train.sh OUTDIR -- rap's DLRM training step and its PyTorch peer on
# the same data, side by side (docs/BENCH_TRAIN.md).
#
#   make -j16 && bench/train.sh OUTDIR
#
# 1. build/bench_train --gen-only writes K batches per batch size to a
#    temporary folder (removed at the end; BENCH_TRAIN_DATA=DIR keeps them).
# 2. build/bench_train times rap's training step (per phase, eager and as a
#    CUDA graph): OUTDIR/rap.json, OUTDIR/rap.log.
# 3. bench/peers/dlrm_torch.py times the PyTorch peer on the same files:
#    OUTDIR/torch.json, OUTDIR/torch.log.
# 4. One table (also OUTDIR/table.txt): batch, precision, rap samples/s,
#    torch samples/s, ratio, rap per-phase ms, and the issue's two goals.
#
# Environment: BATCHES (4096,8192,65536), PRECISION (fp32,bf16), STEPS (100),
# WARMUP (10), K (8), OPTIMIZER (sgd, or adagrad), PYTHON (python3),
# BENCH_TRAIN_BIN (build/bench_train), RAP_TIMEOUT (150 s), TORCH_TIMEOUT
# (270 s), TORCH_BUDGET (210 s: the peer skips optional variants past it),
# TORCH_ARGS (extra peer options, e.g. --no-compile). Without a GPU (no
# nvidia-smi, no /dev/nvidia0) a tiny CPU configuration runs.
set -u

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,22p' "$0"
    exit 2
fi
OUT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BENCH_TRAIN_BIN:-$ROOT/build/bench_train}
PY=${PYTHON:-python3}
PEER=$ROOT/bench/peers/dlrm_torch.py
T0=$(date +%s)

mkdir -p "$OUT" || { echo "train.sh: cannot create $OUT"; exit 2; }
if [ ! -x "$BIN" ]; then
    echo "train.sh: $BIN not found or not executable: build first (make -j16)"
    exit 2
fi

if nvidia-smi -L >/dev/null 2>&1 || [ -e /dev/nvidia0 ]; then
    BATCHES=${BATCHES:-4096,8192,65536}
    PRECISION=${PRECISION:-fp32,bf16}
    STEPS=${STEPS:-100}
    WARMUP=${WARMUP:-10}
    K=${K:-8}
else
    echo "train.sh: no GPU (nvidia-smi found none): tiny CPU configuration, not the benchmark"
    BATCHES=${BATCHES:-256}
    PRECISION=${PRECISION:-fp32}
    STEPS=${STEPS:-5}
    WARMUP=${WARMUP:-1}
    K=${K:-2}
fi
OPTIMIZER=${OPTIMIZER:-sgd}
RAP_TIMEOUT=${RAP_TIMEOUT:-150}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-270}
TORCH_BUDGET=${TORCH_BUDGET:-210}

if [ -n "${BENCH_TRAIN_DATA:-}" ]; then
    DATA=$BENCH_TRAIN_DATA
    mkdir -p "$DATA" || exit 2
else
    DATA=$(mktemp -d "${TMPDIR:-/tmp}/bench_train.XXXXXX") || exit 2
    trap 'rm -rf "$DATA"' EXIT
fi
COMMON=(--batches "$BATCHES" --k "$K")

echo "== data: $DATA (batches $BATCHES, K=$K)"
if ! timeout 120 "$BIN" "${COMMON[@]}" --gen-only --data-dir "$DATA"; then
    echo "train.sh: generating the data failed"
    exit 1
fi
FILES=()
IFS=, read -r -a BLIST <<<"$BATCHES"
for b in "${BLIST[@]}"; do
    FILES+=("$DATA/train_b$b.bin")
done

echo "== rap ($(($(date +%s) - T0)) s)"
rm -f "$OUT/rap.json" "$OUT/torch.json"
timeout "$RAP_TIMEOUT" "$BIN" "${COMMON[@]}" --precision "$PRECISION" --steps "$STEPS" \
    --warmup "$WARMUP" --optimizer "$OPTIMIZER" --json "$OUT/rap.json" 2>&1 | tee "$OUT/rap.log"
RC_RAP=${PIPESTATUS[0]}
[ "$RC_RAP" = 124 ] && echo "train.sh: bench_train ran past ${RAP_TIMEOUT} s and was stopped"

echo "== torch peer ($(($(date +%s) - T0)) s)"
# shellcheck disable=SC2086
timeout "$TORCH_TIMEOUT" "$PY" "$PEER" --precision "$PRECISION" --steps "$STEPS" \
    --warmup "$WARMUP" --optimizer "$OPTIMIZER" --budget "$TORCH_BUDGET" --json "$OUT/torch.json" ${TORCH_ARGS:-} \
    "${FILES[@]}" 2>&1 | tee "$OUT/torch.log"
RC_TORCH=${PIPESTATUS[0]}
[ "$RC_TORCH" = 124 ] && echo "train.sh: the peer ran past ${TORCH_TIMEOUT} s and was stopped (its JSON keeps what it finished)"

echo "== table ($(($(date +%s) - T0)) s)"
"$PY" - "$OUT/rap.json" "$OUT/torch.json" <<'EOF' | tee "$OUT/table.txt"
import json, os, sys

def load(p):
    if not os.path.exists(p):
        return None
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:
        print(f"cannot read {p}: {e}")
        return None

rap, tor = load(sys.argv[1]), load(sys.argv[2])
rr = {(r["batch"], r["precision"]): r for r in (rap or {}).get("results", [])}
tb = {(b["batch"], b["precision"]): b for b in (tor or {}).get("best", [])}
tsum = {f["batch"]: f["ids_sum"] for f in (tor or {}).get("files", [])}
keys = sorted(set(rr) | set(tb), key=lambda k: (k[1], k[0]))
dev = (rap or {}).get("device", "?")
print(f"device: rap {dev} {(rap or {}).get('gpu', '')}; torch {(tor or {}).get('torch', 'did not run')} "
      f"{(tor or {}).get('device', '')}")
hdr = (f"{'batch':>6} {'prec':4} {'rap Msmp/s':>10} {'mode':5} {'torch Msmp/s':>12} {'variant':17} "
       f"{'ratio':>6} {'step ms':>8} {'emb_fwd':>8} {'mlp_fwd':>8} {'mlp_bwd':>8} {'emb_bwd':>8} {'GB':>6}")
print(hdr)
ok_ratio, ok_rate, notes = True, None, []
for k in keys:
    r, t = rr.get(k), tb.get(k)
    rs = r.get("best_samples_per_s", 0) if r and not r.get("error") else 0
    ts = t["samples_per_s"] if t else 0
    ratio = rs / ts if rs and ts else 0
    ph = r.get("phase_ms", {}) if r else {}
    print(f"{k[0]:6d} {k[1]:4} {rs / 1e6:10.3f} {(r or {}).get('best_mode', '-'):5} {ts / 1e6:12.3f} "
          f"{(t or {}).get('variant', '-'):17} {ratio:6.2f} {(r or {}).get('step_ms', 0):8.3f} "
          f"{ph.get('emb_forward', 0):8.3f} {ph.get('mlp_forward', 0):8.3f} "
          f"{ph.get('mlp_backward', 0):8.3f} {ph.get('emb_backward', 0):8.3f} "
          f"{(r or {}).get('gpu_mem_used_gb', 0):6.1f}")
    if r and r.get("error"):
        notes.append(f"rap {k}: {r['error']}")
    if r and r.get("graph_note") and not r.get("graph_step_ms"):
        notes.append(f"rap {k} graph: {r['graph_note']}")
    if not t:
        notes.append(f"torch {k}: no result")
    if r and k[0] in tsum and tsum[k[0]] != r.get("ids_sum"):
        notes.append(f"DATA MISMATCH at batch {k[0]}: rap ids sum {r.get('ids_sum')} != torch {tsum[k[0]]}")
    if not ratio or ratio < 2.0:
        ok_ratio = False
    if k[0] == 65536:
        ok_rate = (ok_rate is None or ok_rate) and rs >= 8e6
for n in notes:
    print("note:", n)
for r in (tor or {}).get("results", []):
    if r.get("error"):
        print(f"torch {r['variant']} {r['batch']} {r['precision']}: {r['error'][:160]}")
print(f"goal: rap >= 2x torch at every batch size and precision: {'MET' if ok_ratio and keys else 'NOT MET'}")
print(f"goal: rap >= 8 M samples/s at batch 65536: "
      f"{'not measured' if ok_rate is None else 'MET' if ok_rate else 'NOT MET'}")
EOF
echo "train.sh: done in $(($(date +%s) - T0)) s (bench_train rc $RC_RAP, peer rc $RC_TORCH); results in $OUT"
[ "$RC_RAP" = 0 ] && [ "$RC_TORCH" = 0 ]
