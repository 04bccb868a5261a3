#!/usr/bin/env python3
"""attnkit's stand-alone CUDA merge of partial states and RoPE against PyTorch doing the same, in one
process, under attnkit's GPU protocol (event_timing.py: warm-up, L2 flushed before every
repetition, CUDA events, medians).

- merge: two partial states per row (a shared prefix and each sequence's own keys: cascade
  attention), rows = batch x 32 heads, head_dim 128, partial outputs in bf16 or f32, LSEs f32; out
  f32 and lse. Peers: the same math in torch ops (softmax of the LSEs, weighted sum, logsumexp),
  eager and torch.compile'd (inductor fuses it into one or two kernels).
- rope: x [tokens, 32 heads, 128] bf16 at a position per token (theta 500000, half rotation).
  attnkit rotates in place from the same f32 cos/sin tables the peers read ("attnkit"), and from
  theta alone, computing the angles in float64 ("attnkit-theta"); the peers compute it the Hugging
  Face way (tables gathered by position, x * cos + rotate_half(x) * sin, into a new tensor), eager
  and compiled.

Every call is captured in a CUDA graph and the graph's replay is timed, so Python's per-call cost
(attnkit's checks, torch's op dispatch) is not on the clock for either side. GB/s counts the bytes
each call must move once (inputs read, outputs written).

  python3 bench/peers/kv_ops_bench.py [--reps 50] [--no-compile] [--md kv_ops.md] > kv_ops.json
Prints one JSON document: {"device", "torch", "command", "rows": [...]} (a line per call on stderr);
--md also writes the table with attnkit's time against each peer's.
"""
import argparse
import json
import sys

from event_timing import time_events, warm_up_device  # the shared protocol (same folder)

import torch

import attnkit

