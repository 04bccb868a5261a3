"""torch tensors on the CPU: DLPack interop (bf16 included), attnkit.sdpa against torch's SDPA,
and the transformers backend on a small random Llama. Skipped where torch (or transformers)
is not installed; CI installs neither, the device image has both."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import attnkit  # noqa: E402
from conftest import REL_L2, attention_f64, check_close  # noqa: E402

pytestmark = pytest.mark.torch

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_sdpa_f64(q, k, v, causal):
    """torch SDPA in float64 (its exact math path) with a bottom-right causal mask."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    mask = None
    if causal:
        q_len, kv_len = q.shape[2], k.shape[2]
        mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("q_len,kv_len,causal", [(1, 77, False), (33, 33, True), (9, 50, True), (20, 31, False)])
def test_sdpa_matches_torch(seed, dtype, q_len, kv_len, causal):
    g = torch.Generator().manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    q = torch.randn(2, 8, q_len, 64, generator=g).to(td)
    k = torch.randn(2, 2, kv_len, 64, generator=g).to(td)
    v = torch.randn(2, 2, kv_len, 64, generator=g).to(td)
    out = attnkit.sdpa(q, k, v, causal=causal)
    assert isinstance(out, torch.Tensor) and out.dtype == td and out.shape == q.shape
    check_close(out.float().numpy(), torch_sdpa_f64(q, k, v, causal).numpy(), dtype)


def test_torch_tensors_in_and_out_without_copies(seed):
    g = torch.Generator().manual_seed(seed)
    plan = attnkit.plan_decode(batch=2, num_heads=4, kv_heads=2, head_dim=32, max_seq=40, kv_dtype="bf16")
    q = torch.randn(2, 4, 32, generator=g).bfloat16().requires_grad_()
    k = torch.randn(2, 2, 40, 32, generator=g).bfloat16()
    v = torch.randn(2, 2, 40, 32, generator=g).bfloat16()
    lengths = torch.tensor([40, 3], dtype=torch.int32)
    out = torch.full((2, 4, 32), float("nan"), dtype=torch.bfloat16)
    got = attnkit.decode(plan, q, k, v, lengths, out=out)
    assert got is out and out.data_ptr() == got.data_ptr()
    golden, _ = attnkit.reference_decode(plan, q.detach(), k, v, lengths)
    check_close(out.float().numpy(), golden, "bf16")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sdpa_decode_with_key_starts_on_torch_tensors(seed, dtype):
    """Left-padded caches (key_starts) through attnkit.sdpa's decode on torch tensors: the padding
    and the unwritten tail are NaN, so reading one shows; against the numpy float64 softmax."""
    g = torch.Generator().manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    q = torch.randn(4, 8, 1, 32, generator=g).to(td)
    k, v = torch.randn(4, 2, 24, 32, generator=g).to(td), torch.randn(4, 2, 24, 32, generator=g).to(td)
    lengths = torch.tensor([24, 24, 10, 7], dtype=torch.int32)
    key_starts = torch.tensor([0, 11, 3, 7], dtype=torch.int32)
    expected, _ = attention_f64(q.float().numpy(), k.float().numpy(), v.float().numpy(), causal=True,
                                kv_valid=lengths.numpy(), key_starts=key_starts.numpy())
    for b in range(4):
        for cache in (k, v):
            cache[b, :, :int(key_starts[b])] = float("nan")
            cache[b, :, int(lengths[b]):] = float("nan")
    out = attnkit.sdpa(q, k, v, lengths=lengths, key_starts=key_starts)
    check_close(out.float().numpy(), expected, dtype)
    assert torch.equal(out[3], torch.zeros_like(out[3]))  # no key left
    with pytest.raises(attnkit.Error, match="key_starts.*Fix:"):  # int64 starts
        attnkit.sdpa(q, k, v, lengths=lengths, key_starts=key_starts.long())


def test_transformers_backend_generates_like_sdpa_on_cpu(seed):
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import check_greedy_generation, tiny_llama

    torch.set_num_threads(2)
    model = tiny_llama(torch.float32, "cpu", seed)
    prompt = torch.randint(0, 1000, (2, 17), generator=torch.Generator().manual_seed(seed))
    print(check_greedy_generation(model, prompt, rel_l2_tolerance=REL_L2["f32"]))


