"""Planning from Python: attnkit.plan_decode / plan_prefill (contiguous caches) and
plan_paged_decode / plan_extend (paged caches) return a Plan, which prints as the planner's
table, converts to a dict or JSON, and owns the workspace its runs need."""
from __future__ import annotations

import itertools
import json
import threading
import weakref
from typing import Any, Optional, Union

from . import _arrays
from . import _attnkit as _native

TargetLike = Union[None, str, "_native.Target"]

# Every live plan by a number of its own: torch custom operators (torch_ops.py) take plans as this
# number, since an operator's arguments are tensors and scalars. Weak: a plan lives as long as its
# owner keeps it.
_plan_numbers = itertools.count()
_live_plans: "weakref.WeakValueDictionary[int, Plan]" = weakref.WeakValueDictionary()


def plan_by_number(number: int) -> Optional["Plan"]:
    """The live plan with this number (Plan.number), or None once it was freed."""
    return _live_plans.get(number)

_KINDS = {_native.DecodePlan: "decode", _native.PrefillPlan: "prefill", _native.PagedDecodePlan: "paged_decode",
          _native.ExtendPlan: "extend"}


class Plan:
    """A decode, prefill, paged decode or extend plan: the kernel family, the work partition, the workspace and the
    evidence (bytes, FLOPs, occupancy, tolerance). Runs read it; nothing re-decides.

    The workspace (split states) is allocated on first use per device, with the library of the
    first tensors run on that device, and kept for the plan's life. Runs that share a plan must
    not overlap in time on different streams (they would share the workspace)."""

    def __init__(self, native: Any):
        self._native = native
        self._workspaces: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()
        problem = json.loads(native.to_json())["problem"]
        self.out_dtype: str = problem["out_dtype"]  # read on every run, so kept parsed
        self.number: int = next(_plan_numbers)  # how torch custom operators name it
        _live_plans[self.number] = self

    @property
    def kind(self) -> str:
        """'decode', 'prefill', 'paged_decode' or 'extend'."""
        return _KINDS[type(self._native)]

    @property
    def paged(self) -> bool:
        """Whether the plan reads a paged cache (paged_decode, extend)."""
        return self.kind in ("paged_decode", "extend")

    @property
    def cache(self) -> Optional[dict]:
        """The page pool a paged plan was made for (layout, num_pages, page_size,
        max_pages_per_seq, capacity); None for a contiguous plan."""
        return self.problem["cache"] if self.paged else None

    @property
    def bounds(self) -> Optional[dict]:
        """What a paged plan covers (batch, max_kv_len, max_q_len, max_total_q, workspace_bytes):
        runs within these bounds reuse it. None for a contiguous plan."""
        return self.to_dict()["bounds"] if self.paged else None

    @property
    def backend(self) -> str:
        return self._native.backend

    @property
    def family(self) -> str:
        return self._native.family

    @property
    def workspace_bytes(self) -> int:
        return self._native.workspace_bytes

    @property
    def target(self) -> "_native.Target":
        return self._native.target

    @property
    def reasons(self) -> list[str]:
        return list(self._native.reasons)

    @property
    def problem(self) -> dict:
        return self.to_dict()["problem"]

    def table(self) -> str:
        return self._native.table()

    def to_json(self, indent: Optional[int] = None) -> str:
        text = self._native.to_json()
        return text if indent is None else json.dumps(json.loads(text), indent=indent)

    def to_dict(self) -> dict:
        return json.loads(self._native.to_json())

    def __repr__(self) -> str:
        return self._native.table()

    def __str__(self) -> str:
        return self._native.table()

    def workspace(self, like: Any) -> Any:
        """The workspace for runs on `like`'s device (None when the plan needs none)."""
        if self.workspace_bytes == 0:
            return None
        key = _arrays.device_of(like)
        with self._lock:
            ws = self._workspaces.get(key)
            if ws is None:
                ws = _arrays.empty(like, (self.workspace_bytes,), "u8")
                self._workspaces[key] = ws
        return ws


def _resolve_target(backend: str, target: TargetLike, threads: int, device: Optional[int]) -> "_native.Target":
    if isinstance(target, _native.Target):
        return target
    if isinstance(target, str):
        return _native.known_target(target)
    if target is not None:
        raise TypeError("attnkit: target must be None, a name ('h200', 'h100', 'cpu') or an attnkit.Target")
    if backend == "cpu":
        return _native.cpu_target(threads)
    if backend == "cuda":
        return _native.cuda_target(_arrays.torch_current_device() if device is None else device)
    raise _native.Error(f"plan: unknown backend {backend!r}. Fix: use backend='cpu' or backend='cuda'")


