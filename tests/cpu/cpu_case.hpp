// Test support for the CPU kernels: random decode/prefill cases with owned buffers, plans for the
// scalar baseline, and checks against the float64 golden with the tolerances of DESIGN.md.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "support/random_tensors.hpp"

namespace attnkit::testing {

inline DecodePlan scalar_decode_plan(const DecodeProblem& p) {
  return plan_decode(p, cpu_target(), KernelFamily::kScalarOnline);
}
inline PrefillPlan scalar_prefill_plan(const PrefillProblem& p) {
  return plan_prefill(p, cpu_target(), KernelFamily::kScalarOnline);
}

// DESIGN.md parity rule by input storage dtype; NaN never passes.
inline void expect_matches_golden(const HostTensor& actual, const std::vector<double>& golden, DType input_dtype,
                                  const std::string& what) {
  ASSERT_EQ(actual.numel(), golden.size()) << what;
  const Comparison c = compare(actual, golden);
  EXPECT_EQ(c.nan_count, 0u) << what << ": " << describe(c);
  switch (input_dtype) {
    case DType::kF32:
      EXPECT_LE(c.max_abs, 1e-3) << what << ": " << describe(c);
      EXPECT_LE(c.rel_l2, 1e-5) << what << ": " << describe(c);
      break;
    case DType::kF16: EXPECT_LE(c.rel_l2, 2e-3) << what << ": " << describe(c); break;
    default: EXPECT_LE(c.rel_l2, 1e-2) << what << ": " << describe(c); break;
  }
}

// The tolerance class of a call: its coarsest storage dtype among inputs and output.
inline DType coarsest(std::initializer_list<DType> types) {
  DType worst = DType::kF32;
  for (DType t : types) {
    if (t == DType::kBF16 || (t == DType::kF16 && worst == DType::kF32)) worst = t;
  }
  return worst;
}

// LSE rows: -inf exactly where the golden is -inf, otherwise within 1e-3 (scores are accumulated
// in f32 from the same stored inputs the golden reads, so the error does not depend on dtype).
inline void expect_lse_matches(const HostTensor& lse, const std::vector<double>& golden, const std::string& what) {
  ASSERT_EQ(lse.numel(), golden.size()) << what;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    const double a = lse.get(i);
    if (std::isinf(golden[i])) {
      EXPECT_TRUE(std::isinf(a) && a < 0) << what << ": lse[" << i << "]=" << a << ", expected -inf";
    } else {
      EXPECT_NEAR(a, golden[i], 1e-3 * (1.0 + std::abs(golden[i]))) << what << ": lse[" << i << "]";
    }
  }
}

inline std::string seed_note(std::uint64_t seed) { return " (ATTNKIT_TEST_SEED=" + std::to_string(seed) + ")"; }

// A decode call's buffers: fresh random q/k/v (the whole cache, so keys past a length are live
// data the kernel must not read), poisoned out/lse.
struct DecodeCase {
  DecodeProblem problem;
  HostTensor q, k_cache, v_cache, lengths, out, lse;
  std::uint64_t seed = 0;

  DecodeCase(const DecodeProblem& p, const std::vector<std::int32_t>& lens, float stddev = 1.0f,
             std::uint64_t s = fresh_seed())
      : problem(p), seed(s) {
    const std::int64_t B = p.batch, H = p.num_heads, G = p.kv_heads, D = p.head_dim, S = p.max_seq;
    q = HostTensor(p.q_dtype, {B, H, D});
    k_cache = HostTensor(p.kv_dtype, {B, G, S, D});
    v_cache = HostTensor(p.kv_dtype, {B, G, S, D});
    lengths = HostTensor(DType::kI32, {B});
    out = HostTensor(p.out_dtype, {B, H, D});
    lse = HostTensor(DType::kF32, {B, H});
    std::mt19937_64 rng(seed);
    fill_normal(q, rng, stddev);
    fill_normal(k_cache, rng, stddev);
    fill_normal(v_cache, rng);
    for (std::int64_t b = 0; b < B; ++b) lengths.i32()[b] = lens[static_cast<std::size_t>(b)];
    poison(out);
    poison(lse);
  }
  DecodeTensors tensors() const {
    return {q.view, k_cache.view, v_cache.view, lengths.view, out.view, lse.view};
  }
};

inline DecodeProblem decode_problem(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                                    std::int64_t head_dim, std::int64_t max_seq, DType dtype = DType::kF32) {
  DecodeProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.max_seq = max_seq;
  p.kv_len = max_seq;
  p.kv_dtype = p.q_dtype = p.out_dtype = dtype;
  return p;
}

inline PrefillProblem prefill_problem(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                                      std::int64_t head_dim, std::int64_t q_len, std::int64_t kv_len, bool causal,
                                      DType dtype = DType::kF32) {
  PrefillProblem p;
  p.batch = batch;
  p.num_heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.causal = causal;
  p.dtype = p.out_dtype = dtype;
  return p;
}

// Bytes of a buffer, for "unchanged after a rejected call" checks.
inline std::vector<std::uint8_t> snapshot(const HostTensor& t) { return t.bytes; }

}  // namespace attnkit::testing
