"""The runs. Tensors go to the native module through DLPack without copies; an output left as
None is allocated with the input's library on its device. CPU arrays run on the CPU backend,
CUDA arrays on the CUDA backend on the caller's current stream (torch's or cupy's).

Checked here, before the native call: the plan's kind and backend, that required tensors are
arrays (not None), and that every tensor of a call lives on one device. Everything else (shapes,
dtypes, strides, index contents) is the C++ library's validation."""
from __future__ import annotations

from typing import Any, Optional

from . import _arrays, _compile
from . import _attnkit as _native
from ._plan import Plan


def _require_plan(plan: Any, kind: str, context: str) -> Plan:
    if not isinstance(plan, Plan) or plan.kind != kind:
        article = "an" if kind[0] in "aeiou" else "a"
        raise _native.Error(f"{context}: expected {article} {kind} plan, got {type(plan).__name__}"
                            f"{' (' + plan.kind + ')' if isinstance(plan, Plan) else ''}. "
                            f"Fix: make it with attnkit.plan_{kind}(...)")
    return plan


def _require_backend(plan: Plan, x: Any, context: str) -> None:
    kind, _ = _arrays.device_of(x)
    if kind != plan.backend:
        raise _native.Error(f"{context}: the tensors are on {kind} but the plan was made for the {plan.backend} "
                            f"backend. Fix: plan with backend={kind!r} (or move the tensors to {plan.backend})")


def _is_array(x: Any) -> bool:
    if x is None:
        return False
    try:
        _arrays.library(x)
    except TypeError:
        return False
    return True


def _require_arrays(context: str, **tensors: Any) -> None:
    """Each named tensor is a numpy, torch, cupy or DLPack array."""
    for name, x in tensors.items():
        if not _is_array(x):
            raise _native.Error(f"{context}: {name} is {'None' if x is None else type(x).__name__}, not an array. "
                                f"Fix: pass {name} as a numpy, torch or cupy array")


def _require_one_device(context: str, **tensors: Any) -> None:
    """Every tensor given (None skipped) is on the device of the first one."""
    first_name, first = None, None
    for name, x in tensors.items():
        if not _is_array(x):  # None, or an index given as a list (made on the right device later)
            continue
        where = _arrays.device_of(x)
        if first is None:
            first_name, first = name, where
        elif where != first:
            def text(d):
                return d[0] if d[0] == "cpu" else f"{d[0]}:{d[1]}"
            raise _native.Error(f"{context}: {name} is on {text(where)} but {first_name} is on {text(first)}. "
                                "Fix: put every tensor of one call on the same device")


def _as_torch_index(index: Any, like: Any) -> Any:
    """An int32 tensor on like's device (a list or tensor of positions), for the custom operators."""
    import torch

    return torch.as_tensor(index, dtype=torch.int32, device=like.device)


def _maybe_torch_index(index: Any, like: Any) -> Any:
    return None if index is None else _as_torch_index(index, like)


def _x(a: Any) -> Any:
    return _arrays.exported(a)


