"""e4m3 (fp8) prefill through the Python package: planning (Hopper targets only), the dtype
names, the per-tensor scales (q_scale / k_scale / v_scale) and every rejection, on the CPU with
numpy uint8 arrays of e4m3 bytes; with torch.float8_e4m3fn tensors where torch has them (skipped
otherwise); and, marked gpu, the kernel against the golden on a Hopper GPU."""
from __future__ import annotations

import numpy as np
import pytest

import attnkit

D = 128


def e4m3_table() -> np.ndarray:
    """The 256 e4m3fn values by the format's definition (bias 7, 3 mantissa bits, S.1111.111 NaN)."""
    values = np.empty(256, np.float64)
    for code in range(256):
        sign, exponent, mantissa = code >> 7, (code >> 3) & 15, code & 7
        if exponent == 15 and mantissa == 7:
            values[code] = np.nan
            continue
        magnitude = mantissa / 8 * 2.0**-6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7)
        values[code] = -magnitude if sign else magnitude
    return values


TABLE = e4m3_table()


def random_e4m3(rng, shape) -> np.ndarray:
    """Random e4m3 bytes, every code but the two NaNs (0x7F, 0xFF) equally likely."""
    codes = rng.integers(0, 254, shape)
    return np.where(codes >= 0x7F, codes + 1, codes).astype(np.uint8)


def fp8_plan(**kw):
    args = dict(batch=2, num_heads=4, kv_heads=2, head_dim=D, q_len=9, kv_len=17, dtype="e4m3", target="h200")
    args.update(kw)
    return attnkit.plan_prefill(**args)


def test_plan_on_hopper_names_the_fp8_kernel_and_its_workspace():
    plan = fp8_plan()
    assert plan.family == "warp_specialized_wgmma"
    assert plan.problem["dtype"] == "e4m3"
    assert plan.out_dtype == "bf16"  # e4m3 is input-only: bf16 unless asked
    assert plan.workspace_bytes == 2 * 2 * D * 128  # V^T: batch x kv_heads x head_dim x keys padded to 128
    assert "V^T" in str(plan)
    assert fp8_plan(out_dtype="f32").out_dtype == "f32"
    assert fp8_plan(dtype="float8_e4m3fn", head_dim=256).family == "warp_specialized_wgmma"


@pytest.mark.parametrize("kw,match", [
    (dict(target=None), "e4m3 prefill runs on the CUDA backend on Hopper"),
    (dict(head_dim=64), r"head_dim 128, 256"),
    (dict(softcap=30.0), "e4m3 prefill has no soft-cap"),
    (dict(out_dtype="e4m3"), "out_dtype is e4m3"),
    (dict(family="cooperative_tiled"), "has no fp8 kernel"),
])
def test_plans_that_cannot_run_fp8_are_rejected(kw, match):
    with pytest.raises(attnkit.Error, match=match) as info:
        fp8_plan(**kw)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("plan_call", [attnkit.plan_decode, attnkit.plan_paged_decode, attnkit.plan_extend])
@pytest.mark.parametrize("which", ["q_dtype", "out_dtype"])
def test_cache_plans_take_e4m3_for_the_cache_only(plan_call, which):
    # e4m3 caches and page pools (test_fp8_kv_cache.py, test_fp8_paged.py) are read with their
    # scales; q and the output are never e4m3.
    shape = dict(max_seq=32) if plan_call is attnkit.plan_decode else dict(num_pages=2, page_size=16,
                                                                          max_pages_per_seq=2)
    if plan_call is attnkit.plan_extend:
        shape["max_q_len"] = 2
    with pytest.raises(attnkit.Error, match=f"{which} is e4m3, which only a KV cache may be.*Fix:"):
        plan_call(batch=1, num_heads=4, kv_heads=2, head_dim=D, kv_dtype="e4m3", **{which: "e4m3"}, **shape)


def test_golden_reads_e4m3_bytes_times_their_scales(rng):
    plan = fp8_plan(causal=True)
    q, k, v = random_e4m3(rng, (2, 4, 9, D)), random_e4m3(rng, (2, 2, 17, D)), random_e4m3(rng, (2, 2, 17, D))
    scales = dict(q_scale=2.0**-7, k_scale=2.0**-6, v_scale=2.0**-8)  # powers of two: exact in f32
    out, lse = attnkit.reference_prefill(plan, q, k, v, **scales)
    f32 = attnkit.plan_prefill(batch=2, num_heads=4, kv_heads=2, head_dim=D, q_len=9, kv_len=17, dtype="f32")
    deq = [(TABLE[x] * s).astype(np.float32) for x, s in ((q, scales["q_scale"]), (k, scales["k_scale"]),
                                                          (v, scales["v_scale"]))]
    out32, lse32 = attnkit.reference_prefill(f32, *deq)
    np.testing.assert_array_equal(out, out32)
    np.testing.assert_array_equal(lse, lse32)
    # The scales are applied: unit scales give another answer.
    out1, _ = attnkit.reference_prefill(plan, q, k, v)
    assert not np.allclose(out1, out)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_scales_are_rejected(rng, scale):
    plan = fp8_plan()
    q, k, v = random_e4m3(rng, (2, 4, 9, D)), random_e4m3(rng, (2, 2, 17, D)), random_e4m3(rng, (2, 2, 17, D))
    with pytest.raises(attnkit.Error, match="scales.v=.*is not a finite number > 0.*Fix:"):
        attnkit.reference_prefill(plan, q, k, v, v_scale=scale)


