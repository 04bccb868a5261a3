// Internal: the thin AVX-512 wrapper the fast kernels are written against (16 f32 lanes).
// Include only from a translation unit compiled for AVX-512 (fast_isa_avx512.cpp).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/vec_e4m3.hpp"

namespace attnkit::cpu::simd {

struct VecAvx512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  // Register blocks of the prefill micro-kernels (accumulators = keys x vectors <= 24 of 32 registers).
  static constexpr int kQkKeys = 4, kQkMaxVecs = 4;  // S^T and O^T blocks: 4 keys or columns x 4 row vectors
  static constexpr int kPvRows = 8, kPvMaxVecs = 3;  // the bf16 body's O block: 8 rows x 3 vectors of head_dim

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 tail(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V load_f32(const float* p, int n) {
    return n == kWidth ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(tail(n), p);
  }
  static V load_bf16(const std::uint16_t* p, int n) {
    const __m256i h = n == kWidth ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                  : _mm256_maskz_loadu_epi16(tail(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // 2 x kWidth bf16 (the first n; the rest read as 0) as two f32 vectors, the even columns
  // (bits << 16) and the odd ones (bits & 0xffff0000): two ops for 32 values where widening takes
  // four (and a second load).
  static void load_bf16_even_odd(const std::uint16_t* p, int n, V& even, V& odd) {
    const __m512i x = n >= 2 * kWidth ? _mm512_loadu_si512(p)
                                      : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << n) - 1u), p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static V load_f16(const std::uint16_t* p, int n) {
    const __m256i h = n == kWidth ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                  : _mm256_maskz_loadu_epi16(tail(n), p);
    return _mm512_cvtph_ps(h);
  }
  // n (<= kWidth) e4m3 bytes as f32 values times 2^-8, through f16 (vec_e4m3.hpp says why it is exact).
  static V load_e4m3_over_256(const std::uint8_t* p, int n) {
    const __m128i b =
        n == kWidth ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)) : _mm_maskz_loadu_epi8(tail(n), p);
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(kE4m3F16Mask));
    return _mm512_cvtph_ps(h);
  }
  // The first n lanes as f16 (round to nearest even, as float_to_f16_bits; a NaN keeps its payload's
  // top bits where that one writes 0x7e00).
  static void store_f16(std::uint16_t* p, V x, int n) {
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (n == kWidth) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
    else _mm256_mask_storeu_epi16(p, tail(n), h);
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  // (a < b) ? x : y, lane by lane.
  static V select_lt(V a, V b, V x, V y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  // e^x for x <= 0 (the softmax's scores minus their max): exp itself on this level.
  static V exp_nonpositive(V x) { return exp(x); }
  // e^x with exactly 0 below -87 (masked scores are -inf): 2^n * p(r), r = x - n ln2, |r| <= ln2/2.
  static V exp(V x) {
    // Clamp with the bound first: max/min return their second operand for NaN, so NaN stays NaN.
    const V xc = _mm512_min_ps(set1(88.0f), _mm512_max_ps(set1(-87.5f), x));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    V r = _mm512_fnmadd_ps(n, set1(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, set1(1.428606765330187e-06f), r);
    V p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set1(1.0f)));
    const V e = _mm512_scalef_ps(p, n);
    return select_lt(x, set1(-87.0f), zero(), e);
  }
  // out[i] = sum of the lanes of acc[i], for kWidth accumulators (a transpose-and-add tree).
  // Score accumulators (the QK^T dot): the lanes already split each dot into partial sums.
  // The row-block bodies' [key][head] score vectors (lane 4k + g: key k, head g of 4): each head's
  // max / sum over the vector's 4 keys, in all its lanes; the lanes of keys >= valid set to -inf;
  // and 4 per-head values (p[0..3], 16-byte aligned) repeated for each key.
  static V max_over_keys(V v) {
    v = max(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return max(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  }
  static V sum_over_keys(V v) {
    v = add(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return add(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  }
  static V mask_keys_from(V x, int valid) {
    const __m512i key_of_lane = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __mmask16 past = _mm512_cmpge_epi32_mask(key_of_lane, _mm512_set1_epi32(valid));
    return _mm512_mask_mov_ps(x, past, set1(-__builtin_inff()));
  }
  static V broadcast_heads(const float* p) { return _mm512_broadcast_f32x4(_mm_load_ps(p)); }
  using Acc = V;
  static Acc acc_fma(V a, V b, Acc c) { return fma(a, b, c); }
  static V acc_transpose_sum(const Acc* acc) { return transpose_sum(acc); }
  static V transpose_sum(const V* acc) { return transpose_reduce(acc, Add{}); }
  // Lane i = op over the lanes of x[i], for kWidth vectors (a transpose-and-reduce tree).
  struct Add {
    V operator()(V a, V b) const { return _mm512_add_ps(a, b); }
  };
  template <class Op>
  static V transpose_reduce(const V* x, Op op) {
    V l1[8], l2[4], l3[2];
    for (int i = 0; i < 8; ++i) l1[i] = op(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {
      const __m512d a = _mm512_castps_pd(l1[2 * i]), b = _mm512_castps_pd(l1[2 * i + 1]);
      l2[i] = op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; ++i) {
      l3[i] = op(_mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                 _mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    return op(_mm512_shuffle_f32x4(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
};

}  // namespace attnkit::cpu::simd
