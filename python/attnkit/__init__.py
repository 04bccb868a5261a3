"""attnkit: attention kernels for LLM inference. Plan once, run on CPU or NVIDIA GPU, check
against the float64 golden.

    import attnkit, numpy as np
    plan = attnkit.plan_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, max_seq=1024, kv_dtype="f32")
    print(plan)                       # the planner's table: family, splits, bytes, FLOPs, reasons
    out = attnkit.decode(plan, q, k_cache, v_cache, lengths)

Paged caches (serving layouts, docs/paged.md): plan_paged_decode / plan_extend, then
paged_append_kv, paged_decode and extend over page pools read through an int32 page table.

Tensors are numpy, torch or cupy arrays, passed through DLPack without copies. CPU arrays run
on the CPU backend; CUDA arrays on the CUDA backend, on torch's (or cupy's) current stream.
Rejected calls raise attnkit.Error (a ValueError) whose message ends with "Fix: ...".
"""
from __future__ import annotations

from . import _attnkit
from ._attnkit import (Error, Target, advise_huge_pages, cpu_target, cuda_built, cuda_device_count, cuda_target,
                       known_target)
from ._ops import (append_kv, apply_rope, decode, extend, fused_rope_append_decode, merge_states, paged_append_kv,
                   paged_decode, prefill, reference_decode, reference_extend, reference_paged_decode,
                   reference_prefill)
from ._plan import Plan, plan_decode, plan_extend, plan_paged_decode, plan_prefill
from ._sdpa import clear_plan_cache, sdpa

__version__: str = _attnkit.__version__  # include/attnkit/version.hpp

__all__ = [
    "Error", "Plan", "Target",
    "plan_decode", "plan_prefill", "plan_paged_decode", "plan_extend",
    "cpu_target", "cuda_target", "known_target", "cuda_built", "cuda_device_count",
    "decode", "prefill", "append_kv", "apply_rope", "fused_rope_append_decode", "merge_states",
    "paged_decode", "extend", "paged_append_kv",
    "reference_decode", "reference_prefill", "reference_paged_decode", "reference_extend",
    "sdpa", "clear_plan_cache", "advise_huge_pages",
]
