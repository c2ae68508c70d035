#!/bin/bash
# bench/exp/carry_parse.sh: the carried build of bench/device_parse.sh, in
# .carry/parse (ignored by git): rap_tests and bench_parse_gpu built in
# .carry/build (sm_90), their extra shared libraries (scripts/gather_libs.sh),
# stripped of debug info (the carry limit); COMMIT says what was built.
# Usage (repository root): bash bench/exp/carry_parse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
make -j2 BUILD=.carry/build .carry/build/rap_tests .carry/build/bench_parse_gpu
sh scripts/gather_libs.sh .carry/build/rap_tests .carry/build/lib
rm -rf .carry/parse
mkdir -p .carry/parse
cp .carry/build/rap_tests .carry/build/bench_parse_gpu .carry/parse/
cp -r .carry/build/lib .carry/parse/lib
strip --strip-debug .carry/parse/rap_tests .carry/parse/bench_parse_gpu
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo '+local changes')" > .carry/parse/COMMIT
du -sh .carry/parse
