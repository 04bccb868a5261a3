// Internal: the fast CPU kernel bodies for bf16 K/V with vdpbf16ps (AVX512_BF16). Included by
// fast_isa_avx512bf16.cpp after fast_body.hpp, in the same namespace, so the f32 helpers
// (exp, softcap, row chunking) are shared, and so are task input/output, prefetch and the running
// softmax state (fast_body_io.hpp); f32 and f16 K/V take the f32 bodies.
//
// Numerics (docs/architecture.md, CPU section; measured error in docs/perf-notes.md, CPU round 2):
//   Q K^T: exact products. bf16 q goes in as is; an f32/f16 q is split once per task into
//     hi + lo bf16 parts (hi = bf16(q), lo = bf16(q - hi)) and both are dotted, so the products
//     carry 16 of q's mantissa bits (f16 q: all of them); sums in f32. The scale multiplies the
//     f32 score (folding it into q would round q).
//   P V: P is rounded to bf16 (as GPU flash kernels do), V is bf16 already; sums in f32. The
//     softmax denominator l is summed from the unrounded f32 P.
// Decode (groups that are not a multiple of 4; those take fast_body_bf16_rows4.hpp): as fast_body.hpp, with each 32-bf16 chunk of a K row dotted in one instruction per
//   query row, and P V taking keys in pairs: two V rows interleaved (vpunpck*wd, no permute) times
//   the broadcast (p_j, p_j+1) pair. Accumulator columns are in interleave order inside each
//   32-column block; the final write puts them back (pair_column).
//   K and V prefetched as in fast_body.hpp (L1 32 rows ahead, the other stream into L2). Bound: memory for group 1-2, vdpbf16ps issue and
//   the per-key score sums for larger groups (docs/perf-notes.md, CPU rounds 2 and 5).
// Prefill: as fast_body.hpp with Q^T stored as pairs of head_dim (rows in the lanes), K read as
//   a broadcast pair, V tiles interleaved into key pairs once per tile, P written as key pairs by
//   the softmax. Bound: vdpbf16ps rate (two products per lane per instruction; one core measured
//   at 82% of it).

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

using B16 = ::attnkit::cpu::simd::Bf16Avx512;
using ::attnkit::cpu::simd::pair_column;
using P16 = B16::P;
constexpr int kPairChunk = B16::kChunk;  // 32 bf16 values per vector

inline std::uint16_t q_bits(const RowSource& s, std::int64_t offset) {
  return static_cast<const std::uint16_t*>(s.data)[offset];
}

// hi + lo split of one query element (lo == 0 when q is stored as bf16).
inline void split_q(const RowSource& q, std::int64_t offset, std::uint16_t& hi, std::uint16_t& lo) {
  if (q.dtype == DType::kBF16) {
    hi = q_bits(q, offset);
    lo = 0;
    return;
  }
  const float x = load_scalar(q, offset);
  hi = float_to_bf16_bits(x);
  lo = float_to_bf16_bits(x - bf16_bits_to_float(hi));
}

// A task's start, shared by the per-head and the row-block bf16 bodies: the group's q rows split
// into (hi, lo) bf16 pairs, zero past head_dim up to the padded width dp, the output accumulators
// zeroed and the running (max, sum) reset.
template <class Layout>
void start_bf16_rows(const DecodeTask& t, const Layout& L) {
  const std::int64_t G = t.group, d = t.head_dim;
  for (std::int64_t g = 0; g < G; ++g) {
    const std::int64_t row = t.q.offset + g * t.q.head_stride;
    for (std::int64_t c = 0; c < L.dp; ++c) {
      std::uint16_t hi = 0, lo = 0;
      if (c < d) split_q(t.q, row + c, hi, lo);
      L.qh[g * L.dp + c] = hi;
      L.ql[g * L.dp + c] = lo;
      L.acc[g * L.dp + c] = 0.0f;
    }
    L.m[g] = kNegInf;
    L.l[g] = 0.0f;
  }
}

// Accumulator column of output column c (32-column blocks in key-pair interleave order).
struct PairColumn {
  std::int64_t operator()(std::int64_t c) const { return c / kPairChunk * kPairChunk + pair_column(c % kPairChunk); }
};

