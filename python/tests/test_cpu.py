"""The Python package on the CPU (CI): numpy inputs through DLPack, results against attnkit's
float64 golden and against a numpy float64 softmax, errors with a Fix, zero-copy outputs, plans
as tables and dicts. Fresh random inputs each run (ATTNKIT_TEST_SEED replays one)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import attnkit
from conftest import attention_f64, check_close

NP_DTYPES = {"f32": np.float32, "f16": np.float16}


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(NP_DTYPES[dtype])


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype=NP_DTYPES[dtype])


# ---------------------------------------------------------------- decode

@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("family", [None, "scalar_online"])
@pytest.mark.parametrize("batch,heads,kv_heads,head_dim,max_seq,window,softcap", [
    (3, 6, 2, 40, 97, 0, 0.0),
    (2, 8, 8, 64, 130, 0, 0.0),
    (1, 4, 1, 24, 301, 37, 0.0),
    (2, 6, 3, 16, 64, 0, 5.0),
])
def test_decode_matches_golden(rng, dtype, family, batch, heads, kv_heads, head_dim, max_seq, window, softcap):
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, max_seq=max_seq,
                               kv_dtype=dtype, window=window, softcap=softcap, family=family)
    q = randn(rng, (batch, heads, head_dim), dtype)
    k = randn(rng, (batch, kv_heads, max_seq, head_dim), dtype)
    v = randn(rng, (batch, kv_heads, max_seq, head_dim), dtype)
    lengths = rng.integers(1, max_seq + 1, size=batch).astype(np.int32)
    lengths[0] = max_seq
    out = poisoned((batch, heads, head_dim), dtype)
    lse = np.full((batch, heads), np.nan, np.float32)
    got, got_lse = attnkit.decode(plan, q, k, v, lengths, out=out, lse=lse)
    assert got is out and got_lse is lse

    golden, golden_lse = attnkit.reference_decode(plan, q, k, v, lengths)
    check_close(out, golden, dtype)
    check_close(lse, golden_lse, "f32", "lse")
    mine, mine_lse = attention_f64(q[:, :, None, :], k, v, causal=True, window=window, softcap=softcap,
                                   kv_valid=lengths)
    check_close(out, mine[:, :, 0, :], dtype, "out vs numpy")
    check_close(lse, mine_lse[:, :, 0], "f32", "lse vs numpy")


def test_decode_adversarial_scores(rng):
    """Large magnitudes (scores ~8x the usual spread: a few keys dominate) and near-equal scores:
    the running max and sum must not overflow. Scores of ~900 (q and k both scaled by 30, as this
    test first had) are ill-conditioned in f32, one rounding of a score moving the output by more
    than 1e-5 on ~3% of seeds; docs/numerics.md says what holds there, tested in C++
    (DecodeRandomScoresOfMagnitude1e4StayFiniteAndInsideTheValueRange)."""
    plan = attnkit.plan_decode(batch=2, num_heads=4, kv_heads=2, head_dim=32, max_seq=200, kv_dtype="f32")
    q = randn(rng, (2, 4, 32), "f32", scale=8.0)
    k = randn(rng, (2, 2, 200, 32), "f32")
    k[:, :, 100:] = k[:, :, :1] + randn(rng, (2, 2, 100, 32), "f32", scale=1e-3)
    v = randn(rng, (2, 2, 200, 32), "f32")
    lengths = np.array([200, 157], np.int32)
    out = attnkit.decode(plan, q, k, v, lengths)
    golden, _ = attnkit.reference_decode(plan, q, k, v, lengths)
    check_close(out, golden, "f32")


def test_decode_allocates_with_numpy_and_plan_dtypes(rng):
    plan = attnkit.plan_decode(batch=2, num_heads=4, kv_heads=2, head_dim=32, max_seq=50, kv_dtype="f16",
                               q_dtype="f32", out_dtype="f32")
    q = randn(rng, (2, 4, 32), "f32")
    k = randn(rng, (2, 2, 50, 32), "f16")
    v = randn(rng, (2, 2, 50, 32), "f16")
    out, lse = attnkit.decode(plan, q, k, v, [50, 9], return_lse=True)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 4, 32)
    assert lse.dtype == np.float32 and lse.shape == (2, 4)
    golden, golden_lse = attnkit.reference_decode(plan, q, k, v, [50, 9])
    check_close(out, golden, "f16")
    check_close(lse, golden_lse, "f16", "lse")


# ---------------------------------------------------------------- prefill

@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("family", [None, "scalar_online"])
@pytest.mark.parametrize("batch,heads,kv_heads,head_dim,q_len,kv_len,causal,window,softcap", [
    (2, 6, 2, 40, 37, 37, True, 0, 0.0),
    (1, 4, 4, 64, 19, 83, True, 0, 0.0),     # bottom-right aligned causal mask
    (2, 4, 1, 32, 45, 61, False, 0, 0.0),
    (1, 8, 2, 16, 70, 70, True, 13, 0.0),    # sliding window
    (2, 2, 1, 24, 33, 40, True, 0, 8.0),     # soft-cap
])
def test_prefill_matches_golden(rng, dtype, family, batch, heads, kv_heads, head_dim, q_len, kv_len, causal,
                                window, softcap):
    plan = attnkit.plan_prefill(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, q_len=q_len,
                                kv_len=kv_len, causal=causal, dtype=dtype, window=window, softcap=softcap,
                                family=family)
    q = randn(rng, (batch, heads, q_len, head_dim), dtype)
    k = randn(rng, (batch, kv_heads, kv_len, head_dim), dtype)
    v = randn(rng, (batch, kv_heads, kv_len, head_dim), dtype)
    out = poisoned(q.shape, dtype)
    lse = np.full(q.shape[:-1], np.nan, np.float32)
    attnkit.prefill(plan, q, k, v, out=out, lse=lse)

    golden, golden_lse = attnkit.reference_prefill(plan, q, k, v)
    check_close(out, golden, dtype)
    check_close(lse, golden_lse, "f32", "lse")
    mine, mine_lse = attention_f64(q, k, v, causal=causal, window=window, softcap=softcap)
    check_close(out, mine, dtype, "out vs numpy")
    check_close(lse, mine_lse, "f32", "lse vs numpy")


def test_prefill_strided_bshd_views(rng):
    """[batch, seq, heads, head_dim] buffers viewed as BHSD: the kernels read and write through
    the strides, so the output lands in the BSHD buffer without a copy."""
    b, s, h, kvh, d = 2, 29, 6, 3, 32
    q = randn(rng, (b, s, h, d), "f32")
    k = randn(rng, (b, s, kvh, d), "f32")
    v = randn(rng, (b, s, kvh, d), "f32")
    out_bshd = poisoned((b, s, h, d), "f32")
    plan = attnkit.plan_prefill(batch=b, num_heads=h, kv_heads=kvh, head_dim=d, q_len=s, dtype="f32")
    got = attnkit.prefill(plan, q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                          out=out_bshd.transpose(0, 2, 1, 3))
    assert np.shares_memory(got, out_bshd)
    mine, _ = attention_f64(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), causal=True)
    check_close(out_bshd, mine.transpose(0, 2, 1, 3), "f32")


def test_prefill_ragged_batch(rng):
    q_lens, k_lens = [5, 0, 17, 9], [12, 3, 17, 30]
    h, kvh, d = 4, 2, 32
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    q = randn(rng, (1, h, cu_q[-1], d), "f32")
    k = randn(rng, (1, kvh, cu_k[-1], d), "f32")
    v = randn(rng, (1, kvh, cu_k[-1], d), "f32")
    plan = attnkit.plan_prefill(batch=4, num_heads=h, kv_heads=kvh, head_dim=d, q_len=max(q_lens),
                                kv_len=max(k_lens), dtype="f32")
    out = poisoned(q.shape, "f32")
    attnkit.prefill(plan, q, k, v, out=out, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    golden, _ = attnkit.reference_prefill(plan, q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    check_close(out, golden, "f32")
    for i in range(4):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        if q_lens[i] == 0:
            continue
        mine, _ = attention_f64(q[:, :, qs], k[:, :, ks], v[:, :, ks], causal=True)
        check_close(out[:, :, qs], mine, "f32", f"sequence {i} vs numpy")


def test_prefill_ragged_batch_of_empty_sequences(rng):
    """Every sequence empty: q / k / v of no rows (numpy gives them zero strides, torch a null data
    pointer) are accepted, on the call and the golden, and give rowless outputs."""
    h, kvh, d = 4, 2, 16
    plan = attnkit.plan_prefill(batch=2, num_heads=h, kv_heads=kvh, head_dim=d, q_len=8, kv_len=8, dtype="f32")
    cu = np.zeros(3, np.int32)
    q, kv = np.empty((1, h, 0, d), np.float32), np.empty((1, kvh, 0, d), np.float32)
    assert attnkit.prefill(plan, q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu).shape == (1, h, 0, d)
    golden, _ = attnkit.reference_prefill(plan, q, kv, kv, cu_seqlens_q=cu, cu_seqlens_k=cu)
    assert golden.shape == (1, h, 0, d)
    torch = pytest.importorskip("torch")
    out = attnkit.prefill(plan, torch.empty(1, h, 0, d), torch.empty(1, kvh, 0, d), torch.empty(1, kvh, 0, d),
                          cu_seqlens_q=torch.zeros(3, dtype=torch.int32), cu_seqlens_k=torch.zeros(3, dtype=torch.int32))
    assert tuple(out.shape) == (1, h, 0, d)


# ---------------------------------------------------------------- KV ops

def test_append_kv_writes_only_the_positions(rng):
    b, kvh, s, d = 3, 2, 20, 16
    k_cache = randn(rng, (b, kvh, s, d), "f16")
    v_cache = randn(rng, (b, kvh, s, d), "f16")
    k_before, v_before = k_cache.copy(), v_cache.copy()
    k_new = randn(rng, (b, kvh, d), "f16")
    v_new = randn(rng, (b, kvh, d), "f16")
    positions = np.array([0, 19, 7], np.int32)
    attnkit.append_kv(k_cache, v_cache, k_new, v_new, positions)
    for i, p in enumerate(positions):
        np.testing.assert_array_equal(k_cache[i, :, p], k_new[i])
        np.testing.assert_array_equal(v_cache[i, :, p], v_new[i])
        k_before[i, :, p], v_before[i, :, p] = k_new[i], v_new[i]
    np.testing.assert_array_equal(k_cache, k_before)
    np.testing.assert_array_equal(v_cache, v_before)


def rope_f64(x, positions, theta, interleaved):
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    half = d // 2
    freq = theta ** (-2.0 * np.arange(half) / d)
    angle = np.asarray(positions, np.float64)[:, None] * freq[None, :]  # [b, half]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_apply_rope_in_place(rng, style):
    x = randn(rng, (3, 5, 48), "f32")
    positions = np.array([0, 1, 4095], np.int32)
    expected = rope_f64(x, positions, 10000.0, style == "interleaved")
    got = attnkit.apply_rope(x, positions, style=style)
    assert got is x
    check_close(x, expected, "f32")


def test_apply_rope_tables(rng):
    d, n = 32, 64
    angle = rng.uniform(-3, 3, size=(n, d // 2))
    cos_t, sin_t = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    x = randn(rng, (2, 3, d), "f32")
    positions = np.array([5, 63], np.int32)
    a, b = x[..., : d // 2].astype(np.float64), x[..., d // 2:].astype(np.float64)
    c, s = np.cos(angle[positions])[:, None, :], np.sin(angle[positions])[:, None, :]
    expected = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    attnkit.apply_rope(x, positions, cos_table=cos_t, sin_table=sin_t)
    check_close(x, expected, "f32")


def test_fused_equals_rope_append_decode(rng):
    b, h, kvh, d, s = 2, 6, 2, 32, 40
    plan = attnkit.plan_decode(batch=b, num_heads=h, kv_heads=kvh, head_dim=d, max_seq=s, kv_dtype="f32")
    q = randn(rng, (b, h, d), "f32")
    k_new, v_new = randn(rng, (b, kvh, d), "f32"), randn(rng, (b, kvh, d), "f32")
    k_cache, v_cache = randn(rng, (b, kvh, s, d), "f32"), randn(rng, (b, kvh, s, d), "f32")
    positions = np.array([0, 31], np.int32)

    q2, k2, kc2, vc2 = q.copy(), k_new.copy(), k_cache.copy(), v_cache.copy()
    out = attnkit.fused_rope_append_decode(plan, q, k_new, v_new, k_cache, v_cache, positions)

    attnkit.apply_rope(q2, positions)
    attnkit.apply_rope(k2, positions)
    attnkit.append_kv(kc2, vc2, k2, v_new, positions)
    expected, _ = attnkit.reference_decode(plan, q2, kc2, vc2, positions + 1)
    check_close(out, expected, "f32")
    np.testing.assert_allclose(k_cache, kc2, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(v_cache, vc2)

    sinks = (2.0 + 1.5 * rng.standard_normal(h)).astype(np.float32)  # the same step with attention sinks
    out = attnkit.fused_rope_append_decode(plan, q, k_new, v_new, k_cache, v_cache, positions, sinks=sinks)
    expected, _ = attnkit.reference_decode(plan, q2, kc2, vc2, positions + 1, sinks=sinks)
    check_close(out, expected, "f32")


def test_merge_states_of_two_key_halves(rng):
    """Decode the first and second half of the keys separately (as non-causal prefill rows) and
    merge: the result is the attention over all keys."""
    h, d, n = 5, 32, 60
    q = randn(rng, (1, h, 1, d), "f32")
    k, v = randn(rng, (1, 1, n, d), "f32"), randn(rng, (1, 1, n, d), "f32")
    parts, lses = [], []
    for keys in (slice(0, 23), slice(23, n)):
        plan = attnkit.plan_prefill(batch=1, num_heads=h, kv_heads=1, head_dim=d, q_len=1,
                                    kv_len=keys.stop - keys.start, causal=False, dtype="f32")
        o, l = attnkit.prefill(plan, q, k[:, :, keys], v[:, :, keys], return_lse=True)
        parts.append(o.reshape(h, d))
        lses.append(l.reshape(h))
    out, lse = attnkit.merge_states(np.stack(parts), np.stack(lses), return_lse=True)
    expected, expected_lse = attention_f64(q, k, v, causal=False)
    check_close(out, expected.reshape(h, d), "f32")
    check_close(lse, expected_lse.reshape(h), "f32", "lse")


def test_attention_sinks_through_merge_states(rng):
    """Attention sinks (gpt-oss): a learned logit per head joins the softmax's denominator and has
    no value, so the result is the attention state merged with (zeros, LSE = sink) (docs/python.md)."""
    b, h, kvh, d, s = 2, 8, 2, 32, 50
    plan = attnkit.plan_decode(batch=b, num_heads=h, kv_heads=kvh, head_dim=d, max_seq=s, kv_dtype="f32")
    q = randn(rng, (b, h, d), "f32")
    k_cache, v_cache = randn(rng, (b, kvh, s, d), "f32"), randn(rng, (b, kvh, s, d), "f32")
    lengths = np.array([50, 17], np.int32)
    sinks = (2 * rng.standard_normal(h)).astype(np.float32)
    out, lse = attnkit.decode(plan, q, k_cache, v_cache, lengths, return_lse=True)
    rows = b * h
    merged, merged_lse = attnkit.merge_states(
        np.stack([out.reshape(rows, d), np.zeros((rows, d), np.float32)]),
        np.stack([lse.reshape(rows), np.tile(sinks, b)]), return_lse=True)

    expected, expected_lse = attention_f64(q[:, :, None], k_cache, v_cache, causal=False, kv_valid=lengths, sinks=sinks)
    check_close(merged, expected.reshape(rows, d), "f32")
    check_close(merged_lse, expected_lse.reshape(rows), "f32", "lse")


# ---------------------------------------------------------------- left padding (key_starts)

def left_padded_caches(rng, dtype, batch, kv_heads, max_seq, head_dim, lengths, key_starts):
    """(k, v) with NaN in every slot a sequence must not read (before its start, from its length
    on), and clean copies with zeros there for the numpy float64 softmax."""
    k = randn(rng, (batch, kv_heads, max_seq, head_dim), dtype)
    v = randn(rng, (batch, kv_heads, max_seq, head_dim), dtype)
    clean_k, clean_v = k.copy(), v.copy()
    for b in range(batch):
        for lo, hi in ((0, key_starts[b]), (lengths[b], max_seq)):
            if hi > lo:
                k[b, :, lo:hi], v[b, :, lo:hi] = np.nan, np.nan
                clean_k[b, :, lo:hi], clean_v[b, :, lo:hi] = 0, 0
    return k, v, clean_k, clean_v


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("family", [None, "scalar_online"])
@pytest.mark.parametrize("window,with_sinks", [(0, False), (9, False), (0, True)])
def test_decode_with_key_starts_reads_only_the_real_keys(rng, dtype, family, window, with_sinks):
    """Left padding: sequence b's query sees keys [key_starts[b], lengths[b]) (within the window);
    the padding and the unwritten tail are NaN, so reading one shows. A start at the length leaves
    no key: zeros and LSE -inf (the sink's LSE with sinks)."""
    batch, heads, kv_heads, head_dim, max_seq = 5, 6, 2, 32, 70
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, max_seq=max_seq,
                               kv_dtype=dtype, window=window, family=family)
    lengths = np.array([70, 40, 33, 12, 20], np.int32)
    key_starts = np.array([0, 17, 30, 12, int(rng.integers(0, 20))], np.int32)  # 12: no key left
    q = randn(rng, (batch, heads, head_dim), dtype)
    k, v, clean_k, clean_v = left_padded_caches(rng, dtype, batch, kv_heads, max_seq, head_dim, lengths, key_starts)
    sinks = (2 * rng.standard_normal(heads)).astype(np.float32) if with_sinks else None
    out = poisoned((batch, heads, head_dim), dtype)
    lse = np.full((batch, heads), np.nan, np.float32)
    attnkit.decode(plan, q, k, v, lengths, out=out, lse=lse, sinks=sinks, key_starts=key_starts)

    mine, mine_lse = attention_f64(q[:, :, None], clean_k, clean_v, causal=True, window=window, kv_valid=lengths,
                                   sinks=sinks, key_starts=key_starts)
    check_close(out, mine[:, :, 0], dtype, "out vs numpy")
    check_close(lse, mine_lse[:, :, 0], "f32", "lse vs numpy")
    assert np.array_equal(out[3], np.zeros_like(out[3]))
    golden, golden_lse = attnkit.reference_decode(plan, q, k, v, lengths, sinks=sinks, key_starts=key_starts.tolist())
    check_close(golden, mine[:, :, 0], "f32", "golden vs numpy")
    check_close(golden_lse, mine_lse[:, :, 0], "f32", "golden lse vs numpy")
    # Zero starts are no padding at all.
    zero = attnkit.decode(plan, q, clean_k, clean_v, lengths, sinks=sinks, key_starts=np.zeros(batch, np.int32))
    check_close(zero, attnkit.decode(plan, q, clean_k, clean_v, lengths, sinks=sinks), dtype, "zero starts")


