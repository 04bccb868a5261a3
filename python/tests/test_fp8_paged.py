"""e4m3 (fp8) page pools through the Python package: paged decode and extend over numpy uint8 pools
of e4m3 bytes in both layouts (HND, NHD) at page sizes 1 and 16 (GQA, windows, soft-cap, odd and
empty lengths, ragged q_len) against the paged golden and a numpy float64 softmax over keys
dequantized by the format's own table; paged append quantizing f32/f16 rows into e4m3 pools byte
for byte against an independent numpy quantizer, then decoded and extended over; the scales and
their rejections, which leave pools and outputs unchanged; with torch, torch.float8_e4m3fn pools
(bf16 q and rows) and a compiled step; marked gpu, the CUDA kernels. Fresh random inputs each run
(ATTNKIT_TEST_SEED replays one)."""
from __future__ import annotations

import numpy as np
import pytest

import attnkit
from conftest import attention_f64
from test_fp8 import TABLE, torch_float8
from test_fp8_kv_cache import quantize
from test_paged_cpu import PagedCache, randn, slot

LAYOUTS = ["HND", "NHD"]
PAGE_SIZES = [1, 16]
NAN_CODE = 0x7F  # e4m3fn's NaN: what every slot no sequence owns holds


def rel_l2(actual, golden) -> float:
    a, g = np.asarray(actual, np.float64), np.asarray(golden, np.float64)
    return float(np.linalg.norm(a - g) / max(np.linalg.norm(g), 1e-30))


def tolerance(plan) -> float:
    return plan.to_dict()["evidence"]["rel_l2_tolerance"]


def e4m3_cache(rng, layout, page_size, kv_heads, head_dim, lengths, k_scale, v_scale, capacities=None) -> PagedCache:
    """A PagedCache (test_paged_cpu: shuffled pages, a -1 padded table) with uint8 pools of e4m3
    codes: sequence b's first lengths[b] rows quantize(normal draws, scale), every other slot NaN."""
    cache = PagedCache(rng, layout, page_size, kv_heads, head_dim, capacities or lengths, "f32")
    cache.k_pages = np.full(cache.k_pages.shape, NAN_CODE, np.uint8)
    cache.v_pages = np.full(cache.v_pages.shape, NAN_CODE, np.uint8)
    for b, n in enumerate(lengths):
        cache.write(b, 0, quantize(rng.standard_normal((n, kv_heads, head_dim)) * 2, k_scale),
                    quantize(rng.standard_normal((n, kv_heads, head_dim)), v_scale))
    return cache


def dequantized(cache, b, n, k_scale, v_scale):
    """Sequence b's first n keys and values as float64 [kv_heads, n, head_dim]: the e4m3 table's
    values of the gathered codes times the scales as the library holds them (float32)."""
    k, v = cache.gather(b, n)
    return TABLE[k] * float(np.float32(k_scale)), TABLE[v] * float(np.float32(v_scale))


def numpy_decode(cache, q, lengths, k_scale, v_scale, **options):
    """Per sequence: the gathered codes dequantized by the e4m3 table times the scales (as the
    library holds them: float32), then numpy's float64 softmax attention (conftest). Sequences
    without keys are left out."""
    results = {}
    for b, n in enumerate(lengths):
        if n == 0:
            continue
        k, v = dequantized(cache, b, n, k_scale, v_scale)
        out, lse = attention_f64(q[b][None, :, None, :], k[None], v[None], causal=True, **options)
        results[b] = (out[0, :, 0], lse[0, :, 0])
    return results


def plan_for(cache, batch, heads, kv_heads, head_dim, kv_len, **kw):
    return attnkit.plan_paged_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                     num_pages=cache.num_pages, page_size=cache.page_size,
                                     max_pages_per_seq=cache.width, kv_len=kv_len, layout=cache.layout,
                                     kv_dtype="e4m3", **kw)


