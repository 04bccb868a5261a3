// Merge of split-KV partial states (the second launch of a split decode).
//
// Inputs: partial_out [splits, batch * num_heads, head_dim] f32, each normalised over its split's
//   keys, and partial_lse [splits, batch * num_heads] f32 (natural log), in the caller's workspace.
// Parallelism: one block per query row; a sequence's active split count is recomputed from its
//   length exactly as the decode kernel did (sequence_range.cuh), so no split state is read that
//   was not written this step. Launched as a programmatic dependent of the decode grid (below).
// Output: out = sum_s w_s * out_s / sum_s w_s with w_s = exp(lse_s - max lse); lse = max + log(sum).
//   A row with no visible key writes zeros and LSE -inf; an invalid fused position writes NaN.
// Bound: tiny next to the K/V read (splits * head_dim * 4 bytes per row).
// Extend's states (packed (token, head) rows) are merged by merge_extend_kernel below.
#include <cuda_runtime.h>

#include "common/attention_sinks.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/sm90_primitives.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/ragged_rows.cuh"
#include "cuda/decode/decode_geometry.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/sequence_range.cuh"

namespace attnkit::cuda_decode {
namespace {

constexpr int kMergeThreads = 128;

// One merged row, step 1 (every thread of the block calls it): warp 0 turns the active splits'
// LSEs of state row `row` into weights w_s = exp(lse_s - max lse) in `weights` (shared); returns
// 1 / sum w_s (0 when no split saw a key) and the merged LSE max + log(sum) (-inf then). Each lane
// loads its splits' LSEs at once (one memory latency, not one per split).
struct MergedRow {
  float inv;
  float lse;
};
__device__ MergedRow merge_weights(const float* partial_lse, std::int64_t rows_total, std::int64_t row, int active,
                                   float* weights) {
  constexpr int kPerLane = kMaxSplits / 32;
  __shared__ float total, max_lse;
  if (threadIdx.x < 32) {
    float lse[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = threadIdx.x + 32 * j;
      lse[j] = s < active ? partial_lse[s * rows_total + row] : -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) mx = fmaxf(mx, lse[j]);
    for (int off = 16; off >= 1; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int s = threadIdx.x + 32 * j;
      if (s < active) {
        const float w = expf(lse[j] - m_use);
        weights[s] = w;
        sum += w;
      }
    }
    for (int off = 16; off >= 1; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (threadIdx.x == 0) {
      total = sum;
      max_lse = mx;
    }
  }
  __syncthreads();
  return {total > 0.0f ? 1.0f / total : 0.0f, total > 0.0f ? max_lse + logf(total) : -INFINITY};
}

// The head's attention sink folded into a merged (final) row.
__device__ MergedRow with_sink(MergedRow m, const float* sinks, int h) {
  if (sinks == nullptr) return m;
  const attnkit::detail::SinkFold f = attnkit::detail::fold_sink(m.lse, sinks[h]);
  return {m.inv * f.weight, f.lse};
}

// Step 2: element d of the merged row, before the 1 / sum scaling. Loads go out in batches of
// kBatch splits so their latencies overlap.
__device__ float weighted_sum(const float* partial_out, std::int64_t rows_total, std::int64_t row, int head_dim,
                              int active, const float* weights, int d) {
  constexpr int kBatch = 8;
  float o = 0.0f;
  for (int s0 = 0; s0 < active; s0 += kBatch) {
    float x[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      x[j] = s0 + j < active ? partial_out[((s0 + j) * rows_total + row) * head_dim + d] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j < active) o = fmaf(weights[s0 + j], x[j], o);
    }
  }
  return o;
}

__global__ void __launch_bounds__(kMergeThreads) merge_splits_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxSplits];
  const std::int64_t row = blockIdx.x;
  const int b = static_cast<int>(row / p.num_heads), h = static_cast<int>(row % p.num_heads);
  const std::int64_t rows_total = static_cast<std::int64_t>(p.batch) * p.num_heads;
  const SequenceRange range = sequence_range(p, b);
  const int keys_per_split = split_keys(p, range);
  const int active = (range.len - range.lo + keys_per_split - 1) / keys_per_split;

