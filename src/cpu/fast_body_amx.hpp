// Internal: the prefill body on AMX tiles (AMX-BF16: TDPBF16PS multiplies a 16 x 32 bf16 tile by a
// 32 x 16 one into a 16 x 16 f32 tile), for bf16, f16 and f32 inputs (the latter two as 2 or 3
// bf16 parts per value, below). Included by fast_isa_amx.cpp after fast_body.hpp and
// fast_body_bf16.hpp, in the same namespace (their exp, soft-cap, key range, running state and
// output writer are shared); decode takes the avx512bf16 bodies.
//
// Per task (one sequence, KV head and block of query rows, all heads of the group):
//   Q rows as bf16 [row][head_dim] in parts (an f32/f16 q beside bf16 K/V split into hi + lo, as on
//     avx512bf16), padded with zeros to 32 rows and 32 columns, staged once.
//   Per key tile: K transposed into key-column pairs ([16-key block][head_dim pair][16 keys], the
//     B operand of S = Q K^T, 16 x 16 dword transposes) and V interleaved into key pairs ([key
//     pair][column], the B operand of O += P V, columns in order).
//   Per (32-row block, head) of the tile: S [32][keys] f32 from 2 x 2 blocks of tiles (4
//     accumulators, 2 Q tiles, 2 K tiles: all 8 tile registers); the online softmax 16 rows at a
//     time (keys in the lanes, log2 units), P rounded to bf16 [row][key] and O rescaled in memory;
//     O += P V, 2 x 2 blocks again, the accumulators loaded from and stored back to O. The next
//     block's score steps run between this block's softmax rows (two S buffers), so the tile unit
//     and the vector units work at once.
// Numerics: bf16 inputs as avx512bf16's prefill (exact Q K^T products, f32 sums, P rounded to bf16
//   before P V, the softmax sum from the unrounded P); f16 / f32 inputs as the f32 path's (their
//   parts and P's carry 16 / 24 bits); exp2 = 2^floor(t) * p(t - floor(t)), p of degree 4
//   (relative error 2.7e-6).
// Bound: the softmax's vector work (~14 operations per 16 scores, pass 2 dominated by exp2), then
//   the tile unit, which a 4-step accumulation chain (head_dim 128 / 32) leaves waiting on each
//   block's zero and store (docs/perf-notes.md, CPU round 13).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/window_begin.hpp"

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// The tile registers' shapes (palette 1): eight tiles of 16 rows x 64 bytes. Tiles 0-3 hold
// accumulators (16 x 16 f32), 4-5 the A operand (16 rows x 32 bf16), 6-7 the B operand (16 pairs
// x 16 columns).
struct AmxTileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
inline const AmxTileConfig& amx_tile_config() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    for (int i = 0; i < 8; ++i) {
      c.colsb[i] = 64;
      c.rows[i] = 16;
    }
    return c;
  }();
  return config;
}

// Values staged as up to three bf16 parts, part 0 first: bf16 inputs are one part, f16 two (hi +
// lo: exact, 11 significant bits are hi's 8 and at most 3 below), f32 three (hi + mid + lo, 24
// bits). Q K^T and P V then sum the products of part pairs (a, b) with a + b below the larger part
// count: 1, 3 or 6 products where bf16 takes one (the terms left out are below f32's rounding).
constexpr int kMaxParts = 3;

struct PrefillLayoutAmx {
  std::int64_t dp, rp, tp;  // head_dim, rows and tile keys, each padded to 32
  std::uint16_t* q[kMaxParts];   // [g][rp][dp] bf16
  std::uint16_t* p[kMaxParts];   // P [32][tp] bf16
  std::uint32_t* kt[kMaxParts];  // K transposed into head_dim pairs
  std::uint32_t* vb[kMaxParts];  // V in key pairs
  float *s, *o, *m, *l;
};

