// The tensors of one call, as views. Optional tensors are left empty (data == nullptr).
#pragma once
#include "attnkit/tensor.hpp"

namespace attnkit {

// Per-tensor dequantization scales of an e4m3 (fp8) KV cache: the real value of a stored key
// element x is x * k, of a value element x * v (a quantizer that divided by s to fit e4m3's +-448
// passes s; append divides by them). They must be finite and > 0, and stay 1 for f32/f16/bf16
// caches (validation rejects anything else before a write).
struct KvScales {
  float k = 1.0f, v = 1.0f;
};

struct DecodeTensors {
  TensorView q;        // [batch, num_heads, head_dim], q_dtype
  TensorView k_cache;  // [batch, kv_heads, max_seq, head_dim], kv_dtype
  TensorView v_cache;  // same shape and dtype as k_cache
  TensorView lengths;  // i32 [batch]: valid keys per sequence, 0..kv_len of the plan
  TensorView out;      // [batch, num_heads, head_dim], out_dtype
  TensorView lse;      // optional f32 [batch, num_heads]: natural-log sum-exp of the scaled scores
  TensorView sinks = {};  // optional f32 [num_heads]: attention-sink logits (below)
  KvScales kv_scales = {};  // e4m3 caches only (above)
  TensorView key_starts = {};  // optional i32 [batch]: left padding (below)
};

// Left-padded caches (FlashAttention's cache_leftpad; what a batch padded on the left, as Hugging
// Face generation pads it, leaves in a cache): key_starts[b] is sequence b's first real key, so its
// query sees keys [key_starts[b], lengths[b]) (within the window, which still counts back from the
// query). A start at or past the length leaves no key: the row writes zeros and LSE -inf (or its
// sink). Values 0..kv_len of the plan; on the device, where they are not checked before the launch,
// they are clamped to [0, length]. Lives where the call runs, like lengths.

// Attention sinks (gpt-oss; FlashAttention's "learnable sink"): sinks[h] is one more logit in the
// softmax of every row of query head h, a key whose value is zero. So a row's output is
// sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sinks[h]}) and its LSE log(sum_j e^{s_j} + e^{sinks[h]}),
// which keeps (out, lse) a state merge_states can combine; a row with no visible key writes zeros
// and LSE sinks[h]. Values are finite or -inf (no sink for that head); the tensor lives where the
// call runs, contiguous. Decode, the fused step, prefill, paged decode and extend take them.

// Per-tensor scales of e4m3 (fp8) prefill inputs: the real value of a stored element x is
// x * scale (the dequantization scale; a quantizer that divided by s to fit e4m3's +-448 passes s).
// They must be finite and > 0, and stay 1 for f32/f16/bf16 inputs (validate_prefill rejects
// anything else before a write).
struct Fp8Scales {
  float q = 1.0f, k = 1.0f, v = 1.0f;
};

struct PrefillTensors {
  TensorView q;    // [batch, num_heads, q_len, head_dim], dtype
  TensorView k;    // [batch, kv_heads, kv_len, head_dim], dtype
  TensorView v;    // same as k
  TensorView out;  // [batch, num_heads, q_len, head_dim], out_dtype
  TensorView lse;  // optional f32 [batch, num_heads, q_len]
  // Ragged batches (optional, both or neither): i32 [batch + 1] prefix offsets. Then q, out and
  // lse are [1, num_heads, total_q, ...] and k, v [1, kv_heads, total_k, head_dim]; sequence b owns
  // rows cu_seqlens_q[b]..cu_seqlens_q[b+1] and keys cu_seqlens_k[b]..cu_seqlens_k[b+1], and the
  // problem's q_len / kv_len are the longest sequence's (planning bounds). Causal masks are
  // bottom-right aligned per sequence; empty sequences are allowed.
  TensorView cu_seqlens_q;
  TensorView cu_seqlens_k;
  // e4m3 inputs only: q, k and v hold stored values x whose real values are x * scales.{q,k,v}.
  // Scores are scale * (q_scale * k_scale) * (x_q . x_k), outputs v_scale * sum p x_v.
  Fp8Scales scales;
  TensorView sinks = {};  // optional f32 [num_heads]: attention-sink logits (above)
};

// Writes one new token's K and/or V per sequence into the cache at positions[b]. An e4m3 cache
// takes its new rows in f32, f16 or bf16 and stores e4m3(x / kv_scales.k) (and .v): round to
// nearest even, saturating at +-448, as float_to_e4m3_bits; other caches take the cache dtype and
// store the bytes as given.
struct AppendTensors {
  TensorView k_new;      // optional [batch, kv_heads, head_dim], cache dtype (f32/f16/bf16 for e4m3)
  TensorView v_new;      // optional, same shape; at least one of k_new / v_new
  TensorView k_cache;    // [batch, kv_heads, max_seq, head_dim] (required when k_new given)
  TensorView v_cache;    // required when v_new given
  TensorView positions;  // i32 [batch], 0 <= position < max_seq
  KvScales kv_scales = {};  // e4m3 caches only
};

// Seed 000's fused step: RoPE on q and the new k, append k and v at positions[b],
// then attend over positions[b] + 1 keys.
struct FusedDecodeTensors {
  TensorView q;          // [batch, num_heads, head_dim], un-rotated
  TensorView k_new;      // [batch, kv_heads, head_dim], un-rotated, cache dtype
  TensorView v_new;      // [batch, kv_heads, head_dim], cache dtype
  TensorView k_cache;    // [batch, kv_heads, max_seq, head_dim]
  TensorView v_cache;
  TensorView positions;  // i32 [batch]
  TensorView out;        // [batch, num_heads, head_dim]
  TensorView lse;        // optional f32 [batch, num_heads]
  TensorView sinks = {};  // optional f32 [num_heads]: attention-sink logits (above)
};

// Partial softmax states of key splits: out_partial [splits, rows, head_dim] (f32, f16 or bf16)
// normalised per split, lse_partial [splits, rows] f32. Merged into out [rows, head_dim] and lse
// [rows]. The splits are any key ranges attended apart: a shared prefix and a suffix (cascade
// attention), shards of one cache, a decode's own key splits.
struct MergeTensors {
  TensorView out_partial;
  TensorView lse_partial;
  TensorView out;
  TensorView lse;  // optional
};

// Caller-owned scratch for split states. Its size comes from the plan (evidence.workspace_bytes).
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  DeviceKind device = DeviceKind::kCpu;
};

}  // namespace attnkit