def decode(plan: Plan, q: Any, k_cache: Any, v_cache: Any, lengths: Any, out: Any = None, lse: Any = None,
           *, return_lse: bool = False, sinks: Any = None, k_scale: float = 1.0, v_scale: float = 1.0,
           key_starts: Any = None) -> Any:
    """One decode step. q [batch, num_heads, head_dim]; k_cache, v_cache
    [batch, kv_heads, max_seq, head_dim]; lengths int32 [batch] (or a list / an int), the valid
    keys of each sequence. Returns out [batch, num_heads, head_dim] (and lse f32
    [batch, num_heads] with return_lse=True or lse given). `sinks` (f32 [num_heads], on q's
    device): attention-sink logits, one more score per row whose value is zero (gpt-oss).
    `key_starts` (int32 [batch] or a list, on q's device like lengths): left padding
    (FlashAttention's cache_leftpad, what a left-padded batch leaves in a cache): sequence b's
    query sees keys [key_starts[b], lengths[b]) only (within the window, which still counts back
    from the query at lengths[b] - 1); a start at or past the length leaves no key (zeros, LSE
    -inf or the sink's). Values 0..kv_len of the plan (host values are checked; CUDA ones clamped).
    An e4m3 cache (a plan with kv_dtype='e4m3'; torch.float8_e4m3fn tensors or uint8 arrays of
    e4m3 bytes) holds stored values whose real values are x * k_scale (keys) and x * v_scale
    (values); the scales stay 1 for other caches."""
    if _compile.tracing(q) and isinstance(plan, Plan) and out is None and lse is None and sinks is None:
        o, l = _compile.ops().decode(plan.number, q, k_cache, v_cache, _as_torch_index(lengths, q), return_lse,
                                     float(k_scale), float(v_scale), _maybe_torch_index(key_starts, q))
        return (o, l) if return_lse else o
    _require_plan(plan, "decode", "decode")
    _require_arrays("decode", q=q, k_cache=k_cache, v_cache=v_cache)
    _require_one_device("decode", q=q, k_cache=k_cache, v_cache=v_cache, lengths=lengths, out=out, lse=lse,
                        key_starts=key_starts)
    _require_backend(plan, q, "decode")
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    lengths = _arrays.index_array(lengths, q)
    if key_starts is not None:
        key_starts = _arrays.index_array(key_starts, q)
    _native.decode(plan._native, _x(q), _x(k_cache), _x(v_cache), _x(lengths), _x(out), _x(lse),
                   _x(plan.workspace(q)), _arrays.current_stream(q), sinks=_x(sinks), k_scale=float(k_scale),
                   v_scale=float(v_scale), key_starts=_x(key_starts))
    return (out, lse) if lse is not None else out


def prefill(plan: Plan, q: Any, k: Any, v: Any, out: Any = None, lse: Any = None, *, cu_seqlens_q: Any = None,
            cu_seqlens_k: Any = None, return_lse: bool = False, q_scale: float = 1.0, k_scale: float = 1.0,
            v_scale: float = 1.0, sinks: Any = None) -> Any:
    """Prefill attention. q [batch, num_heads, q_len, head_dim]; k, v
    [batch, kv_heads, kv_len, head_dim]; any strides with head_dim contiguous, so BHSD tensors
    and BSHD tensors viewed as BHSD (x.transpose(1, 2)) both work. Ragged batches pass
    cu_seqlens_q / cu_seqlens_k (int32 [batch + 1]) with q [1, heads, total_q, head_dim].
    Returns out shaped like q (and lse f32 [batch, num_heads, q_len]).

    fp8: with a plan of dtype 'e4m3' (CUDA on Hopper, head_dim 128 or 256), q, k and v are
    torch.float8_e4m3fn tensors (or uint8 arrays of e4m3 bytes) and q_scale, k_scale, v_scale
    their per-tensor dequantization scales: the real value of a stored element x is x * scale
    (a quantizer that divided by s passes s). Scales must be finite and > 0, and stay 1.0 for
    f32/f16/bf16 inputs. out is f32, f16 or bf16 (the plan's out_dtype, bf16 by default).
    `sinks` (f32 [num_heads], on q's device): attention-sink logits, one more
    score per row whose value is zero (gpt-oss)."""
    if _compile.tracing(q) and isinstance(plan, Plan) and out is None and lse is None and sinks is None:
        o, l = _compile.ops().prefill(plan.number, q, k, v, _maybe_torch_index(cu_seqlens_q, q),
                                      _maybe_torch_index(cu_seqlens_k, q), return_lse, float(q_scale), float(k_scale),
                                      float(v_scale))
        return (o, l) if return_lse else o
    _require_plan(plan, "prefill", "prefill")
    _require_arrays("prefill", q=q, k=k, v=v)
    _require_one_device("prefill", q=q, k=k, v=v, out=out, lse=lse, cu_seqlens_q=cu_seqlens_q,
                        cu_seqlens_k=cu_seqlens_k)
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
                    _x(plan.workspace(q)), _arrays.current_stream(q), float(q_scale), float(k_scale), float(v_scale),
                    sinks=_x(sinks))
    return (out, lse) if lse is not None else out


