#!/bin/bash
# bench/exp/carry_dev.sh: the carried build of the device scripts
# (bench/device_suite.sh and the scripts it runs), in .carry/dev (ignored
# by git): rap, rap_tests, bench_train, bench_parse_gpu and bench_schema
# built in $BUILD
# (default .carry/build; sm_90), their extra shared libraries (scripts/gather_libs.sh),
# the CUPTI trace library (bench/exp/build_cupti_trace.sh); binaries
# stripped of debug info (the carry limit); COMMIT says what was built.
# Usage (repository root): ARROW=0 bash bench/exp/carry_dev.sh (without
# Arrow: pyarrow's libraries alone pass the carry's limit)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-.carry/build}
BINS="rap rap_tests bench_train bench_parse_gpu bench_schema"
make -j2 BUILD="$BUILD" $(for b in $BINS; do echo "$BUILD/$b"; done)
sh scripts/gather_libs.sh "$BUILD/rap" "$BUILD/lib"
bash bench/exp/build_cupti_trace.sh "$BUILD"
rm -rf .carry/dev
mkdir -p .carry/dev
for b in $BINS; do cp "$BUILD/$b" .carry/dev/; done
cp "$BUILD/libraptrace.so" .carry/dev/
cp -r "$BUILD/lib" .carry/dev/lib
for b in $BINS; do strip --strip-debug ".carry/dev/$b"; done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests bench || echo '+local changes')" > .carry/dev/COMMIT
du -sh .carry/dev