inline PrefillLayoutAmx prefill_layout_amx(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                           std::int64_t tile, float* base) {
  PrefillLayoutAmx L{};
  L.dp = round_up(head_dim, 32);
  L.rp = round_up(block_rows, 32);
  L.tp = round_up(tile, 32);
  float* f = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(base) + 63) / 64 * 64);
  for (int k = 0; k < kMaxParts; ++k) {
    L.q[k] = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.rp * L.dp / 2);
    L.kt[k] = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp * L.dp / 2);
    L.vb[k] = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp / 2 * L.dp);
    L.p[k] = reinterpret_cast<std::uint16_t*>(f); f += floats_for(32 * L.tp / 2);
  }
  L.s = f; f += floats_for(imax(2 * 32 * L.tp, L.rp));  // two S buffers; also the rows' positions at the start
  L.o = f; f += floats_for(group * L.rp * L.dp);
  L.m = f; f += floats_for(group * L.rp);
  L.l = f;
  return L;
}

inline std::size_t prefill_scratch_floats_amx(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                              std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, 32), rp = round_up(block_rows, 32), tp = round_up(tile, 32);
  return kMaxParts * (floats_for(group * rp * dp / 2) + floats_for(tp * dp / 2) + floats_for(tp / 2 * dp) +
                      floats_for(32 * tp / 2)) +
         floats_for(imax(2 * 32 * tp, rp)) + floats_for(group * rp * dp) + 2 * floats_for(group * rp) +
         16;  // 64-byte alignment of the base
}

// dst[c][r] = src[r][c] for a 16 x 16 block of dwords (rows given as vectors).
inline void transpose_16x16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4q + c]: rows 4q..4q+3 of columns c, c + 4, c + 8, c + 12 (one per 128-bit lane).
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88),
                  w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    r[c + 8] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    r[c + 4] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    r[c + 12] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

inline __mmask32 bf16_mask(std::int64_t n) {
  return n >= 32 ? ~__mmask32{0} : n <= 0 ? __mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
}

// 32 bf16 as f32: the first 16 and the last 16.
inline void widen_bf16x32(__m512i h, __m512& x0, __m512& x1) {
  x0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
  x1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
}

// f32 values x0 (the first 16) and x1 (the last 16) as kParts bf16 parts, each the rounding of
// what the parts before it left.
template <int kParts>
inline void split_bf16x32(__m512 x0, __m512 x1, __m512i (&part)[kParts]) {
  for (int k = 0; k < kParts; ++k) {
    part[k] = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
    if (k + 1 < kParts) {
      __m512 h0, h1;
      widen_bf16x32(part[k], h0, h1);
      x0 = _mm512_sub_ps(x0, h0);
      x1 = _mm512_sub_ps(x1, h1);
    }
  }
}

// 32 values of a row of `dtype` from p (the first of them where m is set, zeros past it) as kParts
// bf16 parts (bf16 rows: one part, as they are).
template <int kParts>
inline void load_parts32(const void* p, DType dtype, __mmask32 m, __m512i (&part)[kParts]) {
  if (dtype == DType::kBF16) {
    part[0] = _mm512_maskz_loadu_epi16(m, p);
    for (int k = 1; k < kParts; ++k) part[k] = _mm512_setzero_si512();
    return;
  }
  __m512 x0, x1;
  if (dtype == DType::kF16) {
    const __m512i raw = _mm512_maskz_loadu_epi16(m, p);
    x0 = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
    x1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
  } else {
    const auto* f = static_cast<const float*>(p);
    x0 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), f);
    x1 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), f + 16);
  }
  split_bf16x32<kParts>(x0, x1, part);
}

inline std::int64_t dtype_bytes(DType d) { return static_cast<std::int64_t>(dtype_size(d)); }

