#!/usr/bin/env bash
# The device run of the Hopper prefill kernel (issue 8), one command on the lent H200:
#   configure + build (-j16) the gpu tests, the prefill tests (Hopper path, the shared shape list,
#   the tiled fallback), compute-sanitizer memcheck / racecheck / synccheck on small Hopper cases,
#   SASS facts of the built kernel (HGMMA count, local-memory traffic), then the prefill sweep
#   (bench/cuda/prefill_bench.cu: planner's choice + the tiled fallback, cuBLAS GEMM ceiling) and
#   the torch SDPA flash / cuDNN peers in the same call, rendered to $OUT/prefill_hopper_<gpu>.*
#   scripts/device-hopper.sh [--no-tests] [--no-sanitize] [--no-bench] [--quick] [--also-tiled]
#     [--prebuilt DIR] [--rounds N] [bench filters: --head-dim D --min-seq S --max-seq S]
# --rounds N: the sweep N times, attnkit's bench and the peers alternating; the table takes each
#   point's median (cross-call ratios move by up to 7%, docs/perf-notes.md).
# --prebuilt DIR: DIR/attnkit_cuda_tests and DIR/prefill_bench built with this tree on the host (same
#   nvcc, sm_90a; the bench is that build's bench/attnkit_prefill_bench) instead of building here.
# Logs under $OUT/logs (packed into hopper_logs.tar.gz with the raw sweep rows); a short summary is printed last.
# Needs the carried .deps/devprefix (GTest, CLI11, nlohmann-json; made here by scripts/device-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
LOG=$OUT/logs
mkdir -p "$LOG"
BUILD=build/device-hopper
tests=1 sanitize=1 bench=1 quick=0 also_tiled="" prebuilt="" rounds=1
filters=()
while (($#)); do
  case $1 in
    --no-tests) tests=0 ;;
    --no-sanitize) sanitize=0 ;;
    --no-bench) bench=0 ;;
    --quick) quick=1 ;;
    --head-dim|--min-seq|--max-seq) filters+=("$1" "$2"); shift ;;
    --also-tiled) also_tiled=--also-tiled ;;
    --prebuilt) prebuilt=$2; shift ;;
    --rounds) rounds=$2; shift ;;
  esac
  shift
done
summary=()
note() { summary+=("$*"); echo "$*"; }
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$LOG/gpu.txt"
# Result files are named after the GPU (prefill_hopper_h200.md, prefill_hopper_h100.md, ...).
TAG=$(head -1 "$LOG/gpu.txt" | grep -o -i -E '[a-z][0-9]{2,3}' | head -1 | tr 'A-Z' 'a-z')
TAG=${TAG:-gpu}

t0=$(date +%s)
TESTS=$BUILD/prefill_tests
BENCH=$BUILD/bench/attnkit_prefill_bench
if [[ -n $prebuilt ]]; then
  TESTS=$prebuilt/attnkit_cuda_tests BENCH=$prebuilt/prefill_bench
  note "build: prebuilt binaries from $prebuilt"
else
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON -DATTNKIT_NCCL=OFF \
  -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
cmake --build $BUILD -j16 --target attnkit attnkit_prefill_bench > "$LOG/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
# The prefill tests alone (this issue's and the shared prefill list), linked straight against the
# library: other folders' tests in flight cannot block this call.
TI="-std=c++20 -O2 -Iinclude -Isrc -Itests -I.deps/devprefix/include -Xcompiler=-fopenmp"
( nvcc $TI -c tests/cuda/prefill_hopper_test.cpp -o $BUILD/pht.o & nvcc $TI -c tests/cuda/prefill_test.cpp -o $BUILD/pt.o & wait ) &&
  nvcc $BUILD/pht.o $BUILD/pt.o $BUILD/libattnkit.a -L.deps/devprefix/lib/x86_64-linux-gnu -L.deps/devprefix/lib \
    -lgtest_main -lgtest -Xcompiler=-fopenmp -o $TESTS >> "$LOG/build.log" 2>&1 ||
  { grep -E "error" "$LOG/build.log" | head -20; exit 1; }
note "build: $(( $(date +%s) - t0 )) s"
fi

