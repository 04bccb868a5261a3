// Internal: the bf16 decode body for groups that are a multiple of 4 (llama3-8b's group 4, and
// 8, 12, ...): the query heads in blocks of 4, each block a register-resident pass over the tile.
// Included by fast_isa_avx512bf16.cpp after fast_body_bf16.hpp and fast_body_rows4.hpp (same
// namespace; split q, the bf16 helpers and the pair-interleaved output order come from the first,
// prefetch, the [key][head] softmax steps and the f32-arithmetic body for other dtypes from the
// second).
//
// Inputs: a DecodeTask with bf16 K/V (head_dim contiguous, any row stride), q of any dtype.
// Layout: scores of a tile as [key][4 heads] f32 (one 16-lane vector = 4 keys x 4 heads, the
//   order the transposed score sums come out in, so no permute and no per-head stores); P as
//   [key pair][4 heads] bf16 pairs (one vpermw per 4 keys); accumulators [head][head_dim] in
//   32-column blocks of key-pair interleave order (PairColumn), as in fast_body_bf16.hpp.
// Parallelism: one task per thread; per tile and block of 4 heads:
//   Q K^T: 4 keys x 4 heads = 16 accumulators over head_dim (vdpbf16ps, q from L1), one
//     transpose-and-add tree per 4 keys (11 shuffle/add ops per key instead of per-key sums);
//   softmax over the tile in the [key][head] layout, the rescale of the accumulators once per tile;
//   P V: 4 heads x 64 columns = 16 accumulators in registers, two V rows interleaved per key pair
//     and reused by the 4 heads, head_dim taken in 64-column passes (each V element is loaded and
//     interleaved once); on the amx level P stays f32 and P V runs on FMAs over even / odd
//     columns instead (the Units policy below: vdpbf16ps issues at a quarter of the FMA rate there).
// Prefetch as the f32 row-block body (fast_body_rows4.hpp): rows kRows4PrefetchRows ahead into
//   L1, V during Q K^T and the next tile's K (whole rows, spread over the P V passes) into L2.
// Head_dim 128 has its own instance (kD = 128): the chunk loops and every prefetch are unrolled
//   and the K rows are walked with one pointer, 165 -> ~125 instructions per key and KV head
//   (cache-resident on one Zen 5 core 46 -> 39 cycles; docs/perf-notes.md, CPU round 8).
// Bound: memory on the development VM (two threads: within 0-7% of the multi-head rows). The body
//   alone: 16.4 ns per key per KV head at group 4 on one Zen 4 core, cache-resident, against a
//   vdpbf16ps floor of 8.7 ns (32 per key, one per cycle); the instruction mixes without memory
//   operands run 5.2 (Q K^T with its tree) + 4.5 ns (P V with its interleave), the rest is loads,
//   prefetches and loop control. See docs/perf-notes.md, CPU rounds 5-6.

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

struct DecodeLayoutRows4 {
  std::int64_t dp, tp;  // head_dim padded to 32; tile padded to 8 keys
  std::uint16_t *qh, *ql;
  std::uint32_t* pp;  // [tp / 2][4]
  std::uint32_t* qt;  // q's column pairs as tile operands (the amx level's scores; group * dp / 2)
  float *acc, *s, *m, *l;  // acc [group][dp], s [tp][4], m and l [group]
};

inline DecodeLayoutRows4 decode_layout_rows4(std::int64_t head_dim, std::int64_t group, std::int64_t tile, float* base) {
  DecodeLayoutRows4 L{};
  L.dp = round_up(head_dim, kPairChunk);
  L.tp = round_up(tile, 8);
  float* f = base;
  L.qh = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.ql = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.pp = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp / 2 * 4);
  L.qt = reinterpret_cast<std::uint32_t*>(f); f += floats_for(group * L.dp / 2);
  L.acc = f; f += floats_for(group * L.dp);
  L.s = f; f += floats_for(L.tp * 4);
  L.m = f; f += floats_for(group);
  L.l = f;
  return L;
}

inline std::size_t decode_scratch_floats_rows4(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, kPairChunk), tp = round_up(tile, 8);
  return 3 * floats_for(group * dp / 2) + floats_for(tp / 2 * 4) + floats_for(group * dp) + floats_for(tp * 4) +
         2 * floats_for(group) + 16;
}

inline bool uses_rows4(const DecodeTask& t) {
  return t.group % 4 == 0 && t.k.dtype == DType::kBF16 && t.v.dtype == DType::kBF16;
}