# ---------------------------------------------------------------- paged decode

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,window,softcap,q_dtype", [
    (8, 2, 64, 0, 0.0, "f16"),
    (6, 1, 48, 13, 0.0, "f32"),
    (4, 4, 32, 0, 6.0, "f32"),
    (16, 4, 128, 0, 0.0, "f16"),
])
def test_paged_decode_over_e4m3_pools_matches_the_golden(rng, layout, page_size, heads, kv_heads, head_dim, window,
                                                         softcap, q_dtype):
    lengths = [37, 0, 1, 16, 2 * int(rng.integers(1, 45)) + 1]  # odd, empty, one key, a page multiple
    batch = len(lengths)
    k_scale, v_scale = float(rng.uniform(0.004, 0.05)), float(rng.uniform(0.5, 4.0))
    cache = e4m3_cache(rng, layout, page_size, kv_heads, head_dim, lengths, k_scale, v_scale)
    plan = plan_for(cache, batch, heads, kv_heads, head_dim, max(lengths), q_dtype=q_dtype, out_dtype="f32",
                    window=window, softcap=softcap)
    assert plan.to_dict()["problem"]["kv_dtype"] == "e4m3"
    q = randn(rng, (batch, heads, head_dim), q_dtype)
    out = np.full((batch, heads, head_dim), np.nan, np.float32)
    lse = np.full((batch, heads), np.nan, np.float32)
    got, got_lse = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, lengths, out=out,
                                        lse=lse, k_scale=k_scale, v_scale=v_scale)
    assert got is out and got_lse is lse

    golden, golden_lse = attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, lengths,
                                                        k_scale=k_scale, v_scale=v_scale)
    assert not np.isnan(out).any()
    assert rel_l2(out, golden) <= tolerance(plan), rel_l2(out, golden)
    finite = np.isfinite(golden_lse)
    np.testing.assert_allclose(lse[finite], golden_lse[finite], rtol=1e-3, atol=1e-3)
    assert not out[1].any() and np.isneginf(lse[1]).all(), "an empty sequence writes zeros and LSE -inf"
    # The golden reads the pools as the format defines them, times the scales: numpy agrees to the
    # rounding of the score scale, which the library holds in float32 (1/sqrt(head_dim): ~6e-8
    # relative), and the kernel is within the plan's tolerance of both.
    for b, (mine, mine_lse) in numpy_decode(cache, q, lengths, k_scale, v_scale, window=window,
                                            softcap=softcap).items():
        np.testing.assert_allclose(golden[b], mine, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(golden_lse[b], mine_lse, rtol=1e-5, atol=1e-5)
        assert rel_l2(out[b], mine) <= tolerance(plan), (b, rel_l2(out[b], mine))
    # The scales are applied: the same bytes read unscaled give another answer.
    plain = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, lengths)
    assert not np.allclose(plain, out, atol=1e-3)


def test_one_plan_over_changing_tables_and_scales(rng):
    """A plan over changing compositions (lengths, tables and scales change; the bounds do not),
    outputs allocated with numpy in the plan's dtypes (q f16 -> out f16 by default)."""
    lengths = [70, 70, 70]
    cache = e4m3_cache(rng, "NHD", 16, 2, 32, lengths, 0.01, 1.0)
    plan = plan_for(cache, 3, 4, 2, 32, 70, q_dtype="f16")
    for _ in range(3):
        run_lengths = rng.integers(0, 71, size=3).astype(np.int32)
        table = cache.table.copy()
        rng.shuffle(table)  # sequences swap their pages between runs
        k_scale, v_scale = float(rng.uniform(0.001, 0.1)), float(rng.uniform(0.1, 10.0))
        q = randn(rng, (3, 4, 32), "f16")
        out = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, table, run_lengths, k_scale=k_scale,
                                   v_scale=v_scale)
        assert isinstance(out, np.ndarray) and out.dtype == np.float16 and out.shape == (3, 4, 32)
        golden, _ = attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, table, run_lengths,
                                                   k_scale=k_scale, v_scale=v_scale)
        assert rel_l2(out, golden) <= tolerance(plan)


