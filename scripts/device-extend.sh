#!/usr/bin/env bash
# The device run of extend over a paged cache (docs/paged.md), in one command: build the gpu tests
# and attnkit_extend_bench there (-j16; incremental when the machine is still warm), the extend
# tests (the Hopper kernel's and the graph replays, each run under a timeout: a wrong barrier count
# would hang), compute-sanitizer memcheck / racecheck / synccheck on the small Hopper extend cases,
# the extend benchmark, and with --suite the Hopper prefill and extend suites after it.
#   scripts/device-extend.sh [--no-bench] [--suite]
# Logs under $OUT; summaries on stdout. Carry .deps/devprefix (scripts/device-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
bench=1 suite=0
for a in "$@"; do
  case $a in
    --no-bench) bench=0 ;;
    --suite) suite=1 ;;
    *) echo "unknown argument $a"; exit 2 ;;
  esac
done
B=build/device
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
if [[ ! -f $B/build.ninja ]]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON -DATTNKIT_CUDA_ARCHS=90a \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
fi
cmake --build $B -j16 --target attnkit_cuda_tests attnkit_extend_bench > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
T=$B/tests/attnkit_cuda_tests
timeout 120 $T --gtest_filter='*ExtendHopper*:*PagedGraphCuda*' > "$OUT/extend_tests.log" 2>&1
echo "extend tests rc=$?"; grep -E "^\[ +(OK|FAILED|SKIPPED) " "$OUT/extend_tests.log" | head -12
grep -E -A4 "Failure" "$OUT/extend_tests.log" | head -30
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='ExtendHopperCudaSmall.*' > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/$tool.log" | tr '\n' ' ')"
done
if ((bench)); then
  timeout 150 $B/bench/attnkit_extend_bench --reps 20 > "$OUT/extend_bench.json" 2> "$OUT/extend_bench.txt"
  echo "extend bench rc=$?"; cat "$OUT/extend_bench.txt"
fi
if ((suite)); then
  timeout 200 $T --gtest_filter='*PrefillHopper*:*Hopper*Cuda*:*ExtendCuda*' > "$OUT/hopper_tests.log" 2>&1
  echo "Hopper prefill + extend suites rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/hopper_tests.log" | sort | uniq -c | head
fi
