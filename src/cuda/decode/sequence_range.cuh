// Internal: which keys of sequence b one decode launch attends to, read from device memory.
//   plain decode: len = clamp(lengths[b], 0, kv_len of the plan)   (a longer length is clamped, so
//                 a stale or corrupt length can never read past the planned range)
//   fused step:   len = positions[b] + 1, valid only if 0 <= positions[b] < min(max_seq, kv_len)
//                 (and < table_positions with RoPE tables); an invalid position appends nothing and
//                 its output rows and LSE are NaN, so the error is visible.
//   sliding window w > 0: keys [len - w, len) (problem.hpp's convention).
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
  return r;
}

}  // namespace attnkit::cuda_decode
