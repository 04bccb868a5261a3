// Stand-alone RoPE: rotates x [batch, heads, head_dim] in place at positions[b] (one position per
// leading index, so packed tokens [tokens, heads, head_dim] with a position per token work too),
// the same rotation the fused decode step applies (rope.cuh, float64 angles).
//
// Positions live on the device, so the host cannot check them: a negative position, or one past
// the caller's tables, fills its rows with NaN (as the fused step's output does), so the mistake
// shows instead of silently leaving them un-rotated.
// Parallelism: a block per (row b, group of heads, chunk of threads), no shared memory, no
//   barrier. A thread owns a pair (element loads), or, where every head row is 16-byte aligned and
//   whole vectors (apply_rope_vector_kernel), a 16-byte vector per side of the rotation: it loads
//   its values for the group's heads, computes their angles once in float64, rotates and stores.
//   Groups are one head for small calls (spread over SMs) and several heads for large ones.
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

// The block's (row, first head, heads, thread's unit) for block index `block`, units = pairs
// (scalar kernel) or 16-byte vectors (vector kernel) of one head row, kChunkPairs per block.
struct RopeBlock {
  std::int64_t b;
  int h0, heads, unit;
};
__device__ RopeBlock rope_block(const RopeParams& p, std::int64_t block) {
  const int chunk = static_cast<int>(block % p.chunks);
  const std::int64_t row_group = block / p.chunks;
  const int h0 = static_cast<int>(row_group % p.head_groups) * p.heads_per_block;
  return {row_group / p.head_groups, h0, min(p.heads_per_block, p.heads - h0),
          chunk * kChunkPairs + static_cast<int>(threadIdx.x)};
}

// 16-byte vectors of T as f32 values and back.
template <class T> constexpr int kPerVector = 16 / static_cast<int>(sizeof(T));
template <class T>
__device__ __forceinline__ void unpack(const uint4& v, float (&out)[kPerVector<T>]) {
  cuda_common::vec16_to_f32(v, out, T{});
}
template <class T>
__device__ __forceinline__ uint4 pack(const float (&in)[kPerVector<T>]) {
  uint4 v;
  std::uint32_t* w = reinterpret_cast<std::uint32_t*>(&v);
  if constexpr (sizeof(T) == 4) {
    for (int i = 0; i < 4; ++i) w[i] = __float_as_uint(in[i]);
  } else {
    for (int i = 0; i < 4; ++i) {
      const T lo = cuda_common::StorageTraits<T>::from_f32(in[2 * i]), hi = cuda_common::StorageTraits<T>::from_f32(in[2 * i + 1]);
      w[i] = static_cast<std::uint32_t>(reinterpret_cast<const unsigned short&>(lo)) |
             static_cast<std::uint32_t>(reinterpret_cast<const unsigned short&>(hi)) << 16;
    }
  }
  return v;
}

constexpr int kVectorHeadsPerBlock = 4;

