#!/bin/sh
# fuzz/make_corpus.sh [BUILD] -- writes the seed corpus fuzz/corpus/FORMAT/
# and the fixtures some entry points read (fuzz/fixtures/) with rap's own
# tools (BUILD/rap: gen, prep --format bin, train --save, export, plan,
# predictor train) and the shipped files (plans/). Deterministic: the same
# rap writes the same seeds. Run from the repository root after building;
# commit what it writes (docs/FUZZ.md).
set -eu
B=${1:-build}
R=$B/rap
[ -x "$R" ] || { echo "make_corpus: $R not built" >&2; exit 1; }
C=fuzz/corpus
F=fuzz/fixtures
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for f in tsv gzip plan safetensors shard schedule fusion capacity predictor predictor_csv xgb manifest json; do
  rm -rf "$C/$f"; mkdir -p "$C/$f"
done
q=--quiet

# TSV rows and gzip streams: generated rows, one gzip member, two members
"$R" gen --rows 16 --seed 1 --out "$C/tsv/gen16.tsv" $q
"$R" gen --rows 4 --seed 2 --out "$C/tsv/gen4.tsv" $q
"$R" gen --rows 16 --seed 3 --out "$C/gzip/gen16.gz" $q
"$R" gen --rows 3 --seed 4 --out "$W/a.gz" $q
"$R" gen --rows 2 --seed 5 --out "$W/b.gz" $q
cat "$W/a.gz" "$W/b.gz" > "$C/gzip/two_members.gz"
cp "$C/tsv/gen4.tsv" "$C/gzip/plain.tsv"

# plans: the shipped ones of a few KB, and the seeds' own
for p in plan0 plan1 default profile_ops; do cp "plans/$p.plan" "$C/plan/"; done
cp "$F/tiny.plan" "$C/plan/"

# binary shards of the tiny plan
"$R" gen --rows 40 --seed 6 --out "$W/rows.tsv" $q
"$R" prep --plan "$F/tiny.plan" --input "$W/rows.tsv" --device cpu --format bin --batch 16 \
  --output "$C/shard/tiny_b16.shard" $q
"$R" prep --plan "$F/tiny.plan" --input "$W/rows.tsv" --device cpu --format bin --batch 40 \
  --output "$C/shard/tiny_b40.shard" $q

# checkpoints of the tiny plan: plain (with Adagrad's state; with bf16 and fp16 tables), sharded on
# 2 ranks (the manifest is a seed; its shard files are seeds and the
# fixtures a manifest finds beside it), exported
T="--plan $F/tiny.plan --data $W/rows.tsv --device cpu --emb-dim 4 --mlp-bot 8-4 --mlp-top 8-1 --batch 16 --steps 2"
"$R" train $T --optimizer adagrad --save "$C/safetensors/plain.ckpt" $q
# 16-bit tables (BF16 and F16 tensors) with row-wise and per-element state
"$R" train $T --emb-dtype bf16 --optimizer rowwise-adagrad --save "$C/safetensors/bf16_rowwise.ckpt" $q
"$R" train $T --emb-dtype fp16 --optimizer adagrad --save "$C/safetensors/fp16.ckpt" $q
mkdir -p "$W/sh" "$F/safetensors"
"$R" train $T --gpus 2 --save "$W/sh/ckpt" $q
cp "$W/sh/ckpt" "$C/safetensors/manifest.ckpt"
cp "$W/sh/ckpt.rank0" "$W/sh/ckpt.rank1" "$C/safetensors/"
cp "$W/sh/ckpt.rank0" "$W/sh/ckpt.rank1" "$F/safetensors/"
"$R" export --checkpoint "$C/safetensors/plain.ckpt" --out "$C/safetensors/export.safetensors" $q

# schedules, fusion files and capacity files: the shipped ones of plan 0
for s in plans/h200/plan0_4096*.schedule plans/h200/plan0_8192.schedule; do cp "$s" "$C/schedule/"; done
for s in plans/h200/plan0_4096*.schedule.fusion; do cp "$s" "$C/fusion/"; done
cp plans/h200/capacity/*.capacity "$C/capacity/"

# per-rank manifests of plan 0 on 2 ranks (their part files: fixtures)
mkdir -p "$W/rk" "$F/manifest"
"$R" plan --plan plans/plan0.plan --gpus 2 --batch 512 --time-limit 1 --out "$W/rk/s" $q
cp "$W/rk/s.rank0" "$W/rk/s.rank1" "$C/manifest/"
cp "$W/rk"/s.rank?.? "$W/rk"/s.rank?.?.fusion "$F/manifest/"

# the predictor: its CSV, a bundle trained on it (one kernel type: its
# model is the smallest XGBoost writes, 300 trees), packed as
# "==> NAME SIZE" + bytes per file (fuzz_predictor.c), and its model
cp "$F/kernels.csv" "$C/predictor_csv/"
grep -v sigrid_hash "$F/kernels.csv" > "$W/one.csv"
"$R" predictor train --in "$W/one.csv" --out "$W/pred" $q > /dev/null
sh fuzz/pack.sh "$W/pred" > "$C/predictor/fill_null.bundle"
cp "$W/pred/xgb_fill_null.0.json" "$C/xgb/"

# JSON: checkpoint headers (the 8-byte length cut off) and a planner report
n=$(od -An -tu8 -N8 "$C/safetensors/manifest.ckpt" | tr -d ' ')
dd if="$C/safetensors/manifest.ckpt" bs=1 skip=8 count="$n" status=none > "$C/json/manifest_header.json"
n=$(od -An -tu8 -N8 "$C/safetensors/ckpt.rank1" | tr -d ' ')
dd if="$C/safetensors/ckpt.rank1" bs=1 skip=8 count="$n" status=none > "$C/json/shard_header.json"
cp plans/h200/plan0_4096.report.json "$C/json/"

du -sh "$C" "$F"