def test_sdpa_decode_takes_key_starts_and_only_for_decode(rng):
    q = randn(rng, (3, 4, 1, 16), "f32")
    lengths, key_starts = np.array([30, 25, 9], np.int32), np.array([4, 0, 8], np.int32)
    k, v, clean_k, clean_v = left_padded_caches(rng, "f32", 3, 2, 30, 16, lengths, key_starts)
    out = np.full((3, 1, 4, 16), np.nan, np.float32).transpose(0, 2, 1, 3)
    got = attnkit.sdpa(q, k, v, lengths=lengths, key_starts=key_starts, out=out, window=6)
    assert got is out
    expected, _ = attention_f64(q, clean_k, clean_v, causal=True, window=6, kv_valid=lengths, key_starts=key_starts)
    check_close(out, expected, "f32")
    with pytest.raises(attnkit.Error, match="Fix: .*attnkit.prefill with cu_seqlens"):
        attnkit.sdpa(randn(rng, (3, 4, 2, 16), "f32"), clean_k, clean_v, causal=True, key_starts=key_starts)


@pytest.mark.parametrize("bad", [[0, 31, 0], [-1, 0, 0], [0, 0], np.zeros(3, np.int64)],
                         ids=["past-kv_len", "negative", "short", "int64"])
def test_decode_rejects_bad_key_starts_with_a_fix(rng, bad):
    plan = attnkit.plan_decode(batch=3, num_heads=4, kv_heads=2, head_dim=16, max_seq=30, kv_dtype="f32")
    q = randn(rng, (3, 4, 16), "f32")
    k = randn(rng, (3, 2, 30, 16), "f32")
    out = poisoned((3, 4, 16), "f32")
    with pytest.raises(attnkit.Error, match="key_starts.*Fix:"):
        attnkit.decode(plan, q, k, k, [30, 30, 30], out=out, key_starts=bad)
    assert np.isnan(out).all()  # a rejected call writes nothing


