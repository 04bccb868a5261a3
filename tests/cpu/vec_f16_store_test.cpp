// The vector units' f32 -> f16 stores (the fast bodies' f16 outputs) against the scalar
// conversion the reference uses, bit for bit, on the values where conversions go wrong: ties,
// subnormals, the overflow boundary, infinities, signed zeros, and random bit patterns; partial
// vectors must leave the lanes past n untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/dtype.hpp"
#include "support/cpu_features.hpp"

namespace attnkit {
namespace {

// Converts the first n values of `in` into `out` with one vector unit's store.
using StoreF16 = void (*)(const float* in, std::uint16_t* out, int n);

}  // namespace
}  // namespace attnkit

// Each unit's helper is compiled for its own instruction set only: an AVX2 helper compiled with
// AVX-512 enabled may use EVEX instructions and die on a CPU without them (it did, on a Zen 2).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#include "cpu/simd/vec_avx2.hpp"
namespace attnkit {
namespace {
void store_f16_avx2(const float* in, std::uint16_t* out, int n) {
  using Vec = cpu::simd::VecAvx2;
  Vec::store_f16(out, Vec::load_f32(in, n), n);
}
}  // namespace
}  // namespace attnkit
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif
#include "cpu/simd/vec_avx512.hpp"
namespace attnkit {
namespace {
void store_f16_avx512(const float* in, std::uint16_t* out, int n) {
  using Vec = cpu::simd::VecAvx512;
  Vec::store_f16(out, Vec::load_f32(in, n), n);
}
}  // namespace
}  // namespace attnkit
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

namespace attnkit {
namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

std::vector<float> hard_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          6.103515625e-05f,         // smallest normal f16
                          5.960464477539063e-08f,   // smallest subnormal f16
                          2.9802322387695312e-08f,  // half of it: ties to 0
                          4.470348358154297e-08f,   // 1.5x the smallest subnormal: ties to even (2)
                          1e-10f, 1.0f + 0.00048828125f, 1.0f + 3 * 0.00048828125f, 3.0517578125e-05f};
  std::mt19937 rng(7);
  for (int i = 0; i < 4000; ++i) {
    const std::uint32_t u = rng();
    const float x = from_bits(u);
    if (!std::isnan(x)) v.push_back(x);
    v.push_back(from_bits((u & 0x807fffffu) | ((100u + rng() % 60u) << 23)));  // near f16's range
  }
  return v;
}

template <int kW>
void expect_matches_scalar(StoreF16 store) {
  const std::vector<float> values = hard_values();
  for (std::size_t i = 0; i + kW <= values.size(); i += kW) {
    for (int n : {kW, kW - 1, 1}) {
      alignas(64) float in[kW] = {};
      std::memcpy(in, values.data() + i, sizeof(float) * static_cast<unsigned>(n));
      std::uint16_t out[kW + 1];
      for (auto& o : out) o = 0xabcd;  // poison: lanes past n must stay
      store(in, out, n);
      for (int l = 0; l < n; ++l) ASSERT_EQ(out[l], float_to_f16_bits(in[l])) << "value " << in[l] << " lane " << l;
      for (int l = n; l <= kW; ++l) ASSERT_EQ(out[l], 0xabcd) << "lane " << l << " past n = " << n;
    }
  }
}

TEST(VecF16Store, Avx512MatchesTheScalarConversion) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    GTEST_SKIP() << "no AVX-512 on this CPU";
  }
  expect_matches_scalar<cpu::simd::VecAvx512::kWidth>(store_f16_avx512);
}

TEST(VecF16Store, Avx2MatchesTheScalarConversion) {
  if (!__builtin_cpu_supports("avx2") || !attnkit::testing::cpu_has_f16c()) GTEST_SKIP() << "no AVX2 + F16C";
  expect_matches_scalar<cpu::simd::VecAvx2::kWidth>(store_f16_avx2);
}

}  // namespace
}  // namespace attnkit
