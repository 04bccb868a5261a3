// Internal: rotary position embedding in float64 arithmetic, so the angle pos * theta^(-2i/d)
// stays exact to f32 at positions of 10^5 and more. Half style pairs (i, i + d/2) (seed 000);
// interleaved pairs (2i, 2i + 1). Used by the fused decode step (rows staged in shared memory)
// and by the stand-alone RoPE (src/cuda/kv/apply_rope.cu).
#pragma once
#include <cstdint>

#include "attnkit/problem.hpp"
#include "cuda/decode/decode_params.hpp"

namespace attnkit::cuda_decode {

// Where the angles come from: caller tables f32 [positions, head_dim/2] (cos, sin), or theta.
struct RopeAngles {
  RopeStyle style = RopeStyle::kHalf;
  float theta = 10000.0f;
  const float* cos_table = nullptr;
  const float* sin_table = nullptr;
};

// The two elements pair `pair` rotates, for a row of head_dim values.
struct RopeIndices {
  int a, b;
};
__device__ inline RopeIndices rope_indices(RopeStyle style, int head_dim, int pair) {
  return style == RopeStyle::kHalf ? RopeIndices{pair, pair + head_dim / 2} : RopeIndices{2 * pair, 2 * pair + 1};
}

// cos and sin of the angle of (pos, pair), in float64 (from the tables when given).
__device__ inline void rope_cos_sin(int head_dim, int pos, int pair, const RopeAngles& angles, double& c, double& s) {
  if (angles.cos_table != nullptr) {
    const std::int64_t i = static_cast<std::int64_t>(pos) * (head_dim / 2) + pair;
    c = angles.cos_table[i];
    s = angles.sin_table[i];
  } else {
    const double freq = exp(-2.0 * pair / head_dim * log(static_cast<double>(angles.theta)));
    sincos(static_cast<double>(pos) * freq, &s, &c);
  }
}

// (x0, x1) rotated by the angle whose cosine and sine are (c, s), in float64.
__device__ inline void rotate_pair(float& x0, float& x1, double c, double s) {
  const double a = x0, b = x1;
  x0 = static_cast<float>(a * c - b * s);
  x1 = static_cast<float>(a * s + b * c);
}

// (x0, x1) rotated by the angle of (pos, pair).
__device__ inline void rope_rotate(float& x0, float& x1, int head_dim, int pos, int pair, const RopeAngles& angles) {
  double c, s;
  rope_cos_sin(head_dim, pos, pair, angles, c, s);
  rotate_pair(x0, x1, c, s);
}

// rows x head_dim values at buf[row * row_stride + dim]; threads thread, thread + 1, ... of a group
// of `threads` take part.
__device__ inline void rope_rows(float* buf, int rows, int row_stride, const DecodeParams& p, int pos, int thread,
                                 int threads) {
  const int half = p.head_dim / 2;
  const RopeAngles angles{p.rope_style, p.rope_theta, p.cos_table, p.sin_table};
  for (int i = thread; i < rows * half; i += threads) {
    const int row = i / half, pair = i % half;
    float* x = buf + static_cast<std::int64_t>(row) * row_stride;
    const RopeIndices at = rope_indices(p.rope_style, p.head_dim, pair);
    rope_rotate(x[at.a], x[at.b], p.head_dim, pos, pair, angles);
  }
}

}  // namespace attnkit::cuda_decode
