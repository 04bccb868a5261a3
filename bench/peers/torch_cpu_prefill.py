#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention as the peer of attnkit's CPU prefill.

  torch_cpu_prefill.py measure --threads T --seq 1024,2048,4096 [--reps N]   > torch.jsonl
  torch_cpu_prefill.py render --prefill P.json --decode D1.json [D2.json ...] --torch T.jsonl --out bench/results/cpu-...
      merges attnkit's `attnkit bench --json` documents with the peer's rows into <out>.json and
      <out>.md, and prints the table.

Same protocol as attnkit's CPU driver: same shapes (llama3-8b: 32 query heads, 8 KV heads, head_dim
128, batch 1), same dtype, same thread count (torch.set_num_threads), wall-clock, warm-up first,
median of the repetitions. GQA: K and V are expanded to the query heads before timing, so torch runs
its plain (fastest) fused CPU path; attnkit reads the 8 KV heads as they are.
FLOPs: 4 * batch * heads * visible pairs * head_dim (the plan's matmul FLOPs).
"""
import argparse
import json
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


def render(args):
    prefill = json.load(open(args.prefill))
    decodes = [json.load(open(f)) for f in args.decode]
    decode = dict(decodes[0], rows=[r for d in decodes for r in d["rows"]])
    peers = [json.loads(line) for line in open(args.torch) if line.strip()]
    lines = []
    ceil = {r["impl"]: r["ceiling_value"] for r in decode["rows"] + prefill["rows"] if r["impl"] != "attnkit"}
    # The read ceiling of each decode run (measured in that run) is what its rows are held against.
    read_ceiling = min(r["ceiling_value"] for r in decode["rows"] if r["impl"] == "read-bandwidth")
    lines.append(f"# attnkit CPU benchmark ({prefill['device']}, commit {prefill['commit']})")
    lines.append("")
    lines.append(f"Command: `{args.command}`")
    lines.append("")
    lines.append("Ceilings measured in the same run: " +
                 ", ".join(f"{k} {v / 1e9:.1f} {'GB/s' if 'read' in k else 'GFLOP/s'}" for k, v in ceil.items()))
    lines.append("")
    lines.append("## Decode (KV read rate against the read ceiling)")
    lines.append("")
    lines.append("| batch | heads/kv | head_dim | kv_len | dtype | KV MiB | median ms | GB/s | % of read ceiling | GFLOP/s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in decode["rows"]:
        if r["impl"] != "attnkit":
            continue
        mib = r["bytes"] / 2**20
        lines.append(f"| {r['batch']} | {r['num_heads']}/{r['kv_heads']} | {r['head_dim']} | {r['kv_len']} | {r['dtype']} | "
                     f"{mib:.0f} | {r['median_s'] * 1e3:.2f} | {r['achieved_bytes_per_s'] / 1e9:.1f} | "
                     f"{100 * r['achieved_bytes_per_s'] / read_ceiling:.0f}% | {r['achieved_flops_per_s'] / 1e9:.1f} |")
    lines.append("")
    lines.append("## Prefill (GFLOP/s against PyTorch CPU SDPA, same threads, same run)")
    lines.append("")
    lines.append("| seq_len | causal | dtype | attnkit ms | attnkit GFLOP/s | % of FMA ceiling | torch ms | torch GFLOP/s | speed-up |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in prefill["rows"]:
        if r["impl"] != "attnkit":
            continue
        peer = [p for p in peers if p["seq_len"] == r["kv_len"] and p["causal"] == r["causal"] and p["dtype"] == r["dtype"]]
        t = peer[0] if peer else None
        lines.append(f"| {r['kv_len']} | {'yes' if r['causal'] else 'no'} | {r['dtype']} | {r['median_s'] * 1e3:.1f} | "
                     f"{r['achieved_flops_per_s'] / 1e9:.1f} | {r['pct_of_ceiling']:.0f}% | "
                     + (f"{t['median_s'] * 1e3:.1f} | {t['gflops']:.1f} | {t['median_s'] / r['median_s']:.2f}x |" if t else "- | - | - |"))
    text = "\n".join(lines) + "\n"
    with open(args.out + ".md", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump(dict(command=args.command, decode=decode, prefill=prefill, torch=peers), f, indent=1)
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
    r.add_argument("--prefill", required=True)
    r.add_argument("--decode", nargs="+", required=True)
    r.add_argument("--torch", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--command", default="bench/cpu_sweep.sh")
    args = ap.parse_args()
    measure(args) if args.cmd == "measure" else render(args)


if __name__ == "__main__":
    sys.exit(main())