// Query rows of the group as kQParts bf16 parts [g][rp][dp], zeros past the rows and head_dim.
template <int kQParts>
void stage_q_amx(const PrefillTask& t, const PrefillLayoutAmx& L) {
  const std::int64_t d = t.head_dim, eb = dtype_bytes(t.q.dtype);
  for (std::int64_t g = 0; g < t.group; ++g) {
    for (std::int64_t i = 0; i < L.rp; ++i) {
      const std::int64_t at = (g * L.rp + i) * L.dp;
      if (i >= t.rows) {
        for (int k = 0; k < kQParts; ++k) std::memset(L.q[k] + at, 0, static_cast<std::size_t>(L.dp) * 2);
        continue;
      }
      const auto* row = static_cast<const char*>(t.q.data) + (t.q.offset + g * t.q.head_stride + i * t.q.row_stride) * eb;
      for (std::int64_t c = 0; c < L.dp; c += 32) {
        __m512i part[kQParts];
        load_parts32<kQParts>(row + c * eb, t.q.dtype, bf16_mask(d - c), part);
        for (int k = 0; k < kQParts; ++k) _mm512_storeu_si512(L.q[k] + at + c, part[k]);
      }
    }
  }
}

// Keys [j0, j0 + n) of K as B tiles of S = Q K^T: kt[kb][pair][key] (16 keys per block kb, one
// dword = two adjacent head_dim values), zeros past n keys (up to the 32-key padding) and past
// head_dim; V as key pairs [pair][column] with zero pairs past n. Each in kParts parts.
template <int kParts>
void stage_kv_amx(const PrefillTask& t, const PrefillLayoutAmx& L, std::int64_t j0, std::int64_t n) {
  const std::int64_t d = t.head_dim, np = round_up(n, 32), pairs = L.dp / 2;
  const std::int64_t kb_bytes = dtype_bytes(t.k.dtype), vb_bytes = dtype_bytes(t.v.dtype);
  const auto* kbase = static_cast<const char*>(t.k.data) + t.k.offset * kb_bytes;
  const auto* vbase = static_cast<const char*>(t.v.data) + t.v.offset * vb_bytes;
  for (std::int64_t kb = 0; kb < np / 16; ++kb) {
    for (std::int64_t c = 0; c < L.dp; c += 32) {
      __m512i r[kParts][16];
      const __mmask32 m = bf16_mask(d - c);
      for (int i = 0; i < 16; ++i) {
        const std::int64_t j = kb * 16 + i;
        __m512i part[kParts];
        for (int k = 0; k < kParts; ++k) part[k] = _mm512_setzero_si512();
        if (j < n) load_parts32<kParts>(kbase + ((j0 + j) * t.k.row_stride + c) * kb_bytes, t.k.dtype, m, part);
        for (int k = 0; k < kParts; ++k) r[k][i] = part[k];
      }
      for (int k = 0; k < kParts; ++k) {
        transpose_16x16(r[k]);
        std::uint32_t* dst = L.kt[k] + (kb * pairs + c / 2) * 16;
        for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * 16, r[k][i]);
      }
    }
  }
  const __m512i first_16 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i last_16 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (std::int64_t j = 0; j < np; j += 2) {
    for (std::int64_t c = 0; c < L.dp; c += 32) {
      const __mmask32 m = bf16_mask(d - c);
      __m512i a[kParts], b[kParts];
      for (int k = 0; k < kParts; ++k) a[k] = b[k] = _mm512_setzero_si512();
      if (j < n) load_parts32<kParts>(vbase + ((j0 + j) * t.v.row_stride + c) * vb_bytes, t.v.dtype, m, a);
      if (j + 1 < n) load_parts32<kParts>(vbase + ((j0 + j + 1) * t.v.row_stride + c) * vb_bytes, t.v.dtype, m, b);
      for (int k = 0; k < kParts; ++k) {
        // vpunpck*wd pairs columns {0-3, 8-11, ...} and {4-7, 12-15, ...}; two permutes put them in order.
        const __m512i lo = _mm512_unpacklo_epi16(a[k], b[k]), hi = _mm512_unpackhi_epi16(a[k], b[k]);
        std::uint32_t* dst = L.vb[k] + (j / 2) * L.dp + c;
        _mm512_storeu_si512(dst, _mm512_permutex2var_epi32(lo, first_16, hi));
        _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi32(lo, last_16, hi));
      }
    }
  }
}

