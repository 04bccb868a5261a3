#!/usr/bin/env bash
# The CPU benchmark in one command: builds attnkit if needed, then measures, in each of several
# rounds: the read and FMA ceilings, attnkit's decode (KV caches larger than the last-level cache;
# contiguous, and paged for the GQA shape)
# and prefill (seq_len 1k-4k, head_dim 128, causal and not; bf16, f16 and f32), and PyTorch's CPU
# SDPA on the same prefill shapes and dtypes with the same thread count, recording the load average before each step (the
# host is shared). Writes bench/results/cpu-<date>-<time>[-<tag>].json and .md and prints the table.
#   bench/cpu_sweep.sh [threads (default: all cores)] [--quick]
# Environment: ATTNKIT_CPU_ISA (scalar|avx2|avx512|avx512bf16|amx; default the best this CPU has),
#   ATTNKIT_SWEEP_ROUNDS (default 2), ATTNKIT_SWEEP_TAG (suffix of the result files),
#   ATTNKIT_SWEEP_PEER=0 (skip PyTorch), ATTNKIT_BENCH_BUILD (a Release build folder),
#   ATTNKIT_SWEEP_PREFILL_DTYPES (default bf16,f16,f32).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
quick=${2:-}
rounds=${ATTNKIT_SWEEP_ROUNDS:-2}
build=${ATTNKIT_BENCH_BUILD:-build/cpu-bench}  # any Release build folder of attnkit
if [[ ! -x $build/attnkit ]]; then
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNKIT_CUDA=OFF -DATTNKIT_TESTS=OFF >/dev/null
fi
cmake --build $build -j2 --target attnkit_cli >/dev/null
peer=${ATTNKIT_SWEEP_PEER:-1}
[[ $peer == 1 ]] && scripts/setup-bench.sh  # PyTorch (CPU build) for the peer, only if it is missing

# Prefill medians of 5 (3 let one or two repetitions disturbed by the OS decide a point; perf-notes,
# CPU round 18).
seqs=1024,2048,4096; reps=5; dreps=10; kv=65536
# Prefill in every storage dtype (on the tile units where the CPU has them, as 1, 2 or 3 bf16 parts;
# else bf16 on the dot-product unit or FMAs, f16 and f32 on FMAs), each against PyTorch in the same
# dtype.
pdtypes=${ATTNKIT_SWEEP_PREFILL_DTYPES:-bf16,f16,f32}
if [[ $quick == --quick ]]; then seqs=1024; reps=2; dreps=3; kv=16384; fi
out=bench/results/cpu-$(date +%Y%m%d-%H%M)${ATTNKIT_SWEEP_TAG:+-$ATTNKIT_SWEEP_TAG}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ak() { $build/attnkit bench --backend cpu --threads "$threads" --json "$@"; }
load() { echo "$1 $(cut -d' ' -f1-3 /proc/loadavg)" >>"$2/load.txt"; }
round_dirs=()
for ((r = 1; r <= rounds; ++r)); do
  d=$tmp/round$r
  mkdir -p "$d"
  round_dirs+=("$d")
  # Decode: llama3-8b (32 heads, 8 KV heads: group 4) and multi-head (group 1), bf16, f16 and f32 caches,
  # on huge pages (the bench's default; the read ceiling is the best of both page sizes).
  load decode-gqa "$d"
  ak --op decode --batch 1,4 --kv-len $kv --dtype bf16,f16,f32 --reps $dreps --warmup 2 >"$d/decode-gqa.json"
  load decode-mha "$d"
  ak --op decode --batch 1,4 --kv-len $kv --dtype bf16,f16,f32 --heads 8 --kv-heads 8 --reps $dreps --warmup 2 >"$d/decode-mha.json"
  # The llama3-8b decode again on a paged cache (pages of 16 keys, HND, dealt in a random order).
  load decode-paged "$d"
  ak --op paged-decode --batch 1,4 --kv-len $kv --dtype bf16,f16,f32 --reps $dreps --warmup 2 >"$d/decode-paged.json"
  # Prefill: causal and not, then the peer on the same shapes. Inputs on the allocator's pages, as
  # PyTorch's are (its switch for huge pages covers its temporaries too, which would slow it).
  load prefill-causal "$d"
  ak --op prefill --kv-len $seqs --dtype $pdtypes --pages 4k --reps $reps --warmup 1 >"$d/prefill-causal.json"
  load prefill-full "$d"
  ak --op prefill --kv-len $seqs --dtype $pdtypes --no-causal --pages 4k --reps $reps --warmup 1 >"$d/prefill-full.json"
  load torch "$d"
  if [[ $peer == 1 ]]; then
    for dt in ${pdtypes//,/ }; do
      python3 bench/peers/torch_cpu_prefill.py measure --threads "$threads" --seq $seqs --dtype $dt --reps $reps
    done >"$d/torch.jsonl"
  else
    : >"$d/torch.jsonl"
  fi
  load end "$d"
done
python3 bench/peers/torch_cpu_prefill.py render --rounds "${round_dirs[@]}" --out "$out" \
  --isa "${ATTNKIT_CPU_ISA:-default}" --command "${ATTNKIT_CPU_ISA:+ATTNKIT_CPU_ISA=$ATTNKIT_CPU_ISA }${ATTNKIT_SWEEP_ROUNDS:+ATTNKIT_SWEEP_ROUNDS=$ATTNKIT_SWEEP_ROUNDS }bench/cpu_sweep.sh $threads $quick"