# ---------------------------------------------------------------- extend

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,window,softcap", [
    (8, 2, 32, 0, 0.0),
    (4, 1, 48, 7, 0.0),
    (4, 4, 16, 0, 5.0),
])
def test_extend_over_e4m3_pools_matches_the_golden(rng, layout, page_size, heads, kv_heads, head_dim, window,
                                                   softcap):
    lengths = [23, 5, 41, 17, 9]
    q_lens = [4, 0, 17, 1, 9]  # ragged: an idle slot, a decode row, q_len == length, across pages
    batch = len(lengths)
    k_scale, v_scale = float(rng.uniform(0.004, 0.05)), float(rng.uniform(0.5, 4.0))
    cache = e4m3_cache(rng, layout, page_size, kv_heads, head_dim, lengths, k_scale, v_scale)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    rows = int(cu[-1]) + 3  # three padding rows past cu_seqlens_q[batch]: neither read nor written
    plan = attnkit.plan_extend(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               num_pages=cache.num_pages, max_q_len=max(q_lens), max_total_q=rows,
                               page_size=page_size, max_pages_per_seq=cache.width, kv_len=max(lengths),
                               layout=layout, kv_dtype="e4m3", q_dtype="f32", out_dtype="f32", window=window,
                               softcap=softcap)
    q = randn(rng, (rows, heads, head_dim), "f32")
    q[cu[-1]:] = np.nan  # padding rows are never read
    out = np.full(q.shape, np.nan, np.float32)
    lse = np.full((rows, heads), np.nan, np.float32)
    attnkit.extend(plan, q, cu, cache.k_pages, cache.v_pages, cache.table, lengths, out=out, lse=lse,
                   k_scale=k_scale, v_scale=v_scale)
    assert np.isnan(out[cu[-1]:]).all() and np.isnan(lse[cu[-1]:]).all(), "padding rows were written"

    golden, golden_lse = attnkit.reference_extend(plan, q, cu, cache.k_pages, cache.v_pages, cache.table, lengths,
                                                  k_scale=k_scale, v_scale=v_scale)
    n = int(cu[-1])
    assert not np.isnan(out[:n]).any()
    assert rel_l2(out[:n], golden) <= tolerance(plan), rel_l2(out[:n], golden)
    np.testing.assert_allclose(lse[:n], golden_lse, rtol=1e-3, atol=1e-3)
    for b in range(batch):
        if q_lens[b] == 0:
            continue
        k, v = dequantized(cache, b, lengths[b], k_scale, v_scale)
        rows_b = q[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None]  # [1, heads, q_len, head_dim]
        mine, mine_lse = attention_f64(rows_b, k[None], v[None], causal=True, window=window, softcap=softcap)
        mine, mine_lse = mine[0].transpose(1, 0, 2), mine_lse[0].T
        np.testing.assert_allclose(golden[cu[b]:cu[b + 1]], mine, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(golden_lse[cu[b]:cu[b + 1]], mine_lse, rtol=1e-5, atol=1e-5)
        assert rel_l2(out[cu[b]:cu[b + 1]], mine) <= tolerance(plan), b
    plain = attnkit.extend(plan, q, cu, cache.k_pages, cache.v_pages, cache.table, lengths)
    assert not np.allclose(plain[:n], out[:n], atol=1e-3)


# ---------------------------------------------------------------- paged append

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("rows_dtype", ["f32", "f16"])
def test_append_quantizes_into_e4m3_pools_then_decode_reads_them(rng, layout, page_size, rows_dtype):
    """Runs of new tokens starting mid-page and crossing pages are stored as e4m3(x / scale): the
    pools equal a numpy model written with the independent quantizer, byte for byte (K scaled to
    saturate at 448, V to land on subnormals); paged decode over the longer sequences, and extend
    over the new tokens, then match the golden and numpy's softmax over the dequantized keys."""
    kvh, d, h = 2, 32, 4
    before, new = [14, 0, 31, 5], [20, 3, 1, 0]
    after = [a + n for a, n in zip(before, new)]
    k_scale, v_scale = 0.03, 5.0
    cache = e4m3_cache(rng, layout, page_size, kvh, d, before, k_scale, v_scale, capacities=after)
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    k_new = randn(rng, (cu[-1], kvh, d), rows_dtype, scale=20.0)   # / 0.03: many beyond 448
    v_new = randn(rng, (cu[-1], kvh, d), rows_dtype, scale=0.05)   # / 5: subnormals
    model = PagedCache.__new__(PagedCache)
    model.__dict__.update(cache.__dict__)
    model.k_pages, model.v_pages = cache.k_pages.copy(), cache.v_pages.copy()
    for b in range(len(new)):
        model.write(b, before[b], quantize(k_new[cu[b]:cu[b + 1]], k_scale), quantize(v_new[cu[b]:cu[b + 1]], v_scale))
    assert (model.k_pages == 0x7E).any() and (model.v_pages[model.v_pages < 8] > 0).any()  # saturated, subnormal

    attnkit.paged_append_kv(cache.k_pages, cache.v_pages, k_new, v_new, cache.table, before, cu, layout=layout,
                            k_scale=k_scale, v_scale=v_scale)
    np.testing.assert_array_equal(cache.k_pages, model.k_pages)  # every other slot untouched (NaN codes too)
    np.testing.assert_array_equal(cache.v_pages, model.v_pages)

    plan = plan_for(cache, 4, h, kvh, d, max(after), q_dtype="f32", out_dtype="f32")
    q = randn(rng, (4, h, d), "f32")
    out, lse = attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, after, return_lse=True,
                                    k_scale=k_scale, v_scale=v_scale)
    golden, golden_lse = attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, after,
                                                        k_scale=k_scale, v_scale=v_scale)
    assert rel_l2(out, golden) <= tolerance(plan)
    np.testing.assert_allclose(lse, golden_lse, rtol=1e-3, atol=1e-3)
    for b, (mine, _) in numpy_decode(cache, q, after, k_scale, v_scale).items():
        assert rel_l2(out[b], mine) <= tolerance(plan), b

    ext_plan = attnkit.plan_extend(batch=4, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                                   max_q_len=max(new), page_size=page_size, max_pages_per_seq=cache.width,
                                   kv_len=max(after), layout=layout, kv_dtype="e4m3", q_dtype="f32", out_dtype="f32")
    q_rows = randn(rng, (cu[-1], h, d), "f32")
    ext = attnkit.extend(ext_plan, q_rows, cu, cache.k_pages, cache.v_pages, cache.table, after, k_scale=k_scale,
                         v_scale=v_scale)
    golden, _ = attnkit.reference_extend(ext_plan, q_rows, cu, cache.k_pages, cache.v_pages, cache.table, after,
                                         k_scale=k_scale, v_scale=v_scale)
    assert rel_l2(ext, golden) <= tolerance(ext_plan)
    for b in range(4):
        if new[b] == 0:
            continue
        k, v = dequantized(cache, b, after[b], k_scale, v_scale)
        mine, _ = attention_f64(q_rows[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None], k[None], v[None], causal=True)
        assert rel_l2(ext[cu[b]:cu[b + 1]], mine[0].transpose(1, 0, 2)) <= tolerance(ext_plan), b


