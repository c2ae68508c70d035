#!/bin/sh
# fuzz/pack.sh DIR -- writes the files of DIR (not recursive, sorted) to
# stdout as the fuzz_predictor entry point reads a bundle: per file a line
# "==> NAME SIZE" and its SIZE bytes.
set -eu
for f in $(ls "$1"); do
  [ -f "$1/$f" ] || continue
  printf '==> %s %s\n' "$f" "$(wc -c < "$1/$f" | tr -d ' ')"
  cat "$1/$f"
done
