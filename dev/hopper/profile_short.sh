#!/usr/bin/env bash
# Development probe (issue 8): ncu source counters of the Hopper prefill kernel at short sequences.
#   dev/hopper/profile_short.sh CLI   (on the device; writes $OUT/<name>.csv source exports)
set -u
CLI=$1
OUT=${OUT:-/tmp/attnkit-out}; mkdir -p "$OUT"
prof() {  # name, then CLI bench arguments
  local name=$1; shift
  timeout 150 ncu --clock-control none -k regex:hopper_prefill_kernel -c 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight -o /tmp/$name "$CLI" bench --backend cuda --op prefill --reps 1 --warmup 1 "$@" > /tmp/$name.log 2>&1
  ncu -i /tmp/$name.ncu-rep --page source --csv --print-source sass > "$OUT/$name.csv" 2>/dev/null
  ncu -i /tmp/$name.ncu-rep --page details 2>/dev/null | grep -E "Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Issued Warp" | head -6 | sed "s/^/$name /"
}
prof d128_nc512 --dtype bf16 --head-dim 128 --heads 16 --kv-heads 16 --batch 32 --kv-len 512 --no-causal
prof d128_c512 --dtype bf16 --head-dim 128 --heads 16 --kv-heads 16 --batch 32 --kv-len 512
prof d256_c512 --dtype bf16 --head-dim 256 --heads 8 --kv-heads 8 --batch 32 --kv-len 512
prof d64_c2k --dtype bf16 --head-dim 64 --heads 32 --kv-heads 32 --batch 8 --kv-len 2048
cd "$OUT" && tar cJf sass.tar.xz *.csv && rm -f *.csv