FLUSH_BYTES = 256 << 20
HEADS, HEAD_DIM = 32, 128
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def graphed(fn):
    """fn captured in a CUDA graph after a warm-up on a side stream; returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def merge_torch(out_partial, lse_partial):
    weights = torch.softmax(lse_partial, dim=0)
    return (weights[..., None] * out_partial.float()).sum(0), torch.logsumexp(lse_partial, dim=0)


def rope_torch(x, positions, cos_table, sin_table):
    cos = cos_table[positions][:, None, :].repeat(1, 1, 2)  # [tokens, 1, head_dim]
    sin = sin_table[positions][:, None, :].repeat(1, 1, 2)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd peers")
    ap.add_argument("--md", help="also write a markdown table here")
    ap.add_argument("--ops", default="merge,rope", help="which ops to time (merge, rope)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    warm_up_device(torch)
    rows = []

    def measure(base, impl, fn, nbytes):
        median, lo, hi = time_events(torch, graphed(fn), args.reps, args.warmup, flush)
        row = dict(base, impl=impl, median_s=median, min_s=lo, max_s=hi, bytes=nbytes, gbps=nbytes / median / 1e9)
        rows.append(row)
        print(f"{base['op']:6s} {base['shape']:28s} {base['dtype']:5s} {impl:16s} {median * 1e6:9.2f} us "
              f"{row['gbps']:8.1f} GB/s", file=sys.stderr, flush=True)

    # Compiled per shape (dynamic=True made inductor split the merge's reduction in one run and read
    # 8192 rows in 637 us, 11.6 in another).
    torch._dynamo.config.cache_size_limit = 64
    compiled_merge = torch.compile(merge_torch, dynamic=False)
    compiled_rope = torch.compile(rope_torch, dynamic=False)
    for dname, dt in DTYPES.items() if "merge" in args.ops else ():
        es = torch.tensor([], dtype=dt).element_size()
        for batch in (1, 16, 64, 256):
            rows_ = batch * HEADS
            out_partial = torch.randn(2, rows_, HEAD_DIM, device=dev).to(dt)
            lse_partial = torch.randn(2, rows_, device=dev) * 4
            out = torch.empty(rows_, HEAD_DIM, device=dev)
            lse = torch.empty(rows_, device=dev)
            nbytes = 2 * rows_ * HEAD_DIM * es + 2 * rows_ * 4 + rows_ * HEAD_DIM * 4 + rows_ * 4
            base = {"op": "merge", "shape": f"2 x {rows_} rows x {HEAD_DIM}", "batch": batch, "dtype": dname}
            measure(base, "attnkit", lambda: attnkit.merge_states(out_partial, lse_partial, out, lse), nbytes)
            measure(base, "torch-eager", lambda: merge_torch(out_partial, lse_partial), nbytes)
            if not args.no_compile:
                measure(base, "torch-compiled", lambda: compiled_merge(out_partial, lse_partial), nbytes)
            expected, expected_lse = merge_torch(out_partial, lse_partial)
            attnkit.merge_states(out_partial, lse_partial, out, lse)
            torch.cuda.synchronize()
            assert torch.allclose(out, expected, rtol=1e-4, atol=1e-5) and torch.allclose(lse, expected_lse, atol=1e-4)

    theta, max_pos = 500000.0, 65536
    inv_freq = theta ** (-torch.arange(0, HEAD_DIM, 2, device=dev, dtype=torch.float64) / HEAD_DIM)
    angles = torch.arange(max_pos, device=dev, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos_table, sin_table = angles.cos().float(), angles.sin().float()
    for tokens in (1, 64, 4096, 32768) if "rope" in args.ops else ():
        x = torch.randn(tokens, HEADS, HEAD_DIM, device=dev).bfloat16()
        positions = torch.randint(0, max_pos, (tokens,), device=dev, dtype=torch.int32)
        nbytes = 2 * x.numel() * 2 + tokens * 4
        base = {"op": "rope", "shape": f"{tokens} x {HEADS} x {HEAD_DIM}", "tokens": tokens, "dtype": "bf16"}
        work = x.clone()
        measure(base, "attnkit", lambda: attnkit.apply_rope(work, positions, cos_table=cos_table, sin_table=sin_table),
                nbytes)
        measure(base, "attnkit-theta", lambda: attnkit.apply_rope(work, positions, theta=theta), nbytes)
        long_positions = positions.long()
        measure(base, "torch-eager", lambda: rope_torch(x, long_positions, cos_table, sin_table), nbytes)
        if not args.no_compile:
            measure(base, "torch-compiled", lambda: compiled_rope(x, long_positions, cos_table, sin_table), nbytes)
        check = x.clone()
        attnkit.apply_rope(check, positions, theta=theta)
        torch.cuda.synchronize()
        expected = rope_torch(x, long_positions, cos_table, sin_table)
        assert (check.float() - expected.float()).abs().max().item() <= 0.05

    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "command": " ".join(["bench/peers/kv_ops_bench.py"] + sys.argv[1:]), "rows": rows}
    print(json.dumps(doc, indent=1))
    if args.md:
        write_markdown(doc, args.md)


def write_markdown(doc, path):
    peers = ["attnkit-theta", "torch-eager", "torch-compiled"]
    lines = [f"# Stand-alone merge and RoPE on {doc['device']}", "",
             f"- command: `{doc['command']}`; torch {doc['torch']}",
             "- medians of CUDA-event timings of CUDA-graph replays, the L2 flushed before each; GB/s = bytes the "
             "call must move / time; ratio = peer time / attnkit time (> 1: attnkit faster)", "",
             "| op | shape | dtype | attnkit us | GB/s | " + " | ".join(f"{p} us | ratio" for p in peers) + " |",
             "| --- | --- | --- | --- | --- | " + " | ".join("--- | ---" for _ in peers) + " |"]
    keys = []
    for r in doc["rows"]:
        key = (r["op"], r["shape"], r["dtype"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        by_impl = {r["impl"]: r for r in doc["rows"] if (r["op"], r["shape"], r["dtype"]) == key}
        ours = by_impl["attnkit"]
        cells = [key[0], key[1], key[2], f"{ours['median_s'] * 1e6:.2f}", f"{ours['gbps']:.0f}"]
        for p in peers:
            r = by_impl.get(p)
            cells += ([f"{r['median_s'] * 1e6:.2f}", f"{r['median_s'] / ours['median_s']:.2f}"] if r else ["-", "-"])
        lines.append("| " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
