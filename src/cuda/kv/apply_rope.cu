// Stand-alone RoPE: rotates x [batch, heads, head_dim] in place at positions[b] (one position per
// leading index, so packed tokens [tokens, heads, head_dim] with a position per token work too),
// the same rotation the fused decode step applies (rope.cuh, float64 angles).
//
// Positions live on the device, so the host cannot check them: a negative position, or one past
// the caller's tables, fills its rows with NaN (as the fused step's output does), so the mistake
// shows instead of silently leaving them un-rotated.
// Parallelism: a block per (row b, group of heads, chunk of up to kChunkPairs pairs), a thread per
//   pair: it computes the pair's (cos, sin) once, in float64, for the group's heads, loads all
//   their values, then rotates and stores them. No shared memory, no barrier. Groups are one head
//   for small calls (spread over SMs) and kHeadsPerBlock heads for large ones.
// Bound: memory (x read and written once); in float64 the angle costs ~100 instructions, which
//   kHeadsPerBlock heads share.
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda.hpp"
#include "attnkit/error.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"
#include "cuda/decode/rope.cuh"

namespace attnkit::cuda {
namespace {

constexpr int kChunkPairs = 128;  // head_dim 256 in one block
constexpr int kHeadsPerBlock = 8;

struct RopeParams {
  void* x = nullptr;
  DType dtype = DType::kF32;
  const std::int32_t* positions = nullptr;
  std::int64_t stride_b = 0, stride_h = 0, positions_stride = 1;
  std::int64_t table_positions = 0;
  std::int64_t blocks = 0;  // rows * head_groups * chunks
  int heads = 0, head_dim = 0, heads_per_block = 1, head_groups = 0, chunks = 0;
  cuda_decode::RopeAngles angles;
};

__global__ void __launch_bounds__(kChunkPairs) apply_rope_kernel(const __grid_constant__ RopeParams p) {
  const int half = p.head_dim / 2;
  for (std::int64_t block = blockIdx.x; block < p.blocks; block += gridDim.x) {
    const int chunk = static_cast<int>(block % p.chunks);
    const std::int64_t row_group = block / p.chunks;
    const int h0 = static_cast<int>(row_group % p.head_groups) * p.heads_per_block;
    const std::int64_t b = row_group / p.head_groups;
    const int pair = chunk * kChunkPairs + static_cast<int>(threadIdx.x);
    if (pair >= half) continue;
    const int heads = min(p.heads_per_block, p.heads - h0);
    const int pos = p.positions[b * p.positions_stride];
    const bool valid = pos >= 0 && (p.angles.cos_table == nullptr || pos < p.table_positions);
    const cuda_decode::RopeIndices at = cuda_decode::rope_indices(p.angles.style, p.head_dim, pair);
    const std::int64_t base = b * p.stride_b + h0 * p.stride_h;
    float x0[kHeadsPerBlock], x1[kHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      if (h < heads) {
        x0[h] = cuda_common::load_as_f32(p.x, p.dtype, base + h * p.stride_h + at.a);
        x1[h] = cuda_common::load_as_f32(p.x, p.dtype, base + h * p.stride_h + at.b);
      }
    }
    double c = NAN, s = NAN;  // an invalid position rotates by NaN: NaN rows
    if (valid) cuda_decode::rope_cos_sin(p.head_dim, pos, pair, p.angles, c, s);
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      if (h < heads) {
        const double a = x0[h], e = x1[h];
        cuda_common::store_from_f32(p.x, p.dtype, base + h * p.stride_h + at.a, static_cast<float>(a * c - e * s));
        cuda_common::store_from_f32(p.x, p.dtype, base + h * p.stride_h + at.b, static_cast<float>(a * s + e * c));
      }
    }
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
  constexpr std::int64_t kMaxInt = 0x7fffffff;
  if (x.shape[1] > kMaxInt || x.shape[2] > kMaxInt)
    fail(ctx, "x is " + x.describe() + ": heads and head_dim must be below 2^31", "split x into smaller views");
  p.heads = static_cast<int>(x.shape[1]);
  p.head_dim = static_cast<int>(x.shape[2]);
  // Few rows (a decode step's tokens): a head per block, so the call spreads over more SMs; many
  // rows: kHeadsPerBlock heads share each angle.
  p.heads_per_block = x.shape[0] * p.heads < 4096 ? 1 : kHeadsPerBlock;
  p.head_groups = (p.heads + p.heads_per_block - 1) / p.heads_per_block;
  p.chunks = (p.head_dim / 2 + kChunkPairs - 1) / kChunkPairs;
  p.blocks = x.shape[0] * p.head_groups * p.chunks;
  p.table_positions = rope.table_positions;
  p.angles = {rope.style, rope.theta, rope.cos_table, rope.sin_table};
  const int threads = std::min(kChunkPairs, (p.head_dim / 2 + 31) / 32 * 32);
  const std::int64_t blocks = std::min<std::int64_t>(p.blocks, std::int64_t{1} << 20);
  apply_rope_kernel<<<static_cast<unsigned>(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  cuda_common::check_launch(ctx, "apply_rope_kernel");
}

}  // namespace attnkit::cuda