def append_kv(k_cache: Any, v_cache: Any, k_new: Any, v_new: Any, positions: Any, *, k_scale: float = 1.0,
              v_scale: float = 1.0) -> None:
    """Write one new token's K and/or V per sequence into the caches at positions[b].
    k_new, v_new [batch, kv_heads, head_dim] (either may be None, with its cache); caches
    [batch, kv_heads, max_seq, head_dim] are written in place. An e4m3 cache takes f32/f16/bf16
    rows and stores e4m3(x / scale) (round to nearest even, saturating at +-448) with k_scale /
    v_scale, the scales decode is then given."""
    like = k_new if k_new is not None else v_new
    if like is None:
        raise _native.Error("append_kv: neither k_new nor v_new was given. Fix: pass at least one of them")
    if _compile.tracing(like) and k_new is not None and v_new is not None:
        _compile.ops().append_kv_(k_cache, v_cache, k_new, v_new, _as_torch_index(positions, like), float(k_scale),
                                  float(v_scale))
        return
    _require_one_device("append_kv", k_new=k_new, v_new=v_new, k_cache=k_cache, v_cache=v_cache, positions=positions)
    positions = _arrays.index_array(positions, like)
    _native.append_kv(_x(k_new), _x(v_new), _x(k_cache), _x(v_cache), _x(positions), _arrays.current_stream(like),
                      k_scale=float(k_scale), v_scale=float(v_scale))


def apply_rope(x: Any, positions: Any, *, style: str = "half", theta: float = 10000.0, cos_table: Any = None,
               sin_table: Any = None) -> Any:
    """Rotary embedding in place on x [batch, heads, head_dim] at positions[b] (CPU or CUDA; packed
    tokens [tokens, heads, head_dim] with a position per token work too). style 'half'
    (Llama/NeoX: pairs d, d + head_dim/2) or 'interleaved' (GPT-J). Optional f32 tables
    [positions, head_dim/2] on x's device replace theta. On CUDA the positions stay on the device
    unchecked: a negative one, or one past the tables, fills its rows with NaN. Returns x."""
    if _compile.tracing(x):
        _compile.ops().apply_rope_(x, _as_torch_index(positions, x), style, float(theta), cos_table, sin_table)
        return x
    _require_arrays("apply_rope", x=x)
    _require_one_device("apply_rope", x=x, positions=positions, cos_table=cos_table, sin_table=sin_table)
    positions = _arrays.index_array(positions, x)
    _native.apply_rope(_x(x), _x(positions), style, float(theta), _x(cos_table), _x(sin_table),
                       _arrays.current_stream(x))
    return x


