"""attnkit as a Hugging Face transformers attention backend.

    import attnkit.transformers_backend  # registers "attnkit"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="attnkit")

Importing this module registers the name "attnkit" in transformers' AttentionInterface (the
attention call) and AttentionMaskInterface (sdpa's mask builder, which marks the masks that are
a causal window: the keys a query sees end at its own position, optionally within a sliding
window, and lie within its sequence's real keys where the batch is padded, on the left as
generation pads it with padding_side="left", on the right as a tokenizer's default padding leaves
a batch scored or embedded without a cache, and within its document's where the batch is packed).
Prefill, decode, chunked prefill and speculative verification over a cache (dynamic or static),
sliding-window layers included, then run on attnkit's CPU or CUDA kernels on torch's current
stream; grouped-query attention runs without repeating K and V, and the output is written
straight into the [batch, seq, heads, head_dim] layout the model reads.

Padding and packing: a left-padded decode step passes each sequence's first real key to the
decode kernel (key_starts); any other padded call (the prefill of a left- or right-padded batch, a
chunk over a left-padded cache) gathers the real query rows and keys of every sequence into one
ragged attnkit prefill (cu_seqlens, as transformers' flash-attention integration unpads) and
scatters the rows back, the padding rows as zeros. A packed batch (several documents in one row,
position_ids restarting at 0 as DataCollatorWithFlattening makes them) runs the same way, every
document of every row one ragged sequence; transformers builds its block-diagonal causal mask only
without a cache (use_cache=False: with a cache it masks the row as one sequence, for every
attention implementation). The gather indices are made once per forward, with the mask.

Anything attnkit does not model falls back to torch's sdpa for that call, with one warning per
reason: any other mask (a hole in a sequence's real keys, a row that sees another document's
keys), attention dropout in training, autograd (attnkit has no backward), position bias, dtypes
other than float32/float16/bfloat16, and any mask met while torch.compile traces (it cannot be
checked there). Attention sinks (gpt-oss's `s_aux`) run on attnkit; where a call with sinks falls
back, it runs the model's eager arithmetic (torch's sdpa would drop them).
"""
from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ._sdpa import ragged_prefill, sdpa

NAME = "attnkit"

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_warned: set[str] = set()
fallback_counts: dict[str, int] = {}  # reason -> calls that ran sdpa instead (for tests and curiosity)
attnkit_calls = 0  # calls that ran on attnkit


def _fallback_reason(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                     dropout: float, kwargs: dict) -> Optional[str]:
    if attention_mask is not None:
        return ("an explicit attention mask that is not a causal window over one run of real keys per sequence "
                "or per packed document (a hole in the mask, a row that sees another document's keys)")
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
    # A mask that is a causal window over its first `keys` columns (padded or not) is no mask to attnkit.
    causal_window = _causal_window(attention_mask) if attention_mask is not None else None
    if causal_window is not None and causal_window.keys > key.shape[2]:
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
    softcap = kwargs.get("softcap") or 0.0
    sinks = _sinks(kwargs)
    key_starts = None
    if causal_window is not None:
        # Bottom-right causal over the mask's first `keys` columns (the rest are unwritten slots).
        keys, window, key_starts = causal_window.keys, causal_window.window, causal_window.starts
        key, value = key[:, :, :keys], value[:, :, :keys]
        causal = q_len > 1
        if causal_window.ragged is not None:  # padding or packing: every sequence's (document's) real rows and keys
            out = _attend_ragged(query, key, value, causal_window.ragged, scaling, int(window), float(softcap), sinks)
            attnkit_calls += 1
            return out, None
    else:
        causal = q_len > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
        if causal and key.shape[2] > q_len:
            # With no mask the model means sdpa's top-left causal mask: a prefill into an empty static
            # cache whose slots past q_len are not written yet. Those keys are cut, as sdpa does.
            key = key[:, :, :q_len]
            value = value[:, :, :q_len]
        window = kwargs.get("sliding_window") or 0
    out = torch.empty((batch, q_len, heads, head_dim), dtype=query.dtype, device=query.device)
    sdpa(query, key, value, causal=bool(causal), scale=scaling, window=int(window), softcap=float(softcap),
         out=out.transpose(1, 2), sinks=sinks, key_starts=key_starts)
    attnkit_calls += 1
    return out, None


