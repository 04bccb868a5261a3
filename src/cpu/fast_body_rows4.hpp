// Internal: the f32-arithmetic decode body for groups that are a multiple of 4 (llama3-8b's
// group 4, and 8, 12, ...) on AVX-512 and AVX2, for f32, f16, bf16 and e4m3 K/V (bf16 K/V on CPUs
// without AVX512_BF16; with it they take fast_body_bf16_rows4.hpp, which shares the helpers here).
// Included after fast_body.hpp by the AVX-512 and AVX2 translation units (a vector holds W / 4
// keys x 4 heads: 4 keys on AVX-512, 2 on AVX2).
//
// Inputs: a DecodeTask, head_dim contiguous, any row stride.
// Layout: q scaled and in f32 ([group][dp], as fast_body.hpp); scores of a tile as [key][4 heads]
//   f32, the order the transposed score sums come out in (no per-head stores), then P in place;
//   accumulators [group][dp] in head_dim order (bf16 K/V: each 32-column chunk as even | odd
//   columns, below).
// Parallelism: one task per thread; per tile and block of 4 heads:
//   Q K^T: W / 4 keys x 4 heads = W accumulators over head_dim (FMA, each K chunk widened once
//     for the 4 heads), one transpose-and-add tree per W / 4 keys;
//   softmax over the tile in the [key][head] layout, the accumulators rescaled once per tile;
//   P V, f32 K/V on AVX-512: 2 heads x 128 columns = 16 accumulators in registers, whole V rows
//     per pass (two head passes, the second reads the tile's V from L2), p broadcast from L1;
//     f16/bf16/e4m3 K/V, and f32 on AVX2 (16 registers): 4 heads x kRows4PvVectors vectors (each V
//     chunk widened once for the 4 heads).
// Prefetch (f32 K/V): K and V rows kRows4PrefetchRows ahead into L1 from L2; the DRAM stream is
//   the L2 prefetch of V during Q K^T and of the next tile's K, as whole rows spread over the P V
//   passes. f16/bf16 K/V: round 5's pattern (32 rows ahead, each pass its columns of the next K).
// Bound: memory (1 KiB per key for f32) at two threads on the development VM. The body alone: 30 ns
//   per key per KV head at group 4, head_dim 128, f32 K/V, one Zen 4 core, cache-resident, against
//   an FMA floor of 17.5 ns (64 per key, one per cycle). See docs/perf-notes.md, CPU rounds 5-6
//   (AVX-512) and 25 (AVX2).

// How the per-tile steps (Q K^T of a tile, a P V pass) are compiled: a translation unit may define
// it before including this file (the AVX2 one inlines them into the tile loop, below).
#ifndef ATTNKIT_ROWS4_STEP
#define ATTNKIT_ROWS4_STEP
#endif

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// Keys per [key][head] score vector, and per Q K^T step (its W accumulators).
constexpr int kRows4Keys = W / 4;
static_assert(kRows4Keys * 4 == W && kRows4Keys >= 2, "the row-block body needs 8 or 16 lanes");
// Vectors of head_dim per P V pass of 4 heads (4 x kRows4PvVectors accumulators): 16 of AVX-512's
// 32 registers, 8 of AVX2's 16 (the V chunks and the broadcast take the rest).
constexpr int kRows4PvVectors = W >= 16 ? 4 : 2;

