#!/usr/bin/env bash
# Development probe (issue 3): which kernels cuDNN's decode launches at small points (grid, block,
# registers, time, DRAM bytes under ncu's cache flush), beside ours.
#   dev/decode/peer_structure.sh CLI   (an attnkit CLI built with CUDA; needs ncu and torch)
set -u
CLI=$1
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT/peer"
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,dram__bytes_read.sum,launch__shared_mem_per_block_dynamic
summ() {
python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows: print("  no rows"); sys.exit()
h = rows[0]; ki, ii, mi, vi = h.index("Kernel Name"), h.index("ID"), h.index("Metric Name"), h.index("Metric Value")
k = collections.OrderedDict()
for r in rows[1:]:
    k.setdefault((r[ii], r[ki][:70]), {})[r[mi].split("__")[1]] = r[vi]
for (i, n), m in k.items():
    print(f"  {i:>3} {n:70s} " + " ".join(f"{a}={b}" for a, b in sorted(m.items())))
PY
}
for pt in "1 1024" "1 4096" "1 16384" "16 1024" "64 1024"; do
  set -- $pt
  echo "== cuDNN b$1 x $2"
  f=$OUT/peer/cudnn_b$1_kv$2.csv
  timeout 120 ncu --clock-control none --nvtx --nvtx-include "peer/" --csv --metrics $M \
    python3 dev/profile_decode_peers.py --backend cudnn --batch $1 --kv-len $2 > "$f" 2>&1
  summ "$f"
  echo "== attnkit b$1 x $2"
  f=$OUT/peer/ours_b$1_kv$2.csv
  timeout 120 ncu --clock-control none --csv --metrics $M -k "regex:split_kv_decode_kernel|merge_splits_kernel" --launch-skip 4 --launch-count 4 \
    "$CLI" bench --backend cuda --op decode --batch $1 --kv-len $2 --dtype bf16 --heads 32 --kv-heads 8 \
    --head-dim 128 --reps 3 --warmup 2 > "$f" 2>&1
  summ "$f"
done
