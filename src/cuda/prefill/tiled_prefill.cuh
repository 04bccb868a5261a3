// Tiled prefill attention (FlashAttention-2 class), tensor cores via mma.sync m16n8k16.
//
// Inputs:  q [batch, heads, q_len, D], k/v [batch, kv_heads, kv_len, D] (f16 or bf16, any strides
//          with D contiguous and 16-byte aligned rows), or ragged [1, heads, total, D] + cu_seqlens.
// Output:  out in the input dtype or f32, optional f32 LSE; with key splits, normalised f32
//          partial states in the workspace instead (merged by split_merge.cuh).
// Parallelism: one block per (query tile of 16 * warps rows, head, batch * split). Each warp owns
//          16 query rows: S = Q K^T and O += P V run on tensor cores with the scores held in
//          registers; P goes from the S accumulators straight into the A operand of the second
//          product. K and V tiles stream through `stages` shared-memory buffers with cp.async: the
//          next K tile loads while this tile's scores are computed, the next V tile while P V runs.
//          GQA: head h reads KV head h / group_size.
// Masks:   causal bottom-right aligned (row r at position r + kv_len - q_len), sliding window.
//          Tiles no row can see are never loaded; only boundary tiles pay for the mask test.
//          Masked keys get probability exactly 0; a row with no visible key writes 0 and LSE -inf.
// Bound:   tensor-core issue and shared-memory bandwidth (ldmatrix of K/V fragments per warp) on
//          long sequences; global memory only for very short ones.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/prefill/mma_primitives.cuh"
#include "cuda/prefill/prefill_config.hpp"
#include "cuda/prefill/prefill_params.cuh"