# SASS of the Hopper kernels as built (the library object), or as carried (the prebuilt tests).
OBJ=$(find $BUILD -name "hopper_prefill.cu.o" 2>/dev/null | head -1)
[[ -z "$OBJ" && -n $prebuilt ]] && OBJ=$TESTS
if [[ -n "$OBJ" ]] && command -v cuobjdump > /dev/null; then
  cuobjdump --dump-sass "$OBJ" > "$LOG/hopper_sass.txt" 2>/dev/null
  awk '/Function : /{f=$3} /HGMMA/{h[f]++} /LDL|STL/{l[f]++} END{for (k in h) printf "sass %s: HGMMA %d, LDL/STL %d\n", k, h[k], l[k]+0}' \
    "$LOG/hopper_sass.txt" | sed 's/_ZN7attnkit19cuda_prefill_hopper21hopper_prefill_kernel//' | tee "$LOG/sass_summary.txt"
  python3 dev/hopper/key_loop_spills.py "$LOG/hopper_sass.txt" | sed 's/attnkit::cuda_prefill_hopper:://g' | tee -a "$LOG/sass_summary.txt"
  summary+=("$(cat "$LOG/sass_summary.txt")")
fi

# A hang (a barrier never completing) must not eat the call: one small case first, 60 s at most.
timeout 60 $TESTS --gtest_filter="Shapes/PrefillHopper.MatchesGolden/causal_square_gqa1_d64_bf16:Shapes/PrefillHopper.MatchesGolden/hop_noncausal_ring_wraps_d128_bf16" > "$LOG/smoke.log" 2>&1
rc=$?
note "smoke rc=$rc: $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/smoke.log" | tr '\n' ' ')"
grep -E "rel_l2|max_abs|lse\[" "$LOG/smoke.log" | head -6
if ((rc == 124)); then note "smoke test hung: skipping the rest"; tests=0 sanitize=0 bench=0 status=1; fi

if ((tests)); then
  timeout 300 $TESTS --gtest_filter="*PrefillHopper*:*PrefillShapesCuda*:PrefillCuda.*:*PrefillFp8*" > "$LOG/prefill_tests.log" 2>&1
  rc=$?; ((rc)) && status=1
  note "prefill tests rc=$rc: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' "$LOG/prefill_tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] .*\." "$LOG/prefill_tests.log" | head -20
  grep -E "rel_l2|max_abs|lse\[|Failure|error" "$LOG/prefill_tests.log" | head -20
fi

if ((sanitize)); then
  SMALL="Shapes/PrefillHopper.MatchesGolden/causal_window50_d128_bf16:Shapes/PrefillHopper.MatchesGolden/ragged_causal_empty_len1_d128_bf16:Shapes/PrefillHopper.MatchesGolden/noncausal_window70_d256_bf16"
  SMALL+=":Shapes/PrefillHopper.MatchesGolden/hop_causal_q193_window50_gqa3_d64_bf16:Shapes/PrefillHopper.MatchesGolden/hop_packed_ragged_causal_gqa4_d128_bf16"
  SMALL+=":Shapes/PrefillHopper.MatchesGolden/hop_ragged_causal_staged_o_d256_bf16"
  SMALL+=":Shapes/PrefillFp8.MatchesGolden/fp8_causal_window129_q129_kv1000_gqa8_d128_bf16:Shapes/PrefillFp8.MatchesGolden/fp8_ragged_causal_window_gqa8_d256_f16"
  for tool in memcheck racecheck synccheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $TESTS --gtest_filter="$SMALL" > "$LOG/$tool.log" 2>&1
    rc=$?; ((rc)) && status=1
    note "$tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG/$tool.log" | tr '\n' ' ')"
  done
fi

if ((bench)); then
  PQ=""; ((quick)) && PQ="--quick"
  : > "$OUT/prefill_attnkit.jsonl"
  : > "$OUT/prefill_torch.jsonl"
  for ((round = 1; round <= rounds; ++round)); do
    timeout 330 $BENCH $PQ $also_tiled "${filters[@]}" >> "$OUT/prefill_attnkit.jsonl" 2>> "$LOG/prefill_bench.err" ||
      { status=1; tail -5 "$LOG/prefill_bench.err"; }
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/torch_prefill.py measure $PQ "${filters[@]}" >> "$OUT/prefill_torch.jsonl" 2>> "$LOG/prefill_torch.err" ||
      { status=1; tail -5 "$LOG/prefill_torch.err"; }
  done
  python3 bench/peers/torch_prefill.py render "$OUT/prefill_attnkit.jsonl" "$OUT/prefill_torch.jsonl" --out "$OUT/prefill_hopper_$TAG" > /dev/null
fi

# The rendered .json holds every raw row, so the raw files go into the archive (fewer files back
# from the device, which returns at most 8); its own name keeps device-check.sh's logs.tar.gz.
mv "$OUT"/prefill_attnkit.jsonl "$OUT"/prefill_torch.jsonl "$LOG"/ 2> /dev/null
tar -czf "$OUT/hopper_logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
echo "==== summary"
printf '%s\n' "${summary[@]}"
[[ -s "$OUT/prefill_hopper_$TAG.md" ]] && cat "$OUT/prefill_hopper_$TAG.md"
exit $status
