"""attnkit.sdpa: torch.nn.functional.scaled_dot_product_attention's shape convention
([batch, heads, seq, head_dim]) on attnkit kernels. It plans on first sight of a shape and keeps
the plan (and its workspace) in a bounded cache, so repeated calls only run."""
from __future__ import annotations

import atexit
import collections
import threading
import weakref
from typing import Any, Optional

from . import _arrays, _compile
from . import _attnkit as _native
from ._ops import _maybe_torch_index, decode, prefill
from ._plan import Plan, plan_decode, plan_prefill

_CACHE_LIMIT = 512  # plans kept; a generation loop makes one per decode length
_cache: "collections.OrderedDict[tuple, tuple[Plan, Any]]" = collections.OrderedDict()
_cache_lock = threading.Lock()


def clear_plan_cache() -> None:
    """Forget every plan sdpa() made (and the workspaces they hold), and the f32 copies of sinks."""
    with _cache_lock:
        _cache.clear()
        _sinks_f32_kept.clear()


# Plans hold native objects: let them go before the interpreter tears the extension down.
atexit.register(clear_plan_cache)


def _cached(key: tuple, make) -> tuple[Plan, Any]:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    made = make()
    with _cache_lock:
        _cache[key] = made
        while len(_cache) > _CACHE_LIMIT:
            _cache.popitem(last=False)
    return made


def sdpa(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None, window: int = 0,
         softcap: float = 0.0, lengths: Any = None, out: Any = None, out_dtype: Any = None,
         family: Optional[str] = None, threads: int = 0, sinks: Any = None, key_starts: Any = None) -> Any:
    """Attention of q [batch, heads, q_len, head_dim] over k, v [batch, kv_heads, kv_len, head_dim]
    (kv_heads divides heads: grouped-query attention needs no repeat). With causal=True and
    q_len < kv_len the mask is bottom-right aligned (the queries are the last q_len positions).
    q_len == 1 runs the decode kernels; then `lengths` (int32 [batch]) may give each sequence's
    valid keys, k and v being caches of kv_len slots. scale None means 1/sqrt(head_dim).
    `out` may be any strided view of shape [batch, heads, q_len, head_dim] with head_dim
    contiguous (e.g. a [batch, q_len, heads, head_dim] buffer transposed): it is written in place.
    `sinks` [heads] (gpt-oss's attention sinks): one more logit per head in every row's softmax,
    with no value, folded in by the kernels (any float dtype; used as f32). `key_starts` (int32
    [batch] on q's device, q_len == 1 only, like lengths): left padding, so sequence b's query sees
    keys [key_starts[b], lengths[b]) only (attnkit.decode's key_starts). Returns out.

    Inside torch.compile, torch tensors go through the custom operators attnkit::sdpa (out None)
    and attnkit::sdpa_out (torch_ops.py), so the graph does not break here."""
    if _compile.tracing(q) and family is None and threads == 0 and out_dtype is None:
        scale_arg = 0.0 if scale is None else float(scale)
        if key_starts is not None:
            key_starts = _maybe_torch_index(key_starts, q)
        if out is None:
            return _compile.ops().sdpa(q, k, v, lengths, bool(causal), scale_arg, int(window), float(softcap), False,
                                       sinks, key_starts)
        _compile.ops().sdpa_out(q, k, v, lengths, out, bool(causal), scale_arg, int(window), float(softcap), sinks,
                                key_starts)
        return out
    if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        raise _native.Error(f"sdpa: q, k and v must be rank 4 [batch, heads, seq, head_dim], got "
                            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}. Fix: reshape to BHSD")
    o_dtype = (_arrays.array_dtype(out) if out is not None
               else _arrays.array_dtype(q) if out_dtype is None else _arrays.dtype_name(out_dtype))
    options = dict(causal=bool(causal), scale=0.0 if scale is None else float(scale), window=int(window),
                   softcap=float(softcap), lengths=lengths, family=family, threads=threads)
    if sinks is not None:
        sinks = _sinks_f32(sinks, q)
    return _attend(q, k, v, out=out, o_dtype=o_dtype, return_lse=False, sinks=sinks, key_starts=key_starts,
                   **options)