def _attend_ragged(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, ragged: "RaggedRows",
                   scaling: Optional[float], window: int, softcap: float,
                   sinks: Optional[torch.Tensor]) -> torch.Tensor:
    """A padded or packed batch's call as one ragged attnkit prefill: the real query rows and keys
    of every sequence (every document, where packed) gathered (one index each for q, k, v),
    attended bottom-right causal per ragged sequence, and scattered back into [batch, q_len,
    heads, head_dim]; the padding rows are zeros."""
    batch, heads, q_len, head_dim = query.shape
    q = query[ragged.q_batch, :, ragged.q_row]  # [total_q, heads, head_dim]
    k = key[ragged.k_batch, :, ragged.k_column]  # [total_k, kv_heads, head_dim]
    v = value[ragged.k_batch, :, ragged.k_column]
    packed = torch.empty_like(q)
    ragged_prefill(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
                   ragged.cu_seqlens_q, ragged.cu_seqlens_k, max_q_len=ragged.max_q_len,
                   max_kv_len=ragged.max_kv_len, causal=True, scale=scaling, window=window, softcap=softcap,
                   out=packed.transpose(0, 1).unsqueeze(0), sinks=sinks)
    out = query.new_zeros((batch, q_len, heads, head_dim))
    out.view(batch * q_len, heads, head_dim).index_copy_(0, ragged.q_flat, packed)
    return out


_CAUSAL_WINDOW = "_attnkit_causal_window"  # set by attnkit_mask on the masks it recognised


