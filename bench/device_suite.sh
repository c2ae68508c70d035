#!/bin/bash
# bench/device_suite.sh [BIN_DIR]: one device call that runs the other
# device scripts in order, each in its own folder under $OUT with a share
# of one budget, and packs everything into $OUT/results.tar.gz (the device
# tool returns few files; the tarball holds them all).
# SUITE: a space list of NAME:SECONDS, run in that order, where NAME is
#   tests     rap_tests, one run per filter in TESTS (default: every test,
#             one run of the whole program)
#   roofline  bench/device_roofline_ab.sh (VARIANTS, default "new r1")
#   parse     bench/device_parse.sh
#   memory    bench/device_memory.sh
#   schema    bench/device_schema.sh (the GPU parser over input schemas)
#   series    bench/device_series.sh (periodic checkpoints, exactly once)
#   rawlogs   bench/device_rawlogs.sh (when present)
#   continuous bench/device_continuous.sh (when present)
#   house     bench/device_house.sh (rap bench of plans 0 and 1 at 4096 and
#             8192, every mode, the shipped schedules)
# Each script gets BUDGET=SECONDS and runs under timeout SECONDS+15; the
# batch sizes of each are its own knob here (ROOF_BATCHES, MEM_BATCHES), so
# that one script's setting never reaches another.
# BIN_DIR (default .carry/dev) holds rap, rap_tests, bench_train,
# bench_parse_gpu, bench_schema, libraptrace.so and lib/ (ARROW=0 bash
# bench/exp/carry_dev.sh: a build without Arrow, whose libraries would not
# fit the carry).
set -u -o pipefail
. "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
OUT=$(cd "$OUT" && pwd)
SUITE=${SUITE:-tests:320 roofline:240 parse:90 memory:240}
T0=$(date +%s)
R=$OUT/r
mkdir -p "$R"
{
  echo "build: $(cat "$B/COMMIT" 2>/dev/null || echo unknown)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -1
  nproc
} > "$R/machine.txt"
cat "$R/machine.txt"
for item in $SUITE; do
  name=${item%%:*}; secs=${item##*:}
  d=$R/$name; mkdir -p "$d"
  s=$(date +%s)
  case $name in
    tests)
      if [ -z "${TESTS:-}" ]; then
        timeout "$secs" "$B/rap_tests" > "$d/tests.log" 2>&1; rc=$?
      else
        rc=0
        for f in $TESTS; do
          timeout "$secs" "$B/rap_tests" "$f" > "$d/tests_$f.log" 2>&1 || rc=$?
          echo "  $f: $(tail -1 "$d/tests_$f.log")"
        done
        cat "$d"/tests_*.log > "$d/tests.log"
      fi
      grep -E "FAIL|^    " "$d/tests.log" | head -30 > "$d/failures.txt"
      echo "tests: exit $rc -- $(tail -1 "$d/tests.log"); $(grep -c SKIP "$d/tests.log") skip lines"
      head -30 "$d/failures.txt";;
    roofline)
      OUT=$d BUDGET=$secs VARIANTS=${VARIANTS:-new r1} TESTS=${ROOF_TESTS:-} PARTS=${ROOF_PARTS:-bench,trace} \
        BATCHES=${ROOF_BATCHES:-4096,8192,65536} \
        timeout $((secs + 15)) bash bench/device_roofline_ab.sh "$B" > "$d/log.txt" 2>&1; rc=$?
      echo "roofline: exit $rc"; tail -25 "$d/log.txt";;
    parse)
      OUT=$d timeout $((secs + 15)) bash bench/device_parse.sh "$B" > "$d/log.txt" 2>&1; rc=$?
      echo "parse: exit $rc"; tail -20 "$d/log.txt";;
    memory)
      OUT=$d BUDGET=$secs BATCHES=${MEM_BATCHES:-4096 8192} timeout $((secs + 15)) \
        bash bench/device_memory.sh "$B" > "$d/log.txt" 2>&1; rc=$?
      echo "memory: exit $rc"; tail -30 "$d/log.txt";;
    schema|series)
      OUT=$d timeout "$secs" bash "bench/device_$name.sh" "$B" > "$d/log.txt" 2>&1; rc=$?
      echo "$name: exit $rc"; tail -20 "$d/log.txt";;
    rawlogs|continuous)
      if [ -f "bench/device_$name.sh" ]; then
        OUT=$d BUDGET=$secs timeout $((secs + 15)) bash "bench/device_$name.sh" "$B" > "$d/log.txt" 2>&1; rc=$?
        echo "$name: exit $rc"; tail -25 "$d/log.txt"
      else
        echo "$name: no bench/device_$name.sh"
      fi;;
    house)
      OUT=$d BUDGET=$secs timeout $((secs + 15)) bash bench/device_house.sh "$B" > "$d/log.txt" 2>&1; rc=$?
      echo "house: exit $rc"; tail -12 "$d/log.txt";;
    *) echo "unknown suite item $name";;
  esac
  echo "-- $name took $(( $(date +%s) - s )) s (total $(( $(date +%s) - T0 )) s)"
done
# files over 8 MB (generated data, long traces) stay out of the tarball,
# named in left_out.txt: the device tool returns a small result only
find "$R" -type f -size +8M -printf '%P %s bytes\n' > "$R/left_out.txt"
find "$R" -type f -size +8M -delete
tar -czf "$OUT/results.tar.gz" -C "$R" . && rm -rf "$R"
ls -la "$OUT"
