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
//     interleaved once).
// Prefetch as the f32 row-block body (fast_body_rows4.hpp): rows kRows4PrefetchRows ahead into
//   L1, V during Q K^T and the next tile's K (whole rows, spread over the P V passes) into L2.
// Head_dim 128 takes the step body at the end of this file instead (K and V of 16 keys read
//   together, one core from DRAM ~15% faster on Zen 5; docs/perf-notes.md, CPU round 10). The tile
//   body's compile-time head_dim branches (kD > 0: round 8's unrolled head_dim-128 instance) are
//   kept but only kD = 0 is instantiated now.
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
  L.acc = f; f += floats_for(group * L.dp);
  L.s = f; f += floats_for(L.tp * 4);
  L.m = f; f += floats_for(group);
  L.l = f;
  return L;
}

inline std::size_t decode_scratch_floats_rows4(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, kPairChunk), tp = round_up(tile, 8);
  return 2 * floats_for(group * dp / 2) + floats_for(tp / 2 * 4) + floats_for(group * dp) + floats_for(tp * 4) +
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

// Head_dim of a body instance: kD when it is compiled for one (128: every loop over head_dim and
// every prefetch unrolled), else the task's.
template <int kD>
inline std::int64_t head_dim_of(const DecodeTask& t) {
  return kD > 0 ? kD : t.head_dim;
}

// The scores of the 4 keys at rows kr for heads [h0, h0 + 4), as [key][head] lanes (unscaled).
template <bool kSplit, int kD>
inline __attribute__((always_inline)) V score4_rows4(const DecodeTask& t, const std::uint16_t* const* kr,
                                                     const std::uint16_t* qh, const std::uint16_t* ql,
                                                     std::int64_t dp) {
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
  return Vec::transpose_sum(acc);
}

// The same, stored at s.
template <bool kSplit, int kD>
inline __attribute__((always_inline)) void score_keys4_rows4(const DecodeTask& t, const std::uint16_t* const* kr,
                                                             const std::uint16_t* qh, const std::uint16_t* ql,
                                                             std::int64_t dp, float* s) {
  Vec::store(s, score4_rows4<kSplit, kD>(t, kr, qh, ql, dp));
}

// Scores of keys [j0, j0 + n) for heads [h0, h0 + 4) into L.s as [key][head], unscaled. Keys past
// n (up to a multiple of 4) repeat the last key; the softmax masks them. Whole steps of 4 keys
// walk one row pointer; only the last partial step clamps its rows.
template <bool kSplit, int kD>
void scores_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t j0, std::int64_t n,
                  bool prefetch) {
  constexpr std::int64_t kRowBytes = kD * 2;  // 0: not known at compile time
  const std::int64_t d = head_dim_of<kD>(t), stride = t.k.row_stride, last = t.key_end - 1;
  const std::uint16_t* kbase = static_cast<const std::uint16_t*>(t.k.data) + t.k.offset + j0 * stride;
  const std::uint16_t* qh = L.qh + h0 * L.dp;
  const std::uint16_t* ql = L.ql + h0 * L.dp;
  const PrefetchRows pk(t.k, 2, 0, d * 2, last), pv(t.v, 2, 0, d * 2, last);
  std::int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    if (prefetch) {
      pk.rows<3, 4, kRowBytes>(j0 + j + kRows4PrefetchRows);
      pv.rows<2, 4, kRowBytes>(j0 + j);
    }
    const std::uint16_t* k0 = kbase + j * stride;
    const std::uint16_t* kr[4] = {k0, k0 + stride, k0 + 2 * stride, k0 + 3 * stride};
    score_keys4_rows4<kSplit, kD>(t, kr, qh, ql, L.dp, L.s + j * 4);
  }
  if (j < n) {
    if (prefetch) {
      pk.rows<3, 4>(j0 + j + kRows4PrefetchRows);
      pv.rows<2, 4>(j0 + j);
    }
    const std::uint16_t* kr[4];
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; ++kk) kr[kk] = kbase + imin(j + kk, n - 1) * stride;
    score_keys4_rows4<kSplit, kD>(t, kr, qh, ql, L.dp, L.s + j * 4);
  }
}

