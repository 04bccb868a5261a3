#!/usr/bin/env bash
# Old/new A/B of attnkit_paged_bench in one device call: ROUNDS rounds of old then new, each with
# the same arguments (after the builds); prints per point the paged and contiguous medians of every
# run, so both kernels' drift between runs is visible beside the difference.
#   dev/ab/paged_ab.sh ROUNDS OLD_BENCH NEW_BENCH [bench args...]
set -u
rounds=$1 old=$2 new=$3
shift 3
tmp=$(mktemp -d)
for ((r = 0; r < rounds; ++r)); do
  "$old" --no-mixed "$@" > "$tmp/old$r.json" 2>/dev/null
  "$new" --no-mixed "$@" > "$tmp/new$r.json" 2>/dev/null
done
python3 - "$tmp" "$rounds" <<'PY'
import json, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
runs = {}
for tag in ("old", "new"):
    for r in range(rounds):
        for row in json.load(open(f"{tmp}/{tag}{r}.json"))["rows"]:
            if row.get("case") != "sweep" or "paged" not in row:
                continue
            key = (row["dtype"], row["batch"], row["kv_len"])
            runs.setdefault(key, {}).setdefault(tag, []).append((row["paged"]["median_s"] * 1e6, row["contiguous"]["median_s"] * 1e6))
print("point                      paged us (old | new)                 contiguous us (old | new)")
for key, v in runs.items():
    fmt = lambda xs, i: " ".join("%8.1f" % x[i] for x in xs)
    print("%-5s b%-4d kv%-6d %s | %s    %s | %s" % (*key, fmt(v.get("old", []), 0), fmt(v.get("new", []), 0),
                                              fmt(v.get("old", []), 1), fmt(v.get("new", []), 1)))
PY
