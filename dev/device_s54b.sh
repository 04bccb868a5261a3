#!/usr/bin/env bash
# Session 54's profile of the Hopper extend's gap to contiguous prefill (docs/perf-notes.md,
# "Extend on the Hopper prefill kernel"): ncu's full set on one launch of each, b1 x prefix 16384
# x chunk 2048 (32 / 8 heads, d128, bf16, pages of $PAGE, default 16), the same work. Reports
# (.ncu-rep) and their details pages (text, with the SASS source page's stall columns) under $OUT.
# Needs build/device from dev/device_s54a.sh (a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
B=build/device
PAGE=${PAGE:-16}
[[ -x $B/bench/attnkit_extend_bench ]] || cmake --build $B -j16 --target attnkit_extend_bench > "$OUT/build.log" 2>&1
for which in paged contiguous; do
  last=$([[ $which == paged ]] && echo true || echo false)
  timeout 200 ncu --kernel-name-base demangled -k "regex:hopper_prefill_kernel<.*, $last>" --launch-skip 3 --launch-count 1 \
    --set full --import-source no -f -o "$OUT/ncu_$which" \
    $B/bench/attnkit_extend_bench --reps 3 --no-decode --page $PAGE --point 1,16384,2048 > /dev/null 2> "$OUT/ncu_${which}_bench.txt"
  echo "ncu $which rc=$?"
  ncu -i "$OUT/ncu_$which.ncu-rep" --page details > "$OUT/ncu_${which}_details.txt" 2>&1
  ncu -i "$OUT/ncu_$which.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${which}_sass.csv" 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Registers Per" \
    "$OUT/ncu_${which}_details.txt" | head -12
done
