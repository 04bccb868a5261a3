#!/usr/bin/env python3
"""Warp-stall samples per SASS instruction from an ncu source-page export, for finding where a
kernel's warps spend their time (docs/perf-notes.md, "Hopper prefill round 10"). On the device:
  ncu --clock-control none -k regex:hopper_prefill_kernel -c 1 --section SourceCounters \\
      --section WarpStateStats -o rep prefill_bench --head-dim 128 --min-seq 512 --max-seq 512 --quick
  ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
Here:
  dev/hopper/ncu_source_samples.py sass.csv                  # stall reasons, hottest instructions
  dev/hopper/ncu_source_samples.py sass.csv --dump           # index, samples, executions, SASS
  dev/hopper/ncu_source_samples.py sass.csv --regions 0:137:prologue 137:577:setup ...
Regions are instruction-index ranges [a, b) read off --dump (landmarks: the first HGMMA of a
loop, SYNCS.PHASECHK waits, STSM, EXIT); each prints its share of the samples and its three
largest stall reasons (as shares of all samples)."""
import collections, csv, sys


def load(path):
    rows = list(csv.reader(open(path)))
    header = rows[1]
    ix = {h: i for i, h in enumerate(header)}
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[2:]:
        if len(r) < len(header): continue
        stalls = {h: int(r[ix[h]]) for h in stall_cols if r[ix[h]] not in ("", "-", "0")}
        out.append((int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), r[ix["Instructions Executed"]],
                    r[ix["Source"]].strip(), stalls))
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    rows = load(sys.argv[1])
    total = sum(r[0] for r in rows) or 1
    if "--dump" in sys.argv:
        for i, (s, ex, src, _) in enumerate(rows):
            print(f"{i:5d} {s:6d} {ex:>9s} {src[:100]}")
        return 0
    if "--regions" in sys.argv:
        for spec in sys.argv[sys.argv.index("--regions") + 1:]:
            a, b, name = spec.split(":", 2)
            s = sum(r[0] for r in rows[int(a):int(b)])
            why = collections.Counter()
            for r in rows[int(a):int(b)]:
                why.update(r[3])
            top = ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in why.most_common(3))
            print(f"{name:24s} {100 * s / total:5.1f}%   {top}")
        return 0
    reasons = collections.Counter()
    for r in rows:
        reasons.update(r[3])
    print(f"{total} samples")
    for h, v in reasons.most_common(10):
        print(f"  {h:26s} {100 * v / total:5.1f}%")
    print("instructions with >= 0.5% of the samples:")
    for i, (s, ex, src, st) in enumerate(rows):
        if s >= 0.005 * total:
            top = ", ".join(f"{k[6:]} {v}" for k, v in sorted(st.items(), key=lambda x: -x[1])[:3])
            print(f"{i:5d} {100 * s / total:5.1f}% x{ex:>8s} {src[:60]:60s} {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
