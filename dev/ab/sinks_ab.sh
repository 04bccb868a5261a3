# Old (before attention sinks) and new CLI, and the new one with --sinks, alternating twice: decode and
# prefill points as JSON into $OUT (docs/perf-notes.md, "Attention sinks folded into the kernels").
# Needs build/ab/attnkit_old and build/ab/attnkit_new (or build/ab/clis.tar.xz holding both).
[ -f build/ab/clis.tar.xz ] && tar -xJf build/ab/clis.tar.xz -C build/ab
export LD_LIBRARY_PATH=$PWD/.deps/devprefix/lib
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
D="bench --backend cuda --op decode --batch 1,16,64 --kv-len 1024,4096,65536 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --json"
P="bench --backend cuda --op prefill --batch 1 --kv-len 2048,16384 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16 --json"
for round in 1 2 3; do
  for v in old new sinks; do
    cli=build/ab/attnkit_$v; extra=""
    [ $v = sinks ] && cli=build/ab/attnkit_new && extra=--sinks
    $cli $D $extra > $OUT/decode_${v}_$round.json 2>/dev/null || echo "decode $v failed"
    $cli $P $extra > $OUT/prefill_${v}_$round.json 2>/dev/null || echo "prefill $v failed"
    $cli $P --no-causal $extra > $OUT/prefillnc_${v}_$round.json 2>/dev/null || echo "prefill nc $v failed"
  done
done
python3 dev/ab/sinks_table.py $OUT
