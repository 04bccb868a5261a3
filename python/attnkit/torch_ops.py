"""attnkit's calls as PyTorch custom operators (torch.library), so that torch.compile, fullgraph
included, sees one opaque node per call instead of breaking the graph at the native call, and a
compiled model can be captured in a CUDA graph.

    import attnkit.torch_ops          # registers torch.ops.attnkit.* (done by attnkit.sdpa & co.
                                      # on their first call inside torch.compile)
    torch.ops.attnkit.sdpa(q, k, v, None, True, 0.0, 0, 0.0, False)   # [batch, heads, q_len, head_dim]

You rarely call these directly: attnkit's run functions (sdpa, decode, prefill, paged_decode,
extend, fused_rope_append_decode, paged_append_kv, append_kv, apply_rope, merge_states) on torch
tensors take this path by themselves while torch.compile traces them (and the transformers
backend runs through attnkit.sdpa); docs/python.md says which arguments keep a call eager.
Each operator's fake implementation gives the output's shape, dtype and strides without running
anything; the real one runs attnkit's kernels on the tensors' device and torch's current stream.
Plans are made on first sight of a shape and cached (attnkit.clear_plan_cache), so warm a shape
up before capturing it in a CUDA graph.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _arrays, _ops, _sdpa
from . import _attnkit as _native
from . import _plan as _plan_mod

_LIB = "attnkit"


def _sdpa_out_shape(q: torch.Tensor, seq_major: bool) -> torch.Tensor:
    batch, heads, q_len, head_dim = q.shape
    if seq_major:  # [batch, q_len, heads, head_dim] memory, returned as its BHSD view
        return q.new_empty((batch, q_len, heads, head_dim)).transpose(1, 2)
    return q.new_empty((batch, heads, q_len, head_dim))


@torch.library.custom_op(f"{_LIB}::sdpa", mutates_args=(), device_types=("cpu", "cuda"))
def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Optional[torch.Tensor], causal: bool,
         scale: float, window: int, softcap: float, seq_major: bool,
         sinks: Optional[torch.Tensor] = None, key_starts: Optional[torch.Tensor] = None) -> torch.Tensor:
    """attnkit.sdpa out of place: q [batch, heads, q_len, head_dim], k and v [batch, kv_heads,
    kv_len, head_dim]; scale 0 means 1/sqrt(head_dim); sinks [heads] or None; key_starts int32
    [batch] (left padding, q_len == 1 only) or None. Returns [batch, heads, q_len, head_dim],
    laid out [batch, q_len, heads, head_dim] in memory when seq_major (the layout models read)."""
    out = _sdpa_out_shape(q, seq_major)
    _sdpa.sdpa(q, k, v, causal=causal, scale=scale or None, window=window, softcap=softcap, lengths=lengths,
               out=out, sinks=sinks, key_starts=key_starts)
    return out


@sdpa.register_fake
def _(q, k, v, lengths, causal, scale, window, softcap, seq_major, sinks=None, key_starts=None):
    return _sdpa_out_shape(q, seq_major)


@torch.library.custom_op(f"{_LIB}::sdpa_out", mutates_args=("out",), device_types=("cpu", "cuda"))
def sdpa_out(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: Optional[torch.Tensor], out: torch.Tensor,
             causal: bool, scale: float, window: int, softcap: float, sinks: Optional[torch.Tensor] = None,
             key_starts: Optional[torch.Tensor] = None) -> None:
    """attnkit.sdpa into `out` (any strided [batch, heads, q_len, head_dim] view, head_dim contiguous)."""
    _sdpa.sdpa(q, k, v, causal=causal, scale=scale or None, window=window, softcap=softcap, lengths=lengths,
               out=out, sinks=sinks, key_starts=key_starts)


@sdpa_out.register_fake
def _(q, k, v, lengths, out, causal, scale, window, softcap, sinks=None, key_starts=None):
    return None


@torch.library.custom_op(f"{_LIB}::apply_rope_", mutates_args=("x",), device_types=("cpu", "cuda"))
def apply_rope_(x: torch.Tensor, positions: torch.Tensor, style: str, theta: float,
                cos_table: Optional[torch.Tensor], sin_table: Optional[torch.Tensor]) -> None:
    """attnkit.apply_rope: x [batch, heads, head_dim] rotated in place at positions[b]."""
    _ops.apply_rope(x, positions, style=style, theta=theta, cos_table=cos_table, sin_table=sin_table)


@apply_rope_.register_fake
def _(x, positions, style, theta, cos_table, sin_table):
    return None


@torch.library.custom_op(f"{_LIB}::append_kv_", mutates_args=("k_cache", "v_cache"), device_types=("cpu", "cuda"))
def append_kv_(k_cache: torch.Tensor, v_cache: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
               positions: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """attnkit.append_kv with both K and V: one token's rows per sequence written at positions[b]
    (quantized with k_scale / v_scale into e4m3 caches; 1 for others)."""
    _ops.append_kv(k_cache, v_cache, k_new, v_new, positions, k_scale=k_scale, v_scale=v_scale)


@append_kv_.register_fake
def _(k_cache, v_cache, k_new, v_new, positions, k_scale=1.0, v_scale=1.0):
    return None


@torch.library.custom_op(f"{_LIB}::merge_states", mutates_args=(), device_types=("cpu", "cuda"))
def merge_states(out_partial: torch.Tensor, lse_partial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.merge_states: partial states [splits, rows, head_dim] and LSEs [splits, rows] merged
    into (out f32 [rows, head_dim], lse f32 [rows])."""
    out = out_partial.new_empty(out_partial.shape[1:], dtype=torch.float32)
    lse = out_partial.new_empty(out_partial.shape[1:2], dtype=torch.float32)
    _ops.merge_states(out_partial, lse_partial, out, lse)
    return out, lse