// acc[kk * 4 + g] += K[key kk][c, c + 32) . q[head g][c, c + 32) (masked to `tail` if kTail).
template <bool kSplit, bool kTail>
inline __attribute__((always_inline)) void score_chunk_rows4(V* acc, const std::uint16_t* const* kr,
                                                             const std::uint16_t* qh, const std::uint16_t* ql,
                                                             std::int64_t dp, std::int64_t c, __mmask32 tail) {
#pragma GCC unroll 4
  for (int kk = 0; kk < 4; ++kk) {
    const P16 kv = kTail ? _mm512_maskz_loadu_epi16(tail, kr[kk] + c) : _mm512_loadu_si512(kr[kk] + c);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      acc[kk * 4 + g] = B16::dot(acc[kk * 4 + g], _mm512_loadu_si512(qh + g * dp + c), kv);
      if constexpr (kSplit) acc[kk * 4 + g] = B16::dot(acc[kk * 4 + g], _mm512_loadu_si512(ql + g * dp + c), kv);
    }
  }
}

// The scores of the 4 keys at rows kr for heads [h0, h0 + 4), stored at s as [key][head].
template <bool kSplit, int kD>
inline __attribute__((always_inline)) void score_keys4_rows4(const DecodeTask& t, const std::uint16_t* const* kr,
                                                             const std::uint16_t* qh, const std::uint16_t* ql,
                                                             std::int64_t dp, float* s) {
  const std::int64_t d = head_dim_of<kD>(t), full = d / kPairChunk * kPairChunk;
  const __mmask32 tail = B16::tail32(static_cast<int>(d - full));
  V acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = Vec::zero();
  // Whole 32-column chunks with plain loads (a masked load issues ~40% slower on Zen 4), then
  // the partial one, if any.
#pragma GCC unroll 8
  for (std::int64_t c = 0; c < full; c += kPairChunk) score_chunk_rows4<kSplit, false>(acc, kr, qh, ql, dp, c, tail);
  if (full < d) score_chunk_rows4<kSplit, true>(acc, kr, qh, ql, dp, full, tail);
  // Lane kk * 4 + g = (key kk, head g): the [key][head] layout itself.
  Vec::store(s, Vec::transpose_sum(acc));
}

// Scores of keys [j0, j0 + n) for heads [h0, h0 + 4) into L.s as [key][head], unscaled. Keys past
// n (up to a multiple of 4) repeat the last key; the softmax masks them. Whole steps of 4 keys
// walk one row pointer; only the last partial step clamps its rows.
template <bool kSplit, int kD>
void scores_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t j0, std::int64_t n,
                  bool prefetch) {
  constexpr std::int64_t kRowBytes = kD * 2;  // 0: not known at compile time
  const std::int64_t d = head_dim_of<kD>(t), stride = t.k.row_stride, last = t.key_end - 1;
  const std::uint16_t* kdata = static_cast<const std::uint16_t*>(t.k.data);
  const std::uint16_t* kbase = kdata;
  const std::uint16_t* qh = L.qh + h0 * L.dp;
  const std::uint16_t* ql = L.ql + h0 * L.dp;
  const PrefetchRows pk(t.k, 2, 0, d * 2, last, j0), pv(t.v, 2, 0, d * 2, last, j0);
  const std::int64_t run = rows_per_run(t.k, n);
  std::int64_t j = 0;
  // Whole steps run by run (a page's rows of a paged K; every run but the last is whole steps).
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    kbase = kdata + run_offset(t.k, j0, r0);
    for (const std::int64_t r1 = imin(n, r0 + run); j + 4 <= r1; j += 4) {
      if (prefetch) {
        if (t.l1_prefetch) pk.rows<3, 4, kRowBytes>(j0 + j + kRows4PrefetchRows);
        pv.rows<2, 4, kRowBytes>(j0 + j);
      }
      const std::uint16_t* k0 = kbase + j * stride;
      const std::uint16_t* kr[4] = {k0, k0 + stride, k0 + 2 * stride, k0 + 3 * stride};
      score_keys4_rows4<kSplit, kD>(t, kr, qh, ql, L.dp, L.s + j * 4);
    }
  }
  if (j < n) {
    if (prefetch) {
      if (t.l1_prefetch) pk.rows<3, 4>(j0 + j + kRows4PrefetchRows);
      pv.rows<2, 4>(j0 + j);
    }
    const std::uint16_t* kr[4];
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; ++kk) kr[kk] = kbase + imin(j + kk, n - 1) * stride;
    score_keys4_rows4<kSplit, kD>(t, kr, qh, ql, L.dp, L.s + j * 4);
  }
}

