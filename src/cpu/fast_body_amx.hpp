// Internal: the prefill body for bf16 K/V on AMX tiles (AMX-BF16: TDPBF16PS multiplies a 16 x 32
// bf16 tile by a 32 x 16 one into a 16 x 16 f32 tile). Included by fast_isa_amx.cpp after
// fast_body.hpp and fast_body_bf16.hpp, in the same namespace (their exp, soft-cap, key range,
// running state and output writer are shared); f32/f16 K/V and decode take the avx512bf16 bodies.
//
// Per task (one sequence, KV head and block of query rows, all heads of the group):
//   Q rows as bf16 [row][head_dim] (an f32/f16 q split into hi + lo bf16 parts, both multiplied,
//     as on avx512bf16), padded with zeros to 32 rows and 32 columns, staged once.
//   Per key tile: K transposed into key-column pairs ([16-key block][head_dim pair][16 keys], the
//     B operand of S = Q K^T, 16 x 16 dword transposes) and V interleaved into key pairs ([key
//     pair][column], the B operand of O += P V; 32-column blocks in vpunpck order, PairColumn).
//   Per head: S [rows][keys] f32 from 2 x 2 blocks of tiles (4 accumulators, 2 Q tiles, 2 K tiles:
//     all 8 tile registers); the online softmax row by row (keys in the lanes), P rounded to bf16
//     [rows][keys] and O rescaled in memory; O += P V, 2 x 2 blocks again, the accumulators loaded
//     from and stored back to O around each tile's keys.
// Numerics: as avx512bf16's prefill (exact Q K^T products, f32 sums, P rounded to bf16 before P V,
//   the softmax sum from the unrounded P).
// Bound: TDPBF16PS issue plus the per-row softmax (exp of every score) on AVX-512.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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

struct PrefillLayoutAmx {
  std::int64_t dp, rp, tp;  // head_dim, rows and tile keys, each padded to 32
  std::uint16_t *qh, *ql, *pa;
  std::uint32_t *kt, *vb;
  float *s, *o, *m, *l;
};

inline PrefillLayoutAmx prefill_layout_amx(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                           std::int64_t tile, float* base) {
  PrefillLayoutAmx L{};
  L.dp = round_up(head_dim, 32);
  L.rp = round_up(block_rows, 32);
  L.tp = round_up(tile, 32);
  float* f = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(base) + 63) / 64 * 64);
  L.qh = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.rp * L.dp / 2);
  L.ql = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.rp * L.dp / 2);
  L.kt = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp * L.dp / 2);
  L.vb = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp / 2 * L.dp);
  L.pa = reinterpret_cast<std::uint16_t*>(f); f += floats_for(32 * L.tp / 2);
  L.s = f; f += floats_for(imax(32 * L.tp, L.rp));  // also the rows' positions at the start
  L.o = f; f += floats_for(group * L.rp * L.dp);
  L.m = f; f += floats_for(group * L.rp);
  L.l = f;
  return L;
}

inline std::size_t prefill_scratch_floats_amx(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                              std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, 32), rp = round_up(block_rows, 32), tp = round_up(tile, 32);
  return 2 * floats_for(group * rp * dp / 2) + floats_for(tp * dp / 2) + floats_for(tp / 2 * dp) +
         floats_for(32 * tp / 2) + floats_for(imax(32 * tp, rp)) + floats_for(group * rp * dp) + 2 * floats_for(group * rp) +
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

// Query rows of the group as bf16 [g][rp][dp] (hi) and their remainders (lo, split only).
template <bool kSplit>
void stage_q_amx(const PrefillTask& t, const PrefillLayoutAmx& L) {
  const std::int64_t d = t.head_dim;
  for (std::int64_t g = 0; g < t.group; ++g) {
    for (std::int64_t i = 0; i < L.rp; ++i) {
      std::uint16_t* hi = L.qh + (g * L.rp + i) * L.dp;
      std::uint16_t* lo = L.ql + (g * L.rp + i) * L.dp;
      if (i >= t.rows) {
        std::memset(hi, 0, static_cast<std::size_t>(L.dp) * 2);
        if (kSplit) std::memset(lo, 0, static_cast<std::size_t>(L.dp) * 2);
        continue;
      }
      const std::int64_t row = t.q.offset + g * t.q.head_stride + i * t.q.row_stride;
      for (std::int64_t c = 0; c < L.dp; c += 16) {
        const __mmask16 m = static_cast<__mmask16>(bf16_mask(d - c));
        if constexpr (!kSplit) {
          const auto* q = static_cast<const std::uint16_t*>(t.q.data) + row + c;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + c), _mm256_maskz_loadu_epi16(m, q));
        } else {
          __m512 x;
          if (t.q.dtype == DType::kF32) {
            x = _mm512_maskz_loadu_ps(m, static_cast<const float*>(t.q.data) + row + c);
          } else {  // f16
            x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(t.q.data) + row + c));
          }
          const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
          const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + c), h);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + c), (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, back)));
        }
      }
    }
  }
}

