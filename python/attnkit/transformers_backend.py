"""attnkit as a Hugging Face transformers attention backend.

    import attnkit.transformers_backend  # registers "attnkit"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit")

Importing this module registers the name "attnkit" in transformers' AttentionInterface (the
attention call) and AttentionMaskInterface (sdpa's mask builder, which marks the masks that are
only a causal window: no padding, the keys a query sees end at its own position, optionally
within a sliding window). Prefill, decode, chunked prefill and speculative verification over a
cache (dynamic or static), sliding-window layers included, then run on attnkit's CPU or CUDA
kernels on torch's current stream; grouped-query attention runs without repeating K and V, and
the output is written straight into the [batch, seq, heads, head_dim] layout the model reads.

Anything attnkit does not model falls back to torch's sdpa for that call, with one warning per
reason: any other mask (padding, packing), attention dropout in training, autograd (attnkit has
no backward), position bias, and dtypes other than float32/float16/bfloat16. Attention sinks
(gpt-oss's `s_aux`) run on attnkit; where a call with sinks falls back, it runs the model's eager
arithmetic (torch's sdpa would drop them).
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ._sdpa import sdpa

NAME = "attnkit"

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_warned: set[str] = set()
fallback_counts: dict[str, int] = {}  # reason -> calls that ran sdpa instead (for tests and curiosity)
attnkit_calls = 0  # calls that ran on attnkit


def _fallback_reason(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                     dropout: float, kwargs: dict) -> Optional[str]:
    if attention_mask is not None:
        return "an explicit attention mask that is not only a causal window (padding, packing)"
    if dropout:
        return "attention dropout"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "autograd (attnkit kernels have no backward)"
    if kwargs.get("position_bias") is not None:
        return "a position bias"
    if query.dtype not in _SUPPORTED_DTYPES or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"dtype {query.dtype} / {key.dtype} (attnkit takes one of float32, float16, bfloat16)"
    if query.device != key.device or query.device.type not in ("cpu", "cuda"):
        return f"device {query.device}"
    return None


def _sinks(kwargs: dict) -> Optional[torch.Tensor]:
    """gpt-oss's attention sinks (passed as s_aux), one logit per query head, or None."""
    return kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")


def _attention_with_sinks(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                          dropout: float, scaling: Optional[float], sinks: torch.Tensor) -> torch.Tensor:
    """The fallback where sinks meet something attnkit leaves to torch (a mask, autograd): the
    model's eager arithmetic (scores, the mask, the sink's logit as one more column of the softmax,
    that column dropped) in torch. Returns [batch, q_len, heads, head_dim]."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = (query @ key.transpose(-1, -2)) * scale
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    column = sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    probs = torch.softmax(torch.cat([scores, column], dim=-1).float(), dim=-1)[..., :-1].to(value.dtype)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=dropout > 0)
    return (probs @ value).transpose(1, 2).contiguous()


def attnkit_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                              value: torch.Tensor, attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                              scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                              **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [batch, heads, q_len, head_dim], key and value
    [batch, kv_heads, kv_len, head_dim]; returns ([batch, q_len, heads, head_dim], None)."""
    global attnkit_calls
    # A mask that is only a causal window over its first `keys` columns is no mask to attnkit.
    causal_window = _causal_window(attention_mask) if attention_mask is not None else None
    if causal_window is not None and causal_window[0] > key.shape[2]:
        causal_window = None  # wider than the keys the layer passed: leave it to torch
    reason = _fallback_reason(query, key, value, attention_mask if causal_window is None else None, dropout, kwargs)
    if reason is not None:
        fallback_counts[reason] = fallback_counts.get(reason, 0) + 1
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(f"attnkit: {reason} is not handled by attnkit; those calls run torch sdpa", stacklevel=2)
        sinks = _sinks(kwargs)
        if sinks is not None:  # torch's sdpa would drop them
            return _attention_with_sinks(query, key, value, attention_mask, dropout, scaling, sinks), None
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)

    batch, heads, q_len, head_dim = query.shape
    if causal_window is not None:
        # Bottom-right causal over the mask's first `keys` columns (the rest are unwritten slots).
        keys, window = causal_window
        key, value = key[:, :, :keys], value[:, :, :keys]
        causal = q_len > 1
    else:
        causal = q_len > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
        if causal and key.shape[2] > q_len:
            # With no mask the model means sdpa's top-left causal mask: a prefill into an empty static
            # cache whose slots past q_len are not written yet. Those keys are cut, as sdpa does.
            key = key[:, :, :q_len]
            value = value[:, :, :q_len]
        window = kwargs.get("sliding_window") or 0
    softcap = kwargs.get("softcap") or 0.0
    sinks = _sinks(kwargs)
    out = torch.empty((batch, q_len, heads, head_dim), dtype=query.dtype, device=query.device)
    sdpa(query, key, value, causal=bool(causal), scale=scaling, window=int(window), softcap=float(softcap),
         out=out.transpose(1, 2), sinks=sinks)
    attnkit_calls += 1
    return out, None


