#!/usr/bin/env bash
# Builds dev/hopper/boundary_timeline.cu against a copy of BUILD's libattnkit.a whose Hopper prefill
# object is recompiled with -DATTNKIT_HOPPER_STAMPS (the kernel's clock64 landmarks):
#   dev/hopper/build_stamps.sh build/lead OUT_DIR   -> OUT_DIR/boundary_timeline
# BUILD is a configured Ninja CUDA build with a built libattnkit.a.
set -euo pipefail
build=$1 out=$2
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The library's own nvcc line for the file (Ninja's), with the probe's define and our output path.
cmd=$(ninja -C "$build" -t commands CMakeFiles/attnkit.dir/src/cuda/prefill_hopper/hopper_prefill.cu.o | tail -1)
[[ $cmd == *nvcc* ]] || { echo "build_stamps.sh: no nvcc line for hopper_prefill.cu in $build (a Ninja CUDA build?)" >&2; exit 1; }
cmd=$(sed -E 's/ -o [^ ]+/ -o __OBJ__/' <<< "$cmd")
cmd=${cmd/__OBJ__/$tmp/hopper_prefill.cu.o}
(cd "$build" && eval "$cmd -DATTNKIT_HOPPER_STAMPS")
cp "$build/libattnkit.a" "$tmp/libattnkit.a"
ar r "$tmp/libattnkit.a" "$tmp/hopper_prefill.cu.o"
nvcc -std=c++20 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -Ibench \
  dev/hopper/boundary_timeline.cu "$tmp/libattnkit.a" -lcuda -Xcompiler=-fopenmp -o "$out/boundary_timeline"
strip "$out/boundary_timeline"
