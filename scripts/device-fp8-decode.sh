#!/usr/bin/env bash
# The device run of e4m3 (fp8) KV-cache decode, in one call: build (-j16), the gpu tests of decode
# and append (e4m3 cases, contiguous and paged, and the 16-bit ones beside them), compute-sanitizer memcheck and racecheck
# on small e4m3 cases, and the decode sweep with bf16 and e4m3 caches side by side (same protocol,
# same run, read ceiling measured in it), written to $OUT/fp8_decode_<gpu>.json and .md, then the
# paged bench over e4m3 and bf16 pools ($OUT/paged_{e4m3,bf16}_<gpu>.json, a table on stdout).
#   scripts/device-fp8-decode.sh [--prebuilt DIR] [--no-tests] [--quick] [--lean]
# (--quick: the sweep at batch 1 / 16 x 16k / 64k only, for a call with little device time left;
#  --lean: only the e4m3 decode gpu tests, no sanitizers, no paged bench, for a plan-rule change.)
# Build dependencies the device image lacks come from the carried .deps/devprefix.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
mkdir -p "$OUT/logs"
LOG=$OUT/logs
BUILD=build/device
tests=1
lean=0
points="--batch 1,16,64 --kv-len 4096,16384,65536"
while (($#)); do
  case $1 in
    --prebuilt) BUILD=$2; shift ;;
    --no-tests) tests=0 ;;
    --quick) points="--batch 1,16 --kv-len 16384,65536" ;;
    --lean) lean=1 ;;
  esac
  shift
done
export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib:${LD_LIBRARY_PATH:-}
status=0
step() { echo "== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
TAG=$(head -1 "$LOG/gpu.txt" | grep -o -i -E '[a-z][0-9]{2,3}' | head -1 | tr 'A-Z' 'a-z')
TAG=${TAG:-gpu}

if [[ ! -x $BUILD/attnkit ]]; then
  step build
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.deps/devprefix" > "$LOG/configure.log" 2>&1 || { tail -30 "$LOG/configure.log"; exit 1; }
  targets="attnkit_cuda_tests attnkit_cli"
  ((lean)) || targets+=" attnkit_paged_bench"
  cmake --build "$BUILD" -j16 --target $targets > "$LOG/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/build.log" | head -40; exit 1; }
fi
TESTS=$BUILD/tests/attnkit_cuda_tests

FILTER='*DecodeCuda*:*AppendCuda*:*AppendFp8Cuda*:PagedFp8*:*ExtendCuda*'
((lean)) && FILTER='Shapes/DecodeCuda.*e4m3*:DecodeCudaSmall.Fp8*:PagedFp8DecodeCuda.*'
if ((tests)); then
  step "gpu tests: $FILTER"
  timeout 200 "$TESTS" --gtest_filter="$FILTER" > "$LOG/gpu_tests.log" 2>&1
  rc=$?; echo "gpu tests rc=$rc"; ((rc)) && status=1
  grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$LOG/gpu_tests.log" | sort | uniq -c | head -20
  grep -E "Failure|rel_l2|which is|Expected" "$LOG/gpu_tests.log" | head -30
fi
if ((tests && !lean)); then
  SMALL='DecodeCudaSmall.Fp8SanitizerCase:RowDtypes/AppendFp8Cuda.*/bf16:Shapes/DecodeCuda.*/e4m3_d64_mha_len1:PagedFp8DecodeCuda.SanitizerCase'
  step "compute-sanitizer memcheck ($SMALL)"
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" --gtest_filter="$SMALL" > "$LOG/memcheck.log" 2>&1
  rc=$?; echo "memcheck rc=$rc: $(grep 'ERROR SUMMARY' "$LOG/memcheck.log" | tail -1)"; ((rc)) && status=1
  RACE='DecodeCudaSmall.Fp8SanitizerCase:Shapes/DecodeCuda.*/e4m3_d64_mha_len1:PagedFp8DecodeCuda.SanitizerCase'
  step "compute-sanitizer racecheck ($RACE)"
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 "$TESTS" --gtest_filter="$RACE" > "$LOG/racecheck.log" 2>&1
  rc=$?; echo "racecheck rc=$rc: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG/racecheck.log" | tail -1)"; ((rc)) && status=1
fi

