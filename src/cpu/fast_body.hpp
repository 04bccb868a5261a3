// Internal: the fast CPU kernel bodies, written once against a vector wrapper `Vec` and compiled
// once per instruction set. A translation unit defines ATTNKIT_ISA_NS (a namespace name unique
// to it) and the Vec type, turns on its target, then includes this file: every function lands in
// its own namespace, so the three compilations never share a symbol (Highway's pattern).
//
// Decode (split-KV, GQA-packed). Inputs: q rows of one KV group, K/V rows of one sequence and KV
//   head ([key, head_dim], head_dim contiguous, f32/f16/bf16/e4m3). Each key row is loaded once and
//   dotted with all `group` query rows: `W / rows` keys x `rows` query heads fill the W
//   accumulators, one transpose-and-add tree turns them into W scores. Then the tile's online
//   softmax, then P V with each V row loaded once per vector of head_dim for the whole group.
//   K/V rows 32 ahead (8 for f32 rows) are prefetched into L1, and the other stream (V during
//   Q K^T, the next tile's K during P V) into L2, so both streams stay in flight across phases.
//   Bound: memory (K/V read once) for small groups; FMA for large groups (group FLOPs per byte).
//   Where the plan pipelines a multi-head cache (pipeline_stages 2), decode_pipelined reads each
//   K row beside the V row of the key one tile earlier instead, with no software prefetch.
// Prefill (tiled). Inputs: a block of query rows for each head of the group, K/V tiles converted
//   to f32 once per block. S^T = K Q^T with query rows in the vector lanes (Q transposed once per
//   block), so the online softmax is lane-parallel over rows; O^T += V^T P^T keeps the rows in the
//   lanes too (head_dim columns broadcast per key), so both products run one register block shape,
//   Vec::kQkKeys keys or columns x kQkMaxVecs row vectors.
//   Tiles wholly outside a row block's window / causal range are skipped; tiles crossing the
//   boundary are masked lane by lane. Bound: FMA rate.
// Numerics: f32 throughout; scale folded into q; masked keys get probability exactly 0.
// Task input/output, prefetch and the running softmax state: fast_body_io.hpp (shared with the
// bf16 bodies).
#ifndef ATTNKIT_ISA_NS
#error "define ATTNKIT_ISA_NS before including fast_body.hpp"
#endif
#include "cpu/fast_body_io.hpp"

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

// W elements (n at the tail) of a row of storage dtype `Tag` as f32. E4M3: an fp8 KV cache's stored
// values times 2^-8 (decode only): the 2^8 that makes them exact (cpu/simd/vec_e4m3.hpp) is folded,
// with the cache's scales, into the task's scale and out_scale (e4m3_task), not applied per element.
struct F32 {};
struct F16 {};
struct BF16 {};
struct E4M3 {};
template <class Tag>
constexpr std::int64_t tag_bytes() {
  return __is_same(Tag, F32) ? 4 : __is_same(Tag, E4M3) ? 1 : 2;
}
// Vecs that widen 2W bf16 values at once (load_bf16_pair) take the decode's bf16 rows in pairs of
// chunks where head_dim is known (kD > 0, a multiple of 2W).
template <class T, class = void>
struct HasBf16Pair : std::false_type {};
template <class T>
struct HasBf16Pair<T, std::void_t<decltype(T::load_bf16_pair(nullptr, std::declval<typename T::V&>(),
                                                              std::declval<typename T::V&>()))>> : std::true_type {};
template <class Tag, int kD>
constexpr bool kPairChunks = __is_same(Tag, BF16) && HasBf16Pair<Vec>::value && kD > 0 && kD % (2 * W) == 0;
template <class Tag, int kD>
inline void load_chunk_pair(const void* base, std::int64_t offset, V& lo, V& hi) {
  using PairVec = std::conditional_t<kPairChunks<Tag, kD>, Vec, void>;  // dependent: only pair Vecs see the call
  PairVec::load_bf16_pair(static_cast<const std::uint16_t*>(base) + offset, lo, hi);
}

template <class Tag>
inline V load_chunk(const void* base, std::int64_t offset, int n) {
  if constexpr (__is_same(Tag, F32)) {
    return Vec::load_f32(static_cast<const float*>(base) + offset, n);
  } else if constexpr (__is_same(Tag, F16)) {
    return Vec::load_f16(static_cast<const std::uint16_t*>(base) + offset, n);
  } else if constexpr (__is_same(Tag, E4M3)) {
    return Vec::load_e4m3_over_256(static_cast<const std::uint8_t*>(base) + offset, n);
  } else {
    return Vec::load_bf16(static_cast<const std::uint16_t*>(base) + offset, n);
  }
}

// The task an E4M3 body runs: its loads give the stored values times 2^-8, so the scores' scale and
// the output rows' take the 2^8 back, once per task (exact: a power of two). Multiplying every
// loaded vector instead made the b1 / b4 x 64k group-4 decode 10% / 19% slower on two threads of a
// Zen 4 (one run each on a shared host; the widening, not memory, bounds the e4m3 decode there).
inline DecodeTask e4m3_task(const DecodeTask& t) {
  DecodeTask e = t;
  e.scale *= ::attnkit::cpu::simd::kE4m3FromF16;
  e.out_scale *= ::attnkit::cpu::simd::kE4m3FromF16;
  return e;
}

