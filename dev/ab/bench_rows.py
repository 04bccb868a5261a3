#!/usr/bin/env python3
"""One line per row of `attnkit bench --json` (stdin), or per point of attnkit_paged_bench's JSON,
tagged with argv[1]: for old/new A/B runs in one device call, where only short stdout comes back.
  b/old/attnkit bench --backend cuda --op decode ... --json | python3 dev/ab/bench_rows.py old
"""
import json, sys
d = json.load(sys.stdin)
tag = sys.argv[1] if len(sys.argv) > 1 else ""
for r in d["rows"]:
    if "impl" in r:  # attnkit bench
        if r.get("skipped"): continue
        shape = f"d{r['head_dim']} h{r.get('num_heads','')} {'c' if r.get('causal') else 'nc'} " if r.get("op") == "prefill" else ""
        print(f"{tag} {r['impl'][:12]:12} {shape}{r.get('dtype','')} b{r.get('batch','')} kv{r.get('kv_len','')} {r.get('timing','')[:5]} {r['median_s']*1e6:9.2f} us")
    else:  # paged bench
        def us(k): return f"{r[k]['median_s']*1e6:8.1f}" if k in r and isinstance(r[k], dict) and 'median_s' in r[k] else "       -"
        keys = [k for k in r if isinstance(r[k], dict) and "median_s" in r[k]]
        print(f"{tag} {r['case']} {r['dtype']} b{r['batch']} kv{r['kv_len']} " + " ".join(f"{k}={us(k).strip()}" for k in keys))
