"""e4m3 (fp8) KV caches through the Python package: decode against the golden on the CPU with numpy
uint8 caches of e4m3 bytes and with torch.float8_e4m3fn caches, the scales (k_scale / v_scale) and
their rejections, append's quantization; marked gpu, the CUDA kernel and append on the device."""
from __future__ import annotations

import numpy as np
import pytest

import attnkit
from test_fp8 import TABLE, torch_float8


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """Reference e4m3 quantization of x / scale: the nearest code (ties: even mantissa), saturating
    at +-448, the sign kept (a value rounding to zero gives -0 when negative), by search over the
    format's table (independent of the library's rule)."""
    y = (x.astype(np.float32) / np.float32(scale)).astype(np.float64)
    magnitude = np.minimum(np.abs(y), 448.0)
    positive = TABLE[:0x7F]  # codes 0..126: the finite non-negative values, increasing
    distance = np.abs(magnitude[..., None] - positive[None, :])
    best = distance.min(axis=-1, keepdims=True)
    ties = distance == best
    even = (np.arange(0x7F) & 1) == 0
    codes = np.argmax(ties & even, axis=-1)  # the even code among ties (every tie has one)
    codes = np.where((ties & even).any(axis=-1), codes, np.argmax(ties, axis=-1))
    return (codes | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def caches(rng, batch, kv_heads, max_seq, d, k_scale, v_scale):
    k = quantize(rng.standard_normal((batch, kv_heads, max_seq, d)), k_scale)
    v = quantize(rng.standard_normal((batch, kv_heads, max_seq, d)), v_scale)
    return k, v


@pytest.mark.parametrize("head_dim,heads,kv_heads,lengths,window,q_dtype", [
    (128, 8, 2, [1, 37, 0], 0, "f16"),
    (64, 4, 4, [300, 17], 16, "f32"),
    (256, 8, 1, [129], 0, "f16"),
])
def test_cpu_decode_matches_the_golden(rng, head_dim, heads, kv_heads, lengths, window, q_dtype):
    batch, max_seq = len(lengths), max(lengths) + 3
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               max_seq=max_seq, kv_dtype="e4m3", q_dtype=q_dtype, out_dtype="f32", window=window)
    k, v = caches(rng, batch, kv_heads, max_seq, head_dim, 0.02, 3.5)
    q = rng.standard_normal((batch, heads, head_dim)).astype(np.float16 if q_dtype == "f16" else np.float32)
    out, lse = attnkit.decode(plan, q, k, v, lengths, return_lse=True, k_scale=0.02, v_scale=3.5)
    golden, golden_lse = attnkit.reference_decode(plan, q, k, v, lengths, k_scale=0.02, v_scale=3.5)
    rel = np.linalg.norm(out - golden) / max(np.linalg.norm(golden), 1e-30)
    assert rel <= plan.to_dict()["evidence"]["rel_l2_tolerance"], rel
    finite = np.isfinite(golden_lse)
    np.testing.assert_allclose(lse[finite], golden_lse[finite], rtol=1e-3, atol=1e-3)
    assert np.all(np.isneginf(lse[~finite]))
    # The scales are applied: a decode without them gives another answer.
    plain = attnkit.decode(plan, q, k, v, lengths)
    assert not np.allclose(plain, out)


def test_scales_are_checked_before_anything_is_written(rng):
    plan = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=2, head_dim=64, max_seq=8, kv_dtype="e4m3",
                               q_dtype="f32", out_dtype="f32")
    k, v = caches(rng, 1, 2, 8, 64, 1.0, 1.0)
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    out = np.full((1, 4, 64), np.nan, np.float32)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(attnkit.Error, match="kv_scales.k=.*is not a finite number > 0.*Fix:"):
            attnkit.decode(plan, q, k, v, [8], out=out, k_scale=bad)
    assert np.isnan(out).all()
    f32 = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=2, head_dim=64, max_seq=8, kv_dtype="f32")
    kf = rng.standard_normal((1, 2, 8, 64)).astype(np.float32)
    with pytest.raises(attnkit.Error, match="kv_scales apply to e4m3 caches"):
        attnkit.decode(f32, q, kf, kf, [8], out=out, v_scale=2.0)
    assert np.isnan(out).all()


def test_fused_step_rejects_e4m3(rng):
    """The fused rope+append+decode step takes no e4m3 cache (paged pools do: test_fp8_paged.py)."""
    plan = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=2, head_dim=64, max_seq=8, kv_dtype="e4m3",
                               q_dtype="f32", out_dtype="f32")
    k, v = caches(rng, 1, 2, 8, 64, 1.0, 1.0)
    before = k.copy()
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    new = rng.standard_normal((1, 2, 64)).astype(np.float32)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.fused_rope_append_decode(plan, q, new, new, k, v, [3])
    np.testing.assert_array_equal(k, before)


def test_append_quantizes_with_saturation(rng):
    batch, kv_heads, max_seq, d = 3, 2, 9, 32
    k, v = np.zeros((batch, kv_heads, max_seq, d), np.uint8), np.zeros((batch, kv_heads, max_seq, d), np.uint8)
    k_new = (rng.standard_normal((batch, kv_heads, d)) * 20).astype(np.float32)  # / 0.03: many beyond 448
    v_new = (rng.standard_normal((batch, kv_heads, d)) * 0.05).astype(np.float32)  # / 5: subnormals
    positions = [0, 8, 4]
    attnkit.append_kv(k, v, k_new, v_new, positions, k_scale=0.03, v_scale=5.0)
    for b, p in enumerate(positions):
        np.testing.assert_array_equal(k[b, :, p], quantize(k_new[b], 0.03))
        np.testing.assert_array_equal(v[b, :, p], quantize(v_new[b], 5.0))
    written = np.zeros((batch, max_seq), bool)
    written[np.arange(batch), positions] = True
    assert not k.transpose(0, 2, 1, 3)[~written].any()  # nothing else was written
    with pytest.raises(attnkit.Error, match="kv_scales.v=.*Fix:"):
        attnkit.append_kv(k, v, k_new, v_new, positions, v_scale=0.0)


