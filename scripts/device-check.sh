#!/usr/bin/env bash
# The device run of the CUDA decode backend, on the lent H200, in one command:
#   configure + build (-j16), the gpu-labelled tests, compute-sanitizer memcheck and racecheck on
#   small decode/append/fused cases, the decode benchmark sweep (attnkit + PyTorch SDPA peers, same
#   protocol, same run), ncu DRAM counts on a few points, and the rendered table/chart.
# Full logs go under $OUT (packed into logs.tar.gz: the device returns at most 8 files); a short
# table is printed last. Parts can be chosen so each call stays well inside 10 minutes:
#   scripts/device-check.sh [--build] [--tests] [--sanitize] [--bench] [--ncu] [--quick]
# (no part named = all). Build dependencies the device image lacks (GTest, CLI11, nlohmann-json)
# come from the carried .deps/devprefix (made here by scripts/device-deps.sh; CMAKE_PREFIX_PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
mkdir -p "$OUT/logs"
LOG=$OUT/logs
BUILD=build/device
parts=()
quick=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --*) parts+=("${a#--}") ;;
  esac
done
((${#parts[@]})) || parts=(build tests sanitize bench ncu)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
status=0
step() { echo "== $* ($(date +%T))"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$LOG/gpu.txt"
# Result files are named after the GPU (decode_h200.md, decode_h100.md, ...).
TAG=$(head -1 "$LOG/gpu.txt" | grep -o -i -E '[a-z][0-9]{2,3}' | head -1 | tr 'A-Z' 'a-z')
TAG=${TAG:-gpu}

if want build; then
  step build
  t0=$(date +%s)
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
  cmake --build $BUILD -j16 --target attnkit_cuda_tests attnkit_cli > "$LOG/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
TESTS=$BUILD/tests/attnkit_cuda_tests
CLI=$BUILD/attnkit
OURS="*DecodeCuda*:*FusedCuda*:*AppendCuda*:*ApplyRopeCuda*:*MergeStatesCuda*"

if want tests; then
  step "gpu tests (decode, append, fused, RoPE, merge)"
  timeout 300 $TESTS --gtest_filter="$OURS" > "$LOG/gpu_tests.log" 2>&1
  rc=$?; echo "decode/append/fused tests rc=$rc"; ((rc)) && status=1
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran" "$LOG/gpu_tests.log" | head -30
  grep -E "Failure|Expected|rel_l2|which is" "$LOG/gpu_tests.log" | head -30
  # Every gpu-labelled test lives in this one binary (prefill included); it is run directly since
  # ctest's gtest discovery chokes on the SKIP_REGULAR_EXPRESSION brackets under CMake 4 (reported).
  step "all gpu tests (attnkit_cuda_tests, prefill included)"
  timeout 300 $TESTS > "$LOG/gpu_tests_all.log" 2>&1
  echo "all gpu tests rc=$?"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran" "$LOG/gpu_tests_all.log" | tail -8
fi

if want sanitize; then
  SMALL="DecodeCudaSmall.*:Kinds/AppendCuda.*/bf16_d64_k:Styles/FusedCuda.*/interleaved_theta_f32_gqa4_d64:Kinds/ApplyRopeCuda.*/bf16_d256*:Shapes/MergeStatesCuda.*/s3_*"
  step "compute-sanitizer memcheck"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $TESTS --gtest_filter="$SMALL" > "$LOG/memcheck.log" 2>&1
  rc=$?; echo "memcheck rc=$rc"; ((rc)) && status=1; grep -E "ERROR SUMMARY|PASSED|FAILED" "$LOG/memcheck.log" | tail -4
  step "compute-sanitizer racecheck"
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $TESTS --gtest_filter="DecodeCudaSmall.*:Styles/FusedCuda.*/interleaved_theta_f32_gqa4_d64" > "$LOG/racecheck.log" 2>&1
  rc=$?; echo "racecheck rc=$rc"; ((rc)) && status=1; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$LOG/racecheck.log" | tail -4
fi

SWEEP="--batch 1,16,64,256 --kv-len 1024,4096,16384,65536 --dtype bf16,f32"
((quick)) && SWEEP="--batch 1,64 --kv-len 4096,65536 --dtype bf16,f32"
SHAPE="--heads 32 --kv-heads 8 --head-dim 128 --window 0"
if want bench; then
  step "attnkit decode sweep"
  BENCH_CMD="$CLI bench --backend cuda --op decode $SWEEP $SHAPE --json"
  timeout 300 $BENCH_CMD > "$OUT/attnkit.json" 2> "$LOG/bench.err"
  rc=$?; echo "attnkit bench rc=$rc"; ((rc)) && { status=1; tail -5 "$LOG/bench.err"; }
  step "PyTorch SDPA peers"
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/torch_decode.py ${SWEEP//--kv-len/--kv-len} > "$OUT/peers.json" 2> "$LOG/peers.err"
  rc=$?; echo "peers rc=$rc"; ((rc)) && { status=1; tail -5 "$LOG/peers.err"; }
fi

if want ncu; then
  step "ncu DRAM bytes on a few points"
  echo "{" > "$OUT/ncu.json"
  first=1
  for point in "bf16 1 16384" "bf16 16 16384" "bf16 64 4096" "f32 16 16384"; do
    set -- $point
    f="$LOG/ncu_$1_b$2_kv$3.csv"
    timeout 120 ncu --clock-control none --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum \
      -k regex:'split_kv_decode_kernel|merge_splits_kernel' \
      $CLI bench --backend cuda --op decode --batch $2 --kv-len $3 --dtype $1 $SHAPE --reps 1 --warmup 1 --json > "$f" 2> "$f.err"
    bytes=$(python3 - "$f" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ki, mi, ui, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
total, launches = 0.0, 0
for r in body:
    v = float(r[vi].replace(",", "")) * scale.get(r[ui], 1)
    total += v
    if "split_kv_decode" in r[ki] and r[mi] == "dram__bytes_read.sum":
        launches += 1
print(int(total / max(1, launches)))
PY
)
    echo "ncu $point: $bytes DRAM bytes per call"
    ((first)) || echo "," >> "$OUT/ncu.json"
    first=0
    echo "\"$1_b$2_kv$3\": ${bytes:-0}" >> "$OUT/ncu.json"
  done
  echo "}" >> "$OUT/ncu.json"
fi

# ---- prefill (owner: CUDA prefill; opt-in: --prefill, not in the default parts) -------------
# gpu tests of the prefill kernels, compute-sanitizer on small prefill cases, the prefill sweep
# (bench/cuda/prefill_bench.cu as a standalone program, cuBLAS bf16 GEMM ceiling) and the torch
# SDPA flash/cuDNN peers, rendered to $OUT/prefill_<gpu>.{md,png}. Needs --build (or a build) first.
if want prefill; then
  step "prefill: gpu tests, sanitizer, sweep"
  PF="*PrefillShapesCuda*:PrefillCuda.*"
  timeout 200 $TESTS --gtest_filter="$PF" > "$LOG/prefill_tests.log" 2>&1; rc=$?; echo "prefill tests rc=$rc"; ((rc)) && status=1
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $TESTS \
    --gtest_filter="*/ragged_causal_empty_len1_d128_bf16:*/causal_long_keys_split_d128_bf16" > "$LOG/prefill_memcheck.log" 2>&1
  rc=$?; echo "prefill memcheck rc=$rc"; ((rc)) && status=1
  cmake --build $BUILD -j16 --target attnkit_prefill_bench > "$LOG/prefill_bench_build.log" 2>&1 ||
    { status=1; tail -5 "$LOG/prefill_bench_build.log"; }
  PQ=""; ((quick)) && PQ="--quick"
  timeout 200 $BUILD/bench/attnkit_prefill_bench $PQ > "$OUT/prefill_attnkit.jsonl" 2> "$LOG/prefill_bench.err" || status=1
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/torch_prefill.py measure $PQ > "$OUT/prefill_torch.jsonl" 2> "$LOG/prefill_torch.err" || status=1
  python3 bench/peers/torch_prefill.py render "$OUT/prefill_attnkit.jsonl" "$OUT/prefill_torch.jsonl" --out "$OUT/prefill_$TAG" | tail -40
fi
# ---- end prefill ---------------------------------------------------------------------------

if [[ -s "$OUT/attnkit.json" && -s "$OUT/peers.json" ]]; then
  step render
  python3 bench/render.py --ours "$OUT/attnkit.json" --peers "$OUT/peers.json" --ncu "$OUT/ncu.json" --out "$OUT/decode_$TAG"
fi
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
[[ -s "$OUT/decode_$TAG.md" ]] && cat "$OUT/decode_$TAG.md"
exit $status
