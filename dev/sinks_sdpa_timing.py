"""attnkit.sdpa with attention sinks on CUDA, timed three ways in one process (docs/perf-notes.md,
"Attention sinks folded into the kernels"): without sinks; with sinks folded by the kernels
(sdpa(sinks=)); and the recipe sdpa ran before (the kernels' f32 rows and LSE, then sigmoid,
multiply and copy in torch). CUDA events around each call, 256 MiB L2 flush before each, medians
of `--reps`. Shapes: decode (q_len 1) at 32 / 8 heads, d128, bf16; one causal prefill.

    python3 dev/sinks_sdpa_timing.py [--reps 50]
"""
from __future__ import annotations

import argparse
import statistics

import torch

import attnkit
from attnkit._sdpa import _attend


def old_recipe(q, k, v, sinks, causal):
    """What sdpa(sinks=) did before the kernels took sinks."""
    rows, lse = _attend(q, k, v, causal=causal, scale=0.0, window=0, softcap=0.0, lengths=None, family=None,
                        threads=0, out=None, o_dtype="f32", return_lse=True)
    out = torch.empty_like(q)
    share = torch.sigmoid(lse - sinks.to(torch.float32).view(1, -1, 1))
    out.copy_(rows * share[..., None])
    return out


def median_us(fn, reps, flush):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    shapes = [(1, 1, 4096, False), (16, 1, 4096, False), (64, 1, 1024, False), (1, 1, 65536, False),
              (1, 2048, 2048, True)]
    print(f"# {torch.cuda.get_device_name()}, attnkit {attnkit.__version__}, medians of {args.reps}, us")
    print("| batch x q_len x kv_len | no sinks | sinks in the kernels | old recipe (f32 + LSE + torch) | max abs diff |")
    print("| --- | --- | --- | --- | --- |")
    for batch, q_len, kv_len, causal in shapes:
        q = torch.randn(batch, 32, q_len, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, 8, kv_len, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, 8, kv_len, 128, device="cuda", dtype=torch.bfloat16)
        sinks = torch.randn(32, device="cuda", dtype=torch.bfloat16) + 2.0
        plain = median_us(lambda: attnkit.sdpa(q, k, v, causal=causal), args.reps, flush)
        fused = median_us(lambda: attnkit.sdpa(q, k, v, causal=causal, sinks=sinks), args.reps, flush)
        old = median_us(lambda: old_recipe(q, k, v, sinks, causal), args.reps, flush)
        diff = (attnkit.sdpa(q, k, v, causal=causal, sinks=sinks).float() - old_recipe(q, k, v, sinks, causal).float())
        print(f"| {batch} x {q_len} x {kv_len}{' causal' if causal else ''} | {plain:.1f} | {fused:.1f} | {old:.1f} | "
              f"{diff.abs().max().item():.2e} |")


if __name__ == "__main__":
    main()
