// Merging the partial softmax states of key splits on the CPU (the log-sum-exp rule).
// Inputs: out_partial [splits, rows, head_dim] (f32, f16 or bf16), each split normalised over its own keys;
//   lse_partial f32 [splits, rows]. Output: out [rows, head_dim] (any storage dtype), lse [rows].
// For a row: m = max over splits of lse_s; w_s = exp(lse_s - m); out = sum w_s out_s / sum w_s;
//   lse = m + log(sum w_s). A split with lse = -inf saw no key and is skipped (its out is never
//   read, so garbage there cannot leak); a row whose splits are all -inf gets zeros and -inf.
// Parallelism: none; a row at a time. Bound: memory.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/validate.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {

void merge_states(const MergeTensors& t) {
  validate_merge(t, DeviceKind::kCpu);
  const std::int64_t S = t.out_partial.shape[0], R = t.out_partial.shape[1], D = t.out_partial.shape[2];
  const float* lse_in = static_cast<const float*>(t.lse_partial.data);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> acc(static_cast<std::size_t>(D)), part(static_cast<std::size_t>(D));
  for (std::int64_t r = 0; r < R; ++r) {
    auto split_lse = [&](std::int64_t s) { return lse_in[s * t.lse_partial.strides[0] + r * t.lse_partial.strides[1]]; };
    float max_lse = kNegInf;
    for (std::int64_t s = 0; s < S; ++s) max_lse = std::max(max_lse, split_lse(s));
    std::fill(acc.begin(), acc.end(), 0.0f);
    float merged_lse = kNegInf;
    if (max_lse != kNegInf) {
      float total = 0.0f;
      for (std::int64_t s = 0; s < S; ++s) {
        const float l = split_lse(s);
        if (l == kNegInf) continue;
        const float w = std::exp(l - max_lse);
        total += w;
        detail::load_row(t.out_partial.data, t.out_partial.dtype, s * t.out_partial.strides[0] + r * t.out_partial.strides[1],
                         D, part.data());
        for (std::int64_t d = 0; d < D; ++d) acc[d] += w * part[d];
      }
      const float inv = 1.0f / total;
      for (float& a : acc) a *= inv;
      merged_lse = max_lse + std::log(total);
    }
    detail::store_row(t.out.data, t.out.dtype, r * t.out.strides[0], D, acc.data());
    if (!t.lse.empty()) static_cast<float*>(t.lse.data)[r * t.lse.strides[0]] = merged_lse;
  }
}

}  // namespace attnkit::cpu