def fused_rope_append_decode(plan: Plan, q: Any, k_new: Any, v_new: Any, k_cache: Any, v_cache: Any,
                             positions: Any, out: Any = None, lse: Any = None, *, style: str = "half",
                             theta: float = 10000.0, cos_table: Any = None, sin_table: Any = None,
                             return_lse: bool = False, sinks: Any = None) -> Any:
    """Seed 000's fused step: RoPE on q and k_new (both un-rotated on input), append the rotated
    k_new and v_new at positions[b], attend over positions[b] + 1 keys. Returns out (and lse).
    `sinks` (f32 [num_heads], on q's device): attention-sink logits, as in decode()."""
    if _compile.tracing(q) and isinstance(plan, Plan) and out is None and lse is None and sinks is None:
        o, l = _compile.ops().fused_rope_append_decode(plan.number, q, k_new, v_new, k_cache, v_cache,
                                                       _as_torch_index(positions, q), style, float(theta), cos_table,
                                                       sin_table, return_lse)
        return (o, l) if return_lse else o
    _require_plan(plan, "decode", "fused_rope_append_decode")
    _require_arrays("fused_rope_append_decode", q=q, k_new=k_new, v_new=v_new, k_cache=k_cache, v_cache=v_cache)
    _require_one_device("fused_rope_append_decode", q=q, k_new=k_new, v_new=v_new, k_cache=k_cache, v_cache=v_cache,
                        positions=positions, out=out, lse=lse)
    _require_backend(plan, q, "fused_rope_append_decode")
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    positions = _arrays.index_array(positions, q)
    _native.fused_rope_append_decode(plan._native, _x(q), _x(k_new), _x(v_new), _x(k_cache), _x(v_cache),
                                     _x(positions), _x(out), _x(lse), style, float(theta), _x(cos_table),
                                     _x(sin_table), _x(plan.workspace(q)), _arrays.current_stream(q), sinks=_x(sinks))
    return (out, lse) if lse is not None else out


def merge_states(out_partial: Any, lse_partial: Any, out: Any = None, lse: Any = None, *,
                 return_lse: bool = False) -> Any:
    """Merge partial attention states over key ranges attended apart (key splits, a shared prefix
    and each sequence's suffix as in cascade attention, shards), on the CPU or CUDA:
    out_partial [splits, rows, head_dim] (f32, f16 or bf16, each normalised over its range) and
    lse_partial f32 [splits, rows] into out [rows, head_dim] (f32 unless given) and lse [rows]."""
    if _compile.tracing(out_partial) and out is None and lse is None:
        merged, merged_lse = _compile.ops().merge_states(out_partial, lse_partial)
        return (merged, merged_lse) if return_lse else merged
    _require_arrays("merge_states", out_partial=out_partial, lse_partial=lse_partial)
    _require_one_device("merge_states", out_partial=out_partial, lse_partial=lse_partial, out=out, lse=lse)
    if out is None:
        out = _arrays.empty(out_partial, tuple(out_partial.shape[1:]), "f32")
    if lse is None and return_lse:
        lse = _arrays.empty(out_partial, tuple(out_partial.shape[1:2]), "f32")
    _native.merge_states(_x(out_partial), _x(lse_partial), _x(out), _x(lse), _arrays.current_stream(out_partial))
    return (out, lse) if lse is not None else out


def reference_decode(plan: Plan, q: Any, k_cache: Any, v_cache: Any, lengths: Any, *, sinks: Any = None,
                     k_scale: float = 1.0, v_scale: float = 1.0, key_starts: Any = None):
    """The float64 golden of decode on host arrays: (out, lse) as float64 numpy arrays; `sinks`
    (f32 [num_heads]), `key_starts` (int32 [batch] or a list: left padding, sequence b sees keys
    [key_starts[b], lengths[b]) only) and an e4m3 cache's k_scale / v_scale as in decode()."""
    _require_plan(plan, "decode", "reference_decode")
    _require_one_device("reference_decode", q=q, lengths=lengths, key_starts=key_starts)
    lengths = _arrays.index_array(lengths, q)
    if key_starts is not None:
        key_starts = _arrays.index_array(key_starts, q)
    return _native.reference_decode(plan._native, _x(q), _x(k_cache), _x(v_cache), _x(lengths), sinks=_x(sinks),
                                    k_scale=float(k_scale), v_scale=float(v_scale), key_starts=_x(key_starts))


