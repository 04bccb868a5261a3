// Stand-alone RoPE: rotates x [batch, heads, head_dim] in place at positions[b] (one position per
// leading index, so packed tokens [tokens, heads, head_dim] with a position per token work too),
// the same rotation the fused decode step applies (rope.cuh, float64 angles).
//
// Positions live on the device, so the host cannot check them: a negative position, or one past
// the caller's tables, fills its rows with NaN (as the fused step's output does), so the mistake
// shows instead of silently leaving them un-rotated.
// Parallelism: one thread per rotated pair, grid-stride. Bound: memory (x read and written once).
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/decode/rope.cuh"

namespace attnkit::cuda {
namespace {

struct RopeParams {
  void* x = nullptr;
  DType dtype = DType::kF32;
  const std::int32_t* positions = nullptr;
  std::int64_t stride_b = 0, stride_h = 0, positions_stride = 1;
  std::int64_t table_positions = 0;
  int heads = 0, head_dim = 0;
  std::int64_t pairs = 0;  // batch * heads * head_dim / 2
  cuda_decode::RopeAngles angles;
};

constexpr int kRopeThreads = 256;

__global__ void __launch_bounds__(kRopeThreads) apply_rope_kernel(const __grid_constant__ RopeParams p) {
  const int half = p.head_dim / 2;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < p.pairs;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int pair = static_cast<int>(i % half);
    const std::int64_t row = i / half;
    const std::int64_t b = row / p.heads, h = row % p.heads;
    const int pos = p.positions[b * p.positions_stride];
    const cuda_decode::RopeIndices at = cuda_decode::rope_indices(p.angles.style, p.head_dim, pair);
    const std::int64_t base = b * p.stride_b + h * p.stride_h;
    float x0 = cuda_common::load_as_f32(p.x, p.dtype, base + at.a);
    float x1 = cuda_common::load_as_f32(p.x, p.dtype, base + at.b);
    if (pos < 0 || (p.angles.cos_table != nullptr && pos >= p.table_positions)) {
      x0 = x1 = NAN;
    } else {
      cuda_decode::rope_rotate(x0, x1, p.head_dim, pos, pair, p.angles);
    }
    cuda_common::store_from_f32(p.x, p.dtype, base + at.a, x0);
    cuda_common::store_from_f32(p.x, p.dtype, base + at.b, x1);
  }
}

}  // namespace

void apply_rope(TensorView x, TensorView positions, const RopeSpec& rope, Stream stream) {
  const char* ctx = "cuda::apply_rope";
  validate_rope(x, positions, rope, DeviceKind::kCuda);
  cuda_common::require_device_memory(x, ctx, "x");
  cuda_common::require_device_memory(positions, ctx, "positions");
  cuda_common::require_device_memory(rope.cos_table, ctx, "rope.cos_table");
  cuda_common::require_device_memory(rope.sin_table, ctx, "rope.sin_table");
  RopeParams p;
  p.x = x.data;
  p.dtype = x.dtype;
  p.positions = positions.as<const std::int32_t>();
  p.positions_stride = positions.strides[0];
  p.stride_b = x.strides[0];
  p.stride_h = x.strides[1];
  p.heads = static_cast<int>(x.shape[1]);
  p.head_dim = static_cast<int>(x.shape[2]);
  p.pairs = x.shape[0] * x.shape[1] * (x.shape[2] / 2);
  p.table_positions = rope.table_positions;
  p.angles = {rope.style, rope.theta, rope.cos_table, rope.sin_table};
  const std::int64_t blocks = std::min<std::int64_t>((p.pairs + kRopeThreads - 1) / kRopeThreads, 1 << 16);
  apply_rope_kernel<<<static_cast<unsigned>(blocks), kRopeThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  cuda_common::check_launch(ctx, "apply_rope_kernel");
}

}  // namespace attnkit::cuda