def plan_decode(*, batch: int, num_heads: int, kv_heads: int, head_dim: int, max_seq: int,
                kv_len: Optional[int] = None, kv_dtype: Any = "bf16", q_dtype: Any = None, out_dtype: Any = None,
                window: int = 0, scale: float = 0.0, softcap: float = 0.0, backend: str = "cpu",
                family: Optional[str] = None, threads: int = 0, target: TargetLike = None,
                device: Optional[int] = None) -> Plan:
    """Plan one decode step: one query token per sequence against a KV cache
    [batch, kv_heads, max_seq, head_dim]. kv_len (default max_seq) is the longest sequence the
    plan covers. q_dtype defaults to kv_dtype (bf16 for an e4m3 cache, kv_dtype 'e4m3' or
    torch.float8_e4m3fn, whose scales go to decode()) and out_dtype to q_dtype. backend 'cpu' plans for
    this host with `threads` (0: all), 'cuda' for CUDA device `device` (None: torch's current);
    `target` ('h200', 'h100' or an attnkit.Target) plans for a named machine instead."""
    kv = _arrays.dtype_name(kv_dtype)
    # An e4m3 cache (torch.float8_e4m3fn) is read with its scales; q is not quantized: bf16 by default.
    q = ("bf16" if kv == "e4m3" else kv) if q_dtype is None else _arrays.dtype_name(q_dtype)
    out = q if out_dtype is None else _arrays.dtype_name(out_dtype)
    tgt = _resolve_target(backend, target, threads, device)
    return Plan(_native.plan_decode(batch, num_heads, kv_heads, head_dim, max_seq,
                                    max_seq if kv_len is None else kv_len, kv, q, out, window, scale, softcap,
                                    tgt, family))


def plan_prefill(*, batch: int, num_heads: int, kv_heads: int, head_dim: int, q_len: int,
                 kv_len: Optional[int] = None, causal: bool = True, dtype: Any = "bf16", out_dtype: Any = None,
                 window: int = 0, scale: float = 0.0, softcap: float = 0.0, backend: str = "cpu",
                 family: Optional[str] = None, threads: int = 0, target: TargetLike = None,
                 device: Optional[int] = None) -> Plan:
    """Plan a prefill: q_len query rows against kv_len keys (default q_len) per sequence; a
    causal mask with q_len != kv_len is bottom-right aligned. dtype is q/k/v's, out_dtype
    defaults to it (bf16 for dtype 'e4m3' / torch.float8_e4m3fn, an input-only dtype: fp8 prefill
    plans on CUDA Hopper targets only, head_dim 128 or 256; its per-tensor scales are passed to
    prefill()). backend/threads/target/device as for plan_decode."""
    dt = _arrays.dtype_name(dtype)
    out = ("bf16" if dt == "e4m3" else dt) if out_dtype is None else _arrays.dtype_name(out_dtype)
    tgt = _resolve_target(backend, target, threads, device)
    return Plan(_native.plan_prefill(batch, num_heads, kv_heads, head_dim, q_len,
                                     q_len if kv_len is None else kv_len, causal, dt, out, window, scale, softcap,
                                     tgt, family))


