"""attnkit under torch.compile (torch tensors on the CPU): the custom operators of
attnkit.torch_ops pass torch.library.opcheck (schema, fake tensors, dynamic shapes), and a whole
engine-style decode step (RoPE, KV append, decode, merge) compiles with fullgraph=True and gives
the eager result. Skipped where torch is not installed (CI installs none; the device image and
bench/cpu_sweep.sh's set-up have it). The CUDA side is in test_gpu.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import attnkit  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def ops():
    import attnkit.torch_ops  # noqa: F401

    return torch.ops.attnkit


def test_operators_pass_opcheck(seed, ops):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(2, 8, 5, 64, generator=g), torch.randn(2, 2, 9, 64, generator=g), torch.randn(2, 2, 9, 64, generator=g)
    dq = torch.randn(2, 8, 1, 64, generator=g)
    lengths = torch.tensor([9, 4], dtype=torch.int32)
    checks = [
        (ops.sdpa.default, (q, k, v, None, True, 0.0, 0, 0.0, False)),
        (ops.sdpa.default, (q, k, v, None, False, 0.125, 3, 30.0, True)),
        (ops.sdpa.default, (dq, k, v, lengths, False, 0.0, 0, 0.0, True)),
        (ops.sdpa.default, (q, k, v, None, True, 0.0, 0, 0.0, True, torch.randn(8, generator=g))),
        (ops.sdpa_out.default, (dq, k, v, lengths, torch.empty(2, 8, 1, 64), False, 0.0, 0, 0.0,
                                torch.randn(8, generator=g))),
        (ops.sdpa_out.default, (q, k, v, None, torch.empty(2, 5, 8, 64).transpose(1, 2), True, 0.0, 0, 0.0)),
        (ops.sdpa.default, (dq, k, v, lengths, False, 0.0, 0, 0.0, True, None, torch.tensor([2, 1], dtype=torch.int32))),
        (ops.sdpa_out.default, (dq, k, v, None, torch.empty(2, 8, 1, 64), True, 0.0, 4, 0.0, torch.randn(8, generator=g),
                                torch.tensor([0, 5], dtype=torch.int32))),
        (ops.apply_rope_.default, (torch.randn(3, 4, 64, generator=g), torch.tensor([0, 7, 4095], dtype=torch.int32),
                                   "interleaved", 500000.0, None, None)),
        (ops.append_kv_.default, (torch.zeros(2, 2, 9, 64), torch.zeros(2, 2, 9, 64), torch.randn(2, 2, 64, generator=g),
                                  torch.randn(2, 2, 64, generator=g), torch.tensor([8, 0], dtype=torch.int32))),
        (ops.merge_states.default, (torch.randn(3, 10, 64, generator=g).bfloat16(), torch.randn(3, 10, generator=g))),
    ]
    for op, args in checks:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


def test_sdpa_layouts_match_eager(seed, ops):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(1, 4, 7, 32, generator=g), torch.randn(1, 2, 7, 32, generator=g), torch.randn(1, 2, 7, 32, generator=g)
    expected = attnkit.sdpa(q, k, v, causal=True)
    seq_major = ops.sdpa(q, k, v, None, True, 0.0, 0, 0.0, True)
    assert seq_major.shape == q.shape and seq_major.transpose(1, 2).is_contiguous()
    assert torch.equal(seq_major, expected) and torch.equal(ops.sdpa(q, k, v, None, True, 0.0, 0, 0.0, False), expected)


def test_sdpa_with_sinks_compiles_to_the_eager_result(seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(2, 8, 6, 32, generator=g), torch.randn(2, 2, 6, 32, generator=g), torch.randn(2, 2, 6, 32, generator=g)
    sinks = torch.randn(8, generator=g)
    expected = attnkit.sdpa(q, k, v, causal=True, sinks=sinks)
    compiled = torch.compile(lambda q, k, v, s: attnkit.sdpa(q, k, v, causal=True, sinks=s), fullgraph=True)
    assert torch.equal(compiled(q, k, v, sinks), expected)
    assert not torch.allclose(expected, attnkit.sdpa(q, k, v, causal=True), atol=1e-3)


def test_decode_with_key_starts_compiles_to_the_eager_result(seed):
    """Left padding (key_starts) through attnkit.sdpa and attnkit.decode inside torch.compile
    (fullgraph): the custom operators take it, and the result is the eager one, which differs
    from the unpadded result."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, 8, 1, 32, generator=g), torch.randn(3, 2, 20, 32, generator=g), torch.randn(3, 2, 20, 32, generator=g)
    lengths, key_starts = torch.tensor([20, 14, 9], dtype=torch.int32), torch.tensor([5, 0, 9], dtype=torch.int32)
    expected = attnkit.sdpa(q, k, v, lengths=lengths, key_starts=key_starts)
    compiled = torch.compile(lambda q, k, v, n, s: attnkit.sdpa(q, k, v, lengths=n, key_starts=s), fullgraph=True)
    assert torch.equal(compiled(q, k, v, lengths, key_starts), expected)
    assert not torch.allclose(expected, attnkit.sdpa(q, k, v, lengths=lengths), atol=1e-3)
    assert torch.equal(expected[2], torch.zeros_like(expected[2]))  # a start at the length: no key

    plan = attnkit.plan_decode(batch=3, num_heads=8, kv_heads=2, head_dim=32, max_seq=20, kv_dtype="f32")
    rows = q[:, :, 0]
    decode = torch.compile(lambda q, k, v, n, s: attnkit.decode(plan, q, k, v, n, key_starts=s, return_lse=True),
                           fullgraph=True)
    out, lse = decode(rows, k, v, lengths, key_starts)
    eager_out, eager_lse = attnkit.decode(plan, rows, k, v, lengths, key_starts=key_starts, return_lse=True)
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)
    assert torch.equal(out, expected[:, :, 0])


