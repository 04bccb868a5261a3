#!/usr/bin/env bash
# A/B of one `attnkit bench` build under several environments in one device call (a planner
# experiment read from environment variables, say): every line of stdin is one bench argument
# list; each round runs every line under each variant in turn; the table printed last has one line
# per point with every variant's medians side by side (dev/ab/pivot.py). A variant is a tag and
# its assignments, "tag:VAR=1,VAR2=2"; "base:" sets nothing.
#   dev/ab/env_ab.sh ROUNDS CLI base: kw2:ATTNKIT_EXP_KW=2 ... < points.txt
set -u
rounds=$1 cli=$2
shift 2
variants=("$@")
mapfile -t points
here=$(dirname "$0")
for ((r = 0; r < rounds; ++r)); do
  for v in "${variants[@]}"; do
    tag=${v%%:*} assignments=${v#*:}
    for args in "${points[@]}"; do
      # shellcheck disable=SC2086
      env ${assignments//,/ } "$cli" bench --backend cuda $args --json 2>/dev/null | python3 "$here/bench_rows.py" "$tag" | grep attnkit
    done
  done
done | python3 "$here/pivot.py"