step "attnkit check --backend cuda --op paged (f32 / f16 / bf16 / e4m3 pools, paged append)"
timeout 120 "$BUILD/attnkit" check --backend cuda --op paged > "$LOG/check_paged.log" 2>&1
rc=$?; echo "check rc=$rc"; ((rc)) && status=1
grep -E "passed|FAIL|SKIPPED" "$LOG/check_paged.log" | tail -5

step "decode sweep: bf16 and e4m3 caches"
BENCH_CMD="$BUILD/attnkit bench --backend cuda --op decode $points --dtype bf16,e4m3 --heads 32 --kv-heads 8 --head-dim 128 --window 0 --json"
timeout 300 $BENCH_CMD > "$OUT/fp8_decode_$TAG.json" 2> "$LOG/bench.err"
rc=$?; echo "bench rc=$rc"; ((rc)) && { status=1; tail -5 "$LOG/bench.err"; }
python3 - "$OUT/fp8_decode_$TAG.json" "$BENCH_CMD" > "$OUT/fp8_decode_$TAG.md" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = [r for r in doc["rows"] if r.get("impl") == "attnkit" and not r.get("skipped")]
ceiling = max((r["ceiling_value"] for r in doc["rows"] if r.get("impl") == "read-ceiling"), default=0)
print(f"# e4m3 and bf16 KV-cache decode ({doc.get('device', '?')}, commit {doc.get('commit', '?')})\n")
print(f"Command: `{sys.argv[2]}`; read ceiling in the run: {ceiling / 1e12:.3f} TB/s\n")
print("| batch | kv_len | timing | bf16 us | e4m3 us | bf16 / e4m3 | e4m3 TB/s (plan bytes) | e4m3 % of ceiling | e4m3 splits |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
by = {}
for r in rows:
    by.setdefault((r["batch"], r["kv_len"], r.get("timing", "events")), {})[r["dtype"]] = r
for k in sorted(by):
    pair = by[k]
    if "bf16" not in pair or "e4m3" not in pair:
        continue
    b, e = pair["bf16"]["median_s"] * 1e6, pair["e4m3"]["median_s"] * 1e6
    rate = pair["e4m3"]["achieved_bytes_per_s"]
    pct = f"{100 * rate / ceiling:.0f}%" if ceiling else "?"
    splits = pair["e4m3"].get("plan", {}).get("partition", {}).get("sequence_splits", "?")
    print(f"| {k[0]} | {k[1]} | {k[2]} | {b:.1f} | {e:.1f} | {b / e:.2f}x | {rate / 1e12:.2f} | {pct} | {splits} |")
PY
cat "$OUT/fp8_decode_$TAG.md"

((lean)) && exit $status
step "paged sweep: e4m3 pools against the contiguous e4m3 cache, bf16 pools beside"
for dt in e4m3 bf16; do
  timeout 200 "$BUILD/bench/attnkit_paged_bench" --dtype $dt --batch 1,16,64 --kv-len 4096,16384,65536 --no-mixed \
    > "$OUT/paged_${dt}_$TAG.json" 2> "$LOG/paged_bench_$dt.err"
  rc=$?; echo "paged bench $dt rc=$rc"; ((rc)) && { status=1; tail -5 "$LOG/paged_bench_$dt.err"; }
done
python3 - "$OUT/paged_e4m3_$TAG.json" "$OUT/paged_bf16_$TAG.json" <<'PY'
import json, sys
def rows(path):
    try:
        doc = json.load(open(path))
    except Exception as e:
        print(f"{path}: {e}"); return {}
    out = {}
    for r in doc.get("rows", doc.get("points", [])):
        if "paged" in r:
            out[(r["batch"], r["kv_len"])] = r
    return out
e8, b16 = rows(sys.argv[1]), rows(sys.argv[2])
print("| batch | kv_len | e4m3 paged us | e4m3 contiguous us | paged / contig | bf16 paged us | bf16 / e4m3 paged |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for k in sorted(e8):
    r = e8[k]; p = r["paged"]["median_s"] * 1e6
    c = r.get("contiguous", {}).get("median_s", 0) * 1e6
    b = b16.get(k, {}).get("paged", {}).get("median_s", 0) * 1e6
    print(f"| {k[0]} | {k[1]} | {p:.1f} | {c:.1f} | {c / p if p else 0:.2f} | {b:.1f} | {b / p if p else 0:.2f}x |")
PY
exit $status
