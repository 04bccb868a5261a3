#!/usr/bin/env bash
# Where the CUDA decode time goes, on the lent H200 (issue 3): ncu per-kernel durations (decode and
# merge kernels, so the launch gaps are the bench time minus their sum) at the batch-1 points, and
# the warp-stall / memory sections of the decode kernel at a few large points.
#   scripts/device-profile-decode.sh [CLI] [parts]   (CLI: an attnkit binary built with CUDA; default
#   build/device/attnkit; parts: any of durations,sections,peers, default all)
# "peers" profiles the decode kernel and PyTorch's cuDNN decode (dev/profile_decode_peers.py, needs
# torch) with the same sections and DRAM metrics at large points, side by side.
# Text reports go under $OUT/profile/; a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
LOG=$OUT/profile
mkdir -p "$LOG"
CLI=${1:-build/device/attnkit}
PARTS=${2:-durations,sections,peers}
part() { [[ ,$PARTS, == *,$1,* ]]; }
SHAPE="--heads 32 --kv-heads 8 --head-dim 128 --window 0"
KERNELS='regex:split_kv_decode_kernel|merge_splits_kernel'

if part durations; then
echo "== kernel durations (ncu gpu__time_duration, 3 launches per point)"
printf '%-6s %5s %7s %-28s %10s\n' dtype batch kv_len kernel "us (median)"
for point in "bf16 1 1024" "bf16 1 4096" "bf16 1 16384" "bf16 1 65536" "bf16 16 1024" "bf16 256 1024" "f32 1 1024"; do
  set -- $point
  f=$LOG/time_$1_b$2_kv$3.csv
  timeout 120 ncu --clock-control none --csv --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread \
    -k "$KERNELS" --launch-skip 2 --launch-count 6 \
    $CLI bench --backend cuda --op decode --batch $2 --kv-len $3 --dtype $1 $SHAPE --reps 3 --warmup 2 --json > "$f" 2> "$f.err"
  python3 - "$f" "$1" "$2" "$3" <<'PY'
import csv, sys, statistics, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows: print("no ncu rows for", sys.argv[2:]); sys.exit()
head, body = rows[0], rows[1:]
ki, mi, vi, ui = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("Metric Unit")
by = collections.defaultdict(list); extra = {}
for r in body:
    name = r[ki].split("(")[0].split("<")[0]
    v = float(r[vi].replace(",", ""))
    if r[mi] == "gpu__time_duration.sum":
        by[name].append(v / 1000 if r[ui] == "nsecond" else v if r[ui] == "usecond" else v * 1000)
    else:
        extra[(name, r[mi])] = r[vi]
for name, v in by.items():
    grid = extra.get((name, "launch__grid_size"), "?"); regs = extra.get((name, "launch__registers_per_thread"), "?")
    print(f"{sys.argv[2]:6s} {sys.argv[3]:>5s} {sys.argv[4]:>7s} {name[:28]:28s} {statistics.median(v):10.2f}  grid {grid} regs {regs}")
PY
done

fi

if part sections; then
echo "== decode kernel sections at large points (one launch each)"
for point in "bf16 64 16384" "bf16 1 65536" "bf16 256 1024" "f32 64 16384"; do
  set -- $point
  f=$LOG/sections_$1_b$2_kv$3.txt
  timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy -k regex:split_kv_decode_kernel --launch-skip 2 --launch-count 1 \
    $CLI bench --backend cuda --op decode --batch $2 --kv-len $3 --dtype $1 $SHAPE --reps 1 --warmup 2 > "$f" 2>&1
  echo "-- $point"
  grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|Stall|Active Warps Per Scheduler" "$f" | head -14
done
fi

if part peers; then
echo "== attnkit's decode kernel and cuDNN's at the same large points (one call each, DRAM metrics)"
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
for point in "64 16384" "16 65536"; do
  set -- $point
  f=$LOG/peers_b$1_kv$2_attnkit.txt
  timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics $METRICS \
    -k regex:split_kv_decode_kernel --launch-skip 2 --launch-count 1 \
    $CLI bench --backend cuda --op decode --batch $1 --kv-len $2 --dtype bf16 $SHAPE --reps 1 --warmup 2 > "$f" 2>&1
  g=$LOG/peers_b$1_kv$2_cudnn.txt
  timeout 150 ncu --clock-control none --nvtx --nvtx-include "peer/" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --metrics $METRICS python3 dev/profile_decode_peers.py --backend cudnn --batch $1 --kv-len $2 > "$g" 2>&1
  for x in "$f" "$g"; do
    echo "-- bf16 b$1 x $2: $(basename "$x" .txt)"
    grep -E "^  [a-zA-Z_].*\(|gpu__time_duration|dram__|lts__t_sector_hit|launch__|sm__warps_active|DRAM Throughput|L2 Hit|Mem Busy|Max Bandwidth" "$x" | head -30
  done
done
fi
