"""Host time per call of attnkit's Python entry points (docs/perf-notes.md, "Python per-call host
time"). Small shapes, so the host, not the kernel, sets the pace: on CUDA, N calls queued back to
back and one synchronize give the per-call host time whenever it exceeds the kernel's. Beside
it, CUDA events around one call ("events": the GPU waits for the host between the two records,
so on a small shape this is the host's time again, as a benchmark with events would read it).
Each row runs twice in one process: with
tensors exported as DLPack capsules (the package now) and as the tensors themselves, which makes
nanobind call Tensor.__dlpack__ (the package before). torch's sdpa is the reference.

    python3 dev/python_call_overhead.py [--device cpu|cuda] [--calls 3000]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import attnkit
from attnkit import _arrays, _attnkit

_capsule_export = _arrays.exported


def _tensor_export(x):
    """The export before: the tensor itself (nanobind then calls x.__dlpack__())."""
    if x is None or _arrays.library(x) != "torch":
        return x
    return x.detach() if x.requires_grad else x


def per_call_us(fn, calls, device):
    for _ in range(200):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(rounds)


def events_us(fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(50):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    dev, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32
    torch.manual_seed(0)
    batch, heads, kv_heads, head_dim, kv_len = 1, 32, 8, 128, 256
    q = torch.randn(batch, heads, head_dim, device=dev, dtype=dtype)
    k = torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    lengths = torch.full((batch,), kv_len, dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, max_seq=kv_len,
                               kv_dtype=str(dtype).split(".")[1], backend=dev)
    q4 = q[:, :, None, :]
    sinks = torch.zeros(heads, device=dev, dtype=torch.float32)
    sinks_param = torch.nn.Parameter(torch.zeros(heads, device=dev, dtype=dtype))  # a model's (gpt-oss: bf16)
    workspace, stream = plan.workspace(q), _arrays.current_stream(q)
    capsule = torch.utils.dlpack.to_dlpack

    def native():  # the floor under the Python layer: nanobind, the C++ validation, the launch
        _attnkit.decode(plan._native, capsule(q), capsule(k), capsule(v), capsule(lengths), capsule(out), None,
                        workspace, stream)

    rows = {
        "decode(out=)": lambda: attnkit.decode(plan, q, k, v, lengths, out),
        "decode": lambda: attnkit.decode(plan, q, k, v, lengths),
        "sdpa": lambda: attnkit.sdpa(q4, k, v),
        "sdpa(sinks=)": lambda: attnkit.sdpa(q4, k, v, sinks=sinks),
        f"sdpa({str(dtype)[6:]} sinks)": lambda: attnkit.sdpa(q4, k, v, sinks=sinks_param),
    }
    print(f"device {dev} ({torch.cuda.get_device_name() if dev == 'cuda' else 'host'}), torch {torch.__version__}, "
          f"b{batch} x {kv_len} keys, {heads}/{kv_heads} heads, d{head_dim}, {dtype}; us per call, median of 5 "
          f"rounds of {args.calls // 5}")
    print(f"{'call':<20} {'capsules':>9} {'tensors':>9}" + (f" {'events':>8}" if dev == "cuda" else ""))
    for name, fn in rows.items():
        _arrays.exported = _capsule_export
        new = per_call_us(fn, args.calls, dev)
        _arrays.exported = _tensor_export
        old = per_call_us(fn, args.calls, dev)
        _arrays.exported = _capsule_export
        extra = f" {events_us(fn):8.1f}" if dev == "cuda" else ""
        print(f"{name:<20} {new:9.1f} {old:9.1f}{extra}")
    print(f"{'native decode':<20} {per_call_us(native, args.calls, dev):9.1f}")
    reference = per_call_us(lambda: torch.nn.functional.scaled_dot_product_attention(q4, k, v, enable_gqa=True),
                            args.calls, dev)
    print(f"{'torch sdpa':<20} {reference:9.1f}")


if __name__ == "__main__":
    main()