// One row of n elements into f32 dst (padded to dp with zeros), times `scale`.
template <class Tag>
inline void convert_row(const void* base, std::int64_t offset, std::int64_t n, std::int64_t dp, float scale,
                        float* dst) {
  const V s = Vec::set1(scale);
  for (std::int64_t c = 0; c < dp; c += W) {
    const int m = static_cast<int>(imin(W, n - c));
    Vec::store(dst + c, m > 0 ? Vec::mul(load_chunk<Tag>(base, offset + c, m), s) : Vec::zero());
  }
}

inline V tanh_v(V x) {
  // tanh(x) = 1 - 2 / (e^{2x} + 1); e^{2x} is clamped, so |x| large gives +-1 exactly. Below
  // |x| = 1/16 that form cancels (a soft-cap far above the scores would flatten them), so small
  // arguments take the series x (1 - x^2/3 + 2x^4/15), exact to float there.
  const V one = Vec::set1(1.0f);
  const V e = Vec::exp(Vec::add(x, x));
  const V wide = Vec::sub(one, Vec::div(Vec::set1(2.0f), Vec::add(e, one)));
  const V x2 = Vec::mul(x, x);
  const V series = Vec::mul(x, Vec::fma(x2, Vec::fma(x2, Vec::set1(2.0f / 15.0f), Vec::set1(-1.0f / 3.0f)), one));
  return Vec::select_lt(x2, Vec::set1(1.0f / 256.0f), series, wide);
}

inline V softcap_v(V s, float cap) {
  return Vec::mul(Vec::set1(cap), tanh_v(Vec::mul(s, Vec::set1(1.0f / cap))));
}

// ---------------------------------------------------------------------------------------------
// Decode

// Head_dim 64 and 128 have their own instances of the decode bodies (kD): every loop over head_dim
// and every prefetch unrolled, no tail checks. In cache, group 4 at 128: the row-block body's f16
// 26 -> 23 ns per key and KV head, f32 45 -> 38 (CPU round 18); this body's on AVX2 bf16 54 -> 38-42,
// f32 65-100 -> 62-69 (CPU round 19). kD = 0: the task's head_dim, any multiple of 8.
template <int kD>
inline std::int64_t head_dim_of(const DecodeTask& t) {
  static_assert(kD % W == 0, "a head_dim instance takes whole vectors");
  return kD > 0 ? kD : t.head_dim;
}
template <class F>
inline void with_head_dim_instance(const DecodeTask& t, F&& body) {
  switch (t.head_dim) {
    case 128: body.template operator()<128>(); break;
    case 64: body.template operator()<64>(); break;
    default: body.template operator()<0>(); break;
  }
}

struct DecodeLayout {
  std::int64_t dp, tp;  // head_dim and tile padded to W
  float *q, *acc, *scores, *m, *l, *lanes;
};

inline DecodeLayout decode_layout(std::int64_t head_dim, std::int64_t group, std::int64_t tile, float* base) {
  DecodeLayout L{};
  L.dp = round_up(head_dim, W);
  L.tp = round_up(tile, W);
  float* p = base;
  L.q = p; p += floats_for(group * L.dp);
  L.acc = p; p += floats_for(group * L.dp);
  L.scores = p; p += floats_for(group * L.tp);
  L.m = p; p += floats_for(group);
  L.l = p; p += floats_for(group);
  L.lanes = p;
  return L;
}

// The group's q rows times the scale (zero-padded to dp), O = 0, m = -inf, l = 0.
inline void start_decode_state(const DecodeTask& t, const DecodeLayout& L) {
  for (std::int64_t g = 0; g < t.group; ++g) {
    const std::int64_t row = t.q.offset + g * t.q.head_stride;
    for (std::int64_t c = 0; c < L.dp; ++c) L.q[g * L.dp + c] = c < t.head_dim ? t.scale * load_scalar(t.q, row + c) : 0.0f;
    for (std::int64_t c = 0; c < L.dp; ++c) L.acc[g * L.dp + c] = 0.0f;
    L.m[g] = kNegInf;
    L.l[g] = 0.0f;
  }
}

inline std::size_t decode_scratch_floats(std::int64_t head_dim, std::int64_t group, std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, W), tp = round_up(tile, W);
  return 2 * floats_for(group * dp) + floats_for(group * tp) + 2 * floats_for(group) + floats_for(W) + 16;
}

// L1 prefetch distance in rows: f32 K/V rows come from L2 (their L2 prefetch fetched them from
// DRAM), and 32 f32 rows ahead read 5-9% slower than 8 (docs/perf-notes.md, CPU round 6; the
// row-block body measured the same); f16/bf16 rows the shared distance. On the 16-key tiles of
// AMX Xeons much less: f32 an eighth of a tile (2 rows: 14% faster than 8 at group 1), f16 a
// quarter (4 rows: 27-31% faster than 32) (CPU round 15); 256-key tiles keep 8 and 32.
template <class Tag>
std::int64_t decode_prefetch_rows(const DecodeTask& t) {
  return __is_same(Tag, F32) ? imin(8, imax(t.tile / 8, 2)) : imin(kDecodePrefetchRows, imax(t.tile / 4, 2));
}