@pytest.mark.parametrize("layout", LAYOUTS)
def test_append_k_or_v_alone_into_e4m3_pools_with_a_plan_as_layout(rng, layout):
    """One row per sequence (cu_seqlens_new left out), K alone then V alone, each with only its
    own scale read (the other may be anything valid); the plan's pool spec as the layout."""
    kvh, d, page_size = 2, 16, 16
    cache = e4m3_cache(rng, layout, page_size, kvh, d, [15, 16, 3], 0.1, 0.1, capacities=[16, 17, 4])
    plan = plan_for(cache, 3, 2, kvh, d, 17)
    k_new, v_new = randn(rng, (3, kvh, d), "f32"), randn(rng, (3, kvh, d), "f32")
    v_before = cache.v_pages.copy()
    attnkit.paged_append_kv(cache.k_pages, None, k_new, None, cache.table, [15, 16, 3], layout=plan, k_scale=0.02)
    np.testing.assert_array_equal(cache.v_pages, v_before)
    attnkit.paged_append_kv(None, cache.v_pages, None, v_new, cache.table, [15, 16, 3], layout=plan, v_scale=0.5)
    for b, pos in enumerate([15, 16, 3]):
        page, offset = cache.table[b, pos // page_size], pos % page_size
        np.testing.assert_array_equal(slot(cache.k_pages, layout, page, offset), quantize(k_new[b], 0.02))
        np.testing.assert_array_equal(slot(cache.v_pages, layout, page, offset), quantize(v_new[b], 0.5))


# ---------------------------------------------------------------- rejections

def test_bad_scales_are_rejected_before_anything_is_written(rng):
    kvh, d = 2, 32
    cache = e4m3_cache(rng, "HND", 16, kvh, d, [20, 9], 0.05, 0.05, capacities=[32, 32])
    plan = plan_for(cache, 2, 4, kvh, d, 32, q_dtype="f32", out_dtype="f32")
    q = randn(rng, (2, 4, d), "f32")
    out = np.full((2, 4, d), np.nan, np.float32)
    k_before, v_before = cache.k_pages.copy(), cache.v_pages.copy()
    rows = randn(rng, (2, kvh, d), "f32")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(attnkit.Error, match="kv_scales.k=.*is not a finite number > 0.*Fix:"):
            attnkit.paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, [20, 9], out=out, k_scale=bad)
        with pytest.raises(attnkit.Error, match="kv_scales.v=.*is not a finite number > 0.*Fix:"):
            attnkit.reference_paged_decode(plan, q, cache.k_pages, cache.v_pages, cache.table, [20, 9], v_scale=bad)
        with pytest.raises(attnkit.Error, match="kv_scales.v=.*is not a finite number > 0.*Fix:"):
            attnkit.paged_append_kv(cache.k_pages, cache.v_pages, rows, rows, cache.table, [20, 9], v_scale=bad)
    assert np.isnan(out).all()
    np.testing.assert_array_equal(cache.k_pages, k_before)
    np.testing.assert_array_equal(cache.v_pages, v_before)