def test_transformers_backend_bf16_on_cpu_is_as_close_to_f32_as_sdpa(seed):
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import check_teacher_forced, tiny_llama

    torch.set_num_threads(2)
    model = tiny_llama(torch.bfloat16, "cpu", seed)
    prompt = torch.randint(0, 1000, (2, 17), generator=torch.Generator().manual_seed(seed))
    print(check_teacher_forced(model, prompt))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sdpa_with_sinks_matches_torch_eager_sinks(seed, dtype):
    """gpt-oss's attention sinks through the transformers backend's entry point (s_aux), against
    the float64 softmax with the sink's logit in it."""
    pytest.importorskip("transformers")
    from attnkit.transformers_backend import attnkit_attention_forward

    g = torch.Generator().manual_seed(seed)
    td = TORCH_DTYPES[dtype]
    q = torch.randn(2, 8, 11, 64, generator=g).to(td)
    k, v = torch.randn(2, 2, 11, 64, generator=g).to(td), torch.randn(2, 2, 11, 64, generator=g).to(td)
    sinks = (2 * torch.randn(8, generator=g)).to(td)
    module = torch.nn.Module()
    module.is_causal = True
    got, _ = attnkit_attention_forward(module, q, k, v, None, scaling=0.125, s_aux=sinks)  # [b, q, h, d]

    expected, _ = attention_f64(*(x.float().numpy() for x in (q, k, v)), causal=True, scale=0.125,
                                sinks=sinks.float().numpy())
    check_close(got.transpose(1, 2).float().numpy(), expected, dtype)


def test_sdpa_reuses_the_f32_copy_of_a_bf16_sinks_parameter_until_it_changes(seed):
    """sdpa keeps one f32 copy of a 16-bit sinks parameter across calls; an in-place update, a new
    .data and an inference tensor are each seen (the result follows the sinks, never a stale copy)."""
    import attnkit._sdpa as sdpa_module

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, 1, 32, generator=g).bfloat16()
    k, v = torch.randn(1, 2, 9, 32, generator=g).bfloat16(), torch.randn(1, 2, 9, 32, generator=g).bfloat16()
    sinks = torch.nn.Parameter((2 * torch.randn(4, generator=g)).bfloat16())

    def expected():
        out, _ = attention_f64(*(x.float().numpy() for x in (q, k, v)), causal=False, scale=32 ** -0.5,
                               sinks=sinks.detach().float().numpy())
        return out

    attnkit.clear_plan_cache()
    check_close(attnkit.sdpa(q, k, v, sinks=sinks).float().numpy(), expected(), "bf16")
    kept = sdpa_module._torch_sinks_f32(sinks)
    assert sdpa_module._torch_sinks_f32(sinks) is kept  # the same copy while nothing changed
    with torch.no_grad():
        sinks.add_(3.0)  # in place: the version moves
    assert sdpa_module._torch_sinks_f32(sinks) is not kept
    check_close(attnkit.sdpa(q, k, v, sinks=sinks).float().numpy(), expected(), "bf16")
    sinks.data = (2 * torch.randn(4, generator=g)).bfloat16()  # new memory
    check_close(attnkit.sdpa(q, k, v, sinks=sinks).float().numpy(), expected(), "bf16")
    with torch.inference_mode():
        frozen = sinks.detach().clone() - 1.0  # an inference tensor: no version counter, cast per call
        got = attnkit.sdpa(q, k, v, sinks=frozen)
    out, _ = attention_f64(*(x.float().numpy() for x in (q, k, v)), causal=False, scale=32 ** -0.5,
                           sinks=frozen.float().numpy())
    check_close(got.float().numpy(), out, "bf16")


def run_like_eager(model, prompt, attention_mask=None, new_tokens=8):
    """(logits, greedy tokens, attnkit calls, fallbacks) of `model` with attnkit, and eager's
    logits and tokens, from the same weights."""
    import attnkit.transformers_backend as backend

    runs = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        calls, fallbacks = backend.attnkit_calls, sum(backend.fallback_counts.values())
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logits = model(prompt, attention_mask=attention_mask).logits
            tokens = model.generate(prompt, attention_mask=attention_mask, max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)  # past an EOS
        runs[impl] = (logits, tokens, backend.attnkit_calls - calls,
                      sum(backend.fallback_counts.values()) - fallbacks)
    return runs["attnkit"], runs["eager"]


