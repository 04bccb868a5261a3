"""The runs. Tensors go to the native module through DLPack without copies; an output left as
None is allocated with the input's library on its device. CPU arrays run on the CPU backend,
CUDA arrays on the CUDA backend on the caller's current stream (torch's or cupy's)."""
from __future__ import annotations

from typing import Any, Optional

from . import _arrays
from . import _attnkit as _native
from ._plan import Plan


def _require_plan(plan: Any, kind: str, context: str) -> Plan:
    if not isinstance(plan, Plan) or plan.kind != kind:
        raise _native.Error(f"{context}: expected a {kind} plan, got {type(plan).__name__}"
                            f"{' (' + plan.kind + ')' if isinstance(plan, Plan) else ''}. "
                            f"Fix: make it with attnkit.plan_{kind}(...)")
    return plan


def _require_backend(plan: Plan, x: Any, context: str) -> None:
    kind, _ = _arrays.device_of(x)
    if kind != plan.backend:
        raise _native.Error(f"{context}: the tensors are on {kind} but the plan was made for the {plan.backend} "
                            f"backend. Fix: plan with backend={kind!r} (or move the tensors to {plan.backend})")


def _x(a: Any) -> Any:
    return _arrays.exported(a)


def decode(plan: Plan, q: Any, k_cache: Any, v_cache: Any, lengths: Any, out: Any = None, lse: Any = None,
           *, return_lse: bool = False) -> Any:
    """One decode step. q [batch, num_heads, head_dim]; k_cache, v_cache
    [batch, kv_heads, max_seq, head_dim]; lengths int32 [batch] (or a list / an int), the valid
    keys of each sequence. Returns out [batch, num_heads, head_dim] (and lse f32
    [batch, num_heads] with return_lse=True or lse given)."""
    _require_plan(plan, "decode", "decode")
    _require_backend(plan, q, "decode")
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    lengths = _arrays.index_array(lengths, q)
    _native.decode(plan._native, _x(q), _x(k_cache), _x(v_cache), _x(lengths), _x(out), _x(lse),
                   _x(plan.workspace(q)), _arrays.current_stream(q))
    return (out, lse) if lse is not None else out


def prefill(plan: Plan, q: Any, k: Any, v: Any, out: Any = None, lse: Any = None, *, cu_seqlens_q: Any = None,
            cu_seqlens_k: Any = None, return_lse: bool = False) -> Any:
    """Prefill attention. q [batch, num_heads, q_len, head_dim]; k, v
    [batch, kv_heads, kv_len, head_dim]; any strides with head_dim contiguous, so BHSD tensors
    and BSHD tensors viewed as BHSD (x.transpose(1, 2)) both work. Ragged batches pass
    cu_seqlens_q / cu_seqlens_k (int32 [batch + 1]) with q [1, heads, total_q, head_dim].
    Returns out shaped like q (and lse f32 [batch, num_heads, q_len])."""
    _require_plan(plan, "prefill", "prefill")
    _require_backend(plan, q, "prefill")
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    if cu_seqlens_q is not None:
        cu_seqlens_q = _arrays.index_array(cu_seqlens_q, q)
    if cu_seqlens_k is not None:
        cu_seqlens_k = _arrays.index_array(cu_seqlens_k, q)
    _native.prefill(plan._native, _x(q), _x(k), _x(v), _x(out), _x(lse), _x(cu_seqlens_q), _x(cu_seqlens_k),
                    _x(plan.workspace(q)), _arrays.current_stream(q))
    return (out, lse) if lse is not None else out


def append_kv(k_cache: Any, v_cache: Any, k_new: Any, v_new: Any, positions: Any) -> None:
    """Write one new token's K and/or V per sequence into the caches at positions[b].
    k_new, v_new [batch, kv_heads, head_dim] (either may be None, with its cache); caches
    [batch, kv_heads, max_seq, head_dim] are written in place."""
    like = k_new if k_new is not None else v_new
    if like is None:
        raise _native.Error("append_kv: neither k_new nor v_new was given. Fix: pass at least one of them")
    positions = _arrays.index_array(positions, like)
    _native.append_kv(_x(k_new), _x(v_new), _x(k_cache), _x(v_cache), _x(positions), _arrays.current_stream(like))


