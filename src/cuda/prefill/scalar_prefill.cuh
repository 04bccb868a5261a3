// Scalar-online prefill on the GPU: the exact path for f32 inputs (and head dims without a tiled
// instantiation). Seed 004's scalar baseline, one warp per query row.
//
// Inputs:  as tiled_prefill.cuh (any storage dtype; strides free, D contiguous).
// Parallelism: a block of kScalarWarpsPerBlock warps, each warp one query row of one head; the
//          head_dim is spread over the 32 lanes (up to 8 elements each), the dot product reduced
//          with shuffles, keys visited one by one with an online softmax in f32 (expf, not exp2
//          approximations, to meet the f32 tolerance).
// Masks:   the loop runs over the visible key range only (masked keys are skipped, not scored).
// Bound:   latency of the per-key shuffle reduction; correct, not fast.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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
__global__ void __launch_bounds__(kScalarWarpsPerBlock * 32) scalar_prefill_kernel(const PrefillParams p) {
  constexpr int kPerLane = kScalarMaxHeadDim / 32;
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kScalarWarpsPerBlock + threadIdx.x / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  const SequenceExtent e = sequence_extent(p, b);
  if (r >= e.q_len) return;
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
    qr[i] = d < D ? load_float(q + d) : 0.0f;
    acc[i] = 0.0f;
  }

  const std::int64_t pos = r + static_cast<std::int64_t>(e.kv_len) - e.q_len;
  const std::int64_t lo = p.window > 0 ? max_i64(0, pos - p.window + 1) : 0;
  const std::int64_t hi = p.causal ? min_i64(e.kv_len, pos + 1) : e.kv_len;
  float m = -INFINITY, l = 0.0f;
  for (std::int64_t j = lo; j < hi; ++j) {
    const T* kj = k + j * p.k_row_stride;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) dot += qr[i] * load_float(kj + d);
    }
#pragma unroll
    for (int s = 16; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    float x = dot * p.scale;
    if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
    const float m_new = fmaxf(m, x);
    const float alpha = expf(m - m_new);  // m = -inf on the first key: alpha = 0
    const float w = expf(x - m_new);
    l = l * alpha + w;
    const T* vj = v + j * p.v_row_stride;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = acc[i] * alpha + w * load_float(vj + d);
    }
    m = m_new;
  }

  const bool any = l > 0.0f;
  const float inv = any ? 1.0f / l : 0.0f;
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
    p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride + (e.q_start + r) * p.lse_row_stride] =
        any ? m + logf(l) : -INFINITY;
  }
}

}  // namespace attnkit::cuda_prefill