# ---------------------------------------------------------------- sdpa convenience

@pytest.mark.parametrize("q_len,kv_len,causal", [(1, 57, False), (13, 13, True), (6, 40, True), (9, 21, False)])
def test_sdpa_with_sinks_matches_float64(rng, q_len, kv_len, causal):
    """gpt-oss's attention sinks: a logit per head in every row's softmax, with no value."""
    attnkit.clear_plan_cache()
    q = randn(rng, (2, 8, q_len, 32), "f32")
    k, v = randn(rng, (2, 2, kv_len, 32), "f32"), randn(rng, (2, 2, kv_len, 32), "f32")
    sinks = (3 * rng.standard_normal(8)).astype(np.float32)
    sinks[0] = 60.0  # a sink that takes nearly the whole row
    out = attnkit.sdpa(q, k, v, causal=causal, sinks=sinks)
    expected, _ = attention_f64(q, k, v, causal=causal, sinks=sinks)
    check_close(out, expected, "f32")
    assert not np.allclose(out, attention_f64(q, k, v, causal=causal)[0], atol=1e-3)  # the sinks did something


def test_sdpa_with_sinks_into_out_and_with_lengths(rng):
    q = randn(rng, (3, 4, 1, 16), "f32")
    k, v = randn(rng, (3, 4, 30, 16), "f32"), randn(rng, (3, 4, 30, 16), "f32")
    lengths = np.array([30, 1, 17], np.int32)
    sinks = rng.standard_normal(4).astype(np.float32)
    out = np.full((3, 1, 4, 16), np.nan, np.float32).transpose(0, 2, 1, 3)  # a [b, q, h, d] buffer viewed BHSD
    got = attnkit.sdpa(q, k, v, lengths=lengths, out=out, sinks=sinks)
    assert got is out
    expected, _ = attention_f64(q, k, v, causal=False, kv_valid=lengths, sinks=sinks)
    check_close(out, expected, "f32")