def reference_prefill(plan: Plan, q: Any, k: Any, v: Any, *, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                      q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0, sinks: Any = None):
    """The float64 golden of prefill on host arrays: (out, lse) as float64 numpy arrays. e4m3
    inputs (an 'e4m3' plan) are read as stored value x their scale, as in prefill()."""
    _require_plan(plan, "prefill", "reference_prefill")
    if cu_seqlens_q is not None:
        cu_seqlens_q = _arrays.index_array(cu_seqlens_q, q)
    if cu_seqlens_k is not None:
        cu_seqlens_k = _arrays.index_array(cu_seqlens_k, q)
    return _native.reference_prefill(plan._native, _x(q), _x(k), _x(v), _x(cu_seqlens_q), _x(cu_seqlens_k),
                                     float(q_scale), float(k_scale), float(v_scale), sinks=_x(sinks))


# ---------------------------------------------------------------- paged cache (docs/paged.md)

def paged_decode(plan: Plan, q: Any, k_pages: Any, v_pages: Any, page_table: Any, lengths: Any, out: Any = None,
                 lse: Any = None, *, return_lse: bool = False, sinks: Any = None, k_scale: float = 1.0,
                 v_scale: float = 1.0) -> Any:
    """Decode against a paged cache. q [batch, num_heads, head_dim]; k_pages, v_pages the page
    pools in the plan's layout (HND [num_pages, kv_heads, page_size, head_dim] or NHD
    [num_pages, page_size, kv_heads, head_dim]); page_table int32 [batch, max_pages_per_seq]
    (key j of sequence b is in page page_table[b, j // page_size]); lengths int32 [batch] (or a
    list), each sequence's keys. Returns out [batch, num_heads, head_dim] (and lse f32
    [batch, num_heads] with return_lse=True or lse given). `sinks` (f32 [num_heads], on q's
    device): attention-sink logits, one more score per row whose value is zero (gpt-oss).
    e4m3 pools (a plan with kv_dtype='e4m3'; torch.float8_e4m3fn tensors or uint8 arrays of e4m3
    bytes) hold stored values whose real values are x * k_scale (keys) and x * v_scale (values),
    as decode()'s e4m3 cache; the scales stay 1 for other pools."""
    context = "paged_decode"
    if _compile.tracing(q) and isinstance(plan, Plan) and out is None and lse is None and sinks is None:
        o, l = _compile.ops().paged_decode(plan.number, q, k_pages, v_pages, page_table, _as_torch_index(lengths, q),
                                           return_lse, float(k_scale), float(v_scale))
        return (o, l) if return_lse else o
    _require_plan(plan, "paged_decode", context)
    _require_arrays(context, q=q, k_pages=k_pages, v_pages=v_pages, page_table=page_table)
    _require_one_device(context, q=q, k_pages=k_pages, v_pages=v_pages, page_table=page_table, lengths=lengths,
                        out=out, lse=lse)
    _require_backend(plan, q, context)
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    lengths = _arrays.index_array(lengths, q)
    _native.paged_decode(plan._native, _x(q), _x(k_pages), _x(v_pages), _x(page_table), _x(lengths), _x(out),
                         _x(lse), _x(plan.workspace(q)), _arrays.current_stream(q), sinks=_x(sinks),
                         k_scale=float(k_scale), v_scale=float(v_scale))
    return (out, lse) if lse is not None else out