def apply_rope(x: Any, positions: Any, *, style: str = "half", theta: float = 10000.0, cos_table: Any = None,
               sin_table: Any = None) -> Any:
    """Rotary embedding in place on x [batch, heads, head_dim] at positions[b] (CPU arrays).
    style 'half' (Llama/NeoX: pairs d, d + head_dim/2) or 'interleaved' (GPT-J). Optional f32
    tables [positions, head_dim/2] replace theta. Returns x."""
    positions = _arrays.index_array(positions, x)
    _native.apply_rope(_x(x), _x(positions), style, float(theta), _x(cos_table), _x(sin_table))
    return x


def fused_rope_append_decode(plan: Plan, q: Any, k_new: Any, v_new: Any, k_cache: Any, v_cache: Any,
                             positions: Any, out: Any = None, lse: Any = None, *, style: str = "half",
                             theta: float = 10000.0, cos_table: Any = None, sin_table: Any = None,
                             return_lse: bool = False) -> Any:
    """Seed 000's fused step: RoPE on q and k_new (both un-rotated on input), append the rotated
    k_new and v_new at positions[b], attend over positions[b] + 1 keys. Returns out (and lse)."""
    _require_plan(plan, "decode", "fused_rope_append_decode")
    _require_backend(plan, q, "fused_rope_append_decode")
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    positions = _arrays.index_array(positions, q)
    _native.fused_rope_append_decode(plan._native, _x(q), _x(k_new), _x(v_new), _x(k_cache), _x(v_cache),
                                     _x(positions), _x(out), _x(lse), style, float(theta), _x(cos_table),
                                     _x(sin_table), _x(plan.workspace(q)), _arrays.current_stream(q))
    return (out, lse) if lse is not None else out


def merge_states(out_partial: Any, lse_partial: Any, out: Any = None, lse: Any = None, *,
                 return_lse: bool = False) -> Any:
    """Merge the partial states of key splits (CPU arrays): out_partial f32
    [splits, rows, head_dim] (each normalised over its split) and lse_partial f32 [splits, rows]
    into out [rows, head_dim] (f32 unless given) and lse [rows]."""
    if out is None:
        out = _arrays.empty(out_partial, tuple(out_partial.shape[1:]), "f32")
    if lse is None and return_lse:
        lse = _arrays.empty(out_partial, tuple(out_partial.shape[1:2]), "f32")
    _native.merge_states(_x(out_partial), _x(lse_partial), _x(out), _x(lse))
    return (out, lse) if lse is not None else out


def reference_decode(plan: Plan, q: Any, k_cache: Any, v_cache: Any, lengths: Any):
    """The float64 golden of decode on host arrays: (out, lse) as float64 numpy arrays."""
    _require_plan(plan, "decode", "reference_decode")
    lengths = _arrays.index_array(lengths, q)
    return _native.reference_decode(plan._native, _x(q), _x(k_cache), _x(v_cache), _x(lengths))


def reference_prefill(plan: Plan, q: Any, k: Any, v: Any, *, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None):
    """The float64 golden of prefill on host arrays: (out, lse) as float64 numpy arrays."""
    _require_plan(plan, "prefill", "reference_prefill")
    if cu_seqlens_q is not None:
        cu_seqlens_q = _arrays.index_array(cu_seqlens_q, q)
    if cu_seqlens_k is not None:
        cu_seqlens_k = _arrays.index_array(cu_seqlens_k, q)
    return _native.reference_prefill(plan._native, _x(q), _x(k), _x(v), _x(cu_seqlens_q), _x(cu_seqlens_k))