def test_decode_and_prefill_take_sinks_and_their_golden_too(rng):
    """decode(sinks=) / prefill(sinks=) fold the sinks in the kernels (out and LSE), as the float64
    goldens reference_decode / reference_prefill(sinks=) and numpy's softmax with the sink column."""
    b, h, kvh, d, n = 2, 8, 2, 64, 90
    sinks = (2.0 + 1.5 * rng.standard_normal(h)).astype(np.float32)
    q = rng.standard_normal((b, h, d)).astype(np.float32)
    k = rng.standard_normal((b, kvh, n, d)).astype(np.float32)
    v = rng.standard_normal((b, kvh, n, d)).astype(np.float32)
    lengths = np.array([n, 7], np.int32)
    plan = attnkit.plan_decode(batch=b, num_heads=h, kv_heads=kvh, head_dim=d, max_seq=n, kv_dtype="f32")
    out, lse = attnkit.decode(plan, q, k, v, lengths, return_lse=True, sinks=sinks)
    golden, golden_lse = attnkit.reference_decode(plan, q, k, v, lengths, sinks=sinks)
    mine, mine_lse = attention_f64(q[:, :, None], k, v, causal=False, kv_valid=lengths, sinks=sinks)
    np.testing.assert_allclose(golden, mine[:, :, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(golden_lse, mine_lse[:, :, 0], rtol=1e-12, atol=1e-12)
    check_close(out, golden, "f32")
    np.testing.assert_allclose(lse, golden_lse, rtol=1e-5, atol=1e-5)

    qp = rng.standard_normal((b, h, 30, d)).astype(np.float32)
    pplan = attnkit.plan_prefill(batch=b, num_heads=h, kv_heads=kvh, head_dim=d, q_len=30, kv_len=n, causal=True,
                                 dtype="f32")
    out, lse = attnkit.prefill(pplan, qp, k, v, return_lse=True, sinks=sinks)
    golden, golden_lse = attnkit.reference_prefill(pplan, qp, k, v, sinks=sinks)
    mine, _ = attention_f64(qp, k, v, causal=True, sinks=sinks)
    np.testing.assert_allclose(golden, mine, rtol=1e-12, atol=1e-12)
    check_close(out, golden, "f32")
    np.testing.assert_allclose(lse, golden_lse, rtol=1e-5, atol=1e-5)
    with pytest.raises(attnkit.Error, match="sinks"):
        attnkit.decode(plan, q, k, v, lengths, sinks=np.zeros(h + 1, np.float32))


def test_sdpa_rejects_sinks_of_the_wrong_shape(rng):
    q = randn(rng, (1, 4, 1, 16), "f32")
    k = randn(rng, (1, 2, 8, 16), "f32")
    with pytest.raises(attnkit.Error, match="Fix: pass one sink per query head"):
        attnkit.sdpa(q, k, k, sinks=np.zeros(2, np.float32))


def test_sdpa_prefill_and_decode_on_numpy(rng):
    attnkit.clear_plan_cache()
    q = randn(rng, (2, 8, 21, 32), "f32")
    k, v = randn(rng, (2, 2, 21, 32), "f32"), randn(rng, (2, 2, 21, 32), "f32")
    out = attnkit.sdpa(q, k, v, causal=True)
    check_close(out, attention_f64(q, k, v, causal=True)[0], "f32")
    q1 = q[:, :, -1:, :].copy()
    out1 = attnkit.sdpa(q1, k, v, scale=0.3)
    assert out1.shape == (2, 8, 1, 32)
    check_close(out1, attention_f64(q1, k, v, causal=False, scale=0.3)[0], "f32")
    again = attnkit.sdpa(q1, k, v, scale=0.3)
    np.testing.assert_array_equal(again, out1)


# ---------------------------------------------------------------- zero copy, errors, plans

def test_zero_copy_out_and_read_only_inputs(rng):
    plan = attnkit.plan_decode(batch=1, num_heads=2, kv_heads=1, head_dim=16, max_seq=8, kv_dtype="f32")
    q = randn(rng, (1, 2, 16), "f32")
    k, v = randn(rng, (1, 1, 8, 16), "f32"), randn(rng, (1, 1, 8, 16), "f32")
    for a in (q, k, v):
        a.setflags(write=False)
    backing = poisoned((4, 1, 2, 16), "f32")
    out = backing[2]  # a view inside a larger buffer
    got = attnkit.decode(plan, q, k, v, [8], out=out)
    assert got is out
    assert np.isnan(backing[[0, 1, 3]]).all(), "wrote outside the out view"
    assert not np.isnan(backing[2]).any()
    check_close(out, attnkit.reference_decode(plan, q, k, v, [8])[0], "f32")


def test_errors_are_value_errors_with_a_fix(rng):
    assert issubclass(attnkit.Error, ValueError)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_decode(batch=1, num_heads=6, kv_heads=4, head_dim=64, max_seq=16)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_decode(batch=1, num_heads=4, kv_heads=4, head_dim=100, max_seq=16)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=4, head_dim=64, q_len=8, family="split_kv_decode")
    # The Hopper family by name: planned for an H200 without one, refused (with a Fix) on the CPU.
    hopper = attnkit.plan_prefill(batch=1, num_heads=8, kv_heads=8, head_dim=128, q_len=4096, target="h200",
                                  family="warp_specialized_wgmma")
    assert hopper.family == "warp_specialized_wgmma"
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=4, head_dim=64, q_len=8, family="warp_specialized_wgmma")
    # Extend: long chunks take the Hopper kernel on an H200 by themselves; the family can be named.
    chunk = dict(batch=2, num_heads=32, kv_heads=8, head_dim=128, num_pages=1024, max_q_len=512, kv_len=8192,
                 target="h200")
    assert attnkit.plan_extend(**chunk).family == "warp_specialized_wgmma"
    assert attnkit.plan_extend(**chunk, family="split_kv_decode").family == "split_kv_decode"
    with pytest.raises(attnkit.Error, match="Fix:.*max_q_len >= 128"):
        attnkit.plan_extend(**{**chunk, "max_q_len": 16}, family="warp_specialized_wgmma")
    plan = attnkit.plan_decode(batch=1, num_heads=2, kv_heads=1, head_dim=16, max_seq=8, kv_dtype="f32")
    q = randn(rng, (1, 2, 16), "f32")
    k, v = randn(rng, (1, 1, 8, 16), "f32"), randn(rng, (1, 1, 8, 16), "f32")
    out = poisoned((1, 2, 16), "f32")
    with pytest.raises(attnkit.Error, match="Fix:"):  # float64 is no storage dtype
        attnkit.decode(plan, q.astype(np.float64), k, v, [8], out=out)
    with pytest.raises(attnkit.Error, match="Fix:"):  # a length beyond the plan's kv_len
        attnkit.decode(plan, q, k, v, [9], out=out)
    with pytest.raises(attnkit.Error, match="Fix:"):  # wrong cache shape
        attnkit.decode(plan, q, k[:, :, :7], v[:, :, :7], [7], out=out)
    assert np.isnan(out).all(), "a rejected call wrote its output"
    gpu_plan = attnkit.plan_decode(batch=1, num_heads=2, kv_heads=1, head_dim=16, max_seq=8, kv_dtype="f32",
                                   target="h200")
    with pytest.raises(attnkit.Error, match="Fix:"):  # a CUDA plan with host arrays
        attnkit.decode(gpu_plan, q, k, v, [8], out=out)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.prefill(plan, q, k, v)


