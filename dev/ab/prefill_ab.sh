#!/usr/bin/env bash
# Old/new (or more) A/B of prefill_bench in one device call (the prefill counterpart of cli_ab.sh):
# each round runs every binary in turn with the same filters; the table printed last has one line
# per shape with every build's TFLOP/s side by side (dev/ab/pivot.py), each build named by the
# folder that holds it (b/old/prefill_bench: "old").
#   dev/ab/prefill_ab.sh ROUNDS BENCH_A BENCH_B [BENCH_C ...] [--head-dim D] [--min-seq S] [--max-seq S]
# The call's first invocations can read a few percent low (perf-notes, "Hopper prefill round 18"):
# use two or more rounds and compare the later ones.
set -u
rounds=$1
shift
benches=()
while (($#)) && [[ $1 != --* ]]; do benches+=("$1"); shift; done
here=$(dirname "$0")
for ((r = 0; r < rounds; ++r)); do
  for bench in "${benches[@]}"; do
    tag=$(basename "$(dirname "$bench")")
    "$bench" "$@" 2>/dev/null | python3 "$here/prefill_rows.py" "$tag" | grep ' attnkit'
  done
done | python3 "$here/pivot.py"