def _paged_problem_args(plan_name: str, layout: str, num_pages: int, page_size: int,
                        max_pages_per_seq: Optional[int], kv_len: Optional[int]) -> tuple:
    """(layout, num_pages, page_size, max_pages_per_seq, kv_len) with the defaults filled in."""
    if not isinstance(layout, str):
        raise _native.Error(f"{plan_name}: layout {layout!r} is not a string. Fix: use layout='HND' or layout='NHD'")
    if max_pages_per_seq is None:
        if kv_len is None:
            raise _native.Error(f"{plan_name}: neither max_pages_per_seq nor kv_len is given. Fix: pass "
                                "max_pages_per_seq (the page table's width) or kv_len (the longest sequence)")
        max_pages_per_seq = -(-int(kv_len) // int(page_size)) if page_size > 0 else 0
    if kv_len is None:
        kv_len = int(max_pages_per_seq) * int(page_size)
    return layout, int(num_pages), int(page_size), int(max_pages_per_seq), int(kv_len)


def plan_paged_decode(*, batch: int, num_heads: int, kv_heads: int, head_dim: int, num_pages: int,
                      page_size: int = 16, max_pages_per_seq: Optional[int] = None, kv_len: Optional[int] = None,
                      layout: str = "HND", kv_dtype: Any = "bf16", q_dtype: Any = None, out_dtype: Any = None,
                      window: int = 0, scale: float = 0.0, softcap: float = 0.0, backend: str = "cpu",
                      threads: int = 0, target: TargetLike = None, device: Optional[int] = None,
                      expected_total_keys: int = 0) -> Plan:
    """Plan paged decode: one query token per sequence against a page pool of `num_pages` pages of
    `page_size` keys, layout 'HND' ([num_pages, kv_heads, page_size, head_dim]) or 'NHD'
    ([num_pages, page_size, kv_heads, head_dim]), read through an int32 page table
    [batch, max_pages_per_seq]. kv_len (default max_pages_per_seq * page_size) is the longest
    sequence the plan covers; max_pages_per_seq defaults to the pages kv_len needs. Dtypes,
    backend/threads/target/device as for plan_decode. The plan's `bounds` say which runs reuse it.
    expected_total_keys (optional, 0 = unknown) is the sum of the lengths you expect to run with: it
    only tunes the partition (near-uniform batches keep the contiguous decode partition on CUDA)."""
    kv = _arrays.dtype_name(kv_dtype)
    # An e4m3 cache (torch.float8_e4m3fn) is read with its scales; q is not quantized: bf16 by default.
    q = ("bf16" if kv == "e4m3" else kv) if q_dtype is None else _arrays.dtype_name(q_dtype)
    out = q if out_dtype is None else _arrays.dtype_name(out_dtype)
    layout, num_pages, page_size, width, kv_len = _paged_problem_args(
        "plan_paged_decode", layout, num_pages, page_size, max_pages_per_seq, kv_len)
    tgt = _resolve_target(backend, target, threads, device)
    return Plan(_native.plan_paged_decode(batch, num_heads, kv_heads, head_dim, layout, num_pages, page_size, width,
                                          kv_len, kv, q, out, window, scale, softcap, tgt,
                                          int(expected_total_keys)))


def plan_extend(*, batch: int, num_heads: int, kv_heads: int, head_dim: int, num_pages: int, max_q_len: int,
                page_size: int = 16, max_pages_per_seq: Optional[int] = None, kv_len: Optional[int] = None,
                max_total_q: int = 0, layout: str = "HND", kv_dtype: Any = "bf16", q_dtype: Any = None,
                out_dtype: Any = None, window: int = 0, scale: float = 0.0, softcap: float = 0.0,
                backend: str = "cpu", threads: int = 0, target: TargetLike = None,
                device: Optional[int] = None, family: Optional[str] = None) -> Plan:
    """Plan extend: q_len_b in 0..max_q_len new query rows per sequence (packed token-major, ragged
    through cu_seqlens_q), the last q_len_b keys of their sequence in the paged cache (causal,
    bottom-right aligned). max_total_q bounds the packed rows (0: batch * max_q_len). Cache,
    kv_len, dtypes and target as for plan_paged_decode. family (None: the planner's choice) names
    the kernel: on CUDA "split_kv_decode" (any chunk) or "warp_specialized_wgmma" (chunks of 128+
    rows on Hopper, which the planner takes by itself where it fits)."""
    kv = _arrays.dtype_name(kv_dtype)
    # An e4m3 cache (torch.float8_e4m3fn) is read with its scales; q is not quantized: bf16 by default.
    q = ("bf16" if kv == "e4m3" else kv) if q_dtype is None else _arrays.dtype_name(q_dtype)
    out = q if out_dtype is None else _arrays.dtype_name(out_dtype)
    layout, num_pages, page_size, width, kv_len = _paged_problem_args(
        "plan_extend", layout, num_pages, page_size, max_pages_per_seq, kv_len)
    tgt = _resolve_target(backend, target, threads, device)
    return Plan(_native.plan_extend(batch, num_heads, kv_heads, head_dim, layout, num_pages, page_size, width,
                                    max_q_len, max_total_q, kv_len, kv, q, out, window, scale, softcap, tgt,
                                    family))
