// Internal: the three small kernels of context-parallel decode (shard_kernels.cu), launched by
// sharded_decode.cpp. Plain C++ so host code needs no CUDA header. Index values travel by value in
// the launch arguments (I32Chunk), so a run never copies from host memory and never synchronises.
#pragma once
#include <cstdint>

#include "attnkit/dtype.hpp"

namespace attnkit::context_parallel {

inline constexpr int kMaxSequencesPerLaunch = 256;

struct I32Chunk {
  std::int32_t values[kMaxSequencesPerLaunch] = {};
  int count = 0;
};

// dst[i] = chunk.values[i] for i < chunk.count (a shard's local lengths, in its workspace).
void launch_write_i32(const I32Chunk& chunk, std::int32_t* dst, void* stream);

// Merge of gathered shard states: gather_out f32 [shards, rows, head_dim], gather_lse f32
// [shards, rows] -> out [batch, num_heads, head_dim] (out_dtype, strided), optional lse f32.
struct MergeShardsParams {
  const float* gather_out = nullptr;
  const float* gather_lse = nullptr;
  int shards = 0, batch = 0, num_heads = 0, head_dim = 0;
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  std::int64_t out_stride_b = 0, out_stride_h = 0;
  float* lse = nullptr;
  std::int64_t lse_stride_b = 0, lse_stride_h = 0;
};
void launch_merge_shards(const MergeShardsParams& params, void* stream);

// Routed append: sequences first..first+positions.count-1; positions.values[i] is the local row
// to write, or -1 when another shard owns the token. k_new/v_new [batch, kv_heads, head_dim],
// caches [batch, kv_heads, capacity, head_dim], the same element size (2 or 4 bytes).
struct RoutedAppendParams {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  std::int64_t k_new_stride_b = 0, k_new_stride_h = 0, v_new_stride_b = 0, v_new_stride_h = 0;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  std::int64_t k_stride_b = 0, k_stride_h = 0, k_stride_s = 0, v_stride_b = 0, v_stride_h = 0, v_stride_s = 0;
  int kv_heads = 0, head_dim = 0, element_bytes = 2;
  int first = 0;
  I32Chunk positions;
};
void launch_routed_append(const RoutedAppendParams& params, void* stream);

}  // namespace attnkit::context_parallel