def decode_step(q, k_new, v_new, k_cache, v_cache, positions, prefix_out, prefix_lse):
    """One engine-style step of a 2-sequence batch: RoPE on q and the new k, both appended at
    positions, attention over positions + 1 keys, then merged with a shared prefix's state."""
    attnkit.apply_rope(q, positions)
    attnkit.apply_rope(k_new, positions)
    attnkit.append_kv(k_cache, v_cache, k_new, v_new, positions)
    own = attnkit.sdpa(q[:, :, None], k_cache, v_cache, lengths=positions + 1)[:, :, 0]
    own_lse = torch.logsumexp(torch.einsum("bhd,bhsd->bhs", q, k_cache.repeat_interleave(2, dim=1)) * q.shape[-1] ** -0.5
                              + torch.where(torch.arange(k_cache.shape[2]) <= positions[:, None], 0.0, float("-inf"))[:, None],
                              dim=-1)
    states = torch.stack([prefix_out.reshape(-1, q.shape[-1]), own.reshape(-1, q.shape[-1])])
    lses = torch.stack([prefix_lse.reshape(-1), own_lse.reshape(-1)])
    return attnkit.merge_states(states, lses)


def test_a_decode_step_compiles_without_graph_breaks(seed):
    g = torch.Generator().manual_seed(seed)
    args = (torch.randn(2, 8, 64, generator=g), torch.randn(2, 4, 64, generator=g), torch.randn(2, 4, 64, generator=g),
            torch.randn(2, 4, 40, 64, generator=g), torch.randn(2, 4, 40, 64, generator=g),
            torch.tensor([17, 39], dtype=torch.int32), torch.randn(2, 8, 64, generator=g), torch.randn(2, 8, generator=g))
    eager_args = [a.clone() for a in args]
    compiled = torch.compile(decode_step, backend="aot_eager", fullgraph=True)
    got = compiled(*args)
    expected = decode_step(*eager_args)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for a, b in zip(args, eager_args):  # the in-place RoPE and appends happened in both
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def paged_setup(seed):
    g = torch.Generator().manual_seed(seed)
    decode_plan = attnkit.plan_paged_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, num_pages=12, page_size=16,
                                            max_pages_per_seq=4, kv_dtype="f32")
    extend_plan = attnkit.plan_extend(batch=2, num_heads=8, kv_heads=2, head_dim=64, num_pages=12, page_size=16,
                                      max_pages_per_seq=4, max_q_len=3, kv_dtype="f32")
    k_pages, v_pages = torch.randn(12, 2, 16, 64, generator=g), torch.randn(12, 2, 16, 64, generator=g)
    table = torch.tensor([[3, 7, 1, -1], [0, 11, -1, -1]], dtype=torch.int32)
    return g, decode_plan, extend_plan, k_pages, v_pages, table


