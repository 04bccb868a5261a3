// SIMT tiled prefill: the exact path for f32 inputs (and f16/bf16 head dims without a tensor-core
// instantiation). Same family as the tensor-core kernel (key tiles shared by a block of rows),
// scored with f32 FMAs instead of tensor cores.
//
// Inputs:  as tiled_prefill.cuh (any storage dtype; strides free, D contiguous).
// Parallelism: a block of kSimtWarpsPerBlock warps serves as many consecutive query rows of one
//          head, one warp per row; each tile of kSimtKeysPerTile keys (K and V, converted to f32)
//          is loaded once into shared memory for all of them. Within a warp the head_dim is spread
//          over the lanes (up to 8 elements each), the dot product reduced with shuffles, and an
//          online softmax in f32 (expf, not exp2 approximations, to meet the f32 tolerance).
// Masks:   tiles outside the block's visible key range are never loaded; within a tile each row
//          visits only its own visible keys (masked keys are skipped, not scored).
// Bound:   the per-key shuffle reduction (latency); correct, not fast.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/attention_sinks.hpp"
#include "common/window_begin.hpp"
#include "cuda/prefill/prefill_config.hpp"
#include "cuda/prefill/prefill_params.cuh"

namespace attnkit::cuda_prefill {

__device__ inline float load_float(const float* p) { return *p; }
__device__ inline float load_float(const __half* p) { return __half2float(*p); }
__device__ inline float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void store_float(float* p, float x) { *p = x; }
__device__ inline void store_float(__half* p, float x) { *p = __float2half_rn(x); }
__device__ inline void store_float(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

template <class T>
__global__ void __launch_bounds__(kSimtWarpsPerBlock * 32) simt_tiled_prefill_kernel(const PrefillParams p) {
  attnkit::detail::prefetch_sinks(p.sinks, p.num_heads);
  constexpr int kPerLane = kSimtMaxHeadDim / 32;
  __shared__ float s_k[kSimtKeysPerTile][kSimtMaxHeadDim];
  __shared__ float s_v[kSimtKeysPerTile][kSimtMaxHeadDim];
  const int lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * kSimtWarpsPerBlock;
  const int r = r0 + threadIdx.x / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const SequenceExtent e = sequence_extent(p, b);
  if (r0 >= e.q_len) return;  // whole block past the sequence (uniform: no barrier skipped)
  const bool row_live = r < e.q_len;
  const int kvh = h / p.group_size;
  const int D = p.head_dim;

  const T* q = static_cast<const T*>(p.q) + e.q_base_batch * p.q_batch_stride + h * p.q_head_stride +
               (e.q_start + r) * p.q_row_stride;
  const T* k = static_cast<const T*>(p.k) + e.q_base_batch * p.k_batch_stride + kvh * p.k_head_stride +
               e.k_start * p.k_row_stride;
  const T* v = static_cast<const T*>(p.v) + e.q_base_batch * p.v_batch_stride + kvh * p.v_head_stride +
               e.k_start * p.v_row_stride;

  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    qr[i] = d < D && row_live ? load_float(q + d) : 0.0f;
    acc[i] = 0.0f;
  }

  const std::int64_t shift = static_cast<std::int64_t>(e.kv_len) - e.q_len;  // bottom-right causal
  auto visible_lo = [&](std::int64_t pos) { return attnkit::detail::window_begin(pos, p.window); };
  auto visible_hi = [&](std::int64_t pos) { return p.causal ? min_i64(e.kv_len, pos + 1) : std::int64_t{e.kv_len}; };
  const std::int64_t pos = r + shift;
  const std::int64_t lo = row_live ? visible_lo(pos) : 0, hi = row_live ? visible_hi(pos) : 0;
  // The block's key range: the union of its rows' ranges (both ends move forward with the row).
  const std::int64_t last_row = min(r0 + kSimtWarpsPerBlock, e.q_len) - 1;
  const std::int64_t block_lo = visible_lo(r0 + shift), block_hi = visible_hi(last_row + shift);

  float m = -INFINITY, l = 0.0f;
  for (std::int64_t t0 = block_lo; t0 < block_hi; t0 += kSimtKeysPerTile) {
    const int n = static_cast<int>(min_i64(kSimtKeysPerTile, block_hi - t0));
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < n * D; i += kSimtWarpsPerBlock * 32) {
      const int j = i / D, d = i % D;
      s_k[j][d] = load_float(k + (t0 + j) * p.k_row_stride + d);
      s_v[j][d] = load_float(v + (t0 + j) * p.v_row_stride + d);
    }
    __syncthreads();
    const int j_lo = static_cast<int>(max_i64(lo - t0, 0)), j_hi = static_cast<int>(min_i64(hi - t0, n));
    for (int j = j_lo; j < j_hi; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < D) dot += qr[i] * s_k[j][d];
      }
#pragma unroll
      for (int s = 16; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
      float x = dot * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      const float m_new = fmaxf(m, x);
      const float alpha = expf(m - m_new);  // m = -inf on the first key: alpha = 0
      const float w = expf(x - m_new);
      l = l * alpha + w;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < D) acc[i] = acc[i] * alpha + w * s_v[j][d];
      }
      m = m_new;
    }
  }
  if (!row_live) return;

  const bool any = l > 0.0f;
  float inv = any ? 1.0f / l : 0.0f;
  float lse = any ? m + logf(l) : -INFINITY;
  if (p.sinks != nullptr) {
    const attnkit::detail::SinkFold f = attnkit::detail::fold_sink(lse, p.sinks[h]);
    inv *= f.weight;
    lse = f.lse;
  }
  const std::int64_t out_off =
      e.q_base_batch * p.o_batch_stride + h * p.o_head_stride + (e.q_start + r) * p.o_row_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d >= D) continue;
    if (p.out_kind == OutKind::kF32) {
      static_cast<float*>(p.out)[out_off + d] = acc[i] * inv;
    } else {
      store_float(static_cast<T*>(p.out) + out_off + d, acc[i] * inv);
    }
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride + (e.q_start + r) * p.lse_row_stride] = lse;
  }
}

}  // namespace attnkit::cuda_prefill
