// Internal: which keys of sequence b one decode launch attends to, read from device memory.
//   plain decode: len = clamp(lengths[b], 0, kv_len of the plan)   (a longer length is clamped, so
//                 a stale or corrupt length can never read past the planned range)
//   fused step:   len = positions[b] + 1, valid only if 0 <= positions[b] < min(max_seq, kv_len)
//                 (and < table_positions with RoPE tables); an invalid position appends nothing and
//                 its output rows and LSE are NaN, so the error is visible.
//   sliding window w > 0: keys [len - w, len) (problem.hpp's convention).
//   key_starts (plain decode, left padding): keys from key_starts[b] on, clamped to [0, len].
#pragma once
#include "cuda/decode/decode_params.hpp"

namespace attnkit::cuda_decode {

struct SequenceRange {
  int lo = 0;   // first visible key
  int len = 0;  // one past the last visible key
  bool valid = true;
};

__device__ __forceinline__ SequenceRange sequence_range(const DecodeParams& p, int b) {
  SequenceRange r;
  if (p.fused) {
    const int pos = p.positions[b];
    r.valid = pos >= 0 && pos < p.max_seq && pos < p.kv_len && (p.cos_table == nullptr || pos < p.table_positions);
    r.len = r.valid ? pos + 1 : 0;
  } else {
    r.len = min(max(p.lengths[b], 0), p.kv_len);
  }
  r.lo = (p.window > 0 && r.len > p.window) ? r.len - static_cast<int>(p.window) : 0;
  if (p.key_starts != nullptr) r.lo = max(r.lo, min(max(p.key_starts[b], 0), r.len));
  return r;
}

// Keys per split of a plain decode's sequence: the plan's, except with left padding, whose real
// keys (unknown when planning) are divided over all the planned splits, so a padded sequence keeps
// every split busy; never more than the plan's (no split outgrows what the plan sized). Without
// padding a split's first key is the plan's split * keys_per_split, known before the length is read.
__device__ __forceinline__ int split_keys(const DecodeParams& p, const SequenceRange& r) {
  if (p.key_starts == nullptr || p.splits <= 1) return p.keys_per_split;
  const int per_split = (r.len - r.lo + p.splits - 1) / p.splits;
  return min(p.keys_per_split, max(p.tile, (per_split + p.tile - 1) / p.tile * p.tile));
}

// Extend: sequence b's query tokens, read on the device and clamped to the tensor's rows and the
// plan's max_q_len (a corrupt offset never reads or writes past q/out).
struct ExtendRows {
  int q_start = 0;
  int q_len = 0;
};
__device__ __forceinline__ ExtendRows extend_rows(const DecodeParams& p, int b) {
  const int start = min(max(p.cu_seqlens_q[b], 0), p.q_rows);
  const int end = min(max(p.cu_seqlens_q[b + 1], start), p.q_rows);
  return ExtendRows{start, min(end - start, p.max_q_len)};
}

// Keys [x, y) visible to query row i of a sequence of len keys whose last q_len are the new rows:
// row i sits at position len - q_len + i (bottom-right causal), the window counts back from it.
// A q_len above len (bad device data) leaves the first rows with no key, never a negative range.
__device__ __forceinline__ int2 extend_row_keys(const DecodeParams& p, int len, int q_len, int i) {
  const int hi = max(0, len - q_len + i + 1);
  const int lo = (p.window > 0 && hi > p.window) ? hi - static_cast<int>(p.window) : 0;
  return make_int2(lo, hi);
}

// The keys one extend block reads: the union of its packed rows' ranges (rows row0 .. row0 +
// rows_here - 1, query rows row0 / group .. (row0 + rows_here - 1) / group). The merge recomputes
// it to know how many splits wrote a state for a row.
__device__ __forceinline__ SequenceRange extend_block_range(const DecodeParams& p, int len, int q_len, int row0,
                                                            int rows_here) {
  const int2 first = extend_row_keys(p, len, q_len, row0 / p.group);
  const int2 last = extend_row_keys(p, len, q_len, (row0 + rows_here - 1) / p.group);
  SequenceRange r;
  r.lo = first.x;
  r.len = max(last.y, first.x);
  return r;
}

}  // namespace attnkit::cuda_decode
