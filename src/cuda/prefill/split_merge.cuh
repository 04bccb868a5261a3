// Merge of the tiled prefill kernel's key-split partial states (its own, so the prefill folder
// depends on nothing it does not own).
//
// Inputs:  partial_out f32 [splits, heads, workspace_rows, D] (each split's normalised output) and
//          partial_lse f32 [splits, heads, workspace_rows] (-inf for a split that saw no key).
// Output:  out (input dtype or f32) and optional LSE through the call's strides.
// Parallelism: one warp per (query row, head); lanes over D. Bound: memory (reads splits * D f32).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/prefill/prefill_params.cuh"
#include "cuda/prefill/simt_tiled_prefill.cuh"

namespace attnkit::cuda_prefill {

constexpr int kMergeWarpsPerBlock = 4;

template <class T>
__global__ void __launch_bounds__(kMergeWarpsPerBlock * 32) split_merge_kernel(const PrefillParams p) {
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kMergeWarpsPerBlock + threadIdx.x / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const SequenceExtent e = sequence_extent(p, b);
  if (r >= e.q_len) return;
  const std::int64_t ws_row = e.workspace_row0 + r;
  const std::int64_t split_stride = static_cast<std::int64_t>(p.num_heads) * p.workspace_rows;
  const float* lse_in = p.partial_lse + h * p.workspace_rows + ws_row;

  float mx = -INFINITY;
  for (int s = lane; s < p.splits; s += 32) mx = fmaxf(mx, lse_in[s * split_stride]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));

  const std::int64_t out_off =
      e.q_base_batch * p.o_batch_stride + h * p.o_head_stride + (e.q_start + r) * p.o_row_stride;
  if (mx == -INFINITY) {  // no split saw a key: zeros and LSE -inf
    for (int d = lane; d < p.head_dim; d += 32) {
      if (p.out_kind == OutKind::kF32) {
        static_cast<float*>(p.out)[out_off + d] = 0.0f;
      } else {
        store_float(static_cast<T*>(p.out) + out_off + d, 0.0f);
      }
    }
  } else {
    float total = 0.0f;
    for (int s = 0; s < p.splits; ++s) total += expf(lse_in[s * split_stride] - mx);
    const float inv = 1.0f / total;
    for (int d = lane; d < p.head_dim; d += 32) {
      float acc = 0.0f;
      for (int s = 0; s < p.splits; ++s) {
        const float w = expf(lse_in[s * split_stride] - mx);
        acc += w * p.partial_out[(s * split_stride + h * p.workspace_rows + ws_row) * p.head_dim + d];
      }
      if (p.out_kind == OutKind::kF32) {
        static_cast<float*>(p.out)[out_off + d] = acc * inv;
      } else {
        store_float(static_cast<T*>(p.out) + out_off + d, acc * inv);
      }
    }
    mx += logf(total);
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride + (e.q_start + r) * p.lse_row_stride] = mx;
  }
}

}  // namespace attnkit::cuda_prefill
