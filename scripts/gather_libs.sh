#!/bin/sh
# gather_libs.sh BINARY DIR: copies the shared libraries BINARY needs that a
# GPU machine without rap's build dependencies lacks (GLPK, XGBoost, ISA-L's
# libisal.so.2 and their dependencies: docs/BUILD.md "Running a binary on
# another GPU machine") into DIR, to carry along and name in LD_LIBRARY_PATH there. The
# CUDA, C and OpenBLAS libraries are expected there and are left out, and
# so are NCCL and OpenMPI (expected installed; NCCL alone is 200 MB).
set -e
bin=$1
dir=$2
mkdir -p "$dir"
ldd "$bin" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
  case "$name" in
    linux-vdso*|libc.so*|libm.so*|ld-linux*|libstdc++*|libgcc_s*|libz.so*|libcublas*|libopenblas*|libpthread*|libdl.so*|librt.so*|libcudart*|libnccl*|libmpi*|libopen-pal*|libopen-rte*|libhwloc*|libevent*|libudev*) ;;
    *) cp -L "$path" "$dir/$name" ;;
  esac
done
# ISA-L (0.3 MB) must come along: rap links it when built with it
if ldd "$bin" | grep -q 'libisal.so'; then
  test -f "$dir/libisal.so.2" || { echo "gather_libs: libisal.so.2 not copied" >&2; exit 1; }
fi
ls "$dir"
