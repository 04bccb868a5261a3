#!/usr/bin/env bash
# Old/new A/B of `attnkit bench` in one device call: every line of stdin is one bench argument
# list; each round runs every line with the old CLI, then with the new one; the table printed last
# has one line per point with both builds' medians side by side (dev/ab/pivot.py).
#   dev/ab/cli_ab.sh ROUNDS OLD_CLI NEW_CLI < points.txt
# Point lists used so far: dev/ab/points/ (decode_small: start-up bound decode; decode_epilogue_lds:
# every decode engine at short and long points; decode_cluster_merge:
# the plans whose splits merge in clusters, and controls; prefill_causal:
# the Hopper sweep's causal shapes plus controls; e4m3_prefill). dev/ab/prefill_ab.sh does the same
# for prefill_bench.
set -u
rounds=$1 old=$2 new=$3
mapfile -t points
here=$(dirname "$0")
for ((r = 0; r < rounds; ++r)); do
  for tag in old new; do
    cli=$old; [ $tag = new ] && cli=$new
    for args in "${points[@]}"; do
      # shellcheck disable=SC2086
      "$cli" bench --backend cuda $args --json 2>/dev/null | python3 "$here/bench_rows.py" $tag | grep attnkit
    done
  done
done | python3 "$here/pivot.py"
