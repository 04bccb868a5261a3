#!/usr/bin/env bash
# Session 54's first device call (run by the next session with a device; session 54 got none):
# dev/pending/hopper-extend-producer.patch, and what session 53 added after its last call. Build the gpu tests,
# the CLI and attnkit_extend_bench there (-j16); the Python package with its CUDA backend beside
# them (built there, every Python test); the whole gpu suite (the long-chunk sinks case, the no-LSE
# Hopper extend variants, the out-alignment check and the two launcher refactors among them);
# memcheck / racecheck / synccheck on the small Hopper extend cases; `attnkit check --backend cuda
# --op paged` (long-chunk rows); then the page-size sweep (box count against the extend's time); the extend benchmark with its mixed
# point, alone on the GPU.
# Logs under $OUT; summaries on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
B=build/device
start=$(date +%s)
# The pending producer change (dev/pending/README.md), applied to this copy when absent.
if ! grep -q producer_warps src/cuda/prefill_hopper/page_boxes.hpp; then
  git apply dev/pending/hopper-extend-producer.patch 2>/dev/null || patch -p1 < dev/pending/hopper-extend-producer.patch ||
    { echo "pending patch did not apply"; exit 1; }
  echo "applied dev/pending/hopper-extend-producer.patch"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON -DATTNKIT_CUDA_ARCHS=90a \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 --target attnkit_cuda_tests attnkit_cli attnkit_extend_bench > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
CMAKE_PREFIX_PATH=$PWD/.deps/devprefix CMAKE_ARGS="-DATTNKIT_CUDA_ARCHS=90a" \
  OUT=$OUT/python timeout 330 scripts/device-python.sh > "$OUT/python.log" 2>&1 &
py=$!
T=$B/tests/attnkit_cuda_tests
timeout 240 $T > "$OUT/gpu_tests.log" 2>&1
echo "gpu suite rc=$? ($(( $(date +%s) - start )) s)"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu_tests.log" | sort | uniq -c | head
grep -E "^\[  FAILED" "$OUT/gpu_tests.log" | head; grep -E -A4 "Failure" "$OUT/gpu_tests.log" | head -20
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='ExtendHopperCudaSmall.*' > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tr '\n' ' ')"
done
timeout 60 $B/attnkit check --backend cuda --op paged > "$OUT/check_paged.txt" 2>&1
echo "check paged rc=$?"; tail -4 "$OUT/check_paged.txt"
wait $py; echo "python rc=$? ($(( $(date +%s) - start )) s)"; tail -3 "$OUT/python.log"
# Where the Hopper extend's 17% goes: box count, and the producer's warps. Pages of 16 / 32 / 128
# give 8 / 4 / 1 boxes per 128-key tile, the same work otherwise; the boxes issued by one producer
# warp (session 53's) or spread over four (ATTNKIT_EXP_PRODUCER_WARPS); contiguous prefill beside
# each; two rounds.
for r in 1 2; do
  for pg in 16 32 128; do
    for pw in 1 4; do
      ATTNKIT_EXP_PRODUCER_WARPS=$pw timeout 40 $B/bench/attnkit_extend_bench --reps 20 --no-decode --page $pg \
        --point 1,16384,2048 --point 1,0,2048 > "$OUT/pages_${pg}_w${pw}_$r.json" 2> "$OUT/pages_${pg}_w${pw}_$r.txt"
      grep -E "^b" "$OUT/pages_${pg}_w${pw}_$r.txt" | sed "s/^/w$pw /"
    done
  done
done
left=$(( 580 - ($(date +%s) - start) ))
if (( left > 40 )); then
  timeout $left $B/bench/attnkit_extend_bench --reps 20 > "$OUT/extend_bench.json" 2> "$OUT/extend_bench.txt"
  echo "extend bench rc=$?"; cat "$OUT/extend_bench.txt"
fi
