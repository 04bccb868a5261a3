#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention as the peer of attnkit's CPU prefill.

  torch_cpu_prefill.py measure --threads T --seq 1024,2048,4096 [--reps N]   > torch.jsonl
  torch_cpu_prefill.py render --rounds DIR [DIR ...] --out bench/results/cpu-... [--isa NAME]
      merges the rounds bench/cpu_sweep.sh wrote (attnkit's `attnkit bench --json` documents, the
      peer's rows, the load averages) into <out>.json and <out>.md, and prints the table.

Same protocol as attnkit's CPU driver: same shapes (llama3-8b: 32 query heads, 8 KV heads, head_dim
128, batch 1), same dtype, same thread count (torch.set_num_threads), wall-clock, warm-up first,
median of the repetitions. GQA: K and V are expanded to the query heads before timing, so torch runs
its plain (fastest) fused CPU path; attnkit reads the 8 KV heads as they are.
FLOPs: 4 * batch * heads * visible pairs * head_dim (the plan's matmul FLOPs).
"""
import argparse
import json
import os
import statistics
import sys
import time


def pairs(q_len, kv_len, causal):
    if not causal:
        return q_len * kv_len
    off = kv_len - q_len
    return sum(max(0, min(kv_len, i + off + 1)) for i in range(q_len))


def measure(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    group = args.heads // args.kv_heads
    for seq in [int(s) for s in args.seq.split(",")]:
        for causal in (False, True):
            g = torch.Generator().manual_seed(seq)
            q = torch.randn(1, args.heads, seq, args.head_dim, generator=g).to(dtype)
            k = torch.randn(1, args.kv_heads, seq, args.head_dim, generator=g).to(dtype)
            v = torch.randn(1, args.kv_heads, seq, args.head_dim, generator=g).to(dtype)
            k = k.repeat_interleave(group, dim=1).contiguous()
            v = v.repeat_interleave(group, dim=1).contiguous()
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            for _ in range(args.warmup):
                fn()
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            flops = 4.0 * args.heads * pairs(seq, seq, causal) * args.head_dim
            med = statistics.median(times)
            print(json.dumps(dict(impl="torch-sdpa-cpu", torch=torch.__version__, op="prefill", seq_len=seq,
                                  causal=causal, dtype=args.dtype, heads=args.heads, kv_heads=args.kv_heads,
                                  head_dim=args.head_dim, threads=args.threads, median_s=med, min_s=min(times),
                                  max_s=max(times), repetitions=args.reps, flops=flops,
                                  gflops=flops / med / 1e9)), flush=True)


def load_round(d):
    """One round's documents: attnkit decode (two or three runs: paged since session 37) and prefill
    (two runs), the peer, loads."""
    decodes = [json.load(open(f"{d}/decode-{n}.json")) for n in ("gqa", "mha", "paged")
               if os.path.exists(f"{d}/decode-{n}.json")]
    prefills = [json.load(open(f"{d}/prefill-{n}.json")) for n in ("causal", "full")]
    peers = [json.loads(line) for line in open(f"{d}/torch.jsonl") if line.strip()]
    loads = dict((ln.split()[0], ln.split()[1:]) for ln in open(f"{d}/load.txt") if ln.strip())
    decode_rows = []
    for doc in decodes:
        # Each decode row is held against the read ceiling measured in its own run.
        ceiling = max(r["ceiling_value"] for r in doc["rows"] if r["impl"] == "read-bandwidth")
        for r in doc["rows"]:
            if r["impl"] == "attnkit":
                decode_rows.append(dict(r, read_ceiling=ceiling))
    prefill_rows = [dict(r, fma_ceilings={x["impl"]: x["ceiling_value"] for x in doc["rows"] if x["impl"] != "attnkit"})
                    for doc in prefills for r in doc["rows"] if r["impl"] == "attnkit"]
    ceilings = {}
    for doc in decodes + prefills:
        for r in doc["rows"]:
            if r["impl"] != "attnkit":
                ceilings.setdefault(r["impl"], []).append(r["ceiling_value"])
    return dict(decode=decode_rows, prefill=prefill_rows, torch=peers, loads=loads, ceilings=ceilings,
                docs=dict(decode=decodes, prefill=prefills))


def spread(values, fmt):
    return fmt.format(values[0]) if len(values) == 1 else "{} ({}-{})".format(
        fmt.format(statistics.median(values)), fmt.format(min(values)), fmt.format(max(values)))


def beside(rows, field, scale, fmt):
    """A probe-beside cell ("-" for runs made before the bench measured it)."""
    values = [r[field] * scale for r in rows if field in r]
    return spread(values, fmt) if values else "-"


def render(args):
    rounds = [load_round(d) for d in args.rounds]
    meta = rounds[0]["docs"]["prefill"][0]
    lines = [f"# attnkit CPU benchmark ({meta['device']}, commit {meta['commit']})", "",
             f"Command: `{args.command}` (fast-kernel ISA: {args.isa}; {len(rounds)} rounds; each cell: median over "
             "rounds (min-max); each round's value is the median of its repetitions)", ""]
    lines.append("Load average (1/5/15 min) before each step, per round:")
    lines.append("")
    for i, r in enumerate(rounds):
        lines.append(f"- round {i + 1}: " + "; ".join(f"{k} {' '.join(v)}" for k, v in r["loads"].items()))
    lines.append("")
    lines.append("Ceilings measured in the same runs (best pass of each probe; all probes of all rounds, min-max): " +
                 ", ".join(f"{k} {min(v) / 1e9:.1f}-{max(v) / 1e9:.1f} {'GB/s' if 'read' in k else 'GFLOP/s'}"
                           for k, v in {k: [x for r in rounds for x in r['ceilings'].get(k, [])]
                                        for k in rounds[0]["ceilings"]}.items()))
    lines.append("")
    lines.append("## Decode (KV read rate against the read ceiling measured in the same run)")
    lines.append("")
    lines.append("\"% of the probe beside\": each repetition's rate over the read probe's pass right after it "
                 "(median over repetitions; the probe is the ceiling's best pattern); on a shared host the "
                 "ceiling's best pass and the decode's moment can be far apart.")
    lines.append("")
    lines.append("| batch | heads/kv | head_dim | kv_len | cache | dtype | KV MiB | median ms | min ms | GB/s | read ceiling GB/s | % of read ceiling | probe beside GB/s | % of the probe beside | GFLOP/s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cache = lambda r: (f"paged {r['page_size']} {r['page_layout']}" if r.get("op") == "paged-decode" else "contiguous")
    key = lambda r: (r["num_heads"], r["kv_heads"], r["batch"], r["dtype"], cache(r))
    for r0 in rounds[0]["decode"]:
        same = [r for rd in rounds for r in rd["decode"] if key(r) == key(r0)]
        lines.append(f"| {r0['batch']} | {r0['num_heads']}/{r0['kv_heads']} | {r0['head_dim']} | {r0['kv_len']} | {cache(r0)} | {r0['dtype']} | "
                     f"{r0['bytes'] / 2**20:.0f} | {spread([r['median_s'] * 1e3 for r in same], '{:.2f}')} | "
                     f"{spread([r['min_s'] * 1e3 for r in same], '{:.2f}')} | "
                     f"{spread([r['achieved_bytes_per_s'] / 1e9 for r in same], '{:.1f}')} | "
                     f"{spread([r['read_ceiling'] / 1e9 for r in same], '{:.1f}')} | "
                     f"{spread([100 * r['achieved_bytes_per_s'] / r['read_ceiling'] for r in same], '{:.0f}%')} | "
                     f"{beside(same, 'read_probe_beside', 1e-9, '{:.1f}')} | {beside(same, 'pct_of_probe_beside', 1, '{:.0f}%')} | "
                     f"{spread([r['achieved_flops_per_s'] / 1e9 for r in same], '{:.1f}')} |")
    lines.append("")
    lines.append("## Prefill (GFLOP/s against PyTorch CPU SDPA, same threads, same round)")
    lines.append("")
    lines.append("| seq_len | causal | dtype | attnkit ms | attnkit GFLOP/s | torch ms | torch GFLOP/s | speed-up |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    pkey = lambda r: (r["kv_len"], r["causal"], r["dtype"])
    for r0 in rounds[0]["prefill"]:
        ours, theirs, ratio = [], [], []
        for rd in rounds:
            r = [x for x in rd["prefill"] if pkey(x) == pkey(r0)][0]
            ours.append(r)
            t = [p for p in rd["torch"] if (p["seq_len"], p["causal"], p["dtype"]) == pkey(r0)]
            if t:
                theirs.append(t[0])
                ratio.append(t[0]["median_s"] / r["median_s"])
        cells = [spread([r["median_s"] * 1e3 for r in ours], "{:.1f}"),
                 spread([r["achieved_flops_per_s"] / 1e9 for r in ours], "{:.1f}")]
        cells += ([spread([t["median_s"] * 1e3 for t in theirs], "{:.1f}"), spread([t["gflops"] for t in theirs], "{:.1f}"),
                   spread(ratio, "{:.2f}x")] if theirs else ["-", "-", "-"])
        lines.append(f"| {r0['kv_len']} | {'yes' if r0['causal'] else 'no'} | {r0['dtype']} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    with open(args.out + ".md", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(command=args.command, isa=args.isa, rounds=[dict(loads=r["loads"], decode=r["docs"]["decode"],
                                                                         prefill=r["docs"]["prefill"], torch=r["torch"])
                                                                    for r in rounds]), f, indent=1)
    print(text)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--threads", type=int, required=True)
    m.add_argument("--seq", default="1024,2048,4096")
    m.add_argument("--dtype", default="bf16")
    m.add_argument("--heads", type=int, default=32)
    m.add_argument("--kv-heads", type=int, default=8)
    m.add_argument("--head-dim", type=int, default=128)
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--warmup", type=int, default=1)
    r = sub.add_parser("render")
    r.add_argument("--rounds", nargs="+", required=True, help="round folders written by bench/cpu_sweep.sh")
    r.add_argument("--out", required=True)
    r.add_argument("--isa", default="default")
    r.add_argument("--command", default="bench/cpu_sweep.sh")
    args = ap.parse_args()
    measure(args) if args.cmd == "measure" else render(args)


if __name__ == "__main__":
    sys.exit(main())
