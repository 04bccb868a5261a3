"""The paged-cache calls from Python on the CPU (CI): numpy page pools in both layouts (HND, NHD)
at page sizes 1 and 16, read through shuffled page tables, against attnkit's float64 golden and a
numpy float64 softmax over the gathered keys. Pool slots no sequence owns are NaN, so a read
outside the table or past a length shows up as NaN in the output. Appends that cross pages are
checked against a numpy model of the pool, and rejected calls leave pools and outputs unchanged.
Fresh random inputs each run (ATTNKIT_TEST_SEED replays one)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import attnkit
from conftest import attention_f64, check_close

NP_DTYPES = {"f32": np.float32, "f16": np.float16}
LAYOUTS = ["HND", "NHD"]
PAGE_SIZES = [1, 16]


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP_DTYPES[dtype])


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype=NP_DTYPES[dtype])


def pool_shape(layout, num_pages, page_size, kv_heads, head_dim):
    if layout == "HND":
        return (num_pages, kv_heads, page_size, head_dim)
    return (num_pages, page_size, kv_heads, head_dim)


def slot(pool, layout, page, offset):
    """The [kv_heads, head_dim] view of one (page, slot) of a pool."""
    return pool[page, :, offset] if layout == "HND" else pool[page, offset]


class PagedCache:
    """A page pool pair and a dense page table, filled from contiguous K/V by plain numpy (not by
    attnkit), with pages handed out in a random order and every unowned slot NaN."""

    def __init__(self, rng, layout, page_size, kv_heads, head_dim, capacities, dtype, spare_pages=3):
        self.layout, self.page_size, self.dtype = layout, page_size, dtype
        pages_per_seq = [-(-c // page_size) for c in capacities]
        self.width = max(max(pages_per_seq), 1) + 1  # one unused column, left at -1
        self.num_pages = sum(pages_per_seq) + spare_pages
        order = rng.permutation(self.num_pages).astype(np.int32)
        self.table = np.full((len(capacities), self.width), -1, np.int32)
        taken = 0
        for b, n in enumerate(pages_per_seq):
            self.table[b, :n] = order[taken:taken + n]
            taken += n
        shape = pool_shape(layout, self.num_pages, page_size, kv_heads, head_dim)
        self.k_pages, self.v_pages = poisoned(shape, dtype), poisoned(shape, dtype)

    def write(self, b, start, k_rows, v_rows):
        """Rows [n, kv_heads, head_dim] of sequence b at positions start .. start + n - 1."""
        for i in range(k_rows.shape[0]):
            pos = start + i
            page, offset = self.table[b, pos // self.page_size], pos % self.page_size
            slot(self.k_pages, self.layout, page, offset)[...] = k_rows[i]
            slot(self.v_pages, self.layout, page, offset)[...] = v_rows[i]

    def gather(self, b, n):
        """Sequence b's first n keys and values as contiguous [kv_heads, n, head_dim] arrays."""
        ks = [slot(self.k_pages, self.layout, self.table[b, j // self.page_size], j % self.page_size) for j in range(n)]
        vs = [slot(self.v_pages, self.layout, self.table[b, j // self.page_size], j % self.page_size) for j in range(n)]
        kvh, d = self.k_pages.shape[1 if self.layout == "HND" else 2], self.k_pages.shape[-1]
        if n == 0:
            return np.zeros((kvh, 0, d)), np.zeros((kvh, 0, d))
        return np.stack(ks, axis=1), np.stack(vs, axis=1)


def filled_cache(rng, layout, page_size, kv_heads, head_dim, lengths, dtype, capacities=None):
    cache = PagedCache(rng, layout, page_size, kv_heads, head_dim, capacities or lengths, dtype)
    for b, n in enumerate(lengths):
        cache.write(b, 0, randn(rng, (n, kv_heads, head_dim), dtype), randn(rng, (n, kv_heads, head_dim), dtype))
    return cache


# ---------------------------------------------------------------- paged decode

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("heads,kv_heads,head_dim,window,softcap", [
    (8, 2, 40, 0, 0.0),
    (4, 4, 64, 0, 0.0),
    (6, 1, 24, 13, 0.0),
    (4, 2, 16, 0, 6.0),
])
def test_paged_decode_matches_golden(rng, layout, page_size, dtype, heads, kv_heads, head_dim, window, softcap):
    lengths = [37, 0, 1, 16, int(rng.integers(2, 90))]  # empty, one key, a page multiple, random
    batch = len(lengths)
    cache = filled_cache(rng, layout, page_size, kv_heads, head_dim, lengths, dtype)
    plan = attnkit.plan_paged_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                     num_pages=cache.num_pages, page_size=page_size, max_pages_per_seq=cache.width,
                                     kv_len=max(lengths), layout=layout, kv_dtype=dtype, window=window,
                                     softcap=softcap)
    q = randn(rng, (batch, heads, head_dim), dtype)
    lens = np.array(lengths, np.int32)
    out = poisoned(q.shape, dtype)
    lse = np.full((batch, heads), np.nan, np.float32)
    got, got_lse = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, lens, out=out, lse=lse)
    assert got is out and got_lse is lse

    golden, golden_lse = attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, lens)
    check_close(out, golden, dtype)
    check_close(lse, golden_lse, "f32", "lse")
    for b, n in enumerate(lengths):
        if n == 0:
            continue  # checked below: zeros and -inf
        k, v = cache.gather(b, n)
        mine, mine_lse = attention_f64(q[b][None, :, None, :], k[None], v[None], causal=True, window=window,
                                       softcap=softcap)
        check_close(out[b], mine[0, :, 0], dtype, f"sequence {b} vs numpy")
        check_close(lse[b], mine_lse[0, :, 0], "f32", f"sequence {b} lse vs numpy")
    assert not out[1].any() and np.isneginf(lse[1]).all(), "an empty sequence writes zeros and LSE -inf"


def test_paged_decode_allocates_with_numpy_and_reuses_one_plan(rng):
    """One plan over changing compositions (lengths and tables change, the bounds do not), outputs
    allocated with numpy in the plan's dtypes."""
    layout, page_size, kvh, d = "NHD", 16, 2, 32
    cache = filled_cache(rng, layout, page_size, kvh, d, [70, 70, 70], "f16")
    plan = attnkit.plan_paged_decode(batch=3, num_heads=4, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                                     page_size=page_size, max_pages_per_seq=cache.width, layout=layout,
                                     kv_dtype="f16", q_dtype="f32", out_dtype="f32")
    for _ in range(3):
        lengths = rng.integers(0, 71, size=3).astype(np.int32)
        table = cache.table.copy()
        rng.shuffle(table)  # sequences swap their pages between runs
        q = randn(rng, (3, 4, d), "f32")
        out, lse = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, table, lengths, return_lse=True)
        assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (3, 4, d)
        assert lse.dtype == np.float32 and lse.shape == (3, 4)
        golden, golden_lse = attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, table, lengths)
        check_close(out, golden, "f16")
        check_close(lse, golden_lse, "f16", "lse")


# ---------------------------------------------------------------- extend

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("heads,kv_heads,head_dim,window,softcap", [
    (8, 2, 32, 0, 0.0),
    (4, 1, 48, 7, 0.0),
    (4, 4, 16, 0, 5.0),
])
def test_extend_matches_golden(rng, layout, page_size, dtype, heads, kv_heads, head_dim, window, softcap):
    lengths = [23, 5, 40, 17, 9]
    q_lens = [4, 0, 17, 1, 9]  # ragged: idle slot, decode row, q_len == length, across pages
    batch, max_q = len(lengths), max(q_lens)
    cache = filled_cache(rng, layout, page_size, kv_heads, head_dim, lengths, dtype)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    rows = int(cu[-1]) + 3  # three padding rows past cu_seqlens_q[batch]: neither read nor written
    plan = attnkit.plan_extend(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               num_pages=cache.num_pages, max_q_len=max_q, max_total_q=rows, page_size=page_size,
                               max_pages_per_seq=cache.width, kv_len=max(lengths), layout=layout, kv_dtype=dtype,
                               window=window, softcap=softcap)
    q = randn(rng, (rows, heads, head_dim), dtype)
    q[cu[-1]:] = np.nan  # padding rows are never read
    out = poisoned(q.shape, dtype)
    lse = np.full((rows, heads), np.nan, np.float32)
    lens = np.array(lengths, np.int32)
    got = attnkit.extend(plan, q, cu, cache.k_pages, cache.v_pages, cache.table, lens, out=out, lse=lse)
    assert got[0] is out and got[1] is lse
    assert np.isnan(out[cu[-1]:]).all() and np.isnan(lse[cu[-1]:]).all(), "padding rows were written"

    golden, golden_lse = attnkit.reference_extend(plan, q, cu, cache.k_pages, cache.v_pages, cache.table, lens)
    assert golden.shape == (cu[-1], heads, head_dim)
    check_close(out[:cu[-1]], golden, dtype)
    check_close(lse[:cu[-1]], golden_lse, "f32", "lse")
    for b in range(batch):
        if q_lens[b] == 0:
            continue
        k, v = cache.gather(b, lengths[b])
        rows_b = q[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None]  # [1, heads, q_len, head_dim]
        mine, mine_lse = attention_f64(rows_b, k[None], v[None], causal=True, window=window, softcap=softcap)
        check_close(out[cu[b]:cu[b + 1]], mine[0].transpose(1, 0, 2), dtype, f"sequence {b} vs numpy")
        check_close(lse[cu[b]:cu[b + 1]], mine_lse[0].T, "f32", f"sequence {b} lse vs numpy")


def test_extend_with_one_row_per_sequence_equals_paged_decode(rng):
    layout, page_size, h, kvh, d = "HND", 16, 8, 2, 32
    lengths = [33, 1, 64]
    cache = filled_cache(rng, layout, page_size, kvh, d, lengths, "f32")
    common = dict(batch=3, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages, page_size=page_size,
                  max_pages_per_seq=cache.width, layout=layout, kv_dtype="f32")
    q = randn(rng, (3, h, d), "f32")
    decoded = attnkit.paged_decode(attnkit.plan_paged_decode(**common), q, cache.k_pages, cache.v_pages, cache.table,
                                   lengths)
    extended = attnkit.extend(attnkit.plan_extend(max_q_len=1, **common), q, [0, 1, 2, 3], cache.k_pages,
                              cache.v_pages, cache.table, lengths)
    check_close(extended, decoded.astype(np.float64), "f32")


def test_an_idle_extend_step_takes_rowless_arrays(rng):
    """A step whose every sequence is idle (cu_seqlens_q all 0) passes q of no rows, which numpy
    gives zero strides and torch a null data pointer: accepted, nothing written (both were
    rejected, as misaligned and as not contiguous)."""
    layout, page_size, h, kvh, d = "NHD", 16, 4, 2, 16
    lengths = [40, 20]
    cache = filled_cache(rng, layout, page_size, kvh, d, lengths, "f32")
    plan = attnkit.plan_extend(batch=2, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                               page_size=page_size, max_pages_per_seq=cache.width, layout=layout, kv_dtype="f32",
                               max_q_len=4)
    k_before, v_before = cache.k_pages.copy(), cache.v_pages.copy()
    out, lse = attnkit.extend(plan, np.empty((0, h, d), np.float32), [0, 0, 0], cache.k_pages, cache.v_pages,
                              cache.table, lengths, return_lse=True)
    assert out.shape == (0, h, d) and lse.shape == (0, h)
    np.testing.assert_array_equal(cache.k_pages, k_before)
    np.testing.assert_array_equal(cache.v_pages, v_before)
    torch = pytest.importorskip("torch")
    out = attnkit.extend(plan, torch.empty(0, h, d), torch.zeros(3, dtype=torch.int32), torch.from_numpy(cache.k_pages),
                         torch.from_numpy(cache.v_pages), torch.from_numpy(cache.table),
                         torch.tensor(lengths, dtype=torch.int32))
    assert tuple(out.shape) == (0, h, d)


def test_paged_decode_and_extend_fold_attention_sinks(rng):
    """sinks= (gpt-oss): each head's logit joins every row's softmax with no value; against numpy's
    float64 softmax with the sink column (an empty sequence: zeros and LSE = the sink)."""
    layout, page_size, h, kvh, d = "NHD", 16, 8, 2, 32
    lengths = [33, 0, 70]
    cache = filled_cache(rng, layout, page_size, kvh, d, lengths, "f32")
    sinks = (2.0 + 1.5 * rng.standard_normal(h)).astype(np.float32)
    sinks[0] = -np.inf  # a head without a sink
    common = dict(batch=3, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages, page_size=page_size,
                  max_pages_per_seq=cache.width, layout=layout, kv_dtype="f32")
    q = randn(rng, (3, h, d), "f32")
    out, lse = attnkit.paged_decode(attnkit.plan_paged_decode(**common), q, cache.k_pages, cache.v_pages, cache.table,
                                    lengths, return_lse=True, sinks=sinks)
    for b, n in enumerate(lengths):
        if n == 0:
            continue  # checked below
        k, v = cache.gather(b, n)
        mine, mine_lse = attention_f64(q[b][None, :, None, :], k[None], v[None], causal=True, sinks=sinks)
        check_close(out[b], mine[0, :, 0], "f32", f"decode sequence {b}")
        np.testing.assert_allclose(lse[b], mine_lse[0, :, 0], rtol=1e-5, atol=1e-5)
    assert not out[1].any() and (lse[1] == sinks).all()

    q_lens = [5, 0, 12]
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    rows = randn(rng, (int(cu[-1]), h, d), "f32")
    ext, ext_lse = attnkit.extend(attnkit.plan_extend(max_q_len=12, **common), rows, cu, cache.k_pages, cache.v_pages,
                                  cache.table, lengths, return_lse=True, sinks=sinks)
    for b in (0, 2):
        k, v = cache.gather(b, lengths[b])
        mine, mine_lse = attention_f64(rows[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None], k[None], v[None], causal=True,
                                       sinks=sinks)
        check_close(ext[cu[b]:cu[b + 1]], mine[0].transpose(1, 0, 2), "f32", f"extend sequence {b}")
        np.testing.assert_allclose(ext_lse[cu[b]:cu[b + 1]], mine_lse[0].T, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- append

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_append_crosses_pages_then_extend_attends_the_new_tokens(rng, layout, page_size, dtype):
    """The serving step: append each sequence's new tokens (starting mid-page and crossing page
    boundaries), then extend over them. The pools equal a numpy model of the append exactly, and
    the attention equals the golden and the numpy softmax."""
    kvh, d, h = 2, 32, 4
    before = [14, 0, 31, 5]      # keys already cached
    new = [20, 3, 1, 0]          # tokens appended (crossing 1-2 pages at page 16, many at page 1)
    after = [a + n for a, n in zip(before, new)]
    cache = filled_cache(rng, layout, page_size, kvh, d, before, dtype, capacities=after)
    cu_new = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    k_new, v_new = randn(rng, (cu_new[-1], kvh, d), dtype), randn(rng, (cu_new[-1], kvh, d), dtype)
    model = PagedCache.__new__(PagedCache)
    model.__dict__.update(cache.__dict__)
    model.k_pages, model.v_pages = cache.k_pages.copy(), cache.v_pages.copy()
    for b in range(len(new)):
        model.write(b, before[b], k_new[cu_new[b]:cu_new[b + 1]], v_new[cu_new[b]:cu_new[b + 1]])

    assert attnkit.paged_append_kv(cache.k_pages, cache.v_pages, k_new, v_new, cache.table, before, cu_new,
                                   layout=layout) is None
    np.testing.assert_array_equal(cache.k_pages, model.k_pages)  # NaN slots compare equal: untouched
    np.testing.assert_array_equal(cache.v_pages, model.v_pages)

    plan = attnkit.plan_extend(batch=4, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                               max_q_len=max(new), page_size=page_size, max_pages_per_seq=cache.width,
                               kv_len=max(after), layout=layout, kv_dtype=dtype)
    q = randn(rng, (cu_new[-1], h, d), dtype)
    out = attnkit.extend(plan, q, cu_new, cache.k_pages, cache.v_pages, cache.table, after)
    golden, _ = attnkit.reference_extend(plan, q, cu_new, cache.k_pages, cache.v_pages, cache.table, after)
    check_close(out, golden, dtype)
    for b in range(4):
        if new[b] == 0:
            continue
        k, v = cache.gather(b, after[b])
        mine, _ = attention_f64(q[cu_new[b]:cu_new[b + 1]].transpose(1, 0, 2)[None], k[None], v[None], causal=True)
        check_close(out[cu_new[b]:cu_new[b + 1]], mine[0].transpose(1, 0, 2), dtype, f"sequence {b} vs numpy")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_append_one_token_per_sequence_k_or_v_alone_with_a_plan_as_layout(rng, layout):
    """cu_seqlens_new left out (one row per sequence); K alone, then V alone; the plan's cache
    spec given as the layout."""
    kvh, d, page_size = 2, 16, 16
    cache = filled_cache(rng, layout, page_size, kvh, d, [15, 16, 3], "f32", capacities=[16, 17, 4])
    plan = attnkit.plan_paged_decode(batch=3, num_heads=2, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                                     page_size=page_size, max_pages_per_seq=cache.width, layout=layout,
                                     kv_dtype="f32")
    k_new, v_new = randn(rng, (3, kvh, d), "f32"), randn(rng, (3, kvh, d), "f32")
    v_before = cache.v_pages.copy()
    attnkit.paged_append_kv(cache.k_pages, None, k_new, None, cache.table, [15, 16, 3], layout=plan)
    np.testing.assert_array_equal(cache.v_pages, v_before)
    attnkit.paged_append_kv(None, cache.v_pages, None, v_new, cache.table, [15, 16, 3], layout=plan)
    for b, pos in enumerate([15, 16, 3]):
        page, offset = cache.table[b, pos // page_size], pos % page_size
        np.testing.assert_array_equal(slot(cache.k_pages, layout, page, offset), k_new[b])
        np.testing.assert_array_equal(slot(cache.v_pages, layout, page, offset), v_new[b])


def test_rejected_appends_leave_the_pools_unchanged(rng):
    layout, page_size, kvh, d = "HND", 16, 2, 16
    cache = filled_cache(rng, layout, page_size, kvh, d, [10, 20], "f32", capacities=[32, 32])
    k_before, v_before = cache.k_pages.copy(), cache.v_pages.copy()
    k_new, v_new = randn(rng, (6, kvh, d), "f32"), randn(rng, (6, kvh, d), "f32")
    cu = np.array([0, 3, 6], np.int32)

    def rejected(table, starts, offsets=cu, match="Fix:"):
        with pytest.raises(attnkit.Error, match=match):
            attnkit.paged_append_kv(cache.k_pages, cache.v_pages, k_new, v_new, table, starts, offsets,
                                    layout=layout)
        np.testing.assert_array_equal(cache.k_pages, k_before)
        np.testing.assert_array_equal(cache.v_pages, v_before)

    bad = cache.table.copy()
    bad[1, 1] = cache.num_pages  # the second sequence's second page is outside the pool
    rejected(bad, [10, 14])
    bad = cache.table.copy()
    bad[1, 1] = -1  # no page assigned where the second sequence's tokens land
    rejected(bad, [10, 14])
    shared = cache.table.copy()
    shared[1, 0] = shared[0, 0]  # both sequences write slots 10..12 of one page
    rejected(shared, [10, 10], match="same slot")
    rejected(cache.table, [10, -1], match="negative")
    rejected(cache.table, [10, cache.width * page_size - 2])  # past the table's last page
    rejected(cache.table, [10, 14], np.array([0, 4, 3], np.int32))  # offsets decrease
    rejected(cache.table, [10, 14], np.array([0, 3, 7], np.int32))  # more rows than given


# ---------------------------------------------------------------- plans

def test_paged_plans_print_as_tables_and_convert_to_dicts():
    plan = attnkit.plan_paged_decode(batch=8, num_heads=32, kv_heads=8, head_dim=128, num_pages=4096, page_size=16,
                                     max_pages_per_seq=256, kv_len=3000, kv_dtype="bf16", target="h200")
    text = repr(plan)
    assert "paged cache: HND, page_size 16, 4096 pages" in text and "reasons" in text
    assert str(plan) == text == plan.table()
    d = plan.to_dict()
    assert d["kind"] == "paged_decode" == plan.kind and plan.paged
    assert d["problem"]["cache"] == {"layout": "HND", "num_pages": 4096, "page_size": 16, "max_pages_per_seq": 256,
                                     "capacity": 4096} == plan.cache
    assert d["problem"]["kv_len"] == 3000 and d["problem"]["kv_dtype"] == "bf16"
    assert d["bounds"] == plan.bounds and d["bounds"]["batch"] == 8 and d["bounds"]["max_kv_len"] == 3000
    assert d["bounds"]["workspace_bytes"] == d["evidence"]["workspace_bytes"] == plan.workspace_bytes
    assert d["target"]["backend"] == "cuda" and plan.backend == "cuda"
    assert d["page_boxes"] is True and plan._native.page_boxes  # pages of 16 rows, no window: TMA page runs
    assert d["partition"]["family"] == plan.family and plan.reasons == d["reasons"]
    assert json.loads(plan.to_json(indent=2)) == d

    # The lengths hint tunes only the partition: uniform batches keep the contiguous decode's splits.
    common = dict(batch=64, num_heads=32, kv_heads=8, head_dim=128, num_pages=64 * 1024, page_size=16,
                  max_pages_per_seq=1024, kv_len=16384, kv_dtype="bf16", target="h200")
    flat = attnkit.plan_decode(batch=64, num_heads=32, kv_heads=8, head_dim=128, max_seq=16384, kv_dtype="bf16",
                               target="h200")
    uniform = attnkit.plan_paged_decode(expected_total_keys=64 * 16384, **common)
    mixed = attnkit.plan_paged_decode(expected_total_keys=64 * 8000, **common)
    assert uniform.to_dict()["problem"]["expected_total_keys"] == 64 * 16384
    assert uniform.to_dict()["partition"]["sequence_splits"] == flat.to_dict()["partition"]["sequence_splits"]
    assert mixed.to_dict()["partition"]["sequence_splits"] > uniform.to_dict()["partition"]["sequence_splits"]
    with pytest.raises(attnkit.Error, match="expected_total_keys"):
        attnkit.plan_paged_decode(expected_total_keys=-1, **common)

    ext = attnkit.plan_extend(batch=4, num_heads=8, kv_heads=2, head_dim=64, num_pages=100, max_q_len=8,
                              page_size=1, kv_len=50, layout="nhd", kv_dtype="f32", threads=2)
    d = ext.to_dict()
    assert ext.kind == "extend" and ext.backend == "cpu" and ext.target.threads == 2
    assert d["problem"]["cache"]["layout"] == "NHD" and d["problem"]["cache"]["max_pages_per_seq"] == 50
    assert d["problem"]["max_q_len"] == 8 and d["problem"]["max_total_q"] == 32
    assert d["bounds"] == {"batch": 4, "max_kv_len": 50, "max_q_len": 8, "max_total_q": 32,
                           "workspace_bytes": ext.workspace_bytes}
    assert d["gather_keys"] == ext._native.gather_keys > 0
    assert "extend over a paged cache: NHD, page_size 1" in repr(ext)

    contiguous = attnkit.plan_decode(batch=1, num_heads=2, kv_heads=1, head_dim=16, max_seq=8, kv_dtype="f32")
    assert not contiguous.paged and contiguous.cache is None and contiguous.bounds is None


def test_paged_plans_reject_bad_problems_with_a_fix():
    common = dict(batch=2, num_heads=8, kv_heads=2, head_dim=64, num_pages=16, page_size=16, max_pages_per_seq=4)
    for bad in (dict(layout="BSHD"), dict(kv_len=65), dict(num_heads=6, kv_heads=4), dict(page_size=0),
                dict(head_dim=100)):
        with pytest.raises(attnkit.Error, match="Fix:"):
            attnkit.plan_paged_decode(**{**common, **bad})
        with pytest.raises(attnkit.Error, match="Fix:"):
            attnkit.plan_extend(max_q_len=4, **{**common, **bad})
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_extend(max_q_len=0, **common)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_paged_decode(batch=1, num_heads=2, kv_heads=1, head_dim=16, num_pages=4)  # no width, no kv_len


# ---------------------------------------------------------------- CUDA rejections

@pytest.mark.gpu
@pytest.mark.parametrize("call", ["paged_decode", "extend", "paged_append_kv"])
def test_cuda_paged_calls_reject_bad_shapes_with_a_fix_and_leave_pools_unchanged(call):
    """A CUDA paged call with a host-visible error (a page table narrower than the plan's
    max_pages_per_seq; new rows with the wrong KV head count) raises attnkit.Error with a Fix before
    anything is launched: the pools are byte-for-byte unchanged. (The kernels themselves are checked
    against float64 in test_gpu.py.)"""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    dev, kvh, d, page_size = "cuda", 2, 32, 16
    k_pages = torch.randn(4, kvh, page_size, d, device=dev)
    v_pages = torch.randn_like(k_pages)
    k_before, v_before = k_pages.clone(), v_pages.clone()
    narrow_table = torch.tensor([[0], [2]], dtype=torch.int32, device=dev)  # the plan covers 2 pages per sequence
    lengths = torch.tensor([20, 5], dtype=torch.int32, device=dev)
    common = dict(batch=2, num_heads=4, kv_heads=kvh, head_dim=d, num_pages=4, page_size=page_size,
                  max_pages_per_seq=2, kv_dtype="f32", target=attnkit.known_target("h200"))
    with pytest.raises(attnkit.Error, match="Fix:"):
        if call == "paged_decode":
            q = torch.randn(2, 4, d, device=dev)
            attnkit.paged_decode(attnkit.plan_paged_decode(**common), q, k_pages, v_pages, narrow_table, lengths)
        elif call == "extend":
            q = torch.randn(3, 4, d, device=dev)
            cu = torch.tensor([0, 2, 3], dtype=torch.int32, device=dev)
            attnkit.extend(attnkit.plan_extend(max_q_len=2, **common), q, cu, k_pages, v_pages, narrow_table, lengths)
        else:
            table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=dev)
            rows = torch.randn(2, kvh + 1, d, device=dev)  # one KV head too many
            attnkit.paged_append_kv(k_pages, v_pages, rows, rows, table, torch.tensor([20, 5], dtype=torch.int32,
                                                                                       device=dev))
    torch.cuda.synchronize()
    assert torch.equal(k_pages, k_before) and torch.equal(v_pages, v_before)
