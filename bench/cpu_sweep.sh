#!/usr/bin/env bash
# The CPU benchmark in one command: builds attnkit if needed, then in one run measures the read
# and FMA ceilings, attnkit's decode (KV caches larger than the last-level cache) and prefill
# (seq_len 1k-4k, head_dim 128, causal and not), and PyTorch's CPU SDPA on the same prefill shapes
# with the same thread count; writes bench/results/cpu-<date>.json and .md and prints the table.
#   bench/cpu_sweep.sh [threads (default: all cores)] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
quick=${2:-}
build=${ATTNKIT_BENCH_BUILD:-build/cpu-bench}  # any Release build folder of attnkit
if [[ ! -x $build/attnkit ]]; then
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=OFF -DATTNKIT_TESTS=OFF >/dev/null
fi
cmake --build $build -j2 --target attnkit_cli >/dev/null
scripts/setup-bench.sh  # PyTorch (CPU build) for the peer, only if it is missing

seqs=1024,2048,4096; reps=3; dreps=10; kv=65536
if [[ $quick == --quick ]]; then seqs=1024; reps=2; dreps=3; kv=16384; fi
out=bench/results/cpu-$(date +%Y%m%d)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ak() { $build/attnkit bench --backend cpu --threads "$threads" --json "$@"; }
# Decode: llama3-8b (32 heads, 8 KV heads: group 4) and multi-head (group 1), bf16 and f32 caches.
ak --op decode --batch 1,4 --kv-len $kv --dtype bf16,f32 --reps $dreps --warmup 2 >"$tmp/decode-gqa.json"
ak --op decode --batch 1,4 --kv-len $kv --dtype bf16,f32 --heads 8 --kv-heads 8 --reps $dreps --warmup 2 >"$tmp/decode-mha.json"
# Prefill: causal and not.
ak --op prefill --kv-len $seqs --dtype bf16 --reps $reps --warmup 1 >"$tmp/prefill-causal.json"
ak --op prefill --kv-len $seqs --dtype bf16 --no-causal --reps $reps --warmup 1 >"$tmp/prefill-full.json"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a, b = (json.load(open(f"{d}/prefill-{n}.json")) for n in ("causal", "full"))
a["rows"] += b["rows"]
json.dump(a, open(f"{d}/prefill.json", "w"))
PY
python3 bench/peers/torch_cpu_prefill.py measure --threads "$threads" --seq $seqs --reps $reps >"$tmp/torch.jsonl"
python3 bench/peers/torch_cpu_prefill.py render --prefill "$tmp/prefill.json" \
  --decode "$tmp/decode-gqa.json" "$tmp/decode-mha.json" --torch "$tmp/torch.jsonl" --out "$out" \
  --command "bench/cpu_sweep.sh $threads $quick"
