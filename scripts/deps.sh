#!/bin/sh
# Installs the Debian packages rap needs when any is missing, and pyarrow
# (Parquet input) when python3 lacks it, then exits 0. `deps.sh clang` does
# the same for what `make fuzz` needs.
# Called by `make` before every build, so the README's two commands work on a
# fresh machine. Needs root (or sudo) only when something is missing.
set -e
PKGS="make gcc zlib1g-dev libisal-dev libopenblas-dev libglpk-dev libxgboost-dev openmpi-bin libopenmpi-dev"
# `deps.sh clang`: clang and libFuzzer, for `make fuzz` only (make test
# needs neither: its replay of the fuzz corpus is built with gcc)
[ "${1:-}" = clang ] && PKGS="clang libclang-rt-dev"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
if [ -n "$missing" ]; then
  echo "deps: installing missing Debian packages:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends $missing >&2
fi
# Apache Arrow's C++ Parquet reader comes with the pyarrow wheel (Debian has
# no Arrow package; docs/BUILD.md). Optional: without it rap builds and
# refuses Parquet input, so a failed install is said and not fatal.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import pyarrow' >/dev/null 2>&1; then
  echo "deps: installing pyarrow (Parquet input) with pip" >&2
  python3 -m pip install -q pyarrow >&2 || echo "deps: pip install pyarrow failed: rap builds without Parquet input" >&2
fi
exit 0
