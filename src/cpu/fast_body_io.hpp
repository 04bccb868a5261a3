// Internal: what the fast CPU bodies share apart from their arithmetic, written once for the f32
// bodies (fast_body.hpp) and the vdpbf16ps bodies (fast_body_bf16.hpp): reading a task's rows
// (scalar loads, prefetch into L1 or L2), the running softmax state of a query row (raising its
// max folds the previous sum and accumulator), the key range of a prefill row block, and writing
// a task's normalised output and LSE. Like fast_body.hpp it is compiled once per instruction
// set: the including unit defines ATTNKIT_ISA_NS and ATTNKIT_VEC and turns its target on first.
// Bound: none of it is on the hot path's critical resource except the prefetches, which keep the
// K and V streams in flight (decode is memory- or dot-rate-bound; see the bodies).
#ifndef ATTNKIT_ISA_NS
#error "define ATTNKIT_ISA_NS before including fast_body_io.hpp"
#endif
#pragma once

#include <algorithm>

#include "common/attention_sinks.hpp"
#include "cpu/prefetch_rows.hpp"

namespace attnkit::cpu::detail::ATTNKIT_ISA_NS {

using Vec = ATTNKIT_VEC;
using V = Vec::V;
constexpr int W = Vec::kWidth;
constexpr float kNegInf = -__builtin_inff();

constexpr std::int64_t imin(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
constexpr std::int64_t imax(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b * b; }
inline std::size_t floats_for(std::int64_t n) { return static_cast<std::size_t>(round_up(n, 16)); }

inline std::int64_t elem_bytes(DType t) { return static_cast<std::int64_t>(dtype_size(t)); }

inline float load_scalar(const RowSource& s, std::int64_t offset) {
  switch (s.dtype) {
    case DType::kF32: return static_cast<const float*>(s.data)[offset];
    case DType::kF16: return f16_bits_to_float(static_cast<const std::uint16_t*>(s.data)[offset]);
    default: return bf16_bits_to_float(static_cast<const std::uint16_t*>(s.data)[offset]);
  }
}

// ---------------------------------------------------------------------------------------------
// Prefetch

// Decode streams K and V from DRAM between dot products; one core keeps too few misses in flight
// on its own, so rows this far ahead are prefetched (none past the task's last key), by
// PrefetchRows (prefetch_rows.hpp).
constexpr std::int64_t kDecodePrefetchRows = 32;

// ---------------------------------------------------------------------------------------------
// Running softmax state

// A tile whose largest score is `tile_max` joins a row whose running max is `m`: the new max, and
// alpha = e^(m - m_new), the factor by which the row's earlier sum and accumulator shrink (0 for a
// row that had seen nothing). The accumulator (dp floats) is rescaled here; the caller folds
// alpha into the sum with the tile's own: l = l * alpha + sum.
struct RaisedMax {
  float m_new, alpha;
};
inline RaisedMax raise_max(float m, float tile_max, float* acc, std::int64_t dp) {
  const float m_new = m > tile_max ? m : tile_max;
  // A max that did not move (most tiles after the first few) needs no exp: e^0 is 1 exactly, and
  // the call took 2.5% of a 16-key tile's decode on a Zen 2 core (44.7 -> 43.6 ns per key and KV
  // head in L2, CPU round 25).
  const float alpha = m == kNegInf ? 0.0f : m == m_new ? 1.0f : std::exp(m - m_new);
  if (alpha != 1.0f) {
    const V av = Vec::set1(alpha);
    for (std::int64_t c = 0; c < dp; c += W) Vec::store(acc + c, Vec::mul(Vec::load(acc + c), av));
  }
  return {m_new, alpha};
}

// Rows in the lanes (prefill): a row with nothing visible yet keeps max -inf; exponents are taken
// against 0 instead, so e^(s - max) gives 0, not NaN.
inline V usable_max(V mx) { return Vec::select_lt(mx, Vec::set1(-3.0e38f), Vec::zero(), mx); }

// Score x of a key for query rows (lanes), -inf where the key is masked: after the query (causal) or
// before its window. Rows and the key are given as offsets from the block's first position (`row`:
// 0, 1, ...; `key`: the key's position minus it, in exact integer arithmetic), since an f32 holds
// every integer only up to 2^24: absolute positions past it rounded a key onto its neighbour's
// position (tests/cpu/prefill_far_positions_test.cpp). Offsets that large are far from every row,
// so their rounding cannot change a comparison.
inline V mask_key(V x, V row, std::int64_t key, bool causal, std::int64_t window) {
  const V neg_inf = Vec::set1(kNegInf);
  if (causal) x = Vec::select_lt(row, Vec::set1(static_cast<float>(key)), neg_inf, x);  // row < key
  if (window > 0) {  // key < row - window + 1, i.e. key + window - 1 < row (windows past 2^40 see every key)
    const std::int64_t reach = key + std::min<std::int64_t>(window, std::int64_t{1} << 40) - 1;
    x = Vec::select_lt(Vec::set1(static_cast<float>(reach)), row, neg_inf, x);
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// Task input: the key range of a prefill row block and the block's starting state

// Keys any of rows [first, end) of the block sees, [lo, hi) (rows are monotone in position), and
// keys every one of them sees, [full_lo, full_hi): tiles inside the latter need no mask.
struct BlockKeys {
  std::int64_t lo, hi, full_lo, full_hi;
};
inline BlockKeys rows_keys(const PrefillTask& t, std::int64_t first, std::int64_t end) {
  BlockKeys k{t.kv_len, 0, 0, t.kv_len};
  for (std::int64_t i = first; i < end; ++i) {
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
inline BlockKeys block_keys(const PrefillTask& t) { return rows_keys(t, 0, t.rows); }

// The same from the first and last rows alone (no loop: called per tile and row vector). Both ends
// of a row's range only grow with its position, so hi and the full range are exact; lo is the
// first row's begin even where leading rows see nothing, a superset the masks make exact.
inline BlockKeys row_span_keys(const PrefillTask& t, std::int64_t first, std::int64_t end) {
  const KeyRange a = visible_keys(t.first_position + first, t.kv_len, t.causal, t.window);
  const KeyRange b = visible_keys(t.first_position + end - 1, t.kv_len, t.causal, t.window);
  return {a.begin, b.end, b.begin, a.end};
}

// Empty state for the block's group x rp rows: o = 0 (o_per_head floats per head), m = -inf, l = 0,
// and the rows' offsets from the block's first position (as floats, for mask_key's lanes).
inline void start_prefill_state(const PrefillTask& t, std::int64_t rp, std::int64_t o_per_head, float* o, float* m,
                                float* l, float* pos) {
  for (std::int64_t i = 0; i < t.group * o_per_head; ++i) o[i] = 0.0f;
  for (std::int64_t i = 0; i < t.group * rp; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
  }
  for (std::int64_t i = 0; i < rp; ++i) pos[i] = static_cast<float>(i);
}

// ---------------------------------------------------------------------------------------------
// Task output: normalised rows and their LSE (zeros and -inf for a row that saw no key)

// Column c of the task's output sits at accumulator column column(c): the f32 bodies keep head_dim
// in order; the bf16 bodies keep 32-column blocks in key-pair interleave order.
struct SameColumn {
  std::int64_t operator()(std::int64_t c) const { return c; }
};
// The generic prefill body keeps O transposed per head ([dp][rs], rows in the lanes).
struct TransposedAccumulators {
  std::int64_t dp, rs;
  std::int64_t operator()(std::int64_t c) const { return c * rs; }
};

// out_scale multiplies the normalised row (an e4m3 V cache's dequantization scale: once per row,
// not per V element).
template <class Column>
inline void write_row(const float* acc, float m, float l, std::int64_t d, Column column, float* out, float* lse,
                      float out_scale = 1.0f) {
  const bool empty = l == 0.0f;
  const float inv = empty ? 0.0f : out_scale / l;
  for (std::int64_t c = 0; c < d; ++c) out[c] = acc[column(c)] * inv;
  *lse = empty ? kNegInf : m + std::log(l);
}

// Decode: the group's rows, acc [group][dp].
template <class Column = SameColumn>
inline void write_decode_result(const DecodeTask& t, const float* acc, std::int64_t dp, const float* m, const float* l,
                                Column column = {}) {
  for (std::int64_t g = 0; g < t.group; ++g) {
    write_row(acc + g * dp, m[g], l[g], t.head_dim, column, t.out + g * t.out_stride, t.lse + g, t.out_scale);
  }
}

// Row `values` (n f32) into the sink's dtype at `offset` (vectorised here, in the ISA's unit).
inline void store_out_row(const RowSink& sink, std::int64_t offset, std::int64_t n, const float* values) {
  switch (sink.dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(sink.data) + offset, values, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {  // the vector unit's conversion (a call per element cost f16 prefill ~6% at 1k)
      auto* dst = static_cast<std::uint16_t*>(sink.data) + offset;
      for (std::int64_t i = 0; i < n; i += W) {
        const int m = static_cast<int>(imin(W, n - i));
        Vec::store_f16(dst + i, Vec::load_f32(values + i, m), m);
      }
      return;
    }
    default: {
      auto* dst = static_cast<std::uint16_t*>(sink.data) + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(values[i]);
      return;
    }
  }
}

// Prefill: the block's rows for every head of the group (row i of head g at o + row_at(g, i), its
// column c column(c) further), m and l [group][rp], normalised and converted straight into the
// task's sink (the caller's output tensor, or f32 scratch where partial states are merged), with
// the LSE where asked.
template <class RowAt, class Column>
inline void write_prefill_rows(const PrefillTask& t, const float* o, const float* m, const float* l, std::int64_t rp,
                               RowAt row_at, Column column) {
  constexpr std::int64_t kMaxHeadDim = 256;  // the problem checks reject more
  alignas(64) float row[kMaxHeadDim];
  const std::int64_t d = t.head_dim;
  for (std::int64_t g = 0; g < t.group; ++g) {
    for (std::int64_t i = 0; i < t.rows; ++i) {
      float lse;
      write_row(o + row_at(g, i), m[g * rp + i], l[g * rp + i], d, column, row, &lse);
      if (t.sink_logits != nullptr) attnkit::detail::fold_sink_into_row(row, d, &lse, t.sink_logits[g]);
      store_out_row(t.out, t.out.offset + g * t.out.head_stride + i * t.out.row_stride, d, row);
      if (t.lse.data != nullptr) t.lse.data[t.lse.offset + g * t.lse.head_stride + i * t.lse.row_stride] = lse;
    }
  }
}

// o [group][rp][dp], column c at column(c).
template <class Column = SameColumn>
inline void write_prefill_result(const PrefillTask& t, const float* o, const float* m, const float* l, std::int64_t rp,
                                 std::int64_t dp, Column column = {}) {
  write_prefill_rows(t, o, m, l, rp, [&](std::int64_t g, std::int64_t i) { return (g * rp + i) * dp; }, column);
}
// o [group][dp][rs].
inline void write_prefill_result(const PrefillTask& t, const float* o, const float* m, const float* l, std::int64_t rp,
                                 TransposedAccumulators a) {
  write_prefill_rows(t, o, m, l, rp, [&](std::int64_t g, std::int64_t i) { return g * a.dp * a.rs + i; }, a);
}

}  // namespace attnkit::cpu::detail::ATTNKIT_ISA_NS
