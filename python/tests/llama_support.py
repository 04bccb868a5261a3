"""A randomly initialised small Llama-style model (no downloaded weights) run with sdpa and
with attnkit from the same weights: greedy generation (float32: the same tokens, logits within
f32 tolerance) and teacher-forced decoding (half precision: no further from the float32 model
than torch's own sdpa in that precision)."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

NEW_TOKENS = 64


@dataclass
class Generation:
    tokens: torch.Tensor  # [batch, new_tokens]
    logits: torch.Tensor  # [new_tokens, batch, vocab], float32


def tiny_llama(dtype: torch.dtype, device: str, seed: int, head_dim: int = 64):
    """2 layers, hidden 256, 8 query heads over 2 KV heads (GQA 4), vocabulary 1000. head_dim 64
    (the q/k/v projections widen 256 -> 512) so the GPU runs its tensor-core prefill tiles."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=512,
                      initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    return model.to(device).eval()


def tiny_mistral(seed: int):
    """A sliding-window model: Mistral, 2 layers, hidden 128, 4 query heads over 2 KV heads,
    head_dim 32, window 8, vocabulary 1000, float32 on the CPU."""
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=8,
                        max_position_embeddings=256)
    torch.manual_seed(seed)
    return MistralForCausalLM(cfg).eval()


def packed_batch(seed: int, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A packed batch, as transformers' DataCollatorWithFlattening makes one (a row per list of
    document lengths, each row the same total): (input_ids, position_ids) [rows, total], the
    documents' tokens back to back and the positions restarting at 0 with each document."""
    g = torch.Generator().manual_seed(seed)
    total = sum(rows[0])
    assert all(sum(lengths) == total for lengths in rows), rows
    ids = torch.randint(1, 1000, (len(rows), total), generator=g)
    positions = torch.stack([torch.cat([torch.arange(n) for n in lengths]) for lengths in rows])
    return ids, positions


def documents_one_by_one(model, ids: torch.Tensor, rows: list[list[int]]) -> torch.Tensor:
    """The logits [rows, total, vocab] of a packed batch's documents each run alone, unpacked,
    through the model as it is set (no cache)."""
    logits = torch.empty((*ids.shape, model.config.vocab_size), dtype=torch.float32, device=ids.device)
    with torch.no_grad():
        for b, lengths in enumerate(rows):
            start = 0
            for n in lengths:
                logits[b, start:start + n] = model(ids[b:b + 1, start:start + n], use_cache=False).logits[0].float()
                start += n
    return logits


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


class CountAttnkitCalls:
    """Counts the attention calls attnkit ran and those that fell back to sdpa."""

    def __enter__(self):
        import attnkit.transformers_backend as backend

        self._backend = backend
        self._calls = backend.attnkit_calls
        self._fallbacks = dict(backend.fallback_counts)
        return self

    def __exit__(self, *exc):
        self.calls = self._backend.attnkit_calls - self._calls
        self.fallbacks = {k: v - self._fallbacks.get(k, 0) for k, v in self._backend.fallback_counts.items()
                          if v != self._fallbacks.get(k, 0)}
        return False


def generate(model, attn_implementation: str, prompt: torch.Tensor, new_tokens: int = NEW_TOKENS) -> Generation:
    model.set_attn_implementation(attn_implementation)
    assert model.config._attn_implementation == attn_implementation
    with torch.no_grad():
        result = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=False, output_logits=True,
                                return_dict_in_generate=True, pad_token_id=0)
    tokens = result.sequences[:, prompt.shape[1]:]
    return Generation(tokens=tokens.cpu(), logits=torch.stack(result.logits).float().cpu())