def _attend(q: Any, k: Any, v: Any, *, causal: bool, scale: float, window: int, softcap: float, lengths: Any,
            family: Optional[str], threads: int, out: Any, o_dtype: str, return_lse: bool, sinks: Any = None,
            key_starts: Any = None) -> Any:
    """sdpa's planned call (a cached plan per shape): out, or (out, lse [batch, heads, q_len]).
    A repeated shape costs a key and a dictionary lookup before the run: nothing else is built."""
    batch, heads, q_len, head_dim = q.shape
    _, kv_heads, kv_len, _ = k.shape
    kind, index = _arrays.device_of(q)
    q_dtype, kv_dtype = _arrays.array_dtype(q), _arrays.array_dtype(k)

    def common() -> dict:
        backend = "cuda" if kind == "cuda" else "cpu"
        return dict(batch=int(batch), num_heads=int(heads), kv_heads=int(kv_heads), head_dim=int(head_dim),
                    out_dtype=o_dtype, window=window, scale=scale, softcap=softcap, backend=backend, family=family,
                    threads=threads, device=index if backend == "cuda" else None)

    torch_like = _arrays.library(q) == "torch"
    if q_len == 1:
        key = ("decode", kind, index, batch, heads, kv_heads, head_dim, kv_len, q_dtype, kv_dtype, o_dtype,
               window, scale, softcap, family, threads)

        def make_decode():
            plan = plan_decode(max_seq=int(kv_len), kv_len=int(kv_len), kv_dtype=kv_dtype, q_dtype=q_dtype, **common())
            return plan, _arrays.index_array([int(kv_len)] * int(batch), q)

        plan, full_lengths = _cached(key, make_decode)
        rows = q.select(2, 0) if torch_like else q[:, :, 0, :]
        out_rows = None if out is None else out.select(2, 0) if torch_like else out[:, :, 0, :]
        result = decode(plan, rows, k, v, full_lengths if lengths is None else lengths, out=out_rows,
                        return_lse=return_lse, sinks=sinks, key_starts=key_starts)
        if return_lse:
            return result[0][:, :, None, :], result[1][:, :, None]
        if out is not None:
            return out
        return result.unsqueeze(2) if torch_like else result[:, :, None, :]

    if lengths is not None:
        raise _native.Error("sdpa: lengths is for decode (q_len == 1). Fix: pass k and v cut to the valid keys "
                            "for prefill, or use attnkit.prefill with cu_seqlens for ragged batches")
    if key_starts is not None:
        raise _native.Error(f"sdpa: key_starts (left padding) is for decode (q_len == 1), got q_len {q_len}. Fix: "
                            "for a padded prefill pack the valid rows and keys of each sequence and use "
                            "attnkit.prefill with cu_seqlens_q / cu_seqlens_k")
    if kv_dtype != q_dtype:
        raise _native.Error(f"sdpa: prefill needs q, k and v in one dtype, got q {q_dtype} and k {kv_dtype}. "
                            "Fix: convert them to one dtype")
    key = ("prefill", kind, index, batch, heads, kv_heads, head_dim, q_len, kv_len, causal, q_dtype, o_dtype,
           window, scale, softcap, family, threads)
    plan, _ = _cached(key, lambda: (plan_prefill(q_len=int(q_len), kv_len=int(kv_len), causal=causal, dtype=q_dtype,
                                                 **common()), None))
    return prefill(plan, q, k, v, out=out, return_lse=return_lse, sinks=sinks)