@merge_states.register_fake
def _(out_partial, lse_partial):
    return (out_partial.new_empty(out_partial.shape[1:], dtype=torch.float32),
            out_partial.new_empty(out_partial.shape[1:2], dtype=torch.float32))


# ---------------------------------------------------------------- calls that take a plan
# A plan enters an operator as its number (Plan.number); the operator looks it up among the live
# plans, so keep every plan alive while compiled code that uses it can run. Each of these returns
# (out, lse), lse being empty (shape [0]) unless return_lse.

def _plan(number: int):
    plan = _plan_mod.plan_by_number(number)
    if plan is None:
        raise _native.Error(f"attnkit: compiled code refers to plan number {number}, which was freed. Fix: keep "
                            "every Plan alive while compiled code that uses it can run")
    return plan


def _outputs(plan_number: int, q: torch.Tensor, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    out = q.new_empty(q.shape, dtype=_arrays._torch_dtype(_plan(plan_number).out_dtype))
    lse = q.new_empty(tuple(q.shape[:-1]) if return_lse else (0,), dtype=torch.float32)
    return out, lse


@torch.library.custom_op(f"{_LIB}::decode", mutates_args=(), device_types=("cpu", "cuda"))
def decode(plan: int, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
           return_lse: bool, k_scale: float = 1.0, v_scale: float = 1.0,
           key_starts: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.decode(plan, q, k_cache, v_cache, lengths, k_scale=, v_scale=, key_starts=)."""
    out, lse = _outputs(plan, q, return_lse)
    _ops.decode(_plan(plan), q, k_cache, v_cache, lengths, out=out, lse=lse if return_lse else None,
                k_scale=k_scale, v_scale=v_scale, key_starts=key_starts)
    return out, lse


@decode.register_fake
def _(plan, q, k_cache, v_cache, lengths, return_lse, k_scale=1.0, v_scale=1.0, key_starts=None):
    return _outputs(plan, q, return_lse)


@torch.library.custom_op(f"{_LIB}::prefill", mutates_args=(), device_types=("cpu", "cuda"))
def prefill(plan: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
            cu_seqlens_k: Optional[torch.Tensor], return_lse: bool, q_scale: float, k_scale: float,
            v_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.prefill(plan, q, k, v, ...)."""
    out, lse = _outputs(plan, q, return_lse)
    _ops.prefill(_plan(plan), q, k, v, out=out, lse=lse if return_lse else None, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k=cu_seqlens_k, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)
    return out, lse


@prefill.register_fake
def _(plan, q, k, v, cu_seqlens_q, cu_seqlens_k, return_lse, q_scale, k_scale, v_scale):
    return _outputs(plan, q, return_lse)


@torch.library.custom_op(f"{_LIB}::paged_decode", mutates_args=(), device_types=("cpu", "cuda"))
def paged_decode(plan: int, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, page_table: torch.Tensor,
                 lengths: torch.Tensor, return_lse: bool, k_scale: float = 1.0,
                 v_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.paged_decode(plan, q, k_pages, v_pages, page_table, lengths, k_scale=, v_scale=)
    (the scales of e4m3 pools, 1 for others)."""
    out, lse = _outputs(plan, q, return_lse)
    _ops.paged_decode(_plan(plan), q, k_pages, v_pages, page_table, lengths, out=out,
                      lse=lse if return_lse else None, k_scale=k_scale, v_scale=v_scale)
    return out, lse


@paged_decode.register_fake
def _(plan, q, k_pages, v_pages, page_table, lengths, return_lse, k_scale=1.0, v_scale=1.0):
    return _outputs(plan, q, return_lse)


@torch.library.custom_op(f"{_LIB}::extend", mutates_args=(), device_types=("cpu", "cuda"))
def extend(plan: int, q: torch.Tensor, cu_seqlens_q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
           page_table: torch.Tensor, lengths: torch.Tensor, return_lse: bool, k_scale: float = 1.0,
           v_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.extend(plan, q, cu_seqlens_q, k_pages, v_pages, page_table, lengths, k_scale=,
    v_scale=); rows past cu_seqlens_q[batch] are left as allocated (uninitialised)."""
    out, lse = _outputs(plan, q, return_lse)
    _ops.extend(_plan(plan), q, cu_seqlens_q, k_pages, v_pages, page_table, lengths, out=out,
                lse=lse if return_lse else None, k_scale=k_scale, v_scale=v_scale)
    return out, lse


@extend.register_fake
def _(plan, q, cu_seqlens_q, k_pages, v_pages, page_table, lengths, return_lse, k_scale=1.0, v_scale=1.0):
    return _outputs(plan, q, return_lse)


@torch.library.custom_op(f"{_LIB}::paged_append_kv_", mutates_args=("k_pages", "v_pages"),
                         device_types=("cpu", "cuda"))
def paged_append_kv_(k_pages: torch.Tensor, v_pages: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                     page_table: torch.Tensor, start_positions: torch.Tensor, cu_seqlens_new: Optional[torch.Tensor],
                     layout: str, plan: int, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """attnkit.paged_append_kv with K and V; `plan` >= 0 names a paged plan given as the layout;
    k_scale / v_scale quantize the rows into e4m3 pools (1 for others)."""
    _ops.paged_append_kv(k_pages, v_pages, k_new, v_new, page_table, start_positions, cu_seqlens_new,
                         layout=_plan(plan) if plan >= 0 else layout, k_scale=k_scale, v_scale=v_scale)


@paged_append_kv_.register_fake
def _(k_pages, v_pages, k_new, v_new, page_table, start_positions, cu_seqlens_new, layout, plan, k_scale=1.0,
      v_scale=1.0):
    return None


@torch.library.custom_op(f"{_LIB}::fused_rope_append_decode", mutates_args=("k_cache", "v_cache"),
                         device_types=("cpu", "cuda"))
def fused_rope_append_decode(plan: int, q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                             k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, style: str,
                             theta: float, cos_table: Optional[torch.Tensor], sin_table: Optional[torch.Tensor],
                             return_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """attnkit.fused_rope_append_decode(plan, ...): the caches gain the rotated k_new and v_new."""
    out, lse = _outputs(plan, q, return_lse)
    _ops.fused_rope_append_decode(_plan(plan), q, k_new, v_new, k_cache, v_cache, positions, out=out,
                                  lse=lse if return_lse else None, style=style, theta=theta, cos_table=cos_table,
                                  sin_table=sin_table)
    return out, lse


@fused_rope_append_decode.register_fake
def _(plan, q, k_new, v_new, k_cache, v_cache, positions, style, theta, cos_table, sin_table, return_lse):
    return _outputs(plan, q, return_lse)
