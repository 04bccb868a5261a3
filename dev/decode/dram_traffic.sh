#!/usr/bin/env bash
# DRAM bytes read and written, and the duration, of the decode kernel under the bench's own L2
# flush (a 256 MiB memset, which leaves L2 full of dirty lines): ncu with --cache-control none, so
# the write-back of those lines during the call is counted. One line per (build, point).
#   dev/decode/dram_traffic.sh CLI [CLI ...] < points   (a point: dtype batch kv_len)
set -u
mapfile -t points
for cli in "$@"; do
  for point in "${points[@]}"; do
    set -- $point
    ncu --clock-control none --cache-control none --csv \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      -k regex:'split_kv_decode_kernel' --launch-skip 20 --launch-count 5 \
      "$cli" bench --backend cuda --op decode --dtype "$1" --batch "$2" --kv-len "$3" --reps 30 --warmup 1 --json 2>/dev/null |
      python3 -c '
import csv, sys, statistics
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith("\""))]
head, body = rows[0], rows[1:]
mi, ui, vi = head.index("Metric Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
         "nsecond": 1e-3, "usecond": 1, "msecond": 1e3, "ns": 1e-3, "us": 1, "ms": 1e3}
vals = {}
for r in body:
    vals.setdefault(r[mi], []).append(float(r[vi].replace(",", "")) * scale.get(r[ui], 1))
med = {k: statistics.median(v) for k, v in vals.items()}
print("%-28s %-16s read %8.1f MB  write %7.1f MB  kernel %8.1f us" % (sys.argv[1], sys.argv[2],
      med.get("dram__bytes_read.sum", 0) / 1e6, med.get("dram__bytes_write.sum", 0) / 1e6, med.get("gpu__time_duration.sum", 0)))
' "$cli" "$1 b$2 kv$3"
  done
done
