// Problem descriptions: the shapes, dtypes and options of one attention call, with no data.
//
// Masking convention (shared by every backend and the golden):
//   a query at absolute position i sees key j iff  j <= i (causal; always true for decode)
//   and, with a sliding window w > 0,            j >  i - w   (the last w keys, itself included).
//   For decode the query sits at position total_len - 1, so keys before total_len - w are skipped.
//   For prefill with q_len != kv_len the causal mask is bottom-right aligned:
//   query row r has absolute position r + (kv_len - q_len).
// Scores: s = scale * q.k, then with a soft-cap c > 0:  s = c * tanh(s / c).
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/dtype.hpp"

namespace attnkit {

struct AttentionOptions {
  std::int64_t window = 0;  // 0 = no sliding window
  float scale = 0.0f;       // 0 = 1 / sqrt(head_dim)
  float softcap = 0.0f;     // 0 = no logit soft-cap
};

// One new query token per sequence against a KV cache laid out per sequence as
// [kv_heads, max_seq, head_dim] (seed 000's layout), batched with a batch stride:
// the cache tensor is [batch, kv_heads, max_seq, head_dim].
struct DecodeProblem {
  std::int64_t batch = 1;
  std::int64_t num_heads = 32;
  std::int64_t kv_heads = 8;  // num_heads % kv_heads == 0 (1 = multi-query)
  std::int64_t head_dim = 128;
  std::int64_t max_seq = 4096;  // cache capacity per sequence
  std::int64_t kv_len = 4096;   // longest sequence this plan covers (1..max_seq); runs may be shorter
  DType kv_dtype = DType::kBF16;
  DType q_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  AttentionOptions options;

  float effective_scale() const;
  std::int64_t group_size() const { return num_heads / kv_heads; }
  void validate() const;  // throws Error with a Fix
};

// q_len query rows against kv_len keys per sequence (causal or not).
// Tensors: q and out [batch, num_heads, q_len, head_dim], k and v [batch, kv_heads, kv_len, head_dim]
// in any strides with head_dim contiguous (so both BHSD and BSHD layouts are views).
struct PrefillProblem {
  std::int64_t batch = 1;
  std::int64_t num_heads = 32;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  std::int64_t q_len = 4096;
  std::int64_t kv_len = 4096;
  bool causal = true;
  DType dtype = DType::kBF16;  // q, k and v
  DType out_dtype = DType::kBF16;
  AttentionOptions options;

  float effective_scale() const;
  std::int64_t group_size() const { return num_heads / kv_heads; }
  void validate() const;
};

// Which keys of [0, kv_len) a query at absolute position `query_pos` sees, as [begin, end).
struct KeyRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end > begin ? end - begin : 0; }
};
KeyRange visible_keys(std::int64_t query_pos, std::int64_t kv_len, bool causal, std::int64_t window);
// The keys a decode query sees: the newest token (position len - 1) of a sequence of len keys,
// within the window, from key_start on (left padding, DecodeTensors::key_starts); empty when
// key_start >= len.
KeyRange decode_keys(std::int64_t len, std::int64_t window, std::int64_t key_start = 0);

// Rotary position embedding.
enum class RopeStyle : std::uint8_t {
  kHalf,         // pairs (d, d + head_dim/2), as in seed 000 (Llama/NeoX layout)
  kInterleaved,  // pairs (2i, 2i + 1) (GPT-J layout)
};
struct RopeSpec {
  RopeStyle style = RopeStyle::kHalf;
  float theta = 10000.0f;  // frequency of pair i: theta^(-2i/head_dim)
  // Optional caller tables, f32 [max_position, head_dim/2] each (cos and sin of angle(pos, pair)).
  // When given they replace theta; both or neither.
  const float* cos_table = nullptr;
  const float* sin_table = nullptr;
  std::int64_t table_positions = 0;
};

std::string to_string(RopeStyle style);

}  // namespace attnkit