// 2^t for t <= 0 (scores minus their row max, in log2 units): 2^floor(t) * p(r), r = t - floor(t)
// in [0, 1) from one vreduceps (a round and a subtract are three uops on port 0), the power of
// two from scalef, which takes floor(t) itself. p is degree 4 (the fit for 2^x on [-1/2, 1/2]
// moved to [0, 1); relative error 2.7e-6, far below the bf16 rounding P gets next). No clamp:
// -inf and finite t below -150 give exactly 0 (reduce returns 0 there, scalef underflows), NaN
// stays NaN.
inline V exp2_v(V t) {
  const V r = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  V p = Vec::set1(0.013534166850149632f);
  p = Vec::fma(p, r, Vec::set1(0.052011460065841675f));
  p = Vec::fma(p, r, Vec::set1(0.2414427548646927f));
  p = Vec::fma(p, r, Vec::set1(0.6930038332939148f));
  p = Vec::fma(p, r, Vec::set1(1.0000026226043701f));
  return _mm512_scalef_ps(p, t);
}

// The 2 x 2 block's four products: accumulators 0-3 += A (tiles 4, 5: rows 0-15, 16-31) x B
// (tiles 6, 7: columns 0-15, 16-31).
inline void products_2x2() {
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// S [32][k_lo, k_hi) of head g's rows i0.. = Q K^T (unscaled; keys relative to the tile, multiples
// of 32), in steps of one 32-column chunk of head_dim for a 32 x 32 block (four accumulator
// tiles), so the steps of the next block can be spread through this block's softmax: the tile
// unit and the vector units then work at once. q in kQParts parts, K in kKParts.
template <int kQParts, int kKParts>
struct ScoreSteps {
  static constexpr int kTerms = kQParts > kKParts ? kQParts : kKParts;  // products (a, b) with a + b < kTerms
  const PrefillLayoutAmx* L = nullptr;
  const std::uint16_t* q[kQParts] = {};
  float* s = nullptr;
  std::int64_t jb = 0, k_hi = 0, c = 0;

  ScoreSteps() = default;
  ScoreSteps(const PrefillLayoutAmx& layout, std::int64_t g, std::int64_t i0, std::int64_t k_lo, std::int64_t k_end,
             float* scores)
      : L(&layout), s(scores), jb(k_lo), k_hi(k_end) {
    for (int a = 0; a < kQParts; ++a) q[a] = layout.q[a] + (g * layout.rp + i0) * layout.dp;
  }
  bool done() const { return jb >= k_hi; }
  std::int64_t count() const { return (k_hi - jb) / 32 * (L->dp / 32); }
  void step() {
    if (done()) return;
    const std::int64_t q_stride = L->dp * 2, pairs = L->dp / 2;
    if (c == 0) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int b = 0; b < kKParts; ++b) {
      const std::uint32_t* k0 = L->kt[b] + (jb / 16) * pairs * 16 + c / 2 * 16;
      _tile_loadd(6, k0, 64);
      _tile_loadd(7, k0 + pairs * 16, 64);
      for (int a = 0; a + b < kTerms && a < kQParts; ++a) {
        if (kQParts > 1 || b == 0) {  // one q part stays in tiles 4-5 across the K parts
          _tile_loadd(4, q[a] + c, q_stride);
          _tile_loadd(5, q[a] + 16 * L->dp + c, q_stride);
        }
        products_2x2();
      }
    }
    c += 32;
    if (c == L->dp) {
      float* out = s + jb;
      const std::int64_t s_stride = L->tp * 4;
      _tile_stored(0, out, s_stride);
      _tile_stored(1, out + 16, s_stride);
      _tile_stored(2, out + 16 * L->tp, s_stride);
      _tile_stored(3, out + 16 * L->tp + 16, s_stride);
      c = 0;
      jb += 32;
    }
  }
  void finish() {
    while (!done()) step();
  }
};

struct MaxOp {
  V operator()(V a, V b) const { return Vec::max(a, b); }
};