class RaggedRows:
    """Where the real query rows and keys of a padded or packed batch go in attnkit.prefill's
    ragged layout (transformers' flash-attention `_upad_input`), made once per mask from the real
    keys [starts[i], ends[i]) of each ragged sequence i (int64 [n] on the CPU): a padded
    sequence's real keys, or one document of a packed row of the batch; sequence[i] is the batch
    row it lies in (default: i). Those keys, and the query rows at those positions (row r sits at
    keys - q_len + r). A ragged sequence's real rows end at its last real key, so the ragged
    prefill's bottom-right causal mask is the mask's. q_batch / q_row (int64 [total_q]) pick query
    rows, k_batch / k_column (int64 [total_k]) keys, q_flat = q_batch * q_len + q_row puts the rows
    back into a [batch * q_len] output; cu_seqlens_q / cu_seqlens_k int32 [n + 1]; max_q_len /
    max_kv_len bound the plan."""

    def __init__(self, starts: torch.Tensor, ends: torch.Tensor, q_len: int, keys: int, device: torch.device,
                 sequence: Optional[torch.Tensor] = None):
        first_position = keys - q_len  # of row 0
        row_starts, row_ends = ((bound - first_position).clamp(0, q_len) for bound in (starts, ends))
        q_lens, kv_lens = row_ends - row_starts, ends - starts
        self.max_q_len, self.max_kv_len = int(q_lens.max()), int(kv_lens.max())
        sequence = torch.arange(len(starts)) if sequence is None else sequence

        def packed(lens: torch.Tensor, firsts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """(batch row, index within it) of every packed entry, and cu_seqlens."""
            cu = torch.cat([lens.new_zeros(1), lens.cumsum(0)])
            which = torch.repeat_interleave(torch.arange(len(lens)), lens)
            return sequence[which], torch.arange(int(cu[-1])) - cu[which] + firsts[which], cu.to(torch.int32)

        q_batch, q_row, cu_q = packed(q_lens, row_starts)
        k_batch, k_column, cu_k = packed(kv_lens, starts)
        self.q_batch, self.q_row, self.k_batch, self.k_column, self.cu_seqlens_q, self.cu_seqlens_k = (
            t.to(device) for t in (q_batch, q_row, k_batch, k_column, cu_q, cu_k))
        self.q_flat = (q_batch * q_len + q_row).to(device)


def _documents(starts: torch.Tensor, ends: torch.Tensor, begins: torch.Tensor, keys: int, q_len: int
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The documents of a packed batch as (starts, ends, sequence), int64 [n] on the CPU, in batch
    order: each sequence's real keys [starts[b], ends[b]) cut at the positions where begins [batch,
    q_len] (bool) marks a row that opens a document."""
    batch_of, row = begins.nonzero(as_tuple=True)
    sequence = torch.cat([torch.arange(len(starts)), batch_of])
    first = torch.cat([starts, row + (keys - q_len)])
    order = torch.argsort(sequence * (keys + 1) + first)  # each sequence's documents in key order
    sequence, first = sequence[order], first[order]
    last = torch.cat([first[1:], first.new_zeros(1)])
    same_sequence = torch.cat([sequence[1:] == sequence[:-1], sequence.new_zeros(1, dtype=torch.bool)])
    return first, torch.where(same_sequence, last, ends[sequence]), sequence


class CausalMask(NamedTuple):
    """What causal_window_of read from a mask: keys (the columns in use), window (0: none), each
    sequence's real keys [starts[b], ends[b]) as int32 [batch] on the mask's device (starts None
    without left padding, ends None without right padding), and ragged: where a padded or packed
    call's real rows and keys go, one ragged sequence per document (None where there is neither
    padding nor packing, or for a left-padded decode step, which passes starts to the decode kernel
    as key_starts)."""
    keys: int
    window: int
    starts: Optional[torch.Tensor] = None
    ends: Optional[torch.Tensor] = None
    ragged: Optional[RaggedRows] = None


def causal_window_of(mask: torch.Tensor) -> Optional[CausalMask]:
    """CausalMask(keys, window, starts, ends, ragged) when mask [batch, 1, q_len, kv_len] (bool,
    True = visible) is exactly, in every real row, the mask of attnkit's bottom-right causal window
    over its first `keys` columns, each sequence within its real keys [starts[b], ends[b]), cut
    into documents where it is packed: row r of sequence b sees column j iff doc <= j <= pos and
    (window > 0) j > pos - window, with pos = keys - q_len + r and doc the start of the row's
    document (starts[b], or the last row at or before it that opens one, seeing only its own key).
    Else None. This covers chunked prefill and verification over cached keys, decode, a static
    cache's unwritten slots, padded batches, which transformers masks by hiding the padding keys:
    on the left (generation's) and on the right (a forward pass over a tokenizer's default
    padding), and packed batches (several documents in one row, position_ids restarting at 0: the
    block-diagonal causal mask transformers builds from them without a cache). A real row is one
    whose own key some row sees; the others, the padding tokens', are not checked (transformers
    lets a row of right padding see its sequence's real keys within its window) and attnkit writes
    them as zeros. The window is the model's where a real row shows it; where padding or the
    documents' starts hide every key it would hide, the window reported may be any that hides no
    visible key (the same mask)."""
    if mask.dim() != 4 or mask.dtype != torch.bool or mask.shape[1] != 1:
        return None
    batch, _, q_len, kv_len = mask.shape
    if batch == 0 or q_len == 0 or kv_len == 0:
        return None
    # Each row's visible columns as a run [lo, hi) of n columns (a run iff n == hi - lo): byte
    # argmaxes (the first maximum) and a sum, [batch, q_len] each; everything after works on these.
    visible = mask[:, 0].view(torch.uint8)  # argmax takes no bool; the same bytes
    # Counted in int16 where it holds every count: the widening sum to int32 took two thirds of the
    # check on CPU masks (b4 x 2048 x 2048: ~20 of ~30 ms), int16 ~10 ms.
    n = visible.sum(-1, dtype=torch.int16 if kv_len < 32768 else torch.int32).to(torch.int32)
    lo = torch.where(n > 0, visible.argmax(-1), kv_len)
    hi = torch.where(n > 0, kv_len - visible.flip(-1).argmax(-1), 0)
    row_index = torch.arange(q_len, device=mask.device)
    # No row sees past its own position and a real row sees it: row 0's position.
    first_position = (hi - 1 - row_index).amax()
    keys = first_position + q_len
    positions = row_index + first_position
    # Each sequence's real keys: the keys its rows see, [earliest, latest).
    earliest, latest = lo.amin(-1), hi.amax(-1)
    ends = torch.where(latest > 0, latest.clamp(max=keys), keys)
    # Documents: a row that sees only its own key opens one (in a packed row, each document's
    # first); segment: the last such row at or before each row (0 before the first).
    sees_own = hi == positions + 1
    begins = sees_own & (lo == positions)
    segment = torch.where(begins, positions, 0).cummax(-1).values
    # The window: the widest row cut after its segment's start (by the window, or by left padding
    # in the cache), unless a row that starts at its segment's start, so is not cut, is wider.
    width = hi - lo
    cut = torch.where(sees_own & (lo > segment), width, 0).amax()
    uncut = torch.where(sees_own & (lo == segment), width, 0).amax()
    window = torch.where(cut >= uncut, cut, 0)
    window_start = torch.where(window > 0, positions - window + 1, 0)  # of each row
    # A sequence's real keys start at the first key it shows, unless the window hides the keys before.
    starts = torch.where(earliest > window_start[0], earliest.clamp(max=keys), 0)
    # A real row (its position one of the real keys) sees exactly its causal window's keys of its
    # document; the others are padding tokens' rows, not checked.
    real = (positions >= starts[:, None]) & (positions < ends[:, None])
    document_start = torch.maximum(segment, starts[:, None])
    exact = (lo == torch.maximum(document_start, window_start)) & sees_own & (n == width)
    recognised = (exact | ~real).all() & (first_position >= 0) & (keys <= kv_len)
    inner = begins & (positions > starts[:, None])  # the documents after each sequence's first
    # The one copy to the host.
    stats = torch.cat([torch.stack([starts, ends, *(x.expand(batch) for x in (first_position, window, recognised))])
                       .flatten(), inner.flatten()]).cpu()
    host_starts, host_ends = stats[:batch], stats[batch:2 * batch]
    first_position, window, recognised = stats[2 * batch:5 * batch:batch].tolist()
    if not recognised:
        return None
    keys = first_position + q_len
    host_inner = stats[5 * batch:].view(batch, q_len).bool()
    left_padded, right_padded = bool(host_starts.any()), bool((host_ends < keys).any())
    packed = bool(host_inner.any())
    if not (left_padded or right_padded or packed):
        return CausalMask(keys, window)
    bounds = torch.stack([starts, ends]).to(torch.int32)
    # A left-padded decode step runs with key_starts; any other padded or packed call as a ragged
    # prefill, one ragged sequence per document.
    ragged = None
    if packed:
        doc_starts, doc_ends, sequence = _documents(host_starts, host_ends, host_inner, keys, q_len)
        ragged = RaggedRows(doc_starts, doc_ends, q_len, keys, mask.device, sequence)
    elif q_len > 1 or right_padded:
        ragged = RaggedRows(host_starts, host_ends, q_len, keys, mask.device)
    return CausalMask(keys, window, bounds[0] if left_padded else None, bounds[1] if right_padded else None, ragged)


def attnkit_mask(*args: Any, **kwargs: Any) -> Optional[torch.Tensor]:
    """sdpa's mask builder, which also marks the mask with what causal_window_of found (its keys,
    window, padding and documents), or with False: the attention call then runs attnkit's causal
    kernels over those keys instead of falling back (chunked prefill and speculative verification
    over a cache, a static cache's decode steps, the sliding layers of Mistral, Qwen2, Gemma and
    gpt-oss, batches padded on the left or the right, packed batches). A fallback still gets the
    mask itself. Not while compiling (no Python attributes on traced tensors)."""
    mask = sdpa_mask(*args, **kwargs)
    if mask is not None and not torch.compiler.is_compiling():
        setattr(mask, _CAUSAL_WINDOW, causal_window_of(mask) or False)  # one check for all the layers
    return mask


def _causal_window(mask: torch.Tensor) -> Optional[CausalMask]:
    """What attnkit_mask found on the mask, or found now (and kept on it for the other layers) for a
    mask that did not come from it (generate's static-cache decode builds its own); None if it is
    not one."""
    found = getattr(mask, _CAUSAL_WINDOW, None)
    if found is None and not torch.compiler.is_compiling():
        found = causal_window_of(mask) or False
        try:
            setattr(mask, _CAUSAL_WINDOW, found)
        except (AttributeError, RuntimeError):
            pass
    return found or None


def register(name: str = NAME) -> None:
    """Register attnkit under `name` (done on import for "attnkit")."""
    AttentionInterface.register(name, attnkit_attention_forward)
    AttentionMaskInterface.register(name, attnkit_mask)


register()
