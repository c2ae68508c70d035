#!/bin/sh
# Installs the Debian packages rap needs when any is missing, then exits 0.
# `deps.sh clang` does the same for what `make fuzz` needs.
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
[ -z "$missing" ] && exit 0
echo "deps: installing missing Debian packages:$missing" >&2
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2
$SUDO apt-get install -y -q --no-install-recommends $missing >&2