// ---------------------------------------------------------------------------------------------
// Decode

struct DecodeLayoutBf16 {
  std::int64_t dp, tp;  // head_dim padded to 32, tile padded to 32
  std::uint16_t *qh, *ql, *p;
  float *acc, *scores, *m, *l;
};

inline DecodeLayoutBf16 decode_layout_bf16(std::int64_t head_dim, std::int64_t group, std::int64_t tile, float* base) {
  DecodeLayoutBf16 L{};
  L.dp = round_up(head_dim, kPairChunk);
  L.tp = round_up(tile, kPairChunk);
  float* f = base;
  L.qh = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.ql = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.dp / 2);
  L.p = reinterpret_cast<std::uint16_t*>(f); f += floats_for(group * L.tp / 2);
  L.acc = f; f += floats_for(group * L.dp);
  L.scores = f; f += floats_for(group * L.tp);
  L.m = f; f += floats_for(group);
  L.l = f;
  return L;
}

inline std::size_t decode_scratch_floats_bf16(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, kPairChunk), tp = round_up(tile, kPairChunk);
  return 2 * floats_for(group * dp / 2) + floats_for(group * tp / 2) + floats_for(group * dp) +
         floats_for(group * tp) + 2 * floats_for(group) + 16;
}

// L1 prefetch distance of the vdpbf16ps decode body, in rows: the shared distance, but at most half
// a tile. With the 16-key tiles of AMX Xeons, 8 rows ahead read 24-37% faster than 32 at groups 1-3
// (a prefetch that far ahead crosses into the tile after the next phase; docs/perf-notes.md, CPU
// round 15).
inline std::int64_t decode_bf16_prefetch_rows(const DecodeTask& t) {
  return imin(kDecodePrefetchRows, imax(t.tile / 2, 4));
}

template <int GC, bool kSplit>
void decode_scores_bf16(const DecodeTask& t, const DecodeLayoutBf16& L, std::int64_t g0, std::int64_t j0,
                        std::int64_t n) {
  constexpr int kKeys = W / GC > 0 ? W / GC : 1;
  const std::int64_t d = t.head_dim;
  const auto* k = static_cast<const std::uint16_t*>(t.k.data);
  alignas(64) int order[W];
  for (int g = 0; g < GC; ++g)
    for (int kk = 0; kk < kKeys; ++kk) order[g * kKeys + kk] = kk * GC + g;
  const __m512i by_row = _mm512_load_si512(order);
  const std::int64_t ahead = decode_bf16_prefetch_rows(t), last = t.key_end - 1;
  const PrefetchRows pk(t.k, 2, 0, d * 2, last, j0), pv(t.v, 2, 0, d * 2, last, j0);
  const std::int64_t run = rows_per_run(t.k, n);
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    const std::int64_t tile_offset = run_offset(t.k, j0, r0), r1 = imin(n, r0 + run);
    for (std::int64_t j = r0; j < r1; j += kKeys) {
      V acc[W];
      for (int i = 0; i < W; ++i) acc[i] = Vec::zero();
      std::int64_t key_offset[kKeys];
      for (int kk = 0; kk < kKeys; ++kk) key_offset[kk] = tile_offset + imin(j + kk, n - 1) * t.k.row_stride;
      if (g0 == 0) {
        for (int kk = 0; kk < kKeys; ++kk) {
          pk.rows<3, 1>(j0 + j + kk + ahead);
          pv.rows<2, 1>(j0 + j + kk);
        }
      }
      for (std::int64_t c = 0; c < d; c += kPairChunk) {
        const int m = static_cast<int>(imin(kPairChunk, d - c));
        for (int kk = 0; kk < kKeys; ++kk) {
          const P16 kv = B16::load(k + key_offset[kk] + c, m);
          for (int g = 0; g < GC; ++g) {
            acc[kk * GC + g] = B16::dot(acc[kk * GC + g], B16::load(L.qh + (g0 + g) * L.dp + c, kPairChunk), kv);
            if constexpr (kSplit) {
              acc[kk * GC + g] = B16::dot(acc[kk * GC + g], B16::load(L.ql + (g0 + g) * L.dp + c, kPairChunk), kv);
            }
          }
        }
      }
      // Lane kk * GC + g holds (key kk, row g): regroup to g * kKeys + kk, then one masked store per
      // row (a scalar scatter through memory would stall on store forwarding).
      const V w = _mm512_permutexvar_ps(by_row, Vec::transpose_sum(acc));
      const std::int64_t valid = imin(kKeys, n - j);
      const unsigned keys_mask = (1u << valid) - 1u;
      for (int g = 0; g < GC; ++g) {
        _mm512_mask_storeu_ps(L.scores + (g0 + g) * L.tp + j - g * kKeys, static_cast<__mmask16>(keys_mask << (g * kKeys)), w);
      }
    }
  }
}

