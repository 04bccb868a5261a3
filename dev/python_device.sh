#!/usr/bin/env bash
# One device call for the Python export change (session 43): the carried gpu test binary
# (build/ab/cuda_tests, stripped) plain and under the four compute-sanitizer tools, the Python
# package built there with its CUDA backend and every Python test, then the per-call host times
# (dev/python_call_overhead.py). Summaries on stdout; logs under $OUT.
#   dev/python_device.sh [--python-only]   (--python-only: no C++ test binary, no sanitizers)
set -uo pipefail
python_only=0
[[ ${1:-} == --python-only ]] && python_only=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CMAKE_PREFIX_PATH=$PWD/.deps/devprefix CMAKE_ARGS="-DATTNKIT_CUDA_ARCHS=90a" \
  OUT=$OUT/python timeout 420 scripts/device-python.sh > "$OUT/python.log" 2>&1 &
py=$!
if ((!python_only)); then
  timeout 300 build/ab/cuda_tests > "$OUT/gpu_tests.log" 2>&1
  echo "gpu suite rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu_tests.log" | sort | uniq -c | head -20
  grep -A3 "AnotherDevicesMemory" "$OUT/gpu_tests.log" | head -4
  ATTNKIT_CUDA_TESTS=build/ab/cuda_tests OUT=$OUT timeout 300 scripts/device-sanitize.sh --timeout 240 2>&1 | tail -8
fi
wait $py; echo "python rc=$?"; tail -4 "$OUT/python.log"
timeout 120 python3 dev/python_call_overhead.py --device cuda 2>&1 | tail -8
