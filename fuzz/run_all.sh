#!/bin/sh
# fuzz/run_all.sh [SECONDS] [FORMAT...] -- libFuzzer on every format at
# once (docs/FUZZ.md "A long run"), each process at the lowest priority
# (nice -n 19: other builds on the machine are not slowed), for SECONDS
# each (default 600), then one table line per format: executions, corpus
# size, crashes, hangs, sanitizer reports. Needs the libFuzzer binaries:
#   make -j2 CC=clang CUDA=0 FUZZER=1 BUILD=build-fuzz build-fuzz/fuzz/lf_F ...
# Runs from the repository root. New inputs go to build-fuzz/corpus/F
# (kept), findings to build-fuzz/crashes/F, each log to build-fuzz/logs/F.log.
# Limits: -timeout=25 (an input running 25 s is a hang; the processes share
# the machine's cores, so a wall-clock limit well above one input's time),
# -rss_limit_mb=1024 and -malloc_limit_mb=1024 (13 processes fit in memory;
# a reader trusting a size from a file allocates more and is reported).
# Exit status: 1 when any format had a finding, else 0.
set -u
secs=${1:-600}
[ $# -gt 0 ] && shift
formats=${*:-"tsv gzip plan safetensors shard schedule fusion capacity predictor predictor_csv xgb manifest json"}
B=build-fuzz
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=fuzz/lsan.supp:print_suppressions=0}"
mkdir -p "$B/logs"
for f in $formats; do
    [ -x "$B/fuzz/lf_$f" ] || { echo "run_all: $B/fuzz/lf_$f not built" >&2; exit 2; }
    mkdir -p "$B/corpus/$f" "$B/crashes/$f"
done
for f in $formats; do
    nice -n 19 "$B/fuzz/lf_$f" -max_total_time="$secs" -timeout=25 -rss_limit_mb=1024 \
        -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$B/crashes/$f/" \
        "$B/corpus/$f" "fuzz/corpus/$f" > "$B/logs/$f.log" 2>&1 &
done
wait
bad=0
echo "| format | seconds | executions | corpus (files) | crashes | hangs | sanitizer reports |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for f in $formats; do
    l="$B/logs/$f.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$l" | tail -1)
    t=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$l" | tail -1)
    corp=$(find "$B/corpus/$f" -type f | wc -l)
    crashes=$(find "$B/crashes/$f" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
    hangs=$(find "$B/crashes/$f" -type f -name 'timeout-*' | wc -l)
    reports=$(grep -c 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' "$l")
    [ "$crashes$hangs$reports" = 000 ] || bad=1
    echo "| $f | ${t:-?} | ${execs:-?} | $corp | $crashes | $hangs | $reports |"
done
exit $bad