def forward_like_eager(model, prompt, mask):
    """(attnkit's logits, eager's logits, attnkit's CountAttnkitCalls) of one forward pass of
    `model` without a cache, from the same weights."""
    from llama_support import CountAttnkitCalls

    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
            warnings.simplefilter("ignore")
            logits[impl] = model(prompt, attention_mask=mask, use_cache=False).logits
    return logits["attnkit"], logits["eager"], counted


def test_transformers_backend_runs_sliding_window_layers_natively(seed):
    """A sliding-window model (Mistral, window 8 over a 20-token prompt and 8 new tokens): the mask
    builder hands over no mask where it is only a causal window, so every call runs attnkit's
    window kernels, with eager's logits and tokens."""
    pytest.importorskip("transformers")
    from llama_support import tiny_mistral

    model = tiny_mistral(seed)
    prompt = torch.randint(1, 1000, (2, 20), generator=torch.Generator().manual_seed(seed))  # no pad token 0
    (logits, tokens, calls, fallbacks), (eager_logits, eager_tokens, _, _) = run_like_eager(model, prompt)
    assert calls == 2 * (1 + 1 + 7) and fallbacks == 0  # 2 layers x (forward, prefill, 7 decode steps)
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(tokens, eager_tokens)


def test_causal_window_of_recognises_only_causal_windows():
    """The masks the transformers backend runs natively: bottom-right causal over the first `keys`
    columns, optionally windowed, each sequence within one run of real keys [start, end) (left
    padding, right padding, both); anything else is None. The rows of padding tokens (whose own
    key is hidden) are not checked."""
    pytest.importorskip("transformers")
    from attnkit.transformers_backend import causal_window_of

    def causal(q_len, keys, columns, window=0, batch=2, starts=None, ends=None):
        """transformers' mask: the causal window, less each sequence's padding keys (rows of padding included)."""
        pos = torch.arange(q_len)[:, None] + (keys - q_len)
        cols = torch.arange(columns)[None, :]
        mask = (cols <= pos) & ((cols > pos - window) if window else True)
        mask = mask.expand(batch, 1, q_len, columns).clone()
        for b, start in enumerate(starts or []):
            mask[b, :, :, :start] = False
        for b, end in enumerate(ends or []):
            mask[b, :, :, end:keys] = False
        return mask

    def found(mask):
        layout = causal_window_of(mask)
        if layout is None:
            return None
        return (layout.keys, layout.window, None if layout.starts is None else layout.starts.tolist(),
                None if layout.ends is None else layout.ends.tolist())

    assert found(causal(5, 12, 12)) == (12, 0, None, None)  # a chunk of 5 queries over 7 cached keys
    assert found(causal(5, 12, 12, window=4)) == (12, 4, None, None)
    assert found(causal(5, 12, 12, window=20)) == (12, 0, None, None)  # a window wider than every row's keys
    assert found(causal(3, 9, 16)) == (9, 0, None, None)  # a static cache: slots 9..15 not written yet
    assert found(causal(1, 9, 16, window=4)) == (9, 4, None, None)  # decode
    assert found(causal(7, 7, 7)) == (7, 0, None, None)
    # Left padding (generation with padding_side="left"), with and without a window and a cache.
    assert found(causal(5, 12, 12, starts=[0, 2])) == (12, 0, [0, 2], None)
    assert found(causal(12, 12, 12, batch=3, starts=[0, 2, 9])) == (12, 0, [0, 2, 9], None)
    assert found(causal(12, 12, 12, window=4, batch=3, starts=[0, 2, 9])) == (12, 4, [0, 2, 9], None)
    # Sequence 1's start, 3, is behind the window: it reads as 0.
    assert found(causal(1, 9, 16, window=4, batch=3, starts=[0, 3, 7])) == (9, 4, [0, 0, 7], None)
    assert found(causal(1, 9, 16, starts=[4, 0])) == (9, 0, [4, 0], None)
    # A sequence that is all padding so far: its rows see nothing (all False), its start is `keys`.
    all_padding = causal(6, 6, 6, batch=3, starts=[0, 2, 6])
    assert found(all_padding) == (6, 0, [0, 2, 6], None)
    layout = causal_window_of(all_padding)
    assert layout.ragged is not None and layout.ragged.cu_seqlens_q.tolist() == [0, 6, 10, 10]
    assert layout.ragged.cu_seqlens_k.tolist() == [0, 6, 10, 10]
    assert layout.ragged.q_flat.tolist() == list(range(6)) + [8, 9, 10, 11]
    fixed = all_padding.clone()
    fixed[2] = True  # older torch's "fix" of rows that see nothing: not this mask, left to torch
    assert causal_window_of(fixed) is None
    # Right padding (a forward pass over a tokenizer's default padding): a row of padding sees its
    # sequence's real keys within its window, or nothing where the window has passed them.
    right = causal(10, 10, 10, batch=3, ends=[10, 6, 1])
    assert found(right) == (10, 0, None, [10, 6, 1])
    layout = causal_window_of(right)
    assert layout.ragged.cu_seqlens_q.tolist() == layout.ragged.cu_seqlens_k.tolist() == [0, 10, 16, 17]
    assert layout.ragged.q_flat.tolist() == list(range(16)) + [20]
    # No full row, and the padding outruns the window: a real row shows it.
    assert found(causal(10, 10, 10, window=3, ends=[4, 3])) == (10, 3, None, [4, 3])
    assert found(causal(5, 12, 12, ends=[12, 9])) == (12, 0, None, [12, 9])  # a chunk over a cache
    unchecked = right.clone()
    unchecked[1, :, 6:] = False  # the rows of padding tokens are not checked: these now see nothing
    assert found(unchecked) == (10, 0, None, [10, 6, 1])
    decode = causal_window_of(causal(1, 9, 16, ends=[9, 5]))  # a decode row whose own key is padding
    assert decode.ends.tolist() == [9, 5] and decode.ragged.cu_seqlens_q.tolist() == [0, 1, 1]
    # Padding on both sides, and on different sides in one batch.
    assert found(causal(8, 8, 8, window=3, batch=4, starts=[0, 2, 0, 1], ends=[8, 8, 5, 6])) == (
        8, 3, [0, 2, 0, 1], [8, 8, 5, 6])
    flipped = causal(5, 12, 12, window=4)
    flipped[0, 0, 2, 3] = ~flipped[0, 0, 2, 3]
    assert causal_window_of(flipped) is None
    holed = causal(5, 12, 12, starts=[0, 3])
    holed[1, :, :, 5] = False  # a hole after the start (packing, a dropped token): not left padding
    assert causal_window_of(holed) is None
    holed = causal(10, 10, 10, ends=[10, 7])
    holed[1, :, :, 3] = False  # right padding with a hole: two runs of real keys
    assert causal_window_of(holed) is None
    assert causal_window_of(torch.ones(2, 1, 5, 12, dtype=torch.bool)) is None  # not causal
    assert causal_window_of(causal(5, 4, 12)) is None  # fewer keys than queries
    assert causal_window_of(torch.zeros(2, 1, 5, 12, dtype=torch.bool)) is None
    assert causal_window_of(causal(5, 12, 12).float()) is None  # additive masks are left to torch


