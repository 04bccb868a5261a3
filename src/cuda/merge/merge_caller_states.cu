// Stand-alone merge of partial (output, LSE) states the caller holds: key ranges attended in
// separate calls (a shared prefix and each sequence's suffix, as in cascade attention; shards of
// one cache), merged by the log-sum-exp rule of cpu.hpp's merge_states.
//
// Inputs: out_partial [splits, rows, head_dim] in f32, f16 or bf16, each split normalised over its
//   own keys; lse_partial f32 [splits, rows] (natural log). Output: out [rows, head_dim] (any
//   storage dtype) and optionally lse [rows]. A split with lse -inf saw no key and is skipped (its
//   output is never read); a row whose splits are all -inf gets zeros and -inf.
// Parallelism: one warp per row (grid-stride), lanes over head_dim in chunks of 128 values; the
//   split count is unbounded (lane s holds split s's weight; past 32 splits they are recomputed).
//   The first chunk of the first four splits is loaded beside the LSEs (one round trip, not two:
//   bench/peers/kv_ops_bench.py, docs/perf-notes.md "Stand-alone merge and RoPE").
// Bound: memory (each partial read once).
#include <cuda_runtime.h>

#include <algorithm>

#include "attnkit/cuda.hpp"
#include "attnkit/validate.hpp"
#include "cuda/common/convert.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_pointer.hpp"