def test_scales_on_16_bit_pools_and_e4m3_rows_are_rejected_leaving_pools_unchanged(rng):
    kvh, d, page_size = 2, 32, 16
    pools = PagedCache(rng, "NHD", page_size, kvh, d, [20, 9], "f16")
    pools.k_pages[...] = randn(rng, pools.k_pages.shape, "f16")
    pools.v_pages[...] = randn(rng, pools.v_pages.shape, "f16")
    k_before, v_before = pools.k_pages.copy(), pools.v_pages.copy()
    plan = attnkit.plan_paged_decode(batch=2, num_heads=4, kv_heads=kvh, head_dim=d, num_pages=pools.num_pages,
                                     page_size=page_size, max_pages_per_seq=pools.width, layout="NHD", kv_dtype="f16")
    q = randn(rng, (2, 4, d), "f16")
    out = np.full((2, 4, d), np.nan, np.float16)
    with pytest.raises(attnkit.Error, match="kv_scales.v=2.* with a f16 cache. Fix: kv_scales apply to e4m3 caches"):
        attnkit.paged_decode(plan, q, pools.k_pages, pools.v_pages, pools.table, [20, 9], out=out, v_scale=2.0)
    assert np.isnan(out).all()
    rows = randn(rng, (2, kvh, d), "f16")
    with pytest.raises(attnkit.Error, match="kv_scales.k=0.5.* with a f16 cache. Fix: kv_scales apply to e4m3"):
        attnkit.paged_append_kv(pools.k_pages, pools.v_pages, rows, rows, pools.table, [20, 9], layout="NHD",
                                k_scale=0.5)
    np.testing.assert_array_equal(pools.k_pages, k_before)
    np.testing.assert_array_equal(pools.v_pages, v_before)

    # e4m3 rows into an e4m3 pool: append quantizes, so it takes f32/f16/bf16 rows only.
    cache = e4m3_cache(rng, "HND", page_size, kvh, d, [20, 9], 0.05, 0.05, capacities=[32, 32])
    k_before, v_before = cache.k_pages.copy(), cache.v_pages.copy()
    codes = quantize(rng.standard_normal((2, kvh, d)), 0.05)
    with pytest.raises(attnkit.Error, match="k_new has dtype e4m3 for an e4m3 pool. Fix: pass the new rows in f32"):
        attnkit.paged_append_kv(cache.k_pages, cache.v_pages, codes, codes, cache.table, [20, 9], k_scale=0.05,
                                v_scale=0.05)
    np.testing.assert_array_equal(cache.k_pages, k_before)
    np.testing.assert_array_equal(cache.v_pages, v_before)


