// Internal: the scalar "vector" (one f32 lane) the fast kernels fall back to on CPUs without AVX2.
// Same interface as VecAvx2 / VecAvx512, so the kernel bodies are written once.
#pragma once
#include <cmath>
#include <cstdint>

#include "attnkit/dtype.hpp"
#include "cpu/simd/vec_e4m3.hpp"

namespace attnkit::cpu::simd {

struct VecScalar {
  using V = float;
  static constexpr int kWidth = 1;
  static constexpr int kQkKeys = 4, kQkMaxVecs = 4;

  static V zero() { return 0.0f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V load_f32(const float* p, int) { return *p; }
  static V load_bf16(const std::uint16_t* p, int) { return bf16_bits_to_float(*p); }
  static V load_f16(const std::uint16_t* p, int) { return f16_bits_to_float(*p); }
  // The vector levels' conversion (vec_e4m3.hpp), so every level reads the NaN codes alike.
  static V load_e4m3_over_256(const std::uint8_t* p, int) { return f16_bits_to_float(e4m3_as_f16_bits(*p)); }
  static void store_f16(std::uint16_t* p, V x, int) { *p = float_to_f16_bits(x); }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V div(V a, V b) { return a / b; }
  static V select_lt(V a, V b, V x, V y) { return a < b ? x : y; }
  static float reduce_add(V v) { return v; }
  static float reduce_max(V v) { return v; }
  // e^x for x <= 0 (the softmax's scores minus their max): exp itself on this level.
  static V exp_nonpositive(V x) { return exp(x); }
  static V exp(V x) { return x < -87.0f ? 0.0f : std::exp(x); }
  static V transpose_sum(const V* acc) { return acc[0]; }
  // Score accumulators: one lane means one sequential chain over head_dim, so the dot is summed in
  // double (in f32 it lost up to ~1e-5 relative on large scores: FastDecode.AdversarialScores).
  using Acc = double;
  static Acc acc_fma(V a, V b, Acc c) { return static_cast<double>(a) * b + c; }
  static V acc_transpose_sum(const Acc* acc) { return static_cast<float>(acc[0]); }
};

}  // namespace attnkit::cpu::simd
