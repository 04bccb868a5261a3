#!/usr/bin/env bash
# Session 53's first device call: build the gpu tests and the CLI there (-j16), run the whole gpu
# suite, memcheck / racecheck on the left-padded decode cases, time left-padded decode (the real
# keys over every split) against unpadded decode of the same real keys, and the Python package's
# tests with its CUDA backend (built there). Logs under $OUT; summaries on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
B=build/device
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON -DATTNKIT_CUDA_ARCHS=90a \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
cmake --build $B -j16 --target attnkit_cuda_tests attnkit_cli > "$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
CMAKE_PREFIX_PATH=$PWD/.deps/devprefix CMAKE_ARGS="-DATTNKIT_CUDA_ARCHS=90a" \
  OUT=$OUT/python timeout 400 scripts/device-python.sh > "$OUT/python.log" 2>&1 &
py=$!
T=$B/tests/attnkit_cuda_tests
timeout 280 $T > "$OUT/gpu_tests.log" 2>&1
echo "gpu suite rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu_tests.log" | sort | uniq -c | head; grep -E "^\[  FAILED" "$OUT/gpu_tests.log" | head
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='*left_padded*' > "$OUT/$tool.log" 2>&1
  echo "$tool left_padded rc=$? $(grep -E 'ERROR SUMMARY|tests ran' "$OUT/$tool.log" | tr '\n' ' ')"
done
CLI=$B/attnkit
for r in 1 2 3; do
  for pad in 0 8192; do
    echo "round $r left-pad $pad:"
    $CLI bench --backend cuda --op decode --batch 1,16 --kv-len $((8192 + pad)) --left-pad $pad --dtype bf16 \
      2>&1 | tee "$OUT/leftpad_${pad}_$r.txt" | grep -vE "^#|^$" | grep -vE "^(impl|---)" | cut -c1-150
  done
done
wait $py; echo "python rc=$?"; tail -3 "$OUT/python.log"