def extend(plan: Plan, q: Any, cu_seqlens_q: Any, k_pages: Any, v_pages: Any, page_table: Any, lengths: Any,
           out: Any = None, lse: Any = None, *, return_lse: bool = False, sinks: Any = None, k_scale: float = 1.0,
           v_scale: float = 1.0) -> Any:
    """Multi-token queries against a paged cache (chunked prefill, speculative verification).
    q [rows, num_heads, head_dim] packs q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b] new rows per
    sequence (cu_seqlens_q int32 [batch + 1], starting at 0); they are the last q_len_b of the
    sequence's lengths[b] keys, so append them first (paged_append_kv). Causal, bottom-right
    aligned. Returns out shaped like q (and lse f32 [rows, num_heads]); rows past
    cu_seqlens_q[batch] are not written (an allocated out keeps whatever was there). `sinks`
    (f32 [num_heads], on q's device): attention-sink logits, one more score per row whose value
    is zero (gpt-oss). e4m3 pools and their k_scale / v_scale as in paged_decode()."""
    context = "extend"
    if _compile.tracing(q) and isinstance(plan, Plan) and out is None and lse is None and sinks is None:
        o, l = _compile.ops().extend(plan.number, q, _as_torch_index(cu_seqlens_q, q), k_pages, v_pages, page_table,
                                     _as_torch_index(lengths, q), return_lse, float(k_scale), float(v_scale))
        return (o, l) if return_lse else o
    _require_plan(plan, "extend", context)
    _require_arrays(context, q=q, k_pages=k_pages, v_pages=v_pages, page_table=page_table)
    _require_one_device(context, q=q, cu_seqlens_q=cu_seqlens_q, k_pages=k_pages, v_pages=v_pages,
                        page_table=page_table, lengths=lengths, out=out, lse=lse)
    _require_backend(plan, q, context)
    if out is None:
        out = _arrays.empty(q, q.shape, plan.out_dtype)
    if lse is None and return_lse:
        lse = _arrays.empty(q, tuple(q.shape[:-1]), "f32")
    cu_seqlens_q = _arrays.index_array(cu_seqlens_q, q)
    lengths = _arrays.index_array(lengths, q)
    _native.extend(plan._native, _x(q), _x(cu_seqlens_q), _x(k_pages), _x(v_pages), _x(page_table), _x(lengths),
                   _x(out), _x(lse), _x(plan.workspace(q)), _arrays.current_stream(q), sinks=_x(sinks),
                   k_scale=float(k_scale), v_scale=float(v_scale))
    return (out, lse) if lse is not None else out


