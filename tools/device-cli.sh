#!/usr/bin/env bash
# Builds `attnkit` with CUDA on the lent GPU machine (nvcc and g++ straight, all cores; the
# machine has no network, so headers come from the carried .deps/devprefix) and runs
# `attnkit check` and `attnkit bench` there. Output files go to $OUT.
#   tools/device-cli.sh [bench args...]      (ATTNKIT_COMMIT: the commit to record)
# ATTNKIT_SRC: build from that tree instead (e.g. a carried `git archive HEAD` export, so other
# engineers' uncommitted edits in the working tree do not get in the way).
set -u
cd "$(dirname "$0")/.."
dep=$PWD/.deps/devprefix
cd "${ATTNKIT_SRC:-.}"
out=${OUT:-/tmp/out}; mkdir -p "$out"; build=/tmp/attnkit-cli; mkdir -p $build/obj
common="-std=c++20 -O3 -g -DNDEBUG -DATTNKIT_WITH_CUDA=1 -Iinclude -Isrc -Ibench -Itests -Itools -I$dep/include"
nvcc_flags="$common --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-fopenmp"
gxx_flags="$common -fopenmp -I/usr/local/cuda/include"
nvidia-smi -L
printf '#include "build_info.hpp"\nconst char* attnkit::cli::built_git_commit() { return "%s"; }\n' \
  "${ATTNKIT_COMMIT:-unknown}" > $build/git_commit.cpp
sources=$(ls src/common/*.cpp src/plan/*.cpp src/cpu/*.cpp bench/*.cpp tools/*.cpp tools/cuda/*.cpp $build/git_commit.cpp;
          find src/cuda bench/cuda -name '*.cu' -o -name '*.cpp' | grep -v '^src/cuda_unavailable')
start=$(date +%s)
echo "$sources" | xargs -P"$(nproc)" -I{} sh -c '
  f={}; o='$build'/obj/$(echo "$f" | tr / _).o
  case "$f" in
    *.cu) nvcc '"$nvcc_flags"' -c "$f" -o "$o" > "$o.log" 2>&1 ;;
    *) g++ '"$gxx_flags"' -c "$f" -o "$o" > "$o.log" 2>&1 ;;
  esac || { echo "COMPILE FAILED $f"; head -20 "$o.log"; }'
g++ -fopenmp $build/obj/*.o -L/usr/local/cuda/lib64 -lcudart -lcublas -o $build/attnkit > $out/link.log 2>&1 ||
  { echo "LINK FAILED"; head -30 $out/link.log; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
timeout 300 $build/attnkit check > $out/check.txt 2>&1; echo "check rc=$?"
grep -E "FAIL|SKIPPED|^# " $out/check.txt | head -60
timeout 200 $build/attnkit bench "$@" > $out/bench.txt 2> $out/bench.err; rc=$?; echo "bench rc=$rc"
cat $out/bench.txt; tail -3 $out/bench.err
if [[ $rc -ge 128 ]] && command -v gdb > /dev/null; then
  gdb -batch -ex run -ex bt --args $build/attnkit bench "$@" 2>&1 | grep -E "^#|signal" | head -20
fi
timeout 200 $build/attnkit bench --json "$@" > $out/bench.json 2>> $out/bench.err; echo "bench --json rc=$?"
