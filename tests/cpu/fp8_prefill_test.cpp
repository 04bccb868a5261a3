// e4m3 (fp8) prefill on the host side: what the problem and the tensors accept and reject (with a
// Fix, nothing written), that the CPU backend refuses e4m3 prefill while every other op keeps
// rejecting e4m3, and that the float64 golden reads e4m3 inputs as stored value x scale.
#include <gtest/gtest.h>

#include <functional>

#include "cpu_case.hpp"
#include "support/expect_error.hpp"

namespace attnkit::testing {
namespace {

PrefillProblem e4m3_problem(DType out = DType::kBF16) {
  PrefillProblem p = prefill_problem(2, 4, 2, 128, 9, 17, true);
  p.dtype = DType::kE4M3;
  p.out_dtype = out;
  return p;
}

// Owned e4m3 q/k/v (quantized with per-tensor scales), poisoned out and lse, for a dense problem.
struct Fp8Buffers {
  PrefillProblem p;
  HostTensor q, k, v, out, lse;
  Fp8Scales scales;
  explicit Fp8Buffers(const PrefillProblem& problem, std::uint64_t seed = fresh_seed())
      : p(problem),
        q(DType::kE4M3, {p.batch, p.num_heads, p.q_len, p.head_dim}),
        k(DType::kE4M3, {p.batch, p.kv_heads, p.kv_len, p.head_dim}),
        v(DType::kE4M3, {p.batch, p.kv_heads, p.kv_len, p.head_dim}),
        out(p.out_dtype, {p.batch, p.num_heads, p.q_len, p.head_dim}),
        lse(DType::kF32, {p.batch, p.num_heads, p.q_len}) {
    std::mt19937_64 rng(seed);
    scales.q = fill_normal_e4m3(q, rng);
    scales.k = fill_normal_e4m3(k, rng);
    scales.v = fill_normal_e4m3(v, rng);
    poison(out);
    poison(lse);
  }
  PrefillTensors tensors() const {
    PrefillTensors t{q.view, k.view, v.view, out.view, lse.view, {}, {}};
    t.scales = scales;
    return t;
  }
};

TEST(Fp8Prefill, ProblemAcceptsE4m3InputsAndRejectsE4m3Output) {
  for (DType out : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_NO_THROW(e4m3_problem(out).validate());
  expect_error([] { e4m3_problem(DType::kE4M3).validate(); }, "out_dtype is e4m3, which is an input-only dtype");
  PrefillProblem bf16_e4m3_out = e4m3_problem(DType::kE4M3);
  bf16_e4m3_out.dtype = DType::kBF16;
  expect_error([&] { bf16_e4m3_out.validate(); }, "out_dtype is e4m3");
  PrefillProblem index_inputs = e4m3_problem();
  index_inputs.dtype = DType::kI32;
  expect_error([&] { index_inputs.validate(); }, "dtype is i32");
}

// Decode's q, paged decode, extend, RoPE and merge do not opt in: e4m3 stays rejected there (an
// e4m3 KV cache for decode and append: fp8_kv_cache_test.cpp).
TEST(Fp8Prefill, OtherOpsKeepRejectingE4m3) {
  DecodeProblem d = decode_problem(1, 4, 2, 64, 32);
  d.q_dtype = DType::kE4M3;
  expect_error([&] { plan_decode(d, cpu_target(1)); }, "q_dtype is e4m3");

  ExtendProblem e;
  e.batch = 1, e.num_heads = 4, e.kv_heads = 2, e.head_dim = 64, e.kv_len = 64;
  e.cache.page_size = 16, e.cache.num_pages = 4, e.cache.max_pages_per_seq = 4;
  e.kv_dtype = e.q_dtype = DType::kE4M3;
  e.out_dtype = DType::kBF16;
  expect_error([&] { plan_extend(e, known_target("h200")); }, "e4m3");

  HostTensor cache(DType::kE4M3, {1, 2, 8, 64}), row(DType::kE4M3, {1, 2, 64}), pos(DType::kI32, {1});
  pos.i32()[0] = 0;
  const auto before = cache.bytes;
  // An e4m3 cache is written from f32/f16/bf16 rows (quantized), not from e4m3 bytes.
  expect_error([&] { cpu::append_kv({row.view, {}, cache.view, {}, pos.view}); }, "k_new has dtype e4m3");
  EXPECT_EQ(cache.bytes, before);
  expect_error([&] { cpu::apply_rope(row.view, pos.view, RopeSpec{}); }, "x has dtype e4m3");
  HostTensor op(DType::kF32, {2, 4, 8}), lp(DType::kF32, {2, 4}), out8(DType::kE4M3, {4, 8});
  expect_error([&] { cpu::merge_states({op.view, lp.view, out8.view, {}}); }, "out has dtype e4m3");
}

TEST(Fp8Prefill, CpuBackendRejectsE4m3PrefillBeforeWriting) {
  const PrefillProblem p = e4m3_problem();
  for (const Target& t : {cpu_target(1), cpu_target(2)}) {
    expect_error([&] { plan_prefill(p, t); }, "e4m3 prefill runs on the CUDA backend on Hopper (sm_90)");
    expect_error([&] { plan_prefill(p, t, KernelFamily::kScalarOnline); }, "plan with backend cuda");
  }
  // A plan made for bf16 and edited to e4m3 by hand: cpu::prefill refuses it too, writing nothing.
  PrefillProblem bf16 = p;
  bf16.dtype = DType::kBF16;
  PrefillPlan plan = scalar_prefill_plan(bf16);
  plan.problem = p;
  Fp8Buffers b(p);
  const auto out_before = b.out.bytes, lse_before = b.lse.bytes;
  expect_error([&] { cpu::prefill(plan, b.tensors()); }, "e4m3 prefill runs on the CUDA backend");
  EXPECT_EQ(b.out.bytes, out_before);
  EXPECT_EQ(b.lse.bytes, lse_before);
}

TEST(Fp8Prefill, ScalesAreValidatedBeforeAnyWrite) {
  const PrefillProblem p = e4m3_problem();
  Fp8Buffers b(p);
  EXPECT_NO_THROW(validate_prefill(p, b.tensors(), DeviceKind::kCpu));
  const float bad_values[] = {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    for (int which = 0; which < 3; ++which) {
      PrefillTensors t = b.tensors();
      (which == 0 ? t.scales.q : which == 1 ? t.scales.k : t.scales.v) = bad;
      const std::string name = which == 0 ? "scales.q=" : which == 1 ? "scales.k=" : "scales.v=";
      expect_error([&] { validate_prefill(p, t, DeviceKind::kCpu); }, name);
      expect_error([&] { validate_prefill(p, t, DeviceKind::kCpu); }, "is not a finite number > 0");
      expect_error([&] { reference::prefill(p, t); }, "is not a finite number > 0");
    }
  }
  // Scales other than 1 mean nothing for 16/32-bit inputs: rejected, on the CPU run path too.
  const PrefillProblem f32 = prefill_problem(2, 4, 2, 64, 9, 17, true);
  const PrefillPlan plan = scalar_prefill_plan(f32);
  HostTensor q(DType::kF32, {2, 4, 9, 64}), k(DType::kF32, {2, 2, 17, 64}), v(DType::kF32, {2, 2, 17, 64});
  HostTensor out(DType::kF32, {2, 4, 9, 64});
  std::mt19937_64 rng(fresh_seed());
  fill_normal(q, rng), fill_normal(k, rng), fill_normal(v, rng);
  poison(out);
  const auto before = out.bytes;
  PrefillTensors t{q.view, k.view, v.view, out.view, {}, {}, {}};
  t.scales.v = 0.5f;
  expect_error([&] { cpu::prefill(plan, t); }, "scales apply to e4m3 inputs; leave them at 1 for f16/bf16/f32");
  expect_error([&] { reference::prefill(f32, t); }, "scales apply to e4m3 inputs");
  EXPECT_EQ(out.bytes, before);
  t.scales.v = 1.0f;
  EXPECT_NO_THROW(cpu::prefill(plan, t));
}

TEST(Fp8Prefill, TensorDtypesMustMatchTheProblem) {
  const PrefillProblem p = e4m3_problem();
  Fp8Buffers b(p);
  HostTensor k16(DType::kBF16, {p.batch, p.kv_heads, p.kv_len, p.head_dim});
  PrefillTensors t = b.tensors();
  t.k = k16.view;
  expect_error([&] { validate_prefill(p, t, DeviceKind::kCpu); }, "k has dtype bf16, expected e4m3");
  HostTensor out8(DType::kE4M3, {p.batch, p.num_heads, p.q_len, p.head_dim});
  t = b.tensors();
  t.out = out8.view;
  expect_error([&] { validate_prefill(p, t, DeviceKind::kCpu); }, "out has dtype e4m3, expected bf16");
}

// The generator puts each tensor's largest magnitude on e4m3's largest value (448).
TEST(Fp8Prefill, GeneratorQuantizesWithAPerTensorScale) {
  HostTensor x(DType::kE4M3, {4096});
  std::mt19937_64 rng(fresh_seed());
  const float scale = fill_normal_e4m3(x, rng, 3.0f);
  EXPECT_GT(scale, 0.0f);
  float largest = 0.0f;
  for (std::size_t i = 0; i < x.numel(); ++i) {
    EXPECT_FALSE(std::isnan(x.get(i))) << i;
    largest = std::max(largest, std::abs(x.get(i)));
  }
  EXPECT_EQ(largest, 448.0f);
  EXPECT_NEAR(largest * scale / 3.0f, 3.5, 1.5);  // the largest of 4096 normal draws: ~3.5 sigma
}

// The golden on e4m3 inputs equals the golden on the same values dequantized to f32: exactly when
// the scales are powers of two (every product is exact in both), to f32 rounding otherwise.
void expect_golden_matches_dequantized(const PrefillProblem& e4m3, bool power_of_two_scales, const char* what) {
  Fp8Buffers b(e4m3);
  if (power_of_two_scales) b.scales = {0.0078125f, 0.015625f, 0.00390625f};
  PrefillProblem f32 = e4m3;
  f32.dtype = DType::kF32;
  HostTensor q(DType::kF32, {e4m3.batch, e4m3.num_heads, e4m3.q_len, e4m3.head_dim});
  HostTensor k(DType::kF32, {e4m3.batch, e4m3.kv_heads, e4m3.kv_len, e4m3.head_dim});
  HostTensor v(DType::kF32, {e4m3.batch, e4m3.kv_heads, e4m3.kv_len, e4m3.head_dim});
  auto dequantize = [](HostTensor& dst, const HostTensor& src, float scale) {
    for (std::size_t i = 0; i < src.numel(); ++i) dst.set(i, src.get(i) * scale);
  };
  dequantize(q, b.q, b.scales.q);
  dequantize(k, b.k, b.scales.k);
  dequantize(v, b.v, b.scales.v);
  const reference::Result from_e4m3 = reference::prefill(e4m3, b.tensors());
  const reference::Result from_f32 =
      reference::prefill(f32, PrefillTensors{q.view, k.view, v.view, b.out.view, b.lse.view, {}, {}});
  ASSERT_EQ(from_e4m3.out.size(), from_f32.out.size());
  if (power_of_two_scales) {
    EXPECT_EQ(from_e4m3.out, from_f32.out) << what;
    EXPECT_EQ(from_e4m3.lse, from_f32.lse) << what;
    return;
  }
  for (std::size_t i = 0; i < from_f32.out.size(); ++i) {
    ASSERT_NEAR(from_e4m3.out[i], from_f32.out[i], 1e-5 * (1.0 + std::abs(from_f32.out[i]))) << what << " out " << i;
  }
  for (std::size_t i = 0; i < from_f32.lse.size(); ++i) {
    if (std::isinf(from_f32.lse[i])) {
      EXPECT_EQ(from_e4m3.lse[i], from_f32.lse[i]) << what << " lse " << i;
    } else {
      ASSERT_NEAR(from_e4m3.lse[i], from_f32.lse[i], 1e-5 * (1.0 + std::abs(from_f32.lse[i]))) << what << " lse " << i;
    }
  }
}

TEST(Fp8Prefill, GoldenReadsE4m3AsStoredValueTimesScale) {
  PrefillProblem causal_gqa = e4m3_problem();
  PrefillProblem window = prefill_problem(1, 8, 1, 256, 20, 20, false);
  window.dtype = DType::kE4M3;
  window.out_dtype = DType::kF32;
  window.options.window = 7;
  for (bool pow2 : {true, false}) {
    expect_golden_matches_dequantized(causal_gqa, pow2, "causal gqa2 d128");
    expect_golden_matches_dequantized(window, pow2, "window7 gqa8 d256");
  }
}

// A ragged e4m3 batch (with an empty sequence) through the golden: same as dequantized f32.
TEST(Fp8Prefill, GoldenHandlesRaggedE4m3Batches) {
  PrefillProblem p = prefill_problem(3, 4, 2, 128, 6, 9, true);
  p.dtype = DType::kE4M3;
  p.out_dtype = DType::kBF16;
  HostTensor q(DType::kE4M3, {1, 4, 9, 128}), k(DType::kE4M3, {1, 2, 15, 128}), v(DType::kE4M3, {1, 2, 15, 128});
  HostTensor cu_q(DType::kI32, {4}), cu_k(DType::kI32, {4}), out(DType::kBF16, {1, 4, 9, 128});
  const std::int32_t cq[] = {0, 6, 6, 9}, ck[] = {0, 9, 9, 15};
  std::copy(std::begin(cq), std::end(cq), cu_q.i32());
  std::copy(std::begin(ck), std::end(ck), cu_k.i32());
  std::mt19937_64 rng(fresh_seed());
  PrefillTensors t{q.view, k.view, v.view, out.view, {}, cu_q.view, cu_k.view};
  t.scales = {fill_normal_e4m3(q, rng), fill_normal_e4m3(k, rng), fill_normal_e4m3(v, rng)};
  EXPECT_NO_THROW(validate_prefill(p, t, DeviceKind::kCpu));
  const reference::Result golden = reference::prefill(p, t);
  for (double x : golden.out) EXPECT_TRUE(std::isfinite(x));
  // Sequence 0's row 0 sees keys 0..3 (bottom-right causal, 6 rows against 9 keys): check by hand.
  double scores[4], m = -1e300, sum = 0;
  for (int j = 0; j < 4; ++j) {
    double dot = 0;
    for (int d = 0; d < 128; ++d) {
      dot += (double{q.get(d)} * t.scales.q) * (double{k.get(j * 128 + d)} * t.scales.k);
    }
    scores[j] = dot * p.effective_scale();
    m = std::max(m, scores[j]);
  }
  for (double& s : scores) sum += (s = std::exp(s - m));
  for (int d = 0; d < 128; ++d) {
    double o = 0;
    for (int j = 0; j < 4; ++j) o += scores[j] / sum * (double{v.get(j * 128 + d)} * t.scales.v);
    EXPECT_NEAR(golden.out[d], o, 1e-9 * (1 + std::abs(o))) << d;
  }
  EXPECT_NEAR(golden.lse[0], m + std::log(sum), 1e-9 * (1 + std::abs(golden.lse[0])));
}

}  // namespace
}  // namespace attnkit::testing