namespace attnkit::cuda {
namespace {

struct MergeParams {
  const void* out_partial = nullptr;
  const float* lse_partial = nullptr;
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  float* lse = nullptr;
  std::int64_t rows = 0;
  int splits = 0, head_dim = 0;
  std::int64_t partial_s = 0, partial_r = 0, lse_s = 0, lse_r = 0, out_r = 0, lse_out_r = 0;
};

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = 4;         // values of a row per lane per chunk (128 per warp)
constexpr int kPrefetchSplits = 4;  // splits whose first chunk is loaded beside the LSEs

__device__ float warp_max(float x) {
  for (int off = 16; off >= 1; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ float warp_sum(float x) {
  for (int off = 16; off >= 1; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Split s's LSE, and its weight e^(lse_s - max): from lane s's registers for the first 32 splits,
// loaded (a broadcast) past them.
struct SplitWeight {
  float lse, weight;
};
__device__ SplitWeight split_weight(int s, float lane_lse, float lane_weight, const float* lse_row, std::int64_t lse_s,
                                   float max_lse) {
  if (s < 32) return {__shfl_sync(0xffffffffu, lane_lse, s), __shfl_sync(0xffffffffu, lane_weight, s)};
  const float l = lse_row[s * lse_s];
  return {l, l == -INFINITY ? 0.0f : expf(l - max_lse)};
}

// The partial outputs' element type is a template argument (not a run-time switch per load): with
// the switch, the sixteen prefetched bf16 loads per lane read 8192 rows 25% slower than before the
// prefetch.
template <class Partial>
__device__ __forceinline__ float partial_at(const void* base, std::int64_t i) {
  return cuda_common::StorageTraits<Partial>::to_f32(static_cast<const Partial*>(base)[i]);
}

template <class Partial>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) merge_caller_states_kernel(const __grid_constant__ MergeParams p) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(kWarpsPerBlock) + threadIdx.x / 32; row < p.rows;
       row += warps) {
    const float* lse_row = p.lse_partial + row * p.lse_r;
    // One memory round trip for the common case: the LSEs (lane s holds split s's) and the first
    // chunk's values of the first kPrefetchSplits splits are loaded before any weight is known
    // (a split that saw no key may hold anything there; its values are loaded but never used).
    const float lane_lse = lane < p.splits ? lse_row[lane * p.lse_s] : -INFINITY;
    float first[kPrefetchSplits][kPerLane];
#pragma unroll
    for (int s = 0; s < kPrefetchSplits; ++s) {
      const std::int64_t base = s * p.partial_s + row * p.partial_r;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int d = lane + 32 * j;
        first[s][j] = s < p.splits && d < p.head_dim ? partial_at<Partial>(p.out_partial, base + d) : 0.0f;
      }
    }
    float max_lse = lane_lse;
    for (int s = lane + 32; s < p.splits; s += 32) max_lse = fmaxf(max_lse, lse_row[s * p.lse_s]);
    max_lse = warp_max(max_lse);
    float lane_weight = 0.0f, total = 0.0f;
    if (max_lse != -INFINITY) {
      lane_weight = lane_lse == -INFINITY ? 0.0f : expf(lane_lse - max_lse);
      total = lane_weight;
      for (int s = lane + 32; s < p.splits; s += 32) {
        const float l = lse_row[s * p.lse_s];
        if (l != -INFINITY) total += expf(l - max_lse);
      }
    }
    total = warp_sum(total);
    const bool any_key = max_lse != -INFINITY;  // else zeros and -inf; a NaN LSE stays NaN, as on the CPU
    const float inv = any_key ? 1.0f / total : 0.0f;

    for (int d0 = 0; d0 < p.head_dim; d0 += 32 * kPerLane) {
      float acc[kPerLane] = {};
      int from = 0;  // the first split whose values are loaded here
      if (d0 == 0) {
#pragma unroll
        for (int s = 0; s < kPrefetchSplits; ++s) {  // s is a constant: first[][] stays in registers
          if (s >= p.splits || !any_key) break;
          const SplitWeight w = split_weight(s, lane_lse, lane_weight, lse_row, p.lse_s, max_lse);
          if (w.lse == -INFINITY) continue;  // no key: its values are never used
#pragma unroll
          for (int j = 0; j < kPerLane; ++j) acc[j] = fmaf(w.weight, first[s][j], acc[j]);
        }
        from = kPrefetchSplits;
      }
      for (int s = from; s < p.splits && any_key; ++s) {
        const SplitWeight w = split_weight(s, lane_lse, lane_weight, lse_row, p.lse_s, max_lse);
        if (w.lse == -INFINITY) continue;
        const std::int64_t base = s * p.partial_s + row * p.partial_r;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const int d = d0 + lane + 32 * j;
          if (d < p.head_dim) acc[j] = fmaf(w.weight, partial_at<Partial>(p.out_partial, base + d), acc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int d = d0 + lane + 32 * j;
        if (d < p.head_dim) cuda_common::store_from_f32(p.out, p.out_dtype, row * p.out_r + d, acc[j] * inv);
      }
    }
    if (lane == 0 && p.lse != nullptr) p.lse[row * p.lse_out_r] = any_key ? max_lse + logf(total) : -INFINITY;
  }
}

}  // namespace

void merge_states(const MergeTensors& t, Stream stream) {
  const char* ctx = "cuda::merge_states";
  validate_merge(t, DeviceKind::kCuda);
  for (auto [view, name] : {std::pair{&t.out_partial, "out_partial"}, {&t.lse_partial, "lse_partial"}, {&t.out, "out"},
                            {&t.lse, "lse"}}) {
    cuda_common::require_device_memory(*view, ctx, name);
  }
  MergeParams p;
  p.out_partial = t.out_partial.data;
  p.lse_partial = t.lse_partial.as<const float>();
  p.out = t.out.data;
  p.out_dtype = t.out.dtype;
  p.lse = t.lse.empty() ? nullptr : static_cast<float*>(t.lse.data);
  p.splits = static_cast<int>(t.out_partial.shape[0]);
  p.rows = t.out_partial.shape[1];
  p.head_dim = static_cast<int>(t.out_partial.shape[2]);
  p.partial_s = t.out_partial.strides[0], p.partial_r = t.out_partial.strides[1];
  p.lse_s = t.lse_partial.strides[0], p.lse_r = t.lse_partial.strides[1];
  p.out_r = t.out.strides[0];
  p.lse_out_r = t.lse.empty() ? 0 : t.lse.strides[0];
  const std::int64_t blocks = std::min<std::int64_t>((p.rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 16);
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (t.out_partial.dtype) {
    case DType::kF16: merge_caller_states_kernel<__half><<<grid, 32 * kWarpsPerBlock, 0, s>>>(p); break;
    case DType::kBF16: merge_caller_states_kernel<__nv_bfloat16><<<grid, 32 * kWarpsPerBlock, 0, s>>>(p); break;
    default: merge_caller_states_kernel<float><<<grid, 32 * kWarpsPerBlock, 0, s>>>(p); break;
  }
  cuda_common::check_launch(ctx, "merge_caller_states_kernel");
}

}  // namespace attnkit::cuda