// Scores of keys [j0, j0 + n) for query rows [g0, g0 + GC): passes of W / GC keys.
template <class Tag, int GC, int kD>
void decode_scores(const DecodeTask& t, const DecodeLayout& L, std::int64_t g0, std::int64_t j0, std::int64_t n) {
  constexpr int kKeys = W / GC > 0 ? W / GC : 1;
  static_assert(kKeys * GC <= W || W == 1, "accumulators exceed the vector width");
  constexpr std::int64_t eb = tag_bytes<Tag>();
  constexpr std::int64_t kRowBytes = kD * eb;  // 0: not known at compile time
  const std::int64_t d = head_dim_of<kD>(t), ahead = decode_prefetch_rows<Tag>(t), last = t.key_end - 1;
  const PrefetchRows pk(t.k, eb, 0, d * eb, last, j0), pv(t.v, eb, 0, d * eb, last, j0);
  const std::int64_t run = rows_per_run(t.k, n);
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    const std::int64_t tile_offset = run_offset(t.k, j0, r0), r1 = imin(n, r0 + run);
    for (std::int64_t j = r0; j < r1; j += kKeys) {
      typename Vec::Acc acc[W];
      for (int i = 0; i < W; ++i) acc[i] = Vec::zero();
      std::int64_t key_offset[kKeys];
      for (int kk = 0; kk < kKeys; ++kk) {
        // A short last pass repeats its last key; those lanes are discarded.
        key_offset[kk] = tile_offset + imin(j + kk, n - 1) * t.k.row_stride;
      }
      if (g0 == 0) {
        for (int kk = 0; kk < kKeys; ++kk) {
          pk.rows<3, 1, kRowBytes>(j0 + j + kk + ahead);
          pv.rows<2, 1, kRowBytes>(j0 + j + kk);
        }
      }
      // Pairs hold 2 x kKeys K vectors beside the W accumulators: only for a few keys per pass.
      if constexpr (kPairChunks<Tag, kD> && kKeys <= 2) {
#pragma GCC unroll 8
        for (std::int64_t c = 0; c < d; c += 2 * W) {
          V klo[kKeys], khi[kKeys];
          for (int kk = 0; kk < kKeys; ++kk) {
            load_chunk_pair<Tag, kD>(t.k.data, key_offset[kk] + c, klo[kk], khi[kk]);
          }
          for (int g = 0; g < GC; ++g) {
            const V qlo = Vec::load(L.q + (g0 + g) * L.dp + c), qhi = Vec::load(L.q + (g0 + g) * L.dp + c + W);
            for (int kk = 0; kk < kKeys; ++kk) {
              acc[kk * GC + g] = Vec::acc_fma(qlo, klo[kk], acc[kk * GC + g]);
              acc[kk * GC + g] = Vec::acc_fma(qhi, khi[kk], acc[kk * GC + g]);
            }
          }
        }
      } else {
#pragma GCC unroll 16
        for (std::int64_t c = 0; c < d; c += W) {
          const int m = kD > 0 ? W : static_cast<int>(imin(W, d - c));
          V qv[GC];
          for (int g = 0; g < GC; ++g) qv[g] = Vec::load(L.q + (g0 + g) * L.dp + c);
          for (int kk = 0; kk < kKeys; ++kk) {
            const V kv = load_chunk<Tag>(t.k.data, key_offset[kk] + c, m);
            for (int g = 0; g < GC; ++g) acc[kk * GC + g] = Vec::acc_fma(qv[g], kv, acc[kk * GC + g]);
          }
        }
      }
      Vec::store(L.lanes, Vec::acc_transpose_sum(acc));
      const std::int64_t valid = imin(kKeys, n - j);
      for (std::int64_t kk = 0; kk < valid; ++kk) {
        for (int g = 0; g < GC; ++g) L.scores[(g0 + g) * L.tp + j + kk] = L.lanes[kk * GC + g];
      }
    }
  }
}

