#!/bin/bash
# bench/exp/carry_schema.sh: the carried build of bench/device_schema.sh, in
# .carry/schema (ignored by git): rap_tests and bench_schema built in
# $BUILD (default .carry/build-schema; sm_90) with ARROW=0 (pyarrow's
# libarrow and libparquet, 62 MB, do not fit the carry limit: the Parquet
# part of the benchmark runs on the development machine), their extra
# shared libraries (scripts/gather_libs.sh), stripped of debug info;
# COMMIT says what was built.
# Usage (repository root): bash bench/exp/carry_schema.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-.carry/build-schema}
make -j2 ARROW=0 BUILD="$BUILD" "$BUILD/rap_tests" "$BUILD/bench_schema"
rm -rf .carry/schema
mkdir -p .carry/schema
sh scripts/gather_libs.sh "$BUILD/rap_tests" .carry/schema/lib
cp "$BUILD/rap_tests" "$BUILD/bench_schema" .carry/schema/
cp scripts/tsv_to_parquet.py .carry/schema/
strip --strip-debug .carry/schema/rap_tests .carry/schema/bench_schema
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo '+local changes')" > .carry/schema/COMMIT
du -sh .carry/schema
