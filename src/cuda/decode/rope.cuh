// Internal: rotary position embedding on f32 rows in shared memory, in float64 arithmetic so the
// angle pos * theta^(-2i/d) stays exact to f32 at positions of 10^5 and more.
// Half style pairs (i, i + d/2) (seed 000); interleaved pairs (2i, 2i + 1).
#pragma once
#include "cuda/decode/decode_params.hpp"

namespace attnkit::cuda_decode {

// rows x head_dim values at buf[row * row_stride + dim]; threads thread, thread + 1, ... of a group
// of `threads` take part.
__device__ inline void rope_rows(float* buf, int rows, int row_stride, const DecodeParams& p, int pos, int thread,
                                 int threads) {
  const int half = p.head_dim / 2;
  for (int i = thread; i < rows * half; i += threads) {
    const int row = i / half, pair = i % half;
    double c, s;
    if (p.cos_table != nullptr) {
      c = p.cos_table[static_cast<std::int64_t>(pos) * half + pair];
      s = p.sin_table[static_cast<std::int64_t>(pos) * half + pair];
    } else {
      const double freq = exp(-2.0 * pair / p.head_dim * log(static_cast<double>(p.rope_theta)));
      sincos(static_cast<double>(pos) * freq, &s, &c);
    }
    const int a = p.rope_style == RopeStyle::kHalf ? pair : 2 * pair;
    const int b = p.rope_style == RopeStyle::kHalf ? pair + half : 2 * pair + 1;
    float* x = buf + static_cast<std::int64_t>(row) * row_stride;
    const double x0 = x[a], x1 = x[b];
    x[a] = static_cast<float>(x0 * c - x1 * s);
    x[b] = static_cast<float>(x0 * s + x1 * c);
  }
}

}  // namespace attnkit::cuda_decode