@pytest.mark.torch
def test_torch_float8_caches_decode_on_the_cpu(rng):
    torch = torch_float8()
    plan = attnkit.plan_decode(batch=2, num_heads=8, kv_heads=2, head_dim=128, max_seq=40,
                               kv_dtype=torch.float8_e4m3fn)
    assert plan.to_dict()["problem"]["q_dtype"] == "bf16"
    k8, v8 = caches(rng, 2, 2, 40, 128, 0.5, 0.25)
    k, v = torch.from_numpy(k8).view(torch.float8_e4m3fn), torch.from_numpy(v8).view(torch.float8_e4m3fn)
    q = torch.randn(2, 8, 128).bfloat16()
    out = attnkit.decode(plan, q, k, v, [40, 11], k_scale=0.5, v_scale=0.25)
    assert out.dtype == torch.bfloat16
    golden, _ = attnkit.reference_decode(plan, q, k, v, [40, 11], k_scale=0.5, v_scale=0.25)
    got = out.double().numpy()
    assert np.linalg.norm(got - golden) / np.linalg.norm(golden) <= 1e-2  # bf16 output


def fp8_step(plan, k_cache, v_cache, k_new, v_new, positions, q, k_scale, v_scale):
    """Append one token per sequence into e4m3 caches, then decode over them, with their scales."""
    attnkit.append_kv(k_cache, v_cache, k_new, v_new, positions, k_scale=k_scale, v_scale=v_scale)
    return attnkit.decode(plan, q, k_cache, v_cache, positions + 1, return_lse=True, k_scale=k_scale,
                          v_scale=v_scale)


@pytest.mark.torch
def test_a_scaled_e4m3_step_compiles_without_graph_breaks(rng):
    """append_kv + decode on torch.float8_e4m3fn caches with scales != 1 under torch.compile with
    fullgraph=True (the custom operators take the scales): the eager result, bit for bit, and the
    caches written alike."""
    torch = torch_float8()
    plan = attnkit.plan_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, max_seq=24, kv_dtype="e4m3")
    k8, v8 = caches(rng, 2, 2, 24, 64, 0.05, 0.5)
    pools = [torch.from_numpy(c.copy()).view(torch.float8_e4m3fn) for c in (k8, v8)]
    eager_pools = [c.clone() for c in pools]
    g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    rest = (torch.randn(2, 2, 64, generator=g).bfloat16(), torch.randn(2, 2, 64, generator=g).bfloat16(),
            torch.tensor([20, 5], dtype=torch.int32), torch.randn(2, 8, 64, generator=g).bfloat16(), 0.05, 0.5)
    compiled = torch.compile(fp8_step, backend="aot_eager", fullgraph=True)
    got = compiled(plan, *pools, *rest)
    expected = fp8_step(plan, *eager_pools, *rest)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(pools, eager_pools):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    # The scales reached the operators: decoding with unit scales gives another answer.
    unscaled = attnkit.decode(plan, rest[3], *eager_pools, rest[2] + 1)
    assert not torch.equal(unscaled, expected[0])


@pytest.mark.gpu
def test_cuda_decode_and_append_with_torch_float8_caches(seed):
    torch = torch_float8()
    if not (torch.cuda.is_available() and attnkit.cuda_built()):
        pytest.skip("no CUDA device visible to torch, or attnkit built without CUDA")
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads, kv_heads, d, max_seq = 3, 32, 8, 128, 3000
    raw_k = torch.randn(batch, kv_heads, max_seq, d, generator=g, device="cuda")
    raw_v = torch.randn(batch, kv_heads, max_seq, d, generator=g, device="cuda")
    k_scale, v_scale = float(raw_k.abs().max()) / 448, float(raw_v.abs().max()) / 448
    k = torch.zeros(batch, kv_heads, max_seq, d, dtype=torch.float8_e4m3fn, device="cuda")
    v = torch.zeros_like(k)
    for pos in (0, 1, 2):  # append quantizes rows as the host rule does
        attnkit.append_kv(k, v, raw_k[:, :, pos].bfloat16(), raw_v[:, :, pos].bfloat16(), [pos] * batch,
                          k_scale=k_scale, v_scale=v_scale)
    k[:, :, 3:] = (raw_k[:, :, 3:] / k_scale).to(torch.float8_e4m3fn)
    v[:, :, 3:] = (raw_v[:, :, 3:] / v_scale).to(torch.float8_e4m3fn)
    expected = quantize(raw_k[:, :, :3].bfloat16().float().cpu().numpy(), k_scale)
    np.testing.assert_array_equal(k[:, :, :3].view(torch.uint8).cpu().numpy(), expected)
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=d, max_seq=max_seq,
                               kv_dtype="e4m3", backend="cuda")
    q = torch.randn(batch, heads, d, generator=g, device="cuda").bfloat16()
    lengths = [3000, 1, 777]
    out = attnkit.decode(plan, q, k, v, lengths, k_scale=k_scale, v_scale=v_scale)
    golden, _ = attnkit.reference_decode(plan, q.cpu(), k.cpu(), v.cpu(), lengths, k_scale=k_scale, v_scale=v_scale)
    got = out.double().cpu().numpy()
    assert not np.isnan(got).any()
    assert np.linalg.norm(got - golden) / np.linalg.norm(golden) <= 1e-2  # bf16 output