def ragged_prefill(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *, max_q_len: int, max_kv_len: int,
                   causal: bool = True, scale: Optional[float] = None, window: int = 0, softcap: float = 0.0,
                   out: Any = None, sinks: Any = None) -> Any:
    """attnkit.prefill of a ragged batch with a cached plan, as sdpa() plans: q [1, heads, total_q,
    head_dim], k, v [1, kv_heads, total_k, head_dim] (head_dim contiguous), cu_seqlens_q /
    cu_seqlens_k int32 [batch + 1] on q's device, max_q_len / max_kv_len the longest sequence's
    rows and keys (the plan's bounds; one plan per bound pair). Returns out shaped like q."""
    batch = int(cu_seqlens_q.shape[0]) - 1
    _, heads, _, head_dim = q.shape
    kv_heads = k.shape[1]
    kind, index = _arrays.device_of(q)
    dtype = _arrays.array_dtype(q)
    o_dtype = _arrays.array_dtype(out) if out is not None else dtype
    scale = 0.0 if scale is None else float(scale)
    backend = "cuda" if kind == "cuda" else "cpu"
    key = ("ragged_prefill", kind, index, batch, heads, kv_heads, head_dim, int(max_q_len), int(max_kv_len),
           bool(causal), dtype, o_dtype, int(window), scale, float(softcap))
    plan, _ = _cached(key, lambda: (plan_prefill(
        batch=batch, num_heads=int(heads), kv_heads=int(kv_heads), head_dim=int(head_dim), q_len=max(int(max_q_len), 1),
        kv_len=max(int(max_kv_len), 1), causal=bool(causal), dtype=dtype, out_dtype=o_dtype, window=int(window),
        scale=scale, softcap=float(softcap), backend=backend, device=index if backend == "cuda" else None), None))
    if sinks is not None:
        sinks = _sinks_f32(sinks, q)
    return prefill(plan, q, k, v, out=out, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, sinks=sinks)


def _sinks_f32(sinks: Any, q: Any) -> Any:
    """sinks as the kernels take them: f32 [heads], contiguous, an array of q's kind on q's device."""
    heads = int(q.shape[1])
    if tuple(int(s) for s in sinks.shape) != (heads,):
        raise _native.Error(f"sdpa: sinks has shape {tuple(sinks.shape)}, expected [{heads}] (one logit per query "
                            "head). Fix: pass one sink per query head")
    if _arrays.device_of(sinks) != _arrays.device_of(q) or _arrays.library(sinks) != _arrays.library(q):
        raise _native.Error("sdpa: sinks and q are not arrays of one library on one device. Fix: move sinks "
                            "to q's device as the same kind of array")
    lib = _arrays.library(sinks)
    if lib == "torch":
        import torch

        if sinks.dtype is torch.float32 and sinks.is_contiguous():
            return sinks.detach()
        return _torch_sinks_f32(sinks)
    if lib in ("numpy", "cupy"):
        xp = __import__(lib)
        return xp.ascontiguousarray(xp.asarray(sinks, dtype=xp.float32))
    raise _native.Error("sdpa: sinks need numpy, torch or cupy arrays. Fix: pass q, k, v and sinks as one of those")


# A model's sinks are a bf16 / f16 parameter read by every layer's call; casting them each call
# costs a kernel launch (~7 us of host time per sdpa on the H100 machine). The f32 copy is kept
# while the parameter is the same object, at the same address and version (an in-place update,
# load_state_dict's copy_ included, bumps the version). Inference tensors have no version
# counter: those are cast each call.
_SINKS_KEPT = 64
_sinks_f32_kept: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()


def _torch_sinks_f32(sinks: Any) -> Any:
    import torch

    try:
        version = sinks._version
    except RuntimeError:  # an inference tensor
        return sinks.detach().to(torch.float32).contiguous()
    key = id(sinks)
    with _cache_lock:
        kept = _sinks_f32_kept.get(key)
        if kept is not None:
            ref, ptr, kept_version, copy = kept
            if ref() is sinks and ptr == sinks.data_ptr() and kept_version == version:
                _sinks_f32_kept.move_to_end(key)
                return copy
    copy = sinks.detach().to(torch.float32).contiguous()
    with _cache_lock:
        _sinks_f32_kept[key] = (weakref.ref(sinks), sinks.data_ptr(), version, copy)
        while len(_sinks_f32_kept) > _SINKS_KEPT:
            _sinks_f32_kept.popitem(last=False)
    return copy
