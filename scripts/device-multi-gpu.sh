#!/usr/bin/env bash
# The device run of context-parallel decode (docs/context-parallel.md) on nvidia-h200-x2/x4/x8, in
# one command: configure + build the CUDA tests and attnkit_sharded_bench, the sharded gpu tests
# (simulated shards, one-rank NCCL, append routing, and the multi-GPU parity on every GPU of the
# machine), compute-sanitizer memcheck on the one-GPU cases, then the 1M-token decode benchmark on
# 1, 2, 4 and 8 GPUs (as many as the machine has) in both modes (one thread driving every GPU, one
# thread per rank). NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0).
# Results and logs go to $OUT; a short table is printed last.
#   scripts/device-multi-gpu.sh [--build] [--tests] [--sanitize] [--bench] [--quick] [--prebuilt DIR]
#   (no part named = all; --prebuilt DIR uses DIR/attnkit_cuda_tests and DIR/attnkit_sharded_bench,
#   built on the host from this tree, and skips the build)
# Build dependencies the device image lacks (GTest, CLI11, nlohmann-json) come from the carried
# .deps/devprefix (CMAKE_PREFIX_PATH), as for scripts/device-check.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
export ATTNKIT_COMMIT=${ATTNKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-/tmp/attnkit-out}
LOG=$OUT/logs
mkdir -p "$LOG"
BUILD=build/device-multi
parts=()
quick=0 prebuilt=""
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --prebuilt) prebuilt=$2; shift ;;
    --*) parts+=("${1#--}") ;;
  esac
  shift
done
((${#parts[@]})) || parts=(build tests sanitize bench)
if [[ -n $prebuilt ]]; then
  parts=("${parts[@]/build}")
  BUILD=$prebuilt
  export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
status=0
step() { echo "== $* ($(date +%T))"; }

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpus.txt"
nvidia-smi topo -m > "$LOG/topo.txt" 2>&1
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "GPUs: $GPUS, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"

if want build; then
  step build
  t0=$(date +%s)
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
  grep "attnkit:" "$LOG/configure.log"
  cmake --build $BUILD -j16 --target attnkit_cuda_tests attnkit_sharded_bench > "$LOG/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
if [[ -n $prebuilt ]]; then
  TESTS=$BUILD/attnkit_cuda_tests BENCH=$BUILD/attnkit_sharded_bench
  echo "build: prebuilt binaries from $prebuilt"
else
  TESTS=$BUILD/tests/attnkit_cuda_tests BENCH=$BUILD/attnkit_sharded_bench
fi

if want tests; then
  step "sharded gpu tests"
  timeout 400 $TESTS --gtest_filter='ShardedDecodeCuda.*' > "$LOG/sharded_tests.log" 2>&1
  rc=$?; echo "sharded tests rc=$rc"; ((rc)) && status=1
  grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |tests ran" "$LOG/sharded_tests.log" | head -20
  grep -E "Failure|Expected|rel_l2|which is" "$LOG/sharded_tests.log" | head -30
fi

if want sanitize; then
  step "compute-sanitizer memcheck (one-GPU sharded cases)"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $TESTS \
    --gtest_filter='ShardedDecodeCuda.SimulatedShards*:ShardedDecodeCuda.AppendGoes*' > "$LOG/memcheck.log" 2>&1
  rc=$?; echo "memcheck rc=$rc"; ((rc)) && status=1; grep -E "ERROR SUMMARY|PASSED|FAILED" "$LOG/memcheck.log" | tail -4
fi

if want bench; then
  counts=""
  for g in 1 2 4 8; do ((g <= GPUS)) && counts+="${counts:+,}$g"; done
  reps=50; ((quick)) && reps=20
  step "1M-token decode on $counts GPU(s)"
  CMD="$BENCH --gpus $counts --kv-len 1048576 --batch 1 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --mode process,threads --reps $reps --json $OUT/sharded_decode_${GPUS}gpu.json"
  echo "$CMD" > "$LOG/bench_command.txt"
  timeout 420 $CMD 2> "$LOG/bench.err"
  rc=$?; echo "bench rc=$rc"; ((rc)) && status=1
  cat "$LOG/bench.err" | tail -20
  # The same with the host's launch work inside the timed window (no hold kernel): for the record.
  step "the same, --hold-us 0"
  timeout 300 ${CMD/sharded_decode_${GPUS}gpu.json/sharded_decode_${GPUS}gpu_hold0.json} --hold-us 0 2> "$LOG/bench_hold0.err"
  tail -8 "$LOG/bench_hold0.err"
fi

tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
exit $status