// The online softmax of head g's rows i0.. over the tile's keys [k_lo, k_hi) (relative to j0; the
// tile has n keys; keys in the lanes, log2 units: m holds each row's max of scale * log2(e) *
// score): the rows' max and sum raised, O rescaled, P rounded to bf16 into pa. `masked`: some row
// of the block misses some key of the range. Rows go 16 at a time, so their maxima, rescale factors
// and sums are vectors (no scalar exp or reduction per row). After each row of the second pass,
// `between` runs (the next block's score steps).
template <int kPParts, class Between>
void softmax_amx(const PrefillTask& t, const PrefillLayoutAmx& L, float* scores, std::int64_t g, std::int64_t i0,
                 std::int64_t j0, std::int64_t n, std::int64_t k_lo, std::int64_t k_hi, bool masked, Between&& between) {
  constexpr float kLog2e = 1.44269504088896341f;
  // Raw scores (no soft-cap, positive scale): the max and the exponent come from S as the tile
  // unit left it, and a 16-key vector is masked only where it crosses an edge (the tile's end, the
  // causal diagonal, the window's start), so most vectors of a masked block cost what unmasked
  // ones do. With a soft-cap, pass 1 rewrites S in log2 units with every mask applied.
  const bool raw = t.softcap <= 0 && t.scale > 0;
  const bool edges = masked || k_hi > n;
  const V c = Vec::set1(t.scale * kLog2e), scale = Vec::set1(t.scale), log2e = Vec::set1(kLog2e);
  const V lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const V neg_inf = Vec::set1(kNegInf);
  // Keys of the vector at tile offset v that row position `pos` sees (all 16 when no edge crosses it).
  // Each edge is taken relative to the vector's first key in integers and clamped to a lane bound,
  // so the lane compares stay exact at any position (an f32 position past 2^24 is not).
  auto visible = [&](std::int64_t v, std::int64_t pos) -> __mmask16 {
    const std::int64_t key0 = j0 + v, first_key = attnkit::detail::window_begin(pos, t.window);
    const bool crosses = key0 + 16 > j0 + n || (t.causal && key0 + 15 > pos) || key0 < first_key;
    if (!crosses) return 0xFFFF;
    auto lanes = [](std::int64_t x) { return Vec::set1(static_cast<float>(std::clamp<std::int64_t>(x, -1, 17))); };
    __mmask16 m = _mm512_cmp_ps_mask(lane, lanes(j0 + n - key0), _CMP_LT_OQ);
    if (t.causal) m &= _mm512_cmp_ps_mask(lane, lanes(pos - key0), _CMP_LE_OQ);
    if (first_key > key0) m &= _mm512_cmp_ps_mask(lane, lanes(first_key - key0), _CMP_GE_OQ);
    return m;
  };
  for (std::int64_t h = 0; h < 32; h += 16) {
    V part[16];
    for (std::int64_t r = 0; r < 16; ++r) {
      float* s = scores + (h + r) * L.tp;
      const std::int64_t pos = t.first_position + i0 + h + r;
      V mx0 = neg_inf, mx1 = neg_inf;
      if (raw && !edges) {
        for (std::int64_t v = k_lo; v < k_hi; v += 32) {
          mx0 = Vec::max(mx0, Vec::load(s + v));
          mx1 = Vec::max(mx1, Vec::load(s + v + 16));
        }
      } else if (raw) {
        for (std::int64_t v = k_lo; v < k_hi; v += 16) {
          mx0 = Vec::max(mx0, _mm512_mask_blend_ps(visible(v, pos), neg_inf, Vec::load(s + v)));
        }
      } else {
        for (std::int64_t v = k_lo; v < k_hi; v += 16) {
          V x = Vec::load(s + v);
          x = t.softcap > 0 ? Vec::mul(softcap_v(Vec::mul(x, scale), t.softcap), log2e) : Vec::mul(x, c);
          Vec::store(s + v, _mm512_mask_blend_ps(visible(v, pos), neg_inf, x));
          mx0 = Vec::max(mx0, Vec::load(s + v));
        }
      }
      part[r] = Vec::max(mx0, mx1);
    }
    V row_max = Vec::transpose_reduce(part, MaxOp{});
    if (raw) row_max = Vec::mul(row_max, c);
    float* m = L.m + g * L.rp + i0 + h;
    float* l = L.l + g * L.rp + i0 + h;
    const V m_old = Vec::load(m), m_new = Vec::max(m_old, row_max);
    const V m_use = usable_max(m_new);  // nothing visible yet: 2^(-inf - 0) = 0
    const V alpha = exp2_v(Vec::sub(m_old, m_use));
    Vec::store(m, m_new);
    alignas(64) float mu[16], a[16];
    Vec::store(mu, m_use);
    Vec::store(a, alpha);
    for (std::int64_t r = 0; r < 16; ++r) {
      const float* s = scores + (h + r) * L.tp;
      const std::int64_t pos = t.first_position + i0 + h + r;
      const std::int64_t p_row = (h + r) * L.tp;
      const V mr = Vec::set1(mu[r]), neg_mc = Vec::set1(-mu[r]);
      V sum0 = Vec::zero(), sum1 = Vec::zero();
      for (std::int64_t v = k_lo; v < k_hi; v += 32) {
        V t0 = Vec::load(s + v), t1 = Vec::load(s + v + 16);
        if (raw) {
          t0 = Vec::fma(t0, c, neg_mc);
          t1 = Vec::fma(t1, c, neg_mc);
        } else {
          t0 = Vec::sub(t0, mr);
          t1 = Vec::sub(t1, mr);
        }
        V p0 = exp2_v(t0), p1 = exp2_v(t1);
        if (raw && edges) {  // masked keys: probability exactly 0
          p0 = _mm512_maskz_mov_ps(visible(v, pos), p0);
          p1 = _mm512_maskz_mov_ps(visible(v + 16, pos), p1);
        }
        sum0 = Vec::add(sum0, p0);
        sum1 = Vec::add(sum1, p1);
        __m512i part[kPParts];
        split_bf16x32<kPParts>(p0, p1, part);
        for (int k = 0; k < kPParts; ++k) _mm512_storeu_si512(L.p[k] + p_row + v, part[k]);
      }
      part[r] = Vec::add(sum0, sum1);
      if (a[r] != 1.0f) {
        float* o = L.o + (g * L.rp + i0 + h + r) * L.dp;
        const V ar = Vec::set1(a[r]);
        for (std::int64_t col = 0; col < L.dp; col += 16) Vec::store(o + col, Vec::mul(Vec::load(o + col), ar));
      }
      between();
    }
    Vec::store(l, Vec::fma(Vec::load(l), alpha, Vec::transpose_sum(part)));
  }
}