// The tile's online softmax for heads [h0, h0 + 4): P into L.pp as key pairs, m and l updated,
// the heads' accumulators rescaled once.
inline void softmax_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t n) {
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
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(L.pp + v * 8), _mm256_permutexvar_epi16(pair_order, B16::to_bf16(e)));
  }
  fold_sums_rows4(sum, alpha, L.l + h0);
}

// acc[h0..h0+4) += P V over keys [j0, j0 + n) for the 32-column blocks [b0, b0 + CB): 4 x 2CB
// accumulators in registers, key pairs interleaved once and used by the 4 heads. kD: head_dim when
// known at compile time, 0 if not.
template <int CB, bool kTail, int kD>
void pv_rows4(const DecodeTask& t, const DecodeLayoutRows4& L, std::int64_t h0, std::int64_t b0, std::int64_t j0,
              std::int64_t n, bool prefetch, std::int64_t pass, std::int64_t passes) {
  const std::int64_t d = head_dim_of<kD>(t), stride = t.v.row_stride, last = t.key_end - 1;
  __mmask32 mask[CB];
#pragma GCC unroll 4
  for (int b = 0; b < CB; ++b) mask[b] = B16::tail32(static_cast<int>(imin(kPairChunk, d - (b0 + b) * kPairChunk)));
  V acc[4][2 * CB];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * CB; ++v) acc[g][v] = Vec::load(L.acc + (h0 + g) * L.dp + b0 * kPairChunk + v * W);
  const std::uint16_t* ra = static_cast<const std::uint16_t*>(t.v.data) + t.v.offset + j0 * stride + b0 * kPairChunk;
  const std::uint32_t* pp = L.pp;
  // This pass's columns of the V rows ahead into L1, and its share of the next tile's K rows into
  // L2 as whole rows in key order: every pass keeps the DRAM stream going (only the first pass
  // fetching K left it idle during the others), and each row is fetched in one piece (3-8% faster
  // than each pass fetching its columns of every row; docs/perf-notes.md, CPU round 6).
  const std::int64_t pf_from = b0 * kPairChunk * 2, pf_bytes = imin(CB * kPairChunk, d - b0 * kPairChunk) * 2;
  const PrefetchRows pv(t.v, 2, pf_from, pf_bytes, last), pk(t.k, 2, 0, d * 2, last);
  // With head_dim known, so are the byte counts and the passes: each prefetch is one instruction,
  // and the next tile's K rows of a key step follow from the step (no credit counter).
  constexpr std::int64_t kVBytes = kD > 0 && !kTail ? CB * kPairChunk * 2 : 0, kKBytes = kD * 2;
  constexpr std::int64_t kPasses = kD > 0 ? (round_up(kD, kPairChunk) / kPairChunk + 1) / 2 : 0;
  const std::int64_t k_end = j0 + n + (pass + 1) * n / passes;
  std::int64_t k_next = j0 + n + pass * n / passes, k_credit = 0;
  const std::int64_t k_rows = k_end - k_next;
  std::int64_t j = 0;
  for (; j + 1 < n; j += 2, ra += 2 * stride, pp += 4) {
    if (prefetch) {
      pv.rows<3, 2, kVBytes>(j0 + j + kRows4PrefetchRows);
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
  if (j < n) {  // a lone last key: its pair partner is a zero row (and its p is 0)
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

template <bool kSplit, int kD>
void decode_rows4_typed(const DecodeTask& t) {
  const DecodeLayoutRows4 L = decode_layout_rows4(t.head_dim, t.group, t.tile, t.scratch);
  const std::int64_t G = t.group, d = head_dim_of<kD>(t), blocks = L.dp / kPairChunk;
  start_bf16_rows(t, L);
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, t.key_end - j0);
    for (std::int64_t h0 = 0; h0 < G; h0 += 4) {
      const bool prefetch = h0 == 0;  // later blocks of the group read the tile from cache
      scores_rows4<kSplit, kD>(t, L, h0, j0, n, prefetch);
      softmax_rows4(t, L, h0, n);
      std::int64_t b0 = 0;
      const std::int64_t passes = blocks / 2 + blocks % 2;
      std::int64_t pass = 0;
      // Passes of 64 columns (the last may be 32); only a pass that reaches past head_dim masks.
      for (; b0 + 2 <= blocks; b0 += 2) {
        if ((b0 + 2) * kPairChunk <= d) pv_rows4<2, false, kD>(t, L, h0, b0, j0, n, prefetch, pass++, passes);
        else pv_rows4<2, true, kD>(t, L, h0, b0, j0, n, prefetch, pass++, passes);
      }
      if (b0 < blocks) {
        if ((b0 + 1) * kPairChunk <= d) pv_rows4<1, false, kD>(t, L, h0, b0, j0, n, prefetch, pass++, passes);
        else pv_rows4<1, true, kD>(t, L, h0, b0, j0, n, prefetch, pass++, passes);
      }
    }
  }
  write_decode_result(t, L.acc, L.dp, L.m, L.l, PairColumn{});
}

// ---------------------------------------------------------------------------------------------
// Head_dim 128: K and V of a step of keys together (docs/perf-notes.md, CPU round 10)
//
// The tile body above reads a tile's K rows, then its V rows in two column passes: two DRAM
// streams that take turns. Here the keys go in steps of S; per step and block of 4 heads: Q K^T
// of the step's keys (S / 4 score vectors, through 256 bytes of L1: kept in registers across the
// unrolled score trees, GCC spilled and the body ran 40% slower cache-resident), the online-softmax
// update of the running max and sum ([key][head] vectors), P as bf16 key pairs into S / 2 x 4
// dwords of L1 (P V broadcasts them from memory), and P V of the same keys in two 64-column passes
// (16 accumulators loaded from and stored to the L1 accumulator per pass; all 4 x 128 f32 outputs
// would be the whole register file). K and V rows are prefetched into L1 the same distance ahead,
// so both streams run all the time. Bound (one Zen 5 core): ~9.7 ns per key and KV head
// cache-resident (the tile body 9.0), ~18 ns from DRAM (the tile body ~21).

constexpr int kStepKeys = 16;  // keys per step (a multiple of 4; 32 read 3-6% less from DRAM)
// Prefetch: K and V rows this far ahead straight into L1 (prefetcht0), nothing into L2. One core
// read 28-29.5 GB/s from DRAM with 16 rows, 28-29 with 24, 26-29 with 32-64, 20-24 with 8-12, and
// 24-26 with round 8's pair (8 rows into L1 plus 64 or 256 into L2); no software prefetch 18-20.
constexpr std::int64_t kStepPrefetchRows = 16;

struct DecodeLayoutSteps4 {
  std::int64_t dp;
  std::uint16_t *qh, *ql;
  std::uint32_t* pp;  // [group / 4][2][S / 2][4] P of two steps as (key pair, head) bf16 pairs
  float *acc, *mv, *lv, *alpha, *s, *m, *l;  // acc [group][dp]; mv, lv, alpha [group / 4][16]: running max,
                                         // per-lane sums, rescale as [key][head]; s [S / 4][16] the
                                         // step's scores; m, l [group]
};

inline DecodeLayoutSteps4 decode_layout_steps4(std::int64_t head_dim, std::int64_t group, float* base) {
  DecodeLayoutSteps4 L{};
  L.dp = round_up(head_dim, kPairChunk);
  float* f = base;
  L.qh = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.ql = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.pp = reinterpret_cast<std::uint32_t*>(f); f += floats_for(group / 4 * 2 * (kStepKeys / 2 * 4));
  L.acc = f; f += floats_for(group * L.dp);
  L.mv = f; f += floats_for(group / 4 * 16);
  L.lv = f; f += floats_for(group / 4 * 16);
  L.alpha = f; f += floats_for(group / 4 * 16);
  L.s = f; f += floats_for(kStepKeys * 4);
  L.m = f; f += floats_for(group);
  L.l = f;
  return L;
}

inline std::size_t decode_scratch_floats_steps4(std::int64_t head_dim, std::int64_t group) {
  const std::int64_t dp = round_up(head_dim, kPairChunk);
  return 2 * floats_for(group * dp / 2) + floats_for(group / 4 * 2 * (kStepKeys / 2 * 4)) + floats_for(group * dp) +
         3 * floats_for(group / 4 * 16) + floats_for(kStepKeys * 4) + 2 * floats_for(group) + 16;
}

// acc[h0..h0+4)[columns b0 * 32 .. + 64) += P V over the step's keys (rows ra, ra + stride, ...;
// ns keys, S when kFull). Pass 0 also prefetches the V rows ahead (whole rows: pass 1 reads the
// other half of the same rows).
template <int S, bool kFull>
inline __attribute__((always_inline)) void step_pv_rows4(const DecodeTask& t, const DecodeLayoutSteps4& L,
                                                         std::int64_t h0, int b0, const std::uint16_t* ra,
                                                         std::int64_t ns, const PrefetchRows* pf, std::int64_t j,
                                                         const std::uint32_t* pp) {
  constexpr int kD = 128;
  const std::int64_t stride = t.v.row_stride;
  float* out = L.acc + h0 * L.dp + b0 * kPairChunk;
  V acc[4][4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[g][v] = Vec::load(out + g * L.dp + v * W);
  ra += b0 * kPairChunk;
  const std::int64_t pairs = kFull ? S / 2 : ns / 2;
  for (std::int64_t p = 0; p < pairs; ++p, ra += 2 * stride, pp += 4) {
    if (pf != nullptr) pf->rows<3, 2, kD * 2>(j + 2 * p + kStepPrefetchRows);
    P16 lo[2], hi[2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      B16::interleave(_mm512_loadu_si512(ra + b * kPairChunk), _mm512_loadu_si512(ra + stride + b * kPairChunk), lo[b],
                      hi[b]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const P16 pb = B16::broadcast_pair(pp[g]);
#pragma GCC unroll 2
      for (int b = 0; b < 2; ++b) {
        acc[g][2 * b] = B16::dot(acc[g][2 * b], pb, lo[b]);
        acc[g][2 * b + 1] = B16::dot(acc[g][2 * b + 1], pb, hi[b]);
      }
    }
  }
  if (!kFull && (ns & 1) != 0) {  // a lone last key: its pair partner is a zero row (and its p is 0)
    P16 lo[2], hi[2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) B16::interleave(_mm512_loadu_si512(ra + b * kPairChunk), _mm512_setzero_si512(), lo[b], hi[b]);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const P16 pb = B16::broadcast_pair(pp[g]);
#pragma GCC unroll 2
      for (int b = 0; b < 2; ++b) {
        acc[g][2 * b] = B16::dot(acc[g][2 * b], pb, lo[b]);
        acc[g][2 * b + 1] = B16::dot(acc[g][2 * b + 1], pb, hi[b]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) Vec::store(out + g * L.dp + v * W, acc[g][v]);
}

// Q K^T and the softmax of one step of keys [j, j + ns) (ns = S when kFull) for heads [h0, h0 + 4):
// P into pp as (key pair, head) bf16 pairs, the running max and sum of the block updated, alpha
// (the factor for the accumulators) into L.alpha of the block. Returns whether alpha is not all 1.
// pk: the K prefetcher, null for head blocks after the first (they read the step from L1).
template <bool kSplit, int S, bool kFull>
inline bool step_softmax_rows4(const DecodeTask& t, const DecodeLayoutSteps4& L, std::int64_t h0, std::int64_t j,
                               std::int64_t ns, const PrefetchRows* pk, std::uint32_t* pp) {
  constexpr int kD = 128, kVecs = S / 4;
  const std::int64_t ks = t.k.row_stride;
  const std::uint16_t* k0 = static_cast<const std::uint16_t*>(t.k.data) + t.k.offset + j * ks;
  const std::uint16_t* qh = L.qh + h0 * L.dp;
  const std::uint16_t* ql = L.ql + h0 * L.dp;
  const std::int64_t n = kFull ? S : ns;
  float* sc = L.s;
#pragma GCC unroll 1
  for (int i = 0; i < kVecs; ++i) {
    if (!kFull && 4 * i >= n) {
      Vec::store(sc + i * 16, Vec::set1(kNegInf));
      continue;
    }
    if (pk != nullptr) pk->rows<3, 4, kD * 2>(j + 4 * i + kStepPrefetchRows);
    const std::uint16_t* kr[4];
#pragma GCC unroll 4
    for (int kk = 0; kk < 4; ++kk) kr[kk] = k0 + (kFull ? 4 * i + kk : imin(4 * i + kk, n - 1)) * ks;
    Vec::store(sc + i * 16, finish_scores_rows4(score4_rows4<kSplit, kD>(t, kr, qh, ql, L.dp), t.scale, t.softcap, i, n));
  }
  V s[kVecs];
#pragma GCC unroll 8
  for (int i = 0; i < kVecs; ++i) s[i] = Vec::load(sc + i * 16);
  // The step's max per head joins the running max (both broadcast over the key lanes); alpha is 1
  // exactly where the max stays (so nothing drifts), 0 where nothing was seen before.
  V mx = s[0];
#pragma GCC unroll 8
  for (int i = 1; i < kVecs; ++i) mx = Vec::max(mx, s[i]);
  float* mv = L.mv + h0 / 4 * 16;
  float* lv = L.lv + h0 / 4 * 16;
  const V m_old = Vec::load(mv);
  const V m_new = Vec::max(m_old, max_over_keys(mx));
  const V m_use = usable_max(m_new);
  const __mmask16 raised = _mm512_cmp_ps_mask(m_new, m_old, _CMP_NEQ_UQ);
  const V alpha = _mm512_mask_blend_ps(raised, Vec::set1(1.0f), Vec::exp(Vec::sub(m_old, m_use)));
  Vec::store(mv, m_new);
  // Word 2g + t of each 4-word group b -> key 2b + t, head g: (p_j, p_j+1) pairs per head.
  alignas(32) static constexpr std::int16_t kPairOrder[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
  const __m256i pair_order = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairOrder));
  V sum = Vec::zero();
#pragma GCC unroll 8
  for (int i = 0; i < kVecs; ++i) {
    const V e = Vec::exp(Vec::sub(s[i], m_use));
    sum = Vec::add(sum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pp + i * 8), _mm256_permutexvar_epi16(pair_order, B16::to_bf16(e)));
  }
  Vec::store(lv, Vec::fma(Vec::load(lv), alpha, sum));
  if (raised != 0) Vec::store(L.alpha + h0 / 4 * 16, alpha);
  return raised != 0;
}

// The accumulators of heads [h0, h0 + 4) times the block's alpha (after a step raised the max).
inline void rescale_steps4(const DecodeLayoutSteps4& L, std::int64_t h0) {
  const float* alpha = L.alpha + h0 / 4 * 16;
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const V a = Vec::set1(alpha[g]);
    float* acc = L.acc + (h0 + g) * L.dp;
#pragma GCC unroll 8
    for (int c = 0; c < 128; c += W) Vec::store(acc + c, Vec::mul(Vec::load(acc + c), a));
  }
}

// P V of the step of keys [j, j + ns) for heads [h0, h0 + 4) (P at pp), both 64-column passes.
template <int S, bool kFull>
inline void step_pv_both_rows4(const DecodeTask& t, const DecodeLayoutSteps4& L, std::int64_t h0, std::int64_t j,
                               std::int64_t ns, const PrefetchRows* pv, const std::uint32_t* pp) {
  const std::uint16_t* v0 = static_cast<const std::uint16_t*>(t.v.data) + t.v.offset + j * t.v.row_stride;
  step_pv_rows4<S, kFull>(t, L, h0, 0, v0, ns, pv, j, pp);
  step_pv_rows4<S, kFull>(t, L, h0, 2, v0, ns, nullptr, j, pp);
}

// Steps software-pipelined by one: Q K^T and the softmax of step i are issued before P V of step
// i - 1, so the softmax's dependent chain (max tree, exp, P) overlaps P V's independent work
// instead of stalling it (written step by step, the chain cost ~20% cache-resident). P is double
// buffered per head block; a raised max rescales the accumulators after P V of step i - 1, whose
// terms it applies to as well.
template <bool kSplit, int S>
void decode_steps4_typed(const DecodeTask& t) {
  const DecodeLayoutSteps4 L = decode_layout_steps4(t.head_dim, t.group, t.scratch);
  const std::int64_t G = t.group;
  start_bf16_rows(t, L);
  for (std::int64_t b = 0; b < G / 4; ++b) {
    Vec::store(L.mv + b * 16, Vec::set1(kNegInf));
    Vec::store(L.lv + b * 16, Vec::zero());
  }
  const std::int64_t last = t.key_end - 1;
  const PrefetchRows pk(t.k, 2, 0, 256, last), pv(t.v, 2, 0, 256, last);
  auto pp_of = [&](std::int64_t h0, std::int64_t step) { return L.pp + (h0 / 4 * 2 + (step & 1)) * (S / 2 * 4); };
  const std::int64_t full_steps = (t.key_end - t.key_begin) / S;
  for (std::int64_t i = 0; i < full_steps; ++i) {
    const std::int64_t j = t.key_begin + i * S;
    for (std::int64_t h0 = 0; h0 < G; h0 += 4) {
      const bool raised = step_softmax_rows4<kSplit, S, true>(t, L, h0, j, S, h0 == 0 ? &pk : nullptr, pp_of(h0, i));
      if (i > 0) step_pv_both_rows4<S, true>(t, L, h0, j - S, S, h0 == 0 ? &pv : nullptr, pp_of(h0, i - 1));
      if (raised) rescale_steps4(L, h0);
    }
  }
  const std::int64_t j = t.key_begin + full_steps * S, tail = t.key_end - j;
  for (std::int64_t h0 = 0; h0 < G; h0 += 4) {
    const bool raised = tail > 0 && step_softmax_rows4<kSplit, S, false>(t, L, h0, j, tail, nullptr, pp_of(h0, full_steps));
    if (full_steps > 0) step_pv_both_rows4<S, true>(t, L, h0, j - S, S, h0 == 0 ? &pv : nullptr, pp_of(h0, full_steps - 1));
    if (raised) rescale_steps4(L, h0);
    if (tail > 0) step_pv_both_rows4<S, false>(t, L, h0, j, tail, nullptr, pp_of(h0, full_steps));
  }
  for (std::int64_t b = 0; b < G / 4; ++b) {
    alignas(64) float sums[16];
    Vec::store(sums, sum_over_keys(Vec::load(L.lv + b * 16)));
    for (int g = 0; g < 4; ++g) {
      L.m[4 * b + g] = L.mv[b * 16 + g];
      L.l[4 * b + g] = sums[g];
    }
  }
  write_decode_result(t, L.acc, L.dp, L.m, L.l, PairColumn{});
}

// Head_dim 128 (llama, mistral, qwen) gets its own instance; other widths the run-time one.
template <bool kSplit>
void decode_rows4_any_width(const DecodeTask& t) {
  if (t.head_dim == 128) {
    decode_steps4_typed<kSplit, kStepKeys>(t);
  } else {
    decode_rows4_typed<kSplit, 0>(t);
  }
}

inline void decode_rows4(const DecodeTask& t) {
  if (t.q.dtype == DType::kBF16) {
    decode_rows4_any_width<false>(t);
  } else {
    decode_rows4_any_width<true>(t);
  }
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// The decode entry of this ISA level: groups of 4k heads here (bf16 K/V with vdpbf16ps, f32 and
// f16 K/V with FMA), the rest as before.
inline void decode_bf16_or_rows4(const DecodeTask& t) {
  if (uses_rows4(t)) {
    decode_rows4(t);
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
  const std::size_t e = group % 4 == 0 && head_dim == 128 ? decode_scratch_floats_steps4(head_dim, group) : 0;
  const std::size_t abc = a > b ? (a > c ? a : c) : (b > c ? b : c);
  return abc > e ? abc : e;
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
