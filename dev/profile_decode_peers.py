#!/usr/bin/env python3
"""One decode call of PyTorch SDPA (cuDNN or flash backend) inside an NVTX range "peer", for ncu
(development tool): the same shapes and cache layout as attnkit's decode sweep.

  ncu --nvtx --nvtx-include "peer/" --section SpeedOfLight ... \\
      python3 dev/profile_decode_peers.py --backend cudnn --batch 64 --kv-len 16384
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser()
ap.add_argument("--backend", choices=["cudnn", "flash"], default="cudnn")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--kv-len", type=int, default=16384)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--kv-heads", type=int, default=8)
ap.add_argument("--head-dim", type=int, default=128)
args = ap.parse_args()

dev = torch.device("cuda")
shape_kv = (args.batch, args.kv_heads, args.kv_len, args.head_dim)
q = torch.randn(args.batch, args.heads, 1, args.head_dim, device=dev, dtype=torch.bfloat16)
k = torch.randn(shape_kv, device=dev, dtype=torch.bfloat16)
v = torch.randn(shape_kv, device=dev, dtype=torch.bfloat16)
backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[args.backend]
with sdpa_kernel(backend):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("peer")
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