// Which units run a tile's Q K^T and P V, and how far ahead P V fetches V rows into L1: here the
// vector unit's vdpbf16ps for both; the amx level passes its own (fast_body_amx_decode.hpp: the
// scores on the tiles, P V on FMAs). begin / end bracket a task.
struct VectorUnits {
  static constexpr bool kPvOnFma = false;
  static std::int64_t v_prefetch_rows(const DecodeTask&) { return kRows4PrefetchRows; }
  static void begin(const DecodeTask&, const DecodeLayoutRows4&) {}
  static void end() {}
  template <bool kSplit, int kD>
  static void scores(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t j0, std::int64_t n,
                     bool prefetch) {
    scores_rows4<kSplit, kD>(t, L, h0, j0, n, prefetch);
  }
};

// The tile's online softmax for heads [h0, h0 + 4): P into L.pp as key pairs (vdpbf16ps P V) or
// in place in L.s as f32 (kF32P: FMA P V), m and l updated, the heads' accumulators rescaled once.
template <bool kF32P>
void softmax_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t n) {
  const std::int64_t vectors = (n + 3) / 4;
  for (std::int64_t v = 0; v < vectors; ++v) {
    Vec::store(L.s + v * 16, finish_scores_rows4(Vec::load(L.s + v * 16), t.scale, t.softcap, v, n));
  }
  float alpha[4];
  const V mv = raise_max_rows4(L.s, vectors, L.m + h0, L.acc + h0 * L.dp, L.dp, alpha);
  // Word 2g + t of each 4-word group b -> key 2b + t, head g: (p_j, p_j+1) pairs per head.
  alignas(32) static constexpr std::int16_t kPairOrder[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
  const __m256i pair_order = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairOrder));
  V sum = Vec::zero();
  for (std::int64_t v = 0; v < vectors; ++v) {
    const V e = Vec::exp(Vec::sub(Vec::load(L.s + v * 16), mv));
    sum = Vec::add(sum, e);
    if constexpr (kF32P) {
      Vec::store(L.s + v * 16, e);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(L.pp + v * 8), _mm256_permutexvar_epi16(pair_order, B16::to_bf16(e)));
    }
  }
  fold_sums_rows4(sum, alpha, L.l + h0);
}

// FMA P V of one key: acc[g] += p[g] * V row r's 32-column blocks, each split into its even and
// odd columns (one load and two ops per block, used by the 4 heads). width: the block's columns
// (< 32 only in a tail pass).
template <int CB, bool kTail>
inline __attribute__((always_inline)) void pv_key_fma(V (&acc)[4][2 * CB], const std::uint16_t* r, const float* p,
                                                      const int* width) {
  V even[CB], odd[CB];
#pragma GCC unroll 4
  for (int b = 0; b < CB; ++b) Vec::load_bf16_even_odd(r + b * kPairChunk, kTail ? width[b] : kPairChunk, even[b], odd[b]);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const V pb = Vec::set1(p[g]);
#pragma GCC unroll 4
    for (int b = 0; b < CB; ++b) {
      acc[g][2 * b] = Vec::fma(pb, even[b], acc[g][2 * b]);
      acc[g][2 * b + 1] = Vec::fma(pb, odd[b], acc[g][2 * b + 1]);
    }
  }
}

