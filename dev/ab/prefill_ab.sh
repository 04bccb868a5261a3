#!/usr/bin/env bash
# Old/new A/B of prefill_bench in one device call (the prefill counterpart of cli_ab.sh): each round
# runs the old binary, then the new one, with the same filters; the table printed last has one line
# per shape with both builds' TFLOP/s side by side (dev/ab/pivot.py).
#   dev/ab/prefill_ab.sh ROUNDS OLD_BENCH NEW_BENCH [--head-dim D] [--min-seq S] [--max-seq S]
# The call's first invocations can read a few percent low (perf-notes, "Hopper prefill round 18"):
# use two or more rounds and compare the later ones.
set -u
rounds=$1 old=$2 new=$3
shift 3
here=$(dirname "$0")
for ((r = 0; r < rounds; ++r)); do
  for tag in old new; do
    bench=$old; [ $tag = new ] && bench=$new
    "$bench" "$@" 2>/dev/null | python3 "$here/prefill_rows.py" $tag | grep ' attnkit'
  done
done | python3 "$here/pivot.py"
