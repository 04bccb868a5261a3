// Merge of the tiled prefill kernel's key-split partial states (its own, so the prefill folder
// depends on nothing it does not own).
//
// Inputs:  partial_out f32 [splits, heads, workspace_rows, D] (each split's normalised output) and
//          partial_lse f32 [splits, heads, workspace_rows] (-inf for a split that saw no key).
// Output:  out (input dtype or f32) and optional LSE through the call's strides.
// Parallelism: one warp per (query row, head); lanes over D. Each lane loads the LSEs of its splits
// (s = lane, lane + 32) once, and the weights reach the other lanes by shuffles; the values of eight
// splits go out at once, so a row costs ~splits / 8 load latencies, not splits (at 64 splits the
// one-split-at-a-time loop set the call: docs/perf-notes.md, "Hopper prefill round 15").
// Bound: memory (reads splits * D f32).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/attention_sinks.hpp"
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
  static_assert(kMaxKeySplits <= 64, "a lane holds the weights of two splits");
  float w[2];  // splits lane and lane + 32: their LSEs, then their weights
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int s = lane + 32 * j;
    w[j] = s < p.splits ? lse_in[s * split_stride] : -INFINITY;
    mx = fmaxf(mx, w[j]);
  }
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
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      w[j] = lane + 32 * j < p.splits ? expf(w[j] - mx) : 0.0f;
      total += w[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
    float inv = 1.0f / total;
    if (p.sinks != nullptr) inv *= attnkit::detail::fold_sink(mx + logf(total), p.sinks[h]).weight;
    const float* values = p.partial_out + (h * p.workspace_rows + ws_row) * p.head_dim;
    constexpr int kBatch = 8;
    for (int d = lane; d < p.head_dim; d += 32) {
      float acc = 0.0f;
      for (int s0 = 0; s0 < p.splits; s0 += kBatch) {
        float x[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int s = s0 + k;
          x[k] = s < p.splits ? values[s * split_stride * p.head_dim + d] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int s = s0 + k;  // the same in every lane: its weight comes from lane s % 32
          acc = fmaf(__shfl_sync(0xffffffffu, s < 32 ? w[0] : w[1], s & 31), x[k], acc);
        }
      }
      if (p.out_kind == OutKind::kF32) {
        static_cast<float*>(p.out)[out_off + d] = acc * inv;
      } else {
        store_float(static_cast<T*>(p.out) + out_off + d, acc * inv);
      }
    }
    mx += logf(total);
  }
  if (p.sinks != nullptr) mx = attnkit::detail::fold_sink(mx, p.sinks[h]).lse;  // a row no split saw: the sink's logit
  if (p.lse != nullptr && lane == 0) {
    p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride + (e.q_start + r) * p.lse_row_stride] = mx;
  }
}

}  // namespace attnkit::cuda_prefill