def test_plan_prints_as_table_and_converts_to_dict():
    plan = attnkit.plan_decode(batch=4, num_heads=32, kv_heads=8, head_dim=128, max_seq=4096, kv_len=3000,
                               kv_dtype="bf16", target="h200")
    text = repr(plan)
    assert "family" in text and "split_kv_decode" in text and "reasons" in text
    assert str(plan) == text == plan.table()
    d = plan.to_dict()
    assert d["kind"] == "decode"
    assert d["problem"]["batch"] == 4 and d["problem"]["kv_len"] == 3000 and d["problem"]["kv_dtype"] == "bf16"
    assert d["target"]["backend"] == "cuda" and d["target"]["sm_count"] > 0
    assert d["partition"]["family"] == plan.family == "split_kv_decode"
    assert d["evidence"]["workspace_bytes"] == plan.workspace_bytes
    assert d["evidence"]["matmul_flops"] == 4 * 4 * 32 * 3000 * 128
    assert json.loads(plan.to_json(indent=2)) == d
    assert plan.backend == "cuda" and plan.kind == "decode" and plan.reasons == d["reasons"]

    cpu = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=64, q_len=100, kv_len=300, dtype="f32",
                               threads=2)
    assert cpu.backend == "cpu" and cpu.target.threads == 2 and cpu.kind == "prefill"
    assert cpu.problem == {**cpu.problem, "q_len": 100, "kv_len": 300, "causal": True, "dtype": "f32"}