def test_causal_window_of_recognises_packed_documents():
    """Packed masks (several documents in one row of the batch, each bottom-right causal within
    itself, optionally windowed, as transformers builds them from position_ids that restart):
    every document of every row becomes one ragged sequence, with or without padding around the
    documents and over a cache; a row that sees into another document is not one (None)."""
    pytest.importorskip("transformers")
    from attnkit.transformers_backend import causal_window_of

    def documents(spans, keys, q_len=None, columns=None, window=0):
        """Batch row b holds the documents spans[b] = [(start, end), ...] of `keys` keys: a row of
        a document sees its causal window within the document; a row of no document, nothing."""
        q_len, columns = q_len or keys, columns or keys
        pos = torch.arange(q_len)[:, None] + (keys - q_len)
        cols = torch.arange(columns)[None, :]
        mask = torch.zeros(len(spans), 1, q_len, columns, dtype=torch.bool)
        for b, row in enumerate(spans):
            for start, end in row:
                mask[b, 0] |= ((pos >= start) & (pos < end) & (cols >= start) & (cols <= pos)
                               & ((cols > pos - window) if window else True))
        return mask

    def spans(*lengths, at=0):
        ends = torch.tensor(lengths).cumsum(0) + at
        return [(int(end) - n, int(end)) for n, end in zip(lengths, ends)]

    def found(mask):
        layout = causal_window_of(mask)
        if layout is None:
            return None
        ragged = layout.ragged
        return (layout.keys, layout.window, None if layout.starts is None else layout.starts.tolist(),
                None if layout.ends is None else layout.ends.tolist(),
                None if ragged is None else (ragged.cu_seqlens_q.tolist(), ragged.cu_seqlens_k.tolist()))

    packed = [spans(7, 1, 12), spans(20)]
    cu = [0, 7, 8, 20, 40]
    assert found(documents(packed, 20)) == (20, 0, None, None, (cu, cu))
    layout = causal_window_of(documents(packed, 20))
    assert layout.ragged.q_flat.tolist() == list(range(40)) and layout.ragged.max_q_len == 20
    assert found(documents(packed, 20, window=4)) == (20, 4, None, None, (cu, cu))
    # Mistral's window over documents all shorter than it: no row shows it, so none is reported (the same mask).
    assert found(documents([spans(3, 5, 12)], 20, window=16)) == (20, 0, None, None, ([0, 3, 8, 20],) * 2)
    # A document of one token at each end of a row, and every token its own document (the diagonal).
    assert found(documents([spans(1, 9, 9, 1)], 20, window=8)) == (20, 8, None, None, ([0, 1, 10, 19, 20],) * 2)
    assert found(documents([spans(*[1] * 6)], 6)) == (6, 0, None, None, (list(range(7)),) * 2)
    # Packing with left padding (row 0), right padding (row 1, whose padding rows see the last
    # document's keys, as transformers lets them: not checked) and a row of one document (row 2).
    mask = documents([spans(3, 11, at=2), spans(4, 6), spans(16)], 16)
    mask[1, 0, 10:, 4:10] = True
    cu = [0, 3, 14, 18, 24, 40]
    assert found(mask) == (16, 0, [2, 0, 0], [16, 10, 16], (cu, cu))
    assert causal_window_of(mask).ragged.q_flat.tolist() == list(range(2, 26)) + list(range(32, 48))
    # A chunk of 5 queries over 7 cached keys of a static cache (16 slots): row 0's document began
    # in the cache, the next begins in the chunk; bottom-right causal within each.
    mask = documents([spans(9, 3), spans(12)], 12, q_len=5, columns=16)
    assert found(mask) == (12, 0, None, None, ([0, 2, 5, 10], [0, 9, 12, 24]))
    assert causal_window_of(mask).ragged.q_flat.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    # Not a causal window over documents: a row that sees into the previous document (contiguous
    # or not), a document's first row that also sees the previous one's last key, a document's
    # row that misses its first key.
    for b, row, columns in ((0, 9, slice(6, 8)), (0, 9, slice(3, 4)), (0, 7, slice(6, 7)), (1, 12, slice(11, 12)),
                            (0, 10, slice(8, 9))):
        corrupted = documents([spans(7, 1, 12), spans(11, 9)], 20, window=4 if row == 12 else 0)
        corrupted[b, 0, row, columns] = ~corrupted[b, 0, row, columns]
        assert causal_window_of(corrupted) is None, (b, row, columns)


