"""Every input the Python entry points reject (docs/errors.md, "Python entry points"): each case
makes one bad call and checks that it raises attnkit.Error (a ValueError) whose message names the
problem and carries a "Fix:", and that no array of the call changed, byte for byte (outputs are
NaN-poisoned, pools and caches hold random data). CPU only: a CUDA tensor in a call of host arrays
is a stand-in that declares itself a CUDA DLPack array, caught in Python before any native code
runs; the real CUDA path is test_paged_cpu.py's gpu test and test_gpu.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import attnkit

D = 16  # head_dim everywhere


class FakeCudaArray:
    """Declares itself a CUDA DLPack array (device type 2) of a given shape: enough for the
    Python-level device checks, which must reject it before anything reaches the native module."""

    def __init__(self, shape, dtype=np.float32):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *args, **kwargs):
        raise AssertionError("the fake CUDA array reached the native module")


def misaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts one byte past an element boundary."""
    buf = np.zeros(a.nbytes + 1, np.uint8)
    m = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    m[...] = a
    return m


def strided_last(a: np.ndarray) -> np.ndarray:
    """`a`'s values in a view whose last dimension has stride 2 (not contiguous)."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    view = wide[..., ::2]
    view[...] = a
    return view


class World:
    """The arrays and plans every case draws from. snapshot() / unchanged() compare every array
    byte for byte."""

    def __init__(self, rng):
        f32 = np.float32
        r = lambda *s: rng.standard_normal(s).astype(f32)  # noqa: E731
        nan = lambda *s: np.full(s, np.nan, f32)  # noqa: E731
        # contiguous decode / prefill / KV ops
        self.dplan = attnkit.plan_decode(batch=2, num_heads=4, kv_heads=2, head_dim=D, max_seq=8, kv_dtype="f32")
        self.pplan = attnkit.plan_prefill(batch=2, num_heads=4, kv_heads=2, head_dim=D, q_len=6, dtype="f32")
        self.cuda_dplan = attnkit.plan_decode(batch=2, num_heads=4, kv_heads=2, head_dim=D, max_seq=8,
                                              kv_dtype="f32", target="h200")
        self.cuda_pplan = attnkit.plan_prefill(batch=2, num_heads=4, kv_heads=2, head_dim=D, q_len=6, dtype="f32",
                                               target="h200")
        self.q, self.k_cache, self.v_cache = r(2, 4, D), r(2, 2, 8, D), r(2, 2, 8, D)
        self.lengths = np.array([8, 5], np.int32)
        self.out, self.lse = nan(2, 4, D), nan(2, 4)
        self.q4, self.k4, self.v4, self.out4 = r(2, 4, 6, D), r(2, 2, 6, D), r(2, 2, 6, D), nan(2, 4, 6, D)
        self.k_new, self.v_new = r(2, 2, D), r(2, 2, D)
        self.positions = np.array([3, 7], np.int32)
        self.x = r(2, 4, D)
        self.cos_t, self.sin_t = r(4, D // 2), r(4, D // 2)
        self.out_partial, self.lse_partial, self.merged = r(2, 3, D), r(2, 3), nan(3, D)
        # paged: HND pools of 6 pages of 16, two sequences of 20 and 5 keys
        common = dict(batch=2, num_heads=4, kv_heads=2, head_dim=D, num_pages=6, page_size=16, max_pages_per_seq=2,
                      kv_dtype="f32")
        self.pdplan = attnkit.plan_paged_decode(**common)
        self.eplan = attnkit.plan_extend(max_q_len=3, **common)
        self.cuda_pdplan = attnkit.plan_paged_decode(target="h200", **common)
        self.cuda_eplan = attnkit.plan_extend(max_q_len=3, target="h200", **common)
        self.k_pages, self.v_pages = r(6, 2, 16, D), r(6, 2, 16, D)
        self.table = np.array([[4, 1], [0, -1]], np.int32)
        self.plens = np.array([20, 5], np.int32)
        self.pout, self.plse = nan(2, 4, D), nan(2, 4)
        self.eq, self.eout = r(5, 4, D), nan(5, 4, D)
        self.cu = np.array([0, 3, 5], np.int32)
        self.rows = r(3, 2, D)
        self.cu_new = np.array([0, 2, 3], np.int32)
        self.starts = np.array([20, 5], np.int32)
        self._before = None

    def arrays(self) -> dict:
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}

    def snapshot(self) -> None:
        self._before = {k: v.tobytes() for k, v in self.arrays().items()}

    def changed(self) -> list:
        return [k for k, v in self.arrays().items() if v.tobytes() != self._before[k]]


@dataclass
class Case:
    entry: str
    what: str
    match: str
    call: Callable[[World], Any]

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.what}"


def paged_decode(w, **kw):
    args = dict(plan=w.pdplan, q=w.q, k_pages=w.k_pages, v_pages=w.v_pages, page_table=w.table, lengths=w.plens,
                out=w.pout, lse=w.plse)
    args.update(kw)
    return attnkit.paged_decode(**args)


def extend(w, **kw):
    args = dict(plan=w.eplan, q=w.eq, cu_seqlens_q=w.cu, k_pages=w.k_pages, v_pages=w.v_pages, page_table=w.table,
                lengths=w.plens, out=w.eout)
    args.update(kw)
    return attnkit.extend(**args)


def paged_append(w, **kw):
    args = dict(k_pages=w.k_pages, v_pages=w.v_pages, k_new=w.rows, v_new=w.rows, page_table=w.table,
                start_positions=w.starts, cu_seqlens_new=w.cu_new, layout="HND")
    args.update(kw)
    return attnkit.paged_append_kv(**args)


def decode(w, **kw):
    args = dict(plan=w.dplan, q=w.q, k_cache=w.k_cache, v_cache=w.v_cache, lengths=w.lengths, out=w.out, lse=w.lse)
    args.update(kw)
    return attnkit.decode(**args)


def prefill(w, **kw):
    args = dict(plan=w.pplan, q=w.q4, k=w.k4, v=w.v4, out=w.out4)
    args.update(kw)
    return attnkit.prefill(**args)


def fused(w, **kw):
    args = dict(plan=w.dplan, q=w.q, k_new=w.k_new, v_new=w.v_new, k_cache=w.k_cache, v_cache=w.v_cache,
                positions=w.positions, out=w.out)
    args.update(kw)
    return attnkit.fused_rope_append_decode(**args)


def table_with(w, b, i, page):
    t = w.table.copy()
    t[b, i] = page
    return t


CASES = [
    # ---- planners
    Case("plan_decode", "head_dim", "multiple of 8",
         lambda w: attnkit.plan_decode(batch=1, num_heads=4, kv_heads=4, head_dim=100, max_seq=16)),
    Case("plan_decode", "heads_not_divisible", "not divisible",
         lambda w: attnkit.plan_decode(batch=1, num_heads=6, kv_heads=4, head_dim=64, max_seq=16)),
    Case("plan_decode", "unknown_dtype", "f64",
         lambda w: attnkit.plan_decode(batch=1, num_heads=4, kv_heads=4, head_dim=64, max_seq=16, kv_dtype="f64")),
    Case("plan_decode", "unknown_backend", "unknown backend",
         lambda w: attnkit.plan_decode(batch=1, num_heads=4, kv_heads=4, head_dim=64, max_seq=16, backend="tpu")),
    Case("plan_prefill", "family_for_decode_only", "split_kv_decode",
         lambda w: attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=4, head_dim=64, q_len=8,
                                        family="split_kv_decode")),
    Case("plan_prefill", "unknown_family", "unknown kernel family",
         lambda w: attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=4, head_dim=64, q_len=8, family="fast")),
    Case("plan_paged_decode", "unknown_layout", "unknown page layout",
         lambda w: attnkit.plan_paged_decode(batch=1, num_heads=4, kv_heads=4, head_dim=64, num_pages=4,
                                             max_pages_per_seq=2, layout="BSHD")),
    Case("plan_paged_decode", "kv_len_above_capacity", "kv_len",
         lambda w: attnkit.plan_paged_decode(batch=1, num_heads=4, kv_heads=4, head_dim=64, num_pages=4, page_size=16,
                                             max_pages_per_seq=2, kv_len=33)),
    Case("plan_paged_decode", "no_table_width", "max_pages_per_seq",
         lambda w: attnkit.plan_paged_decode(batch=1, num_heads=4, kv_heads=4, head_dim=64, num_pages=4)),
    Case("plan_extend", "max_q_len_zero", "max_q_len",
         lambda w: attnkit.plan_extend(batch=1, num_heads=4, kv_heads=4, head_dim=64, num_pages=4, max_q_len=0,
                                       max_pages_per_seq=2)),
    Case("plan_extend", "page_size_zero", "page_size",
         lambda w: attnkit.plan_extend(batch=1, num_heads=4, kv_heads=4, head_dim=64, num_pages=4, max_q_len=2,
                                       page_size=0, max_pages_per_seq=2)),

    # ---- decode
    Case("decode", "wrong_plan_kind", "expected a decode plan", lambda w: decode(w, plan=w.pplan)),
    Case("decode", "float64", "float64 is not supported", lambda w: decode(w, q=w.q.astype(np.float64))),
    Case("decode", "dtype_not_the_plans", "expected f32", lambda w: decode(w, q=w.q.astype(np.float16))),
    Case("decode", "device_mix", "on cuda:0 but q is on cpu",
         lambda w: decode(w, k_cache=FakeCudaArray(w.k_cache.shape))),
    Case("decode", "cuda_plan_host_arrays", "plan was made for the cuda backend", lambda w: decode(w, plan=w.cuda_dplan)),
    Case("decode", "last_dim_strided", "stride 2", lambda w: decode(w, q=strided_last(w.q))),
    Case("decode", "cache_shape", "shape", lambda w: decode(w, k_cache=w.k_cache[:, :, :7], v_cache=w.v_cache[:, :, :7])),
    Case("decode", "misaligned", "not aligned", lambda w: decode(w, v_cache=misaligned(w.v_cache))),
    Case("decode", "none_cache", "k_cache is None", lambda w: decode(w, k_cache=None)),
    Case("decode", "length_beyond_plan", "outside", lambda w: decode(w, lengths=[9, 5])),
    Case("decode", "lse_not_f32", "lse", lambda w: decode(w, lse=np.zeros((2, 4), np.float16))),
    Case("decode", "key_start_beyond_plan", "key_starts[1]=9 is outside", lambda w: decode(w, key_starts=[0, 9])),
    Case("decode", "key_start_negative", "key_starts[0]=-1 is outside", lambda w: decode(w, key_starts=[-1, 0])),
    Case("decode", "key_starts_int64", "key_starts", lambda w: decode(w, key_starts=np.zeros(2, np.int64))),
    Case("decode", "key_starts_device_mix", "key_starts is on cuda:0 but q is on cpu",
         lambda w: decode(w, key_starts=FakeCudaArray((2,), np.int32))),

    # ---- prefill
    Case("prefill", "wrong_plan_kind", "expected a prefill plan", lambda w: prefill(w, plan=w.dplan)),
    Case("prefill", "dtype_not_the_plans", "expected f32", lambda w: prefill(w, k=w.k4.astype(np.float16))),
    Case("prefill", "device_mix", "on cuda:0 but q is on cpu", lambda w: prefill(w, v=FakeCudaArray(w.v4.shape))),
    Case("prefill", "cuda_plan_host_arrays", "plan was made for the cuda backend",
         lambda w: prefill(w, plan=w.cuda_pplan)),
    Case("prefill", "last_dim_strided", "stride 2", lambda w: prefill(w, out=strided_last(w.out4))),
    Case("prefill", "shape", "shape", lambda w: prefill(w, q=w.q4[:, :3])),
    Case("prefill", "misaligned", "not aligned", lambda w: prefill(w, k=misaligned(w.k4))),
    Case("prefill", "none_k", "k is None", lambda w: prefill(w, k=None)),
    Case("prefill", "one_offsets_only", "only one of cu_seqlens_q / cu_seqlens_k",
         lambda w: prefill(w, q=w.q4[:1], k=w.k4[:1], v=w.v4[:1], out=w.out4[:1], cu_seqlens_q=[0, 2, 6])),

    # ---- append_kv, apply_rope, fused, merge, sdpa
    Case("append_kv", "nothing_given", "neither k_new nor v_new",
         lambda w: attnkit.append_kv(w.k_cache, w.v_cache, None, None, w.positions)),
    Case("append_kv", "position_beyond_cache", "outside the cache",
         lambda w: attnkit.append_kv(w.k_cache, w.v_cache, w.k_new, w.v_new, [3, 8])),
    Case("append_kv", "dtype_not_the_caches", "expected f32",
         lambda w: attnkit.append_kv(w.k_cache, w.v_cache, w.k_new.astype(np.float16), w.v_new, w.positions)),
    Case("append_kv", "device_mix", "on cuda:0",
         lambda w: attnkit.append_kv(w.k_cache, w.v_cache, FakeCudaArray(w.k_new.shape), w.v_new, w.positions)),
    Case("apply_rope", "unknown_style", "unknown style", lambda w: attnkit.apply_rope(w.x, [0, 1], style="yarn")),
    Case("apply_rope", "position_beyond_tables", "beyond the RoPE tables",
         lambda w: attnkit.apply_rope(w.x, [0, 4], cos_table=w.cos_t, sin_table=w.sin_t)),
    Case("apply_rope", "one_table", "only one of cos_table / sin_table",
         lambda w: attnkit.apply_rope(w.x, [0, 1], cos_table=w.cos_t)),
    Case("apply_rope", "none_x", "x is None", lambda w: attnkit.apply_rope(None, [0, 1])),
    Case("fused_rope_append_decode", "position_beyond_cache", "outside the cache",
         lambda w: fused(w, positions=[3, 8])),
    Case("fused_rope_append_decode", "none_v_new", "v_new is None", lambda w: fused(w, v_new=None)),
    Case("fused_rope_append_decode", "cuda_plan_host_arrays", "cuda backend", lambda w: fused(w, plan=w.cuda_dplan)),
    Case("merge_states", "partials_not_f32", "expected f32",
         lambda w: attnkit.merge_states(w.out_partial, w.lse_partial.astype(np.float16), out=w.merged)),
    Case("merge_states", "none_partials", "out_partial is None",
         lambda w: attnkit.merge_states(None, w.lse_partial, out=w.merged)),
    Case("sdpa", "rank_3", "rank 4", lambda w: attnkit.sdpa(w.q, w.k_cache[:, :, 0], w.v_cache[:, :, 0])),
    Case("sdpa", "key_starts_with_several_rows", "key_starts (left padding) is for decode",
         lambda w: attnkit.sdpa(w.q4, w.k4, w.v4, causal=True, key_starts=[0, 2], out=w.out4)),

    # ---- paged_decode
    Case("paged_decode", "wrong_plan_kind", "expected a paged_decode plan", lambda w: paged_decode(w, plan=w.eplan)),
    Case("paged_decode", "dtype_not_the_plans", "expected f32", lambda w: paged_decode(w, q=w.q.astype(np.float16))),
    Case("paged_decode", "float64_pool", "float64 is not supported",
         lambda w: paged_decode(w, k_pages=w.k_pages.astype(np.float64))),
    Case("paged_decode", "device_mix", "on cuda:0 but q is on cpu",
         lambda w: paged_decode(w, v_pages=FakeCudaArray(w.v_pages.shape))),
    Case("paged_decode", "cuda_plan_host_arrays", "plan was made for the cuda backend",
         lambda w: paged_decode(w, plan=w.cuda_pdplan)),
    Case("paged_decode", "last_dim_strided", "not contiguous in its last dimension",
         lambda w: paged_decode(w, k_pages=strided_last(w.k_pages))),
    Case("paged_decode", "pool_in_the_other_layout", "expected", lambda w: paged_decode(
        w, k_pages=np.ascontiguousarray(w.k_pages.transpose(0, 2, 1, 3)),
        v_pages=np.ascontiguousarray(w.v_pages.transpose(0, 2, 1, 3)))),
    Case("paged_decode", "table_width", "page_table", lambda w: paged_decode(w, page_table=w.table[:, :1])),
    Case("paged_decode", "misaligned", "not aligned", lambda w: paged_decode(w, page_table=misaligned(w.table))),
    Case("paged_decode", "none_table", "page_table is None", lambda w: paged_decode(w, page_table=None)),
    Case("paged_decode", "page_out_of_range", "out of range", lambda w: paged_decode(w, page_table=table_with(w, 0, 1, 6))),
    Case("paged_decode", "negative_page_within_length", "no page assigned",
         lambda w: paged_decode(w, page_table=table_with(w, 0, 1, -1))),
    Case("paged_decode", "length_beyond_table", "page table is shorter", lambda w: paged_decode(w, lengths=[20, 33])),
    Case("paged_decode", "length_beyond_plan", "kv_len", lambda w: paged_decode(w, plan=attnkit.plan_paged_decode(
        batch=2, num_heads=4, kv_heads=2, head_dim=D, num_pages=6, page_size=16, max_pages_per_seq=2, kv_len=19,
        kv_dtype="f32"))),
    Case("paged_decode", "negative_length", "negative", lambda w: paged_decode(w, lengths=[20, -1])),
    Case("paged_decode", "table_int64", "int64 is not supported",
         lambda w: paged_decode(w, page_table=w.table.astype(np.int64))),
    Case("paged_decode", "lengths_f32", "expected i32", lambda w: paged_decode(w, lengths=w.plens.astype(np.float32))),

    # ---- extend
    Case("extend", "wrong_plan_kind", "expected an extend plan", lambda w: extend(w, plan=w.pdplan)),
    Case("extend", "dtype_not_the_plans", "expected f32", lambda w: extend(w, out=np.zeros((5, 4, D), np.float16))),
    Case("extend", "device_mix", "on cuda:0 but q is on cpu", lambda w: extend(w, cu_seqlens_q=FakeCudaArray((3,), np.int32))),
    Case("extend", "cuda_plan_host_arrays", "plan was made for the cuda backend", lambda w: extend(w, plan=w.cuda_eplan)),
    Case("extend", "last_dim_strided", "not contiguous in its last dimension", lambda w: extend(w, q=strided_last(w.eq))),
    Case("extend", "q_not_rank_3", "expected [rows, num_heads, head_dim]", lambda w: extend(w, q=w.eq[None])),
    Case("extend", "rows_above_max_total_q", "max_total_q", lambda w: extend(
        w, q=np.zeros((7, 4, D), np.float32), out=np.full((7, 4, D), np.nan, np.float32))),
    Case("extend", "misaligned", "not aligned", lambda w: extend(w, v_pages=misaligned(w.v_pages))),
    Case("extend", "none_pool", "v_pages is None", lambda w: extend(w, v_pages=None)),
    Case("extend", "offsets_not_from_0", "is not 0", lambda w: extend(w, cu_seqlens_q=[1, 3, 5])),
    Case("extend", "offsets_decrease", "decreases", lambda w: extend(w, cu_seqlens_q=[0, 4, 3])),
    Case("extend", "offsets_past_rows", "beyond", lambda w: extend(w, cu_seqlens_q=[0, 3, 6])),
    Case("extend", "q_len_above_plan", "max_q_len", lambda w: extend(w, cu_seqlens_q=[0, 4, 5])),
    Case("extend", "q_len_above_length", "only 1 keys", lambda w: extend(w, lengths=[20, 1])),
    Case("extend", "page_out_of_range", "out of range", lambda w: extend(w, page_table=table_with(w, 1, 0, 9))),

    # ---- paged_append_kv
    Case("paged_append_kv", "nothing_given", "neither k_new nor v_new",
         lambda w: paged_append(w, k_new=None, v_new=None)),
    Case("paged_append_kv", "unknown_layout", "unknown page layout", lambda w: paged_append(w, layout="BSHD")),
    Case("paged_append_kv", "contiguous_plan_as_layout", "has no page pool", lambda w: paged_append(w, layout=w.dplan)),
    Case("paged_append_kv", "pool_not_rank_4", "rank-4 pools", lambda w: paged_append(w, k_pages=w.k_pages[0])),
    Case("paged_append_kv", "pools_not_the_plans", "expected", lambda w: paged_append(w, layout=attnkit.plan_extend(
        batch=2, num_heads=4, kv_heads=2, head_dim=D, num_pages=8, page_size=16, max_pages_per_seq=2, max_q_len=3,
        kv_dtype="f32"))),
    Case("paged_append_kv", "rows_without_offsets", "no cu_seqlens_new", lambda w: paged_append(w, cu_seqlens_new=None)),
    Case("paged_append_kv", "dtype_not_the_pools", "expected f32",
         lambda w: paged_append(w, k_new=w.rows.astype(np.float16), v_new=None)),
    Case("paged_append_kv", "device_mix", "on cuda:0",
         lambda w: paged_append(w, v_pages=FakeCudaArray(w.v_pages.shape))),
    Case("paged_append_kv", "last_dim_strided", "not contiguous in its last dimension",
         lambda w: paged_append(w, k_new=strided_last(w.rows))),
    Case("paged_append_kv", "misaligned", "not aligned", lambda w: paged_append(w, start_positions=misaligned(w.starts))),
    Case("paged_append_kv", "none_table", "page_table is None", lambda w: paged_append(w, page_table=None)),
    Case("paged_append_kv", "page_out_of_range", "out of range",
         lambda w: paged_append(w, page_table=table_with(w, 0, 1, 6))),
    Case("paged_append_kv", "no_page_assigned", "no page assigned", lambda w: paged_append(w, start_positions=[20, 16])),
    Case("paged_append_kv", "past_the_table", "page table is shorter", lambda w: paged_append(w, start_positions=[31, 5])),
    Case("paged_append_kv", "two_tokens_one_slot", "same slot",
         lambda w: paged_append(w, page_table=table_with(w, 1, 0, 1), start_positions=[20, 4])),
    Case("paged_append_kv", "negative_start", "negative", lambda w: paged_append(w, start_positions=[20, -1])),
    Case("paged_append_kv", "offsets_decrease", "decreases", lambda w: paged_append(w, cu_seqlens_new=[0, 3, 2])),
]


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rejected(rng, case):
    world = World(rng)
    world.snapshot()
    with pytest.raises(attnkit.Error) as info:
        case.call(world)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "Fix:" in message, message
    assert case.match in message, f"expected {case.match!r} in: {message}"
    assert world.changed() == [], f"a rejected call changed {world.changed()}: {message}"


@pytest.mark.parametrize("what", ["paged_decode", "extend", "paged_append_kv", "decode"])
def test_the_same_world_is_accepted(rng, what):
    """The cases' base calls are valid: each rejection is caused by the one thing it changes."""
    world = World(rng)
    if what == "paged_decode":
        out = paged_decode(world)[0]
        golden, _ = attnkit.reference_paged_decode(world.pdplan, world.q, world.k_pages, world.v_pages, world.table,
                                                   world.plens)
    elif what == "extend":
        out = extend(world)
        golden, _ = attnkit.reference_extend(world.eplan, world.eq, world.cu, world.k_pages, world.v_pages,
                                             world.table, world.plens)
    elif what == "decode":
        out = decode(world)[0]
        golden, _ = attnkit.reference_decode(world.dplan, world.q, world.k_cache, world.v_cache, world.lengths)
    else:
        before = world.k_pages.copy()
        paged_append(world)
        assert (world.k_pages != before).sum() == 3 * 2 * D  # three tokens written, nothing else
        return
    assert np.abs(np.asarray(out, np.float64) - golden).max() < 1e-3
