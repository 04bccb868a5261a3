// Test support: one case of the far-positions tests (CPU and CUDA), whose rows sit past 2^24
// (where f32 can no longer tell neighbouring positions apart): one sequence of kv_len = 2^25 + 77
// keys, 4 query heads on 1 KV head, the last q_len positions as queries, a window. K and V are
// SparseRows mapped only from a margin before the first row's window, so a read of any other key
// faults; q is random normal, out and lse host buffers (poison them before each run).
#pragma once
#include <cstdint>
#include <random>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"
#include "support/sparse_rows.hpp"

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

// The first row's window starts at kv_len - q_len - window + 1; K and V are mapped from a margin
// of 256 rows before it.
struct FarPositionsCase {
  PrefillProblem p;
  SparseRows k, v;
  HostTensor q, out, lse;
  FarPositionsCase(DType dtype, bool causal, std::int64_t q_len, std::int64_t window, std::int64_t head_dim,
                   std::mt19937_64& rng)
      : p(far_positions_problem(dtype, causal, q_len, window, head_dim)),
        k(dtype, kFarKvLen, head_dim, kFarKvLen - q_len - window - 256, rng),
        v(dtype, kFarKvLen, head_dim, kFarKvLen - q_len - window - 256, rng),
        q(dtype, {1, 4, q_len, head_dim}),
        out(dtype, {1, 4, q_len, head_dim}),
        lse(DType::kF32, {1, 4, q_len}) {
    fill_normal(q, rng, 1.0f);
  }
  PrefillTensors tensors() const { return PrefillTensors{q.view, k.view, v.view, out.view, lse.view, {}, {}}; }
};

}  // namespace attnkit::testing
