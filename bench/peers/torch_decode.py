#!/usr/bin/env python3
"""PyTorch SDPA decode peers, measured under attnkit's GPU protocol (DESIGN.md).

One query token per sequence, q [B, H, 1, D] against K/V [B, Hkv, L, D] (the same cache layout as
attnkit's), grouped-query attention through enable_gqa=True, with SDPA's flash and cuDNN backends
(and its math backend for f32 caches, which flash and cuDNN do not take). Timing: warm-up, then
`reps` repetitions, each after a 256 MiB memset that flushes the L2, CUDA events around the call
alone, median / min / max. Points whose cache exceeds 40 GB are skipped, as in attnkit's sweep.

  python3 bench/peers/torch_decode.py [--batch 1,16,64,256] [--kv-len 1024,...] [--dtype bf16,f32]
                                      [--reps 50] > peers.json
Prints one JSON document: {"device", "torch", "cudnn", "command", "rows": [...]}.
"""
import argparse
import json
import math
import sys

from event_timing import time_events, warm_up_device  # the shared protocol (same folder)

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

FLUSH_BYTES = 256 << 20
MAX_CASE_BYTES = 40e9
# f32 through the math backend materialises scores; keep it to sizes that finish quickly.
MAX_MATH_BYTES = 2.2e9

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=ints, default=[1, 16, 64, 256])
    ap.add_argument("--kv-len", type=ints, default=[1024, 4096, 16384, 65536])
    ap.add_argument("--dtype", default="bf16,f32")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    warm_up_device(torch)
    rows = []
    H, G, D = args.heads, args.kv_heads, args.head_dim
    for dname in args.dtype.split(","):
        dt = DTYPES[dname]
        es = torch.tensor([], dtype=dt).element_size()
        for B in args.batch:
            for L in args.kv_len:
                kv_bytes = 2.0 * B * G * L * D * es
                base = {"op": "decode", "batch": B, "num_heads": H, "kv_heads": G, "head_dim": D, "kv_len": L,
                        "dtype": dname, "kv_bytes": kv_bytes}
                if kv_bytes > MAX_CASE_BYTES:
                    for name in ("flash", "cudnn"):
                        rows.append(dict(base, impl="torch-" + name, skipped="K/V cache over 40 GB"))
                    continue
                print(f"torch decode {dname} b{B} kv{L}", file=sys.stderr, flush=True)
                q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
                k = torch.randn(B, G, L, D, device=dev, dtype=dt)
                v = torch.randn(B, G, L, D, device=dev, dtype=dt)
                names = ["flash", "cudnn"] + (["math"] if dt == torch.float32 else [])
                for name in names:
                    row = dict(base, impl="torch-" + name, timing="events")
                    if name == "math" and kv_bytes > MAX_MATH_BYTES:
                        row["skipped"] = "math backend limited to 2.2 GB caches (it materialises scores)"
                        rows.append(row)
                        continue
                    try:
                        with sdpa_kernel(BACKENDS[name]):
                            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                            fn()
                            med, lo, hi = time_events(torch, fn, args.reps, args.warmup, flush)
                        row.update(median_s=med, min_s=lo, max_s=hi, repetitions=args.reps,
                                   kv_read_bytes_per_s=kv_bytes / med)
                    except Exception as e:  # a backend that does not take this dtype/shape
                        row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    rows.append(row)
                del q, k, v
                torch.cuda.empty_cache()
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "command": " ".join(sys.argv), "rows": rows}
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
