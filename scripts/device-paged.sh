#!/usr/bin/env bash
# The device run of the paged KV cache and extend kernels (issue 6) on the lent H200, in one call:
#   build (-j16: attnkit_cuda_tests and attnkit_paged_bench only), the gpu tests of paged decode,
#   extend, append, graph replay and the contiguous decode (Paged*:Extend*:*Decode*),
#   compute-sanitizer memcheck and racecheck on small paged cases, then the paged benchmark with the
#   PyTorch SDPA peers, rendered to $OUT/paged_<gpu>.{json,md} (paged_h200, paged_h100, ...). A short
#   summary is printed last.
#   scripts/device-paged.sh [--prebuilt DIR] [--commit SHA] [--no-bench] [--quick]
# --prebuilt DIR: use DIR/attnkit_cuda_tests and DIR/attnkit_paged_bench built with this tree on
# the host (same nvcc, sm_90a) when they start here, else build. Build dependencies the device
# image lacks come from the carried .deps/devprefix (CMAKE_PREFIX_PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
LOG=$OUT/logs
mkdir -p "$LOG"
BUILD=build/device-paged
prebuilt="" commit="?" bench=1 quick=""
while (($#)); do
  case $1 in
    --prebuilt) prebuilt=$2; shift ;;
    --commit) commit=$2; shift ;;
    --no-bench) bench=0 ;;
    --quick) quick="--quick" ;;
  esac
  shift
done
status=0
step() { echo "== $* ($(date +%T))"; }
summary=()
note() { summary+=("$*"); echo "$*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
# Result files are named after the GPU (paged_h200.md, paged_h100.md, ...).
TAG=$(head -1 "$LOG/gpu.txt" | grep -o -i -E '[a-z][0-9]{2,3}' | head -1 | tr 'A-Z' 'a-z')
TAG=${TAG:-gpu}
TESTS=$BUILD/tests/attnkit_cuda_tests
BENCH=$BUILD/bench/attnkit_paged_bench
if [[ -n $prebuilt ]] && LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib "$prebuilt/attnkit_cuda_tests" --gtest_list_tests > /dev/null 2>&1 &&
  "$prebuilt/attnkit_paged_bench" --help > /dev/null 2>&1; then
  TESTS=$prebuilt/attnkit_cuda_tests BENCH=$prebuilt/attnkit_paged_bench
  note "build: prebuilt binaries from $prebuilt"
else
  step build
  t0=$(date +%s)
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
  cmake --build $BUILD -j16 --target attnkit_cuda_tests attnkit_paged_bench > "$LOG/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
  note "build: $(($(date +%s) - t0)) s on the device"
fi
export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib:${LD_LIBRARY_PATH:-}

step "gpu tests: Paged*:Extend*:*Decode*"
timeout 240 "$TESTS" --gtest_filter='Paged*:Extend*:*Decode*' > "$LOG/gpu_tests.log" 2>&1
rc=$?; ((rc)) && status=1
note "gpu tests rc=$rc: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+|^\[  SKIPPED \] [0-9]+' "$LOG/gpu_tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Z]" "$LOG/gpu_tests.log" | head -20
grep -E "Failure|Expected|rel_l2|which is|error" "$LOG/gpu_tests.log" | head -30

SMALL="PagedRejectsCuda.*:PagedGraphCuda.*:ExtendCuda.EveryQueryLengthFrom0To17InOneBatch:PagedDecodeCuda.UnsplitAndSplitPlansAgree"
step "compute-sanitizer memcheck ($SMALL)"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" --gtest_filter="$SMALL" > "$LOG/memcheck.log" 2>&1
rc=$?; ((rc)) && status=1
note "memcheck rc=$rc: $(grep -E 'ERROR SUMMARY' "$LOG/memcheck.log" | tail -1) $(grep -cE '^\[       OK \]' "$LOG/memcheck.log") tests OK"
RACE="ExtendCuda.EveryQueryLengthFrom0To17InOneBatch:PagedDecodeCuda.UnsplitAndSplitPlansAgree"
step "compute-sanitizer racecheck ($RACE)"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$TESTS" --gtest_filter="$RACE" > "$LOG/racecheck.log" 2>&1
rc=$?; ((rc)) && status=1
note "racecheck rc=$rc: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG/racecheck.log" | tail -1)"

if ((bench)); then
  step "paged benchmark (attnkit) $quick"
  timeout 200 "$BENCH" $quick > "$OUT/paged_attnkit.json" 2> "$LOG/bench.err"
  rc=$?; ((rc)) && { status=1; tail -5 "$LOG/bench.err"; }
  note "attnkit_paged_bench rc=$rc"
  step "PyTorch SDPA padded peers + render"
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/torch_paged.py --attnkit "$OUT/paged_attnkit.json" \
    --commit "$commit" --json "$OUT/paged_$TAG.json" --md "$OUT/paged_$TAG.md" > "$LOG/render.log" 2> "$LOG/peers.err"
  rc=$?; ((rc)) && { status=1; tail -5 "$LOG/peers.err"; }
  note "torch_paged rc=$rc"
fi
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
[[ -s "$OUT/paged_$TAG.md" ]] && cat "$OUT/paged_$TAG.md"
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