// acc[h0..h0+4) += P V over keys [j0, j0 + n) for the 32-column blocks [b0, b0 + CB): 4 x 2CB
// accumulators in registers. vdpbf16ps (kFma false): key pairs interleaved once and used by the 4
// heads, accumulators in PairColumn order; FMA: P in f32, V split into even / odd columns
// (EvenOddColumn order). kD: head_dim when known at compile time, 0 if not. V rows are fetched
// into L1 v_ahead rows ahead.
template <int CB, bool kTail, int kD, bool kFma>
void pv_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t b0, std::int64_t j0,
              std::int64_t n, bool prefetch, std::int64_t pass, std::int64_t passes, std::int64_t v_ahead) {
  const std::int64_t d = head_dim_of<kD>(t), stride = t.v.row_stride, last = t.key_end - 1;
  __mmask32 mask[CB];
  int width[CB];
#pragma GCC unroll 4
  for (int b = 0; b < CB; ++b) {
    width[b] = static_cast<int>(imin(kPairChunk, d - (b0 + b) * kPairChunk));
    mask[b] = B16::tail32(width[b]);
  }
  V acc[4][2 * CB];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * CB; ++v) acc[g][v] = Vec::load(L.acc + (h0 + g) * L.dp + b0 * kPairChunk + v * W);
  const std::uint16_t* ra = static_cast<const std::uint16_t*>(t.v.data) + row_offset(t.v, j0) + b0 * kPairChunk;
  const std::uint32_t* pp = L.pp;
  // This pass's columns of the V rows ahead into L1, and its share of the next tile's K rows into
  // L2 as whole rows in key order: every pass keeps the DRAM stream going (only the first pass
  // fetching K left it idle during the others), and each row is fetched in one piece (3-8% faster
  // than each pass fetching its columns of every row; docs/perf-notes.md, CPU round 6).
  const std::int64_t pf_from = b0 * kPairChunk * 2, pf_bytes = imin(CB * kPairChunk, d - b0 * kPairChunk) * 2;
  const PrefetchRows pv(t.v, 2, pf_from, pf_bytes, last, j0), pk(t.k, 2, 0, d * 2, last, j0);
  // With head_dim known, so are the byte counts and the passes: each prefetch is one instruction,
  // and the next tile's K rows of a key step follow from the step (no credit counter).
  constexpr std::int64_t kVBytes = kD > 0 && !kTail ? CB * kPairChunk * 2 : 0, kKBytes = kD * 2;
  constexpr std::int64_t kPasses = kD > 0 ? (round_up(kD, kPairChunk) / kPairChunk + 1) / 2 : 0;
  const std::int64_t k_end = j0 + n + (pass + 1) * n / passes;
  std::int64_t k_next = j0 + n + pass * n / passes, k_credit = 0;
  const std::int64_t k_rows = k_end - k_next;
  // Key pairs run by run (a page's rows of a paged V; every run but the last is whole pairs).
  const std::int64_t run = rows_per_run(t.v, n);
  std::int64_t j = 0;
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    if (r0 > 0) ra = static_cast<const std::uint16_t*>(t.v.data) + row_offset(t.v, j0 + r0) + b0 * kPairChunk;
    for (const std::int64_t r1 = imin(n, r0 + run); j + 1 < r1; j += 2, ra += 2 * stride, pp += 4) {
      if (prefetch) {
        if (t.l1_prefetch) pv.rows<3, 2, kVBytes>(j0 + j + v_ahead);
        if constexpr (kPasses > 0) {
          // Keys [pass * n + j, pass * n + j + 2) of the passes' joint walk, scaled to one tile.
          for (std::int64_t r = (pass * n + j) / kPasses; r < (pass * n + j + 2) / kPasses; ++r) {
            pk.rows<2, 1, kKBytes>(j0 + n + r);
          }
        } else {
          // k_rows rows over n keys, two keys per step: one whenever the credit reaches n.
          k_credit += 2 * k_rows;
          while (k_credit >= n && k_next < k_end) {
            pk.rows<2, 1>(k_next++);
            k_credit -= n;
          }
        }
      }
      if constexpr (kFma) {
        pv_key_fma<CB, kTail>(acc, ra, L.s + j * 4, width);
        pv_key_fma<CB, kTail>(acc, ra + stride, L.s + j * 4 + 4, width);
        continue;
      }
      P16 lo[CB], hi[CB];
#pragma GCC unroll 4
      for (int b = 0; b < CB; ++b) {
        const P16 va = kTail ? _mm512_maskz_loadu_epi16(mask[b], ra + b * kPairChunk) : _mm512_loadu_si512(ra + b * kPairChunk);
        const P16 vb = kTail ? _mm512_maskz_loadu_epi16(mask[b], ra + stride + b * kPairChunk)
                             : _mm512_loadu_si512(ra + stride + b * kPairChunk);
        B16::interleave(va, vb, lo[b], hi[b]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const P16 pb = B16::broadcast_pair(pp[g]);
#pragma GCC unroll 4
        for (int b = 0; b < CB; ++b) {
          acc[g][2 * b] = B16::dot(acc[g][2 * b], pb, lo[b]);
          acc[g][2 * b + 1] = B16::dot(acc[g][2 * b + 1], pb, hi[b]);
        }
      }
    }
  }
  if constexpr (kFma) {
    if (j < n) pv_key_fma<CB, true>(acc, ra, L.s + j * 4, width);  // a lone last key
  } else if (j < n) {  // a lone last key: its pair partner is a zero row (and its p is 0)
    P16 lo[CB], hi[CB];
#pragma GCC unroll 4
    for (int b = 0; b < CB; ++b) {
      B16::interleave(_mm512_maskz_loadu_epi16(mask[b], ra + b * kPairChunk), _mm512_setzero_si512(), lo[b], hi[b]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const P16 pb = B16::broadcast_pair(pp[g]);
#pragma GCC unroll 4
      for (int b = 0; b < CB; ++b) {
        acc[g][2 * b] = B16::dot(acc[g][2 * b], pb, lo[b]);
        acc[g][2 * b + 1] = B16::dot(acc[g][2 * b + 1], pb, hi[b]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * CB; ++v) Vec::store(L.acc + (h0 + g) * L.dp + b0 * kPairChunk + v * W, acc[g][v]);
}

template <bool kSplit, int kD, class Units>
void decode_rows4_typed(const DecodeTask& t) {
  constexpr bool kFma = Units::kPvOnFma;
  const DecodeLayoutRows4 L = decode_layout_rows4(t.head_dim, t.group, t.tile, t.scratch);
  const std::int64_t G = t.group, d = head_dim_of<kD>(t), blocks = L.dp / kPairChunk;
  start_bf16_rows(t, L);
  const std::int64_t v_ahead = Units::v_prefetch_rows(t);
  Units::begin(t, L);
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, t.key_end - j0);
    for (std::int64_t h0 = 0; h0 < G; h0 += 4) {
      const bool prefetch = h0 == 0;  // later blocks of the group read the tile from cache
      Units::template scores<kSplit, kD>(t, L, h0, j0, n, prefetch);
      softmax_rows4<kFma>(t, L, h0, n);
      std::int64_t b0 = 0;
      const std::int64_t passes = blocks / 2 + blocks % 2;
      std::int64_t pass = 0;
      // Passes of 64 columns (the last may be 32); only a pass that reaches past head_dim masks.
      for (; b0 + 2 <= blocks; b0 += 2) {
        if ((b0 + 2) * kPairChunk <= d) pv_rows4<2, false, kD, kFma>(t, L, h0, b0, j0, n, prefetch, pass++, passes, v_ahead);
        else pv_rows4<2, true, kD, kFma>(t, L, h0, b0, j0, n, prefetch, pass++, passes, v_ahead);
      }
      if (b0 < blocks) {
        if ((b0 + 1) * kPairChunk <= d) pv_rows4<1, false, kD, kFma>(t, L, h0, b0, j0, n, prefetch, pass++, passes, v_ahead);
        else pv_rows4<1, true, kD, kFma>(t, L, h0, b0, j0, n, prefetch, pass++, passes, v_ahead);
      }
    }
  }
  Units::end();
  if constexpr (kFma) {
    write_decode_result(t, L.acc, L.dp, L.m, L.l, EvenOddColumn{});
  } else {
    write_decode_result(t, L.acc, L.dp, L.m, L.l, PairColumn{});
  }
}

// Head_dim 128 (llama, mistral, qwen) gets its own instance; other widths the run-time one.
template <bool kSplit, class Units>
void decode_rows4_any_width(const DecodeTask& t) {
  if (t.head_dim == 128) {
    decode_rows4_typed<kSplit, 128, Units>(t);
  } else {
    decode_rows4_typed<kSplit, 0, Units>(t);
  }
}

template <class Units>
void decode_rows4(const DecodeTask& t) {
  if (t.q.dtype == DType::kBF16) {
    decode_rows4_any_width<false, Units>(t);
  } else {
    decode_rows4_any_width<true, Units>(t);
  }
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// The decode entry of this ISA level: groups of 4k heads here (bf16 K/V with vdpbf16ps, or on the
// units Units names; f32 and f16 K/V with FMA), the rest as before.
template <class Units = VectorUnits>
void decode_bf16_or_rows4(const DecodeTask& t) {
  if (uses_rows4(t)) {
    decode_rows4<Units>(t);
  } else if (uses_rows4_f(t)) {
    decode_or_rows4(t);  // f32 / f16 K/V
  } else {
    decode_bf16(t);
  }
}

inline std::size_t decode_scratch_floats_with_rows4(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::size_t a = decode_scratch_floats_any(head_dim, group, tile);
  const std::size_t b = group % 4 == 0 ? decode_scratch_floats_rows4(head_dim, group, tile) : 0;
  const std::size_t c = group % 4 == 0 ? decode_scratch_floats_rows4_f(head_dim, group, tile) : 0;
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
