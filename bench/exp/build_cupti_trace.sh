#!/bin/bash
# Builds the CUPTI kernel-trace injection library (bench/exp/cupti_trace.c)
# into OUTDIR/libraptrace.so and copies libcupti.so.13 into OUTDIR/lib so
# both can be carried to the GPU machine.
# Usage: bench/exp/build_cupti_trace.sh [OUTDIR]   (relative to the repo root; default .carry/build)
# Then, on the GPU machine:
#   LD_LIBRARY_PATH=OUTDIR/lib CUDA_INJECTION64_PATH=$PWD/OUTDIR/libraptrace.so \
#   RAP_CUPTI_OUT=ideal.csv OUTDIR/rap bench --modes ideal ...
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.carry/build}
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT/lib"
# RUNPATH $ORIGIN/lib finds the carried libcupti even without LD_LIBRARY_PATH
cc -std=c11 -O2 -Wall -Wextra -shared -fPIC -pthread -I"$CUDA/include" bench/exp/cupti_trace.c \
  -L"$CUDA/lib64" -lcupti -Wl,-rpath,'$ORIGIN/lib:$ORIGIN' -o "$OUT/libraptrace.so"
cupti=$(readlink -f "$CUDA/lib64/libcupti.so.13")
cp -f "$cupti" "$OUT/lib/libcupti.so.13"
nm -D --defined-only "$OUT/libraptrace.so" | grep -q ' T InitializeInjection$' \
  || { echo "InitializeInjection not exported from $OUT/libraptrace.so" >&2; exit 1; }
echo "built $OUT/libraptrace.so (+ $OUT/lib/libcupti.so.13 from $cupti)"
