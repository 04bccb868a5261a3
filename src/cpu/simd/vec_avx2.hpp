// Internal: the thin AVX2 + FMA wrapper the fast kernels are written against (8 f32 lanes).
// Include only from a translation unit compiled for AVX2 (fast_isa_avx2.cpp).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/simd/vec_e4m3.hpp"

namespace attnkit::cpu::simd {

struct VecAvx2 {
  using V = __m256;
  static constexpr int kWidth = 8;
  // The prefill products' register block (keys or head_dim columns x row vectors): 12
  // accumulators of the 16 registers, beside 3 loaded vectors and a broadcast.
  static constexpr int kQkKeys = 4, kQkMaxVecs = 3;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // Partial loads go through a zeroed copy (head_dim is a multiple of 8, so only scratch tails use them).
  static V load_f32(const float* p, int n) {
    if (n == kWidth) return _mm256_loadu_ps(p);
    alignas(32) float t[kWidth] = {};
    std::memcpy(t, p, sizeof(float) * static_cast<unsigned>(n));
    return _mm256_load_ps(t);
  }
  static __m128i load_u16(const std::uint16_t* p, int n) {
    if (n == kWidth) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    alignas(16) std::uint16_t t[kWidth] = {};
    std::memcpy(t, p, sizeof(std::uint16_t) * static_cast<unsigned>(n));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(t));
  }
  static V load_bf16(const std::uint16_t* p, int n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load_u16(p, n)), 16));
  }
  // 16 bf16 values as two vectors in order: one permute and two unpacks with zero, all on the
  // shuffle port, where load_bf16 twice spends two shifts on the FMA ports (CPU round 22).
  static void load_bf16_pair(const std::uint16_t* p, V& lo, V& hi) {
    // 64-bit groups [0 2 1 3]: each 128-bit lane's low half then holds values 0-3 / 4-7.
    const __m256i x = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 0xD8);
    const __m256i zero = _mm256_setzero_si256();
    lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x));
    hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x));
  }
  // 16 bf16 values (n of them, the rest 0) as their 8 even and 8 odd columns: one load and two
  // single-uop integer ops, where widening in order takes a lane-crossing permute and two unpacks
  // (the row-block body, fast_body_rows4.hpp, holds q and the accumulators in this column order).
  static void load_bf16_even_odd(const std::uint16_t* p, int n, V& even, V& odd) {
    __m256i x;
    if (n >= 2 * kWidth) {
      x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    } else {
      alignas(32) std::uint16_t t[2 * kWidth] = {};
      std::memcpy(t, p, sizeof(std::uint16_t) * static_cast<unsigned>(n));
      x = _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
    }
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static V load_f16(const std::uint16_t* p, int n) { return _mm256_cvtph_ps(load_u16(p, n)); }
  // n (<= kWidth) e4m3 bytes as f32 values times 2^-8, through f16 (vec_e4m3.hpp says why it is exact).
  static V load_e4m3_over_256(const std::uint8_t* p, int n) {
    std::int64_t bytes = 0;
    if (n == kWidth) std::memcpy(&bytes, p, sizeof bytes);  // one 8-byte load
    else std::memcpy(&bytes, p, static_cast<unsigned>(n));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(_mm_cvtsi64_si128(bytes)), 7),
                                    _mm_set1_epi16(kE4m3F16Mask));
    return _mm256_cvtph_ps(h);
  }
  // The first n lanes as f16 (round to nearest even, as float_to_f16_bits; a NaN keeps its payload's
  // top bits where that one writes 0x7e00).
  static void store_f16(std::uint16_t* p, V x, int n) {
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (n == kWidth) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
      return;
    }
    alignas(16) std::uint16_t t[kWidth];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), h);
    std::memcpy(p, t, sizeof(std::uint16_t) * static_cast<unsigned>(n));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V select_lt(V a, V b, V x, V y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V exp(V x) {
    // Clamp with the bound first: max/min return their second operand for NaN, so NaN stays NaN.
    const V xc = _mm256_min_ps(set1(88.0f), _mm256_max_ps(set1(-87.5f), x));
    const V n = _mm256_round_ps(_mm256_mul_ps(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, set1(1.428606765330187e-06f), r);
    V p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
    // 2^n through the exponent bits (n in [-127, 128] after the clamp; -127 only where x < -87).
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const V e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return select_lt(x, set1(-87.0f), zero(), e);
  }
  // e^x for x <= 0 (a score minus its running max; -inf included), in 13 ops against exp's 20:
  // t = x log2(e) rounded once (relative error ~|x| 6e-8, the order the subtraction that made x
  // already has), 2^floor(t) through the exponent bits, 2^(t - floor(t)) by a degree-5 fit on
  // [0, 1) whose constant term is exactly 1, so e^0 = 1 and a lone key weighs exactly 1 (relative
  // error 1.5e-7). t below -126 (x < -87.3) gives exactly 0 (a zero exponent field), so no
  // denormal is ever made; NaN stays NaN. docs/perf-notes.md, CPU round 30.
  static V exp_nonpositive(V x) {
    const V t = _mm256_max_ps(set1(-127.0f), _mm256_mul_ps(x, set1(1.44269504088896341f)));
    const V n = _mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const V r = _mm256_sub_ps(t, n);
    V p = set1(0.0018673447193577886f);
    p = fma(p, r, set1(0.00901850126683712f));
    p = fma(p, r, set1(0.05579671636223793f));
    p = fma(p, r, set1(0.2401663064956665f));
    p = fma(p, r, set1(0.6931509971618652f));
    p = fma(p, r, set1(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  }
  // The row-block body's [key][head] score vectors (lane 4k + g: key k, head g of 4): each head's
  // max / sum over the vector's 2 keys, in both of its lanes; the lanes of keys >= valid set to
  // -inf; and 4 per-head values (p[0..3]) repeated for each key.
  static V max_over_keys(V v) { return _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1)); }
  static V sum_over_keys(V v) { return _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1)); }
  static V mask_keys_from(V x, int valid) {
    const __m256 past = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0), _mm256_set1_epi32(valid - 1)));
    return _mm256_blendv_ps(x, set1(-__builtin_inff()), past);
  }
  static V broadcast_heads(const float* p) { return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p)); }
  // Score accumulators (the QK^T dot): the lanes already split each dot into partial sums.
  using Acc = V;
  static Acc acc_fma(V a, V b, Acc c) { return fma(a, b, c); }
  static V acc_transpose_sum(const Acc* acc) { return transpose_sum(acc); }
  static V transpose_sum(const V* acc) {
    V l1[4], l2[2];
    for (int i = 0; i < 4; ++i) {
      l1[i] = _mm256_add_ps(_mm256_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                            _mm256_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
    }
    for (int i = 0; i < 2; ++i) {
      const __m256d a = _mm256_castps_pd(l1[2 * i]), b = _mm256_castps_pd(l1[2 * i + 1]);
      l2[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(l2[0], l2[1], 0x20), _mm256_permute2f128_ps(l2[0], l2[1], 0x31));
  }
};

}  // namespace attnkit::cpu::simd
