// Stand-alone RoPE: rotates x [batch, heads, head_dim] in place at positions[b] (one position per
// leading index, so packed tokens [tokens, heads, head_dim] with a position per token work too),
// the same rotation the fused decode step applies (rope.cuh, float64 angles).
//
// Positions live on the device, so the host cannot check them: a negative position, or one past
// the caller's tables, fills its rows with NaN (as the fused step's output does), so the mistake
// shows instead of silently leaving them un-rotated.
// Parallelism: one block per (row b, chunk of up to kChunkPairs pairs). A row's angles are shared
//   by all its heads, so the block computes each pair's (cos, sin) once, in float64, into shared
//   memory; then its threads rotate (head, pair) items, kItemsPerThread at a time with every load
//   issued before the first store. Bound: memory (x read and written once) once the angles are
//   shared (computed per item, the float64 sincos bound it: 1.0 ms at 32768 x 32 x 128 bf16 on an
//   H100, ~530 GB/s; bench/peers/kv_ops_bench.py).
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
  std::int64_t rows = 0;
  int heads = 0, head_dim = 0, chunks = 0;  // chunks of pairs per row
  cuda_decode::RopeAngles angles;
};

constexpr int kRopeThreads = 256;
constexpr int kChunkPairs = 128;  // head_dim 256 in one block
constexpr int kItemsPerThread = 8;

__global__ void __launch_bounds__(kRopeThreads) apply_rope_kernel(const __grid_constant__ RopeParams p) {
  __shared__ double cos_of[kChunkPairs], sin_of[kChunkPairs];
  const int half = p.head_dim / 2;
  for (std::int64_t block = blockIdx.x; block < p.rows * p.chunks; block += gridDim.x) {
    const std::int64_t b = block / p.chunks;
    const int pair0 = static_cast<int>(block % p.chunks) * kChunkPairs;
    const int pairs = min(kChunkPairs, half - pair0);
    const int pos = p.positions[b * p.positions_stride];
    const bool valid = pos >= 0 && (p.angles.cos_table == nullptr || pos < p.table_positions);
    __syncthreads();  // the previous block's angles are no longer read
    if (threadIdx.x < pairs && valid) {
      cuda_decode::rope_cos_sin(p.head_dim, pos, pair0 + static_cast<int>(threadIdx.x), p.angles, cos_of[threadIdx.x],
                                sin_of[threadIdx.x]);
    }
    __syncthreads();
    const int items = p.heads * pairs;
    for (int first = 0; first < items; first += kRopeThreads * kItemsPerThread) {
      float x0[kItemsPerThread], x1[kItemsPerThread];
      std::int64_t at_a[kItemsPerThread], at_b[kItemsPerThread];
      int pair_of[kItemsPerThread];
#pragma unroll
      for (int j = 0; j < kItemsPerThread; ++j) {
        const int item = first + static_cast<int>(threadIdx.x) + j * kRopeThreads;
        pair_of[j] = -1;
        if (item < items) {
          const int h = item / pairs, pair = item % pairs;
          const cuda_decode::RopeIndices at = cuda_decode::rope_indices(p.angles.style, p.head_dim, pair0 + pair);
          const std::int64_t base = b * p.stride_b + h * p.stride_h;
          pair_of[j] = pair;
          at_a[j] = base + at.a;
          at_b[j] = base + at.b;
          x0[j] = cuda_common::load_as_f32(p.x, p.dtype, at_a[j]);
          x1[j] = cuda_common::load_as_f32(p.x, p.dtype, at_b[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kItemsPerThread; ++j) {
        if (pair_of[j] < 0) continue;
        float r0 = NAN, r1 = NAN;
        if (valid) {
          const double c = cos_of[pair_of[j]], s = sin_of[pair_of[j]], a = x0[j], e = x1[j];
          r0 = static_cast<float>(a * c - e * s);
          r1 = static_cast<float>(a * s + e * c);
        }
        cuda_common::store_from_f32(p.x, p.dtype, at_a[j], r0);
        cuda_common::store_from_f32(p.x, p.dtype, at_b[j], r1);
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
  p.rows = x.shape[0];
  p.heads = static_cast<int>(x.shape[1]);
  p.head_dim = static_cast<int>(x.shape[2]);
  p.chunks = (p.head_dim / 2 + kChunkPairs - 1) / kChunkPairs;
  p.table_positions = rope.table_positions;
  p.angles = {rope.style, rope.theta, rope.cos_table, rope.sin_table};
  const std::int64_t blocks = std::min<std::int64_t>(p.rows * p.chunks, std::int64_t{1} << 20);
  apply_rope_kernel<<<static_cast<unsigned>(blocks), kRopeThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  cuda_common::check_launch(ctx, "apply_rope_kernel");
}

}  // namespace attnkit::cuda