def test_cpu_target_reports_intel_cores_as_the_kernel_does():
    try:
        with open("/proc/cpuinfo") as f:
            vendor = next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), None)
    except OSError:
        vendor = None
    if vendor is None:
        pytest.skip("/proc/cpuinfo lists no vendor_id here")
    assert attnkit.cpu_target(1).cpu_intel_cores == (vendor == "GenuineIntel")


def test_cuda_availability_is_reported():
    assert isinstance(attnkit.cuda_built(), bool)
    count = attnkit.cuda_device_count()
    assert count >= 0
    if not attnkit.cuda_built():
        assert count == 0
        with pytest.raises(attnkit.Error, match="Fix:"):
            attnkit.cuda_target()


def test_advise_huge_pages_keeps_contents(rng):
    # 8 MiB of K/V-like data: the advice covers its whole 2 MiB pages, the values stay as written.
    cache = randn(rng, (1, 1, 32768, 128), "f16")
    before = cache.copy()
    advised = attnkit.advise_huge_pages(cache)
    assert isinstance(advised, bool)
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):  # a Linux kernel with THP
        assert advised
    np.testing.assert_array_equal(cache, before)


# ---------------------------------------------------------------- version

def test_version_is_the_headers_and_the_installed_metadata():
    import importlib.metadata
    import pathlib
    import re
    assert re.fullmatch(r"\d+\.\d+\.\d+", attnkit.__version__)
    assert importlib.metadata.version("attnkit") == attnkit.__version__
    header = pathlib.Path(__file__).resolve().parents[2] / "include" / "attnkit" / "version.hpp"
    if header.exists():  # a source checkout
        assert f'#define ATTNKIT_VERSION_STRING "{attnkit.__version__}"' in header.read_text()