// acc[g] += sum_j p[g][j] * V[j] for rows [g0, g0 + GR), vectors [c0, c0 + NV) of head_dim,
// keys [j0, j0 + n): each V row chunk is loaded once for the GR rows, each p broadcast once for NV.
template <class Tag, int GR, int NV, int kD>
void decode_pv_block(const DecodeTask& t, const DecodeLayout& L, std::int64_t g0, std::int64_t c0, std::int64_t j0,
                     std::int64_t n) {
  const std::int64_t d = head_dim_of<kD>(t);
  constexpr std::int64_t eb = tag_bytes<Tag>();
  V acc[GR][NV];
  int width[NV];
  for (int v = 0; v < NV; ++v) width[v] = kD > 0 ? W : static_cast<int>(imin(W, d - (c0 + v) * W));
  for (int g = 0; g < GR; ++g)
    for (int v = 0; v < NV; ++v) acc[g][v] = Vec::load(L.acc + (g0 + g) * L.dp + (c0 + v) * W);
  const std::int64_t pf_from = c0 * W * eb, pf_bytes = kD > 0 ? NV * W * eb : imin(NV * W, d - c0 * W) * eb;
  constexpr std::int64_t kVBytes = kD > 0 ? NV * W * eb : 0, kKBytes = kD * eb;  // 0: known at run time
  const std::int64_t ahead = decode_prefetch_rows<Tag>(t), last = t.key_end - 1;
  const PrefetchRows pv(t.v, eb, pf_from, pf_bytes, last, j0), pk(t.k, eb, 0, d * eb, last, j0);
  const std::int64_t run = rows_per_run(t.v, n);
  for (std::int64_t r0 = 0; r0 < n; r0 += run) {
    std::int64_t offset = row_offset(t.v, j0 + r0) + c0 * W;
    for (std::int64_t j = r0, r1 = imin(n, r0 + run); j < r1; ++j, offset += t.v.row_stride) {
      if (g0 == 0) {
        pv.rows<3, 1, kVBytes>(j0 + j + ahead);
        if (c0 == 0) pk.rows<2, 1, kKBytes>(j0 + n + j);
      }
      V vv[NV];
      if constexpr (kPairChunks<Tag, kD> && NV % 2 == 0) {
        for (int v = 0; v < NV; v += 2) {
          load_chunk_pair<Tag, kD>(t.v.data, offset + v * W, vv[v], vv[v + 1]);
        }
      } else {
        for (int v = 0; v < NV; ++v) vv[v] = load_chunk<Tag>(t.v.data, offset + v * W, width[v]);
      }
      for (int g = 0; g < GR; ++g) {
        const V pb = Vec::set1(L.scores[(g0 + g) * L.tp + j]);
        for (int v = 0; v < NV; ++v) acc[g][v] = Vec::fma(pb, vv[v], acc[g][v]);
      }
    }
  }
  for (int g = 0; g < GR; ++g)
    for (int v = 0; v < NV; ++v) Vec::store(L.acc + (g0 + g) * L.dp + (c0 + v) * W, acc[g][v]);
}

// Accumulator budget of one P V block (registers left for V chunks and the broadcast).
constexpr int kPvAccumulators = W >= 16 ? 16 : (W >= 8 ? 8 : 4);

template <class Tag, int GR, int kD>
void decode_pv(const DecodeTask& t, const DecodeLayout& L, std::int64_t g0, std::int64_t j0, std::int64_t n) {
  constexpr int kMaxVecs = kPvAccumulators / GR > 0 ? kPvAccumulators / GR : 1;
  const std::int64_t vectors = L.dp / W;
  std::int64_t c0 = 0;
  while (c0 < vectors) {
    const std::int64_t left = vectors - c0;
    if (kMaxVecs >= 8 && left >= 8) { decode_pv_block<Tag, GR, (kMaxVecs >= 8 ? 8 : 1), kD>(t, L, g0, c0, j0, n); c0 += 8; }
    else if (kMaxVecs >= 4 && left >= 4) { decode_pv_block<Tag, GR, (kMaxVecs >= 4 ? 4 : 1), kD>(t, L, g0, c0, j0, n); c0 += 4; }
    else if (kMaxVecs >= 2 && left >= 2) { decode_pv_block<Tag, GR, (kMaxVecs >= 2 ? 2 : 1), kD>(t, L, g0, c0, j0, n); c0 += 2; }
    else { decode_pv_block<Tag, GR, 1, kD>(t, L, g0, c0, j0, n); c0 += 1; }
  }
}

// Runs `f.template operator()<N>(g0)` over the group in power-of-two chunks of at most kMax rows.
template <int kMax, class F>
void for_row_chunks(std::int64_t group, F&& f) {
  std::int64_t g0 = 0;
  while (g0 < group) {
    const std::int64_t left = group - g0;
    if (kMax >= 16 && left >= 16) { f.template operator()<(kMax >= 16 ? 16 : 1)>(g0); g0 += 16; }
    else if (kMax >= 8 && left >= 8) { f.template operator()<(kMax >= 8 ? 8 : 1)>(g0); g0 += 8; }
    else if (kMax >= 4 && left >= 4) { f.template operator()<(kMax >= 4 ? 4 : 1)>(g0); g0 += 4; }
    else if (kMax >= 2 && left >= 2) { f.template operator()<(kMax >= 2 ? 2 : 1)>(g0); g0 += 2; }
    else { f.template operator()<1>(g0); g0 += 1; }
  }
}

template <class Tag, int kD>
void decode_typed(const DecodeTask& t) {
  const DecodeLayout L = decode_layout(t.head_dim, t.group, t.tile, t.scratch);
  const std::int64_t G = t.group;
  start_decode_state(t, L);
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, t.key_end - j0);
    for_row_chunks<(W >= 16 ? 16 : W)>(G, [&]<int GC>(std::int64_t g0) { decode_scores<Tag, GC, kD>(t, L, g0, j0, n); });
    // Online softmax of the tile, one query head at a time (scores contiguous per head).
    for (std::int64_t g = 0; g < G; ++g) {
      float* s = L.scores + g * L.tp;
      for (std::int64_t j = n; j < round_up(n, W); ++j) s[j] = kNegInf;
      V mx = Vec::set1(kNegInf);
      for (std::int64_t j = 0; j < n; j += W) {
        V x = Vec::load(s + j);
        if (t.softcap > 0) {
          x = Vec::select_lt(x, Vec::set1(-3.0e38f), x, softcap_v(x, t.softcap));  // keep -inf padding
          Vec::store(s + j, x);
        }
        mx = Vec::max(mx, x);
      }
      const RaisedMax r = raise_max(L.m[g], Vec::reduce_max(mx), L.acc + g * L.dp, L.dp);
      const V mv = Vec::set1(r.m_new);
      V sum = Vec::zero();
      for (std::int64_t j = 0; j < n; j += W) {
        const V p = Vec::exp_nonpositive(Vec::sub(Vec::load(s + j), mv));
        Vec::store(s + j, p);
        sum = Vec::add(sum, p);
      }
      L.l[g] = L.l[g] * r.alpha + Vec::reduce_add(sum);
      L.m[g] = r.m_new;
    }
    for_row_chunks<(W >= 8 ? 8 : 4)>(G, [&]<int GR>(std::int64_t g0) { decode_pv<Tag, GR, kD>(t, L, g0, j0, n); });
  }
  write_decode_result(t, L.acc, L.dp, L.m, L.l);
}