// acc[g] += sum_j p[g][j] V[j] for rows [g0, g0 + GR) and 32-column blocks [b0, b0 + CB), keys
// taken in pairs (a missing odd key is a zero row with p = 0).
template <int GR, int CB>
void decode_pv_bf16_block(const DecodeTask& t, const DecodeLayoutBf16& L, std::int64_t g0, std::int64_t b0,
                          std::int64_t j0, std::int64_t n) {
  const std::int64_t d = t.head_dim, stride = t.v.row_stride;
  V acc[GR][2 * CB];
  __mmask32 mask[CB];
  for (int b = 0; b < CB; ++b) mask[b] = B16::tail32(static_cast<int>(imin(kPairChunk, d - (b0 + b) * kPairChunk)));
  for (int g = 0; g < GR; ++g)
    for (int v = 0; v < 2 * CB; ++v) acc[g][v] = Vec::load(L.acc + (g0 + g) * L.dp + b0 * kPairChunk + v * W);
  const std::uint16_t* ra = static_cast<const std::uint16_t*>(t.v.data) + row_offset(t.v, j0) + b0 * kPairChunk;
  const std::uint16_t* pp = L.p + g0 * L.tp;
  // One key pair: rows a and b (b all zero for a lone last key, whose p is 0 too).
  auto pair = [&](const std::uint16_t* rb, std::int64_t j) {
    P16 lo[CB], hi[CB];
    for (int b = 0; b < CB; ++b) {
      const P16 va = _mm512_maskz_loadu_epi16(mask[b], ra + b * kPairChunk);
      const P16 vb = _mm512_maskz_loadu_epi16(rb == nullptr ? 0 : mask[b], rb == nullptr ? ra : rb + b * kPairChunk);
      B16::interleave(va, vb, lo[b], hi[b]);
    }
    for (int g = 0; g < GR; ++g) {
      const P16 pb = B16::broadcast_pair(pp + g * L.tp + j);
      for (int b = 0; b < CB; ++b) {
        acc[g][2 * b] = B16::dot(acc[g][2 * b], pb, lo[b]);
        acc[g][2 * b + 1] = B16::dot(acc[g][2 * b + 1], pb, hi[b]);
      }
    }
  };
  // Rows ahead of the pair, by pointer steps in one strided run (paged rows: from their pages).
  const std::int64_t ahead = decode_bf16_prefetch_rows(t), last = t.key_end - 1;
  const PrefetchRows pv(t.v, 2, b0 * kPairChunk * 2, CB * 64, last, j0), pk(t.k, 2, 0, d * 2, last, j0);
  const char* pf = reinterpret_cast<const char*>(ra + ahead * stride);
  const char* pf_end = reinterpret_cast<const char*>(static_cast<const std::uint16_t*>(t.v.data) + t.v.offset +
                                                     last * stride + b0 * kPairChunk);
  // Key pairs run by run (a page's rows of a paged V; the tile's runs have even lengths but the last).
  const std::int64_t run = rows_per_run(t.v, n);
  std::int64_t j = 0;
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    if (r0 > 0) ra = static_cast<const std::uint16_t*>(t.v.data) + row_offset(t.v, j0 + r0) + b0 * kPairChunk;
    for (const std::int64_t r1 = imin(n, r0 + run); j + 1 < r1; j += 2, ra += 2 * stride, pf += 4 * stride) {
      if (g0 == 0 && t.v.pages != nullptr) {
        const std::int64_t r = j0 + ahead + 2 * j;
        pv.rows<3, 1, CB * 64>(r);
        pv.rows<3, 1, CB * 64>(r + 2);
      } else if (g0 == 0 && pf <= pf_end) {
        for (int b = 0; b < CB; ++b) {
          _mm_prefetch(pf + b * 64, _MM_HINT_T0);
          _mm_prefetch(pf + 2 * stride + b * 64, _MM_HINT_T0);
        }
      }
      if (g0 == 0 && b0 == 0) {
        pk.rows<2, 2>(j0 + n + j);
      }
      pair(ra + stride, j);
    }
  }
  if (j < n) pair(nullptr, j);
  for (int g = 0; g < GR; ++g)
    for (int v = 0; v < 2 * CB; ++v) Vec::store(L.acc + (g0 + g) * L.dp + b0 * kPairChunk + v * W, acc[g][v]);
}

