#!/usr/bin/env bash
# Short queries against long caches (speculative verification, chunk tails) on the lent H200, in
# one call: attnkit's prefill (the planner's choice: GQA-packed Hopper tiles, key splits) for
# q_len 1 / 4 / 16 x batch 1 / 8 / 32 x 4096 / 32768 keys, llama3-8b heads, non-causal; attnkit's
# split-KV decode on the q_len 1 problems (its read ceiling too); PyTorch SDPA flash and cuDNN on
# the same shapes (bench/peers/torch_short_queries.py). Rendered to $OUT/prefill_short_h200.{md,json};
# the raw documents travel as $OUT/prefill_short_raw.tar.gz.
#   scripts/device-short-queries.sh CLI   (an attnkit CLI built with CUDA, e.g. build/release/attnkit)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/attnkit-out}
CLI=${1:?usage: scripts/device-short-queries.sh CLI}
RAW=$OUT/short
mkdir -p "$RAW"
SHAPE="--heads 32 --kv-heads 8 --head-dim 128 --batch 1,8,32 --kv-len 4096,32768 --dtype bf16"
status=0
for q in 1 4 16; do
  "$CLI" bench --backend cuda --op prefill $SHAPE --q-len $q --no-causal --json > "$RAW/attnkit_q$q.json" ||
    { status=1; echo "attnkit prefill q_len $q failed"; }
done
"$CLI" bench --backend cuda --op decode $SHAPE --json > "$RAW/attnkit_decode.json" || { status=1; echo "decode failed"; }
PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/torch_short_queries.py measure > "$RAW/torch.jsonl" ||
  { status=1; echo "torch peers failed"; }
python3 bench/peers/torch_short_queries.py render "$RAW"/attnkit_q1.json "$RAW"/attnkit_q4.json "$RAW"/attnkit_q16.json \
  "$RAW"/attnkit_decode.json "$RAW/torch.jsonl" --out "$OUT/prefill_short_h200"
tar czf "$OUT/prefill_short_raw.tar.gz" -C "$OUT" short && rm -rf "$RAW"
exit $status