def two_chunk_logits(model, prompt, split, mask, name):
    """{impl: logits} of `prompt` run in two chunks, the second over the first's cache (mask: the
    batch's attention mask, or None), with eager and with attnkit; attnkit's 2 layers x 2 chunks
    must all run on attnkit, none falling back."""
    from llama_support import CountAttnkitCalls

    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
            warnings.simplefilter("ignore")
            first = model(prompt[:, :split], attention_mask=None if mask is None else mask[:, :split], use_cache=True)
            second = model(prompt[:, split:], attention_mask=mask, past_key_values=first.past_key_values,
                           use_cache=True)
            logits[impl] = torch.cat([first.logits, second.logits], dim=1)
        if impl == "attnkit":
            assert counted.calls == 2 * 2 and not counted.fallbacks, (name, counted.fallbacks)
    return logits


def test_transformers_backend_generates_left_padded_batches_natively(seed):
    """Batched generation of prompts of different lengths padded on the left (what transformers
    does with padding_side="left"): every call runs on attnkit (the prefill as one ragged prefill
    of the real rows and keys, the decode steps with key_starts), with eager's greedy tokens and
    logits; a Llama and a sliding-window Mistral (window 8, shorter than the prompts), with a
    dynamic and a static cache. One prompt is only 2 tokens long: its sequence's first rows see
    nothing in the prefill."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import CountAttnkitCalls, left_padded_prompts, tiny_llama, tiny_mistral

    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    prompt, mask = left_padded_prompts(seed, [20, 13, 2, 17], 20)
    new_tokens = 10
    for name, model in models.items():
        for cache in (None, "static"):
            runs = {}
            for impl in ("eager", "attnkit"):
                model.set_attn_implementation(impl)
                with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
                    warnings.simplefilter("ignore")
                    runs[impl] = model.generate(prompt, attention_mask=mask, max_new_tokens=new_tokens,
                                                min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                                                cache_implementation=cache, output_logits=True,
                                                return_dict_in_generate=True)
            what = (name, cache)
            assert not counted.fallbacks, (what, counted.fallbacks)
            assert counted.calls == 2 * new_tokens, (what, counted.calls)  # 2 layers x (prefill + 9 decode steps)
            assert torch.equal(runs["attnkit"].sequences, runs["eager"].sequences), what
            torch.testing.assert_close(torch.stack(runs["attnkit"].logits), torch.stack(runs["eager"].logits),
                                       rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


def test_transformers_backend_runs_left_padded_chunks_over_a_cache_natively(seed):
    """A left-padded batch prefilled in two chunks, the second over the first's cache: each chunk
    is one ragged prefill (in the first, one sequence is still all padding: no row of it sees a
    key). The logits of the real tokens are eager's; the padded rows, which see nothing, are not
    compared (eager's softmax over no key is not a number anyone reads)."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import left_padded_prompts, tiny_llama, tiny_mistral

    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    prompt, mask = left_padded_prompts(seed, [24, 17, 6], 24)
    for name, model in models.items():
        logits = two_chunk_logits(model, prompt, 14, mask, name)
        real = mask.bool()
        torch.testing.assert_close(logits["attnkit"][real], logits["eager"][real], rtol=1e-4, atol=1e-4)


def test_transformers_backend_runs_chunked_prefill_and_static_caches_natively(seed):
    """Masks that are only a causal window run on attnkit, not torch: a prompt prefilled in two
    chunks (the second over the first's cached keys), a static cache's generation (whose decode
    masks hide the unwritten slots), and a sliding-window model's chunks. Each as eager."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import CountAttnkitCalls, tiny_llama, tiny_mistral

    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    prompt = torch.randint(1, 1000, (2, 30), generator=torch.Generator().manual_seed(seed))  # no pad token 0
    for name, model in models.items():
        logits = two_chunk_logits(model, prompt, 20, None, name)
        torch.testing.assert_close(logits["attnkit"], logits["eager"], rtol=1e-4, atol=1e-4)

    model = models["llama"]
    tokens = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
            warnings.simplefilter("ignore")
            tokens[impl] = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0,
                                          cache_implementation="static")
    assert counted.calls == 2 * 8 and not counted.fallbacks, counted.fallbacks  # prefill + 7 decode steps
    assert torch.equal(tokens["attnkit"], tokens["eager"])

    # Prompt lookup (speculative decoding): each step verifies the drafted tokens as a chunk over the cache.
    prompt = prompt[:1].clone()
    prompt[0, 20:30] = prompt[0, 5:15]  # a repeat the lookup can draft from
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
            warnings.simplefilter("ignore")
            tokens[impl] = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0,
                                          prompt_lookup_num_tokens=4)
    assert counted.calls > 0 and not counted.fallbacks, counted.fallbacks
    assert torch.equal(tokens["attnkit"], tokens["eager"])


def test_transformers_backend_runs_a_tiny_gpt_oss_like_eager(seed):
    """gpt-oss: attention sinks and alternating sliding / full layers. Unpadded and left-padded,
    every call runs on attnkit (sinks, windows, left padding); right-padded, the calls fall back
    with the sinks kept (the model's eager arithmetic, since torch's sdpa would drop them). Each
    as eager."""
    pytest.importorskip("transformers")
    try:
        from transformers import GptOssConfig, GptOssForCausalLM
    except ImportError:
        pytest.skip("this transformers has no gpt-oss")

    cfg = GptOssConfig(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                       num_experts_per_tok=2, sliding_window=8, max_position_embeddings=256,
                       layer_types=["sliding_attention", "full_attention"],
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(seed)
    model = GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0)  # the initialisation's are ~0.01: make them matter
    prompt = torch.randint(1, 1000, (2, 20), generator=torch.Generator().manual_seed(seed))
    (logits, tokens, calls, fallbacks), (eager_logits, eager_tokens, _, _) = run_like_eager(model, prompt)
    assert calls == 2 * (1 + 1 + 7) and fallbacks == 0
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(tokens, eager_tokens)

    mask = torch.ones_like(prompt)
    mask[1, :5] = 0  # left padding: attnkit's
    (logits, tokens, calls, fallbacks), (eager_logits, eager_tokens, _, _) = run_like_eager(model, prompt, mask)
    assert calls == 2 * (1 + 1 + 7) and fallbacks == 0
    real = mask.bool()  # the padded rows see no key: eager's output there is not compared
    torch.testing.assert_close(logits[real], eager_logits[real], rtol=1e-4, atol=1e-4)
    assert torch.equal(tokens, eager_tokens)

    forward_mask = torch.ones_like(prompt)
    forward_mask[1, -5:] = 0  # right padding, a forward without a cache: attnkit's (sinks in the ragged prefill)
    logits, eager_logits, counted = forward_like_eager(model, prompt, forward_mask)
    assert counted.calls == 2 and not counted.fallbacks, counted.fallbacks
    real = forward_mask.bool()
    torch.testing.assert_close(logits[real], eager_logits[real], rtol=1e-4, atol=1e-4)

    forward_mask[1, 3] = 0  # and a hole: a real mask, so the calls fall back, sinks kept
    logits, eager_logits, counted = forward_like_eager(model, prompt, forward_mask)
    assert counted.calls == 0 and sum(counted.fallbacks.values()) == 2, counted.fallbacks
    torch.testing.assert_close(logits, eager_logits, rtol=1e-4, atol=1e-4)


def test_transformers_backend_runs_right_padded_batches_natively(seed):
    """A forward pass without a cache over a batch padded on the right (a tokenizer's default, as
    scoring, evaluation and embedding run): every call runs on attnkit as one ragged prefill of
    the real rows and keys, with eager's logits for the real tokens and finite ones for the
    padding (written as zeros by attention; eager's rows of padding see the real keys). Prompts of
    20, 13, 1 and 17 tokens in 20 (one full, one of a single token), and of 5, 11 and 1 in 24 (none
    full, as pad_to_multiple_of leaves a batch: the padding outruns Mistral's window 8, so only the
    real rows show it); a Llama and a sliding-window Mistral."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import padded_prompts, tiny_llama, tiny_mistral

    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    for name, model in models.items():
        for lengths, width in (([20, 13, 1, 17], 20), ([5, 11, 1], 24)):
            prompt, mask = padded_prompts(seed, [(0, n) for n in lengths], width)
            logits, eager_logits, counted = forward_like_eager(model, prompt, mask)
            what = (name, lengths)
            assert counted.calls == 2 and not counted.fallbacks, (what, counted.fallbacks)
            real = mask.bool()
            torch.testing.assert_close(logits[real], eager_logits[real], rtol=1e-4, atol=1e-4,
                                       msg=lambda m: f"{what}: {m}")
            assert torch.isfinite(logits).all(), what


def test_transformers_backend_runs_a_batch_padded_on_both_sides_natively(seed):
    """One batch with a sequence unpadded, one padded on the left, one on the right and one on
    both sides: each sequence's real keys are one run [start, end), so every call runs on attnkit
    (one ragged prefill), with eager's logits for the real tokens; a Llama and a sliding-window
    Mistral."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import padded_prompts, tiny_llama, tiny_mistral

    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    prompt, mask = padded_prompts(seed, [(0, 18), (6, 18), (0, 11), (3, 14)], 18)
    for name, model in models.items():
        logits, eager_logits, counted = forward_like_eager(model, prompt, mask)
        assert counted.calls == 2 and not counted.fallbacks, (name, counted.fallbacks)
        real = mask.bool()
        torch.testing.assert_close(logits[real], eager_logits[real], rtol=1e-4, atol=1e-4)


def packed_logits(model, ids, positions, mask=None):
    """{impl: logits} of one forward pass without a cache over a packed batch (position_ids
    restarting with each document; mask: a 4D mask given instead of transformers' own), with
    eager and with attnkit; and attnkit's CountAttnkitCalls."""
    from llama_support import CountAttnkitCalls

    logits = {}
    for impl in ("eager", "attnkit"):
        model.set_attn_implementation(impl)
        with torch.no_grad(), warnings.catch_warnings(), CountAttnkitCalls() as counted:
            warnings.simplefilter("ignore")
            logits[impl] = model(ids, position_ids=positions, attention_mask=mask, use_cache=False).logits
    return logits, counted


def test_transformers_backend_runs_packed_batches_natively(seed):
    """Packed batches (several documents in one row, position_ids restarting at 0 with each, as
    DataCollatorWithFlattening makes them; transformers masks them block-diagonal causal without
    a cache): every call runs on attnkit as one ragged prefill whose sequences are the documents,
    with the logits of every token as eager's on the same packed input and as eager's with each
    document run alone, unpacked. Rows of documents of 7, 1 and 12 tokens, of 20, and of 1, 9, 9
    and 1; a Llama and a sliding-window Mistral (window 8, shorter than some documents)."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend  # noqa: F401
    from llama_support import documents_one_by_one, packed_batch, tiny_llama, tiny_mistral

    rows = [[7, 1, 12], [20], [1, 9, 9, 1]]
    ids, positions = packed_batch(seed, rows)
    models = {"llama": tiny_llama(torch.float32, "cpu", seed), "mistral": tiny_mistral(seed)}
    for name, model in models.items():
        logits, counted = packed_logits(model, ids, positions)
        assert counted.calls == 2 and not counted.fallbacks, (name, counted.fallbacks)
        torch.testing.assert_close(logits["attnkit"], logits["eager"], rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{name}, against eager packed: {m}")
        model.set_attn_implementation("eager")
        torch.testing.assert_close(logits["attnkit"], documents_one_by_one(model, ids, rows), rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{name}, against each document alone: {m}")


def test_transformers_backend_falls_back_on_a_packed_mask_with_a_corrupted_block(seed):
    """A packed batch's block-diagonal causal mask given as a 4D bool mask (checked in the call,
    not by the mask builder) runs on attnkit with the packed input's logits; with one row of a
    document that also sees the previous document's last key it is no causal window over
    documents, so every layer falls back to sdpa with that mask, counted with the reason, and
    gives sdpa's logits exactly."""
    pytest.importorskip("transformers")
    import attnkit.transformers_backend as backend
    from llama_support import packed_batch, tiny_llama

    model = tiny_llama(torch.float32, "cpu", seed)
    ids, positions = packed_batch(seed, [[7, 1, 12], [20]])
    document = (torch.diff(positions, dim=-1, prepend=positions[:, :1] - 1) != 1).cumsum(-1)
    causal = torch.ones(20, 20, dtype=torch.bool).tril()
    mask = (causal & (document[:, :, None] == document[:, None, :]))[:, None]
    packed, _ = packed_logits(model, ids, positions)
    logits, counted = packed_logits(model, ids, positions, mask.clone())
    assert counted.calls == 2 and not counted.fallbacks, counted.fallbacks
    torch.testing.assert_close(logits["attnkit"], packed["eager"], rtol=1e-4, atol=1e-4)

    mask[0, 0, 10, 7] = True  # row 10 (document 3's third token) sees document 2's token too
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        expected = model(ids, position_ids=positions, attention_mask=mask.clone(), use_cache=False).logits
    model.set_attn_implementation("attnkit")
    backend._warned.clear()
    before = dict(backend.fallback_counts)
    with torch.no_grad(), pytest.warns(UserWarning, match="explicit attention mask.*another document"):
        got = model(ids, position_ids=positions, attention_mask=mask.clone(), use_cache=False).logits
    counted = {k: v - before.get(k, 0) for k, v in backend.fallback_counts.items() if v != before.get(k, 0)}
    assert list(counted.values()) == [model.config.num_hidden_layers], counted
    assert "another document" in next(iter(counted))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_transformers_backend_falls_back_on_a_mask_with_a_hole(seed):
    pytest.importorskip("transformers")
    import attnkit.transformers_backend as backend
    from llama_support import tiny_llama

    model = tiny_llama(torch.float32, "cpu", seed)
    prompt = torch.randint(0, 1000, (2, 9), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(prompt)
    mask[1, -3:] = 0  # right padding, which attnkit runs,
    mask[1, 2] = 0  # and a hole: two runs of real keys, a real mask, which attnkit leaves to sdpa
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        expected = model(prompt, attention_mask=mask).logits
    model.set_attn_implementation("attnkit")
    backend._warned.clear()
    before = sum(backend.fallback_counts.values())
    with torch.no_grad(), pytest.warns(UserWarning, match="explicit attention mask"):
        got = model(prompt, attention_mask=mask).logits
    assert sum(backend.fallback_counts.values()) - before == model.config.num_hidden_layers
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
