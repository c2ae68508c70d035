#!/bin/sh
# fuzz/replay.sh BUILD FORMAT... -- runs BUILD/fuzz/fuzz_F (an entry point
# linked with fuzz/replay.c and ASan/UBSan) over fuzz/corpus/F and
# fuzz/crashes/F for every format F given; fails on the first sanitizer
# report, crash, abort or hang (docs/FUZZ.md). `make fuzz-replay` calls it.
set -u
build=$1
shift
# halt_on_error: a UBSan report fails the run like an ASan one;
# max_allocation_size_mb: one allocation over 2 GB (a size trusted from a
# file) fails it too, as libFuzzer's -malloc_limit_mb does
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=0:max_allocation_size_mb=2048}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=fuzz/lsan.supp:print_suppressions=0}"
start=$(date +%s)
for f in "$@"; do
    if [ ! -d "fuzz/corpus/$f" ]; then
        echo "fuzz-replay: no corpus fuzz/corpus/$f" >&2
        exit 1
    fi
    if ! "$build/fuzz/fuzz_$f" "fuzz/corpus/$f" "fuzz/crashes/$f"; then
        echo "fuzz-replay: FAILED on format $f (the input is named above)" >&2
        exit 1
    fi
done
echo "fuzz-replay: $# formats replayed clean in $(( $(date +%s) - start )) s"
