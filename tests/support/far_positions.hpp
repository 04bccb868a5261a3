// Test support: the prefill problem of the far-positions tests (CPU and CUDA), whose rows sit past
// 2^24 (where f32 can no longer tell neighbouring positions apart): one sequence of kv_len keys,
// 4 query heads on 1 KV head, the last q_len positions as queries, a window.
#pragma once
#include <cstdint>

#include "attnkit/attnkit.hpp"

namespace attnkit::testing {

inline constexpr std::int64_t kFarKvLen = (std::int64_t{1} << 25) + 77;

inline PrefillProblem far_positions_problem(DType dtype, bool causal, std::int64_t q_len, std::int64_t window,
                                            std::int64_t head_dim) {
  PrefillProblem p;
  p.batch = 1;
  p.num_heads = 4;
  p.kv_heads = 1;
  p.head_dim = head_dim;
  p.q_len = q_len;
  p.kv_len = kFarKvLen;
  p.causal = causal;
  p.dtype = p.out_dtype = dtype;
  p.options.window = window;
  return p;
}

}  // namespace attnkit::testing
