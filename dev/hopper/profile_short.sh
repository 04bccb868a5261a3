#!/usr/bin/env bash
# Development probe (issue 8): ncu source counters of the Hopper prefill kernel at short sequences,
# and the same shapes' cuDNN kernels (PyTorch SDPA) for their duration and DRAM traffic.
#   dev/hopper/profile_short.sh CLI [name ...]   (on the device; default: every shape below;
#   writes $OUT/<name>.csv source exports, tarred, and prints duration / throughput / DRAM lines)
set -u
CLI=$1; shift
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
declare -A SHAPES=(
  [d128_nc512]="--head-dim 128 --heads 16 --batch 32 --kv-len 512 --no-causal"
  [d128_c512]="--head-dim 128 --heads 16 --batch 32 --kv-len 512"
  [d256_c512]="--head-dim 256 --heads 8 --batch 32 --kv-len 512"
  [d256_nc512]="--head-dim 256 --heads 8 --batch 32 --kv-len 512 --no-causal"
  [d64_c2k]="--head-dim 64 --heads 32 --batch 8 --kv-len 2048"
)
NAMES=("$@"); [ ${#NAMES[@]} -eq 0 ] && NAMES=(d128_nc512 d128_c512 d256_c512 d64_c2k)
METRICS="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
for name in "${NAMES[@]}"; do
  read -r -a args <<< "${SHAPES[$name]}"
  args+=(--kv-heads "$(echo "${SHAPES[$name]}" | sed -E 's/.*--heads ([0-9]+).*/\1/')")
  timeout 150 ncu --clock-control none -k regex:hopper_prefill_kernel -c 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --metrics "$METRICS" -o /tmp/$name \
    "$CLI" bench --backend cuda --op prefill --reps 1 --warmup 1 --dtype bf16 "${args[@]}" > /tmp/$name.log 2>&1
  ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass > "$OUT/$name.csv" 2>/dev/null
  ncu -i /tmp/$name.ncu-rep --page details 2>/dev/null |
    grep -E "Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issued Warp|dram__bytes|hmma_cycles" | sed "s/^/$name /"
  # The same shape through PyTorch's cuDNN backend: every kernel of one call after a warm-up.
  if [ -n "${PEERS:-}" ]; then
    cat > /tmp/sdpa_peer.py <<'PY'
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
a = sys.argv[1].split(); get = lambda k: int(a[a.index(k) + 1])
b, h, d, s = get("--batch"), get("--heads"), get("--head-dim"), get("--kv-len")
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3): torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal="--no-causal" not in a)
torch.cuda.synchronize()
PY
    timeout 150 ncu --clock-control none --launch-skip 3 -c 4 --metrics "$METRICS" \
      python3 /tmp/sdpa_peer.py "${SHAPES[$name]}" > /tmp/${name}_peer.log 2>&1
    grep -E "^  [a-zA-Z_].*\(|gpu__time|dram__bytes|hmma" /tmp/${name}_peer.log | sed "s/^/$name peer /" | head -12
  fi
done
cd "$OUT" && tar cJf sass.tar.xz *.csv && rm -f *.csv
