"""attnkit on a CUDA device through torch: parity with torch SDPA on random inputs (decode and
prefill, bf16/f16/f32), zero-copy outputs, the caller's stream, and a randomly initialised small
Llama generating 64 greedy tokens with attnkit as with sdpa. Marked gpu; skipped (visibly)
without torch, a CUDA device, or an attnkit built with CUDA."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnkit  # noqa: E402
from conftest import REL_L2, attention_f64, check_close  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch"),
    pytest.mark.skipif(not attnkit.cuda_built(), reason="attnkit was built without CUDA (no nvcc at build time)"),
]

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def sdpa_f64(q, k, v, causal, lengths=None):
    """torch SDPA in float64 (the exact math path), GQA by repetition, causal bottom-right,
    and for decode each sequence's valid keys from lengths."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    q_len, kv_len = q.shape[2], k.shape[2]
    mask = torch.ones(q.shape[0], 1, q_len, kv_len, dtype=torch.bool, device=q.device)
    if causal:
        mask &= torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril(kv_len - q_len)
    if lengths is not None:
        mask &= (torch.arange(kv_len, device=q.device)[None, :] < lengths[:, None].long())[:, None, None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sdpa_native(q, k, v, causal):
    """torch SDPA in the inputs' dtype (the peer attnkit is compared with)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("batch,heads,kv_heads,head_dim,max_seq", [
    (1, 32, 8, 128, 4097), (5, 16, 2, 64, 1000), (3, 8, 8, 96, 333), (2, 4, 1, 256, 129)])
def test_decode_parity_with_sdpa(seed, dtype, batch, heads, kv_heads, head_dim, max_seq):
    g = torch.Generator(device="cuda").manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    q = torch.randn(batch, heads, head_dim, device="cuda", generator=g).to(td)
    k = torch.randn(batch, kv_heads, max_seq, head_dim, device="cuda", generator=g).to(td)
    v = torch.randn(batch, kv_heads, max_seq, head_dim, device="cuda", generator=g).to(td)
    lengths = torch.randint(1, max_seq + 1, (batch,), device="cuda", generator=g, dtype=torch.int32)
    lengths[0] = max_seq
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, max_seq=max_seq,
                               kv_dtype=dtype, backend="cuda")
    assert plan.backend == "cuda"
    out = torch.full((batch, heads, head_dim), float("nan"), dtype=td, device="cuda")
    got = attnkit.decode(plan, q, k, v, lengths, out=out)
    assert got is out
    expected = sdpa_f64(q[:, :, None], k, v, causal=False, lengths=lengths)[:, :, 0]
    check_close(out.float().cpu().numpy(), expected.cpu().numpy(), dtype)
    if dtype != "f32" and batch == 1:  # one full-length sequence: torch's own kernel as a second opinion
        peer = sdpa_native(q[:, :, None], k, v, causal=False)[:, :, 0]
        peer_err = float((peer.double() - expected).norm() / expected.norm())
        assert peer_err <= REL_L2[dtype]


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("batch,heads,kv_heads,head_dim,q_len,kv_len,causal", [
    (2, 16, 4, 128, 300, 300, True), (1, 8, 2, 64, 129, 517, True), (3, 4, 4, 96, 77, 77, False),
    (1, 4, 2, 256, 65, 65, True), (2, 8, 2, 32, 50, 50, True)])
def test_prefill_parity_with_sdpa(seed, dtype, batch, heads, kv_heads, head_dim, q_len, kv_len, causal):
    g = torch.Generator(device="cuda").manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    q = torch.randn(batch, heads, q_len, head_dim, device="cuda", generator=g).to(td)
    k = torch.randn(batch, kv_heads, kv_len, head_dim, device="cuda", generator=g).to(td)
    v = torch.randn(batch, kv_heads, kv_len, head_dim, device="cuda", generator=g).to(td)
    out = attnkit.sdpa(q, k, v, causal=causal)
    assert out.dtype == td and out.device == q.device and out.shape == q.shape
    expected = sdpa_f64(q, k, v, causal)
    check_close(out.float().cpu().numpy(), expected.cpu().numpy(), dtype)


def test_prefill_writes_bshd_output_in_place_on_a_side_stream(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, s, h, kvh, d = 2, 200, 8, 2, 128
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        q = torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, s, kvh, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, s, kvh, d, device="cuda", generator=g).bfloat16()
        out = torch.full((b, s, h, d), float("nan"), dtype=torch.bfloat16, device="cuda")
        attnkit.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, out=out.transpose(1, 2))
        expected = sdpa_f64(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True).transpose(1, 2)
    side.synchronize()
    check_close(out.float().cpu().numpy(), expected.cpu().numpy(), "bf16")


def test_append_kv_on_cuda_is_exact(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k_cache = torch.randn(3, 2, 50, 64, device="cuda", generator=g).bfloat16()
    v_cache = torch.randn(3, 2, 50, 64, device="cuda", generator=g).bfloat16()
    k_new = torch.randn(3, 2, 64, device="cuda", generator=g).bfloat16()
    v_new = torch.randn(3, 2, 64, device="cuda", generator=g).bfloat16()
    positions = torch.tensor([0, 49, 17], dtype=torch.int32, device="cuda")
    k_expected, v_expected = k_cache.clone(), v_cache.clone()
    for i, p in enumerate(positions.tolist()):
        k_expected[i, :, p], v_expected[i, :, p] = k_new[i], v_new[i]
    attnkit.append_kv(k_cache, v_cache, k_new, v_new, positions)
    torch.cuda.synchronize()
    assert torch.equal(k_cache, k_expected) and torch.equal(v_cache, v_expected)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_apply_rope_on_cuda_matches_the_cpu(seed, style):
    """Packed tokens [tokens, heads, head_dim] with a position per token, rotated on the GPU and on
    the CPU (both rotate in float64 and round once)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(9, 4, 128, device="cuda", generator=g)
    positions = torch.tensor([0, 1, 2, 7, 100, 4095, 65536, 3, 5], dtype=torch.int32, device="cuda")
    expected = x.cpu().numpy().copy()
    attnkit.apply_rope(expected, positions.cpu().numpy(), style=style, theta=500000.0)
    got = attnkit.apply_rope(x, positions, style=style, theta=500000.0)
    assert got is x
    torch.cuda.synchronize()
    np.testing.assert_allclose(x.cpu().numpy(), expected, rtol=2e-6, atol=1e-6)


def test_merge_states_on_cuda_joins_a_prefix_and_a_suffix(seed):
    """Cascade attention: the queries attend a shared prefix and their own keys apart (bf16 outputs
    with LSEs), and the merge equals attention over both."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(1, 8, 5, 64, device="cuda", generator=g).bfloat16()
    k = torch.randn(1, 2, 700, 64, device="cuda", generator=g).bfloat16()
    v = torch.randn(1, 2, 700, 64, device="cuda", generator=g).bfloat16()
    parts, lses = [], []
    for keys in (slice(0, 512), slice(512, 700)):
        plan = attnkit.plan_prefill(batch=1, num_heads=8, kv_heads=2, head_dim=64, q_len=5,
                                    kv_len=keys.stop - keys.start, causal=False, dtype="bf16", backend="cuda")
        o, l = attnkit.prefill(plan, q, k[:, :, keys], v[:, :, keys], return_lse=True)
        parts.append(o.reshape(40, 64))
        lses.append(l.reshape(40))
    out, lse = attnkit.merge_states(torch.stack(parts), torch.stack(lses), return_lse=True)
    torch.cuda.synchronize()
    expected = sdpa_f64(q, k, v, causal=False).reshape(40, 64)
    check_close(out.cpu().numpy(), expected.cpu().numpy(), "bf16")
    assert out.is_cuda and lse.is_cuda and lse.dtype == torch.float32


@pytest.mark.parametrize("q_len,kv_len,causal", [(1, 3000, False), (300, 300, True), (8, 5000, True)])
def test_sdpa_with_sinks_on_cuda_matches_float64(seed, q_len, kv_len, causal):
    """gpt-oss's attention sinks on the CUDA kernels (decode, Hopper prefill, short queries):
    the sink's logit joins each row's softmax with no value."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(2, 16, q_len, 64, device="cuda", generator=g).bfloat16()
    k = torch.randn(2, 2, kv_len, 64, device="cuda", generator=g).bfloat16()
    v = torch.randn(2, 2, kv_len, 64, device="cuda", generator=g).bfloat16()
    sinks = (3 * torch.randn(16, device="cuda", generator=g)).bfloat16()
    out = torch.empty(2, q_len, 16, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    attnkit.sdpa(q, k, v, causal=causal, sinks=sinks, out=out)
    expected, _ = attention_f64(*(x.float().cpu().numpy() for x in (q, k, v)), causal=causal,
                                sinks=sinks.float().cpu().numpy())
    check_close(out.float().cpu().numpy(), expected, "bf16")


@pytest.mark.parametrize("call", ["sdpa", "decode_plan"])
def test_a_compiled_decode_step_replays_in_a_cuda_graph(seed, call):
    """append_kv and a decode against per-sequence lengths (attnkit.sdpa, or attnkit.decode with a
    plan) inside torch.compile(fullgraph=True) on CUDA tensors, captured in a CUDA graph after a
    warm-up and replayed with new inputs: the caches gain the new rows and the output matches
    float64."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    k_cache = torch.randn(3, 2, 96, 64, device="cuda", generator=g).bfloat16()
    v_cache = torch.randn(3, 2, 96, 64, device="cuda", generator=g).bfloat16()
    plan = attnkit.plan_decode(batch=3, num_heads=8, kv_heads=2, head_dim=64, max_seq=96, kv_dtype="bf16",
                               backend="cuda")

    def step(q, k_new, v_new, positions):
        attnkit.append_kv(k_cache, v_cache, k_new, v_new, positions)
        if call == "sdpa":
            return attnkit.sdpa(q[:, :, None], k_cache, v_cache, lengths=positions + 1)[:, :, 0]
        return attnkit.decode(plan, q, k_cache, v_cache, positions + 1)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    q = torch.randn(3, 8, 64, device="cuda", generator=g).bfloat16()
    k_new = torch.randn(3, 2, 64, device="cuda", generator=g).bfloat16()
    v_new = torch.randn(3, 2, 64, device="cuda", generator=g).bfloat16()
    positions = torch.tensor([5, 0, 60], dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile, plan, workspaces
        for _ in range(2):
            compiled(q, k_new, v_new, positions)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(q, k_new, v_new, positions)

    q.copy_(torch.randn(3, 8, 64, device="cuda", generator=g))
    k_new.copy_(torch.randn(3, 2, 64, device="cuda", generator=g))
    v_new.copy_(torch.randn(3, 2, 64, device="cuda", generator=g))
    positions.copy_(torch.tensor([95, 17, 1], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    for b, p in enumerate(positions.tolist()):
        assert torch.equal(k_cache[b, :, p], k_new[b]) and torch.equal(v_cache[b, :, p], v_new[b])
    expected = sdpa_f64(q[:, :, None], k_cache, v_cache, causal=False, lengths=positions + 1)[:, :, 0]
    check_close(out.float().cpu().numpy(), expected.cpu().numpy(), "bf16")


@pytest.mark.parametrize("window", [0, 300])
def test_decode_with_key_starts_on_cuda_matches_float64(seed, window):
    """Left-padded caches on the CUDA decode (split-KV with long keys): sequence b reads keys
    [key_starts[b], lengths[b]) only; the padding and the tail are NaN, so reading one shows. A
    start at the length leaves no key (zeros, LSE -inf); a start past it is clamped on the device."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads, kv_heads, head_dim, max_seq = 5, 16, 2, 128, 3000
    q = torch.randn(batch, heads, head_dim, device="cuda", generator=g).bfloat16()
    k = torch.randn(batch, kv_heads, max_seq, head_dim, device="cuda", generator=g).bfloat16()
    v = torch.randn(batch, kv_heads, max_seq, head_dim, device="cuda", generator=g).bfloat16()
    lengths = torch.tensor([3000, 2500, 700, 40, 90], dtype=torch.int32, device="cuda")
    key_starts = torch.tensor([0, 1999, 650, 40, 0], dtype=torch.int32, device="cuda")
    expected, expected_lse = attention_f64(q[:, :, None].float().cpu().numpy(), k.float().cpu().numpy(),
                                           v.float().cpu().numpy(), causal=True, window=window,
                                           kv_valid=lengths.cpu().numpy(), key_starts=key_starts.cpu().numpy())
    for b, (start, length) in enumerate(zip(key_starts.tolist(), lengths.tolist())):
        for cache in (k, v):
            cache[b, :, :start] = float("nan")
            cache[b, :, length:] = float("nan")
    plan = attnkit.plan_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim, max_seq=max_seq,
                               kv_dtype="bf16", window=window, backend="cuda")
    out, lse = attnkit.decode(plan, q, k, v, lengths, key_starts=key_starts, return_lse=True)
    torch.cuda.synchronize()
    check_close(out.float().cpu().numpy(), expected[:, :, 0], "bf16")
    check_close(lse.cpu().numpy(), expected_lse[:, :, 0], "f32", "lse")
    assert torch.equal(out[3], torch.zeros_like(out[3]))
    sdpa_out = attnkit.sdpa(q[:, :, None], k, v, lengths=lengths, key_starts=key_starts, window=window)
    assert torch.equal(sdpa_out[:, :, 0], out)


def test_tiny_llama_generates_a_left_padded_batch_on_cuda_like_eager(seed):
    """A left-padded batch of prompts of different lengths on CUDA: the ragged prefill and the
    decode steps with key_starts run on attnkit (no fallback), with eager's greedy tokens."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import CountAttnkitCalls, left_padded_prompts, tiny_llama

    model = tiny_llama(torch.float32, "cuda", seed)
    prompt, mask = (x.cuda() for x in left_padded_prompts(seed, [40, 23, 3], 40))
    runs = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), CountAttnkitCalls() as counted:
            runs[impl] = model.generate(prompt, attention_mask=mask, max_new_tokens=24, min_new_tokens=24,
                                        do_sample=False, pad_token_id=0, output_logits=True,
                                        return_dict_in_generate=True)
    assert not counted.fallbacks and counted.calls == 2 * 24, (counted.calls, counted.fallbacks)
    assert torch.equal(runs["attnkit"].sequences, runs["eager"].sequences)
    torch.testing.assert_close(torch.stack(runs["attnkit"].logits), torch.stack(runs["eager"].logits),
                               rtol=1e-3, atol=1e-3)


def test_tiny_llama_runs_a_right_padded_forward_on_cuda_like_eager(seed):
    """A forward pass without a cache over a right-padded batch on CUDA (prompts of 40, 23 and 1
    tokens): one ragged prefill of the real rows and keys per layer on attnkit (no fallback), with
    eager's logits for the real tokens and finite ones for the padding."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import CountAttnkitCalls, padded_prompts, tiny_llama

    model = tiny_llama(torch.float32, "cuda", seed)
    prompt, mask = (x.cuda() for x in padded_prompts(seed, [(0, n) for n in (40, 23, 1)], 40))
    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), CountAttnkitCalls() as counted:
            logits[impl] = model(prompt, attention_mask=mask, use_cache=False).logits
    assert not counted.fallbacks and counted.calls == 2, (counted.calls, counted.fallbacks)
    real = mask.bool()
    torch.testing.assert_close(logits["attnkit"][real], logits["eager"][real], rtol=1e-3, atol=1e-3)
    assert torch.isfinite(logits["attnkit"]).all()