// L1 prefetch distance of the row-block bodies for f32 K/V (and the vdpbf16ps body), in rows. The
// rows come from L2 (the L2 prefetches below fetched them from DRAM), so a short distance covers
// the latency; at the shared 32 (16 KiB of f32 K rows ahead, half the L1, and the last 32 rows of
// each tile reaching into the next tile, not yet in L2) the f32 group-4 decode read 6-8% slower at
// two threads. f16 K/V (widened in the body) keep round 5's prefetch: both changes made f16 b1
// 5-15% slower. docs/perf-notes.md, CPU round 6.
constexpr std::int64_t kRows4PrefetchRows = 8;
// The short tiles of AMX Xeons (8 or 16 keys, cpu_rules.cpp) take K and V three quarters of a tile
// ahead, as the bf16 tile body's V: f16 12 rows of 16 and f32 6 of 8, against a quarter and a half
// before, read b1 x 64k 7-10% faster at group 4 (CPU round 18). Callers read the distance once per
// pass: recomputed at every key (the loops' stores keep the compiler from hoisting the task's
// tile), it cost f16 b1 x 64k 7%.
constexpr std::int64_t kShortTileKeys = 16;
template <class Tag>
std::int64_t rows4_f_prefetch_rows(const DecodeTask& t) {
  if (t.tile <= kShortTileKeys) return imax(3 * t.tile / 4, 1);
  return __is_same(Tag, F32) ? imin(kRows4PrefetchRows, imax(t.tile / 2, 2))
                             : imin(kDecodePrefetchRows, imax(t.tile / 4, 2));
}


// Scores x of vector v's keys ([key][head] lanes) after scale and soft-cap, -inf for keys >= n.
inline V finish_scores_rows4(V x, float scale, float softcap, std::int64_t v, std::int64_t n) {
  if (scale != 1.0f) x = Vec::mul(x, Vec::set1(scale));
  if (softcap > 0) x = softcap_v(x, softcap);
  if (kRows4Keys * (v + 1) > n) x = Vec::mask_keys_from(x, static_cast<int>(n - kRows4Keys * v));
  return x;
}

// The tile's max per head of s ([key][head], `vectors` vectors) joins the running state of heads
// [h0, h0 + 4): m_new per head (as a [key][head] broadcast) and alpha (acc rescaled here).
inline V raise_max_rows4(const float* s, std::int64_t vectors, float* m, float* acc, std::int64_t dp,
                         float alpha[4]) {
  V mx = Vec::set1(kNegInf);
  for (std::int64_t v = 0; v < vectors; ++v) mx = Vec::max(mx, Vec::load(s + v * W));
  alignas(64) float tile_max[W];
  Vec::store(tile_max, Vec::max_over_keys(mx));
  alignas(16) float m_new[4];
  for (int g = 0; g < 4; ++g) {
    const RaisedMax r = raise_max(m[g], tile_max[g], acc + g * dp, dp);
    m_new[g] = r.m_new;
    alpha[g] = r.alpha;
    m[g] = r.m_new;
  }
  return Vec::broadcast_heads(m_new);
}

// l[g] = l[g] * alpha[g] + the lanes of sum that belong to head g.
inline void fold_sums_rows4(V sum, const float alpha[4], float* l) {
  alignas(64) float sums[W];
  Vec::store(sums, Vec::sum_over_keys(sum));
  for (int g = 0; g < 4; ++g) l[g] = l[g] * alpha[g] + sums[g];
}

// ---------------------------------------------------------------------------------------------
// f32 arithmetic

// bf16 K/V: each 32-column chunk of a row is one 64-byte load split into its even and odd columns
// (Vec::load_bf16_even_odd: two ops, where widening two 16-column halves takes four and two
// loads), so q and the accumulators hold a chunk as [16 even | 16 odd]; the output is written back
// through EvenOddColumn (a cache-resident group-4 call 8% faster than with widening; docs/perf-notes.md,
// CPU round 15).
constexpr std::int64_t kEvenOddChunk = 2 * W;
template <class Tag>
constexpr bool even_odd_columns() {
  return __is_same(Tag, BF16);
}
struct EvenOddColumn {
  std::int64_t operator()(std::int64_t c) const {
    return c / kEvenOddChunk * kEvenOddChunk + (c % 2) * W + (c % kEvenOddChunk) / 2;
  }
};

struct DecodeLayoutRows4F {
  std::int64_t dp, tp;  // head_dim padded to W (to 2W for even/odd chunks); tile padded to 4 keys
  float *q, *acc, *s, *m, *l;  // q and acc [group][dp], s [tp][4], m and l [group]
};

