#!/bin/bash
# bench/exp/carry_dev.sh: the carried build of bench/device_roofline_ab.sh,
# in .carry/dev (ignored by git): rap, rap_tests and bench_train built in
# .carry/build (sm_90), their extra shared libraries (scripts/gather_libs.sh),
# the CUPTI trace library (bench/exp/build_cupti_trace.sh); binaries
# stripped of debug info (the carry limit); COMMIT says what was built.
# Usage (repository root): bash bench/exp/carry_dev.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
make -j2 BUILD=.carry/build .carry/build/rap .carry/build/rap_tests .carry/build/bench_train
sh scripts/gather_libs.sh .carry/build/rap .carry/build/lib
bash bench/exp/build_cupti_trace.sh .carry/build
rm -rf .carry/dev
mkdir -p .carry/dev
cp .carry/build/rap .carry/build/rap_tests .carry/build/bench_train .carry/build/libraptrace.so .carry/dev/
cp -r .carry/build/lib .carry/dev/lib
strip --strip-debug .carry/dev/rap .carry/dev/rap_tests .carry/dev/bench_train
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo '+local changes')" > .carry/dev/COMMIT
du -sh .carry/dev