// O [32][dp] of head g's rows i0.. += P V over the tile's keys [k_lo, k_hi), 32 x 32 blocks of
// four accumulator tiles, loaded from O and stored back. P and V in kParts parts: the products of
// part pairs (a, b) with a + b < kParts.
template <int kParts>
void pv_amx(const PrefillLayoutAmx& L, std::int64_t g, std::int64_t i0, std::int64_t k_lo, std::int64_t k_hi) {
  const std::int64_t o_stride = L.dp * 4, p_stride = L.tp * 2, v_stride = L.dp * 4;
  for (std::int64_t c0 = 0; c0 < L.dp; c0 += 32) {
    float* o = L.o + (g * L.rp + i0) * L.dp + c0;
    _tile_loadd(0, o, o_stride);
    _tile_loadd(1, o + 16, o_stride);
    _tile_loadd(2, o + 16 * L.dp, o_stride);
    _tile_loadd(3, o + 16 * L.dp + 16, o_stride);
    for (std::int64_t k = k_lo; k < k_hi; k += 32) {
      for (int b = 0; b < kParts; ++b) {
        const std::uint32_t* v = L.vb[b] + (k / 2) * L.dp + c0;
        _tile_loadd(6, v, v_stride);
        _tile_loadd(7, v + 16, v_stride);
        for (int a = 0; a + b < kParts; ++a) {
          if (kParts > 1 || b == 0) {
            _tile_loadd(4, L.p[a] + k, p_stride);
            _tile_loadd(5, L.p[a] + 16 * L.tp + k, p_stride);
          }
          products_2x2();
        }
      }
    }
    _tile_stored(0, o, o_stride);
    _tile_stored(1, o + 16, o_stride);
    _tile_stored(2, o + 16 * L.dp, o_stride);
    _tile_stored(3, o + 16 * L.dp + 16, o_stride);
  }
}