inline DecodeLayoutRows4F decode_layout_rows4_f(std::int64_t head_dim, std::int64_t group, std::int64_t tile,
                                                bool even_odd, float* base) {
  DecodeLayoutRows4F L{};
  L.dp = round_up(head_dim, even_odd ? kEvenOddChunk : W);
  L.tp = round_up(tile, 4);
  float* f = base;
  L.q = f; f += floats_for(group * L.dp);
  L.acc = f; f += floats_for(group * L.dp);
  L.s = f; f += floats_for(L.tp * 4);
  L.m = f; f += floats_for(group);
  L.l = f;
  return L;
}

inline std::size_t decode_scratch_floats_rows4_f(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, kEvenOddChunk), tp = round_up(tile, 4);
  return 2 * floats_for(group * dp) + floats_for(tp * 4) + 2 * floats_for(group) + 16;
}

// Scores of keys [j0, j0 + n) for heads [h0, h0 + 4) into L.s as [key][head] (q is pre-scaled).
template <class Tag, int kD>
ATTNKIT_ROWS4_STEP void scores_rows4_f(const DecodeTask& t, const DecodeLayoutRows4F& L, std::int64_t h0,
                                       std::int64_t j0, std::int64_t n, bool prefetch) {
  constexpr std::int64_t eb = tag_bytes<Tag>(), kRowBytes = kD * eb;  // 0: not known at compile time
  const std::int64_t d = head_dim_of<kD>(t), stride = t.k.row_stride, last = t.key_end - 1;
  const PrefetchRows pk(t.k, eb, 0, d * eb, last, j0), pv(t.v, eb, 0, d * eb, last, j0);
  const std::int64_t ahead = rows4_f_prefetch_rows<Tag>(t), run = rows_per_run(t.k, n);
  const float* q = L.q + h0 * L.dp;
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    const std::int64_t tile_offset = run_offset(t.k, j0, r0), r1 = imin(n, r0 + run);
    for (std::int64_t j = r0; j < r1; j += kRows4Keys) {
      if (prefetch) {
        if (t.l1_prefetch) pk.rows<3, kRows4Keys, kRowBytes>(j0 + j + ahead);
        pv.rows<2, kRows4Keys, kRowBytes>(j0 + j);
      }
      std::int64_t kr[kRows4Keys];
#pragma GCC unroll 4
      for (int kk = 0; kk < kRows4Keys; ++kk) kr[kk] = tile_offset + imin(j + kk, n - 1) * stride;
      V acc[W];
#pragma GCC unroll 16
      for (int i = 0; i < W; ++i) acc[i] = Vec::zero();
      if constexpr (even_odd_columns<Tag>() && W < 16) {
        // 16 registers: W accumulators, both keys' even and odd K columns, and one head's q at a
        // time, one chunk per iteration (with q's 8 vectors in registers, or chunks unrolled, the
        // compiler spilled accumulators; with q read by every FMA the loads outnumbered the FMAs).
        const auto* k = static_cast<const std::uint16_t*>(t.k.data);
#pragma GCC unroll 1
        for (std::int64_t c = 0; c < d; c += kEvenOddChunk) {
          const int m = kD > 0 ? static_cast<int>(kEvenOddChunk) : static_cast<int>(imin(kEvenOddChunk, d - c));
          V even[kRows4Keys], odd[kRows4Keys];
#pragma GCC unroll 4
          for (int kk = 0; kk < kRows4Keys; ++kk) Vec::load_bf16_even_odd(k + kr[kk] + c, m, even[kk], odd[kk]);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) {
            const V qe = Vec::load(q + g * L.dp + c), qo = Vec::load(q + g * L.dp + c + W);
#pragma GCC unroll 4
            for (int kk = 0; kk < kRows4Keys; ++kk) {
              acc[kk * 4 + g] = Vec::fma(qo, odd[kk], Vec::fma(qe, even[kk], acc[kk * 4 + g]));
            }
          }
        }
        Vec::store(L.s + j * 4, Vec::transpose_sum(acc));
        continue;
      } else if constexpr (even_odd_columns<Tag>()) {
        const auto* k = static_cast<const std::uint16_t*>(t.k.data);
        for (std::int64_t c = 0; c < d; c += kEvenOddChunk) {
          const int m = static_cast<int>(imin(kEvenOddChunk, d - c));
          V qe[4], qo[4];
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) qe[g] = Vec::load(q + g * L.dp + c), qo[g] = Vec::load(q + g * L.dp + c + W);
#pragma GCC unroll 4
          for (int kk = 0; kk < kRows4Keys; ++kk) {
            V even, odd;
            Vec::load_bf16_even_odd(k + kr[kk] + c, m, even, odd);
#pragma GCC unroll 4
            for (int g = 0; g < 4; ++g) acc[kk * 4 + g] = Vec::fma(qo[g], odd, Vec::fma(qe[g], even, acc[kk * 4 + g]));
          }
        }
        Vec::store(L.s + j * 4, Vec::transpose_sum(acc));
        continue;
      }
      for (std::int64_t c = 0; c < d; c += W) {
        const int m = static_cast<int>(imin(W, d - c));
        V qv[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) qv[g] = Vec::load(q + g * L.dp + c);
#pragma GCC unroll 4
        for (int kk = 0; kk < kRows4Keys; ++kk) {
          const V kv = load_chunk<Tag>(t.k.data, kr[kk] + c, m);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) acc[kk * 4 + g] = Vec::fma(qv[g], kv, acc[kk * 4 + g]);
        }
      }
      Vec::store(L.s + j * 4, Vec::transpose_sum(acc));
    }
  }
}