// The plan's two-stage pipeline for GQA groups of GC <= 2 query heads (multi-head attention and
// pairs), in tiles of W / GC keys: each key's K row is read beside the V row of the key one tile
// earlier, so the Q K^T of a tile and the P V of the tile before it run in one loop, with the
// tile's online softmax between tiles. K and V stream side by side by demand loads in row order,
// and no software prefetch is issued: on AMD cores the prefetch hints hold the L1's miss buffers,
// and two threads of a Zen 2 read rows this way at ~34 GB/s against ~23 for a tile's K then its V
// (dev/cpu_pattern_probe.cpp, CPU round 33). O holds tiles up to b - 1 against their running max
// when tile b's max arrives, so the rescale by alpha falls where the tiled body's does.
// Scores sit in the lanes as [key][head] (lane kk * GC + g), as in decode_scores.
template <class Tag, int GC, int kD>
void decode_pipelined(const DecodeTask& t) {
  constexpr int kKeys = W / GC;
  const DecodeLayout L = decode_layout(t.head_dim, GC, t.tile, t.scratch);
  const std::int64_t d = head_dim_of<kD>(t);
  start_decode_state(t, L);
  float* p = L.scores;  // the previous tile's probabilities, [key][head]
  std::int64_t p_keys = 0, p_offset = 0;  // and the offset of its first V row
  auto add_pv = [&](std::int64_t kk) {
    V pb[GC];
    for (int g = 0; g < GC; ++g) pb[g] = Vec::set1(p[kk * GC + g]);
    const std::int64_t off = p_offset + kk * t.v.row_stride;
#pragma GCC unroll 16
    for (std::int64_t c = 0; c < d; c += W) {
      const int w = kD > 0 ? W : static_cast<int>(imin(W, d - c));
      const V v = load_chunk<Tag>(t.v.data, off + c, w);
      for (int g = 0; g < GC; ++g) Vec::store(L.acc + g * L.dp + c, Vec::fma(pb[g], v, Vec::load(L.acc + g * L.dp + c)));
    }
  };
  for (std::int64_t j0 = t.key_begin; j0 < t.key_end; j0 += kKeys) {
    const std::int64_t n = imin(kKeys, t.key_end - j0);
    typename Vec::Acc acc[W];
    const std::int64_t k_offset = row_offset(t.k, j0);
    for (int kk = 0; kk < kKeys; ++kk) {
      for (int g = 0; g < GC; ++g) acc[kk * GC + g] = Vec::zero();
      if (kk < n) {
        const std::int64_t off = k_offset + kk * t.k.row_stride;
#pragma GCC unroll 16
        for (std::int64_t c = 0; c < d; c += W) {
          const int w = kD > 0 ? W : static_cast<int>(imin(W, d - c));
          const V k = load_chunk<Tag>(t.k.data, off + c, w);
          for (int g = 0; g < GC; ++g) acc[kk * GC + g] = Vec::acc_fma(Vec::load(L.q + g * L.dp + c), k, acc[kk * GC + g]);
        }
      }
      if (kk < p_keys) add_pv(kk);
    }
    V x = Vec::acc_transpose_sum(acc);
    if (t.softcap > 0) x = softcap_v(x, t.softcap);
    Vec::store(L.lanes, x);
    for (std::int64_t i = n * GC; i < W; ++i) L.lanes[i] = kNegInf;
    alignas(64) float m_lanes[W];
    for (int g = 0; g < GC; ++g) {
      float tile_max = kNegInf;
      for (int kk = 0; kk < n; ++kk) tile_max = L.lanes[kk * GC + g] > tile_max ? L.lanes[kk * GC + g] : tile_max;
      const RaisedMax r = raise_max(L.m[g], tile_max, L.acc + g * L.dp, L.dp);
      for (int kk = 0; kk < kKeys; ++kk) m_lanes[kk * GC + g] = r.m_new;
      L.l[g] *= r.alpha;
      L.m[g] = r.m_new;
    }
    Vec::store(p, Vec::exp_nonpositive(Vec::sub(Vec::load(L.lanes), Vec::load(m_lanes))));
    for (int kk = 0; kk < n; ++kk)
      for (int g = 0; g < GC; ++g) L.l[g] += p[kk * GC + g];
    p_keys = n;
    p_offset = row_offset(t.v, j0);
  }
  for (std::int64_t kk = 0; kk < p_keys; ++kk) add_pv(kk);
  write_decode_result(t, L.acc, L.dp, L.m, L.l);
}