  cuda_common::grid_dependency_wait();  // the decode grid's states are written and visible
  const MergedRow merged = with_sink(merge_weights(p.partial_lse, rows_total, row, active, weights), p.sinks, h);
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float o = weighted_sum(p.partial_out, rows_total, row, p.head_dim, active, weights, d) * merged.inv;
    if (!range.valid) o = NAN;
    cuda_common::store_from_f32(p.out, p.out_dtype, b * p.out_stride_b + h * p.out_stride_h + d, o);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h] = range.valid ? merged.lse : NAN;
  }
}

// Extend: one block per (token row of q, head). The token's sequence is found by a binary search
// over cu_seqlens_q (device, clamped as the kernel clamps it); its block's active split count is
// recomputed from the block's key range (sequence_range.cuh), so only written states are read.
// Rows past the last sequence's tokens are not written.
__global__ void __launch_bounds__(kMergeThreads) merge_extend_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float weights[kMaxSplits];
  const std::int64_t row = blockIdx.x;
  const int token = static_cast<int>(row / p.num_heads), h = static_cast<int>(row % p.num_heads);
  const int b = cuda_common::sequence_of_row(p.cu_seqlens_q, p.batch, p.q_rows, token);
  const ExtendRows ext = extend_rows(p, b);
  const int i = token - ext.q_start;
  if (i < 0 || i >= ext.q_len) return;  // a padding row, or past a clamped q_len
  const int packed = i * p.group + h % p.group;
  const int row0 = packed / p.rows_per_block * p.rows_per_block;
  const int len = min(max(p.lengths[b], 0), p.kv_len);
  const SequenceRange range =
      extend_block_range(p, len, ext.q_len, row0, min(p.rows_per_block, ext.q_len * p.group - row0));
  const int active = (range.len - range.lo + p.keys_per_split - 1) / p.keys_per_split;
  const std::int64_t rows_total = static_cast<std::int64_t>(p.state_rows) * p.num_heads;

  cuda_common::grid_dependency_wait();  // the extend grid's states are written and visible
  const MergedRow merged = with_sink(merge_weights(p.partial_lse, rows_total, row, active, weights), p.sinks, h);
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    const float o = weighted_sum(p.partial_out, rows_total, row, p.head_dim, active, weights, d);
    cuda_common::store_from_f32(p.out, p.out_dtype, token * p.out_stride_b + h * p.out_stride_h + d, o * merged.inv);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) p.lse[token * p.lse_stride_b + h * p.lse_stride_h] = merged.lse;
}

}  // namespace

// The merges are programmatic dependents of the decode/extend grid before them on the stream: they
// launch while it runs (it calls launch_dependents at its start), do their prologue, and wait for
// its states in grid_dependency_wait. Graph capture keeps the programmatic edge.
template <class Kernel>
void launch_dependent(Kernel kernel, std::int64_t rows, const DecodeParams& p, void* stream, const char* ctx,
                      const char* name) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows));
  config.blockDim = dim3(kMergeThreads);
  config.dynamicSmemBytes = 0;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cuda_common::check(cudaLaunchKernelEx(&config, kernel, p), ctx, name);
}

void launch_merge_extend(const DecodeParams& p, void* stream) {
  const std::int64_t rows = static_cast<std::int64_t>(p.q_rows) * p.num_heads;
  if (rows == 0) return;
  launch_dependent(merge_extend_kernel, rows, p, stream, "cuda::extend", "launching merge_extend_kernel");
}

void launch_merge_splits(const DecodeParams& p, void* stream) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.num_heads;
  launch_dependent(merge_splits_kernel, rows, p, stream, "cuda::decode", "launching merge_splits_kernel");
}

}  // namespace attnkit::cuda_decode