// acc of heads [h, h + 2) += P V over keys [j0, j0 + n), head_dim vectors [c0, c0 + NV) (NV <= 8:
// whole rows up to head_dim 128). Pass `pass` of `passes` over the tile also prefetches its share
// of the next tile's K rows into L2, whole rows in key order, spread over its keys: every pass
// keeps the DRAM stream going, and each row is fetched in one piece (column-split prefetches
// fetched each DRAM page once per pass).
template <class Tag, int NV, int kD>
void pv_rows2_f(const DecodeTask& t, const DecodeLayoutRows4F& L, std::int64_t h, int s_lane, std::int64_t c0,
                std::int64_t j0, std::int64_t n, bool prefetch, std::int64_t pass, std::int64_t passes) {
  constexpr std::int64_t eb = tag_bytes<Tag>(), kRowBytes = kD * eb;
  // kD: whole vectors of NV in every pass (the caller's instances: head_dim 64 or 128 in one pass).
  constexpr bool kWhole = kD > 0 && kD % (NV * W) == 0;
  static_assert(kD == 0 || kWhole, "a head_dim instance takes whole passes");
  const std::int64_t d = head_dim_of<kD>(t), last = t.key_end - 1;
  const std::int64_t pf_from = c0 * W * eb, pf_bytes = imin(NV * W, d - c0 * W) * eb;
  const PrefetchRows pv(t.v, eb, pf_from, pf_bytes, last, j0), pk(t.k, eb, 0, d * eb, last, j0);
  const std::int64_t ahead = rows4_f_prefetch_rows<Tag>(t);
  const std::int64_t k_end = j0 + n + (pass + 1) * n / passes;
  std::int64_t k_next = j0 + n + pass * n / passes, k_credit = 0;
  const std::int64_t k_rows = k_end - k_next;
  int width[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) width[v] = kWhole ? W : static_cast<int>(imin(W, d - (c0 + v) * W));
  V acc[2][NV];
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[g][v] = Vec::load(L.acc + (h + g) * L.dp + (c0 + v) * W);
  const float* p = L.s + s_lane;
  const std::int64_t run = rows_per_run(t.v, n);
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    std::int64_t offset = row_offset(t.v, j0 + r0) + c0 * W;
    for (std::int64_t j = r0, r1 = imin(n, r0 + run); j < r1; ++j, offset += t.v.row_stride, p += 4) {
      if (prefetch) {
        if (t.l1_prefetch) pv.rows<3, 1>(j0 + j + ahead);
        // k_rows rows over n keys: one whenever the credit reaches n.
        k_credit += k_rows;
        if (k_credit >= n) {
          pk.rows<2, 1, kRowBytes>(k_next++);
          k_credit -= n;
        }
      }
      V vv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) vv[v] = load_chunk<Tag>(t.v.data, offset + v * W, width[v]);
#pragma GCC unroll 2
      for (int g = 0; g < 2; ++g) {
        const V pb = Vec::set1(p[g]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[g][v] = Vec::fma(pb, vv[v], acc[g][v]);
      }
    }
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) Vec::store(L.acc + (h + g) * L.dp + (c0 + v) * W, acc[g][v]);
}