namespace attnkit::cuda_prefill {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Copies `rows` rows of D elements (row r at src + r * stride) into shared rows of `Pitch`
// elements; rows at or beyond `valid` are zero-filled so they contribute nothing.
template <int D, int Pitch, int Threads, class T>
__device__ inline void load_tile(T* dst, const T* src, std::int64_t stride, int rows, int valid, int tid) {
  constexpr int kChunks = D / 8;
  for (int i = tid; i < rows * kChunks; i += Threads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    const T* g = ok ? src + r * stride + c * 8 : src;
    cp_async_16(shared_address(dst + r * Pitch + c * 8), g, ok ? 16 : 0);
  }
}

template <int D, int Bc, int Warps, int Stages, bool QInRegs, class T>
__global__ void __launch_bounds__(Warps * 32, 1) tiled_prefill_kernel(const PrefillParams p) {
  using H = HalfType<T>;
  constexpr int Br = Warps * 16;
  constexpr int Pitch = D + kSharedRowPad;
  constexpr int Threads = Warps * 32;
  constexpr int DTiles = D / 8;   // n-tiles of the output
  constexpr int KTiles = Bc / 8;  // n-tiles of the scores
  static_assert(D % 16 == 0 && Bc % 16 == 0, "tile sizes must be multiples of 16");

  extern __shared__ uint4 shared_raw[];
  T* s_q = reinterpret_cast<T*>(shared_raw);
  T* s_k = s_q + Br * Pitch;
  T* s_v = s_k + Stages * Bc * Pitch;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;  // mma fragment row group and column pair
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // longest (causal) tiles first
  const int h = blockIdx.y;
  const int b = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const SequenceExtent e = sequence_extent(p, b);
  const int m0 = q_tile * Br;
  if (m0 >= e.q_len) return;
  const int kvh = h / p.group_size;
  const int rows_here = min(Br, e.q_len - m0);
  const std::int64_t offset = static_cast<std::int64_t>(e.kv_len) - e.q_len;  // bottom-right causal

  // Keys any row of this block can see, as a tile range (then this split's share of it).
  const std::int64_t first_pos = m0 + offset, last_pos = m0 + rows_here - 1 + offset;
  const std::int64_t key_lo = p.window > 0 ? max_i64(0, first_pos - p.window + 1) : 0;
  const std::int64_t key_hi = p.causal ? min_i64(e.kv_len, last_pos + 1) : e.kv_len;
  int tile_lo = 0, tile_hi = 0;
  if (key_hi > key_lo) {
    tile_lo = static_cast<int>(key_lo / Bc);
    tile_hi = static_cast<int>((key_hi + Bc - 1) / Bc);
  }
  if (p.splits > 1) {
    const int s0 = split * p.tiles_per_split;
    tile_lo = max(tile_lo, s0);
    tile_hi = min(tile_hi, s0 + p.tiles_per_split);
  }

  const T* q_ptr = static_cast<const T*>(p.q) + e.q_base_batch * p.q_batch_stride + h * p.q_head_stride +
                   (e.q_start + m0) * p.q_row_stride;
  const T* k_ptr = static_cast<const T*>(p.k) + e.q_base_batch * p.k_batch_stride + kvh * p.k_head_stride +
                   e.k_start * p.k_row_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + e.q_base_batch * p.v_batch_stride + kvh * p.v_head_stride +
                   e.k_start * p.v_row_stride;

  float o[DTiles][4];
#pragma unroll
  for (int i = 0; i < DTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max, log2 units
  float l_run[2] = {0.0f, 0.0f};            // running sum (this thread's columns only)
  std::uint32_t qf[QInRegs ? D / 16 : 1][4];

  const float scale_log2 = p.scale * kLog2e;
  const int row_in_block0 = warp * 16 + g;  // this thread's rows: +0 and +8
  const std::int64_t pos0 = m0 + row_in_block0 + offset;

  if (tile_lo < tile_hi) {
    load_tile<D, Pitch, Threads>(s_q, q_ptr, p.q_row_stride, Br, rows_here, tid);
    load_tile<D, Pitch, Threads>(s_k, k_ptr + static_cast<std::int64_t>(tile_lo) * Bc * p.k_row_stride,
                                 p.k_row_stride, Bc, e.kv_len - tile_lo * Bc, tid);
    cp_async_commit();
    load_tile<D, Pitch, Threads>(s_v, v_ptr + static_cast<std::int64_t>(tile_lo) * Bc * p.v_row_stride,
                                 p.v_row_stride, Bc, e.kv_len - tile_lo * Bc, tid);
    cp_async_commit();

    const std::uint32_t q_addr =
        shared_address(s_q + (warp * 16 + lane % 16) * Pitch + (lane / 16) * 8);
    for (int t = tile_lo; t < tile_hi; ++t) {
      const int it = t - tile_lo;
      const int stage = it % Stages, next_stage = (it + 1) % Stages;
      const int key0 = t * Bc;
      if (t + 1 < tile_hi) {
        load_tile<D, Pitch, Threads>(s_k + next_stage * Bc * Pitch,
                                     k_ptr + static_cast<std::int64_t>(key0 + Bc) * p.k_row_stride, p.k_row_stride,
                                     Bc, e.kv_len - key0 - Bc, tid);
      }
      cp_async_commit();
      cp_async_wait<2>();  // Q and K[t] have landed
      __syncthreads();

      if constexpr (QInRegs) {
        if (it == 0) {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], q_addr + kk * 32);
        }
      }

      // S = Q K^T for this warp's 16 rows and Bc keys.
      float s[KTiles][4];
#pragma unroll
      for (int i = 0; i < KTiles; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
      const T* k_stage = s_k + stage * Bc * Pitch;
      const std::uint32_t k_addr = shared_address(k_stage + (lane % 8 + (lane / 16) * 8) * Pitch + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t a_local[4];
        if constexpr (!QInRegs) ldmatrix_x4(a_local, q_addr + kk * 32);
        const std::uint32_t(&a)[4] = QInRegs ? qf[QInRegs ? kk : 0] : a_local;
#pragma unroll
        for (int nn = 0; nn < Bc / 16; ++nn) {
          std::uint32_t bf[4];
          ldmatrix_x4(bf, k_addr + (nn * 16 * Pitch + kk * 16) * 2);
          H::mma(s[2 * nn], a, bf[0], bf[1]);
          H::mma(s[2 * nn + 1], a, bf[2], bf[3]);
        }
      }

      // Scale (and soft-cap) into log2 units; mask only tiles some row cannot fully see.
      const bool needs_mask = key0 + Bc > e.kv_len || (p.causal && key0 + Bc - 1 > first_pos) ||
                              (p.window > 0 && key0 < last_pos - p.window + 1);
#pragma unroll
      for (int i = 0; i < KTiles; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float x = s[i][r];
          if (p.softcap > 0.0f) {
            x = p.softcap * tanhf(x * p.scale / p.softcap) * kLog2e;
          } else {
            x *= scale_log2;
          }
          if (needs_mask) {
            const std::int64_t key = key0 + i * 8 + 2 * c + (r & 1);
            const std::int64_t pos = pos0 + (r >= 2 ? 8 : 0);
            const bool visible = key < e.kv_len && (!p.causal || key <= pos) && (p.window <= 0 || key > pos - p.window);
            if (!visible) x = -INFINITY;
          }
          s[i][r] = x;
        }
      }

      // Online softmax: rows g (regs 0,1) and g + 8 (regs 2,3); a row spans the 4 lanes of a quad.
      float alpha[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = m_run[hr];
#pragma unroll
        for (int i = 0; i < KTiles; ++i) mx = fmaxf(mx, fmaxf(s[i][2 * hr], s[i][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.0f : mx;  // all masked so far: keep exp2 finite
        alpha[hr] = exp2f(m_run[hr] - m_use);
        m_run[hr] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < KTiles; ++i) {
          s[i][2 * hr] = exp2f(s[i][2 * hr] - m_use);
          s[i][2 * hr + 1] = exp2f(s[i][2 * hr + 1] - m_use);
          sum += s[i][2 * hr] + s[i][2 * hr + 1];
        }
        l_run[hr] = l_run[hr] * alpha[hr] + sum;
      }
#pragma unroll
      for (int i = 0; i < DTiles; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
      // P in the A-operand layout of m16n8k16: key block kk = score n-tiles 2kk and 2kk + 1.
      std::uint32_t pf[Bc / 16][4];
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        pf[kk][0] = H::pack(s[2 * kk][0], s[2 * kk][1]);
        pf[kk][1] = H::pack(s[2 * kk][2], s[2 * kk][3]);
        pf[kk][2] = H::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pf[kk][3] = H::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }

      if (t + 1 < tile_hi) {
        load_tile<D, Pitch, Threads>(s_v + next_stage * Bc * Pitch,
                                     v_ptr + static_cast<std::int64_t>(key0 + Bc) * p.v_row_stride, p.v_row_stride,
                                     Bc, e.kv_len - key0 - Bc, tid);
      }
      cp_async_commit();
      cp_async_wait<2>();  // V[t] has landed
      __syncthreads();

      // O += P V.
      const T* v_stage = s_v + stage * Bc * Pitch;
      const std::uint32_t v_addr =
          shared_address(v_stage + (lane % 8 + ((lane / 8) % 2) * 8) * Pitch + (lane / 16) * 8);
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
#pragma unroll
        for (int nn = 0; nn < D / 16; ++nn) {
          std::uint32_t bf[4];
          ldmatrix_x4_trans(bf, v_addr + (kk * 16 * Pitch + nn * 16) * 2);
          H::mma(o[2 * nn], pf[kk], bf[0], bf[1]);
          H::mma(o[2 * nn + 1], pf[kk], bf[2], bf[3]);
        }
      }
    }
    cp_async_wait<0>();
  }

  // Epilogue: finish the row sums across the quad, normalise, write.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 1);
    l_run[hr] += __shfl_xor_sync(0xffffffffu, l_run[hr], 2);
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = row_in_block0 + hr * 8;
    if (r >= rows_here) continue;
    const bool any = l_run[hr] > 0.0f;
    const float inv = any ? 1.0f / l_run[hr] : 0.0f;
    const float lse = any ? (m_run[hr] + log2f(l_run[hr])) * kLn2 : -INFINITY;
    if (p.splits > 1) {
      const std::int64_t row = (static_cast<std::int64_t>(split) * p.num_heads + h) * p.workspace_rows +
                               e.workspace_row0 + m0 + r;
      float* dst = p.partial_out + row * D;
#pragma unroll
      for (int i = 0; i < DTiles; ++i) {
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * c) = make_float2(o[i][2 * hr] * inv, o[i][2 * hr + 1] * inv);
      }
      if (c == 0) p.partial_lse[row] = lse;
      continue;
    }
    const std::int64_t out_off = e.q_base_batch * p.o_batch_stride + h * p.o_head_stride +
                                 (e.q_start + m0 + r) * p.o_row_stride;
    if (p.out_kind == OutKind::kF32) {
      float* dst = static_cast<float*>(p.out) + out_off;
#pragma unroll
      for (int i = 0; i < DTiles; ++i) {
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * c) = make_float2(o[i][2 * hr] * inv, o[i][2 * hr + 1] * inv);
      }
    } else {
      T* dst = static_cast<T*>(p.out) + out_off;
#pragma unroll
      for (int i = 0; i < DTiles; ++i) {
        *reinterpret_cast<std::uint32_t*>(dst + i * 8 + 2 * c) = H::pack(o[i][2 * hr] * inv, o[i][2 * hr + 1] * inv);
      }
    }
    if (p.lse != nullptr && c == 0) {
      p.lse[e.q_base_batch * p.lse_batch_stride + h * p.lse_head_stride + (e.q_start + m0 + r) * p.lse_row_stride] = lse;
    }
  }
}

}  // namespace attnkit::cuda_prefill