def test_tiny_llama_runs_a_packed_forward_on_cuda_like_eager(seed):
    """A packed batch on CUDA (rows of documents of 7, 1 and 12 tokens, of 20, and of 1, 9, 9 and
    1; position_ids restarting with each document; no cache): one ragged prefill of the documents
    per layer on attnkit (no fallback), with eager's logits on the same packed input and with each
    document run alone, unpacked."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import CountAttnkitCalls, documents_one_by_one, packed_batch, tiny_llama

    model = tiny_llama(torch.float32, "cuda", seed)
    rows = [[7, 1, 12], [20], [1, 9, 9, 1]]
    ids, positions = (t.cuda() for t in packed_batch(seed, rows))
    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), CountAttnkitCalls() as counted:
            logits[impl] = model(ids, position_ids=positions, use_cache=False).logits
    assert not counted.fallbacks and counted.calls == 2, (counted.calls, counted.fallbacks)
    torch.testing.assert_close(logits["attnkit"], logits["eager"], rtol=1e-3, atol=1e-3)
    model.set_attn_implementation("eager")
    torch.testing.assert_close(logits["attnkit"], documents_one_by_one(model, ids, rows), rtol=1e-3, atol=1e-3)


def test_errors_on_cuda_carry_a_fix():
    plan = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=2, head_dim=64, max_seq=16, kv_dtype="bf16")  # CPU plan
    q = torch.zeros(1, 4, 64, dtype=torch.bfloat16, device="cuda")
    kv = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(attnkit.Error, match="Fix:"):
        attnkit.decode(plan, q, kv, kv, torch.tensor([16], dtype=torch.int32, device="cuda"))


def test_tiny_llama_f32_generates_the_same_64_tokens_as_sdpa(seed):
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import check_greedy_generation, tiny_llama

    model = tiny_llama(torch.float32, "cuda", seed)
    prompt = torch.randint(0, 1000, (2, 17), generator=torch.Generator().manual_seed(seed)).cuda()
    print(check_greedy_generation(model, prompt, rel_l2_tolerance=REL_L2["f32"]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tiny_llama_half_is_as_close_to_f32_as_sdpa(seed, dtype):
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import check_teacher_forced, tiny_llama

    model = tiny_llama(dtype, "cuda", seed)
    prompt = torch.randint(0, 1000, (2, 17), generator=torch.Generator().manual_seed(seed)).cuda()
    print(check_teacher_forced(model, prompt))


# The paged CUDA path through torch (docs/paged.md). Written after this session's device time was
# spent: first run with the next scripts/device-python.sh call.
def paged_pool(g, batch, kv_heads, head_dim, page_size, lengths, width, td):
    """Random HND pools with randomly permuted pages, NaN in every slot no sequence owns, the page
    table (-1 past each sequence's pages) and the contiguous caches the pages hold."""
    pages_of = [(int(n) + page_size - 1) // page_size for n in lengths]
    num_pages = sum(pages_of) + 1
    k_pages = torch.full((num_pages, kv_heads, page_size, head_dim), float("nan"), device="cuda").to(td)
    v_pages = k_pages.clone()
    order = torch.randperm(num_pages, device="cuda", generator=g).tolist()
    table = torch.full((batch, width), -1, dtype=torch.int32)
    max_len = max(int(n) for n in lengths)
    k = torch.randn(batch, kv_heads, max(max_len, 1), head_dim, device="cuda", generator=g).to(td)
    v = torch.randn(batch, kv_heads, max(max_len, 1), head_dim, device="cuda", generator=g).to(td)
    used = 0
    for b, n in enumerate(lengths):
        for i in range(pages_of[b]):
            page = order[used]
            used += 1
            table[b, i] = page
            lo, hi = i * page_size, min(int(n), (i + 1) * page_size)
            k_pages[page, :, : hi - lo] = k[b, :, lo:hi]
            v_pages[page, :, : hi - lo] = v[b, :, lo:hi]
    return k_pages, v_pages, table.cuda(), k, v, num_pages


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_paged_decode_on_cuda_matches_float64(seed, dtype, page_size):
    g = torch.Generator(device="cuda").manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    batch, heads, kv_heads, head_dim, kv_len = 4, 16, 4, 128, 300
    lengths = torch.tensor([300, 1, 77, 160], dtype=torch.int32, device="cuda")
    width = (kv_len + page_size - 1) // page_size
    k_pages, v_pages, table, k, v, num_pages = paged_pool(g, batch, kv_heads, head_dim, page_size, lengths.tolist(),
                                                          width, td)
    plan = attnkit.plan_paged_decode(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                     num_pages=num_pages, page_size=page_size, max_pages_per_seq=width, kv_len=kv_len,
                                     kv_dtype=dtype, backend="cuda")
    assert plan.backend == "cuda"
    q = torch.randn(batch, heads, head_dim, device="cuda", generator=g).to(td)
    out = attnkit.paged_decode(plan, q, k_pages, v_pages, table, lengths)
    expected = sdpa_f64(q[:, :, None], k, v, causal=False, lengths=lengths)[:, :, 0]
    torch.cuda.synchronize()
    check_close(out.float().cpu().numpy(), expected.cpu().numpy(), dtype)


# Short chunks (the decode kernel; 17 new tokens on an empty cache: a whole prefill across two pages)
# and long ones (on Hopper the prefill kernel with page boxes; 256 on an empty cache).
@pytest.mark.parametrize("prefix,q_lens,kv_len", [([40, 0, 97], [5, 17, 1], 120), ([300, 0, 97], [200, 256, 130], 512)])
def test_paged_append_then_extend_on_cuda_matches_float64(seed, prefix, q_lens, kv_len):
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads, kv_heads, head_dim, page_size = 3, 8, 2, 64, 16
    lengths = [p + n for p, n in zip(prefix, q_lens)]
    width = (kv_len + page_size - 1) // page_size
    k_pages, v_pages, table, k, v, num_pages = paged_pool(g, batch, kv_heads, head_dim, page_size, lengths, width,
                                                          torch.bfloat16)
    # Append the new tokens' K/V (they are already in k/v: overwrite the pool's copies with NaN first).
    for b, (p, n) in enumerate(zip(prefix, q_lens)):
        for j in range(p, p + n):
            k_pages[table[b, j // page_size], :, j % page_size] = float("nan")
            v_pages[table[b, j // page_size], :, j % page_size] = float("nan")
    k_new = torch.cat([k[b, :, p:p + n].transpose(0, 1) for b, (p, n) in enumerate(zip(prefix, q_lens))])
    v_new = torch.cat([v[b, :, p:p + n].transpose(0, 1) for b, (p, n) in enumerate(zip(prefix, q_lens))])
    cu = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32, device="cuda")
    attnkit.paged_append_kv(k_pages, v_pages, k_new.contiguous(), v_new.contiguous(), table,
                            torch.tensor(prefix, dtype=torch.int32, device="cuda"), cu)
    plan = attnkit.plan_extend(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               num_pages=num_pages, max_q_len=max(q_lens), page_size=page_size,
                               max_pages_per_seq=width, kv_len=kv_len, kv_dtype="bf16", backend="cuda")
    if max(q_lens) >= 128 and torch.cuda.get_device_capability() == (9, 0):
        assert plan.family == "warp_specialized_wgmma"
    q = torch.randn(sum(q_lens), heads, head_dim, device="cuda", generator=g).bfloat16()
    out = attnkit.extend(plan, q, cu, k_pages, v_pages, table, torch.tensor(lengths, dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()
    for b, (lo, hi) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        qb = q[lo:hi].transpose(0, 1)[None]  # [1, heads, q_len, head_dim]
        n = lengths[b]
        expected = sdpa_f64(qb, k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=True)[0].transpose(0, 1)
        check_close(out[lo:hi].float().cpu().numpy(), expected.cpu().numpy(), "bf16")


# A step whose sequences are all idle: q of no rows (torch gives it a null data pointer) on either
# kernel family; nothing is launched or written.
@pytest.mark.parametrize("max_q_len", [4, 256])
def test_an_idle_extend_step_on_cuda_takes_rowless_tensors(seed, max_q_len):
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads, kv_heads, head_dim, page_size, kv_len = 2, 8, 2, 64, 16, 512
    lengths = [300, 20]
    width = kv_len // page_size
    k_pages, v_pages, table, _, _, num_pages = paged_pool(g, batch, kv_heads, head_dim, page_size, lengths, width,
                                                          torch.bfloat16)
    k_before, v_before = k_pages.clone(), v_pages.clone()
    plan = attnkit.plan_extend(batch=batch, num_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                               num_pages=num_pages, max_q_len=max_q_len, page_size=page_size,
                               max_pages_per_seq=width, kv_len=kv_len, kv_dtype="bf16", backend="cuda")
    q = torch.empty(0, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    out, lse = attnkit.extend(plan, q, torch.zeros(batch + 1, dtype=torch.int32, device="cuda"), k_pages, v_pages,
                              table, torch.tensor(lengths, dtype=torch.int32, device="cuda"), return_lse=True)
    torch.cuda.synchronize()
    assert tuple(out.shape) == (0, heads, head_dim) and tuple(lse.shape) == (0, heads)
    assert torch.equal(k_pages.view(torch.int16), k_before.view(torch.int16))  # bitwise: the pools hold NaN
    assert torch.equal(v_pages.view(torch.int16), v_before.view(torch.int16))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_of_a_device_that_is_not_current_are_rejected():
    """Capsules skip Tensor.__dlpack__'s device check; the library's check answers instead, and
    the call runs once the tensors' device is current."""
    plan = attnkit.plan_decode(batch=1, num_heads=4, kv_heads=1, head_dim=64, max_seq=32, kv_dtype="bf16",
                               backend="cuda", device=1)
    q = torch.randn(1, 4, 64, device="cuda:1").bfloat16()
    k = torch.randn(1, 1, 32, 64, device="cuda:1").bfloat16()
    out = torch.full_like(q, float("nan"))
    with torch.cuda.device(0):
        with pytest.raises(attnkit.Error, match="Fix:"):
            attnkit.decode(plan, q, k, k, [32], out=out)
    assert torch.isnan(out).all()
    with torch.cuda.device(1):
        attnkit.decode(plan, q, k, k, [32], out=out)
    assert torch.isfinite(out).all()