// Narrow storage (f16, e4m3, bf16 without AVX512_BF16): acc of heads [h0, h0 + 4) += P V over keys
// [j0, j0 + n), head_dim vectors [c0, c0 + NV) (NV <= kRows4PvVectors), each V chunk widened once for the 4
// heads (head pairs over whole rows widen every chunk twice: f16 group 4 b1 10.8 -> 12.7 ms).
// Each pass prefetches its columns of the V rows ahead into L1 and of the next tile's K into L2
// (round 5's pattern; whole K rows spread over the passes made f16 5% slower).
template <class Tag, int NV, int kD>
ATTNKIT_ROWS4_STEP void pv_rows4_f(const DecodeTask& t, const DecodeLayoutRows4F& L, std::int64_t h0,
                                   std::int64_t c0, std::int64_t j0, std::int64_t n, bool prefetch) {
  constexpr std::int64_t eb = tag_bytes<Tag>();
  // kD: whole vectors of NV in every pass (head_dim 64 in one pass of 4, 128 in two), so the widths
  // and the prefetched bytes per row are constants.
  constexpr bool kWhole = kD > 0 && kD % (NV * W) == 0;
  static_assert(kD == 0 || kWhole, "a head_dim instance takes whole passes");
  constexpr std::int64_t kPassBytes = kWhole ? NV * W * eb : 0;
  const std::int64_t d = head_dim_of<kD>(t), last = t.key_end - 1;
  const std::int64_t pf_from = c0 * W * eb, pf_bytes = imin(NV * W, d - c0 * W) * eb;
  const PrefetchRows pv(t.v, eb, pf_from, pf_bytes, last, j0), pk(t.k, eb, pf_from, pf_bytes, last, j0);
  const std::int64_t ahead = rows4_f_prefetch_rows<Tag>(t);
  int width[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) width[v] = kWhole ? W : static_cast<int>(imin(W, d - (c0 + v) * W));
  V acc[4][NV];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[g][v] = Vec::load(L.acc + (h0 + g) * L.dp + (c0 + v) * W);
  const std::int64_t run = rows_per_run(t.v, n);
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    std::int64_t offset = row_offset(t.v, j0 + r0) + c0 * W;
    for (std::int64_t j = r0, r1 = imin(n, r0 + run); j < r1; ++j, offset += t.v.row_stride) {
      if (prefetch) {
        if (t.l1_prefetch) pv.rows<3, 1, kPassBytes>(j0 + j + ahead);
        pk.rows<2, 1, kPassBytes>(j0 + n + j);
      }
      V vv[NV];
      if constexpr (even_odd_columns<Tag>()) {
        static_assert(NV % 2 == 0, "even/odd passes take whole 32-column chunks");
#pragma GCC unroll 2
        for (int v = 0; v < NV; v += 2) {
          Vec::load_bf16_even_odd(static_cast<const std::uint16_t*>(t.v.data) + offset + v * W,
                                  kWhole ? static_cast<int>(kEvenOddChunk)
                                         : static_cast<int>(imin(kEvenOddChunk, d - (c0 + v) * W)),
                                  vv[v], vv[v + 1]);
        }
      } else {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) vv[v] = load_chunk<Tag>(t.v.data, offset + v * W, width[v]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const V pb = Vec::set1(L.s[j * 4 + g]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[g][v] = Vec::fma(pb, vv[v], acc[g][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) Vec::store(L.acc + (h0 + g) * L.dp + (c0 + v) * W, acc[g][v]);
}

// Passes of at most 8 vectors of head_dim: how many, and the width of the one starting at c0.
inline std::int64_t pv_chunk_vectors(std::int64_t left) { return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1; }
inline std::int64_t pv_chunks(std::int64_t vecs) {
  std::int64_t chunks = 0;
  for (std::int64_t c0 = 0; c0 < vecs; c0 += pv_chunk_vectors(vecs - c0)) ++chunks;
  return chunks;
}

template <class Tag, int kD>
void decode_rows4_f(const DecodeTask& t) {
  constexpr bool kEvenOdd = even_odd_columns<Tag>();
  const DecodeLayoutRows4F L = decode_layout_rows4_f(t.head_dim, t.group, t.tile, kEvenOdd, t.scratch);
  const std::int64_t G = t.group, d = head_dim_of<kD>(t), vecs = L.dp / W, chunks = pv_chunks(vecs);
  for (std::int64_t g = 0; g < G; ++g) {
    const std::int64_t row = t.q.offset + g * t.q.head_stride;
    for (std::int64_t c = 0; c < L.dp; ++c) {
      L.q[g * L.dp + (kEvenOdd ? EvenOddColumn{}(c) : c)] = c < d ? t.scale * load_scalar(t.q, row + c) : 0.0f;
    }
    for (std::int64_t c = 0; c < L.dp; ++c) L.acc[g * L.dp + c] = 0.0f;
    L.m[g] = kNegInf;
    L.l[g] = 0.0f;
  }
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, t.key_end - j0), vectors = (n + kRows4Keys - 1) / kRows4Keys;
    for (std::int64_t h0 = 0; h0 < G; h0 += 4) {
      const bool prefetch = h0 == 0;  // later blocks of the group read the tile from cache
      scores_rows4_f<Tag, kD>(t, L, h0, j0, n, prefetch);
      for (std::int64_t v = 0; v < vectors; ++v) {
        Vec::store(L.s + v * W, finish_scores_rows4(Vec::load(L.s + v * W), 1.0f, t.softcap, v, n));
      }
      float alpha[4];
      const V mv = raise_max_rows4(L.s, vectors, L.m + h0, L.acc + h0 * L.dp, L.dp, alpha);
      V sum = Vec::zero();
      for (std::int64_t v = 0; v < vectors; ++v) {
        const V p = Vec::exp_nonpositive(Vec::sub(Vec::load(L.s + v * W), mv));
        Vec::store(L.s + v * W, p);
        sum = Vec::add(sum, p);
      }
      fold_sums_rows4(sum, alpha, L.l + h0);
      if constexpr (!__is_same(Tag, F32) || W < 16) {
        // Narrow storage (and f32 on AVX2): 4 heads x kRows4PvVectors-vector passes (each chunk
        // widened once).
        constexpr int NV = kRows4PvVectors;
        if constexpr (kD > 0) {
          static_assert(kD % (NV * W) == 0, "a head_dim instance takes whole passes");
#pragma GCC unroll 8
          for (std::int64_t c0 = 0; c0 < kD / W; c0 += NV) pv_rows4_f<Tag, NV, kD>(t, L, h0, c0, j0, n, prefetch);
          continue;
        }
        std::int64_t c0 = 0;
        if constexpr (NV == 4) {
          for (; c0 + 4 <= vecs; c0 += 4) pv_rows4_f<Tag, 4, 0>(t, L, h0, c0, j0, n, prefetch);
        }
        for (; vecs - c0 >= 2; c0 += 2) pv_rows4_f<Tag, 2, 0>(t, L, h0, c0, j0, n, prefetch);
        if constexpr (!kEvenOdd) {  // even/odd rows are padded to whole chunks: no single vector left
          if (c0 < vecs) pv_rows4_f<Tag, 1, 0>(t, L, h0, c0, j0, n, prefetch);
        }
      } else {
        // f32: head pairs x chunks of head_dim; the pair's 16 accumulators stay in registers.
        // head_dim 128 (one chunk) is called with constants: 2-4% faster in alternating runs.
        if constexpr (kD > 0) {
          static_assert(kD % W == 0 && kD <= 8 * W, "a head_dim instance takes whole rows in one pass");
          pv_rows2_f<Tag, kD / W, kD>(t, L, h0, 0, 0, j0, n, prefetch, 0, 2);
          pv_rows2_f<Tag, kD / W, kD>(t, L, h0 + 2, 2, 0, j0, n, prefetch, 1, 2);
          continue;
        }
        if (vecs == 8) {
          pv_rows2_f<Tag, 8, 0>(t, L, h0, 0, 0, j0, n, prefetch, 0, 2);
          pv_rows2_f<Tag, 8, 0>(t, L, h0 + 2, 2, 0, j0, n, prefetch, 1, 2);
          continue;
        }
        const std::int64_t passes = 2 * chunks;
        std::int64_t pass = 0;
        for (int hp = 0; hp < 4; hp += 2) {
          for (std::int64_t c0 = 0; c0 < vecs; c0 += pv_chunk_vectors(vecs - c0), ++pass) {
            const std::int64_t h = h0 + hp;
            switch (pv_chunk_vectors(vecs - c0)) {
              case 8: pv_rows2_f<Tag, 8, 0>(t, L, h, hp, c0, j0, n, prefetch, pass, passes); break;
              case 4: pv_rows2_f<Tag, 4, 0>(t, L, h, hp, c0, j0, n, prefetch, pass, passes); break;
              case 2: pv_rows2_f<Tag, 2, 0>(t, L, h, hp, c0, j0, n, prefetch, pass, passes); break;
              default: pv_rows2_f<Tag, 1, 0>(t, L, h, hp, c0, j0, n, prefetch, pass, passes); break;
            }
          }
        }
      }
    }
  }
  if constexpr (kEvenOdd) {
    write_decode_result(t, L.acc, L.dp, L.m, L.l, EvenOddColumn{});
  } else {
    write_decode_result(t, L.acc, L.dp, L.m, L.l);
  }
}

inline bool uses_rows4_f(const DecodeTask& t) { return t.group % 4 == 0; }

// The f32-arithmetic decode entry of an AVX-512 or AVX2 level: groups of 4k heads here, the rest as before.
inline void decode_or_rows4(const DecodeTask& t) {
  if (!uses_rows4_f(t)) {
    decode(t);
    return;
  }
  switch (t.k.dtype) {
    case DType::kF32: with_head_dim_instance(t, [&]<int kD>() { decode_rows4_f<F32, kD>(t); }); break;
    case DType::kF16: with_head_dim_instance(t, [&]<int kD>() { decode_rows4_f<F16, kD>(t); }); break;
    case DType::kE4M3: {
      const DecodeTask e = e4m3_task(t);
      with_head_dim_instance(e, [&]<int kD>() { decode_rows4_f<E4M3, kD>(e); });
      break;
    }
    default: with_head_dim_instance(t, [&]<int kD>() { decode_rows4_f<BF16, kD>(t); }); break;
  }
}

inline std::size_t decode_scratch_floats_or_rows4(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::size_t a = decode_scratch_floats(head_dim, group, tile);
  const std::size_t b = group % 4 == 0 ? decode_scratch_floats_rows4_f(head_dim, group, tile) : 0;
  return a > b ? a : b;
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
