// The small kernels of context-parallel decode (the decode itself is cuda::decode on each shard).
//
// write_i32: a shard's local lengths, passed by value, into its workspace. One block.
// merge_shards: inputs gather_out f32 [shards, rows, head_dim] (each shard's output normalised over
//   its own keys) and gather_lse f32 [shards, rows]; one block per (sequence, head) row. The rule is
//   cpu::merge_states': m = max lse, w_s = exp(lse_s - m), out = sum w_s out_s / sum w_s,
//   lse = m + log(sum w_s); a shard with lse -inf saw no key and is skipped (its out is not read),
//   a row no shard saw writes zeros and -inf. Bound: shards * head_dim * 4 bytes per row, tiny.
// routed_append: one block per (sequence, KV head) of the chunk; a sequence whose token another
//   shard owns (position -1) returns at once. Copies raw elements (the cache dtype is k_new's).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/convert.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/context_parallel/shard_kernels.hpp"

namespace attnkit::context_parallel {
namespace {

constexpr int kMaxShards = 64;  // as plan_sharded_decode allows
constexpr int kMergeThreads = 128;
constexpr int kAppendThreads = 128;

__global__ void write_i32_kernel(const __grid_constant__ I32Chunk chunk, std::int32_t* dst) {
  for (int i = threadIdx.x; i < chunk.count; i += blockDim.x) dst[i] = chunk.values[i];
}

__global__ void __launch_bounds__(kMergeThreads) merge_shards_kernel(const __grid_constant__ MergeShardsParams p) {
  __shared__ float weights[kMaxShards];
  __shared__ float inv_total, merged_lse;
  const std::int64_t row = blockIdx.x;
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.num_heads;
  const int b = static_cast<int>(row / p.num_heads), h = static_cast<int>(row % p.num_heads);
  if (threadIdx.x < 32) {
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < p.shards; s += 32) mx = fmaxf(mx, p.gather_lse[s * rows + row]);
    for (int off = 16; off >= 1; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
    for (int s = threadIdx.x; s < p.shards; s += 32) {
      const float l = p.gather_lse[s * rows + row];
      const float w = (l == -INFINITY) ? 0.0f : expf(l - mx);
      weights[s] = w;
      sum += w;
    }
    for (int off = 16; off >= 1; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (threadIdx.x == 0) {
      inv_total = sum > 0.0f ? 1.0f / sum : 0.0f;
      merged_lse = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < p.shards; ++s) {
      if (weights[s] != 0.0f) o = fmaf(weights[s], p.gather_out[(s * rows + row) * p.head_dim + d], o);
    }
    cuda_common::store_from_f32(p.out, p.out_dtype, b * p.out_stride_b + h * p.out_stride_h + d, o * inv_total);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) p.lse[b * p.lse_stride_b + h * p.lse_stride_h] = merged_lse;
}

template <class Element>
__global__ void __launch_bounds__(kAppendThreads) routed_append_kernel(const __grid_constant__ RoutedAppendParams p) {
  const int i = blockIdx.x, g = blockIdx.y;
  const int pos = p.positions.values[i];
  if (pos < 0) return;
  const std::int64_t b = p.first + i;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    if (p.k_new != nullptr) {
      static_cast<Element*>(p.k_cache)[b * p.k_stride_b + g * p.k_stride_h + pos * p.k_stride_s + d] =
          static_cast<const Element*>(p.k_new)[b * p.k_new_stride_b + g * p.k_new_stride_h + d];
    }
    if (p.v_new != nullptr) {
      static_cast<Element*>(p.v_cache)[b * p.v_stride_b + g * p.v_stride_h + pos * p.v_stride_s + d] =
          static_cast<const Element*>(p.v_new)[b * p.v_new_stride_b + g * p.v_new_stride_h + d];
    }
  }
}

}  // namespace

void launch_write_i32(const I32Chunk& chunk, std::int32_t* dst, void* stream) {
  write_i32_kernel<<<1, kMaxSequencesPerLaunch, 0, static_cast<cudaStream_t>(stream)>>>(chunk, dst);
  cuda_common::check_launch("sharded decode", "write_i32_kernel");
}

void launch_merge_shards(const MergeShardsParams& p, void* stream) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.num_heads;
  if (rows == 0) return;
  merge_shards_kernel<<<static_cast<unsigned>(rows), kMergeThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  cuda_common::check_launch("sharded decode", "merge_shards_kernel");
}

void launch_routed_append(const RoutedAppendParams& p, void* stream) {
  if (p.positions.count == 0) return;
  const dim3 grid(static_cast<unsigned>(p.positions.count), static_cast<unsigned>(p.kv_heads));
  if (p.element_bytes == 4) {
    routed_append_kernel<std::uint32_t><<<grid, kAppendThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  } else {
    routed_append_kernel<std::uint16_t><<<grid, kAppendThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  }
  cuda_common::check_launch("sharded_append_kv", "routed_append_kernel");
}

}  // namespace attnkit::context_parallel
