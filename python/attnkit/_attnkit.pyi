# Type stubs of the native module attnkit._attnkit (python/src/*.cpp). Arrays are any DLPack
# array (numpy, torch, cupy); the package (attnkit/__init__.py) is the documented interface.
from typing import Any, Optional

Array = Any

__version__: str  # include/attnkit/version.hpp

class Error(ValueError):
    """A rejected call: "<context>: <problem>. Fix: <how to fix>"."""

class Target:
    @property
    def backend(self) -> str: ...
    name: str
    threads: int
    cache_bytes: int
    sm_count: int
    cc_major: int
    cc_minor: int
    shared_bytes_per_block: int
    shared_bytes_per_sm: int
    max_threads_per_sm: int
    peak_read_bytes_per_s: float
    peak_matmul_flops_per_s: float

class _NativePlan:
    def table(self) -> str: ...
    def to_json(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def target(self) -> Target: ...
    reasons: list[str]

class DecodePlan(_NativePlan): ...
class PrefillPlan(_NativePlan): ...

class _NativePagedPlan(_NativePlan):
    @property
    def layout(self) -> str: ...  # "HND" or "NHD"
    @property
    def page_size(self) -> int: ...
    @property
    def num_pages(self) -> int: ...
    @property
    def max_pages_per_seq(self) -> int: ...
    gather_keys: int

class PagedDecodePlan(_NativePagedPlan):
    page_boxes: bool  # CUDA: page runs copied as TMA boxes (tiles page-aligned)
class ExtendPlan(_NativePagedPlan): ...

def cpu_target(threads: int = 0) -> Target: ...
def known_target(name: str) -> Target: ...
def cuda_target(device: int = -1) -> Target: ...
def cuda_built() -> bool: ...
def cuda_device_count() -> int: ...

def plan_decode(batch: int, num_heads: int, kv_heads: int, head_dim: int, max_seq: int, kv_len: int,
                kv_dtype: str, q_dtype: str, out_dtype: str, window: int, scale: float, softcap: float,
                target: Target, family: Optional[str]) -> DecodePlan: ...
def plan_prefill(batch: int, num_heads: int, kv_heads: int, head_dim: int, q_len: int, kv_len: int, causal: bool,
                 dtype: str, out_dtype: str, window: int, scale: float, softcap: float, target: Target,
                 family: Optional[str]) -> PrefillPlan: ...
def plan_paged_decode(batch: int, num_heads: int, kv_heads: int, head_dim: int, layout: str, num_pages: int,
                      page_size: int, max_pages_per_seq: int, kv_len: int, kv_dtype: str, q_dtype: str,
                      out_dtype: str, window: int, scale: float, softcap: float, target: Target,
                      expected_total_keys: int = 0) -> PagedDecodePlan: ...
def plan_extend(batch: int, num_heads: int, kv_heads: int, head_dim: int, layout: str, num_pages: int, page_size: int,
                max_pages_per_seq: int, max_q_len: int, max_total_q: int, kv_len: int, kv_dtype: str, q_dtype: str,
                out_dtype: str, window: int, scale: float, softcap: float, target: Target) -> ExtendPlan: ...

def decode(plan: DecodePlan, q: Array, k_cache: Array, v_cache: Array, lengths: Array, out: Array,
           lse: Optional[Array], workspace: Optional[Array], stream: int = 0,
           sinks: Optional[Array] = None, k_scale: float = 1.0, v_scale: float = 1.0,
           key_starts: Optional[Array] = None) -> None: ...
def prefill(plan: PrefillPlan, q: Array, k: Array, v: Array, out: Array, lse: Optional[Array],
            cu_seqlens_q: Optional[Array], cu_seqlens_k: Optional[Array], workspace: Optional[Array],
            stream: int = 0, q_scale: float = 1.0, k_scale: float = 1.0, v_scale: float = 1.0,
            sinks: Optional[Array] = None) -> None: ...
def append_kv(k_new: Optional[Array], v_new: Optional[Array], k_cache: Optional[Array], v_cache: Optional[Array],
              positions: Array, stream: int = 0, k_scale: float = 1.0, v_scale: float = 1.0) -> None: ...
def apply_rope(x: Array, positions: Array, style: str = "half", theta: float = 10000.0,
               cos_table: Optional[Array] = None, sin_table: Optional[Array] = None, stream: int = 0) -> None: ...
def fused_rope_append_decode(plan: DecodePlan, q: Array, k_new: Array, v_new: Array, k_cache: Array, v_cache: Array,
                             positions: Array, out: Array, lse: Optional[Array], style: str, theta: float,
                             cos_table: Optional[Array], sin_table: Optional[Array], workspace: Optional[Array],
                             stream: int = 0, sinks: Optional[Array] = None) -> None: ...
def merge_states(out_partial: Array, lse_partial: Array, out: Array, lse: Optional[Array] = None,
                 stream: int = 0) -> None: ...
def advise_huge_pages(x: Array) -> bool:
    """Ask Linux to back the whole 2 MiB pages inside a host array's memory with transparent huge
    pages (call it on a KV cache before it is first written; see attnkit::cpu::advise_huge_pages).
    False where the system refuses."""
    ...
def paged_decode(plan: PagedDecodePlan, q: Array, k_pages: Array, v_pages: Array, page_table: Array, lengths: Array,
                 out: Array, lse: Optional[Array], workspace: Optional[Array], stream: int = 0,
                 sinks: Optional[Array] = None, k_scale: float = 1.0, v_scale: float = 1.0) -> None: ...
def extend(plan: ExtendPlan, q: Array, cu_seqlens_q: Array, k_pages: Array, v_pages: Array, page_table: Array,
           lengths: Array, out: Array, lse: Optional[Array], workspace: Optional[Array], stream: int = 0,
           sinks: Optional[Array] = None, k_scale: float = 1.0, v_scale: float = 1.0) -> None: ...
def paged_append_kv(layout: str, num_pages: int, page_size: int, max_pages_per_seq: int, k_new: Optional[Array],
                    v_new: Optional[Array], cu_seqlens_new: Array, start_positions: Array, k_pages: Optional[Array],
                    v_pages: Optional[Array], page_table: Array, stream: int = 0, k_scale: float = 1.0,
                    v_scale: float = 1.0) -> None: ...

def reference_decode(plan: DecodePlan, q: Array, k_cache: Array, v_cache: Array,
                     lengths: Array, sinks: Optional[Array] = None, k_scale: float = 1.0,
                     v_scale: float = 1.0, key_starts: Optional[Array] = None) -> tuple[Any, Any]: ...
def reference_prefill(plan: PrefillPlan, q: Array, k: Array, v: Array, cu_seqlens_q: Optional[Array] = None,
                      cu_seqlens_k: Optional[Array] = None, q_scale: float = 1.0, k_scale: float = 1.0,
                      v_scale: float = 1.0, sinks: Optional[Array] = None) -> tuple[Any, Any]: ...
def reference_paged_decode(plan: PagedDecodePlan, q: Array, k_pages: Array, v_pages: Array, page_table: Array,
                           lengths: Array, k_scale: float = 1.0, v_scale: float = 1.0) -> tuple[Any, Any]: ...
def reference_extend(plan: ExtendPlan, q: Array, cu_seqlens_q: Array, k_pages: Array, v_pages: Array,
                     page_table: Array, lengths: Array, k_scale: float = 1.0,
                     v_scale: float = 1.0) -> tuple[Any, Any]: ...
