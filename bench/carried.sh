# bench/carried.sh: sourced by the device scripts (bench/device_*.sh,
# bench/exp/*.sh) for the build they run, carried to the GPU machine:
#   . "$(dirname "$0")/carried.sh" && carried_build "${1:-}" .carry/dev
# sets B to the build's folder (the first argument, else the default; made
# absolute, the script ends when it is missing), makes OUT (default out)
# and puts B/lib first on LD_LIBRARY_PATH (the build's gathered libraries).
carried_build() {
  B=${1:-$2}
  B=$(cd "$B" && pwd) || { echo "no build folder ${1:-$2}"; exit 1; }
  OUT=${OUT:-out}
  mkdir -p "$OUT"
  export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