def test_plan_operators_pass_opcheck(seed, ops):
    g, decode_plan, extend_plan, k_pages, v_pages, table = paged_setup(seed)
    plan = attnkit.plan_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, max_seq=40, kv_dtype="bf16")
    prefill_plan = attnkit.plan_prefill(batch=1, num_heads=4, kv_heads=2, head_dim=32, q_len=7, kv_len=9, dtype="f32")
    q = torch.randn(2, 8, 64, generator=g).bfloat16()
    k_cache, v_cache = torch.randn(2, 2, 40, 64, generator=g).bfloat16(), torch.randn(2, 2, 40, 64, generator=g).bfloat16()
    lengths = torch.tensor([40, 3], dtype=torch.int32)
    kn, vn = torch.randn(2, 2, 64, generator=g).bfloat16(), torch.randn(2, 2, 64, generator=g).bfloat16()
    qp = torch.randn(2, 8, 64, generator=g)
    checks = [
        (ops.decode.default, (plan.number, q, k_cache, v_cache, lengths, True)),
        (ops.decode.default, (plan.number, q, k_cache, v_cache, lengths, False)),
        (ops.decode.default, (plan.number, q, k_cache, v_cache, lengths, True, 1.0, 1.0,
                              torch.tensor([7, 3], dtype=torch.int32))),
        (ops.prefill.default, (prefill_plan.number, torch.randn(1, 4, 7, 32, generator=g), torch.randn(1, 2, 9, 32, generator=g),
                               torch.randn(1, 2, 9, 32, generator=g), None, None, True, 1.0, 1.0, 1.0)),
        (ops.fused_rope_append_decode.default, (plan.number, q, kn, vn, k_cache, v_cache,
                                                torch.tensor([39, 2], dtype=torch.int32), "half", 10000.0, None, None, False)),
        (ops.paged_decode.default, (decode_plan.number, qp, k_pages, v_pages, table, torch.tensor([40, 20], dtype=torch.int32),
                                    True)),
        (ops.extend.default, (extend_plan.number, torch.randn(4, 8, 64, generator=g), torch.tensor([0, 3, 4], dtype=torch.int32),
                              k_pages, v_pages, table, torch.tensor([40, 20], dtype=torch.int32), False)),
        (ops.paged_append_kv_.default, (k_pages, v_pages, torch.randn(2, 2, 64, generator=g), torch.randn(2, 2, 64, generator=g),
                                        table, torch.tensor([40, 20], dtype=torch.int32), None, "HND", -1)),
        (ops.paged_append_kv_.default, (k_pages, v_pages, torch.randn(2, 2, 64, generator=g), torch.randn(2, 2, 64, generator=g),
                                        table, torch.tensor([41, 21], dtype=torch.int32), None, "", decode_plan.number)),
    ]
    for op, args in checks:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