template <int GR>
void decode_pv_bf16(const DecodeTask& t, const DecodeLayoutBf16& L, std::int64_t g0, std::int64_t j0, std::int64_t n) {
  // At most 16 accumulators: 2 vectors per 32-column block per row.
  constexpr int kMaxBlocks = 8 / GR > 0 ? (8 / GR > 4 ? 4 : 8 / GR) : 1;
  const std::int64_t blocks = L.dp / kPairChunk;
  std::int64_t b0 = 0;
  while (b0 < blocks) {
    const std::int64_t left = blocks - b0;
    if (kMaxBlocks >= 4 && left >= 4) { decode_pv_bf16_block<GR, (kMaxBlocks >= 4 ? 4 : 1)>(t, L, g0, b0, j0, n); b0 += 4; }
    else if (kMaxBlocks >= 2 && left >= 2) { decode_pv_bf16_block<GR, (kMaxBlocks >= 2 ? 2 : 1)>(t, L, g0, b0, j0, n); b0 += 2; }
    else { decode_pv_bf16_block<GR, 1>(t, L, g0, b0, j0, n); b0 += 1; }
  }
}

template <bool kSplit>
void decode_bf16_typed(const DecodeTask& t) {
  const DecodeLayoutBf16 L = decode_layout_bf16(t.head_dim, t.group, t.tile, t.scratch);
  const std::int64_t G = t.group;
  start_bf16_rows(t, L);
  const V scale = Vec::set1(t.scale);
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, t.key_end - j0);
    for_row_chunks<W>(G, [&]<int GC>(std::int64_t g0) { decode_scores_bf16<GC, kSplit>(t, L, g0, j0, n); });
    for (std::int64_t g = 0; g < G; ++g) {
      float* s = L.scores + g * L.tp;
      std::uint16_t* p = L.p + g * L.tp;
      const std::int64_t np = round_up(n, W);
      for (std::int64_t j = 0; j < np; j += W) {
        V x = Vec::mul(Vec::load(s + j), scale);
        if (t.softcap > 0) x = softcap_v(x, t.softcap);
        Vec::store(s + j, x);
      }
      for (std::int64_t j = n; j < np; ++j) s[j] = kNegInf;  // keys past the tile: p = 0
      V mx = Vec::set1(kNegInf);
      for (std::int64_t j = 0; j < np; j += W) mx = Vec::max(mx, Vec::load(s + j));
      const RaisedMax r = raise_max(L.m[g], Vec::reduce_max(mx), L.acc + g * L.dp, L.dp);
      const V mv = Vec::set1(r.m_new);
      V sum = Vec::zero();
      for (std::int64_t j = 0; j < np; j += W) {
        const V e = Vec::exp(Vec::sub(Vec::load(s + j), mv));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), B16::to_bf16(e));
        sum = Vec::add(sum, e);
      }
      L.l[g] = L.l[g] * r.alpha + Vec::reduce_add(sum);
      L.m[g] = r.m_new;
    }
    for_row_chunks<8>(G, [&]<int GR>(std::int64_t g0) { decode_pv_bf16<GR>(t, L, g0, j0, n); });
  }
  write_decode_result(t, L.acc, L.dp, L.m, L.l, PairColumn{});
}

inline void decode_bf16(const DecodeTask& t) {
  if (t.k.dtype != DType::kBF16 || t.v.dtype != DType::kBF16) {
    decode(t);
  } else if (t.q.dtype == DType::kBF16) {
    decode_bf16_typed<false>(t);
  } else {
    decode_bf16_typed<true>(t);
  }
}

