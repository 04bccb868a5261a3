#!/usr/bin/env python3
"""Lines of prefill_rows.py (or bench_rows.py) output from alternating A/B runs (stdin) -> one line
per point with every tag's values side by side, in the order the tags first appear, then each
tag's median and its ratio to the first tag's median (the figures an A/B decides on):
  ... | python3 dev/ab/pivot.py
The point is every field but the tag and the value (prefill_rows: TFLOP/s; bench_rows: us)."""
import collections, statistics, sys

tags, rows = [], collections.OrderedDict()
for line in sys.stdin:
    f = line.split()
    if len(f) < 3: continue
    tag = f[0]
    # prefill_rows.py: tag impl dtype d causal seq tflops "gemm" N
    if len(f) >= 9 and f[-2] == "gemm":
        key, value = " ".join(f[1:6]), f[6]
    elif f[-1] == "us":  # bench_rows.py: tag impl dtype batch kv timing value "us"
        key, value = " ".join(f[1:-2]), f[-2]
    else:
        key, value = " ".join(f[1:-1]), f[-1]
    if tag not in tags: tags.append(tag)
    rows.setdefault(key, collections.defaultdict(list))[tag].append(value)
print(f"{'point':40} " + " | ".join(f"{t:>15}" for t in tags))
for key, per in rows.items():
    print(f"{key:40} " + " | ".join(f"{'/'.join(per[t]):>15}" for t in tags))
print()
print(f"{'median (ratio to ' + tags[0] + ')' if tags else 'median':40} " + " | ".join(f"{t:>15}" for t in tags))
for key, per in rows.items():
    med = {t: statistics.median(float(v) for v in per[t]) for t in tags if per[t]}
    base = med.get(tags[0])
    cells = [f"{med[t]:.1f} ({med[t] / base:.3f})" if t in med and base else "-" for t in tags]
    print(f"{key:40} " + " | ".join(f"{c:>15}" for c in cells))