def test_operators_on_e4m3_caches_pass_opcheck(seed, ops):
    """decode, append_kv_, paged_decode, extend and paged_append_kv_ with torch.float8_e4m3fn caches and
    pools and scales != 1. opcheck's test_schema is left out: it multiplies the inputs, which torch's
    CPU kernels do not do for float8 ("mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn')."""
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    g = torch.Generator().manual_seed(seed)
    plan = attnkit.plan_paged_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, num_pages=12, page_size=16,
                                     max_pages_per_seq=4, kv_dtype=torch.float8_e4m3fn)
    extend_plan = attnkit.plan_extend(batch=2, num_heads=8, kv_heads=2, head_dim=64, num_pages=12, page_size=16,
                                      max_pages_per_seq=4, max_q_len=3, kv_dtype=torch.float8_e4m3fn)
    k_pages = (torch.randn(12, 2, 16, 64, generator=g) * 40).to(torch.float8_e4m3fn)
    v_pages = (torch.randn(12, 2, 16, 64, generator=g) * 40).to(torch.float8_e4m3fn)
    table = torch.tensor([[3, 7, 1, -1], [0, 11, -1, -1]], dtype=torch.int32)
    rows = torch.randn(2, 2, 64, generator=g).bfloat16()
    flat_plan = attnkit.plan_decode(batch=2, num_heads=8, kv_heads=2, head_dim=64, max_seq=16,
                                    kv_dtype=torch.float8_e4m3fn)
    k_cache, v_cache = k_pages[:2], v_pages[:2]  # [2, 2, 16, 64]: a contiguous e4m3 cache
    checks = [
        (ops.decode.default, (flat_plan.number, torch.randn(2, 8, 64, generator=g).bfloat16(), k_cache, v_cache,
                              torch.tensor([16, 5], dtype=torch.int32), True, 0.025, 0.5)),
        (ops.append_kv_.default, (k_cache.clone(), v_cache.clone(), torch.randn(2, 2, 64, generator=g).bfloat16(),
                                  torch.randn(2, 2, 64, generator=g).bfloat16(), torch.tensor([15, 0], dtype=torch.int32),
                                  0.025, 0.5)),
        (ops.paged_decode.default, (plan.number, torch.randn(2, 8, 64, generator=g).bfloat16(), k_pages, v_pages, table,
                                    torch.tensor([40, 20], dtype=torch.int32), True, 0.025, 0.5)),
        (ops.extend.default, (extend_plan.number, torch.randn(4, 8, 64, generator=g).bfloat16(),
                              torch.tensor([0, 3, 4], dtype=torch.int32), k_pages, v_pages, table,
                              torch.tensor([40, 20], dtype=torch.int32), True, 0.025, 0.5)),
        (ops.paged_append_kv_.default, (k_pages, v_pages, rows, rows, table, torch.tensor([40, 20], dtype=torch.int32),
                                        None, "", plan.number, 0.025, 0.5)),
    ]
    for op, args in checks:
        result = torch.library.opcheck(op, args, test_utils=("test_autograd_registration", "test_faketensor",
                                                             "test_aot_dispatch_dynamic"))
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


def paged_step(decode_plan, extend_plan, k_pages, v_pages, table, k_new, v_new, lengths, q, q_rows, cu):
    """Append one token per sequence, decode it, then verify two drafted tokens of sequence 0 and
    one of sequence 1 (extend) against the same pools."""
    attnkit.paged_append_kv(k_pages, v_pages, k_new, v_new, table, lengths - 1, layout=decode_plan)
    out, lse = attnkit.paged_decode(decode_plan, q, k_pages, v_pages, table, lengths, return_lse=True)
    return out, lse, attnkit.extend(extend_plan, q_rows, cu, k_pages, v_pages, table, lengths)


def test_a_paged_step_compiles_without_graph_breaks(seed):
    g, decode_plan, extend_plan, k_pages, v_pages, table = paged_setup(seed)
    rest = (torch.randn(2, 2, 64, generator=g), torch.randn(2, 2, 64, generator=g), torch.tensor([41, 18], dtype=torch.int32),
            torch.randn(2, 8, 64, generator=g), torch.randn(3, 8, 64, generator=g), torch.tensor([0, 2, 3], dtype=torch.int32))
    pools = (k_pages.clone(), v_pages.clone())
    compiled = torch.compile(paged_step, backend="aot_eager", fullgraph=True)
    got = compiled(decode_plan, extend_plan, k_pages, v_pages, table, *rest)
    expected = paged_step(decode_plan, extend_plan, *pools, table, *rest)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(k_pages, pools[0], rtol=0, atol=0)  # both appended the same rows
    # the new rows landed: sequence 0's key 40 in page table[0][2] = 1, slot 8; sequence 1's key 17 in page 11, slot 1
    assert torch.equal(k_pages[1, :, 8], rest[0][0]) and torch.equal(v_pages[11, :, 1], rest[1][1])


def test_plans_given_to_compiled_code_must_stay_alive(ops):
    plan = attnkit.plan_decode(batch=1, num_heads=2, kv_heads=1, head_dim=32, max_seq=8, kv_dtype="f32")
    number = plan.number
    del plan
    import gc

    gc.collect()
    with pytest.raises(attnkit.Error, match="was freed. Fix:"):
        ops.decode(number, torch.zeros(1, 2, 32), torch.zeros(1, 1, 8, 32), torch.zeros(1, 1, 8, 32),
                   torch.tensor([8], dtype=torch.int32), False)