inline std::size_t decode_scratch_floats_any(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::size_t a = decode_scratch_floats(head_dim, group, tile), b = decode_scratch_floats_bf16(head_dim, group, tile);
  return a > b ? a : b;
}

// ---------------------------------------------------------------------------------------------
// Prefill

struct PrefillLayoutBf16 {
  std::int64_t dk, dp, rp, tp;  // head_dim padded to 2 (Q K pairs) and to 32 (V/O), rows, tile (even)
  std::int64_t rs, vs;          // row strides of Q^T, S and P (rp + W) and of the V pairs (dp + W)
  std::uint32_t *qh, *ql, *vb, *pp;
  std::uint16_t* kb;
  float *o, *m, *l, *alpha, *pos, *s;
};

inline PrefillLayoutBf16 prefill_layout_bf16(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                            std::int64_t tile, float* base) {
  PrefillLayoutBf16 L{};
  L.dk = round_up(head_dim, 2);
  L.dp = round_up(head_dim, kPairChunk);
  L.rp = round_up(block_rows, imax(Vec::kPvRows, W));
  L.tp = round_up(tile, imax(Vec::kQkKeys, 2));
  L.rs = L.rp + W;
  L.vs = L.dp + W;
  float* f = base;
  L.qh = reinterpret_cast<std::uint32_t*>(f); f += floats_for(group * L.dk / 2 * L.rs);
  L.ql = reinterpret_cast<std::uint32_t*>(f); f += floats_for(group * L.dk / 2 * L.rs);
  L.kb = reinterpret_cast<std::uint16_t*>(f); f += floats_for(L.tp * L.dk / 2);
  L.vb = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp / 2 * L.vs);
  L.pp = reinterpret_cast<std::uint32_t*>(f); f += floats_for(L.tp / 2 * L.rs);
  L.o = f; f += floats_for(group * L.rp * L.dp);
  L.m = f; f += floats_for(group * L.rp);
  L.l = f; f += floats_for(group * L.rp);
  L.alpha = f; f += floats_for(L.rp);
  L.pos = f; f += floats_for(L.rp);
  L.s = f;
  return L;
}

inline std::size_t prefill_scratch_floats_bf16(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                               std::int64_t tile) {
  const std::int64_t dk = round_up(head_dim, 2), dp = round_up(head_dim, kPairChunk),
                     rp = round_up(block_rows, imax(Vec::kPvRows, W)), tp = round_up(tile, imax(Vec::kQkKeys, 2));
  const std::int64_t rs = rp + W, vs = dp + W;
  return 2 * floats_for(group * dk / 2 * rs) + floats_for(tp * dk / 2) + floats_for(tp / 2 * vs) +
         floats_for(tp / 2 * rs) + floats_for(group * rp * dp) + 2 * floats_for(group * rp) + 2 * floats_for(rp) +
         floats_for(tp * rs) + 16;
}

template <int NV, bool kSplit>
inline void qk_block_bf16(const PrefillLayoutBf16& L, const std::uint32_t* qh, const std::uint32_t* ql,
                          std::int64_t j0, std::int64_t v0) {
  constexpr int K = Vec::kQkKeys;
  V acc[K][NV];
  for (int kk = 0; kk < K; ++kk)
    for (int n = 0; n < NV; ++n) acc[kk][n] = Vec::zero();
  const std::uint16_t* kp = L.kb + j0 * L.dk;
  const std::int64_t pairs = L.dk / 2;
  for (std::int64_t c2 = 0; c2 < pairs; ++c2) {
    P16 qv[NV], qlv[NV];
    for (int n = 0; n < NV; ++n) {
      qv[n] = B16::load_pairs(qh + c2 * L.rs + (v0 + n) * W);
      if constexpr (kSplit) qlv[n] = B16::load_pairs(ql + c2 * L.rs + (v0 + n) * W);
    }
    for (int kk = 0; kk < K; ++kk) {
      const P16 kv = B16::broadcast_pair(kp + kk * L.dk + 2 * c2);
      for (int n = 0; n < NV; ++n) {
        acc[kk][n] = B16::dot(acc[kk][n], kv, qv[n]);
        if constexpr (kSplit) acc[kk][n] = B16::dot(acc[kk][n], kv, qlv[n]);
      }
    }
  }
  for (int kk = 0; kk < K; ++kk)
    for (int n = 0; n < NV; ++n) Vec::store(L.s + (j0 + kk) * L.rs + (v0 + n) * W, acc[kk][n]);
}