# ---------------------------------------------------------------- torch.float8_e4m3fn pools

@pytest.mark.torch
def test_torch_float8_pools_decode_and_append_on_the_cpu(rng):
    torch = torch_float8()
    kvh, d, h, page_size = 2, 128, 8, 16
    before, after = [40, 11], [41, 12]
    cache = e4m3_cache(rng, "HND", page_size, kvh, d, before, 0.5, 0.25, capacities=after)
    k = torch.from_numpy(cache.k_pages).view(torch.float8_e4m3fn)  # the same memory as the numpy pools
    v = torch.from_numpy(cache.v_pages).view(torch.float8_e4m3fn)
    plan = attnkit.plan_paged_decode(batch=2, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                                     page_size=page_size, max_pages_per_seq=cache.width, kv_dtype=torch.float8_e4m3fn)
    assert plan.to_dict()["problem"]["q_dtype"] == "bf16" == plan.out_dtype
    g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    k_new, v_new = torch.randn(2, kvh, d, generator=g).bfloat16(), torch.randn(2, kvh, d, generator=g).bfloat16()
    attnkit.paged_append_kv(k, v, k_new, v_new, torch.from_numpy(cache.table), before, layout=plan, k_scale=0.5,
                            v_scale=0.25)
    for b, pos in enumerate(before):
        page, offset = cache.table[b, pos // page_size], pos % page_size
        np.testing.assert_array_equal(cache.k_pages[page, :, offset], quantize(k_new[b].float().numpy(), 0.5))
        np.testing.assert_array_equal(cache.v_pages[page, :, offset], quantize(v_new[b].float().numpy(), 0.25))
    q = torch.randn(2, h, d, generator=g).bfloat16()
    table = torch.from_numpy(cache.table)
    out = attnkit.paged_decode(plan, q, k, v, table, after, k_scale=0.5, v_scale=0.25)
    assert out.dtype == torch.bfloat16
    golden, _ = attnkit.reference_paged_decode(plan, q, k, v, table, after, k_scale=0.5, v_scale=0.25)
    assert rel_l2(out.double().numpy(), golden) <= 1e-2  # bf16 output

    # A bf16 pool takes no scale, and float8 rows are refused: nothing written.
    pool = torch.randn(cache.num_pages, kvh, page_size, d, generator=g).bfloat16()
    before_bytes = pool.clone()
    with pytest.raises(attnkit.Error, match="with a bf16 cache. Fix: kv_scales apply to e4m3"):
        attnkit.paged_append_kv(pool, pool, k_new, v_new, table, before, k_scale=0.5)
    with pytest.raises(attnkit.Error, match="has dtype e4m3 for an e4m3 pool. Fix:"):
        attnkit.paged_append_kv(k, v, k_new.to(torch.float8_e4m3fn), v_new, table, after, k_scale=0.5)
    assert torch.equal(pool, before_bytes)


def fp8_paged_step(plan, extend_plan, k_pages, v_pages, table, k_new, v_new, lengths, q, q_rows, cu, k_scale,
                   v_scale):
    """Append one token per sequence, decode it, then verify drafted tokens (extend), all on e4m3
    pools with their scales."""
    attnkit.paged_append_kv(k_pages, v_pages, k_new, v_new, table, lengths - 1, layout=plan, k_scale=k_scale,
                            v_scale=v_scale)
    out, lse = attnkit.paged_decode(plan, q, k_pages, v_pages, table, lengths, return_lse=True, k_scale=k_scale,
                                    v_scale=v_scale)
    return out, lse, attnkit.extend(extend_plan, q_rows, cu, k_pages, v_pages, table, lengths, k_scale=k_scale,
                                    v_scale=v_scale)


@pytest.mark.torch
def test_an_e4m3_paged_step_compiles_without_graph_breaks(rng):
    """Append into torch.float8_e4m3fn pools, decode and extend over them, scales != 1, under
    torch.compile with fullgraph=True (the custom operators take the scales): the eager result,
    bit for bit."""
    torch = torch_float8()
    kvh, d, h, page_size = 2, 64, 8, 16
    cache = e4m3_cache(rng, "NHD", page_size, kvh, d, [40, 17], 0.05, 0.5, capacities=[41, 18])
    plan = plan_for(cache, 2, h, kvh, d, 41)
    extend_plan = attnkit.plan_extend(batch=2, num_heads=h, kv_heads=kvh, head_dim=d, num_pages=cache.num_pages,
                                      max_q_len=3, page_size=page_size, max_pages_per_seq=cache.width, kv_len=41,
                                      layout="NHD", kv_dtype="e4m3")
    g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    pools = [torch.from_numpy(p.copy()).view(torch.float8_e4m3fn) for p in (cache.k_pages, cache.v_pages)]
    eager_pools = [p.clone() for p in pools]
    rest = (torch.from_numpy(cache.table), torch.randn(2, kvh, d, generator=g).bfloat16(),
            torch.randn(2, kvh, d, generator=g).bfloat16(), torch.tensor([41, 18], dtype=torch.int32),
            torch.randn(2, h, d, generator=g).bfloat16(), torch.randn(3, h, d, generator=g).bfloat16(),
            torch.tensor([0, 2, 3], dtype=torch.int32), 0.05, 0.5)
    compiled = torch.compile(fp8_paged_step, backend="aot_eager", fullgraph=True)
    got = compiled(plan, extend_plan, *pools, *rest)
    expected = fp8_paged_step(plan, extend_plan, *eager_pools, *rest)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(pools, eager_pools):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    golden, _ = attnkit.reference_paged_decode(plan, rest[4], *pools, rest[0], rest[3], k_scale=0.05, v_scale=0.5)
    assert rel_l2(got[0].double().numpy(), golden) <= tolerance(plan)
    golden, _ = attnkit.reference_extend(extend_plan, rest[5], rest[6], *pools, rest[0], rest[3], k_scale=0.05,
                                         v_scale=0.5)
    assert rel_l2(got[2].double().numpy(), golden) <= tolerance(extend_plan)


# ---------------------------------------------------------------- CUDA

@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("HND", 16), ("NHD", 1)])
def test_cuda_paged_append_and_decode_with_torch_float8_pools(seed, layout, page_size):
    torch = torch_float8()
    if not (torch.cuda.is_available() and attnkit.cuda_built()):
        pytest.skip("no CUDA device visible to torch, or attnkit built without CUDA")
    g = torch.Generator(device="cuda").manual_seed(seed)
    rng = np.random.default_rng(seed)
    batch, heads, kv_heads, d = 3, 32, 8, 128
    lengths = [1500, 1, 777]
    pages_per_seq = [-(-n // page_size) for n in lengths]
    width, num_pages = max(pages_per_seq) + 1, sum(pages_per_seq) + 3
    order = rng.permutation(num_pages)
    table = np.full((batch, width), -1, np.int32)
    taken = 0
    for b, n in enumerate(pages_per_seq):
        table[b, :n] = order[taken:taken + n]
        taken += n
    shape = (num_pages, kv_heads, page_size, d) if layout == "HND" else (num_pages, page_size, kv_heads, d)
    raw_k = torch.randn(max(lengths), batch, kv_heads, d, generator=g, device="cuda")
    raw_v = torch.randn(max(lengths), batch, kv_heads, d, generator=g, device="cuda")
    k_scale, v_scale = float(raw_k.abs().max()) / 448, float(raw_v.abs().max()) / 448
    k = torch.full(shape, float("nan"), device="cuda").to(torch.float8_e4m3fn)  # unowned slots: NaN
    v = k.clone()
    dev_table = torch.from_numpy(table).cuda()
    plan = attnkit.plan_paged_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=d, num_pages=num_pages,
                                     page_size=page_size, max_pages_per_seq=width, kv_len=max(lengths), layout=layout,
                                     kv_dtype="e4m3", backend="cuda")
    # Every sequence's keys appended on the device, as an engine's prefill would: quantized there.
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    k_rows = torch.cat([raw_k[:n, b] for b, n in enumerate(lengths)]).bfloat16()
    v_rows = torch.cat([raw_v[:n, b] for b, n in enumerate(lengths)]).bfloat16()
    attnkit.paged_append_kv(k, v, k_rows, v_rows, dev_table, torch.zeros(batch, dtype=torch.int32, device="cuda"),
                            torch.from_numpy(cu).cuda(), layout=plan, k_scale=k_scale, v_scale=v_scale)
    for b, n in enumerate(lengths):  # the host rule, byte for byte
        j = n - 1
        page, offset = table[b, j // page_size], j % page_size
        stored = k[page, :, offset] if layout == "HND" else k[page, offset]
        np.testing.assert_array_equal(stored.view(torch.uint8).cpu().numpy(),
                                      quantize(raw_k[j, b].bfloat16().float().cpu().numpy(), k_scale))
    q = torch.randn(batch, heads, d, generator=g, device="cuda").bfloat16()
    out, lse = attnkit.paged_decode(plan, q, k, v, dev_table, lengths, return_lse=True, k_scale=k_scale,
                                    v_scale=v_scale)
    host_plan = attnkit.plan_paged_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=d,
                                          num_pages=num_pages, page_size=page_size, max_pages_per_seq=width,
                                          kv_len=max(lengths), layout=layout, kv_dtype="e4m3")
    golden, golden_lse = attnkit.reference_paged_decode(host_plan, q.cpu(), k.cpu(), v.cpu(), table, lengths,
                                                        k_scale=k_scale, v_scale=v_scale)
    got = out.double().cpu().numpy()
    assert not np.isnan(got).any()
    assert rel_l2(got, golden) <= 1e-2  # bf16 output
    np.testing.assert_allclose(lse.cpu().numpy(), golden_lse, rtol=1e-3, atol=1e-3)

    # Extend: the last 3, 1 and 2 keys of the sequences as query rows.
    cu_q = np.array([0, 3, 4, 6], np.int32)
    ext_kw = dict(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=d, num_pages=num_pages, max_q_len=3,
                  page_size=page_size, max_pages_per_seq=width, kv_len=max(lengths), layout=layout, kv_dtype="e4m3")
    q_rows = torch.randn(6, heads, d, generator=g, device="cuda").bfloat16()
    ext = attnkit.extend(attnkit.plan_extend(backend="cuda", **ext_kw), q_rows, torch.from_numpy(cu_q).cuda(), k, v,
                         dev_table, lengths, k_scale=k_scale, v_scale=v_scale)
    golden, _ = attnkit.reference_extend(attnkit.plan_extend(**ext_kw), q_rows.cpu(), cu_q, k.cpu(), v.cpu(), table,
                                         lengths, k_scale=k_scale, v_scale=v_scale)
    got = ext.double().cpu().numpy()
    assert not np.isnan(got).any()
    assert rel_l2(got, golden) <= 1e-2
