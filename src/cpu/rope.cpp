// Rotary position embedding on the CPU, in place.
// Inputs: x [batch, heads, head_dim] (any storage dtype, head_dim contiguous), i32 positions[batch].
// Pairs: half rotation (d, d + head_dim/2) as in seed 000, or interleaved (2i, 2i + 1).
// Angles: pos * theta^(-2i/head_dim), or the caller's cos/sin tables [table_positions, head_dim/2].
// Parallelism: none; a row at a time. Bound: memory.
#include <cmath>
#include <vector>

#include "attnkit/cpu.hpp"
#include "attnkit/validate.hpp"
#include "cpu/rope.hpp"
#include "cpu/row_io.hpp"

namespace attnkit::cpu {
namespace detail {

void rope_row(float* x, std::int64_t head_dim, std::int64_t pos, const RopeSpec& spec) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    float c, s;
    if (spec.cos_table != nullptr) {
      c = spec.cos_table[pos * half + i];
      s = spec.sin_table[pos * half + i];
    } else {
      const double angle = static_cast<double>(pos) *
                           std::pow(static_cast<double>(spec.theta), -2.0 * static_cast<double>(i) / head_dim);
      c = static_cast<float>(std::cos(angle));
      s = static_cast<float>(std::sin(angle));
    }
    const std::int64_t a = spec.style == RopeStyle::kHalf ? i : 2 * i;
    const std::int64_t b = spec.style == RopeStyle::kHalf ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

}  // namespace detail

void apply_rope(TensorView x, TensorView positions, const RopeSpec& spec) {
  validate_rope(x, positions, spec, DeviceKind::kCpu);
  const std::int64_t B = x.shape[0], H = x.shape[1], D = x.shape[2];
  std::vector<float> row(static_cast<std::size_t>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pos = detail::index_at(positions, b);
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t offset = b * x.strides[0] + h * x.strides[1];
      detail::load_row(x.data, x.dtype, offset, D, row.data());
      detail::rope_row(row.data(), D, pos, spec);
      detail::store_row(x.data, x.dtype, offset, D, row.data());
    }
  }
}

}  // namespace attnkit::cpu
