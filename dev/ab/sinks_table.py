"""Tabulates dev/ab/sinks_ab.sh's JSON files (DIR/{decode,prefill,prefillnc}_{old,new,sinks}_ROUND.json):
per point, each variant's median time per round (us), and new / old and sinks / new from the
medians of the rounds."""
import glob
import json
import re
import statistics
import sys
from collections import defaultdict

times = defaultdict(list)  # (op, point, variant) -> [us per round]
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    op, variant, _ = re.match(r".*/(\w+?)_(old|new|sinks)_(\d+)\.json", path).groups()
    for r in json.load(open(path))["rows"]:
        if r.get("impl") != "attnkit" or r.get("skipped") or r.get("timing") != "events":
            continue
        point = f"b{r['batch']} x {r['kv_len']}" + (f" d{r['head_dim']}" if op != "decode" else "")
        times[(op, point, variant)].append(r["median_s"] * 1e6)
print("| op | point | old us | new us | new + sinks us | new / old | sinks / new |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for (op, point) in sorted({(o, p) for o, p, _ in times}, key=lambda x: (x[0], x[1])):
    old, new, sinks = (times.get((op, point, v), []) for v in ("old", "new", "sinks"))
    fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
    m = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"| {op} | {point} | {fmt(old)} | {fmt(new)} | {fmt(sinks)} | {m(new) / m(old):.3f} | {m(sinks) / m(new):.3f} |")
