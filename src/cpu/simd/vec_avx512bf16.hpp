// Internal: the AVX512_BF16 additions the bf16 kernel bodies (fast_body_bf16.hpp) use on top of
// VecAvx512: pairs of bf16 values in each 32-bit lane and vdpbf16ps (lane i += a.lo*b.lo +
// a.hi*b.hi, products exact in f32, sums in f32 with round-to-nearest).
// Include only from a translation unit compiled for AVX-512 + AVX512_BF16 (fast_isa_avx512bf16.cpp).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/simd/vec_avx512.hpp"

namespace attnkit::cpu::simd {

struct Bf16Avx512 {
  using V = __m512;     // 16 f32 lanes
  using P = __m512i;    // 16 lanes of a bf16 pair (32 bf16 values)
  static constexpr int kPairLanes = 16;
  static constexpr int kChunk = 32;  // bf16 values in one P

  static __mmask32 tail32(int n) { return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u); }
  // n (<= 32) consecutive bf16 values, zeros past n.
  static P load(const std::uint16_t* p, int n) {
    return n >= kChunk ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(tail32(n), p);
  }
  static P load_pairs(const std::uint32_t* p) { return _mm512_loadu_si512(p); }
  static void store_pairs(std::uint32_t* p, P v) { _mm512_storeu_si512(p, v); }
  // One bf16 pair (two adjacent uint16 at p) in every lane.
  static P broadcast_pair(const std::uint16_t* p) {
    std::uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return _mm512_set1_epi32(static_cast<int>(bits));
  }
  static P broadcast_pair(std::uint32_t bits) { return _mm512_set1_epi32(static_cast<int>(bits)); }
  static V dot(V acc, P a, P b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
  // 16 f32 -> 16 bf16 (round to nearest even), in the low half of nothing else: as 16 uint16.
  static __m256i to_bf16(V x) { return (__m256i)_mm512_cvtneps_pbh(x); }
  // Lane i = (bf16(lo[i]), bf16(hi[i])): the pair of two f32 vectors, rounded to nearest even.
  static P pair_of(V lo, V hi) {
    const __m512i a = _mm512_cvtepu16_epi32(to_bf16(lo));
    const __m512i b = _mm512_cvtepu16_epi32(to_bf16(hi));
    return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
  }
  // Interleave two rows of 32 bf16 values into pairs: lo gets columns {0-3, 8-11, 16-19, 24-27},
  // hi gets {4-7, 12-15, 20-23, 28-31} (vpunpck*wd order; see pair_column()).
  static void interleave(P a, P b, P& lo, P& hi) {
    lo = _mm512_unpacklo_epi16(a, b);
    hi = _mm512_unpackhi_epi16(a, b);
  }
};

// Where column k (0..31) of a 32-column block lands among the 32 f32 accumulator lanes that
// interleave() + dot() fill (lanes 0-15: the lo vector, 16-31: the hi vector).
constexpr int pair_column(int k) {
  const int l = k / 8, s = k % 8;
  return s < 4 ? 4 * l + s : 16 + 4 * l + (s - 4);
}

}  // namespace attnkit::cpu::simd