// The vector kernel: rows 16-byte aligned, a head row made of whole vectors on each side of the
// rotation. A thread owns one vector per side: half style, vector k of the first half and the
// matching one of the second (pairs kV .. kV + V - 1); interleaved, vector k of the row (pairs
// kV/2 .. kV/2 + V/2 - 1, each an adjacent (even, odd) element pair). It loads its vectors of up
// to kVectorHeadsPerBlock heads, computes their angles once, then rotates and stores.
template <class T>
__global__ void __launch_bounds__(kChunkPairs) apply_rope_vector_kernel(const __grid_constant__ RopeParams p) {
  constexpr int V = kPerVector<T>;
  const bool half_style = p.angles.style == RopeStyle::kHalf;
  const int half = p.head_dim / 2;
  const int units = half_style ? half / V : p.head_dim / V;
  constexpr int kPairs = V;  // pairs per thread: V (half style) or V / 2 (interleaved)
  T* x = static_cast<T*>(p.x);
  for (std::int64_t block = blockIdx.x; block < p.blocks; block += gridDim.x) {
    const RopeBlock r = rope_block(p, block);
    if (r.unit >= units) continue;
    const int pos = p.positions[r.b * p.positions_stride];
    const bool valid = pos >= 0 && (p.angles.cos_table == nullptr || pos < p.table_positions);
    const int first_elem = r.unit * V;  // of the vector (half style: in the first half)
    const int first_pair = half_style ? first_elem : first_elem / 2;
    const int pairs = half_style ? V : V / 2;
    const std::int64_t base = r.b * p.stride_b + static_cast<std::int64_t>(r.h0) * p.stride_h + first_elem;
    uint4 lo[kVectorHeadsPerBlock], hi[kVectorHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kVectorHeadsPerBlock; ++h) {
      if (h < r.heads) {
        lo[h] = *reinterpret_cast<const uint4*>(x + base + h * p.stride_h);
        if (half_style) hi[h] = *reinterpret_cast<const uint4*>(x + base + h * p.stride_h + half);
      }
    }
    double c[kPairs], sn[kPairs];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      c[j] = sn[j] = NAN;  // an invalid position rotates by NaN: NaN rows
      if (valid && j < pairs) cuda_decode::rope_cos_sin(p.head_dim, pos, first_pair + j, p.angles, c[j], sn[j]);
    }
#pragma unroll
    for (int h = 0; h < kVectorHeadsPerBlock; ++h) {
      if (h >= r.heads) continue;
      float a[V], e[V];
      unpack<T>(lo[h], a);
      if (half_style) {
        unpack<T>(hi[h], e);
#pragma unroll
        for (int j = 0; j < V; ++j) cuda_decode::rotate_pair(a[j], e[j], c[j], sn[j]);
        *reinterpret_cast<uint4*>(x + base + h * p.stride_h) = pack<T>(a);
        *reinterpret_cast<uint4*>(x + base + h * p.stride_h + half) = pack<T>(e);
      } else {
#pragma unroll
        for (int j = 0; j < V / 2; ++j) cuda_decode::rotate_pair(a[2 * j], a[2 * j + 1], c[j], sn[j]);
        *reinterpret_cast<uint4*>(x + base + h * p.stride_h) = pack<T>(a);
      }
    }
  }
}

__global__ void __launch_bounds__(kChunkPairs) apply_rope_kernel(const __grid_constant__ RopeParams p) {
  const int half = p.head_dim / 2;
  for (std::int64_t block = blockIdx.x; block < p.blocks; block += gridDim.x) {
    const RopeBlock r = rope_block(p, block);
    const std::int64_t b = r.b;
    const int h0 = r.h0, heads = r.heads, pair = r.unit;
    if (pair >= half) continue;
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
        cuda_decode::rotate_pair(x0[h], x1[h], c, s);
        cuda_common::store_from_f32(p.x, p.dtype, base + h * p.stride_h + at.a, x0[h]);
        cuda_common::store_from_f32(p.x, p.dtype, base + h * p.stride_h + at.b, x1[h]);
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
  p.table_positions = rope.table_positions;
  p.angles = {rope.style, rope.theta, rope.cos_table, rope.sin_table};
  const auto s = static_cast<cudaStream_t>(stream);
  // The vector kernel where every head row starts 16-byte aligned and splits into whole vectors on
  // each side of the rotation; else a thread per pair with element loads.
  const int per_vector = 16 / static_cast<int>(dtype_size(x.dtype));
  const int side = rope.style == RopeStyle::kHalf ? p.head_dim / 2 : p.head_dim;
  const bool vector = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && x.strides[0] % per_vector == 0 &&
                      x.strides[1] % per_vector == 0 && side % per_vector == 0;
  const int units = vector ? side / per_vector : p.head_dim / 2;  // threads per head row
  // Few rows (a decode step's tokens): a head per block, so the call spreads over more SMs; many
  // rows: several heads share each angle.
  p.heads_per_block = x.shape[0] * p.heads < 4096 ? 1 : vector ? kVectorHeadsPerBlock : kHeadsPerBlock;
  p.head_groups = (p.heads + p.heads_per_block - 1) / p.heads_per_block;
  p.chunks = (units + kChunkPairs - 1) / kChunkPairs;
  p.blocks = x.shape[0] * p.head_groups * p.chunks;
  const int threads = std::min(kChunkPairs, (units + 31) / 32 * 32);
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(p.blocks, std::int64_t{1} << 20));
  if (!vector) {
    apply_rope_kernel<<<blocks, threads, 0, s>>>(p);
  } else if (x.dtype == DType::kBF16) {
    apply_rope_vector_kernel<__nv_bfloat16><<<blocks, threads, 0, s>>>(p);
  } else if (x.dtype == DType::kF16) {
    apply_rope_vector_kernel<__half><<<blocks, threads, 0, s>>>(p);
  } else {
    apply_rope_vector_kernel<float><<<blocks, threads, 0, s>>>(p);
  }
  cuda_common::check_launch(ctx, vector ? "apply_rope_vector_kernel" : "apply_rope_kernel");
}

}  // namespace attnkit::cuda
