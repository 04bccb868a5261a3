// The prefill shapes both backends are checked on: the GPU tests (tests/cuda/prefill_test.cpp)
// and the CPU scalar-online path (tests/cpu/prefill_shapes_cpu_test.cpp) use this one list, so CI
// (no GPU) checks every shape the device checks. Awkward on purpose: q_len != kv_len, lengths that
// are not multiples of any tile, windows, GQA ratios 1 / 4 / 8, ragged batches with empty and
// length-1 sequences, key splits, soft-cap, large-magnitude scores.
#pragma once
#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::testing {

struct PrefillShape {
  std::string name;
  std::int64_t batch, heads, kv_heads, head_dim, q_len, kv_len;
  bool causal;
  DType dtype;
  DType out_dtype;
  std::int64_t window = 0;
  float softcap = 0.0f;
  float stddev = 1.0f;                            // q and k; large values stress the running max
  std::vector<std::pair<int, int>> ragged = {};   // (q rows, keys) per sequence; empty = dense
};

inline std::vector<PrefillShape> prefill_shapes() {
  using enum DType;
  constexpr std::int64_t kUnboundedWindow = std::numeric_limits<std::int64_t>::max();
  return {
      {"causal_square_gqa1_d64_bf16", 2, 8, 8, 64, 200, 200, true, kBF16, kBF16},
      {"causal_q_lt_kv_gqa4_d128_f16_out_f32", 1, 16, 4, 128, 77, 333, true, kF16, kF32},
      {"noncausal_gqa8_d96_bf16", 3, 8, 1, 96, 130, 130, false, kBF16, kBF16},
      {"noncausal_q_gt_kv_d128_bf16", 1, 4, 2, 128, 150, 67, false, kBF16, kBF16},
      // Windows past every position are no window, also at the negative positions of q_len > kv_len.
      {"noncausal_q_gt_kv_unbounded_window_d128_bf16", 1, 4, 2, 128, 150, 67, false, kBF16, kBF16, kUnboundedWindow},
      {"noncausal_q_gt_kv_unbounded_window_d64_f16", 1, 4, 1, 64, 200, 90, false, kF16, kF16, kUnboundedWindow},
      {"causal_unbounded_window_d256_bf16", 1, 4, 2, 256, 100, 257, true, kBF16, kBF16, kUnboundedWindow},
      {"causal_window50_d128_bf16", 1, 4, 4, 128, 300, 300, true, kBF16, kBF16, 50},
      {"noncausal_window70_d256_bf16", 1, 2, 1, 256, 100, 257, false, kBF16, kBF16, 70},
      {"causal_window_q_lt_kv_d256_f16", 2, 4, 1, 256, 45, 190, true, kF16, kF16, 33},
      {"causal_long_keys_split_d128_bf16", 1, 2, 2, 128, 16, 3000, true, kBF16, kBF16},
      {"noncausal_long_keys_split_d64_f16_out_f32", 1, 4, 1, 64, 70, 2500, false, kF16, kF32},
      {"causal_softcap30_d64_bf16", 1, 4, 2, 64, 129, 129, true, kBF16, kBF16, 0, 30.0f},
      {"causal_large_scores_d128_f16", 1, 4, 4, 128, 96, 160, true, kF16, kF16, 0, 0.0f, 6.0f},
      {"ragged_causal_empty_len1_d128_bf16", 5, 8, 2, 128, 130, 200, true, kBF16, kBF16, 0, 0.0f, 1.0f,
       {{0, 0}, {1, 1}, {130, 200}, {64, 64}, {7, 20}}},
      {"ragged_noncausal_keyless_rows_d64_f16", 3, 4, 4, 64, 33, 90, false, kF16, kF16, 0, 0.0f, 1.0f,
       {{5, 0}, {0, 10}, {33, 90}}},
      {"ragged_causal_window_gqa8_d256_bf16_out_f32", 3, 8, 1, 256, 70, 150, true, kBF16, kF32, 24, 0.0f, 1.0f,
       {{70, 150}, {1, 9}, {17, 17}}},
      {"scalar_f32_causal_gqa2_d64", 2, 4, 2, 64, 33, 71, true, kF32, kF32},
      {"scalar_f32_ragged_window_d128", 2, 4, 1, 128, 40, 60, true, kF32, kF32, 9, 0.0f, 1.0f, {{40, 60}, {3, 3}}},
      {"scalar_f16_d40_no_tiled_config", 1, 2, 1, 40, 50, 61, false, kF16, kF16},
  };
}

// Owned host buffers of one case: fresh random q/k/v, poisoned out/lse, ragged offsets.
struct PrefillCase {
  PrefillShape shape;
  PrefillProblem problem;
  HostTensor q, k, v, out, lse, cu_q, cu_k;
  std::uint64_t seed;