// Where the pipelined body exists: Q K^T accumulators that are plain vectors of at least 8 lanes
// (the AVX2 and AVX-512 levels; at the scalar level's W of 1 every key would be its own tile).
constexpr bool kPipelinedDecode = W >= 8 && __is_same(typename Vec::Acc, V);

inline void decode(const DecodeTask& t) {
  if constexpr (kPipelinedDecode) {
    if (t.pipelined && (t.group == 1 || t.group == 2) && t.tile * t.group == W) {
      auto run = [&]<int GC>() {
        switch (t.k.dtype) {
          case DType::kF32: with_head_dim_instance(t, [&]<int kD>() { decode_pipelined<F32, GC, kD>(t); }); return;
          case DType::kF16: with_head_dim_instance(t, [&]<int kD>() { decode_pipelined<F16, GC, kD>(t); }); return;
          case DType::kE4M3: {
            const DecodeTask e = e4m3_task(t);
            with_head_dim_instance(e, [&]<int kD>() { decode_pipelined<E4M3, GC, kD>(e); });
            return;
          }
          default: with_head_dim_instance(t, [&]<int kD>() { decode_pipelined<BF16, GC, kD>(t); }); return;
        }
      };
      if (t.group == 1) run.template operator()<1>();
      else run.template operator()<2>();
      return;
    }
  }
  switch (t.k.dtype) {
    case DType::kF32: with_head_dim_instance(t, [&]<int kD>() { decode_typed<F32, kD>(t); }); break;
    case DType::kF16: with_head_dim_instance(t, [&]<int kD>() { decode_typed<F16, kD>(t); }); break;
    case DType::kE4M3: {
      const DecodeTask e = e4m3_task(t);
      with_head_dim_instance(e, [&]<int kD>() { decode_typed<E4M3, kD>(e); });
      break;
    }
    default: with_head_dim_instance(t, [&]<int kD>() { decode_typed<BF16, kD>(t); }); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Prefill

struct PrefillLayout {
  std::int64_t dp, rp, tp;  // head_dim, block rows and tile padded
  // Row strides of Q^T, O^T and S (rs) and of the f32 V tile (vs): skewed_stride of rp / dp.
  std::int64_t rs, vs;
  float *qt, *o, *m, *l, *alpha, *pos, *s, *kf, *vf;  // o: O^T per head, [dp][rs]
};

// One vector past n, two where one would land on a power of two: rows a power of two apart (512
// bytes at 128 floats) put a micro-block's column slice of every row into every 8th L1 set, which
// evicted it between uses (AVX2 prefill 10-15% slower; CPU round 20).
constexpr std::int64_t skewed_stride(std::int64_t n) {
  const std::int64_t s = n + W;
  return (s & (s - 1)) == 0 ? s + W : s;
}

inline PrefillLayout prefill_layout(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                    std::int64_t tile, float* base) {
  PrefillLayout L{};
  L.dp = round_up(head_dim, imax(W, Vec::kQkKeys));
  L.rp = round_up(block_rows, W);
  L.tp = round_up(tile, Vec::kQkKeys);
  float* p = base;
  L.rs = skewed_stride(L.rp);
  L.vs = skewed_stride(L.dp);
  L.qt = p; p += floats_for(group * L.dp * L.rs);
  L.o = p; p += floats_for(group * L.dp * L.rs);
  L.m = p; p += floats_for(group * L.rp);
  L.l = p; p += floats_for(group * L.rp);
  L.alpha = p; p += floats_for(L.rp);
  L.pos = p; p += floats_for(L.rp);
  L.s = p; p += floats_for(L.tp * L.rs);
  L.kf = p; p += floats_for(L.tp * L.dp);
  L.vf = p;
  return L;
}

inline std::size_t prefill_scratch_floats(std::int64_t head_dim, std::int64_t group, std::int64_t block_rows,
                                          std::int64_t tile) {
  const std::int64_t dp = round_up(head_dim, imax(W, Vec::kQkKeys)), rp = round_up(block_rows, W),
                     tp = round_up(tile, Vec::kQkKeys);
  const std::int64_t rs = skewed_stride(rp), vs = skewed_stride(dp);
  return 2 * floats_for(group * dp * rs) + 2 * floats_for(group * rp) + 2 * floats_for(rp) + floats_for(tp * rs) +
         floats_for(tp * dp) + floats_for(tp * vs) + 16;
}

// S^T[j][rows] for keys [j0, j0 + kQkKeys) and row vectors [v0, v0 + NV) of head `qt`.
template <int NV>
inline void qk_block(const PrefillLayout& L, const float* qt, std::int64_t d, std::int64_t j0, std::int64_t v0) {
  constexpr int K = Vec::kQkKeys;
  V acc[K][NV];
  for (int kk = 0; kk < K; ++kk)
    for (int n = 0; n < NV; ++n) acc[kk][n] = Vec::zero();
  const float* kp = L.kf + j0 * L.dp;
  const float* qp = qt + v0 * W;
  for (std::int64_t c = 0; c < d; ++c, qp += L.rs) {
    V qv[NV];
    for (int n = 0; n < NV; ++n) qv[n] = Vec::load(qp + n * W);
    for (int kk = 0; kk < K; ++kk) {
      const V kb = Vec::set1(kp[kk * L.dp + c]);
      for (int n = 0; n < NV; ++n) acc[kk][n] = Vec::fma(kb, qv[n], acc[kk][n]);
    }
  }
  for (int kk = 0; kk < K; ++kk)
    for (int n = 0; n < NV; ++n) Vec::store(L.s + (j0 + kk) * L.rs + (v0 + n) * W, acc[kk][n]);
}

// O^T[columns c0.., row vectors v0..] = O^T * alpha + V^T P^T over the tile's keys [j_lo, j_hi):
// qk_block's register block with the roles turned (P^T rows loaded, V's columns broadcast), so
// O's rows sit in the lanes like the scores' and alpha scales them lane by lane. Rows broadcast
// against head_dim in the lanes made d128's 16 vectors 3 + 3 + 3 + 3 + 2 + 2 blocks, whose
// 2-vector blocks hold 8 FMA chains: 80% of two pipes at 5 cycles (CPU round 31).
template <int NV>
inline void pv_block(const PrefillLayout& L, float* ot, std::int64_t j_lo, std::int64_t j_hi, std::int64_t v0,
                     std::int64_t c0) {
  constexpr int C = Vec::kQkKeys;
  V acc[C][NV];
  for (int n = 0; n < NV; ++n) {
    const V a = Vec::load(L.alpha + (v0 + n) * W);
    for (int cc = 0; cc < C; ++cc) acc[cc][n] = Vec::mul(Vec::load(ot + (c0 + cc) * L.rs + (v0 + n) * W), a);
  }
  const float* vp = L.vf + j_lo * L.vs + c0;
  const float* pp = L.s + j_lo * L.rs + v0 * W;
  for (std::int64_t j = j_lo; j < j_hi; ++j, vp += L.vs, pp += L.rs) {
    V pv[NV];
    for (int n = 0; n < NV; ++n) pv[n] = Vec::load(pp + n * W);
    for (int cc = 0; cc < C; ++cc) {
      const V vb = Vec::set1(vp[cc]);
      for (int n = 0; n < NV; ++n) acc[cc][n] = Vec::fma(vb, pv[n], acc[cc][n]);
    }
  }
  for (int cc = 0; cc < C; ++cc)
    for (int n = 0; n < NV; ++n) Vec::store(ot + (c0 + cc) * L.rs + (v0 + n) * W, acc[cc][n]);
}

template <int kMax, class F>
inline void for_vec_chunks(std::int64_t vectors, F&& f) {
  std::int64_t v0 = 0;
  while (v0 < vectors) {
    const std::int64_t left = vectors - v0;
    if (kMax >= 4 && left >= 4) { f.template operator()<(kMax >= 4 ? 4 : 1)>(v0); v0 += 4; }
    // Three vectors unless that leaves one alone (4 = 2 + 2): a one-vector block has too few
    // accumulators to cover the FMA latency.
    else if (kMax >= 3 && left >= 3 && left != 4) { f.template operator()<(kMax >= 3 ? 3 : 1)>(v0); v0 += 3; }
    else if (kMax >= 2 && left >= 2) { f.template operator()<(kMax >= 2 ? 2 : 1)>(v0); v0 += 2; }
    else { f.template operator()<1>(v0); v0 += 1; }
  }
}

template <class Tag>
void prefill_typed(const PrefillTask& t) {
  const PrefillLayout L = prefill_layout(t.head_dim, t.group, t.block_rows, t.tile, t.scratch);
  const std::int64_t G = t.group, d = t.head_dim, rows = t.rows;
  const std::int64_t row_vectors = L.rp / W;

  const BlockKeys keys = block_keys(t);
  start_prefill_state(t, L.rp, L.dp * L.rs, L.o, L.m, L.l, L.pos);

  // Q^T per head, scaled; padded rows and dims are zero.
  for (std::int64_t g = 0; g < G; ++g) {
    float* qt = L.qt + g * L.dp * L.rs;
    for (std::int64_t i = 0; i < L.rp; ++i) {
      const std::int64_t row = t.q.offset + g * t.q.head_stride + i * t.q.row_stride;
      for (std::int64_t c = 0; c < L.dp; ++c) {
        qt[c * L.rs + i] = (i < rows && c < d) ? t.scale * load_scalar(t.q, row + c) : 0.0f;
      }
    }
  }

  for (std::int64_t j0 = keys.lo; j0 < keys.hi; j0 += t.tile) {
    const std::int64_t n = imin(t.tile, keys.hi - j0);
    const std::int64_t np = round_up(n, Vec::kQkKeys);
    for (std::int64_t j = 0; j < np; ++j) {
      if (j < n) {
        convert_row<Tag>(t.k.data, t.k.offset + (j0 + j) * t.k.row_stride, d, L.dp, 1.0f, L.kf + j * L.dp);
        convert_row<Tag>(t.v.data, t.v.offset + (j0 + j) * t.v.row_stride, d, L.dp, 1.0f, L.vf + j * L.vs);
      } else {
        for (std::int64_t c = 0; c < L.dp; ++c) L.kf[j * L.dp + c] = 0.0f;
      }
    }
    // Each row vector (W rows, the softmax's lanes) works on the keys of the tile its rows can see,
    // [lo, hi) relative to j0, and the vectors at either end that see none of them skip the tile
    // (their state and output stay as they are): a causal diagonal tile's earlier rows, and the
    // triangle's far keys (a causal block of 128 rows on 64-key tiles did 12% more work than its
    // visible pairs; docs/perf-notes.md, CPU round 27). The products run per chunk of vectors over
    // the chunk's keys: a key Q K^T computes for a row that cannot see it is overwritten by the
    // mask, and one P V reads for such a row holds probability 0 (the softmax writes it).
    struct Span {
      std::int64_t lo, hi;
      bool masked;
    };
    const bool whole = j0 >= keys.full_lo && j0 + n <= keys.full_hi;  // every row sees the whole tile
    auto span = [&](std::int64_t v0, std::int64_t vectors) {
      const std::int64_t first = v0 * W, end = imin((v0 + vectors) * W, rows);
      if (first >= end) return Span{0, 0, false};  // padding rows only
      if (whole) return Span{0, n, false};
      const BlockKeys k = row_span_keys(t, first, end);
      return Span{imax(k.lo, j0) - j0, imin(k.hi, j0 + n) - j0, !(j0 >= k.full_lo && j0 + n <= k.full_hi)};
    };
    auto sees = [&](std::int64_t v) {
      const Span c = span(v, 1);
      return c.hi > c.lo;
    };
    std::int64_t v_lo = 0, v_hi = row_vectors;  // the vectors from the first to the last that sees a key
    while (v_lo < v_hi && !sees(v_lo)) ++v_lo;
    while (v_hi > v_lo && !sees(v_hi - 1)) --v_hi;
    for (std::int64_t g = 0; g < G; ++g) {
      const float* qt = L.qt + g * L.dp * L.rs;
      float* ot = L.o + g * L.dp * L.rs;
      float* m = L.m + g * L.rp;
      float* l = L.l + g * L.rp;
      for_vec_chunks<Vec::kQkMaxVecs>(v_hi - v_lo, [&]<int NV>(std::int64_t chunk) {
        const Span c = span(v_lo + chunk, NV);
        const std::int64_t j_end = imin(round_up(c.hi, Vec::kQkKeys), np);
        for (std::int64_t j = c.lo / Vec::kQkKeys * Vec::kQkKeys; j < j_end; j += Vec::kQkKeys) {
          qk_block<NV>(L, qt, d, j, v_lo + chunk);
        }
      });
      // Online softmax, rows in lanes.
      for (std::int64_t v = v_lo; v < v_hi; ++v) {
        const std::int64_t r = v * W;
        const Span c = span(v, 1);
        const V pos = Vec::load(L.pos + r);
        V mx = Vec::load(m + r);
        for (std::int64_t j = c.lo; j < c.hi; ++j) {
          V x = Vec::load(L.s + j * L.rs + r);
          if (t.softcap > 0) x = softcap_v(x, t.softcap);
          if (c.masked) x = mask_key(x, pos, j0 + j - t.first_position, t.causal, t.window);
          if (t.softcap > 0 || c.masked) Vec::store(L.s + j * L.rs + r, x);
          mx = Vec::max(mx, x);
        }
        const V m_use = usable_max(mx);
        const V alpha = Vec::exp_nonpositive(Vec::sub(Vec::load(m + r), m_use));
        V sum = Vec::zero();
        for (std::int64_t j = c.lo; j < c.hi; ++j) {
          const V p = Vec::exp_nonpositive(Vec::sub(Vec::load(L.s + j * L.rs + r), m_use));
          Vec::store(L.s + j * L.rs + r, p);
          sum = Vec::add(sum, p);
        }
        if (!whole) {  // the keys of its chunk it cannot see weigh 0 in the chunk's P V
          for (std::int64_t j = 0; j < c.lo; ++j) Vec::store(L.s + j * L.rs + r, Vec::zero());
          for (std::int64_t j = c.hi; j < n; ++j) Vec::store(L.s + j * L.rs + r, Vec::zero());
        }
        Vec::store(l + r, Vec::fma(Vec::load(l + r), alpha, sum));
        Vec::store(m + r, mx);
        Vec::store(L.alpha + r, alpha);
      }
      // P V per chunk of row vectors, all head_dim columns per chunk: the chunk's P (6 KiB at 3
      // AVX2 vectors and 64 keys) stays in L1 while the V tile streams through it from L2.
      for_vec_chunks<Vec::kQkMaxVecs>(v_hi - v_lo, [&]<int NV>(std::int64_t chunk) {
        const Span c = span(v_lo + chunk, NV);
        for (std::int64_t c0 = 0; c0 < L.dp; c0 += Vec::kQkKeys) pv_block<NV>(L, ot, c.lo, c.hi, v_lo + chunk, c0);
      });
    }
  }

  write_prefill_result(t, L.o, L.m, L.l, L.rp, TransposedAccumulators{L.dp, L.rs});
}

inline void prefill(const PrefillTask& t) {
  switch (t.k.dtype) {
    case DType::kF32: prefill_typed<F32>(t); break;
    case DType::kF16: prefill_typed<F16>(t); break;
    default: prefill_typed<BF16>(t); break;
  }
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