def paged_append_kv(k_pages: Any, v_pages: Any, k_new: Any, v_new: Any, page_table: Any, start_positions: Any,
                    cu_seqlens_new: Any = None, *, layout: Any = "HND", k_scale: float = 1.0,
                    v_scale: float = 1.0) -> None:
    """Write new K and/or V rows into the page pools in place. k_new, v_new [rows, kv_heads, head_dim]
    token-major (either may be None, with its pool); sequence b's rows
    cu_seqlens_new[b] .. cu_seqlens_new[b+1] - 1 go to positions start_positions[b], +1, ...,
    crossing pages through page_table [batch, max_pages_per_seq]. cu_seqlens_new None means one new
    token per sequence (rows == batch). layout is 'HND' or 'NHD', or a paged plan whose cache
    (layout, pages, page size, table width) the pools and table must match. Nothing is written when
    any token would land outside its table row, the pool, or on another new token's slot. An e4m3
    pool (torch.float8_e4m3fn, or uint8 arrays of e4m3 bytes) takes f32/f16/bf16 rows and stores
    e4m3(x / scale) (round to nearest even, saturating at +-448) with k_scale / v_scale, the scales
    paged_decode is then given, as append_kv's e4m3 cache."""
    context = "paged_append_kv"
    rows = k_new if k_new is not None else v_new
    if rows is None:
        raise _native.Error(f"{context}: neither k_new nor v_new was given. Fix: pass at least one of them")
    if _compile.tracing(rows) and k_new is not None and v_new is not None:
        is_plan = isinstance(layout, Plan)
        _compile.ops().paged_append_kv_(k_pages, v_pages, k_new, v_new, page_table,
                                        _as_torch_index(start_positions, rows),
                                        _maybe_torch_index(cu_seqlens_new, rows), "" if is_plan else str(layout),
                                        layout.number if is_plan else -1, float(k_scale), float(v_scale))
        return
    pool = k_pages if k_new is not None else v_pages
    _require_arrays(context, **({"k_new": k_new, "k_pages": k_pages} if k_new is not None else {}),
                    **({"v_new": v_new, "v_pages": v_pages} if v_new is not None else {}), page_table=page_table)
    _require_one_device(context, k_new=k_new, v_new=v_new, k_pages=k_pages, v_pages=v_pages, page_table=page_table,
                        start_positions=start_positions, cu_seqlens_new=cu_seqlens_new)
    if isinstance(layout, Plan):
        if not layout.paged:
            raise _native.Error(f"{context}: layout is a {layout.kind} plan, which has no page pool. Fix: pass "
                                "layout='HND' / 'NHD' or a plan made with plan_paged_decode / plan_extend")
        cache = layout.cache
        spec = (cache["layout"], cache["num_pages"], cache["page_size"], cache["max_pages_per_seq"])
    else:
        if len(pool.shape) != 4 or len(page_table.shape) != 2:
            raise _native.Error(f"{context}: the pool has shape {tuple(pool.shape)} and page_table "
                                f"{tuple(page_table.shape)}. Fix: pass rank-4 pools (HND [num_pages, kv_heads, "
                                "page_size, head_dim] or NHD [num_pages, page_size, kv_heads, head_dim]) and an int32 "
                                "[batch, max_pages_per_seq] page_table")
        name = str(layout).upper()
        page_size = int(pool.shape[2] if name == "HND" else pool.shape[1])
        spec = (str(layout), int(pool.shape[0]), page_size, int(page_table.shape[1]))
    if cu_seqlens_new is None:
        batch, count = int(page_table.shape[0]), int(rows.shape[0]) if len(rows.shape) else -1
        if count != batch:
            raise _native.Error(f"{context}: {count} new rows for {batch} sequences and no cu_seqlens_new. Fix: pass "
                                "cu_seqlens_new (int32 [batch + 1]) for several tokens per sequence, or one row per "
                                "sequence")
        cu_seqlens_new = list(range(batch + 1))
    cu_seqlens_new = _arrays.index_array(cu_seqlens_new, rows)
    start_positions = _arrays.index_array(start_positions, rows)
    _native.paged_append_kv(*spec, _x(k_new), _x(v_new), _x(cu_seqlens_new), _x(start_positions), _x(k_pages),
                            _x(v_pages), _x(page_table), _arrays.current_stream(rows), k_scale=float(k_scale),
                            v_scale=float(v_scale))


def reference_paged_decode(plan: Plan, q: Any, k_pages: Any, v_pages: Any, page_table: Any, lengths: Any, *,
                           k_scale: float = 1.0, v_scale: float = 1.0):
    """The float64 golden of paged decode on host arrays: (out, lse) as float64 numpy arrays; an
    e4m3 pool's k_scale / v_scale as in paged_decode()."""
    _require_plan(plan, "paged_decode", "reference_paged_decode")
    lengths = _arrays.index_array(lengths, q)
    return _native.reference_paged_decode(plan._native, _x(q), _x(k_pages), _x(v_pages), _x(page_table), _x(lengths),
                                          k_scale=float(k_scale), v_scale=float(v_scale))


def reference_extend(plan: Plan, q: Any, cu_seqlens_q: Any, k_pages: Any, v_pages: Any, page_table: Any,
                     lengths: Any, *, k_scale: float = 1.0, v_scale: float = 1.0):
    """The float64 golden of extend on host arrays: (out [cu_seqlens_q[batch], num_heads, head_dim],
    lse [cu_seqlens_q[batch], num_heads]) as float64 numpy arrays; an e4m3 pool's k_scale / v_scale
    as in paged_decode()."""
    _require_plan(plan, "extend", "reference_extend")
    cu_seqlens_q = _arrays.index_array(cu_seqlens_q, q)
    lengths = _arrays.index_array(lengths, q)
    return _native.reference_extend(plan._native, _x(q), _x(cu_seqlens_q), _x(k_pages), _x(v_pages), _x(page_table),
                                    _x(lengths), k_scale=float(k_scale), v_scale=float(v_scale))