_CAUSAL_WINDOW = "_attnkit_causal_window"  # set by attnkit_mask on the masks it recognised


def causal_window_of(mask: torch.Tensor) -> Optional[tuple[int, int]]:
    """(keys, window) when mask [batch, 1, q_len, kv_len] (bool, True = visible) is exactly the
    mask of attnkit's bottom-right causal window over its first `keys` columns: row r sees the
    columns (pos - window, pos] with pos = keys - q_len + r (window 0: all of [0, pos]) and no
    column from `keys` on, in every batch row. Else None. This covers chunked prefill and
    verification over cached keys, decode, and a static cache's unwritten slots."""
    if mask.dim() != 4 or mask.dtype != torch.bool or mask.shape[1] != 1:
        return None
    q_len, kv_len = mask.shape[-2], mask.shape[-1]
    last_row = mask[0, 0, -1]
    visible = last_row.nonzero()
    if visible.numel() == 0:
        return None
    keys = int(visible[-1]) + 1
    count = int(last_row.sum())
    if keys < q_len:
        return None
    window = 0 if count == keys else count
    pos = torch.arange(q_len, device=mask.device)[:, None] + (keys - q_len)
    columns = torch.arange(kv_len, device=mask.device)[None, :]
    expected = columns <= pos
    if window:
        expected &= columns > pos - window
    return (keys, window) if bool((mask == expected).all()) else None


def attnkit_mask(*args: Any, **kwargs: Any) -> Optional[torch.Tensor]:
    """sdpa's mask builder, which also marks the mask with its (keys, window) when it is only a causal
    window (no padding), or with False: the attention call then runs attnkit's causal kernels over those keys
    instead of falling back (chunked prefill and speculative verification over a cache, a static
    cache's decode steps, the sliding layers of Mistral, Qwen2, Gemma and gpt-oss). A fallback
    still gets the mask itself. Not while compiling (no Python attributes on traced tensors)."""
    mask = sdpa_mask(*args, **kwargs)
    if mask is not None and not torch.compiler.is_compiling():
        setattr(mask, _CAUSAL_WINDOW, causal_window_of(mask) or False)  # one check for all the layers
    return mask


def _causal_window(mask: torch.Tensor) -> Optional[tuple[int, int]]:
    """The mask's (keys, window) as attnkit_mask found it, or found now for a mask that did not
    come from it (generate's static-cache decode builds its own); None if it is not one."""
    found = getattr(mask, _CAUSAL_WINDOW, None)
    if found is None and not torch.compiler.is_compiling():
        found = causal_window_of(mask)
    return found or None


def register(name: str = NAME) -> None:
    """Register attnkit under `name` (done on import for "attnkit")."""
    AttentionInterface.register(name, attnkit_attention_forward)
    AttentionMaskInterface.register(name, attnkit_mask)


register()
