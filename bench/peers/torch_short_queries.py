#!/usr/bin/env python3
"""Short queries against long caches (speculative verification, chunk tails): PyTorch SDPA peers
and the table beside attnkit's prefill, under DESIGN.md's protocol (bench/peers/event_timing.py).

  torch_short_queries.py cases                     the shapes, one "batch q_len kv_len" per line
  torch_short_queries.py measure > torch.jsonl     flash and cuDNN backends (enable_gqa), bf16
  torch_short_queries.py render attnkit.json... torch.jsonl --out bench/results/prefill_short_h200
      attnkit's rows come from `attnkit bench --op prefill --json` documents (one per q_len);
      writes <out>.md and <out>.json and prints the table.

Shapes: llama3-8b heads (32 query / 8 KV, head_dim 128), non-causal: SDPA's is_causal aligns the
mask top-left when q_len != kv_len, attnkit's bottom-right, so a causal row would not compare the
same work. Bytes: K and V once (what a GQA-packed kernel must read), q and out; the table reads
them against the read ceiling attnkit's bench measured in the same call.
"""
import json
import sys

from event_timing import time_events  # the shared protocol (same folder)

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def cases():
    for q_len in (1, 4, 16):
        for batch in (1, 8, 32):
            for kv_len in (4096, 32768):
                yield dict(batch=batch, q_len=q_len, kv_len=kv_len)


def measure():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    reps = 50
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    backends = [("torch-flash", SDPBackend.FLASH_ATTENTION), ("torch-cudnn", SDPBackend.CUDNN_ATTENTION)]
    for c in cases():
        q = torch.randn(c["batch"], HEADS, c["q_len"], HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        k = torch.randn(c["batch"], KV_HEADS, c["kv_len"], HEAD_DIM, dtype=torch.bfloat16, device="cuda")
        v = torch.randn_like(k)
        for name, backend in backends:
            row = dict(impl=name, **c)
            try:
                with sdpa_kernel([backend]):
                    med, lo, hi = time_events(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                              reps, 5, flush)
                row.update(median_s=med, min_s=lo, max_s=hi, reps=reps)
            except Exception as e:  # a backend that refuses a shape is reported, not hidden
                row.update(error=str(e).splitlines()[0][:200])
            print(json.dumps(row), flush=True)
        del q, k, v


def render(attnkit_paths, torch_path, out):
    ours, decode, ceiling, commits, commands = {}, {}, None, set(), []
    for path in attnkit_paths:
        doc = json.load(open(path))
        commits.add(doc.get("commit", "?"))
        commands.append(doc.get("command", ""))
        for r in doc["rows"]:
            if r.get("impl") == "read-ceiling":
                ceiling = r["ceiling_value"]
            elif r.get("impl") == "attnkit" and r.get("timing", "events").startswith("event") and "q_len" in r:
                if r.get("op") == "prefill":
                    ours[(r["batch"], r["q_len"], r["kv_len"])] = r
                elif r.get("op") == "decode":  # the split-KV decode kernel on the q_len 1 problem
                    decode[(r["batch"], r["kv_len"])] = r
    peers = {}
    for line in open(torch_path):
        if line.startswith("{"):
            r = json.loads(line)
            peers.setdefault((r["batch"], r["q_len"], r["kv_len"]), {})[r["impl"]] = r
    us = lambda r: f"{r['median_s'] * 1e6:.1f}" if r and "median_s" in r else ("refused" if r and "error" in r else "-")
    lines = [
        "| batch | q_len | kv_len | K/V bytes (MB) | attnkit us | family | packed heads | splits | TB/s | decode kernel us "
        "| torch flash us | torch cuDNN us | vs flash | vs cuDNN |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = []
    for c in cases():
        key = (c["batch"], c["q_len"], c["kv_len"])
        a, p = ours.get(key), peers.get(key, {})
        kv_bytes = 2 * c["batch"] * KV_HEADS * c["kv_len"] * HEAD_DIM * 2
        plan = (a or {}).get("plan", {})
        part = plan.get("partition", {}) if isinstance(plan, dict) else {}
        dec = decode.get((c["batch"], c["kv_len"])) if c["q_len"] == 1 else None
        fl, cu = p.get("torch-flash"), p.get("torch-cudnn")
        ratio = lambda x: f"{x['median_s'] / a['median_s']:.2f}x" if a and x and "median_s" in x else "-"
        tbs = f"{kv_bytes / a['median_s'] / 1e12:.2f}" if a else "-"
        lines.append(f"| {c['batch']} | {c['q_len']} | {c['kv_len']} | {kv_bytes / 1e6:.1f} | {us(a)} | "
                     f"{(a or {}).get('family', '-')} | {part.get('packed_heads', '-')} | {part.get('sequence_splits', '-')} | "
                     f"{tbs} | {us(dec)} | {us(fl)} | {us(cu)} | {ratio(fl)} | {ratio(cu)} |")
        rows.append(dict(case=c, attnkit=a, decode=dec, torch_flash=fl, torch_cudnn=cu, kv_bytes=kv_bytes))
    head = [f"attnkit commit(s): {', '.join(sorted(commits))}", "attnkit commands:"] + [f"- `{c}`" for c in commands]
    if ceiling:
        head.append(f"read ceiling (attnkit bench, same call): {ceiling / 1e12:.3f} TB/s")
    head.append("ratios: peer time / attnkit time (> 1: attnkit faster); decode kernel: attnkit's split-KV decode "
                "on the same problem (q_len 1 rows only)")
    table = "\n".join(head + [""] + lines) + "\n"
    with open(out + ".md", "w") as f:
        f.write(table)
    with open(out + ".json", "w") as f:
        json.dump(dict(commits=sorted(commits), commands=commands, read_ceiling=ceiling, rows=rows), f, indent=1)
    print(table)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "cases":
        for c in cases():
            print(c["batch"], c["q_len"], c["kv_len"])
    elif len(sys.argv) >= 2 and sys.argv[1] == "measure":
        measure()
    elif len(sys.argv) >= 4 and sys.argv[1] == "render":
        out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "prefill_short"
        args = [a for a in sys.argv[2:sys.argv.index("--out")]] if "--out" in sys.argv else sys.argv[2:]
        render(args[:-1], args[-1], out)
    else:
        print(__doc__)
        sys.exit(2)
