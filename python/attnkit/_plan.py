"""Planning from Python: attnkit.plan_decode / plan_prefill return a Plan, which prints as the
planner's table, converts to a dict or JSON, and owns the workspace its runs need."""
from __future__ import annotations

import json
import threading
from typing import Any, Optional, Union

from . import _arrays
from . import _attnkit as _native

TargetLike = Union[None, str, "_native.Target"]


class Plan:
    """A decode or prefill plan: the kernel family, the work partition, the workspace and the
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

    @property
    def kind(self) -> str:
        """'decode' or 'prefill'."""
        return "decode" if isinstance(self._native, _native.DecodePlan) else "prefill"

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
    plan covers. q_dtype defaults to kv_dtype and out_dtype to q_dtype. backend 'cpu' plans for
    this host with `threads` (0: all), 'cuda' for CUDA device `device` (None: torch's current);
    `target` ('h200', 'h100' or an attnkit.Target) plans for a named machine instead."""
    kv = _arrays.dtype_name(kv_dtype)
    q = kv if q_dtype is None else _arrays.dtype_name(q_dtype)
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
    defaults to it. backend/threads/target/device as for plan_decode."""
    dt = _arrays.dtype_name(dtype)
    out = dt if out_dtype is None else _arrays.dtype_name(out_dtype)
    tgt = _resolve_target(backend, target, threads, device)
    return Plan(_native.plan_prefill(batch, num_heads, kv_heads, head_dim, q_len,
                                     q_len if kv_len is None else kv_len, causal, dt, out, window, scale, softcap,
                                     tgt, family))