// Keys [j0, j0 + n) of K as B tiles of S = Q K^T: kt[kb][pair][key] (16 keys per block kb, one
// dword = two adjacent head_dim values), zeros past n keys (up to the 32-key padding) and past
// head_dim; V as key pairs [pair][column] with zero pairs past n.
inline void stage_kv_amx(const PrefillTask& t, const PrefillLayoutAmx& L, std::int64_t j0, std::int64_t n) {
  const std::int64_t d = t.head_dim, np = round_up(n, 32), pairs = L.dp / 2;
  const auto* kbase = static_cast<const std::uint16_t*>(t.k.data) + t.k.offset;
  const auto* vbase = static_cast<const std::uint16_t*>(t.v.data) + t.v.offset;
  for (std::int64_t kb = 0; kb < np / 16; ++kb) {
    for (std::int64_t c = 0; c < L.dp; c += 32) {
      __m512i r[16];
      const __mmask32 m = bf16_mask(d - c);
      for (int i = 0; i < 16; ++i) {
        const std::int64_t j = kb * 16 + i;
        r[i] = j < n ? _mm512_maskz_loadu_epi16(m, kbase + (j0 + j) * t.k.row_stride + c) : _mm512_setzero_si512();
      }
      transpose_16x16(r);
      std::uint32_t* dst = L.kt + (kb * pairs + c / 2) * 16;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * 16, r[i]);
    }
  }
  for (std::int64_t j = 0; j < np; j += 2) {
    std::uint32_t* dst = L.vb + (j / 2) * L.dp;
    for (std::int64_t c = 0; c < L.dp; c += 32) {
      const __mmask32 m = bf16_mask(d - c);
      const __m512i a = j < n ? _mm512_maskz_loadu_epi16(m, vbase + (j0 + j) * t.v.row_stride + c) : _mm512_setzero_si512();
      const __m512i b =
          j + 1 < n ? _mm512_maskz_loadu_epi16(m, vbase + (j0 + j + 1) * t.v.row_stride + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_unpacklo_epi16(a, b));
      _mm512_storeu_si512(dst + c + 16, _mm512_unpackhi_epi16(a, b));
    }
  }
}