  explicit PrefillCase(const PrefillShape& s, std::uint64_t seed_in = fresh_seed()) : shape(s), seed(seed_in) {
    PrefillProblem& p = problem;
    p.batch = s.batch;
    p.num_heads = s.heads;
    p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.q_len = s.q_len;
    p.kv_len = s.kv_len;
    p.causal = s.causal;
    p.dtype = s.dtype;
    p.out_dtype = s.out_dtype;
    p.options.window = s.window;
    p.options.softcap = s.softcap;
    const std::int64_t H = s.heads, G = s.kv_heads, D = s.head_dim;
    if (s.ragged.empty()) {
      q = HostTensor(s.dtype, {s.batch, H, s.q_len, D});
      k = HostTensor(s.dtype, {s.batch, G, s.kv_len, D});
      v = HostTensor(s.dtype, {s.batch, G, s.kv_len, D});
      out = HostTensor(s.out_dtype, {s.batch, H, s.q_len, D});
      lse = HostTensor(DType::kF32, {s.batch, H, s.q_len});
    } else {
      cu_q = HostTensor(DType::kI32, {s.batch + 1});
      cu_k = HostTensor(DType::kI32, {s.batch + 1});
      cu_q.i32()[0] = cu_k.i32()[0] = 0;
      for (std::size_t b = 0; b < s.ragged.size(); ++b) {
        cu_q.i32()[b + 1] = cu_q.i32()[b] + s.ragged[b].first;
        cu_k.i32()[b + 1] = cu_k.i32()[b] + s.ragged[b].second;
      }
      const std::int64_t tq = cu_q.i32()[s.batch], tk = cu_k.i32()[s.batch];
      q = HostTensor(s.dtype, {1, H, tq, D});
      k = HostTensor(s.dtype, {1, G, tk, D});
      v = HostTensor(s.dtype, {1, G, tk, D});
      out = HostTensor(s.out_dtype, {1, H, tq, D});
      lse = HostTensor(DType::kF32, {1, H, tq});
    }
    std::mt19937_64 rng(seed);
    fill_normal(q, rng, s.stddev);
    fill_normal(k, rng, s.stddev);
    fill_normal(v, rng);
    poison(out);
    poison(lse);
  }

  PrefillTensors tensors() const {
    PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
    if (!shape.ragged.empty()) {
      t.cu_seqlens_q = cu_q.view;
      t.cu_seqlens_k = cu_k.view;
    }
    return t;
  }

  std::string note() const { return shape.name + " (ATTNKIT_TEST_SEED=" + std::to_string(seed) + ")"; }
};

// DESIGN.md parity: f32 max-abs <= 1e-3 and rel-L2 <= 1e-5; f16 rel-L2 <= 2e-3; bf16 <= 1e-2;
// e4m3 inputs <= 5e-2 (docs/architecture.md, against the golden of the same quantized inputs).
// Returns an empty string when `actual` passes, else why not.
inline std::string prefill_parity_failure(const HostTensor& actual, const std::vector<double>& golden, DType input) {
  if (actual.numel() != golden.size()) return "size mismatch";
  const Comparison c = compare(actual, golden);
  bool ok = c.nan_count == 0;
  if (input == DType::kF32) {
    ok = ok && c.max_abs <= 1e-3 && c.rel_l2 <= 1e-5;
  } else if (input == DType::kE4M3) {
    ok = ok && c.rel_l2 <= 5e-2;
  } else {
    ok = ok && c.rel_l2 <= (input == DType::kF16 ? 2e-3 : 1e-2);
  }
  return ok ? std::string() : describe(c);
}

// LSE: -inf exactly where the golden is -inf (rows with no visible key), else within 1e-3 relative.
// `rel`: 1e-3 for scores accumulated in f32; e4m3 inputs pass kE4m3LseRel (docs/architecture.md,
// "Numerics: e4m3 prefill").
inline constexpr double kE4m3LseRel = 5e-3;
inline std::string prefill_lse_failure(const HostTensor& lse, const std::vector<double>& golden, double rel = 1e-3) {
  if (lse.numel() != golden.size()) return "size mismatch";
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = lse.get(i);
    const bool ok = std::isinf(golden[i]) ? (std::isinf(a) && a < 0)
                                          : std::abs(a - golden[i]) <= rel * (1.0 + std::abs(golden[i]));
    if (!ok) return "lse[" + std::to_string(i) + "]=" + std::to_string(a) + " golden=" + std::to_string(golden[i]);
  }
  return {};
}

}  // namespace attnkit::testing
