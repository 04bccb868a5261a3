#!/usr/bin/env bash
# compute-sanitizer over the whole gpu test suite (issue 9): every test of attnkit_cuda_tests (the
# binary behind the CTest label gpu) under memcheck, racecheck, initcheck and synccheck. Each tool
# runs the suite in gtest shards (GTEST_TOTAL_SHARDS) side by side, so the four tools finish within
# one device call; a shard passes only when its tests pass AND the tool reports 0 errors.
#   scripts/device-sanitize.sh [--build] [--shards N] [--tools memcheck,racecheck,...] [--timeout S]
# Logs go to $OUT/sanitize/; the last lines printed are the per-tool table.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
LOG=$OUT/sanitize
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0
BUILD=build/device-sanitize
build=0 shards=4 timeout_s=480 tools=memcheck,racecheck,initcheck,synccheck
while (($#)); do
  case $1 in
    --build) build=1 ;;
    --shards) shards=$2; shift ;;
    --tools) tools=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
TESTS=${ATTNKIT_CUDA_TESTS:-$BUILD/tests/attnkit_cuda_tests}
if ((build)); then
  t0=$(date +%s)
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
  cmake --build $BUILD -j16 --target attnkit_cuda_tests > "$LOG/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
compute-sanitizer --version | tail -1
# The commit: ATTNKIT_COMMIT (set it for a prebuilt binary), else this checkout's.
echo "suite: $($TESTS --gtest_list_tests | grep -c '^  ') tests; $shards shards per tool; tools $tools; commit ${ATTNKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null) (checkout)}"

# The tests that create NCCL communicators run as one more process per tool with API-error reports
# off: libnccl itself probes kernels built for other GPUs and re-enables peer access, and the
# sanitizer reports those internal, handled API errors (cudaErrorNoKernelImageForDevice,
# cudaErrorPeerAccessAlreadyEnabled) against the process. Memory, race, init and sync checking of
# every kernel stays on for them; every other test keeps API-error reports on.
NCCL_TESTS='ShardedDecodeCuda.OneRankNcclRuns:ShardedDecodeCuda.MultiGpu*'
IFS=, read -r -a tool_list <<< "$tools"
start=$(date +%s)
for tool in "${tool_list[@]}"; do
  extra=()
  [[ $tool == racecheck ]] && extra=(--racecheck-report all)
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  for ((i = 0; i <= shards; ++i)); do
    if ((i < shards)); then
      env=(GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i) filter="-$NCCL_TESTS" api=()
    else
      env=() filter="$NCCL_TESTS" api=(--report-api-errors no)
    fi
    ( env "${env[@]}" timeout "$timeout_s" \
        compute-sanitizer --tool "$tool" "${extra[@]}" "${api[@]}" --error-exitcode 9 --print-limit 20 "$TESTS" \
        --gtest_filter="$filter" > "$LOG/$tool.$i.log" 2>&1
      echo $? > "$LOG/$tool.$i.rc" ) &
  done
done
wait
echo "wall: $(( $(date +%s) - start )) s"

status=0
printf '%-10s %6s %6s %6s %8s %s\n' tool tests passed failed errors "rc per shard (last: NCCL tests)"
for tool in "${tool_list[@]}"; do
  ran=0 passed=0 failed=0 errors=0 rcs=""
  for ((i = 0; i <= shards; ++i)); do
    f=$LOG/$tool.$i.log
    ran=$((ran + $(grep -c '^\[ RUN      \]' "$f")))
    passed=$((passed + $(grep -cE '^\[       OK \]' "$f")))
    failed=$((failed + $(grep -c '^\[  FAILED  \] .*(' "$f")))
    if [[ $tool == racecheck ]]; then  # racecheck sums up hazards: "(N errors, M warnings)"
      sum=$(grep -oE 'RACECHECK SUMMARY: .*\(([0-9]+) errors, ([0-9]+) warnings' "$f" | grep -oE '[0-9]+' | tail -2 | paste -sd+)
      e=${sum:+$((sum))}
    else
      e=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$f" | grep -oE '[0-9]+' | tail -1)
    fi
    errors=$((errors + ${e:-1}))
    rc=$(cat "$LOG/$tool.$i.rc"); rcs+="$rc "
    ((rc)) && status=1
  done
  printf '%-10s %6d %6d %6d %8d %s\n' "$tool" "$ran" "$passed" "$failed" "$errors" "$rcs"
done
grep -h "SKIPPED \]" "$LOG"/memcheck.*.log | sort -u | head -20
# The first reports of any tool that found something (the full logs are in sanitize.tar.gz).
for f in "$LOG"/*.log; do
  if grep -qE "ERROR SUMMARY: [1-9]|\(([1-9][0-9]*) errors|[1-9][0-9]* warnings\)" "$f"; then
    echo "--- $(basename "$f")"
    grep -E "^========= (Invalid|Program hit|Uninitialized|Race|Error|Barrier|  at |    at )|^\[ RUN" "$f" | grep -B1 "=========" | head -30
  fi
done
tar czf "$OUT/sanitize.tar.gz" -C "$OUT" sanitize && rm -rf "$LOG"
exit $status
