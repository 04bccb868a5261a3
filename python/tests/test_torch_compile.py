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
        (ops.sdpa_out.default, (q, k, v, None, torch.empty(2, 5, 8, 64).transpose(1, 2), True, 0.0, 0, 0.0)),
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
