// The AVX2 softmax exponential (VecAvx2::exp_nonpositive, the generic prefill body's) against
// the float64 exp: relative error within its stated bound over [-87, 0], exactly 0 below the
// smallest normal's exponent and for -inf (masked keys get probability 0, never a denormal), NaN
// kept NaN.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "cpu/simd/vec_avx2.hpp"
namespace attnkit {
namespace {
// e^x of 8 values through the AVX2 unit.
void exp_nonpositive_avx2(const float* in, float* out) {
  using Vec = cpu::simd::VecAvx2;
  Vec::store(out, Vec::exp_nonpositive(Vec::load(in)));
}
}  // namespace
}  // namespace attnkit
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace attnkit {
namespace {

std::vector<float> exp_all(const std::vector<float>& x) {
  std::vector<float> padded(x), out((x.size() + 7) / 8 * 8);
  padded.resize(out.size(), 0.0f);
  for (std::size_t i = 0; i < out.size(); i += 8) exp_nonpositive_avx2(padded.data() + i, out.data() + i);
  out.resize(x.size());
  return out;
}

bool have_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

TEST(VecExp, Avx2NonPositiveWithinItsBoundOverTheSoftmaxRange) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  std::vector<float> x;
  for (int i = 0; i <= 870000; ++i) x.push_back(-static_cast<float>(i) * 1e-4f);  // [-87, 0] evenly
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> tiny(-1e-3f, 0.0f), wide(-87.0f, 0.0f);
  for (int i = 0; i < 100000; ++i) x.push_back(i % 2 ? tiny(rng) : wide(rng));
  const std::vector<float> got = exp_all(x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double rel = std::fabs(got[i] - want) / want;
    // 1.5e-7 from the fit, ~|x| 6e-8 from rounding x log2(e) once, and the final rounding.
    const double bound = 3e-7 + 1.2e-7 * std::fabs(static_cast<double>(x[i]));
    ASSERT_LE(rel, bound) << "x=" << x[i] << " got " << got[i] << " want " << want;
    worst = std::max(worst, rel / bound);
  }
  EXPECT_GT(worst, 0.0);  // the comparison ran on real values
}

TEST(VecExp, Avx2NonPositiveGivesExactZeroNotDenormalsAndKeepsNan) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 + FMA";
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1e30f, -1000.0f, -126.0f, -88.0f, -87.5f, -87.4f, -87.33f, 0.0f, -0.0f, nan, -87.0f};
  for (float v = -87.0f; v >= -90.0f; v -= 0.001f) x.push_back(v);
  const std::vector<float> got = exp_all(x);
  EXPECT_EQ(got[0], 0.0f) << "-inf (a masked key) must give probability exactly 0";
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 0.0f);
  // Exactly 1: a row's maximum weighs 1, so a one-key softmax returns that key's value exactly.
  EXPECT_EQ(got[8], 1.0f);
  EXPECT_EQ(got[9], 1.0f);
  EXPECT_TRUE(std::isnan(got[10])) << "NaN scores must stay NaN";
  EXPECT_GT(got[11], 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    EXPECT_TRUE(got[i] == 0.0f || got[i] >= FLT_MIN) << "x=" << x[i] << " gave the denormal " << got[i];
    EXPECT_LE(got[i], std::exp(static_cast<double>(x[i])) * (1 + 1.2e-5) + 1e-45) << "x=" << x[i];
  }
}

}  // namespace
}  // namespace attnkit
