#!/bin/bash
# bench/exp/carry_parse.sh: the carried build of bench/device_parse.sh, in
# .carry/parse (ignored by git): rap_tests and bench_parse_gpu built in
# $BUILD (default .carry/build; sm_90), their extra shared libraries
# (scripts/gather_libs.sh), stripped of debug info (the carry limit);
# COMMIT says what was built.
# Usage (repository root): bash bench/exp/carry_parse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-.carry/build}
make -j2 BUILD="$BUILD" "$BUILD/rap_tests" "$BUILD/bench_parse_gpu"
rm -rf .carry/parse
mkdir -p .carry/parse
sh scripts/gather_libs.sh "$BUILD/rap_tests" .carry/parse/lib
cp "$BUILD/rap_tests" "$BUILD/bench_parse_gpu" .carry/parse/
strip --strip-debug .carry/parse/rap_tests .carry/parse/bench_parse_gpu
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo '+local changes')" > .carry/parse/COMMIT
du -sh .carry/parse