// O[rows i0.., head_dim vectors c0..] = O * alpha + P V over n keys (in pairs).
template <int NV>
inline void pv_block_bf16(const PrefillLayoutBf16& L, float* o, std::int64_t n, std::int64_t i0, std::int64_t c0) {
  constexpr int R = Vec::kPvRows;
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const V a = Vec::set1(L.alpha[i0 + r]);
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec::mul(Vec::load(o + (i0 + r) * L.dp + (c0 + v) * W), a);
  }
  const std::uint32_t* vp = L.vb + c0 * W;
  const std::uint32_t* pp = L.pp + i0;
  const std::int64_t pairs = (n + 1) / 2;
  for (std::int64_t j2 = 0; j2 < pairs; ++j2, vp += L.vs, pp += L.rs) {
    P16 vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = B16::load_pairs(vp + v * W);
    for (int r = 0; r < R; ++r) {
      const P16 pb = B16::broadcast_pair(pp[r]);
      for (int v = 0; v < NV; ++v) acc[r][v] = B16::dot(acc[r][v], pb, vv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) Vec::store(o + (i0 + r) * L.dp + (c0 + v) * W, acc[r][v]);
}

template <bool kSplit>
void prefill_bf16_typed(const PrefillTask& t) {
  const PrefillLayoutBf16 L = prefill_layout_bf16(t.head_dim, t.group, t.block_rows, t.tile, t.scratch);
  const std::int64_t G = t.group, d = t.head_dim, rows = t.rows;
  const std::int64_t row_vectors = L.rp / W, pairs_d = L.dk / 2;
  const auto* kbase = static_cast<const std::uint16_t*>(t.k.data);
  const auto* vbase = static_cast<const std::uint16_t*>(t.v.data);

  const BlockKeys keys = block_keys(t);
  start_prefill_state(t, L.rp, L.rp * L.dp, L.o, L.m, L.l, L.pos);

  // Q^T as pairs of head_dim per row (rows in the lanes), unscaled; padded rows and dims are zero.
  for (std::int64_t g = 0; g < G; ++g) {
    std::uint32_t* qh = L.qh + g * pairs_d * L.rs;
    std::uint32_t* ql = L.ql + g * pairs_d * L.rs;
    for (std::int64_t i = 0; i < L.rp; ++i) {
      const std::int64_t row = t.q.offset + g * t.q.head_stride + i * t.q.row_stride;
      for (std::int64_t c2 = 0; c2 < pairs_d; ++c2) {
        std::uint16_t h0 = 0, l0 = 0, h1 = 0, l1 = 0;
        if (i < rows) {
          split_q(t.q, row + 2 * c2, h0, l0);
          if (2 * c2 + 1 < d) split_q(t.q, row + 2 * c2 + 1, h1, l1);
        }
        qh[c2 * L.rs + i] = static_cast<std::uint32_t>(h0) | (static_cast<std::uint32_t>(h1) << 16);
        ql[c2 * L.rs + i] = static_cast<std::uint32_t>(l0) | (static_cast<std::uint32_t>(l1) << 16);
      }
    }
  }

  const V scale = Vec::set1(t.scale);
  for (std::int64_t j0 = keys.lo; j0 < keys.hi; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, keys.hi - j0);
    const std::int64_t np = round_up(n, Vec::kQkKeys);
    // K tile as bf16 rows padded to an even head_dim; padded keys are zero rows.
    for (std::int64_t j = 0; j < np; ++j) {
      std::uint16_t* dst = L.kb + j * L.dk;
      if (j < n) {
        std::memcpy(dst, kbase + t.k.offset + (j0 + j) * t.k.row_stride, static_cast<std::size_t>(d) * 2);
        if (L.dk > d) dst[d] = 0;
      } else {
        std::memset(dst, 0, static_cast<std::size_t>(L.dk) * 2);
      }
    }
    // V tile as key pairs, 32-column blocks in interleave order; a missing odd key is zero.
    for (std::int64_t j = 0; j < n; j += 2) {
      const std::uint16_t* ra = vbase + t.v.offset + (j0 + j) * t.v.row_stride;
      std::uint32_t* dst = L.vb + (j / 2) * L.vs;
      for (std::int64_t c = 0; c < L.dp; c += kPairChunk) {
        const int m = static_cast<int>(imin(kPairChunk, d - c));
        const P16 a = B16::load(ra + c, m);
        const P16 b = j + 1 < n ? B16::load(ra + t.v.row_stride + c, m) : _mm512_setzero_si512();
        P16 plo, phi;
        B16::interleave(a, b, plo, phi);
        B16::store_pairs(dst + c, plo);
        B16::store_pairs(dst + c + W, phi);
      }
    }
    const bool masked = !(j0 >= keys.full_lo && j0 + n <= keys.full_hi);
    for (std::int64_t g = 0; g < G; ++g) {
      const std::uint32_t* qh = L.qh + g * pairs_d * L.rs;
      const std::uint32_t* ql = L.ql + g * pairs_d * L.rs;
      float* o = L.o + g * L.rp * L.dp;
      float* m = L.m + g * L.rp;
      float* l = L.l + g * L.rp;
      for_vec_chunks<Vec::kQkMaxVecs>(row_vectors, [&]<int NV>(std::int64_t v0) {
        for (std::int64_t j = 0; j < np; j += Vec::kQkKeys) qk_block_bf16<NV, kSplit>(L, qh, ql, j, v0);
      });
      for (std::int64_t r = 0; r < L.rp; r += W) {
        const V pos = Vec::load(L.pos + r);
        V mx = Vec::load(m + r);
        for (std::int64_t j = 0; j < n; ++j) {
          V x = Vec::mul(Vec::load(L.s + j * L.rs + r), scale);
          if (t.softcap > 0) x = softcap_v(x, t.softcap);
          if (masked) x = mask_key(x, pos, j0 + j - t.first_position, t.causal, t.window);
          Vec::store(L.s + j * L.rs + r, x);
          mx = Vec::max(mx, x);
        }
        const V m_use = usable_max(mx);
        const V alpha = Vec::exp(Vec::sub(Vec::load(m + r), m_use));
        V sum = Vec::zero();
        for (std::int64_t j = 0; j < n; j += 2) {
          const V p0 = Vec::exp(Vec::sub(Vec::load(L.s + j * L.rs + r), m_use));
          const V p1 = j + 1 < n ? Vec::exp(Vec::sub(Vec::load(L.s + (j + 1) * L.rs + r), m_use)) : Vec::zero();
          B16::store_pairs(L.pp + (j / 2) * L.rs + r, B16::pair_of(p0, p1));
          sum = Vec::add(sum, Vec::add(p0, p1));
        }
        Vec::store(l + r, Vec::fma(Vec::load(l + r), alpha, sum));
        Vec::store(m + r, mx);
        Vec::store(L.alpha + r, alpha);
      }
      for (std::int64_t i0 = 0; i0 < L.rp; i0 += Vec::kPvRows) {
        for_vec_chunks<Vec::kPvMaxVecs>(L.dp / W, [&]<int NV>(std::int64_t c0) { pv_block_bf16<NV>(L, o, n, i0, c0); });
      }
    }
  }

  write_prefill_result(t, L.o, L.m, L.l, L.rp, L.dp, PairColumn{});
}

inline void prefill_bf16(const PrefillTask& t) {
  if (t.k.dtype != DType::kBF16 || t.v.dtype != DType::kBF16) {
    prefill(t);
  } else if (t.q.dtype == DType::kBF16) {
    prefill_bf16_typed<false>(t);
  } else {
    prefill_bf16_typed<true>(t);
  }
}

inline std::size_t prefill_scratch_floats_any(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                              std::int64_t tile) {
  const std::size_t a = prefill_scratch_floats(head_dim, group, block_rows, tile),
                    b = prefill_scratch_floats_bf16(head_dim, group, block_rows, tile);
  return a > b ? a : b;
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
