"""A randomly initialised small Llama-style model (no downloaded weights) generating greedily
with one attention implementation, then another, from the same weights."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Generation:
    tokens: torch.Tensor  # [batch, new_tokens]
    logits: torch.Tensor  # [new_tokens, batch, vocab], float32


def tiny_llama(dtype: torch.dtype, device: str, seed: int, head_dim: int = 64):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=512,
                      initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    return model.to(device).eval()


def generate(model, attn_implementation: str, prompt: torch.Tensor, new_tokens: int) -> Generation:
    model.set_attn_implementation(attn_implementation)
    assert model.config._attn_implementation == attn_implementation
    with torch.no_grad():
        result = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=False, output_logits=True,
                                return_dict_in_generate=True, pad_token_id=0)
    tokens = result.sequences[:, prompt.shape[1]:]
    return Generation(tokens=tokens.cpu(), logits=torch.stack(result.logits).float().cpu())


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def compare_generations(model, prompt: torch.Tensor, new_tokens: int, rel_l2_tolerance: float,
                        exact_tokens: bool) -> dict:
    """Generate with sdpa, then with attnkit, from the same weights and prompt. The logits of
    every step must agree within the tolerance over the steps both runs share a prefix.
    exact_tokens: every token equal. Otherwise (half precision) a first differing token must be
    a near tie in sdpa's own logits (its top two within the measured logit error of that step),
    and at least half of the tokens must come before it."""
    import attnkit.transformers_backend as backend

    reference = generate(model, "sdpa", prompt, new_tokens)
    calls_before = backend.attnkit_calls
    fallbacks_before = sum(backend.fallback_counts.values())
    mine = generate(model, "attnkit", prompt, new_tokens)
    attnkit_calls = backend.attnkit_calls - calls_before
    fallbacks = sum(backend.fallback_counts.values()) - fallbacks_before
    layers = model.config.num_hidden_layers
    assert attnkit_calls == layers * new_tokens, (
        f"attnkit ran {attnkit_calls} attention calls, expected {layers} layers x {new_tokens} steps "
        f"(fallbacks: {backend.fallback_counts})")
    assert fallbacks == 0, f"calls fell back to sdpa: {backend.fallback_counts}"

    same = (reference.tokens == mine.tokens).all(dim=0)  # per step, over the batch
    first_diff = int((~same).nonzero()[0]) if not bool(same.all()) else new_tokens
    shared = first_diff + 1 if first_diff < new_tokens else new_tokens  # the differing step's logits still compare
    err = rel_l2(mine.logits[:shared], reference.logits[:shared])
    assert err <= rel_l2_tolerance, f"logits rel-L2 {err:.3g} > {rel_l2_tolerance:g} over {shared} steps"
    if exact_tokens:
        assert first_diff == new_tokens, (f"tokens differ from step {first_diff}: "
                                          f"{reference.tokens[:, first_diff]} vs {mine.tokens[:, first_diff]}")
    elif first_diff < new_tokens:
        step = reference.logits[first_diff]
        top2 = step.topk(2, dim=-1).values
        gap = float((top2[:, 0] - top2[:, 1]).min())
        step_err = float((mine.logits[first_diff] - step).abs().max())
        assert gap <= 2 * step_err, (f"tokens differ at step {first_diff} although sdpa's top-2 gap {gap:.3g} is "
                                     f"above twice the logit error {step_err:.3g}")
        assert first_diff >= new_tokens // 2, f"tokens differ already at step {first_diff} of {new_tokens}"
    return {"first_diff": first_diff, "logits_rel_l2": err, "attnkit_calls": attnkit_calls}
