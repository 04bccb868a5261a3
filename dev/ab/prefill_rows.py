#!/usr/bin/env python3
"""prefill_bench JSON lines (stdin) -> one short line each: tag impl dtype d causal seq TFLOP/s, for
old/new A/B runs in one device call:  b/old/prefill_bench --head-dim 128 | python3 dev/ab/prefill_rows.py old
"""
import json, sys
tag = sys.argv[1] if len(sys.argv) > 1 else ""
for line in sys.stdin:
    if not line.startswith("{"): continue
    r = json.loads(line)
    print(f"{tag} {r['impl'][:10]:10} {r['dtype']:5} d{r['head_dim']} {'c' if r['causal'] else 'n'} {r['seq_len']:6} {r['tflops']:7.1f} gemm {r['gemm_tflops']:.0f}")