// 2^t for t <= 0 (scores minus their row max, in log2 units): 2^n * p(r), r = t - n, |r| <= 1/2,
// p the degree-6 Taylor polynomial of e^(r ln 2) (relative error ~1.2e-7); exactly 0 below -200
// (masked keys are -inf), and NaN stays NaN (max returns its second operand for NaN).
inline V exp2_v(V t) {
  t = _mm512_max_ps(Vec::set1(-200.0f), t);
  const V n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT);
  const V r = Vec::sub(t, n);
  V p = Vec::set1(1.5403530393381608e-4f);
  p = Vec::fma(p, r, Vec::set1(1.3333558146428443e-3f));
  p = Vec::fma(p, r, Vec::set1(9.6181291076284772e-3f));
  p = Vec::fma(p, r, Vec::set1(5.5504108664821580e-2f));
  p = Vec::fma(p, r, Vec::set1(2.4022650695910071e-1f));
  p = Vec::fma(p, r, Vec::set1(6.9314718055994531e-1f));
  p = Vec::fma(p, r, Vec::set1(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Keys that rows [i0, i0 + 32) of the block see, [lo, hi) (their union), and that all of them see,
// [full_lo, full_hi) (padding rows past t.rows see nothing and constrain nothing).
inline BlockKeys row_block_keys(const PrefillTask& t, std::int64_t i0) {
  BlockKeys k{t.kv_len, 0, 0, t.kv_len};
  for (std::int64_t i = i0; i < imin(i0 + 32, t.rows); ++i) {
    const KeyRange r = visible_keys(t.first_position + i, t.kv_len, t.causal, t.window);
    if (r.size() > 0) {
      k.lo = imin(k.lo, r.begin);
      k.hi = imax(k.hi, r.end);
    }
    k.full_lo = imax(k.full_lo, r.begin);
    k.full_hi = imin(k.full_hi, r.end);
  }
  return k;
}

// S [32][k_lo, k_hi) of head g's rows i0.. = Q K^T (unscaled; keys relative to the tile, multiples
// of 32): 32 x 32 blocks of four accumulator tiles.
template <bool kSplit>
void scores_amx(const PrefillLayoutAmx& L, std::int64_t g, std::int64_t i0, std::int64_t k_lo, std::int64_t k_hi) {
  const std::int64_t q_stride = L.dp * 2, pairs = L.dp / 2, s_stride = L.tp * 4;
  const std::uint16_t* qh = L.qh + (g * L.rp + i0) * L.dp;
  const std::uint16_t* ql = L.ql + (g * L.rp + i0) * L.dp;
  for (std::int64_t jb = k_lo; jb < k_hi; jb += 32) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const std::uint32_t* k0 = L.kt + (jb / 16) * pairs * 16;
    const std::uint32_t* k1 = k0 + pairs * 16;
    for (std::int64_t c = 0; c < L.dp; c += 32) {
      _tile_loadd(6, k0 + c / 2 * 16, 64);
      _tile_loadd(7, k1 + c / 2 * 16, 64);
      _tile_loadd(4, qh + c, q_stride);
      _tile_loadd(5, qh + 16 * L.dp + c, q_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
      if constexpr (kSplit) {
        _tile_loadd(4, ql + c, q_stride);
        _tile_loadd(5, ql + 16 * L.dp + c, q_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    float* s = L.s + jb;
    _tile_stored(0, s, s_stride);
    _tile_stored(1, s + 16, s_stride);
    _tile_stored(2, s + 16 * L.tp, s_stride);
    _tile_stored(3, s + 16 * L.tp + 16, s_stride);
  }
}

// The online softmax of head g's rows i0.. over the tile's keys [k_lo, k_hi) (relative to j0; the
// tile has n keys; keys in the lanes, log2 units: m holds each row's max of scale * log2(e) *
// score): the rows' max and sum raised, O rescaled, P rounded to bf16 into pa. `masked`: some row
// of the block misses some key of the range.
inline void softmax_amx(const PrefillTask& t, const PrefillLayoutAmx& L, std::int64_t g, std::int64_t i0,
                        std::int64_t j0, std::int64_t n, std::int64_t k_lo, std::int64_t k_hi, bool masked) {
  constexpr float kLog2e = 1.44269504088896341f;
  const bool plain = !masked && k_hi <= n && t.softcap <= 0 && t.scale > 0;  // max of raw scores, no pass over S
  const V c = Vec::set1(t.scale * kLog2e), scale = Vec::set1(t.scale), log2e = Vec::set1(kLog2e);
  const V lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const V neg_inf = Vec::set1(kNegInf);
  const V key_end = Vec::set1(static_cast<float>(j0 + n));
  for (std::int64_t i = 0; i < 32; ++i) {
    float* s = L.s + i * L.tp;
    V mx = neg_inf;
    float row_max;
    if (plain) {
      for (std::int64_t v = k_lo; v < k_hi; v += 16) mx = Vec::max(mx, Vec::load(s + v));
      row_max = Vec::reduce_max(mx) * (t.scale * kLog2e);
    } else {
      const V pos = Vec::set1(static_cast<float>(t.first_position + i0 + i));
      for (std::int64_t v = k_lo; v < k_hi; v += 16) {
        V x = Vec::load(s + v);
        x = t.softcap > 0 ? Vec::mul(softcap_v(Vec::mul(x, scale), t.softcap), log2e) : Vec::mul(x, c);
        const V key = Vec::add(Vec::set1(static_cast<float>(j0 + v)), lane);
        x = Vec::select_lt(key, key_end, x, neg_inf);  // padding keys past the tile
        if (t.causal) x = Vec::select_lt(pos, key, neg_inf, x);
        if (t.window > 0) x = Vec::select_lt(key, Vec::add(pos, Vec::set1(static_cast<float>(1 - t.window))), neg_inf, x);
        Vec::store(s + v, x);
        mx = Vec::max(mx, x);
      }
      row_max = Vec::reduce_max(mx);
    }
    float& m = L.m[g * L.rp + i0 + i];
    float& l = L.l[g * L.rp + i0 + i];
    const float m_new = std::fmax(m, row_max);
    const float m_use = m_new < -3.0e38f ? 0.0f : m_new;  // nothing visible yet: 2^(-inf - 0) = 0
    const float alpha = std::exp2(m - m_use);
    const V mu = Vec::set1(m_use);
    V sum = Vec::zero();
    std::uint16_t* p = L.pa + i * L.tp;
    for (std::int64_t v = k_lo; v < k_hi; v += 32) {
      V t0 = Vec::load(s + v), t1 = Vec::load(s + v + 16);
      if (plain) {
        t0 = Vec::fma(t0, c, Vec::sub(Vec::zero(), mu));
        t1 = Vec::fma(t1, c, Vec::sub(Vec::zero(), mu));
      } else {
        t0 = Vec::sub(t0, mu);
        t1 = Vec::sub(t1, mu);
      }
      const V p0 = exp2_v(t0), p1 = exp2_v(t1);
      sum = Vec::add(sum, Vec::add(p0, p1));
      _mm512_storeu_si512(p + v, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    }
    l = l * alpha + Vec::reduce_add(sum);
    m = m_new;
    if (alpha != 1.0f) {
      float* o = L.o + (g * L.rp + i0 + i) * L.dp;
      const V a = Vec::set1(alpha);
      for (std::int64_t col = 0; col < L.dp; col += 16) Vec::store(o + col, Vec::mul(Vec::load(o + col), a));
    }
  }
}

// O [32][dp] of head g's rows i0.. += P V over the tile's keys [k_lo, k_hi), 32 x 32 blocks of
// four accumulator tiles, loaded from O and stored back.
inline void pv_amx(const PrefillLayoutAmx& L, std::int64_t g, std::int64_t i0, std::int64_t k_lo, std::int64_t k_hi) {
  const std::int64_t o_stride = L.dp * 4, p_stride = L.tp * 2, v_stride = L.dp * 4;
  for (std::int64_t c0 = 0; c0 < L.dp; c0 += 32) {
    float* o = L.o + (g * L.rp + i0) * L.dp + c0;
    _tile_loadd(0, o, o_stride);
    _tile_loadd(1, o + 16, o_stride);
    _tile_loadd(2, o + 16 * L.dp, o_stride);
    _tile_loadd(3, o + 16 * L.dp + 16, o_stride);
    for (std::int64_t k = k_lo; k < k_hi; k += 32) {
      const std::uint32_t* v = L.vb + (k / 2) * L.dp + c0;
      _tile_loadd(6, v, v_stride);
      _tile_loadd(7, v + 16, v_stride);
      _tile_loadd(4, L.pa + k, p_stride);
      _tile_loadd(5, L.pa + 16 * L.tp + k, p_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, o, o_stride);
    _tile_stored(1, o + 16, o_stride);
    _tile_stored(2, o + 16 * L.dp, o_stride);
    _tile_stored(3, o + 16 * L.dp + 16, o_stride);
  }
}

// Per key tile and head, each 32-row block in turn: scores, softmax, P V, so its S (32 x tile f32)
// and P stay in L1 between the three. A row block takes only the 32-key blocks of the tile that
// some of its rows see (a causal diagonal, a window's edge) and skips a tile it does not see.
template <bool kSplit>
void prefill_amx_typed(const PrefillTask& t) {
  const PrefillLayoutAmx L = prefill_layout_amx(t.head_dim, t.group, t.block_rows, t.tile, t.scratch);
  _tile_loadconfig(&amx_tile_config());
  const BlockKeys keys = block_keys(t);
  start_prefill_state(t, L.rp, L.dp, L.o, L.m, L.l, L.s);  // positions unused: keys sit in the lanes here
  stage_q_amx<kSplit>(t, L);
  for (std::int64_t j0 = keys.lo; j0 < keys.hi; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, keys.hi - j0);
    stage_kv_amx(t, L, j0, n);
    for (std::int64_t i0 = 0; i0 < L.rp; i0 += 32) {
      const BlockKeys rk = row_block_keys(t, i0);
      if (rk.lo >= rk.hi || j0 >= rk.hi || j0 + n <= rk.lo) continue;
      const std::int64_t k_lo = imax(0, rk.lo - j0) / 32 * 32, k_hi = round_up(imin(n, rk.hi - j0), 32);
      const bool masked = !(j0 + k_lo >= rk.full_lo && j0 + k_hi <= rk.full_hi);
      for (std::int64_t g = 0; g < t.group; ++g) {
        scores_amx<kSplit>(L, g, i0, k_lo, k_hi);
        softmax_amx(t, L, g, i0, j0, n, k_lo, k_hi, masked);
        pv_amx(L, g, i0, k_lo, k_hi);
      }
    }
  }
  _tile_release();
  // The running max is in log2 units; the writer takes it in natural ones (LSE = m + ln l).
  constexpr float kLn2 = 0.69314718055994531f;
  for (std::int64_t i = 0; i < t.group * L.rp; ++i) L.m[i] *= kLn2;
  write_prefill_result(t, L.o, L.m, L.l, L.rp, L.dp, PairColumn{});
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