def teacher_forced_logits(model, attn_implementation: str, sequence: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Prefill the prompt, then decode the rest of `sequence` one given token at a time through
    the KV cache; the logits of each step [steps, batch, vocab] in float32."""
    model.set_attn_implementation(attn_implementation)
    with torch.no_grad():
        out = model(sequence[:, :prompt_len], use_cache=True)
        cache = out.past_key_values
        logits = [out.logits[:, -1]]
        for t in range(prompt_len, sequence.shape[1] - 1):
            out = model(sequence[:, t:t + 1], past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1])
    return torch.stack(logits).float().cpu()


def check_greedy_generation(model, prompt: torch.Tensor, rel_l2_tolerance: float) -> dict:
    """float32: attnkit generates exactly sdpa's greedy tokens, every attention call on attnkit,
    and the logits of every step agree within rel_l2_tolerance."""
    reference = generate(model, "sdpa", prompt)
    with CountAttnkitCalls() as count:
        mine = generate(model, "attnkit", prompt)
    layers = model.config.num_hidden_layers
    assert count.fallbacks == {}, f"calls fell back to sdpa: {count.fallbacks}"
    assert count.calls == layers * NEW_TOKENS, f"attnkit ran {count.calls} calls, expected {layers} x {NEW_TOKENS}"
    same = (reference.tokens == mine.tokens).all(dim=0)
    if not bool(same.all()):
        step = int((~same).nonzero()[0])
        raise AssertionError(f"tokens differ from step {step}: {reference.tokens[:, step].tolist()} (sdpa) vs "
                             f"{mine.tokens[:, step].tolist()} (attnkit); logits rel-L2 up to there "
                             f"{rel_l2(mine.logits[:step + 1], reference.logits[:step + 1]):.3g}")
    err = rel_l2(mine.logits, reference.logits)
    assert err <= rel_l2_tolerance, f"logits rel-L2 {err:.3g} > {rel_l2_tolerance:g}"
    return {"tokens": NEW_TOKENS, "logits_rel_l2_vs_sdpa": err, "attnkit_calls": count.calls}


def check_teacher_forced(model, prompt: torch.Tensor, max_ratio: float = 1.25) -> dict:
    """Half precision, where greedy tokens of two correct implementations part ways at the first
    near tie: decode sdpa's greedy continuation teacher-forced with both implementations and
    compare each with the same weights in float32 (sdpa). attnkit's logits may be no further
    from the float32 model than max_ratio times sdpa's own distance."""
    reference = generate(model, "sdpa", prompt)
    sequence = torch.cat([prompt, reference.tokens.to(prompt.device)], dim=1)
    prompt_len = prompt.shape[1]
    golden = teacher_forced_logits(copy.deepcopy(model).float(), "sdpa", sequence, prompt_len)
    peer = teacher_forced_logits(model, "sdpa", sequence, prompt_len)
    with CountAttnkitCalls() as count:
        mine = teacher_forced_logits(model, "attnkit", sequence, prompt_len)
    layers = model.config.num_hidden_layers
    assert count.fallbacks == {}, f"calls fell back to sdpa: {count.fallbacks}"
    assert count.calls == layers * NEW_TOKENS, f"attnkit ran {count.calls} calls, expected {layers} x {NEW_TOKENS}"
    peer_err, err = rel_l2(peer, golden), rel_l2(mine, golden)
    assert err <= max_ratio * peer_err, (f"attnkit's logits are {err:.3g} (rel-L2) from the float32 model, sdpa's "
                                         f"{peer_err:.3g}: more than {max_ratio}x")
    return {"steps": NEW_TOKENS, "attnkit_vs_f32": err, "sdpa_vs_f32": peer_err,
            "attnkit_vs_sdpa": rel_l2(mine, peer), "attnkit_calls": count.calls}


def padded_prompts(seed, real, width):
    """A batch of prompts of `width` tokens, sequence b real on [start, end) = real[b] and padded
    elsewhere with token 0 (on the left as a tokenizer with padding_side="left" does, on the right
    as its default does), and its attention mask."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 1000, (len(real), width), generator=g)
    mask = torch.zeros_like(prompt)
    for b, (start, end) in enumerate(real):
        mask[b, start:end] = 1
    return prompt * mask, mask


def left_padded_prompts(seed, lengths, width):
    """padded_prompts with sequence b's lengths[b] real tokens last."""
    return padded_prompts(seed, [(width - n, width) for n in lengths], width)