def test_scales_other_than_one_need_e4m3_inputs(rng):
    plan = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=D, q_len=5, dtype="f32")
    q = rng.standard_normal((1, 4, 5, D)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, D)).astype(np.float32)
    out = np.full((1, 4, 5, D), np.nan, np.float32)
    with pytest.raises(attnkit.Error, match="scales apply to e4m3 inputs; leave them at 1 for f16/bf16/f32"):
        attnkit.prefill(plan, q, k, k, out=out, q_scale=0.5)
    assert np.isnan(out).all()  # nothing written
    attnkit.prefill(plan, q, k, k, out=out, q_scale=1.0)
    assert not np.isnan(out).any()


def test_uint8_bytes_are_e4m3_only_for_an_e4m3_plan(rng):
    plan = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=D, q_len=5, dtype="f32")
    q8 = random_e4m3(rng, (1, 4, 5, D))
    k = rng.standard_normal((1, 2, 5, D)).astype(np.float32)
    with pytest.raises(attnkit.Error, match="dtype uint8 is not supported.*e4m3"):
        attnkit.prefill(plan, q8, k, k)
    with pytest.raises(attnkit.Error, match="dtype uint8 is not supported"):
        attnkit.reference_prefill(plan, q8, k, k)


def test_cpu_arrays_with_a_cuda_fp8_plan_are_rejected(rng):
    plan = fp8_plan()
    q, k, v = random_e4m3(rng, (2, 4, 9, D)), random_e4m3(rng, (2, 2, 17, D)), random_e4m3(rng, (2, 2, 17, D))
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.prefill(plan, q, k, v, out=np.zeros((2, 4, 9, D), np.float32))


# ---------------------------------------------------------------- torch.float8_e4m3fn

def torch_float8():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    return torch


@pytest.mark.torch
def test_torch_float8_dtype_names_and_zero_copy_export():
    torch = torch_float8()
    plan = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=D, q_len=5, dtype=torch.float8_e4m3fn,
                                target="h200")
    assert plan.problem["dtype"] == "e4m3"
    x = torch.zeros(3, 4, dtype=torch.float8_e4m3fn)
    exported = torch.utils.dlpack.from_dlpack(attnkit._arrays.exported(x))
    assert exported.dtype == torch.uint8 and exported.data_ptr() == x.data_ptr()


@pytest.mark.torch
def test_torch_float8_golden_matches_dequantized(seed):
    torch = torch_float8()
    g = torch.Generator().manual_seed(seed)
    raw = [torch.randn(shape, generator=g) for shape in ((1, 4, 7, D), (1, 2, 11, D), (1, 2, 11, D))]
    scales = [float(t.abs().max()) / 448 for t in raw]
    q8, k8, v8 = [(t / s).to(torch.float8_e4m3fn) for t, s in zip(raw, scales)]
    plan = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=D, q_len=7, kv_len=11, causal=True,
                                dtype=torch.float8_e4m3fn, target="h200")
    out, lse = attnkit.reference_prefill(plan, q8, k8, v8, q_scale=scales[0], k_scale=scales[1], v_scale=scales[2])
    f32 = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=D, q_len=7, kv_len=11, causal=True,
                               dtype="f32")
    deq = [(t.double() * s).float() for t, s in zip((q8, k8, v8), scales)]
    out32, lse32 = attnkit.reference_prefill(f32, *deq)
    np.testing.assert_allclose(out, out32, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, lse32, rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_torch_float8_is_rejected_by_decode():
    torch = torch_float8()
    plan = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=2, head_dim=D, max_seq=8, kv_dtype="f32")
    q = torch.zeros(1, 4, D, dtype=torch.float8_e4m3fn)
    k = torch.zeros(1, 2, 8, D)
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.decode(plan, q, k, k, [8])


# ---------------------------------------------------------------- the kernel (Hopper)

@pytest.mark.gpu
def test_fp8_prefill_on_hopper_matches_the_golden(seed):
    torch = torch_float8()
    if not (torch.cuda.is_available() and attnkit.cuda_built()):
        pytest.skip("no CUDA device visible to torch, or attnkit built without CUDA")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("not a Hopper (sm_90) GPU")
    g = torch.Generator(device="cuda").manual_seed(seed)
    raw = [torch.randn(shape, generator=g, device="cuda") for shape in ((2, 8, 300, D), (2, 2, 333, D), (2, 2, 333, D))]
    scales = [float(t.abs().max()) / 448 for t in raw]
    q8, k8, v8 = [(t / s).to(torch.float8_e4m3fn) for t, s in zip(raw, scales)]
    plan = attnkit.plan_prefill(batch=2, num_heads=8, kv_heads=2, head_dim=D, q_len=300, kv_len=333, causal=True,
                                dtype=torch.float8_e4m3fn, backend="cuda")
    out, lse = attnkit.prefill(plan, q8, k8, v8, q_scale=scales[0], k_scale=scales[1], v_scale=scales[2],
                               return_lse=True)
    assert out.dtype == torch.bfloat16
    golden, golden_lse = attnkit.reference_prefill(plan, q8.cpu(), k8.cpu(), v8.cpu(), q_scale=scales[0],
                                                   k_scale=scales[1], v_scale=scales[2])
    got = out.double().cpu().numpy()
    assert not np.isnan(got).any()
    rel_l2 = np.linalg.norm(got - golden) / np.linalg.norm(golden)
    assert rel_l2 <= 5e-2, rel_l2
    # The e4m3 LSE rule (docs/architecture.md): fp8 wgmma accumulates the scores with fewer bits than f32.
    np.testing.assert_allclose(lse.cpu().numpy(), golden_lse, rtol=5e-3, atol=5e-3)