// Per key tile, the (32-row block, head) pairs in turn: scores, softmax, P V, so a block's S (32 x
// tile f32) and P stay in L1 between the three, and the next pair's scores run on the tiles during
// this pair's softmax (two S buffers). A row block takes only the 32-key blocks of the tile that
// some of its rows see (a causal diagonal, a window's edge) and skips a tile it does not see.
template <int kQParts, int kKvParts>
void prefill_amx_typed(const PrefillTask& t) {
  const PrefillLayoutAmx L = prefill_layout_amx(t.head_dim, t.group, t.block_rows, t.tile, t.scratch);
  _tile_loadconfig(&amx_tile_config());
  const BlockKeys keys = block_keys(t);
  start_prefill_state(t, L.rp, L.rp * L.dp, L.o, L.m, L.l, L.s);  // positions unused: keys sit in the lanes here
  stage_q_amx<kQParts>(t, L);
  struct Work {
    std::int64_t i0, g, k_lo, k_hi;
    bool masked;
  };
  thread_local std::vector<Work> work;  // a tile's (row block, head) pairs; this thread's, reused
  for (std::int64_t j0 = keys.lo; j0 < keys.hi; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, keys.hi - j0);
    stage_kv_amx<kKvParts>(t, L, j0, n);
    work.clear();
    for (std::int64_t i0 = 0; i0 < L.rp; i0 += 32) {
      const BlockKeys rk = rows_keys(t, i0, imin(i0 + 32, t.rows));  // padding rows see nothing
      if (rk.lo >= rk.hi || j0 >= rk.hi || j0 + n <= rk.lo) continue;
      const std::int64_t k_lo = imax(0, rk.lo - j0) / 32 * 32, k_hi = round_up(imin(n, rk.hi - j0), 32);
      const bool masked = !(j0 + k_lo >= rk.full_lo && j0 + k_hi <= rk.full_hi);
      for (std::int64_t g = 0; g < t.group; ++g) work.push_back({i0, g, k_lo, k_hi, masked});
    }
    if (work.empty()) continue;
    float* scores[2] = {L.s, L.s + 32 * L.tp};
    ScoreSteps<kQParts, kKvParts>(L, work[0].g, work[0].i0, work[0].k_lo, work[0].k_hi, scores[0]).finish();
    for (std::size_t w = 0; w < work.size(); ++w) {
      const Work& a = work[w];
      ScoreSteps<kQParts, kKvParts> next;
      std::int64_t per_row = 0;
      if (w + 1 < work.size()) {
        const Work& b = work[w + 1];
        next = ScoreSteps<kQParts, kKvParts>(L, b.g, b.i0, b.k_lo, b.k_hi, scores[(w + 1) % 2]);
        per_row = (next.count() + 31) / 32;
      }
      softmax_amx<kKvParts>(t, L, scores[w % 2], a.g, a.i0, j0, n, a.k_lo, a.k_hi, a.masked, [&] {
        for (std::int64_t k = 0; k < per_row; ++k) next.step();
      });
      next.finish();
      pv_amx<kKvParts>(L, a.g, a.i0, a.k_lo, a.k_hi);
    }
  }
  _tile_release();
  // The running max is in log2 units; the writer takes it in natural ones (LSE = m + ln l).
  constexpr float kLn2 = 0.69314718055994531f;
  for (std::int64_t i = 0; i < t.group * L.rp; ++i) L.m[i] *= kLn2;
  write_prefill_result(t, L.o, L.m, L.l, L.rp, L.dp);
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
